// The hub's oracle cluster end to end: three nodes on three ports
// in one hub, spoken to over raw HTTP/1.1 sockets so every byte of the
// outcome is visible — a 200, a 421 with or without its leader-hint header,
// a 503, a connection held without an answer, a connection closed without
// one. Once, `outbound hub --cluster 3` runs as a child process.
//
// Real time on 127.0.0.1: every wait is bounded; "no answer" checks wait a
// fixed short window.

#include "hub/hub.hpp"

#include "config/config_error.hpp"
#include "tests/support/child_process.hpp"

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <csignal>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

using namespace outbound;
using outbound::testing::outbound_argv;
using outbound::testing::running_child;
using namespace std::chrono_literals;

namespace json = boost::json;

namespace {

// -- a raw HTTP/1.1 client: one request per connection
// -------------------------

/// How a request ended.
enum class outcome {
  /// A complete response arrived.
  answered,
  /// The server closed the connection without sending a byte.
  closed,
  /// Nothing arrived within the timeout (the connection was still open).
  timeout,
  /// Could not connect, or a partial response.
  error,
};

struct raw_response {
  outcome how = outcome::error;
  int status = 0;
  /// Header names in lower case.
  std::map<std::string, std::string> headers;
  std::string body;
  std::chrono::milliseconds elapsed{0};

  json::object as_json() const {
    boost::system::error_code ec;
    auto v = json::parse(body, ec);
    if (ec || !v.is_object()) {
      ADD_FAILURE() << "not a JSON object: " << body;
      return {};
    }
    return v.as_object();
  }

  std::optional<std::string> header(const std::string& name) const {
    auto i = headers.find(name);
    if (i == headers.end())
      return std::nullopt;
    return i->second;
  }
};

/// Port of a `host:port` address.
uint16_t port_of(const std::string& host_port) {
  return static_cast<uint16_t>(
    std::stoi(host_port.substr(host_port.rfind(':') + 1)));
}

/// Parses a complete response in `in`, or returns false when more bytes are
/// needed.
bool parse_response(const std::string& in, raw_response& r) {
  auto end = in.find("\r\n\r\n");
  if (end == std::string::npos)
    return false;
  auto head = in.substr(0, end);
  auto line_end = head.find("\r\n");
  auto status_line = head.substr(0, line_end);
  r.status = std::stoi(status_line.substr(status_line.find(' ') + 1, 3));
  std::size_t pos = line_end == std::string::npos ? head.size() : line_end + 2;
  while (pos < head.size()) {
    auto next = head.find("\r\n", pos);
    if (next == std::string::npos)
      next = head.size();
    auto line = head.substr(pos, next - pos);
    auto colon = line.find(':');
    if (colon != std::string::npos) {
      auto name = line.substr(0, colon);
      std::transform(name.begin(), name.end(), name.begin(),
                     [](unsigned char c) { return std::tolower(c); });
      auto value = line.substr(colon + 1);
      value.erase(0, value.find_first_not_of(' '));
      r.headers[name] = value;
    }
    pos = next + 2;
  }
  std::size_t length = 0;
  if (auto cl = r.header("content-length"))
    length = static_cast<std::size_t>(std::stoul(*cl));
  if (in.size() < end + 4 + length)
    return false;
  r.body = in.substr(end + 4, length);
  return true;
}

/// Sends one request with `Connection: close` and waits up to `timeout`.
raw_response http_call(uint16_t port, const std::string& method,
                       const std::string& path, const std::string& body = "",
                       std::chrono::milliseconds timeout = 5s) {
  raw_response r;
  auto start = std::chrono::steady_clock::now();
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    return r;
  struct closer {
    int fd;
    ~closer() {
      ::close(fd);
    }
  } guard{fd};
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
    return r;
  std::string req = method + " " + path
                    + " HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port)
                    + "\r\nContent-Type: application/json\r\nContent-Length: "
                    + std::to_string(body.size())
                    + "\r\nConnection: close\r\n\r\n" + body;
  for (std::size_t sent = 0; sent < req.size();) {
    auto n = ::send(fd, req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
    if (n <= 0)
      return r;
    sent += static_cast<std::size_t>(n);
  }
  std::string in;
  auto deadline = start + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      r.how = in.empty() ? outcome::timeout : outcome::error;
      break;
    }
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0)
      continue;
    char buf[4096];
    auto n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      r.how = in.empty()
                ? outcome::closed
                : (parse_response(in, r) ? outcome::answered : outcome::error);
      break;
    }
    in.append(buf, static_cast<std::size_t>(n));
    if (parse_response(in, r)) {
      r.how = outcome::answered;
      break;
    }
  }
  r.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
    std::chrono::steady_clock::now() - start);
  return r;
}

std::string ts_body(uint64_t n) {
  return "{\"count\":" + std::to_string(n) + "}";
}

std::string seq_body(const std::string& key, uint64_t n) {
  json::object o;
  o["key"] = key;
  o["count"] = n;
  return json::serialize(o);
}

uint64_t u64(const json::object& o, const char* key) {
  return o.at(key).to_number<uint64_t>();
}

uint64_t packed(const json::object& ts, uint64_t offset = 0) {
  return (u64(ts, "physical_ms") << oracle_logical_bits)
         | (u64(ts, "logical_start") + offset);
}

uint64_t unix_ms_now() {
  using namespace std::chrono;
  return static_cast<uint64_t>(
    duration_cast<milliseconds>(system_clock::now().time_since_epoch())
      .count());
}

// -- fixture: a 3-node cluster
// --------------------------------------------------

class OracleHubTest : public ::testing::Test {
protected:
  void SetUp() override {
    hub_config c;
    c.cluster_size = 3;
    hub_ = std::make_unique<hub>(c);
    hub_->start();
    nodes_ = hub_->oracle_endpoints();
    ASSERT_EQ(nodes_.size(), 3u);
  }

  void TearDown() override {
    if (hub_)
      hub_->stop();
  }

  uint16_t node(std::size_t i) const {
    return port_of(nodes_.at(i));
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

  std::unique_ptr<hub> hub_;
  std::vector<std::string> nodes_;
};

} // namespace

TEST_F(OracleHubTest, ThreeNodesOnThreePortsWithNodeZeroLeading) {
  EXPECT_EQ(nodes_[0], "127.0.0.1:" + std::to_string(hub_->port()));
  EXPECT_NE(node(0), node(1));
  EXPECT_NE(node(1), node(2));
  EXPECT_NE(node(0), node(2));
  EXPECT_EQ(hub_->oracle_leader(), std::size_t{0});
  EXPECT_EQ(hub_->oracle_epoch(), 1u);
  // Every port serves the hub's other routes too.
  for (std::size_t i = 0; i < 3; ++i)
    EXPECT_EQ(http_call(node(i), "GET", "/healthz").status, 200) << i;
}

TEST_F(OracleHubTest, TheLeaderAnswersTsWithIncreasingTimestamps) {
  auto before = unix_ms_now();
  auto a = http_call(node(0), "POST", "/v1/ts", ts_body(5));
  auto b = http_call(node(0), "POST", "/v1/ts", ts_body(262144));
  auto c = http_call(node(0), "POST", "/v1/ts", ts_body(1));
  auto after = unix_ms_now();
  ASSERT_EQ(a.how, outcome::answered);
  ASSERT_EQ(a.status, 200) << a.body;
  ASSERT_EQ(b.status, 200) << b.body;
  ASSERT_EQ(c.status, 200) << c.body;
  auto ja = a.as_json();
  auto jb = b.as_json();
  auto jc = c.as_json();
  EXPECT_EQ(u64(ja, "count"), 5u);
  EXPECT_EQ(u64(jb, "count"), 262144u);
  EXPECT_EQ(u64(jb, "logical_start"), 0u); // a full millisecond
  EXPECT_EQ(ja.at("epoch").as_string(), "1");
  EXPECT_GE(u64(ja, "physical_ms"), before);
  EXPECT_LE(u64(ja, "physical_ms"), after);
  EXPECT_GT(packed(jb), packed(ja, 4));
  EXPECT_GT(packed(jc), packed(jb, 262143));
  EXPECT_FALSE(a.header("leader-hint"));
  EXPECT_EQ(a.header("content-type"), "application/json");
}

TEST_F(OracleHubTest, TheLeaderAnswersGaplessSeqBlocksPerKey) {
  auto a
    = http_call(node(0), "POST", "/v1/seq", seq_body("orders", 10)).as_json();
  auto b
    = http_call(node(0), "POST", "/v1/seq", seq_body("users", 3)).as_json();
  auto c
    = http_call(node(0), "POST", "/v1/seq", seq_body("orders", 2)).as_json();
  EXPECT_EQ(u64(a, "start"), 0u);
  EXPECT_EQ(u64(a, "count"), 10u);
  EXPECT_EQ(u64(b, "start"), 0u);
  EXPECT_EQ(u64(c, "start"), 10u);
  EXPECT_EQ(c.at("epoch").as_string(), "1");
}

TEST_F(OracleHubTest, ConcurrentSeqCallersGetDisjointBlocksCoveringTheRange) {
  constexpr int threads = 8;
  constexpr int calls = 40;
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> got(threads);
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < calls; ++i) {
        uint64_t n = 1 + static_cast<uint64_t>((t + i) % 5);
        auto r = http_call(node(0), "POST", "/v1/seq", seq_body("k", n));
        if (r.status != 200)
          return;
        auto j = json::parse(r.body).as_object();
        got[t].emplace_back(u64(j, "start"), u64(j, "count"));
      }
    });
  for (auto& t : ts)
    t.join();
  std::vector<std::pair<uint64_t, uint64_t>> all;
  uint64_t total = 0;
  for (auto& g : got) {
    EXPECT_EQ(g.size(), static_cast<std::size_t>(calls));
    for (auto& b : g) {
      all.push_back(b);
      total += b.second;
    }
  }
  std::sort(all.begin(), all.end());
  uint64_t next = 0;
  for (auto [start, n] : all) {
    ASSERT_EQ(start, next);
    next = start + n;
  }
  EXPECT_EQ(next, total);
}

TEST_F(OracleHubTest, FollowersAnswer421WithTheLeaderHint) {
  for (std::size_t i : {1, 2})
    for (auto [path, body] : {std::pair{"/v1/ts", ts_body(1)},
                              std::pair{"/v1/seq", seq_body("k", 1)}}) {
      auto r = http_call(node(i), "POST", path, body);
      ASSERT_EQ(r.how, outcome::answered);
      EXPECT_EQ(r.status, 421) << i << " " << path;
      EXPECT_EQ(r.header("leader-hint"), nodes_[0] + "; epoch=1");
      auto j = r.as_json();
      EXPECT_EQ(j.at("leader").as_string(), nodes_[0]);
      EXPECT_EQ(j.at("epoch").as_string(), "1");
    }
  EXPECT_EQ(node_counter(1, "misdirected"), 2u);
  EXPECT_EQ(node_counter(2, "misdirected"), 2u);
  EXPECT_EQ(oracle_json().at("misdirected").to_number<uint64_t>(), 4u);
  EXPECT_EQ(oracle_json().at("commits").to_number<uint64_t>(), 0u);
}

TEST_F(OracleHubTest, LeaderlessEveryNodeAnswers421WithoutAHint) {
  EXPECT_EQ(hub_->move_leader(std::nullopt), 2u);
  for (std::size_t i = 0; i < 3; ++i) {
    auto r = http_call(node(i), "POST", "/v1/ts", ts_body(1));
    ASSERT_EQ(r.how, outcome::answered);
    EXPECT_EQ(r.status, 421) << i;
    EXPECT_FALSE(r.header("leader-hint")) << i;
    EXPECT_TRUE(r.as_json().at("leader").is_null());
  }
  EXPECT_EQ(oracle_json().at("timestamps_issued").to_number<uint64_t>(), 0u);
}

TEST_F(OracleHubTest, ALeaderMoveOpensANewEpochAndHintsFollow) {
  auto first = http_call(node(0), "POST", "/v1/ts", ts_body(3)).as_json();
  // Through the admin endpoint of another node: any node moves the cluster.
  auto m = http_call(node(2), "POST", "/admin/oracle", R"({"leader":1})");
  ASSERT_EQ(m.status, 200) << m.body;
  EXPECT_EQ(m.as_json().at("epoch").as_string(), "2");
  EXPECT_EQ(m.as_json().at("leader").to_number<uint64_t>(), 1u);
  EXPECT_EQ(hub_->oracle_leader(), std::size_t{1});
  auto old = http_call(node(0), "POST", "/v1/ts", ts_body(1));
  EXPECT_EQ(old.status, 421);
  EXPECT_EQ(old.header("leader-hint"), nodes_[1] + "; epoch=2");
  EXPECT_EQ(http_call(node(2), "POST", "/v1/seq", seq_body("k", 1))
              .header("leader-hint"),
            nodes_[1] + "; epoch=2");
  auto now = http_call(node(1), "POST", "/v1/ts", ts_body(1));
  ASSERT_EQ(now.status, 200) << now.body;
  EXPECT_EQ(now.as_json().at("epoch").as_string(), "2");
  EXPECT_GT(packed(now.as_json()), packed(first, 2));
  // The in-process API does the same.
  EXPECT_EQ(hub_->move_leader(std::size_t{2}), 3u);
  EXPECT_EQ(
    http_call(node(1), "POST", "/v1/ts", ts_body(1)).header("leader-hint"),
    nodes_[2] + "; epoch=3");
  EXPECT_THROW(hub_->move_leader(std::size_t{3}), std::out_of_range);
}

TEST_F(OracleHubTest, ValidationErrorsAre400sNamingTheField) {
  auto detail = [&](const char* path, const std::string& body) {
    auto r = http_call(node(0), "POST", path, body);
    EXPECT_EQ(r.status, 400) << path << " " << body;
    return std::string{r.as_json().at("detail").as_string()};
  };
  EXPECT_EQ(detail("/v1/ts", ts_body(0)),
            "'count' must be an integer in [1, 262144]");
  EXPECT_EQ(detail("/v1/ts", ts_body(262145)),
            "'count' must be an integer in [1, 262144]");
  EXPECT_EQ(detail("/v1/seq", seq_body(std::string(129, 'k'), 1)),
            "'key' must be a string of 1 to 128 bytes");
  EXPECT_EQ(detail("/v1/seq", seq_body("k", 65537)),
            "'count' must be an integer in [1, 65536]");
  EXPECT_NE(detail("/v1/seq", "nope").find("JSON object"), std::string::npos);
  EXPECT_EQ(http_call(node(0), "GET", "/v1/ts").status, 405);
  EXPECT_EQ(node_counter(0, "bad_requests"), 5u);
  EXPECT_EQ(node_counter(0, "commits"), 0u);
}

TEST_F(OracleHubTest, RefuseAnswers503AndCommitsNothing) {
  hub_->set_node_mode(0, oracle_node_mode::refuse);
  auto r = http_call(node(0), "POST", "/v1/seq", seq_body("k", 1));
  ASSERT_EQ(r.how, outcome::answered);
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(node_counter(0, "refused"), 1u);
  hub_->set_node_mode(0, oracle_node_mode::normal);
  auto ok = http_call(node(0), "POST", "/v1/seq", seq_body("k", 1));
  EXPECT_EQ(u64(ok.as_json(), "start"), 0u); // the refused call spent nothing
}

TEST_F(OracleHubTest, StallHoldsTheRequestWithoutAnswering) {
  hub_->set_node_mode(0, oracle_node_mode::stall);
  auto r = http_call(node(0), "POST", "/v1/seq", seq_body("k", 1), 400ms);
  EXPECT_EQ(r.how, outcome::timeout);
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(node_counter(0, "stalled"), 1u);
  // A stalled follower stalls too (a node that hangs).
  hub_->set_node_mode(1, oracle_node_mode::stall);
  EXPECT_EQ(http_call(node(1), "POST", "/v1/ts", ts_body(1), 300ms).how,
            outcome::timeout);
  hub_->set_node_mode(0, oracle_node_mode::normal);
  auto ok = http_call(node(0), "POST", "/v1/seq", seq_body("k", 1));
  EXPECT_EQ(u64(ok.as_json(), "start"), 0u); // nothing was applied
}

TEST_F(OracleHubTest, StallClosesUnansweredAfterItsBound) {
  ASSERT_EQ(http_call(node(0), "POST", "/admin/oracle",
                      R"({"node":0,"mode":"stall","stall_seconds":0.3})")
              .status,
            200);
  auto r = http_call(node(0), "POST", "/v1/ts", ts_body(1), 10s);
  EXPECT_EQ(r.how, outcome::closed);
  EXPECT_GE(r.elapsed, 250ms);
  EXPECT_LT(r.elapsed, 8s);
  EXPECT_EQ(oracle_json().at("timestamps_issued").to_number<uint64_t>(), 0u);
}

TEST_F(OracleHubTest, StopDoesNotWaitForAStalledRequest) {
  hub_->set_node_mode(0, oracle_node_mode::stall); // 30 s bound
  std::thread client{[&] {
    auto r = http_call(node(0), "POST", "/v1/ts", ts_body(1), 20s);
    EXPECT_EQ(r.how, outcome::closed);
  }};
  // Wait (bounded) until the request is held.
  for (int i = 0; i < 500 && node_counter(0, "stalled") == 0; ++i)
    std::this_thread::sleep_for(10ms);
  ASSERT_EQ(node_counter(0, "stalled"), 1u);
  auto t0 = std::chrono::steady_clock::now();
  hub_->stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2500ms);
  client.join();
}

TEST_F(OracleHubTest, CommitNoReplyAppliesThenClosesWithoutAnAnswer) {
  hub_->set_node_mode(0, oracle_node_mode::commit_no_reply);
  auto r = http_call(node(0), "POST", "/v1/seq", seq_body("k", 4));
  EXPECT_EQ(r.how, outcome::closed);
  EXPECT_EQ(node_counter(0, "unanswered_commits"), 1u);
  EXPECT_EQ(node_counter(0, "commits"), 1u);
  // Answers that commit nothing are still sent.
  EXPECT_EQ(http_call(node(0), "POST", "/v1/seq", seq_body("", 4)).status, 400);
  EXPECT_EQ(http_call(node(1), "POST", "/v1/seq", seq_body("k", 4)).status,
            421);
  hub_->set_node_mode(0, oracle_node_mode::normal);
  auto next = http_call(node(0), "POST", "/v1/seq", seq_body("k", 1));
  EXPECT_EQ(u64(next.as_json(), "start"), 4u); // the unanswered block is spent
}

TEST_F(OracleHubTest, AdminEndpointValidatesAndReportsState) {
  auto bad = [&](const std::string& body) {
    auto r = http_call(node(1), "POST", "/admin/oracle", body);
    EXPECT_EQ(r.status, 400) << body;
    return std::string{r.as_json().at("detail").as_string()};
  };
  EXPECT_EQ(bad(R"({"leader":3})"),
            "'leader' must be null or an integer in [0, 2]");
  EXPECT_EQ(bad(R"({"node":0,"mode":"asleep"})").rfind("'mode'", 0), 0u);
  EXPECT_EQ(bad(R"({"x":1})"), "unknown key 'x'");
  EXPECT_THROW(hub_->set_oracle(R"({"leader":-1})"), std::invalid_argument);
  EXPECT_EQ(hub_->oracle_epoch(), 1u);
  ASSERT_EQ(
    http_call(node(0), "POST", "/admin/oracle", R"({"leader":null})").status,
    200);
  auto g = http_call(node(2), "GET", "/admin/oracle");
  ASSERT_EQ(g.status, 200);
  auto j = g.as_json();
  EXPECT_TRUE(j.at("leader").is_null());
  EXPECT_EQ(j.at("epoch").as_string(), "2");
  ASSERT_EQ(j.at("nodes").as_array().size(), 3u);
  EXPECT_EQ(j.at("nodes").as_array()[1].at("address").as_string(), nodes_[1]);
  EXPECT_EQ(http_call(node(0), "DELETE", "/admin/oracle").status, 405);
  hub_->set_oracle(R"({"leader":0,"mode":"refuse"})");
  EXPECT_EQ(http_call(node(0), "POST", "/v1/ts", ts_body(1)).status, 503);
  EXPECT_EQ(hub_->oracle_epoch(), 3u);
}

TEST_F(OracleHubTest, PerNodeRequestCountersAreExact) {
  http_call(node(0), "POST", "/v1/ts", ts_body(1));
  http_call(node(0), "POST", "/v1/ts", ts_body(1));
  http_call(node(1), "POST", "/v1/ts", ts_body(1));
  http_call(node(2), "GET", "/healthz"); // not an oracle request
  auto s = oracle_json();
  const auto& nodes = s.at("nodes").as_array();
  EXPECT_EQ(nodes[0].at("requests").to_number<uint64_t>(), 2u);
  EXPECT_EQ(nodes[0].at("answered").to_number<uint64_t>(), 2u);
  EXPECT_EQ(nodes[0].at("role").as_string(), "leader");
  EXPECT_EQ(nodes[1].at("requests").to_number<uint64_t>(), 1u);
  EXPECT_EQ(nodes[1].at("misdirected").to_number<uint64_t>(), 1u);
  EXPECT_EQ(nodes[2].at("requests").to_number<uint64_t>(), 0u);
  EXPECT_EQ(s.at("commits").to_number<uint64_t>(), 2u);
}

TEST(OracleHub, ASingleHubIsAOneNodeLeader) {
  hub h{hub_config{}};
  h.start();
  auto nodes = h.oracle_endpoints();
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0], "127.0.0.1:" + std::to_string(h.port()));
  auto r = http_call(h.port(), "POST", "/v1/ts", ts_body(2));
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(u64(r.as_json(), "count"), 2u);
  h.stop();
}

TEST(OracleHub, BadClusterSettingsAreConfigErrorsNamingTheField) {
  auto field_of = [](hub_config c) {
    try {
      hub h{c};
    } catch (const config_error& e) {
      return e.field();
    }
    return std::string{"(none)"};
  };
  hub_config c;
  c.cluster_size = 0;
  EXPECT_EQ(field_of(c), "cluster_size");
  c.cluster_size = 17;
  EXPECT_EQ(field_of(c), "cluster_size");
  c.cluster_size = 3;
  c.port = 65534;
  EXPECT_EQ(field_of(c), "cluster_size");
  c = {};
  c.oracle_stall_seconds = 0;
  EXPECT_EQ(field_of(c), "oracle_stall_seconds");
  c = {};
  c.oracle_max_seq_keys = 0;
  EXPECT_EQ(field_of(c), "oracle_max_seq_keys");
}

// -- `outbound hub --cluster 3` as a child process
// -----------------------------------

TEST(OracleHubCli, FirstLineListsThreeReachableNodesAndTheLeader) {
  // Whatever fails below, the child does not outlive the test.
  running_child hub{outbound_argv({"hub", "--port", "0", "--cluster", "3"})};
  auto line = hub.first_line(30s);
  ASSERT_FALSE(line.empty()) << hub.err();
  auto v = json::parse(line).as_object();
  auto listening = std::string{v.at("listening").as_string()};
  const auto& cluster = v.at("cluster").as_array();
  ASSERT_EQ(cluster.size(), 3u) << line;
  EXPECT_EQ(cluster[0].as_string(), listening);
  EXPECT_EQ(v.at("leader").as_string(), listening);
  std::vector<uint16_t> ports;
  for (const auto& n : cluster) {
    auto s = std::string{n.as_string()};
    EXPECT_EQ(s.rfind("127.0.0.1:", 0), 0u) << line;
    ports.push_back(port_of(s));
  }
  auto leader = http_call(ports[0], "POST", "/v1/ts", ts_body(1));
  EXPECT_EQ(leader.status, 200) << leader.body;
  for (std::size_t i : {1, 2}) {
    auto r = http_call(ports[i], "POST", "/v1/ts", ts_body(1));
    EXPECT_EQ(r.status, 421) << i;
    EXPECT_EQ(r.header("leader-hint"), listening + "; epoch=1");
  }
  hub.signal(SIGTERM);
  EXPECT_EQ(hub.wait_exit(30s), std::optional<int>{0}) << hub.err();
}

TEST(OracleHubCli, ASingleHubKeepsTheOneFieldLine) {
  // Whatever fails below, the child does not outlive the test.
  running_child hub{outbound_argv({"hub", "--port", "0"})};
  auto line = hub.first_line(30s);
  ASSERT_FALSE(line.empty()) << hub.err();
  auto v = json::parse(line).as_object();
  EXPECT_EQ(v.size(), 1u) << line;
  EXPECT_TRUE(v.contains("listening"));
}
