#pragma once

// Small vocabulary shared by the pure hedging state: the time
// type, the health outcome of a finished call (call_health, decided by
// core/classify.hpp) and the breaker scopes. No CAF, no clock reads: every
// state class is handed `now`.

#include "core/classify.hpp" // call_health, the verdict of core/classify

#include <chrono>
#include <cstdint>
#include <string>

namespace outbound {
inline namespace core {

/// Monotonic time point of the hedging state (the actor clock's type:
/// caf::actor_clock::time_point is a steady_clock time point).
using hedge_time = std::chrono::steady_clock::time_point;

/// Seconds between two hedge_time points, as a double.
inline double seconds_between(hedge_time from, hedge_time to) {
  return std::chrono::duration<double>(to - from).count();
}

/// True if `h` counts as a failure under `treat_5xx_as_failure`.
inline bool is_failure(call_health h, bool treat_5xx_as_failure) {
  return h == call_health::failure
         || (h == call_health::server_error && treat_5xx_as_failure);
}

/// Hedge eligibility (httpx-hedged, "Race and cancel"): only GET, HEAD and
/// OPTIONS (exact, upper-case) without a body are hedged — a second copy of
/// anything else could duplicate a side effect, and a body may not be
/// replayable.
inline bool is_hedgeable(const std::string& method, bool has_body) {
  return !has_body
         && (method == "GET" || method == "HEAD" || method == "OPTIONS");
}

/// The two breaker tiers.
enum class breaker_scope : uint8_t { host, endpoint };

/// "host" or "endpoint" (the `scope` argument of on_circuit_open).
inline const char* to_string(breaker_scope s) {
  return s == breaker_scope::host ? "host" : "endpoint";
}

} // namespace core
} // namespace outbound
