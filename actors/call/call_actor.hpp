#pragma once

// The call actor (DESIGN.md "The user's picture"): one short-lived actor per
// call that runs the retry loop of shared/seeds/002 against the transport
// port. A thin adapter: request_builder shapes the request, retry_state
// decides, this actor sends, waits on the actor clock and reports.

#include "actors/messages.hpp"
#include "actors/observer.hpp"
#include "actors/transport.hpp"
#include "config/client_config.hpp"

#include <caf/actor_system.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

namespace outbound {

/// What every call of one service client shares; immutable after
/// make_service_client built it.
struct call_context {
  /// The validated config.
  client_config cfg;
  /// cfg.base_url, parsed.
  url_parts url;
  /// Where requests go (the connection pool, or a test's fake).
  transport_actor transport;
  /// Receives client_events; may be invalid (no observer).
  observer_actor observer;
  /// Wall clock for an HTTP-date Retry-After; never empty.
  std::function<std::chrono::system_clock::time_point()> wall_clock;
};

/// Typed interface of a call actor.
///
/// - `call_request -> call_outcome`: the one call this actor runs (it is sent
///   exactly one, usually delegated by the service client); it answers with
///   exactly one outcome (attempts and request_id always filled) and quits.
/// - `(retry_atom, send_id)`: end of a backoff wait, sent to itself (stale
///   ids are dropped).
///
/// The attempt budget is a CAF request timeout on the transport request, so
/// it runs on the actor clock (exact in virtual time) and a late answer is
/// dropped by CAF; the actor then sends `(cancel_atom, exchange_id)` to the
/// transport so the connection is closed, never reused.
using call_actor
  = caf::typed_actor<caf::replies_to<call_request>::with<call_outcome>,
                     caf::reacts_to<retry_atom, uint64_t>>;

/// Spawns a call actor for one call. `seed` seeds its jitter and request-id
/// generator. Exchange ids are `(actor id << 20) | send number`, unique per
/// transport.
call_actor spawn_call_actor(caf::actor_system& sys,
                            std::shared_ptr<const call_context> ctx,
                            uint64_t seed);

} // namespace outbound
