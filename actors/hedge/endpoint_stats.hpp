#pragma once

// The endpoint_stats actor (hedge delays, budgets, stats, hooks): a wrapper of
// endpoint_stats_state, one per client. Time is the actor clock (virtual
// time on the test coordinator). Grants of a hedge token are announced to
// the hook subscribers as hedge_fired(key).

#include "actors/hedge/hedge_messages.hpp"
#include "config/hedge_config.hpp"

#include <caf/actor_system.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

namespace outbound {

/// Typed interface of the endpoint_stats actor.
///
/// - `hedge_plan_request -> hedge_plan`: counts a request, its hedge delay.
/// - `hedge_token_request -> bool`: the budget gate (true: a token is held).
/// - `hedge_token_outcome`: the held token's hedge went out (hedged +1,
///   hedge_fired to the subscribers) or not (the token goes back).
/// - `hedge_token_abandon`: the tokens still on a dead owner's lease go back.
/// - `hedge_observation`: the winner's latency and health.
/// - `hedge_race_result`: hedge_wins / primary_wins.
/// - `hedge_circuit_blocked`: circuit_blocked +1.
/// - `latency_quantile_request -> latency_quantile_reply`.
/// - `hedge_stats_request -> hedge_stats_reply`,
///   `hedge_global_stats_request -> hedge_stats_snapshot`,
///   `hedge_all_stats_request -> hedge_all_stats_reply` (every key),
///   `hedge_metrics_request -> hedge_metrics_reply` (every key's counters,
///   tokens and next delay).
/// - `hedge_subscribe`: adds a hook subscriber.
using endpoint_stats_actor = caf::typed_actor<
  caf::replies_to<hedge_plan_request>::with<hedge_plan>,
  caf::replies_to<hedge_token_request>::with<bool>,
  caf::reacts_to<hedge_observation>, caf::reacts_to<hedge_race_result>,
  caf::reacts_to<hedge_circuit_blocked>, caf::reacts_to<hedge_token_outcome>,
  caf::reacts_to<hedge_token_abandon>,
  caf::replies_to<latency_quantile_request>::with<latency_quantile_reply>,
  caf::replies_to<hedge_stats_request>::with<hedge_stats_reply>,
  caf::replies_to<hedge_global_stats_request>::with<hedge_stats_snapshot>,
  caf::replies_to<hedge_all_stats_request>::with<hedge_all_stats_reply>,
  caf::replies_to<hedge_metrics_request>::with<hedge_metrics_reply>,
  caf::reacts_to<hedge_subscribe>>;

/// Spawns the actor for the transport defaults `cfg` (max_keys bounds its
/// keys). Throws config_error naming the bad `hedge.*` field.
endpoint_stats_actor spawn_endpoint_stats(caf::actor_system& sys,
                                          const hedge_config& cfg);

} // namespace outbound
