#pragma once

// What the hedging actors report about themselves: breaker phases and
// window counts, per-key hedge counters. Plain values, no CAF, so the
// metrics exporter (metrics/outbound_metrics.hpp) reads them without
// depending on the actors. The counters follow httpx-hedged's
// StatsSnapshot; the breaker follows its CircuitBreaker.

#include "core/hedge_types.hpp"

#include <cstdint>
#include <string>

namespace outbound {
inline namespace core {

/// Where a breaker is.
enum class breaker_phase : uint8_t { closed, open, half_open };

/// "closed", "open", "half_open".
const char* to_string(breaker_phase p);

/// Window counts and phase of one breaker (observability and tests).
struct breaker_snapshot {
  breaker_phase phase = breaker_phase::closed;
  /// Samples and failures in current ∪ previous window.
  uint64_t samples = 0;
  uint64_t failures = 0;
  /// Half-open: permits out, trials finished, failed trials.
  int permits_out = 0;
  int trials = 0;
  int trial_failures = 0;
  /// OPEN transitions so far.
  uint64_t opens = 0;
  /// HALF-OPEN transitions (cooldown over) and CLOSED transitions (probes
  /// passed) so far.
  uint64_t half_opens = 0;
  uint64_t closes = 0;
};

/// One breaker of a registry, for metrics exporters (metrics_poller).
struct breaker_key_snapshot {
  breaker_scope scope = breaker_scope::host;
  std::string key;
  breaker_snapshot snapshot;
};

/// Counters of one key or of all keys (httpx-hedged StatsSnapshot).
struct hedge_stats_snapshot {
  /// Requests planned.
  uint64_t total_requests = 0;
  /// Hedges sent (every gate passed: a token was taken).
  uint64_t hedged_requests = 0;
  /// Races with a hedge that the hedge / the primary won: the winner's
  /// definitive answer ended the race while the other leg still ran
  /// (core/hedge_race.hpp, R9). A race whose loser had failed first (the
  /// primary's 503, then the hedge's 200) counts for neither: the hedge
  /// rescued the attempt but beat no one. So hedge_wins + primary_wins <=
  /// hedged_requests, and hedged_requests - hedge_wins is not the number
  /// of hedges that lost.
  uint64_t hedge_wins = 0;
  uint64_t primary_wins = 0;
  /// Hedges not sent because the bucket was empty.
  uint64_t budget_exhausted = 0;
  /// Requests planned with the warmup delay.
  uint64_t warmup_requests = 0;
  /// Hedges not sent because a breaker was open.
  uint64_t circuit_blocked = 0;
  /// Observed calls that failed (failure, or 5xx under
  /// treat_5xx_as_failure).
  uint64_t errors = 0;
};

/// Counters and gauges of one key, for metrics exporters (metrics_poller).
struct hedge_key_metrics {
  /// "endpoint:<name>" or "host:<host[:port]>".
  std::string key;
  hedge_stats_snapshot stats;
  /// Hedge tokens in the key's bucket now.
  double tokens = 0.0;
  /// Seconds the key's next request would wait before hedging (the plan's
  /// delay: hardcoded, warmup or learned, floored at min_delay).
  double delay = 0.0;
};

} // namespace core
} // namespace outbound
