#pragma once

// A scripted loopback HTTP server for protocol tests: exact bytes, exact
// timing (the wire cases of wire_cases_*_test.cpp). Each connection runs a
// script of steps (read a request, send bytes, trickle bytes, sleep, close,
// reset, hold) on its own thread; everything the client sends is recorded.
//
// Example (keep-alive reuse, then an idle close 100 ms after response 2):
//
//   using outbound::testing::step;
//   scripted_server srv{{
//     {step::read_request(), step::send(scripted_server::json_response(200,
//     "{}")),
//      step::read_request(), step::send(scripted_server::json_response(200,
//      "{}")), step::sleep(100ms), step::close()},
//   }};
//   ... client calls srv.base_url() ...
//   EXPECT_EQ(srv.connections(), 1u);
//   EXPECT_EQ(srv.requests().at(1).target, "/v1/item");
//
// Every wait is bounded (per-step timeout, stop flag polled every 10 ms); the
// destructor stops the server and joins every thread. Listens on 127.0.0.1
// only, on an ephemeral port. Real time: integration tests only.

#include "protocol/http_types.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace outbound::testing {

/// The slack of every upper bound on real time in the integration tests:
/// what a loaded 2-core machine under ASan + UBSan (about 3x slower than -O2)
/// may add to a wait that the code ends on time. A bound is `expected end +
/// load_slack_ms` and must stay below the end of the wrong outcome it rules
/// out (lower bounds need no slack: timers never fire early).
inline constexpr int64_t load_slack_ms = 1500;

/// One step of a connection script. Build steps with the static factories.
struct step {
  enum class kind {
    read_request, ///< read one request: header + Content-Length body
    read_head,    ///< read one request header only (body left unread)
    read_bytes,   ///< read exactly `count` more bytes (appended to the last
                  ///< request's body and raw bytes)
    send,         ///< write `bytes` in one write
    trickle,      ///< write `bytes` one byte at a time, `delay` before each
                  ///< byte after the first
    sleep,        ///< do nothing for `delay`
    close,        ///< close the socket (FIN; TLS: close_notify first).
                  ///< Linux sends RST instead when received bytes are still
                  ///< unread: read the request first for a clean FIN
    reset,        ///< abort the connection (RST via SO_LINGER 0)
    hold,         ///< keep the connection open silently until the client
                  ///< closes it or the server stops
    ws_accept,    ///< answer the last request's WebSocket upgrade in one
                  ///< write: "101 Switching Protocols", Upgrade, Connection,
                  ///< the Sec-WebSocket-Accept of its Sec-WebSocket-Key,
                  ///< `bytes` (extra header lines), the blank line, then
                  ///< `tail` (e.g. frames riding in the same packet)
  };

  kind what = kind::close;
  std::string bytes;
  std::size_t count = 0;
  std::chrono::milliseconds delay{0};
  std::string tail;

  static step read_request() {
    return {kind::read_request, {}, 0, {}};
  }
  static step read_head() {
    return {kind::read_head, {}, 0, {}};
  }
  static step read_bytes(std::size_t n) {
    return {kind::read_bytes, {}, n, {}};
  }
  static step send(std::string b) {
    return {kind::send, std::move(b), 0, {}};
  }
  static step trickle(std::string b, std::chrono::milliseconds every) {
    return {kind::trickle, std::move(b), 0, every};
  }
  static step sleep(std::chrono::milliseconds d) {
    return {kind::sleep, {}, 0, d};
  }
  static step close() {
    return {kind::close, {}, 0, {}};
  }
  static step reset() {
    return {kind::reset, {}, 0, {}};
  }
  static step hold() {
    return {kind::hold, {}, 0, {}};
  }
  /// `extra_headers`: complete lines, each ending in "\r\n".
  static step ws_accept(std::string extra_headers = "", std::string tail = "") {
    return {kind::ws_accept, std::move(extra_headers), 0, {}, std::move(tail)};
  }
};

/// The steps one connection runs, in order. When the script ends without a
/// close/reset, the connection is closed (FIN).
using script = std::vector<step>;

/// One request as the server received it.
struct recorded_request {
  /// 0-based index of the connection it arrived on (accept order).
  std::size_t connection = 0;
  std::string method;
  std::string target;
  /// Header fields in wire order, names as sent.
  header_list headers;
  /// The body as read (Content-Length bytes, or what read_bytes read).
  std::string body;
  /// Every byte of the request as received (header + body).
  std::string raw;
  /// False if the client closed before the header (and the Content-Length
  /// body, for read_request) was complete.
  bool complete = false;
};

/// What happened on one accepted connection.
struct connection_record {
  /// The client closed its side (a read returned EOF or failed) while the
  /// server was reading, holding or waiting.
  bool peer_closed = false;
  /// The script ran to its end (or stopped on an error).
  bool finished = false;
  /// Steps of the script completed so far (a `send` is complete once the
  /// kernel took every byte: on loopback, they are in the client's socket).
  std::size_t steps_done = 0;
  /// A step failed (e.g. a read timed out); the text says which.
  std::string error;
};

/// TLS settings of the server: both PEM files set turns TLS on.
struct server_tls {
  std::string cert_file;
  std::string key_file;
  /// If set, client certificates are requested and verified against it.
  std::string client_ca_file;
};

/// The scripted server. Not copyable; stops and joins in the destructor.
class scripted_server {
public:
  /// Listens on 127.0.0.1:0. Connection i (0-based, accept order) runs
  /// `scripts[i]`; later connections run `fallback` (default: close at once).
  /// Throws std::runtime_error if it cannot listen or load the TLS files.
  explicit scripted_server(std::vector<script> scripts,
                           script fallback = {step::close()},
                           server_tls tls = {});
  ~scripted_server();

  scripted_server(const scripted_server&) = delete;
  scripted_server& operator=(const scripted_server&) = delete;

  /// Stops accepting, ends every connection (closing it) and joins all
  /// threads. Idempotent; called by the destructor.
  void stop();

  /// The listening port.
  uint16_t port() const {
    return port_;
  }

  /// "http://127.0.0.1:<port>" (or https with TLS).
  std::string base_url() const;

  /// Connections accepted so far.
  std::size_t connections() const;

  /// A copy of the requests received so far, in arrival order.
  std::vector<recorded_request> requests() const;

  /// A copy of the record of connection `i` (empty record if unknown).
  connection_record connection(std::size_t i) const;

  /// Waits until at least `n` connections were accepted; false on timeout.
  bool wait_for_connections(std::size_t n, std::chrono::milliseconds timeout);

  /// Waits until at least `n` requests were recorded; false on timeout.
  bool wait_for_requests(std::size_t n, std::chrono::milliseconds timeout);

  /// Waits until connection `i` saw the client close; false on timeout.
  bool wait_for_peer_close(std::size_t i, std::chrono::milliseconds timeout);

  /// Waits until connection `i` completed its first `n` steps; false on
  /// timeout. Lets a test act after a given write instead of sleeping.
  bool wait_for_steps(std::size_t i, std::size_t n,
                      std::chrono::milliseconds timeout);

  /// Waits until connection `i` finished its script; false on timeout.
  bool wait_for_finished(std::size_t i, std::chrono::milliseconds timeout);

  /// Upper bound of every read step's wait (default 10 s): a step that waits
  /// longer fails and ends its connection. Set before the client connects.
  void set_step_timeout(std::chrono::milliseconds t) {
    step_timeout_ms_.store(t.count());
  }

  // -- response builders -----------------------------------------------------

  /// "HTTP/1.1 <status> <reason>\r\nContent-Type: application/json\r\n
  /// Content-Length: <n>\r\n<extra>\r\n<body>"; `extra_headers` are complete
  /// lines, each ending in "\r\n".
  static std::string json_response(int status, const std::string& body,
                                   const std::string& extra_headers = "");

  /// The header of a chunked JSON response (status line to the blank line).
  static std::string chunked_head(int status = 200);

  /// One chunk: "<hex size>\r\n<data>\r\n".
  static std::string chunk(const std::string& data);

  /// Sec-WebSocket-Accept for `key`: base64(SHA-1(key + the GUID of RFC
  /// 6455 section 1.3)), computed with OpenSSL.
  static std::string ws_accept_value(const std::string& key);

  /// The standard reason phrase of `status` ("OK", "Not Found", ...).
  static const char* reason(int status);

private:
  struct conn_state;
  void accept_loop();
  void run_connection(std::size_t index, int fd);
  bool wait(const std::function<bool()>& pred, std::chrono::milliseconds t);

  std::vector<script> scripts_;
  script fallback_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  void* ssl_ctx_ = nullptr; // SSL_CTX*, null without TLS
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> step_timeout_ms_{10'000};

  mutable std::mutex mtx_;
  std::condition_variable cv_;
  std::vector<recorded_request> requests_;
  std::vector<connection_record> records_;
  std::vector<std::thread> conn_threads_;
  std::thread acceptor_;
};

/// An unmasked server WebSocket frame header (RFC 6455 section 5.2): the
/// first byte `b0` (FIN bit, RSV bits, opcode) as given, then the shortest
/// encoding of `len`.
std::string ws_frame_header(unsigned char b0, uint64_t len);

/// `ws_frame_header(b0, payload.size()) + payload`: 0x81 is a final text
/// frame, 0x01 a first fragment, 0x80 a final continuation, 0x88 a close.
std::string ws_frame(unsigned char b0, const std::string& payload);

/// A final text frame of a server.
std::string ws_text(const std::string& payload);

} // namespace outbound::testing
