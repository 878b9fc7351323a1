#pragma once

// Private to protocol/http_connection*.cpp: the stream-independent pieces of
// an HTTP/1.1 exchange (request serialization, error translation, TLS
// per-connection setup), defined once in http_connection.cpp and used by both
// session instantiations (detail/http_session.hpp). Only Boost.System here.

#include "config/client_config.hpp"
#include "protocol/http_types.hpp"

#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace outbound::detail {

using boost::system::error_code;

/// Beast's header_limit of a response (bytes). It bounds the header bytes
/// buffered at once, not the whole header (complete fields are consumed as
/// they arrive): no field line may exceed it, and no header twice its size
/// passes.
constexpr std::uint32_t max_header_bytes = 64 * 1024;

/// Serializes `req` as an HTTP/1.1 request to `origin` into `out`. Returns
/// false (and leaves a reason in `why`) if a header name or value carries a
/// CR, LF or NUL, or the target is not origin-form.
bool serialize_request(const http_request& req, const url_parts& origin,
                       std::string& out, std::string& why);

/// True if `host` is an IPv4 or IPv6 literal (no brackets).
bool is_ip_literal(const std::string& host);

/// `connect` or `local_resource` for a failed TCP connect.
transport_error_kind classify_connect_error(const error_code& ec);

/// Detail text for a failed read of the response header.
std::string describe_header_error(const error_code& ec, bool got_some);

/// Detail text for a failed read of the response body (not body_limit).
std::string describe_body_error(const error_code& ec, bool chunked,
                                std::optional<std::uint64_t> expected,
                                std::size_t got);

/// Detail text of a failed TLS handshake: OpenSSL's reason plus the
/// certificate verification result when verification failed.
std::string describe_tls_error(const error_code& ec, long verify_result);

/// True if `ec` is an OpenSSL protocol error (an alert, a bad record), not
/// a plain EOF or reset.
bool is_tls_alert(const error_code& ec);

/// Applies SNI (host names only) and host-name / IP-SAN verification to a
/// new SSL object. Returns false with a reason in `why` on failure.
bool prepare_tls(void* native_ssl, const std::string& host, std::string& why);

/// Bytes OpenSSL has decrypted but not handed out yet (0 for plain).
std::size_t tls_pending(void* native_ssl);

/// Milliseconds as text, for details ("1000 ms").
std::string millis_text(std::chrono::steady_clock::duration d);

} // namespace outbound::detail
