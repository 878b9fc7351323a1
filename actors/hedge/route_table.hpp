#pragma once

// Endpoint registration and request → key mapping for hedging
// (httpx-hedged 0.5.0 _matcher.py). Each registered endpoint gets its own
// latency sketch, budget and breaker; everything else is tracked per host.
//
// Patterns: an absolute path; a segment that is exactly `{name}` or `*`
// matches exactly one non-empty path segment, every other segment matches
// literally; the whole path must match (segment counts equal), so a
// trailing slash is significant (`/foo` ≠ `/foo/`). Method "*" matches any
// method. The first registered match wins. The query string and fragment
// of a path are ignored. Registration is setup-time only (not
// thread-safe; the route table is a plain value).

#include "config/hedge_config.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace outbound {
inline namespace hedge {

/// One registered endpoint.
struct route_entry {
  /// Unique name; the key is "endpoint:<name>".
  std::string name;
  /// Upper-case method, or "*".
  std::string method;
  std::string pattern;
  /// The overrides (validated).
  endpoint_config config;

  /// "endpoint:<name>".
  std::string key() const {
    return "endpoint:" + name;
  }
};

/// How a request was keyed.
enum class route_status : uint8_t {
  /// A registered pattern (or the explicit name) matched: `entry` is set.
  matched,
  /// No pattern matched: the key is the host key, no entry.
  unmatched,
  /// An explicit endpoint name that is not registered: an error, no key
  /// (never a silent fallback to the host key).
  unknown_endpoint,
};

/// Stable lower-case name ("matched", "unmatched", "unknown_endpoint").
const char* to_string(route_status s);

/// The answer of route_table::match / find / route.
struct route_result {
  route_status status = route_status::unmatched;
  /// "endpoint:<name>" or "host:<host[:port]>"; empty for unknown_endpoint.
  std::string key;
  /// The endpoint (a copy) when matched.
  std::optional<route_entry> entry;
};

/// Registered endpoints in registration order (see the header comment).
class route_table {
public:
  /// Registers an endpoint and returns its name (`name`, or
  /// "<METHOD> <pattern>" by default). `method` is upper-cased. Throws
  /// config_error: `route.method` (empty or not a token), `route.pattern`
  /// (not starting with '/', a '?' or '#', a `{`/`}` that is not a whole
  /// `{name}` segment), `route.name` (empty or already registered), or the
  /// endpoint's own field (`endpoint.percentile`, ...). (`register` is a
  /// C++ keyword, hence the name.)
  std::string register_route(const std::string& method,
                             const std::string& pattern,
                             const endpoint_config& config = {},
                             std::optional<std::string> name = std::nullopt);

  /// The first registered endpoint matching `method` and `path`
  /// (status matched, key "endpoint:<name>"), else the host key (status
  /// unmatched, key host_key(host, port)).
  route_result match(const std::string& method, const std::string& path,
                     const std::string& host,
                     std::optional<uint16_t> port = std::nullopt) const;

  /// The endpoint registered as `name` (matched), or unknown_endpoint.
  route_result find(const std::string& name) const;

  /// `find(*explicit_name)` when an explicit name is given (a per-call
  /// override bypasses matching), else `match(...)`.
  route_result route(const std::optional<std::string>& explicit_name,
                     const std::string& method, const std::string& path,
                     const std::string& host,
                     std::optional<uint16_t> port = std::nullopt) const;

  /// "host:<host>" or "host:<host>:<port>"; an IPv6 literal (a ':' in
  /// `host`) is bracketed when a port is given.
  static std::string host_key(const std::string& host,
                              std::optional<uint16_t> port = std::nullopt);

  /// True if `pattern` (a validated pattern) matches `path` (query and
  /// fragment already stripped or not: they are ignored).
  static bool pattern_matches(const std::string& pattern,
                              const std::string& path);

  const std::vector<route_entry>& entries() const {
    return entries_;
  }

private:
  std::vector<route_entry> entries_;
};

} // namespace hedge
} // namespace outbound
