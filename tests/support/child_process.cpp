#include "tests/support/child_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace outbound::testing {

pid_t spawn_child(const std::vector<std::string>& args,
                  const std::string& out_path, const std::string& err_path,
                  const std::vector<std::string>& extra_env) {
  if (args.empty())
    throw std::runtime_error("spawn_child: no program");
  std::vector<std::string> argv_s = args;
  std::vector<char*> argv;
  for (auto& a : argv_s)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e)
    env_s.emplace_back(*e);
  env_s.insert(env_s.end(), extra_env.begin(), extra_env.end());
  std::vector<char*> envp;
  for (auto& e : env_s)
    envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  pid_t pid = -1;
  auto rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0)
    throw std::runtime_error("cannot spawn " + args[0] + ": "
                             + std::strerror(rc));
  return pid;
}

pid_t spawn_tied_child(const std::vector<std::string>& argv,
                       const std::string& log_path,
                       const std::optional<std::vector<std::string>>& env) {
  if (argv.empty())
    throw std::runtime_error("spawn_tied_child: empty argv");
  std::vector<std::string> args_s = argv;
  std::vector<char*> args;
  for (auto& a : args_s)
    args.push_back(a.data());
  args.push_back(nullptr);
  std::vector<std::string> env_s;
  if (env)
    env_s = *env;
  else
    for (char** e = environ; *e; ++e)
      env_s.emplace_back(*e);
  std::vector<char*> envp;
  for (auto& e : env_s)
    envp.push_back(e.data());
  envp.push_back(nullptr);
  // Only async-signal-safe calls between fork and exec.
  auto parent = ::getpid();
  auto pid = ::fork();
  if (pid < 0)
    throw std::runtime_error("fork failed: "
                             + std::string{std::strerror(errno)});
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent)
      ::_exit(127);
    int in = ::open("/dev/null", O_RDONLY);
    int o = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (in < 0 || o < 0)
      ::_exit(127);
    ::dup2(in, 0);
    ::dup2(o, 1);
    ::dup2(o, 2);
    ::execve(args[0], args.data(), envp.data());
    ::_exit(127);
  }
  return pid;
}

child_run run_child(const std::vector<std::string>& args,
                    std::chrono::milliseconds bound,
                    const std::vector<std::string>& extra_env) {
  temp_dir dir{"outbound-child-"};
  auto out_path = dir.file("out");
  auto err_path = dir.file("err");
  auto pid = spawn_child(args, out_path, err_path, extra_env);
  child_run r;
  auto code = wait_child(pid, bound);
  if (!code) {
    ::kill(pid, SIGKILL);
    code = wait_child(pid, std::chrono::hours{1});
    r.timed_out = true;
  }
  r.exit_code = code.value_or(-1);
  r.out = slurp(out_path);
  r.err = slurp(err_path);
  return r;
}

namespace {

/// waitpid without blocking: the exit code when `pid` has ended (reaped).
std::optional<int> reap(pid_t pid) {
  int status = 0;
  pid_t r;
  while ((r = ::waitpid(pid, &status, WNOHANG)) < 0 && errno == EINTR) {
  }
  if (r != pid)
    return std::nullopt;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

} // namespace

std::optional<int> wait_child(pid_t pid, std::chrono::milliseconds bound) {
  using clock = std::chrono::steady_clock;
  auto until = clock::now() + bound;
  int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  std::optional<int> code;
  for (;;) {
    if ((code = reap(pid)))
      break;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      until - clock::now());
    if (left.count() <= 0)
      break;
    if (fd >= 0) {
      pollfd p{fd, POLLIN, 0};
      ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds{2});
    }
  }
  if (fd >= 0)
    ::close(fd);
  return code;
}

std::vector<std::string> outbound_argv(std::vector<std::string> args) {
#ifdef OUTBOUND_CLI
  args.insert(args.begin(), OUTBOUND_CLI);
  return args;
#else
  throw std::runtime_error("outbound_argv: built without OUTBOUND_CLI");
#endif
}

running_child::running_child(std::vector<std::string> argv,
                             const std::vector<std::string>& extra_env)
  : dir_{"outbound-child-"}, out_path_{dir_.file("out")}, err_path_{
                                                            dir_.file("err")} {
  pid_ = spawn_child(argv, out_path_, err_path_, extra_env);
  started_ = std::chrono::steady_clock::now();
}

running_child::~running_child() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    wait_child(pid_, std::chrono::seconds{30});
  }
}

std::string running_child::out() const {
  return slurp(out_path_);
}

std::string running_child::err() const {
  return slurp(err_path_);
}

std::string running_child::first_line(std::chrono::milliseconds bound) {
  auto until = std::chrono::steady_clock::now() + bound;
  for (;;) {
    auto o = out();
    if (auto nl = o.find('\n'); nl != std::string::npos)
      return o.substr(0, nl);
    if (std::chrono::steady_clock::now() > until || exited())
      return "";
    std::this_thread::sleep_for(std::chrono::milliseconds{5});
  }
}

bool running_child::wait_out_lines(std::size_t n,
                                   std::chrono::milliseconds bound) {
  auto until = std::chrono::steady_clock::now() + bound;
  while (lines_of(out()).size() < n) {
    if (std::chrono::steady_clock::now() > until || exited())
      return lines_of(out()).size() >= n;
    std::this_thread::sleep_for(std::chrono::milliseconds{5});
  }
  return true;
}

void running_child::signal(int sig) {
  if (pid_ > 0)
    ::kill(pid_, sig);
}

std::optional<int> running_child::wait_exit(std::chrono::milliseconds bound) {
  if (code_)
    return code_;
  if ((code_ = wait_child(pid_, bound))) {
    pid_ = -1;
    ended_ = std::chrono::steady_clock::now();
  }
  return code_;
}

bool running_child::exited() {
  return wait_exit(std::chrono::milliseconds{0}).has_value();
}

std::chrono::milliseconds running_child::lifetime() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(ended_
                                                               - started_);
}

std::string slurp(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> r;
  std::istringstream in{text};
  for (std::string l; std::getline(in, l);)
    if (!l.empty())
      r.push_back(l);
  return r;
}

} // namespace outbound::testing
