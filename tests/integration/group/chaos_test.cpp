// Fault tests of feed groups: three `outbound group-member` processes share
// 900 ledger feeds (3 x 300, the small size of the design's chaos suite;
// OUTBOUND_CHAOS_FEEDS=N changes it) of an in-process hub on a private etcd
// (tests/support/etcd_fixture.hpp); a publisher thread keeps every feed
// busy while the test injects one event of the fault model: none (S1), a
// member killed (S2), a member leaving (S3), a member joining (S4), a
// silent cut between one member and the store (S5, through
// tests/support/fault_proxy.hpp), a paused member (SIGSTOP, S7), a paused
// store (SIGSTOP of etcd, S8), a member that crashes and restarts (S9).
// tests/support/delivery_check.hpp then counts lost, reordered, duplicated
// and overlapping deliveries exactly (all processes share
// CLOCK_MONOTONIC). Timing bounds are generous (a loaded 2-core machine):
// every legal outcome passes (a hold that lifts, or a lost lease and a
// re-join), a wrong one fails. The timing figures themselves (takeover
// p99 against the design's goals) are bench/scaleout's.
//
// The design's S6 (a partition between two members only) has no subject
// here: members never talk to each other, so there is no member-to-member
// link to cut; ownership is decided by the store alone.
//
// Settings as the README's test example: lease TTL 3 s, renew 1 s, fence
// margin 0.5 s (the fence deadline is at most 2.5 s after the last
// keepalive sent), checkpoint 0.5 s, poll 0.25 s.

#include "tests/support/child_process.hpp"
#include "tests/support/delivery_check.hpp"
#include "tests/support/etcd_fixture.hpp"
#include "tests/support/fault_proxy.hpp"

#include "core/hrw.hpp"
#include "hub/hub.hpp"

#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace outbound;
using namespace outbound::testing;
using namespace std::chrono_literals;

namespace {

constexpr int64_t ms_ns = 1000000;
constexpr int64_t ttl_ns = 3000 * ms_ns;
constexpr int64_t fence_ns = 2500 * ms_ns; // TTL - fence margin
// A delivery already dispatched when the deadline passes still prints;
// allow that much scheduling delay on a loaded machine.
constexpr int64_t slack_ns = 300 * ms_ns;
// Progress reaches the group at most every checkpoint / 2 (0.25 s) per
// feed, commits run every checkpoint interval (0.5 s): a committed cursor
// lags the deliveries by under ~1 s, 1.5 s with a loaded machine's delays.
constexpr int64_t commit_lag_ns = 1500 * ms_ns;

/// The last JSON line of `err` of the given type (empty when none).
boost::json::object last_line(const std::string& err, const std::string& type) {
  boost::json::object found;
  std::istringstream in{err};
  std::string line;
  while (std::getline(in, line)) {
    boost::system::error_code ec;
    auto v = boost::json::parse(line, ec);
    if (!ec && v.is_object() && v.as_object().contains("type")
        && v.as_object().at("type").as_string() == type)
      found = v.as_object();
  }
  return found;
}

int64_t field(const boost::json::object& o, const char* name) {
  auto* v = o.if_contains(name);
  return v && v->is_int64() ? v->as_int64() : 0;
}

bool wait_until(const std::function<bool()>& pred,
                std::chrono::milliseconds bound) {
  auto until = std::chrono::steady_clock::now() + bound;
  while (std::chrono::steady_clock::now() < until) {
    if (pred())
      return true;
    std::this_thread::sleep_for(100ms);
  }
  return pred();
}

/// The feeds shared by the members: OUTBOUND_CHAOS_FEEDS, else 900.
int chaos_feeds() {
  const char* v = std::getenv("OUTBOUND_CHAOS_FEEDS");
  int n = v ? std::atoi(v) : 0;
  return n > 0 ? n : 900;
}

/// The rendezvous winner of every feed `feed-<i>` (i < feeds) among
/// `names`, as every member computes it (core/hrw.hpp).
std::map<std::string, std::string>
hrw_owners(int feeds, const std::vector<std::string>& names) {
  std::map<std::string, std::string> out;
  for (int i = 0; i < feeds; ++i) {
    auto feed = "feed-" + std::to_string(i);
    out[feed] = names[hrw_winner(feed, names)];
  }
  return out;
}

/// How many feeds each name wins in `owners`.
std::map<std::string, int64_t>
owned_counts(const std::map<std::string, std::string>& owners) {
  std::map<std::string, int64_t> n;
  for (const auto& [feed, name] : owners)
    ++n[name];
  return n;
}

/// The process of each feed's latest delivery (by time: `ds` holds each
/// process's lines together).
std::map<std::string, std::string>
last_deliverer(const std::vector<delivery_line>& ds) {
  std::map<std::string, const delivery_line*> latest;
  for (const auto& d : ds) {
    auto& l = latest[d.feed];
    if (!l || d.t > l->t)
      l = &d;
  }
  std::map<std::string, std::string> out;
  for (const auto& [feed, d] : latest)
    out[feed] = d->process;
  return out;
}

/// Exactly `moved` feeds moved (a takeover each), and each one's latest
/// delivery came from its winner in `after`.
void expect_moved_to_winners(const delivery_report& r,
                             const std::vector<delivery_line>& ds,
                             std::map<std::string, std::string>& after,
                             int64_t moved) {
  EXPECT_EQ(static_cast<int64_t>(r.takeover_ns.size()), moved) << r.summary();
  auto last_by = last_deliverer(ds);
  for (const auto& [feed, t] : r.takeover_ns)
    EXPECT_EQ(last_by[feed], after[feed]) << feed;
}

/// The nearest-rank p99 of the takeover times of `r`, in ms (0: none).
int64_t takeover_p99_ms(const delivery_report& r) {
  std::vector<int64_t> v;
  for (const auto& kv : r.takeover_ns)
    v.push_back(kv.second);
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  auto rank = (v.size() * 99 + 99) / 100; // ceil(0.99 n), 1-based
  return v[rank - 1] / ms_ns;
}

struct member {
  std::string name;
  /// name plus restart number: the process in delivery lines.
  std::string process;
  std::unique_ptr<running_child> child;
  bool alive = true;
};

class GroupChaos : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    etcd_ = std::make_unique<etcd_instance>(find_etcd());
  }

  static void TearDownTestSuite() {
    etcd_.reset();
  }

  void SetUp() override {
    hub_config c;
    c.seed = 11;
    hub_ = std::make_unique<hub>(c);
    hub_->start();
  }

  void TearDown() override {
    stop_publisher();
    if (etcd_stopped_ && etcd_->pid() > 0)
      ::kill(etcd_->pid(), SIGCONT);
    for (auto& m : members_)
      if (m.child) {
        m.child->signal(SIGCONT);
        m.child->signal(SIGKILL);
      }
    members_.clear();
    proxy_.reset();
    hub_.reset();
  }

  member& start_member(const std::string& name, const std::string& etcd_url) {
    int restarts = 0;
    for (const auto& m : members_)
      if (m.name == name)
        ++restarts;
    member m;
    m.name = name;
    m.process = restarts ? name + "#" + std::to_string(restarts) : name;
    m.child
      = std::make_unique<running_child>(outbound_argv({"group-member",
                                                       "--group",
                                                       group_,
                                                       "--member",
                                                       name,
                                                       "--etcd",
                                                       etcd_url,
                                                       "--feed-count",
                                                       std::to_string(feeds_),
                                                       "--subject-prefix",
                                                       "feed-",
                                                       "--initial-settle",
                                                       "1",
                                                       "--rebalance-delay",
                                                       "1",
                                                       "--lease-ttl",
                                                       "3",
                                                       "--renew-interval",
                                                       "1",
                                                       "--fence-margin",
                                                       "0.5",
                                                       "--checkpoint-interval",
                                                       "0.5",
                                                       "--poll-interval",
                                                       "0.25",
                                                       "--status-interval",
                                                       "0.25",
                                                       hub_->base_url()}));
    members_.push_back(std::move(m));
    return members_.back();
  }

  void start_three(const std::string& m1_etcd_url) {
    start_member("m1", m1_etcd_url);
    start_member("m2", etcd_->base_url());
    start_member("m3", etcd_->base_url());
  }

  /// Sends member `process` SIGTERM and checks that it leaves as a leave
  /// should: exit 0 within `wait`, its exit line saying it left owning
  /// nothing; then waits for the survivors to balance and the deliveries
  /// to drain. `left_ns`: from the signal to the exit. Fatal failures end
  /// only this function: call it in ASSERT_NO_FATAL_FAILURE.
  void leave_and_settle(const std::string& process, std::chrono::seconds wait,
                        int64_t& left_ns) {
    auto& m = find(process);
    auto signalled = mono_now_ns();
    m.child->signal(SIGTERM);
    auto code = m.child->wait_exit(wait);
    left_ns = mono_now_ns() - signalled;
    m.alive = false;
    ASSERT_TRUE(code) << process << " did not leave\n" << errs();
    EXPECT_EQ(*code, 0) << errs();
    auto exit_line = last_line(m.child->err(), "exit");
    ASSERT_FALSE(exit_line.empty()) << errs();
    EXPECT_TRUE(exit_line.at("left").as_bool()) << errs();
    EXPECT_EQ(field(exit_line, "owned"), 0) << errs();
    ASSERT_TRUE(wait_until([&] { return balanced(); }, 30s)) << errs();
    after_move();
    ASSERT_TRUE(drain(20s)) << errs();
  }

  member& find(const std::string& process) {
    for (auto& m : members_)
      if (m.process == process)
        return m;
    throw std::logic_error("no member process " + process);
  }

  boost::json::object status(const std::string& process) {
    return last_line(find(process).child->err(), "status");
  }

  /// One round (an event on every feed) every 200 ms until stopped, or
  /// every feeds ms with more than 200 feeds: at most ~1,000 events a
  /// second. Each event wakes its owner into a replay page, and the
  /// in-process hub scans its ledger for every page on one io thread;
  /// under ASan, 900 feeds every 200 ms left it too slow to answer a
  /// WebSocket handshake within 5 s.
  void start_publisher() {
    publishing_ = true;
    auto pause = std::max<std::chrono::milliseconds>(
      200ms, std::chrono::milliseconds{feeds_});
    publisher_ = std::thread{[this, pause] {
      while (publishing_) {
        for (int f = 0; f < feeds_; ++f) {
          auto feed = "feed-" + std::to_string(f);
          auto p = hub_->publish(feed + "/e", "k");
          std::lock_guard<std::mutex> lock{mu_};
          published_.push_back({feed, p.id});
        }
        ++rounds_;
        std::this_thread::sleep_for(pause);
      }
    }};
  }

  void stop_publisher() {
    publishing_ = false;
    if (publisher_.joinable())
      publisher_.join();
  }

  std::vector<published_event> published() {
    std::lock_guard<std::mutex> lock{mu_};
    return published_;
  }

  std::vector<delivery_line> deliveries() {
    std::vector<delivery_line> out;
    for (const auto& m : members_) {
      auto d = parse_deliveries(m.child->out(), m.process);
      out.insert(out.end(), d.begin(), d.end());
    }
    return out;
  }

  /// With OUTBOUND_CHAOS_DUMP=<dir>: every member's stdout and stderr into
  /// <dir>/<test>.<process>.{out,err}, and the fault times, for a look
  /// after the run.
  void dump(const std::string& notes) {
    const char* dir = std::getenv("OUTBOUND_CHAOS_DUMP");
    if (!dir)
      return;
    std::string base = std::string{dir} + "/" + group_;
    for (const auto& m : members_) {
      std::ofstream{base + "." + m.process + ".out"} << m.child->out();
      std::ofstream{base + "." + m.process + ".err"} << m.child->err();
    }
    std::ofstream{base + ".notes"} << notes << "\n";
  }

  /// Every live member owns its whole desired set, they see each other, and
  /// together they own every feed once.
  bool balanced() {
    int64_t owned = 0;
    int live = 0;
    for (auto& m : members_) {
      if (!m.alive)
        continue;
      ++live;
      auto st = last_line(m.child->err(), "status");
      if (st.empty() || field(st, "members") != live_count()
          || field(st, "owned") != field(st, "desired")
          || field(st, "running") != field(st, "owned")
          || st.at("holding").as_bool())
        return false;
      owned += field(st, "owned");
    }
    return live > 0 && owned == feeds_;
  }

  int64_t live_count() const {
    int64_t n = 0;
    for (const auto& m : members_)
      n += m.alive ? 1 : 0;
    return n;
  }

  std::string errs() {
    std::string s;
    for (auto& m : members_) {
      auto e = m.child->err();
      s += "--- " + m.process + " (tail)\n"
           + (e.size() > 3000 ? e.substr(e.size() - 3000) : e) + "\n";
    }
    return s;
  }

  /// Waits until every event of `pub` was delivered.
  bool delivered_all(const std::vector<published_event>& pub,
                     std::chrono::milliseconds bound) {
    return wait_until(
      [&] {
        std::set<std::pair<std::string, int64_t>> seen;
        for (const auto& d : deliveries())
          seen.insert({d.feed, d.id});
        for (const auto& p : pub)
          if (!seen.count({p.feed, p.id}))
            return false;
        return true;
      },
      bound);
  }

  /// Stops publishing and waits until every published event was delivered.
  bool drain(std::chrono::milliseconds bound) {
    stop_publisher();
    return delivered_all(published(), bound);
  }

  /// Every duplicated (feed, id) was delivered by `process` (the member the
  /// fault hit): the others never deliver an event twice.
  void expect_duplicates_only_of(const delivery_report& r,
                                 const std::string& process) {
    for (const auto& [key, procs] : r.duplicated)
      EXPECT_TRUE(procs.count(process))
        << key.first << " id " << key.second << " duplicated, but " << process
        << " never delivered it";
  }

  /// The earliest delivery by `process` of a duplicated event, relative to
  /// `fault_t` (ns; 0 when nothing was duplicated). The old owner's
  /// committed cursor lags its deliveries by at most about one
  /// checkpoint interval plus a commit's round trip, so its duplicated
  /// deliveries are all from shortly before the fault or after it (I4).
  int64_t earliest_duplicate(const std::vector<delivery_line>& ds,
                             const delivery_report& r,
                             const std::string& process, int64_t fault_t) {
    int64_t earliest = 0;
    for (const auto& d : ds)
      if (d.process == process && r.duplicated.count({d.feed, d.id}))
        earliest = std::min(earliest, d.t - fault_t);
    return earliest;
  }

  /// A steady period after the group balanced: a few checkpoint commits,
  /// so that the fault hits running owners, not fresh claims; then every
  /// event published so far is delivered, so each feed has deliveries by
  /// its owner before the fault (the takeover times count from them; a
  /// loaded machine can lag the publisher by seconds).
  void steady() {
    std::this_thread::sleep_for(2s);
    EXPECT_TRUE(delivered_all(published(), 30s))
      << "the members did not catch up with the publisher\n"
      << errs();
  }

  /// A few publishing rounds once the group balanced after a move: every
  /// moved feed then has deliveries by its new owner (a feed taken over
  /// after the last event shows no takeover in the delivery lines).
  void after_move() {
    // Two ends of a round: the second round started after this call (a
    // loaded machine can stretch a round of 900 publishes to seconds).
    auto r0 = rounds_.load();
    wait_until([&] { return rounds_.load() >= r0 + 2; }, 30s);
  }

  void store_link_fault(bool cut);

  void sigcont_etcd() {
    ::kill(etcd_->pid(), SIGCONT);
    etcd_stopped_ = false;
  }

  static std::unique_ptr<etcd_instance> etcd_;
  std::unique_ptr<hub> hub_;
  std::unique_ptr<fault_proxy> proxy_;
  std::vector<member> members_;
  std::string group_ = "chaos";
  int feeds_ = chaos_feeds();
  bool etcd_stopped_ = false;

  std::thread publisher_;
  std::atomic<bool> publishing_{false};
  /// Rounds published (an event on every feed each).
  std::atomic<int> rounds_{0};
  std::mutex mu_;
  std::vector<published_event> published_;
};

std::unique_ptr<etcd_instance> GroupChaos::etcd_;

} // namespace

// --- the checker itself -----------------------------------------------------

TEST(DeliveryCheck, CountsEveryViolationOnce) {
  // feed a: m1 (token 5) delivers 1, 2, 3; m2 takes over (token 9) from 3
  // at t=100, and m1 still delivers 4 at t=150 (overlap), then m2 4, 5.
  // feed b: m3 (token 7) delivers 1, 3, 2 (reordered); 4 is lost; then a
  // newer tenure (token 8) starts at id 0, below the older one's start
  // (regression).
  std::vector<delivery_line> ds{
    {"m1", 10, "a", 5, 1},  {"m1", 20, "a", 5, 2},  {"m1", 30, "a", 5, 3},
    {"m2", 100, "a", 9, 3}, {"m1", 150, "a", 5, 4}, {"m2", 160, "a", 9, 4},
    {"m2", 170, "a", 9, 5}, {"m3", 10, "b", 7, 1},  {"m3", 20, "b", 7, 3},
    {"m3", 30, "b", 7, 2},  {"m3", 200, "b", 8, 0}};
  std::vector<published_event> pub{{"a", 1}, {"a", 2}, {"a", 3}, {"a", 4},
                                   {"a", 5}, {"b", 0}, {"b", 1}, {"b", 2},
                                   {"b", 3}, {"b", 4}};
  auto r = check_deliveries(ds, pub, int64_t{50});
  EXPECT_EQ(r.delivered, 11u);
  EXPECT_EQ(r.lost, 1u) << r.summary();
  EXPECT_EQ(r.reordered, 1u) << r.summary();
  EXPECT_EQ(r.duplicates, 2u) << r.summary(); // a/3, a/4
  EXPECT_EQ(r.overlap, 1u) << r.summary();
  EXPECT_EQ(r.overlap_by_feed.at("a"), 1u);
  EXPECT_EQ(r.regressions, 1u) << r.summary();
  ASSERT_EQ(r.takeover_ns.count("a"), 1u);
  EXPECT_EQ(r.takeover_ns.at("a"), 50);
  EXPECT_EQ(r.takeover_ns.at("b"), 150);
  EXPECT_EQ(r.duplicated.at({"a", 4}).count("m1"), 1u);

  // Lines as the CLI prints them; half lines and other types are skipped.
  auto parsed = parse_deliveries(
    "{\"type\":\"event\",\"t\":7,\"feed\":\"a\",\"token\":5,\"id\":1,"
    "\"subject\":\"a/e\"}\n{\"type\":\"reset\",\"t\":8}\n{\"type\":\"ev",
    "m1");
  ASSERT_EQ(parsed.size(), 1u);
  EXPECT_EQ(parsed[0].t, 7);
  EXPECT_EQ(parsed[0].token, 5u);
  EXPECT_EQ(parsed[0].id, 1);
  EXPECT_EQ(parsed[0].process, "m1");
}

// --- the proxy itself ------------------------------------------------------

TEST(FaultProxy, PassCutBlackholeDelayHeal) {
  auto etcd = etcd_instance(find_etcd());
  fault_proxy proxy;
  auto link = proxy.add_link("127.0.0.1", etcd.client_port());
  auto url = "http://127.0.0.1:" + std::to_string(proxy.port(link));
  auto health = [&](std::chrono::milliseconds bound) {
    auto r
      = run_child({"/usr/bin/curl", "-s", "-m",
                   std::to_string(bound.count() / 1000.0), url + "/health"},
                  bound + 5s);
    return r.out;
  };
  if (::access("/usr/bin/curl", X_OK) != 0)
    GTEST_SKIP() << "no /usr/bin/curl";

  // pass: bytes go both ways.
  EXPECT_NE(health(5s).find("true"), std::string::npos);
  EXPECT_GT(proxy.forwarded_bytes(link), 0u);

  // cut: refused at once.
  proxy.cut(link);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(health(5s), "");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);

  // blackhole: accepted, then nothing until the client gives up.
  proxy.heal(link);
  EXPECT_NE(health(5s).find("true"), std::string::npos);
  proxy.blackhole(link);
  auto accepted = proxy.accepted(link);
  t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(health(1s), "");
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 900ms);
  EXPECT_GT(proxy.accepted(link), accepted);

  // blackhole, then heal while the request waits: it completes.
  std::string late;
  std::thread waiter{[&] {
    late = health(10s);
  }};
  std::this_thread::sleep_for(700ms);
  proxy.heal(link);
  waiter.join();
  EXPECT_NE(late.find("true"), std::string::npos);

  // delay: every chunk waits.
  proxy.delay(link, 300ms);
  t0 = std::chrono::steady_clock::now();
  EXPECT_NE(health(5s).find("true"), std::string::npos);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 550ms); // both ways
  proxy.pass(link);
}

// --- S1: steady state --------------------------------------------------------

TEST_F(GroupChaos, S1SteadyStateEveryFeedHasOneOwnerItsRendezvousWinner) {
  group_ = "s1";
  start_three(etcd_->base_url());
  start_publisher();
  ASSERT_TRUE(wait_until([&] { return balanced(); }, 30s)) << errs();
  auto want = hrw_owners(feeds_, {"m1", "m2", "m3"});
  auto counts = owned_counts(want);
  auto steady_t = mono_now_ns();
  // Ten samples, 0.5 s apart: each member owns exactly the feeds it wins
  // (their sum is every feed), and nothing moves.
  for (int i = 0; i < 10; ++i) {
    std::this_thread::sleep_for(500ms);
    int64_t sum = 0;
    for (const auto& p : {"m1", "m2", "m3"}) {
      auto owned = field(status(p), "owned");
      EXPECT_EQ(owned, counts[p]) << p << " at sample " << i << "\n" << errs();
      sum += owned;
    }
    EXPECT_EQ(sum, feeds_) << "at sample " << i;
  }
  auto [lo, hi] = std::minmax({counts["m1"], counts["m2"], counts["m3"]});
  double balance = lo > 0 ? double(hi) / double(lo) : 0.0;
  std::cout << "[S1] owned m1=" << counts["m1"] << " m2=" << counts["m2"]
            << " m3=" << counts["m3"] << " max/min " << balance << std::endl;
  // The design's bound (max/min <= 1.10) is a property of rendezvous
  // hashing at this size: 900 feeds split 295/294/311 over m1..m3 (1.058);
  // with a few dozen feeds the spread of the hash alone exceeds it.
  if (feeds_ >= 900)
    EXPECT_LE(balance, 1.10);
  ASSERT_TRUE(drain(20s)) << errs();

  auto ds = deliveries();
  auto r = check_deliveries(ds, published());
  std::cout << "[S1] " << r.summary() << std::endl;
  dump("steady_t " + std::to_string(steady_t));
  EXPECT_EQ(r.lost, 0u) << r.summary();
  EXPECT_EQ(r.reordered, 0u) << r.summary();
  EXPECT_EQ(r.duplicates, 0u) << r.summary();
  EXPECT_EQ(r.overlap, 0u) << r.summary();
  EXPECT_EQ(r.regressions, 0u) << r.summary();
  // Once balanced, every delivery of a feed came from its winner.
  std::size_t elsewhere = 0;
  for (const auto& d : ds)
    if (d.t >= steady_t && d.process != want[d.feed])
      ++elsewhere;
  EXPECT_EQ(elsewhere, 0u) << "deliveries by a member that is not the winner";
}

// --- S2: crash ---------------------------------------------------------------

TEST_F(GroupChaos, S2CrashedMembersFeedsMoveToTheirNextWinnerAndLoseNothing) {
  group_ = "s2";
  start_three(etcd_->base_url());
  start_publisher();
  ASSERT_TRUE(wait_until([&] { return balanced(); }, 30s)) << errs();
  steady();
  auto m2_owned = field(status("m2"), "owned");
  auto after = hrw_owners(feeds_, {"m1", "m3"});

  auto fault_t = mono_now_ns();
  auto& m2 = find("m2");
  m2.child->signal(SIGKILL);
  m2.child->wait_exit(5s);
  m2.alive = false;
  // Its lease expires (TTL 3 s after its last keepalive): m1 and m3 claim
  // what each of them wins without m2.
  ASSERT_TRUE(wait_until([&] { return balanced(); }, 30s)) << errs();
  after_move();
  ASSERT_TRUE(drain(20s)) << errs();

  auto ds = deliveries();
  auto r = check_deliveries(ds, published(), fault_t);
  auto p99 = takeover_p99_ms(r);
  std::cout << "[S2] " << r.summary() << "\n[S2] m2 owned " << m2_owned
            << "; takeover p99 " << p99 << " ms" << std::endl;
  dump("fault_t " + std::to_string(fault_t));
  EXPECT_EQ(r.lost, 0u) << r.summary();
  EXPECT_EQ(r.reordered, 0u) << r.summary();
  EXPECT_EQ(r.overlap, 0u) << r.summary();
  EXPECT_EQ(r.regressions, 0u) << r.summary();
  // Duplicates only of what m2 delivered after its last commit.
  expect_duplicates_only_of(r, "m2");
  EXPECT_GT(earliest_duplicate(ds, r, "m2", fault_t), -commit_lag_ns)
    << "a commit was lost";
  // Exactly m2's feeds moved, each to its winner among the survivors.
  expect_moved_to_winners(r, ds, after, m2_owned);
  // Liveness only (a loaded machine): the takeover figure against the
  // design's goal (p99 <= 7 s) is bench/scaleout's.
  EXPECT_LT(p99, 15000) << r.summary();
}

// --- S3: graceful leave ------------------------------------------------------

TEST_F(GroupChaos, S3LeavingMemberHandsItsFeedsOverWithoutDuplicates) {
  group_ = "s3";
  start_three(etcd_->base_url());
  start_publisher();
  ASSERT_TRUE(wait_until([&] { return balanced(); }, 30s)) << errs();
  steady();
  auto m2_owned = field(status("m2"), "owned");
  auto after = hrw_owners(feeds_, {"m1", "m3"});

  auto fault_t = mono_now_ns();
  int64_t left_ns = 0;
  ASSERT_NO_FATAL_FAILURE(leave_and_settle("m2", 20s, left_ns));

  auto ds = deliveries();
  auto r = check_deliveries(ds, published(), fault_t);
  auto p99 = takeover_p99_ms(r);
  std::cout << "[S3] " << r.summary() << "\n[S3] m2 owned " << m2_owned
            << "; takeover p99 " << p99 << " ms" << std::endl;
  dump("fault_t " + std::to_string(fault_t));
  EXPECT_EQ(r.lost, 0u) << r.summary();
  EXPECT_EQ(r.reordered, 0u) << r.summary();
  // A leave writes each final cursor after the last delivery: the next
  // owner starts after it.
  EXPECT_EQ(r.duplicates, 0u) << r.summary();
  EXPECT_EQ(r.overlap, 0u) << r.summary();
  EXPECT_EQ(r.regressions, 0u) << r.summary();
  expect_moved_to_winners(r, ds, after, m2_owned);
  // Liveness only; the figure (p99 <= 1.5 s) is bench/scaleout's.
  EXPECT_LT(p99, 10000) << r.summary();
}

// S3 with the leave paced (rule G9): at 50 starts a second m2's ~300
// feeds go over in about five seconds, 50 at once and one every 20 ms,
// while m2 delivers the rest until their turn. The environment reaches
// every member (OUTBOUND_GROUP_MAX_STARTS_PER_SECOND); each ctest case
// runs in its own process.
TEST_F(GroupChaos, S3PacedLeaveHandsOverAtTheStartRateWithoutDuplicates) {
  group_ = "s3p";
  ::setenv("OUTBOUND_GROUP_MAX_STARTS_PER_SECOND", "50", 1);
  start_three(etcd_->base_url());
  ::unsetenv("OUTBOUND_GROUP_MAX_STARTS_PER_SECOND");
  start_publisher();
  ASSERT_TRUE(wait_until([&] { return balanced(); }, 60s)) << errs();
  steady();
  auto m2_owned = field(status("m2"), "owned");
  ASSERT_GE(m2_owned, 150) << errs();
  auto after = hrw_owners(feeds_, {"m1", "m3"});

  auto fault_t = mono_now_ns();
  int64_t left_ns = 0;
  ASSERT_NO_FATAL_FAILURE(leave_and_settle("m2", 30s, left_ns));

  auto ds = deliveries();
  auto r = check_deliveries(ds, published(), fault_t);
  // m2 kept delivering the feeds waiting for their turn.
  int64_t m2_last = 0;
  for (const auto& d : ds)
    if (d.process == "m2")
      m2_last = std::max(m2_last, d.t - fault_t);
  std::cout << "[S3p] " << r.summary() << "\n[S3p] m2 owned " << m2_owned
            << "; left after " << left_ns / ms_ns << " ms; last m2 delivery at "
            << m2_last / ms_ns << " ms" << std::endl;
  dump("fault_t " + std::to_string(fault_t));
  EXPECT_EQ(r.lost, 0u) << r.summary();
  EXPECT_EQ(r.reordered, 0u) << r.summary();
  EXPECT_EQ(r.duplicates, 0u) << r.summary();
  EXPECT_EQ(r.overlap, 0u) << r.summary();
  EXPECT_EQ(r.regressions, 0u) << r.summary();
  expect_moved_to_winners(r, ds, after, m2_owned);
  // Paced: the hand-over took about (owned - 50) / 50 s (at least half of
  // it here; a leave that releases everything at once ends in well under
  // a second), and m2 delivered after the first second of it.
  auto paced_ns = (m2_owned - 50) * 1'000'000'000LL / 50;
  EXPECT_GE(left_ns, paced_ns / 2) << r.summary();
  EXPECT_GT(m2_last, 1'000'000'000LL) << r.summary();
}

// --- S4: join ----------------------------------------------------------------

TEST_F(GroupChaos, S4JoiningMemberTakesExactlyItsShareWithoutDuplicates) {
  group_ = "s4";
  start_three(etcd_->base_url());
  start_publisher();
  ASSERT_TRUE(wait_until([&] { return balanced(); }, 30s)) << errs();
  steady();
  auto before = hrw_owners(feeds_, {"m1", "m2", "m3"});
  auto after = hrw_owners(feeds_, {"m1", "m2", "m3", "m4"});
  auto m4_share = owned_counts(after)["m4"];

  auto fault_t = mono_now_ns();
  start_member("m4", etcd_->base_url());
  ASSERT_TRUE(wait_until([&] { return balanced(); }, 30s)) << errs();
  after_move();
  ASSERT_TRUE(drain(20s)) << errs();

  auto ds = deliveries();
  auto r = check_deliveries(ds, published(), fault_t);
  auto p99 = takeover_p99_ms(r);
  std::cout << "[S4] " << r.summary() << "\n[S4] m4's share " << m4_share
            << " of " << feeds_ << "; takeover p99 (from m4's start) " << p99
            << " ms" << std::endl;
  dump("fault_t " + std::to_string(fault_t));
  EXPECT_EQ(field(status("m4"), "owned"), m4_share) << errs();
  EXPECT_EQ(r.lost, 0u) << r.summary();
  EXPECT_EQ(r.reordered, 0u) << r.summary();
  EXPECT_EQ(r.duplicates, 0u) << r.summary();
  EXPECT_EQ(r.overlap, 0u) << r.summary();
  EXPECT_EQ(r.regressions, 0u) << r.summary();
  // Only the feeds m4 wins moved (rendezvous hashing: about a quarter),
  // each from its old winner to m4.
  EXPECT_EQ(static_cast<int64_t>(r.takeover_ns.size()), m4_share)
    << r.summary();
  for (const auto& [feed, t] : r.takeover_ns)
    EXPECT_EQ(after[feed], "m4") << feed << " moved from " << before[feed];
}

// --- S5: member <-> store cut ------------------------------------------------

/// S5 with the link m1 <-> etcd cut (`cut`: RST and refused connects) or
/// silent (blackhole).
void GroupChaos::store_link_fault(bool cut) {
  group_ = cut ? "s5cut" : "s5";
  proxy_ = std::make_unique<fault_proxy>();
  auto link = proxy_->add_link("127.0.0.1", etcd_->client_port());
  start_three("http://127.0.0.1:" + std::to_string(proxy_->port(link)));
  start_publisher();
  ASSERT_TRUE(wait_until([&] { return balanced(); }, 30s)) << errs();
  steady();

  auto fault_t = mono_now_ns();
  if (cut)
    proxy_->cut(link);
  else
    proxy_->blackhole(link);
  // m1 cannot renew: it holds by its fence deadline (<= fault + 2.5 s).
  EXPECT_TRUE(wait_until(
    [&] {
      auto st = status("m1");
      return !st.empty() && st.at("holding").as_bool();
    },
    10s))
    << errs();
  // Its lease expires (>= fault + 2 s): m2 and m3 take every feed.
  ASSERT_TRUE(wait_until(
    [&] {
      return field(status("m2"), "owned") + field(status("m3"), "owned")
             == feeds_;
    },
    20s))
    << errs();
  std::this_thread::sleep_for(500ms);
  auto heal_t = mono_now_ns();
  proxy_->heal(link);
  // m1 learns that its lease is gone, re-joins, and gets its share back.
  EXPECT_TRUE(
    wait_until([&] { return field(status("m1"), "rejoins") >= 1; }, 15s))
    << errs();
  EXPECT_TRUE(wait_until([&] { return balanced(); }, 20s)) << errs();
  ASSERT_TRUE(drain(20s)) << errs();

  auto ds = deliveries();
  auto r = check_deliveries(ds, published(), fault_t);
  std::cout << "[" + group_ + "] " << r.summary() << std::endl;
  dump("fault_t " + std::to_string(fault_t));
  EXPECT_EQ(r.lost, 0u) << r.summary();
  EXPECT_EQ(r.reordered, 0u) << r.summary();
  EXPECT_EQ(r.overlap, 0u) << r.summary();
  EXPECT_EQ(r.regressions, 0u) << r.summary();
  expect_duplicates_only_of(r, "m1");
  auto early = earliest_duplicate(ds, r, "m1", fault_t);
  std::cout << "[" + group_ + "] earliest duplicated m1 delivery "
            << early / ms_ns << " ms after the fault" << std::endl;
  EXPECT_GT(early, -commit_lag_ns) << "a commit was lost";
  EXPECT_FALSE(r.takeover_ns.empty()) << "no feed moved";
  // No m1 delivery between its fence deadline and the heal.
  std::size_t late = 0;
  for (const auto& d : ds)
    if (d.process == "m1" && d.t > fault_t + fence_ns + slack_ns
        && d.t < heal_t)
      ++late;
  EXPECT_EQ(late, 0u) << "m1 delivered after its fence deadline";
  EXPECT_GE(field(status("m1"), "holds"), 1) << errs();
}

TEST_F(GroupChaos, S5StoreBlackholeHoldsThenMovesWithoutOverlapAndRejoins) {
  store_link_fault(false);
}

TEST_F(GroupChaos, S5StoreCutHoldsThenMovesWithoutOverlapAndRejoins) {
  store_link_fault(true);
}

// --- S7: paused member -------------------------------------------------------

TEST_F(GroupChaos, S7PausedMemberIsFencedAndOverlapsAtMostOnePerFeed) {
  group_ = "s7";
  start_three(etcd_->base_url());
  start_publisher();
  ASSERT_TRUE(wait_until([&] { return balanced(); }, 30s)) << errs();
  steady();
  auto before = status("m1");

  auto fault_t = mono_now_ns();
  find("m1").child->signal(SIGSTOP);
  std::this_thread::sleep_for(6s); // 2 TTL
  find("m1").child->signal(SIGCONT);

  // m1's late work is refused: a fenced commit, a lost lease (re-join) or
  // at least a hold.
  EXPECT_TRUE(wait_until(
    [&] {
      auto st = status("m1");
      return field(st, "commits_fenced") + field(st, "rejoins")
               + field(st, "renewals_lost")
             > field(before, "commits_fenced") + field(before, "rejoins")
                 + field(before, "renewals_lost");
    },
    15s))
    << errs();
  EXPECT_TRUE(wait_until([&] { return balanced(); }, 25s)) << errs();
  ASSERT_TRUE(drain(20s)) << errs();

  auto ds = deliveries();
  auto r = check_deliveries(ds, published(), fault_t);
  std::cout << "[S7] " << r.summary() << std::endl;
  dump("fault_t " + std::to_string(fault_t));
  auto early = earliest_duplicate(ds, r, "m1", fault_t);
  std::cout << "[S7] earliest duplicated m1 delivery " << early / ms_ns
            << " ms after the fault" << std::endl;
  EXPECT_GT(early, -commit_lag_ns) << "a commit was lost";
  EXPECT_EQ(r.lost, 0u) << r.summary();
  EXPECT_EQ(r.reordered, 0u) << r.summary();
  EXPECT_LE(r.max_overlap_per_feed(), 1u) << r.summary();
  EXPECT_EQ(r.regressions, 0u) << r.summary();
  expect_duplicates_only_of(r, "m1");
  EXPECT_FALSE(r.takeover_ns.empty()) << "no feed moved";
}

// --- S8: store outage --------------------------------------------------------

TEST_F(GroupChaos, S8StoreOutageHoldsEveryMemberThenAllFeedsAreOwnedAgain) {
  group_ = "s8";
  start_three(etcd_->base_url());
  start_publisher();
  ASSERT_TRUE(wait_until([&] { return balanced(); }, 30s)) << errs();
  steady();

  auto fault_t = mono_now_ns();
  ASSERT_GT(etcd_->pid(), 0);
  ::kill(etcd_->pid(), SIGSTOP);
  etcd_stopped_ = true;
  // By fault + TTL every member passed its fence deadline: all hold.
  std::this_thread::sleep_for(4s);
  for (const auto& p : {"m1", "m2", "m3"}) {
    auto st = status(p);
    EXPECT_TRUE(!st.empty() && st.at("holding").as_bool())
      << p << " does not hold during the store outage\n"
      << errs();
  }
  std::this_thread::sleep_for(2s); // 2 TTL in all
  auto resume_t = mono_now_ns();
  sigcont_etcd();

  EXPECT_TRUE(wait_until([&] { return balanced(); }, 25s)) << errs();
  ASSERT_TRUE(drain(20s)) << errs();

  auto ds = deliveries();
  auto r = check_deliveries(ds, published(), fault_t);
  std::cout << "[S8] " << r.summary() << std::endl;
  dump("fault_t " + std::to_string(fault_t));
  EXPECT_EQ(r.lost, 0u) << r.summary();
  EXPECT_EQ(r.reordered, 0u) << r.summary();
  EXPECT_EQ(r.overlap, 0u) << r.summary();
  EXPECT_EQ(r.regressions, 0u) << r.summary();
  // Every member's committed cursor lagged its deliveries by about one
  // checkpoint interval when the store stopped.
  for (const auto& p : {"m1", "m2", "m3"})
    EXPECT_GT(earliest_duplicate(ds, r, p, fault_t), -commit_lag_ns)
      << p << ": a commit was lost";
  // Nothing delivered between fault + TTL (past every fence deadline) and
  // the resume, but one in-flight delivery per member and feed.
  std::map<std::pair<std::string, std::string>, int> late;
  for (const auto& d : ds)
    if (d.t > fault_t + ttl_ns && d.t < resume_t)
      ++late[{d.process, d.feed}];
  for (const auto& [key, n] : late)
    EXPECT_LE(n, 1) << key.first << " " << key.second
                    << " delivered during the outage";
}

// --- S9: flapping member
// -------------------------------------------------------

TEST_F(GroupChaos, S9FlappingMemberLosesAndReordersNothing) {
  group_ = "s9";
  start_three(etcd_->base_url());
  start_publisher();
  ASSERT_TRUE(wait_until([&] { return balanced(); }, 30s)) << errs();
  steady();
  // Rebalances per restart: with rendezvous hashing only m1's own feeds may
  // move, each at most twice per restart (to a survivor, and back).
  auto m1_owned = field(status("m1"), "owned");
  auto moves = [&](const char* counter) {
    return field(status("m2"), counter) + field(status("m3"), counter);
  };
  auto in_before = moves("moved_in");
  auto out_before = moves("moved_out");
  ASSERT_GT(m1_owned, 0) << errs();
  const int restarts = 3;
  auto fault_t = mono_now_ns();
  for (int i = 0; i < restarts; ++i) {
    for (auto& mm : members_)
      if (mm.name == "m1" && mm.alive) {
        mm.child->signal(SIGKILL);
        mm.child->wait_exit(5s);
        mm.alive = false;
      }
    std::this_thread::sleep_for(1500ms);
    start_member("m1", etcd_->base_url());
    std::this_thread::sleep_for(3s);
  }
  EXPECT_TRUE(wait_until([&] { return balanced(); }, 25s)) << errs();
  ASSERT_TRUE(drain(20s)) << errs();
  auto moved_in = moves("moved_in") - in_before;
  auto moved_out = moves("moved_out") - out_before;
  std::cout << "[S9] m1 owned " << m1_owned << "; survivors took " << moved_in
            << " feeds and gave back " << moved_out << " over " << restarts
            << " restarts" << std::endl;
  // Each of m1's feeds went to a survivor at most once per restart, and a
  // survivor gave back only feeds it took (its own never moved).
  EXPECT_LE(moved_in, restarts * m1_owned);
  EXPECT_LE(moved_out, moved_in);

  auto r = check_deliveries(deliveries(), published(), fault_t);
  std::cout << "[S9] " << r.summary() << std::endl;
  EXPECT_EQ(r.lost, 0u) << r.summary();
  EXPECT_EQ(r.reordered, 0u) << r.summary();
  EXPECT_EQ(r.regressions, 0u) << r.summary();
  // Duplicates only of events some m1 process delivered (it crashed after
  // its last commit).
  for (const auto& [key, procs] : r.duplicated) {
    bool by_m1 = false;
    for (const auto& p : procs)
      by_m1 = by_m1 || p.rfind("m1", 0) == 0;
    EXPECT_TRUE(by_m1) << key.first << " id " << key.second;
  }
}

// --- S8b: store hiccup shorter than the lease --------------------------------

TEST_F(GroupChaos, S8bShortStoreHiccupMovesNothingUnlessALeaseWasLost) {
  group_ = "s8b";
  start_three(etcd_->base_url());
  start_publisher();
  ASSERT_TRUE(wait_until([&] { return balanced(); }, 30s)) << errs();
  steady();
  std::map<std::string, int64_t> rejoins_before;
  for (const auto& p : {"m1", "m2", "m3"})
    rejoins_before[p] = field(status(p), "rejoins");

  // 2 s: each lease (last keepalive up to 1 s before the fault, TTL 3 s)
  // still runs when etcd resumes, unless that keepalive was the oldest
  // possible; a member whose fence deadline (keepalive + 2.5 s) passed
  // holds, and its next keepalive lifts the hold with no move.
  auto fault_t = mono_now_ns();
  ASSERT_GT(etcd_->pid(), 0);
  ::kill(etcd_->pid(), SIGSTOP);
  etcd_stopped_ = true;
  std::this_thread::sleep_for(2s);
  sigcont_etcd();
  std::this_thread::sleep_for(3s);
  EXPECT_TRUE(wait_until([&] { return balanced(); }, 25s)) << errs();
  ASSERT_TRUE(drain(20s)) << errs();

  auto ds = deliveries();
  auto r = check_deliveries(ds, published(), fault_t);
  std::cout << "[S8b] " << r.summary() << std::endl;
  dump("fault_t " + std::to_string(fault_t));
  EXPECT_EQ(r.lost, 0u) << r.summary();
  EXPECT_EQ(r.reordered, 0u) << r.summary();
  EXPECT_EQ(r.overlap, 0u) << r.summary();
  EXPECT_EQ(r.regressions, 0u) << r.summary();
  // A keepalive can still arrive after the expiry on a loaded machine (a
  // legal outcome: that member re-joins and its feeds move); a member that
  // kept its lease moved nothing and delivered nothing twice.
  std::set<std::string> rejoined;
  for (const auto& p : {"m1", "m2", "m3"}) {
    auto st = status(p);
    std::cout << "[S8b] " << p << " holds=" << field(st, "holds")
              << " rejoins=" << field(st, "rejoins") << std::endl;
    if (field(st, "rejoins") > rejoins_before[p])
      rejoined.insert(p);
  }
  for (const auto& [key, procs] : r.duplicated) {
    bool by_rejoined = false;
    for (const auto& p : procs)
      by_rejoined = by_rejoined || rejoined.count(p);
    EXPECT_TRUE(by_rejoined) << key.first << " id " << key.second
                             << " duplicated though no owner lost its lease";
  }
  if (rejoined.empty())
    EXPECT_TRUE(r.takeover_ns.empty()) << r.summary();
}

// --- slow store link: every chunk m1 <-> etcd waits 1.5 s
// ---------------------

TEST_F(GroupChaos, SlowStoreLinkIsSafeAndRecoversAfterHeal) {
  group_ = "slow";
  proxy_ = std::make_unique<fault_proxy>();
  auto link = proxy_->add_link("127.0.0.1", etcd_->client_port());
  start_three("http://127.0.0.1:" + std::to_string(proxy_->port(link)));
  start_publisher();
  ASSERT_TRUE(wait_until([&] { return balanced(); }, 30s)) << errs();
  steady();

  // Longer than a keepalive's deadline (renew interval, 1 s): m1's renewals
  // time out although some may still reach etcd. Either m1 holds while its
  // lease lives on (its feeds wait), or the lease expires and the feeds
  // move: both are legal; overlap, loss and reordering are not.
  auto fault_t = mono_now_ns();
  proxy_->delay(link, 1500ms);
  std::this_thread::sleep_for(6s);
  proxy_->heal(link);
  EXPECT_TRUE(wait_until([&] { return balanced(); }, 25s)) << errs();
  ASSERT_TRUE(drain(20s)) << errs();

  auto ds = deliveries();
  auto r = check_deliveries(ds, published(), fault_t);
  auto st = status("m1");
  std::cout << "[slow] " << r.summary()
            << "\n[slow] m1 holds=" << field(st, "holds")
            << " rejoins=" << field(st, "rejoins")
            << " renewals_error=" << field(st, "renewals_error")
            << " commit_errors=" << field(st, "commit_errors") << std::endl;
  dump("fault_t " + std::to_string(fault_t));
  EXPECT_EQ(r.lost, 0u) << r.summary();
  EXPECT_EQ(r.reordered, 0u) << r.summary();
  EXPECT_EQ(r.overlap, 0u) << r.summary();
  EXPECT_EQ(r.regressions, 0u) << r.summary();
  expect_duplicates_only_of(r, "m1");
}
