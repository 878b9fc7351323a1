// Coalescing driver config: defaults, validation naming the field,
// endpoint normal form and the scheme rule.

#include "config/coalesce_config.hpp"
#include "config/config_error.hpp"

#include <gtest/gtest.h>

#include <functional>
#include <limits>

using namespace outbound;

namespace {

coalesce_config valid() {
  coalesce_config c;
  c.endpoints = {"127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"};
  return c;
}

std::string failing_field(const std::function<void(coalesce_config&)>& f) {
  auto c = valid();
  f(c);
  try {
    c.validate();
  } catch (const config_error& e) {
    return e.field();
  }
  return "(valid)";
}

} // namespace

TEST(CoalesceConfig, DefaultsAreTsoraclesDefaults) {
  coalesce_config c;
  EXPECT_DOUBLE_EQ(c.batch_flush_interval, 0.001);
  EXPECT_EQ(c.max_waiters, 4096u);
  EXPECT_EQ(c.max_ts_per_rpc, 262144u);
  EXPECT_EQ(c.max_seq_per_rpc, 65536u);
  EXPECT_EQ(c.max_seq_key_bytes, 128u);
  EXPECT_EQ(c.retry.max_attempts, 5);
  EXPECT_DOUBLE_EQ(c.retry.per_attempt, 2.0);
  EXPECT_DOUBLE_EQ(c.retry.overall, 10.0);
  EXPECT_DOUBLE_EQ(c.retry.base_backoff, 0.05);
  EXPECT_DOUBLE_EQ(c.retry.max_backoff, 5.0);
  EXPECT_DOUBLE_EQ(c.leader_ttl, 30.0);
  EXPECT_EQ(c.max_redirects_per_pass, 16);
  EXPECT_EQ(c.max_redirects_per_call, 64);
  EXPECT_EQ(c.max_hinted_endpoints, 8u);
  EXPECT_EQ(c.json_max_depth, 64u);
  EXPECT_FALSE(c.tls);
  EXPECT_EQ(failing_field([](coalesce_config&) {}), "(valid)");
}

TEST(CoalesceConfig, BadValuesNameTheirField) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(failing_field([](auto& c) { c.endpoints.clear(); }),
            "coalesce.endpoints");
  EXPECT_EQ(failing_field([](auto& c) { c.endpoints[1] = "nohost"; }),
            "coalesce.endpoints[1]");
  EXPECT_EQ(failing_field([](auto& c) { c.endpoints[2] = "127.0.0.1:70000"; }),
            "coalesce.endpoints[2]");
  EXPECT_EQ(
    failing_field([](auto& c) { c.endpoints[2] = "http://127.0.0.1:7001/"; }),
    "coalesce.endpoints[2]"); // duplicate of [0] after normalising
  EXPECT_EQ(failing_field([&](auto& c) { c.batch_flush_interval = nan; }),
            "coalesce.batch_flush_interval");
  EXPECT_EQ(failing_field([](auto& c) { c.batch_flush_interval = -1; }),
            "coalesce.batch_flush_interval");
  EXPECT_EQ(failing_field([](auto& c) { c.max_waiters = 0; }),
            "coalesce.max_waiters");
  EXPECT_EQ(failing_field([](auto& c) { c.max_rpcs_in_flight = 0; }),
            "coalesce.max_rpcs_in_flight");
  EXPECT_EQ(failing_field([](auto& c) { c.max_rpcs_in_flight = 65; }),
            "coalesce.max_rpcs_in_flight");
  EXPECT_EQ(failing_field([](auto& c) { c.max_ts_per_rpc = 0; }),
            "coalesce.max_ts_per_rpc");
  EXPECT_EQ(failing_field([](auto& c) { c.max_ts_per_rpc = 262145; }),
            "coalesce.max_ts_per_rpc");
  EXPECT_EQ(failing_field([](auto& c) { c.max_seq_per_rpc = 0; }),
            "coalesce.max_seq_per_rpc");
  EXPECT_EQ(failing_field([](auto& c) { c.max_seq_key_bytes = 0; }),
            "coalesce.max_seq_key_bytes");
  EXPECT_EQ(failing_field([](auto& c) { c.retry.max_attempts = 0; }),
            "coalesce.retry.max_attempts");
  EXPECT_EQ(failing_field([](auto& c) { c.retry.per_attempt = 0; }),
            "coalesce.retry.per_attempt");
  EXPECT_EQ(failing_field([&](auto& c) { c.retry.overall = nan; }),
            "coalesce.retry.overall");
  EXPECT_EQ(failing_field([](auto& c) { c.retry.base_backoff = -0.1; }),
            "coalesce.retry.base_backoff");
  EXPECT_EQ(failing_field([](auto& c) { c.retry.max_backoff = -1; }),
            "coalesce.retry.max_backoff");
  EXPECT_EQ(failing_field([](auto& c) { c.leader_ttl = 0; }),
            "coalesce.leader_ttl");
  EXPECT_EQ(failing_field([](auto& c) { c.max_redirects_per_pass = 0; }),
            "coalesce.max_redirects_per_pass");
  EXPECT_EQ(failing_field([](auto& c) { c.max_redirects_per_call = 0; }),
            "coalesce.max_redirects_per_call");
  EXPECT_EQ(failing_field([](auto& c) { c.json_max_depth = 0; }),
            "coalesce.json_max_depth");
  EXPECT_EQ(failing_field([](auto& c) { c.json_max_depth = 1025; }),
            "coalesce.json_max_depth");
}

TEST(CoalesceConfig, BareEndpointsTakeTheConfiguredScheme) {
  auto ep = parse_oracle_endpoint("Node-1.Example:7001", false,
                                  endpoint_origin::configured);
  ASSERT_TRUE(ep);
  EXPECT_EQ(ep->key(), "http://node-1.example:7001");
  ep = parse_oracle_endpoint("node-1:7001", true, endpoint_origin::configured);
  ASSERT_TRUE(ep);
  EXPECT_EQ(ep->key(), "https://node-1:7001");
  // Explicit beats configured for operator input.
  ep = parse_oracle_endpoint("http://node-1:7001", true,
                             endpoint_origin::configured);
  ASSERT_TRUE(ep);
  EXPECT_EQ(ep->key(), "http://node-1:7001");
  ep = parse_oracle_endpoint("HTTPS://[::1]:443/", false,
                             endpoint_origin::configured);
  ASSERT_TRUE(ep);
  EXPECT_EQ(ep->key(), "https://[::1]:443");
  EXPECT_EQ(ep->authority(), "[::1]:443");
}

TEST(CoalesceConfig, WireHttpUnderTlsIsADowngrade) {
  endpoint_parse_error why{};
  EXPECT_FALSE(
    parse_oracle_endpoint("http://evil:80", true, endpoint_origin::wire, &why));
  EXPECT_EQ(why, endpoint_parse_error::downgrade);
  auto ep = parse_oracle_endpoint("http://node:80", false,
                                  endpoint_origin::wire, &why);
  ASSERT_TRUE(ep);
  EXPECT_EQ(why, endpoint_parse_error::none);
  ep = parse_oracle_endpoint("node:80", true, endpoint_origin::wire, &why);
  ASSERT_TRUE(ep);
  EXPECT_EQ(ep->key(), "https://node:80");
  EXPECT_FALSE(parse_oracle_endpoint("http://bad host:1", true,
                                     endpoint_origin::wire, &why));
  EXPECT_EQ(why, endpoint_parse_error::malformed);
}

TEST(CoalesceConfig, MalformedEndpointsAreRefused) {
  for (const char* s : {"",
                        ":80",
                        "host",
                        "host:",
                        "host:0",
                        "host:65536",
                        "host:123456",
                        "host:-1",
                        "host:8a",
                        "ftp://host:1",
                        "http://",
                        "http://host:1/x",
                        "http://user@host:1",
                        "host:1:2",
                        "[::1]",
                        "[::1]80",
                        "[zz]:80",
                        "[]:80",
                        "ho st:80",
                        "host:80?x",
                        "::1:80"}) {
    EXPECT_FALSE(parse_oracle_endpoint(s, false, endpoint_origin::configured))
      << s;
  }
  EXPECT_FALSE(parse_oracle_endpoint(std::string(300, 'a') + ":1", false,
                                     endpoint_origin::configured));
  EXPECT_TRUE(
    parse_oracle_endpoint("host:65535", false, endpoint_origin::configured));
}
