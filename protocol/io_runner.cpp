#include "protocol/io_runner.hpp"

#include "protocol/detail/io_runner_impl.hpp"

#include <algorithm>

namespace outbound {
inline namespace protocol {

io_runner::impl::impl(std::size_t threads)
  // A driven context may be run by several scheduler workers: Asio's
  // default concurrency hint (thread-safe, no single-thread shortcuts).
  : ioc(threads == 0 ? BOOST_ASIO_CONCURRENCY_HINT_DEFAULT
                     : static_cast<int>(threads)),
    driven(threads == 0) {
  drivers.store(threads);
  guard_.emplace(boost::asio::make_work_guard(ioc));
  auto n = threads;
  threads_.reserve(n);
  for (std::size_t i = 0; i < n; ++i)
    threads_.emplace_back([this] {
      // A handler that throws must not take the process down with it, nor
      // end this thread while others keep serving: log-free restart loop.
      for (;;) {
        try {
          ioc.run();
          return;
        } catch (...) {
        }
      }
    });
}

void io_runner::impl::stop() {
  std::vector<std::thread> ts;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    guard_.reset();
    ioc.stop();
    ts.swap(threads_);
  }
  auto self = std::this_thread::get_id();
  for (auto& t : ts) {
    if (t.get_id() == self)
      t.detach(); // last holder released on an io thread: cannot self-join
    else if (t.joinable())
      t.join();
  }
}

bool io_runner::impl::on_own_thread() {
  std::lock_guard<std::mutex> guard{mtx_};
  auto self = std::this_thread::get_id();
  for (auto& t : threads_)
    if (t.get_id() == self)
      return true;
  return false;
}

io_runner::io_runner(std::size_t threads)
  : impl_(std::make_unique<impl>(std::max<std::size_t>(threads, 1))) {
}

io_runner::io_runner(driven_t) : impl_(std::make_unique<impl>(0)) {
}

bool io_runner::driven() const noexcept {
  return impl_->driven;
}

io_runner::~io_runner() {
  if (impl_->on_own_thread()) {
    // The last holder let go inside one of this runner's own handlers (e.g.
    // an actor whose last reference dropped on an io thread destroys its
    // state there). That thread cannot join itself, and the io_context must
    // outlive the handler still running on it: a reaper thread stops the
    // context, joins every io thread (this one once its handler returns) and
    // only then destroys the context.
    std::thread([p = std::move(impl_)] { p->stop(); }).detach();
    return;
  }
  impl_->stop();
}

void io_runner::stop() {
  // The scheduler that drives the context owns it: stopping it here would
  // leave every pool of the system without io (and their calls unanswered).
  if (impl_->driven)
    return;
  impl_->stop();
}

std::shared_ptr<io_runner> io_runner::shared() {
  static std::mutex mtx;
  static std::weak_ptr<io_runner> instance;
  std::lock_guard<std::mutex> guard{mtx};
  if (auto ptr = instance.lock())
    return ptr;
  auto ptr = std::make_shared<io_runner>(1);
  instance = ptr;
  return ptr;
}

} // namespace protocol
} // namespace outbound
