#pragma once

// What a feed watcher delivers to the application (docs/ARCHITECTURE.md
// "Delivery guarantees of a feed") and what it reports when asked.
// The subscriber acknowledges every delivery; the watcher sends the next one
// only after the acknowledgement (at-least-once, in order, with
// backpressure).

#include "actors/feed/feed_types.hpp"
#include "actors/messages.hpp"
#include "protocol/ws_session.hpp"

#include <boost/json/value.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <string>

namespace outbound {

/// One event, delivered in feed order.
struct feed_event {
  /// The model that delivered it (ledger, catchup or ephemeral).
  feed_mode mode = feed_mode::ledger;
  /// The event: an element of a replay page's events array (ledger), or the
  /// whole event frame (catchup, ephemeral).
  boost::json::value event;
  /// ledger: the event's id (the cursor after it is delivered), if integer.
  std::optional<int64_t> id;
  /// catchup / ephemeral: the frame's seq, if integer.
  std::optional<int64_t> seq;
};

/// A range of events that can no longer be delivered: the application
/// resyncs from the producer. Never a silent gap.
struct feed_reset {
  feed_mode mode = feed_mode::ledger;
  reset_cause cause = reset_cause::retention;
  /// ledger: the cursor the watcher had; events after it are lost ...
  std::optional<int64_t> from_cursor;
  /// ... up to and including this one (the hub's new floor); nullopt when
  /// the page did not say. Delivery continues after it.
  std::optional<int64_t> to_cursor;
  /// catchup / ephemeral: the last seq received before the reset (nullopt:
  /// none yet).
  std::optional<int64_t> last_seq;
  /// catchup / ephemeral: the hub's seq after the reset (hello.seq).
  std::optional<int64_t> new_seq;
  std::optional<std::string> old_epoch;
  std::optional<std::string> new_epoch;
  /// What was lost, in the feed's own positions (ledger ids for a ledger
  /// reset, seqs for catchup / ephemeral): events after `lost_from` up to
  /// and including `lost_to` were not delivered, so an application can
  /// resync just that range. `lost_from` nullopt: from the feed's start
  /// (nothing was received before). `lost_to` nullopt: the end is unknown
  /// (a rewind, an epoch change, an inferred or wake reset): resync
  /// everything after `lost_from`. By cause:
  /// - retention: (from_cursor, to_cursor];
  /// - rewind: (from_cursor, unknown] of the old incarnation; delivery
  ///   starts again at the new ledger's start;
  /// - resync, reconnect (same epoch): (last_seq, new_seq];
  /// - gap: (last_seq, new_seq];
  /// - epoch_changed, inferred, wake: (last_seq, unknown];
  /// - undeliverable, ledger: (from_cursor, event_id] -- the one event the
  ///   watcher could not read (with prefixes the ids between are other
  ///   subjects'); in-frame: (last_seq, event_id] when the frame still
  ///   shows its seq, else (last_seq, unknown].
  std::optional<int64_t> lost_from;
  std::optional<int64_t> lost_to;
  /// undeliverable, ledger: the id of the event that could not be read
  /// (found by narrowing the page to one event); the cursor moves past it
  /// once this reset is acknowledged. In-frame: the frame's seq, when its
  /// text still shows it.
  std::optional<int64_t> event_id;
  /// undeliverable: why it could not be read, "<drain_error_reason>: <the
  /// client's detail>" (e.g. "over_cap: response body over
  /// max_response_bytes (33554432 bytes)"); empty for other causes.
  std::string reason;
  /// The replay page (without its events array) or the hello frame that
  /// caused the reset; null when inferred.
  boost::json::value detail;
};

/// State and counters of one watcher: the answer to `stats_atom` and to
/// `stop_atom`.
struct feed_stats {
  /// Ledger cursor (the id of the last delivered event).
  int64_t cursor = 0;
  /// Last in-frame seq received (catchup's resume key).
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
};

/// A failure the watcher met on its way to the feed, reported as it
/// happens to `feed_watcher_options::on_failure` (for `outbound watch`'s
/// stderr); the watcher goes on (retries, reconnects) either way.
struct feed_failure {
  /// "replay" (a replay call failed), "page" (a replay page could not be
  /// read: a drain error), "websocket" (a session failed to open or broke),
  /// "frame" (an event frame could not be read).
  std::string source;
  /// replay / websocket: the error kind ("auth_error", "request_error",
  /// "service_unavailable", ...); page: the drain_error_reason; frame:
  /// "unparseable" or "over_cap".
  std::string kind;
  /// The error kind as a value (replay and websocket), for exit codes.
  std::optional<error_kind> error;
  /// The HTTP status seen (0: none).
  int status = 0;
  /// The client's or the session's description (never the credential).
  std::string detail;
  /// The x-request-id of the replay call, or of the WebSocket upgrade of
  /// the session that failed (empty for page and frame failures).
  std::string request_id;
  /// websocket: the ws_close_reason ("connect", "tls", "handshake", ...).
  std::string reason;
  /// replay / page: the query asked (`after`, `limit`).
  std::optional<int64_t> after;
  std::optional<int> limit;
};

/// Typed interface of a subscriber: answers each delivery with `ack_atom`
/// once it has handled it (an error answer is counted as a callback error
/// and delivery goes on).
using feed_subscriber_actor
  = caf::typed_actor<caf::replies_to<feed_event>::with<ack_atom>,
                     caf::replies_to<feed_reset>::with<ack_atom>>;

} // namespace outbound

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::feed_event)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::feed_reset)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::feed_stats)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::ws_event)
