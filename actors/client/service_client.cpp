#include "actors/client/service_client.hpp"

#include "actors/call/call_actor.hpp"
#include "actors/call/detail/hedging_context.hpp"
#include "actors/call/call_result.hpp"
#include "actors/call/retry_state.hpp"
#include "actors/handler_guard.hpp"
#include "actors/pool/connection_pool.hpp"
#include "core/request_builder.hpp"

#include "core/classify.hpp"
#include "core/hedge_race.hpp"
#include "core/node_cache.hpp"
#include "core/slab.hpp"
#include "core/text.hpp"

#include <boost/unordered/unordered_flat_map.hpp>

#include <caf/actor_cast.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <algorithm>
#include <atomic>
#include <map>
#include <optional>
#include <random>
#include <stdexcept>
#include <vector>

namespace outbound {
inline namespace client {

namespace {

/// The client's one attempt watchdog ran out at `due` (sent to the client
/// by its timer actor).
struct call_watchdog {
  retry_time due;
};

/// End of the backoff wait of fast call `call` after send `send_id` (sent
/// to itself; stale ids are dropped).
struct call_backoff_over {
  uint64_t call = 0;
  uint64_t send_id = 0;
};

} // namespace

} // namespace client
} // namespace outbound

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::call_watchdog)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::call_backoff_over)

namespace outbound {
inline namespace client {

namespace {

/// The client's own interface: the public one plus its timer messages
/// (spawned with this one, handed out as service_client_actor).
/// The transport's answers to the client's own sends arrive as ordinary
/// messages: the client sends each attempt with `send`, not `request`, so
/// that no CAF response handler (a behavior and a map node) is made per
/// send; the answer's exchange id finds its call (`sends`).
using client_impl_actor
  = service_client_actor::extend<caf::reacts_to<call_watchdog>,
                                 caf::reacts_to<call_backoff_over>,
                                 caf::reacts_to<exchange_result>>;

/// The client's timer actor: takes the watchdog's delayed messages and
/// passes them on to the client while it lives. CAF 0.17's clock holds the
/// receiver of a delayed message (and a request timeout's actor) alive until
/// it fires, so a timer aimed at the client itself would keep a client
/// nobody uses any more — and its actor_system's shutdown — waiting for up
/// to an attempt's timeout. This actor is hidden (the system does not wait
/// for it) and holds the client only weakly.
///
/// The weak reference lives in the behavior, not in a stateful actor's
/// state: a hidden actor that the scheduler's shutdown finds in a queue (a
/// watchdog delivered just then) is cleaned up without on_exit, and CAF
/// 0.17's stateful_actor destroys its state only in on_exit, so a weak
/// reference kept there was never released and the client's memory block
/// leaked (seen by LeakSanitizer). The behavior is a member, destroyed with
/// the actor either way.
caf::behavior client_timer(caf::event_based_actor*,
                           caf::weak_actor_ptr client) {
  return {
    [client](call_watchdog& w) {
      if (auto c = client.lock())
        caf::anon_send(caf::actor_cast<caf::actor>(c), w);
    },
  };
}

/// Exchange ids of calls run inside a client: bit 63 set (a call actor's
/// ids are `(actor id << 20) | n`, far below it) and a process-wide
/// counter below, so no two senders to one transport ever share an id.
uint64_t next_fast_exchange_id() {
  static std::atomic<uint64_t> next{1};
  return (uint64_t{1} << 63) | next.fetch_add(1, std::memory_order_relaxed);
}

/// One unhedged call run inside the client actor: the retry loop's state
/// (actors/call/retry_state.hpp) and what the loop sends and answers.
struct fast_call {
  caf::typed_response_promise<call_outcome> rp;
  call_rng rng;
  call_request call;
  /// The request as built, until the first send takes it. A later send (a
  /// retry, a redial) builds it again from `call` with the same request id:
  /// no call pays a copy of its request for a retry it may never make.
  std::optional<http_request> base;
  /// The request's method as sent (upper case), for events.
  std::string method;
  std::string request_id;
  std::optional<retry_state> retry;
  retry_time start;
  /// Number of the latest send (0: none yet); the stale-id of answers and
  /// backoff timers.
  uint64_t send_id = 0;
  uint64_t exchange_id = 0;
  int attempt = 0;
  /// A send is out and its answer not taken yet.
  bool in_flight = false;
  /// When the retry budget paid for the retry being made (act), until its
  /// request may have left: one that never leaves (the deadline passed
  /// during the backoff, the pool refused it) gives the withdrawal back.
  std::optional<retry_time> retry_paid_at;
  /// Its entry in the watchdog's deadline table while in flight.
  std::multimap<retry_time, uint64_t>::iterator due;
  /// A hedging client's call that is not hedged (actors/call/hedging.hpp,
  /// hedge_eligible) still tells the breakers how each attempt went: its
  /// stats key and host key (empty: the client does not hedge).
  std::string key;
  std::string host_key;
  const effective_hedge_config* hcfg = nullptr;
};

struct service_client_state {
  std::shared_ptr<const call_context> ctx;
  /// Seeds each call's own generator.
  call_rng rng;
  /// Set once the transport (the connection pool) terminated: its exit
  /// reason. Every later call fails at once with it.
  std::optional<std::string> transport_down;
  /// The call actors (hedged calls) spawned so far that may still run, so
  /// that the transport's down message reaches them. The client monitors
  /// the transport once and forwards; a call actor does not monitor it
  /// itself: in CAF 0.17 every monitor is an entry in the monitored actor's
  /// attachable list and demonitor walks that list, so one monitor per call
  /// costs O(calls in flight) at each call's end — quadratic under
  /// overload, where a backlog of thousands of calls left the worker
  /// spending ~90 % of its time in demonitor.
  std::vector<caf::weak_actor_ptr> calls;
  /// calls is swept of finished actors when it reaches this size; the sweep
  /// sets it to twice what is left (at least 1024): amortised O(1) a call.
  std::size_t sweep_at = 1024;

  // -- unhedged calls, run inside the client -------------------------------
  /// The calls in progress, by call number.
  /// The call number is the slab's id (core/slab.hpp): a lookup is an
  /// index, and a client whose calls turn over allocates no entry per call.
  /// A stale number (a late timer or answer) finds nothing.
  slab<fast_call> fast;
  /// Deadlines of the sends in flight (call number by deadline). One timer
  /// serves them all: the earliest deadline is armed; a send that ends
  /// erases its entry, and a timer that finds nothing due re-arms for the
  /// next. A transport answers every exchange within its timeout, so the
  /// watchdog fires only for a send still unanswered at its budget: a
  /// transport that does not keep its promise, or a hung exchange whose
  /// transport timer (started a little later, on the io thread) has not
  /// fired yet — exactly as a per-attempt CAF request timeout did.
  std::multimap<retry_time, uint64_t> deadlines;
  /// Spare nodes of `deadlines`.
  node_cache<std::multimap<retry_time, uint64_t>> deadline_nodes;
  /// The call number of each send in flight, by its exchange id (fresh per
  /// send, so a late answer to an earlier send finds nothing). A flat
  /// table: no allocation per send once it has grown.
  boost::unordered_flat_map<uint64_t, uint64_t> sends;
  /// Due time of the earliest watchdog timer still pending, if any.
  std::optional<retry_time> armed;
  /// Passes the watchdog's timers on (client_timer).
  caf::actor timer;

  /// Runs when the client terminates: every caller still waiting is
  /// answered at once, never left to its own timeout.
  ~service_client_state() {
    fast.for_each([this](uint64_t, fast_call& c) {
      if (!c.rp.pending())
        return;
      try {
        call_error e;
        e.kind = error_kind::service_unavailable;
        e.detail = "service client stopped";
        // A send in flight may have left; between sends the retry state
        // knows (a call waiting to redial after not_sent sent nothing).
        e.nothing_sent = c.send_id == 0
                         || (!c.in_flight && c.retry
                             && c.retry->nothing_sent());
        auto o = error_outcome(std::move(e), c.request_id,
                               c.retry ? c.retry->attempts() : 0);
        if (ctx)
          finalize_outcome(ctx->cfg, o);
        c.rp.deliver(std::move(o));
      } catch (...) {
        // Out of memory while dying: nothing more can be sent.
      }
    });
  }

  static inline const char* name = "outbound.service_client";
};

using self_ptr = client_impl_actor::stateful_pointer<service_client_state>;

// -- the fast path: an unhedged call on the client's own state -------------
//
// Trade-off: every unhedged call's work (request building, retry decisions,
// parsing the JSON body of its answer) runs on this one actor, one call
// after another. A huge body (max_response_bytes is 32 MiB by default)
// delays the other calls of the same client while it is parsed; with the
// recommended single CAF worker that was so before as well.
//
// The same retry loop as the call actor (retry_state decides), without a
// per-call actor: the client sends each attempt to the transport, takes
// its answer, and answers the caller. Per call this saves the actor's
// spawn and teardown, the delegation hop and the two clock-thread events
// of a per-attempt request timeout (the study behind it: CAF 0.17 sends
// every delayed message and request timeout through one clock thread).

// Call `id`, which the caller knows is in progress (a broken invariant
// throws, and the handler's guard ends the call with a typed error).
fast_call& live_call(service_client_state& st, uint64_t id) {
  auto* c = st.fast.find(id);
  if (!c)
    throw std::logic_error("service client: call " + std::to_string(id)
                           + " is not in progress");
  return *c;
}

int64_t elapsed_ns(self_ptr self, const fast_call& c) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
           self->clock().now() - c.start)
    .count();
}

bool observed(self_ptr self) {
  return static_cast<bool>(self->state.ctx->observer);
}

client_event event_of(const fast_call& c, event_kind kind) {
  return call_event(kind, c.request_id,
                    c.method.empty() ? c.call.method : c.method, c.call.path,
                    c.attempt);
}

void emit(self_ptr self, client_event ev) {
  auto& st = self->state;
  redact(st.ctx->cfg, ev.cause);
  self->send(st.ctx->observer, std::move(ev));
}

// Takes call `c`'s send out of the watchdog's table.
void disarm(self_ptr self, fast_call& c) {
  if (!c.in_flight)
    return;
  auto& st = self->state;
  st.deadline_nodes.erase(st.deadlines, c.due);
  st.sends.erase(c.exchange_id);
  c.in_flight = false;
}

// Arms the watchdog for the earliest deadline unless a timer at or before
// it is pending already (through the timer actor: see client_timer).
void arm_watchdog(self_ptr self) {
  auto& st = self->state;
  if (st.deadlines.empty())
    return;
  auto first = st.deadlines.begin()->first;
  if (st.armed && *st.armed <= first)
    return;
  st.armed = first;
  auto now = self->clock().now();
  if (first <= now)
    caf::anon_send(st.timer, call_watchdog{first});
  else
    caf::delayed_anon_send(st.timer, first - now, call_watchdog{first});
}

// The retry `c` paid for never left: its withdrawal goes back (as a hedge
// the pool refused, actors/call/call_actor.cpp settle_budget).
void refund_retry(self_ptr self, fast_call& c) {
  const auto& budget = self->state.ctx->budget;
  if (c.retry_paid_at && budget)
    budget->refund(extra_kind::retry, *c.retry_paid_at, self->clock().now());
  c.retry_paid_at.reset();
}

// Ends call `id` with `o` and forgets it. The entry goes only once the
// answer is out: if delivering throws (out of memory), the fault path still
// finds the call and its promise.
void deliver(self_ptr self, uint64_t id, call_outcome o) {
  auto& st = self->state;
  auto* c = st.fast.find(id);
  if (!c)
    return;
  disarm(self, *c);
  refund_retry(self, *c); // a paid retry still held never left
  finalize_outcome(st.ctx->cfg, o);
  c->rp.deliver(std::move(o));
  st.fast.erase(id);
}

void finish_error(self_ptr self, uint64_t id, call_error e) {
  auto& st = self->state;
  auto& c = live_call(st, id);
  int attempts = c.retry ? c.retry->attempts() : e.attempts;
  auto o = error_outcome(std::move(e), c.request_id, attempts);
  if (observed(self)) {
    auto ev = event_of(c, event_kind::failed);
    fill_failed(ev, *o.error, elapsed_ns(self, c));
    emit(self, std::move(ev));
  }
  deliver(self, id, std::move(o));
}

void finish_response(self_ptr self, uint64_t id, http_response& resp,
                     give_up_reason reason = give_up_reason::none) {
  auto& st = self->state;
  auto& c = live_call(st, id);
  std::optional<client_event> ev;
  if (observed(self))
    ev = event_of(c, event_kind::answered);
  // The call ends here: its request id moves into the answer.
  auto o = response_outcome(st.ctx->cfg, c.call, std::move(c.request_id),
                            c.retry->attempts(), resp);
  if (o.error)
    o.error->reason = reason;
  if (ev) {
    fill_answered(*ev, o, elapsed_ns(self, c), resp.body.size());
    ev->reason = reason; // a raw call has no error to carry it
    emit(self, std::move(*ev));
  }
  deliver(self, id, std::move(o));
}

// Answers call `id`, still pending, with a bare service_unavailable and
// forgets it: the last resort when building the full answer threw.
void answer_bare(self_ptr self, uint64_t id) noexcept {
  auto& st = self->state;
  auto* found = st.fast.find(id);
  if (!found)
    return;
  try {
    auto& c = *found;
    disarm(self, c);
    if (c.rp.pending()) {
      call_outcome o;
      o.error.emplace().kind = error_kind::service_unavailable;
      o.request_id = c.request_id;
      c.rp.deliver(std::move(o));
    }
  } catch (...) {
    // Out of memory: nothing more can be sent.
  }
  st.fast.erase(id);
}

// A throw while call `id` was handled ends that call with a typed error;
// the client serves every other call.
auto fault_of(self_ptr self, uint64_t id) {
  return [self, id](call_error e) {
    auto& st = self->state;
    auto* c = st.fast.find(id);
    if (!c)
      return;
    e.nothing_sent = c->send_id == 0;
    try {
      finish_error(self, id, std::move(e));
    } catch (...) {
      answer_bare(self, id); // looks the call up again
    }
  };
}

void send_attempt(self_ptr self, uint64_t id) {
  auto& st = self->state;
  auto& c = live_call(st, id);
  auto now = self->clock().now();
  auto plan = c.retry->begin_attempt(now);
  if (!plan.send) {
    refund_retry(self, c);
    finish_error(self, id, plan.error);
    return;
  }
  c.attempt = plan.attempt;
  http_request req;
  if (c.base) {
    req = std::move(*c.base);
    c.base.reset();
  } else {
    auto built
      = rebuild_request(st.ctx->cfg, st.ctx->url, c.call, c.request_id, c.rng);
    if (built.error) {
      refund_retry(self, c);
      finish_error(self, id, *built.error);
      return;
    }
    req = std::move(built.request);
  }
  req.max_body_bytes
    = c.call.max_response_bytes.value_or(st.ctx->cfg.max_response_bytes);
  req.fresh_connection = plan.fresh_connection;
  // Retries so far; a first attempt keeps what the call's headers say.
  if (plan.retry_count > 0)
    set_retry_count(req.headers, plan.retry_count);
  req.exchange_id = c.exchange_id = next_fast_exchange_id();
  req.timeout_ns = plan.budget.count();
  if (observed(self))
    emit(self, event_of(c, event_kind::sending));
  ++c.send_id;
  c.due = st.deadline_nodes.emplace(st.deadlines, now + plan.budget, id).first;
  c.in_flight = true;
  st.sends.emplace(c.exchange_id, id); // from here on disarm() erases it
  arm_watchdog(self);
  // A plain send, not a CAF request: no request timeout (two clock-thread
  // events per send) and no response handler. The transport answers every
  // exchange within its budget, also a cancelled one (actors/transport.hpp),
  // and its answer comes back as an ordinary exchange_result message; the
  // watchdog times the send out at the budget if it has not. A transport
  // that is gone answers nothing: the client's down handler fails the call.
  self->send(st.ctx->transport, std::move(req));
}

// Acts on the retry loop's decision after call `id`'s send ended.
void act(self_ptr self, uint64_t id, const retry_step& step,
         http_response* resp) {
  auto& st = self->state;
  auto& c = live_call(st, id);
  switch (step.decision) {
    case retry_decision::answer:
      finish_response(self, id, *resp);
      return;
    case retry_decision::retry_after:
    case retry_decision::retry_local: {
      // A counted retry is extra load: the client's budget pays for it or
      // the call ends here (a local retry sent nothing the first time).
      // A retry still paid for here never left (only a redial's not_sent
      // keeps it): a new counted retry pays anew, that one goes back.
      refund_retry(self, c);
      if (step.decision == retry_decision::retry_after && st.ctx->budget) {
        auto now = self->clock().now();
        if (!st.ctx->budget->try_withdraw(extra_kind::retry, now)) {
          act(self, id, c.retry->refuse_retry(step), resp);
          return;
        }
        c.retry_paid_at = now;
      }
      if (observed(self)) {
        auto ev = event_of(c, event_kind::retrying);
        fill_retrying(ev, step, resp);
        emit(self, std::move(ev));
      }
      auto me = caf::actor_cast<client_impl_actor>(self);
      call_backoff_over msg{id, c.send_id};
      if (step.delay.count() == 0)
        self->send(me, msg);
      else
        self->delayed_send(me, step.delay, msg);
      return;
    }
    case retry_decision::redial:
      if (observed(self)) {
        auto ev = event_of(c, event_kind::redialing);
        ev.cause = step.cause;
        ev.cause_kind = step.cause_kind;
        emit(self, std::move(ev));
      }
      send_attempt(self, id);
      return;
    case retry_decision::give_up_attempts:
    case retry_decision::give_up_deadline:
    case retry_decision::give_up_budget:
    case retry_decision::not_retryable:
      if (step.answer_with_response && resp)
        finish_response(self, id, *resp, step.reason);
      else
        finish_error(self, id, step.error);
      return;
  }
}

// Tells the breakers how an attempt of a hedging client's unhedged call
// went (as the call actor records a lone primary: its health, never its
// latency — the sketch learns only from hedgeable calls). Every attempt
// counts, not only the call's last, as in the call actor.
void record_health(self_ptr self, const fast_call& c, const retry_step& step,
                   call_health health) {
  if (c.key.empty() || !reached_backend(step))
    return;
  const auto& h = self->state.ctx->hedging;
  self->send(h->breakers,
             breaker_record{c.host_key, c.key, c.hcfg->breaker, health});
}

// The transport answered send `r.exchange_id` of call `id`, in flight.
void on_fast_answer(self_ptr self, uint64_t id, exchange_result& r) {
  auto& c = live_call(self->state, id);
  disarm(self, c);
  // A paid retry the pool refused never left; one that may have left keeps
  // its withdrawal; a stale pooled connection's redial is the same retry.
  if (r.error == transport_error_kind::pool_overflow && !r.request_sent)
    refund_retry(self, c);
  else if (r.request_sent || r.error != transport_error_kind::not_sent)
    c.retry_paid_at.reset();
  auto step = c.retry->on_result(r, self->clock().now(),
                                 self->state.ctx->wall_clock(), c.rng);
  if (!c.key.empty()) {
    auto verdict = classify_exchange(
      exchange_view::of(r, c.retry->idempotent()), c.retry->retry_statuses());
    record_health(self, c, step,
                  core::leg_answer::of(verdict, r.request_sent).health());
  }
  act(self, id, step, &r.response);
}

// The watchdog ran out: every send past its deadline is cancelled at the
// transport (its connection is closed, never reused; a late answer is
// dropped) and treated as a timeout whose request may have left.
void on_watchdog(self_ptr self, retry_time due) {
  auto& st = self->state;
  if (st.armed && *st.armed == due)
    st.armed.reset();
  auto now = self->clock().now();
  while (!st.deadlines.empty() && st.deadlines.begin()->first <= now) {
    auto id = st.deadlines.begin()->second;
    auto* found = st.fast.find(id);
    if (!found) {
      st.deadlines.erase(st.deadlines.begin()); // cannot happen; never loop
      continue;
    }
    auto& c = *found;
    disarm(self, c);
    guarded(
      "service client",
      [&] {
        self->send(st.ctx->transport, cancel_atom_v, c.exchange_id);
        c.retry_paid_at.reset(); // it may have left
        auto step = c.retry->on_attempt_timeout(now, c.rng);
        record_health(self, c, step, core::leg_answer::timeout().health());
        act(self, id, step, nullptr);
      },
      fault_of(self, id));
  }
  try {
    arm_watchdog(self);
  } catch (...) {
    // Out of memory: the next send arms it again.
    st.armed.reset();
  }
}

caf::result<call_outcome> start_fast(self_ptr self, call_request& req) {
  auto& st = self->state;
  uint64_t id = 0;
  caf::typed_response_promise<call_outcome> rp;
  try {
    rp = self->make_response_promise<call_outcome>();
    id = st.fast.emplace();
    st.fast.find(id)->rp = rp;
  } catch (...) {
    if (id != 0)
      st.fast.erase(id);
    call_outcome o;
    o.error = error_of_exception(std::current_exception(), "service client");
    o.error->nothing_sent = true;
    return o;
  }
  auto& c = live_call(st, id);
  guarded(
    "service client",
    [&] {
      c.rng.seed(st.rng());
      c.start = self->clock().now();
      c.call = std::move(req);
      assign_idempotency_key(st.ctx->cfg, c.call);
      auto built = build_request(st.ctx->cfg, st.ctx->url, c.call, c.rng);
      c.request_id = std::move(built.request_id);
      if (built.error) {
        finish_error(self, id, *built.error);
        return;
      }
      c.method = built.request.method;
      c.base = std::move(built.request);
      bool idempotent = call_is_idempotent(st.ctx->cfg, c.call, c.method);
      // The client's setups (ctx->retry) outlive every call: ctx does.
      bool keyed = !c.call.idempotency_key.empty() && idempotent;
      c.retry.emplace(st.ctx->retry->for_call(keyed), idempotent, c.start);
      if (const auto& h = st.ctx->hedging) {
        const auto& url = st.ctx->url;
        auto route = h->routes.route(c.call.hedge_endpoint, c.method,
                                     path_without_query(c.call.path),
                                     url.host, url.port);
        if (route.status == route_status::unknown_endpoint) {
          call_error e;
          e.kind = error_kind::config_error;
          e.detail = "unknown hedge endpoint '" + *c.call.hedge_endpoint + "'";
          e.nothing_sent = true;
          finish_error(self, id, std::move(e));
          return;
        }
        c.key = route.key;
        c.host_key = route_table::host_key(url.host, url.port);
        c.hcfg = &h->config_for(route);
      }
      // A call about to send is one primary request: it pays into the
      // retry budget its retries and hedges draw from.
      if (st.ctx->budget)
        st.ctx->budget->deposit(c.start);
      send_attempt(self, id);
    },
    fault_of(self, id));
  return rp;
}

// The transport terminated: every call in progress fails now with the
// cause, instead of at the end of its budget and backoffs.
void fail_fast_calls(self_ptr self, const std::string& reason) {
  auto& st = self->state;
  std::vector<uint64_t> ids;
  try {
    ids.reserve(st.fast.size());
  } catch (...) {
    // Out of memory: answer them bare, lowest slab index first.
    while (!st.fast.empty())
      answer_bare(self, st.fast.first_id());
    return;
  }
  st.fast.for_each([&ids](uint64_t id, fast_call&) { ids.push_back(id); });
  for (auto id : ids) {
    auto* c = st.fast.find(id);
    if (!c)
      continue;
    call_error e;
    e.kind = error_kind::service_unavailable;
    e.cause = transport_error_kind::interrupted;
    e.detail = "connection pool terminated: " + reason;
    e.nothing_sent = c->send_id == 0;
    guarded("service client", [&] { finish_error(self, id, std::move(e)); },
            fault_of(self, id));
  }
}

// Over 80 lines on purpose: the actor's behavior, one short handler per
// message of its interface; the work is in the functions above.
client_impl_actor::behavior_type
service_client_impl(self_ptr self, std::shared_ptr<const call_context> ctx,
                    uint64_t seed) {
  self->state.ctx = std::move(ctx);
  self->state.rng.seed(seed);
  self->state.timer = self->spawn<caf::hidden>(
    client_timer, caf::actor_cast<caf::weak_actor_ptr>(self));
  // The client depends on its pool: once the pool is gone no call can
  // succeed, so calls fail at once (the call actors in flight see the same
  // down message and fail theirs) instead of each waiting its budget.
  self->monitor(self->state.ctx->transport);
  // An error that arrives as an ordinary message (a transport that answers
  // a send with a caf::error instead of an exchange_result breaks the
  // port's contract; it names no exchange) is dropped: CAF 0.17's default
  // would terminate the client. The send it was meant for times out.
  self->set_error_handler([](caf::error&) {});
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    if (dm.source != st.ctx->transport.address())
      return;
    st.transport_down = self->system().render(dm.reason);
    fail_fast_calls(self, *st.transport_down);
    // Each call actor in flight handles it as its own down message.
    for (auto& w : st.calls)
      if (auto strong = w.lock())
        caf::anon_send(caf::actor_cast<caf::actor>(strong), dm);
    st.calls.clear();
  });
  return {
    [self](call_request& req) -> caf::result<call_outcome> {
      auto& st = self->state;
      auto fail = [](call_error e) {
        call_outcome o;
        o.error = std::move(e);
        return caf::result<call_outcome>{std::move(o)};
      };
      if (st.transport_down) {
        call_error e;
        e.kind = error_kind::service_unavailable;
        e.cause = transport_error_kind::interrupted;
        e.detail = "connection pool terminated: " + *st.transport_down;
        e.nothing_sent = true;
        return fail(std::move(e));
      }
      // Unhedged calls run here; a call a hedging client may hedge runs in
      // its own call actor (the race needs its own timers and gate
      // replies).
      if (!st.ctx->hedging
          || !hedge_eligible(core::ascii_upper(req.method), req.has_body,
                             req.idempotent,
                             carries_idempotency_key(st.ctx->cfg, req)))
        return start_fast(self, req);
      return guarded(
        "service client",
        [&]() -> caf::result<call_outcome> {
          auto call = spawn_call_actor(self->system(), st.ctx, st.rng());
          st.calls.push_back(caf::actor_cast<caf::weak_actor_ptr>(call));
          if (st.calls.size() >= st.sweep_at) {
            auto& v = st.calls;
            v.erase(std::remove_if(v.begin(), v.end(),
                                   [](const caf::weak_actor_ptr& w) {
                                     return w.lock() == nullptr;
                                   }),
                    v.end());
            st.sweep_at = std::max<std::size_t>(1024, 2 * v.size());
          }
          // The call actor answers the original requester directly.
          return self->delegate(call, std::move(req));
        },
        [&](call_error e) {
          e.nothing_sent = true;
          return fail(std::move(e));
        });
    },
    [self](hedging_handles_request) -> hedging_handles {
      const auto& h = self->state.ctx->hedging;
      if (!h)
        return {};
      return {h->stats, h->breakers};
    },
    [self](retry_budget_request) -> retry_budget_stats {
      const auto& b = self->state.ctx->budget;
      return b ? b->stats(self->clock().now()) : retry_budget_stats{};
    },
    [self](exchange_result& r) {
      auto& st = self->state;
      auto i = st.sends.find(r.exchange_id);
      if (i == st.sends.end())
        return; // late: the watchdog gave up on the send and cancelled it
      auto id = i->second;
      guarded(
        "service client", [&] { on_fast_answer(self, id, r); },
        fault_of(self, id));
    },
    [self](call_watchdog& w) { on_watchdog(self, w.due); },
    [self](call_backoff_over& b) {
      auto& st = self->state;
      auto* c = st.fast.find(b.call);
      if (!c || c->in_flight || c->send_id != b.send_id)
        return;
      guarded("service client", [&] { send_attempt(self, b.call); },
              fault_of(self, b.call));
    },
  };
}

} // namespace

bool idempotent_by_default(const std::string& method) {
  return method_is_idempotent(method);
}

service_client_actor make_service_client(caf::actor_system& sys,
                                         client_config cfg,
                                         client_options opts) {
  cfg.validate();
  if (opts.hedging)
    opts.hedging->config.validate();
  auto ctx = std::make_shared<call_context>();
  ctx->url = cfg.parsed_url();
  transport_actor own_pool;
  if (!opts.transport)
    own_pool = spawn_connection_pool(sys, cfg, opts.io);
  ctx->transport = opts.transport ? opts.transport : own_pool;
  ctx->observer = opts.observer;
  if (opts.hedging)
    ctx->hedging = make_hedging_context(sys, *opts.hedging);
  if (opts.wall_clock)
    ctx->wall_clock = std::move(opts.wall_clock);
  else
    ctx->wall_clock = [] { return std::chrono::system_clock::now(); };
  ctx->budget = std::make_shared<shared_retry_budget>(cfg.retry_budget,
                                                      sys.clock().now());
  ctx->cfg = std::move(cfg);
  ctx->retry = std::make_shared<const retry_setups>(ctx->cfg);
  uint64_t seed = opts.seed != 0 ? opts.seed : core::entropy_seed();
  auto client = sys.spawn(service_client_impl,
                          std::shared_ptr<const call_context>{std::move(ctx)},
                          seed);
  if (own_pool) {
    // The pool is the client's own: it ends when the client ends, on a CAF
    // worker while the system is alive. Left to its last reference it could
    // be cleaned up on an io thread while the actor system shuts down (CAF
    // 0.17's local_actor::cleanup then reads the dying system's clock).
    caf::actor_cast<caf::abstract_actor*>(client)->attach_functor(
      [pool = std::move(own_pool)] {
        caf::anon_send_exit(pool, caf::exit_reason::user_shutdown);
      });
  }
  return client;
}

} // namespace client
} // namespace outbound
