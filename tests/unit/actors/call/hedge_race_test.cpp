// The hedging race in the call actor, on CAF's test
// coordinator behind the scripted fake transport: every time asserted here
// is exact virtual time. Request i of a test gets script step i (the
// primary of the first call is request 0, its hedge request 1, ...).

#include "actors/client/service_client.hpp"
#include "actors/hedge/hedge_hooks.hpp"

#include "tests/support/fake_transport.hpp"
#include "tests/support/outcome_checks.hpp"
#include "tests/support/virtual_time_fixture.hpp"

#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>

#include <gtest/gtest.h>

using namespace outbound;
using namespace outbound::testing;
using namespace std::chrono_literals;
using std::chrono::nanoseconds;

namespace {

using ek = transport_error_kind;

struct call_result {
  std::optional<call_outcome> outcome;
  caf::actor_clock::time_point at;
};

call_request get(std::string path) {
  call_request c;
  c.method = "GET";
  c.path = std::move(path);
  return c;
}

fake_step ok_after(nanoseconds d, std::string body = R"({"v":1})") {
  return fake_step::status(200, std::move(body)).delayed(d);
}

class HedgeRace : public virtual_time_fixture {
protected:
  HedgeRace() {
    hedged_call_defaults(cfg, hedging);
  }

  service_client_actor client() {
    if (!client_) {
      client_options opts;
      transport_ = spawn_fake_transport(sys(), log);
      opts.transport = *transport_;
      opts.seed = 7;
      opts.hedging = hedging;
      auto fired = fired_;
      auto opened = opened_;
      hedge_hook_callbacks cbs;
      cbs.detached = false;
      cbs.on_hedge_fired = [fired](const std::string& k) {
        fired->push_back(k);
      };
      cbs.on_circuit_open
        = [opened](const std::string& s, const std::string& k) {
            opened->push_back(s + " " + k);
          };
      opts.hedging->hooks = spawn_hedge_hook_callbacks(sys(), cbs);
      client_ = make_service_client(sys(), cfg, std::move(opts));
    }
    return *client_;
  }

  std::shared_ptr<call_result> start(call_request req) {
    auto res = std::make_shared<call_result>();
    auto c = client();
    sys().spawn([=](caf::event_based_actor* self) {
      self->request(c, caf::infinite, req).then([=](call_outcome& o) {
        res->outcome = std::move(o);
        res->at = self->clock().now();
      });
    });
    return res;
  }

  call_outcome run_call(call_request req) {
    auto r = start(std::move(req));
    EXPECT_TRUE(run_to_quiescence());
    if (!r->outcome) {
      ADD_FAILURE() << "no outcome";
      return no_outcome("no outcome");
    }
    finished_at = r->at;
    return *r->outcome;
  }

  hedging_handles handles() {
    hedging_handles h;
    auto c = client();
    sys().spawn([=, &h](caf::event_based_actor* self) {
      self->request(c, caf::infinite, hedging_handles_request{})
        .then([&h](hedging_handles& x) { h = x; });
    });
    run();
    return h;
  }

  hedge_stats_snapshot stats(const std::string& key) {
    hedge_stats_snapshot s;
    auto h = handles();
    sys().spawn([=, &s](caf::event_based_actor* self) {
      self->request(h.stats, caf::infinite, hedge_stats_request{key})
        .then([&s](hedge_stats_reply& r) {
          if (r.stats)
            s = *r.stats;
        });
    });
    run();
    return s;
  }

  std::optional<breaker_snapshot> breaker(breaker_scope scope,
                                          const std::string& key) {
    std::optional<breaker_snapshot> s;
    auto h = handles();
    sys().spawn([=, &s](caf::event_based_actor* self) {
      self
        ->request(h.breakers, caf::infinite,
                  breaker_snapshot_request{scope, key})
        .then([&s](breaker_snapshot_reply& r) { s = r.snapshot; });
    });
    run();
    return s;
  }

  retry_budget_stats budget() {
    retry_budget_stats s;
    auto c = client();
    sys().spawn([=, &s](caf::event_based_actor* self) {
      self->request(c, caf::infinite, retry_budget_request{})
        .then([&s](retry_budget_stats& x) { s = x; });
    });
    run();
    return s;
  }

  nanoseconds arrival(size_t i) const {
    return log->requests.at(i).at - t0_;
  }

  nanoseconds finished() const {
    return finished_at - t0_;
  }

  uint64_t exchange(size_t i) const {
    return log->requests.at(i).request.exchange_id;
  }

  static constexpr const char* host_key = "host:127.0.0.1:8080";

  client_config cfg;
  hedging_options hedging;
  std::shared_ptr<fake_log> log = std::make_shared<fake_log>();
  std::optional<service_client_actor> client_;
  std::optional<transport_actor> transport_;
  caf::actor_clock::time_point finished_at;
  std::shared_ptr<std::vector<std::string>> fired_
    = std::make_shared<std::vector<std::string>>();
  std::shared_ptr<std::vector<std::string>> opened_
    = std::make_shared<std::vector<std::string>>();
};

} // namespace

// The hedge is the primary's request built again (the first build went
// out with the primary): the same method, target, headers, body and id.
TEST_F(HedgeRace, TheHedgeCarriesThePrimarysRequestByteForByte) {
  log->script = {ok_after(300ms, R"({"who":"primary"})"),
                 ok_after(5ms, R"({"who":"hedge"})")};
  auto req = get("/slow");
  req.params = {{"q", "x y"}};
  req.headers = {{"x-tenant", "t1"}, {"X-Request-Id", "caller-7"}};
  auto o = run_call(std::move(req));
  ASSERT_TRUE(o.ok()) << o.error->detail;
  ASSERT_EQ(log->requests.size(), 2u);
  const auto& p = log->requests[0].request;
  const auto& h = log->requests[1].request;
  EXPECT_EQ(h.method, p.method);
  EXPECT_EQ(h.target, p.target);
  EXPECT_EQ(h.headers, p.headers);
  EXPECT_EQ(h.body, p.body);
  EXPECT_EQ(*find_header(h.headers, "x-request-id"), "caller-7");
  EXPECT_NE(h.exchange_id, p.exchange_id);
}

TEST_F(HedgeRace, ASlowPrimaryLosesToAFastHedge) {
  log->script = {ok_after(300ms, R"({"who":"primary"})"),
                 ok_after(5ms, R"({"who":"hedge"})")};
  auto o = run_call(get("/slow"));
  ASSERT_TRUE(o.ok()) << o.error->detail;
  EXPECT_EQ(o.body.at("who").as_string(), "hedge");
  ASSERT_EQ(log->requests.size(), 2u);
  EXPECT_EQ(arrival(0), 0ns);
  EXPECT_EQ(arrival(1), 10ms); // the warmup delay
  EXPECT_EQ(finished(), 15ms);
  // The same request id on both legs; the loser (the primary) is cancelled
  // the moment the hedge answers.
  EXPECT_EQ(*find_header(log->requests[1].request.headers, "x-request-id"),
            *find_header(log->requests[0].request.headers, "x-request-id"));
  ASSERT_EQ(log->cancels, std::vector<uint64_t>{exchange(0)});
  EXPECT_EQ(log->cancel_times.at(0) - t0_, 15ms);
  // The hedge gets the attempt's remaining budget (1 s - 10 ms).
  EXPECT_EQ(log->requests[1].request.timeout_ns,
            nanoseconds{1000ms - 10ms}.count());
  auto s = stats(host_key);
  EXPECT_EQ(s.total_requests, 1u);
  EXPECT_EQ(s.hedged_requests, 1u);
  EXPECT_EQ(s.hedge_wins, 1u);
  EXPECT_EQ(s.primary_wins, 0u);
  EXPECT_EQ(*fired_, std::vector<std::string>{host_key});
}

TEST_F(HedgeRace, AFastPrimarySendsNoHedge) {
  log->script = {ok_after(9ms)};
  auto o = run_call(get("/fast"));
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(log->requests.size(), 1u);
  EXPECT_EQ(finished(), 9ms);
  EXPECT_TRUE(log->cancels.empty());
  auto s = stats(host_key);
  EXPECT_EQ(s.total_requests, 1u);
  EXPECT_EQ(s.hedged_requests, 0u);
  EXPECT_TRUE(fired_->empty());
}

TEST_F(HedgeRace, APrimaryThatWinsCancelsTheHedge) {
  log->script = {ok_after(30ms, R"({"who":"primary"})"),
                 ok_after(100ms, R"({"who":"hedge"})")};
  auto o = run_call(get("/x"));
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o.body.at("who").as_string(), "primary");
  ASSERT_EQ(log->requests.size(), 2u);
  EXPECT_EQ(finished(), 30ms);
  EXPECT_EQ(log->cancels, std::vector<uint64_t>{exchange(1)});
  auto s = stats(host_key);
  EXPECT_EQ(s.hedge_wins, 0u);
  EXPECT_EQ(s.primary_wins, 1u);
}

TEST_F(HedgeRace, PostAndExplicitlyNonIdempotentGetsAreNeverHedged) {
  log->script = {ok_after(300ms), ok_after(300ms)};
  call_request p;
  p.method = "POST";
  p.path = "/orders";
  p.body = "{}";
  p.has_body = true;
  ASSERT_TRUE(run_call(p).ok());
  auto g = get("/once");
  g.idempotent = false;
  ASSERT_TRUE(run_call(g).ok());
  EXPECT_EQ(log->requests.size(), 2u);
  EXPECT_EQ(stats(host_key).hedged_requests, 0u);
}

// A fast-failing hedge must not fail a call whose primary succeeds.
TEST_F(HedgeRace, AFastFailingHedgeDoesNotFailTheCall) {
  log->script = {ok_after(300ms, R"({"who":"primary"})"),
                 fake_step::fail(ek::connect, false)};
  auto o = run_call(get("/x"));
  ASSERT_TRUE(o.ok()) << o.error->detail;
  EXPECT_EQ(o.body.at("who").as_string(), "primary");
  EXPECT_EQ(log->requests.size(), 2u);
  EXPECT_EQ(finished(), 300ms);
  EXPECT_EQ(o.attempts, 1);
}

TEST_F(HedgeRace, ARetryableStatusFromTheHedgeDoesNotEndTheRace) {
  log->script = {ok_after(200ms, R"({"who":"primary"})"),
                 fake_step::status(503).delayed(1ms)};
  auto o = run_call(get("/x"));
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o.body.at("who").as_string(), "primary");
  EXPECT_EQ(finished(), 200ms);
  EXPECT_EQ(log->requests.size(), 2u);
}

// A definitive answer (a 404) wins even from the hedge: the primary would
// have said the same.
TEST_F(HedgeRace, ADefinitiveStatusFromTheHedgeWins) {
  log->script = {ok_after(300ms),
                 fake_step::status(404, R"({"detail":"no"})").delayed(2ms)};
  auto o = run_call(get("/x"));
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.error->kind, error_kind::request_error);
  EXPECT_EQ(o.status, 404);
  EXPECT_EQ(finished(), 12ms);
  EXPECT_EQ(log->cancels, std::vector<uint64_t>{exchange(0)});
}

// Both legs fail: the later failure goes through the retry policy, and the
// next attempt races again.
TEST_F(HedgeRace, BothLegsFailingRetriesAndTheNextAttemptHedgesAgain) {
  log->script = {fake_step::status(503).delayed(50ms),
                 fake_step::status(503).delayed(50ms),
                 ok_after(300ms, R"({"who":"primary2"})"),
                 ok_after(1ms, R"({"who":"hedge2"})")};
  auto o = run_call(get("/x"));
  ASSERT_TRUE(o.ok()) << o.error->detail;
  EXPECT_EQ(o.body.at("who").as_string(), "hedge2");
  ASSERT_EQ(log->requests.size(), 4u);
  EXPECT_EQ(o.attempts, 2);
  EXPECT_EQ(arrival(1), 10ms);
  // Attempt 2 starts after the backoff; its hedge 10 ms later.
  EXPECT_EQ(arrival(3) - arrival(2), 10ms);
  EXPECT_EQ(*find_header(log->requests[3].request.headers, "x-retry-count"),
            "1");
  auto s = stats(host_key);
  EXPECT_EQ(s.hedged_requests, 2u);
  // Race 1 had no winner (both legs failed): only race 2 counts.
  EXPECT_EQ(s.hedge_wins, 1u);
  EXPECT_EQ(s.primary_wins, 0u);
}

// Both legs time out: one attempt timeout, both exchanges cancelled.
TEST_F(HedgeRace, BothLegsTimingOutEndTheAttemptAtItsBudget) {
  cfg.retry.max_attempts = 1;
  log->script = {fake_step::stall(), fake_step::stall()};
  auto o = run_call(get("/x"));
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.error->kind, error_kind::service_unavailable);
  EXPECT_EQ(finished(), 1000ms);
  EXPECT_EQ(log->cancels.size(), 2u);
}

// hedging.md case 9a: an exhausted budget only suppresses the hedge.
TEST_F(HedgeRace, Case9aAnExhaustedBudgetOnlySuppressesTheHedge) {
  hedging.config.budget_percent = 0;
  log->script = {ok_after(300ms)};
  auto o = run_call(get("/slow"));
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o.body.at("v").as_int64(), 1);
  EXPECT_EQ(finished(), 300ms);
  EXPECT_EQ(log->requests.size(), 1u);
  EXPECT_TRUE(log->cancels.empty());
  auto s = stats(host_key);
  EXPECT_EQ(s.budget_exhausted, 1u);
  EXPECT_EQ(s.hedged_requests, 0u);
  EXPECT_TRUE(fired_->empty());
}

// hedging.md case 9b: the budget allows one hedge but not a second.
TEST_F(HedgeRace, Case9bTheBudgetAllowsOneHedgeButNotASecond) {
  // rate = 5 rps x 10 % = 0.5 tokens/s; burst max(2 x 0.5, 1) = 1 token.
  hedging.config.estimated_rps = 5.0;
  log->script
    = {ok_after(300ms, R"({"who":"p1"})"), ok_after(300ms, R"({"who":"p2"})"),
       ok_after(100ms, R"({"who":"h1"})")};
  auto a = start(get("/slow"));
  auto b = start(get("/slow"));
  ASSERT_TRUE(run_to_quiescence());
  ASSERT_TRUE(a->outcome && b->outcome);
  ASSERT_EQ(log->requests.size(), 3u);
  // One call won with its hedge at 110 ms, the other with its primary.
  std::vector<std::string> whos{
    std::string{a->outcome->body.at("who").as_string()},
    std::string{b->outcome->body.at("who").as_string()}};
  std::sort(whos.begin(), whos.end());
  EXPECT_EQ(whos, (std::vector<std::string>{"h1", "p2"}));
  // Only the loser is cancelled, after the winner arrived.
  ASSERT_EQ(log->cancels, std::vector<uint64_t>{exchange(0)});
  EXPECT_EQ(log->cancel_times.at(0) - t0_, 110ms);
  auto s = stats(host_key);
  EXPECT_EQ(s.hedged_requests, 1u);
  EXPECT_EQ(s.budget_exhausted, 1u);
}

// The client's retry budget pays for hedges too: with nothing in it the
// hedge token is granted but the hedge is not sent (the token goes back);
// the primary alone answers.
TEST_F(HedgeRace, AnEmptyRetryBudgetStopsTheHedgeNeverThePrimary) {
  cfg.retry_budget.percent = 0;
  cfg.retry_budget.min_per_second = 0;
  log->script = {ok_after(300ms)};
  auto o = run_call(get("/slow"));
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(finished(), 300ms);
  EXPECT_EQ(log->requests.size(), 1u);
  auto s = stats(host_key);
  EXPECT_EQ(s.hedged_requests, 0u);
  EXPECT_TRUE(fired_->empty());
  auto b = budget();
  EXPECT_EQ(b.deposits, 1u);
  EXPECT_EQ(b.refusals[static_cast<int>(extra_kind::hedge)], 1u);
  EXPECT_EQ(b.withdrawals[static_cast<int>(extra_kind::hedge)], 0u);
}

TEST_F(HedgeRace, AHedgeTheRetryBudgetPaysForIsCounted) {
  log->script = {ok_after(300ms), ok_after(5ms)};
  ASSERT_TRUE(run_call(get("/slow")).ok());
  EXPECT_EQ(log->requests.size(), 2u);
  auto b = budget();
  EXPECT_EQ(b.withdrawals[static_cast<int>(extra_kind::hedge)], 1u);
  EXPECT_EQ(b.refusals[static_cast<int>(extra_kind::hedge)], 0u);
  EXPECT_EQ(b.balance, 99u); // 10/s x 10 s + 20 % of 1 call - 1
}

// A hedge the pool refuses (no free connection; hedges never queue) never
// left: the withdrawal it paid goes back to the retry budget.
TEST_F(HedgeRace, AHedgeThePoolRefusedGivesItsWithdrawalBack) {
  log->refuse_hedges = 0ns;
  log->script = {ok_after(300ms)};
  ASSERT_TRUE(run_call(get("/slow")).ok());
  ASSERT_EQ(log->refused.size(), 1u);
  auto b = budget();
  EXPECT_EQ(b.withdrawals[static_cast<int>(extra_kind::hedge)], 1u);
  EXPECT_EQ(b.returned[static_cast<int>(extra_kind::hedge)], 1u);
  EXPECT_EQ(b.balance, 100u); // 10/s x 10 s + 20 % of 1 call, nothing owed
}

// No hedge that could not finish before the attempt's deadline: at the
// hedge's due time (10 ms, the warmup delay) a 15 ms attempt has 5 ms
// left, less than the delay, so no hedge is sent; with 25 ms (15 ms left)
// it is.
TEST_F(HedgeRace, NoHedgeWhenTheAttemptHasLessTimeLeftThanTheDelay) {
  cfg.timeout = 0.015;
  log->script = {ok_after(12ms, R"({"who":"primary"})")};
  auto o = run_call(get("/x"));
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o.body.at("who").as_string(), "primary");
  EXPECT_EQ(log->requests.size(), 1u);
  EXPECT_EQ(stats(host_key).hedged_requests, 0u);
  EXPECT_EQ(budget().withdrawals[static_cast<int>(extra_kind::hedge)], 0u);
}

TEST_F(HedgeRace, AHedgeWithMoreTimeLeftThanTheDelayIsSent) {
  cfg.timeout = 0.025;
  log->script = {ok_after(20ms, R"({"who":"primary"})"),
                 ok_after(1ms, R"({"who":"hedge"})")};
  auto o = run_call(get("/x"));
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o.body.at("who").as_string(), "hedge");
  EXPECT_EQ(log->requests.size(), 2u);
}

// A retry whose backoff plus the learned latency (the key's p90, 20 ms)
// would end past the overall deadline is not made: the call ends at once
// with the answer it has and reason deadline_unreachable, instead of at
// the deadline. One that fits is made.
class HedgeRaceLearned : public HedgeRace {
protected:
  HedgeRaceLearned() {
    hedging.config.warmup_delay = 1.0; // no hedge while warming up
    hedging.config.warmup_requests = 20;
    hedging.config.budget_percent = 0; // and none after: a lone primary
    cfg.deadline = 0.1;
    cfg.retry.base_backoff = 0; // retries at once, no jitter
    for (int i = 0; i < 30; ++i)
      log->script.push_back(ok_after(20ms));
  }

  void warm_up() {
    for (int i = 0; i < 30; ++i)
      ASSERT_TRUE(run_call(get("/x")).ok());
    ASSERT_EQ(log->requests.size(), 30u);
  }

  /// After the warm-up, a 503 at 75 ms is retried (75 + 20 < 100 ms) and
  /// the retry's answer at 80 ms ends the call.
  void expect_a_retry_at_75ms_is_made() {
    log->script.push_back(fake_step::status(503).delayed(75ms));
    log->script.push_back(ok_after(5ms));
    warm_up();
    auto start = now();
    auto o = run_call(get("/x"));
    ASSERT_TRUE(o.ok()) << o.error->message();
    EXPECT_EQ(finished_at - start, 80ms);
    EXPECT_EQ(log->requests.size(), 32u);
  }
};

TEST_F(HedgeRaceLearned, ARetryThatCannotFinishInTheDeadlineEndsTheCallNow) {
  log->script.push_back(fake_step::status(503).delayed(85ms));
  log->script.push_back(ok_after(5ms));
  warm_up();
  auto start = now();
  auto o = run_call(get("/x"));
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.error->kind, error_kind::server_error);
  EXPECT_EQ(o.error->status, 503);
  EXPECT_EQ(o.error->reason, give_up_reason::deadline_unreachable);
  EXPECT_EQ(finished_at - start, 85ms); // not 100 ms
  EXPECT_EQ(log->requests.size(), 31u);
}

TEST_F(HedgeRaceLearned, ARetryThatFitsInTheDeadlineIsMade) {
  expect_a_retry_at_75ms_is_made();
}

// The learned latency is the sketch's, not the hedge delay: a min_delay
// above it (50 ms against 20 ms) floors when the hedge goes out, not what
// an attempt is expected to take. Read as the delay, it refused this retry
// (75 + 50 > 100 ms) that fits (75 + 20 < 100).
TEST_F(HedgeRaceLearned, AMinDelayAboveTheLearnedLatencyDoesNotRefuseARetry) {
  hedging.config.min_delay = 0.05;
  expect_a_retry_at_75ms_is_made();
}

TEST_F(HedgeRace, AnUnknownExplicitEndpointIsAnErrorAndSendsNothing) {
  hedging.routes.register_route("GET", "/users/{id}", {}, "user");
  log->script = {ok_after(1ms)};
  auto c = get("/users/1");
  c.hedge_endpoint = "nobody";
  auto o = run_call(c);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.error->kind, error_kind::config_error);
  EXPECT_NE(o.error->detail.find("nobody"), std::string::npos);
  EXPECT_TRUE(o.error->nothing_sent);
  EXPECT_TRUE(log->requests.empty());
}

TEST_F(HedgeRace, RoutesKeyTheStatsAndAnExplicitNameBypassesMatching) {
  endpoint_config fast;
  fast.hedge_delay = 0.002;
  hedging.routes.register_route("GET", "/users/{id}", fast, "user");
  hedging.routes.register_route("GET", "/orders/*");
  log->script = {ok_after(100ms), ok_after(1ms),   ok_after(100ms),
                 ok_after(1ms),   ok_after(100ms), ok_after(1ms)};
  ASSERT_TRUE(run_call(get("/users/42?x=1")).ok());
  EXPECT_EQ(arrival(1) - arrival(0), 2ms); // the hardcoded delay
  ASSERT_TRUE(run_call(get("/orders/7")).ok());
  EXPECT_EQ(arrival(3) - arrival(2), 10ms); // warmup, defaults
  auto c = get("/somewhere/else");
  c.hedge_endpoint = "user";
  ASSERT_TRUE(run_call(c).ok());
  EXPECT_EQ(arrival(5) - arrival(4), 2ms);
  EXPECT_EQ(stats("endpoint:user").total_requests, 2u);
  EXPECT_EQ(stats("endpoint:GET /orders/*").total_requests, 1u);
  EXPECT_EQ(stats(host_key).total_requests, 0u);
}

// After warmup the delay is the learned p90 of the key's latencies.
TEST_F(HedgeRace, AfterWarmupTheHedgeFiresAtTheLearnedPercentile) {
  hedging.config.warmup_delay = 1.0; // no hedge while warming up
  hedging.config.warmup_requests = 20;
  for (int i = 0; i < 30; ++i)
    log->script.push_back(ok_after(20ms));
  log->script.push_back(ok_after(300ms, R"({"who":"primary"})"));
  log->script.push_back(ok_after(1ms, R"({"who":"hedge"})"));
  for (int i = 0; i < 30; ++i)
    ASSERT_TRUE(run_call(get("/x")).ok());
  ASSERT_EQ(log->requests.size(), 30u);
  auto o = run_call(get("/x"));
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o.body.at("who").as_string(), "hedge");
  ASSERT_EQ(log->requests.size(), 32u);
  auto delay = arrival(31) - arrival(30);
  // DDSketch's relative accuracy: 20 ms +- 1 %.
  EXPECT_GE(delay, 19800us);
  EXPECT_LE(delay, 20200us);
  auto s = stats(host_key);
  EXPECT_EQ(s.warmup_requests, 20u);
  EXPECT_EQ(s.total_requests, 31u);
}

// The breakers only ever suppress hedges: an open host breaker blocks the
// hedge, the primary still goes out and answers.
TEST_F(HedgeRace, AnOpenHostBreakerBlocksHedgesNeverThePrimary) {
  hedging.config.breaker.min_samples = 4;
  hedging.config.breaker.cooldown = 60.0;
  cfg.retry.max_attempts = 1;
  for (int i = 0; i < 4; ++i)
    log->script.push_back(fake_step::status(500)); // 4 x 5xx: trips
  log->script.push_back(ok_after(300ms, R"({"who":"primary"})"));
  for (int i = 0; i < 4; ++i)
    ASSERT_FALSE(run_call(get("/x")).ok());
  auto b = breaker(breaker_scope::host, host_key);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->phase, breaker_phase::open);
  EXPECT_EQ(*opened_,
            std::vector<std::string>{std::string{"host "} + host_key});
  auto o = run_call(get("/x"));
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o.body.at("who").as_string(), "primary");
  EXPECT_EQ(log->requests.size(), 5u);
  EXPECT_EQ(finished() - arrival(4), 300ms);
  auto s = stats(host_key);
  EXPECT_EQ(s.circuit_blocked, 1u);
  EXPECT_EQ(s.hedged_requests, 0u);
  EXPECT_EQ(s.errors, 4u);
  // Exactly one open notification for the one OPEN transition.
  EXPECT_EQ(opened_->size(), 1u);
}

// Half-open: a probe hedge cancelled because its primary won gives its
// permit back (no trial counted).
TEST_F(HedgeRace, AHalfOpenProbeCancelledByItsPrimaryReleasesThePermit) {
  hedging.config.breaker.min_samples = 2;
  hedging.config.breaker.cooldown = 1.0;
  hedging.config.breaker.half_open_max_trial = 1;
  cfg.retry.max_attempts = 1;
  log->script = {fake_step::status(500), fake_step::status(500),
                 ok_after(30ms, R"({"who":"primary"})"), ok_after(200ms)};
  ASSERT_FALSE(run_call(get("/x")).ok());
  ASSERT_FALSE(run_call(get("/x")).ok());
  advance(2s); // past the cooldown: the next allow() half-opens
  auto o = run_call(get("/x"));
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o.body.at("who").as_string(), "primary");
  ASSERT_EQ(log->requests.size(), 4u); // the probe hedge went out
  auto b = breaker(breaker_scope::host, host_key);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->phase, breaker_phase::half_open);
  EXPECT_EQ(b->permits_out, 0);
  EXPECT_EQ(b->trials, 0);
}

// Half-open: a probe hedge that fails while its primary still runs is a
// failed trial, whatever the primary does next. Counted only as the
// winner's outcome it was never a trial (the primary, failing later, won),
// and a host whose hedges fail fast while its primaries hang kept its
// breaker half-open for good, letting probe hedges through.
TEST_F(HedgeRace, AHalfOpenProbeThatFailsFirstReopensTheBreaker) {
  hedging.config.breaker.min_samples = 2;
  hedging.config.breaker.cooldown = 1.0;
  hedging.config.breaker.half_open_max_trial = 1;
  cfg.retry.max_attempts = 1;
  log->script = {fake_step::status(500), fake_step::status(500),
                 fake_step::status(503).delayed(300ms), fake_step::status(503)};
  ASSERT_FALSE(run_call(get("/x")).ok());
  ASSERT_FALSE(run_call(get("/x")).ok());
  advance(2s); // past the cooldown: the next allow() half-opens
  EXPECT_FALSE(run_call(get("/x")).ok());
  ASSERT_EQ(log->requests.size(), 4u); // the probe hedge went out
  auto b = breaker(breaker_scope::host, host_key);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->phase, breaker_phase::open) << "the failed probe reopens it";
  EXPECT_EQ(b->opens, 2u);
  EXPECT_EQ(b->half_opens, 1u);
  EXPECT_EQ(b->permits_out, 0);
}

// Breakers and error counters learn from every attempt (the winner of each
// race), not only from the call's final outcome: a backend that fails half
// of its attempts opens its breaker even though each call's retry hides the
// failure from the caller.
TEST_F(HedgeRace, ABackendFailingHalfItsAttemptsOpensItsBreakerBehindRetries) {
  hedging.config.breaker.min_samples = 4;
  hedging.config.breaker.cooldown = 60.0;
  hedging.config.breaker.error_rate_threshold = 0.5;
  cfg.retry.base_backoff = 0.001; // retry almost at once
  for (int i = 0; i < 2; ++i) {
    log->script.push_back(fake_step::status(503)); // retryable
    log->script.push_back(fake_step::status(200, R"({"v":1})"));
  }
  for (int i = 0; i < 2; ++i) {
    auto o = run_call(get("/x"));
    EXPECT_TRUE(o.ok()) << "the retry hides the failure from the caller";
    EXPECT_EQ(o.attempts, 2);
  }
  ASSERT_EQ(log->requests.size(), 4u) << "no hedge: every answer is at once";
  auto b = breaker(breaker_scope::host, host_key);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->phase, breaker_phase::open) << "2 of 4 attempts failed";
  EXPECT_EQ(*opened_,
            std::vector<std::string>{std::string{"host "} + host_key});
  auto s = stats(host_key);
  EXPECT_EQ(s.errors, 2u) << "one per failed attempt";
}

// A call the client never hedges (it has a body) runs without a call actor,
// but its attempts still reach the breakers (never the latency sketch).
TEST_F(HedgeRace, AnUnhedgedCallsAttemptsStillReachTheBreakers) {
  hedging.config.breaker.min_samples = 4;
  hedging.config.breaker.cooldown = 60.0;
  hedging.config.breaker.error_rate_threshold = 0.5;
  cfg.retry.base_backoff = 0.001;
  cfg.retry.retry_statuses = {503};
  for (int i = 0; i < 2; ++i) {
    log->script.push_back(fake_step::status(503));
    log->script.push_back(fake_step::status(200, R"({"v":1})"));
  }
  for (int i = 0; i < 2; ++i) {
    call_request p;
    p.method = "post";
    p.path = "/orders";
    p.body = "{}";
    p.has_body = true;
    p.idempotent = true; // retried, but never hedged: it has a body
    auto o = run_call(p);
    EXPECT_TRUE(o.ok()) << o.error->message();
    EXPECT_EQ(o.attempts, 2);
  }
  ASSERT_EQ(log->requests.size(), 4u);
  auto b = breaker(breaker_scope::host, host_key);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->phase, breaker_phase::open) << "2 of 4 attempts failed";
  auto s = stats(host_key);
  EXPECT_EQ(s.hedged_requests, 0u);
  EXPECT_EQ(s.total_requests, 0u) << "only hedgeable calls feed the sketch";
}

TEST_F(HedgeRace, AnUnhedgedCallNamingAnUnknownEndpointIsAConfigError) {
  call_request p;
  p.method = "POST";
  p.path = "/orders";
  p.body = "{}";
  p.has_body = true;
  p.hedge_endpoint = "nope";
  auto o = run_call(p);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.error->kind, error_kind::config_error);
  EXPECT_EQ(o.error->detail, "unknown hedge endpoint 'nope'");
  EXPECT_TRUE(o.error->nothing_sent);
  EXPECT_TRUE(log->requests.empty());
}

TEST_F(HedgeRace, AlwaysSucceedingAttemptsNeverOpenTheBreaker) {
  hedging.config.breaker.min_samples = 4;
  for (int i = 0; i < 6; ++i)
    log->script.push_back(fake_step::status(200, R"({"v":1})"));
  for (int i = 0; i < 6; ++i)
    EXPECT_TRUE(run_call(get("/x")).ok());
  auto b = breaker(breaker_scope::host, host_key);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->phase, breaker_phase::closed);
  EXPECT_EQ(stats(host_key).errors, 0u);
}

// A primary answering right at the hedge delay races the gates: whether the
// hedge goes out or not, on_hedge_fired and hedged_requests count exactly
// the hedges the transport saw (a token granted and not used goes back).
TEST_F(HedgeRace, OnlyHedgesActuallySentAreCountedWhateverTheRace) {
  for (nanoseconds d :
       {nanoseconds{9999us}, nanoseconds{10ms}, nanoseconds{10001us},
        nanoseconds{10002us}, nanoseconds{10005us}, nanoseconds{10010us}}) {
    SCOPED_TRACE(d.count());
    log->requests.clear();
    log->script = {ok_after(d, R"({"who":"primary"})"),
                   ok_after(500ms, R"({"who":"hedge"})")};
    auto before_fired = fired_->size();
    auto before = stats(host_key).hedged_requests;
    auto o = run_call(get("/x"));
    ASSERT_TRUE(o.ok());
    EXPECT_EQ(o.body.at("who").as_string(), "primary");
    auto hedges_sent = log->requests.size() - 1;
    EXPECT_LE(hedges_sent, 1u);
    EXPECT_EQ(stats(host_key).hedged_requests - before, hedges_sent);
    EXPECT_EQ(fired_->size() - before_fired, hedges_sent);
  }
}

// -- hedges never queue
// ---------------------------------------------------------

// The pool is at its connection limit: it refuses the hedge at once (hedges
// never queue). The hedge never left, so it is no hedge at all: not fired,
// not counted, no race, its token back in the bucket, and the primary's
// answer stands alone.
TEST_F(HedgeRace,
       AHedgeThePoolRefusesIsNotFiredNotCountedAndGivesItsTokenBack) {
  // rate = 5 rps x 10 % = 0.5 tokens/s; burst max(2 x 0.5, 1) = 1 token:
  // the second call can hedge only if the first gave its token back.
  hedging.config.estimated_rps = 5.0;
  log->refuse_hedges = nanoseconds{0};
  log->script
    = {ok_after(300ms, R"({"who":"p1"})"), ok_after(300ms, R"({"who":"p2"})")};
  auto o = run_call(get("/x"));
  ASSERT_TRUE(o.ok()) << o.error->detail;
  EXPECT_EQ(o.body.at("who").as_string(), "p1");
  EXPECT_EQ(finished(), 300ms);
  ASSERT_EQ(log->refused.size(), 1u);
  EXPECT_FALSE(log->refused[0].may_queue);
  EXPECT_TRUE(log->requests[0].request.may_queue); // primaries may queue
  EXPECT_TRUE(log->cancels.empty());               // nothing to cancel
  auto o2 = run_call(get("/x"));
  ASSERT_TRUE(o2.ok()) << o2.error->detail;
  EXPECT_EQ(log->refused.size(), 2u) << "the first hedge's token came back";
  EXPECT_EQ(log->requests.size(), 2u);
  auto s = stats(host_key);
  EXPECT_EQ(s.hedged_requests, 0u);
  EXPECT_EQ(s.hedge_wins, 0u);
  EXPECT_EQ(s.primary_wins, 0u);
  EXPECT_EQ(s.budget_exhausted, 0u);
  EXPECT_EQ(s.errors, 0u);
  EXPECT_TRUE(fired_->empty());
}

// The primary fails (a retryable 503) while the hedge's refusal is still on
// its way: the refused hedge must not become the attempt's "winner" (its
// pool_overflow would end the call, unretried); the primary's failure is the
// attempt's result and the call retries.
TEST_F(HedgeRace, APrimaryThatFailedBeforeTheRefusalArrivedIsRetried) {
  log->refuse_hedges = nanoseconds{5ms}; // refusal lands at 15 ms
  log->script
    = {fake_step::status(503).delayed(12ms), ok_after(20ms, R"({"who":"p2"})")};
  auto o = run_call(get("/x"));
  ASSERT_TRUE(o.ok()) << o.error->detail;
  EXPECT_EQ(o.body.at("who").as_string(), "p2");
  EXPECT_EQ(o.attempts, 2);
  EXPECT_EQ(log->refused.size(), 2u); // attempt 2 tried to hedge too
  ASSERT_EQ(log->requests.size(), 2u);
  // Attempt 2 starts after the refusal settled attempt 1 (15 ms) and its
  // backoff.
  EXPECT_GT(arrival(1), 15ms);
  auto s = stats(host_key);
  EXPECT_EQ(s.hedged_requests, 0u);
  EXPECT_EQ(s.hedge_wins, 0u);
  EXPECT_EQ(s.primary_wins, 0u);
  EXPECT_EQ(s.errors, 1u) << "the primary's 503, not the refusal";
  EXPECT_TRUE(fired_->empty());
}

// The pool refused the hedge, but the refusal reached the call after the
// primary's answer (under load the pool can hand the primary's freed
// connection to a queued waiter, then refuse the hedge): the race ended
// first and cancelled the hedge, yet the hedge never left. Its own answer
// settles its token: back to the bucket, not fired, no race counted.
TEST_F(HedgeRace, ARefusalArrivingAfterThePrimaryAnsweredGivesTheTokenBack) {
  // rate = 5 rps x 10 % = 0.5 tokens/s; burst max(2 x 0.5, 1) = 1 token:
  // the second call can hedge only if the first gave its token back.
  hedging.config.estimated_rps = 5.0;
  log->refuse_hedges = nanoseconds{20ms}; // the refusal lands at 30 ms
  log->script
    = {ok_after(25ms, R"({"who":"p1"})"), ok_after(300ms, R"({"who":"p2"})")};
  auto o = run_call(get("/x"));
  ASSERT_TRUE(o.ok()) << o.error->detail;
  EXPECT_EQ(o.body.at("who").as_string(), "p1");
  EXPECT_EQ(finished(), 25ms);
  ASSERT_EQ(log->refused.size(), 1u);
  // The call could not know yet: it cancelled its hedge at 25 ms.
  EXPECT_EQ(log->cancels, std::vector<uint64_t>{log->refused[0].exchange_id});
  auto s = stats(host_key);
  EXPECT_EQ(s.hedged_requests, 0u);
  EXPECT_EQ(s.primary_wins, 0u);
  EXPECT_EQ(s.hedge_wins, 0u);
  EXPECT_TRUE(fired_->empty());
  auto o2 = run_call(get("/x"));
  ASSERT_TRUE(o2.ok()) << o2.error->detail;
  EXPECT_EQ(o2.body.at("who").as_string(), "p2");
  EXPECT_EQ(log->refused.size(), 2u) << "the first hedge's token came back";
  EXPECT_EQ(stats(host_key).budget_exhausted, 0u);
}

// The primary won and cancelled the hedge; the call is answered, but the
// hedge's own answer (which settles its token) has not come when the pool
// dies. A dead pool answers nothing more: the owed token counts as fired at
// once, and the race held for it is counted (core/hedge_race.hpp, R12).
TEST_F(HedgeRace, APoolDyingWhileAHedgeIsOwedCountsItFiredAtOnce) {
  log->script = {ok_after(25ms, R"({"who":"p1"})"),
                 ok_after(500ms, R"({"who":"h1"})")}; // ignores the cancel
  auto r = start(get("/x"));
  advance_by(30ms);
  ASSERT_TRUE(r->outcome);
  EXPECT_EQ(r->outcome->body.at("who").as_string(), "p1");
  ASSERT_EQ(log->requests.size(), 2u);
  EXPECT_EQ(log->cancels, std::vector<uint64_t>{exchange(1)});
  auto before = stats(host_key);
  EXPECT_EQ(before.hedged_requests, 0u) << "owed until the hedge answers";
  EXPECT_EQ(before.primary_wins, 0u) << "held with the token";
  caf::anon_send_exit(*transport_, caf::exit_reason::kill);
  run();
  auto s = stats(host_key);
  EXPECT_EQ(s.hedged_requests, 1u);
  EXPECT_EQ(s.primary_wins, 1u);
  EXPECT_EQ(*fired_, std::vector<std::string>{host_key});
}

// A half-open probe hedge the pool refuses gives its permit back: it was
// never a trial (the breaker is not blamed, nor credited).
TEST_F(HedgeRace, ARefusedHalfOpenProbeReleasesThePermit) {
  hedging.config.breaker.min_samples = 2;
  hedging.config.breaker.cooldown = 1.0;
  hedging.config.breaker.half_open_max_trial = 1;
  cfg.retry.max_attempts = 1;
  log->script = {fake_step::status(500), fake_step::status(500),
                 ok_after(30ms, R"({"who":"primary"})")};
  ASSERT_FALSE(run_call(get("/x")).ok());
  ASSERT_FALSE(run_call(get("/x")).ok());
  advance(2s); // past the cooldown: the next allow() half-opens
  log->refuse_hedges = nanoseconds{0};
  auto o = run_call(get("/x"));
  ASSERT_TRUE(o.ok());
  ASSERT_EQ(log->refused.size(), 1u); // the probe hedge was tried
  auto b = breaker(breaker_scope::host, host_key);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->phase, breaker_phase::half_open);
  EXPECT_EQ(b->permits_out, 0);
  EXPECT_EQ(b->trials, 0);
}
