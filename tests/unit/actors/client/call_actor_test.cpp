// The call actor and the service_client front door on CAF's deterministic
// test coordinator, behind a scripted fake transport
// (tests/support/fake_transport.hpp). Every time asserted here is exact
// virtual time.
// The blocking facade is tested at the end on a normal scheduler with the
// same fake (it answers at once, so nothing waits).

#include "actors/call/retry_state.hpp"
#include "actors/client/blocking_client.hpp"
#include "actors/client/service_client.hpp"
#include "config/config_error.hpp"
#include "protocol/json_parse.hpp"

#include "tests/support/fake_transport.hpp"
#include "tests/support/outcome_checks.hpp"
#include "tests/support/virtual_time_fixture.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <caf/actor_cast.hpp>
#include <caf/event_based_actor.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <set>

using namespace outbound;
using namespace outbound::testing;
using namespace std::chrono_literals;
using std::chrono::nanoseconds;

namespace {

constexpr const char* secret = "s3cr3t-token-value";

using ek = transport_error_kind;

struct seen_event {
  client_event ev;
  caf::actor_clock::time_point at;
};

struct call_result {
  std::optional<call_outcome> outcome;
  caf::actor_clock::time_point at;
  std::string error;
};

call_request get(std::string path) {
  call_request c;
  c.method = "GET";
  c.path = std::move(path);
  return c;
}

call_request post(std::string path, std::string body = R"({"qty":1})") {
  call_request c;
  c.method = "POST";
  c.path = std::move(path);
  c.body = std::move(body);
  c.has_body = true;
  return c;
}

std::string header(const http_request& r, const std::string& name) {
  auto v = find_header(r.headers, name);
  return v ? *v : std::string{"<absent>"};
}

wall_time fixed_wall() {
  return *parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT");
}

class CallActor : public virtual_time_fixture {
protected:
  CallActor() {
    cfg.base_url = "http://127.0.0.1:8080";
    cfg.token = secret;
    cfg.timeout = 5.0;
    cfg.deadline = 30.0;
    cfg.retry.max_attempts = 3;
    cfg.retry.base_backoff = 0.1;
    cfg.retry.max_backoff = 10.0;
  }

  ~CallActor() override {
    // A stalled fake holds response promises, and each promise holds the
    // fake itself: a fake whose client died without cancelling (a killed
    // client) would never be freed (LeakSanitizer).
    for (auto& t : transports_)
      caf::anon_send_exit(t, caf::exit_reason::kill);
    run();
  }

  service_client_actor make_client() {
    client_options opts;
    opts.transport = spawn_fake_transport(sys(), log);
    transports_.push_back(opts.transport);
    auto evs = events;
    auto obs
      = sys().spawn([evs](caf::event_based_actor* self) -> caf::behavior {
          return {
            [=](const client_event& e) {
              evs->push_back({e, self->clock().now()});
            },
          };
        });
    opts.observer = caf::actor_cast<observer_actor>(obs);
    opts.seed = 42;
    opts.wall_clock = [] {
      return fixed_wall();
    };
    return make_service_client(sys(), cfg, std::move(opts));
  }

  std::shared_ptr<call_result> start(const service_client_actor& client,
                                     call_request req) {
    auto res = std::make_shared<call_result>();
    sys().spawn([=](caf::event_based_actor* self) {
      self->request(client, caf::infinite, req)
        .then(
          [=](call_outcome& o) {
            res->outcome = std::move(o);
            res->at = self->clock().now();
          },
          [=](caf::error& e) { res->error = self->system().render(e); });
    });
    return res;
  }

  /// Runs one call to the end; `at` is when the outcome arrived.
  call_outcome run_call(call_request req) {
    auto client = make_client();
    last = start(client, std::move(req));
    EXPECT_TRUE(run_to_quiescence());
    if (!last->outcome) {
      ADD_FAILURE() << "no outcome; error: " << last->error;
      return no_outcome("no outcome");
    }
    return *last->outcome;
  }

  nanoseconds arrival(size_t i) const {
    return log->requests.at(i).at - t0_;
  }

  nanoseconds finished() const {
    return last->at - t0_;
  }

  std::vector<event_kind> event_kinds() const {
    std::vector<event_kind> ks;
    for (auto& e : *events)
      ks.push_back(e.ev.kind);
    return ks;
  }

  client_config cfg;
  std::shared_ptr<fake_log> log = std::make_shared<fake_log>();
  std::shared_ptr<std::vector<seen_event>> events
    = std::make_shared<std::vector<seen_event>>();
  std::shared_ptr<call_result> last;
  std::vector<transport_actor> transports_;
};

} // namespace

// -- time budgets
// ------------------------------------------------------------------

TEST_F(CallActor, ThreeRetryable503sHonourRetryAfterMsToTheMillisecond) {
  cfg.retry.retry_statuses = {503};
  cfg.retry.max_attempts = 4;
  log->script = {
    fake_step::status(503, "", {{"retry-after-ms", "250"}}),
    fake_step::status(503, "", {{"retry-after-ms", "1500.5"}}),
    fake_step::status(503, "", {{"Retry-After", "2"}}),
    fake_step::status(200, R"({"ok":true})"),
  };
  auto o = run_call(get("/v1/item"));
  ASSERT_TRUE(o.ok()) << failure_of(o).message();
  EXPECT_EQ(o.attempts, 4);
  EXPECT_EQ(o.status, 200);
  EXPECT_EQ(boost::json::serialize(o.body), R"({"ok":true})");
  ASSERT_EQ(log->requests.size(), 4u);
  EXPECT_EQ(arrival(0), 0ns);
  EXPECT_EQ(arrival(1), 250ms);
  EXPECT_EQ(arrival(2), nanoseconds{1'750'500'000});
  EXPECT_EQ(arrival(3), nanoseconds{3'750'500'000});
  EXPECT_EQ(finished(), nanoseconds{3'750'500'000});
}

TEST_F(CallActor, RetryCountHeaderCountsRetriesAndTheRequestIdIsStable) {
  cfg.retry.retry_statuses = {503};
  cfg.retry.max_attempts = 4;
  cfg.retry.base_backoff = 0;
  log->script = {fake_step::status(503), fake_step::status(503),
                 fake_step::status(503), fake_step::status(200, "{}")};
  auto o = run_call(get("/v1/item"));
  ASSERT_TRUE(o.ok());
  ASSERT_EQ(log->requests.size(), 4u);
  EXPECT_EQ(header(log->requests[0].request, "x-retry-count"), "<absent>");
  EXPECT_EQ(header(log->requests[1].request, "x-retry-count"), "1");
  EXPECT_EQ(header(log->requests[2].request, "x-retry-count"), "2");
  EXPECT_EQ(header(log->requests[3].request, "x-retry-count"), "3");
  EXPECT_EQ(o.request_id.size(), 32u);
  for (auto& r : log->requests)
    EXPECT_EQ(header(r.request, "x-request-id"), o.request_id);
}

// A retry sends the same request again: method, target, body and every
// header in the same order (x-retry-count aside), also when the call gave
// its request id only as a header.
TEST_F(CallActor, EveryAttemptSendsTheSameRequest) {
  cfg.retry.retry_statuses = {503};
  cfg.retry.base_backoff = 0;
  cfg.default_headers = {{"X-Team", "billing"}};
  log->script = {fake_step::status(503), fake_step::status(200, "{}")};
  auto req = post("/v1/item?x=1");
  req.idempotent = true;
  req.params = {{"y", "2 3"}};
  req.headers = {{"X-Request-Id", "from-header"}, {"X-Tenant", "t1"}};
  auto o = run_call(req);
  ASSERT_TRUE(o.ok()) << failure_of(o).message();
  EXPECT_EQ(o.request_id, "from-header");
  ASSERT_EQ(log->requests.size(), 2u);
  auto first = log->requests[0].request;
  auto second = log->requests[1].request;
  EXPECT_EQ(header(second, "x-retry-count"), "1");
  erase_header(second.headers, "x-retry-count");
  EXPECT_EQ(first.method, second.method);
  EXPECT_EQ(first.target, second.target);
  EXPECT_EQ(first.body, second.body);
  EXPECT_EQ(first.headers, second.headers);
  EXPECT_EQ(header(first, "x-request-id"), "from-header");
  EXPECT_NE(first.exchange_id, second.exchange_id);
}

TEST_F(CallActor, GivenRequestIdIsSentAndReported) {
  log->script = {fake_step::status(500, R"({"detail":"boom"})")};
  auto req = get("/v1/item");
  req.request_id = "req-123";
  auto o = run_call(req);
  EXPECT_EQ(header(log->requests.at(0).request, "x-request-id"), "req-123");
  EXPECT_EQ(o.request_id, "req-123");
  EXPECT_EQ(failure_of(o).request_id, "req-123");
}

TEST_F(CallActor, Three503sWithoutRetryAfterBackOffPerPolicyThenServerError) {
  cfg.retry.retry_statuses = {503};
  log->script = {fake_step::status(503, R"({"detail":"busy"})")};
  auto o = run_call(get("/v1/item"));
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(failure_of(o).kind, error_kind::server_error);
  EXPECT_EQ(failure_of(o).status, 503);
  EXPECT_EQ(failure_of(o).detail, "busy");
  EXPECT_EQ(o.attempts, 3);
  ASSERT_EQ(log->requests.size(), 3u);
  auto gap1 = arrival(1) - arrival(0);
  auto gap2 = arrival(2) - arrival(1);
  EXPECT_GE(gap1, 100ms);
  EXPECT_LT(gap1, 200ms);
  EXPECT_GE(gap2, 200ms);
  EXPECT_LT(gap2, 300ms);
  EXPECT_EQ(finished(), arrival(2));
}

TEST_F(CallActor, RetryAfterHttpDateIsMeasuredAgainstTheWallClock) {
  cfg.retry.retry_statuses = {429};
  log->script = {fake_step::status(
                   429, "", {{"Retry-After", "Sun, 06 Nov 1994 08:49:39 GMT"}}),
                 fake_step::status(200, "{}")};
  auto o = run_call(get("/v1/item"));
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(arrival(1), 2s);
}

TEST_F(CallActor, RetryAfterPastTheDeadlineEndsAtOnceWithTheStatusError) {
  cfg.retry.retry_statuses = {503};
  log->script = {fake_step::status(503, "", {{"Retry-After", "60"}}),
                 fake_step::status(200, "{}")};
  auto o = run_call(get("/v1/item"));
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(failure_of(o).kind, error_kind::server_error);
  EXPECT_EQ(failure_of(o).status, 503);
  EXPECT_EQ(o.attempts, 1);
  EXPECT_EQ(log->requests.size(), 1u);
  EXPECT_EQ(finished(), 0ns);
}

TEST_F(CallActor, AStalledAttemptCostsExactlyThePerAttemptTimeout) {
  cfg.retry.base_backoff = 0;
  log->script = {fake_step::stall(), fake_step::status(200, "{}")};
  auto o = run_call(get("/v1/item"));
  ASSERT_TRUE(o.ok()) << failure_of(o).message();
  EXPECT_EQ(o.attempts, 2);
  ASSERT_EQ(log->requests.size(), 2u);
  EXPECT_EQ(log->requests[0].request.timeout_ns, 5'000'000'000);
  EXPECT_EQ(arrival(1), 5s);
  EXPECT_EQ(finished(), 5s);
}

TEST_F(CallActor, ATimedOutExchangeIsCancelledAtTheTransport) {
  cfg.retry.base_backoff = 0;
  log->script = {fake_step::stall(), fake_step::status(200, "{}")};
  run_call(get("/v1/item"));
  ASSERT_EQ(log->cancels.size(), 1u);
  EXPECT_EQ(log->cancels[0], log->requests.at(0).request.exchange_id);
  EXPECT_EQ(log->cancel_times[0] - t0_, 5s);
}

TEST_F(CallActor, StallsSpendExactlyTheOverallDeadline) {
  cfg.timeout = 10;
  cfg.deadline = 30;
  cfg.retry.max_attempts = 5;
  cfg.retry.base_backoff = 0;
  log->script = {fake_step::stall()};
  auto o = run_call(get("/v1/item"));
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(failure_of(o).kind, error_kind::deadline_exceeded);
  EXPECT_EQ(o.attempts, 3);
  EXPECT_FALSE(failure_of(o).nothing_sent);
  ASSERT_EQ(log->requests.size(), 3u);
  EXPECT_EQ(arrival(0), 0s);
  EXPECT_EQ(arrival(1), 10s);
  EXPECT_EQ(arrival(2), 20s);
  EXPECT_EQ(finished(), 30s);
  EXPECT_EQ(log->cancels.size(), 3u);
}

TEST_F(CallActor, TheLastAttemptIsCutToTheDeadlineLeft) {
  cfg.timeout = 10;
  cfg.deadline = 25;
  cfg.retry.max_attempts = 5;
  cfg.retry.base_backoff = 0;
  log->script = {fake_step::stall()};
  auto o = run_call(get("/v1/item"));
  EXPECT_EQ(failure_of(o).kind, error_kind::deadline_exceeded);
  ASSERT_EQ(log->requests.size(), 3u);
  EXPECT_EQ(log->requests[2].request.timeout_ns, 5'000'000'000);
  EXPECT_EQ(finished(), 25s);
}

TEST_F(CallActor,
       TimeoutsThatSpendTheAttemptsAreServiceUnavailableNotDeadline) {
  cfg.timeout = 1;
  cfg.retry.base_backoff = 0;
  log->script = {fake_step::stall()};
  auto o = run_call(get("/v1/item"));
  EXPECT_EQ(failure_of(o).kind, error_kind::service_unavailable);
  EXPECT_EQ(failure_of(o).cause, ek::timeout);
  EXPECT_EQ(o.attempts, 3);
  EXPECT_EQ(finished(), 3s);
}

TEST_F(CallActor, ALateAnswerAfterTheTimeoutIsDropped) {
  cfg.retry.base_backoff = 0;
  log->script = {fake_step::status(200, R"({"n":1})").delayed(6s),
                 fake_step::status(200, R"({"n":2})")};
  auto o = run_call(get("/v1/item"));
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(boost::json::serialize(o.body), R"({"n":2})");
  EXPECT_EQ(o.attempts, 2);
  EXPECT_EQ(finished(), 5s);
}

TEST_F(CallActor, ALateAnswerWhileTheNextAttemptIsInFlightIsIgnored) {
  cfg.retry.base_backoff = 0;
  // Attempt 1 answers at 6 s (after its 5 s budget), attempt 2 (sent at 5 s)
  // answers at 7 s: only attempt 2's answer counts.
  log->script = {fake_step::status(200, R"({"n":1})").delayed(6s),
                 fake_step::status(200, R"({"n":2})").delayed(2s)};
  auto o = run_call(get("/v1/item"));
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(boost::json::serialize(o.body), R"({"n":2})");
  EXPECT_EQ(o.attempts, 2);
  EXPECT_EQ(arrival(1), 5s);
  EXPECT_EQ(finished(), 7s);
  EXPECT_EQ(log->cancels.size(), 1u);
}

// The client keeps one watchdog timer for every send in flight, armed at
// the earliest deadline. A send whose deadline comes before the armed
// timer (here: an attempt cut to the overall deadline) must re-arm it.
TEST_F(CallActor, OneWatchdogTimesOutEachSendAtItsOwnDeadline) {
  cfg.timeout = 5;
  cfg.deadline = 7;
  cfg.retry.base_backoff = 0;
  log->script = {fake_step::stall()};
  auto client = make_client();
  auto a = start(client, get("/a"));
  run();
  advance_by(4s);
  auto b = start(client, get("/b"));
  EXPECT_TRUE(run_to_quiescence());
  ASSERT_TRUE(a->outcome && b->outcome);
  // a: attempt 1 times out at 5 s, attempt 2 (sent at once) is cut to the
  // 2 s left and times out at 7 s, before b's first deadline at 9 s.
  EXPECT_EQ(failure_of(*a->outcome).kind, error_kind::deadline_exceeded);
  EXPECT_EQ(a->at - t0_, 7s);
  ASSERT_GE(log->requests.size(), 3u);
  EXPECT_EQ(log->requests[2].request.timeout_ns, 2'000'000'000);
  // b: 5 s from 4 s, then cut to the 2 s left of its 7 s deadline.
  EXPECT_EQ(failure_of(*b->outcome).kind, error_kind::deadline_exceeded);
  EXPECT_EQ(b->at - t0_, 11s);
  EXPECT_EQ(log->cancels.size(), 4u);
}

// The watchdog's timer must not hold the client: an unused client goes away
// (and with it nothing keeps its actor_system from shutting down) even
// while the timer of a finished call is still pending.
TEST_F(CallActor, AClientNobodyHoldsIsReleasedWhileItsWatchdogIsArmed) {
  log->script = {fake_step::status(200, "{}")};
  caf::weak_actor_ptr weak;
  {
    auto client = make_client();
    weak = caf::actor_cast<caf::weak_actor_ptr>(client);
    last = start(client, get("/v1/item"));
    run();
  }
  run();
  ASSERT_TRUE(last->outcome);
  EXPECT_TRUE(last->outcome->ok());
  EXPECT_TRUE(sched().has_pending_timeout()); // the 5 s watchdog
  EXPECT_EQ(weak.lock(), nullptr);
}

// A client that is killed answers every call it runs at once, never leaving
// a caller to its own timeout.
TEST_F(CallActor, AKilledClientAnswersItsCallsAtOnce) {
  log->script = {fake_step::stall()};
  auto client = make_client();
  auto a = start(client, get("/a"));
  auto b = start(client, get("/b"));
  run();
  ASSERT_EQ(log->requests.size(), 2u);
  caf::anon_send_exit(client, caf::exit_reason::kill);
  run();
  for (auto& r : {a, b}) {
    ASSERT_TRUE(r->outcome) << r->error;
    EXPECT_EQ(failure_of(*r->outcome).kind, error_kind::service_unavailable);
    EXPECT_EQ(failure_of(*r->outcome).detail, "service client stopped");
    EXPECT_FALSE(failure_of(*r->outcome).nothing_sent);
    EXPECT_EQ(r->outcome->attempts, 1);
    EXPECT_EQ(r->at, t0_) << "at once, not at a timeout";
  }
}

// Killed between sends, the client knows what the retry state knows: a
// call waiting to retry after a local port shortage sent nothing.
TEST_F(CallActor, AKilledClientSaysNothingWasSentForACallThatSentNothing) {
  log->script = {fake_step::fail(ek::local_resource, false)};
  auto client = make_client();
  auto a = start(client, get("/a"));
  run();
  ASSERT_EQ(log->requests.size(), 1u);
  caf::anon_send_exit(client, caf::exit_reason::kill);
  run();
  ASSERT_TRUE(a->outcome) << a->error;
  EXPECT_EQ(failure_of(*a->outcome).detail, "service client stopped");
  EXPECT_TRUE(failure_of(*a->outcome).nothing_sent);
}

// -- redials and local retries
// --------------------------------------------------------

TEST_F(CallActor, ARedialCostsNoAttempt) {
  log->script
    = {fake_step::fail(ek::not_sent, false), fake_step::status(200, "{}")};
  auto o = run_call(get("/v1/item"));
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o.attempts, 1);
  ASSERT_EQ(log->requests.size(), 2u);
  EXPECT_FALSE(log->requests[0].request.fresh_connection);
  EXPECT_TRUE(log->requests[1].request.fresh_connection);
  EXPECT_EQ(arrival(1), 0ns); // no backoff
  EXPECT_EQ(header(log->requests[1].request, "x-retry-count"), "<absent>");
  EXPECT_NE(log->requests[0].request.exchange_id,
            log->requests[1].request.exchange_id);
  EXPECT_EQ(event_kinds(), (std::vector<event_kind>{
                             event_kind::sending, event_kind::redialing,
                             event_kind::sending, event_kind::answered}));
  EXPECT_EQ(events->at(1).ev.cause_kind, ek::not_sent);
}

TEST_F(CallActor, APostThatNeverLeftIsRedialedNotRetried) {
  log->script = {fake_step::fail(ek::not_sent, false),
                 fake_step::status(201, R"({"id":7})")};
  auto o = run_call(post("/v1/orders"));
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o.attempts, 1);
  EXPECT_EQ(log->requests.size(), 2u);
  EXPECT_EQ(log->requests[1].request.body, R"({"qty":1})");
}

TEST_F(CallActor, MoreThanTwoNotSentAreABrokenExchange) {
  cfg.retry.base_backoff = 0;
  log->script = {fake_step::fail(ek::not_sent, false)};
  auto o = run_call(get("/v1/item"));
  EXPECT_EQ(failure_of(o).kind, error_kind::service_unavailable);
  EXPECT_EQ(o.attempts, 3);
  EXPECT_TRUE(failure_of(o).nothing_sent);
  // 3 sends of attempt 1 (two redials), then attempts 2 and 3.
  EXPECT_EQ(log->requests.size(), 5u);
}

TEST_F(CallActor, LocalResourceIsRetriedOutOfBandWithoutConsumingAttempts) {
  log->script = {fake_step::fail(ek::local_resource, false),
                 fake_step::fail(ek::local_resource, false),
                 fake_step::status(201, "{}")};
  auto o = run_call(post("/v1/orders"));
  ASSERT_TRUE(o.ok()) << failure_of(o).message();
  EXPECT_EQ(o.attempts, 1);
  ASSERT_EQ(log->requests.size(), 3u);
  for (size_t i = 1; i < 3; ++i) {
    auto gap = arrival(i) - arrival(i - 1);
    EXPECT_GE(gap, 200ms);
    EXPECT_LT(gap, 400ms);
    EXPECT_EQ(header(log->requests[i].request, "x-retry-count"), "<absent>");
  }
  int local_retries = 0;
  for (auto& e : *events)
    if (e.ev.kind == event_kind::retrying && e.ev.cause == "local_resource"
        && e.ev.cause_kind == ek::local_resource)
      ++local_retries;
  EXPECT_EQ(local_retries, 2);
}

TEST_F(CallActor, LocalResourceBeyondItsBudgetIsAConnectFailure) {
  cfg.local_retry_deadline = 1.0;
  log->script = {fake_step::fail(ek::local_resource, false)};
  auto o = run_call(post("/v1/orders"));
  EXPECT_EQ(failure_of(o).kind, error_kind::service_unavailable);
  EXPECT_EQ(failure_of(o).cause, ek::connect);
  EXPECT_TRUE(failure_of(o).nothing_sent);
  EXPECT_EQ(o.attempts, 1);
  EXPECT_LE(finished(), 1s);
  EXPECT_GE(log->requests.size(), 3u);
}

// -- transport failures and idempotency
// ---------------------------------------------

TEST_F(CallActor, GetWithEveryAttemptInterruptedMakesThreeAttempts) {
  log->script = {fake_step::fail(ek::interrupted, true, "connection reset")};
  auto o = run_call(get("/v1/item"));
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(failure_of(o).kind, error_kind::service_unavailable);
  EXPECT_EQ(failure_of(o).cause, ek::interrupted);
  EXPECT_EQ(o.attempts, 3);
  EXPECT_EQ(failure_of(o).attempts, 3);
  EXPECT_FALSE(failure_of(o).nothing_sent);
  EXPECT_EQ(log->requests.size(), 3u);
  EXPECT_NE(failure_of(o).detail.find("connection reset"), std::string::npos);
}

TEST_F(CallActor, PostInterruptedIsNotRetriedAndMayHaveBeenProcessed) {
  log->script = {fake_step::fail(ek::interrupted, true)};
  auto o = run_call(post("/v1/orders"));
  EXPECT_EQ(failure_of(o).kind, error_kind::service_unavailable);
  EXPECT_EQ(o.attempts, 1);
  EXPECT_FALSE(failure_of(o).nothing_sent);
  EXPECT_NE(failure_of(o).detail.find("may have been processed"),
            std::string::npos)
    << failure_of(o).detail;
  EXPECT_EQ(log->requests.size(), 1u);
}

TEST_F(CallActor, PostMarkedIdempotentIsRetried) {
  log->script = {fake_step::fail(ek::interrupted, true)};
  auto req = post("/v1/orders");
  req.idempotent = true;
  auto o = run_call(req);
  EXPECT_EQ(o.attempts, 3);
  EXPECT_EQ(log->requests.size(), 3u);
  for (auto& r : log->requests)
    EXPECT_EQ(r.request.body, R"({"qty":1})");
}

TEST_F(CallActor, GetMarkedNotIdempotentIsNotRetried) {
  log->script = {fake_step::fail(ek::interrupted, true)};
  auto req = get("/v1/item");
  req.idempotent = false;
  auto o = run_call(req);
  EXPECT_EQ(o.attempts, 1);
}

TEST_F(CallActor, ConnectRefusedThreeTimesSentNothing) {
  log->script = {fake_step::fail(ek::connect, false, "connection refused")};
  auto o = run_call(get("/v1/item"));
  EXPECT_EQ(failure_of(o).kind, error_kind::service_unavailable);
  EXPECT_EQ(failure_of(o).cause, ek::connect);
  EXPECT_EQ(o.attempts, 3);
  EXPECT_TRUE(failure_of(o).nothing_sent);
  EXPECT_EQ(failure_of(o).status, 0);
}

TEST_F(CallActor, TlsFailureIsNotRetried) {
  log->script = {fake_step::fail(ek::tls, false, "certificate verify failed")};
  auto o = run_call(get("/v1/item"));
  EXPECT_EQ(failure_of(o).kind, error_kind::service_unavailable);
  EXPECT_EQ(failure_of(o).cause, ek::tls);
  EXPECT_EQ(o.attempts, 1);
}

TEST_F(CallActor, TooLargeIsAResponseErrorNotRetried) {
  log->script = {fake_step::fail(ek::too_large, true, "body over the cap")};
  auto o = run_call(get("/v1/item"));
  EXPECT_EQ(failure_of(o).kind, error_kind::response_error);
  EXPECT_EQ(o.attempts, 1);
}

// -- statuses and bodies
// ------------------------------------------------------------------

TEST_F(CallActor, ServerErrorCarriesTheJsonDetail) {
  log->script = {fake_step::status(500, R"({"detail":"boom"})")};
  auto o = run_call(get("/v1/item"));
  EXPECT_EQ(failure_of(o).kind, error_kind::server_error);
  EXPECT_EQ(failure_of(o).status, 500);
  EXPECT_EQ(failure_of(o).detail, "boom");
  EXPECT_EQ(o.attempts, 1);
  EXPECT_FALSE(failure_of(o).nothing_sent);
  EXPECT_EQ(log->requests.size(), 1u);
}

TEST_F(CallActor, AuthStatusesAreAuthErrors) {
  log->script = {fake_step::status(403, R"({"detail":"no grant"})")};
  auto o = run_call(get("/v1/item"));
  EXPECT_EQ(failure_of(o).kind, error_kind::auth_error);
  EXPECT_EQ(failure_of(o).detail, "no grant");
}

TEST_F(CallActor, ARedirectIsNotFollowedAndExposesTheLocation) {
  log->script = {fake_step::status(
    302, "", {{"Location", "http://other.example:8080/v1/data"}})};
  auto o = run_call(get("/v1/data"));
  EXPECT_EQ(failure_of(o).kind, error_kind::request_error);
  EXPECT_EQ(failure_of(o).status, 302);
  EXPECT_EQ(failure_of(o).location, "http://other.example:8080/v1/data");
  EXPECT_EQ(o.attempts, 1);
  EXPECT_EQ(log->requests.size(), 1u);
}

TEST_F(CallActor, NonJson200IsAResponseError) {
  log->script = {fake_step::status(200, "<html>portal</html>")};
  auto o = run_call(get("/v1/item"));
  EXPECT_EQ(failure_of(o).kind, error_kind::response_error);
  EXPECT_EQ(failure_of(o).status, 200);
  EXPECT_EQ(o.attempts, 1);
}

TEST_F(CallActor, EmptyBodyIsNull) {
  log->script = {fake_step::status(204)};
  auto o = run_call(get("/v1/item"));
  ASSERT_TRUE(o.ok());
  EXPECT_TRUE(o.body.is_null());
  EXPECT_EQ(o.status, 204);
}

TEST_F(CallActor, AnOverCapErrorBodyKeepsTheStatusTypeWithEmptyDetail) {
  log->script = {fake_step::over_cap(500)};
  auto o = run_call(get("/v1/item"));
  EXPECT_EQ(failure_of(o).kind, error_kind::server_error);
  EXPECT_EQ(failure_of(o).status, 500);
  EXPECT_EQ(failure_of(o).detail, "");
  EXPECT_EQ(o.attempts, 1);
}

TEST_F(CallActor, RawModeReturnsA404AsAnAnswer) {
  log->script
    = {fake_step::status(404, R"({"detail":"nope"})", {{"ETag", "\"v7\""}})};
  auto req = get("/v1/secrets/x");
  req.raw = true;
  auto o = run_call(req);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o.status, 404);
  EXPECT_EQ(boost::json::serialize(o.body), R"({"detail":"nope"})");
  ASSERT_TRUE(find_header(o.headers, "etag"));
  EXPECT_EQ(o.attempts, 1);
}

TEST_F(CallActor, RawModeGivesNullForANonJsonBody) {
  log->script = {
    fake_step::status(302, "<html>moved</html>", {{"Location", "/elsewhere"}})};
  auto req = get("/v1/x");
  req.raw = true;
  auto o = run_call(req);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o.status, 302);
  EXPECT_TRUE(o.body.is_null());
}

TEST_F(CallActor, RawModeStillFailsOnAnOverCapBodyAndTransportFailures) {
  log->script = {fake_step::over_cap(404)};
  auto req = get("/v1/x");
  req.raw = true;
  auto o = run_call(req);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(failure_of(o).kind, error_kind::response_error);
  EXPECT_EQ(failure_of(o).status, 404);
}

TEST_F(CallActor, RawModeRetriesTransportFailuresThenServiceUnavailable) {
  cfg.retry.base_backoff = 0;
  log->script = {fake_step::fail(ek::connect, false)};
  auto req = get("/v1/x");
  req.raw = true;
  auto o = run_call(req);
  EXPECT_EQ(failure_of(o).kind, error_kind::service_unavailable);
  EXPECT_EQ(o.attempts, 3);
}

// -- request shape, secrecy, events
// -----------------------------------------------------

TEST_F(CallActor, EachSendCarriesTheBudgetTheCapAndAUniqueExchangeId) {
  cfg.max_response_bytes = 1024;
  cfg.retry.base_backoff = 0;
  log->script = {fake_step::fail(ek::interrupted, true)};
  auto client = make_client();
  auto a = start(client, get("/v1/a"));
  auto b = start(client, get("/v1/b"));
  ASSERT_TRUE(run_to_quiescence());
  ASSERT_TRUE(a->outcome && b->outcome);
  EXPECT_NE(a->outcome->request_id, b->outcome->request_id);
  ASSERT_EQ(log->requests.size(), 6u);
  std::set<uint64_t> ids;
  for (auto& r : log->requests) {
    EXPECT_EQ(r.request.max_body_bytes, 1024u);
    EXPECT_EQ(r.request.timeout_ns, 5'000'000'000);
    EXPECT_EQ(r.request.method, "GET");
    EXPECT_EQ(header(r.request, "Authorization"),
              std::string{"Bearer "} + secret);
    ids.insert(r.request.exchange_id);
  }
  EXPECT_EQ(ids.size(), 6u);
}

TEST_F(CallActor, TheCredentialNeverAppearsInEventsOrErrors) {
  // A hostile server echoes the credential into its error detail.
  log->script
    = {fake_step::fail(ek::interrupted, true, "reset"),
       fake_step::status(500, std::string{R"({"detail":"bad token Bearer )"}
                                + secret + R"("})")};
  auto req = get("/v1/item");
  req.params = {{"q", "x"}};
  auto o = run_call(req);
  EXPECT_EQ(failure_of(o).kind, error_kind::server_error);
  auto clean = [](const std::string& s) {
    return s.find(secret) == std::string::npos;
  };
  EXPECT_TRUE(clean(failure_of(o).detail)) << failure_of(o).detail;
  EXPECT_TRUE(clean(failure_of(o).message()));
  EXPECT_TRUE(clean(failure_of(o).location));
  ASSERT_FALSE(events->empty());
  for (auto& e : *events) {
    for (auto* s : {&e.ev.request_id, &e.ev.method, &e.ev.path, &e.ev.cause})
      EXPECT_TRUE(clean(*s)) << *s;
    EXPECT_EQ(e.ev.path, "/v1/item"); // no query string
  }
  // ...while the credential itself did go to the transport.
  EXPECT_EQ(header(log->requests.at(0).request, "Authorization"),
            std::string{"Bearer "} + secret);
}

TEST_F(CallActor, ObserverSeesSendingRetryingAndAnsweredInOrder) {
  cfg.retry.retry_statuses = {503};
  log->script = {fake_step::status(503, "", {{"retry-after-ms", "100"}}),
                 fake_step::status(200, "{}")};
  auto o = run_call(get("/v1/item"));
  ASSERT_TRUE(o.ok());
  ASSERT_EQ(event_kinds(), (std::vector<event_kind>{
                             event_kind::sending, event_kind::retrying,
                             event_kind::sending, event_kind::answered}));
  auto& ev = *events;
  EXPECT_EQ(ev[0].ev.attempt, 1);
  EXPECT_EQ(ev[0].ev.method, "GET");
  EXPECT_EQ(ev[0].ev.request_id, o.request_id);
  EXPECT_EQ(ev[1].ev.cause, "status 503");
  EXPECT_EQ(ev[1].ev.cause_kind, ek::none);
  EXPECT_STREQ(reason_label(ev[1].ev), "status");
  EXPECT_EQ(ev[1].ev.delay_ns, 100'000'000);
  EXPECT_EQ(ev[1].ev.attempt, 1);
  EXPECT_EQ(ev[2].ev.attempt, 2);
  EXPECT_EQ(ev[2].at - t0_, 100ms);
  EXPECT_EQ(ev[3].ev.status, 200);
  EXPECT_EQ(ev[3].ev.attempts, 2);
  EXPECT_STREQ(outcome_label(ev[3].ev), "ok");
  EXPECT_EQ(ev[3].ev.latency_ns, 100'000'000);
}

TEST_F(CallActor, ObserverSeesFailedWithTheErrorKind) {
  cfg.retry.base_backoff = 0;
  log->script = {fake_step::fail(ek::connect, false)};
  run_call(get("/v1/item"));
  ASSERT_EQ(event_kinds(),
            (std::vector<event_kind>{event_kind::sending, event_kind::retrying,
                                     event_kind::sending, event_kind::retrying,
                                     event_kind::sending, event_kind::failed}));
  auto& f = events->back().ev;
  EXPECT_STREQ(outcome_label(f), "service_unavailable");
  EXPECT_EQ(f.cause, "connect");
  EXPECT_EQ(f.cause_kind, ek::connect);
  EXPECT_EQ(f.error, error_kind::service_unavailable);
  EXPECT_EQ(f.attempts, 3);
  EXPECT_EQ(events->at(1).ev.cause, "connect");
  // The metric label is the enum's, not a parse of the text.
  EXPECT_EQ(events->at(1).ev.cause_kind, ek::connect);
  EXPECT_STREQ(reason_label(events->at(1).ev), "connect");
}

TEST_F(CallActor, AStatusErrorIsReportedAsAnsweredWithItsKind) {
  log->script = {fake_step::status(500, R"({"detail":"boom"})")};
  run_call(get("/v1/item"));
  ASSERT_EQ(events->size(), 2u);
  EXPECT_EQ(events->back().ev.kind, event_kind::answered);
  EXPECT_STREQ(outcome_label(events->back().ev), "server_error");
  EXPECT_EQ(events->back().ev.status, 500);
}

TEST_F(CallActor, ABadPathIsAConfigErrorAndNothingIsSent) {
  log->script = {fake_step::status(200, "{}")};
  auto o = run_call(get("v1/item"));
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(failure_of(o).kind, error_kind::config_error);
  EXPECT_EQ(o.attempts, 0);
  EXPECT_TRUE(failure_of(o).nothing_sent);
  EXPECT_FALSE(o.request_id.empty());
  EXPECT_TRUE(log->requests.empty());
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ(events->at(0).ev.kind, event_kind::failed);
}

TEST_F(CallActor, HeaderInjectionIsAConfigError) {
  log->script = {fake_step::status(200, "{}")};
  auto req = get("/v1/item");
  req.headers = {{"X-A", "v\r\nX-Evil: 1"}};
  auto o = run_call(req);
  EXPECT_EQ(failure_of(o).kind, error_kind::config_error);
  EXPECT_TRUE(log->requests.empty());
}

// -- the front door
// --------------------------------------------------------------------

TEST(ServiceClient, BadConfigurationThrowsNamingTheField) {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  client_config c;
  c.base_url = "ftp://127.0.0.1";
  try {
    make_service_client(sys, c);
    FAIL() << "no exception";
  } catch (const config_error& e) {
    EXPECT_EQ(e.field(), "base_url");
  }
  c.base_url = "http://127.0.0.1:1";
  c.retry.max_attempts = 0;
  try {
    make_service_client(sys, c);
    FAIL() << "no exception";
  } catch (const config_error& e) {
    EXPECT_EQ(e.field(), "retry.max_attempts");
  }
}

TEST(ServiceClient, IdempotentByDefaultIsGetHeadOptions) {
  EXPECT_TRUE(idempotent_by_default("GET"));
  EXPECT_TRUE(idempotent_by_default("HEAD"));
  EXPECT_TRUE(idempotent_by_default("OPTIONS"));
  EXPECT_FALSE(idempotent_by_default("POST"));
  EXPECT_FALSE(idempotent_by_default("DELETE"));
}

// -- the blocking facade (normal scheduler; the fake answers at once)
// ----------------

namespace {

struct blocking_setup {
  caf::actor_system_config sys_cfg;
  caf::actor_system sys{sys_cfg};
  std::shared_ptr<fake_log> log = std::make_shared<fake_log>();

  client_config cfg() const {
    client_config c;
    c.base_url = "http://127.0.0.1:8080/api";
    c.token = secret;
    c.retry.base_backoff = 0;
    return c;
  }

  client_options opts() {
    client_options o;
    o.transport = spawn_fake_transport(sys, log);
    o.seed = 7;
    return o;
  }
};

} // namespace

TEST(BlockingClient, RequestReturnsTheJsonBody) {
  blocking_setup s;
  s.log->script = {fake_step::status(200, R"({"items":[1,2]})")};
  blocking_client client{s.sys, s.cfg(), s.opts()};
  auto v = client.request("GET", "/v1/things", std::nullopt, {{"limit", "50"}});
  EXPECT_EQ(boost::json::serialize(v), R"({"items":[1,2]})");
  ASSERT_EQ(s.log->requests.size(), 1u);
  EXPECT_EQ(s.log->requests[0].request.target, "/api/v1/things?limit=50");
}

TEST(BlockingClient, RequestSendsTheJsonBody) {
  blocking_setup s;
  s.log->script = {fake_step::status(201, "")};
  blocking_client client{s.sys, s.cfg(), s.opts()};
  auto v = client.request("POST", "/v1/things",
                          boost::json::parse(R"({"name":"x"})"));
  EXPECT_TRUE(v.is_null());
  ASSERT_EQ(s.log->requests.size(), 1u);
  EXPECT_EQ(s.log->requests[0].request.body, R"({"name":"x"})");
  EXPECT_EQ(header(s.log->requests[0].request, "content-type"),
            "application/json");
}

TEST(BlockingClient, StatusErrorsRaiseTheTypedException) {
  blocking_setup s;
  s.log->script = {fake_step::status(500, R"({"detail":"boom"})")};
  blocking_client client{s.sys, s.cfg(), s.opts()};
  try {
    client.request("GET", "/v1/x");
    FAIL() << "no exception";
  } catch (const server_error& e) {
    EXPECT_EQ(e.status(), 500);
    EXPECT_EQ(e.detail(), "boom");
    EXPECT_EQ(e.attempts(), 1);
    EXPECT_FALSE(e.nothing_sent());
    EXPECT_EQ(e.request_id().size(), 32u);
  }
}

TEST(BlockingClient, TransportFailureRaisesServiceUnavailable) {
  blocking_setup s;
  s.log->script = {fake_step::fail(ek::connect, false)};
  blocking_client client{s.sys, s.cfg(), s.opts()};
  EXPECT_THROW(client.request("GET", "/v1/x"), service_unavailable);
  EXPECT_EQ(s.log->requests.size(), 3u);
}

TEST(BlockingClient, RequestRawReturnsEveryDefinitiveStatus) {
  blocking_setup s;
  s.log->script = {fake_step::status(404, R"({"detail":"nope"})")};
  blocking_client client{s.sys, s.cfg(), s.opts()};
  auto r = client.request_raw("GET", "/v1/x");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(boost::json::serialize(r.body), R"({"detail":"nope"})");
  EXPECT_EQ(r.attempts, 1);
}

TEST(BlockingClient, CallNeverThrowsForCallFailures) {
  blocking_setup s;
  s.log->script = {fake_step::fail(ek::interrupted, true)};
  blocking_client client{s.sys, s.cfg(), s.opts()};
  auto o = client.call(post("/v1/orders"));
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(failure_of(o).kind, error_kind::service_unavailable);
  EXPECT_EQ(o.attempts, 1);
}

TEST(BlockingClient, FromEnvReadsThePrefixedVariablesAndExplicitFieldsWin) {
  blocking_setup s;
  s.log->script = {fake_step::status(200, "{}")};
  ::setenv("OBTEST_URL", "http://127.0.0.1:9/env", 1);
  ::setenv("OBTEST_TOKEN", "env-token", 1);
  client_config explicit_cfg;
  explicit_cfg.token = "explicit-token";
  auto client
    = blocking_client::from_env(s.sys, "OBTEST", explicit_cfg, s.opts());
  client.request("GET", "/x");
  ::unsetenv("OBTEST_URL");
  ::unsetenv("OBTEST_TOKEN");
  ASSERT_EQ(s.log->requests.size(), 1u);
  EXPECT_EQ(s.log->requests[0].request.target, "/env/x");
  EXPECT_EQ(header(s.log->requests[0].request, "Authorization"),
            "Bearer explicit-token");
}

TEST(BlockingClient, ConstructionValidatesTheConfig) {
  blocking_setup s;
  auto c = s.cfg();
  c.retry.base_backoff = -1;
  try {
    blocking_client client{s.sys, c, s.opts()};
    FAIL() << "no exception";
  } catch (const config_error& e) {
    EXPECT_EQ(e.field(), "retry.base_backoff");
  }
}

// -- nothing_billed
// ---------------------------------------------------------------------
//
// Whether anything can have been billed (the jev-client SDK's
// nothing_billed()): only when the request was never built or sent, or its
// one attempt was refused outright (401, 403, 429).

TEST_F(CallActor, ARequestThatWasNeverBuiltBilledNothing) {
  auto o = run_call(get("v1/item"));
  EXPECT_TRUE(failure_of(o).nothing_sent);
  EXPECT_TRUE(failure_of(o).nothing_billed);
}

TEST_F(CallActor, OneAttemptRefusedOutrightBilledNothing) {
  for (int status : {401, 403, 429}) {
    SCOPED_TRACE(status);
    log->requests.clear();
    log->script = {fake_step::status(status, R"({"detail":"no"})")};
    auto o = run_call(post("/v1/orders"));
    ASSERT_FALSE(o.ok());
    EXPECT_EQ(failure_of(o).attempts, 1);
    EXPECT_FALSE(failure_of(o).nothing_sent) << "it was sent";
    EXPECT_TRUE(failure_of(o).nothing_billed);
  }
}

TEST_F(CallActor, AnythingElseMayHaveBilled) {
  // A 5xx, a 4xx that may have been processed, a reset after sending.
  for (int status : {500, 503, 400, 409}) {
    SCOPED_TRACE(status);
    log->requests.clear();
    log->script = {fake_step::status(status, R"({"detail":"no"})")};
    auto o = run_call(post("/v1/orders"));
    ASSERT_FALSE(o.ok());
    EXPECT_FALSE(failure_of(o).nothing_billed);
  }
  log->requests.clear();
  log->script = {fake_step::fail(ek::interrupted, true, "connection reset")};
  auto o = run_call(post("/v1/orders"));
  EXPECT_FALSE(failure_of(o).nothing_sent);
  EXPECT_FALSE(failure_of(o).nothing_billed);
}

TEST_F(CallActor, ARefusalAfterEarlierAttemptsMayHaveBilled) {
  // 503 (retried), then a 429: the first attempt may have been processed.
  cfg.retry.retry_statuses = {503};
  cfg.retry.base_backoff = 0.01;
  log->script = {fake_step::status(503), fake_step::status(429)};
  auto o = run_call(get("/v1/item"));
  EXPECT_EQ(failure_of(o).status, 429);
  EXPECT_EQ(failure_of(o).attempts, 2);
  EXPECT_FALSE(failure_of(o).nothing_billed);
}

// -- JSON limits of response bodies (protocol/json_parse.hpp)
// ----------------------

namespace {

std::string nested(std::size_t depth, const std::string& inner = "1") {
  return std::string(depth, '[') + inner + std::string(depth, ']');
}

} // namespace

TEST_F(CallActor, ABodyNestedDeeperThan32LevelsIsNotReportedAsNotJson) {
  log->script = {fake_step::status(200, R"({"a":)" + nested(40) + "}")};
  auto o = run_call(get("/v1/item"));
  ASSERT_TRUE(o.ok()) << failure_of(o).message();
  EXPECT_EQ(json_depth(o.body), 41u);
}

TEST_F(CallActor, ABodyDeeperThanJsonMaxDepthIsAResponseErrorNamingIt) {
  cfg.json_max_depth = 8;
  log->script = {fake_step::status(200, nested(9))};
  auto o = run_call(get("/v1/item"));
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(failure_of(o).kind, error_kind::response_error);
  EXPECT_EQ(failure_of(o).detail,
            "response body nests deeper than json_max_depth (8 levels) "
            "(HTTP 200)");
}

TEST_F(CallActor, AnErrorBodyWithADeepFieldKeepsItsDetail) {
  log->script = {fake_step::status(400, R"({"detail":"bad shape","where":)"
                                          + nested(40) + "}")};
  auto o = run_call(get("/v1/item"));
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(failure_of(o).kind, error_kind::request_error);
  EXPECT_EQ(failure_of(o).detail, "bad shape");
}

TEST_F(CallActor, TinyArraysOverTheMemoryBoundAreAResponseError) {
  // 60 KiB of `[],` under a 64 KiB cap: about 16x that once parsed, over
  // json_memory_factor (4 here) * max_response_bytes.
  cfg.max_response_bytes = 64 * 1024;
  cfg.json_memory_factor = 4;
  std::string body = "[";
  for (int i = 0; i < 20 * 1024; ++i)
    body += "[],";
  body += "[]]";
  log->script = {fake_step::status(200, body)};
  auto o = run_call(get("/v1/item"));
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(failure_of(o).kind, error_kind::response_error);
  EXPECT_EQ(failure_of(o).detail,
            "response body's parsed form exceeds the JSON memory bound "
            "(262144 bytes) (HTTP 200)");
  // The same body with a larger factor parses.
  cfg.json_memory_factor = 16;
  log->requests.clear();
  log->script = {fake_step::status(200, body)};
  auto ok = run_call(get("/v1/item"));
  EXPECT_TRUE(ok.ok()) << failure_of(ok).message();
}

TEST_F(CallActor, AnOverflowingNumberIsAResponseErrorNamingTheField) {
  log->script = {fake_step::status(200, R"({"rows":[{"v":1e400}]})")};
  auto o = run_call(get("/v1/item"));
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(failure_of(o).kind, error_kind::response_error);
  EXPECT_EQ(failure_of(o).detail,
            "response body has a number out of range (IEEE 754 binary64) at "
            "rows[0].v (HTTP 200)");
}

TEST_F(CallActor, AnInexactIntegerIsAResponseErrorNamingTheField) {
  log->script = {fake_step::status(
    200, R"({"rows":[{"id":123456789012345678901234567890}]})")};
  auto o = run_call(get("/v1/item"));
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(failure_of(o).kind, error_kind::response_error);
  EXPECT_EQ(failure_of(o).detail,
            "response body has an integer of 30 digits not exact in IEEE 754 "
            "binary64 at rows[0].id (HTTP 200)");
}

TEST_F(CallActor, InexactIntegersAreTheNearestDoubleWhenTheClientAllowsThem) {
  cfg.json_allow_inexact_integers = true;
  log->script = {fake_step::status(
    200, R"({"rows":[{"id":123456789012345678901234567890}]})")};
  auto o = run_call(get("/v1/item"));
  ASSERT_TRUE(o.ok()) << failure_of(o).message();
  auto& id = o.body.at("rows").at(0).at("id");
  ASSERT_TRUE(id.is_double());
  EXPECT_EQ(id.as_double(), 123456789012345678901234567890.0);
}

TEST_F(CallActor, DoublesInABodyRoundTripExactly) {
  log->script = {fake_step::status(200, R"({"t":1.7961554897535605E9})")};
  auto o = run_call(get("/v1/item"));
  ASSERT_TRUE(o.ok()) << failure_of(o).message();
  EXPECT_EQ(boost::json::serialize(o.body), R"({"t":1.7961554897535605E9})");
}
