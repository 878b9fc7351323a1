#include "metrics/metrics_exposer.hpp"

#include "config/config_error.hpp"
#include "metrics/outbound_metrics.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/registry.h>

#include <fcntl.h>

#include <array>
#include <chrono>
#include <cmath>
#include <exception>
#include <list>
#include <optional>
#include <thread>
#include <vector>

namespace outbound {
inline namespace metrics {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

namespace {

/// The media type of the text exposition format, version 0.0.4
/// (https://prometheus.io/docs/instrumenting/exposition_formats/).
constexpr const char* exposition_content_type =
  "text/plain; version=0.0.4; charset=utf-8";

/// What a request gets: GET and HEAD of /metrics (RFC 9110 §9.3.1,
/// §9.3.2), 404 for any other path, 405 with `Allow` for another method
/// on /metrics (RFC 9110 §15.5.6).
enum class metrics_route { metrics, not_found, method_not_allowed };

metrics_route route_of(http::verb method, beast::string_view target) {
  // Prometheus may append `params:` from its scrape config as a query.
  auto path = target.substr(0, target.find('?'));
  if (path != "/metrics")
    return metrics_route::not_found;
  if (method == http::verb::get || method == http::verb::head)
    return metrics_route::metrics;
  return metrics_route::method_not_allowed;
}

/// Why the listener closed a connection that got no answer; one label
/// value of outbound_metrics_connections_closed_total each.
enum class close_reason {
  header_timeout,
  idle_timeout,
  write_timeout,
  evicted,
  evicted_unread,
  pipeline_limit,
  refused,
};

constexpr std::array<const char*, 7> close_reason_labels{
  "header_timeout", "idle_timeout",   "write_timeout", "evicted",
  "evicted_unread", "pipeline_limit", "refused"};

/// Pause before accepting again after an accept error (EMFILE, ...), so an
/// exhausted descriptor table does not turn into a busy loop.
constexpr auto accept_retry_delay = std::chrono::milliseconds{50};

/// Bytes read at once while waiting for the next request on an idle
/// keep-alive connection.
constexpr std::size_t idle_read_size = 1024;

std::chrono::steady_clock::duration to_duration(double seconds) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
    std::chrono::duration<double>(seconds));
}

void check_seconds(double v, const char* field) {
  // The upper bound keeps the conversion to steady_clock ticks finite.
  if (!std::isfinite(v) || v <= 0 || v > 86400)
    throw config_error(std::string{"metrics."} + field,
                       "must be a number of seconds in (0, 86400]");
}

void close_on_exec(int fd) {
  // Asio does not open sockets close-on-exec: a process that serves
  // metrics and spawns a child would leak the listener into it.
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
}

} // namespace

// -- the server ---------------------------------------------------------------
//
// Everything below runs on the one io thread, except the constructor,
// listen() and stop(), which run on the owner's thread before the io thread
// starts or while it is told to finish. So no strand and no lock.

struct metrics_exposer::server {
  class session;
  using session_list = std::list<std::weak_ptr<session>>;

  server(std::shared_ptr<metrics_registry> registry,
         const metrics_exposer_limits& limits)
    : registry_(std::move(registry)),
      header_timeout_(to_duration(limits.header_timeout)),
      idle_timeout_(to_duration(limits.idle_timeout)),
      write_timeout_(to_duration(limits.write_timeout)),
      min_write_stall_(to_duration(limits.min_write_stall)),
      max_connections_(limits.max_connections),
      max_pipelined_(limits.max_pipelined_requests) {
    // Every label value from the start: a 0 is a sample, an absent series
    // is not (https://prometheus.io/docs/practices/instrumentation/).
    auto& family =
      prometheus::BuildCounter()
        .Name("outbound_metrics_connections_closed_total")
        .Help("Connections the /metrics listener closed without an answer, "
              "by reason")
        .Register(*registry_->registry());
    for (std::size_t i = 0; i < close_reason_labels.size(); ++i)
      closed_[i] = &family.Add({{"reason", close_reason_labels[i]}});
  }

  /// Opens, binds and listens; the bound port. Throws config_error.
  uint16_t listen(const std::string& address, uint16_t port);
  /// Starts accepting on a new io thread.
  void start();
  /// Closes the listener and every connection, joins the io thread.
  void stop();

  void do_accept();
  void on_accept(beast::error_code ec, tcp::socket socket);
  /// At the cap: closes the connection stuck longest (waiting for a
  /// request, or writing without progress for min_write_stall). False
  /// when none is open or evictable.
  bool make_room();
  /// A new mark on the server's logical clock: sessions stamp the moment
  /// they start waiting or last made write progress, and make_room()
  /// closes the lowest stamp.
  uint64_t tick() {
    return ++ticks_;
  }
  void forget(session_list::iterator it) {
    open_.erase(it);
  }
  void count(close_reason r) {
    closed_[static_cast<std::size_t>(r)]->Increment();
  }

  std::shared_ptr<metrics_registry> registry_;
  std::chrono::steady_clock::duration header_timeout_;
  std::chrono::steady_clock::duration idle_timeout_;
  std::chrono::steady_clock::duration write_timeout_;
  std::chrono::steady_clock::duration min_write_stall_;
  std::size_t max_connections_;
  std::size_t max_pipelined_;
  uint64_t ticks_ = 0;
  /// outbound_metrics_connections_closed_total by close_reason; the
  /// registry (kept alive by registry_) owns the counters.
  std::array<prometheus::Counter*, close_reason_labels.size()> closed_{};
  // Declared before every I/O object: it is destroyed after them.
  net::io_context ioc_{1};
  tcp::acceptor acceptor_{ioc_};
  net::steady_timer accept_retry_{ioc_};
  std::thread thread_;
  bool stopping_ = false;
  /// Open connections, oldest first; a session unlinks itself on close.
  session_list open_;
};

// One connection, the Beast way (example/http/server/async): a chain of
// asynchronous steps on a beast::tcp_stream whose expiry bounds each step.
// Every way out goes through close(), which unlinks the session, so the
// connection count stays exact.
class metrics_exposer::server::session
  : public std::enable_shared_from_this<session> {
public:
  session(server& srv, tcp::socket socket)
    : server_(srv), stream_(std::move(socket)) {
  }

  void start(session_list::iterator it) {
    it_ = it;
    read_header();
  }

  /// Waiting for (the rest of) a request: idle keep-alive, or a header
  /// still incomplete. Otherwise writing an answer.
  bool waiting() const {
    return phase_ == phase::waiting;
  }

  /// The server tick since which this connection has been stuck: when it
  /// started to wait for its request, or when its answer last made write
  /// progress. The lowest one is closed at the cap.
  uint64_t stuck_since() const {
    return since_;
  }

  /// May be closed to make room at the cap: waiting for a request, or
  /// writing an answer that has made no progress for min_write_stall (at
  /// `now`). An answer that flows, however slowly, is not cut off.
  bool evictable(std::chrono::steady_clock::time_point now) const {
    return phase_ == phase::waiting
           || (phase_ == phase::answering
               && now - progress_at_ >= server_.min_write_stall_);
  }

  void close() {
    if (phase_ == phase::closed)
      return;
    phase_ = phase::closed;
    server_.forget(it_);
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close(); // also cancels the pending operation and its timer
  }

private:
  enum class phase { waiting, answering, closed };

  // Keep-alive: wait for the first byte of the next request under the idle
  // limit; the header deadline starts with it.
  void wait_idle() {
    since_ = server_.tick();
    stream_.expires_after(server_.idle_timeout_);
    stream_.async_read_some(
      buffer_.prepare(idle_read_size),
      [self = shared_from_this()](beast::error_code ec, std::size_t n) {
        self->on_idle_read(ec, n);
      });
  }

  void on_idle_read(beast::error_code ec, std::size_t n) {
    if (phase_ == phase::closed)
      return;
    if (ec) {
      if (ec == beast::error::timeout)
        server_.count(close_reason::idle_timeout);
      close(); // the idle limit, EOF, reset or stop
      return;
    }
    buffer_.commit(n);
    read_header();
  }

  void read_header() {
    // Header bytes that trickle in do not refresh the stamp: a slow header
    // stays the oldest.
    since_ = server_.tick();
    parser_.emplace();
    stream_.expires_after(server_.header_timeout_);
    http::async_read_header(
      stream_, buffer_, *parser_,
      [self = shared_from_this()](beast::error_code ec, std::size_t n) {
        self->on_header(ec, n);
      });
  }

  void on_header(beast::error_code ec, std::size_t n) {
    if (phase_ == phase::closed)
      return;
    // The parser took n bytes out of buffer_: this header ends at stream
    // offset consumed_.
    consumed_ += n;
    if (ec == beast::error::timeout || ec == http::error::end_of_stream
        || ec == http::error::partial_message
        || ec == net::error::operation_aborted) {
      // A deadline passed (Beast closed the socket), the client left (in
      // the middle of a header, too), or stop().
      if (ec == beast::error::timeout)
        server_.count(close_reason::header_timeout);
      close();
      return;
    }
    phase_ = phase::answering;
    if (ec) {
      // Not HTTP (RFC 9112 §3: a server should answer 400 and close).
      answer_error(http::status::bad_request, "bad request\n", 11);
      return;
    }
    // A request body is not read: answer it, then close, rather than
    // parse a body nobody needs (RFC 9112 §9.6).
    bool body_follows = !parser_->is_done();
    auto req = parser_->release();
    answer(req, req.keep_alive() && !body_follows);
  }

  void answer(const http::request<http::empty_body>& req, bool keep_alive) {
    auto route = route_of(req.method(), req.target());
    http::status status = http::status::ok;
    std::string body;
    std::string type = "text/plain; charset=utf-8";
    switch (route) {
      case metrics_route::metrics:
        try {
          // Requests pipelined together get one snapshot: serialising the
          // registry once per pipelined request would let one connection
          // make the io thread do it max_pipelined_requests times. But
          // only requests whose header had arrived whole when the snapshot
          // was taken: a pipelined header that trickles in later (up to
          // header_timeout later) gets a snapshot no older than itself.
          if (snapshot_ && consumed_ <= snapshot_covers_) {
            body = *snapshot_;
          } else {
            snapshot_.reset();
            body = server_.registry_->serialize();
            if (buffer_.size() > 0) {
              snapshot_ = std::make_shared<const std::string>(body);
              snapshot_covers_ = consumed_ + buffer_.size();
            }
          }
          type = exposition_content_type;
        } catch (const std::exception& e) {
          status = http::status::internal_server_error;
          body = std::string{"cannot serialise the metrics: "} + e.what()
                 + "\n";
        }
        break;
      case metrics_route::not_found:
        status = http::status::not_found;
        body = "not found: only /metrics is served\n";
        break;
      case metrics_route::method_not_allowed:
        status = http::status::method_not_allowed;
        body = "method not allowed: GET or HEAD\n";
        break;
    }
    if (req.method() == http::verb::head) {
      // The headers a GET would get, no body (RFC 9110 §9.3.2).
      http::response<http::empty_body> res{status, req.version()};
      fill(res, route, type, keep_alive);
      res.content_length(body.size());
      send(std::move(res));
      return;
    }
    http::response<http::string_body> res{status, req.version()};
    fill(res, route, type, keep_alive);
    res.body() = std::move(body);
    res.prepare_payload();
    send(std::move(res));
  }

  template <class Response>
  static void fill(Response& res, metrics_route route,
                   const std::string& type, bool keep_alive) {
    res.set(http::field::content_type, type);
    if (route == metrics_route::method_not_allowed)
      res.set(http::field::allow, "GET, HEAD");
    res.keep_alive(keep_alive);
  }

  void answer_error(http::status status, std::string body, unsigned version) {
    http::response<http::string_body> res{status, version};
    res.set(http::field::content_type, "text/plain; charset=utf-8");
    res.keep_alive(false);
    res.body() = std::move(body);
    res.prepare_payload();
    send(std::move(res));
  }

  /// A response and its serializer, alive until the last write.
  template <class Body>
  struct outgoing {
    explicit outgoing(http::response<Body> r) : res(std::move(r)) {
    }
    http::response<Body> res;
    http::response_serializer<Body> sr{res};
  };

  template <class Body>
  void send(http::response<Body> res) {
    since_ = server_.tick();
    progress_at_ = std::chrono::steady_clock::now();
    // While an answer is being written, closing the socket (eviction, the
    // write deadline: Beast closes it, or stop()) resets the connection
    // and drops what is queued, instead of leaving a socket with full
    // buffers lingering for a client that does not read (nginx's
    // reset_timedout_connection,
    // https://nginx.org/en/docs/http/ngx_http_core_module.html#reset_timedout_connection).
    linger_abortively(true);
    stream_.expires_after(server_.write_timeout_);
    write_some(std::make_shared<outgoing<Body>>(std::move(res)));
  }

  // Written piece by piece (rather than with http::async_write) so that
  // every piece the client takes refreshes the stamp: a slow reader keeps
  // its slot, a client that does not read at all is the one to close.
  template <class Body>
  void write_some(std::shared_ptr<outgoing<Body>> out) {
    auto& sr = out->sr;
    http::async_write_some(
      stream_, sr,
      [self = shared_from_this(), out = std::move(out)](beast::error_code ec,
                                                        std::size_t n) {
        self->on_write_some(ec, n, out);
      });
  }

  template <class Body>
  void on_write_some(beast::error_code ec, std::size_t n,
                     const std::shared_ptr<outgoing<Body>>& out) {
    if (phase_ == phase::closed)
      return;
    if (!ec && n > 0) {
      since_ = server_.tick();
      progress_at_ = std::chrono::steady_clock::now();
    }
    if (!ec && !out->sr.is_done()) {
      write_some(out);
      return;
    }
    on_write(ec, out->res.keep_alive());
  }

  void linger_abortively(bool on) {
    beast::error_code ignored;
    stream_.socket().set_option(net::socket_base::linger(on, 0), ignored);
  }

  void on_write(beast::error_code ec, bool keep_alive) {
    if (phase_ == phase::closed)
      return;
    if (!ec)
      linger_abortively(false); // a Connection: close answer must arrive
    if (ec == beast::error::timeout)
      server_.count(close_reason::write_timeout);
    if (ec || !keep_alive) {
      close();
      return;
    }
    phase_ = phase::waiting;
    if (buffer_.size() == 0) {
      pipelined_ = 0;
      snapshot_.reset();
      wait_idle();
      return;
    }
    // A pipelined request is already in the buffer (RFC 9112 §9.3.2). Each
    // one costs a serialisation of the registry, and a client that sends
    // them without reading the answers is not scraping: cap them.
    if (++pipelined_ > server_.max_pipelined_) {
      server_.count(close_reason::pipeline_limit);
      close();
      return;
    }
    read_header();
  }

  server& server_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::empty_body>> parser_;
  session_list::iterator it_;
  phase phase_ = phase::waiting;
  uint64_t since_ = 0;
  /// While answering: when the answer began or last made write progress.
  std::chrono::steady_clock::time_point progress_at_{};
  /// Requests answered in a row that were already received when the
  /// answer before them was written.
  std::size_t pipelined_ = 0;
  /// The exposition served to the first of a run of pipelined requests,
  /// served again to the rest of the run whose headers it covers.
  std::shared_ptr<const std::string> snapshot_;
  /// Bytes of the connection the parser has taken (headers so far).
  uint64_t consumed_ = 0;
  /// Stream offset up to which bytes had been received when snapshot_ was
  /// taken: a header ending at or before it was complete by then.
  uint64_t snapshot_covers_ = 0;
};

uint16_t metrics_exposer::server::listen(const std::string& address,
                                         uint16_t port) {
  auto where = address + ":" + std::to_string(port);
  beast::error_code ec;
  auto addr = net::ip::make_address(address, ec);
  if (ec)
    throw config_error("metrics.port",
                       "cannot listen on " + where + ": bad address");
  tcp::endpoint ep{addr, port};
  acceptor_.open(ep.protocol(), ec);
  if (!ec)
    close_on_exec(acceptor_.native_handle());
  if (!ec)
    acceptor_.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec)
    acceptor_.bind(ep, ec);
  if (!ec)
    acceptor_.listen(net::socket_base::max_listen_connections, ec);
  if (ec)
    throw config_error("metrics.port",
                       "cannot listen on " + where + ": " + ec.message());
  auto bound = acceptor_.local_endpoint(ec);
  if (ec || bound.port() == 0)
    throw config_error("metrics.port", "no listening port on " + where);
  return bound.port();
}

void metrics_exposer::server::start() {
  do_accept();
  // The pending accept keeps run() busy until stop() closes the acceptor.
  thread_ = std::thread([this] {
    for (;;) {
      try {
        ioc_.run();
        return;
      } catch (...) {
        // A throwing handler must not end the listener.
      }
    }
  });
}

void metrics_exposer::server::stop() {
  net::post(ioc_, [this] {
    stopping_ = true;
    beast::error_code ec;
    acceptor_.close(ec);
    accept_retry_.cancel();
    std::vector<std::shared_ptr<session>> all;
    for (auto& w : open_)
      if (auto s = w.lock())
        all.push_back(std::move(s));
    for (auto& s : all)
      s->close();
    open_.clear();
  });
  // Every operation completes with operation_aborted and starts nothing
  // new: run() returns as soon as those handlers have run.
  if (thread_.joinable())
    thread_.join();
}

void metrics_exposer::server::do_accept() {
  acceptor_.async_accept(
    ioc_, [this](beast::error_code ec, tcp::socket socket) {
      on_accept(ec, std::move(socket));
    });
}

void metrics_exposer::server::on_accept(beast::error_code ec,
                                        tcp::socket socket) {
  if (stopping_ || !acceptor_.is_open())
    return;
  if (ec) {
    accept_retry_.expires_after(accept_retry_delay);
    accept_retry_.async_wait([this](beast::error_code e) {
      if (!e && !stopping_)
        do_accept();
    });
    return;
  }
  close_on_exec(socket.native_handle());
  socket.set_option(tcp::no_delay(true), ec);
  // A session that ended without close() (it cannot, but a slot must not
  // leak if it ever does) leaves an expired entry.
  open_.remove_if([](const std::weak_ptr<session>& w) { return w.expired(); });
  if (open_.size() >= max_connections_ && !make_room()) {
    count(close_reason::refused);
    socket.close(ec);
  } else {
    auto s = std::make_shared<session>(*this, std::move(socket));
    open_.push_back(s);
    s->start(std::prev(open_.end()));
  }
  do_accept();
}

bool metrics_exposer::server::make_room() {
  // Every open connection either waits for a request or writes an answer:
  // close the one stuck longest, whichever of the two it is. A writing one
  // only when its answer has not moved for min_write_stall: one that is
  // flowing slowly may have a last write completion older than a waiting
  // one's stamp, and would be cut off mid-answer.
  auto now = std::chrono::steady_clock::now();
  std::shared_ptr<session> stuck;
  for (auto& w : open_) {
    auto s = w.lock();
    if (s && s->evictable(now)
        && (!stuck || s->stuck_since() < stuck->stuck_since()))
      stuck = std::move(s);
  }
  if (!stuck)
    return false;
  count(stuck->waiting() ? close_reason::evicted
                         : close_reason::evicted_unread);
  stuck->close();
  return true;
}

// -- metrics_exposer ----------------------------------------------------------

metrics_exposer::metrics_exposer(std::shared_ptr<metrics_registry> registry,
                                 uint16_t port, std::string address,
                                 metrics_exposer_limits limits)
  : registry_(std::move(registry)), address_(std::move(address)) {
  if (!registry_)
    throw config_error("metrics.registry", "no registry");
  check_seconds(limits.header_timeout, "header_timeout");
  check_seconds(limits.idle_timeout, "idle_timeout");
  check_seconds(limits.write_timeout, "write_timeout");
  check_seconds(limits.min_write_stall, "min_write_stall");
  if (limits.max_connections == 0)
    throw config_error("metrics.max_connections", "must be at least 1");
  server_ = std::make_unique<server>(registry_, limits);
  port_ = server_->listen(address_, port);
  server_->start();
}

metrics_exposer::~metrics_exposer() {
  server_->stop();
}

std::string metrics_exposer::url() const {
  return "http://" + address_ + ":" + std::to_string(port_) + "/metrics";
}

} // namespace metrics
} // namespace outbound
