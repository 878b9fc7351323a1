#include "config/client_config.hpp"
#include "config/config_error.hpp"
#include "protocol/errors.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>

using namespace outbound;

namespace {

client_config valid() {
  client_config cfg;
  cfg.base_url = "http://127.0.0.1:8080";
  return cfg;
}

std::string field_of(const client_config& cfg) {
  try {
    cfg.validate();
  } catch (const config_error& e) {
    return e.field();
  }
  return "<valid>";
}

} // namespace

TEST(Config, DefaultsMatchTheReference) {
  client_config cfg;
  EXPECT_EQ(cfg.retry.max_attempts, 3);
  EXPECT_DOUBLE_EQ(cfg.retry.base_backoff, 0.1);
  EXPECT_DOUBLE_EQ(cfg.retry.max_backoff, 10.0);
  EXPECT_DOUBLE_EQ(cfg.timeout, 5.0);
  EXPECT_DOUBLE_EQ(cfg.deadline, 30.0);
  EXPECT_EQ(cfg.max_response_bytes, 33554432u);
  EXPECT_EQ(cfg.token_header, "Authorization");
  EXPECT_EQ(cfg.token_scheme, "Bearer");
  EXPECT_EQ(cfg.max_redials, 2);
  EXPECT_TRUE(cfg.retry.retry_statuses.empty());
}

TEST(Config, BadFieldsAreNamed) {
  EXPECT_EQ(field_of(valid()), "<valid>");
  auto c = valid();
  c.retry.base_backoff = -0.1;
  EXPECT_EQ(field_of(c), "retry.base_backoff");
  c = valid();
  c.retry.max_backoff = -1;
  EXPECT_EQ(field_of(c), "retry.max_backoff");
  c = valid();
  c.retry.max_attempts = 0;
  EXPECT_EQ(field_of(c), "retry.max_attempts");
  c = valid();
  c.retry.retry_statuses = {503, 42};
  EXPECT_EQ(field_of(c), "retry.retry_statuses");
  c = valid();
  c.timeout = 0;
  EXPECT_EQ(field_of(c), "timeout");
  c = valid();
  c.deadline = -1;
  EXPECT_EQ(field_of(c), "deadline");
  // Under half a nanosecond: it would round to an instant limit.
  c = valid();
  c.timeout = 1e-12;
  EXPECT_EQ(field_of(c), "timeout");
  c = valid();
  c.deadline = 1e-12;
  EXPECT_EQ(field_of(c), "deadline");
  c = valid();
  c.max_response_bytes = 0;
  EXPECT_EQ(field_of(c), "max_response_bytes");
  c = valid();
  c.base_url = "ftp://example.com";
  EXPECT_EQ(field_of(c), "base_url");
  c = valid();
  c.base_url = "";
  EXPECT_EQ(field_of(c), "base_url");
  c = valid();
  c.tls.ca_file = "/nonexistent/ca.pem";
  EXPECT_EQ(field_of(c), "tls.ca_file");
  c = valid();
  c.token_header = "Bad Header";
  EXPECT_EQ(field_of(c), "token_header");
}

TEST(Config, PoolLimitsDefaultToEnvoysAndMustBeAtLeastOne) {
  client_config cfg;
  EXPECT_EQ(cfg.max_connections_per_endpoint, 1024u);
  EXPECT_EQ(cfg.max_pending_requests, 1024u);
  auto c = valid();
  c.max_connections_per_endpoint = 0;
  EXPECT_EQ(field_of(c), "max_connections_per_endpoint");
  c = valid();
  c.max_pending_requests = 0;
  EXPECT_EQ(field_of(c), "max_pending_requests");
  c = valid();
  c.max_connections_per_endpoint = 1;
  c.max_pending_requests = 1;
  EXPECT_EQ(field_of(c), "<valid>");
}

TEST(Config, TheDispatchFloorIsAFewMillisecondsAndMustBePositive) {
  client_config cfg;
  EXPECT_EQ(cfg.min_dispatch_budget, 0.005);
  // 1e-10 s would be 0 ns in the pool.
  for (double bad : {0.0, -0.001, 61.0, std::nan(""), 1e-10}) {
    auto c = valid();
    c.min_dispatch_budget = bad;
    EXPECT_EQ(field_of(c), "min_dispatch_budget") << bad;
  }
  auto c = valid();
  c.min_dispatch_budget = 0.1;
  EXPECT_EQ(field_of(c), "<valid>");
  c.min_dispatch_budget = 1e-9;
  EXPECT_EQ(field_of(c), "<valid>");
}

TEST(Config, TheSurplusIdleTimeIsAFewSecondsAndZeroClosesAtOnce) {
  client_config cfg;
  EXPECT_EQ(cfg.surplus_idle_time, 2.0);
  for (double bad : {-0.001, 3600.5, std::nan(""), HUGE_VAL}) {
    auto c = valid();
    c.surplus_idle_time = bad;
    EXPECT_EQ(field_of(c), "surplus_idle_time") << bad;
  }
  for (double good : {0.0, 0.25, 3600.0}) {
    auto c = valid();
    c.surplus_idle_time = good;
    EXPECT_EQ(field_of(c), "<valid>") << good;
  }
}

TEST(Config, ZeroBackoffIsAllowed) {
  auto c = valid();
  c.retry.base_backoff = 0;
  c.retry.max_backoff = 0;
  EXPECT_EQ(field_of(c), "<valid>");
}

TEST(Config, TokenIsNeverEchoedInTheError) {
  auto c = valid();
  c.token = std::string{"SECRET\n"};
  try {
    c.validate();
    FAIL();
  } catch (const config_error& e) {
    EXPECT_EQ(e.field(), "token");
    EXPECT_EQ(std::string{e.what()}.find("SECRET"), std::string::npos);
  }
}

TEST(Config, CertWithoutKeyIsRejected) {
  auto path = testing::TempDir() + "/outbound_cert.pem";
  std::ofstream{path} << "x";
  auto c = valid();
  c.base_url = "https://localhost:8443";
  c.tls.client_cert_file = path;
  EXPECT_EQ(field_of(c), "tls.client_key_file");
  c.tls.client_cert_file.clear();
  c.tls.client_key_file = path;
  EXPECT_EQ(field_of(c), "tls.client_cert_file");
  c.tls.client_cert_file = "/nonexistent.pem";
  EXPECT_EQ(field_of(c), "tls.client_cert_file");
}

TEST(Config, TlsFilesNeedHttps) {
  auto path = testing::TempDir() + "/outbound_ca.pem";
  std::ofstream{path} << "x";
  auto c = valid();
  c.tls.ca_file = path;
  EXPECT_EQ(field_of(c), "base_url");
}

TEST(UrlParts, ParsesSchemeHostPortAndPath) {
  auto u = url_parts::parse("https://svc.internal:8960/api/v1/");
  EXPECT_EQ(u.scheme, "https");
  EXPECT_EQ(u.host, "svc.internal");
  EXPECT_EQ(u.port, 8960);
  EXPECT_EQ(u.path, "/api/v1");
  EXPECT_EQ(u.authority(), "svc.internal:8960");
  auto d = url_parts::parse("HTTP://127.0.0.1");
  EXPECT_EQ(d.scheme, "http");
  EXPECT_EQ(d.port, 80);
  EXPECT_EQ(d.path, "");
  auto v6 = url_parts::parse("http://[::1]:9000");
  EXPECT_EQ(v6.host, "::1");
  EXPECT_EQ(v6.authority(), "[::1]:9000");
  EXPECT_EQ(url_parts::parse("https://h").port, 443);
}

TEST(UrlParts, RejectsWhatIsNotAPlainHttpUrl) {
  for (auto bad : {"ws://h", "h:80", "http://", "http://u:p@h/", "http://h:0",
                   "http://h:99999", "http://h:8x", "http://h/?q=1",
                   "http://h/a b", "http://[::1"}) {
    EXPECT_THROW(url_parts::parse(bad), config_error) << bad;
  }
}

TEST(FromEnv, ReadsThePrefixedVariablesAndExplicitSettingsWin) {
  setenv("OBTEST_URL", "http://127.0.0.1:9999/base", 1);
  setenv("OBTEST_TOKEN", "tok-env", 1);
  unsetenv("OBTEST_CA_FILE");
  unsetenv("OBTEST_CLIENT_CERT");
  unsetenv("OBTEST_CLIENT_KEY");
  auto e = env_settings::read("OBTEST");
  EXPECT_EQ(e.base_url, "http://127.0.0.1:9999/base");
  EXPECT_EQ(e.token, "tok-env");
  EXPECT_EQ(e.ca_file, "");
  auto cfg = from_env("OBTEST");
  EXPECT_EQ(cfg.base_url, "http://127.0.0.1:9999/base");
  EXPECT_EQ(cfg.token, "tok-env");
  client_config explicit_cfg;
  explicit_cfg.token = "tok-explicit";
  auto cfg2 = from_env("OBTEST", explicit_cfg);
  EXPECT_EQ(cfg2.token, "tok-explicit");
  EXPECT_EQ(cfg2.base_url, "http://127.0.0.1:9999/base");
  unsetenv("OBTEST_URL");
  EXPECT_THROW(from_env("OBTEST"), config_error);
  unsetenv("OBTEST_TOKEN");
}

TEST(ClassifyStatus, MapsStatusesToTheTaxonomy) {
  EXPECT_EQ(classify_status(401).kind, error_kind::auth_error);
  EXPECT_EQ(classify_status(403).kind, error_kind::auth_error);
  EXPECT_EQ(classify_status(404).kind, error_kind::request_error);
  EXPECT_EQ(classify_status(429).kind, error_kind::request_error);
  EXPECT_EQ(classify_status(302).kind, error_kind::request_error);
  EXPECT_EQ(classify_status(302).detail, "unexpected redirect (not followed)");
  EXPECT_EQ(classify_status(500, "boom").kind, error_kind::server_error);
  EXPECT_EQ(classify_status(500, "boom").detail, "boom");
  EXPECT_EQ(classify_status(503).status, 503);
  EXPECT_EQ(exit_code(error_kind::auth_error), 3);
  EXPECT_EQ(exit_code(error_kind::request_error), 4);
  EXPECT_EQ(exit_code(error_kind::server_error), 5);
  EXPECT_EQ(exit_code(error_kind::response_error), 6);
  EXPECT_EQ(exit_code(error_kind::service_unavailable), 7);
  EXPECT_EQ(exit_code(error_kind::deadline_exceeded), 7);
  EXPECT_EQ(exit_code(error_kind::config_error), 2);
}

TEST(ExtractDetail, ReadsTheJsonDetailField) {
  EXPECT_EQ(extract_detail(R"({"detail":"boom"})"), "boom");
  EXPECT_EQ(extract_detail(R"({"detail":{"a":1}})"), R"({"a":1})");
  EXPECT_EQ(extract_detail(R"({"other":1})"), "");
  EXPECT_EQ(extract_detail("<html>oops</html>"), "");
  EXPECT_EQ(extract_detail("[1,2]"), "");
  EXPECT_EQ(extract_detail(""), "");
  // Numbers the parsed form cannot hold do not cost the detail.
  EXPECT_EQ(extract_detail(R"({"detail":"bad shape","n":1e400})"), "bad shape");
  EXPECT_EQ(extract_detail(R"({"n":[-1e-400],"detail":"tiny"})"), "tiny");
  EXPECT_EQ(
    extract_detail(R"({"id":123456789012345678901234567890,"detail":"id"})"),
    "id");
  EXPECT_EQ(extract_detail(R"({"detail":{"n":1e400,"m":1}})"),
            R"({"n":null,"m":1})");
}

TEST(Exceptions, ThrowErrorRaisesTheMatchingType) {
  call_error e = classify_status(503, "down");
  e.request_id = "rid";
  try {
    throw_error(e);
  } catch (const server_error& ex) {
    EXPECT_EQ(ex.status(), 503);
    EXPECT_EQ(ex.detail(), "down");
    EXPECT_EQ(ex.request_id(), "rid");
    EXPECT_NE(std::string{ex.what()}.find("rid"), std::string::npos);
  }
  call_error d;
  d.kind = error_kind::deadline_exceeded;
  EXPECT_THROW(throw_error(d), service_unavailable);
  EXPECT_THROW(throw_error(d), deadline_exceeded);
  d.kind = error_kind::auth_error;
  EXPECT_THROW(throw_error(d), service_error);
}

TEST(Errors, NothingBilledIsNothingSentOrOneAttemptRefusedOutright) {
  for (int st : {401, 403, 429})
    EXPECT_TRUE(refused_outright(st)) << st;
  for (int st : {0, 200, 400, 404, 409, 500, 503})
    EXPECT_FALSE(refused_outright(st)) << st;
  call_error e = classify_status(429);
  e.attempts = 1;
  settle_nothing_billed(e);
  EXPECT_TRUE(e.nothing_billed);
  e.attempts = 2; // an earlier attempt may have been processed
  settle_nothing_billed(e);
  EXPECT_FALSE(e.nothing_billed);
  call_error unsent;
  unsent.nothing_sent = true;
  unsent.attempts = 3;
  settle_nothing_billed(unsent);
  EXPECT_TRUE(unsent.nothing_billed);
  call_error boom = classify_status(500);
  boom.attempts = 1;
  settle_nothing_billed(boom);
  EXPECT_FALSE(boom.nothing_billed);
  // The exceptions carry it.
  e.attempts = 1;
  settle_nothing_billed(e);
  try {
    throw_error(e);
  } catch (const service_error& ex) {
    EXPECT_TRUE(ex.nothing_billed());
    EXPECT_FALSE(ex.nothing_sent());
  }
}

TEST(FromEnv, AnUnsetUrlVariableIsNamed) {
  unsetenv("OBTEST2_URL");
  try {
    from_env("OBTEST2");
    FAIL() << "no error";
  } catch (const config_error& e) {
    EXPECT_EQ(e.field(), "OBTEST2_URL");
    EXPECT_NE(std::string{e.what()}.find("OBTEST2_URL"), std::string::npos)
      << e.what();
  }
}

TEST(TlsConfig, ACaFileThatIsADirectoryIsCalledADirectory) {
  auto c = valid();
  c.base_url = "https://localhost:8443";
  c.tls.ca_file = "/tmp";
  try {
    c.validate();
    FAIL() << "no error";
  } catch (const config_error& e) {
    EXPECT_EQ(e.field(), "tls.ca_file");
    std::string what = e.what();
    EXPECT_NE(what.find("is a directory"), std::string::npos) << what;
    EXPECT_EQ(what.find("empty"), std::string::npos) << what;
  }
}

TEST(ClientConfig, JsonLimitsAreValidatedAndDerivedFromTheCap) {
  auto c = valid();
  EXPECT_EQ(c.json_max_depth, 64u);
  EXPECT_EQ(c.json_memory_factor, 16u);
  EXPECT_EQ(c.json_memory_max_bytes, 192u * 1024u * 1024u);
  auto l = c.response_json_limits();
  EXPECT_EQ(l.max_depth, 64u);
  // 16 x 32 MiB, held to the 192 MiB ceiling.
  EXPECT_EQ(l.max_bytes, 192u * 1024u * 1024u);
  c.max_response_bytes = 1024u * 1024u;
  EXPECT_EQ(c.response_json_limits().max_bytes, 16u * 1024u * 1024u);
  // The ceiling never lowers the bound below 4 x a raised cap.
  c.max_response_bytes = 256u * 1024u * 1024u;
  EXPECT_EQ(c.response_json_limits().max_bytes, 1024u * 1024u * 1024u);
  c.json_memory_factor = 2;
  EXPECT_EQ(c.response_json_limits().max_bytes, 512u * 1024u * 1024u);
  c.json_memory_factor = 16;
  c.max_response_bytes = 32u * 1024u * 1024u;
  c.json_memory_max_bytes = 1024u * 1024u - 1;
  EXPECT_EQ(field_of(c), "json_memory_max_bytes");
  c.json_memory_max_bytes = std::numeric_limits<std::size_t>::max();
  c.json_max_depth = 0;
  EXPECT_EQ(field_of(c), "json_max_depth");
  c.json_max_depth = 64;
  c.json_memory_factor = 0;
  EXPECT_EQ(field_of(c), "json_memory_factor");
  c.json_memory_factor = 4;
  c.max_response_bytes = std::numeric_limits<std::size_t>::max();
  EXPECT_EQ(c.response_json_limits().max_bytes,
            std::numeric_limits<std::size_t>::max()); // saturates
}
