// The io_loop scheduler policy (actors/system/detail/io_loop_policy.hpp):
// configure() installs it, its workers run both CAF's jobs and the Asio
// handlers of the runner io_runner_for() hands out, a stopped runner or a
// throwing handler does not stall the workers, and a system with io still
// pending shuts down. Real threads; every wait is bounded, nothing is timed.

#include "actors/system/system_setup.hpp"

#include "actors/system/detail/io_loop_policy.hpp"

#include "protocol/detail/io_runner_impl.hpp"
#include "protocol/io_runner.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scheduler/coordinator.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

using namespace outbound;
using namespace std::chrono_literals;

namespace {

system_options io_loop_options(std::size_t workers = 1) {
  system_options o;
  o.cores = 2;
  o.io_threads = 1;
  o.policy = "io_loop";
  o.max_threads = workers;
  return o;
}

/// Replies to any string with the id of the thread that handled it.
caf::behavior thread_reporter(caf::event_based_actor*) {
  return {
    [](const std::string&) {
      std::ostringstream os;
      os << std::this_thread::get_id();
      return os.str();
    },
  };
}

std::string thread_name(std::thread::id id) {
  std::ostringstream os;
  os << id;
  return os.str();
}

/// Asks `who` for its thread through a scoped actor (bounded wait).
std::string ask_thread(caf::actor_system& sys, const caf::actor& who) {
  caf::scoped_actor self{sys};
  std::string where = "(no answer)";
  self->request(who, 10s, std::string{"where"})
    .receive([&](const std::string& t) { where = t; },
             [&](caf::error&) { where = "(error)"; });
  return where;
}

} // namespace

TEST(IoLoopScheduler, ConfigureInstallsItAndIoRunnerForHandsOutItsContext) {
  caf::actor_system_config cfg;
  configure(cfg, io_loop_options());
  caf::actor_system sys{cfg};
  auto s = scheduler_in_effect(sys);
  EXPECT_EQ(s.policy, "io_loop");
  EXPECT_EQ(s.workers, 1u);
  EXPECT_EQ(describe_scheduler(sys), "1 worker, policy io_loop, "
                                     "max-throughput 100");
  auto io = io_runner_for(sys);
  ASSERT_NE(io, nullptr);
  EXPECT_TRUE(io->driven());
  EXPECT_EQ(io_runner_for(sys), io); // one runner per system
}

TEST(IoLoopScheduler, OtherPoliciesGetTheSharedRunner) {
  caf::actor_system_config cfg;
  auto o = io_loop_options();
  o.policy = "sharing";
  configure(cfg, o);
  caf::actor_system sys{cfg};
  auto io = io_runner_for(sys);
  EXPECT_FALSE(io->driven());
  EXPECT_EQ(io, io_runner::shared());
}

TEST(IoLoopScheduler, APolicyFromTheConfigFileOrCommandLineLoadsItToo) {
  caf::actor_system_config cfg;
  // As if from cfg.parse(): CAF itself does not know "io_loop".
  cfg.set("scheduler.policy", caf::atom("io_loop"));
  system_options o;
  o.cores = 2;
  configure(cfg, o);
  caf::actor_system sys{cfg};
  EXPECT_EQ(scheduler_in_effect(sys).policy, "io_loop");
}

TEST(IoLoopScheduler, ActorsAndIoHandlersRunOnTheSameWorker) {
  caf::actor_system_config cfg;
  configure(cfg, io_loop_options());
  caf::actor_system sys{cfg};
  auto actor = sys.spawn(thread_reporter);
  auto io = io_runner_for(sys);
  // A timer on the runner's context fires while the system is idle: the
  // worker waits in the reactor, not on a condition variable.
  std::promise<std::thread::id> fired;
  boost::asio::steady_timer timer{io->get().ioc};
  timer.expires_after(5ms);
  timer.async_wait([&](const boost::system::error_code&) {
    fired.set_value(std::this_thread::get_id());
  });
  auto f = fired.get_future();
  ASSERT_EQ(f.wait_for(10s), std::future_status::ready);
  auto io_thread = thread_name(f.get());
  EXPECT_EQ(ask_thread(sys, actor), io_thread);
  EXPECT_NE(io_thread, thread_name(std::this_thread::get_id()));
}

TEST(IoLoopScheduler, IoRunsWhileTheWorkerIsNeverIdle) {
  // One worker kept busy by an actor that sends itself a message after
  // each one, forever: the worker never waits in the reactor, so only its
  // polls between jobs (io_loop_policy::poll_interval, max_jobs_per_poll)
  // can run a handler posted from outside. A policy that never polled a
  // busy worker leaves the promise unset and fails at the bounded wait.
  caf::actor_system_config cfg;
  configure(cfg, io_loop_options());
  caf::actor_system sys{cfg};
  auto io = io_runner_for(sys);
  auto spinner = sys.spawn([](caf::event_based_actor* self) -> caf::behavior {
    return {[self](int n) {
      self->send(self, n + 1);
    }};
  });
  caf::anon_send(spinner, 0);
  for (int round = 0; round < 3; ++round) {
    auto ran = std::make_shared<std::promise<void>>();
    boost::asio::post(io->get().ioc, [ran] { ran->set_value(); });
    EXPECT_EQ(ran->get_future().wait_for(10s), std::future_status::ready)
      << "round " << round;
  }
  caf::anon_send_exit(spinner, caf::exit_reason::user_shutdown);
}

TEST(IoLoopScheduler, MessagesFromIoHandlersReachActorsWithTwoWorkers) {
  caf::actor_system_config cfg;
  configure(cfg, io_loop_options(2));
  caf::actor_system sys{cfg};
  EXPECT_EQ(scheduler_in_effect(sys).workers, 2u);
  auto io = io_runner_for(sys);
  constexpr int n = 20000;
  int seen = 0; // the counter actor's alone
  std::promise<void> all_seen;
  auto counter = sys.spawn([&](caf::event_based_actor*) -> caf::behavior {
    return {[&](int) {
      if (++seen == n)
        all_seen.set_value();
    }};
  });
  // Half from io handlers (enqueued from inside a worker's run_one), half
  // from this thread (external enqueues that must wake a worker in epoll).
  for (int i = 0; i < n / 2; ++i)
    boost::asio::post(io->get().ioc,
                      [counter, i] { caf::anon_send(counter, i); });
  for (int i = 0; i < n / 2; ++i)
    caf::anon_send(counter, i);
  EXPECT_EQ(all_seen.get_future().wait_for(20s), std::future_status::ready);
}

TEST(IoLoopScheduler, AHandlerThatThrowsDoesNotEndTheWorker) {
  caf::actor_system_config cfg;
  configure(cfg, io_loop_options());
  caf::actor_system sys{cfg};
  auto io = io_runner_for(sys);
  boost::asio::post(io->get().ioc,
                    [] { throw std::runtime_error("handler failed"); });
  std::promise<void> ran;
  boost::asio::post(io->get().ioc, [&] { ran.set_value(); });
  EXPECT_EQ(ran.get_future().wait_for(10s), std::future_status::ready);
  auto actor = sys.spawn(thread_reporter);
  EXPECT_NE(ask_thread(sys, actor), "(no answer)");
}

TEST(IoLoopScheduler, StoppingTheSystemsRunnerIsIgnored) {
  caf::actor_system_config cfg;
  configure(cfg, io_loop_options());
  caf::actor_system sys{cfg};
  auto io = io_runner_for(sys);
  // The scheduler owns the driven runner: a stop() would leave every pool
  // of the system without io, so it does nothing.
  io->stop();
  std::promise<void> fired;
  boost::asio::steady_timer timer{io->get().ioc};
  timer.expires_after(1ms);
  timer.async_wait(
    [&](const boost::system::error_code&) { fired.set_value(); });
  EXPECT_EQ(fired.get_future().wait_for(10s), std::future_status::ready);
}

TEST(IoLoopScheduler,
     AContextStoppedBehindTheRunnersBackLeavesTheActorsRunning) {
  caf::actor_system_config cfg;
  configure(cfg, io_loop_options());
  caf::actor_system sys{cfg};
  auto actor = sys.spawn(thread_reporter);
  EXPECT_NE(ask_thread(sys, actor), "(no answer)");
  // No io any more: the workers wait for jobs on a condition variable.
  io_runner_for(sys)->get().ioc.stop();
  for (int i = 0; i < 100; ++i)
    ASSERT_NE(ask_thread(sys, actor), "(no answer)") << i;
  auto late = sys.spawn(thread_reporter);
  EXPECT_NE(ask_thread(sys, late), "(no answer)");
}

TEST(IoLoopScheduler, AJobSentFromAnActorWakesAnIdleWorker) {
  caf::actor_system_config cfg;
  configure(cfg, io_loop_options(2));
  caf::actor_system sys{cfg};
  std::promise<void> b_ran;
  auto b = sys.spawn([&](caf::event_based_actor*) -> caf::behavior {
    return {[&](int) {
      b_ran.set_value();
    }};
  });
  // A's job sends to B and then waits for B (bounded) without returning,
  // as a blocking request made inside a job would: the second worker,
  // asleep in epoll, must be woken to run B.
  std::promise<bool> seen;
  auto a = sys.spawn([&](caf::event_based_actor* self) -> caf::behavior {
    return {[&, self](const std::string&) {
      self->send(b, 1);
      seen.set_value(b_ran.get_future().wait_for(5s)
                     == std::future_status::ready);
    }};
  });
  // Both workers asleep in epoll first (the coordinator's own count).
  auto& cd = dynamic_cast<caf::scheduler::coordinator<detail::io_loop_policy>&>(
               sys.scheduler())
               .data();
  auto asleep = [&] {
    std::lock_guard<std::mutex> guard{cd.lock};
    return cd.io_sleepers == 2;
  };
  auto until = std::chrono::steady_clock::now() + 10s;
  while (!asleep() && std::chrono::steady_clock::now() < until)
    std::this_thread::yield();
  ASSERT_TRUE(asleep());
  caf::anon_send(a, std::string{"go"});
  auto f = seen.get_future();
  ASSERT_EQ(f.wait_for(20s), std::future_status::ready);
  EXPECT_TRUE(f.get());
}

TEST(IoLoopScheduler, ASystemWithIoPendingShutsDown) {
  auto started = std::chrono::steady_clock::now();
  std::shared_ptr<io_runner> io;
  {
    caf::actor_system_config cfg;
    configure(cfg, io_loop_options());
    caf::actor_system sys{cfg};
    io = io_runner_for(sys);
    // An hour-long wait that holds the runner: the system must not wait
    // for it, and the timer must be destroyed with the context later.
    auto timer = std::make_shared<boost::asio::steady_timer>(io->get().ioc);
    timer->expires_after(1h);
    timer->async_wait([timer](const boost::system::error_code&) {});
    auto actor = sys.spawn(thread_reporter);
    EXPECT_NE(ask_thread(sys, actor), "(no answer)");
  }
  EXPECT_LT(std::chrono::steady_clock::now() - started, 30s);
  io.reset(); // last holder: the context and its pending wait go
}
