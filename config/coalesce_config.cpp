#include "config/coalesce_config.hpp"

#include "config/client_config.hpp"
#include "config/config_error.hpp"
#include "core/backoff.hpp"
#include "core/text.hpp"
#include "core/validate.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

namespace outbound {
inline namespace config {

namespace {

using core::finite_non_negative;
using core::finite_positive;

bool reg_name_char(char c) {
  return core::is_alnum(c) || c == '-' || c == '.' || c == '_';
}

bool ipv6_char(char c) {
  return core::is_hexdig(c) || c == ':' || c == '.';
}

} // namespace

std::string oracle_endpoint::authority() const {
  if (host.find(':') != std::string::npos)
    return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

std::string oracle_endpoint::key() const {
  return scheme + "://" + authority();
}

std::optional<oracle_endpoint>
parse_oracle_endpoint(std::string_view s, bool tls, endpoint_origin origin,
                      endpoint_parse_error* why) {
  auto fail = [why](endpoint_parse_error e) {
    if (why)
      *why = e;
    return std::optional<oracle_endpoint>{};
  };
  if (why)
    *why = endpoint_parse_error::none;
  if (s.empty() || s.size() > 300)
    return fail(endpoint_parse_error::malformed);
  oracle_endpoint ep;
  if (core::starts_with_ci(s, "https://")) {
    ep.scheme = "https";
    s.remove_prefix(8);
  } else if (core::starts_with_ci(s, "http://")) {
    ep.scheme = "http";
    s.remove_prefix(7);
  } else if (s.find("://") != std::string_view::npos) {
    return fail(endpoint_parse_error::malformed); // another scheme
  } else {
    ep.scheme = tls ? "https" : "http";
  }
  if (!s.empty() && s.back() == '/') // "http://h:1/" tolerated, nothing more
    s.remove_suffix(1);
  std::string_view host;
  std::string_view port;
  if (!s.empty() && s.front() == '[') {
    auto close = s.find(']');
    if (close == std::string_view::npos || close + 1 >= s.size()
        || s[close + 1] != ':')
      return fail(endpoint_parse_error::malformed);
    host = s.substr(1, close - 1);
    port = s.substr(close + 2);
    if (host.empty() || host.find(':') == std::string_view::npos
        || !std::all_of(host.begin(), host.end(), [](unsigned char c) {
             return ipv6_char(c);
           }))
      return fail(endpoint_parse_error::malformed);
  } else {
    auto colon = s.find(':');
    if (colon == std::string_view::npos || s.find(':', colon + 1)
                                             != std::string_view::npos)
      return fail(endpoint_parse_error::malformed);
    host = s.substr(0, colon);
    port = s.substr(colon + 1);
    if (host.empty() || host.size() > 255
        || !std::all_of(host.begin(), host.end(), [](unsigned char c) {
             return reg_name_char(c);
           }))
      return fail(endpoint_parse_error::malformed);
  }
  if (port.empty() || port.size() > 5
      || !std::all_of(port.begin(), port.end(),
                      [](char c) { return core::is_digit(c); }))
    return fail(endpoint_parse_error::malformed);
  unsigned long p = 0;
  for (char c : port)
    p = p * 10 + static_cast<unsigned long>(c - '0');
  if (p == 0 || p > 65535)
    return fail(endpoint_parse_error::malformed);
  // Only after the whole string parsed: a malformed http:// hint is
  // malformed, a well-formed one under TLS is a refused downgrade.
  if (origin == endpoint_origin::wire && tls && ep.scheme == "http")
    return fail(endpoint_parse_error::downgrade);
  ep.host = core::ascii_lower(host);
  ep.port = static_cast<uint16_t>(p);
  return ep;
}

void coalesce_retry_policy::validate(const std::string& prefix) const {
  if (max_attempts < 1)
    throw config_error(prefix + ".max_attempts",
                       "must be >= 1, got " + std::to_string(max_attempts));
  if (!finite_positive(per_attempt))
    throw config_error(prefix + ".per_attempt", "must be > 0 seconds");
  if (!finite_positive(overall))
    throw config_error(prefix + ".overall", "must be > 0 seconds");
  core::validate_backoff_seconds(base_backoff, max_backoff,
                                 prefix + ".base_backoff",
                                 prefix + ".max_backoff");
}

void coalesce_config::validate() const {
  if (endpoints.empty())
    throw config_error("coalesce.endpoints", "at least one endpoint needed");
  std::set<std::string> seen;
  for (std::size_t i = 0; i < endpoints.size(); ++i) {
    auto field = "coalesce.endpoints[" + std::to_string(i) + "]";
    auto ep = parse_oracle_endpoint(endpoints[i], tls,
                                    endpoint_origin::configured);
    if (!ep)
      throw config_error(field, "not host:port or http(s)://host:port");
    if (!seen.insert(ep->key()).second)
      throw config_error(field, "duplicate endpoint " + ep->key());
  }
  if (!finite_non_negative(batch_flush_interval))
    throw config_error("coalesce.batch_flush_interval",
                       "must be >= 0 seconds");
  if (max_waiters < 1)
    throw config_error("coalesce.max_waiters", "must be >= 1");
  if (max_rpcs_in_flight < 1 || max_rpcs_in_flight > 64)
    throw config_error("coalesce.max_rpcs_in_flight", "must be 1..64");
  if (max_ts_per_rpc < 1 || max_ts_per_rpc > ts_max_per_rpc)
    throw config_error("coalesce.max_ts_per_rpc",
                       "must be between 1 and 262144 (18-bit logical)");
  if (max_seq_per_rpc < 1)
    throw config_error("coalesce.max_seq_per_rpc", "must be >= 1");
  if (max_seq_key_bytes < 1 || max_seq_key_bytes > 4096)
    throw config_error("coalesce.max_seq_key_bytes",
                       "must be between 1 and 4096");
  if (json_max_depth < 1 || json_max_depth > 1024)
    throw config_error("coalesce.json_max_depth", "must be 1..1024");
  retry.validate("coalesce.retry");
  if (!finite_positive(leader_ttl))
    throw config_error("coalesce.leader_ttl", "must be > 0 seconds");
  if (max_redirects_per_pass < 1)
    throw config_error("coalesce.max_redirects_per_pass", "must be >= 1");
  if (max_redirects_per_call < 1)
    throw config_error("coalesce.max_redirects_per_call", "must be >= 1");
  validate_credential_fields(token, token_header, token_scheme,
                             default_headers, "coalesce.");
  // What the request builder (core/request_builder.hpp) refuses at
  // send time, refused here so that it fails at construction: the
  // transport owns Host / Content-Length / Transfer-Encoding, and the
  // driver sets x-request-id per RPC (a default one would be overwritten).
  for (auto& [k, v] : default_headers) {
    auto lk = core::ascii_lower(k);
    if (lk == "host" || lk == "content-length" || lk == "transfer-encoding"
        || lk == "x-request-id")
      throw config_error("coalesce.default_headers",
                         "header '" + k + "' is set by the "
                           + (lk == "x-request-id" ? "driver" : "transport")
                           + " and may not be given (value not shown)");
  }
}

std::vector<oracle_endpoint> coalesce_config::parsed_endpoints() const {
  std::vector<oracle_endpoint> r;
  for (auto& s : endpoints)
    if (auto ep = parse_oracle_endpoint(s, tls, endpoint_origin::configured))
      r.push_back(std::move(*ep));
  return r;
}

} // namespace config
} // namespace outbound
