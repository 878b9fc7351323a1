#include "core/backoff.hpp"

#include "config/config_error.hpp"

#include <algorithm>
#include <cmath>
#include <random>

namespace outbound {
inline namespace core {

namespace {

using rep = duration::rep;

constexpr rep rep_max = std::numeric_limits<rep>::max();

duration saturating_add(duration a, duration b) {
  // Both are >= 0 here.
  if (a.count() > rep_max - b.count())
    return duration::max();
  return a + b;
}

std::string seconds_text(double x) {
  return std::to_string(x);
}

} // namespace

const char* to_string(jitter j) {
  switch (j) {
    case jitter::none: return "none";
    case jitter::additive_base: return "additive_base";
    case jitter::additive_step: return "additive_step";
    case jitter::full: return "full";
    case jitter::decorrelated: return "decorrelated";
  }
  return "unknown";
}

backoff::backoff(jitter kind, duration base, duration cap)
  : kind_(kind), base_(base), cap_(cap) {
  if (base.count() < 0)
    throw config_error("backoff.base", "must be >= 0");
  if (cap.count() < 0)
    throw config_error("backoff.cap", "must be >= 0");
}

duration backoff::step(int attempt) const noexcept {
  if (base_.count() == 0 || cap_.count() == 0)
    return duration{0};
  int n = std::max(attempt, 0);
  // base >= 1 ns, so base * 2^63 exceeds every cap: saturate before shifting.
  if (n >= 63 || base_.count() > (cap_.count() >> n))
    return cap_;
  return std::min(duration{base_.count() << n}, cap_);
}

duration backoff::delay(int attempt, rng& rng, duration previous) const {
  switch (kind_) {
    case jitter::none:
      return step(attempt);
    case jitter::additive_base: {
      auto s = step(attempt);
      if (base_.count() <= 0)
        return s;
      // The service client's draw since its first version: a double in
      // seconds over [0, base), as Python's random.uniform in hyperdjango.
      const double base_s = static_cast<double>(base_.count()) / 1e9;
      double j = std::uniform_real_distribution<double>{0.0, base_s}(rng);
      // uniform_real_distribution may round up to its upper bound; the
      // interval is half-open.
      if (j >= base_s)
        j = std::nextafter(base_s, 0.0);
      auto jn = duration{std::llround(j * 1e9)};
      // Rounding to the nanosecond must not reach base either, nor leave
      // [0, base) at all (j * 1e9 can round to 2^63 for a base near
      // duration::max(), where llround's result is unspecified).
      jn = std::clamp(jn, duration{0}, base_ - duration{1});
      return saturating_add(s, jn);
    }
    case jitter::additive_step: {
      auto s = step(attempt);
      if (s.count() <= 0)
        return s;
      std::uniform_int_distribution<rep> u{0, s.count() - 1};
      return saturating_add(s, duration{u(rng)});
    }
    case jitter::full: {
      auto s = step(attempt);
      if (s.count() <= 0)
        return s;
      std::uniform_int_distribution<rep> u{0, s.count()};
      return duration{u(rng)};
    }
    case jitter::decorrelated: {
      if (base_.count() <= 0 || cap_.count() <= 0)
        return duration{0};
      auto prev = previous.count() > 0 ? previous : base_;
      rep hi = prev.count() > rep_max / 3 ? rep_max : prev.count() * 3;
      hi = std::max(hi, base_.count());
      std::uniform_int_distribution<rep> u{base_.count(), hi};
      return std::min(duration{u(rng)}, cap_);
    }
  }
  return duration{0};
}

void validate_backoff_seconds(double base, double cap,
                              const std::string& base_field,
                              const std::string& cap_field,
                              bool cap_at_least_base) {
  if (!std::isfinite(base) || base < 0)
    throw config_error(base_field,
                       "must be >= 0 seconds, got " + seconds_text(base));
  if (!std::isfinite(cap) || cap < 0)
    throw config_error(cap_field,
                       "must be >= 0 seconds, got " + seconds_text(cap));
  // A positive value under half a nanosecond would round to 0 and turn
  // the backoff off unnoticed (as core::validate_seconds rules).
  for (auto [x, field] : {std::pair{base, &base_field}, {cap, &cap_field}})
    if (x > 0.0 && x * 1e9 < 0.5)
      throw config_error(*field, "must be at least 1e-9 seconds when not 0: "
                                 "a value under half a nanosecond rounds to 0");
  if (cap_at_least_base && cap < base)
    throw config_error(cap_field, "must be >= " + base_field);
}

} // namespace core
} // namespace outbound
