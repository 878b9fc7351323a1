#pragma once

// The fence gate of one watcher as a pure state machine: a deadline on the
// actor clock after which the watcher starts no delivery. A feed group sets
// it to the last moment its lease on the feed is surely still held (the
// time the last successful keepalive was sent + TTL - a margin), so a
// process that lost its lease without knowing it (paused, cut off from the
// store) stops delivering before another process can own the feed; the
// one delivery already dispatched is covered by the owner token
// (feed_event::owner_token; Kleppmann, "How to do distributed locking",
// fencing tokens; etcd's lease TTL, "Lease API" in the etcd docs). No CAF,
// no clock reads: `now` is an argument.
//
//   [open] ──may_start at or after the deadline──► [holding]
//     ▲  (no deadline, or now < deadline)            │ the front delivery
//     │                                              │ waits; queue and
//     └──── on_fence with a deadline after now ◄─────┘ sessions are kept
//
// A deadline in the past is a hold; a later deadline in the future lifts
// it. Nothing is recalled: a delivery started before the deadline runs to
// its acknowledgement.

#include "core/feed_types.hpp"

#include <cstdint>
#include <optional>

namespace outbound {
inline namespace feed {

class fence_gate {
public:
  /// A deadline is set (a fence message arrived at least once); without
  /// one every delivery may start (no gate).
  bool armed() const {
    return deadline_.has_value();
  }

  /// May a delivery start at `now`? Only before the deadline: false at or
  /// after it, and the hold starts (counted once per hold).
  bool may_start(feed_time now) {
    if (!deadline_ || now < *deadline_)
      return true;
    if (!holding_) {
      holding_ = true;
      hold_since_ = now;
      ++held_deliveries_;
    }
    return false;
  }

  /// A new deadline (any time, earlier or later than the last one). A hold
  /// ends when the deadline is after `now`; the caller then starts the
  /// waiting delivery. True when it ended a hold.
  bool on_fence(feed_time deadline, feed_time now) {
    deadline_ = deadline;
    if (!holding_ || now >= deadline)
      return false;
    holding_ = false;
    held_time_ += now - hold_since_;
    return true;
  }

  /// The deadline in force; nullopt: no gate.
  std::optional<feed_time> deadline() const {
    return deadline_;
  }

  /// A delivery waits at the gate now.
  bool holding() const {
    return holding_;
  }

  /// Holds so far: deliveries (a batch is one) the gate kept from
  /// starting, each counted once however long it waited.
  uint64_t held_deliveries() const {
    return held_deliveries_;
  }

  /// Total time deliveries waited at the gate, the hold in progress
  /// included (up to `now`).
  feed_duration held_time(feed_time now) const {
    return holding_ && now > hold_since_ ? held_time_ + (now - hold_since_)
                                         : held_time_;
  }

private:
  std::optional<feed_time> deadline_;
  bool holding_ = false;
  feed_time hold_since_{};
  uint64_t held_deliveries_ = 0;
  feed_duration held_time_{0};
};

} // namespace feed
} // namespace outbound
