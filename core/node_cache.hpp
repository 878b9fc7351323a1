#pragma once

// Nodes of a node-based standard container kept after an erase and reused
// by the next insert. A table on the request path (calls in progress,
// exchanges in flight, deadlines) keeps about the same size while it turns
// over one entry per call; with the cache it allocates nothing in steady
// state. C++17 node handles move a node out of a container and into it
// again without allocating (`extract` / `insert(node_type&&)`, P0083R3,
// "Splicing Maps and Sets"). Pure, no CAF.

#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

namespace outbound {
inline namespace core {

/// Up to `capacity` spare nodes of a std::map, std::multimap or
/// std::unordered_map `Map` (one cache per container; a node may only go
/// back into a container of the same type). A spare node's mapped value is
/// reset to `Mapped{}` when it is put aside, so that it holds no resource
/// (a promise, a connection) while it waits. Not thread-safe: the owner of
/// the container owns its cache.
template <class Map>
class node_cache {
public:
  using node_type = typename Map::node_type;
  using key_type = typename Map::key_type;
  using mapped_type = typename Map::mapped_type;
  using iterator = typename Map::iterator;

  static_assert(std::is_default_constructible_v<
                  mapped_type> && std::is_move_assignable_v<mapped_type>,
                "a spare node's value is reset by assigning a default one");

  /// Keeps at most `capacity` spare nodes (0: the cache never keeps one).
  /// Reserves room for them now, so that putting a node aside never
  /// allocates.
  explicit node_cache(std::size_t capacity = 64) : capacity_(capacity) {
    spare_.reserve(capacity_);
  }

  /// Inserts `{key, mapped_type{args...}}` into `m`, in a spare node when
  /// there is one. Returns where it is, and false (inserting nothing, the
  /// node kept spare) when a unique-key container holds `key` already.
  template <class... Args>
  std::pair<iterator, bool> emplace(Map& m, const key_type& key,
                                    Args&&... args) {
    if (spare_.empty()) {
      if constexpr (is_unique) {
        if (auto i = m.find(key); i != m.end())
          return {i, false};
        return m.emplace(key, mapped_type{std::forward<Args>(args)...});
      } else {
        return {m.emplace(key, mapped_type{std::forward<Args>(args)...}), true};
      }
    }
    auto node = std::move(spare_.back());
    spare_.pop_back();
    node.key() = key;
    node.mapped() = mapped_type{std::forward<Args>(args)...};
    if constexpr (is_unique) {
      auto r = m.insert(std::move(node));
      if (!r.inserted) {
        r.node.mapped() = mapped_type{};
        spare_.push_back(std::move(r.node));
      }
      return {r.position, r.inserted};
    } else {
      return {m.insert(std::move(node)), true};
    }
  }

  /// Erases `pos` from `m`, keeping its node spare unless `capacity` are
  /// kept already. Resetting the value may run its destructor's work now
  /// (as erase would); it must not throw.
  void erase(Map& m, iterator pos) noexcept {
    if (spare_.size() >= capacity_) {
      m.erase(pos);
      return;
    }
    auto node = m.extract(pos);
    node.mapped() = mapped_type{};
    spare_.push_back(std::move(node)); // reserved: never reallocates
  }

  /// Spare nodes kept now.
  std::size_t spare() const noexcept {
    return spare_.size();
  }

private:
  // Maps with unique keys have insert_return_type; multimaps do not.
  template <class M, class = void>
  struct unique_keys : std::false_type {};
  template <class M>
  struct unique_keys<M, std::void_t<typename M::insert_return_type>>
    : std::true_type {};
  static constexpr bool is_unique = unique_keys<Map>::value;

  std::size_t capacity_;
  std::vector<node_type> spare_;
};

} // namespace core
} // namespace outbound
