#pragma once

// The breaker actor (the host and endpoint breakers of hedging): a wrapper of
// breaker_registry, one per client (host and endpoint tiers). It only ever
// gates hedges. Time is the actor clock (virtual time on the test
// coordinator). Every OPEN transition of either tier is announced to the
// hook subscribers as exactly one circuit_opened(scope, key).

#include "actors/hedge/hedge_messages.hpp"

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

namespace outbound {
inline namespace hedge {

/// Public interface of the breaker actor (what hedging_handles gives out):
///
/// - `breaker_snapshot_request -> breaker_snapshot_reply`,
///   `breaker_all_request -> breaker_all_reply` (every breaker).
/// - `hedge_subscribe`: adds a hook subscriber.
///
/// The gates and records the call actors send (a hedge's permit, the
/// winner's health) are a private extension of this interface
/// (actors/hedge/detail/hedge_actors.hpp); the client spawns the actor.
using breaker_actor = caf::typed_actor<
  caf::replies_to<breaker_snapshot_request>::with<breaker_snapshot_reply>,
  caf::replies_to<breaker_all_request>::with<breaker_all_reply>,
  caf::reacts_to<hedge_subscribe>>;

} // namespace hedge
} // namespace outbound
