// The WebSocket client session (protocol/ws_session*) on real loopback
// sockets: against the hub, and the scripted server for exact frame bytes
// (dead peer, websocket-client #411; message cap, denoland/fastwebsockets
// #140; the 64 KiB upgrade header cap, refusals, TLS). Waits are bounded.

#include "protocol/ws_session.hpp"

#include "hub/hub.hpp"
#include "protocol/io_runner.hpp"
#include "protocol/tls_context.hpp"
#include "protocol/ws_wire.hpp"
#include "tests/support/scripted_server.hpp"
#include "tests/support/test_certs.hpp"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace outbound {
namespace {

using namespace std::chrono_literals;
using testing::scripted_server;
using testing::step;
using testing::ws_frame;
using testing::ws_frame_header;
using testing::ws_text;
using clock_type = std::chrono::steady_clock;
using kind = ws_event::kind;

// -- helpers
// --------------------------------------------------------------------

/// Every event of one session, with its arrival time.
struct event_log {
  struct entry {
    ws_event ev;
    clock_type::time_point at;
  };

  std::mutex mtx;
  std::condition_variable cv;
  std::vector<entry> entries;

  void push(ws_event ev) {
    std::lock_guard<std::mutex> guard{mtx};
    entries.push_back({std::move(ev), clock_type::now()});
    cv.notify_all();
  }

  /// The first event of kind `k`, waiting up to `t`.
  std::optional<entry> wait_for(kind k, std::chrono::milliseconds t) {
    std::unique_lock<std::mutex> guard{mtx};
    std::optional<entry> found;
    cv.wait_for(guard, t, [&] {
      for (auto& e : entries)
        if (e.ev.what == k) {
          found = e;
          return true;
        }
      return false;
    });
    return found;
  }

  /// Waits until `n` events of kind `k` arrived; false on timeout.
  bool wait_count(kind k, std::size_t n, std::chrono::milliseconds t) {
    std::unique_lock<std::mutex> guard{mtx};
    return cv.wait_for(guard, t, [&] { return count_locked(k) >= n; });
  }

  std::size_t count(kind k) {
    std::lock_guard<std::mutex> guard{mtx};
    return count_locked(k);
  }

  std::vector<entry> snapshot() {
    std::lock_guard<std::mutex> guard{mtx};
    return entries;
  }

private:
  std::size_t count_locked(kind k) {
    std::size_t n = 0;
    for (auto& e : entries)
      n += e.ev.what == k ? 1 : 0;
    return n;
  }
};

/// Every event so far, one per line, for failure messages.
std::string describe(event_log& log) {
  std::string out;
  for (auto& e : log.snapshot()) {
    out += "\n  event " + std::to_string(static_cast<int>(e.ev.what));
    if (e.ev.what == kind::message)
      out += " payload=" + e.ev.payload.substr(0, 80);
    if (e.ev.what == kind::closed)
      out += " reason=" + std::to_string(static_cast<int>(e.ev.reason))
             + " detail=" + e.ev.detail;
  }
  return out.empty() ? std::string{" (no events)"} : out;
}

ws_session::handler handler_of(const std::shared_ptr<event_log>& log) {
  return [log](ws_event ev) {
    log->push(std::move(ev));
  };
}

/// Exactly one `closed`, and it is the last event (checked again after a
/// grace period, so that a late event would be seen).
void expect_closed_once_last(event_log& log) {
  std::this_thread::sleep_for(50ms);
  auto all = log.snapshot();
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(log.count(kind::closed), 1u);
  EXPECT_EQ(all.back().ev.what, kind::closed);
}

/// The one `too_large` event of a message the session refused: `closing`
/// set, `announced` as its size, right before the `closed` event.
ws_event expect_refused_before_close(event_log& log, uint64_t announced) {
  auto all = log.snapshot();
  ws_event refused;
  std::size_t n = 0;
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (all[i].ev.what != kind::too_large)
      continue;
    ++n;
    refused = all[i].ev;
    EXPECT_TRUE(refused.closing);
    EXPECT_TRUE(i + 1 < all.size() && all[i + 1].ev.what == kind::closed)
      << describe(log);
  }
  EXPECT_EQ(n, 1u) << describe(log);
  EXPECT_EQ(refused.size, announced);
  return refused;
}

/// A frame as the client sent it (unmasked here).
struct client_frame {
  unsigned opcode = 0;
  bool fin = false;
  bool masked = false;
  std::string payload;
};

/// Parses complete client frames from `bytes` (stops at an incomplete one).
std::vector<client_frame> parse_client_frames(const std::string& bytes) {
  std::vector<client_frame> out;
  std::size_t pos = 0;
  auto at = [&](std::size_t i) {
    return static_cast<unsigned char>(bytes[i]);
  };
  while (pos + 2 <= bytes.size()) {
    client_frame f;
    f.fin = (at(pos) & 0x80) != 0;
    f.opcode = at(pos) & 0x0F;
    f.masked = (at(pos + 1) & 0x80) != 0;
    uint64_t len = at(pos + 1) & 0x7F;
    std::size_t p = pos + 2;
    if (len == 126) {
      if (p + 2 > bytes.size())
        break;
      len = (uint64_t{at(p)} << 8) | at(p + 1);
      p += 2;
    } else if (len == 127) {
      if (p + 8 > bytes.size())
        break;
      len = 0;
      for (int i = 0; i < 8; ++i)
        len = (len << 8) | at(p + i);
      p += 8;
    }
    unsigned char key[4] = {0, 0, 0, 0};
    if (f.masked) {
      if (p + 4 > bytes.size())
        break;
      for (int i = 0; i < 4; ++i)
        key[i] = at(p + i);
      p += 4;
    }
    if (p + len > bytes.size())
      break;
    for (uint64_t i = 0; i < len; ++i)
      f.payload += static_cast<char>(at(p + i) ^ key[i % 4]);
    pos = p + len;
    out.push_back(std::move(f));
  }
  return out;
}

/// The close code of a close frame's payload (0 if none).
unsigned close_code_of(const client_frame& f) {
  if (f.payload.size() < 2)
    return 0;
  return (static_cast<unsigned char>(f.payload[0]) << 8)
         | static_cast<unsigned char>(f.payload[1]);
}

/// Process CPU time (user + system).
std::chrono::microseconds cpu_time() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  auto us = [](const timeval& tv) {
    return int64_t{tv.tv_sec} * 1'000'000 + tv.tv_usec;
  };
  return std::chrono::microseconds{us(ru.ru_utime) + us(ru.ru_stime)};
}

/// A loopback port with nothing listening (bound, then released).
uint16_t closed_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

std::string bytes_of(std::initializer_list<unsigned> bs) {
  std::string out;
  for (auto b : bs)
    out += static_cast<char>(b);
  return out;
}

class ws_session_test : public ::testing::Test {
protected:
  ws_options options(const std::string& base_url,
                     const std::string& path = "/ws/feed") {
    ws_options o;
    o.origin = url_parts::parse(base_url);
    o.path = path;
    o.handshake_timeout_ns = 2'000'000'000;
    return o;
  }

  std::shared_ptr<ws_session> open(const ws_options& o,
                                   const std::shared_ptr<event_log>& log,
                                   uint64_t id = 7) {
    return connector->connect(id, o, handler_of(log));
  }

  std::shared_ptr<io_runner> io = std::make_shared<io_runner>(1);
  std::shared_ptr<ws_connector> connector = make_ws_connector(io);
};

// -- against the reference hub ------------------------------------------------

TEST_F(ws_session_test, OpensSubscribesAndReceivesHelloAndWakesFromTheHub) {
  hub_config cfg;
  cfg.mode = hub_tier::ledger;
  hub h{cfg};
  h.start();
  auto log = std::make_shared<event_log>();
  auto s = open(options(h.base_url()), log, 42);
  auto opened = log->wait_for(kind::opened, 5s);
  ASSERT_TRUE(opened);
  EXPECT_EQ(opened->ev.session_id, 42u);
  s->send_text(R"({"type":"subscribe","prefixes":["orders/"],"client_id":"c1",)"
               R"("last_seq":null,"cursor":0,"epoch":null})");
  ASSERT_TRUE(log->wait_count(kind::message, 1, 5s));
  auto hello = log->wait_for(kind::message, 0ms)->ev;
  EXPECT_NE(hello.payload.find(R"("type":"hello")"), std::string::npos)
    << hello.payload;
  EXPECT_NE(hello.payload.find(R"("mode":"ledger")"), std::string::npos);
  EXPECT_FALSE(hello.fragmented);
  EXPECT_FALSE(hello.binary);
  EXPECT_EQ(hello.session_id, 42u);
  h.publish("orders/1", "created");
  ASSERT_TRUE(log->wait_count(kind::message, 2, 5s));
  std::vector<std::string> messages;
  for (auto& e : log->snapshot())
    if (e.ev.what == kind::message)
      messages.push_back(e.ev.payload);
  EXPECT_EQ(messages.at(1), R"({"type":"wake","cursor":1})");
  s->close();
  auto closed = log->wait_for(kind::closed, 5s);
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->ev.reason, ws_close_reason::local);
  expect_closed_once_last(*log);
}

TEST_F(ws_session_test, FragmentedHubMessageIsReassembledAndFlagged) {
  hub_config cfg;
  cfg.mode = hub_tier::ledger;
  hub h{cfg};
  h.start();
  h.set_faults(R"({"fragment_frames":1,"fragment_bytes":16})");
  auto log = std::make_shared<event_log>();
  auto s = open(options(h.base_url()), log);
  ASSERT_TRUE(log->wait_for(kind::opened, 5s));
  s->send_text(R"({"type":"subscribe","prefixes":[],"client_id":"c2"})");
  ASSERT_TRUE(log->wait_count(kind::message, 1, 5s));
  auto hello = log->wait_for(kind::message, 0ms)->ev;
  EXPECT_TRUE(hello.fragmented);
  EXPECT_GT(hello.payload.size(), 16u);
  EXPECT_EQ(hello.payload.rfind(R"({"type":"hello")", 0), 0u) << hello.payload;
  EXPECT_EQ(hello.payload.back(), '}');
  s->close();
  ASSERT_TRUE(log->wait_for(kind::closed, 5s));
  expect_closed_once_last(*log);
}

TEST_F(ws_session_test, PingToTheHubYieldsActivityFromThePong) {
  hub_config cfg;
  hub h{cfg};
  h.start();
  auto log = std::make_shared<event_log>();
  auto s = open(options(h.base_url()), log);
  ASSERT_TRUE(log->wait_for(kind::opened, 5s));
  // Past the activity rate limit that starts at the open.
  std::this_thread::sleep_for(150ms);
  EXPECT_EQ(log->count(kind::activity), 0u);
  s->ping();
  auto act = log->wait_for(kind::activity, 5s);
  ASSERT_TRUE(act);
  EXPECT_EQ(log->count(kind::message), 0u);
  s->close();
  ASSERT_TRUE(log->wait_for(kind::closed, 5s));
  expect_closed_once_last(*log);
}

TEST_F(ws_session_test,
       OversizedFrameFromTheHubEndsTheSessionAtTheDiscardDeadline) {
  // The hub announces 8 MiB + 1 (over the 8 MiB cap, under the ceiling)
  // and never completes it: every later byte -- the pong to our ping too --
  // is payload of that frame. Before, that was proof of life forever; now
  // the message has discard_timeout_ns to end, then close 1009.
  hub_config cfg;
  hub h{cfg};
  h.start();
  h.set_faults(R"({"oversized_frame":1})"); // announces 8 MiB + 1
  auto log = std::make_shared<event_log>();
  auto o = options(h.base_url());
  o.discard_timeout_ns = 300'000'000;
  auto s = open(o, log);
  ASSERT_TRUE(log->wait_for(kind::opened, 5s));
  auto asked = clock_type::now();
  s->send_text(R"({"type":"subscribe","prefixes":[]})");
  ASSERT_TRUE(log->wait_for(kind::message, 5s)) << describe(*log); // hello
  s->ping();
  auto closed = log->wait_for(kind::closed, 5s);
  ASSERT_TRUE(closed) << describe(*log);
  EXPECT_EQ(closed->ev.reason, ws_close_reason::too_large) << closed->ev.detail;
  EXPECT_NE(closed->ev.detail.find("did not end within 300 ms"),
            std::string::npos)
    << closed->ev.detail;
  EXPECT_GT(closed->ev.size, 0u);
  EXPECT_GE(closed->at - asked, 300ms);
  EXPECT_LT(closed->at - asked,
            300ms + std::chrono::milliseconds{testing::load_slack_ms});
  // What arrived of it is reported first (the owner may find its seq).
  expect_refused_before_close(*log, 8u * 1024u * 1024u + 1u);
  expect_closed_once_last(*log);
}

// -- the upgrade
// -----------------------------------------------------------------

TEST_F(ws_session_test, UpgradeRequestCarriesHostPathAndExtraHeaders) {
  scripted_server srv{{{step::read_request(), step::ws_accept(),
                        step::send(ws_text("hi")), step::hold()}}};
  auto log = std::make_shared<event_log>();
  auto o = options(srv.base_url(), "/ws/feed?x=1");
  o.headers = {{"Authorization", "Bearer secret"}, {"Upgrade", "bogus"}};
  auto s = open(o, log);
  ASSERT_TRUE(log->wait_for(kind::opened, 5s));
  ASSERT_TRUE(log->wait_for(kind::message, 5s));
  auto reqs = srv.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].method, "GET");
  EXPECT_EQ(reqs[0].target, "/ws/feed?x=1");
  auto header = [&](const std::string& name) {
    auto* v = find_header(reqs[0].headers, name);
    return v ? *v : std::string{"<absent>"};
  };
  EXPECT_EQ(header("Host"), "127.0.0.1:" + std::to_string(srv.port()));
  EXPECT_EQ(header("Upgrade"), "websocket");
  EXPECT_EQ(header("Connection"), "Upgrade");
  EXPECT_EQ(header("Sec-WebSocket-Version"), "13");
  EXPECT_EQ(header("Sec-WebSocket-Key").size(), 24u);
  EXPECT_EQ(header("Authorization"), "Bearer secret");
  std::size_t upgrades = 0;
  for (auto& [n, v] : reqs[0].headers)
    upgrades += ::strcasecmp(n.c_str(), "Upgrade") == 0 ? 1 : 0;
  EXPECT_EQ(upgrades, 1u);
  s->close();
  ASSERT_TRUE(log->wait_for(kind::closed, 5s));
}

TEST_F(ws_session_test, FramesInTheSamePacketAsThe101AreDelivered) {
  scripted_server srv{
    {{step::read_request(),
      step::ws_accept("", ws_text("one") + ws_text("two")), step::hold()}}};
  auto log = std::make_shared<event_log>();
  auto s = open(options(srv.base_url()), log);
  ASSERT_TRUE(log->wait_count(kind::message, 2, 5s));
  std::vector<std::string> got;
  for (auto& e : log->snapshot())
    if (e.ev.what == kind::message)
      got.push_back(e.ev.payload);
  EXPECT_EQ(got, (std::vector<std::string>{"one", "two"}));
  s->close();
  ASSERT_TRUE(log->wait_for(kind::closed, 5s));
  expect_closed_once_last(*log);
}

TEST_F(ws_session_test, DropTextFilterDropsMatchingMessagesAndCountsThem) {
  scripted_server srv{
    {{step::read_request(),
      step::ws_accept("", ws_text("keep1") + ws_text("drop") + ws_text("drop")
                            + ws_text("keep2")),
      step::hold()}}};
  auto log = std::make_shared<event_log>();
  auto o = options(srv.base_url());
  std::atomic<int> asked{0};
  o.drop_text = [&asked](std::string_view text) {
    ++asked;
    return text == "drop";
  };
  auto s = open(o, log);
  ASSERT_TRUE(log->wait_count(kind::message, 2, 5s)) << describe(*log);
  std::vector<std::string> got;
  uint64_t dropped = 0;
  for (auto& e : log->snapshot()) {
    dropped += e.ev.dropped;
    if (e.ev.what == kind::message)
      got.push_back(e.ev.payload);
  }
  // Order is kept; the two dropped ones ride on the next event's count.
  EXPECT_EQ(got, (std::vector<std::string>{"keep1", "keep2"}));
  EXPECT_EQ(dropped, 2u);
  EXPECT_EQ(asked.load(), 4);
  s->close();
  ASSERT_TRUE(log->wait_for(kind::closed, 5s));
  expect_closed_once_last(*log);
}

TEST_F(ws_session_test, UpgradeHeaderBlockOf20KiBIsAccepted) {
  // Beast's own handshake would refuse anything over 8 KiB.
  std::string pad;
  for (int i = 0; i < 20; ++i)
    pad
      += "X-Pad-" + std::to_string(i) + ": " + std::string(1000, 'a') + "\r\n";
  scripted_server srv{{{step::read_request(), step::ws_accept(pad),
                        step::send(ws_text("ok")), step::hold()}}};
  auto log = std::make_shared<event_log>();
  auto s = open(options(srv.base_url()), log);
  ASSERT_TRUE(log->wait_for(kind::opened, 5s));
  auto m = log->wait_for(kind::message, 5s);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->ev.payload, "ok");
  s->close();
  ASSERT_TRUE(log->wait_for(kind::closed, 5s));
}

TEST_F(ws_session_test, UpgradeHeaderBlockOver64KiBIsAHandshakeFailure) {
  std::string pad;
  for (int i = 0; i < 70; ++i)
    pad
      += "X-Pad-" + std::to_string(i) + ": " + std::string(1000, 'a') + "\r\n";
  scripted_server srv{
    {{step::read_request(), step::ws_accept(pad), step::hold()}}};
  auto log = std::make_shared<event_log>();
  auto s = open(options(srv.base_url()), log);
  auto closed = log->wait_for(kind::closed, 5s);
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->ev.reason, ws_close_reason::handshake);
  EXPECT_EQ(closed->ev.detail,
            "upgrade response header block exceeds 65536 bytes");
  EXPECT_EQ(log->count(kind::opened), 0u);
  expect_closed_once_last(*log);
}

TEST_F(ws_session_test, Non101AnswerIsAHandshakeFailureWithTheStatus) {
  scripted_server srv{{{step::read_request(),
                        step::send(scripted_server::json_response(
                          403, R"({"error":"forbidden"})")),
                        step::hold()}}};
  auto log = std::make_shared<event_log>();
  auto s = open(options(srv.base_url()), log);
  auto closed = log->wait_for(kind::closed, 5s);
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->ev.reason, ws_close_reason::handshake);
  EXPECT_NE(closed->ev.detail.find("403"), std::string::npos)
    << closed->ev.detail;
  expect_closed_once_last(*log);
}

TEST_F(ws_session_test, WrongAcceptValueIsAHandshakeFailure) {
  scripted_server srv{
    {{step::read_request(),
      step::send("HTTP/1.1 101 Switching Protocols\r\n"
                 "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                 "Sec-WebSocket-Accept: "
                 "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n"),
      step::hold()}}};
  auto log = std::make_shared<event_log>();
  auto s = open(options(srv.base_url()), log);
  auto closed = log->wait_for(kind::closed, 5s);
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->ev.reason, ws_close_reason::handshake);
  EXPECT_EQ(closed->ev.detail,
            "upgrade response has a wrong Sec-WebSocket-Accept");
  expect_closed_once_last(*log);
}

TEST_F(ws_session_test, ConnectionClosedBeforeTheAnswerIsAHandshakeFailure) {
  scripted_server srv{{{step::read_request(), step::close()}}};
  auto log = std::make_shared<event_log>();
  auto s = open(options(srv.base_url()), log);
  auto closed = log->wait_for(kind::closed, 5s);
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->ev.reason, ws_close_reason::handshake);
  EXPECT_EQ(closed->ev.detail, "connection closed before the upgrade response");
}

TEST_F(ws_session_test, RefusedConnectIsAConnectFailure) {
  auto log = std::make_shared<event_log>();
  auto s
    = open(options("http://127.0.0.1:" + std::to_string(closed_port())), log);
  auto closed = log->wait_for(kind::closed, 5s);
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->ev.reason, ws_close_reason::connect);
  EXPECT_EQ(log->count(kind::opened), 0u);
  expect_closed_once_last(*log);
}

// One dial routine (protocol/detail/dial.hpp) classifies failures for both
// sessions; the WebSocket names them with its close reasons.
TEST(WsDial, DialFailuresMapToCloseReasonsAsTheHttpTransportClassifiesThem) {
  EXPECT_EQ(detail::ws_reason_of_dial_failure(transport_error_kind::connect),
            ws_close_reason::connect);
  EXPECT_EQ(
    detail::ws_reason_of_dial_failure(transport_error_kind::local_resource),
    ws_close_reason::local_resource);
  EXPECT_EQ(detail::ws_reason_of_dial_failure(transport_error_kind::tls),
            ws_close_reason::tls);
  EXPECT_EQ(std::string{to_string(ws_close_reason::local_resource)},
            "local_resource");
}

// "localhost" comes from /etc/hosts: no DNS traffic leaves the machine.
TEST_F(ws_session_test, HostNameIsResolvedAndSentAsHost) {
  scripted_server srv{{{step::read_request(), step::ws_accept(),
                        step::send(ws_text("named")), step::hold()}}};
  auto log = std::make_shared<event_log>();
  // "localhost" may resolve to ::1 first (nothing listens there: refused,
  // the next address is tried) — bound generously, and say what happened.
  auto o = options("http://localhost:" + std::to_string(srv.port()));
  o.handshake_timeout_ns = 10'000'000'000;
  auto s = open(o, log);
  auto m = log->wait_for(kind::message, 12s);
  ASSERT_TRUE(m) << describe(*log);
  EXPECT_EQ(m->ev.payload, "named");
  // requests() returns a copy: keep it alive while `host` points into it
  // (CI's ASan run caught the dangling pointer into a temporary).
  auto requests = srv.requests();
  ASSERT_FALSE(requests.empty());
  auto* host = find_header(requests.at(0).headers, "Host");
  ASSERT_NE(host, nullptr);
  EXPECT_EQ(*host, "localhost:" + std::to_string(srv.port()));
  s->close();
  ASSERT_TRUE(log->wait_for(kind::closed, 5s)) << describe(*log);
}

TEST_F(ws_session_test, SilentUpgradeIsATimeoutAtTheHandshakeBound) {
  scripted_server srv{{{step::read_request(), step::hold()}}};
  auto log = std::make_shared<event_log>();
  auto o = options(srv.base_url());
  o.handshake_timeout_ns = 200'000'000;
  auto start = clock_type::now();
  auto s = open(o, log);
  auto closed = log->wait_for(kind::closed, 5s);
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->ev.reason, ws_close_reason::timeout);
  EXPECT_NE(closed->ev.detail.find("reading the upgrade response"),
            std::string::npos)
    << closed->ev.detail;
  auto took = closed->at - start;
  EXPECT_GE(took, 190ms);
  // The scripted peer would hold the connection for 10 s.
  EXPECT_LT(took, 200ms + std::chrono::milliseconds{testing::load_slack_ms});
  EXPECT_TRUE(srv.wait_for_peer_close(0, 1s));
  expect_closed_once_last(*log);
}

// -- open sessions
// ----------------------------------------------------------------

// feeds.md case 19: the owner's close() tears a silent peer down at once.
TEST_F(ws_session_test, CloseTearsDownASilentPeerAtOnce) {
  scripted_server srv{{{step::read_request(), step::ws_accept(),
                        step::send(ws_text("last words")), step::hold()}}};
  auto log = std::make_shared<event_log>();
  auto s = open(options(srv.base_url()), log);
  ASSERT_TRUE(log->wait_for(kind::message, 5s));
  s->ping(); // never answered
  std::this_thread::sleep_for(50ms);
  auto asked = clock_type::now();
  s->close();
  // "At once": not after waiting for the silent peer's close frame, which
  // never comes (the peer holds until the server stops). The bounds carry
  // the slack of a loaded machine under ASan.
  const std::chrono::milliseconds slack{testing::load_slack_ms};
  auto closed = log->wait_for(kind::closed, 5s);
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->ev.reason, ws_close_reason::local);
  EXPECT_LT(closed->at - asked, slack);
  EXPECT_TRUE(srv.wait_for_peer_close(0, slack));
  EXPECT_LT(clock_type::now() - asked, 2 * slack);
  expect_closed_once_last(*log);
}

TEST_F(ws_session_test, DroppingTheSessionClosesIt) {
  scripted_server srv{
    {{step::read_request(), step::ws_accept(), step::hold()}}};
  auto log = std::make_shared<event_log>();
  auto s = open(options(srv.base_url()), log);
  ASSERT_TRUE(log->wait_for(kind::opened, 5s));
  s.reset();
  auto closed = log->wait_for(kind::closed, 5s);
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->ev.reason, ws_close_reason::local);
  EXPECT_TRUE(srv.wait_for_peer_close(0, 500ms));
}

TEST_F(ws_session_test, CloseDuringTheUpgradeIsLocalAndFinal) {
  scripted_server srv{{{step::read_request(), step::hold()}}};
  auto log = std::make_shared<event_log>();
  auto s = open(options(srv.base_url()), log);
  ASSERT_TRUE(srv.wait_for_requests(1, 2s));
  s->close();
  s->close(); // idempotent
  auto closed = log->wait_for(kind::closed, 5s);
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->ev.reason, ws_close_reason::local);
  EXPECT_EQ(log->count(kind::opened), 0u);
  s->send_text("late"); // ignored
  s->ping();
  EXPECT_TRUE(srv.wait_for_peer_close(0, 500ms));
  expect_closed_once_last(*log);
}

TEST_F(ws_session_test, RunnerGoingAwayWithLiveSessionsIsSafe) {
  scripted_server srv{{{step::read_request(), step::ws_accept(), step::hold()},
                       {step::read_request(), step::hold()}}};
  auto log1 = std::make_shared<event_log>();
  auto log2 = std::make_shared<event_log>();
  auto s1 = open(options(srv.base_url()), log1, 1);
  ASSERT_TRUE(log1->wait_for(kind::opened, 2s));
  auto s2 = open(options(srv.base_url()), log2, 2);
  ASSERT_TRUE(srv.wait_for_requests(2, 2s));
  s1->send_text("x");
  // The owner lets go of everything at once: handles, connector, runner.
  s1.reset();
  s2.reset();
  connector.reset();
  io.reset();
  // Whatever ran before the runner stopped, no event follows a closed one.
  for (auto* log : {log1.get(), log2.get()}) {
    EXPECT_LE(log->count(kind::closed), 1u);
    auto all = log->snapshot();
    for (std::size_t i = 0; i + 1 < all.size(); ++i)
      EXPECT_NE(all[i].ev.what, kind::closed);
  }
  EXPECT_TRUE(srv.wait_for_peer_close(0, 1s));
  EXPECT_TRUE(srv.wait_for_peer_close(1, 1s));
}

TEST_F(ws_session_test, PeerCloseFrameIsPeerClosedWithItsCode) {
  scripted_server srv{
    {{step::read_request(), step::ws_accept(),
      step::send(ws_frame(0x88, bytes_of({0x03, 0xE9}) + "bye")),
      step::read_bytes(8), step::hold()}}};
  auto log = std::make_shared<event_log>();
  auto s = open(options(srv.base_url()), log);
  auto closed = log->wait_for(kind::closed, 5s);
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->ev.reason, ws_close_reason::peer_closed);
  EXPECT_EQ(closed->ev.detail, "peer sent close frame 1001 (bye)");
  // Beast echoed the close (masked, code 1001) before tearing down.
  ASSERT_TRUE(srv.wait_for_finished(0, 1s));
  auto frames = parse_client_frames(srv.requests().at(0).body);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].opcode, 8u);
  EXPECT_TRUE(frames[0].masked);
  EXPECT_EQ(close_code_of(frames[0]), 1001u);
  expect_closed_once_last(*log);
}

TEST_F(ws_session_test, PeerClosingTcpIsPeerClosed) {
  scripted_server srv{{{step::read_request(), step::ws_accept(),
                        step::send(ws_text("x")), step::close()}}};
  auto log = std::make_shared<event_log>();
  auto s = open(options(srv.base_url()), log);
  auto closed = log->wait_for(kind::closed, 5s);
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->ev.reason, ws_close_reason::peer_closed);
  EXPECT_EQ(log->count(kind::message), 1u);
  expect_closed_once_last(*log);
}

TEST_F(ws_session_test, BinaryAndFragmentedMessagesAreFlagged) {
  std::string frames = ws_frame(0x82, "bin") + ws_frame(0x01, "par")
                       + ws_frame(0x89, "") // a ping between the fragments
                       + ws_frame(0x00, "t-") + ws_frame(0x80, "end");
  scripted_server srv{
    {{step::read_request(), step::ws_accept(), step::send(frames),
      step::read_bytes(6), step::hold()}}};
  auto log = std::make_shared<event_log>();
  auto s = open(options(srv.base_url()), log);
  ASSERT_TRUE(log->wait_count(kind::message, 2, 5s));
  std::vector<ws_event> msgs;
  for (auto& e : log->snapshot())
    if (e.ev.what == kind::message)
      msgs.push_back(e.ev);
  EXPECT_EQ(msgs[0].payload, "bin");
  EXPECT_TRUE(msgs[0].binary);
  EXPECT_FALSE(msgs[0].fragmented);
  EXPECT_EQ(msgs[1].payload, "part-end");
  EXPECT_FALSE(msgs[1].binary);
  EXPECT_TRUE(msgs[1].fragmented);
  // Beast answered the ping with a masked pong.
  ASSERT_TRUE(srv.wait_for_requests(1, 5s));
  for (int i = 0; i < 500 && srv.requests().at(0).body.size() < 6; ++i)
    std::this_thread::sleep_for(10ms);
  auto sent = parse_client_frames(srv.requests().at(0).body);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].opcode, 0xAu);
  s->close();
  ASSERT_TRUE(log->wait_for(kind::closed, 5s));
  expect_closed_once_last(*log);
}

TEST_F(ws_session_test, SendsAreSerialisedInOrderAsSingleMaskedFrames) {
  constexpr int n = 200;
  std::string big(10'000, 'b'); // one frame, not auto-fragmented
  // Each "m-NNN" frame: 2 header + 4 mask + 5 payload bytes.
  std::size_t expected = n * 11 + (4 + 4 + big.size());
  scripted_server srv{{{step::read_request(), step::ws_accept(),
                        step::read_bytes(expected), step::hold()}}};
  auto log = std::make_shared<event_log>();
  auto s = open(options(srv.base_url()), log);
  for (int i = 0; i < n; ++i) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "m-%03d", i);
    s->send_text(buf);
    if (i == n / 2)
      s->send_text(big);
  }
  ASSERT_TRUE(log->wait_for(kind::opened, 5s));
  for (int i = 0; i < 500 && srv.requests().empty(); ++i)
    std::this_thread::sleep_for(10ms);
  for (int i = 0; i < 500 && srv.requests().at(0).body.size() < expected; ++i)
    std::this_thread::sleep_for(10ms);
  auto frames = parse_client_frames(srv.requests().at(0).body);
  ASSERT_EQ(frames.size(), static_cast<std::size_t>(n + 1));
  std::size_t k = 0;
  for (int i = 0; i < n; ++i) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "m-%03d", i);
    EXPECT_EQ(frames[k].payload, buf);
    EXPECT_EQ(frames[k].opcode, 1u);
    EXPECT_TRUE(frames[k].fin);
    EXPECT_TRUE(frames[k].masked);
    ++k;
    if (i == n / 2) {
      EXPECT_EQ(frames[k].payload, big);
      EXPECT_TRUE(frames[k].fin);
      ++k;
    }
  }
  s->close();
  ASSERT_TRUE(log->wait_for(kind::closed, 5s));
}

TEST_F(ws_session_test, PongFromThePeerIsActivity) {
  scripted_server srv{
    {{step::read_request(), step::ws_accept(),
      step::read_bytes(6), // the client's ping
      step::sleep(150ms), step::send(ws_frame(0x8A, "")), step::hold()}}};
  auto log = std::make_shared<event_log>();
  auto s = open(options(srv.base_url()), log);
  ASSERT_TRUE(log->wait_for(kind::opened, 5s));
  s->ping();
  auto act = log->wait_for(kind::activity, 5s);
  ASSERT_TRUE(act);
  auto sent = parse_client_frames(srv.requests().at(0).body);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].opcode, 9u);
  EXPECT_TRUE(sent[0].masked);
  s->close();
  ASSERT_TRUE(log->wait_for(kind::closed, 5s));
  expect_closed_once_last(*log);
}

TEST_F(ws_session_test, ActivityIsRateLimitedForAChattyPeerButNeverLost) {
  // Two bursts of 100 pings 30 ms apart, then one more ping 2 s later (far
  // enough that a late timer or a late server thread cannot blur it with the
  // second burst's activity).
  std::string pings;
  for (int i = 0; i < 100; ++i)
    pings += ws_frame(0x89, "p");
  scripted_server srv{
    {{step::read_request(), step::ws_accept(), step::sleep(150ms),
      step::send(pings), step::sleep(30ms), step::send(pings),
      step::read_bytes(200 * 7), step::sleep(2s),
      step::send(ws_frame(0x89, "q")), step::hold()}}};
  auto log = std::make_shared<event_log>();
  auto s = open(options(srv.base_url()), log);
  ASSERT_TRUE(log->wait_count(kind::activity, 3, 10s));
  std::this_thread::sleep_for(150ms);
  // Every ping answered (7-byte masked pongs), but at most one activity
  // event per 100 ms: the first burst gives one at once, the second (inside
  // the interval) one when the interval ends, the late ping a third. Under
  // load the second burst may arrive after the interval: then its activity
  // comes at once, still at least 100 ms after the first. Either way it is
  // reported on its own, long before the late ping (the gap below), so it
  // was not held back until the next event.
  auto sent = parse_client_frames(srv.requests().at(0).body);
  EXPECT_EQ(sent.size(), 200u);
  std::vector<clock_type::time_point> at;
  for (auto& e : log->snapshot())
    if (e.ev.what == kind::activity)
      at.push_back(e.at);
  ASSERT_EQ(at.size(), 3u);
  EXPECT_GE(at[1] - at[0], 95ms);
  EXPECT_LT(at[1] - at[0],
            100ms + std::chrono::milliseconds{testing::load_slack_ms});
  EXPECT_GE(at[2] - at[1], 200ms);
  s->close();
  ASSERT_TRUE(log->wait_for(kind::closed, 5s));
  expect_closed_once_last(*log);
}

TEST_F(ws_session_test, PongRightAfterAMessageIsReportedLate) {
  // The message starts the interval; the pong 20 ms later is reported when
  // it ends, not dropped.
  scripted_server srv{
    {{step::read_request(), step::ws_accept(), step::sleep(150ms),
      step::send(ws_text("m")), step::sleep(20ms),
      step::send(ws_frame(0x8A, "")), step::hold()}}};
  auto log = std::make_shared<event_log>();
  auto s = open(options(srv.base_url()), log);
  auto m = log->wait_for(kind::message, 5s);
  ASSERT_TRUE(m);
  auto act = log->wait_for(kind::activity, 5s);
  ASSERT_TRUE(act);
  EXPECT_GE(act->at - m->at, 95ms);
  // At the interval's end, or at once if a loaded server sent the pong
  // after it; never dropped (then no activity would come at all).
  EXPECT_LT(act->at - m->at,
            100ms + std::chrono::milliseconds{testing::load_slack_ms});
  EXPECT_EQ(log->count(kind::activity), 1u);
  s->close();
  ASSERT_TRUE(log->wait_for(kind::closed, 5s));
  expect_closed_once_last(*log);
}

// -- feeds.md case 21: reassembled message size cap
// -----------------------------

// (a) 16 KiB frames, 64 KiB message cap: the message is read in pieces,
// everything past its first 64 KiB discarded, and reported as too_large
// with its full size; the session reads on (the next message arrives).
TEST_F(ws_session_test, Case21aReassemblyOverTheCapIsDiscardedAndReported) {
  std::string chunk(16384, 'x');
  std::string frames = ws_frame(0x01, chunk);
  for (int i = 0; i < 3; ++i)
    frames += ws_frame(0x00, chunk);
  frames += ws_frame(0x80, chunk);
  ASSERT_EQ(frames.substr(0, 4), bytes_of({0x01, 0x7E, 0x40, 0x00}));
  ASSERT_EQ(frames.substr(16388, 4), bytes_of({0x00, 0x7E, 0x40, 0x00}));
  ASSERT_EQ(frames.substr(4 * 16388, 4), bytes_of({0x80, 0x7E, 0x40, 0x00}));
  frames += ws_text("after");
  scripted_server srv{{{step::read_request(), step::ws_accept(),
                        step::send(frames), step::hold()}}};
  auto log = std::make_shared<event_log>();
  auto o = options(srv.base_url());
  o.max_frame_bytes = 64 * 1024;
  auto s = open(o, log);
  auto m = log->wait_for(kind::message, 5s);
  ASSERT_TRUE(m) << describe(*log);
  EXPECT_EQ(m->ev.payload, "after");
  auto big = log->wait_for(kind::too_large, 0ms);
  ASSERT_TRUE(big) << describe(*log);
  EXPECT_EQ(big->ev.size, 5u * 16384u);
  EXPECT_EQ(big->ev.payload, std::string(ws_too_large_prefix, 'x'));
  EXPECT_TRUE(big->ev.fragmented);
  EXPECT_FALSE(big->ev.binary);
  EXPECT_EQ(log->count(kind::closed), 0u);
  EXPECT_EQ(log->count(kind::message), 1u);
  s->close();
  ASSERT_TRUE(log->wait_for(kind::closed, 5s));
  // Nothing but the local close went to the server (no 1009).
  auto sent = parse_client_frames(srv.requests().at(0).body);
  for (auto& f : sent)
    EXPECT_NE(f.opcode, 8u);
  expect_closed_once_last(*log);
}

// A single frame over the cap, smaller than the prefix: the prefix is the
// whole head of the message, and a text message after it still arrives.
TEST_F(ws_session_test, ASingleFrameOverASmallCapKeepsItsFirstBytes) {
  std::string big(10000, 'y');
  big.replace(0, 5, "start");
  scripted_server srv{
    {{step::read_request(), step::ws_accept(),
      step::send(ws_frame(0x82, big) + ws_text("next")), step::hold()}}};
  auto log = std::make_shared<event_log>();
  auto o = options(srv.base_url());
  o.max_frame_bytes = 1000;
  auto s = open(o, log);
  auto m = log->wait_for(kind::message, 5s);
  ASSERT_TRUE(m) << describe(*log);
  EXPECT_EQ(m->ev.payload, "next");
  auto t = log->wait_for(kind::too_large, 0ms);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->ev.size, 10000u);
  EXPECT_EQ(t->ev.payload, big); // under the 64 KiB prefix: all of it
  EXPECT_TRUE(t->ev.binary);
  EXPECT_FALSE(t->ev.fragmented);
  s->close();
  ASSERT_TRUE(log->wait_for(kind::closed, 5s));
  expect_closed_once_last(*log);
}

// (b) one byte, then 100000 empty continuation frames: Beast alone would
// swallow them without ever returning; the fragment cap ends the session.
TEST_F(ws_session_test, Case21bEmptyContinuationFloodEndsInBoundedTime) {
  std::string frames = bytes_of({0x01, 0x01, 0x61});
  for (int i = 0; i < 100000; ++i)
    frames += bytes_of({0x00, 0x00});
  scripted_server srv{{{step::read_request(), step::ws_accept(),
                        step::send(frames), step::hold()}}};
  srv.set_step_timeout(2s);
  auto log = std::make_shared<event_log>();
  auto s = open(options(srv.base_url()), log);
  ASSERT_TRUE(log->wait_for(kind::opened, 5s));
  auto cpu0 = cpu_time();
  auto closed = log->wait_for(kind::closed, 5s);
  auto cpu = cpu_time() - cpu0;
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->ev.reason, ws_close_reason::too_large);
  EXPECT_EQ(closed->ev.detail, "message exceeds 64 fragments");
  // Bounded: a session that swallowed the flood would never close (and
  // spin meanwhile). The bounds carry the slack of a loaded ASan machine.
  const std::chrono::milliseconds slack{testing::load_slack_ms};
  EXPECT_LT(closed->at - log->wait_for(kind::opened, 0ms)->at, slack);
  EXPECT_LT(cpu, slack);
  EXPECT_EQ(log->count(kind::message), 0u);
  expect_closed_once_last(*log);
}

// (b) as the server sees it: the client fails the connection with 1009.
TEST_F(ws_session_test, Case21bClientSendsClose1009) {
  std::string frames = bytes_of({0x01, 0x01, 0x61});
  for (int i = 0; i < 100; ++i) // fits the client's receive buffer: no RST
    frames += bytes_of({0x00, 0x00});
  // Close frame: 2 header + 4 mask + 2 code + "too many fragments".
  scripted_server srv{
    {{step::read_request(), step::ws_accept(), step::send(frames),
      step::read_bytes(26), step::hold()}}};
  srv.set_step_timeout(2s);
  auto log = std::make_shared<event_log>();
  auto s = open(options(srv.base_url()), log);
  auto closed = log->wait_for(kind::closed, 5s);
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->ev.reason, ws_close_reason::too_large);
  ASSERT_TRUE(srv.wait_for_finished(0, 2s));
  auto sent = parse_client_frames(srv.requests().at(0).body);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].opcode, 8u);
  EXPECT_EQ(close_code_of(sent[0]), 1009u);
  EXPECT_EQ(sent[0].payload.substr(2), "too many fragments");
}

TEST_F(ws_session_test, SixtyFourFragmentsAreStillOneMessage) {
  std::string frames = ws_frame(0x01, "a");
  for (int i = 0; i < 62; ++i)
    frames += ws_frame(0x00, "");
  frames += ws_frame(0x80, "z"); // frame 64
  scripted_server srv{{{step::read_request(), step::ws_accept(),
                        step::send(frames), step::hold()}}};
  auto log = std::make_shared<event_log>();
  auto s = open(options(srv.base_url()), log);
  auto m = log->wait_for(kind::message, 5s);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->ev.payload, "az");
  EXPECT_TRUE(m->ev.fragmented);
  s->close();
  ASSERT_TRUE(log->wait_for(kind::closed, 5s));
  expect_closed_once_last(*log);
}

// (c) a declared 2^62-1-byte frame (top bit clear, so legal framing) over
// max_discard_bytes: refused at its header with 1009, nothing of it read,
// although the peer goes on answering pings. Before, its payload was
// "discarded as it arrives" forever: every later byte (the pongs too) was
// part of it and counted as proof of life, and no event ever came.
TEST_F(ws_session_test, Case21cHugeAnnouncedFrameIsRefusedAtTheCeiling) {
  auto header
    = bytes_of({0x82, 0x7F, 0x3F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF});
  // Close frame: 2 header + 4 mask + 2 code + "message too large".
  scripted_server srv{
    {{step::read_request(), step::ws_accept(), step::sleep(100ms),
      step::send(header), step::read_bytes(25), step::hold()}}};
  srv.set_step_timeout(2s);
  auto log = std::make_shared<event_log>();
  auto o = options(srv.base_url());
  o.max_frame_bytes = 64 * 1024; // ceiling: max(1 MiB, 256 MiB)
  auto s = open(o, log);
  auto opened = log->wait_for(kind::opened, 5s);
  ASSERT_TRUE(opened);
  auto closed = log->wait_for(kind::closed, 5s);
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->ev.reason, ws_close_reason::too_large) << closed->ev.detail;
  EXPECT_EQ(closed->ev.size, (uint64_t{1} << 62) - 1);
  EXPECT_NE(closed->ev.detail.find("over max_discard_bytes (268435456)"),
            std::string::npos)
    << closed->ev.detail;
  EXPECT_LT(closed->at - opened->at,
            100ms + std::chrono::milliseconds{testing::load_slack_ms});
  ASSERT_TRUE(srv.wait_for_finished(0, 2s));
  auto sent = parse_client_frames(srv.requests().at(0).body);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(close_code_of(sent[0]), 1009u);
  EXPECT_EQ(sent[0].payload.substr(2), "message too large");
  EXPECT_EQ(log->count(kind::message), 0u);
  // Refused at its first header: reported with nothing of it read.
  auto refused = expect_refused_before_close(*log, (uint64_t{1} << 62) - 1);
  EXPECT_EQ(refused.payload, "");
  EXPECT_FALSE(refused.binary);
  expect_closed_once_last(*log);
}

// The ceiling counts a message's frames together: 3 x 100 KiB announced
// over a 256 KiB ceiling is refused at the third header.
TEST_F(ws_session_test, RunningTotalOverTheCeilingIsRefusedAtTheHeader) {
  std::string part(100 * 1024, 'p');
  scripted_server srv{{{step::read_request(), step::ws_accept(),
                        step::send(ws_frame(0x01, part) + ws_frame(0x00, part)
                                   + ws_frame_header(0x80, part.size())),
                        step::hold()}}};
  auto log = std::make_shared<event_log>();
  auto o = options(srv.base_url());
  o.max_frame_bytes = 64 * 1024;
  o.max_discard_bytes = 256 * 1024;
  auto s = open(o, log);
  auto closed = log->wait_for(kind::closed, 5s);
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->ev.reason, ws_close_reason::too_large) << closed->ev.detail;
  EXPECT_EQ(closed->ev.size, 3u * 100u * 1024u);
  // Over the cap before the refusal: at most its first 64 KiB are kept.
  auto refused = expect_refused_before_close(*log, 3u * 100u * 1024u);
  EXPECT_LE(refused.payload.size(), ws_too_large_prefix);
  EXPECT_EQ(refused.payload, std::string(refused.payload.size(), 'p'));
  expect_closed_once_last(*log);
}

// (c'') the same huge frame under a ceiling set above it: the discard
// deadline ends it. The peer answers every ping (the test pings every
// 50 ms, as a keepalive would): the pongs are bytes of the unfinished
// frame, proof of life that can no longer hold the session.
TEST_F(ws_session_test, OverCapMessageThatNeverEndsFailsAtTheDiscardDeadline) {
  auto header
    = bytes_of({0x82, 0x7F, 0x3F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF});
  testing::script sc{step::read_request(), step::ws_accept(),
                     step::send(header)};
  for (int i = 0; i < 400; ++i) {      // 20 s of pings at most: "forever"
    sc.push_back(step::read_bytes(6)); // the client's masked empty ping
    sc.push_back(step::send(ws_frame(0x8A, "")));
  }
  scripted_server srv{{sc}};
  auto log = std::make_shared<event_log>();
  auto o = options(srv.base_url());
  o.max_frame_bytes = 64 * 1024;
  o.max_discard_bytes = uint64_t{1} << 62;
  o.discard_timeout_ns = 500'000'000;
  auto s = open(o, log);
  auto opened = log->wait_for(kind::opened, 5s);
  ASSERT_TRUE(opened);
  std::optional<event_log::entry> closed;
  for (int i = 0; i < 200 && !closed; ++i) { // 10 s at most
    s->ping();
    closed = log->wait_for(kind::closed, 50ms);
  }
  ASSERT_TRUE(closed) << describe(*log);
  EXPECT_EQ(closed->ev.reason, ws_close_reason::too_large) << closed->ev.detail;
  EXPECT_NE(closed->ev.detail.find("did not end within 500 ms"),
            std::string::npos)
    << closed->ev.detail;
  // The deadline counts from the header (after the open): never early,
  // and not much later than due.
  EXPECT_GE(closed->at - opened->at, 500ms);
  EXPECT_LT(closed->at - opened->at,
            500ms + std::chrono::milliseconds{testing::load_slack_ms});
  // The peer was talking all along (its pongs were activity).
  EXPECT_GE(log->count(kind::activity), 1u);
  expect_refused_before_close(*log, (uint64_t{1} << 62) - 1);
  EXPECT_EQ(log->count(kind::message), 0u);
  expect_closed_once_last(*log);
}

// An over-cap message that does end in time is reported and the deadline
// does not fire later for it: the session reads on past the deadline.
TEST_F(ws_session_test, OverCapMessageThatEndsInTimeDoesNotTripTheDeadline) {
  std::string big(4000, 'b');
  scripted_server srv{{{step::read_request(), step::ws_accept(),
                        step::send(ws_frame_header(0x82, big.size())),
                        step::sleep(100ms), step::send(big), step::sleep(500ms),
                        step::send(ws_text("later")), step::hold()}}};
  auto log = std::make_shared<event_log>();
  auto o = options(srv.base_url());
  o.max_frame_bytes = 1000;
  o.discard_timeout_ns = 300'000'000;
  auto s = open(o, log);
  auto m = log->wait_for(kind::message, 5s);
  ASSERT_TRUE(m) << describe(*log);
  EXPECT_EQ(m->ev.payload, "later");
  auto t = log->wait_for(kind::too_large, 0ms);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->ev.size, 4000u);
  EXPECT_EQ(log->count(kind::closed), 0u);
  s->close();
  auto closed = log->wait_for(kind::closed, 5s);
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->ev.reason, ws_close_reason::local) << closed->ev.detail;
  expect_closed_once_last(*log);
}

// A discard timeout meant as "never" (INT64_MAX ns, what feed_config turns
// 1e10 s into) saturates instead of overflowing into the past: the over-cap
// message is reported when it ends and the session stays open.
TEST_F(ws_session_test,
       AnEndlessDiscardTimeoutDoesNotOverflowIntoAnInstantClose) {
  std::string big(4000, 'b');
  scripted_server srv{
    {{step::read_request(), step::ws_accept(),
      step::send(ws_frame_header(0x82, big.size())), step::sleep(100ms),
      step::send(big), step::send(ws_text("later")), step::hold()}}};
  auto log = std::make_shared<event_log>();
  auto o = options(srv.base_url());
  o.max_frame_bytes = 1000;
  o.discard_timeout_ns = std::numeric_limits<int64_t>::max();
  o.handshake_timeout_ns = std::numeric_limits<int64_t>::max();
  auto s = open(o, log);
  auto m = log->wait_for(kind::message, 5s);
  ASSERT_TRUE(m) << describe(*log);
  EXPECT_EQ(m->ev.payload, "later");
  auto t = log->wait_for(kind::too_large, 0ms);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->ev.size, 4000u);
  EXPECT_EQ(log->count(kind::closed), 0u) << describe(*log);
  s->close();
  ASSERT_TRUE(log->wait_for(kind::closed, 5s));
  expect_closed_once_last(*log);
}

// Past its deadline an over-cap message is refused, and what arrived of it
// is reported first (`too_large`, closing): a feed watcher reads its seq
// there and resets it, so that a catchup hub does not resend it forever
// after the redial. Before, the session closed with nothing.
TEST_F(ws_session_test,
       AnOverCapMessagePastItsDeadlineIsReportedWithItsPrefixFirst) {
  std::string head
    = R"({"type":"event","seq":7,"pad":")" + std::string(3000, 'x');
  scripted_server srv{
    {{step::read_request(), step::ws_accept(),
      step::send(ws_frame_header(0x81, 200000) + head), step::hold()}}};
  auto log = std::make_shared<event_log>();
  auto o = options(srv.base_url());
  o.max_frame_bytes = 1000;
  o.discard_timeout_ns = 300'000'000;
  auto s = open(o, log);
  auto opened = log->wait_for(kind::opened, 5s);
  ASSERT_TRUE(opened);
  auto closed = log->wait_for(kind::closed, 5s);
  ASSERT_TRUE(closed) << describe(*log);
  EXPECT_EQ(closed->ev.reason, ws_close_reason::too_large) << closed->ev.detail;
  EXPECT_NE(closed->ev.detail.find("did not end within 300 ms"),
            std::string::npos)
    << closed->ev.detail;
  EXPECT_GE(closed->at - opened->at, 300ms);
  auto refused = expect_refused_before_close(*log, 200000);
  EXPECT_EQ(refused.payload, head); // all of it arrived, under 64 KiB
  EXPECT_FALSE(refused.binary);
  EXPECT_FALSE(refused.fragmented);
  EXPECT_EQ(log->count(kind::message), 0u);
  expect_closed_once_last(*log);
}

// Refused at the ceiling by a later frame's header: the frames read before
// it are the prefix (the first frame is under the cap, still in the read
// buffer).
TEST_F(ws_session_test, AMessageRefusedAtTheCeilingShowsWhatArrivedOfIt) {
  std::string head
    = R"({"type":"event","seq":9,"pad":")" + std::string(2000, 'y');
  scripted_server srv{
    {{step::read_request(), step::ws_accept(), step::send(ws_frame(0x01, head)),
      step::sleep(100ms), step::send(ws_frame_header(0x80, uint64_t{1} << 30)),
      step::hold()}}};
  auto log = std::make_shared<event_log>();
  auto o = options(srv.base_url());
  o.max_frame_bytes = 64 * 1024;
  o.max_discard_bytes = 1024 * 1024;
  auto s = open(o, log);
  auto closed = log->wait_for(kind::closed, 5s);
  ASSERT_TRUE(closed) << describe(*log);
  EXPECT_EQ(closed->ev.reason, ws_close_reason::too_large) << closed->ev.detail;
  auto refused
    = expect_refused_before_close(*log, head.size() + (uint64_t{1} << 30));
  // Two legal outcomes, as the socket splits the bytes: the first frame
  // read on its own (the prefix is that frame), or both frames in one
  // read (the refused header fails the read: nothing of the message was
  // handed over, the prefix is empty).
  if (refused.payload.empty()) {
    EXPECT_FALSE(refused.binary);
  } else {
    EXPECT_EQ(refused.payload, head);
    EXPECT_TRUE(refused.fragmented);
  }
  EXPECT_EQ(log->count(kind::message), 0u);
  expect_closed_once_last(*log);
}

// The refused header came in the same read as the tail of an earlier
// message within the cap: what the read buffer holds is that message's
// head, never to be reported as the refused message's prefix (a good
// event would be blamed, and reset, as over the cap).
TEST_F(ws_session_test,
       ARefusalInTheReadOfAnEarlierMessagesTailBlamesNotThatMessage) {
  std::string good
    = R"({"type":"event","seq":4,"pad":")" + std::string(3000, 'g') + R"("})";
  auto whole = ws_frame(0x81, good);
  auto cut = whole.size() / 2;
  scripted_server srv{
    {{step::read_request(), step::ws_accept(), step::send(whole.substr(0, cut)),
      step::sleep(100ms),
      step::send(whole.substr(cut) + ws_frame_header(0x81, uint64_t{1} << 30)),
      step::hold()}}};
  auto log = std::make_shared<event_log>();
  auto o = options(srv.base_url());
  o.max_frame_bytes = 64 * 1024;
  o.max_discard_bytes = 1024 * 1024;
  auto s = open(o, log);
  auto closed = log->wait_for(kind::closed, 5s);
  ASSERT_TRUE(closed) << describe(*log);
  EXPECT_EQ(closed->ev.reason, ws_close_reason::too_large) << closed->ev.detail;
  auto refused = expect_refused_before_close(*log, uint64_t{1} << 30);
  // One read (the good message lost with the session, the hub resends
  // it) or two (the good message delivered first): the refused one showed
  // nothing of itself either way.
  EXPECT_EQ(refused.payload, "") << refused.payload.substr(0, 40);
  EXPECT_LE(log->count(kind::message), 1u);
  expect_closed_once_last(*log);
}

// A message within the cap trickled a byte at a time: each byte is proof
// of life, so before only an over-cap message had a deadline and this one
// held the session forever. Now any message has discard_timeout_ns from
// its first header: close 1009, reason timeout, nothing reported of it.
TEST_F(ws_session_test,
       AMessageWithinTheCapTrickledPastTheDeadlineEndsTheSession) {
  scripted_server srv{
    {{step::read_request(), step::ws_accept(),
      step::send(ws_frame_header(0x81, 100)),
      step::trickle(std::string(60, 't'), 50ms), step::hold()}}};
  srv.set_step_timeout(10s);
  auto log = std::make_shared<event_log>();
  auto o = options(srv.base_url());
  o.discard_timeout_ns = 500'000'000;
  o.max_frame_bytes = 1000; // its budget: max(500 ms, 1000 B / 16 KiB/s)
  auto s = open(o, log);
  auto opened = log->wait_for(kind::opened, 5s);
  ASSERT_TRUE(opened);
  auto closed = log->wait_for(kind::closed, 5s);
  ASSERT_TRUE(closed) << describe(*log);
  EXPECT_EQ(closed->ev.reason, ws_close_reason::timeout) << closed->ev.detail;
  EXPECT_NE(closed->ev.detail.find("message of 100 announced bytes did not "
                                   "end within 500 ms"),
            std::string::npos)
    << closed->ev.detail;
  EXPECT_EQ(closed->ev.size, 0u);
  EXPECT_GE(closed->at - opened->at, 500ms);
  // Well before the trickle (3 s) would have ended it.
  EXPECT_LT(closed->at - opened->at,
            500ms + std::chrono::milliseconds{testing::load_slack_ms});
  EXPECT_GE(log->count(kind::activity), 1u); // the trickle was proof of life
  EXPECT_EQ(log->count(kind::too_large), 0u);
  EXPECT_EQ(log->count(kind::message), 0u);
  expect_closed_once_last(*log);
}

// A large message that arrives slowly but whole within the deadline is an
// ordinary message, and the deadline does not fire later for it.
TEST_F(ws_session_test, ASlowMessageThatEndsWithinTheDeadlineIsDelivered) {
  std::string body(4 * 20000, 's');
  testing::script sc{step::read_request(), step::ws_accept(),
                     step::send(ws_frame_header(0x81, body.size()))};
  for (int i = 0; i < 4; ++i) {
    sc.push_back(step::sleep(50ms));
    sc.push_back(
      step::send(body.substr(static_cast<std::size_t>(i) * 20000, 20000)));
  }
  sc.push_back(step::sleep(2500ms)); // past the deadline of the first
  sc.push_back(step::send(ws_text("later")));
  sc.push_back(step::hold());
  scripted_server srv{{sc}};
  auto log = std::make_shared<event_log>();
  auto o = options(srv.base_url());
  o.discard_timeout_ns = 2'000'000'000;   // ~200 ms of sending vs 2 s
  o.min_message_rate = uint64_t{1} << 40; // the budget is the 2 s
  auto s = open(o, log);
  ASSERT_TRUE(log->wait_count(kind::message, 2, 5s)) << describe(*log);
  auto all = log->snapshot();
  std::vector<std::string> messages;
  for (auto& e : all)
    if (e.ev.what == kind::message)
      messages.push_back(e.ev.payload);
  ASSERT_EQ(messages.size(), 2u);
  EXPECT_EQ(messages[0], body);
  EXPECT_EQ(messages[1], "later");
  EXPECT_EQ(log->count(kind::closed), 0u) << describe(*log);
  s->close();
  ASSERT_TRUE(log->wait_for(kind::closed, 5s));
  expect_closed_once_last(*log);
}

// A message within the cap owes only the minimum rate: max(timeout,
// max_frame_bytes / min_message_rate). One that takes longer than
// discard_timeout_ns but ends within that budget is delivered; before, any
// message was cut off at discard_timeout_ns (and a catchup hub resent it on
// every redial: the feed was stuck for good).
TEST_F(ws_session_test,
       AWithinCapMessageSlowerThanTheTimeoutButAboveTheRateIsDelivered) {
  std::string body(4 * 10000, 'r');
  testing::script sc{step::read_request(), step::ws_accept(),
                     step::send(ws_frame_header(0x81, body.size()))};
  for (int i = 0; i < 4; ++i) {
    sc.push_back(step::sleep(150ms));
    sc.push_back(
      step::send(body.substr(static_cast<std::size_t>(i) * 10000, 10000)));
  }
  sc.push_back(step::send(ws_text("later")));
  sc.push_back(step::hold());
  scripted_server srv{{sc}};
  auto log = std::make_shared<event_log>();
  auto o = options(srv.base_url());
  o.max_frame_bytes = 64 * 1024;
  o.discard_timeout_ns = 200'000'000;
  o.min_message_rate = 16 * 1024; // budget: 64 KiB / 16 KiB/s = 4 s
  auto s = open(o, log);
  ASSERT_TRUE(log->wait_count(kind::message, 2, 5s)) << describe(*log);
  std::vector<std::string> messages;
  for (auto& e : log->snapshot())
    if (e.ev.what == kind::message)
      messages.push_back(e.ev.payload);
  ASSERT_EQ(messages.size(), 2u);
  EXPECT_EQ(messages[0], body);
  EXPECT_EQ(messages[1], "later");
  EXPECT_EQ(log->count(kind::closed), 0u) << describe(*log);
  s->close();
  ASSERT_TRUE(log->wait_for(kind::closed, 5s));
  expect_closed_once_last(*log);
}

// A trickle within the cap still ends, at its rate budget rather than at
// discard_timeout_ns.
TEST_F(ws_session_test, AWithinCapTrickleEndsAtItsRateBudget) {
  scripted_server srv{
    {{step::read_request(), step::ws_accept(),
      step::send(ws_frame_header(0x81, 100)),
      step::trickle(std::string(60, 't'), 50ms), step::hold()}}};
  srv.set_step_timeout(10s);
  auto log = std::make_shared<event_log>();
  auto o = options(srv.base_url());
  o.max_frame_bytes = 64 * 1024;
  o.discard_timeout_ns = 200'000'000;
  o.min_message_rate = 64 * 1024; // budget: 64 KiB / 64 KiB/s = 1 s
  auto s = open(o, log);
  auto opened = log->wait_for(kind::opened, 5s);
  ASSERT_TRUE(opened);
  auto closed = log->wait_for(kind::closed, 5s);
  ASSERT_TRUE(closed) << describe(*log);
  EXPECT_EQ(closed->ev.reason, ws_close_reason::timeout) << closed->ev.detail;
  EXPECT_NE(closed->ev.detail.find("did not end within 1000 ms"),
            std::string::npos)
    << closed->ev.detail;
  EXPECT_GE(closed->at - opened->at, 1000ms);
  // Well before the trickle (3 s) would have ended it.
  EXPECT_LT(closed->at - opened->at,
            1000ms + std::chrono::milliseconds{testing::load_slack_ms});
  EXPECT_EQ(log->count(kind::message), 0u);
  expect_closed_once_last(*log);
}

// A message of exactly max_frame_bytes (one frame, or fragments adding up
// to it) is a normal message; one byte more is too_large.
TEST_F(ws_session_test, MessageOfExactlyTheCapIsDeliveredAndOneMoreIsTooLarge) {
  std::string at_cap(1000, 'c');
  at_cap.replace(0, 4, "head");
  std::string quarter(250, 'q');
  std::string frames = ws_frame(0x81, at_cap) + ws_frame(0x01, quarter)
                       + ws_frame(0x00, quarter) + ws_frame(0x00, quarter)
                       + ws_frame(0x80, quarter) + ws_frame(0x81, at_cap + "!")
                       + ws_text("end");
  scripted_server srv{{{step::read_request(), step::ws_accept(),
                        step::send(frames), step::hold()}}};
  auto log = std::make_shared<event_log>();
  auto o = options(srv.base_url());
  o.max_frame_bytes = 1000;
  auto s = open(o, log);
  ASSERT_TRUE(log->wait_count(kind::message, 3, 5s)) << describe(*log);
  std::vector<ws_event> got;
  for (auto& e : log->snapshot())
    if (e.ev.what == kind::message || e.ev.what == kind::too_large)
      got.push_back(e.ev);
  ASSERT_EQ(got.size(), 4u) << describe(*log);
  EXPECT_EQ(got[0].what, kind::message);
  EXPECT_EQ(got[0].payload, at_cap);
  EXPECT_FALSE(got[0].fragmented);
  EXPECT_EQ(got[1].what, kind::message);
  EXPECT_EQ(got[1].payload, std::string(1000, 'q'));
  EXPECT_TRUE(got[1].fragmented);
  EXPECT_EQ(got[2].what, kind::too_large);
  EXPECT_EQ(got[2].size, 1001u);
  EXPECT_EQ(got[2].payload, at_cap + "!");
  EXPECT_EQ(got[3].what, kind::message);
  EXPECT_EQ(got[3].payload, "end");
  s->close();
  ASSERT_TRUE(log->wait_for(kind::closed, 5s));
  expect_closed_once_last(*log);
}

// drop_text sees only complete messages under the cap: a too_large text
// message is reported (never offered to the filter, never dropped), and
// the wake after it arrives intact.
TEST_F(ws_session_test, DropTextReportsATooLargeTextAndTheNextWakeIsIntact) {
  std::string big
    = R"({"type":"wake","cursor":1,"pad":")" + std::string(3000, 'w') + R"("})";
  std::string wake = R"({"type":"wake","cursor":2})";
  scripted_server srv{
    {{step::read_request(),
      step::ws_accept("", ws_text("drop") + ws_text(big) + ws_text(wake)),
      step::hold()}}};
  auto log = std::make_shared<event_log>();
  auto o = options(srv.base_url());
  o.max_frame_bytes = 1000;
  std::mutex mtx;
  std::vector<std::size_t> asked;
  o.drop_text = [&](std::string_view text) {
    std::lock_guard<std::mutex> guard{mtx};
    asked.push_back(text.size());
    return text == "drop" || text.find("\"pad\"") != std::string_view::npos;
  };
  auto s = open(o, log);
  ASSERT_TRUE(log->wait_for(kind::message, 5s)) << describe(*log);
  std::vector<ws_event> got;
  uint64_t dropped = 0;
  for (auto& e : log->snapshot()) {
    dropped += e.ev.dropped;
    if (e.ev.what == kind::message || e.ev.what == kind::too_large)
      got.push_back(e.ev);
  }
  ASSERT_EQ(got.size(), 2u) << describe(*log);
  EXPECT_EQ(got[0].what, kind::too_large);
  EXPECT_EQ(got[0].size, big.size());
  EXPECT_EQ(got[0].payload, big);
  EXPECT_FALSE(got[0].binary);
  EXPECT_EQ(got[1].what, kind::message);
  EXPECT_EQ(got[1].payload, wake);
  EXPECT_EQ(dropped, 1u); // "drop" only, counted on the too_large event
  EXPECT_EQ(got[0].dropped, 1u);
  {
    std::lock_guard<std::mutex> guard{mtx};
    EXPECT_EQ(asked, (std::vector<std::size_t>{4, wake.size()}));
  }
  s->close();
  ASSERT_TRUE(log->wait_for(kind::closed, 5s));
  expect_closed_once_last(*log);
}

// (c') a declared 2^63-byte frame: the top bit of a 64-bit length must be 0
// (RFC 6455 5.2): refused from its header with 1002, the session ends at
// once.
TEST_F(ws_session_test, Case21cLengthWithTheTopBitSetIsRefusedAtOnce) {
  auto header
    = bytes_of({0x82, 0x7F, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00});
  scripted_server srv{
    {{step::read_request(), step::ws_accept(), step::sleep(100ms),
      step::send(header), step::read_bytes(8), step::hold()}}};
  srv.set_step_timeout(2s);
  auto log = std::make_shared<event_log>();
  auto o = options(srv.base_url());
  o.max_frame_bytes = 64 * 1024;
  auto s = open(o, log);
  auto opened = log->wait_for(kind::opened, 5s);
  ASSERT_TRUE(opened);
  auto closed = log->wait_for(kind::closed, 5s);
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->ev.reason, ws_close_reason::broken) << closed->ev.detail;
  // 100 ms of script sleep, then at once (plus the slack of a loaded
  // machine; the server gives up on its read after 2 s).
  EXPECT_LT(closed->at - opened->at,
            100ms + std::chrono::milliseconds{testing::load_slack_ms});
  ASSERT_TRUE(srv.wait_for_finished(0, 2s));
  auto sent = parse_client_frames(srv.requests().at(0).body);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(close_code_of(sent[0]), 1002u);
  EXPECT_TRUE(srv.wait_for_peer_close(0, 500ms));
  expect_closed_once_last(*log);
}

TEST_F(ws_session_test, MaskedServerFrameIsBroken) {
  auto masked = bytes_of({0x81, 0x82, 1, 2, 3, 4, 'h' ^ 1, 'i' ^ 2});
  scripted_server srv{{{step::read_request(), step::ws_accept(),
                        step::send(masked), step::hold()}}};
  auto log = std::make_shared<event_log>();
  auto s = open(options(srv.base_url()), log);
  auto closed = log->wait_for(kind::closed, 5s);
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->ev.reason, ws_close_reason::broken) << closed->ev.detail;
  EXPECT_EQ(log->count(kind::message), 0u);
  expect_closed_once_last(*log);
}

// -- TLS
// -------------------------------------------------------------------------

class ws_session_tls_test : public ws_session_test {
protected:
  void SetUp() override {
    dir = std::make_unique<testing::temp_dir>("outbound-ws-tls-");
    pki = testing::test_pki::generate(dir->path());
    tls_config cfg;
    cfg.ca_file = pki.ca_a.cert;
    tls_connector = make_ws_connector(io, tls_context::make(cfg));
  }

  std::unique_ptr<testing::temp_dir> dir;
  testing::test_pki pki;
  std::shared_ptr<ws_connector> tls_connector;
};

TEST_F(ws_session_tls_test, OpensOverTlsAndReceivesMessages) {
  scripted_server srv{
    {{step::read_request(), step::ws_accept("", ws_text("secure")),
      step::read_bytes(6 + 5), step::hold()}},
    {step::close()},
    {pki.server.cert, pki.server.key, ""}};
  auto log = std::make_shared<event_log>();
  auto s = tls_connector->connect(1, options(srv.base_url()), handler_of(log));
  auto m = log->wait_for(kind::message, 5s);
  ASSERT_TRUE(m) << (log->wait_for(kind::closed, 0ms)
                       ? log->wait_for(kind::closed, 0ms)->ev.detail
                       : "");
  EXPECT_EQ(m->ev.payload, "secure");
  s->send_text("hello");
  for (int i = 0; i < 500 && srv.requests().at(0).body.size() < 11; ++i)
    std::this_thread::sleep_for(10ms);
  auto sent = parse_client_frames(srv.requests().at(0).body);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].payload, "hello");
  auto asked = clock_type::now();
  s->close();
  auto closed = log->wait_for(kind::closed, 5s);
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->ev.reason, ws_close_reason::local);
  // At once, not after a close handshake with a peer that never answers it.
  EXPECT_LT(closed->at - asked,
            std::chrono::milliseconds{testing::load_slack_ms});
  expect_closed_once_last(*log);
}

TEST_F(ws_session_tls_test, AClientFrameOverTheWriteBufferGoesOutWhole) {
  // The client masks its frames through a 512-byte write buffer
  // (ws_write_buffer_bytes): a larger frame (a subscribe with long
  // prefixes) is written in several TLS writes, still one frame, its
  // payload intact and the frames around it in order.
  std::string big;
  for (int i = 0; big.size() < 3000; ++i)
    big += std::to_string(i) + ",";
  big.resize(3000);
  // "a" and "b": 2 header + 4 mask + 1; big: 4 header + 4 mask + 3000.
  const std::size_t expected = 7 + (4 + 4 + big.size()) + 7;
  scripted_server srv{{{step::read_request(), step::ws_accept(),
                        step::read_bytes(expected), step::hold()}},
                      {step::close()},
                      {pki.server.cert, pki.server.key, ""}};
  auto log = std::make_shared<event_log>();
  auto s = tls_connector->connect(1, options(srv.base_url()), handler_of(log));
  ASSERT_TRUE(log->wait_for(kind::opened, 5s));
  s->send_text("a");
  s->send_text(big);
  s->send_text("b");
  for (int i = 0; i < 500 && srv.requests().empty(); ++i)
    std::this_thread::sleep_for(10ms);
  for (int i = 0; i < 500 && srv.requests().at(0).body.size() < expected; ++i)
    std::this_thread::sleep_for(10ms);
  auto sent = parse_client_frames(srv.requests().at(0).body);
  ASSERT_EQ(sent.size(), 3u);
  EXPECT_EQ(sent[0].payload, "a");
  EXPECT_EQ(sent[1].payload, big);
  EXPECT_TRUE(sent[1].fin);
  EXPECT_TRUE(sent[1].masked);
  EXPECT_EQ(sent[1].opcode, 1u);
  EXPECT_EQ(sent[2].payload, "b");
  s->close();
  ASSERT_TRUE(log->wait_for(kind::closed, 5s));
}

TEST_F(ws_session_tls_test, CertificateWithoutTheIpIsATlsFailure) {
  scripted_server srv{{{step::read_request(), step::ws_accept(), step::hold()}},
                      {step::close()},
                      {pki.server_dns.cert, pki.server_dns.key, ""}};
  auto log = std::make_shared<event_log>();
  auto s = tls_connector->connect(1, options(srv.base_url()), handler_of(log));
  auto closed = log->wait_for(kind::closed, 5s);
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->ev.reason, ws_close_reason::tls);
  EXPECT_NE(closed->ev.detail.find("certificate verify failed"),
            std::string::npos)
    << closed->ev.detail;
  expect_closed_once_last(*log);
}

TEST_F(ws_session_tls_test, Case21cOverTlsIsRefusedAtOnce) {
  auto header
    = bytes_of({0x82, 0x7F, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00});
  scripted_server srv{
    {{step::read_request(), step::ws_accept("", header), step::hold()}},
    {step::close()},
    {pki.server.cert, pki.server.key, ""}};
  auto log = std::make_shared<event_log>();
  auto s = tls_connector->connect(1, options(srv.base_url()), handler_of(log));
  auto closed = log->wait_for(kind::closed, 5s);
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->ev.reason, ws_close_reason::broken) << closed->ev.detail;
  EXPECT_TRUE(srv.wait_for_peer_close(0, 3s));
  expect_closed_once_last(*log);
}

// -- the frame tracker (pure)
// ------------------------------------------------------

TEST(ws_frame_tracker_test, CountsFragmentsAcrossArbitrarySplits) {
  std::string bytes = ws_frame(0x01, "ab") + ws_frame(0x89, "")
                      + ws_frame(0x00, "") + ws_frame(0x80, "cd")
                      + ws_text("single");
  detail::ws_frame_tracker t;
  bool activity = false;
  for (char c : bytes) { // one byte at a time
    auto u = static_cast<unsigned char>(c);
    auto r = t.feed(&u, 1);
    EXPECT_FALSE(r.too_many_fragments);
    activity = activity || r.activity;
  }
  EXPECT_TRUE(activity);
  EXPECT_EQ(t.pending_messages(), 2u);
  EXPECT_TRUE(t.pop_fragmented());
  EXPECT_FALSE(t.pop_fragmented());
  EXPECT_FALSE(t.pop_fragmented()); // none left
}

TEST(ws_frame_tracker_test, SixtyFifthFragmentIsRefused) {
  detail::ws_frame_tracker t;
  std::string bytes = ws_frame(0x02, "x");
  for (int i = 0; i < 63; ++i)
    bytes += ws_frame(0x00, "");
  auto r = t.feed(reinterpret_cast<const unsigned char*>(bytes.data()),
                  bytes.size());
  EXPECT_FALSE(r.too_many_fragments);
  EXPECT_EQ(t.fragments(), 64u);
  auto more = ws_frame(0x00, "");
  r = t.feed(reinterpret_cast<const unsigned char*>(more.data()), more.size());
  EXPECT_TRUE(r.too_many_fragments);
}

TEST(ws_frame_tracker_test, CompleteSmallMessageIsNotActivity) {
  detail::ws_frame_tracker t;
  auto bytes = ws_text("{}");
  auto r = t.feed(reinterpret_cast<const unsigned char*>(bytes.data()),
                  bytes.size());
  EXPECT_FALSE(r.activity);
  auto half = ws_frame_header(0x81, 100) + std::string(50, 'x');
  r = t.feed(reinterpret_cast<const unsigned char*>(half.data()), half.size());
  EXPECT_TRUE(r.activity); // a frame still arriving
}

TEST(ws_frame_tracker_test, HugeAnnouncedLengthIsOnlyCounted) {
  detail::ws_frame_tracker t;
  auto h
    = bytes_of({0x82, 0x7F, 0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF});
  auto r = t.feed(reinterpret_cast<const unsigned char*>(h.data()), h.size());
  EXPECT_FALSE(r.too_many_fragments);
  EXPECT_FALSE(r.bad_length);
  EXPECT_EQ(t.pending_messages(), 1u); // FIN: one message (discarded)
}

TEST(ws_frame_tracker_test, OverCapIsKnownAtTheHeaderAndEndsWithTheLastByte) {
  detail::ws_frame_tracker t{detail::ws_max_fragments, 100, 1000};
  auto bytes = ws_frame(0x01, std::string(60, 'a')) + ws_frame(0x89, "")
               + ws_frame(0x80, std::string(60, 'b')) + ws_text("ok");
  auto p = reinterpret_cast<const unsigned char*>(bytes.data());
  std::size_t second = 62 + 2; // the second data frame's header starts here
  auto r = t.feed(p, second);
  EXPECT_FALSE(r.over_cap_began); // 60 announced
  EXPECT_FALSE(t.message_over_cap());
  r = t.feed(p + second, 2); // its header: 120 announced
  EXPECT_TRUE(r.over_cap_began);
  EXPECT_TRUE(t.message_over_cap());
  EXPECT_EQ(t.message_announced(), 120u);
  auto index = t.message_index();
  r = t.feed(p + second + 2, 59);
  EXPECT_TRUE(t.message_over_cap()); // one byte to go
  r = t.feed(p + second + 61, 1);
  EXPECT_FALSE(t.message_over_cap());
  r = t.feed(p + second + 62, bytes.size() - second - 62);
  EXPECT_FALSE(r.over_cap_began);
  EXPECT_FALSE(t.message_over_cap());
  EXPECT_EQ(t.message_index(), index + 1);
  EXPECT_EQ(t.pending_messages(), 2u);
}

TEST(ws_frame_tracker_test, AMessageIsOpenFromItsFirstHeaderToItsLastByte) {
  detail::ws_frame_tracker t;
  auto bytes = ws_frame(0x01, "ab") + ws_frame(0x89, "") + ws_frame(0x80, "cd")
               + ws_text("x");
  auto p = reinterpret_cast<const unsigned char*>(bytes.data());
  auto r = t.feed(p, 1);
  EXPECT_FALSE(r.message_began); // half a header
  EXPECT_FALSE(t.message_open());
  r = t.feed(p + 1, 1);
  EXPECT_TRUE(r.message_began);
  EXPECT_TRUE(t.message_open());
  auto first = t.message_index();
  r = t.feed(p + 2, 2 + 2 + 2 + 1); // its payload, a ping, the last header, 'c'
  EXPECT_FALSE(r.message_began);    // a continuation begins nothing
  EXPECT_TRUE(t.message_open());
  r = t.feed(p + 9, 1); // 'd': the last byte
  EXPECT_FALSE(t.message_open());
  r = t.feed(p + 10, bytes.size() - 10); // a whole message in one batch
  EXPECT_TRUE(r.message_began);
  EXPECT_FALSE(t.message_open());
  EXPECT_EQ(t.message_index(), first + 1);
}

// A message is recorded at its final header, before its payload: only
// the messages that ended before the one in progress are "earlier".
TEST(ws_frame_tracker_test, EarlierMessagesPendingLeaveOutTheOneInProgress) {
  detail::ws_frame_tracker t;
  auto bytes = ws_text("ab") + ws_frame(0x81, "cdef");
  auto p = reinterpret_cast<const unsigned char*>(bytes.data());
  t.feed(p, 4); // the first message, whole
  EXPECT_EQ(t.pending_messages(), 1u);
  EXPECT_EQ(t.earlier_messages_pending(), 1u);
  t.feed(p + 4, 3); // the second's header and 'c'
  EXPECT_TRUE(t.message_open());
  EXPECT_EQ(t.pending_messages(), 2u);
  EXPECT_EQ(t.earlier_messages_pending(), 1u);
  t.pop_fragmented();
  EXPECT_EQ(t.earlier_messages_pending(), 0u);
  t.feed(p + 7, 3); // its end
  EXPECT_EQ(t.earlier_messages_pending(), 1u);
}

TEST(ws_frame_tracker_test, AnnouncedSizeOverTheCeilingIsRefusedInAnySplit) {
  auto h
    = ws_frame(0x01, std::string(600, 'a')) + ws_frame_header(0x80, 401) + "x";
  for (std::size_t cut = 1; cut < h.size(); ++cut) {
    detail::ws_frame_tracker t{detail::ws_max_fragments, 100, 1000};
    auto p = reinterpret_cast<const unsigned char*>(h.data());
    auto r1 = t.feed(p, cut);
    auto r2 = t.feed(p + cut, h.size() - cut);
    EXPECT_TRUE(r1.over_ceiling || r2.over_ceiling) << cut;
    EXPECT_FALSE(r1.bad_length || r2.bad_length);
    EXPECT_EQ(t.message_announced(), 1001u);
  }
  // Exactly at the ceiling: not refused.
  detail::ws_frame_tracker t{detail::ws_max_fragments, 100, 1000};
  auto ok = ws_frame_header(0x82, 1000);
  auto r = t.feed(reinterpret_cast<const unsigned char*>(ok.data()), ok.size());
  EXPECT_FALSE(r.over_ceiling);
  EXPECT_TRUE(r.over_cap_began);
}

TEST(ws_frame_tracker_test, LengthWithTheTopBitSetIsABadLengthInAnySplit) {
  auto h = bytes_of(
    {0x82, 0x7F, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 'x'});
  for (std::size_t cut = 1; cut < h.size(); ++cut) {
    detail::ws_frame_tracker t;
    auto p = reinterpret_cast<const unsigned char*>(h.data());
    auto r1 = t.feed(p, cut);
    auto r2 = t.feed(p + cut, h.size() - cut);
    EXPECT_TRUE(r1.bad_length || r2.bad_length) << cut;
    EXPECT_FALSE(r1.too_many_fragments || r2.too_many_fragments);
    EXPECT_EQ(t.pending_messages(), 0u);
  }
}

TEST(ws_wire_test, AcceptValueOfTheRfcExample) {
  // RFC 6455 section 1.3.
  EXPECT_EQ(detail::ws_accept_for("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
  EXPECT_EQ(scripted_server::ws_accept_value("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
}

TEST(ws_wire_test, ControlByteInAHeaderValueIsRefusedWithoutEchoingIt) {
  ws_options o;
  o.origin = url_parts::parse("http://127.0.0.1:9");
  o.path = "/ws";
  o.headers = {{"Authorization", "Bearer se\x01"
                                 "cret"}};
  std::string out, why;
  EXPECT_FALSE(detail::build_upgrade_request(o, "k", out, why));
  EXPECT_EQ(why, "value of header 'Authorization' contains control byte 0x01 "
                 "at index 9");
}

} // namespace
} // namespace outbound
