// The adaptive hedge delay (actors/hedge/delay_rule.hpp): the percentile's
// quantile on a smooth distribution; the body's end when the quantile sits
// in a gap above it; never a share of hedges past max_share.

#include "actors/hedge/delay_rule.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace outbound;

namespace {

// Lognormal with mean 5 ms and sd 2 ms, in seconds: σ² = ln(1 + (2/5)²),
// μ = ln(5 ms) − σ²/2.
const double sigma = std::sqrt(std::log(1.0 + 0.16));
const double mu = std::log(0.005) - sigma * sigma / 2.0;

// `n` calls of which `stragglers` take ten times a body draw (the shape of
// bench/hedging's w1), fixed seed.
ddsketch mix(int n, int stragglers, unsigned seed = 7) {
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> body(mu, sigma);
  ddsketch s;
  for (int i = 0; i < n; ++i)
    s.insert(body(rng) * (i < stragglers ? 10.0 : 1.0));
  return s;
}

double share_above(const ddsketch& s, double d) {
  // Through the quantile function: the smallest q whose quantile exceeds d.
  const auto n = s.count();
  for (uint64_t r = 1; r <= n; ++r) {
    const double q = static_cast<double>(r) / static_cast<double>(n);
    if (*s.quantile(q) > d)
      return 1.0 - static_cast<double>(r - 1) / static_cast<double>(n);
  }
  return 0.0;
}

} // namespace

TEST(HedgeDelayRule, AnEmptySketchHasNoDelay) {
  ddsketch s;
  EXPECT_FALSE(choose_hedge_delay(s, 0.95, delay_search{}));
}

TEST(HedgeDelayRule, ASmoothBodyKeepsTheQuantile) {
  auto s = mix(20000, 0);
  auto c = choose_hedge_delay(s, 0.95, delay_search{});
  ASSERT_TRUE(c);
  EXPECT_DOUBLE_EQ(c->quantile, *s.quantile(0.95));
  EXPECT_DOUBLE_EQ(c->delay, c->quantile);
  EXPECT_NEAR(c->share, 0.05, 0.005); // one 2 % bin holds ~0.4 %
}

TEST(HedgeDelayRule, OnePercentAtOneSecondKeepsTheQuantile) {
  // bench/hedging's w2: the p95 lies in the smooth body.
  auto s = mix(20000, 0);
  for (int i = 0; i < 200; ++i)
    s.insert(1.0);
  auto c = choose_hedge_delay(s, 0.95, delay_search{});
  ASSERT_TRUE(c);
  EXPECT_DOUBLE_EQ(c->delay, c->quantile);
}

TEST(HedgeDelayRule, AGapBelowTheQuantileLowersTheDelayToTheBodysEnd) {
  // 5.3 % stragglers: the p95 falls among them (≥ 15 ms), the body ends
  // near 13 ms; the delay moves to the body's end for < 1 point of share.
  auto s = mix(2000, 106);
  auto c = choose_hedge_delay(s, 0.95, delay_search{});
  ASSERT_TRUE(c);
  EXPECT_GE(c->quantile, 0.015);
  EXPECT_LE(c->delay, 0.8 * c->quantile);
  EXPECT_LT(c->share - c->quantile_share, 0.01);
  EXPECT_LE(c->share, delay_search{}.max_share);
  // The share the rule reports is the sketch's own.
  EXPECT_NEAR(c->share, share_above(s, c->delay), 1.0 / 2000);
  // Below the chosen delay the next bins cost more than they save: the
  // body's tail, which a smooth-body p95 would never hedge.
  EXPECT_GE(c->delay, *s.quantile(0.93));
}

TEST(HedgeDelayRule, TheShareNeverPassesMaxShare) {
  for (int stragglers : {60, 94, 100, 106, 130}) {
    for (double max_share : {0.05, 0.055, 0.06, 0.075, 0.2}) {
      auto s = mix(2000, stragglers, 11 + static_cast<unsigned>(stragglers));
      delay_search search;
      search.max_share = max_share;
      auto c = choose_hedge_delay(s, 0.95, search);
      ASSERT_TRUE(c);
      EXPECT_LE(c->delay, c->quantile);
      if (c->delay < c->quantile) {
        EXPECT_LE(c->share, max_share)
          << stragglers << " stragglers, max_share " << max_share;
      } else {
        EXPECT_DOUBLE_EQ(c->share, c->quantile_share);
      }
    }
  }
}

TEST(HedgeDelayRule, AHeavierWeightMovesLess) {
  auto s = mix(2000, 106);
  delay_search light;
  light.weight = 1.0;
  delay_search heavy;
  heavy.weight = 50.0;
  auto a = choose_hedge_delay(s, 0.95, light);
  auto b = choose_hedge_delay(s, 0.95, heavy);
  ASSERT_TRUE(a && b);
  EXPECT_LE(a->delay, b->delay);
  EXPECT_DOUBLE_EQ(b->delay, b->quantile);
}
