#pragma once

// Prometheus families of feed groups (config/group_config.hpp), fed from
// the members' group_status snapshots (core/group_status.hpp): whoever asks
// a member for its stats (its `stats_atom`, `leave_atom` or `stop_atom`
// answer) hands the status to update(). The families live in the process's
// event-driven registry (metrics_registry::registry(),
// metrics/outbound_metrics.hpp), so the metrics_exposer serves them with
// everything else:
//
//   auto reg = std::make_shared<metrics_registry>();
//   group_metrics groups{*reg->registry()};     // reg must outlive it
//   ... every poll interval, per member:
//   groups.update(status);                      // a group_status
//   ... when a member is gone:
//   groups.remove_member(status.group, status.member);
//
// Counters come from cumulative snapshots: each update() adds the
// difference to the member's previous snapshot, so the Prometheus counters
// only ever increase. A snapshot with any counter below the previous one is
// a restarted member (its counters start again at 0, the way a scraped
// process's do): all its values are added as they are, like Prometheus's
// own counter-reset handling in rate() and increase(). Counts made between
// the last snapshot before a restart and the restart are lost, as they are
// for a crashed process.
//
// Labels are bounded (design: no feed, no member label; `instance` tells
// the processes apart): `group` (a configured name) and one enum label per
// family. Several members of one group in one process (in-memory store,
// tests) are exported as one series per group: counters and the owned,
// desired and running feeds are summed, members and configured feeds are
// the largest view, the fence the nearest deadline, holding, lag and age
// the worst member.

#include "core/group_status.hpp"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace outbound {
inline namespace metrics {

/// The feed-group families of one registry, one set of series per group
/// (created at the group's first update(), every label value at 0).
///
// clang-format off
/// | metric | type | labels | from group_status |
/// |---|---|---|---|
/// | outbound_group_members | gauge | group | members (the last store view) |
/// | outbound_group_feeds | gauge | group, state="configured"\|"desired"\|"owned"\|"running" | feeds_total, desired, owned, running |
/// | outbound_group_claims_total | counter | group, result="won"\|"held"\|"error" | counters.claims_won, claims_held, claim_errors |
/// | outbound_group_releases_total | counter | group, reason="rebalance"\|"leave"\|"fenced"\|"lease_lost" | counters.dropped[stop_reason] |
/// | outbound_group_lease_renewals_total | counter | group, result="ok"\|"error"\|"lost" | counters.renewals_ok, renewals_error, renewals_lost |
/// | outbound_group_fence_remaining_seconds | gauge | group | fence_in (negative: passed) |
/// | outbound_group_holding | gauge | group | holding (0 / 1) |
/// | outbound_group_self_fences_total | counter | group, reason="deadline"\|"lease_lost"\|"token" | counters.holds, rejoins, commits_fenced |
/// | outbound_group_commits_total | counter | group, result="ok"\|"fenced"\|"error" | counters.commits_ok, commits_fenced, commit_errors |
/// | outbound_group_checkpoint_lag_events | gauge | group | checkpoint_lag |
/// | outbound_group_checkpoint_age_seconds | gauge | group | checkpoint_age |
/// | outbound_group_feeds_moved_total | counter | group, direction="in"\|"out" | moved_in, moved_out |
/// | outbound_group_spawns_total | counter | group | counters.spawns |
// clang-format on
///
/// Thread-safe (one mutex around the snapshots; prometheus-cpp's counters
/// and gauges are atomic for the scrape).
class group_metrics {
public:
  /// Registers the families in `registry`, which must outlive this object
  /// (families of the same name already there are shared: prometheus-cpp
  /// merges them). Make one per registry: two objects updating the same
  /// group would share its series, and the first one destroyed would
  /// remove them under the other.
  explicit group_metrics(prometheus::Registry& registry);

  /// Removes every series this object added.
  ~group_metrics();

  group_metrics(const group_metrics&) = delete;
  group_metrics& operator=(const group_metrics&) = delete;

  /// Applies the latest snapshot of member `s.member` of group `s.group`
  /// (see the header comment for counters and resets). A status with an
  /// empty group name is ignored (returns false).
  bool update(const group_status& s);

  /// Forgets a member that is gone: its gauges no longer count; the
  /// group's counters keep what it added. The group's series stay (at the
  /// remaining members' values, gauges 0 with none left).
  void remove_member(const std::string& group, const std::string& member);

  /// Drops every series of `group` (a group this process no longer
  /// serves).
  void remove_group(const std::string& group);

private:
  /// The cumulative counters of one snapshot, in the order of counters_.
  static constexpr std::size_t counter_count = 19;
  using counter_values = std::array<uint64_t, counter_count>;

  struct series {
    prometheus::Gauge* members = nullptr;
    std::array<prometheus::Gauge*, 4> feeds{};
    prometheus::Gauge* fence_remaining = nullptr;
    prometheus::Gauge* holding = nullptr;
    prometheus::Gauge* checkpoint_lag = nullptr;
    prometheus::Gauge* checkpoint_age = nullptr;
    std::array<prometheus::Counter*, counter_count> counters{};
  };

  struct group_entry {
    series s;
    /// Each member's last snapshot and counters.
    std::map<std::string, std::pair<group_status, counter_values>> members;
  };

  static counter_values counters_of(const group_status& s);
  group_entry& entry(const std::string& group);
  void set_gauges(group_entry& e);
  void remove_series(const series& s);

  prometheus::Family<prometheus::Gauge>& members_;
  prometheus::Family<prometheus::Gauge>& feeds_;
  prometheus::Family<prometheus::Gauge>& fence_remaining_;
  prometheus::Family<prometheus::Gauge>& holding_;
  prometheus::Family<prometheus::Gauge>& checkpoint_lag_;
  prometheus::Family<prometheus::Gauge>& checkpoint_age_;
  prometheus::Family<prometheus::Counter>& claims_;
  prometheus::Family<prometheus::Counter>& releases_;
  prometheus::Family<prometheus::Counter>& renewals_;
  prometheus::Family<prometheus::Counter>& self_fences_;
  prometheus::Family<prometheus::Counter>& commits_;
  prometheus::Family<prometheus::Counter>& moved_;
  prometheus::Family<prometheus::Counter>& spawns_;
  std::mutex mtx_;
  std::map<std::string, group_entry> groups_;
};

} // namespace metrics
} // namespace outbound
