// metrics_exposer: how long a well-behaved scrape of the /metrics listener
// (metrics/metrics_exposer.hpp) takes while hostile clients hold
// connections open, next to the same run's baseline with no other client.
//
// Scenarios, each against one exposer with the default limits (header 5 s,
// idle 75 s, write 10 s, 128 connections, 16 pipelined requests):
//   alone        no other client (the baseline)
//   idle100      100 connections that send nothing
//   slowloris100 100 connections that trickle a request header, one byte
//                per scrape, never finishing it
//   pipeline128  128 connections (the whole cap) that each pipeline the
//                most requests the listener answers in a row and never
//                read: with a small receive buffer their answers stall in
//                the write
// A crowd connection the listener closes (deadline, eviction) is opened
// again before the next scrape, so every scrape meets the full crowd.
// Each scrape is a fresh connection, `GET /metrics` with
// `Connection: close`, read to EOF: connect to last byte is its latency.
//
// Bounded: --rounds x 4 scenarios x --scrapes scrapes, and --max-seconds
// overall (the rounds left are skipped, and the output says so).
// 127.0.0.1 only. See bench/README.md.

#include "metrics/client_metrics.hpp"
#include "metrics/metrics_exposer.hpp"
#include "metrics/outbound_metrics.hpp"

#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <CLI/CLI.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

using namespace outbound;
using bench_clock = std::chrono::steady_clock;

namespace {

/// A blocking loopback connection whose reads wait at most 10 s; -1 on
/// failure. `rcvbuf` > 0 is set before connecting (it bounds the window).
int dial(uint16_t port, int rcvbuf = 0) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (rcvbuf > 0)
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool send_all(int fd, const std::string& s) {
  return ::send(fd, s.data(), s.size(), MSG_NOSIGNAL)
         == static_cast<ssize_t>(s.size());
}

/// One scrape on a fresh connection: milliseconds from connect to EOF, or
/// a negative value when it failed (refused, timeout, not a 200). The
/// response goes to `*out` when given.
double scrape(uint16_t port, std::string* out = nullptr) {
  auto t0 = bench_clock::now();
  int fd = dial(port);
  if (fd < 0)
    return -1;
  send_all(fd, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n"
               "Connection: close\r\n\r\n");
  std::string in;
  char buf[65536];
  for (;;) {
    auto n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0)
      break;
    in.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  double ms = std::chrono::duration<double, std::milli>(bench_clock::now() - t0)
                .count();
  if (out)
    *out = in;
  return in.rfind("HTTP/1.1 200", 0) == 0 ? ms : -1;
}

enum class crowd_kind { none, idle, slowloris, pipeline };

struct scenario {
  const char* name;
  crowd_kind kind;
  int size;
};

/// The hostile clients of one scenario, kept at full strength.
class crowd {
public:
  crowd(crowd_kind kind, int size, uint16_t port, int pipelined)
    : kind_(kind), port_(port), pipelined_(pipelined),
      fds_(static_cast<std::size_t>(size), -1),
      sent_(static_cast<std::size_t>(size), 0) {
  }
  ~crowd() {
    for (int fd : fds_)
      if (fd >= 0)
        ::close(fd);
  }
  crowd(const crowd&) = delete;
  crowd& operator=(const crowd&) = delete;

  /// Reopens what the listener closed, then trickles one header byte on
  /// each slowloris connection.
  void tick() {
    reap();
    for (std::size_t i = 0; i < fds_.size(); ++i)
      if (fds_[i] < 0)
        open(i);
    if (kind_ == crowd_kind::slowloris)
      for (std::size_t i = 0; i < fds_.size(); ++i)
        if (fds_[i] >= 0) {
          static const std::string line = "X-Slow: 1\r\n";
          char c = line[sent_[i]++ % line.size()];
          ::send(fds_[i], &c, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        }
  }

  /// Connections opened after the first fill (the listener closed one).
  uint64_t reopened() const {
    return reopened_;
  }

private:
  void reap() {
    std::vector<pollfd> p;
    for (int fd : fds_)
      p.push_back(pollfd{fd, POLLRDHUP, 0});
    ::poll(p.data(), p.size(), 0);
    for (std::size_t i = 0; i < p.size(); ++i)
      if (fds_[i] >= 0 && (p[i].revents & (POLLRDHUP | POLLHUP | POLLERR))) {
        ::close(fds_[i]);
        fds_[i] = -1;
        ++reopened_;
      }
  }

  void open(std::size_t i) {
    bool pipe = kind_ == crowd_kind::pipeline;
    int fd = dial(port_, pipe ? 4096 : 0);
    if (fd < 0)
      return;
    fds_[i] = fd;
    sent_[i] = 0;
    if (kind_ == crowd_kind::slowloris) {
      send_all(fd, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n");
    } else if (pipe) {
      std::string reqs;
      for (int k = 0; k < pipelined_; ++k)
        reqs += "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
      send_all(fd, reqs);
      // Until the first answer starts, it is a connection waiting for a
      // request, not a stalled write: wait for its first bytes.
      char buf[64];
      ::recv(fd, buf, sizeof buf, 0);
    }
  }

  crowd_kind kind_;
  uint16_t port_;
  int pipelined_;
  std::vector<int> fds_;
  std::vector<std::size_t> sent_;
  uint64_t reopened_ = 0;
};

/// Nearest-rank percentile of a sorted vector.
double pct(const std::vector<double>& v, double p) {
  if (v.empty())
    return 0;
  auto rank = static_cast<std::size_t>(p / 100.0 * v.size() + 0.999999);
  return v[std::min(v.size(), std::max<std::size_t>(rank, 1)) - 1];
}

struct row {
  double p50 = 0, p99 = 0, max = 0;
  int failed = 0;
  uint64_t reopened = 0;
  double setup_ms = 0;
};

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"metrics_exposer: scrape latency of the /metrics listener "
               "with hostile connections held open"};
  int rounds = 5;
  int scrapes = 100;
  int series = 4000;
  int gap_ms = 5;
  int pipelined = -1;
  double max_seconds = 300;
  app.add_option("--rounds", rounds, "rounds of the four scenarios")
    ->check(CLI::Range(1, 1000));
  app.add_option("--scrapes", scrapes, "scrapes per scenario and round")
    ->check(CLI::Range(1, 100000));
  app
    .add_option("--series", series,
                "padding gauge series in the registry (about 42 bytes of "
                "exposition each)")
    ->check(CLI::Range(0, 10000000));
  app.add_option("--gap-ms", gap_ms, "pause between two scrapes")
    ->check(CLI::Range(0, 10000));
  app.add_option("--pipelined", pipelined,
                 "requests each pipelining client sends at once [the most "
                 "the listener answers in a row: max_pipelined_requests + 1]");
  app.add_option("--max-seconds", max_seconds, "wall-clock cap of the run");
  CLI11_PARSE(app, argc, argv);

  metrics_exposer_limits limits;
  if (pipelined < 1)
    pipelined = static_cast<int>(limits.max_pipelined_requests) + 1;
  auto reg = std::make_shared<metrics_registry>();
  reg->client("bench")->record([] {
    client_event e;
    e.kind = event_kind::answered;
    e.method = "GET";
    e.status = 200;
    e.latency_ns = 2'000'000;
    return e;
  }());
  auto& padding = prometheus::BuildGauge()
                    .Name("bench_padding")
                    .Help("Series that give the exposition a realistic size")
                    .Register(*reg->registry());
  for (int i = 0; i < series; ++i)
    padding.Add({{"series", "padding-" + std::to_string(i)}}).Set(i);
  metrics_exposer ex{reg, 0, "127.0.0.1", limits};
  auto first = scrape(ex.port());
  std::printf("metrics_exposer bench: 127.0.0.1:%u, default limits (cap %zu, "
              "%zu pipelined), %d padding series, first scrape %.2f ms\n",
              ex.port(), limits.max_connections, limits.max_pipelined_requests,
              series, first);
  std::printf("%d rounds x %d scrapes per scenario, %d ms apart; pipelining "
              "clients send %d requests each\n\n",
              rounds, scrapes, gap_ms, pipelined);

  const std::vector<scenario> scenarios{
    {"alone", crowd_kind::none, 0},
    {"idle100", crowd_kind::idle, 100},
    {"slowloris100", crowd_kind::slowloris, 100},
    {"pipeline128", crowd_kind::pipeline,
     static_cast<int>(limits.max_connections)},
  };
  std::vector<std::vector<row>> rows(scenarios.size());
  auto start = bench_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(bench_clock::now() - start).count();
  };
  int done = 0;
  for (int r = 0; r < rounds && elapsed() < max_seconds; ++r, ++done) {
    for (std::size_t s = 0; s < scenarios.size(); ++s) {
      auto& sc = scenarios[s];
      row out;
      auto t0 = bench_clock::now();
      crowd c{sc.kind, sc.size, ex.port(), pipelined};
      c.tick();
      out.setup_ms
        = std::chrono::duration<double, std::milli>(bench_clock::now() - t0)
            .count();
      auto filled = c.reopened();
      std::vector<double> ms;
      for (int i = 0; i < scrapes; ++i) {
        c.tick();
        std::this_thread::sleep_for(std::chrono::milliseconds{gap_ms});
        auto t = scrape(ex.port());
        if (t < 0)
          ++out.failed;
        else
          ms.push_back(t);
      }
      out.reopened = c.reopened() - filled;
      std::sort(ms.begin(), ms.end());
      out.p50 = pct(ms, 50);
      out.p99 = pct(ms, 99);
      out.max = ms.empty() ? 0 : ms.back();
      std::printf("round %d %-13s p50 %7.2f ms  p99 %7.2f ms  max %7.2f ms  "
                  "failed %d  crowd reopened %llu  (setup %.0f ms)\n",
                  r + 1, sc.name, out.p50, out.p99, out.max, out.failed,
                  static_cast<unsigned long long>(out.reopened), out.setup_ms);
      std::fflush(stdout);
      rows[s].push_back(out);
    }
    // Let the listener close the crowd before the next round's baseline.
    std::this_thread::sleep_for(std::chrono::milliseconds{200});
  }
  if (done < rounds)
    std::printf("\n--max-seconds reached: %d of %d rounds run\n", done, rounds);
  std::printf("\nranges over %d rounds (min-max of each round's figure):\n",
              done);
  std::printf("%-13s %17s %17s %17s %7s\n", "scenario", "p50 ms", "p99 ms",
              "max ms", "failed");
  for (std::size_t s = 0; s < scenarios.size(); ++s) {
    auto range = [&](double row::*f) {
      double lo = 1e300, hi = 0;
      for (auto& x : rows[s]) {
        lo = std::min(lo, x.*f);
        hi = std::max(hi, x.*f);
      }
      char b[40];
      std::snprintf(b, sizeof b, "%.2f-%.2f", rows[s].empty() ? 0 : lo, hi);
      return std::string{b};
    };
    int failed = 0;
    for (auto& x : rows[s])
      failed += x.failed;
    std::printf("%-13s %17s %17s %17s %7d\n", scenarios[s].name,
                range(&row::p50).c_str(), range(&row::p99).c_str(),
                range(&row::max).c_str(), failed);
  }
  // The 100 ms bar: the worst scrape with a crowd, less the same round's
  // worst scrape alone.
  double worst_extra = 0;
  for (std::size_t s = 1; s < scenarios.size(); ++s)
    for (std::size_t r = 0; r < rows[s].size(); ++r)
      worst_extra = std::max(worst_extra, rows[s][r].max - rows[0][r].max);
  // What the listener closed over the whole run, by reason.
  std::string last;
  scrape(ex.port(), &last);
  std::printf("\nlistener closes over the run:");
  const std::string prefix = "outbound_metrics_connections_closed_total{";
  for (auto at = last.find(prefix); at != std::string::npos;
       at = last.find(prefix, at + 1)) {
    auto end = last.find('\n', at);
    std::printf(
      " %s", last.substr(at + prefix.size(), end - at - prefix.size()).c_str());
  }
  std::printf("\n");
  std::printf("\nworst extra delay over the same round's baseline max: %.2f "
              "ms (bar: 100 ms)\n",
              worst_extra);
  int failed = 0;
  for (auto& v : rows)
    for (auto& x : v)
      failed += x.failed;
  return failed == 0 && worst_extra <= 100.0 ? 0 : 1;
}
