#include "actors/call/retry_state.hpp"

#include "core/backoff.hpp"
#include "core/time.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>

namespace outbound {

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

std::string trim(const std::string& s) {
  auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos)
    return {};
  auto e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

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

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
// days_from_civil), so that no time zone or locale enters the computation.
int64_t days_from_civil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

int month_index(const char* mon) {
  static const char* names[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  for (int i = 0; i < 12; ++i)
    if (std::strcmp(mon, names[i]) == 0)
      return i + 1;
  return 0;
}

std::optional<wall_time> make_date(int y, int mon, int d, int hh, int mm,
                                   int ss) {
  if (mon < 1 || mon > 12 || d < 1 || d > 31 || hh < 0 || hh > 23 || mm < 0
      || mm > 59 || ss < 0 || ss > 60 || y < 1900 || y > 9999)
    return std::nullopt;
  // system_clock counts nanoseconds up to 2262: later dates saturate.
  if (y > 2200) {
    y = 2200;
    mon = 1;
    d = 1;
    hh = mm = ss = 0;
  }
  auto days = days_from_civil(y, static_cast<unsigned>(mon),
                              static_cast<unsigned>(d));
  auto secs = days * 86400 + hh * 3600 + mm * 60 + ss;
  return wall_time{std::chrono::duration_cast<wall_time::duration>(
    std::chrono::seconds{secs})};
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

std::optional<nanoseconds> parse_retry_after_ms(const std::string& value) {
  auto v = trim(value);
  if (v.empty() || v.size() > 32)
    return std::nullopt;
  int dots = 0;
  for (char c : v) {
    if (c == '.')
      ++dots;
    else if (!std::isdigit(static_cast<unsigned char>(c)))
      return std::nullopt;
  }
  if (dots > 1 || v == ".")
    return std::nullopt;
  double ms = std::strtod(v.c_str(), nullptr);
  if (!std::isfinite(ms) || ms < 0)
    return std::nullopt;
  ms = std::min(ms, max_delay_seconds * 1e3);
  return nanoseconds{std::llround(ms * 1e6)};
}

std::optional<wall_time> parse_http_date(const std::string& value) {
  auto v = trim(value);
  char wd[16] = {0}, mon[4] = {0}, tz[4] = {0};
  int d = 0, y = 0, hh = 0, mm = 0, ss = 0, used = 0;
  auto full = [&] { return used == static_cast<int>(v.size()); };
  // IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT
  used = 0;
  if (std::sscanf(v.c_str(), "%3[A-Za-z], %2d %3[A-Za-z] %4d %2d:%2d:%2d %3[A-Z]%n",
                  wd, &d, mon, &y, &hh, &mm, &ss, tz, &used)
        == 8
      && full() && std::strcmp(tz, "GMT") == 0)
    return make_date(y, month_index(mon), d, hh, mm, ss);
  // RFC 850: Sunday, 06-Nov-94 08:49:37 GMT
  used = 0;
  if (std::sscanf(v.c_str(), "%15[A-Za-z], %2d-%3[A-Za-z]-%2d %2d:%2d:%2d %3[A-Z]%n",
                  wd, &d, mon, &y, &hh, &mm, &ss, tz, &used)
        == 8
      && full() && std::strcmp(tz, "GMT") == 0)
    return make_date(y < 70 ? 2000 + y : 1900 + y, month_index(mon), d, hh, mm,
                     ss);
  // asctime: Sun Nov  6 08:49:37 1994
  used = 0;
  if (std::sscanf(v.c_str(), "%3[A-Za-z] %3[A-Za-z] %2d %2d:%2d:%2d %4d%n", wd,
                  mon, &d, &hh, &mm, &ss, &y, &used)
        == 7
      && full())
    return make_date(y, month_index(mon), d, hh, mm, ss);
  return std::nullopt;
}

std::optional<nanoseconds> parse_retry_after(const std::string& value,
                                             wall_time wall_now) {
  auto v = trim(value);
  if (v.empty())
    return std::nullopt;
  if (std::all_of(v.begin(), v.end(),
                  [](unsigned char c) { return std::isdigit(c); })) {
    // delta-seconds; saturate absurd values instead of overflowing.
    auto limit = static_cast<long long>(max_delay_seconds);
    if (v.size() > 10)
      return std::chrono::seconds{limit};
    return std::chrono::seconds{std::min(std::stoll(v), limit)};
  }
  auto at = parse_http_date(v);
  if (!at)
    return std::nullopt;
  // Both are within 1900..2200, so the difference fits in nanoseconds.
  auto d = std::chrono::duration_cast<nanoseconds>(*at - wall_now);
  return std::clamp(d, nanoseconds{0},
                    nanoseconds{static_cast<int64_t>(max_delay_seconds) * 1'000'000'000});
}

std::optional<nanoseconds> server_retry_delay(const header_list& headers,
                                              wall_time wall_now) {
  if (auto v = find_header(headers, "retry-after-ms"))
    if (auto d = parse_retry_after_ms(*v))
      return d;
  if (auto v = find_header(headers, "retry-after"))
    if (auto d = parse_retry_after(*v, wall_now))
      return d;
  return std::nullopt;
}

// -- retry_state ---------------------------------------------------------------

retry_state::retry_state(const client_config& cfg, bool idempotent,
                         retry_time start)
  : policy_(cfg.retry),
    timeout_(seconds_to_ns(cfg.timeout)),
    deadline_(seconds_to_ns(cfg.deadline)),
    local_budget_(seconds_to_ns(cfg.local_retry_deadline)),
    max_redials_(cfg.max_redials),
    idempotent_(idempotent),
    start_(start),
    deadline_at_(start + seconds_to_ns(cfg.deadline)) {
}

std::string retry_state::deadline_text() const {
  auto s = "deadline of " + seconds_text(deadline_) + " s exceeded after "
           + std::to_string(attempts_)
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
    p.attempt = attempts_;
    return p;
  }
  p.send = true;
  p.budget = std::min(timeout_, std::chrono::duration_cast<nanoseconds>(left));
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
                                 std::string cause) {
  retry_step s;
  s.decision = d;
  s.cause = std::move(cause);
  e.attempts = attempts_;
  e.nothing_sent = !any_sent_;
  s.error = std::move(e);
  return s;
}

retry_step retry_state::on_result(const exchange_result& r, retry_time now,
                                  wall_time wall_now, call_rng& rng) {
  if (r.request_sent || r.ok() || r.response.status != 0)
    any_sent_ = true;
  if (r.ok()) {
    auto status = r.response.status;
    retry_step s;
    s.answer_with_response = true;
    if (!idempotent_ || !policy_.retryable_status(status)) {
      s.decision = retry_decision::answer;
      return s;
    }
    s.cause = "status " + std::to_string(status);
    last_failure_ = s.cause;
    if (attempts_ >= policy_.max_attempts) {
      s.decision = retry_decision::give_up_attempts;
      return s;
    }
    auto delay = server_retry_delay(r.response.headers, wall_now);
    if (!delay)
      delay = backoff_delay(policy_, attempts_ - 1, rng);
    if (now + *delay > deadline_at_) {
      // The server asks for more time than the call has: its answer stands.
      s.decision = retry_decision::give_up_deadline;
      return s;
    }
    s.decision = retry_decision::retry_after;
    s.delay = *delay;
    s.answer_with_response = false;
    next_ = next_send::new_attempt;
    return s;
  }
  auto kind = r.error;
  switch (kind) {
    case transport_error_kind::none: // handled above
    case transport_error_kind::not_sent:
      if (redials_ < max_redials_) {
        ++redials_;
        retry_step s;
        s.decision = retry_decision::redial;
        s.cause = to_string(kind);
        next_ = next_send::redial;
        return s;
      }
      // Out of redials: a broken exchange like any other (as in jev-client).
      return transport_failure(r, transport_error_kind::interrupted, now, rng);
    case transport_error_kind::local_resource: {
      if (!first_local_failure_)
        first_local_failure_ = now;
      auto delay = local_retry_backoff.delay(0, rng);
      auto local_end = *first_local_failure_ + local_budget_;
      if (now + delay <= local_end && now + delay <= deadline_at_) {
        retry_step s;
        s.decision = retry_decision::retry_local;
        s.delay = delay;
        s.cause = to_string(kind);
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
    case transport_error_kind::tls: {
      call_error e;
      e.kind = error_kind::service_unavailable;
      e.cause = kind;
      e.detail = "tls: " + (r.detail.empty() ? "handshake failed" : r.detail);
      e.status = r.response.status;
      return end_with(retry_decision::not_retryable, std::move(e), "tls");
    }
    case transport_error_kind::too_large: {
      call_error e;
      e.kind = error_kind::response_error;
      e.cause = kind;
      e.status = r.response.status;
      e.detail = r.detail.empty() ? "response body over the size cap"
                                  : r.detail;
      return end_with(retry_decision::not_retryable, std::move(e),
                      "too_large");
    }
    case transport_error_kind::config: {
      call_error e;
      e.kind = error_kind::config_error;
      e.cause = kind;
      e.detail = r.detail.empty() ? "transport configuration error" : r.detail;
      return end_with(retry_decision::not_retryable, std::move(e), "config");
    }
    case transport_error_kind::pool_overflow: {
      // Nothing left, but the local queue for the endpoint is full: a retry
      // (or a redial) would only queue behind the same backlog. Final.
      call_error e;
      e.kind = error_kind::service_unavailable;
      e.cause = kind;
      e.detail = r.detail.empty() ? "connection pool queue full" : r.detail;
      return end_with(retry_decision::not_retryable, std::move(e),
                      "pool_overflow");
    }
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
    return end_with(retry_decision::give_up_deadline, std::move(e), cause);
  }
  if (!idempotent_) {
    e.detail = last_failure_;
    if (r.request_sent)
      e.detail += "; the request may have been processed (not retried: the "
                  "request is not idempotent)";
    else
      e.detail += " (not retried: the request is not idempotent)";
    return end_with(retry_decision::not_retryable, std::move(e), cause);
  }
  if (attempts_ >= policy_.max_attempts) {
    e.detail = last_failure_ + " (gave up after "
               + std::to_string(attempts_)
               + (attempts_ == 1 ? " attempt)" : " attempts)");
    return end_with(retry_decision::give_up_attempts, std::move(e), cause);
  }
  auto delay = backoff_delay(policy_, attempts_ - 1, rng);
  if (now + delay > deadline_at_) {
    e.kind = error_kind::deadline_exceeded;
    e.detail = deadline_text() + "; the next backoff of " + ms_text(delay)
               + " ms would pass it";
    return end_with(retry_decision::give_up_deadline, std::move(e), cause);
  }
  retry_step s;
  s.decision = retry_decision::retry_after;
  s.delay = delay;
  s.cause = std::move(cause);
  next_ = next_send::new_attempt;
  return s;
}

} // namespace outbound
