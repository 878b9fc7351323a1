#pragma once

// Vocabulary of the coalescing driver's pure state: the clock and
// random types, the timestamp layout (tsoracle-client: 46-bit physical
// milliseconds, 18-bit logical) and the values handed to waiters. No CAF,
// no clock reads.

#include "config/coalesce_config.hpp"
#include "core/rng.hpp"

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace outbound {
inline namespace coalesce {

/// Monotonic time of the coalescing state (the actor clock's type; the pure
/// state never reads a clock, it is handed `now`).
using coalesce_time = std::chrono::steady_clock::time_point;

/// Durations of the coalescing state.
using coalesce_duration = std::chrono::nanoseconds;

/// Random generator of the worklist offset and the backoff jitter
/// (the library's one generator, core/rng.hpp).
using coalesce_rng = core::rng;

/// Seconds (config) to a coalesce_duration, rounded to the nanosecond;
/// negative or non-finite values give 0.
coalesce_duration coalesce_seconds(double s);

/// Packs one timestamp: `physical_ms << 18 | logical` (the caller keeps
/// physical_ms <= 2^46-1 and logical <= 2^18-1).
constexpr uint64_t ts_pack(uint64_t physical_ms, uint32_t logical) {
  return (physical_ms << 18) | logical;
}

/// Physical milliseconds of a packed timestamp.
constexpr uint64_t ts_physical(uint64_t ts) {
  return ts >> 18;
}

/// Logical part of a packed timestamp.
constexpr uint32_t ts_logical(uint64_t ts) {
  return static_cast<uint32_t>(ts & ts_logical_max);
}

/// A contiguous run of timestamps within one physical millisecond:
/// `{physical_ms, logical_start .. logical_start + count - 1}`. A GetTs
/// response and a waiter's share of it both have this shape.
struct ts_range {
  uint64_t physical_ms = 0;
  uint32_t logical_start = 0;
  uint32_t count = 0;

  /// The packed timestamps, in order.
  std::vector<uint64_t> expand() const;
  /// First packed timestamp (count >= 1).
  uint64_t first() const {
    return ts_pack(physical_ms, logical_start);
  }
  /// Last packed timestamp (count >= 1).
  uint64_t last() const {
    return ts_pack(physical_ms, logical_start + count - 1);
  }
};

/// A block of a gapless per-key sequence: ordinals [start, start + count).
struct seq_block {
  uint64_t start = 0;
  uint32_t count = 0;
};

/// The two RPCs the driver coalesces.
enum class waiter_kind : uint8_t {
  /// POST /v1/ts {"count":N}: timestamps.
  ts,
  /// POST /v1/seq {"key":K,"count":N}: a block of a gapless sequence.
  seq,
};

/// "ts", "seq".
const char* to_string(waiter_kind k);

} // namespace coalesce
} // namespace outbound
