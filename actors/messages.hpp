#pragma once

// Message types and atoms shared by outbound's actors, in one place.
//
// Every type here is local-only: outbound's actors talk inside one process,
// never over CAF's middleman. The types are therefore whitelisted with
// CAF_ALLOW_UNSAFE_MESSAGE_TYPE instead of carrying CAF 0.17 `inspect`
// overloads (which do not cover enums or boost::json::value); if outbound's
// actors are ever published remotely, these get inspect overloads and a
// type-id block.

#include "protocol/errors.hpp"
#include "protocol/http_types.hpp"

#include <boost/json/value.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>
#include <caf/type_id.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

CAF_BEGIN_TYPE_ID_BLOCK(outbound, caf::first_custom_type_id)
  CAF_ADD_ATOM(outbound, outbound, cancel_atom, "cancel")
  CAF_ADD_ATOM(outbound, outbound, done_atom, "done")
  CAF_ADD_ATOM(outbound, outbound, timeout_atom, "timeout")
  CAF_ADD_ATOM(outbound, outbound, retry_atom, "retry")
  CAF_ADD_ATOM(outbound, outbound, stats_atom, "stats")
  // Feed watcher (actors/feed/): stop request, subscriber acknowledgement,
  // and its own timers (each carries a token; stale ones are dropped).
  CAF_ADD_ATOM(outbound, outbound, stop_atom, "stop")
  CAF_ADD_ATOM(outbound, outbound, ack_atom, "ack")
  CAF_ADD_ATOM(outbound, outbound, poll_atom, "feed_poll")
  CAF_ADD_ATOM(outbound, outbound, redrain_atom, "redrain")
  CAF_ADD_ATOM(outbound, outbound, keepalive_atom, "keepalive")
  CAF_ADD_ATOM(outbound, outbound, reconnect_atom, "reconnect")
CAF_END_TYPE_ID_BLOCK(outbound)

namespace outbound {

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
  /// Retry safety: unset means GET/HEAD/OPTIONS are idempotent, others not.
  std::optional<bool> idempotent;
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
  /// Hedging clients only: key this call by the registered endpoint of this
  /// name, bypassing route matching. An unknown name fails the call with a
  /// config_error before anything is sent (never a fallback). [none]
  std::optional<std::string> hedge_endpoint;
};

/// The answer to a call_request: a value or a call_error.
struct call_outcome {
  /// No error: `status`, `headers`, `body` are the answer.
  bool ok = false;
  call_error error;
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
  /// The call ends with an error (`outcome` is the error kind).
  failed,
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
  /// retrying / redialing / failed: why ("status 503", "timeout", ...).
  std::string cause;
  /// retrying: the delay before the next attempt, in nanoseconds.
  int64_t delay_ns = 0;
  /// answered, failed, and retrying after a retryable status: the HTTP
  /// status seen (0: none, e.g. a transport failure).
  int status = 0;
  /// answered / failed: attempts made.
  int attempts = 0;
  /// failed: the error kind's name; answered: "ok" or the kind for a status.
  std::string outcome;
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
};

} // namespace outbound

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::http_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::exchange_result)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::call_request)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::call_outcome)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::client_event)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::pool_stats)
