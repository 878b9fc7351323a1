#pragma once

// The wiring a backend's main() puts around outbound, in one object: a
// service client (hedged when asked), the client of its feeds' replay GETs
// with the WebSocket connector, the coalescing driver of an oracle cluster,
// the metrics observers and poller that feed a metrics_registry, the feed
// watchers, and the orderly stop that ends each of them. `outbound demo`
// (apps/demo_cmd.cpp) is built on it; a user's own main can do the same:
//
//   caf::actor_system_config cfg;
//   outbound::configure(cfg);
//   caf::actor_system sys{cfg};
//   auto registry = std::make_shared<outbound::metrics_registry>();
//   outbound::metrics_exposer exposer{registry, 9464};
//   outbound::service_stack_options o;
//   o.name = "users";
//   o.client.base_url = "https://users.internal:8443";
//   o.feeds = o.client;                   // replay + WebSocket, same host
//   o.metrics = registry;
//   outbound::service_stack stack{sys, std::move(o)};
//   stack.watch("orders", feed_cfg, callbacks);
//   ... request(stack.client(), ...) from actors ...
//   auto report = stack.stop();           // before the system ends
//
// Ownership: the stack spawns its actors and keeps their handles; stop()
// ends every actor it spawned (the clients do not end the pools, observers
// and hedging actors they were given, so the stack does), and the
// destructor of a stack never stopped sends the same exit messages without
// waiting for answers. Construct, stop and destroy it on a thread that is
// not a CAF worker (main(), a test thread): stop() and hedging() block on a
// caf::scoped_actor.

#include "actors/call/hedging.hpp"
#include "actors/client/service_client.hpp"
#include "actors/coalesce/coalescing_driver.hpp"
#include "actors/feed/feed_watcher.hpp"
#include "actors/metrics/metrics_poller.hpp"
#include "config/client_config.hpp"
#include "config/coalesce_config.hpp"
#include "core/coalesce_stats.hpp"
#include "core/feed_types.hpp"
#include "core/hedge_stats.hpp"

#include <caf/actor_system.hpp>
#include <caf/timespan.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace outbound {
inline namespace metrics {
class metrics_registry;
} // namespace metrics
inline namespace protocol {
class io_runner;
} // namespace protocol
inline namespace system {

/// What a service_stack wires. Only `client` is required.
struct service_stack_options {
  /// The `service` label of the client's metrics and of its hedging and
  /// pool series. ["default"]
  std::string name = "default";
  /// The service the stack's client calls.
  client_config client;
  /// Hedging of the client's calls (routes, budget, breakers). [none]
  std::optional<hedging_options> hedging;
  /// The feeds' client: replay GETs, and the base URL of the WebSocket
  /// endpoint (feed_ws_endpoint::from). [none: watch() throws]
  std::optional<client_config> feeds;
  /// The `service` label of the feed client's metrics. ["feeds"]
  std::string feeds_name = "feeds";
  /// The oracle cluster of a coalescing driver. [none]
  std::optional<coalesce_config> oracle;
  /// The `service` label of the driver's metrics. ["oracle"]
  std::string oracle_name = "oracle";
  /// Receives every series: one metrics observer per client, and a metrics
  /// poller for the pools, the hedging actors, the driver and the feeds.
  /// [none: no observer, no poller]
  std::shared_ptr<metrics_registry> metrics;
  /// The poller's settings (used with `metrics`).
  metrics_poller_config poller;
  /// The io runner of the sockets. [nullptr: io_runner_for(sys)]
  std::shared_ptr<io_runner> io;
};

/// Sums of the feed watchers' final feed_stats (collected by stop()).
struct feed_totals {
  /// Watchers that answered the stop (the others count nowhere).
  std::size_t stopped = 0;
  /// Of those: connected at the stop / ever reached their server.
  std::size_t connected = 0;
  std::size_t reached = 0;
  uint64_t reconnects = 0;
  uint64_t peer_timeouts = 0;
  uint64_t overflows = 0;
  uint64_t drain_errors = 0;
  uint64_t replay_errors = 0;
};

/// What stop() collected before it ended the actors.
struct service_stack_report {
  feed_totals feeds;
  /// The client's hedging counters (all zero without hedging).
  hedge_stats_snapshot hedging;
  /// The driver's counters (nullopt without a driver, or when it did not
  /// answer).
  std::optional<coalesce_stats> oracle;
};

/// The wiring of one service's client, feeds and oracle driver (see the
/// top of this header).
class service_stack {
public:
  /// Spawns the stack's actors on `sys`. Throws config_error naming the
  /// bad field of any config (`base_url`, `hedging.…`, `oracle.…`, ...)
  /// before it spawns anything.
  service_stack(caf::actor_system& sys, service_stack_options opts);

  /// Ends what stop() has not ended (exit messages, no waiting).
  ~service_stack();

  service_stack(const service_stack&) = delete;
  service_stack& operator=(const service_stack&) = delete;

  /// The service client (hedged when the options asked for it).
  const service_client_actor& client() const {
    return client_;
  }

  /// The feeds' client (invalid without `feeds`).
  const service_client_actor& feed_client() const {
    return feed_client_;
  }

  /// The coalescing driver (invalid without `oracle`).
  const coalescing_driver_actor& driver() const {
    return driver_;
  }

  /// The metrics poller (invalid without `metrics`): a `poll_atom` asks
  /// for a snapshot now.
  const metrics_poller_actor& poller() const {
    return poller_;
  }

  /// The client's hedging actors (both invalid without hedging), asked of
  /// the client once at construction (waiting at most 5 s).
  const hedging_handles& hedging();

  /// The client's hedging counters now (all zero without hedging or when
  /// the stats actor does not answer within `timeout`).
  hedge_stats_snapshot hedge_stats(caf::timespan timeout
                                   = std::chrono::seconds{2});

  /// Spawns a feed watcher on the feeds' client and the stack's connector
  /// and registers it with the poller as `name` with series labelled
  /// mode=`mode` (feed_mode::none: the first negotiated mode). Throws
  /// config_error for a bad `fc`, std::logic_error without `feeds` or
  /// after stop().
  feed_watcher_actor watch(const std::string& name, feed_config fc,
                           feed_callbacks callbacks, uint64_t seed = 0,
                           feed_mode mode = feed_mode::none);

  /// The watchers watch() spawned, in order (empty after stop()).
  const std::vector<feed_watcher_actor>& watchers() const {
    return watchers_;
  }

  /// Ends the stack in the order that loses nothing: a last metrics poll
  /// (a final scrape sees the end), the hedging and driver counters, every
  /// watcher's stop (answering its final feed_stats; each waits at most
  /// `timeout`, all in parallel), then exit messages to the poller, the
  /// driver, both clients, both pools, the observers and the hedging
  /// actors. Idempotent: a second call returns an empty report.
  service_stack_report stop(caf::timespan timeout = std::chrono::seconds{10});

private:
  void send_exits();

  caf::actor_system& sys_;
  service_stack_options opts_;
  std::shared_ptr<io_runner> io_;
  transport_actor pool_;
  observer_actor observer_;
  service_client_actor client_;
  transport_actor feed_pool_;
  observer_actor feed_observer_;
  service_client_actor feed_client_;
  std::shared_ptr<ws_connector> connector_;
  coalescing_driver_actor driver_;
  metrics_poller_actor poller_;
  std::optional<hedging_handles> hedging_;
  std::vector<feed_watcher_actor> watchers_;
  bool stopped_ = false;
};

} // namespace system
} // namespace outbound
