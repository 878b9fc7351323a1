#pragma once

// Keepalive and dead-peer detection of one feed WebSocket session as a pure
// state machine (hyperdjango's serviceclient docs, "Reconnect backoff", and
// serviceclient.py's keepalive; websocket-client #411). A ping goes out every
// interval; the peer is declared dead when three whole intervals pass
// without any inbound activity (a message, a pong, any frame), or — when a
// pong timeout is configured — when a ping is not followed by activity
// within it. The state is per session: on_open forgets everything from the
// previous session, so a stale timestamp can never time out a new one.
//
//   on_open(now) ──► [watching] ──on_check(now)──► dead?  → close, reconnect
//                      ▲    │                      ping due? → ping
//      on_activity ────┘    └── next check at min(next ping, silence
//                                deadline, pong deadline)

#include "core/feed_types.hpp"

#include <optional>

namespace outbound {
inline namespace feed {

/// Consecutive silent ping intervals that declare a peer dead. [3]
inline constexpr int dead_peer_intervals = 3;

/// What a keepalive check asks for.
enum class keepalive_action : uint8_t {
  /// Nothing due yet (a check woke early because activity moved the
  /// deadline).
  none,
  /// Send a ping now.
  ping,
  /// The peer is dead: close the session, count peer_timeouts, reconnect.
  dead,
};

/// "none", "ping", "dead".
const char* to_string(keepalive_action a);

struct keepalive_step {
  keepalive_action action = keepalive_action::none;
  /// When to check next (absent after `dead`, or when disabled).
  std::optional<feed_time> next_check;
};

class keepalive_state {
public:
  /// `interval` 0 disables pings and detection; `pong_timeout` 0 uses only
  /// the silent-intervals rule.
  keepalive_state(feed_duration interval, feed_duration pong_timeout);

  bool enabled() const {
    return interval_.count() > 0;
  }

  /// A session opened at `now`; returns the first check time (nullopt when
  /// disabled).
  std::optional<feed_time> on_open(feed_time now);

  /// Inbound activity of the current session.
  void on_activity(feed_time now);

  /// A check timer of the current session fired at `now`.
  keepalive_step on_check(feed_time now);

  /// When the silence rule would declare the peer dead.
  feed_time silence_deadline() const {
    return last_activity_ + interval_ * dead_peer_intervals;
  }

  feed_time last_activity() const {
    return last_activity_;
  }

private:
  feed_time next_check() const;

  feed_duration interval_;
  feed_duration pong_timeout_;
  feed_time last_activity_{};
  feed_time next_ping_{};
  /// Time of the last ping not yet followed by activity.
  std::optional<feed_time> ping_pending_;
  bool open_ = false;
};

} // namespace feed
} // namespace outbound
