#pragma once

// What a coalescing driver reports about itself (the answer to its
// `stats_atom`): batcher, leader-cache and RPC counters. Plain values, no
// CAF, so the metrics exporter (metrics/outbound_metrics.hpp) reads them
// without depending on the actors.

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace outbound {
inline namespace core {

/// Counters of a batcher (for metrics and tests).
struct batcher_stats {
  uint64_t joined = 0;
  uint64_t rejected_backpressure = 0;
  uint64_t rejected_invalid = 0;
  uint64_t batches = 0;
  uint64_t rpcs = 0;
  uint64_t served = 0;
  uint64_t protocol_violations = 0;
  uint64_t failed = 0;
  uint64_t cancelled = 0;
  /// Cancelled waiters whose share was already requested (tsoracle
  /// abandoned_waiters).
  uint64_t abandoned = 0;
  uint64_t rpcs_cancelled = 0;
  /// Answers for RPCs no longer current (cancelled), ignored.
  uint64_t stale_answers = 0;
  /// Cold starts (a waiter joined an idle group) sent at once by the
  /// adaptive rule (coalesce_config::adaptive_cold_start), and those that
  /// waited the flush window.
  uint64_t cold_starts_at_once = 0;
  uint64_t cold_starts_window = 0;
  /// Batches sent while other RPCs of their group were in flight
  /// (coalesce_config::max_rpcs_in_flight, fill_free_slots).
  uint64_t pipelined = 0;
};

/// Counters of a leader_state (for metrics and tests).
struct leader_stats {
  uint64_t seats = 0;
  uint64_t stale_hints = 0;
  uint64_t downgrade_hints = 0;
  uint64_t malformed_hints = 0;
  uint64_t hinted_evictions = 0;
};

/// Upper bounds of the batch-size histogram (waiters per RPC): 1, 2, 4, ...,
/// 4096; one more bucket counts the larger batches (+Inf).
inline constexpr std::array<uint32_t, 13> coalesce_batch_bounds{
  1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096};

/// Counters and state of a driver: the answer to `stats_atom`.
struct coalesce_stats {
  /// Waiters per RPC sent: counts per bucket of coalesce_batch_bounds (NOT
  /// cumulative; the last entry is the +Inf bucket), and their sum.
  std::array<uint64_t, coalesce_batch_bounds.size() + 1> batch_sizes{};
  uint64_t batch_size_sum = 0;
  batcher_stats batches;
  leader_stats leader;
  /// Calls answered (served or failed).
  uint64_t calls = 0;
  uint64_t calls_failed = 0;
  /// Exchanges sent to transports (each discovery attempt).
  uint64_t attempts = 0;
  /// 421 answers followed to a hinted endpoint.
  uint64_t redirects = 0;
  /// Times the cached leader changed endpoint (the first seating, from no
  /// leader, counts too).
  uint64_t leader_changes = 0;
  /// RPCs that failed for good (discovery gave up), all causes.
  uint64_t rpc_errors = 0;
  /// The same by cause: to_string(discovery_error) → count (a bounded key
  /// set: "unreachable", "no_leader", "redirect_cap", ...).
  std::map<std::string, uint64_t> rpc_errors_by_cause;
  /// seq RPCs that ended uncertain (also in rpc_errors_by_cause).
  uint64_t uncertain = 0;
  /// Waiters held now; RPCs in flight now.
  uint64_t held = 0;
  uint64_t in_flight = 0;
  /// The cached leader now ("" when none or expired) and its epoch.
  std::string leader_endpoint;
  std::optional<uint64_t> leader_epoch;
  /// Transports (connection pools) held now, one per endpoint.
  uint64_t transports = 0;
};

} // namespace core
} // namespace outbound
