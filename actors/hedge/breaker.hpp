#pragma once

// The breaker actor (the host and endpoint breakers of hedging): a wrapper of
// breaker_registry, one per client (host and endpoint tiers). It only ever
// gates hedges. Time is the actor clock (virtual time on the test
// coordinator). Every OPEN transition of either tier is announced to the
// hook subscribers as exactly one circuit_opened(scope, key).

#include "actors/hedge/hedge_messages.hpp"
#include "config/hedge_config.hpp"

#include <caf/actor_system.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

namespace outbound {

/// Typed interface of the breaker actor.
///
/// - `breaker_allow_request -> breaker_gate_result`: the breaker gate of
///   one hedge (host tier, then endpoint tier). On `allowed` the permit is
///   later sent back in `breaker_complete` (the hedge won) or
///   `breaker_release` (cancelled, or not sent because the budget said no).
/// - `breaker_record`: the winner's health, into both tiers.
/// - `breaker_snapshot_request -> breaker_snapshot_reply`,
///   `breaker_all_request -> breaker_all_reply` (every breaker).
/// - `hedge_subscribe`: adds a hook subscriber.
using breaker_actor = caf::typed_actor<
  caf::replies_to<breaker_allow_request>::with<breaker_gate_result>,
  caf::reacts_to<breaker_record>, caf::reacts_to<breaker_complete>,
  caf::reacts_to<breaker_release>,
  caf::replies_to<breaker_snapshot_request>::with<breaker_snapshot_reply>,
  caf::replies_to<breaker_all_request>::with<breaker_all_reply>,
  caf::reacts_to<hedge_subscribe>>;

/// Spawns the actor for the transport defaults `cfg` (its breaker config is
/// the host tier's; max_keys bounds each tier). Throws config_error naming
/// the bad `hedge.*` field.
breaker_actor spawn_breaker(caf::actor_system& sys, const hedge_config& cfg);

} // namespace outbound
