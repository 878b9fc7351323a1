#pragma once

// `outbound group-member [options] HUB_URL`: one member of a feed group
// (actors/group/feed_group.hpp). The member joins the group in its store
// (etcd, or memory for a single-process trial), owns its share of a static
// feed set by rendezvous hashing, and runs a ledger feed watcher per owned
// feed against the hub. Every delivery is one JSON line on stdout
// (`{"type":"event","t","feed","token","id","subject"}` or
// `{"type":"reset","t","feed","token","cause",...}`; `t` is CLOCK_MONOTONIC
// in ns when the watcher handed the delivery over, comparable across the
// processes of a machine); a status line goes to stderr every
// --status-interval seconds and on exit. No actor writes output: each
// stream has a writer thread (apps/line_writer.hpp) that writes lines in
// order and flushes after each run, and a watcher's batch is acknowledged
// only once its lines were written, so a crash loses no acknowledged line
// and a stdout nobody reads holds back deliveries (each feed waits for its
// lines; nothing is dropped), never the lease renewals. SIGTERM or SIGINT
// leaves the group gracefully (final checkpoints, releases, lease revoked).
//
// Failing loudly: before joining, one replay GET probes the hub (a member
// that cannot reach it would take its share of the feeds from members that
// can, and deliver nothing); a failed probe exits at once. Once running,
// hub and store failures are `{"type":"failure",...}` lines on stderr, one
// per distinct cause (a repeat again after 60 s, with the count of the
// suppressed ones), and the member rides them out. The exit line says
// whether the member ever joined and whether its leave released every
// feed, and so does the exit code.

#include "config/client_config.hpp"
#include "config/group_config.hpp"

#include <caf/fwd.hpp>

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <limits>
#include <optional>
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
  /// `--min-members N` (nullopt: not given; < 1 is a usage error).
  std::optional<int64_t> min_members;
  /// `--max-starts-per-second N` (nullopt: not given; < 1 is a usage
  /// error): the watcher start rate, which also paces the hand-over of a
  /// rebalance and a graceful leave.
  std::optional<int64_t> max_starts_per_second;
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
  /// `--etcd-ca-file`, `--etcd-cert`, `--etcd-key`: the store client's TLS
  /// files (group_config's coordinator.client.tls; each one given replaces
  /// the file's and the environment's).
  tls_config etcd_tls;
  /// `--no-hub-probe`: join without probing the hub first (a hub that
  /// starts after its members). [false]
  bool no_hub_probe = false;
  /// The hub's client: `--token`, `--ca-file`, `--cert`, `--key`.
  client_config cfg;
};

/// Registers the `group-member` subcommand on `app`, binding its options to
/// `opts` (which must outlive the parse). Returns the subcommand.
CLI::App* add_group_member_command(CLI::App& app, group_member_options& opts);

/// Exit code of a member that never joined its group (no lease in the
/// whole run: the store unreachable, or the member's name held by another
/// live lease all along).
constexpr int never_joined_exit_code = 9;

/// Exit code of a member that joined and left, but not cleanly: feeds
/// whose release the store did not confirm (group_status::unreleased; the
/// next owner resumes at their last checkpoint), or a lease revoke that
/// failed (its feeds move only when the lease expires).
constexpr int unclean_leave_exit_code = 10;

/// Runs a parsed `group-member` command in `sys` until --duration seconds,
/// SIGINT or SIGTERM, then leaves the group gracefully. Deliveries go to
/// `out`; status lines (`{"type":"status","group","member","phase",
/// "members","owned","desired","running","claims_won",...,"joined",
/// "store_errors","last_store_error","hub_failures","last_hub_failure"}`),
/// failure lines and the exit line (the status plus "outcome": "left",
/// "left_unclean", "never_joined" or "no_answer", and "stdout_complete":
/// whether `out` took every delivery line within 5 s of the leave) to
/// `err`. `err` is untied from its stream for the run (std::cerr would
/// flush std::cout before each line).
/// Returns 0 after a clean leave; 2 on a usage or config error (the line
/// names the field, and the file for --config); 3 to 7 when the hub probe
/// failed (exit_code() of its error kind: 3 auth, 4 request, 5 server, 6
/// response, 7 unavailable); never_joined_exit_code (9);
/// unclean_leave_exit_code (10); 1 on an internal error or a leave that
/// did not answer.
int run_group_member(caf::actor_system& sys, const group_member_options& opts,
                     std::ostream& out, std::ostream& err);

} // namespace outbound::apps
