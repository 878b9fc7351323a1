// Pure tests of the request shape (core/request_builder.hpp).

#include "core/request_builder.hpp"

#include "actors/feed/feed_watcher.hpp"
#include "config/config_error.hpp"
#include "core/text.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <set>

using namespace outbound;

namespace {

client_config cfg_with(std::string token = "tok123",
                       std::string base = "http://127.0.0.1:8080/api/") {
  client_config cfg;
  cfg.base_url = std::move(base);
  cfg.token = std::move(token);
  return cfg;
}

built_request build(const client_config& cfg, const call_request& call,
                    uint64_t seed = 1) {
  core::rng rng{seed};
  return build_request(cfg, cfg.parsed_url(), call, rng);
}

call_request get(std::string path) {
  call_request c;
  c.method = "GET";
  c.path = std::move(path);
  return c;
}

bool all_hex(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
  });
}

} // namespace

TEST(RequestBuilder, PercentEncodesEverythingOutsideTheUnreservedSet) {
  EXPECT_EQ(percent_encode("aZ09-._~"), "aZ09-._~");
  EXPECT_EQ(percent_encode("a b&c=d/e?f#g+h%"),
            "a%20b%26c%3Dd%2Fe%3Ff%23g%2Bh%25");
  EXPECT_EQ(percent_encode("\xC3\xA9"), "%C3%A9");
  EXPECT_EQ(percent_encode(std::string{"\0\n", 2}), "%00%0A");
  EXPECT_EQ(encode_query({{"limit", "50"}, {"q", "a b"}, {"k&", "=v"}}),
            "limit=50&q=a%20b&k%26=%3Dv");
}

TEST(RequestBuilder, TargetIsBasePathPlusCallPathPlusEncodedQuery) {
  auto cfg = cfg_with();
  auto c = get("/v1/things");
  c.params = {{"limit", "50"}, {"name", "x y"}};
  auto r = build(cfg, c);
  ASSERT_TRUE(r.ok()) << r.error->detail;
  EXPECT_EQ(r.request.target, "/api/v1/things?limit=50&name=x%20y");
  EXPECT_EQ(r.request.method, "GET");

  auto root = build(cfg_with("", "http://127.0.0.1:8080"), get("/v1/x"));
  EXPECT_EQ(root.request.target, "/v1/x");

  auto q = get("/v1/x?a=1");
  q.params = {{"b", "2"}};
  EXPECT_EQ(build(cfg, q).request.target, "/api/v1/x?a=1&b=2");

  EXPECT_EQ(build(cfg, get("/v1/a b/\xC3\xA9")).request.target,
            "/api/v1/a%20b/%C3%A9");
  EXPECT_EQ(build(cfg, get("/v1/a%2Fb")).request.target, "/api/v1/a%2Fb");
}

TEST(RequestBuilder, EveryPathByteIsKeptOrEscapedByRfc3986Pchar) {
  // RFC 3986 §3.3 pchar (unreserved, sub-delims, ':' and '@') plus '/' and
  // '?' (the path may carry its own query) and '%' (the caller's escape)
  // pass as they are; every other byte is %XX with upper-case hex.
  auto kept = [](unsigned char c) {
    return core::is_alnum(static_cast<char>(c))
           || std::string_view{"-._~!$&'()*+,;=:@/?%"}.find(
                static_cast<char>(c))
                != std::string_view::npos;
  };
  auto cfg = cfg_with("", "http://127.0.0.1:8080");
  for (int b = 0x20; b < 0x100; ++b) {
    if (b == 0x7f)
      continue; // DEL is a control character: the path is refused
    auto c = static_cast<unsigned char>(b);
    char hex[4];
    std::snprintf(hex, sizeof hex, "%%%02X", b);
    std::string one = kept(c) ? std::string(1, static_cast<char>(c)) : hex;
    // At the start of a run, inside one, at the end, and twice in a row.
    auto path = std::string{"/"} + static_cast<char>(c) + "ab"
                + static_cast<char>(c) + static_cast<char>(c);
    auto r = build(cfg, get(path));
    ASSERT_TRUE(r.ok()) << b;
    EXPECT_EQ(r.request.target, "/" + one + "ab" + one + one) << b;
  }
}

TEST(RequestBuilder, MethodIsUpperCased) {
  auto c = get("/x");
  c.method = "post";
  auto r = build(cfg_with(), c);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.request.method, "POST");
}

TEST(RequestBuilder, HeadersWithoutBodyHaveThisShape) {
  auto c = get("/x");
  c.request_id = "rid-1";
  auto r = build(cfg_with(), c);
  ASSERT_TRUE(r.ok());
  header_list expected{
    {"Accept", "application/json"},
    {"User-Agent", std::string{"outbound/"} + outbound_version},
    {"Authorization", "Bearer tok123"},
    {"x-request-id", "rid-1"}};
  EXPECT_EQ(r.request.headers, expected);
  EXPECT_TRUE(r.request.body.empty());
  EXPECT_EQ(r.request_id, "rid-1");
}

TEST(RequestBuilder, EveryRequestAndEveryUpgradeCarryTheSameIdentityHeaders) {
  auto cfg = cfg_with();
  cfg.default_headers = {{"x-tenant", "t1"}, {"user-agent", "custom/2"}};
  header_list identity;
  auto problem = append_identity_headers(cfg, identity);
  EXPECT_TRUE(problem.why.empty()) << problem.why;
  // A default header replaces the value and keeps the name's place.
  header_list expected{{"User-Agent", "custom/2"},
                       {"Authorization", "Bearer tok123"},
                       {"x-tenant", "t1"}};
  EXPECT_EQ(identity, expected);
  // The service client's requests (between Accept and x-request-id) ...
  auto c = get("/x");
  c.request_id = "rid-1";
  auto r = build(cfg, c);
  ASSERT_TRUE(r.ok());
  header_list middle(r.request.headers.begin() + 1,
                     r.request.headers.end() - 1);
  EXPECT_EQ(middle, identity);
  // ... and the feed watcher's WebSocket upgrades.
  EXPECT_EQ(feed_ws_endpoint::from(cfg).headers, identity);
}

TEST(RequestBuilder, AnUpgradeWithABadIdentityHeaderFailsNamingTheField) {
  auto cfg = cfg_with();
  cfg.default_headers = {{"Host", "elsewhere"}};
  try {
    (void)feed_ws_endpoint::from(cfg);
    ADD_FAILURE() << "no config_error";
  } catch (const config_error& e) {
    EXPECT_EQ(e.field(), "default_headers");
  }
  cfg = cfg_with("tok\r\nx-injected: 1");
  try {
    (void)feed_ws_endpoint::from(cfg);
    ADD_FAILURE() << "no config_error";
  } catch (const config_error& e) {
    EXPECT_EQ(e.field(), "token");
    EXPECT_EQ(std::string{e.what()}.find("injected"), std::string::npos);
  }
}

TEST(RequestBuilder, BodyAddsContentTypeJson) {
  call_request c;
  c.method = "POST";
  c.path = "/v1/orders";
  c.body = R"({"qty":1})";
  c.has_body = true;
  c.request_id = "r";
  auto r = build(cfg_with(), c);
  ASSERT_TRUE(r.ok());
  header_list expected{
    {"Accept", "application/json"},
    {"Content-Type", "application/json"},
    {"User-Agent", std::string{"outbound/"} + outbound_version},
    {"Authorization", "Bearer tok123"},
    {"x-request-id", "r"}};
  EXPECT_EQ(r.request.headers, expected);
  EXPECT_EQ(r.request.body, R"({"qty":1})");
}

TEST(RequestBuilder, EmptySchemeSendsTheRawToken) {
  auto cfg = cfg_with("raw-key");
  cfg.token_scheme = "";
  auto r = build(cfg, get("/x"));
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(find_header(r.request.headers, "Authorization"));
  EXPECT_EQ(*find_header(r.request.headers, "Authorization"), "raw-key");
}

TEST(RequestBuilder, CustomTokenHeaderCarriesTheCredential) {
  auto cfg = cfg_with("k1");
  cfg.token_header = "X-API-Key";
  cfg.token_scheme = "";
  auto r = build(cfg, get("/x"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(find_header(r.request.headers, "Authorization"), nullptr);
  ASSERT_TRUE(find_header(r.request.headers, "x-api-key"));
  EXPECT_EQ(*find_header(r.request.headers, "x-api-key"), "k1");
}

TEST(RequestBuilder, EmptyTokenSendsNoCredentialHeader) {
  auto r = build(cfg_with(""), get("/x"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(find_header(r.request.headers, "Authorization"), nullptr);
  EXPECT_EQ(r.request.headers.size(), 3u);
}

TEST(RequestBuilder, DefaultThenCallHeadersReplaceEarlierOnesByName) {
  auto cfg = cfg_with();
  cfg.default_headers = {{"X-Team", "a"}, {"accept", "application/x+json"}};
  auto c = get("/x");
  c.headers = {{"x-team", "b"}, {"X-Call", "1"}};
  c.request_id = "r";
  auto r = build(cfg, c);
  ASSERT_TRUE(r.ok());
  header_list expected{
    {"Accept", "application/x+json"},
    {"User-Agent", std::string{"outbound/"} + outbound_version},
    {"Authorization", "Bearer tok123"},
    {"X-Team", "b"},
    {"X-Call", "1"},
    {"x-request-id", "r"}};
  EXPECT_EQ(r.request.headers, expected);
}

TEST(RequestBuilder, ControlCharactersAreRejectedAndNothingIsBuilt) {
  auto cfg = cfg_with("sekrit-token");
  std::vector<call_request> bad;
  auto m = get("/x");
  m.method = "GET\r\nX-Evil: 1";
  bad.push_back(m);
  auto name = get("/x");
  name.headers = {{"X-A\r\nB", "v"}};
  bad.push_back(name);
  auto value = get("/x");
  value.headers = {{"X-A", "v\r\nX-Evil: sekrit-token"}};
  bad.push_back(value);
  auto path = get("/x\r\nHost: evil");
  bad.push_back(path);
  auto nul = get(std::string{"/x\0y", 4});
  bad.push_back(nul);
  // A NUL is no tchar (RFC 9110 §5.6.2): neither in a header name nor in
  // the method.
  auto nul_name = get("/x");
  nul_name.headers = {{std::string{"X-A\0B", 5}, "v"}};
  bad.push_back(nul_name);
  auto nul_method = get("/x");
  nul_method.method = std::string{"GET\0", 4};
  bad.push_back(nul_method);
  auto rid = get("/x");
  rid.request_id = "a\nb";
  bad.push_back(rid);
  for (auto& c : bad) {
    auto r = build(cfg, c);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error->kind, error_kind::config_error);
    EXPECT_TRUE(r.error->nothing_sent);
    EXPECT_EQ(r.error->detail.find("sekrit"), std::string::npos)
      << r.error->detail;
    EXPECT_EQ(r.error->detail.find("X-Evil"), std::string::npos)
      << r.error->detail;
  }
  auto tab = get("/x");
  tab.headers = {{"X-A", "a\tb"}};
  EXPECT_TRUE(build(cfg, tab).ok());
}

TEST(RequestBuilder, PathMustStartWithSlash) {
  auto r = build(cfg_with(), get("v1/x"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error->kind, error_kind::config_error);
  EXPECT_FALSE(r.request_id.empty());
  EXPECT_EQ(r.error->request_id, r.request_id);
  ASSERT_FALSE(build(cfg_with(), get("")).ok());
}

TEST(RequestBuilder, TransportOwnedHeadersAreRejected) {
  for (auto name : {"Host", "content-length", "Transfer-Encoding"}) {
    auto c = get("/x");
    c.headers = {{name, "1"}};
    EXPECT_FALSE(build(cfg_with(), c).ok()) << name;
  }
}

// The id is the generator's next two outputs in lower-case hex, the first
// one first, each 16 digits with leading zeros.
TEST(RequestBuilder, RequestIdIsTwoGeneratorOutputsInHex) {
  for (uint64_t seed : {0ull, 1ull, 42ull, 0xFFFFFFFFFFFFFFFFull}) {
    core::rng a{seed};
    core::rng b{seed};
    for (int i = 0; i < 100; ++i) {
      auto hi = static_cast<unsigned long long>(b());
      auto lo = static_cast<unsigned long long>(b());
      char expected[33];
      std::snprintf(expected, sizeof expected, "%016llx%016llx", hi, lo);
      EXPECT_EQ(generate_request_id(a), expected) << seed << " " << i;
    }
  }
}

TEST(RequestBuilder, RequestIdIsGeneratedAs32HexDigitsUnlessGiven) {
  auto a = build(cfg_with(), get("/x"), 1);
  auto b = build(cfg_with(), get("/x"), 2);
  auto a2 = build(cfg_with(), get("/x"), 1);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a.request_id.size(), 32u);
  EXPECT_TRUE(all_hex(a.request_id)) << a.request_id;
  EXPECT_NE(a.request_id, b.request_id);
  EXPECT_EQ(a.request_id, a2.request_id); // same seed, same id
  EXPECT_EQ(*find_header(a.request.headers, "x-request-id"), a.request_id);

  auto given = get("/x");
  given.request_id = "my-id";
  EXPECT_EQ(build(cfg_with(), given).request_id, "my-id");

  auto in_headers = get("/x");
  in_headers.headers = {{"X-Request-Id", "hdr-id"}};
  auto h = build(cfg_with(), in_headers);
  EXPECT_EQ(h.request_id, "hdr-id");
  int count = 0;
  for (auto& [k, v] : h.request.headers)
    if (k == "x-request-id" || k == "X-Request-Id")
      ++count;
  EXPECT_EQ(count, 1);
}

TEST(RequestBuilder, CredentialValueShapes) {
  auto cfg = cfg_with("t");
  EXPECT_EQ(credential_value(cfg), "Bearer t");
  cfg.token_scheme = "";
  EXPECT_EQ(credential_value(cfg), "t");
  cfg.token = "";
  EXPECT_EQ(credential_value(cfg), "");
}

// A retry or a hedge sends the first request once more without a copy of
// it: rebuild_request gives the same bytes and draws nothing from the rng
// (the jitter of the retries that follow must not change).
TEST(RequestBuilder, ARebuildIsTheSameRequestAndDrawsNoRandomness) {
  auto cfg = cfg_with();
  for (bool id_in_header : {false, true}) {
    SCOPED_TRACE(id_in_header ? "id as a header" : "generated id");
    auto call = get("/v1/items");
    call.params = {{"q", "a b"}, {"n", "1"}};
    call.headers = {{"x-tenant", "t1"}};
    if (id_in_header)
      call.headers.emplace_back("X-Request-Id", "caller-id-1");
    call.body = R"({"k":1})";
    call.has_body = true;
    core::rng rng{7};
    auto first = build_request(cfg, cfg.parsed_url(), call, rng);
    ASSERT_TRUE(first.ok());
    auto probe = rng; // the state after the first build
    auto again
      = rebuild_request(cfg, cfg.parsed_url(), call, first.request_id, rng);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again.request_id, first.request_id);
    EXPECT_EQ(again.request.method, first.request.method);
    EXPECT_EQ(again.request.target, first.request.target);
    EXPECT_EQ(again.request.headers, first.request.headers);
    EXPECT_EQ(again.request.body, first.request.body);
    EXPECT_EQ(rng(), probe()); // nothing drawn
    // And once more from the call as the rebuild left it.
    auto third
      = rebuild_request(cfg, cfg.parsed_url(), call, first.request_id, rng);
    EXPECT_EQ(third.request.headers, first.request.headers);
  }
}

// -- idempotency keys (draft-ietf-httpapi-idempotency-key-header) ----------

namespace {

call_request with_method(std::string method) {
  auto c = get("/orders");
  c.method = std::move(method);
  return c;
}

} // namespace

TEST(RequestBuilderIdempotencyKey, TheClientsAutoModeCoversPostAndPatchOnly) {
  auto cfg = cfg_with();
  EXPECT_FALSE(carries_idempotency_key(cfg, with_method("POST"))); // off
  cfg.idempotency_keys = idempotency_key_mode::auto_key;
  EXPECT_TRUE(carries_idempotency_key(cfg, with_method("POST")));
  EXPECT_TRUE(carries_idempotency_key(cfg, with_method("patch")));
  EXPECT_FALSE(carries_idempotency_key(cfg, with_method("PUT")));
  EXPECT_FALSE(carries_idempotency_key(cfg, with_method("GET")));
  // The call's own mode wins, either way.
  auto off = with_method("POST");
  off.idempotency_mode = idempotency_key_mode::off;
  EXPECT_FALSE(carries_idempotency_key(cfg, off));
  auto on = with_method("DELETE");
  on.idempotency_mode = idempotency_key_mode::auto_key;
  EXPECT_TRUE(carries_idempotency_key(cfg_with(), on));
  // A key of its own is always carried.
  auto given = with_method("POST");
  given.idempotency_key = "order-7";
  given.idempotency_mode = idempotency_key_mode::off;
  EXPECT_TRUE(carries_idempotency_key(cfg_with(), given));
}

TEST(RequestBuilderIdempotencyKey,
     AGeneratedKeyIsAssignedOnceAndSentOnEveryBuild) {
  auto cfg = cfg_with();
  cfg.idempotency_keys = idempotency_key_mode::auto_key;
  auto call = with_method("POST");
  call.body = R"({"qty":1})";
  call.has_body = true;
  assign_idempotency_key(cfg, call);
  ASSERT_EQ(call.idempotency_key.size(), 32u);
  EXPECT_TRUE(all_hex(call.idempotency_key));
  auto key = call.idempotency_key;
  assign_idempotency_key(cfg, call); // never replaced
  EXPECT_EQ(call.idempotency_key, key);
  auto first = build(cfg, call);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(*find_header(first.request.headers, "Idempotency-Key"), key);
  core::rng rng2{99};
  auto again
    = rebuild_request(cfg, cfg.parsed_url(), call, first.request_id, rng2);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again.request.headers, first.request.headers);
  EXPECT_EQ(again.request.body, first.request.body);
}

// Generated keys come from the system's entropy, not the seeded generator:
// two calls (two clients with one seed alike) never share a key.
TEST(RequestBuilderIdempotencyKey, GeneratedKeysDoNotRepeat) {
  auto cfg = cfg_with();
  std::set<std::string> keys;
  for (int i = 0; i < 1000; ++i) {
    auto call = with_method("POST");
    call.idempotency_mode = idempotency_key_mode::auto_key;
    assign_idempotency_key(cfg, call);
    EXPECT_EQ(call.idempotency_key.size(), 32u);
    keys.insert(call.idempotency_key);
  }
  EXPECT_EQ(keys.size(), 1000u);
}

// A key the caller put in a header is the call's key, kept whatever the
// client's mode, and sent once.
TEST(RequestBuilderIdempotencyKey, AKeyGivenAsAHeaderIsTheCallsKey) {
  auto cfg = cfg_with();
  cfg.idempotency_keys = idempotency_key_mode::auto_key;
  auto call = with_method("POST");
  call.headers = {{"idempotency-key", "order-123"}};
  EXPECT_TRUE(carries_idempotency_key(cfg_with(), call)); // even when off
  assign_idempotency_key(cfg, call);
  EXPECT_EQ(call.idempotency_key, "order-123");
  auto b = build(cfg, call);
  ASSERT_TRUE(b.ok());
  int n = 0;
  for (auto& [k, v] : b.request.headers)
    if (core::iequals(k, "Idempotency-Key")) {
      ++n;
      EXPECT_EQ(v, "order-123");
    }
  EXPECT_EQ(n, 1);
  EXPECT_TRUE(call_is_idempotent(cfg_with(), call, "POST"));
}

// A blank key (empty, or only spaces and tabs, which a server trims away)
// is refused: taken as the call's key it made a POST retryable while the
// server saw no key, and a retry through a lost answer applied it twice.
TEST(RequestBuilderIdempotencyKey, ABlankKeyIsRefusedNeverSentAsNoKey) {
  auto cfg = cfg_with();
  for (auto mode : {idempotency_key_mode::off, idempotency_key_mode::auto_key})
    for (std::string blank : {"", " ", "\t", " \t "}) {
      cfg.idempotency_keys = mode;
      auto call = with_method("POST");
      call.headers = {{"Idempotency-Key", blank}};
      assign_idempotency_key(cfg, call);
      EXPECT_TRUE(call.idempotency_key.empty()) << "'" << blank << "'";
      auto b = build(cfg, call);
      ASSERT_FALSE(b.ok()) << "'" << blank << "'";
      EXPECT_EQ(b.error->kind, error_kind::config_error);
      EXPECT_NE(b.error->detail.find("blank"), std::string::npos)
        << b.error->detail;
      if (blank.empty())
        continue; // an empty idempotency_key field means "none"
      auto given = with_method("POST");
      given.idempotency_key = blank;
      auto g = build(cfg, given);
      ASSERT_FALSE(g.ok()) << "'" << blank << "'";
      EXPECT_EQ(g.error->kind, error_kind::config_error);
    }
}

TEST(RequestBuilderIdempotencyKey,
     TheHeaderNameIsConfigurableAndTheKeyIsChecked) {
  auto cfg = cfg_with();
  cfg.idempotency_key_header = "X-Idempotency-Key";
  auto call = with_method("POST");
  call.idempotency_key = "abc";
  auto b = build(cfg, call);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*find_header(b.request.headers, "x-idempotency-key"), "abc");
  EXPECT_FALSE(find_header(b.request.headers, "Idempotency-Key"));
  call.idempotency_key = "a\r\nX-Evil: 1";
  auto bad = build(cfg, call);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error->kind, error_kind::config_error);
  EXPECT_EQ(bad.error->detail.find("X-Evil"), std::string::npos);
  for (std::string name : {"", "Bad Name", "a:b", "x-request-id", "Host",
                           "Idem(Key)", "Authorization", "x-retry-count",
                           "Content-Type", "accept", "User-Agent"}) {
    auto c = cfg_with();
    c.idempotency_key_header = name;
    try {
      c.validate();
      ADD_FAILURE() << "accepted '" << name << "'";
    } catch (const config_error& e) {
      EXPECT_EQ(e.field(), "idempotency_key_header");
    }
  }
}

TEST(RequestBuilderIdempotencyKey,
     AKeyMakesACallRetryableUnlessMarkedOtherwise) {
  auto cfg = cfg_with();
  auto post = with_method("POST");
  EXPECT_FALSE(call_is_idempotent(cfg, post, "POST"));
  post.idempotency_key = "k";
  EXPECT_TRUE(call_is_idempotent(cfg, post, "POST"));
  post.idempotent = false; // the caller's word wins
  EXPECT_FALSE(call_is_idempotent(cfg, post, "POST"));
  EXPECT_TRUE(call_is_idempotent(cfg, get("/x"), "GET"));
}

TEST(RequestBuilderIdempotencyKey, AMatchingRouteDecidesBeforeTheClientsMode) {
  auto cfg = cfg_with();
  cfg.idempotency_routes
    = {{"POST", "/v1/payments", idempotency_key_mode::auto_key},
       {"post", "/v1/orders/", idempotency_key_mode::auto_key},
       {"PUT", "/v1/files/", idempotency_key_mode::auto_key}};
  auto call = [](const char* method, const char* path) {
    auto c = with_method(method);
    c.path = path;
    return c;
  };
  // Off client-wide: only the listed routes carry a key.
  EXPECT_TRUE(carries_idempotency_key(cfg, call("POST", "/v1/payments")));
  EXPECT_TRUE(carries_idempotency_key(cfg, call("POST", "/v1/payments?x=1")));
  EXPECT_FALSE(carries_idempotency_key(cfg, call("POST", "/v1/payments/7")));
  EXPECT_TRUE(carries_idempotency_key(cfg, call("POST", "/v1/orders/7")));
  EXPECT_FALSE(carries_idempotency_key(cfg, call("POST", "/v1/orders")));
  EXPECT_FALSE(carries_idempotency_key(cfg, call("GET", "/v1/payments")));
  EXPECT_TRUE(carries_idempotency_key(cfg, call("put", "/v1/files/a")));
  EXPECT_FALSE(carries_idempotency_key(cfg, call("POST", "/v1/other")));
  // "/" is a prefix too: it covers every path.
  auto all = cfg;
  all.idempotency_routes = {{"POST", "/", idempotency_key_mode::auto_key}};
  EXPECT_TRUE(carries_idempotency_key(all, call("POST", "/")));
  EXPECT_TRUE(carries_idempotency_key(all, call("POST", "/v1/anything")));
  EXPECT_FALSE(carries_idempotency_key(all, call("PATCH", "/v1/anything")));
  // Auto client-wide: a route can exempt itself.
  cfg.idempotency_keys = idempotency_key_mode::auto_key;
  cfg.idempotency_routes = {{"POST", "/v1/search", idempotency_key_mode::off}};
  EXPECT_FALSE(carries_idempotency_key(cfg, call("POST", "/v1/search")));
  EXPECT_TRUE(carries_idempotency_key(cfg, call("POST", "/v1/other")));
  // The call's own mode or key still comes first.
  auto forced = call("POST", "/v1/search");
  forced.idempotency_mode = idempotency_key_mode::auto_key;
  EXPECT_TRUE(carries_idempotency_key(cfg, forced));
  auto given = call("POST", "/v1/search");
  given.idempotency_key = "k";
  EXPECT_TRUE(carries_idempotency_key(cfg, given));
}

TEST(RequestBuilderIdempotencyKey, ABadRouteIsNamedWithItsIndex) {
  struct bad {
    idempotency_route route;
    const char* field;
  };
  for (const auto& b :
       {bad{{"PO ST", "/x"}, "idempotency_routes[1].method"},
        bad{{"", "/x"}, "idempotency_routes[1].method"},
        bad{{"POST", "x"}, "idempotency_routes[1].path"},
        bad{{"POST", ""}, "idempotency_routes[1].path"},
        bad{{"POST", "/x?y=1"}, "idempotency_routes[1].path"},
        bad{{"POST", "/x y"}, "idempotency_routes[1].path"},
        bad{{"POST", "/x", static_cast<idempotency_key_mode>(9)},
            "idempotency_routes[1].mode"}}) {
    auto c = cfg_with();
    c.idempotency_routes = {{"POST", "/ok"}, b.route};
    try {
      c.validate();
      ADD_FAILURE() << "accepted " << b.route.method << " " << b.route.path;
    } catch (const config_error& e) {
      EXPECT_EQ(e.field(), b.field) << e.what();
    }
  }
}
