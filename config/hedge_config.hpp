#pragma once

// Configuration of adaptive hedging (httpx-hedged 0.5.0 _config.py: the
// defaults of httpx-hedged's HedgeConfig / EndpointConfig /
// CircuitBreakerConfig). Plain data, durations in seconds as doubles (like
// config/client_config.hpp). `validate()` throws config_error naming the
// first bad field; every registry and route table calls it at construction
// or registration.

#include <cstddef>
#include <optional>
#include <string>

namespace outbound {
inline namespace config {

/// The health circuit breaker that suppresses hedges (never primaries) for a
/// sick host or endpoint (closed → open → half-open; see
/// actors/hedge/breaker_state.hpp).
struct breaker_config {
  /// Failure fraction of the window that trips the breaker open, in
  /// (0, 1] (0 would trip on successes). [0.5]
  double error_rate_threshold = 0.5;
  /// Samples the window must hold before the breaker can trip (>= 1). [20]
  int min_samples = 20;
  /// Error-rate window in seconds (> 0): current + previous window. [30.0]
  double window = 30.0;
  /// Seconds an open breaker waits before allowing half-open probe hedges
  /// (>= 0). [30.0]
  double cooldown = 30.0;
  /// Probe hedges allowed (and trial outcomes needed) while half-open
  /// (>= 1). [5]
  int half_open_max_trial = 5;
  /// An HTTP 5xx answer counts as a failure. [true]
  bool treat_5xx_as_failure = true;

  /// Throws config_error naming `<prefix>.error_rate_threshold`, ...
  void validate(const std::string& prefix = "breaker") const;
};

/// Transport-wide hedging defaults (httpx-hedged HedgeConfig).
struct hedge_config {
  /// Latency quantile that triggers the hedge, strictly in (0, 1). [0.95:
  /// "defer sending a secondary request until the first request has been
  /// outstanding for more than the 95th-percentile expected latency ...
  /// limits the additional load to approximately 5%" — Dean & Barroso,
  /// "The Tail at Scale", CACM 2013. httpx-hedged defaults to 0.90, which
  /// hedges ~10 % of all calls and so spends a 10 % budget on ordinary
  /// slow calls, leaving none for the rare stragglers hedging is for.]
  double percentile = 0.95;
  /// Hedges allowed as a percentage of the key's traffic (>= 0); 0 disables
  /// hedging (no token, ever). [10.0]
  double budget_percent = 10.0;
  /// Expected requests per second of a key (> 0 when set). Unset: estimated
  /// from the key's traffic over `rps_window`. [unset]
  std::optional<double> estimated_rps;
  /// Window of the rolling RPS estimate in seconds (> 0). [10.0]
  double rps_window = 10.0;
  /// Lower the delay below the `percentile` quantile across a flat stretch
  /// of the learned latency distribution, where a lower delay costs fewer
  /// extra hedges (relative to the percentile's share) than the delay it
  /// saves; never past 1.5 × the percentile's share of hedges nor 0.75 ×
  /// the budget (actors/hedge/delay_rule.hpp). false: the plain quantile
  /// (httpx-hedged). Off by default: in bench/hedging's same-run rounds
  /// its p99 against the best static delay is not yet distinguishable
  /// from the plain quantile's (bench/README.md). [false]
  bool delay_search = false;
  /// Floor of every hedge delay in seconds (>= 0). [0.001]
  double min_delay = 0.001;
  /// A key's first N requests use `warmup_delay` (>= 0). [20]
  int warmup_requests = 20;
  /// Hedge delay during warmup, in seconds (>= 0). [0.01]
  double warmup_delay = 0.01;
  /// Rotation interval of the latency sketch in seconds (> 0). [30.0]
  double window_duration = 30.0;
  /// Keys tracked at most (per registry: stats, host breakers, endpoint
  /// breakers), least recently used evicted first (>= 1). [10000]
  std::size_t max_keys = 10000;
  /// Breaker of every host, and of endpoints without an override.
  breaker_config breaker;

  /// Throws config_error naming `hedge.percentile`, `hedge.breaker.window`,
  /// ...
  void validate() const;
};

/// Per-endpoint overrides (httpx-hedged EndpointConfig): an unset field
/// inherits the transport default. `breaker`, when set, replaces the whole
/// breaker_config (no field merge). `max_keys` is transport-wide only.
struct endpoint_config {
  std::optional<double> percentile;
  std::optional<double> budget_percent;
  std::optional<double> estimated_rps;
  std::optional<double> rps_window;
  std::optional<bool> delay_search;
  std::optional<double> min_delay;
  std::optional<int> warmup_requests;
  std::optional<double> warmup_delay;
  std::optional<double> window_duration;
  std::optional<breaker_config> breaker;
  /// Hardcoded hedge delay in seconds (>= 0): the sketch still records but
  /// is not consulted; the delay is still floored at min_delay. [unset]
  std::optional<double> hedge_delay;

  /// Same bounds as hedge_config; throws config_error naming
  /// `<prefix>.percentile`, `<prefix>.hedge_delay`, `<prefix>.breaker.*`.
  void validate(const std::string& prefix = "endpoint") const;
};

/// The configuration in force for one key: the transport defaults with an
/// endpoint's overrides applied, plus its optional hardcoded delay.
struct effective_hedge_config : hedge_config {
  /// Hardcoded hedge delay in seconds; unset ⇒ adaptive.
  std::optional<double> hedge_delay;
};

/// Applies `ep` over `base` (both validated first; throws config_error).
effective_hedge_config resolve(const hedge_config& base,
                               const endpoint_config& ep);

/// `base` alone (a host key, or an endpoint without overrides).
effective_hedge_config resolve(const hedge_config& base);

} // namespace config
} // namespace outbound
