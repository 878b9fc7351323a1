#pragma once

// The WebSocket port of the feed watcher (docs/ARCHITECTURE.md "Ports"): one client
// WebSocket session on Beast (never hand-written framing), plain or TLS, on
// the io runner. Beast, Asio and OpenSSL stay in protocol/ws_session*.cpp.
//
// Like http_connection, a session reports to its owner through a callback
// that runs on an io thread and must do exactly one thing: send a message to
// the owning actor (docs/ARCHITECTURE.md). The watcher actor drives the session with
// the non-blocking, thread-safe calls below; tests replace the session with
// a fake through `ws_connector`.
//
//   connect ──► [connecting] ──opened──► [open] ──closed(error)──► [closed]
//                   │                      │ ▲ message / activity
//                   └──closed(error)───────┘ └── send_text / ping

#include "config/client_config.hpp"
#include "protocol/http_types.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace outbound {
inline namespace protocol {

class io_runner;
class tls_context;

/// What ended (or failed to open) a session.
enum class ws_close_reason : uint8_t {
  /// close() was called by the owner.
  local,
  /// The peer sent a close frame or closed TCP cleanly.
  peer_closed,
  /// TCP connect / DNS failed.
  connect,
  /// TLS handshake or verification failed.
  tls,
  /// The HTTP upgrade was refused (non-101) or its header block exceeded
  /// `max_handshake_bytes`.
  handshake,
  /// Close 1009 (RFC 6455 7.4.1), sent by the session: a message of more
  /// than 64 data frames (refused at the header of the 65th frame), a
  /// message whose frame headers announce more than
  /// `ws_options::max_discard_bytes` (refused at that header), or a
  /// message over `max_frame_bytes` that did not end within
  /// `ws_options::discard_timeout_ns`. The last two are reported first as
  /// a `too_large` event with `closing` set (the prefix read of the
  /// message, if any), then `closed`. A message over `max_frame_bytes`
  /// that ends in time does not end the session: it is reported as
  /// `ws_event::kind::too_large`.
  too_large,
  /// Reset, EOF mid-frame, protocol violation (a frame announcing 2^63
  /// bytes or more is one: RFC 6455 section 5.2; close 1002).
  broken,
  /// The handshake did not finish within `handshake_timeout_ns`, or (close
  /// 1009 sent) a data message within `max_frame_bytes` did not end within
  /// its budget (see `ws_options::discard_timeout_ns`) of its first frame
  /// header.
  timeout,
  /// No local address or port to connect from (EADDRNOTAVAIL /
  /// EADDRINUSE: local port exhaustion); the HTTP transport's
  /// `local_resource` (the library's one dial routine classifies both).
  /// Last, so the earlier values keep their numbers.
  local_resource,
};

const char* to_string(ws_close_reason r);

/// One report of a session to its owner.
struct ws_event {
  enum class kind : uint8_t {
    /// The upgrade succeeded; the session is open.
    opened,
    /// One complete data message (text or binary, reassembled from
    /// fragments; `fragmented` says whether it arrived in more than one
    /// frame).
    message,
    /// One data message over `ws_options::max_frame_bytes`, read in
    /// bounded pieces and discarded: `payload` holds its first
    /// `ws_too_large_prefix` bytes at most (the whole message is never
    /// held), `size` its full size. The session stays open and reads on --
    /// unless `closing` is set: then the session refused the message
    /// (over `max_discard_bytes`, or past `discard_timeout_ns`), `payload`
    /// holds what had arrived of it (maybe nothing), `size` what its
    /// headers announced, and `closed` (reason too_large) follows at once.
    too_large,
    /// Inbound bytes that are not a data message (a pong, a ping, or a
    /// frame header of a message still arriving): proof of life for the
    /// dead-peer detector. At most one per 100 ms per session; activity
    /// inside that interval is reported at its end, never dropped.
    activity,
    /// The session ended (or never opened); no event follows.
    closed,
  };
  kind what = kind::opened;
  /// The id given to ws_connector; stale events are dropped by the owner.
  uint64_t session_id = 0;
  /// message: the payload; too_large: the message's first bytes (at most
  /// `ws_too_large_prefix`).
  std::string payload;
  /// too_large: the full size of the message in bytes (`closing`: the
  /// size its frame headers announced, never 0). closed with reason
  /// too_large: the size the refused message announced (over
  /// max_discard_bytes) or had reached (past discard_timeout_ns), never 0
  /// for those two; 0 when the fragment limit refused it.
  uint64_t size = 0;
  /// message, too_large: arrived in more than one frame.
  bool fragmented = false;
  /// message, too_large: binary rather than text (a `closing` too_large
  /// with an empty payload says false: nothing of it was read).
  bool binary = false;
  /// too_large: the session refused this message and ends right after
  /// this event (see kind::too_large); the owner may still read a seq from
  /// the payload before the `closed` event.
  bool closing = false;
  /// closed: why.
  ws_close_reason reason = ws_close_reason::local;
  /// closed: human-readable detail (never a header value).
  std::string detail;
  /// Text messages `ws_options::drop_text` dropped since the previous
  /// event of this session (any kind; `closed` carries the remainder).
  uint64_t dropped = 0;
};

/// Most bytes of an over-cap message a `too_large` event keeps (enough for
/// the top-level `type` and `seq` of an event frame). [64 KiB]
inline constexpr std::size_t ws_too_large_prefix = 64 * 1024;

/// Default least rate, in bytes per second, a message within
/// `ws_options::max_frame_bytes` is owed: its completion budget is
/// max(discard_timeout_ns, max_frame_bytes / this). 16 KiB/s (128 kbit/s)
/// is below what any link a feed hub is reached over sustains (an EDGE
/// mobile link is about 200 kbit/s), so a slow network never cuts a
/// message off, while a peer below it -- a trickle of a few bytes a
/// second, each byte proof of life -- is a stall and ends at the budget;
/// the default 8 MiB cap gets 512 s (the idea of a minimum data rate, as
/// nginx's send_timeout / Apache's mod_reqtimeout MinRate).
inline constexpr uint64_t ws_min_message_rate = 16 * 1024;

/// The ceiling `ws_options::max_discard_bytes` = 0 stands for:
/// max(16 x `max_frame_bytes`, 256 MiB), saturating; never below
/// `max_frame_bytes`.
uint64_t ws_default_max_discard_bytes(uint64_t max_frame_bytes);

/// Settings of one session.
struct ws_options {
  /// scheme (http → ws, https → wss), host, port of the hub.
  url_parts origin;
  /// Request target of the upgrade, e.g. "/ws/feed".
  std::string path;
  /// Extra upgrade request headers (e.g. the credential).
  header_list headers;
  /// Largest message (reassembled from its frames) reported as a
  /// `message`, in bytes. A larger one is read in pieces of at most 64 KiB
  /// as it arrives, its first `ws_too_large_prefix` bytes kept and the rest
  /// discarded, and reported as `too_large` once it ends. Memory: the
  /// read buffer is a beast::flat_buffer that grows as a message below the
  /// cap arrives (it is not reserved up front: idle sessions are many) and
  /// is capped at max_frame_bytes + 1 bytes of data; while it grows, the
  /// old and the new block coexist for a moment, so one session briefly
  /// holds up to about 1.5 x max_frame_bytes (plus ws_too_large_prefix for
  /// the kept prefix and Beast's small frame buffer), never what frame
  /// headers announce. A message may also have at most 64 data frames (the
  /// feed protocol's limits), and must respect `max_discard_bytes` and
  /// `discard_timeout_ns`. [8 MiB]
  uint64_t max_frame_bytes = 8u * 1024u * 1024u;
  /// Ceiling on what a message over `max_frame_bytes` may announce, in
  /// bytes: a data frame whose header makes the message's announced size
  /// (the sum of its frames' payload lengths) exceed it is refused at that
  /// header, before any of its payload is read: close 1009, reason
  /// too_large. Discarding is cheap but not free, and a frame announcing
  /// 2^62 bytes would otherwise hold the session for as long as the peer
  /// cares to trickle bytes. 0: max(16 x max_frame_bytes, 256 MiB); a
  /// value below max_frame_bytes is taken as max_frame_bytes. [0]
  uint64_t max_discard_bytes = 0;
  /// Time a data message over `max_frame_bytes` (by its announced size)
  /// has to end, in nanoseconds, counted from its first frame header; and
  /// the least time any data message has (a message that arrives whole
  /// within one read is never timed). A message within the cap has
  /// max(discard_timeout_ns, max_frame_bytes / min_message_rate): a
  /// large message on a slow link is not cut off (an 8 MiB one has 512 s
  /// at the default rate), yet a trickle of a few bytes a second still
  /// ends at that budget. Every byte that follows the first header (the
  /// peer's pongs included) belongs to the message until it ends, so
  /// while it lasts nothing else the peer sends can be read, yet each byte
  /// is proof of life; past its deadline the session fails with close
  /// 1009: over the cap as a `too_large` event with `closing` set and the
  /// prefix read so far, then `closed` with reason too_large; within the
  /// cap, `closed` with reason timeout (nothing of it reported). A message
  /// that completes in time is reported as usual and the session reads
  /// on. A value <= 0 is taken as the default. [60 s]
  int64_t discard_timeout_ns = 60'000'000'000;
  /// Least rate, in bytes per second, at which a message within
  /// `max_frame_bytes` is owed time to arrive (see discard_timeout_ns).
  /// 0: ws_min_message_rate. [ws_min_message_rate]
  uint64_t min_message_rate = 0;
  /// Cap of the upgrade response header block in bytes. [64 KiB]
  uint64_t max_handshake_bytes = 64u * 1024u;
  /// Bound of connect + TLS + upgrade, in nanoseconds. [5 s]
  int64_t handshake_timeout_ns = 5'000'000'000;
  /// Optional intake filter, called on the io thread with every complete
  /// text message (binary ones are always reported): true drops it without
  /// an event. Dropped messages are counted in the next event's `dropped`
  /// and are proof of life at most once per `drop_activity_interval_ns`
  /// (an `activity` report; pongs and other frames keep their own 100 ms
  /// cadence). Must be cheap, non-blocking and thread-safe; the view is
  /// valid only during the call. [none]
  std::function<bool(std::string_view)> drop_text;
  /// Least interval between two proofs of life drawn from dropped
  /// messages, in nanoseconds: a flood of dropped messages must not become
  /// a flood of activity reports. [1 s]
  int64_t drop_activity_interval_ns = 1'000'000'000;
};

/// A client WebSocket session. All member functions are thread-safe and
/// non-blocking (they post to the session's strand).
class ws_session {
public:
  using handler = std::function<void(ws_event)>;

  virtual ~ws_session();

  /// Sends one text message (queued; sends are serialised).
  virtual void send_text(std::string text) = 0;

  /// Sends a WebSocket ping frame (RFC 6455 §5.5.2).
  virtual void ping() = 0;

  /// Tears the session down at once: no waiting for a close handshake with
  /// a silent peer. A `closed` event with reason `local` follows unless the
  /// session had already closed.
  virtual void close() = 0;

protected:
  ws_session() = default;
};

/// Opens sessions. The real one dials with Beast on an io_runner; tests
/// inject a fake. `connect` starts the upgrade at once and reports every
/// event of the session, tagged with `session_id`, to `on_event` (called on
/// an io thread, never inside `connect`). Dropping the last reference to the
/// returned session closes it like close(); `on_event` still receives the
/// final `closed`, so it must not refer to anything the owner destroys.
class ws_connector {
public:
  virtual ~ws_connector();

  virtual std::shared_ptr<ws_session>
  connect(uint64_t session_id, const ws_options& opts,
          ws_session::handler on_event) = 0;
};

/// The real connector: Beast websocket over tcp_stream or
/// ssl_stream<tcp_stream> (`tls` required for https origins, built from the
/// client's tls_config) on `io`.
std::shared_ptr<ws_connector>
make_ws_connector(std::shared_ptr<io_runner> io,
                  std::shared_ptr<tls_context> tls = nullptr);

} // namespace protocol
} // namespace outbound
