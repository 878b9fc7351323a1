#include "protocol/errors.hpp"

#include "core/text.hpp"

#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include <algorithm>
#include <cctype>

namespace outbound {
inline namespace protocol {

const std::string* find_header(const header_list& hs, const std::string& name) {
  for (auto& [k, v] : hs)
    if (core::iequals(k, name))
      return &v;
  return nullptr;
}

void set_header(header_list& hs, const std::string& name, std::string value) {
  for (auto& [k, v] : hs)
    if (core::iequals(k, name)) {
      v = std::move(value);
      return;
    }
  hs.emplace_back(name, std::move(value));
}

void erase_header(header_list& hs, const std::string& name) {
  hs.erase(std::remove_if(
             hs.begin(), hs.end(),
             [&](const auto& kv) { return core::iequals(kv.first, name); }),
           hs.end());
}

const char* to_string(transport_error_kind k) {
  switch (k) {
    case transport_error_kind::none: return "none";
    case transport_error_kind::not_sent: return "not_sent";
    case transport_error_kind::connect: return "connect";
    case transport_error_kind::local_resource: return "local_resource";
    case transport_error_kind::interrupted: return "interrupted";
    case transport_error_kind::tls: return "tls";
    case transport_error_kind::too_large: return "too_large";
    case transport_error_kind::timeout: return "timeout";
    case transport_error_kind::config: return "config";
    case transport_error_kind::pool_overflow: return "pool_overflow";
  }
  return "unknown";
}

const char* to_string(error_kind k) {
  switch (k) {
    case error_kind::auth_error: return "auth_error";
    case error_kind::request_error: return "request_error";
    case error_kind::server_error: return "server_error";
    case error_kind::response_error: return "response_error";
    case error_kind::service_unavailable: return "service_unavailable";
    case error_kind::deadline_exceeded: return "deadline_exceeded";
    case error_kind::config_error: return "config_error";
    case error_kind::uncertain_outcome: return "uncertain_outcome";
  }
  return "unknown";
}

const char* to_string(give_up_reason r) {
  switch (r) {
    case give_up_reason::none: return "none";
    case give_up_reason::attempts_exhausted: return "attempts_exhausted";
    case give_up_reason::deadline_exceeded: return "deadline_exceeded";
    case give_up_reason::deadline_unreachable: return "deadline_unreachable";
    case give_up_reason::budget_exhausted: return "budget_exhausted";
  }
  return "unknown";
}

int exit_code(error_kind k) {
  switch (k) {
    case error_kind::config_error: return 2;
    case error_kind::auth_error: return 3;
    case error_kind::request_error: return 4;
    case error_kind::server_error: return 5;
    case error_kind::response_error: return 6;
    case error_kind::service_unavailable:
    case error_kind::deadline_exceeded: return 7;
    case error_kind::uncertain_outcome: return 8;
  }
  return 1;
}

std::string call_error::message() const {
  std::string s = to_string(kind);
  s += ": ";
  s += detail.empty() ? "(no detail)" : detail;
  if (status)
    s += " (status " + std::to_string(status);
  else
    s += " (no response";
  if (!request_id.empty())
    s += ", request id " + request_id;
  s += ")";
  return s;
}

bool refused_outright(int status) {
  return status == 401 || status == 403 || status == 429;
}

void settle_nothing_billed(call_error& e) {
  e.nothing_billed = e.nothing_sent
                     || (e.attempts <= 1 && e.status != 0
                         && refused_outright(e.status));
}

call_error classify_status(int status, std::string detail) {
  call_error e;
  e.status = status;
  if (status == 401 || status == 403) {
    e.kind = error_kind::auth_error;
    if (detail.empty())
      detail = status == 401 ? "unauthorized" : "forbidden";
  } else if (status >= 300 && status < 400) {
    e.kind = error_kind::request_error;
    if (detail.empty())
      detail = "unexpected redirect (not followed)";
  } else if (status >= 500) {
    // 600..999 are invalid; a client processes them as 5xx (RFC 9110
    // section 15).
    e.kind = error_kind::server_error;
    if (detail.empty())
      detail = "server error " + std::to_string(status);
  } else {
    e.kind = error_kind::request_error;
    if (detail.empty())
      detail = "request error " + std::to_string(status);
  }
  e.detail = std::move(detail);
  return e;
}

std::string extract_detail(const std::string& body,
                           const json_limits& limits) {
  if (body.empty())
    return {};
  // Only "detail" is read: a number elsewhere in the body that the parsed
  // form cannot hold (`"n":1e400`) must not cost the detail.
  json_limits l = limits;
  l.bad_numbers_as_null = true;
  auto r = parse_json(body, l);
  auto& v = r.value;
  if (!r || !v.is_object())
    return {};
  auto* d = v.as_object().if_contains("detail");
  if (!d || d->is_null())
    return {};
  if (d->is_string())
    return std::string{d->as_string()};
  return boost::json::serialize(*d);
}

service_error::service_error(call_error e)
  : std::runtime_error(e.message()), err_(std::move(e)) {
}

void throw_error(call_error e) {
  switch (e.kind) {
    case error_kind::auth_error: throw auth_error(std::move(e));
    case error_kind::request_error: throw request_error(std::move(e));
    case error_kind::server_error: throw server_error(std::move(e));
    case error_kind::response_error: throw response_error(std::move(e));
    case error_kind::service_unavailable:
      throw service_unavailable(std::move(e));
    case error_kind::deadline_exceeded: throw deadline_exceeded(std::move(e));
    case error_kind::config_error: throw invalid_request(std::move(e));
    case error_kind::uncertain_outcome:
      throw uncertain_outcome_error(std::move(e));
  }
  throw service_error(std::move(e));
}

} // namespace protocol
} // namespace outbound
