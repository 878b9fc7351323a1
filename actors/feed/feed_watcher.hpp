#pragma once

// The feed watcher (docs/ARCHITECTURE.md "The actor tree"): one actor
// per feed that owns its cursor, mode, WebSocket session and reconnects, and
// delivers events in order to a subscriber actor or to callbacks. A thin
// adapter: mode_negotiator, ledger_drain, reconnect_backoff and
// keepalive_state decide; this actor fetches replay pages through the
// service client, drives the ws_session, waits on the actor clock and
// delivers.
//
//   start ─► drain (ledger) + poll tick every poll_interval
//         └► dial ─► [connecting] ─opened─► subscribe ─► [open] ─┐
//               ▲          │ closed / handshake guard             │ closed /
//               │          ▼                                      │ dead peer /
//               └── [backoff: min(b,max)+U[0,b)] ◄────────────────┘ overflow
//   stop_atom or an exit message at any point: close the session, quit.
//   leave_atom (a draining stop): start no delivery, quit once the one in
//   flight is answered.
//
// For a feed group (one owner of each feed across processes): a fence
// deadline gates every delivery (fence_gate.hpp), acknowledged positions
// go to `progress_to` (feed_progress), the owner token rides on every
// delivery, and a new owner resumes from a checkpoint (feed_config::cursor,
// resume_last_seq / resume_epoch) or, ephemeral, starts with a takeover
// reset.

#include "actors/client/service_client.hpp"
#include "actors/feed/feed_config.hpp"
#include "actors/feed/feed_messages.hpp"
#include "config/client_config.hpp"
#include "protocol/ws_session.hpp"

#include <caf/actor_system.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

namespace outbound {
inline namespace feed {

/// Typed interface of a feed watcher.
///
/// - `stats_atom -> feed_stats`: cursor, last_seq, connected, mode and the
///   counters.
/// - `stop_atom -> feed_stats`: closes the session, answers the final
///   stats and quits at once (idle, mid-handshake, during a backoff, while
///   a delivery is unacknowledged). An exit message does the same.
/// - `leave_atom -> feed_stats`: a draining stop, for a graceful handoff
///   (a feed group's leave or rebalance): the watcher starts no further
///   delivery and fetches nothing more, waits for the answer to the
///   delivery in flight (if any), sends its final progress report (which
///   then includes that delivery), answers the final stats and quits. So
///   the next owner, resuming at that report, repeats nothing the
///   subscriber was handed. The wait has no bound of its own: the caller
///   bounds it (a request time-out, then stop_atom or an exit message).
///   stop_atom during the wait stops at once and answers both.
///
/// - `(fence_atom, deadline)`: the fence gate (actors/feed/fence_gate.hpp).
///   `deadline` is an absolute time point on the actor clock
///   (`self->clock().now()` of the sender, in the same actor system): from
///   it on, the watcher starts no delivery (event, batch or reset). It
///   keeps its sessions, its queue and its position; deliveries already
///   started are not recalled. A deadline in the past holds at once (a
///   feed group's "hold" while its store is unreachable); a later fence
///   with a deadline in the future resumes delivering. Each fence replaces
///   the last. Until the first one there is no gate. While held, in-frame
///   events still queue up to max_pending_frames (then backpressure closes
///   the session as for a slow subscriber) and a ledger drains no further
///   than the page in delivery. Counted in feed_stats (fence_*).

/// The reports of the watcher's WebSocket session and its own timers are
/// messages of a private extension of this interface
/// (actors/feed/feed_watcher.cpp), not reachable through this handle.
using feed_watcher_actor
  = caf::typed_actor<caf::replies_to<stats_atom>::with<feed_stats>,
                     caf::replies_to<stop_atom>::with<feed_stats>,
                     caf::replies_to<leave_atom>::with<feed_stats>,
                     caf::reacts_to<fence_atom, feed_time>>;

/// Callbacks instead of a subscriber actor. They run on a helper actor,
/// never on the watcher: a slow callback holds up only the next delivery
/// (backpressure), never a stop; an exception is counted
/// (event_callback_errors / reset_callback_errors) and delivery goes on.
struct feed_callbacks {
  std::function<void(const feed_event&)> on_event;
  /// Optional.
  std::function<void(const feed_reset&)> on_reset;
  /// Run the callbacks on a detached actor (its own thread), so a blocking
  /// callback cannot starve the scheduler. False runs them on a scheduled
  /// actor (for many feeds with quick callbacks, and for virtual-time
  /// tests). [true]
  bool detached = true;
};

/// Where the WebSocket goes: the hub's origin and the upgrade headers.
struct feed_ws_endpoint {
  /// Scheme, host, port and base path of the hub (the session's path is
  /// origin.path + ws_path).
  url_parts origin;
  /// Upgrade request headers (User-Agent, the credential, default headers);
  /// each dial adds its own `x-request-id` (replacing any given here).
  header_list headers;

  /// The origin of `cfg.base_url` with the request builder's
  /// append_identity_headers (core/request_builder.hpp):
  /// `User-Agent: outbound/<version>`, the client's credential header and
  /// default headers, with build_request's precedence and checks. Throws
  /// config_error (base_url, token_header, token, default_headers).
  static feed_ws_endpoint from(const client_config& cfg);
};

/// The ports and the delivery target of one watcher.
struct feed_watcher_options {
  /// Runs the replay GETs (sharing its connection pool); required when a
  /// replay_path is configured.
  service_client_actor client;
  /// Opens WebSocket sessions; required when a ws_path is configured.
  std::shared_ptr<ws_connector> connector;
  /// Required when a ws_path is configured.
  feed_ws_endpoint ws;
  /// Delivery target: a subscriber actor that acknowledges each event ...
  feed_subscriber_actor subscriber;
  /// ... or one that takes runs of events as one batch with one
  /// acknowledgement (set at most one of the two) ...
  feed_batch_subscriber_actor batch_subscriber;
  /// ... or callbacks (used when neither is set). The callbacks run on a
  /// helper actor that takes batches: one message and one acknowledgement
  /// per page instead of per event; each event still runs its own
  /// `on_event` call, in order.
  feed_callbacks callbacks;
  /// Largest batch a batch subscriber (or the callbacks' helper) is sent,
  /// in events; 1 or more. A batch never spans two replay pages or a
  /// reset. [1024]
  std::size_t max_delivery_batch = 1024;
  /// Ledger: after a full replay page, ask for the next page at once, while
  /// this one is delivered (at most one page ahead; used only when the
  /// drain then asks for exactly that page, else dropped unread). Ordering
  /// and the cursor are as without it. [true]
  bool prefetch = true;
  /// The feed's name in its feed group, stamped on every delivered event
  /// and reset (feed_event::feed_id) and on progress reports. [""]
  std::string feed_id;
  /// The fencing token of the ownership the watcher runs under (a feed
  /// group: the store's revision of the feed's owner key, which only
  /// grows from one claim to the next), stamped on every delivered event
  /// and reset (feed_event::owner_token) and on progress reports, so the
  /// application's sink can refuse a stale owner's late delivery. 0: none.
  /// [0]
  uint64_t owner_token = 0;
  /// Where progress reports go (feed_progress: the acknowledged position,
  /// for a feed group to commit); none: no reports. [none]
  feed_progress_actor progress_to;
  /// Least time between two progress reports, in seconds (finite, >= 0;
  /// 0: one after every acknowledgement that moved the position). A
  /// position acknowledged sooner is reported when the interval is over
  /// (only the latest); the final report on stop is never held back.
  /// [0.5]
  double progress_interval = 0.5;
  /// The watcher starts as the feed's new owner after a takeover (a feed
  /// group: the previous owner crashed, was fenced or left). An ephemeral
  /// feed then begins with a reset of cause `takeover` (in place of the
  /// first hello's `reconnect`, or of `inferred`): events published while
  /// no one owned the feed are lost, and the application is told. Ledger
  /// and catchup feeds ignore it: they resume from their checkpoint
  /// (feed_config::cursor, feed_config::resume_last_seq). [false]
  bool takeover = false;
  /// The fence deadline the watcher starts with (actor clock; see
  /// `(fence_atom, deadline)`): a feed group passes its current one, so no
  /// delivery can start before the first fence message and after the
  /// lease may have lapsed. nullopt: no gate until a fence message.
  /// [nullopt]
  std::optional<feed_time> fence_deadline;
  /// Seed of the watcher's jitter and client-id generator; 0 seeds from
  /// std::random_device. [0]
  uint64_t seed = 0;
  /// Called on the watcher's own thread for every failure on the way to
  /// the feed (a replay call that failed, a page it could not read, a
  /// WebSocket session that failed to open or broke, an unreadable event
  /// frame), as it happens; the watcher goes on either way. Must be quick
  /// and must not block; an exception it throws is dropped. [none]
  std::function<void(const feed_failure&)> on_failure;
};

/// Spawns a watcher and starts it (drain, poll tick, dial). It runs until
/// it is sent `stop_atom` or an exit message: its own timers keep it alive,
/// so an actor system that awaits its actors at shutdown waits for every
/// watcher to be stopped (a ws-only watcher without keepalive may end when
/// its last handle goes). Throws
/// config_error naming the field: a bad `cfg` (feed_config::validate),
/// `client` missing with a replay_path, `connector` missing or
/// `ws.origin` empty with a ws_path, no delivery target (`subscriber`),
/// both `subscriber` and `batch_subscriber` set (`batch_subscriber`),
/// `max_delivery_batch` 0, a negative, non-finite or over-86400-second
/// `progress_interval`.
feed_watcher_actor spawn_feed_watcher(caf::actor_system& sys, feed_config cfg,
                                      feed_watcher_options opts);

/// A subscriber that runs `cbs` (detached unless `cbs.detached` is false):
/// each delivery runs one callback and is acknowledged after it returns;
/// an exception answers an error instead. Quits when its watcher does.
feed_subscriber_actor spawn_callback_subscriber(caf::actor_system& sys,
                                                feed_callbacks cbs);

} // namespace feed
} // namespace outbound
