#pragma once

// The io runner (docs/ARCHITECTURE.md): owns the asio io_context and threads
// where every socket of outbound lives. Not an actor. No Asio in this header.

#include <cstddef>
#include <memory>

namespace outbound {
inline namespace protocol {

/// Owns one asio io_context and `threads` threads running it.
///
/// A socket completion on an io thread does one thing: send a message to the
/// actor that owns the operation. Destruction stops the context and joins the
/// threads; pending operations are abandoned (their sockets closed).
class io_runner {
public:
  /// Starts `threads` (>= 1) io threads. [1]
  explicit io_runner(std::size_t threads = 1);

  /// Tag of the runner without threads of its own.
  struct driven_t {};

  /// A runner whose io_context some other thread runs: the workers of the
  /// "io_loop" scheduler policy (actors/system/system_setup.hpp), which
  /// hand it to outbound's pools through io_runner_for(). stop() does
  /// nothing on it (the scheduler owns it; stopping it would leave every
  /// pool of the system without io); its context stops when the last
  /// holder lets go.
  explicit io_runner(driven_t);
  ~io_runner();

  io_runner(const io_runner&) = delete;
  io_runner& operator=(const io_runner&) = delete;

  /// Stops the io_context and joins the threads (idempotent). Does nothing
  /// on a driven runner.
  void stop();

  /// A process-wide runner with one thread, created on first use and
  /// destroyed when the last holder lets go.
  static std::shared_ptr<io_runner> shared();

  /// True for a runner made with driven_t.
  bool driven() const noexcept;

  struct impl;
  /// Access for protocol/ .cpp files (the asio::io_context lives in impl).
  impl& get() {
    return *impl_;
  }

private:
  std::unique_ptr<impl> impl_;
};

} // namespace protocol
} // namespace outbound
