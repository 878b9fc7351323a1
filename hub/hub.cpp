#include "hub/hub.hpp"

#include "protocol/json_parse.hpp"

#include "config/config_error.hpp"
#include "hub/hub_impl.hpp"
#include "hub/subject.hpp"

#include <boost/asio/ip/address.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include <fcntl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>

namespace outbound {

namespace net = boost::asio;
namespace json = boost::json;

// -- hub_config ----------------------------------------------------------------

publish_limits hub_config::publishing() const {
  publish_limits l;
  l.metadata_max_bytes = metadata_max_bytes;
  l.metadata_max_depth = metadata_max_depth;
  l.subject_max_bytes = subject_max_bytes;
  l.event_max_bytes = event_max_bytes;
  return l;
}

void hub_config::validate() const {
  boost::system::error_code ec;
  net::ip::make_address(host, ec);
  if (ec)
    throw config_error("host", "must be an IP address, got '" + host + "'");
  if (replay_limit < 1)
    throw config_error("replay_limit", "must be >= 1");
  if (threads < 1)
    throw config_error("threads", "must be >= 1");
  if (queue_max < 1)
    throw config_error("queue_max", "must be >= 1");
  if (metadata_max_bytes < 2)
    throw config_error("metadata_max_bytes", "must be >= 2");
  // A replay page wraps metadata in three levels (page, events, event).
  if (metadata_max_depth < 1 || metadata_max_depth + 3 > default_json_max_depth)
    throw config_error("metadata_max_depth",
                       "must be in [1, "
                         + std::to_string(default_json_max_depth - 3) + "]");
  if (subject_max_bytes < 1)
    throw config_error("subject_max_bytes", "must be >= 1");
  if (event_max_bytes < metadata_max_bytes + event_json_overhead + 4)
    throw config_error("event_max_bytes",
                       "must be >= metadata_max_bytes + "
                         + std::to_string(event_json_overhead + 4));
  if (replay_limit >= 1
      && event_max_bytes > max_replay_page_bytes
                             / static_cast<std::size_t>(replay_limit))
    throw config_error("event_max_bytes",
                       "replay_limit * event_max_bytes must be <= "
                         + std::to_string(max_replay_page_bytes)
                         + " (a page a default client can read)");
  if (ws_read_max < 1024)
    throw config_error("ws_read_max", "must be >= 1024");
  if (faults.fragment_bytes < 1)
    throw config_error("faults.fragment_bytes", "must be >= 1");
  if (!(faults.drop_wake_probability >= 0.0
        && faults.drop_wake_probability <= 1.0))
    throw config_error("faults.drop_wake_probability", "must be in [0, 1]");
  if (!(faults.restart_every >= 0.0))
    throw config_error("faults.restart_every", "must be >= 0");
  if (!(faults.drop_every >= 0.0) || !std::isfinite(faults.drop_every))
    throw config_error("faults.drop_every", "must be >= 0");
  if (!is_drop_tier(faults.drop_tier))
    throw config_error("faults.drop_tier",
                       "must be ledger, catchup, ephemeral or all, got '"
                         + faults.drop_tier + "'");
  if (!is_outage_path(faults.outage_path))
    throw config_error("faults.outage_path",
                       "must be empty or a latency route (/fast, /slow, "
                       "/flaky, /lognormal, /steady), got '"
                         + faults.outage_path + "'");
  if (faults.outage_status < 500 || faults.outage_status > 599)
    throw config_error("faults.outage_status", "must be in [500, 599]");
  if (cluster_size < 1 || cluster_size > 16)
    throw config_error("cluster_size", "must be in [1, 16]");
  if (port != 0 && port + cluster_size - 1 > 65535)
    throw config_error("cluster_size", "port + cluster_size - 1 must be "
                                       "<= 65535");
  if (!(oracle_stall_seconds > 0.0) || !std::isfinite(oracle_stall_seconds))
    throw config_error("oracle_stall_seconds", "must be > 0");
  if (oracle_max_seq_keys < 1)
    throw config_error("oracle_max_seq_keys", "must be >= 1");
}

// -- impl: lifecycle -------------------------------------------------------------

namespace {

hub_state_config state_config(const hub_config& c) {
  hub_state_config s;
  s.ring_size = c.ring_size;
  s.retention = c.retention;
  s.replay_limit = c.replay_limit;
  s.dedupe_capacity = c.dedupe_capacity;
  s.max_clients = c.max_clients;
  s.metadata_max_bytes = c.metadata_max_bytes;
  return s;
}

std::mt19937_64 make_rng(const hub_config& c) {
  if (c.seed)
    return std::mt19937_64{*c.seed};
  std::random_device rd;
  std::seed_seq seq{rd(), rd(), rd(), rd()};
  return std::mt19937_64{seq};
}

// The epoch comes first out of the rng, so that a given seed gives a given
// epoch.
struct seeded {
  std::mt19937_64 rng;
  std::string epoch;
};

seeded seed_from(const hub_config& c) {
  seeded s{make_rng(c), {}};
  s.epoch = make_hub_epoch(s.rng);
  return s;
}

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

uint64_t now_unix_ms() {
  using namespace std::chrono;
  auto ms = duration_cast<milliseconds>(system_clock::now().time_since_epoch())
              .count();
  return ms > 0 ? static_cast<uint64_t>(ms) : 0;
}

oracle_config oracle_config_of(const hub_config& c) {
  oracle_config o;
  o.nodes = c.cluster_size;
  o.stall_seconds = c.oracle_stall_seconds;
  o.max_seq_keys = c.oracle_max_seq_keys;
  o.seq_supported = c.oracle_seq_supported;
  return o;
}

std::string host_port(const std::string& host, uint16_t port) {
  auto h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return h + ":" + std::to_string(port);
}

/// Opens, binds and listens; close-on-exec (see hub::impl::start).
void open_listener(net::ip::tcp::acceptor& a, const net::ip::tcp::endpoint& ep,
                   boost::system::error_code& ec) {
  a.open(ep.protocol(), ec);
  if (!ec)
    ::fcntl(a.native_handle(), F_SETFD, FD_CLOEXEC);
  if (!ec)
    a.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec)
    a.bind(ep, ec);
  if (!ec)
    a.listen(net::socket_base::max_listen_connections, ec);
}

} // namespace

hub::impl::impl(hub_config c)
  : cfg(std::move(c)), state(state_config(cfg), cfg.faults, {}),
    oracle(oracle_config_of(cfg)) {
  auto s = seed_from(cfg);
  rng = s.rng;
  state.ring().restart(s.epoch);
  profile_seed = cfg.seed ? *cfg.seed : rng();
  // The ledger lives in this process's memory, so each process is a new
  // ledger incarnation: its epoch is drawn from std::random_device even
  // with --seed, or a restarted hub with the same seed would pass for the
  // old ledger (its watchers would wait for ids that never come).
  std::random_device rd;
  std::mt19937_64 ledger_rng{(static_cast<uint64_t>(rd()) << 32) ^ rd()
                             ^ static_cast<uint64_t>(now_unix_ms())};
  auto epoch = make_hub_epoch(ledger_rng);
  if (!cfg.ledger_file.empty()) {
    // Loaded events were visible before the restart: no lag for them.
    state.ledger().set_visibility_lag(0);
    lfile = std::make_unique<ledger_file>(cfg.ledger_file, state.ledger(),
                                          epoch, cfg.publishing());
    state.ledger().set_visibility_lag(cfg.faults.visibility_lag_polls);
    epoch = lfile->epoch();
  }
  state.set_ledger_epoch(std::move(epoch));
}

hub::impl::~impl() {
  stop();
  for (auto& set : subscribers)
    set.clear();
  others.clear();
  http_sessions.clear();
  restart_timer.reset();
  drop_timer.reset();
  acceptor.reset();
  node_acceptors.clear();
  // Handlers still queued die with the context; they may hold sessions,
  // whose destructors only close their own sockets.
  ioc.reset();
}

void hub::impl::start() {
  {
    std::lock_guard<std::mutex> lock{mu};
    if (started)
      throw std::logic_error("hub: start() called twice");
    started = true;
  }
  ioc.emplace(cfg.threads);
  boost::system::error_code ec;
  auto addr = net::ip::make_address(cfg.host, ec);
  if (ec)
    throw std::runtime_error("hub: bad host '" + cfg.host + "'");
  net::ip::tcp::endpoint ep{addr, cfg.port};
  acceptor.emplace(net::make_strand(*ioc));
  acceptor->open(ep.protocol(), ec);
  // Asio does not open sockets close-on-exec: without it a process that
  // runs a hub and spawns a child (a test running the CLI) leaks the
  // listener into the child, which keeps the port accepting after stop().
  if (!ec)
    ::fcntl(acceptor->native_handle(), F_SETFD, FD_CLOEXEC);
  if (!ec)
    acceptor->set_option(net::socket_base::reuse_address(true), ec);
  if (!ec)
    acceptor->bind(ep, ec);
  if (!ec)
    acceptor->listen(net::socket_base::max_listen_connections, ec);
  if (ec)
    throw std::runtime_error("hub: cannot listen on " + cfg.host + ":"
                             + std::to_string(cfg.port) + ": "
                             + ec.message());
  bound_port = acceptor->local_endpoint().port();
  // The other oracle nodes: one listener each, same io context.
  std::vector<std::string> addresses{host_port(cfg.host, bound_port)};
  for (std::size_t i = 1; i < cfg.cluster_size; ++i) {
    uint16_t port = cfg.port == 0 ? 0 : static_cast<uint16_t>(cfg.port + i);
    net::ip::tcp::endpoint node_ep{addr, port};
    auto a = std::make_unique<net::ip::tcp::acceptor>(net::make_strand(*ioc));
    open_listener(*a, node_ep, ec);
    if (ec)
      throw std::runtime_error("hub: cannot listen on " + cfg.host + ":"
                               + std::to_string(port) + " (oracle node "
                               + std::to_string(i) + "): " + ec.message());
    node_ports.push_back(a->local_endpoint().port());
    addresses.push_back(host_port(cfg.host, node_ports.back()));
    node_acceptors.push_back(std::move(a));
  }
  {
    std::lock_guard<std::mutex> lock{oracle_mu};
    oracle.set_addresses(addresses);
  }
  restart_timer.emplace(net::make_strand(*ioc));
  drop_timer.emplace(net::make_strand(*ioc));
  hub_start_accepting(*this);
  for (std::size_t i = 0; i < node_acceptors.size(); ++i)
    hub_start_accepting_node(*this, *node_acceptors[i], i + 1);
  {
    std::lock_guard<std::mutex> lock{mu};
    arm_restart_timer();
    arm_drop_timer();
  }
  guard.emplace(net::make_work_guard(*ioc));
  running_threads = cfg.threads;
  for (int i = 0; i < cfg.threads; ++i)
    threads.emplace_back([this] {
      for (;;) {
        try {
          ioc->run();
          break;
        } catch (...) {
          // A throwing handler must not end the server thread.
        }
      }
      std::lock_guard<std::mutex> lock{exit_mu};
      --running_threads;
      exit_cv.notify_all();
    });
}

void hub::impl::stop() {
  std::vector<std::shared_ptr<hub_ws_session>> ws;
  std::vector<std::shared_ptr<hub_http_session>> http;
  {
    std::lock_guard<std::mutex> lock{mu};
    if (!started || stopping)
      return;
    stopping = true;
    for (auto& set : subscribers)
      ws.insert(ws.end(), set.begin(), set.end());
    ws.insert(ws.end(), others.begin(), others.end());
    for (auto& w : http_sessions)
      if (auto s = w.lock())
        http.push_back(std::move(s));
    ++restart_generation_;
    ++drop_generation_;
  }
  if (!ioc)
    return;
  for (auto& s : ws)
    s->shutdown(0);
  for (auto& s : http)
    s->shutdown();
  if (acceptor)
    net::post(acceptor->get_executor(), [this] {
      boost::system::error_code ec;
      acceptor->close(ec);
    });
  for (auto& a : node_acceptors)
    net::post(a->get_executor(), [a = a.get()] {
      boost::system::error_code ec;
      a->close(ec);
    });
  if (restart_timer)
    net::post(restart_timer->get_executor(),
              [this] { restart_timer->cancel(); });
  if (drop_timer)
    net::post(drop_timer->get_executor(), [this] { drop_timer->cancel(); });
  guard.reset();
  {
    // Every socket is closing: the threads run out of work on their own.
    // Whatever still waits after the grace period is cut off.
    std::unique_lock<std::mutex> lock{exit_mu};
    if (!exit_cv.wait_for(lock, std::chrono::seconds{3},
                          [this] { return running_threads == 0; }))
      ioc->stop();
  }
  for (auto& t : threads)
    if (t.joinable())
      t.join();
  threads.clear();
  std::lock_guard<std::mutex> lock{mu};
  for (auto& set : subscribers)
    set.clear();
  others.clear();
  http_sessions.clear();
}

// -- impl: restart timer -----------------------------------------------------------

void hub::impl::arm_restart_timer() {
  // Called with `mu` held (or before the io threads exist); the timer itself
  // is only touched on its strand. A newer generation makes older waits moot.
  double every = state.faults().restart_every;
  uint64_t gen = ++restart_generation_;
  if (!restart_timer)
    return;
  net::post(restart_timer->get_executor(), [this, every, gen] {
    restart_timer->cancel();
    if (every <= 0.0)
      return;
    restart_timer->expires_after(
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(every)));
    restart_timer->async_wait([this, gen](boost::system::error_code ec) {
      if (ec)
        return;
      std::lock_guard<std::mutex> lock{mu};
      if (stopping || gen != restart_generation_)
        return;
      restart_locked();
      arm_restart_timer();
    });
  });
}

void hub::impl::arm_drop_timer() {
  // Like arm_restart_timer: `mu` held, the timer only touched on its strand.
  double every = state.faults().drop_every;
  uint64_t gen = ++drop_generation_;
  if (!drop_timer)
    return;
  net::post(drop_timer->get_executor(), [this, every, gen] {
    drop_timer->cancel();
    if (every <= 0.0)
      return;
    drop_timer->expires_after(
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(every)));
    drop_timer->async_wait([this, gen](boost::system::error_code ec) {
      if (ec)
        return;
      std::lock_guard<std::mutex> lock{mu};
      if (stopping || gen != drop_generation_)
        return;
      drop_locked(parse_hub_tier(state.faults().drop_tier));
      arm_drop_timer();
    });
  });
}

// -- impl: sessions --------------------------------------------------------------

std::optional<hub_tier> hub::impl::ws_tier(const std::string& path) const {
  if (path == "/ws/feed")
    return cfg.mode;
  if (path == "/ws/ledger")
    return hub_tier::ledger;
  if (path == "/ws/catchup")
    return hub_tier::catchup;
  if (path == "/ws/ephemeral")
    return hub_tier::ephemeral;
  return std::nullopt;
}

connection_plan hub::impl::on_ws_open(const std::shared_ptr<hub_ws_session>& s) {
  ++counters.ws_upgrades;
  std::lock_guard<std::mutex> lock{mu};
  if (stopping) {
    connection_plan p;
    p.accept_then_close = true;
    return p;
  }
  others.insert(s);
  return state.take_connection_plan();
}

void hub::impl::on_subscribe(const std::shared_ptr<hub_ws_session>& s,
                             hub_tier tier, const subscribe_request& req,
                             const connection_plan& plan) {
  std::lock_guard<std::mutex> lock{mu};
  if (stopping)
    return;
  auto out = state.subscribe(tier, req, plan.no_hello);
  s->tier = tier;
  s->prefixes = req.prefixes;
  s->boundary = out.boundary;
  // A connection that goes silent or breaks its framing after the hello is
  // kept apart from the fan-out (but still closed at stop and restart).
  if (!plan.go_silent && plan.oversized_frame_bytes == 0) {
    others.erase(s);
    subscribers[static_cast<int>(tier)].insert(s);
  }
  s->push_hello(out);
}

void hub::impl::on_ws_close(const hub_ws_session* s) {
  std::lock_guard<std::mutex> lock{mu};
  for (auto& set : subscribers)
    set.erase(s);
  for (auto i = others.begin(); i != others.end(); ++i)
    if (i->get() == s) {
      others.erase(i);
      return;
    }
}

void hub::impl::on_ws_detach(const std::shared_ptr<hub_ws_session>& s) {
  std::lock_guard<std::mutex> lock{mu};
  bool found = false;
  for (auto& set : subscribers)
    found = set.erase(s) > 0 || found;
  if (found && !stopping)
    others.insert(s);
}

void hub::impl::on_http_open(const std::shared_ptr<hub_http_session>& s) {
  std::lock_guard<std::mutex> lock{mu};
  // Prune closed sessions whenever the list doubled since the last prune:
  // amortised O(1) per connection, at most twice the open ones kept.
  if (http_sessions.size() >= http_prune_at_) {
    std::vector<std::weak_ptr<hub_http_session>> keep;
    for (auto& w : http_sessions)
      if (!w.expired())
        keep.push_back(std::move(w));
    http_sessions.swap(keep);
    http_prune_at_ = std::max<std::size_t>(64, 2 * http_sessions.size());
  }
  http_sessions.push_back(s);
}

// -- impl: fan-out ------------------------------------------------------------------

publish_outcome hub::impl::publish(const publish_input& in) {
  auto ts = now_seconds();
  std::lock_guard<std::mutex> lock{mu};
  return publish_locked(in, ts);
}

publish_outcome hub::impl::publish_locked(const publish_input& in, double ts) {
  auto out = state.publish(in, ts);
  if (!out.duplicate && lfile && !lfile->append(*out.event) && !lfile_failed) {
    lfile_failed = true;
    std::fprintf(stderr, "hub: writing the ledger file failed; it was "
                         "emptied: a restart is a new ledger incarnation\n");
  }
  if (!out.duplicate)
    fan_out_locked(out);
  return out;
}

void hub::impl::fan_out_locked(const publish_outcome& out) {
  const auto& ev = *out.event;
  if (!out.fired_script.empty()) {
    emit_wakes_locked(out.fired_script);
  } else if (!out.wake_held) {
    subscribers[static_cast<int>(hub_tier::ledger)].for_each_match(
      ev.subject, [&](hub_ws_session* s) {
        if (!state.drop_wake(rng))
          s->push_wake(ev.id);
      });
  }
  for (auto t : {hub_tier::catchup, hub_tier::ephemeral})
    subscribers[static_cast<int>(t)].for_each_match(
      ev.subject, [&](hub_ws_session* s) {
        if (out.seq > s->boundary)
          s->push_event(out.frame);
      });
}

void hub::impl::emit_wakes_locked(const std::vector<int64_t>& cursors) {
  for (auto& s : subscribers[static_cast<int>(hub_tier::ledger)])
    s->push_wakes(cursors);
}

void hub::impl::emit_wakes(const std::vector<int64_t>& cursors) {
  std::lock_guard<std::mutex> lock{mu};
  emit_wakes_locked(cursors);
}

std::string hub::impl::restart_locked() {
  auto epoch = make_hub_epoch(rng);
  state.restart(epoch);
  std::vector<std::shared_ptr<hub_ws_session>> all;
  for (auto& set : subscribers) {
    all.insert(all.end(), set.begin(), set.end());
    set.clear();
  }
  all.insert(all.end(), others.begin(), others.end());
  // `others` keeps them until their sockets are closed (stop may still need
  // them); each removes itself in on_ws_close.
  for (auto& s : all) {
    others.insert(s);
    s->shutdown(1012);
  }
  return epoch;
}

std::size_t hub::impl::drop_locked(std::optional<hub_tier> tier) {
  std::vector<std::shared_ptr<hub_ws_session>> victims;
  if (tier) {
    auto& set = subscribers[static_cast<int>(*tier)];
    victims.assign(set.begin(), set.end());
    set.clear();
  } else {
    for (auto& set : subscribers) {
      victims.insert(victims.end(), set.begin(), set.end());
      set.clear();
    }
    victims.insert(victims.end(), others.begin(), others.end());
  }
  // Out of the fan-out at once (so nothing published from now on is queued
  // for them); `others` keeps them until their sockets are closed, each
  // removes itself in on_ws_close.
  for (auto& s : victims) {
    others.insert(s);
    s->shutdown(0);
  }
  ++counters.drops;
  counters.dropped += victims.size();
  return victims.size();
}

std::size_t hub::impl::drop_connections(std::optional<hub_tier> tier) {
  std::lock_guard<std::mutex> lock{mu};
  if (stopping)
    return 0;
  return drop_locked(tier);
}

std::string hub::impl::restart() {
  std::lock_guard<std::mutex> lock{mu};
  return restart_locked();
}

std::optional<std::string> hub::impl::apply_faults(const std::string& body) {
  auto parsed = parse_json(body);
  auto& v = parsed.value;
  if (!parsed || !v.is_object())
    return std::string{"body must be a JSON object of fault knobs"};
  const auto& patch = v.get_object();
  std::optional<uint64_t> seed;
  bool silence = false;
  if (auto* s = patch.if_contains("seed")) {
    if (s->is_uint64())
      seed = s->get_uint64();
    else if (s->is_int64() && s->get_int64() >= 0)
      seed = static_cast<uint64_t>(s->get_int64());
    else
      return std::string{"'seed' must be an integer >= 0"};
  }
  if (auto* s = patch.if_contains("silence_now")) {
    if (!s->is_bool())
      return std::string{"'silence_now' must be a boolean"};
    silence = s->get_bool();
  }
  std::optional<std::string> drop_now;
  if (auto* s = patch.if_contains("drop_now")) {
    if (!s->is_string() || !is_drop_tier(s->get_string()))
      return std::string{"'drop_now' must be \"ledger\", \"catchup\", "
                         "\"ephemeral\" or \"all\""};
    drop_now = std::string{s->get_string()};
  }
  std::lock_guard<std::mutex> lock{mu};
  auto every = state.faults().restart_every;
  auto drop_every = state.faults().drop_every;
  if (auto err = state.apply_admin(patch, {"seed", "silence_now", "drop_now"}))
    return err;
  if (seed)
    rng.seed(*seed);
  if (silence) {
    for (auto& set : subscribers) {
      for (auto& s : set) {
        others.insert(s);
        s->go_silent();
      }
      set.clear();
    }
  }
  auto due = state.take_due_script();
  if (!due.empty())
    emit_wakes_locked(due);
  if (state.faults().restart_every != every)
    arm_restart_timer();
  if (state.faults().drop_every != drop_every)
    arm_drop_timer();
  if (drop_now && !stopping)
    drop_locked(parse_hub_tier(*drop_now));
  return std::nullopt;
}

std::string hub::impl::state_json() {
  std::lock_guard<std::mutex> lock{mu};
  auto o = state.state_json();
  o["mode"] = to_string(cfg.mode);
  o["port"] = bound_port;
  json::object conns;
  conns["ledger"] = subscribers[0].size();
  conns["catchup"] = subscribers[1].size();
  conns["ephemeral"] = subscribers[2].size();
  conns["other"] = others.size();
  o["connections"] = std::move(conns);
  json::object srv;
  srv["http_requests"] = counters.http_requests.load();
  srv["ws_upgrades"] = counters.ws_upgrades.load();
  srv["accept_then_close"] = counters.accept_then_close.load();
  srv["silenced"] = counters.silenced.load();
  srv["oversized_sent"] = counters.oversized_sent.load();
  srv["overflow_closes"] = counters.overflow_closes.load();
  srv["wakes_sent"] = counters.wakes_sent.load();
  srv["events_sent"] = counters.events_sent.load();
  srv["frames_sent"] = counters.frames_sent.load();
  srv["drops"] = counters.drops.load();
  srv["profile_requests"] = counters.profile_requests.load();
  json::object tags;
  for (const auto& [tag, count] : profile_tags)
    tags[tag] = count;
  if (profile_tags_other > 0)
    tags["(other)"] = profile_tags_other;
  srv["profile_tags"] = std::move(tags);
  srv["dropped"] = counters.dropped.load();
  o["server"] = std::move(srv);
  std::lock_guard<std::mutex> olock{oracle_mu};
  o["oracle"] = oracle.state_json();
  return json::serialize(o);
}

hub::impl::http_answer hub::impl::oracle_request(std::size_t node,
                                                 oracle_op op,
                                                 const std::string& body) {
  auto now = now_unix_ms();
  oracle_reply r;
  {
    std::lock_guard<std::mutex> lock{oracle_mu};
    r = oracle.handle(node, op, body, now);
  }
  http_answer a{r.status, std::move(r.body)};
  a.leader_hint = std::move(r.leader_hint);
  switch (r.delivery) {
    case oracle_delivery::answer:
      break;
    case oracle_delivery::hold:
      a.close_without_answer = true;
      a.delay = std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::duration<double>(r.hold_seconds));
      break;
    case oracle_delivery::close_silently:
      a.close_without_answer = true;
      break;
  }
  return a;
}

// -- impl: HTTP routing ------------------------------------------------------------

namespace {

using http_answer = hub::impl::http_answer;
using http_call = hub::impl::http_call;

http_answer answer(int status, std::string body) {
  return http_answer{status, std::move(body)};
}

http_answer error_answer(int status, std::string_view detail) {
  return answer(status, error_body(detail));
}

/// One row of the route table: a path, the methods it answers and its
/// handler.
struct http_route {
  std::string_view path;
  /// The methods answered, space-separated; any other is a 405. Empty: any
  /// method.
  std::string_view methods;
  http_answer (hub::impl::*handler)(const http_call&);
};

constexpr http_route http_routes[] = {
  {"/v1/events", "GET POST", &hub::impl::http_events},
  {"/v1/cursor", "GET", &hub::impl::http_cursor},
  {"/v1/ts", "POST", &hub::impl::http_oracle_op},
  {"/v1/seq", "POST", &hub::impl::http_oracle_op},
  {"/admin/faults", "POST", &hub::impl::http_faults},
  {"/admin/restart", "POST", &hub::impl::http_restart},
  {"/admin/wakes", "POST", &hub::impl::http_wakes},
  {"/admin/drop", "POST", &hub::impl::http_drop},
  {"/admin/state", "GET", &hub::impl::http_state},
  {"/admin/oracle", "GET POST", &hub::impl::http_oracle_admin},
  {"/healthz", "", &hub::impl::http_healthz},
};

bool answers_method(std::string_view methods, std::string_view method) {
  if (methods.empty())
    return true;
  while (!methods.empty()) {
    auto sp = methods.find(' ');
    if (methods.substr(0, sp) == method)
      return true;
    if (sp == std::string_view::npos)
      break;
    methods.remove_prefix(sp + 1);
  }
  return false;
}

} // namespace

http_answer hub::impl::handle_http(const std::string& method,
                                   const std::string& target,
                                   const std::string& body, std::size_t node,
                                   const std::string& idempotency_key) {
  ++counters.http_requests;
  auto t = parse_hub_target(target);
  http_call c{method, t, body, node, idempotency_key};
  for (const auto& r : http_routes) {
    if (r.path != t.path)
      continue;
    if (!answers_method(r.methods, method))
      return error_answer(405, "method not allowed");
    return (this->*r.handler)(c);
  }
  if (auto kind = latency_profile_at(t.path))
    return http_latency_profile(*kind, c);
  if (ws_tier(t.path))
    return error_answer(426, "WebSocket upgrade required");
  return error_answer(404, "not found");
}

http_answer hub::impl::http_events(const http_call& c) {
  if (c.method == "POST") {
    auto p = parse_publish(c.body, cfg.publishing());
    if (!p.input)
      return error_answer(400, p.error);
    // An Idempotency-Key (draft-ietf-httpapi-idempotency-key-header): the
    // first request with a key publishes, a repeat with the same body is
    // answered with the first answer, a repeat with another body is a 422.
    // Looked up and remembered under the same lock as the publish, so two
    // requests with one key never both publish.
    auto ts = now_seconds();
    std::lock_guard<std::mutex> lock{mu};
    http_answer a;
    if (!c.idempotency_key.empty()) {
      auto prior = state.find_idempotent(c.idempotency_key, c.body);
      if (prior.conflict)
        return error_answer(422, "Idempotency-Key reused with a different "
                                 "request body");
      if (prior.answer)
        return answer(200, *prior.answer);
    }
    auto out = publish_locked(*p.input, ts);
    a = answer(200, out.event->json);
    if (!c.idempotency_key.empty())
      state.remember_idempotent(c.idempotency_key, c.body, a.body);
    if (!out.duplicate && state.take_lost_publish_answer())
      a.close_without_answer = true; // published; the answer is lost
    return a;
  }
  auto q = parse_replay_query(c.target.query);
  if (!q.query)
    return error_answer(400, q.error);
  replay_outcome r;
  {
    std::lock_guard<std::mutex> lock{mu};
    r = state.replay(*q.query);
  }
  return answer(200, render_page(r.page, r.bare_array, state.ledger_epoch()));
}

http_answer hub::impl::http_cursor(const http_call&) {
  std::lock_guard<std::mutex> lock{mu};
  return answer(200, "{\"cursor\":" + std::to_string(state.cursor()) + "}");
}

http_answer hub::impl::http_faults(const http_call& c) {
  if (auto err = apply_faults(c.body))
    return error_answer(400, *err);
  std::lock_guard<std::mutex> lock{mu};
  return answer(200, json::serialize(to_json(state.faults())));
}

http_answer hub::impl::http_restart(const http_call&) {
  json::object o;
  o["epoch"] = restart();
  return answer(200, json::serialize(o));
}

http_answer hub::impl::http_wakes(const http_call& c) {
  auto parsed = parse_json(c.body);
  auto& v = parsed.value;
  const json::array* cursors = nullptr;
  if (parsed && v.is_object())
    if (auto* cs = v.get_object().if_contains("cursors"); cs && cs->is_array())
      cursors = &cs->get_array();
  if (!cursors)
    return error_answer(400, "body must be {\"cursors\":[...]}");
  std::vector<int64_t> list;
  for (const auto& cur : *cursors) {
    if (!cur.is_int64() || cur.get_int64() < 0)
      return error_answer(400, "cursors must be integers >= 0");
    list.push_back(cur.get_int64());
  }
  std::size_t n;
  {
    std::lock_guard<std::mutex> lock{mu};
    n = subscribers[static_cast<int>(hub_tier::ledger)].size();
    emit_wakes_locked(list);
  }
  return answer(200, "{\"connections\":" + std::to_string(n) + "}");
}

http_answer hub::impl::http_drop(const http_call& c) {
  // Body: {"tier":"ledger"|"catchup"|"ephemeral"|"all"}; empty: all.
  std::string tier = "all";
  if (!c.body.empty()) {
    auto parsed = parse_json(c.body);
    auto& v = parsed.value;
    bool ok = parsed && v.is_object();
    if (ok)
      if (auto* t = v.get_object().if_contains("tier")) {
        ok = t->is_string() && is_drop_tier(t->get_string());
        if (ok)
          tier = std::string{t->get_string()};
      }
    if (!ok)
      return error_answer(400, "body must be {\"tier\":\"ledger\"|"
                               "\"catchup\"|\"ephemeral\"|\"all\"}");
  }
  auto n = drop_connections(parse_hub_tier(tier));
  return answer(200, "{\"dropped\":" + std::to_string(n) + "}");
}

http_answer hub::impl::http_state(const http_call&) {
  return answer(200, state_json());
}

http_answer hub::impl::http_healthz(const http_call&) {
  return answer(200, "{\"ok\":true}");
}

http_answer hub::impl::http_oracle_op(const http_call& c) {
  return oracle_request(
    c.node, c.target.path == "/v1/ts" ? oracle_op::ts : oracle_op::seq, c.body);
}

http_answer hub::impl::http_oracle_admin(const http_call& c) {
  std::lock_guard<std::mutex> lock{oracle_mu};
  if (c.method == "POST")
    if (auto err = oracle.apply_admin(c.body))
      return error_answer(400, *err);
  return answer(200, json::serialize(oracle.state_json()));
}

http_answer hub::impl::http_latency_profile(latency_profile_kind kind,
                                            const http_call& c) {
  auto p = parse_latency_profile(kind, c.target.query);
  if (!p.profile)
    return error_answer(400, p.error);
  ++counters.profile_requests;
  uint64_t n;
  std::optional<int> outage;
  {
    std::lock_guard<std::mutex> lock{mu};
    if (!p.profile->tag.empty())
      count_profile_tag_locked(p.profile->tag);
    const auto& f = state.faults();
    if (!f.outage_path.empty() && c.target.path == f.outage_path)
      outage = f.outage_status;
    else
      n = profile_arrivals.next(p.profile->key, p.profile->scope);
  }
  if (outage)
    return error_answer(*outage, "outage (hub fault outage_path)");
  auto seed = p.profile->seed.value_or(profile_seed);
  auto d = latency_profile_delay(*p.profile, seed, p.profile->key, n);
  json::object o;
  o["profile"] = to_string(kind);
  o["delay_ms"] = d * 1000.0;
  o["key"] = p.profile->key;
  o["arrival"] = n;
  http_answer a{p.profile->status, json::serialize(o)};
  a.delay = std::chrono::duration_cast<std::chrono::nanoseconds>(
    std::chrono::duration<double>(d));
  return a;
}

// -- hub ------------------------------------------------------------------------------

hub::hub(hub_config cfg) {
  cfg.validate();
  impl_ = std::make_unique<impl>(std::move(cfg));
}

hub::~hub() {
  impl_->stop();
}

void hub::start() {
  impl_->start();
}

void hub::stop() {
  impl_->stop();
}

uint16_t hub::port() const {
  return impl_->bound_port;
}

std::string hub::base_url() const {
  auto host = impl_->cfg.host;
  if (host.find(':') != std::string::npos)
    host = "[" + host + "]";
  return "http://" + host + ":" + std::to_string(port());
}

hub_published hub::publish(const std::string& subject, const std::string& kind,
                           const std::string& metadata_json,
                           const std::string& dedupe_key) {
  // The metadata text is spliced in, not re-parsed here, so parse_publish
  // reports its depth, numbers and size as it does for POST /v1/events.
  const std::string md = metadata_json.empty() ? "{}" : metadata_json;
  auto check = parse_json(md);
  if (check.error == json_parse_error::syntax
      || (check && !check.value.is_object()))
    throw std::invalid_argument("metadata must be an object");
  json::object head;
  head["subject"] = subject;
  head["kind"] = kind;
  if (!dedupe_key.empty())
    head["dedupe_key"] = dedupe_key;
  auto body = json::serialize(head);
  body.pop_back();
  body += ",\"metadata\":" + md + "}";
  auto p = parse_publish(body, impl_->cfg.publishing());
  if (!p.input)
    throw std::invalid_argument(p.error);
  auto out = impl_->publish(*p.input);
  return {out.event->id, out.event->seq, out.duplicate, out.event->json};
}

void hub::set_faults(const std::string& patch_json) {
  if (auto err = impl_->apply_faults(patch_json))
    throw std::invalid_argument(*err);
}

uint64_t hub::profile_requests(const std::string& tag) const {
  std::lock_guard<std::mutex> lock{impl_->mu};
  auto it = impl_->profile_tags.find(tag);
  return it == impl_->profile_tags.end() ? 0 : it->second;
}

std::string hub::restart() {
  return impl_->restart();
}

std::size_t hub::drop_connections(const std::string& tier) {
  if (!is_drop_tier(tier))
    throw std::invalid_argument("tier must be ledger, catchup, ephemeral or "
                                "all, got '" + tier + "'");
  return impl_->drop_connections(parse_hub_tier(tier));
}

std::string hub::state_json() const {
  return impl_->state_json();
}

std::string hub::epoch() const {
  std::lock_guard<std::mutex> lock{impl_->mu};
  return impl_->state.ring().epoch();
}

std::vector<std::string> hub::oracle_endpoints() const {
  std::lock_guard<std::mutex> lock{impl_->oracle_mu};
  return impl_->oracle.addresses();
}

std::optional<std::size_t> hub::oracle_leader() const {
  std::lock_guard<std::mutex> lock{impl_->oracle_mu};
  return impl_->oracle.leader();
}

uint64_t hub::oracle_epoch() const {
  std::lock_guard<std::mutex> lock{impl_->oracle_mu};
  return impl_->oracle.epoch();
}

uint64_t hub::move_leader(std::optional<std::size_t> node) {
  std::lock_guard<std::mutex> lock{impl_->oracle_mu};
  return impl_->oracle.set_leader(node);
}

void hub::set_node_mode(std::size_t node, oracle_node_mode mode) {
  std::lock_guard<std::mutex> lock{impl_->oracle_mu};
  impl_->oracle.set_mode(node, mode);
}

void hub::set_oracle(const std::string& admin_json) {
  std::lock_guard<std::mutex> lock{impl_->oracle_mu};
  if (auto err = impl_->oracle.apply_admin(admin_json))
    throw std::invalid_argument(*err);
}

} // namespace outbound
