// The demo's feed audit (apps/delivery_audit.hpp): what counts as lost,
// duplicated and pending, per incarnation.

#include "apps/delivery_audit.hpp"

#include <gtest/gtest.h>

using outbound::apps::delivery_audit;

TEST(DeliveryAudit, AnInOrderLedgerFeedLosesNothing) {
  delivery_audit a{1, 3, true}; // group 1 of 3: 1, 4, 7, ...
  for (int64_t n : {1, 4, 7, 10})
    a.on_event(n);
  auto t = a.finish({}, 11);
  EXPECT_EQ(t.delivered, 4u);
  EXPECT_EQ(t.lost, 0u);
  EXPECT_EQ(t.duplicated, 0u);
  EXPECT_EQ(t.pending, 0u);
}

TEST(DeliveryAudit, ASkippedEventIsLostUnlessItsPublishFailed) {
  delivery_audit a{1, 3, true};
  for (int64_t n : {1, 7, 13})
    a.on_event(n);
  EXPECT_EQ(a.finish({}, 13).lost, 2u); // 4 and 10
  EXPECT_EQ(a.finish({4}, 13).lost, 1u);
  EXPECT_EQ(a.finish({4, 10}, 13).lost, 0u);
}

TEST(DeliveryAudit, AFeedFromTheStartMustSeeTheFirstEvent) {
  delivery_audit from_start{2, 3, true};
  from_start.on_event(5);
  EXPECT_EQ(from_start.finish({}, 5).lost, 1u); // 2 never came
  delivery_audit live{2, 3, false};
  live.on_event(5);
  EXPECT_EQ(live.finish({}, 5).lost, 0u); // a live feed starts anywhere
}

TEST(DeliveryAudit, RepeatsAndStepsBackAreDuplicatesWithinAnIncarnation) {
  delivery_audit a{0, 2, false};
  for (int64_t n : {0, 2, 2, 4, 0, 6})
    a.on_event(n);
  auto t = a.finish({}, 6);
  EXPECT_EQ(t.duplicated, 2u);
  EXPECT_EQ(t.lost, 0u);
  EXPECT_EQ(t.delivered, 6u);
}

TEST(DeliveryAudit, AResetStartsANewIncarnationWhoseGapIsAnnounced) {
  delivery_audit a{0, 2, false};
  a.on_event(0);
  a.on_event(2);
  a.on_reset();  // 4 and 6 are gone, and the reset said so
  a.on_event(8); // not lost
  a.on_event(2); // a replay after the reset: a new incarnation may repeat
  a.on_reset();
  a.on_event(2);
  a.on_event(4);
  auto t = a.finish({}, 8);
  EXPECT_EQ(t.lost, 0u);
  EXPECT_EQ(t.duplicated, 1u); // 2 after 8 in the second incarnation
  EXPECT_EQ(t.resets, 2u);
  EXPECT_EQ(t.announced, 2u); // 4 and 6; the replay from 2 forgives none
}

// What a reset forgave is counted apart from lost: the gap it opened up to
// the next delivery, or up to the last published when nothing followed
// (a watcher that resets and stays silent), publish failures excepted.
// Before, both read as nothing: lost 0, pending 0.
TEST(DeliveryAudit, WhatAResetForgaveIsCountedAsAnnounced) {
  delivery_audit gap{0, 1, false};
  for (int n = 0; n < 10; ++n)
    gap.on_event(n);
  gap.on_reset();
  for (int n = 50; n < 100; ++n)
    gap.on_event(n);
  auto t = gap.finish({}, 99);
  EXPECT_EQ(t.lost, 0u);
  EXPECT_EQ(t.announced, 40u); // 10..49

  delivery_audit silent{0, 1, false};
  for (int n = 0; n < 10; ++n)
    silent.on_event(n);
  silent.on_reset();
  t = silent.finish({20, 30}, 99);
  EXPECT_EQ(t.lost, 0u);
  EXPECT_EQ(t.pending, 0u);
  EXPECT_EQ(t.announced, 88u); // 10..99 but the two failed publishes

  delivery_audit none{0, 1, false}; // a reset before any delivery
  none.on_reset();
  none.on_event(5);
  EXPECT_EQ(none.finish({}, 5).announced, 0u); // no position to count from
}

TEST(DeliveryAudit, TheLedgerTailNotYetDeliveredIsPendingNotLost) {
  delivery_audit a{0, 2, true};
  a.on_event(0);
  a.on_event(2);
  auto t = a.finish({6}, 9); // 4 and 8 still to come; 6 never published
  EXPECT_EQ(t.pending, 2u);
  EXPECT_EQ(t.lost, 0u);
}

TEST(DeliveryAudit, EventsOfAnotherGroupOrWithoutANumberAreForeign) {
  delivery_audit a{0, 2, false};
  a.on_event(1);
  a.on_event(-1);
  a.on_event(0);
  auto t = a.finish({}, 1);
  EXPECT_EQ(t.foreign, 2u);
  EXPECT_EQ(t.delivered, 1u);
}

TEST(DeliveryAudit, SkippedNumbersBeyondTheBoundStillCountAsLost) {
  delivery_audit a{0, 1, false};
  a.on_event(0);
  auto far = static_cast<int64_t>(delivery_audit::max_skipped) + 11;
  a.on_event(far);
  EXPECT_EQ(a.finish({}, far).lost, static_cast<uint64_t>(far - 1));
}

TEST(DeliveryAudit, ALiveFeedsTailIsPendingOnlyOnceItsIncarnationDelivered) {
  delivery_audit a{0, 2, false};
  EXPECT_EQ(a.finish({}, 8).pending, 0u); // no position known yet
  a.on_event(4);
  EXPECT_EQ(a.finish({}, 8).pending, 2u); // 6 and 8
  a.on_reset();
  EXPECT_EQ(a.finish({}, 8).pending, 0u); // a new incarnation: unknown
}
