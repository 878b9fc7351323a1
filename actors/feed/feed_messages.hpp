#pragma once

// What a feed watcher delivers to the application (docs/ARCHITECTURE.md
// "Delivery guarantees of a feed") and what it reports when asked.
// The subscriber acknowledges every delivery; the watcher sends the next one
// only after the acknowledgement (at-least-once, in order, with
// backpressure). A subscriber that opts in (feed_batch_subscriber_actor)
// takes runs of consecutive events as one delivery with one
// acknowledgement, as Kafka's consumer hands a poll's records over at once
// and commits once after them.

#include "actors/messages.hpp"
#include "core/feed_types.hpp"
#include "protocol/ws_session.hpp"

#include <boost/json/value.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace outbound {
inline namespace feed {

/// One event, delivered in feed order.
struct feed_event {
  /// The model that delivered it (ledger, catchup or ephemeral).
  feed_mode mode = feed_mode::ledger;
  /// The event: an element of a replay page's events array (ledger), or the
  /// whole event frame (catchup, ephemeral). A ledger event lives in the
  /// memory of its replay page (one arena per page, freed when the page's
  /// last event is gone): an application that keeps events for long copies
  /// them out (`boost::json::value{ev.event, {}}`) so that one kept event
  /// does not keep its whole page. A plain copy (`auto v = ev.event`)
  /// allocates in that arena, which serialises its allocations
  /// (protocol::json_arena): copies on several threads are safe.
  boost::json::value event;
  /// ledger: the event's id (the cursor after it is delivered), if integer.
  std::optional<int64_t> id;
  /// catchup / ephemeral: the frame's seq, if integer.
  std::optional<int64_t> seq;
  /// The feed's name in its feed group (feed_watcher_options::feed_id);
  /// empty outside a group.
  std::string feed_id;
  /// The fencing token of the ownership this event was delivered under
  /// (feed_watcher_options::owner_token; 0: none). A sink that writes
  /// elsewhere can refuse a token lower than the highest it has seen: a
  /// delivery an owner dispatched before a pause and that arrives after
  /// its lease expired carries the old, lower token (Kleppmann, "How to do
  /// distributed locking", fencing tokens).
  uint64_t owner_token = 0;
};

/// Consecutive events of one feed, in feed order, delivered at once to a
/// feed_batch_subscriber_actor: the events of one replay page (never more
/// than the page, never a reset in the middle: a reset is a delivery of its
/// own), or queued in-frame events. At most
/// feed_watcher_options::max_delivery_batch events, never empty.
struct feed_event_batch {
  std::vector<feed_event> events;
};

/// A batch subscriber's acknowledgement of a whole batch. The cursor moves
/// past every event of the batch once it arrives, as it does past an event
/// whose per-event delivery was answered with an error.
struct feed_batch_ack {
  /// How many of the batch's events the application failed to handle
  /// (counted at event_callback_errors; the others at events_delivered).
  uint64_t failed = 0;
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
  /// The old and the new incarnation's epochs, where known (nullopt:
  /// the hub sent none, or, for a ledger rewind, the cursor was resumed
  /// without feed_config::resume_ledger_epoch and had not moved: the
  /// watcher cannot tell which incarnation it came from).
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
  /// As feed_event::feed_id.
  std::string feed_id;
  /// As feed_event::owner_token.
  uint64_t owner_token = 0;
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

/// An acknowledged position of one watcher (feed_watcher_options::
/// progress_to): what its feed group commits as the feed's checkpoint and
/// hands to the next owner (feed_config::cursor, resume_last_seq /
/// resume_epoch, client_id). Sent after acknowledged deliveries, at most
/// once per feed_watcher_options::progress_interval, and once more, with
/// `final`, when the watcher stops. Only acknowledged positions: a
/// delivery in flight or queued never shows here (a delivery answered with
/// an error counts as acknowledged, as it moves the cursor).
struct feed_progress {
  /// feed_watcher_options::feed_id.
  std::string feed_id;
  /// feed_watcher_options::owner_token (a commit compares it).
  uint64_t owner_token = 0;
  /// The model of the last acknowledged delivery (before any: ledger with a
  /// replay path, catchup when resumed, else none).
  feed_mode mode = feed_mode::none;
  /// Watchers with a replay path: the ledger cursor, every event up to it
  /// acknowledged (or not of this watcher's prefixes); after a rewind, the
  /// position in the new ledger once its rewind reset is acknowledged.
  /// nullopt without a replay path.
  std::optional<int64_t> cursor;
  /// The ledger epoch `cursor` belongs to (the hub's replay pages' or
  /// hellos' `epoch`; feed_config::resume_ledger_epoch for the next
  /// owner); nullopt: the hub sent none, or no replay path.
  std::optional<std::string> ledger_epoch;
  /// In-frame: the last acknowledged seq (catchup's resume key; an
  /// acknowledged reset moves it where delivery continues); nullopt: none
  /// yet (or the hub's hello gave none).
  std::optional<int64_t> last_seq;
  /// The hub's epoch last_seq belongs to.
  std::optional<std::string> epoch;
  /// The watcher's catchup client id (feed_config::client_id, or the one
  /// it generated).
  std::string client_id;
  /// The last report of this watcher: it stops (stop_atom: sent before its
  /// answer, so a progress_to that asked for the stop has it first; an exit
  /// message; its subscriber gone).
  bool final = false;
};

/// Where a watcher sends its progress reports (a feed group).
using feed_progress_actor = caf::typed_actor<caf::reacts_to<feed_progress>>;

/// Typed interface of a subscriber: answers each delivery with `ack_atom`
/// once it has handled it (an error answer is counted as a callback error
/// and delivery goes on).
using feed_subscriber_actor
  = caf::typed_actor<caf::replies_to<feed_event>::with<ack_atom>,
                     caf::replies_to<feed_reset>::with<ack_atom>>;

/// Typed interface of a subscriber that takes events in batches (one
/// message and one acknowledgement per run of events instead of one per
/// event) and resets one at a time. An error answer to a batch counts every
/// event of it as a callback error; delivery goes on either way.
using feed_batch_subscriber_actor
  = caf::typed_actor<caf::replies_to<feed_event_batch>::with<feed_batch_ack>,
                     caf::replies_to<feed_reset>::with<ack_atom>>;

} // namespace feed
} // namespace outbound

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::feed_event)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::feed_reset)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::feed_event_batch)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::feed_batch_ack)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::feed_stats)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::feed_progress)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::ws_event)
