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
  r.cause = "interrupted";
  m.record(r);
  m.record(ev(event_kind::sending));
  auto s = ev(event_kind::retrying);
  s.cause = "status 503";
  m.record(s);
  m.record(ev(event_kind::redialing));
  auto a = ev(event_kind::answered);
  a.outcome = "ok";
  a.latency_ns = 2'500'000;
  m.record(a);
  EXPECT_EQ(value_of(reg, "outbound_client_attempts_total",
                     {{"service", "billing"}, {"method", "GET"}}),
            2);
  EXPECT_EQ(value_of(reg, "outbound_client_retries_total",
                     {{"reason", "interrupted"}}),
            1);
  EXPECT_EQ(value_of(reg, "outbound_client_retries_total",
                     {{"reason", "status"}}),
            1);
  EXPECT_EQ(value_of(reg, "outbound_client_redials_total", {}), 1);
  EXPECT_EQ(value_of(reg, "outbound_client_requests_total",
                     {{"outcome", "ok"}}),
            1);
  EXPECT_EQ(value_of(reg, "outbound_client_request_duration_seconds",
                     {{"method", "GET"}}),
            1);
  // Nothing about the path or the request id is a label.
  auto text = prometheus::TextSerializer{}.Serialize(reg.Collect());
  EXPECT_EQ(text.find("r1"), std::string::npos);
}
