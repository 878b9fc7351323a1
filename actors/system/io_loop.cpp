#include "actors/system/detail/io_loop_policy.hpp"

#include <boost/asio/post.hpp>

namespace outbound::detail {

namespace {

/// The coordinator whose worker runs on this thread (set by the worker's
/// first dequeue). An enqueue from such a thread needs no wake-up: the
/// thread looks at the queue again as soon as its job or io handler returns.
thread_local const io_loop_policy::coordinator_data* this_worker_of = nullptr;

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

void io_loop_policy::enqueue(coordinator_data& cd, caf::resumable* job) {
  bool wake = false;
  bool notify = false;
  {
    std::lock_guard<std::mutex> guard{cd.lock};
    cd.queue.push_back(job);
    if (cd.io_sleepers > 0 && !cd.wake_posted && this_worker_of != &cd) {
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
  this_worker_of = &cd;
  auto& ioc = cd.runner->get().ioc;
  for (;;) {
    if (wd.since_poll >= jobs_per_poll) {
      wd.since_poll = 0;
      poll_handlers(ioc);
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
      // The host stopped the runner (e.g. before shutting the system down):
      // no io any more, wait for jobs like work sharing does.
      ++cd.cv_sleepers;
      cd.cv.wait(guard, [&] { return !cd.queue.empty(); });
      --cd.cv_sleepers;
      continue;
    }
    ++cd.io_sleepers;
    guard.unlock();
    run_one_handler(ioc);
    guard.lock();
    --cd.io_sleepers;
    wd.since_poll = 0;
  }
}

} // namespace outbound::detail
