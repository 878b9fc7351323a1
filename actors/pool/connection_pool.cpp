#include "actors/pool/connection_pool.hpp"

#include "actors/pool/detail/completion_inbox.hpp"
#include "actors/pool/pool_state.hpp"
#include "actors/system/system_setup.hpp"
#include "core/time.hpp"
#include "protocol/http_connection.hpp"
#include "protocol/io_runner.hpp"
#include "protocol/tls_context.hpp"

#include <caf/actor_cast.hpp>
#include <caf/delegated.hpp>
#include <caf/mailbox_element.hpp>
#include <caf/make_message.hpp>
#include <caf/response_promise.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>
#include <caf/weak_intrusive_ptr.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace outbound {
inline namespace pool {

namespace {

/// The pool's own wake-up: completions are waiting in its inbox
/// (completion_inbox) for the pool's bookkeeping.
struct drain_completions {};

/// A queued exchange's own time limit (its request's timeout_ns) ran out,
/// less pool_limits::min_dispatch_budget, before a connection became free.
struct queue_expired {
  uint64_t exchange_id = 0;
};

/// Idle connections beyond the idle limit may have outstayed
/// pool_limits::idle_time: the timer armed for `due`.
struct idle_sweep {
  std::chrono::steady_clock::time_point due;
};

} // namespace

} // namespace pool
} // namespace outbound

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::drain_completions)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::queue_expired)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::idle_sweep)

namespace outbound {
inline namespace pool {

namespace {

/// The pool's own interface: the transport port plus the completion wake-up,
/// the queue timer and a stats query (reachable through an untyped handle in
/// tests).
using pool_actor = transport_actor::extend<
  caf::reacts_to<drain_completions>, caf::reacts_to<queue_expired>,
  caf::reacts_to<idle_sweep>, caf::replies_to<stats_atom>::with<pool_stats>>;

using connection_ptr = std::shared_ptr<http_connection>;

/// Where one exchange's answer goes: the requester's address and the
/// request's message id, taken from the pool's response promise. The io
/// thread's completion answers the requester through it directly, without a
/// hop through the pool actor; the pool answers through it when it cancels,
/// expires or stops an exchange. Whoever comes first answers; the other's
/// answer is dropped (an atomic flag). It sends as CAF's
/// response_promise::deliver does (libcaf_core/src/response_promise.cpp),
/// but with no execution context, so that any thread may call it.
///
/// The slot is also the exchange's completion (exchange_handler): one
/// object per exchange. Its completion side, wired by `run`, records the
/// finished exchange in the pool's inbox (waking the pool when it asks)
/// and answers the requester.
class reply_slot final : public exchange_handler {
public:
  explicit reply_slot(const caf::response_promise& rp)
    : source_(rp.source()), stages_(rp.stages()), id_(rp.id()) {
    // nop
  }

  /// Makes this slot the completion of exchange `id` run by `pool`.
  void wire(caf::weak_actor_ptr pool, std::shared_ptr<completion_inbox> inbox,
            uint64_t id) {
    pool_ = std::move(pool);
    inbox_ = std::move(inbox);
    exchange_id_ = id;
  }

  void on_exchange_done(exchange_result res, bool reusable) override;

  /// Answers with `res` unless answered already; safe from any thread.
  void deliver(exchange_result res) {
    if (answered_.exchange(true, std::memory_order_acq_rel))
      return;
    // Every answer names its exchange, also one made without it (the
    // pool's stop): a requester that sent with a plain send finds its
    // call by this id (actors/transport.hpp).
    if (exchange_id_ != 0)
      res.exchange_id = exchange_id_;
    auto msg = caf::make_message(std::move(res));
    if (!stages_.empty()) {
      auto next = std::move(stages_.back());
      stages_.pop_back();
      next->enqueue(caf::make_mailbox_element(std::move(source_), id_,
                                              std::move(stages_),
                                              std::move(msg)),
                    nullptr);
      return;
    }
    if (source_)
      source_->enqueue(caf::make_mailbox_element(nullptr, id_.response_id(), {},
                                                 std::move(msg)),
                       nullptr);
    source_.reset();
  }

private:
  std::atomic<bool> answered_{false};
  caf::strong_actor_ptr source_;
  caf::response_promise::forwarding_stack stages_;
  caf::message_id id_;
  // The completion side (wire).
  caf::weak_actor_ptr pool_;
  std::shared_ptr<completion_inbox> inbox_;
  uint64_t exchange_id_ = 0;
};

/// What answers the requester (the pool state's `Pending`).
struct promise_type {
  std::shared_ptr<reply_slot> slot;

  void deliver(exchange_result res) const {
    slot->deliver(std::move(res));
  }
};

/// What a queued exchange runs once a connection is free (its deadline,
/// kept by the pool state, gives what is left of its timeout).
struct queued_request {
  http_request request;
};

using state_type
  = basic_pool_state<connection_ptr, promise_type, queued_request>;

exchange_result error_result(uint64_t id, transport_error_kind kind,
                             std::string detail, bool sent = false) {
  exchange_result res;
  res.exchange_id = id;
  res.error = kind;
  res.detail = std::move(detail);
  res.request_sent = sent;
  return res;
}

struct pool_actor_state {
  /// Declared first: destroyed last, after every connection using it.
  std::shared_ptr<io_runner> io;
  std::shared_ptr<tls_context> tls;
  url_parts origin;
  pool_key key;
  state_type pool{0};
  std::shared_ptr<completion_inbox> inbox
    = std::make_shared<completion_inbox>();
  /// Reused by drain() (keeps its capacity).
  std::vector<finished_exchange> batch;
  /// Due time of the earliest idle_sweep timer still pending, if any.
  std::optional<std::chrono::steady_clock::time_point> sweep_armed;

  /// Runs when the actor terminates: every connection is closed, every
  /// exchange still in flight or queued is answered.
  ~pool_actor_state() {
    auto d = pool.drain();
    for (auto& c : d.idle)
      c->close();
    for (auto& f : d.flights) {
      // Answered before the close: closing completes the exchange on the
      // io thread, whose own answer ("cancelled") would otherwise race
      // this one to the requester (the first answer wins, reply_slot).
      exchange_result res;
      res.error = transport_error_kind::interrupted;
      res.detail = "connection pool stopped";
      res.request_sent = true; // unknown: assume it may have left
      f.pending.deliver(std::move(res));
      f.conn->close();
    }
    for (auto& w : d.waiters)
      w.pending.deliver(error_result(w.id, transport_error_kind::interrupted,
                                     "connection pool stopped (the request "
                                     "was queued, never sent)"));
  }

  static inline const char* name = "outbound.connection_pool";
};

using self_ptr = pool_actor::stateful_pointer<pool_actor_state>;

/// Runs exchange `id` on `conn` (a reused or a new connection). Its
/// completion answers the requester itself and leaves the connection's
/// bookkeeping to the pool (completion_inbox).
void run(self_ptr self, uint64_t id, http_request&& req, connection_ptr conn,
         promise_type rp, bool reused) {
  auto& st = self->state;
  auto slot = rp.slot;
  slot->wire(caf::weak_actor_ptr{self->ctrl()}, st.inbox, id);
  st.pool.start(id, st.key, conn, std::move(rp), reused);
  conn->async_exchange(std::move(req), std::move(slot));
}

void reply_slot::on_exchange_done(exchange_result res, bool reusable) {
  bool stale = !reusable && res.error == transport_error_kind::not_sent;
  bool wake = inbox_->push(finished_exchange{exchange_id_, reusable, stale});
  res.exchange_id = exchange_id_;
  deliver(std::move(res));
  if (wake)
    if (auto strong = pool_.lock())
      caf::anon_send(caf::actor_cast<pool_actor>(strong), drain_completions{});
}

/// True when every completion must wake the pool at once: requests wait
/// for a connection, or more connections are open than the idle limit keeps
/// with no time limit (one going idle starts its surplus idle time).
bool wake_on_completion(const pool_actor_state& st) {
  const auto& l = st.pool.limits();
  return st.pool.pending_count() > 0
         || (l.idle_time.count() > 0
             && st.pool.open_count(st.key) > l.max_idle);
}

/// Arms the idle sweep for `at` unless a sweep at or before it is pending
/// already (one timer for the pool, as the service client's watchdog).
void arm_sweep(self_ptr self,
               std::optional<std::chrono::steady_clock::time_point> at) {
  auto& st = self->state;
  if (!at || (st.sweep_armed && *st.sweep_armed <= *at))
    return;
  st.sweep_armed = at;
  auto now = self->clock().now();
  if (*at <= now)
    self->send(self, idle_sweep{*at});
  else
    self->delayed_send(self, *at - now, idle_sweep{*at});
}

/// Makes the requester's answer slot for the message being handled.
promise_type make_promise(self_ptr self) {
  auto rp = self->make_response_promise<exchange_result>();
  return promise_type{std::make_shared<reply_slot>(rp)};
}

/// Answers a waiter that never got a connection (nothing was sent).
void answer_unsent(self_ptr self, state_type::waiter& w, std::string why) {
  auto& st = self->state;
  w.pending.deliver(error_result(
    w.id, transport_error_kind::timeout,
    std::move(why) + " (" + std::to_string(st.pool.open_count(st.key))
      + " connections, " + std::to_string(st.pool.pending_count())
      + " waiting)"));
}

/// Runs waiter `w`: on `conn` if given (handed over), else on a new dial in
/// the slot freed for it. A waiter with too little time left is answered
/// instead and the connection or slot passes on (`hand_on`); a dial that
/// cannot be created passes its slot on too.
void run_waiter(self_ptr self, std::optional<state_type::waiter> w,
                connection_ptr conn = nullptr) {
  auto& st = self->state;
  std::optional<connection_ptr> handed;
  if (conn)
    handed = std::move(conn);
  while (w) {
    auto now = self->clock().now();
    auto d = st.pool.hand_on(st.key, std::move(w), std::move(handed), now);
    // Consumed: a moved-from optional still holds a (null) connection, and a
    // later round (after a failed dial) must not hand that on.
    handed.reset();
    arm_sweep(self, d.sweep_at);
    for (auto& c : d.to_close)
      c->close();
    for (auto& late : d.late)
      answer_unsent(self, late,
                    "a connection freed up with less than the pool's "
                    "dispatch floor of the exchange's timeout left; never "
                    "sent");
    if (!d.next)
      return;
    auto& next = *d.next;
    auto& req = next.request.request;
    // The time spent queued is taken off the exchange's own timeout.
    req.timeout_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                       next.deadline - now)
                       .count();
    if (d.conn) {
      run(self, next.id, std::move(req), std::move(*d.conn),
          std::move(next.pending), true);
      return;
    }
    connection_ptr fresh;
    try {
      fresh = http_connection::make(*st.io, st.origin, st.tls);
    } catch (const std::exception& e) {
      next.pending.deliver(
        error_result(next.id, transport_error_kind::config, e.what()));
      w = st.pool.dial_failed(st.key);
      continue;
    }
    run(self, next.id, std::move(req), std::move(fresh),
        std::move(next.pending), false);
    return;
  }
}

/// The pool's side of finished exchanges (their answers went out from the
/// io thread): each connection goes back idle, to the head waiter, or is
/// closed. Runs before every message the pool handles, so that the pool's
/// view is never older than what a requester has been told.
void drain(self_ptr self) {
  auto& st = self->state;
  // Again while completions arrived unannounced as the queue filled: a
  // queued request must not wait for a connection already free.
  do {
    st.inbox->take(st.batch);
    if (st.batch.empty())
      continue;
    // When these connections go idle (pool_limits::idle_time).
    auto now = self->clock().now();
    for (auto& done : st.batch) {
      auto flight = st.pool.complete(done.exchange_id);
      if (!flight)
        continue; // cancelled earlier: already answered
      if (done.stale)
        st.pool.stale_found(*flight); // nothing of it left; it redials
      auto r = st.pool.release(flight->key, flight->conn, done.reusable, now);
      bool handed = r.decision == release_decision::handed_to_waiter;
      if (!handed && r.decision != release_decision::keep_idle)
        flight->conn->close();
      arm_sweep(self, r.sweep_at);
      // A freed connection (or slot) goes to the head waiter at once.
      run_waiter(self, std::move(r.next), handed ? flight->conn : nullptr);
    }
  } while (st.inbox->set_waiting(wake_on_completion(st)));
}

// Over 80 lines on purpose: the actor's behavior, one handler per message
// of its interface. The request handler keeps the five outcomes of an
// acquire (reuse, dial, wait, busy, overflow) in one switch, so that each
// outcome's answer to the caller stands next to its case.
pool_actor::behavior_type pool_impl(self_ptr self,
                                    std::shared_ptr<io_runner> io,
                                    std::shared_ptr<tls_context> tls,
                                    url_parts origin, pool_limits limits) {
  auto& st = self->state;
  st.io = std::move(io);
  st.tls = std::move(tls);
  st.origin = std::move(origin);
  st.key = pool_key{st.origin.scheme, st.origin.host, st.origin.port,
                    st.tls ? st.tls->identity() : std::string{}};
  st.pool = state_type{limits};
  return {
    [self](http_request& req) -> caf::result<exchange_result> {
      drain(self);
      auto& st = self->state;
      auto id = req.exchange_id;
      if (st.pool.is_in_flight(id) || st.pool.is_waiting(id))
        return error_result(id, transport_error_kind::config,
                            "duplicate exchange id " + std::to_string(id));
      auto a = st.pool.acquire(st.key, req.fresh_connection, req.may_queue);
      connection_ptr conn;
      bool reused = false;
      switch (a.kind) {
        case acquire_kind::reuse:
          // Whether the server closed it (or left bytes on it) while it was
          // idle is checked by the connection on its io thread before it
          // writes: such an exchange ends not_sent (see drain).
          conn = std::move(*a.conn);
          reused = true;
          break;
        case acquire_kind::dial:
          if (a.evicted)
            (*a.evicted)->close();
          try {
            conn = http_connection::make(*st.io, st.origin, st.tls);
          } catch (const std::exception& e) {
            run_waiter(self, st.pool.dial_failed(st.key));
            return error_result(id, transport_error_kind::config, e.what());
          }
          // Past the idle limit, completions wake the pool from now on.
          if (st.inbox->set_waiting(wake_on_completion(st)))
            drain(self);
          break;
        case acquire_kind::wait: {
          auto rp = make_promise(self);
          auto now = self->clock().now();
          auto deadline
            = now + std::chrono::nanoseconds{std::max<int64_t>(req.timeout_ns, 0)};
          bool fresh = req.fresh_connection;
          st.pool.enqueue(id, st.key, fresh, std::move(rp),
                          queued_request{std::move(req)}, deadline);
          // Completions wake the pool from now on (completion_inbox).
          if (st.inbox->set_waiting(true))
            drain(self);
          // The pool answers within the request's timeout even while it
          // waits (the transport port's promise), and a little before it:
          // the caller's attempt timer runs for the same budget and, if it
          // fired first, could only assume the request may have left. The
          // pool's "never sent" must win that race (pool_limits::
          // min_dispatch_budget).
          auto at = st.pool.expiry_time(deadline, now);
          if (at <= now)
            self->send(self, queue_expired{id});
          else
            self->delayed_send(self, at - now, queue_expired{id});
          return caf::delegated<exchange_result>{};
        }
        case acquire_kind::busy:
          // A hedge: worth sending only on a connection free now; queued it
          // would compete with its own primary for the next free one.
          return error_result(
            id, transport_error_kind::pool_overflow,
            "no connection free for a hedge (hedges never queue; "
              + std::to_string(a.connections) + " connections, "
              + std::to_string(a.waiting) + " waiting)");
        case acquire_kind::overflow:
          return error_result(
            id, transport_error_kind::pool_overflow,
            "connection pool queue full (" + std::to_string(a.waiting)
              + " waiting, " + std::to_string(a.connections) + " connections)");
      }
      auto rp = make_promise(self);
      run(self, id, std::move(req), std::move(conn), std::move(rp), reused);
      return caf::delegated<exchange_result>{};
    },
    [self](drain_completions) { drain(self); },
    [self](cancel_atom, uint64_t id) {
      drain(self); // a finished exchange is not cancelled: it is answered
      auto& st = self->state;
      auto c = st.pool.cancel(id);
      if (c.flight) {
        c.flight->conn->close();
        c.flight->pending.deliver(
          error_result(id, transport_error_kind::timeout, "cancelled", true));
        run_waiter(self, std::move(c.next));
      } else if (c.queued) {
        // Never left the queue: nothing was sent.
        c.queued->pending.deliver(error_result(
          id, transport_error_kind::timeout, "cancelled while queued for a "
                                             "connection"));
      }
    },
    [self](idle_sweep& s) {
      drain(self);
      auto& st = self->state;
      if (st.sweep_armed && *st.sweep_armed == s.due)
        st.sweep_armed.reset();
      auto r = st.pool.sweep(self->clock().now());
      for (auto& c : r.to_close)
        c->close();
      arm_sweep(self, r.next);
    },
    [self](queue_expired& q) {
      drain(self);
      auto& st = self->state;
      auto w = st.pool.expire(q.exchange_id);
      if (!w)
        return; // ran, or was cancelled
      answer_unsent(self, *w,
                    "no connection free within the exchange's timeout; "
                    "never sent");
    },
    [self](stats_atom) {
      drain(self);
      auto& st = self->state;
      const auto& c = st.pool.counters();
      pool_stats out;
      out.dialled = c.dialled;
      out.reused = c.reused;
      out.stale_discarded = c.stale_discarded;
      out.cancelled = c.cancelled;
      out.idle = st.pool.idle_count();
      out.in_flight = st.pool.in_flight_count();
      out.pending = st.pool.pending_count();
      out.waited = c.waited;
      out.overflowed = c.overflowed;
      out.busy_refused = c.busy_refused;
      out.too_late = c.too_late;
      out.idle_expired = c.idle_expired;
      return out;
    },
  };
}

} // namespace

transport_actor spawn_connection_pool(caf::actor_system& sys,
                                      const client_config& cfg,
                                      std::shared_ptr<io_runner> io) {
  cfg.validate();
  auto origin = cfg.parsed_url();
  std::shared_ptr<tls_context> tls;
  if (origin.tls() || cfg.tls.any())
    tls = tls_context::make(cfg.tls); // throws config_error naming the field
  if (!origin.tls())
    tls.reset(); // files checked, but plain http carries no identity
  if (!io)
    io = io_runner_for(sys);
  pool_limits limits;
  limits.max_idle = cfg.max_idle_per_endpoint;
  limits.max_connections = cfg.max_connections_per_endpoint;
  limits.max_pending = cfg.max_pending_requests;
  limits.min_dispatch_budget = core::from_seconds(cfg.min_dispatch_budget);
  limits.idle_time = core::from_seconds(cfg.surplus_idle_time);
  return sys.spawn(pool_impl, std::move(io), std::move(tls), std::move(origin),
                   limits);
}

} // namespace pool
} // namespace outbound
