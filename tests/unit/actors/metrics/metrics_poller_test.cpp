// The metrics poller (docs/ARCHITECTURE.md) on CAF's test coordinator, in
// virtual time: real hedging actors and a real coalescing driver (over a
// scripted leader transport), fake feed watchers and pools. Checks that a
// poll hands every source's snapshot to the collector (exact exported
// values), that the interval timer polls once per interval, that a dead
// source is dropped (and not kept alive by the poller), and that a source
// that never answers counts one poll error after the request timeout.

#include "actors/metrics/metrics_poller.hpp"

#include "actors/hedge/detail/hedge_actors.hpp"
#include "config/config_error.hpp"
#include "metrics/outbound_metrics.hpp"
#include "tests/support/virtual_time_fixture.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <caf/actor_cast.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/response_promise.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <prometheus/text_serializer.h>

#include <gtest/gtest.h>

#include <sstream>

using namespace std::chrono_literals;
namespace json = boost::json;

namespace outbound::testing {
namespace {

/// A leader that answers every /v1/ts at once.
caf::behavior leader_impl(caf::event_based_actor*) {
  return {
    [](const http_request& req) {
      auto body = json::parse(req.body).as_object();
      json::object o;
      o["physical_ms"] = 1000;
      o["logical_start"] = 0;
      o["count"] = body.at("count");
      o["epoch"] = "1";
      exchange_result r;
      r.exchange_id = req.exchange_id;
      r.request_sent = true;
      r.response.status = 200;
      r.response.body = json::serialize(o);
      return r;
    },
    [](cancel_atom, uint64_t) {},
  };
}

/// What a fake source was asked.
struct fake_log {
  int stats_requests = 0;
  /// Promises of a stalled source, kept so none is ever answered.
  std::vector<caf::response_promise> held;
};

/// A feed watcher stand-in: answers stats_atom with `s` (or never, when
/// `stall`). Untyped; the poller reaches it through feed_watcher_actor.
caf::behavior fake_feed_impl(caf::event_based_actor* self, feed_stats s,
                             std::shared_ptr<fake_log> log, bool stall) {
  return {
    [=](stats_atom) -> caf::result<feed_stats> {
      ++log->stats_requests;
      if (stall) {
        log->held.push_back(self->make_response_promise());
        return caf::delegated<feed_stats>{};
      }
      return s;
    },
  };
}

caf::behavior fake_pool_impl(caf::event_based_actor*, pool_stats s) {
  return {
    [=](stats_atom) { return s; },
  };
}

std::string lines_of(const std::string& body, const std::string& prefix) {
  std::string out;
  std::istringstream is{body};
  for (std::string line; std::getline(is, line);)
    if (line.rfind(prefix, 0) == 0)
      out += line + "\n";
  return out;
}

class MetricsPoller : public virtual_time_fixture {
protected:
  MetricsPoller() : collector(std::make_shared<snapshot_collector>()) {
  }

  ~MetricsPoller() override {
    // The poller re-arms its timer forever: stop it, or the coordinator's
    // shutdown (which fires timers until none is left) never ends.
    if (poller_)
      caf::anon_send_exit(*poller_, caf::exit_reason::user_shutdown);
    run();
  }

  metrics_poller_actor poller(metrics_poller_config cfg = {}) {
    if (!poller_)
      poller_ = spawn_metrics_poller(sys(), collector, cfg);
    return *poller_;
  }

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

  /// Starts an on-demand poll; the box fills when it is answered.
  std::shared_ptr<std::optional<metrics_poll_report>> start_poll() {
    auto out = std::make_shared<std::optional<metrics_poll_report>>();
    auto p = poller();
    sys().spawn([=](caf::event_based_actor* self) {
      self->request(p, caf::infinite, poll_atom_v)
        .then([=](metrics_poll_report& r) { *out = r; });
    });
    run();
    return out;
  }

  std::string body() const {
    prometheus::TextSerializer s;
    std::ostringstream os;
    s.Serialize(os, collector->Collect());
    return os.str();
  }

  feed_watcher_actor fake_feed(feed_stats s, std::shared_ptr<fake_log> log,
                               bool stall = false) {
    return caf::actor_cast<feed_watcher_actor>(
      sys().spawn(fake_feed_impl, s, std::move(log), stall));
  }

  std::shared_ptr<snapshot_collector> collector;
  std::optional<metrics_poller_actor> poller_;
};

TEST_F(MetricsPoller, PollNowHandsEverySnapshotToTheCollector) {
  // A real coalescing driver: two callers ride one RPC.
  coalesce_config ccfg;
  ccfg.endpoints = {"10.0.0.1:7000"};
  coalesce_options copts;
  copts.seed = 7;
  auto* sys_ptr = &sys();
  copts.transports = [sys_ptr](const oracle_endpoint&) {
    return caf::actor_cast<transport_actor>(sys_ptr->spawn(leader_impl));
  };
  auto driver = make_coalescing_driver(sys(), ccfg, std::move(copts));
  auto served = std::make_shared<int>(0);
  for (int i = 0; i < 2; ++i)
    sys().spawn([=](caf::event_based_actor* self) {
      self->request(driver, caf::infinite, ts_call{})
        .then([=](coalesce_reply& r) { *served += r.error ? 0 : 1; });
    });
  ASSERT_TRUE(run_to_quiescence());
  ASSERT_EQ(*served, 2);
  // Real hedging actors (after the driver ran: virtual time stands still
  // from here on): one planned request of endpoint:user, one hedge fired (1
  // token of a burst of 2 taken) that won the race.
  hedge_config hcfg;
  auto stats = spawn_endpoint_stats(sys(), hcfg);
  auto breakers = spawn_breaker(sys(), hcfg);
  endpoint_config ep;
  ep.estimated_rps = 10.0; // 1 token/s, burst 2
  ask<hedge_plan>(stats,
                  hedge_plan_request{"endpoint:user", resolve(hcfg, ep)});
  EXPECT_EQ(ask<bool>(stats, hedge_token_request{"endpoint:user"}), true);
  tell(stats, hedge_token_outcome{"endpoint:user", true}); // the hedge went out
  tell(stats, hedge_race_result{"endpoint:user", true, true});
  tell(breakers, breaker_record{"host:api:443", "endpoint:user", hcfg.breaker,
                                call_health::success});
  // Fakes for a feed watcher and a pool.
  feed_stats fs;
  fs.events_delivered = 5;
  fs.connected = true;
  fs.mode = feed_mode::ledger;
  fs.cursor = 42;
  auto feed = fake_feed(fs, std::make_shared<fake_log>());
  pool_stats ps;
  ps.dialled = 2;
  ps.reused = 3;
  auto pool = caf::actor_cast<transport_actor>(sys().spawn(fake_pool_impl, ps));

  auto p = poller();
  tell(p, metrics_watch_hedging{"users", hedging_handles{stats, breakers}});
  tell(p, metrics_watch_coalescer{"oracle", driver});
  tell(p, metrics_watch_feed{"orders", feed_mode::none, feed});
  tell(p, metrics_watch_pool{"users", pool});
  EXPECT_EQ(lines_of(body(), "outbound_hedge_"), ""); // not asked yet
  auto report = start_poll();
  ASSERT_TRUE(*report);
  EXPECT_EQ((*report)->requests, 5u); // hedging: stats + breakers
  EXPECT_EQ((*report)->answered, 5u);
  EXPECT_EQ((*report)->failed, 0u);
  auto b = body();
  EXPECT_EQ(lines_of(b, "outbound_hedge_fired_total{"),
            "outbound_hedge_fired_total{key=\"endpoint:user\",service="
            "\"users\"} 1\n");
  EXPECT_EQ(lines_of(b, "outbound_hedge_won_total{"),
            "outbound_hedge_won_total{key=\"endpoint:user\",service="
            "\"users\"} 1\n");
  EXPECT_EQ(lines_of(b, "outbound_hedge_budget_tokens{"),
            "outbound_hedge_budget_tokens{key=\"endpoint:user\",service="
            "\"users\"} 1\n");
  // The key has seen 1 of its 20 warmup requests: the next waits 10 ms.
  EXPECT_EQ(lines_of(b, "outbound_hedge_delay_seconds{"),
            "outbound_hedge_delay_seconds{key=\"endpoint:user\",service="
            "\"users\"} 0.01\n");
  EXPECT_EQ(lines_of(b, "outbound_breaker_state{"),
            "outbound_breaker_state{key=\"host:api:443\",scope=\"host\","
            "service=\"users\"} 0\n"
            "outbound_breaker_state{key=\"endpoint:user\",scope=\"endpoint\","
            "service=\"users\"} 0\n");
  EXPECT_EQ(lines_of(b, "outbound_coalesce_calls_total{"),
            "outbound_coalesce_calls_total{outcome=\"ok\",service="
            "\"oracle\"} 2\n"
            "outbound_coalesce_calls_total{outcome=\"error\",service="
            "\"oracle\"} 0\n");
  EXPECT_EQ(lines_of(b, "outbound_coalesce_waiters_total{"),
            "outbound_coalesce_waiters_total{service=\"oracle\"} 2\n");
  EXPECT_EQ(lines_of(b, "outbound_coalesce_rpcs_total{"),
            "outbound_coalesce_rpcs_total{service=\"oracle\"} 1\n");
  EXPECT_EQ(lines_of(b, "outbound_coalesce_leader_known{"),
            "outbound_coalesce_leader_known{service=\"oracle\"} 1\n");
  // The registered mode was none: the first reported one is the label.
  EXPECT_EQ(lines_of(b, "outbound_feed_events_total{"),
            "outbound_feed_events_total{feed=\"orders\",mode=\"ledger\"} 5\n");
  EXPECT_EQ(lines_of(b, "outbound_feed_position{"),
            "outbound_feed_position{feed=\"orders\",mode=\"ledger\"} 42\n");
  EXPECT_EQ(lines_of(b, "outbound_pool_reused_total{"),
            "outbound_pool_reused_total{service=\"users\"} 3\n");
  EXPECT_EQ(lines_of(b, "outbound_metrics_sources{"),
            "outbound_metrics_sources{kind=\"client\"} 0\n"
            "outbound_metrics_sources{kind=\"coalescer\"} 1\n"
            "outbound_metrics_sources{kind=\"feed\"} 1\n"
            "outbound_metrics_sources{kind=\"hedging\"} 1\n"
            "outbound_metrics_sources{kind=\"pool\"} 1\n");
  // Virtual time did not move: every round trip is 0 s.
  EXPECT_EQ(lines_of(b, "outbound_metrics_snapshot_seconds{kind=\"feed\""),
            "outbound_metrics_snapshot_seconds{kind=\"feed\",source="
            "\"orders\"} 0\n");
}

TEST_F(MetricsPoller, IntervalPollsOncePerIntervalAndOnDemandInBetween) {
  auto log = std::make_shared<fake_log>();
  feed_stats fs;
  fs.mode = feed_mode::catchup;
  metrics_poller_config cfg;
  cfg.interval = 1.0;
  auto p = poller(cfg);
  auto feed = fake_feed(fs, log);
  tell(p, metrics_watch_feed{"orders", feed_mode::catchup, feed});
  advance(999ms);
  EXPECT_EQ(log->stats_requests, 0);
  advance(1ms);
  EXPECT_EQ(log->stats_requests, 1);
  auto report = start_poll();
  ASSERT_TRUE(*report);
  EXPECT_EQ((*report)->requests, 1u);
  EXPECT_EQ(log->stats_requests, 2);
  advance_stepwise(3s);
  EXPECT_EQ(log->stats_requests, 5);
  EXPECT_EQ(lines_of(body(), "outbound_feed_connected{"),
            "outbound_feed_connected{feed=\"orders\",mode=\"catchup\"} 0\n");
}

TEST_F(MetricsPoller, DeadSourcesAreDroppedAndNotKeptAlive) {
  auto log = std::make_shared<fake_log>();
  feed_stats fs;
  fs.events_delivered = 3;
  auto stopped = fake_feed(fs, log);
  auto p = poller();
  tell(p, metrics_watch_feed{"a", feed_mode::ledger, stopped});
  {
    // Registered, then every strong handle dropped: the poller holds only
    // the address, so the watcher goes away.
    auto unreferenced = fake_feed(fs, log);
    tell(p, metrics_watch_feed{"b", feed_mode::ledger, unreferenced});
  }
  run();
  auto report = start_poll();
  ASSERT_TRUE(*report);
  EXPECT_EQ((*report)->requests, 1u);
  EXPECT_EQ(lines_of(body(), "outbound_feed_events_total{"),
            "outbound_feed_events_total{feed=\"a\",mode=\"ledger\"} 3\n");
  caf::anon_send_exit(stopped, caf::exit_reason::user_shutdown);
  run();
  auto b = body();
  EXPECT_EQ(lines_of(b, "outbound_feed_events_total{"), "");
  EXPECT_EQ(lines_of(b, "outbound_metrics_sources{kind=\"feed\"}"),
            "outbound_metrics_sources{kind=\"feed\"} 0\n");
  report = start_poll();
  ASSERT_TRUE(*report);
  EXPECT_EQ((*report)->requests, 0u);
}

// A registered service client's retry budget is polled every round; the
// poller holds only its address.
TEST_F(MetricsPoller, AServiceClientsRetryBudgetIsExported) {
  client_config ccfg;
  ccfg.base_url = "http://127.0.0.1:8080";
  ccfg.retry.retry_statuses = {503};
  ccfg.retry.base_backoff = 0;
  ccfg.retry_budget.percent = 0;
  ccfg.retry_budget.min_per_second = 0.1; // a reserve of one retry
  client_options opts;
  opts.transport = caf::actor_cast<transport_actor>(
    sys().spawn([](caf::event_based_actor*) -> caf::behavior {
      return {
        [](const http_request& req) {
          exchange_result r;
          r.exchange_id = req.exchange_id;
          r.request_sent = true;
          r.response.status = 503;
          return r;
        },
        [](cancel_atom, uint64_t) {},
      };
    }));
  auto client = make_service_client(sys(), ccfg, std::move(opts));
  for (int i = 0; i < 2; ++i)
    sys().spawn([=](caf::event_based_actor* self) {
      self->request(client, caf::infinite, call_request{})
        .then([](call_outcome&) {});
    });
  ASSERT_TRUE(run_to_quiescence());
  auto p = poller();
  tell(p, metrics_watch_client{"users", client});
  auto report = start_poll();
  ASSERT_TRUE(*report);
  EXPECT_EQ((*report)->requests, 1u);
  auto b = body();
  // Two calls: one retry granted (the reserve), then two refused (the
  // first call's second retry, the second call's first).
  EXPECT_EQ(lines_of(b, "outbound_retry_budget_deposits_total{"),
            "outbound_retry_budget_deposits_total{service=\"users\"} 2\n");
  EXPECT_EQ(lines_of(b, "outbound_retry_budget_withdrawals_total{"),
            "outbound_retry_budget_withdrawals_total{kind=\"retry\",service="
            "\"users\"} 1\n"
            "outbound_retry_budget_withdrawals_total{kind=\"hedge\",service="
            "\"users\"} 0\n");
  EXPECT_EQ(lines_of(b, "outbound_retry_budget_refusals_total{kind=\"retry\""),
            "outbound_retry_budget_refusals_total{kind=\"retry\",service="
            "\"users\"} 2\n");
  EXPECT_EQ(lines_of(b, "outbound_retry_budget_balance{"),
            "outbound_retry_budget_balance{service=\"users\"} 0\n");
  EXPECT_EQ(lines_of(b, "outbound_metrics_sources{kind=\"client\"}"),
            "outbound_metrics_sources{kind=\"client\"} 1\n");
  // Gone with its last handle: dropped, series removed.
  client = nullptr;
  run();
  EXPECT_EQ(lines_of(body(), "outbound_retry_budget_deposits_total{"), "");
}

TEST_F(MetricsPoller, SourceThatNeverAnswersCountsOneErrorAfterTheTimeout) {
  metrics_poller_config cfg;
  cfg.interval = 3600; // no interval poll during the test
  cfg.request_timeout = 5.0;
  auto p = poller(cfg);
  auto log = std::make_shared<fake_log>();
  auto stuck = fake_feed(feed_stats{}, log, true);
  tell(p, metrics_watch_feed{"stuck", feed_mode::ledger, stuck});
  auto report = start_poll();
  EXPECT_FALSE(*report);
  advance(4999ms);
  EXPECT_FALSE(*report);
  advance(1ms);
  ASSERT_TRUE(*report);
  EXPECT_EQ((*report)->requests, 1u);
  EXPECT_EQ((*report)->failed, 1u);
  EXPECT_EQ(lines_of(body(), "outbound_metrics_poll_errors_total{"),
            "outbound_metrics_poll_errors_total{kind=\"feed\"} 1\n");
  // The held promise refers to the stuck actor itself: stop it, or the
  // cycle outlives the test (LSan).
  log->held.clear();
  caf::anon_send_exit(stuck, caf::exit_reason::user_shutdown);
  run();
}

TEST_F(MetricsPoller, BadConfigNamesTheField) {
  metrics_poller_config cfg;
  cfg.interval = 0;
  try {
    spawn_metrics_poller(sys(), collector, cfg);
    FAIL() << "no config_error";
  } catch (const config_error& e) {
    EXPECT_EQ(e.field(), "metrics.interval");
  }
  cfg.interval = 1;
  cfg.request_timeout = -1;
  try {
    spawn_metrics_poller(sys(), collector, cfg);
    FAIL() << "no config_error";
  } catch (const config_error& e) {
    EXPECT_EQ(e.field(), "metrics.request_timeout");
  }
}

} // namespace
} // namespace outbound::testing

namespace outbound::testing {
namespace {

TEST_F(MetricsPoller, ASourceKilledMidPollFailsItsRequestAtOnce) {
  metrics_poller_config cfg;
  cfg.interval = 3600; // no interval poll during the test
  cfg.request_timeout = 5.0;
  auto p = poller(cfg);
  auto log = std::make_shared<fake_log>();
  auto stuck = fake_feed(feed_stats{}, log, true);
  tell(p, metrics_watch_feed{"stuck", feed_mode::ledger, stuck});
  auto report = start_poll();
  ASSERT_EQ(log->stats_requests, 1);
  EXPECT_FALSE(*report);
  // The source dies holding the request: the poll fails it now, not after
  // request_timeout.
  log->held.clear();
  caf::anon_send_exit(stuck, caf::exit_reason::kill);
  run();
  ASSERT_TRUE(*report) << "the poll waited for the request timeout";
  EXPECT_EQ((*report)->requests, 1u);
  EXPECT_EQ((*report)->failed, 1u);
  EXPECT_EQ(lines_of(body(), "outbound_metrics_poll_errors_total{"),
            "outbound_metrics_poll_errors_total{kind=\"feed\"} 1\n");
  // The request's own timeout, later, is not counted a second time.
  advance(6s);
  EXPECT_EQ(lines_of(body(), "outbound_metrics_poll_errors_total{"),
            "outbound_metrics_poll_errors_total{kind=\"feed\"} 1\n");
}

} // namespace
} // namespace outbound::testing
