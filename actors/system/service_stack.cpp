#include "actors/system/service_stack.hpp"

#include "actors/hedge/breaker.hpp"
#include "actors/hedge/endpoint_stats.hpp"
#include "actors/hedge/hedge_messages.hpp"
#include "actors/messages.hpp"
#include "actors/metrics/metrics_observer.hpp"
#include "actors/pool/connection_pool.hpp"
#include "actors/system/system_setup.hpp"
#include "metrics/outbound_metrics.hpp"
#include "protocol/ws_session.hpp"

#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <stdexcept>
#include <utility>

namespace outbound {
inline namespace system {

service_stack::service_stack(caf::actor_system& sys, service_stack_options opts)
  : sys_(sys), opts_(std::move(opts)) {
  // Every config is checked before anything is spawned.
  opts_.client.validate();
  if (opts_.hedging)
    opts_.hedging->config.validate();
  if (opts_.feeds)
    opts_.feeds->validate();
  if (opts_.oracle)
    opts_.oracle->validate();
  if (opts_.metrics)
    opts_.poller.validate();
  io_ = opts_.io ? opts_.io : io_runner_for(sys_);
  try {
    // The pools are the stack's own (client_options::transport), so that the
    // poller can export their counters and stop() can end them.
    pool_ = spawn_connection_pool(sys_, opts_.client, io_);
    client_options co;
    co.io = io_;
    co.transport = pool_;
    if (opts_.metrics) {
      observer_
        = spawn_metrics_observer(sys_, opts_.metrics->client(opts_.name));
      co.observer = observer_;
    }
    co.hedging = opts_.hedging;
    client_ = make_service_client(sys_, opts_.client, std::move(co));
    // The hedging actors outlive the client unless ended: know them now.
    if (opts_.hedging)
      hedging();
    if (opts_.feeds) {
      feed_pool_ = spawn_connection_pool(sys_, *opts_.feeds, io_);
      client_options fo;
      fo.io = io_;
      fo.transport = feed_pool_;
      if (opts_.metrics) {
        feed_observer_ = spawn_metrics_observer(
          sys_, opts_.metrics->client(opts_.feeds_name));
        fo.observer = feed_observer_;
      }
      feed_client_ = make_service_client(sys_, *opts_.feeds, std::move(fo));
      connector_ = make_ws_connector(io_);
    }
    if (opts_.oracle) {
      coalesce_options ko;
      ko.io = io_;
      driver_ = make_coalescing_driver(sys_, *opts_.oracle, std::move(ko));
    }
    if (opts_.metrics) {
      poller_
        = spawn_metrics_poller(sys_, opts_.metrics->collector(), opts_.poller);
      caf::anon_send(poller_, metrics_watch_client{opts_.name, client_});
      caf::anon_send(poller_, metrics_watch_pool{opts_.name, pool_});
      if (feed_pool_)
        caf::anon_send(poller_,
                       metrics_watch_pool{opts_.feeds_name, feed_pool_});
      if (driver_)
        caf::anon_send(poller_,
                       metrics_watch_coalescer{opts_.oracle_name, driver_});
    }
  } catch (...) {
    send_exits();
    throw;
  }
}

service_stack::~service_stack() {
  if (!stopped_)
    send_exits();
}

const hedging_handles& service_stack::hedging() {
  if (!hedging_) {
    hedging_handles h;
    if (opts_.hedging && client_) {
      caf::scoped_actor self{sys_};
      self->request(client_, std::chrono::seconds{5}, hedging_handles_request{})
        .receive([&](hedging_handles& x) { h = std::move(x); },
                 [](caf::error&) {});
    }
    hedging_ = std::move(h);
  }
  return *hedging_;
}

hedge_stats_snapshot service_stack::hedge_stats(caf::timespan timeout) {
  hedge_stats_snapshot s;
  const auto& h = hedging();
  if (!h.stats)
    return s;
  caf::scoped_actor self{sys_};
  self->request(h.stats, timeout, hedge_global_stats_request{})
    .receive([&](hedge_stats_snapshot& x) { s = x; }, [](caf::error&) {});
  return s;
}

feed_watcher_actor service_stack::watch(const std::string& name, feed_config fc,
                                        feed_callbacks callbacks, uint64_t seed,
                                        feed_mode mode) {
  if (stopped_)
    throw std::logic_error("service_stack::watch after stop()");
  if (!feed_client_)
    throw std::logic_error("service_stack::watch without options.feeds");
  feed_watcher_options wo;
  wo.client = feed_client_;
  wo.connector = connector_;
  wo.ws = feed_ws_endpoint::from(*opts_.feeds);
  wo.seed = seed;
  wo.callbacks = std::move(callbacks);
  auto w = spawn_feed_watcher(sys_, std::move(fc), std::move(wo));
  if (poller_)
    caf::anon_send(poller_, metrics_watch_feed{name, mode, w});
  watchers_.push_back(w);
  return w;
}

service_stack_report service_stack::stop(caf::timespan timeout) {
  service_stack_report report;
  if (stopped_)
    return report;
  caf::scoped_actor self{sys_};
  // A last snapshot into the collector, so that a final scrape sees the end.
  if (poller_)
    self->request(poller_, timeout, poll_atom_v)
      .receive([](metrics_poll_report&) {}, [](caf::error&) {});
  report.hedging = hedge_stats();
  if (driver_)
    self->request(driver_, timeout, stats_atom_v)
      .receive([&](coalesce_stats& s) { report.oracle = s; },
               [](caf::error&) {});
  // Every watcher is asked at once; each answers its final counters.
  using handle = decltype(self->request(watchers_[0], timeout, stop_atom_v));
  std::vector<handle> pending;
  pending.reserve(watchers_.size());
  for (auto& w : watchers_)
    pending.push_back(self->request(w, timeout, stop_atom_v));
  auto& t = report.feeds;
  for (auto& h : pending)
    h.receive(
      [&](feed_stats& s) {
        ++t.stopped;
        t.reconnects += s.reconnects;
        t.peer_timeouts += s.peer_timeouts;
        t.overflows += s.overflows;
        t.drain_errors += s.drain_errors;
        t.replay_errors += s.replay_errors;
        if (s.connected)
          ++t.connected;
        if (s.reached)
          ++t.reached;
      },
      [](caf::error&) {});
  watchers_.clear();
  send_exits();
  stopped_ = true;
  return report;
}

void service_stack::send_exits() {
  auto end = [](const auto& handle) {
    if (handle)
      caf::anon_send_exit(handle, caf::exit_reason::user_shutdown);
  };
  for (auto& w : watchers_)
    end(w);
  end(poller_);
  end(driver_);
  end(client_);
  end(feed_client_);
  // The clients do not end what they were given or spawned: the pools, the
  // observers and the hedging actors.
  end(pool_);
  end(feed_pool_);
  end(observer_);
  end(feed_observer_);
  if (hedging_) {
    end(hedging_->stats);
    end(hedging_->breakers);
  }
  watchers_.clear();
  poller_ = nullptr;
  driver_ = nullptr;
  client_ = nullptr;
  feed_client_ = nullptr;
  pool_ = nullptr;
  feed_pool_ = nullptr;
  observer_ = nullptr;
  feed_observer_ = nullptr;
  hedging_ = hedging_handles{};
  connector_.reset();
}

} // namespace system
} // namespace outbound
