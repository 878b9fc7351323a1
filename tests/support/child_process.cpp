#include "tests/support/child_process.hpp"

#include "tests/integration/test_certs.hpp" // temp_dir

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

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

child_run run_child(const std::vector<std::string>& args,
                    std::chrono::milliseconds bound,
                    const std::vector<std::string>& extra_env) {
  temp_dir dir{"outbound-child-"};
  auto out_path = dir.file("out");
  auto err_path = dir.file("err");
  auto pid = spawn_child(args, out_path, err_path, extra_env);
  child_run r;
  int status = 0;
  auto give_up = std::chrono::steady_clock::now() + bound;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > give_up) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      r.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds{5});
  }
  r.exit_code
    = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(out_path);
  r.err = slurp(err_path);
  return r;
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
