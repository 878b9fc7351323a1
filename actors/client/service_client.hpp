#pragma once

// The service client's front door (docs/ARCHITECTURE.md, "The actor tree"): a
// typed actor that takes call_requests and runs each unhedged call's retry
// loop (as in jev-client) on its own state, with one attempt watchdog for all
// of them; a call it may hedge gets a short-lived call actor (the retry loop
// and the hedge race) to which it delegates the answer. The calls reach the
// network through the client's connection_pool actor.

#include "actors/call/hedging.hpp"
#include "actors/messages.hpp"
#include "actors/observer.hpp"
#include "actors/transport.hpp"
#include "config/client_config.hpp"
#include "core/retry_budget.hpp"

#include <caf/actor_system.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

namespace outbound {
inline namespace protocol {
class io_runner;
} // namespace protocol
inline namespace client {

/// Asks a service client for its retry budget's counters and balance
/// (core/retry_budget.hpp; the metrics poller exports them).
struct retry_budget_request {};

/// Typed interface of a service client: `call_request -> call_outcome`.
/// Errors are values: the outcome carries a call_error instead of a result.
/// `hedging_handles_request -> hedging_handles` gives the client's hedging
/// actors (stats snapshots, latency_quantile, breaker snapshots; invalid
/// handles when the client does not hedge). `retry_budget_request ->
/// retry_budget_stats` gives its retry budget's counters.
/// The client stays alive while a handle to it exists or a call is in
/// flight; in-flight calls finish. A client killed with calls in progress
/// answers each of them at once (service_unavailable, "service client
/// stopped").
using service_client_actor = caf::typed_actor<
  caf::replies_to<call_request>::with<call_outcome>,
  caf::replies_to<hedging_handles_request>::with<hedging_handles>,
  caf::replies_to<retry_budget_request>::with<retry_budget_stats>>;

/// Optional parts of a client; every field has a working default.
struct client_options {
  /// Receives a client_event for every step of every call. [none]
  observer_actor observer;
  /// Replaces the connection pool (tests, custom transports). [none: a
  /// connection_pool actor is spawned for the client]
  transport_actor transport;
  /// The io runner whose threads carry the pool's sockets. [the process-wide
  /// io_runner::shared()]
  std::shared_ptr<io_runner> io;
  /// Seed of the jitter and request-id generator; 0 seeds from
  /// std::random_device. [0]
  uint64_t seed = 0;
  /// Wall clock used to interpret an HTTP-date Retry-After. [system_clock]
  std::function<std::chrono::system_clock::time_point()> wall_clock;
  /// Adaptive hedging of GET/HEAD/OPTIONS calls (see actors/call/hedging.hpp
  /// and call_actor.hpp for the race). [none: no hedging]
  std::optional<hedging_options> hedging;
};

/// Spawns a service client in `sys`. Validates `cfg` (and `opts.hedging`)
/// first and throws config_error naming the bad field (nothing is spawned
/// then); also throws
/// config_error (field `tls.*`) when a certificate or key cannot be loaded.
///
/// The client monitors the transport (the connection pool, or
/// `opts.transport`) and tells its call actors: when it terminates, a call in
/// flight and every later call fail at once with service_unavailable
/// ("connection pool terminated: <exit reason>", cause `interrupted`),
/// never by a timeout. An exception while a call is handled becomes that
/// call's typed error; the client serves the next one.
service_client_actor make_service_client(caf::actor_system& sys,
                                         client_config cfg,
                                         client_options opts = {});

/// True for GET, HEAD and OPTIONS: the methods retried without an explicit
/// `idempotent=true`.
bool idempotent_by_default(const std::string& method);

} // namespace client
} // namespace outbound

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::retry_budget_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::retry_budget_stats)
