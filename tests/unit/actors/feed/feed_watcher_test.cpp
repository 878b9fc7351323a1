// The feed watcher actor on CAF's deterministic test coordinator: replay
// pages come from a fake ledger behind a real service_client, the WebSocket
// from a fake connector the test drives, deliveries go to a recording
// subscriber. Every time asserted here is exact virtual time.

#include "actors/feed/feed_watcher.hpp"
#include "actors/client/service_client.hpp"
#include "actors/feed/feed_frames.hpp"
#include "config/config_error.hpp"

#include "tests/support/feed_fakes.hpp"
#include "tests/support/virtual_time_fixture.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <caf/actor_cast.hpp>
#include <caf/detail/simple_actor_clock.hpp>
#include <caf/event_based_actor.hpp>

#include <gtest/gtest.h>

using namespace outbound;
using namespace outbound::testing;
using namespace std::chrono_literals;
using std::chrono::nanoseconds;

namespace {

std::string wake(int64_t cursor) {
  return R"({"type":"wake","cursor":)" + std::to_string(cursor) + "}";
}

std::string hello(const std::string& mode, int64_t seq, bool resync,
                  const std::string& epoch) {
  return R"({"type":"hello","mode":")" + mode + R"(","seq":)"
         + std::to_string(seq) + R"(,"cursor":0,"resync":)"
         + (resync ? "true" : "false") + R"(,"epoch":")" + epoch + "\"}";
}

std::string event_frame(int64_t seq) {
  return R"({"type":"event","subject":"orders/x","kind":"k","seq":)"
         + std::to_string(seq) + R"(,"metadata":{}})";
}

boost::json::object parse_obj(const std::string& s) {
  return boost::json::parse(s).as_object();
}

class FeedWatcher : public virtual_time_fixture {
protected:
  FeedWatcher() {
    cfg.replay_path = "/v1/events";
    cfg.limit = 3;
    ccfg.base_url = "http://127.0.0.1:8080";
    ccfg.token = "tok";
  }

  ~FeedWatcher() override {
    // The watcher's poll tick re-arms itself forever, and the test
    // coordinator's shutdown fires timers until none is left: stop it.
    if (w)
      caf::anon_send_exit(w, caf::exit_reason::user_shutdown);
    run();
  }

  feed_watcher_actor start(bool with_ws = true) {
    client_options co;
    co.transport = spawn_ledger_transport(sys(), ledger);
    co.seed = 1;
    feed_watcher_options o;
    if (!cfg.replay_path.empty())
      o.client = make_service_client(sys(), ccfg, co);
    if (with_ws) {
      cfg.ws_path = "/ws/feed";
      o.connector
        = std::make_shared<fake_ws_connector>(ws, [this] { return now(); });
      o.ws = feed_ws_endpoint::from(ccfg);
    }
    if (use_callbacks) {
      o.callbacks = callbacks;
      o.callbacks.detached = false;
    } else if (use_batches) {
      auto b = spawn_recording_batch_subscriber(sys(), subs);
      batch_sub_ = caf::actor_cast<caf::actor>(b);
      o.batch_subscriber = b;
      o.max_delivery_batch = max_batch;
      o.prefetch = prefetch;
    } else {
      o.subscriber = spawn_recording_subscriber(sys(), subs);
    }
    o.seed = 7;
    w = spawn_feed_watcher(sys(), cfg, o);
    watch_termination();
    run();
    return w;
  }

  void watch_termination() {
    auto flag = terminated;
    auto target = caf::actor_cast<caf::actor>(w);
    // Held by the fixture: an actor nobody refers to is destroyed.
    monitor_ = sys().spawn([flag, target](caf::event_based_actor* self) {
      self->monitor(target);
      self->set_down_handler([self, flag](caf::down_msg&) {
        *flag = true;
        self->quit();
      });
      return caf::behavior{[](caf::ok_atom) {
      }};
    });
  }

  /// Moves virtual time to `t`, firing every timer on the way at its own
  /// due time (advance_time would fire them all at the end time).
  feed_stats stats() {
    return ask_stats(sys(), w, [this] { run(); });
  }

  std::optional<feed_stats> stop() {
    auto out = std::make_shared<std::optional<feed_stats>>();
    auto target = w;
    sys().spawn([out, target](caf::event_based_actor* self) {
      self->request(target, caf::infinite, stop_atom_v)
        .then([out](feed_stats s) { *out = s; });
    });
    run();
    return *out;
  }

  /// A WebSocket-only watcher (cfg's replay_path cleared by the caller)
  /// whose subscriber acknowledges only on release_ack(), on an opened
  /// session greeted with a catchup hello at seq 0.
  void start_ws_only_catchup_with_manual_acks() {
    subs->manual = true;
    sub_ = spawn_recording_subscriber(sys(), subs);
    feed_watcher_options o;
    o.connector
      = std::make_shared<fake_ws_connector>(ws, [this] { return now(); });
    cfg.ws_path = "/ws/feed";
    o.ws = feed_ws_endpoint::from(ccfg);
    o.subscriber = sub_;
    o.seed = 5;
    w = spawn_feed_watcher(sys(), cfg, o);
    run();
    ws->last().open();
    ws->last().message(hello("catchup", 0, false, "e1"));
  }

  void release_ack() {
    if (batch_sub_)
      caf::anon_send(batch_sub_, caf::ok_atom_v);
    else
      caf::anon_send(caf::actor_cast<caf::actor>(sub_handle()), caf::ok_atom_v);
    run();
  }

  feed_subscriber_actor sub_handle() {
    return sub_;
  }

  /// Delayed messages the clock holds for the watcher (its timers).
  std::size_t watcher_timers() {
    using clock = caf::detail::simple_actor_clock;
    auto self = caf::actor_cast<caf::strong_actor_ptr>(w);
    std::size_t n = 0;
    for (auto& entry : sched_->clock().schedule())
      if (entry.second->subtype == clock::actor_msg_type
          && static_cast<clock::actor_msg&>(*entry.second).receiver == self)
        ++n;
    return n;
  }

  feed_config cfg;
  client_config ccfg;
  std::shared_ptr<fake_ledger> ledger = std::make_shared<fake_ledger>();
  std::shared_ptr<fake_ws_log> ws = std::make_shared<fake_ws_log>();
  std::shared_ptr<sub_log> subs = std::make_shared<sub_log>();
  std::shared_ptr<bool> terminated = std::make_shared<bool>(false);
  bool use_callbacks = false;
  /// start() delivers to a recording batch subscriber with this cap.
  bool use_batches = false;
  std::size_t max_batch = 1024;
  bool prefetch = true;
  caf::actor batch_sub_;
  feed_callbacks callbacks;
  feed_subscriber_actor sub_;
  feed_watcher_actor w;
  caf::actor monitor_;
};

using ids = std::vector<int64_t>;

} // namespace

// -- ledger
// ----------------------------------------------------------------------

TEST_F(FeedWatcher, EveryDialCarriesUserAgentCredentialAndItsOwnRequestId) {
  // The upgrade request carries what build_request gives every outbound
  // request: User-Agent, the credential, default headers, and one
  // x-request-id per dial (a configured one is replaced).
  ccfg.default_headers = {{"X-Team", "feeds"},
                          {"X-Request-Id", "fixed"},
                          {"x-request-id", "fixed-too"},
                          {"user-agent", "team-agent/2"}};
  start();
  ASSERT_EQ(ws->sessions.size(), 1u);
  ws->last().open();
  run();
  ws->last().peer_close();
  advance_by(1s);
  ASSERT_EQ(ws->sessions.size(), 2u);
  std::vector<std::string> ids_seen;
  for (auto& s : ws->sessions) {
    auto& hs = s->opts.headers;
    // A configured User-Agent replaces outbound's, as build_request does:
    // one line per name.
    auto* ua = find_header(hs, "User-Agent");
    ASSERT_NE(ua, nullptr);
    EXPECT_EQ(*ua, "team-agent/2");
    EXPECT_EQ(std::count_if(hs.begin(), hs.end(),
                            [](const auto& kv) {
                              return find_header(header_list{kv}, "user-agent");
                            }),
              1);
    auto* cred = find_header(hs, "Authorization");
    ASSERT_NE(cred, nullptr);
    EXPECT_EQ(*cred, "Bearer tok");
    auto* team = find_header(hs, "X-Team");
    ASSERT_NE(team, nullptr);
    EXPECT_EQ(*team, "feeds");
    int n = 0;
    for (auto& [k, v] : hs)
      if (find_header(header_list{{k, v}}, "x-request-id")) {
        ++n;
        ids_seen.push_back(v);
      }
    EXPECT_EQ(n, 1) << "one x-request-id per upgrade request";
  }
  ASSERT_EQ(ids_seen.size(), 2u);
  for (auto& id : ids_seen) {
    EXPECT_EQ(id.size(), 32u) << id;
    EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos);
  }
  EXPECT_NE(ids_seen[0], ids_seen[1]) << "a new id per dial";
}

TEST_F(FeedWatcher, IdsOneToFiveWithLimitThreeArriveInOrderInTwoPages) {
  ledger->append_to(5);
  start(false);
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3, 4, 5}));
  EXPECT_EQ(ledger->afters(), (ids{0, 3}));
  EXPECT_EQ(ledger->requests[0].target, "/v1/events?after=0&limit=3");
  auto s = stats();
  EXPECT_EQ(s.cursor, 5);
  EXPECT_EQ(s.pages, 2u);
  EXPECT_EQ(s.events_delivered, 5u);
  EXPECT_EQ(s.mode, feed_mode::ledger);
  EXPECT_EQ(s.drain_errors, 0u);
}

TEST_F(FeedWatcher, WakesArrivingOutOfOrderYieldOneToTenExactlyOnceInOrder) {
  ledger->append_to(5);
  start();
  ws->last().open();
  run();
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3, 4, 5}));
  ledger->append_to(10);
  for (int64_t c : {9, 6, 10, 6, 8, 7, 9})
    ws->last().message(wake(c));
  run();
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  advance_by(65s); // poll ticks, re-drains: nothing new, nothing twice
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(stats().cursor, 10);
  EXPECT_EQ(stats().head, 10); // the highest wake hint
}

TEST_F(FeedWatcher, AnyCompleteMessageIsAWakeInTheLedgerModel) {
  ledger->append_to(2);
  start();
  ws->last().open();
  run();
  ledger->append_to(3);
  ws->last().message("wake 3"); // non-JSON
  run();
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3}));
  ledger->append_to(4);
  ws->last().message(wake(4), true); // fragmented
  run();
  ledger->append_to(5);
  ws->last().message(event_frame(99)); // an event frame is only a wake
  run();
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3, 4, 5}));
  EXPECT_EQ(stats().last_seq, std::nullopt);
}

TEST_F(FeedWatcher, LostWakeIsHealedByThePollTickAtExactlyPollInterval) {
  ledger->append_to(2);
  start();
  ws->last().open();
  run();
  advance_by(1s);
  ledger->append_to(3); // its wake is lost
  advance_to(t0_ + 30s - 1ns);
  EXPECT_EQ(subs->ids(), (ids{1, 2}));
  advance_to(t0_ + 30s);
  ASSERT_EQ(subs->ids(), (ids{1, 2, 3}));
  EXPECT_EQ(subs->got.back().at - t0_, 30s);
}

TEST_F(FeedWatcher, AConnectArmsOneClockTimerForGuardKeepaliveAndPoll) {
  // Defaults: handshake guard at 5 s + 1 s, first keepalive check at 20 s
  // after the open, poll tick at 30 s. One clock timer serves all three
  // (timer_slots.hpp); each of them used to arm its own.
  ledger->append_to(2);
  start();
  EXPECT_EQ(watcher_timers(), 1u) << "the guard's";
  ws->last().open();
  run();
  EXPECT_EQ(subs->ids(), (ids{1, 2}));
  EXPECT_EQ(watcher_timers(), 1u) << "still the guard's";
  // Each deadline still comes at its own time.
  advance_to(t0_ + 20s - 1ns);
  EXPECT_EQ(ws->last().pings, 0);
  advance_to(t0_ + 20s);
  EXPECT_EQ(ws->last().pings, 1);
  ledger->append_to(3); // its wake is lost: the poll tick reads it
  advance_to(t0_ + 30s - 1ns);
  EXPECT_EQ(subs->ids(), (ids{1, 2}));
  advance_to(t0_ + 30s);
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3}));
  EXPECT_EQ(watcher_timers(), 1u) << "the 40 s keepalive's";
}

// A late timer handles only what was due when it fired: what arrived before
// a deadline that passed meanwhile is handled first, as when each deadline
// had its own timer (both found by a reviewer of the shared timer).
TEST_F(FeedWatcher, AnOpenQueuedBeforeTheGuardDeadlineIsNotKilledByALateTick) {
  cfg.poll_interval = 2.0;
  ledger->append_to(1);
  start();
  auto& clk = sched_->clock();
  ASSERT_TRUE(clk.has_pending_timeout());
  ASSERT_EQ(clk.schedule().begin()->first, t0_ + 2s);
  clk.trigger_timeout(); // the 2 s tick is queued, not run
  clk.current_time = t0_ + 5900ms;
  ws->last().open(); // queued behind the tick, before the 6 s guard
  clk.current_time = t0_ + 6100ms;
  run();
  EXPECT_EQ(ws->sessions.size(), 1u);
  EXPECT_FALSE(ws->last().closed) << "an open in time was killed by the guard";
  auto s = stats();
  EXPECT_EQ(s.connects, 1u);
  EXPECT_EQ(s.disconnects, 0u);
}

TEST_F(FeedWatcher, ActivityQueuedBeforeTheSilenceDeadlineKeepsTheSession) {
  cfg.poll_interval = 59.999;
  ledger->append_to(1);
  start();
  ws->last().open();
  run();
  auto& clk = sched_->clock();
  advance_to(t0_ + 59998ms); // pings at 20 s and 40 s, no pongs
  ASSERT_EQ(clk.schedule().begin()->first, t0_ + 59999ms);
  clk.trigger_timeout(); // the poll tick, queued
  clk.current_time = t0_ + 59999500us;
  ws->last().activity(); // proof of life, queued behind the tick
  clk.current_time = t0_ + 60001ms;
  run();
  EXPECT_FALSE(ws->last().closed);
  EXPECT_EQ(stats().peer_timeouts, 0u);
}

TEST_F(FeedWatcher, WakeTargetNotYetVisibleReDrainsOnADoublingBackoff) {
  cfg.limit = 10;
  ledger->append_to(5);
  start();
  ws->last().open();
  run();
  ledger->requests.clear();
  ledger->append_to(7);
  ledger->visible = 5;
  advance_by(1s);
  auto t = now();
  ws->last().message(wake(7));
  advance_to(t + 500ms);
  ledger->visible = -1; // the visibility horizon moves
  advance_to(t + 2s);
  std::vector<nanoseconds> at;
  for (auto& r : ledger->requests)
    at.push_back(r.at - t);
  EXPECT_EQ(at, (std::vector<nanoseconds>{0ms, 50ms, 150ms, 350ms, 750ms}));
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(subs->got.back().at - t, 750ms);
}

TEST_F(FeedWatcher, RetentionFloorGivesExactlyOneResetThenTheRestInOrder) {
  // cilium/cilium #3011 (cursor below retention must reset, not skip ahead):
  // cursor 100, retention now starts at 150.
  cfg.cursor = 100;
  cfg.limit = 30;
  ledger->append_to(200);
  ledger->floor = 150;
  start(false);
  ASSERT_FALSE(subs->got.empty());
  ASSERT_TRUE(subs->got.front().is_reset) << "never resumes past the gap";
  auto& r = subs->got.front().rs;
  EXPECT_EQ(r.mode, feed_mode::ledger);
  EXPECT_EQ(r.cause, reset_cause::retention);
  EXPECT_EQ(r.from_cursor, 100);
  EXPECT_EQ(r.to_cursor, 150);
  EXPECT_EQ(boost::json::serialize(r.detail), R"({"cursor":180,"reset":true})");
  ids want;
  for (int64_t i = 151; i <= 200; ++i)
    want.push_back(i);
  EXPECT_EQ(subs->ids(), want);
  EXPECT_EQ(subs->resets().size(), 1u);
  advance_by(61s); // later polls: no second reset
  EXPECT_EQ(subs->resets().size(), 1u);
  auto s = stats();
  EXPECT_EQ(s.resets, 1u);
  EXPECT_EQ(s.resets_by_cause[static_cast<std::size_t>(reset_cause::retention)],
            1u);
  EXPECT_EQ(s.cursor, 200);
}

TEST_F(FeedWatcher, NonObjectPageCountsADrainErrorAndLeavesTheCursor) {
  ledger->append_to(3);
  ledger->non_object = true;
  start(false);
  EXPECT_TRUE(subs->got.empty());
  auto s = stats();
  EXPECT_EQ(s.drain_errors, 1u);
  EXPECT_EQ(s.cursor, 0);
  ledger->non_object = false;
  advance_by(30s);
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3}));
  EXPECT_EQ(stats().drain_errors, 1u);
}

TEST_F(FeedWatcher, FailedReplayIsRetriedAfterABackoffWithTheCursorUntouched) {
  ledger->append_to(2);
  ledger->fail_next = 1;
  start(false);
  EXPECT_TRUE(subs->got.empty());
  EXPECT_EQ(stats().replay_errors, 1u);
  advance_by(50ms); // the retry backoff's floor
  EXPECT_EQ(subs->ids(), (ids{1, 2}));
  EXPECT_EQ(ledger->afters(), (ids{0, 0}));
  EXPECT_EQ(ledger->requests[1].at - ledger->requests[0].at, nanoseconds{50ms});
}

// -- subscribe frame, catchup, ephemeral
// --------------------------------------------

TEST_F(FeedWatcher, SubscribeOnConnectCarriesTheCursorOnlyWithAReplayPath) {
  cfg.prefixes = {"orders/"};
  ledger->append_to(4);
  start();
  ws->last().open();
  run();
  ASSERT_EQ(ws->last().sent.size(), 1u);
  auto sub = parse_obj(ws->last().sent[0]);
  EXPECT_EQ(sub.at("type"), "subscribe");
  EXPECT_EQ(boost::json::serialize(sub.at("prefixes")), R"(["orders/"])");
  EXPECT_EQ(sub.at("client_id").as_string().size(), 32u);
  EXPECT_TRUE(sub.at("last_seq").is_null());
  EXPECT_TRUE(sub.at("epoch").is_null());
  EXPECT_EQ(sub.at("cursor"), 4) << "drained before the socket opened";
  EXPECT_EQ(ws->last().opts.path, "/ws/feed");
  EXPECT_EQ(ws->last().opts.origin.port, 8080);
  // User-Agent, the credential, the dial's x-request-id.
  ASSERT_EQ(ws->last().opts.headers.size(), 3u);
  auto* cred = find_header(ws->last().opts.headers, "Authorization");
  ASSERT_NE(cred, nullptr);
  EXPECT_EQ(*cred, "Bearer tok");
  EXPECT_TRUE(stats().connected);
}

TEST_F(FeedWatcher, CatchupResumesAndAChangedEpochIsExactlyOneReset) {
  cfg.replay_path.clear();
  cfg.client_id = "cid-1";
  start();
  // Session 1: the hub has never seen us.
  ws->last().open();
  run();
  auto s1 = parse_obj(ws->last().sent.at(0));
  EXPECT_EQ(s1.at("client_id"), "cid-1");
  EXPECT_TRUE(s1.at("cursor").is_null());
  EXPECT_TRUE(s1.at("last_seq").is_null());
  EXPECT_FALSE(stats().connected) << "ws-only: connected after the hello";
  ws->last().message(hello("catchup", 0, true, "e1"));
  for (int64_t s : {1, 2, 3})
    ws->last().message(event_frame(s));
  run();
  EXPECT_TRUE(stats().connected);
  ASSERT_EQ(subs->resets().size(), 1u);
  EXPECT_EQ(subs->resets()[0]->cause, reset_cause::resync);
  EXPECT_EQ(subs->seqs(), (ids{1, 2, 3}));
  // Session 2: resume.
  ws->last().peer_close();
  advance_by(1s);
  ASSERT_EQ(ws->sessions.size(), 2u);
  ws->last().open();
  run();
  auto s2 = parse_obj(ws->last().sent.at(0));
  EXPECT_EQ(s2.at("client_id"), "cid-1");
  EXPECT_EQ(s2.at("last_seq"), 3);
  EXPECT_EQ(s2.at("epoch"), "e1");
  ws->last().message(hello("catchup", 4, false, "e1"));
  ws->last().message(event_frame(3)); // replayed again: not twice
  ws->last().message(event_frame(4));
  run();
  EXPECT_EQ(subs->resets().size(), 1u);
  EXPECT_EQ(subs->seqs(), (ids{1, 2, 3, 4}));
  // Session 3: the hub restarted (new epoch) and its new seq space
  // overlaps ours: one reset, never a silent resume.
  ws->last().peer_close();
  advance_by(1s);
  ASSERT_EQ(ws->sessions.size(), 3u);
  ws->last().open();
  ws->last().message(hello("catchup", 2, false, "e2"));
  ws->last().message(event_frame(3));
  run();
  ASSERT_EQ(subs->resets().size(), 2u);
  auto& r = *subs->resets()[1];
  EXPECT_EQ(r.mode, feed_mode::catchup);
  EXPECT_EQ(r.cause, reset_cause::epoch_changed);
  EXPECT_EQ(r.last_seq, 4);
  EXPECT_EQ(r.old_epoch, "e1");
  EXPECT_EQ(r.new_epoch, "e2");
  EXPECT_EQ(r.new_seq, 2);
  EXPECT_EQ(subs->seqs(), (ids{1, 2, 3, 4, 3}));
  auto s = stats();
  EXPECT_EQ(s.resets, 2u);
  EXPECT_EQ(
    s.resets_by_cause[static_cast<std::size_t>(reset_cause::epoch_changed)],
    1u);
  EXPECT_EQ(s.last_seq, 3);
  EXPECT_EQ(s.epoch, "e2");
  EXPECT_EQ(s.mode, feed_mode::catchup);
}

TEST_F(FeedWatcher, EphemeralResetsOnEveryReconnect) {
  cfg.replay_path.clear();
  start();
  for (int i = 0; i < 3; ++i) {
    ws->last().open();
    ws->last().message(hello("ephemeral", 10 * i, false, "e1"));
    ws->last().message(event_frame(10 * i + 1));
    run();
    ws->last().peer_close();
    advance_by(2s);
  }
  ASSERT_EQ(subs->got.size(), 6u);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(subs->got[2 * i].is_reset) << i;
    EXPECT_EQ(subs->got[2 * i].rs.cause, reset_cause::reconnect);
    EXPECT_EQ(subs->got[2 * i].rs.mode, feed_mode::ephemeral);
    EXPECT_EQ(subs->got[2 * i + 1].ev.seq, 10 * i + 1);
  }
  auto s = stats();
  EXPECT_EQ(s.resets, 3u);
  EXPECT_EQ(s.resets_by_cause[static_cast<std::size_t>(reset_cause::reconnect)],
            3u);
  EXPECT_EQ(s.connects, 3u);
  EXPECT_EQ(s.disconnects, 3u);
  EXPECT_EQ(s.reconnects, 3u);
}

TEST_F(FeedWatcher, WsOnlyHubWithoutHelloInfersEphemeralWithOneReset) {
  cfg.replay_path.clear();
  start();
  ws->last().open();
  ws->last().message(event_frame(5));
  ws->last().message(event_frame(6));
  run();
  ASSERT_EQ(subs->got.size(), 3u);
  EXPECT_TRUE(subs->got[0].is_reset);
  EXPECT_EQ(subs->got[0].rs.cause, reset_cause::inferred);
  EXPECT_EQ(subs->seqs(), (ids{5, 6}));
  EXPECT_EQ(stats().mode, feed_mode::ephemeral);
}

TEST_F(FeedWatcher, InFrameHelloQuiescesALedgerConfiguredWatcher) {
  ledger->append_to(2);
  start();
  ws->last().open();
  ws->last().message(hello("catchup", 0, true, "e1"));
  ws->last().message(event_frame(1));
  run();
  EXPECT_EQ(stats().mode, feed_mode::catchup);
  auto before = ledger->requests.size();
  ledger->append_to(5);
  advance_by(31s); // the poll tick does not drain in catchup
  EXPECT_EQ(ledger->requests.size(), before);
  EXPECT_EQ(subs->ids(), (ids{1, 2}));
  EXPECT_EQ(subs->seqs(), (ids{1}));
}

// -- keepalive and reconnects
// -------------------------------------------------------

TEST_F(FeedWatcher, DeadPeerIsDeclaredAfterThreeSilentPingIntervals) {
  ledger->append_to(1);
  start();
  ws->last().open();
  run();
  advance_to(t0_ + 60s - 1ns);
  EXPECT_FALSE(ws->last().closed);
  EXPECT_EQ(ws->last().pings, 2);
  advance_to(t0_ + 60s);
  EXPECT_TRUE(ws->last().closed);
  EXPECT_EQ(ws->last().closed_at - t0_, 60s);
  auto s = stats();
  EXPECT_EQ(s.peer_timeouts, 1u);
  EXPECT_EQ(s.keepalives, 2u);
  EXPECT_FALSE(s.connected);
}

TEST_F(FeedWatcher, DeadPeerCase19ReconnectsReplaysAndThenStaysUp) {
  // websocket-client #411 (dead-peer detection without inbound data):
  // ping 1 s, pong timeout 1 s; the hub
  // sends one message after the handshake, then goes silent.
  cfg.ws_ping_interval = 1.0;
  cfg.ws_pong_timeout = 1.0;
  cfg.poll_interval = 300.0;
  ledger->append_to(5);
  start();
  ws->last().open();
  ws->last().message(wake(5));
  run();
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3, 4, 5}));
  ledger->append_to(7); // published while the peer is black-holed
  advance_to(t0_ + 2200ms);
  ASSERT_TRUE(ws->sessions[0]->closed);
  EXPECT_LE(ws->sessions[0]->closed_at - t0_, 2200ms);
  EXPECT_EQ(ws->sessions[0]->closed_at - t0_, 2s);
  EXPECT_EQ(stats().peer_timeouts, 1u);
  // Reconnect with backoff: the session had a message, so from the base.
  ws->answers_pings = true;
  advance_to(t0_ + 2s + 400ms);
  ASSERT_EQ(ws->sessions.size(), 2u);
  auto delay = ws->sessions[1]->dialled_at - ws->sessions[0]->closed_at;
  EXPECT_GE(delay, 200ms);
  EXPECT_LT(delay, 400ms);
  ws->last().open();
  run();
  auto sub = parse_obj(ws->last().sent.at(0));
  EXPECT_EQ(sub.at("cursor"), 5) << "replay from the stored cursor";
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(ledger->requests.back().after, 5);
  // The new peer answers pings: it stays up, no reconnect loop.
  advance_by(10s);
  EXPECT_FALSE(ws->last().closed);
  EXPECT_GE(ws->last().pings, 9);
  auto s = stats();
  EXPECT_EQ(s.peer_timeouts, 1u);
  EXPECT_EQ(s.reconnects, 1u);
  EXPECT_EQ(ws->sessions.size(), 2u);
  EXPECT_TRUE(s.connected);
}

TEST_F(FeedWatcher, ReconnectBackoffDoublesAndResetsOnlyAfterAHealthySession) {
  cfg.replay_path.clear();
  start();
  // Accept then drop at once, five times: the backoff keeps growing.
  std::vector<nanoseconds> delays;
  for (int i = 0; i < 5; ++i) {
    ws->last().open();
    run();
    ws->last().peer_close();
    run();
    auto closed = now();
    auto n = ws->sessions.size();
    while (ws->sessions.size() == n)
      advance_to(sched().clock().schedule().begin()->first);
    delays.push_back(ws->last().dialled_at - closed);
  }
  nanoseconds b = 200ms;
  for (auto d : delays) {
    EXPECT_GE(d, b);
    EXPECT_LT(d, 2 * b);
    b *= 2;
  }
  // A healthy session (one message) restores the base.
  ws->last().open();
  ws->last().message(hello("ephemeral", 0, false, "e"));
  run();
  ws->last().peer_close();
  run();
  auto closed = now();
  auto n = ws->sessions.size();
  while (ws->sessions.size() == n)
    advance_to(sched().clock().schedule().begin()->first);
  auto d = ws->last().dialled_at - closed;
  EXPECT_GE(d, 200ms);
  EXPECT_LT(d, 400ms);
}

TEST_F(FeedWatcher, ConnectedForTheStablePeriodIsHealthyToo) {
  cfg.replay_path.clear();
  cfg.ws_ping_interval = 0; // no pings, no dead-peer verdicts
  cfg.stable_period = 30.0;
  start();
  for (int i = 0; i < 3; ++i) { // grow the backoff to 1.6 s
    ws->last().open();
    ws->last().peer_close();
    advance_by(2s);
  }
  ws->last().open();
  run();
  advance_by(30s);
  ws->last().peer_close();
  run();
  auto closed = now();
  advance_by(400ms);
  ASSERT_EQ(ws->sessions.size(), 5u);
  EXPECT_LT(ws->last().dialled_at - closed, 400ms);
}

TEST_F(FeedWatcher, EventsOfAnOldSessionAreDropped) {
  cfg.replay_path.clear();
  start();
  ws->last().open();
  ws->last().message(hello("ephemeral", 0, false, "e"));
  run();
  auto& old = *ws->sessions[0];
  old.peer_close();
  advance_by(1s);
  ASSERT_EQ(ws->sessions.size(), 2u);
  ws->last().open();
  ws->last().message(hello("ephemeral", 0, false, "e"));
  run();
  auto before = subs->got.size();
  old.message(event_frame(42)); // a late report of the first session
  old.peer_close();
  run();
  EXPECT_EQ(subs->got.size(), before);
  auto s = stats();
  EXPECT_EQ(s.disconnects, 1u);
  EXPECT_TRUE(s.connected);
}

TEST_F(FeedWatcher, AHandshakeThatNeverReportsIsGivenUpAndRedialled) {
  cfg.replay_path.clear();
  cfg.ws_handshake_timeout = 5.0;
  start();
  ASSERT_EQ(ws->sessions.size(), 1u);
  advance_to(t0_ + 6s - 1ns);
  EXPECT_FALSE(ws->sessions[0]->closed);
  advance_to(t0_ + 6s);
  EXPECT_TRUE(ws->sessions[0]->closed);
  advance_by(400ms);
  ASSERT_EQ(ws->sessions.size(), 2u);
  auto s = stats();
  EXPECT_EQ(s.connects, 0u);
  EXPECT_EQ(s.disconnects, 0u);
  EXPECT_EQ(s.reconnects, 1u);
}

TEST_F(FeedWatcher, LedgerHelloCursorIsAWakeTarget) {
  cfg.limit = 10;
  ledger->append_to(7);
  ledger->visible = 5;
  start();
  ws->last().open();
  ws->last().message(
    R"({"type":"hello","mode":"ledger","seq":0,"cursor":7,"resync":false,"epoch":null})");
  run();
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3, 4, 5}));
  ledger->visible = -1;
  advance_by(50ms);
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(stats().mode, feed_mode::ledger);
}

TEST_F(FeedWatcher, InFrameBacklogOverflowClosesTheSessionAndResumesLater) {
  cfg.replay_path.clear();
  cfg.max_pending_frames = 2;
  start_ws_only_catchup_with_manual_acks();
  for (int64_t s : {1, 2, 3})
    ws->last().message(event_frame(s));
  run();
  EXPECT_TRUE(ws->sessions[0]->closed);
  EXPECT_EQ(stats().overflows, 1u);
  // Backlog still over half the cap: no redial yet.
  advance_by(1s);
  EXPECT_EQ(ws->sessions.size(), 1u);
  for (int i = 0; i < 4; ++i)
    release_ack();
  EXPECT_EQ(subs->seqs(), (ids{1, 2, 3}));
  advance_by(2s);
  ASSERT_EQ(ws->sessions.size(), 2u);
  ws->last().open();
  run();
  auto sub = parse_obj(ws->last().sent.at(0));
  EXPECT_EQ(sub.at("last_seq"), 3) << "every queued event was delivered";
}

TEST_F(FeedWatcher, TheBacklogBoundCountsTheParsedFormNotTheText) {
  // 100 empty arrays: ~400 bytes of text, over 3 KB parsed (two value
  // slots each). Two such events queued are under 1 KB of text -- under
  // the bound -- but over 6 KB parsed: over it. A bound on text alone let
  // 16x the bound stay in memory.
  std::string arrays = "[";
  for (int i = 0; i < 100; ++i)
    arrays += i == 0 ? "[]" : ",[]";
  arrays += "]";
  auto fat = [&](int64_t seq) {
    return R"({"type":"event","subject":"orders/x","kind":"k","seq":)"
           + std::to_string(seq) + R"(,"metadata":{"a":)" + arrays + "}}";
  };
  ASSERT_LT(2 * fat(1).size(), 1000u);
  cfg.replay_path.clear();
  cfg.max_pending_frame_bytes = 4000;
  start_ws_only_catchup_with_manual_acks();
  // One message alone is never a backlog, whatever its size.
  ws->last().message(fat(1));
  run();
  EXPECT_FALSE(ws->sessions[0]->closed);
  ws->last().message(fat(2));
  run();
  EXPECT_TRUE(ws->sessions[0]->closed);
  EXPECT_EQ(stats().overflows, 1u);
  for (int i = 0; i < 4; ++i)
    release_ack();
  EXPECT_EQ(subs->seqs(), (ids{1, 2})) << "every queued event delivered";
}

// -- delivery
// -----------------------------------------------------------------------

TEST_F(FeedWatcher, SubscriberBackpressureNoSecondEventBeforeTheAck) {
  subs->manual = true;
  ledger->append_to(3);
  sub_ = spawn_recording_subscriber(sys(), subs);
  // start() spawns its own subscriber: wire ours in by hand.
  client_options co;
  co.transport = spawn_ledger_transport(sys(), ledger);
  feed_watcher_options o;
  o.client = make_service_client(sys(), ccfg, co);
  o.subscriber = sub_;
  o.seed = 3;
  w = spawn_feed_watcher(sys(), cfg, o);
  run();
  advance_by(5s);
  EXPECT_EQ(subs->ids(), (ids{1}));
  EXPECT_EQ(stats().cursor, 0) << "the cursor waits for the ack";
  release_ack();
  EXPECT_EQ(subs->ids(), (ids{1, 2}));
  EXPECT_EQ(stats().cursor, 1);
  release_ack();
  release_ack();
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3}));
  EXPECT_EQ(stats().cursor, 3);
  EXPECT_EQ(stats().events_delivered, 3u);
}

// -- batches (feed_batch_subscriber_actor)
// ------------------------------------------

TEST_F(FeedWatcher, ABatchSubscriberGetsEachPageAsOneBatchAndTheCursorWaits) {
  use_batches = true;
  subs->manual = true;
  ledger->append_to(5);
  start(false);
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3}));
  EXPECT_EQ(subs->batch_sizes, (std::vector<std::size_t>{3}));
  EXPECT_EQ(stats().cursor, 0) << "the cursor waits for the batch's ack";
  release_ack();
  EXPECT_EQ(stats().cursor, 3);
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3, 4, 5}));
  EXPECT_EQ(subs->batch_sizes, (std::vector<std::size_t>{3, 2}));
  release_ack();
  auto s = stats();
  EXPECT_EQ(s.cursor, 5);
  EXPECT_EQ(s.events_delivered, 5u);
  EXPECT_EQ(s.event_callback_errors, 0u);
}

// -- one page ahead
// --------------------------------------------------------------------

TEST_F(FeedWatcher, AFullPageAsksForTheNextWhileItIsDeliveredAndUsesIt) {
  use_batches = true;
  subs->manual = true;
  ledger->append_to(7);
  start(false);
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3}));
  EXPECT_EQ(ledger->afters(), (ids{0, 3}))
    << "the next page is asked for before the first is acknowledged";
  EXPECT_EQ(stats().cursor, 0);
  release_ack();
  // The drain asked after=3: the page ahead was that page, not asked again;
  // it is full too, so the one after it is asked at once.
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(ledger->afters(), (ids{0, 3, 6}));
  EXPECT_EQ(stats().cursor, 3);
  release_ack();
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3, 4, 5, 6, 7}));
  release_ack();
  // A short page asks nothing ahead; the drain then goes idle.
  EXPECT_EQ(ledger->afters(), (ids{0, 3, 6}));
  auto s = stats();
  EXPECT_EQ(s.cursor, 7);
  EXPECT_EQ(s.pages, 3u);
  EXPECT_EQ(s.events_delivered, 7u);
}

TEST_F(FeedWatcher, AShortPageAheadIsAskedAgainSoAWakeSinceIsNotLost) {
  // The page ahead (after=3) comes back short ([4]) while 1..3 are held;
  // then 5 is appended and a wake without a cursor arrives. The drain's
  // next fetch must see 5: a short page ahead is never used.
  use_batches = true;
  subs->manual = true;
  ledger->append_to(4);
  start();
  ws->last().open();
  ws->last().message(
    R"({"type":"hello","mode":"ledger","seq":0,"cursor":4,"resync":false})");
  run();
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3}));
  ASSERT_GE(ledger->afters().size(), 2u);
  EXPECT_EQ(ledger->afters()[1], 3) << "asked ahead";
  ledger->append_to(5);
  ws->last().message(R"({"type":"wake"})");
  run();
  release_ack();
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3, 4, 5}))
    << "4 and 5 at once, not at the next poll tick";
  release_ack();
  EXPECT_EQ(stats().cursor, 5);
}

TEST_F(FeedWatcher, AFailedPageAheadIsAskedAgainNotCountedAsAFailure) {
  use_batches = true;
  subs->manual = true;
  ledger->append_to(5);
  ledger->fail_requests = {1}; // the page ahead
  start(false);
  EXPECT_EQ(ledger->afters(), (ids{0, 3}));
  release_ack();
  EXPECT_EQ(ledger->afters(), (ids{0, 3, 3})) << "asked again at once";
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3, 4, 5}));
  release_ack();
  auto s = stats();
  EXPECT_EQ(s.cursor, 5);
  EXPECT_EQ(s.replay_errors, 0u) << "the drain never saw that answer";
}

TEST_F(FeedWatcher, APageAheadIsNeverAskedTwice) {
  // Whether the drain asks for the page ahead before or after its answer
  // arrived, that page is asked once.
  use_batches = true;
  ledger->append_to(5);
  start(false);
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3, 4, 5}));
  EXPECT_EQ(ledger->afters(), (ids{0, 3}));
}

TEST_F(FeedWatcher, WithoutPrefetchTheNextPageWaitsForTheAck) {
  use_batches = true;
  subs->manual = true;
  prefetch = false;
  ledger->append_to(5);
  start(false);
  EXPECT_EQ(ledger->afters(), (ids{0})) << "no fetch before the page is done";
  release_ack();
  EXPECT_EQ(ledger->afters(), (ids{0, 3}));
  release_ack();
  EXPECT_EQ(stats().cursor, 5);
}

TEST_F(FeedWatcher, APageAheadIsDroppedWhenTheDrainAsksAnotherOne) {
  // The page after 3 is asked ahead while 1..3 are delivered; the hub then
  // restarts with a new ledger, and the drain's next page is the new
  // ledger's first (a rewind), not the page ahead: that is never delivered.
  use_batches = true;
  subs->manual = true;
  ledger->append_to(6);
  ledger->epoch = "e1";
  ledger->cursor_is_head = true;
  start();
  ws->last().open();
  ws->last().message(
    R"({"type":"hello","mode":"ledger","seq":0,"cursor":6,"resync":false,"epoch":"e1"})");
  run();
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3}));
  EXPECT_EQ(ledger->afters(), (ids{0, 3}));
  ledger->ids = {1, 2};
  ledger->epoch = "e2";
  ws->last().peer_close();
  advance_by(2s);
  ASSERT_EQ(ws->sessions.size(), 2u);
  ws->last().open();
  ws->last().message(
    R"({"type":"hello","mode":"ledger","seq":0,"cursor":2,"resync":false,"epoch":"e2"})");
  run();
  release_ack(); // 1..3: the page is done; the drain rewinds
  release_ack(); // the rewind reset
  release_ack(); // 1..2 of the new ledger
  EXPECT_EQ(ledger->afters(), (ids{0, 3, 0}));
  ASSERT_EQ(subs->resets().size(), 1u);
  EXPECT_EQ(subs->resets()[0]->cause, reset_cause::rewind);
  EXPECT_EQ(subs->resets()[0]->from_cursor, 3);
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3, 1, 2}))
    << "4..6 of the old ledger, read ahead, are never delivered";
  EXPECT_EQ(stats().cursor, 2);
}

TEST_F(FeedWatcher, ABatchNeverSpansAResetAndKeepsToItsCap) {
  use_batches = true;
  max_batch = 2;
  cfg.limit = 5;
  ledger->append_to(10);
  ledger->floor = 4;
  start(false);
  // Page after=0: the reset (ids 1..4 are gone), then 5..9 in batches of
  // at most 2; page after=9: 10.
  ASSERT_FALSE(subs->got.empty());
  EXPECT_TRUE(subs->got.front().is_reset);
  EXPECT_EQ(subs->got.front().delivery, 1u) << "a reset is its own delivery";
  EXPECT_EQ(subs->ids(), (ids{5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(subs->batch_sizes, (std::vector<std::size_t>{2, 2, 1, 1}));
  auto s = stats();
  EXPECT_EQ(s.cursor, 10);
  EXPECT_EQ(s.resets, 1u);
  EXPECT_EQ(s.events_delivered, 6u);
}

TEST_F(FeedWatcher, FailuresInABatchAreCountedAndTheCursorMovesPastThem) {
  use_batches = true;
  subs->fail_per_batch = 1;
  ledger->append_to(5);
  start(false);
  auto s = stats();
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3, 4, 5}));
  EXPECT_EQ(s.cursor, 5);
  EXPECT_EQ(s.event_callback_errors, 2u) << "one in each of the two batches";
  EXPECT_EQ(s.events_delivered, 3u);
}

TEST_F(FeedWatcher, AnErrorAnswerToABatchCountsEveryEventOfIt) {
  use_batches = true;
  subs->error_batches = true;
  ledger->append_to(5);
  start(false);
  auto s = stats();
  EXPECT_EQ(s.cursor, 5);
  EXPECT_EQ(s.event_callback_errors, 5u);
  EXPECT_EQ(s.events_delivered, 0u);
  EXPECT_FALSE(*terminated);
}

TEST_F(FeedWatcher, InFrameEventsQueuedBehindAnAckGoOutAsOneBatch) {
  use_batches = true;
  subs->manual = true;
  cfg.replay_path.clear();
  start();
  ws->last().open();
  ws->last().message(hello("ephemeral", 0, false, "e"));
  run();
  // The ephemeral model's first delivery is its reset; events 1..3 queue
  // behind its acknowledgement.
  ASSERT_EQ(subs->resets().size(), 1u);
  for (int64_t seq = 1; seq <= 3; ++seq)
    ws->last().message(event_frame(seq));
  run();
  EXPECT_TRUE(subs->seqs().empty());
  release_ack();
  EXPECT_EQ(subs->seqs(), (ids{1, 2, 3}));
  EXPECT_EQ(subs->batch_sizes, (std::vector<std::size_t>{3}));
  release_ack();
  EXPECT_EQ(stats().events_delivered, 3u);
}

TEST_F(FeedWatcher, StopWhileABatchIsUnacknowledgedDoesNotWait) {
  use_batches = true;
  subs->manual = true;
  ledger->append_to(3);
  start(false);
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3}));
  auto s = stop();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->cursor, 0);
  EXPECT_TRUE(*terminated);
  release_ack();
}

TEST_F(FeedWatcher, ThrowingCallbacksAreCountedAndTheFeedGoesOn) {
  use_callbacks = true;
  auto seen = std::make_shared<ids>();
  auto resets = std::make_shared<int>(0);
  callbacks.on_event = [seen](const feed_event& ev) {
    seen->push_back(*ev.id);
    if (*ev.id == 2)
      throw std::runtime_error("boom");
  };
  callbacks.on_reset = [resets](const feed_reset&) {
    ++*resets;
    throw std::runtime_error("reset boom");
  };
  ledger->append_to(5);
  start(false);
  EXPECT_EQ(*seen, (ids{1, 2, 3, 4, 5}));
  auto s = stats();
  EXPECT_EQ(s.event_callback_errors, 1u);
  EXPECT_EQ(s.events_delivered, 4u);
  EXPECT_EQ(s.cursor, 5) << "the cursor moves past a failing event";
  // A gap: the reset callback throws too, and delivery goes on after it.
  ledger->append_to(10);
  ledger->floor = 8;
  advance_by(30s);
  EXPECT_EQ(*resets, 1);
  EXPECT_EQ(*seen, (ids{1, 2, 3, 4, 5, 9, 10}));
  s = stats();
  EXPECT_EQ(s.reset_callback_errors, 1u);
  EXPECT_EQ(s.event_callback_errors, 1u);
  EXPECT_EQ(s.resets, 1u);
  EXPECT_EQ(s.cursor, 10);
  EXPECT_FALSE(*terminated);
}

TEST_F(FeedWatcher, ThrowingResetCallbackIsCounted) {
  use_callbacks = true;
  callbacks.on_event = [](const feed_event&) {
  };
  callbacks.on_reset = [](const feed_reset&) {
    throw std::runtime_error("reset boom");
  };
  cfg.replay_path.clear();
  start();
  ws->last().open();
  ws->last().message(hello("ephemeral", 0, false, "e"));
  ws->last().message(event_frame(1));
  run();
  auto s = stats();
  EXPECT_EQ(s.reset_callback_errors, 1u);
  EXPECT_EQ(s.events_delivered, 1u);
  EXPECT_EQ(s.resets, 1u);
}

// -- stop
// -------------------------------------------------------------------------------

TEST_F(FeedWatcher, StopWhenIdleAnswersTheFinalStatsAndQuits) {
  ledger->append_to(2);
  start();
  ws->last().open();
  run();
  auto s = stop();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->cursor, 2);
  EXPECT_TRUE(*terminated);
  EXPECT_TRUE(ws->last().closed);
}

TEST_F(FeedWatcher, StopMidHandshakeCompletesAtOnce) {
  cfg.replay_path.clear();
  start();
  ASSERT_EQ(ws->sessions.size(), 1u);
  ASSERT_TRUE(stop());
  EXPECT_TRUE(*terminated);
  EXPECT_TRUE(ws->last().closed);
  EXPECT_EQ(elapsed(), 0ns);
  advance_by(60s);
  EXPECT_EQ(ws->sessions.size(), 1u);
}

TEST_F(FeedWatcher, StopDuringBackoffCompletesAtOnceAndNeverRedials) {
  cfg.replay_path.clear();
  cfg.reconnect_base_backoff = 5.0;
  start();
  ws->last().open();
  ws->last().peer_close();
  run();
  ASSERT_TRUE(stop());
  EXPECT_TRUE(*terminated);
  EXPECT_EQ(elapsed(), 0ns);
  advance_by(60s);
  EXPECT_EQ(ws->sessions.size(), 1u);
}

TEST_F(FeedWatcher, StopWhileADeliveryIsUnacknowledgedDoesNotWait) {
  subs->manual = true;
  ledger->append_to(3);
  sub_ = spawn_recording_subscriber(sys(), subs);
  client_options co;
  co.transport = spawn_ledger_transport(sys(), ledger);
  feed_watcher_options o;
  o.client = make_service_client(sys(), ccfg, co);
  o.subscriber = sub_;
  w = spawn_feed_watcher(sys(), cfg, o);
  watch_termination();
  run();
  EXPECT_EQ(subs->ids(), (ids{1}));
  ASSERT_TRUE(stop());
  EXPECT_TRUE(*terminated);
  release_ack();
  EXPECT_EQ(subs->ids(), (ids{1}));
}

TEST_F(FeedWatcher, ExitMessageStopsItAndClosesTheSession) {
  cfg.replay_path.clear();
  start();
  ws->last().open();
  run();
  caf::anon_send_exit(w, caf::exit_reason::user_shutdown);
  run();
  EXPECT_TRUE(*terminated);
  EXPECT_TRUE(ws->last().closed);
}

// -- spawn validation
// ------------------------------------------------------------

TEST_F(FeedWatcher, SpawnNamesTheMissingPort) {
  auto field = [&](feed_config c, feed_watcher_options o) -> std::string {
    try {
      spawn_feed_watcher(sys(), c, o);
    } catch (const config_error& e) {
      return e.field();
    }
    return "<spawned>";
  };
  feed_watcher_options o;
  o.subscriber = spawn_recording_subscriber(sys(), subs);
  EXPECT_EQ(field(cfg, o), "client");
  feed_config ws_only;
  ws_only.ws_path = "/ws/feed";
  EXPECT_EQ(field(ws_only, o), "connector");
  o.connector
    = std::make_shared<fake_ws_connector>(ws, [this] { return now(); });
  EXPECT_EQ(field(ws_only, o), "ws.origin");
  feed_watcher_options none;
  none.connector = o.connector;
  none.ws = feed_ws_endpoint::from(ccfg);
  EXPECT_EQ(field(ws_only, none), "subscriber");
  EXPECT_EQ(field(feed_config{}, o), "replay_path");
  auto both = o;
  both.ws = none.ws;
  both.batch_subscriber = spawn_recording_batch_subscriber(sys(), subs);
  EXPECT_EQ(field(ws_only, both), "batch_subscriber");
  auto zero = none;
  zero.batch_subscriber = both.batch_subscriber;
  zero.max_delivery_batch = 0;
  EXPECT_EQ(field(ws_only, zero), "max_delivery_batch");
}

// -- ledger incarnations
// --------------------------------------------------------

TEST_F(FeedWatcher, HubRestartWithANewLedgerEpochIsOneRewindThenTheNewLedger) {
  cfg.limit = 10;
  ledger->append_to(5);
  ledger->epoch = "e1";
  ledger->cursor_is_head = true;
  start();
  ws->last().open();
  ws->last().message(
    R"({"type":"hello","mode":"ledger","seq":0,"cursor":5,"resync":false,"epoch":"e1"})");
  run();
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3, 4, 5}));
  // The hub restarts with a fresh ledger of two events: the session drops,
  // the watcher reconnects and the new hello carries the new epoch.
  ledger->ids = {1, 2};
  ledger->epoch = "e2";
  ws->last().peer_close();
  advance_by(2s);
  ASSERT_EQ(ws->sessions.size(), 2u);
  ws->last().open();
  ws->last().message(
    R"({"type":"hello","mode":"ledger","seq":0,"cursor":2,"resync":false,"epoch":"e2"})");
  run();
  ASSERT_EQ(subs->resets().size(), 1u);
  auto& r = *subs->resets()[0];
  EXPECT_EQ(r.mode, feed_mode::ledger);
  EXPECT_EQ(r.cause, reset_cause::rewind);
  EXPECT_EQ(r.from_cursor, 5);
  EXPECT_EQ(r.lost_from, 5);
  EXPECT_EQ(r.lost_to, std::nullopt);
  EXPECT_EQ(r.old_epoch, "e1");
  EXPECT_EQ(r.new_epoch, "e2");
  // Order: 1..5 of the old ledger, the reset, then 1..2 of the new one.
  ASSERT_EQ(subs->got.size(), 8u);
  EXPECT_TRUE(subs->got[5].is_reset);
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3, 4, 5, 1, 2}));
  ledger->append_to(3);
  ws->last().message(wake(3));
  run();
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3, 4, 5, 1, 2, 3}));
  advance_by(61s); // later polls: no second reset
  auto s = stats();
  EXPECT_EQ(s.resets, 1u);
  EXPECT_EQ(s.resets_by_cause[static_cast<std::size_t>(reset_cause::rewind)],
            1u);
  EXPECT_EQ(s.cursor, 3);
  EXPECT_EQ(s.epoch, "e2");
}

TEST_F(FeedWatcher, PollOnlyWatcherSeesTheNewEpochOnAReplayPage) {
  cfg.limit = 10;
  cfg.poll_interval = 30.0;
  ledger->append_to(4);
  ledger->epoch = "e1";
  start(false);
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3, 4}));
  // Restart between two polls with a longer ledger: ids above the old
  // cursor exist but belong to another incarnation.
  ledger->ids.clear();
  ledger->append_to(6);
  ledger->epoch = "e2";
  advance_by(30s);
  ASSERT_EQ(subs->resets().size(), 1u);
  EXPECT_EQ(subs->resets()[0]->cause, reset_cause::rewind);
  EXPECT_EQ(subs->resets()[0]->from_cursor, 4);
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3, 4, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(ledger->afters(), (std::vector<int64_t>{0, 4, 0}))
    << "the page of the new ledger asked after 4 was dropped unread";
}

TEST_F(FeedWatcher, HeadBelowTheCursorWithoutEpochsIsARewindNotSilence) {
  // A hub without epochs restarts with a shorter ledger: before this the
  // watcher asked for ids after 6 forever and delivered nothing.
  cfg.limit = 10;
  ledger->append_to(6);
  ledger->cursor_is_head = true;
  start();
  ws->last().open();
  run();
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3, 4, 5, 6}));
  ledger->ids.clear();
  ledger->append_to(3);
  ws->last().message(wake(3)); // a wake from the new hub: head 3 < 6
  run();
  ASSERT_EQ(subs->resets().size(), 1u);
  EXPECT_EQ(subs->resets()[0]->cause, reset_cause::rewind);
  EXPECT_EQ(subs->resets()[0]->lost_from, 6);
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3, 4, 5, 6, 1, 2, 3}));
  auto s = stats();
  EXPECT_EQ(s.cursor, 3);
  EXPECT_EQ(s.resets, 1u);
}

TEST_F(FeedWatcher, AStaleLowWakeIsNoRewind) {
  cfg.limit = 10;
  ledger->append_to(6);
  ledger->cursor_is_head = true;
  start();
  ws->last().open();
  run();
  ws->last().message(wake(2)); // out of order: the hub's head is 6
  run();
  advance_by(61s);
  EXPECT_TRUE(subs->resets().empty());
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(stats().drain_errors, 0u);
}
