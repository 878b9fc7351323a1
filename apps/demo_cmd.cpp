#include "apps/demo_cmd.hpp"

#include "apps/delivery_audit.hpp"
#include "apps/latency_book.hpp"
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
#include <charconv>
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
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <sys/resource.h>
#include <system_error>
#include <thread>
#include <vector>

namespace outbound::apps {

namespace {

using demo_clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

double seconds_since(demo_clock::time_point t0) {
  return std::chrono::duration<double>(demo_clock::now() - t0).count();
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

/// The status line's p99 spans at least the last 10 s (a whole number of
/// status intervals): at ~50 calls a second per client, one second's p99
/// is its slowest call (apps/latency_book.hpp).
constexpr double status_window_seconds = 10.0;

std::size_t status_window_intervals(double status_interval) {
  return window_intervals_for(status_window_seconds, status_interval);
}

/// A run's nonce: 64 random bits in hex.
std::string run_nonce() {
  std::random_device rd;
  uint64_t x = (uint64_t{rd()} << 32) ^ rd();
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, x);
  return buf;
}

/// The delivery audit of one watcher: its callbacks run on the watcher's
/// actor, the report reads it after the watcher stopped.
struct audited_feed {
  audited_feed(feed_mode m, uint64_t group, uint64_t groups)
    : mode(m), audit(group, groups, m == feed_mode::ledger) {
  }
  feed_mode mode;
  std::mutex mu;
  delivery_audit audit;
};

/// What the feed callbacks share with the main thread.
struct feed_counters {
  std::atomic<uint64_t> events{0};
  std::atomic<uint64_t> resets{0};
  /// Resets by cause (index: reset_cause, gap is the last).
  std::atomic<uint64_t> by_cause[reset_cause_count] = {};
  /// One audit per watcher, in watcher order.
  std::vector<std::shared_ptr<audited_feed>> audits;
  /// This run's nonce, in every event's metadata.
  std::string run = run_nonce();
};

/// The demo's number of a delivered event (its metadata {"n": n, "run":
/// R}: the whole event of a replay page or an in-frame event), -1 when it
/// has none or comes from another run (`run` differs: an external hub's
/// ledger replays earlier runs' events first).
int64_t event_number(const boost::json::value& ev, const std::string& run) {
  if (!ev.is_object())
    return -1;
  auto* md = ev.get_object().if_contains("metadata");
  if (!md || !md->is_object())
    return -1;
  auto* r = md->get_object().if_contains("run");
  if (!r || !r->is_string() || r->get_string() != run)
    return -1;
  auto* n = md->get_object().if_contains("n");
  return n && n->is_int64() ? n->get_int64() : -1;
}

/// What the publisher did, for the audits: the last number published and
/// the numbers whose publish failed.
struct publish_log {
  std::atomic<int64_t> last_published{-1};
  std::mutex mu;
  std::vector<int64_t> failed; // ascending (one publisher thread)
};

/// Open-loop pacing shared by a pool of worker threads: call n is due at
/// start + n / rate, and no call is due at or after `end` (the run's end:
/// a loop never starts a call the run does not cover, however late the
/// run is stopped). Returns false when `stop` was set while waiting.
class pacer {
public:
  pacer(double rate, demo_clock::time_point start, demo_clock::time_point end)
    : rate_(rate), start_(start), end_(end) {
  }

  bool wait_turn(const std::atomic<bool>& stop) {
    return next_turn(stop).has_value();
  }

  /// Waits for the next call's turn; returns its number (0, 1, ...), or
  /// nullopt when `stop` was set while waiting or the turn falls at or
  /// after the end.
  std::optional<uint64_t> next_turn(const std::atomic<bool>& stop) {
    auto n = next_.fetch_add(1);
    // Compared in seconds first: a tiny rate's n / rate overflows the
    // clock's integer duration (it wrapped into the past, and every turn
    // came at once).
    const double at = static_cast<double>(n) / rate_;
    if (!(at < std::chrono::duration<double>(end_ - start_).count()))
      return std::nullopt;
    auto due = start_
               + std::chrono::duration_cast<demo_clock::duration>(
                 std::chrono::duration<double>(at));
    if (due >= end_)
      return std::nullopt;
    while (!stop.load()) {
      auto now = demo_clock::now();
      if (now >= due)
        return n;
      std::this_thread::sleep_for(std::min<demo_clock::duration>(due - now, 50ms));
    }
    return std::nullopt;
  }

private:
  double rate_;
  demo_clock::time_point start_;
  demo_clock::time_point end_;
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
  /// Breakers whose registry did not answer in time (a loaded machine):
  /// shown as unknown, never counted as closed.
  int unknown = 0;
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
    if (unknown > 0)
      s += " unknown " + std::to_string(unknown);
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
    "demo", "Run the demonstration on an embedded hub: hedged service calls, a "
            "coalescing driver and N feed watchers, with /metrics");
  cmd->footer(
    "Output: the first stdout line is {\"metrics\":URL,\"hub\":URL,...}; a "
    "status line per second on stderr; a report table on stdout at the "
    "end (--report json: the report alone on stdout, one JSON document).\n"
    "Ends after --duration seconds or on SIGINT/SIGTERM, exit 0.\n"
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
  opts.oracle_opt
    = cmd
        ->add_option(
          "--oracle-endpoints", opts.oracle_endpoints,
          "Only with --hub (the embedded hub runs its own cluster): the "
          "external oracle cluster's host:port list, comma-separated (none: no "
          "oracle traffic)")
        ->delimiter(',')
        ->type_name("HOST:PORT[,HOST:PORT...]");
  cmd
    ->add_option("--report", opts.report,
                 "The report: a table, or one JSON document on stdout (the "
                 "start line then goes to stderr)")
    ->check(CLI::IsMember({"table", "json"}))
    ->capture_default_str();
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
    auto name = demo_endpoint_name(r);
    if (std::find(endpoint_keys.begin(), endpoint_keys.end(),
                  "endpoint:" + name)
        != endpoint_keys.end())
      continue;
    std::string path;
    std::vector<std::pair<std::string, std::string>> params;
    split_route(r, path, params);
    auto ep = cfg.traffic.endpoints.find(name);
    ho.routes.register_route(
      "GET", path,
      ep == cfg.traffic.endpoints.end() ? endpoint_config{} : ep->second, name);
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
    auto audit = std::make_shared<audited_feed>(t.mode, i % cfg.subject_groups,
                                                cfg.subject_groups);
    counters->audits.push_back(audit);
    feed_callbacks cbs;
    cbs.detached = false;
    cbs.on_event = [counters, audit](const feed_event& ev) {
      counters->events.fetch_add(1, std::memory_order_relaxed);
      std::lock_guard<std::mutex> lock{audit->mu};
      audit->audit.on_event(event_number(ev.event, counters->run));
    };
    cbs.on_reset = [counters, audit](const feed_reset& r) {
      {
        std::lock_guard<std::mutex> lock{audit->mu};
        audit->audit.on_reset();
      }
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

/// The clients the report compares with the demo's hedged one, each a
/// service_stack of its own (own pool, own retry budget), exported through
/// the main stack's poller: an unhedged twin of the hedged client
/// (traffic.compare_unhedged), and the outage drill's pair -- outbound's
/// client with hedging, breakers and budget at their defaults, and a naive
/// retrier (the same retry policy, the budget off).
struct side_clients {
  std::unique_ptr<service_stack> unhedged;
  std::unique_ptr<service_stack> outage;
  std::unique_ptr<service_stack> naive;
  /// The outage drill runs (embedded hub, traffic, and an outage that
  /// ends before the run does).
  bool drill = false;

  /// Stops every stack (before the actor system ends).
  void stop() {
    for (auto* s : {unhedged.get(), outage.get(), naive.get()})
      if (s)
        s->stop();
  }
};

/// The outage drill's route with its tag ("/steady" -> "/steady?tag=...").
std::string tagged(const std::string& route, const std::string& tag) {
  return route + (route.find('?') == std::string::npos ? "?" : "&")
         + "tag=" + tag;
}

side_clients make_side_clients(caf::actor_system& sys, const demo_config& cfg,
                               const hub_site& site, service_stack& main) {
  side_clients s;
  auto watch = [&](service_stack& st, const std::string& name) {
    if (main.poller())
      caf::anon_send(main.poller(), metrics_watch_client{name, st.client()});
  };
  if (cfg.traffic.requests_per_second > 0 && cfg.traffic.compare_unhedged) {
    service_stack_options o;
    o.name = "demo_unhedged";
    o.client.base_url = site.base_url;
    o.client.timeout = cfg.traffic.timeout;
    o.client.deadline = cfg.traffic.deadline;
    o.client.retry.max_attempts = 2; // as the hedged client's
    s.unhedged = std::make_unique<service_stack>(sys, std::move(o));
    watch(*s.unhedged, "demo_unhedged");
  }
  const auto& u = cfg.outage;
  s.drill = site.embedded && u.calls_per_second > 0
            && u.start + u.seconds < cfg.duration;
  if (!s.drill)
    return s;
  auto drill_client = [&](bool budget) {
    service_stack_options o;
    o.name = budget ? "demo_outage" : "demo_naive";
    o.client.base_url = site.base_url;
    o.client.timeout = 2.0;
    o.client.deadline = 5.0;
    o.client.retry.max_attempts = u.max_attempts;
    o.client.retry.base_backoff = 0.05;
    // The outage answers 503: a status the policy retries.
    o.client.retry.retry_statuses = {429, 502, 503, 504};
    o.client.retry_budget.enabled = budget;
    if (budget) {
      hedging_options ho;
      ho.config = cfg.hedging;
      // Short enough for the drill's breakers to open and go half-open
      // within its 7 s (they close after trials, which only hedges make).
      ho.config.breaker.window = 4.0;
      ho.config.breaker.cooldown = 3.0;
      ho.routes.register_route("GET", u.route, endpoint_config{}, "outage");
      o.hedging = std::move(ho);
    }
    auto st = std::make_unique<service_stack>(sys, std::move(o));
    watch(*st, budget ? "demo_outage" : "demo_naive");
    return st;
  };
  s.outage = drill_client(true);
  s.naive = drill_client(false);
  return s;
}

/// The client's retry budget counters now (nullopt when it does not
/// answer within 2 s).
std::optional<retry_budget_stats> budget_of(caf::scoped_actor& self,
                                            const service_client_actor& client,
                                            caf::timespan timeout = 2s) {
  std::optional<retry_budget_stats> r;
  self->request(client, timeout, retry_budget_request{})
    .receive([&](retry_budget_stats& s) { r = s; }, [](caf::error&) {});
  return r;
}

/// What the outage drill measured (see demo_outage_config).
struct outage_result {
  bool ran = false;
  double seconds = 0;
  /// Requests of each client the hub counted during the outage.
  uint64_t outbound_attempts = 0;
  uint64_t naive_attempts = 0;
  /// outbound's primaries from the lead-in before the outage to its end,
  /// and in the budget window before that (its savings).
  uint64_t primaries = 0;
  uint64_t primaries_before = 0;
  /// The attempts the budget allows: primaries + percent of (primaries
  /// before + during) + min_per_second x window.
  double ceiling = 0;
  /// Retries and hedges the budget refused during the outage.
  uint64_t refusals = 0;
  /// Why a drill that was due measured nothing ("": it ran, or it was
  /// not configured to run): the run stopped first, the hub refused the
  /// outage, or the drill client did not answer a budget sample.
  std::string unmeasured;
};

/// The demo's load: a publisher at cfg.rate, request workers at
/// traffic.requests_per_second (every other call through the unhedged
/// client when there is one), timestamp callers at
/// oracle.calls_per_second plus a burst of bursts.size calls every
/// bursts.interval, the outage drill's two clients, and the scripted
/// events (the outage, the hub's restart), each an open loop on its own
/// thread. The destructor stops and joins them on every way out (an
/// exception included: a joinable std::thread would terminate).
class demo_traffic {
public:
  demo_traffic(const demo_config& cfg, caf::actor_system& sys,
               service_stack& stack, side_clients& side, hub* embedded,
               demo_families& families, publish_log& log, std::string run)
    : requests(status_window_intervals(cfg.status_interval)),
      unhedged(status_window_intervals(cfg.status_interval)),
      ts(status_window_intervals(cfg.status_interval)), cfg_(cfg), sys_(sys),
      stack_(stack), side_(side), embedded_(embedded), families_(families),
      log_(log), run_(std::move(run)) {
  }

  ~demo_traffic() {
    join();
  }

  demo_traffic(const demo_traffic&) = delete;
  demo_traffic& operator=(const demo_traffic&) = delete;

  /// Worker threads of each outage drill client: a call of the naive
  /// retrier lasts up to its backoffs (0.05 + 0.1 + 0.2 s ... with
  /// jitter), so 64 keep the loop open up to outage.calls_per_second's
  /// maximum (100).
  static constexpr std::size_t outage_workers = 64;

  void start() {
    t0 = demo_clock::now();
    if (cfg_.rate > 0)
      threads_.emplace_back([this] { publish_loop(); });
    if (cfg_.traffic.requests_per_second > 0) {
      request_pacer_
        = std::make_unique<pacer>(cfg_.traffic.requests_per_second, t0, end());
      for (std::size_t w = 0; w < cfg_.traffic.concurrency; ++w)
        threads_.emplace_back([this] { request_loop(); });
    }
    if (stack_.driver() && cfg_.oracle.calls_per_second > 0) {
      ts_pacer_
        = std::make_unique<pacer>(cfg_.oracle.calls_per_second, t0, end());
      for (std::size_t w = 0; w < cfg_.oracle.callers; ++w)
        threads_.emplace_back([this] { ts_loop(); });
    }
    if (stack_.driver() && cfg_.bursts.size > 0)
      threads_.emplace_back([this] { burst_loop(); });
    if (side_.drill) {
      outage_pacer_
        = std::make_unique<pacer>(cfg_.outage.calls_per_second, t0, end());
      naive_pacer_
        = std::make_unique<pacer>(cfg_.outage.calls_per_second, t0, end());
      for (std::size_t w = 0; w < outage_workers; ++w) {
        threads_.emplace_back([this] {
          drill_loop(*outage_pacer_, side_.outage->client(), "outbound");
        });
        threads_.emplace_back([this] {
          drill_loop(*naive_pacer_, side_.naive->client(), "naive");
        });
      }
    }
    if (side_.drill)
      threads_.emplace_back([this] { outage_loop(); });
    if (embedded_ && cfg_.hub_restart_at > 0
        && cfg_.hub_restart_at < cfg_.duration)
      threads_.emplace_back([this] { restart_loop(); });
  }

  void join() {
    stopping_.store(true);
    for (auto& t : threads_)
      if (t.joinable())
        t.join();
  }

  /// The outage's result (after join()).
  outage_result outage() {
    std::lock_guard<std::mutex> lock{outage_mu_};
    return outage_;
  }

  /// What happened in the status interval [from, to): its counts cover
  /// the whole interval, so a line is marked by when the events were, not
  /// by the state at its tick. The default outage starts and ends on a
  /// tick: the drill's route counts as down in an interval when it was
  /// down for at least a tenth of it (the line before the outage, whose
  /// last milliseconds it overlaps, stays unmarked); the restart marks
  /// the interval it fell in.
  struct interval_events {
    bool route_down = false;
    bool restarted = false;
  };

  interval_events interval_events_between(demo_clock::time_point from,
                                          demo_clock::time_point to) {
    std::lock_guard<std::mutex> lock{outage_mu_};
    interval_events e;
    if (down_at_) {
      auto up = up_at_.value_or(to);
      auto overlap = std::min(up, to) - std::max(*down_at_, from);
      e.route_down = overlap.count() > 0 && overlap * 10 >= to - from;
    }
    e.restarted
      = restarted_at_ && *restarted_at_ >= from && *restarted_at_ < to;
    return e;
  }

  demo_clock::time_point t0 = demo_clock::now();
  latency_book requests;
  latency_book unhedged;
  latency_book ts;
  std::atomic<uint64_t> published{0};
  std::atomic<uint64_t> publish_failed{0};
  std::atomic<uint64_t> burst_calls{0};
  std::atomic<uint64_t> burst_failed{0};
  std::atomic<uint64_t> bursts{0};
  /// The driver's RPCs and calls from just before each burst to just after
  /// its last answer (its own calls and the steady calls in those windows):
  /// the report splits the driver's totals into burst windows and the rest.
  std::atomic<uint64_t> burst_window_rpcs{0};
  std::atomic<uint64_t> burst_window_calls{0};
  /// Bursts whose window was not counted (a counters sample failed).
  std::atomic<uint64_t> burst_window_misses{0};
  std::atomic<bool> restarted{false};

private:
  void publish_loop() {
    pacer p{cfg_.rate, t0, end()};
    caf::scoped_actor self{sys_};
    int64_t n = 0;
    while (p.wait_turn(stopping_)) {
      auto subject = "demo/" + std::to_string(n % cfg_.subject_groups) + "/"
                     + std::to_string(n);
      auto meta = "{\"n\":" + std::to_string(n) + ",\"run\":\"" + run_ + "\"}";
      std::optional<int64_t> id = embedded_
                                    ? publish_embedded(subject, meta)
                                    : publish_external(self, subject, meta);
      log_.last_published.store(n);
      if (!id) {
        {
          std::lock_guard<std::mutex> lock{log_.mu};
          log_.failed.push_back(n);
        }
        ++n;
        publish_failed.fetch_add(1);
        continue;
      }
      ++n;
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

  /// Call n goes to route (n / 2) of the list, through the hedged client
  /// when n is even and the unhedged one when n is odd: both clients see
  /// the same routes in the same order. The embedded hub counts each
  /// client's requests by tag (the extra load). Without the unhedged
  /// client every call is hedged's, route n.
  void request_loop() {
    caf::scoped_actor self{sys_};
    auto deadline = std::chrono::duration_cast<caf::timespan>(
      std::chrono::duration<double>(cfg_.traffic.deadline + 5.0));
    const auto& routes = cfg_.traffic.routes;
    bool twin = side_.unhedged != nullptr;
    while (auto n = request_pacer_->next_turn(stopping_)) {
      bool hedged = !twin || *n % 2 == 0;
      auto k = twin ? *n / 2 : *n;
      call_request req;
      split_route(routes[k % routes.size()], req.path, req.params);
      if (embedded_)
        req.params.emplace_back("tag", hedged ? "hedged" : "unhedged");
      auto s = demo_clock::now();
      bool ok = false;
      const auto& client = hedged ? stack_.client() : side_.unhedged->client();
      self->request(client, deadline, std::move(req))
        .receive([&](call_outcome& o) { ok = o.ok(); }, [](caf::error&) {});
      (hedged ? requests : unhedged).record(seconds_since(s), ok);
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

  /// Every bursts.interval: bursts.size timestamp calls at once (all sent,
  /// then all awaited), as a crowd of callers arriving together.
  void burst_loop() {
    caf::scoped_actor self{sys_};
    auto deadline = std::chrono::duration_cast<caf::timespan>(
      std::chrono::duration<double>(cfg_.oracle.timeout + 5.0));
    pacer p{1.0 / cfg_.bursts.interval, t0 + 1s, end()};
    // The driver's counters now (nullopt if it did not answer in time).
    auto counters = [&]() -> std::optional<std::pair<uint64_t, uint64_t>> {
      std::optional<std::pair<uint64_t, uint64_t>> out;
      self->request(stack_.driver(), std::chrono::seconds{5}, stats_atom_v)
        .receive(
          [&](coalesce_stats& st) { out.emplace(st.batches.rpcs, st.calls); },
          [](caf::error&) {});
      return out;
    };
    while (p.wait_turn(stopping_)) {
      auto before = counters();
      ts_call call;
      call.count = cfg_.oracle.count;
      call.timeout = cfg_.oracle.timeout;
      std::vector<decltype(self->request(stack_.driver(), deadline, call))> hs;
      hs.reserve(cfg_.bursts.size);
      for (std::size_t i = 0; i < cfg_.bursts.size; ++i)
        hs.push_back(self->request(stack_.driver(), deadline, call));
      for (auto& h : hs) {
        bool ok = false;
        h.receive([&](coalesce_reply& r) { ok = !r.error; },
                  [](caf::error&) {});
        burst_calls.fetch_add(1);
        if (!ok)
          burst_failed.fetch_add(1);
      }
      bursts.fetch_add(1);
      auto after = counters();
      // The driver answers an all-zero record if its stats handler throws:
      // such a sample counts as missed, never as a wrapped difference.
      if (before && after && after->first >= before->first
          && after->second >= before->second) {
        burst_window_rpcs.fetch_add(after->first - before->first);
        burst_window_calls.fetch_add(after->second - before->second);
      } else {
        burst_window_misses.fetch_add(1);
      }
    }
  }

  /// One worker of an outage drill client: the drill's route, tagged.
  void drill_loop(pacer& p, const service_client_actor& client,
                  const std::string& tag) {
    caf::scoped_actor self{sys_};
    while (p.wait_turn(stopping_)) {
      call_request req;
      split_route(tagged(cfg_.outage.route, "outage-" + tag), req.path,
                  req.params);
      self->request(client, 10s, std::move(req))
        .receive([](call_outcome&) {}, [](caf::error&) {});
    }
  }

  /// The run's end (t0 + duration): no paced call is due at or after it.
  demo_clock::time_point end() const {
    return t0
           + std::chrono::duration_cast<demo_clock::duration>(
             std::chrono::duration<double>(cfg_.duration));
  }

  /// Sleeps until `seconds` after the start; false when stopping first.
  bool sleep_until(double seconds) {
    auto due = t0
               + std::chrono::duration_cast<demo_clock::duration>(
                 std::chrono::duration<double>(seconds));
    while (!stopping_.load()) {
      auto now = demo_clock::now();
      if (now >= due)
        return true;
      std::this_thread::sleep_for(
        std::min<demo_clock::duration>(due - now, 50ms));
    }
    return false;
  }

  /// The hub's restart at hub_restart_at: the catch-up tier's new epoch,
  /// every WebSocket dropped.
  void restart_loop() {
    if (sleep_until(cfg_.hub_restart_at))
      restart_hub();
  }

  /// The outage: its route down for outage.seconds, the hub's counts taken
  /// at both ends. The ceiling is an upper bound from the retry budget's
  /// rule (core/retry_budget.hpp): an extra attempt is granted only while
  /// the window's withdrawals, plus one, stay within percent of its
  /// deposits plus min_per_second x window, and an entry leaves the window
  /// 0.9 to 1 window after it was made. The outage (at most 7 s), the
  /// lead_in before it (1.5 s) and half a second of slack fit in 0.9 of
  /// the window (10 s), so every retry or hedge granted from the lead-in's
  /// start to the outage's end is still in the window at the last grant:
  /// there are at most percent x the deposits of [lead-in start - window,
  /// end] + min_per_second x window of them. The attempts the hub counts
  /// during the outage are those extra attempts plus primaries deposited
  /// since the lead-in's start -- a request counted after the outage began
  /// was deposited at most lead_in before (a request takes milliseconds
  /// from deposit to hub; the lead-in allows 1.5 s on a stalled machine).
  void outage_loop() {
    const auto& u = cfg_.outage;
    retry_budget_config rb; // the drill client's: the defaults
    constexpr double lead_in = 1.5;
    caf::scoped_actor self{sys_};
    // Why the drill measured nothing, for the report (not a generic
    // "skipped"); the budget samples wait up to 5 s on a loaded machine.
    bool stopped = false;
    auto unmeasured = [&](const char* why) {
      std::lock_guard<std::mutex> lock{outage_mu_};
      outage_.unmeasured = stopped ? "the run stopped first" : why;
    };
    const char* no_sample
      = "the drill client did not answer a retry-budget sample within 5 s";
    auto sample = [&] {
      return budget_of(self, side_.outage->client(), 5s);
    };
    auto sample_at = [&](double at) -> std::optional<retry_budget_stats> {
      if (at < 0)
        return retry_budget_stats{}; // before the start: nothing yet
      if (!sleep_until(at)) {
        stopped = true;
        return std::nullopt;
      }
      return sample();
    };
    auto early = sample_at(u.start - lead_in - rb.window);
    auto pre = early ? sample_at(u.start - lead_in) : std::nullopt;
    if (pre && !sleep_until(u.start))
      stopped = true;
    if (!pre || stopped)
      return unmeasured(no_sample);
    auto at_start = sample();
    auto o0 = embedded_->profile_requests("outage-outbound");
    auto n0 = embedded_->profile_requests("outage-naive");
    auto down_at = demo_clock::now();
    if (!set_outage(u.route))
      return unmeasured("the hub refused the outage");
    auto ran = sleep_until(u.start + u.seconds);
    set_outage("");
    // The hub's counts first, the deposits after: a call that starts in
    // between is counted as a primary, never as an attempt alone.
    auto o1 = embedded_->profile_requests("outage-outbound");
    auto n1 = embedded_->profile_requests("outage-naive");
    auto up_at = demo_clock::now();
    auto end = sample();
    stopped = !ran;
    if (!ran || !at_start || !end)
      return unmeasured(no_sample);
    outage_result r;
    r.ran = true;
    r.seconds = std::chrono::duration<double>(up_at - down_at).count();
    r.outbound_attempts = o1 - o0;
    r.naive_attempts = n1 - n0;
    r.primaries = end->deposits - pre->deposits;
    r.primaries_before = pre->deposits - early->deposits;
    r.ceiling = static_cast<double>(r.primaries)
                + rb.percent / 100.0
                    * static_cast<double>(r.primaries + r.primaries_before)
                + rb.min_per_second * rb.window;
    r.refusals = (end->refusals[0] + end->refusals[1])
                 - (at_start->refusals[0] + at_start->refusals[1]);
    std::lock_guard<std::mutex> lock{outage_mu_};
    outage_ = r;
  }

  /// Sets the hub's outage route ("" : none); false when the hub refused.
  bool set_outage(const std::string& route) {
    try {
      embedded_->set_faults("{\"outage_path\":\"" + route + "\"}");
    } catch (const std::exception&) {
      return false; // a route the config validated: not expected
    }
    auto now = demo_clock::now();
    std::lock_guard<std::mutex> lock{outage_mu_};
    if (!route.empty()) {
      down_at_ = now;
      up_at_.reset();
    } else if (down_at_) {
      up_at_ = now;
    }
    return true;
  }

  void restart_hub() {
    try {
      embedded_->restart();
      embedded_->drop_connections("all");
    } catch (const std::exception&) {
      return; // the hub stopping
    }
    restarted.store(true);
    // Dated under the lock, after the drop: a status line either reads it
    // or was cut before it (the next line then has it), so the mark is
    // never lost; the resets follow the drop, as the mark does.
    std::lock_guard<std::mutex> lock{outage_mu_};
    restarted_at_ = demo_clock::now();
  }

  const demo_config& cfg_;
  caf::actor_system& sys_;
  service_stack& stack_;
  side_clients& side_;
  hub* embedded_;
  demo_families& families_;
  publish_log& log_;
  std::string run_;
  std::atomic<bool> stopping_{false};
  std::unique_ptr<pacer> request_pacer_;
  std::unique_ptr<pacer> ts_pacer_;
  std::unique_ptr<pacer> outage_pacer_;
  std::unique_ptr<pacer> naive_pacer_;
  std::vector<std::thread> threads_;
  std::mutex outage_mu_;
  outage_result outage_;
  /// The drill's outage (the route down at down_at_, up again at up_at_)
  /// and the hub's restart, for interval_events_between.
  std::optional<demo_clock::time_point> down_at_;
  std::optional<demo_clock::time_point> up_at_;
  std::optional<demo_clock::time_point> restarted_at_;
};

/// Asks the running actors what the status lines and the report show.
class demo_probe {
public:
  demo_probe(caf::actor_system& sys, service_stack& stack, std::string host_key,
             std::vector<std::string> endpoint_keys)
    : stack_(stack), self_(std::in_place, sys), host_key_(std::move(host_key)),
      endpoint_keys_(std::move(endpoint_keys)) {
  }

  /// How long a probe waits for an answer: until `deadline`, at least
  /// 50 ms and at most 2 s (the status loop passes the run's end, so its
  /// last line cannot hold the run past it on a loaded machine).
  static caf::timespan wait_until(demo_clock::time_point deadline) {
    auto left
      = std::chrono::duration_cast<caf::timespan>(deadline - demo_clock::now());
    return std::clamp<caf::timespan>(left, 50ms, 2s);
  }

  /// The phases of the host breaker and of every endpoint breaker; one
  /// that does not answer by `deadline` counts as unknown.
  breaker_counts breakers(demo_clock::time_point deadline
                          = demo_clock::now() + 2s) {
    breaker_counts c;
    const auto& handles = stack_.hedging();
    if (!handles.breakers || !self_)
      return c;
    auto one = [&](breaker_scope scope, const std::string& key) {
      auto phase = breaker_phase::closed;
      bool answered = false;
      (*self_)
        ->request(handles.breakers, wait_until(deadline),
                  breaker_snapshot_request{scope, key})
        .receive(
          [&](breaker_snapshot_reply& r) {
            answered = true;
            if (r.snapshot)
              phase = r.snapshot->phase;
          },
          [](caf::error&) {});
      if (!answered) {
        ++c.unknown;
      } else if (phase == breaker_phase::open) {
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

  /// Watchers connected now (all asked at once), and those that did not
  /// answer by `deadline` (neither connected nor not).
  struct feed_census {
    std::size_t connected = 0;
    std::size_t unanswered = 0;
  };
  feed_census connected_feeds(demo_clock::time_point deadline) {
    feed_census n;
    const auto& watchers = stack_.watchers();
    if (watchers.empty() || !self_)
      return n;
    auto& self = *self_;
    auto wait = wait_until(deadline);
    std::vector<decltype(self->request(watchers[0], wait, stats_atom_v))> hs;
    hs.reserve(watchers.size());
    for (auto& w : watchers)
      hs.push_back(self->request(w, wait, stats_atom_v));
    for (auto& h : hs) {
      bool answered = false;
      h.receive(
        [&](feed_stats& s) {
          answered = true;
          if (s.connected)
            ++n.connected;
        },
        [](caf::error&) {});
      if (!answered)
        ++n.unanswered;
    }
    return n;
  }

  /// The driver's counters now (nullopt without a driver or an answer by
  /// `deadline`).
  std::optional<coalesce_stats> driver_stats(demo_clock::time_point deadline) {
    std::optional<coalesce_stats> r;
    if (!stack_.driver() || !self_)
      return r;
    (*self_)
      ->request(stack_.driver(), wait_until(deadline), stats_atom_v)
      .receive([&](coalesce_stats& s) { r = std::move(s); },
               [](caf::error&) {});
    return r;
  }

  /// The transitions of every breaker of `st`'s client, summed: opens,
  /// half-opens, closes.
  std::array<uint64_t, 3> breaker_transitions(service_stack& st) {
    std::array<uint64_t, 3> t{};
    const auto& handles = st.hedging();
    if (!handles.breakers || !self_)
      return t;
    (*self_)
      ->request(handles.breakers, 2s, breaker_all_request{})
      .receive(
        [&](breaker_all_reply& r) {
          for (const auto& b : r.breakers) {
            t[0] += b.snapshot.opens;
            t[1] += b.snapshot.half_opens;
            t[2] += b.snapshot.closes;
          }
        },
        [](caf::error&) {});
    return t;
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
/// Besides the feeds, it shows the comparisons of the report as they
/// build up: hedged vs unhedged p99, the outage drill's attempts per second
/// at the hub (outbound vs naive), and the driver's RPCs against its calls.
bool status_lines(const demo_config& cfg, demo_traffic& traffic,
                  service_stack& stack, demo_probe& probe,
                  const feed_counters& counters, const side_clients& side,
                  hub* embedded, const sigset_t& sigs, std::ostream& err) {
  auto t0 = traffic.t0;
  auto at = [t0](double seconds) {
    return t0
           + std::chrono::duration_cast<demo_clock::duration>(
             std::chrono::duration<double>(seconds));
  };
  auto end = at(cfg.duration);
  // The counts below start with the traffic at t0 (the delivered events
  // too with the embedded hub; an external hub's ledger tier may first
  // replay earlier runs' events), so the first line's rates are over the
  // time since t0 (this function starts a little later).
  uint64_t last_events = 0;
  decltype(stack.hedge_stats()) last_hedge{};
  auto last_tick = t0;
  auto last_driver_read = t0;
  uint64_t last_outbound = 0, last_naive = 0, last_calls = 0, last_rpcs = 0;
  for (int tick = 1;; ++tick) {
    auto until = std::min(at(tick * cfg.status_interval), end);
    auto wait
      = std::chrono::duration<double>(until - demo_clock::now()).count();
    if (wait_for_stop_signal(sigs, wait))
      return true;
    auto now = demo_clock::now();
    if (now >= end)
      return false;
    // Behind (a loaded machine, or probes that waited, held the last line
    // past this tick's time): the line is labelled with the tick it has
    // reached and the ticks in between are skipped, so the lines never lag
    // the run (and the last seconds' lines are not lost at its end).
    tick = std::max(tick, static_cast<int>(std::floor(
                            std::chrono::duration<double>(now - t0).count()
                            / cfg.status_interval)));
    auto dt = std::chrono::duration<double>(now - last_tick).count();
    auto happened = traffic.interval_events_between(last_tick, now);
    last_tick = now;
    auto rate = [dt](uint64_t n) {
      return fmt_num(double(n) / dt, 0);
    };
    // Every count of the line is read here, with `now`, before the probes
    // below (which may wait): a count read after them would cover more
    // time than dt.
    auto events = counters.events.load();
    auto resets = counters.resets.load();
    uint64_t outage_o = 0, outage_n = 0;
    if (side.drill && embedded) {
      outage_o = embedded->profile_requests("outage-outbound");
      outage_n = embedded->profile_requests("outage-naive");
    }
    auto hedged_view = traffic.requests.take_interval();
    auto twin_view = traffic.unhedged.take_interval();
    auto ts_view = traffic.ts.take_interval();
    // The p99s span the last status_window_seconds (less at the start).
    auto window
      = "(" + window_seconds_label(hedged_view.intervals, cfg.status_interval)
        + " s)";
    auto hs = stack.hedge_stats();
    auto planned = hs.total_requests - last_hedge.total_requests;
    auto hedged = hs.hedged_requests - last_hedge.hedged_requests;
    last_hedge = hs;
    // The driver's counters can only be asked for: asked first, before the
    // slower probes below, so that they cover about the line's interval.
    // Its rates use the time between its own answers, up to the run's end
    // (no paced call after it: an answer that came later covered less).
    std::string driver_text;
    if (auto ds = probe.driver_stats(end)) {
      auto answered = std::min(demo_clock::now(), end);
      auto ds_dt
        = std::chrono::duration<double>(answered - last_driver_read).count();
      auto ds_rate = [ds_dt](uint64_t n) {
        return fmt_num(ds_dt > 0 ? double(n) / ds_dt : 0.0, 0);
      };
      driver_text = " rpcs " + ds_rate(ds->batches.rpcs - last_rpcs) + "/s for "
                    + ds_rate(ds->calls - last_calls) + " calls/s";
      last_rpcs = ds->batches.rpcs;
      last_calls = ds->calls;
      last_driver_read = answered;
    }
    // The probes answer by the run's end at the latest (a loaded machine
    // would otherwise hold the last line, and the run, past it).
    auto census = probe.connected_feeds(end);
    std::ostringstream line;
    // Labelled with its tick (the second it covers ends there), not the
    // time it is printed, which a loaded machine delays a little.
    auto label = double(tick) * cfg.status_interval;
    line << "demo " << fmt_num(label, label == std::floor(label) ? 0 : 1)
         << "s: events " << events << " (+" << rate(events - last_events)
         << "/s) resets " << resets << " connected " << census.connected << "/"
         << stack.watchers().size();
    if (census.unanswered > 0)
      line << " (" << census.unanswered << " not answering)";
    line << " | requests " << rate(hedged_view.calls + twin_view.calls)
         << "/s hedged "
         << fmt_num(planned ? 100.0 * double(hedged) / double(planned) : 0.0)
         << "% p99 " << window << " " << fmt_ms(hedged_view.p99);
    if (side.unhedged)
      line << " (unhedged " << fmt_ms(twin_view.p99) << ")";
    line << " | breakers " << probe.breakers(end).str();
    if (side.drill && embedded) {
      // The drill's two clients call its route for the whole run; the
      // line is marked when the route was down during its interval.
      line << " | drill";
      if (happened.route_down)
        line << " [route down]";
      line << ": attempts outbound " << rate(outage_o - last_outbound)
           << "/s naive " << rate(outage_n - last_naive) << "/s";
      last_outbound = outage_o;
      last_naive = outage_n;
    }
    if (happened.restarted)
      line << " | hub restarted";
    line << " | ts " << rate(ts_view.calls) << "/s p99 " << window << " "
         << fmt_ms(ts_view.p99);
    line << driver_text;
    err << line.str() << std::endl;
    last_events = events;
  }
}

/// One client's calls over the run: counts and latency quantiles of the
/// calls that succeeded, and the requests the hub counted for them.
struct call_summary : latency_book::run_view {
  /// Requests the embedded hub counted under the client's tag (nullopt:
  /// an external hub).
  std::optional<uint64_t> hub_requests;

  uint64_t calls() const {
    return ok + failed;
  }

  /// Requests beyond one per call, as a fraction of the calls (hedges and
  /// retries that reached the backend).
  std::optional<double> extra_load() const {
    if (!hub_requests || *hub_requests == 0 || calls() == 0)
      return std::nullopt; // an external hub, or routes that count no tag
    return (double(*hub_requests) - double(calls())) / double(calls());
  }
};

call_summary summarize(const latency_book& b) {
  call_summary s;
  static_cast<latency_book::run_view&>(s) = b.run();
  return s;
}

/// What the report shows, gathered after the traffic stopped.
struct demo_outcome {
  double run_seconds = 0;
  bool signalled = false;
  std::string metrics_url;
  std::size_t per_tier[3] = {0, 0, 0};
  service_stack_report stack;
  breaker_counts breakers;
  bool oracle = false;
  bool unhedged_ran = false;
  call_summary hedged, unhedged, ts;
  uint64_t burst_calls = 0, burst_failed = 0, bursts = 0;
  uint64_t burst_window_rpcs = 0, burst_window_calls = 0;
  uint64_t burst_window_misses = 0;
  outage_result outage;
  std::array<uint64_t, 3> outage_breakers{};
  uint64_t published = 0, publish_failed = 0, events = 0, resets = 0;
  std::string causes;
  std::vector<std::pair<std::string, uint64_t>> resets_by_cause;
  delivery_totals audit;
  bool restarted = false;

  // Old names, kept for check_reached.
  uint64_t req_ok = 0, req_failed = 0, ts_ok = 0, ts_failed = 0;
};

/// The call counters and latency quantiles of the whole run.
void take_books(demo_traffic& traffic, hub* embedded, demo_outcome& r) {
  r.hedged = summarize(traffic.requests);
  r.unhedged = summarize(traffic.unhedged);
  r.ts = summarize(traffic.ts);
  if (embedded) {
    r.hedged.hub_requests = embedded->profile_requests("hedged");
    r.unhedged.hub_requests = embedded->profile_requests("unhedged");
  }
  r.req_ok = r.hedged.ok + r.unhedged.ok;
  r.req_failed = r.hedged.failed + r.unhedged.failed;
  r.ts_ok = r.ts.ok;
  r.ts_failed = r.ts.failed;
  r.burst_calls = traffic.burst_calls.load();
  r.burst_failed = traffic.burst_failed.load();
  r.bursts = traffic.bursts.load();
  r.burst_window_rpcs = traffic.burst_window_rpcs.load();
  r.burst_window_calls = traffic.burst_window_calls.load();
  r.burst_window_misses = traffic.burst_window_misses.load();
  r.published = traffic.published.load();
  r.publish_failed = traffic.publish_failed.load();
  r.outage = traffic.outage();
}

/// The feed counters and the audits; a catchup watcher's first subscribe
/// is a resync, an ephemeral watcher's first connect a reconnect: both are
/// resets by design, listed by cause.
void take_feed_counters(const feed_counters& counters, publish_log& log,
                        demo_outcome& r) {
  r.events = counters.events.load();
  r.resets = counters.resets.load();
  for (std::size_t c = 0; c < std::size(counters.by_cause); ++c)
    if (auto n = counters.by_cause[c].load(); n > 0) {
      auto name = std::string{to_string(static_cast<reset_cause>(c))};
      r.causes
        += (r.causes.empty() ? "" : ", ") + name + " " + std::to_string(n);
      r.resets_by_cause.emplace_back(name, n);
    }
  std::vector<int64_t> failed;
  {
    std::lock_guard<std::mutex> lock{log.mu};
    failed = log.failed;
  }
  auto last = log.last_published.load();
  for (const auto& a : counters.audits) {
    std::lock_guard<std::mutex> lock{a->mu};
    r.audit += a->audit.finish(failed, last);
  }
}

/// Waits (at most `bound`) until every watcher delivered the last event of
/// its group, so that the audit's pending tail is what is really late, not
/// what was published a moment before the stop.
void settle_ledger_feeds(const feed_counters& counters, publish_log& log,
                         demo_clock::duration bound) {
  auto until = demo_clock::now() + bound;
  auto last = log.last_published.load();
  for (;;) {
    uint64_t pending = 0;
    std::vector<int64_t> failed;
    {
      std::lock_guard<std::mutex> lock{log.mu};
      failed = log.failed;
    }
    for (const auto& a : counters.audits) {
      std::lock_guard<std::mutex> lock{a->mu};
      pending += a->audit.finish(failed, last).pending;
    }
    if (pending == 0 || demo_clock::now() >= until)
      return;
    std::this_thread::sleep_for(50ms);
  }
}

std::string fmt_pct(const std::optional<double>& x) {
  return x ? fmt_num(100.0 * *x) + " %" : "-";
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
  row(out, "feed_lost",
      std::to_string(r.audit.lost) + " (not announced by a reset; "
        + std::to_string(r.audit.pending) + " still in flight at the stop; "
        + std::to_string(r.audit.announced)
        + " announced by resets and not delivered)");
  row(out, "feed_duplicated",
      std::to_string(r.audit.duplicated) + " (within an incarnation)");
  if (r.audit.foreign > 0)
    row(out, "feed_foreign",
        std::to_string(r.audit.foreign)
          + " (events of another group or run: not audited)");
  row(out, "feed_resets",
      std::to_string(r.resets) + (r.causes.empty() ? "" : " (" + r.causes + ")")
        + (r.restarted
             ? ", hub restarted at " + fmt_num(cfg.hub_restart_at, 0) + " s"
             : ""));
  row(out, "feed_reconnects", std::to_string(f.reconnects));
  row(out, "feed_peer_timeouts", std::to_string(f.peer_timeouts));
  row(out, "feed_overflows", std::to_string(f.overflows));
  row(out, "feed_drain_errors",
      std::to_string(f.drain_errors) + " (replay errors "
        + std::to_string(f.replay_errors) + ")");
}

std::string latency_cell(const call_summary& s) {
  return "p50 " + fmt_ms(s.p50) + ", p99 " + fmt_ms(s.p99) + ", p99.9 "
         + fmt_ms(s.p999) + ", max " + fmt_ms(s.max);
}

void report_call_rows(std::ostream& out, const demo_config& cfg,
                      const demo_outcome& r) {
  auto per_s = [&](uint64_t n) {
    return fmt_num(r.run_seconds > 0 ? double(n) / r.run_seconds : 0.0);
  };
  const auto& h = r.stack.hedging;
  row(out, "requests",
      std::to_string(r.req_ok + r.req_failed) + " ("
        + per_s(r.req_ok + r.req_failed) + "/s, failed "
        + std::to_string(r.req_failed) + ")");
  row(out, "hedged_latency", latency_cell(r.hedged));
  row(out, "hedged_extra_load",
      fmt_pct(r.hedged.extra_load()) + " (hedged "
        + std::to_string(h.hedged_requests) + " of "
        + std::to_string(h.total_requests) + ", won "
        + std::to_string(h.hedge_wins) + ", budget exhausted "
        + std::to_string(h.budget_exhausted) + ")");
  if (r.unhedged_ran) {
    row(out, "unhedged_latency", latency_cell(r.unhedged));
    row(out, "unhedged_extra_load", fmt_pct(r.unhedged.extra_load()));
  }
  row(out, "breakers", r.breakers.str());
  const auto& o = r.outage;
  if (o.ran) {
    auto rate = [&](double n) {
      return fmt_num(n / o.seconds) + "/s";
    };
    row(out, "outage",
        cfg.outage.route + " answered 503 for " + fmt_num(o.seconds, 0)
          + " s from " + fmt_num(cfg.outage.start, 0) + " s");
    row(out, "outage_attempts_outbound",
        rate(double(o.outbound_attempts)) + " ("
          + std::to_string(o.outbound_attempts) + " attempts; ceiling "
          + rate(o.ceiling) + " from " + std::to_string(o.primaries)
          + " calls since 1.5 s before it; budget refusals "
          + std::to_string(o.refusals) + ")");
    row(out, "outage_attempts_naive",
        rate(double(o.naive_attempts)) + " (" + std::to_string(o.naive_attempts)
          + ", no budget, up to " + std::to_string(cfg.outage.max_attempts)
          + " attempts a call)");
    row(out, "outage_breaker",
        "opened " + std::to_string(r.outage_breakers[0]) + ", half-open "
          + std::to_string(r.outage_breakers[1]) + ", closed "
          + std::to_string(r.outage_breakers[2]));
  } else if (!r.outage.unmeasured.empty()) {
    row(out, "outage", "not measured: " + r.outage.unmeasured);
  } else {
    row(out, "outage",
        "skipped (needs the embedded hub and an outage that "
        "ends before the run)");
  }
  if (!r.oracle) {
    row(out, "ts_calls", "skipped (no oracle endpoints)");
    return;
  }
  row(out, "ts_calls",
      std::to_string(r.ts_ok + r.ts_failed) + " steady ("
        + per_s(r.ts_ok + r.ts_failed) + "/s, failed "
        + std::to_string(r.ts_failed) + ") + " + std::to_string(r.burst_calls)
        + " in " + std::to_string(r.bursts) + " bursts (failed "
        + std::to_string(r.burst_failed) + ")");
  row(out, "ts_latency",
      "p50 " + fmt_ms(r.ts.p50) + ", p99 " + fmt_ms(r.ts.p99) + " (steady)");
  if (const auto& c = r.stack.oracle)
    row(out, "ts_rpcs",
        std::to_string(c->batches.rpcs) + " for " + std::to_string(c->calls)
          + " calls (one RPC per call: " + std::to_string(c->calls)
          + "; mean batch "
          + fmt_num(c->batches.rpcs
                      ? double(c->batches.joined) / double(c->batches.rpcs)
                      : 0.0)
          + ", leader changes " + std::to_string(c->leader_changes) + ")");
  if (const auto& c = r.stack.oracle; c && r.bursts > 0) {
    // The driver's totals split by time: from just before each burst to
    // its last answer (the steady calls of those moments included), and
    // the rest of the run.
    auto in_rpcs = std::min(r.burst_window_rpcs, c->batches.rpcs);
    auto in_calls = std::min(r.burst_window_calls, c->calls);
    auto batch = [](uint64_t calls, uint64_t rpcs) {
      return fmt_num(rpcs ? double(calls) / double(rpcs) : 0.0);
    };
    row(out, "ts_rpcs_split",
        "bursts: " + std::to_string(in_rpcs) + " for "
          + std::to_string(in_calls) + " calls (mean batch "
          + batch(in_calls, in_rpcs) + "); between bursts: "
          + std::to_string(c->batches.rpcs - in_rpcs) + " for "
          + std::to_string(c->calls - in_calls) + " calls (mean batch "
          + batch(c->calls - in_calls, c->batches.rpcs - in_rpcs) + ")");
  }
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
  report_call_rows(out, cfg, r);
  out << std::flush;
}

/// `v` as JSON text whose numbers read as written: integers as integers,
/// other numbers in plain decimal notation ("895.8", not Boost.JSON's
/// "8.958E2"); strings, keys and structure as boost::json::serialize.
void write_plain_json(std::ostream& os, const boost::json::value& v) {
  switch (v.kind()) {
    case boost::json::kind::object: {
      os << '{';
      bool first = true;
      for (const auto& kv : v.get_object()) {
        os << (first ? "" : ",")
           << boost::json::serialize(boost::json::string_view{kv.key()}) << ':';
        write_plain_json(os, kv.value());
        first = false;
      }
      os << '}';
      return;
    }
    case boost::json::kind::array: {
      os << '[';
      bool first = true;
      for (const auto& x : v.get_array()) {
        os << (first ? "" : ",");
        write_plain_json(os, x);
        first = false;
      }
      os << ']';
      return;
    }
    case boost::json::kind::double_: {
      auto x = v.get_double();
      if (!std::isfinite(x)) {
        os << "null";
      } else if (std::trunc(x) == x && std::abs(x) <= 0x1p53) {
        os << static_cast<int64_t>(x);
      } else {
        // The shortest fixed-point text that reads back as x.
        char buf[400];
        auto [end, ec]
          = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::fixed);
        os << (ec == std::errc{} ? std::string_view(buf, end - buf)
                                 : std::string_view{"null"});
      }
      return;
    }
    default: os << boost::json::serialize(v);
  }
}

/// Milliseconds rounded to 0.1 ms (null when there is no value).
boost::json::value json_ms(const std::optional<double>& s) {
  if (!s)
    return nullptr;
  return json_number(std::round(*s * 10000.0) / 10.0);
}

/// A fraction rounded to 4 decimals (null when there is no value).
boost::json::value json_ratio(const std::optional<double>& x) {
  if (!x)
    return nullptr;
  return json_number(std::round(*x * 10000.0) / 10000.0);
}

boost::json::object json_calls(const call_summary& s) {
  boost::json::object o;
  o["calls"] = s.calls();
  o["failed"] = s.failed;
  o["p50_ms"] = json_ms(s.p50);
  o["p99_ms"] = json_ms(s.p99);
  o["p999_ms"] = json_ms(s.p999);
  o["max_ms"] = json_ms(s.max);
  o["extra_load"] = json_ratio(s.extra_load());
  if (s.hub_requests)
    o["hub_requests"] = *s.hub_requests;
  else
    o["hub_requests"] = nullptr;
  return o;
}

/// The report as one JSON document (`--report json`; README).
boost::json::object report_json(const demo_config& cfg, const hub_site& site,
                                const demo_outcome& r) {
  namespace json = boost::json;
  json::object doc;
  doc["run_seconds"] = json_number(std::round(r.run_seconds * 10.0) / 10.0);
  doc["signalled"] = r.signalled;
  doc["hub"] = site.base_url;
  doc["hub_mode"] = site.embedded ? "embedded" : "external";
  doc["metrics"] = r.metrics_url;
  json::object hedging;
  hedging["hedged"] = json_calls(r.hedged);
  if (r.unhedged_ran)
    hedging["unhedged"] = json_calls(r.unhedged);
  else
    hedging["unhedged"] = nullptr;
  const auto& h = r.stack.hedging;
  hedging["hedges_sent"] = h.hedged_requests;
  hedging["hedge_wins"] = h.hedge_wins;
  hedging["hedge_budget_exhausted"] = h.budget_exhausted;
  doc["hedging"] = std::move(hedging);
  const auto& o = r.outage;
  if (o.ran) {
    json::object out;
    out["route"] = cfg.outage.route;
    out["start_s"] = json_number(cfg.outage.start);
    out["seconds"] = json_number(std::round(o.seconds * 1000.0) / 1000.0);
    auto per_s = [&](double n) {
      return json_number(std::round(n / o.seconds * 10.0) / 10.0);
    };
    out["outbound_attempts"] = o.outbound_attempts;
    out["outbound_calls"] = o.primaries;
    out["outbound_attempts_per_s"] = per_s(double(o.outbound_attempts));
    out["naive_attempts"] = o.naive_attempts;
    out["naive_attempts_per_s"] = per_s(double(o.naive_attempts));
    out["ceiling"] = json_number(std::floor(o.ceiling));
    out["ceiling_per_s"] = per_s(o.ceiling);
    out["budget_refusals"] = o.refusals;
    json::object br;
    br["opened"] = r.outage_breakers[0];
    br["half_opened"] = r.outage_breakers[1];
    br["closed"] = r.outage_breakers[2];
    out["breaker_transitions"] = std::move(br);
    doc["outage"] = std::move(out);
  } else {
    doc["outage"] = nullptr;
    if (!o.unmeasured.empty())
      doc["outage_unmeasured"] = o.unmeasured;
  }
  if (r.oracle) {
    json::object c;
    c["steady_calls"] = r.ts.calls();
    c["burst_calls"] = r.burst_calls;
    c["bursts"] = r.bursts;
    c["failed"] = r.ts.failed + r.burst_failed;
    c["steady_p50_ms"] = json_ms(r.ts.p50);
    c["steady_p99_ms"] = json_ms(r.ts.p99);
    if (const auto& s = r.stack.oracle) {
      c["calls"] = s->calls;
      c["rpcs"] = s->batches.rpcs;
      c["http_exchanges"] = s->attempts;
      c["per_call_rpcs"] = s->calls;
      // The same totals split by time (ts_rpcs_split in the text report).
      auto in_rpcs = std::min(r.burst_window_rpcs, s->batches.rpcs);
      auto in_calls = std::min(r.burst_window_calls, s->calls);
      c["burst_window_rpcs"] = in_rpcs;
      c["burst_window_calls"] = in_calls;
      c["between_bursts_rpcs"] = s->batches.rpcs - in_rpcs;
      c["between_bursts_calls"] = s->calls - in_calls;
      c["burst_window_misses"] = r.burst_window_misses;
      c["leader_changes"] = s->leader_changes;
    } else {
      c["calls"] = r.ts.calls() + r.burst_calls;
      c["rpcs"] = nullptr;
      c["http_exchanges"] = nullptr;
      c["per_call_rpcs"] = r.ts.calls() + r.burst_calls;
    }
    doc["coalescing"] = std::move(c);
  } else {
    doc["coalescing"] = nullptr;
  }
  json::object f;
  f["watchers"] = cfg.feeds;
  // The text report's split of the watchers over the hub's tiers.
  f["tiers"] = json::object{{"ledger", r.per_tier[0]},
                            {"catchup", r.per_tier[1]},
                            {"ephemeral", r.per_tier[2]}};
  f["published"] = r.published;
  f["delivered"] = r.audit.delivered;
  f["foreign"] = r.audit.foreign;
  f["lost"] = r.audit.lost;
  f["duplicated"] = r.audit.duplicated;
  f["pending"] = r.audit.pending;
  f["announced_lost"] = r.audit.announced;
  f["resets"] = r.resets;
  json::object causes;
  for (const auto& [name, n] : r.resets_by_cause)
    causes[name] = n;
  f["resets_by_cause"] = std::move(causes);
  f["hub_restarted"] = r.restarted;
  f["connected_at_end"] = r.stack.feeds.connected;
  // The text report's feed_* rows, so that a JSON reader can check them
  // too (0 in a healthy run, README).
  const auto& fs = r.stack.feeds;
  f["reconnects"] = fs.reconnects;
  f["peer_timeouts"] = fs.peer_timeouts;
  f["overflows"] = fs.overflows;
  f["drain_errors"] = fs.drain_errors;
  f["replay_errors"] = fs.replay_errors;
  f["publish_failed"] = r.publish_failed;
  doc["feeds"] = std::move(f);
  // The breakers at the end, as the text report's breakers row.
  json::object br;
  br["closed"] = r.breakers.closed;
  br["open"] = r.breakers.open;
  br["half_open"] = r.breakers.half_open;
  br["unknown"] = r.breakers.unknown;
  json::array open_keys;
  for (const auto& k : r.breakers.open_keys)
    open_keys.emplace_back(k);
  br["open_keys"] = std::move(open_keys);
  doc["breakers"] = std::move(br);
  return doc;
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
                  bool json_report, std::ostream& out, std::ostream& err) {
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
  auto side = make_side_clients(sys, cfg, site, stack);
  r.unhedged_ran = side.unhedged != nullptr;
  start_feeds(stack, cfg, counters, r.per_tier);
  // With --report json, stdout carries the report alone.
  print_first_line(json_report ? err : out, metrics_url, site, cfg);
  publish_log log;
  demo_traffic traffic{cfg,      sys, stack,        side, site.embedded.get(),
                       families, log, counters->run};
  traffic.start();
  r.signalled = status_lines(cfg, traffic, stack, probe, *counters, side,
                             site.embedded.get(), sigs, err);
  // The paced traffic is due before t0 + duration (demo_traffic::end): the
  // report's rates are over that time, not over a late last status line.
  r.run_seconds = std::min(seconds_since(traffic.t0), cfg.duration);
  // A second Ctrl-C while stopping ends the process the default way.
  pthread_sigmask(SIG_UNBLOCK, &sigs, nullptr);
  traffic.join();
  r.restarted = traffic.restarted.load();
  if (!r.signalled)
    settle_ledger_feeds(*counters, log, 5s);
  r.breakers = probe.breakers();
  if (side.outage)
    r.outage_breakers = probe.breaker_transitions(*side.outage);
  r.stack = stack.stop();
  side.stop();
  probe.close();
  take_books(traffic, site.embedded.get(), r);
  take_feed_counters(*counters, log, r);
  if (json_report) {
    write_plain_json(out, report_json(cfg, site, r));
    out << std::endl;
  } else
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
    } catch (const config_error& e) {
      // The exposer names its own field; here it is the demo's, with what
      // to do about a port in use.
      std::string why = e.what();
      why.erase(0, std::min(why.size(), e.field().size() + 2));
      rc = fail("metrics_error",
                config_error("demo.metrics_port",
                             why
                               + " (--metrics-port P listens on another "
                                 "port, --metrics-port 0 on a free one)"));
    } catch (const std::exception& e) {
      rc = fail("metrics_error", e);
    }
    if (exposer)
      rc = run_on_system(cfg, site, registry, exposer->url(), sigs,
                         opts.report == "json", out, err);
  } catch (const std::exception& e) {
    rc = fail("internal_error", e);
  }
  if (site.embedded)
    site.embedded->stop();
  return rc;
}

} // namespace outbound::apps
