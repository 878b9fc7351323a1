#pragma once

// Turns a call_request into the http_request the transport sends (pure: no
// CAF, no clock; the request-id generator is an argument). The shape follows
// hyperdjango's ServiceClient (its serviceclient.md): JSON in and out, the
// credential in one configurable header, a request id on every request
// ("jev-client — the patient one").

#include "config/client_config.hpp"
#include "core/call_types.hpp"
#include "core/rng.hpp"
#include "protocol/errors.hpp"
#include "protocol/http_types.hpp"

#include <string>
#include <utility>
#include <vector>

namespace outbound {
inline namespace core {

/// outbound's version, as sent in `User-Agent: outbound/<version>`.
inline constexpr const char* outbound_version = "0.1.0";

/// The `User-Agent` every outbound request and WebSocket upgrade carries:
/// `outbound/<version>`.
std::string user_agent();

/// Sets `x-retry-count: n` on `headers` when n > 0 (replacing an earlier
/// one) and removes it when n == 0: retries so far of the call or RPC, as
/// jev-client sends it, so a server can tell a first attempt from a retry.
void set_retry_count(header_list& headers, int n);

/// The result of build_request: a request ready to send, or a config_error
/// outcome (nothing may be sent then).
struct built_request {
  /// Set when the request cannot be built: a config_error naming what is
  /// wrong (nothing_sent); never contains the credential or a header value.
  std::optional<call_error> error;
  /// No error: `request` is ready (exchange_id, timeout_ns, max_body_bytes
  /// and fresh_connection are left for the caller to set).
  bool ok() const noexcept { return !error.has_value(); }
  http_request request;
  /// The x-request-id the request carries (also set on error if known).
  std::string request_id;
};

/// Percent-encodes every byte outside RFC 3986's unreserved set
/// (ALPHA / DIGIT / "-" / "." / "_" / "~") as `%XX` (upper-case hex).
std::string percent_encode(const std::string& s);

/// `k1=v1&k2=v2` with keys and values percent-encoded, in the given order.
std::string encode_query(
  const std::vector<std::pair<std::string, std::string>>& params);

/// A fresh request id: 32 lower-case hex digits (128 bits from `rng`).
std::string generate_request_id(core::rng& rng);

/// True if `call` carries an idempotency key
/// (draft-ietf-httpapi-idempotency-key-header): a key of its own (its
/// `idempotency_key`, or a header of its own named
/// `cfg.idempotency_key_header`), its `idempotency_mode` auto_key, or,
/// with no mode set, the mode of the first of `cfg.idempotency_routes`
/// matching its method and path, else the client's `idempotency_keys`
/// auto_key for a POST or PATCH.
bool carries_idempotency_key(const client_config& cfg,
                             const call_request& call);

/// Gives `call` its idempotency key once, before its first build: the
/// value of a header of its own named `cfg.idempotency_key_header` (the
/// header is taken out and sent once, from the key), else, when it
/// carries one, a fresh key: 32 lower-case hex digits of 128 bits from
/// std::random_device (never the seeded generator: two clients with one
/// seed must not share keys). Every build of the call (retries, hedges)
/// then sends the same key.
void assign_idempotency_key(const client_config& cfg, call_request& call);

/// The retry safety of `call` whose method is `method` (upper case): its
/// explicit `idempotent`, else GET/HEAD/OPTIONS or a call that carries an
/// idempotency key.
bool call_is_idempotent(const client_config& cfg, const call_request& call,
                        const std::string& method);

/// The credential header's value: `token_scheme + " " + token`, or the raw
/// token when the scheme is empty. Empty when the token is empty (then no
/// header is sent). Never log or print the result.
std::string credential_value(const client_config& cfg);

/// What append_identity_headers found wrong: the config field and why
/// (never the credential or a header value). Empty `why`: nothing.
struct identity_problem {
  const char* field = "";
  std::string why;
};

/// Appends the headers every outbound request and WebSocket upgrade
/// carries, in this order: `User-Agent: outbound/<version>`, the credential
/// (`cfg.token_header: credential_value(cfg)`, when a token is set), then
/// `cfg.default_headers` (each replacing an earlier header of the same
/// name). Checks what it appends as build_request does (a bad header name,
/// a control character, a Host / Content-Length / Transfer-Encoding
/// default header); on a problem `hs` may hold part of the headers.
identity_problem append_identity_headers(const client_config& cfg,
                                         header_list& hs);

/// Builds the request of `call` against the base URL `base` (parsed from
/// `cfg.base_url`):
/// - target = base path + call path + `?` + encode_query(params) (`&` when
///   the call path already has a query); the call path must start with '/';
///   bytes outside RFC 3986 pchar (space, non-ASCII, ...) are
///   percent-encoded, existing `%XX` escapes are kept;
/// - method upper-cased, must be an RFC 9110 token;
/// - headers in this order: `Accept: application/json`, `Content-Type:
///   application/json` (only with a body), append_identity_headers
///   (User-Agent, credential, `cfg.default_headers`), the call's headers (a
///   later header replaces an earlier one of the same name), the call's
///   idempotency key in `cfg.idempotency_key_header` (when it has one: see
///   assign_idempotency_key), then `x-request-id` (the call's, or a
///   generated one);
/// - a control character (CR, LF, ...) in the method, the path, a header
///   name or value, or the request id; a bad header name; or a
///   Host / Content-Length / Transfer-Encoding header (the transport owns
///   them) gives a config_error and nothing is sent.
built_request build_request(const client_config& cfg, const url_parts& base,
                            const call_request& call, core::rng& rng);

/// The same, taking the call's request id, headers and body instead of
/// copying them (a call built for one request, as the coalescing driver's
/// oracle calls are).
built_request build_request(const client_config& cfg, const url_parts& base,
                            call_request&& call, core::rng& rng);

/// The request of `call` once more, the same bytes as its first build
/// (whose id was `request_id`), for a retry or a hedge whose first request
/// was moved into its send: build_request is a pure function of the
/// config, the call and the id. Gives `call` that id first, so that no
/// random id is drawn from `rng` (a call that named its id only in an
/// x-request-id header has the header taken out and the id handed over, so
/// the header keeps its place, last). Copying the first request for every
/// retry or hedge it may never make costs every call; this costs only the
/// calls that send again.
built_request rebuild_request(const client_config& cfg, const url_parts& base,
                              call_request& call, const std::string& request_id,
                              core::rng& rng);

/// Builds the WebSocket opening handshake request (RFC 6455 §4.1) into
/// `out`: `GET <path>` (origin-form; "/" if empty), `Upgrade: websocket`,
/// `Connection: Upgrade`, `Sec-WebSocket-Key: <key>`,
/// `Sec-WebSocket-Version: 13`, then `headers` (the identity headers from
/// append_identity_headers and any extra ones) in order, except copies of
/// the generated ones and `Sec-WebSocket-Extensions` (no extension is
/// offered). Host is the transport's. Returns false with the reason in
/// `why` for a control character in the path or a header (the byte and its
/// index are named, a header value never shown).
bool build_upgrade_request(const std::string& path, const std::string& key,
                           const header_list& headers, http_request& out,
                           std::string& why);

} // namespace core
} // namespace outbound
