// No silent stalls in a feed watcher: a replay page the watcher cannot read
// (a body that does not parse or nests too deep, a body over the response
// cap, events that can be neither delivered nor passed) is narrowed to the
// one event that causes it, which is surfaced in order as an
// `undeliverable` reset -- the poison-pill / dead-letter practice of Kafka
// consumers -- and the feed moves on. Wakes are coalesced: a flood of wakes
// announcing a cursor that replay never reaches costs the re-drain backoff
// of hyperdjango's ChangeFeedWatcher, not one replay call per wake.
// Pure-state tests with a scripted ledger, then actor tests on CAF's deterministic coordinator.

#include "actors/client/service_client.hpp"
#include "actors/feed/feed_frames.hpp"
#include "actors/feed/feed_watcher.hpp"
#include "actors/feed/ledger_drain.hpp"

#include "feed_fakes.hpp"
#include "virtual_time_fixture.hpp"

#include <boost/json/parse.hpp>
#include <caf/actor_cast.hpp>
#include <caf/event_based_actor.hpp>

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

using namespace outbound;
using namespace outbound::testing;
using namespace std::chrono_literals;
using std::chrono::nanoseconds;

namespace {

using ids = std::vector<int64_t>;

// -- pure state: a scripted ledger with poison events ------------------------------

struct script_result {
  /// "e<id>" per delivered event, "u<id>" per undeliverable reset.
  std::vector<std::string> log;
  int requests = 0;
  drain_next last;
  std::vector<page_plan> resets;
};

/// Runs one drain of `d` against a ledger of `ledger_ids` in which the
/// `poison` ids cannot be read (any page holding one is unreadable for
/// `why`); `broken` makes every page unreadable.
script_result run_drain(ledger_drain& d, const ids& ledger_ids,
                        const std::set<int64_t>& poison,
                        drain_error_reason why = drain_error_reason::unparseable,
                        bool broken = false, int max_requests = 1000) {
  script_result r;
  auto act = d.request(drain_trigger::poll);
  if (act != drain_action::fetch)
    return r;
  for (;;) {
    if (++r.requests > max_requests)
      break;
    auto after = d.fetch_after();
    auto limit = d.fetch_limit();
    page_summary p;
    p.is_object = true;
    bool bad = broken;
    for (auto id : ledger_ids) {
      if (id <= after)
        continue;
      if (static_cast<int>(p.ids.size()) >= limit)
        break;
      p.ids.push_back(id);
      bad = bad || poison.count(id) > 0;
    }
    p.cursor = p.ids.empty() ? after : *p.ids.back();
    drain_next next;
    if (bad) {
      next = d.on_unreadable(why, "cannot read it");
    } else {
      auto plan = d.on_page(p);
      if (plan.reset && plan.cause == reset_cause::undeliverable) {
        r.log.push_back("u" + std::to_string(*plan.event_id));
        r.resets.push_back(plan);
      }
      for (auto i : plan.deliver) {
        d.on_event_delivered(p.ids[i]);
        r.log.push_back("e" + std::to_string(*p.ids[i]));
      }
      next = d.on_page_done();
    }
    r.last = next;
    if (next.what != drain_next::kind::fetch)
      break;
  }
  return r;
}

std::vector<std::string> log_of(std::initializer_list<const char*> xs) {
  return {xs.begin(), xs.end()};
}

} // namespace

TEST(LedgerPoison, AnUnreadableEventIsIsolatedByHalvingAndSurfacedInOrder) {
  ledger_drain d{0, 8, 30s};
  auto r = run_drain(d, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {6});
  EXPECT_EQ(r.log, log_of({"e1", "e2", "e3", "e4", "e5", "u6", "e7", "e8",
                           "e9", "e10"}));
  ASSERT_EQ(r.resets.size(), 1u);
  auto& rs = r.resets[0];
  EXPECT_EQ(rs.reset_from, 5); // lost: (5, 6], the one event
  EXPECT_EQ(rs.reset_to, 6);
  EXPECT_EQ(rs.event_id, 6);
  EXPECT_EQ(rs.reason, "unparseable: cannot read it");
  EXPECT_EQ(d.cursor(), 10);
  EXPECT_EQ(r.last.what, drain_next::kind::idle);
  EXPECT_EQ(d.undeliverable(), 1u);
  // 0..8 bad, 0..4 ok, 4..8 bad, 4..6 bad, 4..5 ok, 5..6 bad, probe 6 ok,
  // then 6..10 at the full limit again.
  EXPECT_EQ(r.requests, 8);
  EXPECT_EQ(d.drain_errors(drain_error_reason::unparseable), 4u);
  EXPECT_EQ(d.drain_errors(), 4u);
  EXPECT_EQ(d.fetch_limit(), 8);
  EXPECT_FALSE(d.isolating());
}

TEST(LedgerPoison, ThePoisonIdIsFoundWithoutReadingItWhenIdsAreSparse) {
  // With prefixes, a watcher sees ids with holes: the probe must not take
  // cursor + 1 for the bad event.
  ledger_drain d{0, 4, 30s};
  auto r = run_drain(d, {3, 10, 17, 40, 41}, {17},
                     drain_error_reason::over_cap);
  EXPECT_EQ(r.log, log_of({"e3", "e10", "u17", "e40", "e41"}));
  ASSERT_EQ(r.resets.size(), 1u);
  EXPECT_EQ(r.resets[0].reset_from, 10);
  EXPECT_EQ(r.resets[0].reset_to, 17);
  EXPECT_EQ(r.resets[0].reason, "over_cap: cannot read it");
  EXPECT_EQ(d.cursor(), 41);
  EXPECT_GE(d.drain_errors(drain_error_reason::over_cap), 3u);
}

TEST(LedgerPoison, AdjacentPoisonEventsAreOneResetOverExactlyThem) {
  ledger_drain d{0, 4, 30s};
  auto r = run_drain(d, {1, 2, 3, 4, 5, 6}, {3, 4});
  EXPECT_EQ(r.log, log_of({"e1", "e2", "u4", "e5", "e6"}));
  ASSERT_EQ(r.resets.size(), 1u);
  EXPECT_EQ(r.resets[0].reset_from, 2); // (2, 4]: both, nothing readable
  EXPECT_EQ(r.resets[0].reset_to, 4);
  EXPECT_EQ(d.cursor(), 6);
}

TEST(LedgerPoison, APoisonEventFollowedByAReadableOneAndAnotherPoison) {
  ledger_drain d{0, 8, 30s};
  auto r = run_drain(d, {1, 2, 3, 4, 5, 6, 7}, {2, 4});
  EXPECT_EQ(r.log, log_of({"e1", "u2", "e3", "u4", "e5", "e6", "e7"}));
}

TEST(LedgerPoison, FarApartIdsAreFoundByGallopAndTheRangeSaysWhatWasLost) {
  // Past the linear probe, the search gallops and bisects: it still names
  // an unreadable event, and the reset's range covers everything skipped.
  ledger_drain d{0, 2, 30s};
  auto r = run_drain(d, {1, 1000, 5000}, {1000});
  EXPECT_EQ(r.log, log_of({"e1", "u1000", "e5000"}));
  ASSERT_EQ(r.resets.size(), 1u);
  EXPECT_EQ(r.resets[0].reset_from, 1);
  EXPECT_EQ(r.resets[0].reset_to, 1000);
  EXPECT_LT(r.requests, 70);
}

TEST(LedgerPoison, APoisonEventAtTheHeadIsSurfacedToo) {
  ledger_drain d{0, 4, 30s};
  auto r = run_drain(d, {1, 2, 3}, {3});
  EXPECT_EQ(r.log, log_of({"e1", "e2", "u3"}));
  EXPECT_EQ(d.cursor(), 3);
}

TEST(LedgerPoison, AnEndpointUnreadableEverywhereSkipsNothingAndBacksOff) {
  ledger_drain d{5, 8, 30s};
  auto r = run_drain(d, {6, 7, 8}, {}, drain_error_reason::unparseable,
                     /*broken=*/true);
  EXPECT_TRUE(r.log.empty());
  EXPECT_EQ(d.cursor(), 5);
  EXPECT_EQ(r.last.what, drain_next::kind::redrain);
  EXPECT_EQ(r.last.delay, ledger_drain::redrain_floor);
  // 8, 4, 2, 1, then the linear probe and the gallop: bounded.
  EXPECT_EQ(r.requests, 4 + 1 + ledger_drain::linear_probe_steps
                          + ledger_drain::max_probe_steps - 1);
  EXPECT_EQ(d.drain_errors(), static_cast<uint64_t>(r.requests));
  EXPECT_FALSE(d.isolating());
  EXPECT_EQ(d.fetch_limit(), 8);
  // The next attempt waits longer.
  auto r2 = run_drain(d, {6, 7, 8}, {}, drain_error_reason::unparseable, true);
  EXPECT_EQ(r2.last.delay, 2 * ledger_drain::redrain_floor);
}

TEST(LedgerPoison, EventsWithoutAnIdThatCannotBePassedAreIsolatedToo) {
  // A full page of id-less events whose cursor does not move could neither
  // be delivered nor passed: before, it stalled the feed at drain_errors.
  ledger_drain d{0, 2, 30s};
  EXPECT_EQ(d.request(drain_trigger::poll), drain_action::fetch);
  auto plan = d.on_page([] {
    page_summary p;
    p.is_object = true;
    p.ids = {std::nullopt, std::nullopt};
    p.cursor = 0;
    return p;
  }());
  EXPECT_EQ(plan.verdict, page_verdict::bad_page);
  auto next = d.on_page_done();
  EXPECT_EQ(next.what, drain_next::kind::fetch);
  EXPECT_EQ(d.fetch_limit(), 1);
  EXPECT_EQ(d.drain_errors(drain_error_reason::bad_event), 1u);
}

// -- pure state: wake coalescing ---------------------------------------------------------

TEST(LedgerWakes, AFloodOfWakesForAnUnreachableTargetStartsNoDrain) {
  ledger_drain d{5, 10, 30s};
  EXPECT_EQ(d.on_wake(100), drain_action::fetch);
  auto plan = d.on_page([] {
    page_summary p;
    p.is_object = true;
    p.cursor = 5;
    return p;
  }());
  auto next = d.on_page_done();
  ASSERT_EQ(next.what, drain_next::kind::redrain);
  EXPECT_EQ(next.delay, ledger_drain::redrain_floor);
  int fetches = 0;
  for (int i = 0; i < 10000; ++i)
    if (d.on_wake(100) == drain_action::fetch)
      ++fetches;
  EXPECT_EQ(fetches, 0);
  EXPECT_EQ(d.wakes_coalesced(), 10000u);
  // The armed timer runs the next drain.
  EXPECT_EQ(d.on_redrain_timer(next.redrain_id), drain_action::fetch);
}

TEST(LedgerWakes, WakesDuringADrainLeaveOnePendingDrain) {
  ledger_drain d{0, 10, 30s};
  EXPECT_EQ(d.request(drain_trigger::start), drain_action::fetch);
  for (int i = 0; i < 1000; ++i)
    EXPECT_EQ(d.on_wake(std::nullopt), drain_action::queued);
  EXPECT_EQ(d.wakes_coalesced(), 999u);
  d.on_page([] {
    page_summary p;
    p.is_object = true;
    p.cursor = 0;
    return p;
  }());
  EXPECT_EQ(d.on_page_done().what, drain_next::kind::fetch); // the pending one
  d.on_page([] {
    page_summary p;
    p.is_object = true;
    p.cursor = 0;
    return p;
  }());
  EXPECT_EQ(d.on_page_done().what, drain_next::kind::idle);
}

TEST(LedgerWakes, AWakeThatAnnouncesTheCursorReachedReadsNothing) {
  ledger_drain d{7, 10, 30s};
  EXPECT_EQ(d.on_wake(7), drain_action::none);
  EXPECT_EQ(d.on_wake(8), drain_action::fetch);
}

TEST(LedgerWakes, ARaisedTargetWhileBackingOffRearmsAtTheFloorNotAtOnce) {
  ledger_drain d{5, 10, 30s};
  d.on_wake(100);
  auto empty = [] {
    page_summary p;
    p.is_object = true;
    p.cursor = 5;
    return p;
  };
  d.on_page(empty());
  auto n = d.on_page_done();
  // Let the backoff grow: 0.05, 0.1, 0.2 s.
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(d.on_redrain_timer(n.redrain_id), drain_action::fetch);
    d.on_page(empty());
    n = d.on_page_done();
  }
  EXPECT_EQ(n.delay, 4 * ledger_drain::redrain_floor);
  EXPECT_EQ(d.on_wake(101), drain_action::rearm);
  EXPECT_EQ(d.rearm_delay(), ledger_drain::redrain_floor);
  // The old timer is stale; further raises are coalesced into the new one.
  EXPECT_EQ(d.on_redrain_timer(n.redrain_id), drain_action::none);
  EXPECT_EQ(d.on_wake(102), drain_action::none);
  EXPECT_EQ(d.on_redrain_timer(d.rearm_id()), drain_action::fetch);
}

TEST(LedgerWakes, AFailedFetchBacksOffAndWakesWaitForTheRetry) {
  ledger_drain d{0, 10, 30s};
  d.request(drain_trigger::start);
  auto n = d.on_fetch_failed();
  ASSERT_EQ(n.what, drain_next::kind::redrain);
  EXPECT_EQ(n.delay, ledger_drain::redrain_floor);
  EXPECT_EQ(d.on_wake(std::nullopt), drain_action::none);
  EXPECT_EQ(d.on_redrain_timer(n.redrain_id), drain_action::fetch);
  n = d.on_fetch_failed();
  EXPECT_EQ(n.delay, 2 * ledger_drain::redrain_floor);
  EXPECT_EQ(d.cursor(), 0);
}

// -- the actor, on virtual time ----------------------------------------------------------

namespace {

std::string wake(int64_t cursor) {
  return R"({"type":"wake","cursor":)" + std::to_string(cursor) + "}";
}

/// JSON nested `depth` arrays deep (the client parser stops at
/// client_config::json_max_depth, 64 by default).
std::string deep(int depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

class FeedPoison : public virtual_time_fixture {
protected:
  FeedPoison() {
    cfg.replay_path = "/v1/events";
    cfg.limit = 4;
    ccfg.base_url = "http://127.0.0.1:8080";
    ccfg.token = "tok";
  }

  ~FeedPoison() override {
    if (w)
      caf::anon_send_exit(w, caf::exit_reason::user_shutdown);
    run();
  }

  void start(bool with_ws = true) {
    client_options co;
    co.transport = spawn_ledger_transport(sys(), ledger);
    co.seed = 1;
    feed_watcher_options o;
    if (!cfg.replay_path.empty())
      o.client = make_service_client(sys(), ccfg, co);
    if (with_ws) {
      cfg.ws_path = "/ws/feed";
      o.connector = std::make_shared<fake_ws_connector>(
        ws, [this] { return now(); });
      o.ws = feed_ws_endpoint::from(ccfg);
    }
    o.subscriber = spawn_recording_subscriber(sys(), subs);
    auto fails = failures;
    o.on_failure = [fails](const feed_failure& f) { fails->push_back(f); };
    o.seed = 7;
    w = spawn_feed_watcher(sys(), cfg, o);
    run();
  }

  void advance_to(time_point t) {
    run();
    for (;;) {
      auto& sch = sched().clock().schedule();
      if (sch.empty() || sch.begin()->first > t)
        break;
      sched().trigger_timeout();
      run();
    }
    if (sched().clock().current_time < t)
      sched().clock().current_time = t;
    run();
  }

  void advance_by(nanoseconds d) {
    advance_to(now() + d);
  }

  feed_stats stats() {
    auto out = std::make_shared<std::optional<feed_stats>>();
    auto target = w;
    sys().spawn([out, target](caf::event_based_actor* self) {
      self->request(target, caf::infinite, stats_atom_v)
        .then([out](feed_stats s) { *out = s; });
    });
    run();
    EXPECT_TRUE(out->has_value());
    return out->value_or(feed_stats{});
  }

  /// "e<id>" / "e#<seq>" per event, "r:<cause>" per reset, in order.
  std::vector<std::string> got() const {
    std::vector<std::string> r;
    for (auto& e : subs->got) {
      if (e.is_reset)
        r.push_back(std::string{"r:"} + to_string(e.rs.cause));
      else if (e.ev.id)
        r.push_back("e" + std::to_string(*e.ev.id));
      else if (e.ev.seq)
        r.push_back("e#" + std::to_string(*e.ev.seq));
      else
        r.push_back("e?");
    }
    return r;
  }

  feed_config cfg;
  client_config ccfg;
  std::shared_ptr<fake_ledger> ledger = std::make_shared<fake_ledger>();
  std::shared_ptr<fake_ws_log> ws = std::make_shared<fake_ws_log>();
  std::shared_ptr<sub_log> subs = std::make_shared<sub_log>();
  std::shared_ptr<std::vector<feed_failure>> failures
    = std::make_shared<std::vector<feed_failure>>();
  feed_watcher_actor w;
};

std::size_t idx(reset_cause c) {
  return static_cast<std::size_t>(c);
}

std::size_t idx(drain_error_reason r) {
  return static_cast<std::size_t>(r);
}

} // namespace

TEST_F(FeedPoison, ADeepEventBetweenTwoOrdinaryOnesIsOneUndeliverableReset) {
  // Metadata nested deeper than the client's parser accepts, published
  // between two ordinary events. Before, nothing at all was delivered --
  // not even event 1 of the same page -- and drain_errors stayed 0.
  ledger->append_to(3);
  ledger->raw_events[2]
    = R"({"id":2,"subject":"deep","kind":"k","metadata":)" + deep(100) + "}";
  start(false);
  EXPECT_EQ(got(), (std::vector<std::string>{"e1", "r:undeliverable", "e3"}));
  auto rs = subs->resets();
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0]->mode, feed_mode::ledger);
  EXPECT_EQ(rs[0]->event_id, 2);
  EXPECT_EQ(rs[0]->lost_from, 1);
  EXPECT_EQ(rs[0]->lost_to, 2);
  EXPECT_EQ(rs[0]->from_cursor, 1);
  EXPECT_EQ(rs[0]->to_cursor, 2);
  EXPECT_EQ(rs[0]->reason.rfind("unparseable: ", 0), 0u) << rs[0]->reason;
  auto s = stats();
  EXPECT_EQ(s.cursor, 3);
  EXPECT_EQ(s.resets_by_cause[idx(reset_cause::undeliverable)], 1u);
  EXPECT_GE(s.drain_errors_by_reason[idx(drain_error_reason::unparseable)],
            1u);
  EXPECT_EQ(s.drain_errors,
            s.drain_errors_by_reason[idx(drain_error_reason::unparseable)]);
  EXPECT_EQ(s.replay_errors, 0u);
  EXPECT_TRUE(s.reached);
  // Each unreadable page was reported as it happened.
  ASSERT_FALSE(failures->empty());
  EXPECT_EQ(failures->front().source, "page");
  EXPECT_EQ(failures->front().kind, "unparseable");
  EXPECT_EQ(failures->front().status, 200);
  EXPECT_FALSE(failures->front().request_id.empty());
  // The feed goes on past it.
  ledger->append_to(5);
  advance_by(30s);
  EXPECT_EQ(got(), (std::vector<std::string>{"e1", "r:undeliverable", "e3",
                                             "e4", "e5"}));
}

TEST_F(FeedPoison, AnEventOverTheReplayCapIsOneUndeliverableReset) {
  // The watcher's own replay cap (feed_config::replay_max_response_bytes);
  // before, an over-cap page was retried forever, silently.
  cfg.replay_max_response_bytes = 2000;
  ledger->append_to(6);
  ledger->raw_events[4] = R"({"id":4,"subject":")" + std::string(3000, 'x')
                          + R"(","kind":"k"})";
  start(false);
  EXPECT_EQ(got(), (std::vector<std::string>{"e1", "e2", "e3",
                                             "r:undeliverable", "e5", "e6"}));
  auto rs = subs->resets();
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0]->event_id, 4);
  EXPECT_EQ(rs[0]->reason.rfind("over_cap: ", 0), 0u) << rs[0]->reason;
  auto s = stats();
  EXPECT_EQ(s.cursor, 6);
  EXPECT_GE(s.drain_errors_by_reason[idx(drain_error_reason::over_cap)], 1u);
  // Every replay request of the watcher carried the limit it asked for.
  for (auto& q : ledger->requests)
    EXPECT_GE(q.limit, 1);
}

TEST_F(FeedPoison, AReplayThatFailsIsCountedReportedAndBackedOff) {
  ledger->append_to(2);
  ledger->fail_next = 3;
  start(false);
  auto s = stats();
  EXPECT_EQ(s.replay_errors, 1u);
  EXPECT_FALSE(s.reached);
  ASSERT_EQ(failures->size(), 1u);
  EXPECT_EQ((*failures)[0].source, "replay");
  EXPECT_EQ((*failures)[0].kind, "server_error");
  EXPECT_EQ((*failures)[0].status, 503);
  EXPECT_FALSE((*failures)[0].request_id.empty());
  // Retried on the backoff (0.05, 0.1, 0.2 s), not only at the poll tick.
  advance_by(1s);
  EXPECT_EQ(subs->ids(), (ids{1, 2}));
  EXPECT_EQ(stats().replay_errors, 3u);
  EXPECT_TRUE(stats().reached);
}

TEST_F(FeedPoison, AWakeFloodForAnUnreachableCursorCostsTheBackoffNotACallPerWake) {
  // 10,000 wakes a second for 3 s, all announcing cursor 100, which the
  // replay never reaches (it holds 1..5). Before, every wake that found
  // the drain idle started a replay call.
  ledger->append_to(5);
  start();
  ws->last().open();
  run();
  auto before = ledger->requests.size();
  for (int ms = 0; ms < 3000; ++ms) {
    for (int i = 0; i < 10; ++i)
      ws->last().message(wake(100));
    advance_by(1ms);
  }
  auto calls = ledger->requests.size() - before;
  // The re-drain backoff of hyperdjango's ChangeFeedWatcher: 0.05, 0.1, 0.2, 0.4, 0.8, 1.6 s ...
  // -- six re-drains in 3 s (one more for the wake that set the target).
  EXPECT_LE(calls, 8u);
  EXPECT_GE(calls, 5u);
  auto s = stats();
  EXPECT_GE(s.wakes_coalesced, 29990u);
  EXPECT_EQ(s.cursor, 5);
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3, 4, 5}));
}

TEST_F(FeedPoison, AFloodOfRisingUnreachableTargetsIsHeldToTheReDrainFloor) {
  ledger->append_to(5);
  start();
  ws->last().open();
  run();
  auto before = ledger->requests.size();
  int64_t c = 100;
  for (int ms = 0; ms < 1000; ++ms) {
    for (int i = 0; i < 10; ++i)
      ws->last().message(wake(++c));
    advance_by(1ms);
  }
  auto calls = ledger->requests.size() - before;
  // At most one replay call per 50 ms floor (plus the first).
  EXPECT_LE(calls, 1000u / 50u + 2u);
  EXPECT_GE(calls, 5u);
}

TEST_F(FeedPoison, AnUnreadableCatchupFrameIsAnUndeliverableResetInOrder) {
  cfg.replay_path.clear();
  start();
  ws->last().open();
  run();
  ws->last().message(
    R"({"type":"hello","mode":"catchup","seq":0,"cursor":0,"resync":false,"epoch":"e1"})");
  ws->last().message(R"({"type":"event","subject":"a","kind":"k","seq":1})");
  ws->last().message(R"({"type":"event","subject":"a","kind":"k","seq":2,"metadata":)"
                     + deep(100) + "}");
  ws->last().message(R"({"type":"event","subject":"a","kind":"k","seq":3})");
  run();
  auto g = got();
  // Event 1, the unreadable frame in its place, then event 3 (with no
  // prefixes, the seq jump over it is also a gap reset).
  EXPECT_EQ(g, (std::vector<std::string>{"e#1", "r:undeliverable", "r:gap",
                                         "e#3"}));
  auto rs = subs->resets();
  ASSERT_FALSE(rs.empty());
  EXPECT_EQ(rs[0]->cause, reset_cause::undeliverable);
  EXPECT_EQ(rs[0]->mode, feed_mode::catchup);
  EXPECT_EQ(rs[0]->lost_from, 1);
  EXPECT_FALSE(rs[0]->lost_to);
  EXPECT_EQ(rs[0]->reason.rfind("unparseable: ", 0), 0u) << rs[0]->reason;
  auto s = stats();
  EXPECT_EQ(s.unreadable_frames, 1u);
  EXPECT_EQ(s.resets_by_cause[idx(reset_cause::undeliverable)], 1u);
}

TEST_F(FeedPoison, AnUnreadableEphemeralFrameIsAnUndeliverableResetInOrder) {
  cfg.replay_path.clear();
  start();
  ws->last().open();
  run();
  ws->last().message(
    R"({"type":"hello","mode":"ephemeral","seq":0,"cursor":0,"resync":false,"epoch":"e1"})");
  ws->last().message(R"({"type":"event","subject":"a","kind":"k","seq":1})");
  ws->last().message("not json at all");
  ws->last().message(R"({"type":"event","subject":"a","kind":"k","seq":2})");
  run();
  EXPECT_EQ(got(), (std::vector<std::string>{"r:reconnect", "e#1",
                                             "r:undeliverable", "e#2"}));
  ASSERT_FALSE(failures->empty());
  EXPECT_EQ(failures->back().source, "frame");
}

TEST_F(FeedPoison, ARefusedUpgradeIsReportedWithItsStatus) {
  cfg.replay_path.clear();
  start();
  ws_event ev;
  ev.what = ws_event::kind::closed;
  ev.reason = ws_close_reason::handshake;
  ev.detail = "upgrade refused: HTTP 401 instead of 101 Switching Protocols";
  ws->last().push(ev);
  run();
  ASSERT_EQ(failures->size(), 1u);
  EXPECT_EQ((*failures)[0].source, "websocket");
  EXPECT_EQ((*failures)[0].kind, "auth_error");
  EXPECT_EQ((*failures)[0].status, 401);
  EXPECT_EQ((*failures)[0].reason, "handshake");
  EXPECT_FALSE(stats().reached);
}
