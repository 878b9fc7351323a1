#pragma once

// Leader discovery of the coalescing driver (hints, cache, ride-out) as pure
// state: the leader-hint parser, the shared leader cache and endpoint book
// (`leader_state`, one per driver), and the ride-out loop of one RPC
// (`discovery_call`). The ideas are tsoracle-client's: retry.rs
// (issue_rpc / issue_seq_rpc: worklist, hints to the front, ride-out
// passes, error precedence), worklist.rs (cached leader first, configured
// endpoints rotated from a random offset, each at most once), leader_hint.rs
// (hint parsing, the TLS downgrade guard), channel_pool.rs (seat_leader: TTL
// and epoch guard; MAX_HINT_CHANNELS), budget.rs (per-attempt budget =
// min(per_attempt, overall left); full-jitter backoff), retry_policy.rs
// (defaults) and seq_attempt.rs (the non-idempotent seq rules).
//
// One RPC (discovery_call):
//
//   start ──► [pass: worklist = fresh leader, then configured endpoints
//              rotated; each endpoint at most once per pass]
//      │
//      ├─ send(endpoint, budget = min(per_attempt, overall left))
//      │     ├─ success ────────────────────────────► succeeded (seat leader)
//      │     ├─ 421 + usable hint ──► hinted endpoint to the front, no
//      │     │                        backoff, not charged (redirect caps:
//      │     │                        per pass → election signal, ends the
//      │     │                        pass; per call → redirect_cap)
//      │     ├─ 421 without usable hint ─► next endpoint, cache untouched
//      │     ├─ 501 ─► failed not_supported (final, never retried)
//      │     ├─ marked 4xx (bad key/count, key cap) ─► failed rejected
//      │     ├─ refused / busy / lost ─► wait full jitter, next endpoint
//      │     ├─ 5xx, unmarked 4xx, TLS or handshake failure, a 2xx the
//      │     │  client cannot use ─► next endpoint
//      │     │    seq: anything after the request may have committed and
//      │     │    not marked pre-commit by the oracle ─► failed
//      │     │    uncertain_outcome (busy, lost, 5xx, unmarked 4xx, ...)
//      │     └─ local configuration failure ─► failed fatal
//      └─ worklist empty or attempts spent:
//            election signal seen and time left ─► wait jitter(pass), new pass
//            else ─► failed with the last error (precedence:
//                    non-transport > election > transport > no_endpoints)
//
// The pre-commit marker: the oracle's error bodies carry
// `"committed": false` when it proves the request committed nothing
// (hub/oracle_state.hpp). tsoracle's gRPC statuses say the same
// (INVALID_ARGUMENT, RESOURCE_EXHAUSTED, UNIMPLEMENTED, FAILED_PRECONDITION
// are pre-commit-certain; anything else on GetSeq is SeqUncertain): HTTP
// has no such class, and a proxy's 502/503/504 or a 500 cannot be told
// from a failed commit, so without the marker a seq failure after sending
// is uncertain ("Retrying an uncertain call risks a double-spend").
//
// Pure: time and randomness are arguments; no clock reads; no CAF.

#include "actors/coalesce/coalesce_types.hpp"
#include "config/coalesce_config.hpp"
#include "core/coalesce_stats.hpp"
#include "protocol/http_types.hpp"

#include <boost/container/small_vector.hpp>

#include <algorithm>
#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace outbound {
inline namespace coalesce {

// -- leader hints -------------------------------------------------------------

/// The header a follower's 421 carries: `leader-hint: host:port; epoch=E`.
inline constexpr const char* leader_hint_header = "leader-hint";

/// A parsed leader hint, before the scheme rule is applied.
struct leader_hint {
  /// The endpoint text as sent: `host:port`, `http://host:port` or
  /// `https://host:port` (syntax checked by parse_oracle_endpoint).
  std::string endpoint;
  /// The leader's epoch: a decimal 0..2^64-1; absent when not sent.
  std::optional<uint64_t> epoch;
};

/// Parses a `leader-hint` header value: an endpoint, then optional
/// `; name=value` parameters (optional whitespace around ';' and '='). A
/// parameter `epoch` (case-insensitive) holds a decimal epoch; other
/// parameters are ignored. Hostile input gives nullopt, never a crash:
/// over 512 bytes, control or non-ASCII bytes, an endpoint that does not
/// parse, a missing/duplicate/non-decimal/over-64-bit epoch value, an
/// empty parameter, more than 8 parameters.
std::optional<leader_hint> parse_leader_hint(std::string_view value);

/// Parses a leader epoch as carried by a hint or a response body's
/// `"epoch"` string: 1..20 decimal digits, at most 2^64-1; else nullopt.
std::optional<uint64_t> parse_leader_epoch(std::string_view s);

// -- outcome classification ---------------------------------------------------

/// What one attempt's result means to the discovery loop.
enum class attempt_class : uint8_t {
  /// 2xx: the endpoint served the RPC (the body goes to the batcher).
  success,
  /// 421 Misdirected Request: not the leader (maybe with a hint). Provably
  /// nothing committed (RFC 9110 section 15.5.20: not processed).
  not_leader,
  /// Nothing committed, provably: nothing left the client (connect
  /// failure, not_sent, local_resource, pool_overflow, a failure before any byte was
  /// written), or a 5xx / 429 the oracle marked pre-commit (its 503 of
  /// mode refuse). Transport-class (backoff); safe for seq.
  refused,
  /// An unmarked 503 or 429 (a proxy, a load shedder): most likely nothing
  /// was processed, but nothing proves it. Transport-class (backoff); for
  /// seq: uncertain.
  busy,
  /// The request may have reached the server and been processed: a timeout
  /// or broken exchange (a reset) after bytes were written. Transport-class
  /// (backoff); for seq: uncertain.
  lost,
  /// An unmarked 5xx other than 501 / 503 (the server processed and failed,
  /// or a proxy cannot tell): next endpoint, no backoff; for seq: uncertain.
  server_error,
  /// An unmarked 4xx (other than 421 / 429), 1xx or 3xx: not an answer of
  /// the oracle's protocol (a proxy's 404, a 403): next endpoint; for seq:
  /// uncertain.
  unexpected_status,
  /// A 4xx the oracle marked pre-commit (bad key or count, the key
  /// cardinality cap): definitive, nothing committed, not retried.
  rejected,
  /// 501 Not Implemented (the oracle does not serve this RPC, like
  /// tsoracle's UNIMPLEMENTED): definitive at the first call, nothing
  /// committed, not retried.
  not_supported,
  /// The TLS handshake (or another TLS failure) before any byte of the
  /// request was written: nothing committed; next endpoint.
  handshake_failed,
  /// Local configuration failure before sending: definitive.
  fatal,
  /// A 2xx body over the cap, a TLS failure after sending, or another
  /// failure after the server answered in a way the client cannot use:
  /// next endpoint; for seq: uncertain.
  fatal_after_send,
};

/// "success", "not_leader", ...
const char* to_string(attempt_class c);

/// Classifies one exchange: the transport's error kind, whether any byte of
/// the request was written, the HTTP status (when error == none) and
/// whether the response body carries the oracle's pre-commit marker
/// (`marks_nothing_committed`).
attempt_class classify_attempt(transport_error_kind error, bool request_sent,
                               int status, bool marked_pre_commit);

/// True if an oracle error body carries the pre-commit marker: a JSON
/// object whose `committed` member is `false`. Anything else (not JSON, no
/// member, another value, over 64 KiB, nested deeper than `max_depth`
/// (coalesce_config::json_max_depth)) is false. Never throws.
bool marks_nothing_committed(std::string_view body,
                             std::size_t max_depth = 64);

/// True if an attempt of this class provably committed nothing (safe to
/// retry a non-idempotent RPC after it): not_leader, refused, rejected,
/// not_supported, handshake_failed, fatal.
bool proves_nothing_committed(attempt_class c);

/// True if the class is transport-class: a backoff follows it (tsoracle:
/// Unavailable, DeadlineExceeded, Transport).
bool is_transport_class(attempt_class c);

/// The full-jitter backoff (tsoracle budget.rs / "Exponential Backoff And
/// Jitter", AWS Architecture Blog): uniform in [0, min(base·2^n, cap)],
/// shift capped at 20; base 0 gives 0 (core::backoff with full jitter). The
/// caller clamps it to the budget.
coalesce_duration full_jitter_backoff(coalesce_duration base,
                                      coalesce_duration cap, int n,
                                      coalesce_rng& rng);

// -- the shared leader state --------------------------------------------------

/// Who wants the leader seated.
enum class seat_source : uint8_t {
  /// A successful RPC (with the epoch of its body, if any).
  success,
  /// A leader hint of a 421.
  hint,
};

/// The answer of leader_state::seat.
enum class seat_decision : uint8_t {
  /// The cache was empty or expired: seated.
  seated,
  /// Same endpoint: TTL refreshed; epoch raised by a hint, set by the
  /// leader's own success (lowered too: a restarted cluster), never
  /// cleared.
  refreshed,
  /// A different endpoint with an epoch >= the cached one: replaced.
  replaced,
  /// A different endpoint with a lower epoch: kept the cached leader.
  rejected_stale_epoch,
  /// A different endpoint without an epoch while the cached one has one:
  /// kept (accepted only for a hint to a configured endpoint).
  rejected_no_epoch,
};

/// "seated", "refreshed", ...
const char* to_string(seat_decision d);

/// Whether a seat decision changed the cache.
inline bool seat_accepted(seat_decision d) {
  return d == seat_decision::seated || d == seat_decision::refreshed
         || d == seat_decision::replaced;
}

/// The cached leader.
struct cached_leader {
  /// Endpoint key ("https://host:port").
  std::string endpoint;
  std::optional<uint64_t> epoch;
  /// Last seat or refresh; fresh while now - refreshed < leader_ttl.
  coalesce_time refreshed{};
};

/// Verdict on a 421's hint (leader_state::check_hint).
enum class hint_verdict : uint8_t {
  /// Follow it: `endpoint` is its key.
  usable,
  /// No leader-hint header: the node knows no leader (an election).
  absent,
  /// The header does not parse.
  malformed,
  /// `http://` hint under TLS: dropped (no downgrade).
  rejected_downgrade,
  /// Its epoch is below the cached leader's: dropped, an election signal.
  stale_epoch,
  /// No epoch, a cached leader with one, and not a configured endpoint.
  rejected_no_epoch,
  /// It names the node that sent it.
  self_reference,
};

/// "usable", "absent", ...
const char* to_string(hint_verdict v);

/// What check_hint found.
struct hint_check {
  hint_verdict verdict = hint_verdict::absent;
  /// usable: the endpoint key to try next.
  std::string endpoint;
  std::optional<uint64_t> epoch;
};

/// The leader cache, the configured endpoints and the endpoints known from
/// hints, shared by every RPC of one driver. Not thread-safe.
class leader_state {
public:
  /// Validates `cfg` (throws config_error). `rng` is not drawn from (the
  /// first worklist is the configured order); kept for the callers.
  leader_state(const coalesce_config& cfg, coalesce_rng& rng);

  /// The cached leader if fresh at `now` (the TTL is lazy: an expired entry
  /// reads as none), else nullptr. Valid until the cache next changes
  /// (seat, forget); copy what must outlive that.
  const cached_leader* leader(coalesce_time now) const;

  /// The single writer of the cache (tsoracle channel_pool.rs seat_leader):
  /// empty/expired ⇒ seat; same endpoint ⇒ refresh TTL, epoch := max for
  /// a hint, the leader's own for a success (unknown: kept);
  /// different endpoint while fresh: both epochs known ⇒ accept iff new >=
  /// cached; cached epoch known, new unknown ⇒ accept only a hint to a
  /// configured endpoint; cached epoch unknown ⇒ accept.
  seat_decision seat(const std::string& endpoint,
                     std::optional<uint64_t> epoch, seat_source src,
                     coalesce_time now);

  /// Judges the `leader-hint` header of a 421 from `from` (nullptr: no
  /// header): parse, scheme rule (TLS downgrade guard; a bare hint naming
  /// a configured node takes that node's configured scheme), epoch guard,
  /// self-reference.
  hint_check check_hint(const std::string* header, const std::string& from,
                        coalesce_time now);

  /// The first worklist of a new RPC: the fresh leader, then the configured
  /// endpoints rotated from the current offset (the leader not repeated).
  /// The offset starts at 0, so the first worklist is the configured order
  /// (tsoracle: "put the most-likely-leader first"); each call advances it
  /// by one (successive RPCs start at different endpoints when no leader is
  /// known).
  std::vector<std::string> begin_pass(coalesce_time now);

  /// begin_pass in two halves, so that a pass whose first attempt (the
  /// leader) succeeds never builds the rest: `start_pass` reads the fresh
  /// leader and advances the offset as begin_pass does; `rest_of_pass`
  /// appends what begin_pass would have listed after the leader. The
  /// configured endpoints never change, so the rest is the same whenever
  /// it is asked for.
  struct pass_start {
    /// The fresh leader, if any (valid until the cache changes).
    const cached_leader* leader = nullptr;
    /// The rotation offset of this pass.
    std::size_t offset = 0;
    /// The leader's index among the configured endpoints, or npos.
    std::size_t leader_index = static_cast<std::size_t>(-1);
    /// The number of endpoints begin_pass would list.
    std::size_t size = 0;
  };
  pass_start start_pass(coalesce_time now);
  void rest_of_pass(const pass_start& p, std::vector<std::string>& out) const;

  /// Drops the cached leader if it is `endpoint` (it proved unreachable).
  /// Returns true if it was dropped.
  bool forget(const std::string& endpoint);

  /// Records an endpoint learned from a hint. Configured endpoints are not
  /// recorded. Hint-only endpoints are kept LRU, at most
  /// max_hinted_endpoints: returns the evicted one (the owner drops its
  /// connections), if any. With a cap of 0 nothing is kept (the hint is
  /// still followed once).
  std::optional<std::string> note_hinted(const std::string& endpoint);

  /// True if `endpoint` is a configured one.
  bool configured(const std::string& endpoint) const;

  /// Endpoints known only from hints, most recently used first.
  const std::list<std::string>& hinted() const {
    return hinted_;
  }
  /// Configured endpoint keys, in configuration order.
  const std::vector<std::string>& endpoints() const {
    return endpoints_;
  }
  const coalesce_config& config() const {
    return cfg_;
  }
  const leader_stats& stats() const {
    return stats_;
  }
  /// The rotation offset the next begin_pass starts at.
  std::size_t offset() const {
    return offset_;
  }

  /// cfg.retry's durations, converted once for every discovery_call.
  struct retry_durations {
    coalesce_duration overall;
    coalesce_duration per_attempt;
    coalesce_duration base_backoff;
    coalesce_duration max_backoff;
  };
  const retry_durations& durations() const {
    return durations_;
  }

private:
  coalesce_config cfg_;
  coalesce_duration ttl_;
  retry_durations durations_;
  std::vector<std::string> endpoints_;
  std::size_t offset_ = 0;
  std::optional<cached_leader> cache_;
  std::list<std::string> hinted_;
  leader_stats stats_;
};

// -- one RPC's discovery loop ---------------------------------------------------

/// Why an RPC's discovery gave up (each maps to one error and one metric
/// label).
enum class discovery_error : uint8_t {
  none,
  /// Nothing was tried (tsoracle NoReachableEndpoints).
  no_endpoints,
  /// The last failure was transport-class and no election was seen:
  /// service unavailable.
  unreachable,
  /// An election was seen (421 without hint, stale hint, per-pass redirect
  /// cap) and not resolved within the overall deadline.
  no_leader,
  /// The overall deadline ran out with only transport-class failures.
  deadline_exceeded,
  /// More than max_redirects_per_call hint redirects (typed, terminal).
  redirect_cap,
  /// The last failure was a 5xx other than 503 (non-transport).
  server_error,
  /// A 4xx other than 421: the request itself was refused.
  rejected,
  /// TLS or configuration failure.
  fatal,
  /// seq only: a failure after the request may have committed. Exactly one
  /// server call was made for it; never retried.
  uncertain_outcome,
  /// The oracle answered 501: it does not serve this RPC. Final at the
  /// first call, never retried (tsoracle: UNIMPLEMENTED).
  not_supported,
};

/// "none", "no_endpoints", ...
const char* to_string(discovery_error e);

/// What the owner does next.
enum class discovery_step : uint8_t {
  /// Send the RPC to `endpoint` with the time limit `budget`.
  send,
  /// Wait `delay`, then call resume().
  wait,
  /// The RPC succeeded (the response goes to the batcher).
  succeeded,
  /// The RPC failed for good with `error`.
  failed,
};

/// "send", "wait", "succeeded", "failed".
const char* to_string(discovery_step s);

/// A decision of discovery_call.
struct discovery_action {
  discovery_step step = discovery_step::send;
  /// send: the endpoint key; succeeded: who served.
  std::string endpoint;
  /// send: min(per_attempt, overall left), > 0.
  coalesce_duration budget{0};
  /// wait: the backoff (already clamped to the overall budget).
  coalesce_duration delay{0};
  /// failed: why.
  discovery_error error = discovery_error::none;
  /// failed: a human-readable detail (no header values).
  std::string detail;
  /// failed: the transport error kind of the attempt whose error is
  /// surfaced (`none` for an HTTP status or when nothing was tried).
  transport_error_kind cause = transport_error_kind::none;
  /// failed: true when every attempt sent provably committed nothing
  /// (proves_nothing_committed), or none was sent.
  bool nothing_committed = true;
  /// Attempts sent so far in this RPC (a redirect's send counts here too).
  int attempts = 0;
};

/// What the owner learned from one attempt.
struct attempt_report {
  attempt_class cls = attempt_class::refused;
  /// not_leader: the `leader-hint` header value, if present.
  std::optional<std::string> hint;
  /// success: the epoch of the response body, if it parsed as a decimal.
  std::optional<uint64_t> epoch;
  /// success: the body is no answer the client can use (check_ts_response
  /// / check_seq_response refuse it). The RPC still ends with it (its
  /// callers get the protocol violation), but it seats no leader, and a
  /// cached leader that sent it is forgotten.
  bool unusable = false;
  /// A short description for the final error (e.g. "connect refused").
  std::string detail;
  /// The transport error kind of the exchange (`none` for an HTTP answer).
  transport_error_kind cause = transport_error_kind::none;
  /// refused: the TCP connect itself failed (nothing listens there). If
  /// the endpoint is the cached leader it is forgotten, so a leader seated
  /// from a hint (even at the largest epoch) that cannot be reached does not
  /// hold the cache and the epoch guard until its TTL runs out.
  bool unreachable = false;
};

/// The discovery loop of one driver RPC. Use: start() → act on the action
/// (send: then on_result(); wait: then resume()) until succeeded / failed.
class discovery_call {
public:
  /// `non_idempotent`: a seq RPC (uncertain rules apply). `start` begins
  /// the overall deadline.
  discovery_call(const leader_state& ls, bool non_idempotent,
                 coalesce_time start);

  /// The first action.
  discovery_action start(leader_state& ls, coalesce_time now,
                         coalesce_rng& rng);

  /// The attempt in flight ended.
  discovery_action on_result(leader_state& ls, const attempt_report& r,
                             coalesce_time now, coalesce_rng& rng);

  /// The owner's own per-attempt timer fired before an answer: reported as
  /// `lost` (the request may have left).
  discovery_action on_attempt_timeout(leader_state& ls, coalesce_time now,
                                      coalesce_rng& rng);

  /// A wait is over.
  discovery_action resume(leader_state& ls, coalesce_time now,
                          coalesce_rng& rng);

  /// start + overall.
  coalesce_time deadline() const {
    return deadline_;
  }
  int attempts() const {
    return attempts_;
  }
  int redirects() const {
    return redirects_total_;
  }
  int passes() const {
    return pass_;
  }
  /// The endpoint of the attempt in flight (empty when none).
  const std::string& current() const {
    return current_;
  }

private:
  discovery_action next(leader_state& ls, coalesce_time now,
                        coalesce_rng& rng);
  /// A NOT_LEADER answer from `from`: follow a usable hint (a redirect),
  /// or count it as a failure and move on.
  discovery_action on_not_leader(leader_state& ls, const attempt_report& r,
                                 const std::string& from, coalesce_time now,
                                 coalesce_rng& rng);
  /// A 2xx from `from` at `epoch`, below the fresh leader's
  /// `leader_epoch`, while the cached leader has not said in this call
  /// that it no longer leads: not used (seq: uncertain; ts: the next
  /// endpoint).
  discovery_action on_deposed_answer(leader_state& ls, const std::string& from,
                                     uint64_t epoch, uint64_t leader_epoch,
                                     transport_error_kind cause,
                                     coalesce_time now, coalesce_rng& rng);
  discovery_action end_pass(leader_state& ls, coalesce_time now,
                            coalesce_rng& rng);
  void begin_pass(leader_state& ls, coalesce_time now);
  bool can_send_more() const;
  bool visited(const std::string& endpoint) const {
    return std::find(visited_.begin(), visited_.end(), endpoint)
           != visited_.end();
  }
  discovery_action fail(discovery_error e, std::string detail,
                        transport_error_kind cause
                        = transport_error_kind::none);
  discovery_action surfaced(bool deadline);
  discovery_action after_failure(leader_state& ls, attempt_class cls,
                                 coalesce_time now, coalesce_rng& rng);

  bool non_idempotent_;
  coalesce_time deadline_;
  coalesce_duration per_attempt_;
  coalesce_duration base_backoff_;
  coalesce_duration max_backoff_;
  int max_attempts_;
  int max_redirects_pass_;
  int max_redirects_call_;

  /// A pass's endpoints: a cluster's handful, in place (a pass with a
  /// fresh leader lists one endpoint and must not allocate for it).
  using endpoint_list = boost::container::small_vector<std::string, 3>;
  /// The pass's endpoints still to try, the next one last.
  endpoint_list worklist_;
  /// The pass began with the leader alone on the worklist: the rest
  /// (leader_state::rest_of_pass of `rest_`) goes under it once anything
  /// but the leader's success needs the worklist (materialize).
  bool rest_pending_ = false;
  leader_state::pass_start rest_;
  void materialize(const leader_state& ls);
  /// The endpoints tried in this pass (a handful: a linear search).
  endpoint_list visited_;
  std::string current_;
  int attempts_ = 0;
  int failed_in_pass_ = 0;
  int pass_limit_ = 0;
  int redirects_pass_ = 0;
  int redirects_total_ = 0;
  int transport_failures_ = 0;
  int pass_ = 0;
  bool election_in_pass_ = false;
  /// The wait in progress ends a pass: resume() starts a new one.
  bool new_pass_on_resume_ = false;
  bool election_sticky_ = false;
  /// The cached leader answered 421 in this call: a lower-epoch answer is
  /// then no longer read as a deposed leader's (on_deposed_answer).
  bool leader_denied_ = false;
  /// The last failure, for the surfaced error.
  std::optional<attempt_class> last_;
  std::string last_detail_;
  transport_error_kind last_cause_ = transport_error_kind::none;
  /// The last non-transport failure (5xx, unexpected status, TLS), sticky.
  std::optional<attempt_class> last_non_transport_;
  std::string last_non_transport_detail_;
  transport_error_kind last_non_transport_cause_ = transport_error_kind::none;
  /// False once an attempt ended in a class that may have committed.
  bool nothing_committed_ = true;
};

} // namespace coalesce
} // namespace outbound
