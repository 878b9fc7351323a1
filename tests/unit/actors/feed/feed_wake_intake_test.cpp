// Wake intake (actors/feed/wake_intake.hpp): the cheap wake scan must never
// take anything but a plain wake for one, and must agree with the full
// parser (parse_message) on every frame it does accept; the gate opens only
// where ledger_drain itself would coalesce.

#include "actors/feed/wake_intake.hpp"

#include "actors/feed/feed_frames.hpp"
#include "actors/feed/ledger_drain.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

using namespace outbound;
using namespace std::chrono_literals;

namespace {

page_summary page(std::vector<std::optional<int64_t>> ids,
                  std::optional<int64_t> cursor) {
  page_summary p;
  p.is_object = true;
  p.ids = std::move(ids);
  p.cursor = cursor;
  return p;
}

drain_next deliver_all(ledger_drain& d, const page_summary& p) {
  auto plan = d.on_page(p);
  for (auto i : plan.deliver)
    d.on_event_delivered(p.ids[i]);
  return d.on_page_done();
}

} // namespace

TEST(FeedWakeIntake, PlainWakeFramesYieldTheirCursor) {
  EXPECT_EQ(plain_wake_cursor(R"({"type":"wake","cursor":42})", "cursor"), 42);
  EXPECT_EQ(
    plain_wake_cursor(" { \"cursor\" : 0 ,\t\"type\" :\"wake\" }\n", "cursor"),
    0);
  EXPECT_EQ(
    plain_wake_cursor(
      R"({"type":"wake","cursor":7,"seq":null,"x":"y","b":true})", "cursor"),
    7);
  EXPECT_EQ(
    plain_wake_cursor(R"({"type":"wake","head":99,"cursor":1})", "head"), 99);
  EXPECT_EQ(plain_wake_cursor(R"({"type":"wake","cursor":999999999999999999})",
                              "cursor"),
            999999999999999999);
}

TEST(FeedWakeIntake, AnythingButAPlainWakeIsNotSure) {
  const char* cases[] = {
    R"({"type":"event","cursor":42})",
    R"({"type":"hello","mode":"ledger","cursor":42})",
    R"({"type":"wake"})",
    R"({"type":"wake","cursor":"42"})",
    R"({"type":"wake","cursor":4.2})",
    R"({"type":"wake","cursor":42e0})",
    R"({"type":"wake","cursor":-1})",
    R"({"type":"wake","cursor":-0})",
    R"({"type":"wake","cursor":042})",
    R"({"type":"wake","cursor":9999999999999999999})",
    R"({"type":"wake","cursor":42,"cursor":43})",
    R"({"type":"wake","type":"event","cursor":42})",
    R"({"type":"event","type":"wake","cursor":42})",
    R"({"t\u0079pe":"wake","cursor":42})",
    R"({"type":"w\u0061ke","cursor":42})",
    R"({"type":"wake","cursor":42,"meta":{"type":"event"}})",
    R"({"type":"wake","cursor":42,"list":[1]})",
    R"({"type":"wake","cursor":42,})",
    R"({"type":"wake","cursor":42} x)",
    R"({"type":"wake","cursor":42)",
    R"([{"type":"wake","cursor":42}])",
    R"({"type":"wake","cursor":42,"s":"a)"
    "\x01"
    R"("})",
    "wake 42",
    "",
  };
  for (auto* c : cases)
    EXPECT_EQ(plain_wake_cursor(c, "cursor"), std::nullopt) << c;
  // A custom field name: the default one no longer counts.
  EXPECT_EQ(plain_wake_cursor(R"({"type":"wake","cursor":42})", "head"),
            std::nullopt);
  EXPECT_EQ(plain_wake_cursor(R"({"type":"wake","cursor":42})", "type"),
            std::nullopt);
  EXPECT_EQ(plain_wake_cursor("{\"type\":\"wake\",\"cursor\":1,\"pad\":\""
                                + std::string(5000, 'x') + "\"}",
                              "cursor"),
            std::nullopt);
}

TEST(FeedWakeIntake, AcceptedFramesAreWakesWithTheSameCursorToTheFullParser) {
  const char* cases[] = {
    R"({"type":"wake","cursor":42})",
    R"({"cursor":3,"type":"wake","seq":5,"n":null,"f":false})",
    " {\"type\":\"wake\" , \"cursor\":0}\r\n",
  };
  for (auto* c : cases) {
    auto quick = plain_wake_cursor(c, "cursor");
    ASSERT_TRUE(quick) << c;
    auto m = parse_message(c, "cursor");
    EXPECT_FALSE(m.is_hello) << c;
    EXPECT_EQ(m.frame.type, frame_type::wake) << c;
    EXPECT_EQ(m.frame.wake_cursor, quick) << c;
  }
}

TEST(FeedWakeIntake, GateIsClosedWithoutATargetOrWhenADrainWouldStart) {
  ledger_drain d{0, 10, 30s};
  EXPECT_EQ(coalesced_wake_hint(d), std::nullopt); // no target yet
  EXPECT_EQ(d.on_wake(100), drain_action::fetch);
  // Busy with nothing pending: the next wake would queue a drain.
  EXPECT_EQ(coalesced_wake_hint(d), std::nullopt);
}

TEST(FeedWakeIntake, GateOpensAtTheTargetWhileBusyWithOnePending) {
  ledger_drain d{0, 10, 30s};
  d.on_wake(100);
  EXPECT_EQ(d.on_wake(100), drain_action::queued);
  EXPECT_EQ(coalesced_wake_hint(d), 100);
}

TEST(FeedWakeIntake, GateOpensAtAnUnreachedTargetWhileTheReDrainIsArmed) {
  ledger_drain d{0, 10, 30s};
  d.on_wake(100);
  auto n = deliver_all(d, page({}, 0));
  ASSERT_EQ(n.what, drain_next::kind::redrain);
  auto coalesced = d.wakes_coalesced();
  EXPECT_EQ(coalesced_wake_hint(d), 100);
  // The probe works on a copy: the drain itself is untouched.
  EXPECT_EQ(d.wakes_coalesced(), coalesced);
  // And the drain agrees: such a wake starts nothing.
  EXPECT_EQ(d.on_wake(100), drain_action::none);
  EXPECT_EQ(d.wakes_coalesced(), coalesced + 1);
  // A raised target goes to the drain (the gate only holds the old one);
  // the gate then follows it.
  d.on_wake(101);
  EXPECT_EQ(d.target(), 101);
  EXPECT_EQ(coalesced_wake_hint(d), 101);
}

TEST(FeedWakeIntake, GateClosesWhenTheCursorPassedTheTarget) {
  ledger_drain d{0, 10, 30s};
  d.on_wake(2);
  auto n = deliver_all(d, page({1, 2, 3}, 3));
  ASSERT_EQ(n.what, drain_next::kind::idle);
  EXPECT_EQ(d.cursor(), 3);
  // A wake at 2 would now be a low hint, which only the drain may judge.
  EXPECT_EQ(coalesced_wake_hint(d), std::nullopt);
}

TEST(FeedWakeIntake,
     GateDropsTheCoalescedRangeAbsorbsRaisesAndFoldsTheHighest) {
  wake_gate g;
  // A new gate is closed: every wake goes to the watcher.
  EXPECT_FALSE(g.take(0));
  EXPECT_FALSE(g.take(5));
  g.set(10, 20, false);
  EXPECT_FALSE(g.take(9)); // a low hint: the drain judges it
  EXPECT_TRUE(g.take(10));
  EXPECT_TRUE(g.take(15));
  EXPECT_TRUE(g.take(20));
  EXPECT_FALSE(g.take(21)); // raises the target: the drain must see it
  EXPECT_EQ(g.fold(), std::nullopt);
  g.set(10, 20, true);
  EXPECT_TRUE(g.take(25));
  EXPECT_TRUE(g.take(23));
  EXPECT_TRUE(g.take(20));
  EXPECT_FALSE(g.take(9));
  EXPECT_EQ(g.fold(), 25); // the highest raise, once
  EXPECT_EQ(g.fold(), std::nullopt);
  // fold() closed absorbing until the watcher sets the gate again.
  EXPECT_FALSE(g.take(30));
  EXPECT_TRUE(g.take(12));
  // No target: absorbing takes any wake at or above the cursor.
  g.set(10, std::nullopt, true);
  EXPECT_FALSE(g.take(9));
  EXPECT_TRUE(g.take(10));
  EXPECT_EQ(g.fold(), 10);
  // The cursor passed the target: the range closes, lower wakes go on.
  g.set(10, 20, false);
  g.raise_low(15);
  EXPECT_FALSE(g.take(14));
  EXPECT_TRUE(g.take(16));
  g.raise_low(21);
  EXPECT_FALSE(g.take(20));
  EXPECT_FALSE(g.take(21));
  g.set(10, 20, true);
  g.close();
  EXPECT_FALSE(g.take(15));
  EXPECT_FALSE(g.take(50));
  EXPECT_EQ(g.fold(), std::nullopt);
}
