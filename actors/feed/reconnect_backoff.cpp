#include "actors/feed/reconnect_backoff.hpp"

#include <algorithm>

namespace outbound {
inline namespace feed {

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
  : backoff_(core::jitter::additive_step, base, std::max(base, max)) {
}

void reconnect_backoff::on_session_end(session_health h) {
  if (h != session_health::unhealthy)
    attempt_ = 0;
}

feed_duration reconnect_backoff::next_delay(core::rng& rng) {
  auto d = backoff_.delay(attempt_, rng);
  // The step saturates at the cap long before 64: stop counting there.
  attempt_ = std::min(attempt_ + 1, 64);
  return d;
}

} // namespace feed
} // namespace outbound
