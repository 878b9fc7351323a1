#include "apps/demo_cmd.hpp"

#include "apps/request_cmd.hpp"

#include "actors/call/hedging.hpp"
#include "actors/client/service_client.hpp"
#include "actors/coalesce/coalescing_driver.hpp"
#include "actors/feed/feed_messages.hpp"
#include "actors/feed/feed_watcher.hpp"
#include "actors/hedge/breaker_state.hpp"
#include "actors/hedge/ddsketch.hpp"
#include "actors/hedge/route_table.hpp"
#include "actors/messages.hpp"
#include "actors/metrics/metrics_observer.hpp"
#include "actors/metrics/metrics_poller.hpp"
#include "actors/pool/connection_pool.hpp"
#include "actors/system/system_setup.hpp"
#include "config/coalesce_config.hpp"
#include "config/config_error.hpp"
#include "hub/hub.hpp"
#include "metrics/metrics_exposer.hpp"
#include "metrics/outbound_metrics.hpp"
#include "protocol/errors.hpp"
#include "protocol/io_runner.hpp"
#include "protocol/json_number.hpp"
#include "protocol/ws_session.hpp"

#include <CLI/CLI.hpp>
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <exception>
#include <iomanip>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <sys/resource.h>
#include <thread>
#include <vector>

namespace outbound::apps {

namespace {

using demo_clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

double seconds_since(demo_clock::time_point t0) {
  return std::chrono::duration<double>(demo_clock::now() - t0).count();
}

/// The hedging endpoint name of a route: the path before '?' without the
/// leading '/', '/' → '_' ("/lognormal?x=1" → "lognormal").
std::string endpoint_name(const std::string& route) {
  auto path = route.substr(0, route.find('?'));
  std::string name;
  for (std::size_t i = 1; i < path.size(); ++i)
    name += path[i] == '/' ? '_' : path[i];
  return name.empty() ? "root" : name;
}

/// Splits "/p?a=1&b=2" into the path and its parameters.
void split_route(const std::string& route, std::string& path,
                 std::vector<std::pair<std::string, std::string>>& params) {
  auto q = route.find('?');
  path = route.substr(0, q);
  params.clear();
  if (q == std::string::npos)
    return;
  std::istringstream is{route.substr(q + 1)};
  std::string kv;
  while (std::getline(is, kv, '&')) {
    if (kv.empty())
      continue;
    auto eq = kv.find('=');
    if (eq == std::string::npos)
      params.emplace_back(kv, "");
    else
      params.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
}

/// Latencies of one kind of call: the current status interval and the
/// whole run, in bounded sketches (DDSketch, <= 16 KiB each).
struct latency_book {
  std::mutex mu;
  ddsketch interval;
  ddsketch total;
  uint64_t interval_ok = 0;
  uint64_t interval_failed = 0;
  uint64_t ok = 0;
  uint64_t failed = 0;

  void record(double seconds, bool success) {
    std::lock_guard<std::mutex> lock{mu};
    if (success) {
      interval.insert(seconds);
      total.insert(seconds);
      ++interval_ok;
      ++ok;
    } else {
      ++interval_failed;
      ++failed;
    }
  }

  /// The interval's calls (ok + failed) and p99 (seconds), then a new
  /// interval.
  std::pair<uint64_t, std::optional<double>> take_interval() {
    std::lock_guard<std::mutex> lock{mu};
    auto n = interval_ok + interval_failed;
    auto p99 = interval.quantile(0.99);
    interval.clear();
    interval_ok = interval_failed = 0;
    return {n, p99};
  }
};

/// What the feed callbacks share with the main thread.
struct feed_counters {
  std::atomic<uint64_t> events{0};
  std::atomic<uint64_t> resets{0};
  /// Resets by cause (index: reset_cause, gap is the last).
  std::atomic<uint64_t> by_cause[reset_cause_count] = {};
};

/// Open-loop pacing shared by a pool of worker threads: call n is due at
/// start + n / rate. Returns false when `stop` was set while waiting.
class pacer {
public:
  pacer(double rate, demo_clock::time_point start)
    : rate_(rate), start_(start) {
  }

  bool wait_turn(const std::atomic<bool>& stop) {
    auto n = next_.fetch_add(1);
    auto due = start_
               + std::chrono::duration_cast<demo_clock::duration>(
                 std::chrono::duration<double>(static_cast<double>(n) / rate_));
    while (!stop.load()) {
      auto now = demo_clock::now();
      if (now >= due)
        return true;
      std::this_thread::sleep_for(std::min<demo_clock::duration>(due - now, 50ms));
    }
    return false;
  }

private:
  double rate_;
  demo_clock::time_point start_;
  std::atomic<uint64_t> next_{0};
};

std::string fmt_ms(const std::optional<double>& s) {
  if (!s)
    return "-";
  std::ostringstream os;
  os << std::fixed << std::setprecision(1) << *s * 1000.0 << " ms";
  return os.str();
}

std::string fmt_num(double x, int precision = 1) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(precision) << x;
  return os.str();
}

/// Counts of breaker phases over the client's breakers.
struct breaker_counts {
  int closed = 0;
  int open = 0;
  int half_open = 0;
  std::vector<std::string> open_keys;

  std::string str() const {
    std::string s = "closed " + std::to_string(closed);
    if (open > 0) {
      s += " open " + std::to_string(open) + " (";
      for (std::size_t i = 0; i < open_keys.size(); ++i)
        s += (i ? "," : "") + open_keys[i];
      s += ")";
    }
    if (half_open > 0)
      s += " half_open " + std::to_string(half_open);
    return s;
  }
};

/// One row of the report table.
void row(std::ostream& out, const std::string& k, const std::string& v) {
  out << std::left << std::setw(28) << k << ' ' << v << '\n';
}

/// Blocks SIGINT and SIGTERM in the calling thread and in every thread it
/// starts afterwards; sigtimedwait below receives them.
sigset_t block_stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

/// Waits up to `seconds` for SIGINT/SIGTERM; true when one arrived.
bool wait_for_stop_signal(const sigset_t& set, double seconds) {
  if (seconds <= 0)
    return false;
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(seconds);
  ts.tv_nsec = static_cast<long>((seconds - std::floor(seconds)) * 1e9);
  for (;;) {
    int sig = sigtimedwait(&set, nullptr, &ts);
    if (sig == SIGINT || sig == SIGTERM)
      return true;
    if (sig < 0 && errno == EINTR)
      continue; // another signal; the remaining time is not tracked (short)
    return false;
  }
}

} // namespace

CLI::App* add_demo_command(CLI::App& app, demo_options& opts) {
  auto* cmd = app.add_subcommand(
    "demo", "Run the main job on an embedded hub: hedged service calls, a "
            "coalescing driver and N feed watchers, with /metrics");
  cmd->footer(
    "Output: the first stdout line is {\"metrics\":URL,\"hub\":URL,...}; a "
    "status line per second on stderr; a report table on stdout at the "
    "end.\nEnds after --duration seconds or on SIGINT/SIGTERM, exit 0.\n"
    "Exit codes: 0 ok, 2 usage/config_error (--oracle-endpoints without "
    "--hub, too), 7 service_unavailable (--hub: nothing was reached, no "
    "publish, call, timestamp or feed; one error line on stderr after the "
    "report), 1 internal_error or hub_error (the embedded hub cannot "
    "start).");
  cmd->add_option("--config", opts.config_file,
                  "JSON settings (deploy/demo.example.json); the options "
                  "below override it");
  opts.feeds_opt
    = cmd->add_option("--feeds", opts.feeds, "Feed watchers over the tiers")
        ->capture_default_str();
  opts.duration_opt
    = cmd->add_option("--duration", opts.duration, "Run time in seconds")
        ->capture_default_str();
  opts.rate_opt
    = cmd->add_option("--rate", opts.rate, "Events published per second")
        ->capture_default_str();
  opts.metrics_port_opt
    = cmd
        ->add_option("--metrics-port", opts.metrics_port,
                     "Port of GET /metrics on 127.0.0.1 (0: pick one)")
        ->capture_default_str();
  opts.hub_opt = cmd->add_option(
    "--hub", opts.hub,
    "Use the hub at this base URL instead of the embedded one");
  opts.oracle_opt = cmd->add_option(
    "--oracle-endpoints", opts.oracle_endpoints,
    "Only with --hub (the embedded hub runs its own cluster): the "
    "external oracle cluster's host:port list (none: no oracle traffic)")
                      ->delimiter(',');
  return cmd;
}

demo_config resolve_demo_config(const demo_options& opts) {
  demo_config c;
  if (!opts.config_file.empty())
    c = load_demo_config(opts.config_file);
  auto given = [](CLI::Option* o) { return o && o->count() > 0; };
  if (given(opts.feeds_opt))
    c.feeds = opts.feeds;
  if (given(opts.duration_opt))
    c.duration = opts.duration;
  if (given(opts.rate_opt))
    c.rate = opts.rate;
  if (given(opts.metrics_port_opt))
    c.metrics_port = opts.metrics_port;
  if (given(opts.hub_opt)) {
    // Checked here so the error names the option the user typed.
    if (!opts.hub.empty())
      (void)url_parts::parse(opts.hub, "--hub");
    c.hub = opts.hub;
  }
  if (given(opts.oracle_opt))
    c.oracle_endpoints = opts.oracle_endpoints;
  c.validate();
  return c;
}

int run_demo(const demo_options& opts, std::ostream& out, std::ostream& err) {
  demo_config cfg;
  try {
    cfg = resolve_demo_config(opts);
  } catch (const config_error& e) {
    err << usage_error_json("config_error", e.what()) << '\n';
    return usage_exit_code;
  }
  // The embedded hub brings its own oracle cluster: endpoints typed for it
  // would be ignored, and the user would not know.
  if (opts.oracle_opt && opts.oracle_opt->count() > 0 && cfg.hub.empty()) {
    err << usage_error_json("usage_error",
                            "--oracle-endpoints needs --hub (or \"hub\" in "
                            "--config): the embedded hub runs its own "
                            "oracle cluster")
        << '\n';
    return usage_exit_code;
  }
  // Every watcher holds a WebSocket (and the embedded hub its other end):
  // allow as many descriptors as the hard limit permits.
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
  // Before any thread exists: every thread inherits the mask, and only the
  // main loop's sigtimedwait takes SIGINT/SIGTERM.
  auto sigs = block_stop_signals();

  // -- the hub ---------------------------------------------------------------
  std::unique_ptr<hub> embedded;
  std::string base_url = cfg.hub;
  std::vector<std::string> oracle_nodes = cfg.oracle_endpoints;
  std::string oracle_source = "external";
  try {
    if (cfg.hub.empty()) {
      hub_config hc;
      hc.threads = 2;
      hc.cluster_size = cfg.cluster_size;
      hc.retention = cfg.hub_retention;
      hc.seed = 6;
      embedded = std::make_unique<hub>(hc);
      embedded->start();
      base_url = embedded->base_url();
      oracle_nodes = embedded->oracle_endpoints();
      oracle_source = "embedded";
    } else if (oracle_nodes.empty()) {
      oracle_source = "skipped";
    }
  } catch (const config_error& e) {
    err << usage_error_json("config_error", e.what()) << '\n';
    return usage_exit_code;
  } catch (const std::exception& e) {
    err << usage_error_json("hub_error", e.what()) << '\n';
    return internal_exit_code;
  }

  // -- metrics ---------------------------------------------------------------
  metrics_limits limits;
  limits.max_labelled_feeds = cfg.max_labelled_feeds;
  auto registry = std::make_shared<metrics_registry>(limits);
  std::unique_ptr<metrics_exposer> exposer;
  try {
    exposer = std::make_unique<metrics_exposer>(
      registry, static_cast<uint16_t>(cfg.metrics_port));
  } catch (const config_error& e) {
    err << usage_error_json("config_error", e.what()) << '\n';
    return usage_exit_code;
  } catch (const std::exception& e) {
    err << usage_error_json("metrics_error", e.what()) << '\n';
    return internal_exit_code;
  }
  // The demo's own families: what it published and the hub's ledger head,
  // so that a feed's lag (head - outbound_feed_position) can be computed.
  auto& published_family = prometheus::BuildCounter()
                             .Name("outbound_demo_events_published_total")
                             .Help("Events the demo published to the hub")
                             .Register(*registry->registry());
  auto& published_counter = published_family.Add({});
  auto& head_family = prometheus::BuildGauge()
                        .Name("outbound_demo_hub_cursor")
                        .Help("Id of the last event the demo published (the "
                              "hub's ledger head)")
                        .Register(*registry->registry());
  auto& head_gauge = head_family.Add({});

  int rc = 0;
  try {
    caf::actor_system_config sc;
    system_options so;
    // The embedded hub's 2 io threads keep their cores; outbound's sockets
    // run on the CAF workers (the recommended io_loop policy).
    so.io_threads = embedded ? 2 : 0;
    configure(sc, so);
    caf::actor_system sys{sc};
    auto io = io_runner_for(sys);

    // -- the hedging service client ----------------------------------------
    client_config cc;
    cc.base_url = base_url;
    cc.timeout = cfg.traffic.timeout;
    cc.deadline = cfg.traffic.deadline;
    cc.retry.max_attempts = 2;
    // The pools are the demo's own (client_options::transport), so that it
    // can export their counters and stop them at the end.
    auto demo_pool = spawn_connection_pool(sys, cc, io);
    client_options co;
    co.io = io;
    co.transport = demo_pool;
    co.observer = spawn_metrics_observer(sys, registry->client("demo"));
    hedging_options ho;
    ho.config = cfg.hedging;
    std::vector<std::string> endpoint_keys;
    for (const auto& r : cfg.traffic.routes) {
      auto name = endpoint_name(r);
      if (std::find(endpoint_keys.begin(), endpoint_keys.end(),
                    "endpoint:" + name)
          != endpoint_keys.end())
        continue;
      std::string path;
      std::vector<std::pair<std::string, std::string>> params;
      split_route(r, path, params);
      ho.routes.register_route("GET", path, endpoint_config{}, name);
      endpoint_keys.push_back("endpoint:" + name);
    }
    co.hedging = std::move(ho);
    auto client = make_service_client(sys, cc, co);
    auto parsed = cc.parsed_url();
    auto host_key = route_table::host_key(parsed.host, parsed.port);

    // -- the feeds' client (replay GETs, publishing to an external hub) ---
    client_config fcc;
    fcc.base_url = base_url;
    fcc.timeout = 10.0;
    fcc.deadline = 20.0;
    auto feed_pool = spawn_connection_pool(sys, fcc, io);
    client_options fco;
    fco.io = io;
    fco.transport = feed_pool;
    fco.observer = spawn_metrics_observer(sys, registry->client("feeds"));
    auto feed_client = make_service_client(sys, fcc, fco);
    auto connector = make_ws_connector(io);
    auto ws = feed_ws_endpoint::from(fcc);

    // -- the coalescing driver ----------------------------------------------
    coalescing_driver_actor driver;
    if (!oracle_nodes.empty()) {
      coalesce_config kc;
      kc.endpoints = oracle_nodes;
      coalesce_options ko;
      ko.io = io;
      driver = make_coalescing_driver(sys, kc, ko);
    }

    // -- the metrics poller ---------------------------------------------------
    auto poller = spawn_metrics_poller(sys, registry->collector());
    caf::anon_send(poller, metrics_watch_client{"demo", client});
    caf::anon_send(poller, metrics_watch_pool{"demo", demo_pool});
    caf::anon_send(poller, metrics_watch_pool{"feeds", feed_pool});
    if (driver)
      caf::anon_send(poller, metrics_watch_coalescer{"oracle", driver});

    // -- feed watchers --------------------------------------------------------
    auto counters = std::make_shared<feed_counters>();
    struct tier {
      const char* name;
      feed_mode mode;
      bool replay;
      const char* ws_path;
    };
    const tier tiers[] = {{"ledger", feed_mode::ledger, true, "/ws/ledger"},
                          {"catchup", feed_mode::catchup, false, "/ws/catchup"},
                          {"ephemeral", feed_mode::ephemeral, false,
                           "/ws/ephemeral"}};
    std::vector<feed_watcher_actor> watchers;
    watchers.reserve(cfg.feeds);
    std::size_t per_tier[3] = {0, 0, 0};
    for (std::size_t i = 0; i < cfg.feeds; ++i) {
      const auto& t = tiers[i % 3];
      ++per_tier[i % 3];
      feed_config fc;
      if (t.replay)
        fc.replay_path = "/v1/events";
      fc.ws_path = t.ws_path;
      fc.prefixes = {"demo/" + std::to_string(i % cfg.subject_groups) + "/"};
      fc.ws_handshake_timeout = 30.0;
      fc.reconnect_max_backoff = 5.0;
      feed_watcher_options wo;
      wo.client = feed_client;
      wo.connector = connector;
      wo.ws = ws;
      wo.seed = i + 1;
      wo.callbacks.detached = false;
      wo.callbacks.on_event = [counters](const feed_event&) {
        counters->events.fetch_add(1, std::memory_order_relaxed);
      };
      wo.callbacks.on_reset = [counters](const feed_reset& r) {
        counters->resets.fetch_add(1, std::memory_order_relaxed);
        auto c = static_cast<std::size_t>(r.cause);
        if (c < std::size(counters->by_cause))
          counters->by_cause[c].fetch_add(1, std::memory_order_relaxed);
      };
      auto w = spawn_feed_watcher(sys, fc, std::move(wo));
      caf::anon_send(poller, metrics_watch_feed{"feed-" + std::to_string(i),
                                                t.mode, w});
      watchers.push_back(std::move(w));
    }

    // The first line: where to scrape, what runs.
    {
      boost::json::object line;
      line["metrics"] = exposer->url();
      line["hub"] = base_url;
      line["hub_mode"] = embedded ? "embedded" : "external";
      boost::json::array nodes;
      for (const auto& n : oracle_nodes)
        nodes.emplace_back(n);
      line["oracle"] = std::move(nodes);
      line["oracle_mode"] = oracle_source;
      line["feeds"] = cfg.feeds;
      // Read by people too: `"duration":60`, not Boost.JSON's `6E1`.
      line["duration"] = json_number(cfg.duration);
      line["rate"] = json_number(cfg.rate);
      out << boost::json::serialize(line) << std::endl; // flushed
    }

    // -- traffic ------------------------------------------------------------
    std::atomic<bool> stopping{false};
    auto t0 = demo_clock::now();
    latency_book requests_book;
    latency_book ts_book;
    std::unique_ptr<pacer> request_pacer;
    std::unique_ptr<pacer> ts_pacer;
    std::atomic<uint64_t> published{0};
    std::atomic<uint64_t> publish_failed{0};
    std::vector<std::thread> threads;
    // Joins the traffic threads on every way out of this block (an
    // exception included: a joinable std::thread would terminate).
    struct joiner {
      std::atomic<bool>& stop;
      std::vector<std::thread>& ts;
      ~joiner() {
        stop.store(true);
        for (auto& t : ts)
          if (t.joinable())
            t.join();
      }
    } join_traffic{stopping, threads};
    if (cfg.rate > 0) {
      threads.emplace_back([&] {
        pacer p{cfg.rate, t0};
        caf::scoped_actor self{sys};
        uint64_t n = 0;
        while (p.wait_turn(stopping)) {
          auto subject = "demo/" + std::to_string(n % cfg.subject_groups) + "/"
                         + std::to_string(n);
          auto meta = "{\"n\":" + std::to_string(n) + "}";
          ++n;
          if (embedded) {
            try {
              auto r = embedded->publish(subject, "tick", meta);
              head_gauge.Set(static_cast<double>(r.id));
              published.fetch_add(1);
              published_counter.Increment();
            } catch (const std::exception&) {
              publish_failed.fetch_add(1);
            }
            continue;
          }
          call_request req;
          req.method = "POST";
          req.path = "/v1/events";
          boost::json::object body;
          body["subject"] = subject;
          body["kind"] = "tick";
          // The metadata text is spliced in as written, not re-serialised.
          req.body = boost::json::serialize(body);
          req.body.pop_back();
          req.body += ",\"metadata\":" + meta + "}";
          req.has_body = true;
          req.headers.emplace_back("content-type", "application/json");
          bool ok = false;
          self->request(feed_client, 25s, std::move(req))
            .receive(
              [&](call_outcome& o) {
                ok = o.ok();
                if (ok && o.body.is_object())
                  if (auto* id = o.body.as_object().if_contains("id");
                      id && id->is_int64()) {
                    head_gauge.Set(static_cast<double>(id->get_int64()));
                  }
              },
              [](caf::error&) {});
          if (ok) {
            published.fetch_add(1);
            published_counter.Increment();
          } else {
            publish_failed.fetch_add(1);
          }
        }
      });
    }
    if (cfg.traffic.requests_per_second > 0) {
      request_pacer
        = std::make_unique<pacer>(cfg.traffic.requests_per_second, t0);
      for (std::size_t w = 0; w < cfg.traffic.concurrency; ++w)
        threads.emplace_back([&, w] {
          caf::scoped_actor self{sys};
          auto deadline = std::chrono::duration_cast<caf::timespan>(
            std::chrono::duration<double>(cfg.traffic.deadline + 5.0));
          std::size_t k = w;
          while (request_pacer->wait_turn(stopping)) {
            const auto& route = cfg.traffic.routes[k++ % cfg.traffic.routes.size()];
            call_request req;
            split_route(route, req.path, req.params);
            auto s = demo_clock::now();
            bool ok = false;
            self->request(client, deadline, std::move(req))
              .receive([&](call_outcome& o) { ok = o.ok(); },
                       [](caf::error&) {});
            requests_book.record(seconds_since(s), ok);
          }
        });
    }
    if (driver && cfg.oracle.calls_per_second > 0) {
      ts_pacer = std::make_unique<pacer>(cfg.oracle.calls_per_second, t0);
      for (std::size_t w = 0; w < cfg.oracle.callers; ++w)
        threads.emplace_back([&] {
          caf::scoped_actor self{sys};
          auto deadline = std::chrono::duration_cast<caf::timespan>(
            std::chrono::duration<double>(cfg.oracle.timeout + 5.0));
          while (ts_pacer->wait_turn(stopping)) {
            ts_call call;
            call.count = cfg.oracle.count;
            call.timeout = cfg.oracle.timeout;
            auto s = demo_clock::now();
            bool ok = false;
            self->request(driver, deadline, call)
              .receive([&](coalesce_reply& r) { ok = !r.error; },
                       [](caf::error&) {});
            ts_book.record(seconds_since(s), ok);
          }
        });
    }

    // -- the live status -------------------------------------------------------
    // Reset before the exit settles: a scoped actor counts as running.
    std::optional<caf::scoped_actor> self_holder{std::in_place, sys};
    auto& self = *self_holder;
    hedging_handles handles;
    self->request(client, 5s, hedging_handles_request{})
      .receive([&](hedging_handles& h) { handles = h; }, [](caf::error&) {});
    auto hedge_stats = [&] {
      hedge_stats_snapshot s;
      if (handles.stats)
        self->request(handles.stats, 2s, hedge_global_stats_request{})
          .receive([&](hedge_stats_snapshot& x) { s = x; },
                   [](caf::error&) {});
      return s;
    };
    auto breakers = [&] {
      breaker_counts c;
      if (!handles.breakers)
        return c;
      auto one = [&](breaker_scope scope, const std::string& key) {
        auto phase = breaker_phase::closed;
        self->request(handles.breakers, 2s, breaker_snapshot_request{scope, key})
          .receive(
            [&](breaker_snapshot_reply& r) {
              if (r.snapshot)
                phase = r.snapshot->phase;
            },
            [](caf::error&) {});
        if (phase == breaker_phase::open) {
          ++c.open;
          c.open_keys.push_back(key);
        } else if (phase == breaker_phase::half_open) {
          ++c.half_open;
        } else {
          ++c.closed;
        }
      };
      one(breaker_scope::host, host_key);
      for (const auto& k : endpoint_keys)
        one(breaker_scope::endpoint, k);
      return c;
    };
    auto connected_feeds = [&] {
      std::size_t n = 0;
      std::vector<decltype(self->request(watchers[0], 2s, stats_atom_v))> hs;
      hs.reserve(watchers.size());
      for (auto& w : watchers)
        hs.push_back(self->request(w, 2s, stats_atom_v));
      for (auto& h : hs)
        h.receive(
          [&](feed_stats& s) {
            if (s.connected)
              ++n;
          },
          [](caf::error&) {});
      return n;
    };

    bool signalled = false;
    uint64_t last_events = 0;
    auto last_hedge = hedge_stats();
    auto last_tick = demo_clock::now();
    for (int tick = 1;; ++tick) {
      auto next = t0 + std::chrono::duration_cast<demo_clock::duration>(
                         std::chrono::duration<double>(tick * cfg.status_interval));
      auto end = t0 + std::chrono::duration_cast<demo_clock::duration>(
                        std::chrono::duration<double>(cfg.duration));
      auto until = std::min(next, end);
      auto wait = std::chrono::duration<double>(until - demo_clock::now()).count();
      if (wait_for_stop_signal(sigs, wait)) {
        signalled = true;
        break;
      }
      auto now = demo_clock::now();
      if (now >= end)
        break;
      auto dt = std::chrono::duration<double>(now - last_tick).count();
      last_tick = now;
      auto events = counters->events.load();
      auto [reqs, p99] = requests_book.take_interval();
      auto [ts_calls, ts_p99] = ts_book.take_interval();
      auto hs = hedge_stats();
      auto planned = hs.total_requests - last_hedge.total_requests;
      auto hedged = hs.hedged_requests - last_hedge.hedged_requests;
      last_hedge = hs;
      std::ostringstream line;
      line << "demo " << fmt_num(seconds_since(t0), 0) << "s: events "
           << events << " (+" << fmt_num(double(events - last_events) / dt, 0)
           << "/s) resets " << counters->resets.load() << " connected "
           << connected_feeds() << "/" << watchers.size() << " | requests "
           << fmt_num(double(reqs) / dt, 0) << "/s hedged "
           << fmt_num(planned ? 100.0 * double(hedged) / double(planned) : 0.0)
           << "% p99 " << fmt_ms(p99) << " | breakers " << breakers().str()
           << " | ts " << fmt_num(double(ts_calls) / dt, 0) << "/s p99 "
           << fmt_ms(ts_p99);
      err << line.str() << std::endl;
      last_events = events;
    }
    auto run_seconds = seconds_since(t0);

    // -- stop -------------------------------------------------------------------
    // A second Ctrl-C while stopping ends the process the default way.
    pthread_sigmask(SIG_UNBLOCK, &sigs, nullptr);
    stopping.store(true);
    for (auto& t : threads)
      if (t.joinable())
        t.join();
    // One last snapshot into the collector, so a final scrape sees the end.
    self->request(poller, 10s, poll_atom_v)
      .receive([](metrics_poll_report&) {}, [](caf::error&) {});
    auto final_hedge = hedge_stats();
    auto final_breakers = breakers();
    std::optional<coalesce_stats> cstats;
    if (driver)
      self->request(driver, 5s, stats_atom_v)
        .receive([&](coalesce_stats& s) { cstats = s; }, [](caf::error&) {});
    // Stop the watchers, collecting their final counters.
    uint64_t reconnects = 0, peer_timeouts = 0, overflows = 0,
             drain_errors = 0, replay_errors = 0;
    std::size_t connected_at_end = 0, feeds_reached = 0;
    {
      std::vector<decltype(self->request(watchers[0], 10s, stop_atom_v))> hs;
      for (auto& w : watchers)
        hs.push_back(self->request(w, 10s, stop_atom_v));
      for (auto& h : hs)
        h.receive(
          [&](feed_stats& s) {
            reconnects += s.reconnects;
            peer_timeouts += s.peer_timeouts;
            overflows += s.overflows;
            drain_errors += s.drain_errors;
            replay_errors += s.replay_errors;
            if (s.connected)
              ++connected_at_end;
            if (s.reached)
              ++feeds_reached;
          },
          [](caf::error&) {});
    }
    watchers.clear();
    self->send_exit(poller, caf::exit_reason::user_shutdown);
    if (driver)
      self->send_exit(driver, caf::exit_reason::user_shutdown);
    self->send_exit(client, caf::exit_reason::user_shutdown);
    self->send_exit(feed_client, caf::exit_reason::user_shutdown);
    // The clients do not stop what they were given or spawned: the pools,
    // the observers and the hedging actors.
    self->send_exit(demo_pool, caf::exit_reason::user_shutdown);
    self->send_exit(feed_pool, caf::exit_reason::user_shutdown);
    self->send_exit(co.observer, caf::exit_reason::user_shutdown);
    self->send_exit(fco.observer, caf::exit_reason::user_shutdown);
    if (handles.stats)
      self->send_exit(handles.stats, caf::exit_reason::user_shutdown);
    if (handles.breakers)
      self->send_exit(handles.breakers, caf::exit_reason::user_shutdown);

    // -- the report ---------------------------------------------------------------
    uint64_t req_ok = 0, req_failed = 0, ts_ok = 0, ts_failed = 0;
    std::optional<double> req_p50, req_p99, req_max, ts_p50, ts_p99;
    {
      std::lock_guard<std::mutex> lock{requests_book.mu};
      req_ok = requests_book.ok;
      req_failed = requests_book.failed;
      req_p50 = requests_book.total.quantile(0.5);
      req_p99 = requests_book.total.quantile(0.99);
      req_max = requests_book.total.max();
    }
    {
      std::lock_guard<std::mutex> lock{ts_book.mu};
      ts_ok = ts_book.ok;
      ts_failed = ts_book.failed;
      ts_p50 = ts_book.total.quantile(0.5);
      ts_p99 = ts_book.total.quantile(0.99);
    }
    auto per_s = [&](uint64_t n) {
      return fmt_num(run_seconds > 0 ? double(n) / run_seconds : 0.0);
    };
    out << "\noutbound demo report\n";
    row(out, "metric", "value");
    row(out, "----------------------------", "-----");
    row(out, "run_seconds", fmt_num(run_seconds) + (signalled ? " (signal)" : ""));
    row(out, "hub", base_url + (embedded ? " (embedded)" : " (external)"));
    row(out, "metrics", exposer->url());
    row(out, "feeds",
        std::to_string(cfg.feeds) + " (ledger " + std::to_string(per_tier[0])
          + ", catchup " + std::to_string(per_tier[1]) + ", ephemeral "
          + std::to_string(per_tier[2]) + ")");
    row(out, "feeds_connected_at_end", std::to_string(connected_at_end));
    row(out, "events_published",
        std::to_string(published.load()) + " (" + per_s(published.load())
          + "/s, failed " + std::to_string(publish_failed.load()) + ")");
    row(out, "events_delivered",
        std::to_string(counters->events.load()) + " ("
          + per_s(counters->events.load()) + "/s)");
    {
      // A catchup watcher's first subscribe is a resync, an ephemeral
      // watcher's first connect a reconnect: both are resets by design.
      std::string causes;
      for (std::size_t c = 0; c < std::size(counters->by_cause); ++c)
        if (auto n = counters->by_cause[c].load(); n > 0)
          causes += (causes.empty() ? "" : ", ")
                    + std::string{to_string(static_cast<reset_cause>(c))} + " "
                    + std::to_string(n);
      row(out, "feed_resets",
          std::to_string(counters->resets.load())
            + (causes.empty() ? "" : " (" + causes + ")"));
    }
    row(out, "feed_reconnects", std::to_string(reconnects));
    row(out, "feed_peer_timeouts", std::to_string(peer_timeouts));
    row(out, "feed_overflows", std::to_string(overflows));
    row(out, "feed_drain_errors",
        std::to_string(drain_errors) + " (replay errors "
          + std::to_string(replay_errors) + ")");
    row(out, "requests",
        std::to_string(req_ok + req_failed) + " (" + per_s(req_ok + req_failed)
          + "/s, failed " + std::to_string(req_failed) + ")");
    row(out, "request_latency",
        "p50 " + fmt_ms(req_p50) + ", p99 " + fmt_ms(req_p99) + ", max "
          + fmt_ms(req_max));
    row(out, "hedged",
        std::to_string(final_hedge.hedged_requests) + " of "
          + std::to_string(final_hedge.total_requests) + " ("
          + fmt_num(final_hedge.total_requests
                      ? 100.0 * double(final_hedge.hedged_requests)
                          / double(final_hedge.total_requests)
                      : 0.0)
          + "%), won " + std::to_string(final_hedge.hedge_wins)
          + ", budget exhausted "
          + std::to_string(final_hedge.budget_exhausted));
    row(out, "breakers", final_breakers.str());
    if (driver) {
      row(out, "ts_calls",
          std::to_string(ts_ok + ts_failed) + " (" + per_s(ts_ok + ts_failed)
            + "/s, failed " + std::to_string(ts_failed) + ")");
      row(out, "ts_latency", "p50 " + fmt_ms(ts_p50) + ", p99 " + fmt_ms(ts_p99));
      if (cstats)
        row(out, "ts_rpcs",
            std::to_string(cstats->batches.rpcs) + " (mean batch "
              + fmt_num(cstats->batches.rpcs
                          ? double(cstats->batches.joined)
                              / double(cstats->batches.rpcs)
                          : 0.0)
              + ", leader changes " + std::to_string(cstats->leader_changes)
              + ")");
    } else {
      row(out, "ts_calls", "skipped (no oracle endpoints)");
    }
    out << std::flush;
    // An external hub that never answered (a dead address, a wrong port):
    // the report is all zeros, and a script must not take it for a run.
    if (!embedded && published.load() == 0 && req_ok == 0 && ts_ok == 0
        && feeds_reached == 0 && counters->events.load() == 0) {
      // Not a usage error's line: the demo did try (attempts counts the
      // publishes, calls and timestamps that failed), and it cannot promise
      // that none of them left, so nothing_sent / nothing_billed are false;
      // "reached":false is what happened.
      auto tried = publish_failed.load() + req_failed + ts_failed;
      boost::json::object line;
      line["error"] = to_string(error_kind::service_unavailable);
      line["status"] = nullptr;
      line["detail"] =
        "nothing at --hub " + base_url + " was reached: no event published ("
        + std::to_string(publish_failed.load()) + " failed), no call "
        + "answered (" + std::to_string(req_failed) + " failed), no feed "
        + "reached"
        + (driver ? ", no timestamp served (" + std::to_string(ts_failed)
                      + " failed)"
                  : "");
      line["attempts"] = tried;
      line["request_id"] = "";
      line["nothing_sent"] = false;
      line["nothing_billed"] = false;
      line["reached"] = false;
      err << boost::json::serialize(line) << '\n';
      rc = exit_code(error_kind::service_unavailable);
    }

    // Release every handle, give the actors a moment, and do not wait for
    // a call stuck on an unresponsive external server.
    handles = {};
    driver = nullptr;
    client = nullptr;
    feed_client = nullptr;
    poller = nullptr;
    demo_pool = nullptr;
    feed_pool = nullptr;
    co = {};
    fco = {};
    self_holder.reset();
    auto settle = demo_clock::now() + 2s;
    while (sys.registry().running() > 0 && demo_clock::now() < settle)
      std::this_thread::sleep_for(10ms);
    if (sys.registry().running() > 0)
      sys.await_actors_before_shutdown(false);
  } catch (const config_error& e) {
    err << usage_error_json("config_error", e.what()) << '\n';
    rc = usage_exit_code;
  } catch (const std::exception& e) {
    err << usage_error_json("internal_error", e.what()) << '\n';
    rc = internal_exit_code;
  }
  if (embedded)
    embedded->stop();
  return rc;
}

} // namespace outbound::apps
