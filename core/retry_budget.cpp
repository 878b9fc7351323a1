#include "core/retry_budget.hpp"

#include "core/time.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace outbound {
inline namespace core {

const char* to_string(extra_kind k) {
  switch (k) {
    case extra_kind::retry: return "retry";
    case extra_kind::hedge: return "hedge";
  }
  return "unknown";
}

namespace {

/// `v` in millionths, rounded to the nearest: the decimal a user wrote
/// (0.57, 0.29 × 100) is exact there, where its double is a hair below.
int64_t millionths(double v) {
  return static_cast<int64_t>(std::llround(v * 1e6));
}

/// 100 % in millionths of a per cent.
constexpr __int128 hundred_percent = 100'000'000;

} // namespace

retry_budget::retry_budget(const retry_budget_config& cfg, time_point now)
  : enabled_(cfg.enabled), percent_(millionths(cfg.percent)),
    reserve_(
      millionths(std::min(cfg.min_per_second * cfg.window, max_reserve))),
    slice_len_(
      std::max(std::chrono::nanoseconds{1}, from_seconds(cfg.window / slices))),
    origin_(now) {
  totals_.enabled = enabled_;
}

int64_t retry_budget::index_of(time_point t) const {
  return t <= origin_ ? 0 : (t - origin_) / slice_len_;
}

void retry_budget::advance(time_point now) {
  int64_t index = index_of(now);
  if (index <= current_) // the same slice, or a clock that went back

    return;
  // Slices current_+1 .. index start empty; the ones they replace in the
  // ring (at most all of them) leave the window.
  int64_t first = std::max(current_ + 1, index - (slices - 1));
  if (index - current_ >= slices) {
    ring_ = {};
    window_deposits_ = 0;
    window_withdrawals_ = 0;
  } else {
    for (int64_t i = first; i <= index; ++i) {
      auto& s = ring_[static_cast<std::size_t>(i % slices)];
      window_deposits_ -= s.deposits;
      window_withdrawals_ -= s.withdrawals;
      s = slice_counts{};
    }
  }
  current_ = index;
}

__int128 retry_budget::headroom() const {
  return static_cast<__int128>(percent_) * window_deposits_
         + 100 * static_cast<__int128>(reserve_)
         - hundred_percent * window_withdrawals_;
}

bool retry_budget::fits_one() const {
  return headroom() >= hundred_percent;
}

void retry_budget::deposit(time_point now) {
  advance(now);
  ++ring_[static_cast<std::size_t>(current_ % slices)].deposits;
  ++window_deposits_;
  ++totals_.deposits;
}

bool retry_budget::try_withdraw(extra_kind k, time_point now) {
  advance(now);
  auto i = static_cast<std::size_t>(k);
  if (enabled_ && !fits_one()) {
    ++totals_.refusals[i];
    return false;
  }
  ++ring_[static_cast<std::size_t>(current_ % slices)].withdrawals;
  ++window_withdrawals_;
  ++totals_.withdrawals[i];
  return true;
}

void retry_budget::refund(extra_kind k, time_point made_at, time_point now) {
  advance(now);
  ++totals_.returned[static_cast<std::size_t>(k)];
  auto index = index_of(made_at);
  if (index > current_ || index <= current_ - slices)
    return; // its slice left the window: nothing counts against it
  auto& s = ring_[static_cast<std::size_t>(index % slices)];
  if (s.withdrawals == 0)
    return;
  --s.withdrawals;
  --window_withdrawals_;
}

uint64_t retry_budget::balance(time_point now) {
  advance(now);
  auto h = headroom();
  if (!enabled_)
    h = std::max(h, 100 * static_cast<__int128>(reserve_));
  if (h < hundred_percent)
    return 0;
  return static_cast<uint64_t>(h / hundred_percent);
}

retry_budget_stats retry_budget::stats(time_point now) {
  auto s = totals_;
  s.balance = balance(now);
  return s;
}

} // namespace core
} // namespace outbound
