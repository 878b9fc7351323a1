#include "actors/hedge/route_table.hpp"

#include "config/config_error.hpp"
#include "core/text.hpp"

#include <algorithm>
#include <cctype>

namespace outbound {
inline namespace hedge {

namespace {

/// Splits "/a/b/" into "", "a", "b", "" (the leading '/' gives the first
/// empty segment; a trailing '/' gives the last one, which is what makes a
/// trailing slash significant).
std::vector<std::string> segments(const std::string& path) {
  std::vector<std::string> out;
  std::string::size_type from = 0;
  for (;;) {
    auto slash = path.find('/', from);
    if (slash == std::string::npos) {
      out.push_back(path.substr(from));
      return out;
    }
    out.push_back(path.substr(from, slash - from));
    from = slash + 1;
  }
}

bool is_wildcard(const std::string& seg) {
  return seg == "*"
         || (seg.size() >= 3 && seg.front() == '{' && seg.back() == '}'
             && seg.find_first_of("{}", 1) == seg.size() - 1);
}

std::string strip_query(const std::string& path) {
  return path.substr(0, path.find_first_of("?#"));
}

bool is_method_token(const std::string& m) {
  return !m.empty() && std::all_of(m.begin(), m.end(), [](char c) {
    return core::is_alpha(c) || c == '-' || c == '_';
  });
}

} // namespace

const char* to_string(route_status s) {
  switch (s) {
    case route_status::matched: return "matched";
    case route_status::unmatched: return "unmatched";
    case route_status::unknown_endpoint: return "unknown_endpoint";
  }
  return "?";
}

std::string route_table::register_route(const std::string& method,
                                        const std::string& pattern,
                                        const endpoint_config& config,
                                        std::optional<std::string> name) {
  auto m = core::ascii_upper(method);
  if (m != "*" && !is_method_token(m))
    throw config_error("route.method", "must be an HTTP method or '*'");
  if (pattern.empty() || pattern.front() != '/')
    throw config_error("route.pattern", "must start with '/'");
  if (pattern.find_first_of("?#") != std::string::npos)
    throw config_error("route.pattern",
                       "must not contain a query or fragment");
  for (auto& seg : segments(pattern))
    if (!is_wildcard(seg) && seg.find_first_of("{}") != std::string::npos)
      throw config_error("route.pattern",
                         "'{name}' must be a whole path segment");
  config.validate();
  std::string n = name ? *name : m + " " + pattern;
  if (n.empty())
    throw config_error("route.name", "must not be empty");
  for (auto& e : entries_)
    if (e.name == n)
      throw config_error("route.name", "'" + n + "' is already registered");
  entries_.push_back(route_entry{n, m, pattern, config});
  return n;
}

bool route_table::pattern_matches(const std::string& pattern,
                                  const std::string& path) {
  auto ps = segments(pattern);
  auto xs = segments(strip_query(path));
  if (ps.size() != xs.size())
    return false;
  for (std::size_t i = 0; i < ps.size(); ++i) {
    if (is_wildcard(ps[i])) {
      if (xs[i].empty())
        return false;
    } else if (ps[i] != xs[i]) {
      return false;
    }
  }
  return true;
}

route_result route_table::match(const std::string& method,
                                const std::string& path,
                                const std::string& host,
                                std::optional<uint16_t> port) const {
  auto m = core::ascii_upper(method);
  for (auto& e : entries_)
    if ((e.method == "*" || e.method == m) && pattern_matches(e.pattern, path))
      return route_result{route_status::matched, e.key(), e};
  return route_result{route_status::unmatched, host_key(host, port),
                      std::nullopt};
}

route_result route_table::find(const std::string& name) const {
  for (auto& e : entries_)
    if (e.name == name)
      return route_result{route_status::matched, e.key(), e};
  return route_result{route_status::unknown_endpoint, {}, std::nullopt};
}

route_result route_table::route(const std::optional<std::string>& explicit_name,
                                const std::string& method,
                                const std::string& path,
                                const std::string& host,
                                std::optional<uint16_t> port) const {
  if (explicit_name)
    return find(*explicit_name);
  return match(method, path, host, port);
}

std::string route_table::host_key(const std::string& host,
                                  std::optional<uint16_t> port) {
  if (!port)
    return "host:" + host;
  bool v6 = host.find(':') != std::string::npos && host.front() != '[';
  return "host:" + (v6 ? "[" + host + "]" : host) + ":"
         + std::to_string(*port);
}

} // namespace hedge
} // namespace outbound
