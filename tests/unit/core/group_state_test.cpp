// The feed-group member's decision core (core/group_state.hpp) on explicit
// time: each test drives the inputs and checks the actions, one rule (G1..
// G10 of the header) at a time.

#include "core/group_state.hpp"

#include "config/config_error.hpp"
#include "core/hrw.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

using namespace outbound;
using namespace std::chrono_literals;

namespace {

/// A position in era `era` (0: no rewind yet).
group_position pos(int64_t offset, uint64_t era = 0) {
  return group_position{era, offset, {}};
}

const group_time t0 = group_time{} + 1h;

template <class T>
std::vector<T> all_of(const group_actions& as) {
  std::vector<T> out;
  for (const auto& a : as)
    if (auto p = std::get_if<T>(&a))
      out.push_back(*p);
  return out;
}

template <class T>
bool has(const group_actions& as) {
  return !all_of<T>(as).empty();
}

std::vector<std::string> feed_names(int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i)
    out.push_back("f" + std::to_string(i));
  return out;
}

std::vector<listed_member> view(std::vector<std::string> names,
                                group_time seen = t0) {
  std::vector<listed_member> out;
  for (auto& n : names)
    out.push_back(listed_member{n, seen});
  return out;
}

/// A member driven to `active` at t0 + initial_settle with `members`
/// listed since t0; `now` follows the test's time.
struct member {
  group_state st;
  group_time now = t0;
  uint64_t poll = 0;

  member(group_state_config cfg, std::vector<std::string> feeds,
         std::string name = "m1")
    : st(cfg, std::move(name), std::move(feeds)) {
  }

  /// Start, join (sent at t0, granted at t0 with `ttl`), one view.
  group_actions join(std::vector<std::string> members = {"m1"},
                     double ttl = 5.0) {
    auto a = st.start(now);
    auto j = all_of<join_lease>(a);
    EXPECT_EQ(j.size(), 1u);
    auto b = st.on_joined(j.at(0).request, ttl, now);
    return see(std::move(members), t0);
  }

  group_actions see(std::vector<std::string> members, group_time seen) {
    return st.on_members(++poll + 1000000, view(std::move(members), seen), now);
  }

  /// Keepalives are answered (ok, TTL 5 s) in the same instant.
  bool answer_renewals = true;

  group_actions at(group_time t) {
    now = t;
    auto out = st.tick(t);
    if (answer_renewals)
      for (const auto& r : all_of<renew_lease>(out)) {
        auto x = st.on_keepalive(r.request, keepalive_outcome::ok, 5.0, t);
        out.insert(out.end(), x.begin(), x.end());
      }
    return out;
  }

  /// Joined and active; returns the claim actions of activation.
  group_actions activate(std::vector<std::string> members = {"m1"}) {
    join(std::move(members));
    return at(t0 + 3s);
  }

  /// Wins every claim of `as` with tokens from 100 and no cursor, and
  /// the claims their answers send (the rest of the wave, G3).
  group_actions win_all(const group_actions& as,
                        std::optional<group_position> cursor = std::nullopt) {
    group_actions out;
    uint64_t token = 100;
    auto todo = all_of<claim_feeds>(as);
    for (std::size_t i = 0; i < todo.size(); ++i) {
      std::vector<claim_reply> rs;
      for (const auto& f : todo[i].feeds)
        rs.push_back(claim_reply{f, claim_outcome::won, token++, cursor});
      auto x = st.on_claimed(todo[i].request, rs, now);
      for (auto& c : all_of<claim_feeds>(x))
        todo.push_back(c);
      out.insert(out.end(), x.begin(), x.end());
    }
    return out;
  }
};

group_state_config defaults() {
  return group_state_config{};
}

/// `m` (member of one feed "f") wins it, its watcher reports position 5,
/// and the commit at t0 + 4 s is fenced: the ownership is dropped and the
/// watcher asked to stop. Returns that watcher's spawn and the fenced
/// commit's actions.
std::pair<spawn_watcher, group_actions> fence_first_watcher(member& m) {
  auto sp = all_of<spawn_watcher>(m.win_all(m.activate())).at(0);
  m.st.on_progress("f", sp.token, pos(5), m.now);
  auto c = all_of<commit_cursors>(m.at(t0 + 4s)).at(0);
  return {sp,
          m.st.on_committed(c.request, {{"f", commit_outcome::fenced}}, m.now)};
}

} // namespace

// -- configuration ---------------------------------------------------------

TEST(GroupStateConfig, DefaultsAreTheDesignsAndValid) {
  group_state_config c;
  EXPECT_EQ(c.lease_ttl, 5.0);
  EXPECT_EQ(c.renew_interval, 1.5);
  EXPECT_EQ(c.fence_margin, 1.0);
  EXPECT_EQ(c.poll_interval, 0.5);
  EXPECT_EQ(c.reconcile_interval, 5.0);
  EXPECT_EQ(c.checkpoint_interval, 1.0);
  EXPECT_EQ(c.batch, 64u);
  EXPECT_EQ(c.initial_settle, 3.0);
  EXPECT_EQ(c.min_members, 1u);
  EXPECT_EQ(c.rebalance_delay, 5.0);
  EXPECT_EQ(c.max_starts_per_second, 1000u);
  EXPECT_EQ(c.max_feeds, 20000u);
  EXPECT_EQ(c.max_inflight_batches, 4u);
  EXPECT_FALSE(group_config_error(c).has_value());
  EXPECT_NO_THROW(c.validate());
}

TEST(GroupStateConfig, EachBadFieldIsNamed) {
  auto field_of = [](group_state_config c) {
    auto e = group_config_error(c);
    return e ? e->field() : std::string{"(valid)"};
  };
  auto c = defaults();
  c.lease_ttl = 1.0;
  EXPECT_EQ(field_of(c), "group.lease_ttl");
  c = defaults();
  c.lease_ttl = std::nan("");
  EXPECT_EQ(field_of(c), "group.lease_ttl");
  c = defaults();
  c.renew_interval = 2.0; // > 5 / 3
  EXPECT_EQ(field_of(c), "group.renew_interval");
  c = defaults();
  c.fence_margin = 3.5; // >= 5 - 1.5
  EXPECT_EQ(field_of(c), "group.fence_margin");
  c = defaults();
  c.fence_margin = 0;
  EXPECT_EQ(field_of(c), "group.fence_margin");
  c = defaults();
  c.poll_interval = -1;
  EXPECT_EQ(field_of(c), "group.poll_interval");
  c = defaults();
  c.reconcile_interval = 0;
  EXPECT_EQ(field_of(c), "group.reconcile_interval");
  c = defaults();
  c.checkpoint_interval = 0;
  EXPECT_EQ(field_of(c), "group.checkpoint_interval");
  c = defaults();
  c.batch = 0;
  EXPECT_EQ(field_of(c), "group.batch");
  c.batch = 129;
  EXPECT_EQ(field_of(c), "group.batch");
  c = defaults();
  c.initial_settle = 0; // allowed
  EXPECT_EQ(field_of(c), "(valid)");
  c.initial_settle = -1;
  EXPECT_EQ(field_of(c), "group.initial_settle");
  c = defaults();
  c.min_members = 0;
  EXPECT_EQ(field_of(c), "group.min_members");
  c = defaults();
  c.rebalance_delay = -0.5;
  EXPECT_EQ(field_of(c), "group.rebalance_delay");
  c = defaults();
  c.max_starts_per_second = 0;
  EXPECT_EQ(field_of(c), "group.max_starts_per_second");
  c = defaults();
  c.max_feeds = 0;
  EXPECT_EQ(field_of(c), "group.max_feeds");
  c = defaults();
  c.max_inflight_batches = 0;
  EXPECT_EQ(field_of(c), "group.max_inflight_batches");
  c.max_inflight_batches = 1025;
  EXPECT_EQ(field_of(c), "group.max_inflight_batches");
  c = defaults();
  c.renew_interval = 0;
  EXPECT_THROW(group_state(c, "m1", {}), config_error);
  // Past a day a duration is refused: added to a time point, 1e10 s would
  // overflow int64 nanoseconds and "never" would become "now".
  c = defaults();
  c.rebalance_delay = 1e10;
  EXPECT_EQ(field_of(c), "group.rebalance_delay");
  c = defaults();
  c.initial_settle = 86401;
  EXPECT_EQ(field_of(c), "group.initial_settle");
  c = defaults();
  c.reconcile_interval = 1e10;
  EXPECT_EQ(field_of(c), "group.reconcile_interval");
  c = defaults();
  c.rebalance_delay = 86400; // a day: allowed
  EXPECT_EQ(field_of(c), "(valid)");
}

// -- G1 join, G2 settle ----------------------------------------------------

TEST(GroupState, StartJoinsAndRetriesAFailedJoinAfterRenewInterval) {
  group_state st(defaults(), "m1", feed_names(2));
  auto a = st.start(t0);
  auto j = all_of<join_lease>(a);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0].generation, 0u);
  EXPECT_TRUE(st.on_join_failed(j[0].request, t0 + 100ms).empty());
  EXPECT_EQ(st.next_wakeup(), t0 + 100ms + 1500ms);
  EXPECT_TRUE(st.tick(t0 + 1599ms).empty());
  auto again = all_of<join_lease>(st.tick(t0 + 1600ms));
  ASSERT_EQ(again.size(), 1u);
  EXPECT_NE(again[0].request, j[0].request);
  // A stale answer of the first join is ignored.
  st.on_joined(j[0].request, 5.0, t0 + 1700ms);
  EXPECT_EQ(st.phase(), group_phase::joining);
}

TEST(GroupState, ClaimsNothingUntilTheViewWasStableForInitialSettle) {
  member m(defaults(), feed_names(3));
  m.join({"m1"});
  EXPECT_EQ(m.st.phase(), group_phase::settling);
  EXPECT_FALSE(has<claim_feeds>(m.at(t0 + 2999ms)));
  // A change restarts the settle period.
  m.see({"m1", "m2"}, t0 + 2999ms);
  EXPECT_FALSE(has<claim_feeds>(m.at(t0 + 3s)));
  EXPECT_EQ(m.st.phase(), group_phase::settling);
  auto c = m.at(t0 + 2999ms + 3s);
  EXPECT_EQ(m.st.phase(), group_phase::active);
  EXPECT_TRUE(has<claim_feeds>(c) || m.st.desired().empty());
}

TEST(GroupState, MinMembersKeepsTheMemberSettling) {
  auto c = defaults();
  c.min_members = 2;
  member m(c, feed_names(3));
  m.join({"m1"});
  m.at(t0 + 10s);
  EXPECT_EQ(m.st.phase(), group_phase::settling);
  m.see({"m1", "m2"}, t0 + 10s);
  m.at(t0 + 13s);
  EXPECT_EQ(m.st.phase(), group_phase::active);
}

TEST(GroupState, AViewWithoutThisMemberDecidesNothing) {
  member m(defaults(), feed_names(3));
  m.join({"m1"});
  m.see({"m2"}, t0 + 1s); // ignored: would restart the settle period
  m.at(t0 + 3s);
  EXPECT_EQ(m.st.phase(), group_phase::active);
  EXPECT_EQ(m.st.desired().size(), 3u);
}

TEST(GroupState, PollsEveryPollInterval) {
  member m(defaults(), feed_names(1));
  auto a = m.st.start(t0);
  auto b = m.st.on_joined(all_of<join_lease>(a).at(0).request, 5.0, t0);
  EXPECT_EQ(all_of<poll_members>(b).size(), 1u);
  EXPECT_FALSE(has<poll_members>(m.at(t0 + 499ms)));
  EXPECT_TRUE(has<poll_members>(m.at(t0 + 500ms)));
}

// -- G3 claims -------------------------------------------------------------

TEST(GroupState, ClaimsOnlyTheFeedsItWinsInBatches) {
  auto c = defaults();
  c.batch = 2;
  auto fs = feed_names(40);
  member m(c, fs);
  auto a = m.activate({"m1", "m2"});
  auto more = m.win_all(a); // the rest of the wave
  a.insert(a.end(), more.begin(), more.end());
  std::vector<std::string> claimed;
  for (const auto& cl : all_of<claim_feeds>(a)) {
    EXPECT_LE(cl.feeds.size(), 2u);
    claimed.insert(claimed.end(), cl.feeds.begin(), cl.feeds.end());
  }
  std::vector<std::string> expect;
  std::vector<std::string> members{"m1", "m2"};
  for (const auto& f : fs)
    if (members[hrw_winner(f, members)] == "m1")
      expect.push_back(f);
  std::sort(claimed.begin(), claimed.end());
  std::sort(expect.begin(), expect.end());
  EXPECT_EQ(claimed, expect);
  EXPECT_GT(expect.size(), 10u);
  EXPECT_LT(expect.size(), 30u);
}

TEST(GroupState, AHeldDesiredFeedIsAskedAgainAfterTwoPollsNotAReconcile) {
  // Its holder is about to release it (a rebalance delay running out, a
  // leave, an expiring lease): the claim is repeated min(reconcile, 2 poll)
  // later, one claim in flight at a time.
  member m(defaults(), {"f"});
  auto a = m.activate();
  auto cl = all_of<claim_feeds>(a);
  ASSERT_EQ(cl.size(), 1u);
  m.st.on_claimed(cl[0].request, {{"f", claim_outcome::held, 0, {}}}, m.now);
  EXPECT_LE(m.st.next_wakeup(), t0 + 4s);
  EXPECT_FALSE(has<claim_feeds>(m.at(t0 + 3999ms)));
  auto again = all_of<claim_feeds>(m.at(t0 + 4s)); // 3 s + 2 x poll 0.5 s
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].feeds, std::vector<std::string>{"f"});
  EXPECT_FALSE(has<claim_feeds>(m.at(t0 + 4500ms))); // one in flight
}

TEST(GroupState, ViewChangeTriggersClaimAtOnce) {
  member m(defaults(), {"f"});
  std::vector<std::string> two{"m1", "m2"};
  // Pick a second member that wins "f", so that its leaving gives f to m1.
  std::string other = "m2";
  for (int i = 2; hrw_winner("f", {"m1", other}) != 1; ++i)
    other = "m" + std::to_string(i);
  auto a = m.activate({"m1", other});
  EXPECT_FALSE(has<claim_feeds>(a));
  m.now = t0 + 4s;
  auto b = m.see({"m1"}, t0);
  auto cl = all_of<claim_feeds>(b);
  ASSERT_EQ(cl.size(), 1u);
  EXPECT_EQ(cl[0].feeds, std::vector<std::string>{"f"});
}

TEST(GroupState, MaxFeedsCapsClaims) {
  auto c = defaults();
  c.max_feeds = 3;
  member m(c, feed_names(10));
  auto a = m.activate();
  std::size_t n = 0;
  for (const auto& cl : all_of<claim_feeds>(a))
    n += cl.feeds.size();
  EXPECT_EQ(n, 3u);
}

TEST(GroupState, FiveThousandFeedsAreClaimedWithAtMostTheWindowInFlight) {
  // A member that must take many feeds at once (a start alone, a peer's
  // crash) pipelines its claims: never more than max_inflight_batches
  // requests out, each answer sends the next batch, and it ends owning
  // every feed without waiting for a reconcile.
  auto c = defaults();
  c.max_starts_per_second = 100000;
  member m(c, feed_names(5000));
  std::vector<claim_feeds> out = all_of<claim_feeds>(m.activate());
  std::size_t most = out.size(), requests = 0;
  uint64_t token = 1;
  while (!out.empty()) {
    // Answer the oldest; what it sends joins the window.
    auto cl = out.front();
    out.erase(out.begin());
    ++requests;
    EXPECT_LE(cl.feeds.size(), c.batch);
    std::vector<claim_reply> rs;
    for (const auto& f : cl.feeds)
      rs.push_back(claim_reply{f, claim_outcome::won, token++, std::nullopt});
    for (auto& x : all_of<claim_feeds>(m.st.on_claimed(cl.request, rs, m.now)))
      out.push_back(x);
    most = std::max(most, out.size());
  }
  EXPECT_EQ(most, 4u);
  EXPECT_EQ(requests, (5000u + 63) / 64);
  EXPECT_EQ(m.st.owned().size(), 5000u);
  EXPECT_EQ(m.st.counters().claims_won, 5000u);
}

TEST(GroupState, AFailedClaimBacksOffAndTheWaveGoesOnWithoutIt) {
  // A window of one batch of one feed: the wave is f0, f1, f2 in turn.
  auto c = defaults();
  c.batch = 1;
  c.max_inflight_batches = 1;
  member m(c, feed_names(3));
  auto first = all_of<claim_feeds>(m.activate());
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].feeds, std::vector<std::string>{"f0"});
  // f0 fails: the slot goes to f1, not to f0 again (no tight loop).
  auto next
    = all_of<claim_feeds>(m.st.on_claim_failed(first[0].request, m.now));
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].feeds, std::vector<std::string>{"f1"});
  next = all_of<claim_feeds>(m.st.on_claimed(
    next[0].request, {{"f1", claim_outcome::won, 1, {}}}, m.now));
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].feeds, std::vector<std::string>{"f2"});
  EXPECT_TRUE(all_of<claim_feeds>(
                m.st.on_claimed(next[0].request,
                                {{"f2", claim_outcome::won, 2, {}}}, m.now))
                .empty());
  // f0 again after min(reconcile, 2 poll) = 1 s, then 2 s, 4 s, and 5 s
  // (reconcile_interval) from then on while it keeps failing.
  auto failed_at = m.now;
  for (auto wait : {1000ms, 2000ms, 4000ms, 5000ms, 5000ms}) {
    EXPECT_EQ(m.st.next_wakeup() <= failed_at + wait, true);
    EXPECT_FALSE(has<claim_feeds>(m.at(failed_at + wait - 1ms)));
    auto again = all_of<claim_feeds>(m.at(failed_at + wait));
    ASSERT_EQ(again.size(), 1u);
    EXPECT_EQ(again[0].feeds, std::vector<std::string>{"f0"});
    m.st.on_claim_failed(again[0].request, m.now);
    failed_at = m.now;
  }
  // A success resets the backoff.
  auto again = all_of<claim_feeds>(m.at(failed_at + 5s));
  ASSERT_EQ(again.size(), 1u);
  m.st.on_claimed(again[0].request, {{"f0", claim_outcome::won, 3, {}}}, m.now);
  EXPECT_EQ(m.st.owned().size(), 3u);
  EXPECT_EQ(m.st.counters().claim_errors, 6u);
}

TEST(GroupState, AHeldFeedIsNotAskedAgainWithinTheSameWave) {
  auto c = defaults();
  c.batch = 1;
  c.max_inflight_batches = 1;
  member m(c, feed_names(2));
  auto cl = all_of<claim_feeds>(m.activate()).at(0);
  EXPECT_EQ(cl.feeds, std::vector<std::string>{"f0"});
  auto next = all_of<claim_feeds>(
    m.st.on_claimed(cl.request, {{"f0", claim_outcome::held, 0, {}}}, m.now));
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].feeds, std::vector<std::string>{"f1"});
  EXPECT_TRUE(all_of<claim_feeds>(
                m.st.on_claimed(next[0].request,
                                {{"f1", claim_outcome::held, 0, {}}}, m.now))
                .empty());
  // The held retry (2 poll = 1 s) starts a new wave.
  auto again = all_of<claim_feeds>(m.at(m.now + 1s));
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].feeds, std::vector<std::string>{"f0"});
}

// -- G4 spawns -------------------------------------------------------------

TEST(GroupState, WonClaimSpawnsAtTheCommittedCursorWithTheFenceDeadline) {
  member m(defaults(), {"f"});
  auto a = m.activate();
  auto cl = all_of<claim_feeds>(a).at(0);
  auto b = m.st.on_claimed(cl.request, {{"f", claim_outcome::won, 42, pos(17)}},
                           m.now);
  auto sp = all_of<spawn_watcher>(b);
  ASSERT_EQ(sp.size(), 1u);
  EXPECT_EQ(sp[0].feed, "f");
  EXPECT_EQ(sp[0].token, 42u);
  EXPECT_EQ(sp[0].resume, std::optional<group_position>{pos(17)});
  EXPECT_EQ(sp[0].fence_deadline, m.st.fence_deadline());
  EXPECT_EQ(m.st.token_of("f"), std::optional<uint64_t>{42});
}

TEST(GroupState, SpawnsAreRateLimited) {
  auto c = defaults();
  c.max_starts_per_second = 2;
  member m(c, feed_names(5));
  auto a = m.activate();
  auto b = m.win_all(a);
  EXPECT_EQ(all_of<spawn_watcher>(b).size(), 2u); // one second's burst
  EXPECT_FALSE(has<spawn_watcher>(m.at(m.now + 499ms)));
  EXPECT_EQ(all_of<spawn_watcher>(m.at(m.now + 1ms)).size(), 1u);
  EXPECT_EQ(all_of<spawn_watcher>(m.at(m.now + 1s)).size(), 2u);
  EXPECT_EQ(m.st.counters().spawns, 5u);
}

TEST(GroupState, NoSecondWatcherUntilTheFirstHasStopped) {
  member m(defaults(), {"f"});
  // A fenced commit drops the ownership and stops the watcher.
  auto [sp, d] = fence_first_watcher(m);
  ASSERT_EQ(all_of<stop_watcher>(d).size(), 1u);
  EXPECT_EQ(all_of<stop_watcher>(d)[0].reason, stop_reason::fenced);
  // Reclaimed and won again before the old watcher answered.
  auto e = m.at(t0 + 8s);
  auto cl = all_of<claim_feeds>(e).at(0);
  auto f = m.st.on_claimed(cl.request, {{"f", claim_outcome::won, 200, pos(3)}},
                           m.now);
  EXPECT_FALSE(has<spawn_watcher>(f));
  auto g = m.st.on_watcher_stopped("f", sp.token, pos(5), m.now);
  auto sp2 = all_of<spawn_watcher>(g);
  ASSERT_EQ(sp2.size(), 1u);
  EXPECT_EQ(sp2[0].token, 200u);
  EXPECT_EQ(sp2[0].resume,
            std::optional<group_position>{pos(3)}); // the store's cursor
}

TEST(GroupState, AReleaseWaitingForAnOlderTenuresWatcherGoesOutWhenItStops) {
  member m(defaults(), {"f"});
  // Fenced: the ownership is dropped and the watcher is asked to stop.
  auto sp = fence_first_watcher(m).first;
  // Claimed again; the member leaves before the answer; the claim is won
  // while the old watcher is still stopping: its release must wait for it.
  auto cl = all_of<claim_feeds>(m.at(t0 + 8s)).at(0);
  m.st.leave(m.now);
  auto d = m.st.on_claimed(cl.request, {{"f", claim_outcome::won, 200, pos(3)}},
                           m.now);
  EXPECT_FALSE(has<release_feeds>(d));
  EXPECT_FALSE(has<spawn_watcher>(d));
  // The old tenure's watcher stops: the new tenure's release goes out, at
  // the store's cursor (the old watcher's position is not this tenure's).
  auto e = m.st.on_watcher_stopped("f", sp.token, pos(5), m.now);
  auto rel = all_of<release_feeds>(e);
  ASSERT_EQ(rel.size(), 1u);
  ASSERT_EQ(rel[0].items.size(), 1u);
  EXPECT_EQ(rel[0].items[0].token, 200u);
  EXPECT_EQ(rel[0].items[0].cursor, std::optional<group_position>{pos(3)});
}

TEST(GroupState, AWatcherThatStopsOnItsOwnIsRespawnedAtItsCursor) {
  member m(defaults(), {"f"});
  auto sp = all_of<spawn_watcher>(m.win_all(m.activate(), pos(2))).at(0);
  m.st.on_progress("f", sp.token, pos(9), m.now);
  auto a = m.st.on_watcher_stopped("f", sp.token, pos(9), m.now);
  auto sp2 = all_of<spawn_watcher>(a);
  ASSERT_EQ(sp2.size(), 1u);
  EXPECT_EQ(sp2[0].resume, std::optional<group_position>{pos(9)});
}

// -- G5 checkpoints --------------------------------------------------------

TEST(GroupState, CheckpointCommitsOnlyDirtyFeedsOncePerInterval) {
  member m(defaults(), feed_names(3));
  auto sps = all_of<spawn_watcher>(m.win_all(m.activate(), pos(10)));
  ASSERT_EQ(sps.size(), 3u);
  m.st.on_progress(sps[0].feed, sps[0].token, pos(12), m.now);
  m.st.on_progress(sps[1].feed, sps[1].token, pos(10), m.now); // not past 10
  m.st.on_progress(sps[2].feed, sps[2].token + 1, pos(50),
                   m.now); // stale token
  EXPECT_FALSE(has<commit_cursors>(m.at(t0 + 3999ms)));
  auto cs = all_of<commit_cursors>(m.at(t0 + 4s));
  ASSERT_EQ(cs.size(), 1u);
  ASSERT_EQ(cs[0].items.size(), 1u);
  EXPECT_EQ(cs[0].items[0].feed, sps[0].feed);
  EXPECT_EQ(cs[0].items[0].token, sps[0].token);
  EXPECT_EQ(cs[0].items[0].cursor, pos(12));
  // More progress while the commit is in flight: not sent twice.
  m.st.on_progress(sps[0].feed, sps[0].token, pos(15), m.now);
  EXPECT_FALSE(has<commit_cursors>(m.at(t0 + 5s)));
  m.st.on_committed(cs[0].request, {{sps[0].feed, commit_outcome::ok}}, m.now);
  auto next = all_of<commit_cursors>(m.at(t0 + 6s));
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].items.at(0).cursor, pos(15));
  m.st.on_committed(next[0].request, {{sps[0].feed, commit_outcome::ok}},
                    m.now);
  EXPECT_FALSE(has<commit_cursors>(m.at(t0 + 7s)));
}

TEST(GroupState, ACommitErrorLeavesTheFeedDirty) {
  member m(defaults(), {"f"});
  auto sp = all_of<spawn_watcher>(m.win_all(m.activate())).at(0);
  m.st.on_progress("f", sp.token, pos(3), m.now);
  auto c = all_of<commit_cursors>(m.at(t0 + 4s)).at(0);
  auto a = m.st.on_commit_failed(c.request, m.now);
  EXPECT_FALSE(has<stop_watcher>(a));
  auto again = all_of<commit_cursors>(m.at(t0 + 5s));
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].items.at(0).cursor, pos(3));
  EXPECT_EQ(m.st.counters().commit_errors, 1u);
}

TEST(GroupState, ACheckpointKeepsAtMostTheWindowOfCommitsInFlight) {
  auto c = defaults();
  c.batch = 2;
  c.max_inflight_batches = 2;
  c.max_starts_per_second = 1000;
  member m(c, feed_names(10));
  auto sps = all_of<spawn_watcher>(m.win_all(m.activate()));
  ASSERT_EQ(sps.size(), 10u);
  for (const auto& s : sps)
    m.st.on_progress(s.feed, s.token, pos(5), m.now);
  auto out = all_of<commit_cursors>(m.at(t0 + 4s));
  ASSERT_EQ(out.size(), 2u);
  std::size_t most = out.size(), items = 0;
  bool failed_one = false;
  std::vector<std::string> sent;
  while (!out.empty()) {
    auto cc = out.front();
    out.erase(out.begin());
    items += cc.items.size();
    for (const auto& it : cc.items)
      sent.push_back(it.feed);
    group_actions x;
    if (!failed_one) {
      // The first fails: its feeds wait for the next checkpoint, the rest
      // of this one goes on.
      failed_one = true;
      x = m.st.on_commit_failed(cc.request, m.now);
    } else {
      std::vector<commit_reply> ok;
      for (const auto& it : cc.items)
        ok.push_back({it.feed, commit_outcome::ok});
      x = m.st.on_committed(cc.request, ok, m.now);
    }
    for (auto& y : all_of<commit_cursors>(x))
      out.push_back(y);
    most = std::max(most, out.size());
  }
  EXPECT_EQ(most, 2u);
  EXPECT_EQ(items, 10u);
  std::sort(sent.begin(), sent.end());
  EXPECT_EQ(std::unique(sent.begin(), sent.end()), sent.end());
  // The failed batch's two feeds, at the next checkpoint.
  auto retry = all_of<commit_cursors>(m.at(t0 + 5s));
  ASSERT_EQ(retry.size(), 1u);
  EXPECT_EQ(retry[0].items.size(), 2u);
}

// -- G6 renew, fence, hold --------------------------------------------------

TEST(GroupState, TheDeadlineCountsFromTheKeepalivesSendTime) {
  member m(defaults(), {"f"});
  m.answer_renewals = false;
  m.join();
  // Granted: deadline = join sent (t0) + 5 s - 1 s.
  EXPECT_EQ(m.st.fence_deadline(), t0 + 4s);
  auto r = all_of<renew_lease>(m.at(t0 + 1500ms));
  ASSERT_EQ(r.size(), 1u);
  // The answer comes 700 ms later; the deadline counts from the send.
  auto a
    = m.st.on_keepalive(r[0].request, keepalive_outcome::ok, 5.0, t0 + 2200ms);
  EXPECT_EQ(m.st.fence_deadline(), t0 + 5500ms);
  auto f = all_of<fence_watchers>(a);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].deadline, t0 + 5500ms);
  // A shorter TTL in the answer counts.
  auto r2 = all_of<renew_lease>(m.at(t0 + 3s)).at(0);
  m.st.on_keepalive(r2.request, keepalive_outcome::ok, 3.0, t0 + 3100ms);
  EXPECT_EQ(m.st.fence_deadline(), t0 + 5500ms); // 3 + 3 - 1 is earlier
}

TEST(GroupState, HoldsPastTheDeadlineAndALiveKeepaliveLiftsTheHold) {
  member m(defaults(), {"f"});
  m.answer_renewals = false;
  auto act = m.activate();
  m.win_all(act);
  // Keepalives go unanswered: the deadline t0 + 4 s passes.
  auto sent = all_of<renew_lease>(act);
  for (auto t = t0 + 3s; t < t0 + 4s; t += 100ms) {
    auto a = all_of<renew_lease>(m.at(t));
    sent.insert(sent.end(), a.begin(), a.end());
  }
  EXPECT_FALSE(m.st.holding());
  auto h = m.at(t0 + 4s);
  EXPECT_TRUE(has<hold_deliveries>(h));
  EXPECT_TRUE(m.st.holding());
  // A late answer whose deadline already passed does not lift the hold.
  ASSERT_FALSE(sent.empty());
  auto late = m.st.on_keepalive(sent[0].request, keepalive_outcome::ok, 5.0,
                                t0 + 7600ms);
  EXPECT_TRUE(m.st.holding());
  EXPECT_FALSE(has<unhold_deliveries>(late));
  // A fresh renewal answered in time lifts it; no claim, no move.
  auto r = all_of<renew_lease>(late); // the overdue renewal, sent at 7.6 s
  ASSERT_EQ(r.size(), 1u);
  auto u
    = m.st.on_keepalive(r[0].request, keepalive_outcome::ok, 4.0, t0 + 7800ms);
  auto un = all_of<unhold_deliveries>(u);
  ASSERT_EQ(un.size(), 1u);
  EXPECT_EQ(un[0].deadline, t0 + 7600ms + 3s);
  EXPECT_FALSE(m.st.holding());
  EXPECT_FALSE(has<stop_watcher>(u));
  EXPECT_EQ(m.st.owned().size(), 1u);
}

TEST(GroupState, NoClaimsOrSpawnsWhileHolding) {
  member m(defaults(), {"f"});
  m.answer_renewals = false;
  auto a = m.activate();
  m.at(t0 + 4s); // deadline passed, no renewal answered
  ASSERT_TRUE(m.st.holding());
  auto b = m.win_all(a);
  EXPECT_FALSE(has<spawn_watcher>(b));
  EXPECT_FALSE(has<claim_feeds>(m.at(t0 + 9s)));
}

// -- G7 lease lost --------------------------------------------------------

TEST(GroupState, LostLeaseStopsEveryWatcherAndRejoinsWithANewGeneration) {
  member m(defaults(), feed_names(2));
  auto a = m.activate();
  m.win_all(a);
  m.answer_renewals = false;
  auto r = all_of<renew_lease>(m.at(t0 + 4500ms)).at(0);
  auto l = m.st.on_keepalive(r.request, keepalive_outcome::ok, 0.0, m.now);
  auto stops = all_of<stop_watcher>(l);
  ASSERT_EQ(stops.size(), 2u);
  for (const auto& s : stops)
    EXPECT_EQ(s.reason, stop_reason::lease_lost);
  auto j = all_of<join_lease>(l);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0].generation, 1u);
  EXPECT_EQ(m.st.phase(), group_phase::joining);
  EXPECT_TRUE(m.st.owned().empty());
  // Replies of the old lease are stale.
  EXPECT_TRUE(
    m.st.on_claimed(all_of<claim_feeds>(a).at(0).request, {}, m.now).empty());
}

// -- G8 rebalance -----------------------------------------------------------

TEST(GroupState, MovesAFeedOnlyAfterTheWinnerWasListedForRebalanceDelay) {
  member m(defaults(), {"f"});
  std::string other = "m2";
  for (int i = 2; hrw_winner("f", {"m1", other}) != 1; ++i)
    other = "m" + std::to_string(i);
  auto sp = all_of<spawn_watcher>(m.win_all(m.activate())).at(0);
  m.st.on_progress("f", sp.token, pos(7), m.now);
  m.now = t0 + 4s;
  auto s = m.see({"m1", other}, t0 + 4s);
  EXPECT_FALSE(has<stop_watcher>(s));
  EXPECT_FALSE(has<stop_watcher>(m.at(t0 + 8999ms)));
  auto st = all_of<stop_watcher>(m.at(t0 + 9s));
  ASSERT_EQ(st.size(), 1u);
  EXPECT_EQ(st[0].reason, stop_reason::rebalance);
  auto rel = all_of<release_feeds>(
    m.st.on_watcher_stopped("f", sp.token, pos(8), t0 + 9100ms));
  ASSERT_EQ(rel.size(), 1u);
  ASSERT_EQ(rel[0].items.size(), 1u);
  EXPECT_EQ(rel[0].items[0].cursor, std::optional<group_position>{pos(8)});
  EXPECT_EQ(rel[0].items[0].token, sp.token);
  EXPECT_EQ(rel[0].items[0].hint_to, other);
  m.st.on_released(rel[0].request, {{"f", commit_outcome::ok}}, m.now);
  EXPECT_TRUE(m.st.owned().empty());
}

TEST(GroupState, RebalanceReleasesBeginAtTheWinnersStartRate) {
  // 12 feeds held, 2 starts a second: when the new member has been listed
  // for rebalance_delay, the feeds it wins stop two at once (one second's
  // burst) and then one every half second; the others keep their
  // watchers until their turn. A view change in between starts over from
  // the rebalance delay of each feed's winner (unchanged here: at once).
  auto c = defaults();
  c.max_starts_per_second = 2;
  auto feeds = feed_names(12);
  member m(c, feeds);
  auto a = m.activate();
  auto sps = all_of<spawn_watcher>(m.win_all(a));
  for (auto t = m.now + 500ms; sps.size() < feeds.size(); t += 500ms)
    for (auto& sp : all_of<spawn_watcher>(m.at(t)))
      sps.push_back(sp);
  std::string other = "m2";
  std::size_t moving = 0;
  for (int i = 2;; ++i) {
    other = "m" + std::to_string(i);
    moving = 0;
    for (const auto& f : feeds)
      moving += hrw_winner(f, {"m1", other}) == 1;
    if (moving >= 5)
      break;
  }
  auto seen = m.now + 1s;
  m.now = seen;
  EXPECT_FALSE(has<stop_watcher>(m.see({"m1", other}, seen)));
  auto due = seen + 5s; // rebalance_delay
  EXPECT_FALSE(has<stop_watcher>(m.at(due - 1ms)));
  std::vector<std::string> stopped;
  auto take = [&](const group_actions& as) {
    auto st = all_of<stop_watcher>(as);
    for (auto& x : st) {
      EXPECT_EQ(x.reason, stop_reason::rebalance);
      EXPECT_EQ(hrw_winner(x.feed, {"m1", other}), 1u) << x.feed;
      stopped.push_back(x.feed);
    }
    return st.size();
  };
  EXPECT_EQ(take(m.at(due)), 2u) << "one second's burst";
  EXPECT_EQ(take(m.at(due + 499ms)), 0u);
  EXPECT_EQ(take(m.at(due + 500ms)), 1u);
  // The wake-up asked for is the next token, not later.
  EXPECT_LE(m.st.next_wakeup(), due + 1000ms + 1ms);
  // The view is polled again, unchanged: the rest stay due.
  m.see({"m1", other}, seen);
  EXPECT_EQ(take(m.at(due + 1000ms)), 1u);
  for (auto t = due + 1500ms; stopped.size() < moving; t += 500ms)
    ASSERT_LE(take(m.at(t)), 1u);
  std::sort(stopped.begin(), stopped.end());
  EXPECT_EQ(std::adjacent_find(stopped.begin(), stopped.end()), stopped.end())
    << "a feed stopped twice";
  EXPECT_EQ(stopped.size(), moving);
  EXPECT_EQ(take(m.at(m.now + 5s)), 0u) << "the feeds m1 still wins stay";
}

TEST(GroupState, APacedReleaseWaitsAgainForAWinnerListedAnew) {
  // Two of the moving feeds stop at the delay (2 starts a second); then
  // the winner registers again under the same name (a restart between two
  // polls): the rest wait for its new rebalance_delay, then go on at the
  // pace. (Found by review: the paced queue did not look at the listing.)
  auto c = defaults();
  c.max_starts_per_second = 2;
  auto feeds = feed_names(12);
  member m(c, feeds);
  auto sps = all_of<spawn_watcher>(m.win_all(m.activate()));
  for (auto t = m.now + 500ms; sps.size() < feeds.size(); t += 500ms)
    for (auto& sp : all_of<spawn_watcher>(m.at(t)))
      sps.push_back(sp);
  std::string other;
  std::size_t moving = 0;
  for (int i = 2; moving < 5; ++i) {
    other = "m" + std::to_string(i);
    moving = 0;
    for (const auto& f : feeds)
      moving += hrw_winner(f, {"m1", other}) == 1;
  }
  auto seen = m.now + 1s;
  m.now = seen;
  m.see({"m1", other}, seen);
  auto due = seen + 5s;
  EXPECT_EQ(all_of<stop_watcher>(m.at(due)).size(), 2u);
  m.see({"m1", other}, due); // listed anew at `due`
  std::size_t early = 0;
  for (auto t = due + 500ms; t < due + 5s; t += 500ms)
    early += all_of<stop_watcher>(m.at(t)).size();
  EXPECT_EQ(early, 0u) << "released to a winner listed for < rebalance_delay";
  std::size_t later = all_of<stop_watcher>(m.at(due + 5s)).size();
  EXPECT_GE(later, 1u);
  EXPECT_LE(later, 2u) << "still at the pace";
}

// -- G9 leave ---------------------------------------------------------------

TEST(GroupState, LeaveReleasesEverythingThenRevokes) {
  member m(defaults(), feed_names(2));
  auto sps = all_of<spawn_watcher>(m.win_all(m.activate()));
  ASSERT_EQ(sps.size(), 2u);
  auto a = m.st.leave(t0 + 3100ms);
  EXPECT_EQ(all_of<stop_watcher>(a).size(), 2u);
  EXPECT_FALSE(has<revoke_lease>(a));
  group_actions rel;
  for (const auto& s : sps) {
    auto x = m.st.on_watcher_stopped(s.feed, s.token, pos(4), t0 + 3200ms);
    rel.insert(rel.end(), x.begin(), x.end());
  }
  auto rs = all_of<release_feeds>(rel);
  ASSERT_FALSE(rs.empty());
  group_actions done;
  for (const auto& r : rs) {
    EXPECT_EQ(r.reason, stop_reason::leave);
    std::vector<commit_reply> ok;
    for (const auto& it : r.items)
      ok.push_back({it.feed, commit_outcome::ok});
    auto x = m.st.on_released(r.request, ok, t0 + 3300ms);
    done.insert(done.end(), x.begin(), x.end());
  }
  EXPECT_TRUE(has<revoke_lease>(done));
  EXPECT_EQ(m.st.phase(), group_phase::left);
}

namespace {

/// Member m1 of {m1, m2}, holding and running every feed it wins; returns
/// their spawns.
std::vector<spawn_watcher> running_share(member& m) {
  auto sps = all_of<spawn_watcher>(m.win_all(m.activate({"m1", "m2"})));
  auto want = m.st.desired().size();
  for (auto t = m.now + 500ms; sps.size() < want; t += 500ms)
    for (auto& sp : all_of<spawn_watcher>(m.at(t)))
      sps.push_back(sp);
  return sps;
}

} // namespace

TEST(GroupState, ALeaveWithdrawsThenHandsEachFeedToItsWinnerAtTheStartRate) {
  // G9 paced: the withdrawal goes out first; the feeds stop two at once
  // (one second's burst at 2 starts a second) and then one every half
  // second, each released to m2 (the winner once m1 is gone); the others
  // keep delivering and checkpointing until their turn; the lease is
  // revoked when the last release is answered.
  auto c = defaults();
  c.max_starts_per_second = 2;
  member m(c, feed_names(16));
  auto sps = running_share(m);
  ASSERT_GE(sps.size(), 4u);
  std::map<std::string, uint64_t> token;
  for (const auto& sp : sps)
    token[sp.feed] = sp.token;
  auto left_at = m.now + 100ms;
  m.now = left_at;
  auto a = m.st.leave(left_at);
  auto w = all_of<withdraw_member>(a);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].request, 0u);
  EXPECT_TRUE(std::holds_alternative<withdraw_member>(a.front()))
    << "withdrawn before any feed stops";
  m.st.on_withdrawn(w[0].request, left_at + 10ms);
  std::vector<std::string> stopped;
  std::size_t released = 0;
  bool revoked = false;
  std::string waiting; // a feed delivered here until its turn
  bool committed = false;
  auto commits = [&](const group_actions& as) {
    for (const auto& cc : all_of<commit_cursors>(as))
      for (const auto& it : cc.items)
        committed = committed || (it.feed == waiting && it.cursor == pos(3));
  };
  auto handle = [&](const group_actions& as) {
    commits(as);
    for (const auto& x : all_of<stop_watcher>(as)) {
      EXPECT_EQ(x.reason, stop_reason::leave);
      stopped.push_back(x.feed);
      // Drained at once: the release follows.
      auto r = m.st.on_watcher_stopped(x.feed, x.token, pos(7), m.now);
      commits(r);
      for (const auto& rel : all_of<release_feeds>(r)) {
        std::vector<commit_reply> ok;
        for (const auto& it : rel.items) {
          EXPECT_EQ(it.hint_to, "m2");
          EXPECT_EQ(it.cursor, std::optional<group_position>(pos(7)));
          ok.push_back({it.feed, commit_outcome::ok});
        }
        released += ok.size();
        auto done = m.st.on_released(rel.request, ok, m.now);
        commits(done);
        revoked = has<revoke_lease>(done) || revoked;
      }
    }
    return all_of<stop_watcher>(as).size();
  };
  EXPECT_EQ(handle(a), 2u) << "one second's burst";
  EXPECT_EQ(m.st.phase(), group_phase::leaving);
  // A feed still here reports progress: it is checkpointed meanwhile.
  for (const auto& sp : sps)
    if (std::find(stopped.begin(), stopped.end(), sp.feed) == stopped.end())
      waiting = sp.feed;
  ASSERT_FALSE(waiting.empty());
  commits(m.st.on_progress(waiting, token[waiting], pos(3), m.now));
  EXPECT_EQ(handle(m.at(left_at + 499ms)), 0u);
  for (auto t = left_at + 500ms; !revoked && t < left_at + 20s; t += 250ms) {
    ASSERT_LE(handle(m.at(t)), 1u) << "at the pace";
  }
  EXPECT_TRUE(committed) << "a feed waiting for its turn is checkpointed";
  EXPECT_TRUE(revoked);
  EXPECT_EQ(released, sps.size());
  EXPECT_EQ(m.st.phase(), group_phase::left);
  std::sort(stopped.begin(), stopped.end());
  EXPECT_EQ(std::adjacent_find(stopped.begin(), stopped.end()), stopped.end());
}

TEST(GroupState,
     AWatcherThatStopsOnItsOwnWhileWaitingForItsTurnIsReleasedAtOnce) {
  // Leaving, nothing is spawned: a feed whose watcher ends by itself would
  // sit undelivered until its turn, and its pending spawn would ask for a
  // wake-up at every spawn token (a 1 ms loop in the shell). It goes now.
  auto c = defaults();
  c.max_starts_per_second = 2;
  member m(c, feed_names(16));
  auto sps = running_share(m);
  ASSERT_GE(sps.size(), 4u);
  auto a = m.st.leave(m.now);
  std::vector<std::string> stopping;
  for (const auto& x : all_of<stop_watcher>(a))
    stopping.push_back(x.feed);
  ASSERT_EQ(stopping.size(), 2u);
  const spawn_watcher* waiting = nullptr;
  for (const auto& sp : sps)
    if (std::find(stopping.begin(), stopping.end(), sp.feed) == stopping.end())
      waiting = &sp;
  ASSERT_NE(waiting, nullptr);
  auto x = m.st.on_watcher_stopped(waiting->feed, waiting->token, pos(9),
                                   m.now + 10ms);
  EXPECT_FALSE(has<spawn_watcher>(x));
  auto r = all_of<release_feeds>(x);
  ASSERT_EQ(r.size(), 1u);
  ASSERT_EQ(r[0].items.size(), 1u);
  EXPECT_EQ(r[0].items[0].feed, waiting->feed);
  EXPECT_EQ(r[0].items[0].cursor, std::optional<group_position>(pos(9)));
  EXPECT_EQ(r[0].reason, stop_reason::leave);
  EXPECT_GT(m.st.next_wakeup(), m.now + 10ms) << "no wake-up already due";
}

namespace {

/// Drains every stop of `as` at once and answers its releases ok; returns
/// the feeds released and sets `revoked` when the lease was revoked.
std::size_t drain_and_release(member& m, const group_actions& as,
                              bool& revoked) {
  std::size_t n = 0;
  revoked = revoked || has<revoke_lease>(as);
  for (const auto& x : all_of<stop_watcher>(as)) {
    auto r = m.st.on_watcher_stopped(x.feed, x.token, pos(7), m.now);
    revoked = revoked || has<revoke_lease>(r);
    for (const auto& rel : all_of<release_feeds>(r)) {
      std::vector<commit_reply> ok;
      for (const auto& it : rel.items)
        ok.push_back({it.feed, commit_outcome::ok});
      n += ok.size();
      revoked = has<revoke_lease>(m.st.on_released(rel.request, ok, m.now))
                || revoked;
    }
  }
  return n;
}

} // namespace

TEST(GroupState, ARenewalGapDuringAPacedLeaveHandsTheRestOverAtOnce) {
  // 1 start a second, 20-odd feeds: the leave would take 20 s. Keepalives
  // go unanswered for four seconds: past the fence deadline the member
  // holds, and releases every remaining feed with its final position
  // instead of giving the leave up (which would leave them to move as
  // after a crash, their progress since the last checkpoint delivered
  // again). Found by review.
  auto c = defaults();
  c.max_starts_per_second = 1;
  member m(c, feed_names(40));
  auto sps = running_share(m);
  ASSERT_GE(sps.size(), 10u);
  auto a = m.st.leave(m.now);
  m.st.on_withdrawn(all_of<withdraw_member>(a).at(0).request, m.now);
  bool revoked = false;
  auto released = drain_and_release(m, a, revoked);
  auto start = m.now;
  bool held = false;
  for (auto t = start + 100ms; !revoked && t < start + 60s; t += 100ms) {
    m.answer_renewals = !(t > start + 1s && t < start + 5s);
    auto x = m.at(t);
    held = held || has<hold_deliveries>(x);
    released += drain_and_release(m, x, revoked);
  }
  EXPECT_TRUE(held);
  EXPECT_TRUE(revoked);
  EXPECT_EQ(released, sps.size()) << "every feed handed over";
  EXPECT_EQ(m.st.phase(), group_phase::left);
}

TEST(GroupState, ALeavingMemberWakesForItsNextHandoffAndItsCheckpoint) {
  // The shell ticks only at next_wakeup(): while leaving it must ask for
  // the handoff bucket's next token and for the next checkpoint.
  auto c = defaults();
  c.max_starts_per_second = 1;
  c.checkpoint_interval = 0.3;
  member m(c, feed_names(16));
  auto sps = running_share(m);
  ASSERT_GE(sps.size(), 3u);
  auto left_at = m.now + 50ms;
  m.now = left_at;
  auto a = m.st.leave(left_at);
  EXPECT_EQ(all_of<stop_watcher>(a).size(), 1u) << "one second's burst: 1";
  EXPECT_LE(m.st.next_wakeup(), left_at + 300ms + 1ms) << "the checkpoint";
  // Past the checkpoint (nothing to commit), the next token.
  m.at(left_at + 300ms);
  m.at(left_at + 600ms);
  m.at(left_at + 900ms);
  EXPECT_LE(m.st.next_wakeup(), left_at + 1s + 1ms) << "the next handoff";
  EXPECT_GT(m.st.next_wakeup(), left_at + 900ms);
}

TEST(GroupState, AnUncertainClaimIsAskedOnceMoreAtTheLeaveAndReleasedIfWon) {
  // G11: a claim that failed may have created the owner key with this
  // lease. Leaving, it is asked again so that the key is released now,
  // not left unserved until the revoke.
  auto c = defaults();
  c.batch = 1;
  member m(c, feed_names(2));
  auto cl = all_of<claim_feeds>(m.activate());
  ASSERT_EQ(cl.size(), 2u);
  m.st.on_claim_failed(cl[0].request, m.now);
  auto uncertain = cl[0].feeds.at(0);
  m.win_all({claim_feeds{cl[1]}});
  auto a = m.st.leave(m.now + 2s);
  auto again = all_of<claim_feeds>(a);
  ASSERT_EQ(again.size(), 1u);
  ASSERT_EQ(again[0].feeds, std::vector<std::string>{uncertain});
  auto won = m.st.on_claimed(
    again[0].request,
    {claim_reply{uncertain, claim_outcome::won, 300, std::nullopt}},
    m.now + 2100ms);
  auto r = all_of<release_feeds>(won);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].items.at(0).feed, uncertain);
  EXPECT_EQ(r[0].items.at(0).token, 300u);
}

TEST(GroupState, AnUncertainClaimStillBackingOffIsAskedAtTheLeave) {
  // Its back-off (1 s after the failure) is waived: nothing would ask it
  // later while leaving. (Found by review.)
  auto c = defaults();
  c.batch = 1;
  member m(c, feed_names(2));
  auto cl = all_of<claim_feeds>(m.activate());
  ASSERT_EQ(cl.size(), 2u);
  m.st.on_claim_failed(cl[0].request, m.now);
  m.win_all({claim_feeds{cl[1]}});
  auto again = all_of<claim_feeds>(m.st.leave(m.now + 500ms));
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].feeds.at(0), cl[0].feeds.at(0));
}

TEST(GroupState, AnUncertainClaimBeyondAFullWindowIsAskedWhileLeaving) {
  // Window 1, still taken by a claim of the active phase when the leave
  // begins: the uncertain feed goes out when that claim answers.
  // (Found by review.)
  auto c = defaults();
  c.batch = 1;
  c.max_inflight_batches = 1;
  member m(c, feed_names(3));
  auto cl = all_of<claim_feeds>(m.activate());
  ASSERT_EQ(cl.size(), 1u);
  auto next = all_of<claim_feeds>(m.st.on_claim_failed(cl[0].request, m.now));
  ASSERT_EQ(next.size(), 1u);
  EXPECT_FALSE(has<claim_feeds>(m.st.leave(m.now + 2s)));
  auto b = m.st.on_claimed(
    next[0].request,
    {claim_reply{next[0].feeds.at(0), claim_outcome::held, 0, std::nullopt}},
    m.now + 2100ms);
  auto asked = all_of<claim_feeds>(b);
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0].feeds, std::vector<std::string>{cl[0].feeds.at(0)});
  EXPECT_EQ(m.st.phase(), group_phase::leaving);
}

TEST(GroupState, AFailedWithdrawalReleasesEveryRemainingFeedAtOnce) {
  // Still listed, m1 would keep the feeds no other member wants yet: the
  // rest go at once (the pre-pacing rule), and the leave ends as before.
  auto c = defaults();
  c.max_starts_per_second = 2;
  member m(c, feed_names(16));
  auto sps = running_share(m);
  ASSERT_GE(sps.size(), 4u);
  auto a = m.st.leave(m.now);
  auto w = all_of<withdraw_member>(a);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(all_of<stop_watcher>(a).size(), 2u);
  auto f = m.st.on_withdraw_failed(w[0].request, m.now + 5s);
  EXPECT_EQ(all_of<stop_watcher>(f).size(), sps.size() - 2);
  // A stale answer changes nothing.
  EXPECT_TRUE(m.st.on_withdraw_failed(w[0].request, m.now + 5s).empty());
}

TEST(GroupState, ALeaveAloneReleasesEverythingAtOnceWithoutWithdrawing) {
  auto c = defaults();
  c.max_starts_per_second = 2;
  member m(c, feed_names(4));
  auto sps = all_of<spawn_watcher>(m.win_all(m.activate()));
  for (auto t = m.now + 500ms; sps.size() < 4; t += 500ms)
    for (auto& sp : all_of<spawn_watcher>(m.at(t)))
      sps.push_back(sp);
  auto a = m.st.leave(m.now);
  EXPECT_FALSE(has<withdraw_member>(a)) << "nobody to hand over to";
  EXPECT_EQ(all_of<stop_watcher>(a).size(), 4u);
}

TEST(GroupState, LeaveReleasesAtMostTheWindowAtOnce) {
  auto c = defaults();
  c.batch = 3;
  c.max_inflight_batches = 2;
  member m(c, feed_names(20));
  auto sps = all_of<spawn_watcher>(m.win_all(m.activate()));
  ASSERT_EQ(sps.size(), 20u);
  m.st.leave(m.now);
  std::vector<release_feeds> out;
  for (const auto& s : sps)
    for (auto& r : all_of<release_feeds>(
           m.st.on_watcher_stopped(s.feed, s.token, pos(4), m.now)))
      out.push_back(r);
  ASSERT_EQ(out.size(), 2u);
  std::size_t most = out.size(), items = 0;
  bool revoked = false;
  while (!out.empty()) {
    auto r = out.front();
    out.erase(out.begin());
    items += r.items.size();
    std::vector<commit_reply> ok;
    for (const auto& it : r.items)
      ok.push_back({it.feed, commit_outcome::ok});
    auto x = m.st.on_released(r.request, ok, m.now);
    revoked = revoked || has<revoke_lease>(x);
    for (auto& y : all_of<release_feeds>(x))
      out.push_back(y);
    most = std::max(most, out.size());
  }
  EXPECT_EQ(most, 2u);
  EXPECT_EQ(items, 20u);
  EXPECT_TRUE(revoked);
  EXPECT_EQ(m.st.phase(), group_phase::left);
}

TEST(GroupState, ALeaveWithClaimsStillQueuedForTheWindowClaimsNoMore) {
  // Window 1: one claim in flight, the rest of the wave waiting for its
  // slot. The leave sends none of them, releases the one won meanwhile,
  // and ends.
  auto c = defaults();
  c.batch = 1;
  c.max_inflight_batches = 1;
  member m(c, feed_names(3));
  auto first = all_of<claim_feeds>(m.activate());
  ASSERT_EQ(first.size(), 1u);
  auto l = m.st.leave(m.now);
  EXPECT_FALSE(has<claim_feeds>(l));
  auto won = m.st.on_claimed(
    first[0].request,
    {claim_reply{first[0].feeds.at(0), claim_outcome::won, 100, std::nullopt}},
    m.now);
  EXPECT_FALSE(has<claim_feeds>(won)) << "no more claims while leaving";
  EXPECT_FALSE(has<spawn_watcher>(won));
  auto r = all_of<release_feeds>(won);
  ASSERT_EQ(r.size(), 1u);
  ASSERT_EQ(r[0].items.size(), 1u);
  EXPECT_EQ(r[0].items[0].feed, first[0].feeds.at(0));
  auto x = m.st.on_released(
    r[0].request, {commit_reply{r[0].items[0].feed, commit_outcome::ok}},
    m.now);
  EXPECT_FALSE(has<claim_feeds>(x));
  EXPECT_TRUE(has<revoke_lease>(x));
  EXPECT_EQ(m.st.phase(), group_phase::left);
}

TEST(GroupState, ALeavePastTheFenceDeadlineHoldsRetriesAndGivesUpAtItsBound) {
  // No renewal answered: at the fence deadline the deliveries are held,
  // but the leave goes on retrying its release (safe: it compares the
  // token) until lease_ttl + held / rate after it began, then revokes.
  member m(defaults(), {"f"});
  m.answer_renewals = false;
  auto sp = all_of<spawn_watcher>(m.win_all(m.activate())).at(0);
  auto left_at = t0 + 3100ms;
  m.st.leave(left_at);
  auto r = all_of<release_feeds>(
    m.st.on_watcher_stopped("f", sp.token, pos(1), t0 + 3200ms));
  ASSERT_EQ(r.size(), 1u);
  m.st.on_release_failed(r[0].request, t0 + 3300ms);
  auto a = m.at(t0 + 4s); // the deadline, no renewal answered
  EXPECT_TRUE(has<hold_deliveries>(a));
  EXPECT_FALSE(has<revoke_lease>(a));
  EXPECT_EQ(m.st.phase(), group_phase::leaving);
  auto again = all_of<release_feeds>(m.at(t0 + 4300ms));
  ASSERT_EQ(again.size(), 1u) << "retried after checkpoint_interval";
  m.st.on_release_failed(again[0].request, t0 + 4400ms);
  auto end = m.at(left_at + 5s + 1ms);
  EXPECT_TRUE(has<revoke_lease>(end));
  EXPECT_EQ(m.st.phase(), group_phase::left);
}

TEST(GroupState, LeaveGivesUpAfterATtlOfFailingReleasesWhileRenewalsSucceed) {
  // Renewals keep moving the fence deadline forward; releases keep
  // failing. The leave still ends, lease_ttl plus the pacing's time (held
  // feeds / max_starts_per_second: 1 ms for one feed) after it began.
  member m(defaults(), {"f"});
  auto sp = all_of<spawn_watcher>(m.win_all(m.activate())).at(0);
  auto left_at = t0 + 3100ms;
  auto ends_at = left_at + 5s + 1ms;
  m.st.leave(left_at);
  auto fail_releases = [&](const group_actions& as) {
    for (const auto& r : all_of<release_feeds>(as))
      m.st.on_release_failed(r.request, m.now);
  };
  m.now = t0 + 3200ms;
  fail_releases(m.st.on_watcher_stopped("f", sp.token, pos(1), m.now));
  bool revoked = false;
  for (auto t = t0 + 3300ms; t < ends_at && !revoked; t += 100ms) {
    auto a = m.at(t);
    revoked = has<revoke_lease>(a);
    fail_releases(a);
  }
  EXPECT_FALSE(revoked) << "not before lease_ttl";
  EXPECT_EQ(m.st.phase(), group_phase::leaving);
  EXPECT_LE(m.st.next_wakeup(), ends_at);
  auto a = m.at(ends_at);
  EXPECT_TRUE(has<revoke_lease>(a));
  EXPECT_EQ(m.st.phase(), group_phase::left);
}

TEST(GroupState, TooFewMembersListedDoNotSpinTheTimer) {
  // Settling with fewer than min_members listed: only the next poll (or a
  // renewal) can change anything, so the next wake-up lies ahead.
  auto c = defaults();
  c.min_members = 2;
  member m(c, {"f"});
  m.join({"m1"});
  m.at(t0 + 10s);
  EXPECT_EQ(m.st.phase(), group_phase::settling);
  EXPECT_GT(m.st.next_wakeup(), t0 + 10s);
}

TEST(GroupState, AHoldThatLastsATtlGivesTheLeaseUpAndJoinsAgain) {
  // Keepalives time out here (no answer) but could be reaching the store
  // late: after lease_ttl of holding, the member revokes its lease, stops
  // its watchers and joins again, so that others can take its feeds.
  member m(defaults(), {"f"});
  m.answer_renewals = false;
  auto sp = all_of<spawn_watcher>(m.win_all(m.activate())).at(0);
  auto deadline = m.st.fence_deadline();
  EXPECT_TRUE(has<hold_deliveries>(m.at(deadline)));
  EXPECT_TRUE(m.st.holding());
  EXPECT_LE(m.st.next_wakeup(), deadline + 5s);
  auto before = m.at(deadline + 4999ms);
  EXPECT_FALSE(has<revoke_lease>(before));
  auto a = m.at(deadline + 5s);
  EXPECT_TRUE(has<revoke_lease>(a));
  auto stops = all_of<stop_watcher>(a);
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_EQ(stops[0].token, sp.token);
  EXPECT_EQ(stops[0].reason, stop_reason::lease_lost);
  EXPECT_TRUE(has<join_lease>(a));
  EXPECT_EQ(m.st.phase(), group_phase::joining);
  EXPECT_EQ(m.st.counters().hold_timeouts, 1u);
  EXPECT_FALSE(m.st.holding());
}

TEST(GroupState, AClaimWonWhileLeavingIsReleasedAtOnce) {
  member m(defaults(), {"f"});
  auto a = m.activate();
  auto cl = all_of<claim_feeds>(a).at(0);
  m.st.leave(t0 + 3100ms);
  auto b = m.st.on_claimed(cl.request, {{"f", claim_outcome::won, 7, pos(2)}},
                           t0 + 3200ms);
  EXPECT_FALSE(has<spawn_watcher>(b));
  auto rel = all_of<release_feeds>(b);
  ASSERT_EQ(rel.size(), 1u);
  EXPECT_EQ(rel[0].items.at(0).token, 7u);
  EXPECT_EQ(rel[0].items.at(0).cursor, std::optional<group_position>{pos(2)});
  auto c = m.st.on_released(rel[0].request, {{"f", commit_outcome::ok}},
                            t0 + 3300ms);
  EXPECT_TRUE(has<revoke_lease>(c));
}

TEST(GroupState, AFailedReleaseIsRetriedAfterCheckpointInterval) {
  member m(defaults(), {"f"});
  std::string other = "m2";
  for (int i = 2; hrw_winner("f", {"m1", other}) != 1; ++i)
    other = "m" + std::to_string(i);
  auto sp = all_of<spawn_watcher>(m.win_all(m.activate())).at(0);
  m.now = t0 + 3500ms;
  m.see({"m1", other}, t0 + 3500ms);
  ASSERT_TRUE(has<stop_watcher>(m.at(t0 + 8500ms)));
  auto rel = all_of<release_feeds>(
    m.st.on_watcher_stopped("f", sp.token, pos(4), t0 + 8600ms));
  ASSERT_EQ(rel.size(), 1u);
  m.st.on_release_failed(rel[0].request, t0 + 8700ms);
  EXPECT_FALSE(has<release_feeds>(m.at(t0 + 9699ms)));
  auto again = all_of<release_feeds>(m.at(t0 + 9700ms));
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].items.at(0).cursor, std::optional<group_position>{pos(4)});
}

TEST(GroupState, ARetriedReleaseCountsOnce) {
  // counters().dropped counts ownerships given up: a rebalance release
  // that fails, is retried and succeeds is one release.
  member m(defaults(), {"f"});
  std::string other = "m2";
  for (int i = 2; hrw_winner("f", {"m1", other}) != 1; ++i)
    other = "m" + std::to_string(i);
  auto sp = all_of<spawn_watcher>(m.win_all(m.activate())).at(0);
  m.now = t0 + 3500ms;
  m.see({"m1", other}, t0 + 3500ms);
  ASSERT_TRUE(has<stop_watcher>(m.at(t0 + 8500ms)));
  auto rel = all_of<release_feeds>(
    m.st.on_watcher_stopped("f", sp.token, pos(4), t0 + 8600ms));
  ASSERT_EQ(rel.size(), 1u);
  const auto rebalance = static_cast<std::size_t>(stop_reason::rebalance);
  EXPECT_EQ(m.st.counters().dropped[rebalance], 1u);
  m.st.on_release_failed(rel[0].request, t0 + 8700ms);
  auto again = all_of<release_feeds>(m.at(t0 + 9700ms));
  ASSERT_EQ(again.size(), 1u);
  m.st.on_release_failed(again[0].request, t0 + 9800ms);
  again = all_of<release_feeds>(m.at(t0 + 10800ms));
  ASSERT_EQ(again.size(), 1u);
  m.st.on_released(again[0].request, {{"f", commit_outcome::ok}}, t0 + 10900ms);
  EXPECT_EQ(m.st.counters().dropped[rebalance], 1u) << "three sends, one "
                                                       "release";
  for (auto why :
       {stop_reason::leave, stop_reason::fenced, stop_reason::lease_lost})
    EXPECT_EQ(m.st.counters().dropped[static_cast<std::size_t>(why)], 0u);
}

TEST(GroupState, ALeaveReleaseRetriedUntilTheLeaveGivesUpCountsOnce) {
  member m(defaults(), {"f"});
  auto sp = all_of<spawn_watcher>(m.win_all(m.activate())).at(0);
  auto left_at = t0 + 3100ms;
  m.st.leave(left_at);
  std::size_t sends = 0;
  auto fail_releases = [&](const group_actions& as) {
    for (const auto& r : all_of<release_feeds>(as)) {
      ++sends;
      m.st.on_release_failed(r.request, m.now);
    }
  };
  m.now = t0 + 3200ms;
  fail_releases(m.st.on_watcher_stopped("f", sp.token, pos(1), m.now));
  for (auto t = t0 + 3300ms; t <= left_at + 5s + 100ms; t += 100ms)
    fail_releases(m.at(t));
  ASSERT_EQ(m.st.phase(), group_phase::left);
  EXPECT_GE(sends, 3u);
  const auto& d = m.st.counters().dropped;
  EXPECT_EQ(d[static_cast<std::size_t>(stop_reason::leave)], 1u);
  EXPECT_EQ(d[static_cast<std::size_t>(stop_reason::lease_lost)], 0u);
}

TEST(GroupState, ALeaseLostWhileAReleaseIsRetriedCountsTheReleaseOnly) {
  // The release was sent (counted as a rebalance); the lease lost while
  // it is retried ends the same ownership, which is not counted again.
  member m(defaults(), {"f"});
  std::string other = "m2";
  for (int i = 2; hrw_winner("f", {"m1", other}) != 1; ++i)
    other = "m" + std::to_string(i);
  auto sp = all_of<spawn_watcher>(m.win_all(m.activate())).at(0);
  m.now = t0 + 3500ms;
  m.see({"m1", other}, t0 + 3500ms);
  ASSERT_TRUE(has<stop_watcher>(m.at(t0 + 8500ms)));
  auto rel = all_of<release_feeds>(
    m.st.on_watcher_stopped("f", sp.token, pos(4), t0 + 8600ms));
  ASSERT_EQ(rel.size(), 1u);
  m.st.on_release_failed(rel[0].request, t0 + 8700ms);
  m.answer_renewals = false;
  bool lost = false;
  for (auto t = t0 + 8800ms; t < t0 + 12s && !lost; t += 100ms)
    for (const auto& r : all_of<renew_lease>(m.at(t))) {
      m.st.on_keepalive(r.request, keepalive_outcome::lost, 0, t);
      lost = true;
    }
  ASSERT_TRUE(lost);
  ASSERT_EQ(m.st.phase(), group_phase::joining);
  const auto& d = m.st.counters().dropped;
  EXPECT_EQ(d[static_cast<std::size_t>(stop_reason::rebalance)], 1u);
  EXPECT_EQ(d[static_cast<std::size_t>(stop_reason::lease_lost)], 0u);
}

TEST(GroupState, AHandoffHintClaimsADesiredFeedAtOnce) {
  member m(defaults(), {"f"});
  auto cl = all_of<claim_feeds>(m.activate()).at(0);
  m.st.on_claimed(cl.request, {{"f", claim_outcome::held, 0, {}}}, t0 + 3100ms);
  auto a = m.st.on_handoff_hint("f", t0 + 3200ms);
  EXPECT_EQ(all_of<claim_feeds>(a).size(), 1u);
  // A hint for a feed it does not win, or does not know, claims nothing.
  EXPECT_FALSE(has<claim_feeds>(m.st.on_handoff_hint("x", t0 + 3300ms)));
}

TEST(GroupState, AnOlderPollAnswerIsIgnored) {
  member m(defaults(), {"f"});
  m.join({"m1"});
  m.st.on_members(5000000, view({"m1", "m2"}), t0 + 1s);
  m.st.on_members(4000000, view({"m1"}), t0 + 1100ms); // older request
  m.at(t0 + 3999ms);
  EXPECT_EQ(m.st.phase(), group_phase::settling);
  m.at(t0 + 4s); // 3 s after the newest view; the older one changed nothing
  EXPECT_EQ(m.st.phase(), group_phase::active);
}

TEST(GroupState, LeaveBeforeTheGrantRevokesTheLateLease) {
  group_state st(defaults(), "m1", {"f"});
  auto j = all_of<join_lease>(st.start(t0)).at(0);
  EXPECT_TRUE(st.leave(t0 + 10ms).empty());
  EXPECT_EQ(st.phase(), group_phase::left);
  EXPECT_TRUE(has<revoke_lease>(st.on_joined(j.request, 5.0, t0 + 20ms)));
}

TEST(GroupState, AnUnansweredClaimIsAskedAgainEvenWhenNoLongerDesired) {
  member m(defaults(), {"f"});
  std::string other = "m2";
  for (int i = 2; hrw_winner("f", {"m1", other}) != 1; ++i)
    other = "m" + std::to_string(i);
  auto cl = all_of<claim_feeds>(m.activate()).at(0);
  // The answer is lost; meanwhile a member that wins f is listed.
  m.st.on_claim_failed(cl.request, t0 + 4s);
  m.now = t0 + 4100ms;
  auto a = m.see({"m1", other}, t0 + 4100ms);
  EXPECT_TRUE(m.st.desired().empty());
  // Not desired, it is still asked again (the key may be ours), once the
  // failure's backoff (min(reconcile, 2 poll) = 1 s) is over: the view
  // change does not cut it short.
  EXPECT_FALSE(has<claim_feeds>(a));
  auto again = all_of<claim_feeds>(m.at(t0 + 5s));
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].feeds, std::vector<std::string>{"f"});
  // The store answers "won" (the same lease holds it); not desired, it is
  // handed over once the winner was listed for rebalance_delay.
  auto b = m.st.on_claimed(again[0].request, {{"f", claim_outcome::won, 9, {}}},
                           m.now);
  auto sp = all_of<spawn_watcher>(b);
  ASSERT_EQ(sp.size(), 1u);
  auto st = all_of<stop_watcher>(m.at(t0 + 9100ms));
  ASSERT_EQ(st.size(), 1u);
  EXPECT_EQ(st[0].reason, stop_reason::rebalance);
}
