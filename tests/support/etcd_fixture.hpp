#pragma once

// A real etcd for integration tests (Debian 12's etcd-server 3.4.23): one
// member started by the test as a child process on 127.0.0.1, with free
// client and peer ports and a data directory in a temporary directory that
// is removed on teardown. etcd's own defaults are kept (heartbeat 100 ms,
// election timeout 1000 ms, --max-txn-ops 128), so what the tests pin is
// what a default deployment does; only the URLs, the data directory and the
// logger (zap, into a file of the temporary directory) are set.
//
// Flags (etcd 3.4 "Configuration flags",
// https://etcd.io/docs/v3.4/op-guide/configuration/):
//
//   --name outbound-test --data-dir <tmp>/data
//   --listen-client-urls / --advertise-client-urls  http://127.0.0.1:<client>
//   --listen-peer-urls / --initial-advertise-peer-urls http://127.0.0.1:<peer>
//   --initial-cluster outbound-test=http://127.0.0.1:<peer>
//   --initial-cluster-state new --logger zap --log-outputs stderr
//
// The JSON gRPC gateway is served on the client URL under /v3/ (etcd 3.4
// "gRPC gateway", https://etcd.io/docs/v3.4/dev-guide/api_grpc_gateway/).

#include "tests/support/test_certs.hpp" // temp_dir

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace outbound::testing {

/// The etcd binary: `$OUTBOUND_ETCD` when set, else `etcd` on $PATH, else
/// /usr/bin/etcd; empty when there is none.
std::string find_etcd();

/// A running single-member etcd. Construction starts it and waits until
/// GET /health answers {"health":"true"} (the member has a leader and
/// serves reads); destruction stops it (SIGTERM, SIGKILL after 5 s) and
/// removes its data directory.
class etcd_instance {
public:
  /// Starts `etcd_binary`. Picks free ports itself and tries again with new
  /// ones (up to 3 times) when etcd exits early, e.g. because another
  /// process took a port. Throws std::runtime_error with the tail of etcd's
  /// log when it does not become healthy within 20 s.
  explicit etcd_instance(const std::string& etcd_binary);
  ~etcd_instance();

  etcd_instance(const etcd_instance&) = delete;
  etcd_instance& operator=(const etcd_instance&) = delete;

  uint16_t client_port() const {
    return client_;
  }

  uint16_t peer_port() const {
    return peer_;
  }

  /// etcd's process id (-1 once stopped): for fault tests that pause the
  /// store with SIGSTOP / SIGCONT. A test that stops it must continue it
  /// before `stop`.
  pid_t pid() const {
    return pid_;
  }

  /// `http://127.0.0.1:<client port>` (the gateway is under /v3/).
  std::string base_url() const;

  /// The member's data directory (inside the temporary directory).
  std::string data_dir() const;

  /// etcd's log so far (stdout and stderr), for failure messages.
  std::string log() const;

  /// Stops etcd and reaps it; idempotent.
  void stop();

private:
  bool try_start(const std::string& etcd_binary, std::string& why);
  bool healthy() const;

  temp_dir dir_;
  pid_t pid_ = -1;
  uint16_t client_ = 0;
  uint16_t peer_ = 0;
};

/// `bytes` in standard base64 with padding (RFC 4648 section 4), the
/// encoding of etcd's `bytes` fields (keys, values, range ends) in the
/// gateway's JSON (proto3 JSON mapping).
std::string base64_encode(std::string_view bytes);

/// The bytes of standard base64 `text`. Throws std::invalid_argument for
/// text that is not padded standard base64.
std::string base64_decode(std::string_view text);

/// The range end that selects every key starting with `prefix`, as etcd's
/// clientv3's getPrefix (clientv3/op.go in etcd 3.4): the prefix with its last
/// byte below 0xff incremented and the bytes after it dropped; "\0" (every
/// key) when all bytes are 0xff or the prefix is empty.
std::string prefix_range_end(std::string prefix);

/// Starts etcd for a test suite (SetUpTestSuite): the instance, or nullptr
/// with `error` saying why (no binary: install etcd-server or set
/// OUTBOUND_ETCD; or it would not start). The tests then fail with
/// `error`: a missing etcd is never a skip.
std::unique_ptr<etcd_instance> start_suite_etcd(std::string& error);

} // namespace outbound::testing
