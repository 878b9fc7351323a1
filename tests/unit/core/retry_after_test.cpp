// The Retry-After / retry-after-ms parser (core/retry_after.hpp; RFC 9110
// §10.2.3 and §5.6.7, hyperdjango's serviceclient `retry-after-ms`), with
// an explicit wall clock: delay-seconds, HTTP-dates in the past and the
// future, garbage, negative and huge values, and both headers at once.

#include "core/retry_after.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>

using namespace outbound;
using namespace std::chrono_literals;
using std::chrono::nanoseconds;

namespace {

// 2026-01-01T00:00:00Z, "Thu, 01 Jan 2026 00:00:00 GMT".
const wall_time now{std::chrono::seconds{1767225600}};
const nanoseconds cap = std::chrono::seconds{1'000'000'000};

struct ra_row {
  const char* value;
  std::optional<nanoseconds> expected;
};

} // namespace

TEST(CoreRetryAfter, TheFixedNowIsTheDateItClaims) {
  EXPECT_EQ(parse_http_date("Thu, 01 Jan 2026 00:00:00 GMT"), now);
}

TEST(CoreRetryAfter, RetryAfterValuesGiveTheirDelays) {
  const ra_row rows[] = {
    // delay-seconds
    {"0", nanoseconds{0}},
    {"1", nanoseconds{1s}},
    {"120", nanoseconds{120s}},
    {"  30\t", nanoseconds{30s}},
    {"0000000007", nanoseconds{7s}},
    // HTTP-date in the future, in all three forms
    {"Thu, 01 Jan 2026 00:00:05 GMT", nanoseconds{5s}},
    {"Thursday, 01-Jan-26 00:01:00 GMT", nanoseconds{60s}},
    {"Thu Jan  1 01:00:00 2026", nanoseconds{1h}},
    // HTTP-date now or in the past: retry at once
    {"Thu, 01 Jan 2026 00:00:00 GMT", nanoseconds{0}},
    {"Wed, 31 Dec 2025 23:59:59 GMT", nanoseconds{0}},
    {"Sun, 06 Nov 1994 08:49:37 GMT", nanoseconds{0}},
    // huge: saturate at the cap instead of overflowing
    {"1000000000", cap},
    {"1000000001", cap},
    {"99999999999999999999999", cap},
    {"Fri, 31 Dec 9999 23:59:59 GMT", cap},
    {"Thu, 01 Jan 2060 00:00:00 GMT", cap},
    {"Tue, 01 Jan 2036 00:00:00 GMT", nanoseconds{315'532'800s}},
    // negative, fractional, garbage
    {"-1", std::nullopt},
    {"-0", std::nullopt},
    {"1.5", std::nullopt},
    {"", std::nullopt},
    {"   ", std::nullopt},
    {"soon", std::nullopt},
    {"5s", std::nullopt},
    {"0x10", std::nullopt},
    {"Thu, 01 Jan 2026 00:00:05 PST", std::nullopt},
    {"Thu, 01 Foo 2026 00:00:05 GMT", std::nullopt},
    {"Thu, 32 Jan 2026 00:00:05 GMT", std::nullopt},
    {"Thu, 01 Jan 2026 24:00:00 GMT", std::nullopt},
    {"Thu, 01 Jan 2026 00:00:05 GMT trailing", std::nullopt},
  };
  for (const auto& r : rows)
    EXPECT_EQ(parse_retry_after(r.value, now), r.expected)
      << '"' << r.value << '"';
}

TEST(CoreRetryAfter, RetryAfterMsValuesGiveTheirDelays) {
  const ra_row rows[] = {
    {"0", nanoseconds{0}},
    {"250", nanoseconds{250ms}},
    {"12.5", nanoseconds{12'500'000}},
    {"0.001", nanoseconds{1000}},
    {" 7 ", nanoseconds{7ms}},
    {"1000000000000", cap},
    {"1000000000001", cap},
    {"99999999999999999999999", cap},
    {"-1", std::nullopt},
    {"-0.5", std::nullopt},
    {"", std::nullopt},
    {".", std::nullopt},
    {"1.2.3", std::nullopt},
    {"1e3", std::nullopt},
    {"inf", std::nullopt},
    {"nan", std::nullopt},
    {"0x10", std::nullopt},
    {"Thu, 01 Jan 2026 00:00:05 GMT", std::nullopt},
    // over 32 characters, even if numeric
    {"1000000000000000000000000000000000", std::nullopt},
  };
  for (const auto& r : rows)
    EXPECT_EQ(parse_retry_after_ms(r.value), r.expected)
      << '"' << r.value << '"';
}

TEST(CoreRetryAfter, MillisecondHeaderWinsWhenBothAreValid) {
  header_list hs = {{"Retry-After", "5"}, {"retry-after-ms", "250"}};
  EXPECT_EQ(server_retry_delay(hs, now), nanoseconds{250ms});
  // Header names compare case-insensitively; order does not matter.
  header_list swapped = {{"RETRY-AFTER-MS", "1500"},
                         {"retry-after", "Thu, 01 Jan 2026 00:00:05 GMT"}};
  EXPECT_EQ(server_retry_delay(swapped, now), nanoseconds{1500ms});
}

TEST(CoreRetryAfter, AnInvalidMillisecondHeaderLeavesRetryAfterInCharge) {
  for (const char* bad : {"-5", "NaN", "soon", ""}) {
    header_list hs = {{"retry-after-ms", bad}, {"Retry-After", "3"}};
    EXPECT_EQ(server_retry_delay(hs, now), nanoseconds{3s}) << bad;
  }
  header_list date = {{"retry-after-ms", "x"},
                      {"Retry-After", "Thu, 01 Jan 2026 00:00:09 GMT"}};
  EXPECT_EQ(server_retry_delay(date, now), nanoseconds{9s});
}

TEST(CoreRetryAfter, NoValidHeaderMeansNoServerDelay) {
  EXPECT_EQ(server_retry_delay({}, now), std::nullopt);
  header_list both_bad = {{"retry-after-ms", "-1"}, {"Retry-After", "-1"}};
  EXPECT_EQ(server_retry_delay(both_bad, now), std::nullopt);
  header_list other = {{"x-retry-after", "5"}, {"retry-after-seconds", "5"}};
  EXPECT_EQ(server_retry_delay(other, now), std::nullopt);
}

TEST(CoreRetryAfter, HugeValuesOfBothHeadersSaturateAtTheSameCap) {
  header_list ms = {{"retry-after-ms", "1" + std::string(30, '0')}};
  EXPECT_EQ(server_retry_delay(ms, now), cap);
  header_list s = {{"Retry-After", std::string(40, '9')}};
  EXPECT_EQ(server_retry_delay(s, now), cap);
}
