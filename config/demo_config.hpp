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
//    "outage": {"calls_per_second": 50, "start": 20, "seconds": 7},
//    "bursts": {"size": 1000, "interval": 5}, "hub_restart_at": 40,
//    "hedging": {"percentile": 0.95, "budget_percent": 10}}
//
// An unknown key, a value of the wrong type or out of range fails with
// config_error naming the field as `demo.<path>` (`demo.feeds`,
// `demo.hedging.percentile`, `demo.traffic.routes[1]`).

#include "config/hedge_config.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace outbound {
inline namespace config {

/// The demo's per-endpoint hedging defaults (see demo_traffic_config).
inline std::map<std::string, endpoint_config> default_endpoints() {
  endpoint_config flaky;
  flaky.percentile = 0.85;
  flaky.budget_percent = 20.0;
  flaky.warmup_delay = 0.02;
  return {{"flaky", flaky}};
}

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
  /// Per-attempt timeout, seconds (> 0, at most 86400). [2]
  double timeout = 2.0;
  /// Overall deadline of one call, seconds (>= timeout, at most
  /// 86400). [5]
  double deadline = 5.0;
  /// Per-endpoint hedging overrides, by endpoint name ("flaky" for
  /// "/flaky?..."; see hedge_config.hpp's endpoint_config: percentile,
  /// budget_percent, hedge_delay, min_delay, warmup_requests,
  /// warmup_delay, window_duration). A learned p95 cannot hedge a route
  /// where 10 % of calls straggle (its p95 is a straggler), so /flaky
  /// hedges at its p85 with a 20 % budget, and during its warmup (its first
  /// 20 calls, before anything is learned) after 20 ms: above the 5-15 ms
  /// of its ordinary calls, so the warmup hedges only stragglers. With
  /// the transport's 10 ms warmup delay half of the first calls wanted a
  /// hedge while the key's bucket still held a token or two, and the
  /// refused ones included stragglers (a short demo run under ASan:
  /// 7-13 refusals on /flaky, in a timed run all in its first 2 s; 0-3
  /// with 20 ms). Each name must be a route's
  /// endpoint (validate() names a typo); a file that sets `routes` but not
  /// `endpoints` keeps the defaults of its own routes only. [{"flaky":
  /// {"percentile": 0.85, "budget_percent": 20, "warmup_delay": 0.02}}]
  std::map<std::string, endpoint_config> endpoints = default_endpoints();
  /// Send every other call through a second client without hedging (same
  /// retry policy, same routes), so the report compares the two in one
  /// run: hedged vs unhedged latency and extra load. [true]
  bool compare_unhedged = true;
};

/// The outage drill (embedded hub only): two clients call one route of
/// the hub at the same rate for the whole run -- outbound's (hedging,
/// breakers and the retry budget, all at their defaults) and a naive
/// retrier (the same retry policy, no budget) -- and the route answers 503
/// for `seconds` from `start` (the hub's outage_path fault). The report
/// compares the attempts per second each sent to the hub during the
/// outage (the hub's own count), against an upper bound the budget
/// guarantees: the primaries of the outage and the 1.5 s before it, plus
/// 20 % of those and of the window before them (savings can be spent),
/// plus the reserve of 10/s x 10 s (apps/demo_cmd.cpp, outage_loop, has
/// the argument). The drill's outbound client hedges with the demo's
/// hedging settings and breakers that open within seconds.
struct demo_outage_config {
  /// Calls per second of each client, the whole run (0..100; 0: no
  /// drill). [50]
  double calls_per_second = 50.0;
  /// When the outage begins, seconds after the start (>= 0; an outage
  /// that would not end before `duration` is skipped). [20]
  double start = 20.0;
  /// How long the route answers 503, seconds (in (0, 7]: the outage and
  /// the 1.5 s before it fit in the retry budget's 10 s window, which
  /// makes the report's ceiling a bound the budget guarantees). [7]
  double seconds = 7.0;
  /// The route: a latency route of the hub ("/fast", "/slow", "/flaky",
  /// "/lognormal", "/steady"; not one of traffic.routes, whose calls
  /// its outage would fail too). ["/steady"]
  std::string route = "/steady";
  /// Attempts per call of both clients (2..10). [4]
  int max_attempts = 4;
};

/// Bursts of timestamp calls on top of the oracle's steady rate: the
/// coalescing driver serves a crowd with few RPCs.
struct demo_burst_config {
  /// Calls sent at once in each burst (0..100000; 0: no bursts). [1000]
  std::size_t size = 1000;
  /// Seconds between bursts (> 0). [5]
  double interval = 5.0;
};

/// The timestamp calls the demo drives through its coalescing driver.
struct demo_oracle_config {
  /// get_ts calls per second over all callers (>= 0; 0: none). [200]
  double calls_per_second = 200.0;
  /// Caller threads (1..256); calls of concurrent callers coalesce. [8]
  std::size_t callers = 8;
  /// Timestamps per call (1..262144). [1]
  uint32_t count = 1;
  /// A caller's own timeout per call, seconds (> 0, at most 86400). [2]
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
  /// When the embedded hub restarts its catch-up tier (a new epoch) and
  /// drops every WebSocket, seconds after the start (>= 0; 0 or past
  /// `duration`: never). [40]
  double hub_restart_at = 40.0;
  /// Request traffic.
  demo_traffic_config traffic;
  /// The outage drill.
  demo_outage_config outage;
  /// Timestamp bursts.
  demo_burst_config bursts;
  /// Oracle traffic.
  demo_oracle_config oracle;
  /// Hedging of the service client (hedge_config; errors are named
  /// `demo.hedging.<field>`).
  hedge_config hedging;

  /// Throws config_error naming the first bad field (`demo.feeds`,
  /// `demo.traffic.routes[0]`, `demo.hedging.percentile`, ...).
  void validate() const;
};

/// The hedging endpoint name of a traffic route: the path before '?'
/// without its leading '/', each further '/' as '_' ("/lognormal?x=1" →
/// "lognormal", "/a/b" → "a_b", "/" → "root").
std::string demo_endpoint_name(const std::string& route);

/// Parses `json_text` (a JSON object of demo_config fields; absent fields
/// keep their defaults) and validates the result. Throws config_error:
/// field `demo` when the text is not a JSON object, `demo.<path>` for an
/// unknown key, a wrong type or a bad value.
demo_config parse_demo_config(std::string_view json_text);

/// Reads the file at `path` and parses it like parse_demo_config. Throws
/// config_error (field `demo`) when the file cannot be read, and
/// config_file_error (config/config_error.hpp: the field as
/// parse_demo_config names it, what() "<path>: <field>: <why>") when its
/// text is not a valid demo config.
demo_config load_demo_config(const std::string& path);

} // namespace config
} // namespace outbound
