// The fence gate as a pure state machine: explicit `now`, no actor.

#include "actors/feed/fence_gate.hpp"

#include <gtest/gtest.h>

using namespace outbound;
using namespace std::chrono_literals;

namespace {

feed_time at(std::chrono::nanoseconds d) {
  return feed_time{} + 1h + d;
}

} // namespace

TEST(FenceGate, WithoutADeadlineEveryDeliveryMayStart) {
  fence_gate g;
  EXPECT_FALSE(g.armed());
  EXPECT_TRUE(g.may_start(at(1000h)));
  EXPECT_EQ(g.held_deliveries(), 0u);
}

TEST(FenceGate, StartsBeforeTheDeadlineNotAtIt) {
  fence_gate g;
  g.on_fence(at(5s), at(0s));
  EXPECT_TRUE(g.may_start(at(5s) - 1ns));
  EXPECT_FALSE(g.may_start(at(5s)));
  EXPECT_TRUE(g.holding());
  EXPECT_FALSE(g.may_start(at(6s))); // the same hold: counted once
  EXPECT_EQ(g.held_deliveries(), 1u);
  EXPECT_EQ(g.held_time(at(7s)), 2s);
}

TEST(FenceGate, ALaterDeadlineInTheFutureEndsTheHoldOneInThePastDoesNot) {
  fence_gate g;
  g.on_fence(at(0s), at(0s));
  EXPECT_FALSE(g.may_start(at(1s)));
  EXPECT_FALSE(g.on_fence(at(2s), at(3s))); // already past: still held
  EXPECT_TRUE(g.holding());
  EXPECT_TRUE(g.on_fence(at(10s), at(4s)));
  EXPECT_FALSE(g.holding());
  EXPECT_EQ(g.held_time(at(20s)), 3s);
  EXPECT_TRUE(g.may_start(at(9s)));
  EXPECT_FALSE(g.may_start(at(10s)));
  EXPECT_EQ(g.held_deliveries(), 2u);
}
