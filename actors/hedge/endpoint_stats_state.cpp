#include "actors/hedge/endpoint_stats_state.hpp"

#include "actors/hedge/delay_rule.hpp"
#include "config/config_error.hpp"

#include <algorithm>
#include <cmath>

namespace outbound {
inline namespace hedge {

namespace {

const hedge_config& validated(const hedge_config& cfg) {
  cfg.validate();
  return cfg;
}

} // namespace

endpoint_stats_state::key_state::key_state(const effective_hedge_config& c,
                                           hedge_time now)
  : cfg(c),
    sketch(c.window_duration, now),
    rate(c.rps_window, now),
    bucket(c.estimated_rps ? *c.estimated_rps : rps_seed, c.budget_percent,
           now) {
}

endpoint_stats_state::endpoint_stats_state(const hedge_config& defaults)
  : defaults_(validated(defaults)), keys_(defaults.max_keys) {
}

hedge_plan endpoint_stats_state::plan(const std::string& key,
                                      const effective_hedge_config& cfg,
                                      hedge_time now) {
  bool created = false;
  auto& k = keys_.get_or_create(key, [&] {
    created = true;
    return key_state{cfg, now};
  });
  k.cfg = cfg;
  if (created && !imported_.empty()) {
    if (auto i = imported_.find(key); i != imported_.end()) {
      // Its window started at the import: aged out after two windows.
      if (seconds_between(imported_at_, now) < 2.0 * cfg.window_duration)
        seed(k, std::move(i->second), imported_at_);
      imported_.erase(i);
    }
  }
  ++k.stats.total_requests;
  ++global_.total_requests;
  ++k.seen;
  if (cfg.estimated_rps) {
    k.bucket.set_budget_percent(cfg.budget_percent, *cfg.estimated_rps, now);
  } else {
    k.rate.record(now);
    k.bucket.set_budget_percent(cfg.budget_percent, k.rate.rps(now), now);
  }
  auto p = delay_of(k, cfg, k.seen, now);
  if (p.warmup) {
    ++k.stats.warmup_requests;
    ++global_.warmup_requests;
  }
  return p;
}

hedge_plan endpoint_stats_state::delay_of(key_state& k,
                                          const effective_hedge_config& cfg,
                                          uint64_t seen, hedge_time now) {
  hedge_plan p;
  if (cfg.hedge_delay) {
    p.delay = *cfg.hedge_delay;
    p.hardcoded = true;
  } else if (seen <= static_cast<uint64_t>(cfg.warmup_requests)) {
    p.delay = cfg.warmup_delay;
    p.warmup = true;
  } else {
    std::optional<double> q;
    double learned = 0.0;
    if (cfg.delay_search) {
      delay_search search;
      search.max_share = std::min(1.5 * (1.0 - cfg.percentile),
                                  0.75 * cfg.budget_percent / 100.0);
      if (auto c
          = choose_hedge_delay(k.sketch.merged(now), cfg.percentile, search)) {
        q = c->delay;
        learned = c->quantile;
      }
    } else {
      q = k.sketch.quantile(cfg.percentile, now);
      learned = q.value_or(0.0);
    }
    if (q && *q > 0.0 && std::isfinite(*q)) {
      p.delay = *q;
      p.learned = std::isfinite(learned) && learned > 0.0 ? learned : 0.0;
    } else {
      p.delay = cfg.warmup_delay;
      p.warmup = true;
    }
  }
  p.delay = std::max(p.delay, cfg.min_delay);
  return p;
}

bool endpoint_stats_state::try_take_token(const std::string& key,
                                          hedge_time now) {
  auto* k = keys_.touch(key);
  if (!k)
    return false;
  if (k->bucket.try_take(now))
    return true; // counted by hedge_sent, once the hedge is out

  ++k->stats.budget_exhausted;
  ++global_.budget_exhausted;
  return false;
}

void endpoint_stats_state::hedge_sent(const std::string& key) {
  ++global_.hedged_requests;
  if (auto* k = keys_.peek(key))
    ++k->stats.hedged_requests;
}

void endpoint_stats_state::return_token(const std::string& key) {
  if (auto* k = keys_.peek(key))
    k->bucket.give_back();
}

void endpoint_stats_state::count_circuit_blocked(const std::string& key) {
  ++global_.circuit_blocked;
  if (auto* k = keys_.peek(key))
    ++k->stats.circuit_blocked;
}

bool endpoint_stats_state::observe(const std::string& key, double latency,
                                   call_health h, hedge_time now) {
  auto* k = keys_.touch(key);
  if (!k)
    return false;
  k->sketch.insert(latency, now);
  if (is_failure(h, k->cfg.breaker.treat_5xx_as_failure)) {
    ++k->stats.errors;
    ++global_.errors;
  }
  return true;
}

void endpoint_stats_state::record_race(const std::string& key, bool hedged,
                                       bool hedge_won) {
  if (!hedged)
    return;
  auto* k = keys_.peek(key);
  auto& w = hedge_won ? global_.hedge_wins : global_.primary_wins;
  ++w;
  if (k)
    ++(hedge_won ? k->stats.hedge_wins : k->stats.primary_wins);
}

std::optional<double>
endpoint_stats_state::latency_quantile(const std::string& key, double q,
                                       hedge_time now) {
  auto* k = keys_.peek(key);
  if (!k)
    return std::nullopt;
  return k->sketch.quantile(q, now);
}

std::optional<hedge_stats_snapshot>
endpoint_stats_state::snapshot(const std::string& key) const {
  auto* k = keys_.peek(key);
  if (!k)
    return std::nullopt;
  return k->stats;
}

std::vector<std::pair<std::string, hedge_stats_snapshot>>
endpoint_stats_state::all_snapshots() const {
  std::vector<std::pair<std::string, hedge_stats_snapshot>> out;
  out.reserve(keys_.size());
  for (auto& [key, k] : keys_.entries())
    out.emplace_back(key, k.stats);
  return out;
}

std::vector<hedge_key_metrics>
endpoint_stats_state::all_metrics(hedge_time now) {
  std::vector<hedge_key_metrics> out;
  out.reserve(keys_.size());
  std::vector<std::string> keys;
  for (auto& entry : keys_.entries())
    keys.push_back(entry.first);
  for (auto& key : keys) {
    auto* k = keys_.peek(key);
    hedge_key_metrics m;
    m.key = key;
    m.stats = k->stats;
    m.tokens = k->bucket.tokens(now);
    m.delay = delay_of(*k, k->cfg, k->seen + 1, now).delay;
    out.push_back(std::move(m));
  }
  return out;
}

void endpoint_stats_state::seed(key_state& k, ddsketch sketch, hedge_time now) {
  k.sketch.reset_to(std::move(sketch), now);
  // Warm: the next request is past the warm-up count, so it plans with the
  // sketch's percentile.
  k.seen = std::max<uint64_t>(
    k.seen, static_cast<uint64_t>(std::max(k.cfg.warmup_requests, 0)));
}

hedge_snapshot endpoint_stats_state::export_snapshot(hedge_time now) {
  // What import_snapshot accepts: at most max_keys keys, none too long
  // (the tracked keys and the ones set aside may add up to twice
  // max_keys, and a route's name has no length limit of its own).
  hedge_snapshot out;
  auto fits = [&](const std::string& key) {
    return out.keys.size() < defaults_.max_keys
           && key.size() <= hedge_snapshot_max_key_bytes;
  };
  std::vector<std::string> keys;
  for (auto& entry : keys_.entries())
    keys.push_back(entry.first);
  for (auto& key : keys) {
    if (!fits(key))
      continue;
    auto merged = keys_.peek(key)->sketch.merged(now);
    if (merged.count() == 0)
      continue;
    out.keys.push_back({key, to_sketch_data(merged)});
  }
  if (seconds_between(imported_at_, now) >= 2.0 * defaults_.window_duration)
    return out; // what was set aside has aged out
  std::vector<std::string> pending;
  for (auto& entry : imported_)
    pending.push_back(entry.first);
  std::sort(pending.begin(), pending.end());
  for (auto& key : pending)
    if (fits(key))
      out.keys.push_back({key, to_sketch_data(imported_.at(key))});
  return out;
}

std::size_t endpoint_stats_state::import_snapshot(const hedge_snapshot& s,
                                                  hedge_time now) {
  if (s.version != hedge_snapshot_version)
    throw config_error("version", std::to_string(s.version)
                                    + " is not the supported "
                                    + std::to_string(hedge_snapshot_version));
  if (s.keys.size() > defaults_.max_keys)
    throw config_error("keys", std::to_string(s.keys.size())
                                 + " keys, more than hedge.max_keys "
                                 + std::to_string(defaults_.max_keys));
  // Everything is checked (and built) before anything changes.
  const ddsketch like;
  std::vector<std::pair<std::string, ddsketch>> parsed;
  parsed.reserve(s.keys.size());
  std::unordered_map<std::string, std::size_t> seen;
  for (std::size_t i = 0; i < s.keys.size(); ++i) {
    const auto f = "keys[" + std::to_string(i) + "]";
    const auto& e = s.keys[i];
    if (e.key.empty() || e.key.size() > hedge_snapshot_max_key_bytes)
      throw config_error(f + ".key",
                         "must be 1 to "
                           + std::to_string(hedge_snapshot_max_key_bytes)
                           + " bytes");
    if (!seen.emplace(e.key, i).second)
      throw config_error(f + ".key", "'" + e.key + "' repeats keys["
                                       + std::to_string(seen[e.key]) + "]");
    parsed.emplace_back(e.key, to_ddsketch(e.sketch, like, f + ".sketch"));
  }
  std::unordered_map<std::string, ddsketch> pending;
  for (auto& [key, sketch] : parsed)
    if (!keys_.peek(key))
      pending.emplace(key, sketch);
  // Apply: nothing below can fail but an allocation.
  for (auto& [key, sketch] : parsed)
    if (auto* k = keys_.peek(key))
      seed(*k, std::move(sketch), now);
  imported_ = std::move(pending);
  imported_at_ = now;
  return parsed.size();
}

std::optional<double> endpoint_stats_state::tokens(const std::string& key,
                                                   hedge_time now) {
  auto* k = keys_.peek(key);
  if (!k)
    return std::nullopt;
  return k->bucket.tokens(now);
}

} // namespace hedge
} // namespace outbound
