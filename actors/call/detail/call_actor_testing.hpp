#pragma once

// Fault injection into a call actor, for outbound's own tests. Not part of
// the library's API: this directory is not installed (CMakeLists.txt), and
// make_service_client never sets a hook.

#include "actors/call/call_actor.hpp"

#include <caf/actor_system.hpp>

#include <cstdint>
#include <functional>
#include <memory>

namespace outbound::detail {

/// Where a call actor runs its test hook.
enum class call_fault_point {
  /// First thing when the transport's answer to send `id` (or its failure)
  /// arrives, before the race reads it.
  answer,
  /// The breakers allowed attempt `id`'s hedge and the race wants it: after
  /// the permit was stored in the call's state, before the budget is asked
  /// for a token.
  gate_reply,
  /// First thing when the budget's reply (or its failure) for attempt
  /// `id`'s hedge arrives, before the race reads it.
  token_reply,
};

/// The hooks a test hands to spawn_call_actor_for_testing.
struct call_test_hooks {
  /// Runs at each fault point with the point and its id; a throw takes that
  /// handler's fault path (`guarded`), as a real failure there would.
  std::function<void(call_fault_point, uint64_t id)> at;
};

/// spawn_call_actor with test hooks (`hooks` may be null).
call_actor spawn_call_actor_for_testing(
  caf::actor_system& sys, std::shared_ptr<const call_context> ctx,
  uint64_t seed, std::shared_ptr<const call_test_hooks> hooks);

} // namespace outbound::detail
