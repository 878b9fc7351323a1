// Pure tests of the ASCII text helpers (core/text.hpp).

#include "core/text.hpp"

#include <gtest/gtest.h>

#include <string>

using namespace outbound::core;

namespace {

TEST(CoreText, TrimOwsRemovesOnlySpaceAndTab) {
  EXPECT_EQ(trim_ows(" \t a b \t "), "a b");
  EXPECT_EQ(trim_ows(""), "");
  EXPECT_EQ(trim_ows(" \t "), "");
  // CR, LF and VT are not OWS (RFC 9110 §5.6.3): they stay, so that a
  // caller's control-character check still sees them.
  EXPECT_EQ(trim_ows("\r\na\v"), "\r\na\v");
}

TEST(CoreText, AsciiCaseFoldingIgnoresTheLocaleAndNonAscii) {
  EXPECT_EQ(ascii_lower("Content-TYPE"), "content-type");
  EXPECT_TRUE(iequals("X-Request-Id", "x-request-ID"));
  EXPECT_FALSE(iequals("x-request-id", "x-request-i"));
  EXPECT_FALSE(iequals("a", "b"));
  // Latin-1 / UTF-8 bytes are never folded: only A–Z map to a–z.
  EXPECT_FALSE(iequals("\xc0", "\xe0"));
  EXPECT_EQ(ascii_lower("\xc0Z"), "\xc0z");
  EXPECT_TRUE(starts_with_ci("HTTPS://h", "https://"));
  EXPECT_FALSE(starts_with_ci("http", "https://"));
}

TEST(CoreText, TokenIsOneOrMoreTchar) {
  EXPECT_TRUE(is_token("GET"));
  EXPECT_TRUE(is_token("X-Api_Key.v1~!#$%&'*+^`|"));
  EXPECT_FALSE(is_token(""));
  EXPECT_FALSE(is_token("X A"));
  EXPECT_FALSE(is_token("X:A"));
  EXPECT_FALSE(is_token("X\"A"));
  // NUL is no tchar (a strchr-based check accepts it: the terminator).
  EXPECT_FALSE(is_token(std::string{"X\0A", 3}));
  EXPECT_FALSE(is_token(std::string{"\0", 1}));
  EXPECT_FALSE(is_token("\x80"));
}

TEST(CoreText, ControlCharacters) {
  EXPECT_TRUE(has_ctl("a\x01"));
  EXPECT_TRUE(has_ctl("a\x7f"));
  EXPECT_TRUE(has_ctl(std::string{"a\0", 2}));
  EXPECT_TRUE(has_ctl("a\tb"));
  EXPECT_FALSE(has_ctl("a\tb", true));
  EXPECT_TRUE(has_ctl("a\r\tb", true));
  EXPECT_FALSE(has_ctl("plain \x80 text"));
  EXPECT_TRUE(has_cr_lf_nul("a\rb"));
  EXPECT_TRUE(has_cr_lf_nul("a\nb"));
  EXPECT_TRUE(has_cr_lf_nul(std::string{"a\0b", 3}));
  EXPECT_FALSE(has_cr_lf_nul("a\x01\tb"));
}

TEST(CoreText, CharacterClassesAreAsciiOnly) {
  for (int i = 0; i < 256; ++i) {
    char c = static_cast<char>(i);
    bool digit = i >= '0' && i <= '9';
    bool alpha = (i >= 'a' && i <= 'z') || (i >= 'A' && i <= 'Z');
    bool hex = digit || (i >= 'a' && i <= 'f') || (i >= 'A' && i <= 'F');
    EXPECT_EQ(is_digit(c), digit) << i;
    EXPECT_EQ(is_alpha(c), alpha) << i;
    EXPECT_EQ(is_alnum(c), digit || alpha) << i;
    EXPECT_EQ(is_hexdig(c), hex) << i;
  }
}

TEST(CoreText, UpperCaseMapsOnlyAsciiLetters) {
  EXPECT_EQ(ascii_upper("get"), "GET");
  EXPECT_EQ(ascii_upper("Patch-1_x"), "PATCH-1_X");
  EXPECT_EQ(ascii_upper("\xe9t\xe9"), "\xe9T\xe9");
  EXPECT_EQ(ascii_upper('z'), 'Z');
  EXPECT_EQ(ascii_upper('{'), '{');
}

TEST(CoreText, FieldLineSplitsAtTheFirstColonAndTrimsOws) {
  using kv = std::pair<std::string, std::string>;
  EXPECT_EQ(split_field_line("Accept: application/json"),
            (kv{"Accept", "application/json"}));
  EXPECT_EQ(split_field_line(" \tX-A \t:\t b: c \t"), (kv{"X-A", "b: c"}));
  EXPECT_EQ(split_field_line("X-Empty:"), (kv{"X-Empty", ""}));
  EXPECT_EQ(split_field_line("X-Empty:  "), (kv{"X-Empty", ""}));
  EXPECT_EQ(split_field_line("no colon"), std::nullopt);
  EXPECT_EQ(split_field_line(": value"), std::nullopt);
  EXPECT_EQ(split_field_line(" \t: value"), std::nullopt);
  EXPECT_EQ(split_field_line(""), std::nullopt);
}

} // namespace

TEST(CoreText, Utf8SequenceLengthFollowsRfc3629) {
  using outbound::core::utf8_sequence_length;
  EXPECT_EQ(utf8_sequence_length("a", 0), 1u);
  EXPECT_EQ(utf8_sequence_length("\xC3\xA9", 0), 2u);         // é
  EXPECT_EQ(utf8_sequence_length("\xE2\x82\xAC", 0), 3u);     // €
  EXPECT_EQ(utf8_sequence_length("\xF0\x9F\x98\x80", 0), 4u); // U+1F600
  EXPECT_EQ(utf8_sequence_length("x\xC3\xA9", 1), 2u);        // at an index
  // Not UTF-8: a stray continuation byte, overlong forms, a surrogate,
  // beyond U+10FFFF, a sequence cut by the end, a missing continuation.
  EXPECT_EQ(utf8_sequence_length("\x80", 0), 0u);
  EXPECT_EQ(utf8_sequence_length("\xC0\xAF", 0), 0u);
  EXPECT_EQ(utf8_sequence_length("\xE0\x80\xAF", 0), 0u);
  EXPECT_EQ(utf8_sequence_length("\xF0\x80\x80\xAF", 0), 0u);
  EXPECT_EQ(utf8_sequence_length("\xED\xA0\x80", 0), 0u);
  EXPECT_EQ(utf8_sequence_length("\xF4\x90\x80\x80", 0), 0u);
  EXPECT_EQ(utf8_sequence_length("\xF5\x80\x80\x80", 0), 0u);
  EXPECT_EQ(utf8_sequence_length("\xE2\x82", 0), 0u);
  EXPECT_EQ(utf8_sequence_length("\xC3"
                                 "a",
                                 0),
            0u);
}

TEST(CoreText, C1ControlsAreC2x80ToC2x9F) {
  using outbound::core::is_c1_control;
  EXPECT_TRUE(is_c1_control("\xC2\x80", 0));
  EXPECT_TRUE(is_c1_control("\xC2\x9F", 0));
  EXPECT_FALSE(is_c1_control("\xC2\xA0", 0)); // NBSP is not a control
  EXPECT_FALSE(is_c1_control("\xC2", 0));     // cut by the end
  EXPECT_FALSE(is_c1_control("\x85", 0));     // a bare byte is not UTF-8
  EXPECT_FALSE(is_c1_control("\xC2"
                             "A",
                             0)); // no continuation byte
  EXPECT_FALSE(is_c1_control(std::string_view{"\xC2\0", 2}, 0));
}
