#pragma once

// A TCP fault proxy for integration tests: each link listens on 127.0.0.1
// (a free port) and forwards every accepted connection to one upstream
// host:port, byte for byte, in both directions. The test thread switches a
// link's mode at any time; the switch has taken effect when the call
// returns. The modes are Toxiproxy's basic toxics
// (https://github.com/Shopify/toxiproxy, "reset_peer", "timeout",
// "latency"), in-process because Toxiproxy is not packaged here:
//
//   pass       forward every chunk at once (the default).
//   cut        reset every open connection of the link (SO_LINGER 0, so the
//              peers see RST) and reset every new one as soon as it is
//              accepted: a refused connect, seen from the client. The
//              listener stays open: a closed one frees its port, and a
//              client that keeps connecting to a free port in the
//              ephemeral range may get it as its own source port and
//              connect to itself (TCP simultaneous open), which holds the
//              port and turns the client's requests into its responses.
//   blackhole  keep every socket open and forward nothing: a chunk read on
//              either side is parked (no further reads on that side, so the
//              kernel's buffers fill as on a silent network) until the mode
//              changes; new connections are accepted and stall the same
//              way. The parked chunks are forwarded on `heal`, as TCP
//              retransmission would deliver them after a partition heals.
//   delay(ms)  forward each chunk `ms` milliseconds after it was read
//              (one chunk at a time per direction).
//   heal       = pass.
//
// One io thread (Boost.Asio) runs every link. Not copyable; the destructor
// closes every socket and joins the thread.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace outbound::testing {

class fault_proxy {
public:
  /// Starts the io thread (no links yet).
  fault_proxy();

  /// Closes every listener and connection and joins the io thread.
  ~fault_proxy();

  fault_proxy(const fault_proxy&) = delete;
  fault_proxy& operator=(const fault_proxy&) = delete;

  /// Adds a link forwarding to `upstream_host`:`upstream_port` (an IPv4
  /// address or a name the resolver knows) in mode `pass`; returns its
  /// index (0, 1, ...). Throws std::runtime_error when no port can be
  /// bound.
  std::size_t add_link(const std::string& upstream_host,
                       uint16_t upstream_port);

  /// The port link `link` listens on (127.0.0.1).
  uint16_t port(std::size_t link) const;

  /// Mode switches of link `link` (see the file comment).
  void pass(std::size_t link);
  void cut(std::size_t link);
  void blackhole(std::size_t link);
  void delay(std::size_t link, std::chrono::milliseconds ms);
  void heal(std::size_t link);

  /// Connections of link `link` accepted so far (all modes).
  std::size_t accepted(std::size_t link) const;

  /// Bytes link `link` forwarded so far (both directions).
  std::size_t forwarded_bytes(std::size_t link) const;

  struct impl;

private:
  std::unique_ptr<impl> impl_;
};

} // namespace outbound::testing
