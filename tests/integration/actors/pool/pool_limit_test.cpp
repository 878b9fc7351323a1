// The connection pool's per-endpoint limit end to end: blocking client →
// service_client → call actors → connection_pool (its own, so the test can
// read its stats) → scripted loopback server that holds responses. Real time.
//
// Without the limit, every call that finds no idle connection dials a new one
// (an overloaded server then sees unbounded connections); with it, calls wait
// for a connection in FIFO order, a full queue fails the call at once, and
// the time queued counts against the attempt's budget.

#include "tests/support/wire_cases_fixture.hpp"

#include "actors/pool/connection_pool.hpp"

#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <gtest/gtest.h>

#include <thread>
#include <vector>

using namespace std::chrono_literals;

namespace outbound::testing {
namespace {

class PoolLimit : public wire_test {
protected:
  ~PoolLimit() override {
    for (auto& p : pools_)
      caf::anon_send_exit(p, caf::exit_reason::user_shutdown);
  }

  /// A client whose transport is a pool spawned here (for its stats).
  std::unique_ptr<blocking_client> limited_client(client_config cfg,
                                                  transport_actor& pool) {
    pool = spawn_connection_pool(*sys_, cfg, io_);
    pools_.push_back(pool);
    return client_on(std::move(cfg), pool);
  }

  /// A client on an existing pool.
  std::unique_ptr<blocking_client> client_on(client_config cfg,
                                             const transport_actor& pool) {
    client_options opts;
    opts.observer = observer_;
    opts.io = io_;
    opts.seed = 42;
    opts.transport = pool;
    return std::make_unique<blocking_client>(*sys_, std::move(cfg),
                                             std::move(opts));
  }

  pool_stats stats(const transport_actor& pool) {
    caf::scoped_actor self{*sys_};
    pool_stats out;
    self
      ->request(caf::actor_cast<caf::actor>(pool), std::chrono::seconds{5},
                stats_atom::value)
      .receive([&](pool_stats& s) { out = s; },
               [&](caf::error& err) {
                 ADD_FAILURE() << "no stats: " << sys_->render(err);
               });
    return out;
  }

  /// Waits (bounded) until the pool holds `n` queued exchanges.
  bool wait_pending(const transport_actor& pool, uint64_t n) {
    auto until = wire_clock::now() + 5s;
    while (wire_clock::now() < until) {
      if (stats(pool).pending == n)
        return true;
      std::this_thread::sleep_for(5ms);
    }
    return false;
  }

  std::vector<transport_actor> pools_;
};

script serve(int n, std::chrono::milliseconds hold) {
  script s;
  for (int i = 0; i < n; ++i) {
    s.push_back(step::read_request());
    s.push_back(step::sleep(hold));
    s.push_back(step::send(ok_empty_object));
  }
  return s;
}

TEST_F(PoolLimit, FiveConcurrentCallsShareTwoConnectionsAndAllSucceed) {
  // A third connection (the limit broken) would be served too.
  auto srv = server({serve(5, 200ms), serve(5, 200ms)},
                    {step::read_request(), step::send(ok_empty_object)});
  auto cfg = defaults(srv->base_url());
  cfg.max_connections_per_endpoint = 2;
  cfg.timeout = 5.0;
  cfg.deadline = 10.0;
  transport_actor pool;
  auto c = limited_client(cfg, pool);
  std::vector<call_outcome> out(5);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < out.size(); ++i)
    threads.emplace_back([&, i] { out[i] = c->call(get("/v1/item")); });
  for (auto& t : threads)
    t.join();
  for (auto& o : out) {
    EXPECT_TRUE(o.ok()) << o.error->message();
    EXPECT_EQ(o.attempts, 1);
  }
  EXPECT_LE(srv->connections(), 2u);
  EXPECT_EQ(srv->requests().size(), 5u);
  auto s = stats(pool);
  EXPECT_LE(s.dialled, 2u);
  EXPECT_EQ(s.dialled + s.reused, 5u);
  EXPECT_EQ(s.pending, 0u);
  EXPECT_EQ(s.overflowed, 0u);
}

TEST_F(PoolLimit, AFullQueueFailsTheCallAtOnceWithTheTypedError) {
  auto srv = server({serve(2, 1000ms)},
                    {step::read_request(), step::send(ok_empty_object)});
  auto cfg = defaults(srv->base_url());
  cfg.max_connections_per_endpoint = 1;
  cfg.max_pending_requests = 1;
  cfg.timeout = 5.0;
  cfg.deadline = 10.0;
  transport_actor pool;
  auto c = limited_client(cfg, pool);
  call_outcome first, second;
  std::thread t1{[&] {
    first = c->call(get("/v1/item"));
  }};
  ASSERT_TRUE(srv->wait_for_requests(1, 5s));
  std::thread t2{[&] {
    second = c->call(get("/v1/item"));
  }};
  bool queued = wait_pending(pool, 1);
  auto t0 = wire_clock::now();
  auto third = c->call(get("/v1/item"));
  auto took = wire_clock::now() - t0;
  t1.join();
  t2.join();
  ASSERT_TRUE(queued);
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.error->kind, error_kind::service_unavailable);
  EXPECT_EQ(third.error->cause, transport_error_kind::pool_overflow);
  EXPECT_TRUE(third.error->nothing_sent);
  EXPECT_EQ(third.error->attempts, 1); // not retried
  EXPECT_NE(third.error->detail.find(
              "connection pool queue full (1 waiting, 1 connections)"),
            std::string::npos)
    << third.error->detail;
  // At once: well before the held response (1 s) frees the connection.
  EXPECT_LT(ms(took), 1000);
  EXPECT_TRUE(first.ok()) << first.error->message();
  EXPECT_TRUE(second.ok()) << second.error->message();
  EXPECT_EQ(srv->connections(), 1u);
  EXPECT_EQ(srv->requests().size(), 2u);
  auto s = stats(pool);
  EXPECT_EQ(s.overflowed, 1u);
  EXPECT_EQ(s.waited, 1u);
}

TEST_F(PoolLimit, TimeQueuedCountsAgainstTheAttemptBudget) {
  // The only connection is held for 1.5 s; the queued call's attempt has
  // 400 ms and one attempt: the pool's queue timer must answer it "never
  // sent" at 400 ms less the dispatch floor (100 ms here, a margin that
  // survives a loaded machine), before the call's own attempt timer could
  // (which cannot tell queued from sent).
  auto srv = server({serve(1, 1500ms)},
                    {step::read_request(), step::send(ok_empty_object)});
  auto cfg = defaults(srv->base_url());
  cfg.max_connections_per_endpoint = 1;
  cfg.retry.max_attempts = 1;
  cfg.timeout = 5.0;
  cfg.deadline = 10.0;
  cfg.min_dispatch_budget = 0.1;
  transport_actor pool;
  auto c = limited_client(cfg, pool);
  // A second client on the same pool, with a 400 ms attempt budget.
  auto short_cfg = cfg;
  short_cfg.timeout = 0.4;
  auto impatient = client_on(short_cfg, pool);
  call_outcome first;
  std::thread t1{[&] {
    first = c->call(get("/v1/item"));
  }};
  ASSERT_TRUE(srv->wait_for_requests(1, 5s));
  auto t0 = wire_clock::now();
  auto queued = impatient->call(get("/v1/item"));
  auto took = wire_clock::now() - t0;
  t1.join();
  ASSERT_FALSE(queued.ok());
  EXPECT_EQ(queued.error->cause, transport_error_kind::timeout)
    << queued.error->message();
  // The pool's queue timer answered, not the call's attempt timer.
  EXPECT_NE(queued.error->detail.find(
              "no connection free within the exchange's timeout"),
            std::string::npos)
    << queued.error->detail;
  EXPECT_TRUE(queued.error->nothing_sent) << queued.error->message();
  EXPECT_GE(ms(took), 300);
  EXPECT_LT(ms(took), 1500); // did not wait for the held connection
  EXPECT_TRUE(first.ok()) << first.error->message();
  EXPECT_EQ(srv->connections(), 1u);
  EXPECT_EQ(srv->requests().size(), 1u); // the queued call never left
  auto s = stats(pool);
  EXPECT_EQ(s.pending, 0u);
  EXPECT_EQ(s.waited, 1u);
}

// A POST that only waited in the queue and timed out never reached the
// wire: the caller must learn that (nothing_sent, safe to retry), not "may
// have been processed". The call's attempt timer runs for the same budget as
// the waiter's queue timer; the pool's fires the dispatch floor earlier.
TEST_F(PoolLimit, APostThatOnlyQueuedIsReportedAsNeverSent) {
  auto srv = server({serve(1, 1500ms)},
                    {step::read_request(), step::send(ok_empty_object)});
  auto cfg = defaults(srv->base_url());
  cfg.max_connections_per_endpoint = 1;
  cfg.timeout = 5.0;
  cfg.deadline = 10.0;
  cfg.min_dispatch_budget = 0.1;
  transport_actor pool;
  auto c = limited_client(cfg, pool);
  auto short_cfg = cfg;
  short_cfg.timeout = 0.4;
  auto impatient = client_on(short_cfg, pool);
  call_outcome first;
  std::thread t1{[&] {
    first = c->call(get("/v1/item"));
  }};
  ASSERT_TRUE(srv->wait_for_requests(1, 5s));
  auto queued = impatient->call(post("/v1/orders", R"({"n":1})"));
  t1.join();
  ASSERT_FALSE(queued.ok());
  EXPECT_EQ(queued.error->cause, transport_error_kind::timeout)
    << queued.error->message();
  EXPECT_TRUE(queued.error->nothing_sent) << queued.error->message();
  EXPECT_EQ(queued.error->detail.find("may have been processed"),
            std::string::npos)
    << queued.error->detail;
  EXPECT_EQ(queued.error->attempts, 1); // not idempotent: not retried
  EXPECT_TRUE(first.ok()) << first.error->message();
  EXPECT_EQ(srv->requests().size(), 1u); // the POST never left
}

} // namespace
} // namespace outbound::testing
