#include "core/retry_after.hpp"

#include "core/text.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace outbound {
inline namespace core {

namespace {

using std::chrono::nanoseconds;

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
// days_from_civil), so that no time zone or locale enters the computation.
int64_t days_from_civil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

int month_index(const char* mon) {
  static const char* names[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  for (int i = 0; i < 12; ++i)
    if (std::strcmp(mon, names[i]) == 0)
      return i + 1;
  return 0;
}

std::optional<wall_time> make_date(int y, int mon, int d, int hh, int mm,
                                   int ss) {
  if (mon < 1 || mon > 12 || d < 1 || d > 31 || hh < 0 || hh > 23 || mm < 0
      || mm > 59 || ss < 0 || ss > 60 || y < 1900 || y > 9999)
    return std::nullopt;
  // system_clock counts nanoseconds up to 2262: later dates saturate.
  if (y > 2200) {
    y = 2200;
    mon = 1;
    d = 1;
    hh = mm = ss = 0;
  }
  auto days = days_from_civil(y, static_cast<unsigned>(mon),
                              static_cast<unsigned>(d));
  auto secs = days * 86400 + hh * 3600 + mm * 60 + ss;
  return wall_time{std::chrono::duration_cast<wall_time::duration>(
    std::chrono::seconds{secs})};
}

} // namespace

std::optional<nanoseconds> parse_retry_after_ms(const std::string& value) {
  std::string v{core::trim_ows(value)};
  if (v.empty() || v.size() > 32)
    return std::nullopt;
  int dots = 0;
  for (char c : v) {
    if (c == '.')
      ++dots;
    else if (!core::is_digit(c))
      return std::nullopt;
  }
  if (dots > 1 || v == ".")
    return std::nullopt;
  double ms = std::strtod(v.c_str(), nullptr);
  if (!std::isfinite(ms) || ms < 0)
    return std::nullopt;
  ms = std::min(ms, max_retry_after_seconds * 1e3);
  return nanoseconds{std::llround(ms * 1e6)};
}

std::optional<wall_time> parse_http_date(const std::string& value) {
  std::string v{core::trim_ows(value)};
  char wd[16] = {0}, mon[4] = {0}, tz[4] = {0};
  int d = 0, y = 0, hh = 0, mm = 0, ss = 0, used = 0;
  auto full = [&] { return used == static_cast<int>(v.size()); };
  // IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT
  used = 0;
  if (std::sscanf(v.c_str(), "%3[A-Za-z], %2d %3[A-Za-z] %4d %2d:%2d:%2d %3[A-Z]%n",
                  wd, &d, mon, &y, &hh, &mm, &ss, tz, &used)
        == 8
      && full() && std::strcmp(tz, "GMT") == 0)
    return make_date(y, month_index(mon), d, hh, mm, ss);
  // RFC 850: Sunday, 06-Nov-94 08:49:37 GMT
  used = 0;
  if (std::sscanf(v.c_str(), "%15[A-Za-z], %2d-%3[A-Za-z]-%2d %2d:%2d:%2d %3[A-Z]%n",
                  wd, &d, mon, &y, &hh, &mm, &ss, tz, &used)
        == 8
      && full() && std::strcmp(tz, "GMT") == 0)
    return make_date(y < 70 ? 2000 + y : 1900 + y, month_index(mon), d, hh, mm,
                     ss);
  // asctime: Sun Nov  6 08:49:37 1994
  used = 0;
  if (std::sscanf(v.c_str(), "%3[A-Za-z] %3[A-Za-z] %2d %2d:%2d:%2d %4d%n", wd,
                  mon, &d, &hh, &mm, &ss, &y, &used)
        == 7
      && full())
    return make_date(y, month_index(mon), d, hh, mm, ss);
  return std::nullopt;
}

std::optional<nanoseconds> parse_retry_after(const std::string& value,
                                             wall_time wall_now) {
  std::string v{core::trim_ows(value)};
  if (v.empty())
    return std::nullopt;
  if (std::all_of(v.begin(), v.end(),
                  [](char c) { return core::is_digit(c); })) {
    // delay-seconds (1*DIGIT, RFC 9110 section 10.2.3: leading zeros
    // allowed); saturate absurd values instead of overflowing.
    auto limit = static_cast<long long>(max_retry_after_seconds);
    auto first = std::min(v.find_first_not_of('0'), v.size() - 1);
    std::string_view digits{v.data() + first, v.size() - first};
    if (digits.size() > 10)
      return std::chrono::seconds{limit};
    return std::chrono::seconds{
      std::min(std::stoll(std::string{digits}), limit)};
  }
  auto at = parse_http_date(v);
  if (!at)
    return std::nullopt;
  // Both are within 1900..2200, so the difference fits in nanoseconds.
  auto d = std::chrono::duration_cast<nanoseconds>(*at - wall_now);
  return std::clamp(d, nanoseconds{0},
                    nanoseconds{static_cast<int64_t>(max_retry_after_seconds)
                                * 1'000'000'000});
}

std::optional<nanoseconds> server_retry_delay(const header_list& headers,
                                              wall_time wall_now) {
  if (auto v = find_header(headers, "retry-after-ms"))
    if (auto d = parse_retry_after_ms(*v))
      return d;
  if (auto v = find_header(headers, "retry-after"))
    if (auto d = parse_retry_after(*v, wall_now))
      return d;
  return std::nullopt;
}

} // namespace core
} // namespace outbound
