#pragma once

// Private to protocol/ws_session*.cpp: the client WebSocket session
// template, instantiated once per stream type (plain TCP in
// ws_session_plain.cpp, TLS in ws_session_tls.cpp) so that the two heavy
// Beast instantiations compile on both cores. The stream-independent pieces
// live in ws_session.cpp (ws_wire.hpp).
//
// One session, each step an `on_<step>` handler on the session's strand:
//
//   start ─► resolve ─► connect ─► [tls] ─► upgrade (write, read header)
//                                              │
//     closed ◄── on_read ◄── read ◄── opened ◄─┴─ ws handshake (local replay)
//
// Why the upgrade is done by the session and not by Beast's handshake: Beast
// reads the 101 answer with a parser whose header limit is fixed at 8 KiB,
// while the feed protocol allows a 64 KiB header block. So the
// session sends the upgrade request and reads the answer itself (Beast's HTTP
// parser, header limit `max_handshake_bytes`), checks it (RFC 6455 4.1), and
// then lets Beast's handshake run against `ws_shim` in replay mode: the shim
// swallows Beast's own request and answers it with a canned 101 built from
// Beast's key. Every frame afterwards is Beast's.
//
// The shim also feeds every inbound byte, in order, to a ws_frame_tracker
// (fragments per message, proof of life) and tears the TCP connection down at
// once when Beast asks (`async_teardown`): no waiting for the peer's FIN or
// close_notify from a silent peer.
//
// Exactly one `closed` event, always last: `finish` reports it, closes the
// socket and drops the handler; completions still queued then find
// `finished_` set and return.

#include "protocol/detail/dial.hpp"
#include "protocol/detail/io_runner_impl.hpp"
#include "protocol/detail/tls_context_impl.hpp"
#include "protocol/http_wire.hpp"
#include "protocol/ws_session.hpp"
#include "protocol/ws_wire.hpp"

#include <boost/asio/associator.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/bind_handler.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/role.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/websocket/error.hpp>
#include <boost/beast/websocket/rfc6455.hpp>
#include <boost/beast/websocket/stream.hpp>

#include <openssl/ssl.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <string_view>
#include <utility>

namespace outbound::detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace websocket = boost::beast::websocket;
using boost::system::error_code;
using tcp = asio::ip::tcp;


/// What the frame tracker refused (the read that carried it fails).
enum class ws_violation : uint8_t {
  none,
  /// More than ws_max_fragments data frames in one message.
  fragments,
  /// A 64-bit length with its top bit set (RFC 6455 5.2).
  bad_length,
  /// A message announcing more than max_discard_bytes.
  over_ceiling,
};

/// What the shim tells its session (called on the strand).
class ws_shim_observer {
public:
  /// Inbound bytes that are proof of life (see ws_frame_tracker::result).
  virtual void on_inbound_activity() = 0;
  /// A message exceeded ws_max_fragments frames, a frame announced 2^63
  /// bytes or more, or a message announced more than max_discard_bytes;
  /// the read that carried the offending header fails right after this
  /// call.
  virtual void on_frame_violation(ws_violation v) = 0;
  /// The first frame header of a data message arrived and the message did
  /// not end in the same batch of bytes (the message's ordinal in the
  /// tracker): its completion deadline starts.
  virtual void on_message_began(uint64_t message_index) = 0;

protected:
  ~ws_shim_observer() = default;
};

template <class Next>
class ws_shim;

/// The completion of a read through the shim: inspects the bytes read
/// before Beast sees them. Keeps the associations (executor, allocator,
/// cancellation slot) of Beast's handler (see the associator below).
template <class Next, class Buffers, class Handler>
struct ws_inspect_op {
  ws_shim<Next>* shim;
  Buffers buffers;
  Handler handler;

  void operator()(error_code ec, std::size_t n) {
    if (shim->inspect(buffers, n) && !ec)
      ec = websocket::error::message_too_big;
    std::move(handler)(ec, n);
  }
};

} // namespace outbound::detail

namespace boost::asio {

/// Propagates every association of Beast's handler through the shim's read
/// completion (as Asio does for its own binders).
template <template <typename, typename> class Associator, class Next,
          class Buffers, class Handler, class DefaultCandidate>
struct associator<Associator,
                  outbound::detail::ws_inspect_op<Next, Buffers, Handler>,
                  DefaultCandidate> : Associator<Handler, DefaultCandidate> {
  using op_type = outbound::detail::ws_inspect_op<Next, Buffers, Handler>;

  static typename Associator<Handler, DefaultCandidate>::type
  get(const op_type& h) noexcept {
    return Associator<Handler, DefaultCandidate>::get(h.handler);
  }

  static auto get(const op_type& h, const DefaultCandidate& c) noexcept
    -> decltype(Associator<Handler, DefaultCandidate>::get(h.handler, c)) {
    return Associator<Handler, DefaultCandidate>::get(h.handler, c);
  }
};

} // namespace boost::asio

namespace outbound::detail {

/// Size of the buffer a client frame is masked through (bytes; Beast's
/// default is 4096, its minimum 8).
inline constexpr std::size_t ws_write_buffer_bytes = 512;

/// Beast's next layer: the plain or TLS stream plus the replay of the
/// handshake, the inbound frame tracker and an immediate teardown.
template <class Next>
class ws_shim {
public:
  using next_layer_type = Next;
  using executor_type = typename Next::executor_type;

  template <class... Args>
  explicit ws_shim(Args&&... args) : next_(std::forward<Args>(args)...) {
  }

  executor_type get_executor() noexcept {
    return next_.get_executor();
  }

  Next& next_layer() noexcept {
    return next_;
  }

  const Next& next_layer() const noexcept {
    return next_;
  }

  plain_stream& socket() noexcept {
    if constexpr (std::is_same_v<Next, plain_stream>)
      return next_;
    else
      return next_.next_layer();
  }

  void set_observer(ws_shim_observer* obs) {
    observer_ = obs;
  }

  /// Starts the replay of the handshake: writes are swallowed, reads are
  /// served from `canned` (not inspected), then from `leftover` (the bytes
  /// that followed the real 101 header: frames, inspected).
  void begin_replay(std::string leftover) {
    replay_ = true;
    leftover_ = std::move(leftover);
  }

  /// The canned answer to Beast's request (set by the session's decorator).
  void set_canned(std::string canned) {
    canned_ = std::move(canned);
  }

  /// Writes pass through from now on (reads too, once leftover is served).
  void end_replay() {
    replay_ = false;
  }

  /// True once the tracker refused a header (see violation()).
  bool violated() const {
    return violation_ != ws_violation::none;
  }

  /// What the tracker refused (none if nothing).
  ws_violation violation() const {
    return violation_;
  }

  ws_frame_tracker& tracker() {
    return tracker_;
  }

  /// Closes the TCP socket at once (no FIN wait, no TLS close_notify).
  void shut() {
    error_code ignored;
    socket().shutdown(tcp::socket::shutdown_both, ignored);
    socket().close(ignored);
  }

  template <class ConstBuffers, class Handler>
  void async_write_some(const ConstBuffers& b, Handler&& h) {
    if (replay_) {
      auto n = asio::buffer_size(b);
      asio::post(get_executor(), beast::bind_handler(std::forward<Handler>(h),
                                                     error_code{}, n));
      return;
    }
    next_.async_write_some(b, std::forward<Handler>(h));
  }

  template <class MutableBuffers, class Handler>
  void async_read_some(const MutableBuffers& b, Handler&& h) {
    using op_type = ws_inspect_op<Next, MutableBuffers, std::decay_t<Handler>>;
    if (!canned_.empty()) {
      auto n = asio::buffer_copy(b, asio::buffer(canned_));
      canned_.erase(0, n);
      asio::post(get_executor(), beast::bind_handler(std::forward<Handler>(h),
                                                     error_code{}, n));
      return;
    }
    if (!leftover_.empty()) {
      auto n = asio::buffer_copy(b, asio::buffer(leftover_));
      leftover_.erase(0, n);
      if (leftover_.empty())
        std::string{}.swap(leftover_);
      asio::post(get_executor(),
                 beast::bind_handler(op_type{this, b, std::forward<Handler>(h)},
                                     error_code{}, n));
      return;
    }
    next_.async_read_some(b, op_type{this, b, std::forward<Handler>(h)});
  }

  /// Feeds the first `n` bytes of `b` to the tracker; true if the
  /// connection is to fail (too many fragments, now or before).
  template <class Buffers>
  bool inspect(const Buffers& b, std::size_t n) {
    if (violated())
      return true;
    bool activity = false;
    bool began = false;
    auto end = asio::buffer_sequence_end(b);
    for (auto it = asio::buffer_sequence_begin(b); n > 0 && it != end; ++it) {
      asio::const_buffer cb = *it;
      auto take = std::min(cb.size(), n);
      auto r = tracker_.feed(static_cast<const unsigned char*>(cb.data()),
                             take);
      n -= take;
      activity = activity || r.activity;
      began = began || r.message_began;
      if (r.too_many_fragments || r.bad_length || r.over_ceiling) {
        violation_ = r.bad_length     ? ws_violation::bad_length
                     : r.over_ceiling ? ws_violation::over_ceiling
                                      : ws_violation::fragments;
        break;
      }
    }
    if (violated()) {
      if (observer_)
        observer_->on_frame_violation(violation_);
      return true;
    }
    // Only the message still in progress matters: one that began and
    // already ended in this batch needs no deadline.
    if (began && tracker_.message_open() && observer_)
      observer_->on_message_began(tracker_.message_index());
    if (activity && observer_)
      observer_->on_inbound_activity();
    return false;
  }

private:
  Next next_;
  ws_shim_observer* observer_ = nullptr;
  ws_frame_tracker tracker_;
  std::string canned_;
  std::string leftover_;
  bool replay_ = false;
  ws_violation violation_ = ws_violation::none;
};

/// Beast tears the connection down after a close frame (sent or received)
/// or a failure: the shim closes TCP at once instead of waiting for the
/// peer's FIN (or TLS close_notify), which a silent peer never sends.
template <class Next>
void teardown(beast::role_type, ws_shim<Next>& s, error_code& ec) {
  s.shut();
  ec = {};
}

template <class Next, class Handler>
void async_teardown(beast::role_type, ws_shim<Next>& s, Handler&& h) {
  s.shut();
  asio::post(s.get_executor(),
             beast::bind_handler(std::forward<Handler>(h), error_code{}));
}

// -- the session --------------------------------------------------------------

template <class Stream>
class ws_session_impl final
  : public ws_session,
    public ws_shim_observer,
    public std::enable_shared_from_this<ws_session_impl<Stream>> {
public:
  static constexpr bool is_tls = !std::is_same_v<Stream, plain_stream>;

  ws_session_impl(io_runner& io, uint64_t id, ws_options opts, handler h,
                  std::shared_ptr<tls_context> tls)
    : strand_(asio::make_strand(io.get().ioc)),
      ws_(make_ws(strand_, tls)),
      resolver_(strand_),
      timer_(strand_),
      activity_timer_(strand_),
      discard_timer_(strand_),
      id_(id),
      opts_(std::move(opts)),
      on_event_(std::move(h)),
      tls_(std::move(tls)) {
    ws_.next_layer().set_observer(this);
  }

  /// Begins the session (posted; events follow on the strand).
  void start() {
    asio::post(strand_, [self = this->shared_from_this()] { self->do_start(); });
  }

  void send_text(std::string text) override {
    asio::post(strand_, [self = this->shared_from_this(),
                         text = std::move(text)]() mutable {
      self->enqueue(false, std::move(text));
    });
  }

  void ping() override {
    asio::post(strand_, [self = this->shared_from_this()] {
      self->enqueue(true, {});
    });
  }

  void close() override {
    asio::post(strand_, [self = this->shared_from_this()] {
      self->finish(ws_close_reason::local, "closed by the owner");
    });
  }

  // -- dial hooks (protocol/detail/dial.hpp) ------------------------------

  plain_stream& sock() {
    return shim().socket();
  }

  Stream& dial_stream() {
    return stream();
  }

  bool dial_abandoned() const {
    return finished_;
  }

  void dial_step(detail::dial_step s) {
    phase_ = s == detail::dial_step::resolving    ? phase::resolving
             : s == detail::dial_step::connecting ? phase::connecting
                                                  : phase::tls_handshake;
  }

  void dialled() {
    do_upgrade();
  }

  void dial_failed(transport_error_kind kind, std::string detail) {
    finish(ws_reason_of_dial_failure(kind), std::move(detail));
  }

private:
  using clock = std::chrono::steady_clock;
  using ws_type = websocket::stream<ws_shim<Stream>, false>;

  enum class phase { resolving, connecting, tls_handshake, upgrade_write,
                     upgrade_read, ws_handshake, open };

  static const char* phase_text(phase p) {
    switch (p) {
      case phase::resolving:
        return "resolving the host";
      case phase::connecting:
        return "connecting";
      case phase::tls_handshake:
        return "in the TLS handshake";
      case phase::upgrade_write:
        return "sending the upgrade request";
      case phase::upgrade_read:
        return "reading the upgrade response";
      case phase::ws_handshake:
        return "in the WebSocket handshake";
      default:
        return "open";
    }
  }

  /// One queued write: a text message or a ping.
  struct out_item {
    bool ping = false;
    std::string text;
  };

  static ws_type make_ws(strand_type& strand,
                         const std::shared_ptr<tls_context>& tls) {
    if constexpr (is_tls)
      return ws_type(strand, tls->get().ctx);
    else
      return ws_type(strand);
  }

  ws_shim<Stream>& shim() {
    return ws_.next_layer();
  }

  Stream& stream() {
    return shim().next_layer();
  }

  // -- steps ------------------------------------------------------------------

  void do_start() {
    if (finished_)
      return; // closed before it started
    started_ = clock::now();
    if (opts_.origin.scheme != "http" && opts_.origin.scheme != "https")
      return finish(ws_close_reason::connect,
                    "unsupported scheme '" + opts_.origin.scheme
                      + "' (http or https)");
    key_ = make_ws_key();
    std::string why;
    if (!build_upgrade_request(opts_, key_, wire_, why))
      return finish(ws_close_reason::handshake, why);
    auto timeout = std::chrono::nanoseconds{
      std::max<int64_t>(opts_.handshake_timeout_ns, 0)};
    timer_.expires_at(deadline_after(
      started_, std::chrono::duration_cast<clock::duration>(timeout)));
    timer_.async_wait([self = this->shared_from_this()](const error_code& ec) {
      self->on_timer(ec);
    });
    dial(this->shared_from_this(), resolver_, opts_.origin);
  }

  void on_timer(const error_code& ec) {
    if (ec || finished_ || phase_ == phase::open)
      return;
    finish(ws_close_reason::timeout,
           "handshake timed out after " + millis_text(clock::now() - started_)
             + " while " + phase_text(phase_));
  }

  void do_upgrade() {
    phase_ = phase::upgrade_write;
    asio::async_write(stream(), asio::buffer(wire_),
                      [self = this->shared_from_this()](const error_code& ec,
                                                        std::size_t n) {
                        self->on_upgrade_written(ec, n);
                      });
  }

  void on_upgrade_written(const error_code& ec, std::size_t n) {
    if (finished_)
      return;
    if (ec) {
      if constexpr (is_tls) {
        // TLS 1.3: the server checks the client certificate after the
        // client's handshake finished; a refusal resets the first write.
        if (n == 0)
          return finish(ws_close_reason::tls,
                        "TLS connection refused by the server right after the "
                        "handshake (client certificate rejected?): "
                          + ec.message());
      }
      return finish(ws_close_reason::handshake,
                    "sending the upgrade request failed: " + ec.message());
    }
    std::string{}.swap(wire_);
    phase_ = phase::upgrade_read;
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(std::min<uint64_t>(
      std::max<uint64_t>(opts_.max_handshake_bytes, 1), UINT32_MAX)));
    http::async_read_header(stream(), hbuf_, *parser_,
                            [self = this->shared_from_this()](
                              const error_code& ec, std::size_t) {
                              self->on_upgrade_response(ec);
                            });
  }

  void on_upgrade_response(const error_code& ec) {
    if (finished_)
      return;
    if (ec) {
      bool got_some = parser_->got_some() || hbuf_.size() > 0;
      if constexpr (is_tls) {
        if (!got_some && is_tls_alert(ec))
          return finish(ws_close_reason::tls, describe_tls_error(ec, X509_V_OK));
      }
      return finish(ws_close_reason::handshake,
                    describe_upgrade_error(ec, got_some,
                                           opts_.max_handshake_bytes));
    }
    const auto& res = parser_->get();
    header_list headers;
    for (const auto& field : res)
      headers.emplace_back(std::string{field.name_string()},
                           std::string{field.value()});
    if (auto why = check_upgrade_response(res.version(), res.result_int(),
                                          headers, key_))
      return finish(ws_close_reason::handshake, *why);
    parser_.reset();
    auto leftover = beast::buffers_to_string(hbuf_.data());
    hbuf_.clear();
    hbuf_.shrink_to_fit();
    do_ws_handshake(std::move(leftover));
  }

  void do_ws_handshake(std::string leftover) {
    phase_ = phase::ws_handshake;
    websocket::stream_base::timeout t;
    t.handshake_timeout = std::chrono::duration_cast<websocket::stream_base::duration>(
      std::chrono::nanoseconds{std::max<int64_t>(opts_.handshake_timeout_ns, 1)});
    // The owner pings through ping() and decides a dead peer itself.
    t.idle_timeout = websocket::stream_base::none();
    t.keep_alive_pings = false;
    ws_.set_option(t);
    // No limit in Beast: a message over max_frame_bytes is read in pieces
    // and discarded by on_read (Beast would fail the whole connection),
    // and rbuf_ is capped so that it never holds more than the cap + 1.
    ws_.read_message_max(0);
    cap_ = static_cast<std::size_t>(std::min<uint64_t>(
      std::max<uint64_t>(opts_.max_frame_bytes, 1),
      std::numeric_limits<std::size_t>::max() - 1));
    rbuf_.max_size(cap_ + 1);
    auto ceiling = opts_.max_discard_bytes == 0
                     ? ws_default_max_discard_bytes(opts_.max_frame_bytes)
                     : opts_.max_discard_bytes;
    ceiling_ = std::max<uint64_t>(ceiling, cap_);
    shim().tracker().set_limits(cap_, ceiling_);
    ws_.auto_fragment(false);
    // A client masks every frame it sends through a write buffer Beast
    // allocates at the first write and keeps for the stream's life (4 KiB
    // by default, websocket::stream::write_buffer_bytes). A feed's client
    // frames are small (its hello, acknowledgements), so a smaller buffer
    // saves ~3.5 KiB per connection (bench/feeds phase 1); a larger frame
    // goes out in several writes of it.
    ws_.write_buffer_bytes(ws_write_buffer_bytes);
    auto* s = &shim();
    ws_.set_option(websocket::stream_base::decorator(
      [s](websocket::request_type& req) {
        // Beast's own request is swallowed by the shim; answer its key.
        auto key = std::string{req[http::field::sec_websocket_key]};
        s->set_canned("HTTP/1.1 101 Switching Protocols\r\nUpgrade: "
                      "websocket\r\nConnection: upgrade\r\n"
                      "Sec-WebSocket-Accept: "
                      + ws_accept_for(key) + "\r\n\r\n");
      }));
    shim().begin_replay(std::move(leftover));
    ws_.async_handshake(opts_.origin.authority(),
                        opts_.path.empty() ? std::string{"/"} : opts_.path,
                        [self = this->shared_from_this()](const error_code& ec) {
                          self->on_ws_handshake(ec);
                        });
  }

  void on_ws_handshake(const error_code& ec) {
    shim().end_replay();
    if (finished_)
      return;
    if (ec)
      return finish(ws_close_reason::handshake,
                    "WebSocket handshake failed: " + ec.message());
    phase_ = phase::open;
    timer_.cancel();
    last_report_ = clock::now();
    ws_event ev;
    ev.what = ws_event::kind::opened;
    emit(std::move(ev));
    if (finished_)
      return;
    do_read();
    maybe_write();
  }

  // -- reading ----------------------------------------------------------------

  /// Largest piece one read appends to rbuf_ (a bound on what a single
  /// read may add, whatever a frame header announces).
  static constexpr std::size_t read_piece = 64 * 1024;

  void do_read() {
    // Below the cap, never read past cap + 1 bytes of one message: one
    // byte over is enough to know it is too large. (Over it, rbuf_ is
    // empty: the same bound keeps a read within rbuf_'s max_size.)
    auto room = std::min(read_piece, cap_ + 1 - rbuf_.size());
    ws_.async_read_some(rbuf_, room,
                        [self = this->shared_from_this()](
                          const error_code& ec, std::size_t) {
                          self->on_read(ec);
                        });
  }

  /// Moves what rbuf_ holds of an over-cap message into the prefix (up to
  /// ws_too_large_prefix bytes) and drops the rest.
  void discard_read() {
    over_size_ += rbuf_.size();
    if (over_prefix_.size() < ws_too_large_prefix) {
      auto data = rbuf_.cdata();
      auto take = std::min(ws_too_large_prefix - over_prefix_.size(),
                           data.size());
      over_prefix_.append(static_cast<const char*>(data.data()), take);
    }
    rbuf_.consume(rbuf_.size());
  }

  void on_read(const error_code& ec) {
    if (finished_)
      return;
    if (ec)
      return on_read_error(ec);
    if (!over_ && rbuf_.size() > cap_) {
      // Over the cap: from now on only the prefix is kept (the piecewise
      // read of Beast's websocket::stream::read_some; the session goes on,
      // the owner decides what an over-cap message means).
      over_ = true;
      over_size_ = 0;
      over_prefix_.clear();
      discard_read();
      rbuf_.shrink_to_fit();
    } else if (over_) {
      discard_read();
    }
    if (!ws_.is_message_done())
      return do_read();
    auto fragmented = shim().tracker().pop_fragmented();
    if (over_) {
      over_ = false;
      ws_event ev;
      ev.what = ws_event::kind::too_large;
      ev.payload = std::move(over_prefix_);
      over_prefix_.clear();
      ev.size = over_size_;
      ev.binary = ws_.got_binary();
      ev.fragmented = fragmented;
      activity_pending_ = false;
      last_report_ = clock::now();
      emit(std::move(ev));
      if (!finished_)
        do_read();
      return;
    }
    if (opts_.drop_text && !ws_.got_binary() && drop_message())
      return;
    ws_event ev;
    ev.what = ws_event::kind::message;
    ev.payload = beast::buffers_to_string(rbuf_.data());
    ev.binary = ws_.got_binary();
    ev.fragmented = fragmented;
    rbuf_.consume(rbuf_.size());
    // The message is newer proof of life than any activity still pending.
    activity_pending_ = false;
    // A large message leaves a large buffer behind: give it back, idle
    // sessions are many.
    if (rbuf_.capacity() > 16 * 1024)
      rbuf_.shrink_to_fit();
    last_report_ = clock::now();
    emit(std::move(ev));
    if (!finished_)
      do_read();
  }

  /// Asks the owner's intake filter about the message in rbuf_; a dropped
  /// one is counted, reported as activity, and the next read starts.
  bool drop_message() {
    auto data = rbuf_.cdata();
    std::string_view text{static_cast<const char*>(data.data()), data.size()};
    if (!opts_.drop_text(text))
      return false;
    rbuf_.consume(rbuf_.size());
    ++dropped_;
    auto now = clock::now();
    if (now - last_drop_activity_ >= std::chrono::nanoseconds{
          opts_.drop_activity_interval_ns}) {
      last_drop_activity_ = now;
      on_inbound_activity();
    }
    if (!finished_)
      do_read();
    return true;
  }

  void on_read_error(const error_code& ec) {
    switch (shim().violation()) {
      case ws_violation::bad_length:
        return finish(ws_close_reason::broken,
                      "frame announces 2^63 bytes or more (RFC 6455 5.2)");
      case ws_violation::over_ceiling: {
        auto announced = shim().tracker().message_announced();
        // What the owner may still learn of it (its seq, say) comes first:
        // the session ends, the message is never reported otherwise.
        emit_refused(announced);
        if (finished_)
          return;
        return finish(ws_close_reason::too_large,
                      "message announces "
                        + (announced == UINT64_MAX
                             ? std::string{"2^64 bytes or more"}
                             : std::to_string(announced) + " bytes")
                        + ", over max_discard_bytes ("
                        + std::to_string(ceiling_) + ")",
                      announced);
      }
      case ws_violation::fragments:
        return finish(ws_close_reason::too_large,
                      "message exceeds " + std::to_string(ws_max_fragments)
                        + " fragments");
      case ws_violation::none:
        break;
    }
    if (ec == websocket::error::closed) {
      auto cr = ws_.reason();
      std::string detail = "peer sent close frame "
                           + std::to_string(static_cast<unsigned>(cr.code));
      if (!cr.reason.empty())
        detail += " (" + sanitize(std::string{cr.reason.data(), cr.reason.size()}) + ")";
      return finish(ws_close_reason::peer_closed, detail);
    }
    if (!write_error_.empty())
      return finish(ws_close_reason::broken, write_error_);
    auto reason = classify_ws_read_error(ec);
    finish(reason, describe_ws_read_error(ec));
  }

  /// Printable ASCII only (the peer's close reason goes into a detail).
  static std::string sanitize(std::string s) {
    for (auto& c : s)
      if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7F)
        c = '?';
    return s;
  }

  // -- ws_shim_observer -------------------------------------------------------

  void on_inbound_activity() override {
    if (finished_ || phase_ != phase::open)
      return;
    // At most one report per interval, but never a lost one: activity inside
    // the interval is reported when it ends (a pong right after a message
    // must still reach a pong-timeout check).
    auto now = clock::now();
    auto interval = std::chrono::nanoseconds{ws_activity_interval_ns};
    if (now - last_report_ >= interval)
      return report_activity(now);
    if (activity_pending_)
      return;
    activity_pending_ = true;
    activity_timer_.expires_at(
      last_report_ + std::chrono::duration_cast<clock::duration>(interval));
    activity_timer_.async_wait(
      [self = this->shared_from_this()](const error_code& ec) {
        if (!ec && self->activity_pending_ && !self->finished_)
          self->report_activity(clock::now());
      });
  }

  void report_activity(clock::time_point now) {
    activity_pending_ = false;
    last_report_ = now;
    ws_event ev;
    ev.what = ws_event::kind::activity;
    emit(std::move(ev));
  }

  void on_frame_violation(ws_violation v) override {
    if (finished_ || close_sent_ || phase_ != phase::open)
      return;
    // Fail the connection with 1009 or 1002 (RFC 6455 7.4.1): the close
    // frame goes out with this write (if the socket takes it at once); the
    // read that carried the offending header fails right after, and
    // finish() closes TCP without waiting for the peer's answer.
    switch (v) {
      case ws_violation::bad_length:
        return send_close(
          websocket::close_reason{websocket::close_code::protocol_error});
      case ws_violation::over_ceiling:
        return send_close(websocket::close_reason{
          websocket::close_code::too_big, "message too large"});
      default:
        return send_close(websocket::close_reason{
          websocket::close_code::too_big, "too many fragments"});
    }
  }

  void send_close(const websocket::close_reason& reason) {
    close_sent_ = true;
    ws_.async_close(reason,
                    [self = this->shared_from_this()](const error_code&) {});
  }

  /// A data message began: it has discard_timeout_ns to end when over the
  /// cap, its rate budget (message_budget()) within it; either way a
  /// bounded time (a message trickled a byte at a time below the cap would
  /// otherwise hold the session, each byte proof of life). One timer
  /// serves every message: when it fires it looks at the message in
  /// progress, never at a stale one, and re-arms for a later one. A message
  /// that begins and ends within one read needs no deadline and arms
  /// nothing.
  void on_message_began(uint64_t message_index) override {
    if (finished_)
      return;
    discard_index_ = message_index;
    discard_since_ = clock::now();
    if (!discard_armed_)
      arm_discard(message_index,
                  deadline_after(discard_since_, discard_timeout()));
  }

  /// The completion budget of a message within the cap:
  /// max(discard_timeout, cap_ / min_message_rate) (see
  /// ws_min_message_rate).
  clock::duration message_budget() const {
    auto rate = opts_.min_message_rate > 0 ? opts_.min_message_rate
                                           : ws_min_message_rate;
    auto secs = static_cast<long double>(cap_) / static_cast<long double>(rate);
    // Saturate far below the clock's range (a cap of 2^64 bytes at
    // 1 byte/s would overflow it): past a century is never.
    auto cap_secs = static_cast<long double>(100.0L * 365 * 24 * 3600);
    auto ns = std::chrono::nanoseconds{static_cast<int64_t>(
      std::min(secs, cap_secs) * 1e9L)};
    return std::max(discard_timeout(),
                    std::chrono::duration_cast<clock::duration>(ns));
  }

  clock::duration discard_timeout() const {
    auto ns = opts_.discard_timeout_ns > 0 ? opts_.discard_timeout_ns
                                           : ws_options{}.discard_timeout_ns;
    return std::chrono::duration_cast<clock::duration>(
      std::chrono::nanoseconds{ns});
  }

  // base + d, saturating at time_point::max(): a timeout meant as "never"
  // (INT64_MAX ns) must not overflow into the past and fire at once.
  static clock::time_point deadline_after(clock::time_point base,
                                          clock::duration d) {
    if (d <= clock::duration::zero())
      return base;
    if (base > clock::time_point::max() - d)
      return clock::time_point::max();
    return base + d;
  }

  void arm_discard(uint64_t message_index, clock::time_point at) {
    discard_armed_ = true;
    discard_timer_.expires_at(at);
    discard_timer_.async_wait(
      [self = this->shared_from_this(), message_index](const error_code& ec) {
        if (!ec)
          self->on_discard_timer(message_index);
      });
  }

  void on_discard_timer(uint64_t message_index) {
    discard_armed_ = false;
    if (finished_)
      return;
    auto& t = shim().tracker();
    if (!t.message_open())
      return; // it ended (or is being delivered): nothing to wait for
    if (t.message_index() != message_index) // a later one
      return arm_discard(discard_index_,
                         deadline_after(discard_since_, discard_timeout()));
    bool over = t.message_over_cap();
    auto budget = over ? discard_timeout() : message_budget();
    if (!over) {
      // Within the cap: its budget is longer; look again at the budget's
      // end, or one discard_timeout from now if sooner (it may go over the
      // cap meanwhile, and then it is refused at that look).
      auto now = clock::now();
      auto end = deadline_after(discard_since_, budget);
      if (now < end)
        return arm_discard(message_index,
                           std::min(end, deadline_after(now, discard_timeout())));
    }
    // Every byte since its header -- the pongs to our pings too -- was
    // part of it, and its end is not in sight: fail the connection rather
    // than let one message hold the session forever (close 1009: the
    // message cannot be processed, RFC 6455 7.4.1).
    if (!close_sent_)
      send_close(websocket::close_reason{
        websocket::close_code::too_big,
        over ? "message too large" : "message too slow"});
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(budget)
                .count();
    auto got = over_ ? over_size_ + rbuf_.size() : rbuf_.size();
    auto announced = t.message_announced();
    if (!over)
      return finish(ws_close_reason::timeout,
                    "message of " + std::to_string(announced)
                      + " announced bytes did not end within "
                      + std::to_string(ms) + " ms (" + std::to_string(got)
                      + " bytes of it read)");
    // The prefix held so far comes first, as for the ceiling.
    emit_refused(announced);
    if (finished_)
      return;
    finish(ws_close_reason::too_large,
           "message of " + std::to_string(announced)
             + " announced bytes over max_frame_bytes ("
             + std::to_string(cap_) + ") did not end within "
             + std::to_string(ms) + " ms (" + std::to_string(got)
             + " bytes of it read)",
           std::max<uint64_t>(got, 1));
  }

  /// Reports the message the session is about to refuse (over
  /// max_discard_bytes, or past its deadline over the cap) as a
  /// `too_large` event with `closing` set: the first bytes read of it (at
  /// most ws_too_large_prefix, maybe none), `announced` as its size. The
  /// `closed` event follows at once.
  void emit_refused(uint64_t announced) {
    ws_event ev;
    ev.what = ws_event::kind::too_large;
    ev.closing = true;
    if (shim().tracker().earlier_messages_pending() > 0) {
      // An earlier message ended in the bytes the tracker has seen but
      // not yet handed to Beast (the read the refused header failed held
      // its tail): rbuf_ and the prefix are that message's, never to be
      // blamed on this one. Nothing of the refused one is known.
    } else if (over_) {
      ev.payload = std::move(over_prefix_);
      over_prefix_.clear();
    } else {
      // Below the cap so far: rbuf_ holds what arrived of it.
      auto data = rbuf_.cdata();
      auto take = std::min(ws_too_large_prefix, data.size());
      ev.payload.assign(static_cast<const char*>(data.data()), take);
    }
    ev.size = std::max<uint64_t>(announced, 1);
    // Beast has read a header of it only if some payload came.
    ev.binary = !ev.payload.empty() && ws_.got_binary();
    ev.fragmented = shim().tracker().fragments() > 1;
    activity_pending_ = false;
    last_report_ = clock::now();
    emit(std::move(ev));
  }

  // -- writing ----------------------------------------------------------------

  void enqueue(bool is_ping, std::string text) {
    if (finished_)
      return;
    if (is_ping) {
      // One queued ping is enough (Beast allows one ping operation at a
      // time; two queued pings say nothing more than one).
      for (std::size_t i = writing_ ? 1 : 0; i < outq_.size(); ++i)
        if (outq_[i].ping)
          return;
    }
    outq_.push_back(out_item{is_ping, std::move(text)});
    maybe_write();
  }

  void maybe_write() {
    if (finished_ || phase_ != phase::open || writing_ || outq_.empty())
      return;
    writing_ = true;
    auto& item = outq_.front();
    auto done = [self = this->shared_from_this()](const error_code& ec,
                                                  std::size_t = 0) {
      self->on_write(ec);
    };
    if (item.ping) {
      ws_.async_ping({}, std::move(done));
    } else {
      ws_.text(true);
      ws_.async_write(asio::buffer(item.text), std::move(done));
    }
  }

  void on_write(const error_code& ec) {
    writing_ = false;
    if (finished_)
      return;
    if (ec) {
      // The read that is always pending reports the cause (a close frame,
      // a reset); a write error of its own is kept for it, and the socket
      // closed so that the read completes now.
      if (ec != asio::error::operation_aborted && write_error_.empty()) {
        write_error_ = "write failed: " + ec.message();
        shim().shut();
      }
      return;
    }
    outq_.pop_front();
    maybe_write();
  }

  // -- ending -----------------------------------------------------------------

  void emit(ws_event ev) {
    ev.session_id = id_;
    ev.dropped = std::exchange(dropped_, 0);
    if (on_event_)
      on_event_(std::move(ev));
  }

  /// Reports `closed` exactly once and closes everything (`size`: see
  /// ws_event::size).
  void finish(ws_close_reason reason, std::string detail, uint64_t size = 0) {
    if (finished_)
      return;
    finished_ = true;
    timer_.cancel();
    activity_timer_.cancel();
    discard_timer_.cancel();
    resolver_.cancel();
    shim().shut();
    outq_.clear();
    ws_event ev;
    ev.what = ws_event::kind::closed;
    ev.reason = reason;
    ev.detail = std::move(detail);
    ev.size = size;
    ev.session_id = id_;
    ev.dropped = std::exchange(dropped_, 0);
    auto h = std::move(on_event_);
    on_event_ = nullptr;
    if (h)
      h(std::move(ev));
  }

  strand_type strand_;
  ws_type ws_;
  tcp::resolver resolver_;
  asio::steady_timer timer_;
  asio::steady_timer activity_timer_;
  /// The completion deadline of the data message in progress.
  asio::steady_timer discard_timer_;
  uint64_t id_;
  ws_options opts_;
  handler on_event_;
  std::shared_ptr<tls_context> tls_;

  std::string key_;
  std::string wire_;
  beast::flat_buffer hbuf_;
  std::optional<http::response_parser<http::empty_body>> parser_;
  beast::flat_buffer rbuf_;
  /// max_frame_bytes as a size_t (rbuf_ holds at most cap_ + 1 bytes).
  std::size_t cap_ = 0;
  /// The effective max_discard_bytes (>= cap_).
  uint64_t ceiling_ = 0;
  /// The latest data message begun and still open (tracker ordinal), and
  /// when.
  uint64_t discard_index_ = 0;
  clock::time_point discard_since_;
  bool discard_armed_ = false;
  /// The message being read is over the cap: its first bytes and its size
  /// so far.
  bool over_ = false;
  std::string over_prefix_;
  uint64_t over_size_ = 0;
  std::deque<out_item> outq_;
  std::string write_error_;
  clock::time_point started_;
  clock::time_point last_report_;
  clock::time_point last_drop_activity_;
  phase phase_ = phase::connecting;
  uint64_t dropped_ = 0;
  bool writing_ = false;
  bool activity_pending_ = false;
  bool close_sent_ = false;
  bool finished_ = false;
};

} // namespace outbound::detail
