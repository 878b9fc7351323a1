#include "protocol/json_parse.hpp"

#include <boost/container/small_vector.hpp>
#include <boost/json/basic_parser_impl.hpp>
#include <boost/json/error.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value_stack.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <limits>
#include <set>
#include <system_error>
#include <vector>

namespace outbound {
inline namespace protocol {

namespace json = boost::json;

const char* to_string(json_parse_error e) {
  switch (e) {
    case json_parse_error::none: return "none";
    case json_parse_error::syntax: return "syntax";
    case json_parse_error::too_deep: return "too_deep";
    case json_parse_error::too_large: return "too_large";
    case json_parse_error::number_out_of_range: return "number_out_of_range";
    case json_parse_error::duplicate_key: return "duplicate_key";
    case json_parse_error::inexact_integer: return "inexact_integer";
  }
  return "syntax";
}

namespace {

// True when `text` is a JSON integer literal: no fraction, no exponent.
bool is_integer_literal(std::string_view text) {
  return text.find_first_of(".eE") == std::string_view::npos;
}

// True when the integer literal `text` (optional '-', then digits without
// leading zeros, which RFC 8259 section 6 forbids) is exactly the finite
// double `d`, which from_chars made of it. Only called for |d| >= 2^63,
// where every double is an integer: std::to_chars with precision 0 prints
// its exact value in decimal (at most 309 digits below 2^1024).
bool integer_is_exact(std::string_view text, double d) {
  if (!text.empty() && text.front() == '-')
    text.remove_prefix(1);
  char buf[320];
  auto r = std::to_chars(buf, buf + sizeof buf, std::abs(d),
                         std::chars_format::fixed, 0);
  return r.ec == std::errc{}
         && std::string_view(buf, static_cast<std::size_t>(r.ptr - buf))
              == text;
}

// A basic_parser handler that builds the value like boost::json::parser's
// own (boost/json/detail/impl/handler.ipp: a value_stack fed event by
// event), and in addition counts the memory of the parsed form and converts
// doubles exactly.
//
// Traced, it also tracks the path of the current value (each key copied,
// each array index counted) and, when duplicates are refused, the keys seen
// in each object (a std::set): what an error's `field` needs. Untraced it
// does neither. It may build the value or only check the text (`build`
// false: the same events, charges and errors, no allocation for values).
// parse_json (below) picks the passes.
class handler {
public:
  static constexpr std::size_t max_object_size = json::object::max_size();
  static constexpr std::size_t max_array_size = json::array::max_size();
  static constexpr std::size_t max_key_size = json::string::max_size();
  static constexpr std::size_t max_string_size = json::string::max_size();

  handler(const json::storage_ptr& sp, std::size_t max_bytes,
          bool reject_duplicates, bool allow_inexact, bool bad_numbers_as_null,
          bool traced, bool build)
    : st(sp, temp_, sizeof temp_), max_bytes_(max_bytes),
      reject_duplicates_(reject_duplicates), allow_inexact_(allow_inexact),
      bad_as_null_(bad_numbers_as_null), traced_(traced), build_(build) {
  }

private:
  // The value stack's temporary storage for a small document (values and
  // keys before their container is built), so that parsing one does not
  // allocate it (boost::json::value_stack's temp_buffer; boost::json::
  // parser offers the same). Declared before `st`, which uses it.
  alignas(std::max_align_t) unsigned char temp_[1024];

public:
  json::value_stack st;
  json_parse_error failure = json_parse_error::none;
  std::string failed_field;
  // Number of digits of the inexact integer literal (for the detail).
  std::size_t failed_digits = 0;
  // Members of the top-level object as written (json_parse_result).
  std::size_t top_members = 0;
  // The number_out_of_range was a nonzero literal rounding to zero.
  bool underflow = false;

  bool on_document_begin(json::error_code&) {
    return true;
  }
  bool on_document_end(json::error_code&) {
    return true;
  }

  bool on_object_begin(json::error_code& ec) {
    if (!begin_value(ec))
      return false;
    ++depth_;
    if (traced_)
      path_.push_back(frame{false, 0, {}, {}});
    return true;
  }
  bool on_object_end(std::size_t n, json::error_code&) {
    if (depth_ == 1)
      top_members = n; // as written: a repeated key counts each time
    --depth_;
    if (traced_)
      path_.pop_back();
    if (build_)
      st.push_object(n);
    return true;
  }
  bool on_array_begin(json::error_code& ec) {
    if (!begin_value(ec))
      return false;
    ++depth_;
    if (traced_)
      path_.push_back(frame{true, 0, {}, {}});
    return true;
  }
  bool on_array_end(std::size_t n, json::error_code&) {
    --depth_;
    if (traced_)
      path_.pop_back();
    if (build_)
      st.push_array(n);
    return true;
  }

  bool on_key_part(json::string_view s, std::size_t n, json::error_code& ec) {
    if (!charge(s.size(), ec))
      return false;
    // The first part of a key (n is the length so far) replaces the previous
    // key; Boost.JSON sends a part before each escape sequence.
    if (traced_) {
      auto& key = path_.back().key;
      if (n == s.size())
        key.assign(s.data(), s.size());
      else
        key.append(s.data(), s.size());
    }
    if (build_)
      st.push_chars(s);
    return true;
  }
  bool on_key(json::string_view s, std::size_t n, json::error_code& ec) {
    // A key is a string on the value stack plus a key_value_pair slot.
    if (!charge(2 * sizeof(json::value) + s.size(), ec))
      return false;
    if (traced_) {
      auto& f = path_.back();
      if (n == s.size())
        f.key.assign(s.data(), s.size());
      else
        f.key.append(s.data(), s.size());
      if (reject_duplicates_ && !f.seen.insert(f.key).second) {
        fail(json_parse_error::duplicate_key, ec);
        return false;
      }
    }
    if (build_)
      st.push_key(s);
    return true;
  }
  bool on_string_part(json::string_view s, std::size_t, json::error_code& ec) {
    if (!charge(s.size(), ec))
      return false;
    if (build_)
      st.push_chars(s);
    return true;
  }
  bool on_string(json::string_view s, std::size_t n, json::error_code& ec) {
    if (!begin_value(ec) || !charge(s.size() + 1, ec))
      return false;
    (void)n;
    if (build_)
      st.push_string(s);
    return true;
  }

  bool on_number_part(json::string_view s, json::error_code&) {
    number_.append(s.data(), s.size());
    return true;
  }
  bool on_int64(std::int64_t i, json::string_view, json::error_code& ec) {
    number_.clear();
    if (!begin_value(ec))
      return false;
    if (build_)
      st.push_int64(i);
    return true;
  }
  bool on_uint64(std::uint64_t u, json::string_view, json::error_code& ec) {
    number_.clear();
    if (!begin_value(ec))
      return false;
    if (build_)
      st.push_uint64(u);
    return true;
  }
  bool on_double(double d, json::string_view s, json::error_code& ec) {
    if (!begin_value(ec))
      return false;
    std::string_view text;
    if (number_.empty()) {
      text = std::string_view{s.data(), s.size()};
    } else {
      number_.append(s.data(), s.size());
      text = number_;
    }
    // std::from_chars is correctly rounded (C++17 [charconv.from.chars]
    // refers to strtod's rounding in the "C" locale), unlike Boost.JSON
    // 1.81's fast path.
    double exact = 0;
    auto r = std::from_chars(text.data(), text.data() + text.size(), exact);
    if (r.ec == std::errc::result_out_of_range) {
      // Overflow (also when Boost.JSON rounded it to DBL_MAX) and underflow
      // are both errors: an infinity would print as invalid JSON, and a
      // nonzero literal that rounds to zero would silently print as 0E0.
      // libstdc++ (checked with GCC 12) reports result_out_of_range only
      // when the value rounds to zero or beyond DBL_MAX; subnormals such
      // as 5e-324 come back correctly rounded with no error, and literal
      // zeros (0e-400, -0.0) are exact zeros, not out of range.
      underflow = std::isfinite(d) && std::abs(d) < 1.0;
      return bad_number(json_parse_error::number_out_of_range, ec);
    }
    if (r.ec != std::errc{} || !std::isfinite(exact)) {
      if (!std::isfinite(d))
        return bad_number(json_parse_error::number_out_of_range, ec);
      exact = d;
    }
    // Integer literals reach on_double only once they overflow int64 and
    // uint64, so |exact| >= 2^63: one comparison for every other double.
    if (!allow_inexact_ && std::abs(exact) >= 0x1p63
        && is_integer_literal(text) && !integer_is_exact(text, exact)) {
      failed_digits = text.size() - (text.front() == '-' ? 1 : 0);
      return bad_number(json_parse_error::inexact_integer, ec);
    }
    number_.clear();
    if (build_)
      st.push_double(exact);
    return true;
  }
  bool on_bool(bool b, json::error_code& ec) {
    if (!begin_value(ec))
      return false;
    if (build_)
      st.push_bool(b);
    return true;
  }
  bool on_null(json::error_code& ec) {
    if (!begin_value(ec))
      return false;
    if (build_)
      st.push_null();
    return true;
  }
  bool on_comment_part(json::string_view, json::error_code&) {
    return true;
  }
  bool on_comment(json::string_view, json::error_code&) {
    return true;
  }

private:
  struct frame {
    bool array;
    std::size_t next_index;
    std::string key;
    std::set<std::string> seen; // keys so far, with reject_duplicates_
  };

  // Every value costs a value_stack slot and a slot in its container.
  bool begin_value(json::error_code& ec) {
    if (traced_ && !path_.empty() && path_.back().array)
      ++path_.back().next_index;
    return charge(2 * sizeof(json::value), ec);
  }

  bool charge(std::size_t n, json::error_code& ec) {
    used_ += n;
    if (max_bytes_ != 0 && used_ > max_bytes_) {
      fail(json_parse_error::too_large, ec);
      return false;
    }
    return true;
  }

  // A number the parsed form cannot hold faithfully: an error, or null
  // (json_limits::bad_numbers_as_null). Its value slot is already charged.
  bool bad_number(json_parse_error e, json::error_code& ec) {
    number_.clear();
    if (bad_as_null_) {
      underflow = false;
      failed_digits = 0;
      if (build_)
        st.push_null();
      return true;
    }
    fail(e, ec);
    return false;
  }

  void fail(json_parse_error e, json::error_code& ec) {
    failure = e;
    if (e == json_parse_error::number_out_of_range
        || e == json_parse_error::inexact_integer
        || e == json_parse_error::duplicate_key)
      failed_field = path();
    ec = json::error::exception;
  }

  // "a.b[2].c": keys of the enclosing objects, indexes of the enclosing
  // arrays (the current value is the last one counted).
  std::string path() const {
    std::string out;
    for (const auto& f : path_) {
      if (f.array) {
        out += '[';
        out += std::to_string(f.next_index == 0 ? 0 : f.next_index - 1);
        out += ']';
      } else {
        if (!out.empty())
          out += '.';
        out += f.key;
      }
    }
    return out;
  }

  std::size_t max_bytes_;
  bool reject_duplicates_;
  bool allow_inexact_;
  bool bad_as_null_;
  bool traced_;
  bool build_;
  std::size_t used_ = 0;
  std::size_t depth_ = 0;

public:
  std::size_t used() const {
    return used_;
  }

private:
  // Inline for the usual depth: no allocation for a shallow document.
  boost::container::small_vector<frame, 4> path_;
  std::string number_;
};

} // namespace

std::size_t json_memory_bound(std::size_t cap, std::size_t factor,
                              std::size_t ceiling) {
  auto max = std::numeric_limits<std::size_t>::max();
  auto bound = factor != 0 && cap > max / factor ? max : cap * factor;
  auto floor = cap > max / 4 ? max : cap * 4;
  return std::min(bound, std::max(ceiling, floor));
}

json_parse_result parse_json(std::string_view text,
                             const json_limits& limits) {
  return parse_json(text, limits, {});
}

namespace {

// One pass of the handler over `text` (see the handler's comment). A pass
// that does not build returns no value on success.
json_parse_result parse_pass(std::string_view text, const json_limits& limits,
                             json::storage_ptr sp, bool traced, bool build) {
  json_parse_result r;
  json::parse_options opt;
  opt.max_depth = limits.max_depth;
  json::basic_parser<handler> p{opt,
                                sp,
                                limits.max_bytes,
                                limits.reject_duplicate_keys,
                                limits.allow_inexact_integers,
                                limits.bad_numbers_as_null,
                                traced,
                                build};
  p.handler().st.reset(std::move(sp));
  json::error_code ec;
  auto n = p.write_some(false, text.data(), text.size(), ec);
  if (!ec && n < text.size())
    ec = json::error::extra_data;
  if (!ec && !build)
    return r;
  if (!ec) {
    // Move-constructed, the value keeps `sp` (a move assignment would copy
    // it into the default resource).
    auto used = p.handler().used();
    return json_parse_result{
      p.handler().st.release(), json_parse_error::none, {}, {}, used,
      p.handler().top_members};
  }
  auto& h = p.handler();
  if (h.failure != json_parse_error::none) {
    r.error = h.failure;
  } else if (ec == json::error::too_deep) {
    r.error = json_parse_error::too_deep;
  } else {
    r.error = json_parse_error::syntax;
  }
  switch (r.error) {
    case json_parse_error::too_deep:
      r.detail = "nesting deeper than " + std::to_string(limits.max_depth)
                 + " levels";
      break;
    case json_parse_error::too_large:
      r.detail = "parsed form over " + std::to_string(limits.max_bytes)
                 + " bytes";
      break;
    case json_parse_error::number_out_of_range:
      r.field = h.failed_field;
      r.detail = h.underflow
                   ? "number out of range (underflows IEEE 754 binary64 "
                     "to zero)"
                   : "number out of range (IEEE 754 binary64)";
      if (!r.field.empty())
        r.detail += " at " + r.field;
      break;
    case json_parse_error::inexact_integer:
      r.field = h.failed_field;
      r.detail = "integer of " + std::to_string(h.failed_digits)
                 + " digits not exact in IEEE 754 binary64";
      if (!r.field.empty())
        r.detail += " at " + r.field;
      break;
    case json_parse_error::duplicate_key:
      r.field = h.failed_field;
      r.detail = "duplicate key " + r.field;
      break;
    default:
      // Where it stopped: the offset of the first byte the parser could
      // not take (the text's length when it ended too early).
      r.detail = ec.message() + " at byte " + std::to_string(n);
      break;
  }
  return r;
}

} // namespace

json_parse_result parse_json(std::string_view text, const json_limits& limits,
                             json::storage_ptr sp) {
  // Refusing repeated keys needs the keys of each object as it is read
  // (and an error then stops there): one traced pass. Only configuration
  // files ask for it.
  if (limits.reject_duplicate_keys)
    return parse_pass(text, limits, std::move(sp), true, true);
  // Everything else is read untraced (no key copied, no path kept). Only a
  // number's error names a field: then a second, traced pass that builds
  // nothing finds the same first error (it sees the same events and
  // charges) and its path. A failing document so costs the caller's
  // resource no more than one pass.
  auto r = parse_pass(text, limits, sp, false, true);
  if (r.error != json_parse_error::number_out_of_range
      && r.error != json_parse_error::inexact_integer)
    return r;
  auto traced = parse_pass(text, limits, std::move(sp), true, false);
  return traced.error == r.error ? traced : r;
}

std::vector<std::string> json_escaped_forms(const std::string& s, int levels) {
  std::vector<std::string> forms;
  auto form = s;
  for (int level = 0; level <= levels && !form.empty(); ++level) {
    if (!forms.empty() && forms.back() == form)
      break; // nothing to escape: every further level is the same
    forms.push_back(form);
    auto quoted = json::serialize(json::value(form));
    form = quoted.substr(1, quoted.size() - 2);
  }
  return forms;
}

std::size_t json_depth(const json::value& v) {
  std::size_t inner = 0;
  if (v.is_object()) {
    for (const auto& kv : v.get_object())
      inner = std::max(inner, json_depth(kv.value()));
    return inner + 1;
  }
  if (v.is_array()) {
    for (const auto& e : v.get_array())
      inner = std::max(inner, json_depth(e));
    return inner + 1;
  }
  return 0;
}

} // namespace protocol
} // namespace outbound
