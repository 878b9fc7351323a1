// Ledger incarnations and lost ranges (actors/feed/ledger_drain.hpp,
// actors/feed/mode_negotiator.hpp): a ledger replaced under a running
// watcher (a new epoch, a head below the cursor) is one typed rewind reset,
// never silence and never a reset loop; every reset says what was lost.
// Pure state machines, exact values.

#include "actors/feed/ledger_drain.hpp"
#include "actors/feed/mode_negotiator.hpp"

#include <gtest/gtest.h>

using namespace outbound;
using namespace std::chrono_literals;

namespace {

page_summary page(std::vector<std::optional<int64_t>> ids,
                  std::optional<int64_t> cursor,
                  std::optional<std::string> epoch = std::nullopt,
                  bool reset = false) {
  page_summary p;
  p.is_object = true;
  p.ids = std::move(ids);
  p.cursor = cursor;
  p.epoch = std::move(epoch);
  p.reset = reset;
  return p;
}

// Plans `p`, delivers every planned event, finishes the page; returns the
// plan (for its reset) and appends the delivered ids to `out`.
page_plan serve(ledger_drain& d, const page_summary& p,
                std::vector<int64_t>* out = nullptr,
                drain_next* next = nullptr) {
  auto plan = d.on_page(p);
  for (auto i : plan.deliver) {
    d.on_event_delivered(p.ids[i]);
    if (out && p.ids[i])
      out->push_back(*p.ids[i]);
  }
  auto n = d.on_page_done();
  if (next)
    *next = n;
  return plan;
}

// A drain that has delivered ids 1..5 of incarnation "e1" (announced by a
// hello and carried by the page) and is idle.
ledger_drain at_five(std::optional<std::string> epoch = "e1") {
  ledger_drain d{0, 10, 30s};
  if (epoch)
    EXPECT_EQ(d.on_hello(epoch, 5), drain_action::fetch);
  else
    EXPECT_EQ(d.request(drain_trigger::start), drain_action::fetch);
  serve(d, page({1, 2, 3, 4, 5}, 5, epoch));
  EXPECT_EQ(d.cursor(), 5);
  EXPECT_FALSE(d.busy());
  return d;
}

} // namespace

TEST(LedgerIncarnation, NewEpochInAHelloRewindsToTheNewStartWithOneReset) {
  auto d = at_five();
  EXPECT_EQ(d.on_hello(std::string{"e2"}, 9), drain_action::fetch);
  EXPECT_EQ(d.cursor(), 0) << "the fetch asks the new ledger from its start";
  std::vector<int64_t> got;
  auto plan = serve(d, page({1, 2, 3}, 3, "e2"), &got);
  ASSERT_TRUE(plan.reset);
  EXPECT_EQ(plan.cause, reset_cause::rewind);
  EXPECT_EQ(plan.reset_from, 5);
  EXPECT_EQ(plan.reset_to, std::nullopt) << "the old incarnation's end";
  EXPECT_EQ(plan.old_epoch, "e1");
  EXPECT_EQ(plan.new_epoch, "e2");
  EXPECT_EQ(got, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(d.cursor(), 3);
  EXPECT_EQ(d.rewinds(), 1u);
  EXPECT_EQ(d.resets(), 0u);
  EXPECT_EQ(d.epoch(), "e2");
  // The next pages of the same incarnation are plain deliveries.
  EXPECT_EQ(d.request(drain_trigger::poll), drain_action::fetch);
  auto again = serve(d, page({4}, 4, "e2"), &got);
  EXPECT_FALSE(again.reset);
  EXPECT_EQ(d.rewinds(), 1u);
}

TEST(LedgerIncarnation, SameEpochInAHelloIsNoRewind) {
  auto d = at_five();
  EXPECT_EQ(d.on_hello(std::string{"e1"}, 5), drain_action::none);
  EXPECT_EQ(d.on_hello(std::string{"e1"}, 8), drain_action::fetch)
    << "a head above the cursor is a wake target";
  serve(d, page({6, 7, 8}, 8, "e1"));
  EXPECT_EQ(d.cursor(), 8);
  EXPECT_EQ(d.rewinds(), 0u);
}

TEST(LedgerIncarnation, FirstEpochSeenIsAdoptedNotARewind) {
  ledger_drain d{40, 10, 30s}; // resumed from a stored cursor
  EXPECT_EQ(d.on_hello(std::string{"e7"}, 50), drain_action::fetch);
  serve(d, page({41, 42}, 42, "e7"));
  EXPECT_EQ(d.cursor(), 42);
  EXPECT_EQ(d.rewinds(), 0u);
  EXPECT_EQ(d.epoch(), "e7");
}

TEST(LedgerIncarnation,
     ACursorResumedWithoutItsEpochRewindsWithTheOldEpochUnknown) {
  // Resumed at 40 with no epoch: the hub was restarted on a new ledger of
  // two events, so the first epoch it names ("e8") is the new ledger's,
  // not the cursor's.
  ledger_drain d{40, 10, 30s};
  EXPECT_EQ(d.on_hello(std::string{"e8"}, 2), drain_action::fetch);
  drain_next next;
  auto stale = serve(d, page({}, 2, "e8"), nullptr, &next);
  EXPECT_FALSE(stale.reset);
  EXPECT_EQ(next.what, drain_next::kind::fetch);
  std::vector<int64_t> got;
  auto plan = serve(d, page({1, 2}, 2, "e8"), &got);
  ASSERT_TRUE(plan.reset);
  EXPECT_EQ(plan.cause, reset_cause::rewind);
  EXPECT_EQ(plan.reset_from, 40);
  EXPECT_EQ(plan.old_epoch, std::nullopt) << "never the new ledger's own";
  EXPECT_EQ(plan.new_epoch, "e8");
  EXPECT_EQ(got, (std::vector<int64_t>{1, 2}));
}

TEST(LedgerIncarnation, AResumedCursorThatMovedKnowsItsEpochAtTheNextRewind) {
  ledger_drain d{40, 10, 30s};
  EXPECT_EQ(d.on_hello(std::string{"e7"}, 42), drain_action::fetch);
  serve(d, page({41, 42}, 42, "e7"));
  EXPECT_EQ(d.cursor(), 42);
  EXPECT_EQ(d.on_hello(std::string{"e8"}, 1), drain_action::fetch);
  auto plan = serve(d, page({1}, 1, "e8"));
  ASSERT_TRUE(plan.reset);
  EXPECT_EQ(plan.cause, reset_cause::rewind);
  EXPECT_EQ(plan.reset_from, 42);
  EXPECT_EQ(plan.old_epoch, "e7") << "42 was read in e7";
  EXPECT_EQ(plan.new_epoch, "e8");
}

TEST(LedgerIncarnation, NewEpochOnAReplayPageDropsThatPageAndRefetches) {
  auto d = at_five();
  EXPECT_EQ(d.request(drain_trigger::poll), drain_action::fetch);
  // The hub restarted between polls: the page for after=5 comes from the
  // new ledger (ids 6.. there are other events). Nothing of it is
  // delivered.
  drain_next next;
  std::vector<int64_t> got;
  auto stale = serve(d, page({6, 7}, 7, "e2"), &got, &next);
  EXPECT_FALSE(stale.reset);
  EXPECT_TRUE(stale.deliver.empty());
  EXPECT_TRUE(got.empty());
  EXPECT_EQ(next.what, drain_next::kind::fetch);
  EXPECT_EQ(d.cursor(), 0);
  auto plan = serve(d, page({1, 2, 3, 4, 5, 6, 7}, 7, "e2"), &got);
  ASSERT_TRUE(plan.reset);
  EXPECT_EQ(plan.cause, reset_cause::rewind);
  EXPECT_EQ(plan.reset_from, 5);
  EXPECT_EQ(got, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7}));
}

TEST(LedgerIncarnation, HeadBelowTheCursorOnAPageRewindsWithoutEpochs) {
  auto d = at_five(std::nullopt); // a hub that sends no epoch
  EXPECT_EQ(d.request(drain_trigger::poll), drain_action::fetch);
  // A fresh ledger with two events: nothing after 5, its cursor is 2.
  drain_next next;
  auto stale = serve(d, page({}, 2), nullptr, &next);
  EXPECT_FALSE(stale.reset);
  EXPECT_EQ(next.what, drain_next::kind::fetch);
  std::vector<int64_t> got;
  auto plan = serve(d, page({1, 2}, 2), &got);
  ASSERT_TRUE(plan.reset);
  EXPECT_EQ(plan.cause, reset_cause::rewind);
  EXPECT_EQ(plan.reset_from, 5);
  EXPECT_EQ(plan.old_epoch, std::nullopt);
  EXPECT_EQ(got, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(d.cursor(), 2);
}

TEST(LedgerIncarnation, LowHelloCursorOrWakeHintOnlyAsksTheReplay) {
  auto d = at_five(std::nullopt);
  // A stale hint (sharded fan-out): the page shows the head at 5 or above.
  EXPECT_EQ(d.on_hello(std::nullopt, 3), drain_action::fetch);
  auto plan = serve(d, page({}, 5));
  EXPECT_FALSE(plan.reset);
  EXPECT_EQ(d.cursor(), 5);
  EXPECT_EQ(d.on_wake(2), drain_action::fetch);
  plan = serve(d, page({6}, 6));
  EXPECT_FALSE(plan.reset);
  EXPECT_EQ(d.cursor(), 6);
  EXPECT_EQ(d.rewinds(), 0u);
  // A page without a cursor says nothing about the head either.
  EXPECT_EQ(d.on_wake(1), drain_action::fetch);
  plan = serve(d, page({}, std::nullopt));
  EXPECT_FALSE(plan.reset);
  EXPECT_EQ(d.rewinds(), 0u);
  // A real rewind behind a low hint: the page confirms it.
  EXPECT_EQ(d.on_wake(1), drain_action::fetch);
  drain_next next;
  serve(d, page({}, 1), nullptr, &next);
  EXPECT_EQ(next.what, drain_next::kind::fetch);
  plan = serve(d, page({1}, 1));
  EXPECT_TRUE(plan.reset);
  EXPECT_EQ(plan.cause, reset_cause::rewind);
  EXPECT_EQ(plan.reset_from, 6);
  EXPECT_EQ(d.target(), 1) << "the low hint is the new ledger's head";
}

TEST(LedgerIncarnation, RewindWaitsForThePageInDeliveryToFinish) {
  auto d = at_five();
  EXPECT_EQ(d.request(drain_trigger::poll), drain_action::fetch);
  auto plan = d.on_page(page({6, 7}, 7, "e1"));
  ASSERT_EQ(plan.deliver.size(), 2u);
  d.on_event_delivered(6);
  // The hub restarts while event 7 is being delivered.
  EXPECT_EQ(d.on_hello(std::string{"e2"}, 0), drain_action::queued);
  EXPECT_EQ(d.cursor(), 6) << "nothing moves under a page in delivery";
  d.on_event_delivered(7);
  auto next = d.on_page_done();
  EXPECT_EQ(next.what, drain_next::kind::fetch);
  EXPECT_EQ(d.cursor(), 0);
  auto reset = serve(d, page({}, 0, "e2"));
  ASSERT_TRUE(reset.reset);
  EXPECT_EQ(reset.reset_from, 7) << "every event of the old page counted";
  EXPECT_EQ(d.rewinds(), 1u);
}

TEST(LedgerIncarnation, AnAnswerInFlightWhenTheEpochChangesIsDropped) {
  auto d = at_five();
  EXPECT_EQ(d.request(drain_trigger::poll), drain_action::fetch);
  EXPECT_EQ(d.on_hello(std::string{"e2"}, 12), drain_action::queued);
  // Whatever the in-flight answer says (here it even claims the old
  // epoch), it was asked before the rewind: dropped.
  std::vector<int64_t> got;
  drain_next next;
  auto stale = serve(d, page({6}, 6, "e1"), &got, &next);
  EXPECT_TRUE(stale.deliver.empty());
  EXPECT_TRUE(got.empty());
  EXPECT_EQ(next.what, drain_next::kind::fetch);
  EXPECT_EQ(d.cursor(), 0);
  auto plan = serve(d, page({1, 2}, 12, "e2"), &got);
  ASSERT_TRUE(plan.reset);
  EXPECT_EQ(plan.reset_from, 5);
  EXPECT_EQ(got, (std::vector<int64_t>{1, 2}));
}

TEST(LedgerIncarnation, AFailedFetchKeepsTheRewindForTheNextPage) {
  auto d = at_five();
  EXPECT_EQ(d.on_hello(std::string{"e2"}, 3), drain_action::fetch);
  d.on_fetch_failed();
  EXPECT_EQ(d.cursor(), 0);
  EXPECT_TRUE(d.rewinding());
  EXPECT_EQ(d.request(drain_trigger::poll), drain_action::fetch);
  auto plan = serve(d, page({1, 2, 3}, 3, "e2"));
  ASSERT_TRUE(plan.reset);
  EXPECT_EQ(plan.cause, reset_cause::rewind);
  EXPECT_EQ(plan.reset_from, 5);
  EXPECT_FALSE(d.rewinding());
  EXPECT_EQ(d.rewinds(), 1u);
}

TEST(LedgerIncarnation, ABadPageKeepsTheRewindForTheNextPage) {
  auto d = at_five();
  EXPECT_EQ(d.on_hello(std::string{"e2"}, 3), drain_action::fetch);
  page_summary bad; // not an object
  auto plan = serve(d, bad);
  EXPECT_EQ(plan.verdict, page_verdict::bad_page);
  EXPECT_EQ(d.request(drain_trigger::poll), drain_action::fetch);
  plan = serve(d, page({1}, 1, "e2"));
  ASSERT_TRUE(plan.reset);
  EXPECT_EQ(plan.reset_from, 5);
}

TEST(LedgerIncarnation, TwoRestartsBeforeTheResetIsPlannedAreOneReset) {
  auto d = at_five();
  EXPECT_EQ(d.on_hello(std::string{"e2"}, 3), drain_action::fetch);
  // The fetch from the new start meets a third incarnation: it is the new
  // start all the same (never a refetch loop on a changing epoch).
  std::vector<int64_t> got;
  auto plan = serve(d, page({1, 2}, 2, "e3"), &got);
  ASSERT_TRUE(plan.reset);
  EXPECT_EQ(plan.reset_from, 5);
  EXPECT_EQ(plan.old_epoch, "e1");
  EXPECT_EQ(plan.new_epoch, "e3");
  EXPECT_EQ(got, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(d.rewinds(), 1u);
}

TEST(LedgerIncarnation, AnEpochThatChangesOnEveryPageIsNoRefetchLoop) {
  auto d = at_five();
  EXPECT_EQ(d.request(drain_trigger::poll), drain_action::fetch);
  drain_next next;
  serve(d, page({6}, 6, "x1"), nullptr, &next); // stale: a rewind
  EXPECT_EQ(next.what, drain_next::kind::fetch);
  std::vector<int64_t> got;
  auto plan = serve(d, page({1, 2}, 2, "x2"), &got, &next);
  EXPECT_TRUE(plan.reset) << "the page after the rewind is the new start";
  EXPECT_EQ(got, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(next.what, drain_next::kind::idle);
}

TEST(LedgerIncarnation, AHelloBackToTheOldEpochCancelsAPendingRewind) {
  auto d = at_five();
  EXPECT_EQ(d.request(drain_trigger::poll), drain_action::fetch);
  EXPECT_EQ(d.on_hello(std::string{"e2"}, 5), drain_action::queued);
  EXPECT_TRUE(d.rewinding());
  d.on_hello(std::string{"e1"}, 5); // failover back before it applied
  EXPECT_FALSE(d.rewinding());
  std::vector<int64_t> got;
  auto plan = serve(d, page({6}, 6, "e1"), &got);
  EXPECT_FALSE(plan.reset);
  EXPECT_EQ(got, (std::vector<int64_t>{6}));
  EXPECT_EQ(d.rewinds(), 0u);
}

TEST(LedgerIncarnation, AServerWhoseHeadStaysBelowAfterARewindIsNoResetLoop) {
  // A broken server that answers every empty page with cursor 0 and sends
  // no epoch: one rewind, a replay of 1..5, then drain errors, never a
  // second reset at the same cursor.
  auto d = at_five(std::nullopt);
  std::vector<int64_t> got;
  for (int round = 0; round < 5; ++round) {
    EXPECT_EQ(d.request(drain_trigger::poll), drain_action::fetch);
    drain_next next;
    serve(d, page({}, 0), &got, &next);
    if (next.what == drain_next::kind::fetch)
      serve(d, page({1, 2, 3, 4, 5}, 5), &got);
  }
  EXPECT_EQ(d.rewinds(), 1u);
  EXPECT_EQ(got, (std::vector<int64_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(d.cursor(), 5);
  EXPECT_EQ(d.drain_errors(), 4u);
}

TEST(LedgerIncarnation, ARealSecondRestartRewindsAgain) {
  auto d = at_five();
  EXPECT_EQ(d.on_hello(std::string{"e2"}, 5), drain_action::fetch);
  serve(d, page({1, 2, 3, 4, 5}, 5, "e2"));
  EXPECT_EQ(d.rewinds(), 1u);
  // Same cursor, but a new epoch: a new incarnation.
  EXPECT_EQ(d.on_hello(std::string{"e3"}, 0), drain_action::fetch);
  auto plan = serve(d, page({}, 0, "e3"));
  ASSERT_TRUE(plan.reset);
  EXPECT_EQ(plan.reset_from, 5);
  EXPECT_EQ(d.rewinds(), 2u);
}

TEST(LedgerIncarnation, ARewindPageBelowRetentionIsOneResetNotTwo) {
  auto d = at_five();
  EXPECT_EQ(d.on_hello(std::string{"e2"}, 50), drain_action::fetch);
  // The restored ledger keeps ids 41.. only: its first page is a
  // retention page too. One reset (rewind) covers both.
  auto plan = serve(d, page({41, 42}, 42, "e2", true));
  ASSERT_TRUE(plan.reset);
  EXPECT_EQ(plan.cause, reset_cause::rewind);
  EXPECT_EQ(plan.reset_to, 40) << "the new ledger's trimmed start is said";
  EXPECT_EQ(d.rewinds(), 1u);
  EXPECT_EQ(d.resets(), 0u);
  EXPECT_EQ(d.cursor(), 42);
}

TEST(LedgerIncarnation, RetentionResetCarriesTheLostRange) {
  ledger_drain d{3, 10, 30s};
  EXPECT_EQ(d.request(drain_trigger::start), drain_action::fetch);
  auto plan = serve(d, page({11, 12}, 12, std::nullopt, true));
  ASSERT_TRUE(plan.reset);
  EXPECT_EQ(plan.cause, reset_cause::retention);
  EXPECT_EQ(plan.reset_from, 3);
  EXPECT_EQ(plan.reset_to, 10);
}

// -- in-frame lost ranges -----------------------------------------------------

namespace {

hello_info hello(std::string mode, int64_t seq, bool resync,
                 std::optional<std::string> epoch) {
  hello_info h;
  h.mode = std::move(mode);
  h.seq = seq;
  h.cursor = 0;
  h.resync = resync;
  h.epoch = std::move(epoch);
  return h;
}

frame_info event(int64_t seq) {
  frame_info f;
  f.type = frame_type::event;
  f.seq = seq;
  return f;
}

} // namespace

TEST(FrameLostRange, CatchupResyncInOneEpochLosesUpToTheNewHead) {
  mode_negotiator n{false};
  n.on_open();
  auto first = n.on_hello(hello("catchup", 4, true, "a"));
  ASSERT_TRUE(first.reset);
  EXPECT_EQ(first.reset->lost_from, std::nullopt) << "nothing received yet";
  EXPECT_EQ(first.reset->lost_to, 4);
  n.on_frame(event(5));
  n.on_frame(event(6));
  n.on_open();
  auto again = n.on_hello(hello("catchup", 20, true, "a"));
  ASSERT_TRUE(again.reset);
  EXPECT_EQ(again.reset->cause, reset_cause::resync);
  EXPECT_EQ(again.reset->lost_from, 6);
  EXPECT_EQ(again.reset->lost_to, 20);
}

TEST(FrameLostRange, EpochChangeLosesAnUnknownRangeAfterLastSeq) {
  mode_negotiator n{false};
  n.on_open();
  n.on_hello(hello("catchup", 0, true, "a"));
  n.on_frame(event(1));
  n.on_open();
  auto r = n.on_hello(hello("catchup", 3, false, "b"));
  ASSERT_TRUE(r.reset);
  EXPECT_EQ(r.reset->cause, reset_cause::epoch_changed);
  EXPECT_EQ(r.reset->lost_from, 1);
  EXPECT_EQ(r.reset->lost_to, std::nullopt);
}

TEST(FrameLostRange, GapIsTheSkippedSeqs) {
  mode_negotiator n{false, true};
  n.on_open();
  n.on_hello(hello("catchup", 0, true, "a"));
  n.on_frame(event(1));
  auto r = n.on_frame(event(5));
  ASSERT_TRUE(r.reset);
  EXPECT_EQ(r.reset->cause, reset_cause::gap);
  EXPECT_EQ(r.reset->lost_from, 1);
  EXPECT_EQ(r.reset->lost_to, 4);
}

TEST(FrameLostRange, EphemeralReconnectSameEpochAndNewEpoch) {
  mode_negotiator n{false};
  n.on_open();
  n.on_hello(hello("ephemeral", 2, true, "a"));
  n.on_frame(event(3));
  n.on_open();
  auto same = n.on_hello(hello("ephemeral", 9, true, "a"));
  ASSERT_TRUE(same.reset);
  EXPECT_EQ(same.reset->lost_from, 3);
  EXPECT_EQ(same.reset->lost_to, 9);
  n.on_open();
  auto fresh = n.on_hello(hello("ephemeral", 1, true, "b"));
  ASSERT_TRUE(fresh.reset);
  EXPECT_EQ(fresh.reset->lost_from, 9);
  EXPECT_EQ(fresh.reset->lost_to, std::nullopt);
}

TEST(FrameLostRange, InferredResetHasAnUnknownEnd) {
  mode_negotiator n{false};
  n.on_open();
  auto r = n.on_frame(event(7));
  ASSERT_TRUE(r.reset);
  EXPECT_EQ(r.reset->cause, reset_cause::inferred);
  EXPECT_EQ(r.reset->lost_to, std::nullopt);
}

TEST(LedgerIncarnation, ThePageAndTheHelloSeeingOneRestartAreOneRewind) {
  auto d = at_five();
  // The new hub's page arrives before its hello (the WebSocket reconnects
  // later): the page decides the rewind ...
  EXPECT_EQ(d.request(drain_trigger::poll), drain_action::fetch);
  drain_next next;
  serve(d, page({}, 2, "e2"), nullptr, &next);
  EXPECT_EQ(next.what, drain_next::kind::fetch);
  std::vector<int64_t> got;
  auto plan = serve(d, page({1, 2}, 2, "e2"), &got);
  EXPECT_TRUE(plan.reset);
  EXPECT_EQ(d.rewinds(), 1u);
  // ... and the hello that follows, with the same new epoch, is no second
  // one (the cursor has moved since, so only the epoch can tell).
  d.on_hello(std::string{"e2"}, 2);
  EXPECT_FALSE(d.rewinding());
  EXPECT_EQ(d.request(drain_trigger::poll), drain_action::fetch);
  plan = serve(d, page({3}, 3, "e2"), &got);
  EXPECT_FALSE(plan.reset);
  EXPECT_EQ(d.rewinds(), 1u);
  EXPECT_EQ(got, (std::vector<int64_t>{1, 2, 3}));
}

TEST(LedgerIncarnation, TheHelloThenThePageSeeingOneRestartAreOneRewind) {
  auto d = at_five();
  EXPECT_EQ(d.on_hello(std::string{"e2"}, 0), drain_action::fetch);
  auto plan = serve(d, page({1}, 1, "e2"));
  EXPECT_TRUE(plan.reset);
  EXPECT_EQ(d.request(drain_trigger::poll), drain_action::fetch);
  plan = serve(d, page({2}, 2, "e2"));
  EXPECT_FALSE(plan.reset);
  EXPECT_EQ(d.rewinds(), 1u);
}
