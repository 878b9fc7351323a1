// The coalescing state of the driver (batching, chunking): arithmetic,
// chunking, backpressure, cancellation, freshness. Pure, explicit time.

#include "actors/coalesce/batcher.hpp"
#include "actors/coalesce/detail/batcher_impl.hpp"
#include "config/config_error.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <random>
#include <set>

using namespace outbound;
using std::chrono::microseconds;
using std::chrono::milliseconds;

namespace {

const coalesce_time t0 = coalesce_time{} + std::chrono::hours(1);

coalesce_config cfg_with(double flush = 0.001) {
  coalesce_config c;
  c.endpoints = {"127.0.0.1:7001"};
  c.batch_flush_interval = flush;
  return c;
}

/// cfg_with under the earlier pipelining rule (fill_free_slots off): an
/// RPC goes beside others only while each carries a single waiter.
coalesce_config cfg_singles(double flush = 0.001) {
  auto c = cfg_with(flush);
  c.fill_free_slots = false;
  return c;
}

/// A waiter as a test names it: `name` is the test's own label, which
/// test_batcher translates to and from the id the batcher issues.
struct named_waiter {
  uint64_t name = 0;
  waiter_request req;
};

named_waiter ts_waiter(uint64_t name, uint32_t count, coalesce_time at) {
  named_waiter w;
  w.name = name;
  w.req.kind = waiter_kind::ts;
  w.req.count = count;
  w.req.entered = at;
  return w;
}

named_waiter seq_waiter(uint64_t name, std::string key, uint32_t count,
                        coalesce_time at) {
  named_waiter w;
  w.name = name;
  w.req.kind = waiter_kind::seq;
  w.req.key = std::move(key);
  w.req.count = count;
  w.req.entered = at;
  return w;
}

/// The batcher under test, spoken to in the tests' waiter names: join
/// remembers the id the batcher issued for a name (a name joined again
/// names the new waiter), cancel looks it up, and plans and deliveries
/// come back with names. Every issued id is checked to be new and non-zero.
class test_batcher {
public:
  explicit test_batcher(const coalesce_config& cfg) : b_(cfg) {
  }

  join_decision join(const named_waiter& w, coalesce_time now) {
    auto r = b_.join(w.req, now);
    if (r.decision == join_decision::queued) {
      EXPECT_NE(r.id, 0u);
      EXPECT_EQ(names_.count(r.id), 0u) << "id " << r.id << " issued twice";
      ids_[w.name] = r.id;
      names_[r.id] = w.name;
    } else {
      EXPECT_EQ(r.id, 0u);
    }
    return r.decision;
  }

  /// Cancels the waiter last joined as `name` (an unknown name: id 0,
  /// which the batcher never issues).
  cancel_outcome cancel(uint64_t name, coalesce_time now) {
    auto it = ids_.find(name);
    return b_.cancel(it == ids_.end() ? 0 : it->second, now);
  }

  std::vector<rpc_plan> take_ready(coalesce_time now) {
    auto plans = b_.take_ready(now);
    for (auto& p : plans)
      for (auto& part : p.parts)
        part.waiter_id = name_of(part.waiter_id);
    return plans;
  }

  std::vector<delivery> on_ts_response(uint64_t rpc_id, const ts_response& r,
                                       coalesce_time now) {
    return named(b_.on_ts_response(rpc_id, r, now));
  }

  std::vector<delivery> on_seq_response(uint64_t rpc_id, const seq_response& r,
                                        coalesce_time now) {
    return named(b_.on_seq_response(rpc_id, r, now));
  }

  std::vector<delivery> on_rpc_failed(uint64_t rpc_id, rpc_failure f,
                                      const std::string& detail,
                                      coalesce_time now) {
    return named(b_.on_rpc_failed(rpc_id, f, detail, now));
  }

  std::optional<coalesce_time> next_wakeup() const {
    return b_.next_wakeup();
  }
  std::size_t held() const {
    return b_.held();
  }
  std::size_t queued() const {
    return b_.queued();
  }
  std::size_t in_flight() const {
    return b_.in_flight();
  }
  std::size_t in_flight(waiter_kind kind, const std::string& key) const {
    return b_.in_flight(kind, key);
  }
  std::size_t groups() const {
    return b_.groups();
  }
  std::size_t tracked_groups() const {
    return b_.tracked_groups();
  }
  const batcher_stats& stats() const {
    return b_.stats();
  }
  void carry_stats(const batcher_stats& s) {
    b_.carry_stats(s);
  }

private:
  uint64_t name_of(uint64_t id) const {
    auto it = names_.find(id);
    EXPECT_NE(it, names_.end()) << "id " << id << " was never issued";
    return it == names_.end() ? ~uint64_t{0} : it->second;
  }

  std::vector<delivery> named(std::vector<delivery> ds) const {
    for (auto& d : ds)
      d.waiter_id = name_of(d.waiter_id);
    return ds;
  }

  batcher b_;
  std::map<uint64_t, uint64_t> ids_;   // name -> id last issued
  std::map<uint64_t, uint64_t> names_; // id -> name
};

/// Joins ts waiter `id` (count 1) at `at` and takes what is ready then.
std::vector<rpc_plan> join_and_take(test_batcher& b, uint64_t id,
                                    coalesce_time at) {
  EXPECT_EQ(b.join(ts_waiter(id, 1, at), at), join_decision::queued);
  return b.take_ready(at);
}

ts_response ts_answer(uint64_t phys, uint32_t logical, uint32_t count) {
  return ts_response{phys, logical, count, "7"};
}

std::map<uint64_t, delivery> by_id(const std::vector<delivery>& ds) {
  std::map<uint64_t, delivery> m;
  for (auto& d : ds)
    m[d.waiter_id] = d;
  return m;
}

} // namespace

TEST(CoalesceBatcher, FourWaitersOf100kGetExactly100kEachNoRpcOverTheCap) {
  test_batcher b{cfg_with()};
  for (uint64_t id = 1; id <= 4; ++id)
    ASSERT_EQ(b.join(ts_waiter(id, 100000, t0), t0), join_decision::queued);
  EXPECT_TRUE(b.take_ready(t0).empty()); // cold start: 1 ms flush window
  ASSERT_EQ(b.next_wakeup(), t0 + milliseconds(1));
  auto now = t0 + milliseconds(1);
  auto p1 = b.take_ready(now);
  ASSERT_EQ(p1.size(), 1u);
  EXPECT_EQ(p1[0].count, 200000u);
  EXPECT_EQ(p1[0].chunk_index, 0u);
  EXPECT_EQ(p1[0].chunk_total, 2u);
  ASSERT_EQ(p1[0].parts.size(), 2u);
  EXPECT_TRUE(b.take_ready(now).empty()); // one RPC in flight per group
  auto d1 = by_id(b.on_ts_response(p1[0].rpc_id, ts_answer(5000, 0, 200000),
                                   now + milliseconds(2)));
  ASSERT_EQ(d1.size(), 2u);
  EXPECT_EQ(d1[1].outcome, waiter_outcome::served);
  EXPECT_EQ(d1[1].ts.physical_ms, 5000u);
  EXPECT_EQ(d1[1].ts.logical_start, 0u);
  EXPECT_EQ(d1[1].ts.count, 100000u);
  EXPECT_EQ(d1[2].ts.logical_start, 100000u);
  EXPECT_EQ(d1[2].ts.count, 100000u);
  auto p2 = b.take_ready(now + milliseconds(2));
  ASSERT_EQ(p2.size(), 1u);
  EXPECT_EQ(p2[0].count, 200000u);
  EXPECT_EQ(p2[0].chunk_index, 1u);
  auto d2 = by_id(b.on_ts_response(p2[0].rpc_id, ts_answer(5001, 3, 200000),
                                   now + milliseconds(3)));
  ASSERT_EQ(d2.size(), 2u);
  EXPECT_EQ(d2[3].ts.count, 100000u);
  EXPECT_EQ(d2[3].ts.logical_start, 3u);
  EXPECT_EQ(d2[4].ts.count, 100000u);
  EXPECT_EQ(d2[4].ts.logical_start, 100003u);
  EXPECT_EQ(d2[4].ts.last(), ts_pack(5001, 200002));
  EXPECT_EQ(b.held(), 0u);
  EXPECT_EQ(b.stats().rpcs, 2u);
  EXPECT_EQ(b.groups(), 0u);
}

TEST(CoalesceBatcher, OversizeWaiterIsRejectedAndItsSiblingsAreServed) {
  test_batcher b{cfg_with(0)};
  EXPECT_EQ(b.join(ts_waiter(1, 5, t0), t0), join_decision::queued);
  EXPECT_EQ(b.join(ts_waiter(2, 262145, t0), t0),
            join_decision::rejected_invalid_count);
  EXPECT_EQ(b.join(ts_waiter(3, 7, t0), t0), join_decision::queued);
  auto p = b.take_ready(t0);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].count, 12u);
  auto d = by_id(b.on_ts_response(p[0].rpc_id, ts_answer(9, 100, 12), t0));
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[1].ts.count, 5u);
  EXPECT_EQ(d[1].ts.logical_start, 100u);
  EXPECT_EQ(d[3].ts.count, 7u);
  EXPECT_EQ(d[3].ts.logical_start, 105u);
  EXPECT_EQ(
    d[3].ts.expand(),
    (std::vector<uint64_t>{ts_pack(9, 105), ts_pack(9, 106), ts_pack(9, 107),
                           ts_pack(9, 108), ts_pack(9, 109), ts_pack(9, 110),
                           ts_pack(9, 111)}));
  EXPECT_EQ(b.stats().rejected_invalid, 1u);
}

TEST(CoalesceBatcher, ExactCapWaiterIsOneRpcOfTheCap) {
  test_batcher b{cfg_with(0)};
  ASSERT_EQ(b.join(ts_waiter(1, 262144, t0), t0), join_decision::queued);
  ASSERT_EQ(b.join(ts_waiter(2, 1, t0), t0), join_decision::queued);
  auto p = b.take_ready(t0);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].count, 262144u);
  EXPECT_EQ(p[0].chunk_total, 2u);
  auto d = b.on_ts_response(p[0].rpc_id, ts_answer(1, 0, 262144), t0);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].ts.last(), ts_pack(1, ts_logical_max));
  auto p2 = b.take_ready(t0);
  ASSERT_EQ(p2.size(), 1u);
  EXPECT_EQ(p2[0].count, 1u);
}

TEST(CoalesceBatcher, InvalidCountsAndKeysAreRejectedBeforeAnyRpc) {
  test_batcher b{cfg_with(0)};
  EXPECT_EQ(b.join(ts_waiter(1, 0, t0), t0),
            join_decision::rejected_invalid_count);
  EXPECT_EQ(b.join(seq_waiter(2, "", 1, t0), t0),
            join_decision::rejected_invalid_key);
  EXPECT_EQ(b.join(seq_waiter(3, std::string(129, 'k'), 1, t0), t0),
            join_decision::rejected_invalid_key);
  EXPECT_EQ(b.join(seq_waiter(4, std::string("a\xff", 2), 1, t0), t0),
            join_decision::rejected_invalid_key);
  EXPECT_EQ(b.join(seq_waiter(5, std::string("\xc0\xaf", 2), 1, t0), t0),
            join_decision::rejected_invalid_key); // overlong '/'
  EXPECT_EQ(b.join(seq_waiter(6, "\xed\xa0\x80", 1, t0), t0),
            join_decision::rejected_invalid_key); // surrogate
  EXPECT_EQ(b.join(seq_waiter(7, "orders", 0, t0), t0),
            join_decision::rejected_invalid_count);
  EXPECT_EQ(b.join(seq_waiter(8, "orders", 65537, t0), t0),
            join_decision::rejected_invalid_count);
  EXPECT_EQ(b.held(), 0u);
  EXPECT_TRUE(b.take_ready(t0).empty());
  EXPECT_EQ(b.stats().rpcs, 0u);
  // Valid siblings, including a 128-byte key and a multi-byte UTF-8 key.
  EXPECT_EQ(b.join(seq_waiter(9, std::string(128, 'k'), 65536, t0), t0),
            join_decision::queued);
  EXPECT_EQ(b.join(seq_waiter(10, "z\xc3\xbcrich", 2, t0), t0),
            join_decision::queued);
  EXPECT_EQ(b.take_ready(t0).size(), 2u); // one RPC per key
}

TEST(CoalesceBatcher, BackpressureBeyondMaxWaiters) {
  test_batcher b{cfg_with()};
  for (uint64_t id = 0; id < 4096; ++id)
    ASSERT_EQ(b.join(ts_waiter(id, 1, t0), t0), join_decision::queued) << id;
  EXPECT_EQ(b.join(ts_waiter(5000, 1, t0), t0),
            join_decision::rejected_backpressure);
  EXPECT_EQ(b.join(seq_waiter(5001, "k", 1, t0), t0),
            join_decision::rejected_backpressure);
  EXPECT_EQ(b.stats().rejected_backpressure, 2u);
  // In flight still counts: the driver holds at most 4096 waiters.
  auto now = t0 + milliseconds(1);
  auto p = b.take_ready(now);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].count, 4096u);
  EXPECT_EQ(b.join(ts_waiter(5002, 1, now), now),
            join_decision::rejected_backpressure);
  // A cancelled waiter frees its slot.
  EXPECT_EQ(b.cancel(17, now).result, cancel_result::abandoned_in_flight);
  EXPECT_EQ(b.join(ts_waiter(5003, 1, now), now), join_decision::queued);
  EXPECT_EQ(b.join(ts_waiter(5004, 1, now), now),
            join_decision::rejected_backpressure);
  auto d = b.on_ts_response(p[0].rpc_id, ts_answer(1, 0, 4096), now);
  EXPECT_EQ(d.size(), 4095u);
  EXPECT_EQ(b.held(), 1u);
  EXPECT_EQ(b.join(ts_waiter(5005, 1, now), now), join_decision::queued);
}

TEST(CoalesceBatcher, ChunksAreDeliveredOneByOneWhileALaterChunkStalls) {
  auto cfg = cfg_with(0);
  cfg.max_ts_per_rpc = 10;
  test_batcher b{cfg};
  for (uint64_t id = 1; id <= 3; ++id)
    ASSERT_EQ(b.join(ts_waiter(id, 6, t0), t0), join_decision::queued);
  auto p1 = b.take_ready(t0);
  ASSERT_EQ(p1.size(), 1u);
  EXPECT_EQ(p1[0].chunk_total, 3u);
  auto d1 = b.on_ts_response(p1[0].rpc_id, ts_answer(1, 0, 6), t0);
  ASSERT_EQ(d1.size(), 1u); // waiter 1 served at once
  EXPECT_EQ(d1[0].waiter_id, 1u);
  auto p2 = b.take_ready(t0 + milliseconds(1));
  ASSERT_EQ(p2.size(), 1u);
  EXPECT_EQ(p2[0].parts[0].waiter_id, 2u);
  // Chunk 2 stalls. A newcomer waits for the next batch, not for chunk 3.
  ASSERT_EQ(b.join(ts_waiter(4, 1, t0 + milliseconds(2)), t0 + milliseconds(2)),
            join_decision::queued);
  EXPECT_TRUE(b.take_ready(t0 + milliseconds(500)).empty());
  EXPECT_EQ(b.held(), 3u);
  EXPECT_EQ(b.in_flight(), 1u);
  auto d2 = b.on_ts_response(p2[0].rpc_id, ts_answer(2, 0, 6),
                             t0 + milliseconds(900));
  ASSERT_EQ(d2.size(), 1u);
  auto p3 = b.take_ready(t0 + milliseconds(900));
  ASSERT_EQ(p3.size(), 1u);
  ASSERT_EQ(p3[0].parts.size(), 1u);
  EXPECT_EQ(p3[0].parts[0].waiter_id, 3u);
  b.on_ts_response(p3[0].rpc_id, ts_answer(3, 0, 6), t0 + milliseconds(901));
  // The newcomer's batch goes at once (warm: no flush window).
  auto p4 = b.take_ready(t0 + milliseconds(901));
  ASSERT_EQ(p4.size(), 1u);
  EXPECT_EQ(p4[0].parts[0].waiter_id, 4u);
}

// Pipelining (coalesce_config::max_rpcs_in_flight): while each RPC in
// flight carries one waiter, a newcomer rides an RPC of its own at once,
// up to the limit; the next one waits for a slot.
TEST(CoalesceBatcher, PipeliningSendsANewcomerAtOnceWhileSingleWaiterRpcsFly) {
  auto cfg = cfg_with(0);
  cfg.max_rpcs_in_flight = 2;
  test_batcher b{cfg};
  auto p1 = join_and_take(b, 1, t0);
  ASSERT_EQ(p1.size(), 1u);
  auto t1 = t0 + microseconds(10);
  auto p2 = join_and_take(b, 2, t1);
  ASSERT_EQ(p2.size(), 1u) << "waiter 2 does not wait for waiter 1's RPC";
  ASSERT_EQ(p2[0].parts.size(), 1u);
  EXPECT_EQ(p2[0].parts[0].waiter_id, 2u);
  EXPECT_EQ(b.in_flight(), 2u);
  EXPECT_EQ(b.in_flight(waiter_kind::ts, ""), 2u);
  EXPECT_EQ(b.in_flight(waiter_kind::seq, "k"), 0u) << "another group";
  auto t2 = t0 + microseconds(20);
  ASSERT_EQ(b.join(ts_waiter(3, 1, t2), t2), join_decision::queued);
  EXPECT_TRUE(b.take_ready(t2).empty()) << "max_rpcs_in_flight reached";
  auto d1 = b.on_ts_response(p1[0].rpc_id, ts_answer(1, 0, 1), t2);
  ASSERT_EQ(d1.size(), 1u);
  EXPECT_EQ(d1[0].waiter_id, 1u);
  auto p3 = b.take_ready(t2);
  ASSERT_EQ(p3.size(), 1u) << "a slot is free again";
  EXPECT_EQ(p3[0].parts[0].waiter_id, 3u);
  auto d2 = b.on_ts_response(p2[0].rpc_id, ts_answer(1, 1, 1), t2);
  ASSERT_EQ(d2.size(), 1u);
  EXPECT_EQ(d2[0].waiter_id, 2u);
  EXPECT_EQ(d2[0].ts.logical_start, 1u);
  EXPECT_EQ(b.stats().pipelined, 2u) << "waiters 2 and 3";
  EXPECT_EQ(b.stats().batches, 3u);
}

// Callers that join together share one pipelined batch; once an RPC in
// flight carries two waiters, newcomers queue for the next batch.
TEST(CoalesceBatcher, PipeliningStopsOnceAnRpcInFlightCarriesTwoWaiters) {
  auto cfg = cfg_singles(0);
  test_batcher b{cfg};
  ASSERT_EQ(cfg.max_rpcs_in_flight, 4u);
  auto p1 = join_and_take(b, 1, t0);
  ASSERT_EQ(p1.size(), 1u);
  ASSERT_EQ(b.join(ts_waiter(2, 1, t0), t0), join_decision::queued);
  auto p2 = join_and_take(b, 3, t0);
  ASSERT_EQ(p2.size(), 1u);
  EXPECT_EQ(p2[0].parts.size(), 2u) << "joined together: one batch";
  ASSERT_EQ(b.join(ts_waiter(4, 1, t0), t0), join_decision::queued);
  EXPECT_TRUE(b.take_ready(t0).empty())
    << "an RPC in flight carries two waiters: coalesce";
  b.on_ts_response(p1[0].rpc_id, ts_answer(1, 0, 1), t0);
  EXPECT_TRUE(b.take_ready(t0).empty()) << "still one of two waiters";
  b.on_ts_response(p2[0].rpc_id, ts_answer(1, 1, 2), t0);
  auto p3 = b.take_ready(t0);
  ASSERT_EQ(p3.size(), 1u) << "the group's RPCs are back: the next batch";
  EXPECT_EQ(p3[0].parts[0].waiter_id, 4u);
  EXPECT_EQ(b.stats().pipelined, 1u);
}

// fill_free_slots (the default): beside an RPC in flight, the callers
// queued are spread over the free slots in arrival order, at most
// ceil(queued / free) each; with every slot busy a newcomer waits for one.
TEST(CoalesceBatcher, FreeSlotsTakeTheQueueInEvenShares) {
  auto cfg = cfg_with(0);
  test_batcher b{cfg};
  ASSERT_EQ(cfg.max_rpcs_in_flight, 4u);
  auto p1 = join_and_take(b, 1, t0);
  ASSERT_EQ(p1.size(), 1u);
  for (uint64_t id = 2; id <= 8; ++id)
    ASSERT_EQ(b.join(ts_waiter(id, 1, t0), t0), join_decision::queued);
  auto p = b.take_ready(t0);
  ASSERT_EQ(p.size(), 3u) << "seven callers over three free slots";
  std::vector<std::vector<uint64_t>> got;
  for (auto& plan : p) {
    got.emplace_back();
    for (auto& part : plan.parts)
      got.back().push_back(part.waiter_id);
  }
  EXPECT_EQ(got,
            (std::vector<std::vector<uint64_t>>{{2, 3, 4}, {5, 6}, {7, 8}}));
  EXPECT_EQ(b.in_flight(), 4u);
  EXPECT_EQ(b.stats().pipelined, 3u);
  ASSERT_EQ(b.join(ts_waiter(9, 1, t0), t0), join_decision::queued);
  ASSERT_EQ(b.join(ts_waiter(10, 1, t0), t0), join_decision::queued);
  EXPECT_TRUE(b.take_ready(t0).empty()) << "every slot busy";
  b.on_ts_response(p1[0].rpc_id, ts_answer(1, 0, 1), t0);
  auto next = b.take_ready(t0);
  ASSERT_EQ(next.size(), 1u) << "one free slot: one batch of the queue";
  EXPECT_EQ(next[0].parts.size(), 2u);
  EXPECT_EQ(next[0].parts[0].waiter_id, 9u);
}

// A batch beside RPCs in flight is one chunk at most: a share of heavy
// waiters does not become a multi-chunk batch (which would keep the other
// free slots idle until its chunks are back); the waiter that does not fit
// keeps its place, and a waiter not due yet keeps its place ahead of those
// who joined after it.
TEST(CoalesceBatcher, ABatchBesideOthersIsOneChunkAndTheQueueKeepsItsOrder) {
  auto cfg = cfg_with(0);
  cfg.max_ts_per_rpc = 10;
  cfg.max_rpcs_in_flight = 2;
  test_batcher b{cfg};
  auto p0 = join_and_take(b, 1, t0);
  ASSERT_EQ(p0.size(), 1u);
  auto t1 = t0 + microseconds(50);
  ASSERT_EQ(b.join(ts_waiter(2, 1, t1), t1),
            join_decision::queued); // not due at t0
  ASSERT_EQ(b.join(ts_waiter(3, 6, t0), t0), join_decision::queued);
  ASSERT_EQ(b.join(ts_waiter(4, 6, t0), t0), join_decision::queued);
  auto p = b.take_ready(t0);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].chunk_total, 1u) << "one chunk beside the RPC in flight";
  ASSERT_EQ(p[0].parts.size(), 1u);
  EXPECT_EQ(p[0].parts[0].waiter_id, 3u);
  b.on_ts_response(p0[0].rpc_id, ts_answer(1, 0, 1), t1);
  auto p2 = b.take_ready(t1);
  ASSERT_EQ(p2.size(), 1u);
  ASSERT_EQ(p2[0].parts.size(), 2u);
  EXPECT_EQ(p2[0].parts[0].waiter_id, 2u) << "joined first, due now";
  EXPECT_EQ(p2[0].parts[1].waiter_id, 4u);
}

// An idle group's batch takes its whole queue, free slots or not: a burst
// gathered by the cold-start window rides one RPC.
TEST(CoalesceBatcher, AnIdleGroupsBatchTakesItsWholeQueue) {
  auto cfg = cfg_with(0.001);
  cfg.adaptive_cold_start = false;
  test_batcher b{cfg};
  for (uint64_t id = 1; id <= 10; ++id)
    ASSERT_EQ(b.join(ts_waiter(id, 1, t0), t0), join_decision::queued);
  EXPECT_TRUE(b.take_ready(t0).empty()) << "the window";
  auto p = b.take_ready(t0 + milliseconds(1));
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].parts.size(), 10u);
  EXPECT_EQ(b.stats().pipelined, 0u);
}

// A pipelined RPC that fails fails its own waiters only: the chunks not
// yet sent of another batch still go out.
TEST(CoalesceBatcher, AFailedPipelinedRpcFailsOnlyItsOwnBatch) {
  auto cfg = cfg_singles(0);
  cfg.max_ts_per_rpc = 10;
  test_batcher b{cfg};
  auto p1 = join_and_take(b, 1, t0);
  ASSERT_EQ(p1.size(), 1u);
  ASSERT_EQ(b.join(ts_waiter(2, 6, t0), t0), join_decision::queued);
  ASSERT_EQ(b.join(ts_waiter(3, 6, t0), t0), join_decision::queued);
  auto p2 = b.take_ready(t0);
  ASSERT_EQ(p2.size(), 1u);
  EXPECT_EQ(p2[0].chunk_total, 2u);
  auto d1 = b.on_rpc_failed(p1[0].rpc_id, rpc_failure::failed, "boom", t0);
  ASSERT_EQ(d1.size(), 1u);
  EXPECT_EQ(d1[0].waiter_id, 1u);
  EXPECT_EQ(d1[0].outcome, waiter_outcome::rpc_failed);
  EXPECT_EQ(b.held(), 2u);
  b.on_ts_response(p2[0].rpc_id, ts_answer(1, 0, 6), t0);
  auto p3 = b.take_ready(t0);
  ASSERT_EQ(p3.size(), 1u);
  EXPECT_EQ(p3[0].parts[0].waiter_id, 3u);
  EXPECT_EQ(p3[0].chunk_index, 1u);
}

// A batcher that replaces another (the driver after a fault) counts on
// from its counters: exported counters never go backwards.
TEST(CoalesceBatcher, CarriedStatsCountOn) {
  test_batcher a{cfg_with(0)};
  ASSERT_EQ(a.join(ts_waiter(1, 1, t0), t0), join_decision::queued);
  ASSERT_EQ(a.take_ready(t0).size(), 1u);
  test_batcher b{cfg_with(0)};
  b.carry_stats(a.stats());
  ASSERT_EQ(b.join(ts_waiter(1, 1, t0), t0), join_decision::queued);
  ASSERT_EQ(b.take_ready(t0).size(), 1u);
  EXPECT_EQ(b.stats().joined, 2u);
  EXPECT_EQ(b.stats().rpcs, 2u);
  EXPECT_EQ(b.stats().batches, 2u);
  EXPECT_EQ(b.held(), 1u) << "only the counters are carried";
}

// tsoracle's rule (max_rpcs_in_flight 1): one RPC in flight per group.
TEST(CoalesceBatcher, MaxRpcsInFlightOneKeepsOneRpcInFlight) {
  auto cfg = cfg_with(0);
  cfg.max_rpcs_in_flight = 1;
  test_batcher b{cfg};
  auto p1 = join_and_take(b, 1, t0);
  ASSERT_EQ(p1.size(), 1u);
  ASSERT_EQ(b.join(ts_waiter(2, 1, t0), t0), join_decision::queued);
  EXPECT_TRUE(b.take_ready(t0).empty());
  b.on_ts_response(p1[0].rpc_id, ts_answer(1, 0, 1), t0);
  EXPECT_EQ(b.take_ready(t0).size(), 1u);
}

// A waiter that leaves a pipelined RPC cancels that RPC only.
TEST(CoalesceBatcher, CancellingThePipelinedWaiterCancelsOnlyItsRpc) {
  test_batcher b{cfg_with(0)};
  auto p1 = join_and_take(b, 1, t0);
  auto p2 = join_and_take(b, 2, t0);
  ASSERT_EQ(p1.size(), 1u);
  ASSERT_EQ(p2.size(), 1u);
  auto c = b.cancel(2, t0);
  EXPECT_EQ(c.result, cancel_result::rpc_cancelled);
  EXPECT_EQ(c.rpc_to_cancel, p2[0].rpc_id);
  EXPECT_EQ(b.in_flight(), 1u);
  EXPECT_TRUE(b.on_ts_response(p2[0].rpc_id, ts_answer(1, 0, 1), t0).empty());
  auto d1 = b.on_ts_response(p1[0].rpc_id, ts_answer(1, 1, 1), t0);
  ASSERT_EQ(d1.size(), 1u);
  EXPECT_EQ(d1[0].waiter_id, 1u);
  EXPECT_EQ(b.groups(), 0u);
}

// Pipelining under random joins, cancels, answers in any order and
// failures (ts and two seq keys), under both rules (fill_free_slots on for
// seeds 21-40): every waiter ends exactly once (served, failed or
// cancelled), a group never has more than max_rpcs_in_flight RPCs in the
// air, an RPC sent beside others only when none of those is a chunk of a
// multi-chunk batch (and, with fill_free_slots off, each carries a single
// waiter), a batch's chunks in order and one at a time, and everything
// drains to an empty batcher.
TEST(CoalesceBatcher, PipeliningKeepsItsInvariantsUnderRandomSchedules) {
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    auto cfg = cfg_with(seed % 2 == 0 ? 0.0 : 0.001);
    cfg.fill_free_slots = seed > 20;
    cfg.max_ts_per_rpc = 40;
    cfg.max_seq_per_rpc = 40;
    cfg.max_rpcs_in_flight = 1 + seed % 4;
    test_batcher b{cfg};
    std::mt19937_64 rng{seed};
    struct fly {
      rpc_plan plan;
      std::string group;
    };
    std::vector<fly> flying;
    std::map<uint64_t, std::string> live; // waiter -> group
    std::set<uint64_t> ended;
    auto group_of = [](const named_waiter& w) {
      return w.req.kind == waiter_kind::ts ? std::string{"ts"}
                                           : "seq/" + w.req.key;
    };
    auto end = [&](uint64_t id) {
      ASSERT_EQ(live.count(id), 1u) << "seed " << seed << " waiter " << id;
      ASSERT_TRUE(ended.insert(id).second) << "answered twice: " << id;
      live.erase(id);
    };
    // Waiters of group `g` held and not on an RPC in the air (queued, or
    // in a chunk not sent yet): at least what the batcher has queued.
    auto waiting = [&](const std::string& g) {
      std::set<uint64_t> riding;
      for (auto& f : flying)
        for (auto& part : f.plan.parts)
          riding.insert(part.waiter_id);
      std::size_t n = 0;
      for (auto& [id, grp] : live)
        n += grp == g && !riding.count(id);
      return n;
    };
    auto take = [&](coalesce_time now) {
      for (auto& p : b.take_ready(now)) {
        auto g = p.kind == waiter_kind::ts ? std::string{"ts"} : "seq/" + p.key;
        auto before = waiting(g);
        std::size_t same = 0;
        for (auto& f : flying)
          if (f.group == g) {
            ++same;
            ASSERT_EQ(f.plan.chunk_total, 1u)
              << "seed " << seed << ": sent beside a multi-chunk batch";
            if (!cfg.fill_free_slots)
              ASSERT_EQ(f.plan.parts.size(), 1u)
                << "seed " << seed << ": sent beside a batch that coalesces";
          }
        ASSERT_LT(same, cfg.max_rpcs_in_flight) << "seed " << seed;
        // Beside other RPCs, a batch takes its share of the free slots.
        if (cfg.fill_free_slots && same > 0 && p.chunk_total == 1) {
          auto free = cfg.max_rpcs_in_flight - same;
          ASSERT_LE(p.parts.size(), (before + free - 1) / free)
            << "seed " << seed << ": more than its share of the free slots";
        }
        ASSERT_LE(p.count, 40u);
        flying.push_back(fly{p, g});
      }
    };
    auto now = t0;
    uint64_t next_id = 1;
    uint64_t phys = 1, seq_next = 1;
    for (int step = 0; step < 3000; ++step) {
      now += microseconds(rng() % 300);
      auto r = rng() % 20;
      if (r < 9) {
        auto id = next_id++;
        auto count = static_cast<uint32_t>(1 + rng() % (r < 2 ? 30 : 3));
        auto w = rng() % 3 == 0
                   ? seq_waiter(id, rng() % 2 ? "a" : "b", count, now)
                   : ts_waiter(id, count, now);
        if (b.join(w, now) == join_decision::queued)
          live[id] = group_of(w);
      } else if (r < 16 && !flying.empty()) {
        auto i = rng() % flying.size();
        auto f = flying[i];
        flying.erase(flying.begin() + static_cast<std::ptrdiff_t>(i));
        std::vector<delivery> ds;
        if (rng() % 8 == 0) {
          ds = b.on_rpc_failed(f.plan.rpc_id, rpc_failure::failed, "x", now);
        } else if (f.plan.kind == waiter_kind::ts) {
          ds = b.on_ts_response(f.plan.rpc_id,
                                ts_answer(phys++, 0, f.plan.count), now);
        } else {
          ds = b.on_seq_response(
            f.plan.rpc_id, seq_response{seq_next, f.plan.count, "3", {}}, now);
          seq_next += f.plan.count;
        }
        for (auto& d : ds)
          end(d.waiter_id);
      } else if (r < 18 && !live.empty()) {
        auto it = live.begin();
        std::advance(it, static_cast<std::ptrdiff_t>(rng() % live.size()));
        auto id = it->first;
        auto c = b.cancel(id, now);
        ASSERT_NE(c.result, cancel_result::not_found);
        end(id);
        if (c.result == cancel_result::rpc_cancelled)
          flying.erase(std::remove_if(flying.begin(), flying.end(),
                                      [&](const fly& f) {
                                        return f.plan.rpc_id == c.rpc_to_cancel;
                                      }),
                       flying.end());
      }
      take(now);
    }
    // Drain: answer everything, let every window pass.
    for (int i = 0; i < 100000 && (!flying.empty() || b.held() > 0); ++i) {
      now += milliseconds(2);
      if (!flying.empty()) {
        auto f = flying.front();
        flying.erase(flying.begin());
        std::vector<delivery> ds;
        if (f.plan.kind == waiter_kind::ts)
          ds = b.on_ts_response(f.plan.rpc_id,
                                ts_answer(phys++, 0, f.plan.count), now);
        else
          ds = b.on_seq_response(
            f.plan.rpc_id, seq_response{seq_next, f.plan.count, "3", {}}, now);
        for (auto& d : ds)
          end(d.waiter_id);
      }
      take(now);
    }
    EXPECT_TRUE(live.empty()) << "seed " << seed;
    EXPECT_EQ(b.held(), 0u) << "seed " << seed;
    EXPECT_EQ(b.in_flight(), 0u) << "seed " << seed;
    EXPECT_EQ(b.groups(), 0u) << "seed " << seed;
  }
}

// tsoracle's rule (adaptive_cold_start off): every cold start waits the
// window, also one right after a batch returned.
TEST(CoalesceBatcher, FlushIntervalAppliesOnlyToAColdStart) {
  auto cfg = cfg_singles(0.001);
  cfg.adaptive_cold_start = false;
  test_batcher b{cfg};
  ASSERT_EQ(b.join(ts_waiter(1, 1, t0), t0), join_decision::queued);
  EXPECT_TRUE(b.take_ready(t0 + microseconds(999)).empty());
  ASSERT_EQ(
    b.join(ts_waiter(2, 1, t0 + microseconds(500)), t0 + microseconds(500)),
    join_decision::queued);
  auto p = b.take_ready(t0 + milliseconds(1));
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].count, 2u); // both joined within the window
  // While in flight: no wakeup needed, newcomers queue for the next batch.
  auto t1 = t0 + milliseconds(3);
  ASSERT_EQ(b.join(ts_waiter(3, 1, t1), t1), join_decision::queued);
  EXPECT_FALSE(b.next_wakeup().has_value());
  EXPECT_TRUE(b.take_ready(t1 + milliseconds(50)).empty());
  auto t2 = t0 + milliseconds(4);
  b.on_ts_response(p[0].rpc_id, ts_answer(1, 0, 2), t2);
  EXPECT_EQ(b.next_wakeup(), t2); // due at once, no flush window
  auto p2 = b.take_ready(t2);
  ASSERT_EQ(p2.size(), 1u);
  EXPECT_EQ(p2[0].parts[0].waiter_id, 3u);
  b.on_ts_response(p2[0].rpc_id, ts_answer(2, 0, 1), t2);
  // Idle again: the next join is a cold start.
  auto t3 = t2 + microseconds(10);
  ASSERT_EQ(b.join(ts_waiter(4, 1, t3), t3), join_decision::queued);
  EXPECT_TRUE(b.take_ready(t3).empty());
  EXPECT_EQ(b.next_wakeup(), t3 + milliseconds(1));
}

// Adaptive cold start: a batch just answered brings its callers back; the
// first of them goes at once and the rest ride the next batch, instead of
// all waiting the window (a closed loop of a few callers).
TEST(CoalesceBatcher, AdaptiveColdStartRightAfterABatchReturnsSendsAtOnce) {
  // The earlier pipelining rule: waiters 3 and 4 queue behind waiter 2's
  // RPC (with free slots they would go beside it: FreeSlots... tests).
  test_batcher b{cfg_singles(0.001)};
  ASSERT_EQ(b.join(ts_waiter(1, 1, t0), t0), join_decision::queued);
  // Nothing known yet: the window, as tsoracle.
  EXPECT_TRUE(b.take_ready(t0).empty());
  EXPECT_EQ(b.next_wakeup(), t0 + milliseconds(1));
  auto p = b.take_ready(t0 + milliseconds(1));
  ASSERT_EQ(p.size(), 1u);
  auto t1 = t0 + milliseconds(2);
  b.on_ts_response(p[0].rpc_id, ts_answer(1, 0, 1), t1);
  // The caller comes back 20 us after its answer: at once.
  auto t2 = t1 + microseconds(20);
  ASSERT_EQ(b.join(ts_waiter(2, 1, t2), t2), join_decision::queued);
  auto p2 = b.take_ready(t2);
  ASSERT_EQ(p2.size(), 1u);
  EXPECT_EQ(p2[0].parts[0].waiter_id, 2u);
  // Others arriving meanwhile queue for the next batch, sent on its return.
  ASSERT_EQ(b.join(ts_waiter(3, 1, t2), t2), join_decision::queued);
  ASSERT_EQ(b.join(ts_waiter(4, 1, t2), t2), join_decision::queued);
  auto t3 = t2 + microseconds(200);
  b.on_ts_response(p2[0].rpc_id, ts_answer(2, 0, 1), t3);
  auto p3 = b.take_ready(t3);
  ASSERT_EQ(p3.size(), 1u);
  EXPECT_EQ(p3[0].count, 2u);
  EXPECT_EQ(b.stats().cold_starts_window, 1u);
  EXPECT_EQ(b.stats().cold_starts_at_once, 1u);
}

TEST(CoalesceBatcher, AdaptiveColdStartKeepsTheWindowForABurst) {
  test_batcher b{cfg_with(0.001)};
  // A burst: joins 10 us apart.
  for (uint64_t i = 1; i <= 8; ++i) {
    auto at = t0 + microseconds(10 * i);
    ASSERT_EQ(b.join(ts_waiter(i, 1, at), at), join_decision::queued);
  }
  auto p = b.take_ready(t0 + milliseconds(2));
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].count, 8u);
  auto t1 = t0 + milliseconds(3);
  b.on_ts_response(p[0].rpc_id, ts_answer(1, 0, 8), t1);
  // Idle for longer than the window, and the joins so far came 10 us
  // apart: a burst is likely, so the next cold start waits the window.
  auto t2 = t1 + milliseconds(5);
  ASSERT_EQ(b.join(ts_waiter(9, 1, t2), t2), join_decision::queued);
  EXPECT_TRUE(b.take_ready(t2).empty());
  EXPECT_EQ(b.next_wakeup(), t2 + milliseconds(1));
  EXPECT_EQ(b.stats().cold_starts_window, 2u);
  EXPECT_EQ(b.stats().cold_starts_at_once, 0u);
}

TEST(CoalesceBatcher, AdaptiveColdStartSendsSparseCallersAtOnce) {
  test_batcher b{cfg_with(0.001)};
  // One caller every 20 ms, each answered 1 ms after it was sent: the
  // smoothed gap between joins soon exceeds the window.
  auto at = t0;
  for (uint64_t i = 1; i <= 6; ++i) {
    ASSERT_EQ(b.join(ts_waiter(i, 1, at), at), join_decision::queued);
    auto sent = at;
    auto p = b.take_ready(at);
    if (p.empty()) {
      sent = at + milliseconds(1);
      p = b.take_ready(sent);
    }
    ASSERT_EQ(p.size(), 1u) << i;
    if (i >= 3)
      EXPECT_EQ(sent, at) << "caller " << i << " waited the window";
    b.on_ts_response(p[0].rpc_id, ts_answer(i, 0, 1), sent + milliseconds(1));
    at += milliseconds(20);
  }
  // The first two cold starts knew no gap yet (the second one's own gap is
  // counted after its decision); from the third on, the smoothed gap (20 ms)
  // is at least the window.
  EXPECT_EQ(b.stats().cold_starts_window, 2u);
  EXPECT_EQ(b.stats().cold_starts_at_once, 4u);
}

// "Its callers are coming back" holds for the group that was answered only:
// a ts answer does not send a burst on a seq key at once.
TEST(CoalesceBatcher, AdaptiveColdStartCountsOnlyTheSameGroupsRecentAnswer) {
  test_batcher b{cfg_with(0.001)};
  ASSERT_EQ(b.join(ts_waiter(1, 1, t0), t0), join_decision::queued);
  auto p = b.take_ready(t0 + milliseconds(1));
  ASSERT_EQ(p.size(), 1u);
  auto t1 = t0 + milliseconds(2);
  b.on_ts_response(p[0].rpc_id, ts_answer(1, 0, 1), t1);
  auto t2 = t1 + microseconds(100);
  ASSERT_EQ(b.join(seq_waiter(2, "k", 1, t2), t2), join_decision::queued);
  EXPECT_TRUE(b.take_ready(t2).empty()) << "seq group k waits the window";
  EXPECT_EQ(b.next_wakeup(), t2 + milliseconds(1));
}

// One long idle spell counts as two windows in the smoothed gap, so that a
// burst after it still waits the window.
TEST(CoalesceBatcher, AdaptiveColdStartALongIdleSpellDoesNotHideABurst) {
  test_batcher b{cfg_with(0.001)};
  auto at = t0;
  for (uint64_t i = 1; i <= 20; ++i, at += microseconds(10))
    ASSERT_EQ(b.join(ts_waiter(i, 1, at), at), join_decision::queued);
  auto p = b.take_ready(at + milliseconds(1));
  ASSERT_EQ(p.size(), 1u);
  b.on_ts_response(p[0].rpc_id, ts_answer(1, 0, 20), at + milliseconds(2));
  // 10 s idle, then a burst on ten keys, 10 us apart: every cold start
  // but possibly the first waits the window.
  at += std::chrono::seconds(10);
  for (uint64_t i = 0; i < 10; ++i, at += microseconds(10)) {
    auto key = "k" + std::to_string(i);
    ASSERT_EQ(b.join(seq_waiter(100 + i, key, 1, at), at),
              join_decision::queued);
  }
  EXPECT_LE(b.stats().cold_starts_at_once, 1u);
  EXPECT_GE(b.stats().cold_starts_window, 10u);
}

// Time going backwards (an explicit-time caller) leaves the smoothed gap
// alone: no sample, and the last join stays where it was.
TEST(CoalesceBatcher, AdaptiveColdStartIgnoresJoinsBackInTime) {
  test_batcher b{cfg_with(0.001)};
  ASSERT_EQ(b.join(seq_waiter(1, "a", 1, t0), t0), join_decision::queued);
  auto t1 = t0 + microseconds(10);
  ASSERT_EQ(b.join(seq_waiter(2, "b", 1, t1), t1), join_decision::queued);
  auto back = t0 - milliseconds(100);
  ASSERT_EQ(b.join(seq_waiter(3, "c", 1, back), back), join_decision::queued);
  auto t2 = t0 + microseconds(20);
  ASSERT_EQ(b.join(seq_waiter(4, "d", 1, t2), t2), join_decision::queued);
  auto t3 = t0 + microseconds(30);
  ASSERT_EQ(b.join(seq_waiter(5, "e", 1, t3), t3), join_decision::queued);
  EXPECT_EQ(b.stats().cold_starts_at_once, 0u);
  EXPECT_EQ(b.stats().cold_starts_window, 5u);
}

TEST(CoalesceBatcher, ZeroFlushIntervalSendsAtOnce) {
  test_batcher b{cfg_with(0)};
  ASSERT_EQ(b.join(ts_waiter(1, 3, t0), t0), join_decision::queued);
  auto p = b.take_ready(t0);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].count, 3u);
  EXPECT_EQ(p[0].dispatched_at, t0);
  EXPECT_EQ(b.stats().cold_starts_at_once, 1u) << "no window to wait";
}

TEST(CoalesceBatcher, ALateJoinerWaitsForTheNextBatch) {
  test_batcher b{cfg_with(0)};
  ASSERT_EQ(b.join(ts_waiter(1, 1, t0), t0), join_decision::queued);
  auto p = b.take_ready(t0);
  ASSERT_EQ(p.size(), 1u);
  auto t1 = t0 + milliseconds(1);
  ASSERT_EQ(b.join(ts_waiter(2, 1, t1), t1), join_decision::queued);
  auto d = b.on_ts_response(p[0].rpc_id, ts_answer(100, 0, 1), t1);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].waiter_id, 1u); // never waiter 2: its entry is later
  auto p2 = b.take_ready(t1);
  ASSERT_EQ(p2.size(), 1u);
  EXPECT_GE(p2[0].dispatched_at, t1);
  // A waiter stamped later than `now` is not batched yet.
  ASSERT_EQ(b.join(ts_waiter(3, 1, t1 + milliseconds(5)), t1),
            join_decision::queued);
  b.on_ts_response(p2[0].rpc_id, ts_answer(101, 0, 1), t1);
  EXPECT_TRUE(b.take_ready(t1 + milliseconds(4)).empty());
  EXPECT_EQ(b.next_wakeup(), t1 + milliseconds(5));
  EXPECT_EQ(b.take_ready(t1 + milliseconds(5)).size(), 1u);
}

// Freshness as a property: a fake oracle hands out strictly increasing
// timestamps; no waiter may get a timestamp the oracle had already issued
// when the waiter entered (tsoracle tests/freshness.rs).
TEST(CoalesceBatcher, NoTimestampPredatesItsWaitersEntry) {
  auto cfg = cfg_with(0.001);
  cfg.max_ts_per_rpc = 50;
  test_batcher b{cfg};
  std::mt19937_64 rng{42};
  uint64_t issued_max = 0; // packed, last issued by the oracle
  uint64_t next_phys = 1;
  std::map<uint64_t, uint64_t> floor_at_entry;
  // The oracle produces a batch's timestamps when the RPC arrives (at
  // dispatch); the answer reaches the batcher later.
  std::vector<std::pair<rpc_plan, ts_response>> flight;
  auto now = t0;
  uint64_t next_id = 1;
  std::size_t served = 0;
  for (int step = 0; step < 20000; ++step) {
    now += microseconds(rng() % 400);
    auto r = rng() % 10;
    if (r < 6) {
      auto id = next_id++;
      auto count = static_cast<uint32_t>(1 + rng() % 20);
      if (b.join(ts_waiter(id, count, now), now) == join_decision::queued)
        floor_at_entry[id] = issued_max;
    } else if (r < 9 && !flight.empty()) {
      auto [plan, resp] = flight.front();
      flight.erase(flight.begin());
      for (auto& d : b.on_ts_response(plan.rpc_id, resp, now)) {
        ASSERT_EQ(d.outcome, waiter_outcome::served);
        ASSERT_GT(d.ts.first(), floor_at_entry.at(d.waiter_id));
        ++served;
      }
    } else if (r == 9 && !floor_at_entry.empty()) {
      b.cancel(next_id - 1 - rng() % std::min<uint64_t>(next_id - 1, 5), now);
    }
    for (auto& p : b.take_ready(now)) {
      ASSERT_LE(p.count, 50u);
      for (auto& part : p.parts)
        ASSERT_LE(floor_at_entry.count(part.waiter_id), 1u);
      ts_response resp = ts_answer(next_phys++, 0, p.count);
      issued_max = ts_pack(resp.physical_ms, p.count - 1);
      flight.emplace_back(p, resp);
    }
  }
  EXPECT_GT(served, 5000u);
}

TEST(CoalesceBatcher, CancellingAQueuedWaiterLeavesTheOthers) {
  test_batcher b{cfg_with(0.001)};
  ASSERT_EQ(b.join(ts_waiter(1, 2, t0), t0), join_decision::queued);
  ASSERT_EQ(b.join(ts_waiter(2, 3, t0), t0), join_decision::queued);
  EXPECT_EQ(b.cancel(1, t0).result, cancel_result::removed);
  EXPECT_EQ(b.cancel(1, t0).result, cancel_result::not_found);
  auto p = b.take_ready(t0 + milliseconds(1));
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].count, 3u);
  ASSERT_EQ(p[0].parts.size(), 1u);
  EXPECT_EQ(p[0].parts[0].waiter_id, 2u);
  // The id can be used again once it left.
  EXPECT_EQ(b.join(ts_waiter(1, 1, t0 + milliseconds(1)), t0 + milliseconds(1)),
            join_decision::queued);
}

// The group is kept for reuse (tracked) but idle: nothing is due, and the
// next caller is a cold start again, waiting the window, without the
// cancelled waiter.
TEST(CoalesceBatcher, CancellingTheOnlyQueuedWaiterLeavesTheGroupIdle) {
  auto cfg = cfg_with(0.001);
  cfg.adaptive_cold_start = false; // the window always applies
  test_batcher b{cfg};
  ASSERT_EQ(b.join(ts_waiter(1, 2, t0), t0), join_decision::queued);
  EXPECT_EQ(b.cancel(1, t0).result, cancel_result::removed);
  EXPECT_EQ(b.groups(), 0u);
  EXPECT_EQ(b.tracked_groups(), 1u);
  EXPECT_FALSE(b.next_wakeup().has_value());
  EXPECT_TRUE(b.take_ready(t0 + milliseconds(5)).empty());
  auto t1 = t0 + milliseconds(5);
  ASSERT_EQ(b.join(ts_waiter(2, 3, t1), t1), join_decision::queued);
  EXPECT_TRUE(b.take_ready(t1).empty()) << "a cold start waits the window";
  EXPECT_EQ(b.next_wakeup(), t1 + milliseconds(1));
  auto p = b.take_ready(t1 + milliseconds(1));
  ASSERT_EQ(p.size(), 1u);
  ASSERT_EQ(p[0].parts.size(), 1u);
  EXPECT_EQ(p[0].parts[0].waiter_id, 2u);
  EXPECT_EQ(p[0].count, 3u);
}

TEST(CoalesceBatcher, OneCancelledWaiterDoesNotCancelTheRpc) {
  test_batcher b{cfg_with(0)};
  ASSERT_EQ(b.join(ts_waiter(1, 2, t0), t0), join_decision::queued);
  ASSERT_EQ(b.join(ts_waiter(2, 3, t0), t0), join_decision::queued);
  ASSERT_EQ(b.join(ts_waiter(3, 4, t0), t0), join_decision::queued);
  auto p = b.take_ready(t0);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(b.cancel(2, t0).result, cancel_result::abandoned_in_flight);
  auto d = by_id(b.on_ts_response(p[0].rpc_id, ts_answer(7, 10, 9), t0));
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[1].ts.logical_start, 10u);
  EXPECT_EQ(d[3].ts.logical_start, 15u); // waiter 2's share is skipped
  EXPECT_EQ(d[3].ts.count, 4u);
  EXPECT_EQ(b.stats().abandoned, 1u);
  EXPECT_EQ(b.stats().rpcs_cancelled, 0u);
}

TEST(CoalesceBatcher, TheRpcIsCancelledWhenEveryWaiterHasGone) {
  test_batcher b{cfg_with(0)};
  ASSERT_EQ(b.join(ts_waiter(1, 2, t0), t0), join_decision::queued);
  ASSERT_EQ(b.join(ts_waiter(2, 3, t0), t0), join_decision::queued);
  auto p = b.take_ready(t0);
  ASSERT_EQ(p.size(), 1u);
  auto t1 = t0 + milliseconds(1);
  ASSERT_EQ(b.join(ts_waiter(3, 1, t1), t1), join_decision::queued);
  EXPECT_EQ(b.cancel(1, t1).result, cancel_result::abandoned_in_flight);
  auto c = b.cancel(2, t1);
  EXPECT_EQ(c.result, cancel_result::rpc_cancelled);
  EXPECT_EQ(c.rpc_to_cancel, p[0].rpc_id);
  // A late answer to the cancelled RPC is ignored.
  EXPECT_TRUE(
    b.on_ts_response(p[0].rpc_id, ts_answer(1, 0, 5), t1 + milliseconds(1))
      .empty());
  EXPECT_EQ(b.stats().stale_answers, 1u);
  // The group goes on: waiter 3's batch at once.
  auto p2 = b.take_ready(t1);
  ASSERT_EQ(p2.size(), 1u);
  EXPECT_EQ(p2[0].parts[0].waiter_id, 3u);
}

TEST(CoalesceBatcher, CancellingAWaiterOfAChunkNotYetSentShrinksIt) {
  auto cfg = cfg_with(0);
  cfg.max_ts_per_rpc = 10;
  test_batcher b{cfg};
  ASSERT_EQ(b.join(ts_waiter(1, 8, t0), t0), join_decision::queued);
  ASSERT_EQ(b.join(ts_waiter(2, 4, t0), t0), join_decision::queued);
  ASSERT_EQ(b.join(ts_waiter(3, 5, t0), t0), join_decision::queued);
  auto p = b.take_ready(t0);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(b.cancel(2, t0).result, cancel_result::removed);
  b.on_ts_response(p[0].rpc_id, ts_answer(1, 0, 8), t0);
  auto p2 = b.take_ready(t0);
  ASSERT_EQ(p2.size(), 1u);
  EXPECT_EQ(p2[0].count, 5u);
  EXPECT_EQ(b.cancel(3, t0).result, cancel_result::rpc_cancelled);
  EXPECT_EQ(b.held(), 0u);
  EXPECT_EQ(b.groups(), 0u);
}

// Cancelled waiter (authzed/spicedb #925), as far as it is pure. The window is
// widened to 20 ms so that A (t=0) and B (t=10 ms) share the batch. The
// backend holds the RPC 200 ms. A leaves at 50 ms: the RPC is not cancelled
// and B is served at 200 ms. C (t=100 ms) joins while the RPC is in flight:
// freshness forbids handing C a value the backend produced before C
// arrived, so C is served by the next RPC, sent the moment the first one
// returns (the case's "exactly 1 RPC" holds for the RPC that carries A and
// B, which is neither cancelled nor repeated).
/// Case 13's start: A (0 ms) and B (10 ms) ride one RPC sent when the
/// 20 ms window closes; A leaves at 50 ms (its deadline) without
/// cancelling it. Returns that RPC's plans.
std::vector<rpc_plan> case_thirteen_a_leaves(test_batcher& b) {
  auto ms = [](int n) {
    return t0 + milliseconds(n);
  };
  EXPECT_EQ(b.join(ts_waiter(0xA, 1, ms(0)), ms(0)), join_decision::queued);
  EXPECT_EQ(b.join(ts_waiter(0xB, 1, ms(10)), ms(10)), join_decision::queued);
  auto p = b.take_ready(ms(20));
  EXPECT_EQ(p.size(), 1u);
  if (p.size() == 1)
    EXPECT_EQ(p[0].parts.size(), 2u);
  auto ca = b.cancel(0xA, ms(50)); // A's 50 ms deadline
  EXPECT_EQ(ca.result, cancel_result::abandoned_in_flight);
  EXPECT_EQ(ca.rpc_to_cancel, 0u);
  return p;
}

TEST(CoalesceBatcher, CaseThirteenOneCallersCancellationDoesNotPoisonTheBatch) {
  test_batcher b{cfg_singles(0.020)};
  auto ms = [](int n) {
    return t0 + milliseconds(n);
  };
  auto p = case_thirteen_a_leaves(b);
  ASSERT_EQ(p.size(), 1u);
  ASSERT_EQ(b.join(ts_waiter(0xC, 1, ms(100)), ms(100)), join_decision::queued);
  EXPECT_TRUE(b.take_ready(ms(100)).empty());
  auto d = b.on_ts_response(p[0].rpc_id, ts_answer(1000, 0, 2), ms(220));
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].waiter_id, 0xBu);
  EXPECT_EQ(d[0].ts.logical_start, 1u);
  auto p2 = b.take_ready(ms(220));
  ASSERT_EQ(p2.size(), 1u);
  EXPECT_EQ(p2[0].parts[0].waiter_id, 0xCu);
  EXPECT_EQ(b.stats().rpcs_cancelled, 0u);
  // Seq variant: k1 and k2 batch separately; A's leaving k1 leaves B's k2.
  test_batcher s{cfg_with(0.020)};
  ASSERT_EQ(s.join(seq_waiter(1, "k1", 1, ms(0)), ms(0)),
            join_decision::queued);
  ASSERT_EQ(s.join(seq_waiter(2, "k2", 1, ms(10)), ms(10)),
            join_decision::queued);
  auto sp = s.take_ready(ms(20));
  ASSERT_EQ(sp.size(), 1u); // k1's window closes at 20 ms, k2's at 30 ms
  auto sp2 = s.take_ready(ms(30));
  ASSERT_EQ(sp2.size(), 1u);
  EXPECT_EQ(s.cancel(1, ms(50)).result, cancel_result::rpc_cancelled);
  auto sd = s.on_seq_response(sp2[0].rpc_id, seq_response{40, 1, "3"}, ms(220));
  ASSERT_EQ(sd.size(), 1u);
  EXPECT_EQ(sd[0].seq.start, 40u);
}

// The same case under the default rule (fill_free_slots): C rides an RPC
// of its own at once, beside the batch A left; B is still served by it.
TEST(CoalesceBatcher, CaseThirteenWithFreeSlotsTheNewcomerGoesBeside) {
  test_batcher b{cfg_with(0.020)};
  auto ms = [](int n) {
    return t0 + milliseconds(n);
  };
  auto p = case_thirteen_a_leaves(b);
  ASSERT_EQ(p.size(), 1u);
  ASSERT_EQ(b.join(ts_waiter(0xC, 1, ms(100)), ms(100)), join_decision::queued);
  auto pc = b.take_ready(ms(100));
  ASSERT_EQ(pc.size(), 1u) << "a free slot: C does not wait";
  EXPECT_EQ(pc[0].parts[0].waiter_id, 0xCu);
  auto dc = b.on_ts_response(pc[0].rpc_id, ts_answer(2000, 0, 1), ms(110));
  ASSERT_EQ(dc.size(), 1u);
  EXPECT_EQ(dc[0].waiter_id, 0xCu);
  auto d = b.on_ts_response(p[0].rpc_id, ts_answer(1000, 0, 2), ms(220));
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].waiter_id, 0xBu);
  EXPECT_EQ(d[0].ts.logical_start, 1u);
  EXPECT_EQ(b.stats().rpcs_cancelled, 0u);
  EXPECT_EQ(b.held(), 0u);
}

TEST(CoalesceBatcher, CaseThirteenVariantEveryWaiterCancelsTheRpc) {
  test_batcher b{cfg_with(0.020)};
  auto ms = [](int n) {
    return t0 + milliseconds(n);
  };
  ASSERT_EQ(b.join(ts_waiter(1, 1, ms(0)), ms(0)), join_decision::queued);
  ASSERT_EQ(b.join(ts_waiter(2, 1, ms(10)), ms(10)), join_decision::queued);
  auto p = b.take_ready(ms(20));
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(b.cancel(1, ms(50)).result, cancel_result::abandoned_in_flight);
  auto c = b.cancel(2, ms(60));
  EXPECT_EQ(c.result, cancel_result::rpc_cancelled);
  EXPECT_EQ(c.rpc_to_cancel, p[0].rpc_id);
  EXPECT_TRUE(b.on_ts_response(p[0].rpc_id, ts_answer(1, 0, 2), ms(200))
                .empty()); // nothing delivered
  EXPECT_EQ(b.stats().served, 0u);
  EXPECT_EQ(b.in_flight(), 0u);
}

TEST(CoalesceBatcher, AWrongResponseFailsOnlyItsChunk) {
  auto cfg = cfg_with(0);
  cfg.max_ts_per_rpc = 10;
  test_batcher b{cfg};
  ASSERT_EQ(b.join(ts_waiter(1, 6, t0), t0), join_decision::queued);
  ASSERT_EQ(b.join(ts_waiter(2, 6, t0), t0), join_decision::queued);
  auto p = b.take_ready(t0);
  auto d = b.on_ts_response(p[0].rpc_id, ts_answer(1, 0, 5), t0); // count 5
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].outcome, waiter_outcome::protocol_violation);
  EXPECT_NE(d[0].detail.find("count 5 != requested 6"), std::string::npos);
  auto p2 = b.take_ready(t0);
  ASSERT_EQ(p2.size(), 1u); // the next chunk still goes out
  auto d2 = b.on_ts_response(p2[0].rpc_id, ts_answer(2, 0, 6), t0);
  ASSERT_EQ(d2.size(), 1u);
  EXPECT_EQ(d2[0].outcome, waiter_outcome::served);
  EXPECT_EQ(b.stats().protocol_violations, 1u);
}

TEST(CoalesceBatcher, TsResponseValidationIsExactAtTheBitLimits) {
  // 18-bit logical: the range must end at 262,143 at most, never wrap.
  EXPECT_EQ(check_ts_response(ts_answer(1, 262139, 5), 5), "");
  EXPECT_NE(check_ts_response(ts_answer(1, 262140, 5), 5), "");
  EXPECT_EQ(check_ts_response(ts_answer(1, 0, 262144), 262144), "");
  EXPECT_NE(check_ts_response(ts_answer(1, 1, 262144), 262144), "");
  EXPECT_NE(check_ts_response(ts_answer(1, 0, 262145), 262145), "");
  EXPECT_NE(check_ts_response(ts_answer(1, 0xffffffffu, 1), 1), "");
  EXPECT_NE(check_ts_response(ts_answer(1, 0, 0), 0), "");
  // 46-bit physical.
  EXPECT_EQ(check_ts_response(ts_answer(ts_physical_max, 0, 1), 1), "");
  EXPECT_NE(check_ts_response(ts_answer(ts_physical_max + 1, 0, 1), 1), "");
  EXPECT_EQ(ts_pack(ts_physical_max, ts_logical_max), UINT64_MAX);
  EXPECT_EQ(ts_physical(ts_pack(12345, 678)), 12345u);
  EXPECT_EQ(ts_logical(ts_pack(12345, 678)), 678u);
  // Seq: start + count - 1 must fit in 64 bits; an epoch is required.
  EXPECT_EQ(check_seq_response(seq_response{UINT64_MAX - 1, 2, "1"}, 2), "");
  EXPECT_NE(check_seq_response(seq_response{UINT64_MAX, 2, "1"}, 2), "");
  EXPECT_NE(check_seq_response(seq_response{0, 2, ""}, 2), "");
  EXPECT_NE(check_seq_response(seq_response{0, 3, "1"}, 2), "");
}

TEST(CoalesceBatcher, AnOverflowingLogicalRangeFailsTheChunk) {
  test_batcher b{cfg_with(0)};
  ASSERT_EQ(b.join(ts_waiter(1, 3, t0), t0), join_decision::queued);
  ASSERT_EQ(b.join(ts_waiter(2, 2, t0), t0), join_decision::queued);
  auto p = b.take_ready(t0);
  auto d = b.on_ts_response(p[0].rpc_id, ts_answer(1, 262140, 5), t0);
  ASSERT_EQ(d.size(), 2u);
  for (auto& x : d)
    EXPECT_EQ(x.outcome, waiter_outcome::protocol_violation);
}

TEST(CoalesceBatcher, AFailedRpcFailsItsChunkAndSkipsTheRestOfTheBatch) {
  auto cfg = cfg_with(0);
  cfg.max_ts_per_rpc = 10;
  test_batcher b{cfg};
  ASSERT_EQ(b.join(ts_waiter(1, 6, t0), t0), join_decision::queued);
  ASSERT_EQ(b.join(ts_waiter(2, 6, t0), t0), join_decision::queued);
  ASSERT_EQ(b.join(ts_waiter(3, 6, t0), t0), join_decision::queued);
  auto p = b.take_ready(t0);
  auto t1 = t0 + milliseconds(5);
  ASSERT_EQ(b.join(ts_waiter(4, 1, t1), t1), join_decision::queued);
  auto d = by_id(
    b.on_rpc_failed(p[0].rpc_id, rpc_failure::failed, "unreachable", t1));
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[1].outcome, waiter_outcome::rpc_failed);
  EXPECT_EQ(d[2].outcome, waiter_outcome::not_attempted);
  EXPECT_EQ(d[3].outcome, waiter_outcome::not_attempted);
  // The waiter that joined later gets its own try.
  auto p2 = b.take_ready(t1);
  ASSERT_EQ(p2.size(), 1u);
  EXPECT_EQ(p2[0].parts[0].waiter_id, 4u);
}

TEST(CoalesceBatcher, SeqBlocksAreCutInOrderPerKey) {
  test_batcher b{cfg_with(0)};
  ASSERT_EQ(b.join(seq_waiter(1, "orders", 3, t0), t0), join_decision::queued);
  ASSERT_EQ(b.join(seq_waiter(2, "users", 10, t0), t0), join_decision::queued);
  ASSERT_EQ(b.join(seq_waiter(3, "orders", 4, t0), t0), join_decision::queued);
  auto p = b.take_ready(t0);
  ASSERT_EQ(p.size(), 2u); // one batch in flight per key, both at once
  const rpc_plan& orders = p[0].key == "orders" ? p[0] : p[1];
  const rpc_plan& users = p[0].key == "orders" ? p[1] : p[0];
  EXPECT_EQ(orders.kind, waiter_kind::seq);
  EXPECT_EQ(orders.count, 7u);
  EXPECT_EQ(users.count, 10u);
  auto d
    = by_id(b.on_seq_response(orders.rpc_id, seq_response{100, 7, "4"}, t0));
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[1].seq.start, 100u);
  EXPECT_EQ(d[1].seq.count, 3u);
  EXPECT_EQ(d[3].seq.start, 103u);
  EXPECT_EQ(d[3].seq.count, 4u);
  // A bad-shaped 2xx for a seq chunk is uncertain: the counter moved.
  auto du = b.on_seq_response(users.rpc_id, seq_response{0, 9, "4"}, t0);
  ASSERT_EQ(du.size(), 1u);
  EXPECT_EQ(du[0].outcome, waiter_outcome::uncertain);
}

TEST(CoalesceBatcher, SeqUncertainFailureReachesOnlyThatKey) {
  test_batcher b{cfg_with(0)};
  ASSERT_EQ(b.join(seq_waiter(1, "a", 1, t0), t0), join_decision::queued);
  ASSERT_EQ(b.join(seq_waiter(2, "b", 1, t0), t0), join_decision::queued);
  auto p = b.take_ready(t0);
  ASSERT_EQ(p.size(), 2u);
  auto d = b.on_rpc_failed(p[0].rpc_id, rpc_failure::uncertain, "lost", t0);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].outcome, waiter_outcome::uncertain);
  EXPECT_EQ(b.held(), 1u);
  EXPECT_EQ(b.on_seq_response(p[1].rpc_id, seq_response{5, 1, "1"}, t0).size(),
            1u);
}

TEST(CoalesceBatcher, ConstructionValidatesTheConfig) {
  auto c = cfg_with();
  c.max_waiters = 0;
  try {
    test_batcher b{c};
    FAIL();
  } catch (const config_error& e) {
    EXPECT_EQ(e.field(), "coalesce.max_waiters");
  }
}

TEST(CoalesceBatcher, AnIdReusedAfterACancelNeverGetsTheOldShare) {
  test_batcher b{cfg_with(0)};
  ASSERT_EQ(b.join(ts_waiter(1, 2, t0), t0), join_decision::queued);
  ASSERT_EQ(b.join(ts_waiter(2, 3, t0), t0), join_decision::queued);
  auto p = b.take_ready(t0);
  ASSERT_EQ(b.cancel(1, t0).result, cancel_result::abandoned_in_flight);
  auto t1 = t0 + milliseconds(1);
  ASSERT_EQ(b.join(ts_waiter(1, 4, t1), t1), join_decision::queued);
  auto d = b.on_ts_response(p[0].rpc_id, ts_answer(3, 0, 5), t1);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].waiter_id, 2u);
  EXPECT_EQ(b.held(), 1u);
  auto p2 = b.take_ready(t1);
  ASSERT_EQ(p2.size(), 1u);
  EXPECT_EQ(p2[0].count, 4u);
  auto d2 = b.on_ts_response(p2[0].rpc_id, ts_answer(4, 0, 4), t1);
  ASSERT_EQ(d2.size(), 1u);
  EXPECT_EQ(d2[0].waiter_id, 1u);
  EXPECT_EQ(d2[0].ts.count, 4u);
}

// The batcher issues the ids: distinct, never 0, and an id whose waiter
// left (cancelled or answered) finds nothing again, even once its slot in
// the table is reused by a newcomer.
TEST(CoalesceBatcher, IssuedIdsAreFreshAndAStaleIdFindsNothing) {
  batcher b{cfg_with(0)};
  auto w = ts_waiter(0, 1, t0).req;
  auto a = b.join(w, t0);
  auto c = b.join(w, t0);
  ASSERT_EQ(a.decision, join_decision::queued);
  ASSERT_EQ(c.decision, join_decision::queued);
  EXPECT_NE(a.id, 0u);
  EXPECT_NE(a.id, c.id);
  EXPECT_EQ(b.cancel(a.id, t0).result, cancel_result::removed);
  auto d = b.join(w, t0); // takes the slot `a` left
  ASSERT_EQ(d.decision, join_decision::queued);
  EXPECT_NE(d.id, a.id);
  EXPECT_EQ(b.payload(a.id), nullptr);
  EXPECT_EQ(b.cancel(a.id, t0).result, cancel_result::not_found);
  EXPECT_EQ(b.held(), 2u);
  auto plans = b.take_ready(t0);
  ASSERT_EQ(plans.size(), 1u);
  ASSERT_EQ(plans[0].parts.size(), 2u);
  EXPECT_EQ(plans[0].parts[0].waiter_id, c.id);
  EXPECT_EQ(plans[0].parts[1].waiter_id, d.id);
  auto ds = b.on_ts_response(plans[0].rpc_id, ts_answer(5, 0, 2), t0);
  ASSERT_EQ(ds.size(), 2u);
  EXPECT_EQ(ds[0].waiter_id, c.id);
  EXPECT_EQ(ds[1].waiter_id, d.id);
  EXPECT_EQ(b.payload(c.id), nullptr) << "answered: gone";
  EXPECT_EQ(b.cancel(d.id, t0).result, cancel_result::not_found);
  EXPECT_EQ(b.held(), 0u);
}

// The owner's data of a waiter lives in the batcher's table (one table per
// waiter): set after join, handed back with the waiter's delivery, visited
// by for_each_payload, dropped on cancel. A move-only payload, as the
// driver's response promise is in spirit.
TEST(CoalesceBatcher, PayloadTravelsWithItsWaiter) {
  basic_batcher<std::unique_ptr<int>> b{cfg_with(0)};
  uint64_t ids[4];
  for (int i = 0; i < 4; ++i) {
    auto r = b.join(ts_waiter(0, 1, t0).req, t0);
    ASSERT_EQ(r.decision, join_decision::queued);
    ids[i] = r.id;
    ASSERT_NE(b.payload(r.id), nullptr);
    EXPECT_EQ(*b.payload(r.id), nullptr) << "a default payload at join";
    *b.payload(r.id) = std::make_unique<int>(100 + i);
  }
  int seen = 0;
  b.for_each_payload([&](uint64_t id, std::unique_ptr<int>& p) {
    ASSERT_TRUE(p);
    EXPECT_EQ(id, ids[*p - 100]);
    ++seen;
  });
  EXPECT_EQ(seen, 4);
  EXPECT_EQ(b.cancel(ids[1], t0).result, cancel_result::removed);
  auto plans = b.take_ready(t0);
  ASSERT_EQ(plans.size(), 1u);
  ASSERT_EQ(plans[0].parts.size(), 3u);
  // One waiter leaves while its RPC is in flight: its payload goes with
  // it, the others' come back with their deliveries.
  EXPECT_EQ(b.cancel(ids[2], t0).result, cancel_result::abandoned_in_flight);
  auto ds = b.on_ts_response(plans[0].rpc_id, ts_answer(9, 0, 3), t0);
  ASSERT_EQ(ds.size(), 2u);
  EXPECT_EQ(ds[0].waiter_id, ids[0]);
  ASSERT_TRUE(ds[0].payload);
  EXPECT_EQ(*ds[0].payload, 100);
  EXPECT_EQ(ds[0].ts.logical_start, 0u);
  EXPECT_EQ(ds[1].waiter_id, ids[3]);
  ASSERT_TRUE(ds[1].payload);
  EXPECT_EQ(*ds[1].payload, 103);
  EXPECT_EQ(ds[1].ts.logical_start, 2u) << "the cancelled share is skipped";
  EXPECT_EQ(b.held(), 0u);
  // A failed RPC hands the payloads back as well.
  auto r = b.join(ts_waiter(0, 1, t0).req, t0);
  *b.payload(r.id) = std::make_unique<int>(7);
  plans = b.take_ready(t0);
  ASSERT_EQ(plans.size(), 1u);
  ds = b.on_rpc_failed(plans[0].rpc_id, rpc_failure::failed, "down", t0);
  ASSERT_EQ(ds.size(), 1u);
  EXPECT_EQ(ds[0].outcome, waiter_outcome::rpc_failed);
  ASSERT_TRUE(ds[0].payload);
  EXPECT_EQ(*ds[0].payload, 7);
}

// A group that goes idle is kept for reuse (a lone caller's group goes cold
// and warm on every call) while few groups exist; beyond kept_idle_groups
// (many seq keys) idle groups are dropped, so memory stays bounded, and a
// dropped key served again behaves as new.
TEST(CoalesceBatcher, IdleGroupsAreKeptUpToABoundAndDroppedBeyond) {
  test_batcher b{cfg_with(0)};
  auto now = t0;
  uint64_t name = 1, phys = 1, next_seq = 1;
  auto serve = [&](named_waiter w) {
    ASSERT_EQ(b.join(w, now), join_decision::queued);
    auto p = b.take_ready(now);
    ASSERT_EQ(p.size(), 1u);
    auto ds = p[0].kind == waiter_kind::ts
                ? b.on_ts_response(p[0].rpc_id, ts_answer(phys++, 0, 1), now)
                : b.on_seq_response(p[0].rpc_id,
                                    seq_response{next_seq++, 1, "3", {}}, now);
    ASSERT_EQ(ds.size(), 1u);
    EXPECT_EQ(ds[0].waiter_id, w.name);
    EXPECT_EQ(ds[0].outcome, waiter_outcome::served);
    now += microseconds(10);
  };
  for (int i = 0; i < 10; ++i)
    serve(ts_waiter(name++, 1, now));
  EXPECT_EQ(b.groups(), 0u);
  EXPECT_EQ(b.tracked_groups(), 1u) << "the ts group, kept and reused";
  for (int k = 0; k < 200; ++k)
    serve(seq_waiter(name++, "key" + std::to_string(k), 1, now));
  EXPECT_EQ(b.groups(), 0u);
  EXPECT_EQ(b.tracked_groups(), batcher::kept_idle_groups)
    << "the ts group and the first seq keys' groups";
  // The ts group stays however many seq keys came and went: a lone ts
  // caller does not rebuild it.
  for (int i = 0; i < 5; ++i)
    serve(ts_waiter(name++, 1, now));
  EXPECT_EQ(b.tracked_groups(), batcher::kept_idle_groups);
  // Keys kept and keys dropped both serve as before.
  serve(seq_waiter(name++, "key0", 1, now));
  serve(seq_waiter(name++, "key199", 1, now));
  serve(ts_waiter(name++, 1, now));
  EXPECT_EQ(b.held(), 0u);
  EXPECT_LE(b.tracked_groups(), batcher::kept_idle_groups);
}

// recycle() only lends memory: a batcher whose owner hands back every plan
// and every deliveries vector makes the same plans and the same deliveries
// as one whose owner does not, through random joins, cancels and answers,
// and its plans do reuse the memory handed back.
TEST(CoalesceBatcher, RecycledBuffersChangeNoPlanAndNoDelivery) {
  std::mt19937_64 rng{12};
  auto cfg = cfg_with(0.0005);
  batcher a{cfg}, b{cfg};
  std::vector<uint64_t> held; // waiter ids (the same in both)
  std::map<uint64_t, rpc_plan> flights_a, flights_b;
  std::set<const chunk_part*> lent; // the memory of plans handed back
  std::size_t reused = 0;
  auto now = t0;
  for (int step = 0; step < 4000; ++step) {
    now += microseconds(rng() % 300);
    auto r = rng() % 10;
    if (r < 6) {
      waiter_request w;
      w.kind = waiter_kind::ts;
      w.count = 1 + static_cast<uint32_t>(rng() % 3);
      w.entered = now;
      auto ja = a.join(w, now);
      auto jb = b.join(w, now);
      ASSERT_EQ(ja.decision, jb.decision);
      ASSERT_EQ(ja.id, jb.id);
      if (ja.decision == join_decision::queued)
        held.push_back(ja.id);
    } else if (r < 7 && !held.empty()) {
      auto id = held[rng() % held.size()];
      ASSERT_EQ(a.cancel(id, now).result, b.cancel(id, now).result);
    } else if (r < 9) {
      auto pa = a.take_ready(now);
      auto pb = b.take_ready(now);
      ASSERT_EQ(pa.size(), pb.size());
      for (std::size_t i = 0; i < pa.size(); ++i) {
        ASSERT_EQ(pa[i].rpc_id, pb[i].rpc_id);
        ASSERT_EQ(pa[i].count, pb[i].count);
        ASSERT_EQ(pa[i].parts.size(), pb[i].parts.size());
        for (std::size_t k = 0; k < pa[i].parts.size(); ++k) {
          ASSERT_EQ(pa[i].parts[k].waiter_id, pb[i].parts[k].waiter_id);
          ASSERT_EQ(pa[i].parts[k].count, pb[i].parts[k].count);
        }
        if (lent.count(pa[i].parts.data()))
          ++reused;
        flights_a.emplace(pa[i].rpc_id, std::move(pa[i]));
        flights_b.emplace(pb[i].rpc_id, std::move(pb[i]));
      }
    } else if (!flights_a.empty()) {
      auto it = flights_a.begin();
      std::advance(it, static_cast<std::ptrdiff_t>(rng() % flights_a.size()));
      auto rpc = it->first;
      auto answer
        = ts_answer(1000 + static_cast<uint64_t>(step), 0, it->second.count);
      auto da = a.on_ts_response(rpc, answer, now);
      auto db = b.on_ts_response(rpc, answer, now);
      ASSERT_EQ(da.size(), db.size());
      for (std::size_t k = 0; k < da.size(); ++k) {
        ASSERT_EQ(da[k].waiter_id, db[k].waiter_id);
        ASSERT_EQ(da[k].outcome, db[k].outcome);
        ASSERT_EQ(da[k].ts.logical_start, db[k].ts.logical_start);
        ASSERT_EQ(da[k].ts.count, db[k].ts.count);
      }
      lent.insert(it->second.parts.data());
      a.recycle(std::move(it->second));
      a.recycle(std::move(da));
      flights_a.erase(it);
      flights_b.erase(rpc);
    }
    ASSERT_EQ(a.held(), b.held());
  }
  EXPECT_GT(reused, 0u) << "no plan took memory handed back";
}
