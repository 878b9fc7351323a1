// The retry budget in the service client (core/retry_budget.hpp), on CAF's
// test coordinator behind the scripted fake transport: an outage where
// every attempt fails, in exact virtual time. The client deposits one
// primary per call and withdraws one per counted retry; a refused retry
// ends the call with its last error and reason budget_exhausted.

#include "actors/client/service_client.hpp"
#include "config/config_error.hpp"

#include "tests/support/fake_transport.hpp"
#include "tests/support/outcome_checks.hpp"
#include "tests/support/virtual_time_fixture.hpp"

#include <caf/event_based_actor.hpp>

#include <gtest/gtest.h>

#include <iostream>
#include <map>

using namespace outbound;
using namespace outbound::testing;
using namespace std::chrono_literals;

namespace {

using ek = transport_error_kind;

class RetryBudgetClient : public virtual_time_fixture {
protected:
  RetryBudgetClient() {
    cfg.base_url = "http://127.0.0.1:8080";
    cfg.timeout = 1.0;
    cfg.deadline = 30.0;
    cfg.retry.max_attempts = 3;
    cfg.retry.base_backoff = 0.01;
    cfg.retry.max_backoff = 0.01;
    cfg.retry.retry_statuses = {503};
  }

  ~RetryBudgetClient() override {
    if (transport_)
      caf::anon_send_exit(*transport_, caf::exit_reason::kill);
    run();
  }

  service_client_actor client() {
    if (!client_) {
      client_options opts;
      transport_ = spawn_fake_transport(sys(), log);
      opts.transport = *transport_;
      opts.seed = 11;
      client_ = make_service_client(sys(), cfg, std::move(opts));
    }
    return *client_;
  }

  /// Starts `n` GET calls now; their outcomes land in `outcomes`.
  void start(int n) {
    auto c = client();
    auto out = outcomes;
    for (int i = 0; i < n; ++i)
      sys().spawn([=](caf::event_based_actor* self) {
        self->request(c, caf::infinite, call_request{})
          .then([=](call_outcome& o) { out->push_back(std::move(o)); });
      });
    run();
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

  /// 50 calls every 100 ms for `seconds`; returns the number of calls
  /// started.
  int outage(int seconds) {
    int calls = 0;
    for (int tick = 0; tick < seconds * 10; ++tick) {
      start(50);
      calls += 50;
      advance_by(100ms);
    }
    return calls;
  }

  /// Calls per give-up reason.
  std::map<give_up_reason, int> reasons() const {
    std::map<give_up_reason, int> m;
    for (auto& o : *outcomes)
      if (o.error)
        ++m[o.error->reason];
    return m;
  }

  client_config cfg;
  std::shared_ptr<fake_log> log = std::make_shared<fake_log>();
  std::shared_ptr<std::vector<call_outcome>> outcomes
    = std::make_shared<std::vector<call_outcome>>();
  std::optional<service_client_actor> client_;
  std::optional<transport_actor> transport_;
};

} // namespace

// An outage shorter than the window: total attempts stay within
// primaries x (1 + 20 %) + 10/s x 10 s, where the policy alone would make
// 3 per call. The refused calls end with the 503 they had and reason
// budget_exhausted; every call is answered.
TEST_F(RetryBudgetClient, AnOutageKeepsAttemptsUnderTheCeiling) {
  log->script = {fake_step::status(503)};
  int calls = outage(8);
  ASSERT_TRUE(run_to_quiescence());
  ASSERT_EQ(static_cast<int>(outcomes->size()), calls);
  auto attempts = log->requests.size();
  double ceiling = calls * 1.2 + 10 * 10;
  std::cout << calls << " calls, " << attempts << " attempts (ceiling "
            << ceiling << ", policy alone " << 3 * calls << ")\n";
  EXPECT_LE(attempts, ceiling);
  EXPECT_GE(attempts, ceiling - 1); // what the budget allows is used
  auto r = reasons();
  EXPECT_GT(r[give_up_reason::budget_exhausted], 0);
  EXPECT_GT(r[give_up_reason::attempts_exhausted], 0);
  for (auto& o : *outcomes) {
    ASSERT_FALSE(o.ok());
    EXPECT_EQ(o.error->kind, error_kind::server_error);
    EXPECT_EQ(o.error->status, 503);
  }
  auto b = budget();
  EXPECT_EQ(b.deposits, static_cast<uint64_t>(calls));
  EXPECT_EQ(b.withdrawals[0] + calls, attempts);
  EXPECT_EQ(b.refusals[0],
            static_cast<uint64_t>(r[give_up_reason::budget_exhausted]));
}

// The same outage without a budget: every call makes its 3 attempts (the
// test above would fail without the budget).
TEST_F(RetryBudgetClient, WithoutTheBudgetEveryCallRetriesAtFullPolicy) {
  cfg.retry_budget.enabled = false;
  log->script = {fake_step::status(503)};
  int calls = outage(8);
  ASSERT_TRUE(run_to_quiescence());
  EXPECT_EQ(log->requests.size(), static_cast<std::size_t>(3 * calls));
  EXPECT_EQ(reasons()[give_up_reason::budget_exhausted], 0);
  auto b = budget();
  EXPECT_FALSE(b.enabled);
  EXPECT_EQ(b.withdrawals[0], static_cast<uint64_t>(2 * calls));
}

// A long outage (several windows) of transport failures: the ceiling
// holds per window; a refused retry ends the call as a
// service_unavailable naming the budget.
TEST_F(RetryBudgetClient, ALongOutageOfTransportFailuresStaysUnderTheCeiling) {
  cfg.retry_budget.window = 2.0;
  log->script = {fake_step::fail(ek::connect, false, "connection refused")};
  int calls = outage(10);
  ASSERT_TRUE(run_to_quiescence());
  auto attempts = log->requests.size();
  // 10 s over 2 s windows: the reserve (10/s x 2 s) once per window the
  // outage spans, plus one as the window slides.
  EXPECT_LE(attempts, calls * 1.2 + 10 * 2.0 * (10 / 2 + 1));
  EXPECT_LT(attempts, calls * 1.3);
  int refused = 0;
  for (auto& o : *outcomes) {
    ASSERT_FALSE(o.ok());
    EXPECT_EQ(o.error->kind, error_kind::service_unavailable);
    if (o.error->reason == give_up_reason::budget_exhausted) {
      ++refused;
      EXPECT_NE(o.error->detail.find("retry budget"), std::string::npos)
        << o.error->detail;
      EXPECT_EQ(o.error->cause, ek::connect);
    }
  }
  EXPECT_GT(refused, 0);
}

// Redials (a pooled connection found dead, nothing sent) are not extra
// load: with an empty budget they still happen, and the call succeeds.
TEST_F(RetryBudgetClient, RedialsNeverWithdraw) {
  cfg.retry_budget.percent = 0;
  cfg.retry_budget.min_per_second = 0;
  log->script = {fake_step::fail(ek::not_sent, false, "stale"),
                 fake_step::status(200, "{}")};
  start(1);
  ASSERT_TRUE(run_to_quiescence());
  ASSERT_EQ(outcomes->size(), 1u);
  EXPECT_TRUE(outcomes->front().ok());
  EXPECT_EQ(log->requests.size(), 2u);
  auto b = budget();
  EXPECT_EQ(b.withdrawals[0], 0u);
  EXPECT_EQ(b.refusals[0], 0u);
}

// A retry the pool refused (pool_overflow: it never left the process)
// gives its withdrawal back, as a refused hedge does; the balance is whole
// again. A retry that left keeps it.
TEST_F(RetryBudgetClient, ARetryThePoolRefusedGivesItsWithdrawalBack) {
  log->script = {fake_step::status(503),
                 fake_step::fail(ek::pool_overflow, false, "queue full"),
                 fake_step::status(503), fake_step::status(200, "{}")};
  start(1);
  ASSERT_TRUE(run_to_quiescence());
  ASSERT_EQ(outcomes->size(), 1u);
  ASSERT_EQ(log->requests.size(), 2u);
  auto b = budget();
  EXPECT_EQ(b.withdrawals[0], 1u);
  EXPECT_EQ(b.returned[0], 1u);
  EXPECT_EQ(b.balance, 100u) << "10/s x 10 s, nothing owed";
  outcomes->clear();
  start(1);
  ASSERT_TRUE(run_to_quiescence());
  ASSERT_EQ(outcomes->size(), 1u);
  b = budget();
  EXPECT_EQ(b.withdrawals[0], 2u);
  EXPECT_EQ(b.returned[0], 1u) << "the retry that left keeps its withdrawal";
}

// A paid retry whose every dial found a stale pooled connection (not_sent:
// nothing left) runs out of redials; the next counted retry pays anew and
// the first withdrawal goes back (it was overwritten and kept).
TEST_F(RetryBudgetClient, APaidRetryOutOfRedialsGivesItsWithdrawalBack) {
  log->script
    = {fake_step::status(503), fake_step::fail(ek::not_sent, false, "stale"),
       fake_step::fail(ek::not_sent, false, "stale"),
       fake_step::fail(ek::not_sent, false, "stale"),
       fake_step::status(200, "{}")};
  start(1);
  ASSERT_TRUE(run_to_quiescence());
  ASSERT_EQ(outcomes->size(), 1u);
  EXPECT_TRUE(outcomes->front().ok());
  EXPECT_EQ(log->requests.size(), 5u);
  auto b = budget();
  EXPECT_EQ(b.withdrawals[0], 2u);
  EXPECT_EQ(b.returned[0], 1u) << "the first paid retry never left";
  EXPECT_EQ(b.balance, 99u);
}

// With an empty budget the first failure is final: one attempt, the
// call's last error, reason budget_exhausted.
TEST_F(RetryBudgetClient, AnEmptyBudgetMakesTheFirstFailureFinal) {
  cfg.retry_budget.percent = 0;
  cfg.retry_budget.min_per_second = 0;
  log->script = {fake_step::fail(ek::timeout, true, "no answer")};
  start(1);
  ASSERT_TRUE(run_to_quiescence());
  ASSERT_EQ(outcomes->size(), 1u);
  const auto& o = outcomes->front();
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.error->kind, error_kind::service_unavailable);
  EXPECT_EQ(o.error->reason, give_up_reason::budget_exhausted);
  EXPECT_EQ(o.error->attempts, 1);
  EXPECT_EQ(log->requests.size(), 1u);
}

TEST(RetryBudgetClientConfig, ABadBudgetFailsAtConstructionNamingTheField) {
  client_config cfg;
  cfg.base_url = "http://127.0.0.1:8080";
  cfg.retry_budget.percent = 150;
  try {
    cfg.validate();
    ADD_FAILURE() << "accepted";
  } catch (const config_error& e) {
    EXPECT_EQ(e.field(), "retry_budget.percent");
  }
}
