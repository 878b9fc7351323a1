// Pure tests of the retry loop's decisions (actors/call/retry_state.hpp):
// explicit time, explicit random generator, exact values.

#include "actors/call/retry_state.hpp"

#include <gtest/gtest.h>

#include <chrono>

using namespace outbound;
using namespace std::chrono_literals;
using std::chrono::nanoseconds;

namespace {

client_config base_cfg() {
  client_config cfg;
  cfg.base_url = "http://127.0.0.1:8080";
  cfg.timeout = 5.0;
  cfg.deadline = 30.0;
  cfg.retry.max_attempts = 3;
  cfg.retry.base_backoff = 0.1;
  cfg.retry.max_backoff = 10.0;
  return cfg;
}

const retry_time t0 = retry_time{} + 1h;

exchange_result failure(transport_error_kind k, bool sent) {
  exchange_result r;
  r.error = k;
  r.request_sent = sent;
  r.detail = "scripted";
  return r;
}

exchange_result response(int status, header_list hs = {}) {
  exchange_result r;
  r.request_sent = true;
  r.response.status = status;
  r.response.headers = std::move(hs);
  return r;
}

wall_time wall(const char* date) {
  return *parse_http_date(date);
}

} // namespace

// -- backoff
// -------------------------------------------------------------------

TEST(Backoff, StaysWithinExponentialPlusJitterBoundsForEveryRetry) {
  retry_policy p;
  p.base_backoff = 0.1;
  p.max_backoff = 10.0;
  call_rng rng{7};
  for (int n = 0; n < 10; ++n) {
    double lo = std::min(0.1 * (1 << n), 10.0);
    auto lo_ns = seconds_to_ns(lo);
    auto hi_ns = seconds_to_ns(lo + 0.1);
    nanoseconds min_seen = nanoseconds::max(), max_seen{0};
    for (int i = 0; i < 2000; ++i) {
      auto d = backoff_delay(p, n, rng);
      ASSERT_GE(d, lo_ns) << "retry " << n;
      ASSERT_LT(d, hi_ns) << "retry " << n;
      min_seen = std::min(min_seen, d);
      max_seen = std::max(max_seen, d);
    }
    // The jitter really spans [0, base): both ends are reached closely.
    EXPECT_LT(min_seen - lo_ns, 1ms) << "retry " << n;
    EXPECT_GT(max_seen, hi_ns - 1ms) << "retry " << n;
  }
}

TEST(Backoff, ExponentialPartIsCappedAtMaxBackoff) {
  retry_policy p;
  p.base_backoff = 0.5;
  p.max_backoff = 2.0;
  call_rng rng{1};
  for (int i = 0; i < 500; ++i) {
    auto d = backoff_delay(p, 40, rng);
    ASSERT_GE(d, 2s);
    ASSERT_LT(d, 2500ms);
  }
}

TEST(Backoff, ZeroBaseMeansRetryImmediately) {
  retry_policy p;
  p.base_backoff = 0;
  p.max_backoff = 10;
  call_rng rng{1};
  for (int n = 0; n < 5; ++n)
    EXPECT_EQ(backoff_delay(p, n, rng), 0ns);
  p.base_backoff = 1;
  p.max_backoff = 0;
  for (int i = 0; i < 100; ++i) {
    auto d = backoff_delay(p, 3, rng);
    ASSERT_GE(d, 0ns);
    ASSERT_LT(d, 1s);
  }
}

TEST(Idempotency, OnlyGetHeadOptionsByDefault) {
  EXPECT_TRUE(method_is_idempotent("GET"));
  EXPECT_TRUE(method_is_idempotent("HEAD"));
  EXPECT_TRUE(method_is_idempotent("OPTIONS"));
  EXPECT_FALSE(method_is_idempotent("POST"));
  EXPECT_FALSE(method_is_idempotent("PUT"));
  EXPECT_FALSE(method_is_idempotent("DELETE"));
  EXPECT_FALSE(method_is_idempotent("PATCH"));
}

// -- retry-after parsing
// ---------------------------------------------------------

TEST(RetryAfter, MillisecondHeaderAcceptsFractionsExactly) {
  EXPECT_EQ(parse_retry_after_ms("250"), nanoseconds{250ms});
  EXPECT_EQ(parse_retry_after_ms("12.5"), nanoseconds{12'500'000});
  EXPECT_EQ(parse_retry_after_ms(" 7 "), nanoseconds{7ms});
  EXPECT_EQ(parse_retry_after_ms("0"), nanoseconds{0});
  EXPECT_EQ(parse_retry_after_ms("0.001"), nanoseconds{1000});
  for (auto bad : {"", "-1", "abc", "1e3", "1.2.3", ".", "inf", "nan", "0x10"})
    EXPECT_FALSE(parse_retry_after_ms(bad)) << bad;
}

TEST(RetryAfter, DeltaSecondsAreWholeSeconds) {
  auto now = wall("Sun, 06 Nov 1994 08:49:37 GMT");
  EXPECT_EQ(parse_retry_after("3", now), nanoseconds{3s});
  EXPECT_EQ(parse_retry_after("0", now), nanoseconds{0});
  EXPECT_EQ(parse_retry_after(" 120 ", now), nanoseconds{120s});
  EXPECT_FALSE(parse_retry_after("-3", now));
  EXPECT_FALSE(parse_retry_after("1.5", now));
  EXPECT_FALSE(parse_retry_after("soon", now));
}

TEST(RetryAfter, HttpDateIsRelativeToTheWallClockAndClampedAtZero) {
  auto now = wall("Sun, 06 Nov 1994 08:49:37 GMT");
  EXPECT_EQ(parse_retry_after("Sun, 06 Nov 1994 08:49:40 GMT", now),
            nanoseconds{3s});
  EXPECT_EQ(parse_retry_after("Sunday, 06-Nov-94 08:50:37 GMT", now),
            nanoseconds{60s});
  EXPECT_EQ(parse_retry_after("Sun Nov  6 08:49:38 1994", now),
            nanoseconds{1s});
  EXPECT_EQ(parse_retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now),
            nanoseconds{0});
  EXPECT_FALSE(parse_retry_after("Sun, 06 Nov 1994 08:49:40 PST", now));
  EXPECT_FALSE(parse_retry_after("Sun, 06 Foo 1994 08:49:40 GMT", now));
}

TEST(RetryAfter, HttpDateParsesToTheRightInstant) {
  using std::chrono::duration_cast;
  using std::chrono::seconds;
  auto epoch = parse_http_date("Thu, 01 Jan 1970 00:00:00 GMT");
  ASSERT_TRUE(epoch);
  EXPECT_EQ(duration_cast<seconds>(epoch->time_since_epoch()).count(), 0);
  auto d = parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT");
  ASSERT_TRUE(d);
  EXPECT_EQ(duration_cast<seconds>(d->time_since_epoch()).count(), 784111777);
  auto leap = parse_http_date("Tue, 29 Feb 2028 12:00:00 GMT");
  ASSERT_TRUE(leap);
  EXPECT_EQ(duration_cast<seconds>(leap->time_since_epoch()).count(),
            1835438400);
}

TEST(RetryAfter, AbsurdValuesSaturateInsteadOfOverflowing) {
  auto now = wall("Sun, 06 Nov 1994 08:49:37 GMT");
  nanoseconds cap = std::chrono::seconds{1'000'000'000};
  EXPECT_EQ(parse_retry_after("99999999999999999999999", now), cap);
  EXPECT_EQ(parse_retry_after_ms("99999999999999999999999"), cap);
  auto far = parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT", now);
  ASSERT_TRUE(far);
  EXPECT_GT(*far, nanoseconds{0});
  EXPECT_LE(*far, cap);
  retry_policy p;
  p.base_backoff = 1;
  p.max_backoff = 1e300;
  call_rng rng{1};
  EXPECT_EQ(backoff_delay(p, 5000, rng), cap);
  EXPECT_EQ(seconds_to_ns(1e300), cap);
  EXPECT_EQ(seconds_to_ns(-1), nanoseconds{0});
}

// delay-seconds is 1*DIGIT: leading zeros are the same number, not a
// long one (eleven digits worth 5 s once read as the 31-year cap).
TEST(RetryAfter, LeadingZerosAreTheSameDelay) {
  auto now = wall("Sun, 06 Nov 1994 08:49:37 GMT");
  EXPECT_EQ(parse_retry_after("00000000005", now), nanoseconds{5s});
  EXPECT_EQ(parse_retry_after("0000000000000000000000000012", now),
            nanoseconds{12s});
  EXPECT_EQ(parse_retry_after("0000000000000", now), nanoseconds{0});
  EXPECT_EQ(parse_retry_after("0", now), nanoseconds{0});
  EXPECT_EQ(parse_retry_after("000099999999999", now),
            nanoseconds{std::chrono::seconds{1'000'000'000}});
}

TEST(RetryAfter, MillisecondHeaderWinsAndAnInvalidOneFallsBack) {
  auto now = wall("Sun, 06 Nov 1994 08:49:37 GMT");
  EXPECT_EQ(
    server_retry_delay({{"Retry-After", "2"}, {"retry-after-ms", "5"}}, now),
    nanoseconds{5ms});
  EXPECT_EQ(
    server_retry_delay({{"retry-after-ms", "x"}, {"Retry-After", "2"}}, now),
    nanoseconds{2s});
  EXPECT_FALSE(server_retry_delay({{"Content-Type", "a"}}, now));
}

// -- decisions
// -------------------------------------------------------------------

TEST(RetryState, EachAttemptRunsUnderTheSmallerOfTimeoutAndDeadlineLeft) {
  auto cfg = base_cfg();
  cfg.timeout = 5;
  cfg.deadline = 12;
  retry_state st{cfg, true, t0};
  auto p = st.begin_attempt(t0);
  EXPECT_TRUE(p.send);
  EXPECT_EQ(p.budget, 5s);
  EXPECT_EQ(p.attempt, 1);
  EXPECT_EQ(p.retry_count, 0);
  EXPECT_TRUE(p.counted);
  EXPECT_FALSE(p.fresh_connection);
  call_rng rng{1};
  st.on_attempt_timeout(t0 + 5s, rng);
  auto p2 = st.begin_attempt(t0 + 10s);
  EXPECT_EQ(p2.budget, 2s);
  EXPECT_EQ(p2.attempt, 2);
  EXPECT_EQ(p2.retry_count, 1);
}

TEST(RetryState, NoDeadlineLeftEndsTheCallWithDeadlineExceeded) {
  auto cfg = base_cfg();
  cfg.deadline = 12;
  retry_state st{cfg, true, t0};
  auto p = st.begin_attempt(t0 + 12s);
  EXPECT_FALSE(p.send);
  EXPECT_EQ(p.error.kind, error_kind::deadline_exceeded);
  EXPECT_TRUE(p.error.nothing_sent);
}

TEST(RetryState, TransportFailuresAreRetriedOnlyWhenIdempotent) {
  struct row {
    transport_error_kind kind;
    bool sent;
  };
  for (auto [kind, sent] : {row{transport_error_kind::connect, false},
                            row{transport_error_kind::interrupted, true},
                            row{transport_error_kind::timeout, true}}) {
    call_rng rng{3};
    retry_state get{base_cfg(), true, t0};
    get.begin_attempt(t0);
    auto s = get.on_result(failure(kind, sent), t0 + 1s, {}, rng);
    EXPECT_EQ(s.decision, retry_decision::retry_after) << to_string(kind);
    EXPECT_GE(s.delay, 100ms);
    EXPECT_LT(s.delay, 200ms);
    EXPECT_EQ(s.cause, to_string(kind));

    retry_state post{base_cfg(), false, t0};
    post.begin_attempt(t0);
    auto f = post.on_result(failure(kind, sent), t0 + 1s, {}, rng);
    EXPECT_EQ(f.decision, retry_decision::not_retryable) << to_string(kind);
    EXPECT_EQ(f.error.kind, error_kind::service_unavailable);
    EXPECT_EQ(f.error.cause, kind);
    EXPECT_EQ(f.error.attempts, 1);
    EXPECT_EQ(f.error.nothing_sent, !sent);
    EXPECT_EQ(
      f.error.detail.find("may have been processed") != std::string::npos, sent)
      << f.error.detail;
  }
}

TEST(RetryState, TlsTooLargeAndConfigAreNeverRetried) {
  call_rng rng{3};
  for (bool idem : {true, false}) {
    retry_state a{base_cfg(), idem, t0};
    a.begin_attempt(t0);
    auto s
      = a.on_result(failure(transport_error_kind::tls, false), t0, {}, rng);
    EXPECT_EQ(s.decision, retry_decision::not_retryable);
    EXPECT_EQ(s.error.kind, error_kind::service_unavailable);
    EXPECT_EQ(s.error.cause, transport_error_kind::tls);
    EXPECT_TRUE(s.error.nothing_sent);

    retry_state b{base_cfg(), idem, t0};
    b.begin_attempt(t0);
    auto big = failure(transport_error_kind::too_large, true);
    big.response.status = 200;
    s = b.on_result(big, t0, {}, rng);
    EXPECT_EQ(s.decision, retry_decision::not_retryable);
    EXPECT_EQ(s.error.kind, error_kind::response_error);
    EXPECT_EQ(s.error.status, 200);
    EXPECT_FALSE(s.error.nothing_sent);

    retry_state c{base_cfg(), idem, t0};
    c.begin_attempt(t0);
    s = c.on_result(failure(transport_error_kind::config, false), t0, {}, rng);
    EXPECT_EQ(s.decision, retry_decision::not_retryable);
    EXPECT_EQ(s.error.kind, error_kind::config_error);
  }
}

TEST(RetryState, StatusesAreDefinitiveUnlessListedAndIdempotent) {
  call_rng rng{3};
  auto cfg = base_cfg();
  retry_state plain{cfg, true, t0};
  plain.begin_attempt(t0);
  auto s = plain.on_result(response(503), t0, {}, rng);
  EXPECT_EQ(s.decision, retry_decision::answer);
  EXPECT_TRUE(s.answer_with_response);

  cfg.retry.retry_statuses = {429, 503};
  retry_state listed{cfg, true, t0};
  listed.begin_attempt(t0);
  s = listed.on_result(response(503), t0, {}, rng);
  EXPECT_EQ(s.decision, retry_decision::retry_after);
  EXPECT_EQ(s.cause, "status 503");
  EXPECT_GE(s.delay, 100ms);
  EXPECT_LT(s.delay, 200ms);

  retry_state post{cfg, false, t0};
  post.begin_attempt(t0);
  s = post.on_result(response(503), t0, {}, rng);
  EXPECT_EQ(s.decision, retry_decision::answer);

  retry_state other{cfg, true, t0};
  other.begin_attempt(t0);
  s = other.on_result(response(500), t0, {}, rng);
  EXPECT_EQ(s.decision, retry_decision::answer);
}

// Calls that share their client's setup behave as with their own copy of
// the config; a call that retries 409 (an idempotency key) adds it to its
// own statuses only, and a moved state keeps its setup.
TEST(RetryState, CallsSharingOneSetupKeepTheirOwnConflictRetries) {
  call_rng rng{3};
  auto cfg = base_cfg();
  cfg.retry.retry_statuses = {503};
  const retry_setup shared{cfg};
  EXPECT_EQ(shared.timeout, 5s);
  EXPECT_EQ(shared.deadline, 30s);
  retry_state keyed{shared, true, t0};
  keyed.retry_conflicts();
  retry_state plain{shared, true, t0};
  EXPECT_EQ(keyed.retry_statuses(), (std::vector<int>{503, 409}));
  EXPECT_EQ(plain.retry_statuses(), (std::vector<int>{503}));
  EXPECT_EQ(shared.policy.retry_statuses, (std::vector<int>{503}));
  EXPECT_EQ(plain.deadline_at(), t0 + 30s);
  auto moved = std::move(keyed);
  moved.begin_attempt(t0);
  auto s = moved.on_result(response(409), t0, {}, rng);
  EXPECT_EQ(s.decision, retry_decision::retry_after);
  plain.begin_attempt(t0);
  s = plain.on_result(response(409), t0, {}, rng);
  EXPECT_EQ(s.decision, retry_decision::answer);
  s = plain.on_result(response(503), t0, {}, rng);
  EXPECT_EQ(s.decision, retry_decision::retry_after);
  // A budget comes from the shared timeout.
  retry_state next{shared, true, t0};
  EXPECT_EQ(next.begin_attempt(t0).budget, 5s);
  // A client's two setups: the keyed one retries 409, the plain one not.
  const retry_setups both{cfg};
  EXPECT_EQ(both.plain.policy.retry_statuses, (std::vector<int>{503}));
  EXPECT_EQ(both.keyed.policy.retry_statuses, (std::vector<int>{503, 409}));
  EXPECT_EQ(both.keyed.deadline, 30s);
  EXPECT_EQ(&both.for_call(true), &both.keyed);
  EXPECT_EQ(&both.for_call(false), &both.plain);
}

TEST(RetryState, RetryAfterHeadersSetTheDelayToTheNanosecond) {
  call_rng rng{3};
  auto cfg = base_cfg();
  cfg.retry.retry_statuses = {429};
  cfg.retry.max_attempts = 5;
  auto now_wall = wall("Sun, 06 Nov 1994 08:49:37 GMT");
  retry_state st{cfg, true, t0};
  st.begin_attempt(t0);
  auto s = st.on_result(response(429, {{"retry-after-ms", "1234.5"}}), t0,
                        now_wall, rng);
  EXPECT_EQ(s.delay, nanoseconds{1'234'500'000});
  st.begin_attempt(t0 + s.delay);
  s = st.on_result(response(429, {{"Retry-After", "2"}}), t0 + 2s, now_wall,
                   rng);
  EXPECT_EQ(s.delay, nanoseconds{2s});
  st.begin_attempt(t0 + 4s);
  s = st.on_result(
    response(429, {{"Retry-After", "Sun, 06 Nov 1994 08:49:44 GMT"}}), t0 + 4s,
    now_wall, rng);
  EXPECT_EQ(s.decision, retry_decision::retry_after);
  EXPECT_EQ(s.delay, nanoseconds{7s});
}

TEST(RetryState, RetryAfterPastTheDeadlineGivesUpAtOnceWithTheStatus) {
  call_rng rng{3};
  auto cfg = base_cfg();
  cfg.retry.retry_statuses = {503};
  cfg.deadline = 10;
  retry_state st{cfg, true, t0};
  st.begin_attempt(t0);
  auto s
    = st.on_result(response(503, {{"Retry-After", "11"}}), t0 + 1ms, {}, rng);
  EXPECT_EQ(s.decision, retry_decision::give_up_deadline);
  EXPECT_TRUE(s.answer_with_response);
  // A retry that would begin exactly at the deadline has no time to run
  // (begin_attempt sends nothing with 0 left): it gives up at once with
  // the status, instead of waiting out the deadline to lose it.
  retry_state edge{cfg, true, t0};
  edge.begin_attempt(t0);
  s = edge.on_result(response(503, {{"retry-after-ms", "9000"}}), t0 + 1s, {},
                     rng);
  EXPECT_EQ(s.decision, retry_decision::give_up_deadline);
  EXPECT_TRUE(s.answer_with_response);
  // A nanosecond before it is still allowed.
  retry_state inside{cfg, true, t0};
  inside.begin_attempt(t0);
  s = inside.on_result(response(503, {{"retry-after-ms", "8999.999999"}}),
                       t0 + 1s, {}, rng);
  EXPECT_EQ(s.decision, retry_decision::retry_after);
  EXPECT_EQ(s.delay, 9s - 1ns);
  auto plan = inside.begin_attempt(t0 + 1s + s.delay);
  EXPECT_TRUE(plan.send);
  EXPECT_EQ(plan.budget, 1ns);
}

TEST(RetryState, RetryableStatusWithAttemptsSpentIsAnswered) {
  call_rng rng{3};
  auto cfg = base_cfg();
  cfg.retry.retry_statuses = {503};
  cfg.retry.max_attempts = 2;
  retry_state st{cfg, true, t0};
  st.begin_attempt(t0);
  EXPECT_EQ(st.on_result(response(503), t0, {}, rng).decision,
            retry_decision::retry_after);
  st.begin_attempt(t0 + 1s);
  auto s = st.on_result(response(503), t0 + 1s, {}, rng);
  EXPECT_EQ(s.decision, retry_decision::give_up_attempts);
  EXPECT_TRUE(s.answer_with_response);
  EXPECT_EQ(st.attempts(), 2);
}

TEST(RetryState, BackoffThatWouldPassTheDeadlineGivesUpWithDeadlineExceeded) {
  call_rng rng{3};
  auto cfg = base_cfg();
  cfg.retry.base_backoff = 5;
  cfg.retry.max_backoff = 5;
  cfg.deadline = 6;
  retry_state st{cfg, true, t0};
  st.begin_attempt(t0);
  auto s = st.on_result(failure(transport_error_kind::interrupted, true),
                        t0 + 1500ms, {}, rng);
  EXPECT_EQ(s.decision, retry_decision::give_up_deadline);
  EXPECT_EQ(s.error.kind, error_kind::deadline_exceeded);
  EXPECT_EQ(s.error.cause, transport_error_kind::interrupted);
  EXPECT_EQ(s.error.attempts, 1);
  EXPECT_FALSE(s.error.nothing_sent);
}

TEST(RetryState, AnAttemptCutByTheDeadlineEndsWithDeadlineExceeded) {
  call_rng rng{3};
  auto cfg = base_cfg();
  cfg.retry.base_backoff = 0;
  cfg.retry.max_attempts = 10;
  cfg.timeout = 10;
  cfg.deadline = 25;
  retry_state st{cfg, true, t0};
  retry_time now = t0;
  for (int i = 0; i < 2; ++i) {
    auto p = st.begin_attempt(now);
    ASSERT_EQ(p.budget, 10s);
    now += p.budget;
    ASSERT_EQ(st.on_attempt_timeout(now, rng).decision,
              retry_decision::retry_after);
  }
  auto p = st.begin_attempt(now);
  EXPECT_EQ(p.budget, 5s);
  now += p.budget;
  auto s = st.on_attempt_timeout(now, rng);
  EXPECT_EQ(s.decision, retry_decision::give_up_deadline);
  EXPECT_EQ(s.error.kind, error_kind::deadline_exceeded);
  EXPECT_EQ(s.error.attempts, 3);
}

TEST(RetryState, TimeoutsThatSpendTheAttemptsAreServiceUnavailable) {
  call_rng rng{3};
  auto cfg = base_cfg();
  cfg.timeout = 1;
  cfg.retry.base_backoff = 0;
  retry_state st{cfg, true, t0};
  retry_time now = t0;
  retry_step s;
  for (int i = 0; i < 3; ++i) {
    now += st.begin_attempt(now).budget;
    s = st.on_attempt_timeout(now, rng);
  }
  EXPECT_EQ(s.decision, retry_decision::give_up_attempts);
  EXPECT_EQ(s.error.kind, error_kind::service_unavailable);
  EXPECT_EQ(s.error.cause, transport_error_kind::timeout);
  EXPECT_EQ(s.error.attempts, 3);
  EXPECT_EQ(now, t0 + 3s);
}

TEST(RetryState, RedialsAreFreeUpToTheLimitThenABrokenExchange) {
  call_rng rng{3};
  auto cfg = base_cfg();
  retry_state st{cfg, true, t0};
  st.begin_attempt(t0);
  for (int i = 0; i < 2; ++i) {
    auto s = st.on_result(failure(transport_error_kind::not_sent, false), t0,
                          {}, rng);
    ASSERT_EQ(s.decision, retry_decision::redial);
    EXPECT_EQ(s.delay, 0ns);
    auto p = st.begin_attempt(t0);
    EXPECT_TRUE(p.fresh_connection);
    EXPECT_FALSE(p.counted);
    EXPECT_EQ(p.attempt, 1);
    EXPECT_EQ(p.retry_count, 0);
  }
  EXPECT_EQ(st.redials(), 2);
  auto s
    = st.on_result(failure(transport_error_kind::not_sent, false), t0, {}, rng);
  EXPECT_EQ(s.decision, retry_decision::retry_after);
  EXPECT_EQ(s.cause, "interrupted");
  auto p = st.begin_attempt(t0 + s.delay);
  EXPECT_TRUE(p.counted);
  EXPECT_FALSE(p.fresh_connection);
  EXPECT_EQ(p.attempt, 2);
  EXPECT_EQ(p.retry_count, 1);
  EXPECT_TRUE(st.nothing_sent());

  retry_state post{cfg, false, t0};
  post.begin_attempt(t0);
  for (int i = 0; i < 2; ++i) {
    post.on_result(failure(transport_error_kind::not_sent, false), t0, {}, rng);
    post.begin_attempt(t0);
  }
  auto f = post.on_result(failure(transport_error_kind::not_sent, false), t0,
                          {}, rng);
  EXPECT_EQ(f.decision, retry_decision::not_retryable);
  EXPECT_TRUE(f.error.nothing_sent);
  EXPECT_EQ(f.error.detail.find("may have been processed"), std::string::npos);
}

TEST(RetryState, LocalResourceIsRetriedOutOfBandUntilItsBudgetThenConnect) {
  call_rng rng{3};
  auto cfg = base_cfg();
  cfg.local_retry_deadline = 1.0;
  retry_state st{cfg, false, t0}; // even a POST
  st.begin_attempt(t0);
  retry_time now = t0;
  int local = 0;
  retry_step s;
  for (;;) {
    s = st.on_result(failure(transport_error_kind::local_resource, false), now,
                     {}, rng);
    if (s.decision != retry_decision::retry_local)
      break;
    ++local;
    EXPECT_GE(s.delay, 200ms);
    EXPECT_LT(s.delay, 400ms);
    now += s.delay;
    EXPECT_LE(now, t0 + 1s);
    auto p = st.begin_attempt(now);
    EXPECT_FALSE(p.counted);
    EXPECT_FALSE(p.fresh_connection);
    EXPECT_EQ(p.attempt, 1);
  }
  EXPECT_GE(local, 2);
  EXPECT_LE(local, 5);
  EXPECT_EQ(s.decision, retry_decision::not_retryable);
  EXPECT_EQ(s.error.kind, error_kind::service_unavailable);
  EXPECT_EQ(s.error.cause, transport_error_kind::connect);
  EXPECT_EQ(s.error.attempts, 1);
  EXPECT_TRUE(s.error.nothing_sent);
}

TEST(RetryState, LocalResourceNeverWaitsPastTheOverallDeadline) {
  call_rng rng{3};
  auto cfg = base_cfg();
  cfg.deadline = 0.3;
  cfg.retry.base_backoff = 0;
  retry_state st{cfg, true, t0};
  st.begin_attempt(t0);
  auto s = st.on_result(failure(transport_error_kind::local_resource, false),
                        t0 + 150ms, {}, rng);
  // 0.2 s + jitter would pass 0.3 s: a connect failure, retried by policy.
  EXPECT_EQ(s.decision, retry_decision::retry_after);
  EXPECT_EQ(s.cause, "connect");
  EXPECT_EQ(s.delay, 0ns);
}

TEST(RetryState, NothingSentOnlyWhileNoByteLeftAndNoResponseWasSeen) {
  call_rng rng{3};
  auto cfg = base_cfg();
  cfg.retry.base_backoff = 0;
  retry_state st{cfg, true, t0};
  retry_step s;
  for (int i = 0; i < 3; ++i) {
    st.begin_attempt(t0);
    s = st.on_result(failure(transport_error_kind::connect, false), t0, {},
                     rng);
  }
  EXPECT_EQ(s.decision, retry_decision::give_up_attempts);
  EXPECT_TRUE(s.error.nothing_sent);

  retry_state mixed{cfg, true, t0};
  mixed.begin_attempt(t0);
  mixed.on_result(failure(transport_error_kind::interrupted, true), t0, {},
                  rng);
  for (int i = 0; i < 2; ++i) {
    mixed.begin_attempt(t0);
    s = mixed.on_result(failure(transport_error_kind::connect, false), t0, {},
                        rng);
  }
  EXPECT_FALSE(s.error.nothing_sent);
}

TEST(RetryState, PoolOverflowIsAFinalServiceUnavailableWithNothingSent) {
  call_rng rng{3};
  for (bool idem : {true, false}) {
    retry_state st{base_cfg(), idem, t0};
    st.begin_attempt(t0);
    auto r = failure(transport_error_kind::pool_overflow, false);
    r.detail = "connection pool queue full (1 waiting, 2 connections)";
    auto s = st.on_result(r, t0, {}, rng);
    EXPECT_EQ(s.decision, retry_decision::not_retryable);
    EXPECT_EQ(s.error.kind, error_kind::service_unavailable);
    EXPECT_EQ(s.error.cause, transport_error_kind::pool_overflow);
    EXPECT_EQ(s.error.detail,
              "connection pool queue full (1 waiting, 2 connections)");
    EXPECT_TRUE(s.error.nothing_sent);
    EXPECT_EQ(s.error.attempts, 1);
  }
  EXPECT_STREQ(to_string(transport_error_kind::pool_overflow), "pool_overflow");
}
