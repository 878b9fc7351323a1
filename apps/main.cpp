// The `outbound` command line: subcommand dispatch. Each subcommand lives in
// its own apps/<name>_cmd.cpp; main parses the arguments first and starts the
// actor system only for a command that needs one.

#include "apps/demo_cmd.hpp"
#include "apps/group_member_cmd.hpp"
#include "apps/hub_cmd.hpp"
#include "apps/oracle_cmd.hpp"
#include "apps/request_cmd.hpp"
#include "apps/watch_cmd.hpp"

#include "actors/system/system_setup.hpp"
#include "protocol/io_runner.hpp"

#include <CLI/CLI.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <exception>
#include <iostream>
#include <string>
#include <vector>

namespace {

/// The top level takes no positional argument: a first word that is not an
/// option names a subcommand. CLI11 would call an unknown one an unexpected
/// extra argument; this says what it is and what there is instead (false
/// after printing the usage error).
bool known_subcommand(CLI::App& app, int argc, char** argv,
                      const std::vector<std::string>& secrets) {
  using namespace outbound::apps;
  if (argc <= 1 || argv[1][0] == '-')
    return true;
  std::string name = argv[1];
  bool known = false;
  std::string list;
  for (auto* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    known = known || sub->check_name(name);
    list += (list.empty() ? "" : ", ") + sub->get_name();
  }
  if (known)
    return true;
  // The benchmarks are programs of their own (bench/README.md), not a
  // subcommand: say where they are instead of only that it is unknown.
  std::string where
    = name == "bench"
        ? "; the benchmarks are programs of their own, "
          "built into build/bench/ by scripts/build.sh (bench/README.md)"
        : "";
  std::cerr << redact(
    usage_error_json("usage_error",
                     "unknown subcommand '" + name + "' (subcommands: " + list
                       + "; run 'outbound --help'" + where + ")"),
    secrets) << '\n';
  return false;
}

/// The commands that run on one actor system, with their parsed options.
struct client_commands {
  CLI::App* request = nullptr;
  CLI::App* watch = nullptr;
  CLI::App* ts = nullptr;
  CLI::App* seq = nullptr;
  CLI::App* group_member = nullptr;
  outbound::apps::request_options request_opts;
  outbound::apps::watch_options watch_opts;
  outbound::apps::oracle_options ts_opts;
  outbound::apps::oracle_options seq_opts;
  outbound::apps::group_member_options group_member_opts;
};

/// Runs the parsed one of `c` on an actor system of its own; its exit code.
int run_client_command(client_commands& c,
                       const std::vector<std::string>& secrets) {
  using namespace outbound::apps;
  // Every client, pool and WebSocket of a command runs on the system's io
  // runner (io_runner_for). With the recommended io_loop policy the CAF
  // workers run it: completions run on them until the scheduler stops, and
  // its context goes when main releases `io`, last. With another policy it
  // is the process-wide runner with its own thread: when the command is
  // done, main stops it (no completion runs any more) before the actor
  // system shuts down. Otherwise an io completion on that thread can drop
  // the last reference to a connection pool actor while the system shuts
  // down: the pool then cleans itself up there, racing the system's
  // teardown (seen under ASan as a SEGV in caf::actor_system::clock() and
  // as TLS sessions leaked at exit).
  std::shared_ptr<outbound::io_runner> io;
  try {
    caf::actor_system_config cfg;
    // Type ids and the recommended scheduler settings
    // (actors/system/system_setup.hpp).
    outbound::configure(cfg);
    caf::actor_system sys{cfg};
    io = outbound::io_runner_for(sys);
    int code = usage_exit_code;
    if (c.request->parsed())
      code = run_request(sys, c.request_opts, std::cout, std::cerr);
    else if (c.watch->parsed())
      code = run_watch(sys, c.watch_opts, std::cout, std::cerr);
    else if (c.ts->parsed())
      code = run_ts(sys, c.ts_opts, std::cout, std::cerr);
    else if (c.seq->parsed())
      code = run_seq(sys, c.seq_opts, std::cout, std::cerr);
    else if (c.group_member->parsed())
      code = run_group_member(sys, c.group_member_opts, std::cout, std::cerr);
    io->stop(); // nothing for a driven runner (see above)
    return code;
  } catch (const std::exception& e) {
    if (io)
      io->stop();
    std::cerr << redact(usage_error_json("internal_error", e.what()), secrets)
              << '\n';
    return internal_exit_code;
  }
}

} // namespace

int main(int argc, char** argv) {
  using namespace outbound::apps;
  auto secrets = token_values(argc, argv);
  CLI::App app{"outbound: call internal JSON-over-HTTP services through "
               "CAF actors, with bounded retries and typed errors",
               "outbound"};
  app.require_subcommand(1);
  client_commands commands;
  commands.request = add_request_command(app, commands.request_opts);
  hub_options hub_opts;
  auto* hub_cmd = add_hub_command(app, hub_opts);
  commands.watch = add_watch_command(app, commands.watch_opts);
  commands.ts = add_ts_command(app, commands.ts_opts);
  commands.seq = add_seq_command(app, commands.seq_opts);
  commands.group_member
    = add_group_member_command(app, commands.group_member_opts);
  demo_options demo_opts;
  auto* demo_cmd = add_demo_command(app, demo_opts);
  // The version CMake's project() declares (CMakeLists.txt).
  app.set_version_flag("--version", std::string{"outbound "} + OUTBOUND_VERSION,
                       "Print the version and exit");
  if (!known_subcommand(app, argc, argv, secrets))
    return usage_exit_code;
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    // --help, --help-all, --version: printed on stdout, exit 0.
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // Point at the help of the subcommand typed, if any; with none, list
    // them (as for an unknown one).
    std::string detail = e.what();
    std::string sub;
    if (auto parsed = app.get_subcommands(); !parsed.empty())
      sub = parsed.front()->get_name();
    if (sub.empty()) {
      std::string list;
      for (auto* c : app.get_subcommands([](CLI::App*) { return true; }))
        list += (list.empty() ? "" : ", ") + c->get_name();
      detail += " (subcommands: " + list + "; run 'outbound --help')";
    } else {
      detail += " (run 'outbound " + sub + " --help')";
    }
    std::cerr << redact(usage_error_json("usage_error", detail), secrets)
              << '\n';
    return usage_exit_code;
  }
  // The hub runs before any other thread exists (it owns SIGINT/SIGTERM).
  if (hub_cmd->parsed())
    return run_hub(hub_opts, std::cout, std::cerr);
  // So does the demo (it creates its own actor system).
  if (demo_cmd->parsed())
    return run_demo(demo_opts, std::cout, std::cerr);
  return run_client_command(commands, secrets);
}
