#pragma once

// A randomized, deterministic simulator of a feed group: M members running
// core/group_state.hpp against a simulated linearizable store with
// real-time lease expiry, simulated watchers that deliver a per-feed ledger
// only while their gate (the fence deadline on the member's own clock, no
// hold) allows, and a fault schedule drawn from a seed: crash (and
// restart), pause (with at most one delivery already dispatched), member ↔
// store partition, store outage, message delay, clock rate drift per member
// (local = offset + real × (1 + ρ), |ρ| <= 1e-3), joins and graceful leaves;
// and feeds whose positions rewind now and then (a ledger rewind, a
// catchup epoch change: the offset restarts in a new era) while event ids,
// which the invariants compare, stay global.
// After every step the invariants of the design are asserted:
//
//  I1  single live owner: at any real time at most one member's watcher of
//      a feed has an open gate; and no delivery carries a token older than
//      a token the store already granted, except the one delivery a paused
//      member had dispatched before its pause.
//  I2  no loss: at the end, after healing and quiescing, every published
//      event was delivered, and every cursor is committed to the head.
//  I3  ids strictly increase within a tenure (member incarnation, feed,
//      token).
//  I4  a tenure's first delivery is the store's committed cursor at its
//      claim + 1; a commit never records more than its tenure delivered;
//      at the end, duplicates == the sum over tenures of the events each
//      delivered above the cursor its successor resumed from.
//  I5  after a crash in a quiet window, another member runs each of the
//      crashed member's feeds within lease_ttl + poll_interval + ε; after a
//      graceful leave, within poll_interval + ε (ε = 0.4 s: up to eight
//      one-way store delays of <= 40 ms, drift and scheduling).
//  I6  the committed cursor of a feed never moves backwards.
//
// The simulator makes two assumptions of the store port explicit: a
// request that timed out is never applied later (the simulated delays stay
// below the request time-out), and a claim of a key already held by the
// same lease answers "won" with the existing token.
//
// Time is virtual (int64 ns of real time); nothing sleeps. The same seed
// gives the same run, so a failing seed is replayed with its trace.

#include "core/group_state.hpp"
#include "core/rng.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace outbound::testing {

/// What a simulated run varies.
struct group_sim_options {
  uint64_t seed = 1;
  /// Record a trace (slow; for replaying a failing seed).
  bool trace = false;
  /// Broken variant: watchers ignore the fence deadline and the hold.
  bool ignore_fence = false;
  /// Broken variant: a new owner resumes at the feed's start, not at the
  /// committed cursor.
  bool resume_from_start = false;
  /// Broken store: leases expire 3 s after their TTL (takeovers are late).
  bool late_expiry = false;
  /// Broken store: commits are applied without comparing the token.
  bool commit_ignores_token = false;
  /// Broken variant: watchers report positions without their era, as a
  /// plain offset that goes back after a rewind.
  bool positions_without_era = false;
};

/// The outcome of one run.
struct group_sim_result {
  /// Empty when every invariant held; else "I<n>: what".
  std::string failure;
  /// The last trace lines (with options.trace).
  std::vector<std::string> trace;
  uint64_t steps = 0;
  uint64_t deliveries = 0;
  uint64_t duplicates = 0;
  uint64_t takeovers_checked = 0;
  uint64_t faults = 0;
  uint64_t inflight_overlaps = 0;
};

class group_sim {
public:
  explicit group_sim(group_sim_options opt) : opt_(opt), rng_(opt.seed) {
  }

  group_sim_result run() {
    setup();
    while (!queue_.empty() && failure_.empty()) {
      auto ev = queue_.top();
      queue_.pop();
      if (ev.t > end_)
        break;
      now_ = ev.t;
      ev.fn();
      ++result_.steps;
      if (result_.steps > 2'000'000) {
        fail("sim: runaway (more than 2e6 steps)");
        break;
      }
      check_step();
    }
    if (failure_.empty()) {
      now_ = end_;
      check_end();
    }
    result_.failure = failure_;
    if (opt_.trace) {
      auto n = trace_.size() > trace_keep_ ? trace_.size() - trace_keep_ : 0;
      result_.trace.assign(trace_.begin() + static_cast<std::ptrdiff_t>(n),
                           trace_.end());
    }
    return result_;
  }

private:
  // -- constants ------------------------------------------------------------
  static constexpr int64_t ms = 1'000'000;
  static constexpr int64_t sec = 1'000'000'000;
  static constexpr int64_t base_delay_max = 40 * ms;
  static constexpr int64_t slow_delay_max = 400 * ms;
  static constexpr int64_t request_timeout = 1 * sec;
  static constexpr int64_t epsilon = 400 * ms;

  // -- event queue ----------------------------------------------------------
  struct event {
    int64_t t;
    uint64_t seq;
    std::function<void()> fn;
    bool operator<(const event& o) const {
      return t != o.t ? t > o.t : seq > o.seq;
    }
  };

  void at(int64_t t, std::function<void()> fn) {
    queue_.push(event{std::max(t, now_), ++seq_, std::move(fn)});
  }

  int64_t uniform(int64_t lo, int64_t hi) {
    if (hi <= lo)
      return lo;
    return lo + static_cast<int64_t>(rng_() % static_cast<uint64_t>(hi - lo));
  }

  double unit() {
    return static_cast<double>(rng_() >> 11) * 0x1.0p-53;
  }

  bool chance(double p) {
    return unit() < p;
  }

  template <class... Ts>
  void note(const Ts&... xs) {
    if (!opt_.trace)
      return;
    std::ostringstream os;
    os << "t=" << static_cast<double>(now_) / sec << " ";
    (os << ... << xs);
    trace_.push_back(os.str());
  }

  void fail(const std::string& what) {
    if (failure_.empty()) {
      std::ostringstream os;
      os << what << " (at t=" << static_cast<double>(now_) / sec << " s)";
      failure_ = os.str();
      note("FAIL ", failure_);
    }
  }

  // -- the store --------------------------------------------------------------
  struct lease {
    int64_t expiry = 0;
    bool alive = false;
  };
  struct owner_key {
    uint64_t lease = 0;
    uint64_t token = 0;
  };
  struct store_state {
    int64_t revision = 0;
    uint64_t next_lease = 0;
    std::map<uint64_t, lease> leases;
    std::map<std::string, uint64_t> members; // name -> lease
    std::map<int, owner_key> owners;         // feed -> key
    std::vector<int64_t> cursor;             // feed -> committed
    bool down = false;
  } store_;

  void store_expire() {
    for (auto& kv : store_.leases)
      if (kv.second.alive
          && kv.second.expiry + (opt_.late_expiry ? 3 * sec : 0) <= now_)
        revoke(kv.first);
  }

  void revoke(uint64_t id) {
    auto i = store_.leases.find(id);
    if (i == store_.leases.end() || !i->second.alive)
      return;
    i->second.alive = false;
    ++store_.revision;
    for (auto m = store_.members.begin(); m != store_.members.end();)
      m = m->second == id ? store_.members.erase(m) : std::next(m);
    for (auto o = store_.owners.begin(); o != store_.owners.end();)
      o = o->second.lease == id ? store_.owners.erase(o) : std::next(o);
    note("store: lease ", id, " gone");
  }

  bool lease_alive(uint64_t id) {
    auto i = store_.leases.find(id);
    return i != store_.leases.end() && i->second.alive;
  }

  // -- members and watchers -------------------------------------------------
  struct watcher {
    bool running = false;
    uint64_t token = 0;
    int64_t cursor = 0;
    group_time deadline{};
    bool held = false;
    bool scheduled = false;
    bool inflight = false;
    uint64_t instance = 0;
  };

  struct request {
    enum kind_t { join, poll, claim, commit, release, renew, withdraw } kind;
    uint64_t id = 0;
    std::vector<std::string> feeds;
    std::vector<release_item> items;
  };

  struct member {
    std::string name;
    uint64_t proc = 0; // process incarnation (unique per start)
    bool alive = false;
    bool paused = false;
    uint64_t pause_no = 0;
    double rho = 0;
    int64_t offset = 0;
    std::unique_ptr<group_state> st;
    std::vector<watcher> watchers;
    std::map<uint64_t, request> pending;
    std::map<std::string, group_time> first_seen;
    std::vector<std::function<void()>> deferred;
    uint64_t lease = 0;
    int64_t tick_at = -1;
    bool partitioned = false;
    bool slow = false;
  };

  std::vector<member> members_;
  uint64_t next_proc_ = 0;
  uint64_t next_watcher_ = 0;
  int next_name_ = 0;
  int feeds_ = 0;
  group_state_config cfg_;

  group_time local(const member& m) const {
    auto l = m.offset + now_
             + static_cast<int64_t>(static_cast<double>(now_) * m.rho);
    return group_time{} + duration{l};
  }

  int64_t real_of(const member& m, group_time l) const {
    auto ln = (l - group_time{}).count();
    auto r = static_cast<double>(ln - m.offset) / (1.0 + m.rho);
    return static_cast<int64_t>(r) + 1;
  }

  static std::string feed_name(int f) {
    return "feed-" + std::to_string(f);
  }

  static int feed_index(const std::string& s) {
    return std::stoi(s.substr(5));
  }

  /// Runs `fn` on member `i` if its process `proc` is alive; deferred while
  /// paused.
  void on_member(int i, uint64_t proc, std::function<void()> fn) {
    auto& m = members_[static_cast<std::size_t>(i)];
    if (!m.alive || m.proc != proc)
      return;
    if (m.paused) {
      m.deferred.push_back(std::move(fn));
      return;
    }
    fn();
  }

  int64_t delay(const member& m) {
    return uniform(1 * ms, m.slow ? slow_delay_max : base_delay_max);
  }

  void start_member(int i) {
    auto& m = members_[static_cast<std::size_t>(i)];
    m.proc = ++next_proc_;
    m.alive = true;
    m.paused = false;
    m.deferred.clear();
    m.rho = (unit() * 2 - 1) * 1e-3;
    m.offset = uniform(0, 1000 * sec);
    std::vector<std::string> fs;
    for (int f = 0; f < feeds_; ++f)
      fs.push_back(feed_name(f));
    m.st = std::make_unique<group_state>(cfg_, m.name, fs);
    m.watchers.assign(static_cast<std::size_t>(feeds_), watcher{});
    m.pending.clear();
    m.first_seen.clear();
    m.lease = 0;
    m.tick_at = -1;
    m.partitioned = false;
    m.slow = false;
    note(m.name, " starts (proc ", m.proc, ", rho ", m.rho, ")");
    apply(i, m.st->start(local(m)));
  }

  int add_member() {
    members_.emplace_back();
    members_.back().name = "m" + std::to_string(++next_name_);
    auto i = static_cast<int>(members_.size()) - 1;
    start_member(i);
    return i;
  }

  void crash(int i) {
    auto& m = members_[static_cast<std::size_t>(i)];
    if (!m.alive)
      return;
    note(m.name, " CRASH");
    m.alive = false;
    m.paused = false;
    m.deferred.clear();
    for (auto& w : m.watchers)
      w = watcher{};
  }

  // -- the member's shell ---------------------------------------------------
  void schedule_tick(int i) {
    auto& m = members_[static_cast<std::size_t>(i)];
    auto w = m.st->next_wakeup();
    if (w == group_time::max())
      return;
    auto t = std::max(real_of(m, w), now_ + 100'000);
    if (m.tick_at >= 0 && m.tick_at <= t && m.tick_at >= now_)
      return;
    m.tick_at = t;
    auto proc = m.proc;
    at(t, [this, i, proc, t] {
      on_member(i, proc, [this, i, t] {
        auto& mm = members_[static_cast<std::size_t>(i)];
        if (mm.tick_at != t)
          return;
        mm.tick_at = -1;
        apply(i, mm.st->tick(local(mm)));
      });
    });
  }

  void send(int i, request r) {
    auto& m = members_[static_cast<std::size_t>(i)];
    auto proc = m.proc;
    auto id = r.id;
    auto lease_id = m.lease;
    m.pending[id] = r;
    auto arrive = now_ + delay(m);
    at(arrive, [this, i, proc, r, lease_id] {
      auto& mm = members_[static_cast<std::size_t>(i)];
      // A request of a crashed process still reaches the store.
      if ((mm.proc == proc && mm.partitioned) || store_.down)
        return; // dropped: the member sees a time-out
      auto reply = serve(i, r, lease_id);
      auto id = r.id;
      at(now_ + delay(mm), [this, i, proc, id, reply] {
        on_member(i, proc, [this, i, id, reply] {
          auto& m2 = members_[static_cast<std::size_t>(i)];
          if (m2.partitioned)
            return;
          auto q = m2.pending.find(id);
          if (q == m2.pending.end())
            return;
          auto req = q->second;
          m2.pending.erase(q);
          reply(req);
        });
      });
    });
    at(now_ + request_timeout, [this, i, proc, id] {
      on_member(i, proc, [this, i, id] {
        auto& mm = members_[static_cast<std::size_t>(i)];
        auto q = mm.pending.find(id);
        if (q == mm.pending.end())
          return;
        auto req = q->second;
        mm.pending.erase(q);
        timed_out(i, req);
      });
    });
  }

  /// Applies request `r` of member `i` at the store now; returns what the
  /// member does with the answer.
  std::function<void(const request&)> serve(int i, const request& r,
                                            uint64_t lease_id) {
    store_expire();
    auto& m = members_[static_cast<std::size_t>(i)];
    switch (r.kind) {
      case request::join: {
        auto held = store_.members.find(m.name);
        if (held != store_.members.end() && lease_alive(held->second))
          return [this, i](const request& q) {
            auto& mm = members_[static_cast<std::size_t>(i)];
            apply(i, mm.st->on_join_failed(q.id, local(mm)));
          };
        auto id = ++store_.next_lease;
        store_.leases[id] = lease{now_ + ttl_ns(), true};
        store_.members[m.name] = id;
        ++store_.revision;
        note("store: ", m.name, " joins with lease ", id);
        return [this, i, id](const request& q) {
          auto& mm = members_[static_cast<std::size_t>(i)];
          mm.lease = id;
          apply(i, mm.st->on_joined(q.id, cfg_.lease_ttl, local(mm)));
        };
      }
      case request::poll: {
        std::vector<std::string> names;
        for (const auto& kv : store_.members)
          names.push_back(kv.first);
        return [this, i, names](const request& q) {
          auto& mm = members_[static_cast<std::size_t>(i)];
          auto l = local(mm);
          std::map<std::string, group_time> seen;
          std::vector<listed_member> view;
          for (const auto& n : names) {
            auto f = mm.first_seen.find(n);
            auto t = f == mm.first_seen.end() ? l : f->second;
            seen[n] = t;
            view.push_back(listed_member{n, t});
          }
          mm.first_seen = std::move(seen);
          apply(i, mm.st->on_members(q.id, view, l));
        };
      }
      case request::claim: {
        std::vector<claim_reply> out;
        bool ok = lease_alive(lease_id);
        for (const auto& fs : r.feeds) {
          auto f = feed_index(fs);
          claim_reply c;
          c.feed = fs;
          if (!ok) {
            c.outcome = claim_outcome::error;
          } else {
            auto o = store_.owners.find(f);
            if (o == store_.owners.end()) {
              auto tok = static_cast<uint64_t>(++store_.revision);
              store_.owners[f] = owner_key{lease_id, tok};
              record_claim(f, tok);
              note("store: ", m.name, " claims ", fs, " token ", tok,
                   " cursor ", cursor_of(f));
              c.outcome = claim_outcome::won;
              c.token = tok;
            } else if (o->second.lease == lease_id) {
              note("store: ", m.name, " already holds ", fs);
              c.outcome = claim_outcome::won;
              c.token = o->second.token;
            } else {
              c.outcome = claim_outcome::held;
            }
            if (c.outcome == claim_outcome::won && cursor_of(f) > 0)
              c.cursor = to_pos(f, cursor_of(f));
          }
          out.push_back(c);
        }
        return [this, i, out](const request& q) {
          auto& mm = members_[static_cast<std::size_t>(i)];
          apply(i, mm.st->on_claimed(q.id, out, local(mm)));
        };
      }
      case request::commit:
      case request::release: {
        std::vector<commit_reply> out;
        std::vector<std::string> hints;
        for (const auto& it : r.items) {
          auto f = feed_index(it.feed);
          auto o = store_.owners.find(f);
          commit_reply c;
          c.feed = it.feed;
          if (opt_.commit_ignores_token && r.kind == request::commit
              && it.cursor) {
            c.outcome = commit_outcome::ok;
            apply_commit(f, it.token, from_pos(f, *it.cursor));
          } else if (o == store_.owners.end() || o->second.token != it.token) {
            c.outcome = commit_outcome::fenced;
          } else {
            c.outcome = commit_outcome::ok;
            if (it.cursor)
              apply_commit(f, it.token, from_pos(f, *it.cursor));
            if (r.kind == request::release) {
              store_.owners.erase(o);
              ++store_.revision;
              note("store: ", m.name, " releases ", it.feed);
              if (!it.hint_to.empty())
                hints.push_back(it.feed + "|" + it.hint_to);
            }
          }
          out.push_back(c);
        }
        bool rel = r.kind == request::release;
        return [this, i, out, rel, hints](const request& q) {
          auto& mm = members_[static_cast<std::size_t>(i)];
          if (rel) {
            for (const auto& h : hints)
              send_hint(i, h);
            apply(i, mm.st->on_released(q.id, out, local(mm)));
          } else {
            apply(i, mm.st->on_committed(q.id, out, local(mm)));
          }
        };
      }
      case request::withdraw: {
        // Deleted only while this lease binds the name (etcd: a txn
        // comparing the key's lease).
        auto w = store_.members.find(m.name);
        if (w != store_.members.end() && w->second == lease_id) {
          store_.members.erase(w);
          ++store_.revision;
          note("store: ", m.name, " withdrawn");
        }
        return [this, i](const request& q) {
          auto& mm = members_[static_cast<std::size_t>(i)];
          apply(i, mm.st->on_withdrawn(q.id, local(mm)));
        };
      }
      case request::renew: {
        double ttl = 0;
        auto l = store_.leases.find(lease_id);
        if (l != store_.leases.end() && l->second.alive) {
          l->second.expiry = now_ + ttl_ns();
          ttl = cfg_.lease_ttl;
        }
        return [this, i, ttl](const request& q) {
          auto& mm = members_[static_cast<std::size_t>(i)];
          auto o = ttl > 0 ? keepalive_outcome::ok : keepalive_outcome::lost;
          apply(i, mm.st->on_keepalive(q.id, o, ttl, local(mm)));
        };
      }
    }
    return [](const request&) {
    };
  }

  void timed_out(int i, const request& r) {
    auto& m = members_[static_cast<std::size_t>(i)];
    auto l = local(m);
    switch (r.kind) {
      case request::join: apply(i, m.st->on_join_failed(r.id, l)); break;
      case request::poll: break;
      case request::claim: apply(i, m.st->on_claim_failed(r.id, l)); break;
      case request::commit: apply(i, m.st->on_commit_failed(r.id, l)); break;
      case request::release: apply(i, m.st->on_release_failed(r.id, l)); break;
      case request::renew:
        apply(i, m.st->on_keepalive(r.id, keepalive_outcome::error, 0, l));
        break;
      case request::withdraw:
        apply(i, m.st->on_withdraw_failed(r.id, l));
        break;
    }
    schedule_tick(i);
  }

  void send_hint(int from, const std::string& h) {
    auto bar = h.find('|');
    auto feed = h.substr(0, bar);
    auto to = h.substr(bar + 1);
    for (std::size_t j = 0; j < members_.size(); ++j) {
      if (members_[j].name != to || !members_[j].alive)
        continue;
      auto proc = members_[j].proc;
      auto ji = static_cast<int>(j);
      at(now_ + delay(members_[static_cast<std::size_t>(from)]),
         [this, ji, proc, feed] {
           on_member(ji, proc, [this, ji, feed] {
             auto& mm = members_[static_cast<std::size_t>(ji)];
             apply(ji, mm.st->on_handoff_hint(feed, local(mm)));
           });
         });
    }
  }

  void apply(int i, const group_actions& as) {
    auto& m = members_[static_cast<std::size_t>(i)];
    for (const auto& a : as) {
      if (auto j = std::get_if<join_lease>(&a)) {
        note(m.name, " join gen ", j->generation);
        send(i, request{request::join, j->request, {}, {}});
      } else if (auto p = std::get_if<poll_members>(&a)) {
        send(i, request{request::poll, p->request, {}, {}});
      } else if (auto c = std::get_if<claim_feeds>(&a)) {
        note(m.name, " claims ", c->feeds.size(), " feeds (request ",
             c->request, ")");
        send(i, request{request::claim, c->request, c->feeds, {}});
      } else if (auto s = std::get_if<spawn_watcher>(&a)) {
        spawn(i, *s);
      } else if (auto x = std::get_if<stop_watcher>(&a)) {
        stop(i, *x);
      } else if (auto cc = std::get_if<commit_cursors>(&a)) {
        std::vector<release_item> items;
        for (const auto& it : cc->items)
          items.push_back(release_item{it.feed, it.token, it.cursor, {}});
        send(i, request{request::commit, cc->request, {}, items});
      } else if (auto r = std::get_if<release_feeds>(&a)) {
        send(i, request{request::release, r->request, {}, r->items});
      } else if (auto rn = std::get_if<renew_lease>(&a)) {
        send(i, request{request::renew, rn->request, {}, {}});
      } else if (auto fw = std::get_if<fence_watchers>(&a)) {
        for (std::size_t f = 0; f < m.watchers.size(); ++f) {
          if (m.watchers[f].running) {
            m.watchers[f].deadline = fw->deadline;
            try_deliver(i, static_cast<int>(f));
          }
        }
      } else if (std::get_if<hold_deliveries>(&a)) {
        note(m.name, " HOLD");
        for (auto& w : m.watchers)
          w.held = w.running;
      } else if (auto u = std::get_if<unhold_deliveries>(&a)) {
        note(m.name, " unhold");
        for (std::size_t f = 0; f < m.watchers.size(); ++f) {
          if (m.watchers[f].running) {
            m.watchers[f].held = false;
            m.watchers[f].deadline = u->deadline;
            try_deliver(i, static_cast<int>(f));
          }
        }
      } else if (auto wd = std::get_if<withdraw_member>(&a)) {
        note(m.name, " withdraws");
        send(i, request{request::withdraw, wd->request, {}, {}});
      } else if (std::get_if<revoke_lease>(&a)) {
        auto lease_id = m.lease;
        auto mi = &m;
        if (!mi->partitioned && !store_.down)
          at(now_ + delay(m), [this, lease_id] {
            store_expire();
            revoke(lease_id);
          });
      }
    }
    if (m.st->phase() == group_phase::left) {
      note(m.name, " has left");
      m.alive = false;
      for (auto& w : m.watchers)
        w = watcher{};
      return;
    }
    schedule_tick(i);
  }

  // -- watchers -------------------------------------------------------------
  bool gate_open(const member& m, const watcher& w) const {
    if (!w.running)
      return false;
    if (opt_.ignore_fence)
      return true;
    return !w.held && local(m) < w.deadline;
  }

  void spawn(int i, const spawn_watcher& s) {
    auto& m = members_[static_cast<std::size_t>(i)];
    auto f = feed_index(s.feed);
    auto& w = m.watchers[static_cast<std::size_t>(f)];
    if (w.running) {
      fail("sim: two watchers of " + s.feed + " in " + m.name);
      return;
    }
    w = watcher{};
    w.running = true;
    w.token = s.token;
    w.cursor = opt_.resume_from_start || !s.resume ? 0 : from_pos(f, *s.resume);
    w.deadline = s.fence_deadline;
    w.instance = ++next_watcher_;
    note(m.name, " spawns ", s.feed, " token ", s.token, " at ", w.cursor);
    on_spawn(i, f, s.token);
    try_deliver(i, f);
  }

  void stop(int i, const stop_watcher& s) {
    auto& m = members_[static_cast<std::size_t>(i)];
    auto f = feed_index(s.feed);
    auto& w = m.watchers[static_cast<std::size_t>(f)];
    if (!w.running)
      return;
    auto final_cursor = w.cursor;
    auto token = w.token;
    w = watcher{};
    note(m.name, " stops ", s.feed, " (", to_string(s.reason), ")");
    auto proc = m.proc;
    auto feed = s.feed;
    at(now_ + 1 * ms, [this, i, proc, feed, token, final_cursor] {
      on_member(i, proc, [this, i, feed, token, final_cursor] {
        auto& mm = members_[static_cast<std::size_t>(i)];
        apply(
          i, mm.st->on_watcher_stopped(
               feed, token, to_pos(feed_index(feed), final_cursor), local(mm)));
      });
    });
  }

  void try_deliver(int i, int f) {
    auto& m = members_[static_cast<std::size_t>(i)];
    auto& w = m.watchers[static_cast<std::size_t>(f)];
    if (!w.running || w.scheduled || !gate_open(m, w)
        || w.cursor >= published(f))
      return;
    w.scheduled = true;
    auto proc = m.proc;
    auto inst = w.instance;
    at(now_ + uniform(2 * ms, 20 * ms), [this, i, f, proc, inst] {
      on_member(i, proc, [this, i, f, inst] {
        auto& mm = members_[static_cast<std::size_t>(i)];
        auto& ww = mm.watchers[static_cast<std::size_t>(f)];
        if (!ww.running || ww.instance != inst)
          return;
        ww.scheduled = false;
        if (gate_open(mm, ww) && ww.cursor < published(f))
          deliver(i, f, false);
        try_deliver(i, f);
      });
    });
  }

  void deliver(int i, int f, bool inflight) {
    auto& m = members_[static_cast<std::size_t>(i)];
    auto& w = m.watchers[static_cast<std::size_t>(f)];
    auto id = w.cursor + 1;
    w.cursor = id;
    on_delivery(i, f, w.token, id, inflight);
    apply(i, m.st->on_progress(feed_name(f), w.token, to_pos(f, id), local(m)));
  }

  // -- faults ---------------------------------------------------------------
  void pause(int i, int64_t dur) {
    auto& m = members_[static_cast<std::size_t>(i)];
    if (!m.alive || m.paused)
      return;
    m.paused = true;
    ++m.pause_no;
    note(m.name, " PAUSE for ", static_cast<double>(dur) / sec, " s");
    // A delivery may already be dispatched (its gate passed) when the
    // process stops: it completes after the resume, gate or not.
    for (std::size_t f = 0; f < m.watchers.size(); ++f) {
      auto& w = m.watchers[f];
      if (w.running && gate_open(m, w)
          && w.cursor < published(static_cast<int>(f)) && chance(0.5))
        w.inflight = true;
    }
    auto proc = m.proc;
    at(now_ + dur, [this, i, proc] { resume(i, proc); });
  }

  void resume(int i, uint64_t proc) {
    auto& m = members_[static_cast<std::size_t>(i)];
    if (!m.alive || m.proc != proc || !m.paused)
      return;
    m.paused = false;
    note(m.name, " resumes");
    for (std::size_t f = 0; f < m.watchers.size(); ++f) {
      auto& w = m.watchers[f];
      if (w.running && w.inflight) {
        w.inflight = false;
        if (w.cursor < published(static_cast<int>(f)))
          deliver(i, static_cast<int>(f), true);
        if (!m.alive || m.paused)
          return;
      }
    }
    auto d = std::move(m.deferred);
    m.deferred.clear();
    for (auto& fn : d) {
      if (!m.alive || m.proc != proc)
        return;
      fn();
    }
    schedule_tick(i);
  }

  // -- the ledger and the checker ---------------------------------------------
  std::vector<int64_t> ledger_; // events published per feed (ids 1..n)

  int64_t published(int f) const {
    return ledger_[static_cast<std::size_t>(f)];
  }

  int64_t cursor_of(int f) const {
    return store_.cursor[static_cast<std::size_t>(f)];
  }

  // Rewinds: the feed's positions restart (a ledger rewind, a catchup
  // epoch change) while event ids stay global, so the invariants keep
  // comparing ids. Era e holds ids (base[e], base[e + 1]]; an id's
  // position is (e, id - base[e]) in the epoch "e<e>".
  std::vector<std::vector<int64_t>> era_base_;

  group_position to_pos(int f, int64_t id) const {
    const auto& bases = era_base_[static_cast<std::size_t>(f)];
    uint64_t e = 0;
    while (e + 1 < bases.size() && bases[e + 1] < id)
      ++e;
    if (opt_.positions_without_era)
      return group_position{0, id - bases[e], {}};
    return group_position{e, id - bases[e], "e" + std::to_string(e)};
  }

  int64_t from_pos(int f, const group_position& p) {
    const auto& bases = era_base_[static_cast<std::size_t>(f)];
    if (p.era >= bases.size()) {
      fail("sim: position in unknown era " + std::to_string(p.era));
      return 0;
    }
    return bases[p.era] + p.offset;
  }

  struct tenure {
    uint64_t token = 0;
    int64_t resume = 0; // store cursor at the claim
    int64_t claimed_at = 0;
    int64_t last_id = 0; // highest delivered
    int64_t max_commit = 0;
    std::vector<int64_t> ids;
    uint64_t proc = 0;
    bool delivered = false;
  };
  // Per feed: tenures by token (tokens grow with the store revision).
  std::vector<std::map<uint64_t, tenure>> tenures_;
  std::vector<std::vector<int>> delivered_count_;
  std::vector<int64_t> last_cursor_seen_;
  std::vector<uint64_t> newest_token_;
  std::map<std::string, int> inflight_used_;

  void record_claim(int f, uint64_t token) {
    auto& t = tenures_[static_cast<std::size_t>(f)][token];
    t.token = token;
    t.resume = cursor_of(f);
    t.claimed_at = now_;
    newest_token_[static_cast<std::size_t>(f)] = token;
  }

  void apply_commit(int f, uint64_t token, int64_t c) {
    auto& ts = tenures_[static_cast<std::size_t>(f)];
    auto t = ts.find(token);
    int64_t delivered_max = t == ts.end() ? 0 : t->second.last_id;
    if (c > std::max(delivered_max, cursor_of(f)))
      fail("I4: commit of " + feed_name(f) + " at " + std::to_string(c)
           + " beyond what token " + std::to_string(token) + " delivered ("
           + std::to_string(delivered_max) + ")");
    if (c < cursor_of(f))
      fail("I6: commit of " + feed_name(f) + " moves the cursor back from "
           + std::to_string(cursor_of(f)) + " to " + std::to_string(c));
    store_.cursor[static_cast<std::size_t>(f)] = std::max(c, cursor_of(f));
    if (t != ts.end())
      t->second.max_commit = std::max(t->second.max_commit, c);
  }

  void on_delivery(int i, int f, uint64_t token, int64_t id, bool inflight) {
    auto& m = members_[static_cast<std::size_t>(i)];
    ++result_.deliveries;
    auto& count = delivered_count_[static_cast<std::size_t>(f)];
    if (count.size() <= static_cast<std::size_t>(id))
      count.resize(static_cast<std::size_t>(id) + 1, 0);
    ++count[static_cast<std::size_t>(id)];
    auto fs = feed_name(f);
    // I1 (deliveries): nothing older than the newest granted token.
    if (token < newest_token_[static_cast<std::size_t>(f)]) {
      auto key = m.name + "/" + std::to_string(m.proc) + "/" + fs + "/"
                 + std::to_string(m.pause_no);
      if (!inflight || inflight_used_[key]++ > 0)
        fail("I1: " + m.name + " delivered " + fs + "#" + std::to_string(id)
             + " with token " + std::to_string(token) + " after token "
             + std::to_string(newest_token_[static_cast<std::size_t>(f)])
             + " was granted");
      ++result_.inflight_overlaps;
    }
    auto& ts = tenures_[static_cast<std::size_t>(f)];
    auto t = ts.find(token);
    if (t == ts.end()) {
      fail("sim: delivery with a token the store never granted");
      return;
    }
    auto& tn = t->second;
    if (!tn.delivered) {
      tn.delivered = true;
      tn.proc = m.proc;
      if (id != tn.resume + 1)
        fail("I4: first delivery of " + fs + " under token "
             + std::to_string(token) + " is #" + std::to_string(id)
             + ", the committed cursor at the claim was "
             + std::to_string(tn.resume));
    } else {
      if (tn.proc != m.proc)
        fail("I1: two processes deliver under token " + std::to_string(token));
      if (id <= tn.last_id)
        fail("I3: " + fs + " token " + std::to_string(token) + " delivered #"
             + std::to_string(id) + " after #" + std::to_string(tn.last_id));
    }
    tn.last_id = std::max(tn.last_id, id);
    tn.ids.push_back(id);
    note(m.name, " delivers ", fs, "#", id, " token ", token,
         inflight ? " (in flight since the pause)" : "");
  }

  void on_spawn(int i, int f, uint64_t token) {
    (void)token;
    for (auto it = takeovers_.begin(); it != takeovers_.end();) {
      if (it->feed == f
          && it->from != members_[static_cast<std::size_t>(i)].name)
        it = takeovers_.erase(it);
      else
        ++it;
    }
  }

  struct takeover_check {
    int feed;
    std::string from;
    int64_t deadline;
    const char* what;
  };
  std::vector<takeover_check> takeovers_;

  void check_step() {
    // I1 (state): at most one open gate per feed.
    for (int f = 0; f < feeds_; ++f) {
      const member* open = nullptr;
      for (const auto& m : members_) {
        if (!m.alive)
          continue;
        if (gate_open(m, m.watchers[static_cast<std::size_t>(f)])) {
          if (open != nullptr) {
            fail("I1: " + open->name + " and " + m.name + " both may deliver "
                 + feed_name(f));
            return;
          }
          open = &m;
        }
      }
      // I6: the committed cursor never moves back.
      auto c = cursor_of(f);
      if (c < last_cursor_seen_[static_cast<std::size_t>(f)])
        fail("I6: the cursor of " + feed_name(f) + " moved back");
      last_cursor_seen_[static_cast<std::size_t>(f)] = c;
    }
    // I5: takeovers due.
    for (const auto& t : takeovers_)
      if (now_ > t.deadline) {
        fail(std::string{"I5: "} + feed_name(t.feed) + " not taken over from "
             + t.from + " within " + t.what);
        return;
      }
  }

  void check_end() {
    for (int f = 0; f < feeds_; ++f) {
      auto fs = feed_name(f);
      auto n = published(f);
      const auto& count = delivered_count_[static_cast<std::size_t>(f)];
      uint64_t total = 0;
      for (int64_t id = 1; id <= n; ++id) {
        auto c = static_cast<std::size_t>(id) < count.size()
                   ? count[static_cast<std::size_t>(id)]
                   : 0;
        if (c == 0) {
          fail("I2: " + fs + "#" + std::to_string(id) + " never delivered");
          return;
        }
        total += static_cast<uint64_t>(c);
      }
      if (cursor_of(f) != n) {
        fail("I2: " + fs + " committed " + std::to_string(cursor_of(f)) + " of "
             + std::to_string(n) + " after quiescing");
        return;
      }
      auto dups = total - static_cast<uint64_t>(n);
      result_.duplicates += dups;
      // I4 (exact): the duplicates are the events each tenure delivered
      // above the cursor its successor resumed from.
      uint64_t expected = 0;
      const auto& ts = tenures_[static_cast<std::size_t>(f)];
      for (auto it = ts.begin(); it != ts.end(); ++it) {
        auto next = std::next(it);
        auto bound = next == ts.end() ? cursor_of(f) : next->second.resume;
        for (auto id : it->second.ids)
          expected += id > bound;
      }
      if (dups != expected) {
        fail("I4: " + fs + " has " + std::to_string(dups)
             + " duplicates, the events delivered after the last commits are "
             + std::to_string(expected));
        return;
      }
    }
  }

  // -- the schedule -----------------------------------------------------------
  enum class fault_kind { crash, pause, partition, outage, slow, join, leave };

  struct fault {
    fault_kind kind;
    int64_t start;
    int64_t end;
    int who; // member slot, or -1
  };

  int64_t ttl_ns() const {
    return static_cast<int64_t>(cfg_.lease_ttl * 1e9);
  }

  int64_t end_ = 0;
  int64_t faults_end_ = 0;

  void setup() {
    feeds_ = static_cast<int>(uniform(3, 11));
    int m0 = static_cast<int>(uniform(2, 6));
    // Half the schedules run the defaults; the others vary the knobs that
    // change the decisions' shape (batches of one, slow spawns, no settle
    // or rebalance delay, a slower checkpoint, a window of one request).
    if (chance(0.5)) {
      const std::size_t batches[] = {1, 2, 64};
      cfg_.batch = batches[uniform(0, 3)];
      const double checkpoints[] = {0.3, 1.0, 2.5};
      cfg_.checkpoint_interval = checkpoints[uniform(0, 3)];
      cfg_.initial_settle = chance(0.5) ? 0.0 : 3.0;
      cfg_.rebalance_delay = chance(0.5) ? 0.0 : 5.0;
      cfg_.max_starts_per_second = chance(0.3) ? 4 : 1000;
      cfg_.reconcile_interval = chance(0.5) ? 2.0 : 5.0;
      // A window of one request per kind: claims, commits and releases
      // wait for slots (with batches of one or two it binds often).
      cfg_.max_inflight_batches = chance(0.5) ? 1 : 4;
    }
    ledger_.assign(static_cast<std::size_t>(feeds_), 0);
    era_base_.assign(static_cast<std::size_t>(feeds_), {0});
    store_.cursor.assign(static_cast<std::size_t>(feeds_), 0);
    tenures_.assign(static_cast<std::size_t>(feeds_), {});
    delivered_count_.assign(static_cast<std::size_t>(feeds_), {});
    last_cursor_seen_.assign(static_cast<std::size_t>(feeds_), 0);
    newest_token_.assign(static_cast<std::size_t>(feeds_), 0);
    const int64_t faults_begin = 6 * sec;
    faults_end_ = faults_begin + uniform(15 * sec, 30 * sec);
    end_ = faults_end_ + 35 * sec;
    note("seed ", opt_.seed, ": ", m0, " members, ", feeds_, " feeds");
    for (int i = 0; i < m0; ++i)
      add_member();
    // Publishing: each feed at its own rate until the faults end.
    for (int f = 0; f < feeds_; ++f) {
      auto gap = uniform(150 * ms, 900 * ms);
      for (int64_t t = uniform(0, gap); t < faults_end_;
           t += uniform(gap / 2, gap * 3 / 2)) {
        at(t, [this, f] {
          ++ledger_[static_cast<std::size_t>(f)];
          // Now and then the feed rewinds: positions restart after this
          // event in a new era.
          if (chance(0.03)) {
            era_base_[static_cast<std::size_t>(f)].push_back(published(f));
            note("feed ", feed_name(f), " rewinds after ", published(f));
          }
          for (std::size_t i = 0; i < members_.size(); ++i)
            if (members_[i].alive && !members_[i].paused)
              try_deliver(static_cast<int>(i), f);
        });
      }
    }
    // Faults: sometimes a single crash or leave (where I5 is checkable),
    // else a random mix.
    std::vector<fault> plan;
    if (chance(0.5)) {
      // One fault alone, as the chaos scenarios have them: a crash (S2), a
      // leave (S3), a pause for about 2 TTL (S7), a store cut (S5), a
      // store outage (S8).
      auto t = uniform(faults_begin + 2 * sec, faults_end_ - 8 * sec);
      auto who = static_cast<int>(uniform(0, m0));
      auto long_dur = uniform(2 * ttl_ns() - 2 * sec, 2 * ttl_ns() + 2 * sec);
      auto end = std::min(t + long_dur, faults_end_);
      switch (uniform(0, 5)) {
        case 0: plan.push_back({fault_kind::crash, t, t, who}); break;
        case 1: plan.push_back({fault_kind::leave, t, t, who}); break;
        case 2: plan.push_back({fault_kind::pause, t, end, who}); break;
        case 3: plan.push_back({fault_kind::partition, t, end, who}); break;
        default: plan.push_back({fault_kind::outage, t, end, who}); break;
      }
    } else {
      for (int64_t t = faults_begin + uniform(0, 3 * sec); t < faults_end_;
           t += uniform(1 * sec, 7 * sec)) {
        auto k = static_cast<fault_kind>(uniform(0, 7));
        auto dur = uniform(300 * ms, 12 * sec);
        if (k == fault_kind::crash)
          dur = chance(0.7) ? uniform(1 * sec, 10 * sec) : 0;
        if (k == fault_kind::join || k == fault_kind::leave)
          dur = 0;
        plan.push_back({k, t, std::min(t + dur, faults_end_),
                        static_cast<int>(uniform(0, 8))});
      }
    }
    result_.faults = plan.size();
    for (std::size_t k = 0; k < plan.size(); ++k) {
      auto fl = plan[k];
      bool quiet = true;
      for (std::size_t j = 0; j < plan.size(); ++j)
        if (j != k && plan[j].start <= fl.start + ttl_ns() + 3 * sec
            && plan[j].end >= fl.start - 10 * sec)
          quiet = false;
      at(fl.start, [this, fl, quiet] { inject(fl, quiet); });
    }
    at(faults_end_, [this] { heal(); });
  }

  int pick(int who) {
    std::vector<int> live;
    for (std::size_t i = 0; i < members_.size(); ++i)
      if (members_[i].alive)
        live.push_back(static_cast<int>(i));
    if (live.empty())
      return -1;
    return live[static_cast<std::size_t>(who) % live.size()];
  }

  bool all_settled() const {
    for (const auto& m : members_)
      if (m.alive
          && (m.paused || m.st->phase() != group_phase::active
              || m.st->holding() || m.partitioned || m.slow))
        return false;
    return !store_.down;
  }

  void expect_takeover(int i, int64_t bound, const char* what) {
    auto& m = members_[static_cast<std::size_t>(i)];
    int others = 0;
    for (const auto& o : members_)
      others += o.alive && o.name != m.name;
    if (others == 0)
      return;
    // The spawn rate limit delays a takeover of many feeds: the bucket is
    // allowed to be empty (one second's burst) plus one start per feed.
    auto rate = static_cast<double>(cfg_.max_starts_per_second);
    bound += static_cast<int64_t>(
      (feeds_ <= static_cast<int>(rate) ? 0.0 : 1.0 + feeds_ / rate) * 1e9);
    for (int f = 0; f < feeds_; ++f) {
      if (m.watchers[static_cast<std::size_t>(f)].running) {
        takeovers_.push_back({f, m.name, now_ + bound, what});
        ++result_.takeovers_checked;
      }
    }
  }

  void inject(const fault& fl, bool quiet) {
    ++result_.faults;
    auto poll = static_cast<int64_t>(cfg_.poll_interval * 1e9);
    switch (fl.kind) {
      case fault_kind::crash: {
        auto i = pick(fl.who);
        if (i < 0)
          return;
        // A restart under the same name within the window takes the feeds
        // back (static membership), so I5 is checked only without one.
        bool restarts = fl.end > fl.start;
        bool check = quiet && all_settled()
                     && (!restarts || fl.end > now_ + ttl_ns() + 3 * sec);
        if (check)
          expect_takeover(i, ttl_ns() + poll + epsilon, "lease_ttl + poll + e");
        crash(i);
        if (restarts)
          at(fl.end, [this, i] {
            if (!members_[static_cast<std::size_t>(i)].alive)
              start_member(i);
          });
        return;
      }
      case fault_kind::leave: {
        auto i = pick(fl.who);
        if (i < 0)
          return;
        auto& m = members_[static_cast<std::size_t>(i)];
        if (m.paused)
          return;
        note(m.name, " LEAVE");
        if (quiet && all_settled())
          expect_takeover(i, poll + epsilon, "poll + e");
        apply(i, m.st->leave(local(m)));
        return;
      }
      case fault_kind::pause: {
        auto i = pick(fl.who);
        if (i >= 0)
          pause(i, fl.end - fl.start);
        return;
      }
      case fault_kind::partition: {
        auto i = pick(fl.who);
        if (i < 0)
          return;
        auto proc = members_[static_cast<std::size_t>(i)].proc;
        members_[static_cast<std::size_t>(i)].partitioned = true;
        note(members_[static_cast<std::size_t>(i)].name, " PARTITIONED");
        at(fl.end, [this, i, proc] {
          if (members_[static_cast<std::size_t>(i)].proc == proc) {
            members_[static_cast<std::size_t>(i)].partitioned = false;
            note(members_[static_cast<std::size_t>(i)].name, " heals");
          }
        });
        return;
      }
      case fault_kind::outage:
        store_.down = true;
        note("store DOWN");
        at(fl.end, [this] {
          store_.down = false;
          note("store up");
        });
        return;
      case fault_kind::slow: {
        auto i = pick(fl.who);
        if (i < 0)
          return;
        auto proc = members_[static_cast<std::size_t>(i)].proc;
        members_[static_cast<std::size_t>(i)].slow = true;
        at(fl.end, [this, i, proc] {
          if (members_[static_cast<std::size_t>(i)].proc == proc)
            members_[static_cast<std::size_t>(i)].slow = false;
        });
        return;
      }
      case fault_kind::join: {
        int live = 0;
        for (const auto& m : members_)
          live += m.alive;
        if (live < 5)
          add_member();
        return;
      }
    }
  }

  void heal() {
    note("HEAL");
    store_.down = false;
    bool any = false;
    for (std::size_t i = 0; i < members_.size(); ++i) {
      auto& m = members_[i];
      m.partitioned = false;
      m.slow = false;
      if (m.alive && m.paused)
        resume(static_cast<int>(i), m.proc);
      // A member still leaving does not count: it is about to go.
      any = any
            || (m.alive && m.st->phase() != group_phase::leaving
                && m.st->phase() != group_phase::left);
    }
    if (!any) {
      // Quiescing needs a member: restart a crashed slot, or add one.
      int slot = -1;
      for (std::size_t i = 0; i < members_.size() && slot < 0; ++i)
        if (!members_[i].alive)
          slot = static_cast<int>(i);
      if (slot >= 0)
        start_member(slot);
      else
        add_member();
    }
  }

  group_sim_options opt_;
  rng rng_;
  int64_t now_ = 0;
  uint64_t seq_ = 0;
  std::priority_queue<event> queue_;
  std::string failure_;
  std::vector<std::string> trace_;

public:
  /// Trace lines kept in the result.
  std::size_t trace_keep_ = 80;

private:
  group_sim_result result_;
};

/// Runs one schedule.
inline group_sim_result run_group_sim(const group_sim_options& opt) {
  return group_sim(opt).run();
}

} // namespace outbound::testing
