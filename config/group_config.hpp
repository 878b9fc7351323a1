#pragma once

// Configuration of a feed group member (actors/group/feed_group.hpp): the
// group's identity, the decision core's timing (core/group_state.hpp) and
// where its store is. Plain data, durations in seconds as doubles like the
// other configs; validate() throws config_error naming the first bad field
// ("group.lease_ttl: ..."). Loaded from JSON (parse_group_config; from a
// file, load_group_config, whose errors also name the file) and from
// OUTBOUND_GROUP_* environment variables (group_config_from_env). Feed ids
// are checked by validate_group_feed_ids.

#include "config/client_config.hpp"
#include "config/config_error.hpp"
#include "core/group_state.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
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
  /// left at client_config's defaults (store_client_config). Its `tls`
  /// (ca_file: the CA that verifies etcd instead of the system trust
  /// store; client_cert_file and client_key_file: the identity etcd's
  /// --client-cert-auth asks for) is read from JSON
  /// (coordinator.client.tls) and OUTBOUND_GROUP_CA_FILE, _CLIENT_CERT,
  /// _CLIENT_KEY; it needs an https endpoint. The TLS server name (SNI and
  /// host-name verification) is the endpoint's host.
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

/// Whether a config source must name the group and the member itself
/// (parse_group_config, load_group_config).
enum class group_names : uint8_t {
  /// name and member_name are required (the source is the whole config).
  required,
  /// Either may be absent (left empty), for a source that another one
  /// completes: a file shared by every member, with the member's name
  /// from a flag or the environment. Present names are still checked.
  optional,
};

/// Parses a JSON object of group_config fields (every field optional but
/// name and member_name, unless `names` is optional; durations in
/// seconds):
///   {"name": "billing", "member_name": "host-1:9000",
///    "lease_ttl": 5, "renew_interval": 1.5, "fence_margin": 1,
///    "poll_interval": 0.5, "reconcile_interval": 5,
///    "checkpoint_interval": 1, "batch": 64, "initial_settle": 3,
///    "min_members": 1, "rebalance_delay": 5,
///    "max_starts_per_second": 1000, "max_feeds": 20000,
///    "coordinator": {"kind": "etcd", "endpoint": "https://etcd-1:2379",
///                    "prefix": "/outbound/groups/",
///                    "client": {"tls": {"ca_file": "/etc/etcd/ca.pem",
///                                       "client_cert_file": "m.pem",
///                                       "client_key_file": "m.key"}}}}
/// Unknown fields, duplicate keys and wrong types are errors naming the
/// field ("group.coordinator.kind"). Counts (batch, min_members,
/// max_starts_per_second, max_feeds, max_inflight_batches) must be
/// integers in validate()'s range (an integral double such as 16.0 is
/// one); anything else (a fraction, a negative or huge number, a string,
/// a bool) is an error stating that range and the value given
/// ("group.max_inflight_batches: must be an integer in 1..1024, got 4.5").
/// Of coordinator.client only `tls` has a JSON form (its other fields:
/// set them in code). Validated. Throws config_error.
group_config parse_group_config(std::string_view json_text,
                                group_names names = group_names::required);

/// Reads the file at `path` and parses it like parse_group_config. Throws
/// config_file_error: field "group" when the file cannot be read ("cannot
/// read: <strerror>") or is a directory ("<path>: group: is a directory"),
/// else the field parse_group_config names.
group_config load_group_config(const std::string& path,
                               group_names names = group_names::required);

/// Feed ids at most this long, in bytes (an id is part of an etcd key and
/// of every delivery line and log field).
inline constexpr std::size_t max_feed_id_bytes = 200;

/// Checks the feed ids of a group: each 1 to max_feed_id_bytes bytes of
/// UTF-8 without control characters (C0, DEL, C1), and no id twice.
/// Throws config_error naming `feeds[i].id`, with the offending id quoted
/// and escaped (a control character or a byte that is not UTF-8 as \xNN;
/// a long id cut to its first 40 bytes) in the message.
void validate_group_feed_ids(const std::vector<std::string>& ids);

/// Builds a validated config from OUTBOUND_GROUP_NAME, _MEMBER_NAME,
/// _LEASE_TTL, _RENEW_INTERVAL, _FENCE_MARGIN, _POLL_INTERVAL,
/// _RECONCILE_INTERVAL, _CHECKPOINT_INTERVAL, _BATCH, _INITIAL_SETTLE,
/// _MIN_MEMBERS, _REBALANCE_DELAY, _MAX_STARTS_PER_SECOND, _MAX_FEEDS,
/// _MAX_INFLIGHT_BATCHES, _COORDINATOR (etcd|memory), _ENDPOINT, _PREFIX,
/// and the store client's TLS files _CA_FILE, _CLIENT_CERT, _CLIENT_KEY
/// (the {PREFIX}_* shape of config/client_config.hpp's env_settings); a
/// variable that is set (even to "") replaces the field of `base`, one
/// that is unset leaves it. Durations are decimal seconds ("1.5"), counts
/// decimal integers. Every error on a field a variable set names the
/// variable and shows its value, whether the value is malformed or out of
/// validate()'s range ("OUTBOUND_GROUP_MAX_INFLIGHT_BATCHES: must be an
/// integer in 1..1024, got 0", "OUTBOUND_GROUP_LEASE_TTL: must be >= 2
/// seconds (etcd's minimum TTL), got 1"); an error on a field of `base`
/// that no variable set names the field (group.lease_ttl). A check across
/// fields names the field it reports (renew_interval <= lease_ttl / 3:
/// renew_interval). Throws config_error.
group_config group_config_from_env(group_config base = {});

/// group_config_from_env in two steps, for a caller that applies another
/// source over the variables before validating (`outbound group-member`'s
/// flags, which override them): read_group_env applies the variables to
/// `base` (a malformed value, or a count out of its range, throws
/// config_error naming the variable), and validate() checks a config built
/// on `config`, naming the variable for a field in `fields`.
struct group_env {
  /// `base` with every variable that is set applied.
  group_config config;
  /// Per field a variable set, by validate()'s name ("group.lease_ttl"):
  /// the variable and its value. A caller whose own source replaced a
  /// field removes it here, so that an error names that source's field.
  std::map<std::string, std::pair<std::string, std::string>> fields;

  /// c.validate(); an error on a field in `fields` is rethrown naming the
  /// variable and showing its value. Throws config_error.
  void validate(const group_config& c) const;
};

/// See group_env. Throws config_error.
group_env read_group_env(group_config base = {});

} // namespace config
} // namespace outbound
