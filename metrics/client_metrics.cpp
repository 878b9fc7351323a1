#include "metrics/client_metrics.hpp"

namespace outbound {
inline namespace metrics {

// Latency buckets in seconds: 1 ms .. ~33 s, doubling. Cumulative as
// Prometheus requires (prometheus-cpp #43 once counted only one bucket).
prometheus::Histogram::BucketBoundaries client_metrics::default_buckets() {
  prometheus::Histogram::BucketBoundaries b;
  for (double x = 0.001; x < 40.0; x *= 2)
    b.push_back(x);
  return b;
}

client_metrics::client_metrics(prometheus::Registry& registry,
                               std::string service,
                               prometheus::Histogram::BucketBoundaries buckets)
  : service_(std::move(service)),
    buckets_(buckets.empty() ? default_buckets() : std::move(buckets)),
    requests_(prometheus::BuildCounter()
                .Name("outbound_client_requests_total")
                .Help("Calls finished by the service client, by outcome")
                .Register(registry)),
    attempts_(prometheus::BuildCounter()
                .Name("outbound_client_attempts_total")
                .Help("Attempts handed to the transport (redials excluded)")
                .Register(registry)),
    retries_(prometheus::BuildCounter()
               .Name("outbound_client_retries_total")
               .Help("Retries scheduled by the retry loop, by reason")
               .Register(registry)),
    redials_(prometheus::BuildCounter()
               .Name("outbound_client_redials_total")
               .Help("Requests that provably never left, sent again on a "
                     "fresh connection")
               .Register(registry)
               .Add({{"service", service_}})),
    give_ups_(prometheus::BuildCounter()
                .Name("outbound_client_give_ups_total")
                .Help("Calls that ended on a retryable failure without the "
                      "retry their policy allowed, by reason")
                .Register(registry)),
    duration_(prometheus::BuildHistogram()
                .Name("outbound_client_request_duration_seconds")
                .Help("Call latency from entry to answer, all attempts")
                .Register(registry)),
    responses_(prometheus::BuildCounter()
                 .Name("outbound_client_responses_total")
                 .Help("Calls answered with an HTTP status, by status class")
                 .Register(registry)),
    response_size_(prometheus::BuildHistogram()
                     .Name("outbound_client_response_size_bytes")
                     .Help("Response body bytes of answered calls")
                     .Register(registry)) {
}

std::string client_metrics::status_class(int status) {
  if (status < 100 || status > 599)
    return "other";
  return std::to_string(status / 100) + "xx";
}

void client_metrics::record(const client_event& ev) {
  switch (ev.kind) {
    case event_kind::sending:
      attempts_.Add({{"service", service_}, {"method", ev.method}})
        .Increment();
      break;
    case event_kind::retrying:
      retries_.Add({{"service", service_}, {"reason", reason_label(ev)}})
        .Increment();
      break;
    case event_kind::redialing:
      redials_.Increment();
      break;
    case event_kind::hedging: // counted by the hedging metrics
      break;
    case event_kind::answered:
    case event_kind::failed: {
      requests_
        .Add({{"service", service_},
              {"method", ev.method},
              {"outcome", outcome_label(ev)}})
        .Increment();
      if (ev.reason != give_up_reason::none)
        give_ups_.Add({{"service", service_}, {"reason", to_string(ev.reason)}})
          .Increment();
      if (ev.kind == event_kind::answered)
        responses_
          .Add({{"service", service_},
                {"method", ev.method},
                {"status_class", status_class(ev.status)}})
          .Increment();
      prometheus::Histogram* h;
      prometheus::Histogram* size = nullptr;
      {
        std::lock_guard<std::mutex> guard{mtx_};
        auto& slot = duration_by_method_[ev.method];
        if (!slot)
          slot = &duration_.Add({{"service", service_}, {"method", ev.method}},
                                buckets_);
        h = slot;
        if (ev.kind == event_kind::answered) {
          auto& s = size_by_method_[ev.method];
          if (!s) {
            // 64 B, 256 B, ..., 64 MiB: the body cap's range (32 MiB).
            prometheus::Histogram::BucketBoundaries b;
            for (double x = 64; x <= 64.0 * 1024 * 1024; x *= 4)
              b.push_back(x);
            s = &response_size_.Add(
              {{"service", service_}, {"method", ev.method}}, b);
          }
          size = s;
        }
      }
      h->Observe(static_cast<double>(ev.latency_ns) / 1e9);
      if (size)
        size->Observe(static_cast<double>(ev.response_bytes));
      break;
    }
  }
}

} // namespace metrics
} // namespace outbound
