// Hedging end to end: a real service client with hedging against
// the reference hub's latency profiles on 127.0.0.1, real time. The hub's
// draws are pure functions of (seed, key, arrival), so a test picks a key
// whose primary straggles and whose hedge does not (and checks the choice
// with the same function); the hub's answer names its arrival, so the body
// says which leg won, and the hub's profile_requests says how many went out.

#include "actors/client/blocking_client.hpp"
#include "hub/hub.hpp"
#include "hub/latency_profile.hpp"

#include <boost/json/parse.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

using namespace outbound;
using namespace std::chrono_literals;

namespace {

constexpr uint64_t seed = 7;

class HedgeE2E : public ::testing::Test {
protected:
  HedgeE2E() {
    hub_config hc;
    hc.seed = seed;
    hub_ = std::make_unique<hub>(hc);
    hub_->start();
    cfg.base_url = hub_->base_url();
    cfg.timeout = 5.0;
    cfg.deadline = 10.0;
    cfg.retry.max_attempts = 1;
  }

  ~HedgeE2E() override {
    hub_->stop();
  }

  /// A client hedging every call after `delay` seconds.
  blocking_client client(double delay) {
    client_options opts;
    hedging_options h;
    endpoint_config ep;
    ep.hedge_delay = delay;
    h.routes.register_route("*", "/fast", ep);
    h.routes.register_route("*", "/slow", ep);
    h.routes.register_route("*", "/flaky", ep);
    opts.hedging = h;
    return blocking_client{sys, cfg, std::move(opts)};
  }

  int64_t profile_requests() {
    auto v = boost::json::parse(hub_->state_json());
    return v.at("server").at("profile_requests").to_number<int64_t>();
  }

  /// A /flaky key whose first arrival takes 900 ms and whose second is fast.
  static std::string straggling_key() {
    latency_profile p;
    p.kind = latency_profile_kind::flaky;
    for (int i = 0;; ++i) {
      auto k = "k" + std::to_string(i);
      if (latency_profile_delay(p, seed, k, 0) == 0.9
          && latency_profile_delay(p, seed, k, 1) < 0.02)
        return k;
    }
  }

  hedge_stats_snapshot stats(blocking_client& c) {
    auto s = c.hedge_stats();
    EXPECT_TRUE(s) << "the hedging actors did not answer";
    return s.value_or(hedge_stats_snapshot{});
  }

  /// The stats once `done` holds for them, or the last ones after 5 s. A
  /// race whose loser is the cancelled hedge is counted, with the hedge's
  /// token, only when the pool answers the cancelled exchange (rules R9 and
  /// R11 of core/hedge_race.hpp): that may come after the caller has its
  /// outcome.
  template <class Pred>
  hedge_stats_snapshot stats_once(blocking_client& c, Pred done) {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds{5};
    auto s = stats(c);
    while (!done(s) && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds{5});
      s = stats(c);
    }
    return s;
  }

  caf::actor_system_config sys_cfg;
  caf::actor_system sys{sys_cfg};
  std::unique_ptr<hub> hub_;
  client_config cfg;
};

call_request get(std::string path) {
  call_request c;
  c.path = std::move(path);
  return c;
}

} // namespace

TEST_F(HedgeE2E, ASlowPrimaryLosesToAFastHedge) {
  auto key = straggling_key();
  auto c = client(0.05);
  auto t0 = std::chrono::steady_clock::now();
  auto o = c.call(get("/flaky?key=" + key));
  auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(o.ok()) << o.error->detail;
  // The key's second arrival (the fast one) answered, not the 900 ms
  // straggler. Which leg arrives second is a race: the hedge, 50 ms after the
  // primary, unless a loaded machine delayed the primary's dial and write by
  // more than that. So the fast answer is the hedge's (the usual outcome) or
  // the primary's, and exactly one leg wins.
  EXPECT_EQ(o.body.at("arrival").as_int64(), 1);
  EXPECT_LT(o.body.at("delay_ms").to_number<double>(), 20.0);
  EXPECT_LT(took, 900ms); // before the straggler could have answered
  EXPECT_EQ(profile_requests(), 2);
  // If the primary won, the cancelled hedge is counted on its own answer.
  auto s = stats_once(c, [](const hedge_stats_snapshot& s) {
    return s.hedged_requests >= 1 && s.hedge_wins + s.primary_wins >= 1;
  });
  EXPECT_EQ(s.hedged_requests, 1u);
  EXPECT_EQ(s.hedge_wins + s.primary_wins, 1u);
}

TEST_F(HedgeE2E, AFastPrimarySendsNoHedge) {
  auto c = client(0.2);
  for (int i = 0; i < 5; ++i) {
    auto o = c.call(get("/fast?key=f" + std::to_string(i)));
    ASSERT_TRUE(o.ok()) << o.error->detail;
    EXPECT_EQ(o.body.at("arrival").as_int64(), 0);
  }
  EXPECT_EQ(profile_requests(), 5);
  EXPECT_EQ(stats(c).hedged_requests, 0u);
}

TEST_F(HedgeE2E, APostIsNeverHedged) {
  auto c = client(0.01);
  call_request p;
  p.method = "POST";
  p.path = "/slow";
  p.body = "{}";
  p.has_body = true;
  auto t0 = std::chrono::steady_clock::now();
  auto o = c.call(p);
  ASSERT_TRUE(o.ok()) << o.error->detail;
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 790ms);
  EXPECT_EQ(profile_requests(), 1);
  EXPECT_EQ(stats(c).hedged_requests, 0u);
}

// Both legs of /slow take 800 ms: the primary wins (it started first) and
// the hedge is cancelled; the call still answers once.
TEST_F(HedgeE2E, WhenBothLegsAreSlowThePrimaryWinsAndTheHedgeIsCancelled) {
  auto c = client(0.05);
  auto o = c.call(get("/slow?key=s"));
  ASSERT_TRUE(o.ok()) << o.error->detail;
  // Legal outcomes: the primary wins (it started 50 ms earlier: the usual
  // one), or the hedge does (a loaded machine delayed the primary by more
  // than the 50 ms). Either way exactly one leg wins and the other is
  // cancelled; the answer is one of the key's two arrivals.
  auto arrival = o.body.at("arrival").as_int64();
  EXPECT_TRUE(arrival == 0 || arrival == 1) << arrival;
  EXPECT_EQ(profile_requests(), 2);
  // Counted once the cancelled leg's answer is in: never more than one.
  auto s = stats_once(c, [](const hedge_stats_snapshot& s) {
    return s.hedged_requests >= 1 && s.primary_wins + s.hedge_wins >= 1;
  });
  EXPECT_EQ(s.hedged_requests, 1u);
  EXPECT_EQ(s.primary_wins + s.hedge_wins, 1u);
  // The next call works (the cancelled leg's connection is not reused).
  auto again = c.call(get("/fast?key=after"));
  ASSERT_TRUE(again.ok()) << again.error->detail;
}
