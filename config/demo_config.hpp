#pragma once

// Settings of `outbound demo` (the main job, README): how many feed
// watchers, how long, how many events and requests per second, where the
// metrics are served, and the hedging settings of the demo's service client.
// Plain data with defaults; `outbound demo --config FILE` reads them from a
// JSON object whose keys are the field names below (deploy/demo.example.json
// lists every one). Command-line options override the file.
//
//   {"feeds": 1000, "duration": 60, "rate": 200, "metrics_port": 9464,
//    "traffic": {"requests_per_second": 100, "concurrency": 8},
//    "oracle": {"calls_per_second": 200, "callers": 8},
//    "hedging": {"percentile": 0.95, "budget_percent": 10}}
//
// An unknown key, a value of the wrong type or out of range fails with
// config_error naming the field as `demo.<path>` (`demo.feeds`,
// `demo.hedging.percentile`, `demo.traffic.routes[1]`).

#include "config/hedge_config.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace outbound {
inline namespace config {

/// The request traffic the demo drives through its hedging service client.
struct demo_traffic_config {
  /// Calls per second over all workers (>= 0; 0: no request traffic). [100]
  double requests_per_second = 100.0;
  /// Worker threads making blocking calls (1..256). [8]
  std::size_t concurrency = 8;
  /// Paths called in turn, each relative to the hub (starts with '/'; at
  /// least one). Each distinct path before '?' is a hedging endpoint named
  /// after it ("/fast" → endpoint "fast"). [the hub's latency profiles
  /// /fast, /lognormal (5 % stragglers x10), /flaky]
  std::vector<std::string> routes = {
    "/fast", "/lognormal?mean_ms=5&sd_ms=2&straggler=0.05&mult=10", "/flaky"};
  /// Per-attempt timeout, seconds (> 0). [2]
  double timeout = 2.0;
  /// Overall deadline of one call, seconds (>= timeout). [5]
  double deadline = 5.0;
};

/// The timestamp calls the demo drives through its coalescing driver.
struct demo_oracle_config {
  /// get_ts calls per second over all callers (>= 0; 0: none). [200]
  double calls_per_second = 200.0;
  /// Caller threads (1..256); calls of concurrent callers coalesce. [8]
  std::size_t callers = 8;
  /// Timestamps per call (1..262144). [1]
  uint32_t count = 1;
  /// A caller's own timeout per call, seconds (> 0). [2]
  double timeout = 2.0;
};

/// Everything `outbound demo` needs (see the header comment).
struct demo_config {
  /// Feed watchers, spread round-robin over the ledger, catchup and
  /// ephemeral tiers (0..100000). [1000]
  std::size_t feeds = 1000;
  /// Run time in seconds before the demo stops by itself (> 0, at most one
  /// day). [60]
  double duration = 60.0;
  /// Events published per second (>= 0, <= 100000). [200]
  double rate = 200.0;
  /// Subject groups: event n goes to `demo/<n % groups>/…` and watcher i
  /// follows the prefix `demo/<i % groups>/`, so each event reaches about
  /// feeds / groups watchers (1..100000). [100]
  std::size_t subject_groups = 100;
  /// Port of `GET /metrics` on 127.0.0.1 (0..65535; 0: the system picks).
  /// [9464]
  int metrics_port = 9464;
  /// Seconds between two live status lines (> 0). [1]
  double status_interval = 1.0;
  /// An external hub's base URL (`http://host:port`); empty: the demo
  /// starts the reference hub in-process. [""]
  std::string hub;
  /// Oracle endpoints (`host:port`) of an external hub's cluster; empty with
  /// an external hub: no oracle traffic. Ignored with the embedded hub
  /// (its own cluster is used). []
  std::vector<std::string> oracle_endpoints;
  /// Nodes of the embedded hub's oracle cluster (1..16). [3]
  std::size_t cluster_size = 3;
  /// Feeds exported with their own `feed` label; the rest are summed into
  /// feed="_other" (>= 0). [100]
  std::size_t max_labelled_feeds = 100;
  /// Ledger events the embedded hub retains (>= 1000), so a long run stays
  /// bounded in memory. [100000]
  uint64_t hub_retention = 100000;
  /// Request traffic.
  demo_traffic_config traffic;
  /// Oracle traffic.
  demo_oracle_config oracle;
  /// Hedging of the service client (hedge_config; errors are named
  /// `demo.hedging.<field>`).
  hedge_config hedging;

  /// Throws config_error naming the first bad field (`demo.feeds`,
  /// `demo.traffic.routes[0]`, `demo.hedging.percentile`, ...).
  void validate() const;
};

/// Parses `json_text` (a JSON object of demo_config fields; absent fields
/// keep their defaults) and validates the result. Throws config_error:
/// field `demo` when the text is not a JSON object, `demo.<path>` for an
/// unknown key, a wrong type or a bad value.
demo_config parse_demo_config(std::string_view json_text);

/// Reads the file at `path` and parses it like parse_demo_config. Throws
/// config_error (field `demo`) when the file cannot be read.
demo_config load_demo_config(const std::string& path);

} // namespace config
} // namespace outbound
