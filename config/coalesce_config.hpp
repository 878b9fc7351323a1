#pragma once

// Configuration of the coalescing driver and of its leader discovery
// (prisma-risk/tsoracle crates/tsoracle-client: the defaults of its
// ClientBuilder, RetryPolicy (retry_policy.rs), driver.rs and retry.rs).
// Plain data, durations in seconds as doubles (like
// config/client_config.hpp). `validate()` throws config_error naming the
// first bad field; actors/coalesce/* validate at construction.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace outbound {
inline namespace config {

/// Largest logical part of a timestamp: 18 bits (tsoracle LOGICAL_MAX).
inline constexpr uint32_t ts_logical_max = (1u << 18) - 1;

/// Hard cap of timestamps in one GetTs RPC: LOGICAL_MAX + 1 = 262,144
/// (tsoracle MAX_TIMESTAMPS_PER_RPC): one response carries one physical
/// millisecond and a contiguous logical range.
inline constexpr uint32_t ts_max_per_rpc = ts_logical_max + 1;

/// Largest physical part of a timestamp: 46-bit milliseconds.
inline constexpr uint64_t ts_physical_max = (uint64_t{1} << 46) - 1;

/// One oracle endpoint in normal form: scheme, lower-case host, port.
/// `key()` ("https://host:port") identifies it everywhere (worklist, leader
/// cache, connection pool).
struct oracle_endpoint {
  /// "http" or "https".
  std::string scheme;
  /// Host name (lower case) or IP literal (IPv6 without brackets).
  std::string host;
  /// 1..65535.
  uint16_t port = 0;

  bool tls() const {
    return scheme == "https";
  }
  /// "host:port" (IPv6 literals bracketed).
  std::string authority() const;
  /// "scheme://host:port".
  std::string key() const;
};

/// Where an endpoint string came from: the scheme rule differs
/// (tsoracle docs/client-api-and-usage.md, "Scheme rule" and "Leader-hint
/// trailers").
enum class endpoint_origin : uint8_t {
  /// Operator configuration: explicit schemes are kept ("explicit beats
  /// configured"), a bare host:port takes the configured scheme.
  configured,
  /// Wire input (a leader hint): as configured, except that an explicit
  /// `http://` under TLS is refused (no downgrade by a contacted peer).
  wire,
};

/// Why parse_oracle_endpoint refused a string.
enum class endpoint_parse_error : uint8_t {
  none,
  /// Not `host:port`, `http://host:port` or `https://host:port` (path "/"
  /// tolerated), or a bad host, or a port outside 1..65535.
  malformed,
  /// Wire input `http://...` while TLS is configured.
  downgrade,
};

/// Parses `s` into an endpoint: a bare `host:port` becomes `https://` when
/// `tls`, else `http://`; an explicit scheme is kept, except an `http://`
/// from the wire under TLS (`downgrade`). Hosts: ASCII letters, digits,
/// '-', '.', '_' or a bracketed IPv6 literal; at most 255 bytes. The port is
/// required. Never throws; hostile input gives `malformed`.
std::optional<oracle_endpoint>
parse_oracle_endpoint(std::string_view s, bool tls, endpoint_origin origin,
                      endpoint_parse_error* why = nullptr);

/// Retry policy of one driver RPC (tsoracle RetryPolicy::default()).
struct coalesce_retry_policy {
  /// FAILED attempts allowed per pass (leader-hint redirects are not
  /// charged), floored at the pass's initial worklist size (>= 1). [5]
  int max_attempts = 5;
  /// Budget of one attempt in seconds, connect and exchange together
  /// (> 0). [2.0]
  double per_attempt = 2.0;
  /// Budget of the whole RPC in seconds, all attempts, redirects, backoffs
  /// and election ride-out passes (> 0). [10.0]
  double overall = 10.0;
  /// Base of the full-jitter backoff in seconds (>= 0; 0 never waits).
  /// [0.05]
  double base_backoff = 0.05;
  /// Cap of one backoff in seconds (>= 0). [5.0, tsoracle MAX_BACKOFF]
  double max_backoff = 5.0;

  /// Throws config_error naming `<prefix>.max_attempts`, ...
  void validate(const std::string& prefix = "coalesce.retry") const;
};

/// Everything the coalescing driver and its leader discovery need.
struct coalesce_config {
  /// Oracle endpoints: `host:port`, `http://host:port` or
  /// `https://host:port`; at least one, no two equal after normalisation.
  /// Order matters as a hint (put the likely leader first); the worklist
  /// starts at a random offset.
  std::vector<std::string> endpoints;
  /// TLS configured: a bare host:port becomes https, and an `http://`
  /// leader hint is dropped. [false]
  bool tls = false;
  /// Cold-start coalescing window in seconds: the wait after the first
  /// waiter joins an idle group before its batch is sent. Never applies
  /// while an RPC of the group is in flight (waiters then ride a further
  /// RPC at once, see `max_rpcs_in_flight`, or the next batch, sent as
  /// soon as the RPCs return) (>= 0; 0 sends at once).
  /// [0.001]
  double batch_flush_interval = 0.001;
  /// Adaptive cold start (beyond tsoracle, whose driver always waits the
  /// window): an idle group sends its first waiter at once, without the
  /// window, when
  ///  - an RPC of the same group (ts, or the same seq key) completed less
  ///    than `batch_flush_interval` ago: the callers it answered are coming
  ///    back, and those who follow the first ride the group's free slots
  ///    (`fill_free_slots`) or, with every slot busy or that rule off, the
  ///    next batch, sent as soon as an RPC returns (a closed loop of a few
  ///    callers would otherwise pay the whole window on every batch); or
  ///  - the recent arrivals predict no second caller within the window: the
  ///    smoothed gap between joins of any group (an EWMA with weight 1/8,
  ///    as TCP's smoothed RTT in RFC 6298; each gap counted at most two
  ///    windows) is at least `batch_flush_interval`.
  /// Otherwise (a burst is arriving, or nothing is known yet) it waits the
  /// window as before. The decisions are counted in
  /// `outbound_coalesce_cold_starts_total{decision="at_once"|"window"}`.
  /// false: always wait the window (tsoracle's rule). [true]
  bool adaptive_cold_start = true;
  /// RPCs of one group (ts, or one seq key) in flight at once (beyond
  /// tsoracle, whose driver keeps one batch in flight). While fewer are in
  /// flight a newcomer does not wait for them (see `fill_free_slots` for
  /// how many share its RPC): making it wait would only add the RPC in
  /// flight's latency to its own. The chunks of one batch still go one at
  /// a time, and while a chunk of a multi-chunk batch (heavy counts) is in
  /// flight the group sends nothing else. 1 is tsoracle's rule (1..64). [4]
  std::size_t max_rpcs_in_flight = 4;
  /// How a group with RPCs in flight uses its free slots (below
  /// `max_rpcs_in_flight`). true: a batch starts at once whenever a slot
  /// is free, and the callers queued at that moment are spread evenly over
  /// the free slots (each batch takes at most ceil(queued / free slots)
  /// of them, in arrival order). A group keeps its slots busy, so a few
  /// callers in a closed loop never pair up behind one RPC while slots
  /// stay idle (4 callers otherwise settle into 2 RPCs of 2 and run at
  /// about half the rate of 4 direct calls: bench/README.md); under load
  /// every slot is busy and batches grow by themselves. An idle group's
  /// batch (the cold start, with or without its window) still takes its
  /// whole queue, so a burst rides one RPC. false: a further RPC starts
  /// only while each RPC in flight carries a single waiter; callers that
  /// arrive together share one RPC, and once an RPC in flight carries two
  /// or more the newcomers wait for the next batch (the rule of earlier
  /// versions, fewer RPCs at a few callers). [true]
  bool fill_free_slots = true;
  /// Waiters held at most (queued or in flight, all groups together);
  /// beyond: rejected_backpressure (>= 1). [4096, tsoracle QUEUE_CAPACITY]
  std::size_t max_waiters = 4096;
  /// Timestamps per GetTs RPC at most, and per waiter at most
  /// (1..262,144). [262,144]
  uint32_t max_ts_per_rpc = ts_max_per_rpc;
  /// Sequence ordinals per GetSeq RPC at most, and per waiter at most
  /// (>= 1). [65,536, tsoracle ServerBuilder::max_seq_count]
  uint32_t max_seq_per_rpc = 65536;
  /// Longest sequence key in bytes (1..4096). [128, tsoracle
  /// MAX_SEQ_KEY_LEN]
  std::size_t max_seq_key_bytes = 128;
  /// Retry policy of every driver RPC.
  coalesce_retry_policy retry;
  /// Seconds the cached leader is kept without a successful RPC against it
  /// (> 0); every success refreshes it. [30.0]
  double leader_ttl = 30.0;
  /// Followed leader-hint redirects per pass (>= 1); reaching it is an
  /// election signal (the pass ends, the RPC rides out). [16]
  int max_redirects_per_pass = 16;
  /// Followed leader-hint redirects per RPC, all passes (>= 1); beyond it
  /// the RPC fails with discovery_error::redirect_cap. [64]
  int max_redirects_per_call = 64;
  /// Endpoints known only from hints, kept at most (LRU) (>= 0). [8]
  std::size_t max_hinted_endpoints = 8;
  /// Maximum nesting depth of the oracle's response bodies (GetTs/GetSeq
  /// answers, error bodies read for the pre-commit marker or a leader
  /// epoch), as client_config::json_max_depth (1..1024). A deeper body is
  /// read as unreadable. [64, default_json_max_depth in
  /// protocol/json_parse.hpp]
  std::size_t json_max_depth = 64;

  /// Credential sent on every oracle request, as client_config::token
  /// (never logged, never in an error text or a metric). Empty: no
  /// credential header. [""]
  std::string token;
  /// Header that carries the credential, as client_config::token_header.
  /// ["Authorization"]
  std::string token_header = "Authorization";
  /// Scheme before the token; empty sends the raw token (API-key style), as
  /// client_config::token_scheme. ["Bearer"]
  std::string token_scheme = "Bearer";
  /// Extra headers sent with every oracle request, after the credential (a
  /// later header replaces an earlier one of the same name). Host,
  /// Content-Length and Transfer-Encoding (the transport's) and
  /// x-request-id (the driver's, one per RPC) may not be given. [{}]
  std::vector<std::pair<std::string, std::string>> default_headers;

  /// Validates every field; throws config_error naming the first bad one
  /// (`coalesce.endpoints[2]`, `coalesce.retry.overall`,
  /// `coalesce.token_header`, `coalesce.default_headers`, ...). The
  /// credential and default headers go through validate_credential_fields
  /// (config/client_config.hpp), the checks of client_config.
  void validate() const;

  /// The configured endpoints in normal form, in order (validate() first).
  std::vector<oracle_endpoint> parsed_endpoints() const;
};

} // namespace config
} // namespace outbound
