#pragma once

// An observer actor that turns client_events into Prometheus metrics and
// optionally forwards every event to a downstream observer (e.g. the CLI's
// --verbose printer), so one client can feed both.

#include "actors/observer.hpp"

#include <caf/actor_system.hpp>

#include <memory>

namespace outbound {
inline namespace metrics {
class client_metrics;

/// Spawns an observer that calls `metrics->record(ev)` for every event and
/// then forwards the event to `next` (if set). The actor keeps `metrics`
/// alive.
observer_actor spawn_metrics_observer(caf::actor_system& sys,
                                      std::shared_ptr<client_metrics> metrics,
                                      observer_actor next = {});

} // namespace metrics
} // namespace outbound
