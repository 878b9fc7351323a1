#pragma once

// DDSketch: a fully mergeable quantile sketch with relative-error
// guarantees (Masson, Rim, Lee, "DDSketch: A Fast and Fully-Mergeable
// Quantile Sketch with Relative-Error Guarantees", PVLDB 12(12), 2019), and
// the sliding window of two sketches that learns a key's hedge delay
// (httpx-hedged sketch/_windowed.py; hedge-python sketch/_ddsketch.py).
//
// Mapping: γ = (1+α)/(1−α); a value x > 0 goes to bin i = ⌈log_γ x⌉, i.e.
// γ^(i−1) < x ≤ γ^i, and bin i is represented by 2γ^i/(γ+1), which is within
// a relative error α of every value in the bin. Store: a dense array of
// counts over a contiguous range of bin indexes holding at most `bin_limit`
// bins; when a value would widen the range past the limit, the lowest bins
// are collapsed into the lowest kept one (the paper's collapsing store,
// §2.2: quantiles above the collapsed ones keep the α guarantee, the low
// tail loses it). Values in [0, min_indexable) go to a zero bucket.
//
// Values are seconds (any unit works; min_indexable is in the same unit).

#include "core/hedge_types.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace outbound {
inline namespace hedge {

/// The DDSketch (see the header comment). Not thread-safe; plain value.
class ddsketch {
public:
  /// Default relative accuracy α. [0.01]
  static constexpr double default_alpha = 0.01;
  /// Default bound on the store's bins. [2048] At α = 1 % a bin spans a
  /// factor γ ≈ 1.0202, so 2048 bins cover ≈ 17.7 decades before collapsing
  /// (1 ns to 1000 s is 12 decades, ≈ 1382 bins); memory ≤ 16 KiB.
  static constexpr std::size_t default_bin_limit = 2048;
  /// Default smallest indexable value: smaller values (1 ns) are counted in
  /// the zero bucket. [1e-9]
  static constexpr double default_min_indexable = 1e-9;

  /// `alpha` in (0, 1), `bin_limit` >= 1, `min_indexable` > 0; throws
  /// std::invalid_argument otherwise (a programming error, not config).
  explicit ddsketch(double alpha = default_alpha,
                    std::size_t bin_limit = default_bin_limit,
                    double min_indexable = default_min_indexable);

  /// Adds `x` (>= 0, finite). Returns false (and ignores it) for a negative,
  /// NaN or infinite value.
  bool insert(double x);

  /// Adds every sample of `other`. Returns false (and changes nothing) when
  /// the two sketches map values differently (different α or
  /// min_indexable); merging equals inserting all samples of both.
  bool merge(const ddsketch& other);

  /// The inverse empirical CDF: an estimate of the smallest sample x such
  /// that at least a fraction q of the samples are ≤ x (rank ⌈q·n⌉, at
  /// least 1). q = 0 returns the exact minimum, q = 1 the exact maximum;
  /// every estimate is clamped into [min, max]. nullopt when empty or when
  /// q is outside [0, 1] (or NaN).
  std::optional<double> quantile(double q) const;

  /// quantile(q) of the merge of `a` and `b`, without building the merge:
  /// the same value as `ddsketch m = a; m.merge(b); m.quantile(q)`
  /// (including the collapse of the lowest bins when the union spans more
  /// than bin_limit), read in one pass over both bin arrays with no
  /// allocation. nullopt when both are empty, q is outside [0, 1], or the
  /// two map values differently (as merge refuses).
  static std::optional<double> union_quantile(const ddsketch& a,
                                              const ddsketch& b, double q);

  /// Samples inserted (zero bucket included).
  uint64_t count() const {
    return count_;
  }

  /// Samples counted in the zero bucket (values below min_indexable).
  uint64_t zero_count() const {
    return zero_count_;
  }

  /// Exact minimum and maximum; nullopt when empty.
  std::optional<double> min() const;
  std::optional<double> max() const;

  /// Bins the store currently holds (<= bin_limit()).
  std::size_t bin_count() const {
    return bins_.size();
  }

  std::size_t bin_limit() const {
    return bin_limit_;
  }

  double alpha() const {
    return alpha_;
  }

  /// Removes every sample (keeps the parameters).
  void clear();

  /// Smallest indexable value (values below it go to the zero bucket).
  double min_indexable() const {
    return min_indexable_;
  }

  /// The non-empty bins as (index, count), ascending by index: the sparse
  /// form a snapshot stores (actors/hedge/hedge_snapshot.hpp).
  std::vector<std::pair<int, uint64_t>> nonzero_bins() const;

  /// Replaces every sample with the given state: `zero_count` samples in
  /// the zero bucket, `bins` as (index, count) (any order), exact `min` and
  /// `max`; count() becomes zero_count plus the bins' counts. The caller
  /// validates (hedge_snapshot does: bounded indexes and counts, min <=
  /// max); bins wider than bin_limit collapse as inserts do.
  void assign(uint64_t zero_count, double min, double max,
              const std::vector<std::pair<int, uint64_t>>& bins);

  /// Bin index of a value >= min_indexable (exposed for tests).
  int index_of(double x) const;

  /// Representative value of bin `i`: 2γ^i/(γ+1).
  double value_of(int i) const;

private:
  void add_to_bin(int index, uint64_t n);

  double alpha_;
  double gamma_;
  double inv_log_gamma_;
  std::size_t bin_limit_;
  double min_indexable_;
  /// counts of bins offset_, offset_+1, ...
  std::vector<uint64_t> bins_;
  int offset_ = 0;
  uint64_t zero_count_ = 0;
  uint64_t count_ = 0;
  double min_ = 0.0;
  double max_ = 0.0;
};

/// Two DDSketches over a sliding window (current + previous), rotated
/// lazily with an explicit `now`: when the current window started
/// `elapsed` ago, elapsed < W keeps both; W <= elapsed < 2W moves current
/// to previous (and starts a new current window where the old one ended,
/// W after its start); elapsed >= 2W clears both (two idle windows) and
/// starts the current one at `now`. Quantiles are taken over the merge of
/// both, so the estimate covers between W and 2W of history: a sample
/// counts for at least W and less than 2W.
class windowed_sketch {
public:
  /// `window` in seconds (> 0), starting at `start`; the sketch parameters
  /// as in ddsketch.
  windowed_sketch(double window, hedge_time start,
                  double alpha = ddsketch::default_alpha,
                  std::size_t bin_limit = ddsketch::default_bin_limit);

  /// Rotates as of `now`, then records `x` (seconds) in the current window.
  /// False for a value ddsketch rejects.
  bool insert(double x, hedge_time now);

  /// Rotates as of `now`, then the quantile of current ∪ previous; nullopt
  /// when both are empty.
  std::optional<double> quantile(double q, hedge_time now);

  /// Rotates as of `now`, then the samples in current ∪ previous.
  uint64_t count(hedge_time now);

  /// The lazy rotation (called by the other members).
  void rotate(hedge_time now);

  /// Rotates as of `now`, then current ∪ previous as one sketch.
  ddsketch merged(hedge_time now);

  /// Replaces both windows: `s` becomes the current window, starting at
  /// `now`; the previous window is emptied. `s` must have this window's
  /// alpha and bin limit (a snapshot import checks).
  void reset_to(ddsketch s, hedge_time now);

  const ddsketch& current() const {
    return current_;
  }

  const ddsketch& previous() const {
    return previous_;
  }

  double window() const {
    return window_;
  }

private:
  double window_;
  hedge_time start_;
  ddsketch current_;
  ddsketch previous_;
};

} // namespace hedge
} // namespace outbound
