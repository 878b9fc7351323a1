// core::node_cache: erased nodes of a std map kept and reused.

#include "core/node_cache.hpp"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>

using namespace outbound;

namespace {

// A value with a resource, so a test sees that a spare node holds none of
// the resources of the value it carried.
struct tracked {
  std::shared_ptr<int> resource;
  std::string text;

  tracked() = default;
  explicit tracked(std::string t)
    : resource(std::make_shared<int>(1)), text(std::move(t)) {
  }
};

} // namespace

TEST(CoreNodeCache, ReusesTheNodeOfAnErasedEntry) {
  std::unordered_map<int, tracked> m;
  node_cache<std::unordered_map<int, tracked>> cache{4};
  auto [i, added] = cache.emplace(m, 1, "one");
  ASSERT_TRUE(added);
  const auto* node_of_one = &*i; // the node's value lives at a fixed address
  std::weak_ptr<int> res = i->second.resource;
  cache.erase(m, i);
  EXPECT_TRUE(m.empty());
  EXPECT_EQ(cache.spare(), 1u);
  EXPECT_TRUE(res.expired()) << "a spare node keeps no resource";
  auto [j, added2] = cache.emplace(m, 2, "two");
  ASSERT_TRUE(added2);
  EXPECT_EQ(&*j, node_of_one) << "the spare node was reused";
  EXPECT_EQ(cache.spare(), 0u);
  EXPECT_EQ(m.at(2).text, "two");
  EXPECT_EQ(m.count(1), 0u);
}

TEST(CoreNodeCache, ADuplicateKeyInsertsNothingAndKeepsTheNode) {
  std::unordered_map<int, tracked> m;
  node_cache<std::unordered_map<int, tracked>> cache{4};
  cache.emplace(m, 1, "one");
  auto [k, added] = cache.emplace(m, 1, "again");
  EXPECT_FALSE(added);
  EXPECT_EQ(k->second.text, "one");
  auto two = cache.emplace(m, 2, "two").first;
  cache.erase(m, two);
  ASSERT_EQ(cache.spare(), 1u);
  auto [l, added2] = cache.emplace(m, 1, "from a spare node");
  EXPECT_FALSE(added2);
  EXPECT_EQ(l->second.text, "one");
  EXPECT_EQ(cache.spare(), 1u) << "the spare node went back";
  EXPECT_EQ(m.size(), 1u);
}

TEST(CoreNodeCache, KeepsAtMostItsCapacity) {
  std::map<int, tracked> m;
  node_cache<std::map<int, tracked>> cache{2};
  for (int k = 0; k < 5; ++k)
    cache.emplace(m, k, std::to_string(k));
  while (!m.empty())
    cache.erase(m, m.begin());
  EXPECT_EQ(cache.spare(), 2u);
  node_cache<std::map<int, tracked>> none{0};
  none.emplace(m, 1, "x");
  none.erase(m, m.begin());
  EXPECT_EQ(none.spare(), 0u);
}

// A multimap (no insert_return_type) against a model: the same entries in
// the same order over random inserts and erases, duplicates included.
TEST(CoreNodeCache, AMultimapAgreesWithAModelUnderRandomUse) {
  using mm = std::multimap<int, int>;
  mm m;
  mm model;
  node_cache<mm> cache{8};
  std::mt19937 rng{7};
  int next = 0;
  for (int step = 0; step < 20000; ++step) {
    if (m.empty() || rng() % 3 != 0) {
      int key = static_cast<int>(rng() % 50);
      auto [pos, added] = cache.emplace(m, key, next);
      ASSERT_TRUE(added);
      ASSERT_EQ(pos->first, key);
      ASSERT_EQ(pos->second, next);
      model.emplace(key, next);
      ++next;
    } else {
      auto i = m.begin();
      std::advance(i, rng() % m.size());
      auto range = model.equal_range(i->first);
      auto j = range.first;
      while (j != range.second && j->second != i->second)
        ++j;
      ASSERT_NE(j, range.second);
      model.erase(j);
      cache.erase(m, i);
    }
    ASSERT_LE(cache.spare(), 8u);
  }
  ASSERT_EQ(m.size(), model.size());
  EXPECT_TRUE(std::equal(m.begin(), m.end(), model.begin()));
}
