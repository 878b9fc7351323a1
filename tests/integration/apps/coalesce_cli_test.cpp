// `outbound ts` and `outbound seq` (apps/oracle_cmd.hpp) as child processes
// against `outbound hub --cluster 3 --port 0`, itself a child (its first
// stdout line lists the nodes and the leader). Checks the one-line JSON
// answers, the usage errors (exit 2 naming the field), an unreachable
// endpoint list (exit 7) and the uncertain outcome of a seq whose leader
// commits without answering (exit 8), set through `outbound request -X
// POST .../admin/oracle` exactly as the README shows it.

#include "tests/support/child_process.hpp"
#include "tests/support/ports.hpp"
#include "tests/support/scripted_server.hpp"
#include "tests/support/test_certs.hpp"

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace outbound::testing;
using namespace std::chrono_literals;

namespace json = boost::json;

namespace {

/// What one finished CLI run left behind.
struct run_result {
  /// Exit code; 128 + signal when killed; -1 when it had to be killed after
  /// the bound.
  int code = -1;
  std::string out;
  std::string err;

  /// The single stdout line as an object (fails the test otherwise).
  json::object out_json() const {
    return one_line(out, "stdout");
  }

  /// The single stderr line as an object (fails the test otherwise).
  json::object err_json() const {
    return one_line(err, "stderr");
  }

private:
  static json::object one_line(const std::string& text, const char* what) {
    auto lines = lines_of(text);
    EXPECT_EQ(lines.size(), 1u) << what << ": " << text;
    if (lines.empty())
      return {};
    boost::system::error_code ec;
    auto v = json::parse(lines.front(), ec);
    EXPECT_FALSE(ec) << what << ": " << lines.front();
    if (ec || !v.is_object())
      return {};
    return v.as_object();
  }
};

/// Runs `outbound ARGS...` to its end (at most `bound`).
run_result run_cli(std::vector<std::string> args,
                   std::chrono::milliseconds bound = 60s) {
  args.insert(args.begin(), OUTBOUND_CLI);
  auto c = run_child(args, bound);
  run_result r;
  if (c.timed_out)
    ADD_FAILURE() << "outbound did not exit within the bound";
  else
    r.code = c.exit_code;
  r.out = std::move(c.out);
  r.err = std::move(c.err);
  return r;
}

uint64_t u64(const json::value& v) {
  return v.to_number<uint64_t>();
}

/// `outbound hub --port 0 --cluster 3` as a child; its first stdout line
/// tells the nodes and the leader.
class CoalesceCli : public ::testing::Test {
protected:
  void SetUp() override {
    hub_.emplace(outbound_argv({"hub", "--port", "0", "--cluster", "3"}));
    auto line = hub_->first_line(30s);
    boost::system::error_code ec;
    auto v = json::parse(line, ec);
    ASSERT_FALSE(ec) << "hub line: " << line;
    for (auto& n : v.at("cluster").as_array())
      nodes_.emplace_back(n.as_string());
    ASSERT_EQ(nodes_.size(), 3u) << line;
    leader_ = std::string{v.at("leader").as_string()};
    ASSERT_EQ(leader_, nodes_[0]) << line;
  }

  void TearDown() override {
    if (hub_) {
      hub_->signal(SIGTERM);
      hub_->wait_exit(30s); // bounded; the destructor kills what is left
    }
  }

  /// The nodes, the leader last: "B,C,A".
  std::string leader_last() const {
    return nodes_[1] + "," + nodes_[2] + "," + nodes_[0];
  }

  /// `outbound request` against the admin/state routes of node 0.
  json::object oracle_state() {
    auto r = run_cli({"request", "http://" + nodes_[0] + "/admin/state"});
    EXPECT_EQ(r.code, 0) << r.err;
    return r.out_json().at("oracle").as_object();
  }

  std::optional<running_child> hub_;
  std::vector<std::string> nodes_;
  std::string leader_;
};

} // namespace

TEST_F(CoalesceCli, TsPrintsOneJsonLineWithTheTimestamp) {
  auto r = run_cli({"ts", "--endpoints", leader_last()});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  auto o = r.out_json();
  EXPECT_EQ(u64(o.at("count")), 1u);
  auto packed = (u64(o.at("physical_ms")) << 18) | u64(o.at("logical_start"));
  ASSERT_EQ(o.at("timestamps").as_array().size(), 1u);
  EXPECT_EQ(u64(o.at("timestamps").as_array()[0]), packed);
  EXPECT_EQ(o.at("epoch").as_string(), "1");
  EXPECT_EQ(o.at("endpoint").as_string(), "http://" + leader_);
}

TEST_F(CoalesceCli, TsCountThousandIsOneRangeWithoutTheList) {
  auto r = run_cli({"ts", "--endpoints", leader_last(), "--count", "1000"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto o = r.out_json();
  EXPECT_EQ(u64(o.at("count")), 1000u);
  EXPECT_FALSE(o.contains("timestamps")) << r.out;
  EXPECT_LE(u64(o.at("logical_start")) + 999, (1u << 18) - 1);
  EXPECT_EQ(u64(oracle_state().at("timestamps_issued")), 1000u);
}

TEST_F(CoalesceCli, TsCountSixteenListsEveryTimestamp) {
  auto r = run_cli({"ts", "--endpoints", leader_last(), "--count", "16"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto o = r.out_json();
  const auto& list = o.at("timestamps").as_array();
  ASSERT_EQ(list.size(), 16u);
  for (std::size_t i = 1; i < list.size(); ++i)
    EXPECT_EQ(u64(list[i]), u64(list[i - 1]) + 1);
}

TEST_F(CoalesceCli, SeqPrintsGaplessBlocks) {
  auto first = run_cli(
    {"seq", "--endpoints", leader_last(), "--key", "orders", "--count", "5"});
  ASSERT_EQ(first.code, 0) << first.err;
  auto o = first.out_json();
  EXPECT_EQ(o.at("key").as_string(), "orders");
  EXPECT_EQ(u64(o.at("start")), 0u);
  EXPECT_EQ(u64(o.at("count")), 5u);
  EXPECT_EQ(o.at("epoch").as_string(), "1");
  EXPECT_EQ(o.at("endpoint").as_string(), "http://" + leader_);
  auto second = run_cli({"seq", "--endpoints", nodes_[2], "--key", "orders",
                         "--count", "3", "--verbose"});
  ASSERT_EQ(second.code, 0) << second.err;
  EXPECT_EQ(u64(second.out_json().at("start")), 5u);
  // --verbose: the driver's counters; the follower's hint led to the leader.
  auto stats = second.err_json().at("coalesce").as_object();
  EXPECT_EQ(u64(stats.at("redirects")), 1u);
  EXPECT_EQ(stats.at("leader_endpoint").as_string(), "http://" + leader_);
}

TEST_F(CoalesceCli, BadCountsAndEndpointsAreUsageErrorsNamingTheField) {
  struct bad {
    std::vector<std::string> args;
    std::string field;
  };
  const std::vector<bad> cases = {
    {{"ts", "--endpoints", leader_last(), "--count", "0"}, "--count"},
    {{"ts", "--endpoints", leader_last(), "--count", "262145"}, "--count"},
    {{"ts", "--endpoints", leader_last(), "--count", "-1"}, "--count"},
    {{"seq", "--endpoints", leader_last(), "--key", "k", "--count", "65537"},
     "--count"},
    {{"seq", "--endpoints", leader_last(), "--key", "", "--count", "1"},
     "--key"},
    {{"ts", "--endpoints", nodes_[0] + ",no-port"}, "coalesce.endpoints[1]"},
    {{"ts", "--endpoints", nodes_[0] + "," + nodes_[0]},
     "coalesce.endpoints[1]"},
    {{"ts", "--endpoints", leader_last(), "--timeout", "0"}, "--timeout"},
  };
  for (auto& c : cases) {
    auto r = run_cli(c.args);
    EXPECT_EQ(r.code, 2) << c.field << ": " << r.err;
    EXPECT_EQ(r.out, "") << c.field;
    auto e = r.err_json();
    EXPECT_NE(std::string{e.at("detail").as_string()}.find(c.field),
              std::string::npos)
      << r.err;
    EXPECT_TRUE(e.at("nothing_sent").as_bool());
  }
  // Nothing reached the oracle.
  auto st = oracle_state();
  uint64_t requests = 0;
  for (auto& n : st.at("nodes").as_array())
    requests += u64(n.at("requests"));
  EXPECT_EQ(requests, 0u);
}

TEST_F(CoalesceCli, AnUnreachableEndpointListExitsSeven) {
  auto a = "127.0.0.1:" + std::to_string(closed_port());
  auto b = "127.0.0.1:" + std::to_string(closed_port());
  auto r = run_cli({"ts", "--endpoints", a + "," + b, "--timeout", "3"});
  EXPECT_EQ(r.code, 7) << r.err;
  EXPECT_EQ(r.out, "");
  auto e = r.err_json();
  EXPECT_EQ(e.at("error").as_string(), "service_unavailable") << r.err;
  EXPECT_EQ(e.at("attempts").as_int64(), 2);
}

TEST_F(CoalesceCli, TlsAgainstAPlainNodeExitsSevenAndABadCaFileTwo) {
  auto r = run_cli({"ts", "--tls", "--endpoints", nodes_[0]});
  EXPECT_EQ(r.code, 7) << r.err;
  EXPECT_EQ(r.err_json().at("error").as_string(), "service_unavailable");
  auto bad = run_cli(
    {"ts", "--ca-file", "/nonexistent/ca.pem", "--endpoints", nodes_[0]});
  EXPECT_EQ(bad.code, 2) << bad.err;
  EXPECT_NE(bad.err.find("tls.ca_file"), std::string::npos) << bad.err;
}

TEST_F(CoalesceCli, SeqOnALeaderThatCommitsWithoutReplyingExitsEight) {
  auto admin = run_cli({"request", "-X", "POST", "--json",
                        R"({"node":0,"mode":"commit_no_reply"})",
                        "http://" + nodes_[1] + "/admin/oracle"});
  ASSERT_EQ(admin.code, 0) << admin.err;
  auto r = run_cli(
    {"seq", "--endpoints", leader_last(), "--key", "orders", "--count", "2"});
  EXPECT_EQ(r.code, 8) << r.err;
  EXPECT_EQ(r.out, "");
  auto e = r.err_json();
  EXPECT_EQ(e.at("error").as_string(), "uncertain_outcome") << r.err;
  EXPECT_FALSE(e.at("nothing_sent").as_bool());
  // One server call, and it committed: the block is spent.
  auto st = oracle_state();
  auto leader = st.at("nodes").as_array().at(0).as_object();
  EXPECT_EQ(u64(leader.at("requests")), 1u);
  EXPECT_EQ(u64(leader.at("unanswered_commits")), 1u);
  EXPECT_EQ(u64(st.at("seq_issued")), 2u);
}

TEST_F(CoalesceCli, ExplicitHttpEndpointsWithACaFileAreDialledPlain) {
  // "Explicit beats configured" (tsoracle's scheme rule): a CA file makes
  // bare endpoints https, but an operator's explicit http:// is dialled as
  // plaintext. This used to kill the coalescing driver on its first call
  // (the plain pool's config check threw inside the actor) and the caller
  // waited its whole timeout.
  outbound::testing::temp_dir dir{"outbound-coalesce-mixed-"};
  auto ca = outbound::testing::make_ca(dir.path(), "ca", "outbound test CA");
  auto r = run_cli(
    {"ts", "--endpoints",
     "http://" + nodes_[0] + ",http://" + nodes_[1] + ",http://" + nodes_[2],
     "--ca-file", ca.cert, "--timeout", "10"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(u64(r.out_json().at("count")), 1u) << r.out;
}

/// The value of header `name` in a raw request (case-insensitive name);
/// empty when absent.
std::string raw_header(const std::string& raw, const std::string& name) {
  std::regex re{"\r\n" + name + ": ([^\r\n]*)\r\n", std::regex::icase};
  std::smatch m;
  return std::regex_search(raw, m, re) ? std::string{m[1]} : std::string{};
}

TEST_F(CoalesceCli, TsAndSeqSendTheCredentialAndHeadersAsRequestDoes) {
  // --token / --token-header / --token-scheme / --header, as `outbound
  // request` takes them, on the oracle requests' wire (scripted nodes).
  scripted_server ts_node{
    {{step::read_request(), step::send(scripted_server::json_response(
                              200, R"({"physical_ms":1001,"logical_start":0,)"
                                   R"("count":1,"epoch":"1"})"))}}};
  auto r = run_cli({"ts", "--endpoints",
                    "127.0.0.1:" + std::to_string(ts_node.port()), "--token",
                    "s3cret", "--header", "X-Team: billing"});
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_TRUE(ts_node.wait_for_requests(1, 10s));
  auto raw = ts_node.requests().at(0).raw;
  EXPECT_EQ(raw_header(raw, "Authorization"), "Bearer s3cret") << raw;
  EXPECT_EQ(raw_header(raw, "X-Team"), "billing") << raw;
  EXPECT_EQ(raw_header(raw, "User-Agent").rfind("outbound/", 0), 0u) << raw;
  EXPECT_TRUE(std::regex_match(raw_header(raw, "x-request-id"),
                               std::regex{"[0-9a-f]{32}"}))
    << raw;

  scripted_server seq_node{
    {{step::read_request(), step::send(scripted_server::json_response(
                              200, R"({"start":0,"count":2,"epoch":"1"})"))}}};
  r = run_cli({"seq", "--endpoints",
               "127.0.0.1:" + std::to_string(seq_node.port()), "--key", "k",
               "--count", "2", "--token", "k-123", "--token-header",
               "X-API-Key", "--token-scheme", "", "--header", "X-A: 1",
               "--header", "X-B: 2"});
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_TRUE(seq_node.wait_for_requests(1, 10s));
  raw = seq_node.requests().at(0).raw;
  EXPECT_EQ(raw_header(raw, "X-API-Key"), "k-123") << raw;
  EXPECT_EQ(raw_header(raw, "Authorization"), "") << raw;
  EXPECT_EQ(raw_header(raw, "X-A"), "1") << raw;
  EXPECT_EQ(raw_header(raw, "X-B"), "2") << raw;
}

TEST_F(CoalesceCli, BadCredentialOptionsAreConfigErrorsNamingTheField) {
  struct bad {
    std::vector<std::string> args;
    std::string field;
  };
  const std::vector<bad> cases = {
    {{"ts", "--endpoints", leader_last(), "--header", "X-Request-Id: x"},
     "--header"},
    {{"ts", "--endpoints", leader_last(), "--header", "no colon"}, "--header"},
    {{"ts", "--endpoints", leader_last(), "--header", "Host: evil"},
     "coalesce.default_headers"},
    {{"seq", "--endpoints", leader_last(), "--key", "k", "--count", "1",
      "--header", "X Y: v"},
     "coalesce.default_headers"},
    {{"ts", "--endpoints", leader_last(), "--token", "s3cret", "--token-header",
      "Bad Header"},
     "coalesce.token_header"},
  };
  for (auto& c : cases) {
    auto r = run_cli(c.args);
    EXPECT_EQ(r.code, 2) << c.field << ": " << r.err;
    EXPECT_EQ(r.out, "") << c.field;
    auto e = r.err_json();
    EXPECT_NE(std::string{e.at("detail").as_string()}.find(c.field),
              std::string::npos)
      << r.err;
    EXPECT_EQ(r.err.find("s3cret"), std::string::npos) << r.err;
  }
}

/// One connection's script: a proxy's maintenance page, HTML with a 200.
std::vector<step> html_page_answer() {
  const std::string page = "<html><body>maintenance</body></html>";
  return {step::read_request(),
          step::send("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n"
                     "Content-Length: "
                     + std::to_string(page.size()) + "\r\n\r\n" + page)};
}

TEST(CoalesceCliScripted, TsAgainstAnHtmlAnswerSaysNotJson) {
  // A proxy's error page with a 200: the error names the body, not the
  // zero count it leaves behind.
  scripted_server node{{html_page_answer()}};
  auto r
    = run_cli({"ts", "--endpoints", "127.0.0.1:" + std::to_string(node.port()),
               "--timeout", "5"});
  EXPECT_NE(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  auto e = r.err_json();
  auto detail = std::string{e.at("detail").as_string()};
  EXPECT_NE(detail.find("response body is not JSON"), std::string::npos)
    << r.err;
  EXPECT_EQ(detail.find("count"), std::string::npos) << r.err;
  // The 200 was seen: the line says so, as `outbound request` does.
  EXPECT_EQ(e.at("error").as_string(), "response_error") << r.err;
  ASSERT_TRUE(e.at("status").is_int64()) << r.err;
  EXPECT_EQ(e.at("status").as_int64(), 200) << r.err;
  EXPECT_EQ(r.code, 6) << r.err;
}

TEST(CoalesceCliScripted, SeqAgainstAnHtmlAnswerReportsTheStatusSeen) {
  // The same page for a GetSeq: the block may have been spent (uncertain,
  // exit 8), and the line carries the 200 and the "not JSON" cause.
  scripted_server node{{html_page_answer()}};
  auto r
    = run_cli({"seq", "--endpoints", "127.0.0.1:" + std::to_string(node.port()),
               "--key", "orders", "--count", "1", "--timeout", "5"});
  EXPECT_EQ(r.code, 8) << r.err;
  EXPECT_EQ(r.out, "");
  auto e = r.err_json();
  EXPECT_EQ(e.at("error").as_string(), "uncertain_outcome") << r.err;
  ASSERT_TRUE(e.at("status").is_int64()) << r.err;
  EXPECT_EQ(e.at("status").as_int64(), 200) << r.err;
  auto detail = std::string{e.at("detail").as_string()};
  EXPECT_NE(detail.find("response body is not JSON"), std::string::npos)
    << r.err;
}
