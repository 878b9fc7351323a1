#include "core/classify.hpp"

#include <algorithm>

namespace outbound {
inline namespace core {

const char* to_string(call_health h) {
  switch (h) {
    case call_health::success: return "success";
    case call_health::server_error: return "server_error";
    case call_health::failure: return "failure";
  }
  return "?";
}

const char* to_string(outcome_class c) {
  switch (c) {
    case outcome_class::success: return "success";
    case outcome_class::final_status: return "final_status";
    case outcome_class::retryable_status: return "retryable_status";
    case outcome_class::nothing_sent: return "nothing_sent";
    case outcome_class::transport_failure: return "transport_failure";
    case outcome_class::fatal: return "fatal";
  }
  return "?";
}

exchange_view exchange_view::of(const exchange_result& r, bool idempotent) {
  exchange_view v;
  v.status = r.response.status;
  v.error = r.error;
  v.request_sent = r.request_sent;
  v.idempotent = idempotent;
  return v;
}

bool is_success_status(int status) {
  return status >= 200 && status <= 299;
}

exchange_verdict classify_exchange(const exchange_view& v,
                                   const std::vector<int>& retry_statuses) {
  exchange_verdict out;
  out.kind = v.error;
  if (v.error == transport_error_kind::none) {
    out.health = v.status >= 500 ? call_health::server_error
                                 : call_health::success;
    bool listed = std::find(retry_statuses.begin(), retry_statuses.end(),
                            v.status)
                  != retry_statuses.end();
    if (v.idempotent && listed)
      out.cls = outcome_class::retryable_status;
    else if (is_success_status(v.status))
      out.cls = outcome_class::success;
    else
      out.cls = outcome_class::final_status;
    return out;
  }
  out.health = call_health::failure;
  switch (v.error) {
    case transport_error_kind::none: // handled above
    case transport_error_kind::not_sent:
    case transport_error_kind::connect:
    case transport_error_kind::local_resource:
    case transport_error_kind::pool_overflow:
      // By their definition (protocol/http_types.hpp) nothing left.
      out.cls = outcome_class::nothing_sent;
      out.nothing_sent = true;
      return out;
    case transport_error_kind::interrupted:
    case transport_error_kind::timeout:
      out.nothing_sent = !v.request_sent;
      out.cls = out.nothing_sent ? outcome_class::nothing_sent
                                 : outcome_class::transport_failure;
      return out;
    case transport_error_kind::tls:
    case transport_error_kind::config:
      out.cls = outcome_class::fatal;
      out.nothing_sent = !v.request_sent;
      return out;
    case transport_error_kind::too_large:
      out.cls = outcome_class::fatal;
      return out;
  }
  // An unknown kind: the most careful reading (it may have been processed).
  out.cls = outcome_class::transport_failure;
  return out;
}

} // namespace core
} // namespace outbound
