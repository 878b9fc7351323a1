#pragma once

// Raw loopback clients for tests that must send exact (often invalid) bytes
// to a server: a blocking TCP connection with bounded waits, and a WebSocket
// client on it that writes masked frames byte for byte (RFC 6455 section
// 5.2) and reads the server's frames one by one. Used against the reference
// hub (hub_test, feed_hostile_test). Real time: integration tests only.

#include <boost/json/object.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace outbound::testing {

/// A blocking TCP connection to 127.0.0.1:`port` (TCP_NODELAY); every wait
/// is bounded. Throws std::runtime_error when it cannot connect.
class raw_conn {
public:
  explicit raw_conn(uint16_t port);
  ~raw_conn();
  raw_conn(const raw_conn&) = delete;
  raw_conn& operator=(const raw_conn&) = delete;

  /// Sends everything; false if the peer went away or `timeout` passed.
  bool send(const std::string& s,
            std::chrono::milliseconds timeout = std::chrono::seconds{10});

  /// Reads what arrives within `timeout` into the buffer; false on EOF or
  /// error (the buffer keeps what came before).
  bool read_some(std::chrono::milliseconds timeout);

  /// Reads until EOF or `timeout`; true on EOF.
  bool read_to_eof(std::chrono::milliseconds timeout);

  /// Reads until `pred(buffer)` holds, EOF or `timeout`; `pred(buffer)`.
  bool read_until(const std::function<bool(const std::string&)>& pred,
                  std::chrono::milliseconds timeout);

  /// What was read and not consumed yet.
  std::string& buffer() {
    return buf_;
  }

  /// True once a read saw the peer close TCP (or an error).
  bool eof() const {
    return eof_;
  }

private:
  int fd_ = -1;
  std::string buf_;
  bool eof_ = false;
};

/// A masked client frame of any length (mask 11 22 33 44).
std::string client_frame(uint8_t opcode, const std::string& payload,
                         bool fin = true);

/// One frame as the server sent it.
struct server_frame {
  bool fin = false;
  int opcode = 0;
  /// The length its header announced.
  uint64_t length = 0;
  /// Empty when read with `header_only`.
  std::string payload;
};

/// A WebSocket client that writes exact bytes: the upgrade request (fixed
/// key), masked frames, and reads the server's frames one at a time. The
/// constructor waits up to 5 s for the upgrade answer's head and keeps its
/// status line (a refused upgrade is the test's to check); it throws
/// std::runtime_error when none arrives.
class raw_ws {
public:
  raw_ws(uint16_t port, const std::string& path);

  /// The upgrade answer's status line ("HTTP/1.1 101 Switching Protocols").
  const std::string& status_line() const {
    return status_line_;
  }

  /// Sends one masked frame; false if it could not be sent.
  [[nodiscard]] bool send_frame(int opcode, const std::string& payload,
                                bool fin = true);

  [[nodiscard]] bool send_text(const std::string& text) {
    return send_frame(0x1, text);
  }

  /// Sends `bytes` as they are (a hand-made frame or garbage).
  [[nodiscard]] bool send_raw(const std::string& bytes,
                              std::chrono::milliseconds timeout
                              = std::chrono::seconds{10}) {
    return c_.send(bytes, timeout);
  }

  /// Subscribes to every subject from the start (the hub's subscribe
  /// message with every field null).
  [[nodiscard]] bool subscribe();

  /// Exactly `n` bytes, or nullopt on timeout or EOF (nothing consumed).
  std::optional<std::string> read_exact(std::size_t n,
                                        std::chrono::milliseconds timeout);

  /// The next whole frame (only its header with `header_only`), or nullopt
  /// on timeout or EOF; a frame is consumed only once whole.
  std::optional<server_frame> read_frame(std::chrono::milliseconds timeout
                                         = std::chrono::seconds{3},
                                         bool header_only = false);

  std::optional<server_frame> next(std::chrono::milliseconds timeout
                                   = std::chrono::seconds{3}) {
    return read_frame(timeout);
  }

  /// A whole (possibly fragmented) data message; control frames between
  /// fragments are skipped.
  std::optional<std::string> read_message(std::chrono::milliseconds timeout
                                          = std::chrono::seconds{3});

  /// The next text frame that is a JSON object whose "type" is `type`,
  /// skipping others, within `timeout`.
  std::optional<boost::json::object>
  next_of_type(const std::string& type,
               std::chrono::milliseconds timeout = std::chrono::seconds{3});

  /// True if the server closes TCP within `timeout`.
  bool closed_within(std::chrono::milliseconds timeout) {
    return c_.read_to_eof(timeout);
  }

  /// True once a read saw the server close TCP.
  bool eof() const {
    return c_.eof();
  }

  raw_conn& conn() {
    return c_;
  }

private:
  raw_conn c_;
  std::string status_line_;
};

} // namespace outbound::testing
