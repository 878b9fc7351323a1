#include "actors/client/service_client.hpp"

#include "actors/call/call_actor.hpp"
#include "actors/call/retry_state.hpp"
#include "actors/handler_guard.hpp"
#include "actors/pool/connection_pool.hpp"

#include <caf/actor_cast.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <algorithm>
#include <random>
#include <vector>

namespace outbound {

namespace {

struct service_client_state {
  std::shared_ptr<const call_context> ctx;
  /// Seeds each call actor's own generator.
  call_rng rng;
  /// Set once the transport (the connection pool) terminated: its exit
  /// reason. Every later call fails at once with it.
  std::optional<std::string> transport_down;
  /// The call actors spawned so far that may still run, so that the
  /// transport's down message reaches them. The client monitors the
  /// transport once and forwards; a call actor does not monitor it itself:
  /// in CAF 0.17 every monitor is an entry in the monitored actor's
  /// attachable list and demonitor walks that list, so one monitor per call
  /// costs O(calls in flight) at each call's end — quadratic under
  /// overload, where a backlog of thousands of calls left the worker
  /// spending ~90 % of its time in demonitor.
  std::vector<caf::weak_actor_ptr> calls;
  /// calls is swept of finished actors when it reaches this size; the sweep
  /// sets it to twice what is left (at least 1024): amortised O(1) a call.
  std::size_t sweep_at = 1024;

  static inline const char* name = "outbound.service_client";
};

service_client_actor::behavior_type
service_client_impl(service_client_actor::stateful_pointer<service_client_state> self,
                    std::shared_ptr<const call_context> ctx, uint64_t seed) {
  self->state.ctx = std::move(ctx);
  self->state.rng.seed(seed);
  // The client depends on its pool: once the pool is gone no call can
  // succeed, so calls fail at once (the call actors in flight see the same
  // down message and fail theirs) instead of each waiting its budget.
  self->monitor(self->state.ctx->transport);
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    if (dm.source != st.ctx->transport.address())
      return;
    st.transport_down = self->system().render(dm.reason);
    // Each call actor in flight handles it as its own down message.
    for (auto& w : st.calls)
      if (auto strong = w.lock())
        caf::anon_send(caf::actor_cast<caf::actor>(strong), dm);
    st.calls.clear();
  });
  return {
    [self](call_request& req) -> caf::result<call_outcome> {
      auto& st = self->state;
      auto fail = [](call_error e) {
        call_outcome o;
        o.ok = false;
        o.error = std::move(e);
        return caf::result<call_outcome>{std::move(o)};
      };
      if (st.transport_down) {
        call_error e;
        e.kind = error_kind::service_unavailable;
        e.cause = transport_error_kind::interrupted;
        e.detail = "connection pool terminated: " + *st.transport_down;
        e.nothing_sent = true;
        return fail(std::move(e));
      }
      return guarded(
        "service client",
        [&]() -> caf::result<call_outcome> {
          auto call = spawn_call_actor(self->system(), st.ctx, st.rng());
          st.calls.push_back(caf::actor_cast<caf::weak_actor_ptr>(call));
          if (st.calls.size() >= st.sweep_at) {
            auto& v = st.calls;
            v.erase(std::remove_if(v.begin(), v.end(),
                                   [](const caf::weak_actor_ptr& w) {
                                     return w.lock() == nullptr;
                                   }),
                    v.end());
            st.sweep_at = std::max<std::size_t>(1024, 2 * v.size());
          }
          // The call actor answers the original requester directly.
          return self->delegate(call, std::move(req));
        },
        [&](call_error e) {
          e.nothing_sent = true;
          return fail(std::move(e));
        });
    },
    [self](hedging_handles_request) -> hedging_handles {
      const auto& h = self->state.ctx->hedging;
      if (!h)
        return {};
      return {h->stats, h->breakers};
    },
  };
}

} // namespace

bool idempotent_by_default(const std::string& method) {
  return method_is_idempotent(method);
}

service_client_actor make_service_client(caf::actor_system& sys,
                                         client_config cfg,
                                         client_options opts) {
  cfg.validate();
  if (opts.hedging)
    opts.hedging->config.validate();
  auto ctx = std::make_shared<call_context>();
  ctx->url = cfg.parsed_url();
  ctx->transport = opts.transport ? opts.transport
                                  : spawn_connection_pool(sys, cfg, opts.io);
  ctx->observer = opts.observer;
  if (opts.hedging)
    ctx->hedging = make_hedging_context(sys, *opts.hedging);
  if (opts.wall_clock)
    ctx->wall_clock = std::move(opts.wall_clock);
  else
    ctx->wall_clock = [] { return std::chrono::system_clock::now(); };
  ctx->cfg = std::move(cfg);
  uint64_t seed = opts.seed != 0 ? opts.seed : core::entropy_seed();
  return sys.spawn(service_client_impl,
                   std::shared_ptr<const call_context>{std::move(ctx)}, seed);
}

} // namespace outbound
