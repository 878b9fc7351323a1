#pragma once

// Messages of the hedging actors (budget, breakers, stats and hooks): the
// endpoint_stats actor (actors/hedge/endpoint_stats.hpp), the breaker actor
// (actors/hedge/breaker.hpp) and the hook subscriber. Each request has its
// own struct, so no new atom is needed; like actors/messages.hpp the types
// are local-only and whitelisted with CAF_ALLOW_UNSAFE_MESSAGE_TYPE.

#include "actors/hedge/breaker_state.hpp"
#include "actors/hedge/endpoint_stats_state.hpp"
#include "actors/hedge/hedge_snapshot.hpp"
#include "config/hedge_config.hpp"
#include "core/hedge_types.hpp"

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace outbound {
inline namespace hedge {

// -- hooks --------------------------------------------------------------------

/// on_hedge_fired(key): a hedge of `key` passed every gate (breakers and
/// budget) and went out. Sent by the endpoint_stats actor when the call
/// actor reports the hedge sent (hedge_token_outcome), never for a token
/// granted and then not used.
struct hedge_fired {
  std::string key;
};

/// on_circuit_open(scope, key): the breaker of `key` in `scope` went OPEN
/// ("host" / "endpoint" via to_string(scope)). Exactly one per OPEN
/// transition (a half-open breaker that re-opens sends another). Sent by the
/// breaker actor.
struct circuit_opened {
  breaker_scope scope = breaker_scope::host;
  std::string key;
};

/// Typed interface of a hook subscriber.
using hedge_hook_actor
  = caf::typed_actor<caf::reacts_to<hedge_fired>, caf::reacts_to<circuit_opened>>;

/// Subscribes a hook actor (to either hedging actor; the subscription ends
/// when the subscriber terminates).
struct hedge_subscribe {
  hedge_hook_actor subscriber;
};

// -- endpoint_stats -------------------------------------------------------------

/// "Hedge plan for this key" (every request, hedgeable or not): counts the
/// request and answers a hedge_plan. `config` is the key's effective config
/// (resolve(transport defaults, endpoint overrides)).
struct hedge_plan_request {
  std::string key;
  effective_hedge_config config;
};

/// The budget gate: answers `bool` (true: a token was taken; the asker
/// settles it with one hedge_token_outcome). With an `owner` (non-zero, the
/// asking actor's id), the granted token is also held on the owner's lease
/// until its outcome arrives, so a hedge_token_abandon can give it back
/// when the owner dies with the reply still in flight.
struct hedge_token_request {
  std::string key;
  uint64_t owner = 0;
};

/// What became of a granted token: `sent` true — the hedge went out
/// (hedged_requests +1, hedge_fired to the subscribers); false — it was not
/// sent and the token goes back to the bucket. `owner` as in the request.
struct hedge_token_outcome {
  std::string key;
  bool sent = false;
  uint64_t owner = 0;
};

/// The owner stopped: every token granted on its lease and not settled by a
/// hedge_token_outcome goes back to its bucket (the grant's reply may have
/// reached a dead actor). The owner sends it last, after its outcomes, so
/// FIFO order between the two actors makes it exact.
struct hedge_token_abandon {
  uint64_t owner = 0;
};

/// The winner's latency (seconds from the request's start) and health.
struct hedge_observation {
  std::string key;
  double latency = 0.0;
  call_health health = call_health::success;
};

/// The end of a race: counts hedge_wins / primary_wins when `hedged`.
struct hedge_race_result {
  std::string key;
  bool hedged = false;
  bool hedge_won = false;
};

/// A hedge of `key` was suppressed by a breaker (circuit_blocked +1).
struct hedge_circuit_blocked {
  std::string key;
};

/// latency_quantile(key, q) → latency_quantile_reply.
struct latency_quantile_request {
  std::string key;
  double q = 0.5;
};

struct latency_quantile_reply {
  /// Seconds; nullopt when the key is not tracked or has no sample.
  std::optional<double> seconds;
};

/// Counters of one key → hedge_stats_reply.
struct hedge_stats_request {
  std::string key;
};

struct hedge_stats_reply {
  /// nullopt when the key is not tracked.
  std::optional<hedge_stats_snapshot> stats;
};

/// Counters over every key → hedge_stats_snapshot.
struct hedge_global_stats_request {};

/// Counters of every tracked key → hedge_all_stats_reply.
struct hedge_all_stats_request {};

struct hedge_all_stats_reply {
  /// (key, counters), most recently used first.
  std::vector<std::pair<std::string, hedge_stats_snapshot>> keys;
};

/// Counters, tokens and next hedge delay of every tracked key →
/// hedge_metrics_reply (metrics exporters: the metrics poller).
struct hedge_metrics_request {};

struct hedge_metrics_reply {
  /// Most recently used first.
  std::vector<hedge_key_metrics> keys;
};

/// Every key's latency sketch → hedge_snapshot
/// (actors/hedge/hedge_snapshot.hpp; to_json makes the file format of it).
/// Counts nothing.
struct hedge_snapshot_export_request {};

/// Imports a snapshot's sketches (all or nothing, see
/// endpoint_stats_state::import_snapshot) → hedge_snapshot_import_result.
struct hedge_snapshot_import {
  hedge_snapshot snapshot;
};

/// The answer to hedge_snapshot_import: ok() and the number of keys
/// imported, or the field that was rejected (`version`, `keys`,
/// `keys[i].key`, `keys[i].sketch.<field>`, ...) and why; on an error
/// nothing was imported.
struct hedge_snapshot_import_result {
  std::size_t keys = 0;
  /// The rejected field; empty on success.
  std::string error_field;
  /// "<field>: <why>"; empty on success.
  std::string error;

  bool ok() const {
    return error.empty();
  }
};

// -- breaker --------------------------------------------------------------------

/// The breaker gate of one hedge → breaker_gate_result. `endpoint_breaker`
/// is the endpoint's effective breaker config (used when its breaker is
/// created). On `allowed` the permit must later be completed or released.
struct breaker_allow_request {
  std::string host_key;
  std::string endpoint_key;
  breaker_config endpoint_breaker;
};

/// The winner's health, into both tiers (every finished call).
struct breaker_record {
  std::string host_key;
  std::string endpoint_key;
  breaker_config endpoint_breaker;
  call_health health = call_health::success;
};

/// The hedge of `permit` won with `health`: a half-open trial outcome.
struct breaker_complete {
  hedge_permit permit;
  call_health health = call_health::success;
};

/// The hedge of `permit` was cancelled (its primary won) or never sent (the
/// budget said no): the probe permits go back, no trial counted.
struct breaker_release {
  hedge_permit permit;
};

/// State of one breaker → breaker_snapshot_reply.
struct breaker_snapshot_request {
  breaker_scope scope = breaker_scope::host;
  std::string key;
};

struct breaker_snapshot_reply {
  /// nullopt when the key is not tracked in that tier.
  std::optional<breaker_snapshot> snapshot;
};

/// Every breaker of both tiers → breaker_all_reply (metrics exporters:
/// the metrics poller).
struct breaker_all_request {};

struct breaker_all_reply {
  std::vector<breaker_key_snapshot> breakers;
};

} // namespace hedge
} // namespace outbound

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::hedge_fired)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::circuit_opened)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::hedge_subscribe)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::hedge_plan_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::hedge_plan)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::hedge_token_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::hedge_token_outcome)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::hedge_token_abandon)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::hedge_observation)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::hedge_race_result)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::hedge_circuit_blocked)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::latency_quantile_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::latency_quantile_reply)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::hedge_stats_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::hedge_stats_reply)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::hedge_stats_snapshot)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::hedge_global_stats_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::hedge_all_stats_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::hedge_all_stats_reply)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::breaker_allow_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::breaker_gate_result)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::breaker_record)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::breaker_complete)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::breaker_release)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::breaker_snapshot_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::breaker_snapshot_reply)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::hedge_metrics_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::hedge_metrics_reply)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::breaker_all_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::breaker_all_reply)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::hedge_snapshot_export_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::hedge_snapshot)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::hedge_snapshot_import)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::hedge_snapshot_import_result)
