#include "actors/metrics/metrics_observer.hpp"

#include "metrics/client_metrics.hpp"

#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <caf/typed_event_based_actor.hpp>

namespace outbound {
inline namespace metrics {

observer_actor spawn_metrics_observer(caf::actor_system& sys,
                                      std::shared_ptr<client_metrics> metrics,
                                      observer_actor next) {
  return sys.spawn([metrics, next](observer_actor::pointer self)
                     -> observer_actor::behavior_type {
    return {
      [=](const client_event& ev) {
        metrics->record(ev);
        if (next)
          self->send(next, ev);
      },
    };
  });
}

} // namespace metrics
} // namespace outbound
