#pragma once

// Vocabulary shared by the feed watcher's pure state machines, its actor
// and the metrics: the delivery mode, the clock type, the reasons of a
// reset, of a drain error and of an unreadable frame, and a watcher's
// counters (feed_stats). No CAF, no Asio, no clock reads.

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace outbound {
inline namespace core {

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
  /// ephemeral: the first reset of a watcher started as the feed's new
  /// owner (feed_watcher_options::takeover, set by a feed group after a
  /// takeover): events published while no process owned the feed are
  /// lost, (last_seq, new_seq] as for `reconnect` (last_seq nullopt: from
  /// the feed's start, nothing was received by this watcher).
  takeover,
};

/// Number of reset_cause values (the size of per-cause counter arrays).
inline constexpr std::size_t reset_cause_count = 10;
static_assert(static_cast<std::size_t>(reset_cause::takeover) + 1
                == reset_cause_count,
              "reset_cause_count must follow reset_cause");

/// "retention", "resync", "epoch_changed", "reconnect", "inferred", "wake",
/// "gap", "rewind", "undeliverable", "takeover".
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

/// State and counters of one watcher: the answer to `stats_atom` and to
/// `stop_atom`.
struct feed_stats {
  /// Ledger cursor (the id of the last delivered event).
  int64_t cursor = 0;
  /// Last in-frame seq received, acknowledged or not (a resume takes
  /// `acked_seq`).
  std::optional<int64_t> last_seq;
  /// Ledger: the highest event id the hub announced (a ledger hello's
  /// cursor, wake hints); nullopt before the first. max(head - cursor, 0) is
  /// the known lag in events.
  std::optional<int64_t> head;
  /// A WebSocket session is open and its model is running.
  bool connected = false;
  feed_mode mode = feed_mode::none;
  std::string client_id;
  std::optional<std::string> epoch;
  /// Watchers with a replay path: the acknowledged ledger position and the
  /// ledger epoch it belongs to (the replay pages', else the ledger
  /// hellos'), a progress report's `cursor` and `ledger_epoch`: the
  /// feed_config::cursor / resume_ledger_epoch of a watcher that goes on
  /// from here. A checkpoint is the pair: resumed with the cursor alone, a
  /// replaced ledger whose head passed it would be followed from there.
  /// Unlike `cursor`, while a rewind waits for its reset to be
  /// acknowledged it is still the old ledger's. Before any
  /// acknowledgement: feed_config::cursor and resume_ledger_epoch.
  /// nullopt: no replay path (the epoch also when the hub sends none).
  std::optional<int64_t> acked_cursor;
  std::optional<std::string> acked_ledger_epoch;
  /// In-frame: the last seq the subscriber acknowledged and the hub epoch
  /// it was read in (an acknowledged reset moves it where delivery
  /// continues; before any delivery, feed_config::resume_last_seq and
  /// resume_epoch). With `client_id` they are catchup's resume key, the
  /// feed_config::resume_last_seq / resume_epoch of a watcher that goes
  /// on from here. nullopt: none yet.
  std::optional<int64_t> acked_seq;
  std::optional<std::string> acked_epoch;
  /// WebSocket sessions opened.
  uint64_t connects = 0;
  /// Opened sessions that ended.
  uint64_t disconnects = 0;
  /// Sessions dialled after the first one.
  uint64_t reconnects = 0;
  /// Keepalive pings sent.
  uint64_t keepalives = 0;
  /// Sessions closed as a dead peer.
  uint64_t peer_timeouts = 0;
  /// Resets delivered (or, for a ledger reset, fired).
  uint64_t resets = 0;
  /// The same by cause, indexed by reset_cause (sums to `resets`).
  std::array<uint64_t, reset_cause_count> resets_by_cause{};
  /// Replay pages the watcher could not read or use: unparseable or
  /// over-cap bodies (each page of a narrowing counts), bad pages, full
  /// pages that did not move the cursor. Sum of `drain_errors_by_reason`.
  uint64_t drain_errors = 0;
  /// The same by reason, indexed by drain_error_reason.
  std::array<uint64_t, drain_error_reason_count> drain_errors_by_reason{};
  /// Wakes that started no drain: one was in flight with one already
  /// pending, a re-drain / retry backoff was armed and the wake did not
  /// raise the target, or the wake announced the cursor already reached
  /// (including wakes dropped at intake, see `wakes`).
  uint64_t wakes_coalesced = 0;
  /// Wake frames received in the ledger model: those the drain saw plus
  /// those dropped at intake (on the io thread, as repeats of a target the
  /// drain would coalesce; they are counted in wakes_coalesced too).
  uint64_t wakes = 0;
  /// Event frames (catchup / ephemeral) that could not be read (not a JSON
  /// object, too deep, over the memory bound, a bad number, over
  /// `ws_max_frame_bytes`): each is delivered as an undeliverable
  /// reset, unless catchup had already delivered the seq it shows.
  uint64_t unreadable_frames = 0;
  /// The same by reason, indexed by frame_error_reason (sums to
  /// `unreadable_frames`).
  std::array<uint64_t, frame_error_reason_count>
    unreadable_frames_by_reason{};
  /// WebSocket messages over `feed_config::ws_max_frame_bytes`, discarded
  /// by the session (any mode; the session stays open). Catchup and
  /// ephemeral also count them at `unreadable_frames` (one undeliverable
  /// reset each, reason "over_cap: ..."); the ledger takes each for a wake
  /// without a hint. Also counted: sessions the session ended (and the
  /// watcher reconnected) with reason too_large and a known size -- a
  /// message that announced more than `ws_max_discard_bytes`, or one over
  /// `ws_max_frame_bytes` that did not end within `ws_discard_timeout`
  /// (their reset: feed_config's ws_max_discard_bytes). Not counted: a
  /// message within the cap past its budget (a `timeout` failure), one of
  /// more than 64 fragments, a frame announcing 2^63 bytes or more.
  uint64_t oversized_frames = 0;
  /// The feed was reached at least once: a replay page was read (a watcher
  /// with a replay path), or a WebSocket session opened (ws-only).
  bool reached = false;
  /// Replay calls that failed (unreachable, non-JSON, HTTP error); retried
  /// on the next tick with the cursor untouched.
  uint64_t replay_errors = 0;
  /// Deliveries of events / resets the subscriber answered with an error
  /// (a callback threw).
  uint64_t event_callback_errors = 0;
  uint64_t reset_callback_errors = 0;
  /// Events acknowledged by the subscriber.
  uint64_t events_delivered = 0;
  /// Replay pages received.
  uint64_t pages = 0;
  /// Sessions closed because undelivered in-frame events piled up.
  uint64_t overflows = 0;
  /// The fence deadline in force (the actor clock; `fence_atom`); nullopt:
  /// no gate.
  std::optional<feed_time> fence_deadline;
  /// A delivery waits at the fence gate now (its deadline has passed).
  bool fence_holding = false;
  /// Deliveries (a batch is one) the fence gate kept from starting, each
  /// counted once however long it waited.
  uint64_t fence_held_deliveries = 0;
  /// Total time deliveries waited at the fence gate, a hold in progress
  /// included.
  feed_duration fence_held_time{0};
};

} // namespace core
} // namespace outbound
