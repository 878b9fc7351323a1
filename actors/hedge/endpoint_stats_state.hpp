#pragma once

// Per-key hedging state (httpx-hedged 0.5.0 transport.py,
// _stats.py, _rate.py, budget/_token_bucket.py): for every key (an
// "endpoint:<name>" or a "host:<host[:port]>") a windowed latency sketch, a
// rolling RPS estimate, a hedge token bucket and the counters; at most
// hedge_config::max_keys keys, the least recently used evicted first (a
// hostile set of keys cannot grow memory). The global counters are kept
// separately and survive evictions.
//
// One request's life, as the call actor will drive it:
//   plan(key, cfg, now)              every request: counts it, the delay
//   [delay passes, primary not done; breaker gate allowed, else
//    count_circuit_blocked(key)]
//   try_take_token(key, now)         the budget gate (false: not hedged)
//   hedge_sent(key) | return_token(key)   the hedge went out | was not sent
//   record_race(key, hedged, hedge_won)   when a hedge was fired
//   observe(key, latency, health, now)    each attempt's winner: latency
//                                         and health
//
// Pure: time is an argument; no clock is read.

#include "actors/hedge/ddsketch.hpp"
#include "actors/hedge/hedge_snapshot.hpp"
#include "actors/hedge/lru_map.hpp"
#include "actors/hedge/rolling_rate.hpp"
#include "actors/hedge/token_bucket.hpp"
#include "config/hedge_config.hpp"
#include "core/hedge_stats.hpp"
#include "core/hedge_types.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace outbound {
inline namespace hedge {

/// The answer to "how long to wait before hedging this request?".
struct hedge_plan {
  /// Seconds to wait for the primary before hedging (>= min_delay).
  double delay = 0.0;
  /// The delay is the warmup delay (the key has seen <= warmup_requests
  /// requests, or the sketch had no usable estimate).
  bool warmup = false;
  /// The delay is the endpoint's hardcoded hedge_delay.
  bool hardcoded = false;
  /// The key's learned latency at its `percentile`, in seconds: the
  /// sketch's quantile before the delay search lowers it and before the
  /// min_delay floor (what the retry loop's deadline rule expects an
  /// attempt to take). 0 when nothing is learned (warmup, hardcoded).
  double learned = 0.0;
};

/// The per-key state (see the header comment).
class endpoint_stats_state {
public:
  /// Validates `defaults` (throws config_error naming `hedge.*`); its
  /// max_keys bounds the keys.
  explicit endpoint_stats_state(const hedge_config& defaults);

  /// Counts a request of `key` (creating its state with `cfg`, an
  /// effective config from resolve()) and returns its hedge delay:
  /// hardcoded hedge_delay if set; else warmup_delay while the key has seen
  /// <= warmup_requests requests; else the sketch's `percentile` quantile,
  /// lowered across a flat stretch below it when `delay_search` is on
  /// (actors/hedge/delay_rule.hpp; the search may spend up to 1.5 × the
  /// percentile's share and 0.75 × the budget) (warmup_delay when there
  /// is no estimate or it is not > 0); always floored at
  /// min_delay. With no estimated_rps the request also feeds the rolling
  /// RPS and the bucket's rate follows it (seeded with 100 rps, like
  /// httpx-hedged).
  hedge_plan plan(const std::string& key, const effective_hedge_config& cfg,
                  hedge_time now);

  /// The budget gate: takes one hedge token of `key`. True: the caller
  /// holds a token and must settle it with hedge_sent or return_token.
  /// False: budget_exhausted +1, or `key` is not tracked (plan it first;
  /// evicted meanwhile) — nothing counted.
  bool try_take_token(const std::string& key, hedge_time now);

  /// A hedge of `key` whose token was granted actually went out:
  /// hedged_requests +1 (the counter counts only hedges sent).
  void hedge_sent(const std::string& key);

  /// A token of `key` was granted but its hedge was not sent (the primary
  /// answered meanwhile, or no time was left): the token goes back to the
  /// bucket, nothing counted. A no-op if `key` is no longer tracked.
  void return_token(const std::string& key);

  /// A hedge of `key` was not sent because a breaker was open.
  void count_circuit_blocked(const std::string& key);

  /// The winner's latency (seconds from the request's start) and health.
  /// The sketch records every latency (hardcoded endpoints too); errors +1
  /// on a failure. False (nothing recorded) if `key` is not tracked.
  bool observe(const std::string& key, double latency, call_health h,
               hedge_time now);

  /// The race of a `key` request ended; counts hedge_wins / primary_wins
  /// when `hedged`.
  void record_race(const std::string& key, bool hedged, bool hedge_won);

  /// The `q` quantile of `key`'s latency window in seconds; nullopt when
  /// the key is not tracked or has no sample in its window.
  std::optional<double> latency_quantile(const std::string& key, double q,
                                         hedge_time now);

  /// Counters of `key`; nullopt if not tracked.
  std::optional<hedge_stats_snapshot> snapshot(const std::string& key) const;

  /// Counters of every tracked key, most recently used first.
  std::vector<std::pair<std::string, hedge_stats_snapshot>>
  all_snapshots() const;

  /// Counters over every key ever tracked (evicted ones included).
  const hedge_stats_snapshot& global_snapshot() const {
    return global_;
  }

  /// Keys tracked now (<= max_keys).
  std::size_t size() const {
    return keys_.size();
  }

  /// Counters, tokens and next hedge delay of every tracked key at `now`,
  /// most recently used first. Counts nothing, changes no LRU order.
  std::vector<hedge_key_metrics> all_metrics(hedge_time now);

  /// Hedge tokens of `key` at `now`; nullopt if not tracked (tests).
  std::optional<double> tokens(const std::string& key, hedge_time now);

  /// The latency sketch of every tracked key with samples in its window
  /// at `now` (current ∪ previous, most recently used first), then the
  /// imported sketches no request has used yet (by key) that are younger
  /// than two window_durations; at most max_keys in all, and no key
  /// longer than hedge_snapshot_max_key_bytes (a route named that long is
  /// not persisted), so that the next start's import_snapshot accepts
  /// what this one wrote. Counts nothing, changes no LRU order
  /// (actors/hedge/hedge_snapshot.hpp).
  hedge_snapshot export_snapshot(hedge_time now);

  /// Imports the sketches of `s` and returns how many keys it held. All or
  /// nothing: everything is checked first; on a bad field it throws
  /// config_error naming it (`version`, `keys` — more than max_keys,
  /// `keys[i].key` — empty, too long or repeated, `keys[i].sketch.*` as
  /// to_ddsketch) and the state is unchanged.
  ///
  /// A tracked key's latency window becomes the imported sketch (the
  /// current window, starting at `now`) and the key counts as warm: its
  /// next request plans with the sketch's percentile, not warmup_delay. A
  /// key not tracked yet keeps its sketch aside (replacing what an earlier
  /// import left aside) until its first request creates it with its own
  /// config, which then starts warm from the sketch. Imported samples age
  /// out of the window like live ones, counted from the import (after one
  /// to two window_durations), also while set aside: a key first used two
  /// window_durations after the import starts cold, and an export leaves
  /// it out; hardcoded endpoints keep their hedge_delay.
  std::size_t import_snapshot(const hedge_snapshot& s, hedge_time now);

  /// Imported sketches waiting for their key's first request (tests).
  std::size_t pending_imports() const {
    return imported_.size();
  }

  /// The RPS seed of an auto-estimated key's bucket. [100]
  static constexpr double rps_seed = 100.0;

private:
  struct key_state;
  /// The plan of a request that is the `seen`-th of `k` (counts nothing).
  static hedge_plan delay_of(key_state& k, const effective_hedge_config& cfg,
                             uint64_t seen, hedge_time now);

  struct key_state {
    key_state(const effective_hedge_config& c, hedge_time now);
    effective_hedge_config cfg;
    windowed_sketch sketch;
    rolling_rate rate;
    token_bucket bucket;
    uint64_t seen = 0;
    hedge_stats_snapshot stats;
  };

  /// Makes `k` start from the imported `sketch`, warm.
  static void seed(key_state& k, ddsketch sketch, hedge_time now);

  hedge_config defaults_;
  lru_map<key_state> keys_;
  /// Imported sketches of keys not tracked yet (at most max_keys).
  std::unordered_map<std::string, ddsketch> imported_;
  /// When imported_ was imported: its sketches' window starts there.
  hedge_time imported_at_{};
  hedge_stats_snapshot global_;
};

} // namespace hedge
} // namespace outbound
