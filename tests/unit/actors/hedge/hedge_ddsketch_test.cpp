#include "actors/hedge/ddsketch.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <vector>

using namespace outbound;
using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using std::chrono::seconds;

namespace {

/// The inverse empirical CDF of sorted `xs`: rank ⌈q·n⌉ (at least 1).
double exact_quantile(const std::vector<double>& xs, double q) {
  auto n = xs.size();
  auto rank = static_cast<std::size_t>(std::ceil(q * n - q * n * 1e-12));
  rank = std::clamp<std::size_t>(rank, 1, n);
  return xs[rank - 1];
}

const hedge_time t0 = hedge_time{} + std::chrono::hours(1);

} // namespace

TEST(DDSketch, EmptySketchHasNoQuantile) {
  ddsketch s;
  EXPECT_FALSE(s.quantile(0.5));
  EXPECT_FALSE(s.quantile(0.0));
  EXPECT_FALSE(s.quantile(1.0));
  EXPECT_FALSE(s.min());
  EXPECT_EQ(s.count(), 0u);
}

TEST(DDSketch, SmallSampleRanksAreCeilQTimesN) {
  // hedging.md case 11 (rust-sketches-ddsketch #3).
  ddsketch s{0.01};
  for (double x : {0.010, 0.020, 0.030, 0.040})
    ASSERT_TRUE(s.insert(x));
  auto p60 = *s.quantile(0.6);
  EXPECT_NEAR(p60, 0.030, 0.030 * 0.01);
  EXPECT_EQ(*s.quantile(0.0), 0.010);
  EXPECT_EQ(*s.quantile(1.0), 0.040);
  EXPECT_NEAR(*s.quantile(0.25), 0.010, 0.0001);
  EXPECT_NEAR(*s.quantile(0.26), 0.020, 0.0002);
  EXPECT_NEAR(*s.quantile(0.5), 0.020, 0.0002);
  EXPECT_NEAR(*s.quantile(0.75), 0.030, 0.0003);
}

TEST(DDSketch, SingleSampleIsReturnedExactly) {
  // hedging.md case 11: sketches-go returned 27.5 for p100 of {28}.
  ddsketch s{0.01};
  s.insert(0.028);
  EXPECT_EQ(*s.quantile(0.5), 0.028);
  EXPECT_EQ(*s.quantile(0.95), 0.028);
  EXPECT_EQ(*s.quantile(1.0), 0.028);
  EXPECT_EQ(*s.quantile(0.0), 0.028);
}

TEST(DDSketch, OneToHundredMsGivesP90Within85And95) {
  ddsketch s;
  for (int i = 1; i <= 100; ++i)
    s.insert(i / 1000.0);
  auto p90 = *s.quantile(0.9);
  EXPECT_GE(p90, 0.085);
  EXPECT_LE(p90, 0.095);
  EXPECT_NEAR(p90, 0.090, 0.090 * 0.01);
}

TEST(DDSketch, ZeroAndSubResolutionValuesAreCounted) {
  ddsketch s;
  s.insert(0.0);
  s.insert(1e-12);
  s.insert(0.5);
  EXPECT_EQ(s.count(), 3u);
  EXPECT_EQ(s.zero_count(), 2u);
  EXPECT_EQ(*s.quantile(0.0), 0.0);
  EXPECT_EQ(*s.quantile(0.5), 0.0); // rank 2 is in the zero bucket
  EXPECT_NEAR(*s.quantile(0.67), 0.5, 0.005);
  EXPECT_EQ(*s.quantile(1.0), 0.5);
}

TEST(DDSketch, RejectsNegativeNanAndInfinity) {
  ddsketch s;
  EXPECT_FALSE(s.insert(-1.0));
  EXPECT_FALSE(s.insert(std::nan("")));
  EXPECT_FALSE(s.insert(INFINITY));
  EXPECT_EQ(s.count(), 0u);
  s.insert(1.0);
  EXPECT_FALSE(s.quantile(-0.1));
  EXPECT_FALSE(s.quantile(1.1));
  EXPECT_FALSE(s.quantile(std::nan("")));
}

TEST(DDSketch, RelativeErrorHoldsOnRandomData) {
  std::mt19937_64 rng{7};
  std::lognormal_distribution<double> lognormal{std::log(0.005), 1.2};
  std::uniform_real_distribution<double> wide{-6.0, 3.0};
  for (int round = 0; round < 2; ++round) {
    ddsketch s{0.01};
    std::vector<double> xs;
    for (int i = 0; i < 20000; ++i) {
      double x = round == 0 ? lognormal(rng) : std::pow(10.0, wide(rng));
      xs.push_back(x);
      s.insert(x);
    }
    std::sort(xs.begin(), xs.end());
    for (double q : {0.0, 0.001, 0.01, 0.1, 0.25, 0.5, 0.6, 0.75, 0.9, 0.95,
                     0.99, 0.999, 1.0}) {
      double exact = exact_quantile(xs, q);
      double est = *s.quantile(q);
      EXPECT_LE(std::abs(est - exact), 0.01 * exact * (1 + 1e-9))
        << "round " << round << " q " << q;
    }
  }
}

// union_quantile reads the merge without building it: exactly the merged
// sketch's quantile, also when the union is wider than the bin limit and
// the lowest bins collapse, with zero-bucket samples, and when either side
// is empty.
TEST(DDSketch, UnionQuantileEqualsTheQuantileOfTheMerge) {
  std::mt19937_64 rng{5};
  std::uniform_real_distribution<double> decades{-10.0, 2.0};
  std::uniform_real_distribution<double> unit{0.0, 1.0};
  for (int round = 0; round < 300; ++round) {
    std::size_t limit = round % 3 == 0 ? 8 + rng() % 40 : 2048;
    ddsketch a{0.01, limit};
    ddsketch b{0.01, limit};
    // Each side draws from its own band, so the union may be much wider
    // than either.
    double a_lo = decades(rng), b_lo = decades(rng);
    int na = static_cast<int>(rng() % 200), nb = static_cast<int>(rng() % 200);
    for (int i = 0; i < na; ++i)
      a.insert(std::pow(10.0, a_lo + 2.0 * unit(rng)));
    for (int i = 0; i < nb; ++i)
      b.insert(std::pow(10.0, b_lo + 2.0 * unit(rng)));
    if (round % 7 == 0)
      a.insert(0.0);
    ddsketch merged = a;
    merged.merge(b);
    std::vector<double> qs{0.0, 0.01, 0.25, 0.5, 0.9, 0.95, 0.99, 1.0};
    for (int i = 0; i < 20; ++i)
      qs.push_back(unit(rng));
    for (double q : qs)
      ASSERT_EQ(ddsketch::union_quantile(a, b, q), merged.quantile(q))
        << "round " << round << " q " << q << " limit " << limit << " na " << na
        << " nb " << nb;
    EXPECT_FALSE(ddsketch::union_quantile(a, b, 1.5));
  }
  ddsketch empty;
  EXPECT_FALSE(ddsketch::union_quantile(empty, empty, 0.5));
  // The merge takes a's bin limit also when a is empty or the two limits
  // differ (b's bins go in through a's add_to_bin).
  for (int round = 0; round < 200; ++round) {
    ddsketch a{0.01, 8 + rng() % 64};
    ddsketch b{0.01, 2048};
    double lo = decades(rng);
    int na = round % 2 == 0 ? 0 : static_cast<int>(rng() % 50);
    for (int i = 0; i < na; ++i)
      a.insert(std::pow(10.0, lo + 3.0 * unit(rng)));
    for (int i = 0; i < 300; ++i)
      b.insert(std::pow(10.0, lo + 3.0 * unit(rng)));
    ddsketch merged = a;
    merged.merge(b);
    for (double q : {0.0, 0.01, 0.3, 0.5, 0.95, 1.0})
      ASSERT_EQ(ddsketch::union_quantile(a, b, q), merged.quantile(q))
        << "round " << round << " q " << q << " na " << na;
  }
}

TEST(DDSketch, MergeEqualsInsertingAll) {
  std::mt19937_64 rng{11};
  std::lognormal_distribution<double> d{std::log(0.01), 2.0};
  ddsketch a, b, all;
  for (int i = 0; i < 5000; ++i) {
    double x = d(rng);
    (i % 3 == 0 ? a : b).insert(x);
    all.insert(x);
  }
  a.insert(0.0);
  all.insert(0.0);
  ASSERT_TRUE(a.merge(b));
  EXPECT_EQ(a.count(), all.count());
  EXPECT_EQ(a.zero_count(), all.zero_count());
  EXPECT_EQ(a.min(), all.min());
  EXPECT_EQ(a.max(), all.max());
  for (double q = 0.0; q <= 1.0; q += 0.01)
    EXPECT_EQ(a.quantile(q), all.quantile(q)) << q;
  ddsketch other_alpha{0.02};
  EXPECT_FALSE(a.merge(other_alpha));
}

TEST(DDSketch, MergeEqualsInsertingAllAcrossACollapse) {
  ddsketch a{0.01, 64}, b{0.01, 64}, all{0.01, 64};
  for (int i = 0; i < 200; ++i) {
    double lo = 1e-6 * (1 + i), hi = 10.0 * (1 + i);
    a.insert(lo);
    b.insert(hi);
    all.insert(lo);
    all.insert(hi);
  }
  ASSERT_TRUE(a.merge(b));
  EXPECT_EQ(a.bin_count(), 64u);
  for (double q = 0.0; q <= 1.0; q += 0.05)
    EXPECT_EQ(a.quantile(q), all.quantile(q)) << q;
}

TEST(DDSketch, BinBoundHoldsOverTwelveDecades) {
  std::mt19937_64 rng{3};
  std::uniform_real_distribution<double> exp10{-9.0, 3.0};
  ddsketch def;              // 2048 bins: 12 decades fit without collapsing
  ddsketch small{0.01, 512}; // must collapse its lowest bins
  std::vector<double> xs;
  xs.reserve(1000000);
  for (int i = 0; i < 1000000; ++i) {
    double x = std::pow(10.0, exp10(rng));
    xs.push_back(x);
    def.insert(x);
    small.insert(x);
  }
  EXPECT_LE(def.bin_count(), ddsketch::default_bin_limit);
  EXPECT_GT(def.bin_count(), 1300u); // 12 decades / log10(γ) ≈ 1382
  EXPECT_EQ(small.bin_count(), 512u);
  EXPECT_EQ(small.count(), 1000000u);
  std::sort(xs.begin(), xs.end());
  // The collapse only costs accuracy in the low tail: the top 512 bins
  // (≈ 4.4 decades) keep the guarantee.
  for (double q : {0.7, 0.9, 0.99, 0.999}) {
    double exact = exact_quantile(xs, q);
    EXPECT_LE(std::abs(*small.quantile(q) - exact), 0.01 * exact * (1 + 1e-9))
      << q;
    EXPECT_LE(std::abs(*def.quantile(q) - exact), 0.01 * exact * (1 + 1e-9))
      << q;
  }
  for (double q : {0.001, 0.1, 0.5}) {
    double exact = exact_quantile(xs, q);
    EXPECT_LE(std::abs(*def.quantile(q) - exact), 0.01 * exact * (1 + 1e-9))
      << q;
  }
  EXPECT_EQ(*small.quantile(0.0), xs.front());
}

// -- windowed sketch ----------------------------------------------------------

TEST(DDSketchWindow, RotatesExactlyAtTheBoundary) {
  windowed_sketch w{30.0, t0};
  w.insert(0.010, t0);
  // W − ε: no rotation.
  w.rotate(t0 + seconds(30) - nanoseconds(1));
  EXPECT_EQ(w.current().count(), 1u);
  EXPECT_EQ(w.previous().count(), 0u);
  // W: current → previous; the quantile still sees it.
  EXPECT_EQ(*w.quantile(0.5, t0 + seconds(30)), 0.010);
  EXPECT_EQ(w.current().count(), 0u);
  EXPECT_EQ(w.previous().count(), 1u);
  w.insert(0.020, t0 + seconds(31));
  EXPECT_EQ(w.count(t0 + seconds(31)), 2u);
  EXPECT_EQ(*w.quantile(1.0, t0 + seconds(31)), 0.020);
  // One more window (from 30 s): the 10 ms sample falls out.
  EXPECT_EQ(w.count(t0 + seconds(60)), 1u);
  EXPECT_EQ(*w.quantile(0.0, t0 + seconds(60)), 0.020);
}

TEST(DDSketchWindow, TwoIdleWindowsClearBoth) {
  windowed_sketch w{30.0, t0};
  w.insert(0.010, t0);
  EXPECT_EQ(w.count(t0 + seconds(60) - nanoseconds(1)), 1u); // rotated once
  windowed_sketch v{30.0, t0};
  v.insert(0.010, t0);
  EXPECT_EQ(v.count(t0 + seconds(60)), 0u); // 2W: both cleared
  EXPECT_FALSE(v.quantile(0.5, t0 + seconds(60)));
}

// Windows are back to back: a rotation late in [W, 2W) starts the new
// window where the old one ended, not at the rotation, so a sample counts
// for less than 2W. (From the rotation's `now`, a sample of 0 s rotated at
// 19.9 s was kept until 29.9 s: up to 3W.)
TEST(DDSketchWindow, ASampleCountsForLessThanTwoWindows) {
  windowed_sketch w{10.0, t0};
  w.insert(0.5, t0);
  EXPECT_EQ(w.count(t0 + milliseconds(19900)), 1u); // rotated: previous
  EXPECT_EQ(w.count(t0 + seconds(20) - nanoseconds(1)), 1u);
  EXPECT_EQ(w.count(t0 + seconds(20)), 0u); // 2W after it
  EXPECT_EQ(w.count(t0 + milliseconds(29800)), 0u);
}

TEST(DDSketchWindow, QuantileMergesCurrentAndPrevious) {
  windowed_sketch w{10.0, t0};
  for (int i = 1; i <= 50; ++i)
    w.insert(i / 1000.0, t0);
  for (int i = 51; i <= 100; ++i)
    w.insert(i / 1000.0, t0 + seconds(10));
  auto p90 = *w.quantile(0.9, t0 + seconds(15));
  EXPECT_NEAR(p90, 0.090, 0.0009);
}
