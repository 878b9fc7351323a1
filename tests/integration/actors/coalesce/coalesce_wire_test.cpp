// The coalescing driver's oracle requests on the wire: a real driver with its
// real per-endpoint connection pools against scripted loopback oracle nodes
// (scripted_server.hpp), real time. The requests come out of the service
// client's request builder (core/request_builder.hpp), so the raw
// bytes of a coalesced ts or seq RPC carry the builder's headers: Accept,
// Content-Type, `User-Agent: outbound/<version>`, the configured credential,
// the default headers and one `x-request-id` (32 hex digits) kept on every
// attempt of the RPC, a follower's 421 and the hinted leader included.

#include "tests/support/coalesce_fixture.hpp"
#include "tests/support/scripted_server.hpp"

#include "actors/coalesce/coalescing_driver.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <regex>
#include <string>

using namespace outbound;
using namespace outbound::testing;
using namespace std::chrono_literals;

namespace {

/// The value of header `name` in the raw request (first match, name
/// case-insensitive); empty when absent.
std::string raw_header(const std::string& raw, const std::string& name) {
  std::regex re{"\r\n" + name + ": ([^\r\n]*)\r\n", std::regex::icase};
  std::smatch m;
  if (!std::regex_search(raw, m, re))
    return {};
  return m[1];
}

bool hex32(const std::string& s) {
  return std::regex_match(s, std::regex{"[0-9a-f]{32}"});
}

class CoalesceWire : public ::testing::Test {
protected:
  ~CoalesceWire() override {
    for (auto& d : drivers_)
      caf::anon_send_exit(d, caf::exit_reason::user_shutdown);
  }

  coalescing_driver_actor driver(coalesce_config c) {
    c.retry.per_attempt = 10.0;
    c.retry.overall = 30.0;
    coalesce_options o;
    o.seed = 1;
    auto d = make_coalescing_driver(sys, std::move(c), std::move(o));
    drivers_.push_back(d);
    return d;
  }

  template <class Call>
  coalesce_reply call(const coalescing_driver_actor& d, Call c) {
    return outbound::testing::call_blocking(sys, d, std::move(c));
  }

  caf::actor_system_config sys_cfg;
  caf::actor_system sys{sys_cfg};
  std::vector<coalescing_driver_actor> drivers_;
};

std::string describe(const coalesce_reply& r) {
  if (!r.error)
    return "ok";
  return std::string{to_string(r.error->kind)} + ": " + r.error->detail;
}

} // namespace

TEST_F(CoalesceWire,
       ACoalescedTsCarriesIdCredentialUserAgentAndDefaultHeaderOnEveryAttempt) {
  scripted_server leader{
    {{step::read_request(), step::send(scripted_server::json_response(
                              200, R"({"physical_ms":1001,"logical_start":0,)"
                                   R"("count":1,"epoch":"4"})"))}}};
  scripted_server follower{
    {{step::read_request(),
      step::send(scripted_server::json_response(
        421, R"({"detail":"not the leader"})",
        "leader-hint: 127.0.0.1:" + std::to_string(leader.port())
          + "; epoch=4\r\n"))}}};
  coalesce_config c;
  // The first RPC goes in the configured order: the follower first.
  c.endpoints = {"127.0.0.1:" + std::to_string(follower.port())};
  c.token = "s3cret-token";
  c.default_headers = {{"X-Team", "billing"}};
  auto d = driver(c);
  auto r = call(d, ts_call{1, 0});
  ASSERT_FALSE(r.error) << describe(r);
  EXPECT_EQ(r.endpoint(), leader.base_url());
  ASSERT_TRUE(follower.wait_for_requests(1, 10s));
  ASSERT_TRUE(leader.wait_for_requests(1, 10s));
  auto f = follower.requests().at(0);
  auto l = leader.requests().at(0);
  for (auto* req : {&f, &l}) {
    SCOPED_TRACE(req->raw);
    EXPECT_EQ(req->method, "POST");
    EXPECT_EQ(req->target, "/v1/ts");
    EXPECT_EQ(req->body, R"({"count":1})");
    EXPECT_TRUE(hex32(raw_header(req->raw, "x-request-id")));
    EXPECT_EQ(raw_header(req->raw, "x-request-id"), r.request_id())
      << "one id per RPC, on every attempt";
    EXPECT_NE(req->raw.find("\r\nAuthorization: Bearer s3cret-token\r\n"),
              std::string::npos);
    EXPECT_EQ(raw_header(req->raw, "User-Agent").rfind("outbound/", 0), 0u);
    EXPECT_EQ(raw_header(req->raw, "X-Team"), "billing");
    EXPECT_EQ(raw_header(req->raw, "Accept"), "application/json");
    EXPECT_EQ(raw_header(req->raw, "Content-Type"), "application/json");
  }
  // The hinted leader's attempt is the RPC's second: a retry, counted as
  // the service client counts its retries.
  EXPECT_EQ(f.raw.find("x-retry-count"), std::string::npos) << f.raw;
  EXPECT_EQ(raw_header(l.raw, "x-retry-count"), "1") << l.raw;
}

TEST_F(CoalesceWire, ASeqCarriesTheConfiguredCredentialHeaderAndScheme) {
  scripted_server leader{
    {{step::read_request(), step::send(scripted_server::json_response(
                              200, R"({"start":0,"count":2,"epoch":"1"})"))}}};
  coalesce_config c;
  c.endpoints = {leader.base_url()};
  c.token = "k-123";
  c.token_header = "X-API-Key";
  c.token_scheme = "";
  c.default_headers = {{"X-Tenant", "eu"}};
  auto d = driver(c);
  auto r = call(d, seq_call{"orders", 2, 0});
  ASSERT_FALSE(r.error) << describe(r);
  EXPECT_EQ(r.seq.count, 2u);
  ASSERT_TRUE(leader.wait_for_requests(1, 10s));
  auto req = leader.requests().at(0);
  SCOPED_TRACE(req.raw);
  EXPECT_EQ(req.target, "/v1/seq");
  EXPECT_EQ(req.body, R"({"count":2,"key":"orders"})");
  EXPECT_NE(req.raw.find("\r\nX-API-Key: k-123\r\n"), std::string::npos);
  EXPECT_EQ(raw_header(req.raw, "Authorization"), "");
  EXPECT_EQ(raw_header(req.raw, "X-Tenant"), "eu");
  EXPECT_EQ(raw_header(req.raw, "x-request-id"), r.request_id());
  EXPECT_TRUE(hex32(r.request_id())) << r.request_id();
}
