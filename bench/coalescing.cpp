// coalescing: calls/s and per-call latency of timestamp calls against the
// reference hub's 3-node oracle cluster (bench/README.md), each cell
// measured twice in the same run (--rounds N: N times each, the two
// alternating which runs first):
//
//   coalesced  N caller actors, each looping request(driver, ts_call{count})
//              -> reply -> next call (closed loop), against ONE
//              coalescing_driver (actors/coalesce/coalescing_driver.hpp):
//              waiters that arrive while an RPC is in flight ride the next
//              one;
//   direct     the baseline: the same N caller actors, each call its own
//              HTTP RPC, `POST /v1/ts {"count":C}` through a service_client
//              (actors/client/service_client.hpp) whose base URL is the
//              leader. Same HTTP stack (connection_pool, io_runner), same
//              hub, one RPC per call.
//
//   ceiling    diagnostic (--ceiling, by default for the 1024-caller cell
//              only): the same callers against an actor that answers each
//              ts_call at once, no batching, no HTTP: what CAF's
//              request/response alone allows on this machine.
//
// Cells: 1, 2, 4, 16, 256 and 1024 callers with count 1 (get_ts), and 64
// callers with count 64 (get_ts_batch(64)). The goals, each printed with
// its verdict: >= 500k calls/s at 1024 callers with p99 <= 3 ms on this
// 2-core machine (tsoracle's published benchmarks/minimal/README.md, its
// client on a much larger machine: 437k calls/s, p99 3.4 ms), and >= 0.9x
// the same-run ceiling row there; coalesced >= 1.0x direct calls/s at
// every caller count of the run.
//
// The hub runs in this process on its own io threads (--hub-threads) and
// shares the machine's cores with the callers, CAF's scheduler and the
// client's io thread.
//
// Method: each cell runs for --warmup + --duration seconds. A call counts
// when it was sent at or after the end of the warm-up and answered by the
// end of the cell; its latency is steady_clock from just before the
// request(...) send to the caller's reply handler, stored exactly (one
// sample per call, sorted; nearest-rank percentiles). calls/s = counted
// calls / --duration. Callers stop sending at the end of the cell, so every
// cell stops by itself (at most one call per caller is still in flight,
// bounded by the RPC budgets, and the wait for it by --grace).
//
// RPCs: the driver's own counters (stats_atom: batches.rpcs, batches.served)
// and the hub's oracle counters (requests reaching the nodes, timestamps
// issued), read at the start and the end of the measured window.

#include "bench/caf_setup.hpp"

#include "actors/client/service_client.hpp"
#include "actors/coalesce/coalescing_driver.hpp"
#include "actors/messages.hpp"
#include "config/client_config.hpp"
#include "config/coalesce_config.hpp"
#include "hub/hub.hpp"
#include "protocol/io_runner.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/config_value.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <CLI/CLI.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace json = boost::json;
using bench_clock = std::chrono::steady_clock;

// -- measurement ----------------------------------------------------------------

/// User + system CPU time of the whole process so far (hub included), in
/// microseconds.
double process_cpu_us() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto us = [](const timeval& tv) {
    return static_cast<double>(tv.tv_sec) * 1e6
           + static_cast<double>(tv.tv_usec);
  };
  return us(ru.ru_utime) + us(ru.ru_stime);
}

/// What one caller measured; written only by that caller actor, read by main
/// after the caller has signalled `cell::caller_done` (release/acquire).
struct caller_result {
  /// Latencies (ns) of the counted calls.
  std::vector<int64_t> lat_ns;
  /// Calls answered with an error (whenever sent).
  uint64_t errors = 0;
  /// Answers whose first timestamp was not above the caller's previous one.
  uint64_t order_violations = 0;
  std::string first_error;
};

/// One cell: its time window, the callers' results and their countdown.
struct cell {
  cell(int callers, uint32_t count, double call_timeout,
       bench_clock::time_point measure_from, bench_clock::time_point stop_at)
    : count(count), call_timeout(call_timeout), measure_from(measure_from),
      stop_at(stop_at), results(static_cast<std::size_t>(callers)),
      running(callers) {
  }

  void caller_done() {
    if (running.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> g{mtx};
      finished = true;
      cv.notify_all();
    }
  }

  /// Waits until every caller is done or `until`; true if all are done.
  bool wait(bench_clock::time_point until) {
    std::unique_lock<std::mutex> g{mtx};
    return cv.wait_until(g, until, [this] { return finished; });
  }

  const uint32_t count;
  /// ts_call::timeout of each coalesced call (0: none).
  const double call_timeout;
  const bench_clock::time_point measure_from;
  const bench_clock::time_point stop_at;
  std::vector<caller_result> results;
  std::atomic<int> running;
  std::mutex mtx;
  std::condition_variable cv;
  bool finished = false;
};

/// Records one answered call of a caller.
void record(cell& c, caller_result& r, bench_clock::time_point t0,
            bench_clock::time_point t1) {
  if (t0 >= c.measure_from && t1 <= c.stop_at)
    r.lat_ns.push_back(
      std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
}

void record_error(caller_result& r, std::string what) {
  if (r.errors++ == 0)
    r.first_error = std::move(what);
}

// -- callers --------------------------------------------------------------------

/// The diagnostic "ceiling" target: answers every ts_call at once with a
/// made-up timestamp range (no batching, no HTTP). The same callers against
/// it measure what CAF's request/response alone allows on this machine.
using echo_actor
  = caf::typed_actor<caf::replies_to<outbound::ts_call>::with<
    outbound::coalesce_reply>>;

echo_actor::behavior_type echo_impl(echo_actor::pointer,
                                    std::string endpoint) {
  auto next = std::make_shared<uint64_t>(1);
  // As the driver's reply: a range, and the RPC's epoch and endpoint key
  // shared by every reply.
  auto info = std::make_shared<outbound::coalesce_rpc_info>();
  info->epoch = "1";
  info->endpoint = std::move(endpoint);
  std::shared_ptr<const outbound::coalesce_rpc_info> rpc = std::move(info);
  return {
    [next, rpc](const outbound::ts_call& c) {
      outbound::coalesce_reply r;
      r.ts.physical_ms = *next / outbound::ts_max_per_rpc;
      r.ts.logical_start
        = static_cast<uint32_t>(*next % outbound::ts_max_per_rpc);
      r.ts.count = c.count;
      *next += outbound::ts_max_per_rpc; // one "millisecond" per call
      r.rpc = rpc;
      r.batch_waiters = 1;
      return r;
    },
  };
}

/// What a caller sends and how it reads the answer: a ts_call to the driver,
/// or a POST /v1/ts to the service client.
outbound::ts_call message_for(const outbound::coalescing_driver_actor&,
                              uint32_t count, double timeout) {
  outbound::ts_call c;
  c.count = count;
  c.timeout = timeout;
  return c;
}

outbound::ts_call message_for(const echo_actor&, uint32_t count,
                              double timeout) {
  outbound::ts_call c;
  c.count = count;
  c.timeout = timeout;
  return c;
}

outbound::call_request message_for(const outbound::service_client_actor&,
                                   uint32_t count, double) {
  outbound::call_request req;
  req.method = "POST";
  req.path = "/v1/ts";
  req.body = "{\"count\":" + std::to_string(count) + "}";
  req.has_body = true;
  return req;
}

/// The first packed timestamp of an answer, or an error text.
struct checked {
  uint64_t first = 0;
  std::string error;
};

checked check_answer(const outbound::coalesce_reply& r, uint32_t count) {
  checked c;
  if (r.error)
    c.error = r.error->message();
  else if (r.ts.count != count)
    c.error = "count " + std::to_string(r.ts.count);
  else
    c.first = r.ts.first();
  return c;
}

checked check_answer(const outbound::call_outcome& o, uint32_t count) {
  checked c;
  if (!o.ok()) {
    c.error = o.error->message();
    return c;
  }
  if (o.status != 200 || !o.body.is_object()) {
    c.error = "status " + std::to_string(o.status);
    return c;
  }
  const auto& b = o.body.get_object();
  auto u64 = [&](const char* name) -> std::optional<uint64_t> {
    auto* v = b.if_contains(name);
    if (v && v->is_uint64())
      return v->get_uint64();
    if (v && v->is_int64() && v->get_int64() >= 0)
      return static_cast<uint64_t>(v->get_int64());
    return std::nullopt;
  };
  auto phys = u64("physical_ms");
  auto logical = u64("logical_start");
  auto n = u64("count");
  if (!phys || !logical || !n || *n != count) {
    c.error = "bad body";
    return c;
  }
  c.first = outbound::ts_pack(*phys, static_cast<uint32_t>(*logical));
  return c;
}

template <class Handle>
struct answer_of;
template <>
struct answer_of<outbound::coalescing_driver_actor> {
  using type = outbound::coalesce_reply;
};
template <>
struct answer_of<echo_actor> {
  using type = outbound::coalesce_reply;
};
template <>
struct answer_of<outbound::service_client_actor> {
  using type = outbound::call_outcome;
};

template <class Handle>
struct caller_state {
  Handle target;
  std::shared_ptr<cell> c;
  caller_result* out = nullptr;
  bench_clock::time_point t0;
  uint64_t last_ts = 0;
  static inline const char* name = "bench_coalescing_caller";
};

template <class Handle>
using caller_actor = caf::stateful_actor<caller_state<Handle>>;

/// Sends the next call unless the cell is over at `now` (two clock reads per
/// call: the send time and the reply time, which is also the stop check).
template <class Handle>
void caller_next(caller_actor<Handle>* self, bench_clock::time_point now) {
  auto& st = self->state;
  if (now >= st.c->stop_at) {
    auto c = std::move(st.c);
    c->caller_done();
    self->quit();
    return;
  }
  auto msg = message_for(st.target, st.c->count, st.c->call_timeout);
  st.t0 = bench_clock::now();
  self->request(st.target, caf::infinite, std::move(msg))
    .then(
      [self](typename answer_of<Handle>::type& answer) {
        auto t1 = bench_clock::now();
        auto& st = self->state;
        auto ck = check_answer(answer, st.c->count);
        if (!ck.error.empty()) {
          record_error(*st.out, std::move(ck.error));
        } else {
          if (ck.first <= st.last_ts)
            ++st.out->order_violations;
          st.last_ts = ck.first;
          record(*st.c, *st.out, st.t0, t1);
        }
        caller_next(self, t1);
      },
      [self](caf::error& err) {
        record_error(*self->state.out, "actor error: " + to_string(err));
        caller_next(self, bench_clock::now());
      });
}

/// A caller: closed loop of calls to `target` until the cell's end.
template <class Handle>
caf::behavior caller(caller_actor<Handle>* self, Handle target,
                     std::shared_ptr<cell> c, caller_result* out) {
  self->state.target = std::move(target);
  self->state.c = std::move(c);
  self->state.out = out;
  self->state.out->lat_ns.reserve(4096);
  caller_next(self, bench_clock::now());
  return {[](outbound::done_atom) {}};
}

// -- counters ---------------------------------------------------------------------

struct hub_counters {
  uint64_t requests = 0; // oracle requests reaching any node
  uint64_t timestamps = 0;
};

hub_counters read_hub(const outbound::hub& h) {
  hub_counters c;
  auto v = json::parse(h.state_json());
  const auto& o = v.at("oracle").as_object();
  c.timestamps = o.at("timestamps_issued").to_number<uint64_t>();
  for (const auto& n : o.at("nodes").as_array())
    c.requests += n.at("requests").to_number<uint64_t>();
  return c;
}

std::optional<outbound::coalesce_stats>
read_driver(caf::actor_system& sys,
            const outbound::coalescing_driver_actor& d) {
  std::optional<outbound::coalesce_stats> out;
  caf::scoped_actor self{sys};
  self->request(d, std::chrono::seconds{10}, outbound::stats_atom_v)
    .receive([&](outbound::coalesce_stats& s) { out = std::move(s); },
             [](caf::error&) {});
  return out;
}

// -- one cell ---------------------------------------------------------------------

struct row {
  std::string mode; // "coalesced", "direct" or "ceiling"
  int round = 1;    // 1..--rounds
  int callers = 0;
  uint32_t count = 0;
  uint64_t calls = 0;
  double seconds = 0;
  double calls_per_s = 0;
  double p50_us = 0;
  double p99_us = 0;
  double max_us = 0;
  uint64_t errors = 0;
  uint64_t order_violations = 0;
  std::string first_error;
  /// RPCs in the window: the driver's count (coalesced) or the hub's.
  uint64_t rpcs = 0;
  double rpcs_per_s = 0;
  /// Waiters served per RPC (driver counters); direct: calls per hub request.
  double waiters_per_rpc = 0;
  /// Oracle requests that reached the hub's nodes in the window.
  uint64_t hub_requests = 0;
  double cpu_us_per_call = 0;
  bool finished = true;
};

double nearest_rank_us(const std::vector<int64_t>& sorted, double q) {
  if (sorted.empty())
    return 0;
  auto rank = static_cast<std::size_t>(
    std::ceil(q * static_cast<double>(sorted.size())));
  rank = std::min(std::max<std::size_t>(rank, 1), sorted.size());
  return static_cast<double>(sorted[rank - 1]) / 1e3;
}

struct cell_options {
  double warmup = 0.5;
  double duration = 3.0;
  double grace = 15.0;
  /// ts_call::timeout of every coalesced call (0: none).
  double call_timeout = 0;
};

template <class Handle>
row run_cell(caf::actor_system& sys, outbound::hub& h, const Handle& target,
             const std::optional<outbound::coalescing_driver_actor>& driver,
             const char* mode, int callers, uint32_t count,
             const cell_options& o) {
  auto secs = [](double s) {
    return std::chrono::duration_cast<bench_clock::duration>(
      std::chrono::duration<double>(s));
  };
  auto start = bench_clock::now();
  auto measure_from = start + secs(o.warmup);
  auto stop_at = measure_from + secs(o.duration);
  auto c = std::make_shared<cell>(callers, count, o.call_timeout, measure_from,
                                  stop_at);
  for (int i = 0; i < callers; ++i)
    sys.spawn(caller<Handle>, target, c,
              &c->results[static_cast<std::size_t>(i)]);
  std::this_thread::sleep_until(measure_from);
  auto cpu0 = process_cpu_us();
  auto hub0 = read_hub(h);
  std::optional<outbound::coalesce_stats> d0;
  if (driver)
    d0 = read_driver(sys, *driver);
  std::this_thread::sleep_until(stop_at);
  auto cpu1 = process_cpu_us();
  auto hub1 = read_hub(h);
  std::optional<outbound::coalesce_stats> d1;
  if (driver)
    d1 = read_driver(sys, *driver);
  row r;
  r.mode = mode;
  r.callers = callers;
  r.count = count;
  r.seconds = o.duration;
  if (!c->wait(stop_at + secs(o.grace))) {
    // A caller is stuck beyond every RPC budget: its result may still be
    // written, so nothing is read; the caller of run_cell reports and exits.
    r.finished = false;
    return r;
  }
  std::vector<int64_t> all;
  for (auto& cr : c->results) {
    all.insert(all.end(), cr.lat_ns.begin(), cr.lat_ns.end());
    r.errors += cr.errors;
    r.order_violations += cr.order_violations;
    if (r.first_error.empty() && !cr.first_error.empty())
      r.first_error = cr.first_error;
  }
  std::sort(all.begin(), all.end());
  r.calls = all.size();
  r.calls_per_s = static_cast<double>(r.calls) / o.duration;
  r.p50_us = nearest_rank_us(all, 0.50);
  r.p99_us = nearest_rank_us(all, 0.99);
  r.max_us = all.empty() ? 0 : static_cast<double>(all.back()) / 1e3;
  r.hub_requests = hub1.requests - hub0.requests;
  if (d0 && d1) {
    r.rpcs = d1->batches.rpcs - d0->batches.rpcs;
    auto served = d1->batches.served - d0->batches.served;
    r.waiters_per_rpc
      = r.rpcs > 0 ? static_cast<double>(served) / static_cast<double>(r.rpcs)
                   : 0;
  } else {
    r.rpcs = r.hub_requests;
    r.waiters_per_rpc = r.rpcs > 0 ? static_cast<double>(r.calls)
                                       / static_cast<double>(r.rpcs)
                                   : 0;
  }
  r.rpcs_per_s = static_cast<double>(r.rpcs) / o.duration;
  r.cpu_us_per_call
    = r.calls > 0 ? (cpu1 - cpu0) / static_cast<double>(r.calls) : 0;
  return r;
}

// -- output -----------------------------------------------------------------------

std::string fmt(double x, int prec = 1) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", prec, x);
  return buf;
}

void print_header() {
  std::printf("%-10s %7s %5s %10s %11s %9s %9s %9s %9s %8s %7s %8s\n", "mode",
              "callers", "count", "calls", "calls/s", "p50 us", "p99 us",
              "max us", "RPCs/s", "wait/RPC", "errors", "cpu us/c");
}

void print_row(const row& r) {
  std::printf("%-10s %7d %5u %10llu %11.0f %9.1f %9.1f %9.1f %9.0f %8.1f "
              "%7llu %8.2f\n",
              r.mode.c_str(), r.callers, r.count,
              static_cast<unsigned long long>(r.calls), r.calls_per_s,
              r.p50_us, r.p99_us, r.max_us, r.rpcs_per_s, r.waiters_per_rpc,
              static_cast<unsigned long long>(r.errors), r.cpu_us_per_call);
  if (r.errors > 0)
    std::printf("           first error: %s\n", r.first_error.c_str());
  if (r.order_violations > 0)
    std::printf("           ORDER: %llu answers not above the caller's "
                "previous timestamp\n",
                static_cast<unsigned long long>(r.order_violations));
  std::fflush(stdout);
}

std::string json_line(const row& r) {
  std::ostringstream o;
  o << "{\"bench\":\"coalescing\",\"mode\":\"" << r.mode
    << "\",\"round\":" << r.round << ",\"callers\":" << r.callers
    << ",\"count\":" << r.count << ",\"calls\":" << r.calls
    << ",\"seconds\":" << fmt(r.seconds, 3)
    << ",\"calls_per_s\":" << fmt(r.calls_per_s, 0) << ",\"timestamps_per_s\":"
    << fmt(r.calls_per_s * static_cast<double>(r.count), 0)
    << ",\"p50_us\":" << fmt(r.p50_us) << ",\"p99_us\":" << fmt(r.p99_us)
    << ",\"max_us\":" << fmt(r.max_us) << ",\"rpcs\":" << r.rpcs
    << ",\"rpcs_per_s\":" << fmt(r.rpcs_per_s, 0)
    << ",\"waiters_per_rpc\":" << fmt(r.waiters_per_rpc, 2)
    << ",\"hub_requests\":" << r.hub_requests << ",\"errors\":" << r.errors
    << ",\"order_violations\":" << r.order_violations
    << ",\"cpu_us_per_call\":" << fmt(r.cpu_us_per_call, 2) << "}";
  return o.str();
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"coalescing: calls/s and p50/p99 of get_ts through the "
               "coalescing driver vs one HTTP RPC per call, against an "
               "in-process 3-node oracle hub (see bench/README.md)"};
  std::vector<int> callers{1, 2, 4, 16, 256, 1024};
  std::size_t max_rpcs_in_flight
    = outbound::coalesce_config{}.max_rpcs_in_flight;
  int batch_callers = 64;
  uint32_t batch_count = 64;
  cell_options co;
  int hub_threads = 1;
  int io_threads = 1;
  double flush_interval = 0.001;
  std::string cold_start = "adaptive";
  std::string modes = "both";
  std::string ceiling = "goal";
  int rounds = 1;
  outbound::bench::caf_flags caf_opts;
  app.add_option("--callers", callers,
                 "concurrent callers of the count-1 cells (list)")
    ->check(CLI::Range(1, 4096))
    ->capture_default_str();
  app.add_option("--batch-callers", batch_callers,
                 "callers of the batch cell (0: no batch cell)")
    ->check(CLI::Range(0, 4096))
    ->capture_default_str();
  app.add_option("--batch-count", batch_count,
                 "timestamps per call in the batch cell (get_ts_batch)")
    ->check(CLI::Range(1, 262144))
    ->capture_default_str();
  app.add_option("--duration", co.duration,
                 "measured seconds per cell (after the warm-up)")
    ->check(CLI::Range(0.05, 600.0))
    ->capture_default_str();
  app.add_option("--warmup", co.warmup,
                 "unmeasured seconds before each cell's window")
    ->check(CLI::Range(0.0, 60.0))
    ->capture_default_str();
  app.add_option("--grace", co.grace,
                 "seconds to wait after a cell's end for calls still in "
                 "flight before giving up (exit 2)")
    ->check(CLI::Range(1.0, 120.0))
    ->capture_default_str();
  app.add_option("--hub-threads", hub_threads, "io threads of the hub")
    ->check(CLI::Range(1, 16))
    ->capture_default_str();
  app.add_option("--io-threads", io_threads,
                 "io threads of the client (the driver's pools and the "
                 "baseline's service client share one io_runner)")
    ->check(CLI::Range(1, 16))
    ->capture_default_str();
  app.add_option("--flush-interval", flush_interval,
                 "coalesce.batch_flush_interval in seconds (the cold-start "
                 "window)")
    ->check(CLI::Range(0.0, 1.0))
    ->capture_default_str();
  app
    .add_option("--call-timeout", co.call_timeout,
                "ts_call::timeout of every coalesced call in seconds (0: "
                "none; a timeout arms the driver's deadline timer)")
    ->check(CLI::Range(0.0, 60.0))
    ->capture_default_str();
  app
    .add_option("--cold-start", cold_start,
                "adaptive (coalesce.adaptive_cold_start, the default) or "
                "window (always wait --flush-interval, tsoracle's rule)")
    ->check(CLI::IsMember({"adaptive", "window"}))
    ->capture_default_str();
  std::string slots = "fill";
  app
    .add_option("--slots", slots,
                "fill (coalesce.fill_free_slots, the default: the callers "
                "queued beside RPCs in flight are spread over the free "
                "slots) or singles (a further RPC only while each in "
                "flight carries one caller, the earlier rule)")
    ->check(CLI::IsMember({"fill", "singles"}))
    ->capture_default_str();
  app
    .add_option("--max-rpcs-in-flight", max_rpcs_in_flight,
                "coalesce.max_rpcs_in_flight (1: tsoracle's one batch in "
                "flight)")
    ->check(CLI::Range(1, 64))
    ->capture_default_str();
  app
    .add_option("--rounds", rounds,
                "rounds of every cell; direct and coalesced alternate "
                "which runs first, and the goals give the range and median "
                "over the rounds")
    ->check(CLI::Range(1, 50))
    ->capture_default_str();
  app
    .add_option("--modes", modes,
                "both (the direct baseline, then coalesced; later rounds "
                "alternate the order), coalesced, direct, or ceiling (the "
                "ceiling row alone, e.g. to profile it; with --ceiling goal "
                "or all)")
    ->check(CLI::IsMember({"both", "coalesced", "direct", "ceiling"}))
    ->capture_default_str();
  app.add_option("--ceiling", ceiling,
                 "diagnostic row 'ceiling': the same callers against an actor "
                 "that answers each ts_call at once (CAF request/response "
                 "alone, no batching, no HTTP): goal (1024 x 1 only), all, "
                 "none")
    ->check(CLI::IsMember({"goal", "all", "none"}))
    ->capture_default_str();
  caf_opts.add_to(app);
  CLI11_PARSE(app, argc, argv);
  bool run_direct = modes == "both" || modes == "direct";
  bool run_coalesced = modes == "both" || modes == "coalesced";
  // --modes ceiling runs the ceiling rows alone: refuse a selection in
  // which no cell has one instead of running nothing.
  if (modes == "ceiling") {
    bool any = ceiling == "all" && (!callers.empty() || batch_callers > 0);
    for (int n : callers)
      any = any || (ceiling == "goal" && n == 1024);
    if (!any) {
      std::fprintf(stderr,
                   "--modes ceiling runs only ceiling rows, and --ceiling "
                   "%s with these --callers selects none (use --ceiling "
                   "all, or --ceiling goal with 1024 among --callers)\n",
                   ceiling.c_str());
      return 2;
    }
  }

  // Up to 1024 baseline connections, each with a client and a hub socket.
  {
    rlimit rl{};
    if (::getrlimit(RLIMIT_NOFILE, &rl) == 0) {
      rl.rlim_cur = rl.rlim_max;
      ::setrlimit(RLIMIT_NOFILE, &rl);
    }
  }

  outbound::hub_config hc;
  hc.cluster_size = 3;
  hc.threads = hub_threads;
  outbound::hub h{hc};
  h.start();
  auto endpoints = h.oracle_endpoints();
  auto leader = h.oracle_leader().value_or(0);

  // The recommended worker count leaves the in-process hub's threads and
  // the client's io threads their cores.
  caf_opts.io_threads = static_cast<std::size_t>(io_threads + hub_threads);
  caf::actor_system_config cfg;
  if (!caf_opts.apply(cfg))
    return 2;
  caf::actor_system sys{cfg};
  auto io = outbound::bench::client_io(sys,
                                       static_cast<std::size_t>(io_threads));

  std::string eps;
  for (std::size_t i = 0; i < endpoints.size(); ++i)
    eps += (i ? ", " : "") + endpoints[i] + (i == leader ? " (leader)" : "");
  std::printf("bench coalescing: hub cluster of 3 in this process [%s], "
              "%d hub io thread(s)\n",
              eps.c_str(), hub_threads);
  std::printf("client: %zu CAF thread(s), %d io thread(s); cores %u, "
              "SHARED by the hub and the client; load average %s\n%s\n",
              sys.scheduler().num_workers(), io_threads,
              std::thread::hardware_concurrency(),
              outbound::bench::load_average().c_str(),
              caf_opts.report(sys).c_str());
  std::printf("each cell: %.1f s warm-up + %.1f s measured; closed loop, one "
              "call in flight per caller; latency per call, send to reply "
              "(steady_clock, every call, nearest rank)\n",
              co.warmup, co.duration);
  std::printf("coalesced: caller actors -> one coalescing_driver (flush "
              "interval %.3f s, cold start %s, max_rpcs_in_flight %zu, "
              "slots %s) -> POST /v1/ts batches; direct: caller actors -> "
              "service_client (leader) -> one POST /v1/ts per call\n\n",
              flush_interval, cold_start.c_str(), max_rpcs_in_flight,
              slots.c_str());

  struct spec {
    int callers;
    uint32_t count;
  };
  std::vector<spec> specs;
  for (int n : callers)
    specs.push_back({n, 1});
  if (batch_callers > 0)
    specs.push_back({batch_callers, batch_count});

  print_header();
  std::vector<row> rows;
  bool ok = true;
  // Per round: the coalesced 1024 x 1 row, and its ceiling row.
  std::vector<row> goal_rows;
  std::vector<row> ceiling_rows;
  // Coalesced / direct calls/s of each count-1 cell, one per round.
  std::vector<std::pair<int, std::vector<double>>> vs_direct;
  // One cell of one mode; exits 2 when its callers do not finish.
  auto run_mode = [&](const std::string& mode, const spec& s, int round) {
    row r;
    if (mode == "direct") {
      outbound::client_config cc;
      cc.base_url = "http://" + endpoints[leader];
      cc.timeout = 5.0;
      cc.deadline = 10.0;
      cc.retry.max_attempts = 1;
      cc.max_idle_per_endpoint
        = static_cast<std::size_t>(std::max(64, s.callers));
      outbound::client_options opts;
      opts.io = io;
      opts.seed = 42;
      auto client = outbound::make_service_client(sys, cc, opts);
      r = run_cell(sys, h, client, std::nullopt, "direct", s.callers, s.count,
                   co);
      caf::anon_send_exit(client, caf::exit_reason::user_shutdown);
    } else if (mode == "coalesced") {
      outbound::coalesce_config cc;
      cc.endpoints = endpoints;
      cc.batch_flush_interval = flush_interval;
      cc.adaptive_cold_start = cold_start == "adaptive";
      cc.max_rpcs_in_flight = max_rpcs_in_flight;
      cc.fill_free_slots = slots == "fill";
      outbound::coalesce_options opts;
      opts.io = io;
      opts.seed = 42;
      auto driver = outbound::make_coalescing_driver(sys, cc, opts);
      r = run_cell(sys, h, driver, driver, "coalesced", s.callers, s.count, co);
      caf::anon_send_exit(driver, caf::exit_reason::user_shutdown);
    } else {
      auto echo = sys.spawn(echo_impl, "http://" + endpoints[leader]);
      r = run_cell(sys, h, echo, std::nullopt, "ceiling", s.callers, s.count,
                   co);
      caf::anon_send_exit(echo, caf::exit_reason::user_shutdown);
      r.rpcs = 0;
      r.rpcs_per_s = 0;
      r.waiters_per_rpc = 0;
    }
    r.round = round;
    if (!r.finished) {
      std::printf("%s %d x %u: callers still waiting %.0f s after the "
                  "cell's end; giving up\n",
                  mode.c_str(), s.callers, s.count, co.grace);
      std::fflush(stdout);
      std::_Exit(2);
    }
    print_row(r);
    rows.push_back(r);
    ok = ok && r.errors == 0 && r.order_violations == 0;
    return r;
  };
  for (const auto& s : specs) {
    bool is_goal_cell = s.callers == 1024 && s.count == 1;
    bool with_ceiling = ceiling == "all" || (ceiling == "goal" && is_goal_cell);
    std::vector<double> ratios;
    for (int round = 0; round < rounds; ++round) {
      // Alternating order, so that a drift of the machine during a cell
      // does not favour one mode in every round.
      std::vector<std::string> order;
      if (run_direct)
        order.push_back("direct");
      if (run_coalesced)
        order.push_back("coalesced");
      if (round % 2 == 1)
        std::reverse(order.begin(), order.end());
      if (with_ceiling)
        order.push_back("ceiling");
      std::optional<row> direct_row, coalesced_row, ceiling_row;
      for (const auto& mode : order) {
        auto r = run_mode(mode, s, round + 1);
        if (mode == "direct")
          direct_row = r;
        else if (mode == "coalesced")
          coalesced_row = r;
        else
          ceiling_row = r;
        // The ratio line right after the second of the two modes.
        if (mode != "ceiling" && direct_row && coalesced_row
            && direct_row->calls_per_s > 0) {
          const auto& c = *coalesced_row;
          const auto& d = *direct_row;
          std::string tag
            = rounds > 1 ? " (round " + std::to_string(round + 1) + ")" : "";
          std::printf(
            "%-10s %7d %5u   coalesced/direct: calls/s x%.2f, p99 "
            "x%.2f, RPCs/s x%.3f%s\n",
            "ratio", s.callers, s.count, c.calls_per_s / d.calls_per_s,
            d.p99_us > 0 ? c.p99_us / d.p99_us : 0,
            d.rpcs_per_s > 0 ? c.rpcs_per_s / d.rpcs_per_s : 0, tag.c_str());
          if (s.count == 1)
            ratios.push_back(c.calls_per_s / d.calls_per_s);
        }
      }
      if (coalesced_row && is_goal_cell) {
        goal_rows.push_back(*coalesced_row);
        if (ceiling_row && ceiling_row->calls_per_s > 0)
          ceiling_rows.push_back(*ceiling_row);
      }
    }
    if (!ratios.empty())
      vs_direct.emplace_back(s.callers, std::move(ratios));
  }

  std::printf("\nload average at the end: %s (other processes share the "
              "2 cores with the hub and the client)\n",
              outbound::bench::load_average().c_str());
  // The median of one value per round.
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    auto n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  };
  // "lo..hi (median m)" of one value per round; the value alone for one.
  auto spread = [&](std::vector<double> v, const char* fmt) {
    auto f = [fmt](double x) {
      char b[32];
      std::snprintf(b, sizeof b, fmt, x);
      return std::string{b};
    };
    if (v.size() == 1)
      return f(v.front());
    auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    return f(*lo) + ".." + f(*hi) + " (median " + f(median(v)) + ")";
  };
  // The verdict of a goal judged per round (`each`) and on the medians of
  // the printed figures (`at_median`): MET when every round meets it, "MET
  // at the median only" when only the medians do.
  auto verdict = [](const std::vector<bool>& each, bool at_median) {
    if (std::all_of(each.begin(), each.end(), [](bool b) { return b; }))
      return "MET";
    return at_median ? "MET at the median only" : "NOT MET";
  };
  auto column
    = [](const std::vector<row>& rs, double row::*field, double scale = 1.0) {
        std::vector<double> v;
        for (const auto& r : rs)
          v.push_back(r.*field * scale);
        return v;
      };
  if (!goal_rows.empty()) {
    auto cps = column(goal_rows, &row::calls_per_s);
    auto p99_ms = column(goal_rows, &row::p99_us, 1e-3);
    std::vector<bool> each;
    for (const auto& g : goal_rows)
      each.push_back(g.calls_per_s >= 500000 && g.p99_us <= 3000);
    std::printf("goal: >= 500000 calls/s at 1024 callers with p99 "
                "<= 3 ms, coalesced, on this machine (hub sharing the "
                "cores): measured %s calls/s, p99 %s ms -> %s\n",
                spread(cps, "%.0f").c_str(), spread(p99_ms, "%.2f").c_str(),
                verdict(each, median(cps) >= 500000 && median(p99_ms) <= 3));
    std::printf("reference (another client, much larger machine, in-memory "
                "backend): 437000 calls/s, p99 3.4 ms\n");
    if (ceiling_rows.size() == goal_rows.size()) {
      std::vector<double> x;
      std::vector<bool> each_x;
      for (std::size_t i = 0; i < goal_rows.size(); ++i) {
        x.push_back(goal_rows[i].calls_per_s / ceiling_rows[i].calls_per_s);
        each_x.push_back(x.back() >= 0.9);
      }
      std::printf(
        "goal: >= 0.9x the ceiling row at 1024 callers (CAF "
        "request/response alone, same run): measured x%s (%s of "
        "%s calls/s) -> %s\n",
        spread(x, "%.2f").c_str(), spread(cps, "%.0f").c_str(),
        spread(column(ceiling_rows, &row::calls_per_s), "%.0f").c_str(),
        verdict(each_x, median(x) >= 0.9));
    }
    std::printf("\n");
  } else {
    std::printf("goal: not evaluated (no coalesced 1024 x 1 "
                "cell in this run)\n\n");
  }
  if (!vs_direct.empty()) {
    std::vector<bool> each;
    bool medians_met = true;
    std::printf("goal: coalesced >= 1.0x direct calls/s at every caller "
                "count:");
    for (auto& [n, x] : vs_direct) {
      std::printf(" %d: x%s", n, spread(x, "%.2f").c_str());
      for (double r : x)
        each.push_back(r >= 1.0);
      medians_met = medians_met && median(x) >= 1.0;
    }
    std::printf(" -> %s\n\n", verdict(each, medians_met));
  }
  for (auto& r : rows)
    std::printf("json: %s\n", json_line(r).c_str());
  std::fflush(stdout);
  h.stop();
  return ok ? 0 : 1;
}
