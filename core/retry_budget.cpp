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
  : enabled_(cfg.enabled), fraction_(cfg.percent / 100.0),
    reserve_(cfg.min_per_second * cfg.window),
    slice_len_(
      std::max(std::chrono::nanoseconds{1}, from_seconds(cfg.window / slices))),
    origin_(now) {
  totals_.enabled = enabled_;
}

void retry_budget::advance(time_point now) {
  if (now <= origin_)
    return; // before the first slice (a clock that went back): no move
  int64_t index = (now - origin_) / slice_len_;
  if (index <= current_)
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

double retry_budget::headroom() const {
  return fraction_ * static_cast<double>(window_deposits_) + reserve_
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
  if (enabled_ && headroom() < 1.0) {
    ++totals_.refusals[i];
    return false;
  }
  ++ring_[static_cast<std::size_t>(current_ % slices)].withdrawals;
  ++window_withdrawals_;
  ++totals_.withdrawals[i];
  return true;
}

uint64_t retry_budget::balance(time_point now) {
  advance(now);
  auto h = enabled_ ? headroom() : std::max(headroom(), reserve_);
  return h < 1.0 ? 0 : static_cast<uint64_t>(std::floor(h));
}

retry_budget_stats retry_budget::stats(time_point now) {
  auto s = totals_;
  s.balance = balance(now);
  return s;
}

} // namespace core
} // namespace outbound
