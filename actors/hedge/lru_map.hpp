#pragma once

// A map bounded to `capacity` keys that evicts the least recently used one
// (httpx-hedged _bounded.py): the per-key hedging state must not grow with
// a hostile set of keys.

#include <cstddef>
#include <list>
#include <string>
#include <unordered_map>
#include <utility>

namespace outbound {
inline namespace hedge {

/// String-keyed LRU map. `get_or_create` and `touch` make a key the most
/// recently used; `peek` does not.
template <class V>
class lru_map {
public:
  /// `capacity` >= 1 (the caller validates; 0 is treated as 1).
  explicit lru_map(std::size_t capacity)
    : capacity_(capacity == 0 ? 1 : capacity) {
  }

  /// The value of `key`, made most recently used; nullptr if absent.
  V* touch(const std::string& key) {
    auto i = index_.find(key);
    if (i == index_.end())
      return nullptr;
    order_.splice(order_.begin(), order_, i->second);
    return &i->second->second;
  }

  /// The value of `key` without changing the order; nullptr if absent.
  const V* peek(const std::string& key) const {
    auto i = index_.find(key);
    return i == index_.end() ? nullptr : &i->second->second;
  }

  V* peek(const std::string& key) {
    auto i = index_.find(key);
    return i == index_.end() ? nullptr : &i->second->second;
  }

  /// The value of `key`, created by `make()` (evicting the least recently
  /// used key when full), made most recently used.
  template <class F>
  V& get_or_create(const std::string& key, F&& make) {
    if (auto v = touch(key))
      return *v;
    if (index_.size() >= capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
      ++evictions_;
    }
    order_.emplace_front(key, make());
    index_.emplace(key, order_.begin());
    return order_.front().second;
  }

  std::size_t size() const {
    return index_.size();
  }

  std::size_t capacity() const {
    return capacity_;
  }

  /// Keys evicted so far.
  std::size_t evictions() const {
    return evictions_;
  }

  /// Entries, most recently used first.
  const std::list<std::pair<std::string, V>>& entries() const {
    return order_;
  }

private:
  std::size_t capacity_;
  std::size_t evictions_ = 0;
  std::list<std::pair<std::string, V>> order_;
  std::unordered_map<std::string,
                     typename std::list<std::pair<std::string, V>>::iterator>
    index_;
};

} // namespace hedge
} // namespace outbound
