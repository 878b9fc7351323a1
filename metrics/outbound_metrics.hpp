#pragma once

// Prometheus exposition of every outbound actor (docs/ARCHITECTURE.md,
// "Metrics"). Two kinds of families live in one registry:
//
//   event-driven   client_metrics (metrics/client_metrics.hpp): the service
//                  client's client_events, recorded as they happen through
//                  the metrics observer (actors/metrics/metrics_observer.hpp);
//   snapshot-based snapshot_collector (below): the hedging actors, the
//                  coalescing driver, feed watchers and connection pools
//                  keep their counters in their own state; the metrics
//                  poller (actors/metrics/metrics_poller.hpp) asks them for
//                  snapshots every interval and hands them here. The
//                  collector renders the latest snapshots when Prometheus
//                  scrapes (on the exposer's thread), so a counter kept by
//                  an actor is exported as a Prometheus counter and a level
//                  as a gauge, without any actor touching a lock on its hot
//                  path.
//
//   actors ──stats──► metrics_poller ──set_*──► snapshot_collector ─┐
//   client ─client_event─► metrics observer ──► client_metrics ─────┤
//                                                 metrics_registry ─┴─► GET
//                                                 (metrics_exposer)    /metrics
//
// Wiring, once per process
// (tests/integration/metrics/metrics_exposer_test.cpp):
//
//   auto reg = std::make_shared<metrics_registry>();
//   metrics_exposer ex{reg, port};                    // GET /metrics
//   client_options o;                                 // event families
//   o.observer = spawn_metrics_observer(sys, reg->client("users"));
//   auto poller = spawn_metrics_poller(sys, reg->collector());
//   anon_send(poller, metrics_watch_client{"users", client});   // hedging
//   anon_send(poller, metrics_watch_coalescer{"oracle", driver});
//   anon_send(poller, metrics_watch_feed{"orders", feed_mode::ledger, w});
//   ...
//   anon_send_exit(poller, exit_reason::user_shutdown); // before sys ends
//
// Naming follows the Prometheus conventions (https://prometheus.io/docs/
// practices/naming/): `outbound_` prefix, base units (seconds), `_total`
// on counters. Labels are bounded: `service` (a name the user gives a
// source), `key` (a hedging key: "endpoint:<registered route name>" or
// "host:<configured host[:port]>", never a raw path; at most
// hedge_config::max_keys per client), `scope` ("host" / "endpoint"),
// `reason`, `outcome`, `kind`, `feed` (a name the user gives a watcher, at
// most metrics_limits::max_labelled_feeds of them) and `mode`.

#include "core/call_types.hpp"
#include "core/coalesce_stats.hpp"
#include "core/feed_types.hpp"
#include "core/hedge_stats.hpp"
#include "core/retry_budget.hpp"

#include <prometheus/collectable.h>
#include <prometheus/histogram.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace outbound {
inline namespace metrics {

class client_metrics;

/// Bounds of the snapshot collector's label sets.
struct metrics_limits {
  /// Feeds that get their own `feed` label (in registration order). Feeds
  /// registered after these are summed into one series per mode with
  /// feed="_other" (counters, and outbound_feed_connected as a count,
  /// outbound_feed_lag_events as the worst lag); their positions are not
  /// exported one by one. outbound_feeds{mode,state}
  /// always counts every watcher. [100]
  std::size_t max_labelled_feeds = 100;
};

/// The label value that aggregates the feeds past
/// metrics_limits::max_labelled_feeds.
inline constexpr const char* other_feeds_label = "_other";

/// The snapshot-based families (see the header comment). Thread-safe:
/// set_* / remove_* come from the poller actor, Collect() from the
/// exposer's thread; one mutex guards the snapshots.
///
/// Hedging (one source per service client; labels service, key; breakers
/// service, scope, key):
///
// clang-format off
/// | metric | type | labels | from |
/// |---|---|---|---|
/// | outbound_hedge_requests_total | counter | service, key | requests planned |
/// | outbound_hedge_fired_total | counter | service, key | hedges sent (every gate passed) |
/// | outbound_hedge_won_total | counter | service, key | races the hedge won |
/// | outbound_hedge_cancelled_total | counter | service, key | races the primary won (the hedge was cancelled) |
/// | outbound_hedge_suppressed_total | counter | service, key, reason="budget"\|"breaker" | hedges not sent |
/// | outbound_hedge_warmup_requests_total | counter | service, key | requests planned with the warmup delay |
/// | outbound_hedge_errors_total | counter | service, key | winners that failed (5xx per breaker config) |
/// | outbound_hedge_budget_tokens | gauge | service, key | tokens in the key's bucket |
/// | outbound_hedge_delay_seconds | gauge | service, key | delay the next request would wait before hedging |
/// | outbound_breaker_state | gauge | service, scope, key | 0 closed, 1 open, 2 half-open |
/// | outbound_breaker_opens_total | counter | service, scope, key | transitions to OPEN |
/// | outbound_breaker_transitions_total | counter | service, scope, key, to="open"\|"half_open"\|"closed" | transitions by the phase entered |
/// | outbound_breaker_window_samples | gauge | service, scope, key | calls in the error-rate window |
/// | outbound_breaker_window_failures | gauge | service, scope, key | failed calls in the window |
// clang-format on
///
/// Coalescing driver (label service):
///
// clang-format off
/// | metric | type | labels | from |
/// |---|---|---|---|
/// | outbound_coalesce_calls_total | counter | service, outcome="ok"\|"error" | get_ts/get_seq calls answered |
/// | outbound_coalesce_waiters_total | counter | service | callers that joined a batch |
/// | outbound_coalesce_rpcs_total | counter | service | batched RPCs (mean batch size = rate(waiters)/rate(rpcs)) |
/// | outbound_coalesce_batch_size | histogram | service | waiters per RPC sent (buckets 1, 2, 4, ..., 4096, +Inf) |
/// | outbound_coalesce_attempts_total | counter | service | exchanges sent (each discovery attempt) |
/// | outbound_coalesce_rejected_total | counter | service, reason="backpressure"\|"invalid" | callers refused at entry |
/// | outbound_coalesce_cold_starts_total | counter | service, decision="at_once"\|"window" | waiters that found their group idle: sent at once by the adaptive cold start, or after the flush window |
/// | outbound_coalesce_pipelined_batches_total | counter | service | batches sent while other RPCs of their group were in flight (coalesce.max_rpcs_in_flight, coalesce.fill_free_slots) |
/// | outbound_coalesce_cancelled_total | counter | service | waiters that left (their own timeout) |
/// | outbound_coalesce_redirects_total | counter | service | 421 answers followed to a hinted leader |
/// | outbound_coalesce_leader_changes_total | counter | service | times the cached leader changed endpoint |
/// | outbound_coalesce_errors_total | counter | service | RPCs ended by a discovery error |
/// | outbound_coalesce_protocol_violations_total | counter | service | answers that failed validation |
/// | outbound_coalesce_uncertain_total | counter | service | seq RPCs with an uncertain outcome |
/// | outbound_coalesce_waiters_held | gauge | service | waiters held now |
/// | outbound_coalesce_rpcs_in_flight | gauge | service | RPCs in flight now |
/// | outbound_coalesce_leader_known | gauge | service | 1 when a fresh leader is cached |
/// | outbound_coalesce_transports | gauge | service | per-endpoint pools held |
// clang-format on
///
/// Feed watchers (labels feed, mode; feeds past the cap as feed="_other"):
///
// clang-format off
/// | metric | type | labels | from |
/// |---|---|---|---|
/// | outbound_feed_events_total | counter | feed, mode | events acknowledged by the subscriber |
/// | outbound_feed_resets_total | counter | feed, mode, cause | resets delivered, by reset_cause (the mode's causes from 0, others once seen; `undeliverable` and `takeover` only once seen) |
/// | outbound_feed_reconnects_total | counter | feed, mode | sessions dialled after the first |
/// | outbound_feed_peer_timeouts_total | counter | feed, mode | sessions closed as a dead peer |
/// | outbound_feed_drain_errors_total | counter | feed, mode, reason | replay pages not read or used, by drain_error_reason (ledger feeds: every reason from 0) |
/// | outbound_feed_replay_errors_total | counter | feed, mode | replay calls that failed |
/// | outbound_feed_overflows_total | counter | feed, mode | sessions closed for undelivered frames |
/// | outbound_feed_oversized_frames_total | counter | feed, mode | WebSocket messages over ws_max_frame_bytes, discarded |
/// | outbound_feed_callback_errors_total | counter | feed, mode | deliveries the subscriber failed |
/// | outbound_feed_connected | gauge | feed, mode | 1 connected (for "_other": how many) |
/// | outbound_feed_position | gauge | feed, mode | ledger cursor, else last seq (labelled feeds only) |
/// | outbound_feed_lag_events | gauge | feed, mode | ledger: max(head the hub announced − cursor, 0); for "_other" the worst feed |
/// | outbound_feeds | gauge | mode, state="connected"\|"disconnected" | every watcher |
// clang-format on
///
/// Connection pools (label service):
///
// clang-format off
/// | metric | type | labels | from |
/// |---|---|---|---|
/// | outbound_pool_dialled_total | counter | service | connections dialled |
/// | outbound_pool_reused_total | counter | service | exchanges on a pooled idle connection |
/// | outbound_pool_stale_discarded_total | counter | service | idle connections found stale |
/// | outbound_pool_cancelled_total | counter | service | exchanges cancelled by their caller |
/// | outbound_pool_idle_expired_total | counter | service | idle connections beyond max_idle_per_endpoint closed after surplus_idle_time |
/// | outbound_pool_idle_connections | gauge | service | idle connections now |
/// | outbound_pool_in_flight | gauge | service | exchanges in flight now |
/// | outbound_pool_pending | gauge | service | exchanges queued for a connection now |
/// | outbound_pool_waited_total | counter | service | exchanges that waited for a connection |
/// | outbound_pool_overflowed_total | counter | service | exchanges refused: queue full |
// clang-format on
///
/// Retry budgets of service clients (label service; kind = "retry" |
/// "hedge"; core/retry_budget.hpp):
///
// clang-format off
/// | metric | type | labels | from |
/// |---|---|---|---|
/// | outbound_retry_budget_deposits_total | counter | service | primary requests (one per call) |
/// | outbound_retry_budget_withdrawals_total | counter | service, kind | retries and hedges the budget paid for |
/// | outbound_retry_budget_refusals_total | counter | service, kind | retries and hedges it refused (not made) |
/// | outbound_retry_budget_returned_total | counter | service, kind | withdrawals given back: hedges the pool refused (never sent) |
/// | outbound_retry_budget_balance | gauge | service | extra attempts it would grant now |
/// | outbound_retry_budget_enabled | gauge | service | 1 when it refuses (retry_budget_config::enabled) |
// clang-format on
///
/// The poller itself (kind = "hedging" | "coalescer" | "feed" | "pool" |
/// "client"):
///
// clang-format off
/// | metric | type | labels | from |
/// |---|---|---|---|
/// | outbound_metrics_sources | gauge | kind | sources registered and alive |
/// | outbound_metrics_poll_errors_total | counter | kind | snapshot requests that failed or timed out |
/// | outbound_metrics_snapshot_seconds | gauge | kind, source | round trip of the last snapshot (labelled sources) |
// clang-format on
///
/// Mailbox depth: CAF 0.17's `scheduled_actor::mailbox().size()` calls the
/// consumer-side `fetch_more()` of the actor's inbox and is safe only on
/// the actor's own thread, so no other actor can read it. The snapshot
/// round trip above (time from the request to the answer, i.e. the time the
/// request waited in the source's mailbox plus its handling) is exported
/// instead as the queueing signal.
class snapshot_collector : public prometheus::Collectable {
public:
  explicit snapshot_collector(metrics_limits limits = {});

  /// Latest counters, tokens and delays of one hedging client's keys
  /// (replaces the previous set: evicted keys disappear).
  void set_hedge_keys(const std::string& service,
                      std::vector<hedge_key_metrics> keys);

  /// Latest state of one hedging client's breakers (replaces the set).
  void set_breakers(const std::string& service,
                    std::vector<breaker_key_snapshot> breakers);

  /// Latest stats of a coalescing driver.
  void set_coalescer(const std::string& service, const coalesce_stats& s);

  /// Latest stats of a feed watcher. The first call for a `feed` name
  /// decides whether it is labelled (the first max_labelled_feeds names)
  /// or aggregated. `mode` is the label (to_string(feed_mode)).
  void set_feed(const std::string& feed, const std::string& mode,
                const feed_stats& s);

  /// Latest stats of a connection pool.
  void set_pool(const std::string& service, const pool_stats& s);

  /// Latest counters of a service client's retry budget.
  void set_retry_budget(const std::string& service,
                        const retry_budget_stats& s);

  /// Drops a dead source's series. An aggregated feed's counters stay in
  /// the "_other" sums (they never go down).
  void remove_hedging(const std::string& service);
  void remove_coalescer(const std::string& service);
  void remove_feed(const std::string& feed);
  void remove_pool(const std::string& service);
  void remove_retry_budget(const std::string& service);

  /// Poller bookkeeping: sources alive per kind, a failed snapshot request,
  /// the round trip (seconds) of the last snapshot of `source`.
  void set_sources(const std::string& kind, std::size_t n);
  void count_poll_error(const std::string& kind);
  void set_snapshot_seconds(const std::string& kind, const std::string& source,
                            double seconds);

  /// Renders every family from the snapshots held now (name order).
  std::vector<prometheus::MetricFamily> Collect() const override;

  const metrics_limits& limits() const {
    return limits_;
  }

private:
  struct feed_entry {
    std::string mode;
    feed_stats stats;
    bool labelled = false;
  };

  metrics_limits limits_;
  mutable std::mutex mtx_;
  std::map<std::string, std::vector<hedge_key_metrics>> hedge_keys_;
  std::map<std::string, std::vector<breaker_key_snapshot>> breakers_;
  std::map<std::string, coalesce_stats> coalescers_;
  std::map<std::string, feed_entry> feeds_;
  std::size_t labelled_feeds_ = 0;
  /// Counters of aggregated feeds that were removed, per mode (so the
  /// "_other" sums never decrease).
  std::map<std::string, feed_stats> retired_other_;
  std::map<std::string, pool_stats> pools_;
  std::map<std::string, retry_budget_stats> budgets_;
  std::map<std::string, std::size_t> sources_;
  std::map<std::string, uint64_t> poll_errors_;
  std::map<std::pair<std::string, std::string>, double> snapshot_seconds_;
};

/// One process's metrics: a prometheus::Registry for the event-driven
/// families plus the snapshot collector, both served by one
/// metrics_exposer. Create one per process and share it.
class metrics_registry {
public:
  explicit metrics_registry(metrics_limits limits = {});

  /// The event-driven registry (client_metrics families).
  const std::shared_ptr<prometheus::Registry>& registry() const {
    return registry_;
  }

  /// The snapshot families, fed by a metrics_poller.
  const std::shared_ptr<snapshot_collector>& collector() const {
    return collector_;
  }

  /// The client metrics of `service` (created on first use, then shared):
  /// hand it to spawn_metrics_observer (the handle keeps the registry's
  /// families alive). `buckets` are the latency histogram's upper bounds in
  /// seconds [1 ms doubling to ~33 s]; they are fixed by the first call for
  /// a service.
  std::shared_ptr<client_metrics>
  client(const std::string& service,
         prometheus::Histogram::BucketBoundaries buckets = {});

  /// Both collectables, for an exposer or a serializer.
  std::vector<std::weak_ptr<prometheus::Collectable>> collectables() const;

  /// The Prometheus text exposition (format 0.0.4) of every family now.
  std::string serialize() const;

private:
  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<snapshot_collector> collector_;
  std::mutex mtx_;
  std::map<std::string, std::shared_ptr<client_metrics>> clients_;
};

} // namespace metrics
} // namespace outbound
