// What a hedged call actor holds when something goes wrong, and when it
// goes: a handler that throws, an actor that is killed, a late answer of a
// cancelled hedge. On CAF's test coordinator behind the scripted fake
// transport (fake_transport.hpp); the call actor is spawned directly
// (detail::spawn_call_actor_for_testing, with fault hooks) so the test
// can watch it (a monitor) and kill it.
// Send ids: 1 the first attempt's primary, 2 its hedge (the fake's
// requests 0 and 1).

#include "actors/call/call_actor.hpp"
#include "actors/call/detail/call_actor_testing.hpp"
#include "actors/call/detail/hedging_context.hpp"
#include "actors/call/hedging.hpp"

#include "tests/support/fake_transport.hpp"
#include "tests/support/virtual_time_fixture.hpp"

#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <gtest/gtest.h>

#include <stdexcept>
#include <utility>
#include <vector>

using namespace outbound;
using namespace outbound::testing;
using namespace std::chrono_literals;
using std::chrono::nanoseconds;
using fault_point = outbound::detail::call_fault_point;

namespace {

fake_step ok_after(nanoseconds d, std::string body = R"({"v":1})") {
  return fake_step::status(200, std::move(body)).delayed(d);
}

/// What the test sees of one call: its answer and the call actor's end.
struct watch {
  std::optional<call_outcome> outcome;
  caf::actor_clock::time_point answered_at;
  bool down = false;
  caf::error reason;
  caf::actor_clock::time_point down_at;
};

class CallLifetime : public virtual_time_fixture {
protected:
  CallLifetime() {
    hedged_call_defaults(cfg, hedging);
  }

  ~CallLifetime() override {
    // A stalled fake transport keeps the promises of the requests it never
    // answers in its own state, and a promise holds a reference to its
    // actor: an actor left running keeps itself (and the call actor it owes
    // an answer) alive past the system. The real pool answers every request
    // within its time budget; here the fake is stopped instead.
    if (ctx_)
      caf::anon_send_exit(ctx_->transport, caf::exit_reason::kill);
    if (watcher)
      caf::anon_send_exit(watcher, caf::exit_reason::kill);
    if (ctx_ && ctx_->observer)
      caf::anon_send_exit(ctx_->observer, caf::exit_reason::kill);
    run();
  }

  std::shared_ptr<call_context> context() {
    if (!ctx_) {
      cfg.validate();
      hedging.config.validate();
      auto ctx = std::make_shared<call_context>();
      ctx->url = cfg.parsed_url();
      ctx->transport = spawn_fake_transport(sys(), log);
      ctx->hedging = make_hedging_context(sys(), hedging);
      ctx->wall_clock = wall_clock;
      ctx->cfg = cfg;
      if (observe) {
        auto evs = events;
        ctx->observer = sys().spawn([evs](observer_actor::pointer self) {
          return observer_actor::behavior_type{[=](const client_event& ev) {
            evs->emplace_back(ev, self->clock().now());
          }};
        });
      }
      ctx_ = ctx;
    }
    return ctx_;
  }

  /// Spawns a call actor running GET `path`, watched by a test actor.
  std::shared_ptr<watch> start(std::string path = "/x") {
    auto w = std::make_shared<watch>();
    auto hooks = std::make_shared<outbound::detail::call_test_hooks>();
    // Through pointers: a test may arm a fault after the first calls.
    hooks->at = [f = fault_, h = hook_](fault_point p, uint64_t id) {
      if (p == fault_point::answer && *f)
        (*f)(id);
      if (*h)
        (*h)(p, id);
    };
    call = outbound::detail::spawn_call_actor_for_testing(sys(), context(), 7,
                                                          hooks);
    call_request req;
    req.method = "GET";
    req.path = std::move(path);
    auto c = call;
    watcher = sys().spawn([=](caf::event_based_actor* self) -> caf::behavior {
      self->monitor(c);
      self->set_down_handler([=](caf::down_msg& dm) {
        w->down = true;
        w->reason = dm.reason;
        w->down_at = self->clock().now();
      });
      self->request(c, caf::infinite, req).then([=](call_outcome& o) {
        w->outcome = std::move(o);
        w->answered_at = self->clock().now();
      });
      // Stays alive to see the call actor's end: the fixture holds its
      // handle (CAF 0.17 destroys an actor nobody references).
      return {[](int) {
      }};
    });
    return w;
  }

  hedge_stats_snapshot stats() {
    hedge_stats_snapshot s;
    auto st = context()->hedging->stats;
    sys().spawn([=, &s](caf::event_based_actor* self) {
      self->request(st, caf::infinite, hedge_stats_request{host_key})
        .then([&s](hedge_stats_reply& r) {
          if (r.stats)
            s = *r.stats;
        });
    });
    run();
    return s;
  }

  /// Hedge tokens in the host key's bucket now (-1 if not tracked).
  double tokens() {
    double t = -1.0;
    auto st = context()->hedging->stats;
    sys().spawn([=, &t](caf::event_based_actor* self) {
      self->request(st, caf::infinite, hedge_metrics_request{})
        .then([&t](hedge_metrics_reply& r) {
          for (auto& k : r.keys)
            if (k.key == host_key)
              t = k.tokens;
        });
    });
    run();
    return t;
  }

  std::optional<breaker_snapshot> host_breaker() {
    std::optional<breaker_snapshot> b;
    auto br = context()->hedging->breakers;
    sys().spawn([=, &b](caf::event_based_actor* self) {
      self
        ->request(br, caf::infinite,
                  breaker_snapshot_request{breaker_scope::host, host_key})
        .then([&b](breaker_snapshot_reply& r) { b = r.snapshot; });
    });
    run();
    return b;
  }

  /// Two failed calls open the host breaker; 2 s later the next hedge is
  /// its half-open probe. Requests 0 and 1 are the failed calls'.
  void half_open_the_host_breaker() {
    hedging.config.breaker.min_samples = 2;
    hedging.config.breaker.cooldown = 1.0;
    hedging.config.breaker.half_open_max_trial = 1;
    cfg.retry.max_attempts = 1;
    for (int i = 0; i < 2; ++i) {
      auto w = start();
      run_to_quiescence();
      ASSERT_TRUE(w->outcome);
      ASSERT_FALSE(w->outcome->ok());
    }
    advance_by(2s);
  }

  nanoseconds since_t0(caf::actor_clock::time_point t) const {
    return t - t0_;
  }

  static constexpr const char* host_key = "host:127.0.0.1:8080";

  client_config cfg;
  hedging_options hedging;
  std::function<std::chrono::system_clock::time_point()> wall_clock = [] {
    return std::chrono::system_clock::time_point{};
  };
  std::shared_ptr<std::function<void(uint64_t)>> fault_
    = std::make_shared<std::function<void(uint64_t)>>();
  /// Runs with the send id when a transport answer arrives.
  std::function<void(uint64_t)>& answer_fault = *fault_;
  std::shared_ptr<std::function<void(fault_point, uint64_t)>> hook_
    = std::make_shared<std::function<void(fault_point, uint64_t)>>();
  /// Runs at every fault point (detail/call_actor_testing.hpp).
  std::function<void(fault_point, uint64_t)>& hook = *hook_;
  std::shared_ptr<fake_log> log = std::make_shared<fake_log>();
  /// With `observe` set before the first start(): the call's observer
  /// events, each with the virtual time it arrived at.
  bool observe = false;
  std::shared_ptr<
    std::vector<std::pair<client_event, caf::actor_clock::time_point>>>
    events = std::make_shared<
      std::vector<std::pair<client_event, caf::actor_clock::time_point>>>();
  std::shared_ptr<call_context> ctx_;
  call_actor call;
  caf::actor watcher;
};

void throw_on(uint64_t id, uint64_t send_id) {
  if (send_id == id)
    throw std::runtime_error("injected fault");
}

// -- a handler that throws ----------------------------------------------------

// The hedge's own answer is the one whose handling throws, before the race
// read it: nothing else will ever settle the hedge's token. The fault path
// settles it (fired: the request left), the caller gets the typed error at
// once, and the actor goes when nothing is left.
TEST_F(CallLifetime,
       AFaultReadingTheHedgesAnswerSettlesItsTokenAndEndsTheCall) {
  answer_fault = [](uint64_t id) {
    throw_on(2, id);
  };
  log->script = {fake_step::stall(), ok_after(20ms, R"({"who":"hedge"})")};
  auto w = start();
  run_to_quiescence();
  ASSERT_TRUE(w->outcome);
  ASSERT_FALSE(w->outcome->ok());
  EXPECT_EQ(w->outcome->error->kind, error_kind::service_unavailable);
  EXPECT_NE(w->outcome->error->detail.find("injected fault"), std::string::npos)
    << w->outcome->error->detail;
  EXPECT_EQ(since_t0(w->answered_at), 30ms);
  auto s = stats();
  EXPECT_EQ(s.hedged_requests, 1u) << "the hedge's token is settled";
  EXPECT_TRUE(w->down) << "the actor went";
  EXPECT_TRUE(w->reason == caf::exit_reason::normal) << sys().render(w->reason);
}

// The call was answered (the primary won at 25 ms and cancelled the hedge);
// the cancelled hedge's late answer is the one that throws. Its token and
// the race held for it are settled all the same, no second answer is
// attempted, and the actor goes (deliver's early return no longer strands
// it).
TEST_F(CallLifetime, AFaultReadingALateHedgeAnswerStillSettlesAndTheActorGoes) {
  answer_fault = [](uint64_t id) {
    throw_on(2, id);
  };
  log->script = {ok_after(25ms, R"({"who":"primary"})"),
                 ok_after(500ms, R"({"who":"hedge"})")}; // ignores the cancel
  auto w = start();
  advance_by(30ms);
  ASSERT_TRUE(w->outcome);
  EXPECT_TRUE(w->outcome->ok());
  EXPECT_FALSE(w->down) << "owed until the hedge answers";
  run_to_quiescence();
  auto s = stats();
  EXPECT_EQ(s.hedged_requests, 1u);
  EXPECT_EQ(s.primary_wins, 1u);
  EXPECT_TRUE(w->down);
  EXPECT_EQ(since_t0(w->down_at), 510ms);
}

// The throw comes after the race settled the hedge's token (the wall clock,
// read for a Retry-After, throws while the hedge's winning answer is
// handled): the fault path must not settle it a second time.
TEST_F(CallLifetime, AFaultAfterTheTokenSettledDoesNotSettleItAgain) {
  wall_clock = []() -> std::chrono::system_clock::time_point {
    throw std::runtime_error("wall clock broken");
  };
  log->script = {fake_step::stall(), ok_after(20ms, R"({"who":"hedge"})")};
  auto w = start();
  run_to_quiescence();
  ASSERT_TRUE(w->outcome);
  ASSERT_FALSE(w->outcome->ok());
  EXPECT_EQ(w->outcome->error->kind, error_kind::service_unavailable);
  auto s = stats();
  EXPECT_EQ(s.hedged_requests, 1u) << "settled exactly once";
  EXPECT_EQ(s.hedge_wins, 1u);
  EXPECT_TRUE(w->down);
}

// -- teardown
// ------------------------------------------------------------------

// The call was answered, the cancelled hedge's token is still owed (with the
// race held for it), and the actor is killed: what it held is settled as it
// dies, once.
TEST_F(CallLifetime, KillingAnAnsweredCallWithAnOwedTokenSettlesIt) {
  // 0.1 token/s, burst one: a fired token that came back would show.
  hedging.config.estimated_rps = 1.0;
  log->script = {ok_after(25ms, R"({"who":"primary"})"),
                 ok_after(500ms, R"({"who":"hedge"})")}; // ignores the cancel
  auto w = start();
  advance_by(30ms);
  ASSERT_TRUE(w->outcome);
  EXPECT_TRUE(w->outcome->ok());
  EXPECT_EQ(stats().hedged_requests, 0u) << "owed until the hedge answers";
  caf::anon_send_exit(call, caf::exit_reason::kill);
  run();
  EXPECT_TRUE(w->down);
  auto s = stats();
  EXPECT_EQ(s.hedged_requests, 1u);
  EXPECT_EQ(s.primary_wins, 1u);
  run_to_quiescence(); // the hedge's late answer finds no actor
  s = stats();
  EXPECT_EQ(s.hedged_requests, 1u) << "settled exactly once";
  EXPECT_EQ(s.primary_wins, 1u);
  EXPECT_LT(tokens(), 0.5) << "the fired token stays spent (not on the lease)";
}

// Killed with both legs in flight: the caller is answered at once and the
// hedge's token counts as fired (it left; its answer can no longer come).
TEST_F(CallLifetime, KillingACallWithBothLegsInFlightSettlesTheHedgesToken) {
  // 0.1 token/s, burst one: a fired token that came back would show.
  hedging.config.estimated_rps = 1.0;
  log->script = {fake_step::stall(), fake_step::stall()};
  auto w = start();
  advance_by(20ms);
  ASSERT_EQ(log->requests.size(), 2u);
  caf::anon_send_exit(call, caf::exit_reason::kill);
  run();
  ASSERT_TRUE(w->outcome);
  ASSERT_FALSE(w->outcome->ok());
  EXPECT_EQ(w->outcome->error->kind, error_kind::service_unavailable);
  EXPECT_EQ(since_t0(w->answered_at), 20ms);
  auto s = stats();
  EXPECT_EQ(s.hedged_requests, 1u);
  EXPECT_EQ(s.hedge_wins + s.primary_wins, 0u) << "no race was decided";
  EXPECT_LT(tokens(), 0.5) << "the fired token stays spent (not on the lease)";
}

// A half-open probe hedge is in flight when the call actor is killed: its
// permit goes back to the breaker (else the probe slot stays taken).
TEST_F(CallLifetime, KillingACallWithAProbeHedgeInFlightReleasesThePermit) {
  log->script = {fake_step::status(500), fake_step::status(500),
                 fake_step::stall(), fake_step::stall()};
  half_open_the_host_breaker();
  auto w = start();
  advance_by(20ms);
  ASSERT_EQ(log->requests.size(), 4u) << "the probe hedge went out";
  auto b = host_breaker();
  ASSERT_TRUE(b);
  EXPECT_EQ(b->permits_out, 1);
  caf::anon_send_exit(call, caf::exit_reason::kill);
  run();
  b = host_breaker();
  ASSERT_TRUE(b);
  EXPECT_EQ(b->phase, breaker_phase::half_open);
  EXPECT_EQ(b->permits_out, 0);
}

// The primary's answer handler throws while a half-open probe hedge runs:
// the call ends without a conclusion, and the probe's permit goes back.
TEST_F(CallLifetime,
       AFaultEndingACallWithAProbeHedgeInFlightReleasesThePermit) {
  log->script = {fake_step::status(500), fake_step::status(500), ok_after(30ms),
                 fake_step::stall()};
  half_open_the_host_breaker();
  answer_fault = [](uint64_t id) {
    throw_on(1, id);
  };
  auto w = start();
  advance_by(20ms);
  ASSERT_EQ(log->requests.size(), 4u) << "the probe hedge went out";
  auto b = host_breaker();
  ASSERT_TRUE(b);
  EXPECT_EQ(b->permits_out, 1);
  advance_by(20ms); // the primary's answer (30 ms) throws
  ASSERT_TRUE(w->outcome);
  ASSERT_FALSE(w->outcome->ok());
  EXPECT_EQ(w->outcome->error->kind, error_kind::service_unavailable);
  EXPECT_NE(w->outcome->error->detail.find("injected fault"), std::string::npos)
    << w->outcome->error->detail;
  // Checked now, while the hedge still runs: the actor is alive (the
  // hedge's token is owed), so the permit came back through the fault path,
  // not through the actor's teardown or the hedge's later time-out.
  EXPECT_FALSE(w->down) << "the hedge's token is still owed";
  b = host_breaker();
  ASSERT_TRUE(b);
  EXPECT_EQ(b->phase, breaker_phase::half_open);
  EXPECT_EQ(b->permits_out, 0) << "released by the fault path";
  run_to_quiescence();
  b = host_breaker();
  ASSERT_TRUE(b);
  EXPECT_EQ(b->permits_out, 0);
  EXPECT_TRUE(w->down) << "the hedge's time-out settled its token";
}

// -- between the gate's reply and the token's reply ------------------------

// The breakers granted the probe hedge's permit and the budget has not
// answered yet when the call actor dies: the permit is in the call's
// state, not only in the pending token handlers, so it goes back as the
// actor dies (else the breaker stays half-open with its one probe out).
TEST_F(CallLifetime,
       DyingBetweenTheGateReplyAndTheTokenReplyReleasesTheProbePermit) {
  // 0.1 token/s, burst one (see the token-reply fault test below).
  hedging.config.estimated_rps = 1.0;
  log->script
    = {fake_step::status(500), fake_step::status(500), fake_step::stall()};
  half_open_the_host_breaker();
  auto before = tokens();
  ASSERT_GE(before, 1.0) << "the bucket must hold the token the hedge asks for";
  bool killed = false;
  hook = [this, &killed](fault_point p, uint64_t) {
    if (p == fault_point::gate_reply && !killed) {
      killed = true;
      caf::anon_send_exit(call, caf::exit_reason::kill);
    }
  };
  auto w = start();
  advance_by(20ms);
  ASSERT_TRUE(killed) << "the gates allowed the probe hedge";
  EXPECT_TRUE(w->down);
  EXPECT_EQ(log->requests.size(), 3u) << "no hedge went out";
  ASSERT_TRUE(w->outcome);
  ASSERT_FALSE(w->outcome->ok());
  auto b = host_breaker();
  ASSERT_TRUE(b);
  EXPECT_EQ(b->phase, breaker_phase::half_open);
  EXPECT_EQ(b->permits_out, 0);
  EXPECT_NEAR(tokens(), before, 0.01)
    << "the token granted to the dead actor went back with its lease";
  EXPECT_EQ(stats().hedged_requests, 0u);
}

// The token reply's handler throws (before the race reads it): the call
// ends with the typed error at once, the granted token goes back to the
// bucket, and the probe permit held for the hedge goes back too.
TEST_F(CallLifetime, AFaultHandlingTheTokenReplyReleasesTheProbePermit) {
  // A budget of 0.1 token/s and a burst of one: the 10 ms of the test
  // refill 0.001 token, so a granted token that never came back shows.
  hedging.config.estimated_rps = 1.0;
  log->script
    = {fake_step::status(500), fake_step::status(500), fake_step::stall()};
  half_open_the_host_breaker();
  auto before = tokens();
  ASSERT_GE(before, 1.0) << "the bucket must hold the token the hedge asks for";
  hook = [](fault_point p, uint64_t) {
    if (p == fault_point::token_reply)
      throw std::runtime_error("injected fault");
  };
  auto started = now();
  auto w = start();
  advance_by(20ms);
  ASSERT_TRUE(w->outcome);
  ASSERT_FALSE(w->outcome->ok());
  EXPECT_EQ(w->outcome->error->kind, error_kind::service_unavailable);
  EXPECT_NE(w->outcome->error->detail.find("injected fault"), std::string::npos)
    << w->outcome->error->detail;
  EXPECT_EQ(w->answered_at - started, 10ms) << "at the token's reply";
  EXPECT_EQ(log->requests.size(), 3u) << "no hedge went out";
  auto b = host_breaker();
  ASSERT_TRUE(b);
  EXPECT_EQ(b->phase, breaker_phase::half_open);
  EXPECT_EQ(b->permits_out, 0);
  EXPECT_EQ(stats().hedged_requests, 0u);
  EXPECT_NEAR(tokens(), before, 0.01) << "the granted token went back";
  EXPECT_TRUE(w->down) << "nothing left in flight that it waits for";
  EXPECT_TRUE(w->reason == caf::exit_reason::normal) << sys().render(w->reason);
}

// The gate reply's handler throws after the permit was taken into the
// call's state, before the token is asked for: same ending.
TEST_F(CallLifetime, AFaultHandlingTheGateReplyReleasesTheProbePermit) {
  log->script
    = {fake_step::status(500), fake_step::status(500), fake_step::stall()};
  half_open_the_host_breaker();
  hook = [](fault_point p, uint64_t) {
    if (p == fault_point::gate_reply)
      throw std::runtime_error("injected fault");
  };
  auto w = start();
  advance_by(20ms);
  ASSERT_TRUE(w->outcome);
  ASSERT_FALSE(w->outcome->ok());
  EXPECT_NE(w->outcome->error->detail.find("injected fault"), std::string::npos)
    << w->outcome->error->detail;
  EXPECT_EQ(log->requests.size(), 3u) << "no hedge went out";
  auto b = host_breaker();
  ASSERT_TRUE(b);
  EXPECT_EQ(b->phase, breaker_phase::half_open);
  EXPECT_EQ(b->permits_out, 0);
  EXPECT_TRUE(w->down);
  EXPECT_TRUE(w->reason == caf::exit_reason::normal) << sys().render(w->reason);
}

// -- when the actor goes
// ---------------------------------------------------------

// An unhedged answer: the actor goes with the answer.
TEST_F(CallLifetime, TheActorGoesWithItsAnswerWhenNothingIsInFlight) {
  log->script = {ok_after(5ms)};
  auto w = start();
  run_to_quiescence();
  ASSERT_TRUE(w->outcome);
  EXPECT_TRUE(w->outcome->ok());
  EXPECT_TRUE(w->down);
  EXPECT_TRUE(w->reason == caf::exit_reason::normal) << sys().render(w->reason);
  EXPECT_EQ(since_t0(w->down_at), 5ms);
}

// The primary won at 25 ms; the cancelled hedge answers (late) at 510 ms.
// The actor stays for that answer, which settles the hedge's token, and
// goes right then: not before, not never.
TEST_F(CallLifetime,
       TheActorGoesWhenTheCancelledHedgesLateAnswerSettlesItsToken) {
  log->script = {ok_after(25ms, R"({"who":"primary"})"),
                 ok_after(500ms, R"({"who":"hedge"})")}; // ignores the cancel
  auto w = start();
  advance_by(30ms);
  ASSERT_TRUE(w->outcome);
  EXPECT_TRUE(w->outcome->ok());
  EXPECT_FALSE(w->down);
  run_to_quiescence();
  EXPECT_TRUE(w->down);
  EXPECT_TRUE(w->reason == caf::exit_reason::normal) << sys().render(w->reason);
  EXPECT_EQ(since_t0(w->down_at), 510ms);
  EXPECT_EQ(stats().hedged_requests, 1u);
}

// -- observer events ----------------------------------------------------------

// A hedge is an observer event of its own, numbered with its attempt and
// timed from that attempt's primary: here attempt 1 answers 503 at once
// (no hedge), attempt 2 stalls and its hedge goes out 10 ms (the warm-up
// delay) after attempt 2's primary, not after the call's start.
TEST_F(CallLifetime, AHedgeEventCarriesItsAttemptAndTheDelaySinceItsPrimary) {
  observe = true;
  log->script = {fake_step::status(503), fake_step::stall(),
                 ok_after(20ms, R"({"who":"hedge"})")};
  auto w = start();
  run_to_quiescence();
  ASSERT_TRUE(w->outcome);
  ASSERT_TRUE(w->outcome->ok());
  std::vector<std::pair<event_kind, int>> seen;
  caf::actor_clock::time_point second_primary, hedge_at;
  for (const auto& [ev, at] : *events) {
    seen.emplace_back(ev.kind, ev.attempt);
    if (ev.kind == event_kind::sending && ev.attempt == 2)
      second_primary = at;
    if (ev.kind == event_kind::hedging) {
      hedge_at = at;
      EXPECT_EQ(ev.delay_ns, nanoseconds{10ms}.count());
    }
  }
  EXPECT_EQ(
    seen, (std::vector<std::pair<event_kind, int>>{{event_kind::sending, 1},
                                                   {event_kind::retrying, 1},
                                                   {event_kind::sending, 2},
                                                   {event_kind::hedging, 2},
                                                   {event_kind::answered, 2}}));
  EXPECT_EQ(hedge_at - second_primary, 10ms);
  EXPECT_GE(since_t0(second_primary), 100ms) << "after attempt 1's backoff";
  EXPECT_EQ(stats().hedged_requests, 1u);
}

} // namespace
