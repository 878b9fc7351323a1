// The watcher's hooks for a feed group (an owner of feeds through leases):
// the takeover reset of an ephemeral feed, the owner token on every
// delivery, the catchup resume fields, the fence gate and the progress
// reports. On CAF's deterministic test coordinator with the fakes of
// tests/support/feed_fakes.hpp; every time asserted is exact virtual time.

#include "actors/client/service_client.hpp"
#include "actors/feed/feed_watcher.hpp"
#include "config/config_error.hpp"

#include "tests/support/feed_fakes.hpp"
#include "tests/support/virtual_time_fixture.hpp"

#include <boost/json/parse.hpp>
#include <caf/actor_cast.hpp>
#include <caf/event_based_actor.hpp>

#include <gtest/gtest.h>

using namespace outbound;
using namespace outbound::testing;
using namespace std::chrono_literals;

namespace {

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

using ids = std::vector<int64_t>;

class FeedGroupHooks : public virtual_time_fixture {
protected:
  FeedGroupHooks() {
    ccfg.base_url = "http://127.0.0.1:8080";
    ccfg.token = "tok";
  }

  ~FeedGroupHooks() override {
    // The poll tick re-arms itself forever: stop the watcher.
    if (w)
      caf::anon_send_exit(w, caf::exit_reason::user_shutdown);
    run();
    // A manual subscriber's unanswered promises point back at the watcher:
    // watcher -> subscriber -> log -> promise -> watcher would outlive the
    // test (LeakSanitizer). Drop them.
    subs->held.clear();
    run();
  }

  /// A ws-only watcher (replay_path empty) or a ledger one (set
  /// cfg.replay_path before), delivering to a recording subscriber.
  void start() {
    feed_watcher_options o = opts;
    if (!cfg.replay_path.empty()) {
      client_options co;
      co.transport = spawn_ledger_transport(sys(), ledger);
      co.seed = 1;
      o.client = make_service_client(sys(), ccfg, co);
    }
    if (with_ws) {
      cfg.ws_path = "/ws/feed";
      o.connector
        = std::make_shared<fake_ws_connector>(ws, [this] { return now(); });
      o.ws = feed_ws_endpoint::from(ccfg);
    }
    sub_ = spawn_recording_subscriber(sys(), subs);
    o.subscriber = sub_;
    o.seed = 7;
    w = spawn_feed_watcher(sys(), cfg, o);
    run();
  }

  feed_stats stats() {
    return ask_stats(sys(), w, [this] { run(); });
  }

  void release_ack() {
    caf::anon_send(caf::actor_cast<caf::actor>(sub_), caf::ok_atom_v);
    run();
  }

  feed_config cfg;
  client_config ccfg;
  feed_watcher_options opts;
  bool with_ws = true;
  std::shared_ptr<fake_ledger> ledger = std::make_shared<fake_ledger>();
  std::shared_ptr<fake_ws_log> ws = std::make_shared<fake_ws_log>();
  std::shared_ptr<sub_log> subs = std::make_shared<sub_log>();
  feed_subscriber_actor sub_;
  feed_watcher_actor w;
};

} // namespace

// -- takeover
// ---------------------------------------------------------------------

TEST_F(FeedGroupHooks, ATakeoverOfAnEphemeralFeedBeginsWithATakeoverReset) {
  opts.takeover = true;
  start();
  for (int i = 0; i < 2; ++i) {
    ws->last().open();
    ws->last().message(hello("ephemeral", 10 * i + 4, false, "e1"));
    ws->last().message(event_frame(10 * i + 5));
    run();
    ws->last().peer_close();
    advance_by(2s);
  }
  ASSERT_EQ(subs->got.size(), 4u);
  // First: the takeover (lost from the feed's start up to the hub's seq),
  // then the events; later reconnects are plain reconnect resets.
  ASSERT_TRUE(subs->got[0].is_reset);
  EXPECT_EQ(subs->got[0].rs.cause, reset_cause::takeover);
  EXPECT_EQ(subs->got[0].rs.mode, feed_mode::ephemeral);
  EXPECT_EQ(subs->got[0].rs.lost_from, std::nullopt);
  EXPECT_EQ(subs->got[0].rs.lost_to, 4);
  EXPECT_EQ(subs->got[1].ev.seq, 5);
  ASSERT_TRUE(subs->got[2].is_reset);
  EXPECT_EQ(subs->got[2].rs.cause, reset_cause::reconnect);
  auto s = stats();
  EXPECT_EQ(s.resets, 2u);
  EXPECT_EQ(s.resets_by_cause[static_cast<std::size_t>(reset_cause::takeover)],
            1u);
  EXPECT_EQ(s.resets_by_cause[static_cast<std::size_t>(reset_cause::reconnect)],
            1u);
  EXPECT_STREQ(to_string(reset_cause::takeover), "takeover");
}

TEST_F(FeedGroupHooks, WithoutTakeoverTheFirstEphemeralResetIsAReconnect) {
  start();
  ws->last().open();
  ws->last().message(hello("ephemeral", 4, false, "e1"));
  run();
  ASSERT_EQ(subs->resets().size(), 1u);
  EXPECT_EQ(subs->resets()[0]->cause, reset_cause::reconnect);
}

TEST_F(FeedGroupHooks,
       ATakeoverInferredFromAFirstDataFrameCompletesTheConnect) {
  opts.takeover = true;
  start();
  ws->last().open();
  ws->last().message(event_frame(7));
  run();
  ASSERT_EQ(subs->got.size(), 2u);
  EXPECT_EQ(subs->got[0].rs.cause, reset_cause::takeover);
  EXPECT_EQ(subs->got[1].ev.seq, 7);
  EXPECT_TRUE(stats().connected);
}

TEST_F(FeedGroupHooks, ATakeoverFlagOnACatchupFeedIsNoReset) {
  opts.takeover = true;
  cfg.client_id = "cid-1";
  start();
  ws->last().open();
  ws->last().message(hello("catchup", 3, false, "e1"));
  ws->last().message(event_frame(4));
  run();
  EXPECT_TRUE(subs->resets().empty());
  EXPECT_EQ(subs->seqs(), (ids{4}));
}

// -- feed id and owner token
// ------------------------------------------------------

TEST_F(FeedGroupHooks, EveryEventAndResetCarriesTheFeedIdAndOwnerToken) {
  opts.feed_id = "orders";
  opts.owner_token = 4711;
  opts.takeover = true;
  start();
  ws->last().open();
  ws->last().message(hello("ephemeral", 1, false, "e1"));
  ws->last().message(event_frame(2));
  ws->last().message(event_frame(3));
  run();
  ASSERT_EQ(subs->got.size(), 3u);
  EXPECT_EQ(subs->got[0].rs.feed_id, "orders");
  EXPECT_EQ(subs->got[0].rs.owner_token, 4711u);
  for (std::size_t i = 1; i < 3; ++i) {
    EXPECT_EQ(subs->got[i].ev.feed_id, "orders") << i;
    EXPECT_EQ(subs->got[i].ev.owner_token, 4711u) << i;
  }
}

TEST_F(FeedGroupHooks, LedgerEventsInBatchesCarryTheOwnerTokenToo) {
  // The callbacks' helper takes batches: each event of a page carries it,
  // and so does the retention reset before them.
  cfg.replay_path = "/v1/events";
  cfg.limit = 3;
  with_ws = false;
  ledger->append_to(5);
  ledger->floor = 2;
  auto got = std::make_shared<std::vector<std::pair<std::string, uint64_t>>>();
  opts.callbacks.detached = false;
  opts.callbacks.on_event = [got](const feed_event& ev) {
    got->emplace_back(ev.feed_id, ev.owner_token);
  };
  opts.callbacks.on_reset = [got](const feed_reset& rs) {
    got->emplace_back("reset:" + rs.feed_id, rs.owner_token);
  };
  opts.feed_id = "billing";
  opts.owner_token = 9;
  feed_watcher_options o = opts;
  client_options co;
  co.transport = spawn_ledger_transport(sys(), ledger);
  o.client = make_service_client(sys(), ccfg, co);
  w = spawn_feed_watcher(sys(), cfg, o);
  run();
  ASSERT_EQ(got->size(), 4u); // the retention reset, then 3, 4, 5
  EXPECT_EQ((*got)[0], (std::pair<std::string, uint64_t>{"reset:billing", 9}));
  for (std::size_t i = 1; i < got->size(); ++i)
    EXPECT_EQ((*got)[i], (std::pair<std::string, uint64_t>{"billing", 9}));
}

TEST_F(FeedGroupHooks, WithoutAnOwnerTheTokenIsZeroAndTheIdEmpty) {
  start();
  ws->last().open();
  ws->last().message(hello("ephemeral", 1, false, "e1"));
  ws->last().message(event_frame(2));
  run();
  ASSERT_EQ(subs->got.size(), 2u);
  EXPECT_EQ(subs->got[1].ev.owner_token, 0u);
  EXPECT_TRUE(subs->got[1].ev.feed_id.empty());
}

// -- resume
// -----------------------------------------------------------------------

TEST_F(FeedGroupHooks, ACatchupFeedResumedElsewhereContinuesAfterLastSeq) {
  // A watcher in another process acknowledged up to seq 41 in epoch e1 with
  // client id grp-cid; this one takes over from that checkpoint.
  cfg.client_id = "grp-cid";
  cfg.resume_last_seq = 41;
  cfg.resume_epoch = "e1";
  start();
  EXPECT_EQ(stats().last_seq, 41);
  ws->last().open();
  run();
  auto sub = parse_obj(ws->last().sent.at(0));
  EXPECT_EQ(sub.at("client_id"), "grp-cid");
  EXPECT_EQ(sub.at("last_seq"), 41);
  EXPECT_EQ(sub.at("epoch"), "e1");
  ws->last().message(hello("catchup", 43, false, "e1"));
  for (int64_t s : {41, 42, 43}) // the hub replays from last_seq
    ws->last().message(event_frame(s));
  run();
  EXPECT_TRUE(subs->resets().empty()) << "no fresh resync";
  EXPECT_EQ(subs->seqs(), (ids{42, 43}));
  EXPECT_TRUE(stats().connected);
}

TEST_F(FeedGroupHooks, WithoutResumeFieldsTheSameHubAnswerIsAFreshStart) {
  cfg.client_id = "grp-cid";
  start();
  ws->last().open();
  run();
  auto sub = parse_obj(ws->last().sent.at(0));
  EXPECT_TRUE(sub.at("last_seq").is_null());
  EXPECT_TRUE(sub.at("epoch").is_null());
  ws->last().message(hello("catchup", 43, false, "e1"));
  for (int64_t s : {41, 42, 43})
    ws->last().message(event_frame(s));
  run();
  EXPECT_EQ(subs->seqs(), (ids{41, 42, 43}));
}

TEST_F(FeedGroupHooks, AResumedCatchupFeedInAnotherHubEpochIsOneEpochReset) {
  cfg.client_id = "grp-cid";
  cfg.resume_last_seq = 41;
  cfg.resume_epoch = "e1";
  start();
  ws->last().open();
  ws->last().message(hello("catchup", 2, false, "e2"));
  ws->last().message(event_frame(3));
  run();
  ASSERT_EQ(subs->resets().size(), 1u);
  auto& r = *subs->resets()[0];
  EXPECT_EQ(r.cause, reset_cause::epoch_changed);
  EXPECT_EQ(r.last_seq, 41);
  EXPECT_EQ(r.old_epoch, "e1");
  EXPECT_EQ(r.new_epoch, "e2");
  EXPECT_EQ(r.lost_from, 41);
  EXPECT_EQ(subs->seqs(), (ids{3}));
}

TEST_F(FeedGroupHooks, AResumedCatchupFeedTheHubEvictedIsOneResyncReset) {
  cfg.client_id = "grp-cid";
  cfg.resume_last_seq = 41;
  cfg.resume_epoch = "e1";
  start();
  ws->last().open();
  ws->last().message(hello("catchup", 90, true, "e1"));
  ws->last().message(event_frame(91));
  run();
  ASSERT_EQ(subs->resets().size(), 1u);
  EXPECT_EQ(subs->resets()[0]->cause, reset_cause::resync);
  EXPECT_EQ(subs->resets()[0]->lost_from, 41);
  EXPECT_EQ(subs->resets()[0]->lost_to, 90);
  EXPECT_EQ(subs->seqs(), (ids{91}));
}

TEST_F(FeedGroupHooks, ALedgerFeedResumesAfterTheConfiguredCursor) {
  cfg.replay_path = "/v1/events";
  cfg.limit = 10;
  cfg.cursor = 3;
  with_ws = false;
  ledger->append_to(5);
  start();
  ASSERT_FALSE(ledger->requests.empty());
  EXPECT_EQ(ledger->requests[0].after, 3);
  EXPECT_EQ(subs->ids(), (ids{4, 5}));
  EXPECT_TRUE(subs->resets().empty());
}

TEST_F(FeedGroupHooks, ResumeFieldsAreValidatedNamingTheField) {
  auto field = [](feed_config c) -> std::string {
    c.ws_path = "/ws/feed";
    try {
      c.validate();
    } catch (const config_error& e) {
      return e.field();
    }
    return "";
  };
  feed_config c;
  c.client_id = "cid";
  c.resume_last_seq = -1;
  EXPECT_EQ(field(c), "resume_last_seq");
  c.resume_last_seq.reset();
  c.resume_epoch = "e1";
  EXPECT_EQ(field(c), "resume_epoch");
  c.resume_last_seq = 5;
  EXPECT_EQ(field(c), "");
  c.client_id.clear();
  EXPECT_EQ(field(c), "client_id");
}

// -- fence gate
// -------------------------------------------------------------------

namespace {

/// A catchup session of a ws-only watcher, greeted at seq 0 in epoch e1.
void open_catchup(fake_ws_log& ws) {
  ws.last().open();
  ws.last().message(hello("catchup", 0, false, "e1"));
}

} // namespace

TEST_F(FeedGroupHooks, TheGateHoldsExactlyAtTheDeadlineAndALaterFenceReleases) {
  cfg.client_id = "cid";
  start();
  open_catchup(*ws);
  auto deadline = now() + 5s;
  caf::anon_send(w, fence_atom_v, deadline);
  run();
  ws->last().message(event_frame(1));
  run();
  advance_to(deadline - std::chrono::nanoseconds{1});
  ws->last().message(event_frame(2)); // one nanosecond before: delivered
  run();
  EXPECT_EQ(subs->seqs(), (ids{1, 2}));
  advance_to(deadline);
  ws->last().message(event_frame(3)); // at the deadline: held
  ws->last().message(event_frame(4));
  run();
  EXPECT_EQ(subs->seqs(), (ids{1, 2}));
  advance_by(2s);
  auto s = stats();
  EXPECT_TRUE(s.fence_holding);
  EXPECT_EQ(s.fence_held_deliveries, 1u);
  EXPECT_EQ(s.fence_held_time, 2s);
  EXPECT_EQ(s.fence_deadline, deadline);
  EXPECT_FALSE(ws->last().closed) << "the session is kept";
  EXPECT_EQ(s.last_seq, 4) << "frames still read and queued";
  // A later fence moves the deadline into the future: the queue goes out
  // at once, in order.
  caf::anon_send(w, fence_atom_v, now() + 5s);
  run();
  EXPECT_EQ(subs->seqs(), (ids{1, 2, 3, 4}));
  EXPECT_EQ(subs->got.back().at, deadline + 2s);
  s = stats();
  EXPECT_FALSE(s.fence_holding);
  EXPECT_EQ(s.fence_held_deliveries, 1u);
  EXPECT_EQ(s.fence_held_time, 2s);
  EXPECT_EQ(s.connects, 1u);
}

TEST_F(FeedGroupHooks, ADeadlineInThePastHoldsAtOnceAndAnotherPastOneKeepsIt) {
  cfg.client_id = "cid";
  start();
  open_catchup(*ws);
  caf::anon_send(w, fence_atom_v, now() - 1s);
  ws->last().message(event_frame(1));
  run();
  EXPECT_TRUE(subs->seqs().empty());
  advance_by(3s);
  caf::anon_send(w, fence_atom_v, now()); // "at the deadline" still holds
  run();
  EXPECT_TRUE(subs->seqs().empty());
  caf::anon_send(w, fence_atom_v, now() + 1s);
  run();
  EXPECT_EQ(subs->seqs(), (ids{1}));
  EXPECT_EQ(stats().fence_held_time, 3s);
}

TEST_F(FeedGroupHooks, ADeliveryStartedBeforeTheDeadlineIsNotRecalled) {
  cfg.client_id = "cid";
  subs->manual = true;
  start();
  open_catchup(*ws);
  caf::anon_send(w, fence_atom_v, now() + 1s);
  ws->last().message(event_frame(1));
  ws->last().message(event_frame(2));
  run();
  EXPECT_EQ(subs->seqs(), (ids{1})); // dispatched, its ack held
  advance_by(2s);
  release_ack(); // acknowledged after the deadline: counted, nothing new
  EXPECT_EQ(subs->seqs(), (ids{1}));
  auto s = stats();
  EXPECT_EQ(s.events_delivered, 1u);
  EXPECT_TRUE(s.fence_holding);
}

TEST_F(FeedGroupHooks, AHeldLedgerWatcherKeepsItsPageAndGoesOnAfterRelease) {
  cfg.replay_path = "/v1/events";
  cfg.limit = 2;
  with_ws = false;
  ledger->append_to(5);
  subs->manual = true;
  start();
  EXPECT_EQ(subs->ids(), (ids{1}));
  caf::anon_send(w, fence_atom_v, now()); // hold
  run();
  release_ack();
  advance_by(60s); // poll ticks: the drain waits for the page in delivery
  EXPECT_EQ(subs->ids(), (ids{1}));
  EXPECT_EQ(stats().cursor, 1);
  subs->manual = false;
  caf::anon_send(w, fence_atom_v, now() + 10s);
  run();
  release_ack();
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3, 4, 5}));
  EXPECT_EQ(stats().cursor, 5);
}

TEST_F(FeedGroupHooks, WithoutAFenceThereIsNoGate) {
  cfg.client_id = "cid";
  ws->answers_pings = true;
  start();
  open_catchup(*ws);
  advance_by(1h);
  ws->last().message(event_frame(1));
  run();
  EXPECT_EQ(subs->seqs(), (ids{1}));
  auto s = stats();
  EXPECT_EQ(s.fence_deadline, std::nullopt);
  EXPECT_EQ(s.fence_held_deliveries, 0u);
}

// -- progress reports
// -------------------------------------------------------------

namespace {

/// What a progress_to receives, in order, with virtual times; "stop" marks
/// the stop's answer when the same actor asked for it.
struct progress_log {
  struct entry {
    feed_progress p;
    vtime at;
    bool stop_answer = false;
  };
  std::vector<entry> got;

  std::vector<std::optional<int64_t>> cursors() const {
    std::vector<std::optional<int64_t>> r;
    for (auto& e : got)
      if (!e.stop_answer)
        r.push_back(e.p.cursor);
    return r;
  }
};

/// A progress_to that records reports and, sent `(stop_atom, watcher)`,
/// asks that watcher to stop and records the answer in the same log.
caf::actor spawn_progress_sink(caf::actor_system& sys,
                               std::shared_ptr<progress_log> log) {
  return sys.spawn([log](caf::event_based_actor* self) -> caf::behavior {
    return {
      [self, log](const feed_progress& p) {
        log->got.push_back({p, self->clock().now(), false});
      },
      [self, log](stop_atom, const caf::actor& w) {
        self->request(w, caf::infinite, stop_atom_v)
          .then([self, log](const feed_stats&) {
            progress_log::entry e;
            e.at = self->clock().now();
            e.stop_answer = true;
            log->got.push_back(std::move(e));
          });
      },
      // The same with a draining stop.
      [self, log](leave_atom, const caf::actor& w) {
        self->request(w, caf::infinite, leave_atom_v)
          .then([self, log](const feed_stats&) {
            progress_log::entry e;
            e.at = self->clock().now();
            e.stop_answer = true;
            log->got.push_back(std::move(e));
          });
      },
    };
  });
}

} // namespace

TEST_F(FeedGroupHooks,
       ProgressComesOnlyAfterAcksAtMostOncePerIntervalPlusAFinal) {
  cfg.replay_path = "/v1/events";
  cfg.limit = 10;
  with_ws = false;
  ledger->append_to(4);
  subs->manual = true;
  auto plog = std::make_shared<progress_log>();
  auto sink = spawn_progress_sink(sys(), plog);
  opts.progress_to = caf::actor_cast<feed_progress_actor>(sink);
  opts.progress_interval = 1.0;
  opts.feed_id = "orders";
  opts.owner_token = 12;
  start();
  auto t0 = now();
  EXPECT_EQ(subs->ids(), (ids{1}));
  EXPECT_TRUE(plog->got.empty()) << "event 1 is not acknowledged yet";
  release_ack(); // 1 acked at t0: reported at once
  ASSERT_EQ(plog->got.size(), 1u);
  EXPECT_EQ(plog->got[0].p.cursor, 1);
  EXPECT_EQ(plog->got[0].at, t0);
  EXPECT_EQ(plog->got[0].p.feed_id, "orders");
  EXPECT_EQ(plog->got[0].p.owner_token, 12u);
  EXPECT_EQ(plog->got[0].p.mode, feed_mode::ledger);
  EXPECT_FALSE(plog->got[0].p.final);
  release_ack(); // 2 acked at t0: within the interval, held back
  advance_by(200ms);
  release_ack(); // 3 acked at t0 + 0.2 s
  EXPECT_EQ(plog->got.size(), 1u);
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3, 4})); // 4 in flight, unacknowledged
  advance_to(t0 + 1s);
  ASSERT_EQ(plog->got.size(), 2u);
  EXPECT_EQ(plog->got[1].p.cursor, 3) << "only the acknowledged position";
  EXPECT_EQ(plog->got[1].at, t0 + 1s);
  advance_by(10s); // nothing moved: no report
  EXPECT_EQ(plog->got.size(), 2u);
  // The stop: one final report, before the stop's answer, still without 4.
  caf::anon_send(sink, stop_atom_v, caf::actor_cast<caf::actor>(w));
  run();
  ASSERT_EQ(plog->got.size(), 4u);
  EXPECT_TRUE(plog->got[2].p.final);
  EXPECT_EQ(plog->got[2].p.cursor, 3);
  EXPECT_TRUE(plog->got[3].stop_answer);
  w = nullptr;
}

TEST_F(FeedGroupHooks, ADrainingStopWaitsForTheDeliveryInFlightAndReportsIt) {
  // A graceful handoff: the final report must include the delivery the
  // subscriber was handed, or the next owner repeats it.
  cfg.replay_path = "/v1/events";
  cfg.limit = 10;
  with_ws = false;
  ledger->append_to(4);
  subs->manual = true;
  auto plog = std::make_shared<progress_log>();
  auto sink = spawn_progress_sink(sys(), plog);
  opts.progress_to = caf::actor_cast<feed_progress_actor>(sink);
  opts.progress_interval = 0;
  start();
  release_ack();
  release_ack(); // 1 and 2 acknowledged, 3 in flight
  ASSERT_EQ(subs->ids(), (ids{1, 2, 3}));
  ASSERT_EQ(plog->cursors().back(), 2);
  auto reports = plog->got.size();
  caf::anon_send(sink, leave_atom_v, caf::actor_cast<caf::actor>(w));
  run();
  advance_by(5s); // polls and timers: nothing new starts, nothing answers
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3}));
  EXPECT_EQ(plog->got.size(), reports) << "waiting for 3's answer";
  release_ack(); // 3 acknowledged: the final report, then the answer
  ASSERT_EQ(plog->got.size(), reports + 2);
  EXPECT_TRUE(plog->got[reports].p.final);
  EXPECT_EQ(plog->got[reports].p.cursor, 3);
  EXPECT_TRUE(plog->got[reports + 1].stop_answer);
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3})) << "4 was never started";
  w = nullptr;
}

TEST_F(FeedGroupHooks, ADrainingStopFetchesNoFurtherPage) {
  // The draining stop ends once the delivery in flight is answered:
  // answering the last event of a page must not ask the hub for the next
  // page (a handoff of thousands of feeds would send as many replay calls
  // whose answers are dropped), nor may a poll or a redrain.
  cfg.replay_path = "/v1/events";
  cfg.limit = 2;
  with_ws = false;
  ledger->append_to(6);
  subs->manual = true;
  auto plog = std::make_shared<progress_log>();
  auto sink = spawn_progress_sink(sys(), plog);
  opts.progress_to = caf::actor_cast<feed_progress_actor>(sink);
  opts.progress_interval = 0;
  opts.prefetch = false;
  start();
  release_ack(); // 1 acknowledged, 2 (the page's last) in flight
  ASSERT_EQ(subs->ids(), (ids{1, 2}));
  auto asked = ledger->requests.size();
  caf::anon_send(sink, leave_atom_v, caf::actor_cast<caf::actor>(w));
  run();
  release_ack(); // 2 acknowledged: the page is done, the watcher stops
  advance_by(5s);
  EXPECT_EQ(ledger->requests.size(), asked) << "no replay call after it";
  ASSERT_GE(plog->got.size(), 2u);
  EXPECT_TRUE(plog->got[plog->got.size() - 2].p.final);
  EXPECT_EQ(plog->got[plog->got.size() - 2].p.cursor, 2);
  EXPECT_TRUE(plog->got.back().stop_answer);
  EXPECT_EQ(subs->ids(), (ids{1, 2}));
  w = nullptr;
}

TEST_F(FeedGroupHooks, ADrainingStopOpensNoNewSession) {
  // The session breaks while the drain waits for its answer: a redial
  // would subscribe again with the feed's client id just as the next owner
  // does, for a watcher that is about to stop.
  cfg.client_id = "grp-cid";
  subs->manual = true;
  auto plog = std::make_shared<progress_log>();
  auto sink = spawn_progress_sink(sys(), plog);
  opts.progress_to = caf::actor_cast<feed_progress_actor>(sink);
  opts.progress_interval = 0;
  start();
  ws->last().open();
  ws->last().message(hello("catchup", 3, false, "e1"));
  ws->last().message(event_frame(4));
  ws->last().message(event_frame(5));
  run();
  ASSERT_EQ(subs->seqs(), (ids{4})) << "4 in flight";
  caf::anon_send(sink, leave_atom_v, caf::actor_cast<caf::actor>(w));
  run();
  ws->last().peer_close();
  run();
  advance_by(30s); // every backoff
  EXPECT_EQ(ws->sessions.size(), 1u) << "no redial";
  release_ack(); // 4 acknowledged: the final report, then the answer
  ASSERT_GE(plog->got.size(), 2u);
  EXPECT_TRUE(plog->got[plog->got.size() - 2].p.final);
  EXPECT_EQ(plog->got[plog->got.size() - 2].p.last_seq, 4);
  EXPECT_TRUE(plog->got.back().stop_answer);
  EXPECT_EQ(subs->seqs(), (ids{4}));
  w = nullptr;
}

TEST_F(FeedGroupHooks, ADrainingStopWithNothingInFlightStopsAtOnce) {
  cfg.replay_path = "/v1/events";
  with_ws = false;
  ledger->append_to(2);
  auto plog = std::make_shared<progress_log>();
  auto sink = spawn_progress_sink(sys(), plog);
  opts.progress_to = caf::actor_cast<feed_progress_actor>(sink);
  opts.progress_interval = 0;
  start();
  ASSERT_EQ(subs->ids(), (ids{1, 2}));
  caf::anon_send(sink, leave_atom_v, caf::actor_cast<caf::actor>(w));
  run();
  ASSERT_GE(plog->got.size(), 2u);
  EXPECT_TRUE(plog->got[plog->got.size() - 2].p.final);
  EXPECT_EQ(plog->got[plog->got.size() - 2].p.cursor, 2);
  EXPECT_TRUE(plog->got.back().stop_answer);
  w = nullptr;
}

TEST_F(FeedGroupHooks, AStopDuringADrainStopsAtOnceAndAnswersBoth) {
  cfg.replay_path = "/v1/events";
  with_ws = false;
  ledger->append_to(3);
  subs->manual = true;
  auto plog = std::make_shared<progress_log>();
  auto sink = spawn_progress_sink(sys(), plog);
  opts.progress_to = caf::actor_cast<feed_progress_actor>(sink);
  opts.progress_interval = 0;
  start();
  release_ack(); // 1 acknowledged, 2 in flight
  caf::anon_send(sink, leave_atom_v, caf::actor_cast<caf::actor>(w));
  run();
  auto reports = plog->got.size();
  caf::anon_send(sink, stop_atom_v, caf::actor_cast<caf::actor>(w));
  run();
  ASSERT_EQ(plog->got.size(), reports + 3);
  EXPECT_TRUE(plog->got[reports].p.final);
  EXPECT_EQ(plog->got[reports].p.cursor, 1) << "2 was never answered";
  EXPECT_TRUE(plog->got[reports + 1].stop_answer);
  EXPECT_TRUE(plog->got[reports + 2].stop_answer);
  w = nullptr;
}

TEST_F(FeedGroupHooks, CatchupProgressCarriesTheAckedSeqEpochAndClientId) {
  cfg.client_id = "grp-cid";
  opts.progress_interval = 0;
  auto plog = std::make_shared<progress_log>();
  auto sink = spawn_progress_sink(sys(), plog);
  opts.progress_to = caf::actor_cast<feed_progress_actor>(sink);
  subs->manual = true;
  start();
  ws->last().open();
  ws->last().message(hello("catchup", 10, true, "e1")); // resync reset
  ws->last().message(event_frame(11));
  ws->last().message(event_frame(12));
  run();
  EXPECT_TRUE(plog->got.empty());
  release_ack(); // the reset: delivery continues after seq 10
  ASSERT_EQ(plog->got.size(), 1u);
  EXPECT_EQ(plog->got[0].p.mode, feed_mode::catchup);
  EXPECT_EQ(plog->got[0].p.last_seq, 10);
  EXPECT_EQ(plog->got[0].p.epoch, "e1");
  EXPECT_EQ(plog->got[0].p.client_id, "grp-cid");
  EXPECT_EQ(plog->got[0].p.cursor, std::nullopt);
  release_ack();
  ASSERT_EQ(plog->got.size(), 2u);
  EXPECT_EQ(plog->got[1].p.last_seq, 11) << "12 is still unacknowledged";
  EXPECT_EQ(stats().last_seq, 12) << "received is not acknowledged";
}

TEST_F(FeedGroupHooks, AnExitMessageSendsTheFinalReportToo) {
  cfg.client_id = "grp-cid";
  cfg.resume_last_seq = 41;
  cfg.resume_epoch = "e1";
  auto plog = std::make_shared<progress_log>();
  auto sink = spawn_progress_sink(sys(), plog);
  opts.progress_to = caf::actor_cast<feed_progress_actor>(sink);
  start();
  caf::anon_send_exit(w, caf::exit_reason::user_shutdown);
  run();
  ASSERT_EQ(plog->got.size(), 1u);
  EXPECT_TRUE(plog->got[0].p.final);
  EXPECT_EQ(plog->got[0].p.mode, feed_mode::catchup);
  EXPECT_EQ(plog->got[0].p.last_seq, 41) << "the resumed checkpoint";
  EXPECT_EQ(plog->got[0].p.epoch, "e1");
  w = nullptr;
}

TEST_F(FeedGroupHooks, ABadProgressIntervalIsRefusedAtSpawn) {
  cfg.client_id = "cid";
  for (double bad : {-1.0, 1e10}) {
    opts.progress_interval = bad;
    try {
      start();
      FAIL() << "spawned with " << bad;
    } catch (const config_error& e) {
      EXPECT_EQ(e.field(), "progress_interval");
    }
  }
}

TEST_F(FeedGroupHooks, ARewoundLedgerIsReportedOnlyOnceItsResetIsAcked) {
  cfg.replay_path = "/v1/events";
  cfg.limit = 10;
  cfg.poll_interval = 30.0;
  with_ws = false;
  ledger->append_to(4);
  ledger->epoch = "e1";
  subs->manual = true;
  auto plog = std::make_shared<progress_log>();
  auto sink = spawn_progress_sink(sys(), plog);
  opts.progress_to = caf::actor_cast<feed_progress_actor>(sink);
  opts.progress_interval = 0;
  start();
  for (int i = 0; i < 4; ++i)
    release_ack();
  EXPECT_EQ(plog->cursors(), (std::vector<std::optional<int64_t>>{1, 2, 3, 4}));
  // A new ledger incarnation: the cursor goes back to its start, but the
  // application learns it only with the rewind reset.
  ledger->ids = {1, 2};
  ledger->epoch = "e2";
  advance_by(30s);
  ASSERT_EQ(subs->resets().size(), 1u);
  EXPECT_EQ(subs->resets()[0]->cause, reset_cause::rewind);
  EXPECT_EQ(plog->got.size(), 4u) << "no report while the reset is unacked";
  release_ack();
  ASSERT_EQ(plog->got.size(), 5u);
  EXPECT_EQ(plog->got[4].p.cursor, 0);
  release_ack();
  release_ack();
  EXPECT_EQ(plog->cursors(),
            (std::vector<std::optional<int64_t>>{1, 2, 3, 4, 0, 1, 2}));
}

TEST_F(FeedGroupHooks, LedgerProgressCarriesTheEpochOfItsCursor) {
  cfg.replay_path = "/v1/events";
  cfg.limit = 10;
  cfg.poll_interval = 30.0;
  with_ws = false;
  ledger->append_to(2);
  ledger->epoch = "e1";
  auto plog = std::make_shared<progress_log>();
  auto sink = spawn_progress_sink(sys(), plog);
  opts.progress_to = caf::actor_cast<feed_progress_actor>(sink);
  opts.progress_interval = 0;
  start();
  ASSERT_EQ(plog->got.size(), 2u);
  EXPECT_EQ(plog->got[1].p.cursor, 2);
  EXPECT_EQ(plog->got[1].p.ledger_epoch, std::optional<std::string>{"e1"});
  // A new incarnation: the position after the rewind is the new epoch's.
  ledger->ids = {1};
  ledger->epoch = "e2";
  advance_by(30s);
  ASSERT_FALSE(plog->got.empty());
  EXPECT_EQ(plog->got.back().p.cursor, 1);
  EXPECT_EQ(plog->got.back().p.ledger_epoch, std::optional<std::string>{"e2"});
}

TEST_F(FeedGroupHooks, ALedgerResumedInAnotherEpochRewindsInsteadOfSkipping) {
  // The checkpoint says cursor 3 in epoch e1; the hub's ledger was
  // replaced since (epoch e2) and has grown past 3. Following the cursor
  // would skip ids 1..3 of the new ledger silently: the watcher rewinds
  // with its reset and delivers the new ledger from its start.
  cfg.replay_path = "/v1/events";
  cfg.limit = 10;
  cfg.cursor = 3;
  cfg.resume_ledger_epoch = "e1";
  with_ws = false;
  ledger->append_to(5);
  ledger->epoch = "e2";
  start();
  ASSERT_EQ(subs->resets().size(), 1u);
  EXPECT_EQ(subs->resets()[0]->cause, reset_cause::rewind);
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3, 4, 5}));
}

TEST_F(FeedGroupHooks, ALedgerResumedInTheSameEpochJustContinues) {
  cfg.replay_path = "/v1/events";
  cfg.limit = 10;
  cfg.cursor = 3;
  cfg.resume_ledger_epoch = "e1";
  with_ws = false;
  ledger->append_to(5);
  ledger->epoch = "e1";
  start();
  EXPECT_TRUE(subs->resets().empty());
  EXPECT_EQ(subs->ids(), (ids{4, 5}));
}

TEST_F(FeedGroupHooks, AResumeLedgerEpochNeedsAReplayPath) {
  feed_config c;
  c.ws_path = "/ws/feed";
  c.resume_ledger_epoch = "e1";
  try {
    c.validate();
    FAIL() << "accepted";
  } catch (const config_error& e) {
    EXPECT_EQ(e.field(), "resume_ledger_epoch");
  }
  c.replay_path = "/v1/events";
  EXPECT_NO_THROW(c.validate());
}

TEST_F(FeedGroupHooks, AnInitialFenceDeadlineGatesFromTheFirstDelivery) {
  // A feed group spawns its watcher with the fence deadline in force: a
  // deadline already past holds the very first delivery, before any fence
  // message arrives.
  cfg.client_id = "cid";
  opts.fence_deadline = now() - 1s;
  start();
  open_catchup(*ws);
  ws->last().message(event_frame(1));
  run();
  EXPECT_TRUE(subs->seqs().empty());
  EXPECT_TRUE(stats().fence_holding);
  caf::anon_send(w, fence_atom_v, now() + 5s);
  run();
  EXPECT_EQ(subs->seqs(), (ids{1}));
}
