#pragma once

// A bare HTTP/1.0 GET for integration tests that scrape a local endpoint
// (a /metrics listener, Prometheus's API) without an HTTP client of the
// product under test in the way.

#include <cstdint>
#include <string>
#include <utility>

namespace outbound::testing {

/// One HTTP/1.0 GET on 127.0.0.1:port (10 s receive timeout); {status,
/// body}, status 0 when the connection failed.
std::pair<int, std::string> http_get(uint16_t port, const std::string& target);

} // namespace outbound::testing
