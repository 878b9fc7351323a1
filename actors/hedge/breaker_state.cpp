#include "actors/hedge/breaker_state.hpp"

#include <chrono>

namespace outbound {
inline namespace hedge {

const char* to_string(breaker_transition t) {
  switch (t) {
    case breaker_transition::none: return "none";
    case breaker_transition::opened: return "opened";
    case breaker_transition::half_opened: return "half_opened";
    case breaker_transition::closed: return "closed";
  }
  return "?";
}

const char* to_string(breaker_decision d) {
  switch (d) {
    case breaker_decision::allow: return "allow";
    case breaker_decision::allow_probe: return "allow_probe";
    case breaker_decision::blocked_open: return "blocked_open";
    case breaker_decision::blocked_trials: return "blocked_trials";
  }
  return "?";
}

const char* to_string(hedge_gate g) {
  switch (g) {
    case hedge_gate::allowed: return "allowed";
    case hedge_gate::blocked_host: return "blocked_host";
    case hedge_gate::blocked_endpoint: return "blocked_endpoint";
  }
  return "?";
}

// -- breaker_state ------------------------------------------------------------

breaker_state::breaker_state(const breaker_config& cfg, hedge_time start,
                             uint64_t first_generation)
  : cfg_(cfg),
    window_start_(start),
    opened_at_(start),
    generation_(first_generation) {
}

void breaker_state::rotate(hedge_time now) {
  const double elapsed = seconds_between(window_start_, now);
  if (elapsed < cfg_.window)
    return;
  if (elapsed < 2.0 * cfg_.window) {
    prev_samples_ = cur_samples_;
    prev_failures_ = cur_failures_;
    // Back to back windows: an outcome counts for less than 2 windows.
    window_start_ += std::chrono::round<hedge_time::duration>(
      std::chrono::duration<double>(cfg_.window));
  } else {
    prev_samples_ = prev_failures_ = 0;
    window_start_ = now;
  }
  cur_samples_ = cur_failures_ = 0;
}

void breaker_state::open(hedge_time now) {
  phase_ = breaker_phase::open;
  opened_at_ = now;
  permits_out_ = trials_ = trial_failures_ = 0;
  ++opens_;
}

breaker_allow breaker_state::allow(hedge_time now) {
  breaker_allow r;
  if (phase_ == breaker_phase::closed)
    return r;
  if (phase_ == breaker_phase::open) {
    if (seconds_between(opened_at_, now) < cfg_.cooldown) {
      r.decision = breaker_decision::blocked_open;
      return r;
    }
    phase_ = breaker_phase::half_open;
    ++half_opens_;
    ++generation_;
    permits_out_ = trials_ = trial_failures_ = 0;
    r.transition = breaker_transition::half_opened;
  }
  if (permits_out_ + trials_ < cfg_.half_open_max_trial) {
    ++permits_out_;
    r.decision = breaker_decision::allow_probe;
    r.generation = generation_;
  } else {
    r.decision = breaker_decision::blocked_trials;
  }
  return r;
}

breaker_transition breaker_state::record(call_health h, hedge_time now) {
  rotate(now);
  ++cur_samples_;
  if (is_failure(h, cfg_.treat_5xx_as_failure))
    ++cur_failures_;
  if (phase_ != breaker_phase::closed)
    return breaker_transition::none;
  const uint64_t samples = cur_samples_ + prev_samples_;
  const uint64_t failures = cur_failures_ + prev_failures_;
  if (samples >= static_cast<uint64_t>(cfg_.min_samples)
      && static_cast<double>(failures)
           >= cfg_.error_rate_threshold * static_cast<double>(samples)) {
    open(now);
    return breaker_transition::opened;
  }
  return breaker_transition::none;
}

breaker_transition breaker_state::complete_probe(uint64_t generation,
                                                 call_health h,
                                                 hedge_time now) {
  if (phase_ != breaker_phase::half_open || generation != generation_
      || permits_out_ == 0)
    return breaker_transition::none;
  --permits_out_;
  ++trials_;
  if (is_failure(h, cfg_.treat_5xx_as_failure))
    ++trial_failures_;
  if (trials_ < cfg_.half_open_max_trial)
    return breaker_transition::none;
  if (static_cast<double>(trial_failures_)
      >= cfg_.error_rate_threshold * static_cast<double>(trials_)) {
    open(now);
    return breaker_transition::opened;
  }
  phase_ = breaker_phase::closed;
  ++closes_;
  permits_out_ = trials_ = trial_failures_ = 0;
  cur_samples_ = cur_failures_ = prev_samples_ = prev_failures_ = 0;
  window_start_ = now;
  return breaker_transition::closed;
}

bool breaker_state::release_probe(uint64_t generation) {
  if (phase_ != breaker_phase::half_open || generation != generation_
      || permits_out_ == 0)
    return false;
  --permits_out_;
  return true;
}

breaker_snapshot breaker_state::snapshot(hedge_time now) {
  rotate(now);
  breaker_snapshot s;
  s.phase = phase_;
  s.samples = cur_samples_ + prev_samples_;
  s.failures = cur_failures_ + prev_failures_;
  s.permits_out = permits_out_;
  s.trials = trials_;
  s.trial_failures = trial_failures_;
  s.opens = opens_;
  s.half_opens = half_opens_;
  s.closes = closes_;
  return s;
}

// -- breaker_registry ---------------------------------------------------------

namespace {

const hedge_config& validated(const hedge_config& cfg) {
  cfg.validate();
  return cfg;
}

} // namespace

breaker_registry::breaker_registry(const hedge_config& cfg)
  : cfg_(validated(cfg)), hosts_(cfg.max_keys), endpoints_(cfg.max_keys) {
}

breaker_state& breaker_registry::host(const std::string& key, hedge_time now) {
  return hosts_.get_or_create(key, [&] {
    next_generation_base_ += uint64_t{1} << 32;
    return breaker_state{cfg_.breaker, now, next_generation_base_};
  });
}

breaker_state& breaker_registry::endpoint(const std::string& key,
                                          const breaker_config& cfg,
                                          hedge_time now) {
  return endpoints_.get_or_create(key, [&] {
    next_generation_base_ += uint64_t{1} << 32;
    return breaker_state{cfg, now, next_generation_base_};
  });
}

breaker_gate_result
breaker_registry::allow_hedge(const std::string& host_key,
                              const std::string& endpoint_key,
                              const breaker_config& endpoint_cfg,
                              hedge_time now) {
  breaker_gate_result r;
  r.permit.host_key = host_key;
  r.permit.endpoint_key = endpoint_key;
  auto& h = host(host_key, now);
  auto ha = h.allow(now);
  r.changes.host = ha.transition;
  if (!ha.allowed()) {
    r.gate = hedge_gate::blocked_host;
    return r;
  }
  if (endpoint_key == host_key) {
    // An unmatched (host-keyed) request has no endpoint tier.
    if (ha.decision == breaker_decision::allow_probe)
      r.permit.host_generation = ha.generation;
    return r;
  }
  auto& e = endpoint(endpoint_key, endpoint_cfg, now);
  auto ea = e.allow(now);
  r.changes.endpoint = ea.transition;
  if (!ea.allowed()) {
    // The host's probe permit was not used: hand it back.
    if (ha.decision == breaker_decision::allow_probe)
      h.release_probe(ha.generation);
    r.gate = hedge_gate::blocked_endpoint;
    return r;
  }
  if (ha.decision == breaker_decision::allow_probe)
    r.permit.host_generation = ha.generation;
  if (ea.decision == breaker_decision::allow_probe)
    r.permit.endpoint_generation = ea.generation;
  return r;
}

breaker_changes breaker_registry::record(const std::string& host_key,
                                         const std::string& endpoint_key,
                                         const breaker_config& endpoint_cfg,
                                         call_health h, hedge_time now) {
  breaker_changes c;
  c.host = host(host_key, now).record(h, now);
  if (endpoint_key != host_key)
    c.endpoint = endpoint(endpoint_key, endpoint_cfg, now).record(h, now);
  return c;
}

breaker_changes breaker_registry::complete(const hedge_permit& permit,
                                           call_health h, hedge_time now) {
  breaker_changes c;
  if (permit.host_generation)
    if (auto b = hosts_.peek(permit.host_key))
      c.host = b->complete_probe(*permit.host_generation, h, now);
  if (permit.endpoint_generation)
    if (auto b = endpoints_.peek(permit.endpoint_key))
      c.endpoint = b->complete_probe(*permit.endpoint_generation, h, now);
  return c;
}

void breaker_registry::release(const hedge_permit& permit) {
  if (permit.host_generation)
    if (auto b = hosts_.peek(permit.host_key))
      b->release_probe(*permit.host_generation);
  if (permit.endpoint_generation)
    if (auto b = endpoints_.peek(permit.endpoint_key))
      b->release_probe(*permit.endpoint_generation);
}

std::optional<breaker_snapshot>
breaker_registry::snapshot(breaker_scope scope, const std::string& key,
                           hedge_time now) {
  auto* b = scope == breaker_scope::host ? hosts_.peek(key)
                                         : endpoints_.peek(key);
  if (!b)
    return std::nullopt;
  return b->snapshot(now);
}

std::vector<breaker_key_snapshot>
breaker_registry::all_snapshots(hedge_time now) {
  std::vector<breaker_key_snapshot> out;
  for (auto scope : {breaker_scope::host, breaker_scope::endpoint}) {
    auto& tier = scope == breaker_scope::host ? hosts_ : endpoints_;
    std::vector<std::string> keys;
    for (auto& entry : tier.entries())
      keys.push_back(entry.first);
    for (auto& key : keys)
      out.push_back({scope, key, tier.peek(key)->snapshot(now)});
  }
  return out;
}

std::size_t breaker_registry::size(breaker_scope scope) const {
  return scope == breaker_scope::host ? hosts_.size() : endpoints_.size();
}

} // namespace hedge
} // namespace outbound
