// Callback delivery on the normal (threaded) scheduler: the callbacks run on
// a detached helper actor, so a callback that blocks holds up only the next
// delivery, never a stop. No sleeps: the blocking callback waits on a
// promise the test releases, and every wait is bounded.

#include "actors/client/service_client.hpp"
#include "actors/feed/feed_watcher.hpp"

#include "tests/support/feed_fakes.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>

using namespace outbound;
using namespace outbound::testing;

TEST(FeedCallbacks, ABlockedCallbackNeverBlocksAStop) {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  auto ledger = std::make_shared<fake_ledger>();
  ledger->append_to(3);
  client_config cc;
  cc.base_url = "http://127.0.0.1:8080";
  client_options co;
  co.transport = spawn_ledger_transport(sys, ledger);
  // The callback runs on the helper's own thread and may still be inside
  // wait() when the test body returns, so everything it touches is shared
  // with it, and the test waits for it to leave before its locals go away.
  struct gate {
    std::promise<void> entered;
    std::promise<void> release;
    std::shared_future<void> released = release.get_future().share();
    std::promise<void> left;
    std::atomic<int> calls{0};
  };
  auto g = std::make_shared<gate>();
  // On an early ASSERT return the callback must still be let go, or the
  // actor system's destructor would wait for it forever.
  struct release_on_exit {
    std::shared_ptr<gate> g;
    bool done = false;
    ~release_on_exit() {
      if (!done)
        g->release.set_value();
    }
  } releaser{g};
  auto entered = g->entered.get_future();
  auto left = g->left.get_future();
  feed_watcher_options o;
  o.client = make_service_client(sys, cc, co);
  o.callbacks.on_event = [g](const feed_event&) {
    if (g->calls++ == 0) {
      g->entered.set_value();
      g->released.wait();
      g->left.set_value();
    }
  };
  feed_config fc;
  fc.replay_path = "/v1/events";
  auto w = spawn_feed_watcher(sys, fc, o);
  ASSERT_EQ(entered.wait_for(std::chrono::seconds{10}),
            std::future_status::ready);
  caf::scoped_actor self{sys};
  self->monitor(w);
  bool answered = false;
  self->request(w, std::chrono::seconds{10}, stop_atom_v)
    .receive(
      [&](const feed_stats& s) {
        answered = true;
        EXPECT_EQ(s.cursor, 0) << "the blocked event is not acknowledged";
        EXPECT_EQ(s.events_delivered, 0u);
      },
      [&](const caf::error& e) { ADD_FAILURE() << sys.render(e); });
  EXPECT_TRUE(answered);
  bool down = false;
  self->receive([&](const caf::down_msg&) { down = true; },
                caf::after(std::chrono::seconds{10}) >> [] {});
  EXPECT_TRUE(down) << "the watcher quit while its callback was blocked";
  releaser.done = true;
  g->release.set_value();
  EXPECT_EQ(left.wait_for(std::chrono::seconds{10}), std::future_status::ready);
  EXPECT_EQ(g->calls.load(), 1);
}

TEST(FeedCallbacks, EventsReachDetachedCallbacksInOrder) {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  auto ledger = std::make_shared<fake_ledger>();
  ledger->append_to(7);
  client_config cc;
  cc.base_url = "http://127.0.0.1:8080";
  client_options co;
  co.transport = spawn_ledger_transport(sys, ledger);
  std::vector<int64_t> seen; // written by the runner thread only
  std::promise<void> all;
  feed_watcher_options o;
  o.client = make_service_client(sys, cc, co);
  o.callbacks.on_event = [&](const feed_event& ev) {
    seen.push_back(*ev.id);
    if (seen.size() == 7)
      all.set_value();
  };
  feed_config fc;
  fc.replay_path = "/v1/events";
  fc.limit = 3;
  auto w = spawn_feed_watcher(sys, fc, o);
  ASSERT_EQ(all.get_future().wait_for(std::chrono::seconds{10}),
            std::future_status::ready);
  caf::scoped_actor self{sys};
  // The 7th callback has run, but its acknowledgement may still be on its way
  // to the watcher: the cursor reaches 7 only then. Ask until it does
  // (bounded), then stop.
  int64_t cursor = -1;
  for (int i = 0; i < 200 && cursor != 7; ++i) {
    self->request(w, std::chrono::seconds{10}, stats_atom_v)
      .receive([&](const feed_stats& s) { cursor = s.cursor; },
               [&](const caf::error& e) { ADD_FAILURE() << sys.render(e); });
    if (cursor != 7)
      self->receive(caf::after(std::chrono::milliseconds{10}) >> [] {});
  }
  EXPECT_EQ(cursor, 7);
  self->request(w, std::chrono::seconds{10}, stop_atom_v)
    .receive([&](const feed_stats& s) { EXPECT_EQ(s.cursor, 7); },
             [&](const caf::error& e) { ADD_FAILURE() << sys.render(e); });
  EXPECT_EQ(seen, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7}));
}
