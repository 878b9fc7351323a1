#include "protocol/ws_session.hpp"

#include "core/request_builder.hpp"
#include "core/rng.hpp"
#include "core/text.hpp"
#include "protocol/detail/io_runner_impl.hpp"
#include "protocol/http_wire.hpp"
#include "protocol/tls_context.hpp"
#include "protocol/ws_wire.hpp"

#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/websocket/error.hpp>

#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <mutex>
#include <string_view>

namespace outbound {
inline namespace protocol {

const char* to_string(ws_close_reason r) {
  switch (r) {
    case ws_close_reason::local:
      return "local";
    case ws_close_reason::peer_closed:
      return "peer_closed";
    case ws_close_reason::connect:
      return "connect";
    case ws_close_reason::local_resource:
      return "local_resource";
    case ws_close_reason::tls:
      return "tls";
    case ws_close_reason::handshake:
      return "handshake";
    case ws_close_reason::too_large:
      return "too_large";
    case ws_close_reason::broken:
      return "broken";
    case ws_close_reason::timeout:
      return "timeout";
  }
  return "unknown";
}

uint64_t ws_default_max_discard_bytes(uint64_t max_frame_bytes) {
  constexpr uint64_t floor = 256ull * 1024 * 1024;
  auto sixteen = max_frame_bytes > UINT64_MAX / 16 ? UINT64_MAX
                                                   : max_frame_bytes * 16;
  return std::max(sixteen, floor);
}

} // namespace protocol

namespace detail {

// Defined in ws_session_plain.cpp / ws_session_tls.cpp (one heavy Beast
// instantiation per translation unit). Both return a started session.
std::shared_ptr<ws_session> make_plain_ws_session(io_runner& io, uint64_t id,
                                                  const ws_options& opts,
                                                  ws_session::handler h);
std::shared_ptr<ws_session>
make_tls_ws_session(io_runner& io, uint64_t id, const ws_options& opts,
                    ws_session::handler h, std::shared_ptr<tls_context> tls);

ws_close_reason ws_reason_of_dial_failure(transport_error_kind kind) {
  switch (kind) {
    case transport_error_kind::tls:
      return ws_close_reason::tls;
    case transport_error_kind::local_resource:
      return ws_close_reason::local_resource;
    default:
      return ws_close_reason::connect;
  }
}

namespace {

std::string base64(const unsigned char* data, std::size_t n) {
  std::string out(4 * ((n + 2) / 3) + 1, '\0');
  auto len = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), data,
                             static_cast<int>(n));
  out.resize(static_cast<std::size_t>(len));
  return out;
}

/// True if the comma-separated `list` contains `token` (case-insensitive).
bool has_token(std::string_view list, std::string_view token) {
  while (!list.empty()) {
    auto comma = list.find(',');
    auto item = core::trim_ows(list.substr(0, comma));
    if (core::iequals(item, token))
      return true;
    if (comma == std::string_view::npos)
      break;
    list.remove_prefix(comma + 1);
  }
  return false;
}

bool is_reset(const error_code& ec) {
  return ec == boost::asio::error::connection_reset
         || ec == boost::asio::error::connection_aborted
         || ec == boost::asio::error::broken_pipe;
}

bool is_eof(const error_code& ec) {
  return ec == boost::beast::http::error::end_of_stream
         || ec == boost::asio::error::eof;
}

} // namespace

std::string make_ws_key() {
  unsigned char raw[16];
  if (RAND_bytes(raw, sizeof(raw)) != 1) {
    // The key only has to be unpredictable enough to defeat caching
    // intermediaries (RFC 6455 10.3); fall back to a seeded PRNG.
    static std::mutex mtx;
    static core::rng rng{core::entropy_seed()};
    std::lock_guard<std::mutex> guard{mtx};
    for (auto& b : raw)
      b = static_cast<unsigned char>(rng());
  }
  return base64(raw, sizeof(raw));
}

std::string ws_accept_for(std::string_view key) {
  static constexpr std::string_view guid = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
  std::string in;
  in.reserve(key.size() + guid.size());
  in.append(key);
  in.append(guid);
  unsigned char digest[SHA_DIGEST_LENGTH];
  SHA1(reinterpret_cast<const unsigned char*>(in.data()), in.size(), digest);
  return base64(digest, sizeof(digest));
}

bool build_upgrade_request(const ws_options& opts, const std::string& key,
                           std::string& out, std::string& why) {
  http_request req;
  if (!outbound::build_upgrade_request(opts.path, key, opts.headers, req, why))
    return false;
  out.clear();
  return serialize_request(req, opts.origin, out, why);
}

std::optional<std::string> check_upgrade_response(unsigned version, int status,
                                                  const header_list& headers,
                                                  const std::string& key) {
  if (status != 101)
    return "upgrade refused: HTTP " + std::to_string(status)
           + " instead of 101 Switching Protocols";
  if (version != 11)
    return std::string{"upgrade response is not HTTP/1.1"};
  auto* upgrade = find_header(headers, "Upgrade");
  if (!upgrade || !has_token(*upgrade, "websocket"))
    return std::string{"upgrade response lacks 'Upgrade: websocket'"};
  auto* connection = find_header(headers, "Connection");
  if (!connection || !has_token(*connection, "upgrade"))
    return std::string{"upgrade response lacks 'Connection: Upgrade'"};
  auto* accept = find_header(headers, "Sec-WebSocket-Accept");
  if (!accept)
    return std::string{"upgrade response lacks Sec-WebSocket-Accept"};
  if (*accept != ws_accept_for(key))
    return std::string{"upgrade response has a wrong Sec-WebSocket-Accept"};
  if (find_header(headers, "Sec-WebSocket-Extensions"))
    return std::string{"upgrade response selects an extension that was not "
                       "offered"};
  if (find_header(headers, "Sec-WebSocket-Protocol"))
    return std::string{"upgrade response selects a subprotocol that was not "
                       "offered"};
  return std::nullopt;
}

std::string describe_upgrade_error(const error_code& ec, bool got_some,
                                   uint64_t cap) {
  namespace e = boost::beast::http;
  if (ec == e::error::header_limit)
    return "upgrade response header block exceeds " + std::to_string(cap)
           + " bytes";
  if (is_eof(ec) || ec == e::error::partial_message
      || ec == boost::asio::ssl::error::stream_truncated)
    return got_some ? "connection closed inside the upgrade response"
                    : "connection closed before the upgrade response";
  if (is_reset(ec))
    return got_some ? "connection reset inside the upgrade response"
                    : "connection reset before the upgrade response";
  return "malformed upgrade response (" + ec.message() + ")";
}

ws_close_reason classify_ws_read_error(const error_code& ec) {
  if (is_eof(ec))
    return ws_close_reason::peer_closed;
  return ws_close_reason::broken;
}

std::string describe_ws_read_error(const error_code& ec) {
  namespace w = boost::beast::websocket;
  if (is_eof(ec))
    return "peer closed TCP without a close frame";
  if (ec == boost::asio::ssl::error::stream_truncated)
    return "TLS stream truncated (no close_notify)";
  if (is_reset(ec))
    return "connection reset by the peer";
  if (ec.category() == w::make_error_code(w::error::closed).category())
    return "WebSocket protocol violation (" + ec.message() + ")";
  return "read failed: " + ec.message();
}

// -- ws_frame_tracker -----------------------------------------------------------

ws_frame_tracker::result ws_frame_tracker::feed(const unsigned char* data,
                                                std::size_t n) {
  result r;
  if (failed_)
    return r;
  while (n > 0) {
    if (remain_ > 0) {
      auto take = remain_ < n ? remain_ : static_cast<uint64_t>(n);
      remain_ -= take;
      data += take;
      n -= static_cast<std::size_t>(take);
      if (remain_ == 0)
        on_frame_end();
      continue;
    }
    hdr_[hdr_len_++] = *data++;
    --n;
    if (hdr_len_ < 2)
      continue;
    std::size_t need = 2;
    auto len7 = hdr_[1] & 0x7F;
    if (len7 == 126)
      need += 2;
    else if (len7 == 127)
      need += 8;
    if (hdr_[1] & 0x80)
      need += 4;
    if (hdr_len_ < need)
      continue;
    on_header(r);
    if (failed_)
      return r;
  }
  // A frame (header or payload) still arriving is proof of life too.
  if (remain_ > 0 || hdr_len_ > 0)
    r.activity = true;
  return r;
}

void ws_frame_tracker::on_header(result& r) {
  auto len7 = static_cast<uint64_t>(hdr_[1] & 0x7F);
  uint64_t len = len7;
  if (len7 == 126) {
    len = (uint64_t{hdr_[2]} << 8) | hdr_[3];
  } else if (len7 == 127) {
    if (hdr_[2] & 0x80) {
      // Never a length to wait for (or discard) byte by byte.
      failed_ = true;
      r.bad_length = true;
      return;
    }
    len = 0;
    for (int i = 0; i < 8; ++i)
      len = (len << 8) | hdr_[2 + i];
  }
  bool fin = (hdr_[0] & 0x80) != 0;
  auto opcode = hdr_[0] & 0x0F;
  hdr_len_ = 0;
  remain_ = len;
  data_fin_ = false;
  if (opcode & 0x8) {
    r.activity = true; // ping, pong, close: never counted as fragments
    return;
  }
  if (opcode != 0 || frames_ == 0) {
    frames_ = 1; // a new message (Beast rejects a stray continuation)
    ++msg_index_;
    msg_total_ = 0;
    msg_over_ = false;
    msg_open_ = true;
    msg_fin_seen_ = false;
    r.message_began = true;
  } else {
    ++frames_;
  }
  if (frames_ > max_fragments_) {
    failed_ = true;
    r.too_many_fragments = true;
    return;
  }
  // The size the message announces so far, this frame's whole payload
  // included: known at the header, long before the bytes (if ever) come.
  msg_total_ = len > UINT64_MAX - msg_total_ ? UINT64_MAX : msg_total_ + len;
  if (msg_total_ > max_discard_bytes_) {
    failed_ = true;
    r.over_ceiling = true;
    return;
  }
  if (msg_total_ > max_message_bytes_ && !msg_over_) {
    msg_over_ = true;
    r.over_cap_began = true;
  }
  if (fin) {
    done_.push_back(frames_ > 1);
    msg_fin_seen_ = true;
    frames_ = 0;
    data_fin_ = true;
    if (remain_ == 0)
      on_frame_end();
  } else {
    r.activity = true;
  }
}

void ws_frame_tracker::on_frame_end() {
  if (!data_fin_)
    return;
  data_fin_ = false;
  msg_over_ = false; // the last byte of the message arrived
  msg_open_ = false;
}

bool ws_frame_tracker::pop_fragmented() {
  if (done_.empty())
    return false;
  bool f = done_.front();
  done_.pop_front();
  return f;
}

namespace {

/// A session that never opened because it could not be set up (no TLS
/// context): reports `closed` once, asynchronously, like a real one.
class failed_ws_session final : public ws_session {
public:
  void send_text(std::string) override {
  }
  void ping() override {
  }
  void close() override {
  }
};

/// What connect() returns: forwards to the session and closes it when the
/// owner lets go (a dropped session never keeps a socket open). Holds the io
/// runner so that it outlives every session it gave out.
class ws_handle final : public ws_session {
public:
  ws_handle(std::shared_ptr<io_runner> io, std::shared_ptr<ws_session> core)
    : io_(std::move(io)), core_(std::move(core)) {
  }

  ~ws_handle() override {
    core_->close();
  }

  void send_text(std::string text) override {
    core_->send_text(std::move(text));
  }

  void ping() override {
    core_->ping();
  }

  void close() override {
    core_->close();
  }

private:
  std::shared_ptr<io_runner> io_;
  std::shared_ptr<ws_session> core_;
};

class beast_ws_connector final : public ws_connector {
public:
  beast_ws_connector(std::shared_ptr<io_runner> io,
                     std::shared_ptr<tls_context> tls)
    : io_(std::move(io)), tls_(std::move(tls)) {
  }

  std::shared_ptr<ws_session> connect(uint64_t session_id,
                                      const ws_options& opts,
                                      ws_session::handler on_event) override {
    std::shared_ptr<ws_session> core;
    if (!opts.origin.tls()) {
      core = make_plain_ws_session(*io_, session_id, opts, std::move(on_event));
    } else {
      std::string why;
      auto tls = tls_for_https(why);
      if (!tls) {
        ws_event ev;
        ev.what = ws_event::kind::closed;
        ev.session_id = session_id;
        ev.reason = ws_close_reason::tls;
        ev.detail = why;
        boost::asio::post(io_->get().ioc,
                          [h = std::move(on_event), ev = std::move(ev)]() mutable {
                            if (h)
                              h(std::move(ev));
                          });
        core = std::make_shared<failed_ws_session>();
      } else {
        core = make_tls_ws_session(*io_, session_id, opts, std::move(on_event),
                                   std::move(tls));
      }
    }
    return std::make_shared<ws_handle>(io_, std::move(core));
  }

private:
  /// The given context, or a default one (system trust store) built once.
  std::shared_ptr<tls_context> tls_for_https(std::string& why) {
    std::lock_guard<std::mutex> guard{mtx_};
    if (tls_)
      return tls_;
    try {
      tls_ = tls_context::make(tls_config{});
    } catch (const std::exception& e) {
      why = std::string{"cannot build the default TLS context: "} + e.what();
    }
    return tls_;
  }

  std::shared_ptr<io_runner> io_;
  std::mutex mtx_;
  std::shared_ptr<tls_context> tls_;
};

} // namespace

} // namespace detail

inline namespace protocol {

ws_session::~ws_session() = default;

ws_connector::~ws_connector() = default;

std::shared_ptr<ws_connector> make_ws_connector(std::shared_ptr<io_runner> io,
                                                std::shared_ptr<tls_context> tls) {
  if (!io)
    io = io_runner::shared();
  return std::make_shared<detail::beast_ws_connector>(std::move(io),
                                                      std::move(tls));
}

} // namespace protocol
} // namespace outbound
