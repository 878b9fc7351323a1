#pragma once

// The decision core of one feed-group member, as a pure state machine: time
// is an argument, every input returns the actions the actor shell performs
// (store requests, watcher spawns and stops, fence deadlines). No CAF, no
// Asio, no clock.
//
// The protocol (the group's store is a linearizable key-value store with
// leases, etcd in production):
//   members/<name>  lease-bound, one per live member
//   owners/<feed>   lease-bound; the fencing token is its create_revision
//   cursors/<feed>  the committed cursor, written only by a CAS on the token
// Ownership lives in the store; members never decide each other's
// liveness. Fencing tokens follow Kleppmann's argument ("How to do
// distributed locking", 2016): Jepsen's etcd 3.4.3 analysis found etcd's
// key-value operations strict-serializable but its locks unsafe without a
// token, so every commit compares the token.
//
// clang-format off
//   start ─► [joining] ─on_joined─► [settling] ─ view unchanged for
//               ▲   │                  initial_settle, >= min_members
//               │   └ on_join_failed:          │
//               │     retry after renew        ▼
//               └── lease lost ─────────── [active] ◄─ claims, spawns,
//                   (stop all; rejoin as       │       checkpoints, renewals,
//                    a new generation)         │       rebalance (ticks)
//                                        leave ▼
//                                         [leaving] ─ all released, or
//                                              │      leave_by_ passed, or
//                                              │      the lease was lost
//                                              ▼
//                                           [left] (revoke_lease)
// clang-format on
//
// Rules (each pinned by tests/unit/core/group_state_test.cpp):
//
//  G1  Join: grant a lease of lease_ttl and register members/<name> in one
//      request (join_lease). A failure (the name is still held by a live
//      lease after a restart, or the store is unreachable) is retried every
//      renew_interval: waiting out the old lease is the only safe choice.
//  G2  Settle (Kafka's group.initial.rebalance.delay.ms): the member list
//      is polled every poll_interval; the member becomes active once the
//      list, including itself, has been unchanged for initial_settle and
//      lists at least min_members. A list without this member is ignored
//      (a poll that raced the registration, or a lease that is gone, which
//      the keepalive will tell).
//  G3  Desired = the feeds this member wins by rendezvous hashing over the
//      listed names (core/hrw.hpp). Claims go out for desired feeds that
//      are neither held nor being claimed, in batches of <= batch, when the
//      member becomes active, on every change of the listed names, every
//      reconcile_interval, min(reconcile_interval, 2 poll_interval) after
//      a claim of a desired feed answered `held` (its holder is about to
//      release it: a rebalance, a leave, an expiring lease), and at once
//      on a handoff hint; never while the deliveries are held; at most
//      max_feeds owned or in flight. At most max_inflight_batches claim
//      requests are in flight: the feeds of a trigger that do not fit go
//      out as answers free slots (one wave: a feed is asked at most once
//      per trigger, so a `held` or failed feed is not asked again until
//      the next trigger). A feed whose claim failed (G11) waits
//      min(reconcile_interval, 2 poll_interval) before it is asked again,
//      doubling with each failure in a row up to reconcile_interval.
//  G4  A won claim spawns a watcher resuming at the committed cursor the
//      claim read, at most max_starts_per_second (a token bucket of one
//      second's burst), never while a previous watcher of the same feed is
//      still stopping (one watcher per feed per process), never while held.
//  G5  Progress reports (acknowledged cursors of the current token) make a
//      feed dirty; every checkpoint_interval the dirty feeds are committed
//      (CAS on the token), at most one commit in flight per feed, so the
//      store never sees two commits of one feed racing, and at most
//      max_inflight_batches commit requests (the rest of a checkpoint goes
//      out as answers free slots; a failed feed waits for the next
//      checkpoint). Releases too are sent max_inflight_batches at a time
//      (a failed one is retried after checkpoint_interval). A fenced commit
//      stops the watcher and drops the ownership and its progress; an error
//      leaves the feed dirty for the next checkpoint.
//  G6  Renew every renew_interval. fence_deadline = send time of the
//      successful keepalive (or grant) + min(TTL answered, lease_ttl) -
//      fence_margin, on this member's clock; it only moves forward and is
//      sent to every watcher (fence_watchers). The deadline passing while
//      the lease is not known lost holds the deliveries (hold_deliveries);
//      a keepalive that succeeds with TTL > 0 and whose deadline lies
//      ahead lifts the hold (unhold_deliveries): the lease never expired,
//      so nobody else can own these feeds. A hold that lasts lease_ttl
//      (not while leaving: G9 bounds a leave itself) gives the lease up
//      (revoke_lease, then G7): keepalives this member
//      counts as timed out may still reach the store late over a slow link
//      and keep the lease alive, which would leave its feeds owned and
//      undelivered for as long as the link stays slow.
//  G7  A keepalive answering TTL <= 0 or "not found" means the lease is
//      lost: every watcher stops, progress is dropped (its commits would be
//      fenced), every reply of the old lease becomes stale, and the member
//      joins again with a new generation (a new lease and incarnation).
//  G8  Cooperative rebalance (Kafka KIP-429): a held feed that another
//      listed member now wins is released only once that member has been
//      listed for rebalance_delay: stop the watcher, then one request
//      writes the final cursor and deletes the owner key (CAS on the token)
//      and names the winner for a handoff hint (the feed_group shell has
//      no peer plane yet and sends none: the winner claims at its next
//      claim retry, G3). (The shell drains a
//      watcher stopped for a rebalance or a leave: its delivery in flight
//      is answered first, so the final cursor includes it.) A release that
//      fails keeps the feed claimed and is retried after
//      checkpoint_interval: the cursor is never given up unwritten.
//      Releases begin at most max_starts_per_second a second (a token
//      bucket of one second's burst, as G4's): the pace at which the
//      winner may start the feeds, so a feed handed over does not wait
//      unowned for the winner's bucket; the feeds not yet released are
//      delivered here until their turn (Kafka's KIP-429 moves partitions
//      in rounds for the same reason).
//  G9  Leave (paced, like G8): withdraw members/<name> from the list while
//      keeping the lease (withdraw_member), so that the others win this
//      member's feeds at their next poll and claim them as they come, and
//      in the same step begin releasing every held feed to its winner
//      among the other listed members on G8's bucket (no rebalance_delay:
//      they are listed already; the withdrawal's answer is not awaited, a
//      release being safe either way): one second's burst at once, the
//      rest at max_starts_per_second, delivering and checkpointing the
//      feeds not yet released until their turn. A feed changes hands when
//      its new owner can start it, so it is never unowned for long; the
//      releases take about max(0, held - rate) ÷ rate after the burst. When no
//      other member is listed, or the withdrawal fails (the others would
//      not want the feeds before the lease goes), every remaining feed is
//      released at once. A claim that is still in flight is released when
//      it is won; a watcher that ends by itself is released at once (no
//      spawns while leaving). Releases go out max_inflight_batches
//      requests at a time; once all are answered the lease is revoked. A
//      claim whose outcome is unknown (G11) is asked once more at the
//      leave (its back-off waived, the window's rest sent as answers free
//      slots), so that a key it may have created is released, not left
//      unserved until the revoke. Past the fence deadline (a hold, G6)
//      nothing is delivered here: every remaining feed is released at
//      once (a release compares the token, so it is safe even if the lease
//      is gone). If releases keep failing for lease_ttl plus held ÷
//      max_starts_per_second after the leave, the member revokes anyway
//      and stops; the feeds then move as after a crash (a leave always
//      ends).
//  G10 Every reply carries its request id; a reply whose request is not
//      pending (answered, or of an older lease) is dropped.
//  G11 A claim whose outcome is unknown (an error, a time-out) may have
//      created the owner key with this member's lease: the feed is claimed
//      again at the next trigger even if it is no longer desired (the
//      store answers "won" for a key the same lease holds), and a feed won
//      that way is then released by G8. Without this, a lost answer leaves
//      an owner key nobody serves until this member's lease ends.
//
// Decisions where the design study was silent or loose:
//  - The hold lifts only when the renewed deadline lies in the future: a
//    late keepalive answer proves the lease was alive when the store saw
//    it, not that it still is.
//  - The core is generic over one position per feed (group_position: a
//    ledger cursor or a catchup last_seq, with an era that orders it
//    across rewinds); the shell maps it to the stored checkpoint.
//  - The claim of a feed this member already holds in the store (a retry
//    after a lost answer) must be answered as won with the existing token
//    by the store port ("held by self" is a win).
//  - Settling is repeated after every (re)join, not only the first: after a
//    lost lease this member's feeds were taken anyway.
//  - A watcher that stops on its own (not asked to) within a tenure is
//    respawned at its last acknowledged cursor (no duplicates).
//  - At most one commit per feed is in flight, so the store never sees two
//    commits of one feed race. That keeps cursors monotone only if a
//    request that timed out is never applied later; a store port that
//    cannot promise it (an HTTP request may still reach etcd after the
//    client gave up) must also compare the stored cursor (for instance a
//    fixed-width cursor value compared as bytes) so that a late write
//    cannot lower it.
//  - A join whose answer was lost may leave a lease holding this member's
//    name; the retry then waits for that lease to expire (at most one
//    lease_ttl), like a restart within the TTL.
//  - When leaving, releases that keep failing are given up at lease_ttl
//    plus the pacing's time after the leave: the lease is revoked (or
//    expires on its own) and takeover is as after a crash.

#include "config/config_error.hpp"
#include "core/time.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

namespace outbound {
inline namespace core {

/// Monotonic time of a member, on its own clock (the same type as
/// feed_time, the watcher's clock; fence deadlines cross between them).
using group_time = std::chrono::steady_clock::time_point;

/// Timing and sizing of a group member. Seconds as doubles, like the other
/// configs; defaults are the design's (etcd with TTL 5 s).
struct group_state_config {
  /// Lease TTL in seconds (>= 2, etcd's minimum). Crash takeover is about
  /// lease_ttl + poll_interval.
  double lease_ttl = 5.0;
  /// Keepalive period in seconds (> 0, <= lease_ttl / 3: two renewals can
  /// fail before the fence).
  double renew_interval = 1.5;
  /// How long before the lease could expire a member stops delivering, in
  /// seconds (> 0, < lease_ttl - renew_interval). Must exceed 2 ρ lease_ttl
  /// for a clock rate error ρ, plus scheduling and one delivery.
  double fence_margin = 1.0;
  /// Member list poll period in seconds (> 0).
  double poll_interval = 0.5;
  /// Retry period of failed claims in seconds (> 0).
  double reconcile_interval = 5.0;
  /// Commit period of dirty cursors in seconds (> 0): the duplicate
  /// exposure on a crash.
  double checkpoint_interval = 1.0;
  /// Feeds per claim, commit or release request (1..128; etcd's
  /// --max-txn-ops defaults to 128).
  std::size_t batch = 64;
  /// Seconds the member list must stay unchanged before the first claims
  /// (>= 0; Kafka uses 3 s).
  double initial_settle = 3.0;
  /// Members listed before the first claims (>= 1).
  std::size_t min_members = 1;
  /// Seconds a new winner must have been listed before a feed moves to it
  /// (>= 0): damps flapping members.
  double rebalance_delay = 5.0;
  /// Watcher spawns per second (>= 1), a token bucket of one second's
  /// burst: protects the feed service during a takeover.
  std::size_t max_starts_per_second = 1000;
  /// Feeds owned or being claimed per member (>= 1); beyond, feeds stay
  /// unowned.
  std::size_t max_feeds = 20000;
  /// Store requests of each kind (claim, commit, release) in flight at
  /// once, in batches (1..1024). Feeds beyond the window wait for a slot,
  /// not for a timer: each answer sends the next batch. A member that must
  /// take thousands of feeds at once (a start, a peer's crash) otherwise
  /// sends every batch together and the store's requests time out in mass.
  /// The idea is Kafka's max.in.flight.requests.per.connection (5) and a
  /// TCP window: bound what is outstanding, pipeline the rest.
  std::size_t max_inflight_batches = 4;

  /// Throws group_config_error(*this) if there is one.
  void validate() const;
};

/// The first invalid field of `cfg` as a config_error naming it
/// ("group.renew_interval: must be <= lease_ttl / 3 ..."), or nullopt.
/// Every duration must also be <= 86400 s: added to a time point, a much
/// larger one would overflow int64 nanoseconds.
std::optional<config_error> group_config_error(const group_state_config& cfg);

/// A feed's position as the group orders and stores it: `offset` is a
/// ledger cursor or a catchup last_seq, and `era` counts the times the
/// feed's positions restarted (a ledger rewind, a catchup epoch change),
/// so that positions stay totally ordered across rewinds and owners: an
/// offset that goes back in a new era is still an advance, and a commit
/// can never lower what a feed has reached. `epoch` is the feed service's
/// epoch the offset belongs to (empty: unknown); it rides along for the
/// next owner's watcher and takes no part in the order. The shell bumps
/// the era when a progress report names a different epoch.
struct group_position {
  uint64_t era = 0;
  int64_t offset = 0;
  std::string epoch;

  friend bool operator<(const group_position& a, const group_position& b) {
    return a.era != b.era ? a.era < b.era : a.offset < b.offset;
  }
  friend bool operator>(const group_position& a, const group_position& b) {
    return b < a;
  }
  friend bool operator<=(const group_position& a, const group_position& b) {
    return !(b < a);
  }
  friend bool operator>=(const group_position& a, const group_position& b) {
    return !(a < b);
  }
  /// Same place in the order (the epoch is not compared).
  friend bool operator==(const group_position& a, const group_position& b) {
    return a.era == b.era && a.offset == b.offset;
  }
  friend bool operator!=(const group_position& a, const group_position& b) {
    return !(a == b);
  }
};

/// One listed member: its name and when this member first saw it listed
/// (on this member's clock, since the name's latest appearance).
struct listed_member {
  std::string name;
  group_time first_seen;
};

/// The answer of the store to one feed of a claim.
enum class claim_outcome : uint8_t {
  /// The owner key was absent (or already ours): `token` is its
  /// create_revision, `cursor` the committed cursor (nullopt: none yet).
  won,
  /// Another lease holds the owner key.
  held,
  /// The store failed this feed.
  error,
};

/// One feed's answer to a claim request.
struct claim_reply {
  std::string feed;
  claim_outcome outcome = claim_outcome::error;
  /// won: the fencing token (create_revision of owners/<feed>).
  uint64_t token = 0;
  /// won: the committed cursor (nullopt: nothing committed yet; the
  /// watcher starts at the feed's configured start).
  std::optional<group_position> cursor;
};

/// The answer of the store to one feed of a commit or a release.
enum class commit_outcome : uint8_t {
  /// Written (a release also deleted the owner key).
  ok,
  /// The token no longer matches: another owner, or the key is gone.
  fenced,
  /// Not known to be written.
  error,
};

/// One feed's answer to a commit or release request.
struct commit_reply {
  std::string feed;
  commit_outcome outcome = commit_outcome::error;
};

/// The answer to a keepalive.
enum class keepalive_outcome : uint8_t {
  /// Renewed; the answer carries the TTL left (<= 0 means lost).
  ok,
  /// The lease is gone (expired, revoked, not found).
  lost,
  /// No answer (time-out, store unreachable): nothing is known.
  error,
};

/// Why a watcher is stopped (one metric label each).
enum class stop_reason : uint8_t { rebalance, leave, fenced, lease_lost };

/// "rebalance", "leave", "fenced", "lease_lost".
const char* to_string(stop_reason r);

/// Grant a lease of lease_ttl and register members/<name> with it. A
/// generation > 0 is a rejoin after a lost lease (a new incarnation).
/// Answer: on_joined or on_join_failed with `request`.
struct join_lease {
  uint64_t request = 0;
  uint64_t generation = 0;
};

/// Read the member list. Answer: on_members with `request`.
struct poll_members {
  uint64_t request = 0;
};

/// Claim `feeds` (create owners/<feed> with the lease if absent, read the
/// cursor). Answer: on_claimed / on_claim_failed.
struct claim_feeds {
  uint64_t request = 0;
  std::vector<std::string> feeds;
};

/// Start the feed's watcher at `resume` (nullopt: the feed's configured
/// start), stamping `token` on its events; it must not start a delivery at
/// or after `fence_deadline` (this member's clock).
struct spawn_watcher {
  std::string feed;
  uint64_t token = 0;
  std::optional<group_position> resume;
  group_time fence_deadline;
};

/// Stop the feed's watcher; it answers on_watcher_stopped with its final
/// acknowledged cursor.
struct stop_watcher {
  std::string feed;
  uint64_t token = 0;
  stop_reason reason = stop_reason::rebalance;
};

/// One feed of a commit: write `cursor` if owners/<feed> still has
/// create_revision `token`.
struct commit_item {
  std::string feed;
  uint64_t token = 0;
  group_position cursor;
};

/// Commit cursors. Answer: on_committed / on_commit_failed.
struct commit_cursors {
  uint64_t request = 0;
  std::vector<commit_item> items;
};

/// One feed of a release: if the token matches, write the final cursor
/// (when known) and delete owners/<feed>; then hint `hint_to` (may be
/// empty) that it can claim at once.
struct release_item {
  std::string feed;
  uint64_t token = 0;
  std::optional<group_position> cursor;
  std::string hint_to;
};

/// Release feeds. Answer: on_released / on_release_failed.
struct release_feeds {
  uint64_t request = 0;
  stop_reason reason = stop_reason::rebalance;
  std::vector<release_item> items;
};

/// Send a keepalive. Answer: on_keepalive with `request`.
struct renew_lease {
  uint64_t request = 0;
};

/// Send the new fence deadline to every running watcher.
struct fence_watchers {
  group_time deadline;
};

/// The fence deadline passed while the lease is not known lost: every
/// running watcher holds its deliveries (keeps its session).
struct hold_deliveries {};

/// The lease was proven alive: running watchers deliver again, up to
/// `deadline`.
struct unhold_deliveries {
  group_time deadline;
};

/// Delete members/<name> if this member's lease still binds it, keeping
/// the lease and the owner keys (G9: the others stop listing this member
/// and claim its feeds as they are released). Answer: on_withdrawn or
/// on_withdraw_failed with `request`.
struct withdraw_member {
  uint64_t request = 0;
};

/// Revoke the lease (best effort; no answer is needed).
struct revoke_lease {
  uint64_t request = 0;
};

/// What the shell must do.
using group_action
  = std::variant<join_lease, poll_members, claim_feeds, spawn_watcher,
                 stop_watcher, commit_cursors, release_feeds, renew_lease,
                 fence_watchers, hold_deliveries, unhold_deliveries,
                 withdraw_member, revoke_lease>;

/// The actions of one input, in order.
using group_actions = std::vector<group_action>;

/// Counters of a member (the metrics read them).
struct group_counters {
  /// Claim answers per feed, by claim_outcome.
  uint64_t claims_won = 0, claims_held = 0, claim_errors = 0;
  /// Commit answers per feed, by commit_outcome.
  uint64_t commits_ok = 0, commits_fenced = 0, commit_errors = 0;
  /// Ownerships given up, by stop_reason (index), each counted once:
  /// rebalance and leave count a feed when the first release of its
  /// tenure is sent (its retries after an error do not count again, nor
  /// does the lease lost or the leave giving up while they go on); fenced
  /// and lease_lost count ownerships dropped without a release sent. A
  /// leave that gives up (G9) before a feed's release was sent does not
  /// count that feed.
  std::array<uint64_t, 4> dropped{};
  /// Keepalive answers, by keepalive_outcome.
  uint64_t renewals_ok = 0, renewals_error = 0, renewals_lost = 0;
  /// hold_deliveries emitted, joins after a lost lease, watchers spawned.
  uint64_t holds = 0, rejoins = 0, spawns = 0;
  /// Holds that lasted lease_ttl and gave the lease up (G6).
  uint64_t hold_timeouts = 0;
  /// Joins that failed (store unreachable, or the name still held by a
  /// live lease after a restart).
  uint64_t join_errors = 0;
};

/// The member's phase (see the diagram).
enum class group_phase : uint8_t {
  idle,
  joining,
  settling,
  active,
  leaving,
  left
};

/// "idle", "joining", "settling", "active", "leaving", "left".
const char* to_string(group_phase p);

/// One member's decisions (see the header comment).
class group_state {
public:
  /// A member named `member` (its HRW identity) of a group serving the
  /// static feed set `feeds`. `cfg` is validated here (throws
  /// config_error).
  group_state(group_state_config cfg, std::string member,
              std::vector<std::string> feeds);

  /// Starts joining: join_lease.
  group_actions start(group_time now);

  /// The join of `request` succeeded with a lease of `ttl_seconds`.
  group_actions on_joined(uint64_t request, double ttl_seconds, group_time now);

  /// The join of `request` failed (retried after renew_interval).
  group_actions on_join_failed(uint64_t request, group_time now);

  /// The member list read by poll `request`.
  group_actions on_members(uint64_t request,
                           const std::vector<listed_member>& members,
                           group_time now);

  /// Per-feed answers to claim `request`; feeds without an answer count
  /// as errors.
  group_actions on_claimed(uint64_t request,
                           const std::vector<claim_reply>& replies,
                           group_time now);

  /// Claim `request` failed as a whole.
  group_actions on_claim_failed(uint64_t request, group_time now);

  /// A peer released `feed` for this member: claim it now if desired.
  group_actions on_handoff_hint(const std::string& feed, group_time now);

  /// The watcher of `feed` with `token` had `cursor` acknowledged.
  group_actions on_progress(const std::string& feed, uint64_t token,
                            group_position cursor, group_time now);

  /// Per-feed answers to commit `request` (missing feeds: errors).
  group_actions on_committed(uint64_t request,
                             const std::vector<commit_reply>& replies,
                             group_time now);

  /// Commit `request` failed as a whole.
  group_actions on_commit_failed(uint64_t request, group_time now);

  /// Per-feed answers to release `request` (missing feeds: errors).
  group_actions on_released(uint64_t request,
                            const std::vector<commit_reply>& replies,
                            group_time now);

  /// Release `request` failed as a whole.
  group_actions on_release_failed(uint64_t request, group_time now);

  /// The keepalive of `request` answered (`ttl_seconds` with ok).
  group_actions on_keepalive(uint64_t request, keepalive_outcome outcome,
                             double ttl_seconds, group_time now);

  /// The watcher of `feed` with `token` stopped; `final_cursor` is its
  /// last acknowledged cursor.
  group_actions on_watcher_stopped(const std::string& feed, uint64_t token,
                                   std::optional<group_position> final_cursor,
                                   group_time now);

  /// Leave gracefully (G9).
  group_actions leave(group_time now);

  /// The withdrawal of `request` (G9) succeeded: the others no longer
  /// list this member.
  group_actions on_withdrawn(uint64_t request, group_time now);

  /// The withdrawal of `request` failed or timed out: every remaining
  /// feed is released at once (G9).
  group_actions on_withdraw_failed(uint64_t request, group_time now);

  /// The timers: call at next_wakeup() (calling earlier is harmless).
  group_actions tick(group_time now);

  /// When the member next wants a tick (time_point::max(): never).
  group_time next_wakeup() const;

  /// The current phase (see the diagram).
  group_phase phase() const noexcept {
    return phase_;
  }

  /// The deliveries are held (G6).
  bool holding() const noexcept {
    return holding_;
  }

  /// The current fence deadline (meaningful once joined).
  group_time fence_deadline() const noexcept {
    return deadline_;
  }

  /// Lease generation: 0, then +1 per rejoin.
  uint64_t generation() const noexcept {
    return generation_;
  }

  /// The feeds this member wins in its current view, sorted.
  std::vector<std::string> desired() const;

  /// The feeds this member holds in the store (won, not yet released or
  /// dropped), sorted.
  std::vector<std::string> owned() const;

  /// The token of a held feed.
  std::optional<uint64_t> token_of(const std::string& feed) const;

  /// Counters since construction.
  const group_counters& counters() const noexcept {
    return counters_;
  }

  /// This member's name.
  const std::string& member() const noexcept {
    return member_;
  }

private:
  enum class ownership : uint8_t { none, claiming, held, releasing };
  enum class watcher : uint8_t { none, running, stopping };

  struct feed_entry {
    ownership own = ownership::none;
    watcher w = watcher::none;
    bool desired = false;
    /// The last claim's outcome is unknown (G11).
    bool uncertain = false;
    bool spawn_pending = false;
    /// Release once the watcher has stopped (own == releasing).
    bool release_ready = false;
    /// A release of this tenure was sent (and counted in dropped).
    bool release_sent = false;
    stop_reason release_reason = stop_reason::rebalance;
    uint64_t token = 0;
    uint64_t watcher_token = 0;
    uint64_t claim_request = 0;
    uint64_t commit_request = 0;
    uint64_t release_request = 0;
    /// The claim wave (claim_wave_) and checkpoint (commit_wave_) that last
    /// asked for this feed: a continuation skips it.
    uint64_t claim_wave = 0;
    uint64_t commit_wave = 0;
    /// Claims failed in a row, and when the feed may be asked again.
    uint32_t claim_failures = 0;
    group_time claim_retry_at{};
    group_position commit_cursor;
    std::optional<group_position> committed;
    std::optional<group_position> progress;
    std::string winner;
  };

  void step(group_time now, group_actions& out);
  void refresh_desired();
  void issue_claims(group_time now, bool next_wave, group_actions& out);
  void issue_commits(bool next_wave, group_actions& out);
  void retry_releases(group_time now);
  void issue_releases(group_actions& out);
  void issue_spawns(group_time now, group_actions& out);
  void check_rebalance(group_time now, group_actions& out);
  void pace_leave(group_time now, group_actions& out);
  void release_all_due(group_actions& out);
  void begin_release(const std::string& feed, feed_entry& e, stop_reason why,
                     group_actions& out);
  void drop_ownership(const std::string& feed, feed_entry& e, stop_reason why,
                      group_actions& out);
  void lose_lease(group_time now, group_actions& out);
  void extend_deadline(group_time sent, double ttl_seconds, group_time now,
                       group_actions& out);
  bool leased() const noexcept;
  std::optional<group_position> best_cursor(const feed_entry& e) const;
  std::size_t load() const;
  uint64_t next_id() noexcept {
    return ++request_seq_;
  }

  group_state_config cfg_;
  duration ttl_, renew_, margin_, poll_, reconcile_, checkpoint_, settle_,
    rebalance_;
  std::string member_;
  std::map<std::string, feed_entry> feeds_;
  /// Feeds that may be ready to release, waiting for a watcher, or held
  /// while another listed member wins them: supersets of what each scan
  /// below needs (an entry is added when a feed may start to qualify and
  /// dropped when a scan finds that it no longer does), in feed order like
  /// feeds_. A step then costs what is pending, not a pass over every feed
  /// of the group: with thousands of feeds a pass per input (every
  /// progress report, every stopped watcher) kept the actor busy for
  /// seconds in a mass rebalance, and its lease renewal waited
  /// (bench/README.md, scaleout, "The full size").
  /// Release candidates by reason (0: rebalance, 1: leave).
  std::array<std::set<std::string>, 2> release_candidates_;
  std::set<std::string> spawn_candidates_;
  /// Rebalance candidates by their winner: a winner's feeds come due
  /// together, rebalance_delay after it was first listed.
  std::map<std::string, std::set<std::string>> rebalance_candidates_;
  /// Feeds whose rebalance is due, waiting for a handoff token (G8); when
  /// leaving, the held feeds not yet released (G9).
  std::set<std::string> handoff_due_;
  /// The withdrawal in flight (G9; 0: none).
  uint64_t withdraw_request_ = 0;
  static std::size_t reason_index(stop_reason why) noexcept {
    return why == stop_reason::leave ? 1 : 0;
  }
  void add_release_candidate(const std::string& feed, const feed_entry& e) {
    release_candidates_[reason_index(e.release_reason)].insert(feed);
  }

  group_phase phase_ = group_phase::idle;
  uint64_t generation_ = 0;
  uint64_t request_seq_ = 0;

  uint64_t join_request_ = 0;
  group_time join_sent_{};
  group_time join_retry_at_{};
  /// Leaving: releases are given up at this time (leave + lease_ttl +
  /// held ÷ max_starts_per_second).
  group_time leave_by_ = group_time::max();

  group_time deadline_{};
  bool holding_ = false;
  /// When the current hold began.
  group_time hold_since_{};
  std::map<uint64_t, group_time> renew_sent_;
  group_time next_renew_{};

  uint64_t last_view_request_ = 0;
  group_time next_poll_{};
  bool have_view_ = false;
  std::vector<std::string> view_;
  std::map<std::string, group_time> first_seen_;
  group_time view_changed_{};

  bool claim_wanted_ = false;
  group_time next_reconcile_{};
  group_time next_checkpoint_{};
  /// Waves (see G3, G5): their numbers, and whether the current one still
  /// has feeds that did not fit the window.
  uint64_t claim_wave_ = 0, commit_wave_ = 0;
  bool claims_pending_ = false, commits_pending_ = false;
  /// When a feed whose claim failed may be asked again (max: none).
  group_time claim_retry_at_ = group_time::max();
  std::map<uint64_t, std::vector<std::string>> claims_;
  std::map<uint64_t, std::vector<std::string>> commits_;
  std::map<uint64_t, std::vector<std::string>> releases_;
  /// When failed releases are sent again (max: none failed).
  group_time release_retry_ = group_time::max();
  /// When claims of desired feeds answered `held` are sent again (max:
  /// none), and the period: min(reconcile_interval, 2 poll_interval).
  group_time held_retry_at_ = group_time::max();
  duration held_retry_{};

  /// A token bucket of one second's burst, starting full (G4, G8).
  struct rate_bucket {
    double tokens = 0;
    group_time refilled{};
    void refill(group_time now, double rate) {
      if (now <= refilled)
        return;
      auto dt = std::chrono::duration<double>(now - refilled).count();
      tokens = std::min(rate, tokens + dt * rate);
      refilled = now;
    }
    bool take() {
      if (tokens < 1.0)
        return false;
      tokens -= 1.0;
      return true;
    }
    /// When the next whole token is there (a nanosecond late, never early).
    group_time next_token(double rate) const {
      return refilled + from_seconds(std::max(0.0, (1.0 - tokens) / rate))
             + duration{1};
    }
  };
  double starts_rate() const {
    return static_cast<double>(cfg_.max_starts_per_second);
  }
  /// G4's watcher starts; G8's rebalance releases, at the same rate.
  rate_bucket spawn_bucket_, handoff_bucket_;

  group_counters counters_;
};

} // namespace core
} // namespace outbound
