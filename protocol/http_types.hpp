#pragma once

// Value types of one HTTP/1.1 exchange. No Beast, no Asio: these cross actor
// boundaries (see actors/type_ids.hpp) and are what the transport port speaks.

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace outbound {
inline namespace protocol {

/// Header fields in wire order. Names compare case-insensitively.
using header_list = std::vector<std::pair<std::string, std::string>>;

/// Case-insensitive lookup; returns nullptr if absent.
const std::string* find_header(const header_list& hs, const std::string& name);

/// Replaces the value of the first header named `name` (case-insensitive)
/// or appends `name: value`.
void set_header(header_list& hs, const std::string& name, std::string value);

/// Removes every header named `name` (case-insensitive).
void erase_header(header_list& hs, const std::string& name);

/// What the transport is asked to do: send one request on a pooled (or, when
/// `fresh_connection`, a newly dialled) keep-alive connection to the client's
/// configured origin and read the whole response.
struct http_request {
  /// Correlates the answer and a later `cancel`; unique per transport.
  uint64_t exchange_id = 0;
  /// Upper-case method, e.g. "GET".
  std::string method;
  /// Origin-form target: path plus encoded query ("/v1/x?a=b").
  std::string target;
  /// Headers to send besides Host / Content-Length (the transport adds them).
  header_list headers;
  /// Request body (empty: no body and no Content-Length for GET/HEAD).
  std::string body;
  /// Socket-level limit for this exchange in nanoseconds, counted from the
  /// moment the transport starts it (connect included). Not extended by
  /// arriving bytes.
  int64_t timeout_ns = 5'000'000'000;
  /// Cap on the response body in bytes.
  uint64_t max_body_bytes = 32u * 1024u * 1024u;
  /// Never reuse an idle pooled connection for this exchange (redials).
  bool fresh_connection = false;
  /// May wait in the connection pool's queue when the endpoint is at its
  /// connection limit. False for a hedge: a backup request is worth sending
  /// only on a connection free now (queued, it would only compete with the
  /// primary it backs up), so the pool refuses it at once with
  /// `pool_overflow` and `request_sent == false` instead of queueing it.
  bool may_queue = true;
};

/// A complete HTTP response as read off the wire.
struct http_response {
  int status = 0;
  header_list headers;
  /// The body (already de-chunked). Empty when `body_over_cap`.
  std::string body;
  /// The body was larger than the cap and was dropped (only for non-2xx
  /// statuses; an over-cap 2xx is a `too_large` transport error instead).
  bool body_over_cap = false;
};

/// What went wrong in one exchange (docs/ARCHITECTURE.md, "Ports").
enum class transport_error_kind : uint8_t {
  none = 0,
  /// Provably nothing left: a pooled connection found closed before any byte
  /// of the request was written. Redialled, not counted as an attempt.
  not_sent,
  /// TCP connect failed (refused, unreachable, DNS). Nothing was sent.
  connect,
  /// Connect failed with EADDRNOTAVAIL / EADDRINUSE: local port exhaustion.
  /// Nothing was sent; retried out of band against a wall-clock deadline.
  local_resource,
  /// The exchange broke after the request may have left: reset, EOF before
  /// or inside the response, torn status line, truncated chunked body,
  /// Content-Length mismatch, malformed HTTP.
  interrupted,
  /// TLS handshake or verification failed (not retried).
  tls,
  /// A 2xx body over the cap (not retried).
  too_large,
  /// The exchange did not finish within its timeout.
  timeout,
  /// The request could not be built or the transport is misconfigured.
  config,
  /// The connection pool refused the exchange at once: the endpoint is at
  /// `client_config::max_connections_per_endpoint` and
  /// `client_config::max_pending_requests` exchanges already wait for a
  /// connection (Envoy's max_pending_requests overflow). Nothing was sent;
  /// the call fails with `service_unavailable` and is not retried (a retry
  /// into a full local queue only adds load).
  pool_overflow,
};

/// Stable lower-case name of a kind ("not_sent", "connect", ...), used in
/// metric labels and observer events.
const char* to_string(transport_error_kind k);

/// The transport's answer to one http_request: either a response
/// (`error == none`) or a transport error.
struct exchange_result {
  uint64_t exchange_id = 0;
  transport_error_kind error = transport_error_kind::none;
  /// Human-readable detail of the error (never contains header values).
  std::string detail;
  /// True if at least one byte of the request was written to the socket
  /// (decides `nothing_sent()` of the final error).
  bool request_sent = false;
  /// The connection was newly dialled for this exchange (not reused).
  bool new_connection = false;
  http_response response;

  bool ok() const {
    return error == transport_error_kind::none;
  }
};

} // namespace protocol
} // namespace outbound
