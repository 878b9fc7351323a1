#include "actors/call/retry_state.hpp"

#include "core/backoff.hpp"
#include "core/classify.hpp"
#include "core/time.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>

namespace outbound {
inline namespace call {

namespace {

using std::chrono::nanoseconds;

/// Longest delay the loop computes with (about 31 years): far beyond any
/// deadline, far below int64 nanosecond overflow even added to a time point.
constexpr double max_delay_seconds = 1e9;

/// The out-of-band retry of a local port shortage: 0.2 s + U[0, 0.2 s)
/// whatever the count (hyperdjango's serviceclient "short backoff").
const core::backoff local_retry_backoff{core::jitter::additive_base,
                                        std::chrono::milliseconds{200},
                                        std::chrono::milliseconds{200}};

std::string seconds_text(nanoseconds d) {
  std::ostringstream os;
  os << std::chrono::duration<double>(d).count();
  return os.str();
}

std::string ms_text(nanoseconds d) {
  std::ostringstream os;
  os << std::chrono::duration<double, std::milli>(d).count();
  return os.str();
}

} // namespace

const char* to_string(retry_decision d) {
  switch (d) {
    case retry_decision::answer: return "answer";
    case retry_decision::retry_after: return "retry_after";
    case retry_decision::redial: return "redial";
    case retry_decision::retry_local: return "retry_local";
    case retry_decision::give_up_attempts: return "give_up_attempts";
    case retry_decision::give_up_deadline: return "give_up_deadline";
    case retry_decision::give_up_budget: return "give_up_budget";
    case retry_decision::not_retryable: return "not_retryable";
  }
  return "unknown";
}

bool method_is_idempotent(const std::string& method) {
  return method == "GET" || method == "HEAD" || method == "OPTIONS";
}

nanoseconds seconds_to_ns(double seconds) {
  // At most max_delay_seconds: far below int64 nanosecond overflow even
  // added to a time point.
  return core::from_seconds(seconds, core::from_seconds(max_delay_seconds));
}

nanoseconds backoff_delay(const retry_policy& policy, int n, call_rng& rng) {
  const core::backoff b{core::jitter::additive_base,
                        seconds_to_ns(policy.base_backoff),
                        seconds_to_ns(policy.max_backoff)};
  return std::min(b.delay(n, rng), seconds_to_ns(max_delay_seconds));
}

// -- retry_state ---------------------------------------------------------------

retry_setup::retry_setup(const client_config& cfg)
  : policy(cfg.retry), timeout(seconds_to_ns(cfg.timeout)),
    deadline(seconds_to_ns(cfg.deadline)),
    local_budget(seconds_to_ns(cfg.local_retry_deadline)),
    max_redials(cfg.max_redials) {
}

retry_setup retry_setup::with_conflicts() const {
  auto s = *this;
  if (!s.policy.retryable_status(409))
    s.policy.retry_statuses.push_back(409);
  return s;
}

retry_state::retry_state(const client_config& cfg, bool idempotent,
                         retry_time start)
  : setup_(nullptr), owned_(std::make_shared<const retry_setup>(cfg)),
    idempotent_(idempotent), start_(start) {
  setup_ = owned_.get();
  deadline_at_ = start + setup_->deadline;
}

retry_state::retry_state(const retry_setup& setup, bool idempotent,
                         retry_time start)
  : setup_(&setup), idempotent_(idempotent), start_(start),
    deadline_at_(start + setup.deadline) {
}

void retry_state::retry_conflicts() {
  if (setup_->policy.retryable_status(409))
    return;
  owned_ = std::make_shared<const retry_setup>(setup_->with_conflicts());
  setup_ = owned_.get();
}

std::string retry_state::deadline_text() const {
  auto s = "deadline of " + seconds_text(setup_->deadline)
           + " s exceeded after " + std::to_string(attempts_)
           + (attempts_ == 1 ? " attempt" : " attempts");
  if (!last_failure_.empty())
    s += " (last: " + last_failure_ + ")";
  return s;
}

attempt_plan retry_state::begin_attempt(retry_time now) {
  attempt_plan p;
  auto left = deadline_at_ - now;
  if (left <= nanoseconds{0}) {
    p.send = false;
    p.error.kind = error_kind::deadline_exceeded;
    p.error.detail = deadline_text();
    p.error.attempts = attempts_;
    p.error.nothing_sent = !any_sent_;
    p.error.cause = transport_error_kind::timeout;
    p.error.reason = give_up_reason::deadline_exceeded;
    p.attempt = attempts_;
    return p;
  }
  p.send = true;
  p.budget
    = std::min(setup_->timeout, std::chrono::duration_cast<nanoseconds>(left));
  switch (next_) {
    case next_send::new_attempt:
      ++attempts_;
      p.counted = true;
      break;
    case next_send::redial:
      p.fresh_connection = true;
      break;
    case next_send::local:
      break;
  }
  next_ = next_send::new_attempt;
  p.attempt = attempts_;
  p.retry_count = attempts_ - 1;
  return p;
}

retry_step retry_state::end_with(retry_decision d, call_error e,
                                 std::string cause,
                                 transport_error_kind cause_kind,
                                 give_up_reason reason) const {
  retry_step s;
  s.decision = d;
  s.cause = std::move(cause);
  s.cause_kind = cause_kind;
  s.reason = reason;
  e.attempts = attempts_;
  e.nothing_sent = !any_sent_;
  e.reason = reason;
  s.error = std::move(e);
  return s;
}

give_up_reason retry_state::deadline_check(retry_time now,
                                           nanoseconds delay) const {
  // A retry due at the deadline itself would have no time to run
  // (begin_attempt sends nothing with 0 left).
  if (now + delay >= deadline_at_)
    return give_up_reason::deadline_exceeded;
  if (expected_latency_ > nanoseconds{0}
      && now + delay + expected_latency_ > deadline_at_)
    return give_up_reason::deadline_unreachable;
  return give_up_reason::none;
}

retry_step retry_state::refuse_retry(const retry_step& step) const {
  if (step.status_retry) {
    retry_step s;
    s.decision = retry_decision::give_up_budget;
    s.cause = step.cause;
    s.reason = give_up_reason::budget_exhausted;
    s.answer_with_response = true;
    return s;
  }
  call_error e;
  e.kind = error_kind::service_unavailable;
  e.cause = step.cause_kind;
  e.detail
    = last_failure_ + " (not retried: the client's retry budget is exhausted)";
  return end_with(retry_decision::give_up_budget, std::move(e), step.cause,
                  step.cause_kind, give_up_reason::budget_exhausted);
}

namespace {

/// The error of a transport failure no retry can mend: a TLS failure, a
/// response over the size cap, a transport configuration error, or a full
/// pool queue (nothing left, but a retry or a redial would only queue
/// behind the same backlog).
call_error final_error(const exchange_result& r, transport_error_kind kind) {
  call_error e;
  e.cause = kind;
  switch (kind) {
    case transport_error_kind::tls:
      e.kind = error_kind::service_unavailable;
      e.detail = "tls: " + (r.detail.empty() ? "handshake failed" : r.detail);
      e.status = r.response.status;
      break;
    case transport_error_kind::too_large:
      e.kind = error_kind::response_error;
      e.status = r.response.status;
      e.detail
        = r.detail.empty() ? "response body over the size cap" : r.detail;
      break;
    case transport_error_kind::config:
      e.kind = error_kind::config_error;
      e.detail = r.detail.empty() ? "transport configuration error" : r.detail;
      break;
    default: // pool_overflow
      e.kind = error_kind::service_unavailable;
      e.detail = r.detail.empty() ? "connection pool queue full" : r.detail;
      break;
  }
  return e;
}

} // namespace

retry_step retry_state::on_result(const exchange_result& r, retry_time now,
                                  wall_time wall_now, call_rng& rng) {
  if (r.request_sent || r.ok() || r.response.status != 0)
    any_sent_ = true;
  auto verdict = classify_exchange(exchange_view::of(r, idempotent_),
                                   setup_->policy.retry_statuses);
  if (verdict.answered()) {
    auto status = r.response.status;
    retry_step s;
    s.answer_with_response = true;
    if (verdict.cls != outcome_class::retryable_status) {
      s.decision = retry_decision::answer;
      return s;
    }
    s.cause = "status " + std::to_string(status);
    last_failure_ = s.cause;
    if (attempts_ >= setup_->policy.max_attempts) {
      s.decision = retry_decision::give_up_attempts;
      s.reason = give_up_reason::attempts_exhausted;
      return s;
    }
    auto delay = server_retry_delay(r.response.headers, wall_now);
    if (!delay)
      delay = backoff_delay(setup_->policy, attempts_ - 1, rng);
    if (auto why = deadline_check(now, *delay); why != give_up_reason::none) {
      // The server asks for more time than the call has (or the retry
      // could not finish in it): its answer stands.
      s.decision = retry_decision::give_up_deadline;
      s.reason = why;
      return s;
    }
    s.decision = retry_decision::retry_after;
    s.delay = *delay;
    s.status_retry = true;
    s.answer_with_response = false;
    next_ = next_send::new_attempt;
    return s;
  }
  // The retry loop's own policy per transport error kind on top of the
  // class: a not_sent is redialled and a local port shortage retried out of
  // band whatever the idempotency, a pool_overflow is final although
  // nothing left (a retry only queues behind the same backlog).
  auto kind = verdict.kind;
  switch (kind) {
    case transport_error_kind::none: // handled above
    case transport_error_kind::not_sent:
      if (redials_ < setup_->max_redials) {
        ++redials_;
        retry_step s;
        s.decision = retry_decision::redial;
        s.cause = to_string(kind);
        s.cause_kind = kind;
        next_ = next_send::redial;
        return s;
      }
      // Out of redials: a broken exchange like any other (as in jev-client).
      return transport_failure(r, transport_error_kind::interrupted, now, rng);
    case transport_error_kind::local_resource: {
      if (!first_local_failure_)
        first_local_failure_ = now;
      auto delay = local_retry_backoff.delay(0, rng);
      auto local_end = *first_local_failure_ + setup_->local_budget;
      if (now + delay <= local_end && now + delay <= deadline_at_) {
        retry_step s;
        s.decision = retry_decision::retry_local;
        s.delay = delay;
        s.cause = to_string(kind);
        s.cause_kind = kind;
        next_ = next_send::local;
        return s;
      }
      // The local budget is spent: from here on it is a connect failure.
      return transport_failure(r, transport_error_kind::connect, now, rng);
    }
    case transport_error_kind::connect:
    case transport_error_kind::interrupted:
    case transport_error_kind::timeout:
      return transport_failure(r, kind, now, rng);
    case transport_error_kind::tls:
    case transport_error_kind::too_large:
    case transport_error_kind::config:
    case transport_error_kind::pool_overflow:
      return end_with(retry_decision::not_retryable, final_error(r, kind),
                      to_string(kind), kind);
  }
  return transport_failure(r, transport_error_kind::interrupted, now, rng);
}

retry_step retry_state::on_attempt_timeout(retry_time now, call_rng& rng) {
  exchange_result r;
  r.error = transport_error_kind::timeout;
  // The caller cannot know whether bytes left: assume they may have.
  r.request_sent = true;
  r.detail = "no answer within the attempt's time budget";
  return on_result(r, now, wall_time{}, rng);
}

retry_step retry_state::transport_failure(const exchange_result& r,
                                          transport_error_kind kind,
                                          retry_time now, call_rng& rng) {
  std::string cause = to_string(kind);
  last_failure_ = cause;
  if (!r.detail.empty())
    last_failure_ += ": " + r.detail;
  call_error e;
  e.cause = kind;
  e.kind = error_kind::service_unavailable;
  if (now >= deadline_at_) {
    // The attempt ran into the overall deadline (its budget was cut to it).
    e.kind = error_kind::deadline_exceeded;
    e.detail = deadline_text();
    if (!idempotent_ && r.request_sent)
      e.detail += "; the request may have been processed";
    return end_with(retry_decision::give_up_deadline, std::move(e), cause, kind,
                    give_up_reason::deadline_exceeded);
  }
  if (!idempotent_) {
    e.detail = last_failure_;
    if (r.request_sent)
      e.detail += "; the request may have been processed (not retried: the "
                  "request is not idempotent)";
    else
      e.detail += " (not retried: the request is not idempotent)";
    return end_with(retry_decision::not_retryable, std::move(e), cause, kind);
  }
  if (attempts_ >= setup_->policy.max_attempts) {
    e.detail = last_failure_ + " (gave up after "
               + std::to_string(attempts_)
               + (attempts_ == 1 ? " attempt)" : " attempts)");
    return end_with(retry_decision::give_up_attempts, std::move(e), cause, kind,
                    give_up_reason::attempts_exhausted);
  }
  auto delay = backoff_delay(setup_->policy, attempts_ - 1, rng);
  if (auto why = deadline_check(now, delay); why != give_up_reason::none) {
    e.kind = error_kind::deadline_exceeded;
    if (why == give_up_reason::deadline_exceeded)
      e.detail = deadline_text() + "; the next backoff of " + ms_text(delay)
                 + " ms would pass it";
    else
      e.detail = "deadline of " + seconds_text(setup_->deadline)
                 + " s cannot be met: the next attempt would start in "
                 + ms_text(delay) + " ms and, at the endpoint's learned "
                 + "latency of " + ms_text(expected_latency_)
                 + " ms, end past it (after " + std::to_string(attempts_)
                 + (attempts_ == 1 ? " attempt" : " attempts")
                 + "; last: " + last_failure_ + ")";
    return end_with(retry_decision::give_up_deadline, std::move(e), cause, kind,
                    why);
  }
  retry_step s;
  s.decision = retry_decision::retry_after;
  s.delay = delay;
  s.cause = std::move(cause);
  s.cause_kind = kind;
  next_ = next_send::new_attempt;
  return s;
}

bool reached_backend(const retry_step& step) {
  return step.decision != retry_decision::redial
         && step.decision != retry_decision::retry_local
         && !(step.decision == retry_decision::not_retryable
              && step.error.cause == transport_error_kind::pool_overflow);
}

} // namespace call
} // namespace outbound
