#include "actors/coalesce/batcher.hpp"

#include "core/time.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>

namespace outbound {
inline namespace coalesce {

coalesce_duration coalesce_seconds(double s) {
  // Capped at 1e9 s, far beyond any sane setting, instead of overflowing
  // int64 once added to a time point.
  return core::from_seconds(s, core::from_seconds(1e9));
}

std::vector<uint64_t> ts_range::expand() const {
  std::vector<uint64_t> r;
  r.reserve(count);
  for (uint32_t i = 0; i < count; ++i)
    r.push_back(ts_pack(physical_ms, logical_start + i));
  return r;
}

const char* to_string(waiter_kind k) {
  return k == waiter_kind::ts ? "ts" : "seq";
}

const char* to_string(join_decision d) {
  switch (d) {
    case join_decision::queued: return "queued";
    case join_decision::rejected_backpressure: return "rejected_backpressure";
    case join_decision::rejected_invalid_count: return "rejected_invalid_count";
    case join_decision::rejected_invalid_key: return "rejected_invalid_key";
    case join_decision::rejected_duplicate_id: return "rejected_duplicate_id";
  }
  return "?";
}

const char* to_string(waiter_outcome o) {
  switch (o) {
    case waiter_outcome::served: return "served";
    case waiter_outcome::protocol_violation: return "protocol_violation";
    case waiter_outcome::rpc_failed: return "rpc_failed";
    case waiter_outcome::uncertain: return "uncertain";
    case waiter_outcome::not_attempted: return "not_attempted";
  }
  return "?";
}

const char* to_string(cancel_result r) {
  switch (r) {
    case cancel_result::not_found: return "not_found";
    case cancel_result::removed: return "removed";
    case cancel_result::abandoned_in_flight: return "abandoned_in_flight";
    case cancel_result::rpc_cancelled: return "rpc_cancelled";
  }
  return "?";
}

std::string check_ts_response(const ts_response& r, uint32_t requested) {
  if (!r.unreadable.empty())
    return "protocol violation: " + r.unreadable;
  if (r.count != requested)
    return "protocol violation: count " + std::to_string(r.count)
           + " != requested " + std::to_string(requested);
  if (r.count < 1 || r.count > ts_max_per_rpc)
    return "protocol violation: count " + std::to_string(r.count)
           + " outside 1..262144";
  if (r.physical_ms > ts_physical_max)
    return "protocol violation: physical_ms over 46 bits";
  // 64-bit sum: logical_start and count are 32-bit, no overflow here.
  if (uint64_t{r.logical_start} + r.count - 1 > ts_logical_max)
    return "protocol violation: logical range " + std::to_string(r.logical_start)
           + "+" + std::to_string(r.count) + " overflows 18 bits";
  return {};
}

std::string check_seq_response(const seq_response& r, uint32_t requested) {
  if (!r.unreadable.empty())
    return r.unreadable;
  if (r.count != requested)
    return "count " + std::to_string(r.count) + " != requested "
           + std::to_string(requested);
  if (r.count < 1)
    return "count 0";
  if (r.start > std::numeric_limits<uint64_t>::max() - (r.count - 1))
    return "block start + count overflows 64 bits";
  if (r.epoch.empty())
    return "no epoch";
  return {};
}

bool valid_seq_key(const std::string& key, std::size_t max_bytes) {
  if (key.empty() || key.size() > max_bytes)
    return false;
  const auto* p = reinterpret_cast<const unsigned char*>(key.data());
  std::size_t n = key.size();
  std::size_t i = 0;
  while (i < n) {
    unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > n)
      return false;
    for (std::size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80)
        return false;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800)
        || (len == 4 && cp < 0x10000) || cp > 0x10FFFF
        || (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += len;
  }
  return true;
}

batcher::batcher(const coalesce_config& cfg) {
  cfg.validate();
  flush_interval_ = coalesce_seconds(cfg.batch_flush_interval);
  adaptive_ = cfg.adaptive_cold_start;
  max_waiters_ = cfg.max_waiters;
  max_in_flight_ = cfg.max_rpcs_in_flight;
  max_ts_ = cfg.max_ts_per_rpc;
  max_seq_ = cfg.max_seq_per_rpc;
  max_key_bytes_ = cfg.max_seq_key_bytes;
}

std::size_t batcher::queued() const {
  std::size_t n = 0;
  for (auto& kv : groups_)
    n += kv.second.queued_live;
  return n;
}

join_decision batcher::join(const waiter_request& w, coalesce_time now) {
  // Validity first: an invalid request is refused whatever the load, and
  // before it can touch any group (its siblings are unaffected).
  if (w.count < 1 || w.count > cap(w.kind)) {
    ++stats_.rejected_invalid;
    return join_decision::rejected_invalid_count;
  }
  if (w.kind == waiter_kind::seq && !valid_seq_key(w.key, max_key_bytes_)) {
    ++stats_.rejected_invalid;
    return join_decision::rejected_invalid_key;
  }
  if (waiters_.count(w.id) != 0)
    return join_decision::rejected_duplicate_id;
  if (waiters_.size() >= max_waiters_) {
    ++stats_.rejected_backpressure;
    return join_decision::rejected_backpressure;
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
  auto serial = next_serial_++;
  waiter_rec rec;
  rec.req = w;
  if (w.kind == waiter_kind::ts)
    rec.req.key.clear();
  rec.serial = serial;
  rec.at = where::queued;
  waiters_.emplace(w.id, std::move(rec));
  g.queue.push_back(queued_ref{w.id, serial});
  ++g.queued_live;
  ++stats_.joined;
  return join_decision::queued;
}

cancel_outcome batcher::cancel(uint64_t waiter_id, coalesce_time now) {
  cancel_outcome out;
  auto wit = waiters_.find(waiter_id);
  if (wit == waiters_.end())
    return out;
  auto rec = std::move(wit->second);
  waiters_.erase(wit);
  ++stats_.cancelled;
  group_key gk{rec.req.kind, rec.req.key};
  auto git = groups_.find(gk);
  if (git == groups_.end()) { // cannot happen: a held waiter has a group
    out.result = cancel_result::removed;
    return out;
  }
  auto& g = git->second;
  switch (rec.at) {
    case where::queued:
      // The queue entry is skipped lazily (its serial no longer matches).
      --g.queued_live;
      out.result = cancel_result::removed;
      break;
    case where::pending_chunk: {
      for (auto c = g.pending.begin(); c != g.pending.end(); ++c) {
        auto p = std::find_if(c->parts.begin(), c->parts.end(),
                              [&](const chunk_part& x) {
                                return x.waiter_id == waiter_id;
                              });
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
      auto f
        = std::find_if(g.flights.begin(), g.flights.end(),
                       [&](const chunk& c) { return c.uid == rec.chunk_uid; });
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
  if (out.result == cancel_result::removed && idle(g))
    groups_.erase(git);
  return out;
}

void batcher::form_batch(group& g, waiter_kind kind, coalesce_time now) {
  const uint32_t kind_cap = cap(kind);
  std::deque<queued_ref> later; // entered after `now`: not due yet
  std::optional<coalesce_time> later_at;
  chunk cur;
  std::vector<chunk> chunks;
  while (!g.queue.empty()) {
    auto ref = g.queue.front();
    g.queue.pop_front();
    auto it = waiters_.find(ref.id);
    if (it == waiters_.end() || it->second.serial != ref.serial)
      continue; // cancelled while queued
    auto& rec = it->second;
    if (rec.req.entered > now) {
      later.push_back(ref);
      if (!later_at || rec.req.entered < *later_at)
        later_at = rec.req.entered;
      continue;
    }
    if (!cur.parts.empty()
        && uint64_t{cur.count} + rec.req.count > kind_cap) {
      chunks.push_back(std::move(cur));
      cur = chunk{};
    }
    if (cur.parts.empty())
      cur.uid = next_chunk_++;
    rec.chunk_uid = cur.uid;
    cur.parts.push_back(chunk_part{ref.id, rec.req.count});
    cur.count += rec.req.count;
    ++cur.live;
    rec.at = where::pending_chunk;
    --g.queued_live;
  }
  if (!cur.parts.empty())
    chunks.push_back(std::move(cur));
  g.queue = std::move(later);
  g.flush_at = later_at;
  auto batch = next_batch_++;
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    chunks[i].batch = batch;
    chunks[i].index = i;
    chunks[i].total = chunks.size();
    g.pending.push_back(std::move(chunks[i]));
  }
  if (!chunks.empty())
    ++stats_.batches;
}

std::vector<rpc_plan> batcher::take_ready(coalesce_time now) {
  std::vector<rpc_plan> out;
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
        form_batch(g, kv.first.kind, now);
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
        waiters_.at(p.waiter_id).at = where::in_flight;
      rpc_group_.emplace(c.rpc_id, kv.first);
      ++stats_.rpcs;
      rpc_plan plan;
      plan.rpc_id = c.rpc_id;
      plan.kind = kv.first.kind;
      plan.key = kv.first.key;
      plan.count = c.count;
      plan.parts = c.parts;
      plan.chunk_index = c.index;
      plan.chunk_total = c.total;
      plan.dispatched_at = now;
      out.push_back(std::move(plan));
    }
  }
  return out;
}

std::size_t batcher::in_flight(waiter_kind kind, const std::string& key) const {
  auto it = groups_.find(
    group_key{kind, kind == waiter_kind::seq ? key : std::string{}});
  return it == groups_.end() ? 0 : it->second.flights.size();
}

bool batcher::may_pipeline(const group& g) const {
  if (g.flights.size() >= max_in_flight_)
    return false;
  // A single waiter each, and no chunk of a multi-chunk batch (those are
  // the heavy counts; their batch keeps the group to itself).
  return std::all_of(g.flights.begin(), g.flights.end(), [](const chunk& c) {
    return c.parts.size() == 1 && c.total == 1;
  });
}

batcher::chunk batcher::take_flight(group& g, uint64_t rpc_id) {
  auto f = std::find_if(g.flights.begin(), g.flights.end(),
                        [&](const chunk& c) { return c.rpc_id == rpc_id; });
  if (f == g.flights.end()) // not reached: rpc_group_ names only flights
    return chunk{};
  auto c = std::move(*f);
  g.flights.erase(f);
  return c;
}

std::optional<coalesce_time> batcher::next_wakeup() const {
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

bool batcher::cold_start_at_once(const group_key& gk, coalesce_time now) const {
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

void batcher::finish_flight(group_map::iterator it, coalesce_time now) {
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
  if (g.flights.empty())
    groups_.erase(it);
}

std::unordered_map<uint64_t, batcher::waiter_rec>::iterator
batcher::live_waiter(const chunk& c, const chunk_part& p) {
  auto it = waiters_.find(p.waiter_id);
  if (it == waiters_.end() || it->second.chunk_uid != c.uid)
    return waiters_.end(); // gone (its id may have been reused since)
  return it;
}

std::vector<delivery> batcher::fail_chunk(const chunk& c, waiter_outcome o,
                                          const std::string& detail) {
  std::vector<delivery> out;
  out.reserve(c.live);
  for (auto& p : c.parts) {
    auto it = live_waiter(c, p);
    if (it == waiters_.end())
      continue; // gone
    waiters_.erase(it);
    delivery d;
    d.waiter_id = p.waiter_id;
    d.outcome = o;
    d.detail = detail;
    out.push_back(std::move(d));
    ++stats_.failed;
  }
  return out;
}

std::vector<delivery> batcher::on_ts_response(uint64_t rpc_id,
                                              const ts_response& r,
                                              coalesce_time now) {
  std::vector<delivery> out;
  auto rit = rpc_group_.find(rpc_id);
  if (rit == rpc_group_.end()) {
    ++stats_.stale_answers;
    return out;
  }
  auto git = groups_.find(rit->second);
  rpc_group_.erase(rit);
  auto c = take_flight(git->second, rpc_id);
  auto why = check_ts_response(r, c.count);
  if (!why.empty()) {
    ++stats_.protocol_violations;
    out = fail_chunk(c, waiter_outcome::protocol_violation, why);
  } else {
    out.reserve(c.live);
    uint32_t offset = 0;
    for (auto& p : c.parts) {
      auto it = live_waiter(c, p);
      if (it != waiters_.end()) {
        waiters_.erase(it);
        delivery d;
        d.waiter_id = p.waiter_id;
        d.outcome = waiter_outcome::served;
        d.ts = ts_range{r.physical_ms, r.logical_start + offset, p.count};
        out.push_back(std::move(d));
        ++stats_.served;
      }
      // A gone waiter's share is skipped, not handed to anyone else.
      offset += p.count;
    }
  }
  finish_flight(git, now);
  return out;
}

std::vector<delivery> batcher::on_seq_response(uint64_t rpc_id,
                                               const seq_response& r,
                                               coalesce_time now) {
  std::vector<delivery> out;
  auto rit = rpc_group_.find(rpc_id);
  if (rit == rpc_group_.end()) {
    ++stats_.stale_answers;
    return out;
  }
  auto git = groups_.find(rit->second);
  rpc_group_.erase(rit);
  auto c = take_flight(git->second, rpc_id);
  auto why = check_seq_response(r, c.count);
  if (!why.empty()) {
    // A 2xx means the server advanced something; the block's shape is
    // unusable, so the advance is uncertain (tsoracle seq_attempt.rs).
    ++stats_.protocol_violations;
    out = fail_chunk(c, waiter_outcome::uncertain,
                     "uncertain outcome: bad seq response: " + why);
  } else {
    out.reserve(c.live);
    uint64_t offset = 0;
    for (auto& p : c.parts) {
      auto it = live_waiter(c, p);
      if (it != waiters_.end()) {
        waiters_.erase(it);
        delivery d;
        d.waiter_id = p.waiter_id;
        d.outcome = waiter_outcome::served;
        d.seq = seq_block{r.start + offset, p.count};
        out.push_back(std::move(d));
        ++stats_.served;
      }
      offset += p.count;
    }
  }
  finish_flight(git, now);
  return out;
}

std::vector<delivery> batcher::on_rpc_failed(uint64_t rpc_id, rpc_failure f,
                                             const std::string& detail,
                                             coalesce_time now) {
  std::vector<delivery> out;
  auto rit = rpc_group_.find(rpc_id);
  if (rit == rpc_group_.end()) {
    ++stats_.stale_answers;
    return out;
  }
  auto git = groups_.find(rit->second);
  rpc_group_.erase(rit);
  auto& g = git->second;
  auto c = take_flight(g, rpc_id);
  out = fail_chunk(c,
                   f == rpc_failure::uncertain ? waiter_outcome::uncertain
                                               : waiter_outcome::rpc_failed,
                   detail);
  // Fail fast: the rest of the batch would meet the same cluster within
  // the same deadline. Nothing was sent for it.
  while (!g.pending.empty() && g.pending.front().batch == c.batch) {
    auto more = fail_chunk(g.pending.front(), waiter_outcome::not_attempted,
                           "not attempted: an earlier chunk failed: "
                             + detail);
    out.insert(out.end(), more.begin(), more.end());
    g.pending.pop_front();
  }
  finish_flight(git, now);
  return out;
}

} // namespace coalesce
} // namespace outbound
