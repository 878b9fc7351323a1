#include "actors/hedge/endpoint_stats_state.hpp"
#include "config/config_error.hpp"

#include <gtest/gtest.h>

#include <chrono>

using namespace outbound;
using std::chrono::milliseconds;
using std::chrono::seconds;

namespace {

const hedge_time t0 = hedge_time{} + std::chrono::hours(1);

effective_hedge_config eff(const endpoint_config& ep = {},
                           const hedge_config& base = {}) {
  return resolve(base, ep);
}

} // namespace

TEST(HedgeStats, WarmupDelayForTheFirstRequestsThenTheLearnedPercentile) {
  endpoint_stats_state st{hedge_config{}};
  endpoint_config p90;
  p90.percentile = 0.90;
  auto cfg = eff(p90);
  for (int i = 1; i <= 20; ++i) {
    auto p = st.plan("endpoint:x", cfg, t0);
    EXPECT_TRUE(p.warmup) << i;
    EXPECT_DOUBLE_EQ(p.delay, 0.010) << i;
  }
  // Samples 1..100 ms.
  for (int i = 1; i <= 100; ++i)
    st.observe("endpoint:x", i / 1000.0, call_health::success, t0);
  auto p = st.plan("endpoint:x", cfg, t0);
  EXPECT_FALSE(p.warmup);
  EXPECT_GE(p.delay, 0.085);
  EXPECT_LE(p.delay, 0.095);
  auto s = *st.snapshot("endpoint:x");
  EXPECT_EQ(s.total_requests, 21u);
  EXPECT_EQ(s.warmup_requests, 20u);
  EXPECT_NEAR(*st.latency_quantile("endpoint:x", 0.9, t0), 0.090, 0.0009);
  EXPECT_EQ(*st.latency_quantile("endpoint:x", 1.0, t0), 0.100);
}

TEST(HedgeStats, NoSamplesAfterWarmupFallsBackToWarmupDelay) {
  endpoint_stats_state st{hedge_config{}};
  endpoint_config ep;
  ep.warmup_requests = 0;
  auto p = st.plan("k", eff(ep), t0);
  EXPECT_TRUE(p.warmup);
  EXPECT_DOUBLE_EQ(p.delay, 0.010);
  // A sketch holding only zeros gives 0: also the warmup delay.
  st.observe("k", 0.0, call_health::success, t0);
  p = st.plan("k", eff(ep), t0);
  EXPECT_TRUE(p.warmup);
  EXPECT_DOUBLE_EQ(p.delay, 0.010);
}

TEST(HedgeStats, WarmupAndHardcodedDelaysAreFlooredAtMinDelay) {
  endpoint_stats_state st{hedge_config{}};
  endpoint_config warm;
  warm.warmup_delay = 0.0001;
  warm.min_delay = 0.002;
  auto p = st.plan("a", eff(warm), t0);
  EXPECT_TRUE(p.warmup);
  EXPECT_DOUBLE_EQ(p.delay, 0.002);

  endpoint_config hard;
  hard.hedge_delay = 0.0005; // below the default min_delay 1 ms
  p = st.plan("b", eff(hard), t0);
  EXPECT_TRUE(p.hardcoded);
  EXPECT_FALSE(p.warmup);
  EXPECT_DOUBLE_EQ(p.delay, 0.001);
  hard.hedge_delay = 0.05;
  p = st.plan("b", eff(hard), t0);
  EXPECT_DOUBLE_EQ(p.delay, 0.05);

  // The learned delay is floored too.
  endpoint_config learned;
  learned.warmup_requests = 0;
  learned.min_delay = 0.02;
  st.plan("c", eff(learned), t0);
  for (int i = 0; i < 10; ++i)
    st.observe("c", 0.005, call_health::success, t0);
  p = st.plan("c", eff(learned), t0);
  EXPECT_FALSE(p.warmup);
  EXPECT_DOUBLE_EQ(p.delay, 0.02);
  // What the key learned stays what it learned (the deadline rule's).
  EXPECT_NEAR(p.learned, 0.005, 0.0001);
}

// `learned` is the sketch's quantile at the percentile: 0 while nothing is
// learned (warmup, hardcoded), and the quantile itself, not the lowered
// delay, when the delay search moves the hedge earlier.
TEST(HedgeStats, TheLearnedLatencyIsThePercentilesQuantileOrNothing) {
  endpoint_stats_state st{hedge_config{}};
  EXPECT_EQ(st.plan("w", eff(), t0).learned, 0.0); // warmup
  endpoint_config hard;
  hard.hedge_delay = 0.05;
  EXPECT_EQ(st.plan("h", eff(hard), t0).learned, 0.0);
  endpoint_config ep;
  ep.warmup_requests = 0;
  ep.delay_search = true;
  st.plan("k", eff(ep), t0);
  for (int i = 1; i <= 940; ++i)
    st.observe("k", i / 100000.0, call_health::success, t0);
  for (int i = 0; i < 60; ++i)
    st.observe("k", 0.030 + i / 1000.0, call_health::success, t0);
  auto p = st.plan("k", eff(ep), t0);
  EXPECT_NEAR(p.delay, 0.0094, 0.0002); // lowered across the gap
  EXPECT_NEAR(p.learned, 0.039, 0.001); // the p95 itself
}

TEST(HedgeStats, HardcodedEndpointStillRecordsLatency) {
  endpoint_stats_state st{hedge_config{}};
  endpoint_config hard;
  hard.hedge_delay = 0.05;
  st.plan("h", eff(hard), t0);
  st.observe("h", 0.2, call_health::success, t0);
  EXPECT_EQ(*st.latency_quantile("h", 0.5, t0), 0.2);
  EXPECT_EQ(st.snapshot("h")->warmup_requests, 0u);
}

TEST(HedgeStats, BudgetGateCountsHedgesAndExhaustion) {
  endpoint_stats_state st{hedge_config{}};
  endpoint_config ep;
  ep.estimated_rps = 10.0; // 10 % ⇒ 1 token/s, burst 2
  st.plan("k", eff(ep), t0);
  EXPECT_DOUBLE_EQ(*st.tokens("k", t0), 2.0);
  EXPECT_TRUE(st.try_take_token("k", t0));
  st.hedge_sent("k");
  EXPECT_TRUE(st.try_take_token("k", t0));
  st.hedge_sent("k");
  EXPECT_FALSE(st.try_take_token("k", t0));
  EXPECT_TRUE(st.try_take_token("k", t0 + seconds(1)));
  st.hedge_sent("k");
  auto s = *st.snapshot("k");
  EXPECT_EQ(s.hedged_requests, 3u);
  EXPECT_EQ(s.budget_exhausted, 1u);
  EXPECT_FALSE(st.try_take_token("never-planned", t0));
  EXPECT_EQ(st.global_snapshot().budget_exhausted, 1u);
}

// hedged_requests counts hedges sent, not tokens granted: a token granted
// for a hedge that was then not sent (its primary answered meanwhile) goes
// back to the bucket.
TEST(HedgeStats, AGrantedTokenNotSentIsReturnedAndNotCounted) {
  endpoint_stats_state st{hedge_config{}};
  endpoint_config ep;
  ep.estimated_rps = 10.0; // 1 token/s, burst 2
  st.plan("k", eff(ep), t0);
  EXPECT_TRUE(st.try_take_token("k", t0));
  EXPECT_TRUE(st.try_take_token("k", t0));
  EXPECT_DOUBLE_EQ(*st.tokens("k", t0), 0.0);
  EXPECT_EQ(st.snapshot("k")->hedged_requests, 0u) << "granted, not sent";
  st.return_token("k");
  EXPECT_DOUBLE_EQ(*st.tokens("k", t0), 1.0);
  st.hedge_sent("k");
  EXPECT_EQ(st.snapshot("k")->hedged_requests, 1u);
  EXPECT_EQ(st.global_snapshot().hedged_requests, 1u);
  // Never above the burst; an untracked key is a no-op.
  st.return_token("k");
  st.return_token("k");
  EXPECT_DOUBLE_EQ(*st.tokens("k", t0), 2.0);
  st.return_token("never-planned");
}

TEST(HedgeStats, ZeroBudgetSuppressesEveryHedge) {
  endpoint_stats_state st{hedge_config{}};
  endpoint_config ep;
  ep.budget_percent = 0.0;
  st.plan("k", eff(ep), t0);
  EXPECT_FALSE(st.try_take_token("k", t0));
  EXPECT_EQ(st.snapshot("k")->budget_exhausted, 1u);
  EXPECT_EQ(st.snapshot("k")->hedged_requests, 0u);
}

TEST(HedgeStats, AutoRpsBucketFollowsTheTraffic) {
  endpoint_stats_state st{hedge_config{}};
  auto cfg = eff();
  // The bucket starts from the 100 rps seed (20 tokens), then follows the
  // rolling estimate: after 1 request rps = 1 / 1 s (the cold-start floor)
  // ⇒ 0.1 token/s, burst 1 (clipped to 1 token); 100 requests within the
  // first second give rps = 100 / 1 s ⇒ 10 tokens/s, burst 20, and the
  // bucket refilled as the rate rose (about 1 + 5 tokens).
  st.plan("k", cfg, t0);
  EXPECT_DOUBLE_EQ(*st.tokens("k", t0), 1.0);
  for (int i = 1; i < 100; ++i)
    st.plan("k", cfg, t0 + milliseconds(10 * i));
  auto now = t0 + milliseconds(990);
  auto tokens = *st.tokens("k", now);
  EXPECT_GT(tokens, 4.0);
  EXPECT_LT(tokens, 7.0);
  int taken = 0;
  while (st.try_take_token("k", now))
    ++taken;
  EXPECT_EQ(taken, static_cast<int>(tokens));
  // The rate is 10 tokens/s: 100 ms later exactly one more token.
  double left = tokens - taken;
  EXPECT_NEAR(*st.tokens("k", now + milliseconds(100)), left + 1.0, 1e-9);
}

TEST(HedgeStats, ErrorsRaceWinsAndCircuitBlocksAreCounted) {
  endpoint_stats_state st{hedge_config{}};
  st.plan("k", eff(), t0);
  st.observe("k", 0.01, call_health::failure, t0);
  st.observe("k", 0.01, call_health::server_error, t0);
  st.observe("k", 0.01, call_health::success, t0);
  st.record_race("k", true, true);
  st.record_race("k", true, false);
  st.record_race("k", true, false);
  st.record_race("k", false, false);
  st.count_circuit_blocked("k");
  auto s = *st.snapshot("k");
  EXPECT_EQ(s.errors, 2u);
  EXPECT_EQ(s.hedge_wins, 1u);
  EXPECT_EQ(s.primary_wins, 2u);
  EXPECT_EQ(s.circuit_blocked, 1u);
  // 5xx not a failure when the key's breaker says so.
  endpoint_config ep;
  breaker_config b;
  b.treat_5xx_as_failure = false;
  ep.breaker = b;
  st.plan("n", eff(ep), t0);
  st.observe("n", 0.01, call_health::server_error, t0);
  EXPECT_EQ(st.snapshot("n")->errors, 0u);
  EXPECT_EQ(st.global_snapshot().errors, 2u);
  EXPECT_EQ(st.global_snapshot().total_requests, 2u);
}

TEST(HedgeStats, UnknownKeyHasNoQuantileOrSnapshot) {
  endpoint_stats_state st{hedge_config{}};
  EXPECT_FALSE(st.latency_quantile("nope", 0.5, t0));
  EXPECT_FALSE(st.snapshot("nope"));
  EXPECT_FALSE(st.observe("nope", 0.1, call_health::success, t0));
  st.plan("k", eff(), t0);
  EXPECT_FALSE(st.latency_quantile("k", 0.5, t0)); // no sample yet
}

TEST(HedgeStats, KeysAreLruBoundedUnderAHostileKeySet) {
  hedge_config cfg;
  cfg.max_keys = 1000;
  endpoint_stats_state st{cfg};
  auto e = eff({}, cfg);
  for (int i = 0; i < 100000; ++i) {
    auto k = "host:h" + std::to_string(i);
    st.plan(k, e, t0);
    st.observe(k, 0.01, call_health::success, t0);
    ASSERT_LE(st.size(), 1000u);
  }
  EXPECT_EQ(st.size(), 1000u);
  EXPECT_TRUE(st.snapshot("host:h99999"));
  EXPECT_FALSE(st.snapshot("host:h98999"));
  EXPECT_TRUE(st.snapshot("host:h99000"));
  EXPECT_EQ(st.global_snapshot().total_requests, 100000u);
}

TEST(HedgeStats, RecentlyUsedKeySurvivesEviction) {
  hedge_config cfg;
  cfg.max_keys = 2;
  endpoint_stats_state st{cfg};
  auto e = eff({}, cfg);
  st.plan("a", e, t0);
  st.plan("b", e, t0);
  st.observe("a", 0.01, call_health::success, t0); // touches a
  st.plan("c", e, t0);                             // evicts b
  EXPECT_TRUE(st.snapshot("a"));
  EXPECT_FALSE(st.snapshot("b"));
  EXPECT_TRUE(st.snapshot("c"));
}

TEST(HedgeStats, RejectsABadConfigByField) {
  hedge_config cfg;
  cfg.warmup_delay = -1;
  try {
    endpoint_stats_state st{cfg};
    FAIL() << "accepted";
  } catch (const config_error& e) {
    EXPECT_EQ(e.field(), "hedge.warmup_delay");
  }
}

TEST(HedgeStats, Case11SmallSampleQuantilesThroughTheEstimator) {
  // hedging.md case 11, through the per-key estimator behind the delay.
  endpoint_stats_state st{hedge_config{}};
  st.plan("k", eff(), t0);
  for (double x : {0.010, 0.020, 0.030, 0.040})
    st.observe("k", x, call_health::success, t0);
  EXPECT_NEAR(*st.latency_quantile("k", 0.6, t0), 0.030, 0.030 * 0.01);
  EXPECT_EQ(*st.latency_quantile("k", 0.0, t0), 0.010);
  EXPECT_EQ(*st.latency_quantile("k", 1.0, t0), 0.040);
  st.plan("one", eff(), t0);
  st.observe("one", 0.028, call_health::success, t0);
  for (double q : {0.5, 0.95, 1.0})
    EXPECT_EQ(*st.latency_quantile("one", q, t0), 0.028) << q;
  // And as the learned delay (warmup over): p60 of the four samples.
  endpoint_config ep;
  ep.warmup_requests = 0;
  ep.percentile = 0.6;
  auto p = st.plan("k", eff(ep), t0);
  EXPECT_FALSE(p.warmup);
  EXPECT_NEAR(p.delay, 0.030, 0.030 * 0.01);
}

TEST(HedgeStats, AGapBelowThePercentileLowersTheDelayUnlessSearchIsOff) {
  // 940 calls at 1..9.4 ms, then 60 stragglers at 30..89 ms: the p95 lies
  // among the stragglers (≈ 40 ms), the body ends at 9.4 ms. A delay at
  // the body's end hedges 6 % of calls instead of 5 % and 30 ms earlier.
  auto run = [](bool search) {
    endpoint_stats_state st{hedge_config{}};
    endpoint_config ep;
    ep.warmup_requests = 0;
    ep.delay_search = search;
    st.plan("k", eff(ep), t0); // tracks the key
    for (int i = 1; i <= 940; ++i)
      st.observe("k", i / 100000.0, call_health::success, t0);
    for (int i = 0; i < 60; ++i)
      st.observe("k", 0.030 + i / 1000.0, call_health::success, t0);
    return st.plan("k", eff(ep), t0);
  };
  auto plain = run(false);
  auto searched = run(true);
  EXPECT_NEAR(plain.delay, 0.039, 0.001); // the 950th of 1000: 39 ms
  EXPECT_NEAR(searched.delay, 0.0094, 0.0002);
  EXPECT_FALSE(plain.warmup || searched.warmup);
}

TEST(HedgeStats, TheSearchNeverSpendsPastThreeQuartersOfTheBudget) {
  // Same shape, a 6 % budget: 0.75 × 6 % = 4.5 % < the body's-end share
  // of 6 %, so the delay stays at the quantile.
  endpoint_stats_state st{hedge_config{}};
  endpoint_config ep;
  ep.warmup_requests = 0;
  ep.budget_percent = 6.0;
  ep.delay_search = true;
  st.plan("k", eff(ep), t0); // tracks the key
  for (int i = 1; i <= 940; ++i)
    st.observe("k", i / 100000.0, call_health::success, t0);
  for (int i = 0; i < 60; ++i)
    st.observe("k", 0.030 + i / 1000.0, call_health::success, t0);
  EXPECT_NEAR(st.plan("k", eff(ep), t0).delay, 0.039, 0.001);
}
