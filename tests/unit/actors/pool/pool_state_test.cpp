// Pure tests of the connection pool's bookkeeping (actors/pool/pool_state.hpp):
// the per-endpoint connection limit, the FIFO queue of waiters, hand-over,
// cancellation, overflow and drain. Connections are ints, answers strings.

#include "actors/pool/pool_state.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

using namespace outbound;

namespace {

using state = basic_pool_state<int, std::string, std::string>;

const pool_key key{"http", "127.0.0.1", 8080, ""};
const pool_key other{"http", "127.0.0.1", 8081, ""};

state limited(std::size_t max_conns, std::size_t max_pending,
              std::size_t max_idle = 64) {
  pool_limits l;
  l.max_idle = max_idle;
  l.max_connections = max_conns;
  l.max_pending = max_pending;
  return state{l};
}

/// Admits and starts exchange `id` on a new connection `conn`.
void dial(state& s, uint64_t id, int conn) {
  auto a = s.acquire(key, false);
  ASSERT_EQ(a.kind, acquire_kind::dial) << id;
  ASSERT_TRUE(s.start(id, key, conn, "p" + std::to_string(id), false));
}

/// Queues exchange `id` (the key must be at its limit).
void wait(state& s, uint64_t id, bool fresh = false) {
  auto a = s.acquire(key, fresh);
  ASSERT_EQ(a.kind, acquire_kind::wait) << id;
  ASSERT_TRUE(s.enqueue(id, key, fresh, "p" + std::to_string(id),
                        "req" + std::to_string(id)));
}

} // namespace

TEST(PoolState, BelowTheLimitEveryExchangeDials) {
  auto s = limited(2, 8);
  dial(s, 1, 10);
  dial(s, 2, 20);
  EXPECT_EQ(s.open_count(key), 2u);
  EXPECT_EQ(s.counters().dialled, 2u);
  EXPECT_EQ(s.pending_count(), 0u);
}

TEST(PoolState, AtTheLimitAnExchangeWaitsInsteadOfDialling) {
  auto s = limited(2, 8);
  dial(s, 1, 10);
  dial(s, 2, 20);
  wait(s, 3);
  EXPECT_EQ(s.pending_count(), 1u);
  EXPECT_TRUE(s.is_waiting(3));
  EXPECT_FALSE(s.is_in_flight(3));
  EXPECT_EQ(s.counters().waited, 1u);
  EXPECT_EQ(s.open_count(key), 2u); // no third connection
  // The limit is per endpoint: another key still dials.
  EXPECT_EQ(s.acquire(other, false).kind, acquire_kind::dial);
}

TEST(PoolState, AReusableConnectionGoesToTheHeadWaiterInFifoOrder) {
  auto s = limited(1, 8);
  dial(s, 1, 10);
  wait(s, 2);
  wait(s, 3);
  wait(s, 4);
  std::vector<uint64_t> order;
  uint64_t running = 1;
  for (int round = 0; round < 3; ++round) {
    auto f = s.complete(running);
    ASSERT_TRUE(f);
    auto r = s.release(key, f->conn, true);
    ASSERT_EQ(r.decision, release_decision::handed_to_waiter);
    ASSERT_TRUE(r.next);
    EXPECT_EQ(r.next->pending, "p" + std::to_string(r.next->id));
    EXPECT_EQ(r.next->request, "req" + std::to_string(r.next->id));
    order.push_back(r.next->id);
    running = r.next->id;
    ASSERT_TRUE(s.start(running, key, f->conn, r.next->pending, true));
    EXPECT_EQ(s.idle_count(), 0u); // never parked idle while someone waits
  }
  EXPECT_EQ(order, (std::vector<uint64_t>{2, 3, 4}));
  EXPECT_EQ(s.pending_count(), 0u);
  EXPECT_EQ(s.counters().dialled, 1u);
  EXPECT_EQ(s.counters().reused, 3u);
  // The queue is empty: the last release parks the connection idle.
  auto f = s.complete(running);
  ASSERT_TRUE(f);
  auto r = s.release(key, f->conn, true);
  EXPECT_EQ(r.decision, release_decision::keep_idle);
  EXPECT_FALSE(r.next);
  EXPECT_EQ(s.open_count(key), 1u);
  EXPECT_EQ(s.acquire(key, false).kind, acquire_kind::reuse);
}

TEST(PoolState, AClosedConnectionLetsTheHeadWaiterDialInItsSlot) {
  auto s = limited(1, 8);
  dial(s, 1, 10);
  wait(s, 2);
  auto f = s.complete(1);
  ASSERT_TRUE(f);
  auto r = s.release(key, f->conn, false);
  EXPECT_EQ(r.decision, release_decision::close_not_reusable);
  ASSERT_TRUE(r.next);
  EXPECT_EQ(r.next->id, 2u);
  EXPECT_EQ(s.open_count(key), 1u); // the slot passed to the waiter
  ASSERT_TRUE(s.start(2, key, 20, r.next->pending, false));
  // Closing the last one with nobody waiting frees the slot.
  f = s.complete(2);
  r = s.release(key, f->conn, false);
  EXPECT_FALSE(r.next);
  EXPECT_EQ(s.open_count(key), 0u);
  EXPECT_EQ(s.acquire(key, false).kind, acquire_kind::dial);
}

TEST(PoolState, AFreshWaiterGetsANewDialNotAHandedOverConnection) {
  auto s = limited(1, 8);
  dial(s, 1, 10);
  wait(s, 2, true);
  auto f = s.complete(1);
  auto r = s.release(key, f->conn, true);
  EXPECT_EQ(r.decision, release_decision::close_for_fresh_waiter);
  ASSERT_TRUE(r.next);
  EXPECT_EQ(r.next->id, 2u);
  EXPECT_TRUE(r.next->fresh);
  EXPECT_EQ(s.open_count(key), 1u);
}

TEST(PoolState, AFreshExchangeAtTheLimitEvictsAnIdleConnection) {
  auto s = limited(1, 8);
  dial(s, 1, 10);
  auto f = s.complete(1);
  EXPECT_EQ(s.release(key, f->conn, true).decision,
            release_decision::keep_idle);
  auto a = s.acquire(key, true);
  EXPECT_EQ(a.kind, acquire_kind::dial);
  ASSERT_TRUE(a.evicted);
  EXPECT_EQ(*a.evicted, 10);
  EXPECT_EQ(s.idle_count(), 0u);
  EXPECT_EQ(s.open_count(key), 1u);
}

TEST(PoolState, CancelRemovesAWaiterAndKeepsTheOthersInOrder) {
  auto s = limited(1, 8);
  dial(s, 1, 10);
  wait(s, 2);
  wait(s, 3);
  auto c = s.cancel(2);
  EXPECT_FALSE(c.flight);
  ASSERT_TRUE(c.queued);
  EXPECT_EQ(c.queued->id, 2u);
  EXPECT_EQ(c.queued->pending, "p2");
  EXPECT_FALSE(c.next);
  EXPECT_FALSE(s.is_waiting(2));
  EXPECT_EQ(s.pending_count(), 1u);
  EXPECT_EQ(s.counters().cancelled, 1u);
  // Cancelling it again finds nothing.
  auto again = s.cancel(2);
  EXPECT_FALSE(again.flight);
  EXPECT_FALSE(again.queued);
  auto f = s.complete(1);
  auto r = s.release(key, f->conn, true);
  ASSERT_TRUE(r.next);
  EXPECT_EQ(r.next->id, 3u);
}

TEST(PoolState, CancelOfAFlightPassesItsSlotToTheHeadWaiter) {
  auto s = limited(1, 8);
  dial(s, 1, 10);
  wait(s, 2);
  auto c = s.cancel(1);
  ASSERT_TRUE(c.flight);
  EXPECT_EQ(c.flight->conn, 10);
  ASSERT_TRUE(c.next);
  EXPECT_EQ(c.next->id, 2u);
  EXPECT_EQ(s.open_count(key), 1u);
  EXPECT_FALSE(s.complete(1)); // a late completion finds nothing
}

TEST(PoolState, ExpireRemovesOnlyAWaiter) {
  auto s = limited(1, 8);
  dial(s, 1, 10);
  wait(s, 2);
  EXPECT_FALSE(s.expire(1)); // in flight, not queued
  EXPECT_TRUE(s.is_in_flight(1));
  auto w = s.expire(2);
  ASSERT_TRUE(w);
  EXPECT_EQ(w->id, 2u);
  EXPECT_EQ(s.pending_count(), 0u);
  EXPECT_EQ(s.counters().cancelled, 0u);
}

TEST(PoolState, AFullQueueOverflowsAtOnce) {
  auto s = limited(2, 1);
  dial(s, 1, 10);
  dial(s, 2, 20);
  wait(s, 3);
  auto a = s.acquire(key, false);
  EXPECT_EQ(a.kind, acquire_kind::overflow);
  EXPECT_EQ(a.waiting, 1u);
  EXPECT_EQ(a.connections, 2u);
  EXPECT_EQ(s.counters().overflowed, 1u);
  EXPECT_EQ(s.counters().waited, 1u);
  EXPECT_EQ(s.pending_count(), 1u);
}

TEST(PoolState, AReusedConnectionFoundStaleFreesItsSlot) {
  auto s = limited(1, 8);
  dial(s, 1, 10);
  auto f = s.complete(1);
  s.release(key, f->conn, true);
  auto a = s.acquire(key, false);
  ASSERT_EQ(a.kind, acquire_kind::reuse);
  EXPECT_EQ(*a.conn, 10);
  ASSERT_TRUE(s.start(2, key, *a.conn, "p2", true));
  EXPECT_EQ(s.counters().reused, 1u);
  // The connection found itself stale before writing: not reusable.
  auto g = s.complete(2);
  ASSERT_TRUE(g);
  EXPECT_TRUE(s.stale_found(*g));
  auto r = s.release(key, g->conn, false);
  EXPECT_EQ(r.decision, release_decision::close_not_reusable);
  EXPECT_EQ(s.counters().stale_discarded, 1u);
  EXPECT_EQ(s.counters().reused, 0u);
  EXPECT_EQ(s.open_count(key), 0u);
  EXPECT_EQ(s.acquire(key, false).kind, acquire_kind::dial);
}

// A new dial that ends not_sent was never an idle connection: not stale.
TEST(PoolState, ANewDialIsNeverCountedStale) {
  auto s = limited(1, 8);
  dial(s, 1, 10);
  auto f = s.complete(1);
  ASSERT_TRUE(f);
  EXPECT_FALSE(s.stale_found(*f));
  EXPECT_EQ(s.counters().stale_discarded, 0u);
  EXPECT_EQ(s.counters().dialled, 1u);
}

TEST(PoolState, DialFailurePassesTheSlotOn) {
  auto s = limited(1, 8);
  dial(s, 1, 10);
  wait(s, 2);
  auto c = s.cancel(1);
  ASSERT_TRUE(c.next); // waiter 2 is to dial, and cannot
  auto n = s.dial_failed(key);
  EXPECT_FALSE(n);
  EXPECT_EQ(s.open_count(key), 0u);
}

TEST(PoolState, DrainReturnsIdleFlightsAndWaiters) {
  auto s = limited(2, 8);
  dial(s, 1, 10);
  dial(s, 2, 20);
  auto f = s.complete(2);
  s.release(key, f->conn, true); // 20 idle
  auto a = s.acquire(key, false);
  ASSERT_EQ(a.kind, acquire_kind::reuse);
  ASSERT_TRUE(s.start(2, key, *a.conn, "p2", true));
  wait(s, 3);
  wait(s, 4);
  auto d = s.drain();
  EXPECT_EQ(d.idle.size(), 0u);
  EXPECT_EQ(d.flights.size(), 2u);
  ASSERT_EQ(d.waiters.size(), 2u);
  EXPECT_EQ(d.waiters[0].id, 3u);
  EXPECT_EQ(d.waiters[1].id, 4u);
  EXPECT_EQ(s.pending_count(), 0u);
  EXPECT_EQ(s.in_flight_count(), 0u);
  EXPECT_FALSE(s.is_waiting(3));
}

TEST(PoolState, IdleLimitStillCapsParkedConnections) {
  auto s = limited(4, 8, 1);
  dial(s, 1, 10);
  dial(s, 2, 20);
  auto f1 = s.complete(1);
  EXPECT_EQ(s.release(key, f1->conn, true).decision,
            release_decision::keep_idle);
  auto f2 = s.complete(2);
  EXPECT_EQ(s.release(key, f2->conn, true).decision,
            release_decision::close_pool_full);
  EXPECT_EQ(s.open_count(key), 1u);
}

TEST(PoolState, DuplicateIdsAreRefused) {
  auto s = limited(1, 8);
  dial(s, 1, 10);
  wait(s, 2);
  EXPECT_FALSE(s.enqueue(2, key, false, "x", "y"));
  EXPECT_FALSE(s.enqueue(1, key, false, "x", "y"));
  EXPECT_EQ(s.pending_count(), 1u);
}

// -- hedges never queue -------------------------------------------------------

TEST(PoolState, AnExchangeThatMayNotQueueIsRefusedAtTheLimitNotQueued) {
  auto s = limited(1, 8);
  // Below the limit a hedge dials like anyone else.
  auto a = s.acquire(key, false, false);
  ASSERT_EQ(a.kind, acquire_kind::dial);
  ASSERT_TRUE(s.start(1, key, 10, "p1", false));
  // At the limit with no idle connection: refused at once, no queue slot.
  a = s.acquire(key, false, false);
  EXPECT_EQ(a.kind, acquire_kind::busy);
  EXPECT_EQ(a.connections, 1u);
  EXPECT_EQ(s.pending_count(), 0u);
  EXPECT_EQ(s.counters().busy_refused, 1u);
  EXPECT_EQ(s.counters().waited, 0u);
  EXPECT_EQ(s.counters().overflowed, 0u);
  // Even with other waiters queued (a full queue too) it is `busy`.
  wait(s, 2);
  EXPECT_EQ(s.acquire(key, false, false).kind, acquire_kind::busy);
  EXPECT_EQ(s.pending_count(), 1u);
  // An idle connection is still reused by a hedge.
  auto f = s.complete(1);
  auto r = s.release(key, f->conn, true);
  ASSERT_EQ(r.decision, release_decision::handed_to_waiter);
  ASSERT_TRUE(s.start(2, key, 10, "p2", true));
  f = s.complete(2);
  r = s.release(key, f->conn, true);
  ASSERT_EQ(r.decision, release_decision::keep_idle);
  EXPECT_EQ(s.acquire(key, false, false).kind, acquire_kind::reuse);
}

// -- the dispatch floor
// ---------------------------------------------------------

namespace {

using tp = state::time_point;
const tp t0 = tp{} + std::chrono::hours{1};

state floored(std::size_t max_conns, std::chrono::nanoseconds floor) {
  pool_limits l;
  l.max_connections = max_conns;
  l.max_pending = 8;
  l.min_dispatch_budget = floor;
  return state{l};
}

void wait_until(state& s, uint64_t id, tp deadline, bool fresh = false) {
  auto a = s.acquire(key, fresh);
  ASSERT_EQ(a.kind, acquire_kind::wait) << id;
  ASSERT_TRUE(s.enqueue(id, key, fresh, "p" + std::to_string(id),
                        "req" + std::to_string(id), deadline));
}

} // namespace

// The queue timer fires the floor before the deadline: the pool's "never
// sent" answer then precedes the caller's own timer for the same budget.
TEST(PoolState, TheQueueTimerFiresTheDispatchFloorBeforeTheDeadline) {
  using namespace std::chrono_literals;
  auto s = floored(1, 5ms);
  EXPECT_EQ(s.expiry_time(t0 + 400ms, t0), t0 + 395ms);
  EXPECT_LT(s.expiry_time(t0 + 400ms, t0), t0 + 400ms);
  // A budget at or below the floor expires at once.
  EXPECT_EQ(s.expiry_time(t0 + 5ms, t0), t0);
  EXPECT_EQ(s.expiry_time(t0 + 1ms, t0), t0);
  EXPECT_EQ(s.expiry_time(t0, t0), t0);
}

TEST(PoolState, AWaiterInTimeGetsTheHandedOverConnection) {
  using namespace std::chrono_literals;
  auto s = floored(1, 5ms);
  dial(s, 1, 10);
  wait_until(s, 2, t0 + 100ms);
  auto f = s.complete(1);
  auto r = s.release(key, f->conn, true);
  ASSERT_EQ(r.decision, release_decision::handed_to_waiter);
  auto d = s.hand_on(key, std::move(r.next), f->conn, t0 + 95ms);
  ASSERT_TRUE(d.next);
  EXPECT_EQ(d.next->id, 2u);
  ASSERT_TRUE(d.conn);
  EXPECT_EQ(*d.conn, 10);
  EXPECT_TRUE(d.late.empty());
  EXPECT_TRUE(d.to_close.empty());
  EXPECT_EQ(s.counters().too_late, 0u);
}

// Under overload a waiter with less than the floor left is answered (never
// sent) instead of burning the connection; the connection goes to the next
// waiter that can still use it, in FIFO order.
TEST(PoolState, AWaiterBelowTheFloorIsAnsweredAndTheConnectionPassesOn) {
  using namespace std::chrono_literals;
  auto s = floored(1, 5ms);
  dial(s, 1, 10);
  wait_until(s, 2, t0 + 52ms); // 2 ms left at t0 + 50 ms
  wait_until(s, 3, t0 + 50ms); // none left
  wait_until(s, 4, t0 + 80ms); // 30 ms left
  wait_until(s, 5, t0 + 90ms);
  auto f = s.complete(1);
  auto r = s.release(key, f->conn, true);
  ASSERT_EQ(r.decision, release_decision::handed_to_waiter);
  auto d = s.hand_on(key, std::move(r.next), f->conn, t0 + 50ms);
  ASSERT_EQ(d.late.size(), 2u);
  EXPECT_EQ(d.late[0].id, 2u);
  EXPECT_EQ(d.late[1].id, 3u);
  ASSERT_TRUE(d.next);
  EXPECT_EQ(d.next->id, 4u);
  ASSERT_TRUE(d.conn);
  EXPECT_EQ(*d.conn, 10);
  EXPECT_TRUE(d.to_close.empty());
  EXPECT_EQ(s.pending_count(), 1u); // 5 still waits
  EXPECT_EQ(s.open_count(key), 1u);
  EXPECT_EQ(s.counters().too_late, 2u);
}

TEST(PoolState, WhenEveryWaiterIsLateTheConnectionGoesIdle) {
  using namespace std::chrono_literals;
  auto s = floored(1, 5ms);
  dial(s, 1, 10);
  wait_until(s, 2, t0 + 10ms);
  auto f = s.complete(1);
  auto r = s.release(key, f->conn, true);
  auto d = s.hand_on(key, std::move(r.next), f->conn, t0 + 6ms);
  ASSERT_EQ(d.late.size(), 1u);
  EXPECT_FALSE(d.next);
  EXPECT_FALSE(d.conn);
  EXPECT_EQ(s.idle_count(), 1u);
  EXPECT_EQ(s.open_count(key), 1u);
  EXPECT_EQ(s.acquire(key, false).kind, acquire_kind::reuse);
}

// A freed slot (a closed connection) skips late waiters too; a late waiter
// ahead of a fresh one lets the fresh one dial in the slot (the connection
// is closed).
TEST(PoolState, ALateWaiterPassesAFreedSlotOrAConnectionToAFreshWaiter) {
  using namespace std::chrono_literals;
  auto s = floored(1, 5ms);
  dial(s, 1, 10);
  wait_until(s, 2, t0 + 1ms);
  wait_until(s, 3, t0 + 100ms, true);
  auto f = s.complete(1);
  auto r = s.release(key, f->conn, true);
  ASSERT_EQ(r.decision, release_decision::handed_to_waiter);
  auto d = s.hand_on(key, std::move(r.next), f->conn, t0);
  ASSERT_EQ(d.late.size(), 1u);
  ASSERT_TRUE(d.next);
  EXPECT_EQ(d.next->id, 3u);
  EXPECT_FALSE(d.conn); // it dials fresh in the slot
  EXPECT_EQ(d.to_close, std::vector<int>{10});
  EXPECT_EQ(s.open_count(key), 1u);
  // No connection at hand (a slot): every late waiter is skipped and the
  // slot is freed when nobody is left.
  ASSERT_TRUE(s.start(3, key, 30, "p3", false));
  wait_until(s, 4, t0 + 1ms);
  f = s.complete(3);
  r = s.release(key, f->conn, false);
  ASSERT_EQ(r.decision, release_decision::close_not_reusable);
  d = s.hand_on(key, std::move(r.next), std::nullopt, t0);
  EXPECT_EQ(d.late.size(), 1u);
  EXPECT_FALSE(d.next);
  EXPECT_EQ(s.open_count(key), 0u);
  EXPECT_EQ(s.counters().too_late, 2u);
}

// Keys are kept apart; the first key's entry leaving (its last connection
// closed) leaves the other keys' idle connections and counts as they were.
TEST(PoolState, EachKeyKeepsItsOwnConnectionsWhenAnotherKeyEmpties) {
  const pool_key third{"https", "127.0.0.1", 8080, "id"};
  auto s = limited(4, 8);
  uint64_t id = 1;
  for (const auto* k : {&key, &other, &third}) {
    ASSERT_EQ(s.acquire(*k, false).kind, acquire_kind::dial);
    ASSERT_TRUE(s.start(id, *k, static_cast<int>(id * 10), "p", false));
    ++id;
  }
  // `other` parks its connection idle; `third` too; `key` closes its own.
  for (uint64_t done : {2, 3}) {
    auto f = s.complete(done);
    ASSERT_TRUE(f);
    EXPECT_EQ(s.release(f->key, f->conn, true).decision,
              release_decision::keep_idle);
  }
  auto f1 = s.complete(1);
  ASSERT_TRUE(f1);
  auto r1 = s.release(key, f1->conn, false);
  EXPECT_EQ(r1.decision, release_decision::close_not_reusable);
  EXPECT_EQ(s.open_count(key), 0u);
  EXPECT_EQ(s.open_count(other), 1u);
  EXPECT_EQ(s.open_count(third), 1u);
  EXPECT_EQ(s.idle_count(), 2u);
  // Each key reuses its own idle connection, never another key's.
  auto a3 = s.acquire(third, false);
  ASSERT_EQ(a3.kind, acquire_kind::reuse);
  EXPECT_EQ(*a3.conn, 30);
  auto a2 = s.acquire(other, false);
  ASSERT_EQ(a2.kind, acquire_kind::reuse);
  EXPECT_EQ(*a2.conn, 20);
  EXPECT_EQ(s.acquire(key, false).kind, acquire_kind::dial);
  EXPECT_EQ(s.open_count(key), 1u);
}

// -- idle connections beyond the idle limit (pool_limits::idle_time) --------

namespace {

state lingering(std::size_t max_idle, std::chrono::nanoseconds idle_time,
                std::size_t max_conns = 8) {
  pool_limits l;
  l.max_idle = max_idle;
  l.max_connections = max_conns;
  l.max_pending = 8;
  l.idle_time = idle_time;
  return state{l};
}

/// Completes exchange `id` and releases its connection, reusable, at `at`.
state::release_result finish(state& s, uint64_t id, tp at) {
  auto f = s.complete(id);
  EXPECT_TRUE(f) << id;
  return s.release(f->key, f->conn, true, at);
}

} // namespace

// Released into a full idle set, a connection is kept, not closed; the
// sweep closes the least recently used ones beyond the limit once they have
// been idle for idle_time, oldest first, and never one within the limit.
TEST(PoolState, BeyondTheIdleLimitConnectionsLingerForTheIdleTime) {
  using namespace std::chrono_literals;
  auto s = lingering(1, 2s);
  dial(s, 1, 10);
  dial(s, 2, 20);
  dial(s, 3, 30);
  auto r1 = finish(s, 1, t0);
  EXPECT_EQ(r1.decision, release_decision::keep_idle);
  EXPECT_FALSE(r1.sweep_at); // within the limit
  auto r2 = finish(s, 2, t0 + 1ms);
  EXPECT_EQ(r2.decision, release_decision::keep_idle);
  ASSERT_TRUE(r2.sweep_at);
  EXPECT_EQ(*r2.sweep_at, t0 + 2s); // the oldest idle one's time runs out
  auto r3 = finish(s, 3, t0 + 2ms);
  ASSERT_TRUE(r3.sweep_at);
  EXPECT_EQ(*r3.sweep_at, t0 + 2s);
  EXPECT_EQ(s.idle_count(), 3u);
  EXPECT_EQ(s.open_count(key), 3u);

  auto early = s.sweep(t0 + 1s);
  EXPECT_TRUE(early.to_close.empty());
  ASSERT_TRUE(early.next);
  EXPECT_EQ(*early.next, t0 + 2s);

  auto first = s.sweep(t0 + 2s);
  EXPECT_EQ(first.to_close, std::vector<int>{10});
  ASSERT_TRUE(first.next);
  EXPECT_EQ(*first.next, t0 + 1ms + 2s);
  EXPECT_EQ(s.open_count(key), 2u);

  auto rest = s.sweep(t0 + 1h);
  EXPECT_EQ(rest.to_close, std::vector<int>{20});
  EXPECT_FALSE(rest.next); // one idle connection: within the limit
  EXPECT_EQ(s.idle_count(), 1u);
  EXPECT_EQ(s.open_count(key), 1u);
  EXPECT_EQ(s.counters().idle_expired, 2u);
  auto a = s.acquire(key, false);
  ASSERT_EQ(a.kind, acquire_kind::reuse);
  EXPECT_EQ(*a.conn, 30); // the most recently used one stayed
}

// A lingering connection serves the next exchange (most recently used
// first): a burst after a burst reuses instead of dialling again.
TEST(PoolState, ALingeringConnectionIsReusedBeforeItExpires) {
  using namespace std::chrono_literals;
  auto s = lingering(1, 2s);
  dial(s, 1, 10);
  dial(s, 2, 20);
  finish(s, 1, t0);
  finish(s, 2, t0 + 1ms);
  for (int want : {20, 10}) {
    auto a = s.acquire(key, false);
    ASSERT_EQ(a.kind, acquire_kind::reuse);
    EXPECT_EQ(*a.conn, want);
  }
  EXPECT_EQ(s.acquire(key, false).kind, acquire_kind::dial);
  EXPECT_EQ(s.counters().dialled, 2u);
  EXPECT_TRUE(s.sweep(t0 + 1h).to_close.empty()); // nothing idle
  EXPECT_EQ(s.counters().idle_expired, 0u);
}

// With no idle limit (0) every released connection lingers; the last one
// of a key expiring removes its entry and leaves other keys as they were.
TEST(PoolState, ExpiringAKeysLastConnectionLeavesOtherKeysIntact) {
  using namespace std::chrono_literals;
  auto s = lingering(0, 1s);
  ASSERT_EQ(s.acquire(key, false).kind, acquire_kind::dial);
  ASSERT_TRUE(s.start(1, key, 10, "p1", false));
  ASSERT_EQ(s.acquire(other, false).kind, acquire_kind::dial);
  ASSERT_TRUE(s.start(2, other, 20, "p2", false));
  auto r1 = finish(s, 1, t0);
  ASSERT_TRUE(r1.sweep_at);
  EXPECT_EQ(*r1.sweep_at, t0 + 1s);
  finish(s, 2, t0 + 500ms);
  auto sw = s.sweep(t0 + 1s);
  EXPECT_EQ(sw.to_close, std::vector<int>{10});
  ASSERT_TRUE(sw.next);
  EXPECT_EQ(*sw.next, t0 + 1500ms);
  EXPECT_EQ(s.open_count(key), 0u);
  EXPECT_EQ(s.open_count(other), 1u);
  auto a = s.acquire(other, false);
  ASSERT_EQ(a.kind, acquire_kind::reuse);
  EXPECT_EQ(*a.conn, 20);
  EXPECT_EQ(s.acquire(key, false).kind, acquire_kind::dial);
  EXPECT_EQ(s.open_count(key), 1u);
}

// A connection that goes idle when every waiter turned out late reports
// when to sweep, as a release does.
TEST(PoolState, AConnectionLeftIdleByLateWaitersReportsItsSweep) {
  using namespace std::chrono_literals;
  pool_limits l;
  l.max_connections = 1;
  l.max_pending = 8;
  l.max_idle = 0;
  l.idle_time = 3s;
  state s{l};
  dial(s, 1, 10);
  wait_until(s, 2, t0 + 10ms);
  auto f = s.complete(1);
  auto r = s.release(key, f->conn, true, t0);
  ASSERT_EQ(r.decision, release_decision::handed_to_waiter);
  auto d = s.hand_on(key, std::move(r.next), f->conn, t0 + 6ms);
  ASSERT_EQ(d.late.size(), 1u);
  EXPECT_TRUE(d.to_close.empty());
  ASSERT_TRUE(d.sweep_at);
  EXPECT_EQ(*d.sweep_at, t0 + 6ms + 3s);
  EXPECT_EQ(s.idle_count(), 1u);
}

// Idle times stay ordered along the idle set even when a release reports an
// earlier time than the one before it (the actor reads its clock once per
// batch of completions, a waiter's hand-on later): the sweep never closes
// a connection before its predecessor's time is out.
TEST(PoolState, AReleaseReportedEarlierStartsNoEarlierThanThePreviousOne) {
  using namespace std::chrono_literals;
  auto s = lingering(0, 1s);
  dial(s, 1, 10);
  dial(s, 2, 20);
  finish(s, 1, t0 + 5ms);
  auto r = finish(s, 2, t0);
  ASSERT_TRUE(r.sweep_at);
  EXPECT_EQ(*r.sweep_at, t0 + 5ms + 1s);
  auto early = s.sweep(t0 + 1s);
  EXPECT_TRUE(early.to_close.empty());
  ASSERT_TRUE(early.next);
  EXPECT_EQ(*early.next, t0 + 5ms + 1s);
  EXPECT_EQ(s.sweep(t0 + 5ms + 1s).to_close, (std::vector<int>{10, 20}));
  EXPECT_EQ(s.open_count(key), 0u);
}
