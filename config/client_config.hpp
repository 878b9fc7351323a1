#pragma once

#include "protocol/json_parse.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace outbound {
inline namespace config {

/// Retry policy of the service client (hyperdjango `RetryPolicy`, see
/// hyperdjango/serviceclient.py and its docs, "Retry contract").
///
/// The delay before retry n (0-based) is
/// `min(base_backoff * 2^n, max_backoff) + U[0, base_backoff)` seconds: the
/// exponential part bounds the worst case, the jitter breaks up synchronised
/// retry storms ("Exponential Backoff And Jitter", AWS Architecture Blog).
struct retry_policy {
  /// Total attempts including the first one. Must be >= 1. [3]
  int max_attempts = 3;
  /// Base backoff in seconds. Must be >= 0; 0 retries immediately. [0.1]
  double base_backoff = 0.1;
  /// Cap of the exponential part in seconds. Must be >= 0. [10.0]
  double max_backoff = 10.0;
  /// HTTP statuses that are retried (for idempotent requests) instead of being
  /// definitive, e.g. {429, 503}. Empty by default: every status is final.
  /// For these, `retry-after-ms` and `Retry-After` are honoured.
  std::vector<int> retry_statuses;

  /// Throws config_error naming the field (`retry.max_attempts`, ...).
  void validate() const;

  /// True if `status` is listed in retry_statuses.
  bool retryable_status(int status) const;
};

/// The retry budget of a service client: one ceiling on the extra load its
/// retries and hedges put on the service, as Finagle's RetryBudget
/// (com.twitter.finagle.service.RetryBudget; its defaults: 20 %, 10 per
/// second, a 10 s window) and gRPC's retry throttling (gRFC A6) bound
/// retries. Every call deposits one primary request; every retry (a counted
/// attempt after the first) and every hedge withdraws one. A withdrawal is
/// granted while, over the sliding window,
///
///     withdrawals + 1 <= percent / 100 × deposits + min_per_second × window
///
/// so in any window the extra attempts are at most `percent` % of the calls
/// plus the floor; a refused retry is not made (the call ends with its
/// last error, reason budget_exhausted) and a refused hedge is not sent.
/// Redials of a request that provably never left (up to max_redials; past
/// them it is retried as a broken exchange and withdraws) and out-of-band
/// retries of a local port shortage are not extra load and never withdraw;
/// a hedge the pool refused (it never left) gives its withdrawal back.
/// Unlike Finagle's, hedges draw from the same budget as retries
/// (Finagle, gRPC and Envoy keep retries and hedges apart, so an outage
/// can cost both ceilings at once).
struct retry_budget_config {
  /// Off: every retry the policy allows is made, every hedge the hedge
  /// budget allows is sent (the behaviour before the budget). [true]
  bool enabled = true;
  /// Extra attempts allowed per 100 primary requests in the window
  /// ([0, 100]; counted to the millionth). [20, as Finagle]
  double percent = 20.0;
  /// Extra attempts per second allowed whatever the traffic, so a client
  /// with few calls still retries ([0, 1e9]; min_per_second × window is
  /// counted to the millionth, up to 1e12 attempts). [10, as Finagle]
  double min_per_second = 10.0;
  /// Length of the sliding window in seconds ([1e-6, 3600]); kept as 10
  /// slices, so a deposit or withdrawal ages out between 0.9 and 1 window
  /// after it was made. [10, as Finagle]
  double window = 10.0;

  /// Throws config_error naming `retry_budget.percent`,
  /// `retry_budget.min_per_second` or `retry_budget.window`.
  void validate() const;
};

/// Whether a client gives its POST and PATCH calls an Idempotency-Key
/// (IETF httpapi draft-ietf-httpapi-idempotency-key-header). A call with a
/// key is retried like an idempotent one and may be hedged: the same key
/// and the same body bytes go on every attempt and hedge, so a server that
/// honours the header applies the request once.
enum class idempotency_key_mode : uint8_t {
  /// No key unless the call supplies one.
  off,
  /// A fresh key per call (32 hex digits, 128 random bits), unless the call
  /// supplies one.
  auto_key,
};

/// An idempotency-key setting for the calls of one route: `method` (case
/// insensitive) and `path` (the call's path before '?'; exact, or a prefix
/// when it ends with '/': "/v1/orders/" covers "/v1/orders/7"). The first
/// route of client_config::idempotency_routes that matches a call decides
/// its mode, ahead of the client's idempotency_keys; a call's own key or
/// mode still comes first. Any method may be listed: a PUT route with
/// auto_key sends a key too.
struct idempotency_route {
  /// An HTTP method (a token, RFC 9110), e.g. "POST".
  std::string method;
  /// A path starting with '/'.
  std::string path;
  /// The mode of the route's calls. [auto_key]
  idempotency_key_mode mode = idempotency_key_mode::auto_key;
};

/// TLS settings. With an https base URL the server is always verified (SNI
/// and host-name verification are always on). `ca_file` pins the server's CA;
/// without it the system trust store verifies the server. A client identity
/// (mTLS) is presented when both cert and key are set, with or without a CA.
struct tls_config {
  /// PEM file with the CA certificate(s) that verify the server. [""]
  std::string ca_file;
  /// PEM client certificate (chain) presented to the server. [""]
  std::string client_cert_file;
  /// PEM private key of the client certificate. [""]
  std::string client_key_file;

  /// True if any field is set.
  bool any() const {
    return !ca_file.empty() || !client_cert_file.empty()
           || !client_key_file.empty();
  }

  /// Checks that set files are readable and that cert and key come in pairs.
  /// Throws config_error naming `tls.ca_file`, `tls.client_cert_file` or
  /// `tls.client_key_file`.
  void validate() const;
};

/// A parsed base URL: `http[s]://host[:port][/base/path]`.
struct url_parts {
  std::string scheme; ///< "http" or "https"
  std::string host;   ///< host name or IP literal (IPv6 without brackets)
  uint16_t port = 0;  ///< explicit or the scheme's default (80 / 443)
  std::string path;   ///< base path without a trailing '/', may be empty

  bool tls() const {
    return scheme == "https";
  }

  /// "host:port", IPv6 literals bracketed.
  std::string authority() const;

  /// Parses `url`; throws config_error(field, ...) for anything but an
  /// absolute http or https URL without user info, query or fragment.
  static url_parts parse(const std::string& url,
                        const std::string& field = "base_url");
};

/// Everything a service client needs. Plain data with the defaults of
/// hyperdjango serviceclient.py; `validate()` runs when a client is made.
struct client_config {
  /// Absolute http or https URL of the service; a trailing '/' is stripped.
  std::string base_url;
  /// Credential sent on every request (never logged, never in an error text
  /// or a metric). Empty: no credential header. [""]
  std::string token;
  /// Header that carries the credential. ["Authorization"]
  std::string token_header = "Authorization";
  /// Scheme before the token; empty sends the raw token (API-key style).
  /// ["Bearer"]
  std::string token_scheme = "Bearer";
  /// Per-attempt timeout in seconds (> 0). Each attempt runs under
  /// min(timeout, deadline left). [5.0]
  double timeout = 5.0;
  /// Overall deadline of one call in seconds, all attempts, backoffs and
  /// redials included (> 0). [30.0]
  double deadline = 30.0;
  /// Retry policy. [max_attempts 3, base_backoff 0.1 s, max_backoff 10 s]
  retry_policy retry;
  /// The ceiling on retries and hedges together. [on: 20 %, 10/s, 10 s]
  retry_budget_config retry_budget;
  /// Idempotency keys for POST and PATCH calls that set neither a key nor
  /// a mode of their own (call_request::idempotency_key,
  /// call_request::idempotency_mode). [off]
  idempotency_key_mode idempotency_keys = idempotency_key_mode::off;
  /// Per-route modes, checked in order before `idempotency_keys` (see
  /// idempotency_route): e.g. {{"POST", "/v1/payments"}} gives only the
  /// payment POSTs a key, or {{"POST", "/v1/search", off}} exempts one
  /// route from a client-wide auto. [none]
  std::vector<idempotency_route> idempotency_routes;
  /// The header that carries the key (a valid header name).
  /// ["Idempotency-Key", as the IETF draft]
  std::string idempotency_key_header = "Idempotency-Key";
  /// TLS / mTLS settings.
  tls_config tls;
  /// Cap on every response body, success or error, in bytes (> 0). [32 MiB]
  std::size_t max_response_bytes = 32u * 1024u * 1024u;
  /// Maximum nesting depth of arrays and objects in a response body (1 ..
  /// 1024). A deeper body is a response_error. [64, default_json_max_depth
  /// of protocol/json_parse.hpp]
  std::size_t json_max_depth = 64;
  /// Bound on the memory of a parsed response body, in bytes of parsed form
  /// per byte of max_response_bytes (1 .. 64). The parsed form (values,
  /// keys, strings and the parser's value stack, as parse_json counts it)
  /// may take min(json_memory_factor * max_response_bytes,
  /// max(json_memory_max_bytes, 4 * max_response_bytes)) bytes; a body
  /// whose form would be larger is a
  /// response_error ("response body's parsed form exceeds the JSON memory
  /// bound (N bytes)"). Measured with Boost.JSON 1.81: a replay page of
  /// tiny events (`{"id":N}`, a few short fields) costs 10.5 to 12.3 bytes
  /// per byte of text, `[[],[],...]` 16 to 20, `[0,0,...]` 24. The default
  /// covers any page of tiny events under the cap (up to the ceiling
  /// below). [16]
  std::size_t json_memory_factor = default_json_memory_factor;
  /// Ceiling of that bound in bytes (>= 1 MiB); it never lowers the bound
  /// below 4 * max_response_bytes, so raising the cap keeps large bodies
  /// parsing. At the defaults, tiny-event pages up to about 15 MiB parse,
  /// and a 30 MiB body of `[[],[],...]` stops at 192 MiB instead of the
  /// 480 MB and more its parse would take. [192 MiB]
  std::size_t json_memory_max_bytes = default_json_memory_max_bytes;
  /// Accept an integer literal beyond int64/uint64 that IEEE 754 binary64
  /// cannot hold exactly (a 30-digit id) as the nearest double, digits
  /// lost. When false such a body is a response_error naming the field
  /// (json_parse_error::inexact_integer), because a silently rounded id is
  /// worse than an error; RFC 8259 section 6 lets a parser limit number
  /// precision. A service that sends such ids should send them as strings.
  /// [false]
  bool json_allow_inexact_integers = false;
  /// Extra headers sent with every request.
  std::vector<std::pair<std::string, std::string>> default_headers;
  /// Redials of requests that provably never left, per call. [2]
  int max_redials = 2;
  /// Wall-clock budget in seconds for out-of-band retries of a connect-time
  /// EADDRNOTAVAIL / EADDRINUSE (never past the overall deadline). [30.0]
  double local_retry_deadline = 30.0;
  /// Keep-alive connections kept idle per endpoint by the pool with no time
  /// limit. [64]
  std::size_t max_idle_per_endpoint = 64;
  /// Seconds: beyond `max_idle_per_endpoint`, idle connections are kept
  /// (and reused, most recently used first) until they have been idle this
  /// long; then the pool closes them, the least recently used first
  /// (Finagle's DefaultPool `idleTime`, which applies above its low
  /// watermark). A connection's idle time starts when its exchange ends
  /// (within a wake-up of the pool actor). With 0 a connection released
  /// into a full idle set is closed at once, and every burst beyond the
  /// idle limit dials again (bench/feeds: 10,000 watchers starting together
  /// made ~7,000 extra connects). Below the 5 s keep-alive timeout of
  /// Apache httpd and Node.js, so that a surplus connection is rarely found
  /// closed by the server. [0, 3600]. [2.0]
  double surplus_idle_time = 2.0;
  /// Connections the pool opens at once to the endpoint: in flight (a dial
  /// in progress included) plus idle. An exchange that finds none idle and
  /// the endpoint at this limit waits in a FIFO queue for the next free
  /// connection (time queued counts against its attempt's budget). Bounds
  /// sockets and TIME-WAIT churn when the server slows down. >= 1. As
  /// Envoy's cluster circuit breaker max_connections and Go's
  /// http.Transport.MaxConnsPerHost. [1024]
  std::size_t max_connections_per_endpoint = 1024;
  /// Exchanges that may wait for a connection to the endpoint at once; one
  /// more fails at once with `service_unavailable` (transport kind
  /// `pool_overflow`, nothing sent, not retried). >= 1. As Envoy's
  /// max_pending_requests and the waiter bound of Finagle's pool. [1024]
  std::size_t max_pending_requests = 1024;
  /// Seconds: the least time a queued exchange must have left to be given a
  /// connection. A waiter below it is answered at once with a timeout that
  /// says nothing was sent (it would only time out on the wire and burn the
  /// connection), and a waiter's queue timer fires this long before its
  /// attempt budget ends, so that the pool's "nothing was sent" reaches the
  /// call before the call's own timer for the same budget, which cannot
  /// tell a queued request from a sent one (a POST that only sat in the
  /// queue is then known safe to retry). (0, 60]. [0.005]
  double min_dispatch_budget = 0.005;

  /// Validates every field; throws config_error naming the first bad one.
  /// Reads (opens) the TLS files to check that they are readable.
  void validate() const;

  /// Limits of every response-body parse (json_max_depth,
  /// json_allow_inexact_integers, and
  /// min(json_memory_factor * max_response_bytes (saturating),
  /// max(json_memory_max_bytes, 4 * max_response_bytes))).
  json_limits response_json_limits() const;

  /// The parsed base URL (validate() first).
  url_parts parsed_url() const {
    return url_parts::parse(base_url);
  }
};

/// The credential and default-header checks of client_config::validate(),
/// shared by every config that carries the same fields (coalesce_config):
/// `token_header` must be a non-empty header name without ':', spaces or
/// control characters; `token` and `token_scheme` must hold no control
/// characters; each default header needs a non-empty name without ':' or
/// control characters and a value without control characters. Throws
/// config_error naming `prefix + field` (`token_header`,
/// `coalesce.default_headers`, ...); the token and header values are never
/// put in the error text.
void validate_credential_fields(
  const std::string& token, const std::string& token_header,
  const std::string& token_scheme,
  const std::vector<std::pair<std::string, std::string>>& default_headers,
  const std::string& prefix = "");

/// The `{PREFIX}_*` environment shape, in one place, for SDKs that extend
/// the client: `PREFIX_URL`, `PREFIX_TOKEN`, `PREFIX_CA_FILE`,
/// `PREFIX_CLIENT_CERT`, `PREFIX_CLIENT_KEY`. Absent variables are empty.
struct env_settings {
  std::string base_url;
  std::string token;
  std::string ca_file;
  std::string client_cert_file;
  std::string client_key_file;

  /// Reads the variables of `prefix` from the process environment.
  static env_settings read(const std::string& prefix);

  /// Copies the non-empty values into `cfg` where `cfg` leaves the field
  /// empty: explicit settings win over the environment.
  void apply_to(client_config& cfg) const;
};

/// Builds a validated config from `{PREFIX}_*`; fields already set in
/// `explicit_cfg` win over the environment. Throws config_error.
client_config from_env(const std::string& prefix,
                       client_config explicit_cfg = {});

} // namespace config
} // namespace outbound
