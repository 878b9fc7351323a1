// Pure tests of one attempt's hedge race (core/hedge_race.hpp): explicit
// time, verdicts from the real classifier (core/classify.hpp), exact
// decisions. One table row per rule of the header (R1..R13); each row is a
// script of events and the trace of decisions it must produce, so a wrong
// rule changes a trace line. The actor-level race (CAF's test coordinator,
// the fake transport) is tests/unit/actors/call/hedge_race_test.cpp.

#include "core/hedge_race.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <iterator>
#include <ostream>
#include <string>
#include <vector>

using namespace std::chrono_literals;
using outbound::call_health;
using outbound::classify_exchange;
using outbound::exchange_view;
using outbound::transport_error_kind;
using namespace outbound::core;

namespace {

const race_time t0 = race_time{} + 1h;

race_time at(duration d) {
  return t0 + d;
}

std::string ms(duration d) {
  if (d % 1ms == 0ns)
    return std::to_string(d / 1ms) + "ms";
  return std::to_string(d.count()) + "ns";
}

// -- answers, classified as the call actor classifies them -----------------

leg_answer classified(exchange_view v) {
  v.idempotent = true;
  return leg_answer::of(classify_exchange(v, {429, 502, 503, 504}),
                        v.request_sent);
}

leg_answer status(int s) {
  exchange_view v;
  v.status = s;
  v.request_sent = true;
  return classified(v);
}

leg_answer error(transport_error_kind k, bool sent) {
  exchange_view v;
  v.error = k;
  v.request_sent = sent;
  return classified(v);
}

const leg_answer ok = status(200);
const leg_answer s404 = status(404);
const leg_answer s500 = status(500); // not retried here: definitive
const leg_answer s503 = status(503); // retried: not definitive
// The pool's refusal of a hedge (connection_pool.cpp, acquire_kind::busy).
const leg_answer refused = error(transport_error_kind::pool_overflow, false);
// The pool's answer to a cancelled exchange.
const leg_answer cancelled = error(transport_error_kind::timeout, true);
const leg_answer broken = error(transport_error_kind::interrupted, true);

// -- the script language ------------------------------------------------------

/// One event fed to the race; returns its trace line ("" = no line).
using event = std::function<std::string(hedge_race&)>;

std::string describe(const answer_step& s) {
  std::string out = to_string(s.decision);
  if (s.decision == answer_decision::conclude) {
    if (s.outcome_is_kept)
      out += " kept";
    out += std::string{" of="} + to_string(s.outcome_of);
  }
  if (s.cancel)
    out += std::string{" cancel="} + to_string(*s.cancel);
  if (s.token)
    out += std::string{" token="} + to_string(*s.token);
  if (s.held_race)
    out += std::string{" held="}
           + (s.held_race->hedge_won ? "hedge_won" : "primary_won");
  if (s.race)
    out += std::string{" race="}
           + (s.race->hedge_won ? "hedge_won" : "primary_won");
  if (s.permit != permit_action::none)
    out += std::string{" permit="} + to_string(s.permit);
  if (s.permit == permit_action::complete)
    out += std::string{"/"} + outbound::to_string(s.permit_health);
  if (s.decision == answer_decision::conclude) {
    out += " rec=" + ms(s.record.latency) + "/"
           + outbound::to_string(s.record.health);
    if (s.record.to_sketch)
      out += "/sketch";
  }
  return out;
}

/// The primary `id` of a new attempt goes out at `t` with `budget`.
event begin(uint64_t id, duration t, duration budget = 1s) {
  return [=](hedge_race& r) {
    r.begin_attempt(id, at(t), budget);
    return std::string{};
  };
}

event delay(duration d) {
  return [=](hedge_race& r) {
    r.set_delay(d);
    return std::string{};
  };
}

/// Where the hedge timer is to be armed.
event due_at() {
  return [](hedge_race& r) {
    auto d = r.hedge_due_at();
    return d ? "due@" + ms(*d - t0) : std::string{"due:none"};
  };
}

/// The hedge timer of attempt `a` (0: the current one) ran out, at its
/// due time (t0 when none is due).
event due(uint64_t a = 0) {
  return [=](hedge_race& r) -> std::string {
    auto now = r.hedge_due_at().value_or(t0);
    switch (r.on_hedge_due(a ? a : r.attempt(), now)) {
      case due_decision::ask_gates: return "gates";
      case due_decision::ignore: return "ignore";
      case due_decision::would_miss_deadline: return "would_miss_deadline";
    }
    return "?";
  };
}

/// The breakers answered for attempt `a` (0: the current one).
event gate(bool allowed, uint64_t a = 0) {
  return [=](hedge_race& r) -> std::string {
    switch (r.on_gate(a ? a : r.attempt(), allowed)) {
      case gate_decision::report_blocked: return "blocked";
      case gate_decision::release_permit: return "release_permit";
      case gate_decision::ask_token: return "ask_token";
    }
    return "?";
  };
}

/// The budget answered at `t` for attempt `a` (0: the current one).
event token(bool granted, duration t, uint64_t a = 0) {
  return [=](hedge_race& r) {
    auto s = r.on_token(a ? a : r.attempt(), granted, at(t));
    std::string out = to_string(s.decision);
    if (s.decision == token_decision::fire)
      out += " " + ms(s.budget);
    return out;
  };
}

/// The client's retry budget refused the hedge a granted token fired.
event budget_refused() {
  return [](hedge_race& r) {
    auto s = r.on_budget_refused();
    std::string out = to_string(s.decision);
    if (s.release_permit())
      out += " release_permit";
    if (s.return_token())
      out += " return_token";
    return out;
  };
}

/// The whole gate path at `t`, allowed and granted, then the hedge `id`
/// goes out: one line "fire <budget>".
event hedge(uint64_t id, duration t, bool probe = false) {
  return [=](hedge_race& r) -> std::string {
    if (r.on_hedge_due(r.attempt(), at(t)) != due_decision::ask_gates)
      return "no gates";
    if (r.on_gate(r.attempt(), true) != gate_decision::ask_token)
      return "no token asked";
    auto s = r.on_token(r.attempt(), true, at(t));
    if (s.decision != token_decision::fire)
      return std::string{"not fired: "} + to_string(s.decision);
    r.on_hedge_sent(id, at(t), probe);
    return "fire " + ms(s.budget);
  };
}

event answer(uint64_t id, leg_answer a, duration t) {
  return [=](hedge_race& r) {
    return describe(r.on_answer(id, a, at(t)));
  };
}

event timeout(uint64_t id, duration t) {
  return answer(id, leg_answer::timeout(), t);
}

event undelivered(uint64_t id, duration t) {
  return answer(id, leg_answer::undelivered(), t);
}

/// The call ended; a line only when a permit is to be released.
event done() {
  return [](hedge_race& r) {
    auto p = r.on_call_done();
    return p == permit_action::none
             ? std::string{}
             : std::string{"done permit="} + to_string(p);
  };
}

/// The owner failed to read send `id`'s answer (R14).
event answer_lost(uint64_t id) {
  return [=](hedge_race& r) {
    return "unread: " + describe(r.on_answer_lost(id));
  };
}

event lost() {
  return [](hedge_race& r) {
    auto s = r.on_transport_lost();
    std::string out = "lost fired=" + std::to_string(s.tokens_fired);
    for (auto& h : s.held_races)
      out += h.hedge_won ? " held=hedge_won" : " held=primary_won";
    if (s.release_permit)
      out += " permit=release";
    return out;
  };
}

event stopped() {
  return [](hedge_race& r) {
    auto s = r.on_owner_stopped();
    std::string out = "stopped fired=" + std::to_string(s.tokens_fired);
    for (auto& h : s.held_races)
      out += h.hedge_won ? " held=hedge_won" : " held=primary_won";
    if (s.release_permit)
      out += " permit=release";
    return out;
  };
}

event owed() {
  return [](hedge_race& r) {
    return "owed=" + std::to_string(r.tokens_owed());
  };
}

struct race_case {
  const char* name;
  bool hedgeable;
  std::vector<event> script;
  std::vector<std::string> trace;
};

std::ostream& operator<<(std::ostream& os, const race_case& c) {
  return os << c.name;
}

// Send ids: 1 the primary, 2 its hedge; 3, 4 the next attempt's.
const race_case cases[] = {
  // -- R1: when the hedge timer is due --------------------------------------
  {"HedgeIsDueTheDelayAfterThePrimary",
   true,
   {begin(1, 5ms), delay(10ms), due_at()},
   {"due@15ms"}},
  {"NoDelayYetNoTimer", true, {begin(1, 0ms), due_at()}, {"due:none"}},
  {"ANonHedgeableCallIsNeverDue",
   false,
   {delay(10ms), begin(1, 0ms), due_at(), due()},
   {"due:none", "ignore"}},
  {"AtMostOneHedgeTryPerAttempt",
   true,
   {begin(1, 0ms), delay(10ms), due(), due_at(), due()},
   {"gates", "due:none", "ignore"}},
  {"NoTimerOnceThePrimaryAnswered",
   true,
   {begin(1, 0ms), answer(1, ok, 9ms), delay(10ms), due_at()},
   {"conclude of=primary rec=9ms/success/sketch", "due:none"}},
  {"EachAttemptMayHedgeAgain",
   true,
   {begin(1, 0ms), delay(10ms), due(), answer(1, s503, 50ms), begin(3, 150ms),
    due_at(), due()},
   {"gates", "conclude of=primary rec=50ms/server_error/sketch", "due@160ms",
    "gates"}},
  // -- R2: stale timers and replies ---------------------------------------
  {"ATimerOfAnEarlierAttemptIsIgnored",
   true,
   {begin(1, 0ms), delay(10ms), answer(1, s503, 5ms), begin(3, 100ms), due(1),
    due()},
   {"conclude of=primary rec=5ms/server_error/sketch", "ignore", "gates"}},
  {"ATimerAfterTheCallEndedIsIgnored",
   true,
   {begin(1, 0ms), delay(10ms), done(), due()},
   {"ignore"}},
  {"AnAllowedGateAfterThePrimaryAnsweredReleasesThePermit",
   true,
   {begin(1, 0ms), delay(10ms), due(), answer(1, ok, 10ms), gate(true, 1)},
   {"gates", "conclude of=primary rec=10ms/success/sketch", "release_permit"}},
  {"ATokenForAnEarlierAttemptIsUnwanted",
   true,
   {begin(1, 0ms), delay(10ms), due(), answer(1, s503, 10ms), begin(3, 100ms),
    token(true, 101ms, 1)},
   {"gates", "conclude of=primary rec=10ms/server_error/sketch", "unwanted"}},
  // -- R3: the breaker gate -----------------------------------------------
  {"ABlockedBreakerIsReportedAndTheAttemptStaysUnhedged",
   true,
   {begin(1, 0ms), delay(10ms), due(), gate(false), due(), due_at()},
   {"gates", "blocked", "ignore", "due:none"}},
  {"ABlockedBreakerIsReportedEvenWhenTheHedgeIsNoLongerWanted",
   true,
   {begin(1, 0ms), delay(10ms), due(), answer(1, ok, 10ms), gate(false, 1)},
   {"gates", "conclude of=primary rec=10ms/success/sketch", "blocked"}},
  // -- R4: the budget gate ------------------------------------------------
  {"AGrantedTokenFiresWithTheAttemptsRemainingTime",
   true,
   {begin(1, 0ms, 1s), delay(10ms), due(), gate(true), token(true, 10ms)},
   {"gates", "ask_token", "fire 990ms"}},
  {"NoTimeLeftReturnsTheToken",
   true,
   {begin(1, 0ms, 30ms), delay(10ms), due(), gate(true), token(true, 30ms)},
   {"gates", "ask_token", "no_time_left"}},
  // -- R15: no hedge that could not finish before the attempt's deadline --
  {"AHedgeWithNoMoreTimeLeftThanTheDelayIsNotTried",
   true,
   {begin(1, 0ms, 20ms), delay(10ms), due(), due()},
   {"would_miss_deadline", "ignore"}},
  {"AHedgeWithMoreTimeLeftThanTheDelayIsTried",
   true,
   {begin(1, 0ms, 20ms + 1ns), delay(10ms), due()},
   {"gates"}},
  // -- R16: the client's retry budget refuses a granted hedge ---------------
  {"ABudgetRefusalReleasesThePermitAndReturnsTheToken",
   true,
   {begin(1, 0ms), delay(10ms), due(), gate(true), budget_refused(), owed()},
   {"gates", "ask_token", "budget_refused release_permit return_token",
    "owed=0"}},
  {"ATokenGrantedAfterThePrimaryAnsweredIsUnwanted",
   true,
   {begin(1, 0ms), delay(10ms), due(), gate(true), answer(1, ok, 10ms),
    token(true, 10ms, 1), owed()},
   {"gates", "ask_token", "conclude of=primary rec=10ms/success/sketch",
    "unwanted", "owed=0"}},
  {"NoTokenNoHedge",
   true,
   {begin(1, 0ms), delay(10ms), due(), gate(true), token(false, 10ms), owed()},
   {"gates", "ask_token", "no_token", "owed=0"}},
  // -- R5: stale answers --------------------------------------------------
  {"AnUnknownSendIsStale",
   true,
   {begin(1, 0ms), answer(7, ok, 5ms), answer(1, ok, 6ms)},
   {"stale", "conclude of=primary rec=6ms/success/sketch"}},
  {"AnAnswerAfterTheCallEndedIsStale",
   true,
   {begin(1, 0ms), done(), answer(1, ok, 5ms)},
   {"stale"}},
  // -- R6: a definitive answer ends the race ------------------------------
  {"AFastHedgeWinsAndCancelsThePrimary",
   true,
   {begin(1, 0ms), delay(10ms), hedge(2, 10ms), answer(2, ok, 15ms),
    answer(1, cancelled, 15ms)},
   {"fire 990ms",
    "conclude of=hedge cancel=primary token=fired race=hedge_won "
    "rec=15ms/success/sketch",
    "stale"}},
  {"APrimaryThatWinsCancelsTheHedgeWhoseCountWaitsForItsAnswer",
   true,
   {begin(1, 0ms), delay(10ms), hedge(2, 10ms), answer(1, ok, 30ms), owed(),
    answer(2, cancelled, 30ms), owed()},
   {"fire 990ms", "conclude of=primary cancel=hedge rec=30ms/success/sketch",
    "owed=1", "stale token=fired held=primary_won", "owed=0"}},
  {"ADefinitiveErrorStatusFromTheHedgeWins",
   true,
   {begin(1, 0ms), delay(10ms), hedge(2, 10ms), answer(2, s404, 12ms)},
   {"fire 990ms", "conclude of=hedge cancel=primary token=fired race=hedge_won "
                  "rec=12ms/success/sketch"}},
  {"ALonePrimaryConcludesAlone",
   true,
   {begin(1, 0ms), delay(10ms), answer(1, s404, 9ms), owed()},
   {"conclude of=primary rec=9ms/success/sketch", "owed=0"}},
  // -- R7: a failure waits for the other leg ------------------------------
  {"ARetryableStatusFromTheHedgeWaitsForThePrimary",
   true,
   {begin(1, 0ms), delay(10ms), hedge(2, 10ms), answer(2, s503, 11ms),
    answer(1, ok, 200ms)},
   {"fire 990ms", "wait token=fired",
    "conclude of=primary rec=200ms/success/sketch"}},
  {"ABrokenPrimaryWaitsForTheHedge",
   true,
   {begin(1, 0ms), delay(10ms), hedge(2, 10ms), answer(1, broken, 20ms),
    answer(2, ok, 30ms)},
   {"fire 990ms", "wait",
    "conclude of=hedge token=fired rec=30ms/success/sketch"}},
  {"BothLegsFailingConcludeWithTheLaterAndCountNoRace",
   true,
   {begin(1, 0ms), delay(10ms), hedge(2, 10ms), answer(1, s503, 50ms),
    answer(2, s503, 60ms)},
   {"fire 990ms", "wait",
    "conclude of=hedge token=fired rec=60ms/server_error/sketch"}},
  {"BothLegsTimingOutConcludeAtTheBudget",
   true,
   {begin(1, 0ms), delay(10ms), hedge(2, 10ms), timeout(1, 1000ms),
    timeout(2, 1000ms)},
   {"fire 990ms", "wait",
    "conclude of=hedge token=fired rec=1000ms/failure/sketch"}},
  // -- R8: a hedge the pool refused is no leg of the race ------------------
  {"ARefusedHedgeLeavesThePrimaryAlone",
   true,
   {begin(1, 0ms), delay(10ms), hedge(2, 10ms), answer(2, refused, 10ms),
    owed(), answer(1, ok, 300ms)},
   {"fire 990ms", "refused token=returned", "owed=0",
    "conclude of=primary rec=300ms/success/sketch"}},
  {"ARefusalAfterThePrimaryFailedConcludesWithThePrimarysFailure",
   true,
   {begin(1, 0ms), delay(10ms), hedge(2, 10ms), answer(1, s503, 12ms),
    answer(2, refused, 15ms)},
   {"fire 990ms", "wait",
    "conclude kept of=primary token=returned rec=15ms/server_error/sketch"}},
  {"ARefusedProbeReleasesItsPermitAtOnce",
   true,
   {begin(1, 0ms), delay(10ms), hedge(2, 10ms, true), answer(2, refused, 10ms),
    answer(1, ok, 30ms)},
   {"fire 990ms", "refused token=returned permit=release",
    "conclude of=primary rec=30ms/success/sketch"}},
  // -- R9 + R11: the refusal that crosses the primary's answer -------------
  // Before hedge_race, the race's end counted this hedge as fired (and its
  // race as a primary win): the refusal came too late to give the token
  // back.
  {"ARefusalArrivingAfterThePrimaryAnsweredReturnsTheToken",
   true,
   {begin(1, 0ms), delay(10ms), hedge(2, 10ms), answer(1, ok, 25ms),
    answer(2, refused, 30ms), owed()},
   {"fire 990ms", "conclude of=primary cancel=hedge rec=25ms/success/sketch",
    "stale token=returned", "owed=0"}},
  {"APrimaryWinAfterAFailedHedgeCountsNoRace",
   true,
   {begin(1, 0ms), delay(10ms), hedge(2, 10ms), answer(2, broken, 12ms),
    answer(1, ok, 40ms), owed()},
   {"fire 990ms", "wait token=fired",
    "conclude of=primary rec=40ms/success/sketch", "owed=0"}},
  // -- R10: the half-open permit ------------------------------------------
  {"AProbeHedgeThatWinsCompletesItsPermit",
   true,
   {begin(1, 0ms), delay(10ms), hedge(2, 10ms, true), answer(2, s500, 20ms)},
   {"fire 990ms", "conclude of=hedge cancel=primary token=fired race=hedge_won "
                  "permit=complete/server_error rec=20ms/server_error/sketch"}},
  {"AProbeHedgeThatLosesReleasesItsPermit",
   true,
   {begin(1, 0ms), delay(10ms), hedge(2, 10ms, true), answer(1, ok, 20ms),
    answer(2, cancelled, 20ms)},
   {"fire 990ms",
    "conclude of=primary cancel=hedge permit=release "
    "rec=20ms/success/sketch",
    "stale token=fired held=primary_won"}},
  // A probe that fails while the primary runs is a failed trial, whatever
  // the primary does next (the primary's later failure or success is the
  // call's, not the probe's).
  {"AProbeHedgeThatFailsFirstCompletesItsPermitWithItsFailure",
   true,
   {begin(1, 0ms), delay(10ms), hedge(2, 10ms, true), answer(2, s503, 15ms),
    answer(1, ok, 40ms)},
   {"fire 990ms", "wait token=fired permit=complete/server_error",
    "conclude of=primary rec=40ms/success/sketch"}},
  {"AProbeHedgeThatTimesOutBeforeAFailingPrimaryIsAFailedTrial",
   true,
   {begin(1, 0ms), delay(10ms), hedge(2, 10ms, true), timeout(2, 500ms),
    answer(1, broken, 900ms)},
   {"fire 990ms", "wait token=fired permit=complete/failure",
    "conclude of=primary rec=900ms/failure/sketch"}},
  {"AProbeHedgeTheTransportNeverTookReleasesItsPermit",
   true,
   {begin(1, 0ms), delay(10ms), hedge(2, 10ms, true), undelivered(2, 10ms),
    answer(1, ok, 30ms)},
   {"fire 990ms", "wait token=returned permit=release",
    "conclude of=primary rec=30ms/success/sketch"}},
  // -- R11: the token is settled by the hedge's own first answer -----------
  {"AnUndeliveredHedgeReturnsItsTokenAndCountsAsAFailedLeg",
   true,
   {begin(1, 0ms), delay(10ms), hedge(2, 10ms), undelivered(2, 10ms),
    answer(1, ok, 30ms)},
   {"fire 990ms", "wait token=returned",
    "conclude of=primary rec=30ms/success/sketch"}},
  {"AHedgeThatTimedOutCountsAsFired",
   true,
   {begin(1, 0ms), delay(10ms), hedge(2, 10ms), timeout(2, 1000ms)},
   {"fire 990ms", "wait token=fired"}},
  {"TheCallEndingSettlesNothingTheHedgesAnswerDoes",
   true,
   {begin(1, 0ms), delay(10ms), hedge(2, 10ms), done(), owed(),
    answer(2, refused, 11ms), owed()},
   {"fire 990ms", "owed=1", "stale token=returned", "owed=0"}},
  {"ASecondAnswerOfTheHedgeSettlesNothing",
   true,
   {begin(1, 0ms), delay(10ms), hedge(2, 10ms), answer(2, refused, 10ms),
    answer(2, refused, 11ms)},
   {"fire 990ms", "refused token=returned", "stale"}},
  // -- R12: the pool went away --------------------------------------------
  {"ALostTransportFiresTheOwedTokenAndReleasesThePermit",
   true,
   {begin(1, 0ms), delay(10ms), hedge(2, 10ms, true), lost(), owed(),
    answer(2, cancelled, 20ms)},
   {"fire 990ms", "lost fired=1 permit=release", "owed=0", "stale"}},
  {"ALostTransportEmitsAHeldRace",
   true,
   {begin(1, 0ms), delay(10ms), hedge(2, 10ms), answer(1, ok, 20ms), lost()},
   {"fire 990ms", "conclude of=primary cancel=hedge rec=20ms/success/sketch",
    "lost fired=1 held=primary_won"}},
  // -- R14: what the owner can no longer learn ----------------------------
  {"AnUnreadHedgeAnswerSettlesItsTokenAsFiredOnce",
   true,
   {begin(1, 0ms), delay(10ms), hedge(2, 10ms), answer_lost(2), owed(),
    answer_lost(2), answer(2, refused, 20ms)},
   {"fire 990ms", "unread: stale token=fired", "owed=0", "unread: stale",
    "refused"}},
  {"AnUnreadAnswerAfterTheTokenSettledSettlesNothing",
   true,
   {begin(1, 0ms), delay(10ms), hedge(2, 10ms), answer(2, ok, 20ms),
    answer_lost(2)},
   {"fire 990ms",
    "conclude of=hedge cancel=primary token=fired race=hedge_won "
    "rec=20ms/success/sketch",
    "unread: stale"}},
  {"AnUnreadAnswerOfTheCancelledHedgeEmitsItsHeldRace",
   true,
   {begin(1, 0ms), delay(10ms), hedge(2, 10ms), answer(1, ok, 20ms), done(),
    answer_lost(2), owed()},
   {"fire 990ms", "conclude of=primary cancel=hedge rec=20ms/success/sketch",
    "unread: stale token=fired held=primary_won", "owed=0"}},
  {"AnUnreadPrimaryAnswerSettlesNothing",
   true,
   {begin(1, 0ms), delay(10ms), hedge(2, 10ms), answer_lost(1), owed()},
   {"fire 990ms", "unread: stale", "owed=1"}},
  {"TheCallEndingWithAProbeHedgeInFlightReleasesThePermit",
   true,
   {begin(1, 0ms), delay(10ms), hedge(2, 10ms, true), done(), done(),
    answer(2, ok, 20ms)},
   {"fire 990ms", "done permit=release", "stale token=fired"}},
  {"TheOwnerStoppingSettlesWhatIsOwedOnce",
   true,
   {begin(1, 0ms), delay(10ms), hedge(2, 10ms, true), answer(1, ok, 20ms),
    stopped(), stopped()},
   {"fire 990ms",
    "conclude of=primary cancel=hedge permit=release "
    "rec=20ms/success/sketch",
    "stopped fired=1 held=primary_won", "stopped fired=0"}},
  // -- R13: what an attempt records ---------------------------------------
  {"ANonHedgeableCallRecordsHealthButNoSketchLatency",
   false,
   {begin(1, 0ms), answer(1, s503, 7ms)},
   {"conclude of=primary rec=7ms/server_error"}},
  {"TheLatencyIsFromThePrimarysSendWhicheverLegWins",
   true,
   {begin(1, 100ms), delay(10ms), hedge(2, 110ms), answer(2, ok, 111ms)},
   {"fire 990ms", "conclude of=hedge cancel=primary token=fired race=hedge_won "
                  "rec=11ms/success/sketch"}},
  {"ATimedOutLoneAttemptRecordsAFailure",
   true,
   {begin(1, 0ms), timeout(1, 1000ms)},
   {"conclude of=primary rec=1000ms/failure/sketch"}},
};

class CoreHedgeRace : public ::testing::TestWithParam<race_case> {};

TEST_P(CoreHedgeRace, FollowsTheRule) {
  const auto& c = GetParam();
  hedge_race r{c.hedgeable};
  std::vector<std::string> trace;
  for (const auto& ev : c.script) {
    auto line = ev(r);
    if (!line.empty())
      trace.push_back(std::move(line));
  }
  EXPECT_EQ(trace, c.trace);
}

INSTANTIATE_TEST_SUITE_P(Rules, CoreHedgeRace, ::testing::ValuesIn(cases),
                         [](const ::testing::TestParamInfo<race_case>& i) {
                           return std::string{i.param.name};
                         });

} // namespace

// -- small pieces -----------------------------------------------------------

TEST(CoreHedgeRaceToken, EachDecisionSaysWhatToDoWithThePermitAndTheToken) {
  struct row {
    token_decision d;
    bool release_permit;
    bool return_token;
  };
  const row rows[] = {
    {token_decision::fire, false, false},
    {token_decision::unwanted, true, true},
    {token_decision::no_time_left, true, true},
    {token_decision::no_token, true, false},
  };
  for (const auto& x : rows) {
    SCOPED_TRACE(to_string(x.d));
    token_step s;
    s.decision = x.d;
    EXPECT_EQ(s.release_permit(), x.release_permit);
    EXPECT_EQ(s.return_token(), x.return_token);
  }
}

TEST(CoreHedgeRaceAnswer, OnlyAPoolOverflowWithNothingSentIsARefusal) {
  EXPECT_TRUE(refused.refusal());
  EXPECT_FALSE(error(transport_error_kind::pool_overflow, true).refusal());
  EXPECT_FALSE(error(transport_error_kind::not_sent, false).refusal());
  EXPECT_FALSE(leg_answer::timeout().refusal());
  EXPECT_FALSE(leg_answer::undelivered().refusal());
  EXPECT_TRUE(ok.definitive());
  EXPECT_TRUE(s404.definitive());
  EXPECT_FALSE(s503.definitive());
  EXPECT_FALSE(leg_answer::timeout().definitive());
  EXPECT_EQ(leg_answer::timeout().health(), call_health::failure);
  EXPECT_EQ(s503.health(), call_health::server_error);
}

// The branch of on_answer that the code calls unreachable (a refused hedge
// with no primary running and none kept): a seeded random walk over every
// event the owner can feed in, in any order, never sees the race answer
// `refused` or `wait` with nothing left in flight — either would leave the
// owner waiting for an answer that cannot come.
TEST(CoreHedgeRaceWalk, NoAnswerLeavesTheOwnerWaitingForNothing) {
  const leg_answer answers[] = {ok,
                                s404,
                                s500,
                                s503,
                                refused,
                                cancelled,
                                broken,
                                leg_answer::timeout(),
                                leg_answer::undelivered()};
  uint64_t seed = 12345;
  auto next = [&seed](uint64_t n) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return (seed >> 33) % n;
  };
  size_t refusals_seen = 0;
  for (int walk = 0; walk < 2000; ++walk) {
    hedge_race r{true};
    uint64_t sends = 0;
    duration t{0};
    r.begin_attempt(++sends, at(t), 1s);
    r.set_delay(10ms);
    for (int step = 0; step < 40; ++step) {
      t += duration{static_cast<int64_t>(next(20)) * 1ms};
      switch (next(8)) {
        case 0: // a new attempt, when the retry loop may begin one
          if (!r.any_in_flight())
            r.begin_attempt(++sends, at(t), 1s);
          break;
        case 1:
        case 2: { // the whole gate path, then the hedge goes out
          auto a = r.attempt();
          if (r.on_hedge_due(a, at(t)) == due_decision::ask_gates
              && r.on_gate(a, true) == gate_decision::ask_token
              && r.on_token(a, true, at(t)).decision == token_decision::fire)
            r.on_hedge_sent(++sends, at(t), next(2) == 0);
          break;
        }
        case 3:
        case 4:
        case 5: { // an answer to any send so far, current or stale
          auto id = 1 + next(sends);
          const auto& a = answers[next(std::size(answers))];
          auto s = r.on_answer(id, a, at(t));
          if (s.decision == answer_decision::refused)
            ++refusals_seen;
          ASSERT_FALSE(s.invariant_broken)
            << "walk " << walk << " step " << step
            << ": the 'unreachable' refusal branch was reached";
          if (s.decision == answer_decision::refused
              || s.decision == answer_decision::wait) {
            ASSERT_TRUE(r.any_in_flight())
              << "walk " << walk << " step " << step << ": "
              << to_string(s.decision) << " with nothing in flight";
          }
          break;
        }
        case 6: (void)r.on_answer_lost(1 + next(sends)); break;
        case 7:
          if (next(4) == 0)
            (void)r.on_call_done();
          break;
      }
    }
  }
  EXPECT_GT(refusals_seen, 0u) << "the walk must reach the refusal path";
}
