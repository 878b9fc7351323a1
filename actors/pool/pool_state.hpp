#pragma once

// The connection pool's bookkeeping as a pure state machine ("pure core, thin
// actor", docs/ARCHITECTURE.md): no CAF, no Asio, no clock. The actor
// (connection_pool.cpp) decodes messages, asks this state what to do, does it.
//
// One exchange:
//
//   http_request ──► checkout(key, fresh) ─┬─ idle connection (MRU) ──► stale? ─ yes ─► discard_stale ─► answer not_sent
//                                          │                                   └─ no ──► start(reused)
//                                          └─ none / fresh ──────────────────────────► start(dialled)
//   start ──► in flight ──┬── complete(id) ──► release(key, conn, reusable) ─┬─ keep (idle, MRU)
//                         │                                                  └─ close
//                         └── cancel(id) ────► close (never reused); a later complete(id) finds nothing
//
// `Conn` is the connection handle (a shared_ptr<http_connection> in the
// actor, a plain int in tests); `Pending` is what the actor needs to answer
// the requester (a response promise).

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace outbound {

/// What idle connections are keyed by: connections are shared only between
/// requests to the same scheme, host, port and TLS identity.
struct pool_key {
  std::string scheme;
  std::string host;
  uint16_t port = 0;
  /// tls_context::identity(), empty for plain http.
  std::string tls_identity;

  friend bool operator<(const pool_key& a, const pool_key& b) {
    return std::tie(a.scheme, a.host, a.port, a.tls_identity)
           < std::tie(b.scheme, b.host, b.port, b.tls_identity);
  }
  friend bool operator==(const pool_key& a, const pool_key& b) {
    return !(a < b) && !(b < a);
  }
};

/// Counters of a pool, for tests and metrics.
struct pool_counters {
  /// Connections dialled (one per exchange that found no usable idle one).
  uint64_t dialled = 0;
  /// Exchanges that ran on an idle pooled connection.
  uint64_t reused = 0;
  /// Idle connections found stale (closed by the server, unread bytes) and
  /// discarded; each answered its request with `not_sent`.
  uint64_t stale_discarded = 0;
  /// Exchanges cancelled by their caller.
  uint64_t cancelled = 0;
};

/// What `release` decided for a connection whose exchange completed.
enum class release_decision {
  /// Put back as the most recently used idle connection of its key.
  keep_idle,
  /// Close: the exchange said the connection is not reusable.
  close_not_reusable,
  /// Close: the key already holds `max_idle` idle connections.
  close_pool_full,
};

/// Pure bookkeeping of idle and in-flight connections.
template <class Conn, class Pending>
class basic_pool_state {
public:
  /// An exchange in flight.
  struct in_flight {
    pool_key key;
    Conn conn;
    Pending pending;
  };

  /// `max_idle`: idle connections kept per key (0 keeps none).
  explicit basic_pool_state(std::size_t max_idle) : max_idle_(max_idle) {
  }

  /// Takes the most recently used idle connection of `key`, or nothing when
  /// `fresh` is set or none is idle. The caller then checks it for
  /// staleness and calls `discard_stale` or `start(..., reused = true)`.
  std::optional<Conn> checkout(const pool_key& key, bool fresh) {
    if (fresh)
      return std::nullopt;
    auto i = idle_.find(key);
    if (i == idle_.end() || i->second.empty())
      return std::nullopt;
    Conn c = std::move(i->second.back());
    i->second.pop_back();
    return c;
  }

  /// Counts an idle connection found stale (the caller closes it).
  void discard_stale() {
    ++counters_.stale_discarded;
  }

  /// Registers exchange `id` as running on `conn`. Returns false (and
  /// registers nothing) if `id` is already in flight.
  bool start(uint64_t id, pool_key key, Conn conn, Pending pending,
             bool reused) {
    auto [i, added] = flights_.try_emplace(
      id, in_flight{std::move(key), std::move(conn), std::move(pending)});
    if (!added)
      return false;
    if (reused)
      ++counters_.reused;
    else
      ++counters_.dialled;
    return true;
  }

  /// The exchange `id` completed: removes and returns it, or nothing if it
  /// is unknown (cancelled earlier: the completion is dropped).
  std::optional<in_flight> complete(uint64_t id) {
    return take(id);
  }

  /// The caller cancelled `id`: removes and returns it (the caller closes the
  /// connection and answers), or nothing if it already completed.
  std::optional<in_flight> cancel(uint64_t id) {
    auto f = take(id);
    if (f)
      ++counters_.cancelled;
    return f;
  }

  /// Returns `conn` to the idle list of `key` if `reusable` and there is room.
  release_decision release(const pool_key& key, Conn conn, bool reusable) {
    if (!reusable)
      return release_decision::close_not_reusable;
    auto& list = idle_[key];
    if (list.size() >= max_idle_)
      return release_decision::close_pool_full;
    list.push_back(std::move(conn));
    return release_decision::keep_idle;
  }

  /// Removes every connection, idle and in flight (on termination). The
  /// in-flight entries are returned so that the caller can answer them.
  std::pair<std::vector<Conn>, std::vector<in_flight>> drain() {
    std::vector<Conn> idle;
    for (auto& [key, list] : idle_)
      for (auto& c : list)
        idle.push_back(std::move(c));
    idle_.clear();
    std::vector<in_flight> flights;
    for (auto& [id, f] : flights_)
      flights.push_back(std::move(f));
    flights_.clear();
    return {std::move(idle), std::move(flights)};
  }

  /// Idle connections over all keys.
  std::size_t idle_count() const {
    std::size_t n = 0;
    for (const auto& [key, list] : idle_)
      n += list.size();
    return n;
  }

  /// True if exchange `id` is in flight.
  bool is_in_flight(uint64_t id) const {
    return flights_.count(id) > 0;
  }

  /// Exchanges in flight.
  std::size_t in_flight_count() const {
    return flights_.size();
  }

  const pool_counters& counters() const {
    return counters_;
  }

private:
  std::optional<in_flight> take(uint64_t id) {
    auto i = flights_.find(id);
    if (i == flights_.end())
      return std::nullopt;
    auto f = std::move(i->second);
    flights_.erase(i);
    return f;
  }

  std::size_t max_idle_;
  std::map<pool_key, std::vector<Conn>> idle_;
  std::unordered_map<uint64_t, in_flight> flights_;
  pool_counters counters_;
};

} // namespace outbound
