#pragma once

// Private to protocol/ws_session*.cpp (and the tests): the stream-independent
// pieces of a client WebSocket session, defined once in ws_session.cpp —
// the upgrade request and the check of its response (RFC 6455 section 4.1),
// the Sec-WebSocket-Accept computation, and the inbound frame tracker that
// bounds fragments per message. No Asio or Beast here.
//
// Why a frame tracker next to Beast: Beast consumes empty non-final frames
// inside one read without returning (so a peer streaming `00 00` forever is
// never seen by read_some), and has no fragment limit. The tracker only
// watches the frame headers of the bytes Beast reads; Beast still does every
// bit of the framing, masking, UTF-8 and size checks.
//
// Error translation (Beast/Asio error codes to ws_close_reason and detail
// text) happens here, once.

#include "protocol/http_types.hpp"
#include "protocol/ws_session.hpp"

#include <boost/system/error_code.hpp>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>

namespace outbound::detail {

/// Largest number of data frames (first + continuations) in one message
/// (hyperdjango's wake reassembly cap; websockets/ws `maxFragments`).
constexpr uint32_t ws_max_fragments = 64;

/// Least interval between two `activity` reports of one session (ns): a
/// chatty peer must not flood the owning actor. Activity inside the interval
/// is reported at its end, never dropped. [100 ms]
constexpr int64_t ws_activity_interval_ns = 100'000'000;

/// The close reason of a failed dial (the library's one dial routine
/// classifies it as the HTTP transport does): tls → tls, local_resource →
/// local_resource, anything else → connect.
ws_close_reason ws_reason_of_dial_failure(transport_error_kind kind);

/// A fresh Sec-WebSocket-Key: base64 of 16 random bytes (OpenSSL RAND).
std::string make_ws_key();

/// Sec-WebSocket-Accept for `key`: base64(SHA-1(key + RFC 6455 GUID)).
std::string ws_accept_for(std::string_view key);

/// Serializes the upgrade request for `opts` with `key` into `out`: `GET
/// <path>` (origin-form; "/" if empty), the generated Host, Upgrade,
/// Connection, Sec-WebSocket-Key and Sec-WebSocket-Version headers, then
/// `opts.headers` verbatim except copies of the generated ones. Returns
/// false with a reason in `why` (never a header value) for a CR/LF/NUL in a
/// header or a bad path.
bool build_upgrade_request(const ws_options& opts, const std::string& key,
                           std::string& out, std::string& why);

/// Checks a complete upgrade response header: HTTP/1.1 101, `Upgrade:
/// websocket`, a `Connection` with the `upgrade` token, the Accept value of
/// `key`, and no extension or subprotocol (none was offered). Returns the
/// reason of a refusal (nullopt if acceptable); the status is in it for a
/// non-101 answer. Never quotes a header value.
std::optional<std::string> check_upgrade_response(unsigned version, int status,
                                                  const header_list& headers,
                                                  const std::string& key);

/// Detail text of a failed read of the upgrade response header (EOF, reset,
/// a header block over `cap` bytes, malformed).
std::string describe_upgrade_error(const boost::system::error_code& ec,
                                   bool got_some, uint64_t cap);

/// The close reason of a failed read on an open session that is neither a
/// close frame nor an over-cap message: `peer_closed` for a clean EOF,
/// `broken` for everything else (reset, truncated TLS, protocol violation).
ws_close_reason classify_ws_read_error(const boost::system::error_code& ec);

/// Detail text for classify_ws_read_error's cases.
std::string describe_ws_read_error(const boost::system::error_code& ec);

/// Watches the frame headers of the inbound byte stream (server frames,
/// normally unmasked; a mask key is skipped if present) without touching
/// payloads.
///
///   [header] ──complete──► [payload: skip len bytes] ──► [header] ...
///
/// Per data message it counts frames (control frames interleaved in a
/// fragmented message are not counted) and records, per completed message,
/// whether it had more than one frame. It also sums the payload lengths a
/// message's headers announce: over `max_message_bytes` the message is
/// marked over the cap from that header on (until its last byte arrives),
/// over `max_discard_bytes` it is refused at that header. Pure: no clock,
/// no I/O.
class ws_frame_tracker {
public:
  /// What one batch of bytes showed.
  struct result {
    /// A message reached more than `max_fragments` frames; the tracker
    /// stops at that header (later bytes are not examined).
    bool too_many_fragments = false;
    /// A 64-bit payload length with its most significant bit set (RFC 6455
    /// section 5.2: "the most significant bit MUST be 0"), i.e. 2^63 bytes
    /// or more announced; the tracker stops at that header.
    bool bad_length = false;
    /// A data message whose announced size (the sum of the payload
    /// lengths its frame headers announce, the current frame's whole
    /// length included) exceeds `max_discard_bytes`; the tracker stops at
    /// that header (later bytes are not examined).
    bool over_ceiling = false;
    /// A data message's announced size passed `max_message_bytes` at a
    /// header of this batch: the message is known to be over the cap long
    /// before its bytes arrive (see message_over_cap()).
    bool over_cap_began = false;
    /// A data message began (its first frame header) at a header of this
    /// batch: its completion deadline starts (see message_open()).
    bool message_began = false;
    /// Proof of life other than a completed data message: a control frame,
    /// a non-final data frame, or a frame (header or payload) still
    /// incomplete at the end of the batch.
    bool activity = false;
  };

  /// `max_message_bytes`: the size over which a message is over the cap
  /// (over_cap_began); `max_discard_bytes`: the announced size over which
  /// a message is refused (over_ceiling). Unlimited by default.
  explicit ws_frame_tracker(uint32_t max_fragments = ws_max_fragments,
                            uint64_t max_message_bytes = UINT64_MAX,
                            uint64_t max_discard_bytes = UINT64_MAX)
    : max_fragments_(max_fragments),
      max_message_bytes_(max_message_bytes),
      max_discard_bytes_(max_discard_bytes) {
  }

  /// Sets the two size limits (before the first byte is fed).
  void set_limits(uint64_t max_message_bytes, uint64_t max_discard_bytes) {
    max_message_bytes_ = max_message_bytes;
    max_discard_bytes_ = max_discard_bytes;
  }

  /// Feeds the next `n` inbound bytes, in stream order.
  result feed(const unsigned char* data, std::size_t n);

  /// Whether the oldest completed, not yet popped message had more than one
  /// frame (false if none is recorded). Call once per delivered message.
  bool pop_fragmented();

  /// Data frames of the message in progress so far.
  uint32_t fragments() const {
    return frames_;
  }

  /// Completed messages recorded and not yet popped. A message is
  /// recorded at the header of its final frame, before that frame's
  /// payload arrives (see earlier_messages_pending()).
  std::size_t pending_messages() const {
    return done_.size();
  }

  /// Messages that ended before the one in progress began and are not yet
  /// popped: the ones the reader has not delivered yet (the one in
  /// progress is not counted, even once its final header is recorded).
  std::size_t earlier_messages_pending() const {
    return done_.size() - (msg_open_ && msg_fin_seen_ ? 1 : 0);
  }

  /// True while the data message in progress is over `max_message_bytes`
  /// by its announced size and its last byte has not arrived yet.
  bool message_over_cap() const {
    return msg_over_;
  }

  /// True from the first frame header of a data message until its last
  /// byte has arrived.
  bool message_open() const {
    return msg_open_;
  }

  /// Ordinal (from 1) of the data message in progress, or of the last one
  /// begun: tells two over-cap messages apart.
  uint64_t message_index() const {
    return msg_index_;
  }

  /// Announced size of the data message in progress (saturating), bytes.
  uint64_t message_announced() const {
    return msg_total_;
  }

private:
  void on_header(result& r);
  /// The payload of the current frame has fully arrived.
  void on_frame_end();

  uint32_t max_fragments_;
  uint64_t max_message_bytes_;
  uint64_t max_discard_bytes_;
  uint64_t msg_total_ = 0;
  uint64_t msg_index_ = 0;
  bool msg_over_ = false;
  bool msg_open_ = false;
  /// The final frame header of the message in progress was recorded.
  bool msg_fin_seen_ = false;
  /// The current frame is the final frame of a data message.
  bool data_fin_ = false;
  unsigned char hdr_[14] = {};
  std::size_t hdr_len_ = 0;
  uint64_t remain_ = 0;
  uint32_t frames_ = 0;
  bool failed_ = false;
  std::deque<bool> done_;
};

} // namespace outbound::detail
