#include "tests/support/raw_ws.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include <arpa/inet.h>
#include <cerrno>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdexcept>
#include <sys/socket.h>
#include <unistd.h>

namespace outbound::testing {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

namespace {

milliseconds left_until(steady_clock::time_point until) {
  return std::chrono::duration_cast<milliseconds>(until - steady_clock::now());
}

// The frame at the front of `b`: its header, and its size in bytes once
// whole (header only with `header_only`); nullopt while incomplete.
std::optional<std::pair<server_frame, std::size_t>>
frame_at(const std::string& b, bool header_only) {
  if (b.size() < 2)
    return std::nullopt;
  server_frame f;
  auto b0 = static_cast<unsigned char>(b[0]);
  auto b1 = static_cast<unsigned char>(b[1]);
  f.fin = (b0 & 0x80) != 0;
  f.opcode = b0 & 0x0F;
  f.length = b1 & 0x7F;
  std::size_t head = 2;
  if (f.length == 126 || f.length == 127) {
    std::size_t ext = f.length == 126 ? 2 : 8;
    if (b.size() < 2 + ext)
      return std::nullopt;
    f.length = 0;
    for (std::size_t i = 0; i < ext; ++i)
      f.length = (f.length << 8) | static_cast<unsigned char>(b[2 + i]);
    head += ext;
  }
  if (header_only)
    return std::make_pair(std::move(f), head);
  if (b.size() - head < f.length)
    return std::nullopt;
  f.payload = b.substr(head, static_cast<std::size_t>(f.length));
  return std::make_pair(std::move(f),
                        head + static_cast<std::size_t>(f.length));
}

} // namespace

// -- raw_conn -----------------------------------------------------------------

raw_conn::raw_conn(uint16_t port) {
  fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd_ < 0)
    throw std::runtime_error("raw_conn: no socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd_);
    throw std::runtime_error("raw_conn: connect failed");
  }
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

raw_conn::~raw_conn() {
  if (fd_ >= 0)
    ::close(fd_);
}

bool raw_conn::send(const std::string& s, milliseconds timeout) {
  auto until = steady_clock::now() + timeout;
  std::size_t off = 0;
  while (off < s.size()) {
    pollfd p{fd_, POLLOUT, 0};
    auto left = left_until(until);
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0)
      return false;
    auto w = ::send(fd_, s.data() + off, s.size() - off,
                    MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EAGAIN || errno == EINTR)
        continue;
      return false;
    }
    off += static_cast<std::size_t>(w);
  }
  return true;
}

bool raw_conn::read_some(milliseconds timeout) {
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0)
    return true;
  char tmp[65536];
  auto r = ::recv(fd_, tmp, sizeof tmp, 0);
  if (r <= 0) {
    eof_ = true;
    return false;
  }
  buf_.append(tmp, static_cast<std::size_t>(r));
  return true;
}

bool raw_conn::read_to_eof(milliseconds timeout) {
  auto until = steady_clock::now() + timeout;
  while (!eof_ && steady_clock::now() < until)
    read_some(milliseconds{20});
  return eof_;
}

bool raw_conn::read_until(const std::function<bool(const std::string&)>& pred,
                          milliseconds timeout) {
  auto until = steady_clock::now() + timeout;
  while (!pred(buf_) && !eof_ && steady_clock::now() < until)
    read_some(
      std::min(milliseconds{20}, std::max(milliseconds{1}, left_until(until))));
  return pred(buf_);
}

// -- frames -------------------------------------------------------------------

std::string client_frame(uint8_t opcode, const std::string& payload, bool fin) {
  std::string f;
  f += static_cast<char>((fin ? 0x80 : 0x00) | opcode);
  auto n = payload.size();
  if (n < 126) {
    f += static_cast<char>(0x80 | n);
  } else if (n < 65536) {
    f += static_cast<char>(0x80 | 126);
    f += static_cast<char>(n >> 8);
    f += static_cast<char>(n & 0xff);
  } else {
    f += static_cast<char>(0x80 | 127);
    for (int i = 7; i >= 0; --i)
      f += static_cast<char>((static_cast<uint64_t>(n) >> (8 * i)) & 0xff);
  }
  const char mask[4] = {0x11, 0x22, 0x33, 0x44};
  f.append(mask, 4);
  for (std::size_t i = 0; i < n; ++i)
    f += static_cast<char>(payload[i] ^ mask[i % 4]);
  return f;
}

// -- raw_ws -------------------------------------------------------------------

raw_ws::raw_ws(uint16_t port, const std::string& path) : c_(port) {
  if (!c_.send("GET " + path
               + " HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port)
               + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                 "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                 "Sec-WebSocket-Version: 13\r\n\r\n"))
    throw std::runtime_error("raw_ws: could not send the upgrade");
  auto has_head = [](const std::string& b) {
    return b.find("\r\n\r\n") != std::string::npos;
  };
  if (!c_.read_until(has_head, std::chrono::seconds{5}))
    throw std::runtime_error("raw_ws: no upgrade response");
  auto& b = c_.buffer();
  status_line_ = b.substr(0, b.find("\r\n"));
  b.erase(0, b.find("\r\n\r\n") + 4);
}

bool raw_ws::send_frame(int opcode, const std::string& payload, bool fin) {
  return c_.send(client_frame(static_cast<uint8_t>(opcode), payload, fin));
}

bool raw_ws::subscribe() {
  return send_text(R"({"type":"subscribe","prefixes":[],"client_id":null,)"
                   R"("last_seq":null,"cursor":null,"epoch":null})");
}

std::optional<std::string> raw_ws::read_exact(std::size_t n,
                                              milliseconds timeout) {
  if (!c_.read_until([n](const std::string& b) { return b.size() >= n; },
                     timeout))
    return std::nullopt;
  auto out = c_.buffer().substr(0, n);
  c_.buffer().erase(0, n);
  return out;
}

std::optional<server_frame> raw_ws::read_frame(milliseconds timeout,
                                               bool header_only) {
  std::optional<std::pair<server_frame, std::size_t>> got;
  c_.read_until(
    [&](const std::string& b) {
      got = frame_at(b, header_only);
      return got.has_value();
    },
    timeout);
  if (!got)
    return std::nullopt;
  c_.buffer().erase(0, got->second);
  return std::move(got->first);
}

std::optional<std::string> raw_ws::read_message(milliseconds timeout) {
  std::string msg;
  for (;;) {
    auto f = read_frame(timeout);
    if (!f)
      return std::nullopt;
    if (f->opcode >= 0x8)
      continue; // control frames between fragments
    msg += f->payload;
    if (f->fin)
      return msg;
  }
}

std::optional<boost::json::object> raw_ws::next_of_type(const std::string& type,
                                                        milliseconds timeout) {
  auto until = steady_clock::now() + timeout;
  while (steady_clock::now() < until) {
    auto f = next(std::max(milliseconds{1}, left_until(until)));
    if (!f)
      return std::nullopt;
    boost::system::error_code ec;
    auto v = boost::json::parse(f->payload, ec);
    if (!ec && v.is_object() && v.as_object().contains("type")
        && v.as_object().at("type") == type.c_str())
      return v.as_object();
  }
  return std::nullopt;
}

} // namespace outbound::testing
