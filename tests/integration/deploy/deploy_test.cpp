// deploy/ and `outbound demo` (deploy/README.md): rules (outbound and feed
// groups) pass `promtool test rules`, the scrape config and rules pass
// `promtool check`, the example config loads, the Grafana dashboard parses
// and names only metrics that a live demo exports (or that the recording
// rules make), the demo CLI runs and ends by itself with its first line
// and report table, a bad --config names the field, and a real Prometheus
// (Debian's `prometheus`) scrapes a running demo with the shipped scrape
// config and evaluates the recording rules. promtool and prometheus are
// required: CI installs them (scripts/install-deps.sh), so a missing binary
// fails these tests.

#include "tests/support/test_certs.hpp"

#include "config/config_error.hpp"
#include "config/demo_config.hpp"
#include "tests/support/child_process.hpp"
#include "tests/support/http_get.hpp"

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
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

#include <cctype>
#include <chrono>
#include <fstream>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

using namespace outbound;
using namespace outbound::testing;
using namespace std::chrono_literals;

namespace json = boost::json;

namespace {

const std::string source_dir = OUTBOUND_SOURCE_DIR;

void spit(const std::string& path, const std::string& text) {
  std::ofstream out{path, std::ios::binary};
  out << text;
}

/// The absolute path of a program on PATH (or in /usr/bin, /usr/sbin), or
/// "" when it is not installed.
std::string find_program(const std::string& name) {
  std::string path = ::getenv("PATH") ? ::getenv("PATH") : "";
  path += ":/usr/bin:/usr/sbin:/usr/local/bin";
  std::istringstream in{path};
  for (std::string dir; std::getline(in, dir, ':');) {
    if (dir.empty())
      continue;
    auto p = dir + "/" + name;
    if (::access(p.c_str(), X_OK) == 0)
      return p;
  }
  return "";
}

/// Runs a program to completion (bounded); returns {exit code, stdout +
/// stderr}.
std::pair<int, std::string> run(std::vector<std::string> args,
                                std::chrono::seconds timeout = 120s) {
  auto r = run_child(args, timeout);
  return {r.timed_out ? -1 : r.exit_code, r.out + r.err};
}

/// A port that was free a moment ago on 127.0.0.1.
uint16_t free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

std::string url_encode(const std::string& s) {
  std::string out;
  const char* hex = "0123456789ABCDEF";
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

/// The metric names (outbound_* and outbound:*) a PromQL expression names;
/// quoted strings (label values) are skipped.
std::set<std::string> metric_names(const std::string& expr) {
  std::set<std::string> names;
  std::size_t i = 0;
  while (i < expr.size()) {
    char c = expr[i];
    if (c == '"' || c == '\'') {
      auto end = expr.find(c, i + 1);
      i = end == std::string::npos ? expr.size() : end + 1;
      continue;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':') {
      auto j = i;
      while (j < expr.size()
             && (std::isalnum(static_cast<unsigned char>(expr[j]))
                 || expr[j] == '_' || expr[j] == ':'))
        ++j;
      auto tok = expr.substr(i, j - i);
      if (tok.rfind("outbound_", 0) == 0 || tok.rfind("outbound:", 0) == 0)
        names.insert(tok);
      i = j;
      continue;
    }
    ++i;
  }
  return names;
}

/// Every family a Prometheus text exposition declares (# TYPE lines) or
/// has a sample of.
std::set<std::string> exposed_names(const std::string& text) {
  std::set<std::string> names;
  for (const auto& l : lines_of(text)) {
    if (l.rfind("# TYPE ", 0) == 0) {
      std::istringstream in{l.substr(7)};
      std::string n;
      in >> n;
      names.insert(n);
    } else if (!l.empty() && l[0] != '#') {
      auto end = l.find_first_of("{ ");
      names.insert(l.substr(0, end));
    }
  }
  return names;
}

/// The names the recording rules define.
std::set<std::string> recorded_names() {
  std::set<std::string> names;
  std::regex re{R"(-\s*record:\s*(\S+))"};
  auto text = slurp(source_dir + "/deploy/rules/outbound.rules.yml");
  for (std::sregex_iterator it{text.begin(), text.end(), re}, end; it != end;
       ++it)
    names.insert((*it)[1].str());
  return names;
}

/// Every `expr` of the dashboard's panels.
std::vector<std::string> dashboard_exprs(const json::value& dash) {
  std::vector<std::string> out;
  for (const auto& p : dash.at("panels").as_array())
    for (const auto& t : p.at("targets").as_array())
      out.emplace_back(t.at("expr").as_string());
  return out;
}

/// The port of the first line's "metrics" URL (0 when absent).
uint16_t metrics_port_of(const std::string& first_line) {
  boost::system::error_code ec;
  auto v = json::parse(first_line, ec);
  if (ec || !v.is_object())
    return 0;
  auto* m = v.as_object().if_contains("metrics");
  if (!m || !m->is_string())
    return 0;
  std::string url{m->as_string()};
  std::smatch sm;
  if (!std::regex_match(url, sm,
                        std::regex{R"(http://127\.0\.0\.1:(\d+)/metrics)"}))
    return 0;
  return static_cast<uint16_t>(std::stoi(sm[1].str()));
}

std::string cli() {
  return OUTBOUND_CLI;
}

} // namespace

// -- promtool -----------------------------------------------------------------

TEST(DeployRules, PromtoolRuleTestsPass) {
  auto promtool = find_program("promtool");
  ASSERT_FALSE(promtool.empty())
    << "promtool is missing: apt-get install prometheus";
  auto [code, output]
    = run({promtool, "test", "rules",
           source_dir + "/deploy/rules/outbound.rules.test.yml"});
  EXPECT_EQ(code, 0) << output;
  EXPECT_NE(output.find("SUCCESS"), std::string::npos) << output;
}

// The feed-group rules (their own file: the demo runs no feed group).
TEST(DeployRules, PromtoolGroupRuleTestsPass) {
  auto promtool = find_program("promtool");
  ASSERT_FALSE(promtool.empty())
    << "promtool is missing: apt-get install prometheus";
  auto [code, output]
    = run({promtool, "test", "rules",
           source_dir + "/deploy/rules/outbound_group.rules.test.yml"});
  EXPECT_EQ(code, 0) << output;
  EXPECT_NE(output.find("SUCCESS"), std::string::npos) << output;
  auto [code2, output2]
    = run({promtool, "check", "rules",
           source_dir + "/deploy/rules/outbound_group.rules.yml"});
  EXPECT_EQ(code2, 0) << output2;
  EXPECT_NE(output2.find("SUCCESS: 7 rules found"), std::string::npos)
    << output2;
}

TEST(DeployRules, PromtoolChecksConfigAndRules) {
  auto promtool = find_program("promtool");
  ASSERT_FALSE(promtool.empty())
    << "promtool is missing: apt-get install prometheus";
  auto [code, output]
    = run({promtool, "check", "config", source_dir + "/deploy/prometheus.yml"});
  EXPECT_EQ(code, 0) << output;
  auto [code2, output2]
    = run({promtool, "check", "rules",
           source_dir + "/deploy/rules/outbound.rules.yml"});
  EXPECT_EQ(code2, 0) << output2;
  EXPECT_NE(output2.find("SUCCESS: 18 rules found"), std::string::npos)
    << output2;
}

// -- config and dashboard
// ------------------------------------------------------

TEST(DeployConfig, TheShippedExampleLoadsWithTheDefaults) {
  auto c = load_demo_config(source_dir + "/deploy/demo.example.json");
  demo_config d;
  EXPECT_EQ(c.feeds, d.feeds);
  EXPECT_DOUBLE_EQ(c.duration, d.duration);
  EXPECT_DOUBLE_EQ(c.rate, d.rate);
  EXPECT_EQ(c.metrics_port, 9464);
  EXPECT_EQ(c.traffic.routes, d.traffic.routes);
  EXPECT_DOUBLE_EQ(c.hedging.percentile, d.hedging.percentile);
}

TEST(DeployDashboard, ParsesAndEveryPanelHasAnExpression) {
  boost::system::error_code ec;
  auto dash = json::parse(
    slurp(source_dir + "/deploy/grafana/outbound-dashboard.json"), ec);
  ASSERT_FALSE(ec) << ec.message();
  ASSERT_TRUE(dash.is_object());
  const auto& panels = dash.at("panels").as_array();
  EXPECT_GE(panels.size(), 10u);
  std::set<int64_t> ids;
  for (const auto& p : panels) {
    EXPECT_TRUE(ids.insert(p.at("id").as_int64()).second) << "duplicate id";
    ASSERT_FALSE(p.at("targets").as_array().empty()) << p.at("title");
    for (const auto& t : p.at("targets").as_array())
      EXPECT_FALSE(metric_names(std::string{t.at("expr").as_string()}).empty())
        << t.at("expr");
  }
}

// -- the demo
// --------------------------------------------------------------------

TEST(DemoCli, ShortRunEndsByItselfWithTheReportAndServesEveryDashboardMetric) {
  running_child demo{
    {cli(), "demo", "--duration", "5", "--feeds", "50", "--metrics-port", "0"}};
  auto first = demo.first_line(60s);
  ASSERT_FALSE(first.empty()) << demo.err();
  auto port = metrics_port_of(first);
  ASSERT_NE(port, 0) << first;
  auto v = json::parse(first);
  EXPECT_EQ(v.at("hub_mode").as_string(), "embedded");
  EXPECT_EQ(v.at("oracle").as_array().size(), 3u);
  EXPECT_EQ(v.at("feeds").to_number<int64_t>(), 50);
  // Whole numbers as people write them, not Boost.JSON's 5E0.
  EXPECT_NE(first.find("\"duration\":5,"), std::string::npos) << first;
  // Scrape while it runs. A metric counts as exported when any complete
  // scrape had it: while the demo shuts down its watchers stop one by one
  // and their series go (a scrape then can have feed counters but no lag).
  std::string scrape;
  std::set<std::string> have;
  auto until = std::chrono::steady_clock::now() + 30s;
  while (!demo.exited() && std::chrono::steady_clock::now() < until) {
    auto [status, body] = http_get(port, "/metrics");
    if (status == 200
        && body.find("outbound_feed_events_total") != std::string::npos
        && body.find("outbound_client_requests_total") != std::string::npos) {
      scrape = body;
      auto names = exposed_names(body);
      have.insert(names.begin(), names.end());
    }
    std::this_thread::sleep_for(500ms);
  }
  auto code = demo.wait_exit(60s);
  ASSERT_TRUE(code.has_value()) << "the demo did not stop by itself";
  EXPECT_EQ(*code, 0) << demo.err();
  // The report table.
  auto out = demo.out();
  EXPECT_NE(out.find("outbound demo report"), std::string::npos) << out;
  for (const char* rowname :
       {"metric", "run_seconds", "feeds", "events_published",
        "events_delivered", "feed_lost", "feed_duplicated", "feed_resets",
        "requests", "hedged_latency", "hedged_extra_load", "unhedged_latency",
        "unhedged_extra_load", "breakers", "outage", "ts_calls", "ts_latency",
        "ts_rpcs"})
    EXPECT_TRUE(
      std::regex_search(out, std::regex{std::string{"\n"} + rowname + " +\\S"}))
      << rowname << "\n"
      << out;
  EXPECT_TRUE(std::regex_search(out, std::regex{"\nfeeds +50 \\(ledger 17, "
                                                "catchup 17, ephemeral 16\\)"}))
    << out;
  // Live status lines on stderr, about one per second.
  auto status = 0;
  for (const auto& l : lines_of(demo.err()))
    if (l.rfind("demo ", 0) == 0 && l.find(" events ") != std::string::npos)
      ++status;
  EXPECT_GE(status, 2) << demo.err();
  EXPECT_LE(status, 6) << demo.err();
  // Every dashboard expression names metrics of the scrape or the rules.
  ASSERT_FALSE(scrape.empty()) << "no complete scrape";
  auto recorded = recorded_names();
  EXPECT_EQ(recorded.size(), 12u);
  auto dash = json::parse(
    slurp(source_dir + "/deploy/grafana/outbound-dashboard.json"));
  for (const auto& e : dashboard_exprs(dash))
    for (const auto& n : metric_names(e)) {
      auto base = std::regex_replace(n, std::regex{"_(bucket|sum|count)$"}, "");
      EXPECT_TRUE(have.count(n) || have.count(base) || recorded.count(n))
        << n << " (in " << e << ") is neither exported nor recorded";
    }
  // ... and so does every rule.
  auto rules = slurp(source_dir + "/deploy/rules/outbound.rules.yml");
  for (const auto& n : metric_names(rules)) {
    if (n.find(':') != std::string::npos)
      continue;
    auto base = std::regex_replace(n, std::regex{"_(bucket|sum|count)$"}, "");
    EXPECT_TRUE(have.count(n) || have.count(base))
      << n << " (in the rules) is not exported by the demo";
  }
  for (const auto& n : metric_names(rules))
    if (n.find(':') != std::string::npos && n.rfind("outbound:", 0) == 0)
      EXPECT_TRUE(recorded.count(n)) << n << " is used but not recorded";
}

TEST(DemoCli, BadConfigFieldIsNamedWithExitTwo) {
  temp_dir dir{"outbound-demo-config-"};
  auto path = dir.file("demo.json");
  spit(path, R"({"feeds": 10, "hedging": {"percentile": 2}})");
  auto [code, output] = run({cli(), "demo", "--config", path});
  EXPECT_EQ(code, 2) << output;
  EXPECT_NE(output.find("\"config_error\""), std::string::npos) << output;
  EXPECT_NE(output.find("demo.hedging.percentile"), std::string::npos)
    << output;
  spit(path, R"({"feedz": 10})");
  auto [code2, output2] = run({cli(), "demo", "--config", path});
  EXPECT_EQ(code2, 2) << output2;
  EXPECT_NE(output2.find("demo.feedz: unknown field"), std::string::npos)
    << output2;
  auto [code3, output3] = run({cli(), "demo", "--duration", "0"});
  EXPECT_EQ(code3, 2) << output3;
  EXPECT_NE(output3.find("demo.duration"), std::string::npos) << output3;
}

TEST(DemoCli, SigtermEndsTheRunWithTheReport) {
  running_child demo{{cli(), "demo", "--duration", "300", "--feeds", "30",
                      "--metrics-port", "0"}};
  ASSERT_FALSE(demo.first_line(60s).empty()) << demo.err();
  std::this_thread::sleep_for(2s);
  demo.signal(SIGTERM);
  auto code = demo.wait_exit(60s);
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 0) << demo.err();
  EXPECT_NE(demo.out().find("(signal)"), std::string::npos) << demo.out();
}

// -- a real Prometheus
// ---------------------------------------------------------------

namespace {

/// The `data.result` array of a Prometheus instant query (empty on any
/// failure).
json::array prom_query(uint16_t port, const std::string& q) {
  auto [status, body] = http_get(port, "/api/v1/query?query=" + url_encode(q));
  if (status != 200)
    return {};
  boost::system::error_code ec;
  auto v = json::parse(body, ec);
  if (ec || !v.is_object() || v.at("status") != "success")
    return {};
  return v.at("data").at("result").as_array();
}

double first_value(const json::array& result) {
  if (result.empty())
    return -1;
  return std::stod(
    std::string{result[0].at("value").as_array()[1].as_string()});
}

/// Replaces the one occurrence of `from` (the test fails if it is absent).
void replace_once(std::string& text, const std::string& from,
                  const std::string& to) {
  auto at = text.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  text.replace(at, from.size(), to);
}

} // namespace

TEST(RealPrometheus, ScrapesTheDemoWithTheShippedConfigAndEvaluatesTheRules) {
  auto prometheus = find_program("prometheus");
  ASSERT_FALSE(prometheus.empty())
    << "prometheus is missing: apt-get install prometheus";
  running_child demo{{cli(), "demo", "--duration", "120", "--feeds", "30",
                      "--metrics-port", "0"}};
  auto demo_port = metrics_port_of(demo.first_line(60s));
  ASSERT_NE(demo_port, 0) << demo.err();

  // deploy/prometheus.yml, pointed at this demo, scraping every second.
  temp_dir dir{"outbound-prometheus-"};
  auto cfg = slurp(source_dir + "/deploy/prometheus.yml");
  replace_once(cfg, "scrape_interval: 15s", "scrape_interval: 1s");
  replace_once(cfg, "evaluation_interval: 15s", "evaluation_interval: 1s");
  replace_once(cfg, "- rules/outbound.rules.yml",
               "- " + source_dir + "/deploy/rules/outbound.rules.yml");
  replace_once(cfg, "- rules/outbound_group.rules.yml",
               "- " + source_dir + "/deploy/rules/outbound_group.rules.yml");
  replace_once(cfg, "targets: [\"127.0.0.1:9464\"]",
               "targets: [\"127.0.0.1:" + std::to_string(demo_port) + "\"]");
  spit(dir.file("prometheus.yml"), cfg);
  auto prom_port = free_port();
  running_child prom{
    {prometheus, "--config.file=" + dir.file("prometheus.yml"),
     "--storage.tsdb.path=" + dir.file("data"),
     "--web.listen-address=127.0.0.1:" + std::to_string(prom_port),
     "--log.level=warn"}};

  // Ready, then two scrapes of an up target.
  auto until = std::chrono::steady_clock::now() + 60s;
  bool scraped_twice = false;
  while (std::chrono::steady_clock::now() < until && !prom.exited()) {
    auto r = prom_query(prom_port, "count_over_time(up{job=\"outbound\"}[5m])");
    auto up = prom_query(prom_port, "up{job=\"outbound\"}");
    if (first_value(r) >= 2 && first_value(up) == 1) {
      scraped_twice = true;
      break;
    }
    std::this_thread::sleep_for(250ms);
  }
  ASSERT_TRUE(scraped_twice)
    << "prometheus: " << prom.err()
    << "\ntargets: " << http_get(prom_port, "/api/v1/targets").second;

  // The key series, as Prometheus stored them.
  for (const char* series :
       {"outbound_client_requests_total{service=\"demo\",outcome=\"ok\"}",
        "outbound_client_request_duration_seconds_bucket{service=\"demo\"}",
        "outbound_hedge_requests_total{service=\"demo\"}",
        "outbound_breaker_state{service=\"demo\"}",
        "outbound_coalesce_calls_total{service=\"oracle\"}", "outbound_feeds",
        "outbound_feed_events_total", "outbound_demo_hub_cursor"}) {
    auto r = prom_query(prom_port, series);
    EXPECT_FALSE(r.empty()) << series;
  }
  // Recording rules evaluate (a rate needs two scrapes in its window).
  for (const char* rule :
       {"outbound:client_requests:rate1m",
        "outbound:client_errors:ratio_rate1m", "outbound:feed_events:rate1m",
        "outbound:hedge_fired:ratio_rate1m", "outbound:feed_lag_events:max"}) {
    json::array r;
    auto rule_until = std::chrono::steady_clock::now() + 30s;
    while (std::chrono::steady_clock::now() < rule_until) {
      r = prom_query(prom_port, rule);
      if (!r.empty())
        break;
      std::this_thread::sleep_for(250ms);
    }
    EXPECT_FALSE(r.empty()) << rule;
  }
  auto rps = prom_query(prom_port,
                        "outbound:client_requests:rate1m{service=\"demo\"}");
  EXPECT_GT(first_value(rps), 0.0);
  // 10 labelled ledger feeds, none past the alert's 1000 events.
  auto lag = prom_query(prom_port, "outbound_feed_lag_events{mode=\"ledger\"}");
  EXPECT_EQ(lag.size(), 10u);
  auto lagging = prom_query(prom_port, "outbound_feed_lag_events > 1000");
  EXPECT_TRUE(lagging.empty()) << json::serialize(lagging);

  prom.signal(SIGTERM);
  auto prom_code = prom.wait_exit(30s);
  EXPECT_TRUE(prom_code.has_value());
  demo.signal(SIGTERM);
  auto demo_code = demo.wait_exit(60s);
  ASSERT_TRUE(demo_code.has_value());
  EXPECT_EQ(*demo_code, 0) << demo.err();
}
