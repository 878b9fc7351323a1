// The oracle body readers (actors/coalesce/oracle_body.hpp), directly: the
// fuzz target fuzz/oracle_body.cpp throws arbitrary bytes at them; these
// pin what a well-formed and an ambiguous body read as.

#include "actors/coalesce/oracle_body.hpp"

#include "actors/coalesce/leader_state.hpp"

#include <gtest/gtest.h>

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

} // namespace
} // namespace outbound
