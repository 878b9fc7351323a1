#pragma once

// Running a program to its end from a test: the one runner the integration
// tests share for the `outbound` CLI (and any other binary they drive).
// Standard input is /dev/null; standard output and error go to files of a
// temporary directory and come back whole; the run is bounded in time.

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace outbound::testing {

/// What one finished (or killed) child process left behind.
struct child_run {
  /// Its exit status, or 128 + the signal that ended it.
  int exit_code = -1;
  std::string out;
  std::string err;
  /// True when it was still running at the bound and was killed (SIGKILL).
  bool timed_out = false;
};

/// Starts `argv` (argv[0] is the program's path) with stdin /dev/null and
/// stdout / stderr into the files `out_path` / `err_path` (created or
/// truncated), with this process's environment plus `extra_env`; returns
/// its pid (the caller reaps it). Throws std::runtime_error when the program
/// cannot be started.
pid_t spawn_child(const std::vector<std::string>& argv,
                  const std::string& out_path, const std::string& err_path,
                  const std::vector<std::string>& extra_env = {});

/// Runs `argv` (argv[0] is the program's path) with this process's
/// environment plus `extra_env` ("NAME=value" entries, later ones win) and
/// waits for it, at most `bound`. Throws std::runtime_error when the program
/// cannot be started.
child_run run_child(const std::vector<std::string>& argv,
                    std::chrono::milliseconds bound,
                    const std::vector<std::string>& extra_env = {});

/// The whole content of the file at `path` (empty when it cannot be read).
std::string slurp(const std::string& path);

/// The non-empty lines of `text`, without their newlines.
std::vector<std::string> lines_of(const std::string& text);

} // namespace outbound::testing
