#pragma once

// A slab: values in a vector with a free list, named by generational ids
// (`generation << 32 | index`), so a lookup is an index and a generation
// check, with no hashing and no allocation per value once the vector has
// grown. An id whose value was erased never finds anything again, even when
// its index is reused (the generation differs). The layout is the one of
// Rust's `slab` crate plus the generation of `slotmap`/`generational-arena`.
// Not thread-safe.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace outbound {
inline namespace core {

template <class T>
class slab {
public:
  /// Adds `v`; returns its id, never 0 and never one handed out before
  /// (per index, until 2^32 - 1 reuses of that index, when the generation
  /// wraps).
  uint64_t insert(T v) {
    return emplace(std::move(v));
  }

  /// Adds a value constructed in place from `args` (as insert).
  template <class... Args>
  uint64_t emplace(Args&&... args) {
    uint32_t index;
    if (!free_.empty()) {
      index = free_.back();
      free_.pop_back();
    } else {
      index = static_cast<uint32_t>(entries_.size());
      entries_.emplace_back();
      // Room for every index on the free list: erase never allocates (it
      // may run where nothing may throw).
      free_.reserve(entries_.capacity());
    }
    auto& e = entries_[index];
    if (++e.gen == 0) // 1 for a new entry; 0 is skipped on wrap-around
      e.gen = 1;
    e.value.emplace(std::forward<Args>(args)...);
    ++size_;
    return uint64_t{e.gen} << 32 | index;
  }

  /// The value under `id`, or nullptr (never issued, or erased).
  T* find(uint64_t id) {
    auto index = static_cast<uint32_t>(id);
    if (index >= entries_.size())
      return nullptr;
    auto& e = entries_[index];
    if (!e.value || e.gen != static_cast<uint32_t>(id >> 32))
      return nullptr;
    return &*e.value;
  }

  const T* find(uint64_t id) const {
    return const_cast<slab*>(this)->find(id);
  }

  /// Removes the value under `id`, which must be held (find() != nullptr).
  /// Never allocates; throws only if T's destructor does.
  void erase(uint64_t id) {
    auto index = static_cast<uint32_t>(id);
    entries_[index].value.reset();
    free_.push_back(index);
    --size_;
  }

  /// Moves the value under `id` out and removes it; `id` must be held.
  T take(uint64_t id) {
    auto& e = entries_[static_cast<uint32_t>(id)];
    T v = std::move(*e.value);
    erase(id);
    return v;
  }

  /// The id of the held value with the lowest index, or 0 when empty.
  uint64_t first_id() const {
    for (uint32_t i = 0; i < entries_.size(); ++i)
      if (entries_[i].value)
        return uint64_t{entries_[i].gen} << 32 | i;
    return 0;
  }

  /// Calls `f(id, T&)` for every value held, in index order.
  template <class F>
  void for_each(F&& f) {
    for (uint32_t i = 0; i < entries_.size(); ++i)
      if (entries_[i].value)
        f(uint64_t{entries_[i].gen} << 32 | i, *entries_[i].value);
  }

  std::size_t size() const {
    return size_;
  }

  bool empty() const {
    return size_ == 0;
  }

private:
  struct entry {
    uint32_t gen = 0;
    std::optional<T> value;
  };
  std::vector<entry> entries_;
  std::vector<uint32_t> free_;
  std::size_t size_ = 0;
};

} // namespace core
} // namespace outbound
