#pragma once

// What one exchange's result means, decided in one place for the whole
// request path: the retry loop (actors/call/retry_state.cpp), the hedge
// race (core/hedge_race.hpp, which answer ends a race), the
// coalescing driver's discovery loop (actors/coalesce/leader_state.cpp,
// classify_attempt), a feed's replay pages (actors/feed/feed_frames.cpp)
// and the health the breakers and error counters learn from
// (actors/hedge/). Pure: no CAF, no Asio, no clock.
//
// The classifier answers the question; each caller keeps its own policy
// on top (the question separated from the action, as in Envoy's
// router/retry_state_impl.cc and Finagle's ResponseClassifier, where a
// response is classified apart from the retry filter that acts on it):
// the retry loop redials a not_sent and gives up on a pool_overflow, the
// coalescing driver retries a non-idempotent RPC only when nothing was
// committed, a feed backs off its replay drain.
//
//   exchange_view ──classify_exchange──► exchange_verdict
//     status | none                       cls:  success
//     transport_error_kind                      final_status
//     request_sent                              retryable_status
//     idempotent                                nothing_sent
//   + the statuses the policy retries           transport_failure
//                                               fatal
//                                         kind, nothing_sent, health

#include "protocol/http_types.hpp"

#include <cstdint>
#include <vector>

namespace outbound {
inline namespace core {

/// How a finished exchange (a race's winner) went, for the error counters
/// and the breakers (httpx-hedged `_health.py`: 5xx is a failure only when
/// the breaker says so; Finagle's FailureAccrualFactory counts per
/// request).
enum class call_health : uint8_t {
  /// An answer that is not a 5xx.
  success,
  /// An HTTP 5xx answer: a failure iff breaker_config::treat_5xx_as_failure.
  server_error,
  /// No answer (connection error, timeout, protocol error).
  failure,
};

/// Stable lower-case name ("success", "server_error", "failure").
const char* to_string(call_health h);

/// The class of one exchange's result.
enum class outcome_class : uint8_t {
  /// A 2xx answer the policy does not retry.
  success,
  /// An answer that ends the call: any non-2xx status not retried (1xx,
  /// 3xx, 4xx, 5xx), and every status of a non-idempotent request.
  final_status,
  /// An answer whose status the policy retries (listed in its retry
  /// statuses, e.g. 429 / 503) for an idempotent request; the server's
  /// Retry-After applies (core/retry_after.hpp).
  retryable_status,
  /// No answer, and provably nothing reached the server: `not_sent` (a
  /// pooled connection found dead), `connect`, `local_resource`,
  /// `pool_overflow`, or an `interrupted` / `timeout` before any byte was
  /// written. Safe to send again for every method (gRPC's transparent
  /// retry of an RPC that never left the client, gRPC proposal A6).
  nothing_sent,
  /// No answer, and the request may have reached the server and been
  /// processed: `interrupted` or `timeout` after bytes were written. Safe
  /// to send again only for an idempotent request (RFC 9110 §9.2.2).
  transport_failure,
  /// No usable answer, and sending the same request again fails the same
  /// way: `tls` (handshake or verification), `too_large` (a 2xx body over
  /// the cap), `config` (the request cannot be built or the transport is
  /// misconfigured).
  fatal,
};

/// Stable lower-case name ("success", "final_status", ...).
const char* to_string(outcome_class c);

/// The small CAF-free view of one exchange's result the classifier reads.
struct exchange_view {
  /// HTTP status of the answer; meaningful only when `error == none`.
  int status = 0;
  /// The transport's error kind; `none` when an answer arrived.
  transport_error_kind error = transport_error_kind::none;
  /// True if at least one byte of the request may have been written
  /// (exchange_result::request_sent).
  bool request_sent = false;
  /// The request may be sent twice: an idempotent method (GET, HEAD,
  /// OPTIONS) or the caller's explicit `idempotent = true`.
  bool idempotent = false;

  /// The view of a transport answer, for a request of that idempotency.
  static exchange_view of(const exchange_result& r, bool idempotent);
};

/// The classifier's answer.
struct exchange_verdict {
  outcome_class cls = outcome_class::success;
  /// The transport's error kind (`none` for an answer): a caller's policy
  /// per kind (redial, local retry, backoff, next endpoint) reads it.
  transport_error_kind kind = transport_error_kind::none;
  /// True if provably nothing of the request reached the server (safe to
  /// send again for every method). True for class `nothing_sent`, and for a
  /// `tls` or `config` failure before any byte was written; false for
  /// every answer, `too_large` included (a response came).
  bool nothing_sent = false;
  /// What the breakers and error counters learn: `failure` for every
  /// transport error, `server_error` for a 5xx answer, else `success`.
  /// Whether an exchange counts at all (a redial does not) is the caller's
  /// policy.
  call_health health = call_health::success;

  /// An HTTP answer arrived (success, final_status or retryable_status).
  bool answered() const {
    return kind == transport_error_kind::none;
  }
  /// The answer ends the call: nothing to retry, it is the outcome
  /// (success or final_status). What ends a hedge race.
  bool definitive() const {
    return cls == outcome_class::success
           || cls == outcome_class::final_status;
  }
};

/// True for 2xx statuses (RFC 9110 §15.3).
bool is_success_status(int status);

/// Classifies one exchange. `retry_statuses` are the statuses the caller's
/// policy retries for idempotent requests (`retry_policy::retry_statuses`;
/// empty: every status is final). A listed status is retryable before it
/// is a success: a 2xx listed there is retried, as configured. Never
/// throws.
exchange_verdict classify_exchange(const exchange_view& v,
                                   const std::vector<int>& retry_statuses);

} // namespace core
} // namespace outbound
