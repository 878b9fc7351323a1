#pragma once

// Vocabulary shared by the feed watcher's pure state machines and its actor:
// the delivery mode, the clock type and the reasons of a reset. No CAF, no
// Asio, no clock reads.

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace outbound {

/// Monotonic time of the feed machines (the actor clock's type; the pure
/// state never reads a clock, it is handed `now`).
using feed_time = std::chrono::steady_clock::time_point;

/// Durations of the feed machines.
using feed_duration = std::chrono::nanoseconds;

/// The delivery model a watcher runs (hyperdjango docs, "Delivery models").
enum class feed_mode : uint8_t {
  /// No model yet: a ws-only watcher waiting for the hub's hello.
  none,
  /// Replay pages are the source of truth; frames only wake the drain.
  ledger,
  /// Events ride in frames; resume by (client_id, last_seq, epoch).
  catchup,
  /// Events ride in frames; every (re)connect is a reset.
  ephemeral,
};

/// "none", "ledger", "catchup", "ephemeral".
const char* to_string(feed_mode m);

/// Why a reset was delivered (one value per cause, so an application and a
/// metric label can tell them apart).
enum class reset_cause : uint8_t {
  /// ledger: the cursor fell below the hub's retention floor; the range
  /// (from_cursor, to_cursor] is gone.
  retention,
  /// catchup: the hub asked for a resync (first connect, evicted past
  /// last_seq, unknown client id).
  resync,
  /// catchup: the hub's epoch changed (it restarted: a fresh seq space).
  epoch_changed,
  /// ephemeral: a (re)connect; anything published while away is lost.
  reconnect,
  /// A ws-only hub sent data without a hello: ephemeral was inferred.
  inferred,
  /// ephemeral, ws-only: the hub sent a wake frame (state changed, refetch).
  wake,
  /// catchup, every subject followed (no prefixes): an event frame skipped
  /// seqs; (last_seq, new_seq] were never received.
  gap,
  /// ledger: the hub's ledger is a new incarnation (its epoch changed, or
  /// its head is below the watcher's cursor: a restart with a fresh ledger,
  /// a restore from a backup). The old cursor means nothing there: the
  /// watcher starts again from the new ledger's start, and the application
  /// rebuilds its state (the same "revision rewound" case as etcd/Kubernetes
  /// watchers after a restore, kubernetes/kubernetes#107457).
  rewind,
  /// Any mode: one event the watcher cannot read (a replay page that does
  /// not parse, nests too deep or exceeds the response cap even at limit 1;
  /// an event frame that is not a JSON object). The "poison pill" of a
  /// Kafka consumer, surfaced instead of stalling: the application decides
  /// (fetch it another way, or skip it). Ledger: `event_id` names it, the
  /// lost range is (cursor before it, event_id]; in-frame: the seq is
  /// unknown. `reason` says why it could not be read.
  undeliverable,
};

/// Number of reset_cause values (the size of per-cause counter arrays).
inline constexpr std::size_t reset_cause_count = 9;
static_assert(static_cast<std::size_t>(reset_cause::undeliverable) + 1
                == reset_cause_count,
              "reset_cause_count must follow reset_cause");

/// "retention", "resync", "epoch_changed", "reconnect", "inferred", "wake",
/// "gap", "rewind", "undeliverable".
const char* to_string(reset_cause c);

/// Why a replay page counted at drain_errors (one metric label each).
enum class drain_error_reason : uint8_t {
  /// A 2xx body that is not JSON, or JSON nested deeper than the parser's
  /// limit: the page is narrowed to isolate the event.
  unparseable,
  /// A body over the replay response cap: the page is narrowed.
  over_cap,
  /// Not a JSON object, or ids above the cursor that go backward (the
  /// ledger's order is broken): never narrowed, retried on the next tick.
  bad_page,
  /// Events without an id on a page that does not move the cursor: the
  /// page is narrowed to isolate the event.
  bad_event,
  /// Repeated ids or more events than the limit (delivered once each).
  anomaly,
  /// A full page that did not move the cursor, or the same rewind
  /// evidence twice.
  stalled,
};

/// Number of drain_error_reason values.
inline constexpr std::size_t drain_error_reason_count = 6;
static_assert(static_cast<std::size_t>(drain_error_reason::stalled) + 1
                == drain_error_reason_count,
              "drain_error_reason_count must follow drain_error_reason");

/// "unparseable", "over_cap", "bad_page", "bad_event", "anomaly", "stalled".
const char* to_string(drain_error_reason r);

/// Why an in-frame message (catchup / ephemeral) counted at
/// feed_stats::unreadable_frames could not be read (one metric label
/// each).
enum class frame_error_reason : uint8_t {
  /// Not JSON (RFC 8259 syntax, invalid UTF-8, empty).
  unparseable,
  /// Nested deeper than feed_config::json_max_depth.
  too_deep,
  /// Its parsed form would exceed the frame memory bound
  /// (frame_json_limits of actors/feed/feed_frames.hpp).
  memory_bound,
  /// A number outside IEEE 754 binary64, or an integer beyond int64/uint64
  /// that binary64 cannot hold exactly.
  bad_number,
  /// JSON, but not an object.
  not_an_object,
  /// A message over feed_config::ws_max_frame_bytes (discarded or refused
  /// by the session).
  over_cap,
};

/// Number of frame_error_reason values.
inline constexpr std::size_t frame_error_reason_count = 6;
static_assert(static_cast<std::size_t>(frame_error_reason::over_cap) + 1
                == frame_error_reason_count,
              "frame_error_reason_count must follow frame_error_reason");

/// "unparseable", "too_deep", "memory_bound", "bad_number",
/// "not_an_object", "over_cap".
const char* to_string(frame_error_reason r);

/// Seconds to nanoseconds, rounded; negative and non-finite give 0.
feed_duration feed_seconds(double seconds);

} // namespace outbound
