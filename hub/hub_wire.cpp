#include "hub/hub_wire.hpp"

#include "protocol/json_parse.hpp"

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include <cctype>
#include <climits>

namespace outbound {

namespace json = boost::json;

const char* to_string(hub_tier t) {
  switch (t) {
    case hub_tier::ledger: return "ledger";
    case hub_tier::catchup: return "catchup";
    case hub_tier::ephemeral: return "ephemeral";
  }
  return "ledger";
}

std::optional<hub_tier> parse_hub_tier(std::string_view name) {
  if (name == "ledger")
    return hub_tier::ledger;
  if (name == "catchup")
    return hub_tier::catchup;
  if (name == "ephemeral")
    return hub_tier::ephemeral;
  return std::nullopt;
}

namespace {

std::optional<json::value> try_parse(std::string_view text) {
  auto r = parse_json(text);
  if (!r)
    return std::nullopt;
  return std::move(r.value);
}

/// Stored metadata text (serialize() of a parsed object, so it parses
/// under the default limits) as a value; {} for "" as at publish.
json::value metadata_value(const std::string& metadata_json) {
  auto r = parse_json(metadata_json.empty() ? "{}" : metadata_json);
  if (!r)
    return json::object{};
  return std::move(r.value);
}

/// Serialized size of a string (quotes and escapes included).
std::size_t json_string_bytes(std::string_view s) {
  return json::serialize(json::string_view{s.data(), s.size()}).size();
}

int hex_value(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

std::string decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size()
               && hex_value(s[i + 1]) >= 0 && hex_value(s[i + 2]) >= 0) {
      out += static_cast<char>(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::optional<int64_t> int_field(const json::object& o, const char* key) {
  auto* v = o.if_contains(key);
  if (!v)
    return std::nullopt;
  if (v->is_int64())
    return v->get_int64();
  if (v->is_uint64() && v->get_uint64() <= static_cast<uint64_t>(INT64_MAX))
    return static_cast<int64_t>(v->get_uint64());
  return std::nullopt;
}

std::optional<std::string> string_field(const json::object& o,
                                        const char* key) {
  auto* v = o.if_contains(key);
  if (!v || !v->is_string())
    return std::nullopt;
  return std::string{v->get_string()};
}

bool all_digits(std::string_view s) {
  if (s.empty())
    return false;
  for (char c : s)
    if (c < '0' || c > '9')
      return false;
  return true;
}

} // namespace

publish_parse parse_publish(std::string_view body,
                            std::size_t metadata_max_bytes) {
  publish_limits l;
  l.metadata_max_bytes = metadata_max_bytes;
  return parse_publish(body, l);
}

namespace {

// Why a publish body's JSON is refused (nested too deep, a number stored
// inexactly, not JSON at all); empty when it parsed.
std::string json_refusal(const json_parse_result& parsed,
                         const publish_limits& limits) {
  if (parsed.error == json_parse_error::too_deep)
    return "metadata nests deeper than "
           + std::to_string(limits.metadata_max_depth) + " levels";
  if (parsed.error == json_parse_error::number_out_of_range) {
    // "number out of range (IEEE 754 binary64)", or "(underflows IEEE 754
    // binary64 to zero)" for 1e-400, which stored would replay as 0.
    auto why = parsed.detail.substr(0, parsed.detail.rfind(" at "));
    return parsed.field.empty() ? std::string{"number out of range"}
                                : parsed.field + ": " + why;
  }
  if (parsed.error == json_parse_error::inexact_integer) {
    // Stored, it would be a double and replay its low digits changed.
    return parsed.field.empty()
             ? std::string{"integer not exact in IEEE 754 binary64"}
             : parsed.field
                 + ": integer not exact in IEEE 754 binary64 (send it as "
                   "a string)";
  }
  if (!parsed)
    return "body is not JSON";
  if (!parsed.value.is_object())
    return "body must be a JSON object";
  return {};
}

// Reads the event's fields from the body object `o` into `in`; the reason
// the body is refused, or empty.
std::string read_publish_fields(const json::object& o,
                                const publish_limits& limits,
                                publish_input& in) {
  auto* subject = o.if_contains("subject");
  if (!subject || !subject->is_string() || subject->get_string().empty())
    return "subject must be a non-empty string";
  in.subject = std::string{subject->get_string()};
  if (in.subject.size() > limits.subject_max_bytes)
    return "subject exceeds " + std::to_string(limits.subject_max_bytes)
           + " bytes";
  if (auto* kind = o.if_contains("kind"); kind && !kind->is_null()) {
    if (!kind->is_string())
      return "kind must be a string";
    in.kind = std::string{kind->get_string()};
  }
  if (auto* md = o.if_contains("metadata"); md && !md->is_null()) {
    if (!md->is_object())
      return "metadata must be an object";
    in.metadata_json = json::serialize(*md);
    if (in.metadata_json.size() > limits.metadata_max_bytes)
      return "metadata exceeds " + std::to_string(limits.metadata_max_bytes)
             + " bytes";
  }
  if (auto* key = o.if_contains("dedupe_key"); key && !key->is_null()) {
    if (!key->is_string())
      return "dedupe_key must be a string";
    in.dedupe_key = std::string{key->get_string()};
  }
  auto event_bytes = json_string_bytes(in.subject)
                     + json_string_bytes(in.kind) + in.metadata_json.size()
                     + event_json_overhead;
  if (event_bytes > limits.event_max_bytes)
    return "event exceeds " + std::to_string(limits.event_max_bytes) + " bytes";
  return {};
}

} // namespace

publish_parse parse_publish(std::string_view body,
                            const publish_limits& limits) {
  publish_parse r;
  json_limits jl;
  jl.max_depth = limits.metadata_max_depth + 1; // the body object
  // Within the request body cap (1 MiB) a parse is at most ~24 bytes of
  // parsed form per byte of text; no memory bound needed here.
  auto parsed = parse_json(body, jl);
  r.error = json_refusal(parsed, limits);
  if (!r.error.empty())
    return r;
  publish_input in;
  r.error = read_publish_fields(parsed.value.get_object(), limits, in);
  if (r.error.empty())
    r.input = std::move(in);
  return r;
}

hub_target parse_hub_target(std::string_view target) {
  hub_target t;
  auto q = target.find('?');
  t.path = std::string{target.substr(0, q)};
  if (q == std::string_view::npos)
    return t;
  auto rest = target.substr(q + 1);
  if (auto h = rest.find('#'); h != std::string_view::npos)
    rest = rest.substr(0, h);
  while (!rest.empty()) {
    auto amp = rest.find('&');
    auto part = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view{}
                                         : rest.substr(amp + 1);
    if (part.empty())
      continue;
    auto eq = part.find('=');
    if (eq == std::string_view::npos)
      t.query.emplace_back(decode(part), std::string{});
    else
      t.query.emplace_back(decode(part.substr(0, eq)),
                           decode(part.substr(eq + 1)));
  }
  return t;
}

replay_query_parse parse_replay_query(const hub_query& q) {
  replay_query_parse r;
  replay_query out;
  for (const auto& [k, v] : q) {
    if (k == "after") {
      if (!all_digits(v)) {
        r.error = "after must be a non-negative integer";
        return r;
      }
      if (v.size() > 18) {
        r.error = "after has more than 18 digits";
        return r;
      }
      auto n = std::stoll(v);
      if (n > max_replay_after) {
        r.error = "after exceeds 2147483647";
        return r;
      }
      out.after = n;
    } else if (k == "limit") {
      std::string_view digits = v;
      bool negative = !digits.empty() && digits[0] == '-';
      if (negative)
        digits.remove_prefix(1);
      if (!all_digits(digits)) {
        r.error = "limit must be an integer";
        return r;
      }
      // <= 0 means the default; anything above INT_MAX clamps (the log
      // clamps again to replay_limit).
      if (negative)
        out.limit = 0;
      else if (digits.size() > 9)
        out.limit = INT_MAX;
      else
        out.limit = std::stoi(std::string{digits});
    } else if (k == "prefix") {
      out.prefixes.push_back(v);
    }
  }
  r.query = std::move(out);
  return r;
}

std::optional<subscribe_request> parse_subscribe(std::string_view text) {
  auto v = try_parse(text);
  if (!v || !v->is_object())
    return std::nullopt;
  const auto& o = v->get_object();
  if (string_field(o, "type") != std::optional<std::string>{"subscribe"})
    return std::nullopt;
  subscribe_request s;
  if (auto* p = o.if_contains("prefixes"); p && p->is_array())
    for (const auto& e : p->get_array())
      if (e.is_string())
        s.prefixes.emplace_back(e.get_string());
  if (auto id = string_field(o, "client_id");
      id && id->size() <= max_client_id_bytes)
    s.client_id = *id;
  s.last_seq = int_field(o, "last_seq");
  s.cursor = int_field(o, "cursor");
  s.epoch = string_field(o, "epoch");
  return s;
}

bool is_json_ping(std::string_view text) {
  auto v = try_parse(text);
  return v && v->is_object()
         && string_field(v->get_object(), "type")
              == std::optional<std::string>{"ping"};
}

std::string hello_frame(hub_tier mode, int64_t seq, int64_t cursor,
                        bool resync, const std::string& epoch) {
  json::object o;
  o["type"] = "hello";
  o["mode"] = to_string(mode);
  o["seq"] = seq;
  o["cursor"] = cursor;
  o["resync"] = resync;
  if (epoch.empty())
    o["epoch"] = nullptr;
  else
    o["epoch"] = epoch;
  return json::serialize(o);
}

std::string wake_frame(int64_t cursor) {
  return "{\"type\":\"wake\",\"cursor\":" + std::to_string(cursor) + "}";
}

std::string non_json_wake(int64_t cursor) {
  return "wake " + std::to_string(cursor);
}

std::string pong_frame() {
  return "{\"type\":\"pong\"}";
}

std::string event_frame(const std::string& subject, const std::string& kind,
                        int64_t seq, const std::string& metadata_json,
                        int64_t id, double ts) {
  json::object o;
  o["type"] = "event";
  o["subject"] = subject;
  o["kind"] = kind;
  o["seq"] = seq;
  // Stored metadata was produced by serialize() at publish.
  o["metadata"] = metadata_value(metadata_json);
  o["id"] = id;
  o["ts"] = ts;
  return json::serialize(o);
}

std::string render_page(const ledger_page& page, bool bare_array,
                        std::string_view epoch) {
  std::size_t n = 64;
  for (const auto& e : page.events)
    n += e->json.size() + 1;
  std::string out;
  out.reserve(n);
  out += bare_array ? "[" : "{\"events\":[";
  bool first = true;
  for (const auto& e : page.events) {
    if (!first)
      out += ',';
    first = false;
    out += e->json;
  }
  out += ']';
  if (bare_array)
    return out;
  out += ",\"cursor\":";
  out += std::to_string(page.cursor);
  out += ",\"reset\":";
  out += page.reset ? "true" : "false";
  if (!epoch.empty()) {
    out += ",\"epoch\":";
    out += json::serialize(json::string_view{epoch.data(), epoch.size()});
  }
  out += '}';
  return out;
}

std::string error_body(std::string_view detail) {
  json::object o;
  o["detail"] = json::string_view{detail.data(), detail.size()};
  return json::serialize(o);
}

std::string pad_frame(std::string frame, std::size_t size) {
  if (frame.size() < 2 || frame.front() != '{' || frame.back() != '}')
    return frame;
  bool empty_object = frame == "{}";
  // `,"pad":""` (or `"pad":""` in an empty object) plus the filler.
  std::size_t overhead = empty_object ? 8 : 9;
  if (frame.size() + overhead > size)
    return frame;
  std::size_t fill = size - frame.size() - overhead;
  frame.pop_back();
  if (!empty_object)
    frame += ',';
  frame += "\"pad\":\"";
  frame.append(fill, 'x');
  frame += "\"}";
  return frame;
}

} // namespace outbound
