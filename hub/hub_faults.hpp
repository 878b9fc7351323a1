#pragma once

// Fault knobs of the reference hub, settable by command-line flags
// (`outbound hub --drop-wakes ...`) and at run time by `POST /admin/faults`
// with a JSON object of the same names. The hub has to be able to produce
// every fault the feed watcher is tested against (the knobs below).
//
// Per-connection knobs are counts of upcoming WebSocket connections (any
// tier): N > 0 applies to the next N connections, -1 to every connection
// from now on, 0 is off. A connection takes its plan (connection_plan) when
// its upgrade request arrives, so a change never alters an open connection.

#include <boost/json/fwd.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace outbound {

/// Every knob with its default (all faults off).
struct hub_faults {
  // -- ledger wakes -----------------------------------------------------------

  /// Drop every wake frame. [false]
  bool drop_wakes = false;
  /// Drop each wake (per connection, per wake) with this probability, drawn
  /// from the hub's seeded rng (see `seed`). [0.0]
  double drop_wake_probability = 0.0;
  /// Scripted wakes, e.g. [9,6,10,6,8,7,9]: while armed (non-empty) natural
  /// wakes are held back; once the ledger head reaches the highest cursor in
  /// the script, every ledger connection gets exactly these wake frames, in
  /// this order (not coalesced), and the script disarms. [] (off)
  std::vector<int64_t> wake_script;

  // -- replay ----------------------------------------------------------------

  /// Replay polls that miss each freshly appended event (a wake announces a
  /// cursor replay does not show yet). Applies to events appended after it
  /// is set. [0]
  int visibility_lag_polls = 0;
  /// Count of upcoming `GET /v1/events` answers that are a bare JSON array
  /// of the page's events instead of an object (-1: all). [0]
  int non_object_pages = 0;
  /// Count of upcoming `POST /v1/events` that publish an event (not a
  /// dedupe_key duplicate, not an Idempotency-Key repeat) and then
  /// answered by closing the connection without a response, as a proxy
  /// that drops the connection after the request went through (-1: all).
  /// [0]
  int lose_publish_answers = 0;

  // -- WebSocket connections (counts, see above) ------------------------------

  /// Upgrade accepted, then closed at once (close frame 1001 "going away").
  int accept_then_close = 0;
  /// After the hello: stop reading and writing, never answer pings (Beast's
  /// automatic pong only runs inside a read), keep TCP open until the hub
  /// stops or restarts.
  int go_silent = 0;
  /// No hello frame after the subscribe (everything else as usual).
  int no_hello = 0;
  /// After the hello: one raw frame header announcing
  /// `oversized_frame_bytes` (binary, FIN, 64-bit length, as in feeds.md
  /// case 21c), then nothing more is written; the hub keeps reading.
  int oversized_frame = 0;
  /// Length the oversized frame announces. [8 MiB + 1]
  uint64_t oversized_frame_bytes = 8u * 1024u * 1024u + 1u;
  /// Every message (hello included) is split into continuation frames of
  /// `fragment_bytes` payload bytes.
  int fragment_frames = 0;
  /// Payload bytes per fragment (>= 1). [16]
  std::size_t fragment_bytes = 16;
  /// Empty continuation frames written after the first fragment of each
  /// fragmented message (feeds.md case 21b). [0]
  int empty_continuations = 0;
  /// Ledger: each wake is sent as the non-JSON text `wake <cursor>`.
  /// Catchup/ephemeral: a non-JSON text frame `not json` precedes each
  /// event frame (events are never replaced, so no data is lost).
  int non_json_frames = 0;
  /// Pad every wake and event frame of a connection with a `"pad"` string
  /// field to exactly this many bytes (0: off; frames already longer are
  /// left alone). With fragment_bytes 16384 and 81920 this gives feeds.md
  /// case 21a. Taken into a connection's plan at upgrade time. [0]
  std::size_t pad_frames_to = 0;

  // -- restarts ---------------------------------------------------------------

  /// Restart the catch-up tier every this many seconds (new epoch, empty
  /// ring, every WebSocket connection closed with 1012). [0] (off)
  double restart_every = 0.0;

  // -- dropped connections ----------------------------------------------------

  /// Hard-close every WebSocket connection of `drop_tier` every this many
  /// seconds: TCP closed without a close frame, as when a proxy or the
  /// network drops it. The state (ledger, ring, epoch, clients) is kept, so
  /// a catch-up client resumes without a reset. One-shot drops: `POST
  /// /admin/drop` or the `drop_now` patch key. [0] (off)
  double drop_every = 0.0;
  /// Tier whose connections drop_every drops: "ledger", "catchup",
  /// "ephemeral" or "all" (every WebSocket connection). ["all"]
  std::string drop_tier = "all";

  // -- outages of a latency route ---------------------------------------------

  /// A latency-profile path ("/fast", "/slow", "/flaky", "/lognormal",
  /// "/steady") whose every request is answered at once with
  /// `outage_status`, as a backend in an outage; counted like any profile
  /// request (per tag too). "" : none. [""]
  std::string outage_path;
  /// The status of an outage answer (500..599). [503]
  int outage_status = 503;
};

/// What one WebSocket connection does wrong (taken from the counts).
struct connection_plan {
  bool accept_then_close = false;
  bool go_silent = false;
  bool no_hello = false;
  /// 0: off; else the announced length of the oversized frame.
  uint64_t oversized_frame_bytes = 0;
  /// 0: off; else the payload bytes per fragment.
  std::size_t fragment_bytes = 0;
  int empty_continuations = 0;
  bool non_json = false;
  std::size_t pad_to = 0;
};

/// True for "ledger", "catchup", "ephemeral" and "all" (the values of
/// drop_tier and of a drop request's tier).
bool is_drop_tier(std::string_view name);

/// True for "" and the latency-profile paths (the values of outage_path).
bool is_outage_path(std::string_view path);

/// Consumes one use of a count knob: true (and decrements) when N > 0, true
/// when N < 0 (every time), false when 0.
bool take_count(int& n);

/// Takes the next connection's plan, consuming one use of every count knob
/// that is on.
connection_plan take_connection_plan(hub_faults& f);

/// The knobs as a JSON object (the names above).
boost::json::object to_json(const hub_faults& f);

/// Applies a patch object: only the named knobs change. Validates every key
/// first and changes nothing on an error; returns the error detail naming
/// the key (`unknown knob 'x'`, `'go_silent' must be an integer >= -1`).
/// Keys handled elsewhere (listed in `extra_keys`) are skipped here.
std::optional<std::string>
apply_fault_patch(hub_faults& f, const boost::json::object& patch,
                  const std::vector<std::string>& extra_keys = {});

} // namespace outbound
