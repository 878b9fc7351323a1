// `outbound group-member` end to end: three member processes of one feed
// group on a private etcd (tests/support/etcd_fixture.hpp) and an
// in-process hub share 12 ledger feeds; one member is SIGKILLed, another
// leaves with SIGTERM. Every published event is delivered (none lost), in
// order per feed and owner, with duplicates only after the crash and at
// most what the crashed member delivered since its last checkpoint; the
// last member owns every feed. Timing bounds are generous (a loaded
// machine); the ordering and loss checks are exact. Then the loud failures:
// a hub that does not answer the probe, a store that never answers (never
// joined), a leave whose store is cut (unreleased feeds), config files and
// feed ids that are named in the error, the store client's TLS settings.

#include "tests/support/child_process.hpp"
#include "tests/support/delivery_check.hpp"
#include "tests/support/etcd_fixture.hpp"
#include "tests/support/fault_proxy.hpp"
#include "tests/support/http_get.hpp"
#include "tests/support/ports.hpp"
#include "tests/support/scripted_server.hpp"
#include "tests/support/test_certs.hpp"

#include "hub/hub.hpp"

#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>

using namespace outbound;
using namespace outbound::testing;
using namespace std::chrono_literals;

namespace {

/// The delivery lines of one member's standard output.
std::vector<delivery_line> deliveries_of(const std::string& out) {
  return parse_deliveries(out, "");
}

/// The last JSON line of `err` of the given type.
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

/// Every JSON line of `err` of the given type.
std::vector<boost::json::object> lines_of_type(const std::string& err,
                                               const std::string& type) {
  std::vector<boost::json::object> out;
  std::istringstream in{err};
  std::string line;
  while (std::getline(in, line)) {
    boost::system::error_code ec;
    auto v = boost::json::parse(line, ec);
    if (!ec && v.is_object() && v.as_object().contains("type")
        && v.as_object().at("type").as_string() == type)
      out.push_back(v.as_object());
  }
  return out;
}

std::string str_of(const boost::json::object& o, const char* key) {
  auto* v = o.if_contains(key);
  return v && v->is_string() ? std::string{v->get_string()} : std::string{};
}

class GroupMemberCli : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    etcd_ = start_suite_etcd(setup_error_);
  }

  static void TearDownTestSuite() {
    etcd_.reset();
  }

  void SetUp() override {
    ASSERT_TRUE(etcd_) << setup_error_;
    hub_config c;
    c.seed = 7;
    hub_ = std::make_unique<hub>(c);
    hub_->start();
  }

  void TearDown() override {
    members_.clear();
    hub_.reset();
  }

  running_child& start_member(const std::string& name) {
    members_.push_back(
      std::make_unique<running_child>(outbound_argv({"group-member",
                                                     "--group",
                                                     group_,
                                                     "--member",
                                                     name,
                                                     "--etcd",
                                                     etcd_->base_url(),
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
                                                     "0.5",
                                                     hub_->base_url()})));
    return *members_.back();
  }

  /// Publishes one event to each feed, `rounds` times.
  void publish(int rounds) {
    for (int r = 0; r < rounds; ++r)
      for (int f = 0; f < feeds_; ++f)
        hub_->publish("feed-" + std::to_string(f) + "/e", "k");
    published_ += rounds * feeds_;
  }

  /// Every member's deliveries so far.
  std::vector<delivery_line> all() const {
    std::vector<delivery_line> out;
    for (const auto& m : members_) {
      auto d = deliveries_of(m->out());
      out.insert(out.end(), d.begin(), d.end());
    }
    return out;
  }

  /// Waits until every published event was delivered at least once.
  bool wait_all_delivered(std::chrono::milliseconds bound) {
    auto until = std::chrono::steady_clock::now() + bound;
    while (std::chrono::steady_clock::now() < until) {
      std::set<int64_t> ids;
      for (const auto& d : all())
        ids.insert(d.id);
      if (static_cast<int>(ids.size()) >= published_)
        return true;
      std::this_thread::sleep_for(100ms);
    }
    return false;
  }

  static std::unique_ptr<etcd_instance> etcd_;
  static inline std::string setup_error_;
  std::unique_ptr<hub> hub_;
  std::vector<std::unique_ptr<running_child>> members_;
  std::string group_ = "cli";
  int feeds_ = 12;
  int published_ = 0;
};

std::unique_ptr<etcd_instance> GroupMemberCli::etcd_;

} // namespace

TEST_F(GroupMemberCli, CrashAndLeaveLoseNothingAndTheLastMemberOwnsAll) {
  group_ = "crash-leave";
  auto& m1 = start_member("m1");
  auto& m2 = start_member("m2");
  auto& m3 = start_member("m3");
  publish(3);
  ASSERT_TRUE(wait_all_delivered(30s)) << m1.err() << m2.err() << m3.err();
  // Every feed is owned by exactly one member before the faults: each
  // feed's events so far carry one token.
  std::map<std::string, std::set<uint64_t>> tokens;
  for (const auto& d : all())
    tokens[d.feed].insert(d.token);
  EXPECT_EQ(tokens.size(), static_cast<std::size_t>(feeds_));
  for (const auto& [feed, ts] : tokens)
    EXPECT_EQ(ts.size(), 1u) << feed;

  // Crash: m2's feeds move after its lease (3 s) expires.
  m2.signal(SIGKILL);
  publish(2);
  ASSERT_TRUE(wait_all_delivered(30s)) << m1.err() << m3.err();

  // Graceful leave: m3 releases its feeds; m1 takes them at its next poll.
  m3.signal(SIGTERM);
  auto code = m3.wait_exit(20s);
  ASSERT_TRUE(code) << "m3 did not leave";
  EXPECT_EQ(*code, 0) << m3.err();
  auto exit_line = last_line(m3.err(), "exit");
  ASSERT_FALSE(exit_line.empty()) << m3.err();
  EXPECT_TRUE(exit_line.at("left").as_bool());
  EXPECT_EQ(exit_line.at("owned").as_int64(), 0);
  publish(2);
  ASSERT_TRUE(wait_all_delivered(30s)) << m1.err();

  // m1 owns everything now.
  bool all_owned = false;
  for (int i = 0; i < 100 && !all_owned; ++i) {
    auto st = last_line(m1.err(), "status");
    all_owned = !st.empty() && st.at("owned").as_int64() == feeds_
                && st.at("running").as_int64() == feeds_;
    if (!all_owned)
      std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(all_owned) << m1.err();

  // Exact checks: no loss; per feed and token, ids strictly increase;
  // duplicates only of ids m2 (the crashed member) delivered.
  auto ds = all();
  std::map<int64_t, int> count;
  std::map<std::pair<std::string, uint64_t>, int64_t> last;
  for (const auto& d : ds) {
    ++count[d.id];
    auto& l = last[{d.feed, d.token}];
    EXPECT_GT(d.id, l) << "reordered within " << d.feed << " token " << d.token;
    l = d.id;
  }
  EXPECT_EQ(static_cast<int>(count.size()), published_) << "lost events";
  std::set<int64_t> by_m2;
  for (const auto& d : deliveries_of(m2.out()))
    by_m2.insert(d.id);
  for (const auto& [id, n] : count) {
    if (n > 1) {
      EXPECT_EQ(n, 2) << "id " << id;
      EXPECT_TRUE(by_m2.count(id))
        << "id " << id << " duplicated, but the crashed member never had it";
    }
  }
  m1.signal(SIGTERM);
  auto c1 = m1.wait_exit(20s);
  ASSERT_TRUE(c1);
  EXPECT_EQ(*c1, 0) << m1.err();
}

TEST_F(GroupMemberCli, ABadSettingIsAConfigErrorNamingTheField) {
  auto r = run_child(outbound_argv({"group-member", "--group", "Bad Name",
                                    "--feed-count", "1", hub_->base_url()}),
                     20s);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("group.name"), std::string::npos) << r.err;
  r = run_child(
    outbound_argv({"group-member", "--group", "ok", hub_->base_url()}), 20s);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--feed"), std::string::npos) << r.err;
  r = run_child(outbound_argv({"group-member", "--group", "ok", "--feed-count",
                               "1", "--lease-ttl", "1", hub_->base_url()}),
                20s);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("group.lease_ttl"), std::string::npos) << r.err;
}

TEST_F(GroupMemberCli, MetricsPortServesTheGroupFamilies) {
  group_ = "metrics";
  members_.push_back(std::make_unique<running_child>(outbound_argv(
    {"group-member", "--group", group_, "--member", "m1", "--etcd",
     etcd_->base_url(), "--feed-count", "3", "--initial-settle", "0.5",
     "--metrics-port", "0", "--quiet", hub_->base_url()})));
  auto& m = *members_.back();
  uint16_t port = 0;
  for (int i = 0; i < 100 && port == 0; ++i) {
    auto line = last_line(m.err(), "metrics");
    if (!line.empty()) {
      std::string url{line.at("url").as_string()};
      auto colon = url.rfind(':');
      port = static_cast<uint16_t>(std::atoi(url.c_str() + colon + 1));
    } else {
      std::this_thread::sleep_for(100ms);
    }
  }
  ASSERT_NE(port, 0) << m.err();
  // Owned feeds reach the scrape once the member has claimed them.
  bool owned = false;
  std::string body;
  for (int i = 0; i < 150 && !owned; ++i) {
    body = http_get(port, "/metrics").second;
    owned = body.find("outbound_group_feeds{group=\"metrics\",state=\"owned\"} "
                      "3")
            != std::string::npos;
    if (!owned)
      std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(owned) << body;
  EXPECT_NE(body.find("outbound_group_lease_renewals_total"),
            std::string::npos);
  m.signal(SIGTERM);
  auto code = m.wait_exit(20s);
  ASSERT_TRUE(code);
  EXPECT_EQ(*code, 0) << m.err();
}

TEST_F(GroupMemberCli, OutOfRangeFlagsAreUsageOrConfigErrorsNotDefaults) {
  auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> args{"group-member", "--group", "ok",
                                  "--feed-count", "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    args.push_back(hub_->base_url());
    return run_child(outbound_argv(args), 20s);
  };
  // A negative or NaN duration is refused naming its field, not ignored.
  auto r = run({"--lease-ttl", "-5"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("group.lease_ttl"), std::string::npos) << r.err;
  r = run({"--initial-settle=nan"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("group.initial_settle"), std::string::npos) << r.err;
  r = run({"--min-members", "0"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--min-members"), std::string::npos) << r.err;
  r = run({"--max-starts-per-second", "0"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--max-starts-per-second"), std::string::npos) << r.err;
  // -1 is not "not given" (it once was the flags' sentinel).
  for (const char* flag : {"--max-starts-per-second", "--min-members"}) {
    r = run({flag, "-1"});
    EXPECT_EQ(r.exit_code, 2) << flag << ": " << r.err;
    EXPECT_NE(r.err.find(flag), std::string::npos) << r.err;
  }
  r = run({"--metrics-port", "-7"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--metrics-port"), std::string::npos) << r.err;
  // A negative or huge feed count fails at once (it used to wrap around
  // and build billions of feeds).
  r = run_child(outbound_argv({"group-member", "--group", "ok", "--feed-count",
                               "-3", hub_->base_url()}),
                20s);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.err.find("--feed-count"), std::string::npos) << r.err;
}

TEST_F(GroupMemberCli,
       AHubThatDoesNotAnswerTheProbeStopsTheMemberBeforeItJoins) {
  auto hub_url = "http://127.0.0.1:" + std::to_string(closed_port());
  auto r = run_child(
    outbound_argv({"group-member", "--group", "probe", "--member", "m1",
                   "--etcd", etcd_->base_url(), "--feed-count", "2", hub_url}),
    20s);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 7) << r.err;
  auto fs = lines_of_type(r.err, "failure");
  ASSERT_EQ(fs.size(), 1u) << r.err;
  EXPECT_EQ(str_of(fs[0], "source"), "hub_probe");
  EXPECT_EQ(str_of(fs[0], "kind"), "service_unavailable");
  EXPECT_NE(str_of(fs[0], "detail").find("not joining"), std::string::npos)
    << r.err;
  EXPECT_TRUE(lines_of_type(r.err, "exit").empty()) << "it never started";
  // A hub that answers, but not on the replay path: a request error.
  r = run_child(
    outbound_argv({"group-member", "--group", "probe", "--member", "m1",
                   "--etcd", etcd_->base_url(), "--feed-count", "2",
                   "--replay-path", "/v1/no-such-path", hub_->base_url()}),
    20s);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 4) << r.err;
  fs = lines_of_type(r.err, "failure");
  ASSERT_EQ(fs.size(), 1u) << r.err;
  EXPECT_EQ(fs[0].at("status").as_int64(), 404) << r.err;
}

TEST_F(GroupMemberCli, WithoutTheProbeHubFailuresAreLinesOnePerCause) {
  auto hub_url = "http://127.0.0.1:" + std::to_string(closed_port());
  auto r
    = run_child(outbound_argv({"group-member", "--group", "noprobe", "--member",
                               "m1", "--coordinator", "memory", "--feed-count",
                               "4", "--initial-settle", "0.2", "--duration",
                               "3", "--no-hub-probe", hub_url}),
                30s);
  ASSERT_FALSE(r.timed_out) << r.err;
  // The member rides a hub outage out (it may come back): a clean leave.
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto fs = lines_of_type(r.err, "failure");
  ASSERT_FALSE(fs.empty()) << "a hub that is down is reported: " << r.err;
  std::set<std::string> sources, causes;
  for (const auto& f : fs) {
    EXPECT_FALSE(str_of(f, "feed").empty()) << r.err;
    sources.insert(str_of(f, "source"));
    // Four feeds, each failing every poll and reconnect, but one line per
    // cause (whichever feed had it first).
    EXPECT_TRUE(causes
                  .insert(str_of(f, "source") + "|" + str_of(f, "kind") + "|"
                          + str_of(f, "detail"))
                  .second)
      << "a cause printed twice: " << r.err;
  }
  EXPECT_TRUE(sources.count("replay")) << r.err;
  auto exit_line = last_line(r.err, "exit");
  ASSERT_FALSE(exit_line.empty()) << r.err;
  EXPECT_GT(exit_line.at("hub_failures").as_int64(),
            static_cast<int64_t>(fs.size()));
  EXPECT_GT(exit_line.at("failures_suppressed").as_int64(), 0);
  EXPECT_NE(str_of(exit_line, "last_hub_failure").find("Connection refused"),
            std::string::npos)
    << r.err;
}

TEST_F(GroupMemberCli, AStoreThatNeverAnswersIsNeverJoinedWithItsError) {
  auto etcd_url = "http://127.0.0.1:" + std::to_string(closed_port());
  auto r = run_child(outbound_argv({"group-member",
                                    "--group",
                                    "nojoin",
                                    "--member",
                                    "m1",
                                    "--etcd",
                                    etcd_url,
                                    "--feed-count",
                                    "2",
                                    "--lease-ttl",
                                    "2",
                                    "--renew-interval",
                                    "0.5",
                                    "--fence-margin",
                                    "0.4",
                                    "--duration",
                                    "3",
                                    "--status-interval",
                                    "1",
                                    hub_->base_url()}),
                     30s);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 9) << r.err;
  auto exit_line = last_line(r.err, "exit");
  ASSERT_FALSE(exit_line.empty()) << r.err;
  EXPECT_EQ(str_of(exit_line, "outcome"), "never_joined");
  EXPECT_FALSE(exit_line.at("joined").as_bool());
  EXPECT_GE(exit_line.at("store_errors").as_int64(), 3);
  EXPECT_EQ(str_of(exit_line, "last_store_error").rfind("join: etcd", 0), 0u)
    << r.err;
  // The store's error is on stderr as it happens, not once per retry.
  auto fs = lines_of_type(r.err, "failure");
  ASSERT_FALSE(fs.empty()) << r.err;
  EXPECT_EQ(str_of(fs[0], "source"), "store");
  EXPECT_EQ(str_of(fs[0], "request"), "join");
  EXPECT_NE(str_of(fs[0], "detail").find("Connection refused"),
            std::string::npos)
    << r.err;
  EXPECT_LT(static_cast<int64_t>(fs.size()),
            exit_line.at("store_errors").as_int64())
    << r.err;
  // The status lines carry it too.
  auto st = last_line(r.err, "status");
  ASSERT_FALSE(st.empty()) << r.err;
  EXPECT_FALSE(str_of(st, "last_store_error").empty()) << r.err;
}

TEST_F(GroupMemberCli, EveryStderrLineIsJsonEvenWhenTheStoreAnswersJunk) {
  // A proxy in front of etcd answering bytes that are not UTF-8 (a
  // Latin-1 error page): the store's error quotes them, and the failure,
  // status and exit lines must still be JSON text, which is UTF-8
  // (RFC 8259 section 8.1).
  const std::string junk = "caf\xc3 \xff\xfe not json \xe9t\xe9";
  scripted_server etcd{{},
                       {step::read_request(),
                        step::send(scripted_server::json_response(200, junk)),
                        step::close()}};
  auto r = run_child(outbound_argv({"group-member",
                                    "--group",
                                    "junk",
                                    "--member",
                                    "m1",
                                    "--etcd",
                                    etcd.base_url(),
                                    "--feed-count",
                                    "1",
                                    "--lease-ttl",
                                    "2",
                                    "--renew-interval",
                                    "0.5",
                                    "--fence-margin",
                                    "0.4",
                                    "--duration",
                                    "2",
                                    "--status-interval",
                                    "1",
                                    "--no-hub-probe",
                                    hub_->base_url()}),
                     30s);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 9) << r.err;
  std::istringstream in{r.err};
  std::string line;
  std::size_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    boost::system::error_code ec;
    boost::json::parse(line, ec);
    EXPECT_FALSE(ec) << "not JSON: " << line;
  }
  EXPECT_GE(n, 2u);
  auto fs = lines_of_type(r.err, "failure");
  ASSERT_FALSE(fs.empty()) << r.err;
  EXPECT_NE(str_of(fs[0], "detail").find("not json"), std::string::npos);
  EXPECT_EQ(str_of(last_line(r.err, "exit"), "outcome"), "never_joined");
}

TEST_F(GroupMemberCli, ALeaveWithTheStoreCutReportsTheUnreleasedFeeds) {
  fault_proxy proxy;
  auto link = proxy.add_link("127.0.0.1", etcd_->client_port());
  members_.push_back(std::make_unique<running_child>(
    outbound_argv({"group-member",
                   "--group",
                   "cut-leave",
                   "--member",
                   "m1",
                   "--etcd",
                   "http://127.0.0.1:" + std::to_string(proxy.port(link)),
                   "--feed-count",
                   "3",
                   "--initial-settle",
                   "0.5",
                   "--lease-ttl",
                   "2",
                   "--renew-interval",
                   "0.5",
                   "--fence-margin",
                   "0.4",
                   "--checkpoint-interval",
                   "0.5",
                   "--poll-interval",
                   "0.25",
                   "--status-interval",
                   "0.25",
                   "--quiet",
                   hub_->base_url()})));
  auto& m = *members_.back();
  bool owned = false;
  for (int i = 0; i < 150 && !owned; ++i) {
    auto st = last_line(m.err(), "status");
    owned = !st.empty() && st.at("owned").as_int64() == 3;
    if (!owned)
      std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(owned) << m.err();
  proxy.cut(link);
  m.signal(SIGTERM);
  auto code = m.wait_exit(20s);
  ASSERT_TRUE(code) << m.err();
  EXPECT_EQ(*code, 10) << m.err();
  auto exit_line = last_line(m.err(), "exit");
  ASSERT_FALSE(exit_line.empty()) << m.err();
  EXPECT_EQ(str_of(exit_line, "outcome"), "left_unclean");
  EXPECT_TRUE(exit_line.at("joined").as_bool());
  EXPECT_EQ(exit_line.at("unreleased").as_int64(), 3) << m.err();
  EXPECT_TRUE(exit_line.at("revoke_failed").as_bool());
  EXPECT_FALSE(str_of(exit_line, "last_store_error").empty());
}

TEST_F(GroupMemberCli, AConfigFileErrorNamesTheFileAndASharedFileNeedsNoNames) {
  temp_dir dir;
  auto bad = dir.file("group.json");
  std::ofstream{bad} << R"({"name": "cfg", "lease_ttl": 1})";
  auto r = run_child(outbound_argv({"group-member", "--config", bad,
                                    "--feed-count", "1", hub_->base_url()}),
                     20s);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(bad + ": group.lease_ttl: must be >= 2"),
            std::string::npos)
    << r.err;
  r = run_child(
    outbound_argv({"group-member", "--config", dir.file("missing.json"),
                   "--feed-count", "1", hub_->base_url()}),
    20s);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(dir.file("missing.json") + ": group: cannot read"),
            std::string::npos)
    << r.err;
  // One file for every member: the names come from the flags.
  auto shared = dir.file("shared.json");
  std::ofstream{shared}
    << R"({"lease_ttl": 3, "renew_interval": 1, "initial_settle": 0.2,
                               "coordinator": {"kind": "memory"}})";
  r = run_child(outbound_argv({"group-member", "--config", shared, "--group",
                               "shared", "--member", "m1", "--feed-count", "1",
                               "--duration", "1", hub_->base_url()}),
                20s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(str_of(last_line(r.err, "exit"), "outcome"), "left") << r.err;
}

TEST_F(GroupMemberCli, ConfigErrorsNameADirectoryAVariableAndAnIntegerRange) {
  temp_dir dir;
  auto r = run_child(outbound_argv({"group-member", "--config", dir.path(),
                                    "--feed-count", "1", hub_->base_url()}),
                     20s);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("\"config_error\""), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(dir.path() + ": group: is a directory"),
            std::string::npos)
    << r.err;
  // An out-of-range variable is named as the variable.
  auto args = outbound_argv({"group-member", "--group", "env", "--member", "m1",
                             "--coordinator", "memory", "--feed-count", "1",
                             hub_->base_url()});
  r = run_child(args, 20s, {"OUTBOUND_GROUP_MAX_INFLIGHT_BATCHES=0"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("OUTBOUND_GROUP_MAX_INFLIGHT_BATCHES: must be an "
                       "integer in 1..1024, got 0"),
            std::string::npos)
    << r.err;
  r = run_child(args, 20s, {"OUTBOUND_GROUP_LEASE_TTL=100000"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("OUTBOUND_GROUP_LEASE_TTL: must be <= 86400 seconds, "
                       "got 100000"),
            std::string::npos)
    << r.err;
  // A fraction where an integer belongs states the integer range.
  auto file = dir.file("group.json");
  std::ofstream{file} << R"({"max_inflight_batches": 4.5})";
  r = run_child(
    outbound_argv({"group-member", "--config", file, "--group", "env",
                   "--member", "m1", "--feed-count", "1", hub_->base_url()}),
    20s);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(file
                       + ": group.max_inflight_batches: must be an "
                         "integer in 1..1024, got 4.5"),
            std::string::npos)
    << r.err;
}

TEST_F(GroupMemberCli, AFlagOverridesABadVariable) {
  // Flags override the environment: a bad OUTBOUND_GROUP_LEASE_TTL that
  // --lease-ttl replaces is no error; without the flag it is, named.
  std::vector<std::string> args{"group-member",
                                "--group",
                                "flags",
                                "--member",
                                "m1",
                                "--coordinator",
                                "memory",
                                "--feed-count",
                                "1",
                                "--initial-settle",
                                "0.2",
                                "--renew-interval",
                                "1",
                                "--fence-margin",
                                "0.5",
                                "--duration",
                                "0.5"};
  auto with_flag = args;
  with_flag.insert(with_flag.end(), {"--lease-ttl", "3", hub_->base_url()});
  auto r
    = run_child(outbound_argv(with_flag), 20s, {"OUTBOUND_GROUP_LEASE_TTL=1"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  args.push_back(hub_->base_url());
  r = run_child(outbound_argv(args), 20s, {"OUTBOUND_GROUP_LEASE_TTL=1"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("OUTBOUND_GROUP_LEASE_TTL: must be >= 2 seconds"),
            std::string::npos)
    << r.err;
}

TEST_F(GroupMemberCli, ABadFeedIdIsAConfigErrorShowingTheIdEscaped) {
  auto r
    = run_child(outbound_argv({"group-member", "--group", "ids",
                               "--coordinator", "memory", "--feed", "ok=a/",
                               "--feed", "bad\x1b[2Jid=b/", hub_->base_url()}),
                20s);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("feeds[1].id"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(R"(bad\\x1b[2Jid)"), std::string::npos)
    << "escaped (and JSON-escaped on the line): " << r.err;
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << "never raw";
  r = run_child(
    outbound_argv({"group-member", "--group", "ids", "--coordinator", "memory",
                   "--feed-count", "1", "--subject-prefix",
                   std::string(250, 'p'), hub_->base_url()}),
    20s);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("at most 200 bytes"), std::string::npos) << r.err;
}

TEST_F(GroupMemberCli, TheStoreClientsTlsComesFromFlagsOrTheEnvironment) {
  auto run = [&](std::vector<std::string> extra,
                 std::vector<std::string> env = {}) {
    std::vector<std::string> args{"group-member",          "--group", "tls",
                                  "--feed-count",          "1",       "--etcd",
                                  "https://127.0.0.1:2379"};
    args.insert(args.end(), extra.begin(), extra.end());
    args.push_back(hub_->base_url());
    return run_child(outbound_argv(args), 20s, env);
  };
  auto r = run({"--etcd-ca-file", "/nonexistent/ca.pem"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("group.coordinator.client.tls.ca_file"),
            std::string::npos)
    << r.err;
  r = run({}, {"OUTBOUND_GROUP_CLIENT_CERT=/nonexistent/c.pem"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("group.coordinator.client.tls.client_key_file"),
            std::string::npos)
    << "a certificate without its key: " << r.err;
}

namespace {

/// The whole text of the file at `path` ("" when it cannot be read).
std::string file_text(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

/// A child started with spawn_child, SIGKILLed and reaped if the test
/// leaves it running.
struct child_guard {
  pid_t pid = -1;
  ~child_guard() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      wait_child(pid, 10s);
    }
  }
};

/// Starts a member of `group` over 6 feeds whose stdout is a FIFO in
/// `dir` with a one-page buffer that nobody reads yet (`rfd`: its read
/// end, non-blocking) and its stderr the file `err_path`; returns once
/// the member owns all 6 feeds (a fatal failure otherwise).
void start_on_unread_fifo(const std::string& group, const std::string& etcd_url,
                          const std::string& hub_url, temp_dir& dir,
                          const std::string& err_path, int& rfd,
                          child_guard& child) {
  auto fifo = dir.file("out");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  rfd = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(rfd, 0) << std::strerror(errno);
  ::fcntl(rfd, F_SETPIPE_SZ, 4096);
  child.pid = spawn_child(outbound_argv({"group-member",
                                         "--group",
                                         group,
                                         "--member",
                                         "m1",
                                         "--etcd",
                                         etcd_url,
                                         "--feed-count",
                                         "6",
                                         "--subject-prefix",
                                         "feed-",
                                         "--initial-settle",
                                         "0.5",
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
                                         "0.5",
                                         hub_url}),
                          fifo, err_path);
  bool owned = false;
  for (int i = 0; i < 150 && !owned; ++i) {
    auto st = last_line(file_text(err_path), "status");
    owned = !st.empty() && st.at("owned").as_int64() == 6;
    if (!owned)
      std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(owned) << file_text(err_path);
}

} // namespace

TEST_F(GroupMemberCli, AStdoutNobodyReadsHoldsDeliveriesBackNotTheLease) {
  // The member's stdout is a FIFO with a one-page buffer that the test
  // does not read for 8 s while 600 events (~90 KB of lines) are due. The
  // delivery lines wait in the member's stdout writer and its watchers wait
  // for their acknowledgements; the lease renewals go on (a member whose
  // CAF workers blocked in that write lost its lease: holds, a lost lease,
  // a rejoin). Read again, stdout gets every event exactly once.
  temp_dir dir;
  auto err_path = dir.file("err");
  int rfd = -1;
  child_guard child;
  feeds_ = 6;
  start_on_unread_fifo("stall", etcd_->base_url(), hub_->base_url(), dir,
                       err_path, rfd, child);
  if (HasFatalFailure())
    return;
  publish(100);
  std::this_thread::sleep_for(1s);
  auto before = last_line(file_text(err_path), "status");
  auto statuses_before = lines_of_type(file_text(err_path), "status").size();
  std::this_thread::sleep_for(7s); // nobody reads stdout
  int unread = 0;
  ASSERT_EQ(::ioctl(rfd, FIONREAD, &unread), 0);
  // A pipe write of up to a page is atomic: it waits until it fits whole,
  // so the page may hold less than a page.
  EXPECT_GT(unread, 0) << "the member wrote to stdout";
  auto after = last_line(file_text(err_path), "status");
  ASSERT_FALSE(after.empty());
  EXPECT_GE(lines_of_type(file_text(err_path), "status").size(),
            statuses_before + 10)
    << "stderr is not held up by stdout (every 0.5 s)";
  EXPECT_TRUE(after.at("leased").as_bool()) << file_text(err_path);
  EXPECT_FALSE(after.at("holding").as_bool());
  EXPECT_EQ(after.at("renewals_lost").as_int64(), 0);
  EXPECT_EQ(after.at("holds").as_int64(), 0);
  EXPECT_EQ(after.at("rejoins").as_int64(), 0);
  EXPECT_EQ(str_of(after, "incarnation"), str_of(before, "incarnation"));
  EXPECT_GE(after.at("renewals_ok").as_int64(),
            before.at("renewals_ok").as_int64() + 5)
    << "renewals went on while stdout was blocked: " << file_text(err_path);
  // Read stdout to its end; leave.
  ::fcntl(rfd, F_SETFL, ::fcntl(rfd, F_GETFL) & ~O_NONBLOCK);
  std::mutex out_mu;
  std::string out;
  std::thread reader([&] {
    char buf[65536];
    for (;;) {
      auto n = ::read(rfd, buf, sizeof(buf));
      if (n > 0) {
        std::lock_guard<std::mutex> lock{out_mu};
        out.append(buf, static_cast<std::size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        break;
      }
    }
  });
  auto delivered = [&] {
    std::lock_guard<std::mutex> lock{out_mu};
    return deliveries_of(out).size();
  };
  for (int i = 0; i < 200 && delivered() < 600; ++i)
    std::this_thread::sleep_for(100ms);
  EXPECT_EQ(delivered(), 600u) << "every event, once stdout is read";
  ::kill(child.pid, SIGTERM);
  auto code = wait_child(child.pid, 30s);
  reader.join();
  ::close(rfd);
  ASSERT_TRUE(code) << file_text(err_path);
  child.pid = -1;
  auto err = file_text(err_path);
  EXPECT_EQ(*code, 0) << err;
  auto exit_line = last_line(err, "exit");
  ASSERT_FALSE(exit_line.empty()) << err;
  EXPECT_EQ(str_of(exit_line, "outcome"), "left");
  EXPECT_EQ(exit_line.at("holds").as_int64(), 0);
  EXPECT_EQ(exit_line.at("rejoins").as_int64(), 0);
  EXPECT_EQ(exit_line.at("renewals_lost").as_int64(), 0);
  EXPECT_TRUE(exit_line.at("stdout_complete").as_bool());
  EXPECT_GT(out.size(), 10u * 4096u)
    << "the lines did not fit the pipe: its writes blocked while unread";
  auto ds = deliveries_of(out);
  std::map<std::string, std::vector<int64_t>> by_feed;
  for (const auto& d : ds)
    by_feed[d.feed].push_back(d.id);
  EXPECT_EQ(ds.size(), 600u) << "each event once (no crash, no move)";
  EXPECT_EQ(by_feed.size(), 6u);
  for (const auto& [feed, ids] : by_feed) {
    EXPECT_EQ(ids.size(), 100u) << feed;
    EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end())) << feed;
  }
}

TEST_F(GroupMemberCli, AStdoutNeverReadDoesNotKeepTheMemberFromLeaving) {
  // Nobody ever reads the member's stdout. SIGTERM still leaves the group
  // cleanly (lease revoked) and the process ends: stdout gets 5 s to take
  // the delivery lines, then the exit line says it did not
  // (stdout_complete false); those lines were not acknowledged, so the
  // feeds' next owner delivers them again.
  temp_dir dir;
  auto err_path = dir.file("err");
  int rfd = -1;
  child_guard child;
  feeds_ = 6;
  start_on_unread_fifo("neverread", etcd_->base_url(), hub_->base_url(), dir,
                       err_path, rfd, child);
  if (HasFatalFailure())
    return;
  publish(100);
  std::this_thread::sleep_for(1s);
  ::kill(child.pid, SIGTERM);
  auto code = wait_child(child.pid, 30s);
  ::close(rfd);
  ASSERT_TRUE(code) << "the member did not end: " << file_text(err_path);
  child.pid = -1;
  auto err = file_text(err_path);
  EXPECT_EQ(*code, 0) << err;
  auto exit_line = last_line(err, "exit");
  ASSERT_FALSE(exit_line.empty()) << err;
  EXPECT_EQ(str_of(exit_line, "outcome"), "left");
  EXPECT_FALSE(exit_line.at("stdout_complete").as_bool());
  EXPECT_EQ(exit_line.at("unreleased").as_int64(), 0);
}
