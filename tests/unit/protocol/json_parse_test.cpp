// The library's one JSON parser (protocol/json_parse.hpp): depth limit,
// memory bound, exact doubles, out-of-range numbers, inexact integers,
// duplicate keys.

#include "protocol/json_parse.hpp"

#include "config/client_config.hpp"

#include <boost/json/memory_resource.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/storage_ptr.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <new>
#include <random>
#include <set>
#include <string>
#include <vector>

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

// Counts what is really allocated through it: the bytes held now and the
// most ever held at once.
class counting_resource : public boost::json::memory_resource {
public:
  std::size_t current = 0;
  std::size_t peak = 0;
  /// Every byte ever allocated: what an arena that frees nothing holds.
  std::size_t total = 0;

private:
  void* do_allocate(std::size_t n, std::size_t align) override {
    current += n;
    total += n;
    peak = std::max(peak, current);
    // malloc's alignment (alignof(max_align_t)) covers what Boost.JSON
    // asks; the deallocation may name another alignment than the
    // allocation did, which aligned operator delete must not see.
    (void)align;
    void* p = std::malloc(n == 0 ? 1 : n);
    if (!p)
      throw std::bad_alloc{};
    return p;
  }
  void do_deallocate(void* p, std::size_t n, std::size_t align) override {
    current -= n;
    (void)align;
    std::free(p);
  }
  bool do_is_equal(const memory_resource& o) const noexcept override {
    return this == &o;
  }
};

TEST(JsonParse, MemoryReallyAllocatedStaysWithinTwiceTheBound) {
  // The bound is only as good as the parser's own accounting of it: here
  // every allocation of the value and of the value stack is counted, for
  // shapes that cost the most per byte of text, both for the largest
  // document that still parses and for ones that stop at the bound.
  // Measured with Boost 1.81: at most 1.25 x the bound (tiny arrays,
  // zeros, empty objects: the value stack's doubling plus the array).
  constexpr std::size_t bound = 1u << 20;
  auto repeat = [](std::string open, std::string item, std::string close) {
    return std::function<std::string(std::size_t)>{[=](std::size_t n) {
      std::string t = open;
      for (std::size_t i = 0; i < n; ++i)
        t += (i == 0 ? "" : ",") + item;
      return t + close;
    }};
  };
  struct shape {
    const char* name;
    std::function<std::string(std::size_t)> text;
  };
  std::vector<shape> shapes{
    {"tiny arrays", repeat("[", "[]", "]")},
    {"nested tiny arrays", repeat("[", "[[[]]]", "]")},
    {"zeros", repeat("[", "0", "]")},
    {"empty objects", repeat("[", "{}", "]")},
    {"objects with an empty key", repeat("[", R"({"":0})", "]")},
    {"long strings", repeat("[", "\"" + std::string(1000, 's') + "\"", "]")},
    {"long strings with escapes",
     repeat("[",
            "\"" + std::string(500, 's') + "\\n" + std::string(500, 't') + "\"",
            "]")},
    {"many keys",
     [](std::size_t n) {
       std::string t = "{";
       for (std::size_t i = 0; i < n; ++i)
         t += (i == 0 ? "\"k" : ",\"k") + std::to_string(i) + "\":0";
       return t + "}";
     }},
  };
  json_limits l;
  l.max_bytes = bound;
  for (const auto& sh : shapes) {
    // The largest n that parses under the bound (n = 1 does).
    std::size_t lo = 1, hi = 1;
    while (parse_json(sh.text(hi), l))
      hi *= 2;
    while (hi - lo > 1) {
      auto mid = lo + (hi - lo) / 2;
      (parse_json(sh.text(mid), l) ? lo : hi) = mid;
    }
    for (std::size_t n : {lo, hi, 4 * hi}) {
      counting_resource counted;
      auto* counter = &counted;
      {
        auto r = parse_json(sh.text(n), l, boost::json::storage_ptr{&counted});
        EXPECT_EQ(r.error, n == lo ? json_parse_error::none
                                   : json_parse_error::too_large)
          << sh.name << " n=" << n;
        if (n == lo) {
          // The whole document is really there.
          EXPECT_GT(counter->current, 0u) << sh.name;
        }
      }
      EXPECT_LE(counter->peak, 2 * bound) << sh.name << " n=" << n;
      EXPECT_EQ(counter->current, 0u) << sh.name;
    }
  }
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
  EXPECT_EQ(parse_json("-9223372036854775808").value.as_int64(),
            std::numeric_limits<std::int64_t>::min());
  // Beyond uint64 and not a binary64 value: the double would re-serialise
  // as 1.2345678901234568E29, so it is refused unless asked for.
  auto r = parse_json("123456789012345678901234567890");
  EXPECT_EQ(r.error, json_parse_error::inexact_integer);
  EXPECT_STREQ(to_string(r.error), "inexact_integer");
  EXPECT_EQ(r.detail, "integer of 30 digits not exact in IEEE 754 binary64");
  json_limits lossy;
  lossy.allow_inexact_integers = true;
  auto d = parse_json("123456789012345678901234567890", lossy);
  ASSERT_TRUE(d) << d.detail;
  EXPECT_EQ(d.value.as_double(), 123456789012345678901234567890.0);
}

TEST(JsonParse, AnInexactIntegerIsAnErrorNamingTheField) {
  auto r = parse_json(R"({"meta":{"ids":[1,123456789012345678901234567890]}})");
  EXPECT_EQ(r.error, json_parse_error::inexact_integer);
  EXPECT_EQ(r.field, "meta.ids[1]");
  EXPECT_EQ(r.detail, "integer of 30 digits not exact in IEEE 754 "
                      "binary64 at meta.ids[1]");
  // Just past each 64-bit range: 2^64 + 1 and -(2^63 + 1).
  EXPECT_EQ(parse_json("[18446744073709551617]").error,
            json_parse_error::inexact_integer);
  // 1e22 is a binary64 value, 1e23 is not.
  EXPECT_TRUE(parse_json("10000000000000000000000"));
  EXPECT_EQ(parse_json("100000000000000000000000").error,
            json_parse_error::inexact_integer);
  auto neg = parse_json(R"({"n":-9223372036854775809})");
  EXPECT_EQ(neg.error, json_parse_error::inexact_integer);
  EXPECT_EQ(neg.detail, "integer of 19 digits not exact in IEEE 754 "
                        "binary64 at n");
}

TEST(JsonParse, IntegersThatBinary64HoldsExactlyBecomeDoubles) {
  for (const char* t : {"100000000000000000000", "18446744073709551616",
                        "-9223372036854775808000", "1000000000000000000000"}) {
    auto r = parse_json(t);
    ASSERT_TRUE(r) << t << ": " << r.detail;
    EXPECT_TRUE(r.value.is_double()) << t;
    char back[400];
    std::snprintf(back, sizeof back, "%.0f", r.value.as_double());
    EXPECT_EQ(std::string{back}, t); // glibc prints doubles exactly
  }
  // Random doubles from 2^64 (below, uint64 holds them) up to DBL_MAX,
  // printed exactly (glibc's %.0f is exact), parse back to the same bits;
  // the next integer up is no binary64 value (the spacing there is at
  // least 2^12) and is refused.
  std::mt19937_64 rng{11};
  for (int i = 0; i < 2000; ++i) {
    double d = std::ldexp(1.0 + static_cast<double>(rng() >> 12) * 0x1p-52,
                          64 + static_cast<int>(rng() % 960));
    char buf[400];
    std::snprintf(buf, sizeof buf, "%.0f", d);
    std::string text = buf;
    auto r = parse_json(text);
    ASSERT_TRUE(r) << text << ": " << r.detail;
    EXPECT_EQ(r.value.as_double(), d) << text;
    // d is even, so its last digit is even: +1 cannot carry.
    std::string plus_one = text;
    plus_one.back() = static_cast<char>(plus_one.back() + 1);
    EXPECT_EQ(parse_json(plus_one).error, json_parse_error::inexact_integer)
      << plus_one;
    EXPECT_EQ(parse_json("-" + text).value.as_double(), -d) << text;
  }
  char max[400];
  std::snprintf(max, sizeof max, "%.0f", std::numeric_limits<double>::max());
  EXPECT_TRUE(parse_json(max)) << max;
}

TEST(JsonParse, FractionsAndExponentsMayRoundAsBefore) {
  // They promise a binary64 value, not digits: no inexact_integer.
  EXPECT_TRUE(parse_json("123456789012345678901234567890.0"));
  EXPECT_TRUE(parse_json("1.23456789012345678901234567890e29"));
  EXPECT_TRUE(parse_json("123456789012345678901234567890e0"));
  EXPECT_TRUE(parse_json("0.1"));
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

TEST(JsonParse, UnderflowToZeroIsAnErrorNamingTheField) {
  // A nonzero literal that rounds to zero would print as 0E0.
  auto r = parse_json(R"({"a":{"b":[0,1e-400]}})");
  EXPECT_EQ(r.error, json_parse_error::number_out_of_range);
  EXPECT_EQ(r.field, "a.b[1]");
  EXPECT_EQ(r.detail, "number out of range (underflows IEEE 754 binary64 "
                      "to zero) at a.b[1]");
  // Below half the smallest subnormal, with or without a sign, and a long
  // mantissa whose exponent takes it out of range.
  for (const char* t :
       {"1E-400", "-1e-400", "2e-324", "2.4703282292062327e-324",
        "0.0000000000000000000000001e-300", "100e-500"}) {
    auto u = parse_json(std::string{"{\"x\":"} + t + "}");
    EXPECT_EQ(u.error, json_parse_error::number_out_of_range) << t;
    EXPECT_EQ(u.field, "x") << t;
  }
}

TEST(JsonParse, LiteralZerosAndSubnormalsParseCorrectlyRounded) {
  for (const char* t : {"0e-400", "0.000e5", "-0.0", "0E+999", "-0e-9999"}) {
    auto r = parse_json(std::string{"["} + t + "]");
    ASSERT_TRUE(r) << t << ": " << r.detail;
    EXPECT_EQ(r.value.as_array()[0].as_double(), 0.0) << t;
    EXPECT_EQ(std::signbit(r.value.as_array()[0].as_double()), t[0] == '-')
      << t;
  }
  // Expected values from Python 3's float() (correctly rounded), as hex.
  struct sub {
    const char* text;
    double expected;
  };
  for (auto s : std::initializer_list<sub>{
         {"5e-324", 0x0.0000000000001p-1022},
         {"4.9406564584124654e-324", 0x0.0000000000001p-1022},
         {"3e-324", 0x0.0000000000001p-1022},
         {"2.4703282292062328e-324", 0x0.0000000000001p-1022},
         {"1.5e-323", 0x0.0000000000003p-1022},
         {"1e-320", 0x0.00000000007e8p-1022},
         {"1e-310", 0x0.012688b70e62bp-1022},
         {"-7.5e-315", -0x0.000005a7b1984p-1022},
         {"2.225073858507201e-308", 0x0.fffffffffffffp-1022},
         {"2.2250738585072014e-308", 0x1.0000000000000p-1022}}) {
    auto r = parse_json(std::string{"["} + s.text + "]");
    ASSERT_TRUE(r) << s.text << ": " << r.detail;
    EXPECT_EQ(r.value.as_array()[0].as_double(), s.expected) << s.text;
    // And it prints as a number that parses back to the same value.
    auto back = parse_json(boost::json::serialize(r.value));
    ASSERT_TRUE(back) << s.text;
    EXPECT_EQ(back.value.as_array()[0].as_double(), s.expected) << s.text;
  }
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

namespace {

// Writes a random document whose objects draw keys from a three-letter
// alphabet (so repeats are frequent, at any depth, holding scalars, arrays
// or objects) and records the path of the first repeated key in document
// order, "" when there is none, as parse_json names it.
class dup_doc {
public:
  explicit dup_doc(uint64_t seed) : rng_(seed) {
  }

  std::string text;
  std::string first_repeat;
  bool repeated = false;

  void value(int depth) {
    int kind = depth >= 4 ? pick(3) : pick(6);
    if (kind == 0)
      text += std::to_string(pick(100));
    else if (kind == 1)
      text += "true";
    else if (kind == 2)
      text += "\"s\"";
    else if (kind == 3)
      array(depth);
    else
      object(depth);
  }

private:
  void array(int depth) {
    text += '[';
    int n = pick(4);
    for (int i = 0; i < n; ++i) {
      if (i > 0)
        text += ',';
      path_.push_back("[" + std::to_string(i) + "]");
      value(depth + 1);
      path_.pop_back();
    }
    text += ']';
  }

  void object(int depth) {
    text += '{';
    int n = pick(4);
    std::set<std::string> seen;
    for (int i = 0; i < n; ++i) {
      if (i > 0)
        text += ',';
      std::string key(1, static_cast<char>('a' + pick(3)));
      text += "\"" + key + "\":";
      path_.push_back(key);
      if (!seen.insert(key).second && !repeated) {
        repeated = true;
        first_repeat = joined();
      }
      value(depth + 1);
      path_.pop_back();
    }
    text += '}';
  }

  std::string joined() const {
    std::string out;
    for (const auto& p : path_) {
      if (p.front() != '[' && !out.empty())
        out += '.';
      out += p;
    }
    return out;
  }

  int pick(int n) {
    return static_cast<int>(rng_() % static_cast<uint64_t>(n));
  }

  std::mt19937_64 rng_;
  std::vector<std::string> path_;
};

} // namespace

// Over random documents, a repeated key is refused exactly when one
// repeats, named at the first repeat in document order; without the check
// the same documents parse.
TEST(JsonParse, EveryRepeatedKeyIsFoundAndNamedAtItsFirstOccurrence) {
  json_limits strict;
  strict.reject_duplicate_keys = true;
  int refused = 0;
  for (uint64_t seed = 1; seed <= 4000; ++seed) {
    dup_doc d{seed};
    d.value(0);
    auto r = parse_json(d.text, strict);
    if (d.repeated) {
      ++refused;
      EXPECT_EQ(r.error, json_parse_error::duplicate_key) << d.text;
      EXPECT_EQ(r.field, d.first_repeat) << d.text;
      EXPECT_EQ(r.detail, "duplicate key " + d.first_repeat) << d.text;
    } else {
      EXPECT_TRUE(r) << d.text << ": " << r.detail;
    }
    EXPECT_TRUE(parse_json(d.text)) << d.text;
  }
  // Both outcomes are well represented.
  EXPECT_GT(refused, 500);
  EXPECT_LT(refused, 3500);
}

TEST(JsonParse, TheFirstErrorInTheDocumentIsTheOneReported) {
  json_limits strict;
  strict.reject_duplicate_keys = true;
  // A repeated key before a syntax error is the repeated key ...
  auto dup_first = parse_json(R"({"a":{},"a":{},)", strict);
  EXPECT_EQ(dup_first.error, json_parse_error::duplicate_key);
  EXPECT_EQ(dup_first.field, "a");
  // ... and a syntax error before a repeated key is the syntax error.
  EXPECT_EQ(parse_json(R"([{"a":1,]{"a":1,"a":2}])", strict).error,
            json_parse_error::syntax);
  // A number out of range keeps its path, also inside an array of
  // objects, and comes before a later repeat.
  auto far = parse_json(R"({"x":[{"a":1},{"b":1e999}],"x":1})", strict);
  EXPECT_EQ(far.error, json_parse_error::number_out_of_range);
  EXPECT_EQ(far.field, "x[1].b");
}

// A document that fails after most of it was built (a number out of
// range at its end; a repeated top-level key at its end, when refused)
// costs an arena that frees nothing about what the same document costs
// when it parses: the second pass that names the error builds no value.
TEST(JsonParse, AFailingDocumentCostsAnArenaNoMoreThanOnePass) {
  std::string body = "[";
  for (int i = 0; i < 20000; ++i)
    body += (i == 0 ? "" : ",") + std::string{R"({"k":[1,2,3]})"};
  body += "]";
  json_limits l;
  l.reject_duplicate_keys = true;
  auto total_of = [&](const std::string& text, json_parse_error expected) {
    counting_resource counted;
    {
      auto r = parse_json(text, l, boost::json::storage_ptr{&counted});
      EXPECT_EQ(r.error, expected) << r.detail;
    }
    return counted.total;
  };
  auto fine
    = total_of(R"({"a":)" + body + R"(,"b":1})", json_parse_error::none);
  auto late_number = total_of(R"({"a":)" + body + R"(,"b":1e999})",
                              json_parse_error::number_out_of_range);
  auto late_repeat = total_of(R"({"a":)" + body + R"(,"a":1})",
                              json_parse_error::duplicate_key);
  EXPECT_GT(fine, 1000000u);
  EXPECT_LE(late_number, fine + fine / 10);
  EXPECT_LE(late_repeat, fine + fine / 10);
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
  EXPECT_EQ(r.detail,
            "parsed form over " + std::to_string(192u << 20) + " bytes");
}

TEST(JsonParse, TopLevelMembersCountARepeatedKeyEachTime) {
  // What a reader that must not guess between two values of one key
  // compares with the object's size (the oracle answer readers do).
  auto r = parse_json(R"({"a":1,"b":{"c":1,"c":2},"a":3})");
  ASSERT_TRUE(r) << r.detail;
  EXPECT_EQ(r.top_level_members, 3u) << "the nested repeat is not counted";
  EXPECT_EQ(r.value.as_object().size(), 2u);
  EXPECT_EQ(r.value.at("a"), 3) << "the last one kept";
  EXPECT_EQ(parse_json(R"({"a":1,"b":2})").top_level_members, 2u);
  EXPECT_EQ(parse_json("{}").top_level_members, 0u);
  EXPECT_EQ(parse_json(R"([{"a":1,"a":2}])").top_level_members, 0u)
    << "not an object at the top";
  EXPECT_EQ(parse_json(R"({"a":1,"a":)").top_level_members, 0u)
    << "did not parse";
}

TEST(JsonParse, EscapedFormsOfASecret) {
  using v = std::vector<std::string>;
  EXPECT_EQ(json_escaped_forms(""), v{});
  EXPECT_EQ(json_escaped_forms("plain-token"), v{"plain-token"});
  EXPECT_EQ(json_escaped_forms(R"(a"b\c)"),
            (v{R"(a"b\c)", R"(a\"b\\c)", R"(a\\\"b\\\\c)"}));
  EXPECT_EQ(json_escaped_forms("a\x01", 1), (v{"a\x01", "a\\u0001"}));
}

TEST(JsonParse, ASyntaxErrorSaysWhereItStopped) {
  auto r = parse_json("{a");
  EXPECT_EQ(r.error, json_parse_error::syntax);
  EXPECT_EQ(r.detail, "syntax error at byte 1");
  r = parse_json(R"({"a":)");
  EXPECT_EQ(r.error, json_parse_error::syntax);
  EXPECT_EQ(r.detail.substr(r.detail.size() - 10), " at byte 5") << r.detail;
  r = parse_json("[1] x");
  EXPECT_EQ(r.error, json_parse_error::syntax);
  EXPECT_NE(r.detail.find(" at byte 4"), std::string::npos) << r.detail;
}
