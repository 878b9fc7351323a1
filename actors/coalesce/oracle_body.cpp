#include "actors/coalesce/oracle_body.hpp"

#include "protocol/json_parse.hpp"

#include "actors/coalesce/leader_state.hpp"

#include <boost/json/monotonic_resource.hpp>
#include <boost/json/value.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>

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

// -- the scan of a plain answer ---------------------------------------------
//
// The oracle answers a success with a flat object of a few unsigned
// integers and a decimal epoch string (hub/oracle_state.cpp builds
// `{"physical_ms":P,"logical_start":L,"count":N,"epoch":"E"}`). Building a
// DOM of that costs more than the rest of the answer's handling, so the
// readers first scan the body for exactly that shape and fall back to the
// DOM reader (with_parsed) on anything else. The scan accepts a strict
// subset of what the DOM reader reads, and gives what it would give:
//  - one object, JSON whitespace (RFC 8259 section 2) around its tokens,
//    nothing after it;
//  - keys without escapes, each a field the reader looks for, none twice
//    (another key, an escape, a repeat: the DOM decides);
//  - numbers as 1..19 digits without a leading zero (below 10^19, so
//    within uint64; a sign, a fraction, an exponent, a 20th digit: the DOM
//    decides);
//  - the epoch as a string of printable ASCII other than `"` and `\`, so
//    its bytes are its value (anything else: the DOM decides);
//  - every field the reader needs, in range (else the DOM names the cause).
// simdjson's "On-Demand" front end makes the same trade for the same
// reason: read the fields a caller wants straight off the text (Langdale
// & Lemire, "Parsing Gigabytes of JSON per Second", VLDB Journal 2019).

enum class scan_field : uint8_t {
  physical_ms,
  logical_start,
  start,
  count,
  epoch,
  size_
};

struct scanned {
  std::optional<uint64_t> number[static_cast<std::size_t>(scan_field::size_)];
  std::optional<std::string_view> epoch;
};

constexpr uint8_t bit(scan_field f) {
  return static_cast<uint8_t>(1u << static_cast<unsigned>(f));
}

std::optional<scan_field> field_named(std::string_view key) {
  switch (key.size()) {
    case 5:
      if (key == "count")
        return scan_field::count;
      if (key == "epoch")
        return scan_field::epoch;
      if (key == "start")
        return scan_field::start;
      return std::nullopt;
    case 11:
      if (key == "physical_ms")
        return scan_field::physical_ms;
      return std::nullopt;
    case 13:
      if (key == "logical_start")
        return scan_field::logical_start;
      return std::nullopt;
    default: return std::nullopt;
  }
}

bool json_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/// The scan of `body` as a flat object of `wanted` fields (a set of bit());
/// nullopt when it is anything the scan does not take (see above).
std::optional<scanned> scan_flat(std::string_view body, uint8_t wanted) {
  scanned out;
  std::size_t i = 0;
  const std::size_t n = body.size();
  auto skip_ws = [&] {
    while (i < n && json_ws(body[i]))
      ++i;
  };
  auto eat = [&](char c) {
    skip_ws();
    if (i >= n || body[i] != c)
      return false;
    ++i;
    return true;
  };
  if (!eat('{'))
    return std::nullopt;
  skip_ws();
  if (i < n && body[i] == '}')
    return std::nullopt; // no field: the DOM names the cause
  while (true) {
    if (!eat('"'))
      return std::nullopt;
    auto key_begin = i;
    while (i < n && body[i] != '"' && body[i] != '\\')
      ++i;
    if (i >= n || body[i] != '"')
      return std::nullopt;
    auto key = body.substr(key_begin, i - key_begin);
    ++i;
    auto field = field_named(key);
    if (!field || !(wanted & bit(*field)) || !eat(':'))
      return std::nullopt;
    skip_ws();
    if (*field == scan_field::epoch) {
      if (out.epoch || i >= n || body[i] != '"')
        return std::nullopt;
      auto begin = ++i;
      while (i < n && body[i] != '"') {
        auto c = static_cast<unsigned char>(body[i]);
        if (c < 0x20 || c > 0x7e || c == '\\')
          return std::nullopt;
        ++i;
      }
      if (i >= n)
        return std::nullopt;
      out.epoch = body.substr(begin, i - begin);
      ++i;
    } else {
      auto& slot = out.number[static_cast<std::size_t>(*field)];
      auto begin = i;
      uint64_t v = 0;
      while (i < n && body[i] >= '0' && body[i] <= '9' && i - begin < 19) {
        v = v * 10 + static_cast<uint64_t>(body[i] - '0');
        ++i;
      }
      auto digits = i - begin;
      // A 20th digit, '.', 'e' or '-' after the digits is refused below:
      // only whitespace, ',' or '}' may follow a value.
      if (slot || digits == 0 || (digits > 1 && body[begin] == '0'))
        return std::nullopt;
      slot = v;
    }
    skip_ws();
    if (i < n && body[i] == ',') {
      ++i;
      continue;
    }
    if (!eat('}'))
      return std::nullopt;
    skip_ws();
    if (i != n)
      return std::nullopt;
    return out;
  }
}

uint64_t number_of(const scanned& s, scan_field f) {
  return *s.number[static_cast<std::size_t>(f)];
}

bool has(const scanned& s, scan_field f) {
  return s.number[static_cast<std::size_t>(f)].has_value();
}

/// The epoch as read_body keeps it: the leader epoch, and the string only
/// when it is one.
std::optional<uint64_t> scanned_epoch(const scanned& s, std::string& kept) {
  if (!s.epoch)
    return std::nullopt;
  auto e = parse_leader_epoch(*s.epoch);
  if (e)
    kept.assign(s.epoch->begin(), s.epoch->end());
  return e;
}

} // namespace

std::optional<read_ts_result> scan_ts_body(std::string_view body,
                                           std::size_t max_depth) {
  using f = scan_field;
  if (max_depth < 1)
    return std::nullopt;
  auto s = scan_flat(body, bit(f::physical_ms) | bit(f::logical_start)
                             | bit(f::count) | bit(f::epoch));
  if (!s || !has(*s, f::physical_ms) || !has(*s, f::logical_start)
      || !has(*s, f::count) || number_of(*s, f::logical_start) > UINT32_MAX
      || number_of(*s, f::count) > UINT32_MAX)
    return std::nullopt;
  read_ts_result r;
  r.response.physical_ms = number_of(*s, f::physical_ms);
  r.response.logical_start
    = static_cast<uint32_t>(number_of(*s, f::logical_start));
  r.response.count = static_cast<uint32_t>(number_of(*s, f::count));
  r.epoch = scanned_epoch(*s, r.response.epoch);
  return r;
}

std::optional<read_seq_result> scan_seq_body(std::string_view body,
                                             std::size_t max_depth) {
  using f = scan_field;
  if (max_depth < 1)
    return std::nullopt;
  auto s = scan_flat(body, bit(f::start) | bit(f::count) | bit(f::epoch));
  if (!s || !has(*s, f::start) || !has(*s, f::count)
      || number_of(*s, f::count) > UINT32_MAX)
    return std::nullopt;
  read_seq_result r;
  r.response.start = number_of(*s, f::start);
  r.response.count = static_cast<uint32_t>(number_of(*s, f::count));
  r.epoch = scanned_epoch(*s, r.response.epoch);
  return r;
}

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
  if (auto scanned = scan_ts_body(body, max_depth))
    return std::move(*scanned);
  return with_parsed(body, max_depth, [](const read_body& b) {
    return read_ts_result{ts_of(b), b.epoch};
  });
}

read_seq_result read_seq_body(const std::string& body, std::size_t max_depth) {
  if (auto scanned = scan_seq_body(body, max_depth))
    return std::move(*scanned);
  return with_parsed(body, max_depth, [](const read_body& b) {
    return read_seq_result{seq_of(b), b.epoch};
  });
}

} // namespace coalesce
} // namespace outbound
