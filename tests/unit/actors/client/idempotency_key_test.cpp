// Idempotency keys (draft-ietf-httpapi-idempotency-key-header) in the
// service client, on CAF's test coordinator behind the scripted fake
// transport: a POST with a key is retried and hedged with the same key and
// body bytes on every send; without one it is not.

#include "actors/client/service_client.hpp"

#include "tests/support/fake_transport.hpp"
#include "tests/support/outcome_checks.hpp"
#include "tests/support/virtual_time_fixture.hpp"

#include <caf/event_based_actor.hpp>

#include <gtest/gtest.h>

using namespace outbound;
using namespace outbound::testing;
using namespace std::chrono_literals;

namespace {

using ek = transport_error_kind;

call_request post(std::string body = R"({"qty":1})") {
  call_request c;
  c.method = "POST";
  c.path = "/v1/orders";
  c.body = std::move(body);
  c.has_body = true;
  return c;
}

std::string header(const http_request& r, const std::string& name) {
  auto v = find_header(r.headers, name);
  return v ? *v : std::string{"<absent>"};
}

class IdempotencyKey : public virtual_time_fixture {
protected:
  IdempotencyKey() {
    cfg.base_url = "http://127.0.0.1:8080";
    cfg.timeout = 1.0;
    cfg.deadline = 5.0;
    cfg.retry.max_attempts = 3;
    cfg.retry.base_backoff = 0.01;
    cfg.retry.max_backoff = 0.01;
  }

  ~IdempotencyKey() override {
    if (transport_)
      caf::anon_send_exit(*transport_, caf::exit_reason::kill);
    run();
  }

  call_outcome run_call(call_request req) {
    if (!client_) {
      client_options opts;
      transport_ = spawn_fake_transport(sys(), log);
      opts.transport = *transport_;
      opts.seed = 5;
      opts.hedging = hedging;
      client_ = make_service_client(sys(), cfg, std::move(opts));
    }
    auto out = std::make_shared<std::optional<call_outcome>>();
    auto c = *client_;
    sys().spawn([=](caf::event_based_actor* self) {
      self->request(c, caf::infinite, req).then([=](call_outcome& o) {
        *out = std::move(o);
      });
    });
    EXPECT_TRUE(run_to_quiescence());
    if (!*out)
      return no_outcome("no outcome");
    return **out;
  }

  client_config cfg;
  std::optional<hedging_options> hedging;
  std::shared_ptr<fake_log> log = std::make_shared<fake_log>();
  std::optional<service_client_actor> client_;
  std::optional<transport_actor> transport_;
};

} // namespace

TEST_F(IdempotencyKey, APostWithAKeyIsRetriedWithTheSameKeyAndBody) {
  log->script = {fake_step::fail(ek::interrupted, true, "reset after send"),
                 fake_step::status(201, R"({"id":7})")};
  auto c = post();
  c.idempotency_key = "order-7";
  auto o = run_call(c);
  ASSERT_TRUE(o.ok()) << o.error->message();
  EXPECT_EQ(o.attempts, 2);
  ASSERT_EQ(log->requests.size(), 2u);
  for (auto& e : log->requests) {
    EXPECT_EQ(header(e.request, "Idempotency-Key"), "order-7");
    EXPECT_EQ(e.request.body, R"({"qty":1})");
  }
  EXPECT_EQ(header(log->requests[1].request, "x-retry-count"), "1");
}

TEST_F(IdempotencyKey, APostWithoutAKeyIsNotRetried) {
  log->script = {fake_step::fail(ek::interrupted, true, "reset after send"),
                 fake_step::status(201, R"({"id":7})")};
  auto o = run_call(post());
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.error->kind, error_kind::service_unavailable);
  EXPECT_EQ(log->requests.size(), 1u);
  EXPECT_EQ(header(log->requests[0].request, "Idempotency-Key"), "<absent>");
}

TEST_F(IdempotencyKey, TheClientsAutoModeGeneratesOneKeyPerCall) {
  cfg.idempotency_keys = idempotency_key_mode::auto_key;
  cfg.idempotency_key_header = "X-Idem";
  log->script = {fake_step::status(503), fake_step::status(201, "{}"),
                 fake_step::status(201, "{}")};
  cfg.retry.retry_statuses = {503};
  ASSERT_TRUE(run_call(post()).ok());
  ASSERT_TRUE(run_call(post()).ok());
  ASSERT_EQ(log->requests.size(), 3u);
  auto k1 = header(log->requests[0].request, "X-Idem");
  EXPECT_EQ(k1.size(), 32u);
  EXPECT_EQ(header(log->requests[1].request, "X-Idem"), k1); // the retry
  auto k2 = header(log->requests[2].request, "X-Idem");      // the next call
  EXPECT_EQ(k2.size(), 32u);
  EXPECT_NE(k2, k1);
}

TEST_F(IdempotencyKey, AnExplicitNotIdempotentWinsOverTheKey) {
  log->script = {fake_step::fail(ek::interrupted, true, "reset after send"),
                 fake_step::status(201, "{}")};
  auto c = post();
  c.idempotency_key = "k";
  c.idempotent = false;
  ASSERT_FALSE(run_call(c).ok());
  EXPECT_EQ(log->requests.size(), 1u);
  EXPECT_EQ(header(log->requests[0].request, "Idempotency-Key"), "k");
}

// A hedging client hedges a POST that carries a key: the backup request
// carries the same key and body bytes; without a key a POST is never
// hedged.
TEST_F(IdempotencyKey, AHedgingClientHedgesAPostWithAKey) {
  hedging.emplace();
  hedged_call_defaults(cfg, *hedging);
  log->script = {fake_step::status(201, R"({"who":"primary"})").delayed(300ms),
                 fake_step::status(201, R"({"who":"hedge"})").delayed(5ms)};
  auto c = post();
  c.idempotency_mode = idempotency_key_mode::auto_key;
  auto o = run_call(c);
  ASSERT_TRUE(o.ok()) << o.error->message();
  EXPECT_EQ(o.body.at("who").as_string(), "hedge");
  ASSERT_EQ(log->requests.size(), 2u);
  const auto& p = log->requests[0].request;
  const auto& h = log->requests[1].request;
  EXPECT_EQ(header(h, "Idempotency-Key"), header(p, "Idempotency-Key"));
  EXPECT_EQ(header(p, "Idempotency-Key").size(), 32u);
  EXPECT_EQ(h.body, p.body);
  EXPECT_EQ(h.method, "POST");
}

TEST_F(IdempotencyKey, AHedgingClientNeverHedgesAPostWithoutAKey) {
  hedging.emplace();
  hedged_call_defaults(cfg, *hedging);
  log->script = {fake_step::status(201, R"({"who":"primary"})").delayed(300ms),
                 fake_step::status(201, R"({"who":"hedge"})").delayed(5ms)};
  auto o = run_call(post());
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o.body.at("who").as_string(), "primary");
  EXPECT_EQ(log->requests.size(), 1u);
}

// A server that follows the draft answers 409 Conflict to a request whose
// key is still being processed: a hedge racing its primary. For a keyed
// call that 409 is not the answer; the primary's is.
TEST_F(IdempotencyKey, AHedgesConflictDoesNotEndTheRace) {
  hedging.emplace();
  hedged_call_defaults(cfg, *hedging);
  log->script = {fake_step::status(201, R"({"who":"primary"})").delayed(300ms),
                 fake_step::status(409, R"({"detail":"in use"})").delayed(5ms)};
  auto c = post();
  c.idempotency_key = "order-9";
  auto o = run_call(c);
  ASSERT_TRUE(o.ok()) << o.error->message();
  EXPECT_EQ(o.body.at("who").as_string(), "primary");
  EXPECT_EQ(log->requests.size(), 2u);
}

// And a retry that meets the conflict backs off and asks again, until the
// first request's result is there.
TEST_F(IdempotencyKey, ARetryThatMeetsAConflictIsRetriedAgain) {
  log->script = {fake_step::fail(ek::interrupted, true, "reset after send"),
                 fake_step::status(409, R"({"detail":"in use"})"),
                 fake_step::status(201, R"({"id":1})")};
  auto c = post();
  c.idempotency_key = "order-10";
  auto o = run_call(c);
  ASSERT_TRUE(o.ok()) << o.error->message();
  EXPECT_EQ(o.attempts, 3);
}

TEST_F(IdempotencyKey, AHedgingClientNeverHedgesAKeyedCallMarkedNotIdempotent) {
  hedging.emplace();
  hedged_call_defaults(cfg, *hedging);
  log->script = {fake_step::status(201, R"({"who":"primary"})").delayed(300ms),
                 fake_step::status(201, R"({"who":"hedge"})").delayed(5ms)};
  auto c = post();
  c.idempotency_key = "k";
  c.idempotent = false;
  auto o = run_call(c);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o.body.at("who").as_string(), "primary");
  EXPECT_EQ(log->requests.size(), 1u);
}
