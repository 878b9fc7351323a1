#pragma once

// The CAF scheduler flags every benchmark shares, on top of
// outbound::configure (actors/system/system_setup.hpp).
//
// Default: outbound's recommended settings, the ones README.md tells users
// to adopt, so a benchmark measures what a user runs. --caf-defaults starts
// from CAF 0.17's own defaults instead (max(cores, 4) work-stealing workers,
// 50us moderate sleep, unbounded max-throughput): the configuration of the
// rows in bench/README.md measured before the helper existed. --caf-threads,
// --caf-policy, --caf-max-throughput, --caf-moderate-sleep-us and
// --caf-aggressive-polls override
// single values of either preset; --caf-set KEY=VALUE writes any CAF setting
// last. Every benchmark prints caf_flags::report(sys): the settings read
// back from the running scheduler, never the requested ones.

#include "actors/system/system_setup.hpp"
#include "config/config_error.hpp"
#include "protocol/io_runner.hpp"

#include <CLI/CLI.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/config_value.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace outbound::bench {

/// The 1, 5 and 15 minute load averages (/proc/loadavg), for the header of
/// a run on a shared machine.
inline std::string load_average() {
  std::ifstream f{"/proc/loadavg"};
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

/// The io_runner of a benchmark's outbound clients: with the io_loop policy
/// the one its CAF workers run (outbound::io_runner_for), otherwise a runner
/// with `threads` io threads of its own.
inline std::shared_ptr<outbound::io_runner>
client_io(caf::actor_system& sys, std::size_t threads) {
  if (outbound::scheduler_in_effect(sys).policy == "io_loop")
    return outbound::io_runner_for(sys);
  return std::make_shared<outbound::io_runner>(threads);
}

struct caf_flags {
  bool caf_defaults = false;
  std::size_t threads = 0;
  std::string policy;
  std::size_t max_throughput = 0;
  int64_t moderate_sleep_us = -1;
  std::size_t aggressive_polls = 0;
  std::vector<std::string> settings;
  // Threads the preset leaves their cores (configure's io_threads).
  std::size_t io_threads = 1;

  void add_to(CLI::App& app) {
    app.add_flag("--caf-defaults", caf_defaults,
                 "start from CAF 0.17's scheduler defaults (max(cores, 4) "
                 "stealing workers) instead of outbound::configure's "
                 "recommended settings");
    app.add_option("--caf-threads", threads,
                   "CAF scheduler threads (0: the preset's; recommended: "
                   "max(1, cores - io threads); CAF: max(cores, 4))")
      ->capture_default_str();
    app.add_option("--caf-policy", policy,
                   "CAF scheduler policy: sharing, stealing or io_loop "
                   "(outbound's: workers run the io_context of outbound's "
                   "sockets) (empty: the preset's; recommended: io_loop; "
                   "CAF: stealing)")
      ->check(CLI::IsMember({"", "stealing", "sharing", "io_loop"}));
    app.add_option("--caf-max-throughput", max_throughput,
                   "scheduler.max-throughput (0: the preset's; recommended: "
                   "100; CAF: unbounded)")
      ->capture_default_str();
    app.add_option("--caf-moderate-sleep-us", moderate_sleep_us,
                   "work-stealing.moderate-sleep-duration in us, policy "
                   "stealing only (-1: the preset's; recommended: 0; CAF: "
                   "50)")
      ->capture_default_str();
    app.add_option("--caf-aggressive-polls", aggressive_polls,
                   "work-stealing.aggressive-poll-attempts, policy stealing "
                   "only (0: the preset's; CAF: 100; 10000 trades idle CPU "
                   "for latency, see bench/README.md)")
      ->capture_default_str();
    app.add_option("--caf-set", settings,
                   "extra CAF setting KEY=VALUE (repeatable, applied last), "
                   "e.g. work-stealing.relaxed-sleep-duration=1ms");
  }

  outbound::system_options options() const {
    outbound::system_options o;
    o.preset = caf_defaults ? outbound::scheduler_preset::caf_defaults
                            : outbound::scheduler_preset::recommended;
    o.io_threads = io_threads;
    if (threads > 0)
      o.max_threads = threads;
    if (!policy.empty())
      o.policy = policy;
    if (max_throughput > 0)
      o.max_throughput = max_throughput;
    if (moderate_sleep_us >= 0)
      o.moderate_sleep = std::chrono::microseconds{moderate_sleep_us};
    if (aggressive_polls > 0)
      o.aggressive_polls = aggressive_polls;
    return o;
  }

  /// outbound::configure(cfg, options()), then --caf-set. Prints the
  /// problem and returns false on an invalid flag.
  bool apply(caf::actor_system_config& cfg) const {
    try {
      outbound::configure(cfg, options());
    } catch (const outbound::config_error& e) {
      std::fprintf(stderr, "CAF scheduler flags: %s\n", e.what());
      return false;
    }
    for (auto& kv : settings) {
      auto eq = kv.find('=');
      auto val = eq == std::string::npos
                   ? caf::expected<caf::config_value>{caf::sec::invalid_argument}
                   : caf::config_value::parse(kv.substr(eq + 1));
      if (!val) {
        std::fprintf(stderr,
                     "--caf-set %s: expected KEY=VALUE with a CAF config "
                     "value\n",
                     kv.c_str());
        return false;
      }
      cfg.set(kv.substr(0, eq), std::move(*val));
    }
    return true;
  }

  /// The overrides as (flag, value) pairs, in command-line order; a flag
  /// without a value (--caf-defaults) has an empty one.
  std::vector<std::pair<std::string, std::string>> given() const {
    std::vector<std::pair<std::string, std::string>> g;
    if (caf_defaults)
      g.emplace_back("--caf-defaults", "");
    if (threads > 0)
      g.emplace_back("--caf-threads", std::to_string(threads));
    if (!policy.empty())
      g.emplace_back("--caf-policy", policy);
    if (max_throughput > 0)
      g.emplace_back("--caf-max-throughput", std::to_string(max_throughput));
    if (moderate_sleep_us >= 0)
      g.emplace_back("--caf-moderate-sleep-us",
                     std::to_string(moderate_sleep_us));
    if (aggressive_polls > 0)
      g.emplace_back("--caf-aggressive-polls",
                     std::to_string(aggressive_polls));
    for (auto& kv : settings)
      g.emplace_back("--caf-set", kv);
    return g;
  }

  /// The flags again, for a child process of the same benchmark (each
  /// argument single-quoted for popen's shell).
  std::string to_args() const {
    std::string a;
    for (auto& [flag, value] : given())
      a += " '" + flag + (value.empty() ? "" : "=" + value) + "'";
    return a;
  }

  /// The preset and the overrides as given on the command line.
  std::string requested() const {
    std::string s = caf_defaults ? "CAF defaults" : "outbound recommended";
    if (!caf_defaults)
      s += " for " + std::to_string(std::thread::hardware_concurrency())
           + " cores - " + std::to_string(io_threads) + " io thread(s)";
    std::string ov;
    for (auto& [flag, value] : given()) {
      if (value.empty())
        continue; // the preset, named above
      ov += (ov.empty() ? "" : ", ") + flag + " " + value;
    }
    if (!ov.empty())
      s += "; overrides: " + ov;
    return s;
  }

  /// "caf: <settings in effect> [<requested>]", read from the running
  /// scheduler.
  std::string report(caf::actor_system& sys) const {
    return "caf: " + outbound::describe_scheduler(sys) + " [" + requested()
           + "]";
  }
};

} // namespace outbound::bench
