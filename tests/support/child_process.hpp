#pragma once

// Child processes from a test: the one runner the integration tests share
// for the `outbound` CLI and any other binary they drive (nginx has its own,
// tests/support/nginx_fixture.cpp, for PR_SET_PDEATHSIG). Standard input is
// /dev/null; standard output and error go to files of a temporary directory;
// every wait is bounded in time. `run_child` runs a program to its end;
// `running_child` keeps one running while the test talks to it (a hub, a
// demo, a watcher) and kills it if the test leaves first.

#include "tests/support/test_certs.hpp" // temp_dir

#include <sys/types.h>

#include <chrono>
#include <optional>
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

/// Starts `argv` (argv[0] is the program's path) tied to this process: the
/// child gets SIGKILL when the thread that started it ends (fork + exec
/// with PR_SET_PDEATHSIG, which posix_spawn cannot set), so a server a
/// test process leaves behind (a crash, a ctest timeout) does not keep its
/// ports. stdin is /dev/null, stdout and stderr append to `log_path`; the
/// environment is `env` ("NAME=value"), this process's when nullopt.
/// Start it from a thread that outlives it (the main thread, in
/// SetUpTestSuite). Returns its pid (the caller reaps it); throws
/// std::runtime_error when fork fails. A program that cannot be executed
/// exits with 127.
pid_t spawn_tied_child(const std::vector<std::string>& argv,
                       const std::string& log_path,
                       const std::optional<std::vector<std::string>>& env
                       = std::nullopt);

/// Runs `argv` (argv[0] is the program's path) with this process's
/// environment plus `extra_env` ("NAME=value" entries, later ones win) and
/// waits for it, at most `bound`. Throws std::runtime_error when the program
/// cannot be started.
child_run run_child(const std::vector<std::string>& argv,
                    std::chrono::milliseconds bound,
                    const std::vector<std::string>& extra_env = {});

/// Waits for the child `pid` to end, at most `bound`, and reaps it: its exit
/// code (128 + the signal that ended it), or nullopt when it still runs (it
/// is then neither killed nor reaped). Sleeps in poll(2) on a pidfd
/// (pidfd_open(2), Linux 5.3) so that it wakes the moment the child ends;
/// where there is none, it polls waitpid every 2 ms.
std::optional<int> wait_child(pid_t pid, std::chrono::milliseconds bound);

/// The argv of the `outbound` binary under test followed by `args`.
std::vector<std::string> outbound_argv(std::vector<std::string> args);

/// A program kept running while a test talks to it: spawned at
/// construction (as `spawn_child`, its output into files of its own temp
/// dir), SIGKILLed and reaped at destruction when it still runs.
class running_child {
public:
  /// Starts `argv` (argv[0] is the program's path). Throws
  /// std::runtime_error when it cannot be started.
  explicit running_child(std::vector<std::string> argv,
                         const std::vector<std::string>& extra_env = {});
  ~running_child();

  running_child(const running_child&) = delete;
  running_child& operator=(const running_child&) = delete;

  /// Its standard output / error so far.
  std::string out() const;
  std::string err() const;

  /// Waits until standard output holds a first complete line and returns it
  /// without the newline; "" when the child ended or `bound` passed first.
  std::string first_line(std::chrono::milliseconds bound);

  /// Waits until standard output holds at least `n` non-empty lines; true
  /// when it did within `bound` (or by the child's end).
  bool wait_out_lines(std::size_t n, std::chrono::milliseconds bound);

  /// Sends `sig` (no-op once the child was reaped).
  void signal(int sig);

  /// Its exit code (128 + signal), or nullopt when it still runs after
  /// `bound`. Once known, the code is remembered.
  std::optional<int> wait_exit(std::chrono::milliseconds bound);

  /// True once it has ended (reaps it).
  bool exited();

  /// When it was spawned.
  std::chrono::steady_clock::time_point started() const {
    return started_;
  }

  /// From spawn to the moment `wait_exit` saw it end (valid once it did).
  std::chrono::milliseconds lifetime() const;

private:
  temp_dir dir_;
  std::string out_path_;
  std::string err_path_;
  pid_t pid_ = -1;
  std::optional<int> code_;
  std::chrono::steady_clock::time_point started_;
  std::chrono::steady_clock::time_point ended_;
};

/// The whole content of the file at `path` (empty when it cannot be read).
std::string slurp(const std::string& path);

/// The non-empty lines of `text`, without their newlines.
std::vector<std::string> lines_of(const std::string& text);

} // namespace outbound::testing
