#pragma once

// The server's "wait this long before you retry": the `Retry-After` header
// (RFC 9110 §10.2.3: delay-seconds or an HTTP-date, §5.6.7) and the
// `retry-after-ms` header (milliseconds, as hyperdjango's serviceclient and
// the OpenAI API clients read it). Pure: no CAF, no Asio, no clock read —
// the wall clock that turns an HTTP-date into a delay is an argument.
//
// The one parser of these headers in outbound: the retry loop
// (actors/call/retry_state.hpp, `server_retry_delay`) honours them for the
// statuses listed in `retry_policy::retry_statuses`.

#include "protocol/http_types.hpp"

#include <chrono>
#include <optional>
#include <string>

namespace outbound {
inline namespace core {

/// Wall-clock time point, only used to interpret an HTTP-date Retry-After.
using wall_time = std::chrono::system_clock::time_point;

/// The longest delay the parsers return, in seconds (1e9 s, about 31
/// years): far beyond any deadline, far below int64 nanosecond overflow even
/// added to a time point. Larger values saturate here instead of failing.
constexpr double max_retry_after_seconds = 1e9;

/// Parses a `retry-after-ms` value: a non-negative decimal number of
/// milliseconds, fractions allowed ("250", "12.5"), surrounding blanks
/// ignored, at most 32 characters. Values over `max_retry_after_seconds`
/// saturate. std::nullopt when malformed, negative ("-1"), in exponent form
/// ("1e3") or not finite ("inf", "nan").
std::optional<std::chrono::nanoseconds>
parse_retry_after_ms(const std::string& value);

/// Parses an HTTP-date (RFC 9110 §5.6.7): IMF-fixdate
/// "Sun, 06 Nov 1994 08:49:37 GMT", and the obsolete RFC 850
/// "Sunday, 06-Nov-94 08:49:37 GMT" and asctime "Sun Nov  6 08:49:37 1994"
/// forms. Years 1900..9999; dates after 2200 saturate to 2200-01-01 (the
/// system clock's nanoseconds end in 2262). std::nullopt when malformed.
std::optional<wall_time> parse_http_date(const std::string& value);

/// Parses a `Retry-After` value: delay-seconds ("120", digits only; more
/// than 10 digits or over `max_retry_after_seconds` saturate), or an
/// HTTP-date minus `wall_now`, clamped to [0, max_retry_after_seconds] (a
/// date in the past means "now"). std::nullopt when malformed, negative
/// ("-3") or fractional ("1.5").
std::optional<std::chrono::nanoseconds>
parse_retry_after(const std::string& value, wall_time wall_now);

/// The delay a response asks for: `retry-after-ms` if present and valid,
/// else `Retry-After` if present and valid, else std::nullopt (the caller
/// uses its own backoff). Header names compare case-insensitively; only the
/// first field of each name is read.
std::optional<std::chrono::nanoseconds>
server_retry_delay(const header_list& headers, wall_time wall_now);

} // namespace core
} // namespace outbound
