#pragma once

// Numbers in JSON lines that people read as well as programs.
//
// boost::json::serialize prints every double in the shortest form that
// round-trips, always with an exponent: 60.0 is `6E1`, 200.0 is `2E2`.
// That is valid JSON (RFC 8259 section 6) and exact, but a person reading
// `"duration":6E1` has to decode it.

#include <boost/json/value.hpp>

#include <cmath>
#include <cstdint>

namespace outbound {
inline namespace protocol {

/// `x` as a JSON value that prints plainly where it can: a finite whole
/// number within +-2^53 (where every integer is exactly a double) becomes
/// an int64, printed `60` rather than `6E1`; anything else stays the double
/// (`2.5E-1`). The same number either way. For lines people read, such as
/// the first line of `outbound demo`; do not use it where a reader relies
/// on the JSON type of a field.
inline boost::json::value json_number(double x) {
  if (std::isfinite(x) && std::trunc(x) == x && std::abs(x) <= 0x1p53)
    return static_cast<std::int64_t>(x);
  return x;
}

} // namespace protocol
} // namespace outbound
