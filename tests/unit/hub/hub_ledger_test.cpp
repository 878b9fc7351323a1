// The hub's ledger log: gap-free ids, replay paging, the retention
// floor and its reset, dedupe, and the visibility-lag fault. Seeded random
// sequences where a property is checked, exact values everywhere.

#include "hub/ledger_log.hpp"
#include "hub/subject.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

using namespace outbound;

namespace {

std::vector<int64_t> ids(const ledger_page& p) {
  std::vector<int64_t> out;
  for (const auto& e : p.events)
    out.push_back(e->id);
  return out;
}

std::vector<int64_t> range(int64_t first, int64_t last) {
  std::vector<int64_t> out;
  for (auto i = first; i <= last; ++i)
    out.push_back(i);
  return out;
}

void fill(ledger_log& log, int64_t n, const std::string& subject = "a/b") {
  for (int64_t i = 0; i < n; ++i)
    log.append(subject, "k", "{}", "", log.head() + 1, 1.5);
}

} // namespace

TEST(HubLedger, IdsAreGapFreeFromOne) {
  ledger_log log;
  for (int64_t i = 1; i <= 50; ++i) {
    auto r = log.append("s", "k", "{}", "", i, 0.0);
    EXPECT_FALSE(r.duplicate);
    EXPECT_EQ(r.event->id, i);
  }
  EXPECT_EQ(log.head(), 50);
  EXPECT_EQ(log.visible(), 50);
  EXPECT_EQ(log.floor(), 0);
}

TEST(HubLedger, StoredEventJsonCarriesEveryField) {
  ledger_log log;
  auto r = log.append("a/b", "created", "{\"x\":1}", "", 7, 2.5);
  EXPECT_EQ(r.event->json,
            "{\"id\":1,\"seq\":7,\"subject\":\"a/b\",\"kind\":\"created\","
            "\"metadata\":{\"x\":1},\"ts\":2.5E0}");
}

TEST(HubLedger, FiveEventsWithLimitThreeComeAsTwoPagesInOrder) {
  ledger_log log;
  fill(log, 5);
  auto p1 = log.page(0, 3, {});
  EXPECT_EQ(ids(p1), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(p1.cursor, 3);
  EXPECT_FALSE(p1.reset);
  auto p2 = log.page(p1.cursor, 3, {});
  EXPECT_EQ(ids(p2), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(p2.cursor, 5);
  auto p3 = log.page(p2.cursor, 3, {});
  EXPECT_TRUE(p3.events.empty());
  EXPECT_EQ(p3.cursor, 5);
}

TEST(HubLedger, LimitZeroOrNegativeMeansTheDefaultAndLargeLimitsClamp) {
  ledger_config cfg;
  cfg.replay_limit = 4;
  ledger_log log{cfg};
  fill(log, 10);
  EXPECT_EQ(log.page(0, 0, {}).events.size(), 4u);
  EXPECT_EQ(log.page(0, -3, {}).events.size(), 4u);
  EXPECT_EQ(log.page(0, 1000, {}).events.size(), 4u);
  EXPECT_EQ(log.page(0, 2, {}).events.size(), 2u);
  EXPECT_EQ(log.effective_limit(0), 4);
  EXPECT_EQ(log.effective_limit(5), 4);
  EXPECT_EQ(log.effective_limit(3), 3);
}

TEST(HubLedger, DefaultReplayLimitIsFiveHundred) {
  ledger_log log;
  fill(log, 600);
  auto p = log.page(0, 0, {});
  EXPECT_EQ(p.events.size(), 500u);
  EXPECT_EQ(p.cursor, 500);
}

TEST(HubLedger, AnEmptyPageAnswersTheCeiling) {
  ledger_log log;
  fill(log, 3);
  EXPECT_EQ(log.page(3, 10, {}).cursor, 3);
  // A reader ahead of the hub is told the hub's ceiling, not its own after.
  EXPECT_EQ(log.page(9, 10, {}).cursor, 3);
  ledger_log empty;
  EXPECT_EQ(empty.page(0, 10, {}).cursor, 0);
}

TEST(HubLedger, RetentionKeepsTheLastREventsAndResetsReadersBelowTheFloor) {
  ledger_config cfg;
  cfg.retention = 3;
  ledger_log log{cfg};
  fill(log, 10);
  EXPECT_EQ(log.floor(), 7);
  EXPECT_EQ(log.size(), 3u);
  EXPECT_EQ(log.get(7), nullptr);
  ASSERT_NE(log.get(8), nullptr);
  auto below = log.page(2, 10, {});
  EXPECT_TRUE(below.reset);
  EXPECT_EQ(ids(below), (std::vector<int64_t>{8, 9, 10}));
  EXPECT_EQ(below.cursor, 10);
  auto at = log.page(7, 10, {});
  EXPECT_FALSE(at.reset);
  EXPECT_EQ(ids(at), (std::vector<int64_t>{8, 9, 10}));
  auto inside = log.page(8, 10, {});
  EXPECT_FALSE(inside.reset);
  EXPECT_EQ(ids(inside), (std::vector<int64_t>{9, 10}));
}

TEST(HubLedger, RetentionPagingPropertyHoldsForRandomSequences) {
  std::mt19937_64 rng{2024};
  for (int round = 0; round < 300; ++round) {
    ledger_config cfg;
    cfg.retention = std::uniform_int_distribution<uint64_t>{0, 20}(rng);
    cfg.replay_limit = std::uniform_int_distribution<int>{1, 8}(rng);
    ledger_log log{cfg};
    auto n = std::uniform_int_distribution<int64_t>{0, 60}(rng);
    fill(log, n);
    auto floor
      = cfg.retention == 0
          ? 0
          : std::max<int64_t>(0, n - static_cast<int64_t>(cfg.retention));
    ASSERT_EQ(log.floor(), floor);
    auto after = std::uniform_int_distribution<int64_t>{0, n + 3}(rng);
    auto limit = std::uniform_int_distribution<int>{-1, 10}(rng);
    auto p = log.page(after, limit, {});
    auto lim
      = limit <= 0 || limit > cfg.replay_limit ? cfg.replay_limit : limit;
    auto first = std::max(after, floor) + 1;
    auto last = std::min<int64_t>(n, first + lim - 1);
    EXPECT_EQ(p.reset, after < floor) << "round " << round;
    EXPECT_EQ(ids(p), range(first, last)) << "round " << round;
    EXPECT_EQ(p.cursor, p.events.empty() ? n : last) << "round " << round;
    // Walking the pages from the floor visits every retained id once.
    std::vector<int64_t> walked;
    int64_t cursor = floor;
    for (int guard = 0; guard < 100; ++guard) {
      auto page = log.page(cursor, lim, {});
      EXPECT_FALSE(page.reset);
      for (const auto& e : page.events)
        walked.push_back(e->id);
      if (page.events.size() < static_cast<std::size_t>(lim))
        break;
      cursor = page.cursor;
    }
    EXPECT_EQ(walked, range(floor + 1, n)) << "round " << round;
  }
}

TEST(HubLedger, RetentionAndTrimNeverMoveTheFloorBack) {
  ledger_log log;
  fill(log, 20);
  log.trim_through(12);
  EXPECT_EQ(log.floor(), 12);
  log.trim_through(5);
  EXPECT_EQ(log.floor(), 12);
  log.set_retention(100);
  EXPECT_EQ(log.floor(), 12);
  log.set_retention(2);
  EXPECT_EQ(log.floor(), 18);
  log.trim_through(500);
  EXPECT_EQ(log.floor(), 20);
  EXPECT_EQ(log.size(), 0u);
  auto p = log.page(3, 10, {});
  EXPECT_TRUE(p.reset);
  EXPECT_TRUE(p.events.empty());
  EXPECT_EQ(p.cursor, 20);
}

TEST(HubLedger,
     CaseSixteenCursorBelowRetentionGetsResetAndThePageFromTheFloor) {
  // feeds.md case 16: the reader's cursor is 100, retention now starts at 150.
  ledger_log log;
  fill(log, 200);
  log.trim_through(149);
  auto p = log.page(100, 10, {});
  EXPECT_TRUE(p.reset);
  ASSERT_FALSE(p.events.empty());
  EXPECT_EQ(p.events.front()->id, 150);
  EXPECT_EQ(p.cursor, 159);
}

TEST(HubLedger, ARepeatedDedupeKeyReturnsTheEarlierEvent) {
  ledger_log log;
  auto a = log.append("s", "k", "{}", "key-1", 1, 0.0);
  auto b = log.append("s", "k", "{\"other\":true}", "key-1", 2, 0.0);
  EXPECT_FALSE(a.duplicate);
  EXPECT_TRUE(b.duplicate);
  EXPECT_EQ(b.event, a.event);
  EXPECT_EQ(log.head(), 1);
  auto c = log.append("s", "k", "{}", "", 2, 0.0);
  auto d = log.append("s", "k", "{}", "", 3, 0.0);
  EXPECT_FALSE(c.duplicate);
  EXPECT_FALSE(d.duplicate) << "an empty key never deduplicates";
  EXPECT_EQ(log.head(), 3);
}

TEST(HubLedger, DedupeIsAnLruOfCapacityKeys) {
  ledger_config cfg;
  cfg.dedupe_capacity = 2;
  ledger_log log{cfg};
  log.append("s", "k", "{}", "a", 1, 0.0);
  log.append("s", "k", "{}", "b", 2, 0.0);
  EXPECT_TRUE(log.append("s", "k", "{}", "a", 3, 0.0).duplicate); // refresh a
  log.append("s", "k", "{}", "c", 3, 0.0);                        // evicts b
  EXPECT_TRUE(log.append("s", "k", "{}", "a", 4, 0.0).duplicate);
  EXPECT_TRUE(log.append("s", "k", "{}", "c", 4, 0.0).duplicate);
  auto b = log.append("s", "k", "{}", "b", 4, 0.0);
  EXPECT_FALSE(b.duplicate);
  EXPECT_EQ(b.event->id, 4);
}

TEST(HubLedger, DedupeStillAnswersAfterTheEventWasTrimmed) {
  ledger_config cfg;
  cfg.retention = 1;
  ledger_log log{cfg};
  auto a = log.append("s", "k", "{}", "a", 1, 0.0);
  log.append("s", "k", "{}", "", 2, 0.0);
  EXPECT_EQ(log.get(1), nullptr);
  auto again = log.append("s", "k", "{}", "a", 3, 0.0);
  EXPECT_TRUE(again.duplicate);
  EXPECT_EQ(again.event->id, 1);
}

TEST(HubLedger, VisibilityLagHidesAnEventFromExactlyKPolls) {
  ledger_config cfg;
  cfg.visibility_lag_polls = 2;
  ledger_log log{cfg};
  log.append("s", "k", "{}", "", 1, 0.0);
  EXPECT_EQ(log.head(), 1);
  EXPECT_EQ(log.visible(), 0);
  auto p1 = log.page(0, 10, {});
  EXPECT_TRUE(p1.events.empty());
  EXPECT_EQ(p1.cursor, 0);
  auto p2 = log.page(0, 10, {});
  EXPECT_TRUE(p2.events.empty());
  auto p3 = log.page(0, 10, {});
  EXPECT_EQ(ids(p3), (std::vector<int64_t>{1}));
  EXPECT_EQ(log.visible(), 1);
  EXPECT_EQ(log.polls(), 3u);
}

TEST(HubLedger, VisibilityIsAGaplessPrefix) {
  ledger_config cfg;
  cfg.visibility_lag_polls = 1;
  ledger_log log{cfg};
  log.append("s", "k", "{}", "", 1, 0.0); // visible after 1 poll
  log.set_visibility_lag(0);
  log.append("s", "k", "{}", "", 2, 0.0); // visible at once, but after 1
  EXPECT_EQ(log.visible(), 0) << "2 may not show while 1 does not";
  EXPECT_TRUE(log.page(0, 10, {}).events.empty());
  EXPECT_EQ(ids(log.page(0, 10, {})), (std::vector<int64_t>{1, 2}));
}

TEST(HubLedger, LagZeroShowsEveryEventAtOnce) {
  ledger_log log;
  log.append("s", "k", "{}", "", 1, 0.0);
  EXPECT_EQ(log.visible(), 1);
  EXPECT_EQ(ids(log.page(0, 10, {})), (std::vector<int64_t>{1}));
}

TEST(HubLedger, APrefixFilteredPageMovesTheCursorPastNonMatchingEvents) {
  ledger_log log;
  log.append("orders/1", "k", "{}", "", 1, 0.0);
  log.append("users/1", "k", "{}", "", 2, 0.0);
  log.append("orders/2", "k", "{}", "", 3, 0.0);
  log.append("users/2", "k", "{}", "", 4, 0.0);
  auto p = log.page(0, 10, {"orders/"});
  EXPECT_EQ(ids(p), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(p.cursor, 4);
  auto full = log.page(0, 1, {"orders/"});
  EXPECT_EQ(ids(full), (std::vector<int64_t>{1}));
  EXPECT_EQ(full.cursor, 1);
  auto none = log.page(0, 10, {"invoices/"});
  EXPECT_TRUE(none.events.empty());
  EXPECT_EQ(none.cursor, 4);
}

TEST(HubSubject, PrefixMatchingIsAPlainStringPrefix) {
  EXPECT_TRUE(hub_subject_matches("a/b/c", {}));
  EXPECT_TRUE(hub_subject_matches("a/b/c", {""}));
  EXPECT_TRUE(hub_subject_matches("a/b/c", {"a/"}));
  EXPECT_TRUE(hub_subject_matches("a/b/c", {"x/", "a/b"}));
  EXPECT_TRUE(hub_subject_matches("a/bc", {"a/b"}));
  EXPECT_FALSE(hub_subject_matches("a/b/c", {"a/c"}));
  EXPECT_FALSE(hub_subject_matches("a", {"a/"}));
}
