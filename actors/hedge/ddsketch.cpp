#include "actors/hedge/ddsketch.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

namespace outbound {
inline namespace hedge {

ddsketch::ddsketch(double alpha, std::size_t bin_limit, double min_indexable)
  : alpha_(alpha),
    gamma_((1.0 + alpha) / (1.0 - alpha)),
    inv_log_gamma_(1.0 / std::log((1.0 + alpha) / (1.0 - alpha))),
    bin_limit_(bin_limit),
    min_indexable_(min_indexable) {
  if (!(alpha > 0.0 && alpha < 1.0))
    throw std::invalid_argument("ddsketch: alpha must be in (0, 1)");
  if (bin_limit < 1)
    throw std::invalid_argument("ddsketch: bin_limit must be >= 1");
  if (!(min_indexable > 0.0) || !std::isfinite(min_indexable))
    throw std::invalid_argument("ddsketch: min_indexable must be > 0");
}

int ddsketch::index_of(double x) const {
  return static_cast<int>(std::ceil(std::log(x) * inv_log_gamma_));
}

double ddsketch::value_of(int i) const {
  return 2.0 * std::pow(gamma_, i) / (gamma_ + 1.0);
}

bool ddsketch::insert(double x) {
  if (!std::isfinite(x) || x < 0.0)
    return false;
  if (count_ == 0) {
    min_ = max_ = x;
  } else {
    min_ = std::min(min_, x);
    max_ = std::max(max_, x);
  }
  ++count_;
  if (x < min_indexable_)
    ++zero_count_;
  else
    add_to_bin(index_of(x), 1);
  return true;
}

void ddsketch::add_to_bin(int index, uint64_t n) {
  if (bins_.empty()) {
    bins_.assign(1, n);
    offset_ = index;
    return;
  }
  const long lo = offset_;
  const long hi = offset_ + static_cast<long>(bins_.size()) - 1;
  if (index >= lo && index <= hi) {
    bins_[static_cast<std::size_t>(index - lo)] += n;
    return;
  }
  long new_lo = std::min<long>(lo, index);
  const long new_hi = std::max<long>(hi, index);
  const long limit = static_cast<long>(bin_limit_);
  if (new_hi - new_lo + 1 > limit)
    new_lo = new_hi - limit + 1; // collapse the lowest bins
  std::vector<uint64_t> next(static_cast<std::size_t>(new_hi - new_lo + 1), 0);
  for (long i = lo; i <= hi; ++i) {
    auto c = bins_[static_cast<std::size_t>(i - lo)];
    next[static_cast<std::size_t>(std::max(i, new_lo) - new_lo)] += c;
  }
  next[static_cast<std::size_t>(std::max<long>(index, new_lo) - new_lo)] += n;
  bins_ = std::move(next);
  offset_ = static_cast<int>(new_lo);
}

bool ddsketch::merge(const ddsketch& other) {
  if (other.alpha_ != alpha_ || other.min_indexable_ != min_indexable_)
    return false;
  if (other.count_ == 0)
    return true;
  if (count_ == 0) {
    min_ = other.min_;
    max_ = other.max_;
  } else {
    min_ = std::min(min_, other.min_);
    max_ = std::max(max_, other.max_);
  }
  count_ += other.count_;
  zero_count_ += other.zero_count_;
  // Highest bins first: the range only ever grows downwards afterwards, so
  // a collapse (if any) happens once per bin and the result equals
  // inserting the samples one by one.
  for (std::size_t k = other.bins_.size(); k-- > 0;)
    if (other.bins_[k] != 0)
      add_to_bin(other.offset_ + static_cast<int>(k), other.bins_[k]);
  return true;
}

std::optional<double> ddsketch::min() const {
  if (count_ == 0)
    return std::nullopt;
  return min_;
}

std::optional<double> ddsketch::max() const {
  if (count_ == 0)
    return std::nullopt;
  return max_;
}

std::optional<double> ddsketch::quantile(double q) const {
  if (count_ == 0 || !(q >= 0.0 && q <= 1.0))
    return std::nullopt;
  if (q == 0.0)
    return min_;
  if (q == 1.0)
    return max_;
  // rank = ⌈q·n⌉ (rust-sketches-ddsketch #3: not ⌊q·(n−1)+1⌋). q·n is
  // shrunk by a relative 1e-12 first so that 0.3·10 = 3.0000000000000004
  // still gives rank 3.
  const double n = static_cast<double>(count_);
  const double r = q * n;
  auto rank = static_cast<uint64_t>(std::ceil(r - r * 1e-12));
  rank = std::clamp<uint64_t>(rank, 1, count_);
  double estimate;
  if (rank <= zero_count_) {
    estimate = 0.0;
  } else {
    uint64_t seen = zero_count_;
    estimate = max_;
    for (std::size_t k = 0; k < bins_.size(); ++k) {
      seen += bins_[k];
      if (seen >= rank) {
        estimate = value_of(offset_ + static_cast<int>(k));
        break;
      }
    }
  }
  return std::clamp(estimate, min_, max_);
}

std::optional<double> ddsketch::union_quantile(const ddsketch& a,
                                               const ddsketch& b, double q) {
  if (a.alpha_ != b.alpha_ || a.min_indexable_ != b.min_indexable_)
    return std::nullopt;
  if (b.count_ == 0)
    return a.quantile(q);
  if (!(q >= 0.0 && q <= 1.0))
    return std::nullopt;
  // An empty `a` still lends the merge its bin limit (b's bins go in
  // through a's add_to_bin), so it takes the general path below.
  const double lo_x = a.count_ > 0 ? std::min(a.min_, b.min_) : b.min_;
  const double hi_x = a.count_ > 0 ? std::max(a.max_, b.max_) : b.max_;
  if (q == 0.0)
    return lo_x;
  if (q == 1.0)
    return hi_x;
  const uint64_t count = a.count_ + b.count_;
  const uint64_t zeros = a.zero_count_ + b.zero_count_;
  // The rank as quantile() takes it.
  const double n = static_cast<double>(count);
  const double r = q * n;
  auto rank = static_cast<uint64_t>(std::ceil(r - r * 1e-12));
  rank = std::clamp<uint64_t>(rank, 1, count);
  if (rank <= zeros)
    return std::clamp(0.0, lo_x, hi_x);
  // The merge's bins: the union of both ranges, with everything below
  // `floor` collapsed into it when the union is wider than a's bin limit
  // (merge() adds b's highest bin first, so the range's top is fixed
  // before any lower bin arrives and the collapse floor is hi - limit + 1).
  auto range = [](const ddsketch& s, long& lo, long& hi) {
    if (s.bins_.empty())
      return false;
    lo = s.offset_;
    hi = s.offset_ + static_cast<long>(s.bins_.size()) - 1;
    return true;
  };
  long alo = 0, ahi = -1, blo = 0, bhi = -1;
  bool has_a = range(a, alo, ahi);
  bool has_b = range(b, blo, bhi);
  if (!has_a && !has_b)
    return std::clamp(a.max_ > b.max_ ? a.max_ : b.max_, lo_x, hi_x);
  long lo = has_a && has_b ? std::min(alo, blo) : has_a ? alo : blo;
  long hi = has_a && has_b ? std::max(ahi, bhi) : has_a ? ahi : bhi;
  const long limit = static_cast<long>(a.bin_limit_);
  long floor = hi - lo + 1 > limit ? hi - limit + 1 : lo;
  auto at = [](const ddsketch& s, bool has, long slo, long shi, long i) {
    return has && i >= slo && i <= shi
             ? s.bins_[static_cast<std::size_t>(i - slo)]
             : uint64_t{0};
  };
  uint64_t seen = zeros;
  double estimate = hi_x;
  for (long i = lo; i <= hi; ++i) {
    seen += at(a, has_a, alo, ahi, i) + at(b, has_b, blo, bhi, i);
    if (seen >= rank) {
      estimate = a.value_of(static_cast<int>(std::max(i, floor)));
      break;
    }
  }
  return std::clamp(estimate, lo_x, hi_x);
}

void ddsketch::clear() {
  bins_.clear();
  offset_ = 0;
  zero_count_ = 0;
  count_ = 0;
  min_ = max_ = 0.0;
}

std::vector<std::pair<int, uint64_t>> ddsketch::nonzero_bins() const {
  std::vector<std::pair<int, uint64_t>> out;
  for (std::size_t k = 0; k < bins_.size(); ++k)
    if (bins_[k] != 0)
      out.emplace_back(offset_ + static_cast<int>(k), bins_[k]);
  return out;
}

void ddsketch::assign(uint64_t zero_count, double min, double max,
                      const std::vector<std::pair<int, uint64_t>>& bins) {
  clear();
  // Highest index first, as merge() does: a collapse (if any) happens once.
  auto sorted = bins;
  std::sort(sorted.begin(), sorted.end());
  for (auto i = sorted.rbegin(); i != sorted.rend(); ++i) {
    if (i->second == 0)
      continue;
    add_to_bin(i->first, i->second);
    count_ += i->second;
  }
  zero_count_ = zero_count;
  count_ += zero_count;
  if (count_ > 0) {
    min_ = min;
    max_ = max;
  }
}

// -- windowed_sketch ----------------------------------------------------------

windowed_sketch::windowed_sketch(double window, hedge_time start, double alpha,
                                 std::size_t bin_limit)
  : window_(window),
    start_(start),
    current_(alpha, bin_limit),
    previous_(alpha, bin_limit) {
  if (!(window > 0.0) || !std::isfinite(window))
    throw std::invalid_argument("windowed_sketch: window must be > 0");
}

void windowed_sketch::rotate(hedge_time now) {
  const double elapsed = seconds_between(start_, now);
  if (elapsed < window_)
    return;
  if (elapsed < 2.0 * window_) {
    previous_ = std::move(current_);
    current_ = ddsketch(previous_.alpha(), previous_.bin_limit());
    // The new window starts where the old one ended, not at `now`: from
    // `now` a previous window spanning up to 2W was kept another W, so a
    // sample lived up to 3W.
    start_ += std::chrono::round<hedge_time::duration>(
      std::chrono::duration<double>(window_));
  } else {
    current_.clear();
    previous_.clear();
    start_ = now;
  }
}

bool windowed_sketch::insert(double x, hedge_time now) {
  rotate(now);
  return current_.insert(x);
}

std::optional<double> windowed_sketch::quantile(double q, hedge_time now) {
  rotate(now);
  // Read over both windows in place: a merged copy cost an allocation and
  // a pass per hedged call.
  return ddsketch::union_quantile(previous_, current_, q);
}

ddsketch windowed_sketch::merged(hedge_time now) {
  rotate(now);
  ddsketch both = previous_;
  both.merge(current_);
  return both;
}

void windowed_sketch::reset_to(ddsketch s, hedge_time now) {
  current_ = std::move(s);
  previous_.clear();
  start_ = now;
}

uint64_t windowed_sketch::count(hedge_time now) {
  rotate(now);
  return current_.count() + previous_.count();
}

} // namespace hedge
} // namespace outbound
