#pragma once

// Reconnect backoff of the feed WebSocket as a pure state machine
// (hyperdjango's serviceclient docs, "Reconnect backoff"). The delay
// before a reconnect is `min(backoff, max) + U[0, backoff)`, then the backoff
// doubles (capped at max). It returns to the base only after a healthy
// session — one that received at least one complete message or stayed
// connected for stable_period — never on mere connect success, so a hub that
// accepts and drops at once keeps being backed off from. The formula is
// core::backoff's additive_step jitter; this class keeps the attempt count.
//
//   [base] ──session ends──► delay = min(b, max) + U[0, b); b = min(2b, max)
//     ▲                                         │
//     └───────── session ended healthy ◄────────┘

#include "core/backoff.hpp"
#include "core/feed_types.hpp"
#include "core/rng.hpp"

namespace outbound {
inline namespace feed {

/// Whether an ended session resets the backoff.
enum class session_health : uint8_t {
  /// Received at least one complete message.
  healthy_frames,
  /// Connected for at least stable_period.
  healthy_stable,
  /// Never opened, or dropped early without a message.
  unhealthy,
};

/// "healthy_frames", "healthy_stable", "unhealthy".
const char* to_string(session_health h);

/// Classifies an ended session: `opened` whether the upgrade succeeded,
/// `messages` complete messages received, `connected_for` time from open to
/// end.
session_health classify_session(bool opened, uint64_t messages,
                                feed_duration connected_for,
                                feed_duration stable_period);

class reconnect_backoff {
public:
  /// `base` and `max` (max >= base >= 0; a max below base counts as base).
  reconnect_backoff(feed_duration base, feed_duration max);

  /// A session ended: a healthy one restores the base.
  void on_session_end(session_health h);

  /// The delay before the next reconnect, then doubles the backoff.
  feed_duration next_delay(core::rng& rng);

  /// The backoff the next delay is computed from.
  feed_duration current() const {
    return backoff_.step(attempt_);
  }

private:
  core::backoff backoff_;
  /// Reconnects since the last healthy session (0: the base).
  int attempt_ = 0;
};

} // namespace feed
} // namespace outbound
