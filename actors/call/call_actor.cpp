#include "actors/call/call_actor.hpp"

#include "actors/call/call_result.hpp"

#include "actors/call/detail/call_actor_testing.hpp"
#include "actors/call/detail/hedging_context.hpp"
#include "actors/call/retry_state.hpp"
#include "actors/handler_guard.hpp"
#include "core/request_builder.hpp"

#include "core/hedge_race.hpp"

#include "core/time.hpp"
#include "protocol/json_parse.hpp"

#include <caf/actor_cast.hpp>
#include <caf/sec.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <algorithm>
#include <cctype>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace outbound {
inline namespace call {

namespace {

/// The hedge timer of attempt `token` ran out (sent by a call actor to
/// itself; stale tokens are dropped).
struct hedge_due {
  uint64_t token = 0;
};

} // namespace

} // namespace call
} // namespace outbound

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::hedge_due)

namespace outbound {
inline namespace call {

namespace {

struct call_state {
  std::shared_ptr<const call_context> ctx;
  /// Fault injection (detail/call_actor_testing.hpp); null outside tests.
  std::shared_ptr<const detail::call_test_hooks> hooks;
  call_rng rng;
  caf::typed_response_promise<call_outcome> rp;
  bool started = false;
  bool done = false;
  call_request call;
  /// The request as built, until the first send takes it; a later send (a
  /// retry, a redial, the hedge) builds it again from `call` with the same
  /// request id (take_request), so that no call pays a copy of its request
  /// for a send it may never make.
  std::optional<http_request> base;
  /// The request's method as sent (upper case).
  std::string method;
  std::string request_id;
  std::optional<retry_state> retry;
  retry_time start;
  /// Number of the latest send (attempts, redials, local retries and
  /// hedges); the stale-id of timers and transport answers.
  uint64_t send_id = 0;
  int attempt = 0;
  /// When the attempt's primary was sent (a hedging event's delay).
  caf::actor_clock::time_point attempt_sent;

  /// How a leg ended: a transport answer, or the attempt's timer.
  struct leg_end {
    bool timed_out = false;
    exchange_result result;
  };

  /// The race of each attempt: every rule lives in core/hedge_race.hpp;
  /// the actor only sends, cancels and records what it decides.
  core::hedge_race race;
  /// Exchange ids of the current attempt's legs (primary, hedge), for
  /// cancels.
  uint64_t exchange_of[2] = {0, 0};
  /// The failure of a leg that ended while the other ran (the race keeps
  /// which one; at most one at a time): the attempt's result if the race
  /// says so.
  std::optional<leg_end> kept;

  // -- hedging (ctx->hedging set and the call eligible) --------------------
  /// The call's stats key ("endpoint:<name>" / "host:<host>:<port>") and
  /// the host key of the breakers' host tier.
  std::string key;
  std::string host_key;
  /// This actor's id: the owner of the hedge tokens it asks for.
  uint64_t owner = 0;
  /// The hedges sent (send id) with when the client's retry budget paid
  /// for each, until the hedge's own first answer settles it: a hedge the
  /// pool refused gives its withdrawal back.
  std::vector<std::pair<uint64_t, caf::actor_clock::time_point>> hedges_paid;
  /// When the retry budget paid for the retry being made (act), until the
  /// attempt it paid for ends: one that never left (the deadline passed
  /// during the backoff, the pool refused it) gives the withdrawal back.
  std::optional<caf::actor_clock::time_point> retry_paid_at;
  /// Whether it ever asked for a hedge token (then it abandons its lease
  /// when it stops).
  bool asked_token = false;
  const effective_hedge_config* hcfg = nullptr;
  /// The half-open permit of the hedge sent in this attempt (held only when
  /// it holds a probe).
  std::optional<hedge_permit> permit;
  /// Half-open permits the breakers granted for a hedge whose token request
  /// is still out, by attempt id. Kept here, not in the pending handlers,
  /// from the gate's reply on: whatever ends the wait (the token's reply, a
  /// fault, the call's end, the actor's death) finds and settles them.
  std::vector<std::pair<uint64_t, hedge_permit>> gate_permits;
  /// Gate requests not answered yet; the actor quits only at zero.
  int gates_pending = 0;
  /// x-retry-count of the current attempt.
  int retry_count = 0;

  /// Runs when the actor terminates for any reason: what the call still
  /// holds is given back, and a caller still waiting is answered at once,
  /// never left to its own timeout.
  ~call_state() {
    settle_held();
    // The promise, not `done`, says whether the caller still waits: deliver
    // sets `done` before it answers, and a throw in between must not
    // leave the caller to its own timeout.
    if (!rp.pending())
      return;
    call_outcome o;
    o.request_id = request_id;
    auto& e = o.error.emplace();
    e.kind = error_kind::service_unavailable;
    e.detail = "call actor stopped";
    e.request_id = request_id;
    rp.deliver(std::move(o));
  }

  /// The actor stops while it still holds something (it was killed, or a
  /// handler outside `guarded` threw): no answer can reach it any more, so
  /// every owed token counts as fired, every race held for one is counted
  /// and every held half-open permit (the hedge's, and those waiting for a
  /// token reply) goes back, exactly once (a normal quit
  /// holds nothing: maybe_quit waits for the tokens; core/hedge_race.hpp,
  /// R14), and the budget lease is abandoned. Runs inside the dying actor's
  /// cleanup, hence anonymous sends.
  void settle_held() noexcept {
    if (!ctx || !ctx->hedging)
      return;
    try {
      const auto& h = *ctx->hedging;
      auto lost = race.on_owner_stopped();
      for (int i = 0; i < lost.tokens_fired; ++i)
        caf::anon_send(h.stats, hedge_token_outcome{key, true, owner});
      for (const auto& r : lost.held_races)
        caf::anon_send(h.stats, hedge_race_result{key, r.hedged, r.hedge_won});
      if (permit && permit->holds_probe())
        caf::anon_send(h.breakers, breaker_release{std::move(*permit)});
      permit.reset();
      for (auto& gp : gate_permits)
        caf::anon_send(h.breakers, breaker_release{std::move(gp.second)});
      gate_permits.clear();
    } catch (...) {
      // Out of memory while dying: still abandon the lease below.
    }
    // Last, also after a normal quit (then the lease is empty and this is a
    // no-op): a token granted while this actor died is still on its lease.
    // Every message of this actor to the stats actor is enqueued directly
    // from its own thread, at normal priority, and the stats actor never
    // skips a message, so the outcomes above are settled before it.
    if (asked_token) {
      try {
        caf::anon_send(ctx->hedging->stats, hedge_token_abandon{owner});
      } catch (...) {
      }
    }
  }

  static inline const char* name = "outbound.call";
};

/// The call actor's own interface: the public one plus its timers:
/// `(retry_atom, send_id)` the end of a backoff wait (stale ids are
/// dropped) and `hedge_due` an attempt's hedge timer. Spawned with this
/// one, handed out as call_actor.
using call_impl_actor
  = call_actor::extend<caf::reacts_to<retry_atom, uint64_t>,
                       caf::reacts_to<hedge_due>>;

using self_ptr = call_impl_actor::stateful_pointer<call_state>;

// Runs the test hook at `where` (detail/call_actor_testing.hpp), if any.
void fault_point(self_ptr self, detail::call_fault_point where, uint64_t id) {
  const auto& hooks = self->state.hooks;
  if (hooks && hooks->at)
    hooks->at(where, id);
}

client_event make_event(self_ptr self, event_kind kind) {
  auto& st = self->state;
  return call_event(kind, st.request_id,
                    st.method.empty() ? st.call.method : st.method,
                    st.call.path, st.attempt);
}

// Whether anyone receives events: none is built otherwise.
bool observed(self_ptr self) {
  return static_cast<bool>(self->state.ctx->observer);
}

void emit(self_ptr self, client_event ev) {
  auto& st = self->state;
  redact(st.ctx->cfg, ev.cause);
  self->send(st.ctx->observer, std::move(ev));
}

int64_t latency_ns(self_ptr self) {
  auto& st = self->state;
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
           self->clock().now() - st.start)
    .count();
}

// The actor stays until its gate requests are answered and every hedge it
// sent has settled its token with its own first answer (core/hedge_race.hpp,
// R11; each hedge carries a time limit, so this ends).
void maybe_quit(self_ptr self) {
  auto& st = self->state;
  if (st.done && st.gates_pending == 0 && st.race.tokens_owed() == 0)
    self->quit();
}

void gate_answered(self_ptr self) {
  --self->state.gates_pending;
  maybe_quit(self);
}

// Feeds one attempt's outcome — the winner of its race: a cancelled loser
// is never observed — to the hedging actors: its latency to the sketch, its
// health to the error counters and the breakers. Every attempt counts, not
// only the call's last one, so a backend that fails half of its attempts
// opens its breaker even when retries hide the failures from the caller
// (Finagle's FailureAccrualFactory and gRPC's outlier detection count
// per request to a host, not per logical call).
void record_attempt(self_ptr self, const core::attempt_record& rec) {
  auto& st = self->state;
  const auto& h = st.ctx->hedging;
  if (!h || st.key.empty())
    return;
  if (rec.to_sketch)
    self->send(h->stats,
               hedge_observation{
                 st.key, std::chrono::duration<double>(rec.latency).count(),
                 rec.health});
  self->send(h->breakers, breaker_record{st.host_key, st.key,
                                         st.hcfg->breaker, rec.health});
}

void apply_permit(self_ptr self, core::permit_action a, call_health health);
void release_held_permits(self_ptr self);

// The retry the budget paid for never left: the withdrawal goes back (as
// settle_budget does for a hedge).
void refund_retry(self_ptr self) {
  auto& st = self->state;
  if (st.retry_paid_at && st.ctx->budget)
    st.ctx->budget->refund(extra_kind::retry, *st.retry_paid_at,
                           self->clock().now());
  st.retry_paid_at.reset();
}

void deliver(self_ptr self, call_outcome o) {
  auto& st = self->state;
  if (st.done) {
    // A fault path may end a call that is already answered: the actor must
    // still go once nothing is left in flight.
    maybe_quit(self);
    return;
  }
  st.done = true;
  refund_retry(self); // a paid retry still held never left
  // Settles no token: a hedge still out settles its token by its own
  // answer. A permit still held (the call ended without a conclusion) goes
  // back (core/hedge_race.hpp, R14).
  apply_permit(self, st.race.on_call_done(), call_health::failure);
  release_held_permits(self);
  finalize_outcome(st.ctx->cfg, o);
  st.rp.deliver(std::move(o));
  maybe_quit(self);
}

void finish_error(self_ptr self, call_error e) {
  auto& st = self->state;
  int attempts = st.retry ? st.retry->attempts() : e.attempts;
  auto o = error_outcome(std::move(e), st.request_id, attempts);
  if (observed(self)) {
    auto ev = make_event(self, event_kind::failed);
    fill_failed(ev, *o.error, latency_ns(self));
    emit(self, std::move(ev));
  }
  deliver(self, std::move(o));
}

void finish_response(self_ptr self, http_response resp,
                     give_up_reason reason = give_up_reason::none) {
  auto& st = self->state;
  auto o = response_outcome(st.ctx->cfg, st.call, st.request_id,
                            st.retry->attempts(), resp);
  if (o.error)
    o.error->reason = reason;
  if (observed(self)) {
    auto ev = make_event(self, event_kind::answered);
    fill_answered(ev, o, latency_ns(self), resp.body.size());
    ev.reason = reason; // a raw call has no error to carry it
    emit(self, std::move(ev));
  }
  deliver(self, std::move(o));
}

void send_attempt(self_ptr self);

void act(self_ptr self, const retry_step& step, http_response* resp) {
  auto& st = self->state;
  switch (step.decision) {
    case retry_decision::answer:
      finish_response(self, std::move(*resp));
      return;
    case retry_decision::retry_after:
    case retry_decision::retry_local: {
      // A counted retry is extra load: the client's budget pays for it or
      // the call ends here (a local retry sent nothing the first time).
      // A retry still paid for here never left (only a redial's not_sent
      // keeps it): a new counted retry pays anew, that one goes back.
      refund_retry(self);
      if (step.decision == retry_decision::retry_after && st.ctx->budget) {
        auto now = self->clock().now();
        if (!st.ctx->budget->try_withdraw(extra_kind::retry, now)) {
          act(self, st.retry->refuse_retry(step), resp);
          return;
        }
        st.retry_paid_at = now;
      }
      if (observed(self)) {
        auto ev = make_event(self, event_kind::retrying);
        fill_retrying(ev, step, resp);
        emit(self, std::move(ev));
      }
      auto me = caf::actor_cast<call_impl_actor>(self);
      if (step.delay.count() == 0)
        self->send(me, retry_atom_v, st.send_id);
      else
        self->delayed_send(me, step.delay, retry_atom_v, st.send_id);
      return;
    }
    case retry_decision::redial: {
      if (observed(self)) {
        auto ev = make_event(self, event_kind::redialing);
        ev.cause = step.cause;
        ev.cause_kind = step.cause_kind;
        emit(self, std::move(ev));
      }
      send_attempt(self);
      return;
    }
    case retry_decision::give_up_attempts:
    case retry_decision::give_up_deadline:
    case retry_decision::give_up_budget:
    case retry_decision::not_retryable:
      if (step.answer_with_response && resp)
        finish_response(self, std::move(*resp), step.reason);
      else
        finish_error(self, step.error);
      return;
  }
}

size_t index(core::race_leg l) {
  return l == core::race_leg::primary ? 0 : 1;
}

void cancel_leg(self_ptr self, core::race_leg l) {
  auto& st = self->state;
  self->send(st.ctx->transport, cancel_atom_v, st.exchange_of[index(l)]);
}

// Settles a hedge's token (hedge_token_outcome): fired counts it
// (hedged_requests, on_hedge_fired), returned gives it back to the bucket.
void settle_token(self_ptr self, core::token_settlement s) {
  auto& st = self->state;
  self->send(st.ctx->hedging->stats,
             hedge_token_outcome{st.key, s == core::token_settlement::fired,
                                 st.owner});
}

void count_race(self_ptr self, const core::race_result& r) {
  auto& st = self->state;
  self->send(st.ctx->hedging->stats,
             hedge_race_result{st.key, r.hedged, r.hedge_won});
}

// Sends the release of `p` if it holds a probe. By reference: the caller
// drops its copy only once the release was sent.
void release_permit(self_ptr self, const hedge_permit& p) {
  auto& st = self->state;
  if (p.holds_probe())
    self->send(st.ctx->hedging->breakers, breaker_release{p});
}

void apply_permit(self_ptr self, core::permit_action a, call_health health) {
  auto& st = self->state;
  if (a == core::permit_action::none || !st.permit)
    return;
  const auto& h = st.ctx->hedging;
  if (a == core::permit_action::complete)
    self->send(h->breakers, breaker_complete{std::move(*st.permit), health});
  else
    self->send(h->breakers, breaker_release{std::move(*st.permit)});
  st.permit.reset();
}

// Hedge `send_id`'s token was settled (R11): a hedge that never left (the
// pool refused it, the transport never took it) gives the retry budget's
// withdrawal back; one that left keeps it.
void settle_budget(self_ptr self, uint64_t send_id,
                   core::token_settlement how) {
  auto& st = self->state;
  auto i = std::find_if(st.hedges_paid.begin(), st.hedges_paid.end(),
                        [&](const auto& p) { return p.first == send_id; });
  if (i == st.hedges_paid.end())
    return;
  if (how == core::token_settlement::returned && st.ctx->budget)
    st.ctx->budget->refund(extra_kind::hedge, i->second, self->clock().now());
  st.hedges_paid.erase(i);
}

// Send `send_id` ended (`a` as the race reads it, `e` as the retry loop
// does): acts on the race's decision.
void on_answer(self_ptr self, uint64_t send_id, const core::leg_answer& a,
               call_state::leg_end e) {
  auto& st = self->state;
  auto step = st.race.on_answer(send_id, a, self->clock().now());
  if (step.token) {
    settle_token(self, *step.token);
    settle_budget(self, send_id, *step.token);
  }
  if (step.held_race)
    count_race(self, *step.held_race);
  switch (step.decision) {
    case core::answer_decision::stale:
      maybe_quit(self); // the last owed token may just have settled
      return;
    case core::answer_decision::refused:
      apply_permit(self, step.permit, step.permit_health);
      return; // the primary runs alone, as if never hedged
    case core::answer_decision::wait:
      apply_permit(self, step.permit, step.permit_health);
      st.kept = std::move(e);
      return; // the other leg may still succeed: let it run
    case core::answer_decision::conclude:
      break;
  }
  if (step.cancel)
    cancel_leg(self, *step.cancel);
  if (step.race)
    count_race(self, *step.race);
  apply_permit(self, step.permit, step.permit_health);
  auto outcome = step.outcome_is_kept ? std::move(*st.kept) : std::move(e);
  st.kept.reset();
  if (step.invariant_broken) {
    // The race reached a state its rules exclude (core/hedge_race.cpp) and
    // concluded the attempt so nothing is in flight. Retrying from there
    // would trust that state: the call ends with an internal error the
    // caller and the observer ('failed', its cause) both see.
    call_error err;
    err.kind = error_kind::service_unavailable;
    err.detail = "internal error in call actor: the hedge race refused a "
                 "hedge with no primary running or kept";
    finish_error(self, std::move(err));
    return;
  }
  if (!outcome.timed_out
      && outcome.result.error == transport_error_kind::pool_overflow
      && !outcome.result.request_sent)
    refund_retry(self);
  else if (outcome.timed_out || outcome.result.request_sent
           || outcome.result.error != transport_error_kind::not_sent)
    st.retry_paid_at.reset(); // it may have left, or the redial is the same
  auto next = outcome.timed_out
                ? st.retry->on_attempt_timeout(self->clock().now(), st.rng)
                : st.retry->on_result(outcome.result, self->clock().now(),
                                      st.ctx->wall_clock(), st.rng);
  if (reached_backend(next))
    record_attempt(self, step.record);
  act(self, next, outcome.timed_out ? nullptr : &outcome.result.response);
}

void on_result(self_ptr self, uint64_t send_id, exchange_result& r) {
  auto& st = self->state;
  fault_point(self, detail::call_fault_point::answer, send_id);
  // Classified as the retry loop classifies it (core/classify.hpp).
  auto verdict = classify_exchange(exchange_view::of(r, st.retry->idempotent()),
                                   st.retry->retry_statuses());
  auto a = core::leg_answer::of(verdict, r.request_sent);
  call_state::leg_end e;
  e.result = std::move(r);
  on_answer(self, send_id, a, std::move(e));
}

void on_failure(self_ptr self, uint64_t send_id, const caf::error& err) {
  auto& st = self->state;
  fault_point(self, detail::call_fault_point::answer, send_id);
  call_state::leg_end e;
  e.timed_out = err == caf::sec::request_timeout;
  auto leg = st.race.leg_of(send_id);
  if (e.timed_out) {
    // A timed-out connection may be stuck mid-response: the transport must
    // close it, never pool it again. A late answer is dropped by CAF.
    if (leg)
      cancel_leg(self, *leg);
  } else {
    // The transport actor is gone or refused the message: a broken exchange
    // whose request may have left.
    e.result.exchange_id = leg ? st.exchange_of[index(*leg)] : 0;
    e.result.error = transport_error_kind::interrupted;
    e.result.request_sent = true;
    e.result.detail = "transport unavailable: " + self->system().render(err);
  }
  // Timed out: it may have left. Any other error: the transport never took
  // it.
  auto a = e.timed_out ? core::leg_answer::timeout()
                       : core::leg_answer::undelivered();
  on_answer(self, send_id, a, std::move(e));
}

// The handler of send `send_id`'s answer threw (anywhere: before the race
// read the answer or after): its token is settled now if it is still owed
// (idempotent, core/hedge_race.hpp R14), and the call ends with the typed
// error `e`, or, when it was answered already, the actor goes once nothing
// is left in flight.
void on_answer_fault(self_ptr self, uint64_t send_id, call_error e) {
  auto& st = self->state;
  auto step = st.race.on_answer_lost(send_id);
  if (step.token)
    settle_token(self, *step.token);
  if (step.held_race)
    count_race(self, *step.held_race);
  if (st.done) {
    maybe_quit(self);
    return;
  }
  finish_error(self, std::move(e));
}

// Sends `req` as leg `l` with time limit `budget`; returns its send id.
uint64_t send_leg(self_ptr self, core::race_leg l, http_request req,
                  std::chrono::nanoseconds budget) {
  auto& st = self->state;
  auto send_id = ++st.send_id;
  auto exchange_id = (static_cast<uint64_t>(self->id()) << 20)
                     | (send_id & 0xFFFFF);
  st.exchange_of[index(l)] = exchange_id;
  req.exchange_id = exchange_id;
  req.timeout_ns = budget.count();
  // A throw while handling the answer (a retry decision, a JSON body) ends
  // the call with a typed error, not the actor; the send's token is
  // settled whether or not the throw came before the race read the answer.
  auto failed = [self, send_id](call_error e) {
    on_answer_fault(self, send_id, std::move(e));
  };
  self->request(st.ctx->transport, budget, std::move(req))
    .then(
      [self, send_id, failed](exchange_result& r) {
        guarded("call actor", [&] { on_result(self, send_id, r); }, failed);
      },
      [self, send_id, failed](caf::error& err) {
        guarded("call actor", [&] { on_failure(self, send_id, err); },
                failed);
      });
  return send_id;
}

void arm_hedge_timer(self_ptr self) {
  auto& st = self->state;
  auto due = st.race.hedge_due_at();
  if (!due)
    return;
  auto now = self->clock().now();
  auto me = caf::actor_cast<call_impl_actor>(self);
  if (*due <= now)
    self->send(me, hedge_due{st.race.attempt()});
  else
    self->delayed_send(me, *due - now, hedge_due{st.race.attempt()});
}

// The gate permit held for attempt `token`'s hedge, or end().
std::vector<std::pair<uint64_t, hedge_permit>>::iterator
gate_permit_of(call_state& st, uint64_t token) {
  return std::find_if(st.gate_permits.begin(), st.gate_permits.end(),
                      [token](const auto& gp) { return gp.first == token; });
}

// Moves the breakers' permit for attempt `token` into the call's state
// (only a half-open probe is worth holding). On success `p` is left
// without a probe; if this throws, `p` still holds it.
void hold_gate_permit(self_ptr self, uint64_t token, hedge_permit& p) {
  auto& st = self->state;
  if (!p.holds_probe())
    return;
  st.gate_permits.reserve(st.gate_permits.size() + 1);
  // Cannot throw after the reserve. A moved-from permit would still claim
  // its generations, hence the exchange with an empty one.
  st.gate_permits.emplace_back(token, std::exchange(p, hedge_permit{}));
}

// Gives back the gate permit held for attempt `token`, if any. The slot is
// dropped only once the release was sent.
void release_gate_permit(self_ptr self, uint64_t token) {
  auto& st = self->state;
  auto i = gate_permit_of(st, token);
  if (i == st.gate_permits.end())
    return;
  release_permit(self, i->second);
  st.gate_permits.erase(i);
}

// The call is over: no hedge can go out any more, so every permit still
// held goes back (the hedge's, when the race did not settle it, and those
// waiting for a token reply).
void release_held_permits(self_ptr self) {
  auto& st = self->state;
  if (st.permit) {
    release_permit(self, *st.permit);
    st.permit.reset();
  }
  while (!st.gate_permits.empty()) {
    release_permit(self, st.gate_permits.back().second);
    st.gate_permits.pop_back();
  }
}

// The request of the next send: the first build, moved out, or the same
// request built again (core/request_builder.hpp, rebuild_request). nullopt
// when the build failed; the call then ended with its error.
std::optional<http_request> take_request(self_ptr self) {
  auto& st = self->state;
  if (st.base) {
    auto r = std::move(*st.base);
    st.base.reset();
    return r;
  }
  auto built
    = rebuild_request(st.ctx->cfg, st.ctx->url, st.call, st.request_id, st.rng);
  if (built.error) {
    finish_error(self, *built.error);
    return std::nullopt;
  }
  return std::move(built.request);
}

// Sends attempt `token`'s hedge, which the race fired, with the attempt's
// remaining `budget`; the gate's permit, if held, rides on it.
bool fire_hedge(self_ptr self, uint64_t token, std::chrono::nanoseconds budget,
                caf::actor_clock::time_point paid_at) {
  auto& st = self->state;
  auto i = gate_permit_of(st, token);
  bool probe = i != st.gate_permits.end();
  if (probe) {
    st.permit = std::move(i->second);
    st.gate_permits.erase(i);
  }
  // The first build is the primary's; the hedge's is built again. It
  // cannot fail where the first build succeeded (the same pure function of
  // the same call), and would end the call with that error if it did.
  auto built = take_request(self);
  if (!built)
    return false;
  auto req = std::move(*built);
  req.max_body_bytes
    = st.call.max_response_bytes.value_or(st.ctx->cfg.max_response_bytes);
  req.fresh_connection = false;
  // A hedge runs only on a connection free now: the pool refuses it rather
  // than queue it behind (or ahead of) its own primary.
  req.may_queue = false;
  if (st.retry_count > 0)
    set_retry_count(req.headers, st.retry_count);
  st.hedges_paid.reserve(st.hedges_paid.size() + 1);
  if (observed(self)) {
    auto ev = make_event(self, event_kind::hedging);
    ev.delay_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                    self->clock().now() - st.attempt_sent)
                    .count();
    emit(self, std::move(ev));
  }
  auto send_id = send_leg(self, core::race_leg::hedge, std::move(req), budget);
  st.race.on_hedge_sent(send_id, self->clock().now(), probe);
  st.hedges_paid.emplace_back(send_id, paid_at);
  return true;
}

// The budget answered attempt `token`'s hedge (`granted` false also when it
// did not answer). `granted` is cleared once the token is handed on (the
// hedge went out and owes it, or it went back), so that a fault path knows
// whether it still has to give it back.
void on_token(self_ptr self, uint64_t token, bool& granted) {
  auto& st = self->state;
  fault_point(self, detail::call_fault_point::token_reply, token);
  auto now = self->clock().now();
  auto step = st.race.on_token(token, granted, now);
  // A hedge is extra load: the client's retry budget pays for it too, or
  // it is not sent (its hedge token goes back).
  bool paid = false;
  if (step.decision == core::token_decision::fire && st.ctx->budget) {
    if (st.ctx->budget->try_withdraw(extra_kind::hedge, now))
      paid = true;
    else
      step = st.race.on_budget_refused();
  }
  if (step.decision == core::token_decision::fire) {
    bool sent = false;
    try {
      sent = fire_hedge(self, token, step.budget, now);
    } catch (...) {
      if (paid) // nothing left: the withdrawal goes back
        st.ctx->budget->refund(extra_kind::hedge, now, now);
      throw;
    }
    if (!sent && paid)
      st.ctx->budget->refund(extra_kind::hedge, now, now);
    granted = false; // the hedge owes it now (core/hedge_race.hpp, R11)
    return;
  }
  release_gate_permit(self, token);
  // Only a hedge that went out counts (hedged_requests, on_hedge_fired); an
  // unused token goes back to the bucket.
  if (step.return_token())
    settle_token(self, core::token_settlement::returned);
  granted = false;
}

// A gate or token reply handler of attempt `token` threw. A granted token
// the hedge did not take goes back; the call ends with the typed error `e`
// (deliver gives back every permit held), or, when it ended already, the
// actor goes once nothing is left (~call_state gives them back).
void on_gate_fault(self_ptr self, bool token_unsettled, call_error e) {
  auto& st = self->state;
  if (token_unsettled)
    settle_token(self, core::token_settlement::returned);
  if (st.done) {
    maybe_quit(self);
    return;
  }
  finish_error(self, std::move(e));
}

// The token reply of attempt `token`, or its failure (`granted` false).
void token_reply(self_ptr self, uint64_t token, bool granted) {
  guarded("call actor", [&] { on_token(self, token, granted); },
          [&](call_error e) { on_gate_fault(self, granted, std::move(e)); });
  gate_answered(self);
}

// The breakers answered attempt `token`'s hedge. The permit goes into the
// call's state first thing, so nothing that follows (a fault, the actor's
// death, the call's end) can lose it.
void on_gate_reply(self_ptr self, uint64_t token, breaker_gate_result& g) {
  auto& st = self->state;
  const auto& h = st.ctx->hedging;
  hold_gate_permit(self, token, g.permit);
  switch (st.race.on_gate(token, g.gate == hedge_gate::allowed)) {
    case core::gate_decision::report_blocked:
      release_gate_permit(self, token);
      self->send(h->stats, hedge_circuit_blocked{st.key});
      return;
    case core::gate_decision::release_permit:
      release_gate_permit(self, token);
      return;
    case core::gate_decision::ask_token:
      break;
  }
  fault_point(self, detail::call_fault_point::gate_reply, token);
  st.asked_token = true;
  self->request(h->stats, caf::infinite, hedge_token_request{st.key, st.owner})
    .then([self, token](bool granted) { token_reply(self, token, granted); },
          [self, token](caf::error&) { token_reply(self, token, false); });
  ++st.gates_pending; // the token reply is still a gate reply
}

// The hedge timer of attempt `token` ran out: breakers, then budget.
void on_hedge_due(self_ptr self, uint64_t token) {
  auto& st = self->state;
  if (st.race.on_hedge_due(token, self->clock().now())
      != core::due_decision::ask_gates)
    return;
  const auto& h = st.ctx->hedging;
  self
    ->request(h->breakers, caf::infinite,
              breaker_allow_request{st.host_key, st.key, st.hcfg->breaker})
    .then(
      [self, token](breaker_gate_result& g) {
        guarded("call actor", [&] { on_gate_reply(self, token, g); },
                [&](call_error e) {
                  // Still here only if it never reached the call's state.
                  release_permit(self, g.permit);
                  on_gate_fault(self, false, std::move(e));
                });
        gate_answered(self);
      },
      [self](caf::error&) { gate_answered(self); });
  ++st.gates_pending;
}

void send_attempt(self_ptr self) {
  auto& st = self->state;
  auto plan = st.retry->begin_attempt(self->clock().now());
  if (!plan.send) {
    refund_retry(self);
    finish_error(self, plan.error);
    return;
  }
  st.attempt = plan.attempt;
  st.retry_count = plan.retry_count;
  st.kept.reset();
  auto built = take_request(self);
  if (!built) {
    refund_retry(self); // the call ended: nothing of the retry left
    return;
  }
  auto req = std::move(*built);
  req.max_body_bytes
    = st.call.max_response_bytes.value_or(st.ctx->cfg.max_response_bytes);
  req.fresh_connection = plan.fresh_connection;
  // Retries so far; a first attempt keeps what the call's headers say.
  if (plan.retry_count > 0)
    set_retry_count(req.headers, plan.retry_count);
  if (observed(self))
    emit(self, make_event(self, event_kind::sending));
  auto send_id = send_leg(self, core::race_leg::primary, std::move(req),
                          plan.budget);
  st.attempt_sent = self->clock().now();
  st.race.begin_attempt(send_id, st.attempt_sent, plan.budget);
  arm_hedge_timer(self);
}

// The transport (the client's connection pool) terminated: it will never
// answer, and every later send would bounce, so the call fails now with the
// cause instead of at the end of its attempt budget and backoffs. The
// service client monitors the transport once and forwards its down message
// to every call actor it spawned (see service_client.cpp for why a call
// actor does not monitor the transport itself).
void on_transport_down(self_ptr self, const caf::down_msg& dm) {
  auto& st = self->state;
  if (!st.started || dm.source != st.ctx->transport.address())
    return;
  if (st.done && st.race.tokens_owed() == 0)
    return;
  // No answer will come from a dead pool: the race settles what is owed
  // (core/hedge_race.hpp, R12).
  auto lost = st.race.on_transport_lost();
  for (int i = 0; i < lost.tokens_fired; ++i)
    settle_token(self, core::token_settlement::fired);
  for (const auto& r : lost.held_races)
    count_race(self, r);
  if (lost.release_permit)
    apply_permit(self, core::permit_action::release, call_health::success);
  if (st.done) {
    maybe_quit(self); // only owed tokens kept it
    return;
  }
  bool sent = st.send_id != 0;
  call_error e;
  e.kind = error_kind::service_unavailable;
  e.cause = transport_error_kind::interrupted;
  e.detail = "connection pool terminated: " + self->system().render(dm.reason);
  e.nothing_sent = !sent;
  finish_error(self, std::move(e));
}

void start(self_ptr self, call_request call) {
  auto& st = self->state;
  st.started = true;
  st.start = self->clock().now();
  st.call = std::move(call);
  assign_idempotency_key(st.ctx->cfg, st.call);
  auto built = build_request(st.ctx->cfg, st.ctx->url, st.call, st.rng);
  st.request_id = built.request_id;
  if (built.error) {
    finish_error(self, *built.error);
    return;
  }
  st.base = std::move(built.request);
  st.method = st.base->method;
  bool idempotent = call_is_idempotent(st.ctx->cfg, st.call, st.method);
  bool keyed = !st.call.idempotency_key.empty() && idempotent;
  if (const auto& setups = st.ctx->retry) {
    st.retry.emplace(setups->for_call(keyed), idempotent, st.start);
  } else {
    st.retry.emplace(st.ctx->cfg, idempotent, st.start);
    if (keyed)
      st.retry->retry_conflicts();
  }
  if (const auto& h = st.ctx->hedging) {
    const auto& url = st.ctx->url;
    auto route
      = h->routes.route(st.call.hedge_endpoint, st.method,
                        path_without_query(st.call.path), url.host, url.port);
    if (route.status == route_status::unknown_endpoint) {
      call_error e;
      e.kind = error_kind::config_error;
      e.detail = "unknown hedge endpoint '" + *st.call.hedge_endpoint + "'";
      e.nothing_sent = true;
      finish_error(self, std::move(e));
      return;
    }
    st.key = route.key;
    st.owner = self->id();
    st.host_key = route_table::host_key(url.host, url.port);
    st.hcfg = &h->config_for(route);
    st.race = core::hedge_race{
      hedge_eligible(st.method, st.call.has_body, st.call.idempotent,
                     !st.call.idempotency_key.empty())};
    if (st.race.hedgeable()) {
      // The primary goes out now; the delay arrives while it runs.
      self->request(h->stats, caf::infinite, hedge_plan_request{st.key,
                                                                *st.hcfg})
        .then(
          [self](hedge_plan& p) {
            auto& st = self->state;
            // At most a year: a delay of 9e9 s and more saturates at
            // duration::max, and the race adds it to the send time.
            st.race.set_delay(
              core::from_seconds(p.delay, std::chrono::hours{24 * 365}));
            // The learned latency at the hedge percentile (not the delay:
            // min_delay's floor and the delay search are the hedge's, not
            // what an attempt takes): no retry starts that it says cannot
            // end inside the deadline.
            if (p.learned > 0.0)
              st.retry->set_expected_latency(core::from_seconds(p.learned));
            arm_hedge_timer(self);
          },
          [](caf::error&) { /* no plan: no hedge */ });
    }
  }
  // A call about to send is one primary request: it pays into the client's
  // retry budget its retries and hedges draw from.
  if (st.ctx->budget)
    st.ctx->budget->deposit(st.start);
  send_attempt(self);
}

call_impl_actor::behavior_type
call_impl(self_ptr self, std::shared_ptr<const call_context> ctx, uint64_t seed,
          std::shared_ptr<const detail::call_test_hooks> hooks) {
  self->state.ctx = std::move(ctx);
  self->state.hooks = std::move(hooks);
  self->state.rng.seed(seed);
  self->set_down_handler(
    [self](caf::down_msg& dm) { on_transport_down(self, dm); });
  return {
    [self](call_request& req) -> caf::typed_response_promise<call_outcome> {
      auto& st = self->state;
      auto rp = self->make_response_promise<call_outcome>();
      if (st.started) {
        // One call per actor: a second request is a programming error.
        call_outcome o;
        auto& e = o.error.emplace();
        e.kind = error_kind::config_error;
        e.detail = "a call actor runs exactly one call";
        e.nothing_sent = true;
        e.nothing_billed = true;
        rp.deliver(std::move(o));
        return rp;
      }
      st.rp = rp;
      guarded(
        "call actor", [&] { start(self, std::move(req)); },
        [self](call_error e) {
          e.nothing_sent = self->state.send_id == 0;
          finish_error(self, std::move(e));
        });
      return rp;
    },
    [self](retry_atom, uint64_t send_id) {
      auto& st = self->state;
      if (st.done || st.race.any_in_flight() || send_id != st.send_id)
        return;
      guarded("call actor", [&] { send_attempt(self); },
              [self](call_error e) { finish_error(self, std::move(e)); });
    },
    [self](hedge_due& d) {
      guarded("call actor", [&] { on_hedge_due(self, d.token); },
              [self](call_error e) { finish_error(self, std::move(e)); });
    },
  };
}

} // namespace

call_actor spawn_call_actor(caf::actor_system& sys,
                            std::shared_ptr<const call_context> ctx,
                            uint64_t seed) {
  call_actor handle = sys.spawn(call_impl, std::move(ctx), seed,
                               std::shared_ptr<const detail::call_test_hooks>{});
  return handle; // the public interface (checked: a subset of the private)
}

} // namespace call

namespace detail {

call_actor
spawn_call_actor_for_testing(caf::actor_system& sys,
                             std::shared_ptr<const call_context> ctx,
                             uint64_t seed,
                             std::shared_ptr<const call_test_hooks> hooks) {
  call_actor handle = sys.spawn(call_impl, std::move(ctx), seed,
                               std::move(hooks));
  return handle;
}

} // namespace detail

inline namespace call {} // namespace call
} // namespace outbound
