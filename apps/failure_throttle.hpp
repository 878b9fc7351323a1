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
#include <cstdint>
#include <map>
#include <string>

namespace outbound::apps {

/// Decides which failure lines are printed; not thread-safe (the caller
/// holds the lock of the stream it prints to).
class failure_throttle {
public:
  using clock = std::chrono::steady_clock;

  explicit failure_throttle(clock::duration repeat_after)
    : repeat_after_(repeat_after) {
  }

  /// Whether to print a failure with this cause `key` at `now`; when it is
  /// printed, `suppressed` is set to the repeats that were not.
  bool admit(const std::string& key, clock::time_point now,
             uint64_t& suppressed) {
    auto it = seen_.find(key);
    if (it == seen_.end()) {
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

private:
  struct entry {
    clock::time_point printed;
    uint64_t suppressed;
  };
  clock::duration repeat_after_;
  std::map<std::string, entry> seen_;
  uint64_t total_suppressed_ = 0;
};

} // namespace outbound::apps
