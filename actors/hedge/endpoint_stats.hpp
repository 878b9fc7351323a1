#pragma once

// The endpoint_stats actor (hedge delays, budgets, stats, hooks): a wrapper of
// endpoint_stats_state, one per client. Time is the actor clock (virtual
// time on the test coordinator). Grants of a hedge token are announced to
// the hook subscribers as hedge_fired(key).

#include "actors/hedge/hedge_messages.hpp"

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

namespace outbound {
inline namespace hedge {

/// Public interface of the endpoint_stats actor (what hedging_handles gives
/// out):
///
/// - `latency_quantile_request -> latency_quantile_reply`.
/// - `hedge_stats_request -> hedge_stats_reply`,
///   `hedge_global_stats_request -> hedge_stats_snapshot`,
///   `hedge_all_stats_request -> hedge_all_stats_reply` (every key),
///   `hedge_metrics_request -> hedge_metrics_reply` (every key's counters,
///   tokens and next delay).
/// - `hedge_snapshot_export_request -> hedge_snapshot`: every key's
///   latency sketch (to_json / write_hedge_snapshot_file save it).
/// - `hedge_snapshot_import -> hedge_snapshot_import_result`: starts keys
///   warm from a snapshot; a bad snapshot is rejected whole, naming the
///   field (actors/hedge/hedge_snapshot.hpp).
/// - `hedge_subscribe`: adds a hook subscriber.
///
/// The plans, budget tokens and observations the call actors send are a
/// private extension of this interface (actors/hedge/detail/hedge_actors.hpp);
/// the client spawns the actor.
using endpoint_stats_actor = caf::typed_actor<
  caf::replies_to<latency_quantile_request>::with<latency_quantile_reply>,
  caf::replies_to<hedge_stats_request>::with<hedge_stats_reply>,
  caf::replies_to<hedge_global_stats_request>::with<hedge_stats_snapshot>,
  caf::replies_to<hedge_all_stats_request>::with<hedge_all_stats_reply>,
  caf::replies_to<hedge_metrics_request>::with<hedge_metrics_reply>,
  caf::replies_to<hedge_snapshot_export_request>::with<hedge_snapshot>,
  caf::replies_to<hedge_snapshot_import>::with<hedge_snapshot_import_result>,
  caf::reacts_to<hedge_subscribe>>;

} // namespace hedge
} // namespace outbound
