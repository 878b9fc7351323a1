// No silent stalls in a feed watcher: a replay page the watcher cannot read
// (a body that does not parse or nests too deep, a body over the response
// cap, events that can be neither delivered nor passed) is narrowed to the
// one event that causes it, which is surfaced in order as an
// `undeliverable` reset -- the poison-pill / dead-letter practice of Kafka
// consumers -- and the feed moves on. Wakes are coalesced: a flood of wakes
// announcing a cursor that replay never reaches costs the re-drain backoff
// of hyperdjango's ChangeFeedWatcher, not one replay call per wake.
// Pure-state tests with a scripted ledger, then actor tests on CAF's
// deterministic coordinator.

#include "actors/client/service_client.hpp"
#include "actors/feed/feed_frames.hpp"
#include "actors/feed/feed_watcher.hpp"
#include "actors/feed/ledger_drain.hpp"

#include "tests/support/feed_fakes.hpp"
#include "tests/support/virtual_time_fixture.hpp"

#include <boost/json/parse.hpp>
#include <caf/actor_cast.hpp>
#include <caf/event_based_actor.hpp>

#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

using namespace outbound;
using namespace outbound::testing;
using namespace std::chrono_literals;
using std::chrono::nanoseconds;

namespace {

using ids = std::vector<int64_t>;

// -- pure state: a scripted ledger with poison events
// ------------------------------

struct script_result {
  /// "e<id>" per delivered event, "u<id>" per undeliverable reset.
  std::vector<std::string> log;
  int requests = 0;
  /// The `after` of every request, in order.
  std::vector<int64_t> afters;
  drain_next last;
  std::vector<page_plan> resets;
};

/// How the scripted ledger fails.
struct ledger_faults {
  drain_error_reason why = drain_error_reason::unparseable;
  /// Every page is unreadable.
  bool broken = false;
  /// An unreadable page still shows its first event's id (the watcher's
  /// id-only scan finds it).
  bool show_ids = false;
  /// after -> how many more answers for it are unreadable although the
  /// page is good (a truncated or corrupted response).
  std::map<int64_t, int> transient;
  /// When not empty, the reason of the n-th request's unreadable answer is
  /// whys[n % size] (a balancer alternating between two broken backends).
  std::vector<drain_error_reason> whys;
  /// Requests (1-based) whose answer is dropped and replaced by a transport
  /// failure, after the drain has seen it.
  std::set<int> fail_at;
};

/// Runs one drain of `d` against a ledger of `ledger_ids` in which the
/// `poison` ids cannot be read (any page holding one is unreadable).
script_result run_drain(ledger_drain& d, const ids& ledger_ids,
                        const std::set<int64_t>& poison, ledger_faults faults,
                        int max_requests = 1000) {
  script_result r;
  auto act = d.request(drain_trigger::poll);
  if (act == drain_action::none) {
    // A poll tick is coalesced into an armed start-over: the next attempt
    // is the timer's (on_redrain_timer asks with the redrain trigger).
    act = d.request(drain_trigger::redrain);
  }
  if (act != drain_action::fetch)
    return r;
  for (;;) {
    if (++r.requests > max_requests)
      break;
    auto after = d.fetch_after();
    r.afters.push_back(after);
    auto limit = d.fetch_limit();
    page_summary p;
    p.is_object = true;
    bool bad = faults.broken;
    for (auto id : ledger_ids) {
      if (id <= after)
        continue;
      if (static_cast<int>(p.ids.size()) >= limit)
        break;
      p.ids.push_back(id);
      bad = bad || poison.count(id) > 0;
    }
    if (!bad) {
      auto t = faults.transient.find(after);
      if (t != faults.transient.end() && t->second > 0) {
        --t->second;
        bad = true;
      }
    }
    p.cursor = p.ids.empty() ? after : *p.ids.back();
    drain_next next;
    if (bad) {
      std::optional<int64_t> first;
      if (faults.show_ids && !p.ids.empty())
        first = p.ids.front();
      auto why = faults.why;
      if (!faults.whys.empty())
        why
          = faults
              .whys[static_cast<std::size_t>(r.requests) % faults.whys.size()];
      next = d.on_unreadable(why, "cannot read it", first);
    } else {
      auto plan = d.on_page(p);
      if (plan.reset && plan.cause == reset_cause::undeliverable) {
        r.log.push_back("u" + std::to_string(*plan.event_id));
        r.resets.push_back(plan);
      }
      for (auto i : plan.deliver) {
        d.on_event_delivered(p.ids[i]);
        r.log.push_back("e" + std::to_string(*p.ids[i]));
      }
      next = d.on_page_done();
    }
    while (next.what == drain_next::kind::reset) {
      // An undeliverable reset, delivered in order; then the drain goes on.
      EXPECT_EQ(next.plan.cause, reset_cause::undeliverable);
      r.log.push_back("u" + std::to_string(*next.plan.event_id));
      r.resets.push_back(next.plan);
      next = d.on_page_done();
    }
    if (faults.fail_at.count(r.requests) > 0) {
      // The transport failed instead of answering this request.
      next = d.on_fetch_failed();
    }
    r.last = next;
    if (next.what != drain_next::kind::fetch)
      break;
  }
  return r;
}

script_result run_drain(ledger_drain& d, const ids& ledger_ids,
                        const std::set<int64_t>& poison,
                        drain_error_reason why
                        = drain_error_reason::unparseable,
                        bool broken = false) {
  ledger_faults f;
  f.why = why;
  f.broken = broken;
  return run_drain(d, ledger_ids, poison, f);
}

/// Drains until idle (re-draining after every backoff), at most `attempts`
/// times; the logs of all attempts, in order.
script_result run_drains(ledger_drain& d, const ids& ledger_ids,
                         const std::set<int64_t>& poison,
                         const ledger_faults& faults, int attempts) {
  script_result all;
  for (int i = 0; i < attempts; ++i) {
    auto r = run_drain(d, ledger_ids, poison, faults);
    all.log.insert(all.log.end(), r.log.begin(), r.log.end());
    all.resets.insert(all.resets.end(), r.resets.begin(), r.resets.end());
    all.afters.insert(all.afters.end(), r.afters.begin(), r.afters.end());
    all.requests += r.requests;
    all.last = r.last;
    if (r.last.what == drain_next::kind::idle)
      break;
  }
  return all;
}

std::vector<std::string> log_of(std::initializer_list<const char*> xs) {
  return {xs.begin(), xs.end()};
}

} // namespace

TEST(LedgerPoison, AnUnreadableEventIsIsolatedByHalvingAndSurfacedInOrder) {
  ledger_drain d{0, 8, 30s};
  auto r = run_drain(d, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {6});
  EXPECT_EQ(r.log, log_of({"e1", "e2", "e3", "e4", "e5", "u6", "e7", "e8", "e9",
                           "e10"}));
  ASSERT_EQ(r.resets.size(), 1u);
  auto& rs = r.resets[0];
  EXPECT_EQ(rs.reset_from, 5); // lost: (5, 6], the one event
  EXPECT_EQ(rs.reset_to, 6);
  EXPECT_EQ(rs.event_id, 6);
  EXPECT_EQ(rs.reason, "unparseable: cannot read it");
  EXPECT_EQ(d.cursor(), 10);
  EXPECT_EQ(r.last.what, drain_next::kind::idle);
  EXPECT_EQ(d.undeliverable(), 1u);
  // 0..8 bad, 0..4 ok, 4..8 bad, 4..6 bad, 4..5 ok, 5..6 bad twice (its
  // id not shown), probe 6 ok, a fresh look at 5 still bad, then 6..10 at
  // the full limit again.
  EXPECT_EQ(r.requests, 10);
  EXPECT_EQ(r.afters, (ids{0, 0, 4, 4, 4, 5, 5, 6, 5, 6}));
  EXPECT_EQ(d.drain_errors(drain_error_reason::unparseable), 6u);
  EXPECT_EQ(d.drain_errors(), 6u);
  EXPECT_EQ(d.fetch_limit(), 8);
  EXPECT_FALSE(d.isolating());
}

TEST(LedgerPoison, ThePoisonIdIsFoundWithoutReadingItWhenIdsAreSparse) {
  // With prefixes, a watcher sees ids with holes: the probe must not take
  // cursor + 1 for the bad event.
  ledger_drain d{0, 4, 30s};
  auto r
    = run_drain(d, {3, 10, 17, 40, 41}, {17}, drain_error_reason::over_cap);
  EXPECT_EQ(r.log, log_of({"e3", "e10", "u17", "e40", "e41"}));
  ASSERT_EQ(r.resets.size(), 1u);
  EXPECT_EQ(r.resets[0].reset_from, 10);
  EXPECT_EQ(r.resets[0].reset_to, 17);
  EXPECT_EQ(r.resets[0].reason, "over_cap: cannot read it");
  EXPECT_EQ(d.cursor(), 41);
  EXPECT_GE(d.drain_errors(drain_error_reason::over_cap), 3u);
}

TEST(LedgerPoison, AdjacentPoisonEventsAreOneResetOverExactlyThem) {
  ledger_drain d{0, 4, 30s};
  auto r = run_drain(d, {1, 2, 3, 4, 5, 6}, {3, 4});
  EXPECT_EQ(r.log, log_of({"e1", "e2", "u4", "e5", "e6"}));
  ASSERT_EQ(r.resets.size(), 1u);
  EXPECT_EQ(r.resets[0].reset_from, 2); // (2, 4]: both, nothing readable
  EXPECT_EQ(r.resets[0].reset_to, 4);
  EXPECT_EQ(d.cursor(), 6);
}

TEST(LedgerPoison, APoisonEventFollowedByAReadableOneAndAnotherPoison) {
  ledger_drain d{0, 8, 30s};
  auto r = run_drain(d, {1, 2, 3, 4, 5, 6, 7}, {2, 4});
  EXPECT_EQ(r.log, log_of({"e1", "u2", "e3", "u4", "e5", "e6", "e7"}));
}

TEST(LedgerPoison, FarApartIdsAreReadFromTheUnreadableBody) {
  // The id-only scan of the unreadable page names the event: no probe.
  ledger_drain d{0, 2, 30s};
  ledger_faults f;
  f.show_ids = true;
  auto r = run_drain(d, {1, 1000, 5000}, {1000}, f);
  EXPECT_EQ(r.log, log_of({"e1", "u1000", "e5000"}));
  ASSERT_EQ(r.resets.size(), 1u);
  EXPECT_EQ(r.resets[0].reset_from, 1);
  EXPECT_EQ(r.resets[0].reset_to, 1000);
  // 0..2 bad, 0..1 ok, 1..2 bad twice (the same failure twice), then
  // 1000..5000 at the full limit.
  EXPECT_EQ(r.afters, (ids{0, 0, 1, 1, 1000}));
}

TEST(LedgerPoison,
     TwoPoisonEventsAroundAReadableOneAreTwoResetsAndNothingElse) {
  // Sparse ids, the readable 150 between the bad 100 and 200. The old
  // gallop probed after = 97 and 161 (both unreadable: 100 and 200), found
  // 289 readable and bisected to 200: one reset over (1, 200], and 150 was
  // lost although it could be read.
  ledger_drain d{0, 8, 30s};
  ledger_faults f;
  f.show_ids = true;
  auto r = run_drain(d, {1, 100, 150, 200, 5000}, {100, 200}, f);
  EXPECT_EQ(r.log, log_of({"e1", "u100", "e150", "u200", "e5000"}));
  ASSERT_EQ(r.resets.size(), 2u);
  EXPECT_EQ(r.resets[0].reset_from, 1);
  EXPECT_EQ(r.resets[0].event_id, 100);
  EXPECT_EQ(r.resets[1].reset_from, 150);
  EXPECT_EQ(r.resets[1].event_id, 200);
  EXPECT_EQ(d.undeliverable(), 2u);
  EXPECT_EQ(d.cursor(), 5000);
}

TEST(LedgerPoison, WithoutTheIdTheProbeNeverPassesAReadableEvent) {
  // The same ledger when not even the id can be read (over the cap): the
  // linear probe is slow over sparse ids (it backs off every
  // linear_probe_steps positions and goes on from there) but exact.
  ledger_drain d{0, 8, 30s};
  ledger_faults f;
  f.why = drain_error_reason::over_cap;
  auto r = run_drains(d, {1, 100, 150, 200, 5000}, {100, 200}, f, 20);
  EXPECT_EQ(r.log, log_of({"e1", "u100", "e150", "u200", "e5000"}));
  ASSERT_EQ(r.resets.size(), 2u);
  EXPECT_EQ(r.resets[0].reset_from, 1);
  EXPECT_EQ(r.resets[0].reset_to, 100);
  EXPECT_EQ(r.resets[1].reset_from, 150);
  EXPECT_EQ(r.resets[1].reset_to, 200);
  EXPECT_EQ(r.last.what, drain_next::kind::idle);
  EXPECT_EQ(d.cursor(), 5000);
}

TEST(LedgerPoison, ATransientBadAnswerIsAskedAgainAndDeliversNormally) {
  // One corrupt response for after = 0 at limit 1. Before, the drain
  // probed after = 1 at once, found it readable and reset event 1, which
  // could be read.
  ledger_drain d{0, 1, 30s};
  ledger_faults f;
  f.transient[0] = 1;
  auto r = run_drain(d, {1, 2, 3}, {}, f);
  EXPECT_EQ(r.log, log_of({"e1", "e2", "e3"}));
  EXPECT_TRUE(r.resets.empty());
  EXPECT_EQ(d.undeliverable(), 0u);
  EXPECT_EQ(d.drain_errors(drain_error_reason::unparseable), 1u);
  EXPECT_EQ(d.cursor(), 3);
}

TEST(LedgerPoison, TheSameFailureTwiceForOneAfterIsUndeliverable) {
  ledger_drain d{0, 1, 30s};
  ledger_faults f;
  f.show_ids = true;
  auto r = run_drain(d, {1, 2, 3}, {2}, f);
  EXPECT_EQ(r.log, log_of({"e1", "u2", "e3"}));
  // after = 1 asked twice, and only then event 2 declared.
  EXPECT_EQ(r.afters, (ids{0, 1, 1, 2, 3}));
  EXPECT_EQ(d.drain_errors(drain_error_reason::unparseable), 2u);
}

TEST(LedgerPoison, ATransientBadProbeAnswerDoesNotSkipAReadableEvent) {
  // No id in the body; the probe's after = 2 (whose answer, event 3, is
  // readable) fails once. Before, the probe moved on to after = 3 and
  // declared 3, passing the readable event 3.
  ledger_drain d{0, 1, 30s};
  ledger_faults f;
  f.transient[2] = 1;
  auto r = run_drain(d, {1, 2, 3, 4}, {2}, f);
  EXPECT_EQ(r.log, log_of({"e1", "u2", "e3", "e4"}));
  ASSERT_EQ(r.resets.size(), 1u);
  EXPECT_EQ(r.resets[0].reset_to, 2);
}

TEST(LedgerPoison, AnOutageThatEndsMidProbeDeclaresNothing) {
  // Every answer for after = 0, 1, 2 is unreadable twice (a proxy's error
  // page served with 200), then the replay answers again. Before, the
  // probe reached after = 3, found it readable and declared event 3 (and
  // with it 1 and 2) undeliverable, though all three can be read.
  ledger_drain d{0, 1, 30s};
  ledger_faults f;
  f.transient = {{0, 2}, {1, 2}, {2, 2}};
  // The fresh look at after = 2 answers: start over, after the start-over
  // backoff (a second drain attempt).
  auto first = run_drain(d, {1, 2, 3, 4}, {}, f); // uses up the outage
  EXPECT_TRUE(first.log.empty());
  ASSERT_EQ(first.last.what, drain_next::kind::redrain);
  auto r = run_drain(d, {1, 2, 3, 4}, {}, ledger_faults{});
  EXPECT_EQ(r.log, log_of({"e1", "e2", "e3", "e4"}));
  EXPECT_TRUE(r.resets.empty());
  EXPECT_EQ(d.undeliverable(), 0u);
  EXPECT_EQ(d.cursor(), 4);
}

TEST(LedgerPoison, AReadableAnswerAtTheCursorBeforeTheResetStartsOver) {
  // The outage ends while the probe is confirming: after = 2 is still
  // unreadable on the fresh look, after = 0 is readable again. The start
  // over waits the start-over backoff (a second drain attempt).
  ledger_drain d{0, 1, 30s};
  ledger_faults f;
  f.transient = {{0, 2}, {1, 2}, {2, 3}};
  auto first = run_drain(d, {1, 2, 3, 4}, {}, f); // uses up the outage
  EXPECT_TRUE(first.log.empty());
  ASSERT_EQ(first.last.what, drain_next::kind::redrain);
  EXPECT_EQ(first.last.delay, ledger_drain::redrain_floor);
  auto r = run_drain(d, {1, 2, 3, 4}, {}, ledger_faults{});
  EXPECT_EQ(r.log, log_of({"e1", "e2", "e3", "e4"}));
  EXPECT_TRUE(r.resets.empty());
}

/// A replay server that flaps in step with the probe: a page holding a
/// poison id is unreadable, except the fresh look at after = x - 1 right
/// after a readable probe at after = x (it answers then, as if an outage had
/// just ended), so every isolation attempt starts over. Driven on explicit
/// time: re-drain timers fire when the clock reaches them.
struct flapping_ledger {
  ids ledger_ids;
  std::set<int64_t> poison;
  bool flap = true;
  feed_duration now{0};
  /// When each request was sent, and its (after, limit).
  std::vector<feed_duration> at;
  std::vector<std::pair<int64_t, int>> asked;
  std::vector<std::string> log;
  /// The re-drain timer armed when the last run stopped.
  std::optional<drain_next> armed;
  /// When set: the watcher's poll tick, every this much, also while a
  /// re-drain timer is armed (as the actor's schedule_poll does).
  std::optional<feed_duration> poll_every;
  /// Poll mode: when the armed timer fires, and when the next tick comes.
  feed_duration armed_at{0};
  std::optional<feed_duration> next_poll;
  /// Poll ticks that started an attempt / that did not.
  int polls_started = 0;
  int polls_coalesced = 0;

  /// Runs `d` until the clock would pass `until` (or `max_requests`, or
  /// idle): from the timer left armed, else from a poll. With poll_every,
  /// polls tick on their interval whatever is armed, and the run ends only
  /// at `until` (or `max_requests`).
  void run(ledger_drain& d, feed_duration until, int max_requests = 100000) {
    if (poll_every)
      return run_polling(d, until, max_requests);
    if (armed) {
      if (now + armed->delay > until)
        return;
      now += armed->delay;
      auto id = armed->redrain_id;
      armed.reset();
      if (d.on_redrain_timer(id) != drain_action::fetch)
        return;
    } else if (d.request(drain_trigger::poll) != drain_action::fetch) {
      return;
    }
    while (static_cast<int>(at.size()) < max_requests) {
      auto next = drive(d, max_requests);
      if (next.what != drain_next::kind::redrain)
        return; // idle
      if (now + next.delay > until) {
        armed = next;
        return;
      }
      now += next.delay;
      if (d.on_redrain_timer(next.redrain_id) != drain_action::fetch)
        return;
    }
  }

  void run_polling(ledger_drain& d, feed_duration until, int max_requests) {
    auto settle = [&](const drain_next& next) {
      if (next.what == drain_next::kind::redrain) {
        armed = next;
        armed_at = now + next.delay;
      } else {
        armed.reset();
      }
    };
    if (!next_poll) {
      next_poll = now + *poll_every;
      if (d.request(drain_trigger::poll) == drain_action::fetch) {
        ++polls_started;
        settle(drive(d, max_requests));
      } else {
        ++polls_coalesced;
      }
    }
    while (static_cast<int>(at.size()) < max_requests) {
      bool timer_first = armed && armed_at <= *next_poll;
      auto t = timer_first ? armed_at : *next_poll;
      if (t > until)
        return;
      now = t;
      drain_action a;
      if (timer_first) {
        auto id = armed->redrain_id;
        armed.reset();
        a = d.on_redrain_timer(id);
      } else {
        *next_poll += *poll_every;
        a = d.request(drain_trigger::poll);
        (a == drain_action::fetch ? polls_started : polls_coalesced) += 1;
      }
      if (a == drain_action::fetch)
        settle(drive(d, max_requests)); // supersedes any armed timer
    }
  }

  /// Answers requests at `now` until the drain stops asking: returns the
  /// redrain it arms, or idle.
  drain_next drive(ledger_drain& d, int max_requests) {
    while (static_cast<int>(at.size()) < max_requests) {
      auto after = d.fetch_after();
      auto limit = d.fetch_limit();
      bool fresh_look = !asked.empty() && limit == 1 && asked.back().second == 1
                        && asked.back().first == after + 1;
      at.push_back(now);
      asked.emplace_back(after, limit);
      page_summary p;
      p.is_object = true;
      bool bad = false;
      for (auto id : ledger_ids) {
        if (id <= after)
          continue;
        if (static_cast<int>(p.ids.size()) >= limit)
          break;
        p.ids.push_back(id);
        bad = bad || poison.count(id) > 0;
      }
      if (flap && fresh_look)
        bad = false;
      p.cursor = p.ids.empty() ? after : *p.ids.back();
      drain_next next;
      if (bad) {
        next = d.on_unreadable(drain_error_reason::over_cap, "flap");
      } else {
        auto plan = d.on_page(p);
        for (auto i : plan.deliver) {
          d.on_event_delivered(p.ids[i]);
          log.push_back("e" + std::to_string(*p.ids[i]));
        }
        next = d.on_page_done();
      }
      while (next.what == drain_next::kind::reset) {
        log.push_back("u" + std::to_string(*next.plan.event_id));
        next = d.on_page_done();
      }
      if (next.what == drain_next::kind::fetch)
        continue;
      return next;
    }
    drain_next out;
    out.what = drain_next::kind::idle;
    return out;
  }

  /// The times at which an isolation attempt began: a request at the
  /// cursor with the full limit.
  std::vector<feed_duration> cycle_starts(int full_limit) const {
    std::vector<feed_duration> out;
    for (std::size_t i = 0; i < asked.size(); ++i)
      if (asked[i].second == full_limit)
        out.push_back(at[i]);
    return out;
  }
};

TEST(LedgerPoison, StartOversAgainstAFlappingServerBackOffToTheCap) {
  // Before, each start-over fetched again at once: the drain cycled
  // narrow -> probe -> start over forever without the clock moving.
  ledger_drain d{0, 8, 1s}; // re-drain cap: max(3 s, 1 s) = 3 s
  flapping_ledger f;
  f.ledger_ids = {1, 2, 3, 4, 5};
  f.poison = {1};
  f.run(d, 60s);
  EXPECT_TRUE(f.log.empty()); // nothing is declared, nothing skipped
  EXPECT_EQ(d.cursor(), 0);
  auto starts = f.cycle_starts(8);
  ASSERT_GE(starts.size(), 10u);
  // The gap between attempts doubles from the floor to the cap, then
  // stays there.
  std::vector<feed_duration> gaps;
  for (std::size_t i = 1; i < starts.size(); ++i)
    gaps.push_back(starts[i] - starts[i - 1]);
  EXPECT_EQ(gaps[0], ledger_drain::redrain_floor);
  for (std::size_t i = 1; i < gaps.size(); ++i) {
    EXPECT_GE(gaps[i], gaps[i - 1]) << i;
    EXPECT_LE(gaps[i], feed_duration{3s}) << i;
  }
  EXPECT_EQ(gaps.back(), feed_duration{3s});
  EXPECT_EQ(d.start_over_delay(), feed_duration{3s});
  // Bounded: ~7 requests per attempt, one attempt per 3 s once at the cap
  // (6.35 s to get there): at most 7 x (60 / 3 + 8) in a minute.
  EXPECT_LE(f.at.size(), 7u * (60u / 3u + 8u));
  EXPECT_LE(f.at.back(), feed_duration{61s});
}

TEST(LedgerPoison, PollTicksDoNotBypassTheStartOverBackoff) {
  // The watcher's poll tick comes every poll_interval (1 s here, below the
  // 3 s cap) whatever timer is armed. Before, a tick during a start-over
  // wait began the next attempt at once: the gaps never grew past the
  // poll interval and the cap was never reached.
  ledger_drain d{0, 8, 1s};
  flapping_ledger f;
  f.poll_every = feed_duration{1s};
  f.ledger_ids = {1, 2, 3, 4, 5};
  f.poison = {1};
  f.run(d, 60s);
  EXPECT_TRUE(f.log.empty());
  EXPECT_EQ(d.cursor(), 0);
  auto starts = f.cycle_starts(8);
  ASSERT_GE(starts.size(), 10u);
  std::vector<feed_duration> gaps;
  for (std::size_t i = 1; i < starts.size(); ++i)
    gaps.push_back(starts[i] - starts[i - 1]);
  for (std::size_t i = 1; i < gaps.size(); ++i) {
    EXPECT_GE(gaps[i], gaps[i - 1]) << i;
    EXPECT_LE(gaps[i], feed_duration{3s}) << i;
  }
  EXPECT_EQ(gaps.back(), feed_duration{3s});
  EXPECT_EQ(d.start_over_delay(), feed_duration{3s});
  // Only the first tick (nothing armed yet) started an attempt; the ~59
  // others fell into start-over waits and were coalesced.
  EXPECT_EQ(f.polls_started, 1);
  EXPECT_GE(f.polls_coalesced, 55);
  EXPECT_GE(d.wakes_coalesced(), static_cast<uint64_t>(f.polls_coalesced));
  EXPECT_LE(f.at.size(), 7u * (60u / 3u + 8u));
}

TEST(LedgerPoison, ProgressBringsTheStartOverBackoffBackToTheFloor) {
  ledger_drain d{0, 8, 1s};
  flapping_ledger f;
  f.ledger_ids = {1, 2, 3, 4, 5, 6};
  f.poison = {1};
  f.run(d, 20s);
  EXPECT_EQ(d.start_over_delay(), feed_duration{3s});
  // The server heals: the next attempt (on the timer already armed)
  // delivers, and the cursor moving resets the backoff.
  f.poison.clear();
  f.run(d, f.now + 10s);
  EXPECT_EQ(f.log, log_of({"e1", "e2", "e3", "e4", "e5", "e6"}));
  EXPECT_EQ(d.cursor(), 6);
  EXPECT_EQ(d.start_over_delay(), ledger_drain::redrain_floor);
  // A new poison event that flaps: its first start-over waits the floor.
  f.ledger_ids = {1, 2, 3, 4, 5, 6, 7, 8};
  f.poison = {7};
  auto before = f.asked.size();
  f.run(d, f.now + 1s);
  std::vector<feed_duration> recent;
  for (std::size_t i = 0; i < f.asked.size(); ++i)
    if (i >= before && f.asked[i].second == 8)
      recent.push_back(f.at[i]);
  ASSERT_GE(recent.size(), 2u);
  EXPECT_EQ(recent[1] - recent[0], ledger_drain::redrain_floor);
}

TEST(LedgerPoison, AWakeDoesNotBringAStartOverForward) {
  ledger_drain d{0, 8, 1s};
  flapping_ledger f;
  f.ledger_ids = {1, 2, 3};
  f.poison = {1};
  f.run(d, 10s);
  ASSERT_GT(d.start_over_delay(), ledger_drain::redrain_floor);
  // The last attempt armed a start-over timer: rising wakes are coalesced
  // into it (the poison at the cursor blocks whatever they announce).
  for (int64_t c = 100; c < 200; ++c)
    EXPECT_EQ(d.on_wake(c), drain_action::none);
  // Nor does a poll tick; a new session still starts a drain (a connect
  // comes once per connection, paced by the reconnect backoff).
  EXPECT_EQ(d.request(drain_trigger::poll), drain_action::none);
  EXPECT_EQ(d.request(drain_trigger::connect), drain_action::fetch);
}

TEST(LedgerPoison, TwoUnreadableAnswersConfirmEachOtherWhateverTheirReasons) {
  // A balancer alternating between a backend that answers over the cap
  // and one that answers garbage: before, the reasons never matched, no
  // failure was ever confirmed, and the drain asked again at once forever.
  ledger_drain d{0, 1, 30s};
  ledger_faults f;
  f.whys = {drain_error_reason::over_cap, drain_error_reason::unparseable};
  auto r = run_drain(d, {1, 2, 3}, {2}, f, 100);
  EXPECT_EQ(r.log, log_of({"e1", "u2", "e3"}));
  EXPECT_LT(r.requests, 20);
  EXPECT_EQ(r.last.what, drain_next::kind::idle);
}

TEST(LedgerPoison, ATransportFailureMidProbeKeepsWhatTheProbeLearnt) {
  // Sparse ids, nothing readable from the body: the probe walks after =
  // 1, 2, ...; the transport fails at the 9th request. The next attempt
  // goes on from there instead of walking the same positions again.
  ledger_drain d{0, 1, 30s};
  ledger_faults f;
  f.fail_at = {9};
  auto r = run_drain(d, {1, 100}, {100}, f);
  EXPECT_EQ(r.last.what, drain_next::kind::redrain);
  ASSERT_GE(r.afters.size(), 9u);
  auto walked = r.afters[8]; // the position whose answer was lost
  ledger_faults g;
  auto r2 = run_drain(d, {1, 100}, {100}, g);
  ASSERT_GE(r2.afters.size(), 3u);
  // Limit 1 at the cursor twice, then the probe resumes past `walked - 1`.
  EXPECT_EQ(r2.afters[0], 1);
  EXPECT_EQ(r2.afters[1], 1);
  EXPECT_EQ(r2.afters[2], walked + 1);
}

TEST(LedgerPoison, APoisonEventAtTheHeadIsSurfacedToo) {
  ledger_drain d{0, 4, 30s};
  auto r = run_drain(d, {1, 2, 3}, {3});
  EXPECT_EQ(r.log, log_of({"e1", "e2", "u3"}));
  EXPECT_EQ(d.cursor(), 3);
}

TEST(LedgerPoison, AnEndpointUnreadableEverywhereSkipsNothingAndBacksOff) {
  ledger_drain d{5, 8, 30s};
  auto r = run_drain(d, {6, 7, 8}, {}, drain_error_reason::unparseable,
                     /*broken=*/true);
  EXPECT_TRUE(r.log.empty());
  EXPECT_EQ(d.cursor(), 5);
  EXPECT_EQ(r.last.what, drain_next::kind::redrain);
  EXPECT_EQ(r.last.delay, ledger_drain::redrain_floor);
  // 8, 4, 2, then 1 at after = 5, 6, ..., each asked twice: bounded.
  EXPECT_EQ(r.requests, 3 + 2 * (ledger_drain::linear_probe_steps + 1));
  EXPECT_EQ(d.drain_errors(), static_cast<uint64_t>(r.requests));
  EXPECT_FALSE(d.isolating());
  EXPECT_EQ(d.fetch_limit(), 8);
  // The next attempt waits longer, and probes on from where this one
  // stopped.
  auto r2 = run_drain(d, {6, 7, 8}, {}, drain_error_reason::unparseable, true);
  EXPECT_EQ(r2.last.delay, 2 * ledger_drain::redrain_floor);
  ASSERT_GE(r2.afters.size(), 6u);
  EXPECT_EQ(r2.afters[5], 5 + ledger_drain::linear_probe_steps + 1);
  EXPECT_EQ(d.cursor(), 5);
}

TEST(LedgerPoison, EventsWithoutAnIdThatCannotBePassedAreIsolatedToo) {
  // A full page of id-less events whose cursor does not move could neither
  // be delivered nor passed: before, it stalled the feed at drain_errors.
  ledger_drain d{0, 2, 30s};
  EXPECT_EQ(d.request(drain_trigger::poll), drain_action::fetch);
  auto plan = d.on_page([] {
    page_summary p;
    p.is_object = true;
    p.ids = {std::nullopt, std::nullopt};
    p.cursor = 0;
    return p;
  }());
  EXPECT_EQ(plan.verdict, page_verdict::bad_page);
  auto next = d.on_page_done();
  EXPECT_EQ(next.what, drain_next::kind::fetch);
  EXPECT_EQ(d.fetch_limit(), 1);
  EXPECT_EQ(d.drain_errors(drain_error_reason::bad_event), 1u);
}

// -- the id-only scan of an unreadable body
// ----------------------------------------------

TEST(FeedIdScan, TheFirstEventsIdIsReadPastWhatCannotBeParsed) {
  feed_fields f;
  auto deep100 = std::string(100, '[') + std::string(100, ']');
  // Deeper than any parse limit, before and after the id.
  EXPECT_EQ(first_event_id(R"({"cursor":3,"events":[{"meta":)" + deep100
                             + R"(,"id":7}]})",
                           f),
            7);
  // A syntax error after the id, a body cut short after it.
  EXPECT_EQ(first_event_id(R"({"events":[{"id":9,"x":tru}]})", f), 9);
  EXPECT_EQ(first_event_id(R"({"events":[{"id":10,"subject":"abc)", f), 10);
  // The id of a nested object or of another field is not the event's.
  EXPECT_EQ(
    first_event_id(
      R"({"x":{"events":[{"id":1}]},"events":[{"m":{"id":2},"id":3}]})", f),
    3);
  for (const char* none :
       {R"([{"id":1}])", R"({"events":[]})", R"({"events":[[1]]})",
        R"({"events":[5,{"id":1}]})", R"({"events":[{"id":"1"}]})",
        R"({"events":[{"id":1.5}]})", R"({"events":[{"x":1}]})",
        R"({"events":{"id":1}})", R"({"events":[{"x":)", "<html>"})
    EXPECT_FALSE(first_event_id(none, f)) << none;
  // The configured field names.
  feed_fields custom;
  custom.events = "items";
  custom.event_id = "seqno";
  EXPECT_EQ(first_event_id(
              R"({"events":[{"id":1}],"items":[{"id":2,"seqno":4}]})", custom),
            4);
  EXPECT_FALSE(first_event_id(R"({"events":[{"id":1}]})", custom));
}

TEST(FeedIdScan, AnIdIsShownOnlyWhenTheFirstEventMayBeTheUnreadableOne) {
  feed_fields f;
  // Exactly one event (what limit 1 asks for), the rest of the page after
  // it.
  EXPECT_EQ(first_event_id(R"({"events":[{"id":1,"x":2}],"cursor":tru)", f), 1);
  EXPECT_EQ(first_event_id(R"({"events":[{"id":1}])", f), 1);
  // Failing or cut short inside the first event, or before anything
  // follows it.
  for (std::string one : {std::string{R"({"events":[{"id":1,"m":tru}]})"},
                          std::string{R"({"events":[{"id":1,"m":"abc)"},
                          std::string{R"({"events":[{"id":1,"m":{"k":[1,)"},
                          R"({"events":[{"id":1,"m":)" + std::string(2000, '['),
                          std::string{R"({"events":[{"id":1})"},
                          std::string{R"({"events":[{"id":1},)"},
                          std::string{R"({"events":[{"id":1}x)"}})
    EXPECT_EQ(first_event_id(one, f), 1) << one;
  // A server that ignores limit: the first event is readable and ends, and
  // more follow -- any of them may be the one that cannot be read.
  for (const char* more :
       {R"({"events":[{"id":1},{"id":2},{"id":3,"m":tru}]})",
        R"({"events":[{"id":1,"m":[[1]]},{"id":2}]})",
        R"({"events":[{"id":1},{"id":2)", R"({"events":[{"id":1},{)",
        R"({"events":[{"id":1},5]})", R"({"events":[{"id":1},12)",
        R"({"events":[{"id":1},"ab)", R"({"events":[{"id":1},"x"]})",
        R"({"events":[{"id":1},[)", R"({"events":[{"id":1},null]})"})
    EXPECT_FALSE(first_event_id(more, f)) << more;
}

TEST(FeedIdScan, AFrameShowsItsTopLevelSeq) {
  auto deep100 = std::string(100, '[') + std::string(100, ']');
  EXPECT_EQ(
    frame_seq(R"({"type":"event","metadata":)" + deep100 + R"(,"seq":12})"),
    12);
  EXPECT_FALSE(frame_seq(R"({"type":"event","m":{"seq":3}})"));
  EXPECT_FALSE(frame_seq("not json at all"));
  auto m = parse_message(R"({"type":"event","seq":5,"m":)" + deep100 + "}",
                         "cursor");
  EXPECT_EQ(m.frame.type, frame_type::not_json);
  EXPECT_EQ(m.frame.seq, 5);
}

TEST(FeedIdScan, HostileNestingIsNotFollowedToTheEndOfTheText) {
  // Far deeper than any parse limit: the scan must neither recurse into it
  // (the stack) nor show an id or seq it never reached.
  feed_fields f;
  auto frame = R"({"type":"event","m":)" + std::string(200000, '[');
  EXPECT_FALSE(frame_seq(frame));
  EXPECT_FALSE(frame_seq(frame + R"(,"seq":3})"));
  auto m = parse_message(frame, "cursor");
  EXPECT_EQ(m.frame.type, frame_type::not_json);
  EXPECT_FALSE(m.frame.seq);
  auto body = R"({"x":)" + std::string(65000, '[');
  EXPECT_FALSE(first_event_id(body, f));
  EXPECT_FALSE(first_event_id(body + R"(,"events":[{"id":4}]})", f));
  EXPECT_FALSE(
    first_event_id(R"({"events":[{"m":)" + std::string(200000, '['), f));
  // What comes before the deep part is still shown.
  EXPECT_EQ(
    frame_seq(R"({"type":"event","seq":8,"m":)" + std::string(200000, '[')), 8);
}

TEST(FeedIdScan, AnIdPastAModeratelyDeepValueIsStillFound) {
  feed_fields f;
  auto deep = [](std::size_t n) {
    return std::string(n, '[') + std::string(n, ']');
  };
  EXPECT_EQ(first_event_id(R"({"meta":)" + deep(500) + R"(,"events":[{"m":)"
                             + deep(100) + R"(,"id":11,"x":tru}]})",
                           f),
            11);
  EXPECT_EQ(
    frame_seq(R"({"type":"event","m":)" + deep(1000) + R"(,"seq":13,"x":tru})"),
    13);
}

TEST(FeedIdScan, OnlyAnEventFrameShowsItsSeq) {
  // The type after the seq counts too.
  EXPECT_EQ(frame_seq(R"({"seq":12,"subject":"a","type":"event","m":tru})"),
            12);
  // Another type, or no type seen: a garbled hello or notice says nothing
  // about the event sequence.
  for (const char* none :
       {R"({"type":"hello","seq":1000,"m":tru})",
        R"({"seq":1000,"type":"notice","m":tru})",
        R"({"seq":1000,"m":tru,"type":"event"})", R"({"seq":1000,)",
        R"({"seq":1000,"type":"eve)", R"({"type":1,"seq":3,x})",
        R"({"type":["event"],"seq":3,x})", R"({"type":null,"seq":3,x})",
        R"({"m":{"type":"event"},"seq":3,x})", R"({"type":"events","seq":3,x})",
        R"({"type":"event","seq":3.5,x})"})
    EXPECT_FALSE(frame_seq(none)) << none;
  auto m = parse_message(R"({"type":"hello","mode":"catchup","seq":1000,)",
                         "cursor");
  EXPECT_EQ(m.frame.type, frame_type::not_json);
  EXPECT_FALSE(m.frame.seq);
}

// -- pure state: wake coalescing
// ---------------------------------------------------------

TEST(LedgerWakes, AFloodOfWakesForAnUnreachableTargetStartsNoDrain) {
  ledger_drain d{5, 10, 30s};
  EXPECT_EQ(d.on_wake(100), drain_action::fetch);
  auto plan = d.on_page([] {
    page_summary p;
    p.is_object = true;
    p.cursor = 5;
    return p;
  }());
  auto next = d.on_page_done();
  ASSERT_EQ(next.what, drain_next::kind::redrain);
  EXPECT_EQ(next.delay, ledger_drain::redrain_floor);
  int fetches = 0;
  for (int i = 0; i < 10000; ++i)
    if (d.on_wake(100) == drain_action::fetch)
      ++fetches;
  EXPECT_EQ(fetches, 0);
  EXPECT_EQ(d.wakes_coalesced(), 10000u);
  // The armed timer runs the next drain.
  EXPECT_EQ(d.on_redrain_timer(next.redrain_id), drain_action::fetch);
}

TEST(LedgerWakes, WakesDuringADrainLeaveOnePendingDrain) {
  ledger_drain d{0, 10, 30s};
  EXPECT_EQ(d.request(drain_trigger::start), drain_action::fetch);
  for (int i = 0; i < 1000; ++i)
    EXPECT_EQ(d.on_wake(std::nullopt), drain_action::queued);
  EXPECT_EQ(d.wakes_coalesced(), 999u);
  d.on_page([] {
    page_summary p;
    p.is_object = true;
    p.cursor = 0;
    return p;
  }());
  // The pending one, at once: the page may have been read just before
  // the event the wakes announce became visible.
  EXPECT_EQ(d.on_page_done().what, drain_next::kind::fetch);
  for (int i = 0; i < 1000; ++i)
    EXPECT_EQ(d.on_wake(std::nullopt), drain_action::queued);
  d.on_page([] {
    page_summary p;
    p.is_object = true;
    p.cursor = 0;
    return p;
  }());
  // Read nothing new twice: the next one waits the floor.
  auto n = d.on_page_done();
  ASSERT_EQ(n.what, drain_next::kind::redrain);
  EXPECT_EQ(n.delay, ledger_drain::redrain_floor);
  EXPECT_EQ(d.on_wake(std::nullopt), drain_action::none); // coalesced into it
  EXPECT_EQ(d.on_redrain_timer(n.redrain_id), drain_action::fetch);
  d.on_page([] {
    page_summary p;
    p.is_object = true;
    p.cursor = 0;
    return p;
  }());
  EXPECT_EQ(d.on_page_done().what, drain_next::kind::idle);
}

TEST(LedgerWakes, NewsDuringADrainThatMovedTheCursorReadsAgainAtOnce) {
  for (std::optional<int64_t> hint :
       {std::optional<int64_t>{}, std::optional<int64_t>{3}}) {
    ledger_drain d{0, 10, 30s};
    EXPECT_EQ(d.request(drain_trigger::start), drain_action::fetch);
    EXPECT_EQ(d.on_wake(hint), drain_action::queued);
    page_summary p;
    p.is_object = true;
    p.ids = {1, 2};
    p.cursor = 2;
    d.on_page(p);
    d.on_event_delivered(1);
    d.on_event_delivered(2);
    // Events are flowing: no floor for the next read.
    EXPECT_EQ(d.on_page_done().what, drain_next::kind::fetch)
      << (hint ? *hint : -1);
  }
}

TEST(LedgerWakes, RisingHintsDuringDrainsThatReadNothingCostOneCallPerFloor) {
  // A hub announcing ever higher cursors that replay never shows, fast
  // enough that raised wakes arrive during every drain and while every
  // timer is armed. Before, each drain ended "pending and raised: read
  // again now", so the replay was asked as fast as it answered. A raise
  // restores the floor (hyperdjango's ChangeFeedWatcher), so the floor is
  // what such a flood costs: one call per 50 ms.
  ledger_drain d{0, 10, 30s};
  int64_t hint = 1000;
  ASSERT_EQ(d.on_wake(hint), drain_action::fetch);
  page_summary empty;
  empty.is_object = true;
  empty.cursor = 0;
  // The first drain that reads nothing new with news pending reads again
  // at once (the event may just have become visible).
  for (int i = 0; i < 50; ++i)
    EXPECT_EQ(d.on_wake(++hint), drain_action::queued);
  d.on_page(empty);
  ASSERT_EQ(d.on_page_done().what, drain_next::kind::fetch);
  for (int round = 0; round < 100; ++round) {
    for (int i = 0; i < 50; ++i)
      EXPECT_EQ(d.on_wake(++hint), drain_action::queued);
    // While the drain is in flight with news pending, one more raise
    // changes nothing but the target: the io thread may absorb it.
    EXPECT_TRUE(d.absorbs_raises());
    d.on_page(empty);
    auto n = d.on_page_done();
    ASSERT_EQ(n.what, drain_next::kind::redrain) << round;
    EXPECT_EQ(n.delay, ledger_drain::redrain_floor) << round;
    EXPECT_TRUE(d.absorbs_raises());
    for (int i = 0; i < 50; ++i)
      EXPECT_EQ(d.on_wake(++hint), drain_action::none);
    ASSERT_EQ(d.on_redrain_timer(n.redrain_id), drain_action::fetch);
  }
  EXPECT_EQ(d.target(), hint);
  // The cursor moves: the next news after a drain that reads nothing is
  // read again at once, once.
  page_summary one;
  one.is_object = true;
  one.ids = {1};
  one.cursor = 1;
  d.on_page(one);
  d.on_event_delivered(1);
  ASSERT_EQ(d.on_page_done().what, drain_next::kind::redrain); // below
  ASSERT_EQ(d.on_redrain_timer(d.rearm_id()), drain_action::fetch);
  empty.cursor = 1;
  d.on_wake(++hint);
  d.on_page(empty);
  ASSERT_EQ(d.on_page_done().what, drain_next::kind::fetch);
  d.on_wake(++hint);
  d.on_page(empty);
  EXPECT_EQ(d.on_page_done().delay, ledger_drain::redrain_floor);
}

TEST(LedgerWakes, AbsorbsRaisesOnlyWhereARaiseChangesNothingButTheTarget) {
  page_summary empty;
  empty.is_object = true;
  empty.cursor = 0;
  ledger_drain d{0, 10, 30s};
  EXPECT_FALSE(d.absorbs_raises()); // idle: a raise starts a drain
  d.on_wake(100);
  EXPECT_FALSE(d.absorbs_raises()); // in flight, nothing pending
  d.on_page(empty);
  auto n = d.on_page_done();
  ASSERT_EQ(n.delay, ledger_drain::redrain_floor);
  EXPECT_TRUE(d.absorbs_raises()); // armed at the floor
  // Let the backoff grow past the floor (no wake pending, no news): a
  // raise would re-arm the timer at the floor.
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(d.on_redrain_timer(n.redrain_id), drain_action::fetch);
    d.on_page(empty);
    n = d.on_page_done();
  }
  ASSERT_GT(n.delay, ledger_drain::redrain_floor);
  EXPECT_FALSE(d.absorbs_raises());
  ASSERT_EQ(d.on_redrain_timer(n.redrain_id), drain_action::fetch);
  d.on_wake(100);
  EXPECT_FALSE(d.absorbs_raises()); // pending, but without news
  d.on_wake(101);
  EXPECT_TRUE(d.absorbs_raises()); // news pending
  d.on_wake(100);                  // no news, the news stays
  EXPECT_TRUE(d.absorbs_raises());
  d.on_page(empty);
  ASSERT_EQ(d.on_page_done().what, drain_next::kind::fetch); // once at once
  d.on_wake(std::nullopt);
  d.on_page(empty);
  n = d.on_page_done();
  // The news led nowhere: the floor, where a raise changes nothing more.
  ASSERT_EQ(n.what, drain_next::kind::redrain);
  EXPECT_EQ(n.delay, ledger_drain::redrain_floor);
  EXPECT_TRUE(d.absorbs_raises());
  EXPECT_EQ(d.on_wake(200), drain_action::none);
  // A start-over timer never absorbs: a raise would not change it, but a
  // start-over is about the event at the cursor, not about targets.
  ledger_drain e{0, 10, 30s};
  EXPECT_EQ(e.request(drain_trigger::start), drain_action::fetch);
  e.on_page(empty);
  auto m = e.on_page_done();
  EXPECT_EQ(m.what, drain_next::kind::idle);
  EXPECT_EQ(e.on_wake(5), drain_action::fetch);
  e.on_page(empty);
  m = e.on_page_done();
  ASSERT_EQ(m.what, drain_next::kind::redrain);
  // Grow the tail backoff with no news pending: a raise re-arms.
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(e.on_redrain_timer(m.redrain_id), drain_action::fetch);
    e.on_page(empty);
    m = e.on_page_done();
  }
  ASSERT_GT(m.delay, ledger_drain::redrain_floor);
  EXPECT_FALSE(e.absorbs_raises());
  EXPECT_EQ(e.on_wake(6), drain_action::rearm);
  EXPECT_TRUE(e.absorbs_raises()); // re-armed at the floor
}

TEST(LedgerWakes, FoldingRaisesIntoOneWakeDecidesAsEachWakeWould) {
  // What the io-thread intake relies on (wake_intake.hpp): where
  // absorbs_raises() holds, the wakes 1101..1150 one by one and a single
  // wake 1150 before the drain's next step lead to the same next step.
  page_summary empty;
  empty.is_object = true;
  empty.cursor = 0;
  page_summary some;
  some.is_object = true;
  some.ids = {1};
  some.cursor = 1;
  for (bool armed : {false, true}) {
    for (bool moved : {false, true}) {
      uint64_t timer = 0;
      auto setup = [&] {
        ledger_drain d{0, 10, 30s};
        d.on_wake(100);
        d.on_wake(1100); // pending and raised
        if (armed) {
          d.on_page(empty);
          EXPECT_EQ(d.on_page_done().what, drain_next::kind::fetch);
          d.on_wake(std::nullopt); // news again
          d.on_page(empty);
          auto n = d.on_page_done();
          EXPECT_EQ(n.what, drain_next::kind::redrain);
          EXPECT_EQ(n.delay, ledger_drain::redrain_floor);
          timer = n.redrain_id;
        }
        EXPECT_TRUE(d.absorbs_raises());
        return d;
      };
      auto one_by_one = setup();
      auto folded = setup();
      for (int64_t t = 1101; t <= 1150; ++t)
        one_by_one.on_wake(t);
      folded.on_wake(1150);
      auto step = [&](ledger_drain& d) {
        if (armed)
          EXPECT_EQ(d.on_redrain_timer(timer), drain_action::fetch);
        d.on_page(moved ? some : empty);
        if (moved)
          d.on_event_delivered(1);
        auto n = d.on_page_done();
        return std::make_tuple(n.what, n.delay, d.target(), d.cursor(),
                               d.absorbs_raises());
      };
      EXPECT_EQ(step(one_by_one), step(folded)) << armed << moved;
    }
  }
}

TEST(LedgerWakes, AWakeThatAnnouncesTheCursorReachedReadsNothing) {
  ledger_drain d{7, 10, 30s};
  EXPECT_EQ(d.on_wake(7), drain_action::none);
  EXPECT_EQ(d.on_wake(8), drain_action::fetch);
}

TEST(LedgerWakes, ARaisedTargetWhileBackingOffRearmsAtTheFloorNotAtOnce) {
  ledger_drain d{5, 10, 30s};
  d.on_wake(100);
  auto empty = [] {
    page_summary p;
    p.is_object = true;
    p.cursor = 5;
    return p;
  };
  d.on_page(empty());
  auto n = d.on_page_done();
  // Let the backoff grow: 0.05, 0.1, 0.2 s.
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(d.on_redrain_timer(n.redrain_id), drain_action::fetch);
    d.on_page(empty());
    n = d.on_page_done();
  }
  EXPECT_EQ(n.delay, 4 * ledger_drain::redrain_floor);
  EXPECT_EQ(d.on_wake(101), drain_action::rearm);
  EXPECT_EQ(d.rearm_delay(), ledger_drain::redrain_floor);
  // The old timer is stale; further raises are coalesced into the new one.
  EXPECT_EQ(d.on_redrain_timer(n.redrain_id), drain_action::none);
  EXPECT_EQ(d.on_wake(102), drain_action::none);
  EXPECT_EQ(d.on_redrain_timer(d.rearm_id()), drain_action::fetch);
}

TEST(LedgerWakes, AFailedFetchBacksOffAndWakesWaitForTheRetry) {
  ledger_drain d{0, 10, 30s};
  d.request(drain_trigger::start);
  auto n = d.on_fetch_failed();
  ASSERT_EQ(n.what, drain_next::kind::redrain);
  EXPECT_EQ(n.delay, ledger_drain::redrain_floor);
  EXPECT_EQ(d.on_wake(std::nullopt), drain_action::none);
  EXPECT_EQ(d.on_redrain_timer(n.redrain_id), drain_action::fetch);
  n = d.on_fetch_failed();
  EXPECT_EQ(n.delay, 2 * ledger_drain::redrain_floor);
  EXPECT_EQ(d.cursor(), 0);
}

TEST(LedgerWakes, ALowHintDisprovedBeforeAHelloIsCheckedAgainAfterIt) {
  auto page_at = [](int64_t cursor) {
    page_summary p;
    p.is_object = true;
    p.cursor = cursor;
    return p;
  };
  ledger_drain d{10, 10, 30s};
  EXPECT_EQ(d.on_wake(5), drain_action::fetch);
  d.on_page(page_at(10)); // the head is not below the cursor: disproved
  EXPECT_EQ(d.on_page_done().what, drain_next::kind::idle);
  EXPECT_EQ(d.on_wake(5), drain_action::none); // coalesced
  // A hello (a new session: the hub may have restarted on a shorter log)
  // makes that disproof stale. Before, the hint stayed coalesced until a
  // rewind.
  EXPECT_EQ(d.on_hello(std::nullopt, 10), drain_action::none);
  EXPECT_EQ(d.on_wake(5), drain_action::fetch);
}

TEST(LedgerWakes, ALowHintDisprovedBeforeInFrameDeliveryIsCheckedAgainAfterIt) {
  ledger_drain d{10, 10, 30s};
  EXPECT_EQ(d.on_wake(5), drain_action::fetch);
  page_summary p;
  p.is_object = true;
  p.cursor = 10;
  d.on_page(p);
  d.on_page_done();
  EXPECT_EQ(d.on_wake(5), drain_action::none);
  d.quiesce();
  EXPECT_EQ(d.on_wake(5), drain_action::fetch);
}

// -- the actor, on virtual time
// ----------------------------------------------------------

namespace {

std::string wake(int64_t cursor) {
  return R"({"type":"wake","cursor":)" + std::to_string(cursor) + "}";
}

/// JSON nested `depth` arrays deep (the client parser stops at
/// client_config::json_max_depth, 64 by default).
std::string deep(int depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

class FeedPoison : public virtual_time_fixture {
protected:
  FeedPoison() {
    cfg.replay_path = "/v1/events";
    cfg.limit = 4;
    ccfg.base_url = "http://127.0.0.1:8080";
    ccfg.token = "tok";
  }

  ~FeedPoison() override {
    if (w)
      caf::anon_send_exit(w, caf::exit_reason::user_shutdown);
    run();
  }

  void start(bool with_ws = true) {
    client_options co;
    co.transport = spawn_ledger_transport(sys(), ledger);
    co.seed = 1;
    feed_watcher_options o;
    if (!cfg.replay_path.empty())
      o.client = make_service_client(sys(), ccfg, co);
    if (with_ws) {
      cfg.ws_path = "/ws/feed";
      o.connector
        = std::make_shared<fake_ws_connector>(ws, [this] { return now(); });
      o.ws = feed_ws_endpoint::from(ccfg);
    }
    o.subscriber = spawn_recording_subscriber(sys(), subs);
    auto fails = failures;
    o.on_failure = [fails](const feed_failure& f) {
      fails->push_back(f);
    };
    o.seed = 7;
    w = spawn_feed_watcher(sys(), cfg, o);
    run();
  }

  feed_stats stats() {
    return ask_stats(sys(), w, [this] { run(); });
  }

  /// "e<id>" / "e#<seq>" per event, "r:<cause>" per reset, in order.
  std::vector<std::string> got() const {
    std::vector<std::string> r;
    for (auto& e : subs->got) {
      if (e.is_reset)
        r.push_back(std::string{"r:"} + to_string(e.rs.cause));
      else if (e.ev.id)
        r.push_back("e" + std::to_string(*e.ev.id));
      else if (e.ev.seq)
        r.push_back("e#" + std::to_string(*e.ev.seq));
      else
        r.push_back("e?");
    }
    return r;
  }

  feed_config cfg;
  client_config ccfg;
  std::shared_ptr<fake_ledger> ledger = std::make_shared<fake_ledger>();
  std::shared_ptr<fake_ws_log> ws = std::make_shared<fake_ws_log>();
  std::shared_ptr<sub_log> subs = std::make_shared<sub_log>();
  std::shared_ptr<std::vector<feed_failure>> failures
    = std::make_shared<std::vector<feed_failure>>();
  feed_watcher_actor w;
};

std::size_t idx(reset_cause c) {
  return static_cast<std::size_t>(c);
}

std::size_t idx(drain_error_reason r) {
  return static_cast<std::size_t>(r);
}

} // namespace

TEST_F(FeedPoison, ADeepEventBetweenTwoOrdinaryOnesIsOneUndeliverableReset) {
  // Metadata nested deeper than the client's parser accepts, published
  // between two ordinary events. Before, nothing at all was delivered --
  // not even event 1 of the same page -- and drain_errors stayed 0.
  ledger->append_to(3);
  ledger->raw_events[2]
    = R"({"id":2,"subject":"deep","kind":"k","metadata":)" + deep(100) + "}";
  start(false);
  EXPECT_EQ(got(), (std::vector<std::string>{"e1", "r:undeliverable", "e3"}));
  auto rs = subs->resets();
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0]->mode, feed_mode::ledger);
  EXPECT_EQ(rs[0]->event_id, 2);
  EXPECT_EQ(rs[0]->lost_from, 1);
  EXPECT_EQ(rs[0]->lost_to, 2);
  EXPECT_EQ(rs[0]->from_cursor, 1);
  EXPECT_EQ(rs[0]->to_cursor, 2);
  EXPECT_EQ(rs[0]->reason.rfind("unparseable: ", 0), 0u) << rs[0]->reason;
  auto s = stats();
  EXPECT_EQ(s.cursor, 3);
  EXPECT_EQ(s.resets_by_cause[idx(reset_cause::undeliverable)], 1u);
  EXPECT_GE(s.drain_errors_by_reason[idx(drain_error_reason::unparseable)], 1u);
  EXPECT_EQ(s.drain_errors,
            s.drain_errors_by_reason[idx(drain_error_reason::unparseable)]);
  EXPECT_EQ(s.replay_errors, 0u);
  EXPECT_TRUE(s.reached);
  // Each unreadable page was reported as it happened.
  ASSERT_FALSE(failures->empty());
  EXPECT_EQ(failures->front().source, "page");
  EXPECT_EQ(failures->front().kind, "unparseable");
  EXPECT_EQ(failures->front().status, 200);
  EXPECT_FALSE(failures->front().request_id.empty());
  // The feed goes on past it.
  ledger->append_to(5);
  advance_by(30s);
  EXPECT_EQ(got(), (std::vector<std::string>{"e1", "r:undeliverable", "e3",
                                             "e4", "e5"}));
}

TEST_F(FeedPoison, AnEventOverTheReplayCapIsOneUndeliverableReset) {
  // The watcher's own replay cap (feed_config::replay_max_response_bytes);
  // before, an over-cap page was retried forever, silently.
  cfg.replay_max_response_bytes = 2000;
  ledger->append_to(6);
  ledger->raw_events[4]
    = R"({"id":4,"subject":")" + std::string(3000, 'x') + R"(","kind":"k"})";
  start(false);
  EXPECT_EQ(got(), (std::vector<std::string>{"e1", "e2", "e3",
                                             "r:undeliverable", "e5", "e6"}));
  auto rs = subs->resets();
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0]->event_id, 4);
  EXPECT_EQ(rs[0]->reason.rfind("over_cap: ", 0), 0u) << rs[0]->reason;
  auto s = stats();
  EXPECT_EQ(s.cursor, 6);
  EXPECT_GE(s.drain_errors_by_reason[idx(drain_error_reason::over_cap)], 1u);
  // Every replay request of the watcher carried the limit it asked for.
  for (auto& q : ledger->requests)
    EXPECT_GE(q.limit, 1);
}

TEST_F(FeedPoison, AReplayThatFailsIsCountedReportedAndBackedOff) {
  ledger->append_to(2);
  ledger->fail_next = 3;
  start(false);
  auto s = stats();
  EXPECT_EQ(s.replay_errors, 1u);
  EXPECT_FALSE(s.reached);
  ASSERT_EQ(failures->size(), 1u);
  EXPECT_EQ((*failures)[0].source, "replay");
  EXPECT_EQ((*failures)[0].kind, "server_error");
  EXPECT_EQ((*failures)[0].status, 503);
  EXPECT_FALSE((*failures)[0].request_id.empty());
  // Retried on the backoff (0.05, 0.1, 0.2 s), not only at the poll tick.
  advance_by(1s);
  EXPECT_EQ(subs->ids(), (ids{1, 2}));
  EXPECT_EQ(stats().replay_errors, 3u);
  EXPECT_TRUE(stats().reached);
}

TEST_F(FeedPoison,
       AWakeFloodForAnUnreachableCursorCostsTheBackoffNotACallPerWake) {
  // 10,000 wakes a second for 3 s, all announcing cursor 100, which the
  // replay never reaches (it holds 1..5). Before, every wake that found
  // the drain idle started a replay call.
  ledger->append_to(5);
  start();
  ws->last().open();
  run();
  auto before = ledger->requests.size();
  for (int ms = 0; ms < 3000; ++ms) {
    for (int i = 0; i < 10; ++i)
      ws->last().message(wake(100));
    advance_by(1ms);
  }
  auto calls = ledger->requests.size() - before;
  // The re-drain backoff of hyperdjango's ChangeFeedWatcher: 0.05, 0.1, 0.2,
  // 0.4, 0.8, 1.6 s ...
  // -- six re-drains in 3 s (one more for the wake that set the target).
  EXPECT_LE(calls, 8u);
  EXPECT_GE(calls, 5u);
  auto s = stats();
  EXPECT_GE(s.wakes_coalesced, 29990u);
  EXPECT_EQ(s.cursor, 5);
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3, 4, 5}));
}

TEST_F(FeedPoison, AFloodOfRisingUnreachableTargetsIsHeldToTheReDrainFloor) {
  ledger->append_to(5);
  start();
  ws->last().open();
  run();
  auto before = ledger->requests.size();
  int64_t c = 100;
  for (int ms = 0; ms < 1000; ++ms) {
    for (int i = 0; i < 10; ++i)
      ws->last().message(wake(++c));
    advance_by(1ms);
  }
  auto calls = ledger->requests.size() - before;
  // At most one replay call per 50 ms floor (plus the first).
  EXPECT_LE(calls, 1000u / 50u + 2u);
  EXPECT_GE(calls, 5u);
}

TEST_F(FeedPoison, RisingWakesThroughTheIntakeCostFewCallsAndFewMessages) {
  // The wake intake as on the io thread (ws_options::drop_text): 10,000
  // wakes a second for 3 s, each announcing a higher cursor that replay
  // never shows, arriving between every two actor messages -- during
  // drains and while timers are armed. Before, each drain ended with a
  // raise pending and read again at once, and every raised wake was an
  // actor message.
  ledger->append_to(5);
  start();
  ws->last().open();
  run();
  auto before = ledger->requests.size();
  int64_t c = 100;
  uint64_t forwarded = 0, sent = 0;
  for (int ms = 0; ms < 3000; ++ms) {
    for (int i = 0; i < 10; ++i) {
      ++sent;
      if (ws->last().wire_message(wake(++c)))
        ++forwarded;
      sched().try_run_once();
    }
    advance_by(1ms);
  }
  run();
  auto calls = ledger->requests.size() - before;
  // A raise restores the re-drain floor: at most one call per 50 ms, and
  // one immediate re-read.
  EXPECT_LE(calls, 3000u / 50u + 2u);
  EXPECT_GE(calls, 10u);
  // The gate absorbed all but a handful: the first raise of each drain
  // cycle at most.
  EXPECT_LE(forwarded, 3 * calls + 3) << "of " << sent;
  auto s = stats();
  EXPECT_EQ(s.cursor, 5);
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3, 4, 5}));
  // Every wake counted: seen by the drain or dropped at intake.
  ws->last().activity(); // reports the last dropped ones
  run();
  EXPECT_EQ(stats().wakes, sent);
}

TEST_F(FeedPoison, AnUnreadableCatchupFrameIsAnUndeliverableResetInOrder) {
  cfg.replay_path.clear();
  start();
  ws->last().open();
  run();
  ws->last().message(
    R"({"type":"hello","mode":"catchup","seq":0,"cursor":0,"resync":false,"epoch":"e1"})");
  ws->last().message(R"({"type":"event","subject":"a","kind":"k","seq":1})");
  ws->last().message(
    R"({"type":"event","subject":"a","kind":"k","seq":2,"metadata":)"
    + deep(100) + "}");
  ws->last().message(R"({"type":"event","subject":"a","kind":"k","seq":3})");
  run();
  auto g = got();
  // Event 1, the unreadable frame in its place, then event 3. Before, the
  // seq jump over it was a gap reset as well: two resets for one event.
  EXPECT_EQ(g, (std::vector<std::string>{"e#1", "r:undeliverable", "e#3"}));
  auto rs = subs->resets();
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0]->cause, reset_cause::undeliverable);
  EXPECT_EQ(rs[0]->mode, feed_mode::catchup);
  EXPECT_EQ(rs[0]->event_id, 2); // its seq, read from the text
  EXPECT_EQ(rs[0]->lost_from, 1);
  EXPECT_EQ(rs[0]->lost_to, 2);
  EXPECT_EQ(rs[0]->reason.rfind("unparseable: ", 0), 0u) << rs[0]->reason;
  auto s = stats();
  EXPECT_EQ(s.unreadable_frames, 1u);
  EXPECT_EQ(s.unreadable_frames_by_reason[static_cast<std::size_t>(
              frame_error_reason::too_deep)],
            1u);
  EXPECT_EQ(s.resets_by_cause[idx(reset_cause::undeliverable)], 1u);
}

TEST_F(FeedPoison, ACatchupFrameOverTheMemoryBoundIsAnUndeliverableReset) {
  // ws_max_frame_bytes 64 KiB: frames parse within 1 MiB (the rule of
  // HTTP bodies, json_memory_bound). A 64 KiB frame of `[0,0,...]` would
  // take about 1.5 MB.
  cfg.replay_path.clear();
  cfg.ws_max_frame_bytes = 64 * 1024;
  start();
  ws->last().open();
  run();
  std::string arr = "[0";
  while (arr.size() < 64 * 1024 - 100)
    arr += ",0";
  arr += "]";
  ws->last().message(
    R"({"type":"hello","mode":"catchup","seq":0,"cursor":0,"resync":false,"epoch":"e1"})");
  ws->last().message(R"({"type":"event","subject":"a","kind":"k","seq":1})");
  ws->last().message(
    R"({"type":"event","subject":"a","kind":"k","seq":2,"metadata":)" + arr
    + "}");
  ws->last().message(R"({"type":"event","subject":"a","kind":"k","seq":3})");
  run();
  EXPECT_EQ(got(), (std::vector<std::string>{"e#1", "r:undeliverable", "e#3"}));
  auto rs = subs->resets();
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0]->event_id, 2);
  EXPECT_NE(rs[0]->reason.find("memory bound"), std::string::npos)
    << rs[0]->reason;
  auto s = stats();
  EXPECT_EQ(s.unreadable_frames, 1u);
  EXPECT_EQ(s.unreadable_frames_by_reason[static_cast<std::size_t>(
              frame_error_reason::memory_bound)],
            1u);
}

TEST_F(FeedPoison, ADeepCatchupFrameWithinTheConfiguredDepthIsDelivered) {
  // The same frame as above (nested 100 deep), under json_max_depth 128.
  cfg.replay_path.clear();
  cfg.json_max_depth = 128;
  start();
  ws->last().open();
  run();
  ws->last().message(
    R"({"type":"hello","mode":"catchup","seq":0,"cursor":0,"resync":false,"epoch":"e1"})");
  ws->last().message(
    R"({"type":"event","subject":"a","kind":"k","seq":1,"metadata":)"
    + deep(100) + "}");
  run();
  EXPECT_EQ(got(), (std::vector<std::string>{"e#1"}));
  EXPECT_EQ(stats().unreadable_frames, 0u);
}

TEST_F(FeedPoison, AnUnreadableCatchupFrameWithoutASeqIsOneResetToo) {
  cfg.replay_path.clear();
  start();
  ws->last().open();
  run();
  ws->last().message(
    R"({"type":"hello","mode":"catchup","seq":0,"cursor":0,"resync":false,"epoch":"e1"})");
  ws->last().message(R"({"type":"event","subject":"a","kind":"k","seq":1})");
  ws->last().message("not json at all");
  ws->last().message(R"({"type":"event","subject":"a","kind":"k","seq":3})");
  ws->last().message(R"({"type":"event","subject":"a","kind":"k","seq":5})");
  run();
  // The undeliverable reset says (1, unknown]: the jump to 3 is part of
  // it, not a second reset; a later jump is a gap again.
  EXPECT_EQ(got(), (std::vector<std::string>{"e#1", "r:undeliverable", "e#3",
                                             "r:gap", "e#5"}));
  auto rs = subs->resets();
  ASSERT_EQ(rs.size(), 2u);
  EXPECT_EQ(rs[0]->lost_from, 1);
  EXPECT_FALSE(rs[0]->lost_to);
  EXPECT_FALSE(rs[0]->event_id);
}

TEST_F(FeedPoison,
       TwoDeepEventsAroundAReadableOneAreTwoResetsNamedFromTheirBodies) {
  // Each deep event's id is read from its unreadable page (the page's
  // first event): no probe, and the readable event 3 between them is
  // delivered.
  ledger->append_to(5);
  for (int id : {2, 4})
    ledger->raw_events[id] = R"({"id":)" + std::to_string(id)
                             + R"(,"subject":"deep","kind":"k","metadata":)"
                             + deep(100) + "}";
  start(false);
  EXPECT_EQ(got(), (std::vector<std::string>{"e1", "r:undeliverable", "e3",
                                             "r:undeliverable", "e5"}));
  auto rs = subs->resets();
  ASSERT_EQ(rs.size(), 2u);
  EXPECT_EQ(rs[0]->event_id, 2);
  EXPECT_EQ(rs[0]->from_cursor, 1);
  EXPECT_EQ(rs[1]->event_id, 4);
  EXPECT_EQ(rs[1]->from_cursor, 3);
  EXPECT_EQ(stats().cursor, 5);
}

TEST_F(FeedPoison, AnUnreadableFrameOfAnotherTypeDoesNotNameItsSeqAsAnEvent) {
  cfg.replay_path.clear();
  start();
  ws->last().open();
  run();
  ws->last().message(
    R"({"type":"hello","mode":"catchup","seq":0,"cursor":0,"resync":false,"epoch":"e1"})");
  ws->last().message(R"({"type":"event","subject":"a","kind":"k","seq":1})");
  // A garbled notice with a far seq: not event 1000, so neither a reset up
  // to 1000 nor the events before it dropped as already seen.
  ws->last().message(R"({"type":"notice","seq":1000,"metadata":)" + deep(100)
                     + "}");
  ws->last().message(R"({"type":"event","subject":"a","kind":"k","seq":2})");
  ws->last().message(R"({"type":"event","subject":"a","kind":"k","seq":3})");
  run();
  EXPECT_EQ(got(),
            (std::vector<std::string>{"e#1", "r:undeliverable", "e#2", "e#3"}));
  auto rs = subs->resets();
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_FALSE(rs[0]->event_id);
  EXPECT_FALSE(rs[0]->lost_to);
}

TEST_F(FeedPoison, AnUnreadableEphemeralFrameIsAnUndeliverableResetInOrder) {
  cfg.replay_path.clear();
  start();
  ws->last().open();
  run();
  ws->last().message(
    R"({"type":"hello","mode":"ephemeral","seq":0,"cursor":0,"resync":false,"epoch":"e1"})");
  ws->last().message(R"({"type":"event","subject":"a","kind":"k","seq":1})");
  ws->last().message("not json at all");
  ws->last().message(R"({"type":"event","subject":"a","kind":"k","seq":2})");
  run();
  EXPECT_EQ(got(), (std::vector<std::string>{"r:reconnect", "e#1",
                                             "r:undeliverable", "e#2"}));
  ASSERT_FALSE(failures->empty());
  EXPECT_EQ(failures->back().source, "frame");
}

/// The first 64 KiB of an event frame of `seq` whose metadata makes it
/// 9 MiB long: what a session hands over for a message over the cap.
std::string oversized_prefix(int64_t seq) {
  auto head = R"({"type":"event","subject":"a","kind":"k","seq":)"
              + std::to_string(seq) + R"(,"metadata":")";
  return head + std::string(64 * 1024 - head.size(), 'x');
}

TEST_F(FeedPoison,
       AnOversizedCatchupFrameIsOneUndeliverableResetOnTheSameSession) {
  // A message over ws_max_frame_bytes: the session discards it and hands
  // over its first bytes. Before, the session closed on it and the
  // watcher reconnected into the same frame, delivering nothing, forever.
  cfg.replay_path.clear();
  start();
  ws->last().open();
  run();
  ws->last().message(
    R"({"type":"hello","mode":"catchup","seq":0,"cursor":0,"resync":false,"epoch":"e1"})");
  ws->last().message(R"({"type":"event","subject":"a","kind":"k","seq":1})");
  ws->last().too_large(oversized_prefix(2), 9u * 1024u * 1024u);
  ws->last().message(R"({"type":"event","subject":"a","kind":"k","seq":3})");
  // The hub sends the same huge frame again: already reset, nothing lost.
  ws->last().too_large(oversized_prefix(2), 9u * 1024u * 1024u);
  ws->last().message(R"({"type":"event","subject":"a","kind":"k","seq":4})");
  run();
  EXPECT_EQ(got(),
            (std::vector<std::string>{"e#1", "r:undeliverable", "e#3", "e#4"}));
  auto rs = subs->resets();
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0]->cause, reset_cause::undeliverable);
  EXPECT_EQ(rs[0]->event_id, 2); // its seq, read from the prefix
  EXPECT_EQ(rs[0]->lost_from, 1);
  EXPECT_EQ(rs[0]->lost_to, 2);
  EXPECT_EQ(rs[0]->reason.rfind("over_cap: ", 0), 0u) << rs[0]->reason;
  EXPECT_NE(rs[0]->reason.find("9437184 bytes"), std::string::npos)
    << rs[0]->reason;
  auto s = stats();
  EXPECT_EQ(s.oversized_frames, 2u);
  EXPECT_EQ(s.unreadable_frames, 2u); // both, though the repeat lost nothing
  EXPECT_EQ(s.resets_by_cause[idx(reset_cause::undeliverable)], 1u);
  // One session throughout: no reconnect.
  EXPECT_EQ(ws->sessions.size(), 1u);
  EXPECT_FALSE(ws->last().closed);
  EXPECT_EQ(s.connects, 1u);
  EXPECT_EQ(s.reconnects, 0u);
  EXPECT_TRUE(s.connected);
  ASSERT_FALSE(failures->empty());
  EXPECT_EQ(failures->front().source, "frame");
  EXPECT_EQ(failures->front().kind, "over_cap");
}

TEST_F(FeedPoison,
       ASessionFailedOverAnEndlessOversizedFrameIsCountedAndRedialled) {
  // The session ends itself (1009) when an over-cap message announces more
  // than ws_max_discard_bytes or does not end within ws_discard_timeout:
  // the watcher counts it, reports over_cap and dials again.
  cfg.replay_path.clear();
  cfg.ws_max_discard_bytes = 32u * 1024u * 1024u;
  cfg.ws_discard_timeout = 2.5;
  start();
  EXPECT_EQ(ws->last().opts.max_discard_bytes, 32u * 1024u * 1024u);
  EXPECT_EQ(ws->last().opts.discard_timeout_ns, 2'500'000'000);
  ws->last().open();
  run();
  ws->last().message(
    R"({"type":"hello","mode":"catchup","seq":0,"cursor":0,"resync":false,"epoch":"e1"})");
  ws->last().refuse_too_large((uint64_t{1} << 62) - 1,
                              "message announces ... over max_discard_bytes");
  run();
  // Redialled on the reconnect backoff (at most 10 s).
  for (int i = 0; i < 110 && ws->sessions.size() < 2; ++i)
    advance_by(100ms);
  auto s = stats();
  EXPECT_EQ(s.oversized_frames, 1u);
  EXPECT_EQ(s.reconnects, 1u);
  EXPECT_EQ(ws->sessions.size(), 2u);
  ASSERT_FALSE(failures->empty());
  EXPECT_EQ(failures->back().source, "websocket");
  EXPECT_EQ(failures->back().kind, "over_cap");
  EXPECT_EQ(failures->back().reason, "too_large");
  // The fragment limit (size 0) is a too_large close too, but not an
  // oversized frame.
  ws->last().open();
  run();
  ws->last().refuse_too_large(0, "message exceeds 64 fragments");
  run();
  EXPECT_EQ(stats().oversized_frames, 1u);
  EXPECT_EQ(failures->back().kind, "service_unavailable");
}

/// A catchup hub as the watcher's sessions see it (the resume rule of
/// hub/catchup_ring.hpp): a subscribe with last_seq gets a resume hello and
/// (last_seq, head] replayed, one without gets a resync hello at the head
/// and nothing replayed. The session refuses every `huge` seq each time it
/// is sent (over ws_max_discard_bytes or past ws_discard_timeout): the
/// hub resends it after every redial, as long as last_seq is below it.
struct resending_hub {
  int64_t head = 0;
  std::set<int64_t> huge;
  /// What arrived of a refused message shows its seq from this refusal on
  /// (1-based; 0: always, INT_MAX: never).
  int seq_shows_from = 0;
  int refusals = 0;

  static std::string event(int64_t seq) {
    return R"({"type":"event","subject":"a","kind":"k","seq":)"
           + std::to_string(seq) + "}";
  }

  static std::optional<int64_t> last_seq_of(const std::string& subscribe) {
    auto v = boost::json::parse(subscribe).as_object().at("last_seq");
    if (v.is_null())
      return std::nullopt;
    return v.to_number<int64_t>();
  }

  /// Serves one session from its open: hello, then the replay; false if
  /// the session was refused on a huge seq.
  template <class Run>
  bool serve(fake_ws_record& s, Run run) {
    s.open();
    run();
    auto last = last_seq_of(s.sent.at(0));
    s.message(R"({"type":"hello","mode":"catchup","seq":)"
              + std::to_string(head) + R"(,"resync":)"
              + (last ? "false" : "true") + R"(,"epoch":"e1"})");
    if (!last) {
      run();
      return true;
    }
    for (auto seq = *last + 1; seq <= head; ++seq) {
      if (huge.count(seq) == 0) {
        s.message(event(seq));
        continue;
      }
      ++refusals;
      auto shows = seq_shows_from > 0 && refusals >= seq_shows_from;
      // Refused at the ceiling: maybe nothing of it arrived at all.
      s.refuse(shows ? oversized_prefix(seq) : std::string{},
               (uint64_t{1} << 40),
               "message announces 1099511627776 bytes, over "
               "max_discard_bytes (268435456)");
      run();
      return false;
    }
    run();
    return true;
  }
};

class FeedOverCap : public FeedPoison {
protected:
  FeedOverCap() {
    cfg.replay_path.clear();
    ws->answers_pings = true; // the keepalive never ends a session here
  }

  /// The first session: a first connect (resync at head 0), then live
  /// seqs 1 and 2, then seq 3 refused with `prefix` -- the hub then holds
  /// 1..5.
  void first_session(resending_hub& hub, std::string prefix) {
    ws->last().open();
    run();
    EXPECT_FALSE(resending_hub::last_seq_of(ws->last().sent.at(0)));
    ws->last().message(
      R"({"type":"hello","mode":"catchup","seq":0,"resync":true,"epoch":"e1"})");
    ws->last().message(resending_hub::event(1));
    ws->last().message(resending_hub::event(2));
    ++hub.refusals;
    ws->last().refuse(std::move(prefix), 9u * 1024u * 1024u,
                      "message of 9437184 announced bytes over "
                      "max_frame_bytes (8388608) did not end within 60000 "
                      "ms (65536 bytes of it read)");
    run();
    hub.head = 5;
  }

  /// Serves every redial until the watcher stops redialling (no new
  /// session within 30 s of virtual time), at most `max_sessions` in all.
  void serve_redials(resending_hub& hub, std::size_t max_sessions = 12) {
    for (;;) {
      auto n = ws->sessions.size();
      for (int i = 0; i < 300 && ws->sessions.size() == n; ++i)
        advance_by(100ms);
      if (ws->sessions.size() == n || n >= max_sessions)
        return;
      hub.serve(ws->last(), [this] { run(); });
    }
  }
};

TEST_F(FeedOverCap,
       ARefusedEventWhoseSeqShowsIsResetBeforeTheRedialAndNeverResent) {
  // Past the discard deadline the session hands over what it read of the
  // refused message (its seq shows) before it closes: one undeliverable
  // reset moves last_seq past it, so the redial resumes after it. Before,
  // the session closed with nothing: the watcher redialled at the same
  // last_seq, the hub resent the event, and the feed looped forever.
  resending_hub hub;
  hub.huge = {3};
  start();
  first_session(hub, oversized_prefix(3));
  serve_redials(hub);
  EXPECT_EQ(got(), (std::vector<std::string>{"r:resync", "e#1", "e#2",
                                             "r:undeliverable", "e#4", "e#5"}));
  auto rs = subs->resets();
  ASSERT_EQ(rs.size(), 2u);
  EXPECT_EQ(rs[1]->cause, reset_cause::undeliverable);
  EXPECT_EQ(rs[1]->event_id, 3);
  EXPECT_EQ(rs[1]->lost_from, 2);
  EXPECT_EQ(rs[1]->lost_to, 3);
  EXPECT_EQ(rs[1]->reason.rfind("over_cap: ", 0), 0u) << rs[1]->reason;
  ASSERT_EQ(ws->sessions.size(), 2u);
  EXPECT_EQ(resending_hub::last_seq_of(ws->sessions[1]->sent.at(0)), 3);
  EXPECT_EQ(hub.refusals, 1);
  auto s = stats();
  EXPECT_EQ(s.oversized_frames, 1u); // once, not for the event and the close
  EXPECT_EQ(s.reconnects, 1u);
  EXPECT_EQ(s.last_seq, 5);
  EXPECT_TRUE(s.connected);
}

TEST_F(FeedOverCap,
       ARefusedEventWithoutASeqIsSkippedByOneResyncAfterThreeRefusals) {
  // Refused at the ceiling before any of it arrived: its seq is unknown,
  // so no reset can name it, and the hub resends it after every redial.
  // The third refusal at the same last_seq makes the watcher subscribe
  // without last_seq: the hub resyncs at its head, and the hello's reset
  // covers every seq skipped -- the refused one and those after it.
  resending_hub hub;
  hub.huge = {3};
  hub.seq_shows_from = std::numeric_limits<int>::max();
  start();
  first_session(hub, "");
  serve_redials(hub);
  ASSERT_EQ(ws->sessions.size(), 4u) << "still redialling into the event";
  EXPECT_EQ(hub.refusals, feed_overcap_resync_after);
  for (std::size_t i = 1; i < 3; ++i)
    EXPECT_EQ(resending_hub::last_seq_of(ws->sessions[i]->sent.at(0)), 2);
  EXPECT_FALSE(resending_hub::last_seq_of(ws->sessions[3]->sent.at(0)));
  // Published after the resync: delivered.
  ws->last().message(resending_hub::event(6));
  run();
  EXPECT_EQ(got(), (std::vector<std::string>{"r:resync", "e#1", "e#2",
                                             "r:resync", "e#6"}));
  auto rs = subs->resets();
  ASSERT_EQ(rs.size(), 2u);
  EXPECT_EQ(rs[1]->cause, reset_cause::resync);
  EXPECT_EQ(rs[1]->last_seq, 2);
  EXPECT_EQ(rs[1]->new_seq, 5);
  EXPECT_EQ(rs[1]->lost_from, 2); // (2, 5]: seq 3 and everything to the head
  EXPECT_EQ(rs[1]->lost_to, 5);
  EXPECT_EQ(rs[1]->reason.rfind("over_cap: ", 0), 0u) << rs[1]->reason;
  auto s = stats();
  EXPECT_EQ(s.oversized_frames, 3u);
  EXPECT_EQ(s.reconnects, 3u);
  EXPECT_EQ(s.resets_by_cause[idx(reset_cause::undeliverable)], 0u);
  EXPECT_EQ(s.last_seq, 6);
  EXPECT_TRUE(s.connected);
  // The session after the resync is the feed's for good.
  advance_by(60s);
  EXPECT_EQ(ws->sessions.size(), 4u);
}

TEST_F(FeedOverCap, ARetryThatShowsTheSeqNeedsNoResync) {
  // The first two refusals read nothing of the message; the third read far
  // enough to show its seq: its undeliverable reset is the whole loss, and
  // the watcher resumes right after it instead of resyncing.
  resending_hub hub;
  hub.huge = {3};
  hub.seq_shows_from = 3;
  start();
  first_session(hub, "");
  serve_redials(hub);
  EXPECT_EQ(got(), (std::vector<std::string>{"r:resync", "e#1", "e#2",
                                             "r:undeliverable", "e#4", "e#5"}));
  ASSERT_EQ(ws->sessions.size(), 4u);
  EXPECT_EQ(resending_hub::last_seq_of(ws->sessions[3]->sent.at(0)), 3);
  auto rs = subs->resets();
  ASSERT_EQ(rs.size(), 2u);
  EXPECT_EQ(rs[1]->lost_from, 2);
  EXPECT_EQ(rs[1]->lost_to, 3);
  EXPECT_EQ(stats().oversized_frames, 3u);
}

TEST_F(FeedOverCap, AMessageWithinTheCapPastTheDeadlineIsResentWithoutAReset) {
  // A message within the cap that does not end in time (trickled a byte at
  // a time) ends the session with reason timeout: nothing of it is lost,
  // the hub resends it from last_seq after the redial.
  resending_hub hub;
  start();
  ws->last().open();
  run();
  ws->last().message(
    R"({"type":"hello","mode":"catchup","seq":0,"resync":true,"epoch":"e1"})");
  ws->last().message(resending_hub::event(1));
  ws->last().message(resending_hub::event(2));
  ws_event ev;
  ev.what = ws_event::kind::closed;
  ev.reason = ws_close_reason::timeout;
  ev.detail = "message of 100 announced bytes did not end within 60000 ms "
              "(40 bytes of it read)";
  ws->last().push(ev);
  run();
  hub.head = 5;
  serve_redials(hub);
  EXPECT_EQ(got(), (std::vector<std::string>{"r:resync", "e#1", "e#2", "e#3",
                                             "e#4", "e#5"}));
  ASSERT_EQ(ws->sessions.size(), 2u);
  EXPECT_EQ(resending_hub::last_seq_of(ws->sessions[1]->sent.at(0)), 2);
  auto s = stats();
  EXPECT_EQ(s.oversized_frames, 0u);
  EXPECT_EQ(s.reconnects, 1u);
  ASSERT_FALSE(failures->empty());
  EXPECT_EQ(failures->back().source, "websocket");
  EXPECT_EQ(failures->back().reason, "timeout");
}

TEST_F(FeedOverCap, ARefusalBeforeTheHelloIsParsedStillCountsItsStrike) {
  // A catchup hub sends the hello and the resent refused message back to
  // back: when one read holds both, the refused header fails the read and
  // the session never parses the hello. The strike is counted by the mode
  // of the last hello received (catchup), not by the session's (none):
  // the third refusal still resubscribes without last_seq. Before, no
  // strike was counted and the feed redialled into the message forever.
  resending_hub hub;
  start();
  first_session(hub, "");
  for (int i = 0; i < 6 && ws->sessions.size() < 8; ++i) {
    auto n = ws->sessions.size();
    for (int k = 0; k < 600 && ws->sessions.size() == n; ++k)
      advance_by(100ms);
    ASSERT_GT(ws->sessions.size(), n);
    auto& s = ws->last();
    s.open();
    run();
    if (!resending_hub::last_seq_of(s.sent.at(0))) {
      s.message(
        R"({"type":"hello","mode":"catchup","seq":5,"resync":true,"epoch":"e1"})");
      run();
      break;
    }
    // No hello: the refused header failed the read that held it too.
    s.refuse("", uint64_t{1} << 40, "over max_discard_bytes");
    run();
  }
  ASSERT_EQ(ws->sessions.size(), 4u);
  for (std::size_t i = 1; i < 3; ++i)
    EXPECT_EQ(resending_hub::last_seq_of(ws->sessions[i]->sent.at(0)), 2);
  EXPECT_FALSE(resending_hub::last_seq_of(ws->sessions[3]->sent.at(0)));
  auto rs = subs->resets();
  ASSERT_EQ(rs.size(), 2u);
  EXPECT_EQ(rs[1]->cause, reset_cause::resync);
  EXPECT_EQ(rs[1]->reason.rfind("over_cap: ", 0), 0u) << rs[1]->reason;
}

TEST_F(FeedOverCap, ARefusalThatShowedItsSeqIsNoStrike) {
  // Seq 3 is refused with its seq showing (reset, last_seq 3); seq 4 is
  // then refused without: three refusals of seq 4 are needed before the
  // resync, the close of seq 3 does not count as one of them.
  resending_hub hub;
  hub.huge = {3, 4};
  hub.seq_shows_from = std::numeric_limits<int>::max();
  start();
  first_session(hub, oversized_prefix(3));
  serve_redials(hub);
  ASSERT_EQ(ws->sessions.size(), 5u);
  for (std::size_t i = 1; i < 4; ++i)
    EXPECT_EQ(resending_hub::last_seq_of(ws->sessions[i]->sent.at(0)), 3);
  EXPECT_FALSE(resending_hub::last_seq_of(ws->sessions[4]->sent.at(0)));
  EXPECT_EQ(hub.refusals, 1 + feed_overcap_resync_after);
}

TEST_F(FeedOverCap, AResyncLostBeforeItsHelloIsRetried) {
  // The session that subscribed without last_seq ends before its hello:
  // the next one subscribes without last_seq again, and the hello's reset
  // still carries the over_cap reason.
  resending_hub hub;
  hub.huge = {3};
  hub.seq_shows_from = std::numeric_limits<int>::max();
  start();
  first_session(hub, "");
  for (int i = 0; i < 2; ++i) {
    auto n = ws->sessions.size();
    for (int k = 0; k < 600 && ws->sessions.size() == n; ++k)
      advance_by(100ms);
    ASSERT_GT(ws->sessions.size(), n);
    hub.serve(ws->last(), [this] { run(); });
  }
  // The fourth session subscribes without last_seq and is lost at once.
  auto n = ws->sessions.size();
  for (int k = 0; k < 600 && ws->sessions.size() == n; ++k)
    advance_by(100ms);
  ASSERT_EQ(ws->sessions.size(), 4u);
  ws->last().open();
  run();
  EXPECT_FALSE(resending_hub::last_seq_of(ws->last().sent.at(0)));
  ws->last().peer_close();
  run();
  serve_redials(hub);
  ASSERT_EQ(ws->sessions.size(), 5u);
  EXPECT_FALSE(resending_hub::last_seq_of(ws->sessions[4]->sent.at(0)));
  auto rs = subs->resets();
  ASSERT_EQ(rs.size(), 2u);
  EXPECT_EQ(rs[1]->cause, reset_cause::resync);
  EXPECT_EQ(rs[1]->reason.rfind("over_cap: ", 0), 0u) << rs[1]->reason;
}

TEST_F(FeedOverCap, ARefusedEphemeralEventIsResetAndNotLoopedOn) {
  // Ephemeral is never resent an event: the refused one gets its
  // undeliverable reset (end unknown), the redial its reconnect reset.
  start();
  ws->last().open();
  run();
  ws->last().message(
    R"({"type":"hello","mode":"ephemeral","seq":0,"epoch":"e1"})");
  ws->last().message(resending_hub::event(1));
  ws->last().refuse("", uint64_t{1} << 40, "over max_discard_bytes");
  run();
  for (int i = 0; i < 300 && ws->sessions.size() < 2; ++i)
    advance_by(100ms);
  ASSERT_EQ(ws->sessions.size(), 2u);
  ws->last().open();
  run();
  ws->last().message(
    R"({"type":"hello","mode":"ephemeral","seq":5,"epoch":"e1"})");
  ws->last().message(resending_hub::event(6));
  run();
  advance_by(60s);
  EXPECT_EQ(got(),
            (std::vector<std::string>{"r:reconnect", "e#1", "r:undeliverable",
                                      "r:reconnect", "e#6"}));
  EXPECT_EQ(ws->sessions.size(), 2u);
  EXPECT_EQ(stats().oversized_frames, 1u);
}

TEST_F(FeedPoison, AnOversizedEphemeralFrameWithoutASeqIsOneResetOfUnknownEnd) {
  cfg.replay_path.clear();
  start();
  ws->last().open();
  run();
  ws->last().message(
    R"({"type":"hello","mode":"ephemeral","seq":0,"cursor":0,"resync":false,"epoch":"e1"})");
  ws->last().message(R"({"type":"event","subject":"a","kind":"k","seq":1})");
  // Its prefix shows no seq (a huge field comes first).
  ws->last().too_large(R"({"type":"event","metadata":")"
                         + std::string(60000, 'x'),
                       20u * 1024u * 1024u);
  ws->last().message(R"({"type":"event","subject":"a","kind":"k","seq":3})");
  run();
  EXPECT_EQ(got(), (std::vector<std::string>{"r:reconnect", "e#1",
                                             "r:undeliverable", "e#3"}));
  auto rs = subs->resets();
  ASSERT_EQ(rs.size(), 2u);
  EXPECT_EQ(rs[1]->lost_from, 1);
  EXPECT_FALSE(rs[1]->lost_to);
  EXPECT_FALSE(rs[1]->event_id);
  EXPECT_EQ(rs[1]->reason.rfind("over_cap: ", 0), 0u) << rs[1]->reason;
  EXPECT_EQ(ws->sessions.size(), 1u);
  EXPECT_EQ(stats().reconnects, 0u);
}

TEST_F(FeedPoison, AnOversizedLedgerFrameIsAnUnreadableWakeNeverAReconnect) {
  // The ledger's WebSocket carries only hellos and wakes: an oversized one
  // is counted and taken for a wake without a hint; the drain runs as
  // before, the session stays.
  ledger->append_to(2);
  start();
  ws->last().open();
  run();
  EXPECT_EQ(subs->ids(), (ids{1, 2}));
  ledger->append_to(4);
  for (int i = 0; i < 5; ++i)
    ws->last().too_large(R"({"type":"wake","cursor":4,"pad":")"
                           + std::string(1000, 'x'),
                         9u * 1024u * 1024u);
  run();
  advance_by(1s);
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3, 4}));
  EXPECT_TRUE(subs->resets().empty());
  auto s = stats();
  EXPECT_EQ(s.oversized_frames, 5u);
  EXPECT_EQ(s.unreadable_frames, 0u);
  EXPECT_EQ(s.cursor, 4);
  EXPECT_EQ(ws->sessions.size(), 1u);
  EXPECT_FALSE(ws->last().closed);
  EXPECT_EQ(s.reconnects, 0u);
  ASSERT_FALSE(failures->empty());
  EXPECT_EQ(failures->back().source, "frame");
  EXPECT_EQ(failures->back().kind, "over_cap");
  // The poll tick still drains with no wake at all.
  ledger->append_to(5);
  advance_by(31s);
  EXPECT_EQ(subs->ids(), (ids{1, 2, 3, 4, 5}));
}

TEST_F(FeedPoison, ARefusedUpgradeIsReportedWithItsStatus) {
  cfg.replay_path.clear();
  start();
  ws_event ev;
  ev.what = ws_event::kind::closed;
  ev.reason = ws_close_reason::handshake;
  ev.detail = "upgrade refused: HTTP 401 instead of 101 Switching Protocols";
  ws->last().push(ev);
  run();
  ASSERT_EQ(failures->size(), 1u);
  EXPECT_EQ((*failures)[0].source, "websocket");
  EXPECT_EQ((*failures)[0].kind, "auth_error");
  EXPECT_EQ((*failures)[0].status, 401);
  EXPECT_EQ((*failures)[0].reason, "handshake");
  EXPECT_FALSE(stats().reached);
}
