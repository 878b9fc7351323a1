// core::slab: generational ids over a vector and a free list.

#include "core/slab.hpp"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <string>

using namespace outbound;

TEST(CoreSlab, IdsAreNeverReusedAndStaleIdsFindNothing) {
  slab<std::string> s;
  auto a = s.insert("a");
  auto b = s.insert("b");
  EXPECT_NE(a, 0u);
  EXPECT_NE(a, b);
  ASSERT_NE(s.find(a), nullptr);
  EXPECT_EQ(*s.find(a), "a");
  EXPECT_EQ(s.take(a), "a");
  EXPECT_EQ(s.find(a), nullptr);
  auto c = s.insert("c"); // reuses a's index with the next generation
  EXPECT_EQ(static_cast<uint32_t>(c), static_cast<uint32_t>(a));
  EXPECT_NE(c, a);
  EXPECT_EQ(s.find(a), nullptr);
  EXPECT_EQ(*s.find(c), "c");
  EXPECT_EQ(s.find(uint64_t{1} << 32 | 99), nullptr) << "index never used";
  EXPECT_EQ(s.find(0), nullptr);
  EXPECT_EQ(s.size(), 2u);
  s.erase(b);
  s.erase(c);
  EXPECT_TRUE(s.empty());
}

// Against a std::map model over random inserts and erases: the same values
// under the same ids, every id issued once, for_each visits exactly the
// values held.
TEST(CoreSlab, AgreesWithAMapUnderRandomUse) {
  std::mt19937_64 rng{42};
  slab<int> s;
  std::map<uint64_t, int> model;
  std::map<uint64_t, bool> issued;
  for (int step = 0; step < 20000; ++step) {
    if (model.empty() || rng() % 3 != 0) {
      int v = static_cast<int>(rng() % 1000);
      auto id = s.insert(v);
      ASSERT_TRUE(issued.emplace(id, true).second) << "id issued twice";
      model[id] = v;
    } else {
      auto it = model.begin();
      std::advance(it, static_cast<std::ptrdiff_t>(rng() % model.size()));
      ASSERT_NE(s.find(it->first), nullptr);
      EXPECT_EQ(s.take(it->first), it->second);
      EXPECT_EQ(s.find(it->first), nullptr);
      model.erase(it);
    }
    ASSERT_EQ(s.size(), model.size());
  }
  std::map<uint64_t, int> seen;
  s.for_each([&](uint64_t id, int& v) { seen[id] = v; });
  EXPECT_EQ(seen, model);
}

TEST(CoreSlab, EmplaceConstructsInPlaceAndFirstIdNamesTheLowestIndex) {
  slab<std::string> s;
  EXPECT_EQ(s.first_id(), 0u) << "empty";
  auto a = s.emplace(3, 'x');
  auto b = s.emplace();
  EXPECT_EQ(*s.find(a), "xxx");
  EXPECT_EQ(*s.find(b), "");
  EXPECT_EQ(s.first_id(), a);
  s.erase(a);
  EXPECT_EQ(s.first_id(), b);
  auto c = s.emplace("c"); // a's index again
  EXPECT_EQ(s.first_id(), c);
  s.erase(c);
  s.erase(b);
  EXPECT_EQ(s.first_id(), 0u);
}

TEST(CoreSlab, FreeIndicesAreReusedLowestFirst) {
  slab<int> s;
  std::vector<uint64_t> ids;
  for (int i = 0; i < 8; ++i)
    ids.push_back(s.insert(i));
  s.erase(ids[5]);
  s.erase(ids[2]);
  s.erase(ids[6]);
  EXPECT_EQ(static_cast<uint32_t>(s.insert(10)), 2u);
  EXPECT_EQ(static_cast<uint32_t>(s.insert(11)), 5u);
  EXPECT_EQ(static_cast<uint32_t>(s.insert(12)), 6u);
  EXPECT_EQ(static_cast<uint32_t>(s.insert(13)), 8u) << "none free: appended";
}

// The same across many words of the free bitmap (64 indices a word, 4096
// a summary word): each insert takes the lowest free index a set of free
// indices names.
TEST(CoreSlab, TheLowestFreeIndexIsReusedAcrossManyBitmapWords) {
  std::mt19937_64 rng{4};
  slab<int> s;
  std::vector<uint64_t> id_of; // by index
  for (int i = 0; i < 9000; ++i)
    id_of.push_back(s.insert(i));
  std::set<uint32_t> free;
  for (int round = 0; round < 20000; ++round) {
    if (free.empty() || (rng() % 2 == 0 && free.size() < 8000)) {
      auto i = static_cast<uint32_t>(rng() % id_of.size());
      if (free.count(i))
        continue;
      s.erase(id_of[i]);
      free.insert(i);
    } else {
      auto id = s.insert(round);
      auto i = static_cast<uint32_t>(id);
      ASSERT_EQ(i, *free.begin()) << "round " << round;
      free.erase(free.begin());
      id_of[i] = id;
    }
  }
  EXPECT_EQ(s.size(), id_of.size() - free.size());
}

// After a burst the slab gives its memory back, keeps every value held
// under its id, and never issues an id of the burst again.
TEST(CoreSlab, AfterABurstTheFreeEndIsReleasedAndNoOldIdComesBack) {
  slab<std::string> s;
  std::vector<uint64_t> burst;
  for (int i = 0; i < 20000; ++i)
    burst.push_back(s.insert("v" + std::to_string(i)));
  EXPECT_EQ(s.capacity(), 20000u);
  // A few stay (at low indices, and one near the end for a while).
  std::map<uint64_t, std::string> kept;
  for (int i : {3, 100, 900, 19990})
    kept[burst[static_cast<std::size_t>(i)]] = "v" + std::to_string(i);
  for (auto id : burst)
    if (!kept.count(id))
      s.erase(id);
  EXPECT_EQ(s.size(), 4u);
  // The value near the end holds the tail: trimmed down to it at most.
  EXPECT_LE(s.capacity(), 20000u);
  s.erase(burst[19990]);
  kept.erase(burst[19990]);
  // Turnover after the burst: a steady load of 4 more values in and out.
  std::set<uint64_t> issued(burst.begin(), burst.end());
  for (int round = 0; round < 50000; ++round) {
    auto id = s.insert("steady");
    EXPECT_TRUE(issued.insert(id).second) << "id issued twice: " << id;
    s.erase(id);
  }
  EXPECT_LE(s.capacity(), slab<std::string>::trim_above)
    << "the free end was released";
  for (auto& [id, v] : kept) {
    ASSERT_NE(s.find(id), nullptr);
    EXPECT_EQ(*s.find(id), v);
  }
  for (auto id : burst)
    if (!kept.count(id))
      EXPECT_EQ(s.find(id), nullptr);
  // Ids issued after the release never repeat one of the burst, also at
  // indices the release dropped and the slab grows into again.
  std::vector<uint64_t> again;
  for (int i = 0; i < 5000; ++i) {
    auto id = s.insert("again");
    EXPECT_TRUE(issued.insert(id).second) << "id issued twice: " << id;
    again.push_back(id);
  }
  for (auto id : burst)
    if (!kept.count(id))
      EXPECT_EQ(s.find(id), nullptr);
}

// Bursts and drains, so that trims run between ordinary steps: the same
// values under the same ids as a map, every id issued once, every erased
// id finds nothing, and memory follows the load.
TEST(CoreSlab, AgreesWithAMapThroughBurstsAndTrims) {
  std::mt19937_64 rng{9};
  slab<std::string> s;
  std::map<uint64_t, std::string> model;
  std::set<uint64_t> issued;
  std::vector<uint64_t> gone;
  std::size_t max_capacity = 0;
  for (int phase = 0; phase < 12; ++phase) {
    bool burst = phase % 2 == 0;
    auto target = burst ? 2000 + rng() % 6000 : rng() % 40;
    while (burst ? model.size() < target : model.size() > target) {
      bool add = burst ? rng() % 4 != 0 : rng() % 4 == 0;
      if (add || model.empty()) {
        auto v = std::to_string(rng());
        auto id = s.insert(v);
        ASSERT_TRUE(issued.insert(id).second) << "id issued twice: " << id;
        model[id] = v;
      } else {
        auto it = model.begin();
        std::advance(it, static_cast<std::ptrdiff_t>(rng() % model.size()));
        ASSERT_EQ(s.take(it->first), it->second);
        gone.push_back(it->first);
        model.erase(it);
      }
      ASSERT_EQ(s.size(), model.size());
      max_capacity = std::max(max_capacity, s.capacity());
    }
    for (auto& [id, v] : model) {
      ASSERT_NE(s.find(id), nullptr);
      ASSERT_EQ(*s.find(id), v);
    }
    for (auto id : gone)
      ASSERT_EQ(s.find(id), nullptr);
  }
  EXPECT_GT(max_capacity, slab<std::string>::trim_above);
  // Once everything left is gone, turnover brings the slab to its floor.
  for (auto& [id, v] : model)
    s.erase(id);
  for (std::size_t i = 0; i < 2 * max_capacity; ++i) {
    auto id = s.insert("x");
    ASSERT_TRUE(issued.insert(id).second) << "id issued twice: " << id;
    s.erase(id);
  }
  EXPECT_LE(s.capacity(), slab<std::string>::trim_above);
}
