#pragma once

// An in-memory lease store (actors/group/lease_store.hpp) for tests and
// single-process demos: every member of one process shares one store actor,
// which is trivially linearizable (one actor, one mailbox). It follows
// etcd's v3 semantics where the port leaves room:
//
//  - a revision counter that every modifying request bumps once (an etcd
//    transaction is one revision, so the feeds of one claim share it); the
//    fencing token of a feed is the create_revision of owners/<feed>, which
//    only grows from one claim to the next;
//  - leases with a TTL of at least min_ttl seconds (etcd's minimum is about
//    2 s with the default election timeout: 3/2 of it, rounded up to whole
//    seconds); a keepalive resets the TTL to the granted one; an expired or
//    revoked lease deletes every key bound to it in one revision;
//  - expiry runs on the actor clock (so it works in virtual time): lazily
//    at every request, and on a timer at the earliest expiry;
//  - a commit or release never lowers the stored cursor (the port's rule
//    for stores that may apply a request late).
//
// Fault injection for tests (memory_store_faults): the store unreachable,
// one operation failing without effect, or applied with its answer lost
// (the caller sees a time-out error at once).

#include "actors/group/lease_store.hpp"

#include <caf/actor_clock.hpp>
#include <caf/actor_system.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

namespace outbound {
inline namespace group {

/// The operations of the port (one fault setting each).
enum class store_op : uint8_t {
  join,
  renew,
  revoke,
  members,
  claim,
  commit,
  release,
  withdraw
};

/// Number of store_op values.
inline constexpr std::size_t store_op_count = 8;

/// How the store treats one operation.
enum class store_fault : uint8_t {
  /// Applied and answered.
  none,
  /// Not applied; answered with an error (caf::sec::runtime_error).
  fail,
  /// Applied, but the answer is lost: the caller gets
  /// caf::sec::request_timeout instead (it knows nothing of the outcome).
  lose,
};

/// Faults the store reads at every request (tests change them between
/// steps; on the test coordinator only, the store does not lock them).
struct memory_store_faults {
  /// Every request fails (runtime_error "store unreachable"), nothing is
  /// applied and no lease expires early: the store is cut off, not gone.
  bool unreachable = false;
  /// Per operation (index: store_op).
  std::array<store_fault, store_op_count> ops{};

  store_fault& operator[](store_op op) {
    return ops[static_cast<std::size_t>(op)];
  }
};

/// The store's contents, shared with tests that inspect it (or plant keys)
/// between steps on the test coordinator. Times are on the actor clock.
struct memory_store_data {
  struct lease {
    /// Granted TTL in seconds (>= min_ttl).
    double ttl = 0;
    caf::actor_clock::time_point expires;
  };
  struct member_key {
    member_record record;
    uint64_t lease = 0;
    uint64_t create_revision = 0;
  };
  struct owner_key {
    std::string member, incarnation;
    uint64_t lease = 0;
    /// The fencing token.
    uint64_t create_revision = 0;
  };
  /// The store's revision: +1 per modifying request (etcd starts at 1).
  uint64_t revision = 1;
  /// Last lease id handed out.
  uint64_t last_lease = 0;
  std::map<uint64_t, lease> leases;
  std::map<std::string, member_key> members;
  std::map<std::string, owner_key> owners;
  std::map<std::string, group_position> cursors;
  /// Requests answered, per operation (faults included).
  std::array<uint64_t, store_op_count> requests{};
};

/// Options of a memory store.
struct memory_store_options {
  /// Least TTL granted, in seconds (finite, > 0). [2, like etcd]
  double min_ttl = 2.0;
  /// Fault injection; none: no faults.
  std::shared_ptr<memory_store_faults> faults;
  /// The contents (tests pass one to inspect it); none: a private one.
  std::shared_ptr<memory_store_data> data;
};

/// Spawns a memory store implementing the port of
/// actors/group/lease_store.hpp exactly as documented there. Throws
/// config_error("min_ttl") for a bad min_ttl.
lease_store_actor spawn_memory_lease_store(caf::actor_system& sys,
                                           memory_store_options opts = {});

} // namespace group
} // namespace outbound
