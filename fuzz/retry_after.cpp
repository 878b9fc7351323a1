// Fuzz target: the Retry-After / retry-after-ms readers of a response
// (RFC 9110 10.2.3; core/retry_after.hpp). Input: a header value,
// or, after a NUL, a whole header list "name: value\n...".

#include "core/retry_after.hpp"
#include "fuzz/fuzz_input.hpp"

#include <chrono>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace outbound;
  fuzz::input in{data, size};
  std::string value{in.until('\0')};
  // A fixed wall clock: 2026-01-01T00:00:00Z.
  wall_time now{std::chrono::seconds{1767225600}};
  if (auto d = parse_retry_after_ms(value); d && d->count() < 0)
    std::abort(); // a delay is never negative
  if (auto d = parse_retry_after(value, now); d && d->count() < 0)
    std::abort();
  (void)parse_http_date(value);
  header_list headers;
  while (!in.empty()) {
    auto line = in.until('\n');
    auto colon = line.find(':');
    if (colon == std::string_view::npos)
      headers.emplace_back(std::string{line}, std::string{});
    else
      headers.emplace_back(std::string{line.substr(0, colon)},
                           std::string{line.substr(colon + 1)});
  }
  if (auto d = server_retry_delay(headers, now); d && d->count() < 0)
    std::abort();
  return 0;
}
