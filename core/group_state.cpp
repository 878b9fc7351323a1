#include "core/group_state.hpp"

#include "core/hrw.hpp"
#include "core/validate.hpp"

#include <algorithm>
#include <sstream>
#include <utility>

namespace outbound {
inline namespace core {

namespace {

constexpr group_time never = group_time::max();

config_error field_error(const char* field, const std::string& why) {
  return config_error(std::string{"group."} + field, why);
}

} // namespace

const char* to_string(stop_reason r) {
  switch (r) {
    case stop_reason::rebalance: return "rebalance";
    case stop_reason::leave: return "leave";
    case stop_reason::fenced: return "fenced";
    case stop_reason::lease_lost: return "lease_lost";
  }
  return "?";
}

const char* to_string(group_phase p) {
  switch (p) {
    case group_phase::idle: return "idle";
    case group_phase::joining: return "joining";
    case group_phase::settling: return "settling";
    case group_phase::active: return "active";
    case group_phase::leaving: return "leaving";
    case group_phase::left: return "left";
  }
  return "?";
}

std::optional<config_error> group_config_error(const group_state_config& c) {
  // Every duration is added to time points (int64 nanoseconds): past ~9e9 s
  // that overflows and "never" becomes "now". A day is far beyond any
  // sensible setting; cap them all well below the overflow.
  constexpr double max_seconds = 86400.0;
  const std::pair<double, const char*> durations[] = {
    {c.lease_ttl, "lease_ttl"},
    {c.renew_interval, "renew_interval"},
    {c.fence_margin, "fence_margin"},
    {c.poll_interval, "poll_interval"},
    {c.reconcile_interval, "reconcile_interval"},
    {c.checkpoint_interval, "checkpoint_interval"},
    {c.initial_settle, "initial_settle"},
    {c.rebalance_delay, "rebalance_delay"},
  };
  for (const auto& d : durations)
    if (d.first > max_seconds)
      return field_error(d.second, "must be <= 86400 seconds");
  try {
    // The house checks throw; translate the first into a value.
    validate_seconds(c.lease_ttl, "group.lease_ttl", false);
    if (!(c.lease_ttl >= 2.0))
      return field_error("lease_ttl", "must be >= 2 seconds (etcd's minimum "
                                      "TTL)");
    validate_seconds(c.renew_interval, "group.renew_interval", false);
    if (!(c.renew_interval <= c.lease_ttl / 3.0))
      return field_error("renew_interval",
                         "must be <= lease_ttl / 3, so that two renewals can "
                         "fail before the fence");
    validate_seconds(c.fence_margin, "group.fence_margin", false);
    if (!(c.fence_margin < c.lease_ttl - c.renew_interval))
      return field_error("fence_margin",
                         "must be < lease_ttl - renew_interval, or the "
                         "deadline passes between two renewals");
    validate_seconds(c.poll_interval, "group.poll_interval", false);
    validate_seconds(c.reconcile_interval, "group.reconcile_interval", false);
    validate_seconds(c.checkpoint_interval, "group.checkpoint_interval", false);
    if (c.batch < 1 || c.batch > 128)
      return field_error("batch", "must be between 1 and 128 (etcd's "
                                  "--max-txn-ops)");
    validate_seconds(c.initial_settle, "group.initial_settle", true);
    if (c.min_members < 1)
      return field_error("min_members", "must be >= 1");
    validate_seconds(c.rebalance_delay, "group.rebalance_delay", true);
    if (c.max_starts_per_second < 1)
      return field_error("max_starts_per_second", "must be >= 1");
    if (c.max_feeds < 1)
      return field_error("max_feeds", "must be >= 1");
    if (c.max_inflight_batches < 1 || c.max_inflight_batches > 1024)
      return field_error("max_inflight_batches", "must be between 1 and 1024");
  } catch (const config_error& e) {
    return e;
  }
  return std::nullopt;
}

void group_state_config::validate() const {
  if (auto e = group_config_error(*this))
    throw *e;
}

group_state::group_state(group_state_config cfg, std::string member,
                         std::vector<std::string> feeds)
  : cfg_(cfg), member_(std::move(member)) {
  cfg_.validate();
  if (member_.empty())
    throw config_error("group.member_name", "must not be empty");
  ttl_ = from_seconds(cfg_.lease_ttl);
  renew_ = from_seconds(cfg_.renew_interval);
  margin_ = from_seconds(cfg_.fence_margin);
  poll_ = from_seconds(cfg_.poll_interval);
  reconcile_ = from_seconds(cfg_.reconcile_interval);
  held_retry_ = std::min(reconcile_, 2 * from_seconds(cfg_.poll_interval));
  checkpoint_ = from_seconds(cfg_.checkpoint_interval);
  settle_ = from_seconds(cfg_.initial_settle);
  rebalance_ = from_seconds(cfg_.rebalance_delay);
  for (auto& f : feeds)
    feeds_.emplace(std::move(f), feed_entry{});
}

// -- inputs -------------------------------------------------------------------

group_actions group_state::start(group_time now) {
  group_actions out;
  if (phase_ != group_phase::idle)
    return out;
  phase_ = group_phase::joining;
  join_retry_at_ = now;
  step(now, out);
  return out;
}

group_actions group_state::on_joined(uint64_t request, double ttl_seconds,
                                     group_time now) {
  group_actions out;
  if (request == 0 || request != join_request_)
    return out;
  join_request_ = 0;
  if (phase_ == group_phase::left) {
    // Left while the grant was in flight: give the lease back.
    out.emplace_back(revoke_lease{next_id()});
    return out;
  }
  if (phase_ != group_phase::joining)
    return out;
  if (!(ttl_seconds > 0)) {
    join_retry_at_ = now + renew_;
    step(now, out);
    return out;
  }
  phase_ = group_phase::settling;
  // The grant counts as the first renewal: its TTL ran from no earlier
  // than the moment it was sent.
  deadline_ = join_sent_ + std::min(from_seconds(ttl_seconds), ttl_) - margin_;
  holding_ = false;
  next_renew_ = join_sent_ + renew_;
  next_poll_ = now;
  have_view_ = false;
  view_.clear();
  first_seen_.clear();
  step(now, out);
  return out;
}

group_actions group_state::on_join_failed(uint64_t request, group_time now) {
  group_actions out;
  if (request == 0 || request != join_request_)
    return out;
  join_request_ = 0;
  ++counters_.join_errors;
  if (phase_ == group_phase::joining)
    join_retry_at_ = now + renew_;
  step(now, out);
  return out;
}

group_actions group_state::on_members(uint64_t request,
                                      const std::vector<listed_member>& members,
                                      group_time now) {
  group_actions out;
  if (request <= last_view_request_
      || (phase_ != group_phase::settling && phase_ != group_phase::active)) {
    step(now, out);
    return out;
  }
  std::vector<std::string> names;
  names.reserve(members.size());
  for (const auto& m : members)
    names.push_back(m.name);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  if (!std::binary_search(names.begin(), names.end(), member_)) {
    // G2: a view without this member decides nothing.
    step(now, out);
    return out;
  }
  last_view_request_ = request;
  first_seen_.clear();
  for (const auto& m : members) {
    auto i = first_seen_.find(m.name);
    if (i == first_seen_.end() || m.first_seen < i->second)
      first_seen_[m.name] = m.first_seen;
  }
  if (!have_view_ || names != view_) {
    view_ = std::move(names);
    have_view_ = true;
    view_changed_ = now;
    claim_wanted_ = true;
    refresh_desired();
  }
  step(now, out);
  return out;
}

group_actions group_state::on_claimed(uint64_t request,
                                      const std::vector<claim_reply>& replies,
                                      group_time now) {
  group_actions out;
  auto i = claims_.find(request);
  if (i == claims_.end()) {
    step(now, out);
    return out;
  }
  auto asked = std::move(i->second);
  claims_.erase(i);
  std::map<std::string, const claim_reply*> by_feed;
  for (const auto& r : replies)
    by_feed[r.feed] = &r;
  for (const auto& f : asked) {
    auto& e = feeds_[f];
    if (e.own != ownership::claiming || e.claim_request != request)
      continue;
    e.claim_request = 0;
    auto r = by_feed.find(f);
    if (r == by_feed.end() || r->second->outcome == claim_outcome::error) {
      // G11: the claim may have been applied; ask again, desired or not.
      ++counters_.claim_errors;
      e.own = ownership::none;
      e.uncertain = true;
      // Back off: a store that fails claims is usually overloaded, and
      // asking again at the next trigger would keep it so.
      ++e.claim_failures;
      auto wait = held_retry_;
      for (uint32_t k = 1; k < e.claim_failures && wait < reconcile_; ++k)
        wait *= 2;
      e.claim_retry_at = now + std::min(wait, reconcile_);
      claim_retry_at_ = std::min(claim_retry_at_, e.claim_retry_at);
      continue;
    }
    e.uncertain = false;
    e.claim_failures = 0;
    e.claim_retry_at = group_time{};
    if (r->second->outcome == claim_outcome::held) {
      ++counters_.claims_held;
      e.own = ownership::none;
      // A desired feed another member still holds is about to be
      // released (a rebalance after its delay, a leave, a lease that
      // expires): ask again soon rather than at the next reconcile.
      if (e.desired)
        held_retry_at_ = std::min(held_retry_at_, now + held_retry_);
      continue;
    }
    ++counters_.claims_won;
    e.own = ownership::held;
    e.token = r->second->token;
    e.committed = r->second->cursor;
    e.progress.reset();
    e.commit_request = 0;
    e.spawn_pending = true;
    spawn_candidates_.insert(f);
    if (!e.desired && !e.winner.empty())
      rebalance_candidates_[e.winner].insert(f);
    if (phase_ == group_phase::leaving)
      begin_release(f, e, stop_reason::leave, out);
  }
  step(now, out);
  return out;
}

group_actions group_state::on_claim_failed(uint64_t request, group_time now) {
  return on_claimed(request, {}, now);
}

group_actions group_state::on_handoff_hint(const std::string& feed,
                                           group_time now) {
  group_actions out;
  auto i = feeds_.find(feed);
  if (i != feeds_.end() && i->second.desired)
    claim_wanted_ = true;
  step(now, out);
  return out;
}

group_actions group_state::on_progress(const std::string& feed, uint64_t token,
                                       group_position cursor,
                                       group_time now) {
  group_actions out;
  auto i = feeds_.find(feed);
  if (i != feeds_.end()) {
    auto& e = i->second;
    if ((e.own == ownership::held || e.own == ownership::releasing)
        && e.token == token && (!e.progress || cursor > *e.progress))
      e.progress = std::move(cursor);
  }
  step(now, out);
  return out;
}

group_actions group_state::on_committed(
  uint64_t request, const std::vector<commit_reply>& replies, group_time now) {
  group_actions out;
  auto i = commits_.find(request);
  if (i == commits_.end()) {
    step(now, out);
    return out;
  }
  auto asked = std::move(i->second);
  commits_.erase(i);
  std::map<std::string, commit_outcome> by_feed;
  for (const auto& r : replies)
    by_feed[r.feed] = r.outcome;
  for (const auto& f : asked) {
    auto& e = feeds_[f];
    if (e.commit_request != request)
      continue;
    e.commit_request = 0;
    auto r = by_feed.find(f);
    auto outcome = r == by_feed.end() ? commit_outcome::error : r->second;
    switch (outcome) {
      case commit_outcome::ok:
        ++counters_.commits_ok;
        if (!e.committed || e.commit_cursor > *e.committed)
          e.committed = e.commit_cursor;
        break;
      case commit_outcome::fenced:
        // G5: someone else owns it (or our lease is gone): stop now.
        ++counters_.commits_fenced;
        if (e.own == ownership::held)
          drop_ownership(f, e, stop_reason::fenced, out);
        break;
      case commit_outcome::error: ++counters_.commit_errors; break;
    }
  }
  step(now, out);
  return out;
}

group_actions group_state::on_commit_failed(uint64_t request, group_time now) {
  return on_committed(request, {}, now);
}

group_actions group_state::on_released(uint64_t request,
                                       const std::vector<commit_reply>& replies,
                                       group_time now) {
  group_actions out;
  auto i = releases_.find(request);
  if (i == releases_.end()) {
    step(now, out);
    return out;
  }
  auto asked = std::move(i->second);
  releases_.erase(i);
  std::map<std::string, commit_outcome> by_feed;
  for (const auto& r : replies)
    by_feed[r.feed] = r.outcome;
  for (const auto& f : asked) {
    auto& e = feeds_[f];
    if (e.own != ownership::releasing || e.release_request != request)
      continue;
    e.release_request = 0;
    auto r = by_feed.find(f);
    auto outcome = r == by_feed.end() ? commit_outcome::error : r->second;
    if (outcome == commit_outcome::error) {
      // Retried after release_retry_ (retry_releases).
      if (release_retry_ == never)
        release_retry_ = now + checkpoint_;
      continue;
    }
    // ok, or fenced (the key is already gone or someone else's): either
    // way it is not ours any more.
    e.own = ownership::none;
    e.token = 0;
    e.progress.reset();
    e.committed.reset();
    e.release_ready = false;
  }
  step(now, out);
  return out;
}

group_actions group_state::on_release_failed(uint64_t request, group_time now) {
  return on_released(request, {}, now);
}

group_actions group_state::on_keepalive(uint64_t request,
                                        keepalive_outcome outcome,
                                        double ttl_seconds, group_time now) {
  group_actions out;
  auto i = renew_sent_.find(request);
  if (i == renew_sent_.end()) {
    step(now, out);
    return out;
  }
  auto sent = i->second;
  renew_sent_.erase(i);
  if (outcome == keepalive_outcome::ok && !(ttl_seconds > 0))
    outcome = keepalive_outcome::lost;
  switch (outcome) {
    case keepalive_outcome::ok:
      ++counters_.renewals_ok;
      extend_deadline(sent, ttl_seconds, now, out);
      break;
    case keepalive_outcome::lost:
      ++counters_.renewals_lost;
      lose_lease(now, out);
      break;
    case keepalive_outcome::error: ++counters_.renewals_error; break;
  }
  step(now, out);
  return out;
}

group_actions group_state::on_watcher_stopped(const std::string& feed,
                                              uint64_t token,
                                              std::optional<group_position> final,
                                              group_time now) {
  group_actions out;
  auto i = feeds_.find(feed);
  if (i != feeds_.end() && i->second.w != watcher::none
      && i->second.watcher_token == token) {
    auto& e = i->second;
    e.w = watcher::none;
    e.watcher_token = 0;
    if (e.token == token
        && (e.own == ownership::held || e.own == ownership::releasing)) {
      if (final && (!e.progress || *final > *e.progress))
        e.progress = final;
      if (e.own == ownership::releasing) {
        e.release_ready = true;
        add_release_candidate(feed, e);
      } else if (phase_ == group_phase::leaving) {
        // Stopped on its own while waiting for its turn (G9): nothing is
        // delivered here any more, so it goes now (no spawn while leaving).
        handoff_due_.erase(feed);
        begin_release(feed, e, stop_reason::leave, out);
      } else {
        e.spawn_pending = true; // stopped on its own: run it again
        spawn_candidates_.insert(feed);
      }
    } else if (e.own == ownership::releasing && e.release_request == 0) {
      // An older tenure's watcher (fenced or lost, then the feed was won
      // again): the current tenure's release waited only for it to be
      // gone (begin_release). Its position is not this tenure's.
      e.release_ready = true;
      add_release_candidate(feed, e);
    }
  }
  step(now, out);
  return out;
}

group_actions group_state::leave(group_time now) {
  group_actions out;
  switch (phase_) {
    case group_phase::idle:
    case group_phase::joining:
      // No lease yet (a grant in flight is revoked when it arrives).
      phase_ = group_phase::left;
      return out;
    case group_phase::leaving:
    case group_phase::left: return out;
    case group_phase::settling:
    case group_phase::active: break;
  }
  phase_ = group_phase::leaving;
  // G9: the winners among the others, as they will see it once this
  // member is withdrawn.
  rebalance_candidates_.clear();
  handoff_due_.clear();
  std::vector<std::string> others;
  for (const auto& n : view_)
    if (n != member_)
      others.push_back(n);
  std::size_t held = 0;
  for (auto& kv : feeds_) {
    auto& e = kv.second;
    auto w = hrw_winner(kv.first, others);
    e.winner = w == hrw_none ? std::string{} : others[w];
    e.desired = false;
    if (e.own != ownership::held)
      continue;
    ++held;
    if (e.w == watcher::running)
      handoff_due_.insert(kv.first); // delivered here until its turn
    else
      begin_release(kv.first, e, stop_reason::leave, out); // not delivered
  }
  leave_by_
    = now + ttl_ + from_seconds(static_cast<double>(held) / starts_rate());
  // A claim whose outcome is unknown may hold an owner key with this
  // lease (G11): ask once more, back-off waived, so that a win is released
  // now (on_claimed) instead of the key staying unserved until the revoke.
  for (auto& kv : feeds_)
    if (kv.second.uncertain)
      kv.second.claim_retry_at = group_time{};
  issue_claims(now, true, out);
  if (others.empty()) {
    release_all_due(out); // nobody to pace for
  } else {
    withdraw_request_ = next_id();
    out.emplace_back(withdraw_member{withdraw_request_});
  }
  step(now, out);
  return out;
}

group_actions group_state::on_withdrawn(uint64_t request, group_time now) {
  group_actions out;
  if (request != 0 && request == withdraw_request_)
    withdraw_request_ = 0;
  step(now, out);
  return out;
}

group_actions group_state::on_withdraw_failed(uint64_t request,
                                              group_time now) {
  group_actions out;
  if (request != 0 && request == withdraw_request_) {
    withdraw_request_ = 0;
    // Still listed: the others do not want these feeds before the lease
    // goes, so pacing would only keep them here longer.
    if (phase_ == group_phase::leaving)
      release_all_due(out);
  }
  step(now, out);
  return out;
}

group_actions group_state::tick(group_time now) {
  group_actions out;
  step(now, out);
  return out;
}

// -- the timers -----------------------------------------------------------

group_time group_state::next_wakeup() const {
  group_time t = never;
  auto at = [&t](group_time x) {
    t = std::min(t, x);
  };
  switch (phase_) {
    case group_phase::idle:
    case group_phase::left: return never;
    case group_phase::joining:
      if (join_request_ == 0)
        at(join_retry_at_);
      return t;
    default: break;
  }
  at(next_renew_);
  if (!holding_)
    at(deadline_);
  else if (phase_ != group_phase::leaving)
    at(hold_since_ + ttl_);
  if (phase_ == group_phase::settling) {
    at(next_poll_);
    // Too few members listed: only a poll can change that (no wake-up
    // for a settle time that already passed).
    if (have_view_ && view_.size() >= cfg_.min_members)
      at(view_changed_ + settle_);
    return t;
  }
  if (phase_ == group_phase::active) {
    at(next_poll_);
    at(next_reconcile_);
    at(held_retry_at_);
    at(claim_retry_at_);
    at(next_checkpoint_);
    for (const auto& [winner, fs] : rebalance_candidates_) {
      auto s = first_seen_.find(winner);
      if (s == first_seen_.end())
        continue;
      // Due when one of them still qualifies (entries may be stale).
      for (const auto& f : fs) {
        const auto& e = feeds_.at(f);
        if (e.own == ownership::held && !e.desired && e.winner == winner) {
          at(s->second + rebalance_);
          break;
        }
      }
    }
  }
  if ((phase_ == group_phase::active || phase_ == group_phase::leaving)
      && !handoff_due_.empty()) {
    // The next whole token of the handoff bucket (a stale entry costs one
    // early step, which drops it).
    at(handoff_bucket_.next_token(starts_rate()));
  }
  at(release_retry_);
  if (phase_ == group_phase::leaving) {
    at(leave_by_);
    at(next_checkpoint_);
  }
  for (const auto& f : spawn_candidates_) {
    if (phase_ == group_phase::leaving)
      break; // nothing is spawned while leaving
    const auto& e = feeds_.at(f);
    if (e.spawn_pending && e.own == ownership::held && e.w == watcher::none
        && !holding_) {
      // The next whole token of the bucket.
      at(spawn_bucket_.next_token(starts_rate()));
      break;
    }
  }
  return t;
}

void group_state::step(group_time now, group_actions& out) {
  if (phase_ == group_phase::joining) {
    if (join_request_ == 0 && now >= join_retry_at_) {
      join_request_ = next_id();
      join_sent_ = now;
      out.emplace_back(join_lease{join_request_, generation_});
    }
    return;
  }
  if (!leased())
    return;
  // G6: renew.
  if (now >= next_renew_) {
    auto id = next_id();
    renew_sent_[id] = now;
    next_renew_ = now + renew_;
    out.emplace_back(renew_lease{id});
    // An answer older than a TTL can no longer move the deadline forward.
    for (auto i = renew_sent_.begin(); i != renew_sent_.end();) {
      if (i->second + ttl_ < now)
        i = renew_sent_.erase(i);
      else
        ++i;
    }
  }
  // G6: hold past the deadline.
  if (!holding_ && now >= deadline_) {
    holding_ = true;
    hold_since_ = now;
    ++counters_.holds;
    out.emplace_back(hold_deliveries{});
  }
  // G6: a hold that lasts a whole TTL gives the lease up. Keepalives that
  // time out here may still reach the store late and keep the lease alive
  // (a slow link): nobody else could take these feeds, and nobody would
  // deliver them. Revoke (best effort), stop renewing, join again.
  if (holding_ && phase_ != group_phase::leaving && now >= hold_since_ + ttl_) {
    ++counters_.hold_timeouts;
    out.emplace_back(revoke_lease{next_id()});
    lose_lease(now, out);
    step(now, out);
    return;
  }
  if (phase_ == group_phase::leaving) {
    if (now >= leave_by_) {
      // G9: releases kept failing (the store unreachable, or renewals
      // going on while releases fail); stop trying (the lease is revoked,
      // and the feeds move as after a crash).
      for (auto& kv : feeds_) {
        auto& e = kv.second;
        if (e.own != ownership::none) {
          if (e.w == watcher::running) {
            e.w = watcher::stopping;
            out.emplace_back(
              stop_watcher{kv.first, e.watcher_token, stop_reason::leave});
          }
          e.own = ownership::none;
          e.release_ready = false;
          e.spawn_pending = false;
          e.release_request = 0;
          e.claim_request = 0;
        }
      }
      claims_.clear();
      releases_.clear();
      handoff_due_.clear();
    } else {
      if (holding_)
        // Past the fence deadline nothing is delivered here: hand every
        // remaining feed over now (a release compares the token, so it is
        // safe even if the lease is gone).
        release_all_due(out);
      else
        pace_leave(now, out);
      // The uncertain claims of the leave's wave that did not fit the
      // window (only those qualify: nothing is desired while leaving).
      if (claims_pending_ && claims_.size() < cfg_.max_inflight_batches)
        issue_claims(now, false, out);
      // The feeds still delivered here keep their checkpoints (G5).
      if (now >= next_checkpoint_) {
        next_checkpoint_ = now + checkpoint_;
        issue_commits(true, out);
      } else if (commits_pending_
                 && commits_.size() < cfg_.max_inflight_batches) {
        issue_commits(false, out);
      }
      retry_releases(now);
      issue_releases(out);
    }
    bool busy = !claims_.empty() || !releases_.empty();
    for (auto kv = feeds_.begin(); !busy && kv != feeds_.end(); ++kv)
      busy = kv->second.own != ownership::none;
    if (!busy) {
      phase_ = group_phase::left;
      out.emplace_back(revoke_lease{next_id()});
    }
    return;
  }
  // G2: poll.
  if (now >= next_poll_) {
    next_poll_ = now + poll_;
    out.emplace_back(poll_members{next_id()});
  }
  if (phase_ == group_phase::settling) {
    if (have_view_ && view_.size() >= cfg_.min_members
        && now >= view_changed_ + settle_) {
      phase_ = group_phase::active;
      claim_wanted_ = true;
      next_reconcile_ = now + reconcile_;
      next_checkpoint_ = now + checkpoint_;
    } else {
      return;
    }
  }
  // Active.
  if (now >= next_reconcile_) {
    claim_wanted_ = true;
    next_reconcile_ = now + reconcile_;
  }
  if (now >= held_retry_at_) {
    claim_wanted_ = true;
    held_retry_at_ = never;
  }
  if (now >= claim_retry_at_) {
    claim_wanted_ = true;
    claim_retry_at_ = never;
  }
  if (!holding_) {
    if (claim_wanted_)
      issue_claims(now, true, out);
    else if (claims_pending_ && claims_.size() < cfg_.max_inflight_batches)
      issue_claims(now, false, out);
  }
  check_rebalance(now, out);
  if (now >= next_checkpoint_) {
    next_checkpoint_ = now + checkpoint_;
    issue_commits(true, out);
  } else if (commits_pending_ && commits_.size() < cfg_.max_inflight_batches) {
    issue_commits(false, out);
  }
  retry_releases(now);
  issue_releases(out);
  issue_spawns(now, out);
}

// -- helpers --------------------------------------------------------------

bool group_state::leased() const noexcept {
  return phase_ == group_phase::settling || phase_ == group_phase::active
         || phase_ == group_phase::leaving;
}

std::size_t group_state::load() const {
  std::size_t n = 0;
  for (const auto& kv : feeds_)
    n += kv.second.own != ownership::none;
  return n;
}

std::optional<group_position> group_state::best_cursor(const feed_entry& e) const {
  if (e.progress && (!e.committed || *e.progress > *e.committed))
    return e.progress;
  return e.committed;
}

void group_state::refresh_desired() {
  rebalance_candidates_.clear();
  // Due again once their (perhaps new) winner has been listed for
  // rebalance_delay (check_rebalance).
  handoff_due_.clear();
  for (auto& kv : feeds_) {
    auto w = hrw_winner(kv.first, view_);
    kv.second.winner = w == hrw_none ? std::string{} : view_[w];
    kv.second.desired = kv.second.winner == member_;
    if (kv.second.own == ownership::held && !kv.second.desired
        && !kv.second.winner.empty())
      rebalance_candidates_[kv.second.winner].insert(kv.first);
  }
}

void group_state::issue_claims(group_time now, bool next_wave,
                               group_actions& out) {
  if (next_wave) {
    claim_wanted_ = false;
    ++claim_wave_;
  }
  claims_pending_ = false;
  auto room = cfg_.max_feeds > load() ? cfg_.max_feeds - load() : 0;
  claim_feeds batch;
  auto flush = [&] {
    if (batch.feeds.empty())
      return;
    batch.request = next_id();
    for (const auto& f : batch.feeds)
      feeds_[f].claim_request = batch.request;
    claims_[batch.request] = batch.feeds;
    out.emplace_back(std::move(batch));
    batch = claim_feeds{};
  };
  for (auto& kv : feeds_) {
    auto& e = kv.second;
    if (e.own != ownership::none || e.claim_wave == claim_wave_)
      continue;
    // An uncertain claim may already be ours: it is asked regardless of
    // max_feeds.
    if (!e.uncertain && (!e.desired || room == 0))
      continue;
    if (now < e.claim_retry_at) {
      claim_retry_at_ = std::min(claim_retry_at_, e.claim_retry_at);
      continue;
    }
    if (batch.feeds.empty() && claims_.size() >= cfg_.max_inflight_batches) {
      // The window is full: the rest of this wave goes out as answers
      // free slots.
      claims_pending_ = true;
      break;
    }
    if (!e.uncertain)
      --room;
    e.own = ownership::claiming;
    e.claim_wave = claim_wave_;
    batch.feeds.push_back(kv.first);
    if (batch.feeds.size() == cfg_.batch)
      flush();
  }
  flush();
}

void group_state::issue_commits(bool next_wave, group_actions& out) {
  if (next_wave)
    ++commit_wave_;
  commits_pending_ = false;
  commit_cursors batch;
  auto flush = [&] {
    if (batch.items.empty())
      return;
    batch.request = next_id();
    std::vector<std::string> fs;
    for (const auto& it : batch.items) {
      auto& e = feeds_[it.feed];
      e.commit_request = batch.request;
      e.commit_cursor = it.cursor;
      fs.push_back(it.feed);
    }
    commits_[batch.request] = std::move(fs);
    out.emplace_back(std::move(batch));
    batch = commit_cursors{};
  };
  for (auto& kv : feeds_) {
    auto& e = kv.second;
    if (e.own != ownership::held || e.commit_request != 0 || !e.progress
        || (e.committed && *e.progress <= *e.committed)
        || e.commit_wave == commit_wave_)
      continue;
    if (batch.items.empty() && commits_.size() >= cfg_.max_inflight_batches) {
      commits_pending_ = true;
      break;
    }
    e.commit_wave = commit_wave_;
    batch.items.push_back(commit_item{kv.first, e.token, *e.progress});
    if (batch.items.size() == cfg_.batch)
      flush();
  }
  flush();
}

void group_state::retry_releases(group_time now) {
  if (now < release_retry_)
    return;
  release_retry_ = never;
  for (auto& kv : feeds_) {
    auto& e = kv.second;
    if (e.own == ownership::releasing && e.w == watcher::none
        && e.release_request == 0) {
      e.release_ready = true;
      add_release_candidate(kv.first, e);
    }
  }
}

void group_state::issue_releases(group_actions& out) {
  // Grouped by reason, so that each request names one.
  for (auto why : {stop_reason::rebalance, stop_reason::leave}) {
    release_feeds batch;
    batch.reason = why;
    auto flush = [&] {
      if (batch.items.empty())
        return;
      batch.request = next_id();
      std::vector<std::string> fs;
      for (const auto& it : batch.items) {
        feeds_[it.feed].release_request = batch.request;
        fs.push_back(it.feed);
      }
      releases_[batch.request] = std::move(fs);
      out.emplace_back(std::move(batch));
      batch = release_feeds{};
      batch.reason = why;
    };
    auto& cands = release_candidates_[reason_index(why)];
    for (auto c = cands.begin(); c != cands.end();) {
      auto& e = feeds_[*c];
      if (!e.release_ready || e.release_reason != why) {
        // Stale here (a ready feed of the other reason is in that set).
        c = cands.erase(c);
        continue;
      }
      if (e.own != ownership::releasing || e.w != watcher::none) {
        ++c;
        continue;
      }
      if (batch.items.empty() && releases_.size() >= cfg_.max_inflight_batches)
        break; // still ready: sent as answers free slots
      const auto& feed = *c;
      e.release_ready = false;
      // Once per tenure: a retry after an error is the same release.
      if (!e.release_sent) {
        e.release_sent = true;
        ++counters_.dropped[static_cast<std::size_t>(why)];
      }
      batch.items.push_back(
        release_item{feed, e.token, best_cursor(e),
                     e.winner == member_ ? std::string{} : e.winner});
      c = cands.erase(c);
      if (batch.items.size() == cfg_.batch)
        flush();
    }
    flush();
  }
}

void group_state::issue_spawns(group_time now, group_actions& out) {
  if (holding_ || now >= deadline_)
    return;
  spawn_bucket_.refill(now, starts_rate());
  for (auto c = spawn_candidates_.begin(); c != spawn_candidates_.end();) {
    auto& e = feeds_[*c];
    if (!e.spawn_pending) {
      c = spawn_candidates_.erase(c);
      continue;
    }
    if (e.own != ownership::held || e.w != watcher::none) {
      ++c;
      continue;
    }
    if (!spawn_bucket_.take())
      return;
    e.spawn_pending = false;
    e.w = watcher::running;
    e.watcher_token = e.token;
    ++counters_.spawns;
    out.emplace_back(spawn_watcher{*c, e.token, best_cursor(e), deadline_});
    c = spawn_candidates_.erase(c);
  }
}

void group_state::check_rebalance(group_time now, group_actions& out) {
  // The feeds of every winner listed for rebalance_delay, in feed order.
  std::vector<std::string> due;
  for (auto g = rebalance_candidates_.begin();
       g != rebalance_candidates_.end();) {
    auto s = first_seen_.find(g->first);
    if (s == first_seen_.end() || now < s->second + rebalance_) {
      ++g;
      continue;
    }
    due.insert(due.end(), g->second.begin(), g->second.end());
    g = rebalance_candidates_.erase(g);
  }
  handoff_due_.insert(due.begin(), due.end());
  if (handoff_due_.empty())
    return;
  // G8's pace: G4's bucket, so that the winner can start each feed as it
  // comes (the rest are delivered here meanwhile).
  handoff_bucket_.refill(now, starts_rate());
  for (auto f = handoff_due_.begin(); f != handoff_due_.end();) {
    auto& e = feeds_[*f];
    if (e.own != ownership::held || e.desired || e.winner.empty()) {
      f = handoff_due_.erase(f); // no longer to hand over
      continue;
    }
    // The winner registered again since (same name, a new listing): it
    // waits for its rebalance_delay anew.
    auto s = first_seen_.find(e.winner);
    if (s == first_seen_.end() || now < s->second + rebalance_) {
      rebalance_candidates_[e.winner].insert(*f);
      f = handoff_due_.erase(f);
      continue;
    }
    if (!handoff_bucket_.take())
      return;
    begin_release(*f, e, stop_reason::rebalance, out);
    f = handoff_due_.erase(f);
  }
}

void group_state::pace_leave(group_time now, group_actions& out) {
  if (handoff_due_.empty())
    return;
  // G9's pace is G8's: the winner's start rate.
  handoff_bucket_.refill(now, starts_rate());
  for (auto f = handoff_due_.begin(); f != handoff_due_.end();) {
    auto& e = feeds_[*f];
    if (e.own != ownership::held) {
      f = handoff_due_.erase(f); // released or dropped meanwhile
      continue;
    }
    if (!handoff_bucket_.take())
      return;
    begin_release(*f, e, stop_reason::leave, out);
    f = handoff_due_.erase(f);
  }
}

void group_state::release_all_due(group_actions& out) {
  for (const auto& f : handoff_due_) {
    auto& e = feeds_[f];
    if (e.own == ownership::held)
      begin_release(f, e, stop_reason::leave, out);
  }
  handoff_due_.clear();
}

void group_state::begin_release(const std::string& feed, feed_entry& e,
                                stop_reason why, group_actions& out) {
  e.own = ownership::releasing;
  e.release_reason = why;
  e.release_sent = false;
  e.spawn_pending = false;
  if (e.w == watcher::running) {
    e.w = watcher::stopping;
    out.emplace_back(stop_watcher{feed, e.watcher_token, why});
  }
  // Released once the watcher's final cursor is in (on_watcher_stopped).
  e.release_ready = e.w == watcher::none;
  if (e.release_ready)
    add_release_candidate(feed, e);
}

void group_state::drop_ownership(const std::string& feed, feed_entry& e,
                                 stop_reason why, group_actions& out) {
  // A feed whose release was sent was counted then.
  if (!(e.own == ownership::releasing && e.release_sent))
    ++counters_.dropped[static_cast<std::size_t>(why)];
  if (e.w == watcher::running) {
    e.w = watcher::stopping;
    out.emplace_back(stop_watcher{feed, e.watcher_token, why});
  }
  e.own = ownership::none;
  e.token = 0;
  e.spawn_pending = false;
  e.release_ready = false;
  e.progress.reset();
  e.committed.reset();
  e.commit_request = 0;
  e.claim_request = 0;
  e.release_request = 0;
}

void group_state::lose_lease(group_time now, group_actions& out) {
  // G7.
  for (auto& kv : feeds_) {
    auto& e = kv.second;
    if (e.own != ownership::none || e.w == watcher::running)
      drop_ownership(kv.first, e, stop_reason::lease_lost, out);
  }
  claims_.clear();
  commits_.clear();
  releases_.clear();
  // Nothing is held, ready or pending any more (drop_ownership).
  for (auto& c : release_candidates_)
    c.clear();
  spawn_candidates_.clear();
  rebalance_candidates_.clear();
  handoff_due_.clear();
  withdraw_request_ = 0;
  renew_sent_.clear();
  release_retry_ = never;
  claims_pending_ = commits_pending_ = false;
  claim_retry_at_ = never;
  holding_ = false;
  deadline_ = now;
  have_view_ = false;
  view_.clear();
  first_seen_.clear();
  for (auto& kv : feeds_) {
    kv.second.desired = false;
    kv.second.uncertain = false; // the lease took any such key with it
    kv.second.claim_failures = 0;
    kv.second.claim_retry_at = group_time{};
    kv.second.winner.clear();
  }
  if (phase_ == group_phase::leaving) {
    phase_ = group_phase::left;
    return;
  }
  ++generation_;
  ++counters_.rejoins;
  phase_ = group_phase::joining;
  join_request_ = 0;
  join_retry_at_ = now;
}

void group_state::extend_deadline(group_time sent, double ttl_seconds,
                                  group_time now, group_actions& out) {
  auto d = sent + std::min(from_seconds(ttl_seconds), ttl_) - margin_;
  if (d <= deadline_)
    return;
  deadline_ = d;
  if (holding_) {
    if (d > now) {
      holding_ = false;
      out.emplace_back(unhold_deliveries{d});
    }
    return;
  }
  out.emplace_back(fence_watchers{d});
}

std::vector<std::string> group_state::desired() const {
  std::vector<std::string> out;
  for (const auto& kv : feeds_)
    if (kv.second.desired)
      out.push_back(kv.first);
  return out;
}

std::vector<std::string> group_state::owned() const {
  std::vector<std::string> out;
  for (const auto& kv : feeds_)
    if (kv.second.own == ownership::held
        || kv.second.own == ownership::releasing)
      out.push_back(kv.first);
  return out;
}

std::optional<uint64_t> group_state::token_of(const std::string& feed) const {
  auto i = feeds_.find(feed);
  if (i == feeds_.end()
      || (i->second.own != ownership::held
          && i->second.own != ownership::releasing))
    return std::nullopt;
  return i->second.token;
}

} // namespace core
} // namespace outbound
