// The leader-hint header parser and the outcome classification (tsoracle's
// leader_hint.rs). Hostile values give no hint, never a crash.

#include "actors/coalesce/leader_state.hpp"

#include <gtest/gtest.h>

#include <random>
#include <vector>

using namespace outbound;

TEST(LeaderHint, ParsesEndpointAndEpoch) {
  auto h = parse_leader_hint("127.0.0.1:7002; epoch=5");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->endpoint, "127.0.0.1:7002");
  EXPECT_EQ(h->epoch, 5u);
  h = parse_leader_hint("  node-2:7002 ;EPOCH = 18446744073709551615 ; x=y");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->endpoint, "node-2:7002");
  EXPECT_EQ(h->epoch, UINT64_MAX);
  h = parse_leader_hint("https://node-2:7002");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->endpoint, "https://node-2:7002");
  EXPECT_FALSE(h->epoch);
  h = parse_leader_hint("[::1]:7002;epoch=0");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->epoch, 0u);
}

TEST(LeaderHint, HostileValuesGiveNoHint) {
  for (const std::string& s : std::vector<std::string>{
         "",
         " ",
         ";epoch=1",
         "node:7002;",
         "node:7002;;epoch=1",
         "node:7002; epoch",
         "node:7002; epoch=",
         "node:7002; epoch=-1",
         "node:7002; epoch=+1",
         "node:7002; epoch=1.5",
         "node:7002; epoch=0x10",
         "node:7002; epoch=18446744073709551616",
         "node:7002; epoch=99999999999999999999999",
         "node:7002; epoch=1; epoch=2",
         "node:7002; =1",
         "node:7002; a=1; b=2; c=3; d=4; e=5; f=6; g=7; h=8; i=9",
         "node",
         "node:",
         "node:0",
         "node:99999",
         "ftp://node:1",
         "node:7002\r\nx-injected: 1",
         std::string("node:7002\0; epoch=1", 19),
         "n\xc3\xb6"
         "de:7002",
         "node:7002; epoch=1\x7f",
         "javascript:alert(1)",
         "http://user:pw@node:7002",
         "node:7002/path",
       }) {
    EXPECT_FALSE(parse_leader_hint(s)) << s;
  }
  EXPECT_FALSE(parse_leader_hint(std::string(600, 'a')));
  EXPECT_FALSE(parse_leader_hint("node:1;x=" + std::string(600, 'a')));
}

TEST(LeaderHint, RandomBytesNeverCrash) {
  std::mt19937_64 rng{7};
  const std::string alphabet = "abc:;=0123456789 epoch[]/.\t\x01\xff-httpsHTTP";
  int parsed = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string s;
    auto n = rng() % 40;
    for (std::size_t k = 0; k < n; ++k)
      s += alphabet[rng() % alphabet.size()];
    if (auto h = parse_leader_hint(s)) {
      ++parsed;
      // Whatever parses has a well-formed endpoint.
      EXPECT_TRUE(
        parse_oracle_endpoint(h->endpoint, false, endpoint_origin::configured));
    }
  }
  SUCCEED() << parsed;
}

TEST(LeaderClassify, MapsExchangesToAttemptClasses) {
  using k = transport_error_kind;
  for (bool m : {false, true}) {
    EXPECT_EQ(classify_attempt(k::none, true, 200, m), attempt_class::success);
    EXPECT_EQ(classify_attempt(k::none, true, 421, m),
              attempt_class::not_leader);
    // 501: not supported, final at the first call, marked or not.
    EXPECT_EQ(classify_attempt(k::none, true, 501, m),
              attempt_class::not_supported);
  }
  // The oracle's pre-commit marker turns a refusal into a provable one.
  EXPECT_EQ(classify_attempt(k::none, true, 503, true), attempt_class::refused);
  EXPECT_EQ(classify_attempt(k::none, true, 429, true), attempt_class::refused);
  EXPECT_EQ(classify_attempt(k::none, true, 500, true), attempt_class::refused);
  EXPECT_EQ(classify_attempt(k::none, true, 400, true),
            attempt_class::rejected);
  // Unmarked: a proxy's 503 / 429 is busy, a 5xx a server error, any other
  // status unexpected; none proves nothing was committed.
  EXPECT_EQ(classify_attempt(k::none, true, 503, false), attempt_class::busy);
  EXPECT_EQ(classify_attempt(k::none, true, 429, false), attempt_class::busy);
  for (int st : {500, 502, 504, 599})
    EXPECT_EQ(classify_attempt(k::none, true, st, false),
              attempt_class::server_error)
      << st;
  for (int st : {400, 403, 404, 302, 100})
    EXPECT_EQ(classify_attempt(k::none, true, st, false),
              attempt_class::unexpected_status)
      << st;
  EXPECT_EQ(classify_attempt(k::none, true, 302, true),
            attempt_class::unexpected_status);
  EXPECT_EQ(classify_attempt(k::connect, false, 0, false),
            attempt_class::refused);
  EXPECT_EQ(classify_attempt(k::not_sent, false, 0, false),
            attempt_class::refused);
  EXPECT_EQ(classify_attempt(k::local_resource, false, 0, false),
            attempt_class::refused);
  EXPECT_EQ(classify_attempt(k::timeout, false, 0, false),
            attempt_class::refused);
  EXPECT_EQ(classify_attempt(k::timeout, true, 0, false), attempt_class::lost);
  EXPECT_EQ(classify_attempt(k::interrupted, true, 0, false),
            attempt_class::lost);
  EXPECT_EQ(classify_attempt(k::interrupted, false, 0, false),
            attempt_class::refused);
  EXPECT_EQ(classify_attempt(k::tls, false, 0, false),
            attempt_class::handshake_failed);
  EXPECT_EQ(classify_attempt(k::tls, true, 0, false),
            attempt_class::fatal_after_send);
  EXPECT_EQ(classify_attempt(k::too_large, true, 0, false),
            attempt_class::fatal_after_send);
  EXPECT_EQ(classify_attempt(k::config, false, 0, false), attempt_class::fatal);
  EXPECT_TRUE(is_transport_class(attempt_class::refused));
  EXPECT_TRUE(is_transport_class(attempt_class::busy));
  EXPECT_TRUE(is_transport_class(attempt_class::lost));
  EXPECT_FALSE(is_transport_class(attempt_class::server_error));
  EXPECT_FALSE(is_transport_class(attempt_class::not_leader));
  EXPECT_FALSE(is_transport_class(attempt_class::handshake_failed));
}

TEST(LeaderClassify, OnlyProvablyUncommittedClassesAreSafeForSeq) {
  for (auto c : {attempt_class::not_leader, attempt_class::refused,
                 attempt_class::rejected, attempt_class::not_supported,
                 attempt_class::handshake_failed, attempt_class::fatal})
    EXPECT_TRUE(proves_nothing_committed(c)) << to_string(c);
  for (auto c :
       {attempt_class::success, attempt_class::busy, attempt_class::lost,
        attempt_class::server_error, attempt_class::unexpected_status,
        attempt_class::fatal_after_send})
    EXPECT_FALSE(proves_nothing_committed(c)) << to_string(c);
}

TEST(LeaderClassify, ThePreCommitMarkerIsCommittedFalseInAJsonObject) {
  EXPECT_TRUE(marks_nothing_committed(R"({"detail":"x","committed":false})"));
  EXPECT_TRUE(marks_nothing_committed(R"({"committed":false})"));
  EXPECT_FALSE(marks_nothing_committed(R"({"committed":true})"));
  EXPECT_FALSE(marks_nothing_committed(R"({"committed":"false"})"));
  EXPECT_FALSE(marks_nothing_committed(R"({"committed":0})"));
  EXPECT_FALSE(marks_nothing_committed(R"({"detail":"bad gateway"})"));
  EXPECT_FALSE(marks_nothing_committed("<html>502 Bad Gateway</html>"));
  EXPECT_FALSE(marks_nothing_committed(R"([{"committed":false}])"));
  EXPECT_FALSE(marks_nothing_committed(""));
  EXPECT_FALSE(marks_nothing_committed(R"({"committed":false)"));
  std::string huge
    = R"({"committed":false,"pad":")" + std::string(70000, 'x') + R"("})";
  EXPECT_FALSE(marks_nothing_committed(huge));
}

TEST(LeaderBackoff, FullJitterStaysWithinItsCeiling) {
  coalesce_rng rng{1};
  using std::chrono::milliseconds;
  const coalesce_duration base = milliseconds(50);
  const coalesce_duration cap = std::chrono::seconds(5);
  for (int n = 0; n < 30; ++n) {
    auto ceiling = std::min<coalesce_duration>(
      n >= 20 ? cap : base * (int64_t{1} << n), cap);
    coalesce_duration max_seen{0};
    for (int i = 0; i < 2000; ++i) {
      auto d = full_jitter_backoff(base, cap, n, rng);
      ASSERT_GE(d.count(), 0);
      ASSERT_LE(d, ceiling) << n;
      max_seen = std::max(max_seen, d);
    }
    EXPECT_GT(max_seen, ceiling / 2) << n; // it does spread up to the cap
  }
  EXPECT_EQ(full_jitter_backoff(coalesce_duration{0}, cap, 3, rng).count(), 0);
  // A huge base never overflows: capped.
  EXPECT_LE(full_jitter_backoff(std::chrono::hours(1000000), cap, 20, rng),
            cap);
}

TEST(LeaderHint, EpochsAreDecimal64Bit) {
  EXPECT_EQ(parse_leader_epoch("0"), 0u);
  EXPECT_EQ(parse_leader_epoch("42"), 42u);
  EXPECT_EQ(parse_leader_epoch("18446744073709551615"), UINT64_MAX);
  EXPECT_FALSE(parse_leader_epoch("18446744073709551616"));
  EXPECT_FALSE(parse_leader_epoch(""));
  EXPECT_FALSE(parse_leader_epoch("-1"));
  EXPECT_FALSE(parse_leader_epoch(" 1"));
  EXPECT_FALSE(parse_leader_epoch("1e3"));
}
