#pragma once

// One `GET /metrics` listener per process, on Boost.Beast: one io thread,
// asynchronous accept, one asynchronous session per connection. It serves
// a metrics_registry's collectables in the Prometheus text format 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/), written
// by prometheus-cpp's own TextSerializer.
//
// Why not prometheus-cpp's civetweb Exposer: it has a fixed pool of
// workers that each wait up to 30 s for a request, so a few idle TCP
// connections hold back every scrape for longer than Prometheus waits
// (10 s by default). Here a connection costs a socket and a pending read,
// never a thread: every connection has a deadline for its request header
// (metrics_exposer_limits::header_timeout), a keep-alive idle limit and a
// write deadline, and at the connection cap the connection that has been
// stuck longest is closed to make room: the one waiting longest for a
// request, or the one whose response has made no progress for longest (a
// client that pipelines requests and never reads its answers). That is
// nginx's reuse of keep-alive connections when it runs out
// (https://nginx.org/en/docs/ngx_core_module.html#worker_connections),
// extended to writes: a scrape whose answer nobody reads is not worth a
// slot. A connection that pipelines more than max_pipelined_requests
// requests in a row is closed too (RFC 9112 §9.3.2: the client resends
// what was not answered), and requests pipelined together are answered
// from one serialisation of the registry -- those whose headers had all
// arrived when it was taken; a pipelined request whose header completes
// later gets a serialisation no older than its header. A connection closed
// in the middle of a write is reset, so its queued answer does not linger
// in the kernel.
//
//   accept ──► read header ──► answer ──► keep-alive? ──yes──► idle ─┐
//               (deadline)      (write    │      │          (idle    │
//                  ▲            deadline) no     └─ more than the    │
//                  │                      ▼        pipelining cap    │
//                  │                    close ◄────────┘             │
//                  └──────────────── first byte ◄────────────────────┘
//
// Asio and Beast stay in metrics_exposer.cpp.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace outbound {
inline namespace metrics {

class metrics_registry;

/// Limits of the `/metrics` listener. Checked by the metrics_exposer
/// constructor: a bad value is a config_error naming `metrics.<field>`.
struct metrics_exposer_limits {
  /// Seconds a connection has to deliver a complete request header,
  /// counted from accept, or from the first byte of a request on a
  /// keep-alive connection. A client that sends nothing or half a header
  /// is disconnected when it runs out. (0, 86400] [5]
  double header_timeout = 5.0;
  /// Seconds a keep-alive connection may wait, between requests, for the
  /// first byte of the next one. (0, 86400] [75, nginx's
  /// keepalive_timeout]
  double idle_timeout = 75.0;
  /// Seconds a response may take to be written (a client that does not
  /// read is disconnected). (0, 86400] [10, Prometheus's default scrape
  /// timeout]
  double write_timeout = 10.0;
  /// Connections open at once. A connection accepted at the cap closes
  /// the open connection stuck longest: waiting for a request (idle, or a
  /// header still incomplete) since longest, or writing a response that
  /// has made no progress since longest (a client that does not read) --
  /// a writing one only once stalled for min_write_stall. With nothing to
  /// close, the new connection is refused. (>= 1) [128]
  std::size_t max_connections = 128;
  /// Seconds a response being written must have made no progress (the
  /// client took none of it) before the connection may be closed to make
  /// room at the cap: a scrape whose answer is flowing, however slowly,
  /// keeps its slot. (0, 86400] [1]
  double min_write_stall = 1.0;
  /// Requests a connection may pipeline in a row: a request already
  /// received when the answer to the one before it is written counts as
  /// pipelined; one more than this closes the connection after that
  /// answer, leaving the rest unanswered (RFC 9112 §9.3.2). 0 closes a
  /// connection at its first pipelined request. [16; Prometheus does not
  /// pipeline]
  std::size_t max_pipelined_requests = 16;
};

/// Serves `GET /metrics` and `HEAD /metrics` (Prometheus text format
/// 0.0.4, `Content-Type: text/plain; version=0.0.4; charset=utf-8`) for a
/// registry on `address:port`, over HTTP/1.1 with keep-alive. Other paths
/// answer 404, other methods on `/metrics` 405. One io thread, owned by
/// the exposer; each scrape serialises the registry on that thread.
///
/// The listener adds one family to the registry, so that clients that
/// hold connections without using them show on the scrape:
///
/// | metric | type | labels | counts |
/// |--------|------|--------|--------|
/// | outbound_metrics_connections_closed_total | counter | reason | connections closed without an answer (to some request): `header_timeout`, `idle_timeout`, `write_timeout`, `evicted` (at the cap, the one waiting for a request since longest), `evicted_unread` (at the cap, the one whose response made no progress since longest, for at least min_write_stall), `pipeline_limit` (more than max_pipelined_requests in a row), `refused` (at the cap with nothing to close: every open connection is writing a response that made progress within min_write_stall) |
class metrics_exposer {
public:
  /// Binds `address:port` (port 0: the system picks one; see port()) and
  /// serves the collectables of `registry`, which the exposer keeps alive.
  /// `address` is a numeric IPv4 address [127.0.0.1: loopback only].
  /// Throws config_error naming `metrics.port` when the listener cannot be
  /// bound (port in use, bad address), `metrics.registry` without a
  /// registry, and `metrics.<field>` for a bad value in `limits`.
  explicit metrics_exposer(std::shared_ptr<metrics_registry> registry,
                           uint16_t port = 0,
                           std::string address = "127.0.0.1",
                           metrics_exposer_limits limits = {});

  /// Closes the listener and every connection (a response being written is
  /// cut off) and joins the io thread; returns within milliseconds.
  ~metrics_exposer();

  metrics_exposer(const metrics_exposer&) = delete;
  metrics_exposer& operator=(const metrics_exposer&) = delete;

  /// The bound port (the one picked by the system when constructed with 0).
  uint16_t port() const {
    return port_;
  }

  /// "http://<address>:<port>/metrics".
  std::string url() const;

private:
  struct server;

  std::shared_ptr<metrics_registry> registry_;
  std::string address_;
  uint16_t port_ = 0;
  std::unique_ptr<server> server_;
};

} // namespace metrics
} // namespace outbound
