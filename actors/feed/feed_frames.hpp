#pragma once

// JSON codecs of the feed protocol on the watcher's side (the change-feed
// wire frames of hyperdjango's serviceclient, docs/ARCHITECTURE.md "Sources"): the subscribe frame it sends, the hub's messages it
// reads, the replay request it makes and the replay page it reads. Pure
// functions on Boost.JSON; no I/O.
//
//   client -> hub  {"type":"subscribe","prefixes":[...],"client_id":...,
//                   "last_seq":N|null,"cursor":N|null,"epoch":"..."|null}
//   hub -> client  {"type":"hello","mode":...,"seq":N,"cursor":N,
//                   "resync":bool,"epoch":"..."|null}
//                  {"type":"event","subject":...,"kind":...,"seq":N,...}
//                  {"type":"wake","cursor":N}
//   replay page    {"events":[{"id":N,...},...],"cursor":N,"reset":bool}

#include "actors/feed/feed_config.hpp"
#include "actors/feed/ledger_drain.hpp"
#include "actors/feed/mode_negotiator.hpp"
#include "actors/messages.hpp"
#include "protocol/json_parse.hpp"

#include <boost/json/array.hpp>
#include <boost/json/value.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace outbound {
inline namespace feed {

/// The subscribe frame sent on every connect. `cursor` is nullopt when no
/// replay path is configured; the first subscribe has last_seq and epoch
/// null. Keys in the order above.
std::string subscribe_frame(const std::vector<std::string>& prefixes,
                            const std::string& client_id,
                            std::optional<int64_t> last_seq,
                            std::optional<int64_t> cursor,
                            const std::optional<std::string>& epoch);

/// The integer value of `v`: an int64, or a uint64 that fits; nullopt for
/// anything else (doubles, strings, null).
std::optional<int64_t> json_integer(const boost::json::value& v);

/// One inbound data message, classified.
struct parsed_message {
  /// `{"type":"hello",...}`: `hello` is filled, `frame` is not used.
  bool is_hello = false;
  hello_info hello;
  /// Every other message.
  frame_info frame;
  /// The parsed JSON object (null when the message is not a JSON object).
  boost::json::value json;
  /// not_json: why ("<parser message>" or "not a JSON object").
  std::string error;
  /// The parsed form's size (json_parse_result::bytes; 0 when not parsed).
  std::size_t parsed_bytes = 0;
  /// not_json: the same as a label.
  frame_error_reason unreadable = frame_error_reason::unparseable;
};

/// The limits of every parse of a WebSocket message of the feed under
/// `cfg`: nesting depth cfg.json_max_depth, and the memory bound of a
/// text of ws_max_frame_bytes by the rule HTTP bodies follow
/// (json_memory_bound at its default factor and ceiling: 128 MiB at the
/// default 8 MiB cap), so that no message within the cap makes a parse
/// take more.
json_limits frame_json_limits(const feed_config& cfg);

/// Classifies a message. Never throws: a payload that is not a JSON object
/// or that cannot be parsed within `limits` (too deep, parsed form over
/// the memory bound, a number out of range) is `frame_type::not_json` (in
/// the ledger model still a wake), with the top-level integer `seq` in
/// `frame.seq` when the text still shows it (frame_seq).
/// `wake_cursor_field` names the cursor hint of any JSON object. [limits:
/// frame_json_limits of a default feed_config]
parsed_message parse_message(std::string_view payload,
                             const std::string& wake_cursor_field,
                             const json_limits& limits
                             = frame_json_limits(feed_config{}));

/// A replay response, split for the drain.
struct parsed_page {
  page_summary summary;
  /// The events, in page order (empty for a bad page).
  boost::json::array events;
};

/// Reads a replay response body per `fields`: a non-object is a bad page;
/// a missing or non-array events field reads as no events; a missing or
/// non-integer cursor reads as absent; reset is true only for `true`.
/// Only the first `max_events` events are kept (the limit the replay asked
/// for; more sets `over_limit`), so a hostile page cannot make the watcher
/// queue more than one page's worth of deliveries. [no cut]
parsed_page parse_page(const boost::json::value& body,
                       const feed_fields& fields,
                       std::size_t max_events = static_cast<std::size_t>(-1));

/// As parse_page, but moves the kept events out of `body`'s events array
/// (left holding nulls) instead of copying them: the watcher's one read of
/// a page the client parsed. The events keep `body`'s memory resource.
parsed_page take_page(boost::json::value& body, const feed_fields& fields,
                      std::size_t max_events = static_cast<std::size_t>(-1));

/// The replay call: GET replay_path with after=`after`, limit (`limit`, or
/// cfg.limit when 0), one prefix parameter per prefix, then the extra
/// parameters; capped at cfg.replay_max_response_bytes when set.
call_request replay_request(const feed_config& cfg, int64_t after,
                            int limit = 0);

/// How much of an unreadable replay body the watcher asks the client to
/// hand back for first_event_id (the first event's id comes first). [64 KiB]
inline constexpr std::size_t unreadable_body_keep = 64 * 1024;

/// The id of the first event of a replay body that cannot be read whole
/// (too deep, too large once parsed, a bad number or a syntax error after
/// it, cut short), read per `fields` by a scan that builds no values: the
/// integer `fields.event_id` of the first element of the top-level
/// object's `fields.events` array, when that event may be the one that
/// cannot be read -- the array holds it alone, or the body fails, nests
/// deeper than 1024 levels or is cut short inside it or before another
/// element starts after it. nullopt when the body does not show it (not an
/// object, no events, a first event that is not an object or has no
/// integer id, a syntax error or nesting deeper than 1024 levels before
/// it), and when another element follows the first event (a server that
/// ignores the limit: the first event is readable).
std::optional<int64_t> first_event_id(std::string_view body,
                                      const feed_fields& fields);

/// The integer top-level `seq` of an event frame that cannot be read whole,
/// by the same scan: shown only when the scan also sees the frame's
/// top-level `type` to be "event" (before or after the seq); nullopt when
/// the frame does not show both (another type, a type or seq past a syntax
/// error, the end of the text or nesting deeper than 1024 levels).
std::optional<int64_t> frame_seq(std::string_view payload);

/// The drain error of a replay answer that came back but cannot be read
/// (a 2xx response_error: over the cap, or a body that does not parse);
/// nullopt for every other failure (a transport error, an HTTP status),
/// which is a replay error, retried as it is.
std::optional<drain_error_reason> unreadable_reason(const call_error& e);

} // namespace feed
} // namespace outbound
