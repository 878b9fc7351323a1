#pragma once

// The member definitions of basic_batcher (batcher.hpp). Included by the
// files that instantiate it: batcher.cpp (no payload) and the coalescing
// driver (its response promises).

#include "actors/coalesce/batcher.hpp"

#include <algorithm>
#include <iterator>
#include <limits>

namespace outbound {
inline namespace coalesce {

template <class Payload>
basic_batcher<Payload>::basic_batcher(const coalesce_config& cfg) {
  cfg.validate();
  flush_interval_ = coalesce_seconds(cfg.batch_flush_interval);
  adaptive_ = cfg.adaptive_cold_start;
  max_waiters_ = cfg.max_waiters;
  max_in_flight_ = cfg.max_rpcs_in_flight;
  fill_free_slots_ = cfg.fill_free_slots;
  max_ts_ = cfg.max_ts_per_rpc;
  max_seq_ = cfg.max_seq_per_rpc;
  max_key_bytes_ = cfg.max_seq_key_bytes;
}

template <class Payload>
std::size_t basic_batcher<Payload>::queued() const {
  std::size_t n = 0;
  for (auto& kv : groups_)
    n += kv.second.queued_live;
  return n;
}

template <class Payload>
join_result basic_batcher<Payload>::join(const waiter_request& w,
                                         coalesce_time now) {
  // Validity first: an invalid request is refused whatever the load, and
  // before it can touch any group (its siblings are unaffected).
  if (w.count < 1 || w.count > cap(w.kind)) {
    ++stats_.rejected_invalid;
    return {join_decision::rejected_invalid_count, 0};
  }
  if (w.kind == waiter_kind::seq && !valid_seq_key(w.key, max_key_bytes_)) {
    ++stats_.rejected_invalid;
    return {join_decision::rejected_invalid_key, 0};
  }
  if (waiters_.size() >= max_waiters_) {
    ++stats_.rejected_backpressure;
    return {join_decision::rejected_backpressure, 0};
  }
  group_key gk{w.kind, w.kind == waiter_kind::seq ? w.key : std::string{}};
  auto& g = groups_[gk];
  if (idle(g)) { // cold start
    if (cold_start_at_once(gk, now)) {
      g.flush_at = now;
      ++stats_.cold_starts_at_once;
    } else {
      g.flush_at = now + flush_interval_;
      ++stats_.cold_starts_window;
    }
  }
  if (!last_join_ || now >= *last_join_) {
    if (last_join_) {
      // EWMA with weight 1/8 (RFC 6298's smoothed RTT): gap += (x - gap) / 8.
      // A sample counts at most two windows: only the comparison with the
      // window matters, and one long idle spell must not make the next
      // burst look sparse for dozens of joins.
      auto x
        = std::min<coalesce_duration>(now - *last_join_, 2 * flush_interval_);
      join_gap_ = join_gap_ ? *join_gap_ + (x - *join_gap_) / 8 : x;
    }
    last_join_ = now; // never backwards (explicit-time callers)
  }
  waiter_rec rec;
  rec.req = w;
  if (w.kind == waiter_kind::ts)
    rec.req.key.clear();
  rec.at = where::queued;
  auto id = waiters_.insert(std::move(rec));
  g.queue.push_back(id);
  ++g.queued_live;
  ++stats_.joined;
  return {join_decision::queued, id};
}

template <class Payload>
Payload* basic_batcher<Payload>::payload(uint64_t waiter_id) {
  auto* rec = waiters_.find(waiter_id);
  return rec ? &rec->payload : nullptr;
}

template <class Payload>
cancel_outcome basic_batcher<Payload>::cancel(uint64_t waiter_id,
                                              coalesce_time now) {
  cancel_outcome out;
  auto* found = waiters_.find(waiter_id);
  if (!found)
    return out;
  auto at = found->at;
  auto chunk_uid = found->chunk_uid;
  group_key gk{found->req.kind, std::move(found->req.key)};
  waiters_.erase(waiter_id);
  ++stats_.cancelled;
  auto git = groups_.find(gk);
  if (git == groups_.end()) { // cannot happen: a held waiter has a group
    out.result = cancel_result::removed;
    return out;
  }
  auto& g = git->second;
  switch (at) {
    case where::queued:
      // The queue entry is skipped lazily (its id finds nothing now).
      --g.queued_live;
      out.result = cancel_result::removed;
      break;
    case where::pending_chunk: {
      for (auto c = g.pending.begin(); c != g.pending.end(); ++c) {
        auto p = std::find_if(
          c->parts.begin(), c->parts.end(),
          [&](const chunk_part& x) { return x.waiter_id == waiter_id; });
        if (p == c->parts.end())
          continue;
        c->count -= p->count;
        c->parts.erase(p);
        --c->live;
        if (c->parts.empty())
          g.pending.erase(c);
        break;
      }
      out.result = cancel_result::removed;
      break;
    }
    case where::in_flight: {
      ++stats_.abandoned;
      auto f = std::find_if(g.flights.begin(), g.flights.end(),
                            [&](const chunk& c) { return c.uid == chunk_uid; });
      if (f != g.flights.end() && --f->live == 0) {
        // Every waiter of the RPC has gone: cancel it. Its answer, if one
        // still comes, finds no group entry and is ignored.
        out.result = cancel_result::rpc_cancelled;
        out.rpc_to_cancel = f->rpc_id;
        ++stats_.rpcs_cancelled;
        rpc_group_.erase(f->rpc_id);
        g.flights.erase(f);
        finish_flight(git, now);
      } else {
        out.result = cancel_result::abandoned_in_flight;
      }
      break;
    }
  }
  if (out.result == cancel_result::removed)
    drop_if_idle(git);
  return out;
}

template <class Payload>
void basic_batcher<Payload>::form_batch(group& g, waiter_kind kind,
                                        coalesce_time now, std::size_t limit) {
  const uint32_t kind_cap = cap(kind);
  auto& later = later_scratch_; // entered after `now`: not due yet
  later.clear();
  std::optional<coalesce_time> later_at;
  chunk cur;
  // take_ready forms a batch only when none is pending: its chunks go
  // straight into g.pending.
  const auto first = g.pending.size();
  // A batch beside RPCs in flight (a limit) is one chunk at most: a share
  // of heavy waiters does not become a multi-chunk batch that would keep
  // the group's free slots idle until all its chunks are back.
  const bool one_chunk = limit != std::numeric_limits<std::size_t>::max();
  std::size_t taken = 0;
  bool full = false;
  while (!g.queue.empty() && taken < limit) {
    auto id = g.queue.front();
    auto* rec = waiters_.find(id);
    if (!rec) {
      g.queue.pop_front();
      continue; // cancelled while queued
    }
    if (rec->req.entered > now) {
      g.queue.pop_front();
      later.push_back(id);
      if (!later_at || rec->req.entered < *later_at)
        later_at = rec->req.entered;
      continue;
    }
    bool overflows
      = !cur.parts.empty() && uint64_t{cur.count} + rec->req.count > kind_cap;
    if (overflows && one_chunk) {
      full = true;
      break; // it stays first in the queue
    }
    g.queue.pop_front();
    if (overflows) {
      g.pending.push_back(std::move(cur));
      cur = chunk{};
    }
    if (cur.parts.empty()) {
      cur.uid = next_chunk_++;
      // The memory of an earlier chunk or plan (recycle), which in a
      // steady state already holds a batch; no reserve beyond it: a chunk's
      // parts are bounded by the values it carries, not by the waiters
      // queued (a batch of large counts is many one-part chunks).
      if (cur.parts.capacity() == 0)
        cur.parts = take_parts();
    }
    rec->chunk_uid = cur.uid;
    cur.parts.push_back(chunk_part{id, rec->req.count});
    cur.count += rec->req.count;
    ++cur.live;
    rec->at = where::pending_chunk;
    --g.queued_live;
    ++taken;
  }
  if (!cur.parts.empty())
    g.pending.push_back(std::move(cur));
  // The waiters not due yet go back where they were: ahead of those a
  // limit left queued, which joined after them. When some of those are
  // due, the queue is due at once.
  g.queue.insert(g.queue.begin(), later.begin(), later.end());
  g.flush_at = taken < limit && !full ? later_at : std::nullopt;
  auto batch = next_batch_++;
  const auto total = g.pending.size() - first;
  for (std::size_t i = 0; i < total; ++i) {
    auto& c = g.pending[first + i];
    c.batch = batch;
    c.index = i;
    c.total = total;
  }
  if (total > 0)
    ++stats_.batches;
}

template <class Payload>
std::vector<rpc_plan> basic_batcher<Payload>::take_ready(coalesce_time now) {
  std::vector<rpc_plan> out;
  take_ready(now, out);
  return out;
}

template <class Payload>
void basic_batcher<Payload>::take_ready(coalesce_time now,
                                        std::vector<rpc_plan>& out) {
  out.clear();
  for (auto& kv : groups_) {
    auto& g = kv.second;
    for (;;) {
      if (!g.pending.empty()) {
        // The next chunk of a multi-chunk batch: after its predecessor.
        auto batch = g.pending.front().batch;
        if (g.flights.size() >= max_in_flight_
            || std::any_of(g.flights.begin(), g.flights.end(),
                           [&](const chunk& c) { return c.batch == batch; }))
          break;
      } else {
        if (g.queued_live == 0)
          break;
        if (g.flights.empty() ? g.flush_at && *g.flush_at > now
                              : !may_pipeline(g))
          break;
        // Beside RPCs in flight, the queue is spread over the free slots
        // (fill_free_slots); an idle group's batch takes all of it.
        auto limit = std::numeric_limits<std::size_t>::max();
        if (fill_free_slots_ && !g.flights.empty()) {
          auto free = max_in_flight_ - g.flights.size();
          limit = (g.queued_live + free - 1) / free;
        }
        form_batch(g, kv.first.kind, now, limit);
        if (g.pending.empty())
          break; // every queued waiter entered after `now`
        if (!g.flights.empty())
          ++stats_.pipelined;
      }
      g.flights.push_back(std::move(g.pending.front()));
      g.pending.pop_front();
      auto& c = g.flights.back();
      c.rpc_id = next_rpc_++;
      for (auto& p : c.parts)
        waiters_.find(p.waiter_id)->at = where::in_flight;
      rpc_group_.emplace(c.rpc_id, kv.first);
      ++stats_.rpcs;
      rpc_plan plan;
      plan.rpc_id = c.rpc_id;
      plan.kind = kv.first.kind;
      plan.key = kv.first.key;
      plan.count = c.count;
      plan.parts = take_parts();
      plan.parts.assign(c.parts.begin(), c.parts.end());
      plan.chunk_index = c.index;
      plan.chunk_total = c.total;
      plan.dispatched_at = now;
      out.push_back(std::move(plan));
    }
  }
}

template <class Payload>
std::size_t basic_batcher<Payload>::in_flight(waiter_kind kind,
                                              const std::string& key) const {
  auto it = groups_.find(
    group_key{kind, kind == waiter_kind::seq ? key : std::string{}});
  return it == groups_.end() ? 0 : it->second.flights.size();
}

template <class Payload>
bool basic_batcher<Payload>::may_pipeline(const group& g) const {
  if (g.flights.size() >= max_in_flight_)
    return false;
  // No chunk of a multi-chunk batch (those are the heavy counts; their
  // batch keeps the group to itself); with fill_free_slots off, also a
  // single waiter each.
  return std::all_of(g.flights.begin(), g.flights.end(), [&](const chunk& c) {
    return c.total == 1 && (fill_free_slots_ || c.parts.size() == 1);
  });
}

template <class Payload>
typename basic_batcher<Payload>::chunk
basic_batcher<Payload>::take_flight(group& g, uint64_t rpc_id) {
  auto f = std::find_if(g.flights.begin(), g.flights.end(),
                        [&](const chunk& c) { return c.rpc_id == rpc_id; });
  if (f == g.flights.end()) // not reached: rpc_group_ names only flights
    return chunk{};
  auto c = std::move(*f);
  g.flights.erase(f);
  return c;
}

template <class Payload>
std::optional<coalesce_time> basic_batcher<Payload>::next_wakeup() const {
  std::optional<coalesce_time> r;
  for (auto& kv : groups_) {
    auto& g = kv.second;
    if (!g.flights.empty() || !g.pending.empty() || g.queued_live == 0)
      continue;
    // Warm queues are due at once; cold ones at their flush time.
    coalesce_time t = g.flush_at ? *g.flush_at : coalesce_time::min();
    if (!r || t < *r)
      r = t;
  }
  return r;
}

template <class Payload>
bool basic_batcher<Payload>::cold_start_at_once(const group_key& gk,
                                                coalesce_time now) const {
  if (flush_interval_.count() <= 0)
    return true; // no window to wait
  if (!adaptive_)
    return false;
  if (auto i = recent_done_.find(gk); i != recent_done_.end()
                                      && now >= i->second
                                      && now - i->second < flush_interval_)
    return true; // the callers of its batch just answered are coming back
  return join_gap_ && *join_gap_ >= flush_interval_;
}

template <class Payload>
void basic_batcher<Payload>::finish_flight(typename group_map::iterator it,
                                           coalesce_time now) {
  auto& g = it->second;
  if (adaptive_) {
    // Swept of what no cold start can use when it doubled since the last
    // sweep: amortised O(1) a completion.
    if (recent_done_.size() >= sweep_done_at_) {
      for (auto i = recent_done_.begin(); i != recent_done_.end();)
        i = now - i->second >= flush_interval_ ? recent_done_.erase(i)
                                               : std::next(i);
      sweep_done_at_ = std::max<std::size_t>(64, 2 * recent_done_.size());
    }
    recent_done_[it->first] = now;
  }
  if (!g.pending.empty())
    return; // the next chunk of the batch goes out at the next take_ready
  if (g.queued_live > 0) {
    // Waiters joined while the batch was in flight: the next batch goes
    // out at once; the flush interval is for cold starts only.
    g.flush_at = now;
    return;
  }
  drop_if_idle(it);
}

template <class Payload>
void basic_batcher<Payload>::drop_if_idle(typename group_map::iterator it) {
  // An idle group is kept, so a group that goes cold and warm again (a
  // lone caller's every call) reuses its queues instead of allocating them
  // anew: the ts group always, a seq key's group while at most
  // kept_idle_groups groups exist (many seq keys: dropped, as before).
  auto& g = it->second;
  if (!idle(g))
    return;
  if (it->first.kind == waiter_kind::seq && groups_.size() > kept_idle_groups)
    groups_.erase(it);
  else
    g.queue.clear(); // only cancelled waiters' ids are left in it
}

template <class Payload>
std::size_t basic_batcher<Payload>::groups() const {
  return static_cast<std::size_t>(
    std::count_if(groups_.begin(), groups_.end(),
                  [](const auto& kv) { return !idle(kv.second); }));
}

template <class Payload>
typename basic_batcher<Payload>::waiter_rec*
basic_batcher<Payload>::live_waiter(const chunk& c, const chunk_part& p) {
  auto* rec = waiters_.find(p.waiter_id);
  if (!rec || rec->chunk_uid != c.uid)
    return nullptr; // gone (cancelled; a generational id is never reused)
  return rec;
}

template <class Payload>
template <class Fill>
void basic_batcher<Payload>::collect_chunk(const chunk& c, waiter_outcome o,
                                           const std::string& detail,
                                           std::vector<delivery_type>& out,
                                           Fill&& fill) {
  out.reserve(out.size() + c.live);
  uint64_t offset = 0;
  for (auto& p : c.parts) {
    // A gone waiter's share is skipped, not handed to anyone else.
    if (live_waiter(c, p)) {
      delivery_type d;
      d.waiter_id = p.waiter_id;
      d.outcome = o;
      if (o == waiter_outcome::served) {
        fill(d, offset, p);
        ++stats_.served;
      } else {
        d.detail = detail;
        ++stats_.failed;
      }
      out.push_back(std::move(d));
    }
    offset += p.count;
  }
}

template <class Payload>
void basic_batcher<Payload>::release(std::vector<delivery_type>& out) noexcept {
  for (auto& d : out) {
    auto* rec = waiters_.find(d.waiter_id);
    d.payload = std::move(rec->payload);
    waiters_.erase(d.waiter_id);
  }
}

template <class Payload>
bool basic_batcher<Payload>::take_answered(uint64_t rpc_id,
                                           typename group_map::iterator& git,
                                           chunk& c) {
  auto rit = rpc_group_.find(rpc_id);
  if (rit == rpc_group_.end()) {
    ++stats_.stale_answers;
    return false;
  }
  git = groups_.find(rit->second);
  rpc_group_.erase(rit);
  c = take_flight(git->second, rpc_id);
  return true;
}

template <class Payload>
template <class Check, class Fill>
std::vector<typename basic_batcher<Payload>::delivery_type>
basic_batcher<Payload>::on_answer(uint64_t rpc_id, coalesce_time now,
                                  waiter_outcome bad, Check&& check,
                                  Fill&& fill) {
  std::vector<delivery_type> out = std::move(spare_deliveries_);
  out.clear();
  typename group_map::iterator git;
  chunk c;
  if (!take_answered(rpc_id, git, c))
    return out;
  auto why = check(c.count);
  if (!why.empty()) {
    ++stats_.protocol_violations;
    collect_chunk(c, bad, why, out, [](delivery_type&, uint64_t, auto&) {});
  } else {
    collect_chunk(c, waiter_outcome::served, {}, out, fill);
  }
  release(out);
  finish_flight(git, now);
  keep_parts(std::move(c.parts));
  return out;
}

template <class Payload>
std::vector<typename basic_batcher<Payload>::delivery_type>
basic_batcher<Payload>::on_ts_response(uint64_t rpc_id, const ts_response& r,
                                       coalesce_time now) {
  return on_answer(
    rpc_id, now, waiter_outcome::protocol_violation,
    [&](uint32_t requested) { return check_ts_response(r, requested); },
    [&](delivery_type& d, uint64_t offset, const chunk_part& p) {
      // check_ts_response bounds logical_start + count by 2^18: the
      // offsets fit in 32 bits.
      d.ts = ts_range{r.physical_ms,
                      r.logical_start + static_cast<uint32_t>(offset), p.count};
    });
}

template <class Payload>
std::vector<typename basic_batcher<Payload>::delivery_type>
basic_batcher<Payload>::on_seq_response(uint64_t rpc_id, const seq_response& r,
                                        coalesce_time now) {
  return on_answer(
    rpc_id, now, waiter_outcome::uncertain,
    [&](uint32_t requested) {
      // A 2xx means the server advanced something; the block's shape is
      // unusable, so the advance is uncertain (tsoracle seq_attempt.rs).
      auto why = check_seq_response(r, requested);
      return why.empty() ? why : "uncertain outcome: bad seq response: " + why;
    },
    [&](delivery_type& d, uint64_t offset, const chunk_part& p) {
      d.seq = seq_block{r.start + offset, p.count};
    });
}

template <class Payload>
std::vector<typename basic_batcher<Payload>::delivery_type>
basic_batcher<Payload>::on_rpc_failed(uint64_t rpc_id, rpc_failure f,
                                      const std::string& detail,
                                      coalesce_time now) {
  std::vector<delivery_type> out;
  typename group_map::iterator git;
  chunk c;
  if (!take_answered(rpc_id, git, c))
    return out;
  auto& g = git->second;
  auto noop = [](delivery_type&, uint64_t, auto&) {
  };
  collect_chunk(c,
                f == rpc_failure::uncertain ? waiter_outcome::uncertain
                                            : waiter_outcome::rpc_failed,
                detail, out, noop);
  // Fail fast: the rest of the batch would meet the same cluster within
  // the same deadline. Nothing was sent for it.
  std::size_t rest = 0;
  while (rest < g.pending.size() && g.pending[rest].batch == c.batch)
    ++rest;
  if (rest > 0) {
    auto why = "not attempted: an earlier chunk failed: " + detail;
    for (std::size_t i = 0; i < rest; ++i)
      collect_chunk(g.pending[i], waiter_outcome::not_attempted, why, out,
                    noop);
  }
  release(out);
  g.pending.erase(g.pending.begin(),
                  g.pending.begin() + static_cast<std::ptrdiff_t>(rest));
  finish_flight(git, now);
  return out;
}

} // namespace coalesce
} // namespace outbound
