// bench/feeds (bench/README.md): feed watchers against the reference hub
// on 127.0.0.1, in one bounded run.
//
//   1. memory: N watchers (ledger tier: replay + /ws/feed) connected and
//      idle; client RSS delta / N. The hub runs in a forked child process
//      (same hub library, started after fork) so its memory is not counted.
//   2. latency: W watchers, one subject prefix each, on an in-process hub;
//      events published round-robin at a fixed total rate with the publish
//      time (steady clock, ns) in the metadata; latency = time the
//      subscriber (callback on a scheduled helper actor) sees it - publish
//      time. p50/p99 and the publish rate actually achieved.
//   3. catch-up: E events published in-process first (bounded by
//      --max-seconds), then, in each of R rounds, one replay-only watcher
//      drains with limit L (events/s from spawn to the last delivery) and a
//      raw Beast client fetches and parses the same pages (the same-run
//      baseline), in alternating order.
//
// Each figure prints as a table row and as one JSON line ("json: {...}").
// Every wait is bounded by --max-seconds; traffic only on 127.0.0.1.

#include "bench/caf_setup.hpp"

#include "actors/client/service_client.hpp"
#include "actors/feed/feed_config.hpp"
#include "actors/feed/feed_messages.hpp"
#include "actors/feed/feed_watcher.hpp"
#include "actors/messages.hpp"
#include "config/client_config.hpp"
#include "hub/hub.hpp"
#include "protocol/io_runner.hpp"
#include "protocol/ws_session.hpp"

#include <CLI/CLI.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace outbound;
using namespace std::chrono_literals;
using clk = std::chrono::steady_clock;

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
           clk::now().time_since_epoch())
    .count();
}

double seconds_since(clk::time_point t0) {
  return std::chrono::duration<double>(clk::now() - t0).count();
}

/// Resident set size of this process in bytes (/proc/self/statm).
int64_t rss_bytes() {
  std::ifstream in{"/proc/self/statm"};
  int64_t size = 0, resident = 0;
  in >> size >> resident;
  return resident * static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
}

/// Raises RLIMIT_NOFILE to the hard limit; returns the new soft limit.
uint64_t raise_nofile() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0)
    return 0;
  rl.rlim_cur = rl.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &rl);
  ::getrlimit(RLIMIT_NOFILE, &rl);
  return static_cast<uint64_t>(rl.rlim_cur);
}

void json_line(const std::string& body) {
  std::printf("json: {\"bench\":\"feeds\",%s}\n", body.c_str());
  std::fflush(stdout);
}

/// A hub in a forked child process (started after fork, so no threads are
/// inherited). The child stops when the parent closes the control pipe.
struct child_hub {
  pid_t pid = -1;
  int ctl = -1;
  uint16_t port = 0;

  bool start() {
    int port_pipe[2], ctl_pipe[2];
    if (::pipe(port_pipe) != 0 || ::pipe(ctl_pipe) != 0)
      return false;
    pid = ::fork();
    if (pid < 0)
      return false;
    if (pid == 0) {
      ::close(port_pipe[0]);
      ::close(ctl_pipe[1]);
      uint16_t p = 0;
      try {
        hub_config hc;
        hc.seed = 1;
        hc.max_clients = 65536;
        hub h{hc};
        h.start();
        p = h.port();
        (void) !::write(port_pipe[1], &p, sizeof p);
        char c;
        while (::read(ctl_pipe[0], &c, 1) > 0) {
        }
        h.stop();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child hub: %s\n", e.what());
        (void) !::write(port_pipe[1], &p, sizeof p);
        ::_exit(1);
      }
      ::_exit(0);
    }
    ::close(port_pipe[1]);
    ::close(ctl_pipe[0]);
    ctl = ctl_pipe[1];
    auto n = ::read(port_pipe[0], &port, sizeof port);
    ::close(port_pipe[0]);
    return n == sizeof port && port != 0;
  }

  void stop() {
    if (ctl >= 0)
      ::close(ctl);
    ctl = -1;
    if (pid > 0) {
      auto until = clk::now() + 10s;
      int status = 0;
      while (::waitpid(pid, &status, WNOHANG) == 0) {
        if (clk::now() > until) {
          ::kill(pid, SIGKILL);
          ::waitpid(pid, &status, 0);
          break;
        }
        std::this_thread::sleep_for(20ms);
      }
    }
    pid = -1;
  }
};

/// The client side: one actor system, io runner, service client and
/// WebSocket connector shared by every watcher of a phase.
struct client_side {
  std::shared_ptr<io_runner> io;
  service_client_actor client;
  std::shared_ptr<ws_connector> connector;
  feed_ws_endpoint ws;

  client_side(caf::actor_system& sys, const std::string& base_url,
              std::size_t io_threads,
              double surplus_idle_time = client_config{}.surplus_idle_time) {
    io = outbound::bench::client_io(sys, io_threads);
    client_config cc;
    cc.base_url = base_url;
    cc.timeout = 10.0;
    cc.deadline = 20.0;
    cc.surplus_idle_time = surplus_idle_time;
    client_options co;
    co.io = io;
    client = make_service_client(sys, cc, co);
    connector = make_ws_connector(io);
    ws = feed_ws_endpoint::from(cc);
  }

  feed_watcher_options options(feed_callbacks cbs, uint64_t seed) {
    feed_watcher_options o;
    o.client = client;
    o.connector = connector;
    o.ws = ws;
    o.callbacks = std::move(cbs);
    o.seed = seed;
    return o;
  }
};

std::optional<feed_stats> stats_of(caf::scoped_actor& self,
                                   const feed_watcher_actor& w) {
  std::optional<feed_stats> out;
  self->request(w, 5s, stats_atom_v)
    .receive([&](const feed_stats& s) { out = s; },
             [&](const caf::error&) {});
  return out;
}

/// How many of `ws[from..]`, from the front, report connected: their
/// stats are asked `window` at a time, all of a window at once, so the
/// probe does not pay one cross-thread round trip per watcher (a
/// sequential sweep of 10,000 connected watchers took ~0.9 s here).
std::size_t connected_prefix(caf::scoped_actor& asker,
                             const std::vector<feed_watcher_actor>& ws,
                             std::size_t from, std::size_t window) {
  auto end = std::min(ws.size(), from + window);
  using handle = decltype(asker->request(ws[from], 5s, stats_atom_v));
  std::vector<handle> asked;
  asked.reserve(end - from);
  for (auto i = from; i < end; ++i)
    asked.push_back(asker->request(ws[i], 5s, stats_atom_v));
  std::size_t prefix = 0;
  bool gap = false;
  for (auto& h : asked) {
    bool up = false;
    h.receive([&](const feed_stats& s) { up = s.connected; },
              [&](const caf::error&) {});
    if (!up)
      gap = true;
    else if (!gap)
      ++prefix;
  }
  return prefix;
}

void stop_all(caf::actor_system& sys, std::vector<feed_watcher_actor>& ws) {
  caf::scoped_actor self{sys};
  for (auto& w : ws)
    self->send(w, stop_atom_v);
  for (std::size_t i = 0; i < ws.size(); ++i)
    self->receive([](const feed_stats&) {}, [](const caf::error&) {},
                  caf::after(10s) >> [] {});
  ws.clear();
}

feed_config ledger_feed(int limit) {
  feed_config fc;
  fc.replay_path = "/v1/events";
  fc.ws_path = "/ws/feed";
  fc.limit = limit;
  fc.poll_interval = 30.0;
  fc.ws_ping_interval = 20.0;
  fc.reconnect_base_backoff = 0.2;
  fc.reconnect_max_backoff = 5.0;
  fc.ws_handshake_timeout = 30.0;
  return fc;
}

// -- phase 1 ------------------------------------------------------------------

void phase_memory(caf::actor_system& sys, child_hub& ch,
                  const std::vector<std::size_t>& ns, double max_seconds,
                  uint64_t nofile, int limit, double surplus_idle_time) {
  std::printf("\n== 1. client memory per idle watcher (ledger tier, hub in a "
              "child process, RLIMIT_NOFILE=%" PRIu64
              ", the replay client's surplus_idle_time %.1f s) ==\n",
              nofile, surplus_idle_time);
  std::printf("%10s %10s %14s %14s %12s %13s %10s %10s %8s\n", "watchers",
              "connected", "rss_before_KiB", "rss_after_KiB", "per_watcher",
              "goal", "connect_s", "goal", "probe_s");
  client_side cs{sys, "http://127.0.0.1:" + std::to_string(ch.port), 1,
                 surplus_idle_time};
  for (auto n : ns) {
    // One fd per watcher here and one in the hub child, plus slack.
    if (n + 64 > nofile) {
      std::printf("%10zu  SKIPPED: needs ~%zu fds, RLIMIT_NOFILE is %" PRIu64
                  "\n",
                  n, n + 64, nofile);
      json_line("\"figure\":\"client_memory_per_watcher\",\"watchers\":"
                + std::to_string(n)
                + ",\"skipped\":\"RLIMIT_NOFILE too low\"");
      continue;
    }
    std::this_thread::sleep_for(500ms);
    auto before = rss_bytes();
    std::vector<feed_watcher_actor> ws;
    ws.reserve(n);
    auto t0 = clk::now();
    for (std::size_t i = 0; i < n; ++i) {
      feed_callbacks cbs;
      cbs.detached = false;
      cbs.on_event = [](const feed_event&) {};
      ws.push_back(spawn_feed_watcher(sys, ledger_feed(limit),
                                      cs.options(std::move(cbs), i + 1)));
    }
    // Wait until every watcher reports connected (bounded).
    std::size_t connected = 0;
    std::size_t next = 0;
    // One asking actor for every query: a scoped_actor per query costs a
    // spawn and its teardown, on the cores the watchers connect on.
    caf::scoped_actor asker{sys};
    // The window grows while whole windows answer connected and shrinks
    // when one does not, so the probe asks little more than once per
    // watcher while they connect.
    std::size_t window = 32;
    while (next < n && seconds_since(t0) < max_seconds) {
      auto asked = std::min(window, n - next);
      auto up = connected_prefix(asker, ws, next, asked);
      next += up;
      if (up == asked) {
        window = std::min<std::size_t>(window * 2, 1024);
        continue;
      }
      window = std::max<std::size_t>(window / 2, 32);
      std::this_thread::sleep_for(20ms);
    }
    connected = next;
    auto connect_s = seconds_since(t0);
    // The probe's own resolution: one sweep over every watcher, all
    // connected by now.
    auto p0 = clk::now();
    for (std::size_t i = 0; i < connected; i += 1024)
      connected_prefix(asker, ws, i,
                       std::min<std::size_t>(1024, connected - i));
    auto sweep_s = seconds_since(p0);
    std::this_thread::sleep_for(1s); // settle: idle
    auto after = rss_bytes();
    double per = connected ? double(after - before) / double(n) : 0.0;
    // Not all connected: no memory verdict (the figure divides by all).
    bool all = connected == n;
    std::printf("%10zu %10zu %14" PRId64 " %14" PRId64
                " %9.1f KiB %13s %10.2f %10s %8.2f %s\n",
                n, connected, before / 1024, after / 1024, per / 1024.0,
                !all ? "32KiB -"
                     : (per <= 32768 ? "32KiB met" : "32KiB MISSED"),
                connect_s, all && connect_s <= 3.0 ? "3s met" : "3s MISSED",
                sweep_s, all ? "" : "(NOT all connected in time)");
    std::ostringstream js;
    js << "\"figure\":\"client_memory_per_watcher\",\"watchers\":" << n
       << ",\"connected\":" << connected << ",\"connect_seconds\":" << connect_s
       << ",\"probe_sweep_seconds\":" << sweep_s << ",\"rss_before\":" << before
       << ",\"rss_after\":" << after
       << ",\"bytes_per_watcher\":" << static_cast<int64_t>(per)
       << ",\"surplus_idle_time\":" << surplus_idle_time
       << ",\"goal_bytes\":32768,\"met\":"
       << ((connected == n && per <= 32768) ? "true" : "false");
    json_line(js.str());
    stop_all(sys, ws);
  }
}

// -- phase 2 ------------------------------------------------------------------

struct latency_sink {
  std::mutex mu;
  std::vector<int64_t> lat_ns;
  std::atomic<uint64_t> count{0};
};

/// CPU seconds of `who` (RUSAGE_THREAD: the calling thread; RUSAGE_SELF:
/// every thread of the process), user + system.
double cpu_seconds(int who) {
  rusage ru{};
  ::getrusage(who, &ru);
  auto tv = [](const timeval& t) {
    return double(t.tv_sec) + double(t.tv_usec) / 1e6;
  };
  return tv(ru.ru_utime) + tv(ru.ru_stime);
}

void phase_latency(caf::actor_system& sys, std::size_t watchers, double rate,
                   double seconds, double max_seconds, int limit,
                   int64_t publish_tick_us) {
  std::printf("\n== 2. wake-to-delivery latency (ledger tier, in-process hub, "
              "%zu watchers, one prefix each) ==\n",
              watchers);
  hub_config hc;
  hc.seed = 2;
  hc.replay_limit = std::max(limit, 500);
  hub h{hc};
  h.start();
  client_side cs{sys, h.base_url(), 1};
  auto sink = std::make_shared<latency_sink>();
  std::vector<feed_watcher_actor> ws;
  for (std::size_t i = 0; i < watchers; ++i) {
    feed_callbacks cbs;
    cbs.detached = false;
    cbs.on_event = [sink](const feed_event& e) {
      auto t = now_ns();
      int64_t sent = 0;
      try {
        sent = e.event.as_object()
                 .at("metadata")
                 .as_object()
                 .at("t")
                 .to_number<int64_t>();
      } catch (...) {
        return;
      }
      std::lock_guard<std::mutex> lock{sink->mu};
      sink->lat_ns.push_back(t - sent);
      sink->count.fetch_add(1);
    };
    auto fc = ledger_feed(limit);
    fc.prefixes = {"l" + std::to_string(i) + "/"};
    ws.push_back(
      spawn_feed_watcher(sys, fc, cs.options(std::move(cbs), i + 1)));
  }
  auto t0 = clk::now();
  std::size_t next = 0;
  caf::scoped_actor asker{sys};
  while (next < watchers && seconds_since(t0) < max_seconds) {
    auto s = stats_of(asker, ws[next]);
    if (s && s->connected)
      ++next;
    else
      std::this_thread::sleep_for(20ms);
  }
  if (next < watchers) {
    std::printf("  NOT RUN: only %zu of %zu watchers connected within %.0f s\n",
                next, watchers, max_seconds);
    json_line("\"figure\":\"wake_to_delivery\",\"skipped\":\"watchers not "
              "connected\"");
    stop_all(sys, ws);
    h.stop();
    return;
  }
  // Publish at `rate` events/s total, round-robin over the prefixes. The
  // publisher stands for publishers in other processes, yet shares the 2
  // cores with the hub and the watchers: with a tick it wakes once per tick
  // and publishes every event due by then (bursts of rate x tick events);
  // with 0 it sleeps until each event's own due time (50 us naps, one
  // wake-up or more per event). Latency runs from each event's actual
  // publish, so the pacing moves no event's figure by itself.
  auto total = static_cast<uint64_t>(rate * seconds);
  auto tick = std::chrono::microseconds(publish_tick_us);
  auto p0 = clk::now();
  auto pub_cpu0 = cpu_seconds(RUSAGE_THREAD);
  auto all_cpu0 = cpu_seconds(RUSAGE_SELF);
  uint64_t published = 0;
  for (; published < total; ++published) {
    auto due = p0 + std::chrono::nanoseconds(
                      static_cast<int64_t>(double(published) * 1e9 / rate));
    if (tick.count() > 0) {
      // The end of the tick this event falls in.
      auto ticks = (due - p0 + tick - std::chrono::nanoseconds(1)) / tick;
      auto wake = p0 + ticks * tick;
      if (clk::now() < due)
        std::this_thread::sleep_until(wake);
    } else {
      while (clk::now() < due)
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    h.publish("l" + std::to_string(published % watchers) + "/x", "tick",
              "{\"t\":" + std::to_string(now_ns()) + "}");
    if (seconds_since(p0) > max_seconds)
      break;
  }
  auto pub_s = seconds_since(p0);
  auto pub_cpu = (cpu_seconds(RUSAGE_THREAD) - pub_cpu0) / pub_s;
  auto all_cpu = (cpu_seconds(RUSAGE_SELF) - all_cpu0) / pub_s;
  auto achieved = double(published) / pub_s;
  auto w0 = clk::now();
  while (sink->count.load() < published && seconds_since(w0) < max_seconds)
    std::this_thread::sleep_for(10ms);
  std::vector<int64_t> lat;
  {
    std::lock_guard<std::mutex> lock{sink->mu};
    lat = sink->lat_ns;
  }
  stop_all(sys, ws);
  h.stop();
  std::sort(lat.begin(), lat.end());
  auto pct = [&](double p) {
    if (lat.empty())
      return 0.0;
    auto i = static_cast<std::size_t>(p * double(lat.size() - 1));
    return double(lat[i]) / 1e6;
  };
  double p50 = pct(0.50), p99 = pct(0.99), mx = pct(1.0);
  std::printf("%12s %12s %10s %10s %10s %10s %12s\n", "target_ev/s",
              "achieved", "published", "delivered", "p50_ms", "p99_ms",
              "max_ms");
  std::printf("%12.0f %12.0f %10" PRIu64 " %10zu %10.3f %10.3f %12.3f  goal "
              "p99<=10ms at 10000 ev/s: %s\n",
              rate, achieved, published, lat.size(), p50, p99, mx,
              achieved < 10000 * 0.95  ? "NOT AT GOAL RATE"
              : lat.size() != published ? "MISSED (not all delivered)"
              : p99 <= 10.0             ? "met"
                                        : "MISSED");
  std::printf(
    "  publisher: %s; its thread %.0f%% of a core, the whole "
    "process %.0f%% (of %u cores x 100%%) while publishing\n",
    publish_tick_us > 0 ? ("one wake-up per " + std::to_string(publish_tick_us)
                           + " us tick, publishing what is due")
                            .c_str()
                        : "a sleep until each event's due time",
    pub_cpu * 100, all_cpu * 100, std::thread::hardware_concurrency());
  std::ostringstream js;
  js << "\"figure\":\"wake_to_delivery\",\"watchers\":" << watchers
     << ",\"target_rate\":" << rate << ",\"achieved_rate\":" << achieved
     << ",\"published\":" << published << ",\"delivered\":" << lat.size()
     << ",\"p50_ms\":" << p50 << ",\"p99_ms\":" << p99 << ",\"max_ms\":" << mx
     << ",\"publish_tick_us\":" << publish_tick_us
     << ",\"publisher_cpu\":" << pub_cpu << ",\"process_cpu\":" << all_cpu
     << ",\"goal_p99_ms\":10,\"goal_rate\":10000";
  json_line(js.str());
}

// -- phase 3 ------------------------------------------------------------------

/// What one drain of the catch-up phase read.
struct drain_result {
  uint64_t events = 0;
  double seconds = 0;
  /// Replay GETs made (pages read).
  uint64_t pages = 0;
  std::string error;

  double rate() const {
    return seconds > 0 ? double(events) / seconds : 0.0;
  }
};

/// The same-run baseline: a raw Boost.Beast keep-alive client on this
/// thread that only fetches the same replay pages of the same hub and
/// parses each with boost::json::parse (reading every event's id to move
/// its cursor), nothing else: no actors, no retries, no delivery.
drain_result raw_catchup(uint16_t port, uint64_t events, int limit,
                         double max_seconds) {
  namespace net = boost::asio;
  namespace http = boost::beast::http;
  drain_result r;
  auto t0 = clk::now();
  try {
    net::io_context ioc;
    net::ip::tcp::socket sock{ioc};
    sock.connect({net::ip::make_address("127.0.0.1"), port});
    sock.set_option(net::ip::tcp::no_delay{true});
    // Room for 64 KiB receives, as outbound's session reads a large body
    // (Beast reads only what the buffer's capacity leaves free).
    boost::beast::flat_buffer buf;
    buf.reserve(64 * 1024);
    int64_t after = 0;
    while (r.events < events && seconds_since(t0) < max_seconds) {
      http::request<http::empty_body> req{http::verb::get,
                                          "/v1/events?after="
                                            + std::to_string(after)
                                            + "&limit=" + std::to_string(limit),
                                          11};
      req.set(http::field::host, "127.0.0.1");
      http::write(sock, req);
      http::response_parser<http::string_body> parser;
      parser.body_limit(64 * 1024 * 1024);
      http::read(sock, buf, parser);
      ++r.pages;
      auto v = boost::json::parse(parser.get().body());
      const auto& evs = v.as_object().at("events").as_array();
      if (evs.empty())
        break;
      for (const auto& e : evs) {
        after = e.as_object().at("id").to_number<int64_t>();
        ++r.events;
      }
    }
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  r.seconds = seconds_since(t0);
  return r;
}

/// One replay-only watcher (a fresh service client) drains the hub from
/// the start: events/s from spawn to the last delivery.
drain_result watcher_catchup(caf::actor_system& sys, hub& h, uint64_t events,
                             int limit, double max_seconds) {
  client_side cs{sys, h.base_url(), 1};
  auto count = std::make_shared<std::atomic<uint64_t>>(0);
  feed_callbacks cbs;
  cbs.detached = false;
  cbs.on_event = [count](const feed_event&) {
    count->fetch_add(1, std::memory_order_relaxed);
  };
  feed_config fc;
  fc.replay_path = "/v1/events";
  fc.limit = limit;
  fc.poll_interval = 30.0;
  drain_result r;
  auto t0 = clk::now();
  std::vector<feed_watcher_actor> ws;
  ws.push_back(spawn_feed_watcher(sys, fc, cs.options(std::move(cbs), 1)));
  while (count->load() < events && seconds_since(t0) < max_seconds)
    std::this_thread::sleep_for(100us);
  r.seconds = seconds_since(t0);
  r.events = count->load();
  caf::scoped_actor asker{sys};
  if (auto st = stats_of(asker, ws.front()))
    r.pages = st->pages;
  stop_all(sys, ws);
  return r;
}

void phase_catchup(caf::actor_system& sys, uint64_t events, int limit,
                   double max_seconds, int rounds, const std::string& only) {
  bool run_raw = only != "watcher";
  bool run_watcher = only != "raw";
  std::printf("\n== 3. single-feed catch-up (ledger replay, limit %d, "
              "in-process hub, %d rounds, raw Beast alongside) ==\n",
              limit, rounds);
  hub_config hc;
  hc.seed = 3;
  hc.replay_limit = std::max(limit, 1);
  hub h{hc};
  h.start();
  auto p0 = clk::now();
  uint64_t published = 0;
  for (; published < events; ++published) {
    h.publish("c/1", "e", "{}");
    if ((published & 1023) == 0 && seconds_since(p0) > max_seconds)
      break;
  }
  auto pub_s = seconds_since(p0);
  std::printf("  published %" PRIu64 " of %" PRIu64
              " events in %.2f s (%.0f ev/s in-process publish)%s\n",
              published, events, pub_s, double(published) / pub_s,
              published < events ? " -- CAPPED by --max-seconds" : "");
  std::printf("%6s %10s %12s %10s %8s %14s %8s\n", "round", "client", "drained",
              "seconds", "pages", "events/s", "ratio");
  std::vector<double> ratios, rates, raw_rates;
  bool finished = true;
  for (int round = 1; round <= rounds; ++round) {
    // Alternate which drain goes first, so neither always runs on a
    // warmer (or a more loaded) machine.
    drain_result raw, w;
    auto do_raw = [&] {
      if (run_raw)
        raw = raw_catchup(h.port(), published, limit, max_seconds);
    };
    auto do_watcher = [&] {
      if (run_watcher)
        w = watcher_catchup(sys, h, published, limit, max_seconds);
    };
    if (round % 2 == 1) {
      do_raw();
      do_watcher();
    } else {
      do_watcher();
      do_raw();
    }
    double ratio = raw.rate() > 0 ? w.rate() / raw.rate() : 0.0;
    finished = finished && w.events >= published && raw.events >= published;
    std::printf("%6d %10s %12" PRIu64 " %10.3f %8" PRIu64 " %14.0f\n", round,
                "raw_beast", raw.events, raw.seconds, raw.pages, raw.rate());
    std::printf("%6d %10s %12" PRIu64 " %10.3f %8" PRIu64 " %14.0f %8.2f\n",
                round, "watcher", w.events, w.seconds, w.pages, w.rate(),
                ratio);
    if (!raw.error.empty())
      std::printf("  raw client error: %s\n", raw.error.c_str());
    ratios.push_back(ratio);
    rates.push_back(w.rate());
    raw_rates.push_back(raw.rate());
    std::ostringstream js;
    js << "\"figure\":\"catchup_throughput\",\"round\":" << round
       << ",\"published\":" << published << ",\"limit\":" << limit
       << ",\"drained\":" << w.events << ",\"drain_seconds\":" << w.seconds
       << ",\"events_per_second\":" << w.rate()
       << ",\"raw_drained\":" << raw.events
       << ",\"raw_seconds\":" << raw.seconds
       << ",\"raw_events_per_second\":" << raw.rate() << ",\"ratio\":" << ratio
       << ",\"goal_ratio\":0.8,\"goal_events_per_second\":1000000";
    json_line(js.str());
  }
  h.stop();
  auto range = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return std::make_pair(v.front(), v.back());
  };
  auto [r_lo, r_hi] = range(ratios);
  auto [w_lo, w_hi] = range(rates);
  auto [b_lo, b_hi] = range(raw_rates);
  std::printf("  watcher %.0f-%.0f ev/s, raw Beast %.0f-%.0f ev/s, ratio "
              "%.2f-%.2f  goals >= 0.8x raw: %s, >= 1000000 ev/s: %s\n",
              w_lo, w_hi, b_lo, b_hi, r_lo, r_hi,
              !finished     ? "NOT FINISHED within --max-seconds"
              : r_lo >= 0.8 ? "met"
                            : "MISSED",
              !finished     ? "NOT FINISHED"
              : w_lo >= 1e6 ? "met"
                            : "MISSED");
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"feed watcher benchmark against the reference hub "
               "(127.0.0.1 only)"};
  std::string watchers_list = "100 1000 10000";
  double rate = 10000;
  std::size_t latency_watchers = 100;
  double latency_seconds = 5;
  uint64_t catchup_events = 1000000;
  int limit = 1000;
  int catchup_rounds = 3;
  std::string catchup_clients = "both";
  double max_seconds = 120;
  std::string phases = "123";
  double surplus_idle_time = client_config{}.surplus_idle_time;
  int64_t publish_tick_us = 0;
  app.add_option("--watchers", watchers_list,
                 "watcher counts for the memory phase (space separated)");
  app.add_option("--rate", rate, "total publish rate, events/s")
    ->check(CLI::Range(1.0, 200000.0));
  app.add_option("--latency-watchers", latency_watchers,
                 "watchers in the latency phase")
    ->check(CLI::Range(1, 10000));
  app.add_option("--latency-seconds", latency_seconds,
                 "publishing time of the latency phase")
    ->check(CLI::Range(0.1, 300.0));
  app.add_option("--catchup-events", catchup_events,
                 "events published before the catch-up drain")
    ->check(CLI::Range(uint64_t{1}, uint64_t{10000000}));
  app
    .add_option("--catchup-rounds", catchup_rounds,
                "catch-up rounds (each: the watcher and raw Beast)")
    ->check(CLI::Range(1, 20));
  app
    .add_option("--catchup-clients", catchup_clients,
                "both, or one of them alone (for profiling one side)")
    ->check(CLI::IsMember({"both", "watcher", "raw"}));
  app
    .add_option("--publish-tick-us", publish_tick_us,
                "latency phase, us: the publisher wakes once per tick and "
                "publishes every event due by then (bursts of rate x tick); "
                "0 (default): it sleeps until each event's own due time, so "
                "events arrive evenly spaced")
    ->check(CLI::Range(int64_t{0}, int64_t{100000}));
  app.add_option("--limit", limit, "replay page size")
    ->check(CLI::Range(1, 100000));
  app.add_option("--max-seconds", max_seconds, "bound of each wait / phase")
    ->check(CLI::Range(1.0, 3600.0));
  app.add_option("--phases", phases, "which phases to run, e.g. 13");
  app
    .add_option("--surplus-idle-time", surplus_idle_time,
                "client_config::surplus_idle_time of the memory phase's "
                "replay client, seconds (0: the earlier rule, a connection "
                "beyond max_idle_per_endpoint closed at once)")
    ->check(CLI::Range(0.0, 3600.0));
  // The client side's io_runner (1 thread) and, in phases 2 and 3, the
  // in-process hub's io thread.
  outbound::bench::caf_flags caf_opts;
  caf_opts.io_threads = 2;
  caf_opts.add_to(app);
  CLI11_PARSE(app, argc, argv);

  std::vector<std::size_t> ns;
  {
    std::istringstream in{watchers_list};
    for (std::size_t n; in >> n;)
      if (n > 0 && n <= 100000)
        ns.push_back(n);
  }
  ::signal(SIGPIPE, SIG_IGN);
  auto nofile = raise_nofile();

  // Fork the memory phase's hub before any thread exists.
  child_hub ch;
  bool want_mem = phases.find('1') != std::string::npos && !ns.empty();
  bool child_ok = want_mem && ch.start();

  caf::actor_system_config cfg;
  if (!caf_opts.apply(cfg)) {
    ch.stop();
    return 2;
  }
  caf::actor_system sys{cfg};

  std::printf("bench feeds: watchers=[%s] rate=%.0f latency_watchers=%zu "
              "latency_seconds=%.1f catchup_events=%" PRIu64
              " limit=%d max_seconds=%.0f\n",
              watchers_list.c_str(), rate, latency_watchers, latency_seconds,
              catchup_events, limit, max_seconds);
  std::printf("%s; cores %u; load average %s\n", caf_opts.report(sys).c_str(),
              std::thread::hardware_concurrency(),
              outbound::bench::load_average().c_str());
  if (want_mem) {
    if (child_ok)
      phase_memory(sys, ch, ns, max_seconds, nofile, limit, surplus_idle_time);
    else
      std::printf("\n== 1. NOT RUN: the child hub did not start ==\n");
    ch.stop();
  }
  if (phases.find('2') != std::string::npos)
    phase_latency(sys, latency_watchers, rate, latency_seconds, max_seconds,
                  limit, publish_tick_us);
  if (phases.find('3') != std::string::npos)
    phase_catchup(sys, catchup_events, limit, max_seconds, catchup_rounds,
                  catchup_clients);
  sys.await_all_actors_done();
  return 0;
}
