// hedging: what adaptive hedging buys on a heavy-tailed backend, and what it
// costs (hedging's showcase). One run, one seed for every configuration:
//
//   workloads  w1  lognormal mean 5 ms, sd 2 ms, 5 % stragglers x10 (the
//                  setup of hedge-python's published benchmark,
//                  in its README: p99 51.3 -> 18.8 ms for 7 %
//                  extra requests)
//              w2  lognormal mean 5 ms, sd 2 ms, 1 % of requests take 1 s
//                  ("The Tail at Scale" style)
//   configs    none | static 10 ms | static 50 ms | adaptive (outbound's
//              defaults: p95 of the learned latency, 10 % budget)
//   clients    a sequential client, and 64 concurrent clients
//
// The backend is the reference hub's /lognormal route on 127.0.0.1 (see
// hub/latency_profile.hpp). Call i sends key=i: its primary sees the same
// latency in every configuration, its hedge an independent draw. Latency is
// measured by the caller around each blocking call (wall clock); "extra" is
// the backend's own count of requests beyond one per call.
//
// Each configuration gets a fresh client that first serves an unmeasured
// warm-up (--warmup, --warmup-concurrent calls with other keys), so the
// figures are steady state, not a client's cold start.
//
// Bounded: a fixed number of calls per configuration (--requests,
// --requests-w2, --requests-concurrent) and a per-call deadline; every
// phase ends by itself.

#include "bench/caf_setup.hpp"

#include "actors/client/blocking_client.hpp"
#include "actors/client/service_client.hpp"
#include "hub/hub.hpp"

#include <boost/json/parse.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

namespace {

using bench_clock = std::chrono::steady_clock;

struct workload {
  const char* name;
  const char* query; // the /lognormal parameters
  int requests;
};

struct configuration {
  const char* name;
  bool hedge;
  double static_delay; // < 0: adaptive
};

struct result {
  std::vector<double> latencies_ms;
  int64_t backend_requests = 0;
  int failures = 0;
  uint64_t hedged = 0;
  uint64_t hedge_wins = 0;
};

double quantile(std::vector<double> v, double q) {
  if (v.empty())
    return NAN;
  std::sort(v.begin(), v.end());
  auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::max<std::size_t>(rank, 1) - 1];
}

int64_t profile_requests(const outbound::hub& h) {
  auto v = boost::json::parse(h.state_json());
  return v.at("server").at("profile_requests").to_number<int64_t>();
}

// The client's global hedging counters (zero when it does not hedge).
result run(caf::actor_system& sys, outbound::hub& h, const workload& w,
           const configuration& c, int concurrency, uint64_t seed,
           const std::string& tag, int warmup) {
  outbound::client_config cfg;
  cfg.base_url = h.base_url();
  cfg.timeout = 5.0;
  cfg.deadline = 10.0;
  cfg.retry.max_attempts = 1;
  outbound::client_options opts;
  if (c.hedge) {
    outbound::hedging_options ho;
    outbound::endpoint_config ep;
    if (c.static_delay >= 0)
      ep.hedge_delay = c.static_delay;
    ho.routes.register_route("GET", "/lognormal", ep, "lognormal");
    opts.hedging = std::move(ho);
  }
  outbound::blocking_client client{sys, cfg, std::move(opts)};
  // Steady state: an unmeasured warm-up (other keys, same distribution) so
  // the sketch, the RPS estimate and the budget reflect ongoing traffic,
  // not a client's first second.
  {
    std::atomic<int> next{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < concurrency; ++t)
      threads.emplace_back([&] {
        while (next.fetch_add(1) < warmup) {
          outbound::call_request req;
          req.path = std::string{"/lognormal?"} + w.query + "&seed="
                     + std::to_string(seed) + "&key=warm-" + tag + "-"
                     + std::to_string(next.load());
          client.call(std::move(req));
        }
      });
    for (auto& t : threads)
      t.join();
  }
  auto before_stats
    = client.hedge_stats().value_or(outbound::hedge_stats_snapshot{});
  result r;
  r.latencies_ms.resize(static_cast<std::size_t>(w.requests));
  auto before = profile_requests(h);
  std::atomic<int> next{0};
  std::atomic<int> failures{0};
  auto worker = [&] {
    for (;;) {
      int i = next.fetch_add(1);
      if (i >= w.requests)
        return;
      outbound::call_request req;
      req.method = "GET";
      req.path = std::string{"/lognormal?"} + w.query + "&seed="
                 + std::to_string(seed) + "&key=" + tag + "-"
                 + std::to_string(i);
      auto t0 = bench_clock::now();
      auto o = client.call(std::move(req));
      auto t1 = bench_clock::now();
      if (!o.ok())
        failures.fetch_add(1);
      r.latencies_ms[static_cast<std::size_t>(i)]
        = std::chrono::duration<double, std::milli>(t1 - t0).count();
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < concurrency; ++t)
    threads.emplace_back(worker);
  for (auto& t : threads)
    t.join();
  // Cancelled losers may still be counted by the hub a moment later.
  std::this_thread::sleep_for(std::chrono::milliseconds{50});
  r.backend_requests = profile_requests(h) - before;
  r.failures = failures.load();
  if (c.hedge) {
    auto after
      = client.hedge_stats().value_or(outbound::hedge_stats_snapshot{});
    r.hedged = after.hedged_requests - before_stats.hedged_requests;
    r.hedge_wins = after.hedge_wins - before_stats.hedge_wins;
  }
  return r;
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"outbound hedging benchmark: adaptive hedging against no hedging (see bench/README.md)"};
  int requests = 2000;
  int requests_w2 = 4000;
  int requests_concurrent = 20000;
  int concurrency = 64;
  int warmup_sequential = 300;
  int warmup_concurrent = 5000;
  uint64_t seed = 42;
  app.add_option("--requests", requests, "Calls per configuration, w1")
    ->capture_default_str();
  app.add_option("--requests-w2", requests_w2,
                 "Calls per configuration, w2 (p99.9 needs >= 1000)")
    ->capture_default_str();
  app.add_option("--requests-concurrent", requests_concurrent,
                 "Calls per configuration with concurrent clients (both "
                 "workloads; at 64 clients 2000 calls last ~0.2 s, far "
                 "shorter than the 10 s RPS window the budget follows)")
    ->capture_default_str();
  app.add_option("--concurrency", concurrency, "Concurrent clients")
    ->capture_default_str();
  app.add_option("--warmup", warmup_sequential,
                 "Unmeasured warm-up calls per configuration, sequential")
    ->capture_default_str();
  app.add_option("--warmup-concurrent", warmup_concurrent,
                 "Unmeasured warm-up calls per configuration, concurrent")
    ->capture_default_str();
  app.add_option("--seed", seed, "Latency seed (the same for every config)")
    ->capture_default_str();
  // The in-process hub's 2 io threads and the clients' io_runner (1).
  outbound::bench::caf_flags caf_opts;
  caf_opts.io_threads = 3;
  caf_opts.add_to(app);
  CLI11_PARSE(app, argc, argv);

  caf::actor_system_config sc;
  if (!caf_opts.apply(sc))
    return 2;
  outbound::hub_config hc;
  hc.threads = 2;
  outbound::hub h{hc};
  h.start();
  caf::actor_system sys{sc};
  std::printf("%s; cores %u; load average %s\n", caf_opts.report(sys).c_str(),
              std::thread::hardware_concurrency(),
              outbound::bench::load_average().c_str());

  std::vector<workload> workloads{
    {"w1 lognormal 5/2 ms, 5% x10", "mean_ms=5&sd_ms=2&straggler=0.05&mult=10",
     requests},
    {"w2 lognormal 5/2 ms, 1% = 1 s",
     "mean_ms=5&sd_ms=2&straggler=0.01&straggler_ms=1000", requests_w2},
  };
  std::vector<configuration> configs{{"none", false, -1},
                                     {"static 10 ms", true, 0.010},
                                     {"static 50 ms", true, 0.050},
                                     {"adaptive", true, -1}};
  std::printf("seed %llu; latencies in ms measured by the caller; extra = "
              "backend requests beyond one per call\n",
              static_cast<unsigned long long>(seed));
  int wi = 0;
  for (const auto& w : workloads) {
    ++wi;
    for (int conc : {1, concurrency}) {
      auto wc = w;
      if (conc > 1)
        wc.requests = requests_concurrent;
      std::printf("\n%s, %d call(s) in flight, %d calls\n", w.name, conc,
                  wc.requests);
      std::printf("%-14s %8s %8s %8s %9s %8s %8s %6s\n", "config", "p50",
                  "p90", "p99", "p99.9", "extra%", "hedges", "won");
      double none_p99 = 0, none_p999 = 0;
      for (const auto& c : configs) {
        auto tag = "w" + std::to_string(wi) + "-c" + std::to_string(conc);
        auto r = run(sys, h, wc, c, conc, seed, tag,
                     conc > 1 ? warmup_concurrent : warmup_sequential);
        auto p99 = quantile(r.latencies_ms, 0.99);
        auto p999 = quantile(r.latencies_ms, 0.999);
        if (!c.hedge) {
          none_p99 = p99;
          none_p999 = p999;
        }
        double extra = 100.0
                       * static_cast<double>(r.backend_requests - wc.requests)
                       / wc.requests;
        std::printf("%-14s %8.2f %8.2f %8.2f %9.2f %8.2f %8llu %6llu", c.name,
                    quantile(r.latencies_ms, 0.5),
                    quantile(r.latencies_ms, 0.9), p99, p999, extra,
                    static_cast<unsigned long long>(r.hedged),
                    static_cast<unsigned long long>(r.hedge_wins));
        if (c.hedge)
          std::printf("   p99 /%.1f  p99.9 /%.1f", none_p99 / p99,
                      none_p999 / p999);
        if (r.failures > 0)
          std::printf("   FAILURES %d", r.failures);
        std::printf("\n");
        std::fflush(stdout);
      }
    }
  }
  h.stop();
  return 0;
}
