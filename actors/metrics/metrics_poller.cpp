#include "actors/metrics/metrics_poller.hpp"

#include "actors/handler_guard.hpp"

#include "config/config_error.hpp"
#include "core/time.hpp"
#include "core/validate.hpp"
#include "metrics/outbound_metrics.hpp"

#include <caf/actor_cast.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <utility>

namespace outbound {
inline namespace metrics {

void metrics_poller_config::validate() const {
  core::check_positive(interval, "metrics.interval");
  core::check_positive(request_timeout, "metrics.request_timeout");
}

namespace {

// Sources are held by address (a weak reference): the poller must never
// keep a feed watcher or a client's hedging actors alive. Each poll
// upgrades the address; a source that is gone is dropped, and the monitor
// drops it as soon as it terminates.

struct hedging_source {
  caf::actor_addr stats;
  caf::actor_addr breakers;
};

struct feed_source {
  caf::actor_addr watcher;
  /// The registered mode, or "" until the watcher reports one.
  std::string mode;
};

/// One poll: how many answers are outstanding, and who waits for it.
struct poll_round {
  uint64_t pending = 0;
  metrics_poll_report report;
  std::optional<caf::typed_response_promise<metrics_poll_report>> promise;
};

struct poller_state {
  std::shared_ptr<snapshot_collector> collector;
  metrics_poller_config cfg;
  std::map<std::string, hedging_source> hedging;
  std::map<std::string, caf::actor_addr> coalescers;
  std::map<std::string, feed_source> feeds;
  std::map<std::string, caf::actor_addr> pools;
  /// Service clients (their retry budgets), by service name.
  std::map<std::string, caf::actor_addr> clients;
  std::map<uint64_t, poll_round> rounds;
  /// Snapshot requests not answered yet, by ask id: their round, the
  /// source asked and its kind. A source that terminates fails its asks at
  /// once (on_down); an answer whose ask is gone is dropped.
  struct open_ask {
    uint64_t round = 0;
    caf::actor_addr source;
    std::string kind;
  };
  std::map<uint64_t, open_ask> asks;
  uint64_t next_ask = 0;
  uint64_t next_round = 0;
  uint64_t timer_token = 0;
};

/// The poller's own interface: the public one plus its interval timer
/// `(poll_atom, token)` (stale tokens are dropped). Spawned with this one,
/// handed out as metrics_poller_actor.
using poller_impl_actor
  = metrics_poller_actor::extend<caf::reacts_to<poll_atom, uint64_t>>;

using self_ptr = poller_impl_actor::stateful_pointer<poller_state>;

void publish_source_counts(self_ptr self) {
  auto& st = self->state;
  std::size_t hedging = 0;
  for (auto& [name, h] : st.hedging)
    hedging += h.stats || h.breakers ? 1 : 0;
  st.collector->set_sources("hedging", hedging);
  st.collector->set_sources("coalescer", st.coalescers.size());
  st.collector->set_sources("feed", st.feeds.size());
  st.collector->set_sources("pool", st.pools.size());
  st.collector->set_sources("client", st.clients.size());
}

void drop_hedging(self_ptr self, const std::string& name) {
  self->state.hedging.erase(name);
  self->state.collector->remove_hedging(name);
}

void drop_coalescer(self_ptr self, const std::string& name) {
  self->state.coalescers.erase(name);
  self->state.collector->remove_coalescer(name);
}

void drop_feed(self_ptr self, const std::string& name) {
  self->state.feeds.erase(name);
  self->state.collector->remove_feed(name);
}

void drop_pool(self_ptr self, const std::string& name) {
  self->state.pools.erase(name);
  self->state.collector->remove_pool(name);
}

void drop_client(self_ptr self, const std::string& name) {
  self->state.clients.erase(name);
  self->state.collector->remove_retry_budget(name);
}

/// Drops every source whose actor is `addr` (a down message).
void finish_one(self_ptr self, uint64_t id, bool ok);

void on_down(self_ptr self, const caf::actor_addr& addr) {
  auto& st = self->state;
  // Its snapshot requests will never be answered: fail them now, so a
  // poll (and whoever waits for its report) does not wait for the
  // request timeout.
  std::vector<uint64_t> failed_rounds;
  for (auto i = st.asks.begin(); i != st.asks.end();) {
    if (i->second.source == addr) {
      st.collector->count_poll_error(i->second.kind);
      failed_rounds.push_back(i->second.round);
      i = st.asks.erase(i);
    } else {
      ++i;
    }
  }
  for (auto round : failed_rounds)
    finish_one(self, round, false);
  std::vector<std::string> names;
  for (auto& [name, h] : st.hedging)
    if (h.stats == addr || h.breakers == addr)
      names.push_back(name);
  for (auto& n : names)
    drop_hedging(self, n);
  names.clear();
  for (auto& [name, a] : st.coalescers)
    if (a == addr)
      names.push_back(name);
  for (auto& n : names)
    drop_coalescer(self, n);
  names.clear();
  for (auto& [name, f] : st.feeds)
    if (f.watcher == addr)
      names.push_back(name);
  for (auto& n : names)
    drop_feed(self, n);
  names.clear();
  for (auto& [name, a] : st.pools)
    if (a == addr)
      names.push_back(name);
  for (auto& n : names)
    drop_pool(self, n);
  names.clear();
  for (auto& [name, a] : st.clients)
    if (a == addr)
      names.push_back(name);
  for (auto& n : names)
    drop_client(self, n);
  publish_source_counts(self);
}

/// One answer (or failure) of round `id` arrived.
void finish_one(self_ptr self, uint64_t id, bool ok) {
  auto i = self->state.rounds.find(id);
  if (i == self->state.rounds.end())
    return;
  auto& r = i->second;
  ++(ok ? r.report.answered : r.report.failed);
  if (--r.pending > 0)
    return;
  if (r.promise)
    r.promise->deliver(r.report);
  self->state.rounds.erase(i);
}

double elapsed_since(self_ptr self, caf::actor_clock::time_point t0) {
  return std::chrono::duration<double>(self->clock().now() - t0).count();
}

/// Sends one snapshot request of round `id` to `dest`; `on_reply` hands
/// the answer to the collector.
/// Closes ask `ask_id`; false when it was closed already (its source went
/// down first).
bool close_ask(self_ptr self, uint64_t ask_id) {
  return self->state.asks.erase(ask_id) > 0;
}

template <class Reply, class Handle, class Request, class OnReply>
void ask(self_ptr self, uint64_t id, const std::string& kind,
         const Handle& dest, Request req, OnReply on_reply) {
  auto& st = self->state;
  ++st.rounds[id].pending;
  ++st.rounds[id].report.requests;
  auto ask_id = st.next_ask++;
  st.asks[ask_id] = poller_state::open_ask{id, dest.address(), kind};
  auto collector = st.collector;
  self
    ->request(dest, core::from_seconds(st.cfg.request_timeout), std::move(req))
    .then(
      [self, id, ask_id, kind, collector, on_reply](Reply& reply) mutable {
        if (!close_ask(self, ask_id))
          return;
        // A collector that throws (a label it refuses, memory) counts as a
        // failed poll of this source; the poller lives on.
        bool ok = guarded(
          "metrics poller",
          [&] {
            on_reply(reply);
            return true;
          },
          [](const call_error&) { return false; });
        if (!ok)
          collector->count_poll_error(kind);
        finish_one(self, id, ok);
      },
      [self, id, ask_id, kind, collector](caf::error&) {
        if (!close_ask(self, ask_id))
          return;
        collector->count_poll_error(kind);
        finish_one(self, id, false);
      });
}

/// Asks every live hedging source of round `id` for its keys and breakers;
/// drops the ones that are gone.
void ask_hedging(self_ptr self, uint64_t id) {
  auto& st = self->state;
  auto collector = st.collector;
  std::vector<std::string> gone;
  for (auto& [name, h] : st.hedging) {
    auto stats = caf::actor_cast<endpoint_stats_actor>(h.stats);
    auto breakers = caf::actor_cast<breaker_actor>(h.breakers);
    if (!stats && !breakers) {
      gone.push_back(name);
      continue;
    }
    auto t0 = self->clock().now();
    auto service = name;
    if (stats)
      ask<hedge_metrics_reply>(self, id, "hedging", stats, hedge_metrics_request{},
          [self, collector, service, t0](hedge_metrics_reply& r) {
            collector->set_hedge_keys(service, std::move(r.keys));
            collector->set_snapshot_seconds("hedging", service,
                                            elapsed_since(self, t0));
          });
    if (breakers)
      ask<breaker_all_reply>(self, id, "hedging", breakers, breaker_all_request{},
          [collector, service](breaker_all_reply& r) {
            collector->set_breakers(service, std::move(r.breakers));
          });
  }
  for (auto& n : gone)
    drop_hedging(self, n);
}

/// Asks every live coalescing driver of round `id` for its stats.
void ask_coalescers(self_ptr self, uint64_t id) {
  auto& st = self->state;
  auto collector = st.collector;
  std::vector<std::string> gone;
  for (auto& [name, addr] : st.coalescers) {
    auto driver = caf::actor_cast<coalescing_driver_actor>(addr);
    if (!driver) {
      gone.push_back(name);
      continue;
    }
    auto t0 = self->clock().now();
    auto service = name;
    ask<coalesce_stats>(self, id, "coalescer", driver, stats_atom_v,
        [self, collector, service, t0](coalesce_stats& s) {
          collector->set_coalescer(service, s);
          collector->set_snapshot_seconds("coalescer", service,
                                          elapsed_since(self, t0));
        });
  }
  for (auto& n : gone)
    drop_coalescer(self, n);
}

/// Asks every live feed watcher of round `id` for its stats.
void ask_feeds(self_ptr self, uint64_t id) {
  auto& st = self->state;
  auto collector = st.collector;
  std::vector<std::string> gone;
  for (auto& [name, f] : st.feeds) {
    auto watcher = caf::actor_cast<feed_watcher_actor>(f.watcher);
    if (!watcher) {
      gone.push_back(name);
      continue;
    }
    auto t0 = self->clock().now();
    auto feed = name;
    ask<feed_stats>(self, id, "feed", watcher, stats_atom_v,
        [self, collector, feed, t0](feed_stats& s) {
          auto i = self->state.feeds.find(feed);
          if (i == self->state.feeds.end())
            return; // dropped meanwhile
          // The mode label is sticky: the registered one, else the first
          // negotiated one, so a feed's series never change labels.
          if (i->second.mode.empty() && s.mode != feed_mode::none)
            i->second.mode = to_string(s.mode);
          auto mode = i->second.mode.empty() ? std::string{"none"}
                                             : i->second.mode;
          collector->set_feed(feed, mode, s);
          collector->set_snapshot_seconds("feed", feed,
                                          elapsed_since(self, t0));
        });
  }
  for (auto& n : gone)
    drop_feed(self, n);
}

/// Asks every live connection pool of round `id` for its stats.
void ask_pools(self_ptr self, uint64_t id) {
  auto& st = self->state;
  auto collector = st.collector;
  std::vector<std::string> gone;
  for (auto& [name, addr] : st.pools) {
    // The pool's stats query is outside the transport port's typed
    // interface: ask through an untyped handle.
    auto pool = caf::actor_cast<caf::actor>(addr);
    if (!pool) {
      gone.push_back(name);
      continue;
    }
    auto t0 = self->clock().now();
    auto service = name;
    ask<pool_stats>(self, id, "pool", pool, stats_atom_v,
        [self, collector, service, t0](pool_stats& s) {
          collector->set_pool(service, s);
          collector->set_snapshot_seconds("pool", service,
                                          elapsed_since(self, t0));
        });
  }
  for (auto& n : gone)
    drop_pool(self, n);
}

/// Asks every live service client of round `id` for its retry budget.
void ask_clients(self_ptr self, uint64_t id) {
  auto& st = self->state;
  auto collector = st.collector;
  std::vector<std::string> gone;
  for (auto& [name, addr] : st.clients) {
    auto client = caf::actor_cast<service_client_actor>(addr);
    if (!client) {
      gone.push_back(name);
      continue;
    }
    auto t0 = self->clock().now();
    auto service = name;
    ask<retry_budget_stats>(
      self, id, "client", client, retry_budget_request{},
      [self, collector, service, t0](retry_budget_stats& s) {
        collector->set_retry_budget(service, s);
        collector->set_snapshot_seconds("client", service,
                                        elapsed_since(self, t0));
      });
  }
  for (auto& n : gone)
    drop_client(self, n);
}

/// Starts a round: one request per live source (what is gone is dropped).
/// Returns its id; a round with nothing to ask is already complete.
uint64_t start_round(self_ptr self) {
  auto id = self->state.next_round++;
  self->state.rounds[id];
  ask_hedging(self, id);
  ask_coalescers(self, id);
  ask_feeds(self, id);
  ask_pools(self, id);
  ask_clients(self, id);
  publish_source_counts(self);
  return id;
}

/// Registers a client's hedging actors under `service` (nothing when it
/// has none).
void watch_hedging(self_ptr self, const std::string& service,
                   const hedging_handles& h) {
  if (!h.stats && !h.breakers)
    return;
  if (h.stats)
    self->monitor(h.stats);
  if (h.breakers)
    self->monitor(h.breakers);
  self->state.hedging[service]
    = hedging_source{h.stats.address(), h.breakers.address()};
  publish_source_counts(self);
}

void arm_timer(self_ptr self) {
  self->delayed_send(self, core::from_seconds(self->state.cfg.interval),
                     poll_atom_v, ++self->state.timer_token);
}

poller_impl_actor::behavior_type
poller_impl(self_ptr self, std::shared_ptr<snapshot_collector> collector,
            metrics_poller_config cfg) {
  self->state.collector = std::move(collector);
  self->state.cfg = cfg;
  self->set_down_handler(
    [self](caf::down_msg& dm) { on_down(self, dm.source); });
  publish_source_counts(self);
  arm_timer(self);
  return {
    [self](metrics_watch_hedging& w) {
      watch_hedging(self, w.service, w.handles);
    },
    [self](metrics_watch_client& w) {
      if (!w.client)
        return;
      // Its retry budget is polled every round (the address only: the
      // poller never keeps a client alive).
      self->monitor(w.client);
      self->state.clients[w.service] = w.client.address();
      publish_source_counts(self);
      auto service = w.service;
      self
        ->request(w.client, core::from_seconds(self->state.cfg.request_timeout),
                  hedging_handles_request{})
        .then([self, service](
                hedging_handles& h) { watch_hedging(self, service, h); },
              [self](caf::error&) {
                self->state.collector->count_poll_error("hedging");
              });
    },
    [self](metrics_watch_coalescer& w) {
      if (!w.driver)
        return;
      self->monitor(w.driver);
      self->state.coalescers[w.service] = w.driver.address();
      publish_source_counts(self);
    },
    [self](metrics_watch_feed& w) {
      if (!w.watcher)
        return;
      self->monitor(w.watcher);
      self->state.feeds[w.feed] = feed_source{
        w.watcher.address(),
        w.mode == feed_mode::none ? std::string{} : to_string(w.mode)};
      publish_source_counts(self);
    },
    [self](metrics_watch_pool& w) {
      if (!w.pool)
        return;
      self->monitor(w.pool);
      self->state.pools[w.service] = w.pool.address();
      publish_source_counts(self);
    },
    [self](poll_atom) {
      auto rp = self->make_response_promise<metrics_poll_report>();
      auto id = start_round(self);
      auto& r = self->state.rounds[id];
      if (r.pending == 0) {
        rp.deliver(r.report);
        self->state.rounds.erase(id);
      } else {
        r.promise = rp;
      }
      return rp;
    },
    [self](poll_atom, uint64_t token) {
      if (token != self->state.timer_token)
        return;
      auto id = start_round(self);
      auto i = self->state.rounds.find(id);
      if (i != self->state.rounds.end() && i->second.pending == 0)
        self->state.rounds.erase(i);
      arm_timer(self);
    },
  };
}

} // namespace

metrics_poller_actor
spawn_metrics_poller(caf::actor_system& sys,
                     std::shared_ptr<snapshot_collector> collector,
                     metrics_poller_config cfg) {
  cfg.validate();
  if (!collector)
    throw config_error("metrics.collector", "no collector");
  auto poller = sys.spawn(poller_impl, std::move(collector), cfg);
  return poller; // the public interface (checked: a subset of the private)
}

} // namespace metrics
} // namespace outbound
