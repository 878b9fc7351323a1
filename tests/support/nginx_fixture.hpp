#pragma once

// A real nginx for integration tests: started by the test as a child process
// in a temporary prefix (config, logs, pid and temp paths all inside it, so it
// runs as root without touching /etc or /var), listening only on 127.0.0.1,
// stopped with SIGQUIT + waitpid. Routes (identical on every server):
//
//   GET /v1/items.json        200, nginx_instance::items_body (static file)
//   GET /v1/empty             204, no body
//   GET /v1/text              200 text/plain "hello, not json"
//   GET /v1/query             200 {"query":"<the raw query string>"}
//   GET /v1/nope              404 {"detail":"nope"}
//   GET /v1/unauthorized      401 {"detail":"bad token"}
//   GET /v1/forbidden         403 {"detail":"no grant"}
//   GET /v1/boom              500 {"detail":"boom"}
//   GET /v1/unavailable       503 {"detail":"maintenance"}
//   GET /v1/redirect          302 to
//   http://127.0.0.1:<redirect_port>/v1/items.json GET /v1/chunked.json 200
//   chunked_body(), Transfer-Encoding: chunked
//                             in 1 KiB chunks (sub_filter drops the length)
//   GET /v1/big.json          200 big_body() with Content-Length (64 KiB)
//   GET /v1/big-chunked.json  200 big_body(), chunked
//   GET /v1/big-error         500 with big_body() as its body
//   GET /v1/short-idle.json   items_body; nginx closes the keep-alive
//                             connection after 100 ms idle
//   GET /v1/close.json        items_body with Connection: close
//   GET /v1/slow.json         big_body() trickled at 256 bytes/s
//
// With an upstream port (a feed hub on 127.0.0.1), also proxied to it over
// HTTP/1.1: /v1/events, /v1/cursor, /admin/*, and /ws/* with the WebSocket
// upgrade (Upgrade/Connection headers passed, 1 h read timeout).
//
// Every request is logged to one access log (see access_entry), so tests can
// count what the server really saw per request id.

#include "tests/support/test_certs.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <sys/types.h>

namespace outbound::testing {

/// A TCP listener on 127.0.0.1:<ephemeral> that never answers: it only counts
/// the connections that reach it (the target of a redirect that must not be
/// followed). Throws std::runtime_error if it cannot listen.
class connection_sink {
public:
  connection_sink();
  ~connection_sink();

  connection_sink(const connection_sink&) = delete;
  connection_sink& operator=(const connection_sink&) = delete;

  uint16_t port() const {
    return port_;
  }

  /// Accepts (and closes) every pending connection and returns how many
  /// connections arrived since construction.
  std::size_t connections();

private:
  int fd_ = -1;
  uint16_t port_ = 0;
  std::size_t seen_ = 0;
};

/// One line of the access log (fields of the request as nginx saw them;
/// absent headers read "-").
struct access_entry {
  uint16_t server_port = 0;
  std::string method;
  std::string uri; ///< path plus query, as sent
  int status = 0;
  std::string request_id;    ///< x-request-id
  std::string retry_count;   ///< x-retry-count
  std::string authorization; ///< Authorization
  std::string client_verify; ///< $ssl_client_verify (SUCCESS, NONE, FAILED:...)
  uint64_t connection = 0;   ///< nginx's serial number of the connection
  uint64_t connection_requests = 0; ///< 1-based request number on it
};

/// Which listener of the instance.
enum class nginx_listener {
  http,    ///< plain HTTP
  tls,     ///< HTTPS with the `server` certificate (SAN localhost, 127.0.0.1)
  mtls,    ///< HTTPS, `ssl_verify_client on` with CA A
  tls_dns, ///< HTTPS with `server_dns` (SAN DNS:localhost only)
};

/// A running nginx. Construction writes the prefix, starts nginx and waits
/// until every port accepts; destruction stops it.
class nginx_instance {
public:
  /// The body of /v1/items.json.
  static const std::string items_body;
  /// The body of /v1/chunked.json (about 20 KB of JSON).
  static std::string chunked_body();
  /// The body of /v1/big.json and friends: exactly 65536 bytes of JSON.
  static std::string big_body();

  /// Starts `nginx_binary` with its prefix in `prefix_dir` (which must exist
  /// and be empty), using the certificates of `pki`; the redirect route
  /// points to 127.0.0.1:`redirect_port`. Picks free ports itself (and tries
  /// again with new ones if nginx cannot bind). Throws std::runtime_error with
  /// nginx's error log if nginx does not come up within 10 s.
  /// `upstream_port` > 0 adds the hub proxy routes (see above). [0]
  nginx_instance(const std::string& nginx_binary, const std::string& prefix_dir,
                 const test_pki& pki, uint16_t redirect_port,
                 uint16_t upstream_port = 0);
  ~nginx_instance();

  nginx_instance(const nginx_instance&) = delete;
  nginx_instance& operator=(const nginx_instance&) = delete;

  /// Port of a listener.
  uint16_t port(nginx_listener l) const;

  /// `http://127.0.0.1:<port>` or `https://127.0.0.1:<port>`.
  std::string base_url(nginx_listener l) const;

  /// Every access-log entry so far, in order.
  std::vector<access_entry> access_log() const;

  /// The entries carrying x-request-id `id`. Waits up to `wait` until at
  /// least `at_least` are there (nginx logs a request after answering it,
  /// so a client can see the answer before the line is written), then
  /// another 50 ms for stragglers.
  std::vector<access_entry>
  requests_with_id(const std::string& id, std::size_t at_least = 1,
                   std::chrono::milliseconds wait
                   = std::chrono::milliseconds{2000}) const;

  /// The error log's text (for failure messages).
  std::string error_log() const;

  /// Stops nginx (SIGQUIT, then SIGKILL after 5 s) and reaps it; idempotent.
  void stop();

private:
  bool try_start(const std::string& nginx_binary, const test_pki& pki,
                 uint16_t redirect_port, std::string& why);

  std::string prefix_;
  pid_t pid_ = -1;
  uint16_t http_ = 0, tls_ = 0, mtls_ = 0, tls_dns_ = 0;
};

/// Connects to 127.0.0.1:`port`, sends `request` verbatim and returns every
/// byte until the server closes (or 5 s pass). For checking what a server
/// really puts on the wire (e.g. that a response is chunked).
std::string raw_http_exchange(uint16_t port, const std::string& request);

} // namespace outbound::testing
