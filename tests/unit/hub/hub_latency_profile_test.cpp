// The hub's latency profiles: parsing, the shapes of the
// distributions, reproducibility per (seed, key, arrival), the LRU bound.

#include "hub/latency_profile.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

using namespace outbound;

namespace {

using query = std::vector<std::pair<std::string, std::string>>;

latency_profile parse_ok(latency_profile_kind k, const query& q) {
  auto r = parse_latency_profile(k, q);
  EXPECT_TRUE(r.profile) << r.error;
  return r.profile.value_or(latency_profile{});
}

std::vector<double> draws(const latency_profile& p, uint64_t seed, int n) {
  std::vector<double> out;
  for (int i = 0; i < n; ++i)
    out.push_back(latency_profile_delay(p, seed, std::to_string(i), 0));
  return out;
}

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  auto rank = static_cast<std::size_t>(std::ceil(q * v.size()));
  return v[std::max<std::size_t>(rank, 1) - 1];
}

} // namespace

TEST(HubLatencyProfile, RoutesAreTheFiveNamedPaths) {
  EXPECT_EQ(latency_profile_at("/fast"), latency_profile_kind::fast);
  EXPECT_EQ(latency_profile_at("/slow"), latency_profile_kind::slow);
  EXPECT_EQ(latency_profile_at("/flaky"), latency_profile_kind::flaky);
  EXPECT_EQ(latency_profile_at("/lognormal"), latency_profile_kind::lognormal);
  EXPECT_EQ(latency_profile_at("/steady"), latency_profile_kind::steady);
  EXPECT_FALSE(latency_profile_at("/fast/"));
  EXPECT_FALSE(latency_profile_at("/v1/events"));
}

TEST(HubLatencyProfile, BadParametersAreNamed) {
  struct bad {
    const char* name;
    const char* value;
  };
  for (auto b :
       {bad{"mean_ms", "0"}, bad{"mean_ms", "x"}, bad{"sd_ms", "-1"},
        bad{"straggler", "1.5"}, bad{"mult", "0.5"}, bad{"straggler_ms", "nan"},
        bad{"seed", "-3"}, bad{"seed", "99999999999999999999999"},
        bad{"mean_ms", "1e999"}, bad{"status", "199"}, bad{"status", "600"},
        bad{"status", "x"}}) {
    auto r = parse_latency_profile(latency_profile_kind::lognormal,
                                   {{b.name, b.value}});
    EXPECT_FALSE(r.profile) << b.name << "=" << b.value;
    EXPECT_NE(r.error.find(std::string{"'"} + b.name + "'"), std::string::npos)
      << r.error;
  }
  auto r = parse_latency_profile(latency_profile_kind::fast,
                                 {{"key", std::string(257, 'k')}});
  EXPECT_FALSE(r.profile);
  EXPECT_NE(r.error.find("'key'"), std::string::npos);
}

TEST(HubLatencyProfile, ParametersAreRead) {
  auto p = parse_ok(latency_profile_kind::lognormal, {{"mean_ms", "7"},
                                                      {"sd_ms", "3"},
                                                      {"straggler", "0.01"},
                                                      {"straggler_ms", "1000"},
                                                      {"key", "c17"},
                                                      {"seed", "42"},
                                                      {"other", "ignored"}});
  EXPECT_DOUBLE_EQ(p.mean_s, 0.007);
  EXPECT_DOUBLE_EQ(p.sd_s, 0.003);
  EXPECT_DOUBLE_EQ(p.straggler_fraction, 0.01);
  ASSERT_TRUE(p.straggler_s);
  EXPECT_DOUBLE_EQ(*p.straggler_s, 1.0);
  EXPECT_EQ(p.key, "c17");
  EXPECT_EQ(p.seed, 42u);
  EXPECT_EQ(p.status, 200);
  EXPECT_EQ(parse_ok(latency_profile_kind::fast, {{"status", "503"}}).status,
            503);
}

TEST(HubLatencyProfile, FastIsUniformFiveToFifteenMs) {
  auto p = parse_ok(latency_profile_kind::fast, {});
  auto v = draws(p, 1, 10000);
  auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  EXPECT_GE(*lo, 0.005);
  EXPECT_LT(*hi, 0.015);
  EXPECT_NEAR(quantile(v, 0.5), 0.010, 0.0005);
}

TEST(HubLatencyProfile, SteadyIsUniformOneToThreeMs) {
  auto p = parse_ok(latency_profile_kind::steady, {});
  auto v = draws(p, 1, 10000);
  auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  EXPECT_GE(*lo, 0.001);
  EXPECT_LT(*hi, 0.003);
  EXPECT_NEAR(quantile(v, 0.5), 0.002, 0.0001);
}

TEST(HubLatencyProfile, ATagIsReadOnEveryRouteAndABadOneIsNamed) {
  for (auto k : {latency_profile_kind::fast, latency_profile_kind::steady,
                 latency_profile_kind::lognormal}) {
    EXPECT_EQ(parse_ok(k, {{"tag", "naive-1.x_y"}}).tag, "naive-1.x_y");
    EXPECT_EQ(parse_ok(k, {}).tag, "");
  }
  for (const char* bad : {"", "a b", "a/b", "a%20"}) {
    auto r = parse_latency_profile(latency_profile_kind::fast, {{"tag", bad}});
    EXPECT_FALSE(r.profile) << bad;
    EXPECT_NE(r.error.find("'tag'"), std::string::npos) << r.error;
  }
  auto r = parse_latency_profile(latency_profile_kind::fast,
                                 {{"tag", std::string(65, 'a')}});
  EXPECT_FALSE(r.profile);
  EXPECT_TRUE(parse_latency_profile(latency_profile_kind::fast,
                                    {{"tag", std::string(64, 'a')}})
                .profile);
}

TEST(HubLatencyProfile, AScopeIsReadOnEveryRouteAndABadOneIsNamed) {
  for (auto k : {latency_profile_kind::fast, latency_profile_kind::flaky,
                 latency_profile_kind::lognormal}) {
    EXPECT_EQ(parse_ok(k, {{"scope", "w0-c1-r0-k3"}}).scope, "w0-c1-r0-k3");
    EXPECT_EQ(parse_ok(k, {}).scope, "");
  }
  for (const std::string& bad :
       {std::string{}, std::string{"a b"}, std::string{"a\nb"},
        std::string{"a/b"}, std::string(65, 'a')}) {
    auto r = parse_latency_profile(latency_profile_kind::lognormal,
                                   {{"scope", bad}});
    EXPECT_FALSE(r.profile) << bad;
    EXPECT_NE(r.error.find("'scope'"), std::string::npos) << r.error;
  }
}

TEST(HubLatencyProfile, SlowIsEightHundredMs) {
  auto p = parse_ok(latency_profile_kind::slow, {});
  for (auto d : draws(p, 3, 100))
    EXPECT_DOUBLE_EQ(d, 0.8);
}

TEST(HubLatencyProfile, FlakyIsTenPercentNineHundredMs) {
  auto p = parse_ok(latency_profile_kind::flaky, {});
  auto v = draws(p, 5, 10000);
  auto slow = std::count(v.begin(), v.end(), 0.9);
  EXPECT_NEAR(static_cast<double>(slow) / v.size(), 0.10, 0.01);
  for (auto d : v)
    if (d != 0.9)
      EXPECT_TRUE(d >= 0.005 && d < 0.015) << d;
}

// hedge-python's benchmark workload: mean 5 ms, sd 2 ms, 5 % stragglers x10.
TEST(HubLatencyProfile, LognormalHasTheRequestedMomentsAndStragglers) {
  auto p = parse_ok(latency_profile_kind::lognormal,
                    {{"mean_ms", "5"}, {"sd_ms", "2"}, {"straggler", "0"}});
  auto v = draws(p, 7, 50000);
  double sum = 0, sq = 0;
  for (auto d : v) {
    sum += d;
    sq += d * d;
  }
  double mean = sum / v.size();
  double sd = std::sqrt(sq / v.size() - mean * mean);
  EXPECT_NEAR(mean, 0.005, 0.0001);
  EXPECT_NEAR(sd, 0.002, 0.0001);
  auto s = parse_ok(latency_profile_kind::lognormal, {});
  auto w = draws(s, 7, 50000);
  // Draw i's body is the same with and without stragglers (same uniforms):
  // a straggler is exactly 10x its body.
  int stragglers = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (w[i] != v[i]) {
      ++stragglers;
      EXPECT_NEAR(w[i], v[i] * 10, 1e-12);
    }
  }
  EXPECT_NEAR(stragglers / 50000.0, 0.05, 0.005);
  // Workload 2: 1 % of requests take >= 1 s.
  auto t = parse_ok(latency_profile_kind::lognormal,
                    {{"straggler", "0.01"}, {"straggler_ms", "1000"}});
  auto x = draws(t, 9, 50000);
  auto slow = std::count(x.begin(), x.end(), 1.0);
  EXPECT_NEAR(slow / 50000.0, 0.01, 0.002);
}

TEST(HubLatencyProfile, DrawsArePureFunctionsOfSeedKeyAndArrival) {
  auto p = parse_ok(latency_profile_kind::lognormal, {});
  EXPECT_EQ(latency_profile_delay(p, 42, "c1", 0),
            latency_profile_delay(p, 42, "c1", 0));
  EXPECT_NE(latency_profile_delay(p, 42, "c1", 0),
            latency_profile_delay(p, 42, "c1", 1));
  EXPECT_NE(latency_profile_delay(p, 42, "c1", 0),
            latency_profile_delay(p, 43, "c1", 0));
  EXPECT_NE(latency_profile_delay(p, 42, "c1", 0),
            latency_profile_delay(p, 42, "c2", 0));
  // A hedge's draw (arrival 1) is independent of its primary's: among the
  // primaries that straggle, the hedge straggles only ~5 % of the time.
  int primary_slow = 0, both_slow = 0;
  for (int i = 0; i < 20000; ++i) {
    auto key = std::to_string(i);
    auto a = latency_profile_delay(p, 1, key, 0);
    auto b = latency_profile_delay(p, 1, key, 1);
    if (a > 0.03) {
      ++primary_slow;
      if (b > 0.03)
        ++both_slow;
    }
  }
  ASSERT_GT(primary_slow, 500);
  EXPECT_LT(static_cast<double>(both_slow) / primary_slow, 0.15);
}

TEST(HubLatencyProfile, ArrivalCounterCountsPerKeyAndIsBounded) {
  arrival_counter c{3};
  EXPECT_EQ(c.next("a"), 0u);
  EXPECT_EQ(c.next("a"), 1u);
  EXPECT_EQ(c.next("b"), 0u);
  EXPECT_EQ(c.next(""), 0u);
  EXPECT_EQ(c.next(""), 1u);
  EXPECT_EQ(c.next("c"), 0u);
  EXPECT_EQ(c.next("a"), 2u); // a is now the most recent
  EXPECT_EQ(c.next("d"), 0u); // evicts b, the least recently used
  EXPECT_EQ(c.size(), 3u);
  EXPECT_EQ(c.next("b"), 0u); // starts over
  EXPECT_EQ(c.next("a"), 3u);
  for (int i = 0; i < 100000; ++i)
    c.next("k" + std::to_string(i));
  EXPECT_EQ(c.size(), 3u);
}

// A benchmark pairs its configurations by giving each its own scope: the
// same key starts at arrival 0 in every scope, so call i's primary and
// hedge draw the same latencies in every configuration.
TEST(HubLatencyProfile, ArrivalsAreCountedPerScope) {
  arrival_counter c;
  EXPECT_EQ(c.next("7", "cfg-a"), 0u);
  EXPECT_EQ(c.next("7", "cfg-a"), 1u); // the hedge
  EXPECT_EQ(c.next("7", "cfg-b"), 0u);
  EXPECT_EQ(c.next("7", "cfg-b"), 1u);
  EXPECT_EQ(c.next("7"), 0u); // no scope is a count of its own
  EXPECT_EQ(c.next("7", "cfg-a"), 2u);
  // A scope's keyless count is its own; without a scope, the global one.
  EXPECT_EQ(c.next("", "cfg-a"), 0u);
  EXPECT_EQ(c.next("", "cfg-a"), 1u);
  EXPECT_EQ(c.next(""), 0u);
  EXPECT_EQ(c.next("", "cfg-b"), 0u);
  EXPECT_EQ(c.next(""), 1u);
  // No (scope, key) pair is mistaken for another, whatever their bytes:
  // not when the scope's end moves into the key, not for a separator in
  // either, not for a scope that reads as a key without one.
  EXPECT_EQ(c.next("c", "ab"), 0u);
  EXPECT_EQ(c.next("bc", "a"), 0u);
  EXPECT_EQ(c.next("c", "ab"), 1u);
  EXPECT_EQ(c.next("b\nc", "a"), 0u);
  EXPECT_EQ(c.next("c", "a\nb"), 0u);
  EXPECT_EQ(c.next("b\nc", "a"), 1u);
  EXPECT_EQ(c.next("", "x"), 0u);
  EXPECT_EQ(c.next("x"), 0u);
  EXPECT_EQ(c.next("", "x"), 1u);
  EXPECT_EQ(c.next("1:x"), 0u); // a key that spells another pair's name
  EXPECT_EQ(c.next("", "x"), 2u);
  // Pairs are bounded like keys.
  arrival_counter bounded{2};
  EXPECT_EQ(bounded.next("k", "s1"), 0u);
  EXPECT_EQ(bounded.next("k", "s2"), 0u);
  EXPECT_EQ(bounded.next("k", "s3"), 0u); // evicts (s1, k)
  EXPECT_EQ(bounded.size(), 2u);
  EXPECT_EQ(bounded.next("k", "s1"), 0u); // starts over
  EXPECT_EQ(bounded.next("k", "s3"), 1u);
}
