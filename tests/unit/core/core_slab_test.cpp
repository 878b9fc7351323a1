// core::slab: generational ids over a vector and a free list.

#include "core/slab.hpp"

#include <gtest/gtest.h>

#include <map>
#include <random>
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
