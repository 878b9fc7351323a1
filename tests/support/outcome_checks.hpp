#pragma once

// Reading the error of a call a test expects to fail. call_outcome::error is
// set exactly when the call failed (protocol/errors.hpp, "one result
// shape"): reading it through failure_of turns an unexpected success into a
// test failure that says so, instead of a read of an empty optional.

#include "core/call_types.hpp"

#include <gtest/gtest.h>

#include <string>

namespace outbound::testing {

/// The error of `o`; when `o` succeeded, fails the current test and returns
/// a default error (whose fields then fail the test's own checks too).
inline const call_error& failure_of(const call_outcome& o) {
  static const call_error none{};
  if (!o.error) {
    ADD_FAILURE() << "expected a failed call, got a success (status "
                  << o.status << ")";
    return none;
  }
  return *o.error;
}

/// A failed outcome standing for "no outcome arrived" (a test helper's
/// answer when the actor under test never answered).
inline call_outcome no_outcome(std::string detail) {
  call_outcome o;
  o.error.emplace().detail = std::move(detail);
  return o;
}

} // namespace outbound::testing
