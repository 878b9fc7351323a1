#include "actors/hedge/delay_rule.hpp"

#include <algorithm>
#include <cmath>

namespace outbound {
inline namespace hedge {

std::optional<delay_choice> choose_hedge_delay(const ddsketch& s,
                                               double percentile,
                                               const delay_search& search) {
  auto q = s.quantile(percentile);
  if (!q || !(*q > 0.0) || !std::isfinite(*q))
    return std::nullopt;
  delay_choice best;
  best.delay = best.quantile = *q;
  const auto bins = s.nonzero_bins();
  const double n = static_cast<double>(s.count());
  if (*q < s.min_indexable() || bins.empty())
    return best;
  // Bins at or below the quantile's, from the top: `above` counts the
  // samples in higher bins, so share(bin) = above / n is the share of calls
  // a delay at that bin's value would hedge.
  const int top = s.index_of(*q);
  auto it = std::upper_bound(bins.begin(), bins.end(), top,
                             [](int i, const auto& b) { return i < b.first; });
  uint64_t above = 0;
  for (auto j = it; j != bins.end(); ++j)
    above += j->second;
  best.share = best.quantile_share = static_cast<double>(above) / n;
  const double lowest = s.min().value_or(0.0);
  const double unit = 1.0 - percentile;
  double best_cost = 1.0;
  // Walk down: the bin holding the quantile first (its own value, as the
  // quantile is clamped into [min, max]), then each lower non-empty bin.
  while (it != bins.begin()) {
    --it;
    const double d = std::max(s.value_of(it->first), lowest);
    const double share = static_cast<double>(above) / n;
    if (share > search.max_share)
      break;
    if (d < best.delay) {
      const double cost
        = d / *q + search.weight * (share - best.quantile_share) / unit;
      if (cost < best_cost) {
        best_cost = cost;
        best.delay = d;
        best.share = share;
      }
    }
    above += it->second;
  }
  return best;
}

} // namespace hedge
} // namespace outbound
