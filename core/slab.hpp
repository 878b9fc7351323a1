#pragma once

// A slab: values in a vector with a free list, named by generational ids
// (`generation << 32 | index`), so a lookup is an index and a generation
// check, with no hashing and no allocation per value once the vector has
// grown. An id whose value was erased never finds anything again, even when
// its index is reused (the generation differs). The layout is the one of
// Rust's `slab` crate plus the generation of `slotmap`/`generational-arena`.
//
// Memory follows the load back down: free indices are reused lowest first
// (the free list is a two-level bitmap, so the lowest free index is two
// count-trailing-zeros away), so the values in use gather at the front,
// and when at most a quarter of a large slab is in use, the free entries at
// its end are released. An index created again after such a release starts
// above every generation it could have had, so no released id comes back.
// Not thread-safe.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <type_traits>
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
    if (size_ < entries_.size()) {
      index = take_lowest_free();
    } else {
      index = static_cast<uint32_t>(entries_.size());
      // Bits for every index first: erase never allocates (it may run where
      // nothing may throw).
      cover(entries_.size() + 1);
      entries_.emplace_back();
      entries_.back().gen = gen_floor_;
    }
    auto& e = entries_[index];
    auto gen = e.gen + 1;
    if (gen == 0) // 0 is skipped on wrap-around
      gen = 1;
    try {
      e.value.emplace(std::forward<Args>(args)...);
    } catch (...) {
      mark_free(index);
      throw;
    }
    e.gen = gen;
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
    mark_free(index);
    --size_;
    if (size_ * 4 < entries_.size() && entries_.size() > trim_above
        && --trim_credit_ <= 0)
      trim();
  }

  /// Moves the value under `id` out and removes it; `id` must be held.
  T take(uint64_t id) {
    auto& e = entries_[static_cast<uint32_t>(id)];
    T v = std::move(*e.value);
    erase(id);
    return v;
  }

  /// Entries allocated (held or free): what the slab's memory follows.
  std::size_t capacity() const {
    return entries_.size();
  }

  /// Slabs of at most this many entries are never trimmed.
  static constexpr std::size_t trim_above = 1024;

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

  // Bit i of free_bits_[i / 64] is set when entry i is free; bit j of
  // free_words_[j / 64] when free_bits_[j] has a bit set.
  void mark_free(uint32_t i) noexcept {
    free_bits_[i >> 6] |= uint64_t{1} << (i & 63);
    free_words_[i >> 12] |= uint64_t{1} << ((i >> 6) & 63);
  }

  // The lowest free index, marked used; there must be one. One word of
  // free_words_ per 4096 entries is scanned.
  uint32_t take_lowest_free() noexcept {
    std::size_t s = 0;
    while (free_words_[s] == 0)
      ++s;
    auto w = s * 64 + static_cast<std::size_t>(__builtin_ctzll(free_words_[s]));
    auto b = static_cast<unsigned>(__builtin_ctzll(free_bits_[w]));
    free_bits_[w] &= ~(uint64_t{1} << b);
    if (free_bits_[w] == 0)
      free_words_[s] &= ~(uint64_t{1} << (w & 63));
    return static_cast<uint32_t>(w * 64 + b);
  }

  // Makes the bitmaps hold `n` indices (none of the new ones free).
  void cover(std::size_t n) {
    auto words = (n + 63) / 64;
    if (free_bits_.size() < words)
      free_bits_.resize(std::max(words, 2 * free_bits_.size()), 0);
    auto summary = (free_bits_.size() + 63) / 64;
    if (free_words_.size() < summary)
      free_words_.resize(summary, 0);
  }

  // Releases the free entries at the end, down to twice the values held
  // (at least trim_above). Runs from erase, so it must not throw: if the
  // smaller vectors cannot be had, the slab stays as it is. A trim that
  // finds a value held near the end releases what it can and waits for as
  // many erases as the slab has entries before it looks again (amortised
  // O(1) per erase).
  void trim() noexcept {
    trim_credit_ = static_cast<std::ptrdiff_t>(entries_.size());
    if constexpr (!std::is_nothrow_move_constructible_v<T>)
      return; // a move that throws halfway would lose values
    auto keep = std::max(trim_above, 2 * size_);
    auto end = entries_.size();
    while (end > keep && !entries_[end - 1].value)
      --end;
    if (end == entries_.size())
      return;
    try {
      std::vector<entry> kept;
      kept.reserve(end);
      std::vector<uint64_t> bits((end + 63) / 64, 0);
      std::vector<uint64_t> words((bits.size() + 63) / 64, 0);
      uint32_t floor = gen_floor_;
      for (std::size_t i = end; i < entries_.size(); ++i)
        floor = std::max(floor, entries_[i].gen);
      for (std::size_t i = 0; i < end; ++i) {
        kept.emplace_back();
        kept.back().gen = entries_[i].gen;
        if (entries_[i].value) {
          kept.back().value.emplace(std::move(*entries_[i].value));
        } else {
          bits[i >> 6] |= uint64_t{1} << (i & 63);
          words[i >> 12] |= uint64_t{1} << ((i >> 6) & 63);
        }
      }
      entries_.swap(kept);
      free_bits_.swap(bits);
      free_words_.swap(words);
      gen_floor_ = floor;
    } catch (...) {
      // No memory for the smaller copy: keep the larger one.
    }
  }

  std::vector<entry> entries_;
  /// Free indices (see mark_free): the lowest is reused first.
  std::vector<uint64_t> free_bits_;
  std::vector<uint64_t> free_words_;
  std::size_t size_ = 0;
  /// Every generation an index released by trim() ever had is at most this;
  /// an index created again starts above it.
  uint32_t gen_floor_ = 0;
  /// Erases left before trim() looks again.
  std::ptrdiff_t trim_credit_ = 0;
};

} // namespace core
} // namespace outbound
