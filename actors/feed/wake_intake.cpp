#include "actors/feed/wake_intake.hpp"

namespace outbound {
inline namespace feed {

namespace {

/// Bound of a payload worth scanning: a wake frame is a few dozen bytes.
constexpr std::size_t max_scan_bytes = 4096;

/// Integers of at most this many digits always fit int64_t (and are read
/// as integers, never doubles, by the full parser).
constexpr std::size_t max_digits = 18;

bool is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/// A forward-only reader over the payload; every `read_*` returns false
/// for anything outside the accepted subset.
class scanner {
public:
  explicit scanner(std::string_view s) : s_(s) {
  }

  void skip_ws() {
    while (i_ < s_.size() && is_ws(s_[i_]))
      ++i_;
  }

  bool eat(char c) {
    skip_ws();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }

  bool peek(char c) {
    skip_ws();
    return i_ < s_.size() && s_[i_] == c;
  }

  bool at_end() {
    skip_ws();
    return i_ == s_.size();
  }

  /// A string without escapes, control or non-ASCII bytes.
  bool read_string(std::string_view& out) {
    if (!eat('"'))
      return false;
    auto start = i_;
    for (; i_ < s_.size(); ++i_) {
      auto c = static_cast<unsigned char>(s_[i_]);
      if (c == '"') {
        out = s_.substr(start, i_ - start);
        ++i_;
        return true;
      }
      if (c == '\\' || c < 0x20 || c >= 0x7F)
        return false;
    }
    return false;
  }

  /// -?(0|[1-9][0-9]*) with at most max_digits digits, not followed by a
  /// fraction or an exponent.
  bool read_integer(int64_t& out) {
    skip_ws();
    bool neg = i_ < s_.size() && s_[i_] == '-';
    if (neg)
      ++i_;
    auto start = i_;
    int64_t v = 0;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
      if (i_ - start >= max_digits)
        return false; // checked before the multiply: 19 digits overflow
      v = v * 10 + (s_[i_] - '0');
      ++i_;
    }
    auto n = i_ - start;
    if (n == 0 || (n > 1 && s_[start] == '0') || (neg && v == 0))
      return false; // "-0" may read as a double: not sure
    if (i_ < s_.size()
        && (s_[i_] == '.' || s_[i_] == 'e' || s_[i_] == 'E'))
      return false;
    out = neg ? -v : v;
    return true;
  }

  bool read_literal(std::string_view word) {
    skip_ws();
    if (s_.substr(i_, word.size()) != word)
      return false;
    i_ += word.size();
    return true;
  }

  /// One scalar value of the accepted subset; `str`/`num` tell which.
  bool read_value(std::optional<std::string_view>& str,
                  std::optional<int64_t>& num) {
    skip_ws();
    if (i_ >= s_.size())
      return false;
    auto c = s_[i_];
    if (c == '"') {
      std::string_view v;
      if (!read_string(v))
        return false;
      str = v;
      return true;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      int64_t v = 0;
      if (!read_integer(v))
        return false;
      num = v;
      return true;
    }
    return read_literal("true") || read_literal("false")
           || read_literal("null");
  }

private:
  std::string_view s_;
  std::size_t i_ = 0;
};

} // namespace

std::optional<int64_t> plain_wake_cursor(std::string_view payload,
                                         std::string_view cursor_field) {
  if (payload.size() > max_scan_bytes || cursor_field == "type")
    return std::nullopt;
  scanner in{payload};
  if (!in.eat('{'))
    return std::nullopt;
  bool type_seen = false, is_wake = false, cursor_seen = false;
  std::optional<int64_t> cursor;
  if (!in.peek('}')) {
    do {
      std::string_view key;
      if (!in.read_string(key) || !in.eat(':'))
        return std::nullopt;
      std::optional<std::string_view> str;
      std::optional<int64_t> num;
      if (!in.read_value(str, num))
        return std::nullopt;
      if (key == "type") {
        if (type_seen)
          return std::nullopt; // which one wins is the parser's business
        type_seen = true;
        is_wake = str && *str == "wake";
      } else if (key == cursor_field) {
        if (cursor_seen)
          return std::nullopt;
        cursor_seen = true;
        cursor = num;
      }
    } while (in.eat(','));
  }
  if (!in.eat('}') || !in.at_end())
    return std::nullopt;
  if (!is_wake || !cursor || *cursor < 0)
    return std::nullopt;
  return cursor;
}

std::optional<int64_t> coalesced_wake_hint(const ledger_drain& drain) {
  auto target = drain.target();
  if (!target || *target < drain.cursor())
    return std::nullopt;
  auto probe = drain;
  auto before = probe.wakes_coalesced();
  probe.on_wake(*target);
  if (probe.wakes_coalesced() != before + 1)
    return std::nullopt;
  return target;
}

bool wake_gate::take(int64_t cursor) {
  // A seqlock read (Boehm, "Can seqlocks get along with programming
  // language memory models?", MSPC 2012): lo and hint from one set(), or
  // "not sure" (the frame goes to the watcher). A torn pair -- a new lo
  // with an old hint -- could drop a wake the new drain needs.
  auto v1 = version_.load(std::memory_order_acquire);
  auto lo = lo_.load(std::memory_order_relaxed);
  auto hint = hint_.load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  if ((v1 & 1) != 0 || version_.load(std::memory_order_relaxed) != v1)
    return false;
  if (cursor < lo)
    return false; // a low hint: the drain decides what it means
  if (cursor <= hint)
    return true;
  if (!absorb_.load())
    return false;
  auto seen = absorbed_.load();
  while (seen < cursor && !absorbed_.compare_exchange_weak(seen, cursor)) {
  }
  // fold() closes absorbing before it reads absorbed_ (both sequentially
  // consistent): either it saw this cursor, or this load sees the gate
  // closed and the frame goes to the watcher as well.
  return absorb_.load();
}

std::optional<int64_t> wake_gate::fold() {
  absorb_.store(false);
  auto x = absorbed_.exchange(-1);
  if (x < 0)
    return std::nullopt;
  return x;
}

void wake_gate::store_range(int64_t lo, int64_t hint) {
  // The one writer (the watcher): odd while the pair changes.
  auto v = version_.load(std::memory_order_relaxed);
  version_.store(v + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  lo_.store(lo, std::memory_order_relaxed);
  hint_.store(hint, std::memory_order_relaxed);
  version_.store(v + 2, std::memory_order_release);
}

void wake_gate::set(int64_t lo, std::optional<int64_t> hint, bool absorb) {
  store_range(lo, hint ? *hint : -1);
  absorb_.store(absorb);
}

void wake_gate::raise_low(int64_t lo) {
  auto hint = hint_.load(std::memory_order_relaxed);
  store_range(lo, lo > hint ? -1 : hint);
}

} // namespace feed
} // namespace outbound
