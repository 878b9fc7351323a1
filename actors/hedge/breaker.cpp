#include "actors/hedge/detail/hedge_actors.hpp"

#include "actors/handler_guard.hpp"

#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <algorithm>
#include <optional>
#include <vector>

namespace outbound {
inline namespace hedge {

namespace {

struct breaker_actor_state {
  std::optional<breaker_registry> registry;
  std::vector<hedge_hook_actor> subscribers;
};

using self_ptr = breaker_impl_actor::stateful_pointer<breaker_actor_state>;

/// One circuit_opened per OPEN transition, to every subscriber.
void announce(self_ptr self, const breaker_changes& c,
              const std::string& host_key, const std::string& endpoint_key) {
  for (auto& s : self->state.subscribers) {
    if (c.host == breaker_transition::opened)
      self->send(s, circuit_opened{breaker_scope::host, host_key});
    if (c.endpoint == breaker_transition::opened)
      self->send(s, circuit_opened{breaker_scope::endpoint, endpoint_key});
  }
}

breaker_impl_actor::behavior_type breaker_impl(self_ptr self,
                                               hedge_config cfg) {
  self->state.registry.emplace(cfg);
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& subs = self->state.subscribers;
    subs.erase(std::remove_if(subs.begin(), subs.end(),
                              [&](const hedge_hook_actor& s) {
                                return s.address() == dm.source;
                              }),
               subs.end());
  });
  // Every handler is guarded (actors/handler_guard.hpp): a breaker can
  // throw on a per-endpoint configuration it cannot hold or on allocation;
  // the requester gets an error (a hedge is then not sent), every other
  // breaker keeps its state, and the actor serves the next call.
  static const std::string where = "breakers";
  return {
    [self](breaker_allow_request& r) {
      // allow_hedge only ever half-opens a breaker: nothing to announce.
      return guarded_result(where, [&] {
        return self->state.registry->allow_hedge(r.host_key, r.endpoint_key,
                                                 r.endpoint_breaker,
                                                 self->clock().now());
      });
    },
    [self](breaker_record& r) {
      guarded_void([&] {
        auto c = self->state.registry->record(r.host_key, r.endpoint_key,
                                              r.endpoint_breaker, r.health,
                                              self->clock().now());
        announce(self, c, r.host_key, r.endpoint_key);
      });
    },
    [self](breaker_complete& r) {
      guarded_void([&] {
        auto c = self->state.registry->complete(r.permit, r.health,
                                                self->clock().now());
        announce(self, c, r.permit.host_key, r.permit.endpoint_key);
      });
    },
    [self](breaker_release& r) {
      guarded_void([&] { self->state.registry->release(r.permit); });
    },
    [self](breaker_snapshot_request& r) {
      return guarded_result(where, [&] {
        return breaker_snapshot_reply{self->state.registry->snapshot(
          r.scope, r.key, self->clock().now())};
      });
    },
    [self](breaker_all_request&) {
      return guarded_result(where, [&] {
        return breaker_all_reply{
          self->state.registry->all_snapshots(self->clock().now())};
      });
    },
    [self](hedge_subscribe& s) {
      guarded_void([&] {
        if (!s.subscriber)
          return;
        self->monitor(s.subscriber);
        self->state.subscribers.push_back(std::move(s.subscriber));
      });
    },
  };
}

} // namespace

breaker_impl_actor spawn_breaker(caf::actor_system& sys,
                                 const hedge_config& cfg) {
  cfg.validate();
  return sys.spawn(breaker_impl, cfg);
}

} // namespace hedge
} // namespace outbound
