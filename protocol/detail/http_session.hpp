#pragma once

// Private to protocol/http_connection*.cpp: the http_connection session
// template, instantiated once per stream type (plain TCP in
// http_connection_plain.cpp, TLS in http_connection_tls.cpp) so that the two
// heavy instantiations compile on both cores. The stream-independent helpers
// (request serialization, error translation) live in http_connection.cpp.
//
// One exchange, each step an `on_<step>` handler on the strand:
//
//   start ─► resolve ─► connect ─► [handshake] ─► write ─► read_header
//     │ (connected)                                 ▲          │
//     └─────────────────────────────────────────────┘          ▼
//                          finish ◄── on_complete ◄── read_body
//
// A steady_timer armed once at start fires at the absolute deadline: it
// ends the exchange at once (timeout) and closes the socket, so a trickle of
// bytes cannot extend it and no operation that ignores cancellation (a DNS
// lookup) can hold it past the deadline. close() ends it the same way
// ("cancelled"). Handlers of operations still pending then find no exchange
// (`done_` empty) and return. The parser, buffer and request bytes stay alive
// until the next exchange, because a pending operation may still refer to
// them.

#include "protocol/detail/dial.hpp"
#include "protocol/detail/handler_memory.hpp"
#include "protocol/detail/io_runner_impl.hpp"
#include "protocol/detail/tls_context_impl.hpp"
#include "protocol/http_connection.hpp"
#include "protocol/http_wire.hpp"

#include <boost/asio/bind_allocator.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/optional/optional.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <new>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include <sys/socket.h>

#include <cerrno>

namespace outbound::detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using boost::system::error_code;
using tcp = asio::ip::tcp;


// -- the response body -----------------------------------------------------------

/// Most bytes a response may leave buffered while it is parsed: a header of
/// `max_header_bytes` plus one 64 KiB read. Bodies are consumed as they
/// arrive, so only an over-long chunk-size line or chunked trailer reaches
/// it (Beast's parser bounds neither); the read then fails with
/// `buffer_overflow` instead of buffering the peer's flood until the
/// deadline.
constexpr std::size_t max_buffered_bytes = max_header_bytes + 64 * 1024;

/// Largest receive of a response body: the read buffer grows to this much
/// free space for a body that large (within max_buffered_bytes).
constexpr std::size_t body_read_chunk = 64 * 1024;

/// Most bytes reserved up front for a body whose Content-Length is under the
/// cap: a larger length is a claim of the peer, not a reason to allocate.
constexpr std::uint64_t max_body_reserve = 1024 * 1024;

/// Beast's string_body, except that the reader reserves at most
/// `max_body_reserve` bytes for an announced Content-Length (string_body
/// reserves all of it, so a peer announcing 512 GiB under a large cap made
/// the io thread throw std::bad_alloc). The cap itself is the parser's
/// body_limit.
struct response_body {
  using value_type = std::string;

  static std::uint64_t size(const value_type& body) {
    return body.size();
  }

  class reader {
  public:
    template <bool isRequest, class Fields>
    reader(http::header<isRequest, Fields>&, value_type& body) : body_(body) {
    }

    void init(const boost::optional<std::uint64_t>& length, error_code& ec) {
      if (length)
        body_.reserve(static_cast<std::size_t>(
          std::min<std::uint64_t>(*length, max_body_reserve)));
      ec = {};
    }

    template <class ConstBufferSequence>
    std::size_t put(const ConstBufferSequence& buffers, error_code& ec) {
      auto n = asio::buffer_size(buffers);
      if (n > body_.max_size() - body_.size()) {
        ec = http::error::buffer_overflow;
        return 0;
      }
      for (auto it = asio::buffer_sequence_begin(buffers);
           it != asio::buffer_sequence_end(buffers); ++it) {
        asio::const_buffer b = *it;
        body_.append(static_cast<const char*>(b.data()), b.size());
      }
      ec = {};
      return n;
    }

    void finish(error_code& ec) {
      ec = {};
    }

  private:
    value_type& body_;
  };
};

// -- the response header's memory ---------------------------------------------

/// Memory for one response header's fields: Beast's basic_fields allocates
/// each field and the status line's reason separately, three or more heap
/// allocations per response that live only until the next response. The
/// session owns one arena; a new parser starts it empty (`reset`, once the
/// parser before it is gone). A header larger than the arena takes the rest
/// from the heap.
class fields_arena {
public:
  static constexpr std::size_t capacity = 1024;

  void* allocate(std::size_t bytes) {
    auto n = (bytes + alignment - 1) & ~(alignment - 1);
    if (n <= capacity - used_) {
      void* p = buf_ + used_;
      used_ += n;
      return p;
    }
    return ::operator new(bytes);
  }

  void deallocate(void* p, std::size_t) noexcept {
    auto* c = static_cast<unsigned char*>(p);
    if (c >= buf_ && c < buf_ + capacity)
      return; // freed with the arena, at the next reset
    ::operator delete(p);
  }

  /// Only when nothing allocated here is alive any more.
  void reset() noexcept {
    used_ = 0;
  }

private:
  static constexpr std::size_t alignment = alignof(std::max_align_t);
  alignas(std::max_align_t) unsigned char buf_[capacity];
  std::size_t used_ = 0;
};

/// The standard allocator interface over a fields_arena.
template <class T>
using fields_allocator = source_allocator<T, fields_arena>;

// -- the session --------------------------------------------------------------

/// One connection: `Executor` is strand_type or http_io_executor (dial.hpp),
/// `Tls` whether it speaks TLS.
template <class Executor, bool Tls>
class http_session final
  : public http_connection,
    public std::enable_shared_from_this<http_session<Executor, Tls>> {
public:
  static constexpr bool is_tls = Tls;
  using socket_type = http_plain_stream<Executor>;
  using Stream
    = std::conditional_t<Tls, asio::ssl::stream<socket_type>, socket_type>;

  http_session(io_runner& io, const url_parts& origin,
               std::shared_ptr<tls_context> tls)
    : io_(io.get()), strand_(make_executor(io)),
      stream_(make_stream(strand_, tls)), resolver_(strand_), timer_(strand_),
      origin_(origin), tls_(std::move(tls)), buf_(max_buffered_bytes) {
  }

  void async_exchange(http_request req, completion done) override {
    // On the io_loop scheduler's single worker (the connection pool's
    // thread, which also runs every handler of this socket) the exchange
    // starts here: posting it would cost a queued handler and its run
    // through the io_context for every call. start() answers a refusal
    // through `done` at once; the pool's completion is safe to run inside
    // the pool's own handler (actors/pool/connection_pool.cpp, run).
    if (io_.sole_driver_is_this_thread())
      return start(std::move(req), std::move(done));
    asio::post(strand_, [self = this->shared_from_this(), req = std::move(req),
                         done = std::move(done)]() mutable {
      self->start(std::move(req), std::move(done));
    });
  }

  void close() override {
    closed_.store(true);
    asio::post(strand_, [self = this->shared_from_this()] {
      if (self->done_)
        self->fail(transport_error_kind::timeout, "cancelled",
                   self->phase_ >= phase::writing);
      self->shut();
    });
  }

  bool connected() const override {
    return connected_.load() && !closed_.load();
  }

  // -- dial hooks (protocol/detail/dial.hpp) ------------------------------

  socket_type& sock() {
    if constexpr (is_tls)
      return stream_.next_layer();
    else
      return stream_;
  }

  Stream& dial_stream() {
    return stream_;
  }

  bool dial_abandoned() const {
    return ended();
  }

  void dial_step(detail::dial_step s) {
    phase_ = s == detail::dial_step::resolving    ? phase::resolving
             : s == detail::dial_step::connecting ? phase::connecting
                                                  : phase::handshaking;
  }

  void dialled() {
    connected_.store(true);
    do_write();
  }

  void dial_failed(transport_error_kind kind, std::string detail) {
    fail(kind, std::move(detail));
  }

private:
  using clock = std::chrono::steady_clock;

  /// Where an exchange is; decides `request_sent` on a timeout.
  enum class phase { resolving, connecting, handshaking, writing, reading_header,
                     reading_body };

  static const char* phase_text(phase p) {
    switch (p) {
      case phase::resolving:
        return "resolving the host";
      case phase::connecting:
        return "connecting";
      case phase::handshaking:
        return "in the TLS handshake";
      case phase::writing:
        return "writing the request";
      case phase::reading_header:
        return "reading the response header";
      default:
        return "reading the response body";
    }
  }

  static Executor make_executor(io_runner& io) {
    if constexpr (std::is_same_v<Executor, http_io_executor>)
      return io.get().ioc.get_executor();
    else
      return asio::make_strand(io.get().ioc);
  }

  static Stream make_stream(const Executor& strand,
                            const std::shared_ptr<tls_context>& tls) {
    if constexpr (is_tls)
      return Stream(strand, tls->get().ctx);
    else
      return Stream(strand);
  }

  // -- steps ------------------------------------------------------------------

  void start(http_request&& req, completion done) {
    done_ = std::move(done);
    req_ = std::move(req);
    res_ = exchange_result{};
    res_.exchange_id = req_.exchange_id;
    res_.new_connection = !connected_.load();
    phase_ = phase::connecting;
    started_ = clock::now();
    if (closed_.load())
      return fail(transport_error_kind::not_sent, "connection closed");
    // A reused connection is checked here, on its strand, just before the
    // request goes out (not by the pool on a CAF worker).
    if (connected_.load() && idle_socket_unusable())
      return fail(transport_error_kind::not_sent,
                  "pooled connection was closed by the server");
    std::string why;
    wire_.clear();
    if (!serialize_request(req_, origin_, wire_, why))
      return fail(transport_error_kind::config, why);
    auto timeout = std::chrono::nanoseconds{std::max<int64_t>(req_.timeout_ns, 0)};
    arm_deadline(started_
                 + std::chrono::duration_cast<clock::duration>(timeout));
    if (connected_.load())
      return do_write();
    dial(this->shared_from_this(), resolver_, origin_);
  }

  /// Sets the current exchange's deadline. The timer is not re-armed per
  /// exchange (a heap insert and a cancelled handler each time): a wait
  /// already pending that expires no later than `deadline` stays, and when
  /// it fires early it re-arms for what is left, as Netty's
  /// IdleStateHandler reschedules its timeout task
  /// (handler/timeout/IdleStateHandler.java). Only an earlier deadline
  /// replaces the pending wait.
  void arm_deadline(clock::time_point deadline) {
    deadline_ = deadline;
    if (timer_armed_ && armed_at_ <= deadline)
      return;
    timer_.expires_at(deadline); // a later wait pending is cancelled
    armed_at_ = deadline;
    timer_armed_ = true;
    // Weak: an idle connection's pending wait does not keep it alive.
    timer_.async_wait(
      [weak = this->weak_from_this(), at = deadline](const error_code& ec) {
        if (auto self = weak.lock())
          self->on_timer(ec, at);
      });
  }

  void on_timer(const error_code& ec, clock::time_point at) {
    // Cancelled (replaced by an earlier deadline, or shut), or a wait that
    // had already expired when a newer one replaced it.
    if (ec || !timer_armed_ || at != armed_at_)
      return;
    timer_armed_ = false;
    if (!done_)
      return; // idle: the next exchange arms it again
    if (clock::now() < deadline_) {
      arm_deadline(deadline_); // armed for an earlier exchange
      return;
    }
    // A write in progress may have sent bytes: assume it did.
    fail(transport_error_kind::timeout,
         "timed out after " + millis_text(clock::now() - started_) + " while "
           + phase_text(phase_),
         phase_ >= phase::writing);
  }

  /// True if this idle, connected socket must not carry another request:
  /// it reports EOF, an error or ANY unread byte (an idle keep-alive
  /// connection never legitimately has data pending). Non-blocking
  /// (`recv(MSG_PEEK | MSG_DONTWAIT)`); runs on the strand.
  ///
  /// Measured against the alternative of a read (or readiness wait) kept
  /// pending while the connection is idle, which needs no check here:
  /// bench/request_throughput at concurrency 64 spent 2-3 us more CPU per
  /// call with it (a wait's registration costs an epoll_ctl of its own; a
  /// pending read's arming receive finds nothing and costs what the peek
  /// did, because Asio tries a speculative receive unless the last one hit
  /// EOF; and every response then completes through the reactor, where a
  /// saturated client otherwise often finds it buffered already).
  bool idle_socket_unusable() {
    auto fd = sock().native_handle();
    char c;
    for (;;) {
      auto n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n > 0)
        return true; // unread bytes on an idle connection: poisoned
      if (n == 0)
        return true; // FIN
      if (errno == EINTR)
        continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        return true;
      break;
    }
    if constexpr (is_tls)
      return tls_pending(stream_.native_handle()) > 0;
    return false;
  }

  /// `h` allocating its operation from chain_memory_ (the write, header
  /// read and body read of an exchange: one pending at a time).
  template <class Handler>
  auto chained(Handler h) {
    return asio::bind_allocator(handler_allocator<char>{chain_memory_},
                                std::move(h));
  }

  /// Common prologue of every handler: true if the exchange already ended
  /// (deadline, close()) and this completion is to be ignored.
  bool ended() const {
    return !done_;
  }

  void do_write() {
    phase_ = phase::writing;
    asio::async_write(stream_, asio::buffer(wire_),
                      chained([self = this->shared_from_this()](
                                const error_code& ec, std::size_t n) {
                        self->on_write(ec, n);
                      }));
  }

  void on_write(const error_code& ec, std::size_t n) {
    if (ended())
      return;
    res_.request_sent = res_.request_sent || n > 0;
    if (ec) {
      if constexpr (is_tls) {
        // TLS 1.3 finishes the client's handshake before the server checks
        // the client certificate; a refusal then resets the first write.
        if (n == 0 && res_.new_connection)
          return fail(transport_error_kind::tls,
                      "TLS connection refused by the server right after the "
                      "handshake (client certificate rejected?): "
                        + ec.message());
      }
      if (n == 0 && !res_.new_connection)
        return fail(transport_error_kind::not_sent,
                    "pooled connection failed before the request was written: "
                      + ec.message());
      return fail(transport_error_kind::interrupted,
                  "write failed after " + std::to_string(n) + " of "
                    + std::to_string(wire_.size()) + " bytes: " + ec.message());
    }
    do_read_header();
  }

  void do_read_header() {
    phase_ = phase::reading_header;
    read_header();
  }

  void read_header() {
    new_parser();
    parser_->header_limit(max_header_bytes);
    // Beast checks Content-Length against body_limit while parsing the
    // header; the cap is applied after the header instead, so an over-cap
    // non-2xx still yields its status and headers.
    parser_->body_limit(boost::none);
    if (req_.method == "HEAD")
      parser_->skip(true);
    http::async_read_header(
      stream_, buf_, *parser_,
      chained([self = this->shared_from_this()](
                const error_code& ec, std::size_t) { self->on_header(ec); }));
  }

  void on_header(const error_code& ec) {
    if (ended())
      return;
    if (ec) {
      bool got_some = parser_->got_some() || buf_.size() > 0;
      if constexpr (is_tls) {
        // A TLS alert instead of a response: e.g. the server refused our
        // client certificate after a TLS 1.3 handshake.
        if (!got_some && is_tls_alert(ec))
          return fail(transport_error_kind::tls,
                      describe_tls_error(ec, X509_V_OK));
      }
      return fail(transport_error_kind::interrupted,
                  describe_header_error(ec, got_some));
    }
    auto status = parser_->get().result_int();
    if (status < 100)
      // Beast takes any three digits; below 100 is no HTTP status, and a
      // status of 0 would read as "no response" to every caller.
      return fail(transport_error_kind::interrupted,
                  "malformed status line (status code " + std::to_string(status)
                    + ")");
    if (status >= 100 && status < 200) {
      if (status == 101)
        return fail(transport_error_kind::interrupted,
                    "unexpected 101 Switching Protocols");
      return read_header(); // interim response (100 Continue, 103, ...)
    }
    if (parser_->is_done())
      return on_complete();
    expected_.reset();
    if (auto cl = parser_->content_length())
      expected_ = *cl;
    chunked_ = parser_->chunked();
    auto cap = req_.max_body_bytes;
    if (expected_ && *expected_ > cap)
      return over_cap("Content-Length " + std::to_string(*expected_)
                      + " exceeds the cap of " + std::to_string(cap) + " bytes");
    parser_->body_limit(cap);
    phase_ = phase::reading_body;
    // A small response arrives with its header: parse the bytes already
    // buffered here, and read only when more are needed (an asynchronous
    // read that finds the body buffered still completes through a posted
    // handler). Errors are the ones the read would report.
    while (!parser_->is_done() && buf_.size() > 0) {
      error_code pec;
      auto n = parser_->put(buf_.data(), pec);
      buf_.consume(n);
      if (pec == http::error::need_more)
        break;
      if (pec)
        return on_body(pec);
      if (n == 0)
        break;
    }
    if (parser_->is_done())
      return on_complete();
    // Beast reads at most what the buffer's capacity leaves free (at least
    // 512 bytes; beast::read_size), and the body parser empties the buffer
    // after every read, so a buffer grown only to the header's size reads
    // a 100 KiB body in some 200 receives, each its own trip through the
    // reactor. A larger body is read in chunks of up to body_read_chunk.
    // The capacity stays with the connection for its next exchanges.
    auto want = expected_ ? std::min<std::uint64_t>(*expected_, body_read_chunk)
                          : std::uint64_t{body_read_chunk};
    if (want > buf_.capacity() - buf_.size())
      buf_.reserve(std::min(buf_.max_size(),
                            buf_.size() + static_cast<std::size_t>(want)));
    http::async_read(
      stream_, buf_, *parser_,
      chained([self = this->shared_from_this()](
                const error_code& ec, std::size_t) { self->on_body(ec); }));
  }

  void on_body(const error_code& ec) {
    if (ended())
      return;
    if (ec == http::error::body_limit)
      return over_cap("response body exceeds the cap of "
                      + std::to_string(req_.max_body_bytes) + " bytes");
    if (ec)
      return fail(transport_error_kind::interrupted,
                  describe_body_error(ec, chunked_, expected_,
                                      parser_->get().body().size()));
    on_complete();
  }

  /// The body is over the cap: a 2xx is an error, any other status is still
  /// returned (its type decides the call's error), without the body.
  void over_cap(const std::string& why) {
    auto status = parser_->get().result_int();
    if (status >= 200 && status < 300) {
      fail(transport_error_kind::too_large, why, false, status);
      return;
    }
    fill_head();
    res_.response.body_over_cap = true;
    finish(false);
  }

  void fill_head() {
    auto& msg = parser_->get();
    res_.response.status = msg.result_int();
    res_.response.headers.clear();
    res_.response.headers.reserve(
      static_cast<std::size_t>(std::distance(msg.begin(), msg.end())));
    for (const auto& field : msg)
      res_.response.headers.emplace_back(std::string{field.name_string()},
                                         std::string{field.value()});
  }

  void on_complete() {
    fill_head();
    bool reusable = parser_->keep_alive() && !parser_->need_eof()
                    && buf_.size() == 0;
    auto msg = parser_->release();
    res_.response.body = std::move(msg.body());
    if constexpr (is_tls)
      reusable = reusable && tls_pending(stream_.native_handle()) == 0;
    finish(reusable);
  }

  // -- ending an exchange -----------------------------------------------------

  /// Ends the exchange with an error. `status`: the status line already
  /// read, if any (a 2xx over the cap keeps it, so the call's error can
  /// report the status that was seen); headers and body are dropped.
  void fail(transport_error_kind kind, std::string detail,
            bool maybe_sent = false, int status = 0) {
    res_.request_sent = res_.request_sent || maybe_sent;
    res_.error = kind;
    res_.detail = std::move(detail);
    res_.response = http_response{};
    res_.response.status = status;
    finish(false);
  }

  /// Reports the exchange exactly once; closes the connection unless it is
  /// reusable.
  void finish(bool reusable) {
    // The deadline timer stays armed (arm_deadline); it finds no exchange.
    if (!reusable)
      shut();
    if (!done_)
      return;
    auto done = std::move(done_);
    done_ = nullptr;
    done->on_exchange_done(std::move(res_), reusable);
  }

  /// A parser for the next response header, its fields in `arena_`.
  void new_parser() {
    parser_.reset(); // frees everything the arena holds
    arena_.reset();
    parser_.emplace(std::piecewise_construct, std::make_tuple(),
                    std::make_tuple(fields_allocator<char>{arena_}));
  }

  /// Closes the socket (no TLS close_notify: the connection is abandoned).
  void shut() {
    connected_.store(false);
    closed_.store(true);
    error_code ignored;
    timer_armed_ = false;
    timer_.cancel();
    resolver_.cancel();
    sock().shutdown(tcp::socket::shutdown_both, ignored);
    sock().close(ignored);
  }

  /// The runner whose context runs this connection (outlives it: the
  /// pool holds the runner).
  const io_runner::impl& io_;
  /// Its strand, or the io_context's executor when one thread runs it
  /// (io_runner::impl::one_thread): all its handlers run one at a time.
  Executor strand_;
  Stream stream_;
  tcp::resolver resolver_;
  asio::steady_timer timer_;
  url_parts origin_;
  std::shared_ptr<tls_context> tls_;

  beast::flat_buffer buf_;
  /// Declared before the parser, which it outlives.
  fields_arena arena_;
  std::optional<http::response_parser<response_body, fields_allocator<char>>>
    parser_;
  http_request req_;
  std::string wire_;
  completion done_;
  /// The exchange chain's operation memory (chained).
  handler_memory chain_memory_;
  exchange_result res_;
  clock::time_point started_;
  /// The current exchange's deadline; the pending wait's expiry.
  clock::time_point deadline_;
  clock::time_point armed_at_;
  bool timer_armed_ = false;
  phase phase_ = phase::connecting;
  std::optional<std::uint64_t> expected_;
  bool chunked_ = false;
  std::atomic<bool> connected_{false};
  std::atomic<bool> closed_{false};
};

} // namespace outbound::detail
