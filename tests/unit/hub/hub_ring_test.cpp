// Property tests of the hub's catch-up ring (the ring contract of
// hyperdjango's services/hypermanager/catchup.py): seeded random
// sequences, exact expectations.

#include "hub/catchup_ring.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

using namespace outbound;

namespace {

std::shared_ptr<const std::string> frame(int64_t n) {
  return std::make_shared<const std::string>("f" + std::to_string(n));
}

std::vector<int64_t> seqs(const std::vector<ring_entry>& es) {
  std::vector<int64_t> out;
  for (const auto& e : es)
    out.push_back(e.seq);
  return out;
}

std::vector<int64_t> range(int64_t first, int64_t last) {
  std::vector<int64_t> out;
  for (auto i = first; i <= last; ++i)
    out.push_back(i);
  return out;
}

const std::string epoch = "0123456789abcdef";

} // namespace

TEST(HubRing, SeqsAreGapFreeFromOneAndTheWindowIsTheLastCapacity) {
  std::mt19937_64 rng{42};
  for (int round = 0; round < 200; ++round) {
    std::size_t cap = std::uniform_int_distribution<std::size_t>{0, 40}(rng);
    catchup_ring ring{cap, epoch};
    auto n = std::uniform_int_distribution<int64_t>{0, 120}(rng);
    for (int64_t i = 1; i <= n; ++i)
      ASSERT_EQ(ring.publish("s/" + std::to_string(i % 3), frame(i)), i);
    EXPECT_EQ(ring.head(), n);
    auto expected_size = std::min<int64_t>(n, static_cast<int64_t>(cap));
    EXPECT_EQ(ring.size(), static_cast<std::size_t>(expected_size));
    EXPECT_EQ(ring.floor(), n - expected_size);
    int64_t prev = ring.floor();
    for (const auto& e : ring.entries()) {
      EXPECT_EQ(e.seq, prev + 1) << "round " << round;
      prev = e.seq;
    }
  }
}

TEST(HubRing, ResumeAnywhereInTheWindowReplaysExactlyTheRestUpToHead) {
  std::mt19937_64 rng{7};
  for (int round = 0; round < 300; ++round) {
    std::size_t cap = std::uniform_int_distribution<std::size_t>{1, 50}(rng);
    catchup_ring ring{cap, epoch};
    ASSERT_EQ(ring.resume("c1", std::nullopt, std::nullopt, {}).decision,
              resume_decision::resync_no_last_seq);
    auto n = std::uniform_int_distribution<int64_t>{0, 150}(rng);
    for (int64_t i = 1; i <= n; ++i)
      ring.publish("s", frame(i));
    auto last
      = std::uniform_int_distribution<int64_t>{ring.floor(), ring.head()}(rng);
    auto r = ring.resume("c1", last, epoch, {});
    ASSERT_EQ(r.decision, resume_decision::resume) << "round " << round;
    EXPECT_EQ(r.head, n);
    EXPECT_EQ(seqs(r.replay), range(last + 1, n)) << "round " << round;
  }
}

TEST(HubRing, ResumeAtTheFloorReplaysExactlyFloorToHead) {
  catchup_ring ring{10, epoch};
  ring.resume("c", std::nullopt, std::nullopt, {});
  for (int64_t i = 1; i <= 25; ++i)
    ring.publish("s", frame(i));
  ASSERT_EQ(ring.floor(), 15);
  auto r = ring.resume("c", 15, epoch, {});
  ASSERT_EQ(r.decision, resume_decision::resume);
  EXPECT_EQ(seqs(r.replay), range(16, 25));
  EXPECT_EQ(*r.replay.front().frame, "f16");
  EXPECT_EQ(*r.replay.back().frame, "f25");
}

TEST(HubRing, ResumeAtTheHeadReplaysNothingButIsNoResync) {
  catchup_ring ring{10, epoch};
  ring.resume("c", std::nullopt, std::nullopt, {});
  for (int64_t i = 1; i <= 4; ++i)
    ring.publish("s", frame(i));
  auto r = ring.resume("c", 4, epoch, {});
  EXPECT_EQ(r.decision, resume_decision::resume);
  EXPECT_FALSE(r.resync());
  EXPECT_TRUE(r.replay.empty());
}

TEST(HubRing,
     BelowTheFloorAboveTheHeadUnknownClientRingZeroForeignEpochResync) {
  std::mt19937_64 rng{99};
  for (int round = 0; round < 200; ++round) {
    std::size_t cap = std::uniform_int_distribution<std::size_t>{1, 30}(rng);
    catchup_ring ring{cap, epoch};
    ring.resume("known", std::nullopt, std::nullopt, {});
    auto n = std::uniform_int_distribution<int64_t>{
      static_cast<int64_t>(cap) + 1, 100}(rng);
    for (int64_t i = 1; i <= n; ++i)
      ring.publish("s", frame(i));
    ASSERT_GT(ring.floor(), 0);
    auto below
      = std::uniform_int_distribution<int64_t>{0, ring.floor() - 1}(rng);
    auto above = std::uniform_int_distribution<int64_t>{n + 1, n + 50}(rng);
    auto inside = std::uniform_int_distribution<int64_t>{ring.floor(), n}(rng);
    auto below_r = ring.resume("known", below, epoch, {});
    EXPECT_EQ(below_r.decision, resume_decision::resync_below_floor);
    EXPECT_TRUE(below_r.replay.empty());
    EXPECT_EQ(below_r.head, n);
    EXPECT_EQ(ring.resume("known", above, epoch, {}).decision,
              resume_decision::resync_above_head);
    EXPECT_EQ(ring.resume("stranger", inside, epoch, {}).decision,
              resume_decision::resync_unknown_client);
    EXPECT_EQ(ring.resume("known", inside, std::string{"ffffffffffffffff"}, {})
                .decision,
              resume_decision::resync_foreign_epoch);
    EXPECT_EQ(ring.resume("known", std::nullopt, epoch, {}).decision,
              resume_decision::resync_no_last_seq);
    // The window itself still resumes.
    EXPECT_EQ(ring.resume("known", inside, epoch, {}).decision,
              resume_decision::resume);
  }
}

TEST(HubRing, RingSizeZeroAlwaysResyncsButSeqStillAdvances) {
  catchup_ring ring{0, epoch};
  ring.resume("c", std::nullopt, std::nullopt, {});
  EXPECT_EQ(ring.publish("s", frame(1)), 1);
  EXPECT_EQ(ring.publish("s", frame(2)), 2);
  EXPECT_EQ(ring.size(), 0u);
  EXPECT_EQ(ring.floor(), 2);
  auto r = ring.resume("c", 2, epoch, {});
  EXPECT_EQ(r.decision, resume_decision::resync_ring_disabled);
  EXPECT_EQ(r.head, 2);
}

TEST(HubRing, NullEpochWithALastSeqOfAKnownClientResumes) {
  // catchup.py: the epoch must match "or be null"; the first connect is a
  // resync only because last_seq is null too.
  catchup_ring ring{8, epoch};
  ring.resume("c", std::nullopt, std::nullopt, {});
  ring.publish("s", frame(1));
  ring.publish("s", frame(2));
  auto r = ring.resume("c", 1, std::nullopt, {});
  EXPECT_EQ(r.decision, resume_decision::resume);
  EXPECT_EQ(seqs(r.replay), (std::vector<int64_t>{2}));
}

TEST(HubRing, ReplayIsFilteredByPrefixAndANonMatchingPrefixIsAnEmptyResume) {
  catchup_ring ring{16, epoch};
  ring.resume("c", std::nullopt, std::nullopt, {"orders/"});
  ring.publish("orders/1", frame(1));
  ring.publish("users/1", frame(2));
  ring.publish("orders/2", frame(3));
  auto r = ring.resume("c", 0, epoch, {"orders/"});
  ASSERT_EQ(r.decision, resume_decision::resume);
  EXPECT_EQ(seqs(r.replay), (std::vector<int64_t>{1, 3}));
  auto none = ring.resume("c", 0, epoch, {"invoices/"});
  EXPECT_EQ(none.decision, resume_decision::resume);
  EXPECT_TRUE(none.replay.empty());
}

TEST(HubRing, RestartGivesANewSeqSpaceAndForgetsClients) {
  catchup_ring ring{8, epoch};
  ring.resume("c", std::nullopt, std::nullopt, {});
  for (int64_t i = 1; i <= 5; ++i)
    ring.publish("s", frame(i));
  ring.restart("fedcba9876543210");
  EXPECT_EQ(ring.epoch(), "fedcba9876543210");
  EXPECT_EQ(ring.head(), 0);
  EXPECT_EQ(ring.size(), 0u);
  EXPECT_FALSE(ring.known_client("c"));
  EXPECT_EQ(ring.publish("s", frame(1)), 1);
  // A stale last_seq inside the new range: the old epoch gives it away.
  EXPECT_EQ(ring.resume("c", 1, epoch, {}).decision,
            resume_decision::resync_foreign_epoch);
  // Same client, the new epoch, but registered only by that resume: it is
  // known now and resumes.
  EXPECT_EQ(ring.resume("c", 1, std::string{"fedcba9876543210"}, {}).decision,
            resume_decision::resume);
}

TEST(HubRing, RestartWithoutEpochInTheSubscribeIsStillAnUnknownClient) {
  catchup_ring ring{8, epoch};
  ring.resume("c", std::nullopt, std::nullopt, {});
  ring.publish("s", frame(1));
  ring.restart("fedcba9876543210");
  ring.publish("s", frame(1));
  EXPECT_EQ(ring.resume("c", 1, std::nullopt, {}).decision,
            resume_decision::resync_unknown_client);
}

TEST(HubRing, ClientRegistryEvictsTheLeastRecentlyUsed) {
  catchup_ring ring{8, epoch, 2};
  ring.resume("a", std::nullopt, std::nullopt, {});
  ring.resume("b", std::nullopt, std::nullopt, {});
  ring.resume("a", std::nullopt, std::nullopt, {}); // refresh a
  ring.resume("c", std::nullopt, std::nullopt, {}); // evicts b
  EXPECT_TRUE(ring.known_client("a"));
  EXPECT_FALSE(ring.known_client("b"));
  EXPECT_TRUE(ring.known_client("c"));
  EXPECT_EQ(ring.clients(), 2u);
}

TEST(HubRing, EmptyClientIdIsNeverKnown) {
  catchup_ring ring{8, epoch};
  ring.resume("", std::nullopt, std::nullopt, {});
  ring.publish("s", frame(1));
  EXPECT_EQ(ring.resume("", 0, epoch, {}).decision,
            resume_decision::resync_unknown_client);
}

TEST(HubRing, EpochsAreSixteenHexCharsAndFollowTheSeed) {
  std::mt19937_64 a{5};
  std::mt19937_64 b{5};
  auto e1 = make_hub_epoch(a);
  auto e2 = make_hub_epoch(a);
  EXPECT_EQ(e1.size(), 16u);
  EXPECT_EQ(e1.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(e1, e2);
  EXPECT_EQ(make_hub_epoch(b), e1);
}

TEST(HubRing, DecisionNames) {
  EXPECT_STREQ(to_string(resume_decision::resume), "resume");
  EXPECT_STREQ(to_string(resume_decision::resync_below_floor), "below_floor");
  EXPECT_STREQ(to_string(resume_decision::resync_foreign_epoch),
               "foreign_epoch");
}
