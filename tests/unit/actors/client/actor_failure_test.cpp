// No actor dies of an exception, and a dead actor never leaves a caller
// waiting: the coalescing driver and the service client (with its call
// actors) on CAF's test coordinator, their transports scripted fakes
// (fake_transport.hpp) that the tests kill with a non-normal exit reason or
// make throw. Every time asserted is virtual time.

#include "tests/support/fake_transport.hpp"
#include "tests/support/virtual_time_fixture.hpp"

#include "actors/client/service_client.hpp"
#include "actors/coalesce/coalescing_driver.hpp"
#include "actors/coalesce/leader_state.hpp"
#include "actors/handler_guard.hpp"
#include "config/config_error.hpp"
#include "tests/support/outcome_checks.hpp"

#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>

#include <gtest/gtest.h>

#include <stdexcept>

using namespace std::chrono_literals;

namespace outbound::testing {
namespace {

/// An answer must arrive within this much virtual time of the death that
/// caused it: "at once", not after a timeout or a backoff.
constexpr auto at_once = 5ms;

fake_step ts_ok() {
  boost::json::object o;
  o["physical_ms"] = 1000;
  o["logical_start"] = 0;
  o["count"] = 1;
  o["epoch"] = "1";
  return fake_step::status(200, boost::json::serialize(o));
}

struct reply_box {
  std::optional<coalesce_reply> reply;
  caf::actor_clock::time_point at;
};

// -- the coalescing driver ----------------------------------------------------

class DriverFailure : public virtual_time_fixture {
protected:
  DriverFailure() {
    cfg.endpoints = {"10.0.0.1:7000", "10.0.0.2:7000"};
    cfg.retry.base_backoff = 0; // a retry goes out at once
  }

  ~DriverFailure() override {
    // A fake transport keeps the promises of stalled requests, and each
    // promise refers to the driver: stop them, or a killed driver and its
    // transports keep each other alive past the test (LeakSanitizer).
    for (auto& t : *made_)
      caf::anon_send_exit(t, caf::exit_reason::user_shutdown);
    if (driver_)
      caf::anon_send_exit(*driver_, caf::exit_reason::user_shutdown);
    run();
  }

  /// The n-th transport made (0-based, whatever its endpoint) follows the
  /// n-th script (the last one repeats); `thrower`, when set, runs first
  /// with the number of the factory call and may throw instead.
  coalescing_driver_actor driver() {
    if (!driver_) {
      coalesce_options opts;
      opts.seed = 42;
      auto* sys_ptr = &sys();
      auto logs = logs_;
      auto made = made_;
      auto thrower = thrower_;
      auto asked = std::make_shared<std::size_t>(0);
      opts.transports = [=](const oracle_endpoint&) -> transport_actor {
        if (*thrower)
          (*thrower)((*asked)++);
        auto n = made->size();
        auto log = logs->at(std::min(n, logs->size() - 1));
        auto t = spawn_fake_transport(*sys_ptr, log);
        made->push_back(t);
        return t;
      };
      driver_ = make_coalescing_driver(sys(), cfg, std::move(opts));
    }
    return *driver_;
  }

  std::shared_ptr<fake_log> script(std::vector<fake_step> steps) {
    auto log = std::make_shared<fake_log>();
    log->script = std::move(steps);
    logs_->push_back(log);
    return log;
  }

  template <class Call>
  std::shared_ptr<reply_box> start(Call c) {
    auto box = std::make_shared<reply_box>();
    auto d = driver();
    sys().spawn([=](caf::event_based_actor* self) {
      self->request(d, caf::infinite, c).then([=](coalesce_reply& r) {
        box->reply = std::move(r);
        box->at = self->clock().now();
      });
    });
    run();
    return box;
  }

  std::shared_ptr<reply_box> ts() {
    return start(ts_call{});
  }

  std::shared_ptr<reply_box> seq() {
    seq_call c;
    c.key = "orders";
    return start(c);
  }

  /// Kills transport `n` with a non-normal reason; returns the time.
  caf::actor_clock::time_point kill_transport(std::size_t n) {
    auto at = now();
    caf::anon_send_exit(made_->at(n), caf::exit_reason::kill);
    run();
    return at;
  }

  coalesce_config cfg;
  std::shared_ptr<std::vector<std::shared_ptr<fake_log>>> logs_
    = std::make_shared<std::vector<std::shared_ptr<fake_log>>>();
  std::shared_ptr<std::vector<transport_actor>> made_
    = std::make_shared<std::vector<transport_actor>>();
  std::shared_ptr<std::function<void(std::size_t)>> thrower_
    = std::make_shared<std::function<void(std::size_t)>>();
  std::optional<coalescing_driver_actor> driver_;
};

TEST_F(DriverFailure, AKilledTransportFailsItsAttemptAtOnceAndTsMovesOn) {
  script({fake_step::stall()});
  script({ts_ok()});
  auto r = ts();
  advance(1ms); // the cold-start flush sends the RPC
  ASSERT_EQ(made_->size(), 1u);
  ASSERT_EQ(logs_->at(0)->requests.size(), 1u);
  ASSERT_FALSE(r->reply);
  auto killed_at = kill_transport(0);
  ASSERT_TRUE(r->reply) << "no answer after the transport died";
  EXPECT_LE(r->at - killed_at, at_once);
  EXPECT_FALSE(r->reply->error) << r->reply->error->message();
  EXPECT_EQ(made_->size(), 2u) << "the retry went to a live transport";
}

TEST_F(DriverFailure, ASeqOnAKilledTransportIsUncertainAtOnce) {
  script({fake_step::stall()});
  auto r = seq();
  advance(1ms);
  ASSERT_EQ(logs_->at(0)->requests.size(), 1u);
  auto killed_at = kill_transport(0);
  ASSERT_TRUE(r->reply);
  EXPECT_LE(r->at - killed_at, at_once);
  ASSERT_TRUE(r->reply->error);
  // The request had left: the block may have been spent. Never retried.
  EXPECT_EQ(r->reply->error->kind, error_kind::uncertain_outcome)
    << r->reply->error->message();
  EXPECT_NE(r->reply->error->detail.find("terminated"), std::string::npos)
    << r->reply->error->detail;
  EXPECT_EQ(made_->size(), 1u);
}

TEST_F(DriverFailure, ATransportKilledWhileIdleIsMadeAnewByTheNextCall) {
  cfg.endpoints = {"10.0.0.1:7000"};
  script({ts_ok()});
  auto first = ts();
  ASSERT_TRUE(run_to_quiescence());
  ASSERT_TRUE(first->reply && !first->reply->error);
  kill_transport(0);
  auto second = ts();
  ASSERT_TRUE(run_to_quiescence());
  ASSERT_TRUE(second->reply);
  EXPECT_FALSE(second->reply->error) << second->reply->error->message();
  EXPECT_EQ(made_->size(), 2u);
}

TEST_F(DriverFailure,
       AThrowingTransportFactoryIsATypedErrorAndTheDriverLivesOn) {
  cfg.endpoints = {"10.0.0.1:7000"};
  script({ts_ok()});
  *thrower_ = [](std::size_t n) {
    if (n == 0)
      throw std::runtime_error("factory exploded");
  };
  auto r = ts();
  ASSERT_TRUE(run_to_quiescence());
  ASSERT_TRUE(r->reply);
  ASSERT_TRUE(r->reply->error);
  EXPECT_EQ(r->reply->error->kind, error_kind::service_unavailable);
  EXPECT_NE(r->reply->error->detail.find("factory exploded"), std::string::npos)
    << r->reply->error->detail;
  EXPECT_TRUE(r->reply->error->nothing_sent);
  // Alive, and serving.
  auto again = ts();
  ASSERT_TRUE(run_to_quiescence());
  ASSERT_TRUE(again->reply);
  EXPECT_FALSE(again->reply->error) << again->reply->error->message();
}

TEST_F(DriverFailure, AConfigErrorThrownInsideTheDriverKeepsItsKindAndField) {
  cfg.endpoints = {"10.0.0.1:7000"};
  script({ts_ok()});
  *thrower_ = [](std::size_t n) {
    if (n == 0)
      throw config_error("tls.ca_file", "cannot read file 'gone.pem'");
  };
  auto r = ts();
  ASSERT_TRUE(run_to_quiescence());
  ASSERT_TRUE(r->reply && r->reply->error);
  EXPECT_EQ(r->reply->error->kind, error_kind::config_error);
  EXPECT_NE(r->reply->error->detail.find("tls.ca_file"), std::string::npos)
    << r->reply->error->detail;
  auto again = ts();
  ASSERT_TRUE(run_to_quiescence());
  ASSERT_TRUE(again->reply);
  EXPECT_FALSE(again->reply->error) << again->reply->error->message();
}

TEST_F(DriverFailure, KillingTheDriverAnswersEveryWaiterAtOnce) {
  script({fake_step::stall()});
  auto a = ts();
  auto b = seq();
  advance(1ms);
  auto killed_at = now();
  caf::anon_send_exit(driver(), caf::exit_reason::kill);
  run();
  for (auto& r : {a, b}) {
    ASSERT_TRUE(r->reply) << "a waiter was left to its own timeout";
    EXPECT_LE(r->at - killed_at, at_once);
    ASSERT_TRUE(r->reply->error);
    EXPECT_EQ(r->reply->error->kind, error_kind::service_unavailable);
  }
  // The stalled fake holds a promise that refers to itself: stop it, or the
  // cycle outlives the test (LSan).
  kill_transport(0);
}

TEST(CoalescePoolConfig, ExplicitHttpIsPlaintextEvenWithTlsConfigured) {
  client_config tmpl;
  tmpl.tls.ca_file = "/etc/hostname"; // readable; only validate() runs here
  tmpl.timeout = 3.0;
  auto plain = parse_oracle_endpoint("http://10.0.0.1:7000", true,
                                     endpoint_origin::configured);
  auto bare
    = parse_oracle_endpoint("10.0.0.2:7000", true, endpoint_origin::configured);
  auto tls = parse_oracle_endpoint("https://10.0.0.3:7000", false,
                                   endpoint_origin::configured);
  ASSERT_TRUE(plain && bare && tls);
  auto p = coalesce_pool_config(tmpl, *plain);
  EXPECT_EQ(p.base_url, "http://10.0.0.1:7000");
  EXPECT_FALSE(p.tls.any()) << "a plain pool carries no TLS identity";
  EXPECT_EQ(p.timeout, 3.0) << "the rest of the template is kept";
  EXPECT_NO_THROW(p.validate());
  auto b = coalesce_pool_config(tmpl, *bare);
  EXPECT_EQ(b.base_url, "https://10.0.0.2:7000") << "bare takes the config's";
  EXPECT_EQ(b.tls.ca_file, tmpl.tls.ca_file);
  EXPECT_NO_THROW(b.validate());
  auto t = coalesce_pool_config(tmpl, *tls);
  EXPECT_EQ(t.base_url, "https://10.0.0.3:7000");
  EXPECT_EQ(t.tls.ca_file, tmpl.tls.ca_file);
  EXPECT_NO_THROW(t.validate());
}

TEST(CoalescePoolConfig, AnHttpLeaderHintUnderTlsIsRefusedAsADowngrade) {
  endpoint_parse_error why{};
  EXPECT_FALSE(parse_oracle_endpoint("http://10.0.0.9:7000", true,
                                     endpoint_origin::wire, &why));
  EXPECT_EQ(why, endpoint_parse_error::downgrade);
  auto bare
    = parse_oracle_endpoint("10.0.0.9:7000", true, endpoint_origin::wire, &why);
  ASSERT_TRUE(bare);
  EXPECT_EQ(bare->key(), "https://10.0.0.9:7000");
  auto plain = parse_oracle_endpoint("http://10.0.0.9:7000", false,
                                     endpoint_origin::wire, &why);
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->key(), "http://10.0.0.9:7000");
}

TEST(CoalescePoolConfig,
     ABareHintNamingAConfiguredNodeKeepsItsConfiguredScheme) {
  // Mixed list under TLS: node 1 plain (explicit http://), node 2 bare
  // (https). A follower's bare hint names the node, not the scheme.
  coalesce_config c;
  c.tls = true;
  c.endpoints = {"http://10.0.0.1:7000", "10.0.0.2:7000"};
  coalesce_rng rng{1};
  leader_state ls{c, rng};
  auto t0 = coalesce_time{} + std::chrono::hours{1};
  std::string to_plain = "10.0.0.1:7000; epoch=2";
  auto a = ls.check_hint(&to_plain, "https://10.0.0.2:7000", t0);
  EXPECT_EQ(a.verdict, hint_verdict::usable);
  EXPECT_EQ(a.endpoint, "http://10.0.0.1:7000");
  std::string to_tls = "10.0.0.2:7000; epoch=2";
  auto b = ls.check_hint(&to_tls, "http://10.0.0.1:7000", t0);
  EXPECT_EQ(b.endpoint, "https://10.0.0.2:7000");
  // An unknown bare node takes the configured scheme; an explicit http://
  // hint is still refused, even for a node configured plain.
  std::string unknown = "10.0.0.9:7000; epoch=2";
  EXPECT_EQ(ls.check_hint(&unknown, "http://10.0.0.1:7000", t0).endpoint,
            "https://10.0.0.9:7000");
  std::string explicit_plain = "http://10.0.0.1:7000; epoch=2";
  auto d = ls.check_hint(&explicit_plain, "https://10.0.0.2:7000", t0);
  EXPECT_EQ(d.verdict, hint_verdict::rejected_downgrade);
  EXPECT_EQ(ls.stats().downgrade_hints, 1u);
}

class DriverConstruction : public virtual_time_fixture {};

TEST_F(DriverConstruction, ABadPoolTemplateFailsAtConstructionNamingTheField) {
  coalesce_config c;
  c.endpoints = {"http://10.0.0.1:7000", "10.0.0.2:7000"};
  coalesce_options opts;
  opts.tls_template.timeout = -1;
  try {
    make_coalescing_driver(sys(), c, opts);
    FAIL() << "no config_error";
  } catch (const config_error& e) {
    EXPECT_EQ(e.field(), "timeout") << e.what();
  }
}

// -- the service client and its call actors -----------------------------------

struct call_box {
  std::optional<call_outcome> outcome;
  caf::actor_clock::time_point at;
};

class ClientFailure : public virtual_time_fixture {
protected:
  ClientFailure() {
    cfg.base_url = "http://127.0.0.1:8080";
    cfg.timeout = 5.0;
    cfg.deadline = 30.0;
    log->script = {fake_step::stall()};
  }

  service_client_actor client() {
    if (!client_) {
      client_options opts;
      transport = spawn_fake_transport(sys(), log);
      opts.transport = transport;
      opts.seed = 42;
      client_ = make_service_client(sys(), cfg, std::move(opts));
    }
    return *client_;
  }

  std::shared_ptr<call_box> call() {
    auto box = std::make_shared<call_box>();
    auto c = client();
    sys().spawn([=](caf::event_based_actor* self) {
      self->request(c, caf::infinite, call_request{})
        .then([=](call_outcome& o) {
          box->outcome = std::move(o);
          box->at = self->clock().now();
        });
    });
    run();
    return box;
  }

  client_config cfg;
  std::shared_ptr<fake_log> log = std::make_shared<fake_log>();
  transport_actor transport;
  std::optional<service_client_actor> client_;
};

TEST_F(ClientFailure, KillingThePoolFailsTheCallInFlightAtOnce) {
  auto r = call();
  ASSERT_EQ(log->requests.size(), 1u);
  ASSERT_FALSE(r->outcome);
  auto killed_at = now();
  caf::anon_send_exit(transport, caf::exit_reason::kill);
  run();
  ASSERT_TRUE(r->outcome) << "the call waited for its attempt budget";
  EXPECT_LE(r->at - killed_at, at_once);
  ASSERT_FALSE(r->outcome->ok());
  EXPECT_EQ(failure_of(*r->outcome).kind, error_kind::service_unavailable);
  EXPECT_NE(failure_of(*r->outcome).detail.find("connection pool terminated"),
            std::string::npos)
    << failure_of(*r->outcome).detail;
  EXPECT_FALSE(failure_of(*r->outcome).nothing_sent) << "the request had left";
}

TEST_F(ClientFailure, AfterThePoolDiedEveryCallFailsAtOnceWithNothingSent) {
  client();
  caf::anon_send_exit(transport, caf::exit_reason::kill);
  run();
  auto start = now();
  auto r = call();
  ASSERT_TRUE(r->outcome);
  EXPECT_LE(r->at - start, at_once);
  EXPECT_EQ(failure_of(*r->outcome).kind, error_kind::service_unavailable);
  EXPECT_TRUE(failure_of(*r->outcome).nothing_sent);
  EXPECT_TRUE(log->requests.empty());
}

// The client sends its attempts with a plain send, so a transport that
// breaks the port's contract and answers with a caf::error (the fake does
// when its script is empty) sends the client an error message naming no
// exchange. CAF 0.17's default error handler would terminate the client;
// it must drop the error, end that send at its attempt timeout, and serve
// the next call.
TEST_F(ClientFailure, AnErrorInsteadOfAnAnswerEndsTheSendAtItsTimeout) {
  cfg.timeout = 2.0;
  cfg.retry.max_attempts = 1;
  log->script.clear();
  auto start = now();
  auto r = call();
  ASSERT_EQ(log->requests.size(), 1u);
  ASSERT_FALSE(r->outcome) << "answered before its attempt timeout";
  advance(2s);
  ASSERT_TRUE(r->outcome) << "the send outlived its attempt timeout";
  EXPECT_EQ(r->at - start, 2s);
  EXPECT_EQ(failure_of(*r->outcome).kind, error_kind::service_unavailable);
  EXPECT_EQ(failure_of(*r->outcome).cause, transport_error_kind::timeout);
  log->script = {fake_step::status(200, "{}")};
  auto next = call();
  ASSERT_TRUE(next->outcome) << "the client no longer answers";
  EXPECT_TRUE(next->outcome->ok()) << failure_of(*next->outcome).detail;
}

TEST(HandlerGuard, TurnsAnExceptionIntoATypedErrorNamingItsPlace) {
  auto v = guarded(
    "unit", []() -> int { throw std::out_of_range("map::at"); },
    [](const call_error& e) {
      EXPECT_EQ(e.kind, error_kind::service_unavailable);
      EXPECT_EQ(e.detail, "internal error in unit: map::at");
      return -1;
    });
  EXPECT_EQ(v, -1);
  auto c = guarded(
    "unit", []() -> int { throw config_error("retry.max_attempts", "bad"); },
    [](const call_error& e) {
      EXPECT_EQ(e.kind, error_kind::config_error);
      EXPECT_EQ(e.detail.rfind("retry.max_attempts: bad", 0), 0u) << e.detail;
      return -2;
    });
  EXPECT_EQ(c, -2);
  EXPECT_EQ(guarded(
              "unit", [] { return 7; }, [](const call_error&) { return 0; }),
            7);
}

} // namespace
} // namespace outbound::testing
