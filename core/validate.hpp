#pragma once

// The checks every configuration's validate() is built from (client,
// coalescing, hedging, demo, metrics, feeds), so that a rule such as "a
// finite number > 0" is written, and worded, once. Each throws
// config_error naming the field; every comparison is written so that NaN
// fails it. Seconds-valued fields use validate_seconds (core/time.hpp),
// which also refuses a positive value that rounds to 0 ns. Pure: no CAF,
// no Asio.

#include "config/config_error.hpp"

#include <charconv>
#include <cmath>
#include <sstream>
#include <string>

namespace outbound {
inline namespace core {

/// ", got X": the value given, as an error text ends, in the shortest form
/// that reads back as the same double (2, 0.5, 86400.01, nan, inf), so a
/// value just out of range never prints as the bound.
inline std::string got_value(double x) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, x);
  return ", got " + std::string(buf, r.ptr);
}

/// Finite and >= 0 (NaN and infinities are not).
inline bool finite_non_negative(double x) noexcept {
  return std::isfinite(x) && x >= 0.0;
}

/// Finite and > 0 (NaN and infinities are not).
inline bool finite_positive(double x) noexcept {
  return std::isfinite(x) && x > 0.0;
}

/// Throws config_error(field, "must be a finite number > 0, got X") unless
/// finite_positive(x).
inline void check_positive(double x, const std::string& field) {
  if (!finite_positive(x))
    throw config_error(field, "must be a finite number > 0" + got_value(x));
}

/// Throws config_error(field, "must be a finite number >= 0, got X") unless
/// finite_non_negative(x).
inline void check_non_negative(double x, const std::string& field) {
  if (!finite_non_negative(x))
    throw config_error(field, "must be a finite number >= 0" + got_value(x));
}

/// Throws config_error(field, "must be strictly between 0 and 1, got X")
/// unless 0 < x < 1 (a percentile or a fraction that excludes both ends).
inline void check_fraction_open(double x, const std::string& field) {
  if (!(x > 0.0 && x < 1.0))
    throw config_error(field,
                       "must be strictly between 0 and 1" + got_value(x));
}

/// Throws config_error(field, "must be between LO and HI, got X") unless x
/// is finite and lo <= x <= hi.
inline void check_range(double x, double lo, double hi,
                        const std::string& field) {
  if (!(std::isfinite(x) && x >= lo && x <= hi)) {
    std::ostringstream os;
    os << "must be between " << lo << " and " << hi;
    throw config_error(field, os.str() + got_value(x));
  }
}

} // namespace core
} // namespace outbound
