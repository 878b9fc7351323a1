#pragma once

// The hedging hooks as callbacks (httpx-hedged's
// on_hedge_fired / on_circuit_open): a hook subscriber actor that calls
// plain functions. Subscribe it to both hedging actors with
// `hedge_subscribe{spawn_hedge_hook_callbacks(sys, cbs)}`.

#include "actors/hedge/hedge_messages.hpp"

#include <caf/actor_system.hpp>

#include <functional>
#include <string>

namespace outbound {
inline namespace hedge {

/// Callbacks of the hedging hooks. Either may be empty. An exception thrown
/// by a callback is swallowed (a hook never fails a call).
struct hedge_hook_callbacks {
  /// A hedge of `key` passed every gate and goes out.
  std::function<void(const std::string& key)> on_hedge_fired;
  /// The breaker of `key` went OPEN; `scope` is "host" or "endpoint".
  /// Exactly once per OPEN transition.
  std::function<void(const std::string& scope, const std::string& key)>
    on_circuit_open;
  /// Run the callbacks on a detached actor (its own thread), so a blocking
  /// callback cannot starve the scheduler. False runs them on a scheduled
  /// actor (quick callbacks, virtual-time tests). [true]
  bool detached = true;
};

/// Spawns the hook subscriber that runs `cbs`.
hedge_hook_actor spawn_hedge_hook_callbacks(caf::actor_system& sys,
                                            hedge_hook_callbacks cbs);

} // namespace hedge
} // namespace outbound
