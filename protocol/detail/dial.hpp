#pragma once

// Private to protocol/ (pulls in Asio and OpenSSL): the one dial routine of
// outbound's client sessions, HTTP (http_session.hpp) and WebSocket
// (ws_session_impl.hpp):
//
//   resolve (skipped for an IP literal) ─► connect (TCP_NODELAY)
//     ─► [TLS: SNI + host-name verification (prepare_tls), handshake]
//
// with one classification of its failures as transport_error_kind:
// `connect` (DNS or TCP), `local_resource` (no local address or port to
// connect from: EADDRNOTAVAIL / EADDRINUSE, i.e. local port exhaustion) and
// `tls` (setup, handshake or certificate verification).
//
// The session drives it and keeps its own state. `Session` provides, all
// used on its strand:
//   static constexpr bool is_tls;
//   plain_stream& sock();               // the TCP socket
//   auto& dial_stream();                // the TLS stream (is_tls only)
//   bool dial_abandoned() const;        // the session ended meanwhile
//   void dial_step(dial_step);          // now resolving / connecting / TLS
//   void dialled();                     // connected (and TLS done)
//   void dial_failed(transport_error_kind, std::string detail);

#include "protocol/errors.hpp"
#include "protocol/http_types.hpp"
#include "protocol/http_wire.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/ssl/stream_base.hpp>
#include <boost/asio/strand.hpp>

#include <openssl/ssl.h>

#include <memory>
#include <string>

namespace outbound::detail {

/// The streams the WebSocket session dials: a TCP socket on its
/// connection's strand, and TLS over it.
using strand_type
  = boost::asio::strand<boost::asio::io_context::executor_type>;
using plain_stream
  = boost::asio::basic_stream_socket<boost::asio::ip::tcp, strand_type>;
using tls_stream = boost::asio::ssl::stream<plain_stream>;

/// The executors an HTTP connection runs on, chosen per connection at run
/// time (protocol/http_connection_plain.cpp, _tls.cpp): a strand of its own
/// when several threads run the io_context, the io_context's executor itself
/// when one thread does (io_runner::impl::one_thread). A strand costs every
/// handler of every call a lock and reference counts; a type-erased
/// executor (any_io_executor) would cost half of that again, so the session
/// is compiled for both (bench/README.md, request_throughput).
using http_io_executor = boost::asio::io_context::executor_type;
template <class Executor>
using http_plain_stream
  = boost::asio::basic_stream_socket<boost::asio::ip::tcp, Executor>;

/// Where a dial is (for a session's "timed out while ..." text).
enum class dial_step { resolving, connecting, tls_handshake };

template <class Session>
void dial_connect(std::shared_ptr<Session> self,
                  const boost::asio::ip::tcp::resolver::results_type& eps,
                  const url_parts& origin);

template <class Session>
void dial_tls(std::shared_ptr<Session> self, const url_parts& origin) {
  if constexpr (Session::is_tls) {
    self->dial_step(dial_step::tls_handshake);
    std::string why;
    if (!prepare_tls(self->dial_stream().native_handle(), origin.host, why))
      return self->dial_failed(transport_error_kind::tls, why);
    auto& stream = self->dial_stream();
    stream.async_handshake(
      boost::asio::ssl::stream_base::client,
      [self](const boost::system::error_code& ec) {
        if (self->dial_abandoned())
          return;
        if (ec)
          return self->dial_failed(
            transport_error_kind::tls,
            describe_tls_error(
              ec, SSL_get_verify_result(self->dial_stream().native_handle())));
        self->dialled();
      });
  }
}

template <class Session>
void dial_connect(std::shared_ptr<Session> self,
                  const boost::asio::ip::tcp::resolver::results_type& eps,
                  const url_parts& origin) {
  using tcp = boost::asio::ip::tcp;
  self->dial_step(dial_step::connecting);
  auto& sock = self->sock();
  boost::asio::async_connect(
    sock, eps,
    [self, &origin](const boost::system::error_code& ec, const tcp::endpoint&) {
      if (self->dial_abandoned())
        return;
      if (ec)
        return self->dial_failed(classify_connect_error(ec),
                                 "connect to " + origin.authority()
                                   + " failed: " + ec.message());
      boost::system::error_code ignored;
      self->sock().set_option(tcp::no_delay{true}, ignored);
      if constexpr (Session::is_tls)
        dial_tls(self, origin);
      else
        self->dialled();
    });
}

/// Starts the dial of `self` to `origin` (which must outlive the dial: a
/// member of the session). `resolver` is the session's, on its strand.
template <class Session, class Resolver>
void dial(std::shared_ptr<Session> self, Resolver& resolver,
          const url_parts& origin) {
  using tcp = boost::asio::ip::tcp;
  auto port = std::to_string(origin.port);
  if (is_ip_literal(origin.host)) {
    boost::system::error_code ec;
    auto addr = boost::asio::ip::make_address(origin.host, ec);
    auto eps = tcp::resolver::results_type::create(
      tcp::endpoint{addr, origin.port}, origin.host, port);
    return dial_connect(std::move(self), eps, origin);
  }
  self->dial_step(dial_step::resolving);
  resolver.async_resolve(
    origin.host, port,
    [self, &origin](const boost::system::error_code& ec,
                    tcp::resolver::results_type eps) {
      if (self->dial_abandoned())
        return;
      if (ec)
        return self->dial_failed(transport_error_kind::connect,
                                 "cannot resolve " + origin.host + ": "
                                   + ec.message());
      dial_connect(self, eps, origin);
    });
}

} // namespace outbound::detail
