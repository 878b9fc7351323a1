#pragma once

// The pool actor's inbox of finished exchanges (actors/pool/
// connection_pool.cpp): the io thread answers each requester itself and
// leaves the pool's bookkeeping here. Thread-safe; no CAF, no Asio.

#include <cstdint>
#include <mutex>
#include <vector>

namespace outbound {
inline namespace pool {

/// An exchange the io thread finished: what the pool's bookkeeping needs
/// (its answer went to the requester already).
struct finished_exchange {
  uint64_t exchange_id = 0;
  bool reusable = false;
  /// Ended not_sent on a connection not reusable: the server had closed it
  /// (or left bytes on it) while idle.
  bool stale = false;
};

/// Completions on their way from the io thread to the pool actor. A
/// completion puts its exchange here *before* it answers the requester, so a
/// request the requester sends in reaction finds the connection free (the
/// pool drains the inbox before every message it handles). The pool is woken
/// by a drain_completions message only when a completion cannot wait for its
/// next message: the connection is not reusable (it is closed and its slot
/// freed), requests are queued for a connection, or the pool holds more
/// connections than it keeps idle without a time limit (a reusable one going
/// idle then starts its surplus idle time, pool_limits::idle_time, which
/// must count from then and be swept on time). A reusable connection
/// otherwise goes back idle when the pool next handles a message (a request,
/// a cancel, a timer, a stats query); under load that is the next request,
/// which would have found it anyway, and it saves one actor message per
/// call. At most one wake-up is pending at a time.
class completion_inbox {
public:
  /// Adds `done`; true when the pool must be woken (see above) and no
  /// wake-up is pending.
  bool push(finished_exchange done) {
    std::lock_guard<std::mutex> guard{mtx_};
    items_.push_back(done);
    if (wake_pending_ || (done.reusable && !waiting_))
      return false;
    wake_pending_ = true;
    return true;
  }

  /// Takes every finished exchange, oldest first, into `out` (cleared).
  void take(std::vector<finished_exchange>& out) {
    out.clear();
    std::lock_guard<std::mutex> guard{mtx_};
    out.swap(items_);
    wake_pending_ = false;
  }

  /// Tells later completions whether every one must wake the pool (requests
  /// are queued for a connection, or connections beyond the idle limit are
  /// open). True when `waiting` and completions arrived that no wake-up was
  /// sent for: the pool must drain again, or a queued request could wait
  /// for a connection that is already free.
  bool set_waiting(bool waiting) {
    std::lock_guard<std::mutex> guard{mtx_};
    waiting_ = waiting;
    return waiting && !wake_pending_ && !items_.empty();
  }

private:
  std::mutex mtx_;
  std::vector<finished_exchange> items_;
  bool wake_pending_ = false;
  /// Every completion wakes the pool (set by the pool: see set_waiting).
  bool waiting_ = false;
};

} // namespace pool
} // namespace outbound
