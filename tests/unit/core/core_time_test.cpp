#include "core/time.hpp"

#include "actors/call/retry_state.hpp"
#include "actors/coalesce/coalesce_types.hpp"
#include "config/config_error.hpp"
#include "core/feed_types.hpp"

#include <gtest/gtest.h>

#include <limits>
#include <string>

using namespace std::chrono_literals;
using outbound::core::duration;
using outbound::core::from_seconds;

namespace {

const double nan_s = std::numeric_limits<double>::quiet_NaN();
const double inf_s = std::numeric_limits<double>::infinity();

struct seconds_case {
  double seconds;
  duration want;
};

// Written out by hand: rounding to the nearest nanosecond, 0 for nonsense,
// saturation above 9e9 s.
const seconds_case seconds_table[] = {
  {0.0, 0ns},
  {-0.0, 0ns},
  {-1.0, 0ns},
  {nan_s, 0ns},
  {inf_s, 0ns},
  {-inf_s, 0ns},
  {1e-10, 0ns},  // under half a nanosecond rounds to 0
  {0.6e-9, 1ns}, // over half rounds up
  {1e-9, 1ns},
  {0.1, 100ms},
  {0.05, 50ms},
  {1.5, 1500ms},
  {30.0, 30s},
  {1e9, duration{1'000'000'000'000'000'000}},
  {9e9, duration{9'000'000'000'000'000'000}},
  {9.1e9, duration::max()},
  {1e300, duration::max()},
};

} // namespace

TEST(CoreTime, FromSecondsRoundsToTheNanosecondAndSaturates) {
  for (const auto& c : seconds_table)
    EXPECT_EQ(from_seconds(c.seconds), c.want) << c.seconds;
}

TEST(CoreTime, ACeilingBoundsTheResult) {
  EXPECT_EQ(from_seconds(1e300, 5s), 5s);
  EXPECT_EQ(from_seconds(2.0, 5s), 2s);
  EXPECT_EQ(from_seconds(-3.0, 5s), 0ns);
}

TEST(CoreTime, EveryComponentsConverterAgreesWithTheCore) {
  // The service client and the coalescing driver stop at 1e9 s (their
  // delays are added to time points); the feed saturates at the top.
  const duration ceiling = duration{1'000'000'000'000'000'000};
  for (const auto& c : seconds_table) {
    EXPECT_EQ(outbound::seconds_to_ns(c.seconds), std::min(c.want, ceiling))
      << c.seconds;
    EXPECT_EQ(outbound::coalesce_seconds(c.seconds), std::min(c.want, ceiling))
      << c.seconds;
    EXPECT_EQ(outbound::feed_seconds(c.seconds), c.want) << c.seconds;
  }
}

TEST(CoreTime, ValidateSecondsNamesTheFieldOfABadValue) {
  using outbound::config_error;
  using outbound::core::validate_seconds;
  auto verdict = [](double x, bool allow_zero) -> std::string {
    try {
      validate_seconds(x, "poll_interval", allow_zero);
    } catch (const config_error& e) {
      return e.field();
    }
    return "ok";
  };
  EXPECT_EQ(verdict(1.0, false), "ok");
  EXPECT_EQ(verdict(1e-9, false), "ok");
  EXPECT_EQ(verdict(0.0, true), "ok");
  EXPECT_EQ(verdict(0.0, false), "poll_interval");
  EXPECT_EQ(verdict(-0.1, true), "poll_interval");
  EXPECT_EQ(verdict(nan_s, true), "poll_interval");
  EXPECT_EQ(verdict(inf_s, true), "poll_interval");
  EXPECT_EQ(verdict(1e-10, true), "poll_interval"); // would round to 0
  EXPECT_EQ(verdict(4.9e-10, false), "poll_interval");
}
