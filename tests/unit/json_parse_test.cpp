// The library's one JSON parser (protocol/json_parse.hpp): depth limit,
// memory bound, exact doubles, out-of-range numbers, duplicate keys.

#include "protocol/json_parse.hpp"

#include "config/client_config.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>

using namespace outbound;

namespace {

std::string nested_arrays(std::size_t depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

} // namespace

TEST(JsonParse, AcceptsNestingUpToTheDefaultDepthOf64) {
  // Boost.JSON's own default (32) refused this one.
  auto r33 = parse_json(nested_arrays(33));
  EXPECT_TRUE(r33) << r33.detail;
  auto r64 = parse_json(nested_arrays(64));
  EXPECT_TRUE(r64) << r64.detail;
  auto r65 = parse_json(nested_arrays(65));
  EXPECT_EQ(r65.error, json_parse_error::too_deep);
  EXPECT_EQ(r65.detail, "nesting deeper than 64 levels");
}

TEST(JsonParse, DepthLimitIsConfigurable) {
  json_limits l;
  l.max_depth = 3;
  EXPECT_TRUE(parse_json(R"({"a":{"b":[]}})", l));
  EXPECT_EQ(parse_json(R"({"a":{"b":[{}]}})", l).error,
            json_parse_error::too_deep);
}

TEST(JsonParse, JsonDepthCountsLikeTheLimit) {
  EXPECT_EQ(json_depth(parse_json("1").value), 0u);
  EXPECT_EQ(json_depth(parse_json("{}").value), 1u);
  EXPECT_EQ(json_depth(parse_json(R"({"a":[1,{"b":[]}],"c":2})").value), 4u);
}

TEST(JsonParse, SyntaxErrorsAreSyntax) {
  for (const char* t : {"", "nope", "[1,2", "{} x", "{\"a\":}", "[1,]"}) {
    auto r = parse_json(t);
    EXPECT_EQ(r.error, json_parse_error::syntax) << t;
    EXPECT_FALSE(r.detail.empty()) << t;
  }
}

TEST(JsonParse, MemoryBoundStopsTinyArraysEarly) {
  // 3 bytes of text, two value slots (sizeof(boost::json::value)) each.
  std::string text = "[";
  for (int i = 0; i < 100000; ++i)
    text += "[],";
  text += "[]]";
  json_limits l;
  l.max_bytes = 4 * text.size();
  auto r = parse_json(text, l);
  EXPECT_EQ(r.error, json_parse_error::too_large);
  EXPECT_EQ(r.detail,
            "parsed form over " + std::to_string(l.max_bytes) + " bytes");
  l.max_bytes = 24 * text.size();
  auto ok = parse_json(text, l);
  ASSERT_TRUE(ok) << ok.detail;
  EXPECT_EQ(ok.value.as_array().size(), 100001u);
}

TEST(JsonParse, MemoryBoundCountsStringsAndKeys) {
  std::string big(10000, 'x');
  json_limits l;
  l.max_bytes = 5000;
  EXPECT_EQ(parse_json("\"" + big + "\"", l).error,
            json_parse_error::too_large);
  EXPECT_EQ(parse_json("{\"" + big + "\":1}", l).error,
            json_parse_error::too_large);
  l.max_bytes = 20000;
  EXPECT_TRUE(parse_json("{\"" + big + "\":1}", l));
}

TEST(JsonParse, DoublesRoundTripExactly) {
  // Boost.JSON 1.81's parse is one ulp off for this one.
  auto r = parse_json("1.7961554897535605E9");
  ASSERT_TRUE(r);
  EXPECT_EQ(boost::json::serialize(r.value), "1.7961554897535605E9");
  // 20000 random finite doubles: serialize -> parse_json -> same bits.
  std::mt19937_64 rng{7};
  int drift = 0;
  for (int i = 0; i < 20000; ++i) {
    uint64_t bits = rng();
    double d;
    std::memcpy(&d, &bits, sizeof d);
    if (!std::isfinite(d))
      continue;
    auto text = boost::json::serialize(boost::json::value(d));
    auto p = parse_json(text);
    ASSERT_TRUE(p) << text;
    if (p.value.as_double() != d)
      ++drift;
  }
  EXPECT_EQ(drift, 0);
}

TEST(JsonParse, IntegersStayIntegers) {
  EXPECT_EQ(parse_json("-5").value.as_int64(), -5);
  EXPECT_EQ(parse_json("18446744073709551615").value.as_uint64(),
            18446744073709551615ull);
  // Beyond uint64 but within binary64: a double, as boost::json::parse.
  // (`request --json` sends the user's text byte for byte all the same.)
  auto r = parse_json("123456789012345678901234567890");
  ASSERT_TRUE(r);
  EXPECT_TRUE(r.value.is_double());
}

TEST(JsonParse, OverflowingNumbersAreAnErrorNamingTheField) {
  auto r = parse_json(R"({"a":{"b":[1,2,-1e400]}})");
  EXPECT_EQ(r.error, json_parse_error::number_out_of_range);
  EXPECT_EQ(r.field, "a.b[2]");
  EXPECT_EQ(r.detail, "number out of range (IEEE 754 binary64) at a.b[2]");
  auto digits = parse_json("{\"n\":" + std::string(5000, '9') + "}");
  EXPECT_EQ(digits.error, json_parse_error::number_out_of_range);
  EXPECT_EQ(digits.field, "n");
  EXPECT_EQ(parse_json("1e400").field, "");
  // Just past DBL_MAX: Boost.JSON alone rounds it to DBL_MAX.
  EXPECT_EQ(parse_json("[1.7976931348623159e308]").error,
            json_parse_error::number_out_of_range);
  EXPECT_TRUE(parse_json("[18446744073709551615,-9223372036854775808]"));
}

TEST(JsonParse, UnderflowIsZeroNotAnError) {
  auto r = parse_json("[1e-400]");
  ASSERT_TRUE(r) << r.detail;
  EXPECT_EQ(r.value.as_array()[0].as_double(), 0.0);
  EXPECT_EQ(boost::json::serialize(r.value).find("Infinity"),
            std::string::npos);
}

TEST(JsonParse, DuplicateKeysAreAnErrorOnlyWhenAsked) {
  const char* text = R"({"a":1,"b":{"c":1,"c":2}})";
  auto lax = parse_json(text);
  ASSERT_TRUE(lax);
  EXPECT_EQ(lax.value.at("b").at("c").as_int64(), 2); // as boost::json
  json_limits strict;
  strict.reject_duplicate_keys = true;
  auto r = parse_json(text, strict);
  EXPECT_EQ(r.error, json_parse_error::duplicate_key);
  EXPECT_EQ(r.field, "b.c");
  EXPECT_TRUE(parse_json(R"({"a":{"c":1},"b":{"c":1}})", strict));
  // A key with an escape arrives in parts: its first part must not be
  // appended to the previous key.
  auto esc = parse_json(R"({"z":0,"a\u0041":1,"aA":2})", strict);
  EXPECT_EQ(esc.error, json_parse_error::duplicate_key);
  EXPECT_EQ(esc.field, "aA");
  EXPECT_TRUE(parse_json(R"({"zaA":0,"z":1,"a\u0041":2})", strict));
  auto named = parse_json(R"({"z":0,"a\u0041":1e400})");
  EXPECT_EQ(named.field, "aA");
}

TEST(JsonParse, ATwelveMiBPageOfTinyEventsParsesUnderTheDefaultBound) {
  // The client's default bound (client_config::response_json_limits, 32 MiB
  // cap): a replay page of tiny events costs about 11-12 bytes of parsed
  // form per byte of text. At the old 4 x cap (128 MiB) this page was a
  // too_large response_error.
  auto limits = client_config{}.response_json_limits();
  std::string page = R"({"events":[)";
  int64_t n = 0;
  while (page.size() < (12u << 20)) {
    if (n > 0)
      page += ',';
    ++n;
    page += R"({"id":)" + std::to_string(n) + R"(,"k":"a","v":1})";
  }
  page += R"(],"cursor":)" + std::to_string(n) + "}";
  auto r = parse_json(page, limits);
  ASSERT_TRUE(r) << r.detail;
  EXPECT_EQ(r.value.at("events").as_array().size(),
            static_cast<std::size_t>(n));
}

TEST(JsonParse, ThirtyMiBOfTinyArraysStillStopsAtTheDefaultBound) {
  // About 16-20 bytes of parsed form per byte: unbounded, this body takes
  // the process to about 500 MB; the default bound stops it at 192 MiB.
  auto limits = client_config{}.response_json_limits();
  EXPECT_EQ(limits.max_bytes, 192u << 20);
  std::string text;
  text.reserve((30u << 20) + 8);
  text += '[';
  while (text.size() < (30u << 20))
    text += "[[]],";
  text += "[]]";
  auto r = parse_json(text, limits);
  EXPECT_EQ(r.error, json_parse_error::too_large);
  EXPECT_EQ(r.detail, "parsed form over " + std::to_string(192u << 20)
                        + " bytes");
}
