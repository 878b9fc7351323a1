#include "actors/feed/reconnect_backoff.hpp"

#include <algorithm>

namespace outbound {

const char* to_string(session_health h) {
  switch (h) {
    case session_health::healthy_frames: return "healthy_frames";
    case session_health::healthy_stable: return "healthy_stable";
    case session_health::unhealthy: return "unhealthy";
  }
  return "unknown";
}

session_health classify_session(bool opened, uint64_t messages,
                                feed_duration connected_for,
                                feed_duration stable_period) {
  if (!opened)
    return session_health::unhealthy;
  if (messages > 0)
    return session_health::healthy_frames;
  if (connected_for >= stable_period)
    return session_health::healthy_stable;
  return session_health::unhealthy;
}

reconnect_backoff::reconnect_backoff(feed_duration base, feed_duration max)
  : base_(base), max_(std::max(base, max)), backoff_(base) {
}

void reconnect_backoff::on_session_end(session_health h) {
  if (h != session_health::unhealthy)
    backoff_ = base_;
}

feed_duration reconnect_backoff::next_delay(std::mt19937_64& rng) {
  auto b = backoff_;
  feed_duration jitter{0};
  if (b.count() > 0) {
    std::uniform_int_distribution<int64_t> u{0, b.count() - 1};
    jitter = feed_duration{u(rng)};
  }
  // Doubling saturates at max (checked before multiplying: no overflow).
  backoff_ = b > max_ / 2 ? max_ : std::min(b * 2, max_);
  return std::min(b, max_) + jitter;
}

} // namespace outbound
