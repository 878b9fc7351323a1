#include "metrics/metrics_exposer.hpp"

#include "config/config_error.hpp"
#include "metrics/outbound_metrics.hpp"

#include <prometheus/exposer.h>

#include <exception>

namespace outbound {

metrics_exposer::metrics_exposer(std::shared_ptr<metrics_registry> registry,
                                 uint16_t port, std::string address)
  : registry_(std::move(registry)), address_(std::move(address)) {
  if (!registry_)
    throw config_error("metrics.registry", "no registry");
  auto bind = address_ + ":" + std::to_string(port);
  try {
    // One worker thread: a scrape every few seconds needs no more.
    exposer_ = std::make_unique<prometheus::Exposer>(bind, 1);
  } catch (const std::exception& e) {
    throw config_error("metrics.port",
                       "cannot listen on " + bind + ": " + e.what());
  }
  auto ports = exposer_->GetListeningPorts();
  if (ports.empty() || ports.front() <= 0 || ports.front() > 65535)
    throw config_error("metrics.port", "no listening port on " + bind);
  port_ = static_cast<uint16_t>(ports.front());
  for (auto& c : registry_->collectables())
    exposer_->RegisterCollectable(c);
}

metrics_exposer::~metrics_exposer() = default;

std::string metrics_exposer::url() const {
  return "http://" + address_ + ":" + std::to_string(port_) + "/metrics";
}

} // namespace outbound
