// The service_stack (actors/system/service_stack.hpp) against the reference
// hub on 127.0.0.1 with its oracle cluster: one object wires the hedged
// client, the feeds' client and connector, the coalescing driver and the
// metrics; stop() reports the final counters and leaves no actor running;
// a bad config fails at construction naming the field, before anything is
// spawned.

#include "actors/system/service_stack.hpp"

#include "actors/messages.hpp"
#include "actors/system/system_setup.hpp"
#include "config/config_error.hpp"
#include "hub/hub.hpp"
#include "metrics/outbound_metrics.hpp"
#include "tests/support/feed_fixture.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <thread>

using namespace outbound;
using namespace std::chrono_literals;

namespace {

class ServiceStack : public ::testing::Test {
protected:
  void SetUp() override {
    hub_config hc;
    hc.cluster_size = 3;
    hc.seed = 3;
    hub_ = std::make_unique<hub>(hc);
    hub_->start();
    configure(cfg_);
    sys_.emplace(cfg_);
  }

  void TearDown() override {
    sys_.reset();
    hub_->stop();
  }

  /// Every option set: hedging on /fast, feeds, the oracle, metrics.
  service_stack_options full_options() {
    service_stack_options o;
    o.name = "users";
    o.client.base_url = hub_->base_url();
    o.client.timeout = 5.0;
    o.client.deadline = 10.0;
    hedging_options ho;
    ho.routes.register_route("GET", "/fast", endpoint_config{}, "fast");
    o.hedging = std::move(ho);
    o.feeds = o.client;
    coalesce_config kc;
    kc.endpoints = hub_->oracle_endpoints();
    o.oracle = std::move(kc);
    o.metrics = registry_;
    return o;
  }

  /// True once the registry's text holds `line` (polled for at most 5 s).
  bool registry_text_has(const std::string& line) {
    auto until = std::chrono::steady_clock::now() + 5s;
    while (registry_->serialize().find(line) == std::string::npos) {
      if (std::chrono::steady_clock::now() > until) {
        ADD_FAILURE() << "not in the registry: " << line << "\n"
                      << registry_->serialize();
        return false;
      }
      std::this_thread::sleep_for(10ms);
    }
    return true;
  }

  /// Actors still running (a scoped actor counts while it lives), waiting
  /// up to 5 s for the count to reach `expected`.
  std::size_t running_after_settling(std::size_t expected = 0) {
    auto until = std::chrono::steady_clock::now() + 5s;
    while (sys_->registry().running() > expected
           && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(10ms);
    return sys_->registry().running();
  }

  std::unique_ptr<hub> hub_;
  caf::actor_system_config cfg_;
  std::optional<caf::actor_system> sys_;
  std::shared_ptr<metrics_registry> registry_
    = std::make_shared<metrics_registry>();
};

TEST_F(ServiceStack, WiresCallsTimestampsFeedsAndMetricsAndStopsEveryActor) {
  outbound::testing::feed_collector events;
  {
    service_stack stack{*sys_, full_options()};
    ASSERT_TRUE(stack.client());
    ASSERT_TRUE(stack.feed_client());
    ASSERT_TRUE(stack.driver());
    ASSERT_TRUE(stack.poller());
    EXPECT_TRUE(stack.hedging().stats);
    EXPECT_TRUE(stack.hedging().breakers);
    feed_config fc;
    fc.replay_path = "/v1/events";
    fc.ws_path = "/ws/ledger";
    fc.poll_interval = 0.5;
    auto w
      = stack.watch("orders", fc, events.callbacks(), 1, feed_mode::ledger);
    ASSERT_EQ(stack.watchers().size(), 1u);
    EXPECT_EQ(stack.watchers()[0], w);
    for (int i = 0; i < 3; ++i)
      hub_->publish("orders/" + std::to_string(i), "created");
    {
      caf::scoped_actor self{*sys_};
      call_request req;
      req.path = "/fast";
      self->request(stack.client(), 15s, req)
        .receive(
          [](call_outcome& o) { EXPECT_TRUE(o.ok()) << o.error->message(); },
          [](caf::error& e) { ADD_FAILURE() << caf::to_string(e); });
      ts_call ts;
      ts.count = 2;
      self->request(stack.driver(), 15s, ts)
        .receive([](coalesce_reply& r) { EXPECT_FALSE(r.error); },
                 [](caf::error& e) { ADD_FAILURE() << caf::to_string(e); });
    }
    ASSERT_TRUE(events.wait_events(3, 10s));
    EXPECT_EQ(events.snapshot(), outbound::testing::key_range(1, 3));
    EXPECT_EQ(stack.hedge_stats().total_requests, 1u);
    {
      // The poller exports the running watcher (its series end with it).
      caf::scoped_actor self{*sys_};
      self->request(stack.poller(), 10s, poll_atom_v)
        .receive([](metrics_poll_report&) {},
                 [](caf::error& e) { ADD_FAILURE() << caf::to_string(e); });
      auto text = registry_->serialize();
      EXPECT_NE(text.find("outbound_feed_events_total{feed=\"orders\","
                          "mode=\"ledger\"} 3"),
                std::string::npos)
        << text;
    }
    // The observer counts the call (its event is processed on its own
    // schedule: waited for, bounded).
    EXPECT_TRUE(
      registry_text_has("outbound_client_requests_total{method="
                        "\"GET\",outcome=\"ok\",service=\"users\"} 1"));

    auto report = stack.stop();
    EXPECT_EQ(report.feeds.stopped, 1u);
    EXPECT_EQ(report.feeds.reached, 1u);
    EXPECT_EQ(report.hedging.total_requests, 1u);
    ASSERT_TRUE(report.oracle);
    EXPECT_GE(report.oracle->batches.rpcs, 1u);
    EXPECT_TRUE(stack.watchers().empty());
    EXPECT_FALSE(stack.client());
    // Idempotent.
    EXPECT_EQ(stack.stop().feeds.stopped, 0u);
    EXPECT_THROW(stack.watch("late", fc, {}), std::logic_error);
    // stop()'s last poll reached the registry before the actors ended.
    auto text = registry_->serialize();
    EXPECT_NE(text.find("outbound_coalesce_rpcs_total{service=\"oracle\"}"),
              std::string::npos)
      << text;
  }
  // Pools, observers, hedging actors, poller, driver, watchers: all ended.
  EXPECT_EQ(running_after_settling(), 0u);
}

TEST_F(ServiceStack, ADestroyedStackEndsItsActorsWithoutAStop) {
  {
    service_stack stack{*sys_, full_options()};
    outbound::testing::feed_collector events;
    feed_config fc;
    fc.ws_path = "/ws/ephemeral";
    stack.watch("live", fc, events.callbacks());
    EXPECT_GT(sys_->registry().running(), 5u);
  }
  EXPECT_EQ(running_after_settling(), 0u);
}

TEST_F(ServiceStack, ABadConfigNamesItsFieldBeforeAnythingIsSpawned) {
  auto expect_field = [&](service_stack_options o, const std::string& field) {
    try {
      service_stack stack{*sys_, std::move(o)};
      ADD_FAILURE() << "no config_error for " << field;
    } catch (const config_error& e) {
      EXPECT_EQ(e.field(), field) << e.what();
    }
    EXPECT_EQ(sys_->registry().running(), 0u) << field;
  };
  auto o = full_options();
  o.client.base_url = "";
  expect_field(o, "base_url");
  o = full_options();
  o.feeds->timeout = -1;
  expect_field(o, "timeout");
  o = full_options();
  o.oracle->endpoints = {"not a host"};
  expect_field(o, "coalesce.endpoints[0]");
  o = full_options();
  o.hedging->config.warmup_delay = -1;
  expect_field(o, "hedge.warmup_delay");
}

TEST_F(ServiceStack, WatchWithoutAFeedClientIsALogicError) {
  service_stack_options o;
  o.client.base_url = hub_->base_url();
  service_stack stack{*sys_, std::move(o)};
  EXPECT_FALSE(stack.feed_client());
  EXPECT_FALSE(stack.driver());
  EXPECT_FALSE(stack.poller());
  EXPECT_FALSE(stack.hedging().stats);
  feed_config fc;
  fc.ws_path = "/ws/ledger";
  EXPECT_THROW(stack.watch("x", fc, {}), std::logic_error);
  auto report = stack.stop();
  EXPECT_EQ(report.feeds.stopped, 0u);
  EXPECT_FALSE(report.oracle);
}

} // namespace
