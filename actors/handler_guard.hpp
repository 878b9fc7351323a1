#pragma once

// One place that turns an exception thrown inside an actor's handler into a
// typed error value. CAF 0.17 ends an actor whose handler throws (its
// exception handler only picks the exit reason), and a caller holding a
// request to it then waits for its own timeout. Handlers that can throw
// (configuration checks on first use, JSON, std containers, user
// callbacks) run their body through `guarded`, answer with the error it
// makes, and the actor stays alive for the next message. The idea is
// Erlang/OTP's "let it crash" turned inside out for a typed request/reply
// API: the failure becomes the reply, as gRPC turns a handler's exception
// into an INTERNAL status instead of dropping the stream.

#include "config/config_error.hpp"
#include "protocol/errors.hpp"

#include <caf/error.hpp>
#include <caf/result.hpp>
#include <caf/sec.hpp>

#include <exception>
#include <new>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace outbound {

/// The typed error for the exception in `e`, caught in `where` (an actor or
/// step name, e.g. "coalescing driver"): a config_error keeps its kind
/// (error_kind::config_error, its field first in the detail); anything else
/// is error_kind::service_unavailable with "internal error in <where>: " and
/// the exception's what(). nothing_sent is false (unknown); callers that know
/// better set it. Never throws.
inline call_error error_of_exception(const std::exception_ptr& e,
                                     std::string_view where) noexcept {
  call_error err;
  try {
    err.kind = error_kind::service_unavailable;
    try {
      std::rethrow_exception(e);
    } catch (const config_error& x) {
      err.kind = error_kind::config_error;
      err.detail = x.what();
      err.detail.append(" (in ").append(where).append(")");
    } catch (const std::exception& x) {
      err.detail.append("internal error in ")
        .append(where)
        .append(": ")
        .append(x.what());
    } catch (...) {
      err.detail.append("internal error in ")
        .append(where)
        .append(": unknown exception");
    }
  } catch (...) {
    // Building the detail ran out of memory: the kind alone is the answer.
    err.detail.clear();
  }
  return err;
}

/// Runs `body()` and returns its result; when it throws, returns
/// `on_error(error_of_exception(..., where))` instead. `on_error` must
/// return the same type as `body` (or something convertible) and should not
/// throw itself.
template <class Body, class OnError>
auto guarded(std::string_view where, Body&& body, OnError&& on_error)
  -> decltype(body()) {
  try {
    return std::forward<Body>(body)();
  } catch (...) {
    return std::forward<OnError>(on_error)(
      error_of_exception(std::current_exception(), where));
  }
}

/// For a request handler whose reply is a plain value (no call_error in its
/// type): the value of `body()`, or, when it throws, a caf::error
/// (sec::runtime_error whose context is error_of_exception's detail), which
/// reaches the requester's error handler. The actor stays alive.
template <class Body>
auto guarded_result(std::string_view where, Body&& body)
  -> caf::result<std::decay_t<decltype(body())>> {
  try {
    return std::forward<Body>(body)();
  } catch (...) {
    auto err = error_of_exception(std::current_exception(), where);
    return caf::make_error(caf::sec::runtime_error, std::move(err.detail));
  }
}

/// For a handler with no reply: runs `body()`; an exception it throws is
/// dropped (the message is lost, the actor stays alive). Use only where
/// losing the one message is harmless, e.g. a statistics update.
template <class Body>
void guarded_void(Body&& body) noexcept {
  try {
    std::forward<Body>(body)();
  } catch (...) {
  }
}

} // namespace outbound
