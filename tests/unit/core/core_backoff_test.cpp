#include "core/backoff.hpp"

#include "config/config_error.hpp"
#include "core/rng.hpp"

#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

using namespace std::chrono_literals;
using outbound::core::backoff;
using outbound::core::duration;
using outbound::core::jitter;
using generator = outbound::core::rng;

namespace {

/// One row: a variant, an attempt (and the previous delay for
/// decorrelated), and the closed interval [lo, hi] every delay must fall in,
/// written out by hand from the formula (not computed by the code under
/// test). The draws must also reach both ends closely.
struct bounds_case {
  jitter kind;
  int attempt;
  duration previous;
  duration lo;
  duration hi;
};

std::ostream& operator<<(std::ostream& os, const bounds_case& c) {
  return os << outbound::core::to_string(c.kind) << " attempt " << c.attempt
            << " previous " << c.previous.count() << "ns";
}

// base 100 ms, cap 10 s: steps 100, 200, 400, 800 ms, ..., 6.4 s, then 10 s.
const duration base = 100ms;
const duration cap = 10s;
const duration ns1 = duration{1};

const bounds_case bounds_table[] = {
  // none: exactly the step.
  {jitter::none, 0, {}, 100ms, 100ms},
  {jitter::none, 3, {}, 800ms, 800ms},
  {jitter::none, 6, {}, 6400ms, 6400ms},
  {jitter::none, 7, {}, 10s, 10s},
  {jitter::none, 64, {}, 10s, 10s},
  {jitter::none, INT_MAX, {}, 10s, 10s},
  {jitter::none, -5, {}, 100ms, 100ms},
  // additive_base: step + U[0, base): the jitter never grows with the step.
  {jitter::additive_base, 0, {}, 100ms, 200ms - ns1},
  {jitter::additive_base, 3, {}, 800ms, 900ms - ns1},
  {jitter::additive_base, 7, {}, 10s, 10100ms - ns1},
  {jitter::additive_base, 64, {}, 10s, 10100ms - ns1},
  // additive_step: step + U[0, step): [step, 2 step).
  {jitter::additive_step, 0, {}, 100ms, 200ms - ns1},
  {jitter::additive_step, 3, {}, 800ms, 1600ms - ns1},
  {jitter::additive_step, 7, {}, 10s, 20s - ns1},
  {jitter::additive_step, 200, {}, 10s, 20s - ns1},
  // full: U[0, step], both ends included.
  {jitter::full, 0, {}, 0ns, 100ms},
  {jitter::full, 3, {}, 0ns, 800ms},
  {jitter::full, 7, {}, 0ns, 10s},
  {jitter::full, 65, {}, 0ns, 10s},
  // decorrelated: min(cap, U[base, 3 previous]), previous = base at first.
  {jitter::decorrelated, 0, {}, 100ms, 300ms},
  {jitter::decorrelated, 9, 1s, 100ms, 3s},
  {jitter::decorrelated, 0, 5s, 100ms, 10s},
  {jitter::decorrelated, 0, 50ms, 100ms, 150ms},
};

class BackoffBounds : public testing::TestWithParam<bounds_case> {};

} // namespace

TEST_P(BackoffBounds, EveryDelayLiesInTheFormulasIntervalAndSpansIt) {
  const auto& c = GetParam();
  backoff b{c.kind, base, cap};
  generator rng{11};
  duration lo_seen = duration::max();
  duration hi_seen = duration::min();
  for (int i = 0; i < 4000; ++i) {
    auto d = b.delay(c.attempt, rng, c.previous);
    ASSERT_GE(d, c.lo) << c;
    ASSERT_LE(d, c.hi) << c;
    lo_seen = std::min(lo_seen, d);
    hi_seen = std::max(hi_seen, d);
  }
  // The draws reach both ends of the interval (within 1 % of its width):
  // a formula with the right bounds but a narrower spread fails here.
  auto slack = (c.hi - c.lo) / 100;
  EXPECT_LE(lo_seen - c.lo, slack) << c;
  EXPECT_LE(c.hi - hi_seen, slack) << c;
}

INSTANTIATE_TEST_SUITE_P(VariantsTimesAttempts, BackoffBounds,
                         testing::ValuesIn(bounds_table));

TEST(CoreBackoff, StepIsCappedExponentialAndSaturatesForHugeAttemptsAndBases) {
  backoff b{jitter::none, base, cap};
  EXPECT_EQ(b.step(0), 100ms);
  EXPECT_EQ(b.step(1), 200ms);
  EXPECT_EQ(b.step(6), 6400ms);
  EXPECT_EQ(b.step(7), 10s);
  for (int n : {62, 63, 64, 65, 127, 1000, INT_MAX})
    EXPECT_EQ(b.step(n), 10s) << n;
  // A base near the top of the range never overflows while doubling.
  backoff huge{jitter::none, duration::max() / 2 + ns1, duration::max()};
  EXPECT_EQ(huge.step(0), duration::max() / 2 + ns1);
  for (int n : {1, 2, 63, 64, INT_MAX})
    EXPECT_EQ(huge.step(n), duration::max()) << n;
  // The smallest base reaches a huge cap only at attempt 63.
  backoff tiny{jitter::none, ns1, duration::max()};
  EXPECT_EQ(tiny.step(62), duration{int64_t{1} << 62});
  EXPECT_EQ(tiny.step(63), duration::max());
  // A cap below the base: every step is the cap.
  backoff low{jitter::none, 1s, 300ms};
  EXPECT_EQ(low.step(0), 300ms);
  EXPECT_EQ(low.step(9), 300ms);
}

TEST(CoreBackoff, NoVariantGoesNegativeOrOverflowsAtTheTopOfTheRange) {
  generator rng{3};
  for (auto kind : {jitter::none, jitter::additive_base, jitter::additive_step,
                    jitter::full, jitter::decorrelated}) {
    for (duration b0 : std::initializer_list<duration>{
           ns1, 1h, duration::max() / 3, duration::max()}) {
      backoff b{kind, b0, duration::max()};
      for (int n : {0, 1, 62, 63, 64, 100, INT_MAX}) {
        auto d = b.delay(n, rng, duration::max());
        ASSERT_GE(d.count(), 0) << to_string(kind) << " " << n;
        // Only the additive variants may exceed the cap (by their jitter);
        // the sum saturates at duration::max().
        ASSERT_LE(d, duration::max());
      }
    }
    backoff capped{kind, std::chrono::hours{1000000}, 5s};
    for (int n : {0, 20, 64, 1000}) {
      auto d = capped.delay(n, rng, 1s);
      ASSERT_GE(d.count(), 0);
      if (kind == jitter::full || kind == jitter::none
          || kind == jitter::decorrelated)
        ASSERT_LE(d, 5s) << to_string(kind);
      else
        ASSERT_GE(d, 5s) << to_string(kind);
    }
  }
}

TEST(CoreBackoff, ZeroBaseOrCapMeansRetryAtOnceWithoutDrawing) {
  for (auto kind : {jitter::none, jitter::additive_step, jitter::full,
                    jitter::decorrelated}) {
    for (auto [b0, c0] : {std::pair<duration, duration>{0ns, 10s},
                          std::pair<duration, duration>{100ms, 0ns}}) {
      backoff b{kind, b0, c0};
      generator rng{5};
      const generator untouched{5};
      for (int n : {0, 3, 64})
        EXPECT_EQ(b.delay(n, rng), 0ns) << to_string(kind);
      EXPECT_TRUE(rng == untouched) << to_string(kind) << " drew";
    }
  }
  // additive_base keeps the service client's rule: a zero base is no wait
  // at all, but a zero cap with a positive base still waits U[0, base).
  generator rng{5};
  const generator untouched{5};
  EXPECT_EQ((backoff{jitter::additive_base, 0ns, 10s}.delay(4, rng)), 0ns);
  EXPECT_TRUE(rng == untouched);
  for (int i = 0; i < 200; ++i) {
    auto d = backoff{jitter::additive_base, 1s, 0ns}.delay(3, rng);
    ASSERT_GE(d, 0ns);
    ASSERT_LT(d, 1s);
  }
}

TEST(CoreBackoff, DrawsExactlyAsTheStandardDistributionsItReplaced) {
  // The seeded tests of the service client, the coalescing driver and the
  // feed watcher rely on the delays being one variate of the same std::
  // distribution over the same range, in the same order.
  for (uint64_t seed : {0u, 1u, 42u, 977u}) {
    generator a{seed}, b{seed};
    backoff add{jitter::additive_base, 100ms, 10s};
    backoff full{jitter::full, 50ms, 5s};
    for (int n = 0; n < 12; ++n) {
      double j = std::uniform_real_distribution<double>{0.0, 0.1}(b);
      auto want = std::min<duration>(100ms * (int64_t{1} << n), 10s)
                  + duration{std::llround(j * 1e9)};
      EXPECT_EQ(add.delay(n, a), want) << seed << " " << n;
      std::uniform_int_distribution<int64_t> u{
        0, std::min<duration>(50ms * (int64_t{1} << n), 5s).count()};
      EXPECT_EQ(full.delay(n, a), duration{u(b)}) << seed << " " << n;
    }
    generator m{seed}, k{seed};
    backoff step{jitter::additive_step, 200ms, 10s};
    for (int n = 0; n < 12; ++n) {
      auto s = std::min<duration>(200ms * (int64_t{1} << n), 10s);
      std::uniform_int_distribution<int64_t> u{0, s.count() - 1};
      EXPECT_EQ(step.delay(n, m), s + duration{u(k)}) << seed << " " << n;
    }
  }
}

TEST(CoreBackoff, ASeedGivesTheSameDelaysEveryTimeAndAnotherSeedOthers) {
  for (auto kind : {jitter::additive_base, jitter::additive_step, jitter::full,
                    jitter::decorrelated}) {
    backoff b{kind, 100ms, 10s};
    auto run = [&](uint64_t seed) {
      generator rng{seed};
      std::vector<duration> out;
      duration prev{0};
      for (int n = 0; n < 16; ++n)
        out.push_back(prev = b.delay(n, rng, prev));
      return out;
    };
    EXPECT_EQ(run(7), run(7)) << to_string(kind);
    EXPECT_NE(run(7), run(8)) << to_string(kind);
  }
}

TEST(CoreBackoff, DecorrelatedGrowsFromThePreviousDelayUpToTheCap) {
  backoff b{jitter::decorrelated, 100ms, 10s};
  generator rng{21};
  duration prev{0};
  bool reached_cap = false;
  for (int i = 0; i < 200; ++i) {
    auto d = b.delay(i, rng, prev);
    ASSERT_GE(d, 100ms);
    ASSERT_LE(d, std::min<duration>(10s, 3 * std::max<duration>(prev, 100ms)));
    reached_cap = reached_cap || d == 10s;
    prev = d;
  }
  EXPECT_TRUE(reached_cap);
}

TEST(CoreBackoff, BadSettingsFailNamingTheField) {
  using outbound::config_error;
  using outbound::core::validate_backoff_seconds;
  auto field_of = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const config_error& e) {
      return e.field();
    }
    return "(nothing thrown)";
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(
    field_of([] { validate_backoff_seconds(0.1, 10, "a.base", "a.max"); }),
    "(nothing thrown)");
  EXPECT_EQ(field_of([] { validate_backoff_seconds(0, 0, "a.base", "a.max"); }),
            "(nothing thrown)");
  EXPECT_EQ(field_of([] { validate_backoff_seconds(1, 0, "a.base", "a.max"); }),
            "(nothing thrown)");
  EXPECT_EQ(
    field_of([] { validate_backoff_seconds(-0.1, 10, "a.base", "a.max"); }),
    "a.base");
  EXPECT_EQ(
    field_of([&] { validate_backoff_seconds(nan, 10, "a.base", "a.max"); }),
    "a.base");
  EXPECT_EQ(
    field_of([&] { validate_backoff_seconds(0.1, inf, "a.base", "a.max"); }),
    "a.max");
  EXPECT_EQ(
    field_of([] { validate_backoff_seconds(1e-10, 10, "a.base", "a.max"); }),
    "a.base")
    << "a positive base that rounds to 0 ns";
  EXPECT_EQ(
    field_of([] { validate_backoff_seconds(0, 4e-10, "a.base", "a.max"); }),
    "a.max");
  EXPECT_EQ(
    field_of([] { validate_backoff_seconds(1e-9, 1e-9, "a.base", "a.max"); }),
    "(nothing thrown)");
  EXPECT_EQ(
    field_of([] { validate_backoff_seconds(0.1, -1, "a.base", "a.max"); }),
    "a.max");
  EXPECT_EQ(
    field_of([] { validate_backoff_seconds(1, 0.5, "a.base", "a.max", true); }),
    "a.max");
  EXPECT_EQ(field_of([] { backoff(jitter::full, -1ns, 1s); }), "backoff.base");
  EXPECT_EQ(field_of([] { backoff(jitter::full, 1ns, -1s); }), "backoff.cap");
}
