// The oracle body readers (actors/coalesce/oracle_body.hpp), directly: the
// fuzz target fuzz/oracle_body.cpp throws arbitrary bytes at them; these
// pin what a well-formed and an ambiguous body read as.

#include "actors/coalesce/oracle_body.hpp"

#include "actors/coalesce/leader_state.hpp"

#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <string>
#include <vector>

namespace outbound {
namespace {

TEST(OracleBody, TsBodyReadsEveryField) {
  auto r = parse_ts_body(
    R"({"physical_ms":1767225600000,"logical_start":7,"count":4,"epoch":"9"})");
  EXPECT_EQ(r.physical_ms, 1767225600000u);
  EXPECT_EQ(r.logical_start, 7u);
  EXPECT_EQ(r.count, 4u);
  EXPECT_EQ(r.epoch, "9");
}

TEST(OracleBody, RepeatedTopLevelKeyReadsAsNoAnswer) {
  EXPECT_EQ(parse_seq_body(R"({"start":1,"count":2,"start":5})").count, 0u);
  // A key repeated only inside a nested value or a string is not ambiguous.
  auto r = parse_seq_body(
    R"({"x":{"start":1},"s":"\"start\":","start":3,"count":2})");
  EXPECT_EQ(r.start, 3u);
  EXPECT_EQ(r.count, 2u);
}

TEST(OracleBody, NonDecimalEpochIsDropped) {
  EXPECT_EQ(parse_seq_body(R"({"start":1,"count":2,"epoch":"x"})").epoch, "");
  EXPECT_EQ(
    parse_ts_body(
      R"({"physical_ms":1,"logical_start":0,"count":1,"epoch":"123456789012345678901"})")
      .epoch,
    "");
  EXPECT_EQ(parse_body_epoch(R"({"epoch":"18446744073709551615"})"),
            std::optional<uint64_t>{18446744073709551615ull});
  EXPECT_EQ(parse_body_epoch("not json"), std::nullopt);
}

TEST(OracleBody, OutOfRangeFieldsReadAsNoAnswer) {
  EXPECT_EQ(
    parse_ts_body(R"({"physical_ms":-1,"logical_start":0,"count":1})").count,
    0u);
  EXPECT_EQ(parse_seq_body(R"({"start":0,"count":4294967296})").count, 0u);
  EXPECT_EQ(parse_seq_body("[]").count, 0u);
}

TEST(OracleBody, TheDepthLimitIsTheConfiguredOne) {
  // 65 levels: the object plus 64 nested arrays in "x".
  std::string deep = std::string(64, '[') + std::string(64, ']');
  std::string ts
    = R"({"physical_ms":5,"logical_start":0,"count":1,"x":)" + deep + "}";
  std::string seq = R"({"start":3,"count":2,"epoch":"7","x":)" + deep + "}";
  std::string marked = R"({"committed":false,"x":)" + deep + "}";
  EXPECT_EQ(parse_ts_body(ts).count, 0u); // the default, 64
  EXPECT_EQ(parse_seq_body(seq).count, 0u);
  EXPECT_EQ(parse_body_epoch(seq), std::nullopt);
  EXPECT_FALSE(marks_nothing_committed(marked));
  EXPECT_EQ(parse_ts_body(ts, 65).count, 1u);
  EXPECT_EQ(parse_seq_body(seq, 65).count, 2u);
  EXPECT_EQ(parse_body_epoch(seq, 65), std::optional<uint64_t>{7});
  EXPECT_TRUE(marks_nothing_committed(marked, 65));
  // And a lower limit refuses what the default reads.
  std::string flat = R"({"start":3,"count":2,"x":[[1]]})";
  EXPECT_EQ(parse_seq_body(flat).count, 2u);
  EXPECT_EQ(parse_seq_body(flat, 2).count, 0u);
}

// The driver parses a success's body once (read_ts_body / read_seq_body):
// each read gives exactly what the separate readers give, on well-formed,
// ambiguous, out-of-range, non-JSON and too-deep bodies.
TEST(OracleBody, OneReadGivesWhatTheSeparateReadersGive) {
  std::string deep = std::string(64, '[') + std::string(64, ']');
  const char* bodies[] = {
    R"({"physical_ms":5,"logical_start":7,"count":4,"epoch":"9"})",
    R"({"start":3,"count":2,"epoch":"12"})",
    R"({"start":1,"count":2,"start":5,"epoch":"4"})",
    R"({"physical_ms":5,"logical_start":4294967296,"count":1,"epoch":"3"})",
    R"({"start":3,"count":2,"epoch":"x9"})",
    R"({"count":2,"epoch":"8"})",
    R"(["epoch","8"])",
    "not json",
    "",
  };
  std::vector<std::string> all(std::begin(bodies), std::end(bodies));
  all.push_back(R"({"start":3,"count":2,"epoch":"7","x":)" + deep + "}");
  for (const auto& b : all) {
    for (std::size_t depth : {std::size_t{64}, std::size_t{65}}) {
      SCOPED_TRACE(b.substr(0, 60) + " depth " + std::to_string(depth));
      auto ts = read_ts_body(b, depth);
      auto ts1 = parse_ts_body(b, depth);
      EXPECT_EQ(ts.response.physical_ms, ts1.physical_ms);
      EXPECT_EQ(ts.response.logical_start, ts1.logical_start);
      EXPECT_EQ(ts.response.count, ts1.count);
      EXPECT_EQ(ts.response.epoch, ts1.epoch);
      EXPECT_EQ(ts.response.unreadable, ts1.unreadable);
      EXPECT_EQ(ts.epoch, parse_body_epoch(b, depth));
      auto seq = read_seq_body(b, depth);
      auto seq1 = parse_seq_body(b, depth);
      EXPECT_EQ(seq.response.start, seq1.start);
      EXPECT_EQ(seq.response.count, seq1.count);
      EXPECT_EQ(seq.response.epoch, seq1.epoch);
      EXPECT_EQ(seq.response.unreadable, seq1.unreadable);
      EXPECT_EQ(seq.epoch, parse_body_epoch(b, depth));
    }
  }
  // The epoch is read even where the fields are unusable (a repeated key).
  EXPECT_EQ(read_seq_body(R"({"start":1,"start":5,"epoch":"4"})").epoch,
            std::optional<uint64_t>{4});
  EXPECT_EQ(
    read_seq_body(R"({"start":1,"start":5,"epoch":"4"})").response.count, 0u);
}

// -- the scan of a plain answer (scan_ts_body / scan_seq_body) ----------------

// The hub's answers, serialised as hub/oracle_state.cpp does, are what the
// scan exists for: it must take them, else the driver pays the DOM.
TEST(OracleBodyScan, TakesTheHubsAnswers) {
  boost::json::object ts;
  ts["physical_ms"] = 1767225600123u;
  ts["logical_start"] = 65535u;
  ts["count"] = 1u;
  ts["epoch"] = "42";
  auto r = scan_ts_body(boost::json::serialize(ts));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->response.physical_ms, 1767225600123u);
  EXPECT_EQ(r->response.logical_start, 65535u);
  EXPECT_EQ(r->response.count, 1u);
  EXPECT_EQ(r->response.epoch, "42");
  EXPECT_EQ(r->response.unreadable, "");
  EXPECT_EQ(r->epoch, std::optional<uint64_t>{42});

  boost::json::object seq;
  seq["start"] = 0u;
  seq["count"] = 4294967295u;
  seq["epoch"] = "18446744073709551615";
  auto q = scan_seq_body(boost::json::serialize(seq));
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->response.start, 0u);
  EXPECT_EQ(q->response.count, 4294967295u);
  EXPECT_EQ(q->response.epoch, "18446744073709551615");
  EXPECT_EQ(q->epoch, std::optional<uint64_t>{UINT64_MAX});
}

// What the scan leaves to the DOM reader: each of these is outside its
// subset (and some are not JSON at all).
TEST(OracleBodyScan, LeavesEverythingElseToTheDom) {
  const char* ts_bodies[] = {
    R"({"physical_ms":1,"logical_start":2,"count":3,"x":4})",     // other key
    R"({"physical_ms":1,"logical_start":2,"count":3,"count":3})", // repeat
    R"({"physical_ms":1,"logical_start":2})",                     // missing
    R"({"physical_ms":-1,"logical_start":2,"count":3})",          // sign
    R"({"physical_ms":1.0,"logical_start":2,"count":3})",         // fraction
    R"({"physical_ms":1e3,"logical_start":2,"count":3})",         // exponent
    R"({"physical_ms":01,"logical_start":2,"count":3})",          // leading 0
    R"({"physical_ms":10000000000000000000,"logical_start":2,"count":3})",
    R"({"physical_ms":1,"logical_start":4294967296,"count":3})", // range
    R"({"physical_ms":1,"logical_start":2,"count":3,"epoch":7})",
    R"({"physical_ms":1,"logical_start":2,"count":3,"epoch":"\u0037"})",
    R"({"physical_ms":1,"logical_start":2,"count":3,"epoch":"é"})",
    R"({"physical_ms":1,"logical_start":2,"count":3,"ep\\och":"7"})",
    R"({"physical_ms":1,"logical_start":2,"count":3}x)",
    R"({"physical_ms":1,"logical_start":2,"count":3,})",
    R"({"physical_ms":1 "logical_start":2,"count":3})",
    R"({"physical_ms":1,"logical_start":2,"count":3)",
    R"([1,2,3])",
    R"({})",
    "",
  };
  for (const char* b : ts_bodies) {
    SCOPED_TRACE(b);
    EXPECT_FALSE(scan_ts_body(b).has_value());
  }
  EXPECT_FALSE(scan_seq_body(R"({"start":1,"count":2,"physical_ms":3})"));
  EXPECT_FALSE(scan_seq_body(R"({"start":1})"));
}

/// `r` (a scan's or a read's) holds what the DOM readers gave: `dom` and,
/// from parse_body_epoch, `epoch`.
void expect_same(const read_ts_result& r, const ts_response& dom,
                 const std::optional<uint64_t>& epoch) {
  EXPECT_EQ(r.response.physical_ms, dom.physical_ms);
  EXPECT_EQ(r.response.logical_start, dom.logical_start);
  EXPECT_EQ(r.response.count, dom.count);
  EXPECT_EQ(r.response.epoch, dom.epoch);
  EXPECT_EQ(r.response.unreadable, dom.unreadable);
  EXPECT_EQ(r.epoch, epoch);
}

void expect_same(const read_seq_result& r, const seq_response& dom,
                 const std::optional<uint64_t>& epoch) {
  EXPECT_EQ(r.response.start, dom.start);
  EXPECT_EQ(r.response.count, dom.count);
  EXPECT_EQ(r.response.epoch, dom.epoch);
  EXPECT_EQ(r.response.unreadable, dom.unreadable);
  EXPECT_EQ(r.epoch, epoch);
}

/// Bodies around the hub's answer: every key order, whitespace at every
/// token boundary, and each field's value replaced by a number or string
/// form on either side of the scan's rules.
std::vector<std::string> variant_bodies() {
  std::vector<std::string> out;
  const std::vector<std::string> ts_keys
    = {"physical_ms", "logical_start", "count", "epoch"};
  const std::vector<std::string> seq_keys = {"start", "count", "epoch"};
  const std::vector<std::string> values
    = {"0",
       "7",
       "00",
       "07",
       "-0",
       "-1",
       "1.5",
       "1e2",
       "4294967295",
       "4294967296",
       "9999999999999999999",
       "10000000000000000000",
       "18446744073709551615",
       "18446744073709551616",
       "true",
       "null",
       R"("7")",
       R"("")",
       R"("07")",
       R"("x7")",
       R"("\u0037")",
       R"("18446744073709551615")",
       R"("18446744073709551616")",
       "[7]",
       R"({"a":7})",
       "\"\x01\"",
       "\"\xc3\xa9\"",
       "\"\xff\""}; // a control byte, UTF-8, a byte UTF-8 never has
  auto objects = [&](std::vector<std::string> keys) {
    std::sort(keys.begin(), keys.end());
    do {
      for (std::string sp : {"", " ", "\t\n", "\r "}) {
        std::string b = sp + "{";
        for (std::size_t i = 0; i < keys.size(); ++i) {
          if (i)
            b += sp + "," + sp;
          b += sp + "\"" + keys[i] + "\"" + sp + ":" + sp
               + (keys[i] == "epoch" ? std::string{R"("3")"}
                                     : std::to_string(i + 1));
        }
        b += sp + "}" + sp;
        out.push_back(b);
      }
    } while (std::next_permutation(keys.begin(), keys.end()));
    // Each field's value swapped for each form, in the hub's order.
    for (std::size_t k = 0; k < keys.size(); ++k) {
      for (const auto& v : values) {
        std::string b = "{";
        for (std::size_t i = 0; i < keys.size(); ++i) {
          if (i)
            b += ",";
          b += "\"" + keys[i] + "\":"
               + (i == k               ? v
                  : keys[i] == "epoch" ? std::string{R"("5")"}
                                       : std::string{"1"});
        }
        out.push_back(b + "}");
      }
    }
  };
  objects(ts_keys);
  objects(seq_keys);
  // Each ts field left out in turn, and each key repeated.
  for (std::size_t k = 0; k < ts_keys.size(); ++k) {
    std::string without = "{", twice = "{";
    for (std::size_t i = 0; i < ts_keys.size(); ++i) {
      std::string member
        = "\"" + ts_keys[i] + "\":" + (ts_keys[i] == "epoch" ? R"("4")" : "1");
      if (i != k)
        without += (without.size() > 1 ? "," : "") + member;
      twice += (i ? "," : "") + member + (i == k ? "," + member : "");
    }
    out.push_back(without + "}");
    out.push_back(twice + "}");
  }
  // Bytes that are not JSON whitespace where whitespace may go, and
  // control bytes in the epoch.
  const std::string hub_ts
    = R"({"physical_ms":1,"logical_start":2,"count":3,"epoch":"4"})";
  for (std::string b :
       {std::string{"\f"}, std::string{"\v"}, std::string(1, '\0'),
        std::string{"\xa0"}, std::string{"\xef\xbb\xbf"}}) {
    out.push_back(hub_ts + b);
    out.push_back(b + hub_ts);
    out.push_back(R"({"physical_ms":1,)" + b
                  + R"("logical_start":2,"count":3})");
  }
  for (int c = 0; c < 0x20; ++c)
    out.push_back(R"({"start":1,"count":2,"epoch":"7)"
                  + std::string(1, static_cast<char>(c)) + R"("})");
  out.push_back("{\"start\":1,\"count\":2,\"epoch\":\"7\x7f\"}");
  return out;
}

// The scan's contract: wherever it takes a body it gives what the DOM
// readers give, field by field; and read_ts_body / read_seq_body (scan
// first) give what the DOM gives on every body, taken or not.
TEST(OracleBodyScan, GivesWhatTheDomGivesOnEveryVariant) {
  auto bodies = variant_bodies();
  std::size_t ts_taken = 0, seq_taken = 0;
  for (const auto& b : bodies) {
    for (std::size_t depth :
         {std::size_t{0}, std::size_t{1}, std::size_t{2}, std::size_t{64}}) {
      SCOPED_TRACE(b + " depth " + std::to_string(depth));
      auto dom_ts = parse_ts_body(b, depth);
      auto dom_seq = parse_seq_body(b, depth);
      auto dom_epoch = parse_body_epoch(b, depth);
      if (auto s = scan_ts_body(b, depth)) {
        ++ts_taken;
        expect_same(*s, dom_ts, dom_epoch);
      }
      if (auto s = scan_seq_body(b, depth)) {
        ++seq_taken;
        expect_same(*s, dom_seq, dom_epoch);
      }
      expect_same(read_ts_body(b, depth), dom_ts, dom_epoch);
      expect_same(read_seq_body(b, depth), dom_seq, dom_epoch);
    }
  }
  // Both sides of the rules were exercised: many bodies taken, many not.
  EXPECT_GT(ts_taken, 100u);
  EXPECT_GT(seq_taken, 30u);
  EXPECT_LT(ts_taken, bodies.size() * 4);
}

} // namespace
} // namespace outbound
