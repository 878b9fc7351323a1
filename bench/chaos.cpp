// bench/chaos: ledger, catchup and ephemeral feed watchers against a real
// `outbound hub` process that misbehaves on schedule, in one bounded run
// that stops by itself. Traffic only on 127.0.0.1.
//
// The hub child runs with dropped wakes (--drop-wake-probability) and
// replay visibility lag (--visibility-lag). The publisher thread publishes
// --events events at --rate, each stamped {"n": publish number, "t": send
// time}, and at evenly spaced points it also
//   - sends duplicate and stale wakes      (POST /admin/wakes),
//   - hard-closes every WebSocket          (POST /admin/drop),
//   - restarts the catch-up tier           (POST /admin/restart: new epoch),
//   - kills the hub process (SIGKILL) and starts a new one on the same port,
//     alternately with a fresh ledger (a new ledger incarnation: ledger
//     watchers must rewind) and with the same ledger file (the same
//     incarnation: ledger watchers must go on without a reset).
// Because the publisher does every restart itself, it knows each confirmed
// event's hub process, catch-up epoch, ledger id and catch-up seq.
//
// Per tier it prints: published (confirmed publishes), deliveries, lost
// (a confirmed event a watcher neither delivered nor had covered by a typed
// reset), duplicated and reordered (within the deliveries between two
// resets), resets by cause, and publish->delivery latency p50/p99 (send
// time of the publish to the callback; the wake is not visible from here).
// A reset covers an event when the event is in its lost range
// (lost_from, lost_to] of the same incarnation, or, when the range's end is
// unknown, when the event was confirmed before the reset was delivered (the
// application's resync at that moment reads it from the producer).
// Exit code 0 only when lost, duplicated and reordered are all 0.
//
// Soak mode (--soak-seconds S): --soak-feeds ledger feeds (10,000), one
// watcher each on its own subject prefix, stay connected while a load actor
// sends --soak-rps calls per second (5,000) to the hub's /fast route and
// events are published round robin over the feeds at --soak-event-rate
// (100/s). After --soak-warmup seconds (60) of that load it takes the start
// RSS, runs S seconds, prints RSS every 10 % and at the end, and exits 0
// only when the growth from start to end is below 5 %, no call failed, every
// watcher connected, and every feed delivered exactly its events.

#include "bench/caf_setup.hpp"

#include "actors/client/blocking_client.hpp"
#include "actors/client/service_client.hpp"
#include "actors/feed/feed_config.hpp"
#include "actors/feed/feed_messages.hpp"
#include "actors/feed/feed_watcher.hpp"
#include "actors/messages.hpp"
#include "config/client_config.hpp"
#include "protocol/io_runner.hpp"
#include "protocol/ws_session.hpp"

#include <CLI/CLI.hpp>
#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scheduler/abstract_coordinator.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>

#include <fcntl.h>
#include <sys/resource.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
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
using namespace std::chrono_literals;
using clk = std::chrono::steady_clock;
namespace json = boost::json;

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
           clk::now().time_since_epoch())
    .count();
}

int64_t rss_bytes() {
  std::ifstream in{"/proc/self/statm"};
  int64_t size = 0, resident = 0;
  in >> size >> resident;
  return resident * static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
}

struct options {
  std::string cli = OUTBOUND_CLI;
  int ledger = 10;
  int catchup = 10;
  int ephemeral = 10;
  int64_t events = 20000;
  double rate = 2000;
  int hub_restarts = 4;
  int catchup_restarts = 4;
  int drops = 4;
  int dup_wakes = 20;
  double drop_wake_probability = 0.2;
  int visibility_lag = 1;
  int ring_size = 1024;
  double max_seconds = 300;
  double settle_seconds = 30;
  uint64_t seed = 1;
  std::string ledger_path;
  double soak_seconds = 0;
  int soak_feeds = 10000;
  double soak_rps = 5000;
  double soak_event_rate = 100;
  double soak_warmup = 60;
};

// -- the hub process ----------------------------------------------------------------

/// `outbound hub` as a child; stdout read through a pipe for its first
/// line ({"listening":"127.0.0.1:P"}).
class hub_process {
public:
  /// `incarnation` offsets the seed: each process draws its own catch-up
  /// epoch, as a real restart does.
  hub_process(const options& o, uint16_t port, int incarnation) {
    std::vector<std::string> args{o.cli,
                                  "hub",
                                  "--port",
                                  std::to_string(port),
                                  "--seed",
                                  std::to_string(o.seed + static_cast<uint64_t>(incarnation)),
                                  "--ring-size",
                                  std::to_string(o.ring_size),
                                  "--drop-wake-probability",
                                  std::to_string(o.drop_wake_probability),
                                  "--visibility-lag",
                                  std::to_string(o.visibility_lag),
                                  "--ledger-file",
                                  o.ledger_path};
    std::vector<char*> argv;
    for (auto& a : args)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    int out[2];
    if (::pipe(out) != 0)
      throw std::runtime_error("pipe");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    auto rc = posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(out[1]);
    if (rc != 0) {
      ::close(out[0]);
      throw std::runtime_error("cannot spawn " + o.cli);
    }
    std::string line;
    char c;
    while (::read(out[0], &c, 1) == 1 && c != '\n')
      line += c;
    ::close(out[0]);
    auto at = line.find("127.0.0.1:");
    if (at == std::string::npos)
      throw std::runtime_error("hub did not start: '" + line + "'");
    port_ = static_cast<uint16_t>(std::stoi(line.substr(at + 10)));
  }

  ~hub_process() {
    kill();
  }

  hub_process(const hub_process&) = delete;
  hub_process& operator=(const hub_process&) = delete;

  /// SIGKILL: the process and its in-memory ledger are gone at once.
  void kill() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }

  uint16_t port() const {
    return port_;
  }

private:
  pid_t pid_ = -1;
  uint16_t port_ = 0;
};

// -- what happened -------------------------------------------------------------------

/// One confirmed publish.
struct published {
  int64_t n = 0;
  int proc = 0;      ///< hub process incarnation (0, 1, ...)
  int ring = 0;      ///< catch-up epoch incarnation (0, 1, ...)
  int gen = 0;       ///< ledger generation (a new one per fresh ledger)
  int64_t id = 0;    ///< ledger id
  int64_t seq = 0;   ///< catch-up seq
  int64_t sent = 0;  ///< ns, before the POST
  int64_t confirmed = 0; ///< ns, after the answer
};

/// One delivery to a watcher, in delivery order. Kept small (a 1M-event run
/// records tens of millions): a reset's fields live behind a pointer.
struct delivery_rec {
  bool reset = false;
  int64_t n = -1; ///< event: the publish number (-1: not stamped)
  std::shared_ptr<const feed_reset> rs; ///< set for a reset only
  int64_t at = 0; ///< ns
};

enum class tier : uint8_t { ledger, catchup, ephemeral };
constexpr std::array<const char*, 3> tier_names{"ledger", "catchup",
                                                "ephemeral"};

struct watcher_log {
  tier t = tier::ledger;
  std::mutex mu;
  std::vector<delivery_rec> recs;
};

/// The publisher's record, shared read-only after the run.
struct ledger_book {
  std::vector<published> events; ///< confirmed, in publish order
  std::vector<std::string> ring_epochs; ///< catch-up epoch of each ring inc
  std::vector<std::string> ledger_epochs; ///< ledger epoch of each process
  uint64_t failed = 0;
  int proc_restarts = 0;
  int fresh_ledgers = 0; ///< restarts that started a new ledger
  int ring_restarts = 0;
  int drops = 0;
  int dup_wake_posts = 0;

  /// The last catch-up ring incarnation index.
  int ring_restarts_total() const {
    return static_cast<int>(ring_epochs.size()) - 1;
  }
};

/// Raises RLIMIT_NOFILE to the hard limit (children inherit it).
void raise_nofile() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
}

std::optional<int64_t> stamp_of(const json::value& ev) {
  auto* o = ev.if_object();
  if (!o)
    return std::nullopt;
  auto* m = o->if_contains("metadata");
  if (!m || !m->is_object())
    return std::nullopt;
  auto* n = m->get_object().if_contains("n");
  if (!n || !n->is_int64())
    return std::nullopt;
  return n->get_int64();
}

// -- the checks ---------------------------------------------------------------------

struct tier_result {
  int watchers = 0;
  uint64_t deliveries = 0;
  uint64_t lost = 0;
  uint64_t duplicated = 0;
  uint64_t reordered = 0;
  uint64_t unstamped = 0;
  uint64_t phantom = 0; ///< a stamp never confirmed nor failed
  uint64_t stale = 0;   ///< an old incarnation's event after a reset
  uint64_t bad_rewinds = 0; ///< watchers with a wrong rewind count
  std::array<uint64_t, reset_cause_count> resets{};
  std::vector<int64_t> latencies;
  std::vector<std::string> samples; ///< first few problems, for the report
};

/// The incarnation an event belongs to in a tier's own position space:
/// the ledger generation (a new one per fresh ledger) for the ledger tier,
/// the catch-up ring incarnation for the in-frame tiers.
int inc_of(tier t, const published& e) {
  return t == tier::ledger ? e.gen : e.ring;
}

/// One reset of a watcher, with the incarnations around it.
struct reset_at {
  const feed_reset* rs;
  int64_t at;
  int before; ///< incarnation the watcher followed before it
  int after;  ///< incarnation it follows after it
};

/// Does reset `r` cover confirmed event `e` (not delivered)?
/// - Known range (lost_to set): `e` is in the incarnation after the reset
///   and its position is in (lost_from, lost_to].
/// - Unknown end: `e` is older than the incarnation the watcher moved to,
///   after lost_from when it is of the incarnation it left, and confirmed
///   before the reset was delivered (the application's resync then reads
///   it from the producer). Events of the new incarnation are covered only
///   up to what the reset says was there before the watcher subscribed
///   (new_seq for in-frame tiers, the new ledger's floor for a rewind).
bool covers(tier t, const reset_at& r, const published& e) {
  auto pos = t == tier::ledger ? e.id : e.seq;
  auto inc = inc_of(t, e);
  auto& rs = *r.rs;
  if (rs.lost_to)
    return inc == r.after && pos > rs.lost_from.value_or(0)
           && pos <= *rs.lost_to;
  if (inc < r.after)
    return (inc != r.before || pos > rs.lost_from.value_or(0))
           && e.confirmed < r.at;
  if (inc == r.after) {
    if (t == tier::ledger)
      return rs.to_cursor && pos <= *rs.to_cursor;
    return rs.new_seq && pos <= *rs.new_seq;
  }
  return false;
}

void check(watcher_log& w, const ledger_book& book,
           const std::unordered_map<int64_t, std::size_t>& index,
           const std::set<int64_t>& failed_stamps, tier_result& out) {
  std::lock_guard<std::mutex> lock{w.mu};
  auto& recs = w.recs;
  auto name = std::string{tier_names[static_cast<int>(w.t)]};
  auto note = [&](std::string s) {
    if (out.samples.size() < 8)
      out.samples.push_back(name + ": " + std::move(s));
  };
  auto last_inc
    = w.t == tier::ledger ? book.fresh_ledgers : book.ring_restarts_total();
  // The incarnation after each reset: from its epoch (in-frame tiers), else
  // from the first event delivered after it, else the last one.
  std::vector<reset_at> resets;
  int following = 0; // the incarnation of the last event delivered
  for (std::size_t i = 0; i < recs.size(); ++i) {
    if (!recs[i].reset) {
      if (auto it = index.find(recs[i].n); it != index.end())
        following = inc_of(w.t, book.events[it->second]);
      continue;
    }
    int after = -1;
    if (w.t != tier::ledger && recs[i].rs->new_epoch) {
      auto& eps = book.ring_epochs;
      auto it = std::find(eps.begin(), eps.end(), *recs[i].rs->new_epoch);
      if (it != eps.end())
        after = static_cast<int>(it - eps.begin());
    }
    for (std::size_t j = i + 1; after < 0 && j < recs.size(); ++j) {
      if (recs[j].reset)
        continue;
      if (auto it = index.find(recs[j].n); it != index.end())
        after = inc_of(w.t, book.events[it->second]);
    }
    if (after < 0)
      after = last_inc;
    resets.push_back({recs[i].rs.get(), recs[i].at, following, after});
    following = after;
  }
  // Deliveries: no duplicate and no reorder between two resets, nothing of
  // an incarnation older than the one the last reset moved to.
  std::vector<bool> delivered(book.events.size(), false);
  std::set<int64_t> in_segment;
  int64_t high = -1;
  int floor = 0;
  std::size_t k = 0;
  uint64_t rewinds = 0;
  for (auto& r : recs) {
    if (r.reset) {
      ++out.resets[static_cast<std::size_t>(r.rs->cause)];
      rewinds += r.rs->cause == reset_cause::rewind;
      in_segment.clear();
      high = -1;
      floor = std::max(floor, resets[k++].after);
      continue;
    }
    ++out.deliveries;
    if (r.n < 0) {
      ++out.unstamped;
      continue;
    }
    if (!in_segment.insert(r.n).second) {
      ++out.duplicated;
      note("n=" + std::to_string(r.n) + " delivered twice without a reset");
    }
    if (r.n < high) {
      ++out.reordered;
      note("n=" + std::to_string(r.n) + " after n=" + std::to_string(high));
    }
    high = std::max(high, r.n);
    auto it = index.find(r.n);
    if (it != index.end()) {
      auto& e = book.events[it->second];
      delivered[it->second] = true;
      out.latencies.push_back(r.at - e.sent);
      if (inc_of(w.t, e) < floor) {
        ++out.stale;
        note("n=" + std::to_string(r.n) + " of incarnation "
             + std::to_string(inc_of(w.t, e)) + " delivered after a reset to "
             + std::to_string(floor));
      }
    } else if (!failed_stamps.count(r.n)) {
      ++out.phantom;
      note("n=" + std::to_string(r.n) + " was never published");
    }
  }
  // Every ledger watcher rewinds once per fresh ledger (two restarts in
  // one disconnection may be one rewind), never for the same ledger.
  if (w.t == tier::ledger) {
    auto fresh = static_cast<uint64_t>(book.fresh_ledgers);
    if (rewinds > fresh || (fresh > 0 && rewinds == 0)) {
      ++out.bad_rewinds;
      note(std::to_string(rewinds) + " rewinds for " + std::to_string(fresh)
           + " fresh ledgers");
    }
  }
  for (std::size_t i = 0; i < book.events.size(); ++i) {
    if (delivered[i])
      continue;
    auto& e = book.events[i];
    bool covered = false;
    for (auto& r : resets)
      if (covers(w.t, r, e)) {
        covered = true;
        break;
      }
    if (!covered) {
      ++out.lost;
      note("n=" + std::to_string(e.n) + " (ledger " + std::to_string(e.gen)
           + " id " + std::to_string(e.id) + ", ring "
           + std::to_string(e.ring) + " seq " + std::to_string(e.seq)
           + ") never delivered nor covered");
    }
  }
}

int64_t percentile(std::vector<int64_t>& v, double p) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  auto i = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1));
  return v[i];
}

/// Every watcher delivered or had covered every confirmed event.
bool settled(std::vector<std::shared_ptr<watcher_log>>& logs,
             const ledger_book& book) {
  if (book.events.empty())
    return true;
  auto last = book.events.back().n;
  for (auto& w : logs) {
    std::lock_guard<std::mutex> lock{w->mu};
    bool seen = false;
    for (auto it = w->recs.rbegin(); it != w->recs.rend(); ++it)
      if (!it->reset && it->n == last) {
        seen = true;
        break;
      }
    if (!seen)
      return false;
  }
  return true;
}

/// Counters of the soak's call load.
struct load_counters {
  std::atomic<uint64_t> sent{0};
  std::atomic<uint64_t> ok{0};
  std::atomic<uint64_t> failed{0};
  std::mutex mu;
  /// Failed calls by their error's first words (kind and detail).
  std::map<std::string, uint64_t> failures;

  void fail(std::string what) {
    failed.fetch_add(1, std::memory_order_relaxed);
    if (what.size() > 160)
      what.resize(160);
    std::lock_guard<std::mutex> lock{mu};
    ++failures[what];
  }
};

int soak(const options& o, const std::string& base, caf::actor_system& sys,
         const service_client_actor& client,
         const std::shared_ptr<ws_connector>& connector,
         const feed_ws_endpoint& ws, blocking_client& admin) {
  // One feed per watcher: watcher i follows the subject prefix "soak/i/",
  // and the hub sends a ledger wake only to the watchers whose prefixes
  // match, so every published event is one feed's event (not a fan-out to
  // all of them: 10,000 watchers of one subject would turn each publish
  // into 10,000 replay GETs).
  auto feeds = static_cast<std::size_t>(o.soak_feeds);
  auto per_feed = std::make_shared<std::vector<std::atomic<uint64_t>>>(feeds);
  auto delivered = std::make_shared<std::atomic<uint64_t>>(0);
  std::vector<feed_watcher_actor> watchers;
  auto stop = std::make_shared<std::atomic<bool>>(false);
  // Every way out (an exception included) stops the watchers and the load,
  // or the actor system's destructor would wait for them forever.
  struct stopper {
    std::vector<feed_watcher_actor>& watchers;
    std::shared_ptr<std::atomic<bool>> stop;
    ~stopper() {
      stop->store(true);
      for (auto& w : watchers)
        caf::anon_send_exit(w, caf::exit_reason::user_shutdown);
    }
  } stop_all{watchers, stop};
  for (std::size_t i = 0; i < feeds; ++i) {
    feed_config fc;
    fc.replay_path = "/v1/events";
    fc.ws_path = "/ws/ledger";
    fc.prefixes = {"soak/" + std::to_string(i) + "/"};
    fc.poll_interval = 30.0;
    feed_callbacks cbs;
    cbs.detached = false;
    cbs.on_event = [delivered, per_feed, i](const feed_event&) {
      (*per_feed)[i].fetch_add(1, std::memory_order_relaxed);
      delivered->fetch_add(1, std::memory_order_relaxed);
    };
    feed_watcher_options wo;
    wo.client = client;
    wo.connector = connector;
    wo.ws = ws;
    wo.callbacks = std::move(cbs);
    wo.seed = static_cast<uint64_t>(i + 1);
    watchers.push_back(spawn_feed_watcher(sys, fc, std::move(wo)));
  }
  // Connected: the hub counts ledger connections.
  // While 10,000 watchers connect, the admin's own call may miss its
  // deadline on a busy machine: that is "not yet", not a failure.
  auto connected = [&]() -> int64_t {
    try {
      auto st = admin.request_raw("GET", "/admin/state");
      auto* c = st.body.is_object() ? st.body.as_object().if_contains(
                  "connections")
                                    : nullptr;
      return c ? c->at("ledger").to_number<int64_t>() : int64_t{0};
    } catch (const std::exception&) {
      return -1;
    }
  };
  auto t_connect = clk::now();
  auto until = t_connect + 120s;
  while (connected() < o.soak_feeds && clk::now() < until)
    std::this_thread::sleep_for(200ms);
  auto conns = connected();
  std::printf("soak: %lld of %d watchers connected in %.1f s, rss %.1f MiB\n",
              static_cast<long long>(conns), o.soak_feeds,
              std::chrono::duration<double>(clk::now() - t_connect).count(),
              rss_bytes() / 1048576.0);
  auto counters = std::make_shared<load_counters>();
  // The load: every 10 ms a tick sends rps/100 calls through the client.
  auto per_tick = std::max(1, static_cast<int>(o.soak_rps / 100.0));
  auto load = sys.spawn([client, counters, per_tick,
                         stop](caf::event_based_actor* self) {
    self->send(self, caf::ok_atom_v);
    return caf::behavior{[=](caf::ok_atom) {
      if (stop->load()) {
        self->quit();
        return;
      }
      for (int i = 0; i < per_tick; ++i) {
        call_request c;
        c.path = "/fast";
        counters->sent.fetch_add(1, std::memory_order_relaxed);
        self->request(client, 30s, std::move(c))
          .then(
            [counters](const call_outcome& out) {
              if (out.ok())
                counters->ok.fetch_add(1, std::memory_order_relaxed);
              else
                counters->fail(std::string{to_string(out.error->kind)} + ": "
                               + out.error->detail);
            },
            [counters](const caf::error& e) {
              counters->fail("actor error: " + caf::to_string(e));
            });
      }
      self->delayed_send(self, 10ms, caf::ok_atom_v);
    }};
  });
  // The publisher: --soak-event-rate events per second, round robin over
  // the feeds, for the warm-up and the measured run.
  auto period = std::chrono::duration_cast<clk::duration>(
    std::chrono::duration<double>(1.0 / o.soak_event_rate));
  auto next = clk::now();
  uint64_t published = 0, publish_failed = 0;
  auto publish_until = [&](clk::time_point end, auto&& each) {
    while (clk::now() < end) {
      std::this_thread::sleep_until(next);
      next += period;
      if (clk::now() > next + 1s) // fell behind: do not burst to catch up
        next = clk::now();
      auto feed = published % feeds;
      call_request c;
      c.method = "POST";
      c.path = "/v1/events";
      c.body = json::serialize(json::object{
        {"subject", "soak/" + std::to_string(feed) + "/e"}, {"kind", "k"}});
      c.has_body = true;
      bool ok = false;
      try {
        ok = admin.call(std::move(c)).ok();
      } catch (const std::exception&) {
        // No answer from the actor system in time: counted as failed.
      }
      if (ok)
        ++published;
      else
        ++publish_failed;
      each();
    }
  };
  // Warm-up: pools, buffers, sketches and the allocator's arenas reach
  // their working size before the first RSS figure of the measured run.
  std::printf("soak: warm-up %.0f s\n", o.soak_warmup);
  std::fflush(stdout);
  publish_until(clk::now() + std::chrono::duration_cast<clk::duration>(
                                 std::chrono::duration<double>(o.soak_warmup)),
                [] {});
  auto rss0 = rss_bytes();
  auto ok0 = counters->ok.load();
  auto t0 = clk::now();
  auto total = std::chrono::duration<double>(o.soak_seconds);
  int step = 1;
  std::printf("soak: rss start %.1f MiB (after the warm-up)\n",
              rss0 / 1048576.0);
  std::fflush(stdout);
  publish_until(t0 + std::chrono::duration_cast<clk::duration>(total), [&] {
    auto done = std::chrono::duration<double>(clk::now() - t0) / total;
    if (done >= step / 10.0) {
      std::printf("soak: %3d %%  rss %.1f MiB  calls ok %llu failed %llu  "
                  "events published %llu delivered %llu\n",
                  step * 10, rss_bytes() / 1048576.0,
                  static_cast<unsigned long long>(counters->ok.load()),
                  static_cast<unsigned long long>(counters->failed.load()),
                  static_cast<unsigned long long>(published),
                  static_cast<unsigned long long>(delivered->load()));
      std::fflush(stdout);
      ++step;
    }
  });
  auto rss1 = rss_bytes();
  auto secs = std::chrono::duration<double>(clk::now() - t0).count();
  auto ok1 = counters->ok.load();
  stop->store(true);
  // Settle: the last events reach their feeds (bounded).
  auto settle_until = clk::now() + std::chrono::duration_cast<clk::duration>(
                                     std::chrono::duration<double>(
                                       o.settle_seconds));
  while (delivered->load() < published && clk::now() < settle_until)
    std::this_thread::sleep_for(100ms);
  std::this_thread::sleep_for(1s);
  // Per feed: events published to feed f are published / feeds (+1 for the
  // first published % feeds feeds); a feed that got fewer lost some, more
  // got duplicates.
  uint64_t lost = 0, duplicated = 0;
  for (std::size_t f = 0; f < feeds; ++f) {
    auto want = published / feeds + (f < published % feeds ? 1 : 0);
    auto got = (*per_feed)[f].load();
    if (got < want)
      lost += want - got;
    else
      duplicated += got - want;
  }
  auto growth = rss0 > 0 ? 100.0 * static_cast<double>(rss1 - rss0)
                             / static_cast<double>(rss0)
                         : 0.0;
  std::printf("soak: %.0f s measured, %lld watchers, %.0f calls/s done in the "
              "measured run (%llu ok, %llu failed in all), %llu events "
              "published (%llu publishes failed), %llu deliveries, lost %llu, "
              "duplicated %llu\n",
              secs, static_cast<long long>(conns),
              static_cast<double>(ok1 - ok0) / secs,
              static_cast<unsigned long long>(counters->ok.load()),
              static_cast<unsigned long long>(counters->failed.load()),
              static_cast<unsigned long long>(published),
              static_cast<unsigned long long>(publish_failed),
              static_cast<unsigned long long>(delivered->load()),
              static_cast<unsigned long long>(lost),
              static_cast<unsigned long long>(duplicated));
  {
    std::lock_guard<std::mutex> lock{counters->mu};
    for (const auto& [what, n] : counters->failures)
      std::printf("soak: failed calls: %llu x %s\n",
                  static_cast<unsigned long long>(n), what.c_str());
  }
  std::printf("soak: rss start %.1f MiB, end %.1f MiB, growth %.2f %% "
              "(goal < 5 %%)\n",
              rss0 / 1048576.0, rss1 / 1048576.0, growth);
  std::printf("json: {\"bench\":\"chaos-soak\",\"seconds\":%.0f,"
              "\"watchers\":%lld,\"calls_ok\":%llu,\"calls_failed\":%llu,"
              "\"calls_per_s\":%.0f,\"published\":%llu,\"delivered\":%llu,"
              "\"lost\":%llu,\"duplicated\":%llu,"
              "\"rss_start\":%lld,\"rss_end\":%lld,\"growth_pct\":%.2f}\n",
              secs, static_cast<long long>(conns),
              static_cast<unsigned long long>(counters->ok.load()),
              static_cast<unsigned long long>(counters->failed.load()),
              static_cast<double>(ok1 - ok0) / secs,
              static_cast<unsigned long long>(published),
              static_cast<unsigned long long>(delivered->load()),
              static_cast<unsigned long long>(lost),
              static_cast<unsigned long long>(duplicated),
              static_cast<long long>(rss0), static_cast<long long>(rss1),
              growth);
  std::fflush(stdout);
  (void) base;
  (void) load;
  return growth < 5.0 && counters->failed.load() == 0
             && conns == o.soak_feeds && lost == 0 && duplicated == 0
             && publish_failed == 0
           ? 0
           : 1;
}

} // namespace

int main(int argc, char** argv) {
  options o;
  CLI::App app{"Feed watchers of three tiers against a hub that drops and "
               "duplicates wakes, lags replay, drops sockets and restarts "
               "(catch-up tier and whole process); prints lost, duplicated "
               "and reordered events per tier. Exit 0 only when all are 0."};
  app.add_option("--cli", o.cli, "The outbound binary (runs `hub`)")
    ->capture_default_str();
  app.add_option("--ledger", o.ledger, "Ledger watchers")->capture_default_str();
  app.add_option("--catchup", o.catchup, "Catch-up watchers")
    ->capture_default_str();
  app.add_option("--ephemeral", o.ephemeral, "Ephemeral watchers")
    ->capture_default_str();
  app.add_option("--events", o.events, "Events to publish")
    ->capture_default_str();
  app.add_option("--rate", o.rate, "Publishes per second")
    ->check(CLI::PositiveNumber)
    ->capture_default_str();
  app.add_option("--hub-restarts", o.hub_restarts,
                 "Hub process kills (SIGKILL) and restarts on the same port")
    ->capture_default_str();
  app.add_option("--catchup-restarts", o.catchup_restarts,
                 "Catch-up tier restarts (POST /admin/restart)")
    ->capture_default_str();
  app.add_option("--drops", o.drops,
                 "Hard closes of every WebSocket (POST /admin/drop)")
    ->capture_default_str();
  app.add_option("--dup-wakes", o.dup_wakes,
                 "Duplicate and stale wake bursts (POST /admin/wakes)")
    ->capture_default_str();
  app.add_option("--drop-wake-probability", o.drop_wake_probability)
    ->capture_default_str();
  app.add_option("--visibility-lag", o.visibility_lag,
                 "Replay polls that miss each new event")
    ->capture_default_str();
  app.add_option("--ring-size", o.ring_size, "Hub catch-up ring size")
    ->capture_default_str();
  app.add_option("--max-seconds", o.max_seconds,
                 "Bound on publishing (settling adds at most --settle-seconds)")
    ->capture_default_str();
  app.add_option("--settle-seconds", o.settle_seconds,
                 "Bound on the wait for the last deliveries")
    ->capture_default_str();
  app.add_option("--seed", o.seed, "Hub seed")->capture_default_str();
  app.add_option("--soak-seconds", o.soak_seconds,
                 "Soak mode: run this long instead of the chaos run")
    ->capture_default_str();
  app.add_option("--soak-feeds", o.soak_feeds, "Soak mode: ledger watchers")
    ->capture_default_str();
  app.add_option("--soak-rps", o.soak_rps, "Soak mode: calls per second")
    ->capture_default_str();
  app.add_option("--soak-event-rate", o.soak_event_rate,
                 "Soak mode: events published per second, round robin over "
                 "the feeds (each watcher follows its own subject prefix)")
    ->check(CLI::PositiveNumber)
    ->capture_default_str();
  app.add_option("--soak-warmup", o.soak_warmup,
                 "Soak mode: seconds of load before the start RSS is taken")
    ->check(CLI::NonNegativeNumber)
    ->capture_default_str();
  // The client's io_runner (1 thread); the hub is a child process.
  outbound::bench::caf_flags caf_opts;
  caf_opts.add_to(app);
  CLI11_PARSE(app, argc, argv);
  raise_nofile();
  o.ledger_path = "/tmp/outbound-chaos-" + std::to_string(::getpid())
                  + ".ledger";
  std::remove(o.ledger_path.c_str());

  auto t_start = clk::now();
  auto deadline = t_start + std::chrono::duration_cast<clk::duration>(
                              std::chrono::duration<double>(o.max_seconds));
  ::signal(SIGPIPE, SIG_IGN);

  std::unique_ptr<hub_process> hubp;
  try {
    hubp = std::make_unique<hub_process>(o, 0, 0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "chaos: %s\n", e.what());
    return 2;
  }
  auto port = hubp->port();
  auto base = "http://127.0.0.1:" + std::to_string(port);

  caf::actor_system_config cfg;
  if (!caf_opts.apply(cfg))
    return 2;
  caf::actor_system sys{cfg};
  std::printf("%s; cores %u; load average %s\n", caf_opts.report(sys).c_str(),
              std::thread::hardware_concurrency(),
              outbound::bench::load_average().c_str());

  auto io = outbound::bench::client_io(sys, 1);
  client_config cc;
  cc.base_url = base;
  cc.timeout = 2.0;
  cc.deadline = 5.0;
  client_options co;
  co.io = io;
  auto client = make_service_client(sys, cc, co);
  auto connector = make_ws_connector(io);
  auto ws = feed_ws_endpoint::from(cc);

  client_config pc = cc; // the publisher's and admin's own client
  pc.retry.max_attempts = 1;
  blocking_client admin{sys, pc};

  if (o.soak_seconds > 0) {
    int rc = 1;
    try {
      rc = soak(o, base, sys, client, connector, ws, admin);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "chaos: soak: %s\n", e.what());
    }
    hubp.reset();
    std::remove(o.ledger_path.c_str());
    return rc;
  }

  std::vector<std::shared_ptr<watcher_log>> logs;
  std::vector<feed_watcher_actor> watchers;
  auto add = [&](tier t, int count) {
    for (int i = 0; i < count; ++i) {
      auto log = std::make_shared<watcher_log>();
      log->t = t;
      feed_config fc;
      fc.limit = 200;
      fc.poll_interval = 5.0;
      fc.reconnect_base_backoff = 0.05;
      fc.reconnect_max_backoff = 1.0;
      if (t == tier::ledger) {
        fc.replay_path = "/v1/events";
        fc.ws_path = "/ws/ledger";
      } else {
        fc.replay_path.clear();
        fc.ws_path = t == tier::catchup ? "/ws/catchup" : "/ws/ephemeral";
      }
      feed_callbacks cbs;
      cbs.detached = false;
      cbs.on_event = [log](const feed_event& ev) {
        delivery_rec r;
        r.at = now_ns();
        r.n = stamp_of(ev.event).value_or(-1);
        std::lock_guard<std::mutex> lock{log->mu};
        log->recs.push_back(std::move(r));
      };
      cbs.on_reset = [log](const feed_reset& rs) {
        delivery_rec r;
        r.at = now_ns();
        r.reset = true;
        auto copy = std::make_shared<feed_reset>(rs);
        copy->detail = nullptr;
        r.rs = std::move(copy);
        std::lock_guard<std::mutex> lock{log->mu};
        log->recs.push_back(std::move(r));
      };
      feed_watcher_options wo;
      wo.client = client;
      wo.connector = connector;
      wo.ws = ws;
      wo.callbacks = std::move(cbs);
      wo.seed = static_cast<uint64_t>(logs.size() + 1);
      watchers.push_back(spawn_feed_watcher(sys, fc, std::move(wo)));
      logs.push_back(std::move(log));
    }
  };
  try {
    add(tier::ledger, o.ledger);
    add(tier::catchup, o.catchup);
    add(tier::ephemeral, o.ephemeral);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "chaos: %s\n", e.what());
    return 2;
  }
  auto rss_start = rss_bytes();

  ledger_book book;
  auto epochs_now = [&](bool with_ledger) {
    auto st = admin.request_raw("GET", "/admin/state");
    auto& obj = st.body.as_object();
    book.ring_epochs.push_back(std::string{obj.at("epoch").as_string()});
    if (with_ledger)
      book.ledger_epochs.push_back(
        std::string{obj.at("ledger").at("epoch").as_string()});
  };
  std::set<int64_t> failed_stamps;
  int proc = 0, ring = 0;
  bool aborted = false;
  try {
    epochs_now(true);
    // Let every watcher connect before the first event (not required for
    // correctness: the first subscribe of catchup/ephemeral is a reset).
    std::this_thread::sleep_for(500ms);
    auto every = [&](int k) -> int64_t {
      return k > 0 ? std::max<int64_t>(1, o.events / (k + 1)) : 0;
    };
    auto e_proc = every(o.hub_restarts), e_ring = every(o.catchup_restarts),
         e_drop = every(o.drops), e_dup = every(o.dup_wakes);
    auto period = std::chrono::duration_cast<clk::duration>(
      std::chrono::duration<double>(1.0 / o.rate));
    auto next = clk::now();
    for (int64_t n = 1; n <= o.events; ++n) {
      if (clk::now() > deadline) {
        aborted = true;
        break;
      }
      std::this_thread::sleep_until(next);
      next += period;
      if (e_proc && n % e_proc == 0 && book.proc_restarts < o.hub_restarts) {
        hubp->kill();
        // The 1st, 3rd, ... restart: a fresh ledger; the 2nd, 4th, ...:
        // the same ledger file.
        bool fresh = book.proc_restarts % 2 == 0;
        if (fresh) {
          std::remove(o.ledger_path.c_str());
          ++book.fresh_ledgers;
        }
        for (int tries = 0;; ++tries) {
          try {
            hubp = std::make_unique<hub_process>(o, port, proc + 1);
            break;
          } catch (const std::exception&) {
            if (tries > 50)
              throw;
            std::this_thread::sleep_for(100ms);
          }
        }
        ++proc;
        ++ring;
        ++book.proc_restarts;
        epochs_now(true);
      }
      if (e_ring && n % e_ring == 0 && book.ring_restarts < o.catchup_restarts) {
        auto r = admin.request_raw("POST", "/admin/restart");
        if (r.status == 200) {
          ++ring;
          ++book.ring_restarts;
          book.ring_epochs.push_back(
            std::string{r.body.at("epoch").as_string()});
        }
      }
      if (e_drop && n % e_drop == 0 && book.drops < o.drops) {
        admin.request_raw("POST", "/admin/drop",
                          json::value{json::object{{"tier", "all"}}});
        ++book.drops;
      }
      if (e_dup && n % e_dup == 0 && !book.events.empty()) {
        auto head = book.events.back().id;
        json::array cs{head, head, std::max<int64_t>(head - 5, 0), head};
        admin.request_raw("POST", "/admin/wakes",
                          json::value{json::object{{"cursors", cs}}});
        ++book.dup_wake_posts;
      }
      published p;
      p.n = n;
      p.proc = proc;
      p.ring = ring;
      p.gen = book.fresh_ledgers;
      p.sent = now_ns();
      json::object body{{"subject", "chaos/" + std::to_string(n % 8)},
                        {"kind", "k"},
                        {"metadata", json::object{{"n", n}, {"t", p.sent}}}};
      call_request c;
      c.method = "POST";
      c.path = "/v1/events";
      c.body = json::serialize(body);
      c.has_body = true;
      auto out = admin.call(std::move(c));
      if (!out.ok() || !out.body.is_object()) {
        ++book.failed;
        failed_stamps.insert(n);
        continue;
      }
      p.confirmed = now_ns();
      auto& ob = out.body.get_object();
      p.id = ob.at("id").to_number<int64_t>();
      p.seq = ob.at("seq").to_number<int64_t>();
      book.events.push_back(p);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "chaos: publisher stopped: %s\n", e.what());
    aborted = true;
  }
  auto publish_seconds
    = std::chrono::duration<double>(clk::now() - t_start).count();
  // Settle: every watcher has the last event (or the bound passes).
  // Settling has its own bound, also after an aborted publish: the events
  // confirmed just before the --max-seconds bound get their time too.
  auto settle_until = clk::now()
                      + std::chrono::duration_cast<clk::duration>(
                        std::chrono::duration<double>(o.settle_seconds));
  while (!settled(logs, book) && clk::now() < settle_until)
    std::this_thread::sleep_for(50ms);
  bool all_settled = settled(logs, book);
  auto rss_end = rss_bytes();
  for (auto& w : watchers)
    caf::anon_send_exit(w, caf::exit_reason::user_shutdown);
  watchers.clear();

  std::unordered_map<int64_t, std::size_t> index;
  for (std::size_t i = 0; i < book.events.size(); ++i)
    index.emplace(book.events[i].n, i);
  std::array<tier_result, 3> res;
  for (auto& w : logs) {
    auto& r = res[static_cast<int>(w->t)];
    ++r.watchers;
    check(*w, book, index, failed_stamps, r);
  }

  std::printf("chaos: %zu confirmed publishes (%llu failed while the hub "
              "was down), %d hub process restarts (%d with a fresh ledger), %d "
              "catch-up restarts, %d "
              "socket drops, %d duplicate-wake bursts, %.1f s publishing%s\n",
              book.events.size(),
              static_cast<unsigned long long>(book.failed),
              book.proc_restarts, book.fresh_ledgers, book.ring_restarts,
              book.drops,
              book.dup_wake_posts, publish_seconds,
              aborted ? " (ABORTED at the bound)" : "");
  std::printf("%-10s %8s %10s %6s %6s %6s %6s  %-40s %10s %10s\n", "tier",
              "watchers", "delivered", "lost", "dup", "reord", "unst",
              "resets by cause", "p50 ms", "p99 ms");
  uint64_t bad = 0;
  std::ostringstream js;
  js << "{\"bench\":\"chaos\",\"published\":" << book.events.size()
     << ",\"failed_publishes\":" << book.failed
     << ",\"hub_restarts\":" << book.proc_restarts
     << ",\"catchup_restarts\":" << book.ring_restarts
     << ",\"settled\":" << (all_settled ? "true" : "false") << ",\"tiers\":{";
  for (int t = 0; t < 3; ++t) {
    auto& r = res[t];
    std::string causes;
    js << (t ? "," : "") << '"' << tier_names[t] << "\":{\"watchers\":"
       << r.watchers << ",\"delivered\":" << r.deliveries
       << ",\"lost\":" << r.lost << ",\"duplicated\":" << r.duplicated
       << ",\"reordered\":" << r.reordered << ",\"resets\":{";
    bool first = true;
    for (std::size_t c = 0; c < reset_cause_count; ++c) {
      if (!r.resets[c])
        continue;
      causes += std::string{causes.empty() ? "" : " "}
                + to_string(static_cast<reset_cause>(c)) + "="
                + std::to_string(r.resets[c]);
      js << (first ? "" : ",") << '"'
         << to_string(static_cast<reset_cause>(c)) << "\":" << r.resets[c];
      first = false;
    }
    auto p50 = percentile(r.latencies, 0.50) / 1e6;
    auto p99 = percentile(r.latencies, 0.99) / 1e6;
    js << "},\"p50_ms\":" << p50 << ",\"p99_ms\":" << p99 << '}';
    std::printf("%-10s %8d %10llu %6llu %6llu %6llu %6llu  %-40s %10.2f "
                "%10.2f\n",
                tier_names[t], r.watchers,
                static_cast<unsigned long long>(r.deliveries),
                static_cast<unsigned long long>(r.lost),
                static_cast<unsigned long long>(r.duplicated),
                static_cast<unsigned long long>(r.reordered),
                static_cast<unsigned long long>(r.unstamped),
                causes.empty() ? "-" : causes.c_str(), p50, p99);
    for (auto& s : r.samples)
      std::printf("  problem: %s\n", s.c_str());
    if (r.stale || r.phantom || r.bad_rewinds)
      std::printf("  %s: stale %llu, phantom %llu, watchers with a wrong "
                  "rewind count %llu\n",
                  tier_names[t], static_cast<unsigned long long>(r.stale),
                  static_cast<unsigned long long>(r.phantom),
                  static_cast<unsigned long long>(r.bad_rewinds));
    bad += r.lost + r.duplicated + r.reordered + r.phantom + r.stale
           + r.bad_rewinds;
  }
  js << "},\"rss_start\":" << rss_start << ",\"rss_end\":" << rss_end << '}';
  std::printf("rss: start %.1f MiB, end %.1f MiB\n", rss_start / 1048576.0,
              rss_end / 1048576.0);
  std::printf("json: %s\n", js.str().c_str());
  if (!all_settled)
    std::printf("chaos: not every watcher had the last event within the "
                "settle bound (counted as lost above if not covered)\n");
  std::fflush(stdout);
  hubp.reset();
  std::remove(o.ledger_path.c_str());
  return bad == 0 && !aborted ? 0 : 1;
}
