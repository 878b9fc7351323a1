// Feed-group families (metrics/group_metrics.hpp): values after one and two
// snapshots, counters that only increase (deltas, restarted members), the
// bounded label sets, several members and groups, and the text exposition.

#include "metrics/group_metrics.hpp"

#include <gtest/gtest.h>

#include <prometheus/text_serializer.h>

#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>

using namespace outbound;

namespace {

using labels = std::map<std::string, std::string>;

/// The value of the series `name` whose labels include `want`; NaN when
/// there is none.
double value_of(prometheus::Registry& reg, const std::string& name,
                const labels& want) {
  for (auto& fam : reg.Collect()) {
    if (fam.name != name)
      continue;
    for (auto& m : fam.metric) {
      bool match = true;
      for (auto& [k, v] : want) {
        bool found = false;
        for (auto& l : m.label)
          found = found || (l.name == k && l.value == v);
        match = match && found;
      }
      if (match)
        return fam.type == prometheus::MetricType::Counter ? m.counter.value
                                                           : m.gauge.value;
    }
  }
  return std::numeric_limits<double>::quiet_NaN();
}

/// Every label set (as "k=v,k=v") of the family `name`.
std::set<std::string> label_sets(prometheus::Registry& reg,
                                 const std::string& name) {
  std::set<std::string> out;
  for (auto& fam : reg.Collect()) {
    if (fam.name != name)
      continue;
    for (auto& m : fam.metric) {
      std::string s;
      for (auto& l : m.label)
        s += (s.empty() ? "" : ",") + l.name + "=" + l.value;
      out.insert(s);
    }
  }
  return out;
}

group_status status(const std::string& member = "host-1:9000") {
  group_status s;
  s.group = "billing";
  s.member = member;
  s.incarnation = "inc-1";
  s.phase = group_phase::active;
  s.leased = true;
  s.fence_in = 2.5;
  s.members = 3;
  s.feeds_total = 300;
  s.desired = 100;
  s.owned = 98;
  s.running = 97;
  auto& c = s.counters;
  c.claims_won = 100;
  c.claims_held = 5;
  c.claim_errors = 1;
  c.commits_ok = 40;
  c.commits_fenced = 2;
  c.commit_errors = 3;
  c.dropped = {4, 0, 2, 0};
  c.renewals_ok = 20;
  c.renewals_error = 1;
  c.renewals_lost = 0;
  c.holds = 1;
  c.rejoins = 0;
  c.spawns = 102;
  s.moved_in = 100;
  s.moved_out = 4;
  s.checkpoint_lag = 17;
  s.checkpoint_age = 0.75;
  return s;
}

const labels billing{{"group", "billing"}};

labels billing_with(const std::string& k, const std::string& v) {
  auto l = billing;
  l[k] = v;
  return l;
}

} // namespace

TEST(GroupMetrics, FirstSnapshotSetsEveryFamily) {
  prometheus::Registry reg;
  group_metrics m{reg};
  ASSERT_TRUE(m.update(status()));
  EXPECT_EQ(value_of(reg, "outbound_group_members", billing), 3);
  EXPECT_EQ(
    value_of(reg, "outbound_group_feeds", billing_with("state", "configured")),
    300);
  EXPECT_EQ(
    value_of(reg, "outbound_group_feeds", billing_with("state", "desired")),
    100);
  EXPECT_EQ(
    value_of(reg, "outbound_group_feeds", billing_with("state", "owned")), 98);
  EXPECT_EQ(
    value_of(reg, "outbound_group_feeds", billing_with("state", "running")),
    97);
  EXPECT_EQ(
    value_of(reg, "outbound_group_claims_total", billing_with("result", "won")),
    100);
  EXPECT_EQ(value_of(reg, "outbound_group_claims_total",
                     billing_with("result", "held")),
            5);
  EXPECT_EQ(value_of(reg, "outbound_group_claims_total",
                     billing_with("result", "error")),
            1);
  EXPECT_EQ(value_of(reg, "outbound_group_releases_total",
                     billing_with("reason", "rebalance")),
            4);
  EXPECT_EQ(value_of(reg, "outbound_group_releases_total",
                     billing_with("reason", "leave")),
            0);
  EXPECT_EQ(value_of(reg, "outbound_group_releases_total",
                     billing_with("reason", "fenced")),
            2);
  EXPECT_EQ(value_of(reg, "outbound_group_releases_total",
                     billing_with("reason", "lease_lost")),
            0);
  EXPECT_EQ(value_of(reg, "outbound_group_lease_renewals_total",
                     billing_with("result", "ok")),
            20);
  EXPECT_EQ(value_of(reg, "outbound_group_lease_renewals_total",
                     billing_with("result", "error")),
            1);
  EXPECT_EQ(value_of(reg, "outbound_group_lease_renewals_total",
                     billing_with("result", "lost")),
            0);
  EXPECT_EQ(value_of(reg, "outbound_group_fence_remaining_seconds", billing),
            2.5);
  EXPECT_EQ(value_of(reg, "outbound_group_holding", billing), 0);
  EXPECT_EQ(value_of(reg, "outbound_group_self_fences_total",
                     billing_with("reason", "deadline")),
            1);
  EXPECT_EQ(value_of(reg, "outbound_group_self_fences_total",
                     billing_with("reason", "lease_lost")),
            0);
  EXPECT_EQ(value_of(reg, "outbound_group_self_fences_total",
                     billing_with("reason", "token")),
            2);
  EXPECT_EQ(
    value_of(reg, "outbound_group_commits_total", billing_with("result", "ok")),
    40);
  EXPECT_EQ(value_of(reg, "outbound_group_commits_total",
                     billing_with("result", "fenced")),
            2);
  EXPECT_EQ(value_of(reg, "outbound_group_commits_total",
                     billing_with("result", "error")),
            3);
  EXPECT_EQ(value_of(reg, "outbound_group_checkpoint_lag_events", billing), 17);
  EXPECT_EQ(value_of(reg, "outbound_group_checkpoint_age_seconds", billing),
            0.75);
  EXPECT_EQ(value_of(reg, "outbound_group_feeds_moved_total",
                     billing_with("direction", "in")),
            100);
  EXPECT_EQ(value_of(reg, "outbound_group_feeds_moved_total",
                     billing_with("direction", "out")),
            4);
  EXPECT_EQ(value_of(reg, "outbound_group_spawns_total", billing), 102);
}

TEST(GroupMetrics, SecondSnapshotAddsOnlyTheDifference) {
  prometheus::Registry reg;
  group_metrics m{reg};
  m.update(status());
  auto s = status();
  s.counters.claims_won = 110;
  s.counters.renewals_ok = 27;
  s.counters.renewals_error = 4;
  s.counters.rejoins = 1;
  s.counters.dropped[3] = 90;
  s.counters.spawns = 112;
  s.moved_out = 94;
  s.owned = 0;
  s.running = 0;
  s.holding = true;
  s.fence_in = -0.5;
  s.checkpoint_lag = 0;
  m.update(s);
  EXPECT_EQ(
    value_of(reg, "outbound_group_claims_total", billing_with("result", "won")),
    110);
  EXPECT_EQ(value_of(reg, "outbound_group_claims_total",
                     billing_with("result", "held")),
            5);
  EXPECT_EQ(value_of(reg, "outbound_group_lease_renewals_total",
                     billing_with("result", "ok")),
            27);
  EXPECT_EQ(value_of(reg, "outbound_group_lease_renewals_total",
                     billing_with("result", "error")),
            4);
  EXPECT_EQ(value_of(reg, "outbound_group_self_fences_total",
                     billing_with("reason", "lease_lost")),
            1);
  EXPECT_EQ(value_of(reg, "outbound_group_releases_total",
                     billing_with("reason", "lease_lost")),
            90);
  EXPECT_EQ(value_of(reg, "outbound_group_spawns_total", billing), 112);
  EXPECT_EQ(value_of(reg, "outbound_group_feeds_moved_total",
                     billing_with("direction", "out")),
            94);
  // Gauges are the latest values.
  EXPECT_EQ(
    value_of(reg, "outbound_group_feeds", billing_with("state", "owned")), 0);
  EXPECT_EQ(value_of(reg, "outbound_group_holding", billing), 1);
  EXPECT_EQ(value_of(reg, "outbound_group_fence_remaining_seconds", billing),
            -0.5);
  EXPECT_EQ(value_of(reg, "outbound_group_checkpoint_lag_events", billing), 0);
  // The same snapshot again changes nothing.
  m.update(s);
  EXPECT_EQ(
    value_of(reg, "outbound_group_claims_total", billing_with("result", "won")),
    110);
}

TEST(GroupMetrics, ALowerSnapshotIsARestartedMemberAndCountersKeepRising) {
  prometheus::Registry reg;
  group_metrics m{reg};
  m.update(status());
  // The member restarted: its counters start again.
  group_status fresh;
  fresh.group = "billing";
  fresh.member = "host-1:9000";
  fresh.counters.claims_won = 7;
  fresh.counters.renewals_ok = 2;
  m.update(fresh);
  EXPECT_EQ(
    value_of(reg, "outbound_group_claims_total", billing_with("result", "won")),
    107);
  EXPECT_EQ(value_of(reg, "outbound_group_lease_renewals_total",
                     billing_with("result", "ok")),
            22);
  EXPECT_EQ(value_of(reg, "outbound_group_spawns_total", billing), 102);
  // And from there, differences again.
  fresh.counters.claims_won = 9;
  m.update(fresh);
  EXPECT_EQ(
    value_of(reg, "outbound_group_claims_total", billing_with("result", "won")),
    109);
}

TEST(GroupMetrics, LabelsAreTheGroupAndOneBoundedEnum) {
  prometheus::Registry reg;
  group_metrics m{reg};
  m.update(status());
  using set = std::set<std::string>;
  EXPECT_EQ(label_sets(reg, "outbound_group_members"), set{"group=billing"});
  EXPECT_EQ(
    label_sets(reg, "outbound_group_feeds"),
    (set{"group=billing,state=configured", "group=billing,state=desired",
         "group=billing,state=owned", "group=billing,state=running"}));
  EXPECT_EQ(label_sets(reg, "outbound_group_claims_total"),
            (set{"group=billing,result=won", "group=billing,result=held",
                 "group=billing,result=error"}));
  EXPECT_EQ(
    label_sets(reg, "outbound_group_releases_total"),
    (set{"group=billing,reason=rebalance", "group=billing,reason=leave",
         "group=billing,reason=fenced", "group=billing,reason=lease_lost"}));
  EXPECT_EQ(label_sets(reg, "outbound_group_lease_renewals_total"),
            (set{"group=billing,result=ok", "group=billing,result=error",
                 "group=billing,result=lost"}));
  EXPECT_EQ(
    label_sets(reg, "outbound_group_self_fences_total"),
    (set{"group=billing,reason=deadline", "group=billing,reason=lease_lost",
         "group=billing,reason=token"}));
  EXPECT_EQ(label_sets(reg, "outbound_group_commits_total"),
            (set{"group=billing,result=ok", "group=billing,result=fenced",
                 "group=billing,result=error"}));
  EXPECT_EQ(label_sets(reg, "outbound_group_feeds_moved_total"),
            (set{"direction=in,group=billing", "direction=out,group=billing"}));
  for (auto name :
       {"outbound_group_fence_remaining_seconds", "outbound_group_holding",
        "outbound_group_checkpoint_lag_events",
        "outbound_group_checkpoint_age_seconds", "outbound_group_spawns_total"})
    EXPECT_EQ(label_sets(reg, name), set{"group=billing"}) << name;
  // No member, incarnation or feed anywhere in the exposition.
  auto text = prometheus::TextSerializer{}.Serialize(reg.Collect());
  EXPECT_EQ(text.find("host-1"), std::string::npos);
  EXPECT_EQ(text.find("inc-1"), std::string::npos);
  EXPECT_EQ(text.find("member="), std::string::npos);
  EXPECT_EQ(text.find("feed="), std::string::npos);
}

TEST(GroupMetrics, TextExpositionNamesEveryFamilyWithItsType) {
  prometheus::Registry reg;
  group_metrics m{reg};
  m.update(status());
  auto text = prometheus::TextSerializer{}.Serialize(reg.Collect());
  for (auto gauge :
       {"outbound_group_members", "outbound_group_feeds",
        "outbound_group_fence_remaining_seconds", "outbound_group_holding",
        "outbound_group_checkpoint_lag_events",
        "outbound_group_checkpoint_age_seconds"})
    EXPECT_NE(text.find(std::string{"# TYPE "} + gauge + " gauge"),
              std::string::npos)
      << gauge;
  for (auto counter :
       {"outbound_group_claims_total", "outbound_group_releases_total",
        "outbound_group_lease_renewals_total",
        "outbound_group_self_fences_total", "outbound_group_commits_total",
        "outbound_group_feeds_moved_total", "outbound_group_spawns_total"})
    EXPECT_NE(text.find(std::string{"# TYPE "} + counter + " counter"),
              std::string::npos)
      << counter;
  EXPECT_NE(
    text.find(R"(outbound_group_feeds{group="billing",state="owned"} 98)"),
    std::string::npos)
    << text;
}

TEST(GroupMetrics, MembersOfOneGroupInOneProcessAreCombined) {
  prometheus::Registry reg;
  group_metrics m{reg};
  auto a = status("a");
  auto b = status("b");
  b.owned = 50;
  b.desired = 60;
  b.running = 49;
  b.fence_in = 1.0;
  b.checkpoint_lag = 30;
  b.members = 2;
  m.update(a);
  m.update(b);
  EXPECT_EQ(
    value_of(reg, "outbound_group_feeds", billing_with("state", "owned")), 148);
  EXPECT_EQ(
    value_of(reg, "outbound_group_feeds", billing_with("state", "configured")),
    300);
  EXPECT_EQ(value_of(reg, "outbound_group_members", billing), 3);
  EXPECT_EQ(value_of(reg, "outbound_group_fence_remaining_seconds", billing),
            1.0);
  EXPECT_EQ(value_of(reg, "outbound_group_checkpoint_lag_events", billing), 30);
  EXPECT_EQ(
    value_of(reg, "outbound_group_claims_total", billing_with("result", "won")),
    200);
  // Interleaved snapshots of two members are not mistaken for restarts.
  a.counters.claims_won = 101;
  m.update(a);
  m.update(b);
  EXPECT_EQ(
    value_of(reg, "outbound_group_claims_total", billing_with("result", "won")),
    201);
  // A member that is gone stops counting in the gauges, not the counters.
  m.remove_member("billing", "a");
  EXPECT_EQ(
    value_of(reg, "outbound_group_feeds", billing_with("state", "owned")), 50);
  EXPECT_EQ(
    value_of(reg, "outbound_group_claims_total", billing_with("result", "won")),
    201);
}

TEST(GroupMetrics, GroupsHaveTheirOwnSeriesAndCanBeRemoved) {
  prometheus::Registry reg;
  group_metrics m{reg};
  auto s = status();
  m.update(s);
  s.group = "orders";
  s.owned = 5;
  m.update(s);
  EXPECT_EQ(value_of(reg, "outbound_group_feeds",
                     {{"group", "orders"}, {"state", "owned"}}),
            5);
  EXPECT_EQ(
    value_of(reg, "outbound_group_feeds", billing_with("state", "owned")), 98);
  m.remove_group("orders");
  EXPECT_TRUE(std::isnan(value_of(reg, "outbound_group_feeds",
                                  {{"group", "orders"}, {"state", "owned"}})));
  EXPECT_EQ(
    value_of(reg, "outbound_group_feeds", billing_with("state", "owned")), 98);
  // A status without a group is not exported.
  group_status none;
  EXPECT_FALSE(m.update(none));
}

TEST(GroupMetrics, DestroyingTheExporterRemovesItsSeries) {
  prometheus::Registry reg;
  {
    group_metrics m{reg};
    m.update(status());
  }
  auto text = prometheus::TextSerializer{}.Serialize(reg.Collect());
  EXPECT_EQ(text.find("billing"), std::string::npos) << text;
}
