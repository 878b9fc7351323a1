// The hub's ledger log: gap-free ids, replay paging, the retention
// floor and its reset, dedupe, and the visibility-lag fault. Seeded random
// sequences where a property is checked, exact values everywhere.

#include "hub/ledger_log.hpp"
#include "hub/subject.hpp"

#include <gtest/gtest.h>

#include <algorithm>
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

namespace {

// A random subject from a small tree: prefixes of one another ("a", "a/",
// "a/1") and siblings, so that prefixes overlap and match 0..many subjects.
std::string random_subject(std::mt19937_64& rng, int spread) {
  static const char* const roots[]
    = {"a", "a/", "ab", "b/", "feed-1/", "feed-10/"};
  std::uniform_int_distribution<int> root{0, 5};
  std::uniform_int_distribution<int> leaf{0, spread};
  auto s = std::string{roots[root(rng)]};
  auto n = leaf(rng);
  if (n > 0)
    s += std::to_string(n);
  return s;
}

std::vector<std::string> random_prefixes(std::mt19937_64& rng, int spread) {
  std::uniform_int_distribution<int> count{0, 3};
  std::uniform_int_distribution<int> cut{0, 3};
  std::vector<std::string> out;
  for (int i = count(rng); i > 0; --i) {
    auto s = random_subject(rng, spread);
    auto c = static_cast<std::size_t>(cut(rng));
    out.push_back(s.substr(0, s.size() > c ? s.size() - c : 0));
  }
  return out;
}

} // namespace

// The per-subject index (pages whose prefixes match a few subjects) and the
// scan (everything else) give the page a scan of every retained visible
// event gives: the same events, cursor and reset, under appends, trims and
// the visibility lag. Spread 3 keeps most pages on the index, spread 200
// pushes prefixes past max_indexed_subjects so both paths run.
TEST(HubLedger, IndexedPagesEqualAScanOfTheLedger) {
  // Spread 200 without retention: hundreds of subjects under one root, so
  // short prefixes exceed max_indexed_subjects and scan.
  for (auto [spread, retain] :
       {std::pair{3, true}, std::pair{200, true}, std::pair{200, false}}) {
    std::mt19937_64 rng{static_cast<uint64_t>(41 + spread + retain)};
    ledger_log log{ledger_config{0, 20, 4096, 0}};
    std::uniform_int_distribution<int> op{0, 99};
    std::uniform_int_distribution<int> lag{0, 2};
    std::uniform_int_distribution<int> lim{-1, 25};
    int pages = 0;
    for (int step = 0; step < 20000; ++step) {
      auto o = op(rng);
      if (o < 55) {
        log.append(random_subject(rng, spread), "k", "{}", "", 0, 0.0);
      } else if (o < 58) {
        log.set_visibility_lag(lag(rng));
      } else if (o < 60) {
        if (retain) {
          std::uniform_int_distribution<int64_t> to{log.floor(), log.head()};
          log.trim_through(to(rng));
        }
      } else if (o < 61) {
        if (retain)
          log.set_retention(static_cast<uint64_t>(lim(rng) + 40));
      } else {
        std::uniform_int_distribution<int64_t> at{0, log.head() + 2};
        auto after = at(rng);
        auto limit = lim(rng);
        auto prefixes = random_prefixes(rng, spread);
        auto p = log.page(after, limit, prefixes);
        ++pages;
        // The model: page() advanced the visible ceiling before reading,
        // and nothing moves it after, so visible() is the page's ceiling.
        auto want_lim = static_cast<std::size_t>(log.effective_limit(limit));
        std::vector<int64_t> want;
        for (auto id = std::max(after, log.floor()) + 1;
             id <= log.visible() && want.size() < want_lim; ++id)
          if (hub_subject_matches(log.get(id)->subject, prefixes))
            want.push_back(id);
        ASSERT_EQ(ids(p), want) << "step " << step << " after " << after;
        ASSERT_EQ(p.reset, after < log.floor());
        ASSERT_EQ(p.cursor,
                  want.size() == want_lim ? want.back() : log.visible())
          << "step " << step;
      }
      // Every retained event is indexed once, none trimmed is left.
      ASSERT_EQ(log.indexed_ids(), log.size()) << "step " << step;
    }
    EXPECT_GT(pages, 7000);
  }
}

// The fan-out index finds exactly the members whose prefixes match a
// subject, each once, through inserts, re-inserts with other prefixes and
// erases.
TEST(HubSubject, PrefixIndexFindsExactlyTheMatchingMembers) {
  std::mt19937_64 rng{7};
  struct member {
    int id;
    std::vector<std::string> prefixes;
    bool in = false;
  };
  std::vector<member> members;
  for (int i = 0; i < 60; ++i)
    members.push_back({i, {}});
  prefix_index<member> index;
  std::uniform_int_distribution<std::size_t> pick{0, members.size() - 1};
  std::uniform_int_distribution<int> op{0, 9};
  for (int step = 0; step < 20000; ++step) {
    auto& m = members[pick(rng)];
    auto o = op(rng);
    if (o < 3) {
      m.prefixes = random_prefixes(rng, 4);
      m.in = true;
      index.insert(&m, m.prefixes);
    } else if (o < 4) {
      EXPECT_EQ(index.erase(&m), m.in);
      m.in = false;
    } else {
      auto subject = random_subject(rng, 4);
      std::vector<int> got;
      index.for_each_match(subject, [&](member* x) { got.push_back(x->id); });
      std::sort(got.begin(), got.end());
      std::vector<int> want;
      for (const auto& x : members)
        if (x.in && hub_subject_matches(subject, x.prefixes))
          want.push_back(x.id);
      ASSERT_EQ(got, want) << "step " << step << " subject " << subject;
    }
  }
  std::size_t in = 0;
  for (const auto& x : members)
    in += x.in ? 1 : 0;
  EXPECT_EQ(index.size(), in);
  index.clear();
  std::vector<member*> none;
  index.for_each_match("a/1", [&](member* x) { none.push_back(x); });
  EXPECT_TRUE(none.empty());
}
