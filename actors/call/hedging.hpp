#pragma once

// Adaptive hedging of a service client: what a user configures
// (hedging_options, in client_options) and what every call actor of that
// client shares (hedging_context). The race's rules are the pure state
// machine core/hedge_race.hpp, driven by the call actor
// (actors/call/call_actor.cpp); the learned delays and the budget live in
// the endpoint_stats actor, the breakers in the breaker actor
// (actors/hedge/).
//
// Sources: Dean & Barroso, "The Tail at Scale" (CACM 2013) for hedged
// requests; httpx-hedged 0.5.0 (transport.py, _config.py) and hedge-python
// for the defaults, the gates and the per-endpoint registration.

#include "actors/hedge/breaker.hpp"
#include "actors/hedge/endpoint_stats.hpp"
#include "actors/hedge/hedge_messages.hpp"
#include "actors/hedge/route_table.hpp"
#include "config/hedge_config.hpp"

#include <caf/actor_system.hpp>

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

namespace outbound {
inline namespace call {

/// Hedging of one service client. Register endpoints before the client is
/// made (registration is setup-time only):
///
///     hedging_options h;
///     h.config.percentile = 0.95;
///     h.routes.register_route("GET", "/users/{id}", {}, "user");
///     opts.hedging = h;
///
/// Requests that match no route are keyed per host ("host:<host>:<port>")
/// with the transport defaults.
struct hedging_options {
  /// Transport-wide defaults (validated at make_service_client; a bad field
  /// throws config_error naming `hedge.<field>`).
  hedge_config config;
  /// The registered endpoints; the first match wins.
  route_table routes;
  /// Receives hedge_fired / circuit_opened hook messages (see
  /// spawn_hedge_hook_callbacks for plain callbacks). [none]
  hedge_hook_actor hooks;
  /// A snapshot file of the learned latency sketches
  /// (actors/hedge/hedge_snapshot.hpp), so a restarted process hedges with
  /// learned delays from its first request. make_service_client imports it
  /// when it exists (a missing file starts cold) and throws config_error
  /// with field `hedging.snapshot_file`, naming the file and the bad field,
  /// when it cannot be read or is rejected (nothing is spawned then). The
  /// client's endpoint_stats actor writes it back, atomically, when it
  /// stops (the client and its calls are gone, or the actor system shuts
  /// down); a failed write is dropped. To save at another time, ask the
  /// stats handle for hedge_snapshot_export_request and call
  /// write_hedge_snapshot_file. [empty: no file]
  std::string snapshot_file;
};

/// What every call actor of a hedging client shares (its configs and the
/// full handles of its hedge actors): actors/call/detail/hedging_context.hpp,
/// built by make_service_client.
struct hedging_context;

/// True if a request may be hedged: not explicitly marked non-idempotent
/// (a hedge sends the request twice), and either GET, HEAD or OPTIONS
/// without a body, or any call that carries an idempotency key (the
/// hedge carries the same key and body bytes: a server that honours the
/// key applies the request once).
bool hedge_eligible(const std::string& method, bool has_body,
                    const std::optional<bool>& idempotent,
                    bool has_idempotency_key = false);

/// The handles of a client's hedging actors, for stats snapshots,
/// latency_quantile and breaker snapshots (both invalid when the client
/// does not hedge). The answer of a service client to
/// hedging_handles_request.
struct hedging_handles {
  endpoint_stats_actor stats;
  breaker_actor breakers;
};

/// Asks a service client for its hedging_handles.
struct hedging_handles_request {};

} // namespace call
} // namespace outbound

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::hedging_handles)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::hedging_handles_request)
