#pragma once

// The hedge budget of one key (httpx-hedged 0.5.0
// budget/_token_bucket.py, itself from hedge-python and bhope/hedge): a
// token bucket refilling at rps × budget_percent / 100 tokens per second,
// holding at most burst = max(2 × rate, 1) tokens, starting full. During an
// outage the primaries slow down, the rate drops and the bucket drains:
// hedging stops on its own instead of doubling the load.
//
// Pure: time is an argument; no clock is read.

#include "core/hedge_types.hpp"

#include <algorithm>

namespace outbound {
inline namespace hedge {

/// Token bucket of hedges (see the header comment).
class token_bucket {
public:
  /// Refill rate for `rps` and `budget_percent`, in tokens per second.
  static double rate_for(double rps, double budget_percent) {
    return std::max(0.0, rps) * std::max(0.0, budget_percent) / 100.0;
  }

  /// Bucket for `rps` requests/s and `budget_percent` (>= 0), full at `now`.
  /// budget_percent 0 disables hedging: burst 0, no token ever (hedging.md
  /// case 9a; the reference formula max(2×rate, 1) would still hand out
  /// one token).
  token_bucket(double rps, double budget_percent, hedge_time now)
    : budget_percent_(budget_percent), last_(now) {
    recompute(rps);
    tokens_ = burst_;
  }

  /// Refills up to `now`, then takes one token if there is one.
  bool try_take(hedge_time now) {
    refill(now);
    if (tokens_ >= 1.0) {
      tokens_ -= 1.0;
      return true;
    }
    return false;
  }

  /// Puts back a token taken by try_take that was not used (a hedge granted
  /// and then not sent), never above the burst.
  void give_back() {
    tokens_ = std::min(tokens_ + 1.0, burst_);
  }

  /// Refills up to `now` at the old rate, then recomputes rate and burst
  /// for the new `rps` and clips the tokens to the new burst.
  void set_rps(double rps, hedge_time now) {
    refill(now);
    recompute(rps);
    tokens_ = std::min(tokens_, burst_);
  }

  /// Same for a new budget percentage (an endpoint's override).
  void set_budget_percent(double budget_percent, double rps, hedge_time now) {
    budget_percent_ = budget_percent;
    set_rps(rps, now);
  }

  /// Tokens available at `now` (refills first).
  double tokens(hedge_time now) {
    refill(now);
    return tokens_;
  }

  /// Refill rate in tokens per second.
  double rate() const {
    return rate_;
  }

  /// Capacity in tokens.
  double burst() const {
    return burst_;
  }

private:
  void recompute(double rps) {
    rate_ = rate_for(rps, budget_percent_);
    burst_ = budget_percent_ > 0.0 ? std::max(2.0 * rate_, 1.0) : 0.0;
  }

  void refill(hedge_time now) {
    if (now > last_) {
      tokens_ = std::min(burst_, tokens_ + seconds_between(last_, now) * rate_);
      last_ = now;
    }
  }

  double budget_percent_;
  double rate_ = 0.0;
  double burst_ = 0.0;
  double tokens_ = 0.0;
  hedge_time last_;
};

} // namespace hedge
} // namespace outbound
