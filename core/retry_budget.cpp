#include "core/retry_budget.hpp"

#include "core/time.hpp"

#include <algorithm>
#include <cmath>

namespace outbound {
inline namespace core {

const char* to_string(extra_kind k) {
  switch (k) {
    case extra_kind::retry: return "retry";
    case extra_kind::hedge: return "hedge";
  }
  return "unknown";
}

retry_budget::retry_budget(const retry_budget_config& cfg, time_point now)
  : enabled_(cfg.enabled), percent_(cfg.percent),
    reserve_(cfg.min_per_second * cfg.window),
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

bool retry_budget::fits_one() const {
  return 100.0 * static_cast<double>(window_withdrawals_ + 1)
         <= percent_ * static_cast<double>(window_deposits_) + 100.0 * reserve_;
}

double retry_budget::headroom() const {
  return percent_ * static_cast<double>(window_deposits_) / 100.0 + reserve_
         - static_cast<double>(window_withdrawals_);
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
  auto h = enabled_ ? headroom() : std::max(headroom(), reserve_);
  if (h < 1.0)
    return 0;
  // The whole part, without the rounding of the product (29 % of 100 is
  // 29), capped far below uint64's range.
  auto n = static_cast<uint64_t>(std::floor(std::min(h + 1e-9, 1e15)));
  return n;
}

retry_budget_stats retry_budget::stats(time_point now) {
  auto s = totals_;
  s.balance = balance(now);
  return s;
}

} // namespace core
} // namespace outbound
