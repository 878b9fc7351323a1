#include "actors/call/detail/hedging_context.hpp"

#include "config/config_error.hpp"

#include <caf/actor_cast.hpp>
#include <caf/send.hpp>

namespace outbound {
inline namespace call {

const effective_hedge_config&
hedging_context::config_for(const route_result& r) const {
  if (r.entry) {
    auto i = endpoint_configs.find(r.entry->name);
    if (i != endpoint_configs.end())
      return i->second;
  }
  return host_config;
}

std::shared_ptr<const hedging_context>
make_hedging_context(caf::actor_system& sys, const hedging_options& opts) {
  opts.config.validate();
  // Every route is a key of the stats and of the endpoint breakers, and
  // the host one more: with fewer, the client's own keys evict each other
  // and never leave warmup nor reach a breaker's min_samples.
  const auto needed = opts.routes.entries().size() + 1;
  if (opts.config.max_keys < needed)
    throw config_error("hedge.max_keys",
                       "must be at least the routes registered + 1 ("
                         + std::to_string(needed) + "), got "
                         + std::to_string(opts.config.max_keys));
  auto ctx = std::make_shared<hedging_context>();
  ctx->config = opts.config;
  ctx->routes = opts.routes;
  ctx->host_config = resolve(opts.config);
  for (const auto& e : opts.routes.entries())
    ctx->endpoint_configs.emplace(e.name, resolve(opts.config, e.config));
  endpoint_stats_persistence persistence;
  if (!opts.snapshot_file.empty()) {
    persistence.initial = read_hedge_snapshot_file(opts.snapshot_file);
    if (persistence.initial) {
      try {
        check_hedge_snapshot(opts.config, *persistence.initial);
      } catch (const config_error& e) {
        throw config_error("hedging.snapshot_file",
                           opts.snapshot_file + ": " + e.what());
      }
    }
    persistence.save_file = opts.snapshot_file;
  }
  ctx->stats = spawn_endpoint_stats(sys, opts.config, std::move(persistence));
  ctx->breakers = spawn_breaker(sys, opts.config);
  if (opts.hooks) {
    caf::anon_send(ctx->stats, hedge_subscribe{opts.hooks});
    caf::anon_send(ctx->breakers, hedge_subscribe{opts.hooks});
  }
  return ctx;
}

bool hedge_eligible(const std::string& method, bool has_body,
                    const std::optional<bool>& idempotent,
                    bool has_idempotency_key) {
  // A hedge sends the request twice: never for a call marked
  // non-idempotent, whatever its method or key.
  if (idempotent && !*idempotent)
    return false;
  return has_idempotency_key || is_hedgeable(method, has_body);
}

} // namespace call
} // namespace outbound
