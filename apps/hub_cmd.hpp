#pragma once

// `outbound hub [options]`: runs the reference hub (hub/) until SIGINT or
// SIGTERM. The first stdout line is `{"listening":"127.0.0.1:PORT"}`
// (flushed), so scripts and tests started with `--port 0` can find it.
// With `--cluster N` (N > 1, an oracle cluster of N nodes) the line also
// lists every node and the leader:
// `{"listening":"127.0.0.1:P0","cluster":["127.0.0.1:P0","127.0.0.1:P1",
// "127.0.0.1:P2"],"leader":"127.0.0.1:P0"}`.

#include "hub/hub.hpp"

#include <iosfwd>
#include <string>
#include <vector>

namespace CLI {
class App;
} // namespace CLI

namespace outbound::apps {

/// The options of `outbound hub`, bound by CLI11 straight into the hub's
/// config, so the hub's defaults are the command's defaults.
struct hub_options {
  hub_config cfg;
  /// `--mode ledger|catchup|ephemeral` (the tier of /ws/feed). ["ledger"]
  std::string mode = "ledger";
  /// `--seed S`; negative: random. [-1]
  long long seed = -1;
  /// `--wake-script 9,6,10,...`.
  std::vector<long long> wake_script;
};

/// Registers the `hub` subcommand on `app`, binding its options to `opts`
/// (which must outlive the parse). Returns the subcommand.
CLI::App* add_hub_command(CLI::App& app, hub_options& opts);

/// Runs a parsed `hub` command: starts the hub, prints the listening line
/// to `out`, waits for SIGINT/SIGTERM, stops. Must run before any other
/// thread is started (it blocks both signals for the whole process and
/// waits for them with sigwait). Returns 0 after a signal, 2 for a bad
/// option value (JSON line on `err`), 1 when the address cannot be bound.
int run_hub(hub_options& opts, std::ostream& out, std::ostream& err);

} // namespace outbound::apps
