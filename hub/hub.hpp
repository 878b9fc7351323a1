#pragma once

// The reference hub (docs/ARCHITECTURE.md): a real HTTP + WebSocket server for
// the feed protocol, run by `outbound hub`, by the tests, the benchmarks and
// the demo in-process. Beast stays in the .cpp files; this header is plain C++.
//
//   HTTP    POST /v1/events            publish (dedupe_key honoured)
//           GET  /v1/events?after&limit&prefix   replay page
//           GET  /v1/cursor            {"cursor":N}
//   WS      /ws/feed                   the tier of hub_config::mode
//           /ws/ledger /ws/catchup /ws/ephemeral   always that tier
//   admin   POST /admin/faults  POST /admin/restart  POST /admin/wakes
//           POST /admin/drop    GET  /admin/state
//   latency /fast /slow /flaky /steady /lognormal?mean_ms&sd_ms&straggler&mult&
//           straggler_ms&key&seed — answered after a drawn delay (hedging;
//           hub/latency_profile.hpp); the seed defaults to hub_config::seed
//   oracle  POST /v1/ts  POST /v1/seq  (coalescing; hub/oracle_state.hpp)
//           POST /admin/oracle  GET /admin/oracle
//
// Oracle cluster (for the coalescing driver). With cluster_size = n > 1 the
// hub listens on n ports (node 0 on port(), the others on
// oracle_endpoints()); every port serves every route, and the n nodes share
// one oracle state, as if replicated. The oracle routes answer on the leader
// only; a follower answers 421 with `leader-hint: host:port; epoch=E` (no
// header while leaderless). A hub with cluster_size 1 is one leader alone.
//
// Example:
//
//   outbound::hub_config cfg;            // 127.0.0.1, port 0, ledger
//   cfg.faults.visibility_lag_polls = 2;
//   outbound::hub h{cfg};
//   h.start();
//   auto url = h.base_url();             // "http://127.0.0.1:41234"
//   h.publish("orders/1", "created");
//   h.stop();

#include "hub/hub_faults.hpp"
#include "hub/hub_wire.hpp"
#include "hub/oracle_state.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace outbound {

/// Settings of one hub. Defaults are hyperdjango's hypermanager hub's.
struct hub_config {
  /// Address to bind; loopback only unless changed. ["127.0.0.1"]
  std::string host = "127.0.0.1";
  /// TCP port; 0 picks a free one (see hub::port()). [0]
  uint16_t port = 0;
  /// Tier served on /ws/feed. [ledger]
  hub_tier mode = hub_tier::ledger;
  /// Catch-up ring capacity (0: every catch-up subscribe resyncs). [1024]
  std::size_t ring_size = 1024;
  /// Ledger retention: keep the last R events (0 keeps all). [0]
  uint64_t retention = 0;
  /// Default and maximum replay page (>= 1). [500]
  int replay_limit = 500;
  /// Seed of the hub's rng (epochs, drop_wake_probability). Absent: random.
  std::optional<uint64_t> seed;
  /// io threads (>= 1). [1]
  int threads = 1;
  /// Per-connection send queue of live event frames; overflow closes the
  /// connection with 1013 (try again later). The hello's catch-up replay
  /// (at most ring_size frames) is not counted against it. [2048]
  std::size_t queue_max = 2048;
  /// Catch-up client ids remembered (LRU). [65536]
  std::size_t max_clients = 65536;
  /// Dedupe keys remembered (LRU). [4096]
  std::size_t dedupe_capacity = 4096;
  /// Largest serialized publish metadata in bytes. [4096]
  std::size_t metadata_max_bytes = 4096;
  /// Deepest publish metadata (`{}` is 1; 1 .. 61, so that a replay page,
  /// three levels more, parses under the client's default depth of 64).
  /// Deeper is a 400. [32]
  std::size_t metadata_max_depth = 32;
  /// Longest publish subject in bytes (>= 1). Longer is a 400. [1024]
  std::size_t subject_max_bytes = 1024;
  /// Largest stored event (as replay serves it) in bytes; at least
  /// metadata_max_bytes + 132, and replay_limit * event_max_bytes at most
  /// max_replay_page_bytes (5 MiB: 1024 events at the default). Larger is
  /// a 400. [5120]
  std::size_t event_max_bytes = 5120;
  /// Keep the ledger in this file (JSON lines, hub/ledger_file.hpp), so a
  /// restarted hub serves the same ledger with the same ids and ledger
  /// epoch (its ledger watchers go on without a reset; the catch-up and
  /// ephemeral tiers restart with a new epoch). Empty: the ledger lives in
  /// memory and each process is a new ledger incarnation. [""]
  std::string ledger_file;
  /// Largest HTTP request body in bytes. [1 MiB]
  std::size_t max_request_body = 1024 * 1024;
  /// Largest WebSocket message the hub reads from a client. [64 KiB]
  std::size_t ws_read_max = 64 * 1024;
  /// Initial fault knobs (all off).
  hub_faults faults;
  /// Nodes of the oracle cluster, each on its own port (1..16). With an
  /// explicit `port` P, node i listens on P + i; with port 0 each picks a
  /// free one. [1]
  std::size_t cluster_size = 1;
  /// How long a node in mode stall holds an oracle request before closing
  /// it unanswered, seconds (> 0). [30]
  double oracle_stall_seconds = 30.0;
  /// Distinct sequence keys the oracle keeps (>= 1). [4096]
  std::size_t oracle_max_seq_keys = 4096;
  /// Whether the oracle serves `POST /v1/seq`; false answers every seq
  /// request 501 "not supported" (hub/oracle_state.hpp). [true]
  bool oracle_seq_supported = true;

  /// The publish limits above, as parse_publish takes them.
  publish_limits publishing() const;

  /// Throws config_error naming the first bad field (`replay_limit`,
  /// `threads`, `queue_max`, `host`, `metadata_max_depth`,
  /// `subject_max_bytes`, `event_max_bytes`, `cluster_size`,
  /// `oracle_stall_seconds`, `oracle_max_seq_keys`).
  void validate() const;
};

/// A stored event as `publish` answers it.
struct hub_published {
  int64_t id = 0;
  int64_t seq = 0;
  /// True when the dedupe key was seen before (the earlier event).
  bool duplicate = false;
  /// `{"id","seq","subject","kind","metadata","ts"}`.
  std::string json;
};

/// The hub server. Not copyable; stop() (or the destructor) ends it.
class hub {
public:
  /// Validates `cfg` (config_error); does not bind yet.
  explicit hub(hub_config cfg);

  /// Stops the hub if running.
  ~hub();

  hub(const hub&) = delete;
  hub& operator=(const hub&) = delete;

  /// Binds, listens and starts the io threads. Throws std::runtime_error
  /// when the address cannot be bound, std::logic_error when called twice.
  void start();

  /// Closes the listener and every connection (silent ones included),
  /// stops and joins the io threads. Idempotent; never call it from a hub
  /// thread.
  void stop();

  /// The bound port (valid after start()).
  uint16_t port() const;

  /// `http://HOST:PORT`.
  std::string base_url() const;

  /// Publishes in-process, exactly like `POST /v1/events`. Throws
  /// std::invalid_argument with the 400 detail for invalid input
  /// (`metadata_json` must be a JSON object text).
  hub_published publish(const std::string& subject, const std::string& kind,
                        const std::string& metadata_json = "{}",
                        const std::string& dedupe_key = "");

  /// Applies a fault patch, exactly like `POST /admin/faults` (JSON object
  /// text). Throws std::invalid_argument with the 400 detail.
  void set_faults(const std::string& patch_json);

  /// Restarts the catch-up tier like `POST /admin/restart`; returns the new
  /// epoch.
  std::string restart();

  /// Latency-profile requests that carried `tag=<tag>` so far (outage
  /// answers included; `GET /admin/state` lists every tag under
  /// server.profile_tags, at most 64, the requests of later tags under
  /// "(other)").
  uint64_t profile_requests(const std::string& tag) const;

  /// Hard-closes WebSocket connections like `POST /admin/drop`: TCP closed
  /// without a close frame, hub state (ledger, ring, epoch, catch-up
  /// clients) untouched. `tier` "ledger", "catchup" or "ephemeral" drops
  /// that tier's subscribed connections, "all" every WebSocket connection.
  /// Returns how many were dropped (also counted in /admin/state as
  /// server.dropped). Throws std::invalid_argument for another tier name.
  std::size_t drop_connections(const std::string& tier = "all");

  /// The body of `GET /admin/state`.
  std::string state_json() const;

  /// The current epoch.
  std::string epoch() const;

  // -- oracle cluster ------------------------------------------------------

  /// The nodes' `host:port` addresses, node i at index i (after start()).
  std::vector<std::string> oracle_endpoints() const;

  /// The oracle leader's index, or nullopt while leaderless. [0]
  std::optional<std::size_t> oracle_leader() const;

  /// The oracle's epoch (starts at 1, +1 on every leadership change).
  uint64_t oracle_epoch() const;

  /// Moves leadership to `node` (nullopt: leaderless), like
  /// `POST /admin/oracle {"leader":i|null}`; returns the new epoch. Throws
  /// std::out_of_range for node >= cluster_size.
  uint64_t move_leader(std::optional<std::size_t> node);

  /// Sets a node's mode, like `POST /admin/oracle {"node":i,"mode":..}`.
  /// Throws std::out_of_range for node >= cluster_size.
  void set_node_mode(std::size_t node, oracle_node_mode mode);

  /// Applies an oracle admin body like `POST /admin/oracle` (see
  /// oracle_state::apply_admin). Throws std::invalid_argument with the 400
  /// detail.
  void set_oracle(const std::string& admin_json);

  /// Implementation (private to hub/*.cpp).
  struct impl;

private:
  std::unique_ptr<impl> impl_;
};

} // namespace outbound
