// Hedge snapshots through a service client, on CAF's test coordinator
// behind the scripted fake transport: a client that imports another's
// snapshot hedges its first 20 calls at the imported percentile, where a
// fresh client spends them on the warm-up delay. Every delay asserted here
// is the exact virtual time between a call's primary and its hedge
// reaching the transport.

#include "actors/client/service_client.hpp"
#include "actors/hedge/endpoint_stats_state.hpp"
#include "actors/hedge/hedge_snapshot.hpp"
#include "config/config_error.hpp"

#include "tests/support/fake_transport.hpp"
#include "tests/support/virtual_time_fixture.hpp"

#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

using namespace outbound;
using namespace outbound::testing;
using namespace std::chrono_literals;
using std::chrono::nanoseconds;

namespace {

constexpr const char* host_key = "host:127.0.0.1:8080";

class HedgeSnapshotClient : public virtual_time_fixture {
protected:
  HedgeSnapshotClient() {
    hedged_call_defaults(cfg, hedging);
    // Each call: the primary stalls, its hedge answers at once (the hedge
    // wins at exactly the plan's delay, so the learned window keeps the
    // imported percentile's bin).
    for (int i = 0; i < 100; ++i) {
      log->script.push_back(fake_step::stall());
      log->script.push_back(fake_step::status(200, R"({"v":1})"));
    }
  }

  service_client_actor client() {
    if (!client_) {
      client_options opts;
      opts.transport = spawn_fake_transport(sys(), log);
      opts.seed = 7;
      opts.hedging = hedging;
      client_ = make_service_client(sys(), cfg, std::move(opts));
    }
    return *client_;
  }

  call_outcome run_call() {
    auto out = std::make_shared<std::optional<call_outcome>>();
    auto c = client();
    call_request req;
    req.method = "GET";
    req.path = "/slow";
    sys().spawn([=](caf::event_based_actor* self) {
      self->request(c, caf::infinite, req).then([=](call_outcome& o) {
        *out = std::move(o);
      });
    });
    EXPECT_TRUE(run_to_quiescence());
    if (!*out)
      return call_outcome{};
    return **out;
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

  endpoint_stats_actor stats() {
    auto h = ask<hedging_handles>(client(), hedging_handles_request{});
    EXPECT_TRUE(h);
    return h ? h->stats : endpoint_stats_actor{};
  }

  /// The delay between call i's primary and its hedge at the transport.
  double hedge_delay(size_t call) const {
    auto d = log->requests.at(2 * call + 1).at - log->requests.at(2 * call).at;
    return std::chrono::duration<double>(d).count();
  }

  /// A snapshot of another process that learned the host key: 950 calls
  /// of 30 ms and 50 of 300 ms (p95 in the 30 ms bin), sent through JSON.
  static hedge_snapshot learned_elsewhere(double* p95) {
    endpoint_stats_state other{hedge_config{}};
    const auto t = hedge_time{} + 1h;
    other.plan(host_key, resolve(hedge_config{}), t);
    for (int i = 0; i < 1000; ++i)
      other.observe(host_key, i < 950 ? 0.030 : 0.300, call_health::success, t);
    *p95 = *other.latency_quantile(host_key, 0.95, t);
    return parse_hedge_snapshot(to_json(other.export_snapshot(t)));
  }

  client_config cfg;
  hedging_options hedging;
  std::shared_ptr<fake_log> log = std::make_shared<fake_log>();
  std::optional<service_client_actor> client_;
};

} // namespace

TEST_F(HedgeSnapshotClient,
       TheFirst20CallsAfterAnImportHedgeAtTheImportedDelay) {
  double p95 = 0;
  auto snap = learned_elsewhere(&p95);
  ASSERT_NEAR(p95, 0.030, 0.030 * 0.01);
  auto r
    = ask<hedge_snapshot_import_result>(stats(), hedge_snapshot_import{snap});
  ASSERT_TRUE(r);
  ASSERT_TRUE(r->ok()) << r->error;
  EXPECT_EQ(r->keys, 1u);
  for (size_t i = 0; i < 20; ++i) {
    auto o = run_call();
    ASSERT_TRUE(o.ok()) << i;
    ASSERT_EQ(log->requests.size(), 2 * i + 2) << i;
    EXPECT_NEAR(hedge_delay(i), p95, 1e-6) << "call " << i;
  }
  auto st = ask<hedge_stats_reply>(stats(), hedge_stats_request{host_key});
  ASSERT_TRUE(st && st->stats);
  EXPECT_EQ(st->stats->warmup_requests, 0u);
  EXPECT_EQ(st->stats->hedged_requests, 20u);
}

TEST_F(HedgeSnapshotClient, AFreshClientSpendsItsFirst20CallsOnTheWarmupDelay) {
  for (size_t i = 0; i < 20; ++i) {
    auto o = run_call();
    ASSERT_TRUE(o.ok()) << i;
    EXPECT_NEAR(hedge_delay(i), hedging.config.warmup_delay, 1e-6)
      << "call " << i;
  }
  auto st = ask<hedge_stats_reply>(stats(), hedge_stats_request{host_key});
  ASSERT_TRUE(st && st->stats);
  EXPECT_EQ(st->stats->warmup_requests, 20u);
}

TEST_F(HedgeSnapshotClient, ExportThenImportIntoAnotherClientRoundTrips) {
  for (size_t i = 0; i < 25; ++i)
    ASSERT_TRUE(run_call().ok());
  auto exported = ask<hedge_snapshot>(stats(), hedge_snapshot_export_request{});
  ASSERT_TRUE(exported);
  ASSERT_EQ(exported->keys.size(), 1u);
  EXPECT_EQ(exported->keys[0].key, host_key);
  EXPECT_EQ(exported->keys[0].sketch.count, 25u);

  // A second client (a restarted process) imports the JSON text.
  auto second_log = std::make_shared<fake_log>();
  second_log->script = log->script;
  client_options opts;
  opts.transport = spawn_fake_transport(sys(), second_log);
  opts.hedging = hedging;
  auto second = make_service_client(sys(), cfg, std::move(opts));
  auto h = ask<hedging_handles>(second, hedging_handles_request{});
  ASSERT_TRUE(h);
  auto r = ask<hedge_snapshot_import_result>(
    h->stats, hedge_snapshot_import{parse_hedge_snapshot(to_json(*exported))});
  ASSERT_TRUE(r && r->ok());
  auto again = ask<hedge_snapshot>(h->stats, hedge_snapshot_export_request{});
  ASSERT_TRUE(again);
  EXPECT_EQ(to_json(*again), to_json(*exported));
}

TEST_F(HedgeSnapshotClient,
       AHostileImportIsRejectedNamingTheFieldAndChangesNothing) {
  double p95 = 0;
  auto snap = learned_elsewhere(&p95);
  snap.keys[0].sketch.alpha = 0.05;
  auto r
    = ask<hedge_snapshot_import_result>(stats(), hedge_snapshot_import{snap});
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->ok());
  EXPECT_EQ(r->error_field, "keys[0].sketch.alpha");
  EXPECT_EQ(r->keys, 0u);
  // Nothing imported: the first call still hedges at the warm-up delay.
  ASSERT_TRUE(run_call().ok());
  EXPECT_NEAR(hedge_delay(0), hedging.config.warmup_delay, 1e-6);
}

TEST_F(HedgeSnapshotClient, TheSnapshotFileIsLoadedAtStartAndWrittenAtStop) {
  const auto path = ::testing::TempDir() + "/outbound-client-snapshot.json";
  std::remove(path.c_str());
  double p95 = 0;
  write_hedge_snapshot_file(learned_elsewhere(&p95), path);
  hedging.snapshot_file = path;
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(run_call().ok());
    EXPECT_NEAR(hedge_delay(i), p95, 1e-6) << "call " << i;
  }
  // The client and everything holding its stats actor go away: the actor
  // stops and writes the file (1000 imported + 3 new samples).
  client_.reset();
  run_to_quiescence();
  auto back = read_hedge_snapshot_file(path);
  ASSERT_TRUE(back);
  ASSERT_EQ(back->keys.size(), 1u);
  EXPECT_EQ(back->keys[0].sketch.count, 1003u);
  std::remove(path.c_str());
}

TEST_F(HedgeSnapshotClient,
       ABadSnapshotFileFailsTheClientsConstructionNamingTheFile) {
  const auto path = ::testing::TempDir() + "/outbound-bad-snapshot.json";
  {
    std::ofstream out(path);
    out << R"({"version":7,"keys":[]})";
  }
  hedging.snapshot_file = path;
  try {
    client();
    ADD_FAILURE() << "a bad snapshot file was accepted";
  } catch (const config_error& e) {
    EXPECT_EQ(e.field(), "hedging.snapshot_file");
    EXPECT_NE(std::string{e.what()}.find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string{e.what()}.find("version"), std::string::npos)
      << e.what();
  }
  std::remove(path.c_str());
}

// Every route is a key of the stats and of the endpoint breakers, and the
// host one more: a max_keys below that is a config error at construction.
// Accepted, the client's own keys evicted each other and never left their
// warmup nor reached a breaker's min_samples.
TEST_F(HedgeSnapshotClient, MaxKeysBelowTheRoutesPlusTheHostIsAConfigError) {
  hedging.routes.register_route("GET", "/a");
  hedging.routes.register_route("GET", "/b");
  hedging.config.max_keys = 2;
  try {
    client();
    ADD_FAILURE() << "max_keys 2 accepted for 2 routes and a host";
  } catch (const config_error& e) {
    EXPECT_EQ(e.field(), "hedge.max_keys");
    EXPECT_NE(std::string{e.what()}.find("(3)"), std::string::npos) << e.what();
  }
  hedging.config.max_keys = 3;
  EXPECT_NO_THROW(client());
}
