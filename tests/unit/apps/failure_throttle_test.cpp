// apps/failure_throttle.hpp: one line per distinct failure cause within
// repeat_after, and a bounded memory of causes (a long-running member sees
// failure texts that differ per occurrence).

#include "apps/failure_throttle.hpp"

#include <gtest/gtest.h>

#include <string>

using outbound::apps::failure_throttle;
using namespace std::chrono_literals;

namespace {

using tp = failure_throttle::clock::time_point;

TEST(FailureThrottle, ARepeatWithinTheWindowIsCountedAndShownWithTheNextLine) {
  failure_throttle t{60s};
  tp t0{};
  uint64_t n = 99;
  EXPECT_TRUE(t.admit("a", t0, n));
  EXPECT_EQ(n, 0u);
  EXPECT_FALSE(t.admit("a", t0 + 10s, n));
  EXPECT_FALSE(t.admit("a", t0 + 59s, n));
  EXPECT_TRUE(t.admit("b", t0 + 59s, n));
  EXPECT_TRUE(t.admit("a", t0 + 60s, n));
  EXPECT_EQ(n, 2u);
  EXPECT_EQ(t.suppressed(), 2u);
}

TEST(FailureThrottle, DistinctCausesDoNotGrowItsMemoryWithoutBound) {
  // Per-frame texts ("message announcing 123457 bytes ..."), one a second
  // for a day: the memory stays at the bound.
  failure_throttle t{60s, 100};
  tp t0{};
  uint64_t n = 0;
  for (int i = 0; i < 86400; ++i)
    EXPECT_TRUE(t.admit("frame " + std::to_string(i), t0 + i * 1s, n)) << i;
  EXPECT_LE(t.causes(), 100u);
}

TEST(FailureThrottle, ForgettingKeepsTheCausesStillInTheirWindow) {
  failure_throttle t{60s, 4};
  tp t0{};
  uint64_t n = 0;
  EXPECT_TRUE(t.admit("old", t0, n));
  EXPECT_TRUE(t.admit("hot", t0 + 70s, n));
  EXPECT_TRUE(t.admit("x", t0 + 71s, n));
  EXPECT_TRUE(t.admit("y", t0 + 72s, n));
  // Full: "old" is past its window and goes; "hot" stays quiet.
  EXPECT_TRUE(t.admit("z", t0 + 73s, n));
  EXPECT_EQ(t.causes(), 4u);
  EXPECT_FALSE(t.admit("hot", t0 + 74s, n));
  // A burst of new causes within one window evicts the oldest printed.
  EXPECT_TRUE(t.admit("w", t0 + 75s, n));
  EXPECT_EQ(t.causes(), 4u);
  EXPECT_TRUE(t.admit("hot", t0 + 76s, n)) << "the oldest went first";
}

} // namespace
