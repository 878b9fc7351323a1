// The hub's oracle cluster as pure state: timestamp monotonicity
// across logical overflow and a wall clock going backwards, count bounds,
// gapless sequences per key, leadership epochs and hints, node modes, the
// admin body, counters.

#include "hub/oracle_state.hpp"

#include "config/config_error.hpp"

#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

using namespace outbound;

namespace json = boost::json;

namespace {

/// A timestamp as one 64-bit number.
uint64_t packed(uint64_t physical, uint64_t logical) {
  return (physical << oracle_logical_bits) | logical;
}

json::object body_of(const oracle_reply& r) {
  auto v = json::parse(r.body);
  return v.as_object();
}

std::string ts_body(uint64_t n) {
  return "{\"count\":" + std::to_string(n) + "}";
}

std::string seq_body(const std::string& key, uint64_t n) {
  json::object o;
  o["key"] = key;
  o["count"] = n;
  return json::serialize(o);
}

oracle_state cluster3() {
  oracle_config c;
  c.nodes = 3;
  oracle_state s{c};
  s.set_addresses({"127.0.0.1:1001", "127.0.0.1:1002", "127.0.0.1:1003"});
  return s;
}

} // namespace

// -- timestamps
// ----------------------------------------------------------------------

TEST(OracleTimestamps, ConsecutiveGrantsInOneMillisecondAreContiguous) {
  timestamp_allocator a;
  auto g1 = a.allocate(10, 5000);
  auto g2 = a.allocate(3, 5000);
  ASSERT_TRUE(g1 && g2);
  EXPECT_EQ(g1->physical_ms, 5000u);
  EXPECT_EQ(g1->logical_start, 0u);
  EXPECT_EQ(g1->count, 10u);
  EXPECT_EQ(g2->physical_ms, 5000u);
  EXPECT_EQ(g2->logical_start, 10u);
  EXPECT_EQ(a.next_logical(), 13u);
}

TEST(OracleTimestamps, ANewMillisecondRestartsTheLogicalPart) {
  timestamp_allocator a;
  a.allocate(100, 5000);
  auto g = a.allocate(1, 5001);
  ASSERT_TRUE(g);
  EXPECT_EQ(g->physical_ms, 5001u);
  EXPECT_EQ(g->logical_start, 0u);
}

TEST(OracleTimestamps, LogicalOverflowAdvancesThePhysicalPart) {
  timestamp_allocator a;
  auto g1 = a.allocate(oracle_max_ts_count - 5, 7000);
  ASSERT_TRUE(g1);
  // Six more do not fit in the five left of millisecond 7000.
  auto g2 = a.allocate(6, 7000);
  ASSERT_TRUE(g2);
  EXPECT_EQ(g2->physical_ms, 7001u);
  EXPECT_EQ(g2->logical_start, 0u);
  // Five would have fitted: exactly filling a millisecond is allowed.
  timestamp_allocator b;
  b.allocate(oracle_max_ts_count - 5, 7000);
  auto g3 = b.allocate(5, 7000);
  ASSERT_TRUE(g3);
  EXPECT_EQ(g3->physical_ms, 7000u);
  EXPECT_EQ(g3->logical_start, oracle_max_ts_count - 5);
  EXPECT_EQ(g3->logical_start + g3->count - 1, oracle_logical_max);
  // The next one moves on, even though the clock has not.
  auto g4 = b.allocate(1, 7000);
  ASSERT_TRUE(g4);
  EXPECT_EQ(g4->physical_ms, 7001u);
  EXPECT_EQ(g4->logical_start, 0u);
}

TEST(OracleTimestamps, FullMillisecondBatchesRunAheadOfTheClock) {
  timestamp_allocator a;
  for (uint64_t i = 0; i < 4; ++i) {
    auto g = a.allocate(oracle_max_ts_count, 9000);
    ASSERT_TRUE(g);
    EXPECT_EQ(g->physical_ms, 9000 + i);
    EXPECT_EQ(g->logical_start, 0u);
    EXPECT_EQ(g->count, oracle_max_ts_count);
  }
  // The clock catches up with a value below what was handed out: still
  // after the last grant.
  auto g = a.allocate(1, 9002);
  ASSERT_TRUE(g);
  EXPECT_EQ(g->physical_ms, 9004u);
  EXPECT_EQ(g->logical_start, 0u);
}

TEST(OracleTimestamps, AClockGoingBackwardsNeverMovesTimestampsBackwards) {
  timestamp_allocator a;
  auto g1 = a.allocate(2, 10000);
  auto g2 = a.allocate(2, 4000); // NTP stepped the clock back 6 s
  auto g3 = a.allocate(2, 9999);
  auto g4 = a.allocate(2, 10001);
  ASSERT_TRUE(g1 && g2 && g3 && g4);
  EXPECT_EQ(g2->physical_ms, 10000u);
  EXPECT_EQ(g2->logical_start, 2u);
  EXPECT_EQ(g3->physical_ms, 10000u);
  EXPECT_EQ(g3->logical_start, 4u);
  EXPECT_EQ(g4->physical_ms, 10001u);
  EXPECT_EQ(g4->logical_start, 0u);
}

TEST(OracleTimestamps, EveryTimestampIsStrictlyGreaterThanTheLastOne) {
  // A deterministic walk: clock jitter back and forth, batches of all
  // sizes, including ones that overflow a millisecond.
  timestamp_allocator a;
  uint64_t clock = 1'000'000;
  uint64_t last = 0;
  bool first = true;
  uint64_t x = 88172645463325252ull; // xorshift64
  for (int i = 0; i < 5000; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    int step = static_cast<int>(x % 7) - 3; // -3 .. +3 ms
    clock = static_cast<uint64_t>(static_cast<int64_t>(clock) + step);
    uint32_t n = (x >> 8) % 4 == 0
                   ? static_cast<uint32_t>(1 + (x >> 16) % oracle_max_ts_count)
                   : static_cast<uint32_t>(1 + (x >> 16) % 50);
    auto g = a.allocate(n, clock);
    ASSERT_TRUE(g);
    ASSERT_EQ(g->count, n);
    ASSERT_LE(g->logical_start + uint64_t{g->count} - 1, oracle_logical_max);
    auto lo = packed(g->physical_ms, g->logical_start);
    if (!first)
      ASSERT_GT(lo, last) << "grant " << i;
    first = false;
    last = packed(g->physical_ms, g->logical_start + g->count - 1);
  }
}

TEST(OracleTimestamps, ThePhysicalSpaceEndsAt46Bits) {
  timestamp_allocator a;
  auto g = a.allocate(oracle_max_ts_count, oracle_physical_max);
  ASSERT_TRUE(g);
  EXPECT_EQ(g->physical_ms, oracle_physical_max);
  EXPECT_FALSE(a.allocate(1, oracle_physical_max));
  EXPECT_FALSE(a.allocate(1, oracle_physical_max + 5));
}

// -- request bodies
// -------------------------------------------------------------------

TEST(OracleRequests, TsCountBoundsAreOneTo262144) {
  EXPECT_EQ(parse_ts_request(ts_body(1)).count, 1u);
  EXPECT_EQ(parse_ts_request(ts_body(262144)).count, 262144u);
  for (auto bad :
       {std::string{"{\"count\":0}"}, ts_body(262145),
        std::string{"{\"count\":-1}"}, std::string{"{\"count\":1.5}"},
        std::string{"{\"count\":\"3\"}"}, std::string{"{}"},
        std::string{"{\"count\":null}"},
        std::string{"{\"count\":18446744073709551615}"}}) {
    auto p = parse_ts_request(bad);
    EXPECT_FALSE(p.count) << bad;
    EXPECT_EQ(p.error, "'count' must be an integer in [1, 262144]") << bad;
  }
  for (auto bad : {"", "[1]", "not json", "3"}) {
    auto p = parse_ts_request(bad);
    EXPECT_FALSE(p.count) << bad;
    EXPECT_NE(p.error.find("JSON object"), std::string::npos) << bad;
  }
}

TEST(OracleRequests, SeqKeyAndCountAreValidatedByField) {
  auto ok = parse_seq_request(seq_body("orders", 7), 128, 65536);
  ASSERT_TRUE(ok.req);
  EXPECT_EQ(ok.req->key, "orders");
  EXPECT_EQ(ok.req->count, 7u);
  EXPECT_TRUE(
    parse_seq_request(seq_body(std::string(128, 'k'), 65536), 128, 65536).req);
  auto key_error = [](const std::string& body) {
    auto p = parse_seq_request(body, 128, 65536);
    EXPECT_FALSE(p.req) << body;
    return p.error;
  };
  EXPECT_EQ(key_error(seq_body("", 1)),
            "'key' must be a string of 1 to 128 bytes");
  EXPECT_EQ(key_error(seq_body(std::string(129, 'k'), 1)),
            "'key' must be a string of 1 to 128 bytes");
  EXPECT_EQ(key_error(R"({"key":5,"count":1})"),
            "'key' must be a string of 1 to 128 bytes");
  EXPECT_EQ(key_error(R"({"count":1})"),
            "'key' must be a string of 1 to 128 bytes");
  EXPECT_EQ(key_error(seq_body("k", 0)),
            "'count' must be an integer in [1, 65536]");
  EXPECT_EQ(key_error(seq_body("k", 65537)),
            "'count' must be an integer in [1, 65536]");
  EXPECT_EQ(key_error(R"({"key":"k"})"),
            "'count' must be an integer in [1, 65536]");
}

TEST(OracleRequests, LeaderHintIsHostPortThenEpoch) {
  EXPECT_EQ(format_leader_hint("127.0.0.1:4100", 7), "127.0.0.1:4100; epoch=7");
}

// -- sequences
// ----------------------------------------------------------------------------

TEST(OracleSequences, EachKeyIsGaplessFromZeroUnderInterleaving) {
  sequence_allocator s{16};
  std::map<std::string, uint64_t> expected;
  std::map<std::string, std::vector<std::pair<uint64_t, uint32_t>>> blocks;
  std::vector<std::string> keys{"a", "b", "c"};
  for (uint32_t i = 0; i < 300; ++i) {
    const auto& k = keys[(i * 7) % 3];
    uint32_t n = 1 + (i * 31) % 17;
    auto r = s.allocate(k, n);
    ASSERT_TRUE(r.start);
    EXPECT_EQ(*r.start, expected[k]) << k << " at " << i;
    expected[k] += n;
    blocks[k].emplace_back(*r.start, n);
  }
  for (const auto& [k, list] : blocks) {
    uint64_t next = 0;
    for (auto [start, n] : list) {
      EXPECT_EQ(start, next) << k;
      next = start + n;
    }
    EXPECT_EQ(s.peek(k), next);
  }
  EXPECT_EQ(s.keys(), 3u);
  EXPECT_EQ(s.peek("never"), 0u);
}

TEST(OracleSequences, TheKeySetIsBoundedAndAFailureAdvancesNothing) {
  sequence_allocator s{2};
  EXPECT_TRUE(s.allocate("a", 1).start);
  EXPECT_TRUE(s.allocate("b", 1).start);
  auto r = s.allocate("c", 1);
  EXPECT_FALSE(r.start);
  EXPECT_EQ(r.error, seq_error::too_many_keys);
  EXPECT_EQ(s.keys(), 2u);
  EXPECT_EQ(*s.allocate("a", 5).start, 1u); // known keys go on
  EXPECT_EQ(s.peek("a"), 6u);
}

// -- the cluster
// ---------------------------------------------------------------------------

TEST(OracleCluster, BadConfigNamesTheField) {
  auto field_of = [](oracle_config c) {
    try {
      oracle_state s{c};
    } catch (const config_error& e) {
      return e.field();
    }
    return std::string{"(none)"};
  };
  oracle_config c;
  c.nodes = 0;
  EXPECT_EQ(field_of(c), "oracle.nodes");
  c.nodes = 17;
  EXPECT_EQ(field_of(c), "oracle.nodes");
  c = {};
  c.max_seq_keys = 0;
  EXPECT_EQ(field_of(c), "oracle.max_seq_keys");
  c = {};
  c.max_seq_key_bytes = 0;
  EXPECT_EQ(field_of(c), "oracle.max_seq_key_bytes");
  c = {};
  c.max_seq_count = 0;
  EXPECT_EQ(field_of(c), "oracle.max_seq_count");
  c = {};
  c.stall_seconds = 0;
  EXPECT_EQ(field_of(c), "oracle.stall_seconds");
  EXPECT_EQ(field_of(oracle_config{}), "(none)");
}

TEST(OracleCluster, TheLeaderAnswersTsWithItsEpoch) {
  auto s = cluster3();
  EXPECT_EQ(s.leader(), std::size_t{0});
  EXPECT_EQ(s.epoch(), 1u);
  auto r = s.handle(0, oracle_op::ts, ts_body(5), 123456);
  EXPECT_EQ(r.delivery, oracle_delivery::answer);
  EXPECT_EQ(r.status, 200);
  EXPECT_TRUE(r.committed);
  EXPECT_TRUE(r.leader_hint.empty());
  auto b = body_of(r);
  EXPECT_EQ(b.at("physical_ms").to_number<uint64_t>(), 123456u);
  EXPECT_EQ(b.at("logical_start").to_number<uint64_t>(), 0u);
  EXPECT_EQ(b.at("count").to_number<uint64_t>(), 5u);
  EXPECT_EQ(b.at("epoch").as_string(), "1");
  EXPECT_EQ(s.timestamps_issued(), 5u);
}

TEST(OracleCluster, TheLeaderAnswersSeqBlocks) {
  auto s = cluster3();
  auto r1 = s.handle(0, oracle_op::seq, seq_body("k", 10), 0);
  auto r2 = s.handle(0, oracle_op::seq, seq_body("k", 3), 0);
  auto r3 = s.handle(0, oracle_op::seq, seq_body("other", 3), 0);
  EXPECT_EQ(body_of(r1).at("start").to_number<uint64_t>(), 0u);
  EXPECT_EQ(body_of(r1).at("count").to_number<uint64_t>(), 10u);
  EXPECT_EQ(body_of(r2).at("start").to_number<uint64_t>(), 10u);
  EXPECT_EQ(body_of(r3).at("start").to_number<uint64_t>(), 0u);
  EXPECT_EQ(body_of(r3).at("epoch").as_string(), "1");
}

TEST(OracleCluster, AFollowerAnswers421WithAHint) {
  auto s = cluster3();
  auto r = s.handle(2, oracle_op::ts, ts_body(1), 1000);
  EXPECT_EQ(r.status, 421);
  EXPECT_FALSE(r.committed);
  EXPECT_EQ(r.leader_hint, "127.0.0.1:1001; epoch=1");
  auto b = body_of(r);
  EXPECT_EQ(b.at("leader").as_string(), "127.0.0.1:1001");
  EXPECT_EQ(b.at("epoch").as_string(), "1");
  EXPECT_EQ(s.timestamps_issued(), 0u);
  // The follower does not look at the body: a bad one is still a 421.
  EXPECT_EQ(s.handle(1, oracle_op::seq, "garbage", 1000).status, 421);
  EXPECT_EQ(s.counters(2).misdirected, 1u);
  EXPECT_EQ(s.counters(1).misdirected, 1u);
  EXPECT_EQ(s.counters(0).requests, 0u);
}

TEST(OracleCluster, EveryLeadershipMoveOpensANewEpochAndHintsFollow) {
  auto s = cluster3();
  EXPECT_EQ(s.set_leader(std::size_t{1}), 2u);
  EXPECT_EQ(s.leader_hint(), "127.0.0.1:1002; epoch=2");
  EXPECT_EQ(s.handle(0, oracle_op::ts, ts_body(1), 1).leader_hint,
            "127.0.0.1:1002; epoch=2");
  auto r = s.handle(1, oracle_op::ts, ts_body(1), 1);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(body_of(r).at("epoch").as_string(), "2");
  // Re-electing the same node is a new term too.
  EXPECT_EQ(s.set_leader(std::size_t{1}), 3u);
  EXPECT_EQ(s.set_leader(std::size_t{2}), 4u);
  EXPECT_EQ(s.handle(1, oracle_op::ts, ts_body(1), 1).leader_hint,
            "127.0.0.1:1003; epoch=4");
  EXPECT_THROW(s.set_leader(std::size_t{3}), std::out_of_range);
  EXPECT_EQ(s.epoch(), 4u);
}

TEST(OracleCluster, LeaderlessEveryNodeAnswers421WithoutAHint) {
  auto s = cluster3();
  EXPECT_EQ(s.set_leader(std::nullopt), 2u);
  EXPECT_TRUE(s.leader_hint().empty());
  for (std::size_t i = 0; i < 3; ++i) {
    auto r = s.handle(i, oracle_op::seq, seq_body("k", 1), 1);
    EXPECT_EQ(r.status, 421) << i;
    EXPECT_TRUE(r.leader_hint.empty()) << i;
    EXPECT_TRUE(body_of(r).at("leader").is_null());
  }
  EXPECT_EQ(s.sequences().keys(), 0u);
  s.set_leader(std::size_t{0});
  EXPECT_EQ(s.epoch(), 3u);
  EXPECT_EQ(s.handle(0, oracle_op::seq, seq_body("k", 1), 1).status, 200);
}

TEST(OracleCluster, TimestampsStayMonotonicAcrossLeaderMoves) {
  auto s = cluster3();
  auto first = body_of(s.handle(0, oracle_op::ts, ts_body(1000), 50));
  s.set_leader(std::size_t{2});
  // The new leader's clock is behind: the shared state still goes forward.
  auto second = body_of(s.handle(2, oracle_op::ts, ts_body(1), 10));
  EXPECT_EQ(second.at("physical_ms").to_number<uint64_t>(), 50u);
  EXPECT_EQ(second.at("logical_start").to_number<uint64_t>(), 1000u);
  EXPECT_EQ(first.at("epoch").as_string(), "1");
  EXPECT_EQ(second.at("epoch").as_string(), "2");
}

TEST(OracleCluster, InvalidBodiesAre400sThatCommitNothing) {
  auto s = cluster3();
  auto r = s.handle(0, oracle_op::ts, ts_body(0), 1);
  EXPECT_EQ(r.status, 400);
  EXPECT_FALSE(r.committed);
  EXPECT_EQ(body_of(r).at("detail").as_string(),
            "'count' must be an integer in [1, 262144]");
  r = s.handle(0, oracle_op::seq, seq_body("", 1), 1);
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(std::string{body_of(r).at("detail").as_string()}.find("'key'"),
            std::string::npos);
  EXPECT_EQ(s.counters(0).bad_requests, 2u);
  EXPECT_EQ(s.counters(0).commits, 0u);
  EXPECT_EQ(s.timestamps().last_physical_ms(), 0u);
}

TEST(OracleCluster, TheSeqKeySetIsBoundedWithA400NamingTheKey) {
  oracle_config c;
  c.max_seq_keys = 2;
  oracle_state s{c};
  EXPECT_EQ(s.handle(0, oracle_op::seq, seq_body("a", 1), 0).status, 200);
  EXPECT_EQ(s.handle(0, oracle_op::seq, seq_body("b", 1), 0).status, 200);
  auto r = s.handle(0, oracle_op::seq, seq_body("c", 1), 0);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(std::string{body_of(r).at("detail").as_string()}.rfind("'key'", 0),
            0u);
  EXPECT_EQ(s.handle(0, oracle_op::seq, seq_body("a", 1), 0).status, 200);
}

TEST(OracleCluster, RefuseAnswers503AndCommitsNothing) {
  auto s = cluster3();
  s.set_mode(0, oracle_node_mode::refuse);
  auto r = s.handle(0, oracle_op::ts, ts_body(1), 1);
  EXPECT_EQ(r.delivery, oracle_delivery::answer);
  EXPECT_EQ(r.status, 503);
  EXPECT_FALSE(r.committed);
  EXPECT_EQ(s.counters(0).refused, 1u);
  EXPECT_EQ(s.timestamps_issued(), 0u);
  // A refusing follower refuses too (a node that is down).
  s.set_mode(1, oracle_node_mode::refuse);
  EXPECT_EQ(s.handle(1, oracle_op::ts, ts_body(1), 1).status, 503);
}

TEST(OracleCluster, StallHoldsForTheBoundAndCommitsNothing) {
  auto s = cluster3();
  s.set_mode(0, oracle_node_mode::stall);
  auto r = s.handle(0, oracle_op::seq, seq_body("k", 1), 1);
  EXPECT_EQ(r.delivery, oracle_delivery::hold);
  EXPECT_EQ(r.hold_seconds, 30.0);
  EXPECT_FALSE(r.committed);
  EXPECT_EQ(s.sequences().peek("k"), 0u);
  EXPECT_EQ(s.counters(0).stalled, 1u);
  ASSERT_FALSE(s.apply_admin(R"({"stall_seconds":0.5})"));
  EXPECT_EQ(s.handle(0, oracle_op::ts, ts_body(1), 1).hold_seconds, 0.5);
}

TEST(OracleCluster, CommitNoReplyAppliesThenClosesSilently) {
  auto s = cluster3();
  s.set_mode(0, oracle_node_mode::commit_no_reply);
  auto r = s.handle(0, oracle_op::seq, seq_body("k", 4), 1);
  EXPECT_EQ(r.delivery, oracle_delivery::close_silently);
  EXPECT_TRUE(r.committed);
  EXPECT_EQ(s.sequences().peek("k"), 4u); // the block is spent
  EXPECT_EQ(s.counters(0).unanswered_commits, 1u);
  EXPECT_EQ(s.counters(0).commits, 1u);
  // What commits nothing is still answered.
  EXPECT_EQ(s.handle(0, oracle_op::seq, seq_body("", 4), 1).status, 400);
  s.set_mode(1, oracle_node_mode::commit_no_reply);
  EXPECT_EQ(s.handle(1, oracle_op::seq, seq_body("k", 4), 1).status, 421);
  s.set_mode(0, oracle_node_mode::normal);
  auto next = s.handle(0, oracle_op::seq, seq_body("k", 1), 1);
  EXPECT_EQ(body_of(next).at("start").to_number<uint64_t>(), 4u);
}

TEST(OracleCluster, AdminBodyMovesLeaderSetsModesAllOrNothing) {
  auto s = cluster3();
  ASSERT_FALSE(s.apply_admin(R"({"leader":2})"));
  EXPECT_EQ(s.leader(), std::size_t{2});
  EXPECT_EQ(s.epoch(), 2u);
  ASSERT_FALSE(s.apply_admin(R"({"leader":null})"));
  EXPECT_FALSE(s.leader());
  EXPECT_EQ(s.epoch(), 3u);
  ASSERT_FALSE(s.apply_admin(R"({"node":1,"mode":"stall"})"));
  EXPECT_EQ(s.mode(1), oracle_node_mode::stall);
  EXPECT_EQ(s.mode(0), oracle_node_mode::normal);
  ASSERT_FALSE(s.apply_admin(R"({"mode":"refuse","leader":0})"));
  for (std::size_t i = 0; i < 3; ++i)
    EXPECT_EQ(s.mode(i), oracle_node_mode::refuse);
  EXPECT_EQ(s.leader(), std::size_t{0});
  EXPECT_EQ(s.epoch(), 4u);

  auto err = [&](const char* body) {
    auto e = s.apply_admin(body);
    EXPECT_TRUE(e) << body;
    return e.value_or("");
  };
  EXPECT_EQ(err(R"({"leader":3})"),
            "'leader' must be null or an integer in [0, 2]");
  EXPECT_EQ(err(R"({"leader":"1"})"),
            "'leader' must be null or an integer in [0, 2]");
  EXPECT_EQ(err(R"({"node":5,"mode":"normal"})"),
            "'node' must be an integer in [0, 2]");
  EXPECT_EQ(err(R"({"node":1})"), "'node' needs a 'mode'");
  EXPECT_NE(err(R"({"node":1,"mode":"sleep"})").find("'mode'"),
            std::string::npos);
  EXPECT_EQ(err(R"({"stall_seconds":0})"),
            "'stall_seconds' must be a number > 0");
  EXPECT_EQ(err(R"({"lead":1})"), "unknown key 'lead'");
  EXPECT_EQ(err("[]"), "body must be a JSON object");
  // The valid leader in a body with a bad mode moved nothing.
  EXPECT_TRUE(s.apply_admin(R"({"leader":1,"mode":"x"})"));
  EXPECT_EQ(s.leader(), std::size_t{0});
  EXPECT_EQ(s.epoch(), 4u);
  EXPECT_EQ(s.mode(0), oracle_node_mode::refuse);
  EXPECT_THROW(s.set_mode(3, oracle_node_mode::normal), std::out_of_range);
}

TEST(OracleCluster, ModeNamesRoundTrip) {
  for (auto m : {oracle_node_mode::normal, oracle_node_mode::refuse,
                 oracle_node_mode::stall, oracle_node_mode::commit_no_reply})
    EXPECT_EQ(parse_oracle_node_mode(to_string(m)), m);
  EXPECT_FALSE(parse_oracle_node_mode("down"));
}

TEST(OracleCluster, StateJsonCountsPerNode) {
  auto s = cluster3();
  s.handle(0, oracle_op::ts, ts_body(3), 10);
  s.handle(1, oracle_op::ts, ts_body(3), 10);
  s.handle(0, oracle_op::seq, seq_body("k", 2), 10);
  auto o = s.state_json();
  EXPECT_EQ(o.at("leader").to_number<uint64_t>(), 0u);
  EXPECT_EQ(o.at("leader_address").as_string(), "127.0.0.1:1001");
  EXPECT_EQ(o.at("epoch").as_string(), "1");
  EXPECT_EQ(o.at("commits").to_number<uint64_t>(), 2u);
  EXPECT_EQ(o.at("misdirected").to_number<uint64_t>(), 1u);
  EXPECT_EQ(o.at("timestamps_issued").to_number<uint64_t>(), 3u);
  EXPECT_EQ(o.at("seq_issued").to_number<uint64_t>(), 2u);
  const auto& nodes = o.at("nodes").as_array();
  ASSERT_EQ(nodes.size(), 3u);
  EXPECT_EQ(nodes[0].at("role").as_string(), "leader");
  EXPECT_EQ(nodes[0].at("requests").to_number<uint64_t>(), 2u);
  EXPECT_EQ(nodes[0].at("answered").to_number<uint64_t>(), 2u);
  EXPECT_EQ(nodes[1].at("role").as_string(), "follower");
  EXPECT_EQ(nodes[1].at("misdirected").to_number<uint64_t>(), 1u);
  EXPECT_EQ(nodes[2].at("address").as_string(), "127.0.0.1:1003");
  EXPECT_EQ(nodes[2].at("mode").as_string(), "normal");
  EXPECT_THROW(s.set_addresses({"a"}), std::invalid_argument);
}

// The pre-commit marker: every rejection that provably committed nothing
// says so in its body ("committed": false), so a non-idempotent client can
// tell it from a proxy's 502/503/504 or a 500, which it cannot.
TEST(OracleCluster, EveryPreCommitRejectionCarriesTheMarker) {
  oracle_config c;
  c.nodes = 3;
  c.max_seq_keys = 1;
  oracle_state s{c};
  s.set_addresses({"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"});
  auto marked = [](const oracle_reply& r) {
    auto b = body_of(r);
    auto* m = b.if_contains("committed");
    return m && m->is_bool() && !m->as_bool() && !r.committed;
  };
  EXPECT_EQ(s.handle(0, oracle_op::seq, seq_body("a", 1), 1).status, 200);
  auto bad = s.handle(0, oracle_op::seq, seq_body("", 1), 1);
  EXPECT_EQ(bad.status, 400);
  EXPECT_TRUE(marked(bad));
  auto cap = s.handle(0, oracle_op::seq, seq_body("b", 1), 1);
  EXPECT_EQ(cap.status, 400);
  EXPECT_TRUE(marked(cap));
  auto follower = s.handle(1, oracle_op::seq, seq_body("a", 1), 1);
  EXPECT_EQ(follower.status, 421);
  EXPECT_TRUE(marked(follower));
  s.set_mode(2, oracle_node_mode::refuse);
  auto refused = s.handle(2, oracle_op::ts, ts_body(1), 1);
  EXPECT_EQ(refused.status, 503);
  EXPECT_TRUE(marked(refused));
  // A success carries no marker.
  auto ok = s.handle(0, oracle_op::ts, ts_body(1), 1);
  EXPECT_EQ(ok.status, 200);
  EXPECT_FALSE(body_of(ok).if_contains("committed"));
}

TEST(OracleCluster, WithoutSeqSupportSeqIsA501ThatCommitsNothing) {
  oracle_config c;
  c.seq_supported = false;
  oracle_state s{c};
  auto r = s.handle(0, oracle_op::seq, seq_body("k", 1), 1);
  EXPECT_EQ(r.status, 501);
  EXPECT_FALSE(r.committed);
  EXPECT_EQ(body_of(r).at("committed").as_bool(), false);
  EXPECT_NE(
    std::string{body_of(r).at("detail").as_string()}.find("not supported"),
    std::string::npos);
  EXPECT_EQ(s.sequences().peek("k"), 0u);
  EXPECT_EQ(s.counters(0).unsupported, 1u);
  // Timestamps are unaffected.
  EXPECT_EQ(s.handle(0, oracle_op::ts, ts_body(1), 1).status, 200);
}
