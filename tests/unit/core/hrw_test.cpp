// Rendezvous assignment (core/hrw.hpp): the hash is pinned to values
// computed by an independent implementation (so it agrees across builds
// and processes), the assignment is balanced, and a join or a leave moves
// only the feeds that must move.

#include "core/hrw.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

using namespace outbound;

namespace {

std::vector<std::string> feeds(int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i)
    out.push_back("feed-" + std::to_string(i));
  return out;
}

std::vector<std::string> owners(const std::vector<std::string>& fs,
                                const std::vector<std::string>& members) {
  std::vector<std::string> out;
  for (const auto& f : fs)
    out.push_back(members[hrw_winner(f, members)]);
  return out;
}

} // namespace

TEST(Hrw, ScoreIsPinnedAcrossBuilds) {
  // Values from a separate Python transcription of the same definition.
  EXPECT_EQ(hrw_score("orders", "member-a:8080"), 0x8deedca3d8c50e60ULL);
  EXPECT_EQ(hrw_score("billing/invoices", "m1"), 0x6f44e301ae42d2b9ULL);
  EXPECT_EQ(hrw_score("", ""), 0x7bd3144f29c0cc9eULL);
}

TEST(Hrw, LengthPrefixSeparatesSplitsOfTheSameBytes) {
  EXPECT_EQ(hrw_score("ab", "c"), 0xafb5dedf7aee8b23ULL);
  EXPECT_EQ(hrw_score("a", "bc"), 0x72577830b6d9ad1dULL);
}

TEST(Hrw, EmptyMemberListHasNoWinner) {
  EXPECT_EQ(hrw_winner("f", {}), hrw_none);
}

TEST(Hrw, WinnerDoesNotDependOnListOrder) {
  std::vector<std::string> a{"m1", "m2", "m3", "m4"};
  std::vector<std::string> b{"m4", "m2", "m1", "m3"};
  for (const auto& f : feeds(500))
    EXPECT_EQ(a[hrw_winner(f, a)], b[hrw_winner(f, b)]) << f;
}

TEST(Hrw, ThreeMembersShare3000FeedsWithinTenPercent) {
  std::vector<std::string> members{"10.0.0.1:7000", "10.0.0.2:7000",
                                   "10.0.0.3:7000"};
  std::map<std::string, int> count;
  for (const auto& o : owners(feeds(3000), members))
    ++count[o];
  ASSERT_EQ(count.size(), 3u);
  for (const auto& kv : count) {
    EXPECT_GE(kv.second, 900) << kv.first;
    EXPECT_LE(kv.second, 1100) << kv.first;
  }
}

TEST(Hrw, LeavingMemberMovesOnlyItsOwnFeeds) {
  auto fs = feeds(3000);
  std::vector<std::string> before{"a", "b", "c", "d"};
  std::vector<std::string> after{"a", "b", "d"};
  auto o1 = owners(fs, before);
  auto o2 = owners(fs, after);
  int moved = 0;
  for (std::size_t i = 0; i < fs.size(); ++i) {
    if (o1[i] != "c")
      EXPECT_EQ(o1[i], o2[i]) << fs[i];
    else
      ++moved;
  }
  EXPECT_GT(moved, 600);
  EXPECT_LT(moved, 900);
}

TEST(Hrw, JoiningMemberTakesOnlyFeedsItNowWins) {
  auto fs = feeds(3000);
  std::vector<std::string> before{"a", "b", "c"};
  std::vector<std::string> after{"a", "b", "c", "d"};
  auto o1 = owners(fs, before);
  auto o2 = owners(fs, after);
  int moved = 0;
  for (std::size_t i = 0; i < fs.size(); ++i) {
    if (o1[i] != o2[i]) {
      EXPECT_EQ(o2[i], "d") << fs[i];
      ++moved;
    }
  }
  // About F / (N + 1) = 750, within 10 %.
  EXPECT_GE(moved, 675);
  EXPECT_LE(moved, 825);
}
