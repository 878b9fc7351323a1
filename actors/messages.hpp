#pragma once

// Message types and atoms shared by outbound's actors, in one place. The
// value types themselves are CAF-free, in core/call_types.hpp.
//
// Every type here is local-only: outbound's actors talk inside one process,
// never over CAF's middleman. The types are therefore whitelisted with
// CAF_ALLOW_UNSAFE_MESSAGE_TYPE instead of carrying CAF 0.17 `inspect`
// overloads (which do not cover enums or boost::json::value); if outbound's
// actors are ever published remotely, these get inspect overloads and a
// type-id block.

#include "core/call_types.hpp"
#include "protocol/errors.hpp"
#include "protocol/http_types.hpp"

#include <boost/json/value.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>
#include <caf/type_id.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

CAF_BEGIN_TYPE_ID_BLOCK(outbound, caf::first_custom_type_id)
  CAF_ADD_ATOM(outbound, outbound, cancel_atom, "cancel")
  CAF_ADD_ATOM(outbound, outbound, done_atom, "done")
  CAF_ADD_ATOM(outbound, outbound, timeout_atom, "timeout")
  CAF_ADD_ATOM(outbound, outbound, retry_atom, "retry")
  CAF_ADD_ATOM(outbound, outbound, stats_atom, "stats")
  // Feed watcher (actors/feed/): stop request, subscriber acknowledgement,
  // and its own timers (a token or, for tick_atom, the fire time: stale
  // ones are dropped).
  CAF_ADD_ATOM(outbound, outbound, stop_atom, "stop")
  CAF_ADD_ATOM(outbound, outbound, ack_atom, "ack")
  CAF_ADD_ATOM(outbound, outbound, poll_atom, "feed_poll")
  CAF_ADD_ATOM(outbound, outbound, redrain_atom, "redrain")
  CAF_ADD_ATOM(outbound, outbound, tick_atom, "feed_tick")
  CAF_ADD_ATOM(outbound, outbound, reconnect_atom, "reconnect")
  // Feed watcher hooks of a feed group: a new fence deadline
  // (feed_watcher_actor) and the watcher's progress-report timer.
  CAF_ADD_ATOM(outbound, outbound, fence_atom, "fence")
  CAF_ADD_ATOM(outbound, outbound, progress_atom, "progress")
  // Feed groups (actors/group/): the lease store port and the member's
  // graceful leave.
  CAF_ADD_ATOM(outbound, outbound, grp_join_atom, "grp_join")
  CAF_ADD_ATOM(outbound, outbound, grp_renew_atom, "grp_renew")
  CAF_ADD_ATOM(outbound, outbound, grp_revoke_atom, "grp_revoke")
  CAF_ADD_ATOM(outbound, outbound, grp_members_atom, "grp_member")
  CAF_ADD_ATOM(outbound, outbound, grp_claim_atom, "grp_claim")
  CAF_ADD_ATOM(outbound, outbound, grp_commit_atom, "grp_commit")
  CAF_ADD_ATOM(outbound, outbound, grp_release_atom, "grp_rel")
  CAF_ADD_ATOM(outbound, outbound, grp_withdraw_atom, "grp_wdraw")
  CAF_ADD_ATOM(outbound, outbound, leave_atom, "leave")
  CAF_END_TYPE_ID_BLOCK(outbound)

  CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::http_request)
  CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::exchange_result)
  CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::call_request)
  CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::call_outcome)
  CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::client_event)
  CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::pool_stats)
