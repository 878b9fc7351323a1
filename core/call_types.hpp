#pragma once

// The values a service client takes and gives: a call, its outcome, the
// observer's events and a pool's counters. Plain values, no CAF: the actors
// send them as messages (actors/messages.hpp whitelists them), the metrics
// (metrics/client_metrics.hpp) read them without depending on the actors.

#include "config/client_config.hpp" // idempotency_key_mode
#include "protocol/errors.hpp"
#include "protocol/http_types.hpp"

#include <boost/json/value.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace outbound {
inline namespace core {

/// One call to the service, as sent to a service_client actor.
struct call_request {
  /// Upper-case HTTP method. ["GET"]
  std::string method = "GET";
  /// Path relative to the base URL's path, starting with '/'.
  std::string path = "/";
  /// Serialized JSON body; sent with Content-Type application/json when
  /// `has_body`.
  std::string body;
  bool has_body = false;
  /// Query parameters, percent-encoded by the client, in this order.
  std::vector<std::pair<std::string, std::string>> params;
  /// Extra headers for this call (after the client's default headers).
  header_list headers;
  /// Retry safety: unset means GET/HEAD/OPTIONS, and any call that carries
  /// an idempotency key, are idempotent, others not. An explicit false
  /// wins over a key.
  std::optional<bool> idempotent;
  /// A caller-supplied idempotency key, sent in the client's
  /// `idempotency_key_header` on every attempt and hedge (no control
  /// characters). Empty: `idempotency_mode` decides. [""]
  std::string idempotency_key;
  /// Without a key: `auto_key` generates one for this call (any method),
  /// `off` sends none; unset: the client's `idempotency_keys`, for POST
  /// and PATCH only. [unset]
  std::optional<idempotency_key_mode> idempotency_mode;
  /// x-request-id to send; empty means the client generates one.
  std::string request_id;
  /// request_raw semantics: definitive HTTP statuses are returned in the
  /// outcome instead of as errors.
  bool raw = false;
  /// Cap on this call's response body in bytes, instead of the client's
  /// max_response_bytes (a feed watcher's replay pages). [the client's]
  std::optional<std::size_t> max_response_bytes;
  /// A 2xx body that does not parse is handed back in
  /// call_outcome::unreadable_body, its first this many bytes (a feed
  /// watcher reads the id of the event that broke a replay page from it).
  /// 0: never. [0]
  std::size_t keep_unreadable_body = 0;
  /// Parse the response body into one arena owned by the parsed value
  /// (protocol::json_arena: a boost::json::monotonic_resource shared by
  /// every part of it, locked once the parse is done, so copies made on
  /// several threads are safe): one
  /// allocation per block instead of one per string, array and object,
  /// and one release when the last part is gone. For bodies read once and
  /// dropped, such as a feed watcher's replay pages; a part kept alive
  /// (or moved into another value with protocol::move_into) keeps the whole
  /// arena. The arena's blocks grow geometrically, so it may hold up to
  /// about twice what the parsed value uses (the json_limits memory bound
  /// counts the value). [false: the default resource]
  bool json_arena = false;
  /// Hedging clients only: key this call by the registered endpoint of this
  /// name, bypassing route matching. An unknown name fails the call with a
  /// config_error before anything is sent (never a fallback). [none]
  std::optional<std::string> hedge_endpoint;
};

/// The answer to a call_request: a value or a call_error, in the library's
/// one result shape (see call_error): `error` is set exactly when the call
/// failed; the other fields describe what was seen either way.
struct call_outcome {
  /// Set when the call failed; empty: `status`, `headers`, `body` are the
  /// answer.
  std::optional<call_error> error;
  /// No error: the call succeeded.
  bool ok() const noexcept { return !error.has_value(); }
  /// HTTP status of the answering response (0 if none was seen).
  int status = 0;
  header_list headers;
  /// The parsed JSON body; null for an empty body (and, in raw mode, for a
  /// body that is not JSON or not representable: see raw_body_error).
  boost::json::value body;
  /// Attempts made (redials and out-of-band local retries not counted).
  int attempts = 0;
  std::string request_id;
  /// A 2xx body that did not parse (a response_error), cut at
  /// call_request::keep_unreadable_body bytes; empty otherwise. For a raw
  /// call (call_request::raw), a non-empty body that `body` cannot
  /// represent, whole, with the reason in raw_body_error.
  std::string unreadable_body;
  /// Raw calls only: why the non-empty body is `null` in `body`, the
  /// parser's detail naming the field where there is one ("number out of
  /// range (IEEE 754 binary64) at a", "syntax error"); empty otherwise.
  std::string raw_body_error;
};

/// Observer events (as jev-client's Observer): what happens inside a call,
/// as it happens. The same events drive the client's metrics.
enum class event_kind : uint8_t {
  /// An attempt is about to be handed to the transport.
  sending,
  /// An attempt failed and the call will retry after `delay_ns`.
  retrying,
  /// A request that provably never left is sent again on a fresh connection.
  redialing,
  /// A response ends the call (any status); `attempts` says how many.
  answered,
  /// The call ends with an error (`error` is its kind).
  failed,
  /// A hedge of attempt `attempt` is about to be handed to the transport,
  /// `delay_ns` after the attempt's primary was sent (hedged calls only).
  /// The pool may still refuse it when no connection is free (a hedge
  /// never queues): then nothing is sent and the hedging counters do not
  /// count it. The winner shows in the hedging counters, not in an event.
  hedging,
};

const char* to_string(event_kind k);

struct client_event {
  event_kind kind = event_kind::sending;
  std::string request_id;
  std::string method;
  /// The call's path (no query string: queries can carry secrets).
  std::string path;
  /// 1-based number of the attempt this event belongs to.
  int attempt = 0;
  /// retrying / redialing / failed: why, for people ("status 503",
  /// "timeout", ...); labels use cause_kind.
  std::string cause;
  /// retrying: the delay still to wait before the next attempt; hedging:
  /// the time already passed since the attempt's primary was sent; in
  /// nanoseconds.
  int64_t delay_ns = 0;
  /// answered, failed, and retrying after a retryable status: the HTTP
  /// status seen (0: none, e.g. a transport failure).
  int status = 0;
  /// answered / failed: attempts made.
  int attempts = 0;
  /// retrying / redialing / failed: the cause as a value, for labels: the
  /// transport error kind (a request the builder refused is `config`, an
  /// overall deadline passed before a send is `timeout`), or
  /// transport_error_kind::none when the cause is an HTTP status (`status`)
  /// or the error has no transport cause.
  transport_error_kind cause_kind = transport_error_kind::none;
  /// failed: the error kind; answered: the kind the status maps to, or
  /// nullopt for a success ("ok").
  std::optional<error_kind> error;
  /// answered / failed: why the retry loop stopped short of another
  /// attempt (a retryable failure not retried), or none.
  give_up_reason reason = give_up_reason::none;
  /// answered / failed: call latency in nanoseconds (actor clock).
  int64_t latency_ns = 0;
  /// answered: bytes of the response body as read (after de-chunking; 0
  /// when an over-cap error body was dropped).
  uint64_t response_bytes = 0;
};

/// Counters of a connection pool: the answer of the pool actor to
/// `stats_atom` (for tests and diagnostics).
struct pool_stats {
  /// Connections dialled.
  uint64_t dialled = 0;
  /// Exchanges that ran on a pooled idle connection.
  uint64_t reused = 0;
  /// Idle connections found stale and discarded (each answered `not_sent`).
  uint64_t stale_discarded = 0;
  /// Exchanges cancelled by their caller.
  uint64_t cancelled = 0;
  /// Idle connections now.
  uint64_t idle = 0;
  /// Exchanges in flight now.
  uint64_t in_flight = 0;
  /// Exchanges queued now, waiting for a connection (the endpoint is at
  /// `client_config::max_connections_per_endpoint`).
  uint64_t pending = 0;
  /// Exchanges that had to wait in the queue, total.
  uint64_t waited = 0;
  /// Exchanges refused because the queue held
  /// `client_config::max_pending_requests`, total.
  uint64_t overflowed = 0;
  /// Hedges (`http_request::may_queue` false) refused because no connection
  /// was free, total.
  uint64_t busy_refused = 0;
  /// Waiters answered "never sent" because a connection freed up for them
  /// with less than the pool's dispatch floor of their timeout left, total.
  uint64_t too_late = 0;
  /// Idle connections beyond `client_config::max_idle_per_endpoint` closed
  /// after `client_config::surplus_idle_time` unused, total.
  uint64_t idle_expired = 0;
};

/// The `outcome` label of an answered or failed event: "ok", or the name of
/// its error kind.
inline const char* outcome_label(const client_event& ev) {
  return ev.error ? to_string(*ev.error) : "ok";
}

/// The `reason` label of a retrying event: "status" when an HTTP status
/// was retried, else the transport error kind's name.
inline const char* reason_label(const client_event& ev) {
  return ev.cause_kind == transport_error_kind::none ? "status"
                                                     : to_string(ev.cause_kind);
}

} // namespace core
} // namespace outbound
