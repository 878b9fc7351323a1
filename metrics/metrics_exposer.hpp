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
// (metrics_exposer_limits::header_timeout) and a keep-alive idle limit,
// and at the connection cap the oldest idle connection is closed to make
// room, the way nginx reuses keep-alive connections when it runs out
// (https://nginx.org/en/docs/ngx_core_module.html#worker_connections).
//
//   accept ──► read header ──► answer ──► keep-alive? ──yes──► idle ─┐
//               (deadline)      (write    │                 (idle    │
//                  ▲            deadline) no                limit)   │
//                  │                      ▼                          │
//                  │                    close                        │
//                  └──────────────── first byte ◄────────────────────┘
//
// Asio and Beast stay in metrics_exposer.cpp.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace outbound {

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
  /// Connections open at once. A connection accepted at the cap closes the
  /// oldest one waiting for a request (idle or with a partial header);
  /// when every connection is busy answering, it is closed at once.
  /// (>= 1) [128]
  std::size_t max_connections = 128;
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
/// | outbound_metrics_connections_closed_total | counter | reason | connections closed without an answer: `header_timeout`, `idle_timeout`, `write_timeout`, `evicted` (the oldest waiting one, at the cap), `refused` (at the cap, every connection answering) |
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

} // namespace outbound
