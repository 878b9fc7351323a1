#include "config/client_config.hpp"

#include "config/config_error.hpp"
#include "core/backoff.hpp"
#include "core/text.hpp"
#include "core/time.hpp"
#include "core/validate.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>

namespace outbound {
inline namespace config {

namespace {

void require_readable(const std::string& path, const std::string& field) {
  // An ifstream opens a directory on Linux and then reads nothing: say
  // what it is instead of calling it empty.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw config_error(field, "'" + path + "' is a directory, not a file");
  std::ifstream in{path, std::ios::binary};
  if (!in)
    throw config_error(field, "cannot read file '" + path + "'");
  char c;
  if (!in.get(c))
    throw config_error(field, "file '" + path + "' is empty");
}

using core::finite_non_negative;

/// A registered name as the client can send it (RFC 3986 reg-name without
/// percent-encoding or sub-delims): ASCII letters, digits, '-', '.', '_',
/// '~'. Anything else (a non-ASCII name needs its IDNA A-label, "xn--...")
/// would go raw into the Host header, SNI and the resolver.
bool is_plain_reg_name(const std::string& host) {
  return std::all_of(host.begin(), host.end(), [](char c) {
    return core::is_alnum(c) || c == '-' || c == '.' || c == '_' || c == '~';
  });
}

/// The inside of an IP-literal: hex digits, ':' and '.' (an IPv4 tail),
/// with at least one ':'.
bool is_ipv6_text(const std::string& host) {
  return host.find(':') != std::string::npos
         && std::all_of(host.begin(), host.end(), [](unsigned char c) {
              return core::is_hexdig(c) || c == ':' || c == '.';
            });
}

/// `part` of `url` quoted for an error text, unless `url` may carry user
/// info (a '@' anywhere): then it is not shown, because it may hold a
/// password ("http://u:pw?x@h" parses as host "u", port "pw?x").
std::string shown(const std::string& url, const std::string& part) {
  if (url.find('@') != std::string::npos)
    return "(not shown: the URL may carry user info)";
  return "'" + part + "'";
}

} // namespace

void retry_budget_config::validate() const {
  check_range(percent, 0.0, 100.0, "retry_budget.percent");
  check_range(min_per_second, 0.0, 1e9, "retry_budget.min_per_second");
  // A slice (window / 10) of at least 100 ns, far from overflow.
  if (!(window >= 1e-6 && window <= 3600.0))
    throw config_error("retry_budget.window",
                       "must be between 1e-6 and 3600 seconds");
}

void retry_policy::validate() const {
  if (max_attempts < 1)
    throw config_error("retry.max_attempts", "must be >= 1, got "
                                               + std::to_string(max_attempts));
  core::validate_backoff_seconds(base_backoff, max_backoff,
                                 "retry.base_backoff", "retry.max_backoff");
  for (auto s : retry_statuses)
    if (s < 100 || s > 599)
      throw config_error("retry.retry_statuses",
                         "not an HTTP status: " + std::to_string(s));
}

bool retry_policy::retryable_status(int status) const {
  return std::find(retry_statuses.begin(), retry_statuses.end(), status)
         != retry_statuses.end();
}

void tls_config::validate() const {
  if (!ca_file.empty())
    require_readable(ca_file, "tls.ca_file");
  if (client_cert_file.empty() != client_key_file.empty())
    throw config_error(client_cert_file.empty() ? "tls.client_cert_file"
                                                : "tls.client_key_file",
                       "client certificate and key must be given together");
  if (!client_cert_file.empty())
    require_readable(client_cert_file, "tls.client_cert_file");
  if (!client_key_file.empty())
    require_readable(client_key_file, "tls.client_key_file");
}

std::string url_parts::authority() const {
  auto h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return h + ":" + std::to_string(port);
}

url_parts url_parts::parse(const std::string& url, const std::string& field) {
  url_parts r;
  auto sep = url.find("://");
  if (sep == std::string::npos)
    throw config_error(field, "not an absolute http(s) URL: " + shown(url, url));
  r.scheme = core::ascii_lower(url.substr(0, sep));
  if (r.scheme != "http" && r.scheme != "https")
    throw config_error(field, "scheme must be http or https, got '"
                                + r.scheme + "'");
  if (core::has_ctl(url) || url.find(' ') != std::string::npos)
    throw config_error(field, "URL contains spaces or control characters");
  auto rest = url.substr(sep + 3);
  auto slash = rest.find('/');
  auto auth = rest.substr(0, slash);
  r.path = slash == std::string::npos ? "" : rest.substr(slash);
  if (r.path.find_first_of("?#") != std::string::npos)
    throw config_error(field, "base URL must not carry a query or fragment");
  while (!r.path.empty() && r.path.back() == '/')
    r.path.pop_back();
  if (auth.find('@') != std::string::npos)
    throw config_error(field, "user info in the URL is not allowed (use the "
                              "token setting)");
  std::string port_str;
  bool bracketed = !auth.empty() && auth.front() == '[';
  if (bracketed) {
    auto close = auth.find(']');
    if (close == std::string::npos)
      throw config_error(field, "unterminated IPv6 literal");
    r.host = auth.substr(1, close - 1);
    auto tail = auth.substr(close + 1);
    if (!tail.empty()) {
      if (tail.front() != ':')
        throw config_error(field, "garbage after IPv6 literal");
      port_str = tail.substr(1);
    }
  } else {
    auto colon = auth.rfind(':');
    r.host = auth.substr(0, colon);
    if (colon != std::string::npos)
      port_str = auth.substr(colon + 1);
  }
  if (r.host.empty())
    throw config_error(field, "missing host in " + shown(url, url));
  if (bracketed ? !is_ipv6_text(r.host) : !is_plain_reg_name(r.host))
    throw config_error(field, bracketed
                                ? "not an IPv6 literal in brackets"
                                : "host may only hold ASCII letters, digits, "
                                  "'-', '.', '_', '~' (use the IDNA form of "
                                  "a non-ASCII name)");
  if (port_str.empty()) {
    r.port = r.tls() ? 443 : 80;
  } else {
    if (port_str.size() > 5
        || !std::all_of(port_str.begin(), port_str.end(),
                        [](char c) { return core::is_digit(c); }))
      throw config_error(field, "bad port " + shown(url, port_str));
    auto p = std::stoul(port_str);
    if (p == 0 || p > 65535)
      throw config_error(field, "port out of range: " + shown(url, port_str));
    r.port = static_cast<uint16_t>(p);
  }
  return r;
}

json_limits client_config::response_json_limits() const {
  json_limits l;
  l.max_depth = json_max_depth;
  l.allow_inexact_integers = json_allow_inexact_integers;
  l.max_bytes = json_memory_bound(max_response_bytes, json_memory_factor,
                                  json_memory_max_bytes);
  return l;
}

void validate_credential_fields(
  const std::string& token, const std::string& token_header,
  const std::string& token_scheme,
  const std::vector<std::pair<std::string, std::string>>& default_headers,
  const std::string& prefix) {
  if (token_header.empty() || core::has_ctl(token_header)
      || token_header.find(':') != std::string::npos
      || token_header.find(' ') != std::string::npos)
    throw config_error(prefix + "token_header", "not a valid header name");
  // The token itself is never echoed into the error text.
  if (core::has_ctl(token))
    throw config_error(prefix + "token", "contains control characters");
  if (core::has_ctl(token_scheme))
    throw config_error(prefix + "token_scheme", "contains control characters");
  for (auto& [k, v] : default_headers)
    if (k.empty() || core::has_ctl(k) || core::has_ctl(v)
        || k.find(':') != std::string::npos)
      throw config_error(
        prefix + "default_headers",
        (core::has_ctl(k) ? std::string{"bad header name (control characters)"}
                          : "bad header '" + k + "'")
          + " (value not shown)");
}

void client_config::validate() const {
  if (base_url.empty())
    throw config_error("base_url", "must not be empty");
  auto url = url_parts::parse(base_url);
  // Also refused: a positive value under half a nanosecond (it would round
  // to an instant timeout or deadline).
  core::validate_seconds(timeout, "timeout", false);
  core::validate_seconds(deadline, "deadline", false);
  retry.validate();
  retry_budget.validate();
  tls.validate();
  if (tls.any() && !url.tls())
    throw config_error("base_url",
                       "TLS files are set but the URL is not https");
  if (max_response_bytes == 0)
    throw config_error("max_response_bytes", "must be > 0");
  if (json_max_depth < 1 || json_max_depth > 1024)
    throw config_error("json_max_depth", "must be 1..1024");
  if (json_memory_factor < 1 || json_memory_factor > 64)
    throw config_error("json_memory_factor", "must be 1..64");
  if (json_memory_max_bytes < 1024u * 1024u)
    throw config_error("json_memory_max_bytes", "must be >= 1 MiB");
  if (max_redials < 0)
    throw config_error("max_redials", "must be >= 0");
  if (max_connections_per_endpoint < 1)
    throw config_error("max_connections_per_endpoint", "must be >= 1");
  if (max_pending_requests < 1)
    throw config_error("max_pending_requests", "must be >= 1");
  if (!finite_non_negative(surplus_idle_time) || surplus_idle_time > 3600)
    throw config_error("surplus_idle_time", "must be >= 0 and <= 3600 seconds");
  if (!(min_dispatch_budget > 0) || !(min_dispatch_budget <= 60))
    throw config_error("min_dispatch_budget", "must be > 0 and <= 60 seconds");
  // The pool truncates it to whole nanoseconds: under 1 ns it would be 0.
  if (min_dispatch_budget < 1e-9)
    throw config_error("min_dispatch_budget",
                       "must be at least 1e-9 seconds: it counts in whole "
                       "nanoseconds");
  if (!finite_non_negative(local_retry_deadline))
    throw config_error("local_retry_deadline", "must be >= 0 seconds");
  validate_credential_fields(token, token_header, token_scheme,
                             default_headers);
  // A token (RFC 9110), and none of the headers the client sets itself:
  // the key would replace them, or they the key (x-retry-count on every
  // retry).
  if (!core::is_token(idempotency_key_header)
      || core::iequals(idempotency_key_header, token_header)
      || core::iequals(idempotency_key_header, "x-request-id")
      || core::iequals(idempotency_key_header, "x-retry-count")
      || core::iequals(idempotency_key_header, "accept")
      || core::iequals(idempotency_key_header, "content-type")
      || core::iequals(idempotency_key_header, "user-agent")
      || core::iequals(idempotency_key_header, "host")
      || core::iequals(idempotency_key_header, "content-length")
      || core::iequals(idempotency_key_header, "transfer-encoding"))
    throw config_error("idempotency_key_header", "not a valid header name");
  if (idempotency_keys != idempotency_key_mode::off
      && idempotency_keys != idempotency_key_mode::auto_key)
    throw config_error("idempotency_keys", "must be off or auto");
  for (std::size_t i = 0; i < idempotency_routes.size(); ++i) {
    const auto& r = idempotency_routes[i];
    auto field = "idempotency_routes[" + std::to_string(i) + "]";
    if (!core::is_token(r.method))
      throw config_error(field + ".method", "not an HTTP method (a token)");
    if (r.path.empty() || r.path[0] != '/'
        || r.path.find_first_of("?# \t\r\n") != std::string::npos)
      throw config_error(field + ".path",
                         "must start with '/' and hold no query, fragment "
                         "or white space");
    if (r.mode != idempotency_key_mode::off
        && r.mode != idempotency_key_mode::auto_key)
      throw config_error(field + ".mode", "must be off or auto");
  }
}

env_settings env_settings::read(const std::string& prefix) {
  auto get = [&](const char* suffix) {
    auto name = prefix + "_" + suffix;
    auto v = std::getenv(name.c_str());
    return v ? std::string{v} : std::string{};
  };
  env_settings e;
  e.base_url = get("URL");
  e.token = get("TOKEN");
  e.ca_file = get("CA_FILE");
  e.client_cert_file = get("CLIENT_CERT");
  e.client_key_file = get("CLIENT_KEY");
  return e;
}

void env_settings::apply_to(client_config& cfg) const {
  auto fill = [](std::string& dst, const std::string& src) {
    if (dst.empty())
      dst = src;
  };
  fill(cfg.base_url, base_url);
  fill(cfg.token, token);
  fill(cfg.tls.ca_file, ca_file);
  fill(cfg.tls.client_cert_file, client_cert_file);
  fill(cfg.tls.client_key_file, client_key_file);
}

client_config from_env(const std::string& prefix, client_config explicit_cfg) {
  env_settings::read(prefix).apply_to(explicit_cfg);
  // The URL is the one variable without which nothing works: name the
  // variable the user has to set, not the struct field.
  if (explicit_cfg.base_url.empty())
    throw config_error(prefix + "_URL", "is not set (or empty)");
  explicit_cfg.validate();
  return explicit_cfg;
}

} // namespace config
} // namespace outbound
