// The hub's listener and HTTP/1.1 sessions on Beast (one of the two heavy
// TUs; hub_ws.cpp is the other). Each connection runs on its own strand:
// read a request, answer it through hub::impl::handle_http, keep-alive
// loop; an upgrade request on a WebSocket path hands the stream over to
// hub_start_ws_session.

#include "hub/hub_impl.hpp"
#include "hub/hub_ws.hpp"

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket/rfc6455.hpp>

#include <fcntl.h>

#include <chrono>
#include <memory>
#include <optional>

namespace outbound {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

namespace {

/// Idle limit of a keep-alive HTTP connection between requests.
constexpr auto http_idle_timeout = std::chrono::seconds{60};

/// Pause before accepting again after an accept error (EMFILE, ...).
constexpr auto accept_retry_delay = std::chrono::milliseconds{50};

class http_session : public hub_http_session,
                     public std::enable_shared_from_this<http_session> {
public:
  http_session(hub::impl& h, tcp::socket socket, std::size_t node)
    : hub_(h), stream_(std::move(socket)), node_(node) {
  }

  void run() {
    net::dispatch(stream_.get_executor(),
                  beast::bind_front_handler(&http_session::do_read,
                                            shared_from_this()));
  }

  void shutdown() override {
    net::post(stream_.get_executor(), [self = shared_from_this()] {
      // A held (stalled) request must not keep the io thread busy at stop.
      if (self->delay_)
        self->delay_->cancel();
      self->close_now();
    });
  }

private:
  void do_read() {
    parser_.emplace();
    parser_->body_limit(hub_.cfg.max_request_body);
    stream_.expires_after(http_idle_timeout);
    http::async_read(stream_, buffer_, *parser_,
                     beast::bind_front_handler(&http_session::on_read,
                                               shared_from_this()));
  }

  void on_read(beast::error_code ec, std::size_t) {
    if (ec == http::error::end_of_stream) {
      stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
      return;
    }
    if (ec == http::error::body_limit) {
      send(413, error_body("request body too large"), false);
      return;
    }
    if (ec)
      return;
    auto req = parser_->release();
    if (beast::websocket::is_upgrade(req)) {
      auto target = std::string{req.target()};
      auto path = target.substr(0, target.find('?'));
      if (auto tier = hub_.ws_tier(path)) {
        stream_.expires_never();
        hub_start_ws_session(hub_, std::move(stream_), std::move(req), *tier);
        return;
      }
      send(404, error_body("not found"), false);
      return;
    }
    // Every request gets an answer: an exception out of a handler would
    // otherwise unwind through the io loop and drop the connection silently.
    hub::impl::http_answer a;
    try {
      a = hub_.handle_http(std::string{req.method_string()},
                           std::string{req.target()}, req.body(), node_,
                           std::string{req["Idempotency-Key"]});
    } catch (const std::exception& e) {
      a = {};
      a.status = 500;
      a.body = error_body(std::string{"internal error: "} + e.what());
    }
    if (a.close_without_answer) {
      hold_then_close(a.delay);
      return;
    }
    if (a.delay.count() > 0) {
      // A latency profile: answer later, without blocking the io thread.
      // The timer dies with the session (a client that gave up and closed
      // is answered into a closed socket, which fails quietly).
      delay_.emplace(stream_.get_executor(), a.delay);
      delay_->async_wait([self = shared_from_this(), a = std::move(a),
                          keep = req.keep_alive()](beast::error_code ec) mutable {
        if (ec)
          return;
        self->send(a.status, std::move(a.body), keep);
      });
      return;
    }
    send(a.status, std::move(a.body), req.keep_alive(), a.leader_hint);
  }

  void close_now() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
  }

  // An oracle node that does not answer (stall, commit_no_reply): close the
  // connection after `d` without a response. Meanwhile a read notices a
  // client that gives up first, so its socket is not kept for the whole
  // bound.
  void hold_then_close(std::chrono::nanoseconds d) {
    stream_.expires_never();
    if (d.count() <= 0) {
      close_now();
      return;
    }
    delay_.emplace(stream_.get_executor(), d);
    delay_->async_wait([self = shared_from_this()](beast::error_code ec) {
      if (ec)
        return;
      self->close_now();
    });
    watch_for_close();
  }

  void watch_for_close() {
    stream_.socket().async_read_some(
      net::buffer(discard_),
      [self = shared_from_this()](beast::error_code ec, std::size_t) {
        if (ec) {
          if (self->delay_)
            self->delay_->cancel();
          self->close_now();
          return;
        }
        self->watch_for_close(); // pipelined bytes: discarded
      });
  }

  void send(int status, std::string body, bool keep_alive,
            const std::string& leader_hint = {}) {
    auto res = std::make_shared<http::response<http::string_body>>(
      static_cast<http::status>(status), 11);
    res->set(http::field::server, "outbound-hub");
    res->set(http::field::content_type, "application/json");
    if (!leader_hint.empty())
      res->set("leader-hint", leader_hint);
    res->keep_alive(keep_alive);
    res->body() = std::move(body);
    res->prepare_payload();
    stream_.expires_after(http_idle_timeout);
    http::async_write(stream_, *res,
                      [self = shared_from_this(), res](beast::error_code ec,
                                                       std::size_t) {
                        self->on_write(ec, res->keep_alive());
                      });
  }

  void on_write(beast::error_code ec, bool keep_alive) {
    if (ec)
      return;
    if (!keep_alive) {
      stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
      return;
    }
    do_read();
  }

  hub::impl& hub_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::optional<net::steady_timer> delay_;
  std::size_t node_;
  char discard_[256];
};

void do_accept(hub::impl& h, tcp::acceptor& a, std::size_t node) {
  a.async_accept(
    net::make_strand(*h.ioc),
    [&h, &a, node](beast::error_code ec, tcp::socket socket) {
      if (ec == net::error::operation_aborted || !a.is_open())
        return;
      if (ec) {
        // Out of descriptors or similar: retry shortly instead of spinning.
        auto t = std::make_shared<net::steady_timer>(a.get_executor(),
                                                     accept_retry_delay);
        t->async_wait([&h, &a, node, t](beast::error_code) {
          if (a.is_open())
            do_accept(h, a, node);
        });
        return;
      }
      socket.set_option(tcp::no_delay(true), ec);
      ::fcntl(socket.native_handle(), F_SETFD, FD_CLOEXEC); // see hub.cpp
      hub_start_http_session(h, std::move(socket), node);
      do_accept(h, a, node);
    });
}

} // namespace

void hub_start_accepting(hub::impl& h) {
  do_accept(h, *h.acceptor, 0);
}

void hub_start_accepting_node(hub::impl& h, tcp::acceptor& a,
                              std::size_t node) {
  do_accept(h, a, node);
}

void hub_start_http_session(hub::impl& h, tcp::socket socket,
                            std::size_t node) {
  auto s = std::make_shared<http_session>(h, std::move(socket), node);
  h.on_http_open(s);
  s->run();
}

} // namespace outbound
