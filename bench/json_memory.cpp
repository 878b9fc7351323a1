// json_memory: peak memory of reading a large JSON response, by body shape
// and size, through outbound's service client next to two same-run
// baselines: holding the raw body once, and boost::json::parse of it with
// the default memory resource (what the client did before its parse had a
// memory bound: protocol/json_parse.hpp, client_config::json_memory_factor).
//
// Every (shape, size, method) runs in a fresh child process (this binary
// with --child), so that one case's peak cannot hide another's: the child
// prepares what the method needs (the body, and for the client an
// in-process loopback server and a CAF actor system), reads its peak RSS
// (VmHWM in /proc/self/status), runs the method once, reads VmHWM again
// and prints the growth. The parent prints one table.
//
// Bounded: shapes x sizes x 4 children, each with a 60 s call deadline;
// 127.0.0.1 only. See bench/README.md.

#include "bench/caf_setup.hpp"

#include "actors/client/blocking_client.hpp"
#include "config/client_config.hpp"
#include "protocol/json_parse.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <CLI/CLI.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace outbound;

namespace {

/// Peak resident set size of this process so far, in KiB (VmHWM).
long vm_hwm_kib() {
  std::ifstream f{"/proc/self/status"};
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmHWM:", 0) == 0)
      return std::atol(line.c_str() + 6);
  return -1;
}

/// A JSON text of exactly `size` bytes (size >= 16) of the given shape:
///   arrays   [[],[],...,[]]          3 bytes per element
///   objects  [{},{},...,{}]          3 bytes per element
///   page     {"events":[{...},...],"cursor":N}  a replay page of ~150-byte
///            events with a small metadata object, padded with spaces
std::string make_body(const std::string& shape, std::size_t size) {
  std::string b;
  b.reserve(size);
  if (shape == "arrays" || shape == "objects") {
    const char* unit = shape == "arrays" ? "[]," : "{},";
    const char* last = shape == "arrays" ? "[]" : "{}";
    b += '[';
    while (b.size() + 3 + 3 <= size)
      b += unit;
    b += last;
    b += ']';
  } else {
    b += "{\"events\":[";
    const std::string tail = "],\"cursor\":1}";
    for (long id = 1;; ++id) {
      auto ev = std::string{id == 1 ? "" : ","} + "{\"id\":"
                + std::to_string(id) + ",\"key\":\"orders/" + std::to_string(id)
                + "\",\"type\":\"created\",\"ts\":\"2026-12-01T00:00:00Z\","
                  "\"metadata\":{\"region\":\"eu-west-1\",\"amount\":12.5,"
                  "\"tags\":[\"a\",\"b\"]}}";
      if (b.size() + ev.size() + tail.size() > size)
        break;
      b += ev;
    }
    b += tail;
  }
  b.append(size - std::min(size, b.size()), ' ');
  return b;
}

/// A loopback HTTP/1.1 server on its own thread that answers every
/// request with `body` (application/json, Connection: close).
class body_server {
public:
  explicit body_server(const std::string& body) : body_(body) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(fd_, 16);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { run(); });
  }
  ~body_server() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  uint16_t port() const {
    return port_;
  }

private:
  void run() {
    while (!stop_) {
      int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0)
        return;
      std::string req;
      char buf[4096];
      while (req.find("\r\n\r\n") == std::string::npos) {
        auto n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0)
          break;
        req.append(buf, static_cast<std::size_t>(n));
      }
      auto head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                  "Content-Length: "
                  + std::to_string(body_.size())
                  + "\r\nConnection: close\r\n\r\n";
      ::send(c, head.data(), head.size(), MSG_NOSIGNAL);
      std::size_t off = 0;
      while (off < body_.size()) {
        auto n
          = ::send(c, body_.data() + off, body_.size() - off, MSG_NOSIGNAL);
        if (n <= 0)
          break;
        off += static_cast<std::size_t>(n);
      }
      ::close(c);
    }
  }

  const std::string& body_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

/// The child: runs one method on one body, prints
/// "<growth KiB> <outcome>".
/// The CAF flags of the command line, passed on to every child.
outbound::bench::caf_flags caf_opts;

int child(const std::string& shape, std::size_t size,
          const std::string& method) {
  if (method == "body") {
    // The baseline of holding the body once.
    auto before = vm_hwm_kib();
    auto body = make_body(shape, size);
    std::printf("%ld ok\n", vm_hwm_kib() - before);
    return 0;
  }
  auto body = make_body(shape, size);
  if (method == "boost_json") {
    auto before = vm_hwm_kib();
    boost::json::error_code ec;
    auto v = boost::json::parse(body, ec);
    std::printf("%ld %s\n", vm_hwm_kib() - before,
                ec ? ec.message().c_str() : "ok");
    return 0;
  }
  client_config cfg;
  if (method == "parse_json") {
    // The library's parser with the client's default limits, without the
    // transport.
    auto before = vm_hwm_kib();
    auto r = parse_json(body, cfg.response_json_limits());
    std::printf("%ld %s\n", vm_hwm_kib() - before, to_string(r.error));
    return 0;
  }
  body_server server{body};
  caf::actor_system_config sys_cfg;
  if (!caf_opts.apply(sys_cfg))
    return 2;
  caf::actor_system sys{sys_cfg};
  cfg.base_url = "http://127.0.0.1:" + std::to_string(server.port());
  cfg.timeout = 60;
  cfg.deadline = 60;
  blocking_client client{sys, cfg};
  call_request get;
  get.path = "/page";
  auto before = vm_hwm_kib();
  auto o = client.call(get);
  auto growth = vm_hwm_kib() - before;
  std::string outcome = o.ok() ? "ok" : to_string(o.error->kind);
  if (!o.ok() && !o.error->detail.empty())
    outcome += " (" + o.error->detail.substr(0, 60) + ")";
  std::printf("%ld %s\n%s\n", growth, outcome.c_str(),
              caf_opts.report(sys).c_str());
  return 0;
}

std::string self_exe() {
  char buf[4096];
  auto n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string{buf, static_cast<std::size_t>(n)} : "";
}

/// Runs one child; its growth in KiB (-1 on failure) and outcome.
std::pair<long, std::string> run_child(const std::string& exe,
                                       const std::string& shape,
                                       std::size_t size,
                                       const std::string& method) {
  auto cmd = "'" + exe + "' --child --shape " + shape + " --bytes "
             + std::to_string(size) + " --method " + method
             + caf_opts.to_args();
  auto* p = ::popen(cmd.c_str(), "r");
  if (!p)
    return {-1, "popen failed"};
  std::string out;
  char buf[512];
  while (auto n = std::fread(buf, 1, sizeof buf, p))
    out.append(buf, n);
  auto st = ::pclose(p);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
    return {-1, "child failed"};
  std::istringstream is{out};
  long kib = -1;
  std::string rest;
  is >> kib;
  std::getline(is, rest);
  if (!rest.empty() && rest[0] == ' ')
    rest.erase(0, 1);
  // A client child's second line: the CAF settings its system ran with.
  static bool caf_printed = false;
  for (std::string line; std::getline(is, line);)
    if (!caf_printed && line.rfind("caf: ", 0) == 0) {
      std::printf("(first client child) %s\n", line.c_str());
      caf_printed = true;
    }
  return {kib, rest};
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"json_memory: peak RSS growth of reading a large JSON "
               "response, by shape and size"};
  bool is_child = false;
  std::string shape = "arrays";
  std::size_t bytes = 0;
  std::string method = "client";
  std::vector<std::string> shapes{"arrays", "objects", "page"};
  std::vector<double> sizes_mib{1, 8, 30, 31.9};
  app.add_flag("--child", is_child, "(internal) run one case");
  app.add_option("--shape", shape, "(internal) body shape");
  app.add_option("--bytes", bytes, "(internal) body size");
  app.add_option("--method", method,
                 "(internal) body | boost_json | "
                 "parse_json | client");
  app.add_option("--shapes", shapes, "body shapes: arrays objects page");
  app.add_option("--sizes", sizes_mib,
                 "body sizes in MiB (the client's cap is 32 MiB)");
  // The client child's io_runner (1) and its loopback server's thread.
  caf_opts.io_threads = 2;
  caf_opts.add_to(app);
  CLI11_PARSE(app, argc, argv);
  if (is_child)
    return child(shape, bytes, method);

  auto exe = self_exe();
  client_config cfg;
  std::printf("json_memory: peak RSS growth (VmHWM) per case, each in a "
              "fresh process; client cap %zu MiB, json_memory_factor %zu, "
              "json_memory_max_bytes %zu MiB (parsed-form bound %zu MiB)\n\n",
              cfg.max_response_bytes >> 20, cfg.json_memory_factor,
              cfg.json_memory_max_bytes >> 20,
              cfg.response_json_limits().max_bytes >> 20);
  std::printf("%-8s %9s %10s %12s %12s %12s  %s\n", "shape", "size MiB",
              "body MB", "boost_json", "parse_json", "client MB",
              "client outcome (parse_json outcome)");
  int failed = 0;
  for (auto& s : shapes)
    for (double mib : sizes_mib) {
      auto size = static_cast<std::size_t>(mib * 1024 * 1024);
      auto body = run_child(exe, s, size, "body");
      auto raw = run_child(exe, s, size, "boost_json");
      auto lib = run_child(exe, s, size, "parse_json");
      auto cli = run_child(exe, s, size, "client");
      for (auto* r : {&body, &raw, &lib, &cli})
        failed += r->first < 0 ? 1 : 0;
      auto mb = [](long kib) {
        return kib * 1024.0 / 1e6;
      };
      std::printf("%-8s %9.1f %10.1f %12.1f %12.1f %12.1f  %s (%s)\n",
                  s.c_str(), mib, mb(body.first), mb(raw.first), mb(lib.first),
                  mb(cli.first), cli.second.c_str(), lib.second.c_str());
      std::fflush(stdout);
    }
  return failed == 0 ? 0 : 1;
}
