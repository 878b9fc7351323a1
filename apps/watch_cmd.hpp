#pragma once

// `outbound watch [options] BASE_URL`: one feed watcher against a
// hub, one JSON line per delivery on stdout (`{"type":"event","mode",
// "id"|"seq","event"}` or `{"type":"reset",...}`), one summary line on
// stderr on exit.

#include "actors/feed/feed_config.hpp"
#include "config/client_config.hpp"

#include <caf/fwd.hpp>

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace CLI {
class App;
} // namespace CLI

namespace outbound::apps {

/// The options of `outbound watch`, as parsed by CLI11. Feed settings are
/// bound to `feed`, client settings (token, TLS) to `cfg`, so their defaults
/// are the CLI's defaults, except the paths, which default to the reference
/// hub's (`/v1/events`, `/ws/feed`; an empty value turns that side off).
struct watch_options {
  /// The hub's base URL (`http://127.0.0.1:8080`).
  std::string base_url;
  /// `--param k=v`: extra replay query parameters, in order.
  std::vector<std::string> params;
  /// `--count N`: exit after N events (0: no limit). [0]
  uint64_t count = 0;
  /// `--duration S`: exit after S seconds (0: no limit). [0]
  double duration = 0.0;
  /// `--fail-after S`: give up after S seconds without ever having reached
  /// the feed (no replay page read; ws-only: no session opened), with a
  /// "fail_after" failure line naming the reason, and exit non-zero. A feed
  /// reached once is followed through later outages. 0: never give up (a
  /// run that ends unreached still exits non-zero). [30]
  double fail_after = 30.0;
  /// `--json-max-depth N`: nesting limit of every JSON the watcher reads,
  /// replay pages (client_config::json_max_depth) and WebSocket messages
  /// (feed_config::json_max_depth) alike (1 .. 1024). [64]
  std::size_t json_max_depth = 64;
  /// `--mode` (hidden): the hub's option, not the watcher's; given, it is
  /// a usage error that says how a watcher picks a tier.
  std::string mode;
  bool mode_given = false;
  /// `--ledger-epoch E`: the ledger epoch `--cursor` was read in (a
  /// summary's `ledger_epoch`); a hub in another epoch is then a rewind
  /// reset (feed_config::resume_ledger_epoch), not a cursor followed into
  /// a ledger where it means other events.
  std::string ledger_epoch;
  bool ledger_epoch_given = false;
  /// `--last-seq N` and `--epoch E`: catchup's resume key, a summary's
  /// `last_seq` and `epoch` (feed_config::resume_last_seq, resume_epoch;
  /// with the summary's `client_id` as `--client-id`).
  int64_t last_seq = 0;
  bool last_seq_given = false;
  std::string epoch;
  bool epoch_given = false;
  feed_config feed;
  client_config cfg;

  watch_options();
};

/// Registers the `watch` subcommand on `app`, binding its options to `opts`
/// (which must outlive the parse). Returns the subcommand.
CLI::App* add_watch_command(CLI::App& app, watch_options& opts);

/// Runs a parsed `watch` command in `sys` until --count events, --duration
/// seconds, SIGINT or SIGTERM, or --fail-after seconds without reaching the
/// feed. Deliveries go to `out` (one JSON line each). On `err`: one JSON
/// line per distinct failure cause as it happens (`{"type":"failure",
/// "source":"replay"|"page"|"websocket"|"frame","kind","status","detail",
/// "request_id",...}`, secrets redacted; a repeated cause is printed again
/// after 60 s, with `repeats_suppressed`); on a give-up, one failure line
/// with source "fail_after" and the reason; then the summary `{"cursor",
/// "last_seq","events","resets","drain_errors","reconnects",
/// "peer_timeouts","replay_errors","failures","failures_suppressed",
/// "reached",...}`. Returns 0 when the feed was reached; when it never was,
/// the exit code of the last failure's kind (3 auth, 4 request, 5 server, 6
/// response, 7 unavailable; 7 with no failure seen); 2 on a usage or config
/// error (the line names the field), 1 on an internal error.
int run_watch(caf::actor_system& sys, const watch_options& opts,
              std::ostream& out, std::ostream& err);

} // namespace outbound::apps
