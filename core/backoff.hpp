#pragma once

// Capped exponential backoff with jitter: the one formula behind every wait
// between tries in outbound (the service client's retries, the coalescing
// driver's discovery and transport retries, the feed's reconnects and
// re-drains). Pure: no clock, no CAF, no Asio; the attempt number and the
// random bits are arguments, so a seeded generator gives the same delays on
// every run.
//
//   step(n)  = min(base * 2^n, cap)              saturating, any n >= 0
//   none           : step(n)
//   additive_base  : step(n) + U[0, base)        hyperdjango serviceclient
//   additive_step  : step(n) + U[0, step(n))     feed reconnects
//   full           : U[0, step(n)]               tsoracle, Brooker "Full Jitter"
//   decorrelated   : min(cap, U[base, 3 * prev]) Brooker "Decorrelated Jitter"
//
// Sources: M. Brooker, "Exponential Backoff And Jitter", AWS Architecture
// Blog, 2015; hyperdjango's serviceclient docs ("RetryPolicy backoff before
// retry n (0-based) is min(base_backoff * 2**n, max_backoff) plus uniform
// jitter in [0, base_backoff)"); tsoracle's client ("full-jitter in
// [0, base_backoff x 2^attempt]").

#include "core/rng.hpp"

#include <chrono>
#include <cstdint>
#include <limits>
#include <string>

// Namespace outbound::core (not plain outbound): the folder core/ holds the
// CAF- and Asio-free pieces every request path shares, and the namespace
// mirrors the path (house style), keeps the names short (core::backoff next
// to the feed's reconnect_backoff) and makes a call site show it uses the
// shared piece.
namespace outbound {
inline namespace core {

/// Durations of the core: whole nanoseconds, the unit of every actor timer.
using duration = std::chrono::nanoseconds;

/// How a backoff spreads its delays (the table at the top of this file).
enum class jitter : uint8_t {
  /// No randomness: `step(n)` (the feed's re-drain backoff).
  none,
  /// `step(n) + U[0, base)`: the jitter spans one base whatever the attempt
  /// (hyperdjango's serviceclient RetryPolicy). Drawn as a double in seconds
  /// (std::uniform_real_distribution, like Python's random.uniform), then
  /// rounded to the nanosecond.
  additive_base,
  /// `step(n) + U[0, step(n))`: the jitter spans the current step, so the
  /// delay lies in [step, 2*step) (the feed's reconnect backoff). Drawn as
  /// whole nanoseconds.
  additive_step,
  /// `U[0, step(n)]`, both ends included (Brooker's "Full Jitter"; tsoracle's
  /// client). Drawn as whole nanoseconds.
  full,
  /// `min(cap, U[base, 3 * previous])` with `previous` the last delay (base
  /// before the first retry); the attempt number is not used (Brooker's
  /// "Decorrelated Jitter"). Drawn as whole nanoseconds.
  decorrelated,
};

/// "none", "additive_base", "additive_step", "full", "decorrelated".
const char* to_string(jitter j);

/// A capped exponential backoff: immutable, cheap to copy, no state between
/// calls (callers keep the attempt number, or for `decorrelated` the last
/// delay). A zero base means "retry at once" for every variant (no draw);
/// `cap` may be below `base` (every step is then `cap`).
class backoff {
public:
  /// `base`: the first step, `cap`: the largest step (both >= 0; a negative
  /// one throws config_error naming "backoff.base" or "backoff.cap" —
  /// callers validate their own fields first, see validate_backoff_seconds).
  backoff(jitter kind, duration base, duration cap);

  jitter kind() const noexcept {
    return kind_;
  }

  duration base() const noexcept {
    return base_;
  }

  duration cap() const noexcept {
    return cap_;
  }

  /// The exponential step before retry `attempt` (0-based):
  /// `min(base * 2^attempt, cap)`. Saturates instead of overflowing for any
  /// attempt (64 and beyond included) and any base; a negative attempt
  /// counts as 0. Draws nothing.
  duration step(int attempt) const noexcept;

  /// The delay before retry `attempt` (0-based) under this backoff's jitter
  /// (the table at the top of this file). `previous` is only read by
  /// `decorrelated`: the delay returned last time, 0 (the default) before
  /// the first retry. Draws at most one variate from `rng` (none when the
  /// jitter range is empty), in the same way as the code it replaced, so a
  /// seeded generator gives the same delays as before. Never negative;
  /// saturates at duration::max() instead of overflowing. Callers clamp it
  /// to their deadline.
  duration delay(int attempt, rng& rng, duration previous = duration{0}) const;

private:
  jitter kind_;
  duration base_;
  duration cap_;
};

/// Validates a backoff given in seconds as the config structs hold it: each
/// value finite and >= 0, and, when `cap_at_least_base`, `cap >= base`.
/// Throws config_error naming `base_field` or `cap_field` ("must be >= 0
/// seconds, got X", "must be >= <base_field>").
void validate_backoff_seconds(double base, double cap,
                              const std::string& base_field,
                              const std::string& cap_field,
                              bool cap_at_least_base = false);

} // namespace core
} // namespace outbound
