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

/// The members the readers look for, found in one pass over an object
/// (a parsed object holds each key once: Boost.JSON keeps the last of a
/// repeated key, and unambiguous_object refuses a body that repeats one).
struct oracle_fields {
  const json::value* physical_ms = nullptr;
  const json::value* logical_start = nullptr;
  const json::value* start = nullptr;
  const json::value* count = nullptr;
  const json::value* epoch = nullptr;
};

oracle_fields fields_of(const json::object& o) {
  oracle_fields f;
  for (const auto& kv : o) {
    auto k = kv.key();
    const auto* v = &kv.value();
    if (k == "count")
      f.count = v;
    else if (k == "epoch")
      f.epoch = v;
    else if (k == "physical_ms")
      f.physical_ms = v;
    else if (k == "logical_start")
      f.logical_start = v;
    else if (k == "start")
      f.start = v;
  }
  return f;
}

std::optional<uint64_t> u64_of(const json::value* v) {
  if (!v)
    return std::nullopt;
  if (v->is_uint64())
    return v->as_uint64();
  if (v->is_int64() && v->as_int64() >= 0)
    return static_cast<uint64_t>(v->as_int64());
  return std::nullopt;
}

/// The `"epoch"` member as a leader epoch: a decimal string of 1..20
/// digits, at most 2^64-1, as hints carry it (parse_leader_epoch).
std::optional<uint64_t> leader_epoch_of(const oracle_fields& f) {
  if (!f.epoch || !f.epoch->is_string())
    return std::nullopt;
  return parse_leader_epoch(f.epoch->as_string());
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

json_limits depth_limit(std::size_t max_depth) {
  json_limits l;
  l.max_depth = max_depth;
  return l;
}

/// A parsed body as the readers see it: its members when it is an object
/// (also an ambiguous one: the epoch leader discovery takes is read even
/// from that), its leader epoch, and whether its fields may be served.
struct read_body {
  const json::object* served = nullptr; // unambiguous_object
  oracle_fields fields;                 // of any parsed object
  std::optional<uint64_t> epoch;        // leader_epoch_of(fields)
  std::string unreadable;               // unreadable_cause

  explicit read_body(const json_parse_result& parsed) {
    if (parsed && parsed.value.is_object())
      fields = fields_of(parsed.value.as_object());
    epoch = leader_epoch_of(fields);
    served = parsed ? unambiguous_object(parsed) : nullptr;
    unreadable = unreadable_cause(parsed, served);
  }
};

// A body that does not parse, or fields out of range, give default values
// (count 0): the batcher reports the violation (ts) or the uncertainty (seq).
// `epoch` is kept only when it is a decimal leader epoch: a hostile 60 KB
// epoch is never copied to every waiter of a batch (ts is served without
// it, seq becomes uncertain: check_seq_response wants an epoch).

ts_response ts_of(const read_body& b) {
  ts_response r;
  r.unreadable = b.unreadable;
  if (!b.served)
    return r;
  auto phys = u64_of(b.fields.physical_ms);
  auto logical = u64_of(b.fields.logical_start);
  auto count = u64_of(b.fields.count);
  if (!phys || !logical || !count || *logical > UINT32_MAX
      || *count > UINT32_MAX) {
    r.unreadable = "physical_ms, logical_start or count missing or not an "
                   "unsigned integer in range";
    return r;
  }
  r.physical_ms = *phys;
  r.logical_start = static_cast<uint32_t>(*logical);
  r.count = static_cast<uint32_t>(*count);
  if (b.epoch)
    r.epoch = std::string{b.fields.epoch->as_string()};
  return r;
}

seq_response seq_of(const read_body& b) {
  seq_response r;
  r.unreadable = b.unreadable;
  if (!b.served)
    return r;
  auto start = u64_of(b.fields.start);
  auto count = u64_of(b.fields.count);
  if (!start || !count || *count > UINT32_MAX) {
    r.unreadable = "start or count missing or not an unsigned integer in "
                   "range";
    return r;
  }
  r.start = *start;
  r.count = static_cast<uint32_t>(*count);
  if (b.epoch)
    r.epoch = std::string{b.fields.epoch->as_string()};
  return r;
}

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
  return f(read_body{parsed});
}

} // namespace

ts_response parse_ts_body(const std::string& body, std::size_t max_depth) {
  return with_parsed(body, max_depth,
                     [](const read_body& b) { return ts_of(b); });
}

seq_response parse_seq_body(const std::string& body, std::size_t max_depth) {
  return with_parsed(body, max_depth,
                     [](const read_body& b) { return seq_of(b); });
}

std::optional<uint64_t> parse_body_epoch(const std::string& body,
                                         std::size_t max_depth) {
  return with_parsed(body, max_depth,
                     [](const read_body& b) { return b.epoch; });
}

read_ts_result read_ts_body(const std::string& body, std::size_t max_depth) {
  return with_parsed(body, max_depth, [](const read_body& b) {
    return read_ts_result{ts_of(b), b.epoch};
  });
}

read_seq_result read_seq_body(const std::string& body, std::size_t max_depth) {
  return with_parsed(body, max_depth, [](const read_body& b) {
    return read_seq_result{seq_of(b), b.epoch};
  });
}

} // namespace coalesce
} // namespace outbound
