#include "actors/feed/keepalive.hpp"

#include <algorithm>

namespace outbound {
inline namespace feed {

const char* to_string(keepalive_action a) {
  switch (a) {
    case keepalive_action::none: return "none";
    case keepalive_action::ping: return "ping";
    case keepalive_action::dead: return "dead";
  }
  return "unknown";
}

keepalive_state::keepalive_state(feed_duration interval,
                                 feed_duration pong_timeout)
  : interval_(interval), pong_timeout_(pong_timeout) {
}

std::optional<feed_time> keepalive_state::on_open(feed_time now) {
  open_ = true;
  last_activity_ = now;
  next_ping_ = now + interval_;
  ping_pending_.reset();
  if (!enabled())
    return std::nullopt;
  return next_check();
}

void keepalive_state::on_activity(feed_time now) {
  if (now > last_activity_)
    last_activity_ = now;
  ping_pending_.reset();
}

feed_time keepalive_state::next_check() const {
  auto t = std::min(next_ping_, silence_deadline());
  if (ping_pending_ && pong_timeout_.count() > 0)
    t = std::min(t, *ping_pending_ + pong_timeout_);
  return t;
}

keepalive_step keepalive_state::on_check(feed_time now) {
  keepalive_step step;
  if (!enabled() || !open_)
    return step;
  bool pong_missed = ping_pending_ && pong_timeout_.count() > 0
                     && now >= *ping_pending_ + pong_timeout_;
  if (now >= silence_deadline() || pong_missed) {
    open_ = false;
    step.action = keepalive_action::dead;
    return step;
  }
  if (now >= next_ping_) {
    step.action = keepalive_action::ping;
    if (!ping_pending_)
      ping_pending_ = now;
    // Keep the cadence; a check that ran late does not fire a burst.
    next_ping_ += interval_;
    if (next_ping_ <= now)
      next_ping_ = now + interval_;
  }
  step.next_check = next_check();
  return step;
}

} // namespace feed
} // namespace outbound
