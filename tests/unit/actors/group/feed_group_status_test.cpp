// What a feed group member's status says about failures
// (core/group_status.hpp: joined, store_errors, last_store_error,
// unreleased, revoke_failed), the fields `outbound group-member` prints and
// decides its exit code by: a member whose store never answered, a leave
// whose releases and revoke failed, a clean leave. Memory store with faults,
// watchers are fakes that answer their stop; CAF's deterministic test
// coordinator (exact virtual time).

#include "actors/group/feed_group.hpp"
#include "actors/group/memory_lease_store.hpp"

#include "tests/support/virtual_time_fixture.hpp"

#include <caf/actor_cast.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <gtest/gtest.h>

using namespace outbound;
using namespace outbound::testing;
using namespace std::chrono_literals;

namespace {

/// Watchers that answer every stop at once (no position).
watcher_spawner stopping_spawner() {
  return [](caf::actor_system& sys, feed_config,
            feed_watcher_options) -> feed_watcher_actor {
    return sys.spawn([](feed_watcher_actor::pointer self)
                       -> feed_watcher_actor::behavior_type {
      return {
        [](stats_atom) { return feed_stats{}; },
        [self](stop_atom) {
          self->quit();
          return feed_stats{};
        },
        [self](leave_atom) {
          self->quit();
          return feed_stats{};
        },
        [](fence_atom, feed_time) {},
      };
    });
  };
}

/// A store in front of `inner` whose revokes go unanswered while `*drop`
/// is set: the member's request fails at its store_timeout (5 s here), as
/// one to an etcd that does not answer does, long after what came next.
lease_store_actor unanswered_revokes(caf::actor_system& sys,
                                     lease_store_actor inner,
                                     std::shared_ptr<bool> drop) {
  return sys.spawn([inner, drop](lease_store_actor::pointer self)
                     -> lease_store_actor::behavior_type {
    return {
      [=](grp_join_atom a, member_record& r,
          double ttl) -> caf::result<uint64_t, double> {
        return self->delegate(inner, a, std::move(r), ttl);
      },
      [=](grp_renew_atom a, uint64_t lease) -> caf::result<double> {
        return self->delegate(inner, a, lease);
      },
      [=](grp_revoke_atom a, uint64_t lease) -> caf::result<ack_atom> {
        if (*drop)
          return self->make_response_promise<ack_atom>();
        return self->delegate(inner, a, lease);
      },
      [=](grp_withdraw_atom a, uint64_t lease) -> caf::result<ack_atom> {
        return self->delegate(inner, a, lease);
      },
      [=](grp_members_atom a) -> caf::result<std::vector<member_record>> {
        return self->delegate(inner, a);
      },
      [=](grp_claim_atom a, uint64_t lease, std::vector<std::string>& fs)
        -> caf::result<std::vector<claim_reply>> {
        return self->delegate(inner, a, lease, std::move(fs));
      },
      [=](grp_commit_atom a, std::vector<commit_item>& xs)
        -> caf::result<std::vector<commit_reply>> {
        return self->delegate(inner, a, std::move(xs));
      },
      [=](grp_release_atom a, std::vector<release_item>& xs)
        -> caf::result<std::vector<commit_reply>> {
        return self->delegate(inner, a, std::move(xs));
      },
    };
  });
}

class FeedGroupStatus : public virtual_time_fixture {
protected:
  FeedGroupStatus() {
    memory_store_options so;
    so.data = data;
    so.faults = faults;
    store = spawn_memory_lease_store(sys(), so);
  }

  ~FeedGroupStatus() override {
    for (auto& g : groups)
      caf::anon_send_exit(g, caf::exit_reason::user_shutdown);
    run();
  }

  feed_group_actor spawn(int feeds) {
    group_config c;
    c.name = "billing";
    c.member_name = "m1";
    c.timing.lease_ttl = 5;
    c.timing.renew_interval = 1.5;
    c.timing.fence_margin = 1;
    c.timing.poll_interval = 0.5;
    c.timing.checkpoint_interval = 1;
    c.timing.initial_settle = 1;
    c.coordinator.kind = coordinator_kind::memory;
    std::vector<group_feed> fs;
    for (int i = 0; i < feeds; ++i) {
      group_feed f;
      f.id = "feed-" + std::to_string(i);
      f.cfg.replay_path = "/v1/events";
      fs.push_back(std::move(f));
    }
    feed_group_options o;
    o.store = store;
    o.spawn_watcher = stopping_spawner();
    o.seed = 42;
    o.incarnation = "inc";
    auto g = spawn_feed_group(sys(), c, std::move(fs), std::move(o));
    groups.push_back(g);
    run();
    return g;
  }

  /// Asks `g` with `x` from a helper actor, moving virtual time (up to
  /// `upto`) until the answer is in.
  template <class Atom>
  std::optional<group_status> ask(const feed_group_actor& g, Atom x,
                                  std::chrono::nanoseconds upto = 0s) {
    auto out = std::make_shared<std::optional<group_status>>();
    auto target = caf::actor_cast<caf::actor>(g);
    sys().spawn([=](caf::event_based_actor* self) {
      self->request(target, caf::infinite, x)
        .then([out](group_status& s) { *out = s; }, [](caf::error&) {});
    });
    run();
    auto end = now() + upto;
    while (!*out && now() < end)
      advance_by(100ms);
    return *out;
  }

  std::shared_ptr<memory_store_data> data
    = std::make_shared<memory_store_data>();
  std::shared_ptr<memory_store_faults> faults
    = std::make_shared<memory_store_faults>();
  lease_store_actor store;
  std::vector<feed_group_actor> groups;
};

} // namespace

TEST_F(FeedGroupStatus, AStoreThatNeverAnswersLeavesTheMemberNeverJoined) {
  faults->unreachable = true;
  auto g = spawn(2);
  advance_by(5s);
  auto s = ask(g, stats_atom_v);
  ASSERT_TRUE(s);
  EXPECT_FALSE(s->joined);
  EXPECT_GE(s->store_errors, 2u) << "a join retried every renew_interval";
  EXPECT_EQ(s->store_errors, s->counters.join_errors);
  EXPECT_EQ(s->last_store_error.rfind("join: ", 0), 0u) << s->last_store_error;
  EXPECT_NE(s->last_store_error.find("memory store: unreachable"),
            std::string::npos)
    << s->last_store_error;
  s = ask(g, leave_atom_v, 5s);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->phase, group_phase::left);
  EXPECT_FALSE(s->joined);
  EXPECT_EQ(s->unreleased, 0u);
  EXPECT_FALSE(s->revoke_failed);
}

TEST_F(FeedGroupStatus, ACleanLeaveHasNothingUnreleasedAndNoStoreErrors) {
  auto g = spawn(3);
  advance_by(3s);
  auto s = ask(g, stats_atom_v);
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->joined);
  EXPECT_EQ(s->owned, 3u);
  EXPECT_EQ(s->unreleased, 0u) << "0 before a leave";
  s = ask(g, leave_atom_v, 5s);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->phase, group_phase::left);
  EXPECT_TRUE(s->joined);
  EXPECT_EQ(s->unreleased, 0u);
  EXPECT_FALSE(s->revoke_failed);
  EXPECT_EQ(s->store_errors, 0u);
  EXPECT_TRUE(s->last_store_error.empty());
}

TEST_F(FeedGroupStatus, ALeaveWhoseReleasesAndRevokeFailSaysSo) {
  auto g = spawn(3);
  advance_by(3s);
  ASSERT_EQ(ask(g, stats_atom_v)->owned, 3u);
  // Releases fail until the leave gives up (lease_ttl), then the revoke.
  (*faults)[store_op::release] = store_fault::fail;
  (*faults)[store_op::revoke] = store_fault::fail;
  auto s = ask(g, leave_atom_v, 10s);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->phase, group_phase::left);
  EXPECT_TRUE(s->joined);
  EXPECT_EQ(s->unreleased, 3u);
  EXPECT_TRUE(s->revoke_failed);
  EXPECT_GE(s->store_errors, 2u);
  EXPECT_EQ(s->last_store_error.rfind("revoke: ", 0), 0u)
    << s->last_store_error;
  EXPECT_EQ(data->owners.size(), 3u) << "the owner keys wait for the lease";
}

TEST_F(FeedGroupStatus, ReleasesThatFailOnceAndThenSucceedLeaveNothing) {
  auto g = spawn(2);
  advance_by(3s);
  (*faults)[store_op::release] = store_fault::fail;
  auto leave = std::make_shared<std::optional<group_status>>();
  auto target = caf::actor_cast<caf::actor>(g);
  sys().spawn([=](caf::event_based_actor* self) {
    self->request(target, caf::infinite, leave_atom_v)
      .then([leave](group_status& s) { *leave = s; }, [](caf::error&) {});
  });
  run();
  advance_by(500ms);
  ASSERT_FALSE(*leave) << "the releases failed: still leaving";
  (*faults)[store_op::release] = store_fault::none;
  for (int i = 0; i < 50 && !*leave; ++i)
    advance_by(100ms);
  ASSERT_TRUE(*leave);
  EXPECT_EQ((*leave)->unreleased, 0u);
  EXPECT_FALSE((*leave)->revoke_failed);
  EXPECT_GE((*leave)->store_errors, 1u);
  EXPECT_EQ((*leave)->last_store_error.rfind("release: ", 0), 0u)
    << (*leave)->last_store_error;
  EXPECT_TRUE(data->owners.empty());
}

TEST_F(FeedGroupStatus, AFailedRevokeOfALeaseARejoinReplacedDoesNotCount) {
  // Lease A is given up after a hold of a whole TTL (G6); its revoke goes
  // unanswered and fails at the store time-out, after the member joined
  // again (lease B), left, and revoked B: A is gone (B's join needed its
  // member key absent) and B's revoke succeeded, so the leave is clean.
  auto drop = std::make_shared<bool>(false);
  store = unanswered_revokes(sys(), store, drop);
  auto g = spawn(2);
  advance_by(3s);
  ASSERT_EQ(ask(g, stats_atom_v)->owned, 2u);
  faults->unreachable = true;
  *drop = true;
  std::optional<group_status> s;
  for (int i = 0; i < 200; ++i) {
    advance_by(100ms);
    s = ask(g, stats_atom_v);
    if (s && s->counters.hold_timeouts > 0)
      break;
  }
  ASSERT_TRUE(s);
  ASSERT_EQ(s->counters.hold_timeouts, 1u) << "A given up, its revoke sent";
  faults->unreachable = false;
  *drop = false;
  // The next join attempt (every renew_interval) gets lease B.
  for (int i = 0; i < 30 && !(s = ask(g, stats_atom_v))->leased; ++i)
    advance_by(100ms);
  ASSERT_TRUE(s->leased);
  EXPECT_FALSE(s->revoke_failed);
  s = ask(g, leave_atom_v, 10s);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->phase, group_phase::left);
  EXPECT_GE(s->store_errors, 1u);
  EXPECT_EQ(s->last_store_error.rfind("revoke: ", 0), 0u)
    << "A's revoke failed last: " << s->last_store_error;
  EXPECT_FALSE(s->revoke_failed) << "B's revoke succeeded; A is gone";
  EXPECT_TRUE(data->members.empty());
}
