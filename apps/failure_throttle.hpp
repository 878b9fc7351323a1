#pragma once

// Which failure lines a long-running command prints (`outbound watch`,
// `outbound group-member`): a process that cannot reach a server fails the
// same way on every poll, every reconnect and every feed; one line per
// distinct cause is enough to tell the user, and a repeat is printed again
// only after `repeat_after` (with how many were suppressed), so an outage
// hours later is still reported.
//
//   new cause ──► print ──► same cause within repeat_after ──► count it
//                    ▲                                           │
//                    └────── same cause after repeat_after ◄─────┘

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

namespace outbound::apps {

/// Decides which failure lines are printed; not thread-safe (the caller
/// holds the lock of the stream it prints to).
class failure_throttle {
public:
  using clock = std::chrono::steady_clock;

  /// At most `max_causes` causes are remembered (default 1024): a failure
  /// text may carry what differs per occurrence (a frame's size, a parse
  /// offset), and a member runs for months. Past it, causes last printed
  /// more than `repeat_after` ago are forgotten (their next occurrence is
  /// printed anyway; a count suppressed since is then not shown), then the
  /// one printed longest ago.
  explicit failure_throttle(clock::duration repeat_after,
                            std::size_t max_causes = 1024)
    : repeat_after_(repeat_after),
      max_causes_(max_causes < 1 ? 1 : max_causes) {
  }

  /// Whether to print a failure with this cause `key` at `now`; when it is
  /// printed, `suppressed` is set to the repeats that were not.
  bool admit(const std::string& key, clock::time_point now,
             uint64_t& suppressed) {
    auto it = seen_.find(key);
    if (it == seen_.end()) {
      if (seen_.size() >= max_causes_)
        forget(now);
      seen_.emplace(key, entry{now, 0});
      suppressed = 0;
      return true;
    }
    if (now - it->second.printed < repeat_after_) {
      ++it->second.suppressed;
      ++total_suppressed_;
      return false;
    }
    suppressed = it->second.suppressed;
    it->second = entry{now, 0};
    return true;
  }

  /// Failures not printed so far.
  uint64_t suppressed() const {
    return total_suppressed_;
  }

  /// Causes remembered (at most max_causes).
  std::size_t causes() const {
    return seen_.size();
  }

private:
  /// Makes room for one cause (see the constructor).
  void forget(clock::time_point now) {
    for (auto i = seen_.begin(); i != seen_.end();) {
      if (now - i->second.printed >= repeat_after_)
        i = seen_.erase(i);
      else
        ++i;
    }
    if (seen_.size() < max_causes_)
      return;
    auto oldest = seen_.begin();
    for (auto i = seen_.begin(); i != seen_.end(); ++i)
      if (i->second.printed < oldest->second.printed)
        oldest = i;
    seen_.erase(oldest);
  }

  struct entry {
    clock::time_point printed;
    uint64_t suppressed;
  };
  clock::duration repeat_after_;
  std::size_t max_causes_;
  std::map<std::string, entry> seen_;
  uint64_t total_suppressed_ = 0;
};

} // namespace outbound::apps
