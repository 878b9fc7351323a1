#pragma once

// One `GET /metrics` listener per process (issue 6, "Metrics"): a thin
// wrapper over prometheus-cpp's civetweb Exposer serving a
// metrics_registry's collectables. Keep one per process: the Exposer takes
// about 2 s to shut down once it has served a request (TOOLCHAIN.md).

#include <cstdint>
#include <memory>
#include <string>

namespace prometheus {
class Exposer;
} // namespace prometheus

namespace outbound {

class metrics_registry;

/// Serves `GET /metrics` (Prometheus text format 0.0.4) for a registry on
/// `address:port`.
class metrics_exposer {
public:
  /// Binds `address:port` (port 0: the system picks one; see port()) and
  /// serves the collectables of `registry`, which the exposer keeps alive.
  /// `address` is a numeric IPv4 address [127.0.0.1: loopback only].
  /// Throws config_error naming `metrics.port` when the listener cannot be
  /// bound (port in use, bad address).
  explicit metrics_exposer(std::shared_ptr<metrics_registry> registry,
                           uint16_t port = 0,
                           std::string address = "127.0.0.1");

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
  std::shared_ptr<metrics_registry> registry_;
  std::string address_;
  uint16_t port_ = 0;
  std::unique_ptr<prometheus::Exposer> exposer_;
};

} // namespace outbound
