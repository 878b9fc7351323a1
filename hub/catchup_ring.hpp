#pragma once

// The hub's catch-up tier as a pure state machine (the ring contract of
// hyperdjango's services/hypermanager/catchup.py). No clock, no I/O; the
// epoch is drawn by the caller (make_hub_epoch with its rng).
//
//   seq:  1 ... floor | floor+1 ......... head
//         evicted     | retained window (floor, head], at most `capacity`
//
//   resume(client, last_seq, epoch):
//
//     capacity == 0 ───────────────────────────────► resync (ring_disabled)
//     last_seq absent ─────────────────────────────► resync (no_last_seq)
//     epoch given and != this incarnation's ───────► resync (foreign_epoch)
//     client unknown in this incarnation ──────────► resync (unknown_client)
//     last_seq < floor ────────────────────────────► resync (below_floor)
//     last_seq > head ─────────────────────────────► resync (above_head)
//     otherwise ───────────────────────────────────► resume: replay the
//                                                    retained (last_seq, head]
//                                                    that match the prefixes
//                                                    (possibly none)
//
//   restart(epoch): new epoch, empty ring, seq restarts at 1, clients
//   forgotten — the previous seq space is unrelated to the new one.
//
// Every resume() registers the client (when it has an id), so a client is
// "known" from its first subscribe on; the registry is an LRU of
// `max_clients` ids.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

namespace outbound {

/// One retained event of the ring.
struct ring_entry {
  int64_t seq = 0;
  std::string subject;
  /// The serialized event frame `{"type":"event",...}` sent to subscribers.
  std::shared_ptr<const std::string> frame;
};

/// Why a subscribe resumed or resynced. Each resync reason maps one-to-one to
/// a counter label of the hub's state.
enum class resume_decision {
  /// Recoverable: the retained (last_seq, head] is replayed.
  resume,
  /// The ring is disabled (capacity 0): nothing is retained.
  resync_ring_disabled,
  /// The subscribe carried no last_seq (first connect).
  resync_no_last_seq,
  /// The subscribe carried another incarnation's epoch (hub restarted).
  resync_foreign_epoch,
  /// The client id was never seen by this incarnation (or was evicted from
  /// the registry, or is empty).
  resync_unknown_client,
  /// last_seq < floor: events after it were evicted from the ring.
  resync_below_floor,
  /// last_seq > head: the client claims events this incarnation never had.
  resync_above_head,
};

/// Name of a decision ("resume", "ring_disabled", "no_last_seq", ...).
const char* to_string(resume_decision d);

/// The answer to a subscribe.
struct resume_result {
  resume_decision decision = resume_decision::resync_no_last_seq;
  /// The boundary: the head at the moment of the snapshot. Live events with
  /// seq <= head must not be sent to this subscriber again.
  int64_t head = 0;
  /// Events to send before any live event (resume only), seq ascending.
  std::vector<ring_entry> replay;

  bool resync() const {
    return decision != resume_decision::resume;
  }
};

/// Default capacity of the ring (hypermanager's catch_up_ring_size). [1024]
constexpr std::size_t default_ring_size = 1024;

/// Default size of the client registry.
constexpr std::size_t default_max_clients = 65536;

/// A random epoch: 16 lowercase hex characters (64 bits from `rng`).
std::string make_hub_epoch(std::mt19937_64& rng);

/// The bounded catch-up ring.
class catchup_ring {
public:
  /// `capacity` 0 disables retention (every subscribe resyncs).
  catchup_ring(std::size_t capacity, std::string epoch,
               std::size_t max_clients = default_max_clients);

  /// Stores an event with seq head()+1 (evicting the oldest when full) and
  /// returns that seq. With capacity 0 the seq still advances.
  int64_t publish(std::string subject, std::shared_ptr<const std::string> frame);

  /// Decides a subscribe (see the diagram) and registers `client_id`.
  /// `epoch` absent or empty counts as "not foreign" (catchup.py: null on
  /// a first connect, where last_seq is null too).
  resume_result resume(const std::string& client_id,
                       std::optional<int64_t> last_seq,
                       const std::optional<std::string>& epoch,
                       const std::vector<std::string>& prefixes);

  /// Starts a new incarnation: `epoch`, empty ring, seq from 1, no clients.
  void restart(std::string epoch);

  /// Last published seq (0 before the first).
  int64_t head() const {
    return head_;
  }

  /// Last evicted seq: the window is (floor, head].
  int64_t floor() const {
    return head_ - static_cast<int64_t>(entries_.size());
  }

  std::size_t size() const {
    return entries_.size();
  }

  std::size_t capacity() const {
    return capacity_;
  }

  const std::string& epoch() const {
    return epoch_;
  }

  /// True when `client_id` subscribed in this incarnation (and is still in
  /// the registry).
  bool known_client(const std::string& client_id) const;

  std::size_t clients() const {
    return clients_.size();
  }

  /// The retained entries, seq ascending.
  const std::deque<ring_entry>& entries() const {
    return entries_;
  }

private:
  void register_client(const std::string& client_id);

  std::size_t capacity_;
  std::string epoch_;
  std::size_t max_clients_;
  std::deque<ring_entry> entries_;
  int64_t head_ = 0;
  std::list<std::string> lru_; // most recent first
  std::unordered_map<std::string, std::list<std::string>::iterator> clients_;
};

} // namespace outbound
