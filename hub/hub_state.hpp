#pragma once

// Everything the reference hub knows, as one pure state machine:
// the ledger log, the catch-up ring, the fault knobs and the counters. The
// server (hub.cpp, hub_http.cpp, hub_ws.cpp) holds it under one mutex,
// passes the time and its rng in, and turns the outcomes into bytes on
// sockets. No Beast, no clock, no rng of its own.
//
//   POST /v1/events ──► publish ─┬─ duplicate key ──► the earlier event, no fan-out
//                                └─ new ──► ledger id + ring seq + event frame
//                                           ├─ ledger subscribers: a wake (unless held
//                                           │   by an armed wake script, or dropped)
//                                           └─ catchup/ephemeral subscribers: the frame
//   GET /v1/events ──► replay ──► page (or a bare array: non_object_pages)
//   subscribe frame ──► subscribe(tier) ──► hello + catch-up replay + boundary
//   POST /admin/faults ──► apply_admin ──► knobs, retention, floor
//   POST /admin/restart ──► restart(epoch): new epoch, empty ring, seq from 1

#include "hub/catchup_ring.hpp"
#include "hub/hub_faults.hpp"
#include "hub/hub_wire.hpp"
#include "hub/ledger_log.hpp"

#include <boost/json/fwd.hpp>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

namespace outbound {

/// Sizes and limits of the hub's state (hypermanager's defaults).
struct hub_state_config {
  /// Catch-up ring capacity; 0 makes every catch-up subscribe resync. [1024]
  std::size_t ring_size = default_ring_size;
  /// Ledger retention: keep the last R events, 0 keeps all. [0]
  uint64_t retention = 0;
  /// Default and maximum replay page. [500]
  int replay_limit = 500;
  /// Dedupe keys remembered (LRU). [4096]
  std::size_t dedupe_capacity = 4096;
  /// Catch-up client ids remembered (LRU). [65536]
  std::size_t max_clients = default_max_clients;
  /// Largest serialized publish metadata. [4096]
  std::size_t metadata_max_bytes = default_metadata_max_bytes;
};

/// Counters shown by `GET /admin/state`.
struct hub_counters {
  uint64_t publishes = 0;  ///< events appended
  uint64_t duplicates = 0; ///< publishes answered with an earlier event
  uint64_t replays = 0;    ///< replay pages served
  uint64_t replay_resets = 0;      ///< pages with reset:true
  uint64_t non_object_pages = 0;   ///< pages sent as a bare array (fault)
  uint64_t lost_publish_answers = 0;  ///< publishes answered by a close (fault)
  uint64_t idempotent_replays = 0;    ///< POSTs answered from an earlier key
  uint64_t idempotency_conflicts = 0; ///< a key reused with another body
  uint64_t wakes_dropped = 0;      ///< wakes dropped by drop_wakes/probability
  uint64_t wakes_held = 0;         ///< natural wakes held by a wake script
  uint64_t scripts_fired = 0;      ///< wake scripts emitted
  uint64_t subscribes = 0;         ///< subscribe frames answered (all tiers)
  uint64_t resumes = 0;            ///< catch-up subscribes resumed
  uint64_t resyncs = 0;            ///< catch-up subscribes resynced
  uint64_t restarts = 0;           ///< restarts (admin or restart_every)
};

/// What a publish did.
struct publish_outcome {
  /// The stored event (the earlier one for a duplicate).
  ledger_event_ptr event;
  bool duplicate = false;
  /// The event frame for catchup/ephemeral subscribers (null: duplicate).
  std::shared_ptr<const std::string> frame;
  /// Ring seq of a new event (the event's own seq for a duplicate).
  int64_t seq = 0;
  /// True when this publish's natural wake is held back (a script armed).
  bool wake_held = false;
  /// A wake script that this publish made due: send exactly these wakes.
  std::vector<int64_t> fired_script;
};

/// What a replay answered.
struct replay_outcome {
  ledger_page page;
  /// The fault knob non_object_pages: render a bare array.
  bool bare_array = false;
};

/// The answer to one subscribe frame.
struct subscribe_outcome {
  /// The hello frame (absent when the connection's plan says no_hello).
  std::optional<std::string> hello;
  /// Catch-up replay frames to send right after the hello, seq ascending.
  std::vector<std::shared_ptr<const std::string>> replay;
  /// Live event frames with seq <= boundary must be suppressed.
  int64_t boundary = 0;
  /// Catch-up decision (ledger and ephemeral: resync_ring_disabled is never
  /// used; they report resume / resync_no_last_seq, see subscribe()).
  resume_decision decision = resume_decision::resync_no_last_seq;
};

/// The hub's whole state.
class hub_state {
public:
  /// `epoch` is the first incarnation's epoch (make_hub_epoch).
  hub_state(hub_state_config cfg, hub_faults faults, std::string epoch);

  /// Stores a validated publish at time `ts` (seconds since the Unix epoch).
  publish_outcome publish(const publish_input& in, double ts);

  /// Serves one replay page (counts a poll for the visibility lag).
  replay_outcome replay(const replay_query& q);

  /// Answers a subscribe on `tier`:
  /// - ledger: hello {mode ledger, seq: ring head, cursor: visible ledger
  ///   ceiling, resync false, epoch: ledger_epoch() or null}; no replay
  ///   (the client pulls).
  /// - catchup: the ring decides resume or resync (catchup_ring::resume);
  ///   hello {mode catchup, seq: head, cursor, resync, epoch}; on resume the
  ///   retained (last_seq, head] frames matching the prefixes.
  /// - ephemeral: hello {mode ephemeral, seq: head, cursor, resync true,
  ///   epoch}; nothing replayed.
  subscribe_outcome subscribe(hub_tier tier, const subscribe_request& req,
                              bool no_hello = false);

  /// Decides whether one wake to one connection is dropped (drop_wakes, or
  /// drop_wake_probability drawn from `rng`).
  bool drop_wake(std::mt19937_64& rng);

  /// Applies an admin patch: every hub_faults knob, plus `retention` (keep
  /// the last R ledger events from now on) and `floor` (trim every ledger
  /// id <= F). Keys in `extra_keys` are left to the caller. Nothing changes
  /// on an error; returns the detail.
  std::optional<std::string>
  apply_admin(const boost::json::object& patch,
              const std::vector<std::string>& extra_keys = {});

  /// A wake script that is due now (head already reached), disarming it;
  /// empty when none. Call after apply_admin.
  std::vector<int64_t> take_due_script();

  /// The fault knob lose_publish_answers: true (counted) if this publish's
  /// answer is to be lost (the connection closed instead).
  bool take_lost_publish_answer();

  /// What `POST /v1/events` with an Idempotency-Key
  /// (draft-ietf-httpapi-idempotency-key-header) finds for `key` and the
  /// request `body`: nothing (a first request: publish, then
  /// remember_idempotent), the first request's answer (the same key and
  /// body: answer it again, publish nothing), or a conflict (the same key
  /// with another body: 422).
  struct idempotent_lookup {
    const std::string* answer = nullptr;
    bool conflict = false;
  };
  idempotent_lookup find_idempotent(const std::string& key,
                                    const std::string& body);

  /// Remembers the answer of a first request with `key` and `body` (the
  /// body's size and std::hash, enough for a reference hub to tell a
  /// different body). The last `dedupe_capacity` keys are kept (oldest
  /// forgotten first).
  void remember_idempotent(const std::string& key, const std::string& body,
                           std::string answer);

  /// New incarnation: `epoch`, empty ring, seq from 1, clients forgotten.
  /// The ledger is durable and stays.
  void restart(std::string epoch);

  /// The next WebSocket connection's fault plan.
  connection_plan take_connection_plan();

  /// The ledger's incarnation id, sent in ledger hellos and replay pages
  /// (`"epoch"`): a watcher that sees it change knows the ledger was
  /// replaced (a restart without the old log, a restore from a backup) and
  /// that its cursor means nothing here. Empty sends null. [""]
  void set_ledger_epoch(std::string epoch) {
    ledger_epoch_ = std::move(epoch);
  }
  const std::string& ledger_epoch() const {
    return ledger_epoch_;
  }

  /// The gapless visible ledger ceiling (`GET /v1/cursor`).
  int64_t cursor() const {
    return ledger_.visible();
  }

  /// `{"epoch","seq","ring":{...},"ledger":{...},"faults":{...},
  /// "counters":{...}}`.
  boost::json::object state_json() const;

  ledger_log& ledger() {
    return ledger_;
  }
  const ledger_log& ledger() const {
    return ledger_;
  }
  catchup_ring& ring() {
    return ring_;
  }
  const catchup_ring& ring() const {
    return ring_;
  }
  const hub_faults& faults() const {
    return faults_;
  }
  const hub_counters& counters() const {
    return counters_;
  }
  const hub_state_config& config() const {
    return cfg_;
  }

private:
  bool script_due() const;

  hub_state_config cfg_;
  hub_faults faults_;
  ledger_log ledger_;
  std::string ledger_epoch_;
  catchup_ring ring_;
  hub_counters counters_;
  /// A remembered key: its body's size and hash (not the body: up to
  /// dedupe_capacity entries of 1 MiB bodies would be GiBs) and the answer.
  struct idempotent_entry {
    std::size_t body_size = 0;
    std::size_t body_hash = 0;
    std::string answer;
  };
  std::unordered_map<std::string, idempotent_entry> idempotent_;
  std::deque<std::string> idempotent_order_;
};

} // namespace outbound
