// Randomized schedules of a feed group (tests/support/group_sim.hpp): M
// members running core/group_state.hpp against a simulated linearizable
// store, under crashes, pauses, partitions, outages, delays, drift, joins
// and leaves; invariants I1-I6 checked after every step. Two deliberately
// broken variants show that the checker can fail.
//
// OUTBOUND_GROUP_SIM_SCHEDULES=N runs N schedules (default 2000, 300
// under AddressSanitizer; a soak run raises it); OUTBOUND_GROUP_SIM_SEED=S
// replays seed S with its trace.

#include "tests/support/group_sim.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>

using namespace outbound;
using namespace outbound::testing;

namespace {

// Under AddressSanitizer a schedule costs about ten times as much: the
// default count is lowered so the sanitizer job stays bounded.
#if defined(__SANITIZE_ADDRESS__)
constexpr uint64_t default_schedules = 300;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr uint64_t default_schedules = 300;
#else
constexpr uint64_t default_schedules = 2000;
#endif
#else
constexpr uint64_t default_schedules = 2000;
#endif

uint64_t env_u64(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0')
    return fallback;
  return std::strtoull(v, nullptr, 10);
}

std::string replay(const group_sim_options& opt) {
  auto traced = opt;
  traced.trace = true;
  auto r = run_group_sim(traced);
  std::string out
    = "seed " + std::to_string(opt.seed) + ": " + r.failure
      + "\nreplay: OUTBOUND_GROUP_SIM_SEED=" + std::to_string(opt.seed)
      + " --gtest_filter=GroupSim.*\nlast steps:\n";
  for (const auto& line : r.trace)
    out += "  " + line + "\n";
  return out;
}

} // namespace

TEST(GroupSim, RandomSchedulesKeepInvariantsI1ToI6) {
  auto only = env_u64("OUTBOUND_GROUP_SIM_SEED", 0);
  auto n = only != 0
             ? 1
             : env_u64("OUTBOUND_GROUP_SIM_SCHEDULES", default_schedules);
  auto start = std::chrono::steady_clock::now();
  uint64_t steps = 0, deliveries = 0, dups = 0, takeovers = 0, overlaps = 0;
  for (uint64_t k = 0; k < n; ++k) {
    group_sim_options opt;
    opt.seed = only != 0 ? only : 0x5eed0000 + k;
    auto r = run_group_sim(opt);
    if (!r.failure.empty()) {
      ADD_FAILURE() << replay(opt);
      return;
    }
    steps += r.steps;
    deliveries += r.deliveries;
    dups += r.duplicates;
    takeovers += r.takeovers_checked;
    overlaps += r.inflight_overlaps;
  }
  auto secs
    = std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
        .count();
  std::cout << "[group_sim] " << n << " schedules, " << steps << " steps, "
            << deliveries << " deliveries, " << dups << " duplicates, "
            << takeovers << " takeovers timed (I5), " << overlaps
            << " in-flight deliveries after a pause, " << secs << " s\n";
  if (only == 0 && n >= 300) {
    // The checks must not be vacuous.
    EXPECT_GT(takeovers, n / 10);
    EXPECT_GT(dups, 0u);
    if (n >= 1000)
      EXPECT_GT(overlaps, 0u); // rare: a pause that outlives the lease
  }
}

namespace {

/// The first failing seed of `variant` among `tries` schedules, with its
/// failure.
std::pair<uint64_t, std::string> first_failure(group_sim_options variant,
                                               int tries) {
  for (int k = 0; k < tries; ++k) {
    variant.seed = 0xbad0000 + static_cast<uint64_t>(k);
    auto r = run_group_sim(variant);
    if (!r.failure.empty())
      return {variant.seed, r.failure};
  }
  return {0, ""};
}

} // namespace

TEST(GroupSim, CheckerCatchesAMemberThatIgnoresItsFenceDeadline) {
  group_sim_options opt;
  opt.ignore_fence = true;
  auto f = first_failure(opt, 300);
  ASSERT_NE(f.first, 0u) << "no schedule caught the broken fence";
  EXPECT_EQ(f.second.rfind("I1:", 0), 0u) << f.second;
}

TEST(GroupSim, CheckerCatchesAnOwnerThatIgnoresTheCommittedCursor) {
  group_sim_options opt;
  opt.resume_from_start = true;
  auto f = first_failure(opt, 300);
  ASSERT_NE(f.first, 0u) << "no schedule caught the wrong resume point";
  EXPECT_EQ(f.second.rfind("I4:", 0), 0u) << f.second;
}

TEST(GroupSim, CheckerCatchesAStoreThatExpiresLeasesLate) {
  group_sim_options opt;
  opt.late_expiry = true;
  auto f = first_failure(opt, 300);
  ASSERT_NE(f.first, 0u) << "no schedule caught the late takeovers";
  EXPECT_EQ(f.second.rfind("I5:", 0), 0u) << f.second;
}

TEST(GroupSim, CheckerCatchesCommitsWithoutTheTokenCompare) {
  group_sim_options opt;
  opt.commit_ignores_token = true;
  auto f = first_failure(opt, 1000);
  ASSERT_NE(f.first, 0u) << "no schedule caught the unfenced commits";
  EXPECT_TRUE(f.second.rfind("I6:", 0) == 0 || f.second.rfind("I4:", 0) == 0)
    << f.second;
}

TEST(GroupSim, CheckerCatchesPositionsThatForgetTheirEra) {
  // After a rewind the plain offset goes back: a core ordering offsets
  // alone would drop that progress, and a takeover would resume in the
  // old era's numbering.
  group_sim_options opt;
  opt.positions_without_era = true;
  auto f = first_failure(opt, 300);
  ASSERT_NE(f.first, 0u) << "no schedule caught the forgotten era";
  EXPECT_TRUE(f.second.rfind("I2:", 0) == 0 || f.second.rfind("I4:", 0) == 0)
    << f.second;
}
