#pragma once

// The metrics poller (docs/ARCHITECTURE.md, "Metrics"): one actor per process
// that asks every registered source for its snapshot every interval and
// hands the answers to the snapshot collector (metrics/outbound_metrics.hpp),
// which renders them when Prometheus scrapes. Sources keep their counters
// in their own state; the poller never blocks (request(...).then) and drops
// a source when it terminates (it monitors each one).
//
//   register ─► sources ─┬─ every interval: (poll_atom, token) ─┐
//                        └─ poll_atom (on demand) ──────────────┴─► round:
//      one request per source ─► collector.set_* ─► all answered ─► report

#include "actors/call/hedging.hpp"
#include "actors/client/service_client.hpp"
#include "actors/coalesce/coalescing_driver.hpp"
#include "actors/feed/feed_watcher.hpp"
#include "actors/messages.hpp"
#include "actors/transport.hpp"

#include <caf/actor_system.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <cstdint>
#include <memory>
#include <string>

namespace outbound {
inline namespace metrics {
class snapshot_collector;

/// Poller settings.
struct metrics_poller_config {
  /// Seconds between two polls (> 0). [1]
  double interval = 1.0;
  /// Seconds a source may take to answer one snapshot request (> 0); a
  /// late answer counts as outbound_metrics_poll_errors_total. [5]
  double request_timeout = 5.0;

  /// Throws config_error naming `metrics.interval` /
  /// `metrics.request_timeout` when not finite and > 0.
  void validate() const;
};

/// Registers a service client's hedging actors under `service` (both
/// handles may be set; an invalid one is skipped).
struct metrics_watch_hedging {
  std::string service;
  hedging_handles handles;
};

/// Registers a service client: the poller polls its retry budget every
/// round (kind "client") and asks it for its hedging_handles once,
/// registering them under `service` (a client that does not hedge adds no
/// hedging source).
struct metrics_watch_client {
  std::string service;
  service_client_actor client;
};

/// Registers a coalescing driver under `service`.
struct metrics_watch_coalescer {
  std::string service;
  coalescing_driver_actor driver;
};

/// Registers a feed watcher named `feed` (a name the user chose, not from
/// the wire) whose series carry mode=`mode` (to_string(feed_mode); when
/// feed_mode::none, the first negotiated mode the watcher reports is used
/// and kept).
struct metrics_watch_feed {
  std::string feed;
  feed_mode mode = feed_mode::none;
  feed_watcher_actor watcher;
};

/// Registers a connection pool (an actor answering `stats_atom ->
/// pool_stats`, as spawn_connection_pool's does) under `service`.
struct metrics_watch_pool {
  std::string service;
  transport_actor pool;
};

/// The answer to an on-demand poll.
struct metrics_poll_report {
  /// Snapshot requests sent in this round.
  uint64_t requests = 0;
  /// Of those: answered in time / failed or timed out.
  uint64_t answered = 0;
  uint64_t failed = 0;
};

/// Typed interface of the metrics poller.
///
/// - `metrics_watch_*`: register a source. Registering a name again for the
///   same kind replaces the old source.
/// - `poll_atom -> metrics_poll_report`: poll every source now; answers
///   when every snapshot of this round was handed to the collector (tests,
///   and a last poll before a final scrape).
///
/// The poller's interval timer is a message of a private extension of this
/// interface (actors/metrics/metrics_poller.cpp).
using metrics_poller_actor = caf::typed_actor<
  caf::reacts_to<metrics_watch_hedging>, caf::reacts_to<metrics_watch_client>,
  caf::reacts_to<metrics_watch_coalescer>, caf::reacts_to<metrics_watch_feed>,
  caf::reacts_to<metrics_watch_pool>,
  caf::replies_to<poll_atom>::with<metrics_poll_report>>;

/// Spawns the poller feeding `collector`. The first interval poll runs one
/// interval after the spawn. The poller never quits on its own (its timer
/// keeps it alive, like any actor with a pending delayed message): send it
/// an exit message (`anon_send_exit(p, exit_reason::user_shutdown)`) before
/// the actor system shuts down. Throws config_error for a bad `cfg`.
metrics_poller_actor
spawn_metrics_poller(caf::actor_system& sys,
                     std::shared_ptr<snapshot_collector> collector,
                     metrics_poller_config cfg = {});

} // namespace metrics
} // namespace outbound

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::metrics_watch_hedging)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::metrics_watch_client)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::metrics_watch_coalescer)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::metrics_watch_feed)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::metrics_watch_pool)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::metrics_poll_report)
