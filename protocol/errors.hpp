#pragma once

// The error taxonomy of the service client (hyperdjango.serviceclient's
// ServiceError family, its docs "Error hierarchy"; request ids on every
// error as in jev-client). Errors are values (`call_error`) across actor
// boundaries; the blocking facade throws the matching exception type.

#include "protocol/http_types.hpp"
#include "protocol/json_parse.hpp"

#include <optional>
#include <stdexcept>
#include <string>

namespace outbound {
inline namespace protocol {

/// The type of a failed call. Maps one-to-one to the exception classes below,
/// to the CLI's exit codes and to metric labels.
enum class error_kind : uint8_t {
  /// 401 (bad or revoked credential) or 403 (missing grant). Exit 3.
  auth_error,
  /// Any other 4xx, or a refused 3xx redirect. Exit 4.
  request_error,
  /// 5xx. Exit 5.
  server_error,
  /// A 2xx whose body is not JSON, or a body over the size cap. Exit 6.
  response_error,
  /// Transport failure after the retry policy is spent. Exit 7.
  service_unavailable,
  /// The overall deadline ran out (a service_unavailable). Exit 7.
  deadline_exceeded,
  /// Bad configuration or arguments, nothing sent. Exit 2.
  config_error,
  /// A non-idempotent call (the coalescing driver's get_seq) failed after
  /// its request may have been committed by the server: the result may or
  /// may not exist, and it was not retried (exactly one server call). The
  /// caller decides (tsoracle seq_attempt.rs, "uncertain outcome"). Exit 8.
  uncertain_outcome,
};

/// Stable lower-case name ("auth_error", ...), as printed by the CLI.
const char* to_string(error_kind k);

/// Why a call's retry loop stopped short of another attempt (or a hedge's
/// backup) when its policy alone would have allowed one; `none` when the
/// call ended with a definitive answer or was never retryable. A label of
/// `outbound_client_give_ups_total` and the `reason` of the CLI's error
/// JSON.
enum class give_up_reason : uint8_t {
  /// Not a give-up: a definitive answer or a non-retryable failure.
  none,
  /// retry_policy::max_attempts are spent.
  attempts_exhausted,
  /// The overall deadline passed, or the next backoff (or the server's
  /// Retry-After) alone would end past it.
  deadline_exceeded,
  /// The next attempt would start inside the deadline but, at the learned
  /// latency of its endpoint (the hedge percentile of its latency sketch),
  /// would end past it: the call ends now instead of spending the rest of
  /// its deadline on an attempt that cannot finish (client_config's
  /// `deadline`; actors/call/retry_state.hpp).
  deadline_unreachable,
  /// The client's retry budget refused the retry (client_config's
  /// `retry_budget`; core/retry_budget.hpp).
  budget_exhausted,
};

/// Stable lower-case name ("none", "attempts_exhausted",
/// "deadline_exceeded", "deadline_unreachable", "budget_exhausted").
const char* to_string(give_up_reason r);

/// CLI exit code of a kind: 2 config, 3 auth, 4 request, 5 server,
/// 6 response, 7 service_unavailable / deadline_exceeded, 8
/// uncertain_outcome.
int exit_code(error_kind k);

/// A failed call, as a value.
///
/// The library's one result shape: every result that can fail (call_outcome,
/// coalesce_reply, built_request) carries `std::optional<call_error> error`,
/// set exactly when it failed, and `ok()` (no error). Unlike a plain
/// `expected<T, E>` the result keeps what was seen on the way either way
/// (status, attempts, request id), which a failed call needs for its logs.
struct call_error {
  error_kind kind = error_kind::service_unavailable;
  /// The HTTP status when a response was seen, else 0.
  int status = 0;
  /// The server's `detail` field of a JSON error body, or a description of the
  /// transport failure. Never contains the credential.
  std::string detail;
  /// The x-request-id the call carried.
  std::string request_id;
  /// Attempts made (redials and out-of-band local retries not counted).
  int attempts = 0;
  /// True only if no attempt can have reached the server: the caller may
  /// safely repeat a non-idempotent request.
  bool nothing_sent = false;
  /// True only if nothing can have been billed (or committed) for the call:
  /// the request was never built or never sent (nothing_sent), or its one
  /// attempt was refused outright (401, 403 or 429: answered with nothing
  /// processed), or, for the coalescing driver, the oracle proved that
  /// every attempt committed nothing (its pre-commit marker). A spend guard
  /// uses it to decide whether to release what it held for the request
  /// (the `nothing_billed()` of the jev-client SDK's errors).
  bool nothing_billed = false;
  /// The Location header of a refused redirect (empty otherwise).
  std::string location;
  /// The last transport error kind, `none` when the error is an HTTP status.
  transport_error_kind cause = transport_error_kind::none;
  /// Why the retry loop stopped (a retryable failure it did not retry), or
  /// `none`.
  give_up_reason reason = give_up_reason::none;

  /// One-line description "<kind>: <detail> (status N, request id R)".
  std::string message() const;
};

/// Maps a non-2xx HTTP status to its error (401/403 auth_error; 3xx and other
/// 4xx request_error; 5xx and the invalid 600..999, which RFC 9110 section 15
/// says to process as 5xx, server_error; anything else request_error). The
/// detail defaults to the reason phrase ("unexpected redirect (not followed)"
/// for a 3xx). An SDK that gives a few statuses its own meaning special-cases
/// those and delegates the rest here.
call_error classify_status(int status, std::string detail = {});

/// True for a status that refuses a request outright, before any work:
/// 401, 403 (credential or grant) and 429 (rate limit).
bool refused_outright(int status);

/// Sets `e.nothing_billed` from what the error says: nothing_sent, or one
/// attempt (or none) answered with a status refused_outright.
void settle_nothing_billed(call_error& e);

/// Extracts the `detail` field of a JSON error body if it is a string (other
/// JSON values are serialised); empty for non-JSON bodies and for bodies
/// that exceed `limits` (default: depth 64, no memory bound). Numbers
/// binary64 cannot hold (`1e400`, `1e-400`, a 30-digit integer) do not cost
/// the detail: they are read as null (json_limits::bad_numbers_as_null).
std::string extract_detail(const std::string& body,
                           const json_limits& limits = {});

// -- exceptions of the blocking facade ---------------------------------------

/// Base of every error a call can raise. Carries the whole call_error.
class service_error : public std::runtime_error {
public:
  explicit service_error(call_error e);

  const call_error& error() const noexcept {
    return err_;
  }
  /// The HTTP status, or std::nullopt when no response was seen.
  std::optional<int> status() const {
    return err_.status ? std::optional<int>{err_.status} : std::nullopt;
  }
  const std::string& detail() const noexcept {
    return err_.detail;
  }
  const std::string& request_id() const noexcept {
    return err_.request_id;
  }
  int attempts() const noexcept {
    return err_.attempts;
  }
  bool nothing_sent() const noexcept {
    return err_.nothing_sent;
  }
  /// See call_error::nothing_billed.
  bool nothing_billed() const noexcept {
    return err_.nothing_billed;
  }
  error_kind kind() const noexcept {
    return err_.kind;
  }

private:
  call_error err_;
};

/// 401 or 403.
class auth_error : public service_error {
  using service_error::service_error;
};
/// Other 4xx, or a refused 3xx.
class request_error : public service_error {
  using service_error::service_error;
};
/// 5xx.
class server_error : public service_error {
  using service_error::service_error;
};
/// Non-JSON 2xx or a body over the cap.
class response_error : public service_error {
  using service_error::service_error;
};
/// Transport failure after the policy is spent.
class service_unavailable : public service_error {
  using service_error::service_error;
};
/// The overall deadline ran out.
class deadline_exceeded : public service_unavailable {
  using service_unavailable::service_unavailable;
};
/// A non-idempotent call whose outcome is unknown (see
/// error_kind::uncertain_outcome).
class uncertain_outcome_error : public service_error {
  using service_error::service_error;
};
/// Bad arguments detected before anything was sent.
class invalid_request : public service_error {
  using service_error::service_error;
};

/// Throws the exception class matching `e.kind`.
[[noreturn]] void throw_error(call_error e);

} // namespace protocol
} // namespace outbound
