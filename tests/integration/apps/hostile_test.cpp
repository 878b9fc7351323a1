// The service client against a hostile server and a careless user: framing
// attacks, limits just under and over every cap, floods, slow peers, absurd
// Retry-After values, bad TLS peers, and the `outbound request` command line
// with hostile arguments. Every test asserts the exact typed outcome (kind,
// cause, attempts, status) and that no wait outlives its bound; none may
// crash, hang past its deadline, allocate what the peer merely announces, or
// print the credential.
//
// Real time on 127.0.0.1: the scripted server (exact bytes, exact timing) and
// a small flood server (below) that writes as fast as the client reads and
// counts what it could write.

#include "tests/support/wire_cases_fixture.hpp"

#include "config/config_error.hpp"
#include "tests/support/child_process.hpp"
#include "tests/support/test_certs.hpp"

#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

using namespace std::chrono_literals;

namespace outbound::testing {
namespace {

// -- the flood server
// -----------------------------------------------------------

/// A loopback server for floods. Each connection reads the request header,
/// writes `head`, then writes `unit` again and again, as fast as the client
/// reads, until the client stops reading (a write fails, or none progresses
/// for 2 s) or `max_bytes` went out; then it holds the connection open until
/// the client closes it or the server stops. Records the bytes written per
/// connection after `head`. Every wait is bounded; the destructor joins.
class flood_server {
public:
  flood_server(std::string head, std::string unit,
               std::size_t max_bytes = std::size_t{512} << 20)
    : head_(std::move(head)), unit_(std::move(unit)), max_bytes_(max_bytes) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0
        || ::listen(fd_, 16) != 0
        || ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw std::runtime_error("flood_server: cannot listen");
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread{[this] {
      accept_loop();
    }};
  }

  ~flood_server() {
    stop_ = true;
    if (acceptor_.joinable())
      acceptor_.join();
    for (auto& t : threads_)
      t.join();
    ::close(fd_);
  }

  std::string base_url() const {
    return "http://127.0.0.1:" + std::to_string(port_);
  }

  std::size_t connections() const {
    std::lock_guard<std::mutex> guard{mtx_};
    return written_.size();
  }

  /// Bytes of the flood (after `head`) written on connection `i` so far.
  std::size_t written(std::size_t i) const {
    std::lock_guard<std::mutex> guard{mtx_};
    return i < written_.size() ? written_[i] : 0;
  }

  /// Waits until connection `i` stopped flooding (bounded by `timeout`).
  bool wait_stopped(std::size_t i, std::chrono::milliseconds timeout) const {
    auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      {
        std::lock_guard<std::mutex> guard{mtx_};
        if (i < stopped_.size() && stopped_[i])
          return true;
      }
      std::this_thread::sleep_for(5ms);
    }
    return false;
  }

private:
  void accept_loop() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 10) <= 0)
        continue;
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0)
        continue;
      std::size_t index;
      {
        std::lock_guard<std::mutex> guard{mtx_};
        index = written_.size();
        written_.push_back(0);
        stopped_.push_back(false);
      }
      threads_.emplace_back([this, c, index] { serve(c, index); });
    }
  }

  void serve(int c, std::size_t index) {
    ::fcntl(c, F_SETFL, ::fcntl(c, F_GETFL) | O_NONBLOCK);
    std::string in;
    auto give_up = std::chrono::steady_clock::now() + 3s;
    char buf[4096];
    while (in.find("\r\n\r\n") == std::string::npos && !stop_
           && std::chrono::steady_clock::now() < give_up) {
      pollfd p{c, POLLIN, 0};
      if (::poll(&p, 1, 10) <= 0)
        continue;
      auto n = ::recv(c, buf, sizeof buf, 0);
      if (n <= 0)
        break;
      in.append(buf, static_cast<std::size_t>(n));
    }
    bool ok = in.find("\r\n\r\n") != std::string::npos
              && write_all(c, head_.data(), head_.size(), nullptr);
    std::size_t total = 0;
    while (ok && total < max_bytes_ && !stop_) {
      std::size_t n = 0;
      ok = write_all(c, unit_.data(), unit_.size(), &n);
      total += n;
      std::lock_guard<std::mutex> guard{mtx_};
      written_[index] = total;
    }
    {
      std::lock_guard<std::mutex> guard{mtx_};
      stopped_[index] = true;
    }
    // Hold until the client closes or the server stops (never a FIN of our
    // own: the client must end the exchange by itself).
    while (ok && !stop_) {
      pollfd p{c, POLLIN, 0};
      if (::poll(&p, 1, 10) <= 0)
        continue;
      auto n = ::recv(c, buf, sizeof buf, 0);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
        break;
    }
    ::close(c);
  }

  /// Writes all of `p`; false when the peer is gone or nothing could be
  /// written for 2 s. `sent` counts what went out.
  bool write_all(int c, const char* p, std::size_t n, std::size_t* sent) {
    std::size_t done = 0;
    auto last_progress = std::chrono::steady_clock::now();
    while (done < n && !stop_) {
      auto r = ::send(c, p + done, n - done, MSG_NOSIGNAL);
      if (r > 0) {
        done += static_cast<std::size_t>(r);
        last_progress = std::chrono::steady_clock::now();
        continue;
      }
      if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
        break;
      if (std::chrono::steady_clock::now() - last_progress > 2s)
        break;
      pollfd pf{c, POLLOUT, 0};
      ::poll(&pf, 1, 10);
    }
    if (sent)
      *sent = done;
    return done == n;
  }

  std::string head_;
  std::string unit_;
  std::size_t max_bytes_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  mutable std::mutex mtx_;
  std::vector<std::size_t> written_;
  std::vector<bool> stopped_;
  std::vector<std::thread> threads_;
  std::thread acceptor_;
};

// -- helpers
// --------------------------------------------------------------------

/// Largest flood a client that stops reading at a cap can have let through:
/// its own bounded buffer plus both kernels' socket buffers on loopback.
constexpr std::size_t flood_bound = std::size_t{24} << 20;

/// A complete response: `head` (status line and header lines, each ending in
/// CRLF, without the blank line), the blank line, `body`.
std::string response(const std::string& head, const std::string& body = "") {
  return head + "\r\n" + body;
}

const std::string ok_true = R"({"ok":true})";

/// The header of a 200 chunked JSON response.
const std::string chunked_200
  = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
    "Transfer-Encoding: chunked\r\n\r\n";

/// Milliseconds since `t0`.
int64_t since(wire_clock::time_point t0) {
  return ms(wire_clock::now() - t0);
}

class Hostile : public wire_test {
protected:
  /// The case file's defaults, but a single attempt: the exact outcome of one
  /// exchange.
  static client_config one_shot(const std::string& url) {
    auto cfg = defaults(url);
    cfg.retry.max_attempts = 1;
    return cfg;
  }

  /// Expects a service_unavailable whose cause is `cause` after `attempts`,
  /// with `needle` in the detail; returns it.
  template <class Fn>
  std::optional<call_error>
  expect_unavailable(Fn&& fn, transport_error_kind cause,
                     const std::string& needle, int attempts = 1) {
    auto err = expect_throw<service_unavailable>(std::forward<Fn>(fn));
    if (!err)
      return err;
    EXPECT_EQ(err->kind, error_kind::service_unavailable) << err->detail;
    EXPECT_EQ(err->cause, cause)
      << to_string(err->cause) << ": " << err->detail;
    EXPECT_EQ(err->attempts, attempts) << err->detail;
    EXPECT_EQ(err->status, 0);
    EXPECT_NE(err->detail.find(needle), std::string::npos) << err->detail;
    expect_no_token(*err);
    return err;
  }

  /// A server answers `status_line` (with a 2-byte JSON body): one attempt
  /// that fails service_unavailable, interrupted, "malformed status line".
  void expect_malformed_status(const std::string& status_line) {
    auto srv = server(
      {{step::read_request(),
        step::send(response(status_line + "\r\nContent-Length: 2\r\n", "{}")),
        step::hold()}});
    auto c = client(one_shot(srv->base_url()));
    expect_unavailable([&] { return c->request("GET", "/v1/s"); },
                       transport_error_kind::interrupted,
                       "malformed status line");
  }

  /// A server sends `head` once, then `filler` again and again as fast as
  /// the client reads: the call to `path` fails interrupted with
  /// `needle` in the detail, well before its timeout, and the client stops
  /// reading within the flood bound.
  void expect_flood_fails_fast(std::string head, std::string filler,
                               const std::string& path,
                               const std::string& needle) {
    flood_server srv{std::move(head), std::move(filler)};
    auto c = client(patient(one_shot(srv.base_url())));
    auto t0 = wire_clock::now();
    expect_unavailable([&] { return c->request("GET", path); },
                       transport_error_kind::interrupted, needle);
    EXPECT_LT(since(t0), fast_ms);
    ASSERT_TRUE(srv.wait_stopped(0, 3s));
    EXPECT_LT(srv.written(0), flood_bound);
  }

  /// Expects one attempt that ended at its timeout: a service_unavailable
  /// caused by `timeout` whose detail is either timer's (see
  /// is_attempt_timeout), the connection's naming one of `phases`.
  template <class Fn>
  std::optional<call_error>
  expect_timeout(Fn&& fn, const std::vector<std::string>& phases) {
    auto err = expect_throw<service_unavailable>(std::forward<Fn>(fn));
    if (!err)
      return err;
    EXPECT_EQ(err->kind, error_kind::service_unavailable) << err->detail;
    EXPECT_EQ(err->cause, transport_error_kind::timeout)
      << to_string(err->cause) << ": " << err->detail;
    EXPECT_EQ(err->attempts, 1) << err->detail;
    EXPECT_EQ(err->status, 0);
    EXPECT_TRUE(is_attempt_timeout(err->detail, phases));
    expect_no_token(*err);
    return err;
  }

  /// `cfg` with a per-attempt timeout of 10 s (deadline 20 s), for a test
  /// that shows an outcome comes early, long before any timer: its bound
  /// (fast_ms) stays far from the timeout even on a loaded machine.
  static client_config patient(client_config cfg) {
    cfg.timeout = 10;
    cfg.deadline = 20;
    return cfg;
  }

  /// The bound of an outcome that waits for no timer (see patient()).
  static constexpr int64_t fast_ms = 3000;
};

// =============================================================================
// Response header limits
// =============================================================================

/// A 200 `{}` whose header block is exactly `size` bytes (status line to the
/// blank line included), padded with one X-Pad field.
std::string header_block_of(std::size_t size) {
  const std::string start = "HTTP/1.1 200 OK\r\nContent-Type: application/json"
                            "\r\nContent-Length: 2\r\nX-Pad: ";
  const std::string end = "\r\n\r\n";
  std::string pad(size - start.size() - end.size(), 'p');
  auto h = start + pad + end;
  EXPECT_EQ(h.size(), size);
  return h + "{}";
}

TEST_F(Hostile, HeaderBlockOfExactly64KiBIsAccepted) {
  auto srv
    = server({{step::read_request(), step::send(header_block_of(65536))}});
  auto c = client(one_shot(srv->base_url()));
  EXPECT_EQ(c->request("GET", "/v1/h"), json("{}"));
}

// Beast's 64 KiB header_limit bounds the header bytes buffered at once, not
// the whole header: complete fields are consumed as they arrive. So a single
// field line over 64 KiB is refused, and so is any header over 128 KiB, but
// a header between the two may pass, depending on how it is segmented.
TEST_F(Hostile, HeaderFieldLineOver64KiBIsAMalformedResponse) {
  auto srv
    = server({{step::read_request(),
               step::send(response("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"
                                   "X-Pad: "
                                     + std::string(65536, 'p') + "\r\n",
                                   "{}")),
               step::hold()}});
  auto c = client(patient(one_shot(srv->base_url())));
  auto t0 = wire_clock::now();
  expect_unavailable([&] { return c->request("GET", "/v1/h"); },
                     transport_error_kind::interrupted,
                     "response header exceeds 64 KiB");
  EXPECT_LT(since(t0), fast_ms);
}

TEST_F(Hostile, HeaderOver128KiBOfTinyFieldsIsAMalformedResponse) {
  std::string head = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n";
  while (head.size() <= 128 * 1024)
    head += "a:b\r\n";
  auto srv = server(
    {{step::read_request(), step::send(response(head, "{}")), step::hold()}});
  auto c = client(one_shot(srv->base_url()));
  expect_unavailable([&] { return c->request("GET", "/v1/h"); },
                     transport_error_kind::interrupted,
                     "response header exceeds 64 KiB");
}

// Tiny header fields forever, as fast as the client reads: refused at the
// cap, not buffered until the timeout.
TEST_F(Hostile, EndlessTinyHeaderFieldsFailAtTheCap) {
  std::string unit;
  for (int i = 0; i < 10000; ++i)
    unit += "a:b\r\n";
  expect_flood_fails_fast("HTTP/1.1 200 OK\r\n", unit, "/v1/h",
                          "response header exceeds 64 KiB");
}

TEST_F(Hostile, TenThousandTinyHeaderFieldsAreAccepted) {
  std::string head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     "Content-Length: 2\r\n";
  for (int i = 0; i < 10000; ++i)
    head += "a:b\r\n";
  auto srv = server({{step::read_request(), step::send(response(head, "{}"))}});
  auto c = client(one_shot(srv->base_url()));
  auto r = c->request_raw("GET", "/v1/h");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.headers.size(), 10002u);
  EXPECT_EQ(r.body, json("{}"));
}

// A header line that never ends, sent as fast as the client reads: the client
// stops at the 64 KiB cap, long before its per-attempt timeout, and does not
// buffer the flood.
TEST_F(Hostile, EndlessHeaderLineFailsAtTheCapNotAtTheTimeout) {
  expect_flood_fails_fast(
    "HTTP/1.1 200 OK\r\nX-Flood: ", std::string(65536, 'a'), "/v1/h",
    "response header exceeds 64 KiB");
}

// Slowloris on the header: one byte every 50 ms, never a line end. The
// attempt ends at its own timeout; with retries, the call ends at the overall
// deadline.
TEST_F(Hostile, TrickledHeaderLineEndsAtThePerAttemptTimeout) {
  auto srv = server(
    {}, {step::read_request(),
         step::trickle("HTTP/1.1 200 OK\r\nX-Slow: " + std::string(200, 'a'),
                       50ms)});
  auto cfg = one_shot(srv->base_url());
  cfg.timeout = 0.5;
  auto c = client(cfg);
  auto t0 = wire_clock::now();
  expect_timeout([&] { return c->request("GET", "/v1/h"); },
                 {"reading the response header"});
  EXPECT_GE(since(t0), 480);
  EXPECT_LE(since(t0), 500 + load_slack_ms); // the trickle lasts 10 s
}

TEST_F(Hostile, TrickledHeaderLinesWithRetriesEndAtTheDeadline) {
  auto srv = server(
    {}, {step::read_request(),
         step::trickle("HTTP/1.1 200 OK\r\nX-Slow: " + std::string(200, 'a'),
                       50ms)});
  auto cfg = defaults(srv->base_url());
  cfg.timeout = 0.5;
  cfg.deadline = 1.2;
  auto c = client(cfg);
  auto t0 = wire_clock::now();
  auto err = expect_throw<deadline_exceeded>(
    [&] { return c->request("GET", "/v1/h"); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->kind, error_kind::deadline_exceeded);
  EXPECT_EQ(err->cause, transport_error_kind::timeout);
  // Attempt 2 starts after a backoff of 0.1-0.2 s and ends at its own 0.5 s
  // timeout, 1.1-1.2 s in; the next backoff (at least 0.2 s) would pass the
  // deadline, so the call ends there, before it.
  EXPECT_EQ(err->attempts, 2);
  EXPECT_GE(since(t0), 1050);
  EXPECT_LE(since(t0), 1200 + load_slack_ms); // the trickle lasts 10 s
  EXPECT_EQ(srv->connections(), static_cast<std::size_t>(err->attempts));
}

TEST_F(Hostile, NulInAHeaderValueIsAMalformedResponse) {
  auto srv = server({{step::read_request(),
                      step::send(response(std::string{"HTTP/1.1 200 OK\r\n"
                                                      "Content-Length: 2\r\n"
                                                      "X-Nul: a"}
                                            + '\0' + "b\r\n",
                                          "{}"))}});
  auto c = client(one_shot(srv->base_url()));
  expect_unavailable([&] { return c->request("GET", "/v1/h"); },
                     transport_error_kind::interrupted,
                     "malformed header field");
}

// A redirect whose Location is 1 MB cannot be read as a response at all.
TEST_F(Hostile, OneMegabyteLocationIsAHeaderOverflow) {
  auto srv = server({{step::read_request(),
                      step::send(response("HTTP/1.1 302 Found\r\nLocation: /"
                                          + std::string(1 << 20, 'L')
                                          + "\r\nContent-Length: 0\r\n")),
                      step::hold()}});
  auto c = client(one_shot(srv->base_url()));
  expect_unavailable([&] { return c->request("GET", "/v1/r"); },
                     transport_error_kind::interrupted,
                     "response header exceeds 64 KiB");
}

// Just under the header cap, the refused redirect exposes the whole Location.
TEST_F(Hostile, SixtyKilobyteLocationIsARefusedRedirect) {
  auto loc = "http://127.0.0.1:1/" + std::string(60000, 'L');
  auto srv
    = server({{step::read_request(),
               step::send(response("HTTP/1.1 302 Found\r\nLocation: " + loc
                                   + "\r\nContent-Length: 0\r\n"))}});
  auto c = client(one_shot(srv->base_url()));
  auto err
    = expect_throw<request_error>([&] { return c->request("GET", "/v1/r"); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->status, 302);
  EXPECT_EQ(err->location, loc);
  EXPECT_EQ(err->attempts, 1);
}

// =============================================================================
// Chunked framing
// =============================================================================

/// One attempt against a chunked 200 whose body bytes are `chunks`, then the
/// server holds the connection (so only the bytes decide the outcome).
class HostileChunks : public Hostile {
protected:
  std::unique_ptr<scripted_server> chunked(const std::string& chunks) {
    return server(
      {{step::read_request(), step::send(chunked_200 + chunks), step::hold()}});
  }
};

TEST_F(HostileChunks, NegativeChunkSizeIsMalformed) {
  auto srv = chunked("-1\r\n{}\r\n0\r\n\r\n");
  auto c = client(one_shot(srv->base_url()));
  expect_unavailable([&] { return c->request("GET", "/v1/c"); },
                     transport_error_kind::interrupted,
                     "malformed chunked body");
}

TEST_F(HostileChunks, HexOverflowChunkSizeIsMalformed) {
  auto srv = chunked("ffffffffffffffffff\r\n{}\r\n0\r\n\r\n");
  auto c = client(one_shot(srv->base_url()));
  expect_unavailable([&] { return c->request("GET", "/v1/c"); },
                     transport_error_kind::interrupted,
                     "malformed chunked body");
}

// The largest chunk size that fits in 64 bits is over any cap: refused when
// its size line arrives, without waiting for its data.
TEST_F(HostileChunks, HugeChunkSizeIsOverTheCapAtOnce) {
  auto srv = chunked("7fffffffffffffff\r\n{}");
  auto c = client(patient(one_shot(srv->base_url())));
  auto t0 = wire_clock::now();
  auto err
    = expect_throw<response_error>([&] { return c->request("GET", "/v1/c"); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->kind, error_kind::response_error);
  EXPECT_EQ(err->cause, transport_error_kind::too_large);
  EXPECT_EQ(err->attempts, 1);
  EXPECT_LT(since(t0), fast_ms);
}

TEST_F(HostileChunks, ChunkExtensionsAreIgnored) {
  auto srv = server({{step::read_request(),
                      step::send(chunked_200 + "b;name=value;q=\"a b\";x\r\n"
                                 + ok_true + "\r\n0;last=1\r\n\r\n")}});
  auto c = client(one_shot(srv->base_url()));
  EXPECT_EQ(c->request("GET", "/v1/c"), json(ok_true));
}

TEST_F(HostileChunks, MalformedChunkExtensionIsMalformed) {
  auto srv = chunked("b;=\r\n" + ok_true + "\r\n0\r\n\r\n");
  auto c = client(one_shot(srv->base_url()));
  expect_unavailable([&] { return c->request("GET", "/v1/c"); },
                     transport_error_kind::interrupted,
                     "malformed chunked body");
}

TEST_F(HostileChunks, FourThousandOneByteChunksAreAccepted) {
  std::string body = "\"" + std::string(4094, 'x') + "\"";
  std::string chunks;
  for (char ch : body)
    chunks += std::string{"1\r\n"} + ch + "\r\n";
  auto srv = server(
    {{step::read_request(), step::send(chunked_200 + chunks + "0\r\n\r\n")}});
  auto c = client(one_shot(srv->base_url()));
  EXPECT_EQ(c->request("GET", "/v1/c"), json(body));
}

// A chunk-size line that never ends (an endless chunk extension), sent as
// fast as the client reads: it must fail fast, not buffer until the timeout.
TEST_F(HostileChunks, EndlessChunkSizeLineFailsFastAndBounded) {
  expect_flood_fails_fast(chunked_200 + "1;x=", std::string(65536, 'a'),
                          "/v1/c", "malformed chunked body");
}

// The same with a trailer field that never ends after the last chunk.
TEST_F(HostileChunks, EndlessTrailerFailsFastAndBounded) {
  expect_flood_fails_fast(
    chunked_200 + "b\r\n" + ok_true + "\r\n0\r\nX-T: ", std::string(65536, 'a'),
    "/v1/c", "malformed chunked body");
}

// =============================================================================
// Message length
// =============================================================================

TEST_F(Hostile, ContentLengthWithChunkedIsMalformed) {
  auto srv
    = server({{step::read_request(),
               step::send(response("HTTP/1.1 200 OK\r\nContent-Length: 11\r\n"
                                   "Transfer-Encoding: chunked\r\n",
                                   "b\r\n" + ok_true + "\r\n0\r\n\r\n")),
               step::hold()}});
  auto c = client(one_shot(srv->base_url()));
  expect_unavailable([&] { return c->request("GET", "/v1/l"); },
                     transport_error_kind::interrupted,
                     "malformed Transfer-Encoding");
}

TEST_F(Hostile, ChunkedWithContentLengthIsMalformed) {
  auto srv = server({{step::read_request(),
                      step::send(response("HTTP/1.1 200 OK\r\n"
                                          "Transfer-Encoding: chunked\r\n"
                                          "Content-Length: 11\r\n",
                                          "b\r\n" + ok_true + "\r\n0\r\n\r\n")),
                      step::hold()}});
  auto c = client(one_shot(srv->base_url()));
  expect_unavailable([&] { return c->request("GET", "/v1/l"); },
                     transport_error_kind::interrupted,
                     "malformed Content-Length");
}

TEST_F(Hostile, ConflictingContentLengthsAreMalformed) {
  for (const std::string fields :
       {"Content-Length: 2\r\nContent-Length: 3\r\n",
        "Content-Length: 2, 3\r\n", "Content-Length: -1\r\n",
        "Content-Length: 99999999999999999999999\r\n",
        "Content-Length: 0x2\r\n", "Content-Length: \r\n"}) {
    SCOPED_TRACE(fields);
    auto srv
      = server({{step::read_request(),
                 step::send(response("HTTP/1.1 200 OK\r\n" + fields, "{}")),
                 step::hold()}});
    auto c = client(one_shot(srv->base_url()));
    expect_unavailable([&] { return c->request("GET", "/v1/l"); },
                       transport_error_kind::interrupted, "Content-Length");
  }
}

// Equal duplicates are one length (RFC 9110 section 8.6).
TEST_F(Hostile, EqualDuplicateContentLengthsAreOneLength) {
  auto srv
    = server({{step::read_request(),
               step::send(response("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"
                                   "Content-Length: 2, 2\r\n",
                                   "{}"))}});
  auto c = client(one_shot(srv->base_url()));
  EXPECT_EQ(c->request("GET", "/v1/l"), json("{}"));
}

// HTTP/1.0 without keep-alive: read by its length, never reused.
TEST_F(Hostile, Http10ResponseIsReadAndTheConnectionNotReused) {
  auto srv = server({{step::read_request(),
                      step::send(response(
                        "HTTP/1.0 200 OK\r\nContent-Length: 11\r\n", ok_true)),
                      step::hold()},
                     {step::read_request(), step::send(ok_empty_object)}});
  auto c = client(one_shot(srv->base_url()));
  EXPECT_EQ(c->request("GET", "/v1/a"), json(ok_true));
  EXPECT_TRUE(srv->wait_for_peer_close(0, 2000ms));
  EXPECT_EQ(c->request("GET", "/v1/b"), json("{}"));
  EXPECT_EQ(srv->connections(), 2u);
}

// No length at all: the body ends with the connection.
TEST_F(Hostile, BodyWithoutLengthIsReadUntilClose) {
  auto srv = server(
    {{step::read_request(),
      step::send(response("HTTP/1.1 200 OK\r\n", ok_true)), step::close()},
     {step::read_request(), step::send(ok_empty_object)}});
  auto c = client(one_shot(srv->base_url()));
  EXPECT_EQ(c->request("GET", "/v1/a"), json(ok_true));
  EXPECT_EQ(c->request("GET", "/v1/b"), json("{}"));
  EXPECT_EQ(srv->connections(), 2u);
}

TEST_F(Hostile, BodyWithoutLengthOverTheCapIsTooLarge) {
  auto srv
    = server({{step::read_request(),
               step::send(response("HTTP/1.1 200 OK\r\n",
                                   "\"" + std::string(4000, 'a') + "\"")),
               step::hold()}});
  auto cfg = patient(one_shot(srv->base_url()));
  cfg.max_response_bytes = 1024;
  auto c = client(cfg);
  auto t0 = wire_clock::now();
  auto err
    = expect_throw<response_error>([&] { return c->request("GET", "/v1/a"); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->cause, transport_error_kind::too_large);
  EXPECT_EQ(err->attempts, 1);
  EXPECT_LT(since(t0), fast_ms);
}

// An error status keeps its type when its unframed body is over the cap.
TEST_F(Hostile, ErrorBodyWithoutLengthOverTheCapKeepsTheStatusType) {
  auto srv = server(
    {{step::read_request(),
      step::send(response("HTTP/1.1 500 Internal Server Error\r\n",
                          R"({"detail":")" + std::string(4000, 'a') + "\"}")),
      step::hold()}});
  auto cfg = one_shot(srv->base_url());
  cfg.max_response_bytes = 1024;
  auto c = client(cfg);
  auto err
    = expect_throw<server_error>([&] { return c->request("GET", "/v1/a"); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->status, 500);
  EXPECT_EQ(err->detail, "");
  EXPECT_EQ(err->attempts, 1);
}

// A cap of one byte refuses even `{}`, right after the header.
TEST_F(Hostile, CapOfOneByteRefusesTwoBytes) {
  auto srv = server(
    {{step::read_request(), step::send(ok_empty_object), step::hold()}});
  auto cfg = one_shot(srv->base_url());
  cfg.max_response_bytes = 1;
  auto c = client(cfg);
  auto err
    = expect_throw<response_error>([&] { return c->request("GET", "/v1/a"); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->cause, transport_error_kind::too_large);
  EXPECT_NE(err->detail.find("Content-Length 2 exceeds the cap of 1 bytes"),
            std::string::npos)
    << err->detail;
}

// Under an enormous cap, a server announcing 512 GiB and sending 11 bytes
// must not make the client allocate 512 GiB: the body is truncated.
TEST_F(Hostile, AnnouncedLengthIsNotAllocatedUpFront) {
  auto srv = server({{step::read_request(),
                      step::send(response("HTTP/1.1 200 OK\r\n"
                                          "Content-Length: 549755813888\r\n",
                                          ok_true)),
                      step::sleep(100ms), step::close()}});
  auto cfg = patient(one_shot(srv->base_url()));
  cfg.max_response_bytes = std::size_t{1} << 40;
  auto c = client(cfg);
  auto t0 = wire_clock::now();
  expect_unavailable([&] { return c->request("GET", "/v1/a"); },
                     transport_error_kind::interrupted,
                     "truncated body: expected 549755813888 bytes, got 11");
  EXPECT_LT(since(t0), fast_ms);
}

// =============================================================================
// Interim responses and statuses without a body
// =============================================================================

TEST_F(Hostile, ContinueAndEarlyHintsPrecedeTheAnswer) {
  auto srv
    = server({{step::read_request(),
               step::send("HTTP/1.1 100 Continue\r\n\r\n"
                          "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; "
                          "rel=preload\r\n\r\n"
                          + scripted_server::json_response(200, ok_true))}});
  auto c = client(one_shot(srv->base_url()));
  auto r = c->request_raw("GET", "/v1/i");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, json(ok_true));
  EXPECT_EQ(find_header(r.headers, "Link"), nullptr);
}

TEST_F(Hostile, ThousandInterimResponsesThenTheAnswer) {
  std::string interim;
  for (int i = 0; i < 1000; ++i)
    interim += "HTTP/1.1 100 Continue\r\n\r\n";
  auto srv = server(
    {{step::read_request(),
      step::send(interim + scripted_server::json_response(200, ok_true))}});
  auto c = client(one_shot(srv->base_url()));
  EXPECT_EQ(c->request("GET", "/v1/i"), json(ok_true));
}

// Interim responses forever: the attempt still ends at its timeout.
TEST_F(Hostile, EndlessInterimResponsesEndAtTheTimeout) {
  std::string unit;
  for (int i = 0; i < 1000; ++i)
    unit += "HTTP/1.1 100 Continue\r\n\r\n";
  flood_server srv{"", unit};
  auto cfg = one_shot(srv.base_url());
  cfg.timeout = 0.5;
  auto c = client(cfg);
  auto t0 = wire_clock::now();
  expect_timeout([&] { return c->request("GET", "/v1/i"); },
                 {"reading the response header"});
  EXPECT_GE(since(t0), 480);
  EXPECT_LE(since(t0), 500 + load_slack_ms);
}

TEST_F(Hostile, SwitchingProtocolsIsNotAnAnswer) {
  auto srv
    = server({{step::read_request(),
               step::send("HTTP/1.1 101 Switching Protocols\r\n"
                          "Upgrade: websocket\r\nConnection: Upgrade\r\n\r\n"),
               step::hold()}});
  auto c = client(one_shot(srv->base_url()));
  expect_unavailable([&] { return c->request("GET", "/v1/i"); },
                     transport_error_kind::interrupted, "unexpected 101");
}

// 204 has no body whatever its header says: the bytes after it never become
// the next answer.
TEST_F(Hostile, NoContentWithBodyBytesIsNullAndPoisonsNothing) {
  auto srv
    = server({{step::read_request(),
               step::send(response("HTTP/1.1 204 No Content\r\n"
                                   "Content-Length: 11\r\n",
                                   ok_true)),
               step::hold()},
              {step::read_request(),
               step::send(scripted_server::json_response(200, R"({"n":2})"))}});
  auto c = client(one_shot(srv->base_url()));
  EXPECT_EQ(c->request("GET", "/v1/a"), boost::json::value{});
  EXPECT_EQ(c->request("GET", "/v1/b"), json(R"({"n":2})"));
  EXPECT_EQ(srv->connections(), 2u);
}

TEST_F(Hostile, NotModifiedWithBodyIsARequestErrorAndPoisonsNothing) {
  auto srv
    = server({{step::read_request(),
               step::send(response("HTTP/1.1 304 Not Modified\r\n"
                                   "Content-Length: 11\r\n",
                                   ok_true)),
               step::hold()},
              {step::read_request(),
               step::send(scripted_server::json_response(200, R"({"n":2})"))}});
  auto c = client(one_shot(srv->base_url()));
  auto err
    = expect_throw<request_error>([&] { return c->request("GET", "/v1/a"); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->status, 304);
  EXPECT_EQ(c->request("GET", "/v1/b"), json(R"({"n":2})"));
  EXPECT_EQ(srv->connections(), 2u);
}

// HEAD with a Content-Length and no body: nothing is waited for, and the
// connection carries the next request.
TEST_F(Hostile, HeadWithContentLengthReadsNoBody) {
  auto srv = server(
    {{step::read_request(),
      step::send(response("HTTP/1.1 200 OK\r\nContent-Type: "
                          "application/json\r\nContent-Length: 1000\r\n")),
      step::read_request(), step::send(ok_empty_object)}});
  auto c = client(patient(one_shot(srv->base_url())));
  auto t0 = wire_clock::now();
  EXPECT_EQ(c->request("HEAD", "/v1/h"), boost::json::value{});
  EXPECT_LT(since(t0), fast_ms);
  EXPECT_EQ(c->request("GET", "/v1/g"), json("{}"));
  EXPECT_EQ(srv->connections(), 1u);
}

// HEAD answered with body bytes anyway: they never become the next answer.
TEST_F(Hostile, HeadAnsweredWithABodyPoisonsNothing) {
  auto srv = server(
    {{step::read_request(),
      step::send(scripted_server::json_response(200, ok_true)), step::hold()},
     {step::read_request(), step::send(ok_empty_object)}});
  auto c = client(one_shot(srv->base_url()));
  EXPECT_EQ(c->request("HEAD", "/v1/h"), boost::json::value{});
  EXPECT_EQ(c->request("GET", "/v1/g"), json("{}"));
  EXPECT_EQ(srv->connections(), 2u);
}

// =============================================================================
// Status lines
// =============================================================================

// Below 100 there is no HTTP status (and 0 means "no response" to callers):
// a malformed response.
TEST_F(Hostile, StatusBelow100IsAMalformedResponse) {
  for (const std::string line : {"HTTP/1.1 000 Zero", "HTTP/1.1 099 Low"}) {
    SCOPED_TRACE(line);
    expect_malformed_status(line);
  }
}

// 600..999 are invalid statuses that a client processes as 5xx (RFC 9110
// section 15).
TEST_F(Hostile, StatusFrom600To999IsAServerError) {
  for (int status : {600, 999}) {
    SCOPED_TRACE(status);
    auto srv
      = server({{step::read_request(),
                 step::send(response("HTTP/1.1 " + std::to_string(status)
                                       + " Odd\r\nContent-Length: 16\r\n",
                                     R"({"detail":"odd"})"))}});
    auto c = client(one_shot(srv->base_url()));
    auto err
      = expect_throw<server_error>([&] { return c->request("GET", "/v1/s"); });
    ASSERT_TRUE(err);
    EXPECT_EQ(err->kind, error_kind::server_error);
    EXPECT_EQ(err->status, status);
    EXPECT_EQ(err->detail, "odd");
    EXPECT_EQ(err->attempts, 1);
  }
}

TEST_F(Hostile, StatusWithWrongDigitCountIsMalformed) {
  for (const std::string line : {"HTTP/1.1 99 Two", "HTTP/1.1 1000 Four",
                                 "HTTP/1.1 2x0 Hex", "HTTP/1.1  200 Space"}) {
    SCOPED_TRACE(line);
    expect_malformed_status(line);
  }
}

TEST_F(Hostile, BinaryGarbageInsteadOfAStatusLineIsMalformed) {
  std::string garbage;
  for (int i = 0; i < 512; ++i)
    garbage += static_cast<char>((i * 151 + 7) & 0xFF);
  for (const std::string bytes :
       {garbage, std::string{"SSH-2.0-OpenSSH_9.2\r\n"},
        std::string{"\x16\x03\x01\x00\x05hello", 10}}) {
    auto srv
      = server({{step::read_request(), step::send(bytes), step::hold()}});
    auto c = client(one_shot(srv->base_url()));
    expect_unavailable([&] { return c->request("GET", "/v1/s"); },
                       transport_error_kind::interrupted, "malformed");
  }
}

// =============================================================================
// JSON bodies
// =============================================================================

std::string nested_array(std::size_t depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

// 100000 levels: the depth limit (json_max_depth) answers, the stack does not.
TEST_F(Hostile, DeeplyNestedJsonIsAResponseErrorAndDoesNotOverflowTheStack) {
  auto body = nested_array(100000);
  auto srv = server({{step::read_request(),
                      step::send(scripted_server::json_response(200, body)),
                      step::read_request(),
                      step::send(scripted_server::json_response(200, body))}});
  auto c = client(one_shot(srv->base_url()));
  auto err
    = expect_throw<response_error>([&] { return c->request("GET", "/v1/j"); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->detail, "response body nests deeper than json_max_depth "
                         "(64 levels) (HTTP 200)");
  EXPECT_EQ(err->status, 200);
  // request_raw degrades a body it cannot read to null.
  auto r = c->request_raw("GET", "/v1/j");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, boost::json::value{});
}

TEST_F(Hostile, DeeplyNestedErrorDetailGivesTheDefaultDetail) {
  auto srv = server({{step::read_request(),
                      step::send(scripted_server::json_response(
                        500, R"({"detail":)" + nested_array(100000) + "}"))}});
  auto c = client(one_shot(srv->base_url()));
  auto err
    = expect_throw<server_error>([&] { return c->request("GET", "/v1/j"); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->status, 500);
  EXPECT_EQ(err->detail, "server error 500");
}

TEST_F(Hostile, InvalidUtf8IsNotJson) {
  auto srv
    = server({{step::read_request(),
               step::send(scripted_server::json_response(200, "\"\xff\xfe\"")),
               step::read_request(),
               step::send(scripted_server::json_response(
                 400, "{\"detail\":\"\xc3\x28\"}"))}});
  auto c = client(one_shot(srv->base_url()));
  auto err
    = expect_throw<response_error>([&] { return c->request("GET", "/v1/j"); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->detail, "response body is not JSON (HTTP 200)");
  auto err2
    = expect_throw<request_error>([&] { return c->request("GET", "/v1/j"); });
  ASSERT_TRUE(err2);
  EXPECT_EQ(err2->status, 400);
  EXPECT_EQ(err2->detail, "request error 400");
}

TEST_F(Hostile, HalfMegabyteDetailIsKeptWhole) {
  std::string big(512 * 1024, 'd');
  auto srv
    = server({{step::read_request(), step::send(scripted_server::json_response(
                                       503, R"({"detail":")" + big + "\"}"))}});
  auto c = client(one_shot(srv->base_url()));
  auto err
    = expect_throw<server_error>([&] { return c->request("GET", "/v1/j"); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->status, 503);
  EXPECT_EQ(err->detail, big);
}

// A credential with a quote and a backslash, echoed inside a detail that is
// an object: the error's detail is that object serialized, where the
// credential stands only escaped.
TEST_F(Hostile, AnEchoedTokenThatJsonEscapesIsRedactedFromAnObjectDetail) {
  auto srv = server(
    {{step::read_request(), step::send(scripted_server::json_response(
                              401, R"({"detail":{"msg":"bad T\"OK\\EN"}})"))}});
  auto cfg = one_shot(srv->base_url());
  cfg.token = R"(T"OK\EN)";
  auto c = client(cfg);
  auto e = expect_throw<auth_error>([&] { return c->request("GET", "/v1/t"); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->detail, R"({"msg":"bad [redacted]"})");
}

// A server that echoes the credential into its error detail (literally or
// JSON-escaped) or into a redirect's Location: never shown.
TEST_F(Hostile, EchoedTokenIsRedactedFromDetailAndLocation) {
  auto srv
    = server({{step::read_request(),
               step::send(scripted_server::json_response(
                 401, R"({"detail":"credential Bearer TOKEN123 is revoked"})")),
               step::read_request(),
               step::send(scripted_server::json_response(
                 403, R"({"detail":"TOKEN\u0031\u0032\u0033 lacks a grant"})")),
               step::read_request(),
               step::send(response("HTTP/1.1 302 Found\r\nLocation: "
                                   "http://127.0.0.1:1/login?t=TOKEN123\r\n"
                                   "Content-Length: 0\r\n"))}});
  auto c = client(one_shot(srv->base_url()));
  auto e1
    = expect_throw<auth_error>([&] { return c->request("GET", "/v1/t"); });
  ASSERT_TRUE(e1);
  EXPECT_EQ(e1->detail, "credential [redacted] is revoked");
  auto e2
    = expect_throw<auth_error>([&] { return c->request("GET", "/v1/t"); });
  ASSERT_TRUE(e2);
  EXPECT_EQ(e2->detail, "[redacted] lacks a grant");
  auto e3
    = expect_throw<request_error>([&] { return c->request("GET", "/v1/t"); });
  ASSERT_TRUE(e3);
  EXPECT_EQ(e3->location, "http://127.0.0.1:1/login?t=[redacted]");
  for (const auto& e : {*e1, *e2, *e3})
    expect_no_token(e);
}

// =============================================================================
// Retry-After and retry-after-ms
// =============================================================================

class HostileRetryAfter : public Hostile {
protected:
  /// A client retrying 503 (max 3 attempts, backoff 0.1 s base, 1 s cap,
  /// deadline 5 s) against a server answering every request with a 503 that
  /// carries `extra` header lines.
  std::unique_ptr<scripted_server> server_503(const std::string& extra) {
    auto answer
      = scripted_server::json_response(503, R"({"detail":"busy"})", extra);
    script s;
    for (int i = 0; i < 5; ++i) {
      s.push_back(step::read_request());
      s.push_back(step::send(answer));
    }
    return server({s});
  }
  client_config retrying_503(const std::string& url) {
    auto cfg = defaults(url);
    cfg.retry.retry_statuses = {503};
    return cfg;
  }
  /// The delays (ms) the call announced in its `retrying` events.
  std::vector<int64_t> delays(const call_error& e) {
    std::vector<int64_t> out;
    for (const auto& t :
         event_log::only(events_of(e.request_id), event_kind::retrying))
      out.push_back(t.ev.delay_ns / 1'000'000);
    return out;
  }
  /// Expects the call to end with the 503 after `attempts`. Each call gets
  /// its own request id, so that its events are told apart from those of
  /// earlier calls (the clients share one seed, hence one id sequence).
  std::optional<call_error> expect_503(blocking_client& c, int attempts) {
    auto req = get("/v1/r");
    req.request_id = "retry-after-" + std::to_string(++calls_);
    auto o = c.call(req);
    if (o.ok()) {
      ADD_FAILURE() << "expected the 503, got a value";
      return std::nullopt;
    }
    EXPECT_EQ(o.error->kind, error_kind::server_error) << o.error->message();
    EXPECT_EQ(o.error->status, 503);
    EXPECT_EQ(o.error->detail, "busy");
    EXPECT_EQ(o.error->attempts, attempts);
    return o.error;
  }
  int calls_ = 0;
  /// Expects backoff delays: retry n waits min(100 ms * 2^n, 1 s) + [0, 100).
  void expect_backoff(const std::vector<int64_t>& ds) {
    for (std::size_t i = 0; i < ds.size(); ++i) {
      EXPECT_GE(ds[i], 100 << i) << "retry " << i;
      EXPECT_LT(ds[i], (100 << i) + 100) << "retry " << i;
    }
  }
};

TEST_F(HostileRetryAfter, GarbageAndNegativeValuesFallBackToBackoff) {
  for (const std::string v : {"soon", "-5", "1e3", "1.5", "+3", "0x10",
                              "Sun, 32 Nov 1994 08:49:37 GMT"}) {
    SCOPED_TRACE(v);
    auto srv = server_503("Retry-After: " + v + "\r\n");
    auto c = client(retrying_503(srv->base_url()));
    auto err = expect_503(*c, 3);
    ASSERT_TRUE(err);
    auto ds = delays(*err);
    EXPECT_EQ(ds.size(), 2u);
    expect_backoff(ds);
  }
}

TEST_F(HostileRetryAfter, EnormousDeltaSecondsEndsTheCallWithTheAnswer) {
  auto srv = server_503("Retry-After: 99999999999999999999999999999\r\n");
  auto c = client(patient(retrying_503(srv->base_url())));
  auto t0 = wire_clock::now();
  auto err = expect_503(*c, 1);
  ASSERT_TRUE(err);
  EXPECT_TRUE(delays(*err).empty());
  EXPECT_LT(since(t0), fast_ms);
}

TEST_F(HostileRetryAfter, PastHttpDateRetriesAtOnce) {
  auto srv = server_503("Retry-After: Sun, 06 Nov 1994 08:49:37 GMT\r\n");
  auto c = client(patient(retrying_503(srv->base_url())));
  auto t0 = wire_clock::now();
  auto err = expect_503(*c, 3);
  ASSERT_TRUE(err);
  EXPECT_EQ(delays(*err), (std::vector<int64_t>{0, 0}));
  EXPECT_LT(since(t0), fast_ms);
}

TEST_F(HostileRetryAfter, FarFutureHttpDateEndsTheCallWithTheAnswer) {
  for (const std::string date :
       {"Fri, 31 Dec 9999 23:59:59 GMT", "Friday, 31-Dec-49 23:59:59 GMT",
        "Fri Dec 31 23:59:59 9999"}) {
    SCOPED_TRACE(date);
    auto srv = server_503("Retry-After: " + date + "\r\n");
    auto c = client(patient(retrying_503(srv->base_url())));
    auto t0 = wire_clock::now();
    auto err = expect_503(*c, 1);
    ASSERT_TRUE(err);
    EXPECT_LT(since(t0), fast_ms);
  }
}

TEST_F(HostileRetryAfter, NonFiniteOrNegativeRetryAfterMsIsIgnored) {
  for (const std::string& v :
       std::vector<std::string>{"NaN", "nan", "inf", "-inf", "-1", "1e3", "..",
                                std::string(40, '1')}) {
    SCOPED_TRACE(v);
    auto srv = server_503("retry-after-ms: " + v + "\r\n");
    auto cfg = retrying_503(srv->base_url());
    cfg.retry.max_attempts = 2;
    auto c = client(cfg);
    auto err = expect_503(*c, 2);
    ASSERT_TRUE(err);
    auto ds = delays(*err);
    EXPECT_EQ(ds.size(), 1u);
    expect_backoff(ds);
  }
}

// A retry-after-ms that is ignored leaves Retry-After in charge.
TEST_F(HostileRetryAfter, IgnoredRetryAfterMsFallsBackToRetryAfter) {
  auto srv = server_503("retry-after-ms: NaN\r\nRetry-After: 0\r\n");
  auto c = client(retrying_503(srv->base_url()));
  auto err = expect_503(*c, 3);
  ASSERT_TRUE(err);
  EXPECT_EQ(delays(*err), (std::vector<int64_t>{0, 0}));
}

TEST_F(HostileRetryAfter, EnormousRetryAfterMsEndsTheCallWithTheAnswer) {
  auto srv = server_503("retry-after-ms: 1" + std::string(30, '0') + "\r\n");
  auto c = client(patient(retrying_503(srv->base_url())));
  auto t0 = wire_clock::now();
  auto err = expect_503(*c, 1);
  ASSERT_TRUE(err);
  EXPECT_LT(since(t0), fast_ms);
}

// =============================================================================
// TLS peers
// =============================================================================

std::string https_url(const scripted_server& srv) {
  return "https://127.0.0.1:" + std::to_string(srv.port());
}

// A plain HTTP server behind an https URL answers the ClientHello with
// text: a TLS error, not retried even for GET.
TEST_F(Hostile, GarbageServerHelloIsATlsError) {
  for (const std::string bytes :
       {std::string{"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"},
        std::string{"\x16\x03\x03\xff\xff", 5} + std::string(300, '\x01'),
        std::string{"\x15\x03\x03\x00\x02\x02\x28", 7}}) {
    auto srv
      = server({}, {step::send(bytes), step::sleep(300ms), step::close()});
    auto c = client(patient(defaults(https_url(*srv))));
    auto t0 = wire_clock::now();
    expect_unavailable([&] { return c->request("GET", "/v1/t"); },
                       transport_error_kind::tls, "TLS handshake failed");
    EXPECT_LT(since(t0), fast_ms);
    EXPECT_EQ(srv->connections(), 1u);
  }
}

// A peer that takes the ClientHello and never answers: the handshake is
// bounded by the per-attempt timeout.
TEST_F(Hostile, SilentTlsPeerEndsAtThePerAttemptTimeout) {
  auto srv = server({}, {step::hold()});
  auto cfg = one_shot(https_url(*srv));
  cfg.timeout = 0.5;
  auto c = client(cfg);
  auto t0 = wire_clock::now();
  expect_timeout([&] { return c->request("GET", "/v1/t"); },
                 {"in the TLS handshake"});
  EXPECT_GE(since(t0), 480);
  EXPECT_LE(since(t0), 500 + load_slack_ms);
}

// =============================================================================
// A peer that never reads
// =============================================================================

// 32 MiB of POST body to a server that accepts and never reads: the write
// blocks on full socket buffers, and the per-attempt timeout still ends it.
TEST_F(Hostile, LargePostToAPeerThatNeverReadsEndsAtTheTimeout) {
  auto srv = server({{step::sleep(60s)}});
  // Serializing and copying 32 MiB before the attempt starts takes seconds
  // on a loaded machine: a long deadline keeps it from ending the call
  // before the attempt's own 1 s timeout does.
  auto cfg = defaults(srv->base_url());
  cfg.deadline = 60;
  auto c = client(cfg);
  boost::json::value body = boost::json::string(std::string(32u << 20, 'b'));
  auto t0 = wire_clock::now();
  // Either timer may end the attempt (see is_attempt_timeout); the
  // connection's, if first, finds the body still being written: the peer
  // reads nothing and 32 MiB is more than both loopback socket buffers hold.
  auto err = expect_timeout([&] { return c->request("POST", "/v1/big", body); },
                            {"writing the request"});
  // The attempt (from its `sending` event to the call's end) lasts its 1 s
  // timeout, plus the slack of a loaded machine; the server would close only
  // at 60 s (stopping the server ends its sleep).
  ASSERT_TRUE(err);
  EXPECT_GE(since(t0), 980);
  EXPECT_LE(since(t0), 30000) << err->detail;
  auto evs = events_of(err->request_id);
  auto sending = event_log::only(evs, event_kind::sending);
  auto failed = event_log::only(evs, event_kind::failed);
  ASSERT_EQ(sending.size(), 1u);
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_LE(ms(failed[0].at - sending[0].at), 1000 + load_slack_ms);
  EXPECT_FALSE(err->nothing_sent);
  EXPECT_NE(err->detail.find("may have been processed"), std::string::npos)
    << err->detail;
}

// A 10 MB JSON body (more than the command line can carry: Linux caps one
// argument at 128 KiB) goes out whole, with its exact Content-Length.
TEST_F(Hostile, TenMegabyteJsonBodyIsSentWhole) {
  auto srv = server({{step::read_request(), step::send(ok_empty_object)}});
  // Serializing and writing 10 MB takes over the default 1 s attempt timeout
  // on a loaded machine: a success must not race that timer.
  auto cfg = defaults(srv->base_url());
  cfg.timeout = 60;
  cfg.deadline = 120;
  auto c = client(cfg);
  boost::json::value v = boost::json::string(std::string(10u << 20, 'j'));
  auto wire = boost::json::serialize(v);
  EXPECT_EQ(c->request("POST", "/v1/big", v), json("{}"));
  auto rs = srv->requests();
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_TRUE(rs[0].complete);
  EXPECT_EQ(header_or_absent(rs[0], "Content-Length"),
            std::to_string(wire.size()));
  EXPECT_EQ(rs[0].body.size(), wire.size());
  EXPECT_TRUE(rs[0].body == wire);
}

// =============================================================================
// Configuration a careless caller gives
// =============================================================================

TEST_F(Hostile, HostOutsideTheUrlCharacterSetIsAConfigError) {
  for (const std::string url :
       {"http://b\xc3\xbc"
        "cher.example:8080",
        "http://ex\"ample", "http://a<b>", "http://[::1", "http://[not-v6]:80",
        "http://host:99999", "http://:80", "http://host:-1"}) {
    SCOPED_TRACE(url);
    auto cfg = defaults(url);
    try {
      client(cfg);
      ADD_FAILURE() << "accepted";
    } catch (const config_error& e) {
      EXPECT_EQ(e.field(), "base_url");
    }
  }
}

TEST_F(Hostile, UserinfoIsRefusedWithoutEchoingIt) {
  for (const std::string url :
       {"http://user:TOKEN123@127.0.0.1:1", "http://TOKEN123@127.0.0.1:1/v1",
        "https://u:TOKEN123@[::1]:1"}) {
    SCOPED_TRACE(url);
    auto cfg = defaults(url);
    try {
      client(cfg);
      ADD_FAILURE() << "accepted";
    } catch (const config_error& e) {
      EXPECT_EQ(e.field(), "base_url");
      EXPECT_EQ(std::string{e.what()}.find("TOKEN123"), std::string::npos)
        << e.what();
    }
  }
}

TEST_F(Hostile, NonFiniteOrNegativeTimesAreConfigErrors) {
  const double bad[] = {-1.0, 0.0, std::nan(""), HUGE_VAL, -HUGE_VAL};
  for (double v : bad) {
    SCOPED_TRACE(v);
    auto cfg = defaults("http://127.0.0.1:1");
    cfg.timeout = v;
    EXPECT_THROW(client(cfg), config_error);
    cfg = defaults("http://127.0.0.1:1");
    cfg.deadline = v;
    EXPECT_THROW(client(cfg), config_error);
    cfg = defaults("http://127.0.0.1:1");
    cfg.retry.base_backoff = v;
    if (v == 0.0)
      EXPECT_NO_THROW(client(cfg));
    else
      EXPECT_THROW(client(cfg), config_error);
  }
}

// An absurd (finite) deadline is a valid "effectively forever": the call
// still ends with its own outcome, not with the facade giving up at once.
TEST_F(Hostile, AbsurdDeadlineIsForeverNotZero) {
  auto srv = server({}, {step::read_request(), step::send(ok_empty_object)});
  for (double deadline : {1e10, 1e300}) {
    SCOPED_TRACE(deadline);
    auto cfg = one_shot(srv->base_url());
    cfg.deadline = deadline;
    cfg.timeout = deadline;
    auto c = client(cfg);
    auto o = c->call(get("/v1/d"));
    EXPECT_TRUE(o.ok()) << o.error->message();
  }
}

// A timeout or deadline so small that it rounds to 0 ns is refused at
// construction, naming the field (it timed out every attempt at once).
TEST_F(Hostile, SubNanosecondTimesAreConfigErrorsNamingTheField) {
  for (std::string field : {"timeout", "deadline"}) {
    auto cfg = defaults("http://127.0.0.1:1");
    (field == "timeout" ? cfg.timeout : cfg.deadline) = 1e-12;
    try {
      client(cfg);
      ADD_FAILURE() << field << " accepted";
    } catch (const config_error& e) {
      EXPECT_EQ(e.field(), field);
    }
  }
}

// =============================================================================
// The command line
// =============================================================================

struct cli_run {
  int exit_code = -1;
  std::string out;
  std::string err;
  /// The last stderr line as JSON (the failure line); empty on a parse error.
  boost::json::object error() const {
    std::string line;
    std::istringstream in{err};
    for (std::string l; std::getline(in, l);)
      if (!l.empty())
        line = l;
    boost::system::error_code ec;
    auto v = boost::json::parse(line, ec);
    if (ec || !v.is_object())
      return {};
    return v.as_object();
  }
  std::string error_type() const {
    auto e = error();
    auto* t = e.if_contains("error");
    return t && t->is_string() ? std::string{t->as_string()} : "<none>";
  }
};

/// Runs the `outbound` binary with `args`; kills it after 30 s.
cli_run run_outbound(const std::vector<std::string>& args) {
  std::vector<std::string> argv{OUTBOUND_CLI};
  argv.insert(argv.end(), args.begin(), args.end());
  auto c = run_child(argv, 30s);
  if (c.timed_out)
    throw std::runtime_error("the CLI did not exit within 30 s");
  cli_run r;
  r.exit_code = c.exit_code;
  r.out = std::move(c.out);
  r.err = std::move(c.err);
  return r;
}

const std::string cli_secret = "s3cr3t-hostile-T0KEN";

/// Expects exit `code` with a failure line of type `type` on stderr, nothing
/// on stdout, and the secret nowhere.
void expect_cli_failure(const cli_run& r, const std::string& type, int code) {
  EXPECT_EQ(r.exit_code, code) << r.err;
  EXPECT_EQ(r.error_type(), type) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err.find(cli_secret), std::string::npos) << r.err;
}

/// A server answering any number of requests on any connection with
/// `{"ok":true}`.
std::unique_ptr<scripted_server> ok_server() {
  script s;
  for (int i = 0; i < 4; ++i) {
    s.push_back(step::read_request());
    s.push_back(step::send(scripted_server::json_response(200, ok_true)));
  }
  return wire_test::server({}, s);
}

// Linux caps one argument at 128 KiB (MAX_ARG_STRLEN): the largest body the
// command line can take arrives byte for byte.
TEST(HostileCli, JsonBodyNearTheArgumentLimitIsSentWhole) {
  auto srv = ok_server();
  std::string body = "\"" + std::string(120 * 1024, 'j') + "\"";
  auto r = run_outbound(
    {"request", "-X", "POST", "--json", body, srv->base_url() + "/v1/big"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, ok_true + "\n");
  auto rs = srv->requests();
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0].body, body);
  EXPECT_EQ(header_or_absent(rs[0], "Content-Length"),
            std::to_string(body.size()));
}

TEST(HostileCli, SpacesInThePathArePercentEncoded) {
  auto srv = ok_server();
  auto r = run_outbound({"request", srv->base_url() + "/v1/a b/\xc3\xbc"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto rs = srv->requests();
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0].target, "/v1/a%20b/%C3%BC");
}

TEST(HostileCli, ControlCharactersInTheUrlAreRefusedBeforeSending) {
  auto srv = ok_server();
  for (const std::string url :
       {srv->base_url() + "/v1/x\r\nX-Evil: 1", srv->base_url() + "/v1/\x01",
        "http://127.0.0.1\r\nX-Evil: 1:" + std::to_string(srv->port()) + "/v1",
        "http://exa mple:" + std::to_string(srv->port()) + "/v1"}) {
    SCOPED_TRACE(url);
    auto r = run_outbound({"request", url});
    expect_cli_failure(r, "config_error", 2);
  }
  EXPECT_EQ(srv->connections(), 0u);
}

TEST(HostileCli, UnicodeHostIsAConfigErrorWithoutALookup) {
  auto r = run_outbound({"request", "--timeout", "0.2", "--deadline", "0.5",
                         "http://b\xc3\xbc"
                         "cher.example/v1"});
  expect_cli_failure(r, "config_error", 2);
  EXPECT_NE(r.err.find("base_url"), std::string::npos) << r.err;
}

// An IPv4-mapped IPv6 literal reaches the IPv4 loopback server; the Host
// header carries the bracketed literal.
TEST(HostileCli, Ipv6LiteralHostIsBracketedInTheHostHeader) {
  auto srv = ok_server();
  auto r = run_outbound(
    {"request", "--max-attempts", "1", "--timeout", "1",
     "http://[::ffff:127.0.0.1]:" + std::to_string(srv->port()) + "/v1/six"});
  if (r.exit_code == 7 && srv->connections() == 0)
    GTEST_SKIP() << "no IPv6 on this machine: " << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto rs = srv->requests();
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(header_or_absent(rs[0], "Host"),
            "[::ffff:127.0.0.1]:" + std::to_string(srv->port()));
}

TEST(HostileCli, HeaderInjectionIsRefusedBeforeSending) {
  auto srv = ok_server();
  for (const std::string& h : std::vector<std::string>{
         "X-A: a\r\nX-Evil: 1", "X-A: a\nX-Evil: 1", "X-A\r\nX-Evil: b",
         "X A: b", ": b", "Host: evil.example", "Content-Length: 0",
         "Transfer-Encoding: chunked"}) {
    SCOPED_TRACE(h);
    auto r = run_outbound({"request", "--token", cli_secret, "--header", h,
                           srv->base_url() + "/v1/h"});
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(r.err.find("X-Evil"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find(cli_secret), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find('\r'), std::string::npos) << r.err;
  }
  EXPECT_EQ(srv->connections(), 0u);
}

TEST(HostileCli, ParamsArePercentEncoded) {
  auto srv = ok_server();
  auto r
    = run_outbound({"request", "--param", "a&b=c=d#e", "--param",
                    "\xc3\xbc=\xe2\x9c\x93", "--param", "sp ace=+%", "--param",
                    "empty", srv->base_url() + "/v1/p?q=a+b%26c&r=%E2%9C%93"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto rs = srv->requests();
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0].target,
            "/v1/p?q=a%20b%26c&r=%E2%9C%93&a%26b=c%3Dd%23e&%C3%BC=%E2%9C%93"
            "&sp%20ace=%2B%25&empty=");
}

TEST(HostileCli, NonFiniteNegativeOrZeroTimesAreRefused) {
  for (const std::string opt : {"--timeout", "--deadline"})
    for (const std::string v : {"-1", "0", "nan", "inf", "-inf", "1e999"}) {
      SCOPED_TRACE(opt + " " + v);
      auto r = run_outbound({"request", "--token", cli_secret, opt + "=" + v,
                             "http://127.0.0.1:1/v1"});
      EXPECT_EQ(r.exit_code, 2) << r.err;
      auto type = r.error_type();
      EXPECT_TRUE(type == "config_error" || type == "usage_error") << r.err;
      EXPECT_EQ(r.err.find(cli_secret), std::string::npos) << r.err;
    }
}

// An absurd deadline is "forever", not "already over".
TEST(HostileCli, AbsurdDeadlineStillAnswers) {
  auto srv = ok_server();
  auto r = run_outbound({"request", "--deadline", "1e300", "--timeout", "1e300",
                         srv->base_url() + "/v1/d"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, ok_true + "\n");
}

TEST(HostileCli, AbsurdAttemptCountsAreRefusedOrBoundedByTheDeadline) {
  for (const std::string v : {"1e9", "99999999999", "-5", "0", "three"}) {
    SCOPED_TRACE(v);
    auto r
      = run_outbound({"request", "--max-attempts", v, "http://127.0.0.1:1/v1"});
    EXPECT_EQ(r.exit_code, 2) << r.err;
  }
  // A billion attempts with no backoff against a refusing port: the retry
  // budget ends it (its floor: 10/s over 10 s, 100 retries), long before
  // the 5 s deadline.
  auto t0 = wire_clock::now();
  auto r
    = run_outbound({"request", "--max-attempts", "1000000000", "--base-backoff",
                    "0", "--deadline", "5", "http://127.0.0.1:1/v1"});
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_EQ(r.error_type(), "service_unavailable") << r.err;
  EXPECT_EQ(r.error().at("reason").as_string(), "budget_exhausted") << r.err;
  EXPECT_EQ(r.error().at("attempts").as_int64(), 101) << r.err;
  EXPECT_LT(since(t0), 5000);
}

TEST(HostileCli, ResponseCapZeroOrNegativeIsRefused) {
  for (const std::string v : {"0", "-1", "1e3", "18446744073709551616"}) {
    SCOPED_TRACE(v);
    auto r = run_outbound(
      {"request", "--max-response-bytes", v, "http://127.0.0.1:1/v1"});
    EXPECT_EQ(r.exit_code, 2) << r.err;
  }
}

TEST(HostileCli, HugeResponseCapIsAccepted) {
  auto srv = ok_server();
  auto r = run_outbound({"request", "--max-response-bytes",
                         "18446744073709551615", srv->base_url() + "/v1/cap"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, ok_true + "\n");
}

// The credential given in the URL's user info: refused, never printed,
// nothing sent, whatever the rest of the URL looks like.
TEST(HostileCli, TokenInTheUrlUserinfoIsRefusedAndNeverPrinted) {
  auto srv = ok_server();
  auto port = std::to_string(srv->port());
  for (const std::string url :
       {"http://user:" + cli_secret + "@127.0.0.1:" + port + "/v1",
        "http://" + cli_secret + "@127.0.0.1:" + port + "/v1",
        "https://u:" + cli_secret + "@[::1]:" + port + "/v1",
        "ftp://u:" + cli_secret + "@127.0.0.1:" + port + "/v1",
        "u:" + cli_secret + "@127.0.0.1:" + port + "/v1",
        "http://u:" + cli_secret + "?x@127.0.0.1:" + port + "/v1",
        "http://u:" + cli_secret + "#x@127.0.0.1:" + port + "/v1",
        "http://u:ab/" + cli_secret + "@127.0.0.1:" + port + "/v1"}) {
    SCOPED_TRACE(url);
    auto r = run_outbound({"request", "--verbose", url});
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(r.err.find(cli_secret), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find(cli_secret), std::string::npos) << r.out;
  }
  EXPECT_EQ(srv->connections(), 0u);
}

// --raw prints the server's header bytes: the line stays valid JSON (UTF-8)
// whatever bytes the server sent.
TEST(HostileCli, RawOutputIsValidJsonForInvalidUtf8Headers) {
  auto srv = wire_test::server(
    {{step::read_request(),
      step::send(scripted_server::json_response(
        200, ok_true, "X-Bin: \xff\xfe\x80 ok\r\nX-Ctl: a\tb\r\n"))}});
  auto r = run_outbound({"request", "--raw", srv->base_url() + "/v1/raw"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  boost::system::error_code ec;
  auto v = boost::json::parse(r.out, ec);
  ASSERT_FALSE(ec) << ec.message() << ": " << r.out;
  auto& h = v.at("headers").as_object();
  EXPECT_EQ(h.at("x-bin").as_string(),
            "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd ok");
  EXPECT_EQ(h.at("x-ctl").as_string(), "a\tb");
}

} // namespace
} // namespace outbound::testing
