#include "core/hedge_race.hpp"

#include <algorithm>

namespace outbound {
inline namespace core {

const char* to_string(race_leg l) {
  switch (l) {
    case race_leg::primary: return "primary";
    case race_leg::hedge: return "hedge";
  }
  return "?";
}

const char* to_string(token_settlement s) {
  switch (s) {
    case token_settlement::fired: return "fired";
    case token_settlement::returned: return "returned";
  }
  return "?";
}

const char* to_string(permit_action a) {
  switch (a) {
    case permit_action::none: return "none";
    case permit_action::release: return "release";
    case permit_action::complete: return "complete";
  }
  return "?";
}

const char* to_string(token_decision d) {
  switch (d) {
    case token_decision::fire: return "fire";
    case token_decision::unwanted: return "unwanted";
    case token_decision::no_time_left: return "no_time_left";
    case token_decision::no_token: return "no_token";
    case token_decision::budget_refused: return "budget_refused";
  }
  return "?";
}

const char* to_string(answer_decision d) {
  switch (d) {
    case answer_decision::stale: return "stale";
    case answer_decision::refused: return "refused";
    case answer_decision::wait: return "wait";
    case answer_decision::conclude: return "conclude";
  }
  return "?";
}

// -- leg_answer --------------------------------------------------------------

leg_answer leg_answer::of(const exchange_verdict& v, bool request_sent) {
  leg_answer a;
  a.what = kind::result;
  a.verdict = v;
  a.request_sent = request_sent;
  return a;
}

leg_answer leg_answer::failure(kind what, transport_error_kind k) {
  leg_answer a;
  a.what = what;
  a.verdict.cls = outcome_class::transport_failure;
  a.verdict.kind = k;
  a.verdict.health = call_health::failure;
  a.request_sent = true; // it may have left
  return a;
}

leg_answer leg_answer::timeout() {
  return failure(kind::timed_out, transport_error_kind::timeout);
}

leg_answer leg_answer::undelivered() {
  // The call actor hands the retry loop an `interrupted` exchange whose
  // request may have left; the race reads it the same way.
  return failure(kind::undelivered, transport_error_kind::interrupted);
}

bool leg_answer::definitive() const {
  return what == kind::result && verdict.definitive();
}

bool leg_answer::refusal() const {
  // The predicate the pool's hedge refusal meets (connection_pool.cpp,
  // acquire_kind::busy); a queue-full overflow of a primary meets it too,
  // but only a hedge's answer is read as a refusal.
  return what == kind::result
         && verdict.kind == transport_error_kind::pool_overflow
         && !request_sent;
}

call_health leg_answer::health() const {
  return what == kind::result ? verdict.health : call_health::failure;
}

// -- hedge_race --------------------------------------------------------------

void hedge_race::set_delay(duration d) {
  if (hedgeable_)
    delay_ = d;
}

uint64_t hedge_race::begin_attempt(uint64_t send_id, race_time now,
                                   duration budget) {
  ++attempt_;
  primary_ = leg_state{send_id, true, now};
  hedge_ = leg_state{};
  hedge_tried_ = false;
  hedge_sent_ = false;
  hedge_refused_ = false;
  kept_.reset();
  permit_held_ = false;
  deadline_ = now + budget;
  return attempt_;
}

std::optional<race_time> hedge_race::hedge_due_at() const {
  if (!hedgeable_ || !delay_ || hedge_tried_ || !primary_.in_flight || done_)
    return std::nullopt;
  return primary_.sent_at + *delay_;
}

bool hedge_race::hedge_wanted(uint64_t attempt) const {
  return hedgeable_ && !done_ && attempt == attempt_ && primary_.in_flight
         && !hedge_.in_flight && !hedge_sent_;
}

due_decision hedge_race::on_hedge_due(uint64_t attempt, race_time now) {
  if (!hedge_wanted(attempt) || hedge_tried_)
    return due_decision::ignore;
  hedge_tried_ = true;
  if (delay_ && deadline_ - now <= *delay_)
    return due_decision::would_miss_deadline;
  return due_decision::ask_gates;
}

gate_decision hedge_race::on_gate(uint64_t attempt, bool allowed) const {
  // A blocked breaker is worth reporting whether or not the hedge is still
  // wanted: the breaker did block it.
  if (!allowed)
    return gate_decision::report_blocked;
  return hedge_wanted(attempt) ? gate_decision::ask_token
                               : gate_decision::release_permit;
}

token_step hedge_race::on_token(uint64_t attempt, bool granted,
                                race_time now) const {
  token_step s;
  if (!granted) {
    s.decision = token_decision::no_token;
  } else if (!hedge_wanted(attempt)) {
    s.decision = token_decision::unwanted;
  } else if (deadline_ - now <= duration{0}) {
    s.decision = token_decision::no_time_left;
  } else {
    s.decision = token_decision::fire;
    s.budget = deadline_ - now;
  }
  return s;
}

void hedge_race::on_hedge_sent(uint64_t send_id, race_time now,
                               bool holds_probe) {
  hedge_ = leg_state{send_id, true, now};
  hedge_sent_ = true;
  permit_held_ = holds_probe;
  owed_.push_back(owed_token{send_id, std::nullopt});
}

std::optional<race_leg> hedge_race::leg_of(uint64_t send_id) const {
  if (done_)
    return std::nullopt;
  if (primary_.in_flight && primary_.send_id == send_id)
    return race_leg::primary;
  if (hedge_.in_flight && hedge_.send_id == send_id)
    return race_leg::hedge;
  return std::nullopt;
}

answer_step hedge_race::on_answer(uint64_t send_id, const leg_answer& a,
                                  race_time now) {
  answer_step s;
  // R11: the hedge's own first answer settles its token, before anything
  // else and whether or not it is still a leg of the race — a refusal that
  // crosses the primary's answer must still give the token back.
  auto owed
    = std::find_if(owed_.begin(), owed_.end(),
                   [&](const owed_token& t) { return t.send_id == send_id; });
  if (owed != owed_.end()) {
    bool back = a.what == leg_answer::kind::undelivered || a.refusal();
    s.token = back ? token_settlement::returned : token_settlement::fired;
    if (!back)
      s.held_race = owed->held_race;
    owed_.erase(owed);
  }
  auto which = leg_of(send_id);
  if (!which)
    return s; // stale
  auto& l = leg(*which);
  auto other_leg
    = *which == race_leg::primary ? race_leg::hedge : race_leg::primary;
  auto& other = leg(other_leg);
  l.in_flight = false;
  if (*which == race_leg::hedge && a.refusal()) {
    // R8: no leg of the race at all.
    hedge_refused_ = true;
    if (permit_held_) {
      s.permit = permit_action::release;
      permit_held_ = false;
    }
    if (other.in_flight) {
      s.decision = answer_decision::refused;
      return s;
    }
    if (kept_ == race_leg::primary) {
      // The primary failed first: its failure is the attempt's outcome.
      s.outcome_is_kept = true;
      conclude(s, race_leg::primary, kept_health_, now);
      return s;
    }
    // Unreachable: the hedge is in flight and the call is not over, so
    // this attempt's primary either still runs (handled above) or ended
    // with an answer while the hedge ran; a definitive answer would have
    // cancelled the hedge (R6: not in flight), anything else is kept (R7:
    // kept_ == primary, handled above). begin_attempt clears the hedge,
    // on_call_done and on_transport_lost end the race (leg_of: stale).
    // Should it ever be reached, "refused" would leave the owner waiting
    // for a leg that is gone; concluding with the refusal ends the
    // attempt instead, and the step says so (an assert would vanish under
    // NDEBUG, i.e. in every release build, and nobody would learn of it).
    s.invariant_broken = true;
    conclude(s, race_leg::hedge, a.health(), now);
    return s;
  }
  if (other.in_flight) {
    if (!a.definitive()) {
      // R7: the other leg may still succeed.
      kept_ = *which;
      kept_health_ = a.health();
      s.decision = answer_decision::wait;
      if (*which == race_leg::hedge && permit_held_) {
        // R10: the probe hedge failed; that is the trial's outcome,
        // whatever the primary does next. A hedge the transport never
        // took tried nothing.
        permit_held_ = false;
        if (a.what == leg_answer::kind::undelivered) {
          s.permit = permit_action::release;
        } else {
          s.permit = permit_action::complete;
          s.permit_health = a.health();
        }
      }
      return s;
    }
    // R6: the other leg lost.
    other.in_flight = false;
    s.cancel = other_leg;
  }
  conclude(s, *which, a.health(), now);
  return s;
}

void hedge_race::conclude(answer_step& s, race_leg winner, call_health health,
                          race_time now) {
  // A new attempt id: the attempt's timers and gate replies are stale now.
  ++attempt_;
  s.decision = answer_decision::conclude;
  s.outcome_of = winner;
  s.record.latency = now - primary_.sent_at;
  s.record.to_sketch = hedgeable_;
  s.record.health = health;
  // R8: a refused hedge never left; its permit went back at the refusal.
  if (!hedge_sent_ || hedge_refused_)
    return;
  bool hedge_won = winner == race_leg::hedge;
  auto loser = hedge_won ? race_leg::primary : race_leg::hedge;
  // R9: a loser that failed before the winner's answer was not beaten.
  if (kept_ != loser) {
    race_result r{true, hedge_won};
    auto owed
      = std::find_if(owed_.begin(), owed_.end(), [&](const owed_token& t) {
          return t.send_id == hedge_.send_id;
        });
    if (owed != owed_.end())
      owed->held_race = r; // the cancelled hedge may yet turn out refused
    else
      s.race = r;
  }
  if (permit_held_) {
    s.permit = hedge_won ? permit_action::complete : permit_action::release;
    s.permit_health = health;
    permit_held_ = false;
  }
}

answer_step hedge_race::on_answer_lost(uint64_t send_id) {
  answer_step s;
  auto owed
    = std::find_if(owed_.begin(), owed_.end(),
                   [&](const owed_token& t) { return t.send_id == send_id; });
  if (owed == owed_.end())
    return s; // not a hedge, or its token is settled already
  // What the answer was can no longer be learned: the request left, so it
  // counts as fired (as R12 decides for a pool that went away).
  s.token = token_settlement::fired;
  s.held_race = owed->held_race;
  owed_.erase(owed);
  return s;
}

permit_action hedge_race::on_call_done() {
  done_ = true;
  primary_.in_flight = false;
  hedge_.in_flight = false;
  if (!permit_held_)
    return permit_action::none;
  permit_held_ = false;
  return permit_action::release;
}

lost_step hedge_race::on_transport_lost() {
  lost_step s;
  s.release_permit = on_call_done() == permit_action::release;
  s.tokens_fired = static_cast<int>(owed_.size());
  for (auto& t : owed_)
    if (t.held_race)
      s.held_races.push_back(*t.held_race);
  owed_.clear();
  return s;
}

} // namespace core
} // namespace outbound
