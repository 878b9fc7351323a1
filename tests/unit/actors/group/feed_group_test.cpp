// The feed group member (actors/group/feed_group.hpp) over the memory store:
// joining, settling and claiming; rendezvous hashing across two members; a
// lost lease; commits with the fencing token; a fenced commit; a graceful
// leave; the next owner resuming at the committed position across a rewind.
// Watchers are scripted fakes (the spawn hook) except in the last test,
// which runs real ledger watchers over the fake ledger of
// tests/support/feed_fakes.hpp. CAF's deterministic test coordinator: every
// time is exact virtual time.

#include "actors/group/feed_group.hpp"
#include "actors/group/memory_lease_store.hpp"
#include "metrics/group_metrics.hpp"

#include "config/config_error.hpp"
#include "core/hrw.hpp"
#include <prometheus/registry.h>

#include "tests/support/feed_fakes.hpp"
#include "tests/support/virtual_time_fixture.hpp"

#include <caf/actor_cast.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <gtest/gtest.h>

#include <algorithm>

using namespace outbound;
using namespace outbound::testing;
using namespace std::chrono_literals;

namespace {

/// One fake watcher: what it was spawned with and what it was sent.
struct fake_watcher {
  feed_config cfg;
  feed_watcher_options opts;
  feed_watcher_actor handle;
  std::vector<feed_time> fences;
  /// The position the fake reports as final when stopped (ledger cursor,
  /// or catchup last_seq with epoch).
  std::optional<int64_t> cursor, last_seq;
  std::optional<std::string> epoch;
  bool stopped = false;
  /// Stopped by a draining stop (leave_atom) rather than stop_atom.
  bool drained = false;
  /// Do not answer stop_atom or leave_atom (a hung watcher).
  bool hang = false;
};

struct fake_watchers {
  std::vector<std::shared_ptr<fake_watcher>> all;

  /// The running fakes of `feed` (spawned, not stopped).
  std::vector<std::shared_ptr<fake_watcher>> running(const std::string& feed) {
    std::vector<std::shared_ptr<fake_watcher>> out;
    for (auto& w : all)
      if (w->opts.feed_id == feed && !w->stopped)
        out.push_back(w);
    return out;
  }

  std::size_t running_count() const {
    std::size_t n = 0;
    for (auto& w : all)
      n += !w->stopped;
    return n;
  }

  void clear() {
    for (auto& w : all) {
      w->opts = feed_watcher_options{};
      w->handle = nullptr;
    }
    all.clear();
  }
};

feed_progress progress_of(const fake_watcher& w, bool final) {
  feed_progress p;
  p.feed_id = w.opts.feed_id;
  p.owner_token = w.opts.owner_token;
  p.mode = w.cursor ? feed_mode::ledger : feed_mode::catchup;
  p.cursor = w.cursor;
  p.last_seq = w.last_seq;
  // A ledger position is in the ledger's epoch, a catchup one in the
  // hub's in-frame epoch.
  (w.cursor ? p.ledger_epoch : p.epoch) = w.epoch;
  p.client_id = w.cfg.client_id;
  p.final = final;
  return p;
}

watcher_spawner fake_spawner(std::shared_ptr<fake_watchers> log) {
  return [log](caf::actor_system& sys, feed_config cfg,
               feed_watcher_options opts) -> feed_watcher_actor {
    auto w = std::make_shared<fake_watcher>();
    w->cfg = std::move(cfg);
    w->opts = std::move(opts);
    if (w->cfg.has_replay())
      w->cursor = w->cfg.cursor;
    else
      w->last_seq = w->cfg.resume_last_seq;
    w->epoch
      = w->cfg.has_replay() ? w->cfg.resume_ledger_epoch : w->cfg.resume_epoch;
    std::weak_ptr<fake_watcher> weak = w;
    auto h = sys.spawn([weak](feed_watcher_actor::pointer self)
                         -> feed_watcher_actor::behavior_type {
      auto stop = [self, weak](bool drain) -> caf::result<feed_stats> {
        auto w = weak.lock();
        if (!w)
          return feed_stats{};
        if (w->hang)
          return caf::delegated<feed_stats>{};
        w->stopped = true;
        w->drained = drain;
        self->send(w->opts.progress_to, progress_of(*w, true));
        self->quit();
        return feed_stats{};
      };
      return {
        [](stats_atom) { return feed_stats{}; },
        [stop](stop_atom) { return stop(false); },
        [stop](leave_atom) { return stop(true); },
        [weak](fence_atom, feed_time d) {
          if (auto w = weak.lock())
            w->fences.push_back(d);
        },
      };
    });
    w->handle = h;
    log->all.push_back(w);
    return h;
  };
}

group_config make_cfg(const std::string& member) {
  group_config c;
  c.name = "billing";
  c.member_name = member;
  c.timing.lease_ttl = 5;
  c.timing.renew_interval = 1.5;
  c.timing.fence_margin = 1;
  c.timing.poll_interval = 0.5;
  c.timing.checkpoint_interval = 1;
  c.timing.initial_settle = 1;
  c.timing.rebalance_delay = 2;
  c.timing.reconcile_interval = 5;
  c.coordinator.kind = coordinator_kind::memory;
  return c;
}

std::vector<group_feed> ledger_feeds(int n) {
  std::vector<group_feed> out;
  for (int i = 0; i < n; ++i) {
    group_feed f;
    f.id = "feed-" + std::to_string(i);
    f.cfg.replay_path = "/v1/events";
    out.push_back(std::move(f));
  }
  return out;
}

class FeedGroup : public virtual_time_fixture {
protected:
  FeedGroup() {
    sopts.data = data;
    sopts.faults = faults;
    store = spawn_memory_lease_store(sys(), sopts);
  }

  ~FeedGroup() override {
    for (auto& g : groups)
      caf::anon_send_exit(g, caf::exit_reason::user_shutdown);
    run();
    watchers->clear();
    run();
  }

  feed_group_options fake_opts() {
    feed_group_options o;
    o.store = store;
    o.spawn_watcher = fake_spawner(watchers);
    o.seed = 42;
    o.incarnation = "inc";
    return o;
  }

  feed_group_actor spawn(const std::string& member, int feeds = 3) {
    return spawn(member, ledger_feeds(feeds), fake_opts());
  }

  feed_group_actor spawn(const std::string& member, std::vector<group_feed> fs,
                         feed_group_options o) {
    return spawn(make_cfg(member), std::move(fs), std::move(o));
  }

  feed_group_actor spawn(group_config cfg, std::vector<group_feed> fs,
                         feed_group_options o) {
    auto g
      = spawn_feed_group(sys(), std::move(cfg), std::move(fs), std::move(o));
    groups.push_back(g);
    run();
    return g;
  }

  /// Asks `g` with `x` from a helper actor; runs `steps` of virtual time
  /// (one timer at a time) until the answer is in.
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

  group_status status(const feed_group_actor& g) {
    auto s = ask(g, stats_atom_v);
    EXPECT_TRUE(s);
    return s.value_or(group_status{});
  }

  /// The fake reports `cursor` (ledger) as acknowledged.
  void report(const std::shared_ptr<fake_watcher>& w, int64_t cursor,
              std::optional<std::string> epoch = std::nullopt) {
    w->cursor = cursor;
    if (epoch)
      w->epoch = epoch;
    caf::anon_send(w->opts.progress_to, progress_of(*w, false));
    run();
  }

  uint64_t lease_of(const std::string& member) {
    return data->members.at(member).lease;
  }

  std::shared_ptr<memory_store_data> data
    = std::make_shared<memory_store_data>();
  std::shared_ptr<memory_store_faults> faults
    = std::make_shared<memory_store_faults>();
  memory_store_options sopts;
  lease_store_actor store;
  std::shared_ptr<fake_watchers> watchers = std::make_shared<fake_watchers>();
  std::vector<feed_group_actor> groups;
};

} // namespace

// -- pure helpers
// -------------------------------------------------------------------

TEST(FeedGroupPosition, ALedgerReportIsItsCursorACatchupOneItsLastSeq) {
  feed_progress p;
  p.cursor = 42;
  p.last_seq = 7;
  auto a = position_of(p, std::nullopt);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->offset, 42);
  EXPECT_EQ(a->era, 0u);
  p.cursor.reset();
  p.epoch = "e1";
  auto b = position_of(p, std::nullopt);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->offset, 7);
  EXPECT_EQ(b->epoch, "e1");
  p.last_seq.reset();
  EXPECT_FALSE(position_of(p, std::nullopt)) << "no position yet";
}

TEST(FeedGroupPosition, ANewEpochBumpsTheEraAnUnknownOneAdoptsIt) {
  feed_progress p;
  p.cursor = 5;
  p.ledger_epoch = "e2";
  p.epoch = "in-frame"; // a ledger position is in the ledger's epoch
  auto r = position_of(p, group_position{3, 100, "e1"});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->era, 4u);
  EXPECT_EQ(r->epoch, "e2");
  EXPECT_GT(*r, (group_position{3, 100, "e1"})) << "a rewind still advances";
  auto same = position_of(p, group_position{3, 1, "e2"});
  EXPECT_EQ(same->era, 3u);
  auto adopt = position_of(p, group_position{3, 1, ""});
  EXPECT_EQ(adopt->era, 3u);
  EXPECT_EQ(adopt->epoch, "e2");
  p.ledger_epoch.reset();
  auto keep = position_of(p, group_position{3, 1, "e1"});
  EXPECT_EQ(keep->era, 3u);
  EXPECT_EQ(keep->epoch, "e1");
}

TEST(FeedGroupPosition, AnOffsetBelowTheLastOneIsANewEraWithoutEpochs) {
  // A hub without epochs: a rewound ledger (or a catchup reset that moved
  // last_seq back) shows only as a lower offset, which a watcher never
  // reports otherwise.
  feed_progress p;
  p.cursor = 2;
  auto r = position_of(p, group_position{0, 40, ""});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->era, 1u);
  EXPECT_GT(*r, (group_position{0, 40, ""}));
  p.cursor = 40;
  EXPECT_EQ(position_of(p, group_position{0, 40, ""})->era, 0u) << "equal";
  p.cursor.reset();
  p.last_seq = 3;
  EXPECT_EQ(position_of(p, group_position{2, 9, ""})->era, 3u);
}

TEST(FeedGroupPosition, TheClientIdIsStablePerGroupAndFeed) {
  auto a = group_client_id("billing", "orders");
  EXPECT_EQ(a.size(), 32u);
  EXPECT_EQ(a, group_client_id("billing", "orders"));
  EXPECT_NE(a, group_client_id("billing", "orders2"));
  EXPECT_NE(a, group_client_id("other", "orders"));
  EXPECT_EQ(group_feed_digest({"b", "a"}), group_feed_digest({"a", "b"}));
}

// -- validation
// ---------------------------------------------------------------------

TEST_F(FeedGroup, BadFeedsAndAMissingStoreAreConfigErrorsNamingTheField) {
  auto field_of = [&](std::vector<group_feed> fs, feed_group_options o,
                      group_config c) -> std::string {
    try {
      spawn_feed_group(sys(), c, std::move(fs), std::move(o));
    } catch (const config_error& e) {
      return e.field();
    }
    return "";
  };
  auto fs = ledger_feeds(2);
  fs[1].id = fs[0].id;
  EXPECT_EQ(field_of(fs, fake_opts(), make_cfg("m1")), "feeds[1].id");
  fs = ledger_feeds(2);
  fs[0].id.clear();
  EXPECT_EQ(field_of(fs, fake_opts(), make_cfg("m1")), "feeds[0].id");
  fs = ledger_feeds(1);
  fs[0].cfg.limit = 0;
  EXPECT_EQ(field_of(fs, fake_opts(), make_cfg("m1")), "feeds[0].cfg.limit");
  try {
    spawn_feed_group(sys(), make_cfg("m1"), fs, fake_opts());
  } catch (const config_error& e) {
    EXPECT_EQ(std::string{e.what()}.rfind("feeds[0].cfg.limit: ", 0), 0u)
      << e.what();
    EXPECT_EQ(std::string{e.what()}.find("limit: limit"), std::string::npos)
      << e.what();
  }
  auto o = fake_opts();
  o.store = nullptr;
  EXPECT_EQ(field_of(ledger_feeds(1), o, make_cfg("m1")), "store");
  o = fake_opts();
  o.spawn_watcher = nullptr; // real watchers: a replay path needs a client
  EXPECT_EQ(field_of(ledger_feeds(1), o, make_cfg("m1")), "feed_client");
  auto c = make_cfg("m1");
  c.timing.renew_interval = 4;
  EXPECT_EQ(field_of(ledger_feeds(1), fake_opts(), c), "group.renew_interval");
}

// -- one member
// ---------------------------------------------------------------------

TEST_F(FeedGroup, OneMemberJoinsSettlesAndClaimsEveryFeed) {
  auto g = spawn("m1", 3);
  auto s = status(g);
  EXPECT_EQ(s.phase, group_phase::settling);
  EXPECT_TRUE(s.leased);
  EXPECT_EQ(s.incarnation, "inc.0");
  EXPECT_EQ(data->members.at("m1").record.incarnation, "inc.0");
  EXPECT_EQ(data->members.at("m1").record.feed_digest,
            group_feed_digest({"feed-0", "feed-1", "feed-2"}));
  EXPECT_EQ(watchers->running_count(), 0u) << "nothing before the settle";
  advance_by(2s);
  s = status(g);
  EXPECT_EQ(s.phase, group_phase::active);
  EXPECT_EQ(s.members, 1u);
  EXPECT_EQ(s.feeds_total, 3u);
  EXPECT_EQ(s.desired, 3u);
  EXPECT_EQ(s.owned, 3u);
  EXPECT_EQ(s.running, 3u);
  EXPECT_EQ(s.counters.claims_won, 3u);
  EXPECT_EQ(s.moved_in, 3u);
  EXPECT_GT(s.fence_in, 0);
  for (int i = 0; i < 3; ++i) {
    auto f = "feed-" + std::to_string(i);
    auto r = watchers->running(f);
    ASSERT_EQ(r.size(), 1u) << f;
    EXPECT_EQ(r[0]->opts.owner_token, data->owners.at(f).create_revision);
    EXPECT_EQ(data->owners.at(f).member, "m1");
    EXPECT_FALSE(r[0]->opts.takeover) << "nothing committed yet";
    EXPECT_EQ(r[0]->cfg.cursor, 0);
    EXPECT_EQ(r[0]->cfg.client_id, group_client_id("billing", f));
    EXPECT_EQ(r[0]->opts.progress_interval, 0.5);
    ASSERT_FALSE(r[0]->fences.empty()) << "a fence at once";
    EXPECT_GT(r[0]->fences.front(), now());
  }
  // Renewals move every watcher's fence forward.
  auto w = watchers->running("feed-0")[0];
  auto before = w->fences.back();
  advance_by(3s);
  EXPECT_GT(w->fences.back(), before);
  EXPECT_GE(status(g).counters.renewals_ok, 2u);
}

TEST_F(FeedGroup, TwoMembersSplitTheFeedsByRendezvousHashing) {
  auto g1 = spawn("m1", 12);
  auto g2 = spawn("m2", 12);
  advance_by(10s);
  std::vector<std::string> view{"m1", "m2"};
  std::size_t n1 = 0;
  for (int i = 0; i < 12; ++i) {
    auto f = "feed-" + std::to_string(i);
    auto winner = view[hrw_winner(f, view)];
    ASSERT_EQ(data->owners.count(f), 1u) << f;
    EXPECT_EQ(data->owners.at(f).member, winner) << f;
    auto r = watchers->running(f);
    ASSERT_EQ(r.size(), 1u) << f << ": one watcher per feed";
    EXPECT_EQ(r[0]->opts.owner_token, data->owners.at(f).create_revision);
    n1 += winner == "m1";
  }
  EXPECT_GT(n1, 0u);
  EXPECT_LT(n1, 12u);
  EXPECT_EQ(status(g1).owned, n1);
  EXPECT_EQ(status(g2).owned, 12u - n1);
  EXPECT_EQ(status(g1).members, 2u);
}

TEST_F(FeedGroup, ALostLeaseStopsTheWatchersAndTheMemberJoinsAgain) {
  auto g = spawn("m1", 2);
  advance_by(2s);
  ASSERT_EQ(watchers->running_count(), 2u);
  auto old = watchers->all;
  auto old_token = data->owners.at("feed-0").create_revision;
  // The store expires the lease (as if the member had been cut off).
  data->leases.at(lease_of("m1")).expires = now();
  advance_by(1600ms); // the next renewal answers TTL 0
  for (auto& w : old)
    EXPECT_TRUE(w->stopped);
  auto s = status(g);
  EXPECT_EQ(s.counters.renewals_lost, 1u);
  EXPECT_EQ(s.counters.rejoins, 1u);
  EXPECT_EQ(s.incarnation, "inc.1");
  advance_by(3s); // settle again, claim again
  s = status(g);
  EXPECT_EQ(s.phase, group_phase::active);
  EXPECT_EQ(s.running, 2u);
  auto fresh = watchers->running("feed-0");
  ASSERT_EQ(fresh.size(), 1u);
  EXPECT_GT(fresh[0]->opts.owner_token, old_token);
}

TEST_F(FeedGroup, ACommitCarriesTheTokenAndThePosition) {
  auto g = spawn("m1", 2);
  advance_by(2s);
  auto w = watchers->running("feed-0")[0];
  report(w, 42);
  EXPECT_EQ(data->cursors.count("feed-0"), 0u) << "not before the checkpoint";
  auto s = status(g);
  EXPECT_EQ(s.checkpoint_lag, 0u) << "nothing committed to compare with";
  advance_by(1s);
  ASSERT_EQ(data->cursors.count("feed-0"), 1u);
  EXPECT_EQ(data->cursors.at("feed-0").offset, 42);
  EXPECT_EQ(data->cursors.at("feed-0").era, 0u);
  EXPECT_EQ(status(g).counters.commits_ok, 1u);
  report(w, 50);
  s = status(g);
  EXPECT_EQ(s.checkpoint_lag, 8u);
  EXPECT_EQ(s.checkpoint_age, 0);
  advance_by(1s);
  EXPECT_EQ(data->cursors.at("feed-0").offset, 50);
  EXPECT_EQ(status(g).checkpoint_lag, 0u);
  // A report of an old token is not committed.
  auto stale = progress_of(*w, false);
  stale.owner_token -= 1;
  stale.cursor = 99;
  caf::anon_send(w->opts.progress_to, stale);
  advance_by(1s);
  EXPECT_EQ(data->cursors.at("feed-0").offset, 50);
}

TEST_F(FeedGroup, AFencedCommitStopsTheWatcher) {
  auto g = spawn("m1", 1);
  advance_by(2s);
  auto w = watchers->running("feed-0")[0];
  // Another owner took the key over (its token is newer).
  data->owners.at("feed-0").create_revision += 100;
  report(w, 7);
  advance_by(1s);
  EXPECT_TRUE(w->stopped);
  EXPECT_FALSE(w->drained) << "fenced: stopped at once, not drained";
  auto s = status(g);
  EXPECT_EQ(s.counters.commits_fenced, 1u);
  EXPECT_EQ(s.counters.dropped[static_cast<std::size_t>(stop_reason::fenced)],
            1u);
  EXPECT_EQ(data->cursors.count("feed-0"), 0u);
}

TEST_F(FeedGroup, ALeaveReleasesEveryFeedWithItsFinalPositionAndRevokes) {
  auto g = spawn("m1", 3);
  advance_by(2s);
  auto w0 = watchers->running("feed-0")[0];
  auto w1 = watchers->running("feed-1")[0];
  report(w0, 10);
  w0->cursor = 12; // acknowledged after the last report: the final one
  w1->cursor = 3;
  auto s = ask(g, leave_atom_v, 5s);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->phase, group_phase::left);
  EXPECT_EQ(s->moved_out, 3u);
  EXPECT_EQ(s->counters.dropped[static_cast<std::size_t>(stop_reason::leave)],
            3u);
  for (auto& w : watchers->all)
    EXPECT_TRUE(w->stopped);
  EXPECT_EQ(data->cursors.at("feed-0").offset, 12);
  EXPECT_EQ(data->cursors.at("feed-1").offset, 3);
  EXPECT_EQ(data->cursors.at("feed-2").offset, 0);
  EXPECT_TRUE(data->owners.empty());
  EXPECT_TRUE(data->members.empty()) << "revoked";
  EXPECT_TRUE(data->leases.empty());
  EXPECT_EQ(data->requests[static_cast<std::size_t>(store_op::revoke)], 1u);
  // The member is gone.
  EXPECT_FALSE(ask(g, stats_atom_v));
}

TEST_F(FeedGroup, AGracefulLeaveHandsEachFeedToTheOtherMemberAtTheStartRate) {
  // 4 starts a second: m1 withdraws, then hands its feeds to m2 four at
  // once and one every 250 ms, delivering the rest until their turn; m2
  // takes each within about a poll and a claim retry. Nothing is unowned
  // for long, and the leave ends after the last release.
  auto cfg = [](const std::string& m) {
    auto c = make_cfg(m);
    c.timing.max_starts_per_second = 4;
    return c;
  };
  auto g1 = spawn(cfg("m1"), ledger_feeds(40), fake_opts());
  spawn(cfg("m2"), ledger_feeds(40), fake_opts());
  advance_by(20s);
  auto owned_by = [&](const std::string& m) {
    std::size_t n = 0;
    for (const auto& kv : data->owners)
      n += kv.second.member == m;
    return n;
  };
  auto held = owned_by("m1");
  ASSERT_GE(held, 12u);
  ASSERT_EQ(held + owned_by("m2"), 40u);
  auto left = std::make_shared<std::optional<group_status>>();
  auto target = caf::actor_cast<caf::actor>(g1);
  sys().spawn([=](caf::event_based_actor* self) {
    self->request(target, caf::infinite, leave_atom_v)
      .then([left](group_status& s) { *left = s; }, [](caf::error&) {});
  });
  run();
  EXPECT_EQ(data->members.count("m1"), 0u) << "withdrawn at once";
  EXPECT_GE(owned_by("m1"), held - 4) << "at most one second's burst at once";
  std::map<std::string, feed_time> unowned_since;
  feed_time::duration longest{};
  auto start = now();
  auto last = owned_by("m1");
  while (!*left && now() < start + 30s) {
    advance_by(250ms);
    auto n = owned_by("m1");
    EXPECT_LE(last - std::min(last, n), 2u) << "faster than the start rate";
    last = n;
    for (int i = 0; i < 40; ++i) {
      auto f = "feed-" + std::to_string(i);
      if (data->owners.count(f) == 0)
        unowned_since.emplace(f, now());
      else if (auto u = unowned_since.find(f); u != unowned_since.end()) {
        longest = std::max(longest, now() - u->second);
        unowned_since.erase(u);
      }
    }
  }
  ASSERT_TRUE(*left);
  EXPECT_EQ((*left)->phase, group_phase::left);
  EXPECT_EQ((*left)->moved_out, held);
  EXPECT_GE(now() - start, from_seconds(static_cast<double>(held - 4) / 4 - 1))
    << "the leave took the pace's time";
  advance_by(3s);
  EXPECT_EQ(owned_by("m2"), 40u);
  EXPECT_LE(longest, 2s) << "a released feed waits about a poll and a claim";
}

TEST_F(FeedGroup, TheNextOwnerResumesAtTheCommittedPositionAcrossARewind) {
  auto a = spawn("m1", 1);
  advance_by(2s);
  auto w = watchers->running("feed-0")[0];
  report(w, 100, "e1");
  advance_by(1s);
  EXPECT_EQ(data->cursors.at("feed-0").offset, 100);
  // The ledger was replaced: positions restart in a new epoch.
  report(w, 5, "e2");
  advance_by(1s);
  auto c = data->cursors.at("feed-0");
  EXPECT_EQ(c.era, 1u);
  EXPECT_EQ(c.offset, 5);
  EXPECT_EQ(c.epoch, "e2");
  ASSERT_TRUE(ask(a, leave_atom_v, 5s));
  auto b = spawn("m2", 1);
  advance_by(2s);
  auto next = watchers->running("feed-0");
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0]->opts.owner_token,
            data->owners.at("feed-0").create_revision);
  EXPECT_EQ(next[0]->cfg.cursor, 5) << "resumes after the committed cursor";
  EXPECT_EQ(next[0]->cfg.resume_ledger_epoch, "e2") << "in its epoch";
  EXPECT_TRUE(next[0]->opts.takeover);
  // A report in the same epoch stays in era 1 and commits.
  report(next[0], 9, "e2");
  advance_by(1s);
  EXPECT_EQ(data->cursors.at("feed-0").era, 1u);
  EXPECT_EQ(data->cursors.at("feed-0").offset, 9);
  EXPECT_EQ(status(b).counters.commits_ok, 1u);
}

TEST_F(FeedGroup, ACatchupFeedResumesWithItsLastSeqEpochAndStableClientId) {
  std::vector<group_feed> fs(1);
  fs[0].id = "orders";
  fs[0].cfg.ws_path = "/ws/feed";
  auto a = spawn("m1", fs, fake_opts());
  advance_by(2s);
  auto w = watchers->running("orders").at(0);
  EXPECT_EQ(w->cfg.client_id, group_client_id("billing", "orders"));
  EXPECT_EQ(w->cfg.resume_last_seq, std::nullopt);
  w->last_seq = 41;
  w->epoch = "e1";
  caf::anon_send(w->opts.progress_to, progress_of(*w, false));
  advance_by(1s);
  ASSERT_TRUE(ask(a, leave_atom_v, 5s));
  spawn("m2", fs, fake_opts());
  advance_by(2s);
  auto next = watchers->running("orders").at(0);
  EXPECT_EQ(next->cfg.client_id, group_client_id("billing", "orders"));
  EXPECT_EQ(next->cfg.resume_last_seq, 41);
  EXPECT_EQ(next->cfg.resume_epoch, "e1");
  EXPECT_TRUE(next->opts.takeover);
}

TEST_F(FeedGroup, AStopStopsTheWatchersAndReleasesNothing) {
  auto g = spawn("m1", 2);
  advance_by(2s);
  auto s = ask(g, stop_atom_v);
  ASSERT_TRUE(s);
  for (auto& w : watchers->all)
    EXPECT_TRUE(w->stopped);
  EXPECT_EQ(data->owners.size(), 2u) << "left to the lease's expiry";
  advance_by(6s);
  EXPECT_TRUE(data->owners.empty());
}

TEST_F(FeedGroup, AWatcherThatDiesIsRespawnedAtItsLastPosition) {
  auto g = spawn("m1", 1);
  advance_by(2s);
  auto w = watchers->running("feed-0")[0];
  report(w, 17);
  w->stopped = true;
  caf::anon_send_exit(w->handle, caf::exit_reason::kill);
  advance_by(100ms);
  auto next = watchers->running("feed-0");
  ASSERT_EQ(next.size(), 1u);
  EXPECT_NE(next[0], w);
  EXPECT_EQ(next[0]->cfg.cursor, 17);
  EXPECT_EQ(next[0]->opts.owner_token, w->opts.owner_token);
  EXPECT_EQ(status(g).running, 1u);
}

TEST_F(FeedGroup, AStoreOutageHoldsTheWatchersAndARenewalLiftsTheHold) {
  auto g = spawn("m1", 1);
  advance_by(2s);
  auto w = watchers->running("feed-0")[0];
  faults->unreachable = true;
  advance_by(4s); // past the fence deadline
  auto s = status(g);
  EXPECT_TRUE(s.holding);
  EXPECT_LE(w->fences.back(), now()) << "a deadline in the past holds";
  EXPECT_FALSE(w->stopped);
  // The lease is still alive in the store: a renewal proves it.
  data->leases.at(lease_of("m1")).expires = now() + 10s;
  faults->unreachable = false;
  advance_by(2s);
  s = status(g);
  EXPECT_FALSE(s.holding);
  EXPECT_GT(w->fences.back(), now());
  EXPECT_FALSE(w->stopped);
}

// -- real watchers
// ------------------------------------------------------------------

TEST_F(FeedGroup, RealLedgerWatchersDeliverCommitAndHandOver) {
  auto ledger = std::make_shared<fake_ledger>();
  ledger->append_to(5);
  client_config ccfg;
  ccfg.base_url = "http://127.0.0.1:8080";
  client_options co;
  co.transport = spawn_ledger_transport(sys(), ledger);
  co.seed = 1;
  auto client = make_service_client(sys(), ccfg, co);
  auto subs = std::make_shared<sub_log>();
  auto sub = spawn_recording_subscriber(sys(), subs);
  std::vector<group_feed> fs(1);
  fs[0].id = "ledger";
  fs[0].cfg.replay_path = "/v1/events";
  fs[0].cfg.poll_interval = 1;
  feed_group_options o;
  o.store = store;
  o.feed_client = client;
  o.subscriber = sub;
  o.seed = 3;
  auto a = spawn("m1", fs, o);
  advance_by(3s);
  ASSERT_EQ(subs->ids(), (std::vector<int64_t>{1, 2, 3, 4, 5}));
  auto token = data->owners.at("ledger").create_revision;
  for (auto& e : subs->got) {
    EXPECT_EQ(e.ev.feed_id, "ledger");
    EXPECT_EQ(e.ev.owner_token, token);
  }
  advance_by(1s);
  ASSERT_EQ(data->cursors.count("ledger"), 1u);
  EXPECT_EQ(data->cursors.at("ledger").offset, 5);
  ledger->append_to(8);
  advance_by(1500ms); // the watcher's poll finds 6..8
  ASSERT_TRUE(ask(a, leave_atom_v, 5s));
  EXPECT_EQ(data->cursors.at("ledger").offset, 8) << "the final position";
  // The next owner starts after it: no duplicates.
  subs->got.clear();
  ledger->append_to(10);
  o.seed = 4;
  spawn("m2", fs, o);
  advance_by(3s);
  EXPECT_EQ(subs->ids(), (std::vector<int64_t>{9, 10}));
  EXPECT_GT(subs->got.at(0).ev.owner_token, token);
}

namespace {

/// A fake ledger behind a real service client, for real watchers.
service_client_actor ledger_client(caf::actor_system& sys,
                                   std::shared_ptr<fake_ledger> ledger) {
  client_config ccfg;
  ccfg.base_url = "http://127.0.0.1:8080";
  client_options co;
  co.transport = spawn_ledger_transport(sys, std::move(ledger));
  co.seed = 1;
  return make_service_client(sys, ccfg, co);
}

std::vector<group_feed> one_ledger_feed() {
  std::vector<group_feed> fs(1);
  fs[0].id = "ledger";
  fs[0].cfg.replay_path = "/v1/events";
  fs[0].cfg.poll_interval = 1;
  return fs;
}

} // namespace

TEST_F(FeedGroup,
       AGracefulLeaveWaitsForTheDeliveryInFlightSoTheNextOwnerRepeatsNothing) {
  auto ledger = std::make_shared<fake_ledger>();
  ledger->append_to(5);
  auto subs = std::make_shared<sub_log>();
  subs->manual = true; // acknowledgements released by the test
  auto sub = spawn_recording_subscriber(sys(), subs);
  auto release_ack = [&] {
    caf::anon_send(caf::actor_cast<caf::actor>(sub), caf::ok_atom_v);
    run();
  };
  feed_group_options o;
  o.store = store;
  o.feed_client = ledger_client(sys(), ledger);
  o.subscriber = sub;
  o.seed = 3;
  auto a = spawn("m1", one_ledger_feed(), o);
  advance_by(3s);
  ASSERT_EQ(subs->ids(), (std::vector<int64_t>{1}));
  release_ack();
  release_ack();
  release_ack(); // 1..3 acknowledged, 4 in flight
  advance_by(1s);
  ASSERT_EQ(subs->ids(), (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(data->cursors.at("ledger").offset, 3) << "checkpointed";
  // The leave: the watcher drains, so the feed is not released yet.
  auto left = std::make_shared<std::optional<group_status>>();
  sys().spawn([=](caf::event_based_actor* self) {
    self->request(caf::actor_cast<caf::actor>(a), caf::infinite, leave_atom_v)
      .then([left](group_status& s) { *left = s; }, [](caf::error&) {});
  });
  run();
  advance_by(1s); // within the stop timeout (2 x renew_interval = 3 s)
  EXPECT_FALSE(*left);
  EXPECT_EQ(data->owners.count("ledger"), 1u) << "still held while draining";
  EXPECT_EQ(subs->ids(), (std::vector<int64_t>{1, 2, 3, 4})) << "nothing new";
  release_ack(); // 4 acknowledged: final report, release, revoke
  for (int i = 0; i < 50 && !*left; ++i)
    advance_by(100ms);
  ASSERT_TRUE(*left);
  EXPECT_EQ((*left)->phase, group_phase::left);
  EXPECT_EQ(data->cursors.at("ledger").offset, 4)
    << "after the delivery in flight";
  EXPECT_TRUE(data->owners.empty());
  // The next owner starts after it: 4 is not delivered twice.
  subs->got.clear();
  subs->manual = false;
  o.seed = 4;
  spawn("m2", one_ledger_feed(), o);
  advance_by(3s);
  EXPECT_EQ(subs->ids(), (std::vector<int64_t>{5}));
}

TEST_F(FeedGroup, FailingCommitsDoNotMatterWhenTheLeavesReleaseGoesThrough) {
  // The release writes the final position and deletes the owner key in one
  // step: commits that failed before it cost nothing.
  auto g = spawn("m1", 1);
  advance_by(2s);
  auto w = watchers->running("feed-0")[0];
  report(w, 4);
  advance_by(1s);
  ASSERT_EQ(data->cursors.at("feed-0").offset, 4);
  (*faults)[store_op::commit] = store_fault::fail;
  report(w, 9);
  advance_by(3s);
  EXPECT_EQ(data->cursors.at("feed-0").offset, 4) << "the commits fail";
  EXPECT_GE(status(g).counters.commit_errors, 2u);
  w->cursor = 11; // acknowledged since the last report
  auto s = ask(g, leave_atom_v, 5s);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->phase, group_phase::left);
  EXPECT_EQ(data->cursors.at("feed-0").offset, 11) << "the final position";
  EXPECT_TRUE(data->owners.empty());
}

TEST_F(
  FeedGroup,
  AFailingFinalReleaseKeepsTheClaimUntilTheLeaveDeadlineThenRepeatsOnlySinceTheLastCommit) {
  // Commits and releases fail: the member does not pretend. It keeps the
  // owner key (nobody else can deliver), retries the release every
  // checkpoint_interval, and at lease_ttl after the leave revokes its
  // lease. The next owner resumes at the last successful commit: the
  // duplicates are what was acknowledged since, no more.
  auto ledger = std::make_shared<fake_ledger>();
  ledger->append_to(5);
  auto subs = std::make_shared<sub_log>();
  feed_group_options o;
  o.store = store;
  o.feed_client = ledger_client(sys(), ledger);
  o.subscriber = spawn_recording_subscriber(sys(), subs);
  o.seed = 3;
  auto a = spawn("m1", one_ledger_feed(), o);
  advance_by(4s);
  ASSERT_EQ(subs->ids(), (std::vector<int64_t>{1, 2, 3, 4, 5}));
  ASSERT_EQ(data->cursors.at("ledger").offset, 5);
  (*faults)[store_op::commit] = store_fault::fail;
  (*faults)[store_op::release] = store_fault::fail;
  ledger->append_to(8);
  advance_by(2s); // 6..8 delivered and acknowledged; their commits fail
  ASSERT_EQ(subs->ids(), (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(data->cursors.at("ledger").offset, 5);
  auto left = std::make_shared<std::optional<group_status>>();
  sys().spawn([=](caf::event_based_actor* self) {
    self->request(caf::actor_cast<caf::actor>(a), caf::infinite, leave_atom_v)
      .then([left](group_status& s) { *left = s; }, [](caf::error&) {});
  });
  run();
  auto leave_at = now();
  advance_by(4s);
  EXPECT_FALSE(*left) << "still retrying the release";
  EXPECT_EQ(data->owners.count("ledger"), 1u) << "the claim is kept";
  for (int i = 0; i < 30 && !*left; ++i)
    advance_by(100ms);
  ASSERT_TRUE(*left);
  EXPECT_LE(now() - leave_at, 5100ms) << "a leave ends within lease_ttl";
  EXPECT_GE(data->requests[static_cast<std::size_t>(store_op::release)], 4u);
  EXPECT_TRUE(data->owners.empty()) << "the revoked lease took the key";
  EXPECT_EQ(data->cursors.at("ledger").offset, 5) << "never pretended";
  (*faults)[store_op::commit] = store_fault::none;
  (*faults)[store_op::release] = store_fault::none;
  subs->got.clear();
  o.seed = 4;
  spawn("m2", one_ledger_feed(), o);
  advance_by(3s);
  EXPECT_EQ(subs->ids(), (std::vector<int64_t>{6, 7, 8}))
    << "exactly what was acknowledged since the last successful commit";
}

TEST_F(FeedGroup, AWatcherThatDoesNotAnswerItsStopIsKilledAndTheLeaveEnds) {
  auto g = spawn("m1", 1);
  advance_by(2s);
  auto w = watchers->running("feed-0")[0];
  report(w, 6);
  w->hang = true;
  w->cursor = 9; // never reported: the member does not know it
  auto s = ask(g, leave_atom_v, 10s);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->phase, group_phase::left);
  EXPECT_EQ(data->cursors.at("feed-0").offset, 6) << "the last one known";
  EXPECT_TRUE(data->owners.empty());
}

TEST_F(FeedGroup, ARestartWithinTheTtlWaitsForTheOldLeaseThenTakesItsFeeds) {
  auto a = spawn("m1", 2);
  advance_by(2s);
  report(watchers->running("feed-0")[0], 30);
  advance_by(1s);
  ASSERT_TRUE(ask(a, stop_atom_v)); // a crash: nothing released
  auto stopped_at = now();
  auto o = fake_opts();
  o.incarnation = "inc2";
  auto b = spawn("m1", ledger_feeds(2), o);
  advance_by(3s);
  EXPECT_EQ(status(b).phase, group_phase::joining) << "the name is held";
  EXPECT_TRUE(watchers->running("feed-0").empty());
  advance_by(5s); // the old lease expired 5 s after its last renewal
  auto s = status(b);
  EXPECT_EQ(s.phase, group_phase::active);
  EXPECT_EQ(s.incarnation, "inc2.0");
  auto next = watchers->running("feed-0");
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0]->cfg.cursor, 30);
  EXPECT_LT(now() - stopped_at, 9s);
}

TEST_F(FeedGroup, AMemberThatJoinsLaterGetsItsFeedsAfterTheRebalanceDelay) {
  auto g1 = spawn("m1", 8);
  advance_by(2s);
  ASSERT_EQ(status(g1).owned, 8u);
  for (auto& w : watchers->all)
    report(w, 20);
  advance_by(1s); // committed at 20
  for (auto& w : watchers->all)
    w->cursor = 25; // acknowledged since: the final positions
  auto g2 = spawn("m2", 8);
  std::vector<std::string> view{"m1", "m2"};
  std::vector<std::string> moving;
  for (int i = 0; i < 8; ++i) {
    auto f = "feed-" + std::to_string(i);
    if (view[hrw_winner(f, view)] == "m2")
      moving.push_back(f);
  }
  ASSERT_FALSE(moving.empty());
  advance_by(1s);
  EXPECT_EQ(status(g1).owned, 8u) << "m2 is listed for less than the delay";
  advance_by(5s);
  EXPECT_EQ(status(g1).owned, 8u - moving.size());
  EXPECT_EQ(status(g1).moved_out, moving.size());
  EXPECT_EQ(status(g2).owned, moving.size());
  for (const auto& f : moving) {
    EXPECT_EQ(data->owners.at(f).member, "m2") << f;
    auto r = watchers->running(f);
    ASSERT_EQ(r.size(), 1u) << f;
    EXPECT_EQ(r[0]->cfg.cursor, 25) << f << ": at m1's final position";
    EXPECT_EQ(data->cursors.at(f).offset, 25) << f;
  }
  for (auto& w : watchers->all)
    if (w->stopped)
      EXPECT_TRUE(w->drained) << w->opts.feed_id << ": a rebalance drains";
}

TEST_F(FeedGroup, AJoinWhoseAnswerWasLostWaitsOutItsOwnLease) {
  (*faults)[store_op::join] = store_fault::lose;
  auto g = spawn("m1", 1);
  (*faults)[store_op::join] = store_fault::none;
  EXPECT_EQ(data->members.size(), 1u) << "applied";
  advance_by(3s);
  EXPECT_EQ(status(g).phase, group_phase::joining);
  advance_by(5s);
  auto s = status(g);
  EXPECT_EQ(s.phase, group_phase::active);
  EXPECT_EQ(s.running, 1u);
}

TEST_F(FeedGroup, AClaimWhoseAnswerWasLostIsAskedAgainAndWon) {
  (*faults)[store_op::claim] = store_fault::lose;
  auto g = spawn("m1", 2);
  advance_by(1500ms); // settled, claimed: applied, answer lost
  EXPECT_EQ(data->owners.size(), 2u);
  EXPECT_EQ(watchers->running_count(), 0u);
  auto token = data->owners.at("feed-0").create_revision;
  (*faults)[store_op::claim] = store_fault::none;
  advance_by(6s); // the reconcile interval
  auto s = status(g);
  EXPECT_EQ(s.owned, 2u);
  EXPECT_EQ(s.counters.claim_errors, 2u);
  ASSERT_EQ(watchers->running("feed-0").size(), 1u);
  EXPECT_EQ(watchers->running("feed-0")[0]->opts.owner_token, token)
    << "the key the lost claim created";
}

TEST_F(FeedGroup, RealWatchersAfterALostLeaseResumeAtTheCommittedCursor) {
  auto ledger = std::make_shared<fake_ledger>();
  ledger->append_to(5);
  client_config ccfg;
  ccfg.base_url = "http://127.0.0.1:8080";
  client_options co;
  co.transport = spawn_ledger_transport(sys(), ledger);
  co.seed = 1;
  auto subs = std::make_shared<sub_log>();
  std::vector<group_feed> fs(1);
  fs[0].id = "ledger";
  fs[0].cfg.replay_path = "/v1/events";
  fs[0].cfg.poll_interval = 1;
  feed_group_options o;
  o.store = store;
  o.feed_client = make_service_client(sys(), ccfg, co);
  o.subscriber = spawn_recording_subscriber(sys(), subs);
  o.seed = 3;
  auto g = spawn("m1", fs, o);
  advance_by(3s);
  ASSERT_EQ(subs->ids(), (std::vector<int64_t>{1, 2, 3, 4, 5}));
  auto token = data->owners.at("ledger").create_revision;
  auto committed = data->cursors.at("ledger").offset;
  EXPECT_EQ(committed, 5);
  // The lease ends in the store; the member learns it at its next renewal.
  data->leases.at(lease_of("m1")).expires = now();
  ledger->append_to(7);
  advance_by(1600ms);
  EXPECT_EQ(status(g).counters.renewals_lost, 1u);
  advance_by(4s); // rejoin, settle, claim, resume
  auto s = status(g);
  EXPECT_EQ(s.phase, group_phase::active);
  EXPECT_EQ(s.running, 1u);
  auto ids = subs->ids();
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.back(), 7);
  // Every id at most twice (delivered, then again after the committed
  // cursor), and nothing lost.
  for (int64_t id = 1; id <= 7; ++id) {
    auto n = std::count(ids.begin(), ids.end(), id);
    EXPECT_GE(n, 1) << id;
    EXPECT_LE(n, id > committed ? 2 : 1) << id;
  }
  EXPECT_GT(subs->got.back().ev.owner_token, token);
}

TEST_F(FeedGroup, TheStatusReachesTheMetricsAndTheLastOneOnLeave) {
  prometheus::Registry reg;
  auto metrics = std::make_shared<group_metrics>(reg);
  auto gauge = [&](const std::string& name, const std::string& state) {
    for (auto& fam : reg.Collect())
      if (fam.name == name)
        for (auto& m : fam.metric)
          for (auto& l : m.label)
            if (state.empty() || (l.name == "state" && l.value == state))
              return fam.type == prometheus::MetricType::Counter
                       ? m.counter.value
                       : m.gauge.value;
    return -1.0;
  };
  auto o = fake_opts();
  o.metrics = metrics;
  auto g = spawn("m1", ledger_feeds(3), o);
  advance_by(3s);
  EXPECT_EQ(gauge("outbound_group_feeds", "owned"), 3.0);
  EXPECT_EQ(gauge("outbound_group_members", ""), 1.0);
  ASSERT_TRUE(ask(g, leave_atom_v, 5s));
  EXPECT_EQ(gauge("outbound_group_feeds", "owned"), 0.0)
    << "the final status, after every release";
}

TEST_F(FeedGroup, AStoredEpochTheWatcherWouldRefuseIsLeftOutNotASpawnLoop) {
  // A hub's epoch is stored as reported; one with a control character
  // would fail feed_config::validate at every spawn and leave the feed
  // owned and never served.
  data->cursors["feed-0"] = group_position{0, 7, "e\t1"};
  spawn("m1", 1);
  advance_by(2s);
  auto w = watchers->running("feed-0");
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0]->cfg.cursor, 7);
  EXPECT_EQ(w[0]->cfg.resume_ledger_epoch, std::nullopt);
}

TEST_F(FeedGroup, MembersWithAnotherFeedSetAreLeftOutOfTheAssignment) {
  // m1 serves feed-0..1, m2 feed-0..2: hashing over both could give
  // feed-2 to m1, which does not know it. Each hashes over the members of
  // its own feed set, so every feed is owned, each by one member.
  spawn("m1", 2);
  spawn("m2", 3);
  advance_by(8s);
  ASSERT_EQ(data->owners.size(), 3u);
  EXPECT_EQ(watchers->running_count(), 3u) << "one watcher per feed";
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(watchers->running("feed-" + std::to_string(i)).size(), 1u);
  EXPECT_EQ(watchers->running("feed-2").at(0)->opts.owner_token,
            data->owners.at("feed-2").create_revision);
}
