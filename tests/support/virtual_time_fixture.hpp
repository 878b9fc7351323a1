#pragma once

// A GoogleTest fixture around CAF's deterministic test coordinator
// (CAF 0.17's caf/scheduler/test_coordinator.hpp, driven by hand):
// every actor runs on the test thread, delayed messages and request timeouts
// fire only when the test moves the virtual clock. CAF's own dsl.hpp crashes
// outside its runner, so this drives `test_coordinator` directly.

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <memory>

namespace outbound::testing {

class virtual_time_fixture : public ::testing::Test {
protected:
  using time_point = caf::actor_clock::time_point;

  virtual_time_fixture() {
    cfg_.set("scheduler.policy", caf::atom("testing"));
    cfg_.set("logger.file-verbosity", caf::atom("quiet"));
    sys_ = std::make_unique<caf::actor_system>(cfg_);
    sched_
      = &dynamic_cast<caf::scheduler::test_coordinator&>(sys_->scheduler());
    // A time point far from the clock's epoch, as CAF's own fixture does.
    sched_->clock().current_time += std::chrono::hours(1);
    t0_ = now();
  }

  ~virtual_time_fixture() override {
    // Actors left waiting (a stalled fake transport holds promises) must not
    // block the system's shutdown.
    sys_->await_actors_before_shutdown(false);
    sched_->run();
  }

  caf::actor_system& sys() {
    return *sys_;
  }

  caf::scheduler::test_coordinator& sched() {
    return *sched_;
  }

  /// Current virtual time.
  time_point now() const {
    return sched_->clock().now();
  }

  /// Virtual time since the fixture started.
  std::chrono::nanoseconds elapsed() const {
    return now() - t0_;
  }

  /// Runs every ready job, without moving the clock.
  size_t run() {
    return sched_->run();
  }

  /// Runs until nothing is ready and no timer is pending: each step fires
  /// the earliest pending timer, moving the clock exactly to its due time.
  /// Stops early (returns false) after `max_steps` timers.
  bool run_to_quiescence(size_t max_steps = 100000) {
    run();
    for (size_t i = 0; i < max_steps; ++i) {
      if (!sched_->has_pending_timeout())
        return true;
      sched_->trigger_timeout();
      run();
    }
    return false;
  }

  /// Moves the clock by `d` (firing due timers) and runs.
  void advance(std::chrono::nanoseconds d) {
    sched_->advance_time(d);
    run();
  }

  /// Moves the clock to `target` one timer at a time: each due timer fires
  /// at its own time and its messages run before the next timer (advance()
  /// fires every due timer first and runs the jobs afterwards, at the end
  /// time).
  void advance_to(time_point target) {
    run();
    auto& clk = sched_->clock();
    while (clk.has_pending_timeout()
           && clk.schedule().begin()->first <= target) {
      clk.trigger_timeout();
      run();
    }
    if (clk.current_time < target)
      clk.current_time = target;
    run();
  }

  /// advance_to(now() + d).
  void advance_by(std::chrono::nanoseconds d) {
    advance_to(now() + d);
  }

  /// The same as advance_by(d).
  void advance_stepwise(std::chrono::nanoseconds d) {
    advance_by(d);
  }

  caf::actor_system_config cfg_;
  std::unique_ptr<caf::actor_system> sys_;
  caf::scheduler::test_coordinator* sched_ = nullptr;
  time_point t0_;
};

} // namespace outbound::testing
