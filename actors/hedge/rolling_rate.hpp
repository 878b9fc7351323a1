#pragma once

// Rolling requests-per-second estimate of one key (httpx-hedged 0.5.0
// _rate.py): counts in a current and a previous window of W
// seconds, rotated lazily like windowed_sketch (elapsed < W: none;
// [W, 2W): current → previous, the new window starts where the old one
// ended — httpx-hedged starts it at `now`, so one window could span up to
// 2W; >= 2W: both cleared, the new one starts at `now`), and
//
//   rps = (previous × max(0, 1 − elapsed/W) + current) / W
//
// where elapsed is the time since the current window started: the previous
// window's weight fades linearly as the current one fills (the sliding
// window approximation of rate limiters, e.g. Cloudflare's).
//
// Cold start (outbound's change to httpx-hedged): while there is no
// previous window — a new key, or one idle for 2W — dividing by W
// under-counts: 500 requests in the first second read as 50 rps with
// W = 10 s, and the hedge budget that follows the estimate starves (the
// failure httpx-hedged's own example works around by pinning
// estimated_rps). Then
//
//   rps = current / clamp(elapsed, min(1 s, W), W)
//
// i.e. the rate over the time actually observed, never over less than one
// second (so a first burst of a few requests is not read as a huge rate).
//
// Pure: time is an argument; no clock is read.

#include "core/hedge_types.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace outbound {
inline namespace hedge {

/// Rolling RPS estimate (see the header comment).
class rolling_rate {
public:
  /// `window` in seconds (> 0; the caller validates), starting at `start`.
  rolling_rate(double window, hedge_time start)
    : window_(window), start_(start) {
  }

  /// Counts `n` requests at `now`.
  void record(hedge_time now, uint64_t n = 1) {
    rotate(now);
    current_ += n;
  }

  /// Requests per second as of `now`.
  double rps(hedge_time now) {
    rotate(now);
    const double elapsed = seconds_between(start_, now);
    if (cold_) {
      const double floor = std::min(1.0, window_);
      return static_cast<double>(current_)
             / std::clamp(elapsed, floor, window_);
    }
    const double weight = std::max(0.0, 1.0 - elapsed / window_);
    return (static_cast<double>(previous_) * weight
            + static_cast<double>(current_))
           / window_;
  }

  /// The lazy rotation.
  void rotate(hedge_time now) {
    const double elapsed = seconds_between(start_, now);
    if (elapsed < window_)
      return;
    cold_ = elapsed >= 2.0 * window_;
    previous_ = cold_ ? 0 : current_;
    current_ = 0;
    // Back to back windows (the new one starts where the old one ended)
    // unless two were idle.
    start_ = cold_ ? now
                   : start_
                       + std::chrono::round<hedge_time::duration>(
                         std::chrono::duration<double>(window_));
  }

  uint64_t current() const {
    return current_;
  }

  uint64_t previous() const {
    return previous_;
  }

private:
  double window_;
  hedge_time start_;
  uint64_t current_ = 0;
  uint64_t previous_ = 0;
  /// No previous window to weigh (see the cold-start rule above).
  bool cold_ = true;
};

} // namespace hedge
} // namespace outbound
