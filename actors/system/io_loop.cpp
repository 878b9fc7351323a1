#include "actors/system/detail/io_loop_policy.hpp"

#include <caf/scheduler/coordinator.hpp>

#include <boost/asio/post.hpp>

namespace outbound::detail {

namespace {

/// The coordinator whose worker is running io handlers on this thread (set
/// around run_one() and poll()). An enqueue from an io handler needs no
/// wake-up: the worker looks at the queue as soon as the handler returns.
/// An enqueue from an actor's job does wake a sleeping worker (with two or
/// more workers the job must not wait for the sender's job to end: that job
/// may even wait for it, as a blocking request would).
thread_local const io_loop_policy::coordinator_data* in_io_of = nullptr;

/// Sets in_io_of for one run_one() / poll().
class in_io_scope {
public:
  explicit in_io_scope(const io_loop_policy::coordinator_data& cd)
    : prev_(in_io_of) {
    in_io_of = &cd;
  }
  ~in_io_scope() {
    in_io_of = prev_;
  }
  in_io_scope(const in_io_scope&) = delete;
  in_io_scope& operator=(const in_io_scope&) = delete;

private:
  const io_loop_policy::coordinator_data* prev_;
};

/// Runs one io handler; a handler that throws must not end the worker (the
/// io_runner's own threads do the same).
std::size_t run_one_handler(boost::asio::io_context& ioc) {
  try {
    return ioc.run_one();
  } catch (...) {
    return 1;
  }
}

/// Posts the empty handler that ends a sleeping worker's run_one(); it
/// clears `wake_posted` wherever it runs (run_one() or a poll()).
void post_wake(io_loop_policy::coordinator_data& cd) {
  boost::asio::post(cd.runner->get().ioc, [&cd] {
    std::lock_guard<std::mutex> guard{cd.lock};
    cd.wake_posted = false;
  });
}

void poll_handlers(boost::asio::io_context& ioc) {
  for (;;) {
    try {
      ioc.poll();
      return;
    } catch (...) {
    }
  }
}

} // namespace

io_loop_policy::coordinator_data::coordinator_data(
  caf::scheduler::abstract_coordinator*)
  : runner(std::make_shared<io_runner>(io_runner::driven_t{})) {
}

io_loop_policy::worker_data::worker_data(
  caf::scheduler::abstract_coordinator* parent) {
  // coordinator<Policy>::start() builds this once, with the worker count
  // already known, before it starts any worker.
  auto* c = static_cast<caf::scheduler::coordinator<io_loop_policy>*>(parent);
  c->data().runner->get().drivers.store(parent->num_workers());
}

void io_loop_policy::enqueue(coordinator_data& cd, caf::resumable* job) {
  bool wake = false;
  bool notify = false;
  {
    std::lock_guard<std::mutex> guard{cd.lock};
    cd.queue.push_back(job);
    if (cd.io_sleepers > 0 && !cd.wake_posted && in_io_of != &cd) {
      cd.wake_posted = true;
      wake = true;
    }
    notify = cd.cv_sleepers > 0;
  }
  // A sleeping worker blocks in epoll: an empty handler ends its run_one()
  // (Asio interrupts the reactor; no syscall when nobody sleeps).
  if (wake)
    post_wake(cd);
  if (notify)
    cd.cv.notify_one();
}

caf::resumable* io_loop_policy::dequeue_impl(coordinator_data& cd,
                                              worker_data& wd) {
  auto& ioc = cd.runner->get().ioc;
  // The job this returns runs on this thread, which drives the runner.
  io_runner::impl::driven_by_this_thread = &cd.runner->get();
  for (;;) {
    if (wd.since_poll > 0) {
      auto now = std::chrono::steady_clock::now();
      if (wd.since_poll >= max_jobs_per_poll
          || now - wd.last_poll >= poll_interval) {
        wd.since_poll = 0;
        {
          in_io_scope scope{cd};
          poll_handlers(ioc);
        }
        // From the end of the poll: however long its handlers ran, the
        // next poll waits for the interval or the job count.
        wd.last_poll = std::chrono::steady_clock::now();
      }
    }
    std::unique_lock<std::mutex> guard{cd.lock};
    if (!cd.queue.empty()) {
      auto* job = cd.queue.front();
      cd.queue.pop_front();
      // More work and another worker asleep in epoll: wake it.
      bool chain = !cd.queue.empty() && cd.io_sleepers > 0 && !cd.wake_posted;
      if (chain)
        cd.wake_posted = true;
      guard.unlock();
      if (chain)
        post_wake(cd);
      ++wd.since_poll;
      return job;
    }
    if (ioc.stopped()) {
      // Someone stopped the context itself (io_runner::stop() leaves a
      // driven runner alone): no io any more, wait for jobs like work
      // sharing does.
      ++cd.cv_sleepers;
      cd.cv.wait(guard, [&] { return !cd.queue.empty(); });
      --cd.cv_sleepers;
      continue;
    }
    ++cd.io_sleepers;
    guard.unlock();
    {
      in_io_scope scope{cd};
      run_one_handler(ioc);
    }
    guard.lock();
    --cd.io_sleepers;
    wd.since_poll = 0;
    wd.last_poll = std::chrono::steady_clock::now();
  }
}

} // namespace outbound::detail

namespace caf::scheduler {

template <>
void worker<outbound::detail::io_loop_policy>::run() {
  CAF_SET_LOGGER_SYS(&system());
  for (;;) {
    auto job = policy_.dequeue(this);
    CAF_ASSERT(job != nullptr);
    CAF_ASSERT(job->subtype() != resumable::io_actor);
    policy_.before_resume(this, job);
    auto res = job->resume(this, max_throughput_);
    policy_.after_resume(this, job);
    switch (res) {
      case resumable::resume_later:
        // Stays in the loop: the policy keeps the reference.
        policy_.resume_job_later(this, job);
        break;
      case resumable::done:
        policy_.after_completion(this, job);
        intrusive_ptr_release(job);
        break;
      case resumable::awaiting_message:
        // Enqueued again with its next message; drop this reference.
        intrusive_ptr_release(job);
        break;
      case resumable::shutdown_execution_unit:
        policy_.after_completion(this, job);
        policy_.before_shutdown(this);
        return;
    }
  }
}

} // namespace caf::scheduler
