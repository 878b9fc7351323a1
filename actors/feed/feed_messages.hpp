#pragma once

// What a feed watcher delivers to the application (issue 3 item 6;
// DESIGN.md "Delivery guarantees of a feed") and what it reports when asked.
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
  /// - epoch_changed, inferred, wake: (last_seq, unknown].
  std::optional<int64_t> lost_from;
  std::optional<int64_t> lost_to;
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
  /// Bad replay pages and full pages that did not move the cursor.
  uint64_t drain_errors = 0;
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
