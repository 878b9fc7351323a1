#include "actors/feed/feed_frames.hpp"

#include "core/classify.hpp"
#include "protocol/json_parse.hpp"

#include <boost/json/basic_parser_impl.hpp>
#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <limits>
#include <type_traits>
#include <utility>

namespace outbound {
inline namespace feed {

namespace json = boost::json;

std::string subscribe_frame(const std::vector<std::string>& prefixes,
                            const std::string& client_id,
                            std::optional<int64_t> last_seq,
                            std::optional<int64_t> cursor,
                            const std::optional<std::string>& epoch) {
  json::object o;
  o["type"] = "subscribe";
  json::array ps;
  for (auto& p : prefixes)
    ps.emplace_back(p);
  o["prefixes"] = std::move(ps);
  o["client_id"] = client_id;
  o["last_seq"] = last_seq ? json::value(*last_seq) : json::value(nullptr);
  o["cursor"] = cursor ? json::value(*cursor) : json::value(nullptr);
  o["epoch"] = epoch ? json::value(*epoch) : json::value(nullptr);
  return json::serialize(o);
}

std::optional<int64_t> json_integer(const json::value& v) {
  if (v.is_int64())
    return v.get_int64();
  if (v.is_uint64()
      && v.get_uint64()
           <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return static_cast<int64_t>(v.get_uint64());
  return std::nullopt;
}

namespace {

std::optional<int64_t> int_field(const json::object& o, std::string_view k) {
  auto it = o.find(k);
  if (it == o.end())
    return std::nullopt;
  return json_integer(it->value());
}

std::string string_field(const json::object& o, std::string_view k) {
  auto it = o.find(k);
  if (it == o.end() || !it->value().is_string())
    return {};
  return std::string{it->value().get_string()};
}

} // namespace

json_limits frame_json_limits(const feed_config& cfg) {
  json_limits l;
  l.max_depth = cfg.json_max_depth;
  auto cap = cfg.ws_max_frame_bytes
                 > std::numeric_limits<std::size_t>::max()
               ? std::numeric_limits<std::size_t>::max()
               : static_cast<std::size_t>(cfg.ws_max_frame_bytes);
  l.max_bytes = json_memory_bound(cap);
  return l;
}

parsed_message parse_message(std::string_view payload,
                             const std::string& wake_cursor_field,
                             const json_limits& limits) {
  parsed_message m;
  auto parsed = parse_json(payload, limits);
  m.parsed_bytes = parsed.bytes;
  auto& v = parsed.value;
  if (!parsed || !v.is_object()) {
    m.frame.type = frame_type::not_json;
    if (parsed.error == json_parse_error::too_large)
      m.error = "frame's parsed form exceeds the JSON memory bound ("
                + std::to_string(limits.max_bytes) + " bytes)";
    else
      m.error = !parsed ? parsed.detail : "not a JSON object";
    switch (parsed.error) {
      case json_parse_error::none:
        m.unreadable = frame_error_reason::not_an_object;
        break;
      case json_parse_error::too_deep:
        m.unreadable = frame_error_reason::too_deep;
        break;
      case json_parse_error::too_large:
        m.unreadable = frame_error_reason::memory_bound;
        break;
      case json_parse_error::number_out_of_range:
      case json_parse_error::inexact_integer:
        m.unreadable = frame_error_reason::bad_number;
        break;
      case json_parse_error::syntax:
      case json_parse_error::duplicate_key:
        m.unreadable = frame_error_reason::unparseable;
        break;
    }
    // What the text still shows of an event that cannot be read whole.
    if (!parsed)
      m.frame.seq = frame_seq(payload);
    return m;
  }
  auto& o = v.get_object();
  auto type = string_field(o, "type");
  if (type == "hello") {
    m.is_hello = true;
    m.hello.mode = string_field(o, "mode");
    m.hello.seq = int_field(o, "seq");
    m.hello.cursor = int_field(o, "cursor");
    auto r = o.find("resync");
    m.hello.resync = r != o.end() && r->value().is_bool()
                     && r->value().get_bool();
    auto e = o.find("epoch");
    if (e != o.end() && e->value().is_string())
      m.hello.epoch = std::string{e->value().get_string()};
  } else {
    if (type == "event")
      m.frame.type = frame_type::event;
    else if (type == "wake")
      m.frame.type = frame_type::wake;
    else
      m.frame.type = frame_type::other;
    m.frame.seq = int_field(o, "seq");
    m.frame.wake_cursor = int_field(o, wake_cursor_field);
  }
  m.json = std::move(v);
  return m;
}

namespace {

// parse_page and take_page: `Body` is `const json::value` (copy the events)
// or `json::value` (move them).
template <class Body>
parsed_page read_page(Body& body, const feed_fields& fields,
                      std::size_t max_events) {
  // take_page: the events keep the body's memory resource (a page's
  // arena), the array built in place (an assignment would copy into its
  // own). parse_page copies into the default resource: the caller's body
  // may live in a resource that dies before the page.
  parsed_page p{
    page_summary{},
    json::array(std::is_const_v<Body> ? json::storage_ptr{} : body.storage())};
  if (!body.is_object())
    return p;
  auto& o = body.get_object();
  p.summary.is_object = true;
  auto ev = o.find(fields.events);
  if (ev != o.end() && ev->value().is_array()) {
    auto& all = ev->value().get_array();
    auto n = all.size();
    if (n > max_events) {
      n = max_events;
      p.summary.over_limit = true;
    }
    p.events.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      if constexpr (std::is_const_v<Body>)
        p.events.push_back(all[i]);
      else
        p.events.push_back(std::move(all[i]));
    }
    p.summary.ids.reserve(p.events.size());
    for (auto& e : p.events) {
      if (e.is_object())
        p.summary.ids.push_back(int_field(e.get_object(), fields.event_id));
      else
        p.summary.ids.push_back(std::nullopt);
    }
  }
  p.summary.cursor = int_field(o, fields.cursor);
  auto r = o.find(fields.reset);
  p.summary.reset = r != o.end() && r->value().is_bool()
                    && r->value().get_bool();
  auto e = o.find(fields.epoch);
  if (e != o.end() && e->value().is_string())
    p.summary.epoch = std::string{e->value().get_string()};
  return p;
}

} // namespace

parsed_page parse_page(const json::value& body, const feed_fields& fields,
                       std::size_t max_events) {
  return read_page(body, fields, max_events);
}

parsed_page take_page(json::value& body, const feed_fields& fields,
                      std::size_t max_events) {
  return read_page(body, fields, max_events);
}

call_request replay_request(const feed_config& cfg, int64_t after,
                            int limit) {
  call_request c;
  c.method = "GET";
  c.path = cfg.replay_path;
  if (cfg.replay_max_response_bytes > 0)
    c.max_response_bytes = cfg.replay_max_response_bytes;
  c.keep_unreadable_body = unreadable_body_keep;
  // A page is read once and its events moved onward: one arena per page.
  c.json_arena = true;
  auto& f = cfg.fields;
  c.params.emplace_back(f.after_param, std::to_string(after));
  c.params.emplace_back(f.limit_param,
                        std::to_string(limit > 0 ? limit : cfg.limit));
  for (auto& p : cfg.prefixes)
    c.params.emplace_back(f.prefix_param, p);
  for (auto& kv : f.extra_params)
    c.params.push_back(kv);
  return c;
}

namespace {

// A basic_parser handler that builds nothing: it follows the keys down to
// one integer -- top-level `key1`, or, with `key2`, the `key2` of the first
// element of the top-level `key1` array -- and stops the parse as soon as
// the answer is known. The parse needs no memory per value and passes
// whatever nests deep (up to scan_max_depth) before the integer.
//
// With `key2`, the id names the first event only if that event may be the
// one that cannot be read: the scan goes on past the id to the end of the
// first event, and a second element after it means that the array holds
// more events than the one asked for (a server that ignores `limit`), any
// of which may be the unreadable one -- no id. The end of the array right
// after it, or the text failing or cut short before another element
// starts, keeps the id (see result()).
//
// Without `key2` (a frame's seq), the integer counts only in a frame whose
// top-level `type` is "event", before or after it: a garbled hello or
// notice says nothing about the event sequence.
class integer_scan {
public:
  static constexpr std::size_t max_object_size = static_cast<std::size_t>(-1);
  static constexpr std::size_t max_array_size = static_cast<std::size_t>(-1);
  static constexpr std::size_t max_key_size = static_cast<std::size_t>(-1);
  static constexpr std::size_t max_string_size = static_cast<std::size_t>(-1);

  integer_scan(std::string_view key1, std::optional<std::string_view> key2)
    : key1_(key1), key2_(key2) {
  }

  /// The integer, once the parse has returned: the one the scan stopped
  /// on, or, when the text ended or failed first, the first event's id
  /// provided no second element had started.
  std::optional<int64_t> result() const {
    if (done_)
      return found_;
    return candidate_;
  }

  bool on_document_begin(json::error_code&) {
    return true;
  }
  bool on_document_end(json::error_code&) {
    return true;
  }
  bool on_object_begin(json::error_code& ec) {
    if (type_key_ && depth_ == 1)
      return stop(ec); // the type is not "event"
    if (stage_ == stage::after_first && depth_ == 2)
      return stop(ec); // a second element
    if (stage_ == stage::events && depth_ == 2) {
      stage_ = stage::first_event;
      key_hit_ = false;
    }
    ++depth_;
    return true;
  }
  bool on_object_end(std::size_t, json::error_code& ec) {
    --depth_;
    if (depth_ == 0)
      return stop(ec); // the top object ended without the integer
    if (stage_ == stage::first_event && depth_ == 2) {
      if (!candidate_)
        return stop(ec); // the first event ended without its id
      stage_ = stage::after_first;
    }
    return true;
  }
  bool on_array_begin(json::error_code& ec) {
    if (depth_ == 0)
      return stop(ec); // not an object
    if (type_key_ && depth_ == 1)
      return stop(ec); // the type is not "event"
    if (depth_ == 2
        && (stage_ == stage::events || stage_ == stage::after_first))
      return stop(ec); // the first event is not an object, or a second one
    if (stage_ == stage::top && depth_ == 1 && key_hit_ && key2_)
      stage_ = stage::events;
    ++depth_;
    return true;
  }
  bool on_array_end(std::size_t, json::error_code& ec) {
    --depth_;
    if (stage_ == stage::events && depth_ == 1)
      return stop(ec); // an empty events array
    if (stage_ == stage::after_first && depth_ == 1) {
      found_ = candidate_; // exactly one event
      return stop(ec);
    }
    return true;
  }
  bool on_key_part(json::string_view s, std::size_t n, json::error_code&) {
    if (n == s.size())
      key_.assign(s.data(), s.size());
    else
      key_.append(s.data(), s.size());
    return true;
  }
  bool on_key(json::string_view s, std::size_t n, json::error_code& ec) {
    on_key_part(s, n, ec);
    if (stage_ == stage::top && depth_ == 1) {
      key_hit_ = key_ == key1_;
      type_key_ = !key2_ && type_ == type::unseen && key_ == "type";
    }
    else if (stage_ == stage::first_event && depth_ == 3)
      key_hit_ = !candidate_ && key_ == *key2_;
    return true;
  }
  bool on_string_part(json::string_view s, std::size_t n,
                      json::error_code& ec) {
    if (type_key_ && depth_ == 1) {
      if (n == s.size())
        type_value_.assign(s.data(), s.size());
      else
        type_value_.append(s.data(), s.size());
    }
    return element_starts(ec);
  }
  bool on_string(json::string_view s, std::size_t n, json::error_code& ec) {
    if (type_key_ && depth_ == 1) {
      on_string_part(s, n, ec);
      type_key_ = false;
      if (type_value_ != "event")
        return stop(ec);
      type_ = type::event;
      if (seq_) {
        found_ = seq_;
        return stop(ec);
      }
      return true;
    }
    return scalar(std::nullopt, ec);
  }
  bool on_number_part(json::string_view, json::error_code& ec) {
    return element_starts(ec);
  }
  bool on_int64(std::int64_t i, json::string_view, json::error_code& ec) {
    return scalar(i, ec);
  }
  bool on_uint64(std::uint64_t u, json::string_view, json::error_code& ec) {
    if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return scalar(static_cast<int64_t>(u), ec);
    return scalar(std::nullopt, ec);
  }
  bool on_double(double, json::string_view, json::error_code& ec) {
    return scalar(std::nullopt, ec);
  }
  bool on_bool(bool, json::error_code& ec) {
    return scalar(std::nullopt, ec);
  }
  bool on_null(json::error_code& ec) {
    return scalar(std::nullopt, ec);
  }
  bool on_comment_part(json::string_view, json::error_code&) {
    return true;
  }
  bool on_comment(json::string_view, json::error_code&) {
    return true;
  }

private:
  enum class stage : uint8_t { top, events, first_event, after_first };
  enum class type : uint8_t { unseen, event };

  // A string or number begins (or goes on) at the current depth: after the
  // first event, that is a second element.
  bool element_starts(json::error_code& ec) {
    if (stage_ == stage::after_first && depth_ == 2)
      return stop(ec);
    return true;
  }

  // A scalar value at the current depth.
  bool scalar(std::optional<int64_t> v, json::error_code& ec) {
    if (type_key_ && depth_ == 1)
      return stop(ec); // the type is not "event"
    if (stage_ == stage::top && depth_ == 1 && key_hit_) {
      if (key2_ || !v)
        return stop(ec); // the events field is not an array, a bad seq
      if (type_ == type::event) {
        found_ = v;
        return stop(ec);
      }
      // Kept until the type shows.
      if (!seq_)
        seq_ = v;
      key_hit_ = false;
      return true;
    }
    if (depth_ == 2
        && (stage_ == stage::events || stage_ == stage::after_first))
      return stop(ec); // the first event is not an object, or a second one
    if (stage_ == stage::first_event && depth_ == 3 && key_hit_) {
      if (!v)
        return stop(ec); // an id that is not an integer
      // Kept until the first event ends and what follows it is seen.
      candidate_ = v;
      key_hit_ = false;
    }
    return true;
  }

  bool stop(json::error_code& ec) {
    done_ = true;
    ec = json::error::exception;
    return false;
  }

  std::string_view key1_;
  std::optional<std::string_view> key2_;
  std::string key_;
  bool key_hit_ = false;
  stage stage_ = stage::top;
  std::size_t depth_ = 0;
  bool done_ = false;
  std::optional<int64_t> found_;
  std::optional<int64_t> candidate_;
  // Without key2: the top-level type, while its value is read, and the
  // seq seen before it.
  bool type_key_ = false;
  type type_ = type::unseen;
  std::string type_value_;
  std::optional<int64_t> seq_;
};

// The nesting the scan follows. Boost.JSON's basic_parser recurses once per
// level, so the depth it is allowed bounds its stack: an unbounded depth
// lets a hostile text (a frame or body of a few hundred thousand `[`)
// overflow the stack. The largest response-body depth a client may be
// configured to read (client_config json_max_depth, at most 1024): what
// nests deeper is unreadable by every parse, and the scan stops there (the
// integer is not shown if it comes after that point).
constexpr std::size_t scan_max_depth = 1024;

std::optional<int64_t> scan_integer(std::string_view text,
                                    std::string_view key1,
                                    std::optional<std::string_view> key2) {
  json::parse_options opt;
  opt.max_depth = scan_max_depth;
  json::basic_parser<integer_scan> p{opt, key1, key2};
  json::error_code ec;
  // more = true: a body cut short is not an error before the id.
  p.write_some(true, text.data(), text.size(), ec);
  return p.handler().result();
}

} // namespace

std::optional<int64_t> first_event_id(std::string_view body,
                                      const feed_fields& fields) {
  return scan_integer(body, fields.events,
                      std::string_view{fields.event_id});
}

std::optional<int64_t> frame_seq(std::string_view payload) {
  return scan_integer(payload, "seq", std::nullopt);
}

std::optional<drain_error_reason> unreadable_reason(const call_error& e) {
  if (e.kind != error_kind::response_error)
    return std::nullopt;
  // A non-2xx status is a status failure, retried as a replay error, even
  // when its error page is over the cap (the transport's too_large keeps
  // the status): the page was never a page of events.
  if (e.status != 0 && !is_success_status(e.status))
    return std::nullopt;
  // A 2xx over the cap ends as the transport's too_large, before (or
  // without) a status: the answer was there, too big to read.
  if (e.cause == transport_error_kind::too_large)
    return drain_error_reason::over_cap;
  if (e.status == 0)
    return std::nullopt;
  // The client's 2xx response errors: a body over the cap (the transport's
  // too_large, or actors/call/call_actor.cpp "response body over
  // max_response_bytes (N bytes)"), and a body that is not JSON.
  if (e.detail.find("max_response_bytes") != std::string::npos)
    return drain_error_reason::over_cap;
  return drain_error_reason::unparseable;
}

} // namespace feed
} // namespace outbound
