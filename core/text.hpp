#pragma once

// The text helpers of the request path: ASCII, and below UTF-8 (RFC 3629)
// for what must be checked or escaped before it is printed. ASCII first: HTTP
// field names, tokens, schemes and hosts are case-insensitive ASCII (RFC 9110
// §5.1, §5.6.2, RFC 3986 §3.1 and §3.2.2), and optional whitespace is SP / HTAB
// (RFC 9110 §5.6.3). One copy for the request builder, the transport's
// serializer, the WebSocket handshake, leader hints, Retry-After and the CLI's
// option parsers. Locale-independent on purpose: std::tolower follows the C
// locale, and a host's locale must never change how a header name compares.
// Pure.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace outbound {
inline namespace core {

/// SP or HTAB: RFC 9110 §5.6.3 optional whitespace (OWS).
constexpr bool is_ows(char c) noexcept {
  return c == ' ' || c == '\t';
}

/// `s` without leading and trailing OWS. A view into `s`.
constexpr std::string_view trim_ows(std::string_view s) noexcept {
  while (!s.empty() && is_ows(s.front()))
    s.remove_prefix(1);
  while (!s.empty() && is_ows(s.back()))
    s.remove_suffix(1);
  return s;
}

/// Deleted for a temporary std::string: the view would dangle once it is
/// gone. (A template so that literals and lvalues still pick the overload
/// above.)
template <class T,
          std::enable_if_t<std::is_same_v<std::remove_cv_t<T>, std::string>,
                           int> = 0>
std::string_view trim_ows(T&&) = delete;

/// 0–9 (RFC 5234 DIGIT).
constexpr bool is_digit(char c) noexcept {
  return c >= '0' && c <= '9';
}

/// A–Z or a–z (RFC 5234 ALPHA), whatever the C locale says.
constexpr bool is_alpha(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/// ALPHA or DIGIT.
constexpr bool is_alnum(char c) noexcept {
  return is_alpha(c) || is_digit(c);
}

/// 0–9, a–f or A–F (RFC 5234 HEXDIG, case-insensitive as RFC 3986 §2.1).
constexpr bool is_hexdig(char c) noexcept {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/// `c` with A–Z mapped to a–z; every other byte unchanged.
constexpr char ascii_lower(char c) noexcept {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

/// `c` with a–z mapped to A–Z; every other byte unchanged.
constexpr char ascii_upper(char c) noexcept {
  return c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c;
}

/// `s` with a–z mapped to A–Z (HTTP methods are case-sensitive tokens,
/// RFC 9110 §9.1; the builder and route table normalise them to upper case).
inline std::string ascii_upper(std::string_view s) {
  std::string out{s};
  for (auto& c : out)
    c = ascii_upper(c);
  return out;
}

/// `s` with A–Z mapped to a–z.
inline std::string ascii_lower(std::string_view s) {
  std::string out{s};
  for (auto& c : out)
    c = ascii_lower(c);
  return out;
}

/// ASCII case-insensitive equality (header names, schemes, tokens).
constexpr bool iequals(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size())
    return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (ascii_lower(a[i]) != ascii_lower(b[i]))
      return false;
  return true;
}

/// Whether `s` begins with `prefix`, ASCII case-insensitively.
constexpr bool starts_with_ci(std::string_view s,
                              std::string_view prefix) noexcept {
  return s.size() >= prefix.size()
         && iequals(s.substr(0, prefix.size()), prefix);
}

namespace text_detail {

/// One flag per byte: RFC 9110 §5.6.2 tchar. A table, because every header
/// name of every request is checked byte by byte (the builder, then the
/// serializer).
struct tchar_table {
  bool flag[256] = {};

  constexpr tchar_table() {
    for (int c = '0'; c <= '9'; ++c)
      flag[c] = true;
    for (int c = 'a'; c <= 'z'; ++c)
      flag[c] = true;
    for (int c = 'A'; c <= 'Z'; ++c)
      flag[c] = true;
    for (char c : std::string_view{"!#$%&'*+-.^_`|~"})
      flag[static_cast<unsigned char>(c)] = true;
  }
};

inline constexpr tchar_table tchars{};

} // namespace text_detail

/// RFC 9110 §5.6.2 tchar: ALPHA / DIGIT / one of ``!#$%&'*+-.^_`|~``.
constexpr bool is_tchar(char c) noexcept {
  return text_detail::tchars.flag[static_cast<unsigned char>(c)];
}

/// RFC 9110 §5.6.2 token (a method, a field name): one or more tchar.
constexpr bool is_token(std::string_view s) noexcept {
  if (s.empty())
    return false;
  for (char c : s)
    if (!is_tchar(c))
      return false;
  return true;
}

/// An ASCII control character (0x00–0x1F or DEL), RFC 5234's CTL.
constexpr bool is_ctl(char c) noexcept {
  auto u = static_cast<unsigned char>(c);
  return u < 0x20 || u == 0x7f;
}

/// Index of the first CTL in `s` (with `allow_htab`, HTAB is allowed), or
/// nullopt: where has_ctl would say yes, for an error text.
constexpr std::optional<std::size_t>
find_ctl(std::string_view s, bool allow_htab = false) noexcept {
  for (std::size_t i = 0; i < s.size(); ++i)
    if (is_ctl(s[i]) && !(allow_htab && s[i] == '\t'))
      return i;
  return std::nullopt;
}

/// Whether `s` holds a CTL; with `allow_htab`, HTAB is allowed (field
/// values may hold it, RFC 9110 §5.5).
constexpr bool has_ctl(std::string_view s, bool allow_htab = false) noexcept {
  return find_ctl(s, allow_htab).has_value();
}

/// `c` as "0x" and two upper-case hex digits (a byte named in an error
/// text without printing it).
inline std::string hex_byte(unsigned char c) {
  const char* digits = "0123456789ABCDEF";
  return std::string{"0x"} + digits[c >> 4] + digits[c & 0xF];
}

/// Whether `s` holds CR, LF or NUL: the bytes RFC 9110 §5.5 says a field
/// value must never carry (the transport's last check before the wire).
constexpr bool has_cr_lf_nul(std::string_view s) noexcept {
  for (char c : s)
    if (c == '\r' || c == '\n' || c == '\0')
      return true;
  return false;
}

/// `Name: value` (an RFC 9110 §5.2 field line, as `curl -H` takes it) →
/// (name, value), each without surrounding OWS; the value may be empty and
/// may hold further ':'. nullopt when there is no ':' or the name is empty.
/// Nothing else is checked (the client's config validation does that).
inline std::optional<std::pair<std::string, std::string>>
split_field_line(std::string_view line) {
  auto colon = line.find(':');
  if (colon == std::string_view::npos)
    return std::nullopt;
  auto name = trim_ows(line.substr(0, colon));
  if (name.empty())
    return std::nullopt;
  return std::pair{std::string{name},
                   std::string{trim_ows(line.substr(colon + 1))}};
}

/// The length of the UTF-8 sequence at s[i] (1 to 4), or 0 when the bytes
/// there are not one (RFC 3629 §4: no overlong forms, no surrogates,
/// nothing above U+10FFFF, no sequence cut by the end of `s`). `i` <
/// s.size().
constexpr std::size_t utf8_sequence_length(std::string_view s,
                                           std::size_t i) noexcept {
  auto b = [&](std::size_t k) {
    return static_cast<unsigned char>(s[i + k]);
  };
  auto cont = [&](std::size_t k) {
    return i + k < s.size() && (b(k) & 0xC0) == 0x80;
  };
  auto c = b(0);
  if (c < 0x80)
    return 1;
  if (c >= 0xC2 && c <= 0xDF)
    return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (!cont(1) || !cont(2) || (c == 0xE0 && b(1) < 0xA0)
        || (c == 0xED && b(1) > 0x9F))
      return 0;
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3) || (c == 0xF0 && b(1) < 0x90)
        || (c == 0xF4 && b(1) > 0x8F))
      return 0;
    return 4;
  }
  return 0;
}

/// Whether s[i] starts a C1 control character (U+0080..U+009F, encoded
/// C2 80..C2 9F). `i` < s.size().
constexpr bool is_c1_control(std::string_view s, std::size_t i) noexcept {
  return static_cast<unsigned char>(s[i]) == 0xC2 && i + 1 < s.size()
         && static_cast<unsigned char>(s[i + 1]) >= 0x80
         && static_cast<unsigned char>(s[i + 1]) <= 0x9F;
}

} // namespace core
} // namespace outbound
