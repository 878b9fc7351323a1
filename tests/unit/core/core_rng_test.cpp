// The library's one generator (core/rng.hpp): exact known outputs
// (computed with an independent Python transcription of the reference C code
// at https://prng.di.unimi.it/), determinism per seed, and the
// UniformRandomBitGenerator shape the distributions need.

#include "core/rng.hpp"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <type_traits>

using namespace outbound;
using core::splitmix64_next;

TEST(CoreRng, Splitmix64MatchesTheReferenceOutput) {
  uint64_t s = 0;
  EXPECT_EQ(splitmix64_next(s), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(s, 0x9e3779b97f4a7c15ULL);
}

TEST(CoreRng, XoshiroMatchesTheReferenceOutputs) {
  core::rng zero{0};
  EXPECT_EQ(zero(), 0x99ec5f36cb75f2b4ULL);
  EXPECT_EQ(zero(), 0xbf6e1f784956452aULL);
  EXPECT_EQ(zero(), 0x1a5f849d4933e6e0ULL);
  core::rng g{42};
  EXPECT_EQ(g(), 0x15780b2e0c2ec716ULL);
  EXPECT_EQ(g(), 0x6104d9866d113a7eULL);
  EXPECT_EQ(g(), 0xae17533239e499a1ULL);
  core::rng d;
  EXPECT_EQ(d(), 0x99ec5f36cb75f2b4ULL); // default-constructed = seed 0
}

TEST(CoreRng, SameSeedSameSequenceReseedRestarts) {
  core::rng a{7}, b{7}, c{8};
  EXPECT_TRUE(a == b);
  EXPECT_FALSE(a == c);
  for (int i = 0; i < 100; ++i)
    ASSERT_EQ(a(), b());
  a.seed(42);
  EXPECT_EQ(a(), 0x15780b2e0c2ec716ULL);
}

TEST(CoreRng, IsAUniformRandomBitGeneratorUsableWithDistributions) {
  static_assert(std::is_same_v<core::rng::result_type, uint64_t>);
  static_assert(core::rng::min() == 0);
  static_assert(core::rng::max() == UINT64_MAX);
  core::rng g{3};
  std::uniform_real_distribution<double> u{0.0, 0.2};
  double lo = 1, hi = -1;
  for (int i = 0; i < 10000; ++i) {
    double x = u(g);
    ASSERT_GE(x, 0.0);
    ASSERT_LT(x, 0.2);
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  EXPECT_LT(lo, 0.001);
  EXPECT_GT(hi, 0.199);
  // Consecutive per-call seeds (as the service client hands them out) give
  // distinct first outputs.
  std::set<uint64_t> firsts;
  for (uint64_t s = 0; s < 1000; ++s)
    firsts.insert(core::rng{s}());
  EXPECT_EQ(firsts.size(), 1000u);
}
