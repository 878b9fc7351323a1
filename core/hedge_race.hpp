#pragma once

// One attempt's hedge race — a primary and at most one hedge — as a pure
// state machine. No CAF, no Asio, no clock: time is an argument, and every
// decision is a return value the call actor (actors/call/call_actor.cpp)
// acts on: which message to send, which exchange to cancel, what to record.
//
// The race itself is tower's (tower-rs/tower, tower/src/hedge/select.rs:
// both requests are polled and the first to complete is the result, the
// other is dropped; tower/src/hedge/mod.rs: the second request is delayed
// by a latency percentile and filtered after the delay by
// Policy::can_retry). A real client adds rules tower leaves to its layers,
// all of them here: only a definitive answer ends a race early, a failed
// leg waits for the other, the breakers and a token budget gate the hedge
// (Dean & Barroso, "The Tail at Scale", CACM 2013: hedges within a budget),
// the pool may refuse a hedge (hedges never queue), a half-open breaker's
// permit rides on the hedge, and the hedge's token is settled exactly once.
//
//   begin_attempt(id, now, budget)
//        │
//        ▼                 hedge_due_at() ──timer──► on_hedge_due
//   [primary alone] ◄─────────────────────────────────────┐   │ ask_gates
//        │     ▲   blocked / unwanted / no token / no time │   ▼
//        │     └───────────────────────────── on_gate ─► on_token ─► fire
//        │                                                          │
//        │   refused by the pool (on_answer: the hedge never left)  │
//        │   ◄──────────────────── [racing] ◄── on_hedge_sent ◄─────┘
//        │                            │
//        │ on_answer                  │ on_answer
//        ▼                            ▼
//   definitive, or the last leg:  definitive: cancel the other leg,
//   conclude                      conclude; failure / time-out: keep it,
//        │                        wait for the other leg (which concludes)
//        ▼
//   [over] ──► begin_attempt (the retry loop's next attempt) | on_call_done
//
//   The hedge's token, apart from the race:
//   on_hedge_sent ──► owed ──the hedge's own first answer──► fired | returned
//                          (on_transport_lost, on_answer_lost,
//                           on_owner_stopped: fired)
//
// Rules (each covered by tests/unit/core/core_hedge_race_test.cpp):
//
//  R1  The hedge timer is due `delay` after the primary was sent, once the
//      delay is known (set_delay), at most once per attempt, and only
//      while the primary runs (hedge_due_at).
//  R2  A due timer, a gate reply or a token reply of another attempt, or
//      after the call ended, or once the primary stopped running or a
//      hedge was sent, finds the hedge unwanted ("stale-message
//      discipline": every timer and reply carries its attempt id).
//  R3  Gates in order: the breakers, then the budget. A blocked breaker is
//      reported (circuit_blocked), even if the hedge is no longer wanted.
//      An allowed gate whose hedge is no longer wanted releases its permit
//      and asks for no token.
//  R4  A granted token fires the hedge with the attempt's remaining time
//      (the primary's deadline - now). No time left, or the hedge no
//      longer wanted: the permit is released and the token goes back. A
//      refused token: the permit is released (the budget counted it).
//  R5  A leg's answer is the race's only while that leg is in flight and
//      the call is not over; anything else is stale for the race (R11
//      still applies to the hedge's token).
//  R6  A definitive answer (core/classify.hpp, exchange_verdict::
//      definitive) from either leg ends the race: the other leg, if still
//      in flight, is the loser and is cancelled.
//  R7  A non-definitive answer or a time-out while the other leg runs is
//      kept, and the other leg may still win. When the other leg ends
//      too, the later answer is the attempt's outcome (the retry loop
//      sees it).
//  R8  A hedge the pool refused (pool_overflow, nothing sent; hedges never
//      queue) never left: it is no leg of the race. Its permit goes back at
//      once; the primary runs on alone, or, if the primary had already
//      failed, the primary's kept failure is the attempt's outcome. No race
//      is counted.
//  R9  The race counts (race_result: hedged, hedge won?) only when a hedge
//      was sent, was not refused, and the loser did not fail before the
//      winner's answer (a loser that already failed was not beaten; both
//      legs failing has no winner). When the loser is the cancelled hedge,
//      the count waits for the hedge's own first answer (R11): a refusal
//      then means there was no race.
//  R10 The permit of a half-open probe hedge: completed with the hedge's
//      own health when the hedge won, or when it failed while the primary
//      still ran (the probe's failure is the trial's outcome whatever the
//      primary does next: counted only as the winner's, a hedge that
//      failed fast while every primary hung never completed a trial, and
//      the breaker stayed half-open for good, letting probes through);
//      released when the primary won, when the hedge was refused or never
//      taken by the transport, or when the pool went away.
//  R11 The hedge's token is settled once, by the hedge's own first answer,
//      even when that answer comes after the race or the call ended: the
//      pool's refusal, or a transport that never took the request, gives
//      it back; anything else (an answer, a failure, a time-out, the
//      cancelled exchange's answer) counts it as fired. The race ending
//      first decides nothing: the pool answers every request exactly once
//      (a cancel answers the cancelled one), so the refusal may still
//      come. The owner must therefore stay alive while tokens_owed() > 0
//      (bounded: each hedge carries a time limit).
//  R12 The pool went away (on_transport_lost): no answer will come from
//      it, so every owed token counts as fired (what the pool did with the
//      hedge can no longer be learned; a dead pool cannot have refused
//      after the fact, and "fired" was the rule before this state machine
//      existed), a held race count is emitted, and the permit is released.
//  R13 What an attempt's end records (attempt_record): the latency from
//      the primary's send to the conclusion (the caller's view, whichever
//      leg won) for the latency sketch when the call is hedgeable, and the
//      outcome's health for the breakers and error counters. The owner
//      drops the record when the retry loop says the send never reached
//      the backend (a redial, a local retry, a full pool queue).
//  R14 What the owner can no longer learn is settled as R12 settles it: a
//      send whose answer the owner failed to read (on_answer_lost) or an
//      owner that stops with tokens owed (on_owner_stopped) counts each
//      owed token as fired, exactly once, and emits its held race; a call
//      that ends without a conclusion releases a held permit
//      (on_call_done).
//  R15 A hedge is not tried when, at its due time, the attempt has no more
//      time left than the delay — the key's learned latency at its hedge
//      percentile (or its warmup or hardcoded delay): it could not be
//      expected to finish before the attempt's deadline
//      (due_decision::would_miss_deadline; no gate asked, no token spent).
//  R16 A hedge the client's retry budget refuses after its token was
//      granted (on_budget_refused) is not sent: its permit is released and
//      its token goes back, as for an unwanted one.

#include "core/classify.hpp"
#include "core/time.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

namespace outbound {
inline namespace core {

/// Time point of the race: the actor clock's type (never read here).
using race_time = std::chrono::steady_clock::time_point;

/// One of the two legs of an attempt.
enum class race_leg : uint8_t {
  /// The attempt's first request (it may queue in the pool).
  primary,
  /// The delayed second request (it never queues).
  hedge,
};

/// "primary" / "hedge".
const char* to_string(race_leg l);

/// How one leg's exchange ended, as the race sees it.
struct leg_answer {
  enum class kind : uint8_t {
    /// The transport answered: `verdict` (core/classify.hpp) and
    /// `request_sent` say how.
    result,
    /// The leg's time limit (the attempt's) ran out without an answer; the
    /// request may have left.
    timed_out,
    /// The transport never took the request (its actor is gone or refused
    /// the message): a failure for the race, but nothing of a hedge left.
    undelivered,
  };
  kind what = kind::result;
  /// The classification of the transport's answer (kind::result).
  exchange_verdict verdict;
  /// exchange_result::request_sent of the answer (kind::result).
  bool request_sent = false;

  /// A transport answer classified as `v`.
  static leg_answer of(const exchange_verdict& v, bool request_sent);
  /// The leg's time limit ran out.
  static leg_answer timeout();
  /// The transport never took the request.
  static leg_answer undelivered();

  /// True for a definitive result: it ends the race (R6).
  bool definitive() const;
  /// True for the pool's refusal of a hedge: pool_overflow with nothing
  /// sent (R8).
  bool refusal() const;
  /// What the breakers learn: the verdict's health for a result, failure
  /// otherwise.
  call_health health() const;

private:
  /// The one shape of timeout() and undelivered(): no transport answer
  /// (`what`), a transport failure of kind `k` whose request may have left.
  static leg_answer failure(kind what, transport_error_kind k);
};

/// How a hedge's token is settled (R11): `fired` counts it
/// (hedged_requests, on_hedge_fired); `returned` puts it back in the
/// bucket.
enum class token_settlement : uint8_t { fired, returned };

/// "fired" / "returned".
const char* to_string(token_settlement s);

/// What to do with the half-open permit of the hedge (R10).
enum class permit_action : uint8_t {
  /// No permit held, or nothing to do now.
  none,
  /// Give the permit back (no trial counted).
  release,
  /// Complete the trial with the probe hedge's health.
  complete,
};

/// "none" / "release" / "complete".
const char* to_string(permit_action a);

/// A race to count (R9): hedge_wins or primary_wins of the key.
struct race_result {
  /// Always true when a result is emitted (a hedge went out).
  bool hedged = true;
  bool hedge_won = false;
};

/// What an attempt's end records (R13).
struct attempt_record {
  /// From the primary's send to the conclusion.
  duration latency{0};
  /// Feed `latency` to the latency sketch (the call is hedgeable).
  bool to_sketch = false;
  /// The outcome's health, for the error counters and the breakers.
  call_health health = call_health::success;
};

/// The answer to on_hedge_due.
enum class due_decision : uint8_t {
  /// Stale or unwanted (R2): nothing to do.
  ignore,
  /// Ask the breakers (then the budget, via on_gate).
  ask_gates,
  /// Not tried: the attempt's time left is no more than the delay (R15).
  would_miss_deadline,
};

/// The answer to on_gate.
enum class gate_decision : uint8_t {
  /// A breaker blocked the hedge: report circuit_blocked (R3).
  report_blocked,
  /// Allowed, but the hedge is no longer wanted: release the permit.
  release_permit,
  /// Allowed and wanted: ask the budget for a token.
  ask_token,
};

/// The answer to on_token.
enum class token_decision : uint8_t {
  /// Send the hedge with `budget`, then call on_hedge_sent.
  fire,
  /// The token was granted but the hedge is no longer wanted (R4).
  unwanted,
  /// The token was granted but the attempt has no time left (R4).
  no_time_left,
  /// No token (budget exhausted, or no reply).
  no_token,
  /// The token was granted but the client's retry budget refused the
  /// hedge (R16).
  budget_refused,
};

/// "fire", "unwanted", "no_time_left", "no_token", "budget_refused".
const char* to_string(token_decision d);

/// The answer to on_token, with what to do besides sending.
struct token_step {
  token_decision decision = token_decision::no_token;
  /// fire: the hedge's time limit (the attempt's remaining time), > 0.
  duration budget{0};

  /// Release the gate's permit (every decision but fire; a permit without
  /// a probe makes this a no-op).
  bool release_permit() const {
    return decision != token_decision::fire;
  }
  /// Give the granted token back (R4).
  bool return_token() const {
    return decision == token_decision::unwanted
           || decision == token_decision::no_time_left
           || decision == token_decision::budget_refused;
  }
};

/// What a leg's answer means for the race.
enum class answer_decision : uint8_t {
  /// Not a current leg (R5): nothing for the race; `token` may still be
  /// set.
  stale,
  /// The hedge was refused by the pool; the primary runs on alone (R8).
  refused,
  /// This leg failed while the other runs: keep its outcome, wait (R7).
  wait,
  /// The attempt is over: hand `outcome_of`'s outcome to the retry loop.
  conclude,
};

/// "stale", "refused", "wait", "conclude".
const char* to_string(answer_decision d);

/// The answer to on_answer: every field the owner acts on, in the order
/// the call actor acts (token, cancel, race, permit, then the retry loop
/// and `record`).
struct answer_step {
  answer_decision decision = answer_decision::stale;
  /// The hedge's first answer settles its token (R11), whatever the race.
  std::optional<token_settlement> token;
  /// A race count held for this (cancelled) hedge, now due (R9).
  std::optional<race_result> held_race;
  /// conclude: whose outcome the attempt ends with.
  race_leg outcome_of = race_leg::primary;
  /// conclude: true if that outcome is the failure kept earlier (R8: the
  /// refused hedge leaves the primary's kept failure), false if it is the
  /// answer just given.
  bool outcome_is_kept = false;
  /// The loser to cancel (R6).
  std::optional<race_leg> cancel;
  /// The race to count now (R9).
  std::optional<race_result> race;
  /// The hedge's permit (R10), on any decision but stale.
  permit_action permit = permit_action::none;
  /// What a `complete` permit records: the probe hedge's own health.
  call_health permit_health = call_health::failure;
  /// conclude: what the attempt records (R13).
  attempt_record record;
  /// conclude: the race reached a state its rules exclude (a refused hedge
  /// with no primary running and none kept). The attempt is concluded with
  /// the refusal so nothing is left in flight; the owner should end the
  /// call with an internal error rather than retry from that state.
  bool invariant_broken = false;
};

/// The answer to on_transport_lost (R12).
struct lost_step {
  /// Tokens owed, each now settled as fired.
  int tokens_fired = 0;
  /// Race counts held for those hedges, now due.
  std::vector<race_result> held_races;
  /// Release the hedge's permit.
  bool release_permit = false;
};

/// The hedge race of one call, attempt after attempt. Use: begin_attempt
/// for every send of the retry loop; set_delay once the delay is known;
/// arm a timer at hedge_due_at(); feed the timer, the gate replies, the
/// sends and the answers in; act on each returned decision. Send ids are
/// the owner's (non-zero, unique per call).
class hedge_race {
public:
  /// `hedgeable`: the call may be hedged (an idempotent request without a
  /// body); a call that is not still records its attempts (R13).
  explicit hedge_race(bool hedgeable = false) : hedgeable_(hedgeable) {
  }

  /// True if the call may be hedged.
  bool hedgeable() const {
    return hedgeable_;
  }

  /// The hedge delay of the call's key (the learned percentile or the
  /// warmup delay); until it is set no hedge is due. Ignored unless
  /// hedgeable.
  void set_delay(duration d);

  /// A new attempt's primary (`send_id`) was sent at `now` with time limit
  /// `budget`; the hedge gets what is left of it. Returns the attempt id
  /// every timer and gate reply of this attempt must carry.
  uint64_t begin_attempt(uint64_t send_id, race_time now, duration budget);

  /// The id of the current attempt (it changes when an attempt begins and
  /// when one concludes).
  uint64_t attempt() const {
    return attempt_;
  }

  /// When the hedge timer is due (R1), or nothing when no timer is to be
  /// armed (not hedgeable, no delay yet, already tried, primary over).
  /// A time at or before now means "at once".
  std::optional<race_time> hedge_due_at() const;

  /// True while attempt `attempt`'s primary of a hedgeable call still runs
  /// without a hedge and the call is not over (R2).
  bool hedge_wanted(uint64_t attempt) const;

  /// The hedge timer of `attempt` ran out at `now` (R1, R2, R15).
  /// ask_gates and would_miss_deadline mark the attempt's hedge as tried.
  due_decision on_hedge_due(uint64_t attempt, race_time now);

  /// The breakers answered for `attempt` (R3).
  gate_decision on_gate(uint64_t attempt, bool allowed) const;

  /// The budget answered for `attempt` at `now` (`granted` false also when
  /// the budget did not answer) (R4).
  token_step on_token(uint64_t attempt, bool granted, race_time now) const;

  /// The client's retry budget refused the hedge on_token said to fire
  /// (R16): the step that replaces `fire` (release the permit, give the
  /// token back).
  token_step on_budget_refused() const {
    token_step s;
    s.decision = token_decision::budget_refused;
    return s;
  }

  /// The hedge of the current attempt went out as `send_id` at `now`
  /// after a `fire`; `holds_probe` if its permit holds a half-open trial.
  /// Its token is owed from now on (R11).
  void on_hedge_sent(uint64_t send_id, race_time now, bool holds_probe);

  /// The leg a send id belongs to while it is in flight and the call is
  /// not over; nothing when stale (R5).
  std::optional<race_leg> leg_of(uint64_t send_id) const;

  /// True while either leg of the current attempt is in flight.
  bool any_in_flight() const {
    return primary_.in_flight || hedge_.in_flight;
  }

  /// Send `send_id` ended with `a` at `now` (R5-R11, R13).
  answer_step on_answer(uint64_t send_id, const leg_answer& a, race_time now);

  /// The owner could not read send `send_id`'s answer (its handler threw
  /// before or after on_answer): if that send's token is still owed it is
  /// settled now as fired, with a race held for it (R11, R14). Idempotent:
  /// a token already settled (by on_answer, on_transport_lost or an earlier
  /// call) is not settled again. The legs are left as they are; the owner
  /// ends the call (on_call_done) unless it already ended.
  answer_step on_answer_lost(uint64_t send_id);

  /// The call was answered (or failed) otherwise: no leg is the race's any
  /// more. Settles no token (R11: the hedge's own answer still does), but
  /// returns `release` when a half-open permit is still held (R10: a call
  /// that ends without a conclusion, e.g. through a handler fault, would
  /// otherwise keep the breaker's probe slot forever).
  [[nodiscard]] permit_action on_call_done();

  /// The transport is gone (R12). Ends the call's race like on_call_done.
  lost_step on_transport_lost();

  /// The owner stops (its actor terminates) with no more answers to read
  /// (R14): settles every owed token as fired, returns the held races and
  /// whether a permit is held, exactly like on_transport_lost. A second
  /// call returns nothing.
  lost_step on_owner_stopped() {
    return on_transport_lost();
  }

  /// Hedges whose token is not settled yet (R11): the owner must not stop
  /// while this is non-zero.
  size_t tokens_owed() const {
    return owed_.size();
  }

private:
  struct leg_state {
    uint64_t send_id = 0;
    bool in_flight = false;
    race_time sent_at;
  };
  struct owed_token {
    uint64_t send_id = 0;
    std::optional<race_result> held_race;
  };

  leg_state& leg(race_leg l) {
    return l == race_leg::primary ? primary_ : hedge_;
  }
  void conclude(answer_step& s, race_leg winner, call_health health,
                race_time now);

  bool hedgeable_;
  std::optional<duration> delay_;
  uint64_t attempt_ = 0;
  bool done_ = false;
  leg_state primary_;
  leg_state hedge_;
  /// The attempt's gates started (at most one hedge per attempt).
  bool hedge_tried_ = false;
  /// The attempt's hedge was sent (it may have been refused since).
  bool hedge_sent_ = false;
  bool hedge_refused_ = false;
  /// The leg whose failure is kept while the other runs, and its health.
  std::optional<race_leg> kept_;
  call_health kept_health_ = call_health::failure;
  race_time deadline_;
  /// The hedge in flight holds a half-open permit.
  bool permit_held_ = false;
  std::vector<owed_token> owed_;
};

} // namespace core
} // namespace outbound
