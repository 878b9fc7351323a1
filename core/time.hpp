#pragma once

// The one duration type of the request path and its seconds converters.
// Configuration speaks seconds as doubles (hyperdjango's serviceclient
// `timeout=5.0`, tsoracle's `base_backoff`); every pure state machine and
// actor timer runs on whole nanoseconds. These converters are the only
// place where one becomes the other, so the rounding, the handling of
// nonsense (NaN, infinities, negatives) and the saturation near int64
// overflow are the same for the service client, the coalescing driver and
// the feed watcher. Pure: no clock is read here.

#include "config/config_error.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>

namespace outbound {
inline namespace core {

/// Durations of the request path: whole nanoseconds (int64; ~292 years),
/// the unit of every actor timer and pure state. feed_duration,
/// coalesce_duration and core/backoff.hpp's alias name this same type.
using duration = std::chrono::nanoseconds;

/// Seconds beyond which from_seconds saturates at duration::max() (about
/// 285 years: int64 nanoseconds overflow at about 292).
inline constexpr double saturating_seconds = 9.0e9;

/// Seconds (a config value) to a duration, rounded to the nearest
/// nanosecond. NaN, infinities and values <= 0 give 0; values above
/// saturating_seconds give duration::max().
inline duration from_seconds(double seconds) noexcept {
  if (!std::isfinite(seconds) || seconds <= 0.0)
    return duration{0};
  if (seconds > saturating_seconds)
    return duration::max();
  return duration{static_cast<duration::rep>(std::llround(seconds * 1e9))};
}

/// from_seconds, at most `ceiling` (callers that add the result to a time
/// point keep far below overflow this way).
inline duration from_seconds(double seconds, duration ceiling) noexcept {
  return std::min(from_seconds(seconds), ceiling);
}

/// Validates a duration setting in seconds: finite, >= 0, and > 0 unless
/// `allow_zero`. A positive value under half a nanosecond is rejected too:
/// from_seconds would round it to 0 (an instant deadline, or "off" for a
/// field where 0 means off). Throws config_error naming `field`
/// ("must be >= 0 seconds, got X", ...).
inline void validate_seconds(double x, const std::string& field,
                             bool allow_zero) {
  if (!std::isfinite(x) || x < 0.0 || (!allow_zero && x == 0.0))
    throw config_error(field, std::string{"must be "}
                                + (allow_zero ? ">= 0" : "> 0")
                                + " seconds, got " + std::to_string(x));
  if (x > 0.0 && x * 1e9 < 0.5)
    throw config_error(field, "must be at least 1e-9 seconds when not 0: a "
                              "value under half a nanosecond rounds to 0");
}

} // namespace core
} // namespace outbound
