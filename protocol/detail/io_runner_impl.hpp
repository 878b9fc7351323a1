#pragma once

// Private to protocol/ .cpp files: the definition of io_runner::impl (it
// pulls in Asio, so no public header may include this file).

#include "protocol/io_runner.hpp"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include <atomic>
#include <cstddef>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace outbound {
inline namespace protocol {

/// One asio::io_context, a work guard that keeps `run()` from returning while
/// idle, and the threads running it.
struct io_runner::impl {
  using work_guard_type
    = boost::asio::executor_work_guard<boost::asio::io_context::executor_type>;

  /// `threads` io threads; 0: none (a driven runner, whose context the
  /// io_loop scheduler's workers run).
  explicit impl(std::size_t threads);

  /// Releases the work guard, stops the context and joins the threads
  /// (idempotent; never called from an io thread of this runner).
  void stop();

  /// True if the calling thread is one of this runner's io threads.
  bool on_own_thread();

  /// The context every socket of this runner lives on.
  boost::asio::io_context ioc;

  /// No threads of its own (made with io_runner::driven_t).
  const bool driven;

  /// How many threads run `ioc`: its own threads, or for a driven runner the
  /// io_loop scheduler's workers (set when the scheduler starts them; 0
  /// until then).
  std::atomic<std::size_t> drivers{0};

  /// True when exactly one thread runs `ioc`: every handler runs on it, one
  /// at a time, so a connection needs no strand of its own (Asio's
  /// "implicit strand", overview/core/strands.html).
  bool one_thread() const noexcept {
    return drivers.load(std::memory_order_relaxed) == 1;
  }

  /// The driven runner whose io_loop scheduler worker is the calling
  /// thread (set by the worker each time it takes a job; null on every
  /// other thread).
  static inline thread_local const impl* driven_by_this_thread = nullptr;

  /// True when the calling thread is the one thread that runs `ioc`'s
  /// handlers (a driven runner with a single io_loop worker, called from
  /// that worker): work for a socket of this runner may run right here
  /// instead of being posted, as no handler of the socket can run
  /// concurrently.
  bool sole_driver_is_this_thread() const noexcept {
    return driven_by_this_thread == this && one_thread();
  }

private:
  std::mutex mtx_;
  std::optional<work_guard_type> guard_;
  std::vector<std::thread> threads_;
};

} // namespace protocol
} // namespace outbound
