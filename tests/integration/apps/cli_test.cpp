// The `outbound` command line as a user runs it: the real binary as a child
// process, its stdout, stderr and exit code. Argument handling and exit codes
// need no server (or only a closed port); the answers come from a real nginx
// on 127.0.0.1 (nginx_fixture.hpp).

#include "hub/hub.hpp"
#include "hub/latency_profile.hpp"
#include "tests/support/child_process.hpp"
#include "tests/support/nginx_fixture.hpp"
#include "tests/support/ports.hpp"
#include "tests/support/scripted_server.hpp"
#include "tests/support/test_certs.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

using namespace outbound::testing;
using namespace std::chrono_literals;

namespace {

constexpr const char* token = "s3cr3t-T0KEN-never-printed";

struct cli_result {
  int exit_code = -1;
  std::string out;
  std::string err;

  /// The lines of stderr (without the newlines).
  std::vector<std::string> err_lines() const {
    std::vector<std::string> r;
    std::istringstream in{err};
    for (std::string line; std::getline(in, line);)
      r.push_back(line);
    return r;
  }

  /// The last stderr line parsed as a JSON object (the failure line).
  boost::json::object error() const {
    auto lines = err_lines();
    if (lines.empty())
      throw std::runtime_error("no stderr output");
    return boost::json::parse(lines.back()).as_object();
  }
};

/// Runs the CLI with `args` (and `env` added to the environment); kills it
/// after 60 s.
cli_result run_cli(const std::vector<std::string>& args,
                   const std::vector<std::string>& env = {}) {
  std::vector<std::string> argv{OUTBOUND_CLI};
  argv.insert(argv.end(), args.begin(), args.end());
  auto c = run_child(argv, 60s, env);
  if (c.timed_out)
    throw std::runtime_error("the CLI did not exit within 60 s");
  cli_result r;
  r.exit_code = c.exit_code;
  r.out = std::move(c.out);
  r.err = std::move(c.err);
  return r;
}

std::string refused_url() {
  return "http://127.0.0.1:" + std::to_string(closed_port()) + "/v1/items";
}

/// Asserts the failure shape: exactly one line on stderr, the eight keys,
/// the given type and exit code, nothing on stdout.
void expect_failure(const cli_result& r, const std::string& type,
                    int exit_code) {
  EXPECT_EQ(r.exit_code, exit_code) << r.err;
  EXPECT_EQ(r.out, "");
  ASSERT_EQ(r.err_lines().size(), 1u) << r.err;
  auto e = r.error();
  EXPECT_EQ(e.size(), 8u) << r.err;
  EXPECT_EQ(e.at("error").as_string(), type) << r.err;
  EXPECT_TRUE(e.contains("status"));
  EXPECT_TRUE(e.at("detail").is_string());
  EXPECT_TRUE(e.at("attempts").is_int64());
  EXPECT_TRUE(e.at("request_id").is_string());
  EXPECT_TRUE(e.at("nothing_sent").is_bool());
  EXPECT_TRUE(e.at("nothing_billed").is_bool());
  EXPECT_TRUE(e.at("reason").is_null() || e.at("reason").is_string());
  // Nothing sent implies nothing billed.
  if (e.at("nothing_sent").as_bool())
    EXPECT_TRUE(e.at("nothing_billed").as_bool()) << r.err;
}

std::string detail_of(const cli_result& r) {
  return std::string{r.error().at("detail").as_string()};
}

} // namespace

// -- argument handling, no server ---------------------------------------------

TEST(CliArgs, NoSubcommandIsAUsageErrorWithExitCode2) {
  auto r = run_cli({});
  expect_failure(r, "usage_error", 2);
  EXPECT_TRUE(r.error().at("status").is_null());
  EXPECT_EQ(r.error().at("attempts").as_int64(), 0);
  EXPECT_TRUE(r.error().at("nothing_sent").as_bool());
}

TEST(CliArgs, HelpListsEverySubcommandAndExits0) {
  auto r = run_cli({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  // Each name as an entry of CLI11's subcommand list ("\n  NAME  ..."),
  // not as a substring of another word ("ts" of "requests").
  for (std::string cmd :
       {"request", "watch", "hub", "ts", "seq", "group-member", "demo"})
    EXPECT_NE(r.out.find("\n  " + cmd + " "), std::string::npos) << cmd << "\n"
                                                                 << r.out;
}

TEST(CliArgs, RequestHelpListsTheOptionsAndExits0) {
  auto r = run_cli({"request", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  for (auto* opt : {"--method",
                    "--json",
                    "--param",
                    "--header",
                    "--idempotent",
                    "--not-idempotent",
                    "--token",
                    "--token-header",
                    "--token-scheme",
                    "--ca-file",
                    "--cert",
                    "--key",
                    "--timeout",
                    "--deadline",
                    "--max-attempts",
                    "--base-backoff",
                    "--max-backoff",
                    "--retry-status",
                    "--max-response-bytes",
                    "--raw",
                    "--env",
                    "--verbose"})
    EXPECT_NE(r.out.find(opt), std::string::npos) << opt;
}

TEST(CliArgs, VersionPrintsTheProjectVersionAndExits0) {
  auto r = run_cli({"--version"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, std::string{"outbound "} + OUTBOUND_VERSION + "\n");
  EXPECT_EQ(r.err, "");
}

TEST(CliArgs, UnknownSubcommandIsNamedWithTheListAndExit2) {
  auto r = run_cli({"frobnicate", "--flag"});
  expect_failure(r, "usage_error", 2);
  auto d = detail_of(r);
  EXPECT_EQ(d.rfind("unknown subcommand 'frobnicate'", 0), 0u) << d;
  for (auto* cmd : {"request", "watch", "hub", "ts", "seq", "demo"})
    EXPECT_NE(d.find(cmd), std::string::npos) << cmd << ": " << d;
}

TEST(CliArgs, HubHelpListsItsEndpointsAndExitCodes) {
  auto r = run_cli({"hub", "--help"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (auto* s :
       {"/v1/events", "/v1/cursor", "/ws/feed", "/ws/ledger", "/fast", "/v1/ts",
        "/admin/faults", "/admin/state", "Exit codes:", "hub_error"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
}

TEST(CliArgs, BenchIsNoSubcommandAndTheErrorSaysWhereTheBenchmarksAre) {
  auto r = run_cli({"bench"});
  expect_failure(r, "usage_error", 2);
  auto d = detail_of(r);
  EXPECT_EQ(d.rfind("unknown subcommand 'bench'", 0), 0u) << d;
  EXPECT_NE(d.find("build/bench/ by scripts/build.sh (bench/README.md)"),
            std::string::npos)
    << d;
  auto help = run_cli({"--help"});
  EXPECT_EQ(help.exit_code, 0) << help.err;
  EXPECT_EQ(help.out.find("bench"), std::string::npos) << help.out;
  EXPECT_EQ(help.out.find("not implemented"), std::string::npos) << help.out;
}

TEST(CliArgs, UnknownOptionIsAUsageError) {
  auto r = run_cli({"request", "--no-such-option", refused_url()});
  expect_failure(r, "usage_error", 2);
}

TEST(CliArgs, MissingUrlIsAUsageError) {
  auto r = run_cli({"request"});
  expect_failure(r, "usage_error", 2);
}

// A usage error points at the help of the subcommand typed; with none
// typed, it lists them.
TEST(CliArgs, AUsageErrorPointsAtItsSubcommandsHelpOrListsThem) {
  auto r = run_cli({"request"});
  EXPECT_NE(detail_of(r).find("(run 'outbound request --help')"),
            std::string::npos)
    << r.err;
  auto none = run_cli({});
  EXPECT_NE(detail_of(none).find("(subcommands: request, hub, watch, ts, seq, "
                                 "group-member, demo; run 'outbound --help')"),
            std::string::npos)
    << none.err;
}

TEST(CliArgs, AnOutOfRangeOptionIsNamedWithTheValueGiven) {
  auto r = run_cli(
    {"request", "--hedge", "--percentile", "2", "http://127.0.0.1:1/x"});
  expect_failure(r, "config_error", 2);
  EXPECT_EQ(detail_of(r), "hedge.percentile: must be strictly between 0 and "
                          "1, got 2");
}

TEST(CliArgs, NonNumericTimeoutIsAUsageError) {
  auto r = run_cli({"request", "--timeout", "soon", refused_url()});
  expect_failure(r, "usage_error", 2);
}

TEST(CliArgs, InvalidJsonBodyIsAUsageErrorAndNothingIsSent) {
  connection_sink sink;
  auto url = "http://127.0.0.1:" + std::to_string(sink.port()) + "/v1/x";
  auto r = run_cli({"request", "-X", "POST", "--json", "{\"qty\":", url});
  expect_failure(r, "usage_error", 2);
  EXPECT_EQ(detail_of(r).rfind("--json is not valid JSON", 0), 0u)
    << detail_of(r);
  EXPECT_EQ(sink.connections(), 0u);
}

TEST(CliArgs, ValidJsonBeyondTheLimitsCannotBeSentButIsNotCalledInvalid) {
  connection_sink sink;
  auto url = "http://127.0.0.1:" + std::to_string(sink.port()) + "/v1/x";
  std::string deep65 = std::string(65, '[') + std::string(65, ']');
  struct row {
    std::vector<std::string> extra;
    std::string json;
    std::string detail;
  };
  for (const auto& c : std::vector<row>{
         {{}, deep65, "--json cannot be sent: nesting deeper than 64 levels"},
         {{"--json-max-depth", "32"},
          std::string(33, '[') + std::string(33, ']'),
          "--json cannot be sent: nesting deeper than 32 levels"},
         {{},
          R"({"n":[1e400]})",
          "--json cannot be sent: number out of range (IEEE 754 binary64) "
          "at n[0]"},
         {{},
          R"({"n":1e-400})",
          "--json cannot be sent: number out of range (underflows IEEE 754 "
          "binary64 to zero) at n"}}) {
    std::vector<std::string> args{"request", "-X", "POST"};
    args.insert(args.end(), c.extra.begin(), c.extra.end());
    args.insert(args.end(), {"--json", c.json, url});
    auto r = run_cli(args);
    expect_failure(r, "usage_error", 2);
    EXPECT_EQ(detail_of(r), c.detail);
  }
  EXPECT_EQ(sink.connections(), 0u);
  // The limit is the client's json_max_depth, validated as such.
  auto bad = run_cli({"request", "--json-max-depth", "0", "--json", "[]", url});
  expect_failure(bad, "config_error", 2);
  EXPECT_EQ(detail_of(bad).rfind("json_max_depth: ", 0), 0u) << bad.err;
}

// As curl's --json: a body without -X is a POST (a new user's publish went
// out as a GET with a body and printed the replay page); -X still decides.
TEST(CliJson, AJsonBodyWithoutAMethodIsAPost) {
  scripted_server srv{
    {{step::read_request(),
      step::send(scripted_server::json_response(200, "{}"))},
     {step::read_request(),
      step::send(scripted_server::json_response(200, "{}"))}}};
  auto r
    = run_cli({"request", "--json", R"({"a":1})", srv.base_url() + "/v1/x"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto put = run_cli(
    {"request", "-X", "put", "--json", "[]", srv.base_url() + "/v1/x"});
  EXPECT_EQ(put.exit_code, 0) << put.err;
  ASSERT_TRUE(srv.wait_for_requests(2, 5000ms));
  EXPECT_EQ(srv.requests().at(0).method, "POST");
  EXPECT_EQ(srv.requests().at(0).body, R"({"a":1})");
  EXPECT_EQ(srv.requests().at(1).method, "PUT");
}

TEST(CliArgs, AUrlWithoutASchemeIsToldToBeginWithOne) {
  auto r = run_cli({"request", "127.0.0.1:1/fast"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("begin it with http:// or https://"), std::string::npos)
    << r.err;
  auto path = run_cli({"request", "/fast"});
  EXPECT_EQ(path.exit_code, 2) << path.err;
  EXPECT_EQ(path.err.find("begin it with"), std::string::npos) << path.err;
  EXPECT_NE(path.err.find("--env PREFIX"), std::string::npos) << path.err;
}

// A blank key would make the POST retryable with no key on the wire.
TEST(CliArgs, ABlankIdempotencyKeyIsAUsageError) {
  for (std::string blank : {"", " ", "\t "}) {
    auto r = run_cli({"request", "-X", "POST", "--json", "{}",
                      "--idempotency-key", blank, refused_url()});
    EXPECT_EQ(r.exit_code, 2) << "'" << blank << "': " << r.err;
    EXPECT_NE(r.err.find("--idempotency-key"), std::string::npos) << r.err;
  }
}

TEST(CliJson, JsonMaxDepthRaisesTheLimitOfTheJsonBody) {
  std::string deep65 = std::string(65, '[') + std::string(65, ']');
  scripted_server srv{
    {{step::read_request(),
      step::send(scripted_server::json_response(200, "{}"))}}};
  auto r = run_cli({"request", "-X", "POST", "--json-max-depth", "128",
                    "--json", deep65, srv.base_url() + "/v1/x"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(srv.wait_for_requests(1, 5000ms));
  EXPECT_EQ(srv.requests().at(0).body, deep65);
}

TEST(CliArgs, IdempotentAndNotIdempotentExcludeEachOther) {
  auto r
    = run_cli({"request", "--idempotent", "--not-idempotent", refused_url()});
  expect_failure(r, "usage_error", 2);
}

TEST(CliArgs, HeaderWithoutColonIsAUsageError) {
  auto r = run_cli({"request", "--header", "novalue", refused_url()});
  expect_failure(r, "usage_error", 2);
  EXPECT_EQ(detail_of(r).rfind("--header expects 'Name: value' (got an "
                               "argument without a ':')",
                               0),
            0u)
    << r.err;
  r = run_cli({"request", "--header", " : v", refused_url()});
  expect_failure(r, "usage_error", 2);
  EXPECT_NE(detail_of(r).find("without a name before ':'"), std::string::npos)
    << r.err;
}

// -- configuration errors name the field
// ----------------------------------------

TEST(CliConfig, NegativeBackoffIsAConfigErrorNamingTheField) {
  auto r = run_cli({"request", "--base-backoff=-1", refused_url()});
  expect_failure(r, "config_error", 2);
  EXPECT_EQ(detail_of(r).rfind("retry.base_backoff: ", 0), 0u) << r.err;
}

TEST(CliConfig, ZeroAttemptsIsAConfigErrorNamingTheField) {
  auto r = run_cli({"request", "--max-attempts", "0", refused_url()});
  expect_failure(r, "config_error", 2);
  EXPECT_EQ(detail_of(r).rfind("retry.max_attempts: ", 0), 0u) << r.err;
}

TEST(CliConfig, ZeroTimeoutIsAConfigErrorNamingTheField) {
  auto r = run_cli({"request", "--timeout", "0", refused_url()});
  expect_failure(r, "config_error", 2);
  EXPECT_EQ(detail_of(r).rfind("timeout: ", 0), 0u) << r.err;
}

TEST(CliConfig, BadRetryStatusIsAConfigErrorNamingTheField) {
  auto r = run_cli({"request", "--retry-status", "503,42", refused_url()});
  expect_failure(r, "config_error", 2);
  EXPECT_EQ(detail_of(r).rfind("retry.retry_statuses: ", 0), 0u) << r.err;
}

TEST(CliConfig, NonHttpUrlIsAConfigErrorNamingBaseUrl) {
  auto r = run_cli({"request", "ftp://127.0.0.1/v1/items"});
  expect_failure(r, "config_error", 2);
  EXPECT_EQ(detail_of(r).rfind("base_url: ", 0), 0u) << r.err;
}

TEST(CliConfig, PathWithoutEnvIsAConfigErrorNamingBaseUrl) {
  auto r = run_cli({"request", "/v1/items"});
  expect_failure(r, "config_error", 2);
  EXPECT_EQ(detail_of(r).rfind("base_url: ", 0), 0u) << r.err;
}

TEST(CliConfig, CertWithoutKeyIsAConfigErrorNamingTheKey) {
  temp_dir dir;
  auto pki = test_pki::generate(dir.path());
  auto r = run_cli(
    {"request", "--cert", pki.client.cert,
     "https://127.0.0.1:" + std::to_string(closed_port()) + "/v1/items"});
  expect_failure(r, "config_error", 2);
  EXPECT_EQ(detail_of(r).rfind("tls.client_key_file: ", 0), 0u) << r.err;
}

TEST(CliConfig, UnreadableCaFileIsAConfigErrorNamingTheField) {
  auto r = run_cli(
    {"request", "--ca-file", "/nonexistent/ca.pem",
     "https://127.0.0.1:" + std::to_string(closed_port()) + "/v1/items"});
  expect_failure(r, "config_error", 2);
  EXPECT_EQ(detail_of(r).rfind("tls.ca_file: ", 0), 0u) << r.err;
}

TEST(CliConfig, EnvPrefixWithoutUrlVariableIsAConfigErrorNamingTheVariable) {
  auto r
    = run_cli({"request", "--env", "OUTBOUND_CLI_TEST_UNSET", "/v1/items"});
  expect_failure(r, "config_error", 2);
  EXPECT_EQ(detail_of(r).rfind("OUTBOUND_CLI_TEST_UNSET_URL: ", 0), 0u)
    << r.err;
}

// -- transport failures, a closed port
// -------------------------------------------

TEST(CliTransport, RefusedGetIsServiceUnavailableAfterEveryAttempt) {
  auto r = run_cli(
    {"request", "--max-attempts", "2", "--base-backoff", "0", refused_url()});
  expect_failure(r, "service_unavailable", 7);
  auto e = r.error();
  EXPECT_TRUE(e.at("status").is_null());
  EXPECT_EQ(e.at("attempts").as_int64(), 2);
  EXPECT_TRUE(e.at("nothing_sent").as_bool());
  EXPECT_FALSE(e.at("request_id").as_string().empty());
}

TEST(CliTransport, RefusedPostIsTriedOnce) {
  auto r
    = run_cli({"request", "-X", "post", "--json", "{\"qty\":1}",
               "--max-attempts", "3", "--base-backoff", "0", refused_url()});
  expect_failure(r, "service_unavailable", 7);
  EXPECT_EQ(r.error().at("attempts").as_int64(), 1);
}

TEST(CliTransport, RefusedPostMarkedIdempotentIsRetried) {
  auto r
    = run_cli({"request", "-X", "POST", "--json", "{\"qty\":1}", "--idempotent",
               "--max-attempts", "3", "--base-backoff", "0", refused_url()});
  expect_failure(r, "service_unavailable", 7);
  EXPECT_EQ(r.error().at("attempts").as_int64(), 3);
}

TEST(CliTransport, VerbosePrintsOneJsonObjectPerObserverEvent) {
  auto r = run_cli({"request", "--verbose", "--max-attempts", "2",
                    "--base-backoff", "0", refused_url()});
  EXPECT_EQ(r.exit_code, 7) << r.err;
  auto lines = r.err_lines();
  ASSERT_GE(lines.size(), 2u) << r.err;
  int sending = 0, retrying = 0, failed = 0;
  for (std::size_t i = 0; i + 1 < lines.size(); ++i) {
    auto ev = boost::json::parse(lines[i]).as_object();
    auto kind = std::string{ev.at("event").as_string()};
    EXPECT_EQ(ev.at("path").as_string(), "/v1/items");
    EXPECT_EQ(ev.at("method").as_string(), "GET");
    sending += kind == "sending";
    retrying += kind == "retrying";
    failed += kind == "failed";
  }
  EXPECT_EQ(sending, 2) << r.err;
  EXPECT_EQ(retrying, 1) << r.err;
  EXPECT_EQ(failed, 1) << r.err;
  EXPECT_EQ(r.error().at("error").as_string(), "service_unavailable");
}

TEST(CliSecrets, TokenNeverAppearsInOutputOfAFailedCall) {
  auto r = run_cli({"request", "--verbose", "--token", token, "--max-attempts",
                    "2", "--base-backoff", "0", refused_url()});
  EXPECT_EQ(r.exit_code, 7);
  EXPECT_EQ(r.out.find(token), std::string::npos);
  EXPECT_EQ(r.err.find(token), std::string::npos) << r.err;
}

TEST(CliSecrets, TokenNeverAppearsInAUsageError) {
  auto r
    = run_cli({"request", "--token", token, "--bogus", token, refused_url()});
  expect_failure(r, "usage_error", 2);
  EXPECT_EQ(r.err.find(token), std::string::npos) << r.err;
}

TEST(CliSecrets, TokenNeverAppearsInAnUnknownSubcommandError) {
  auto r = run_cli({token, "--token", token});
  expect_failure(r, "usage_error", 2);
  EXPECT_EQ(detail_of(r).rfind("unknown subcommand '***'", 0), 0u) << r.err;
  EXPECT_EQ(r.err.find(token), std::string::npos) << r.err;
}

TEST(CliSecrets, ATokenThatSpellsPartOfAFieldNameLeavesTheNameWhole) {
  auto r = run_cli({"request", "--verbose", "--token", "request",
                    "--max-attempts", "1", refused_url()});
  EXPECT_EQ(r.exit_code, 7) << r.err;
  auto lines = r.err_lines();
  ASSERT_GE(lines.size(), 2u) << r.err;
  for (auto& line : lines) {
    auto v = boost::json::parse(line).as_object();
    EXPECT_TRUE(v.contains("request_id")) << line;
  }
}

TEST(CliSecrets, ATokenThatJsonEscapesNeverAppearsEscaped) {
  const std::string quoted = "s3cr3t\"quote\\back";
  auto r = run_cli({quoted, "--token", quoted});
  expect_failure(r, "usage_error", 2);
  EXPECT_EQ(detail_of(r).rfind("unknown subcommand '***'", 0), 0u) << r.err;
  EXPECT_EQ(r.err.find("s3cr3t"), std::string::npos) << r.err;
}

TEST(CliSecrets, TokenNeverAppearsInAConfigError) {
  auto r = run_cli(
    {"request", "--token", std::string{token} + "\x01", refused_url()});
  expect_failure(r, "config_error", 2);
  EXPECT_EQ(detail_of(r).rfind("token: ", 0), 0u) << r.err;
  EXPECT_EQ(r.err.find(token), std::string::npos) << r.err;
}

// -- against a real nginx
// ------------------------------------------------------------

class CliNginx : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<temp_dir>("outbound-cli-nginx-");
    std::filesystem::create_directories(dir_->file("pki"));
    std::filesystem::create_directories(dir_->file("nginx"));
    pki_ = std::make_unique<test_pki>(test_pki::generate(dir_->file("pki")));
    sink_ = std::make_unique<connection_sink>();
    auto nginx = find_program("nginx", "OUTBOUND_NGINX",
                              {"/usr/sbin/nginx", "/usr/local/sbin/nginx"});
    if (nginx.empty())
      throw std::runtime_error(
        "nginx not found (bash scripts/install-deps.sh)");
    server_ = std::make_unique<nginx_instance>(nginx, dir_->file("nginx"),
                                               *pki_, sink_->port());
  }

  static void TearDownTestSuite() {
    server_.reset();
    sink_.reset();
    pki_.reset();
    dir_.reset();
  }

  static std::string url(const std::string& path,
                         nginx_listener l = nginx_listener::http) {
    return server_->base_url(l) + path;
  }

  static std::unique_ptr<temp_dir> dir_;
  static std::unique_ptr<test_pki> pki_;
  static std::unique_ptr<connection_sink> sink_;
  static std::unique_ptr<nginx_instance> server_;
};

std::unique_ptr<temp_dir> CliNginx::dir_;
std::unique_ptr<test_pki> CliNginx::pki_;
std::unique_ptr<connection_sink> CliNginx::sink_;
std::unique_ptr<nginx_instance> CliNginx::server_;

TEST_F(CliNginx, GetPrintsTheBodyAsCompactJsonAndExits0) {
  auto r = run_cli({"request", url("/v1/items.json")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, nginx_instance::items_body + "\n");
  EXPECT_EQ(r.err, "");
}

TEST_F(CliNginx, EmptyBodyPrintsNull) {
  auto r = run_cli({"request", url("/v1/empty")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "null\n");
}

TEST_F(CliNginx, ChunkedBodyIsPrintedWhole) {
  auto r = run_cli({"request", url("/v1/chunked.json")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, nginx_instance::chunked_body() + "\n");
}

TEST_F(CliNginx, UrlQueryIsKeptAndParamsAreAppended) {
  auto r = run_cli(
    {"request", url("/v1/query?a=1"), "--param", "b=2", "--param", "c=3"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "{\"query\":\"a=1&b=2&c=3\"}\n");
}

TEST_F(CliNginx, NotFoundIsARequestErrorWithTheServersDetail) {
  auto r = run_cli({"request", url("/v1/nope")});
  expect_failure(r, "request_error", 4);
  auto e = r.error();
  EXPECT_EQ(e.at("status").as_int64(), 404);
  EXPECT_EQ(e.at("detail").as_string(), "nope");
  EXPECT_EQ(e.at("attempts").as_int64(), 1);
  EXPECT_FALSE(e.at("nothing_sent").as_bool());
}

TEST_F(CliNginx, UnauthorizedAndForbiddenAreAuthErrors) {
  auto r401 = run_cli({"request", url("/v1/unauthorized")});
  expect_failure(r401, "auth_error", 3);
  EXPECT_EQ(r401.error().at("status").as_int64(), 401);
  EXPECT_EQ(r401.error().at("detail").as_string(), "bad token");
  // Its one attempt was refused outright: sent, but nothing billed.
  EXPECT_FALSE(r401.error().at("nothing_sent").as_bool());
  EXPECT_TRUE(r401.error().at("nothing_billed").as_bool());
  auto r403 = run_cli({"request", url("/v1/forbidden")});
  expect_failure(r403, "auth_error", 3);
  EXPECT_EQ(r403.error().at("status").as_int64(), 403);
}

TEST_F(CliNginx, ServerErrorIsNotRetriedByDefault) {
  auto r = run_cli(
    {"request", "--header", "x-request-id: cli-boom-1", url("/v1/boom")});
  expect_failure(r, "server_error", 5);
  auto e = r.error();
  EXPECT_EQ(e.at("status").as_int64(), 500);
  EXPECT_EQ(e.at("detail").as_string(), "boom");
  EXPECT_EQ(e.at("attempts").as_int64(), 1);
  EXPECT_EQ(e.at("request_id").as_string(), "cli-boom-1");
  EXPECT_EQ(server_->requests_with_id("cli-boom-1").size(), 1u);
  EXPECT_FALSE(e.at("nothing_billed").as_bool()) << "a 500 may have billed";
}

TEST_F(CliNginx, RetryStatusRetriesA503UntilTheAttemptsAreSpent) {
  auto r = run_cli({"request", "--retry-status", "429,503", "--base-backoff",
                    "0", "--max-attempts", "3", "--header",
                    "X-Request-Id: cli-503-1", url("/v1/unavailable")});
  expect_failure(r, "server_error", 5);
  EXPECT_EQ(r.error().at("status").as_int64(), 503);
  EXPECT_EQ(r.error().at("attempts").as_int64(), 3);
  auto seen = server_->requests_with_id("cli-503-1", 3);
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[1].retry_count, "1");
  EXPECT_EQ(seen[2].retry_count, "2");
}

TEST_F(CliNginx, NonJsonSuccessIsAResponseError) {
  auto r = run_cli({"request", url("/v1/text")});
  expect_failure(r, "response_error", 6);
  EXPECT_EQ(r.error().at("status").as_int64(), 200);
}

TEST_F(CliNginx, BodyOverTheCapIsAResponseError) {
  auto r
    = run_cli({"request", "--max-response-bytes", "1024", url("/v1/big.json")});
  expect_failure(r, "response_error", 6);
  // The status line was read before the body was refused.
  EXPECT_EQ(r.error().at("status").as_int64(), 200) << r.err;
}

TEST_F(CliNginx, VerboseRetryingEventCarriesTheRetriedStatus) {
  auto r = run_cli({"request", "--verbose", "--retry-status", "503",
                    "--base-backoff", "0", "--max-attempts", "2",
                    url("/v1/unavailable")});
  EXPECT_EQ(r.exit_code, 5) << r.err;
  auto lines = r.err_lines();
  int retrying = 0;
  for (std::size_t i = 0; i + 1 < lines.size(); ++i) {
    auto ev = boost::json::parse(lines[i]).as_object();
    if (ev.at("event").as_string() != "retrying")
      continue;
    ++retrying;
    EXPECT_EQ(ev.at("cause").as_string(), "status 503") << lines[i];
    ASSERT_TRUE(ev.at("status").is_int64()) << lines[i];
    EXPECT_EQ(ev.at("status").as_int64(), 503) << lines[i];
  }
  EXPECT_EQ(retrying, 1) << r.err;
  EXPECT_EQ(r.error().at("status").as_int64(), 503);
}

TEST_F(CliNginx, RedirectIsNotFollowed) {
  auto before = sink_->connections();
  auto r = run_cli({"request", "--token", token, url("/v1/redirect")});
  expect_failure(r, "request_error", 4);
  EXPECT_EQ(r.error().at("status").as_int64(), 302);
  EXPECT_EQ(r.error().at("attempts").as_int64(), 1);
  EXPECT_EQ(sink_->connections(), before);
  EXPECT_EQ(r.err.find(token), std::string::npos);
}

TEST_F(CliNginx, RawPrintsStatusHeadersAndBodyAndExits0ForA404) {
  auto r = run_cli({"request", "--raw", url("/v1/nope")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto v = boost::json::parse(r.out).as_object();
  EXPECT_EQ(v.at("status").as_int64(), 404);
  EXPECT_EQ(boost::json::serialize(v.at("body")), "{\"detail\":\"nope\"}");
  auto& headers = v.at("headers").as_object();
  ASSERT_TRUE(headers.contains("content-type")) << r.out;
  EXPECT_EQ(headers.at("content-type").as_string(), "application/json");
}

TEST_F(CliNginx, RawShowsTheLocationOfARefusedRedirect) {
  auto r = run_cli({"request", "--raw", url("/v1/redirect")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto v = boost::json::parse(r.out).as_object();
  EXPECT_EQ(v.at("status").as_int64(), 302);
  EXPECT_EQ(v.at("headers").as_object().at("location").as_string(),
            "http://127.0.0.1:" + std::to_string(sink_->port())
              + "/v1/items.json");
}

TEST_F(CliNginx, TokenIsSentWithTheConfiguredSchemeButNeverPrinted) {
  auto r = run_cli({"request", "--verbose", "--token", token, "--header",
                    "x-request-id: cli-token-1", url("/v1/items.json")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find(token), std::string::npos);
  EXPECT_EQ(r.err.find(token), std::string::npos) << r.err;
  auto seen = server_->requests_with_id("cli-token-1");
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].authorization, std::string{"Bearer "} + token);
}

TEST_F(CliNginx, EmptyTokenSchemeSendsTheRawToken) {
  auto r
    = run_cli({"request", "--token", token, "--token-scheme", "", "--header",
               "x-request-id: cli-token-2", url("/v1/items.json")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto seen = server_->requests_with_id("cli-token-2");
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].authorization, token);
}

TEST(CliConfig, AbsoluteUrlWithEnvIsAUsageErrorAndNothingIsSent) {
  connection_sink sink;
  auto base = "http://127.0.0.1:" + std::to_string(sink.port());
  auto r = run_cli({"request", "--env", "CLITEST", base + "/v1/items"},
                   {"CLITEST_URL=" + base});
  expect_failure(r, "usage_error", 2);
  EXPECT_NE(detail_of(r).find("an absolute URL and --env do not mix"),
            std::string::npos)
    << r.err;
  EXPECT_EQ(sink.connections(), 0u);
}

TEST_F(CliNginx, EnvPrefixGivesTheBaseUrlAndUrlIsAPath) {
  auto r = run_cli({"request", "--env", "CLITEST", "/v1/items.json"},
                   {"CLITEST_URL=" + server_->base_url(nginx_listener::http)});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, nginx_instance::items_body + "\n");
}

TEST_F(CliNginx, TlsWithCaFileVerifiesTheServer) {
  auto r = run_cli({"request", "--ca-file", pki_->ca_a.cert,
                    url("/v1/items.json", nginx_listener::tls)});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, nginx_instance::items_body + "\n");
}

TEST_F(CliNginx, MtlsWithAClientCertificateIsAccepted) {
  auto r = run_cli({"request", "--ca-file", pki_->ca_a.cert, "--cert",
                    pki_->client.cert, "--key", pki_->client.key,
                    url("/v1/items.json", nginx_listener::mtls)});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, nginx_instance::items_body + "\n");
}

TEST_F(CliNginx, TlsWithoutTheCaFailsWithoutRetryAsServiceUnavailable) {
  // The test CA is not in the system trust store: verification fails.
  auto r = run_cli({"request", url("/v1/items.json", nginx_listener::tls)});
  expect_failure(r, "service_unavailable", 7);
  EXPECT_TRUE(r.error().at("status").is_null());
  EXPECT_EQ(r.error().at("attempts").as_int64(), 1);
}

// Hedging from the CLI: `outbound request --hedge` against the hub's /flaky
// profile, with a key whose primary straggles (900 ms) and whose hedge
// (the key's second arrival) is fast.

/// A key of the hub's /flaky profile whose first arrival (the primary)
/// straggles 900 ms and whose second (the hedge) answers within 20 ms, on
/// a hub with `seed`.
static std::string straggling_flaky_key(uint64_t seed) {
  outbound::latency_profile p;
  p.kind = outbound::latency_profile_kind::flaky;
  for (int i = 0;; ++i) {
    auto k = "k" + std::to_string(i);
    if (outbound::latency_profile_delay(p, seed, k, 0) == 0.9
        && outbound::latency_profile_delay(p, seed, k, 1) < 0.02)
      return k;
  }
}

TEST(CliHedge, HedgeDelayFiresOneBackupThatWins) {
  outbound::hub_config hc;
  hc.seed = 11;
  outbound::hub h{hc};
  h.start();
  auto key = straggling_flaky_key(11);
  auto r = run_cli({"request", "--hedge", "--hedge-delay", "0.05", "--verbose",
                    h.base_url() + "/flaky?key=" + key});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto body = boost::json::parse(r.out);
  // The key's fast second arrival answered, not the 900 ms straggler. It
  // is the hedge's, 50 ms after the primary, unless a loaded machine
  // delayed the primary's dial and write by more than that (then the
  // primary arrives second and wins): exactly one leg wins.
  EXPECT_EQ(body.at("arrival").as_int64(), 1);
  auto lines = r.err_lines();
  ASSERT_FALSE(lines.empty());
  auto counters = boost::json::parse(lines.back()).at("hedging");
  EXPECT_EQ(counters.at("hedged_requests").to_number<int64_t>(), 1);
  EXPECT_EQ(counters.at("hedge_wins").to_number<int64_t>()
              + counters.at("primary_wins").to_number<int64_t>(),
            1);
  // --verbose shows the hedge as its own event, and each event carries only
  // the fields of its kind (a sending event has no attempts, outcome or
  // latency to report).
  ASSERT_GE(lines.size(), 4u) << r.err; // sending, hedging, answered, counters
  std::vector<std::string> kinds;
  for (std::size_t i = 0; i + 1 < lines.size(); ++i) {
    auto ev = boost::json::parse(lines[i]).as_object();
    auto kind = std::string{ev.at("event").as_string()};
    kinds.push_back(kind);
    EXPECT_EQ(ev.at("attempt").as_int64(), 1) << lines[i];
    EXPECT_EQ(ev.contains("attempts"), kind == "answered") << lines[i];
    EXPECT_EQ(ev.contains("latency_ns"), kind == "answered") << lines[i];
    EXPECT_EQ(ev.contains("outcome"), kind == "answered") << lines[i];
    EXPECT_EQ(ev.contains("delay_ns"), kind == "hedging") << lines[i];
    EXPECT_FALSE(ev.contains("cause")) << lines[i];
    if (kind == "hedging") // sent after the 50 ms hedge delay, not before
      EXPECT_GE(ev.at("delay_ns").as_int64(), 50'000'000) << lines[i];
    if (kind == "answered") {
      EXPECT_EQ(ev.at("attempts").as_int64(), 1) << lines[i];
      EXPECT_EQ(ev.at("status").as_int64(), 200) << lines[i];
      EXPECT_EQ(ev.at("outcome").as_string(), "ok") << lines[i];
    }
  }
  EXPECT_EQ(kinds, (std::vector<std::string>{"sending", "hedging", "answered"}))
    << r.err;
  // Without --hedge the same kind of key takes the primary's 900 ms.
  auto plain = run_cli({"request", h.base_url() + "/flaky?key=" + key + "x"});
  EXPECT_EQ(plain.exit_code, 0) << plain.err;
  h.stop();
}

TEST(CliHedge, BadHedgeSettingsAreConfigErrorsNamingTheField) {
  auto r = run_cli(
    {"request", "--hedge", "--percentile", "1.5", "http://127.0.0.1:1/x"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.error().at("detail").as_string().find("hedge.percentile"),
            std::string::npos)
    << r.err;
  auto d = run_cli(
    {"request", "--hedge", "--hedge-delay", "-1", "http://127.0.0.1:1/x"});
  EXPECT_EQ(d.exit_code, 2) << d.err;
  EXPECT_NE(d.error().at("detail").as_string().find("hedge_delay"),
            std::string::npos)
    << d.err;
}

// -- JSON limits and numbers end to end (protocol/json_parse.hpp)
// ---------------

TEST(CliJson, JsonBodyGoesOnTheWireByteForByte) {
  scripted_server srv{
    {{step::read_request(),
      step::send(scripted_server::json_response(200, "{}"))}}};
  const std::string body = "{ \"t\": 1.7961554897535605E9, \"one\": 1.0, "
                           "\"big\": 12345678901234567890123 }";
  auto r = run_cli(
    {"request", "-X", "POST", "--json", body, srv.base_url() + "/v1/x"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(srv.wait_for_requests(1, 5000ms));
  EXPECT_EQ(srv.requests().at(0).body, body);
}

TEST(CliJson, ResponseDoublesArePrintedExactly) {
  scripted_server srv{
    {{step::read_request(), step::send(scripted_server::json_response(
                              200, R"({"t":1.7961554897535605E9})"))}}};
  auto r = run_cli({"request", srv.base_url() + "/v1/x"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "{\"t\":1.7961554897535605E9}\n");
}

TEST(CliJson, ValidJsonDeeperThan32LevelsIsPrintedNotCalledNotJson) {
  std::string deep = std::string(40, '[') + "1" + std::string(40, ']');
  scripted_server srv{
    {{step::read_request(),
      step::send(scripted_server::json_response(200, deep))}}};
  auto r = run_cli({"request", srv.base_url() + "/v1/x"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, deep + "\n");
}

TEST(CliJson, AnOverflowingNumberIsAResponseErrorNotInfinity) {
  scripted_server srv{
    {{step::read_request(),
      step::send(scripted_server::json_response(200, R"({"v":[1e400]})"))}}};
  auto r = run_cli({"request", srv.base_url() + "/v1/x"});
  expect_failure(r, "response_error", 6);
  EXPECT_NE(detail_of(r).find("out of range"), std::string::npos) << r.err;
  EXPECT_NE(detail_of(r).find("v[0]"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("Infinity"), std::string::npos) << r.err;
}

TEST(CliJson, ADeepErrorBodyKeepsItsDetail) {
  std::string deep = std::string(40, '[') + std::string(40, ']');
  scripted_server srv{
    {{step::read_request(),
      step::send(scripted_server::json_response(
        400, R"({"detail":"bad shape","at":)" + deep + "}"))}}};
  auto r = run_cli({"request", srv.base_url() + "/v1/x"});
  expect_failure(r, "request_error", 4);
  EXPECT_EQ(detail_of(r), "bad shape");
}

TEST(CliJson, RawKeepsTheTextOfABodyItCannotRepresent) {
  struct row {
    std::string body;
    std::string error; // "" = representable: no body_text
  };
  for (const auto& c : std::vector<row>{
         {R"({"a":1e400})", "number out of range (IEEE 754 binary64) at a"},
         {R"({"a":[1e-400]})",
          "number out of range (underflows IEEE 754 binary64 to zero) at "
          "a[0]"},
         {R"({"id":123456789012345678901234567890})",
          "integer of 30 digits not exact in IEEE 754 binary64 at id"},
         {"<html>oops</html>", "?"},
         {R"({"a":1})", ""},
         {"", ""}}) {
    scripted_server srv{
      {{step::read_request(),
        step::send(scripted_server::json_response(200, c.body))}}};
    auto r = run_cli({"request", "--raw", srv.base_url() + "/v1/x"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    auto v = boost::json::parse(r.out).as_object();
    EXPECT_EQ(v.at("status").as_int64(), 200) << c.body;
    if (c.error.empty()) {
      EXPECT_FALSE(v.contains("body_text")) << r.out;
      EXPECT_FALSE(v.contains("body_error")) << r.out;
      continue;
    }
    EXPECT_TRUE(v.at("body").is_null()) << r.out;
    ASSERT_TRUE(v.contains("body_text")) << r.out;
    EXPECT_EQ(v.at("body_text").as_string(), c.body);
    ASSERT_TRUE(v.contains("body_error")) << r.out;
    if (c.error != "?")
      EXPECT_EQ(v.at("body_error").as_string(), c.error);
    else
      EXPECT_FALSE(v.at("body_error").as_string().empty());
  }
}

TEST(CliJson, RawKeepsABodyThatIsNotUtf8AsBase64) {
  // JSON output must be UTF-8: raw bytes would make the line unreadable to
  // every JSON tool, so such a body goes out byte for byte as base64.
  std::string body = "\xff\xfe{\"a\":1}\x80";
  scripted_server srv{
    {{step::read_request(),
      step::send(scripted_server::json_response(200, body))}}};
  auto r = run_cli({"request", "--raw", srv.base_url() + "/v1/x"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto v = boost::json::parse(r.out).as_object(); // valid UTF-8 JSON
  EXPECT_TRUE(v.at("body").is_null()) << r.out;
  EXPECT_FALSE(v.contains("body_text")) << r.out;
  ASSERT_TRUE(v.contains("body_base64")) << r.out;
  EXPECT_EQ(v.at("body_base64").as_string(), "//57ImEiOjF9gA==");
  EXPECT_TRUE(v.contains("body_error")) << r.out;
}

TEST(CliJson, AnErrorBodyWithAnOutOfRangeNumberKeepsItsDetail) {
  for (const std::string number :
       {"1e400", "1e-400", "123456789012345678901234567890"}) {
    scripted_server srv{
      {{step::read_request(),
        step::send(scripted_server::json_response(
          400, R"({"detail":"bad shape","n":)" + number + "}"))}}};
    auto r = run_cli({"request", srv.base_url() + "/v1/x"});
    expect_failure(r, "request_error", 4);
    EXPECT_EQ(detail_of(r), "bad shape") << number;
  }
}

// -- small items: errors that name what the user typed
// --------------------------

TEST(CliConfig, CaFileThatIsADirectoryIsCalledADirectory) {
  auto r = run_cli(
    {"request", "--ca-file", "/tmp",
     "https://127.0.0.1:" + std::to_string(closed_port()) + "/v1/items"});
  expect_failure(r, "config_error", 2);
  EXPECT_EQ(detail_of(r), "tls.ca_file: '/tmp' is a directory, not a file")
    << r.err;
}

TEST(CliConfig, DemoHubWithoutAHostNamesTheHubOption) {
  auto r = run_cli({"demo", "--hub", "http://", "--duration", "1"});
  expect_failure(r, "config_error", 2);
  EXPECT_EQ(detail_of(r).rfind("--hub: ", 0), 0u) << r.err;
}

TEST(CliDemo, OracleEndpointsWithoutHubIsAUsageErrorNamingTheOption) {
  auto r = run_cli({"demo", "--oracle-endpoints", "127.0.0.1:1", "--duration",
                    "1", "--metrics-port", "0"});
  expect_failure(r, "usage_error", 2);
  EXPECT_EQ(detail_of(r).rfind("--oracle-endpoints needs --hub", 0), 0u)
    << r.err;
}

TEST(CliDemo, AMetricsPortInUseSaysWhichOptionPicksAnother) {
  // A listener of our own holds the port for the whole run.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  auto port = std::to_string(ntohs(a.sin_port));
  auto r = run_cli(
    {"demo", "--duration", "1", "--feeds", "0", "--metrics-port", port});
  ::close(fd);
  expect_failure(r, "config_error", 2);
  auto d = detail_of(r);
  EXPECT_EQ(d.rfind("demo.metrics_port: cannot listen on 127.0.0.1:" + port, 0),
            0u)
    << r.err;
  EXPECT_NE(d.find("--metrics-port 0"), std::string::npos) << r.err;
}

TEST(CliDemo, ADeadHubIsExit7AfterTheReport) {
  auto r = run_cli(
    {"demo", "--hub", "http://127.0.0.1:" + std::to_string(closed_port()),
     "--duration", "1", "--feeds", "3", "--rate", "5", "--metrics-port", "0"});
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_NE(r.out.find("outbound demo report"), std::string::npos) << r.out;
  auto e = r.error(); // the last stderr line
  EXPECT_EQ(e.at("error").as_string(), "service_unavailable") << r.err;
  EXPECT_EQ(
    std::string{e.at("detail").as_string()}.rfind("nothing at --hub ", 0), 0u)
    << r.err;
  // Not a usage error's line: the demo tried (publishes, calls), and what
  // happened is that nothing was reached, not that nothing was sent.
  EXPECT_FALSE(e.at("reached").as_bool()) << r.err;
  EXPECT_FALSE(e.at("nothing_sent").as_bool()) << r.err;
  EXPECT_FALSE(e.at("nothing_billed").as_bool()) << r.err;
  EXPECT_TRUE(e.at("status").is_null()) << r.err;
  EXPECT_GE(e.at("attempts").to_number<int64_t>(), 1) << r.err;
}
