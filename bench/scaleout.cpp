// bench/scaleout (bench/README.md "scaleout"): feed groups end to end, as
// processes, against static modulo sharding in the same run.
//
// On 127.0.0.1: the reference hub in-process (hub/hub.hpp, one io thread), a
// private etcd (tests/support/etcd_fixture.hpp: its own ports and a temporary
// data directory), M members `outbound group-member` sharing F = M x N feeds
// `feed-<i>` (each following `feed-<i>/`), and, as the baseline, M
// `outbound watch` processes each following its fixed share of the same
// feeds (--prefix feed-<i>/ for i % M == k: static modulo sharding, what a
// user does without groups). A publisher thread publishes `feed-<i>/e` at R
// events/s round robin over the F feeds.
//
// Timeline (seconds after the publisher starts, each window times --scale):
//   0             steady state                       (--steady 30)
//   T_kill        SIGKILL member 2 and baseline 2    (--crash-window 30)
//   T_term        SIGTERM member 3 (graceful leave)  (--graceful-window 15)
//   T_join        start member 4                     (--join-window 20)
//   T_pub_end     publisher stops; drain             (--drain 10)
//   then SIGTERM to every process left, bounded waits, and the checks.
//
// Every child's stdout is read through a pipe by a thread that stamps each
// line with its arrival time (steady clock) and writes "<seconds> <line>" to
// <workdir>/<name>.out; stderr goes to <workdir>/<name>.err (the members'
// status lines, one a second). The checker runs over these logs and the
// publisher's list (id, feed, publish time):
//   lost        published, never delivered by any member
//   reordered   within one (feed, owner token), an id not above the last
//   duplicates  ids delivered more than once; within the bound when the
//               SIGKILLed member delivered one of the two copies (it could
//               not commit what it delivered after its last checkpoint)
//   overlap     feeds where two tokens delivered at overlapping wall times
//               (more than one delivery of one inside the other's span)
//   takeover    crash/graceful: per feed the member had, from the signal to
//               the first delivery by another member of an event published
//               after the signal; join: per feed member 4 took, from its
//               start to its first delivery. Upper bounds: a sample is
//               "censored" when that event was delivered within 0.5 s of
//               its publish (the new owner was there before the event).
//   unowned     publish->delivery latency of events published in each
//               window on the feeds that moved (p99, max)
//   balance     owned max/min over the live members (their status lines)
//   rss         VmRSS of each member (/proc/<pid>/status) just before the
//               kill, per owned feed
// Each figure prints as a line and as one JSON line ("json: {...}").

#include "bench/caf_setup.hpp" // load_average

#include "hub/hub.hpp"
#include "tests/support/child_process.hpp"
#include "tests/support/etcd_fixture.hpp"
#include "tests/support/test_certs.hpp"

#include <CLI/CLI.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

extern char** environ;

using namespace outbound;
using clk = std::chrono::steady_clock;

namespace {

clk::time_point t_zero;

/// Seconds since t_zero (the publisher's start; negative before).
double now_s() {
  return std::chrono::duration<double>(clk::now() - t_zero).count();
}

void sleep_until_s(double t) {
  auto d = t - now_s();
  if (d > 0)
    std::this_thread::sleep_for(std::chrono::duration<double>(d));
}

void json_line(const std::string& body) {
  std::printf("json: {\"bench\":\"scaleout\",%s}\n", body.c_str());
  std::fflush(stdout);
}

std::string num(double v, int digits = 3) {
  if (!std::isfinite(v))
    return "null";
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}

double quantile(std::vector<double> v, double q) {
  if (v.empty())
    return NAN;
  std::sort(v.begin(), v.end());
  auto i = static_cast<std::size_t>(std::ceil(q * double(v.size()))) - 1;
  return v[std::min(i, v.size() - 1)];
}

double vmax(const std::vector<double>& v) {
  return v.empty() ? NAN : *std::max_element(v.begin(), v.end());
}

/// One stdout line with its arrival time.
struct stamped {
  double t;
  std::string text;
};

/// A child process whose stdout is read line by line through a pipe.
struct child {
  std::string name;
  pid_t pid = -1;
  int fd = -1;
  std::thread reader;
  std::string out_path, err_path;
  std::mutex mu;
  std::vector<stamped> lines;
  std::optional<int> code;
  double signalled_at = NAN;
  /// When its stdout closed (it exited), by the reader thread (NaN: not
  /// yet).
  std::atomic<double> eof_at{NAN};

  ~child() {
    if (pid > 0 && !code) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    if (reader.joinable())
      reader.join();
  }

  void start(const std::vector<std::string>& argv, const std::string& dir) {
    out_path = dir + "/" + name + ".out";
    err_path = dir + "/" + name + ".err";
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0)
      throw std::runtime_error("pipe2 failed");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
    posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::vector<char*> av;
    for (auto& a : argv)
      av.push_back(const_cast<char*>(a.c_str()));
    av.push_back(nullptr);
    auto rc = ::posix_spawn(&pid, av[0], &fa, nullptr, av.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(p[1]);
    if (rc != 0) {
      ::close(p[0]);
      throw std::runtime_error("cannot start " + argv[0] + ": "
                               + std::strerror(rc));
    }
    fd = p[0];
    reader = std::thread{[this] {
      read_loop();
    }};
  }

  void read_loop() {
    std::ofstream log{out_path};
    std::string buf;
    char chunk[65536];
    for (;;) {
      auto n = ::read(fd, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0) {
        eof_at = now_s();
        break;
      }
      auto t = now_s();
      buf.append(chunk, static_cast<std::size_t>(n));
      std::size_t start = 0;
      for (auto nl = buf.find('\n'); nl != std::string::npos;
           nl = buf.find('\n', start)) {
        std::string line = buf.substr(start, nl - start);
        start = nl + 1;
        if (line.empty())
          continue;
        log << num(t, 6) << ' ' << line << '\n';
        std::lock_guard<std::mutex> lock{mu};
        lines.push_back({t, std::move(line)});
      }
      buf.erase(0, start);
    }
    ::close(fd);
  }

  void signal(int sig) {
    if (pid > 0 && !code) {
      ::kill(pid, sig);
      if (std::isnan(signalled_at))
        signalled_at = now_s();
    }
  }

  /// Its exit code (128 + signal), or nullopt while it runs after `bound_s`.
  std::optional<int> wait(double bound_s) {
    if (code)
      return code;
    if (pid <= 0)
      return std::nullopt;
    auto r = testing::wait_child(
      pid, std::chrono::milliseconds(static_cast<int64_t>(bound_s * 1000)));
    if (r)
      code = r;
    return code;
  }

  /// The last "status" line of its stderr, parsed (null when none).
  boost::json::value last_status() const {
    auto text = testing::slurp(err_path);
    boost::json::value out;
    for (auto& l : testing::lines_of(text)) {
      if (l.find("\"type\":\"status\"") == std::string::npos)
        continue;
      boost::system::error_code ec;
      auto v = boost::json::parse(l, ec);
      if (!ec)
        out = std::move(v);
    }
    return out;
  }

  int64_t owned() const {
    auto s = last_status();
    if (auto* o = s.if_object())
      if (auto* v = o->if_contains("owned"))
        if (v->is_int64())
          return v->as_int64();
    return -1;
  }

  /// VmRSS in KiB (/proc/<pid>/status), -1 when unknown.
  int64_t rss_kib() const {
    std::ifstream in{"/proc/" + std::to_string(pid) + "/status"};
    std::string key;
    while (in >> key) {
      if (key == "VmRSS:") {
        int64_t v = -1;
        in >> v;
        return v;
      }
      std::string rest;
      std::getline(in, rest);
    }
    return -1;
  }
};

struct published {
  int64_t id;
  std::size_t feed;
  double t;
};

/// One delivery line: who (child index), when, which feed, token, id.
struct delivery {
  std::size_t who;
  double t;
  std::size_t feed;
  std::string token;
  int64_t id;
};

/// Feed index of "feed-<i>/..." or "feed-<i>" (npos when not one).
std::size_t feed_of(std::string_view s) {
  if (s.substr(0, 5) != "feed-")
    return std::string::npos;
  std::size_t v = 0, i = 5;
  if (i >= s.size() || s[i] < '0' || s[i] > '9')
    return std::string::npos;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i)
    v = v * 10 + std::size_t(s[i] - '0');
  return v;
}

/// The deliveries of one child's stdout: group-member lines
/// {"type":"event","feed","token","id","subject"} or watch lines
/// {"type":"event","event":{"id","subject",...}}.
std::vector<delivery> deliveries_of(child& c, std::size_t who,
                                    uint64_t& bad_lines) {
  std::vector<delivery> out;
  std::lock_guard<std::mutex> lock{c.mu};
  for (auto& l : c.lines) {
    boost::system::error_code ec;
    auto v = boost::json::parse(l.text, ec);
    auto* o = ec ? nullptr : v.if_object();
    if (!o) {
      ++bad_lines;
      continue;
    }
    auto* type = o->if_contains("type");
    if (!type || !type->is_string() || type->as_string() != "event")
      continue;
    const boost::json::object* ev = o;
    if (auto* inner = o->if_contains("event"))
      ev = inner->if_object();
    if (!ev) {
      ++bad_lines;
      continue;
    }
    auto* id = ev->if_contains("id");
    auto* sub = ev->if_contains("subject");
    if (!id || !id->is_int64() || !sub || !sub->is_string()) {
      ++bad_lines;
      continue;
    }
    delivery d;
    d.who = who;
    d.t = l.t;
    d.feed = feed_of(sub->as_string());
    d.id = id->as_int64();
    if (auto* tok = o->if_contains("token"))
      d.token = std::to_string(who) + ":" + boost::json::serialize(*tok);
    else
      d.token = std::to_string(who);
    out.push_back(std::move(d));
  }
  return out;
}

std::string quantiles_json(const char* key, const std::vector<double>& v) {
  std::string s = std::string{"\""} + key + "_n\":" + std::to_string(v.size());
  s += std::string{",\""} + key + "_p50_s\":" + num(quantile(v, 0.5));
  s += std::string{",\""} + key + "_p99_s\":" + num(quantile(v, 0.99));
  s += std::string{",\""} + key + "_max_s\":" + num(vmax(v));
  return s;
}

const char* verdict(bool ok) {
  return ok ? "met" : "MISSED";
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"feed groups end to end (etcd, M `outbound group-member` "
               "processes) against static modulo sharding, 127.0.0.1 only"};
  std::size_t members = 3, feeds_per_member = 300;
  double rate = 90, scale = 1;
  double steady = 30, crash_window = 30, graceful_window = 15, join_window = 20,
         drain = 10;
  double lease_ttl = 5, renew = 1.5, fence = 1, checkpoint = 1, poll = 0.5,
         settle = 3, rebalance = 5, reconcile = 5;
  double startup_bound = 90;
  bool baseline = true, base_filter = false;
  std::size_t base_max_prefixes = 200;
  std::string cli = OUTBOUND_CLI;
  std::string keep_dir;
  app.add_option("--members", members, "initial members M (>= 3)")
    ->check(CLI::Range(3, 16))
    ->capture_default_str();
  app
    .add_option("--feeds-per-member", feeds_per_member,
                "feeds per initial member N (F = M x N feeds)")
    ->check(CLI::Range(1, 20000))
    ->capture_default_str();
  app.add_option("--rate", rate, "publish rate over all feeds, events/s")
    ->check(CLI::Range(1.0, 20000.0))
    ->capture_default_str();
  app.add_option("--scale", scale, "multiplies every window below")
    ->check(CLI::Range(0.1, 10.0))
    ->capture_default_str();
  app.add_option("--steady", steady, "steady state before the kill, s")
    ->capture_default_str();
  app.add_option("--crash-window", crash_window, "kill -> SIGTERM, s")
    ->capture_default_str();
  app.add_option("--graceful-window", graceful_window, "SIGTERM -> join, s")
    ->capture_default_str();
  app.add_option("--join-window", join_window, "join -> publisher stops, s")
    ->capture_default_str();
  app.add_option("--drain", drain, "publisher stop -> stop all, s")
    ->capture_default_str();
  app.add_option("--lease-ttl", lease_ttl, "members' --lease-ttl")
    ->capture_default_str();
  app.add_option("--renew-interval", renew, "members' --renew-interval")
    ->capture_default_str();
  app.add_option("--fence-margin", fence, "members' --fence-margin")
    ->capture_default_str();
  app
    .add_option("--checkpoint-interval", checkpoint,
                "members' --checkpoint-interval")
    ->capture_default_str();
  app.add_option("--poll-interval", poll, "members' --poll-interval")
    ->capture_default_str();
  app.add_option("--initial-settle", settle, "members' --initial-settle")
    ->capture_default_str();
  app.add_option("--rebalance-delay", rebalance, "members' --rebalance-delay")
    ->capture_default_str();
  app
    .add_option("--reconcile-interval", reconcile,
                "members' reconcile_interval (no flag: passed as "
                "OUTBOUND_GROUP_RECONCILE_INTERVAL)")
    ->capture_default_str();
  app
    .add_option("--startup-bound", startup_bound,
                "bound on the members owning every feed before publishing, s")
    ->capture_default_str();
  app.add_option("--baseline", baseline, "run the modulo-sharding baseline")
    ->capture_default_str();
  app
    .add_option("--baseline-max-prefixes", base_max_prefixes,
                "a static process with more feeds than this follows every "
                "feed and the checker keeps its share (0: always)")
    ->capture_default_str();
  app.add_option("--outbound", cli, "the outbound binary")
    ->capture_default_str();
  app.add_option("--keep-logs", keep_dir,
                 "write the logs into this directory (kept) instead of a "
                 "temporary one");
  CLI11_PARSE(app, argc, argv);

  ::signal(SIGPIPE, SIG_IGN);
  {
    rlimit rl{};
    if (::getrlimit(RLIMIT_NOFILE, &rl) == 0) {
      rl.rlim_cur = rl.rlim_max;
      ::setrlimit(RLIMIT_NOFILE, &rl);
    }
  }
  const std::size_t F = members * feeds_per_member;
  // One replay URL carries every prefix (?prefix=...&prefix=...): past a
  // few hundred it outgrows the hub's request header limit and the hub
  // resets the connection. Then each static process follows `feed-` (every
  // feed) and only the deliveries of its own share count.
  if (base_max_prefixes == 0 || F / members > base_max_prefixes)
    base_filter = true;
  const double T_kill = steady * scale;
  const double T_term = T_kill + crash_window * scale;
  const double T_join = T_term + graceful_window * scale;
  const double T_pub_end = T_join + join_window * scale;
  const double T_stop = T_pub_end + drain * scale;
  t_zero = clk::now() + std::chrono::hours(1); // until the publisher starts

  std::printf("bench scaleout: members=%zu feeds=%zu (%zu per member) "
              "rate=%.0f/s (%.3f per feed per s) kill@%.0f term@%.0f "
              "join@%.0f pub_end@%.0f stop@%.0f; lease_ttl=%.1f renew=%.1f "
              "fence=%.1f checkpoint=%.1f poll=%.1f settle=%.1f "
              "rebalance=%.1f reconcile=%.1f baseline=%s%s\n",
              members, F, feeds_per_member, rate, rate / double(F), T_kill,
              T_term, T_join, T_pub_end, T_stop, lease_ttl, renew, fence,
              checkpoint, poll, settle, rebalance, reconcile,
              baseline ? "yes" : "no",
              baseline && base_filter ? " (each static process follows "
                                        "every feed; its share counts)"
                                      : "");
  // The members (and the baseline watchers, which ignore it) inherit it.
  ::setenv("OUTBOUND_GROUP_RECONCILE_INTERVAL", num(reconcile, 3).c_str(), 1);
  std::printf("no actor system in this process (hub in-process, members "
              "and baseline as child processes); cores %u; load average "
              "%s\n",
              std::thread::hardware_concurrency(),
              outbound::bench::load_average().c_str());
  std::fflush(stdout);

  std::optional<testing::temp_dir> tmp;
  std::string dir = keep_dir;
  if (dir.empty()) {
    tmp.emplace("outbound-scaleout-");
    dir = tmp->path();
  } else {
    ::mkdir(dir.c_str(), 0755);
  }

  hub_config hc;
  hc.ring_size = 1024;
  hub h{hc};
  h.start();
  auto etcd_bin = testing::find_etcd();
  if (etcd_bin.empty()) {
    std::printf("NOT RUN: no etcd binary ($OUTBOUND_ETCD, PATH)\n");
    return 2;
  }
  std::unique_ptr<testing::etcd_instance> etcd;
  try {
    etcd = std::make_unique<testing::etcd_instance>(etcd_bin);
  } catch (const std::exception& e) {
    std::printf("NOT RUN: etcd did not start: %s\n", e.what());
    return 2;
  }
  std::printf("hub %s, etcd %s, logs in %s\n", h.base_url().c_str(),
              etcd->base_url().c_str(), dir.c_str());

  auto member_argv = [&](std::size_t k) {
    auto d = [](double v) {
      return num(v, 3);
    };
    return std::vector<std::string>{cli,
                                    "group-member",
                                    h.base_url(),
                                    "--group",
                                    "scaleout",
                                    "--member",
                                    "m" + std::to_string(k),
                                    "--coordinator",
                                    "etcd",
                                    "--etcd",
                                    etcd->base_url(),
                                    "--feed-count",
                                    std::to_string(F),
                                    "--subject-prefix",
                                    "feed-",
                                    "--lease-ttl",
                                    d(lease_ttl),
                                    "--renew-interval",
                                    d(renew),
                                    "--fence-margin",
                                    d(fence),
                                    "--checkpoint-interval",
                                    d(checkpoint),
                                    "--poll-interval",
                                    d(poll),
                                    "--initial-settle",
                                    d(settle),
                                    "--rebalance-delay",
                                    d(rebalance),
                                    "--status-interval",
                                    "1"};
  };
  // Index k of `group` is member k+1; group[M] is the joiner.
  std::vector<std::unique_ptr<child>> group, base;
  const std::size_t killed = 1, left = 2, joiner = members;
  for (std::size_t k = 0; k < members; ++k) {
    group.push_back(std::make_unique<child>());
    group.back()->name = "member" + std::to_string(k + 1);
    group.back()->start(member_argv(k + 1), dir);
  }
  if (baseline) {
    for (std::size_t k = 0; k < members; ++k) {
      std::vector<std::string> a{cli, "watch", h.base_url()};
      if (base_filter) {
        a.push_back("--prefix");
        a.push_back("feed-");
      } else {
        for (std::size_t i = k; i < F; i += members) {
          a.push_back("--prefix");
          a.push_back("feed-" + std::to_string(i) + "/");
        }
      }
      base.push_back(std::make_unique<child>());
      base.back()->name = "static" + std::to_string(k + 1);
      base.back()->start(a, dir);
    }
  }

  // Wait until the members own every feed (status lines, 1 s apart).
  auto w0 = clk::now();
  int64_t owned_sum = 0;
  for (;;) {
    owned_sum = 0;
    for (std::size_t k = 0; k < members; ++k)
      owned_sum += std::max<int64_t>(0, group[k]->owned());
    if (owned_sum >= int64_t(F))
      break;
    auto waited = std::chrono::duration<double>(clk::now() - w0).count();
    bool dead = false;
    for (auto& g : group)
      dead = dead || g->wait(0).has_value();
    if (waited > startup_bound || dead) {
      std::printf("NOT RUN: after %.1f s the members own %" PRId64
                  " of %zu feeds%s\n",
                  waited, owned_sum, F, dead ? " (a member exited)" : "");
      for (auto& g : group)
        std::printf("  %s: %s\n", g->name.c_str(),
                    boost::json::serialize(g->last_status()).c_str());
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  auto startup_s = std::chrono::duration<double>(clk::now() - w0).count();
  std::printf("members own all %zu feeds after %.1f s; publishing\n", F,
              startup_s);
  std::fflush(stdout);

  // The publisher.
  std::vector<published> pubs;
  pubs.reserve(std::size_t(rate * T_pub_end) + 16);
  std::atomic<bool> pub_done{false};
  uint64_t publish_errors = 0;
  t_zero = clk::now();
  std::thread publisher{[&] {
    for (uint64_t k = 0;; ++k) {
      double t = double(k) / rate;
      if (t >= T_pub_end)
        break;
      sleep_until_s(t);
      auto f = std::size_t(k % F);
      try {
        auto r = h.publish("feed-" + std::to_string(f) + "/e", "e");
        pubs.push_back({r.id, f, now_s()});
      } catch (const std::exception&) {
        ++publish_errors;
      }
    }
    pub_done = true;
  }};

  // The timeline.
  int64_t rss_steady[16] = {};
  int64_t owned_steady[16] = {};
  sleep_until_s(T_kill - 1.0);
  for (std::size_t k = 0; k < members; ++k) {
    rss_steady[k] = group[k]->rss_kib();
    owned_steady[k] = group[k]->owned();
  }
  sleep_until_s(T_kill);
  group[killed]->signal(SIGKILL);
  if (baseline)
    base[killed]->signal(SIGKILL);
  std::printf("t=%.2f SIGKILL member 2%s\n", now_s(),
              baseline ? " and static 2" : "");
  sleep_until_s(T_term);
  group[left]->signal(SIGTERM);
  std::printf("t=%.2f SIGTERM member 3\n", now_s());
  sleep_until_s(T_join);
  group.push_back(std::make_unique<child>());
  group.back()->name = "member" + std::to_string(joiner + 1);
  group.back()->start(member_argv(joiner + 1), dir);
  double t_join_real = now_s();
  std::printf("t=%.2f started member 4\n", t_join_real);
  std::fflush(stdout);
  publisher.join();
  std::printf(
    "t=%.2f publisher done: %zu events (%.1f/s), %" PRIu64 " errors\n", now_s(),
    pubs.size(), double(pubs.size()) / T_pub_end, publish_errors);
  sleep_until_s(T_stop);
  std::vector<std::size_t> live;
  for (std::size_t k = 0; k < group.size(); ++k)
    if (k != killed && k != left)
      live.push_back(k);
  std::vector<int64_t> owned_end, rss_end;
  for (auto k : live) {
    owned_end.push_back(group[k]->owned());
    rss_end.push_back(group[k]->rss_kib());
  }
  for (auto& g : group)
    g->signal(SIGTERM);
  for (auto& b : base)
    b->signal(SIGTERM);
  double stop_bound = lease_ttl + 15;
  for (auto* set : {&group, &base})
    for (auto& c : *set)
      if (!c->wait(stop_bound)) {
        c->signal(SIGKILL);
        c->wait(5);
      }
  std::printf("t=%.2f all stopped\n", now_s());
  for (auto* set : {&group, &base})
    for (auto& c : *set)
      if (c->reader.joinable())
        c->reader.join();
  h.stop();
  etcd->stop();

  // -- checks ---------------------------------------------------------------
  uint64_t bad_lines = 0;
  std::vector<delivery> gd, bd;
  for (std::size_t k = 0; k < group.size(); ++k) {
    auto d = deliveries_of(*group[k], k, bad_lines);
    gd.insert(gd.end(), d.begin(), d.end());
  }
  for (std::size_t k = 0; k < base.size(); ++k) {
    for (auto& d : deliveries_of(*base[k], k, bad_lines))
      if (d.feed % members == k)
        bd.push_back(std::move(d));
  }
  std::unordered_map<int64_t, std::size_t> pub_index;
  for (std::size_t i = 0; i < pubs.size(); ++i)
    pub_index[pubs[i].id] = i;

  // Deliveries per id, in arrival order.
  std::unordered_map<int64_t, std::vector<const delivery*>> by_id;
  uint64_t wrong_feed = 0, unknown_id = 0;
  for (auto& d : gd) {
    by_id[d.id].push_back(&d);
    auto it = pub_index.find(d.id);
    if (it == pub_index.end())
      ++unknown_id;
    else if (pubs[it->second].feed != d.feed)
      ++wrong_feed;
  }
  uint64_t lost = 0, dups = 0, dups_in_bound = 0;
  for (auto& p : pubs)
    if (!by_id.count(p.id))
      ++lost;
  for (auto& [id, ds] : by_id) {
    if (ds.size() < 2)
      continue;
    ++dups;
    bool by_killed = std::any_of(ds.begin(), ds.end(),
                                 [&](auto* d) { return d->who == killed; });
    if (by_killed && ds.size() == 2)
      ++dups_in_bound;
  }
  // Reordering within (feed, token); spans of each token per feed.
  struct span {
    double first = 1e300, last = -1e300;
    std::vector<double> ts;
    int64_t last_id = -1;
  };
  std::map<std::size_t, std::map<std::string, span>> spans;
  uint64_t reordered = 0;
  {
    // Per child the lines are in arrival order already.
    for (auto& d : gd) {
      auto& s = spans[d.feed][d.token];
      if (d.id <= s.last_id)
        ++reordered;
      s.last_id = std::max(s.last_id, d.id);
      s.first = std::min(s.first, d.t);
      s.last = std::max(s.last, d.t);
      s.ts.push_back(d.t);
    }
  }
  uint64_t overlap_feeds = 0;
  for (auto& [f, toks] : spans) {
    bool bad = false;
    for (auto a = toks.begin(); a != toks.end() && !bad; ++a)
      for (auto b = std::next(a); b != toks.end() && !bad; ++b) {
        std::size_t inside = 0;
        for (double t : a->second.ts)
          inside += t >= b->second.first && t <= b->second.last;
        for (double t : b->second.ts)
          inside += t >= a->second.first && t <= a->second.last;
        bad = inside > 1;
      }
    overlap_feeds += bad;
  }

  // Owner of each feed just before time t: the member of its last delivery.
  std::vector<std::vector<const delivery*>> per_feed(F);
  for (auto& d : gd)
    if (d.feed < F)
      per_feed[d.feed].push_back(&d);
  for (auto& v : per_feed)
    std::stable_sort(v.begin(), v.end(),
                     [](auto* a, auto* b) { return a->t < b->t; });
  auto owner_before
    = [&](std::size_t f, double t) -> std::optional<std::size_t> {
    std::optional<std::size_t> o;
    for (auto* d : per_feed[f])
      if (d->t < t)
        o = d->who;
    return o;
  };
  struct takeover_fig {
    std::vector<double> samples;
    /// The samples that were not censored: the event waited for the new
    /// owner, so its delivery time is the owner's start.
    std::vector<double> exact;
    uint64_t censored = 0, feeds = 0, unknown = 0, never = 0;
    std::vector<double> latency; // events published in the window
  };
  // Feeds `from` had at `t0`: from the signal to the first delivery by
  // another member of an event published after it.
  auto takeover = [&](std::size_t from, double t0, double t_end) {
    takeover_fig fig;
    uint64_t no_owner_seen = 0;
    for (std::size_t f = 0; f < F; ++f) {
      auto o = owner_before(f, t0);
      if (!o) {
        ++no_owner_seen;
        continue;
      }
      if (*o != from)
        continue;
      ++fig.feeds;
      bool found = false;
      for (auto* d : per_feed[f]) {
        if (d->who == from || d->t < t0)
          continue;
        auto pi = pub_index.find(d->id);
        if (pi == pub_index.end() || pubs[pi->second].t < t0)
          continue;
        auto& p = pubs[pi->second];
        fig.samples.push_back(d->t - t0);
        if (d->t - p.t < 0.5)
          ++fig.censored;
        else
          fig.exact.push_back(d->t - t0);
        found = true;
        break;
      }
      fig.never += !found;
    }
    fig.unknown = no_owner_seen;
    // Latency of the events published in [t0, t_end) on those feeds.
    std::vector<char> moved(F, 0);
    for (std::size_t f = 0; f < F; ++f) {
      auto o = owner_before(f, t0);
      moved[f] = o && *o == from;
    }
    for (auto& p : pubs) {
      if (p.t < t0 || p.t >= t_end || !moved[p.feed])
        continue;
      auto it = by_id.find(p.id);
      if (it == by_id.end())
        continue;
      double first = 1e300;
      for (auto* d : it->second)
        first = std::min(first, d->t);
      fig.latency.push_back(first - p.t);
    }
    return fig;
  };
  auto crash = takeover(killed, group[killed]->signalled_at, T_term);
  auto graceful = takeover(left, group[left]->signalled_at, T_join);
  // Join: feeds member 4 delivered; from its start to its first delivery.
  takeover_fig join;
  {
    std::vector<char> moved(F, 0);
    for (std::size_t f = 0; f < F; ++f)
      for (auto* d : per_feed[f])
        if (d->who == joiner) {
          moved[f] = 1;
          ++join.feeds;
          join.samples.push_back(d->t - t_join_real);
          auto pi = pub_index.find(d->id);
          if (pi != pub_index.end() && d->t - pubs[pi->second].t < 0.5)
            ++join.censored;
          else
            join.exact.push_back(d->t - t_join_real);
          break;
        }
    for (auto& p : pubs) {
      if (p.t < t_join_real || !moved[p.feed])
        continue;
      auto it = by_id.find(p.id);
      if (it == by_id.end())
        continue;
      double first = 1e300;
      for (auto* d : it->second)
        first = std::min(first, d->t);
      join.latency.push_back(first - p.t);
    }
  }
  // Latency of all events (steady state: published before the kill).
  std::vector<double> lat_steady, lat_all;
  for (auto& p : pubs) {
    auto it = by_id.find(p.id);
    if (it == by_id.end())
      continue;
    double first = 1e300;
    for (auto* d : it->second)
      first = std::min(first, d->t);
    lat_all.push_back(first - p.t);
    if (p.t < T_kill)
      lat_steady.push_back(first - p.t);
  }

  // Baseline: events never delivered, per shard.
  uint64_t base_lost_killed = 0, base_lost_other = 0, base_after_kill = 0;
  std::vector<double> base_lat;
  if (baseline) {
    std::unordered_map<int64_t, double> first;
    for (auto& d : bd) {
      auto [it, fresh] = first.emplace(d.id, d.t);
      if (!fresh)
        it->second = std::min(it->second, d.t);
    }
    for (auto& p : pubs) {
      bool killed_shard = p.feed % members == killed;
      auto it = first.find(p.id);
      if (killed_shard && p.t >= base[killed]->signalled_at)
        ++base_after_kill;
      if (it == first.end()) {
        (killed_shard ? base_lost_killed : base_lost_other) += 1;
        continue;
      }
      if (p.t < T_kill)
        base_lat.push_back(it->second - p.t);
    }
  }

  // Exit codes, balance, memory.
  std::string codes;
  for (auto* set : {&group, &base})
    for (auto& c : *set)
      codes += (codes.empty() ? "" : " ") + c->name + "="
               + (c->code ? std::to_string(*c->code) : "?");
  int64_t omax = 0, omin = INT64_MAX;
  for (auto o : owned_end) {
    omax = std::max(omax, o);
    omin = std::min(omin, o);
  }
  double balance_end = omin > 0 ? double(omax) / double(omin) : NAN;
  int64_t smax = 0, smin = INT64_MAX;
  for (std::size_t k = 0; k < members; ++k) {
    smax = std::max(smax, owned_steady[k]);
    smin = std::min(smin, owned_steady[k]);
  }
  double balance_steady = smin > 0 ? double(smax) / double(smin) : NAN;
  std::vector<double> rss_per_feed;
  int64_t rss_total = 0;
  for (std::size_t k = 0; k < members; ++k) {
    rss_total += rss_steady[k];
    if (owned_steady[k] > 0 && rss_steady[k] > 0)
      rss_per_feed.push_back(double(rss_steady[k]) / double(owned_steady[k]));
  }

  // Marginal RSS per feed: the joiner (never above its end share) at the
  // end against the initial members at steady state (each about F/M).
  double rss_slope = NAN;
  {
    double r0 = 0, o0 = 0;
    for (std::size_t k = 0; k < members; ++k) {
      r0 += double(rss_steady[k]) / double(members);
      o0 += double(owned_steady[k]) / double(members);
    }
    double r4 = double(rss_end.back()), o4 = double(owned_end.back());
    if (o4 - o0 > 10)
      rss_slope = (r4 - r0) / (o4 - o0);
  }

  // -- report ---------------------------------------------------------------
  std::printf("\n== scaleout: %zu members x %zu feeds, %.0f events/s, %zu "
              "published ==\n",
              members, feeds_per_member, rate, pubs.size());
  std::printf("exit codes: %s (0: left; 137: SIGKILL)\n", codes.c_str());
  std::printf("takeover, seconds from the signal (join: from member 4's "
              "start) to the new owner's first delivery; 'all' includes "
              "censored samples (upper bounds: the event came after the new "
              "owner), 'exact' only the others\n");
  std::printf("%-18s %6s %7s %7s %7s %6s %7s %7s %7s %6s   %s\n", "figure",
              "feeds", "all_p50", "all_p99", "all_max", "exact", "ex_p50",
              "ex_p99", "ex_max", "never", "goal");
  auto row = [&](const char* name, const takeover_fig& f, double goal) {
    bool ok = f.never == 0 && quantile(f.exact, 0.99) <= goal;
    // No exact sample: every event of a moved feed came after its new
    // owner had started (each one is only an upper bound), so there is
    // nothing to judge here; the window row below is the figure.
    std::string judged
      = goal <= 0 ? "(settle + rebalance delay by design)"
        : f.exact.empty() && f.never == 0
          ? "no exact sample: every event met its new owner (see the window)"
          : "exact p99 <= " + num(goal, 1) + " s " + verdict(ok);
    std::printf("%-18s %6" PRIu64 " %7.2f %7.2f %7.2f %6zu %7.2f %7.2f "
                "%7.2f %6" PRIu64 "   %s\n",
                name, f.feeds, quantile(f.samples, 0.5),
                quantile(f.samples, 0.99), vmax(f.samples), f.exact.size(),
                quantile(f.exact, 0.5), quantile(f.exact, 0.99), vmax(f.exact),
                f.never, judged.c_str());
    return ok;
  };
  row("takeover crash", crash, 7.0);
  row("takeover graceful", graceful, 1.5);
  row("takeover join", join, 0);
  // The leave's length: the member closes its stdout when it exits, after
  // its last release and the revoke.
  double leave_s = group[left]->eof_at.load() - group[left]->signalled_at;
  std::printf("graceful: member %zu exited %.2f s after its SIGTERM (its "
              "leave hands the feeds over at the start rate, delivering the "
              "rest until their turn)\n",
              left + 1, leave_s);
  auto lat_row = [&](const char* name, const std::vector<double>& v,
                     double goal) {
    std::printf(
      "%-22s %10zu %10.3f %10.3f %10.3f   %s%s\n", name, v.size(),
      quantile(v, 0.5), quantile(v, 0.99), vmax(v), goal > 0 ? "p99 <= " : "",
      goal > 0
        ? (num(goal, 1) + " s " + verdict(quantile(v, 0.99) <= goal)).c_str()
        : "");
  };
  std::printf("publish->delivery latency (first delivery), seconds; in a "
              "window, of the events on the feeds that moved (max: the "
              "longest a feed went unowned, as far as an event saw it):\n");
  lat_row("  steady", lat_steady, 0);
  lat_row("  crash window", crash.latency, 0);
  lat_row("  graceful window", graceful.latency, 1.5);
  lat_row("  join window", join.latency, 1.5);
  lat_row("  whole run", lat_all, 0);
  std::printf("lost %" PRIu64 " (goal 0 %s), reordered %" PRIu64
              " (goal 0 %s), duplicates %" PRIu64 " of which %" PRIu64
              " within the bound (%s), overlap %" PRIu64
              " feeds (goal 0 %s); wrong feed %" PRIu64 ", unknown ids %" PRIu64
              ", bad lines %" PRIu64 "\n",
              lost, verdict(lost == 0), reordered, verdict(reordered == 0),
              dups, dups_in_bound, verdict(dups == dups_in_bound),
              overlap_feeds, verdict(overlap_feeds == 0), wrong_feed,
              unknown_id, bad_lines);
  std::printf("balance max/min owned: steady %.3f (%" PRId64 "/%" PRId64
              "), end %.3f (%" PRId64 "/%" PRId64 ", members 1 and 4) goal "
              "<= 1.10 %s\n",
              balance_steady, smax, smin, balance_end, omax, omin,
              verdict(balance_end <= 1.10 && balance_steady <= 1.10));
  std::printf("member RSS at steady state: total %" PRId64 " KiB, per owned "
              "feed p50 %.1f KiB max %.1f KiB (whole process / feeds); "
              "marginal %.1f KiB per feed (member 4 at the end, %" PRId64
              " KiB for %" PRId64 " feeds, against the steady mean)\n",
              rss_total, quantile(rss_per_feed, 0.5), vmax(rss_per_feed),
              rss_slope, rss_end.back(), owned_end.back());
  if (baseline)
    std::printf("baseline (static modulo, %zu `outbound watch`): static 2 "
                "SIGKILLed -> %" PRIu64 " events of its feeds never "
                "delivered (%" PRIu64 " published after the kill), other "
                "shards %" PRIu64 " never delivered; steady latency p50 "
                "%.3f p99 %.3f s; groups: 0 expected\n",
                members, base_lost_killed, base_after_kill, base_lost_other,
                quantile(base_lat, 0.5), quantile(base_lat, 0.99));

  std::string common = "\"members\":" + std::to_string(members) + ",\"feeds\":"
                       + std::to_string(F) + ",\"rate\":" + num(rate, 1)
                       + ",\"scale\":" + num(scale, 2);
  auto tk_json = [&](const char* kind, const takeover_fig& f, double goal) {
    json_line(
      "\"figure\":\"takeover\",\"kind\":\"" + std::string{kind} + "\"," + common
      + ",\"moved_feeds\":" + std::to_string(f.feeds) + ","
      + quantiles_json("takeover", f.samples) + ",\"censored\":"
      + std::to_string(f.censored) + "," + quantiles_json("exact", f.exact)
      + ",\"never\":" + std::to_string(f.never) + ",\"no_owner_seen\":"
      + std::to_string(f.unknown) + "," + quantiles_json("latency", f.latency)
      + (std::string{kind} == "graceful"
           ? ",\"leave_s\":"
               + (std::isnan(leave_s) ? std::string{"null"} : num(leave_s, 3))
           : std::string{})
      + ",\"goal_p99_s\":" + (goal > 0 ? num(goal, 1) : "null"));
  };
  tk_json("crash", crash, 7.0);
  tk_json("graceful", graceful, 1.5);
  tk_json("join", join, 1.5);
  json_line("\"figure\":\"latency\"," + common + ","
            + quantiles_json("steady", lat_steady) + ","
            + quantiles_json("run", lat_all));
  json_line("\"figure\":\"correctness\"," + common + ",\"published\":"
            + std::to_string(pubs.size()) + ",\"deliveries\":"
            + std::to_string(gd.size()) + ",\"lost\":" + std::to_string(lost)
            + ",\"reordered\":" + std::to_string(reordered)
            + ",\"duplicates\":" + std::to_string(dups)
            + ",\"duplicates_in_bound\":" + std::to_string(dups_in_bound)
            + ",\"overlap_feeds\":" + std::to_string(overlap_feeds)
            + ",\"wrong_feed\":" + std::to_string(wrong_feed)
            + ",\"unknown_ids\":" + std::to_string(unknown_id)
            + ",\"bad_lines\":" + std::to_string(bad_lines)
            + ",\"publish_errors\":" + std::to_string(publish_errors));
  json_line("\"figure\":\"balance\"," + common + ",\"steady\":"
            + num(balance_steady) + ",\"steady_max\":" + std::to_string(smax)
            + ",\"steady_min\":" + std::to_string(smin) + ",\"end\":"
            + num(balance_end) + ",\"end_max\":" + std::to_string(omax)
            + ",\"end_min\":" + std::to_string(omin) + ",\"goal\":1.10");
  json_line("\"figure\":\"member_rss\"," + common
            + ",\"total_kib\":" + std::to_string(rss_total)
            + ",\"per_feed_p50_kib\":" + num(quantile(rss_per_feed, 0.5), 1)
            + ",\"per_feed_max_kib\":" + num(vmax(rss_per_feed), 1)
            + ",\"marginal_per_feed_kib\":" + num(rss_slope, 1)
            + ",\"joiner_end_kib\":" + std::to_string(rss_end.back())
            + ",\"joiner_end_feeds\":" + std::to_string(owned_end.back()));
  if (baseline)
    json_line(
      "\"figure\":\"baseline_static_modulo\"," + common
      + ",\"killed_shard_never_delivered\":" + std::to_string(base_lost_killed)
      + ",\"killed_shard_published_after_kill\":"
      + std::to_string(base_after_kill)
      + ",\"other_shards_never_delivered\":" + std::to_string(base_lost_other)
      + ",\"follows_all\":" + (base_filter ? "true" : "false") + ","
      + quantiles_json("steady_latency", base_lat)
      + ",\"group_never_delivered\":" + std::to_string(lost));
  json_line("\"figure\":\"run\"," + common + ",\"startup_s\":"
            + num(startup_s, 2) + ",\"exit_codes\":\"" + codes + "\"");
  return 0;
}
