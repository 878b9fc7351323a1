// apps/latency_book.hpp: the demo's status line reads p99 over a trailing
// window of intervals (one second's p99 at ~50 calls is its slowest call),
// while the report reads the whole run.

#include "apps/latency_book.hpp"

#include <gtest/gtest.h>

#include <cmath>

using outbound::apps::latency_book;
using outbound::apps::max_window_intervals;
using outbound::apps::window_intervals_for;
using outbound::apps::window_seconds_label;

namespace {

/// Within DDSketch's default relative accuracy (1 %).
void expect_near_rel(std::optional<double> got, double want) {
  ASSERT_TRUE(got.has_value());
  EXPECT_NEAR(*got, want, want * 0.011) << "got " << *got;
}

/// One interval of 50 calls: 49 at `fast`, one at `slow`.
void one_second(latency_book& b, double fast, double slow) {
  for (int i = 0; i < 49; ++i)
    b.record(fast, true);
  b.record(slow, true);
}

TEST(LatencyBook, OneStragglerInFiftyCallsIsNotTheWindowsP99) {
  latency_book b{10};
  // First interval alone: its p99 is its slowest call (rank 50 of 50).
  one_second(b, 0.010, 0.9);
  auto v = b.take_interval();
  EXPECT_EQ(v.calls, 50u);
  EXPECT_EQ(v.intervals, 1u);
  expect_near_rel(v.p99, 0.9);
  // Nine more with no straggler: 500 calls, one slow; rank 495 is fast.
  for (int s = 0; s < 9; ++s) {
    for (int i = 0; i < 50; ++i)
      b.record(0.010, true);
    v = b.take_interval();
  }
  EXPECT_EQ(v.intervals, 10u);
  expect_near_rel(v.p99, 0.010);
}

TEST(LatencyBook, TheOldestIntervalLeavesTheWindow) {
  latency_book b{3};
  // Interval 1: 10 % stragglers, so the p99 of any window holding it is slow.
  for (int i = 0; i < 90; ++i)
    b.record(0.005, true);
  for (int i = 0; i < 10; ++i)
    b.record(0.5, true);
  expect_near_rel(b.take_interval().p99, 0.5);
  for (int s = 0; s < 2; ++s) {
    for (int i = 0; i < 100; ++i)
      b.record(0.005, true);
    auto v = b.take_interval();
    // 10 slow of 200 or 300 calls: above 1 %, still slow.
    expect_near_rel(v.p99, 0.5);
  }
  // Interval 4 pushes interval 1 out: the window holds 2, 3 and 4.
  for (int i = 0; i < 100; ++i)
    b.record(0.005, true);
  auto v = b.take_interval();
  EXPECT_EQ(v.intervals, 3u);
  expect_near_rel(v.p99, 0.005);
}

TEST(LatencyBook, FailuresAreCountedNotTimed) {
  latency_book b{2};
  b.record(0.020, true);
  b.record(5.0, false);
  b.record(5.0, false);
  auto v = b.take_interval();
  EXPECT_EQ(v.calls, 3u);
  expect_near_rel(v.p99, 0.020);
  // An interval with failures only: the window still has the success.
  b.record(1.0, false);
  v = b.take_interval();
  EXPECT_EQ(v.calls, 1u);
  expect_near_rel(v.p99, 0.020);
  // Once it left the window, nothing succeeded in it: no p99.
  v = b.take_interval();
  EXPECT_EQ(v.calls, 0u);
  EXPECT_FALSE(v.p99.has_value());
  auto r = b.run();
  EXPECT_EQ(r.ok, 1u);
  EXPECT_EQ(r.failed, 3u);
}

TEST(LatencyBook, TheRunKeepsEveryIntervalAfterTheWindowMovedOn) {
  latency_book b{1};
  one_second(b, 0.010, 0.9);
  b.take_interval();
  for (int s = 0; s < 5; ++s) {
    one_second(b, 0.010, 0.010);
    expect_near_rel(b.take_interval().p99, 0.010);
  }
  auto r = b.run();
  EXPECT_EQ(r.ok, 300u);
  EXPECT_EQ(r.failed, 0u);
  expect_near_rel(r.max, 0.9);
  expect_near_rel(r.p50, 0.010);
  // 1 slow of 300: p99.9 (rank 300) is it, p99 (rank 297) is not.
  expect_near_rel(r.p999, 0.9);
  expect_near_rel(r.p99, 0.010);
}

TEST(LatencyBook, AZeroWindowIsOneInterval) {
  latency_book b{0};
  EXPECT_EQ(b.window_intervals(), 1u);
  one_second(b, 0.010, 0.9);
  EXPECT_EQ(b.take_interval().intervals, 1u);
  b.record(0.010, true);
  auto v = b.take_interval();
  EXPECT_EQ(v.intervals, 1u);
  expect_near_rel(v.p99, 0.010);
}

TEST(LatencyBook, TheWindowSpansAtLeastItsSecondsInWholeIntervals) {
  EXPECT_EQ(window_intervals_for(10, 1), 10u);
  EXPECT_EQ(window_intervals_for(10, 0.1), 100u); // not 101 (10 / 0.1)
  EXPECT_EQ(window_intervals_for(10, 0.3), 34u);  // 10.2 s
  EXPECT_EQ(window_intervals_for(10, 3), 4u);     // 12 s
  EXPECT_EQ(window_intervals_for(10, 2.5), 4u);   // exactly 10 s
  EXPECT_EQ(window_intervals_for(10, 15), 1u);    // one longer interval
  EXPECT_EQ(window_intervals_for(10, 0.01), max_window_intervals);
  EXPECT_EQ(window_intervals_for(10, 0), 1u);
  EXPECT_EQ(window_intervals_for(10, -1), 1u);
  EXPECT_EQ(window_intervals_for(10, std::nan("")), 1u);
  EXPECT_EQ(window_intervals_for(10, 1e-320), 1u); // 10 / it is infinite
  latency_book b{100000};
  EXPECT_EQ(b.window_intervals(), max_window_intervals);
}

TEST(LatencyBook, TheWindowsLabelIsItsSpanInSeconds) {
  EXPECT_EQ(window_seconds_label(10, 1), "10");
  EXPECT_EQ(window_seconds_label(34, 0.3), "10.2");
  EXPECT_EQ(window_seconds_label(7, 1.5), "10.5");
  EXPECT_EQ(window_seconds_label(12, 0.9), "10.8");
  EXPECT_EQ(window_seconds_label(1, 0.25), "0.25");
  EXPECT_EQ(window_seconds_label(9, 2.25), "20.25");
  EXPECT_EQ(window_seconds_label(4, 3), "12");
  EXPECT_EQ(window_seconds_label(1, 15), "15");
  EXPECT_EQ(window_seconds_label(100, 0.1), "10");
}

} // namespace
