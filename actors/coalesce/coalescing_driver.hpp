#pragma once

// The coalescing driver (docs/ARCHITECTURE.md, "The actor tree"): one
// actor that turns a crowd of get_ts / get_ts_batch / get_seq callers into a
// few batched RPCs against a leader-based oracle cluster, and finds and
// caches the cluster's leader. A thin adapter over two pure state machines:
//
//   batcher         (actors/coalesce/batcher.hpp): who rides which RPC, the
//                   cold-start flush, chunks under the per-RPC cap, cancels,
//                   response validation;
//   leader_state +  (actors/coalesce/leader_state.hpp): the leader cache
//   discovery_call  (TTL, epoch guard), the worklist, hint redirects, the
//                   election ride-out, full-jitter backoff, the
//                   uncertain-outcome rule for the non-idempotent seq RPC.
//
// The ideas are tsoracle-client's (prisma-risk/tsoracle: driver.rs, retry.rs,
// channel_pool.rs, docs/client-api-and-usage.md). The actor owns one transport
// (a connection_pool by default) per oracle endpoint, configured or learned
// from a hint; an endpoint evicted from the hint LRU has its pool stopped.
//
//   caller ─ts_call/seq_call─► driver ─join─► batcher ─take_ready─► rpc_plan
//                                 ▲                                   │
//                 coalesce_reply  │          discovery_call per plan  ▼
//   caller ◄──────────────────────┴── deliveries ◄─ 2xx ─ transport(endpoint)
//                                                  (421 + hint → next send)
//
// Every oracle request is built by the service client's request builder
// (core/request_builder.hpp, through actors/coalesce/oracle_request.hpp)
// for the endpoint of its attempt: Accept / Content-Type, User-Agent, the
// credential and default headers of coalesce_config, and one x-request-id
// per RPC, kept on each of its attempts and redirects (as the service client
// keeps one per call across retries).
//
// Everything the driver does is on the actor clock, so tests run it on CAF's
// test coordinator in virtual time with scripted transports.

#include "actors/coalesce/batcher.hpp"
#include "actors/coalesce/leader_state.hpp"
#include "actors/messages.hpp"
#include "actors/transport.hpp"
#include "config/client_config.hpp"
#include "config/coalesce_config.hpp"

#include <caf/actor_system.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

namespace outbound {
inline namespace protocol {
class io_runner;
} // namespace protocol
inline namespace coalesce {

/// get_ts() (count 1) or get_ts_batch(count): `count` timestamps, all from
/// one physical millisecond, contiguous in the logical part.
struct ts_call {
  /// 1..coalesce_config::max_ts_per_rpc [1]; else an invalid_request error
  /// (error_kind::request_error, nothing sent, siblings unharmed).
  uint32_t count = 1;
  /// The caller's own deadline in seconds from its entry into the driver;
  /// when it passes, the caller gets deadline_exceeded and leaves (the
  /// other waiters are not disturbed; the RPC is cancelled only when every
  /// waiter of it has gone). 0, negative, NaN or infinite: none beyond the
  /// RPC's own retry policy. [0]
  double timeout = 0;
};

/// get_seq(key, count): a block of `count` ordinals of the gapless
/// sequence `key`. Non-idempotent: a failure after the request may have
/// committed is error_kind::uncertain_outcome after exactly one server call.
struct seq_call {
  /// 1..max_seq_key_bytes bytes of UTF-8; else request_error, nothing sent.
  std::string key;
  /// 1..coalesce_config::max_seq_per_rpc [1]; else request_error.
  uint32_t count = 1;
  /// As ts_call::timeout. [0]
  double timeout = 0;
};

/// What every caller that rode one RPC shares: built once per RPC and
/// held by each reply through a shared pointer, so a batch of N callers
/// costs one allocation, not N copies of each string.
struct coalesce_rpc_info {
  /// The leader epoch of the answering response, as received when it is a
  /// decimal of 1..20 digits (<= 2^64-1); else empty.
  std::string epoch;
  /// The endpoint key that served ("http://host:port").
  std::string endpoint;
  /// The x-request-id of the RPC (32 lower-case hex digits, the same on
  /// every attempt of it).
  std::string request_id;
};

/// The answer to a ts_call or seq_call. Exactly one of `error` or the value
/// is set.
struct coalesce_reply {
  /// Set when the call failed. Kinds: request_error (invalid count or key,
  /// or the oracle refused it with a 4xx, or the redirect cap), server_error
  /// (a 5xx on the last try), response_error (a 2xx whose count or shape is
  /// wrong, ts), service_unavailable (unreachable, no leader within the
  /// deadline, or the driver's waiter queue is full — then nothing_sent),
  /// deadline_exceeded (the caller's timeout or the RPC's overall budget),
  /// uncertain_outcome (seq only: the block may have been spent).
  std::optional<call_error> error;
  /// No error: `ts` or `seq` is the answer.
  bool ok() const noexcept { return !error.has_value(); }
  /// ts: the caller's timestamps.
  ts_range ts;
  /// seq: the caller's block.
  seq_block seq;
  /// Waiters answered together with this one (the RPC's callers, or those
  /// of a batch failed together), this one included.
  uint32_t batch_waiters = 0;
  /// The RPC this caller's answer came from (shared with the other callers
  /// answered with it; for a chunk never sent because an earlier chunk of
  /// its batch failed, that chunk's RPC); null when no RPC answered it:
  /// refused at entry, or its own timeout passed first (even while its RPC
  /// was in flight).
  std::shared_ptr<const coalesce_rpc_info> rpc;

  /// The leader epoch of the answering response, as received when it is a
  /// decimal of 1..20 digits (<= 2^64-1); else empty (ts is served without
  /// it; seq fails uncertain_outcome).
  const std::string& epoch() const noexcept {
    return rpc ? rpc->epoch : empty_text();
  }
  /// The endpoint key that answered ("http://host:port"): set on success
  /// and on an unusable 2xx, empty when the RPC failed.
  const std::string& endpoint() const noexcept {
    return rpc ? rpc->endpoint : empty_text();
  }
  /// The x-request-id of `rpc` (32 lower-case hex digits, the same on
  /// every attempt of that RPC; also in `error->request_id`); empty when
  /// `rpc` is null.
  const std::string& request_id() const noexcept {
    return rpc ? rpc->request_id : empty_text();
  }

private:
  static const std::string& empty_text() noexcept {
    static const std::string empty;
    return empty;
  }
};

/// Typed interface of a coalescing driver.
///
/// - `ts_call -> coalesce_reply`, `seq_call -> coalesce_reply`: the calls.
/// - `stats_atom -> coalesce_stats`.
///
/// The driver's own timers are messages of a private extension of this
/// interface (actors/coalesce/coalescing_driver.cpp), not reachable through
/// this handle.
using coalescing_driver_actor = caf::typed_actor<
  caf::replies_to<ts_call>::with<coalesce_reply>,
  caf::replies_to<seq_call>::with<coalesce_reply>,
  caf::replies_to<stats_atom>::with<coalesce_stats>>;

/// Makes the transport of one endpoint (tests script fakes per endpoint).
using coalesce_transport_factory
  = std::function<transport_actor(const oracle_endpoint&)>;

/// Optional parts of a driver; every field has a working default.
struct coalesce_options {
  /// Builds the transport of an endpoint. [a connection_pool per endpoint,
  /// from `tls_template` with base_url set to the endpoint]
  coalesce_transport_factory transports;
  /// TLS identity (tls.*) and connect/idle settings of the per-endpoint
  /// pools; its base_url, token* and default_headers are ignored (the
  /// oracle requests take theirs from coalesce_config). [client_config{}]
  client_config tls_template;
  /// io runner of the default pools. [io_runner::shared()]
  std::shared_ptr<io_runner> io;
  /// Seed of the worklist offset and the backoff jitter; 0 seeds from
  /// std::random_device. [0]
  uint64_t seed = 0;
};

/// The configuration of the default connection pool of endpoint `ep`:
/// `tmpl` with base_url set to `ep.key()`. An `http://` endpoint gets no
/// TLS files: an operator's explicit `http://` is dialled as plaintext even
/// when TLS is configured ("explicit beats configured", tsoracle
/// docs/client-api-and-usage.md "Scheme rule"), and a plain pool carries
/// no identity. An `https://` endpoint keeps them (none: the system trust
/// store). Never throws; validate() the result.
client_config coalesce_pool_config(const client_config& tmpl,
                                   const oracle_endpoint& ep);

/// Spawns a coalescing driver. Validates `cfg` (throws config_error naming
/// the field, e.g. `coalesce.endpoints[1]`, `coalesce.default_headers`)
/// and builds a trial ts and seq request with it (check_oracle_requests,
/// actors/coalesce/oracle_request.hpp) before anything is spawned;
/// without `opts.transports`, also validates the pool configuration of every
/// configured endpoint (coalesce_pool_config; config_error naming the
/// client_config field, e.g. `timeout`) and loads the TLS files of
/// `opts.tls_template` (config_error `tls.ca_file`, ...), so that nothing
/// the driver checks later can fail on first use. Plain and TLS endpoints
/// may be mixed.
///
/// The driver monitors each transport: when one terminates, the attempt in
/// flight on it fails at once (transport_error_kind::interrupted, as if the
/// connection was reset: ts moves on, seq is uncertain_outcome) and the
/// next attempt to that endpoint gets a new transport. An exception inside
/// a handler (a transport factory that throws, a TLS file gone since
/// construction) becomes a typed error answer (error_kind::config_error for
/// a config_error, else service_unavailable "internal error ..."); the
/// driver stays alive. When the driver itself terminates, every caller still
/// waiting gets service_unavailable at once.
coalescing_driver_actor make_coalescing_driver(caf::actor_system& sys,
                                               coalesce_config cfg,
                                               coalesce_options opts = {});

/// Maps a discovery failure to the caller's error kind (see coalesce_reply).
error_kind coalesce_error_kind(discovery_error e);

} // namespace coalesce
} // namespace outbound

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::ts_call)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::seq_call)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::coalesce_reply)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::coalesce_stats)
