// The memory lease store (actors/group/memory_lease_store.hpp) against the
// port's contract (actors/group/lease_store.hpp): leases with a minimum TTL
// that expire on the actor clock, fencing tokens from a revision counter,
// compare-and-swap commits and releases, and the injected faults. On CAF's
// deterministic test coordinator: every expiry is exact virtual time.

#include "actors/group/memory_lease_store.hpp"
#include "config/config_error.hpp"

#include "tests/support/virtual_time_fixture.hpp"

#include <caf/actor_cast.hpp>
#include <caf/event_based_actor.hpp>

#include <gtest/gtest.h>

using namespace outbound;
using namespace outbound::testing;
using namespace std::chrono_literals;

namespace {

class MemoryLeaseStore : public virtual_time_fixture {
protected:
  MemoryLeaseStore() {
    opts.data = data;
    opts.faults = faults;
  }

  void start() {
    store = spawn_memory_lease_store(sys(), opts);
    run();
  }

  /// Sends `xs` to the store from a helper actor and runs; the answer (or
  /// the error) lands in the returned optional / `last_error`.
  template <class... Rs, class... Ts>
  std::optional<std::tuple<Rs...>> ask(Ts... xs) {
    auto out = std::make_shared<std::optional<std::tuple<Rs...>>>();
    auto err = std::make_shared<caf::error>();
    auto target = caf::actor_cast<caf::actor>(store);
    sys().spawn([=](caf::event_based_actor* self) {
      self->request(target, caf::infinite, xs...)
        .then([out](Rs... rs) { *out = std::make_tuple(std::move(rs)...); },
              [err](caf::error& e) { *err = e; });
    });
    run();
    last_error = *err;
    return *out;
  }

  std::optional<uint64_t> join(const std::string& name, double ttl = 5) {
    auto r = ask<uint64_t, double>(
      grp_join_atom_v, member_record{name, name + "-i", "", "d"}, ttl);
    if (!r)
      return std::nullopt;
    granted = std::get<1>(*r);
    return std::get<0>(*r);
  }

  std::optional<double> renew(uint64_t lease) {
    auto r = ask<double>(grp_renew_atom_v, lease);
    if (!r)
      return std::nullopt;
    return std::get<0>(*r);
  }

  std::vector<claim_reply> claim(uint64_t lease,
                                 std::vector<std::string> feeds) {
    auto r = ask<std::vector<claim_reply>>(grp_claim_atom_v, lease, feeds);
    return r ? std::get<0>(*r) : std::vector<claim_reply>{};
  }

  std::vector<commit_reply> commit(std::vector<commit_item> items) {
    auto r = ask<std::vector<commit_reply>>(grp_commit_atom_v, items);
    return r ? std::get<0>(*r) : std::vector<commit_reply>{};
  }

  std::vector<commit_reply> release(std::vector<release_item> items) {
    auto r = ask<std::vector<commit_reply>>(grp_release_atom_v, items);
    return r ? std::get<0>(*r) : std::vector<commit_reply>{};
  }

  std::vector<member_record> members() {
    auto r = ask<std::vector<member_record>>(grp_members_atom_v);
    return r ? std::get<0>(*r) : std::vector<member_record>{};
  }

  std::shared_ptr<memory_store_data> data
    = std::make_shared<memory_store_data>();
  std::shared_ptr<memory_store_faults> faults
    = std::make_shared<memory_store_faults>();
  memory_store_options opts;
  lease_store_actor store;
  caf::error last_error;
  double granted = 0;
};

group_position pos(uint64_t era, int64_t offset, std::string epoch = "") {
  return group_position{era, offset, std::move(epoch)};
}

} // namespace

TEST_F(MemoryLeaseStore, AJoinGrantsALeaseAndRegistersTheMember) {
  start();
  auto l = join("m1", 5);
  ASSERT_TRUE(l);
  EXPECT_EQ(granted, 5.0);
  auto ms = members();
  ASSERT_EQ(ms.size(), 1u);
  EXPECT_EQ(ms[0].name, "m1");
  EXPECT_EQ(ms[0].incarnation, "m1-i");
  EXPECT_EQ(data->members.at("m1").lease, *l);
}

TEST_F(MemoryLeaseStore, ATtlBelowTheMinimumIsRaisedToIt) {
  start();
  ASSERT_TRUE(join("m1", 0.5));
  EXPECT_EQ(granted, 2.0);
}

TEST_F(MemoryLeaseStore, ANameHeldByALiveLeaseFailsTheJoinUntilItExpires) {
  start();
  ASSERT_TRUE(join("m1", 5));
  EXPECT_FALSE(join("m1", 5));
  EXPECT_EQ(last_error, caf::sec::runtime_error);
  advance_by(5s); // the first lease expires on the store's clock
  EXPECT_TRUE(join("m1", 5));
}

TEST_F(MemoryLeaseStore, ARenewResetsTheTtlAndAnUnknownLeaseAnswersZero) {
  start();
  auto l = join("m1", 3);
  ASSERT_TRUE(l);
  advance_by(2s);
  EXPECT_EQ(renew(*l), 3.0);
  advance_by(2s); // 4 s after the grant, 2 s after the renewal
  EXPECT_EQ(members().size(), 1u);
  advance_by(1s);
  EXPECT_TRUE(members().empty()) << "expired 3 s after the renewal";
  EXPECT_EQ(renew(*l), 0.0);
  EXPECT_EQ(renew(4711), 0.0);
}

TEST_F(MemoryLeaseStore, ExpiryDeletesTheMemberAndItsOwnerKeysOnTheTimer) {
  start();
  auto l = join("m1", 2);
  ASSERT_TRUE(l);
  ASSERT_EQ(claim(*l, {"a", "b"}).size(), 2u);
  EXPECT_EQ(data->owners.size(), 2u);
  auto rev = data->revision;
  advance_by(2s); // no request: the timer expires it
  EXPECT_TRUE(data->members.empty());
  EXPECT_TRUE(data->owners.empty());
  EXPECT_TRUE(data->leases.empty());
  EXPECT_EQ(data->revision, rev + 1);
}

TEST_F(MemoryLeaseStore, AClaimTokenIsTheOwnerKeysCreateRevision) {
  start();
  auto l1 = join("m1");
  auto l2 = join("m2");
  ASSERT_TRUE(l1 && l2);
  auto r = claim(*l1, {"a", "b"});
  ASSERT_EQ(r.size(), 2u);
  for (const auto& x : r) {
    EXPECT_EQ(x.outcome, claim_outcome::won);
    EXPECT_EQ(x.token, data->owners.at(x.feed).create_revision);
    EXPECT_EQ(x.cursor, std::nullopt);
  }
  // One transaction, one revision (as etcd).
  EXPECT_EQ(r[0].token, r[1].token);
  EXPECT_EQ(data->owners.at("a").member, "m1");
  // Another lease: held. The same lease again: won with the same token.
  auto h = claim(*l2, {"a"});
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0].outcome, claim_outcome::held);
  auto again = claim(*l1, {"a"});
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].outcome, claim_outcome::won);
  EXPECT_EQ(again[0].token, r[0].token);
}

TEST_F(MemoryLeaseStore, TokensGrowFromOneClaimToTheNext) {
  start();
  auto l1 = join("m1");
  ASSERT_TRUE(l1);
  auto first = claim(*l1, {"a"}).at(0).token;
  ASSERT_EQ(release({release_item{"a", first, pos(0, 7), ""}})[0].outcome,
            commit_outcome::ok);
  auto second = claim(*l1, {"a"}).at(0);
  EXPECT_GT(second.token, first);
  ASSERT_TRUE(second.cursor);
  EXPECT_EQ(second.cursor->offset, 7);
}

TEST_F(MemoryLeaseStore, AClaimWithAnUnknownLeaseFailsAsAWhole) {
  start();
  EXPECT_TRUE(claim(99, {"a"}).empty());
  EXPECT_EQ(last_error, caf::sec::runtime_error);
  EXPECT_TRUE(data->owners.empty());
}

TEST_F(MemoryLeaseStore, ACommitComparesTheTokenAndNeverLowersTheCursor) {
  start();
  auto l = join("m1");
  auto t = claim(*l, {"a"}).at(0).token;
  auto ok = commit(
    {commit_item{"a", t, pos(0, 10)}, commit_item{"b", t, pos(0, 10)}});
  ASSERT_EQ(ok.size(), 2u);
  EXPECT_EQ(ok[0].outcome, commit_outcome::ok);
  EXPECT_EQ(ok[1].outcome, commit_outcome::fenced) << "b has no owner";
  EXPECT_EQ(commit({commit_item{"a", t + 1, pos(0, 20)}})[0].outcome,
            commit_outcome::fenced);
  EXPECT_EQ(data->cursors.at("a").offset, 10);
  // A late commit of a lower position answers ok but leaves the cursor.
  EXPECT_EQ(commit({commit_item{"a", t, pos(0, 5)}})[0].outcome,
            commit_outcome::ok);
  EXPECT_EQ(data->cursors.at("a").offset, 10);
  // A new era is ahead of any offset of the old one.
  commit({commit_item{"a", t, pos(1, 2, "e2")}});
  EXPECT_EQ(data->cursors.at("a").era, 1u);
  EXPECT_EQ(data->cursors.at("a").offset, 2);
  EXPECT_EQ(data->cursors.at("a").epoch, "e2");
}

TEST_F(MemoryLeaseStore, AReleaseWritesTheCursorAndDeletesTheOwnerKey) {
  start();
  auto l = join("m1");
  auto t = claim(*l, {"a", "b"}).at(0).token;
  auto r = release({release_item{"a", t, pos(0, 3), "m2"},
                    release_item{"b", t + 5, pos(0, 3), ""}});
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].outcome, commit_outcome::ok);
  EXPECT_EQ(r[1].outcome, commit_outcome::fenced);
  EXPECT_EQ(data->owners.count("a"), 0u);
  EXPECT_EQ(data->owners.count("b"), 1u);
  EXPECT_EQ(data->cursors.at("a").offset, 3);
  EXPECT_EQ(data->cursors.count("b"), 0u);
}

TEST_F(MemoryLeaseStore, ARevokeDeletesEveryKeyOfTheLease) {
  start();
  auto l = join("m1");
  claim(*l, {"a"});
  auto r = ask<ack_atom>(grp_revoke_atom_v, *l);
  EXPECT_TRUE(r);
  EXPECT_TRUE(data->members.empty());
  EXPECT_TRUE(data->owners.empty());
  EXPECT_TRUE(ask<ack_atom>(grp_revoke_atom_v, *l)) << "unknown: not an error";
}

TEST_F(MemoryLeaseStore, AWithdrawalDeletesOnlyTheMemberKeyOfItsLease) {
  // A graceful leave: the name leaves the list, the lease and the owner
  // keys stay (renewals go on, the others get "held" until a release).
  start();
  auto l1 = join("m1");
  auto l2 = join("m2");
  ASSERT_TRUE(l1 && l2);
  claim(*l1, {"a"});
  EXPECT_TRUE(ask<ack_atom>(grp_withdraw_atom_v, *l1));
  EXPECT_EQ(data->members.count("m1"), 0u);
  EXPECT_EQ(data->members.count("m2"), 1u);
  EXPECT_EQ(data->owners.count("a"), 1u);
  EXPECT_EQ(renew(*l1).value_or(0), 5.0);
  EXPECT_EQ(claim(*l2, {"a"}).at(0).outcome, claim_outcome::held);
  // Again, or for a lease that binds no name: ack, nothing deleted.
  EXPECT_TRUE(ask<ack_atom>(grp_withdraw_atom_v, *l1));
  EXPECT_TRUE(ask<ack_atom>(grp_withdraw_atom_v, uint64_t{999}));
  EXPECT_EQ(data->members.count("m2"), 1u);
  // A restart under the name may join while the old lease hands over.
  EXPECT_TRUE(join("m1"));
  (*faults)[store_op::withdraw] = store_fault::fail;
  EXPECT_FALSE(ask<ack_atom>(grp_withdraw_atom_v, *l2));
  EXPECT_EQ(data->members.count("m2"), 1u);
}

TEST_F(MemoryLeaseStore, MoreThan128FeedsInOneRequestFail) {
  start();
  auto l = join("m1");
  std::vector<std::string> feeds;
  for (int i = 0; i < 129; ++i)
    feeds.push_back("f" + std::to_string(i));
  EXPECT_TRUE(claim(*l, feeds).empty());
  EXPECT_EQ(last_error, caf::sec::runtime_error);
}

TEST_F(MemoryLeaseStore, AnUnreachableStoreAppliesNothingButLeasesStillExpire) {
  start();
  auto l = join("m1", 2);
  faults->unreachable = true;
  EXPECT_FALSE(renew(*l));
  EXPECT_EQ(last_error, caf::sec::runtime_error);
  advance_by(2s);
  EXPECT_TRUE(data->members.empty());
  faults->unreachable = false;
  EXPECT_EQ(renew(*l), 0.0);
}

TEST_F(MemoryLeaseStore, AFailedOpIsNotAppliedALostOneIs) {
  start();
  auto l = join("m1");
  (*faults)[store_op::claim] = store_fault::fail;
  EXPECT_TRUE(claim(*l, {"a"}).empty());
  EXPECT_TRUE(data->owners.empty());
  (*faults)[store_op::claim] = store_fault::lose;
  EXPECT_TRUE(claim(*l, {"a"}).empty());
  EXPECT_EQ(last_error, caf::sec::request_timeout);
  EXPECT_EQ(data->owners.size(), 1u) << "applied, answer lost";
  (*faults)[store_op::claim] = store_fault::none;
  EXPECT_EQ(claim(*l, {"a"}).at(0).outcome, claim_outcome::won);
  (*faults)[store_op::renew] = store_fault::lose;
  advance_by(4s);
  EXPECT_FALSE(renew(*l));
  advance_by(4s); // renewed at 4 s: still alive at 8 s
  EXPECT_EQ(data->members.size(), 1u);
}

TEST_F(MemoryLeaseStore, ABadMinimumTtlIsAConfigError) {
  opts.min_ttl = 0;
  try {
    spawn_memory_lease_store(sys(), opts);
    FAIL() << "no config_error";
  } catch (const config_error& e) {
    EXPECT_EQ(e.field(), "min_ttl");
  }
}
