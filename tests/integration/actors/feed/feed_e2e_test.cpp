// The feed watcher end to end (docs/ARCHITECTURE.md, the feed flow): the real
// watcher (service client + connection pool for replay, Beast WebSocket
// connector) against an in-process reference hub on 127.0.0.1, driven
// through the hub's fault knobs. Deliveries go to callbacks that record them.
// Real time with short intervals; every wait is bounded.

#include "actors/client/service_client.hpp"
#include "actors/feed/feed_config.hpp"
#include "actors/feed/feed_messages.hpp"
#include "actors/feed/feed_watcher.hpp"
#include "actors/messages.hpp"
#include "config/client_config.hpp"
#include "hub/hub.hpp"
#include "protocol/io_runner.hpp"
#include "protocol/ws_session.hpp"
#include "tests/support/child_process.hpp"
#include "tests/support/feed_fixture.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace outbound;
using outbound::testing::lines_of;
using outbound::testing::slurp;
using namespace std::chrono_literals;
using outbound::testing::key_range;

namespace {

using collector = outbound::testing::feed_collector;

class FeedE2E : public outbound::testing::feed_fixture {
protected:
  void after_actors_done() override {
    hub_.reset();
  }

  void start_hub(hub_config c = {}) {
    c.seed = c.seed.value_or(1234);
    hub_ = std::make_unique<hub>(c);
    hub_->start();
  }

  /// A feed config for the hub's ledger tier with short intervals.
  feed_config ledger_config() {
    feed_config fc;
    fc.replay_path = "/v1/events";
    fc.ws_path = "/ws/feed";
    fc.poll_interval = 0.5;
    fc.ws_ping_interval = 0.2;
    fc.reconnect_base_backoff = 0.05;
    fc.reconnect_max_backoff = 0.5;
    fc.ws_handshake_timeout = 2.0;
    return fc;
  }

  feed_config ws_config(const std::string& path) {
    auto fc = ledger_config();
    fc.replay_path.clear();
    fc.ws_path = path;
    return fc;
  }

  feed_watcher_options options(feed_callbacks cbs) {
    client_config cc;
    cc.base_url = hub_->base_url();
    cc.timeout = 2.0;
    cc.deadline = 4.0;
    cc.retry.max_attempts = 1;
    if (!client_) {
      client_options co;
      co.io = io_;
      client_ = make_service_client(*sys_, cc, co);
    }
    if (!connector_)
      connector_ = make_ws_connector(io_);
    feed_watcher_options o;
    o.client = client_;
    o.connector = connector_;
    o.ws = feed_ws_endpoint::from(cc);
    o.callbacks = std::move(cbs);
    o.seed = 7;
    return o;
  }

  feed_watcher_actor watch(feed_config fc, collector& c, bool detached = true) {
    auto w = spawn_feed_watcher(*sys_, std::move(fc),
                                options(c.callbacks(detached)));
    watchers_.push_back(w);
    return w;
  }

  void publish(int n, const std::string& subject = "orders/1") {
    for (int i = 0; i < n; ++i)
      hub_->publish(subject, "created");
  }

  std::unique_ptr<hub> hub_;
};

// -- ledger -------------------------------------------------------------------

TEST_F(FeedE2E, LedgerPagesThenScriptedDuplicateReorderedWakes) {
  start_hub();
  publish(5);
  collector c;
  auto fc = ledger_config();
  fc.limit = 3;
  fc.poll_interval = 30.0; // only wakes may move it after the first drain
  auto w = watch(fc, c);
  ASSERT_TRUE(c.wait_events(5));
  EXPECT_EQ(c.snapshot(), key_range(1, 5));
  ASSERT_TRUE(wait_stats(w, [](const feed_stats& s) { return s.connected; }));
  hub_->set_faults(R"({"wake_script":[9,6,10,6,8,7,9]})");
  publish(5);
  ASSERT_TRUE(c.wait_events(10));
  std::this_thread::sleep_for(300ms); // nothing more arrives
  EXPECT_EQ(c.snapshot(), key_range(1, 10));
  auto s = stats(w);
  EXPECT_EQ(s.cursor, 10);
  EXPECT_EQ(s.resets, 0u);
  EXPECT_EQ(s.drain_errors, 0u);
}

TEST_F(FeedE2E, DroppedWakesHealedByThePollTick) {
  start_hub();
  collector c;
  auto w = watch(ledger_config(), c);
  ASSERT_TRUE(wait_stats(w, [](const feed_stats& s) { return s.connected; }));
  hub_->set_faults(R"({"drop_wakes":true})");
  publish(3);
  ASSERT_TRUE(c.wait_events(3, 3s));
  EXPECT_EQ(c.snapshot(), key_range(1, 3));
}

TEST_F(FeedE2E, VisibilityLagDeliveredOnceVisible) {
  start_hub();
  collector c;
  auto w = watch(ledger_config(), c);
  ASSERT_TRUE(wait_stats(w, [](const feed_stats& s) { return s.connected; }));
  hub_->set_faults(R"({"visibility_lag_polls":2})");
  publish(2);
  ASSERT_TRUE(c.wait_events(2, 5s));
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(c.snapshot(), key_range(1, 2));
}

TEST_F(FeedE2E, RetentionFloorOneResetThenTheRestInOrder) {
  hub_config hc;
  hc.retention = 5;
  start_hub(hc);
  publish(12);
  collector c;
  auto fc = ledger_config();
  fc.limit = 3;
  fc.cursor = 2;
  auto w = watch(fc, c);
  ASSERT_TRUE(c.wait_events(5));
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(c.snapshot(), key_range(8, 12));
  ASSERT_EQ(c.reset_count(), 1u);
  auto r = c.resets.front();
  EXPECT_EQ(r.cause, reset_cause::retention);
  EXPECT_EQ(r.from_cursor, std::optional<int64_t>{2});
  EXPECT_EQ(stats(w).resets, 1u);
}

TEST_F(FeedE2E, NonObjectReplayPageCountsADrainError) {
  start_hub();
  publish(2);
  hub_->set_faults(R"({"non_object_pages":1})");
  collector c;
  auto fc = ledger_config();
  fc.ws_path.clear();
  auto w = watch(fc, c);
  ASSERT_TRUE(
    wait_stats(w, [](const feed_stats& s) { return s.drain_errors == 1; }));
  // The bad page moved nothing; the next tick delivers both events.
  ASSERT_TRUE(c.wait_events(2, 3s));
  EXPECT_EQ(c.snapshot(), key_range(1, 2));
  EXPECT_EQ(stats(w).drain_errors, 1u);
}

TEST_F(FeedE2E, FragmentedAndNonJsonFramesStillWake) {
  start_hub();
  hub_->set_faults(R"({"fragment_frames":1,"fragment_bytes":4})");
  collector c;
  auto fc = ledger_config();
  fc.poll_interval = 30.0;
  auto w = watch(fc, c);
  ASSERT_TRUE(wait_stats(w, [](const feed_stats& s) { return s.connected; }));
  publish(1);
  ASSERT_TRUE(c.wait_events(1, 3s));
  stop(w);
  collector c2;
  hub_->set_faults(R"({"non_json_frames":1})");
  auto fc2 = ledger_config();
  fc2.poll_interval = 30.0;
  fc2.cursor = 1;
  auto w2 = watch(fc2, c2);
  ASSERT_TRUE(wait_stats(w2, [](const feed_stats& s) { return s.connected; }));
  publish(1);
  ASSERT_TRUE(c2.wait_events(1, 3s));
  EXPECT_EQ(c2.snapshot(), std::vector<int64_t>{2});
}

// -- catchup / ephemeral ----------------------------------------------------

TEST_F(FeedE2E, CatchupResumesAfterTheHubDropsTheConnectionMidStream) {
  start_hub();
  collector c;
  auto fc = ws_config("/ws/catchup");
  fc.client_id = "e2e-drop";
  // Away for at least 1 s after the drop (the first backoff is base plus
  // jitter): what is published meanwhile reaches nobody live.
  fc.reconnect_base_backoff = 1.0;
  fc.reconnect_max_backoff = 2.0;
  auto w = watch(fc, c);
  ASSERT_TRUE(wait_stats(w, [](const feed_stats& s) { return s.connected; }));
  // The first subscribe has no (last_seq, epoch): the hub resyncs it, one
  // reset before any event. The drop must add none.
  ASSERT_TRUE(c.wait_resets(1));
  EXPECT_EQ(c.resets.front().cause, reset_cause::resync);
  auto epoch = hub_->epoch();
  // A publisher keeps the stream going through the drop, the time away and
  // the reconnect.
  constexpr int total = 400;
  std::atomic<int> published{0};
  std::thread publisher{[&] {
    for (int i = 0; i < total; ++i) {
      hub_->publish("orders/" + std::to_string(i), "created");
      ++published;
      std::this_thread::sleep_for(3ms);
    }
  }};
  struct joiner {
    std::thread& t;
    ~joiner() {
      if (t.joinable())
        t.join();
    }
  } join_publisher{publisher};
  ASSERT_TRUE(c.wait_events(50, 10s)); // events flowing
  EXPECT_EQ(hub_->drop_connections("catchup"), 1u);
  auto at_drop = published.load();
  // The hub moved the connection out of the fan-out at once; the watcher
  // is not back before its backoff.
  auto hs = boost::json::parse(hub_->state_json()).as_object();
  EXPECT_EQ(hs.at("connections").at("catchup").to_number<int64_t>(), 0);
  ASSERT_TRUE(c.wait_events(total, 20s));
  publisher.join();
  std::this_thread::sleep_for(300ms); // nothing more arrives
  EXPECT_LT(at_drop, total) << "the drop happened mid-stream";
  EXPECT_EQ(c.snapshot(), key_range(1, total));
  EXPECT_EQ(c.reset_count(), 1u) << "a reset after the drop";
  auto s = stats(w);
  EXPECT_EQ(s.resets, 1u);
  EXPECT_EQ(s.connects, 2u);
  EXPECT_EQ(s.reconnects, 1u);
  EXPECT_EQ(s.overflows, 0u);
  EXPECT_EQ(s.last_seq, std::optional<int64_t>{total});
  EXPECT_EQ(s.epoch, std::optional<std::string>{epoch});
  hs = boost::json::parse(hub_->state_json()).as_object();
  EXPECT_EQ(hs.at("server").at("dropped").to_number<int64_t>(), 1);
  // The second subscribe resumed (last_seq, epoch); only the first resynced.
  EXPECT_EQ(hs.at("counters").at("resumes").to_number<int64_t>(), 1);
  EXPECT_EQ(hs.at("counters").at("resyncs").to_number<int64_t>(), 1);
}

TEST_F(FeedE2E, CatchupOverflowOfTheWatcherResumesFromTheLastSeq) {
  start_hub();
  collector c;
  auto fc = ws_config("/ws/catchup");
  fc.client_id = "e2e-client";
  // A slow callback piles up in-frame events: the watcher closes the
  // session (overflow) and resumes from the last delivered seq.
  fc.max_pending_frames = 2;
  auto cbs = c.callbacks();
  auto record = cbs.on_event;
  cbs.on_event = [record](const feed_event& e) {
    std::this_thread::sleep_for(30ms);
    record(e);
  };
  auto w = spawn_feed_watcher(*sys_, fc, options(cbs));
  watchers_.push_back(w);
  ASSERT_TRUE(wait_stats(w, [](const feed_stats& s) { return s.connected; }));
  ASSERT_TRUE(c.wait_resets(1)); // the first subscribe's resync
  publish(12);
  ASSERT_TRUE(c.wait_events(12, 10s));
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(c.snapshot(), key_range(1, 12));
  EXPECT_EQ(c.reset_count(), 1u);
  auto s = stats(w);
  EXPECT_GE(s.overflows, 1u);
  EXPECT_GE(s.connects, 2u);
  EXPECT_EQ(s.resets, 1u);
}

TEST_F(FeedE2E, LedgerDropThenTheReconnectReplayDrainsWhatWasMissed) {
  start_hub();
  collector c;
  auto fc = ledger_config();
  fc.poll_interval = 300.0; // only hellos and wakes drain
  fc.reconnect_base_backoff = 1.0;
  fc.reconnect_max_backoff = 2.0;
  auto w = watch(fc, c);
  ASSERT_TRUE(wait_stats(w, [](const feed_stats& s) { return s.connected; }));
  publish(5);
  ASSERT_TRUE(c.wait_events(5));
  // A drain queued behind the wakes of 1..5 may still be on its way: let
  // the replays settle (no new one for 300 ms), so that nothing but the
  // reconnect can fetch what is published next.
  auto replays = [this] {
    return boost::json::parse(hub_->state_json())
      .at("counters")
      .at("replays")
      .to_number<int64_t>();
  };
  auto settle_until = std::chrono::steady_clock::now() + 5s;
  for (auto last = replays();
       std::chrono::steady_clock::now() < settle_until;) {
    std::this_thread::sleep_for(300ms);
    auto now = replays();
    if (now == last)
      break;
    last = now;
  }
  EXPECT_EQ(hub_->drop_connections("ledger"), 1u);
  publish(5); // no wake reaches the watcher: it is away
  auto hs = boost::json::parse(hub_->state_json()).as_object();
  EXPECT_EQ(hs.at("connections").at("ledger").to_number<int64_t>(), 0);
  std::this_thread::sleep_for(300ms); // within the >= 1 s backoff
  EXPECT_EQ(c.snapshot(), key_range(1, 5)) << "fetched before the reconnect";
  ASSERT_TRUE(c.wait_events(10, 10s));
  ASSERT_TRUE(wait_stats(
    w, [](const feed_stats& s) { return s.connected && s.connects == 2; }));
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(c.snapshot(), key_range(1, 10));
  EXPECT_EQ(c.reset_count(), 0u);
  auto s = stats(w);
  EXPECT_EQ(s.cursor, 10);
  EXPECT_EQ(s.resets, 0u);
  EXPECT_EQ(s.connects, 2u);
  EXPECT_EQ(s.reconnects, 1u);
  EXPECT_EQ(s.drain_errors, 0u);
  EXPECT_TRUE(s.connected);
  // Live again: a wake on the new connection moves it.
  publish(1);
  ASSERT_TRUE(c.wait_events(11));
  EXPECT_EQ(c.snapshot(), key_range(1, 11));
}

TEST_F(FeedE2E, CatchupHubRestartOneResetThenTheNewSeqSpace) {
  start_hub();
  collector c;
  auto fc = ws_config("/ws/catchup");
  auto w = watch(fc, c);
  ASSERT_TRUE(wait_stats(w, [](const feed_stats& s) { return s.connected; }));
  std::this_thread::sleep_for(200ms); // the first hello's reset lands
  auto resets0 = c.reset_count();
  publish(3);
  ASSERT_TRUE(c.wait_events(3));
  auto old_epoch = hub_->epoch();
  hub_->restart();
  ASSERT_TRUE(c.wait_resets(resets0 + 1));
  ASSERT_TRUE(wait_stats(w, [](const feed_stats& s) { return s.connected; }));
  publish(2);
  ASSERT_TRUE(c.wait_events(5));
  std::this_thread::sleep_for(300ms);
  auto keys = c.snapshot();
  EXPECT_EQ(keys, (std::vector<int64_t>{1, 2, 3, 1, 2}));
  ASSERT_EQ(c.reset_count(), resets0 + 1);
  auto r = c.resets.back();
  EXPECT_EQ(r.cause, reset_cause::epoch_changed);
  EXPECT_EQ(r.old_epoch, std::optional<std::string>{old_epoch});
}

TEST_F(FeedE2E, EphemeralResetsOnEveryReconnect) {
  start_hub();
  collector c;
  auto w = watch(ws_config("/ws/ephemeral"), c);
  ASSERT_TRUE(wait_stats(w, [](const feed_stats& s) { return s.connected; }));
  ASSERT_TRUE(c.wait_resets(1));
  publish(2);
  ASSERT_TRUE(c.wait_events(2));
  // A restart closes every connection: the reconnect is a reset.
  hub_->restart();
  ASSERT_TRUE(c.wait_resets(2));
  ASSERT_TRUE(wait_stats(
    w, [](const feed_stats& s) { return s.connected && s.connects == 2; }));
  EXPECT_EQ(c.reset_count(), 2u);
  EXPECT_EQ(c.resets.back().mode, feed_mode::ephemeral);
  publish(1);
  ASSERT_TRUE(c.wait_events(3));
  EXPECT_EQ(stats(w).resets, 2u);
}

// -- keepalive, reconnects, refusals ----------------------------------------

TEST_F(FeedE2E, GoSilentIsADeadPeerThenAStableSession) {
  start_hub();
  hub_->set_faults(R"({"go_silent":1})");
  collector c;
  auto fc = ledger_config();
  fc.ws_ping_interval = 1.0;
  fc.ws_pong_timeout = 1.0;
  auto w = watch(fc, c);
  ASSERT_TRUE(wait_stats(
    w, [](const feed_stats& s) { return s.connects >= 1; }, 2s));
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(wait_stats(
    w, [](const feed_stats& s) { return s.peer_timeouts == 1; }, 3500ms));
  EXPECT_LE(std::chrono::steady_clock::now() - t0, 3500ms); // 2 s + load slack
  ASSERT_TRUE(wait_stats(
    w, [](const feed_stats& s) { return s.connected && s.connects == 2; }));
  std::this_thread::sleep_for(5s);
  auto s = stats(w);
  EXPECT_TRUE(s.connected);
  EXPECT_EQ(s.connects, 2u);
  EXPECT_EQ(s.reconnects, 1u);
  EXPECT_EQ(s.peer_timeouts, 1u);
}

TEST_F(FeedE2E, AcceptThenCloseBacksOff) {
  start_hub();
  hub_->set_faults(R"({"accept_then_close":-1})");
  collector c;
  auto fc = ledger_config();
  fc.reconnect_base_backoff = 0.05;
  fc.reconnect_max_backoff = 5.0;
  auto w = watch(fc, c);
  // Record when each connect happens.
  std::vector<std::chrono::steady_clock::time_point> at;
  uint64_t seen = 0;
  auto until = std::chrono::steady_clock::now() + 4s;
  while (std::chrono::steady_clock::now() < until && at.size() < 6) {
    auto s = stats(w);
    if (s.reconnects + 1 > seen) {
      seen = s.reconnects + 1;
      at.push_back(std::chrono::steady_clock::now());
    }
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_GE(at.size(), 4u);
  auto gap = [&](std::size_t i) {
    return at[i + 1] - at[i];
  };
  // Exponential: the last gap exceeds the first by a wide margin.
  EXPECT_GT(gap(at.size() - 2), gap(0));
  EXPECT_LT(seen, 12u); // no reconnect storm
}

TEST_F(FeedE2E, OversizedFrameThatNeverEndsMakesACatchupWatcherReconnect) {
  // The hub's oversized_frame fault: after the hello it announces an
  // 8 MiB + 1 frame (over the 1 MiB cap, under the 256 MiB ceiling) and
  // never sends its payload; it keeps the connection open and out of the
  // fan-out. A catchup watcher without replay has only this session, and
  // every byte after the header -- the hub's pongs included -- is payload
  // of the unfinished frame. Before, that was proof of life forever: no
  // too_large event (the message never ends), no reconnect, nothing in the
  // stats, and nothing published afterwards ever arrived. Now the frame
  // has ws_discard_timeout to end; then the session fails (1009), the
  // watcher counts it, reports over_cap and reconnects (the fault is for
  // one connection: the next one is well-behaved).
  start_hub();
  hub_->set_faults(R"({"oversized_frame":1})");
  collector c;
  auto fc = ws_config("/ws/catchup");
  fc.client_id = "e2e-oversized";
  fc.ws_max_frame_bytes = 1024 * 1024;
  fc.ws_discard_timeout = 0.5;
  auto t0 = std::chrono::steady_clock::now();
  auto w = watch(fc, c);
  ASSERT_TRUE(wait_stats(w,
                         [](const feed_stats& s) {
                           return s.reconnects >= 1 && s.connected
                                  && s.connects >= 2;
                         }))
    << "still stalled on the unfinished frame";
  // Timers never fire early: the first session held for the deadline.
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 500ms);
  auto s = stats(w);
  EXPECT_EQ(s.reconnects, 1u);
  EXPECT_EQ(s.oversized_frames, 1u);
  EXPECT_EQ(s.peer_timeouts, 0u); // the deadline, not the keepalive
  hub_->publish("orders/1", "created");
  ASSERT_TRUE(c.wait_events(1)) << "nothing arrives on the new session";
  EXPECT_EQ(c.snapshot(), std::vector<int64_t>{1});
}

TEST_F(FeedE2E, StopIsPromptIdleAndDuringBackoff) {
  start_hub();
  collector c;
  auto w = watch(ledger_config(), c);
  ASSERT_TRUE(wait_stats(w, [](const feed_stats& s) { return s.connected; }));
  EXPECT_LT(stop(w), 2000ms); // loaded machine under ASan
  hub_->set_faults(R"({"accept_then_close":-1})");
  collector c2;
  auto fc = ledger_config();
  fc.reconnect_base_backoff = 5.0;
  fc.reconnect_max_backoff = 10.0;
  auto w2 = watch(fc, c2);
  std::this_thread::sleep_for(500ms); // closed at once, now backing off
  auto s = stats(w2);
  EXPECT_FALSE(s.connected);
  EXPECT_EQ(s.reconnects, 0u);
  EXPECT_LT(stop(w2), 2000ms); // not the 5 s backoff
}

// -- scale -------------------------------------------------------------------

/// Watchers of the scale test: OUTBOUND_E2E_WATCHERS if set (>= 1), else
/// 1000 (the goal: "1000 watchers in one process on one hub").
std::size_t scale_watchers() {
  if (auto* v = std::getenv("OUTBOUND_E2E_WATCHERS")) {
    auto n = std::strtoul(v, nullptr, 10);
    if (n >= 1)
      return n;
  }
  return 1000;
}

int64_t state_number(const std::string& state_json, const char* group,
                     const char* key) {
  return boost::json::parse(state_json).at(group).at(key).to_number<int64_t>();
}

TEST_F(FeedE2E, ThousandWatchersConnectedFirstAreFedByWakesExactlyOnceInOrder) {
  // Every watcher is connected, has had its hello and has finished its
  // start drain (an empty page) before anything is published; the poll tick
  // is 300 s. So every event can only reach a watcher through a wake frame
  // and the replay it triggers.
  start_hub();
  const std::size_t n = scale_watchers();
  constexpr int events = 20;
  std::vector<std::unique_ptr<collector>> cs;
  std::vector<feed_watcher_actor> ws;
  for (std::size_t i = 0; i < n; ++i) {
    cs.push_back(std::make_unique<collector>());
    auto fc = ledger_config();
    fc.ws_ping_interval = 30.0;
    fc.poll_interval = 300.0;
    fc.prefixes = {"orders/"};
    ws.push_back(watch(fc, *cs.back(), false));
  }
  auto until = std::chrono::steady_clock::now() + 60s;
  auto left = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
      until - std::chrono::steady_clock::now());
  };
  // The hub registers a connection when it answers its subscribe.
  while (state_number(hub_->state_json(), "connections", "ledger")
           < static_cast<int64_t>(n)
         && left() > 0ms)
    std::this_thread::sleep_for(20ms);
  ASSERT_EQ(state_number(hub_->state_json(), "connections", "ledger"),
            static_cast<int64_t>(n));
  for (auto& w : ws)
    ASSERT_TRUE(wait_stats(
      w, [](const feed_stats& s) { return s.connected && s.pages >= 1; },
      std::max(left(), 1ms)));
  auto replays0 = state_number(hub_->state_json(), "counters", "replays");
  auto wakes0 = state_number(hub_->state_json(), "server", "wakes_sent");
  EXPECT_EQ(wakes0, 0);
  for (int i = 0; i < events; ++i) {
    hub_->publish("orders/" + std::to_string(i), "created");
    hub_->publish("other/" + std::to_string(i), "created");
  }
  for (auto& c : cs)
    ASSERT_TRUE(c->wait_events(events, std::max(left(), 1ms)));
  std::this_thread::sleep_for(300ms); // nothing more arrives
  std::vector<int64_t> want;
  for (int i = 0; i < events; ++i)
    want.push_back(1 + 2 * i);
  for (auto& c : cs)
    ASSERT_EQ(c->snapshot(), want);
  for (auto& w : ws) {
    auto s = stats(w);
    // The page cursor: the head when the watcher last read a page. "other/"
    // events wake nobody here, so that page may have been read before the
    // last "other/" event (id 40) was published — both heads are legal; a
    // cursor short of the last delivered event (39) or past the head is not.
    ASSERT_GE(s.cursor, 2 * events - 1);
    ASSERT_LE(s.cursor, 2 * events);
    ASSERT_EQ(s.connects, 1u);
    ASSERT_EQ(s.resets, 0u);
    ASSERT_GE(s.pages, 2u);
  }
  auto st = hub_->state_json();
  // Every watcher was woken and drained after the publishes.
  EXPECT_GE(state_number(st, "server", "wakes_sent"), static_cast<int64_t>(n));
  EXPECT_GE(state_number(st, "counters", "replays") - replays0,
            static_cast<int64_t>(n));
}

// -- outbound watch ----------------------------------------------------------

struct cli_run {
  int exit_code = -1;
  std::string out;
  std::string err;
};

/// Runs the built CLI with `args`; kills it after 20 s.
cli_run run_cli(std::vector<std::string> args) {
  args.insert(args.begin(), OUTBOUND_CLI);
  auto c = outbound::testing::run_child(args, 20s);
  if (c.timed_out)
    ADD_FAILURE() << "outbound watch did not exit within 20 s";
  cli_run r;
  r.exit_code = c.exit_code;
  r.out = std::move(c.out);
  r.err = std::move(c.err);
  return r;
}

TEST_F(FeedE2E, WatchCommandPrintsThreeEventsAndASummary) {
  start_hub();
  publish(2, "orders/1");
  publish(1, "other/1");
  publish(2, "orders/2");
  auto r
    = run_cli({"watch", "--prefix", "orders/", "--limit", "1",
               "--poll-interval", "0.5", "--count", "3", hub_->base_url()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto out = lines_of(r.out);
  ASSERT_EQ(out.size(), 3u) << r.out;
  std::vector<int64_t> want{1, 2, 4};
  for (std::size_t i = 0; i < 3; ++i) {
    auto v = boost::json::parse(out[i]).as_object();
    EXPECT_EQ(v.at("type").as_string(), "event");
    EXPECT_EQ(v.at("event").as_object().at("id").as_int64(), want[i]);
  }
  auto err = lines_of(r.err);
  ASSERT_EQ(err.size(), 1u) << r.err;
  auto sum = boost::json::parse(err[0]).as_object();
  EXPECT_GE(sum.at("cursor").as_int64(), 4);
  EXPECT_LE(sum.at("cursor").as_int64(), 5);
  EXPECT_EQ(sum.at("events").as_int64(), 3);
  EXPECT_EQ(sum.at("resets").as_int64(), 0);
  EXPECT_EQ(sum.at("drain_errors").as_int64(), 0);
  EXPECT_TRUE(sum.contains("last_seq"));
  EXPECT_TRUE(sum.contains("reconnects"));
  EXPECT_TRUE(sum.contains("peer_timeouts"));
}

TEST_F(FeedE2E, WatchCommandConfigErrorNamesTheField) {
  start_hub();
  auto r = run_cli({"watch", "--limit", "0", hub_->base_url()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("config_error"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("limit"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty());
}

} // namespace
