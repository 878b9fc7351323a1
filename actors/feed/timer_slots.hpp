#pragma once

// One clock timer for the deadlines a feed watcher keeps for its whole life:
// the keepalive check (the handshake guard while a session connects) and the
// poll tick. CAF 0.17's actor clock takes every delayed message through a
// mutex and a wake-up of its own thread
// (libcaf_core/src/detail/thread_safe_actor_clock.cpp), and a watcher
// armed three at connect: the handshake guard, the first keepalive check
// and the first poll tick. Here a deadline needs no timer of its own when a
// timer already pending fires no later: that timer's firing handles every
// deadline due and arms one timer at the earliest left. Netty's
// IdleStateHandler reschedules its idle task the same way
// (handler/timeout/IdleStateHandler.java), as does this repository's HTTP
// session for its exchange deadline (protocol/detail/http_session.hpp).
//
//   set(slot, at) ─┐                      ┌─► due(fired_at, now): the slots
//   clear(slot) ───┼─► arm(): a time to   │   whose deadline is ≤ now,
//                  │   arm a timer at, if │   earliest first, cleared
//                  │   none pending fires ┘   (the caller handles them,
//                  │   by the earliest        sets them again, then arm())
//
// A deadline is due only by its current value: a timer armed for a cleared
// or moved deadline fires, finds nothing due, and at most arms one timer for
// what is left. Pure: explicit time, no clock, no actor.

#include "core/feed_types.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace outbound {
inline namespace feed {

/// A watcher's recurring deadlines.
enum class timer_slot : uint8_t {
  /// The keepalive check of the open session (keepalive_state::on_check);
  /// while a session connects, its handshake guard.
  keepalive,
  /// The ledger poll tick (feed_config::poll_interval).
  poll,
};

inline constexpr std::size_t timer_slot_count = 2;

/// The slots that fired together, earliest deadline first.
struct due_slots {
  std::array<timer_slot, timer_slot_count> slots{};
  std::size_t count = 0;

  const timer_slot* begin() const {
    return slots.data();
  }
  const timer_slot* end() const {
    return slots.data() + count;
  }
};

class timer_slots {
public:
  /// `s` is due at `at`, replacing its previous deadline. Call arm() after.
  void set(timer_slot s, feed_time at);

  /// `s` is no longer due.
  void clear(timer_slot s);

  /// The deadline of `s`, if set.
  std::optional<feed_time> deadline(timer_slot s) const {
    return due_[index(s)];
  }

  /// The time to arm a new timer at (the earliest deadline), or nullopt
  /// when no deadline is set or a pending timer fires no later. A returned
  /// time counts as pending until due() reports it fired.
  std::optional<feed_time> arm();

  /// The timer armed at `fired_at` (a time arm() returned) fired at `now`:
  /// it is no longer pending. Returns the slots whose deadline is at or
  /// before `now`, earliest first, each cleared.
  due_slots due(feed_time fired_at, feed_time now);

  /// Timers armed and not yet fired.
  std::size_t pending() const {
    return pending_.size();
  }

private:
  static std::size_t index(timer_slot s) {
    return static_cast<std::size_t>(s);
  }

  std::array<std::optional<feed_time>, timer_slot_count> due_{};
  /// Fire times of the timers pending; a few at most (one is armed only
  /// for a deadline earlier than every pending one, and each firing
  /// removes one).
  std::vector<feed_time> pending_;
};

} // namespace feed
} // namespace outbound
