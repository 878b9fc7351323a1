// The pool's completion inbox decides when a finished exchange wakes the pool
// actor (actors/pool/detail/completion_inbox.hpp): only for a connection that
// is not reusable or while requests are queued; otherwise the completion
// waits for the pool's next message, which drains the inbox first.

#include "actors/pool/detail/completion_inbox.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace {

using outbound::completion_inbox;
using outbound::finished_exchange;

finished_exchange reusable(uint64_t id) {
  return {id, true, false};
}

finished_exchange spent(uint64_t id) {
  return {id, false, false};
}

TEST(CompletionInbox, AReusableConnectionWaitsForThePoolsNextMessage) {
  completion_inbox inbox;
  EXPECT_FALSE(inbox.push(reusable(1)));
  EXPECT_FALSE(inbox.push(reusable(2)));
  std::vector<finished_exchange> out;
  inbox.take(out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].exchange_id, 1u);
  EXPECT_EQ(out[1].exchange_id, 2u);
}

TEST(CompletionInbox, AConnectionToCloseWakesThePoolOncePerBatch) {
  completion_inbox inbox;
  EXPECT_FALSE(inbox.push(reusable(1)));
  EXPECT_TRUE(inbox.push(spent(2)));
  EXPECT_FALSE(inbox.push(spent(3))) << "a wake-up is pending already";
  std::vector<finished_exchange> out;
  inbox.take(out);
  EXPECT_EQ(out.size(), 3u);
  EXPECT_TRUE(inbox.push(spent(4))) << "take() ends the pending wake-up";
}

TEST(CompletionInbox, QueuedRequestsMakeEveryCompletionWakeThePool) {
  completion_inbox inbox;
  EXPECT_FALSE(inbox.set_waiting(true)) << "nothing arrived: nothing to drain";
  EXPECT_TRUE(inbox.push(reusable(1)));
  EXPECT_FALSE(inbox.push(reusable(2)));
  std::vector<finished_exchange> out;
  inbox.take(out);
  EXPECT_FALSE(inbox.set_waiting(false));
  EXPECT_FALSE(inbox.push(reusable(3)));
}

TEST(CompletionInbox, CompletionsThatArrivedBeforeTheQueueFilledAreDrained) {
  // The pool drained, then a completion arrived unannounced (nothing was
  // queued), then the pool queued a request: set_waiting says to drain
  // again, or the queued request would wait for a connection already free.
  completion_inbox inbox;
  EXPECT_FALSE(inbox.push(reusable(1)));
  EXPECT_TRUE(inbox.set_waiting(true));
  // With a wake-up pending, the pool's drain_completions message covers it.
  completion_inbox woken;
  EXPECT_TRUE(woken.push(spent(1)));
  EXPECT_FALSE(woken.set_waiting(true));
}

} // namespace
