#pragma once

// Configuration of one change-feed watcher (hyperdjango serviceclient.py,
// the ChangeFeedWatcher constructor and its defaults). Plain data with
// the reference defaults; validate() runs when a watcher is spawned and
// throws config_error naming the first bad field.

#include "core/rng.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace outbound {
inline namespace feed {

/// Names of the fields and query parameters of the feed protocol, so a
/// service with other names is expressed without changing the watcher
/// (hyperdjango's serviceclient docs, "Response shape").
struct feed_fields {
  /// Replay page: the array of events. ["events"]
  std::string events = "events";
  /// Replay page: the page's cursor (an integer). ["cursor"]
  std::string cursor = "cursor";
  /// Replay page: the below-retention flag (a bool). ["reset"]
  std::string reset = "reset";
  /// Replay page: the ledger's incarnation id (a string), if the server
  /// sends one; a change means the ledger was replaced (reset_cause::rewind).
  /// A ledger hello's `epoch` is read the same way. ["epoch"]
  std::string epoch = "epoch";
  /// Each replayed event: its ledger id (an integer). ["id"]
  std::string event_id = "id";
  /// Wake frame: the cursor the hub has reached (a best-effort hint).
  /// ["cursor"]
  std::string wake_cursor = "cursor";
  /// Replay query: the cursor to read after. ["after"]
  std::string after_param = "after";
  /// Replay query: the page size. ["limit"]
  std::string limit_param = "limit";
  /// Replay query: one parameter per subject prefix (repeated). ["prefix"]
  std::string prefix_param = "prefix";
  /// Extra replay query parameters, sent after the others in this order.
  std::vector<std::pair<std::string, std::string>> extra_params;
};

/// Refusals of one WebSocket message whose first bytes show no seq (over
/// ws_max_discard_bytes or past ws_discard_timeout: the session ends, and a
/// catchup hub resends the message from last_seq after the redial) that a
/// catchup watcher takes, in a row at the same last_seq, before it
/// subscribes without last_seq to get past it with a `resync` reset
/// covering the seqs skipped. Three: a refusal at the deadline may be a
/// slow moment of the network, and a retry may read far enough to show the
/// seq (then no resync is needed); a third refusal at the same place is the
/// same message again, and each one costs a reconnect backoff. [3]
inline constexpr int feed_overcap_resync_after = 3;

/// Everything one watcher needs besides its ports (service client, WebSocket
/// connector, delivery target). Durations are in seconds.
struct feed_config {
  /// Path of the replay endpoint (`GET path?after=N&limit=M`), relative to
  /// the service client's base URL; empty: no ledger (ws-only feed).
  /// [""]
  std::string replay_path;
  /// Path of the feed WebSocket, relative to the base URL; empty:
  /// poll-only. [""]
  std::string ws_path;
  /// Subject prefixes to follow; empty: every subject. []
  std::vector<std::string> prefixes;
  /// Ledger cursor to start after (>= 0): the first replay asks
  /// `after=cursor` and the first subscribe carries it. A watcher that
  /// takes a feed over from another process (a feed group) resumes a
  /// ledger feed by setting it to the committed checkpoint, the last
  /// acknowledged id (a progress report's `cursor`). [0]
  int64_t cursor = 0;
  /// The ledger epoch `cursor` was acknowledged in (a progress report's
  /// `ledger_epoch`), for a watcher that resumes another's checkpoint: a
  /// hello or replay page of the hub in another epoch is then a rewind
  /// (the ledger was replaced since; the cursor means nothing there) with
  /// its reset, instead of a cursor followed into the new ledger. Needs a
  /// replay_path. Compared with the hellos' and the pages' epochs alike: a
  /// server that names one ledger differently in the two sees a rewind on
  /// every resume (the ledger again from its start, never a gap). nullopt:
  /// the first epoch seen is taken as the cursor's. [nullopt]
  std::optional<std::string> resume_ledger_epoch;
  /// Replay page size (>= 1). [500]
  int limit = 500;
  /// Cap on one replay response body in bytes, for this watcher's replay
  /// calls only; 0 uses the service client's max_response_bytes (32 MiB by
  /// default). A page over the cap is not lost: the drain narrows it (see
  /// ledger_drain), so the cap bounds memory, not what can be delivered
  /// short of one event over it. [0]
  std::size_t replay_max_response_bytes = 0;
  /// Period of the ledger poll tick that self-heals lost wakes (> 0). [30]
  double poll_interval = 30.0;
  /// A session connected this long counts as healthy for the reconnect
  /// backoff (>= 0). [30]
  double stable_period = 30.0;
  /// Reconnect backoff base (>= 0). [0.2]
  double reconnect_base_backoff = 0.2;
  /// Reconnect backoff cap (>= reconnect_base_backoff). [10]
  double reconnect_max_backoff = 10.0;
  /// Keepalive ping period of the WebSocket; 0 disables pings and the
  /// dead-peer detector (>= 0). [20]
  double ws_ping_interval = 20.0;
  /// Optional pong deadline: a ping not followed by any inbound activity
  /// within this time declares the peer dead (websocket-client's
  /// ping_timeout; websocket-client #411: a dead peer went unnoticed while
  /// no data arrived); 0: only the three silent ping intervals rule. [0]
  double ws_pong_timeout = 0.0;
  /// Largest WebSocket message the watcher reads, in bytes: the size of
  /// one data message reassembled from its frames (> 0). A larger message
  /// does not end the session: it is read in pieces and discarded as it
  /// arrives (at most this + 64 KiB of it is ever held, whatever its frame
  /// headers announce), and it is one unreadable frame -- the poison-pill
  /// rule of an event frame that does not parse: catchup / ephemeral
  /// deliver one `undeliverable` reset in its place, reason "over_cap:
  /// ...", with its seq when its first 64 KiB show it; the ledger tier
  /// takes it for a wake without a hint. Counted at
  /// feed_stats::oversized_frames. An over-cap message must also stay
  /// under ws_max_discard_bytes and end within ws_discard_timeout, else the
  /// session ends (see those two for the reset). A frame announcing 2^63
  /// bytes or more breaks the protocol (RFC 6455 section 5.2) and ends the
  /// session. [8 MiB]
  uint64_t ws_max_frame_bytes = 8u * 1024u * 1024u;
  /// Maximum nesting depth of arrays and objects in one WebSocket message
  /// (1 .. 1024): a deeper message is an unreadable frame (catchup /
  /// ephemeral: one `undeliverable` reset in its place; the ledger tier
  /// takes it for a wake without a hint). The counterpart of
  /// client_config::json_max_depth for replay pages; set both alike so an
  /// event reads the same in a frame and in a page. [64,
  /// default_json_max_depth of protocol/json_parse.hpp]
  std::size_t json_max_depth = 64;
  /// Ceiling on what one WebSocket message may announce, in bytes: a frame
  /// header that takes a message's announced size (the sum of its frames'
  /// lengths) over it is refused at once -- close 1009, the session ends
  /// (reason too_large), the watcher reports an `over_cap` failure (source
  /// "websocket"), counts it at feed_stats::oversized_frames and
  /// reconnects on its backoff. A catchup hub resends the refused event
  /// after the redial, so it must not hold the feed in a loop: when what
  /// arrived of it shows its seq (it may be nothing at all: the header of
  /// its first frame can be the refused one), catchup / ephemeral deliver
  /// one `undeliverable` reset for it first (reason "over_cap: ...",
  /// lost (last_seq, seq]) and catchup resumes after that seq. When no seq
  /// shows, catchup counts the refusal; after feed_overcap_resync_after of
  /// them in a row at the same last_seq it subscribes once without
  /// last_seq, the hub resyncs, and the hello's `resync` reset (reason
  /// "over_cap: ...") covers every seq skipped, (last_seq, head].
  /// Ephemeral is never resent an event (it resets on every connect).
  /// 0: max(16 x ws_max_frame_bytes, 256 MiB); else >= ws_max_frame_bytes.
  /// [0]
  uint64_t ws_max_discard_bytes = 0;
  /// Time a WebSocket message over ws_max_frame_bytes has to end, counted
  /// from its first frame header, in seconds (> 0, at least 1 ns); and the
  /// least time any message has. A message within the cap has
  /// max(ws_discard_timeout, ws_max_frame_bytes / ws_min_message_rate)
  /// (protocol/ws_session.hpp: 16 KiB/s, so the default 8 MiB cap gives
  /// 512 s): a large message on a slow link is delivered, a trickle still
  /// ends. While a message lasts every byte the hub sends -- wakes,
  /// events, the pongs to the keepalive's pings -- is part of it and
  /// counts as proof of life; so past its deadline the session ends
  /// (close 1009) and the watcher reconnects: a hub that announces a huge
  /// frame and keeps talking, or trickles a small one a byte at a time,
  /// cannot stall the feed. A message over ws_max_frame_bytes is then
  /// refused like one over ws_max_discard_bytes (`over_cap` failure,
  /// counted, the same resets, see there); one within the cap is a
  /// `timeout` failure (source "websocket") and nothing else: catchup is
  /// resent it after the redial (so only a hub slower than the rate for
  /// that message holds the feed), ephemeral gets its reconnect reset. A
  /// message that arrives whole within its time is delivered as usual.
  /// [60]
  double ws_discard_timeout = 60.0;
  /// Bound of connect + TLS + upgrade of one WebSocket session (> 0). [5]
  double ws_handshake_timeout = 5.0;
  /// Stable identity of the watcher for the catchup tier (at most 256
  /// bytes: the reference hub does not remember longer ids); empty: 32 hex
  /// digits generated once per watcher from its random generator. A
  /// catchup feed resumed in another process (resume_last_seq) needs the
  /// id the previous watcher used: the hub keeps its replay window per
  /// client id. [""]
  std::string client_id;
  /// Catchup resume from a checkpoint: the last seq a previous watcher of
  /// this feed (maybe in another process, with the same client_id) had
  /// acknowledged, as its progress report gave it (>= 0; needs a non-empty
  /// client_id). The first subscribe carries it with resume_epoch, so the
  /// hub replays what follows it instead of a fresh resync; events at or
  /// below it are dropped as already delivered. The hub still decides: a
  /// hello in another epoch is an `epoch_changed` reset, a resync hello (it
  /// evicted last_seq, or does not know the client id) a `resync` reset.
  /// A feed the hub serves as ledger resumes from `cursor` instead, and an
  /// ephemeral one resets on every connect: for them the field only rides
  /// on the first subscribe. nullopt: no checkpoint. [nullopt]
  std::optional<int64_t> resume_last_seq;
  /// The hub epoch resume_last_seq was read in, echoed in the first
  /// subscribe (needs resume_last_seq); nullopt: the hub sent none.
  /// [nullopt]
  std::optional<std::string> resume_epoch;
  /// In-frame events received but not yet delivered, per session; more
  /// closes the session (backpressure: catchup resumes from the last
  /// delivered seq, ephemeral resets) (>= 1). [4096]
  std::size_t max_pending_frames = 4096;
  /// The same bound in bytes (the sum over the queued messages of the
  /// larger of payload size and parsed form, as json_limits::max_bytes
  /// counts it: a frame of tiny arrays parses into up to 16x its text), so
  /// that a hub sending large frames to a slow subscriber cannot make the
  /// watcher hold max_pending_frames parsed frames. One queued message is
  /// never over it (>= 1). [64 MiB]
  std::size_t max_pending_frame_bytes = 64u * 1024u * 1024u;
  /// Field and parameter names.
  feed_fields fields;

  /// Validates every field; throws config_error naming the first bad one
  /// (`replay_path` when neither a replay_path nor a ws_path is set,
  /// `limit`, `poll_interval`, `fields.events`, ...).
  void validate() const;

  /// True when a replay endpoint is configured (ledger capable).
  bool has_replay() const {
    return !replay_path.empty();
  }

  /// True when a WebSocket is configured.
  bool has_ws() const {
    return !ws_path.empty();
  }
};

/// A fresh client id: 32 lower-case hex digits (128 bits from `rng`).
std::string generate_client_id(core::rng& rng);

} // namespace feed
} // namespace outbound
