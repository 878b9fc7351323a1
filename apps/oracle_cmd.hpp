#pragma once

// `outbound ts` and `outbound seq` (README, the command line): one call via a
// coalescing driver (actors/coalesce/coalescing_driver.hpp) against a
// leader-based oracle cluster such as `outbound hub --cluster 3`. The
// driver finds the leader through leader hints; the answer is one JSON line
// on stdout, a failure one JSON line on stderr (the shape of `outbound
// request`) and the exit code of its error kind (protocol/errors.hpp
// exit_code(): 7 unreachable / no leader / deadline, 8 uncertain outcome).

#include "config/client_config.hpp"

#include <caf/fwd.hpp>

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace CLI {
class App;
} // namespace CLI

namespace outbound::apps {

/// The options of `outbound ts` and `outbound seq`, as parsed by CLI11.
struct oracle_options {
  /// `--endpoints A,B,C`: oracle nodes, `host:port` or `http(s)://host:port`
  /// (coalesce_config::endpoints; at least one).
  std::vector<std::string> endpoints;
  /// `--count N`: ts 1..262,144 timestamps [1]; seq 1..65,536 ordinals
  /// (required).
  uint32_t count = 1;
  /// `--key K` (seq only): the sequence key, 1..128 bytes of UTF-8.
  std::string key;
  /// `--timeout S`: the call's overall budget in seconds, every attempt,
  /// redirect and backoff included (> 0; coalesce_retry_policy::overall;
  /// one attempt gets at most min(2, S)). [10]
  double timeout = 10.0;
  /// `--tls`: bare `host:port` endpoints are https and `http://` leader
  /// hints are dropped (implied by --ca-file, --cert, the key option or an
  /// `https://` endpoint). [false]
  bool tls = false;
  /// `--verbose`: the driver's counters (coalesce_stats) as one JSON line
  /// on stderr after the call.
  bool verbose = false;
  /// `--json-max-depth N`: maximum nesting depth of the oracle's response
  /// bodies (coalesce_config::json_max_depth, 1..1024). [64]
  std::size_t json_max_depth = 64;
  /// TLS identity of the per-endpoint pools (`--ca-file`, `--cert`, and
  /// `--key` (ts) / `--cert-key` (ts and seq) for the client key: seq's
  /// `--key` is the sequence key), and the credential of the oracle
  /// requests: `--token`, `--token-header`, `--token-scheme`, as `outbound
  /// request` (copied into coalesce_config::token, token_header,
  /// token_scheme). [no token, "Authorization", "Bearer"]
  client_config cfg;
  /// `--header 'K: V'` (repeatable): coalesce_config::default_headers, sent
  /// on every oracle request. `x-request-id` may not be given (the driver
  /// sets one per RPC): a config_error naming `--header`.
  std::vector<std::string> headers;
};

/// Registers the `ts` subcommand on `app`, binding its options to `opts`
/// (which must outlive the parse). Returns the subcommand.
CLI::App* add_ts_command(CLI::App& app, oracle_options& opts);

/// Registers the `seq` subcommand on `app`, binding its options to `opts`
/// (which must outlive the parse). Returns the subcommand.
CLI::App* add_seq_command(CLI::App& app, oracle_options& opts);

/// Runs a parsed `ts` command in `sys`. Prints `{"physical_ms","logical_start",
/// "count","timestamps" (the packed u64 values, only when count <= 16),
/// "epoch","endpoint"}` to `out`. Returns 0, 2 for bad options (the line
/// names the field: `--count`, `--header`, `coalesce.endpoints[1]`,
/// `coalesce.default_headers`, `tls.ca_file`, ...)
/// or exit_code(kind) of the call's error; 1 internal.
int run_ts(caf::actor_system& sys, const oracle_options& opts,
           std::ostream& out, std::ostream& err);

/// Runs a parsed `seq` command in `sys`. Prints `{"key","start","count",
/// "epoch","endpoint"}` to `out`; errors as run_ts (8: uncertain outcome,
/// the block may have been spent, it was not retried).
int run_seq(caf::actor_system& sys, const oracle_options& opts,
            std::ostream& out, std::ostream& err);

} // namespace outbound::apps
