#include "metrics/group_metrics.hpp"

#include <algorithm>

namespace outbound {
inline namespace metrics {

namespace {

prometheus::Family<prometheus::Gauge>&
gauge_family(prometheus::Registry& r, const char* name, const char* help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(r);
}

prometheus::Family<prometheus::Counter>&
counter_family(prometheus::Registry& r, const char* name, const char* help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r);
}

/// The label values of the counters, in the order of counters_of().
constexpr const char* claim_results[] = {"won", "held", "error"};
constexpr const char* release_reasons[]
  = {"rebalance", "leave", "fenced", "lease_lost"};
constexpr const char* renewal_results[] = {"ok", "error", "lost"};
constexpr const char* fence_reasons[] = {"deadline", "lease_lost", "token"};
constexpr const char* commit_results[] = {"ok", "fenced", "error"};
constexpr const char* directions[] = {"in", "out"};
constexpr const char* feed_states[]
  = {"configured", "desired", "owned", "running"};

double as_double(uint64_t x) {
  return static_cast<double>(x);
}

} // namespace

group_metrics::group_metrics(prometheus::Registry& registry)
  : members_(gauge_family(registry, "outbound_group_members",
                          "Members of the feed group in the last store view")),
    feeds_(gauge_family(registry, "outbound_group_feeds",
                        "Feeds of the group configured, desired (won by "
                        "rendezvous hashing), owned and running here")),
    fence_remaining_(gauge_family(registry,
                                  "outbound_group_fence_remaining_seconds",
                                  "Seconds until the fence deadline "
                                  "(negative: passed)")),
    holding_(gauge_family(registry, "outbound_group_holding",
                          "1 while deliveries are held: the fence deadline "
                          "passed and the store could not be reached")),
    checkpoint_lag_(gauge_family(registry,
                                 "outbound_group_checkpoint_lag_events",
                                 "Max over owned feeds of acknowledged but "
                                 "uncommitted events")),
    checkpoint_age_(gauge_family(registry,
                                 "outbound_group_checkpoint_age_seconds",
                                 "Age of the oldest uncommitted progress")),
    claims_(counter_family(registry, "outbound_group_claims_total",
                           "Feed claims answered, by result")),
    releases_(counter_family(registry, "outbound_group_releases_total",
                             "Ownerships given up, by reason (fenced and "
                             "lease_lost: dropped without a release)")),
    renewals_(counter_family(registry, "outbound_group_lease_renewals_total",
                             "Lease keepalives answered, by result")),
    self_fences_(counter_family(registry, "outbound_group_self_fences_total",
                                "Times the member fenced itself: deliveries "
                                "held at the deadline, lease lost, commit "
                                "fenced by the token")),
    commits_(counter_family(registry, "outbound_group_commits_total",
                            "Cursor commits answered per feed, by result")),
    moved_(counter_family(registry, "outbound_group_feeds_moved_total",
                          "Feeds handed in by a claim and out by a release")),
    spawns_(counter_family(registry, "outbound_group_spawns_total",
                           "Feed watchers spawned by the group")) {
}

group_metrics::~group_metrics() {
  std::lock_guard<std::mutex> guard{mtx_};
  for (auto& kv : groups_)
    remove_series(kv.second.s);
}

group_metrics::counter_values
group_metrics::counters_of(const group_status& s) {
  const auto& c = s.counters;
  // One line per family, in the order entry() adds the series.
  // clang-format off
  return {c.claims_won, c.claims_held, c.claim_errors,            // claims
          c.dropped[0], c.dropped[1], c.dropped[2], c.dropped[3], // releases
          c.renewals_ok, c.renewals_error, c.renewals_lost,       // renewals
          c.holds, c.rejoins, c.commits_fenced,                   // self-fences
          c.commits_ok, c.commits_fenced, c.commit_errors,        // commits
          s.moved_in, s.moved_out,                                // moved
          c.spawns};                                              // spawns
  // clang-format on
}

group_metrics::group_entry& group_metrics::entry(const std::string& group) {
  auto i = groups_.find(group);
  if (i != groups_.end())
    return i->second;
  auto& e = groups_[group];
  auto& s = e.s;
  const prometheus::Labels g{{"group", group}};
  auto with = [&](const char* name, const char* value) {
    auto l = g;
    l.emplace(name, value);
    return l;
  };
  s.members = &members_.Add(g);
  for (std::size_t i = 0; i < 4; ++i)
    s.feeds[i] = &feeds_.Add(with("state", feed_states[i]));
  s.fence_remaining = &fence_remaining_.Add(g);
  s.holding = &holding_.Add(g);
  s.checkpoint_lag = &checkpoint_lag_.Add(g);
  s.checkpoint_age = &checkpoint_age_.Add(g);
  std::size_t k = 0;
  for (auto r : claim_results)
    s.counters[k++] = &claims_.Add(with("result", r));
  for (auto r : release_reasons)
    s.counters[k++] = &releases_.Add(with("reason", r));
  for (auto r : renewal_results)
    s.counters[k++] = &renewals_.Add(with("result", r));
  for (auto r : fence_reasons)
    s.counters[k++] = &self_fences_.Add(with("reason", r));
  for (auto r : commit_results)
    s.counters[k++] = &commits_.Add(with("result", r));
  for (auto d : directions)
    s.counters[k++] = &moved_.Add(with("direction", d));
  s.counters[k++] = &spawns_.Add(g);
  return e;
}

bool group_metrics::update(const group_status& st) {
  if (st.group.empty())
    return false;
  std::lock_guard<std::mutex> guard{mtx_};
  auto& e = entry(st.group);
  auto now = counters_of(st);
  auto i = e.members.find(st.member);
  if (i == e.members.end()) {
    // First snapshot of this member: everything it counted is new.
    for (std::size_t k = 0; k < counter_count; ++k)
      e.s.counters[k]->Increment(as_double(now[k]));
    e.members.emplace(st.member, std::make_pair(st, now));
  } else {
    auto& last = i->second.second;
    bool reset = false;
    for (std::size_t k = 0; k < counter_count; ++k)
      reset = reset || now[k] < last[k];
    // A restarted member counts from 0 again: its whole snapshot is new.
    for (std::size_t k = 0; k < counter_count; ++k)
      e.s.counters[k]->Increment(as_double(reset ? now[k] : now[k] - last[k]));
    i->second = std::make_pair(st, now);
  }
  set_gauges(e);
  return true;
}

void group_metrics::set_gauges(group_entry& e) {
  double members = 0, fence = 0, holding = 0, lag = 0, age = 0;
  std::array<double, 4> feeds{};
  bool first = true;
  for (const auto& kv : e.members) {
    const auto& st = kv.second.first;
    members = std::max(members, as_double(st.members));
    feeds[0] = std::max(feeds[0], as_double(st.feeds_total));
    feeds[1] += as_double(st.desired);
    feeds[2] += as_double(st.owned);
    feeds[3] += as_double(st.running);
    fence = first ? st.fence_in : std::min(fence, st.fence_in);
    holding = std::max(holding, st.holding ? 1.0 : 0.0);
    lag = std::max(lag, as_double(st.checkpoint_lag));
    age = std::max(age, st.checkpoint_age);
    first = false;
  }
  e.s.members->Set(members);
  for (std::size_t i = 0; i < 4; ++i)
    e.s.feeds[i]->Set(feeds[i]);
  e.s.fence_remaining->Set(fence);
  e.s.holding->Set(holding);
  e.s.checkpoint_lag->Set(lag);
  e.s.checkpoint_age->Set(age);
}

void group_metrics::remove_member(const std::string& group,
                                  const std::string& member) {
  std::lock_guard<std::mutex> guard{mtx_};
  auto i = groups_.find(group);
  if (i == groups_.end())
    return;
  i->second.members.erase(member);
  set_gauges(i->second);
}

void group_metrics::remove_group(const std::string& group) {
  std::lock_guard<std::mutex> guard{mtx_};
  auto i = groups_.find(group);
  if (i == groups_.end())
    return;
  remove_series(i->second.s);
  groups_.erase(i);
}

void group_metrics::remove_series(const series& s) {
  members_.Remove(s.members);
  for (auto* g : s.feeds)
    feeds_.Remove(g);
  fence_remaining_.Remove(s.fence_remaining);
  holding_.Remove(s.holding);
  checkpoint_lag_.Remove(s.checkpoint_lag);
  checkpoint_age_.Remove(s.checkpoint_age);
  std::size_t k = 0;
  for (std::size_t n = 0; n < 3; ++n)
    claims_.Remove(s.counters[k++]);
  for (std::size_t n = 0; n < 4; ++n)
    releases_.Remove(s.counters[k++]);
  for (std::size_t n = 0; n < 3; ++n)
    renewals_.Remove(s.counters[k++]);
  for (std::size_t n = 0; n < 3; ++n)
    self_fences_.Remove(s.counters[k++]);
  for (std::size_t n = 0; n < 3; ++n)
    commits_.Remove(s.counters[k++]);
  for (std::size_t n = 0; n < 2; ++n)
    moved_.Remove(s.counters[k++]);
  spawns_.Remove(s.counters[k++]);
}

} // namespace metrics
} // namespace outbound
