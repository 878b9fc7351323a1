#pragma once

// The call actor (docs/ARCHITECTURE.md, "The actor tree"): one short-lived
// actor per call the client may hedge, running the patient retry loop (as in
// jev-client) and the hedge race against the transport port. Unhedged calls
// run inside the service client (service_client.cpp) on the same
// retry_state and call_result. A thin adapter: request_builder shapes the request,
// retry_state decides; this actor sends, waits on the actor clock, reports.

#include "actors/call/hedging.hpp"
#include "actors/call/retry_state.hpp"
#include "actors/messages.hpp"
#include "actors/observer.hpp"
#include "actors/transport.hpp"
#include "config/client_config.hpp"
#include "core/retry_budget.hpp"

#include <caf/actor_system.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

namespace outbound {
inline namespace call {

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
  /// Adaptive hedging; null: the client never hedges.
  std::shared_ptr<const hedging_context> hedging;
  /// The client's retry budget (client_config::retry_budget): every call
  /// deposits, every retry and hedge withdraws; null: no budget (a call
  /// actor spawned without a client, as in tests).
  std::shared_ptr<shared_retry_budget> budget;
  /// cfg's retry setups, made once (the service client sets them); null:
  /// each call makes its own from cfg.
  std::shared_ptr<const retry_setups> retry;
};

/// Typed interface of a call actor.
///
/// - `call_request -> call_outcome`: the one call this actor runs (it is sent
///   exactly one, usually delegated by the service client); it answers with
///   exactly one outcome (attempts and request_id always filled) and quits.
///
/// Its timers (a backoff's end, an attempt's hedge timer) are messages of a
/// private extension of this interface (actors/call/call_actor.cpp).
///
/// Hedging (httpx-hedged; Dean & Barroso, "The Tail at Scale", CACM 2013), if
/// the client hedges and the call is eligible (hedge_eligible): the primary
/// goes out at once — never delayed, never suppressed — while the actor asks
/// the endpoint_stats actor for the key's hedge delay. When the delay passes
/// and the primary has not answered, the gates run in order: the host and
/// endpoint breakers (breaker actor), then the budget (a token of the key's
/// bucket); if all pass, one backup request goes out on another pooled
/// connection with the attempt's remaining time budget. Each attempt of
/// the retry loop can hedge once.
///
/// Who wins the race: the first *definitive* answer — an HTTP response
/// whose status the retry policy would not retry (2xx, 3xx, most 4xx). A
/// leg that fails retryably (a transport error, a timeout, a retryable
/// status such as 503 or 429) does not end the race while the other leg is
/// still running, so a fast-failing hedge can never fail a call whose
/// primary would have succeeded (httpx-hedged lets the first completed
/// task win even when it failed; outbound does not). When both legs fail,
/// the later failure goes through the retry policy as usual. The loser is
/// cancelled at once (`(cancel_atom, exchange_id)`: its connection is
/// closed, never reused). The winner alone feeds the latency sketch
/// (seconds from the attempt's start) and the breakers; the race result
/// (hedge_wins / primary_wins) and the breaker permit (completed when the
/// hedge won, released otherwise) are settled when the attempt ends. The
/// actor stays alive after answering until every gate it asked has replied.
/// A half-open permit is kept in the actor's state from the breakers' reply
/// on, so it goes back whatever ends the wait for the token: the call's
/// end, a fault in a reply handler (which ends the call with a typed
/// error), or the actor's death. So does a granted hedge token that no
/// hedge used: the budget holds each grant on the call actor's lease
/// (hedge_token_request::owner), and a dying call actor abandons its lease
/// last (hedge_token_abandon), which also covers a grant whose reply reached
/// it dead.
///
/// The attempt budget is a CAF request timeout on the transport request, so
/// it runs on the actor clock (exact in virtual time) and a late answer is
/// dropped by CAF; the actor then sends `(cancel_atom, exchange_id)` to the
/// transport so the connection is closed, never reused.
using call_actor
  = caf::typed_actor<caf::replies_to<call_request>::with<call_outcome>>;

/// Spawns a call actor for one call. `seed` seeds its jitter and request-id
/// generator. Exchange ids are `(actor id << 20) | send number`, unique per
/// transport.
call_actor spawn_call_actor(caf::actor_system& sys,
                            std::shared_ptr<const call_context> ctx,
                            uint64_t seed);

} // namespace call
} // namespace outbound

