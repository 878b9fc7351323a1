// The retry budget (core/retry_budget.hpp) as a pure value: explicit time,
// no actors. The rule is Finagle's RetryBudget (percent of the primaries
// in a sliding window plus a reserve of min_per_second × window), kept as
// ten slices; each test names the property it pins.

#include "core/retry_budget.hpp"

#include "config/config_error.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

using namespace outbound;
using namespace std::chrono_literals;

namespace {

using tp = retry_budget::time_point;
const tp t0 = tp{} + 1h;

retry_budget_config cfg(double percent, double per_second, double window) {
  retry_budget_config c;
  c.percent = percent;
  c.min_per_second = per_second;
  c.window = window;
  return c;
}

/// Withdrawals granted in a row at `t` until the first refusal.
int drain(retry_budget& b, tp t, extra_kind k = extra_kind::retry) {
  int n = 0;
  while (b.try_withdraw(k, t) && n < 1000000)
    ++n;
  return n;
}

} // namespace

TEST(RetryBudget, WithoutTrafficTheReserveIsMinPerSecondTimesTheWindow) {
  retry_budget b{retry_budget_config{}, t0}; // 20 %, 10/s, 10 s
  EXPECT_EQ(b.balance(t0), 100u);
  EXPECT_EQ(drain(b, t0), 100);
  auto s = b.stats(t0);
  EXPECT_EQ(s.withdrawals[0], 100u);
  EXPECT_EQ(s.refusals[0], 1u);
  EXPECT_EQ(s.balance, 0u);
}

TEST(RetryBudget, EachPrimaryAddsPercentOfAWithdrawal) {
  retry_budget b{cfg(20, 0, 10), t0};
  EXPECT_FALSE(b.try_withdraw(extra_kind::retry, t0)); // nothing deposited
  for (int i = 0; i < 4; ++i)
    b.deposit(t0);
  EXPECT_EQ(b.balance(t0), 0u); // 0.8 of a withdrawal
  EXPECT_FALSE(b.try_withdraw(extra_kind::retry, t0));
  b.deposit(t0);
  EXPECT_EQ(b.balance(t0), 1u);
  EXPECT_TRUE(b.try_withdraw(extra_kind::hedge, t0));
  EXPECT_FALSE(b.try_withdraw(extra_kind::retry, t0));
  for (int i = 0; i < 1000; ++i)
    b.deposit(t0);
  EXPECT_EQ(drain(b, t0), 200); // 1005 × 0.2 = 201, one spent
  auto s = b.stats(t0);
  EXPECT_EQ(s.deposits, 1005u);
  EXPECT_EQ(s.withdrawals[0], 200u);
  EXPECT_EQ(s.withdrawals[1], 1u);
  EXPECT_EQ(s.refusals[0], 4u); // three above, one ending the drain
}

TEST(RetryBudget, RetriesAndHedgesDrawFromTheSameBudget) {
  retry_budget b{cfg(0, 1, 10), t0}; // a reserve of 10
  EXPECT_EQ(drain(b, t0, extra_kind::hedge), 10);
  EXPECT_FALSE(b.try_withdraw(extra_kind::retry, t0));
  auto s = b.stats(t0);
  EXPECT_EQ(s.withdrawals[1], 10u);
  EXPECT_EQ(s.refusals[0], 1u);
  EXPECT_EQ(s.refusals[1], 1u);
}

TEST(RetryBudget, WithdrawalsAgeOutOfTheWindow) {
  retry_budget b{cfg(0, 1, 10), t0}; // slices of 1 s
  EXPECT_EQ(drain(b, t0), 10);
  // Still in the window 9.999 s later (slice 9 of 0..9).
  EXPECT_EQ(drain(b, t0 + 9999ms), 0);
  // Slice 0 leaves the window when slice 10 begins.
  EXPECT_EQ(b.balance(t0 + 10s), 10u);
  EXPECT_EQ(drain(b, t0 + 10s), 10);
}

TEST(RetryBudget, DepositsAgeOutOfTheWindow) {
  retry_budget b{cfg(50, 0, 1), t0}; // slices of 100 ms
  for (int i = 0; i < 10; ++i)
    b.deposit(t0);
  EXPECT_EQ(b.balance(t0 + 999ms), 5u);
  EXPECT_EQ(b.balance(t0 + 1s), 0u);
  // A long silence (many windows) empties every slice at once.
  for (int i = 0; i < 10; ++i)
    b.deposit(t0 + 1s);
  EXPECT_EQ(b.balance(t0 + 1h), 0u);
}

TEST(RetryBudget, AClockThatGoesBackMovesNothing) {
  retry_budget b{cfg(0, 1, 10), t0 + 5s};
  EXPECT_EQ(drain(b, t0), 10); // before the origin: slice 0
  EXPECT_EQ(drain(b, t0 + 5s), 0);
  // Forward to slice 12 (slices 0..2 left the window), then back: the
  // window stays where it was.
  EXPECT_EQ(drain(b, t0 + 17s), 10);
  EXPECT_EQ(drain(b, t0 + 6s), 0);
  EXPECT_EQ(b.balance(t0 + 6s), 0u);
}

TEST(RetryBudget, PercentagesAreExactWithoutAReserve) {
  retry_budget b{cfg(29, 0, 10), t0};
  for (int i = 0; i < 100; ++i)
    b.deposit(t0);
  EXPECT_EQ(b.balance(t0), 29u); // 0.29 × 100 is 28.999... in binary64
  EXPECT_EQ(drain(b, t0), 29);
}

// A decimal setting grants what it says, and the balance agrees with the
// grants: in doubles 0.57 × 10,000 and 0.29 × 100 land a hair below 5,700
// and 29, which granted one fewer than the balance reported.
TEST(RetryBudget, DecimalSettingsGrantExactlyWhatTheySay) {
  retry_budget pct{cfg(0.57, 0, 100), t0};
  for (int i = 0; i < 10000; ++i)
    pct.deposit(t0);
  EXPECT_EQ(pct.balance(t0), 57u);
  EXPECT_EQ(drain(pct, t0), 57);
  retry_budget reserve{cfg(0, 0.29, 100), t0};
  EXPECT_EQ(reserve.balance(t0), 29u);
  EXPECT_EQ(drain(reserve, t0), 29);
  // Swept: for every percentage p of 0.01 .. 20.00 (step 0.01) over 10,000
  // primaries, exactly p × 100 withdrawals, the balance saying the same.
  for (int hundredths = 1; hundredths <= 2000; ++hundredths) {
    retry_budget b{cfg(hundredths / 100.0, 0, 100), t0};
    for (int i = 0; i < 10000; ++i)
      b.deposit(t0);
    ASSERT_EQ(b.balance(t0), static_cast<uint64_t>(hundredths))
      << hundredths / 100.0 << " %";
    ASSERT_EQ(drain(b, t0), hundredths) << hundredths / 100.0 << " %";
  }
}

TEST(RetryBudget, AHugeReserveIsCappedNotOverflowed) {
  retry_budget b{cfg(100, 1e9, 3600), t0};
  EXPECT_EQ(b.balance(t0), static_cast<uint64_t>(retry_budget::max_reserve));
  EXPECT_TRUE(b.try_withdraw(extra_kind::retry, t0));
}

TEST(RetryBudget, ARefundGivesBackAWithdrawalWhileItsSliceIsInTheWindow) {
  retry_budget b{cfg(0, 1, 10), t0}; // a reserve of 10, slices of 1 s
  EXPECT_EQ(drain(b, t0), 10);
  b.refund(extra_kind::hedge, t0, t0 + 3s);
  EXPECT_EQ(b.balance(t0 + 3s), 1u);
  EXPECT_TRUE(b.try_withdraw(extra_kind::hedge, t0 + 3s));
  // Once its slice has left the window a refund changes nothing (the
  // withdrawal stopped counting already) but is still counted.
  EXPECT_EQ(drain(b, t0 + 10s), 9); // slice 0's nine left; slice 3's stays
  b.refund(extra_kind::hedge, t0, t0 + 10s);
  EXPECT_EQ(b.balance(t0 + 10s), 0u);
  auto s = b.stats(t0 + 10s);
  EXPECT_EQ(s.returned[1], 2u);
}

TEST(RetryBudget, DisabledGrantsEverythingAndStillCounts) {
  auto c = cfg(0, 0, 10);
  c.enabled = false;
  retry_budget b{c, t0};
  for (int i = 0; i < 500; ++i)
    EXPECT_TRUE(b.try_withdraw(extra_kind::retry, t0));
  auto s = b.stats(t0);
  EXPECT_FALSE(s.enabled);
  EXPECT_EQ(s.withdrawals[0], 500u);
  EXPECT_EQ(s.refusals[0], 0u);
}

// An outage shorter than the window, every attempt failing: each call
// deposits once and retries while the policy (3 attempts) and the budget
// allow. Total attempts stay within primaries × (1 + 20 %) + 10/s × 10 s,
// and the budget spends all of it (the bound is reached, not just kept).
TEST(RetryBudget, AnOutageWithinOneWindowKeepsAttemptsUnderTheCeiling) {
  retry_budget b{retry_budget_config{}, t0};
  std::mt19937_64 rng{7};
  uint64_t primaries = 0, attempts = 0;
  // 400 calls/s for 8 s at random moments; each retries up to twice.
  std::vector<tp> arrivals;
  for (int i = 0; i < 3200; ++i)
    arrivals.push_back(
      t0 + std::chrono::microseconds{static_cast<int64_t>(rng() % 8'000'000)});
  std::sort(arrivals.begin(), arrivals.end());
  for (auto t : arrivals) {
    b.deposit(t);
    ++primaries;
    ++attempts;
    for (int retry = 1; retry < 3 && b.try_withdraw(extra_kind::retry, t);
         ++retry)
      ++attempts;
  }
  ASSERT_EQ(primaries, 3200u);
  double ceiling = primaries * 1.2 + 10.0 * 10.0;
  EXPECT_LE(attempts, ceiling);
  EXPECT_GE(attempts, ceiling - 1.0); // the budget was spent, not hoarded
  auto s = b.stats(t0 + 8s);
  EXPECT_GT(s.refusals[0], 0u);
}

// Over many windows the same holds per window: attempts stay within
// primaries × 1.2 plus the reserve once per window the outage spans (plus
// one: the window slides).
TEST(RetryBudget, ALongOutageKeepsAttemptsUnderTheCeilingOfEachWindow) {
  for (double window : {1.0, 10.0}) {
    retry_budget b{cfg(20, 10, window), t0};
    uint64_t primaries = 0, attempts = 0;
    const int seconds = 60;
    // Per aligned window: calls and retries granted in it.
    std::vector<std::pair<uint64_t, uint64_t>> per_window(
      static_cast<std::size_t>(seconds / window) + 1);
    for (int ms = 0; ms < seconds * 1000; ++ms) {
      auto t = t0 + std::chrono::milliseconds{ms};
      auto& w = per_window[static_cast<std::size_t>(ms / (window * 1000))];
      b.deposit(t);
      ++w.first;
      ++primaries;
      ++attempts;
      for (int retry = 1; retry < 3 && b.try_withdraw(extra_kind::retry, t);
           ++retry) {
        ++attempts;
        ++w.second;
      }
    }
    // Every window's retries stay within 20 % of the calls of that window
    // and the one before (the window slides across both) plus the
    // reserve; and the reserve refills: each window past the first grants
    // more than its 20 % alone.
    for (std::size_t i = 0; i + 1 < per_window.size(); ++i) {
      auto calls = per_window[i].first + (i > 0 ? per_window[i - 1].first : 0);
      EXPECT_LE(per_window[i].second, 0.2 * calls + 10 * window)
        << "window " << i << " of " << window << " s";
      if (i > 0)
        EXPECT_GT(per_window[i].second, 0.2 * per_window[i].first)
          << "window " << i << " of " << window << " s";
    }
    double windows = std::ceil(seconds / window) + 1;
    EXPECT_LE(attempts, primaries * 1.2 + 10 * window * windows) << window;
    // And far below the policy's 3 attempts per call.
    EXPECT_LT(attempts, primaries * 1.4) << window;
  }
}

TEST(RetryBudgetConfig, BadFieldsAreNamed) {
  auto expect_field = [](retry_budget_config c, const std::string& field) {
    try {
      c.validate();
      ADD_FAILURE() << "accepted; expected an error naming " << field;
    } catch (const config_error& e) {
      EXPECT_EQ(e.field(), field);
    }
  };
  expect_field(cfg(-1, 10, 10), "retry_budget.percent");
  expect_field(cfg(101, 10, 10), "retry_budget.percent");
  expect_field(cfg(NAN, 10, 10), "retry_budget.percent");
  expect_field(cfg(20, -1, 10), "retry_budget.min_per_second");
  expect_field(cfg(20, INFINITY, 10), "retry_budget.min_per_second");
  expect_field(cfg(20, 10, 0), "retry_budget.window");
  expect_field(cfg(20, 10, 3601), "retry_budget.window");
  expect_field(cfg(20, 10, NAN), "retry_budget.window");
  EXPECT_NO_THROW(cfg(0, 0, 1e-6).validate());
  EXPECT_NO_THROW(cfg(100, 0, 3600).validate());
}
