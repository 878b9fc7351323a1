#pragma once

// `outbound group-member [options] HUB_URL`: one member of a feed group
// (actors/group/feed_group.hpp). The member joins the group in its store
// (etcd, or memory for a single-process trial), owns its share of a static
// feed set by rendezvous hashing, and runs a ledger feed watcher per owned
// feed against the hub. Every delivery is one JSON line on stdout, written
// and flushed as it happens (`{"type":"event","t","feed","token","id",
// "subject"}` or `{"type":"reset","t","feed","token","cause",...}`; `t` is
// CLOCK_MONOTONIC in ns, comparable across the processes of a machine), so
// that a crash loses no line of what was delivered; a status line goes to stderr
// every --status-interval seconds and on exit. SIGTERM or SIGINT leaves the
// group gracefully (final checkpoints, releases, lease revoked).

#include "config/client_config.hpp"
#include "config/group_config.hpp"

#include <caf/fwd.hpp>

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <limits>
#include <string>
#include <vector>

namespace CLI {
class App;
} // namespace CLI

namespace outbound::apps {

/// The options of `outbound group-member`, as parsed by CLI11.
struct group_member_options {
  /// The hub's base URL (`http://127.0.0.1:8080`).
  std::string base_url;
  /// `--feed ID=PREFIX` (repeatable): a feed and the subject prefix it
  /// follows.
  std::vector<std::string> feeds;
  /// `--feed-count N`: feeds `<subject-prefix><i>` for i in [0, N), each
  /// following the subject prefix `<subject-prefix><i>/`. [0]
  int64_t feed_count = 0;
  /// `--subject-prefix P` of --feed-count. ["feed-"]
  std::string subject_prefix = "feed-";
  /// `--config FILE`: a group_config JSON (parse_group_config); the
  /// OUTBOUND_GROUP_* environment overrides it, and the flags below
  /// override both.
  std::string config_file;
  /// `--group`, `--member`: the group's and this member's names (empty:
  /// from the file or the environment; a member name defaults to
  /// "<hostname>:<pid>").
  std::string group_name, member_name;
  /// `--coordinator etcd|memory`, `--etcd URL`, `--key-prefix P` (empty:
  /// from the file or the environment, else group_config's defaults).
  std::string coordinator, endpoint, key_prefix;
  /// Timing flags in seconds (`unset`: not given; any other value, NaN
  /// and negatives included, replaces the field and is validated there):
  /// --lease-ttl, --renew-interval, --fence-margin, --poll-interval,
  /// --checkpoint-interval, --initial-settle, --rebalance-delay.
  static constexpr double unset = std::numeric_limits<double>::lowest();
  double lease_ttl = unset, renew_interval = unset, fence_margin = unset,
         poll_interval = unset, checkpoint_interval = unset,
         initial_settle = unset, rebalance_delay = unset;
  /// `--min-members N` (-1: not given).
  int64_t min_members = -1;
  /// `--replay-path` / `--ws-path` of every feed. ["/v1/events",
  /// "/ws/feed"]
  std::string replay_path = "/v1/events";
  std::string ws_path = "/ws/feed";
  /// `--duration S`: leave after S seconds (0: until a signal). [0]
  double duration = 0.0;
  /// `--status-interval S`: a status line on stderr every S seconds (0:
  /// only on exit). [5]
  double status_interval = 5.0;
  /// `--quiet`: no delivery lines. [false]
  bool quiet = false;
  /// `--metrics-port P`: serve `GET /metrics` (outbound_group_*) on
  /// 127.0.0.1:P (0: a free port, printed on stderr as
  /// {"type":"metrics","url"}); negative: no listener. [-1]
  int metrics_port = -1;
  client_config cfg;
};

/// Registers the `group-member` subcommand on `app`, binding its options to
/// `opts` (which must outlive the parse). Returns the subcommand.
CLI::App* add_group_member_command(CLI::App& app, group_member_options& opts);

/// Runs a parsed `group-member` command in `sys` until --duration seconds,
/// SIGINT or SIGTERM, then leaves the group gracefully. Deliveries go to
/// `out`, status lines (`{"type":"status","group","member","phase",
/// "members","owned","desired","running","claims_won",...}`) to `err`.
/// Returns 0 after a graceful leave; 2 on a usage or config error (the line
/// names the field); 1 on an internal error or a leave that did not finish.
int run_group_member(caf::actor_system& sys, const group_member_options& opts,
                     std::ostream& out, std::ostream& err);

} // namespace outbound::apps
