// Pure tests of the coalescing driver's oracle requests
// (actors/coalesce/oracle_request.hpp): they come out of the service
// client's request builder (core/request_builder.hpp), so a ts and a
// seq RPC carry the builder's headers in the builder's order, the
// credential and a request id, with the oracle's own target and body; and a
// coalesce_config whose credential or default headers the builder would
// refuse fails at construction naming the field.

#include "actors/coalesce/oracle_request.hpp"
#include "config/config_error.hpp"

#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

using namespace outbound;

namespace {

coalesce_config valid() {
  coalesce_config c;
  c.endpoints = {"127.0.0.1:7001", "https://10.0.0.2:7002"};
  return c;
}

oracle_endpoint endpoint(const std::string& s) {
  auto ep = parse_oracle_endpoint(s, false, endpoint_origin::configured);
  EXPECT_TRUE(ep) << s;
  return ep ? *ep : oracle_endpoint{};
}

rpc_plan ts_plan(uint32_t count) {
  rpc_plan p;
  p.kind = waiter_kind::ts;
  p.count = count;
  return p;
}

rpc_plan seq_plan(std::string key, uint32_t count) {
  rpc_plan p;
  p.kind = waiter_kind::seq;
  p.key = std::move(key);
  p.count = count;
  return p;
}

bool hex32(const std::string& s) {
  return s.size() == 32 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

std::string failing_field(const std::function<void(coalesce_config&)>& f) {
  auto c = valid();
  f(c);
  try {
    c.validate();
    check_oracle_requests(c);
  } catch (const config_error& e) {
    return e.field();
  }
  return "(valid)";
}

std::string failing_text(const std::function<void(coalesce_config&)>& f) {
  auto c = valid();
  f(c);
  try {
    c.validate();
    check_oracle_requests(c);
  } catch (const config_error& e) {
    return e.what();
  }
  return "(valid)";
}

} // namespace

TEST(OracleRequest,
     ATsRequestCarriesTheBuilderHeadersInOrderWithIdAndCredential) {
  auto c = valid();
  c.token = "s3cret";
  c.default_headers = {{"X-Team", "billing"}};
  core::rng rng{7};
  auto b = build_oracle_request(
    oracle_request_config(c), endpoint("127.0.0.1:7001"), ts_plan(3), {}, rng);
  ASSERT_TRUE(b.ok()) << b.error->detail;
  auto& req = b.request;
  EXPECT_EQ(req.method, "POST");
  EXPECT_EQ(req.target, "/v1/ts");
  EXPECT_EQ(req.body, R"({"count":3})");
  EXPECT_EQ(req.max_body_bytes, max_oracle_body);
  ASSERT_TRUE(hex32(b.request_id)) << b.request_id;
  header_list want{{"Accept", "application/json"},
                   {"Content-Type", "application/json"},
                   {"User-Agent", std::string{"outbound/"} + outbound_version},
                   {"Authorization", "Bearer s3cret"},
                   {"X-Team", "billing"},
                   {"x-request-id", b.request_id}};
  EXPECT_EQ(req.headers, want);
}

TEST(OracleRequest,
     ASeqRequestCarriesTheConfiguredCredentialHeaderAndTheGivenId) {
  auto c = valid();
  c.token = "k-123";
  c.token_header = "X-API-Key";
  c.token_scheme = "";
  c.default_headers = {{"X-Tenant", "eu"}, {"x-team", "a"}, {"X-Team", "b"}};
  core::rng rng{7};
  const std::string id = "0123456789abcdef0123456789abcdef";
  auto b = build_oracle_request(oracle_request_config(c),
                                endpoint("https://10.0.0.2:7002"),
                                seq_plan("orders/eu", 2), id, rng);
  ASSERT_TRUE(b.ok()) << b.error->detail;
  auto& req = b.request;
  EXPECT_EQ(req.method, "POST");
  EXPECT_EQ(req.target, "/v1/seq");
  // The oracle's body as before, key order included.
  EXPECT_EQ(req.body, R"({"count":2,"key":"orders/eu"})");
  EXPECT_EQ(b.request_id, id);
  header_list want{{"Accept", "application/json"},
                   {"Content-Type", "application/json"},
                   {"User-Agent", std::string{"outbound/"} + outbound_version},
                   {"X-API-Key", "k-123"},
                   {"X-Tenant", "eu"},
                   {"x-team", "b"}, // a later header replaces an earlier one
                   {"x-request-id", id}};
  EXPECT_EQ(req.headers, want);
}

TEST(OracleRequest, WithoutATokenNoCredentialHeaderIsSent) {
  auto c = valid();
  core::rng rng{1};
  auto b = build_oracle_request(
    oracle_request_config(c), endpoint("127.0.0.1:7001"), ts_plan(1), {}, rng);
  ASSERT_TRUE(b.ok()) << b.error->detail;
  for (auto& [k, v] : b.request.headers)
    EXPECT_NE(k, "Authorization");
  EXPECT_EQ(b.request.headers.size(), 4u); // Accept, Content-Type, UA, id
}

TEST(OracleRequest, EveryEndpointOfOneRpcGetsTheSameRequestAndId) {
  // Leader discovery moves an RPC between endpoints; the request is built
  // per endpoint and keeps the RPC's id.
  auto c = valid();
  c.token = "t";
  auto rc = oracle_request_config(c);
  core::rng rng{3};
  auto id = generate_request_id(rng);
  auto a
    = build_oracle_request(rc, endpoint("127.0.0.1:7001"), ts_plan(5), id, rng);
  auto b = build_oracle_request(rc, endpoint("http://10.9.9.9:80"), ts_plan(5),
                                id, rng);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a.request.headers, b.request.headers);
  EXPECT_EQ(a.request.target, b.request.target);
  EXPECT_EQ(a.request_id, id);
  EXPECT_EQ(b.request_id, id);
}

TEST(OracleRequest, ARetryCarriesXRetryCountAndAFirstAttemptNone) {
  auto rc = oracle_request_config(valid());
  rc.default_headers = {{"X-Retry-Count", "9"}}; // never sent as configured
  core::rng rng{3};
  auto first = build_oracle_request(rc, endpoint("127.0.0.1:7001"), ts_plan(1),
                                    "id", rng);
  auto third = build_oracle_request(rc, endpoint("127.0.0.1:7001"), ts_plan(1),
                                    "id", rng, 2);
  ASSERT_TRUE(first.ok() && third.ok());
  EXPECT_EQ(find_header(first.request.headers, "x-retry-count"), nullptr);
  auto* n = find_header(third.request.headers, "x-retry-count");
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(*n, "2");
  int count = 0;
  for (auto& [k, v] : third.request.headers)
    count += k.size() == 13 && (k == "x-retry-count" || k == "X-Retry-Count");
  EXPECT_EQ(count, 1) << "one x-retry-count header";
}

TEST(OracleRequest, ABadCredentialOrDefaultHeaderFailsNamingTheField) {
  EXPECT_EQ(failing_field([](auto&) {}), "(valid)");
  EXPECT_EQ(failing_field([](auto& c) { c.token_header = "Bad Header"; }),
            "coalesce.token_header");
  EXPECT_EQ(failing_field([](auto& c) { c.token_header = ""; }),
            "coalesce.token_header");
  // Not an RFC 9110 token: only the builder's check catches it.
  EXPECT_EQ(failing_field([](auto& c) {
              c.token = "t";
              c.token_header = "X(Auth)";
            }),
            "coalesce.token_header");
  EXPECT_EQ(failing_field([](auto& c) { c.token = "a\r\nb"; }),
            "coalesce.token");
  EXPECT_EQ(failing_field([](auto& c) { c.token_scheme = "Be\narer"; }),
            "coalesce.token_scheme");
  EXPECT_EQ(
    failing_field([](auto& c) {
      c.default_headers = {{"X-Ok", "1"}, {"X-Bad", "v\r\nInjected: 1"}};
    }),
    "coalesce.default_headers");
  EXPECT_EQ(failing_field([](auto& c) {
              c.default_headers = {{"", "v"}};
            }),
            "coalesce.default_headers");
  EXPECT_EQ(failing_field([](auto& c) {
              c.default_headers = {{"A:B", "v"}};
            }),
            "coalesce.default_headers");
  EXPECT_EQ(failing_field([](auto& c) {
              c.default_headers = {{"X Y", "v"}};
            }),
            "coalesce.default_headers");
  for (const char* owned :
       {"Host", "content-length", "Transfer-Encoding", "X-Request-Id"})
    EXPECT_EQ(failing_field([&](auto& c) {
                c.default_headers = {{owned, "v"}};
              }),
              "coalesce.default_headers")
      << owned;
  // Neither the credential nor a header value is ever echoed.
  auto t = failing_text([](auto& c) {
    c.token = "s3cret";
    c.default_headers = {{"X-Bad", "hunter2\n"}};
  });
  EXPECT_EQ(t.find("hunter2"), std::string::npos) << t;
  EXPECT_EQ(t.find("s3cret"), std::string::npos) << t;
  t = failing_text([](auto& c) { c.token = "s3cret\n"; });
  EXPECT_EQ(t.find("s3cret"), std::string::npos) << t;
}

TEST(OracleRequest, ClientConfigKeepsItsOwnFieldNames) {
  // The shared checks name client_config's fields without a prefix.
  client_config c;
  c.base_url = "http://127.0.0.1:1";
  c.default_headers = {{"X-Bad", "v\n"}};
  try {
    c.validate();
    FAIL() << "no config_error";
  } catch (const config_error& e) {
    EXPECT_EQ(e.field(), "default_headers");
  }
}

// The body is written without a JSON tree: it must stay what Boost.JSON
// writes for the same object (key order, number form, escapes), for keys
// that need escaping too.
TEST(OracleRequest, BodyEqualsBoostJsonOfTheSameObject) {
  const std::string keys[] = {"k",
                              "a\"b\\c",
                              "z\xc3\xbcrich",
                              "tab\there",
                              std::string("nul\0x", 5),
                              "\x01\x1f"};
  for (uint32_t count : {1u, 7u, 65536u, 262144u}) {
    rpc_plan ts;
    ts.kind = waiter_kind::ts;
    ts.count = count;
    boost::json::object want_ts;
    want_ts["count"] = count;
    EXPECT_EQ(oracle_call(ts, "id").body, boost::json::serialize(want_ts));
    for (auto& key : keys) {
      rpc_plan seq;
      seq.kind = waiter_kind::seq;
      seq.key = key;
      seq.count = count;
      boost::json::object want;
      want["count"] = count;
      want["key"] = key;
      auto body = oracle_call(seq, "id").body;
      EXPECT_EQ(body, boost::json::serialize(want));
      EXPECT_EQ(boost::json::parse(body).at("key").as_string(), key);
    }
  }
}
