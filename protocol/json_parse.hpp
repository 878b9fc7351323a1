#pragma once

// The one JSON parser of the library. Every place that turns text into a
// boost::json::value calls parse_json(), so the nesting limit, the memory
// bound and the number rules are the same for the client, the hub, the CLI
// and the fuzz harnesses.
//
// RFC 8259 section 9 lets a parser limit nesting depth, text size and the
// range and precision of numbers; section 6 notes that numbers beyond
// IEEE 754 binary64 are not interoperable. Built on Boost.JSON's public
// basic_parser + value_stack (the pieces boost::json::parser is made of),
// with two differences from boost::json::parse in Boost 1.81:
//  - doubles are converted with std::from_chars (correctly rounded), so
//    serialize(parse(x)) round-trips to the same binary64 value;
//    Boost.JSON 1.81 has no parse_options::numbers (number_precision came
//    later) and its fast path can be one ulp off;
//  - a number that overflows binary64 (`1e400`, a 5000-digit integer) is an
//    error naming the field instead of an infinity that serialize() would
//    print as invalid JSON, and so is a nonzero literal that underflows to
//    zero (`1e-400`) instead of a 0 that serialize() would print as `0E0`;
//    subnormals binary64 holds (`5e-324`) are kept, correctly rounded, and
//    literal zeros (`0e-400`, `-0.0`) stay zero;
//  - an integer literal beyond int64/uint64 that binary64 cannot hold
//    exactly (a 30-digit ID) is an error naming the field instead of a
//    double that serialize() would print with its low digits changed
//    (see json_limits::allow_inexact_integers).

#include <boost/json/memory_resource.hpp>
#include <boost/json/monotonic_resource.hpp>
#include <boost/json/storage_ptr.hpp>
#include <boost/json/value.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace outbound {
inline namespace protocol {

/// Default maximum nesting depth of arrays and objects (Boost.JSON's own
/// default is 32). Well above what the reference hub accepts in event
/// metadata (hub_config::metadata_max_depth, 32) plus the two levels a
/// replay page wraps around each event.
inline constexpr std::size_t default_json_max_depth = 64;

/// Default bytes of parsed form allowed per byte of a text's cap (see
/// json_memory_bound). Measured with Boost.JSON 1.81: a replay page of tiny
/// events costs 10.5 to 12.3 bytes per byte of text, `[[],[],...]` 16 to
/// 20, `[0,0,...]` 24. [16]
inline constexpr std::size_t default_json_memory_factor = 16;

/// Default ceiling of json_memory_bound, in bytes. [192 MiB]
inline constexpr std::size_t default_json_memory_max_bytes
  = 192u * 1024u * 1024u;

/// The memory bound (json_limits::max_bytes) of parsing a text of at most
/// `cap` bytes: min(factor * cap, max(ceiling, 4 * cap)), each product
/// saturating at SIZE_MAX. The ceiling never brings the bound below
/// 4 x cap, so a raised cap keeps parsing. The one rule for every capped
/// text the library parses: HTTP response bodies
/// (client_config::response_json_limits) and feed WebSocket messages
/// (frame_json_limits of actors/feed/feed_frames.hpp).
std::size_t json_memory_bound(
  std::size_t cap, std::size_t factor = default_json_memory_factor,
  std::size_t ceiling = default_json_memory_max_bytes);

/// Limits of one parse.
struct json_limits {
  /// Maximum nesting depth of arrays and objects (>= 1). A document nested
  /// deeper is json_parse_error::too_deep. [64]
  std::size_t max_depth = default_json_max_depth;
  /// Bound in bytes on the memory the parsed form may take (values, keys,
  /// strings and the parser's value stack, counted as the parse goes);
  /// 0 = no bound. Exceeding it is json_parse_error::too_large and stops
  /// the parse at that point. [0]
  std::size_t max_bytes = 0;
  /// Treat a key repeated within one object as an error
  /// (json_parse_error::duplicate_key). RFC 8259 section 4 leaves the
  /// meaning of repeated names unpredictable; boost::json keeps the last.
  /// For configuration files, where a repeated key is a mistake. [false]
  bool reject_duplicate_keys = false;
  /// Accept an integer literal (no fraction, no exponent) outside the
  /// int64/uint64 range whose value binary64 cannot represent exactly,
  /// e.g. `123456789012345678901234567890`, as the nearest double.
  ///
  /// Integers in [-2^63, 2^64) stay int64/uint64 and are always exact.
  /// Beyond that Boost.JSON can only give a double, and RFC 8259
  /// section 6 warns that such integers are not interoperable: the
  /// double re-serialises as `1.2345678901234568E29`, the low digits
  /// silently lost (the classic corruption of large numeric IDs).
  /// With false (the default) such a literal is
  /// json_parse_error::inexact_integer naming the field. Literals that
  /// binary64 does hold exactly (`100000000000000000000`, any power of
  /// two) become that double either way, and so do literals with a
  /// fraction or an exponent (`1.5`, `1e30`), which promise no more
  /// than a binary64 value. Set it where the text is only checked and
  /// then sent on unchanged (`outbound request --json`). The check runs
  /// only for numbers that overflowed the 64-bit integer range. [false]
  bool allow_inexact_integers = false;
  /// Parse a number out of range (number_out_of_range) or an inexact
  /// integer (inexact_integer, unless allow_inexact_integers) as `null`
  /// instead of failing. For a parse that reads only other fields and
  /// never re-serialises the value, such as the `detail` of an error body
  /// (extract_detail()). [false]
  bool bad_numbers_as_null = false;
};

/// Why a parse failed. Stable lower-case names via to_string().
enum class json_parse_error : uint8_t {
  none,
  /// Not JSON per RFC 8259 (syntax, invalid UTF-8, trailing data, empty).
  syntax,
  /// Nested deeper than json_limits::max_depth.
  too_deep,
  /// The parsed form would exceed json_limits::max_bytes.
  too_large,
  /// A number outside the range of IEEE 754 binary64: beyond DBL_MAX, or
  /// a literal with a nonzero digit that rounds to zero (`1e-400`; the
  /// detail then says "underflows").
  number_out_of_range,
  /// A key repeated in one object (only with
  /// json_limits::reject_duplicate_keys).
  duplicate_key,
  /// An integer literal beyond int64/uint64 that binary64 cannot hold
  /// exactly (unless json_limits::allow_inexact_integers).
  inexact_integer,
};

/// "none", "syntax", "too_deep", "too_large", "number_out_of_range",
/// "duplicate_key", "inexact_integer".
const char* to_string(json_parse_error e);

/// Outcome of parse_json(): the value, or why not.
struct json_parse_result {
  /// The parsed document (null when error != none).
  boost::json::value value;
  json_parse_error error = json_parse_error::none;
  /// One-line reason when error != none, e.g. "syntax error at byte 1"
  /// (the offset of the first byte not taken), "nesting deeper than 64
  /// levels", "number out of range (IEEE 754 binary64) at metadata.n[2]",
  /// "number out of range (underflows IEEE 754 binary64 to zero) at x",
  /// "integer of 30
  /// digits not exact in IEEE 754 binary64 at metadata.id". Never
  /// contains the input text beyond a field name.
  std::string detail;
  /// Where the failing number or repeated key was (`a.b[3]`, `a.b`), "" for
  /// other errors or at the top level.
  std::string field;
  /// The parsed form's size in bytes as json_limits::max_bytes counts it
  /// (values, keys, strings; 0 when the parse failed): what holding
  /// `value` costs, for callers that bound memory across many documents.
  std::size_t bytes = 0;
  /// Members of the top-level object as written, a repeated key counted
  /// each time (the value keeps the last of them, as boost::json does); 0
  /// when the document is not an object or did not parse. A reader that
  /// must not guess between two values of one key compares it with
  /// `value.as_object().size()`.
  std::size_t top_level_members = 0;

  explicit operator bool() const {
    return error == json_parse_error::none;
  }
};

/// Parses `text` as one complete JSON document under `limits`. Never
/// throws for bad input (allocation failure still throws std::bad_alloc).
json_parse_result parse_json(std::string_view text,
                             const json_limits& limits = {});

/// As above, with the parsed value and the parser's value stack allocated
/// from `sp` (the value keeps a reference to it), so that a caller, or a
/// test with a counting memory_resource, can see the memory a parse really
/// takes against json_limits::max_bytes. The parser's own nesting state
/// (bounded by max_depth) and the path kept for error messages still use
/// the default allocator.
json_parse_result parse_json(std::string_view text, const json_limits& limits,
                             boost::json::storage_ptr sp);

/// One arena for one parsed document (boost::json::monotonic_resource: one
/// allocation per block, nothing freed before the arena), safe to share
/// between threads once share() was called. A copy of a value keeps the
/// source's resource, so an application that copies parts of a shared
/// document on two threads allocates from one arena at once: after
/// share(), every allocation takes a mutex. The parse before it does not
/// (one thread, the parser's). Deallocation does nothing.
/// Made with make_json_arena.
class json_arena final : public boost::json::memory_resource {
public:
  /// Constructed inside a boost::json shared resource (make_json_arena),
  /// which holds it as a member out of reach of the storage_ptr: the
  /// constructor reports where it is.
  explicit json_arena(json_arena** self) noexcept {
    *self = this;
  }

  /// From now on allocations are serialised. Call before a value in the
  /// arena can reach another thread.
  void share() noexcept {
    shared_.store(true, std::memory_order_release);
  }

private:
  void* do_allocate(std::size_t n, std::size_t align) override {
    if (!shared_.load(std::memory_order_acquire))
      return arena_.allocate(n, align);
    std::lock_guard<std::mutex> guard{mu_};
    return arena_.allocate(n, align);
  }

  void do_deallocate(void*, std::size_t, std::size_t) override {
    // nop: the arena is released whole
  }

  bool
  do_is_equal(const boost::json::memory_resource& r) const noexcept override {
    return this == &r;
  }

  boost::json::monotonic_resource arena_;
  std::atomic<bool> shared_{false};
  std::mutex mu_;
};

/// A new json_arena owned by the returned storage_ptr (and every value that
/// uses it), and the arena itself, valid as long as either lives.
inline std::pair<boost::json::storage_ptr, json_arena*> make_json_arena() {
  json_arena* arena = nullptr;
  auto sp = boost::json::make_shared_resource<json_arena>(&arena);
  return {std::move(sp), arena};
}

/// Makes `dst` the value `src` was, keeping `src`'s memory resource (a
/// move assignment `dst = std::move(src)` copies into `dst`'s resource
/// when the two differ, as boost::json::value::operator= does).
inline void move_into(boost::json::value& dst,
                      boost::json::value&& src) noexcept {
  dst.~value();
  ::new (static_cast<void*>(&dst)) boost::json::value(std::move(src));
}

/// Nesting depth of `v`: 0 for a scalar, 1 for `[]` or `{}`, one more per
/// level (the same count as json_limits::max_depth).
std::size_t json_depth(const boost::json::value& v);

/// `s` as written and as JSON escapes it inside a string (RFC 8259 section
/// 7), once, twice, ... up to `levels` times, without repeats (escaping
/// changes only a text with a quote, a backslash or a control character);
/// empty for an empty `s`. What a redaction must look for: a secret a
/// server echoes inside a JSON text that is then quoted as a string (an
/// error's non-string `detail`, serialized) is there only escaped.
std::vector<std::string> json_escaped_forms(const std::string& s,
                                            int levels = 2);

} // namespace protocol
} // namespace outbound

/// Values in a json_arena skip their destructors' walk, as in a
/// monotonic_resource (its deallocate does nothing).
template <>
struct boost::json::is_deallocate_trivial<outbound::protocol::json_arena> {
  static constexpr bool value = true;
};
