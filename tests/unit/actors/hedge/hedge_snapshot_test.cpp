// Snapshots of the learned latency sketches (actors/hedge/hedge_snapshot.hpp)
// on the pure state: the JSON format round-trips, an import makes a key
// warm at once, and every hostile snapshot is rejected whole, naming the
// field, with the state unchanged.

#include "actors/hedge/hedge_snapshot.hpp"
#include "actors/hedge/detail/hedge_actors.hpp"
#include "actors/hedge/endpoint_stats_state.hpp"
#include "config/config_error.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>

using namespace outbound;
using namespace std::chrono_literals;

namespace {

const hedge_time t0 = hedge_time{} + 1h;

/// A state whose key `key` saw 950 samples of 20 ms and 50 of 200 ms: its
/// p95 is the 20 ms bin, its p99 the 200 ms one.
endpoint_stats_state learned(const std::string& key = "endpoint:fast") {
  endpoint_stats_state st{hedge_config{}};
  st.plan(key, resolve(hedge_config{}), t0);
  for (int i = 0; i < 1000; ++i)
    st.observe(key, i < 950 ? 0.020 : 0.200, call_health::success, t0);
  return st;
}

hedge_snapshot snapshot_of_learned() {
  auto st = learned();
  return st.export_snapshot(t0);
}

/// Expects `f` to throw config_error naming `field`.
void expect_rejected(const std::function<void()>& f, const std::string& field) {
  try {
    f();
    ADD_FAILURE() << "accepted; expected a rejection of " << field;
  } catch (const config_error& e) {
    EXPECT_EQ(e.field(), field) << e.what();
  }
}

} // namespace

TEST(HedgeSnapshot, JsonRoundTripKeepsEveryFieldExactly) {
  auto s = snapshot_of_learned();
  ASSERT_EQ(s.keys.size(), 1u);
  EXPECT_EQ(s.keys[0].key, "endpoint:fast");
  EXPECT_EQ(s.keys[0].sketch.count, 1000u);
  EXPECT_EQ(s.keys[0].sketch.bins.size(), 2u);
  auto text = to_json(s);
  auto back = parse_hedge_snapshot(text);
  EXPECT_EQ(back.version, 1);
  ASSERT_EQ(back.keys.size(), 1u);
  const auto& a = s.keys[0].sketch;
  const auto& b = back.keys[0].sketch;
  EXPECT_EQ(back.keys[0].key, "endpoint:fast");
  EXPECT_EQ(b.alpha, a.alpha);
  EXPECT_EQ(b.min_indexable, a.min_indexable);
  EXPECT_EQ(b.count, a.count);
  EXPECT_EQ(b.zero_count, a.zero_count);
  EXPECT_EQ(b.min, a.min);
  EXPECT_EQ(b.max, a.max);
  EXPECT_EQ(b.bins, a.bins);
  EXPECT_EQ(to_json(back), text);
}

TEST(HedgeSnapshot, TheImportedSketchAnswersTheSameQuantiles) {
  auto st = learned();
  auto s = st.export_snapshot(t0);
  auto sketch = to_ddsketch(s.keys[0].sketch, ddsketch{}, "keys[0].sketch");
  for (double q : {0.0, 0.5, 0.95, 0.99, 1.0})
    EXPECT_EQ(sketch.quantile(q), st.latency_quantile("endpoint:fast", q, t0))
      << q;
}

TEST(HedgeSnapshot, AnImportedKeyPlansWithTheImportedPercentileAtOnce) {
  auto s = snapshot_of_learned();
  auto p95 = learned().latency_quantile("endpoint:fast", 0.95, t0);
  ASSERT_TRUE(p95);
  EXPECT_NEAR(*p95, 0.020, 0.020 * 0.01);

  endpoint_stats_state fresh{hedge_config{}};
  EXPECT_EQ(fresh.import_snapshot(s, t0), 1u);
  EXPECT_EQ(fresh.pending_imports(), 1u);
  const auto cfg = resolve(hedge_config{});
  for (int i = 0; i < 20; ++i) {
    auto p = fresh.plan("endpoint:fast", cfg, t0 + i * 1ms);
    EXPECT_FALSE(p.warmup) << i;
    EXPECT_EQ(p.delay, *p95) << i;
    fresh.observe("endpoint:fast", p.delay, call_health::success, t0 + i * 1ms);
  }
  EXPECT_EQ(fresh.pending_imports(), 0u);
  EXPECT_EQ(fresh.snapshot("endpoint:fast")->warmup_requests, 0u);

  // Without the import the same key spends its 20 warm-up requests.
  endpoint_stats_state cold{hedge_config{}};
  for (int i = 0; i < 20; ++i) {
    auto p = cold.plan("endpoint:fast", cfg, t0);
    EXPECT_TRUE(p.warmup);
    EXPECT_EQ(p.delay, hedge_config{}.warmup_delay);
  }
}

TEST(HedgeSnapshot, ImportIntoATrackedKeyReplacesItsWindowAndMakesItWarm) {
  endpoint_stats_state st{hedge_config{}};
  const auto cfg = resolve(hedge_config{});
  st.plan("endpoint:fast", cfg, t0);
  st.observe("endpoint:fast", 1.0, call_health::success, t0);
  EXPECT_EQ(st.import_snapshot(snapshot_of_learned(), t0), 1u);
  EXPECT_EQ(st.pending_imports(), 0u);
  auto p = st.plan("endpoint:fast", cfg, t0);
  EXPECT_FALSE(p.warmup);
  EXPECT_NEAR(p.delay, 0.020, 0.020 * 0.01);
  // The imported samples age out like live ones: two idle windows later
  // the key has nothing and falls back to the warm-up delay.
  auto late = st.plan("endpoint:fast", cfg, t0 + 61s);
  EXPECT_TRUE(late.warmup);
}

TEST(HedgeSnapshot, ExportCarriesImportsNoRequestUsedYet) {
  endpoint_stats_state st{hedge_config{}};
  auto s = snapshot_of_learned();
  st.import_snapshot(s, t0);
  auto again = st.export_snapshot(t0);
  EXPECT_EQ(to_json(again), to_json(s));
}

// A key set aside by an import ages as if its window started at the
// import: used within two windows it starts warm from the import's
// samples; used later it starts cold, and an export two windows after the
// import leaves it out (it was written back for ever before, a day-old
// sketch driving the first calls as if learned a moment ago).
TEST(HedgeSnapshot, ASetAsideImportAgesOutAfterTwoWindowsFromTheImport) {
  const auto cfg = resolve(hedge_config{}); // window_duration 30 s
  {
    endpoint_stats_state st{hedge_config{}};
    st.import_snapshot(snapshot_of_learned(), t0);
    EXPECT_EQ(st.export_snapshot(t0 + 59s).keys.size(), 1u);
    auto p = st.plan("endpoint:fast", cfg, t0 + 59s);
    EXPECT_FALSE(p.warmup);
    EXPECT_NEAR(p.delay, 0.020, 0.020 * 0.01);
    // It rotates from the import's start, as live samples do.
    EXPECT_TRUE(st.plan("endpoint:fast", cfg, t0 + 61s).warmup);
  }
  {
    endpoint_stats_state st{hedge_config{}};
    st.import_snapshot(snapshot_of_learned(), t0);
    EXPECT_TRUE(st.export_snapshot(t0 + 60s).keys.empty());
    EXPECT_TRUE(st.export_snapshot(t0 + 24h).keys.empty());
    auto p = st.plan("endpoint:fast", cfg, t0 + 24h);
    EXPECT_TRUE(p.warmup);
    EXPECT_EQ(st.pending_imports(), 0u);
  }
}

// What one start exports, the next start imports: the export holds at
// most max_keys keys (the tracked ones, most recently used first, before
// those set aside) and none too long for the format. Before, the tracked
// and set-aside keys added up to twice max_keys, or a long route name
// made a key over 1024 bytes, and the client's own file stopped its next
// start (make_service_client throws on a snapshot it would reject).
TEST(HedgeSnapshot, AnExportIsAlwaysAcceptedByTheNextStart) {
  hedge_config two_keys;
  two_keys.max_keys = 2;
  const auto cfg = resolve(two_keys);
  auto learn
    = [&](endpoint_stats_state& st, const std::string& key, hedge_time at) {
        st.plan(key, cfg, at);
        for (int i = 0; i < 100; ++i)
          st.observe(key, 0.020, call_health::success, at);
      };
  endpoint_stats_state first{two_keys};
  learn(first, "endpoint:a", t0);
  learn(first, "endpoint:b", t0);
  endpoint_stats_state second{two_keys};
  ASSERT_EQ(second.import_snapshot(first.export_snapshot(t0), t0), 2u);
  learn(second, "endpoint:c", t0 + 1s);
  learn(second, "endpoint:d", t0 + 2s);
  auto out = second.export_snapshot(t0 + 2s);
  ASSERT_EQ(out.keys.size(), 2u);
  EXPECT_EQ(out.keys[0].key, "endpoint:d");
  EXPECT_EQ(out.keys[1].key, "endpoint:c");
  EXPECT_NO_THROW(check_hedge_snapshot(two_keys, out));

  endpoint_stats_state longer{hedge_config{}};
  const std::string long_key = "endpoint:" + std::string(1100, 'x');
  learn(longer, long_key, t0);
  learn(longer, "endpoint:short", t0);
  out = longer.export_snapshot(t0);
  ASSERT_EQ(out.keys.size(), 1u);
  EXPECT_EQ(out.keys[0].key, "endpoint:short");
  EXPECT_NO_THROW(check_hedge_snapshot(hedge_config{}, out));
}

TEST(HedgeSnapshot, HardcodedEndpointsKeepTheirDelay) {
  endpoint_stats_state st{hedge_config{}};
  st.import_snapshot(snapshot_of_learned(), t0);
  auto cfg = resolve(hedge_config{});
  cfg.hedge_delay = 0.5;
  auto p = st.plan("endpoint:fast", cfg, t0);
  EXPECT_TRUE(p.hardcoded);
  EXPECT_EQ(p.delay, 0.5);
}

// -- hostile snapshots --------------------------------------------------------

TEST(HedgeSnapshotHostile, ParseNamesTheFieldOfABadShape) {
  expect_rejected([] { parse_hedge_snapshot("{"); }, "snapshot");
  expect_rejected([] { parse_hedge_snapshot("[]"); }, "snapshot");
  expect_rejected([] { parse_hedge_snapshot(R"({"keys":[]})"); }, "version");
  expect_rejected([] { parse_hedge_snapshot(R"({"version":"1","keys":[]})"); },
                  "version");
  expect_rejected([] { parse_hedge_snapshot(R"({"version":1,"keys":{}})"); },
                  "keys");
  expect_rejected(
    [] { parse_hedge_snapshot(R"({"version":1,"keys":[{"key":5}]})"); },
    "keys[0].key");
  auto text = to_json(snapshot_of_learned());
  auto with = [&](const std::string& from, const std::string& to) {
    auto t = text;
    auto at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    t.replace(at, from.size(), to);
    return t;
  };
  expect_rejected(
    [&] { parse_hedge_snapshot(with("\"count\":1000", "\"count\":-1")); },
    "keys[0].sketch.count");
  expect_rejected(
    [&] { parse_hedge_snapshot(with("\"count\":1000", "\"count\":1.5")); },
    "keys[0].sketch.count");
  expect_rejected(
    [&] {
      parse_hedge_snapshot(with("\"zero_count\":0", "\"zero_count\":-3"));
    },
    "keys[0].sketch.zero_count");
  expect_rejected([&] { parse_hedge_snapshot(with(",\"min\":", ",\"mn\":")); },
                  "keys[0].sketch.min");
  expect_rejected(
    [&] { parse_hedge_snapshot(with("\"bins\":[[", "\"bins\":[[1,2,")); },
    "keys[0].sketch.bins[0]");
  expect_rejected([&] { parse_hedge_snapshot(with(",950]", ",-950]")); },
                  "keys[0].sketch.bins[0][1]");
}

namespace {

/// Imports `s` into a state that already holds a learned key and a pending
/// import; expects the rejection of `field` and both unchanged.
void expect_import_rejected(const hedge_snapshot& s, const std::string& field) {
  auto st = learned("endpoint:live");
  hedge_snapshot pending = snapshot_of_learned();
  pending.keys[0].key = "endpoint:pending";
  st.import_snapshot(pending, t0);
  auto before = to_json(st.export_snapshot(t0));
  expect_rejected([&] { st.import_snapshot(s, t0); }, field);
  EXPECT_EQ(to_json(st.export_snapshot(t0)), before) << field;
  EXPECT_EQ(st.pending_imports(), 1u) << field;
}

} // namespace

TEST(HedgeSnapshotHostile, EachBadFieldIsRejectedWholeAndNamed) {
  const auto good = snapshot_of_learned();
  // A good first key, then the bad one: nothing of the first is imported.
  auto two = [&](auto mutate) {
    auto s = good;
    auto second = good.keys[0];
    second.key = "endpoint:other";
    s.keys.push_back(second);
    s.keys[0].key = "endpoint:live";
    mutate(s.keys[1].sketch);
    return s;
  };
  {
    auto s = good;
    s.version = 2;
    expect_import_rejected(s, "version");
  }
  expect_import_rejected(two([](auto& k) { k.alpha = 0.02; }),
                         "keys[1].sketch.alpha");
  expect_import_rejected(two([](auto& k) { k.min_indexable = 1e-6; }),
                         "keys[1].sketch.min_indexable");
  expect_import_rejected(two([](auto& k) { k.bins[1].first = 100000; }),
                         "keys[1].sketch.bins[1]");
  expect_import_rejected(two([](auto& k) { k.bins[0].first = -5000; }),
                         "keys[1].sketch.bins[0]");
  expect_import_rejected(
    two([](auto& k) { k.bins[1].first = k.bins[0].first; }),
    "keys[1].sketch.bins[1]");
  expect_import_rejected(two([](auto& k) { k.bins[0].second = 0; }),
                         "keys[1].sketch.bins[0]");
  expect_import_rejected(two([](auto& k) { k.count += 1; }),
                         "keys[1].sketch.count");
  expect_import_rejected(two([](auto& k) {
                           k.bins.clear();
                           k.zero_count = 0;
                           k.count = 0;
                         }),
                         "keys[1].sketch.count");
  expect_import_rejected(two([](auto& k) {
                           k.bins[0].second = hedge_snapshot_max_count;
                           k.count = hedge_snapshot_max_count + 50;
                         }),
                         "keys[1].sketch.count");
  expect_import_rejected(two([](auto& k) { k.min = -1.0; }),
                         "keys[1].sketch.min");
  expect_import_rejected(two([](auto& k) { k.max = k.min / 2; }),
                         "keys[1].sketch.max");
  // Inside [0, 1e6] but outside the buckets: every quantile would be
  // clamped to it.
  expect_import_rejected(two([](auto& k) {
                           k.min = 500.0;
                           k.max = 1000.0;
                         }),
                         "keys[1].sketch.min");
  expect_import_rejected(two([](auto& k) { k.max = 0.05; }),
                         "keys[1].sketch.max");
  expect_import_rejected(two([](auto& k) { k.min = 0.0; }),
                         "keys[1].sketch.min");
  expect_import_rejected(two([](auto& k) {
                           k.bins.clear();
                           for (int i = 0; i < 2049; ++i)
                             k.bins.emplace_back(-1000 + i, 1);
                           k.count = 2049;
                         }),
                         "keys[1].sketch.bins");
  {
    auto s = two([](auto&) {});
    s.keys[1].key = "endpoint:live";
    expect_import_rejected(s, "keys[1].key");
  }
  {
    auto s = two([](auto&) {});
    s.keys[1].key.clear();
    expect_import_rejected(s, "keys[1].key");
  }
  {
    hedge_config small;
    small.max_keys = 1;
    endpoint_stats_state st{small};
    expect_rejected([&] { st.import_snapshot(two([](auto&) {}), t0); }, "keys");
    EXPECT_EQ(st.pending_imports(), 0u);
  }
}

TEST(HedgeSnapshotFile, AMissingFileIsNoSnapshotAndABadOneNamesTheFile) {
  const std::string dir = ::testing::TempDir();
  const auto missing = dir + "/outbound-no-such-snapshot.json";
  std::remove(missing.c_str());
  EXPECT_FALSE(read_hedge_snapshot_file(missing));

  const auto path = dir + "/outbound-snapshot-test.json";
  write_hedge_snapshot_file(snapshot_of_learned(), path);
  auto back = read_hedge_snapshot_file(path);
  ASSERT_TRUE(back);
  EXPECT_EQ(to_json(*back), to_json(snapshot_of_learned()));

  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_TRUE(f);
    std::fputs(R"({"version":1,"keys":[{"key":"k","sketch":{}}]})", f);
    std::fclose(f);
  }
  try {
    read_hedge_snapshot_file(path);
    ADD_FAILURE() << "accepted";
  } catch (const config_error& e) {
    EXPECT_EQ(e.field(), "hedging.snapshot_file");
    EXPECT_NE(std::string{e.what()}.find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string{e.what()}.find("keys[0].sketch.alpha"),
              std::string::npos)
      << e.what();
  }
  std::remove(path.c_str());
}

// Two clients saving to one path at the same stop (each on its own
// thread) leave one whole file, one of the two snapshots. With a shared
// "<path>.tmp" their bytes interleaved: the reviewer's 200 rounds left 2-4
// corrupt files, and the next start refused them.
TEST(HedgeSnapshotFile, WritersSavingToOnePathAtOnceLeaveOneWholeFile) {
  auto a = snapshot_of_learned();
  endpoint_stats_state many{hedge_config{}};
  for (int k = 0; k < 20; ++k) {
    auto key = "endpoint:k" + std::to_string(k);
    many.plan(key, resolve(hedge_config{}), t0);
    many.observe(key, 0.01, call_health::success, t0);
  }
  auto b = many.export_snapshot(t0);
  const auto ja = to_json(a), jb = to_json(b);
  const auto path = ::testing::TempDir() + "/outbound-snapshot-writers.json";
  for (int round = 0; round < 50; ++round) {
    std::thread ta([&] { write_hedge_snapshot_file(a, path); });
    std::thread tb([&] { write_hedge_snapshot_file(b, path); });
    ta.join();
    tb.join();
    auto back = read_hedge_snapshot_file(path);
    ASSERT_TRUE(back) << round;
    auto j = to_json(*back);
    ASSERT_TRUE(j == ja || j == jb) << round;
  }
  std::remove(path.c_str());
}
