#pragma once

// What the coalescing driver's tests share. The actor tests on virtual time
// (tests/unit/actors/coalesce/coalescing_driver_test.cpp and
// coalesce_hostile_test.cpp): three oracle endpoints, a driver spawned once
// per test with the oracle transports a test supplies, and callers that
// record their reply and its virtual time. The real-time tests
// (tests/integration/actors/coalesce/): one blocking call.

#include "actors/coalesce/coalescing_driver.hpp"
#include "tests/support/virtual_time_fixture.hpp"

#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>

namespace outbound::testing {

/// The three configured oracle endpoints, as the driver keys them.
inline const std::string A = "http://10.0.0.1:7000";
inline const std::string B = "http://10.0.0.2:7000";
inline const std::string C = "http://10.0.0.3:7000";

/// Sends `c` to the driver `d` from a scoped actor of `sys` and waits for the
/// reply, at most 60 s; a CAF error (a timeout, a dead driver) comes back as
/// a reply whose error detail starts with "caf: ".
template <class Call>
coalesce_reply call_blocking(caf::actor_system& sys,
                             const coalescing_driver_actor& d, Call c) {
  coalesce_reply out;
  caf::scoped_actor self{sys};
  self->request(d, std::chrono::seconds{60}, std::move(c))
    .receive([&](coalesce_reply& r) { out = std::move(r); },
             [&](caf::error& e) {
               out.error = call_error{};
               out.error->detail = "caf: " + caf::to_string(e);
             });
  return out;
}

/// One caller's reply and the virtual time it arrived.
struct reply_box {
  std::optional<coalesce_reply> reply;
  caf::actor_clock::time_point at;
};

/// The fixture: a test class provides the driver's options (its seed and
/// its transports); `cfg` may be changed until the first call.
class coalesce_fixture : public virtual_time_fixture {
protected:
  coalesce_fixture() {
    cfg.endpoints = {"10.0.0.1:7000", "10.0.0.2:7000", "10.0.0.3:7000"};
  }

  /// The options the driver is spawned with (called once, at first use).
  virtual coalesce_options options() = 0;

  coalescing_driver_actor driver() {
    if (!driver_)
      driver_ = make_coalescing_driver(sys(), cfg, options());
    return *driver_;
  }

  /// Sends `c` from a fresh caller; the box fills when the reply arrives.
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
    return box;
  }

  std::shared_ptr<reply_box> ts(uint32_t count = 1, double timeout = 0) {
    ts_call c;
    c.count = count;
    c.timeout = timeout;
    return start(c);
  }

  std::shared_ptr<reply_box> seq(std::string key, uint32_t count = 1,
                                 double timeout = 0) {
    seq_call c;
    c.key = std::move(key);
    c.count = count;
    c.timeout = timeout;
    return start(c);
  }

  coalesce_stats stats() {
    coalesce_stats s;
    auto d = driver();
    sys().spawn([=, &s](caf::event_based_actor* self) {
      self->request(d, caf::infinite, stats_atom_v)
        .then([&s](coalesce_stats& x) { s = x; });
    });
    run();
    return s;
  }

  /// The reply of a call that succeeded (a failure otherwise).
  static const coalesce_reply& ok(const std::shared_ptr<reply_box>& b) {
    static coalesce_reply none;
    EXPECT_TRUE(b->reply) << "no reply";
    if (!b->reply)
      return none;
    EXPECT_FALSE(b->reply->error) << b->reply->error->message();
    return *b->reply;
  }

  /// The error kind of a finished call (config_error + a failure when it
  /// did not fail).
  static error_kind failed(const std::shared_ptr<reply_box>& b) {
    EXPECT_TRUE(b->reply) << "no reply";
    if (!b->reply || !b->reply->error) {
      ADD_FAILURE() << "expected an error, got a value";
      return error_kind::config_error;
    }
    return b->reply->error->kind;
  }

  coalesce_config cfg;
  /// Reset it to have the next call spawn a fresh driver.
  std::optional<coalescing_driver_actor> driver_;
};

} // namespace outbound::testing
