#include "apps/hub_cmd.hpp"

#include "apps/request_cmd.hpp"
#include "config/config_error.hpp"

#include <CLI/CLI.hpp>
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

#include <csignal>
#include <exception>
#include <ostream>
#include <pthread.h>
#include <sys/resource.h>

namespace outbound::apps {

// Over 80 lines on purpose: the command's option table, one CLI11
// statement per option, read top to bottom like its --help.
CLI::App* add_hub_command(CLI::App& app, hub_options& opts) {
  auto* cmd = app.add_subcommand(
    "hub", "Run the reference hub of the change-feed protocol (HTTP replay, "
           "WebSocket tiers, fault knobs, admin endpoints)");
  // The routes as hub/hub.hpp lists them.
  cmd->footer(
    "Endpoints (every port of a --cluster serves every route):\n"
    "  POST /v1/events                       publish {\"subject\",\"kind\","
    "\"metadata\",\"dedupe_key\"}\n"
    "  GET  /v1/events?after=&limit=&prefix= replay page\n"
    "  GET  /v1/cursor                       {\"cursor\":N}\n"
    "  WS   /ws/feed (the --mode tier), /ws/ledger, /ws/catchup, "
    "/ws/ephemeral\n"
    "  GET  /fast /slow /flaky /steady /lognormal  latency profiles (key=, "
    "seed=, tag=, "
    "scope=, ...)\n"
    "  POST /v1/ts /v1/seq                   oracle (leader only; followers "
    "answer 421 + leader-hint)\n"
    "  POST /admin/faults /admin/restart /admin/wakes /admin/drop "
    "/admin/oracle\n"
    "  GET  /admin/state /admin/oracle       counters and oracle state\n"
    "Output: the first stdout line is {\"listening\":\"H:P\"} (with "
    "--cluster: \"cluster\":[...],\"leader\":...).\n"
    "Runs until SIGINT/SIGTERM.\n"
    "Exit codes: 0 stopped by SIGINT/SIGTERM, 2 usage/config_error (a bad "
    "option or setting, named), 1 hub_error (the hub cannot start, e.g. "
    "the port is in use).");
  auto& c = opts.cfg;
  auto& f = c.faults;
  cmd->add_option("--host", c.host, "Address to bind (an IP literal)")
    ->capture_default_str();
  cmd->add_option("--port", c.port, "TCP port; 0 picks a free one")
    ->capture_default_str();
  cmd->add_option("--mode", opts.mode, "Tier served on /ws/feed")
    ->check(CLI::IsMember({"ledger", "catchup", "ephemeral"}))
    ->capture_default_str();
  cmd->add_option("--ring-size", c.ring_size,
                  "Catch-up ring capacity (0: every resume resyncs)")
    ->capture_default_str();
  cmd->add_option("--retention", c.retention,
                  "Keep the last R ledger events (0 keeps all)")
    ->capture_default_str();
  cmd->add_option("--ledger-file", c.ledger_file,
                  "Keep the ledger in this file: a restarted hub serves the "
                  "same ledger (same ids, same ledger epoch)");
  cmd->add_option("--replay-limit", c.replay_limit,
                  "Default and maximum replay page")
    ->capture_default_str();
  cmd->add_option("--subject-max-bytes", c.subject_max_bytes,
                  "Longest publish subject in bytes (longer: 400)")
    ->capture_default_str();
  cmd->add_option("--metadata-max-depth", c.metadata_max_depth,
                  "Deepest publish metadata ({} is 1; deeper: 400)")
    ->capture_default_str();
  cmd->add_option("--event-max-bytes", c.event_max_bytes,
                  "Largest stored event in bytes (larger: 400); "
                  "replay-limit x this must be <= 5 MiB")
    ->capture_default_str();
  cmd->add_option("--seed", opts.seed,
                  "Seed of the hub's rng (epochs, wake drops); <0 random")
    ->capture_default_str();
  cmd->add_option("--threads", c.threads, "io threads")->capture_default_str();
  cmd->add_option("--queue-max", c.queue_max,
                  "Per-connection send queue; overflow closes with 1013")
    ->capture_default_str();
  cmd->add_option("--cluster", c.cluster_size,
                  "Oracle cluster: N nodes on N ports (node 0 leads; with "
                  "--port P node i listens on P+i); the first line lists "
                  "them all")
    ->check(CLI::Range(1, 16))
    ->capture_default_str();
  cmd->add_option("--oracle-stall", c.oracle_stall_seconds,
                  "Seconds a node in mode stall holds an oracle request "
                  "before closing it unanswered")
    ->check(CLI::PositiveNumber)
    ->capture_default_str();

  auto* g = "Faults";
  cmd->add_flag("--drop-wakes", f.drop_wakes, "Drop every wake frame")
    ->group(g);
  cmd->add_option("--drop-wake-probability", f.drop_wake_probability,
                  "Drop each wake with this probability (seeded)")
    ->check(CLI::Range(0.0, 1.0))
    ->group(g);
  cmd
    ->add_option("--wake-script", opts.wake_script,
                 "Hold wakes until the head reaches the script's maximum, "
                 "then send exactly these cursors (e.g. 9,6,10,6,8,7,9)")
    ->delimiter(',')
    ->type_name("CURSOR[,CURSOR...]")
    ->group(g);
  cmd->add_option("--visibility-lag", f.visibility_lag_polls,
                  "Replay polls that miss each new event")
    ->check(CLI::NonNegativeNumber)
    ->group(g);
  cmd->add_option("--non-object-pages", f.non_object_pages,
                  "Next N replay pages are a bare JSON array (-1: all)")
    ->group(g);
  cmd->add_option("--accept-then-close", f.accept_then_close,
                  "Next N WebSocket upgrades are closed at once (-1: all)")
    ->group(g);
  cmd->add_option("--go-silent", f.go_silent,
                  "Next N connections go silent after the hello (-1: all)")
    ->group(g);
  cmd->add_option("--no-hello", f.no_hello,
                  "Next N connections get no hello (-1: all)")
    ->group(g);
  cmd->add_option("--oversized-frame", f.oversized_frame,
                  "Next N connections get an oversized frame header after "
                  "the hello (-1: all)")
    ->group(g);
  cmd->add_option("--oversized-frame-bytes", f.oversized_frame_bytes,
                  "Length the oversized frame announces")
    ->capture_default_str()
    ->group(g);
  cmd->add_option("--fragment-frames", f.fragment_frames,
                  "Next N connections get every message fragmented (-1: all)")
    ->group(g);
  cmd->add_option("--fragment-bytes", f.fragment_bytes,
                  "Payload bytes per fragment")
    ->capture_default_str()
    ->group(g);
  cmd->add_option("--empty-continuations", f.empty_continuations,
                  "Empty continuation frames after each first fragment")
    ->group(g);
  cmd->add_option("--non-json-frames", f.non_json_frames,
                  "Next N connections get non-JSON frames (-1: all)")
    ->group(g);
  cmd->add_option("--pad-frames-to", f.pad_frames_to,
                  "Pad wake and event frames to this many bytes")
    ->group(g);
  cmd->add_option("--restart-every", f.restart_every,
                  "Restart the catch-up tier every S seconds")
    ->check(CLI::NonNegativeNumber)
    ->group(g);
  cmd->add_option("--drop-every", f.drop_every,
                  "Hard-close (no close frame) the WebSocket connections of "
                  "--drop-tier every S seconds, keeping all hub state")
    ->check(CLI::NonNegativeNumber)
    ->group(g);
  cmd->add_option("--drop-tier", f.drop_tier,
                  "Tier that --drop-every drops")
    ->check(CLI::IsMember({"ledger", "catchup", "ephemeral", "all"}))
    ->capture_default_str()
    ->group(g);
  return cmd;
}

int run_hub(hub_options& opts, std::ostream& out, std::ostream& err) {
  auto& c = opts.cfg;
  c.mode = *parse_hub_tier(opts.mode);
  if (opts.seed >= 0)
    c.seed = static_cast<uint64_t>(opts.seed);
  for (auto v : opts.wake_script) {
    if (v < 0) {
      err << usage_error_json("usage_error", "--wake-script: cursors >= 0")
          << '\n';
      return usage_exit_code;
    }
    c.faults.wake_script.push_back(v);
  }
  for (int* n : {&c.faults.non_object_pages, &c.faults.accept_then_close,
                 &c.faults.go_silent, &c.faults.no_hello,
                 &c.faults.oversized_frame, &c.faults.fragment_frames,
                 &c.faults.non_json_frames})
    if (*n < -1) {
      err << usage_error_json("usage_error",
                              "fault counts must be >= -1 (-1: every one)")
          << '\n';
      return usage_exit_code;
    }
  // Every watcher holds a WebSocket and a keep-alive connection: allow as
  // many descriptors as the hard limit permits.
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
  // Block the signals before the hub's threads exist, so that they all
  // inherit the mask and only sigwait below receives them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::unique_ptr<hub> h;
  try {
    h = std::make_unique<hub>(c);
    h->start();
  } catch (const config_error& e) {
    err << usage_error_json("config_error", e.what()) << '\n';
    return usage_exit_code;
  } catch (const std::exception& e) {
    err << usage_error_json("hub_error", e.what()) << '\n';
    return internal_exit_code;
  }
  boost::json::object line;
  line["listening"] = h->base_url().substr(std::string{"http://"}.size());
  if (c.cluster_size > 1) {
    // {"listening":"H:P0","cluster":["H:P0","H:P1",...],"leader":"H:P0"}
    auto nodes = h->oracle_endpoints();
    boost::json::array list;
    for (const auto& n : nodes)
      list.emplace_back(n);
    line["cluster"] = std::move(list);
    line["leader"] = nodes.at(h->oracle_leader().value_or(0));
  }
  out << boost::json::serialize(line) << std::endl; // flushed
  int sig = 0;
  while (sigwait(&set, &sig) != 0) {
  }
  h->stop();
  return 0;
}

} // namespace outbound::apps
