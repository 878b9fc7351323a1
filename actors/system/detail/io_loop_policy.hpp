#pragma once

// Private (pulls in Asio): the CAF scheduler policy "io_loop", whose workers
// also run the asio::io_context of outbound's sockets. Users select it with
// system_options::policy = "io_loop" (actors/system/system_setup.hpp).
//
// Why: with CAF's own policies a call crosses threads twice per exchange
// (CAF worker -> io thread to write, io thread -> CAF worker with the
// answer), and each crossing wakes a sleeping thread (a futex or eventfd
// wake-up and a context switch, 5-10 us on a small VM). Here the worker that
// runs the caller, the service client and the pool also writes the request
// and blocks in epoll for the answer, so a call costs the context switches
// of a plain Asio client.
//
// The extension point is CAF 0.17.6's own: `actor_system_config::load<
// caf::scheduler::coordinator<Policy>>()` installs a scheduler, and
// actor_system.cpp creates the default one only "if not explicitly loaded by
// user". The policy interface (central_enqueue, external_enqueue,
// internal_enqueue, resume_job_later, dequeue, foreach_resumable,
// foreach_central_resumable) is the one caf/policy/work_sharing.hpp
// implements; this policy is work sharing (one FIFO queue) whose idle wait
// is `io_context::run_one()` instead of a condition variable.

#include "protocol/detail/io_runner_impl.hpp"
#include "protocol/io_runner.hpp"

#include <caf/policy/unprofiled.hpp>
#include <caf/resumable.hpp>
#include <caf/scheduler/abstract_coordinator.hpp>
#include <caf/scheduler/worker.hpp>

#include <boost/asio/post.hpp>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>

namespace outbound::detail {

class io_loop_policy : public caf::policy::unprofiled {
public:
  /// A worker with jobs queued polls the io_context (a non-blocking
  /// poll(): an epoll_wait with no timeout, then the ready handlers) before
  /// a job when `poll_interval` has passed since its last poll, or after
  /// `max_jobs_per_poll` jobs, whichever comes first; so a socket completion
  /// waits for at most one job past the interval. Polling before every job
  /// cost request_throughput two epoll_waits per call at concurrency 64
  /// (strace -c: 41,666 for 20,000 calls; the raw Beast client 1,976); a
  /// count alone (32 jobs) let feed wake-to-delivery p50 grow to 2-4 ms at
  /// 10,000 events/s, because one job may deliver up to max-throughput
  /// messages. Measurements: bench/README.md, "The io_loop policy".
  static constexpr std::chrono::microseconds poll_interval{50};
  static constexpr std::size_t max_jobs_per_poll = 64;

  struct coordinator_data {
    explicit coordinator_data(caf::scheduler::abstract_coordinator*);

    /// The runner whose io_context the workers run (no threads of its own).
    std::shared_ptr<io_runner> runner;

    std::mutex lock;
    /// Jobs in FIFO order.
    std::deque<caf::resumable*> queue;
    /// Workers blocked in run_one() (guarded by lock).
    std::size_t io_sleepers = 0;
    /// A wake-up handler was posted and has not run yet (it clears this
    /// itself, in run_one() or in a poll()).
    bool wake_posted = false;
    /// Workers waiting on cv because the io_context was stopped (the host
    /// stopped the runner before the actor system).
    std::size_t cv_sleepers = 0;
    std::condition_variable cv;
  };

  struct worker_data {
    /// Constructed once per scheduler start (the workers copy it): tells
    /// the runner how many workers drive it (io_runner::impl::drivers).
    explicit worker_data(caf::scheduler::abstract_coordinator* parent);
    /// Jobs since the last poll and when it was.
    std::size_t since_poll = 0;
    std::chrono::steady_clock::time_point last_poll{};
  };

  template <class Coordinator>
  void central_enqueue(Coordinator* self, caf::resumable* job) {
    enqueue(d(self), job);
  }

  template <class Worker>
  void external_enqueue(Worker* self, caf::resumable* job) {
    enqueue(d(self->parent()), job);
  }

  template <class Worker>
  void internal_enqueue(Worker* self, caf::resumable* job) {
    enqueue(d(self->parent()), job);
  }

  template <class Worker>
  void resume_job_later(Worker* self, caf::resumable* job) {
    enqueue(d(self->parent()), job);
  }

  template <class Worker>
  caf::resumable* dequeue(Worker* self) {
    return dequeue_impl(d(self->parent()), d(self));
  }

  template <class Worker, class UnaryFunction>
  void foreach_resumable(Worker*, UnaryFunction) {
    // nop: the queue is central
  }

  template <class Coordinator, class UnaryFunction>
  void foreach_central_resumable(Coordinator* self, UnaryFunction f) {
    auto& cd = d(self);
    std::deque<caf::resumable*> jobs;
    {
      std::lock_guard<std::mutex> guard{cd.lock};
      jobs.swap(cd.queue);
    }
    for (auto* job : jobs)
      f(job);
  }

private:
  static void enqueue(coordinator_data& cd, caf::resumable* job);
  static caf::resumable* dequeue_impl(coordinator_data& cd,
                                      worker_data& wd);
};

} // namespace outbound::detail

namespace caf::scheduler {

/// The worker loop of this policy: CAF 0.17.6's `worker::run`
/// (caf/scheduler/worker.hpp) without its per-job
/// `CAF_PUSH_AID_FROM_PTR(dynamic_cast<abstract_actor*>(job))`. That cast
/// walks the actor's virtual-inheritance hierarchy on every job (~1,300
/// instructions; 4 % of the worker's instructions in bench/request_throughput
/// at concurrency 64, callgrind) only to tag log lines with the actor id,
/// and `scheduled_actor::resume` pushes the same id again itself. Declared
/// here, before any use instantiates the loop; defined in io_loop.cpp.
template <>
void worker<outbound::detail::io_loop_policy>::run();

} // namespace caf::scheduler
