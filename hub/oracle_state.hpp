#pragma once

// The hub's oracle cluster as pure state: a timestamp oracle, a
// gapless sequence oracle, and the leadership and fault modes of a cluster
// of nodes that share one replicated state. No I/O, no clock: the wall
// clock arrives as an argument (`now_ms`). The hub (hub/hub.cpp) routes
// `POST /v1/ts`, `POST /v1/seq` and `POST /admin/oracle` of every node to
// one oracle_state under its own mutex.
//
//   POST /v1/ts  {"count":N}           1 <= N <= 262,144
//     200 {"physical_ms":P,"logical_start":L,"count":N,"epoch":"E"}
//         the N timestamps (P << 18) | (L + i), i in [0, N)
//   POST /v1/seq {"key":"K","count":N} key 1..128 bytes, 1 <= N <= 65,536
//     200 {"start":S,"count":N,"epoch":"E"}   the block [S, S + N) of K
//   any node that is not the leader:
//     421 {"detail":"not the leader","leader":"host:port"|null,"epoch":"E",
//          "committed":false}
//         + header `leader-hint: host:port; epoch=E` while a leader is known
//   400 {"detail":"'count' must be ...","committed":false}
//         validation, naming the field (also the key-cardinality cap)
//   501 {"detail":"dense sequences are not supported ...","committed":false}
//         /v1/seq on an oracle built with seq_supported = false
//
// The pre-commit marker. Every rejection the oracle can prove committed
// nothing carries `"committed":false` in its JSON body: 400 (bad key or
// count, the key-cardinality cap), 421 (not the leader), 501 (not
// supported) and 503 (admin mode refuse, timestamp space exhausted). A
// non-2xx without the marker (a proxy's 502/503/504, a 500) says nothing
// about the allocation: a non-idempotent client must treat it as an
// uncertain outcome. The idea is tsoracle's split of GetSeq errors into
// pre-commit-certain statuses (INVALID_ARGUMENT, RESOURCE_EXHAUSTED,
// UNIMPLEMENTED, FAILED_PRECONDITION) and everything else (SeqUncertain);
// HTTP has no such status class, so the oracle states it in the body.
//
// Timestamps follow tsoracle's Timestamp packing (response.rs): 46 bits of
// physical milliseconds since the Unix epoch, 18 bits of logical counter.
// They strictly increase across calls, whatever the wall clock does: the
// physical part is max(now, last); a batch that does not fit in the rest of
// the current millisecond's logical space moves to the next millisecond
// (running ahead of the wall clock, like a hybrid logical clock).
//
// Epochs are decimal strings of a counter that starts at 1 and increases by
// one on every leadership change (set_leader), so a client can order them
// (the epoch guard of the client's leader cache).
//
// Node modes (fault injection for the client's tests; checked before the
// leader check, so they apply to leader and followers alike):
//
//   normal           answer
//   refuse           503 at once, nothing applied
//   stall            no answer: the HTTP layer holds the request until the
//                    client gives up or `stall_seconds` pass, then closes;
//                    nothing applied
//   commit_no_reply  a leader's allocation is applied, then the connection
//                    is closed without an answer (an uncertain outcome);
//                    answers that commit nothing (421, 400) are sent
//
//   cluster:  node 0 .. n-1, one leader (or none)
//
//       set_leader(i): epoch += 1, leader := i     (i may be the same node)
//       set_leader(nullopt): epoch += 1, leaderless: every node answers 421
//                            without a hint

#include <boost/json/fwd.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace outbound {

/// Bits of a timestamp's physical part (milliseconds since the Unix epoch).
constexpr int oracle_physical_bits = 46;

/// Bits of a timestamp's logical part.
constexpr int oracle_logical_bits = 18;

/// Largest physical part, 2^46 - 1 ms (year 4199).
constexpr uint64_t oracle_physical_max
  = (uint64_t{1} << oracle_physical_bits) - 1;

/// Largest logical part, 2^18 - 1.
constexpr uint32_t oracle_logical_max = (1u << oracle_logical_bits) - 1;

/// Most timestamps one `POST /v1/ts` may ask for: one millisecond's logical
/// space, 262,144.
constexpr uint32_t oracle_max_ts_count = oracle_logical_max + 1;

/// Settings of the oracle. Limits follow tsoracle-client (get_seq key, count).
struct oracle_config {
  /// Nodes of the cluster (1..16). [1]
  std::size_t nodes = 1;
  /// Distinct sequence keys the oracle keeps; a new key beyond is a 400.
  /// [4096]
  std::size_t max_seq_keys = 4096;
  /// Longest sequence key, bytes (1..4096). [128]
  std::size_t max_seq_key_bytes = 128;
  /// Largest block one `POST /v1/seq` may ask for (>= 1). [65,536]
  uint32_t max_seq_count = 65536;
  /// How long a stalled node holds a request before closing it without an
  /// answer, seconds (> 0). [30]
  double stall_seconds = 30.0;
  /// Whether `POST /v1/seq` is served. False: every seq request (on the
  /// leader, after the fault modes) is a 501 "not supported" with the
  /// pre-commit marker, like a tsoracle driver without dense sequences
  /// (UNIMPLEMENTED). [true]
  bool seq_supported = true;

  /// Throws config_error naming the first bad field (`oracle.nodes`,
  /// `oracle.max_seq_keys`, `oracle.max_seq_key_bytes`,
  /// `oracle.max_seq_count`, `oracle.stall_seconds`).
  void validate() const;
};

/// What a node does with oracle requests (see the header comment).
enum class oracle_node_mode { normal, refuse, stall, commit_no_reply };

/// "normal", "refuse", "stall" or "commit_no_reply".
const char* to_string(oracle_node_mode m);

/// Parses a mode name; nullopt for anything else.
std::optional<oracle_node_mode> parse_oracle_node_mode(std::string_view name);

/// The two oracle routes.
enum class oracle_op { ts, seq };

/// How the HTTP layer delivers a reply.
enum class oracle_delivery {
  /// Send `status`, `body` and, when not empty, the `leader-hint` header.
  answer,
  /// Send nothing; close after `hold_seconds` unless the client closes
  /// first (stall).
  hold,
  /// Close the connection at once without an answer (commit_no_reply).
  close_silently,
};

/// One oracle request's outcome.
struct oracle_reply {
  oracle_delivery delivery = oracle_delivery::answer;
  /// HTTP status (answer only).
  int status = 200;
  /// JSON body (answer only).
  std::string body;
  /// Value of the `leader-hint` header, empty for none.
  std::string leader_hint;
  /// hold: seconds before the connection is closed unanswered.
  double hold_seconds = 0.0;
  /// True when an allocation was applied (whether answered or not).
  bool committed = false;
};

/// A contiguous range of timestamps within one millisecond.
struct ts_grant {
  uint64_t physical_ms = 0;
  uint32_t logical_start = 0;
  uint32_t count = 0;
};

/// The timestamp allocator: strictly increasing ranges, never backwards.
class timestamp_allocator {
public:
  /// `count` timestamps at wall time `now_ms` (ms since the Unix epoch).
  /// Precondition: 1 <= count <= oracle_max_ts_count. nullopt only when the
  /// physical part would pass oracle_physical_max (the space is exhausted).
  std::optional<ts_grant> allocate(uint32_t count, uint64_t now_ms);

  /// The physical part of the last grant (0 before any).
  uint64_t last_physical_ms() const {
    return physical_;
  }

  /// The first logical value free in last_physical_ms().
  uint32_t next_logical() const {
    return next_logical_;
  }

private:
  uint64_t physical_ = 0;
  uint32_t next_logical_ = 0;
};

/// Why a sequence allocation failed.
enum class seq_error { none, too_many_keys, exhausted };

/// Gapless per-key counters, each starting at 0.
class sequence_allocator {
public:
  /// Keeps at most `max_keys` distinct keys.
  explicit sequence_allocator(std::size_t max_keys = 4096)
    : max_keys_(max_keys) {
  }

  /// The outcome of allocate(): `start` on success, else `error`.
  struct result {
    std::optional<uint64_t> start;
    seq_error error = seq_error::none;
  };

  /// Reserves [start, start + count) of `key` (count >= 1). Fails with
  /// too_many_keys for a new key beyond max_keys, exhausted when the
  /// counter would pass 2^64 - 1; a failure advances nothing.
  result allocate(const std::string& key, uint32_t count);

  /// The next value of `key` (0 for an unknown key).
  uint64_t peek(const std::string& key) const;

  /// Distinct keys held.
  std::size_t keys() const {
    return next_.size();
  }

private:
  std::unordered_map<std::string, uint64_t> next_;
  std::size_t max_keys_;
};

/// A validated `POST /v1/ts` body, or the 400 detail.
struct ts_request_parse {
  std::optional<uint32_t> count;
  std::string error;
};

/// `{"count":N}` with N an integer in [1, 262,144]; other fields ignored.
ts_request_parse parse_ts_request(std::string_view body);

/// A validated `POST /v1/seq` body, or the 400 detail.
struct seq_request_parse {
  struct request {
    std::string key;
    uint32_t count = 0;
  };
  std::optional<request> req;
  std::string error;
};

/// `{"key":"K","count":N}`: K a string of 1..max_key_bytes bytes, N an
/// integer in [1, max_count]; other fields ignored.
seq_request_parse parse_seq_request(std::string_view body,
                                    std::size_t max_key_bytes,
                                    uint32_t max_count);

/// `host:port; epoch=E`, the `leader-hint` header value.
std::string format_leader_hint(const std::string& host_port, uint64_t epoch);

/// Per-node counters (shown in `GET /admin/state` under oracle.nodes).
struct oracle_node_counters {
  /// Oracle requests (/v1/ts, /v1/seq) that reached the node.
  uint64_t requests = 0;
  /// Answered 200.
  uint64_t answered = 0;
  /// Answered 421 (the node was not the leader).
  uint64_t misdirected = 0;
  /// Answered 503 (mode refuse).
  uint64_t refused = 0;
  /// Held without an answer (mode stall).
  uint64_t stalled = 0;
  /// Committed, then closed without an answer (mode commit_no_reply).
  uint64_t unanswered_commits = 0;
  /// Answered 400.
  uint64_t bad_requests = 0;
  /// Answered 501 (seq_supported is false).
  uint64_t unsupported = 0;
  /// Allocations applied (timestamps and sequence blocks).
  uint64_t commits = 0;
};

/// The replicated state of an oracle cluster.
class oracle_state {
public:
  /// Validates `cfg` (config_error). Node 0 leads, epoch 1, all normal.
  explicit oracle_state(oracle_config cfg = {});

  /// The configuration (stall_seconds as last set by an admin body).
  const oracle_config& config() const {
    return cfg_;
  }

  /// Number of nodes.
  std::size_t nodes() const {
    return cfg_.nodes;
  }

  /// Sets the nodes' `host:port` addresses (hints and state), once bound.
  /// Throws std::invalid_argument unless there is one per node.
  void set_addresses(std::vector<std::string> host_ports);

  /// The addresses (empty strings before set_addresses).
  const std::vector<std::string>& addresses() const {
    return addresses_;
  }

  /// The leader, or nullopt while leaderless.
  std::optional<std::size_t> leader() const {
    return leader_;
  }

  /// The current epoch (>= 1).
  uint64_t epoch() const {
    return epoch_;
  }

  /// Moves leadership to `node` (nullopt: leaderless) and opens a new epoch,
  /// which it returns. Throws std::out_of_range for node >= nodes().
  uint64_t set_leader(std::optional<std::size_t> node);

  /// Sets a node's mode. Throws std::out_of_range for node >= nodes().
  void set_mode(std::size_t node, oracle_node_mode m);

  /// A node's mode. Throws std::out_of_range for node >= nodes().
  oracle_node_mode mode(std::size_t node) const;

  /// The leader's hint value, empty while leaderless or before
  /// set_addresses.
  std::string leader_hint() const;

  /// Handles one oracle request arriving at `node` (< nodes()) at wall time
  /// `now_ms` (ms since the Unix epoch).
  oracle_reply handle(std::size_t node, oracle_op op, std::string_view body,
                      uint64_t now_ms);

  /// Applies an admin body (`POST /admin/oracle`), all or nothing:
  ///   {"leader": i | null}            move leadership (new epoch)
  ///   {"node": i, "mode": "refuse"}   one node's mode
  ///   {"mode": "normal"}              every node's mode
  ///   {"stall_seconds": S}            the stall bound (> 0)
  /// Keys may be combined. Returns the 400 detail, or nullopt.
  std::optional<std::string> apply_admin(std::string_view body);

  /// A node's counters. Throws std::out_of_range for node >= nodes().
  const oracle_node_counters& counters(std::size_t node) const;

  /// Timestamps handed out (all grants).
  uint64_t timestamps_issued() const {
    return timestamps_issued_;
  }

  /// `{"leader":i|null,"leader_address":..,"epoch":"E","stall_seconds":S,
  ///   "timestamps_issued":N,"seq_keys":K,"seq_issued":N,"commits":N,
  ///   "misdirected":N,"nodes":[{"address","mode","role",counters...}]}`.
  boost::json::object state_json() const;

  /// The timestamp allocator (read-only, for tests).
  const timestamp_allocator& timestamps() const {
    return ts_;
  }

  /// The sequence allocator (read-only, for tests).
  const sequence_allocator& sequences() const {
    return seq_;
  }

private:
  void check_node(std::size_t node) const;
  oracle_reply misdirected_reply() const;

  oracle_config cfg_;
  std::vector<std::string> addresses_;
  std::vector<oracle_node_mode> modes_;
  std::vector<oracle_node_counters> counters_;
  std::optional<std::size_t> leader_ = std::size_t{0};
  uint64_t epoch_ = 1;
  timestamp_allocator ts_;
  sequence_allocator seq_;
  uint64_t timestamps_issued_ = 0;
  uint64_t seq_issued_ = 0;
};

} // namespace outbound
