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
#include "actors/system/service_stack.hpp"
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

namespace {

/// Where the demo's traffic goes: the embedded hub (started here) or an
/// external one.
struct hub_site {
  std::unique_ptr<hub> embedded;
  std::string base_url;
  std::vector<std::string> oracle_nodes;
  /// "embedded", "external" or "skipped" (an external hub, no oracle).
  std::string oracle_source = "external";
};

/// Starts the embedded hub (with its oracle cluster) unless `cfg.hub` names
/// an external one. Throws what the hub throws.
hub_site open_hub(const demo_config& cfg) {
  hub_site s;
  s.base_url = cfg.hub;
  s.oracle_nodes = cfg.oracle_endpoints;
  if (cfg.hub.empty()) {
    hub_config hc;
    hc.threads = 2;
    hc.cluster_size = cfg.cluster_size;
    hc.retention = cfg.hub_retention;
    hc.seed = 6;
    s.embedded = std::make_unique<hub>(hc);
    s.embedded->start();
    s.base_url = s.embedded->base_url();
    s.oracle_nodes = s.embedded->oracle_endpoints();
    s.oracle_source = "embedded";
  } else if (s.oracle_nodes.empty()) {
    s.oracle_source = "skipped";
  }
  return s;
}

/// Every watcher holds a WebSocket (and the embedded hub its other end):
/// allow as many descriptors as the hard limit permits.
void raise_descriptor_limit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
}

/// The demo's own families: what it published and the hub's ledger head,
/// so that a feed's lag (head - outbound_feed_position) can be computed.
struct demo_families {
  explicit demo_families(metrics_registry& r)
    : published(prometheus::BuildCounter()
                  .Name("outbound_demo_events_published_total")
                  .Help("Events the demo published to the hub")
                  .Register(*r.registry())
                  .Add({})),
      head(prometheus::BuildGauge()
             .Name("outbound_demo_hub_cursor")
             .Help("Id of the last event the demo published (the hub's "
                   "ledger head)")
             .Register(*r.registry())
             .Add({})) {
  }

  prometheus::Counter& published;
  prometheus::Gauge& head;
};

/// The demo's service stack: a client hedging the latency routes (one
/// endpoint key per route path, listed in `endpoint_keys`), the feeds'
/// client and the coalescing driver on the oracle nodes, all exported.
service_stack_options demo_stack(const demo_config& cfg, const hub_site& site,
                                 std::shared_ptr<metrics_registry> registry,
                                 std::vector<std::string>& endpoint_keys) {
  service_stack_options o;
  o.name = "demo";
  o.client.base_url = site.base_url;
  o.client.timeout = cfg.traffic.timeout;
  o.client.deadline = cfg.traffic.deadline;
  o.client.retry.max_attempts = 2;
  hedging_options ho;
  ho.config = cfg.hedging;
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
  o.hedging = std::move(ho);
  client_config feeds;
  feeds.base_url = site.base_url;
  feeds.timeout = 10.0;
  feeds.deadline = 20.0;
  o.feeds = std::move(feeds);
  o.feeds_name = "feeds";
  if (!site.oracle_nodes.empty()) {
    coalesce_config kc;
    kc.endpoints = site.oracle_nodes;
    o.oracle = std::move(kc);
  }
  o.metrics = std::move(registry);
  return o;
}

/// Spawns cfg.feeds watchers, round-robin over the three tiers of the hub,
/// each following one subject group; counts them per tier.
void start_feeds(service_stack& stack, const demo_config& cfg,
                 const std::shared_ptr<feed_counters>& counters,
                 std::size_t (&per_tier)[3]) {
  struct tier {
    feed_mode mode;
    bool replay;
    const char* ws_path;
  };
  const tier tiers[] = {{feed_mode::ledger, true, "/ws/ledger"},
                        {feed_mode::catchup, false, "/ws/catchup"},
                        {feed_mode::ephemeral, false, "/ws/ephemeral"}};
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
    feed_callbacks cbs;
    cbs.detached = false;
    cbs.on_event = [counters](const feed_event&) {
      counters->events.fetch_add(1, std::memory_order_relaxed);
    };
    cbs.on_reset = [counters](const feed_reset& r) {
      counters->resets.fetch_add(1, std::memory_order_relaxed);
      auto c = static_cast<std::size_t>(r.cause);
      if (c < std::size(counters->by_cause))
        counters->by_cause[c].fetch_add(1, std::memory_order_relaxed);
    };
    stack.watch("feed-" + std::to_string(i), std::move(fc), std::move(cbs),
                i + 1, t.mode);
  }
}

/// The first line: where to scrape, what runs.
void print_first_line(std::ostream& out, const std::string& metrics_url,
                      const hub_site& site, const demo_config& cfg) {
  boost::json::object line;
  line["metrics"] = metrics_url;
  line["hub"] = site.base_url;
  line["hub_mode"] = site.embedded ? "embedded" : "external";
  boost::json::array nodes;
  for (const auto& n : site.oracle_nodes)
    nodes.emplace_back(n);
  line["oracle"] = std::move(nodes);
  line["oracle_mode"] = site.oracle_source;
  line["feeds"] = cfg.feeds;
  // Read by people too: `"duration":60`, not Boost.JSON's `6E1`.
  line["duration"] = json_number(cfg.duration);
  line["rate"] = json_number(cfg.rate);
  out << boost::json::serialize(line) << std::endl; // flushed
}

/// The demo's load: a publisher at cfg.rate, request workers at
/// traffic.requests_per_second, timestamp callers at
/// oracle.calls_per_second, each an open loop on its own thread. The
/// destructor stops and joins them on every way out (an exception
/// included: a joinable std::thread would terminate).
class demo_traffic {
public:
  demo_traffic(const demo_config& cfg, caf::actor_system& sys,
               service_stack& stack, hub* embedded, demo_families& families)
    : cfg_(cfg), sys_(sys), stack_(stack), embedded_(embedded),
      families_(families) {
  }

  ~demo_traffic() {
    join();
  }

  demo_traffic(const demo_traffic&) = delete;
  demo_traffic& operator=(const demo_traffic&) = delete;

  void start() {
    t0 = demo_clock::now();
    if (cfg_.rate > 0)
      threads_.emplace_back([this] { publish_loop(); });
    if (cfg_.traffic.requests_per_second > 0) {
      request_pacer_
        = std::make_unique<pacer>(cfg_.traffic.requests_per_second, t0);
      for (std::size_t w = 0; w < cfg_.traffic.concurrency; ++w)
        threads_.emplace_back([this, w] { request_loop(w); });
    }
    if (stack_.driver() && cfg_.oracle.calls_per_second > 0) {
      ts_pacer_ = std::make_unique<pacer>(cfg_.oracle.calls_per_second, t0);
      for (std::size_t w = 0; w < cfg_.oracle.callers; ++w)
        threads_.emplace_back([this] { ts_loop(); });
    }
  }

  void join() {
    stopping_.store(true);
    for (auto& t : threads_)
      if (t.joinable())
        t.join();
  }

  demo_clock::time_point t0 = demo_clock::now();
  latency_book requests;
  latency_book ts;
  std::atomic<uint64_t> published{0};
  std::atomic<uint64_t> publish_failed{0};

private:
  void publish_loop() {
    pacer p{cfg_.rate, t0};
    caf::scoped_actor self{sys_};
    uint64_t n = 0;
    while (p.wait_turn(stopping_)) {
      auto subject = "demo/" + std::to_string(n % cfg_.subject_groups) + "/"
                     + std::to_string(n);
      auto meta = "{\"n\":" + std::to_string(n) + "}";
      ++n;
      std::optional<int64_t> id = embedded_
                                    ? publish_embedded(subject, meta)
                                    : publish_external(self, subject, meta);
      if (!id) {
        publish_failed.fetch_add(1);
        continue;
      }
      if (*id > 0)
        families_.head.Set(static_cast<double>(*id));
      published.fetch_add(1);
      families_.published.Increment();
    }
  }

  /// The new event's id, or nullopt when the publish failed.
  std::optional<int64_t> publish_embedded(const std::string& subject,
                                          const std::string& meta) {
    try {
      return embedded_->publish(subject, "tick", meta).id;
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }

  /// POST /v1/events through the feeds' client: the new event's id (0 when
  /// the answer has none), or nullopt when the call failed.
  std::optional<int64_t> publish_external(caf::scoped_actor& self,
                                          const std::string& subject,
                                          const std::string& meta) {
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
    std::optional<int64_t> id;
    self->request(stack_.feed_client(), 25s, std::move(req))
      .receive(
        [&](call_outcome& o) {
          if (!o.ok())
            return;
          id = 0;
          if (o.body.is_object())
            if (auto* x = o.body.as_object().if_contains("id");
                x && x->is_int64())
              id = x->get_int64();
        },
        [](caf::error&) {});
    return id;
  }

  void request_loop(std::size_t w) {
    caf::scoped_actor self{sys_};
    auto deadline = std::chrono::duration_cast<caf::timespan>(
      std::chrono::duration<double>(cfg_.traffic.deadline + 5.0));
    const auto& routes = cfg_.traffic.routes;
    std::size_t k = w;
    while (request_pacer_->wait_turn(stopping_)) {
      call_request req;
      split_route(routes[k++ % routes.size()], req.path, req.params);
      auto s = demo_clock::now();
      bool ok = false;
      self->request(stack_.client(), deadline, std::move(req))
        .receive([&](call_outcome& o) { ok = o.ok(); }, [](caf::error&) {});
      requests.record(seconds_since(s), ok);
    }
  }

  void ts_loop() {
    caf::scoped_actor self{sys_};
    auto deadline = std::chrono::duration_cast<caf::timespan>(
      std::chrono::duration<double>(cfg_.oracle.timeout + 5.0));
    while (ts_pacer_->wait_turn(stopping_)) {
      ts_call call;
      call.count = cfg_.oracle.count;
      call.timeout = cfg_.oracle.timeout;
      auto s = demo_clock::now();
      bool ok = false;
      self->request(stack_.driver(), deadline, call)
        .receive([&](coalesce_reply& r) { ok = !r.error; }, [](caf::error&) {});
      ts.record(seconds_since(s), ok);
    }
  }

  const demo_config& cfg_;
  caf::actor_system& sys_;
  service_stack& stack_;
  hub* embedded_;
  demo_families& families_;
  std::atomic<bool> stopping_{false};
  std::unique_ptr<pacer> request_pacer_;
  std::unique_ptr<pacer> ts_pacer_;
  std::vector<std::thread> threads_;
};

/// Asks the running actors what the status lines and the report show.
class demo_probe {
public:
  demo_probe(caf::actor_system& sys, service_stack& stack, std::string host_key,
             std::vector<std::string> endpoint_keys)
    : stack_(stack), self_(std::in_place, sys), host_key_(std::move(host_key)),
      endpoint_keys_(std::move(endpoint_keys)) {
  }

  /// The phases of the host breaker and of every endpoint breaker.
  breaker_counts breakers() {
    breaker_counts c;
    const auto& handles = stack_.hedging();
    if (!handles.breakers || !self_)
      return c;
    auto one = [&](breaker_scope scope, const std::string& key) {
      auto phase = breaker_phase::closed;
      (*self_)
        ->request(handles.breakers, 2s, breaker_snapshot_request{scope, key})
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
    one(breaker_scope::host, host_key_);
    for (const auto& k : endpoint_keys_)
      one(breaker_scope::endpoint, k);
    return c;
  }

  /// Watchers connected now (all asked at once).
  std::size_t connected_feeds() {
    std::size_t n = 0;
    const auto& watchers = stack_.watchers();
    if (watchers.empty() || !self_)
      return n;
    auto& self = *self_;
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
  }

  /// Ends the probe's scoped actor (one counts as running, so this comes
  /// before the exit settles).
  void close() {
    self_.reset();
  }

private:
  service_stack& stack_;
  std::optional<caf::scoped_actor> self_;
  std::string host_key_;
  std::vector<std::string> endpoint_keys_;
};

/// One status line per cfg.status_interval on `err` until the run's
/// duration ends or SIGINT/SIGTERM arrives; true when a signal ended it.
bool status_lines(const demo_config& cfg, demo_traffic& traffic,
                  service_stack& stack, demo_probe& probe,
                  const feed_counters& counters, const sigset_t& sigs,
                  std::ostream& err) {
  auto t0 = traffic.t0;
  auto at = [t0](double seconds) {
    return t0
           + std::chrono::duration_cast<demo_clock::duration>(
             std::chrono::duration<double>(seconds));
  };
  auto end = at(cfg.duration);
  uint64_t last_events = 0;
  auto last_hedge = stack.hedge_stats();
  auto last_tick = demo_clock::now();
  for (int tick = 1;; ++tick) {
    auto until = std::min(at(tick * cfg.status_interval), end);
    auto wait
      = std::chrono::duration<double>(until - demo_clock::now()).count();
    if (wait_for_stop_signal(sigs, wait))
      return true;
    auto now = demo_clock::now();
    if (now >= end)
      return false;
    auto dt = std::chrono::duration<double>(now - last_tick).count();
    last_tick = now;
    auto events = counters.events.load();
    auto [reqs, p99] = traffic.requests.take_interval();
    auto [ts_calls, ts_p99] = traffic.ts.take_interval();
    auto hs = stack.hedge_stats();
    auto planned = hs.total_requests - last_hedge.total_requests;
    auto hedged = hs.hedged_requests - last_hedge.hedged_requests;
    last_hedge = hs;
    std::ostringstream line;
    line << "demo " << fmt_num(seconds_since(t0), 0) << "s: events " << events
         << " (+" << fmt_num(double(events - last_events) / dt, 0)
         << "/s) resets " << counters.resets.load() << " connected "
         << probe.connected_feeds() << "/" << stack.watchers().size()
         << " | requests " << fmt_num(double(reqs) / dt, 0) << "/s hedged "
         << fmt_num(planned ? 100.0 * double(hedged) / double(planned) : 0.0)
         << "% p99 " << fmt_ms(p99) << " | breakers " << probe.breakers().str()
         << " | ts " << fmt_num(double(ts_calls) / dt, 0) << "/s p99 "
         << fmt_ms(ts_p99);
    err << line.str() << std::endl;
    last_events = events;
  }
}

/// What the report table shows, gathered after the traffic stopped.
struct demo_outcome {
  double run_seconds = 0;
  bool signalled = false;
  std::string metrics_url;
  std::size_t per_tier[3] = {0, 0, 0};
  service_stack_report stack;
  breaker_counts breakers;
  bool oracle = false;
  uint64_t req_ok = 0, req_failed = 0, ts_ok = 0, ts_failed = 0;
  std::optional<double> req_p50, req_p99, req_max, ts_p50, ts_p99;
  uint64_t published = 0, publish_failed = 0, events = 0, resets = 0;
  std::string causes;
};

/// The call counters and latency quantiles of the whole run.
void take_books(demo_traffic& traffic, demo_outcome& r) {
  {
    std::lock_guard<std::mutex> lock{traffic.requests.mu};
    r.req_ok = traffic.requests.ok;
    r.req_failed = traffic.requests.failed;
    r.req_p50 = traffic.requests.total.quantile(0.5);
    r.req_p99 = traffic.requests.total.quantile(0.99);
    r.req_max = traffic.requests.total.max();
  }
  std::lock_guard<std::mutex> lock{traffic.ts.mu};
  r.ts_ok = traffic.ts.ok;
  r.ts_failed = traffic.ts.failed;
  r.ts_p50 = traffic.ts.total.quantile(0.5);
  r.ts_p99 = traffic.ts.total.quantile(0.99);
  r.published = traffic.published.load();
  r.publish_failed = traffic.publish_failed.load();
}

/// The feed counters; a catchup watcher's first subscribe is a resync, an
/// ephemeral watcher's first connect a reconnect: both are resets by
/// design, listed by cause.
void take_feed_counters(const feed_counters& counters, demo_outcome& r) {
  r.events = counters.events.load();
  r.resets = counters.resets.load();
  for (std::size_t c = 0; c < std::size(counters.by_cause); ++c)
    if (auto n = counters.by_cause[c].load(); n > 0)
      r.causes += (r.causes.empty() ? "" : ", ")
                  + std::string{to_string(static_cast<reset_cause>(c))} + " "
                  + std::to_string(n);
}

void report_feed_rows(std::ostream& out, const demo_config& cfg,
                      const demo_outcome& r) {
  auto per_s = [&](uint64_t n) {
    return fmt_num(r.run_seconds > 0 ? double(n) / r.run_seconds : 0.0);
  };
  const auto& f = r.stack.feeds;
  row(out, "feeds",
      std::to_string(cfg.feeds) + " (ledger " + std::to_string(r.per_tier[0])
        + ", catchup " + std::to_string(r.per_tier[1]) + ", ephemeral "
        + std::to_string(r.per_tier[2]) + ")");
  row(out, "feeds_connected_at_end", std::to_string(f.connected));
  row(out, "events_published",
      std::to_string(r.published) + " (" + per_s(r.published) + "/s, failed "
        + std::to_string(r.publish_failed) + ")");
  row(out, "events_delivered",
      std::to_string(r.events) + " (" + per_s(r.events) + "/s)");
  row(out, "feed_resets",
      std::to_string(r.resets)
        + (r.causes.empty() ? "" : " (" + r.causes + ")"));
  row(out, "feed_reconnects", std::to_string(f.reconnects));
  row(out, "feed_peer_timeouts", std::to_string(f.peer_timeouts));
  row(out, "feed_overflows", std::to_string(f.overflows));
  row(out, "feed_drain_errors",
      std::to_string(f.drain_errors) + " (replay errors "
        + std::to_string(f.replay_errors) + ")");
}

void report_call_rows(std::ostream& out, const demo_outcome& r) {
  auto per_s = [&](uint64_t n) {
    return fmt_num(r.run_seconds > 0 ? double(n) / r.run_seconds : 0.0);
  };
  const auto& h = r.stack.hedging;
  row(out, "requests",
      std::to_string(r.req_ok + r.req_failed) + " ("
        + per_s(r.req_ok + r.req_failed) + "/s, failed "
        + std::to_string(r.req_failed) + ")");
  row(out, "request_latency",
      "p50 " + fmt_ms(r.req_p50) + ", p99 " + fmt_ms(r.req_p99) + ", max "
        + fmt_ms(r.req_max));
  row(out, "hedged",
      std::to_string(h.hedged_requests) + " of "
        + std::to_string(h.total_requests) + " ("
        + fmt_num(h.total_requests ? 100.0 * double(h.hedged_requests)
                                       / double(h.total_requests)
                                   : 0.0)
        + "%), won " + std::to_string(h.hedge_wins) + ", budget exhausted "
        + std::to_string(h.budget_exhausted));
  row(out, "breakers", r.breakers.str());
  if (!r.oracle) {
    row(out, "ts_calls", "skipped (no oracle endpoints)");
    return;
  }
  row(out, "ts_calls",
      std::to_string(r.ts_ok + r.ts_failed) + " ("
        + per_s(r.ts_ok + r.ts_failed) + "/s, failed "
        + std::to_string(r.ts_failed) + ")");
  row(out, "ts_latency",
      "p50 " + fmt_ms(r.ts_p50) + ", p99 " + fmt_ms(r.ts_p99));
  if (const auto& c = r.stack.oracle)
    row(out, "ts_rpcs",
        std::to_string(c->batches.rpcs) + " (mean batch "
          + fmt_num(c->batches.rpcs
                      ? double(c->batches.joined) / double(c->batches.rpcs)
                      : 0.0)
          + ", leader changes " + std::to_string(c->leader_changes) + ")");
}

void print_report(std::ostream& out, const demo_config& cfg,
                  const hub_site& site, const demo_outcome& r) {
  out << "\noutbound demo report\n";
  row(out, "metric", "value");
  row(out, "----------------------------", "-----");
  row(out, "run_seconds",
      fmt_num(r.run_seconds) + (r.signalled ? " (signal)" : ""));
  row(out, "hub",
      site.base_url + (site.embedded ? " (embedded)" : " (external)"));
  row(out, "metrics", r.metrics_url);
  report_feed_rows(out, cfg, r);
  report_call_rows(out, r);
  out << std::flush;
}

/// An external hub that never answered (a dead address, a wrong port): the
/// report is all zeros, and a script must not take it for a run. Writes the
/// error line and returns its exit code then; 0 otherwise.
int check_reached(std::ostream& err, const hub_site& site,
                  const demo_outcome& r) {
  if (site.embedded || r.published > 0 || r.req_ok > 0 || r.ts_ok > 0
      || r.stack.feeds.reached > 0 || r.events > 0)
    return 0;
  // Not a usage error's line: the demo did try (attempts counts the
  // publishes, calls and timestamps that failed), and it cannot promise that
  // none of them left, so nothing_sent / nothing_billed are false;
  // "reached":false is what happened.
  boost::json::object line;
  line["error"] = to_string(error_kind::service_unavailable);
  line["status"] = nullptr;
  line["detail"]
    = "nothing at --hub " + site.base_url + " was reached: no event published ("
      + std::to_string(r.publish_failed) + " failed), no call answered ("
      + std::to_string(r.req_failed) + " failed), no feed reached"
      + (r.oracle ? ", no timestamp served (" + std::to_string(r.ts_failed)
                      + " failed)"
                  : "");
  line["attempts"] = r.publish_failed + r.req_failed + r.ts_failed;
  line["request_id"] = "";
  line["nothing_sent"] = false;
  line["nothing_billed"] = false;
  line["reason"] = nullptr;
  line["reached"] = false;
  err << boost::json::serialize(line) << '\n';
  return exit_code(error_kind::service_unavailable);
}

/// The run itself, on its own actor system: the stack, the feeds, the
/// traffic and the status lines; then the stop and the report. Returns the
/// exit code; throws config_error and what the actors' setup throws.
int run_on_system(const demo_config& cfg, const hub_site& site,
                  const std::shared_ptr<metrics_registry>& registry,
                  const std::string& metrics_url, const sigset_t& sigs,
                  std::ostream& out, std::ostream& err) {
  caf::actor_system_config sc;
  system_options so;
  // The embedded hub's 2 io threads keep their cores; outbound's sockets
  // run on the CAF workers (the recommended io_loop policy).
  so.io_threads = site.embedded ? 2 : 0;
  configure(sc, so);
  caf::actor_system sys{sc};
  demo_families families{*registry};
  std::vector<std::string> endpoint_keys;
  service_stack stack{sys, demo_stack(cfg, site, registry, endpoint_keys)};
  auto parsed = url_parts::parse(site.base_url, "hub");
  demo_probe probe{sys, stack, route_table::host_key(parsed.host, parsed.port),
                   endpoint_keys};
  auto counters = std::make_shared<feed_counters>();
  demo_outcome r;
  r.metrics_url = metrics_url;
  r.oracle = static_cast<bool>(stack.driver());
  start_feeds(stack, cfg, counters, r.per_tier);
  print_first_line(out, metrics_url, site, cfg);
  demo_traffic traffic{cfg, sys, stack, site.embedded.get(), families};
  traffic.start();
  r.signalled = status_lines(cfg, traffic, stack, probe, *counters, sigs, err);
  r.run_seconds = seconds_since(traffic.t0);
  // A second Ctrl-C while stopping ends the process the default way.
  pthread_sigmask(SIG_UNBLOCK, &sigs, nullptr);
  traffic.join();
  r.breakers = probe.breakers();
  r.stack = stack.stop();
  probe.close();
  take_books(traffic, r);
  take_feed_counters(*counters, r);
  print_report(out, cfg, site, r);
  auto rc = check_reached(err, site, r);
  // Give the actors a moment, and do not wait for a call stuck on an
  // unresponsive external server.
  auto settle = demo_clock::now() + 2s;
  while (sys.registry().running() > 0 && demo_clock::now() < settle)
    std::this_thread::sleep_for(10ms);
  if (sys.registry().running() > 0)
    sys.await_actors_before_shutdown(false);
  return rc;
}

} // namespace

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
  raise_descriptor_limit();
  // Before any thread exists: every thread inherits the mask, and only the
  // main loop's sigtimedwait takes SIGINT/SIGTERM.
  auto sigs = block_stop_signals();
  // Each step's failure names its kind: config_error (exit 2), hub_error,
  // metrics_error, internal_error (exit 1).
  auto fail = [&](const char* kind, const std::exception& e) {
    bool config = dynamic_cast<const config_error*>(&e) != nullptr;
    err << usage_error_json(config ? "config_error" : kind, e.what()) << '\n';
    return config ? usage_exit_code : internal_exit_code;
  };
  hub_site site;
  try {
    site = open_hub(cfg);
  } catch (const std::exception& e) {
    return fail("hub_error", e);
  }
  int rc = 0;
  try {
    metrics_limits limits;
    limits.max_labelled_feeds = cfg.max_labelled_feeds;
    auto registry = std::make_shared<metrics_registry>(limits);
    std::unique_ptr<metrics_exposer> exposer;
    try {
      exposer = std::make_unique<metrics_exposer>(
        registry, static_cast<uint16_t>(cfg.metrics_port));
    } catch (const std::exception& e) {
      rc = fail("metrics_error", e);
    }
    if (exposer)
      rc = run_on_system(cfg, site, registry, exposer->url(), sigs, out, err);
  } catch (const std::exception& e) {
    rc = fail("internal_error", e);
  }
  if (site.embedded)
    site.embedded->stop();
  return rc;
}

} // namespace outbound::apps
