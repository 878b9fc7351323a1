// The hub's WebSocket sessions on Beast (one of the two heavy TUs;
// hub_http.cpp is the other).
//
// One session:
//
//   upgrade ──► accept ─┬─ plan.accept_then_close ──► close 1001 ──► gone
//                       └─► read loop: subscribe ──► hello (+ catch-up replay)
//                                   │               ├─ plan.go_silent: no more reads or
//                                   │               │   writes, TCP kept open
//                                   │               ├─ plan.oversized: raw frame header,
//                                   │               │   then no more writes (reads go on)
//                                   │               └─ live frames (wakes coalesced)
//                                   └─ {"type":"ping"} ──► {"type":"pong"}
//   shutdown(code) ──► close frame `code` (restart 1012, overflow 1013), or a
//                      hard close (TCP only, no close frame) at hub stop, on
//                      a drop, or when the framing is broken
//
// The fan-out (hub.cpp) pushes under the hub's mutex from any thread; the
// queue has its own small mutex and the writer runs on the session's strand.
// Beast answers WebSocket pings only while a read is pending, so a silent
// session simply never reads again.

#include "hub/hub_ws.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>

#include <algorithm>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

namespace outbound {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;

namespace {

/// Time allowed for the opening and the closing handshake.
constexpr auto ws_handshake_timeout = std::chrono::seconds{5};

/// The frame header announcing `len` payload bytes (binary, FIN, unmasked,
/// minimal length encoding), feeds.md case 21c.
std::string oversized_header(uint64_t len) {
  std::string h;
  h += static_cast<char>(0x82);
  if (len <= 125) {
    h += static_cast<char>(len);
  } else if (len <= 0xFFFF) {
    h += static_cast<char>(126);
    h += static_cast<char>((len >> 8) & 0xFF);
    h += static_cast<char>(len & 0xFF);
  } else {
    h += static_cast<char>(127);
    for (int shift = 56; shift >= 0; shift -= 8)
      h += static_cast<char>((len >> shift) & 0xFF);
  }
  return h;
}

class ws_session : public hub_ws_session,
                   public std::enable_shared_from_this<ws_session> {
public:
  ws_session(hub::impl& h, beast::tcp_stream stream, hub_tier tier)
    : hub_(h), ws_(std::move(stream)), tier_(tier) {
  }

  void run(http::request<http::string_body> req) {
    req_ = std::move(req);
    plan_ = hub_.on_ws_open(shared_from_this());
    websocket::stream_base::timeout opt;
    opt.handshake_timeout = ws_handshake_timeout;
    opt.idle_timeout = websocket::stream_base::none();
    opt.keep_alive_pings = false;
    ws_.set_option(opt);
    ws_.read_message_max(hub_.cfg.ws_read_max);
    ws_.auto_fragment(false);
    ws_.text(true);
    ws_.set_option(
      websocket::stream_base::decorator([](websocket::response_type& res) {
        res.set(http::field::server, "outbound-hub");
      }));
    ws_.async_accept(req_, beast::bind_front_handler(&ws_session::on_accept,
                                                     shared_from_this()));
  }

  // -- pushes (hub mutex held, any thread) ----------------------------------

  void push_hello(const subscribe_outcome& out) override {
    std::lock_guard<std::mutex> lock{qmu_};
    if (out.hello)
      q_.push_back({item_kind::text, make(*out.hello)});
    bool detached = plan_.go_silent || plan_.oversized_frame_bytes > 0;
    if (!detached)
      for (const auto& f : out.replay)
        push_event_locked(f);
    q_.push_back({item_kind::after_hello, nullptr});
    // The hello and its catch-up replay (bounded by the ring) do not count
    // against queue_max: a resuming subscriber with a long backlog is owed
    // that backlog, and only live frames queued behind it may overflow.
    replay_left_ = q_.size();
    schedule_locked();
  }

  void push_event(const std::shared_ptr<const std::string>& frame) override {
    std::lock_guard<std::mutex> lock{qmu_};
    if (dead_ || overflow_)
      return;
    if (q_.size() - replay_left_ >= hub_.cfg.queue_max) {
      overflow_ = true;
      schedule_locked();
      return;
    }
    push_event_locked(frame);
    schedule_locked();
  }

  void push_wake(int64_t cursor) override {
    std::lock_guard<std::mutex> lock{qmu_};
    if (dead_)
      return;
    pending_wake_ = std::max(pending_wake_, cursor);
    schedule_locked();
  }

  void push_wakes(const std::vector<int64_t>& cursors) override {
    std::lock_guard<std::mutex> lock{qmu_};
    if (dead_)
      return;
    for (auto c : cursors)
      q_.push_back({item_kind::text, make(render_wake(c))});
    schedule_locked();
  }

  void shutdown(uint16_t code) override {
    net::post(ws_.get_executor(), [self = shared_from_this(), code] {
      {
        std::lock_guard<std::mutex> lock{self->qmu_};
        self->closing_ = true;
        self->close_code_ = code;
      }
      // A hard close (stop, drop) does not wait for a write in flight: the
      // write fails with the closed socket and its handler finds the session
      // torn down.
      if (code == 0)
        return self->teardown();
      if (!self->writing_)
        self->start_close();
    });
  }

  void go_silent() override {
    net::post(ws_.get_executor(), [self = shared_from_this()] {
      if (self->silent_)
        return;
      ++self->hub_.counters.silenced;
      self->silent_ = true;
      {
        std::lock_guard<std::mutex> lock{self->qmu_};
        self->dead_ = true;
        self->q_.clear();
        self->replay_left_ = 0;
      }
      // Abort the pending read (and write): from now on nothing reads the
      // socket, so nothing answers a ping either. The socket stays open.
      beast::error_code ec;
      beast::get_lowest_layer(self->ws_).socket().cancel(ec);
    });
  }

private:
  enum class item_kind { text, after_hello };

  struct item {
    item_kind kind = item_kind::text;
    std::shared_ptr<const std::string> text;
  };

  static std::shared_ptr<const std::string> make(std::string s) {
    return std::make_shared<const std::string>(std::move(s));
  }

  std::string render_wake(int64_t cursor) const {
    if (plan_.non_json)
      return non_json_wake(cursor);
    auto f = wake_frame(cursor);
    return plan_.pad_to > 0 ? pad_frame(std::move(f), plan_.pad_to) : f;
  }

  void push_event_locked(const std::shared_ptr<const std::string>& frame) {
    ++hub_.counters.events_sent;
    if (plan_.non_json)
      q_.push_back({item_kind::text, make(std::string{non_json_filler})});
    if (plan_.pad_to > 0)
      q_.push_back({item_kind::text, make(pad_frame(*frame, plan_.pad_to))});
    else
      q_.push_back({item_kind::text, frame});
  }

  void schedule_locked() {
    if (scheduled_)
      return;
    scheduled_ = true;
    net::post(ws_.get_executor(),
              beast::bind_front_handler(&ws_session::drain,
                                        shared_from_this()));
  }

  // -- strand -----------------------------------------------------------------

  void on_accept(beast::error_code ec) {
    if (torn_down_)
      return; // dropped or stopped while the handshake completed
    if (ec)
      return teardown();
    accepted_ = true;
    if (plan_.accept_then_close) {
      ++hub_.counters.accept_then_close;
      close_started_ = true;
      ws_.async_close(websocket::close_code::going_away,
                      [self = shared_from_this()](beast::error_code) {
                        self->teardown();
                      });
      return;
    }
    do_read();
  }

  void do_read() {
    ws_.async_read(buffer_, beast::bind_front_handler(&ws_session::on_read,
                                                      shared_from_this()));
  }

  void on_read(beast::error_code ec, std::size_t) {
    if (silent_)
      return; // cancelled by go_silent: keep the socket, read no more
    // A read that completed just before a drop / stop tore the session down
    // must not subscribe it: it would sit in the fan-out, dead.
    if (torn_down_)
      return;
    if (ec)
      return teardown();
    auto text = beast::buffers_to_string(buffer_.data());
    buffer_.consume(buffer_.size());
    if (!subscribed_) {
      if (auto sub = parse_subscribe(text)) {
        subscribed_ = true;
        hub_.on_subscribe(shared_from_this(), tier_, *sub, plan_);
        if (plan_.go_silent) {
          // Stop reading now: Beast's automatic pong needs a pending read.
          ++hub_.counters.silenced;
          silent_ = true;
          return;
        }
        return do_read();
      }
    }
    if (is_json_ping(text)) {
      std::lock_guard<std::mutex> lock{qmu_};
      // Pongs count against queue_max like live events: a client that
      // pings without reading the answers is a slow consumer (1013), not a
      // way to grow the queue without bound.
      if (q_.size() - replay_left_ >= hub_.cfg.queue_max)
        overflow_ = true;
      else
        q_.push_back({item_kind::text, make(pong_frame())});
      schedule_locked();
    }
    do_read();
  }

  void drain() {
    if (writing_)
      return;
    item next;
    {
      std::lock_guard<std::mutex> lock{qmu_};
      if (overflow_ && !closing_) {
        ++hub_.counters.overflow_closes;
        closing_ = true;
        close_code_ = websocket::close_code::try_again_later;
      }
      if (closing_) {
        scheduled_ = false;
        q_.clear();
        replay_left_ = 0;
      } else if (!q_.empty()) {
        next = std::move(q_.front());
        q_.pop_front();
        if (replay_left_ > 0)
          --replay_left_;
      } else if (pending_wake_ > 0 && !dead_) {
        next = {item_kind::text, make(render_wake(pending_wake_))};
        pending_wake_ = 0;
        ++hub_.counters.wakes_sent;
      } else {
        scheduled_ = false;
        return;
      }
    }
    if (closing_)
      return start_close();
    if (next.kind == item_kind::after_hello)
      return after_hello();
    write(std::move(next.text));
  }

  void after_hello() {
    if (plan_.go_silent) {
      std::lock_guard<std::mutex> lock{qmu_};
      dead_ = true;
      q_.clear();
      replay_left_ = 0;
      scheduled_ = false;
      return;
    }
    if (plan_.oversized_frame_bytes > 0) {
      {
        std::lock_guard<std::mutex> lock{qmu_};
        dead_ = true;
        q_.clear();
        replay_left_ = 0;
      }
      ++hub_.counters.oversized_sent;
      current_ = make(oversized_header(plan_.oversized_frame_bytes));
      // Written under the WebSocket layer: the stream's framing is broken
      // from here on, so nothing is written through Beast again. Reads go on
      // until the client gives up. The header (at most 14 bytes) is written
      // synchronously on the socket, inside this strand handler: an
      // asynchronous write on the lowest layer would be pending while the
      // pending read answers a client's ping with a pong through the same
      // stream -- two writes at once on one beast::basic_stream, which Beast
      // forbids (stream_base's pending_guard asserts).
      beast::error_code ec;
      net::write(beast::get_lowest_layer(ws_).socket(),
                 net::buffer(*current_), ec);
      broken_framing_ = true;
      if (ec)
        return teardown();
      return drain();
    }
    drain();
  }

  void write(std::shared_ptr<const std::string> text) {
    writing_ = true;
    current_ = std::move(text);
    ++hub_.counters.frames_sent;
    if (plan_.fragment_bytes > 0) {
      auto size = current_->size();
      chunks_ = std::max<std::size_t>(
        1, (size + plan_.fragment_bytes - 1) / plan_.fragment_bytes);
      frames_ = chunks_ + static_cast<std::size_t>(plan_.empty_continuations);
      frame_index_ = 0;
      return write_fragment();
    }
    ws_.async_write(net::buffer(*current_),
                    beast::bind_front_handler(&ws_session::on_write,
                                              shared_from_this()));
  }

  // Frame i of a fragmented message: chunk 0, then the empty continuations,
  // then chunks 1.. ; FIN on the last frame only.
  void write_fragment() {
    auto i = frame_index_;
    auto empties = static_cast<std::size_t>(plan_.empty_continuations);
    std::size_t chunk;
    bool empty = false;
    if (i == 0) {
      chunk = 0;
    } else if (i <= empties) {
      empty = true;
      chunk = 0;
    } else {
      chunk = i - empties;
    }
    auto off = chunk * plan_.fragment_bytes;
    auto len = empty ? 0
                     : std::min(plan_.fragment_bytes,
                                current_->size() - std::min(off,
                                                            current_->size()));
    bool fin = i + 1 == frames_;
    ws_.async_write_some(fin, net::buffer(current_->data() + off, len),
                         [self = shared_from_this(),
                          fin](beast::error_code ec, std::size_t) {
                           if (ec || fin)
                             return self->on_write(ec, 0);
                           ++self->frame_index_;
                           self->write_fragment();
                         });
  }

  void on_write(beast::error_code ec, std::size_t) {
    writing_ = false;
    if (silent_)
      return;
    if (ec)
      return teardown();
    drain();
  }

  void start_close() {
    if (close_started_)
      return;
    close_started_ = true;
    // A close frame needs a sane stream: after a hub stop, silence, broken
    // framing or before the upgrade completed the socket is simply closed.
    if (close_code_ == 0 || silent_ || broken_framing_ || !accepted_)
      return teardown();
    ws_.async_close(websocket::close_reason{close_code_},
                    [self = shared_from_this()](beast::error_code) {
                      self->teardown();
                    });
  }

  void teardown() {
    if (torn_down_)
      return;
    torn_down_ = true;
    {
      std::lock_guard<std::mutex> lock{qmu_};
      dead_ = true;
      q_.clear();
      replay_left_ = 0;
    }
    hub_.on_ws_close(this);
    beast::error_code ec;
    auto& sock = beast::get_lowest_layer(ws_).socket();
    sock.shutdown(net::ip::tcp::socket::shutdown_both, ec);
    sock.close(ec);
  }

  hub::impl& hub_;
  websocket::stream<beast::tcp_stream> ws_;
  hub_tier tier_;
  http::request<http::string_body> req_;
  connection_plan plan_;
  beast::flat_buffer buffer_;

  // Strand-only state.
  bool accepted_ = false;
  bool subscribed_ = false;
  bool writing_ = false;
  bool silent_ = false;
  bool broken_framing_ = false;
  bool close_started_ = false;
  bool torn_down_ = false;
  std::shared_ptr<const std::string> current_;
  std::size_t chunks_ = 0;
  std::size_t frames_ = 0;
  std::size_t frame_index_ = 0;

  // Shared with the pushes (qmu_).
  std::mutex qmu_;
  std::deque<item> q_;
  /// Items at the front of q_ that belong to the hello and its replay.
  std::size_t replay_left_ = 0;
  int64_t pending_wake_ = 0;
  bool scheduled_ = false;
  bool dead_ = false;
  bool overflow_ = false;
  bool closing_ = false;
  uint16_t close_code_ = 0;
};

} // namespace

void hub_start_ws_session(hub::impl& h, beast::tcp_stream stream,
                          http::request<http::string_body> req,
                          hub_tier tier) {
  auto s = std::make_shared<ws_session>(h, std::move(stream), tier);
  s->run(std::move(req));
}

} // namespace outbound
