#pragma once

// The retry budget of a service client: one ceiling on the extra load its
// retries and hedges put on a service (config/client_config.hpp,
// retry_budget_config, says what a user sets and why).
//
// The rule is Finagle's RetryBudget (finagle-core,
// com/twitter/finagle/service/RetryBudget.scala, TokenRetryBudget over a
// WindowedAdder of 10 slices): deposits and withdrawals are counted over a
// sliding window, and a withdrawal is granted while
//
//     withdrawals + 1 <= percent / 100 × deposits + min_per_second × window
//
// Both sides age out of the window together, and a withdrawal never comes
// before the deposits that paid for it, so in ANY window of that length
// the extra attempts are at most `percent` % of the primaries plus
// `min_per_second × window` (the "reserve"); over an outage of T seconds,
// at most `percent` % of the primaries plus the reserve once per window
// the outage spans. Counts are integers, and the percentage and the
// reserve are held in millionths, so the comparison is exact integer
// arithmetic: nothing is accumulated, no rounding drifts, and a decimal
// setting (0.57 %, 0.29/s) means what it says.
//
// retry_budget is pure (time is an argument). shared_retry_budget is the
// same under a mutex, for the one budget that a service client and its
// call actors share: a leaf lock held for a few counter updates, never
// across a call-out (as Finagle shares one RetryBudget between the filters
// of a client).

#include "config/client_config.hpp"

#include <array>
#include <chrono>
#include <cstdint>
#include <mutex>

namespace outbound {
inline namespace core {

/// What a withdrawal pays for.
enum class extra_kind : uint8_t {
  /// A counted attempt after a call's first (x-retry-count >= 1).
  retry,
  /// A hedge's backup request.
  hedge,
};

/// "retry", "hedge" (metric label values).
const char* to_string(extra_kind k);

/// Counters and balance of a budget (the service client's answer to
/// retry_budget_request; metrics/outbound_metrics.hpp exports it).
struct retry_budget_stats {
  /// The budget refuses (retry_budget_config::enabled).
  bool enabled = true;
  /// Primary requests counted, total.
  uint64_t deposits = 0;
  /// Granted withdrawals by extra_kind (index), total.
  std::array<uint64_t, 2> withdrawals{};
  /// Refused withdrawals by extra_kind, total.
  std::array<uint64_t, 2> refusals{};
  /// Granted withdrawals given back by extra_kind, total: a hedge or retry
  /// the pool refused (it never left) or that could not be sent (a retry
  /// whose deadline passed during its backoff).
  std::array<uint64_t, 2> returned{};
  /// Extra attempts the budget would grant now, rounded down (>= 0).
  uint64_t balance = 0;
};

/// The budget (see the header comment).
class retry_budget {
public:
  using time_point = std::chrono::steady_clock::time_point;

  /// Number of slices of the window.
  static constexpr int slices = 10;

  /// The reserve (min_per_second × window) counts up to this many
  /// attempts; more is unbounded in practice.
  static constexpr double max_reserve = 1e12;

  /// An empty window starting at `now`; `cfg` validated before.
  retry_budget(const retry_budget_config& cfg, time_point now);

  /// One primary request at `now`.
  void deposit(time_point now);

  /// One extra attempt of kind `k` at `now`: true (counted) if the window
  /// allows it or the budget is disabled; false (a refusal) otherwise.
  bool try_withdraw(extra_kind k, time_point now);

  /// Gives back a withdrawal of kind `k` made at `made_at` whose attempt
  /// never left (a hedge or retry the pool refused): it stops counting against
  /// the window, if its slice is still in it. Counted in `returned`.
  void refund(extra_kind k, time_point made_at, time_point now);

  /// Extra attempts grantable at `now`, rounded down (an unbounded budget,
  /// disabled, reports its reserve).
  uint64_t balance(time_point now);

  /// The counters and the balance at `now`.
  retry_budget_stats stats(time_point now);

private:
  struct slice_counts {
    uint64_t deposits = 0;
    uint64_t withdrawals = 0;
  };

  /// Moves the window to `now`: every slice that left it is subtracted.
  void advance(time_point now);
  /// percent × deposits + 100 × reserve − 100 × withdrawals over the
  /// window, in millionths of a per cent (exact integers: 29 % of 100
  /// calls is 29, 0.57 % of 10,000 is 57, 0.29/s over 100 s is 29).
  __int128 headroom() const;
  /// True if one more withdrawal fits: headroom ≥ 100 %.
  bool fits_one() const;
  /// The ring slice of time `t` (0 before the origin).
  int64_t index_of(time_point t) const;

  bool enabled_;
  /// retry_budget_config::percent and min_per_second × window in
  /// millionths (the configured decimals, rounded to 1e-6; the reserve
  /// capped at max_reserve attempts).
  int64_t percent_;
  int64_t reserve_;
  std::chrono::nanoseconds slice_len_;
  time_point origin_;
  int64_t current_ = 0;
  std::array<slice_counts, slices> ring_{};
  uint64_t window_deposits_ = 0;
  uint64_t window_withdrawals_ = 0;
  retry_budget_stats totals_;
};

/// retry_budget under a mutex: the one budget of a client, shared by the
/// client actor and its call actors (thread-safe; never blocks for longer
/// than a few counter updates).
class shared_retry_budget {
public:
  shared_retry_budget(const retry_budget_config& cfg,
                      retry_budget::time_point now)
    : budget_(cfg, now) {
  }

  void deposit(retry_budget::time_point now) {
    std::lock_guard<std::mutex> guard{mtx_};
    budget_.deposit(now);
  }

  bool try_withdraw(extra_kind k, retry_budget::time_point now) {
    std::lock_guard<std::mutex> guard{mtx_};
    return budget_.try_withdraw(k, now);
  }

  void refund(extra_kind k, retry_budget::time_point made_at,
              retry_budget::time_point now) {
    std::lock_guard<std::mutex> guard{mtx_};
    budget_.refund(k, made_at, now);
  }

  retry_budget_stats stats(retry_budget::time_point now) {
    std::lock_guard<std::mutex> guard{mtx_};
    return budget_.stats(now);
  }

private:
  std::mutex mtx_;
  retry_budget budget_;
};

} // namespace core
} // namespace outbound
