#include "actors/hedge/rolling_rate.hpp"
#include "actors/hedge/token_bucket.hpp"

#include <gtest/gtest.h>

#include <chrono>

using namespace outbound;
using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using std::chrono::seconds;

namespace {

const hedge_time t0 = hedge_time{} + std::chrono::hours(1);

} // namespace

TEST(TokenBucket, RateIsRpsTimesBudgetAndStartsFull) {
  token_bucket b{100.0, 10.0, t0}; // 10 tokens/s, burst 20
  EXPECT_DOUBLE_EQ(b.rate(), 10.0);
  EXPECT_DOUBLE_EQ(b.burst(), 20.0);
  EXPECT_DOUBLE_EQ(b.tokens(t0), 20.0);
  for (int i = 0; i < 20; ++i)
    EXPECT_TRUE(b.try_take(t0)) << i;
  EXPECT_FALSE(b.try_take(t0));
  // 100 ms at 10 tokens/s refills exactly one token.
  EXPECT_FALSE(b.try_take(t0 + milliseconds(99)));
  EXPECT_TRUE(b.try_take(t0 + milliseconds(100)));
  EXPECT_FALSE(b.try_take(t0 + milliseconds(100)));
  // Never above the burst.
  EXPECT_DOUBLE_EQ(b.tokens(t0 + seconds(100)), 20.0);
}

TEST(TokenBucket, BurstIsAtLeastOneToken) {
  token_bucket b{2.0, 10.0, t0}; // 0.2 tokens/s, burst max(0.4, 1) = 1
  EXPECT_DOUBLE_EQ(b.rate(), 0.2);
  EXPECT_DOUBLE_EQ(b.burst(), 1.0);
  EXPECT_TRUE(b.try_take(t0));
  EXPECT_FALSE(b.try_take(t0 + milliseconds(4999)));
  EXPECT_TRUE(b.try_take(t0 + seconds(5)));
}

TEST(TokenBucket, ZeroBudgetNeverHandsOutAToken) {
  // hedging.md case 9 (a): budget ratio 0 suppresses every hedge.
  token_bucket b{100.0, 0.0, t0};
  EXPECT_DOUBLE_EQ(b.burst(), 0.0);
  EXPECT_FALSE(b.try_take(t0));
  EXPECT_FALSE(b.try_take(t0 + seconds(3600)));
}

TEST(TokenBucket, SetRpsRecomputesAndClips) {
  token_bucket b{100.0, 10.0, t0}; // 20 tokens
  b.set_rps(10.0, t0);             // 1 token/s, burst 2: clipped to 2
  EXPECT_DOUBLE_EQ(b.rate(), 1.0);
  EXPECT_DOUBLE_EQ(b.burst(), 2.0);
  EXPECT_DOUBLE_EQ(b.tokens(t0), 2.0);
  EXPECT_TRUE(b.try_take(t0));
  EXPECT_TRUE(b.try_take(t0));
  EXPECT_FALSE(b.try_take(t0));
  // Refill at the old rate up to the change, then at the new one.
  b.set_rps(100.0, t0 + milliseconds(500)); // +0.5 at 1/s
  EXPECT_DOUBLE_EQ(b.tokens(t0 + milliseconds(500)), 0.5);
  EXPECT_NEAR(b.tokens(t0 + milliseconds(550)), 1.0, 1e-9); // +0.5 at 10/s
  EXPECT_DOUBLE_EQ(b.burst(), 20.0); // raising the burst adds no token
}

TEST(RollingRate, FormulaWeighsThePreviousWindowDown) {
  rolling_rate r{10.0, t0};
  for (int i = 0; i < 50; ++i)
    r.record(t0 + milliseconds(100 * i)); // 50 in the first 5 s
  // Cold start (no previous window): the rate over the 5 s observed.
  EXPECT_DOUBLE_EQ(r.rps(t0 + seconds(5)), 10.0); // 50 / 5
  // At 10 s the window rotates: previous 50, elapsed 0.
  EXPECT_DOUBLE_EQ(r.rps(t0 + seconds(10)), 5.0);
  for (int i = 0; i < 20; ++i)
    r.record(t0 + seconds(12));
  // elapsed 2.5 s: (50 × 0.75 + 20) / 10
  EXPECT_DOUBLE_EQ(r.rps(t0 + milliseconds(12500)), 5.75);
}

// outbound's change to httpx-hedged: a new key's first burst is not
// divided by the whole window (which starved the budget that follows it).
TEST(RollingRate, ColdStartDividesByTheTimeObservedNeverLessThanOneSecond) {
  rolling_rate r{10.0, t0};
  r.record(t0, 3);
  EXPECT_DOUBLE_EQ(r.rps(t0), 3.0); // 3 / 1 s, not 3 / 0
  for (int i = 0; i < 500; ++i)
    r.record(t0 + milliseconds(4 * i)); // 500 more within 2 s
  EXPECT_DOUBLE_EQ(r.rps(t0 + seconds(2)), 503.0 / 2.0);
  EXPECT_DOUBLE_EQ(r.rps(t0 + milliseconds(9999)), 503.0 / 9.999);
  // Idle for two windows: cold again.
  rolling_rate s{10.0, t0};
  s.record(t0, 100);
  s.record(t0 + seconds(30), 4);
  EXPECT_DOUBLE_EQ(s.rps(t0 + seconds(32)), 2.0); // 4 / 2 s
  // A short window floors at the window itself.
  rolling_rate w{0.5, t0};
  w.record(t0, 5);
  EXPECT_DOUBLE_EQ(w.rps(t0), 10.0); // 5 / 0.5 s
}

// Back to back windows: rotated late (at 19 s), the new window still
// starts at 10 s, so the previous window's weight has faded to 0.1 by
// 19 s and the next rotation comes at 20 s, not 29 s.
TEST(RollingRate, WindowsAreBackToBack) {
  rolling_rate r{10.0, t0};
  r.record(t0, 100);
  r.record(t0 + seconds(5), 100); // leaves the cold start at 10 s
  EXPECT_NEAR(r.rps(t0 + seconds(19)), 2.0, 1e-9); // (200 × 0.1 + 0) / 10
  r.record(t0 + seconds(19), 10);
  r.rotate(t0 + seconds(20));
  EXPECT_EQ(r.previous(), 10u);
  EXPECT_EQ(r.current(), 0u);
}

TEST(RollingRate, RotatesExactlyAtTheBoundary) {
  rolling_rate r{10.0, t0};
  r.record(t0, 10);
  r.rotate(t0 + seconds(10) - nanoseconds(1));
  EXPECT_EQ(r.current(), 10u);
  EXPECT_EQ(r.previous(), 0u);
  r.rotate(t0 + seconds(10));
  EXPECT_EQ(r.current(), 0u);
  EXPECT_EQ(r.previous(), 10u);
  EXPECT_DOUBLE_EQ(r.rps(t0 + seconds(10)), 1.0);
  EXPECT_DOUBLE_EQ(r.rps(t0 + seconds(15)), 0.5);
  // Two idle windows clear both.
  rolling_rate s{10.0, t0};
  s.record(t0, 10);
  s.rotate(t0 + seconds(20));
  EXPECT_EQ(s.current(), 0u);
  EXPECT_EQ(s.previous(), 0u);
  EXPECT_DOUBLE_EQ(s.rps(t0 + seconds(20)), 0.0);
}

TEST(HedgeEligibility, OnlyBodilessGetHeadOptions) {
  EXPECT_TRUE(is_hedgeable("GET", false));
  EXPECT_TRUE(is_hedgeable("HEAD", false));
  EXPECT_TRUE(is_hedgeable("OPTIONS", false));
  EXPECT_FALSE(is_hedgeable("GET", true));
  EXPECT_FALSE(is_hedgeable("POST", false));
  EXPECT_FALSE(is_hedgeable("PUT", false));
  EXPECT_FALSE(is_hedgeable("DELETE", false));
  EXPECT_FALSE(is_hedgeable("get", false));
}
