#pragma once

// The retry loop of one call as a pure state machine ("jev-client — the
// patient one", "One ask, start to finish"; hyperdjango's serviceclient docs
// "Retry contract" and serviceclient.py defaults). No CAF, no Asio, no clock
// reads: `now`, the wall clock and the random generator are arguments. The
// call actor asks it what to do and does it.
//
//              begin_attempt(now)
//   start ───────────────► [in flight] ──response / error / own timeout──┐
//     ▲   deadline left?       │  ▲                                      │
//     │   no → give_up_deadline│  │ redial (fresh connection, no attempt)│
//     │                        │  └──────────────────────────────────────┤
//     │                        │     retry_local (0.2 s + U[0,0.2) s,    │
//     │  [waiting] ◄───────────┼──── no attempt, local_retry_deadline) ◄─┤
//     └──── delay over         │                                         │
//           ▲                  │                                         │
//           └── retry_after ◄──┴── (idempotent, attempts left, delay     │
//               (counted, x-retry-count: N)   within the deadline) ◄─────┤
//                                                                        │
//   answer / give_up_attempts / give_up_deadline / not_retryable ◄───────┘
//   (the call ends: a response or a call_error)
//
// Attempts count real attempts only: a redial is the same attempt sent again
// on a fresh connection, and an out-of-band local retry re-sends the same
// attempt after a local port shortage.

#include "config/client_config.hpp"
#include "core/retry_after.hpp" // wall_time, server_retry_delay, parse_*
#include "core/rng.hpp"
#include "protocol/errors.hpp"
#include "protocol/http_types.hpp"

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>

namespace outbound {
inline namespace call {

/// Monotonic time point of the retry loop (the actor clock's type; the pure
/// state never reads a clock, it is handed `now`).
using retry_time = std::chrono::steady_clock::time_point;

/// Random generator of jitter and request ids. Seeded per call by the
/// service client (client_options::seed), so tests are reproducible.
/// The library's one generator (core/rng.hpp): cheap to seed once per call.
using call_rng = core::rng;

/// What the call actor does after an attempt ended (Envoy's
/// RetryStatus-style: each "no" has its own value, mapping one-to-one to a
/// metric label and an error).
enum class retry_decision : uint8_t {
  /// A definitive response ends the call: map it to the outcome.
  answer,
  /// Wait `delay`, then start the next counted attempt (x-retry-count N).
  retry_after,
  /// Re-send the same attempt at once on a fresh connection (not counted).
  redial,
  /// Wait `delay`, then re-send the same attempt (local port shortage; not
  /// counted, whatever the idempotency).
  retry_local,
  /// The policy's attempts are spent.
  give_up_attempts,
  /// The next try would start past the overall deadline, or, at the
  /// endpoint's learned latency (set_expected_latency), end past it.
  give_up_deadline,
  /// The client's retry budget refused the retry (refuse_retry).
  give_up_budget,
  /// The failure is never retried (non-idempotent request, TLS, body too
  /// large, configuration).
  not_retryable,
};

/// Stable lower-case name ("answer", "retry_after", ...).
const char* to_string(retry_decision d);

/// GET, HEAD and OPTIONS (exact, upper-case): the methods retried without an
/// explicit `idempotent = true`.
bool method_is_idempotent(const std::string& method);

/// Converts seconds to nanoseconds, rounded to the nearest nanosecond;
/// negative and non-finite values give 0.
std::chrono::nanoseconds seconds_to_ns(double seconds);

/// The backoff before retry `n` (0-based):
/// `min(base·2^n, max_backoff) + U[0, base)` seconds (hyperdjango RetryPolicy;
/// core::backoff with additive_base jitter), at most 1e9 s.
/// A zero base gives exactly min(0, max) = 0: no jitter, no wait.
std::chrono::nanoseconds backoff_delay(const retry_policy& policy, int n,
                                       call_rng& rng);

/// What the next send looks like (the answer of begin_attempt).
struct attempt_plan {
  /// False: no deadline left; `error` is the final error (deadline_exceeded).
  bool send = false;
  /// Time limit of this send: min(timeout, deadline left), > 0 when `send`.
  std::chrono::nanoseconds budget{0};
  /// 1-based number of the attempt (a redial or a local retry keeps the
  /// number of the attempt it re-sends).
  int attempt = 0;
  /// Value of `x-retry-count` (retries so far); 0 means no header.
  int retry_count = 0;
  /// Dial a new connection instead of reusing an idle one (redials).
  bool fresh_connection = false;
  /// This send is a new, counted attempt (not a redial or local retry).
  bool counted = false;
  /// When `!send`: the final error (attempts and nothing_sent filled; the
  /// request id is the caller's).
  call_error error;
};

/// The decision after an attempt ended.
struct retry_step {
  retry_decision decision = retry_decision::answer;
  /// retry_after / retry_local: the wait before the next send.
  std::chrono::nanoseconds delay{0};
  /// Why ("status 503", "timeout", "not_sent", ...); never carries header
  /// values.
  std::string cause;
  /// The cause as a value: the transport error kind, or none when the cause
  /// is an HTTP status (or there is none).
  transport_error_kind cause_kind = transport_error_kind::none;
  /// The call ends with the response just received (decision `answer`, or a
  /// retryable status given up on): the caller maps it to the outcome.
  bool answer_with_response = false;
  /// The call ends with `error` (give_up_* / not_retryable without a
  /// response answer). attempts, nothing_sent and reason filled.
  call_error error;
  /// Why a final step gave up (also when the call ends with the response:
  /// the caller copies it into the outcome's error).
  give_up_reason reason = give_up_reason::none;
  /// retry_after of a retryable status (the response is the answer if the
  /// retry is refused), not of a transport failure.
  bool status_retry = false;

  /// True if the call ends with this step.
  bool final() const {
    return decision == retry_decision::answer
           || decision == retry_decision::give_up_attempts
           || decision == retry_decision::give_up_deadline
           || decision == retry_decision::give_up_budget
           || decision == retry_decision::not_retryable;
  }
};

/// False for a send that provably never left on a pooled connection found
/// dead (a redial, a local retry) or that the pool refused with its queue
/// full (pool_overflow): the backend is not to blame, and its ~0 s
/// "latency" and health must reach neither the hedging sketch nor the
/// breakers.
bool reached_backend(const retry_step& step);

/// What every call of one client shares in its retry loop: the policy and
/// the durations of the client_config (validated before), converted once
/// instead of per call.
struct retry_setup {
  explicit retry_setup(const client_config& cfg);

  /// The setup for a call that carries an idempotency key: 409 Conflict
  /// retried too (see retry_state::retry_conflicts).
  retry_setup with_conflicts() const;

  retry_policy policy;
  std::chrono::nanoseconds timeout;
  std::chrono::nanoseconds deadline;
  std::chrono::nanoseconds local_budget;
  int max_redials;
};

/// A client's two setups, made once: for calls without and with an
/// idempotency key.
struct retry_setups {
  explicit retry_setups(const client_config& cfg)
    : plain(cfg), keyed(plain.with_conflicts()) {
  }

  /// The setup of a call that is `keyed` (carries an idempotency key and
  /// is retried: see retry_state::retry_conflicts) or not.
  const retry_setup& for_call(bool keyed) const {
    return keyed ? this->keyed : plain;
  }

  retry_setup plain;
  retry_setup keyed;
};

/// The retry loop of one call. Use: begin_attempt(now) → send with the plan
/// → on_result(...) or on_attempt_timeout(...) → act on the step; when the
/// step waits, call begin_attempt again after the delay.
class retry_state {
public:
  /// `idempotent` decides whether transport failures and retryable statuses
  /// are retried; `start` is when the call began (the deadline counts from
  /// there). Takes the policy, timeout, deadline, max_redials and
  /// local_retry_deadline from `cfg` (validated before).
  retry_state(const client_config& cfg, bool idempotent, retry_time start);

  /// The same with the setup of `cfg` made once (retry_setup), which must
  /// outlive this state: the service client's calls share their client's.
  retry_state(const retry_setup& setup, bool idempotent, retry_time start);
  /// A temporary setup would not outlive the state.
  retry_state(retry_setup&&, bool, retry_time) = delete;

  /// Plans the next send at `now`. `send == false` when the overall deadline
  /// is spent (the call ends with deadline_exceeded).
  attempt_plan begin_attempt(retry_time now);

  /// The transport answered the current send. `wall_now` interprets an
  /// HTTP-date Retry-After; `rng` draws the jitter.
  retry_step on_result(const exchange_result& result, retry_time now,
                       wall_time wall_now, call_rng& rng);

  /// The current send ran out of its budget without an answer (the caller's
  /// own timer). Treated as a `timeout` whose request may have left.
  retry_step on_attempt_timeout(retry_time now, call_rng& rng);

  /// The retry budget refused the retry that `step` (a retry_after) asked
  /// for: the final step instead, give_up_budget with reason
  /// budget_exhausted — the response stands for a retryable status, else
  /// the call ends with the last failure as a service_unavailable.
  retry_step refuse_retry(const retry_step& step) const;

  /// The latency the next attempt is expected to take: the learned
  /// latency of the call's endpoint at its hedge percentile (a hedging
  /// client's sketch). A retry whose wait plus this would end past the
  /// overall deadline is not made (give_up_deadline, reason
  /// deadline_unreachable): the call ends at once instead of spending the
  /// rest of its deadline. [0: unknown, only the wait is checked]
  void set_expected_latency(std::chrono::nanoseconds d) {
    expected_latency_ = d;
  }

  /// The call carries an idempotency key: a 409 Conflict is retried too
  /// (with backoff, as a listed retry status). A server that follows
  /// draft-ietf-httpapi-idempotency-key-header answers 409 to a request
  /// whose key is still being processed — a retry after a lost answer, or
  /// a hedge racing its primary — and the first request's result to a
  /// later one.
  void retry_conflicts();

  /// The statuses this call retries (the policy's, plus 409 after
  /// retry_conflicts): what classifies its answers.
  const std::vector<int>& retry_statuses() const {
    return setup_->policy.retry_statuses;
  }

  /// Real attempts started so far.
  int attempts() const {
    return attempts_;
  }
  /// Redials used so far.
  int redials() const {
    return redials_;
  }
  /// True while no send can have reached the server (no byte written, no
  /// response seen).
  bool nothing_sent() const {
    return !any_sent_;
  }
  bool idempotent() const {
    return idempotent_;
  }
  /// start + deadline.
  retry_time deadline_at() const {
    return deadline_at_;
  }

private:
  enum class next_send : uint8_t { new_attempt, redial, local };

  retry_step transport_failure(const exchange_result& r,
                               transport_error_kind kind, retry_time now,
                               call_rng& rng);
  retry_step end_with(retry_decision d, call_error e, std::string cause,
                      transport_error_kind cause_kind,
                      give_up_reason reason = give_up_reason::none) const;
  /// give_up_deadline's reason for a retry after `delay` at `now`, or none
  /// when the retry fits: deadline_exceeded when the wait alone reaches the
  /// deadline (a retry due at it has no time to run), deadline_unreachable
  /// when the expected latency passes it.
  give_up_reason deadline_check(retry_time now,
                                std::chrono::nanoseconds delay) const;
  std::string deadline_text() const;

  /// The setup in force: `owned_`'s, or a shared one that outlives this
  /// state. Never points into this object, so the state moves freely.
  const retry_setup* setup_;
  /// Set when this state made its own setup (from a client_config, or a
  /// copy with 409 added by retry_conflicts).
  std::shared_ptr<const retry_setup> owned_;
  std::chrono::nanoseconds expected_latency_{0};
  bool idempotent_;
  retry_time start_;
  retry_time deadline_at_;
  int attempts_ = 0;
  int redials_ = 0;
  bool any_sent_ = false;
  std::optional<retry_time> first_local_failure_;
  next_send next_ = next_send::new_attempt;
  std::string last_failure_;
};

} // namespace call
} // namespace outbound
