#pragma once

// `outbound demo` (the main job, README): a backend that hosts many feeds
// and calls its services through outbound, on one command with no
// arguments. It starts the reference hub in-process (oracle cluster of 3,
// latency profiles, the ledger/catchup/ephemeral tiers and replay) unless
// --hub names an external one, and one CAF actor system with
//
//   - a service client that hedges the latency routes (/fast, /lognormal,
//     /flaky), driven at traffic.requests_per_second by worker threads;
//   - a coalescing driver on the oracle cluster, driven at
//     oracle.calls_per_second by caller threads;
//   - N feed watchers [1000] spread round-robin over the three tiers, each
//     following one subject group, fed by events published at --rate;
//   - the metrics poller feeding `GET /metrics` on 127.0.0.1:--metrics-port.
//
// Output: the first stdout line is JSON ({"metrics":URL,"hub":URL,...});
// one status line per second on stderr; a report table on stdout at the
// end. With `--report json` stdout carries only the report, as one JSON
// document (the first line goes to stderr).
//
// The report compares, in the same run: hedged vs unhedged calls on the
// same routes (latency quantiles, extra load the hub counted); the outage
// drill (one route down for 7 s: attempts per second reaching the hub
// from outbound's client vs a naive retrier, against the retry budget's
// ceiling, breaker transitions, refusals); the coalescing driver's RPCs
// against its calls, bursts included; and the feeds' audit through a hub
// restart (delivered, lost, duplicated within an incarnation, resets by
// cause; apps/delivery_audit.hpp). Runs for --duration seconds or until
// SIGINT/SIGTERM, then exits 0. Exit 2 for a usage or config error (the bad
// field is named;
// --oracle-endpoints without an external hub), 7 when an external --hub was
// never reached (no publish, call, timestamp or feed), 1 for an internal
// error (e.g. the hub cannot start: hub_error).

#include "config/demo_config.hpp"

#include <iosfwd>
#include <string>
#include <vector>

namespace CLI {
class App;
class Option;
} // namespace CLI

namespace outbound::apps {

/// The options of `outbound demo`, as parsed by CLI11. Options given on the
/// command line override the --config file; the rest keep the file's (or
/// the default) values.
struct demo_options {
  /// `--config FILE`: a JSON demo_config ("" : defaults).
  std::string config_file;
  /// `--feeds`, `--duration`, `--rate`, `--metrics-port`, `--hub`,
  /// `--oracle-endpoints` (demo_config fields of the same names).
  std::size_t feeds = 1000;
  double duration = 60.0;
  double rate = 200.0;
  int metrics_port = 9464;
  std::string hub;
  std::vector<std::string> oracle_endpoints;
  /// `--report table|json`: the report as a table on stdout [table], or
  /// as one JSON document on stdout (the start line then goes to stderr).
  std::string report = "table";

  /// Set by add_demo_command: tells which options were given.
  CLI::Option* feeds_opt = nullptr;
  CLI::Option* duration_opt = nullptr;
  CLI::Option* rate_opt = nullptr;
  CLI::Option* metrics_port_opt = nullptr;
  CLI::Option* hub_opt = nullptr;
  CLI::Option* oracle_opt = nullptr;
};

/// Registers the `demo` subcommand on `app`, binding its options to `opts`
/// (which must outlive the parse). Returns the subcommand.
CLI::App* add_demo_command(CLI::App& app, demo_options& opts);

/// The demo's settings: the --config file (or the defaults) with the given
/// options applied, validated. Throws config_error naming the field.
demo_config resolve_demo_config(const demo_options& opts);

/// Runs a parsed `demo` command. Call it before any other thread exists
/// (it blocks SIGINT/SIGTERM for every thread it starts and waits for them
/// itself); it creates its own actor system. Returns the exit code: 0 after
/// the report, 2 config/usage error, 7 after the report when nothing at an
/// external hub was reached (service_unavailable), 1 internal error.
int run_demo(const demo_options& opts, std::ostream& out, std::ostream& err);

} // namespace outbound::apps
