#include "actors/hedge/breaker_state.hpp"
#include "config/config_error.hpp"

#include <gtest/gtest.h>

#include <chrono>

using namespace outbound;
using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using std::chrono::seconds;

namespace {

const hedge_time t0 = hedge_time{} + std::chrono::hours(1);

breaker_config small_breaker() {
  breaker_config b;
  b.error_rate_threshold = 0.5;
  b.min_samples = 4;
  b.window = 30.0;
  b.cooldown = 10.0;
  b.half_open_max_trial = 2;
  return b;
}

/// Records `n` outcomes `h`, counting the opened transitions.
int feed(breaker_state& b, int n, call_health h, hedge_time now) {
  int opened = 0;
  for (int i = 0; i < n; ++i)
    opened += b.record(h, now) == breaker_transition::opened;
  return opened;
}

} // namespace

TEST(BreakerState, OpensOnlyWithMinSamplesAndThreshold) {
  breaker_state b{small_breaker(), t0};
  EXPECT_EQ(feed(b, 3, call_health::failure, t0), 0); // 3 < min_samples
  EXPECT_EQ(b.phase(), breaker_phase::closed);
  EXPECT_EQ(b.allow(t0).decision, breaker_decision::allow);
  EXPECT_EQ(b.record(call_health::failure, t0), breaker_transition::opened);
  EXPECT_EQ(b.phase(), breaker_phase::open);
  EXPECT_EQ(b.allow(t0).decision, breaker_decision::blocked_open);
}

TEST(BreakerState, BelowThresholdStaysClosed) {
  breaker_state b{small_breaker(), t0};
  feed(b, 3, call_health::success, t0);
  feed(b, 2, call_health::failure, t0); // 2/5 < 0.5
  EXPECT_EQ(b.phase(), breaker_phase::closed);
  EXPECT_EQ(b.record(call_health::failure, t0), breaker_transition::opened);
}

TEST(BreakerState, FiveHundredsCountOnlyWhenConfigured) {
  auto cfg = small_breaker();
  breaker_state b{cfg, t0};
  EXPECT_EQ(feed(b, 4, call_health::server_error, t0), 1);
  cfg.treat_5xx_as_failure = false;
  breaker_state c{cfg, t0};
  EXPECT_EQ(feed(c, 40, call_health::server_error, t0), 0);
  EXPECT_EQ(c.phase(), breaker_phase::closed);
}

TEST(BreakerState, OldFailuresAgeOutOfTheWindow) {
  breaker_state b{small_breaker(), t0};
  feed(b, 3, call_health::failure, t0);
  // Two windows later both are cleared: one more failure is 1 sample.
  EXPECT_EQ(b.record(call_health::failure, t0 + seconds(60)),
            breaker_transition::none);
  EXPECT_EQ(b.snapshot(t0 + seconds(60)).samples, 1u);
}

// Back to back windows: failures recorded at 0 s and seen at 59 s (the
// first rotation) are gone at 60 s, two windows after them, not kept
// until 89 s.
TEST(BreakerState, AnOutcomeCountsForLessThanTwoWindows) {
  breaker_state b{small_breaker(), t0};
  feed(b, 3, call_health::failure, t0);
  EXPECT_EQ(b.snapshot(t0 + seconds(59)).samples, 3u); // previous window
  EXPECT_EQ(b.snapshot(t0 + seconds(60)).samples, 0u);
  EXPECT_EQ(b.snapshot(t0 + seconds(89)).samples, 0u);
}

TEST(BreakerState, HalfOpensLazilyAfterCooldownAndClosesOnGoodTrials) {
  breaker_state b{small_breaker(), t0};
  feed(b, 4, call_health::failure, t0);
  EXPECT_EQ(b.allow(t0 + seconds(10) - nanoseconds(1)).decision,
            breaker_decision::blocked_open);
  EXPECT_EQ(b.phase(), breaker_phase::open);
  auto a1 = b.allow(t0 + seconds(10));
  EXPECT_EQ(a1.transition, breaker_transition::half_opened);
  EXPECT_EQ(a1.decision, breaker_decision::allow_probe);
  auto a2 = b.allow(t0 + seconds(10));
  EXPECT_EQ(a2.decision, breaker_decision::allow_probe);
  EXPECT_EQ(a2.transition, breaker_transition::none);
  EXPECT_EQ(b.allow(t0 + seconds(10)).decision,
            breaker_decision::blocked_trials);
  EXPECT_EQ(
    b.complete_probe(a1.generation, call_health::success, t0 + seconds(11)),
    breaker_transition::none);
  EXPECT_EQ(
    b.complete_probe(a2.generation, call_health::failure, t0 + seconds(11)),
    breaker_transition::opened); // 1/2 >= 0.5: re-open
  EXPECT_EQ(b.phase(), breaker_phase::open);
  // Second round: both trials succeed ⇒ closed, window reset.
  auto c1 = b.allow(t0 + seconds(21));
  auto c2 = b.allow(t0 + seconds(21));
  EXPECT_NE(c1.generation, a1.generation);
  b.complete_probe(c1.generation, call_health::success, t0 + seconds(22));
  EXPECT_EQ(
    b.complete_probe(c2.generation, call_health::success, t0 + seconds(22)),
    breaker_transition::closed);
  EXPECT_EQ(b.phase(), breaker_phase::closed);
  EXPECT_EQ(b.snapshot(t0 + seconds(22)).samples, 0u);
  EXPECT_EQ(b.snapshot(t0 + seconds(22)).opens, 2u);
  EXPECT_EQ(b.snapshot(t0 + seconds(22)).half_opens, 2u);
  EXPECT_EQ(b.snapshot(t0 + seconds(22)).closes, 1u);
}

TEST(BreakerState, ReleasedPermitIsNotATrialAndIsHandedOutAgain) {
  breaker_state b{small_breaker(), t0};
  feed(b, 4, call_health::failure, t0);
  auto now = t0 + seconds(10);
  auto p1 = b.allow(now);
  auto p2 = b.allow(now);
  EXPECT_EQ(b.allow(now).decision, breaker_decision::blocked_trials);
  // The probe was cancelled because its primary won.
  EXPECT_TRUE(b.release_probe(p1.generation));
  EXPECT_EQ(b.snapshot(now).trials, 0);
  EXPECT_EQ(b.snapshot(now).permits_out, 1);
  auto p3 = b.allow(now);
  EXPECT_EQ(p3.decision, breaker_decision::allow_probe);
  EXPECT_EQ(b.complete_probe(p2.generation, call_health::success, now),
            breaker_transition::none);
  EXPECT_EQ(b.complete_probe(p3.generation, call_health::success, now),
            breaker_transition::closed);
  // A stale permit (older generation) changes nothing.
  EXPECT_FALSE(b.release_probe(p1.generation));
  EXPECT_EQ(b.complete_probe(p1.generation, call_health::failure, now),
            breaker_transition::none);
}

TEST(BreakerState, OutcomesWhileOpenFeedTheWindowWithoutANewOpen) {
  breaker_state b{small_breaker(), t0};
  EXPECT_EQ(feed(b, 4, call_health::failure, t0), 1);
  EXPECT_EQ(feed(b, 10, call_health::failure, t0 + seconds(1)), 0);
  EXPECT_EQ(b.snapshot(t0 + seconds(1)).samples, 14u);
  EXPECT_EQ(b.snapshot(t0 + seconds(1)).opens, 1u);
}

TEST(BreakerRegistry, HostTripBlocksSiblingEndpoints) {
  hedge_config cfg;
  cfg.breaker = small_breaker();
  breaker_registry r{cfg};
  auto ep = cfg.breaker;
  int opened_host = 0;
  for (int i = 0; i < 4; ++i) {
    auto c = r.record("host:a", "endpoint:one", ep, call_health::failure, t0);
    opened_host += c.host == breaker_transition::opened;
  }
  EXPECT_EQ(opened_host, 1);
  EXPECT_EQ(r.allow_hedge("host:a", "endpoint:one", ep, t0).gate,
            hedge_gate::blocked_host);
  // A sibling endpoint on the same host, never failing, is blocked too.
  EXPECT_EQ(r.allow_hedge("host:a", "endpoint:two", ep, t0).gate,
            hedge_gate::blocked_host);
  // Another host is not.
  EXPECT_EQ(r.allow_hedge("host:b", "endpoint:one-b", ep, t0).gate,
            hedge_gate::allowed);
}

TEST(BreakerRegistry, EndpointTripDoesNotBlockSiblings) {
  hedge_config cfg;
  cfg.breaker = small_breaker();
  cfg.breaker.min_samples = 100; // the host tier never trips here
  breaker_registry r{cfg};
  auto ep = small_breaker();
  int opened_ep = 0;
  for (int i = 0; i < 4; ++i)
    opened_ep
      += r.record("host:a", "endpoint:one", ep, call_health::failure, t0)
           .endpoint
         == breaker_transition::opened;
  EXPECT_EQ(opened_ep, 1);
  EXPECT_EQ(r.allow_hedge("host:a", "endpoint:one", ep, t0).gate,
            hedge_gate::blocked_endpoint);
  EXPECT_EQ(r.allow_hedge("host:a", "endpoint:two", ep, t0).gate,
            hedge_gate::allowed);
  EXPECT_EQ(r.snapshot(breaker_scope::host, "host:a", t0)->phase,
            breaker_phase::closed);
  EXPECT_EQ(r.snapshot(breaker_scope::endpoint, "endpoint:one", t0)->phase,
            breaker_phase::open);
}

TEST(BreakerRegistry, HostTierAlwaysUsesTheTransportDefault) {
  hedge_config cfg;
  cfg.breaker = small_breaker(); // min_samples 4
  breaker_registry r{cfg};
  breaker_config lax = small_breaker();
  lax.min_samples = 1000;
  for (int i = 0; i < 4; ++i)
    r.record("host:a", "endpoint:lax", lax, call_health::failure, t0);
  EXPECT_EQ(r.snapshot(breaker_scope::host, "host:a", t0)->phase,
            breaker_phase::open);
  EXPECT_EQ(r.snapshot(breaker_scope::endpoint, "endpoint:lax", t0)->phase,
            breaker_phase::closed);
}

TEST(BreakerRegistry, HostProbePermitIsReleasedWhenTheEndpointBlocks) {
  hedge_config cfg;
  cfg.breaker = small_breaker();
  breaker_registry r{cfg};
  auto ep = small_breaker();
  ep.cooldown = 100.0;
  for (int i = 0; i < 4; ++i)
    r.record("host:a", "endpoint:one", ep, call_health::failure, t0);
  auto now = t0 + seconds(10); // host half-opens, endpoint still open
  auto g = r.allow_hedge("host:a", "endpoint:one", ep, now);
  EXPECT_EQ(g.gate, hedge_gate::blocked_endpoint);
  EXPECT_EQ(g.changes.host, breaker_transition::half_opened);
  auto hs = r.snapshot(breaker_scope::host, "host:a", now);
  EXPECT_EQ(hs->phase, breaker_phase::half_open);
  EXPECT_EQ(hs->permits_out, 0);
  EXPECT_FALSE(g.permit.holds_probe());
}

TEST(BreakerRegistry, ProbePermitsAreReleasedOnCancelAndResolvedOnWin) {
  hedge_config cfg;
  cfg.breaker = small_breaker(); // 2 trials
  breaker_registry r{cfg};
  auto ep = small_breaker();
  for (int i = 0; i < 4; ++i)
    r.record("host:a", "host:a", ep, call_health::failure, t0);
  auto now = t0 + seconds(10);
  auto g1 = r.allow_hedge("host:a", "host:a", ep, now);
  auto g2 = r.allow_hedge("host:a", "host:a", ep, now);
  ASSERT_EQ(g1.gate, hedge_gate::allowed);
  ASSERT_EQ(g2.gate, hedge_gate::allowed);
  EXPECT_TRUE(g1.permit.host_generation);
  // A host-keyed (unmatched) request has the host tier only.
  EXPECT_FALSE(g1.permit.endpoint_generation);
  EXPECT_FALSE(r.snapshot(breaker_scope::endpoint, "host:a", now));
  EXPECT_EQ(r.allow_hedge("host:a", "host:a", ep, now).gate,
            hedge_gate::blocked_host);
  // Hedge 1's primary won: the probe is cancelled, its permit comes back.
  r.release(g1.permit);
  auto g3 = r.allow_hedge("host:a", "host:a", ep, now);
  ASSERT_EQ(g3.gate, hedge_gate::allowed);
  EXPECT_EQ(r.complete(g2.permit, call_health::success, now).host,
            breaker_transition::none);
  auto c = r.complete(g3.permit, call_health::success, now);
  EXPECT_EQ(c.host, breaker_transition::closed);
  EXPECT_EQ(c.endpoint, breaker_transition::none);
  EXPECT_EQ(r.allow_hedge("host:a", "host:a", ep, now).gate,
            hedge_gate::allowed);
}

TEST(BreakerRegistry, ExactlyOneOpenPerOpenTransition) {
  hedge_config cfg;
  cfg.breaker = small_breaker();
  breaker_registry r{cfg};
  auto ep = small_breaker();
  int opens = 0;
  auto count = [&](const breaker_changes& c) {
    opens += (c.host == breaker_transition::opened)
             + (c.endpoint == breaker_transition::opened);
  };
  for (int i = 0; i < 50; ++i)
    count(r.record("host:a", "endpoint:e", ep, call_health::failure, t0));
  EXPECT_EQ(opens, 2); // one per tier, not one per failure
  for (int i = 0; i < 10; ++i)
    EXPECT_NE(r.allow_hedge("host:a", "endpoint:e", ep, t0).gate,
              hedge_gate::allowed);
  // Half-open trials fail: a new OPEN transition in each tier.
  auto now = t0 + seconds(10);
  auto g1 = r.allow_hedge("host:a", "endpoint:e", ep, now);
  auto g2 = r.allow_hedge("host:a", "endpoint:e", ep, now);
  count(r.complete(g1.permit, call_health::failure, now));
  count(r.complete(g2.permit, call_health::failure, now));
  EXPECT_EQ(opens, 4);
}

TEST(BreakerRegistry, KeysAreLruBounded) {
  hedge_config cfg;
  cfg.max_keys = 100;
  breaker_registry r{cfg};
  for (int i = 0; i < 100000; ++i) {
    auto k = "host:h" + std::to_string(i);
    r.record(k, "endpoint:" + std::to_string(i), cfg.breaker,
             call_health::success, t0);
  }
  EXPECT_EQ(r.size(breaker_scope::host), 100u);
  EXPECT_EQ(r.size(breaker_scope::endpoint), 100u);
  EXPECT_TRUE(r.snapshot(breaker_scope::host, "host:h99999", t0));
  EXPECT_FALSE(r.snapshot(breaker_scope::host, "host:h0", t0));
}

TEST(BreakerRegistry, PermitOfAnEvictedBreakerDoesNotTouchItsSuccessor) {
  hedge_config cfg;
  cfg.breaker = small_breaker();
  cfg.max_keys = 1;
  breaker_registry r{cfg};
  auto trip_and_probe = [&](hedge_time at) {
    for (int i = 0; i < 4; ++i)
      r.record("host:a", "endpoint:a", cfg.breaker, call_health::failure, at);
    return r.allow_hedge("host:a", "endpoint:a", cfg.breaker, at + seconds(10));
  };
  auto old = trip_and_probe(t0);
  ASSERT_EQ(old.gate, hedge_gate::allowed);
  ASSERT_TRUE(old.permit.host_generation && old.permit.endpoint_generation);
  // host:b / endpoint:b evict host:a / endpoint:a in both tiers; they come
  // back as new breakers.
  r.record("host:b", "endpoint:b", cfg.breaker, call_health::success, t0);
  auto now = t0 + seconds(20);
  auto fresh = trip_and_probe(now);
  ASSERT_EQ(fresh.gate, hedge_gate::allowed);
  r.release(old.permit); // stale: must not give back fresh's permit
  auto host = r.snapshot(breaker_scope::host, "host:a", now);
  auto endpoint = r.snapshot(breaker_scope::endpoint, "endpoint:a", now);
  ASSERT_TRUE(host && endpoint);
  EXPECT_EQ(host->permits_out, 1);
  EXPECT_EQ(endpoint->permits_out, 1);
}

TEST(BreakerRegistry, RejectsABadConfigByField) {
  hedge_config cfg;
  cfg.breaker.half_open_max_trial = 0;
  try {
    breaker_registry r{cfg};
    FAIL() << "accepted";
  } catch (const config_error& e) {
    EXPECT_EQ(e.field(), "hedge.breaker.half_open_max_trial");
  }
}
