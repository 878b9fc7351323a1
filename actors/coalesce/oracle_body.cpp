#include "actors/coalesce/oracle_body.hpp"

#include "protocol/json_parse.hpp"

#include "actors/coalesce/leader_state.hpp"

#include <boost/json/monotonic_resource.hpp>
#include <boost/json/value.hpp>

#include <cstddef>
#include <cstdint>

namespace outbound {
inline namespace coalesce {

namespace json = boost::json;

namespace {

std::optional<uint64_t> u64_field(const json::object& o, const char* name) {
  auto* v = o.if_contains(name);
  if (!v)
    return std::nullopt;
  if (v->is_uint64())
    return v->as_uint64();
  if (v->is_int64() && v->as_int64() >= 0)
    return static_cast<uint64_t>(v->as_int64());
  return std::nullopt;
}

/// The top-level object of a 2xx body, or nullptr when the body is not a
/// JSON object or repeats a key (ambiguous: parse_json keeps the last
/// one, another reader the first; never served).
const json::object* unambiguous_object(const json_parse_result& parsed) {
  const auto& v = parsed.value;
  if (!v.is_object() || parsed.top_level_members != v.as_object().size())
    return nullptr;
  return &v.as_object();
}

/// The body's "epoch" if it is a decimal leader epoch (1..20 digits, at
/// most 2^64-1, as hints carry it), else "": a hostile 60 KB epoch is never
/// copied to every waiter of a batch (ts is served without it, seq becomes
/// uncertain: check_seq_response wants an epoch).
std::string decimal_epoch(const json::object& o) {
  auto* e = o.if_contains("epoch");
  if (!e || !e->is_string() || !parse_leader_epoch(e->as_string()))
    return {};
  return std::string{e->as_string()};
}

/// Why a 2xx body gives no object to read fields from: empty when `obj`
/// is set.
std::string unreadable_cause(const json_parse_result& parsed,
                             const json::object* obj) {
  if (obj)
    return {};
  if (parsed.error == json_parse_error::syntax)
    return "response body is not JSON";
  if (!parsed)
    return "response body unreadable: " + parsed.detail;
  if (!parsed.value.is_object())
    return "response body is not a JSON object";
  return "response body repeats a top-level key";
}

} // namespace

// A body that does not parse, or fields out of range, give default values
// (count 0): the batcher reports the violation (ts) or the uncertainty (seq).

namespace {

json_limits depth_limit(std::size_t max_depth) {
  json_limits l;
  l.max_depth = max_depth;
  return l;
}

/// The `"epoch"` of a parsed body as parse_body_epoch reads it.
std::optional<uint64_t> epoch_of(const json_parse_result& parsed) {
  auto& v = parsed.value;
  if (!parsed || !v.is_object())
    return std::nullopt;
  auto* e = v.as_object().if_contains("epoch");
  if (!e || !e->is_string())
    return std::nullopt;
  return parse_leader_epoch(e->as_string());
}

ts_response ts_of(const json_parse_result& parsed) {
  ts_response r;
  auto* obj = parsed ? unambiguous_object(parsed) : nullptr;
  r.unreadable = unreadable_cause(parsed, obj);
  if (!obj)
    return r;
  auto& o = *obj;
  auto phys = u64_field(o, "physical_ms");
  auto logical = u64_field(o, "logical_start");
  auto count = u64_field(o, "count");
  if (!phys || !logical || !count || *logical > UINT32_MAX
      || *count > UINT32_MAX) {
    r.unreadable = "physical_ms, logical_start or count missing or not an "
                   "unsigned integer in range";
    return r;
  }
  r.physical_ms = *phys;
  r.logical_start = static_cast<uint32_t>(*logical);
  r.count = static_cast<uint32_t>(*count);
  r.epoch = decimal_epoch(o);
  return r;
}

seq_response seq_of(const json_parse_result& parsed) {
  seq_response r;
  auto* obj = parsed ? unambiguous_object(parsed) : nullptr;
  r.unreadable = unreadable_cause(parsed, obj);
  if (!obj)
    return r;
  auto& o = *obj;
  auto start = u64_field(o, "start");
  auto count = u64_field(o, "count");
  if (!start || !count || *count > UINT32_MAX) {
    r.unreadable = "start or count missing or not an unsigned integer in "
                   "range";
    return r;
  }
  r.start = *start;
  r.count = static_cast<uint32_t>(*count);
  r.epoch = decimal_epoch(o);
  return r;
}

} // namespace

ts_response parse_ts_body(const std::string& body, std::size_t max_depth) {
  return ts_of(parse_json(body, depth_limit(max_depth)));
}

seq_response parse_seq_body(const std::string& body, std::size_t max_depth) {
  return seq_of(parse_json(body, depth_limit(max_depth)));
}

std::optional<uint64_t> parse_body_epoch(const std::string& body,
                                         std::size_t max_depth) {
  return epoch_of(parse_json(body, depth_limit(max_depth)));
}

namespace {

/// The parse of one oracle answer, in an arena on the stack: an answer is
/// a few dozen bytes, so its parsed form takes no heap allocation. A larger
/// one takes heap blocks from the arena, which frees nothing before the
/// parse ends (so a body at the response cap, max_oracle_body, may peak at
/// about twice what the default allocator would hold). Nothing read from
/// it outlives the call: ts_of / seq_of copy what they keep.
template <class F>
auto with_parsed(const std::string& body, std::size_t max_depth, F&& f) {
  alignas(std::max_align_t) unsigned char buf[1024];
  json::monotonic_resource arena{buf, sizeof buf};
  auto parsed
    = parse_json(body, depth_limit(max_depth), json::storage_ptr{&arena});
  return f(parsed);
}

} // namespace

read_ts_result read_ts_body(const std::string& body, std::size_t max_depth) {
  return with_parsed(body, max_depth, [&](const json_parse_result& parsed) {
    return read_ts_result{ts_of(parsed), epoch_of(parsed)};
  });
}

read_seq_result read_seq_body(const std::string& body, std::size_t max_depth) {
  return with_parsed(body, max_depth, [&](const json_parse_result& parsed) {
    return read_seq_result{seq_of(parsed), epoch_of(parsed)};
  });
}

} // namespace coalesce
} // namespace outbound
