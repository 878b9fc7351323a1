#pragma once

// Configuration of a feed group member (actors/group/feed_group.hpp): the
// group's identity, the decision core's timing (core/group_state.hpp) and
// where its store is. Plain data, durations in seconds as doubles like the
// other configs; validate() throws config_error naming the first bad field
// ("group.lease_ttl: ..."). Loaded from JSON (parse_group_config) and from
// OUTBOUND_GROUP_* environment variables (group_config_from_env).

#include "config/client_config.hpp"
#include "core/group_state.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace outbound {
inline namespace config {

/// Which store a group keeps its leases, owners and cursors in.
enum class coordinator_kind : uint8_t {
  /// etcd 3.4+ through its JSON gateway (/v3/*).
  etcd,
  /// In-process memory (tests and single-process demos only: members of
  /// one process share one store actor).
  memory,
};

/// Where the group's store is.
struct coordinator_config {
  /// [etcd]
  coordinator_kind kind = coordinator_kind::etcd;
  /// etcd: the gateway's base URL (http or https, no path).
  /// ["http://127.0.0.1:2379"]
  std::string endpoint = "http://127.0.0.1:2379";
  /// Key prefix of every group (ends with '/'). ["/outbound/groups/"]
  std::string prefix = "/outbound/groups/";
  /// The store's client: TLS and mTLS files, timeouts. Its base_url is
  /// `endpoint`; attempt timeout 1 s and deadline renew_interval where
  /// left at client_config's defaults (store_client_config).
  client_config client;
};

/// One member of a feed group.
struct group_config {
  /// The group's name: [a-z0-9._-]{1,64}; the store's key prefix is
  /// coordinator.prefix + name + "/". Required.
  std::string name;
  /// This member's name: its rendezvous identity, stable across restarts
  /// so a restarted member gets its feeds back (Kafka static membership,
  /// KIP-345). [A-Za-z0-9._:-]{1,128}. Required.
  std::string member_name;
  /// Timing and sizing (lease_ttl, renew_interval, fence_margin, ...).
  group_state_config timing;
  coordinator_config coordinator;

  /// Throws config_error naming the first bad field ("group.name",
  /// "group.lease_ttl", "group.coordinator.endpoint", ...), checked in
  /// this order: name, member_name, timing (group_config_error),
  /// coordinator.kind, coordinator.prefix (starts and ends with '/', no
  /// control characters); for etcd only, coordinator.endpoint (an http or
  /// https URL without user info, path, query or fragment) and
  /// coordinator.client validated with base_url = endpoint (its fields
  /// named "group.coordinator.client.<field>").
  void validate() const;
};

/// The client config of the group's etcd store: coordinator.client with
/// base_url = coordinator.endpoint, and where its timeout and deadline are
/// client_config's defaults, a 1 s attempt timeout and a deadline of
/// timing.renew_interval: a keepalive that takes longer than the renew
/// period is as good as lost, and the next one is due.
client_config store_client_config(const group_config& g);

/// Parses a JSON object of group_config fields (every field optional but
/// name and member_name; durations in seconds):
///   {"name": "billing", "member_name": "host-1:9000",
///    "lease_ttl": 5, "renew_interval": 1.5, "fence_margin": 1,
///    "poll_interval": 0.5, "reconcile_interval": 5,
///    "checkpoint_interval": 1, "batch": 64, "initial_settle": 3,
///    "min_members": 1, "rebalance_delay": 5,
///    "max_starts_per_second": 1000, "max_feeds": 20000,
///    "coordinator": {"kind": "etcd", "endpoint": "http://127.0.0.1:2379",
///                    "prefix": "/outbound/groups/"}}
/// Unknown fields, duplicate keys and wrong types are errors naming the
/// field ("group.coordinator.kind"); counts must be non-negative integers.
/// coordinator.client has no JSON form (set it in code). Validated.
/// Throws config_error.
group_config parse_group_config(std::string_view json_text);

/// Builds a validated config from OUTBOUND_GROUP_NAME, _MEMBER_NAME,
/// _LEASE_TTL, _RENEW_INTERVAL, _FENCE_MARGIN, _POLL_INTERVAL,
/// _RECONCILE_INTERVAL, _CHECKPOINT_INTERVAL, _BATCH, _INITIAL_SETTLE,
/// _MIN_MEMBERS, _REBALANCE_DELAY, _MAX_STARTS_PER_SECOND, _MAX_FEEDS,
/// _COORDINATOR (etcd|memory), _ENDPOINT, _PREFIX; a variable that is set
/// (even to "") replaces the field of `base`, one that is unset leaves it.
/// Durations are decimal seconds ("1.5"), counts decimal integers; a
/// malformed number or coordinator kind is a config_error naming the
/// variable (OUTBOUND_GROUP_LEASE_TTL), a well-formed value that fails
/// validate() names the field (group.lease_ttl). Throws config_error.
group_config group_config_from_env(group_config base = {});

} // namespace config
} // namespace outbound
