#pragma once

// What every call actor of a hedging client shares: the configs resolved
// once and the full handles of the client's hedge actors (they take the
// plans, tokens and records of actors/hedge/detail/hedge_actors.hpp).
// Private: a user sees hedging_options and hedging_handles
// (actors/call/hedging.hpp).

#include "actors/call/hedging.hpp"
#include "actors/hedge/detail/hedge_actors.hpp"

#include <caf/actor_system.hpp>

#include <memory>
#include <string>
#include <unordered_map>

namespace outbound {
inline namespace call {

/// What every call actor of a hedging client shares; immutable once built.
struct hedging_context {
  hedge_config config;
  route_table routes;
  /// The effective config of unmatched (host-keyed) requests.
  effective_hedge_config host_config;
  /// The effective config of each registered endpoint, by name.
  std::unordered_map<std::string, effective_hedge_config> endpoint_configs;
  /// The per-key latency sketches, RPS estimates and budgets.
  endpoint_stats_impl_actor stats;
  /// The host and endpoint breakers.
  breaker_impl_actor breakers;

  /// The effective config of a routed request (matched or host-keyed).
  const effective_hedge_config& config_for(const route_result& r) const;
};

/// Validates `opts`, spawns the endpoint_stats and breaker actors and
/// subscribes `opts.hooks` to both. Throws config_error naming the field.
std::shared_ptr<const hedging_context>
make_hedging_context(caf::actor_system& sys, const hedging_options& opts);

} // namespace call
} // namespace outbound
