#pragma once

// The latencies of one kind of call in `outbound demo`: the whole run (for
// the report) and a trailing window of the last few status intervals (for
// the live status line).
//
// Why a window and not the interval alone: at the demo's rates a client
// makes ~50 calls a second, so a one-second p99 is that second's slowest
// call (rank ⌈0.99 · 50⌉ = 50): one straggler of the hedged client — the
// rare call whose hedge straggled too — reads as "p99 895.8 ms", the same
// as the unhedged client's, and the line flips between the two readings
// from second to second. Over ten seconds (~500 calls) the p99 is the
// fifth slowest call, which is what the report's p99 means. Prometheus
// reads a histogram's quantile the same way, over a range of samples
// (histogram_quantile over rate(...[window])), not over the last scrape.
//
//   record ──► current interval ──take_interval──► window (last N intervals)
//          └─► whole run                            │
//                                                   └─► p99 over the window

#include "actors/hedge/ddsketch.hpp"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>

namespace outbound::apps {

/// Thread-safe: callers record from their threads, the status line and the
/// report read from theirs.
class latency_book {
public:
  /// `window_intervals`: how many status intervals the status line's p99
  /// spans, the current one included (>= 1; 0 is taken as 1).
  explicit latency_book(std::size_t window_intervals = 10)
    : window_intervals_(window_intervals < 1 ? 1 : window_intervals) {
  }

  /// A call ended after `seconds`; only successful calls have a latency in
  /// the quantiles (a failure is counted, not timed).
  void record(double seconds, bool success) {
    std::lock_guard<std::mutex> lock{mu_};
    if (success) {
      current_.insert(seconds);
      total_.insert(seconds);
      ++interval_ok_;
      ++ok_;
    } else {
      ++interval_failed_;
      ++failed_;
    }
  }

  /// What the status line shows for the interval that ends now.
  struct interval_view {
    /// Calls of this interval (ok + failed): its rate.
    uint64_t calls = 0;
    /// p99 (seconds) of the successful calls of the window: this interval
    /// and up to window_intervals - 1 before it. nullopt: none succeeded.
    std::optional<double> p99;
    /// Intervals the window holds now (fewer than window_intervals in the
    /// run's first seconds).
    std::size_t intervals = 0;
  };

  /// Ends the current interval: its calls, and the window's p99 with it;
  /// the oldest interval leaves the window once it is full.
  interval_view take_interval() {
    std::lock_guard<std::mutex> lock{mu_};
    interval_view v;
    v.calls = interval_ok_ + interval_failed_;
    interval_ok_ = interval_failed_ = 0;
    window_.push_back(current_);
    current_.clear();
    while (window_.size() > window_intervals_)
      window_.pop_front();
    v.intervals = window_.size();
    ddsketch merged;
    for (const auto& s : window_)
      merged.merge(s);
    v.p99 = merged.quantile(0.99);
    return v;
  }

  /// The whole run: calls that succeeded and failed, and the quantiles and
  /// maximum of the successful ones (seconds; nullopt when none).
  struct run_view {
    uint64_t ok = 0;
    uint64_t failed = 0;
    std::optional<double> p50, p99, p999, max;
  };

  run_view run() const {
    std::lock_guard<std::mutex> lock{mu_};
    run_view r;
    r.ok = ok_;
    r.failed = failed_;
    r.p50 = total_.quantile(0.5);
    r.p99 = total_.quantile(0.99);
    r.p999 = total_.quantile(0.999);
    r.max = total_.max();
    return r;
  }

  std::size_t window_intervals() const {
    return window_intervals_;
  }

private:
  const std::size_t window_intervals_;
  mutable std::mutex mu_;
  ddsketch current_;
  ddsketch total_;
  std::deque<ddsketch> window_;
  uint64_t interval_ok_ = 0;
  uint64_t interval_failed_ = 0;
  uint64_t ok_ = 0;
  uint64_t failed_ = 0;
};

} // namespace outbound::apps
