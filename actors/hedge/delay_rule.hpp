#pragma once

// The adaptive hedge delay: the latency quantile at the configured
// percentile ("defer a secondary request until the first has been
// outstanding for more than the 95th-percentile expected latency", Dean &
// Barroso, "The Tail at Scale", CACM 2013), lowered across a flat stretch
// of the latency distribution when the stretch makes a lower delay nearly
// free.
//
// Why lower it. A hedged call ends at about delay + the hedge's own
// latency, so the tail that hedging leaves is the delay plus a body
// latency: every millisecond of delay is a millisecond of tail. The price
// of a lower delay d is its share of hedges, S(d) = P(latency > d). On a
// smooth distribution S rises steeply below the quantile and the quantile
// is the right trade. Where the distribution has a gap just below the
// quantile (5 % of calls ten times slower than the rest: the quantile
// falls between the body's end and the stragglers' start and jumps
// between the two with the few-per-cent swings of the straggler share), a
// delay at the body's end costs a fraction of a percentage point more and
// hedges ten milliseconds earlier.
//
// The rule (a Lagrangian relaxation of "smallest tail for the percentile's
// share of hedges"): among the sketch's bins between the quantile q and
// the lowest delay whose share stays within `max_share`, choose the value
// d minimising
//
//     d / q  +  weight · (S(d) − S(q)) / (1 − percentile)
//
// — the relative delay saved against the relative extra hedges. With
// weight 1 the delay moves only where the distribution is flatter than
// elasticity 1 (one per cent less delay costs less than one per cent more
// hedges): across gaps, never along a smooth body (a lognormal body at its
// p95 has elasticity ≈ 5).
//
// The sketch learns the caller's latency (whichever leg won), which equals
// the primary's below the delay in force; every value this rule compares
// lies at or below the quantile it starts from, where the two agree as
// long as the delay in force is not lower.

#include "actors/hedge/ddsketch.hpp"

#include <optional>

namespace outbound {
inline namespace hedge {

/// What choose_hedge_delay decided, in the sketch's unit (seconds).
struct delay_choice {
  /// The delay to use (<= quantile).
  double delay = 0.0;
  /// The `percentile` quantile of the sketch.
  double quantile = 0.0;
  /// Share of the sketch's samples above `delay` (the expected share of
  /// calls that hedge).
  double share = 0.0;
  /// Share of the sketch's samples above `quantile`.
  double quantile_share = 0.0;
};

/// Parameters of the search (see the header comment).
struct delay_search {
  /// Weight of the relative extra share against the relative delay saved
  /// (> 0). [1.0]
  double weight = 1.0;
  /// Highest share of hedges a lowered delay may cost, as a fraction of
  /// all calls (the caller passes min(1.5 × (1 − percentile), 0.75 × the
  /// hedge budget): a lowered delay never spends the budget the stragglers
  /// need). [0.075]
  double max_share = 0.075;
};

/// The delay for `percentile` (in (0, 1)) over the samples of `s`; nullopt
/// when `s` is empty or its quantile is not > 0. With no lower bin whose
/// cost is smaller, the delay is the quantile itself.
std::optional<delay_choice> choose_hedge_delay(const ddsketch& s,
                                               double percentile,
                                               const delay_search& search);

} // namespace hedge
} // namespace outbound
