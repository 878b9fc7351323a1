// The endpoint_stats and breaker actors on CAF's test coordinator: virtual
// time drives their windows, buckets and cooldowns; hooks arrive as
// messages at a subscriber actor.

#include "actors/hedge/detail/hedge_actors.hpp"
#include "actors/hedge/hedge_hooks.hpp"
#include "config/config_error.hpp"
#include "tests/support/virtual_time_fixture.hpp"

#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

using namespace outbound;
using namespace std::chrono_literals;

namespace {

struct hook_log {
  std::vector<std::string> fired;
  std::vector<std::string> opened; // "scope key"
};

class HedgeActors : public outbound::testing::virtual_time_fixture {
protected:
  HedgeActors() {
    cfg.breaker.min_samples = 4;
    cfg.breaker.cooldown = 10.0;
    cfg.breaker.half_open_max_trial = 2;
  }

  /// Sends `msg` to `dest` from a helper actor, runs, returns the answer.
  template <class R, class Handle, class Msg>
  std::optional<R> ask(const Handle& dest, Msg msg) {
    auto out = std::make_shared<std::optional<R>>();
    sys().spawn([=](caf::event_based_actor* self) {
      self->request(dest, caf::infinite, msg).then([=](R& r) {
        *out = std::move(r);
      });
    });
    run();
    return *out;
  }

  template <class Handle, class Msg>
  void tell(const Handle& dest, Msg msg) {
    caf::anon_send(dest, std::move(msg));
    run();
  }

  hedge_hook_actor spawn_hooks() {
    auto l = log;
    return sys().spawn([l]() -> hedge_hook_actor::behavior_type {
      return {
        [l](hedge_fired& e) { l->fired.push_back(e.key); },
        [l](circuit_opened& e) {
          l->opened.push_back(std::string{to_string(e.scope)} + " " + e.key);
        },
      };
    });
  }

  effective_hedge_config eff(const endpoint_config& ep = {}) {
    return resolve(cfg, ep);
  }

  hedge_config cfg;
  std::shared_ptr<hook_log> log = std::make_shared<hook_log>();
};

} // namespace

TEST_F(HedgeActors, StatsActorPlansFromTheLearnedPercentile) {
  cfg.percentile = 0.90;
  auto st = spawn_endpoint_stats(sys(), cfg);
  for (int i = 0; i < 20; ++i) {
    auto p = ask<hedge_plan>(st, hedge_plan_request{"endpoint:x", eff()});
    ASSERT_TRUE(p);
    EXPECT_TRUE(p->warmup);
    EXPECT_DOUBLE_EQ(p->delay, 0.010);
  }
  for (int i = 1; i <= 100; ++i)
    tell(st, hedge_observation{"endpoint:x", i / 1000.0, call_health::success});
  auto p = ask<hedge_plan>(st, hedge_plan_request{"endpoint:x", eff()});
  ASSERT_TRUE(p);
  EXPECT_FALSE(p->warmup);
  EXPECT_GE(p->delay, 0.085);
  EXPECT_LE(p->delay, 0.095);
  auto q = ask<latency_quantile_reply>(
    st, latency_quantile_request{"endpoint:x", 1.0});
  ASSERT_TRUE(q && q->seconds);
  EXPECT_EQ(*q->seconds, 0.100);
  auto s = ask<hedge_stats_reply>(st, hedge_stats_request{"endpoint:x"});
  ASSERT_TRUE(s && s->stats);
  EXPECT_EQ(s->stats->total_requests, 21u);
  EXPECT_EQ(s->stats->warmup_requests, 20u);
  ask<hedge_plan>(st, hedge_plan_request{"host:h", eff()});
  auto all = ask<hedge_all_stats_reply>(st, hedge_all_stats_request{});
  ASSERT_TRUE(all);
  ASSERT_EQ(all->keys.size(), 2u);
  EXPECT_EQ(all->keys[0].first, "host:h"); // most recently used first
  EXPECT_EQ(all->keys[1].first, "endpoint:x");
  EXPECT_EQ(all->keys[1].second.total_requests, 21u);
  auto none = ask<hedge_stats_reply>(st, hedge_stats_request{"endpoint:y"});
  ASSERT_TRUE(none);
  EXPECT_FALSE(none->stats);
}

TEST_F(HedgeActors, SketchWindowFollowsVirtualTime) {
  auto st = spawn_endpoint_stats(sys(), cfg);
  ask<hedge_plan>(st, hedge_plan_request{"k", eff()});
  tell(st, hedge_observation{"k", 0.02, call_health::success});
  advance(30s); // rotated: still visible in the previous window
  auto q = ask<latency_quantile_reply>(st, latency_quantile_request{"k", 0.5});
  ASSERT_TRUE(q);
  EXPECT_EQ(q->seconds, 0.02);
  advance(60s); // two idle windows: cleared
  q = ask<latency_quantile_reply>(st, latency_quantile_request{"k", 0.5});
  ASSERT_TRUE(q);
  EXPECT_FALSE(q->seconds);
}

TEST_F(HedgeActors, ASentHedgeFiresTheHookAndTheBucketRefillsOnVirtualTime) {
  auto st = spawn_endpoint_stats(sys(), cfg);
  tell(st, hedge_subscribe{spawn_hooks()});
  endpoint_config ep;
  ep.estimated_rps = 10.0; // 1 token/s, burst 2
  ask<hedge_plan>(st, hedge_plan_request{"endpoint:e", eff(ep)});
  EXPECT_EQ(ask<bool>(st, hedge_token_request{"endpoint:e"}), true);
  EXPECT_EQ(ask<bool>(st, hedge_token_request{"endpoint:e"}), true);
  EXPECT_EQ(ask<bool>(st, hedge_token_request{"endpoint:e"}), false);
  EXPECT_TRUE(log->fired.empty()) << "granted is not fired";
  tell(st, hedge_token_outcome{"endpoint:e", true});
  tell(st, hedge_token_outcome{"endpoint:e", true});
  EXPECT_EQ(log->fired, (std::vector<std::string>{"endpoint:e", "endpoint:e"}));
  advance(999ms);
  EXPECT_EQ(ask<bool>(st, hedge_token_request{"endpoint:e"}), false);
  advance(1ms);
  EXPECT_EQ(ask<bool>(st, hedge_token_request{"endpoint:e"}), true);
  tell(st, hedge_token_outcome{"endpoint:e", true});
  EXPECT_EQ(log->fired.size(), 3u);
  tell(st, hedge_race_result{"endpoint:e", true, true});
  tell(st, hedge_circuit_blocked{"endpoint:e"});
  auto g = ask<hedge_stats_snapshot>(st, hedge_global_stats_request{});
  ASSERT_TRUE(g);
  EXPECT_EQ(g->hedged_requests, 3u);
  EXPECT_EQ(g->budget_exhausted, 2u);
  EXPECT_EQ(g->hedge_wins, 1u);
  EXPECT_EQ(g->circuit_blocked, 1u);
}

// An owner that dies with a grant's reply in flight abandons its lease:
// what it never settled goes back, what it settled does not go back twice,
// and another owner's tokens are untouched.
TEST_F(HedgeActors, AnAbandonedLeaseGivesBackOnlyTheUnsettledTokens) {
  auto st = spawn_endpoint_stats(sys(), cfg);
  tell(st, hedge_subscribe{spawn_hooks()});
  endpoint_config ep;
  ep.estimated_rps = 10.0; // 1 token/s, burst 2
  ask<hedge_plan>(st, hedge_plan_request{"endpoint:e", eff(ep)});
  EXPECT_EQ(ask<bool>(st, hedge_token_request{"endpoint:e", 7}), true);
  EXPECT_EQ(ask<bool>(st, hedge_token_request{"endpoint:e", 8}), true);
  EXPECT_EQ(ask<bool>(st, hedge_token_request{"endpoint:e", 7}), false)
    << "a refusal puts nothing on the lease";
  tell(st, hedge_token_abandon{7});
  tell(st, hedge_token_abandon{7}); // twice: the second finds nothing
  EXPECT_EQ(ask<bool>(st, hedge_token_request{"endpoint:e", 9}), true)
    << "owner 7's one token went back";
  EXPECT_EQ(ask<bool>(st, hedge_token_request{"endpoint:e", 9}), false)
    << "exactly one: owner 8's token is still out";
  tell(st, hedge_token_outcome{"endpoint:e", true, 8});
  tell(st, hedge_token_abandon{8});
  EXPECT_EQ(ask<bool>(st, hedge_token_request{"endpoint:e", 10}), false)
    << "a settled token does not come back with the lease";
  auto g = ask<hedge_stats_snapshot>(st, hedge_global_stats_request{});
  ASSERT_TRUE(g);
  EXPECT_EQ(g->hedged_requests, 1u);
  EXPECT_EQ(log->fired.size(), 1u);
}

// A token returned by its outcome is off the lease: the owner's abandon
// (sent at every hedged call's end) must not return it a second time. The
// bucket is not full here, so a second return would show.
TEST_F(HedgeActors, AReturnedTokenIsNotReturnedAgainByTheAbandon) {
  auto st = spawn_endpoint_stats(sys(), cfg);
  endpoint_config ep;
  ep.estimated_rps = 10.0; // 1 token/s, burst 2
  ask<hedge_plan>(st, hedge_plan_request{"endpoint:e", eff(ep)});
  EXPECT_EQ(ask<bool>(st, hedge_token_request{"endpoint:e", 7}), true);
  EXPECT_EQ(ask<bool>(st, hedge_token_request{"endpoint:e", 8}), true);
  tell(st, hedge_token_outcome{"endpoint:e", false, 7});
  tell(st, hedge_token_abandon{7});
  tell(st, hedge_token_outcome{"endpoint:e", true, 8});
  tell(st, hedge_token_abandon{8});
  EXPECT_EQ(ask<bool>(st, hedge_token_request{"endpoint:e", 9}), true);
  EXPECT_EQ(ask<bool>(st, hedge_token_request{"endpoint:e", 9}), false)
    << "owner 7's token came back once; owner 8's was fired";
}

TEST_F(HedgeActors, ATokenWhoseHedgeWasNotSentGoesBackUncounted) {
  auto st = spawn_endpoint_stats(sys(), cfg);
  tell(st, hedge_subscribe{spawn_hooks()});
  endpoint_config ep;
  ep.estimated_rps = 10.0; // 1 token/s, burst 2
  ask<hedge_plan>(st, hedge_plan_request{"endpoint:e", eff(ep)});
  EXPECT_EQ(ask<bool>(st, hedge_token_request{"endpoint:e"}), true);
  EXPECT_EQ(ask<bool>(st, hedge_token_request{"endpoint:e"}), true);
  EXPECT_EQ(ask<bool>(st, hedge_token_request{"endpoint:e"}), false);
  tell(st, hedge_token_outcome{"endpoint:e", false}); // primary answered
  EXPECT_EQ(ask<bool>(st, hedge_token_request{"endpoint:e"}), true)
    << "the unused token went back";
  auto g = ask<hedge_stats_snapshot>(st, hedge_global_stats_request{});
  ASSERT_TRUE(g);
  EXPECT_EQ(g->hedged_requests, 0u);
  EXPECT_TRUE(log->fired.empty());
}

TEST_F(HedgeActors, BreakerSendsOneOpenPerOpenTransition) {
  auto br = spawn_breaker(sys(), cfg);
  tell(br, hedge_subscribe{spawn_hooks()});
  for (int i = 0; i < 30; ++i)
    tell(br, breaker_record{"host:a", "endpoint:e", cfg.breaker,
                            call_health::failure});
  EXPECT_EQ(log->opened,
            (std::vector<std::string>{"host host:a", "endpoint endpoint:e"}));
  auto g = ask<breaker_gate_result>(
    br, breaker_allow_request{"host:a", "endpoint:e", cfg.breaker});
  ASSERT_TRUE(g);
  EXPECT_EQ(g->gate, hedge_gate::blocked_host);
  // Cooldown over (virtual time): half-open probes; both fail ⇒ a new OPEN
  // in each tier, announced once each.
  advance(10s);
  auto p1 = ask<breaker_gate_result>(
    br, breaker_allow_request{"host:a", "endpoint:e", cfg.breaker});
  auto p2 = ask<breaker_gate_result>(
    br, breaker_allow_request{"host:a", "endpoint:e", cfg.breaker});
  ASSERT_TRUE(p1 && p2);
  ASSERT_EQ(p1->gate, hedge_gate::allowed);
  ASSERT_EQ(p2->gate, hedge_gate::allowed);
  EXPECT_TRUE(p1->permit.holds_probe());
  tell(br, breaker_complete{p1->permit, call_health::failure});
  tell(br, breaker_complete{p2->permit, call_health::failure});
  EXPECT_EQ(log->opened.size(), 4u);
  EXPECT_EQ(log->opened[2], "host host:a");
  EXPECT_EQ(log->opened[3], "endpoint endpoint:e");
}

TEST_F(HedgeActors, BreakerReleasedProbeIsHandedOutAgainAndClosesOnSuccess) {
  auto br = spawn_breaker(sys(), cfg);
  for (int i = 0; i < 4; ++i)
    tell(br, breaker_record{"host:a", "host:a", cfg.breaker,
                            call_health::server_error});
  advance(10s);
  breaker_allow_request req{"host:a", "host:a", cfg.breaker};
  auto p1 = ask<breaker_gate_result>(br, req);
  auto p2 = ask<breaker_gate_result>(br, req);
  ASSERT_EQ(p1->gate, hedge_gate::allowed);
  ASSERT_EQ(p2->gate, hedge_gate::allowed);
  EXPECT_EQ(ask<breaker_gate_result>(br, req)->gate, hedge_gate::blocked_host);
  tell(br, breaker_release{p1->permit}); // its primary won
  auto p3 = ask<breaker_gate_result>(br, req);
  ASSERT_EQ(p3->gate, hedge_gate::allowed);
  tell(br, breaker_complete{p2->permit, call_health::success});
  tell(br, breaker_complete{p3->permit, call_health::success});
  auto s = ask<breaker_snapshot_reply>(
    br, breaker_snapshot_request{breaker_scope::host, "host:a"});
  ASSERT_TRUE(s && s->snapshot);
  EXPECT_EQ(s->snapshot->phase, breaker_phase::closed);
  EXPECT_EQ(s->snapshot->trials, 0);
  EXPECT_EQ(ask<breaker_gate_result>(br, req)->gate, hedge_gate::allowed);
}

TEST_F(HedgeActors, HooksCanBeCallbacks) {
  std::vector<std::string> calls;
  hedge_hook_callbacks cbs;
  cbs.on_hedge_fired = [&](const std::string& k) {
    calls.push_back("fired " + k);
  };
  cbs.on_circuit_open = [&](const std::string& scope, const std::string& k) {
    calls.push_back("open " + scope + " " + k);
  };
  cbs.detached = false; // on the test coordinator
  auto hooks = spawn_hedge_hook_callbacks(sys(), cbs);
  auto br = spawn_breaker(sys(), cfg);
  auto st = spawn_endpoint_stats(sys(), cfg);
  tell(br, hedge_subscribe{hooks});
  tell(st, hedge_subscribe{hooks});
  ask<hedge_plan>(st, hedge_plan_request{"host:a", eff()});
  EXPECT_EQ(ask<bool>(st, hedge_token_request{"host:a"}), true);
  tell(st, hedge_token_outcome{"host:a", true});
  breaker_config strict = cfg.breaker;
  strict.min_samples = 1000; // only the host tier trips
  for (int i = 0; i < 4; ++i)
    tell(br,
         breaker_record{"host:a", "endpoint:e", strict, call_health::failure});
  EXPECT_EQ(calls,
            (std::vector<std::string>{"fired host:a", "open host host:a"}));
}

TEST_F(HedgeActors, SpawnRejectsABadConfigByField) {
  cfg.percentile = 1.0;
  try {
    spawn_breaker(sys(), cfg);
    FAIL() << "accepted";
  } catch (const config_error& e) {
    EXPECT_EQ(e.field(), "hedge.percentile");
  }
  try {
    spawn_endpoint_stats(sys(), cfg);
    FAIL() << "accepted";
  } catch (const config_error& e) {
    EXPECT_EQ(e.field(), "hedge.percentile");
  }
}

// A per-call config the stats actor cannot hold (a zero sketch window makes
// the key's windowed sketch throw) is answered with an error; the actor
// stays alive, keeps every other key's statistics and serves the next call.
// Before the handlers were guarded this request ended the actor.
TEST_F(HedgeActors, AThrowingRequestIsAnsweredWithAnErrorAndTheActorLivesOn) {
  auto st = spawn_endpoint_stats(sys(), cfg);
  ASSERT_TRUE(ask<hedge_plan>(st, hedge_plan_request{"k", eff()}));
  auto bad = eff();
  bad.window_duration = 0.0;
  auto err = std::make_shared<std::optional<caf::error>>();
  auto answered = std::make_shared<bool>(false);
  sys().spawn([=](caf::event_based_actor* self) {
    self->request(st, caf::infinite, hedge_plan_request{"poison", bad})
      .then([=](hedge_plan&) { *answered = true; },
            [=](caf::error& e) { *err = std::move(e); });
  });
  run();
  EXPECT_FALSE(*answered);
  ASSERT_TRUE(*err);
  EXPECT_EQ(**err, caf::sec::runtime_error);
  EXPECT_NE(sys().render(**err).find("endpoint stats"), std::string::npos)
    << sys().render(**err);
  // Still alive, and "k" kept its count.
  tell(st, hedge_observation{"poison", 0.01, call_health::success});
  auto s = ask<hedge_stats_reply>(st, hedge_stats_request{"k"});
  ASSERT_TRUE(s && s->stats);
  EXPECT_EQ(s->stats->total_requests, 1u);
  ASSERT_TRUE(ask<hedge_plan>(st, hedge_plan_request{"k", eff()}));
}
