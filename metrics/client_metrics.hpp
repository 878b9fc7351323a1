#pragma once

// Prometheus metric families of the service client, declared once
// (one list per component). They are driven by the same client_events the
// observer actor receives, so what a dashboard shows and what an
// observer sees can never disagree.

#include "core/call_types.hpp"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

namespace outbound {
inline namespace metrics {

/// The client's metric families in one registry. Label values are bounded:
/// `service` (given at construction), `method`, `outcome` (an error_kind name
/// or "ok"), `reason` (a transport_error_kind name or "status"),
/// `status_class` ("1xx" .. "5xx"). The path is never a label (unbounded).
/// Labels come from the event's enums (outcome_label, reason_label in
/// core/call_types.hpp), never from parsing its texts.
///
// clang-format off
/// | metric                                      | type      | labels |
/// |---------------------------------------------|-----------|--------|
/// | outbound_client_requests_total              | counter   | service, method, outcome |
/// | outbound_client_attempts_total              | counter   | service, method |
/// | outbound_client_retries_total               | counter   | service, reason |
/// | outbound_client_redials_total               | counter   | service |
/// | outbound_client_give_ups_total              | counter   | service, reason (a give_up_reason: attempts_exhausted, deadline_exceeded, deadline_unreachable, budget_exhausted) |
/// | outbound_client_request_duration_seconds    | histogram | service, method |
/// | outbound_client_responses_total             | counter   | service, method, status_class |
/// | outbound_client_response_size_bytes         | histogram | service, method (bodies of answered calls; buckets 64 B x4 .. 64 MiB) |
// clang-format on
///
/// A service's whole-request view; the snapshot families of the other
/// actors (hedging, coalescing, feeds, pools) are in
/// metrics/outbound_metrics.hpp.
class client_metrics {
public:
  /// Registers the families in `registry` (which must outlive this object).
  /// `buckets`: upper bounds of the duration histogram in seconds; empty
  /// means the default [1 ms doubling up to ~33 s].
  client_metrics(prometheus::Registry& registry, std::string service,
                 prometheus::Histogram::BucketBoundaries buckets = {});

  /// The default duration buckets (1 ms doubling, 16 bounds up to ~33 s).
  static prometheus::Histogram::BucketBoundaries default_buckets();

  /// Applies one event: sending → attempts, retrying → retries{reason},
  /// redialing → redials, answered / failed → requests{outcome} and the
  /// duration histogram; hedging → nothing (the hedging metrics count
  /// hedges). Thread-safe.
  void record(const client_event& ev);

  /// "1xx" .. "5xx" for an HTTP status in [100, 599], else "other".
  static std::string status_class(int status);

private:
  std::string service_;
  prometheus::Histogram::BucketBoundaries buckets_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Counter>& attempts_;
  prometheus::Family<prometheus::Counter>& retries_;
  prometheus::Counter& redials_;
  prometheus::Family<prometheus::Counter>& give_ups_;
  prometheus::Family<prometheus::Histogram>& duration_;
  prometheus::Family<prometheus::Counter>& responses_;
  prometheus::Family<prometheus::Histogram>& response_size_;
  std::mutex mtx_; // guards the lookups of label children below
  std::map<std::string, prometheus::Histogram*> duration_by_method_;
  std::map<std::string, prometheus::Histogram*> size_by_method_;
};

} // namespace metrics
} // namespace outbound
