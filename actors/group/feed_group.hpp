#pragma once

// A feed group member (design: one live consumer per feed across processes,
// ownership delegated to a linearizable store with leases and fencing
// tokens). A thin actor over core::group_state (core/group_state.hpp, rules
// G1-G11), which decides everything; this actor feeds it the actor clock's
// `now`, the store's answers and the watchers' progress, and carries out
// its actions:
//
//   group_state action   ->  what the actor does
//   join_lease               (grp_join_atom, member_record, lease_ttl)
//   poll_members             (grp_members_atom); first_seen per name kept here
//   claim_feeds              (grp_claim_atom, lease, feeds)
//   commit_cursors           (grp_commit_atom, items)
//   release_feeds            (grp_release_atom, items)
//   renew_lease              (grp_renew_atom, lease), time-out renew_interval
//   withdraw_member          (grp_withdraw_atom, lease)
//   revoke_lease             (grp_revoke_atom, lease)
//   spawn_watcher            a feed watcher resuming at the position, then
//                            (fence_atom, deadline) to it
//   stop_watcher             leave_atom to it (a draining stop: the
//                            delivery in flight is answered first) for a
//                            rebalance or a leave, stop_atom when fenced or
//                            the lease is lost; its final progress report
//                            is the final position
//   fence_watchers / unhold  (fence_atom, deadline) to every watcher
//   hold_deliveries          (fence_atom, a deadline already passed)
//
// After every input one timer is armed for group_state::next_wakeup() (one
// pending tick, tagged with a generation; stale ticks are dropped). Store
// requests carry a time-out; an error or a time-out is "nothing known" to
// the core (G1, G10, G11). Watchers are monitored: one that dies is
// reported stopped at its last known position.
//
// Positions: a ledger feed's position is its cursor, a catchup feed's its
// last acknowledged seq; the era counts epoch changes seen by this member
// (see position_of), so a rewind still moves the committed position
// forward.

#include "actors/client/service_client.hpp"
#include "actors/feed/feed_config.hpp"
#include "actors/feed/feed_messages.hpp"
#include "actors/feed/feed_watcher.hpp"
#include "actors/group/lease_store.hpp"
#include "actors/messages.hpp"
#include "config/group_config.hpp"
#include "core/group_state.hpp"
#include "core/group_status.hpp"
#include "metrics/group_metrics.hpp"
#include "protocol/ws_session.hpp"

#include <caf/actor_system.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace outbound {
inline namespace group {

/// One feed of a group: its name (the same on every member: the HRW key
/// and the store's key) and its watcher configuration. `cfg.cursor` is
/// where a ledger feed starts when nothing is committed yet.
struct group_feed {
  std::string id;
  feed_config cfg;
};

/// Spawns one watcher (the hook tests replace): the default is
/// spawn_feed_watcher.
using watcher_spawner = std::function<feed_watcher_actor(
  caf::actor_system&, feed_config, feed_watcher_options)>;

/// The ports of a member and its delivery target (as for a single watcher,
/// feed_watcher_options), plus its store.
struct feed_group_options {
  /// Runs the replay GETs of every watcher (required when a feed has a
  /// replay_path; checked when its watcher is spawned).
  service_client_actor feed_client;
  /// Opens WebSocket sessions (required when a feed has a ws_path).
  std::shared_ptr<ws_connector> connector;
  /// The hub's origin and upgrade headers.
  feed_ws_endpoint ws;
  /// Delivery target of every watcher: a subscriber actor ...
  feed_subscriber_actor subscriber;
  /// ... or a batch subscriber ...
  feed_batch_subscriber_actor batch_subscriber;
  /// ... or callbacks (each watcher gets its own helper actor). Events and
  /// resets carry feed_id and owner_token.
  feed_callbacks callbacks;
  /// The group's store (required).
  lease_store_actor store;
  /// This process's incarnation id; each join registers
  /// "<incarnation>.<generation>". Empty: 32 random hex digits.
  std::string incarnation;
  /// Seed of the incarnation and the watchers' seeds; 0: random. [0]
  uint64_t seed = 0;
  /// Least time between two progress reports of a watcher, in seconds;
  /// negative: checkpoint_interval / 2. [-1]
  double progress_interval = -1;
  /// Spawns a watcher; empty: spawn_feed_watcher (tests put a fake here).
  watcher_spawner spawn_watcher;
  /// Where the member's status goes for Prometheus (outbound_group_*,
  /// metrics/group_metrics.hpp): updated at most once per second and once
  /// more when the member ends. None: no metrics. [none]
  std::shared_ptr<group_metrics> metrics;
};

/// Typed interface of a feed group member.
///
/// - `stats_atom -> group_status`: the member's phase, lease, fence,
///   counts and counters.
/// - `leave_atom -> group_status`: graceful leave (G9): the member's key is
///   withdrawn from the list (the lease kept) and every held feed is
///   released with its final position to its next winner, one second's
///   burst at once and the rest at max_starts_per_second, the others
///   delivered and checkpointed until their turn (each watcher drains first: it
///   waits for the answer to its delivery in flight, at most 2 ×
///   renew_interval, then is killed); then the lease is revoked. Answers once
///   the member has left and its revoke answered: at most lease_ttl + held ÷
///   max_starts_per_second for the leave (G9) plus the store time-out
///   (lease_ttl) for the revoke; then the actor quits.
/// - `stop_atom -> group_status`: stops every watcher and quits, releasing
///   nothing: the lease expires on its own and the feeds move as after a
///   crash. Answers once the watchers answered (or their stop timed out).
using feed_group_actor
  = caf::typed_actor<caf::replies_to<stats_atom>::with<group_status>,
                     caf::replies_to<leave_atom>::with<group_status>,
                     caf::replies_to<stop_atom>::with<group_status>>;

/// The group position of a progress report, given the feed's previous
/// position (nullopt: none known). The offset is the ledger cursor when
/// the watcher has one (a replay path), else the last acknowledged seq
/// (catchup; nullopt when neither is known: the report carries no
/// position). The epoch is the report's; the era is the previous one,
/// plus one when both epochs are known and differ (the feed's positions
/// restarted: a rewound ledger, a new catchup epoch); an unknown previous
/// epoch adopts the report's, and a report without one keeps the previous.
std::optional<group_position>
position_of(const feed_progress& p, const std::optional<group_position>& prev);

/// The catchup client id a group gives a feed whose config has none: the
/// first 32 hex digits of SHA-256 over "<group>/<feed>", the same on every
/// member and across restarts, so the next owner resumes the hub's replay
/// window of the previous one.
std::string group_client_id(const std::string& group, const std::string& feed);

/// Hex SHA-256 of the sorted feed ids, one per line: the member record's
/// feed_digest (members with other digests serve other feed sets).
std::string group_feed_digest(std::vector<std::string> feed_ids);

/// Spawns a member and starts joining. Throws config_error naming the
/// field: `cfg` invalid (group_config::validate: "group.<field>"), a feed
/// id validate_group_feed_ids refuses (`feeds[i].id`: empty, over 200
/// bytes, control characters, not UTF-8, a duplicate), a feed config invalid
/// (`feeds[i].cfg.<field>`), `store` missing, `progress_interval` over a
/// day; without a spawn_watcher hook also what every watcher needs
/// (`feed_client` for a replay_path, `connector` and `ws.origin` for a
/// ws_path, `subscriber`: a delivery target, `batch_subscriber`: not
/// both). An empty feed set is allowed (the member then only takes part
/// in the hashing).
feed_group_actor spawn_feed_group(caf::actor_system& sys, group_config cfg,
                                  std::vector<group_feed> feeds,
                                  feed_group_options opts);

} // namespace group
} // namespace outbound

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::group_status)
