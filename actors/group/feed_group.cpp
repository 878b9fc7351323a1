#include "actors/group/feed_group.hpp"

#include "actors/handler_guard.hpp"
#include "config/config_error.hpp"
#include "core/rng.hpp"
#include "core/text.hpp"
#include "core/time.hpp"

#include <caf/actor_cast.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <openssl/evp.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <random>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <variant>

namespace outbound {
inline namespace group {
namespace detail {

/// A watcher that could not be spawned, reported stopped a second later
/// (the core then spawns it again, rate-limited).
struct group_watcher_gone {
  std::string feed;
  uint64_t token = 0;
};

} // namespace detail
} // namespace group
} // namespace outbound

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::group::detail::group_watcher_gone)

namespace outbound {
inline namespace group {

// -- pure helpers -----------------------------------------------------------

std::optional<group_position>
position_of(const feed_progress& p, const std::optional<group_position>& prev) {
  // The one place that maps a watcher's report to a group position (and
  // resume_at below maps it back). A ledger position is the cursor in the
  // ledger's epoch, a catchup position the last seq in the hub's epoch.
  std::optional<int64_t> offset = p.cursor ? p.cursor : p.last_seq;
  std::string epoch = p.cursor ? p.ledger_epoch.value_or(std::string{})
                               : p.epoch.value_or(std::string{});
  if (!offset)
    return std::nullopt;
  group_position out;
  out.offset = *offset;
  if (prev) {
    out.era = prev->era;
    out.epoch = prev->epoch;
  }
  // The feed's positions restarted: a new epoch, or (a hub without epochs)
  // an offset below the last one, which a watcher reports only after a
  // rewind or a reset that moved it back.
  bool new_epoch = !epoch.empty() && !out.epoch.empty() && out.epoch != epoch;
  bool went_back = prev && *offset < prev->offset;
  if (prev && (new_epoch || went_back))
    ++out.era;
  if (!epoch.empty())
    out.epoch = std::move(epoch);
  return out;
}

namespace {

/// Where a watcher of `cfg` resumes at `pos` (the inverse of position_of).
void resume_at(feed_config& cfg, const group_position& pos) {
  // An epoch the watcher's config would refuse (a hub's epoch with a
  // control character, stored as reported) is left out rather than failing
  // every spawn: the watcher then adopts the hub's first epoch.
  bool epoch_ok = !pos.epoch.empty() && !core::has_ctl(pos.epoch);
  if (cfg.has_replay()) {
    cfg.cursor = pos.offset;
    if (epoch_ok)
      cfg.resume_ledger_epoch = pos.epoch;
    return;
  }
  cfg.resume_last_seq = std::max<int64_t>(pos.offset, 0);
  if (epoch_ok)
    cfg.resume_epoch = pos.epoch;
}

std::string sha256_hex(const std::string& text) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(text.data(), text.size(), md, &len, EVP_sha256(), nullptr)
      != 1)
    throw std::runtime_error("SHA-256 failed");
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * len);
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(hex[md[i] >> 4]);
    out.push_back(hex[md[i] & 0xf]);
  }
  return out;
}

} // namespace

std::string group_client_id(const std::string& group, const std::string& feed) {
  return sha256_hex(group + "/" + feed).substr(0, 32);
}

std::string group_feed_digest(std::vector<std::string> feed_ids) {
  std::sort(feed_ids.begin(), feed_ids.end());
  std::string all;
  for (const auto& f : feed_ids) {
    all += f;
    all += '\n';
  }
  return sha256_hex(all);
}

// -- the actor --------------------------------------------------------------

namespace {

using vtime = caf::actor_clock::time_point;

/// The public interface plus the tick `(timeout_atom, generation)`, the
/// watchers' progress reports and failed spawns.
using group_impl_actor
  = feed_group_actor::extend<caf::reacts_to<timeout_atom, uint64_t>,
                             caf::reacts_to<feed_progress>,
                             caf::reacts_to<detail::group_watcher_gone>>;

struct watcher_entry {
  feed_watcher_actor handle;
  caf::actor_addr addr;
  uint64_t token = 0;
  /// The last known position (the resume point, then each report): the
  /// era state of the feed and the final position if it dies.
  std::optional<group_position> last;
  bool stopping = false;
};

/// Per feed, what the status reports (checkpoint lag and age).
struct feed_marks {
  std::optional<group_position> committed, progress;
  std::optional<vtime> dirty_since;
};

struct group_actor_state {
  group_config cfg;
  feed_group_options opts;
  std::map<std::string, feed_config> feeds;
  std::optional<group_state> core;
  std::string base_incarnation, incarnation, digest;
  uint64_t lease = 0;
  bool joined_once = false;
  /// When this member first saw each listed name (since its latest
  /// appearance).
  std::map<std::string, vtime> seen;
  std::map<std::string, watcher_entry> watchers;
  /// The feed of each watcher's address, for its down message (entries
  /// may be stale: checked against `watchers`). A scan of `watchers` per
  /// down message cost seconds when thousands stopped at once.
  std::unordered_map<caf::actor_addr, std::string> feed_of;
  std::map<std::string, feed_marks> marks;
  uint64_t moved_in = 0, moved_out = 0;
  /// The pending tick: its due time (max: none) and generation.
  vtime armed = vtime::max();
  uint64_t tick_gen = 0;
  uint64_t join_inflight = 0;
  std::size_t revokes_inflight = 0;
  std::vector<caf::typed_response_promise<group_status>> leaving;
  /// stop_atom received: no more inputs, waiting for the watchers.
  bool halted = false;
  /// Every watcher spawned and not yet known stopped.
  std::shared_ptr<std::map<caf::actor_addr, caf::actor>> live
    = std::make_shared<std::map<caf::actor_addr, caf::actor>>();
  core::rng rng;
  caf::timespan store_timeout{};
  caf::timespan renew_timeout{};
  caf::timespan stop_timeout{};
  /// When the metrics were last updated (feed_group_options::metrics).
  vtime metrics_at{};
  /// The newest poll whose answer was applied.
  uint64_t last_poll = 0;
  /// group_status::store_errors, last_store_error, unreleased (the feeds).
  uint64_t store_errors = 0;
  std::string last_store_error;
  std::set<std::string> unreleased;
  /// The lease whose newest revoke answered failed (0: none), for
  /// group_status::revoke_failed, which is true only while that lease is
  /// still the member's current one: a later revoke of it that succeeds
  /// clears it, and so does a later join (the store grants one only when
  /// members/<name> is absent, so the old lease is expired or revoked).
  /// A failed revoke of an older lease, answered after a join replaced it
  /// (a time-out can take store_timeout), says nothing about the lease
  /// held at the exit.
  uint64_t revoke_failed_lease = 0;

  static inline const char* name = "outbound.feed_group";
};

using self_ptr = group_impl_actor::stateful_pointer<group_actor_state>;

group_time now_of(self_ptr self) {
  return self->clock().now();
}

/// Counts a failed store request and keeps its text for the status.
void note_store_error(self_ptr self, const char* request, const caf::error& e) {
  auto& st = self->state;
  ++st.store_errors;
  const auto& ctx = e.context();
  st.last_store_error
    = std::string{request} + ": "
      + (ctx.match_elements<std::string>() ? ctx.get_as<std::string>(0)
                                           : caf::to_string(e));
}

bool leased(group_phase p) {
  return p == group_phase::settling || p == group_phase::active
         || p == group_phase::leaving;
}

group_status make_status(self_ptr self) {
  auto& st = self->state;
  const auto& c = *st.core;
  group_status s;
  s.group = st.cfg.name;
  s.member = st.cfg.member_name;
  s.incarnation = st.incarnation;
  s.phase = c.phase();
  s.leased = leased(c.phase());
  s.holding = c.holding();
  auto now = now_of(self);
  if (st.joined_once)
    s.fence_in
      = std::chrono::duration<double>(c.fence_deadline() - now).count();
  s.members = st.seen.size();
  s.feeds_total = st.feeds.size();
  s.desired = c.desired().size();
  auto owned = c.owned();
  s.owned = owned.size();
  for (const auto& kv : st.watchers)
    s.running += kv.second.handle && !kv.second.stopping;
  s.counters = c.counters();
  s.moved_in = st.moved_in;
  s.moved_out = st.moved_out;
  s.joined = st.joined_once;
  s.store_errors = st.store_errors;
  s.last_store_error = st.last_store_error;
  s.unreleased = st.unreleased.size();
  s.revoke_failed
    = st.revoke_failed_lease != 0 && st.revoke_failed_lease == st.lease;
  for (const auto& f : owned) {
    auto i = st.marks.find(f);
    if (i == st.marks.end() || !i->second.progress)
      continue;
    const auto& m = i->second;
    if (m.committed && *m.progress <= *m.committed)
      continue;
    if (m.committed && m.committed->era == m.progress->era) {
      auto lag = m.progress->offset - m.committed->offset;
      if (lag > 0)
        s.checkpoint_lag
          = std::max(s.checkpoint_lag, static_cast<uint64_t>(lag));
    }
    if (m.dirty_since)
      s.checkpoint_age
        = std::max(s.checkpoint_age,
                   std::chrono::duration<double>(now - *m.dirty_since).count());
  }
  return s;
}

void act(self_ptr self, group_actions acts);
void after_input(self_ptr self);
void update_metrics(self_ptr self, bool force);

/// Runs one input of the core and carries out its actions. Nothing thrown
/// leaves the actor (the input is then lost; the core's timers retry).
template <class F>
void input(self_ptr self, F&& f) {
  auto& st = self->state;
  if (st.halted)
    return;
  guarded_void([&] { act(self, f(*st.core, now_of(self))); });
  after_input(self);
}

void arm(self_ptr self) {
  auto& st = self->state;
  auto t = st.core->next_wakeup();
  if (t == st.armed)
    return;
  st.armed = t;
  ++st.tick_gen;
  if (t == vtime::max())
    return;
  auto now = now_of(self);
  // A wake-up already due runs after a millisecond, never in a loop. The
  // core's timer renews the lease and checks the fence deadline: it is
  // urgent, not queued behind thousands of progress reports.
  caf::timespan delay = t > now ? t - now : std::chrono::milliseconds{1};
  self->delayed_send<caf::message_priority::high>(self, delay, timeout_atom_v,
                                                  st.tick_gen);
}

void finish_leave(self_ptr self) {
  auto& st = self->state;
  if (st.leaving.empty() || st.core->phase() != group_phase::left
      || st.join_inflight != 0 || st.revokes_inflight != 0)
    return;
  auto s = make_status(self);
  update_metrics(self, true);
  for (auto& rp : st.leaving)
    rp.deliver(s);
  st.leaving.clear();
  for (auto& kv : st.watchers)
    if (kv.second.handle)
      caf::anon_send_exit(kv.second.handle, caf::exit_reason::user_shutdown);
  st.watchers.clear();
  st.halted = true;
  self->quit();
}

/// Hands the status to the metrics at most once per second (and always
/// when `force`: the last update before the member ends).
void update_metrics(self_ptr self, bool force) {
  auto& st = self->state;
  if (!st.opts.metrics)
    return;
  auto now = now_of(self);
  if (!force && now - st.metrics_at < std::chrono::seconds{1})
    return;
  st.metrics_at = now;
  st.opts.metrics->update(make_status(self));
}

void after_input(self_ptr self) {
  auto& st = self->state;
  if (st.halted)
    return;
  update_metrics(self, false);
  arm(self);
  finish_leave(self);
}

/// The watcher of `feed` with `token` stopped (answered its stop, failed to
/// answer, died, or never started): the core hears of it once.
/// `addr`: the watcher's address when known (a respawn within one tenure
/// has the same token, never the same address).
void finish_watcher(self_ptr self, const std::string& feed, uint64_t token,
                    bool answered, const caf::actor_addr& addr) {
  auto& st = self->state;
  auto i = st.watchers.find(feed);
  if (i == st.watchers.end() || i->second.token != token
      || (addr && i->second.addr != addr))
    return;
  // The last acknowledged position (the final report comes before the
  // stop's answer). Never the stats': their last_seq counts events
  // received, not acknowledged, and resuming after it could skip some.
  auto pos = i->second.last;
  if (!answered && i->second.handle)
    caf::anon_send_exit(i->second.handle, caf::exit_reason::kill);
  st.live->erase(i->second.addr);
  st.feed_of.erase(i->second.addr);
  st.watchers.erase(i);
  input(self, [&](group_state& c, group_time now) {
    return c.on_watcher_stopped(feed, token, pos, now);
  });
}

// -- actions ------------------------------------------------------------------

void do_action(self_ptr self, join_lease& j) {
  auto& st = self->state;
  st.incarnation = st.base_incarnation + "." + std::to_string(j.generation);
  member_record rec{st.cfg.member_name, st.incarnation, std::string{},
                    st.digest};
  auto req = j.request;
  st.join_inflight = req;
  self
    ->request(st.opts.store, st.store_timeout, grp_join_atom_v, std::move(rec),
              st.cfg.timing.lease_ttl)
    .then(
      [self, req](uint64_t lease, double ttl) {
        auto& st = self->state;
        if (st.join_inflight == req)
          st.join_inflight = 0;
        st.lease = lease;
        st.joined_once = true;
        // The old lease is gone (the join needed its member key absent).
        st.revoke_failed_lease = 0;
        input(self, [&](group_state& c, group_time now) {
          return c.on_joined(req, ttl, now);
        });
      },
      [self, req](caf::error& e) {
        note_store_error(self, "join", e);
        auto& st = self->state;
        if (st.join_inflight == req)
          st.join_inflight = 0;
        input(self, [&](group_state& c, group_time now) {
          return c.on_join_failed(req, now);
        });
      });
}

void do_action(self_ptr self, poll_members& p) {
  auto req = p.request;
  self
    ->request(self->state.opts.store, self->state.store_timeout,
              grp_members_atom_v)
    .then(
      [self, req](std::vector<member_record>& recs) {
        auto& st = self->state;
        auto now = now_of(self);
        // Members that serve another feed set (another digest: a config
        // mistake, or a rolling change of the set) are left out of the
        // assignment: hashing over them could give this member feeds it
        // does not know, or them feeds they do not serve. Both sides then
        // claim what they win among their own kind; the store's claims
        // keep ownership single.
        std::set<std::string> names;
        for (const auto& r : recs)
          if (r.feed_digest.empty() || r.feed_digest == st.digest
              || r.name == st.cfg.member_name)
            names.insert(r.name);
        std::vector<listed_member> listed;
        if (req < st.last_poll) {
          // An older poll answered late (the core ignores it): it must not
          // reset when the names were first seen either.
          for (const auto& n : names)
            listed.push_back(listed_member{n, now});
        } else {
          st.last_poll = req;
          for (auto i = st.seen.begin(); i != st.seen.end();)
            i = names.count(i->first) ? std::next(i) : st.seen.erase(i);
          for (const auto& n : names) {
            auto i = st.seen.emplace(n, now).first;
            listed.push_back(listed_member{n, i->second});
          }
        }
        input(self, [&](group_state& c, group_time t) {
          return c.on_members(req, listed, t);
        });
      },
      [self](caf::error& e) {
        note_store_error(self, "members", e);
        // The core polls again at its next poll_interval.
        after_input(self);
      });
}

void do_action(self_ptr self, claim_feeds& c) {
  auto req = c.request;
  auto& st = self->state;
  self
    ->request(st.opts.store, st.store_timeout, grp_claim_atom_v, st.lease,
              std::move(c.feeds))
    .then(
      [self, req](std::vector<claim_reply>& replies) {
        auto& st = self->state;
        for (const auto& r : replies)
          if (r.outcome == claim_outcome::won) {
            if (st.core->phase() == group_phase::leaving)
              st.unreleased.insert(r.feed); // released by the leave
            ++st.moved_in;
            auto& m = st.marks[r.feed];
            m.committed = r.cursor;
            m.progress.reset();
            m.dirty_since.reset();
          }
        input(self, [&](group_state& c, group_time now) {
          return c.on_claimed(req, replies, now);
        });
      },
      [self, req](caf::error& e) {
        note_store_error(self, "claim", e);
        input(self, [&](group_state& c, group_time now) {
          return c.on_claim_failed(req, now);
        });
      });
}

void do_action(self_ptr self, spawn_watcher& s) {
  auto& st = self->state;
  auto fc = st.feeds.at(s.feed);
  if (fc.client_id.empty())
    fc.client_id = group_client_id(st.cfg.name, s.feed);
  if (s.resume)
    resume_at(fc, *s.resume);
  feed_watcher_options o;
  o.client = st.opts.feed_client;
  o.connector = st.opts.connector;
  o.ws = st.opts.ws;
  o.subscriber = st.opts.subscriber;
  o.batch_subscriber = st.opts.batch_subscriber;
  o.callbacks = st.opts.callbacks;
  o.feed_id = s.feed;
  o.owner_token = s.token;
  o.progress_to = caf::actor_cast<feed_progress_actor>(self);
  o.progress_interval = st.opts.progress_interval >= 0
                          ? st.opts.progress_interval
                          : st.cfg.timing.checkpoint_interval / 2;
  // Ephemeral feeds: a feed with a committed position had an owner, and
  // what was published since is lost (a takeover reset). Ledger and
  // catchup watchers ignore it and resume from the position.
  o.takeover = s.resume.has_value();
  o.seed = st.rng() | 1;
  // The gate from the first delivery: nothing starts past the deadline
  // even before the next fence message.
  o.fence_deadline = s.fence_deadline;
  watcher_entry e;
  e.token = s.token;
  e.last = s.resume;
  try {
    e.handle
      = st.opts.spawn_watcher
          ? st.opts.spawn_watcher(self->system(), std::move(fc), std::move(o))
          : spawn_feed_watcher(self->system(), std::move(fc), std::move(o));
  } catch (...) {
    e.handle = nullptr;
  }
  if (!e.handle) {
    st.watchers[s.feed] = std::move(e);
    self->delayed_send(self, std::chrono::seconds{1},
                       detail::group_watcher_gone{s.feed, s.token});
    return;
  }
  e.addr = e.handle.address();
  st.live->emplace(e.addr, caf::actor_cast<caf::actor>(e.handle));
  st.feed_of[e.addr] = s.feed;
  self->monitor(e.handle);
  st.watchers[s.feed] = std::move(e);
  if (auto& m = st.marks[s.feed]; !m.committed && s.resume)
    m.committed = s.resume;
}

void do_action(self_ptr self, stop_watcher& s) {
  auto& st = self->state;
  auto i = st.watchers.find(s.feed);
  if (i == st.watchers.end() || i->second.token != s.token || i->second.stopping
      || !i->second.handle)
    return;
  i->second.stopping = true;
  auto feed = s.feed;
  auto token = s.token;
  auto addr = i->second.addr;
  auto handle = i->second.handle;
  auto on_stopped = [self, feed, token, addr](feed_stats&) {
    finish_watcher(self, feed, token, true, addr);
  };
  auto on_timeout = [handle](caf::error&) {
    // Not answered in time: kill it, but the feed counts as stopped only
    // once the watcher is gone (its down message), so no release lets
    // another member deliver beside it and no second watcher of the feed
    // starts here.
    caf::anon_send_exit(handle, caf::exit_reason::kill);
  };
  // Ahead of any backlog in the watcher's mailbox (a stop is urgent: the
  // feed waits for it to move).
  if (s.reason == stop_reason::rebalance || s.reason == stop_reason::leave) {
    // A handoff drains: the watcher waits for the answer to its delivery
    // in flight, so the final position (and the release) includes it and
    // the next owner repeats nothing the subscriber was handed. Bounded by
    // the same stop timeout (2 x renew_interval), then killed.
    self
      ->request<caf::message_priority::high>(handle, st.stop_timeout,
                                             leave_atom_v)
      .then(std::move(on_stopped), std::move(on_timeout));
    return;
  }
  // Fenced or lease lost: another member may own the feed already; nothing
  // more may start, and there is no point waiting.
  self
    ->request<caf::message_priority::high>(handle, st.stop_timeout, stop_atom_v)
    .then(std::move(on_stopped), std::move(on_timeout));
}

void do_action(self_ptr self, commit_cursors& c) {
  auto req = c.request;
  auto& st = self->state;
  auto items = c.items;
  self
    ->request(st.opts.store, st.store_timeout, grp_commit_atom_v,
              std::move(c.items))
    .then(
      [self, req, items](std::vector<commit_reply>& replies) {
        auto& st = self->state;
        std::map<std::string, commit_outcome> by_feed;
        for (const auto& r : replies)
          by_feed[r.feed] = r.outcome;
        for (const auto& it : items) {
          auto r = by_feed.find(it.feed);
          if (r == by_feed.end() || r->second != commit_outcome::ok)
            continue;
          auto& m = st.marks[it.feed];
          if (!m.committed || *m.committed < it.cursor)
            m.committed = it.cursor;
          if (m.progress && *m.progress <= *m.committed)
            m.dirty_since.reset();
        }
        input(self, [&](group_state& c, group_time now) {
          return c.on_committed(req, replies, now);
        });
      },
      [self, req](caf::error& e) {
        note_store_error(self, "commit", e);
        input(self, [&](group_state& c, group_time now) {
          return c.on_commit_failed(req, now);
        });
      });
}

void do_action(self_ptr self, release_feeds& r) {
  auto req = r.request;
  auto& st = self->state;
  // The items' hints (hint_to) go over the peer plane, which this actor
  // does not have yet: the winner claims at its next poll.
  self
    ->request(st.opts.store, st.store_timeout, grp_release_atom_v,
              std::move(r.items))
    .then(
      [self, req](std::vector<commit_reply>& replies) {
        auto& st = self->state;
        for (const auto& x : replies) {
          if (x.outcome != commit_outcome::error)
            st.unreleased.erase(x.feed);
          if (x.outcome == commit_outcome::ok) {
            ++st.moved_out;
            st.marks.erase(x.feed);
          }
        }
        input(self, [&](group_state& c, group_time now) {
          return c.on_released(req, replies, now);
        });
      },
      [self, req](caf::error& e) {
        note_store_error(self, "release", e);
        input(self, [&](group_state& c, group_time now) {
          return c.on_release_failed(req, now);
        });
      });
}

void do_action(self_ptr self, renew_lease& r) {
  auto req = r.request;
  auto& st = self->state;
  // Urgent both ways (CAF answers an urgent request urgently): a
  // keepalive's answer moves the fence deadline.
  self
    ->request<caf::message_priority::high>(st.opts.store, st.renew_timeout,
                                           grp_renew_atom_v, st.lease)
    .then(
      [self, req](double ttl) {
        auto outcome
          = ttl > 0 ? keepalive_outcome::ok : keepalive_outcome::lost;
        input(self, [&](group_state& c, group_time now) {
          return c.on_keepalive(req, outcome, ttl, now);
        });
      },
      [self, req](caf::error& e) {
        note_store_error(self, "renew", e);
        input(self, [&](group_state& c, group_time now) {
          return c.on_keepalive(req, keepalive_outcome::error, 0, now);
        });
      });
}

void send_fence(self_ptr self, group_time deadline) {
  for (auto& kv : self->state.watchers)
    if (kv.second.handle && !kv.second.stopping)
      self->send<caf::message_priority::high>(kv.second.handle, fence_atom_v,
                                              deadline);
}

void do_action(self_ptr self, fence_watchers& f) {
  send_fence(self, f.deadline);
}

void do_action(self_ptr self, hold_deliveries&) {
  // A deadline already passed holds at once (fence_gate.hpp).
  send_fence(self, std::min(self->state.core->fence_deadline(), now_of(self)));
}

void do_action(self_ptr self, unhold_deliveries& u) {
  send_fence(self, u.deadline);
}

void do_action(self_ptr self, withdraw_member& w) {
  auto req = w.request;
  auto& st = self->state;
  self->request(st.opts.store, st.store_timeout, grp_withdraw_atom_v, st.lease)
    .then(
      [self, req](ack_atom) {
        input(self, [&](group_state& c, group_time now) {
          return c.on_withdrawn(req, now);
        });
      },
      [self, req](caf::error& e) {
        note_store_error(self, "withdraw", e);
        input(self, [&](group_state& c, group_time now) {
          return c.on_withdraw_failed(req, now);
        });
      });
}

void do_action(self_ptr self, revoke_lease&) {
  auto& st = self->state;
  ++st.revokes_inflight;
  auto done = [self] {
    --self->state.revokes_inflight;
    after_input(self);
  };
  auto lease = st.lease;
  self->request(st.opts.store, st.store_timeout, grp_revoke_atom_v, lease)
    .then(
      [self, done, lease](ack_atom) {
        if (self->state.revoke_failed_lease == lease)
          self->state.revoke_failed_lease = 0;
        done();
      },
      [self, done, lease](caf::error& e) {
        note_store_error(self, "revoke", e);
        // Only the current lease's: an older one is proven gone.
        if (lease == self->state.lease)
          self->state.revoke_failed_lease = lease;
        done();
      });
}

void act(self_ptr self, group_actions acts) {
  for (auto& a : acts)
    std::visit([self](auto& x) { do_action(self, x); }, a);
}

/// stop_atom: every watcher stopped (or its stop timed out), then quit.
void halt(self_ptr self, caf::typed_response_promise<group_status> rp) {
  auto& st = self->state;
  st.halted = true;
  ++st.tick_gen; // no more ticks
  auto status = std::make_shared<group_status>(make_status(self));
  update_metrics(self, true);
  // A leave still under way ends here too.
  for (auto& p : st.leaving)
    p.deliver(*status);
  st.leaving.clear();
  auto left = std::make_shared<std::size_t>(0);
  auto done = [self, left, status, rp]() mutable {
    if (--*left == 0) {
      rp.deliver(*status);
      self->quit();
    }
  };
  for (auto& kv : st.watchers)
    if (kv.second.handle)
      ++*left;
  if (*left == 0) {
    rp.deliver(*status);
    self->quit();
    return;
  }
  for (auto& kv : st.watchers) {
    if (!kv.second.handle)
      continue;
    auto h = kv.second.handle;
    self->request<caf::message_priority::high>(h, st.stop_timeout, stop_atom_v)
      .then([done](feed_stats&) mutable { done(); },
            [done, h](caf::error&) mutable {
              caf::anon_send_exit(h, caf::exit_reason::kill);
              done();
            });
  }
}

group_impl_actor::behavior_type group_impl(self_ptr self, group_config cfg,
                                           std::vector<group_feed> feeds,
                                           feed_group_options opts) {
  auto& st = self->state;
  std::vector<std::string> ids;
  for (auto& f : feeds) {
    ids.push_back(f.id);
    st.feeds.emplace(f.id, std::move(f.cfg));
  }
  st.core.emplace(cfg.timing, cfg.member_name, ids);
  st.digest = group_feed_digest(ids);
  st.rng.seed(opts.seed != 0 ? opts.seed : std::random_device{}());
  st.base_incarnation
    = opts.incarnation.empty() ? generate_client_id(st.rng) : opts.incarnation;
  st.store_timeout = std::chrono::duration_cast<caf::timespan>(from_seconds(
    std::max(cfg.timing.lease_ttl, 2 * cfg.timing.renew_interval)));
  st.renew_timeout = std::chrono::duration_cast<caf::timespan>(
    from_seconds(cfg.timing.renew_interval));
  // A stop goes ahead of the watcher's backlog; one that takes longer than
  // two renewals is killed, so a leave still releases within lease_ttl.
  st.stop_timeout = std::chrono::duration_cast<caf::timespan>(
    from_seconds(2 * cfg.timing.renew_interval));
  st.cfg = std::move(cfg);
  st.opts = std::move(opts);
  // Whatever ends this actor ends its watchers (they must not run without
  // an owner renewing their lease). The functor keeps its own list: it
  // runs when the actor's state may already be gone.
  self->attach_functor([live = st.live] {
    for (auto& kv : *live)
      caf::anon_send_exit(kv.second, caf::exit_reason::user_shutdown);
    live->clear();
  });
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    auto f = st.feed_of.find(dm.source);
    if (f == st.feed_of.end())
      return;
    auto feed = std::move(f->second);
    st.feed_of.erase(f);
    auto w = st.watchers.find(feed);
    if (w != st.watchers.end() && w->second.addr == dm.source)
      finish_watcher(self, feed, w->second.token, false, dm.source);
  });
  input(self, [](group_state& c, group_time now) { return c.start(now); });
  return {
    [self](stats_atom) {
      return guarded_result("feed group", [&] { return make_status(self); });
    },
    [self](leave_atom) -> caf::typed_response_promise<group_status> {
      auto rp = self->make_response_promise<group_status>();
      auto& st = self->state;
      if (st.halted) {
        rp.deliver(make_status(self));
        return rp;
      }
      st.leaving.push_back(rp);
      for (auto& f : st.core->owned())
        st.unreleased.insert(f); // until a release answers
      input(self, [](group_state& c, group_time now) { return c.leave(now); });
      return rp;
    },
    [self](stop_atom) -> caf::typed_response_promise<group_status> {
      auto rp = self->make_response_promise<group_status>();
      if (!self->state.halted)
        halt(self, rp);
      else
        rp.deliver(make_status(self));
      return rp;
    },
    [self](timeout_atom, uint64_t gen) {
      auto& st = self->state;
      if (gen != st.tick_gen || st.halted)
        return;
      st.armed = vtime::max();
      input(self, [](group_state& c, group_time now) { return c.tick(now); });
    },
    [self](feed_progress& p) {
      auto& st = self->state;
      auto i = st.watchers.find(p.feed_id);
      if (i == st.watchers.end() || i->second.token != p.owner_token)
        return;
      auto pos = position_of(p, i->second.last);
      if (!pos)
        return;
      i->second.last = pos;
      auto& m = st.marks[p.feed_id];
      if (!m.progress || *m.progress < *pos) {
        m.progress = pos;
        if (!m.dirty_since && (!m.committed || *m.committed < *pos))
          m.dirty_since = now_of(self);
      }
      auto feed = p.feed_id;
      auto token = p.owner_token;
      input(self, [&](group_state& c, group_time now) {
        return c.on_progress(feed, token, *pos, now);
      });
    },
    [self](detail::group_watcher_gone& g) {
      finish_watcher(self, g.feed, g.token, false, caf::actor_addr{});
    },
  };
}

void check_options(const feed_group_options& opts,
                   const std::vector<group_feed>& feeds) {
  if (!opts.store)
    throw config_error("store", "a feed group needs a lease store");
  if (opts.progress_interval > 86400.0)
    throw config_error("progress_interval", "must be <= 86400 seconds");
  if (opts.spawn_watcher)
    return; // the hook's business
  bool replay = false, ws = false;
  for (const auto& f : feeds) {
    replay = replay || f.cfg.has_replay();
    ws = ws || f.cfg.has_ws();
  }
  if (replay && !opts.feed_client)
    throw config_error("feed_client", "a replay_path needs a service client");
  if (ws && !opts.connector)
    throw config_error("connector", "a ws_path needs a ws_connector");
  if (ws && opts.ws.origin.host.empty())
    throw config_error("ws.origin", "a ws_path needs the hub's origin");
  if (opts.subscriber && opts.batch_subscriber)
    throw config_error("batch_subscriber",
                       "set subscriber or batch_subscriber, not both");
  if (!opts.subscriber && !opts.batch_subscriber && !opts.callbacks.on_event)
    throw config_error("subscriber",
                       "needs a subscriber actor or callbacks.on_event");
}

} // namespace

feed_group_actor spawn_feed_group(caf::actor_system& sys, group_config cfg,
                                  std::vector<group_feed> feeds,
                                  feed_group_options opts) {
  cfg.validate();
  std::vector<std::string> ids;
  for (const auto& f : feeds)
    ids.push_back(f.id);
  validate_group_feed_ids(ids);
  for (std::size_t i = 0; i < feeds.size(); ++i) {
    auto field = "feeds[" + std::to_string(i) + "]";
    try {
      feeds[i].cfg.validate();
    } catch (const config_error& e) {
      // what() is "<field>: <why>": keep the why under the longer name.
      std::string why = e.what();
      if (why.compare(0, e.field().size() + 2, e.field() + ": ") == 0)
        why.erase(0, e.field().size() + 2);
      throw config_error(field + ".cfg." + e.field(), why);
    }
  }
  check_options(opts, feeds);
  return sys.spawn(group_impl, std::move(cfg), std::move(feeds),
                   std::move(opts));
}

} // namespace group
} // namespace outbound
