#pragma once

// What `outbound demo` checks of every feed it runs: that nothing was lost
// and nothing duplicated, except where a reset said so. The demo publishes
// events numbered n = 0, 1, 2, ... (the metadata {"n": n}) and sends event
// n to subject group n % groups; a watcher that follows group g should
// therefore see g, g + groups, g + 2 groups, ... in order. The audit reads
// the numbers a watcher delivers and counts, per incarnation (the
// deliveries between two resets: a reset announces that what came before
// it may be gone, see feed_reset::lost_from):
//
//   duplicated  a number at or below the last one delivered in the same
//               incarnation (a repeat, or a step back: within an
//               incarnation each event comes once, in order);
//   lost        a number of the group skipped between two deliveries of
//               one incarnation (or, for a feed that starts at the
//               ledger's beginning, before its first delivery), unless
//               its publish failed (the publisher's list of failures);
//   pending     numbers of the group after the last delivery of the
//               current incarnation, up to the last published (the tail
//               still in flight when the run ended); for a feed from the
//               ledger's beginning also when it delivered nothing yet.
//               A live feed whose current incarnation delivered nothing
//               has no known position: nothing is pending for it.
//   announced   numbers of the group a reset forgave and no later
//               delivery brought: from the last delivery before the
//               reset to the first delivery after it, or, when nothing
//               was delivered after it, up to the last published (a
//               watcher that resets and stays silent). Not lost — the
//               reset said these may be gone — but counted, so that a
//               reset that hides a larger gap than it should shows up as
//               a number next to lost 0, not as nothing.
//
// Pure and single-threaded: the demo keeps one per watcher behind a mutex
// (its callbacks run on the watcher's actor, the report reads at the end).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace outbound::apps {

/// Counts of one audited feed (see the header comment).
struct delivery_totals {
  uint64_t delivered = 0;
  uint64_t duplicated = 0;
  uint64_t lost = 0;
  uint64_t pending = 0;
  /// Events of another group (never expected: a prefix mismatch) and
  /// events without a number.
  uint64_t foreign = 0;
  uint64_t resets = 0;
  uint64_t announced = 0;

  delivery_totals& operator+=(const delivery_totals& o) {
    delivered += o.delivered;
    duplicated += o.duplicated;
    lost += o.lost;
    pending += o.pending;
    foreign += o.foreign;
    resets += o.resets;
    announced += o.announced;
    return *this;
  }
};

/// The audit of one feed following group `group` of `groups`.
class delivery_audit {
public:
  /// `from_start`: the feed begins at the ledger's first event (a ledger
  /// feed from cursor 0), so the first number expected is `group` itself.
  /// `groups` >= 1, `group` < `groups`.
  delivery_audit(uint64_t group, uint64_t groups, bool from_start)
    : group_(group), groups_(groups < 1 ? 1 : groups), from_start_(from_start) {
    if (from_start_) {
      has_last_ = true;
      last_ = static_cast<int64_t>(group_) - static_cast<int64_t>(groups_);
    }
  }

  /// One delivered event: its number, or -1 when it had none.
  void on_event(int64_t n) {
    if (n < 0 || static_cast<uint64_t>(n) % groups_ != group_) {
      ++totals_.foreign;
      return;
    }
    ++totals_.delivered;
    if (!has_last_ && has_base_) {
      // The first delivery after a reset: what lies between the last
      // delivery before it and this one was forgiven by the reset.
      has_base_ = false;
      for (int64_t m = base_ + static_cast<int64_t>(groups_); m < n;
           m += static_cast<int64_t>(groups_))
        keep(announced_, announced_overflow_, m);
    }
    if (has_last_ && n <= last_) {
      ++totals_.duplicated;
      return;
    }
    if (has_last_)
      for (int64_t m = last_ + static_cast<int64_t>(groups_); m < n;
           m += static_cast<int64_t>(groups_))
        skip(m);
    has_last_ = true;
    last_ = n;
  }

  /// A reset: a new incarnation starts (what it skips is announced).
  void on_reset() {
    ++totals_.resets;
    if (has_last_) {
      has_base_ = true;
      base_ = last_;
    }
    has_last_ = false;
  }

  /// The totals, given the numbers whose publish failed (sorted) and the
  /// last number published (-1: none). Call after the feed stopped.
  delivery_totals finish(const std::vector<int64_t>& failed_sorted,
                         int64_t last_published) const {
    auto failed = [&](int64_t m) {
      return std::binary_search(failed_sorted.begin(), failed_sorted.end(), m);
    };
    auto t = totals_;
    t.lost = skipped_overflow_;
    for (auto m : skipped_)
      if (!failed(m))
        ++t.lost;
    t.announced = announced_overflow_;
    for (auto m : announced_)
      if (!failed(m))
        ++t.announced;
    if (!has_last_ && has_base_)
      for (int64_t m = base_ + static_cast<int64_t>(groups_);
           m <= last_published; m += static_cast<int64_t>(groups_))
        if (!failed(m))
          ++t.announced;
    if (has_last_)
      for (int64_t m = last_ + static_cast<int64_t>(groups_);
           m <= last_published; m += static_cast<int64_t>(groups_))
        if (!failed(m))
          ++t.pending;
    return t;
  }

  /// Skipped numbers kept to be checked against the publish failures; more
  /// are counted as lost.
  static constexpr std::size_t max_skipped = 4096;

private:
  void skip(int64_t m) {
    keep(skipped_, skipped_overflow_, m);
  }

  static void keep(std::vector<int64_t>& list, uint64_t& overflow, int64_t m) {
    if (list.size() < max_skipped)
      list.push_back(m);
    else
      ++overflow;
  }

  uint64_t group_;
  uint64_t groups_;
  bool from_start_;
  bool has_last_ = false;
  int64_t last_ = 0;
  delivery_totals totals_;
  std::vector<int64_t> skipped_;
  uint64_t skipped_overflow_ = 0;
  /// The last delivery before the latest reset, until a delivery follows.
  bool has_base_ = false;
  int64_t base_ = 0;
  std::vector<int64_t> announced_;
  uint64_t announced_overflow_ = 0;
};

} // namespace outbound::apps
