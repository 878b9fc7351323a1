// hedge_model: the hedging state of outbound (endpoint_stats_state: the
// windowed DDSketch, the delay it plans, the hedge budget) driven in virtual
// time by calls whose latencies are drawn from bench/hedging's workloads, with
// no network, no actors and no clock. It answers in seconds what
// bench/hedging answers in minutes with noise: where a configuration sits on
// the p99-against-extra-load curve of one hedge per call, and why.
//
//   workloads  w1  lognormal mean 5 ms, sd 2 ms, 5 % stragglers x10
//              w2  lognormal mean 5 ms, sd 2 ms, 1 % of calls take 1 s
//              (hub/latency_profile.hpp draws the same distributions)
//   configs    none | static delays (--delays) | adaptive at each
//              --percentiles value, at each --budgets value (percent)
//   per seed   a fresh state, --warmup unmeasured calls, then --calls
//              (w1) or --calls-w2 measured ones, one at a time (a sequential
//              client): each call plans its delay, draws its primary's latency
//              P; if P > delay and the budget grants a token, a hedge goes out
//              with its own draw H and the call ends at min(P, delay + H);
//              the winner's latency is what the state observes (as the
//              client records it), or the primary's with --record primary
//              (what it would learn if a losing primary were never
//              cancelled: the ablation of that censoring)
//
// Printed per configuration: extra load (hedges per call, mean over seeds
// and the range of single seeds), the median over seeds of each seed's p99
// and p99.9, none's p99 over this one's, and for an adaptive row its p99
// over that of the best static delay that spent no more (mean extra load),
// chosen after the fact: bench/hedging's floor for one hedge per call. A
// network adds its own time to every leg, which the model leaves out
// (--overhead-ms adds a constant per leg); bench/hedging measures the real
// thing.
//
// Bounded: seeds × (warmup + calls) draws per configuration; no I/O.

#include "actors/hedge/endpoint_stats_state.hpp"
#include "config/hedge_config.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

namespace {

using outbound::hedge_time;

struct workload {
  std::string name;
  double straggler = 0;   // share of calls that straggle
  double multiplier = 0;  // straggler latency = body × multiplier, or
  double straggler_s = 0; // ... this many seconds when > 0
  int calls = 0;          // measured calls per run
};

struct configuration {
  std::string label;
  bool hedge = false;
  double static_delay = -1; // seconds; < 0: adaptive
  double percentile = 0.95;
  double budget_percent = 10.0;
};

struct figures {
  double extra_mean = 0, extra_lo = 1e9, extra_hi = 0;
  double p99 = 0, p999 = 0; // medians over seeds, seconds
};

double at_rank(std::vector<double>& v, double q) {
  std::sort(v.begin(), v.end());
  auto i = static_cast<std::size_t>(std::ceil(q * double(v.size())));
  return v[std::max<std::size_t>(i, 1) - 1];
}

hedge_time::duration span(double seconds) {
  return std::chrono::duration_cast<hedge_time::duration>(
    std::chrono::duration<double>(seconds));
}

figures run(const workload& w, const configuration& c, int seeds, int warmup,
            int calls, double overhead, bool record_primary) {
  const double m = 0.005, s = 0.002;
  const double sigma2 = std::log1p(s * s / (m * m));
  const double mu = std::log(m) - sigma2 / 2;
  figures f;
  std::vector<double> p99s, p999s;
  double hedges_all = 0;
  for (int seed = 1; seed <= seeds; ++seed) {
    // Two streams per seed, as bench/hedging's key=i: call i's primary
    // draws the same latency in every configuration, its hedge its own.
    std::mt19937_64 primaries(static_cast<uint64_t>(seed));
    std::mt19937_64 hedges_rng(static_cast<uint64_t>(seed) ^ 0x68656467ULL);
    std::lognormal_distribution<double> body(mu, std::sqrt(sigma2));
    std::uniform_real_distribution<double> unit(0, 1);
    auto draw = [&](std::mt19937_64& rng) {
      body.reset();
      double x = body(rng);
      if (unit(rng) < w.straggler)
        x = w.straggler_s > 0 ? w.straggler_s : x * w.multiplier;
      return x + overhead;
    };
    outbound::hedge_config defaults;
    outbound::endpoint_config ep;
    ep.percentile = c.percentile;
    ep.budget_percent = c.budget_percent;
    if (c.static_delay >= 0)
      ep.hedge_delay = c.static_delay;
    auto cfg = outbound::resolve(defaults, ep);
    outbound::endpoint_stats_state state{defaults};
    hedge_time now{};
    std::vector<double> latencies;
    latencies.reserve(static_cast<std::size_t>(calls));
    double hedges = 0;
    for (int i = 0; i < warmup + calls; ++i) {
      double primary = draw(primaries);
      double latency = primary;
      bool hedged = false;
      bool hedge_won = false;
      if (c.hedge) {
        auto plan = state.plan("k", cfg, now);
        if (primary > plan.delay
            && state.try_take_token("k", now + span(plan.delay))) {
          state.hedge_sent("k");
          hedged = true;
          double hedge = draw(hedges_rng);
          if (plan.delay + hedge < primary) {
            latency = plan.delay + hedge;
            hedge_won = true;
          }
        }
        state.record_race("k", hedged, hedge_won);
      }
      now += span(latency);
      if (c.hedge)
        state.observe("k", record_primary ? primary : latency,
                      outbound::call_health::success, now);
      if (i >= warmup) {
        latencies.push_back(latency);
        hedges += hedged ? 1 : 0;
      }
    }
    double extra = hedges / calls;
    hedges_all += hedges;
    f.extra_lo = std::min(f.extra_lo, extra);
    f.extra_hi = std::max(f.extra_hi, extra);
    p99s.push_back(at_rank(latencies, 0.99));
    p999s.push_back(at_rank(latencies, 0.999));
  }
  f.extra_mean = hedges_all / (double(seeds) * calls);
  f.p99 = at_rank(p99s, 0.5);
  f.p999 = at_rank(p999s, 0.5);
  return f;
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"hedge_model: outbound's hedging state in virtual time"};
  app.option_defaults()->always_capture_default(); // --help shows them
  std::vector<std::string> workload_names{"w1", "w2"};
  // A grid fine enough that every adaptive row has a static neighbour at
  // about its spend (the ratio to the best static delay moves with it).
  std::vector<double> delays_ms{8,  8.5,  9,  9.5, 10, 10.5, 11, 11.5, 12, 12.5,
                                13, 13.5, 14, 15,  16, 17,   18, 20,   25, 30};
  std::vector<double> percentiles{0.95, 0.955, 0.96, 0.965, 0.92, 0.91};
  std::vector<double> budgets{10};
  int seeds = 100, warmup = 300, calls = 2000, calls_w2 = 4000;
  double overhead_ms = 0;
  std::string record = "winner";
  app.add_option("--workloads", workload_names, "w1 and/or w2");
  app.add_option("--delays", delays_ms, "Static hedge delays, ms");
  app.add_option("--percentiles", percentiles,
                 "Adaptive hedge percentiles, each in (0, 1)");
  app.add_option("--budgets", budgets,
                 "Hedge budgets (hedge_config::budget_percent) of the "
                 "adaptive rows, percent");
  app.add_option("--seeds", seeds, "Independent runs per configuration")
    ->check(CLI::Range(1, 100000));
  app.add_option("--warmup", warmup, "Unmeasured calls per run")
    ->check(CLI::Range(0, 10000000));
  app.add_option("--calls", calls, "Measured calls per run, w1")
    ->check(CLI::Range(1000, 10000000));
  app
    .add_option("--calls-w2", calls_w2,
                "Measured calls per run, w2 (as bench/hedging's "
                "--requests-w2: its p99.9 needs >= 1000)")
    ->check(CLI::Range(1000, 10000000));
  app
    .add_option("--overhead-ms", overhead_ms,
                "Constant time added to every leg, ms (a network's floor)")
    ->check(CLI::Range(0.0, 1000.0));
  app
    .add_option("--record", record,
                "What the state observes: winner (the client's latency, as "
                "outbound records it) or primary (the uncensored primary)")
    ->check(CLI::IsMember({"winner", "primary"}));
  CLI11_PARSE(app, argc, argv);
  for (double p : percentiles)
    if (!(p > 0 && p < 1)) {
      std::fprintf(stderr, "--percentiles: %g is not in (0, 1)\n", p);
      return 2;
    }
  for (double b : budgets)
    if (!(b >= 0)) {
      std::fprintf(stderr, "--budgets: %g is not >= 0\n", b);
      return 2;
    }

  std::vector<workload> workloads;
  for (const auto& n : workload_names) {
    if (n == "w1")
      workloads.push_back({"w1", 0.05, 10, 0, calls});
    else if (n == "w2")
      workloads.push_back({"w2", 0.01, 0, 1.0, calls_w2});
    else {
      std::fprintf(stderr, "--workloads: '%s' is not w1 or w2\n", n.c_str());
      return 2;
    }
  }
  std::vector<configuration> configs;
  configs.push_back({"none", false});
  for (double d : delays_ms)
    configs.push_back({"static " + number(d) + " ms", true, d / 1000.0});
  for (double b : budgets)
    for (double p : percentiles)
      configs.push_back(
        {"adaptive p" + number(p * 100) + " budget " + number(b) + " %", true,
         -1, p, b});

  std::printf("hedge_model: %d seeds x (%d warm-up + %d measured calls on "
              "w1, %d on w2), sequential, virtual time; overhead %g ms per "
              "leg; the state observes the %s's latency\n"
              "extra %%: hedges per call, mean over seeds (single seeds' "
              "range); p99, p99.9: median over seeds; none / this: the "
              "unhedged p99 over this row's (higher is better); last "
              "column, adaptive rows: this p99 over that of the best static "
              "delay whose extra is no higher (lower is better; the practical "
              "floor is 1); a json: line follows each row\n",
              seeds, warmup, calls, calls_w2, overhead_ms, record.c_str());
  for (const auto& w : workloads) {
    std::printf("\n%-4s %-28s %9s %15s %10s %10s %11s  %s\n", "wl", "config",
                "extra %", "(seed range)", "p99 ms", "p99.9 ms", "none / this",
                "p99 / best static at no more extra (which)");
    double none_p99 = 0;
    std::vector<std::pair<double, figures>> statics; // (delay ms, figures)
    for (const auto& c : configs) {
      auto f = run(w, c, seeds, warmup, w.calls, overhead_ms / 1000.0,
                   record == "primary");
      if (!c.hedge)
        none_p99 = f.p99;
      // An adaptive row against the best static delay, chosen after the
      // fact, that spent no more extra load (bench/hedging's floor).
      std::string versus = "-";
      if (c.hedge && c.static_delay >= 0) {
        statics.emplace_back(1000 * c.static_delay, f);
      } else if (c.hedge) {
        const std::pair<double, figures>* best = nullptr;
        for (const auto& st : statics)
          if (st.second.extra_mean <= f.extra_mean
              && (!best || st.second.p99 < best->second.p99))
            best = &st;
        char buf[64];
        if (best)
          std::snprintf(buf, sizeof buf, "%.2f (%g ms)",
                        f.p99 / best->second.p99, best->first);
        versus = best ? buf : "(none spent less)";
      }
      std::printf("%-4s %-28s %9.3f %6.2f..%-6.2f %10.2f %10.2f %11.2f  %s\n",
                  w.name.c_str(), c.label.c_str(), 100 * f.extra_mean,
                  100 * f.extra_lo, 100 * f.extra_hi, 1000 * f.p99,
                  1000 * f.p999, f.p99 > 0 ? none_p99 / f.p99 : 0.0,
                  versus.c_str());
      std::printf("json: {\"bench\":\"hedge_model\",\"workload\":\"%s\","
                  "\"config\":\"%s\",\"record\":\"%s\",\"seeds\":%d,"
                  "\"calls\":%d,\"extra_mean\":%.5f,\"extra_lo\":%.5f,"
                  "\"extra_hi\":%.5f,\"p99_ms\":%.3f,\"p999_ms\":%.3f}\n",
                  w.name.c_str(), c.label.c_str(), record.c_str(), seeds,
                  w.calls, f.extra_mean, f.extra_lo, f.extra_hi, 1000 * f.p99,
                  1000 * f.p999);
    }
  }
  return 0;
}
