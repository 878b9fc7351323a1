// Leader discovery (as tsoracle-client): worklist, hints, cache TTL and
// epoch guard, redirect caps, backoff, election ride-out, TLS downgrade
// guard, seq uncertainty. Pure, explicit time and randomness.

#include "actors/coalesce/leader_state.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

using namespace outbound;
using std::chrono::milliseconds;
using std::chrono::seconds;

namespace {

const coalesce_time t0 = coalesce_time{} + std::chrono::hours(1);

const std::string A = "http://127.0.0.1:7001";
const std::string B = "http://127.0.0.1:7002";
const std::string C = "http://127.0.0.1:7003";

coalesce_config three() {
  coalesce_config c;
  c.endpoints = {"127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"};
  return c;
}

/// Advances the rotation until the next pass starts at endpoints()[want].
void align(leader_state& ls, std::size_t want) {
  while (ls.offset() != want)
    ls.begin_pass(t0 - std::chrono::hours(1)); // no leader that long ago
}

attempt_report ok(std::optional<uint64_t> epoch) {
  attempt_report r;
  r.cls = attempt_class::success;
  r.epoch = epoch;
  return r;
}

attempt_report not_leader(std::optional<std::string> hint) {
  attempt_report r;
  r.cls = attempt_class::not_leader;
  r.hint = std::move(hint);
  return r;
}

attempt_report of(attempt_class c) {
  attempt_report r;
  r.cls = c;
  return r;
}

std::string hint_to(const std::string& key, uint64_t epoch) {
  // The wire form: a bare host:port, as the hub sends it.
  return key.substr(key.find("://") + 3) + "; epoch=" + std::to_string(epoch);
}

using server_fn
  = std::function<attempt_report(const std::string&, coalesce_time)>;

struct run {
  discovery_action last;
  std::vector<std::string> sends;
  std::vector<coalesce_duration> waits;
  std::vector<coalesce_duration> budgets;
  coalesce_time end{};
};

/// Drives one RPC's discovery against a scripted cluster: each send takes
/// `latency`, each wait takes its delay.
run drive(leader_state& ls, discovery_call& call, coalesce_time now,
          coalesce_rng& rng, const server_fn& server,
          coalesce_duration latency = milliseconds(1)) {
  run r;
  auto a = call.start(ls, now, rng);
  for (int guard = 0; guard < 10000; ++guard) {
    if (a.step == discovery_step::send) {
      r.sends.push_back(a.endpoint);
      r.budgets.push_back(a.budget);
      auto rep = server(a.endpoint, now);
      now += latency;
      a = call.on_result(ls, rep, now, rng);
    } else if (a.step == discovery_step::wait) {
      r.waits.push_back(a.delay);
      now += a.delay;
      a = call.resume(ls, now, rng);
    } else {
      break;
    }
  }
  r.last = a;
  r.end = now;
  return r;
}

} // namespace

TEST(LeaderWorklist, CachedLeaderFirstThenConfiguredRotatedEachOnce) {
  coalesce_rng rng{3};
  leader_state ls{three(), rng};
  // The first worklist is the configured order (the operator puts the
  // most-likely leader first).
  EXPECT_EQ(ls.offset(), 0u);
  EXPECT_EQ(ls.begin_pass(t0), (std::vector<std::string>{A, B, C}));
  EXPECT_EQ(ls.begin_pass(t0), (std::vector<std::string>{B, C, A}));
  EXPECT_EQ(ls.begin_pass(t0), (std::vector<std::string>{C, A, B}));
  EXPECT_EQ(ls.seat(B, 4, seat_source::success, t0), seat_decision::seated);
  EXPECT_EQ(ls.begin_pass(t0), (std::vector<std::string>{B, A, C}));
  EXPECT_EQ(ls.begin_pass(t0), (std::vector<std::string>{B, C, A}));
  // Whatever the seed, the first worklist is the configured order.
  for (uint64_t seed = 0; seed < 32; ++seed) {
    coalesce_rng r{seed};
    leader_state fresh{three(), r};
    EXPECT_EQ(fresh.begin_pass(t0), (std::vector<std::string>{A, B, C}));
  }
}

// A pass that starts with a cached leader lists only the leader until
// something other than its success needs the rest: the endpoints tried
// after a failing leader are still exactly begin_pass's order, for a
// configured and for a hinted leader, from every rotation offset, and a
// hint that arrives from the leader still goes first.
TEST(LeaderWorklist, AfterAFailingLeaderTheRestFollowsTheWorklistOrder) {
  const std::string H = "http://127.0.0.1:7009"; // known from a hint only
  for (const auto& leader : {A, B, C, H}) {
    for (std::size_t offset = 0; offset < 3; ++offset) {
      for (auto cls : {attempt_class::unexpected_status, attempt_class::busy,
                       attempt_class::not_leader}) {
        coalesce_rng rng{7};
        leader_state ls{three(), rng};
        align(ls, offset);
        if (leader == H)
          ls.note_hinted(H);
        ASSERT_EQ(ls.seat(leader, 2, seat_source::success, t0),
                  seat_decision::seated);
        // The order begin_pass gives, on a copy at the same state.
        leader_state twin = ls;
        auto expected = twin.begin_pass(t0);
        ASSERT_EQ(expected.front(), leader);
        discovery_call call{ls, false, t0};
        auto r
          = drive(ls, call, t0, rng, [&](const std::string& ep, coalesce_time) {
              if (ep == expected.back())
                return ok(2);
              return cls == attempt_class::not_leader ? not_leader(std::nullopt)
                                                      : of(cls);
            });
        EXPECT_EQ(r.last.step, discovery_step::succeeded);
        EXPECT_EQ(r.sends, expected) << "leader " << leader << " offset "
                                     << offset << " " << to_string(cls);
        EXPECT_EQ(ls.offset(), twin.offset());
      }
      // The failing leader hints at the last endpoint of the pass: it goes
      // next, before the rest.
      coalesce_rng rng{7};
      leader_state ls{three(), rng};
      align(ls, offset);
      if (leader == H)
        ls.note_hinted(H);
      ls.seat(leader, 2, seat_source::success, t0);
      leader_state twin = ls;
      auto order = twin.begin_pass(t0);
      const auto target = order.back();
      discovery_call call{ls, false, t0};
      auto r
        = drive(ls, call, t0, rng, [&](const std::string& ep, coalesce_time) {
            if (ep == target)
              return ok(3);
            return not_leader(hint_to(target, 3));
          });
      EXPECT_EQ(r.last.step, discovery_step::succeeded);
      if (leader == target) {
        EXPECT_EQ(r.sends, (std::vector<std::string>{leader}));
      } else {
        EXPECT_EQ(r.sends, (std::vector<std::string>{leader, target}))
          << "leader " << leader << " offset " << offset;
      }
    }
  }
}

TEST(LeaderCache, TtlExpiresWithoutSuccessAndEverySuccessRefreshesIt) {
  coalesce_rng rng{1};
  leader_state ls{three(), rng};
  ASSERT_EQ(ls.seat(B, 2, seat_source::success, t0), seat_decision::seated);
  ASSERT_TRUE(ls.leader(t0 + milliseconds(29999)));
  EXPECT_FALSE(ls.leader(t0 + seconds(30)));
  // Refreshed at 20 s: fresh until 50 s.
  EXPECT_EQ(ls.seat(B, 2, seat_source::success, t0 + seconds(20)),
            seat_decision::refreshed);
  EXPECT_TRUE(ls.leader(t0 + milliseconds(49999)));
  EXPECT_FALSE(ls.leader(t0 + seconds(50)));
  // Expired: the next pass starts from the configured list, and anyone
  // may be seated (even with a lower epoch).
  align(ls, 0);
  EXPECT_EQ(ls.begin_pass(t0 + seconds(50)),
            (std::vector<std::string>{A, B, C}));
  EXPECT_EQ(ls.seat(C, 1, seat_source::success, t0 + seconds(50)),
            seat_decision::seated);
  EXPECT_EQ(ls.leader(t0 + seconds(50))->endpoint, C);
}

// A hint naming the cached leader only raises its epoch; the leader's own
// success sets it, lower too (its cluster restarted, epochs begin again:
// kept at the old height, the next real leader's answers would read as a
// deposed leader's); nothing clears it.
TEST(LeaderCache, RefreshTakesTheLeadersOwnEpochAndAHintOnlyRaisesIt) {
  coalesce_rng rng{1};
  leader_state ls{three(), rng};
  ls.seat(A, 5, seat_source::success, t0);
  ls.seat(A, 3, seat_source::hint, t0);
  EXPECT_EQ(ls.leader(t0)->epoch, 5u);
  ls.seat(A, 7, seat_source::hint, t0);
  EXPECT_EQ(ls.leader(t0)->epoch, 7u);
  ls.seat(A, 3, seat_source::success, t0);
  EXPECT_EQ(ls.leader(t0)->epoch, 3u);
  ls.seat(A, std::nullopt, seat_source::success, t0);
  EXPECT_EQ(ls.leader(t0)->epoch, 3u);
  // B at epoch 4 now replaces A (4 >= 3).
  EXPECT_EQ(ls.seat(B, 4, seat_source::success, t0), seat_decision::replaced);
}

TEST(LeaderCache, EpochGuardOverASequenceOfHints) {
  coalesce_rng rng{1};
  leader_state ls{three(), rng};
  auto apply = [&](const std::string& from, const std::string& hint) {
    auto hc = ls.check_hint(&hint, from, t0);
    if (hc.verdict == hint_verdict::usable)
      ls.seat(hc.endpoint, hc.epoch, seat_source::hint, t0);
    return hc.verdict;
  };
  EXPECT_EQ(apply(A, hint_to(B, 5)), hint_verdict::usable);
  EXPECT_EQ(ls.leader(t0)->endpoint, B);
  EXPECT_EQ(apply(B, hint_to(C, 3)), hint_verdict::stale_epoch);
  EXPECT_EQ(ls.leader(t0)->endpoint, B);
  EXPECT_EQ(apply(A, hint_to(C, 4)), hint_verdict::stale_epoch);
  EXPECT_EQ(apply(A, hint_to(C, 5)), hint_verdict::usable); // equal: accepted
  EXPECT_EQ(ls.leader(t0)->endpoint, C);
  EXPECT_EQ(apply(A, hint_to(B, 6)), hint_verdict::usable);
  EXPECT_EQ(ls.leader(t0)->endpoint, B);
  EXPECT_EQ(ls.leader(t0)->epoch, 6u);
  EXPECT_EQ(apply(C, hint_to(C, 9)), hint_verdict::self_reference);
  EXPECT_EQ(apply(A, hint_to(A, 9)), hint_verdict::self_reference);
  // Without an epoch: a configured endpoint is accepted, an unknown one not.
  std::string unknown = "10.9.9.9:1";
  EXPECT_EQ(apply(A, unknown), hint_verdict::rejected_no_epoch);
  EXPECT_EQ(apply(A, "127.0.0.1:7003"), hint_verdict::usable);
  EXPECT_EQ(ls.leader(t0)->endpoint, C);
  EXPECT_EQ(ls.stats().stale_hints, 2u);
  // Success without an epoch never replaces a cached leader with one.
  ls.seat(A, 8, seat_source::success, t0);
  EXPECT_EQ(ls.seat(B, std::nullopt, seat_source::success, t0),
            seat_decision::rejected_no_epoch);
  EXPECT_EQ(ls.seat(B, 7, seat_source::success, t0),
            seat_decision::rejected_stale_epoch);
  EXPECT_EQ(ls.leader(t0)->endpoint, A);
}

// Hints with epochs 1..5 applied in every order: the cache ends on the
// highest epoch, whatever the order (a delayed lower-epoch hint never wins).
TEST(LeaderCache, HintsInEveryOrderEndOnTheHighestEpoch) {
  coalesce_config cfg;
  for (int i = 1; i <= 5; ++i)
    cfg.endpoints.push_back("127.0.0.1:" + std::to_string(7000 + i));
  std::vector<int> order{1, 2, 3, 4, 5};
  int perms = 0;
  do {
    coalesce_rng rng{1};
    leader_state ls{cfg, rng};
    for (int e : order) {
      std::string h = "127.0.0.1:" + std::to_string(7000 + e)
                      + "; epoch=" + std::to_string(e);
      auto hc = ls.check_hint(&h, "http://127.0.0.1:9", t0);
      if (hc.verdict == hint_verdict::usable)
        ls.seat(hc.endpoint, hc.epoch, seat_source::hint, t0);
    }
    ASSERT_TRUE(ls.leader(t0));
    EXPECT_EQ(ls.leader(t0)->endpoint, "http://127.0.0.1:7005");
    EXPECT_EQ(ls.leader(t0)->epoch, 5u);
    ++perms;
  } while (std::next_permutation(order.begin(), order.end()));
  EXPECT_EQ(perms, 120);
}

TEST(LeaderDiscovery, AHintedEndpointMovesToTheFrontWithoutBackoff) {
  coalesce_rng rng{5};
  leader_state ls{three(), rng};
  align(ls, 0);
  discovery_call call{ls, false, t0};
  auto r = drive(ls, call, t0, rng, [](const std::string& ep, coalesce_time) {
    return ep == C ? ok(2) : not_leader(hint_to(C, 2));
  });
  EXPECT_EQ(r.last.step, discovery_step::succeeded);
  EXPECT_EQ(r.last.endpoint, C);
  EXPECT_EQ(r.sends, (std::vector<std::string>{A, C}));
  EXPECT_TRUE(r.waits.empty());
  EXPECT_EQ(call.redirects(), 1);
  EXPECT_EQ(ls.leader(r.end)->endpoint, C);
  EXPECT_EQ(ls.leader(r.end)->epoch, 2u);
  // The next RPC goes straight to the cached leader.
  discovery_call next{ls, false, r.end};
  auto r2
    = drive(ls, next, r.end, rng, [](const std::string& ep, coalesce_time) {
        return ep == C ? ok(2) : of(attempt_class::fatal);
      });
  EXPECT_EQ(r2.sends, (std::vector<std::string>{C}));
}

// Every leader, every start offset, followers with and without hints and
// with a stale view (pointing at the old leader, lower epoch): the RPC
// always reaches the leader, never sends to an endpoint twice in a pass,
// and the cache ends on the leader with its epoch.
TEST(LeaderDiscovery, LeaderIsFoundFromEveryOrderOfHints) {
  const std::vector<std::string> all{A, B, C};
  int runs = 0;
  for (auto& leader : all) {
    for (auto& old : all) {
      for (std::size_t start = 0; start < 3; ++start) {
        for (int mode = 0; mode < 3; ++mode) {
          coalesce_rng rng{static_cast<uint64_t>(runs)};
          leader_state ls{three(), rng};
          align(ls, start);
          discovery_call call{ls, false, t0};
          auto r = drive(ls, call, t0, rng,
                         [&](const std::string& ep, coalesce_time) {
                           if (ep == leader)
                             return ok(2);
                           if (mode == 0)
                             return not_leader(hint_to(leader, 2));
                           if (mode == 1)
                             return not_leader(std::nullopt);
                           // mode 2: the old leader knows; others are stale.
                           if (ep == old)
                             return not_leader(hint_to(leader, 2));
                           return not_leader(hint_to(old, 1));
                         });
          ASSERT_EQ(r.last.step, discovery_step::succeeded)
            << leader << " " << old << " " << start << " " << mode;
          EXPECT_EQ(r.last.endpoint, leader);
          std::set<std::string> distinct(r.sends.begin(), r.sends.end());
          EXPECT_EQ(distinct.size(), r.sends.size());
          EXPECT_LE(r.sends.size(), mode == 0 ? 2u : 3u);
          EXPECT_TRUE(r.waits.empty());
          EXPECT_EQ(ls.leader(r.end)->endpoint, leader);
          EXPECT_EQ(ls.leader(r.end)->epoch, 2u);
          // A stale hint afterwards never moves the cache back.
          std::string stale = hint_to(old == leader ? A : old, 1);
          if (old != leader) {
            EXPECT_EQ(
              ls.check_hint(&stale, "http://127.0.0.1:9", r.end).verdict,
              hint_verdict::stale_epoch);
          }
          ++runs;
        }
      }
    }
  }
  EXPECT_EQ(runs, 81);
}

TEST(LeaderDiscovery, NotLeaderWithoutHintMovesOnAndLeavesTheCacheAlone) {
  coalesce_rng rng{5};
  leader_state ls{three(), rng};
  ls.seat(B, 3, seat_source::success, t0);
  discovery_call call{ls, false, t0};
  auto a = call.start(ls, t0, rng);
  ASSERT_EQ(a.step, discovery_step::send);
  EXPECT_EQ(a.endpoint, B); // the cached leader first
  a = call.on_result(ls, not_leader(std::nullopt), t0, rng);
  ASSERT_EQ(a.step, discovery_step::send); // no backoff
  EXPECT_NE(a.endpoint, B);
  EXPECT_EQ(ls.leader(t0)->endpoint, B);
  a = call.on_result(ls, not_leader("garbage;;"), t0, rng);
  ASSERT_EQ(a.step, discovery_step::send);
  EXPECT_EQ(ls.leader(t0)->endpoint, B);
  EXPECT_EQ(ls.stats().malformed_hints, 1u);
}

TEST(LeaderDiscovery, BackoffOnlyAfterTransportClassFailures) {
  coalesce_rng rng{9};
  auto cfg = three();
  cfg.retry.max_attempts = 10;
  leader_state ls{cfg, rng};
  align(ls, 0);
  discovery_call call{ls, false, t0};
  int calls = 0;
  auto r = drive(ls, call, t0, rng, [&](const std::string& ep, coalesce_time) {
    ++calls;
    if (ep == A)
      return of(attempt_class::refused);
    if (ep == B)
      return of(attempt_class::lost);
    return ok(1);
  });
  EXPECT_EQ(r.last.step, discovery_step::succeeded);
  EXPECT_EQ(r.sends, (std::vector<std::string>{A, B, C}));
  ASSERT_EQ(r.waits.size(), 2u);
  EXPECT_LE(r.waits[0], milliseconds(50));  // [0, base·2^0]
  EXPECT_LE(r.waits[1], milliseconds(100)); // [0, base·2^1]
  // 5xx (non-transport) and 421: no wait.
  coalesce_rng rng2{9};
  leader_state ls2{cfg, rng2};
  align(ls2, 0);
  discovery_call call2{ls2, false, t0};
  auto r2
    = drive(ls2, call2, t0, rng2, [&](const std::string& ep, coalesce_time) {
        if (ep == A)
          return of(attempt_class::server_error);
        if (ep == B)
          return not_leader(std::nullopt);
        return ok(1);
      });
  EXPECT_EQ(r2.last.step, discovery_step::succeeded);
  EXPECT_TRUE(r2.waits.empty());
}

TEST(LeaderDiscovery, TransportOnlyPassFailsFastAsUnreachable) {
  coalesce_rng rng{2};
  leader_state ls{three(), rng};
  discovery_call call{ls, false, t0};
  auto r = drive(ls, call, t0, rng, [](const std::string&, coalesce_time) {
    return of(attempt_class::refused);
  });
  EXPECT_EQ(r.last.step, discovery_step::failed);
  EXPECT_EQ(r.last.error, discovery_error::unreachable);
  EXPECT_EQ(r.sends.size(), 3u); // each endpoint once, no ride-out
  EXPECT_EQ(r.waits.size(), 2u); // between the three attempts
  EXPECT_EQ(call.passes(), 0);
  EXPECT_FALSE(ls.leader(r.end));
}

TEST(LeaderDiscovery, ServerErrorOutranksTransportInTheSurfacedError) {
  coalesce_rng rng{2};
  leader_state ls{three(), rng};
  align(ls, 0);
  discovery_call call{ls, false, t0};
  auto r = drive(ls, call, t0, rng, [](const std::string& ep, coalesce_time) {
    return ep == B ? of(attempt_class::server_error)
                   : of(attempt_class::refused);
  });
  EXPECT_EQ(r.last.error, discovery_error::server_error);
  EXPECT_NE(r.last.detail.find(B), std::string::npos);
}

TEST(LeaderDiscovery, DefinitiveRejectionsEndTheRpcAtOnce) {
  coalesce_rng rng{2};
  leader_state ls{three(), rng};
  discovery_call call{ls, false, t0};
  auto r = drive(ls, call, t0, rng, [](const std::string&, coalesce_time) {
    return of(attempt_class::rejected);
  });
  EXPECT_EQ(r.last.error, discovery_error::rejected);
  EXPECT_EQ(r.sends.size(), 1u);
  discovery_call call2{ls, false, t0};
  auto r2 = drive(ls, call2, t0, rng, [](const std::string&, coalesce_time) {
    return of(attempt_class::fatal);
  });
  EXPECT_EQ(r2.last.error, discovery_error::fatal);
  EXPECT_EQ(r2.sends.size(), 1u);
  // 501: the oracle does not serve the RPC; final at the first call, for
  // ts and seq alike, and it committed nothing.
  for (bool seq : {false, true}) {
    discovery_call call3{ls, seq, t0};
    auto r3 = drive(ls, call3, t0, rng, [](const std::string&, coalesce_time) {
      return of(attempt_class::not_supported);
    });
    EXPECT_EQ(r3.last.error, discovery_error::not_supported) << seq;
    EXPECT_EQ(r3.sends.size(), 1u) << seq;
    EXPECT_TRUE(r3.last.nothing_committed) << seq;
  }
}

// Any other error from one endpoint — a TLS handshake failure, a reset, an
// unexpected status, a server error, a 2xx the client cannot use — moves on
// to the next endpoint; the RPC fails only when the worklist is exhausted,
// with the last error (tsoracle client docs: "Any other error — try the
// next endpoint").
TEST(LeaderDiscovery, AnyOtherErrorMovesOnToTheNextEndpoint) {
  for (auto cls :
       {attempt_class::handshake_failed, attempt_class::lost,
        attempt_class::unexpected_status, attempt_class::server_error,
        attempt_class::busy, attempt_class::fatal_after_send}) {
    coalesce_rng rng{5};
    leader_state ls{three(), rng};
    discovery_call call{ls, false, t0};
    auto r
      = drive(ls, call, t0, rng, [&](const std::string& ep, coalesce_time) {
          return ep == C ? ok(1) : of(cls);
        });
    EXPECT_EQ(r.last.step, discovery_step::succeeded) << to_string(cls);
    EXPECT_EQ(r.sends, (std::vector<std::string>{A, B, C})) << to_string(cls);
  }
}

TEST(LeaderDiscovery, AnExhaustedWorklistFailsWithTheLastErrorAndItsCause) {
  coalesce_rng rng{5};
  leader_state ls{three(), rng};
  discovery_call call{ls, false, t0};
  auto r = drive(ls, call, t0, rng, [](const std::string& ep, coalesce_time) {
    attempt_report rep;
    if (ep == C) {
      rep.cls = attempt_class::handshake_failed;
      rep.cause = transport_error_kind::tls;
      rep.detail = "certificate verify failed";
    } else {
      rep.cls = attempt_class::unexpected_status;
      rep.detail = "status 404";
    }
    return rep;
  });
  EXPECT_EQ(r.sends, (std::vector<std::string>{A, B, C}));
  EXPECT_EQ(r.last.step, discovery_step::failed);
  EXPECT_EQ(r.last.error, discovery_error::fatal);
  EXPECT_EQ(r.last.cause, transport_error_kind::tls);
  EXPECT_NE(r.last.detail.find(C), std::string::npos);
  // The last an unexpected status: rejected (a request_error), no cause.
  discovery_call call2{ls, false, t0};
  auto r2 = drive(ls, call2, t0, rng, [](const std::string&, coalesce_time) {
    attempt_report rep;
    rep.cls = attempt_class::unexpected_status;
    rep.detail = "status 404";
    return rep;
  });
  EXPECT_EQ(r2.sends.size(), 3u);
  EXPECT_EQ(r2.last.error, discovery_error::rejected);
  EXPECT_EQ(r2.last.cause, transport_error_kind::none);
}

TEST(LeaderDiscovery, AnElectionIsRiddenOutWithinTheDeadline) {
  coalesce_rng rng{4};
  leader_state ls{three(), rng};
  ls.seat(A, 1, seat_source::success, t0);
  discovery_call call{ls, false, t0};
  // The election lasts 700 ms: every node answers 421 without a hint, then
  // B leads with epoch 2 and the others hint at it.
  auto elected = t0 + milliseconds(700);
  auto r
    = drive(ls, call, t0, rng, [&](const std::string& ep, coalesce_time now) {
        if (now < elected)
          return not_leader(std::nullopt);
        return ep == B ? ok(2) : not_leader(hint_to(B, 2));
      });
  ASSERT_EQ(r.last.step, discovery_step::succeeded);
  EXPECT_EQ(r.last.endpoint, B);
  EXPECT_GE(call.passes(), 1);
  EXPECT_FALSE(r.waits.empty());
  EXPECT_LT(r.end, call.deadline());
  EXPECT_EQ(ls.leader(r.end)->endpoint, B);
}

TEST(LeaderDiscovery, AnEndlessElectionEndsAsNoLeaderAtTheDeadline) {
  coalesce_rng rng{4};
  leader_state ls{three(), rng};
  discovery_call call{ls, false, t0};
  auto r = drive(ls, call, t0, rng, [](const std::string&, coalesce_time) {
    return not_leader(std::nullopt);
  });
  EXPECT_EQ(r.last.step, discovery_step::failed);
  EXPECT_EQ(r.last.error, discovery_error::no_leader);
  // Never short of the deadline; past it only by the scripted latency of
  // the sends in flight when it ran out.
  EXPECT_GE(r.end, call.deadline());
  EXPECT_LE(r.end, call.deadline() + milliseconds(3));
  for (auto& b : r.budgets)
    EXPECT_LE(b, seconds(2));
}

TEST(LeaderDiscovery, TheBudgetOfAnAttemptIsTheSmallerOfPerAttemptAndLeft) {
  coalesce_rng rng{4};
  auto cfg = three();
  cfg.retry.overall = 3.0;
  leader_state ls{cfg, rng};
  discovery_call call{ls, false, t0};
  auto r = drive(
    ls, call, t0, rng,
    [](const std::string&, coalesce_time) {
      return of(attempt_class::server_error);
    },
    milliseconds(1500));
  ASSERT_EQ(r.budgets.size(), 2u);
  EXPECT_EQ(r.budgets[0], seconds(2));
  EXPECT_EQ(r.budgets[1], milliseconds(1500));
  EXPECT_EQ(r.last.error, discovery_error::server_error);
}

TEST(LeaderDiscovery, RedirectCapsPerPassAndPerCallEndInTypedErrors) {
  coalesce_config cfg;
  for (int i = 0; i < 6; ++i)
    cfg.endpoints.push_back("127.0.0.1:" + std::to_string(7100 + i));
  cfg.max_redirects_per_pass = 2;
  cfg.max_redirects_per_call = 3;
  coalesce_rng rng{8};
  leader_state ls{cfg, rng};
  align(ls, 0);
  discovery_call call{ls, false, t0};
  uint64_t epoch = 1;
  // Every node points at the next one, with ever newer epochs.
  auto r = drive(ls, call, t0, rng, [&](const std::string& ep, coalesce_time) {
    int port = std::stoi(ep.substr(ep.rfind(':') + 1));
    int nxt = 7100 + (port - 7100 + 1) % 6;
    return not_leader("127.0.0.1:" + std::to_string(nxt)
                      + "; epoch=" + std::to_string(epoch++));
  });
  EXPECT_EQ(r.last.step, discovery_step::failed);
  EXPECT_EQ(r.last.error, discovery_error::redirect_cap);
  // Pass 1: 3 sends (2 redirects followed, the 3rd hits the pass cap →
  // ride out); pass 2: 1 send whose redirect is the call's 4th.
  EXPECT_EQ(r.waits.size(), 1u);
  EXPECT_EQ(r.sends.size(), 4u);
  EXPECT_EQ(call.redirects(), 4);
}

TEST(LeaderDiscovery, AHintBackToAVisitedEndpointIsNotFollowedInThePass) {
  coalesce_rng rng{8};
  leader_state ls{three(), rng};
  align(ls, 0);
  discovery_call call{ls, false, t0};
  auto a = call.start(ls, t0, rng);
  ASSERT_EQ(a.endpoint, A);
  a = call.on_result(ls, not_leader(hint_to(B, 3)), t0, rng);
  ASSERT_EQ(a.endpoint, B);
  a = call.on_result(ls, not_leader(hint_to(A, 4)), t0, rng); // flapping
  ASSERT_EQ(a.step, discovery_step::send);
  EXPECT_EQ(a.endpoint, C);
  a = call.on_result(ls, of(attempt_class::refused), t0, rng);
  // The pass saw an election signal: ride out instead of failing.
  ASSERT_EQ(a.step, discovery_step::wait);
  a = call.resume(ls, t0 + a.delay, rng);
  ASSERT_EQ(a.step, discovery_step::send);
  EXPECT_EQ(a.endpoint, B); // the cached leader (seated by the hint) first
}

TEST(LeaderDiscovery, ASelfReferencingHintIsNotFollowed) {
  coalesce_rng rng{8};
  leader_state ls{three(), rng};
  align(ls, 0);
  discovery_call call{ls, false, t0};
  auto a = call.start(ls, t0, rng);
  a = call.on_result(ls, not_leader(hint_to(A, 3)), t0, rng);
  ASSERT_EQ(a.step, discovery_step::send);
  EXPECT_EQ(a.endpoint, B);
  EXPECT_EQ(call.redirects(), 0);
  EXPECT_FALSE(ls.leader(t0));
}

TEST(LeaderTls, BareHintsBecomeHttpsAndHttpHintsAreDropped) {
  auto cfg = three();
  cfg.tls = true;
  coalesce_rng rng{6};
  leader_state ls{cfg, rng};
  const std::string sa = "https://127.0.0.1:7001";
  const std::string sb = "https://127.0.0.1:7002";
  const std::string sc = "https://127.0.0.1:7003";
  EXPECT_EQ(ls.endpoints(), (std::vector<std::string>{sa, sb, sc}));
  ls.seat(sa, 1, seat_source::success, t0);
  discovery_call call{ls, false, t0};
  auto a = call.start(ls, t0, rng);
  ASSERT_EQ(a.endpoint, sa);
  // A peer tries to downgrade us to plaintext: dropped, the RPC moves on
  // along its own worklist, the cache stays.
  a = call.on_result(ls, not_leader("http://127.0.0.1:7003; epoch=9"), t0, rng);
  ASSERT_EQ(a.step, discovery_step::send);
  EXPECT_TRUE(a.endpoint == sb || a.endpoint == sc);
  EXPECT_EQ(ls.stats().downgrade_hints, 1u);
  EXPECT_EQ(ls.leader(t0)->endpoint, sa);
  EXPECT_EQ(call.redirects(), 0);
  // A bare hint is dialled as https.
  auto other = a.endpoint == sb ? sc : sb;
  a = call.on_result(ls, not_leader(hint_to(other, 9)), t0, rng);
  ASSERT_EQ(a.step, discovery_step::send);
  EXPECT_EQ(a.endpoint, other);
  EXPECT_EQ(ls.leader(t0)->endpoint, other);
  // An explicit https hint is taken as is; without TLS too.
  std::string h = "https://10.0.0.9:443; epoch=10";
  auto hc = ls.check_hint(&h, sa, t0);
  EXPECT_EQ(hc.verdict, hint_verdict::usable);
  EXPECT_EQ(hc.endpoint, "https://10.0.0.9:443");
}

TEST(LeaderTls, WithoutTlsAnHttpHintIsFollowed) {
  coalesce_rng rng{6};
  leader_state ls{three(), rng};
  std::string h = "http://127.0.0.1:7003; epoch=2";
  auto hc = ls.check_hint(&h, A, t0);
  EXPECT_EQ(hc.verdict, hint_verdict::usable);
  EXPECT_EQ(hc.endpoint, C);
}

TEST(LeaderHinted, EndpointsKnownOnlyFromHintsAreCappedLru) {
  coalesce_rng rng{6};
  leader_state ls{three(), rng};
  EXPECT_FALSE(ls.note_hinted(A)); // configured: not recorded
  std::vector<std::string> eps;
  for (int i = 0; i < 9; ++i)
    eps.push_back("http://10.0.0." + std::to_string(i) + ":1");
  for (int i = 0; i < 8; ++i)
    EXPECT_FALSE(ls.note_hinted(eps[i]));
  EXPECT_EQ(ls.hinted().size(), 8u);
  EXPECT_FALSE(ls.note_hinted(eps[0])); // touched: most recent now
  auto evicted = ls.note_hinted(eps[8]);
  ASSERT_TRUE(evicted);
  EXPECT_EQ(*evicted, eps[1]);
  EXPECT_EQ(ls.hinted().size(), 8u);
  EXPECT_EQ(ls.hinted().front(), eps[8]);
  EXPECT_EQ(ls.stats().hinted_evictions, 1u);
}

TEST(LeaderHinted, ARedirectToAnUnconfiguredEndpointIsRemembered) {
  coalesce_rng rng{6};
  leader_state ls{three(), rng};
  align(ls, 0);
  discovery_call call{ls, false, t0};
  const std::string d = "http://127.0.0.1:7009";
  auto r = drive(ls, call, t0, rng, [&](const std::string& ep, coalesce_time) {
    return ep == d ? ok(4) : not_leader(hint_to(d, 4));
  });
  EXPECT_EQ(r.last.endpoint, d);
  EXPECT_EQ(r.sends, (std::vector<std::string>{A, d}));
  EXPECT_EQ(ls.hinted().front(), d);
  EXPECT_EQ(ls.begin_pass(r.end).front(), d);
}

// -- non-idempotent seq
// ---------------------------------------------------------

TEST(LeaderSeq, APossiblyCommittedFailureIsUncertainAfterExactlyOneCall) {
  // Everything after the request may have committed and that the oracle
  // did not mark pre-commit: a reset or timeout after sending, a proxy's
  // 502/503/504 or 429, a 500, an unexpected status, a TLS failure after
  // sending. Retrying it risks a double-spend.
  for (auto cls :
       {attempt_class::lost, attempt_class::server_error, attempt_class::busy,
        attempt_class::unexpected_status, attempt_class::fatal_after_send}) {
    coalesce_rng rng{11};
    leader_state ls{three(), rng};
    discovery_call call{ls, true, t0};
    int server_calls = 0;
    auto r = drive(ls, call, t0, rng, [&](const std::string&, coalesce_time) {
      ++server_calls;
      return of(cls);
    });
    EXPECT_EQ(r.last.step, discovery_step::failed) << to_string(cls);
    EXPECT_EQ(r.last.error, discovery_error::uncertain_outcome)
      << to_string(cls);
    EXPECT_EQ(server_calls, 1) << to_string(cls);
    EXPECT_EQ(r.last.attempts, 1);
    EXPECT_FALSE(r.last.nothing_committed) << to_string(cls);
  }
}

TEST(LeaderSeq, MarkedRejectionsFailPlainlyAndCommittedNothing) {
  coalesce_rng rng{11};
  leader_state ls{three(), rng};
  discovery_call call{ls, true, t0};
  int server_calls = 0;
  auto r = drive(ls, call, t0, rng, [&](const std::string&, coalesce_time) {
    ++server_calls;
    return of(attempt_class::rejected); // the oracle's marked 400
  });
  EXPECT_EQ(r.last.error, discovery_error::rejected);
  EXPECT_EQ(server_calls, 1);
  EXPECT_TRUE(r.last.nothing_committed);
}

TEST(LeaderSeq, AHandshakeFailureMovesOnForSeqToo) {
  coalesce_rng rng{11};
  leader_state ls{three(), rng};
  discovery_call call{ls, true, t0};
  auto r = drive(ls, call, t0, rng, [&](const std::string& ep, coalesce_time) {
    return ep == A ? of(attempt_class::handshake_failed) : ok(2);
  });
  EXPECT_EQ(r.last.step, discovery_step::succeeded);
  EXPECT_EQ(r.sends, (std::vector<std::string>{A, B}));
}

TEST(LeaderSeq, AnOwnAttemptTimeoutIsUncertain) {
  coalesce_rng rng{11};
  leader_state ls{three(), rng};
  discovery_call call{ls, true, t0};
  auto a = call.start(ls, t0, rng);
  ASSERT_EQ(a.step, discovery_step::send);
  a = call.on_attempt_timeout(ls, t0 + a.budget, rng);
  EXPECT_EQ(a.step, discovery_step::failed);
  EXPECT_EQ(a.error, discovery_error::uncertain_outcome);
  // The same for ts is retried on the next endpoint.
  discovery_call ts{ls, false, t0};
  a = ts.start(ls, t0, rng);
  a = ts.on_attempt_timeout(ls, t0 + a.budget, rng);
  EXPECT_TRUE(a.step == discovery_step::wait || a.step == discovery_step::send);
}

TEST(LeaderSeq, FailuresThatCommittedNothingAreRetried) {
  coalesce_rng rng{12};
  leader_state ls{three(), rng};
  align(ls, 0);
  discovery_call call{ls, true, t0};
  auto r = drive(ls, call, t0, rng, [](const std::string& ep, coalesce_time) {
    if (ep == A)
      return of(attempt_class::refused); // connect refused / marked 503
    if (ep == B)
      return not_leader(std::nullopt); // 421: nothing committed
    return ok(3);
  });
  EXPECT_EQ(r.last.step, discovery_step::succeeded);
  EXPECT_EQ(r.sends, (std::vector<std::string>{A, B, C}));
  // A 421 with a hint is followed for seq too.
  discovery_call call2{ls, true, r.end};
  auto r2
    = drive(ls, call2, r.end, rng, [](const std::string& ep, coalesce_time) {
        return ep == B ? ok(4) : not_leader(hint_to(B, 4));
      });
  EXPECT_EQ(r2.last.step, discovery_step::succeeded);
  EXPECT_EQ(r2.sends, (std::vector<std::string>{C, B}));
}

TEST(LeaderSeq, NoShortAttemptAfterTheFirstCallOfASeqRpc) {
  coalesce_rng rng{12};
  auto cfg = three();
  cfg.retry.overall = 3.0;
  leader_state ls{cfg, rng};
  discovery_call call{ls, true, t0};
  int server_calls = 0;
  auto r = drive(
    ls, call, t0, rng,
    [&](const std::string&, coalesce_time) {
      ++server_calls;
      return not_leader(std::nullopt);
    },
    milliseconds(1500));
  // After 1.5 s only 1.5 s are left: less than a full 2 s attempt window,
  // so the seq RPC stops with the recorded election signal, never with a
  // manufactured uncertain outcome.
  EXPECT_EQ(server_calls, 1);
  EXPECT_EQ(r.last.error, discovery_error::no_leader);
}
