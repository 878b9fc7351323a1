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
// sixth slowest call (rank 495 of 500), which is what the report's p99
// means. Prometheus reads a histogram's quantile the same way, over a
// range of samples (histogram_quantile over rate(...[window])), not over
// the last scrape.
//
//   record ──► current interval ──take_interval──► window (last N intervals)
//          └─► whole run                            │
//                                                   └─► p99 over the window

#include "actors/hedge/ddsketch.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <iomanip>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

namespace outbound::apps {

/// The most intervals a latency_book's window holds: each take_interval
/// merges them under the lock every record() takes, so a status interval
/// of milliseconds does not make that a thousand sketches.
constexpr std::size_t max_window_intervals = 100;

/// How many status intervals of `interval` seconds the window needs to
/// span at least `span` seconds: ⌈span / interval⌉ (a whole number of
/// intervals, one when an interval is longer than `span`), at most
/// max_window_intervals; 1 for a non-positive or non-finite argument.
inline std::size_t window_intervals_for(double span, double interval) {
  if (!(interval > 0) || !(span > 0) || !std::isfinite(span / interval))
    return 1;
  // Without the tolerance, 10 / 0.1 = 100.00000000000001 would take 101.
  auto n = std::ceil(span / interval - 1e-9);
  if (n < 1)
    return 1;
  if (n > double(max_window_intervals))
    return max_window_intervals;
  return static_cast<std::size_t>(n);
}

/// The seconds `intervals` status intervals of `interval` seconds span,
/// as a label: at most three decimals, trailing zeros dropped ("10",
/// "10.2", "0.25", "12").
inline std::string window_seconds_label(std::size_t intervals,
                                        double interval) {
  double span = std::round(double(intervals) * interval * 1000.0) / 1000.0;
  std::ostringstream os;
  os << std::fixed << std::setprecision(3) << span;
  auto s = os.str();
  s.erase(s.find_last_not_of('0') + 1);
  if (!s.empty() && s.back() == '.')
    s.pop_back();
  return s;
}

/// Thread-safe: callers record from their threads, the status line and the
/// report read from theirs.
class latency_book {
public:
  /// `window_intervals`: how many status intervals the status line's p99
  /// spans, the current one included (1..max_window_intervals; 0 is taken
  /// as 1, more as the maximum).
  explicit latency_book(std::size_t window_intervals = 10)
    : window_intervals_(window_intervals < 1
                          ? 1
                          : std::min(window_intervals, max_window_intervals)) {
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
    window_.push_back(std::exchange(current_, ddsketch{}));
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
