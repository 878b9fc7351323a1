#pragma once

// The port between a feed group member and its linearizable store (etcd in
// production, memory in tests): the typed actor interface every store
// implements. The protocol and the key layout are group_state's
// (core/group_state.hpp):
//
//   <prefix><group>/members/<name>  {"name","incarnation","peer","feeds"}
//                                   bound to the member's lease
//   <prefix><group>/owners/<feed>   {"member","incarnation"}, bound to the
//                                   lease; the fencing token is the key's
//                                   create_revision
//   <prefix><group>/cursors/<feed>  the committed group_position, no lease,
//                                   written only by a compare-and-swap on
//                                   the token
//
// Errors are CAF errors (caf::sec::request_timeout when the store did not
// answer in time, caf::sec::runtime_error with a context string otherwise):
// the member then knows nothing about the outcome, which group_state's
// rules treat as "error" (G1, G10, G11). Per-feed outcomes of claims,
// commits and releases are values (claim_reply, commit_reply).

#include "actors/messages.hpp"
#include "core/group_state.hpp"

#include <caf/typed_actor.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace outbound {
inline namespace group {

/// What a member registers under members/<name> for the lifetime of its
/// lease.
struct member_record {
  /// The member's name (its rendezvous-hashing identity; stable across
  /// restarts so a restarted member gets its feeds back).
  std::string name;
  /// Unique per join (a new lease after a lost one is a new incarnation).
  std::string incarnation;
  /// Where the member's peer endpoint listens ("host:port"; empty: none).
  std::string peer;
  /// Digest of the member's configured feed set: members whose digests
  /// differ serve different feed sets (a deployment mistake to alert on).
  std::string feed_digest;
};

/// The store port. Every request answers or fails with a caf::error; none
/// blocks the store for other requests.
///
/// - `(grp_join_atom, record, ttl)`: grant a lease of `ttl` seconds (the
///   store may raise it to its minimum) and create members/<record.name>
///   bound to it, only if that key is absent. Answers `(lease id, ttl
///   granted)`. Fails if the name is held by another lease (a restart
///   within the old lease's TTL: the caller waits) or on any store error;
///   a lease granted for a failed join is revoked.
/// - `(grp_renew_atom, lease)`: one keepalive. Answers the TTL left in
///   seconds; <= 0: the lease is gone (expired, revoked, unknown). Fails
///   when nothing is known (time-out, store unreachable).
/// - `(grp_revoke_atom, lease)`: revoke the lease, which deletes every key
///   bound to it (members/<name>, the owner keys). Answers ack; an unknown
///   lease is not an error.
/// - `(grp_withdraw_atom, lease)`: delete members/<name> if `lease` binds
///   it, keeping the lease and every other key bound to it (a graceful
///   leave: the others stop listing the member while it hands its feeds
///   over). Answers ack, also when the key is absent or bound to another
///   lease (nothing is deleted then).
/// - `(grp_members_atom)`: the member records, in any order.
/// - `(grp_claim_atom, lease, feeds)`: per feed, create owners/<feed>
///   bound to `lease` if absent and read cursors/<feed>. A key the same
///   lease already holds answers `won` with its existing token (a retry
///   after a lost answer). One answer per feed, in any order; <= 128
///   feeds per request.
/// - `(grp_commit_atom, items)`: per item, write cursors/<feed> = cursor
///   if owners/<feed> still has create_revision == token (else `fenced`).
///   A store whose requests can be applied after the member gave up on
///   them must also make sure that such a late write cannot lower the
///   stored cursor. <= 128 items.
/// - `(grp_release_atom, items)`: per item, if owners/<feed> has
///   create_revision == token: write the cursor (when given) and delete
///   owners/<feed> in one step (else `fenced`). Hints are not the store's
///   business. <= 128 items.
using lease_store_actor = caf::typed_actor<
  caf::replies_to<grp_join_atom, member_record, double>::with<uint64_t, double>,
  caf::replies_to<grp_renew_atom, uint64_t>::with<double>,
  caf::replies_to<grp_revoke_atom, uint64_t>::with<ack_atom>,
  caf::replies_to<grp_withdraw_atom, uint64_t>::with<ack_atom>,
  caf::replies_to<grp_members_atom>::with<std::vector<member_record>>,
  caf::replies_to<grp_claim_atom, uint64_t,
                  std::vector<std::string>>::with<std::vector<claim_reply>>,
  caf::replies_to<grp_commit_atom,
                  std::vector<commit_item>>::with<std::vector<commit_reply>>,
  caf::replies_to<grp_release_atom,
                  std::vector<release_item>>::with<std::vector<commit_reply>>>;

} // namespace group
} // namespace outbound

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::member_record)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<outbound::member_record>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<outbound::claim_reply>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<outbound::commit_item>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<outbound::release_item>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<outbound::commit_reply>)
