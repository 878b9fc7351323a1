#include "metrics/client_metrics.hpp"

#include <gtest/gtest.h>

#include <prometheus/text_serializer.h>

using namespace outbound;

namespace {

double value_of(prometheus::Registry& reg, const std::string& name,
                const std::map<std::string, std::string>& labels) {
  for (auto& fam : reg.Collect()) {
    if (fam.name != name)
      continue;
    for (auto& m : fam.metric) {
      bool match = true;
      for (auto& [k, v] : labels) {
        bool found = false;
        for (auto& l : m.label)
          if (l.name == k && l.value == v)
            found = true;
        match = match && found;
      }
      if (match)
        return fam.type == prometheus::MetricType::Histogram
                 ? static_cast<double>(m.histogram.sample_count)
                 : m.counter.value;
    }
  }
  return -1;
}

client_event ev(event_kind k) {
  client_event e;
  e.kind = k;
  e.method = "GET";
  e.request_id = "r1";
  return e;
}

} // namespace

TEST(ClientMetrics, EventsDriveCountersWithBoundedLabels) {
  prometheus::Registry reg;
  client_metrics m{reg, "billing"};
  m.record(ev(event_kind::sending));
  auto r = ev(event_kind::retrying);
  // The label comes from the enum, never from the text for people.
  r.cause = "connection reset by peer";
  r.cause_kind = transport_error_kind::interrupted;
  m.record(r);
  m.record(ev(event_kind::sending));
  auto s = ev(event_kind::retrying);
  s.cause = "status 503";
  m.record(s);
  m.record(ev(event_kind::redialing));
  auto a = ev(event_kind::answered);
  a.latency_ns = 2'500'000;
  m.record(a);
  EXPECT_EQ(value_of(reg, "outbound_client_attempts_total",
                     {{"service", "billing"}, {"method", "GET"}}),
            2);
  EXPECT_EQ(
    value_of(reg, "outbound_client_retries_total", {{"reason", "interrupted"}}),
    1);
  EXPECT_EQ(
    value_of(reg, "outbound_client_retries_total", {{"reason", "status"}}), 1);
  EXPECT_EQ(value_of(reg, "outbound_client_redials_total", {}), 1);
  EXPECT_EQ(
    value_of(reg, "outbound_client_requests_total", {{"outcome", "ok"}}), 1);
  EXPECT_EQ(value_of(reg, "outbound_client_request_duration_seconds",
                     {{"method", "GET"}}),
            1);
  // Nothing about the path or the request id is a label.
  auto text = prometheus::TextSerializer{}.Serialize(reg.Collect());
  EXPECT_EQ(text.find("r1"), std::string::npos);
}

TEST(ClientMetrics, ResponseSizesAreAHistogramOfAnsweredBodies) {
  prometheus::Registry reg;
  client_metrics m{reg, "billing"};
  for (uint64_t bytes : {0u, 64u, 65u, 5000u}) {
    auto a = ev(event_kind::answered);
    a.response_bytes = bytes;
    m.record(a);
  }
  auto f = ev(event_kind::failed); // no body: not observed
  f.error = error_kind::service_unavailable;
  m.record(f);
  auto text = prometheus::TextSerializer{}.Serialize(reg.Collect());
  auto has = [&](const std::string& line) {
    return text.find(line + "\n") != std::string::npos;
  };
  EXPECT_TRUE(has("outbound_client_response_size_bytes_count{method=\"GET\","
                  "service=\"billing\"} 4"))
    << text;
  EXPECT_TRUE(has("outbound_client_response_size_bytes_sum{method=\"GET\","
                  "service=\"billing\"} 5129"));
  EXPECT_TRUE(has("outbound_client_response_size_bytes_bucket{method=\"GET\","
                  "service=\"billing\",le=\"64\"} 2"));
  EXPECT_TRUE(has("outbound_client_response_size_bytes_bucket{method=\"GET\","
                  "service=\"billing\",le=\"256\"} 3"));
  EXPECT_TRUE(has("outbound_client_response_size_bytes_bucket{method=\"GET\","
                  "service=\"billing\",le=\"16384\"} 4"));
}

TEST(ClientMetrics, GiveUpsAreCountedByReason) {
  prometheus::Registry reg;
  client_metrics m{reg, "billing"};
  auto f = ev(event_kind::failed);
  f.error = error_kind::service_unavailable;
  f.reason = give_up_reason::budget_exhausted;
  m.record(f);
  m.record(f);
  auto a = ev(event_kind::answered);
  a.status = 503;
  a.error = error_kind::server_error;
  a.reason = give_up_reason::deadline_unreachable;
  m.record(a);
  m.record(ev(event_kind::answered)); // a success is no give-up
  EXPECT_EQ(value_of(reg, "outbound_client_give_ups_total",
                     {{"service", "billing"}, {"reason", "budget_exhausted"}}),
            2);
  EXPECT_EQ(value_of(reg, "outbound_client_give_ups_total",
                     {{"reason", "deadline_unreachable"}}),
            1);
  EXPECT_EQ(
    value_of(reg, "outbound_client_give_ups_total", {{"reason", "none"}}), -1);
}
