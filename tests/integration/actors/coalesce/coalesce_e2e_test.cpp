// The coalescing driver end to end (against `outbound hub --cluster 3`'s
// cluster): a real driver with its real per-endpoint connection pools against
// the hub's in-process 3-node oracle cluster on 127.0.0.1, real time.
//
// What is checked, on exact values: a crowd of 1000 concurrent ts callers
// gets 1000 distinct timestamps, each newer than a timestamp taken before
// the crowd and than the wall clock at its start, through far fewer RPCs
// than calls (the hub's per-node counters); seq callers on two keys get
// disjoint blocks that tile [0, total) of each key; leadership moving
// around the cluster under load fails no call; the leader is found through
// hints whatever the endpoint order, even when it is not configured; a
// seq against a node that commits without answering is an uncertain
// outcome after exactly one server call (a ts there is retried and fails
// as service_unavailable); a refusing node is skipped.
//
// Every wait is bounded (tens of seconds) so a loaded machine slows the
// tests down without failing them.

#include "tests/support/coalesce_fixture.hpp"
#include "tests/support/test_certs.hpp"

#include "actors/coalesce/coalescing_driver.hpp"
#include "config/config_error.hpp"
#include "hub/hub.hpp"

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace outbound;
using namespace std::chrono_literals;

namespace json = boost::json;

namespace {

uint64_t unix_ms_now() {
  using namespace std::chrono;
  return static_cast<uint64_t>(
    duration_cast<milliseconds>(system_clock::now().time_since_epoch())
      .count());
}

/// The replies of a crowd of one-shot callers, filled from actor threads.
class crowd_replies {
public:
  explicit crowd_replies(std::size_t n) : replies_(n) {
  }

  void put(std::size_t i, coalesce_reply r) {
    std::lock_guard<std::mutex> g{mu_};
    replies_[i] = std::move(r);
    ++done_;
    cv_.notify_all();
  }

  void put_error(std::size_t i, std::string e) {
    std::lock_guard<std::mutex> g{mu_};
    replies_[i].error = call_error{};
    replies_[i].error->detail = "caf: " + e;
    ++done_;
    cv_.notify_all();
  }

  /// True once every caller answered within `timeout`.
  bool wait(std::chrono::seconds timeout) {
    std::unique_lock<std::mutex> g{mu_};
    return cv_.wait_for(g, timeout,
                        [this] { return done_ == replies_.size(); });
  }

  /// The replies (after wait() returned true).
  const std::vector<coalesce_reply>& replies() const {
    return replies_;
  }

private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<coalesce_reply> replies_;
  std::size_t done_ = 0;
};

/// Spawns one actor per call; each makes its call and reports the reply.
template <class Call>
std::shared_ptr<crowd_replies> launch_crowd(caf::actor_system& sys,
                                            coalescing_driver_actor d,
                                            const std::vector<Call>& calls) {
  auto c = std::make_shared<crowd_replies>(calls.size());
  for (std::size_t i = 0; i < calls.size(); ++i)
    sys.spawn([d, c, i, call = calls[i]](caf::event_based_actor* self) {
      self->request(d, std::chrono::seconds{60}, call)
        .then([c, i](coalesce_reply& r) { c->put(i, std::move(r)); },
              [c, i](caf::error& e) { c->put_error(i, caf::to_string(e)); });
    });
  return c;
}

/// What the looping callers of the leader-move test share.
struct load_run {
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> ok{0};
  std::atomic<uint64_t> failed{0};
  std::mutex mu;
  std::condition_variable cv;
  std::size_t finished = 0;
  std::vector<std::string> failures;
  /// Per ts caller: its timestamps, in call order.
  std::map<int, std::vector<uint64_t>> ts_of;
  /// Every seq block of the load key.
  std::vector<seq_block> blocks;

  void record(int caller, bool seq, const coalesce_reply& r) {
    std::lock_guard<std::mutex> g{mu};
    if (r.error) {
      ++failed;
      if (failures.size() < 10)
        failures.push_back(std::string{to_string(r.error->kind)} + ": "
                           + r.error->detail);
      return;
    }
    ++ok;
    if (seq)
      blocks.push_back(r.seq);
    else
      ts_of[caller].push_back(r.ts.first());
  }

  void finish() {
    std::lock_guard<std::mutex> g{mu};
    ++finished;
    cv.notify_all();
  }

  bool wait_finished(std::size_t n, std::chrono::seconds timeout) {
    std::unique_lock<std::mutex> g{mu};
    return cv.wait_for(g, timeout, [&] { return finished == n; });
  }
};

/// A caller that calls again as soon as its reply arrives, until
/// load_run::stop (an int message to itself drives the loop).
caf::behavior loop_caller(caf::event_based_actor* self,
                          coalescing_driver_actor d,
                          std::shared_ptr<load_run> l, int id, bool seq) {
  self->send(self, 0);
  return {
    [=](int) {
      if (l->stop) {
        l->finish();
        self->quit();
        return;
      }
      auto on_reply = [=](coalesce_reply& r) {
        l->record(id, seq, r);
        self->send(self, 0);
      };
      auto on_error = [=](caf::error& e) {
        coalesce_reply r;
        r.error = call_error{};
        r.error->detail = "caf: " + caf::to_string(e);
        l->record(id, seq, r);
        self->send(self, 0);
      };
      if (seq) {
        seq_call c;
        c.key = "load";
        c.count = 1 + static_cast<uint32_t>(id % 5);
        self->request(d, std::chrono::seconds{60}, c).then(on_reply, on_error);
      } else {
        ts_call c;
        self->request(d, std::chrono::seconds{60}, c).then(on_reply, on_error);
      }
    },
  };
}

/// Blocks of one key tile [0, total) exactly: sorted by start, each begins
/// where the previous ended.
void expect_tiles(std::vector<seq_block> blocks, uint64_t total,
                  const std::string& what) {
  std::sort(
    blocks.begin(), blocks.end(),
    [](const seq_block& a, const seq_block& b) { return a.start < b.start; });
  uint64_t next = 0;
  for (auto& b : blocks) {
    ASSERT_EQ(b.start, next) << what << ": gap or overlap";
    ASSERT_GE(b.count, 1u) << what;
    next += b.count;
  }
  EXPECT_EQ(next, total) << what;
}

class CoalesceE2E : public ::testing::Test {
protected:
  CoalesceE2E() {
    hub_config hc;
    hc.cluster_size = 3;
    hc.seed = 5;
    hub_ = std::make_unique<hub>(hc);
    hub_->start();
    nodes_ = hub_->oracle_endpoints();
  }

  ~CoalesceE2E() override {
    for (auto& d : drivers_)
      caf::anon_send_exit(d, caf::exit_reason::user_shutdown);
    drivers_.clear();
    hub_->stop();
  }

  /// "http://127.0.0.1:P" of node i (the driver's endpoint keys).
  std::string key(std::size_t i) const {
    return "http://" + nodes_.at(i);
  }

  /// A generous configuration: an attempt that a loaded machine slows down
  /// must not turn into a failure (for seq: an uncertain outcome).
  coalesce_config config(std::vector<std::string> endpoints) const {
    coalesce_config c;
    c.endpoints = std::move(endpoints);
    c.retry.per_attempt = 10.0;
    c.retry.overall = 30.0;
    return c;
  }

  coalescing_driver_actor driver(coalesce_config c, uint64_t seed = 1) {
    coalesce_options o;
    o.seed = seed;
    auto d = make_coalescing_driver(sys, std::move(c), std::move(o));
    drivers_.push_back(d);
    return d;
  }

  template <class Call>
  coalesce_reply call(const coalescing_driver_actor& d, Call c) {
    return outbound::testing::call_blocking(sys, d, std::move(c));
  }

  coalesce_reply ts(const coalescing_driver_actor& d, uint32_t count = 1) {
    ts_call c;
    c.count = count;
    return call(d, c);
  }

  coalesce_reply seq(const coalescing_driver_actor& d, std::string k,
                     uint32_t count) {
    seq_call c;
    c.key = std::move(k);
    c.count = count;
    return call(d, c);
  }

  coalesce_stats stats(const coalescing_driver_actor& d) {
    coalesce_stats out;
    caf::scoped_actor self{sys};
    self->request(d, std::chrono::seconds{10}, stats_atom_v)
      .receive([&](coalesce_stats& s) { out = std::move(s); },
               [](caf::error&) { ADD_FAILURE() << "no stats"; });
    return out;
  }

  json::object oracle_json() const {
    return json::parse(hub_->state_json()).at("oracle").as_object();
  }

  uint64_t node_counter(std::size_t i, const char* name) const {
    return oracle_json()
      .at("nodes")
      .as_array()
      .at(i)
      .at(name)
      .to_number<uint64_t>();
  }

  /// Oracle requests that reached any node (the RPCs the hub saw).
  uint64_t hub_requests() const {
    uint64_t n = 0;
    for (std::size_t i = 0; i < nodes_.size(); ++i)
      n += node_counter(i, "requests");
    return n;
  }

  uint64_t total(const char* name) const {
    uint64_t n = 0;
    for (std::size_t i = 0; i < nodes_.size(); ++i)
      n += node_counter(i, name);
    return n;
  }

  caf::actor_system_config sys_cfg;
  caf::actor_system sys{sys_cfg};
  std::unique_ptr<hub> hub_;
  std::vector<std::string> nodes_;
  std::vector<coalescing_driver_actor> drivers_;
};

std::string describe(const coalesce_reply& r) {
  if (!r.error)
    return "ok";
  return std::string{to_string(r.error->kind)} + ": " + r.error->detail;
}

} // namespace

TEST_F(CoalesceE2E, AThousandConcurrentTsCallersGetDistinctFreshTimestamps) {
  auto d = driver(config({nodes_[0], nodes_[1], nodes_[2]}));
  auto before = ts(d);
  ASSERT_FALSE(before.error) << describe(before);
  const auto t0 = before.ts.first();
  const auto wall0 = unix_ms_now();
  const auto requests0 = hub_requests();
  const auto rpcs0 = stats(d).batches.rpcs;

  constexpr std::size_t n = 1000;
  std::vector<ts_call> calls(n);
  auto crowd = launch_crowd(sys, d, calls);
  ASSERT_TRUE(crowd->wait(120s));

  std::set<uint64_t> seen;
  for (auto& r : crowd->replies()) {
    ASSERT_FALSE(r.error) << describe(r);
    ASSERT_EQ(r.ts.count, 1u);
    auto t = r.ts.first();
    EXPECT_GT(t, t0) << "not newer than a timestamp taken before the crowd";
    EXPECT_GE(ts_physical(t), wall0) << "predates the call's entry";
    EXPECT_EQ(r.endpoint(), key(0));
    seen.insert(t);
  }
  EXPECT_EQ(seen.size(), n) << "timestamps handed out twice";

  auto s = stats(d);
  const auto rpcs = s.batches.rpcs - rpcs0;
  const auto requests = hub_requests() - requests0;
  // Every RPC reached the cached leader once and nothing failed: the hub
  // saw exactly the driver's RPCs, and far fewer than the calls.
  EXPECT_EQ(requests, rpcs);
  EXPECT_LT(requests, n);
  EXPECT_EQ(node_counter(0, "answered"), s.batches.rpcs);
  EXPECT_EQ(s.calls, n + 1);
  EXPECT_EQ(s.calls_failed, 0u);
  EXPECT_EQ(s.batches.served, n + 1);
  EXPECT_EQ(oracle_json().at("timestamps_issued").to_number<uint64_t>(), n + 1);
  std::cout << "[ figures  ] 1000 ts callers: " << rpcs << " RPCs, "
            << s.batches.batches << " batches in all\n";
}

TEST_F(CoalesceE2E, SeqCallersOnTwoKeysGetDisjointGaplessBlocks) {
  auto d = driver(config({nodes_[2], nodes_[0], nodes_[1]}));
  constexpr std::size_t n = 600;
  std::vector<seq_call> calls(n);
  std::map<std::string, uint64_t> total;
  for (std::size_t i = 0; i < n; ++i) {
    calls[i].key = i % 2 == 0 ? "orders" : "invoices";
    calls[i].count = 1 + static_cast<uint32_t>(i % 7);
    total[calls[i].key] += calls[i].count;
  }
  auto crowd = launch_crowd(sys, d, calls);
  ASSERT_TRUE(crowd->wait(120s));
  std::map<std::string, std::vector<seq_block>> blocks;
  for (std::size_t i = 0; i < n; ++i) {
    auto& r = crowd->replies()[i];
    ASSERT_FALSE(r.error) << describe(r);
    ASSERT_EQ(r.seq.count, calls[i].count);
    blocks[calls[i].key].push_back(r.seq);
  }
  for (auto& [k, bs] : blocks)
    expect_tiles(bs, total[k], k);
  auto o = oracle_json();
  EXPECT_EQ(o.at("seq_issued").to_number<uint64_t>(),
            total["orders"] + total["invoices"]);
  auto s = stats(d);
  EXPECT_EQ(s.calls_failed, 0u);
  EXPECT_EQ(s.uncertain, 0u);
  EXPECT_LT(hub_requests(), n);
  EXPECT_EQ(node_counter(0, "commits"), s.batches.rpcs);
}

TEST_F(CoalesceE2E, LeaderMovesUnderLoadFailNoCall) {
  auto d = driver(config({nodes_[0], nodes_[1], nodes_[2]}));
  auto l = std::make_shared<load_run>();
  constexpr int callers = 500;
  for (int i = 0; i < callers; ++i)
    sys.spawn(loop_caller, d, l, i, i % 2 == 1);
  // Let the load start, then move leadership every 100 ms for about 3 s.
  auto until = std::chrono::steady_clock::now() + 20s;
  while (l->ok < 1000 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(5ms);
  ASSERT_GE(l->ok.load(), 1000u) << "the load did not start";
  uint64_t moves = 0;
  std::size_t leader = 0;
  for (int i = 0; i < 30; ++i) {
    std::this_thread::sleep_for(100ms);
    leader = (leader + 1) % 3;
    hub_->move_leader(leader);
    ++moves;
  }
  std::this_thread::sleep_for(200ms);
  l->stop = true;
  ASSERT_TRUE(l->wait_finished(callers, 120s));

  std::lock_guard<std::mutex> g{l->mu};
  EXPECT_EQ(l->failed.load(), 0u)
    << (l->failures.empty() ? "" : l->failures.front());
  // Per ts caller, strictly increasing; across callers, all distinct.
  std::set<uint64_t> all;
  uint64_t ts_calls = 0;
  for (auto& [id, v] : l->ts_of) {
    for (std::size_t k = 1; k < v.size(); ++k)
      ASSERT_GT(v[k], v[k - 1]) << "caller " << id;
    all.insert(v.begin(), v.end());
    ts_calls += v.size();
  }
  EXPECT_EQ(all.size(), ts_calls);
  uint64_t seq_total = 0;
  for (auto& b : l->blocks)
    seq_total += b.count;
  expect_tiles(l->blocks, seq_total, "load");

  auto s = stats(d);
  EXPECT_EQ(s.calls_failed, 0u);
  EXPECT_EQ(s.uncertain, 0u);
  EXPECT_GE(s.leader_changes, 1u);
  // The first seating counts too (none -> the leader).
  EXPECT_LE(s.leader_changes, moves + 1);
  EXPECT_GE(s.redirects, 1u);
  // The cached leader is the cluster's final one.
  auto last = ts(d);
  ASSERT_FALSE(last.error) << describe(last);
  EXPECT_EQ(last.endpoint(), key(leader));
  EXPECT_EQ(stats(d).leader_endpoint, key(leader));
  std::cout << "[ figures  ] leader moves " << moves << ", calls "
            << l->ok.load() << ", leader_changes " << s.leader_changes
            << ", redirects " << s.redirects << ", rpcs " << s.batches.rpcs
            << "\n";
}

TEST_F(CoalesceE2E, AnUnconfiguredLeaderIsFoundThroughHints) {
  // Only the two followers are configured.
  auto d = driver(config({nodes_[1], nodes_[2]}));
  auto r = ts(d);
  ASSERT_FALSE(r.error) << describe(r);
  EXPECT_EQ(r.endpoint(), key(0));
  EXPECT_EQ(r.epoch(), "1");
  auto s = stats(d);
  EXPECT_EQ(s.leader_endpoint, key(0));
  EXPECT_EQ(s.leader_epoch, uint64_t{1});
  EXPECT_EQ(s.redirects, 1u);
  EXPECT_EQ(total("misdirected"), 1u);
  // Later calls go straight to the cached leader.
  for (int i = 0; i < 5; ++i) {
    auto again = seq(d, "k", 2);
    ASSERT_FALSE(again.error) << describe(again);
    EXPECT_EQ(again.seq.start, 2u * i);
  }
  EXPECT_EQ(total("misdirected"), 1u);
  EXPECT_EQ(node_counter(0, "answered"), 6u);
}

TEST_F(CoalesceE2E, TheLeaderLastInTheListIsFoundWhateverTheStartOffset) {
  // Several drivers (each worklist starts at its own seeded offset): the
  // first call may hit a follower and follow its hint; none fails, and each
  // driver misdirects at most once.
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    auto before = total("misdirected");
    auto d = driver(config({nodes_[1], nodes_[2], nodes_[0]}), seed);
    for (int i = 0; i < 4; ++i) {
      auto r = ts(d);
      ASSERT_FALSE(r.error) << describe(r);
      EXPECT_EQ(r.endpoint(), key(0));
    }
    EXPECT_LE(total("misdirected") - before, 1u) << "seed " << seed;
    EXPECT_EQ(stats(d).leader_endpoint, key(0));
  }
  EXPECT_EQ(node_counter(0, "answered"), 24u);
}

TEST_F(CoalesceE2E, ALeaderMovedToTheLastNodeIsFollowedByHint) {
  hub_->move_leader(std::size_t{2}); // epoch 2
  auto d = driver(config({nodes_[0], nodes_[1], nodes_[2]}));
  auto r = seq(d, "moved", 3);
  ASSERT_FALSE(r.error) << describe(r);
  EXPECT_EQ(r.endpoint(), key(2));
  EXPECT_EQ(r.epoch(), "2");
  EXPECT_EQ(stats(d).leader_epoch, uint64_t{2});
}

TEST_F(CoalesceE2E,
       SeqOnANodeThatCommitsWithoutReplyingIsUncertainAfterOneCall) {
  hub_->set_node_mode(0, oracle_node_mode::commit_no_reply);
  auto c = config({nodes_[0], nodes_[1], nodes_[2]});
  c.retry.per_attempt = 2.0;
  c.retry.overall = 5.0;
  auto d = driver(c);
  auto r = seq(d, "spent", 4);
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.error->kind, error_kind::uncertain_outcome) << describe(r);
  EXPECT_FALSE(r.error->nothing_sent);
  EXPECT_EQ(exit_code(r.error->kind), 8);
  // Exactly one server call could commit: the leader's, and it did.
  EXPECT_EQ(node_counter(0, "requests"), 1u);
  EXPECT_EQ(node_counter(0, "commits"), 1u);
  EXPECT_EQ(node_counter(0, "unanswered_commits"), 1u);
  EXPECT_EQ(oracle_json().at("seq_issued").to_number<uint64_t>(), 4u);
  auto s = stats(d);
  EXPECT_EQ(s.uncertain, 1u);
  EXPECT_EQ(s.calls_failed, 1u);
  // The block was spent, not retried: the next one starts after it.
  hub_->set_node_mode(0, oracle_node_mode::normal);
  auto next = seq(d, "spent", 1);
  ASSERT_FALSE(next.error) << describe(next);
  EXPECT_EQ(next.seq.start, 4u);
}

TEST_F(CoalesceE2E,
       TsOnANodeThatCommitsWithoutReplyingIsRetriedThenUnavailable) {
  hub_->set_node_mode(0, oracle_node_mode::commit_no_reply);
  auto c = config({nodes_[0], nodes_[1], nodes_[2]});
  c.retry.per_attempt = 1.0;
  c.retry.overall = 1.5;
  auto d = driver(c);
  auto r = ts(d, 3);
  ASSERT_TRUE(r.error);
  // Idempotent: the lost answer is retried; the followers' hints point back
  // at the silent leader (an election signal), ridden out until the
  // overall budget ends: no leader (service_unavailable, exit 7).
  EXPECT_EQ(r.error->kind, error_kind::service_unavailable) << describe(r);
  EXPECT_EQ(exit_code(r.error->kind), 7);
  EXPECT_GE(node_counter(0, "unanswered_commits"), 2u) << "not retried";
  EXPECT_GE(total("misdirected"), 1u);
  auto s = stats(d);
  EXPECT_EQ(s.uncertain, 0u);
  EXPECT_GE(s.attempts, 3u);
}

TEST_F(CoalesceE2E, ARefusingNodeIsSkipped) {
  hub_->set_node_mode(1, oracle_node_mode::refuse);
  uint64_t seq_total = 0;
  std::vector<seq_block> blocks;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    auto d = driver(config({nodes_[1], nodes_[0]}), seed);
    auto t = ts(d);
    ASSERT_FALSE(t.error) << describe(t);
    EXPECT_EQ(t.endpoint(), key(0));
    // 503 provably committed nothing: safe to try the next node for seq.
    auto s = seq(d, "skip", 3);
    ASSERT_FALSE(s.error) << describe(s);
    blocks.push_back(s.seq);
    seq_total += 3;
    EXPECT_EQ(stats(d).uncertain, 0u);
  }
  expect_tiles(blocks, seq_total, "skip");
  // Every driver started its worklist at the refusing node (the configured
  // order); its marked 503 committed nothing.
  EXPECT_GE(node_counter(1, "refused"), 6u);
  EXPECT_EQ(node_counter(1, "commits"), 0u);
  EXPECT_EQ(node_counter(0, "answered"), 12u);
}

TEST_F(CoalesceE2E, ATlsFailureIsServiceUnavailableNotAConfigError) {
  // TLS configured against the plain-HTTP cluster: every handshake fails.
  // Each failure moves on to the next endpoint; the worklist exhausted, the
  // last one is surfaced: as in `outbound request`, service_unavailable
  // (exit 7), and no oracle request reached a node.
  auto c = config({nodes_[0], nodes_[1], nodes_[2]});
  c.tls = true;
  auto d = driver(c);
  auto r = ts(d);
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.error->kind, error_kind::service_unavailable) << describe(r);
  EXPECT_EQ(r.error->attempts, 3) << "each endpoint once";
  EXPECT_NE(r.error->detail.find("tls"), std::string::npos) << describe(r);
  EXPECT_EQ(hub_requests(), 0u);
}

TEST_F(CoalesceE2E, ACaFileThatDoesNotLoadFailsAtConstructionNamingTheField) {
  // The default pools build their TLS context lazily, inside the driver; a
  // CA file that exists but does not load must still be a config_error at
  // construction (house rule), not a driver that dies on its first call.
  outbound::testing::temp_dir dir{"outbound-coalesce-tls-"};
  auto ca = dir.file("ca.pem");
  std::ofstream{ca} << "not a certificate\n";
  auto c = config({nodes_[0]});
  c.tls = true;
  coalesce_options o;
  o.tls_template.tls.ca_file = ca;
  try {
    make_coalescing_driver(sys, c, o);
    FAIL() << "no config_error";
  } catch (const config_error& e) {
    EXPECT_EQ(e.field(), "tls.ca_file") << e.what();
  }
}

TEST_F(CoalesceE2E,
       ExplicitHttpEndpointsUnderTlsAreDialledPlainAndTheDriverLives) {
  // TLS configured (a real CA file), every endpoint an explicit http://:
  // explicit beats configured, so each is a plain pool without the TLS
  // files. The driver used to die on its first call (the plain pool's
  // config check threw inside it).
  outbound::testing::temp_dir dir{"outbound-coalesce-mixed-"};
  auto ca = outbound::testing::make_ca(dir.path(), "ca", "outbound test CA");
  auto c = config({key(0), key(1), key(2)});
  c.tls = true;
  coalesce_options o;
  o.seed = 3;
  o.tls_template.tls.ca_file = ca.cert;
  auto d = make_coalescing_driver(sys, c, o);
  drivers_.push_back(d);
  for (int i = 0; i < 3; ++i) {
    auto r = ts(d);
    EXPECT_FALSE(r.error) << describe(r);
    EXPECT_EQ(r.endpoint().rfind("http://", 0), 0u) << r.endpoint();
  }
}

// An oracle without dense sequences answers 501 with the pre-commit marker:
// a final typed error at the first call, neither retried nor uncertain, and
// nothing billed.
TEST_F(CoalesceE2E, AnOracleWithoutSeqSupportFailsTheFirstCallFinally) {
  hub_config hc;
  hc.cluster_size = 1;
  hc.oracle_seq_supported = false;
  hub h{hc};
  h.start();
  auto d = driver(config({h.oracle_endpoints().at(0)}));
  auto s = seq(d, "k", 2);
  ASSERT_TRUE(s.error);
  EXPECT_EQ(s.error->kind, error_kind::server_error) << describe(s);
  EXPECT_NE(s.error->detail.find("not supported"), std::string::npos)
    << describe(s);
  EXPECT_FALSE(s.error->nothing_sent);
  EXPECT_TRUE(s.error->nothing_billed);
  EXPECT_EQ(stats(d).uncertain, 0u);
  auto t = ts(d);
  EXPECT_FALSE(t.error) << describe(t);
  auto o = json::parse(h.state_json()).at("oracle").as_object();
  auto& n = o.at("nodes").as_array().at(0).as_object();
  EXPECT_EQ(n.at("unsupported").to_number<uint64_t>(), 1u) << "one call";
  EXPECT_EQ(n.at("requests").to_number<uint64_t>(), 2u);
  caf::anon_send_exit(d, caf::exit_reason::user_shutdown);
  h.stop();
}
