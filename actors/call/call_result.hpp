#pragma once

// What a call hands back, shared by the two hosts of the retry loop: the
// service client (unhedged calls, run inside the client actor) and the call
// actor (hedged calls). Pure: no CAF, no clock. It maps the response that
// ends a call to its call_outcome (status → typed error, JSON body parsed
// once under the client's limits), makes the observer's events, and
// redacts the credential from every text that leaves the call.

#include "actors/call/retry_state.hpp"
#include "actors/messages.hpp"
#include "config/client_config.hpp"
#include "protocol/http_types.hpp"

#include <cstdint>
#include <string>

namespace outbound {
inline namespace call {

/// `path` without its query string (queries can carry secrets): what
/// events and metrics show of a call's path.
std::string path_without_query(const std::string& path);

/// Replaces the client's credential (the token and its header value, as
/// written and as JSON escapes them: json_escaped_forms) in `s` with
/// "[redacted]": whatever a server or a transport echoes, the credential
/// never leaves a call inside a text.
void redact(const client_config& cfg, std::string& s);

/// The outcome of a call that ends with the response `resp` after
/// `attempts` attempts: 2xx → the parsed JSON body (null when empty); any
/// other status → the typed error of classify_status with the body's
/// detail (3xx with its Location); an over-cap or unreadable 2xx body → a
/// response_error naming the limit; raw mode (call.raw) → every status as
/// an answer, a non-JSON body as null. `resp` is consumed (headers and body
/// are moved out); `request_id` becomes the outcome's (a caller that ends
/// the call moves its id in).
call_outcome response_outcome(const client_config& cfg,
                              const call_request& call, std::string request_id,
                              int attempts, http_response& resp);

/// The outcome of a call that ends with the error `e` (request_id and
/// attempts filled in).
call_outcome error_outcome(call_error e, const std::string& request_id,
                           int attempts);

/// Last step before an outcome is delivered: nothing_billed settled from
/// the error's fields, the credential redacted from detail and location.
void finalize_outcome(const client_config& cfg, call_outcome& o);

/// An observer event of `kind` for attempt `attempt` of a call (method and
/// path as the event shows them: the path without its query).
client_event call_event(event_kind kind, const std::string& request_id,
                        const std::string& method, const std::string& path,
                        int attempt);

/// Fills the fields an `answered` event reports for outcome `o` (status,
/// attempts, outcome name, latency, bytes of the body as read).
void fill_answered(client_event& ev, const call_outcome& o,
                   int64_t latency_ns, uint64_t response_bytes);

/// Fills the fields a `retrying` event reports for the retry loop's step
/// `step`: its cause, its delay, and the status when the attempt that is
/// retried ended with a response (`resp`, null after a transport failure).
void fill_retrying(client_event& ev, const retry_step& step,
                   const http_response* resp);

/// Fills the fields a `failed` event reports for error `e`.
void fill_failed(client_event& ev, const call_error& e, int64_t latency_ns);

} // namespace call
} // namespace outbound
