#pragma once

// The coalescing state of the driver (batching and chunking) as a pure state
// machine: it turns a crowd of get_ts / get_seq waiters into a few batched
// RPCs and hands each waiter its share of the answers. The ideas are
// tsoracle-client's driver.rs (one batch in flight, cold-start flush only,
// chunks of at most MAX_TIMESTAMPS_PER_RPC run one after another, each
// delivered as soon as its RPC returns; oversize or zero waiters rejected
// inline; response validation in response.rs) and its docs
// (docs/the-client-driver.md, docs/client-api-and-usage.md).
//
// Groups: all ts waiters form one group; seq waiters form one group per key.
// Each group moves through
//
//            join (idle group)                flush_at <= now
//   IDLE ──────────────────────► COLD ─────────────────────────┐
//    ▲        flush_at = now + batch_flush_interval             │ take_ready
//    │        (or now: adaptive cold start, see coalesce_config) │
//    │                                                          ▼
//    │  batch done, queue empty          ┌───────────► IN FLIGHT (chunk k)
//    └───────────────────────────────────┤  chunk done,       │
//                                        │  chunks left:      │ chunk answered
//                                        │  next chunk ◄──────┘ / failed /
//                                        │                      cancelled
//                                        └─ batch done, waiters queued:
//                                           next batch at once (no flush)
//
// (The diagram is the one-batch case. With pipelining, below, a group goes
// back to IDLE only when its last RPC in flight is done and nothing is
// queued or pending.)
//
// A batch is the group's queue at the moment it is sent (waiters that join
// later wait for the next batch, so no timestamp handed out predates its
// waiter's entry: freshness). It is cut, in arrival order, into chunks of at
// most the per-RPC cap, without splitting a waiter (a waiter never exceeds
// the cap: bigger counts are rejected at join). The chunks of a batch are
// sent one at a time.
//
// Pipelining (beyond tsoracle, coalesce_config::max_rpcs_in_flight and
// fill_free_slots): while fewer than max_rpcs_in_flight RPCs of a group are
// in flight, none a chunk of a multi-chunk batch, a newcomer does not wait
// in the queue: a batch forms at once, and the waiters queued then are
// spread over the free slots (at most ceil(queued / free) per batch), so
// the slots stay busy and waiting never adds an RPC in flight's latency
// to a newcomer's. An idle group's batch takes the whole queue. With
// fill_free_slots off, a further RPC starts only while every RPC in flight
// carries a single waiter and takes the whole queue; once one carries two
// or more, the diagram above holds as it is: newcomers queue for the next
// batch. With max_rpcs_in_flight 1 a group has at most one RPC in flight
// (tsoracle's driver). The owner decides when to call take_ready: the driver
// calls it after the callers already in its mailbox joined, so callers that
// arrive together are one queue: spread over the free slots (or, with
// fill_free_slots off, one batch).
//
// The owner (the coalescing_driver actor) calls join / cancel / on_* and,
// after each of them, take_ready(now) for the RPCs to send, and arms one
// timer for next_wakeup(). Pure: time is an argument; nothing is read from
// a clock; no CAF.
//
// Use from the actor:
//   get_ts / get_seq  → join(w, now); rejected_* → answer the caller at
//                       once; queued → keep its promise in payload(id)
//   after any event   → for each plan in take_ready(now): run one
//                       discovery_call (actors/coalesce/leader_state.hpp)
//                       for it; arm a timer at next_wakeup() (tag it; a
//                       stale wakeup is harmless, take_ready is idempotent)
//   discovery done    → succeeded: on_ts_response / on_seq_response with the
//                       parsed body; failed: on_rpc_failed(id, uncertain iff
//                       discovery_error::uncertain_outcome); deliver each
//                       delivery to the promise in its payload
//   caller leaves     → take its promise from payload(id), cancel(id);
//                       rpc_cancelled → cancel that RPC's
//                       exchange (transport cancel_atom) and drop its
//                       discovery_call

#include "actors/coalesce/coalesce_types.hpp"
#include "config/coalesce_config.hpp"
#include "core/coalesce_stats.hpp"
#include "core/slab.hpp"

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

namespace outbound {
inline namespace coalesce {

/// One caller's request as it enters the driver.
struct waiter_request {
  waiter_kind kind = waiter_kind::ts;
  /// Sequence key (seq only): 1..max_seq_key_bytes bytes of valid UTF-8.
  std::string key;
  /// Timestamps or ordinals wanted: 1..the kind's per-RPC cap.
  uint32_t count = 1;
  /// When the call entered the driver (freshness is counted from here).
  coalesce_time entered{};
};

/// The answer of batcher::join.
enum class join_decision : uint8_t {
  /// Held; it is served by a later take_ready / on_* call.
  queued,
  /// The driver holds max_waiters waiters: the caller is pushed back (the
  /// actor answers at once with a backpressure error; nothing is sent).
  rejected_backpressure,
  /// count is 0 or above the kind's per-RPC cap (tsoracle InvalidCount).
  rejected_invalid_count,
  /// seq key empty, too long or not UTF-8 (tsoracle InvalidSeqKey).
  rejected_invalid_key,
};

/// The answer of basic_batcher::join.
struct join_result {
  join_decision decision = join_decision::queued;
  /// queued: the waiter's id (never 0), which names it in rpc_plan parts,
  /// deliveries, cancel and payload until it is answered or cancelled; a
  /// stale id finds nothing. Rejected: 0.
  uint64_t id = 0;
};

/// "queued", "rejected_backpressure", ...
const char* to_string(join_decision d);

/// How one waiter's wait ended.
enum class waiter_outcome : uint8_t {
  /// Served: `ts` (ts) or `seq` (seq) holds its values.
  served,
  /// Its chunk's 2xx response had the wrong count or shape (ts: protocol
  /// violation; seq never, see `uncertain`). Only this chunk's waiters.
  protocol_violation,
  /// Its chunk's RPC failed definitively and provably changed nothing
  /// (discovery gave up: unreachable, deadline, redirect cap, 4xx, ...).
  rpc_failed,
  /// seq: the chunk's RPC may have committed (a post-send failure, or a 2xx
  /// whose count or shape is wrong): the block may be spent. Never retried.
  uncertain,
  /// An earlier chunk of the same batch failed (rpc_failed or uncertain):
  /// this chunk was never sent (fail-fast, tsoracle driver.rs); nothing was
  /// committed for it.
  not_attempted,
};

/// "served", "protocol_violation", ...
const char* to_string(waiter_outcome o);

/// What a waiter carries for the owner when the owner keeps nothing of its
/// own (the tests): nothing.
struct no_payload {};

/// One waiter's result, produced by on_ts_response / on_seq_response /
/// on_rpc_failed. `payload` is the owner's data of the waiter, moved out of
/// the batcher's table with it (the coalescing driver's response promise).
template <class Payload>
struct basic_delivery {
  uint64_t waiter_id = 0;
  waiter_outcome outcome = waiter_outcome::served;
  /// served ts: the waiter's timestamps.
  ts_range ts;
  /// served seq: the waiter's block.
  seq_block seq;
  /// Why it failed (never carries header values). The answering response's
  /// epoch is the owner's to pass on: it is the same for every waiter.
  std::string detail;
  Payload payload;
};

using delivery = basic_delivery<no_payload>;

/// One waiter's part of a chunk, in the order of the response's values.
struct chunk_part {
  uint64_t waiter_id = 0;
  uint32_t count = 0;
};

/// An RPC to send now (the answer of take_ready).
struct rpc_plan {
  /// Id of this RPC: pass it back to on_ts_response / on_seq_response /
  /// on_rpc_failed; unique per batcher.
  uint64_t rpc_id = 0;
  waiter_kind kind = waiter_kind::ts;
  /// seq: the key.
  std::string key;
  /// Values requested: the sum of the parts' counts (<= the per-RPC cap).
  uint32_t count = 0;
  /// The waiters served by it, in order.
  std::vector<chunk_part> parts;
  /// 0-based index of this chunk in its batch, and the batch's chunk count.
  std::size_t chunk_index = 0;
  std::size_t chunk_total = 1;
  /// When take_ready handed it out: every part's waiter entered at or
  /// before this time (freshness).
  coalesce_time dispatched_at{};
};

/// What cancel() found.
enum class cancel_result : uint8_t {
  /// No such waiter (already answered, or never held).
  not_found,
  /// It was queued or in a chunk not yet sent: it simply leaves.
  removed,
  /// It was in the chunk in flight: its share is dropped when the answer
  /// comes; the others in the chunk keep waiting.
  abandoned_in_flight,
  /// It was the last live waiter of the chunk in flight: the owner cancels
  /// that RPC (`rpc_to_cancel`); its answer, if any, is ignored.
  rpc_cancelled,
};

/// "not_found", "removed", "abandoned_in_flight", "rpc_cancelled".
const char* to_string(cancel_result r);

/// The answer of batcher::cancel.
struct cancel_outcome {
  cancel_result result = cancel_result::not_found;
  /// rpc_cancelled: the RPC to cancel.
  uint64_t rpc_to_cancel = 0;
};

/// A 2xx GetTs answer, as parsed from the body.
struct ts_response {
  uint64_t physical_ms = 0;
  uint32_t logical_start = 0;
  uint32_t count = 0;
  std::string epoch;
  /// Why the body could not be read ("response body is not JSON", ...),
  /// empty when it could: the check names this cause instead of the
  /// zero count it leaves behind.
  std::string unreadable;
};

/// A 2xx GetSeq answer, as parsed from the body.
struct seq_response {
  uint64_t start = 0;
  uint32_t count = 0;
  /// Empty when the body had none (then the outcome is uncertain, as in
  /// tsoracle seq_attempt.rs).
  std::string epoch;
  /// As ts_response::unreadable.
  std::string unreadable;
};

/// How a chunk's RPC failed (the leader discovery's verdict).
enum class rpc_failure : uint8_t {
  /// Provably nothing committed, or a ts RPC (idempotent): rpc_failed.
  failed,
  /// A seq RPC that may have committed: uncertain.
  uncertain,
};

/// Checks a GetTs answer against the chunk it answers (tsoracle
/// response.rs): count == requested, 1 <= count <= 262,144, physical <=
/// 2^46-1, logical_start + count - 1 <= 262,143 (no wrap into the next
/// millisecond: a range that would overflow the 18-bit logical is a
/// violation, never split). Returns an empty string when valid, else why
/// (a body that could not be read: its `unreadable` cause).
std::string check_ts_response(const ts_response& r, uint32_t requested);

/// Checks a GetSeq answer: count == requested and start + count - 1 fits
/// in 64 bits, epoch present. Empty when valid, else why (a body that
/// could not be read: its `unreadable` cause).
std::string check_seq_response(const seq_response& r, uint32_t requested);

/// True if `key` is a valid sequence key: 1..max_bytes bytes of UTF-8
/// (no overlong forms, no surrogates).
bool valid_seq_key(const std::string& key, std::size_t max_bytes);

/// The coalescing state of one driver. Not thread-safe (one owner actor).
///
/// The batcher's waiter table is the owner's too: each waiter carries a
/// `Payload` (the driver's response promise and deadline entry), set
/// through payload() after join and handed back in its delivery, so a
/// waiter lives in one table, a slab (core/slab.hpp) named by the ids join
/// issues: no hashing and no allocation per waiter once the slab has grown.
/// The member definitions are in detail/batcher_impl.hpp (not installed);
/// `batcher` (no payload) is instantiated once in batcher.cpp.
template <class Payload>
class basic_batcher {
  static_assert(std::is_nothrow_move_assignable_v<Payload>,
                "release() moves payloads out where nothing may throw");

public:
  using delivery_type = basic_delivery<Payload>;

  /// Takes batch_flush_interval, max_waiters, the per-RPC caps and the key
  /// limit from `cfg`; throws config_error when `cfg` is invalid.
  explicit basic_batcher(const coalesce_config& cfg);

  /// A caller enters at `now` (w.entered is normally `now`). Invalid
  /// requests are rejected before any RPC and touch no other waiter. A
  /// queued waiter gets a fresh id and a default Payload.
  join_result join(const waiter_request& w, coalesce_time now);

  /// The owner's data of waiter `waiter_id`, or nullptr when it is not
  /// held (answered, cancelled, never issued).
  Payload* payload(uint64_t waiter_id);

  /// Calls `f(waiter_id, Payload&)` for every waiter held (the owner
  /// answers them all when it stops or starts over).
  template <class F>
  void for_each_payload(F&& f) {
    waiters_.for_each(
      [&](uint64_t id, waiter_rec& rec) { f(id, rec.payload); });
  }

  /// The caller of `waiter_id` left (it cancelled, or its own deadline
  /// passed). Never disturbs the other waiters; the RPC in flight is
  /// cancelled only when every waiter of it has gone. Its payload is
  /// dropped: take what the owner needs from payload() first.
  cancel_outcome cancel(uint64_t waiter_id, coalesce_time now);

  /// The RPCs to send now, per group below max_rpcs_in_flight: the next
  /// chunk of its current batch once the previous chunk is done; else,
  /// without RPCs in flight, a new batch of its whole queue when the
  /// queue is due (cold start: flush_at <= now; warm: at once); else,
  /// while no RPC in flight is a chunk of a multi-chunk batch, new batches
  /// at once, each of one chunk and at most ceil(queued / free slots)
  /// waiters, until the slots are full or the queue is empty (with
  /// fill_free_slots off: only while each RPC in flight carries a single
  /// waiter, one batch of the whole queue; see the file comment). Waiters
  /// with `entered` later than `now` stay queued, in order.
  std::vector<rpc_plan> take_ready(coalesce_time now);

  /// take_ready into `out` (cleared first), so that an owner calling it
  /// after every event can keep one vector's memory instead of allocating
  /// one per call.
  void take_ready(coalesce_time now, std::vector<rpc_plan>& out);

  /// When the owner must call take_ready next although nothing else
  /// happens (the earliest cold-start flush), or nullopt.
  std::optional<coalesce_time> next_wakeup() const;

  /// The GetTs RPC `rpc_id` answered 2xx (a body that does not parse is
  /// passed as a default ts_response: count 0, a protocol violation).
  /// Returns one delivery per live
  /// waiter of the chunk: served (in order, the response's range cut into
  /// the waiters' counts) or, if check_ts_response fails, protocol_violation
  /// for the chunk's waiters only. Unknown or cancelled ids: nothing.
  std::vector<delivery_type>
  on_ts_response(uint64_t rpc_id, const ts_response& r, coalesce_time now);

  /// The GetSeq RPC `rpc_id` answered 2xx (a body that does not parse is
  /// passed as a default seq_response: uncertain): the block is cut into the
  /// waiters' blocks in order; a wrong count or shape makes the chunk's
  /// waiters uncertain (the server did advance something).
  std::vector<delivery_type>
  on_seq_response(uint64_t rpc_id, const seq_response& r, coalesce_time now);

  /// The RPC `rpc_id` failed for good (discovery gave up). Its live waiters
  /// get rpc_failed / uncertain; the batch's chunks not yet sent fail as
  /// not_attempted; the group's queued waiters form the next batch.
  std::vector<delivery_type> on_rpc_failed(uint64_t rpc_id, rpc_failure f,
                                           const std::string& detail,
                                           coalesce_time now);

  /// Hands back the parts of a plan this batcher made, once the owner is
  /// done with the RPC, and the vector of deliveries it returned, once
  /// they are answered: the next batches reuse their memory instead of
  /// allocating it (a batch of 512 waiters carries 8 KiB of parts twice,
  /// in its chunk and in its plan, and a delivery per waiter). Optional;
  /// the deliveries left in `ds` are destroyed. Never throws.
  void recycle(rpc_plan&& plan) noexcept {
    keep_parts(std::move(plan.parts));
  }
  void recycle(std::vector<delivery_type>&& ds) noexcept {
    ds.clear();
    if (ds.capacity() > spare_deliveries_.capacity())
      spare_deliveries_ = std::move(ds);
  }

  /// Waiters held now (queued or in flight, all groups).
  std::size_t held() const {
    return waiters_.size();
  }
  /// Waiters queued (not yet in a batch) in all groups.
  std::size_t queued() const;
  /// RPCs in flight (at most max_rpcs_in_flight per group).
  std::size_t in_flight() const {
    return rpc_group_.size();
  }
  /// RPCs in flight of one group (ts: `key` ignored; seq: that key).
  std::size_t in_flight(waiter_kind kind, const std::string& key) const;
  /// Groups with waiters queued, pending or in flight (idle ones are not
  /// counted: they are kept for reuse, the ts group always, seq keys' up
  /// to kept_idle_groups groups in all).
  std::size_t groups() const;
  /// An idle seq key's group is dropped while more groups than this exist.
  static constexpr std::size_t kept_idle_groups = 16;
  /// Groups held, idle ones kept for reuse included (a diagnostic: at most
  /// kept_idle_groups once every group is idle).
  std::size_t tracked_groups() const {
    return groups_.size();
  }
  const batcher_stats& stats() const {
    return stats_;
  }
  /// Counts on from `s` (an owner that replaced its batcher after a fault
  /// keeps its exported counters monotonic).
  void carry_stats(const batcher_stats& s) {
    stats_ = s;
  }
  /// The per-RPC cap of a kind.
  uint32_t cap(waiter_kind k) const {
    return k == waiter_kind::ts ? max_ts_ : max_seq_;
  }

private:
  struct group_key {
    waiter_kind kind;
    std::string key;
    bool operator<(const group_key& o) const {
      return kind != o.kind ? kind < o.kind : key < o.key;
    }
  };

  enum class where : uint8_t { queued, pending_chunk, in_flight };

  struct waiter_rec {
    waiter_request req;
    where at = where::queued;
    /// The chunk it is in (pending or in flight), 0 while queued.
    uint64_t chunk_uid = 0;
    Payload payload;
  };

  struct chunk {
    uint64_t uid = 0;
    /// The batch it belongs to (the chunks of a batch go one at a time;
    /// a failed chunk fails the rest of its own batch only).
    uint64_t batch = 0;
    uint64_t rpc_id = 0;
    uint32_t count = 0;
    std::vector<chunk_part> parts;
    /// Parts whose waiter is still held (for in-flight cancellation).
    std::size_t live = 0;
    std::size_t index = 0;
    std::size_t total = 1;
  };

  struct group {
    /// Waiter ids in arrival order; a cancelled one is skipped lazily (its
    /// id no longer finds a waiter).
    std::deque<uint64_t> queue;
    std::size_t queued_live = 0;
    /// Chunks of the current batch not yet sent, in order.
    std::deque<chunk> pending;
    /// Chunks in flight (at most max_rpcs_in_flight; more than one only
    /// while none is a chunk of a multi-chunk batch, see may_pipeline).
    std::vector<chunk> flights;
    /// Cold start: when the queue is due; unset while warm (due at once).
    std::optional<coalesce_time> flush_at;
  };

  using group_map = std::map<group_key, group>;

  /// After a chunk of `it` left flights (answered, failed or cancelled):
  /// arms the next step of the group and drops it when idle.
  void finish_flight(typename group_map::iterator it, coalesce_time now);
  /// Takes the chunk of RPC `rpc_id` out of the group's flights.
  static chunk take_flight(group& g, uint64_t rpc_id);
  /// True if `g` may send a further RPC while its flights are in the air:
  /// fewer than max_rpcs_in_flight, each a one-chunk batch (of a single
  /// waiter, with fill_free_slots off).
  bool may_pipeline(const group& g) const;
  /// True if `g` has nothing queued, pending or in flight.
  static bool idle(const group& g) {
    return g.flights.empty() && g.pending.empty() && g.queued_live == 0;
  }
  /// Drops group `it` if it is idle and more than kept_idle_groups exist.
  void drop_if_idle(typename group_map::iterator it);
  /// Forms a batch from the group's due queue (waiters entered <= now).
  /// At most `limit` waiters join it, and with a limit at most one chunk's
  /// worth; the rest stay queued in order.
  void form_batch(group& g, waiter_kind kind, coalesce_time now,
                  std::size_t limit);
  /// Appends a delivery with `o` (and `detail` when not served) for each
  /// live waiter of the chunk, in the chunk's order; `fill(delivery&,
  /// offset, part)` completes a served one (`offset`: the values of the
  /// parts before it, gone waiters' included). The waiters stay in the
  /// table: release() takes them out once nothing can throw any more.
  template <class Fill>
  void collect_chunk(const chunk& c, waiter_outcome o,
                     const std::string& detail, std::vector<delivery_type>& out,
                     Fill&& fill);
  /// Moves each delivery's payload out of the table and drops its waiter.
  /// Runs after everything that may throw: a throw before it leaves every
  /// payload in the table, where the owner's fault path finds it.
  void release(std::vector<delivery_type>& out) noexcept;
  /// The answer of RPC `rpc_id`: `check(requested)` says why its values
  /// are unusable (empty when they are not); then every live waiter of its
  /// chunk fails with `bad`, else is served through `fill` (as
  /// collect_chunk's). Stale ids: nothing.
  template <class Check, class Fill>
  std::vector<delivery_type> on_answer(uint64_t rpc_id, coalesce_time now,
                                       waiter_outcome bad, Check&& check,
                                       Fill&& fill);
  /// The live waiter of part `p` of chunk `c`, or nullptr.
  waiter_rec* live_waiter(const chunk& c, const chunk_part& p);
  /// Looks up the group of RPC `rpc_id` and takes its chunk out of the
  /// flights; false (a stale answer, counted) when it is not in flight.
  bool take_answered(uint64_t rpc_id, typename group_map::iterator& git,
                     chunk& c);

  /// True if a cold start of group `gk` at `now` is sent at once
  /// (adaptive_cold_start; always with a zero window).
  bool cold_start_at_once(const group_key& gk, coalesce_time now) const;

  coalesce_duration flush_interval_;
  bool adaptive_ = true;
  /// Groups whose last RPC completed (answered, failed or cancelled) less
  /// than a window ago, when it did: the group itself is dropped when idle.
  /// Entries older than the window are swept as the table grows.
  std::map<group_key, coalesce_time> recent_done_;
  std::size_t sweep_done_at_ = 64;
  /// When a waiter last joined, and the smoothed gap between joins (unset
  /// until two joins were seen).
  std::optional<coalesce_time> last_join_;
  std::optional<coalesce_duration> join_gap_;
  std::size_t max_waiters_;
  std::size_t max_in_flight_ = 1;
  bool fill_free_slots_ = true;
  uint32_t max_ts_;
  uint32_t max_seq_;
  std::size_t max_key_bytes_;

  core::slab<waiter_rec> waiters_;
  group_map groups_;
  /// form_batch's waiters not yet due, reused (no allocation per batch).
  std::vector<uint64_t> later_scratch_;
  /// Emptied parts vectors with their memory (recycle, answered chunks),
  /// taken by the next chunks and plans.
  std::array<std::vector<chunk_part>, 4> spare_parts_;
  std::size_t spare_parts_count_ = 0;
  /// An emptied deliveries vector with its memory (recycle).
  std::vector<delivery_type> spare_deliveries_;
  /// Keeps `v`'s memory for a later chunk or plan (or frees it when four
  /// are kept already).
  void keep_parts(std::vector<chunk_part>&& v) noexcept {
    if (v.capacity() == 0 || spare_parts_count_ == spare_parts_.size())
      return;
    v.clear();
    spare_parts_[spare_parts_count_++] = std::move(v);
  }
  /// An empty parts vector, with the memory of a kept one if any.
  std::vector<chunk_part> take_parts() noexcept {
    if (spare_parts_count_ == 0)
      return {};
    return std::move(spare_parts_[--spare_parts_count_]);
  }
  std::unordered_map<uint64_t, group_key> rpc_group_;
  uint64_t next_rpc_ = 1;
  uint64_t next_chunk_ = 1;
  uint64_t next_batch_ = 1;
  batcher_stats stats_;
};

/// The batcher without owner data (tests, tools).
using batcher = basic_batcher<no_payload>;

extern template class basic_batcher<no_payload>;

} // namespace coalesce
} // namespace outbound
