#pragma once

// The lease store on etcd 3.4+ (the port in actors/group/lease_store.hpp),
// spoken through etcd's JSON gRPC gateway (POST <client URL>/v3/...) with
// outbound's own service client. What the gateway does and the limits it
// has are pinned in docs/etcd-gateway.md (tests: EtcdGateway.*); the store's
// behaviour against a real etcd in EtcdLeaseStore.* (both in
// tests/integration/group/).
//
// Keys, under base = <prefix><group>/:
//
//   members/<name>   {"v":1,"name","incarnation","peer","feeds"}   lease L
//   owners/<feed>    {"member","incarnation"}                       lease L
//   cursors/<feed>   {"v":1,"era":E,"offset":N,"epoch":"..."}       no lease
//
// Requests, one etcd call each (batches of feeds: one call per chunk):
//
//   join     lease/grant, then a txn: create_revision(members/<name>) == 0
//            ? put members/<name> with the lease : range it. A lost compare,
//            or any failure of the txn, revokes the granted lease.
//   renew    lease/keepalive with one JSON object: one renewal, one answer
//            line {"result":{...,"TTL":"<granted>"}}; no TTL = lost (0).
//   revoke   lease/revoke; NotFound (code 5) is not an error.
//   members  range over members/ (range_end = prefix with its last byte + 1).
//   claim    one txn per chunk, no compare, one nested txn per feed:
//              create_revision(owners/f) == 0
//              ? [put owners/f with the lease, range cursors/f]
//              : [range owners/f, range cursors/f]
//            won: the token is the batch's header revision (= the key's
//            create_revision); held by the same lease (a retry after a lost
//            answer): won with the key's create_revision; else held.
//   commit   one nested txn per feed:
//              create_revision(owners/f) == token
//              && mod_revision(cursors/f) == M
//              ? [put cursors/f] : [range owners/f, range cursors/f]
//   release  one nested txn per feed:
//              create_revision(owners/f) == token
//              ? [put cursors/f (when given), delete owners/f] : []
//
// Chunks: etcd checks max(len(compare), len(success), len(failure)) <=
// --max-txn-ops (128) per level, and a nested txn against 128 minus its
// parent's count: with 2 ops a branch at most 126 feeds per call. A request
// of n feeds goes out as ceil(n / 126) calls of equal size (128 feeds: two
// of 64), concurrently; a chunk whose call fails answers `error` for its
// feeds, and only when every chunk failed does the request fail with the
// first chunk's caf::error. A feed named twice in one request (etcd refuses
// a txn that writes one key twice, and applies nothing) is answered once
// (claims), or `error` for the repeats (commits, releases).
//
// Why a late commit cannot lower the stored cursor (the port's last
// commit rule). An HTTP call that timed out on the client may still reach
// etcd and be applied after the member sent a newer commit. Comparing the
// token alone would then let the older, lower cursor overwrite the newer
// one. So every commit also compares mod_revision(cursors/f) with M, the
// revision at which this store last saw the cursor written: the one read
// by the claim (0 when there was no cursor: etcd compares an absent key's
// mod_revision as 0), then the header revision of each successful commit.
// etcd's revisions only grow and every write of the key changes its
// mod_revision, so a commit applies only if the cursor is still exactly
// the one this store last knew; a commit that timed out carries an M that
// stops matching as soon as any later commit lands, so it can never land
// after one. If the late one lands first, the next commit's compare fails;
// its failure branch shows owners/f still ours (same create_revision) and
// cursors/f with a newer mod_revision: this store adopts that revision and
// answers `error` (not known written), and the core commits again at its
// next checkpoint, with a cursor at least as far (its commits only carry
// acknowledged progress, which only grows). A different owner
// create_revision, or no owner key, is `fenced`. A commit for a feed this
// store has not tracked uses M = 0 and takes the same path.
//
// Releases compare the token only: their cursor is the final acknowledged
// one (at least every earlier commit), and once the owner key is deleted
// every later-applied commit of the old token fails its token compare.
//
// Errors: a transport failure, a non-200 answer (read by the body's gRPC
// `code`, since gateways differ in HTTP statuses) or an answer that is not
// what etcd sends fails the request with a caf::error:
// caf::sec::request_timeout when the call timed out (the client's attempt
// timeout or deadline), caf::sec::runtime_error with
// "etcd <op>: <what>" otherwise. A stored value that does not parse is a
// per-feed `error` (claims) or a member record with only its name (the
// key's suffix; listings). Nothing an answer holds can throw out of the
// actor.

#include "actors/client/service_client.hpp"
#include "actors/group/lease_store.hpp"
#include "config/client_config.hpp"

#include <caf/actor_system.hpp>

#include <cstddef>
#include <string>

namespace outbound {
inline namespace group {

/// Feeds per etcd call of a claim, commit or release: 128 (--max-txn-ops)
/// minus 2 (the ops of one nested txn's branch). Larger requests are split.
inline constexpr std::size_t etcd_feeds_per_txn = 126;

/// How to reach etcd and where the group's keys are.
struct etcd_store_options {
  /// A client of etcd's gateway: its base_url is the client URL
  /// ("http://127.0.0.1:2379"). Calls are raw (every HTTP status is
  /// read, by its body's gRPC code). Retries: keepalive, range and revoke
  /// are marked idempotent; grant and txn are not (a retried txn is
  /// harmless to claims but answers `fenced` to a release that was
  /// applied). [none: one is made from `client_cfg`]
  service_client_actor client;
  /// The client made when `client` is unset (base_url = etcd's client
  /// URL, TLS, timeouts). The client's attempt timeout and deadline are
  /// the only bound on a call: the store waits for the client's answer
  /// without a timer of its own (the client answers every call by its
  /// deadline, and fails it at once when it stops). A CAF request timeout
  /// here would hold a strong reference to the store in CAF 0.17's clock
  /// until it fired, keeping the store, and an actor_system's shutdown,
  /// waiting that long. A group sets the deadline to its renew interval.
  client_config client_cfg;
  /// Key prefix of every group; non-empty, ends with '/'.
  /// ["/outbound/groups/"]
  std::string prefix = "/outbound/groups/";
  /// The group's name; non-empty, no '/'. Keys live under
  /// prefix + group + "/". Required.
  std::string group;
};

/// Spawns the etcd lease store: the typed actor of the port
/// (lease_store_actor; actors/group/lease_store.hpp) over etcd's JSON
/// gateway. Requests run concurrently (none waits for another's call).
/// Throws config_error naming the field ("group", "prefix", or the
/// client's own fields when it makes one).
lease_store_actor spawn_etcd_lease_store(caf::actor_system& sys,
                                         etcd_store_options opts);

} // namespace group
} // namespace outbound
