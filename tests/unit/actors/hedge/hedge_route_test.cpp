#include "actors/hedge/route_table.hpp"
#include "config/config_error.hpp"

#include <gtest/gtest.h>

using namespace outbound;

namespace {

std::string register_field(route_table& t, const std::string& method,
                           const std::string& pattern,
                           const endpoint_config& ep = {},
                           std::optional<std::string> name = std::nullopt) {
  try {
    t.register_route(method, pattern, ep, std::move(name));
  } catch (const config_error& e) {
    return e.field();
  }
  return "<valid>";
}

} // namespace

TEST(RouteTable, PlaceholderAndStarMatchExactlyOneSegment) {
  route_table t;
  t.register_route("GET", "/users/{id}", {}, "by-id");
  t.register_route("GET", "/items/*", {}, "item");
  auto m = t.match("GET", "/users/123", "api.example.com");
  EXPECT_EQ(m.status, route_status::matched);
  EXPECT_EQ(m.key, "endpoint:by-id");
  ASSERT_TRUE(m.entry);
  EXPECT_EQ(m.entry->pattern, "/users/{id}");
  EXPECT_EQ(t.match("GET", "/items/123", "h").key, "endpoint:item");
  EXPECT_EQ(t.match("GET", "/users/123/orders", "h").status,
            route_status::unmatched);
  EXPECT_EQ(t.match("GET", "/items/123/orders", "h").status,
            route_status::unmatched);
  EXPECT_EQ(t.match("GET", "/users/", "h").status, route_status::unmatched);
  EXPECT_EQ(t.match("GET", "/users", "h").status, route_status::unmatched);
}

TEST(RouteTable, StarAndPlaceholderBothMatchUsers123) {
  for (auto pattern : {"/users/{id}", "/users/*"}) {
    route_table t;
    t.register_route("GET", pattern);
    EXPECT_EQ(t.match("GET", "/users/123", "h").key,
              std::string{"endpoint:GET "} + pattern);
    EXPECT_EQ(t.match("GET", "/users/123/orders", "h").key, "host:h");
  }
}

TEST(RouteTable, TrailingSlashIsSignificant) {
  route_table t;
  t.register_route("GET", "/foo", {}, "foo");
  EXPECT_EQ(t.match("GET", "/foo", "h").status, route_status::matched);
  EXPECT_EQ(t.match("GET", "/foo/", "h").status, route_status::unmatched);
  t.register_route("GET", "/foo/", {}, "foo-slash");
  EXPECT_EQ(t.match("GET", "/foo/", "h").key, "endpoint:foo-slash");
}

TEST(RouteTable, LiteralsMatchExactlyAndQueryIsIgnored) {
  route_table t;
  t.register_route("GET", "/api/v1/search");
  EXPECT_EQ(t.match("GET", "/api/v1/search?q=x&y=2", "h").key,
            "endpoint:GET /api/v1/search");
  EXPECT_EQ(t.match("GET", "/api/v1/search#frag", "h").status,
            route_status::matched);
  EXPECT_EQ(t.match("GET", "/api/v1/Search", "h").status,
            route_status::unmatched);
  EXPECT_EQ(t.match("GET", "/api/v1/searchx", "h").status,
            route_status::unmatched);
  EXPECT_EQ(t.match("GET", "/api/v2/search", "h").status,
            route_status::unmatched);
  // A regex metacharacter in a literal is a literal.
  t.register_route("GET", "/a.b", {}, "dot");
  EXPECT_EQ(t.match("GET", "/axb", "h").status, route_status::unmatched);
  EXPECT_EQ(t.match("GET", "/a.b", "h").key, "endpoint:dot");
}

TEST(RouteTable, FirstRegisteredMatchWins) {
  route_table t;
  t.register_route("GET", "/users/me", {}, "me");
  t.register_route("GET", "/users/{id}", {}, "by-id");
  t.register_route("*", "/users/{id}", {}, "any");
  EXPECT_EQ(t.match("GET", "/users/me", "h").key, "endpoint:me");
  EXPECT_EQ(t.match("GET", "/users/7", "h").key, "endpoint:by-id");
  EXPECT_EQ(t.match("DELETE", "/users/7", "h").key, "endpoint:any");
  EXPECT_EQ(t.match("get", "/users/7", "h").key, "endpoint:by-id");
  // Reversed registration order: the wildcard shadows /users/me.
  route_table r;
  r.register_route("GET", "/users/{id}", {}, "by-id");
  r.register_route("GET", "/users/me", {}, "me");
  EXPECT_EQ(r.match("GET", "/users/me", "h").key, "endpoint:by-id");
}

TEST(RouteTable, MethodMustMatchUnlessStar) {
  route_table t;
  t.register_route("GET", "/x");
  EXPECT_EQ(t.match("HEAD", "/x", "h").status, route_status::unmatched);
}

TEST(RouteTable, UnmatchedRequestsAreKeyedPerHost) {
  route_table t;
  EXPECT_EQ(t.match("GET", "/x", "api.example.com").key,
            "host:api.example.com");
  EXPECT_EQ(t.match("GET", "/x", "api.example.com", 8443).key,
            "host:api.example.com:8443");
  EXPECT_EQ(t.match("GET", "/x", "::1", 8080).key, "host:[::1]:8080");
  EXPECT_EQ(t.match("GET", "/x", "::1").key, "host:::1");
  EXPECT_FALSE(t.match("GET", "/x", "h").entry);
}

TEST(RouteTable, ExplicitNameBypassesMatchingAndUnknownIsAnError) {
  route_table t;
  t.register_route("GET", "/users/{id}", {}, "pinned");
  auto r = t.route(std::string{"pinned"}, "POST", "/other/path", "h");
  EXPECT_EQ(r.status, route_status::matched);
  EXPECT_EQ(r.key, "endpoint:pinned");
  auto u = t.route(std::string{"pinnde"}, "GET", "/users/1", "h");
  EXPECT_EQ(u.status, route_status::unknown_endpoint);
  EXPECT_EQ(u.key, "");
  EXPECT_FALSE(u.entry);
  EXPECT_STREQ(to_string(u.status), "unknown_endpoint");
  EXPECT_EQ(t.route(std::nullopt, "GET", "/users/1", "h").key,
            "endpoint:pinned");
  EXPECT_EQ(t.find("nope").status, route_status::unknown_endpoint);
}

TEST(RouteTable, DefaultNameIsMethodAndPattern) {
  route_table t;
  EXPECT_EQ(t.register_route("get", "/a/{b}"), "GET /a/{b}");
  EXPECT_EQ(t.find("GET /a/{b}").key, "endpoint:GET /a/{b}");
}

TEST(RouteTable, BadRegistrationsAreRejectedByField) {
  route_table t;
  t.register_route("GET", "/a", {}, "taken");
  EXPECT_EQ(register_field(t, "GET", "/b", {}, std::string{"taken"}),
            "route.name");
  EXPECT_EQ(register_field(t, "GET", "/a"), "<valid>");
  EXPECT_EQ(register_field(t, "GET", "/a"), "route.name"); // same default
  EXPECT_EQ(register_field(t, "GET", "/c", {}, std::string{}), "route.name");
  EXPECT_EQ(register_field(t, "GET", "c"), "route.pattern");
  EXPECT_EQ(register_field(t, "GET", ""), "route.pattern");
  EXPECT_EQ(register_field(t, "GET", "/c?x=1"), "route.pattern");
  EXPECT_EQ(register_field(t, "GET", "/c/{id}.json"), "route.pattern");
  EXPECT_EQ(register_field(t, "GET", "/c/{}"), "route.pattern");
  EXPECT_EQ(register_field(t, "", "/c"), "route.method");
  EXPECT_EQ(register_field(t, "G T", "/c"), "route.method");
  endpoint_config ep;
  ep.percentile = 1.5;
  EXPECT_EQ(register_field(t, "GET", "/d", ep), "endpoint.percentile");
  EXPECT_EQ(t.entries().size(), 2u);
}
