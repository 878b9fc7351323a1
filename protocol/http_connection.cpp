#include "protocol/http_connection.hpp"

#include "core/text.hpp"
#include "protocol/http_wire.hpp"
#include "protocol/tls_context.hpp"

#include <boost/asio/error.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/beast/http/error.hpp>

#include <charconv>
#include <cstring>
#include <string_view>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>

namespace outbound {
inline namespace protocol {} // namespace protocol

namespace detail {

namespace http = boost::beast::http;

// Defined in http_connection_plain.cpp / http_connection_tls.cpp, so that
// each heavy instantiation lives in its own translation unit.
std::shared_ptr<http_connection>
make_plain_connection(io_runner& io, const url_parts& origin);
std::shared_ptr<http_connection>
make_tls_connection(io_runner& io, const url_parts& origin,
                    std::shared_ptr<tls_context> tls);

bool serialize_request(const http_request& req, const url_parts& origin,
                       std::string& out, std::string& why) {
  // Every check first, then one sized write: the request line, Host, the
  // headers and Content-Length are copied into `out` in one pass instead of
  // twenty appends (each with its own capacity check). This runs once per
  // exchange.
  if (!core::is_token(req.method)) {
    why = "invalid request method";
    return false;
  }
  if (req.target.empty() || req.target[0] != '/'
      || core::has_cr_lf_nul(req.target)
      || req.target.find(' ') != std::string::npos) {
    why = "invalid request target (must be origin-form without spaces)";
    return false;
  }
  // Generated here; a second copy would make the framing ambiguous.
  auto generated = [](std::string_view name) {
    return core::iequals(name, "Host") || core::iequals(name, "Content-Length")
           || core::iequals(name, "Transfer-Encoding");
  };
  std::size_t header_bytes = 0;
  for (const auto& [name, value] : req.headers) {
    if (!core::is_token(name)) {
      // Never echo the value: it may be a credential.
      why = "invalid header name";
      return false;
    }
    if (core::has_cr_lf_nul(value)) {
      why = "header '" + name + "' contains CR, LF or NUL";
      return false;
    }
    if (!generated(name))
      header_bytes += name.size() + 2 + value.size() + 2;
  }
  std::string_view method = req.method;
  bool v6 = origin.host.find(':') != std::string::npos;
  char port[8];
  std::size_t port_len = 0;
  if (origin.port != (origin.tls() ? 443 : 80)) {
    port[0] = ':';
    port_len = static_cast<std::size_t>(
      std::to_chars(port + 1, port + sizeof port, origin.port).ptr - port);
  }
  char length[24];
  std::size_t length_len = 0;
  if (!req.body.empty() || method == "POST" || method == "PUT"
      || method == "PATCH")
    length_len = static_cast<std::size_t>(
      std::to_chars(length, length + sizeof length, req.body.size()).ptr
      - length);
  constexpr std::string_view version = " HTTP/1.1\r\nHost: ";
  constexpr std::string_view content_length = "Content-Length: ";
  std::size_t head
    = method.size() + 1 + req.target.size() + version.size()
      + origin.host.size() + (v6 ? 2 : 0) + port_len + 2 + header_bytes
      + (length_len ? content_length.size() + length_len + 2 : 0) + 2;
  auto at = out.size();
  out.reserve(at + head + req.body.size());
  out.resize(at + head); // the body is appended: copied once, not zeroed
  char* p = out.data() + at;
  auto put = [&p](std::string_view s) {
    std::memcpy(p, s.data(), s.size());
    p += s.size();
  };
  put(method);
  *p++ = ' ';
  put(req.target);
  put(version);
  if (v6)
    *p++ = '[';
  put(origin.host);
  if (v6)
    *p++ = ']';
  put({port, port_len});
  put("\r\n");
  for (const auto& [name, value] : req.headers) {
    if (generated(name))
      continue;
    put(name);
    put(": ");
    put(value);
    put("\r\n");
  }
  if (length_len) {
    put(content_length);
    put({length, length_len});
    put("\r\n");
  }
  put("\r\n");
  out.append(req.body);
  return true;
}

bool is_ip_literal(const std::string& host) {
  boost::system::error_code ec;
  boost::asio::ip::make_address(host, ec);
  return !ec;
}

transport_error_kind classify_connect_error(const error_code& ec) {
  if (ec == boost::system::errc::address_not_available
      || ec == boost::system::errc::address_in_use)
    return transport_error_kind::local_resource;
  return transport_error_kind::connect;
}

namespace {

bool is_reset(const error_code& ec) {
  return ec == boost::asio::error::connection_reset
         || ec == boost::asio::error::connection_aborted
         || ec == boost::asio::error::broken_pipe;
}

bool is_eof(const error_code& ec) {
  return ec == http::error::end_of_stream || ec == boost::asio::error::eof
         || ec == boost::asio::ssl::error::stream_truncated;
}

} // namespace

std::string describe_header_error(const error_code& ec, bool got_some) {
  using e = http::error;
  if (is_eof(ec) || ec == e::partial_message) {
    if (!got_some)
      return "connection closed before the response";
    return "connection closed inside the response header";
  }
  if (is_reset(ec))
    return got_some ? "connection reset inside the response header"
                    : "connection reset before the response";
  if (ec == e::header_limit)
    return "response header exceeds "
           + std::to_string(max_header_bytes / 1024) + " KiB";
  if (ec == e::bad_version || ec == e::bad_status || ec == e::bad_reason)
    return "malformed status line (" + ec.message() + ")";
  if (ec == e::bad_line_ending)
    return "malformed line ending in the response header";
  if (ec == e::bad_field || ec == e::bad_value || ec == e::bad_obs_fold)
    return "malformed header field (" + ec.message() + ")";
  if (ec == e::bad_content_length)
    return "malformed Content-Length";
  if (ec == e::bad_transfer_encoding)
    return "malformed Transfer-Encoding";
  return "reading the response header failed: " + ec.message();
}

std::string describe_body_error(const error_code& ec, bool chunked,
                                std::optional<std::uint64_t> expected,
                                std::size_t got) {
  using e = http::error;
  if (is_eof(ec) || ec == e::partial_message) {
    if (chunked)
      return "truncated chunked body";
    if (expected)
      return "truncated body: expected " + std::to_string(*expected)
             + " bytes, got " + std::to_string(got);
    return "truncated body";
  }
  if (is_reset(ec))
    return (chunked ? "connection reset inside the chunked body"
                    : "connection reset inside the body (got "
                        + std::to_string(got) + " bytes)");
  if (ec == e::bad_chunk || ec == e::bad_chunk_extension)
    return "malformed chunked body (" + ec.message() + ")";
  if (ec == e::buffer_overflow)
    // Only a chunk-size line or a trailer stays buffered
    // (detail/http_session.hpp).
    return "malformed chunked body (a chunk-size line or trailer exceeds "
           + std::to_string((max_header_bytes + 64 * 1024) / 1024) + " KiB)";
  if (ec == e::bad_field || ec == e::bad_value || ec == e::header_limit)
    return "malformed chunked trailer (" + ec.message() + ")";
  return "reading the response body failed: " + ec.message();
}

std::string describe_tls_error(const error_code& ec, long verify_result) {
  std::string out = "TLS handshake failed: ";
  if (verify_result != X509_V_OK) {
    out += "certificate verify failed: ";
    out += X509_verify_cert_error_string(verify_result);
    return out;
  }
  if (is_eof(ec))
    return out + "connection closed by the server (client certificate refused?)";
  if (is_reset(ec))
    return out + "connection reset by the server";
  out += ec.message();
  return out;
}

bool is_tls_alert(const error_code& ec) {
  return ec.category() == boost::asio::error::get_ssl_category();
}

bool prepare_tls(void* native_ssl, const std::string& host, std::string& why) {
  auto* ssl = static_cast<SSL*>(native_ssl);
  if (is_ip_literal(host)) {
    // No SNI for IP literals (RFC 6066 section 3); verify the IP SAN.
    if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host.c_str()) != 1) {
      why = "cannot set IP verification for " + host;
      return false;
    }
    return true;
  }
  if (SSL_set_tlsext_host_name(ssl, host.c_str()) != 1) {
    why = "cannot set SNI host name " + host;
    return false;
  }
  if (SSL_set1_host(ssl, host.c_str()) != 1) {
    why = "cannot set host-name verification for " + host;
    return false;
  }
  return true;
}

std::size_t tls_pending(void* native_ssl) {
  auto n = SSL_pending(static_cast<SSL*>(native_ssl));
  return n > 0 ? static_cast<std::size_t>(n) : 0;
}

std::string millis_text(std::chrono::steady_clock::duration d) {
  return std::to_string(
           std::chrono::duration_cast<std::chrono::milliseconds>(d).count())
         + " ms";
}

} // namespace detail

inline namespace protocol {

exchange_handler::~exchange_handler() = default;

http_connection::~http_connection() = default;

std::shared_ptr<http_connection>
http_connection::make(io_runner& io, const url_parts& origin,
                      std::shared_ptr<tls_context> tls) {
  if (!origin.tls())
    return detail::make_plain_connection(io, origin);
  if (!tls)
    tls = tls_context::make(tls_config{});
  return detail::make_tls_connection(io, origin, std::move(tls));
}

} // namespace protocol
} // namespace outbound
