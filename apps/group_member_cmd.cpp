#include "apps/group_member_cmd.hpp"

#include "apps/request_cmd.hpp"

#include "actors/client/service_client.hpp"
#include "actors/feed/feed_messages.hpp"
#include "actors/feed/feed_watcher.hpp"
#include "actors/group/etcd_lease_store.hpp"
#include "actors/group/feed_group.hpp"
#include "actors/group/memory_lease_store.hpp"
#include "actors/messages.hpp"
#include "actors/system/system_setup.hpp"
#include "config/config_error.hpp"
#include "metrics/group_metrics.hpp"
#include "metrics/metrics_exposer.hpp"
#include "metrics/outbound_metrics.hpp"
#include "protocol/io_runner.hpp"
#include "protocol/tls_context.hpp"
#include "protocol/ws_session.hpp"

#include <CLI/CLI.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>
#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <chrono>
#include <csignal>
#include <fstream>
#include <mutex>
#include <ostream>
#include <set>
#include <sstream>
#include <thread>
#include <unistd.h>

namespace outbound::apps {

namespace {

volatile std::sig_atomic_t member_stop_signal = 0;

extern "C" void on_member_stop_signal(int) {
  member_stop_signal = 1;
}

/// CLOCK_MONOTONIC in nanoseconds (std::chrono::steady_clock on Linux):
/// the same clock in every process of a machine, so delivery lines of
/// several members can be ordered against each other and against faults.
int64_t mono_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
           std::chrono::steady_clock::now().time_since_epoch())
    .count();
}

/// The delivery lines, written and flushed one by one under a lock (the
/// watchers' callback helpers run on several threads).
struct delivery_sink {
  std::mutex mu;
  std::ostream* out = nullptr;
  bool quiet = false;
  uint64_t events = 0, resets = 0;
};

std::string read_file(const std::string& path) {
  std::ifstream in{path};
  if (!in)
    throw config_error("config", "cannot read '" + path + "'");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string default_member_name() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0')
    std::snprintf(host, sizeof(host), "localhost");
  return std::string{host} + ":" + std::to_string(getpid());
}

/// The flags of `o` over `g` (those given).
void apply_flags(const group_member_options& o, group_config& g) {
  if (!o.group_name.empty())
    g.name = o.group_name;
  if (!o.member_name.empty())
    g.member_name = o.member_name;
  if (g.member_name.empty())
    g.member_name = default_member_name();
  if (!o.coordinator.empty()) {
    if (o.coordinator == "etcd")
      g.coordinator.kind = coordinator_kind::etcd;
    else if (o.coordinator == "memory")
      g.coordinator.kind = coordinator_kind::memory;
    else
      throw usage_error("--coordinator must be etcd or memory, got '"
                        + o.coordinator + "'");
  }
  if (!o.endpoint.empty())
    g.coordinator.endpoint = o.endpoint;
  if (!o.key_prefix.empty())
    g.coordinator.prefix = o.key_prefix;
  auto set = [](double flag, double& field) {
    if (flag != group_member_options::unset)
      field = flag;
  };
  set(o.lease_ttl, g.timing.lease_ttl);
  set(o.renew_interval, g.timing.renew_interval);
  set(o.fence_margin, g.timing.fence_margin);
  set(o.poll_interval, g.timing.poll_interval);
  set(o.checkpoint_interval, g.timing.checkpoint_interval);
  set(o.initial_settle, g.timing.initial_settle);
  set(o.rebalance_delay, g.timing.rebalance_delay);
  if (o.min_members == 0 || o.min_members < -1)
    throw usage_error("--min-members must be >= 1");
  if (o.min_members > 0)
    g.timing.min_members = static_cast<std::size_t>(o.min_members);
}

/// The group config: file, then environment, then flags; validated. The
/// flags are applied before the environment too (group_config_from_env
/// validates what it returns, and a name may come from a flag only), and
/// again after it, so that they win.
group_config resolve_group(const group_member_options& o) {
  group_config g;
  if (!o.config_file.empty())
    g = parse_group_config(read_file(o.config_file));
  apply_flags(o, g);
  g = group_config_from_env(g);
  apply_flags(o, g);
  g.validate();
  return g;
}

/// The static feed set: --feed ID=PREFIX and --feed-count N.
std::vector<group_feed> resolve_feeds(const group_member_options& o) {
  std::vector<group_feed> out;
  auto add = [&](std::string id, std::string prefix) {
    group_feed f;
    f.id = std::move(id);
    f.cfg.replay_path = o.replay_path;
    f.cfg.ws_path = o.ws_path;
    f.cfg.prefixes = {std::move(prefix)};
    out.push_back(std::move(f));
  };
  for (const auto& spec : o.feeds) {
    auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
      throw usage_error("--feed must be ID=PREFIX: '" + spec + "'");
    add(spec.substr(0, eq), spec.substr(eq + 1));
  }
  // Beyond group_state_config::max_feeds' default a member could not own
  // them all anyway; the bound also keeps a typo from building a huge set.
  constexpr int64_t max_feed_count = 100000;
  if (o.feed_count < 0 || o.feed_count > max_feed_count)
    throw usage_error("--feed-count must be in [0, "
                      + std::to_string(max_feed_count) + "], got "
                      + std::to_string(o.feed_count));
  for (int64_t i = 0; i < o.feed_count; ++i) {
    auto id = o.subject_prefix + std::to_string(i);
    add(id, id + "/");
  }
  if (out.empty())
    throw usage_error("no feeds: give --feed ID=PREFIX or --feed-count N");
  return out;
}

boost::json::object status_json(const group_status& s) {
  boost::json::object o;
  o["type"] = "status";
  o["group"] = s.group;
  o["member"] = s.member;
  o["incarnation"] = s.incarnation;
  o["phase"] = to_string(s.phase);
  o["leased"] = s.leased;
  o["holding"] = s.holding;
  o["fence_in"] = s.fence_in;
  o["members"] = s.members;
  o["feeds"] = s.feeds_total;
  o["desired"] = s.desired;
  o["owned"] = s.owned;
  o["running"] = s.running;
  const auto& c = s.counters;
  o["claims_won"] = c.claims_won;
  o["claims_held"] = c.claims_held;
  o["claim_errors"] = c.claim_errors;
  o["commits_ok"] = c.commits_ok;
  o["commits_fenced"] = c.commits_fenced;
  o["commit_errors"] = c.commit_errors;
  o["renewals_ok"] = c.renewals_ok;
  o["renewals_error"] = c.renewals_error;
  o["renewals_lost"] = c.renewals_lost;
  o["holds"] = c.holds;
  o["rejoins"] = c.rejoins;
  o["join_errors"] = c.join_errors;
  o["hold_timeouts"] = c.hold_timeouts;
  o["spawns"] = c.spawns;
  o["moved_in"] = s.moved_in;
  o["moved_out"] = s.moved_out;
  return o;
}

void print_to(const std::shared_ptr<delivery_sink>& sink, feed_callbacks& cbs) {
  // Many feeds with quick callbacks: scheduled helpers, not one thread
  // each.
  cbs.detached = false;
  cbs.on_event = [sink](const feed_event& e) {
    std::lock_guard<std::mutex> lock{sink->mu};
    ++sink->events;
    if (sink->quiet)
      return;
    boost::json::object o;
    o["type"] = "event";
    o["t"] = mono_ns();
    o["feed"] = e.feed_id;
    o["token"] = e.owner_token;
    o["id"] = e.id ? boost::json::value(*e.id) : boost::json::value(nullptr);
    if (auto* ev = e.event.if_object())
      if (auto* sub = ev->if_contains("subject"))
        o["subject"] = *sub;
    *sink->out << boost::json::serialize(o) << '\n' << std::flush;
  };
  cbs.on_reset = [sink](const feed_reset& r) {
    std::lock_guard<std::mutex> lock{sink->mu};
    ++sink->resets;
    if (sink->quiet)
      return;
    boost::json::object o;
    o["type"] = "reset";
    o["t"] = mono_ns();
    o["feed"] = r.feed_id;
    o["token"] = r.owner_token;
    o["cause"] = to_string(r.cause);
    auto opt = [](const std::optional<int64_t>& v) {
      return v ? boost::json::value(*v) : boost::json::value(nullptr);
    };
    o["lost_from"] = opt(r.lost_from);
    o["lost_to"] = opt(r.lost_to);
    *sink->out << boost::json::serialize(o) << '\n' << std::flush;
  };
}

std::optional<group_status> ask(caf::actor_system& sys,
                                const feed_group_actor& g, double timeout_s,
                                bool leave) {
  std::optional<group_status> out;
  caf::scoped_actor self{sys};
  auto t = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  auto on_ok = [&](const group_status& s) {
    out = s;
  };
  auto on_err = [](const caf::error&) {
  };
  if (leave)
    self->request(g, t, leave_atom_v).receive(on_ok, on_err);
  else
    self->request(g, t, stats_atom_v).receive(on_ok, on_err);
  return out;
}

} // namespace

// Over 80 lines on purpose: the command's option table, one CLI11
// statement per option, read top to bottom like its --help.
CLI::App* add_group_member_command(CLI::App& app, group_member_options& o) {
  auto* cmd = app.add_subcommand(
    "group-member",
    "Run one member of a feed group: own a share of a feed set through "
    "leases in etcd and follow each owned feed, one JSON line per delivery");
  cmd->footer(
    "Output: {\"type\":\"event\",\"t\",\"feed\",\"token\",\"id\",\"subject\"} or "
    "{\"type\":\"reset\",\"feed\",\"token\",\"cause\",...} per line on "
    "stdout, flushed as delivered; a {\"type\":\"status\",...} line on "
    "stderr every --status-interval seconds and on exit.\nSIGTERM/SIGINT "
    "(or --duration): graceful leave (final checkpoints, releases, lease "
    "revoked), exit 0.\nGroup settings: --config FILE, then OUTBOUND_GROUP_* "
    "variables, then these flags.\nExit codes: 0 left the group; 2 "
    "usage/config_error; 1 internal error or a leave that did not finish.");
  cmd->add_option("base_url", o.base_url, "The hub's base URL")->required();
  cmd->add_option("--group", o.group_name, "The group's name");
  cmd->add_option("--member", o.member_name,
                  "This member's name, stable across restarts (default: "
                  "hostname:pid)");
  cmd->add_option("--feed", o.feeds,
                  "A feed ID=PREFIX: its id and the subject prefix it "
                  "follows (repeatable)");
  cmd
    ->add_option("--feed-count", o.feed_count,
                 "Feeds <subject-prefix><i> for i < N, each following "
                 "'<subject-prefix><i>/'")
    ->capture_default_str();
  cmd->add_option("--subject-prefix", o.subject_prefix, "See --feed-count")
    ->capture_default_str();
  cmd->add_option("--config", o.config_file, "A group config JSON file");
  cmd->add_option("--coordinator", o.coordinator,
                  "The group's store: etcd or memory (one process only)");
  cmd->add_option("--etcd", o.endpoint,
                  "etcd's client URL (default http://127.0.0.1:2379)");
  cmd->add_option("--key-prefix", o.key_prefix,
                  "Key prefix of every group (default /outbound/groups/)");
  cmd->add_option("--lease-ttl", o.lease_ttl, "Lease TTL, seconds (>= 2)");
  cmd->add_option("--renew-interval", o.renew_interval,
                  "Keepalive period, seconds (<= TTL/3)");
  cmd->add_option("--fence-margin", o.fence_margin,
                  "Stop delivering this long before the lease could expire");
  cmd->add_option("--poll-interval", o.poll_interval,
                  "Member list poll period, seconds");
  cmd->add_option("--checkpoint-interval", o.checkpoint_interval,
                  "Cursor commit period, seconds");
  cmd->add_option("--initial-settle", o.initial_settle,
                  "Seconds the member list must be stable before claims");
  cmd->add_option("--rebalance-delay", o.rebalance_delay,
                  "Seconds a new member must be listed before feeds move");
  cmd->add_option("--min-members", o.min_members,
                  "Members listed before the first claims");
  cmd->add_option("--replay-path", o.replay_path, "Replay endpoint")
    ->capture_default_str();
  cmd->add_option("--ws-path", o.ws_path, "Feed WebSocket path ('': none)")
    ->capture_default_str();
  cmd->add_option("--duration", o.duration, "Leave after S seconds (0: never)")
    ->capture_default_str();
  cmd
    ->add_option("--status-interval", o.status_interval,
                 "Status line period on stderr, seconds (0: only on exit)")
    ->capture_default_str();
  cmd->add_flag("--quiet", o.quiet, "No delivery lines");
  cmd
    ->add_option("--metrics-port", o.metrics_port,
                 "Serve GET /metrics on 127.0.0.1:P (0: a free port, "
                 "printed on stderr; -1: none)")
    ->capture_default_str();
  add_token_tls_options(*cmd, o.cfg);
  return cmd;
}

int run_group_member(caf::actor_system& sys, const group_member_options& opts,
                     std::ostream& out, std::ostream& err) {
  std::vector<std::string> secrets{opts.cfg.token};
  try {
    if (!(opts.duration >= 0))
      throw usage_error("--duration must be >= 0");
    if (!(opts.status_interval >= 0))
      throw usage_error("--status-interval must be >= 0");
    auto g = resolve_group(opts);
    auto feeds = resolve_feeds(opts);
    auto cfg = opts.cfg;
    cfg.base_url = opts.base_url;
    cfg.validate();
    auto io = io_runner_for(sys);
    client_options copts;
    copts.io = io;
    feed_group_options fo;
    fo.feed_client = make_service_client(sys, cfg, copts);
    if (!opts.ws_path.empty()) {
      fo.ws = feed_ws_endpoint::from(cfg);
      std::shared_ptr<tls_context> tls;
      if (fo.ws.origin.scheme == "https")
        tls = tls_context::make(cfg.tls);
      fo.connector = make_ws_connector(io, std::move(tls));
    }
    if (g.coordinator.kind == coordinator_kind::memory) {
      fo.store = spawn_memory_lease_store(sys);
    } else {
      etcd_store_options so;
      so.client_cfg = store_client_config(g);
      so.prefix = g.coordinator.prefix;
      so.group = g.name;
      fo.store = spawn_etcd_lease_store(sys, std::move(so));
    }
    // Prometheus: the registry lives as long as the group_metrics that
    // writes to it (the member's actor holds that until it ends).
    std::unique_ptr<metrics_exposer> exposer;
    if (opts.metrics_port < -1 || opts.metrics_port > 65535)
      throw usage_error("--metrics-port must be -1 (none) or 0..65535");
    if (opts.metrics_port >= 0) {
      auto reg = std::make_shared<metrics_registry>();
      fo.metrics
        = std::shared_ptr<group_metrics>(new group_metrics(*reg->registry()),
                                         [reg](group_metrics* m) { delete m; });
      exposer = std::make_unique<metrics_exposer>(
        reg, static_cast<uint16_t>(opts.metrics_port));
      boost::json::object m;
      m["type"] = "metrics";
      m["url"] = exposer->url();
      err << boost::json::serialize(m) << '\n' << std::flush;
    }
    auto sink = std::make_shared<delivery_sink>();
    sink->out = &out;
    sink->quiet = opts.quiet;
    print_to(sink, fo.callbacks);
    member_stop_signal = 0;
    auto old_int = std::signal(SIGINT, on_member_stop_signal);
    auto old_term = std::signal(SIGTERM, on_member_stop_signal);
    auto member = spawn_feed_group(sys, g, std::move(feeds), std::move(fo));
    auto t0 = std::chrono::steady_clock::now();
    auto next_status
      = t0
        + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::duration<double>(opts.status_interval));
    while (!member_stop_signal) {
      auto now = std::chrono::steady_clock::now();
      if (opts.duration > 0
          && now - t0 >= std::chrono::duration<double>(opts.duration))
        break;
      if (opts.status_interval > 0 && now >= next_status) {
        if (auto s = ask(sys, member, 5.0, false))
          err << boost::json::serialize(status_json(*s)) << '\n' << std::flush;
        next_status
          = now
            + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
              std::chrono::duration<double>(opts.status_interval));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    // Graceful leave: final checkpoints, releases, the lease revoked. It
    // finishes within the fence deadline (at most the lease TTL). The
    // handlers stay: a second SIGTERM during the leave changes nothing.
    auto final = ask(sys, member, g.timing.lease_ttl + 10.0, true);
    std::signal(SIGINT, old_int);
    std::signal(SIGTERM, old_term);
    auto st = final ? status_json(*final) : boost::json::object{};
    st["type"] = "exit";
    {
      std::lock_guard<std::mutex> lock{sink->mu};
      st["events"] = sink->events;
      st["resets"] = sink->resets;
      sink->quiet = true;
    }
    st["left"] = final && final->phase == group_phase::left;
    err << redact(boost::json::serialize(st), secrets) << '\n';
    sys.await_actors_before_shutdown(false);
    return final && final->phase == group_phase::left ? 0 : internal_exit_code;
  } catch (const config_error& e) {
    err << redact(usage_error_json("config_error", e.what()), secrets) << '\n';
    return usage_exit_code;
  } catch (const usage_error& e) {
    err << redact(usage_error_json("usage_error", e.what()), secrets) << '\n';
    return usage_exit_code;
  } catch (const std::exception& e) {
    err << redact(usage_error_json("internal_error", e.what()), secrets)
        << '\n';
    return internal_exit_code;
  }
}

} // namespace outbound::apps
