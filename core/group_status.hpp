#pragma once

// What a feed group member reports about itself (the answer to its
// `stats_atom`, `leave_atom` and `stop_atom`): plain values, no CAF, so the
// metrics exporter reads them without depending on the actors.

#include "core/group_state.hpp"

#include <cstdint>
#include <string>

namespace outbound {
inline namespace core {

/// One member's state and counters (all counters since the member started).
struct group_status {
  /// group_config::name, the member's name and its current incarnation
  /// (a new one per join).
  std::string group, member, incarnation;
  /// The member's phase (core/group_state.hpp).
  group_phase phase = group_phase::idle;
  /// A lease is held and not known lost.
  bool leased = false;
  /// Deliveries are held: the fence deadline passed while the store could
  /// not be reached (group_state rule G6).
  bool holding = false;
  /// Seconds until the fence deadline (negative: passed; 0 before the
  /// first join).
  double fence_in = 0;
  /// Members in the last store view; feeds configured, desired (won by
  /// this member over that view), owned (held in the store) and with a
  /// running watcher.
  uint64_t members = 0, feeds_total = 0, desired = 0, owned = 0, running = 0;
  /// The decision core's counters (claims, commits, releases, renewals,
  /// holds, rejoins, spawns).
  group_counters counters;
  /// Feeds handed in by a claim and out by a release (rebalance or leave).
  uint64_t moved_in = 0, moved_out = 0;
  /// Max over owned feeds of acknowledged-but-uncommitted events (the
  /// duplicate exposure if this member crashed now; 0 when unknown).
  uint64_t checkpoint_lag = 0;
  /// Age of the oldest uncommitted progress, in seconds (0: none).
  double checkpoint_age = 0;
  /// A join succeeded at least once (false: the member never held a
  /// lease, e.g. its store was unreachable the whole time).
  bool joined = false;
  /// Store requests that failed (no answer in time, or an error), of every
  /// kind: join, members, claim, commit, release, renew, revoke.
  uint64_t store_errors = 0;
  /// The newest of them as "<request>: <error text>" ("join: etcd
  /// lease/grant: ..."); empty: none so far.
  std::string last_store_error;
  /// Feeds held when the leave began (or won by a claim during it) whose
  /// release the store has not confirmed (ok or fenced): after the leave
  /// they are the ones whose final positions were not written (the next
  /// owner resumes at the last committed checkpoint). 0 before a leave.
  uint64_t unreleased = 0;
  /// The newest revoke of the member's current lease failed and nothing
  /// since proved that lease gone (a revoke of it that succeeded, or a
  /// join that replaced it): its keys (the member record, the owner keys
  /// of unreleased feeds) stay until the lease expires (at most
  /// lease_ttl). A failed revoke of an older lease does not count.
  bool revoke_failed = false;
};

} // namespace core
} // namespace outbound
