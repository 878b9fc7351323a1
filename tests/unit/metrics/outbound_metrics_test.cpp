// The snapshot collector and the metrics registry (docs/ARCHITECTURE.md):
// the exact exposition text of the families for given snapshots, through
// prometheus::TextSerializer (what the exposer serves), the feed label cap,
// and cumulative buckets (prometheus-cpp #43) on the latency histogram.

#include "metrics/outbound_metrics.hpp"

#include "metrics/client_metrics.hpp"

#include <prometheus/text_serializer.h>

#include <gtest/gtest.h>

#include <sstream>

namespace outbound::testing {
namespace {

std::string text(const std::vector<prometheus::MetricFamily>& families) {
  prometheus::TextSerializer s;
  std::ostringstream os;
  s.Serialize(os, families);
  return os.str();
}

/// The families of `families` named `name`, serialized.
std::string family_text(const std::vector<prometheus::MetricFamily>& all,
                        const std::string& name) {
  std::vector<prometheus::MetricFamily> one;
  for (auto& f : all)
    if (f.name == name)
      one.push_back(f);
  return text(one);
}

/// The sample lines of `body` that start with `prefix`, in order.
std::vector<std::string> lines_starting(const std::string& body,
                                        const std::string& prefix) {
  std::vector<std::string> out;
  std::istringstream is{body};
  for (std::string line; std::getline(is, line);)
    if (line.rfind(prefix, 0) == 0)
      out.push_back(line);
  return out;
}

hedge_key_metrics key_metrics(std::string key) {
  hedge_key_metrics k;
  k.key = std::move(key);
  k.stats.total_requests = 100;
  k.stats.hedged_requests = 7;
  k.stats.hedge_wins = 4;
  k.stats.primary_wins = 3;
  k.stats.budget_exhausted = 2;
  k.stats.circuit_blocked = 1;
  k.stats.warmup_requests = 20;
  k.stats.errors = 5;
  k.tokens = 1.5;
  k.delay = 0.25;
  return k;
}

TEST(SnapshotCollector, HedgeCountersAreCountersAndTokensAndDelayAreGauges) {
  snapshot_collector c;
  c.set_hedge_keys("users", {key_metrics("endpoint:user")});
  auto all = c.Collect();
  EXPECT_EQ(family_text(all, "outbound_hedge_fired_total"),
            "# HELP outbound_hedge_fired_total Hedges sent (breakers and "
            "budget allowed them)\n"
            "# TYPE outbound_hedge_fired_total counter\n"
            "outbound_hedge_fired_total{key=\"endpoint:user\",service="
            "\"users\"} 7\n");
  EXPECT_EQ(family_text(all, "outbound_hedge_suppressed_total"),
            "# HELP outbound_hedge_suppressed_total Hedges not sent, by "
            "reason (budget, breaker)\n"
            "# TYPE outbound_hedge_suppressed_total counter\n"
            "outbound_hedge_suppressed_total{key=\"endpoint:user\",reason="
            "\"budget\",service=\"users\"} 2\n"
            "outbound_hedge_suppressed_total{key=\"endpoint:user\",reason="
            "\"breaker\",service=\"users\"} 1\n");
  EXPECT_EQ(family_text(all, "outbound_hedge_budget_tokens"),
            "# HELP outbound_hedge_budget_tokens Hedge tokens in the key's "
            "budget bucket\n"
            "# TYPE outbound_hedge_budget_tokens gauge\n"
            "outbound_hedge_budget_tokens{key=\"endpoint:user\",service="
            "\"users\"} 1.5\n");
  EXPECT_EQ(family_text(all, "outbound_hedge_delay_seconds"),
            "# HELP outbound_hedge_delay_seconds Delay the next request "
            "waits before hedging\n"
            "# TYPE outbound_hedge_delay_seconds gauge\n"
            "outbound_hedge_delay_seconds{key=\"endpoint:user\",service="
            "\"users\"} 0.25\n");
  auto body = text(all);
  EXPECT_EQ(lines_starting(body, "outbound_hedge_requests_total{"),
            std::vector<std::string>{"outbound_hedge_requests_total{key="
                                     "\"endpoint:user\",service=\"users\"} "
                                     "100"});
  EXPECT_EQ(lines_starting(body, "outbound_hedge_won_total{"),
            std::vector<std::string>{"outbound_hedge_won_total{key="
                                     "\"endpoint:user\",service=\"users\"} 4"});
  EXPECT_EQ(lines_starting(body, "outbound_hedge_cancelled_total{"),
            std::vector<std::string>{"outbound_hedge_cancelled_total{key="
                                     "\"endpoint:user\",service=\"users\"} 3"});
  EXPECT_EQ(lines_starting(body, "outbound_hedge_errors_total{"),
            std::vector<std::string>{"outbound_hedge_errors_total{key="
                                     "\"endpoint:user\",service=\"users\"} 5"});
  // A new set replaces the old one: an evicted key disappears.
  c.set_hedge_keys("users", {key_metrics("host:api:443")});
  body = text(c.Collect());
  EXPECT_EQ(lines_starting(body, "outbound_hedge_fired_total{"),
            std::vector<std::string>{"outbound_hedge_fired_total{key="
                                     "\"host:api:443\",service=\"users\"} 7"});
}

TEST(SnapshotCollector, BreakerStateIsZeroClosedOneOpenTwoHalfOpen) {
  snapshot_collector c;
  breaker_key_snapshot host{breaker_scope::host, "host:api:443", {}};
  host.snapshot.phase = breaker_phase::open;
  host.snapshot.opens = 2;
  host.snapshot.samples = 30;
  host.snapshot.failures = 12;
  breaker_key_snapshot ep{breaker_scope::endpoint, "endpoint:user", {}};
  ep.snapshot.phase = breaker_phase::half_open;
  ep.snapshot.opens = 1;
  ep.snapshot.half_opens = 1;
  ep.snapshot.closes = 0;
  breaker_key_snapshot closed{breaker_scope::endpoint, "endpoint:list", {}};
  c.set_breakers("users", {host, ep, closed});
  auto all = c.Collect();
  EXPECT_EQ(family_text(all, "outbound_breaker_state"),
            "# HELP outbound_breaker_state Hedge breaker phase: 0 closed, 1 "
            "open, 2 half-open\n"
            "# TYPE outbound_breaker_state gauge\n"
            "outbound_breaker_state{key=\"host:api:443\",scope=\"host\","
            "service=\"users\"} 1\n"
            "outbound_breaker_state{key=\"endpoint:user\",scope=\"endpoint\","
            "service=\"users\"} 2\n"
            "outbound_breaker_state{key=\"endpoint:list\",scope=\"endpoint\","
            "service=\"users\"} 0\n");
  EXPECT_EQ(family_text(all, "outbound_breaker_opens_total"),
            "# HELP outbound_breaker_opens_total Hedge breaker transitions "
            "to open\n"
            "# TYPE outbound_breaker_opens_total counter\n"
            "outbound_breaker_opens_total{key=\"host:api:443\",scope=\"host\","
            "service=\"users\"} 2\n"
            "outbound_breaker_opens_total{key=\"endpoint:user\",scope="
            "\"endpoint\",service=\"users\"} 1\n"
            "outbound_breaker_opens_total{key=\"endpoint:list\",scope="
            "\"endpoint\",service=\"users\"} 0\n");
  auto body = text(all);
  EXPECT_EQ(lines_starting(
              body, "outbound_breaker_transitions_total{key=\"endpoint:user\""),
            (std::vector<std::string>{
              "outbound_breaker_transitions_total{key=\"endpoint:user\","
              "scope=\"endpoint\",service=\"users\",to=\"open\"} 1",
              "outbound_breaker_transitions_total{key=\"endpoint:user\","
              "scope=\"endpoint\",service=\"users\",to=\"half_open\"} 1",
              "outbound_breaker_transitions_total{key=\"endpoint:user\","
              "scope=\"endpoint\",service=\"users\",to=\"closed\"} 0"}));
  EXPECT_EQ(lines_starting(body, "outbound_breaker_window_failures{"),
            (std::vector<std::string>{
              "outbound_breaker_window_failures{key=\"host:api:443\",scope="
              "\"host\",service=\"users\"} 12",
              "outbound_breaker_window_failures{key=\"endpoint:user\",scope="
              "\"endpoint\",service=\"users\"} 0",
              "outbound_breaker_window_failures{key=\"endpoint:list\",scope="
              "\"endpoint\",service=\"users\"} 0"}));
  c.remove_hedging("users");
  EXPECT_EQ(family_text(c.Collect(), "outbound_breaker_state"), "");
}

TEST(SnapshotCollector, CoalescerCountersAndGauges) {
  snapshot_collector c;
  coalesce_stats s;
  s.calls = 10;
  s.calls_failed = 3;
  s.batches.joined = 12;
  s.batches.rpcs = 4;
  s.batches.rejected_backpressure = 1;
  s.batches.cancelled = 2;
  s.batches.protocol_violations = 1;
  s.batches.cold_starts_at_once = 3;
  s.batches.cold_starts_window = 1;
  s.batches.pipelined = 4;
  s.attempts = 6;
  s.redirects = 2;
  s.leader_changes = 1;
  s.rpc_errors = 1;
  s.uncertain = 1;
  s.held = 5;
  s.in_flight = 1;
  s.leader_endpoint = "http://10.0.0.1:7000";
  s.transports = 3;
  s.batch_sizes[0] = 1;  // one RPC of 1 waiter
  s.batch_sizes[2] = 2;  // two of 3..4
  s.batch_sizes[13] = 1; // one over 4096
  s.batch_size_sum = 1 + 3 + 4 + 5000;
  c.set_coalescer("oracle", s);
  auto all = c.Collect();
  EXPECT_EQ(family_text(all, "outbound_coalesce_calls_total"),
            "# HELP outbound_coalesce_calls_total Coalesced calls answered, "
            "by outcome\n"
            "# TYPE outbound_coalesce_calls_total counter\n"
            "outbound_coalesce_calls_total{outcome=\"ok\",service="
            "\"oracle\"} 7\n"
            "outbound_coalesce_calls_total{outcome=\"error\",service="
            "\"oracle\"} 3\n");
  auto body = text(all);
  auto one = [&](const std::string& name) {
    auto l = lines_starting(body, name + "{");
    return l.size() == 1 ? l[0].substr(l[0].rfind(' ') + 1) : "?";
  };
  EXPECT_EQ(one("outbound_coalesce_waiters_total"), "12");
  EXPECT_EQ(one("outbound_coalesce_rpcs_total"), "4");
  EXPECT_EQ(one("outbound_coalesce_attempts_total"), "6");
  EXPECT_EQ(one("outbound_coalesce_cancelled_total"), "2");
  EXPECT_EQ(one("outbound_coalesce_pipelined_batches_total"), "4");
  EXPECT_EQ(one("outbound_coalesce_redirects_total"), "2");
  EXPECT_EQ(one("outbound_coalesce_leader_changes_total"), "1");
  EXPECT_EQ(one("outbound_coalesce_errors_total"), "1");
  EXPECT_EQ(one("outbound_coalesce_protocol_violations_total"), "1");
  EXPECT_EQ(one("outbound_coalesce_uncertain_total"), "1");
  EXPECT_EQ(one("outbound_coalesce_waiters_held"), "5");
  EXPECT_EQ(one("outbound_coalesce_rpcs_in_flight"), "1");
  EXPECT_EQ(one("outbound_coalesce_leader_known"), "1");
  EXPECT_EQ(one("outbound_coalesce_transports"), "3");
  EXPECT_EQ(lines_starting(body, "outbound_coalesce_rejected_total{"),
            (std::vector<std::string>{
              "outbound_coalesce_rejected_total{reason=\"backpressure\","
              "service=\"oracle\"} 1",
              "outbound_coalesce_rejected_total{reason=\"invalid\",service="
              "\"oracle\"} 0"}));
  EXPECT_EQ(lines_starting(body, "outbound_coalesce_cold_starts_total{"),
            (std::vector<std::string>{
              "outbound_coalesce_cold_starts_total{decision=\"at_once\","
              "service=\"oracle\"} 3",
              "outbound_coalesce_cold_starts_total{decision=\"window\","
              "service=\"oracle\"} 1"}));
  EXPECT_NE(body.find("# TYPE outbound_coalesce_waiters_held gauge\n"),
            std::string::npos);
  EXPECT_NE(body.find("# TYPE outbound_coalesce_rpcs_total counter\n"),
            std::string::npos);
  // The batch-size histogram is cumulative and ends at +Inf = count.
  auto h = lines_starting(body, "outbound_coalesce_batch_size");
  ASSERT_EQ(h.size(), 16u); // 14 buckets, count, sum
  EXPECT_EQ(h[0], "outbound_coalesce_batch_size_count{service=\"oracle\"} 4");
  EXPECT_EQ(h[1], "outbound_coalesce_batch_size_sum{service=\"oracle\"} 5008");
  EXPECT_EQ(
    h[2], "outbound_coalesce_batch_size_bucket{service=\"oracle\",le=\"1\"} 1");
  EXPECT_EQ(
    h[3], "outbound_coalesce_batch_size_bucket{service=\"oracle\",le=\"2\"} 1");
  EXPECT_EQ(
    h[4], "outbound_coalesce_batch_size_bucket{service=\"oracle\",le=\"4\"} 3");
  EXPECT_EQ(h[14], "outbound_coalesce_batch_size_bucket{service=\"oracle\","
                   "le=\"4096\"} 3");
  EXPECT_EQ(h[15], "outbound_coalesce_batch_size_bucket{service=\"oracle\","
                   "le=\"+Inf\"} 4");
}

feed_stats feed(uint64_t events, bool connected, int64_t cursor) {
  feed_stats s;
  s.events_delivered = events;
  s.resets = 1;
  s.resets_by_cause[static_cast<std::size_t>(reset_cause::retention)] = 1;
  s.reconnects = 2;
  s.connected = connected;
  s.mode = feed_mode::ledger;
  s.cursor = cursor;
  return s;
}

TEST(SnapshotCollector, FeedsPastTheCapAreSummedIntoOtherAndNeverDecrease) {
  metrics_limits lim;
  lim.max_labelled_feeds = 2;
  snapshot_collector c{lim};
  auto with_head = [](feed_stats s, int64_t head) {
    s.head = head;
    return s;
  };
  c.set_feed("orders", "ledger", with_head(feed(10, true, 10), 15));
  auto catchup = feed(20, false, 0);
  catchup.mode = feed_mode::catchup;
  catchup.head = 99; // not a ledger feed: no lag
  c.set_feed("users", "catchup", catchup);
  c.set_feed("audit", "ledger", with_head(feed(30, true, 30), 50));
  c.set_feed("billing", "ledger", with_head(feed(40, false, 40), 30));
  auto body = text(c.Collect());
  EXPECT_EQ(lines_starting(body, "outbound_feed_events_total{"),
            (std::vector<std::string>{
              "outbound_feed_events_total{feed=\"orders\",mode=\"ledger\"} 10",
              "outbound_feed_events_total{feed=\"users\",mode=\"catchup\"} 20",
              "outbound_feed_events_total{feed=\"_other\",mode=\"ledger\"} "
              "70"}));
  EXPECT_EQ(lines_starting(body, "outbound_feed_connected{"),
            (std::vector<std::string>{
              "outbound_feed_connected{feed=\"orders\",mode=\"ledger\"} 1",
              "outbound_feed_connected{feed=\"users\",mode=\"catchup\"} 0",
              "outbound_feed_connected{feed=\"_other\",mode=\"ledger\"} 1"}));
  // Lag: ledger feeds whose head is known; _other shows the worst.
  EXPECT_EQ(lines_starting(body, "outbound_feed_lag_events{"),
            (std::vector<std::string>{
              "outbound_feed_lag_events{feed=\"orders\",mode=\"ledger\"} 5",
              "outbound_feed_lag_events{feed=\"_other\",mode=\"ledger\"} "
              "20"}));
  // Positions only for the labelled feeds.
  EXPECT_EQ(lines_starting(body, "outbound_feed_position{"),
            (std::vector<std::string>{
              "outbound_feed_position{feed=\"orders\",mode=\"ledger\"} 10",
              "outbound_feed_position{feed=\"users\",mode=\"catchup\"} 0"}));
  EXPECT_EQ(lines_starting(body, "outbound_feeds{"),
            (std::vector<std::string>{
              "outbound_feeds{mode=\"catchup\",state=\"disconnected\"} 1",
              "outbound_feeds{mode=\"ledger\",state=\"disconnected\"} 1",
              "outbound_feeds{mode=\"ledger\",state=\"connected\"} 2"}));
  // An aggregated feed dies: its counters stay in _other; a labelled one
  // dies: its series go, and its slot is not handed to a newcomer.
  c.remove_feed("audit");
  c.remove_feed("orders");
  c.set_feed("late", "ledger", feed(5, true, 5));
  body = text(c.Collect());
  EXPECT_EQ(lines_starting(body, "outbound_feed_events_total{"),
            (std::vector<std::string>{
              "outbound_feed_events_total{feed=\"users\",mode=\"catchup\"} 20",
              "outbound_feed_events_total{feed=\"_other\",mode=\"ledger\"} "
              "75"}));
  // By cause: a catchup feed shows its three causes from 0 and any other
  // cause that happened (here a retention reset set by the test helper).
  EXPECT_EQ(lines_starting(body, "outbound_feed_resets_total{"),
            (std::vector<std::string>{
              "outbound_feed_resets_total{cause=\"retention\",feed=\"users\","
              "mode=\"catchup\"} 1",
              "outbound_feed_resets_total{cause=\"resync\",feed=\"users\","
              "mode=\"catchup\"} 0",
              "outbound_feed_resets_total{cause=\"epoch_changed\",feed="
              "\"users\",mode=\"catchup\"} 0",
              "outbound_feed_resets_total{cause=\"gap\",feed=\"users\","
              "mode=\"catchup\"} 0",
              "outbound_feed_resets_total{cause=\"retention\",feed=\"_other\","
              "mode=\"ledger\"} 3",
              "outbound_feed_resets_total{cause=\"rewind\",feed=\"_other\","
              "mode=\"ledger\"} 0"}));
}

TEST(SnapshotCollector, UnreadablePagesAndFramesAreCountedByReason) {
  snapshot_collector c;
  auto orders = feed(10, true, 10);
  orders.drain_errors = 4;
  orders.drain_errors_by_reason[static_cast<std::size_t>(
    drain_error_reason::unparseable)]
    = 3;
  orders.drain_errors_by_reason[static_cast<std::size_t>(
    drain_error_reason::over_cap)]
    = 1;
  auto users = feed(20, true, 0);
  users.mode = feed_mode::catchup;
  users.unreadable_frames = 3;
  users.unreadable_frames_by_reason[static_cast<std::size_t>(
    frame_error_reason::too_deep)]
    = 2;
  users.unreadable_frames_by_reason[static_cast<std::size_t>(
    frame_error_reason::memory_bound)]
    = 1;
  c.set_feed("orders", "ledger", orders);
  c.set_feed("users", "catchup", users);
  auto body = text(c.Collect());
  // A ledger feed exports every drain reason from 0; a catchup feed none
  // until one happens.
  EXPECT_EQ(lines_starting(body, "outbound_feed_drain_errors_total{"),
            (std::vector<std::string>{
              "outbound_feed_drain_errors_total{reason=\"unparseable\","
              "feed=\"orders\",mode=\"ledger\"} 3",
              "outbound_feed_drain_errors_total{reason=\"over_cap\","
              "feed=\"orders\",mode=\"ledger\"} 1",
              "outbound_feed_drain_errors_total{reason=\"bad_page\","
              "feed=\"orders\",mode=\"ledger\"} 0",
              "outbound_feed_drain_errors_total{reason=\"bad_event\","
              "feed=\"orders\",mode=\"ledger\"} 0",
              "outbound_feed_drain_errors_total{reason=\"anomaly\","
              "feed=\"orders\",mode=\"ledger\"} 0",
              "outbound_feed_drain_errors_total{reason=\"stalled\","
              "feed=\"orders\",mode=\"ledger\"} 0"}));
  // The other way round for unreadable frames.
  EXPECT_EQ(lines_starting(body, "outbound_feed_unreadable_frames_total{"),
            (std::vector<std::string>{
              "outbound_feed_unreadable_frames_total{reason=\"unparseable\","
              "feed=\"users\",mode=\"catchup\"} 0",
              "outbound_feed_unreadable_frames_total{reason=\"too_deep\","
              "feed=\"users\",mode=\"catchup\"} 2",
              "outbound_feed_unreadable_frames_total{reason=\"memory_bound\","
              "feed=\"users\",mode=\"catchup\"} 1",
              "outbound_feed_unreadable_frames_total{reason=\"bad_number\","
              "feed=\"users\",mode=\"catchup\"} 0",
              "outbound_feed_unreadable_frames_total{reason=\"not_an_object\","
              "feed=\"users\",mode=\"catchup\"} 0",
              "outbound_feed_unreadable_frames_total{reason=\"over_cap\","
              "feed=\"users\",mode=\"catchup\"} 0"}));
}

TEST(SnapshotCollector, PoolAndPollerFamilies) {
  snapshot_collector c;
  pool_stats p;
  p.dialled = 3;
  p.reused = 9;
  p.idle = 2;
  p.pending = 4;
  p.waited = 7;
  p.overflowed = 1;
  p.idle_expired = 5;
  c.set_pool("users", p);
  c.set_sources("pool", 1);
  c.count_poll_error("feed");
  c.count_poll_error("feed");
  c.set_snapshot_seconds("pool", "users", 0.5);
  auto body = text(c.Collect());
  EXPECT_EQ(lines_starting(body, "outbound_pool_"),
            (std::vector<std::string>{
              "outbound_pool_cancelled_total{service=\"users\"} 0",
              "outbound_pool_dialled_total{service=\"users\"} 3",
              "outbound_pool_idle_connections{service=\"users\"} 2",
              "outbound_pool_idle_expired_total{service=\"users\"} 5",
              "outbound_pool_in_flight{service=\"users\"} 0",
              "outbound_pool_overflowed_total{service=\"users\"} 1",
              "outbound_pool_pending{service=\"users\"} 4",
              "outbound_pool_reused_total{service=\"users\"} 9",
              "outbound_pool_stale_discarded_total{service=\"users\"} 0",
              "outbound_pool_waited_total{service=\"users\"} 7"}));
  EXPECT_EQ(lines_starting(body, "outbound_metrics_"),
            (std::vector<std::string>{
              "outbound_metrics_poll_errors_total{kind=\"feed\"} 2",
              "outbound_metrics_snapshot_seconds{kind=\"pool\",source="
              "\"users\"} 0.5",
              "outbound_metrics_sources{kind=\"pool\"} 1"}));
  c.remove_pool("users");
  body = text(c.Collect());
  EXPECT_TRUE(lines_starting(body, "outbound_pool_").empty());
  EXPECT_TRUE(
    lines_starting(body, "outbound_metrics_snapshot_seconds").empty());
}

client_event answered(double seconds) {
  client_event e;
  e.kind = event_kind::answered;
  e.method = "GET";
  e.status = 200;
  e.latency_ns = static_cast<int64_t>(seconds * 1e9);
  return e;
}

// Histogram cumulativity (jupp0r/prometheus-cpp #43, opentelemetry-swift
// #357): buckets are cumulative, +Inf is the total count, the bound is
// inclusive.
TEST(MetricsRegistry, Case24HistogramBucketsAreCumulativeAndInfIsTheCount) {
  metrics_registry reg;
  auto m = reg.client("users", {1.0, 2.0});
  for (double s : {0.0, 0.5, 1.0, 1.5, 3.0})
    m->record(answered(s));
  auto body = reg.serialize();
  EXPECT_EQ(lines_starting(body, "outbound_client_request_duration_seconds"),
            (std::vector<std::string>{
              "outbound_client_request_duration_seconds_count{method=\"GET\","
              "service=\"users\"} 5",
              "outbound_client_request_duration_seconds_sum{method=\"GET\","
              "service=\"users\"} 6",
              "outbound_client_request_duration_seconds_bucket{method=\"GET\","
              "service=\"users\",le=\"1\"} 3",
              "outbound_client_request_duration_seconds_bucket{method=\"GET\","
              "service=\"users\",le=\"2\"} 4",
              "outbound_client_request_duration_seconds_bucket{method=\"GET\","
              "service=\"users\",le=\"+Inf\"} 5"}));
  EXPECT_NE(body.find("# TYPE outbound_client_request_duration_seconds "
                      "histogram\n"),
            std::string::npos);
}

TEST(MetricsRegistry, ClientMetricsOutliveTheRegistryObject) {
  std::shared_ptr<client_metrics> m;
  std::weak_ptr<prometheus::Registry> families;
  {
    metrics_registry reg;
    m = reg.client("users");
    families = reg.registry();
  }
  EXPECT_FALSE(families.expired());
  m->record(answered(0.5)); // no dangling family reference
  m.reset();
  EXPECT_TRUE(families.expired());
}

TEST(MetricsRegistry, OneClientMetricsPerServiceAndBothSourcesSerialized) {
  metrics_registry reg;
  auto a = reg.client("users");
  EXPECT_EQ(a, reg.client("users"));
  EXPECT_NE(a, reg.client("billing"));
  a->record(answered(0.01));
  pool_stats p;
  p.dialled = 1;
  reg.collector()->set_pool("users", p);
  auto body = reg.serialize();
  EXPECT_EQ(lines_starting(body, "outbound_client_requests_total{"),
            std::vector<std::string>{"outbound_client_requests_total{method="
                                     "\"GET\",outcome=\"ok\",service="
                                     "\"users\"} 1"});
  EXPECT_EQ(lines_starting(body, "outbound_client_responses_total{"),
            std::vector<std::string>{"outbound_client_responses_total{method="
                                     "\"GET\",service=\"users\",status_class="
                                     "\"2xx\"} 1"});
  EXPECT_EQ(client_metrics::status_class(503), "5xx");
  EXPECT_EQ(client_metrics::status_class(99), "other");
  EXPECT_EQ(lines_starting(body, "outbound_pool_dialled_total{"),
            std::vector<std::string>{
              "outbound_pool_dialled_total{service=\"users\"} 1"});
  // The default buckets: 16 bounds from 1 ms doubling, plus +Inf.
  EXPECT_EQ(client_metrics::default_buckets().size(), 16u);
  EXPECT_EQ(lines_starting(body, "outbound_client_request_duration_seconds_"
                                 "bucket{method=\"GET\",service=\"users\"")
              .size(),
            17u);
}

} // namespace
} // namespace outbound::testing
