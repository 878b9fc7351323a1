#pragma once

// The health circuit breaker of hedging (httpx-hedged 0.5.0
// _health.py, Nygard's "Release It!" circuit breaker). It only ever
// suppresses hedges: the primary request always goes out.
//
//            error rate >= threshold with >= min_samples in the window
//   CLOSED ───────────────────────────────────────────────────────► OPEN
//     ▲                                                    ▲         │
//     │ trials done, failures/trials < threshold           │         │ first
//     │ (window reset)                                     │         │ allow()
//     │                 trials done, failures/trials >=    │         │ after
//     └───────────── HALF_OPEN ────────────────────────────┘         │ cooldown
//                        ▲        threshold (a new OPEN)             │
//                        └───────────────────────────────────────────┘
//
// Window: failures and samples in a current and a previous window of
// `window` seconds, rotated lazily (elapsed < W: none; [W, 2W): current →
// previous, the new window starting where the old one ended; >= 2W: both
// cleared): the error rate is over both, so an outcome counts for at
// least W and less than 2W. While OPEN
// (and HALF_OPEN) the recorded outcomes keep feeding the window.
//
// Half-open probes: allow() hands out at most half_open_max_trial permits
// (outstanding + finished trials). A permit is either completed with the
// probe hedge's outcome (a trial) or released (the probe was cancelled
// because its primary won, or never sent because a later gate said no): a
// released permit is handed out again and counts as no trial. Each
// half-open period has a generation number; permits of an older
// generation are ignored.
//
// Pure: time is an argument; no clock is read. Transitions are returned so
// the owner can emit exactly one on_circuit_open per OPEN transition.

#include "actors/hedge/lru_map.hpp"
#include "config/hedge_config.hpp"
#include "core/hedge_stats.hpp"
#include "core/hedge_types.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace outbound {
inline namespace hedge {

/// A change of phase caused by a call (none: no change).
enum class breaker_transition : uint8_t { none, opened, half_opened, closed };

/// "none", "opened", "half_opened", "closed".
const char* to_string(breaker_transition t);

/// The answer of breaker_state::allow.
enum class breaker_decision : uint8_t {
  /// Closed: hedge freely.
  allow,
  /// Half-open: hedge as a probe; the permit must be completed or released.
  allow_probe,
  /// Open, cooldown not over.
  blocked_open,
  /// Half-open, every trial permit is out or used.
  blocked_trials,
};

/// "allow", "allow_probe", "blocked_open", "blocked_trials".
const char* to_string(breaker_decision d);

/// What allow() decided, the transition it caused (half_opened when the
/// cooldown was over) and, for allow_probe, the permit's generation.
struct breaker_allow {
  breaker_decision decision = breaker_decision::allow;
  breaker_transition transition = breaker_transition::none;
  uint64_t generation = 0;

  bool allowed() const {
    return decision == breaker_decision::allow
           || decision == breaker_decision::allow_probe;
  }
};

/// One breaker (see the header comment).
class breaker_state {
public:
  /// `cfg` validated by the caller; the first window starts at `start`.
  /// Permit generations start after `first_generation` (a registry gives
  /// each breaker it creates a disjoint range, so a permit of an evicted
  /// breaker never matches its successor).
  breaker_state(const breaker_config& cfg, hedge_time start,
                uint64_t first_generation = 0);

  /// May a hedge go out at `now`? Moves OPEN → HALF_OPEN lazily when the
  /// cooldown is over.
  breaker_allow allow(hedge_time now);

  /// Feeds the outcome of a finished call (the race's winner) into the
  /// window; in CLOSED, trips to OPEN (returns opened) when the window holds
  /// >= min_samples samples and failures/samples >= threshold.
  breaker_transition record(call_health h, hedge_time now);

  /// The probe hedge of permit `generation` finished with `h` (a trial).
  /// After half_open_max_trial trials: failures/trials >= threshold ⇒ OPEN
  /// again (opened), else CLOSED with the window cleared (closed). A stale
  /// or unknown permit changes nothing (none).
  breaker_transition complete_probe(uint64_t generation, call_health h,
                                    hedge_time now);

  /// Gives the permit of `generation` back without a trial outcome. Returns
  /// false for a stale or unknown permit.
  bool release_probe(uint64_t generation);

  breaker_phase phase() const {
    return phase_;
  }

  /// Phase and counts as of `now` (rotates the window).
  breaker_snapshot snapshot(hedge_time now);

  const breaker_config& config() const {
    return cfg_;
  }

private:
  void rotate(hedge_time now);
  void open(hedge_time now);

  breaker_config cfg_;
  breaker_phase phase_ = breaker_phase::closed;
  hedge_time window_start_;
  uint64_t cur_samples_ = 0;
  uint64_t cur_failures_ = 0;
  uint64_t prev_samples_ = 0;
  uint64_t prev_failures_ = 0;
  hedge_time opened_at_;
  uint64_t generation_ = 0;
  int permits_out_ = 0;
  int trials_ = 0;
  int trial_failures_ = 0;
  uint64_t opens_ = 0;
  uint64_t half_opens_ = 0;
  uint64_t closes_ = 0;
};

/// The result of the breaker gate of one hedge.
enum class hedge_gate : uint8_t {
  /// Both tiers allow: send the hedge (after the budget gate).
  allowed,
  /// The host's breaker is open (or out of trial permits).
  blocked_host,
  /// The endpoint's breaker is open (or out of trial permits).
  blocked_endpoint,
};

/// "allowed", "blocked_host", "blocked_endpoint".
const char* to_string(hedge_gate g);

/// Half-open trial permits held by an allowed hedge. Complete it when the
/// probe hedge won (breaker_registry::complete) or release it when the hedge
/// was cancelled or never sent (breaker_registry::release); a permit
/// holding no probe can be passed to either (no-op).
struct hedge_permit {
  std::string host_key;
  std::string endpoint_key;
  /// Generation of the host tier's permit, if the host was half-open.
  std::optional<uint64_t> host_generation;
  /// Generation of the endpoint tier's permit, if it was half-open.
  std::optional<uint64_t> endpoint_generation;

  /// True if the permit holds a half-open trial in either tier.
  bool holds_probe() const {
    return host_generation || endpoint_generation;
  }
};

/// Transitions of both tiers caused by one registry call. The owner emits
/// on_circuit_open("host", host_key) / ("endpoint", endpoint_key) for each
/// `opened`.
struct breaker_changes {
  breaker_transition host = breaker_transition::none;
  breaker_transition endpoint = breaker_transition::none;
};

/// The answer of breaker_registry::allow_hedge.
struct breaker_gate_result {
  hedge_gate gate = hedge_gate::allowed;
  /// allowed: the permit to complete or release.
  hedge_permit permit;
  /// half_opened transitions (never opened).
  breaker_changes changes;
};

/// Breakers of both tiers, per key, each tier LRU-bounded at
/// hedge_config::max_keys. The host tier always uses the transport default
/// breaker config; the endpoint tier uses the config handed in with the key
/// when its breaker is created (the endpoint's effective breaker config).
/// For an unmatched request pass the host key as the endpoint key as well:
/// it then has the host tier only (httpx-hedged keeps a second, identical
/// breaker in the endpoint tier, which trips with the host's and doubles the
/// open notification; outbound does not). A host trip
/// blocks hedges of every endpoint on that host; an endpoint trip blocks
/// only that endpoint.
class breaker_registry {
public:
  /// Validates `cfg` (throws config_error naming `hedge.*`).
  explicit breaker_registry(const hedge_config& cfg);

  /// The breaker gate of one hedge: host tier first, then the endpoint
  /// tier. When the host allows with a probe permit and the endpoint blocks,
  /// the host permit is released before answering.
  breaker_gate_result allow_hedge(const std::string& host_key,
                                  const std::string& endpoint_key,
                                  const breaker_config& endpoint_cfg,
                                  hedge_time now);

  /// Feeds the winner's outcome into both tiers (creating their breakers).
  breaker_changes record(const std::string& host_key,
                         const std::string& endpoint_key,
                         const breaker_config& endpoint_cfg, call_health h,
                         hedge_time now);

  /// The probe hedge of `permit` won with outcome `h`: a trial in each tier
  /// the permit holds a probe of.
  breaker_changes complete(const hedge_permit& permit, call_health h,
                           hedge_time now);

  /// Gives back the probe permits of `permit` (hedge cancelled or not sent).
  void release(const hedge_permit& permit);

  /// The breaker of `key` in `scope` as of `now`; nullopt if not tracked.
  std::optional<breaker_snapshot> snapshot(breaker_scope scope,
                                           const std::string& key,
                                           hedge_time now);

  /// Every breaker of both tiers as of `now` (host tier first, each most
  /// recently used first); changes no LRU order.
  std::vector<breaker_key_snapshot> all_snapshots(hedge_time now);

  /// Breakers tracked per tier.
  std::size_t size(breaker_scope scope) const;

private:
  breaker_state& host(const std::string& key, hedge_time now);
  breaker_state& endpoint(const std::string& key, const breaker_config& cfg,
                          hedge_time now);

  hedge_config cfg_;
  /// The generation range of the next breaker created (steps of 2^32).
  uint64_t next_generation_base_ = 0;
  lru_map<breaker_state> hosts_;
  lru_map<breaker_state> endpoints_;
};

} // namespace hedge
} // namespace outbound
