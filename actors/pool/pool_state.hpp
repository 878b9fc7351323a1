#pragma once

// The connection pool's bookkeeping as a pure state machine ("pure core, thin
// actor", docs/ARCHITECTURE.md): no CAF, no Asio, no clock. The actor
// (connection_pool.cpp) decodes messages, asks this state what to do, does it.
//
// One exchange:
//
// clang-format off
//   http_request ──► acquire(key, fresh) ─┬─ reuse: idle connection (MRU) ──► start(reused); found stale on its io thread
//                                         │                                   before the write: ends not_sent ─► stale_found
//                                         ├─ dial (below the limit) ─────────────────────────► start(dialled)
//                                         ├─ wait (at the limit) ──► enqueue ──► FIFO queue ──┬─ handed a connection ─► hand_on ─► start(reused)
//                                         │                                                   ├─ a slot freed ────────► hand_on ─► start(dialled)
//                                         │                                                   └─ cancel / expire ─────► answer, never sent
//                                         ├─ busy (at the limit, may not queue: a hedge) ──► answer pool_overflow at once
//                                         └─ overflow (queue full) ──► answer pool_overflow at once
//
//   hand_on: a waiter with less than `min_dispatch_budget` left is answered
//   (never sent) instead of being given the connection or slot, which passes
//   on to the next waiter; its queue timer fires at deadline - that floor.
//   start ──► in flight ──┬── complete(id) ──► release(key, conn, reusable) ─┬─ a waiter: hand over (or close, it dials)
//                         │                                                  ├─ keep (idle, MRU)
//                         │                                                  ├─ keep beyond max_idle, for idle_time (sweep)
//                         │                                                  └─ close (its slot to the head waiter)
//                         └── cancel(id) ────► close (never reused; its slot to the head waiter); a later complete(id) finds nothing
// clang-format on
//
//   sweep(now): the least recently used idle connections beyond max_idle
//   that have been idle for idle_time are closed.
//
// `Conn` is the connection handle (a shared_ptr<http_connection> in the
// actor, a plain int in tests); `Pending` is what the actor needs to answer
// the requester (a response promise); `Request` is what a queued exchange
// runs later (the request).

#include "core/node_cache.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <list>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace outbound {
inline namespace pool {

/// What idle connections are keyed by: connections are shared only between
/// requests to the same scheme, host, port and TLS identity.
struct pool_key {
  std::string scheme;
  std::string host;
  uint16_t port = 0;
  /// tls_context::identity(), empty for plain http.
  std::string tls_identity;

  /// A strict weak order for the queues' map, cheapest fields first (the
  /// order itself means nothing): one compare() per string, where
  /// std::tie's lexicographic < costs two.
  friend bool operator<(const pool_key& a, const pool_key& b) {
    if (a.port != b.port)
      return a.port < b.port;
    if (int c = a.host.compare(b.host))
      return c < 0;
    if (int c = a.scheme.compare(b.scheme))
      return c < 0;
    return a.tls_identity.compare(b.tls_identity) < 0;
  }
  friend bool operator==(const pool_key& a, const pool_key& b) {
    return a.port == b.port && a.host == b.host && a.scheme == b.scheme
           && a.tls_identity == b.tls_identity;
  }
};

/// Counters of a pool, for tests and metrics.
struct pool_counters {
  /// Connections dialled (one per exchange that found no usable idle one).
  uint64_t dialled = 0;
  /// Exchanges that ran on an idle pooled connection or on a connection
  /// handed over by the exchange before them.
  uint64_t reused = 0;
  /// Idle connections found stale (closed by the server, unread bytes) and
  /// discarded; each answered its request with `not_sent`.
  uint64_t stale_discarded = 0;
  /// Exchanges cancelled by their caller (in flight or queued).
  uint64_t cancelled = 0;
  /// Exchanges that found the endpoint at its connection limit and waited
  /// in the queue.
  uint64_t waited = 0;
  /// Exchanges refused at once because the queue was full.
  uint64_t overflowed = 0;
  /// Exchanges that may not queue (hedges) refused at once because the
  /// endpoint was at its connection limit with no idle connection.
  uint64_t busy_refused = 0;
  /// Waiters answered (never sent) when a connection or slot freed up for
  /// them with less than `pool_limits::min_dispatch_budget` of their time
  /// left (`hand_on`).
  uint64_t too_late = 0;
  /// Idle connections beyond `pool_limits::max_idle` closed by `sweep`
  /// after `pool_limits::idle_time` unused.
  uint64_t idle_expired = 0;
};

/// Limits of a pool, per endpoint (pool_key).
struct pool_limits {
  /// Idle connections kept with no time limit (0 keeps none beyond
  /// `idle_time`).
  std::size_t max_idle = 64;
  /// Connections open at once: in flight (dialling included) plus idle.
  std::size_t max_connections = 1024;
  /// Exchanges waiting for a connection; one more is refused (overflow).
  std::size_t max_pending = 1024;
  /// The least time a waiter must have left to be given a connection: a
  /// waiter below it would only time out on the wire and burn the
  /// connection, so it is answered "never sent" instead (`hand_on`), and a
  /// waiter's queue timer fires this much before its deadline, so that the
  /// pool's "never sent" answer reaches the caller before the caller's own
  /// timer for the same budget (which could not tell queued from sent).
  /// 5 ms: above the scheduling jitter between two timers of one actor
  /// system, well below any useful exchange timeout. Must be > 0.
  std::chrono::nanoseconds min_dispatch_budget = std::chrono::milliseconds{5};
  /// How long an idle connection beyond `max_idle` is kept before `sweep`
  /// closes it (the least recently used first), where it would otherwise
  /// have been closed at once on release: a burst's connections serve the
  /// next burst instead of being closed and dialled again. Finagle's
  /// DefaultPool `idleTime`, applied above its low watermark. 0 closes a
  /// connection released into a full idle set at once. [0]
  std::chrono::nanoseconds idle_time{0};
};

/// What `acquire` decided for a new exchange.
enum class acquire_kind {
  /// Run on `acquisition::conn`, an idle connection
  /// (`start(..., reused = true)`; if it turns out stale before anything
  /// was written: `stale_found`, then `release(..., false)`).
  reuse,
  /// Dial a new connection: a slot is reserved for it (`start(..., false)`,
  /// or `dial_failed` if it cannot even be created).
  dial,
  /// The endpoint is at its connection limit: `enqueue` the exchange.
  wait,
  /// The queue is full: refuse the exchange at once (nothing was sent).
  overflow,
  /// The endpoint is at its connection limit and the exchange may not queue
  /// (a hedge): refuse it at once (nothing was sent).
  busy,
};

/// What `release` decided for a connection whose exchange completed.
enum class release_decision {
  /// Put back as the most recently used idle connection of its key.
  keep_idle,
  /// Close: the exchange said the connection is not reusable.
  close_not_reusable,
  /// Close: the key already holds `max_idle` idle connections (and
  /// `idle_time` is 0).
  close_pool_full,
  /// Not closed: handed to the head waiter, which runs on it at once.
  handed_to_waiter,
  /// Close: the head waiter asked for a fresh connection; it dials in this
  /// connection's slot.
  close_for_fresh_waiter,
};

/// Pure bookkeeping of idle, in-flight and queued exchanges of a pool.
///
/// Connection limit (per key): a connection counts from the moment an
/// exchange is admitted to dial it (so a dial in progress counts) until the
/// caller closes it (`release` deciding to close, `cancel` of its exchange,
/// `dial_failed`); idle connections count too, since they
/// hold a socket. `open_count(key)` = in flight on the key + idle on the key.
///
/// When an exchange finds no idle connection and the key at
/// `max_connections`, it waits in a FIFO queue (Envoy's cluster circuit
/// breakers max_connections / max_pending_requests, Go's
/// http.Transport.MaxConnsPerHost, Finagle's watermark pool with max
/// waiters). A connection that becomes free goes to the head waiter: a
/// reusable one is handed over directly (never parked idle while someone
/// waits); a closed one lets the head waiter dial in its slot. While waiters
/// are queued no connection of their key is idle. A queue holding
/// `max_pending` waiters refuses the next exchange (`acquire_kind::overflow`).
///
/// `Conn` is the connection handle, `Pending` what answers the requester,
/// `Request` what a waiter needs to run later (the request itself).
template <class Conn, class Pending, class Request>
class basic_pool_state {
public:
  /// Deadlines of waiters (the actor clock's time point; tests pass any).
  using time_point = std::chrono::steady_clock::time_point;

  /// An exchange in flight.
  struct in_flight {
    pool_key key;
    Conn conn;
    Pending pending;
    /// Runs on a connection taken from the idle set (not a new dial).
    bool reused = false;
  };

  /// An exchange waiting for a connection.
  struct waiter {
    uint64_t id = 0;
    pool_key key;
    /// Asked for a fresh connection: never takes a handed-over one.
    bool fresh = false;
    Pending pending;
    Request request;
    /// When the exchange's own time limit runs out.
    time_point deadline = time_point::max();
  };

  /// `acquire`'s answer.
  struct acquisition {
    acquire_kind kind = acquire_kind::dial;
    /// reuse: the idle connection taken.
    std::optional<Conn> conn;
    /// dial: an idle connection evicted to make room for a fresh dial at the
    /// limit (the caller closes it).
    std::optional<Conn> evicted;
    /// overflow: waiters queued and connections open on the key.
    std::size_t waiting = 0;
    std::size_t connections = 0;
  };

  /// `release`'s answer.
  struct release_result {
    release_decision decision = release_decision::keep_idle;
    /// The waiter to run next: on the released connection
    /// (`handed_to_waiter`) or on a new dial in its slot (any close).
    std::optional<waiter> next;
    /// keep_idle with the key now above `max_idle`: when `sweep` has
    /// something to close (the least recently used idle connection's
    /// `idle_time` runs out; at or before `now` when it has).
    std::optional<time_point> sweep_at;
  };

  /// `sweep`'s answer.
  struct sweep_result {
    /// Idle connections the caller closes.
    std::vector<Conn> to_close;
    /// When to sweep next, if any key is still above `max_idle`.
    std::optional<time_point> next;
  };

  /// `hand_on`'s answer.
  struct dispatch {
    /// The waiter to run now: on `conn` if set (handed over), else on a new
    /// dial in the slot freed for it. Nothing: the connection went idle or
    /// closed, or the slot was freed.
    std::optional<waiter> next;
    std::optional<Conn> conn;
    /// Waiters with too little time left: the caller answers them (never
    /// sent).
    std::vector<waiter> late;
    /// Connections the caller closes (passed on as a slot to a fresh
    /// waiter, or not kept idle).
    std::vector<Conn> to_close;
    /// The connection went idle beyond `max_idle`: when to `sweep`
    /// (release_result::sweep_at).
    std::optional<time_point> sweep_at;
  };

  /// `cancel`'s answer: at most one of `flight` and `queued` is set.
  struct cancel_result {
    /// The exchange was in flight: the caller closes its connection.
    std::optional<in_flight> flight;
    /// The exchange was queued: it left the queue.
    std::optional<waiter> queued;
    /// The waiter that dials in the slot of the closed connection.
    std::optional<waiter> next;
  };

  /// Idle limit only (no connection or queue limit).
  explicit basic_pool_state(std::size_t max_idle)
    : basic_pool_state(pool_limits{max_idle, SIZE_MAX, SIZE_MAX}) {
  }

  explicit basic_pool_state(pool_limits limits) : limits_(limits) {
  }

  /// Decides how a new exchange on `key` gets a connection: the most
  /// recently used idle one (unless `fresh`), a new dial if the key is below
  /// `max_connections` (or, for `fresh` at the limit, in the slot of an
  /// evicted idle connection), else the queue, else overflow.
  /// An exchange that may not queue (`may_queue` false, a hedge) gets
  /// `busy` where it would wait or overflow.
  acquisition acquire(const pool_key& key, bool fresh, bool may_queue = true) {
    acquisition a;
    auto* found = find_endpoint(key);
    bool has_idle = found && !found->idle.empty();
    if (!fresh && has_idle) {
      a.kind = acquire_kind::reuse;
      a.conn = std::move(found->idle.back().conn);
      found->idle.pop_back();
      return a;
    }
    auto& ep = found ? *found : add_endpoint(key);
    auto& open = ep.open;
    auto q = queues_.find(key);
    bool queued = q != queues_.end() && !q->second.empty();
    if (!queued && open < limits_.max_connections) {
      ++open;
      a.kind = acquire_kind::dial;
      return a;
    }
    if (!queued && has_idle) {
      // fresh at the limit: the least recently used idle connection yields
      // its slot (an idle connection must not make a fresh exchange wait).
      a.kind = acquire_kind::dial;
      a.evicted = std::move(ep.idle.front().conn);
      ep.idle.erase(ep.idle.begin());
      return a;
    }
    std::size_t waiting = queued ? q->second.size() : 0;
    if (!may_queue) {
      ++counters_.busy_refused;
      a.kind = acquire_kind::busy;
      a.waiting = waiting;
      a.connections = open;
      return a;
    }
    if (waiting >= limits_.max_pending) {
      ++counters_.overflowed;
      a.kind = acquire_kind::overflow;
      a.waiting = waiting;
      a.connections = open;
      return a;
    }
    a.kind = acquire_kind::wait;
    return a;
  }

  /// Queues exchange `id` (after `acquire` said `wait`) until `deadline`,
  /// the end of its own time limit. Returns false (and queues nothing) if
  /// `id` is already queued or in flight.
  bool enqueue(uint64_t id, pool_key key, bool fresh, Pending pending,
               Request request, time_point deadline = time_point::max()) {
    if (waiting_.count(id) > 0 || flights_.count(id) > 0)
      return false;
    auto& q = queues_[key];
    q.push_back(waiter{id, std::move(key), fresh, std::move(pending),
                       std::move(request), deadline});
    waiting_.emplace(id, std::prev(q.end()));
    ++pending_;
    ++counters_.waited;
    return true;
  }

  /// The exchange `f` (returned by `complete`) ran on a reused connection
  /// and ended `not_sent`: the connection was stale (the server closed it,
  /// or left bytes on it, while it was idle; the connection checks on its
  /// io thread before it writes). Counts it as stale, not as reused, and
  /// returns true; returns false (and counts nothing) for a new dial. The
  /// caller releases the connection as not reusable.
  bool stale_found(const in_flight& f) {
    if (!f.reused)
      return false;
    ++counters_.stale_discarded;
    if (counters_.reused > 0)
      --counters_.reused;
    return true;
  }

  /// A dial admitted by `acquire` (or given to a waiter) could not even be
  /// created: frees its slot. Returns the waiter that dials next, if any.
  std::optional<waiter> dial_failed(const pool_key& key) {
    return free_slot(key);
  }

  /// Registers exchange `id` as running on `conn`. Returns false (and
  /// registers nothing) if `id` is already in flight.
  bool start(uint64_t id, pool_key key, Conn conn, Pending pending,
             bool reused) {
    auto [i, added]
      = flight_nodes_.emplace(flights_, id, std::move(key), std::move(conn),
                              std::move(pending), reused);
    if (!added)
      return false;
    if (reused)
      ++counters_.reused;
    else
      ++counters_.dialled;
    return true;
  }

  /// The exchange `id` completed: removes and returns it, or nothing if it
  /// is unknown (cancelled earlier: the completion is dropped). Its
  /// connection still counts until `release`.
  std::optional<in_flight> complete(uint64_t id) {
    return take(id);
  }

  /// The caller cancelled `id`: removes it from the flights (the caller
  /// closes its connection and answers; its slot goes to `next`) or from
  /// the queue (the caller answers). Nothing if it already completed.
  cancel_result cancel(uint64_t id) {
    cancel_result r;
    if (auto f = take(id)) {
      ++counters_.cancelled;
      r.next = free_slot(f->key);
      r.flight = std::move(f);
      return r;
    }
    r.queued = leave_queue(id);
    if (r.queued)
      ++counters_.cancelled;
    return r;
  }

  /// When the queue timer of a waiter with `deadline` fires:
  /// `min_dispatch_budget` before it (see pool_limits), never before `now`.
  time_point expiry_time(time_point deadline, time_point now) const {
    if (deadline - now <= limits_.min_dispatch_budget)
      return now;
    return deadline - limits_.min_dispatch_budget;
  }

  /// True if waiter `w` still has `min_dispatch_budget` left at `now`.
  bool in_time(const waiter& w, time_point now) const {
    return w.deadline > now && w.deadline - now >= limits_.min_dispatch_budget;
  }

  /// Gives `w` (popped by `release`, `cancel` or
  /// `dial_failed`) the connection `conn` (handed over) or, without one, the
  /// slot freed for it, unless its time is too short (`in_time`): then it
  /// joins `late` and the connection or slot passes on to the next waiter,
  /// as if the late one had never been queued.
  dispatch hand_on(const pool_key& key, std::optional<waiter> w,
                   std::optional<Conn> conn, time_point now) {
    dispatch d;
    while (w && !in_time(*w, now)) {
      ++counters_.too_late;
      d.late.push_back(std::move(*w));
      w.reset();
      if (conn) {
        Conn c = std::move(*conn);
        conn.reset();
        auto r = release(key, c, true, now);
        if (r.decision == release_decision::handed_to_waiter)
          conn = std::move(c);
        else if (r.decision != release_decision::keep_idle)
          d.to_close.push_back(std::move(c));
        if (r.sweep_at)
          d.sweep_at = r.sweep_at;
        w = std::move(r.next);
      } else {
        w = free_slot(key);
      }
    }
    d.next = std::move(w);
    if (d.next)
      d.conn = std::move(conn);
    return d;
  }

  /// Removes `id` from the queue if it is still waiting (its own time limit
  /// ran out: the caller answers it); not counted as a cancel.
  std::optional<waiter> expire(uint64_t id) {
    return leave_queue(id);
  }

  /// The exchange on `conn` completed at `now`: hands `conn` to the head
  /// waiter if `reusable` and one waits, else keeps it idle if `reusable`
  /// and there is room (below `max_idle`, or for `idle_time` beyond it),
  /// else closes it (and its slot goes to the head waiter). `now` only
  /// matters with `idle_time` > 0: it starts the connection's idle time
  /// (never before the previous connection's, so that the idle set stays
  /// ordered).
  release_result release(const pool_key& key, Conn conn, bool reusable,
                         time_point now = time_point{}) {
    release_result r;
    auto q = queues_.find(key);
    bool queued = q != queues_.end() && !q->second.empty();
    if (!reusable) {
      r.decision = release_decision::close_not_reusable;
      r.next = free_slot(key);
      return r;
    }
    if (queued) {
      r.decision = q->second.front().fresh
                     ? release_decision::close_for_fresh_waiter
                     : release_decision::handed_to_waiter;
      r.next = pop_head(q);
      return r;
    }
    auto* found = find_endpoint(key);
    if ((found ? found->idle.size() : 0) >= limits_.max_idle
        && limits_.idle_time.count() <= 0) {
      r.decision = release_decision::close_pool_full;
      free_slot(key); // may remove the entry
      return r;
    }
    auto& ep = found ? *found : add_endpoint(key);
    auto since = ep.idle.empty() ? now : std::max(now, ep.idle.back().since);
    ep.idle.push_back(idle_entry{std::move(conn), since});
    r.decision = release_decision::keep_idle;
    r.sweep_at = sweep_time(ep);
    return r;
  }

  /// Closes, on every key, the least recently used idle connections beyond
  /// `max_idle` that have been idle for `idle_time` at `now`. Their slots
  /// free up (no waiter is queued while a connection of its key is idle).
  sweep_result sweep(time_point now) {
    sweep_result r;
    for (std::size_t i = 0; i < endpoints_.size();) {
      auto& ep = endpoints_[i];
      std::size_t n = 0;
      while (ep.idle.size() - n > limits_.max_idle
             && ep.idle[n].since + limits_.idle_time <= now)
        ++n;
      for (std::size_t k = 0; k < n; ++k)
        r.to_close.push_back(std::move(ep.idle[k].conn));
      ep.idle.erase(ep.idle.begin(), ep.idle.begin() + n);
      counters_.idle_expired += n;
      ep.open -= n;
      if (auto at = sweep_time(ep))
        r.next = r.next ? std::min(*r.next, *at) : *at;
      if (ep.open == 0) {
        // No idle connection is left on an entry that opens nothing.
        if (i + 1 != endpoints_.size())
          ep = std::move(endpoints_.back());
        endpoints_.pop_back();
        continue;
      }
      ++i;
    }
    return r;
  }

  /// Removes every connection and waiter (on termination). The in-flight
  /// entries and the waiters are returned so that the caller answers them.
  struct drained {
    std::vector<Conn> idle;
    std::vector<in_flight> flights;
    std::vector<waiter> waiters;
  };
  drained drain() {
    drained d;
    for (auto& e : endpoints_)
      for (auto& c : e.idle)
        d.idle.push_back(std::move(c.conn));
    for (auto& [id, f] : flights_)
      d.flights.push_back(std::move(f));
    flights_.clear();
    for (auto& [key, q] : queues_)
      for (auto& w : q)
        d.waiters.push_back(std::move(w));
    queues_.clear();
    waiting_.clear();
    pending_ = 0;
    endpoints_.clear();
    return d;
  }

  /// Idle connections over all keys.
  std::size_t idle_count() const {
    std::size_t n = 0;
    for (const auto& e : endpoints_)
      n += e.idle.size();
    return n;
  }

  /// Connections open on `key` (in flight, dialling or idle).
  std::size_t open_count(const pool_key& key) const {
    const auto* e = find_endpoint(key);
    return e ? e->open : 0;
  }

  /// True if exchange `id` is in flight.
  bool is_in_flight(uint64_t id) const {
    return flights_.count(id) > 0;
  }

  /// True if exchange `id` is queued.
  bool is_waiting(uint64_t id) const {
    return waiting_.count(id) > 0;
  }

  /// Exchanges in flight.
  std::size_t in_flight_count() const {
    return flights_.size();
  }

  /// Exchanges queued now, over all keys.
  std::size_t pending_count() const {
    return pending_;
  }

  const pool_counters& counters() const {
    return counters_;
  }

  const pool_limits& limits() const {
    return limits_;
  }

private:
  using queue = std::list<waiter>;

  std::optional<in_flight> take(uint64_t id) {
    auto i = flights_.find(id);
    if (i == flights_.end())
      return std::nullopt;
    auto f = std::move(i->second);
    flight_nodes_.erase(flights_, i);
    return f;
  }

  std::optional<waiter> pop_head(typename std::map<pool_key, queue>::iterator q) {
    waiter w = std::move(q->second.front());
    q->second.pop_front();
    waiting_.erase(w.id);
    --pending_;
    if (q->second.empty())
      queues_.erase(q);
    return w;
  }

  /// A connection of `key` closed: its slot goes to the head waiter (which
  /// dials), or the open count drops.
  std::optional<waiter> free_slot(const pool_key& key) {
    auto q = queues_.find(key);
    if (q != queues_.end() && !q->second.empty())
      return pop_head(q);
    auto* e = find_endpoint(key);
    if (e && e->open > 0 && --e->open == 0 && e->idle.empty()) {
      // Idle connections count as open, so none can be left here.
      if (e != &endpoints_.back())
        *e = std::move(endpoints_.back());
      endpoints_.pop_back();
    }
    return std::nullopt;
  }

  std::optional<waiter> leave_queue(uint64_t id) {
    auto i = waiting_.find(id);
    if (i == waiting_.end())
      return std::nullopt;
    auto it = i->second;
    auto q = queues_.find(it->key);
    waiter w = std::move(*it);
    q->second.erase(it);
    waiting_.erase(i);
    --pending_;
    if (q->second.empty())
      queues_.erase(q);
    return w;
  }

  /// An idle connection and when it went idle.
  struct idle_entry {
    Conn conn;
    time_point since;
  };

  /// One key's connections: the idle ones (most recently used last, so
  /// `since` never decreases along the vector) and how many are open (see
  /// the class comment).
  struct endpoint {
    pool_key key;
    std::vector<idle_entry> idle;
    std::size_t open = 0;
  };

  /// When `sweep` has something to close on `ep`: the least recently used
  /// idle connection's `idle_time` ends then. Nothing while `ep` holds at
  /// most `max_idle` idle connections.
  std::optional<time_point> sweep_time(const endpoint& ep) const {
    if (ep.idle.size() <= limits_.max_idle)
      return std::nullopt;
    return ep.idle.front().since + limits_.idle_time;
  }

  /// The entry of `key`, or null. A linear scan by equality: a pool nearly
  /// always serves one key (the service client's origin), and a std::map
  /// keyed by three strings and a port paid two full comparisons per
  /// lookup, three lookups per exchange.
  endpoint* find_endpoint(const pool_key& key) {
    for (auto& e : endpoints_)
      if (e.key == key)
        return &e;
    return nullptr;
  }
  const endpoint* find_endpoint(const pool_key& key) const {
    for (const auto& e : endpoints_)
      if (e.key == key)
        return &e;
    return nullptr;
  }
  /// Adds the entry of `key` (not present); references to other entries
  /// may move.
  endpoint& add_endpoint(const pool_key& key) {
    return endpoints_.emplace_back(endpoint{key, {}, 0});
  }

  pool_limits limits_;
  /// One entry per key seen (an entry leaves when its last open connection
  /// closes).
  std::vector<endpoint> endpoints_;
  std::unordered_map<uint64_t, in_flight> flights_;
  /// Spare nodes of flights_: no table node allocated per exchange in
  /// steady state (core/node_cache.hpp).
  node_cache<std::unordered_map<uint64_t, in_flight>> flight_nodes_;
  std::map<pool_key, queue> queues_;
  std::unordered_map<uint64_t, typename queue::iterator> waiting_;
  std::size_t pending_ = 0;
  pool_counters counters_;
};

} // namespace pool
} // namespace outbound
