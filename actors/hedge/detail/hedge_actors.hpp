#pragma once

// The full interfaces of the hedge actors: the messages the call actors and
// the service client send them for each hedged call. Private (not
// installed): users hold the public handles of actors/hedge/breaker.hpp and
// actors/hedge/endpoint_stats.hpp (snapshots, metrics, hook subscription),
// to which these handles convert.

#include "actors/hedge/breaker.hpp"
#include "actors/hedge/endpoint_stats.hpp"
#include "actors/hedge/hedge_messages.hpp"
#include "config/hedge_config.hpp"

#include <caf/actor_system.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <optional>
#include <string>

namespace outbound {
inline namespace hedge {

/// The endpoint_stats actor with what the call actors send it:
///
/// - `hedge_plan_request -> hedge_plan`: counts a request, its hedge delay.
/// - `hedge_token_request -> bool`: the budget gate (true: a token is held).
/// - `hedge_token_outcome`: the held token's hedge went out (hedged +1,
///   hedge_fired to the subscribers) or not (the token goes back).
/// - `hedge_token_abandon`: the tokens still on a dead owner's lease go back.
/// - `hedge_observation`: the winner's latency and health.
/// - `hedge_race_result`: hedge_wins / primary_wins.
/// - `hedge_circuit_blocked`: circuit_blocked +1.
using endpoint_stats_impl_actor = endpoint_stats_actor::extend<
  caf::replies_to<hedge_plan_request>::with<hedge_plan>,
  caf::replies_to<hedge_token_request>::with<bool>,
  caf::reacts_to<hedge_observation>, caf::reacts_to<hedge_race_result>,
  caf::reacts_to<hedge_circuit_blocked>, caf::reacts_to<hedge_token_outcome>,
  caf::reacts_to<hedge_token_abandon>>;

/// The breaker actor with what the call actors send it:
///
/// - `breaker_allow_request -> breaker_gate_result`: the breaker gate of
///   one hedge (host tier, then endpoint tier). On `allowed` the permit is
///   later sent back in `breaker_complete` (the hedge won) or
///   `breaker_release` (cancelled, or not sent because the budget said no).
/// - `breaker_record`: the winner's health, into both tiers.
using breaker_impl_actor = breaker_actor::extend<
  caf::replies_to<breaker_allow_request>::with<breaker_gate_result>,
  caf::reacts_to<breaker_record>, caf::reacts_to<breaker_complete>,
  caf::reacts_to<breaker_release>>;

/// How an endpoint_stats actor starts and stops with a snapshot.
struct endpoint_stats_persistence {
  /// Imported when the actor starts (checked by the caller first:
  /// check_hedge_snapshot). [none]
  std::optional<hedge_snapshot> initial;
  /// Written (write_hedge_snapshot_file) when the actor stops, as of the
  /// last message it handled; a failed write is dropped (the next start
  /// is cold). Empty: nothing is written. [empty]
  std::string save_file;
};

/// Spawns the endpoint_stats actor for the transport defaults `cfg`
/// (max_keys bounds its keys). Throws config_error naming the bad `hedge.*`
/// field.
endpoint_stats_impl_actor
spawn_endpoint_stats(caf::actor_system& sys, const hedge_config& cfg,
                     endpoint_stats_persistence persistence = {});

/// Throws config_error naming the field when `s` would be rejected by an
/// endpoint_stats actor for `cfg` (a trial import into a scratch state).
void check_hedge_snapshot(const hedge_config& cfg, const hedge_snapshot& s);

/// Spawns the breaker actor for the transport defaults `cfg` (its breaker
/// config is the host tier's; max_keys bounds each tier). Throws
/// config_error naming the bad `hedge.*` field.
breaker_impl_actor spawn_breaker(caf::actor_system& sys,
                                 const hedge_config& cfg);

} // namespace hedge
} // namespace outbound
