#pragma once

// One block of memory for a chain of asynchronous operations of which at
// most one is pending at a time (a session's write, then its header read,
// then its body read), as in Asio's custom allocation example
// (boost/libs/asio/example/cpp11/allocation/server.cpp: handler_memory and
// handler_allocator). Asio frees an operation's memory before it calls the
// operation's handler, so the next operation, started from that handler,
// takes the same block again: a keep-alive connection allocates nothing
// per exchange for its operations. Asio's own per-thread recycling only
// serves operations started inside the io_context's run or poll; an
// exchange started by a CAF actor's handler is not, and paid a heap
// allocation per write. A request larger than the block, or one made
// while the block is taken, goes to the heap.
//
// At most one operation of the chain is pending at a time, and an exchange
// that ends inside the chain (deadline, close(), error) closes the
// connection, which never starts another: so the block is never asked for
// twice at once. It may change threads, though: on a strand, Asio frees a
// finished operation on the io thread that ran the reactor and then queues
// the handler on the strand with the same allocator, so `in_use_` is an
// atomic (a second, concurrent request would take the heap, never the
// block).

#include <atomic>
#include <cstddef>
#include <new>

namespace outbound {
namespace detail {

class handler_memory {
public:
  handler_memory() = default;
  handler_memory(const handler_memory&) = delete;
  handler_memory& operator=(const handler_memory&) = delete;

  void* allocate(std::size_t size) {
    if (size <= sizeof(storage_)
        && !in_use_.exchange(true, std::memory_order_acquire))
      return &storage_;
    return ::operator new(size);
  }

  void deallocate(void* p, std::size_t) noexcept {
    if (p == &storage_) {
      in_use_.store(false, std::memory_order_release);
      return;
    }
    ::operator delete(p);
  }

private:
  /// Room for every operation of the chain: measured with Boost 1.81 and
  /// GCC 12, the largest is 272 bytes over plain TCP and 424 over TLS
  /// (a Beast header or body read through the SSL stream).
  alignas(std::max_align_t) unsigned char storage_[512];
  std::atomic<bool> in_use_{false};
};

/// The standard allocator interface over a memory source of the session
/// (handler_memory, or the response parser's fields_arena): `Source` has
/// `void* allocate(std::size_t bytes)` and
/// `void deallocate(void*, std::size_t bytes) noexcept`. Copies and
/// rebinds share the source; two allocators are equal when they share it.
template <class T, class Source>
class source_allocator {
public:
  using value_type = T;

  explicit source_allocator(Source& src) noexcept : src_(&src) {
  }

  template <class U>
  source_allocator(const source_allocator<U, Source>& other) noexcept
    : src_(other.src_) {
  }

  T* allocate(std::size_t n) {
    return static_cast<T*>(src_->allocate(sizeof(T) * n));
  }

  void deallocate(T* p, std::size_t n) noexcept {
    src_->deallocate(p, sizeof(T) * n);
  }

  template <class U>
  bool operator==(const source_allocator<U, Source>& other) const noexcept {
    return src_ == other.src_;
  }

  template <class U>
  bool operator!=(const source_allocator<U, Source>& other) const noexcept {
    return src_ != other.src_;
  }

private:
  template <class, class>
  friend class source_allocator;

  Source* src_;
};

/// The allocator Asio takes from a handler bound with
/// boost::asio::bind_allocator: every operation of the chain allocates
/// through the session's handler_memory.
template <class T>
using handler_allocator = source_allocator<T, handler_memory>;

} // namespace detail
} // namespace outbound
