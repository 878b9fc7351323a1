#pragma once

// The hub's side of the feed protocol as pure codecs (hyperdjango's
// hypermanager app.py): request parsing with the reference hub's
// validation rules, and the frames and pages it sends. No I/O.
//
//   client -> hub  {"type":"subscribe","prefixes":[...],"client_id":...,
//                   "last_seq":...,"cursor":...,"epoch":...}
//                  {"type":"ping"}
//   hub -> client  {"type":"hello","mode":...,"seq":N,"cursor":N,
//                   "resync":bool,"epoch":"..."|null}
//                  {"type":"wake","cursor":N}              (ledger)
//                  {"type":"event","subject":...,"kind":...,"seq":S,
//                   "metadata":{...},"id":N,"ts":T}        (catchup, ephemeral)
//                  {"type":"pong"}

#include "hub/ledger_log.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace outbound {

/// The three delivery tiers a hub serves.
enum class hub_tier { ledger, catchup, ephemeral };

/// "ledger", "catchup" or "ephemeral".
const char* to_string(hub_tier t);

/// Parses a tier name; nullopt for anything else.
std::optional<hub_tier> parse_hub_tier(std::string_view name);

/// Largest serialized metadata object a publish may carry, in bytes. [4096]
constexpr std::size_t default_metadata_max_bytes = 4096;

/// What a publish may carry, so that every stored event can be replayed to
/// a client with default limits (protocol/json_parse.hpp,
/// config/client_config.hpp). A publish over any of them is a 400 naming it.
struct publish_limits {
  /// Largest serialized metadata object, bytes. [4096]
  std::size_t metadata_max_bytes = default_metadata_max_bytes;
  /// Deepest metadata nesting (`{}` is 1). A replay page adds three levels
  /// (page object, events array, event object), so 32 stays well inside
  /// default_json_max_depth (64). [32]
  std::size_t metadata_max_depth = 32;
  /// Longest subject, bytes of UTF-8. [1024]
  std::size_t subject_max_bytes = 1024;
  /// Largest stored event (its JSON as replay serves it: id, seq, subject,
  /// kind, metadata, ts), bytes. [5120]
  std::size_t event_max_bytes = 5120;
};

/// Largest replay page (replay_limit full-size events) the hub may serve:
/// 5 MiB. A default client (config/client_config.hpp) caps a response at
/// 32 MiB and its parsed form at 4 x 32 MiB; a JSON text costs at most about
/// 24 bytes of parsed form per byte (`[0,0,...]`: 2 bytes of text, two
/// 24-byte value slots, protocol/json_parse.cpp), so any 5 MiB page parses
/// within that bound.
constexpr std::size_t max_replay_page_bytes = 5u * 1024u * 1024u;

/// Bytes an event takes in a replay page beyond its escaped subject, kind
/// and metadata: field names, id, seq and ts at their longest.
constexpr std::size_t event_json_overhead = 128;

/// A validated `POST /v1/events` body.
struct publish_input {
  std::string subject;
  std::string kind;
  /// The metadata object, serialized ("{}" when absent).
  std::string metadata_json = "{}";
  /// Empty when absent or null.
  std::string dedupe_key;
};

/// Either an input or the 400 detail.
struct publish_parse {
  std::optional<publish_input> input;
  std::string error;
};

/// Validates a publish body: a JSON object (protocol/json_parse.hpp: no
/// number beyond binary64, nesting within `limits.metadata_max_depth` + 1);
/// `subject` a non-empty string of at most `limits.subject_max_bytes`;
/// `kind` a string (absent: ""); `metadata` an object (absent or null: {})
/// of at most `limits.metadata_max_bytes` serialized; `dedupe_key` a string
/// or null; the resulting event at most `limits.event_max_bytes`. Other
/// fields are ignored. Never throws for bad input.
publish_parse parse_publish(std::string_view body,
                            const publish_limits& limits = {});

/// Same, with only the metadata size set (the other limits default).
publish_parse parse_publish(std::string_view body,
                            std::size_t metadata_max_bytes);

/// Query parameters in order, percent-decoded ('+' is a space).
using hub_query = std::vector<std::pair<std::string, std::string>>;

/// A request target split into its path and decoded query.
struct hub_target {
  std::string path;
  hub_query query;
};

/// Splits `/path?a=1&b=2`.
hub_target parse_hub_target(std::string_view target);

/// A validated `GET /v1/events` query.
struct replay_query {
  /// Events after this id. [0]
  int64_t after = 0;
  /// Requested page size; <= 0 means the default (the log clamps). [0]
  int limit = 0;
  /// Every `prefix` parameter (OR-ed); empty: all subjects.
  std::vector<std::string> prefixes;
};

/// Either a query or the 400 detail.
struct replay_query_parse {
  std::optional<replay_query> query;
  std::string error;
};

/// Largest `after` a replay accepts (INT4_MAX, as hypermanager's replay).
constexpr int64_t max_replay_after = 2147483647;

/// Validates `after` (decimal digits, at most 18 of them, <= 2^31-1),
/// `limit` (a decimal integer, may be <= 0; huge values clamp) and
/// `prefix` (repeatable). Unknown parameters are ignored.
replay_query_parse parse_replay_query(const hub_query& q);

/// The client's subscribe frame. Missing or mistyped fields read as absent.
struct subscribe_request {
  std::vector<std::string> prefixes;
  std::string client_id;
  std::optional<int64_t> last_seq;
  std::optional<int64_t> cursor;
  std::optional<std::string> epoch;
};

/// Longest client_id the hub remembers, in bytes: the catch-up registry
/// keeps max_clients of them, so an unbounded id would let clients make it
/// hold max_clients x ws_read_max bytes. [256]
constexpr std::size_t max_client_id_bytes = 256;

/// Parses a subscribe frame; nullopt unless `text` is a JSON object with
/// `"type":"subscribe"`. A client_id over max_client_id_bytes reads as
/// absent (that client is never remembered: it resyncs on every connect).
std::optional<subscribe_request> parse_subscribe(std::string_view text);

/// True when `text` is the JSON object `{"type":"ping",...}`.
bool is_json_ping(std::string_view text);

/// `{"type":"hello","mode":...,"seq":S,"cursor":C,"resync":R,"epoch":E}`;
/// an empty `epoch` is sent as null.
std::string hello_frame(hub_tier mode, int64_t seq, int64_t cursor,
                        bool resync, const std::string& epoch);

/// `{"type":"wake","cursor":N}`.
std::string wake_frame(int64_t cursor);

/// `wake <cursor>`: the non-JSON variant (fault knob non_json_frames).
std::string non_json_wake(int64_t cursor);

/// The filler sent before each event by the non_json_frames knob.
inline constexpr std::string_view non_json_filler = "not json";

/// `{"type":"pong"}`.
std::string pong_frame();

/// `{"type":"event","subject":...,"kind":...,"seq":S,"metadata":{...},
/// "id":N,"ts":T}`; `metadata_json` must be a serialized object.
std::string event_frame(const std::string& subject, const std::string& kind,
                        int64_t seq, const std::string& metadata_json,
                        int64_t id, double ts);

/// `{"events":[...],"cursor":N,"reset":B,"epoch":"..."}` (no epoch key when
/// `epoch` is empty), or with `bare_array` only the events array (fault
/// knob non_object_pages).
std::string render_page(const ledger_page& page, bool bare_array = false,
                        std::string_view epoch = {});

/// `{"detail":...}`.
std::string error_body(std::string_view detail);

/// Adds a `"pad"` string field to the JSON object text `frame` so that it is
/// exactly `size` bytes; returns `frame` unchanged when it is already that
/// long or longer, or not an object.
std::string pad_frame(std::string frame, std::size_t size);

} // namespace outbound
