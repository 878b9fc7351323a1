#include "config/demo_config.hpp"

#include "config/client_config.hpp"
#include "config/config_error.hpp"
#include "core/validate.hpp"
#include "protocol/json_parse.hpp"

#include <boost/json/value.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <sstream>

namespace outbound {
inline namespace config {

namespace {

using core::check_positive;
using core::check_range;

// -- JSON reading ------------------------------------------------------------

double as_double(const boost::json::value& v, const std::string& field) {
  if (v.is_double())
    return v.get_double();
  if (v.is_int64())
    return static_cast<double>(v.get_int64());
  if (v.is_uint64())
    return static_cast<double>(v.get_uint64());
  throw config_error(field, "must be a number, got " + json_value_for_error(v));
}

/// An integer in [lo, hi] (a double with an integral value is accepted).
int64_t as_int(const boost::json::value& v, int64_t lo, int64_t hi,
               const std::string& field) {
  auto bad = [&] {
    return config_error(
      field, "must be an integer between " + std::to_string(lo) + " and "
               + std::to_string(hi) + ", got " + json_value_for_error(v));
  };
  if (v.is_int64()) {
    auto i = v.get_int64();
    if (i < lo || i > hi)
      throw bad();
    return i;
  }
  if (v.is_uint64())
    throw bad();
  double d = as_double(v, field);
  if (!(std::isfinite(d) && d == std::floor(d) && d >= static_cast<double>(lo)
        && d <= static_cast<double>(hi)))
    throw bad();
  return static_cast<int64_t>(d);
}

std::string as_string(const boost::json::value& v, const std::string& field) {
  if (!v.is_string())
    throw config_error(field,
                       "must be a string, got " + json_value_for_error(v));
  return std::string{v.get_string()};
}

std::vector<std::string> as_strings(const boost::json::value& v,
                                    const std::string& field) {
  if (!v.is_array())
    throw config_error(field, "must be an array of strings");
  std::vector<std::string> out;
  const auto& a = v.get_array();
  for (std::size_t i = 0; i < a.size(); ++i)
    out.push_back(as_string(a[i], field + "[" + std::to_string(i) + "]"));
  return out;
}

const boost::json::object& as_object(const boost::json::value& v,
                                     const std::string& field) {
  if (!v.is_object())
    throw config_error(field, "must be a JSON object");
  return v.get_object();
}

/// One object's known keys: each reader applies a value to the config.
using reader = std::function<void(const boost::json::value&,
                                  const std::string& field)>;

void read_object(const boost::json::value& v, const std::string& prefix,
                 const std::map<std::string, reader>& readers) {
  for (const auto& kv : as_object(v, prefix)) {
    std::string key{kv.key()};
    auto field = prefix + "." + key;
    auto it = readers.find(key);
    if (it == readers.end())
      throw config_error(field, "unknown field");
    it->second(kv.value(), field);
  }
}

constexpr int64_t int_max = std::numeric_limits<int>::max();

reader dbl(double& x) {
  return [&x](const boost::json::value& v, const std::string& f) {
    x = as_double(v, f);
  };
}

reader opt_dbl(std::optional<double>& x) {
  return [&x](const boost::json::value& v, const std::string& f) {
    if (v.is_null())
      x.reset();
    else
      x = as_double(v, f);
  };
}

template <class T>
reader integer(T& x, int64_t lo, int64_t hi) {
  return [&x, lo, hi](const boost::json::value& v, const std::string& f) {
    x = static_cast<T>(as_int(v, lo, hi, f));
  };
}

void read_breaker(const boost::json::value& v, const std::string& p,
                  breaker_config& b) {
  read_object(v, p,
              {{"error_rate_threshold", dbl(b.error_rate_threshold)},
               {"min_samples", integer(b.min_samples, 0, int_max)},
               {"window", dbl(b.window)},
               {"cooldown", dbl(b.cooldown)},
               {"half_open_max_trial", integer(b.half_open_max_trial, 0, int_max)},
               {"treat_5xx_as_failure",
                [&b](const boost::json::value& x, const std::string& f) {
                  if (!x.is_bool())
                    throw config_error(f, "must be true or false");
                  b.treat_5xx_as_failure = x.get_bool();
                }}});
}

void read_hedging(const boost::json::value& v, const std::string& p,
                  hedge_config& h) {
  read_object(
    v, p,
    {{"percentile", dbl(h.percentile)},
     {"budget_percent", dbl(h.budget_percent)},
     {"estimated_rps", opt_dbl(h.estimated_rps)},
     {"rps_window", dbl(h.rps_window)},
     {"delay_search",
      [&h](const boost::json::value& x, const std::string& f) {
        if (!x.is_bool())
          throw config_error(f, "must be true or false");
        h.delay_search = x.get_bool();
      }},
     {"min_delay", dbl(h.min_delay)},
     {"warmup_requests", integer(h.warmup_requests, 0, int_max)},
     {"warmup_delay", dbl(h.warmup_delay)},
     {"window_duration", dbl(h.window_duration)},
     {"max_keys", integer(h.max_keys, 0, int_max)},
     {"breaker", [&h](const boost::json::value& x, const std::string& f) {
        read_breaker(x, f, h.breaker);
      }}});
}

template <class T>
reader opt_int(std::optional<T>& x, int64_t lo, int64_t hi) {
  return [&x, lo, hi](const boost::json::value& v, const std::string& f) {
    if (v.is_null())
      x.reset();
    else
      x = static_cast<T>(as_int(v, lo, hi, f));
  };
}

void read_endpoint(const boost::json::value& v, const std::string& p,
                   endpoint_config& e) {
  read_object(v, p,
              {{"percentile", opt_dbl(e.percentile)},
               {"budget_percent", opt_dbl(e.budget_percent)},
               {"estimated_rps", opt_dbl(e.estimated_rps)},
               {"rps_window", opt_dbl(e.rps_window)},
               {"delay_search",
                [&e](const boost::json::value& x, const std::string& f) {
                  if (x.is_null())
                    e.delay_search.reset();
                  else if (x.is_bool())
                    e.delay_search = x.get_bool();
                  else
                    throw config_error(f, "must be true, false or null");
                }},
               {"min_delay", opt_dbl(e.min_delay)},
               {"warmup_requests", opt_int(e.warmup_requests, 0, int_max)},
               {"warmup_delay", opt_dbl(e.warmup_delay)},
               {"window_duration", opt_dbl(e.window_duration)},
               {"hedge_delay", opt_dbl(e.hedge_delay)}});
}

/// Throws config_error(field, "must be an integer between LO and HI, got
/// V") unless lo <= v <= hi: an integer setting set in code (the CLI's
/// --feeds) is told in the words as_int() uses for one read from a file.
template <class T>
void check_count(T v, long long lo, long long hi, const std::string& field) {
  auto x = static_cast<long double>(v);
  if (x < lo || x > hi)
    throw config_error(field, "must be an integer between " + std::to_string(lo)
                                + " and " + std::to_string(hi) + ", got "
                                + std::to_string(v));
}

} // namespace

void demo_config::validate() const {
  check_count(feeds, 0, 100000, "demo.feeds");
  check_range(duration, 0.0, 86400.0, "demo.duration");
  check_positive(duration, "demo.duration");
  check_range(rate, 0.0, 100000.0, "demo.rate");
  check_count(subject_groups, 1, 100000, "demo.subject_groups");
  check_count(metrics_port, 0, 65535, "demo.metrics_port");
  check_range(status_interval, 0.0, 3600.0, "demo.status_interval");
  check_positive(status_interval, "demo.status_interval");
  if (!hub.empty() && hub.rfind("http://", 0) != 0
      && hub.rfind("https://", 0) != 0)
    throw config_error("demo.hub", "must be an http:// or https:// URL");
  if (!hub.empty())
    (void)url_parts::parse(hub, "demo.hub");
  for (std::size_t i = 0; i < oracle_endpoints.size(); ++i)
    if (oracle_endpoints[i].empty())
      throw config_error("demo.oracle_endpoints[" + std::to_string(i) + "]",
                         "must not be empty");
  check_count(cluster_size, 1, 16, "demo.cluster_size");
  if (hub_retention < 1000)
    throw config_error("demo.hub_retention", "must be >= 1000");
  // traffic
  check_range(traffic.requests_per_second, 0.0, 100000.0,
              "demo.traffic.requests_per_second");
  check_count(traffic.concurrency, 1, 256, "demo.traffic.concurrency");
  if (traffic.routes.empty())
    throw config_error("demo.traffic.routes", "must name at least one path");
  for (std::size_t i = 0; i < traffic.routes.size(); ++i) {
    const auto& r = traffic.routes[i];
    auto field = "demo.traffic.routes[" + std::to_string(i) + "]";
    if (r.size() < 2 || r[0] != '/')
      throw config_error(field, "must be a path starting with '/'");
    for (char c : r)
      if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f)
        throw config_error(field, "must not contain spaces or controls");
  }
  for (const auto& kv : traffic.endpoints) {
    // Not a structured binding: a lambda below captures the name (C++17).
    const auto& name = kv.first;
    const auto& ep = kv.second;
    auto field = "demo.traffic.endpoints." + name;
    bool routed = std::any_of(
      traffic.routes.begin(), traffic.routes.end(),
      [&](const std::string& r) { return demo_endpoint_name(r) == name; });
    if (!routed)
      throw config_error(field, "no route of traffic.routes has this "
                                "endpoint name");
    ep.validate(field);
  }
  // At most a day: the demo adds them to clock times (above ~9e9 s they
  // overflowed and every call failed at once).
  check_range(traffic.timeout, 0.0, 86400.0, "demo.traffic.timeout");
  check_positive(traffic.timeout, "demo.traffic.timeout");
  check_range(traffic.deadline, 0.0, 86400.0, "demo.traffic.deadline");
  check_positive(traffic.deadline, "demo.traffic.deadline");
  if (!(traffic.deadline >= traffic.timeout))
    throw config_error("demo.traffic.deadline", "must be >= traffic.timeout");
  check_range(hub_restart_at, 0.0, 86400.0, "demo.hub_restart_at");
  // outage
  check_range(outage.calls_per_second, 0.0, 100.0,
              "demo.outage.calls_per_second");
  check_range(outage.start, 0.0, 86400.0, "demo.outage.start");
  check_range(outage.seconds, 0.0, 7.0, "demo.outage.seconds");
  check_positive(outage.seconds, "demo.outage.seconds");
  check_count(outage.max_attempts, 2, 10, "demo.outage.max_attempts");
  if (outage.route != "/fast" && outage.route != "/slow"
      && outage.route != "/flaky" && outage.route != "/lognormal"
      && outage.route != "/steady")
    throw config_error("demo.outage.route",
                       "must be one of /fast, /slow, /flaky, /lognormal, "
                       "/steady");
  // The drill's outage would fail the hedged and unhedged clients' calls
  // of that route too and mix into their comparison.
  if (outage.calls_per_second > 0 && traffic.requests_per_second > 0)
    for (const auto& r : traffic.routes)
      if (r.substr(0, r.find('?')) == outage.route)
        throw config_error("demo.outage.route",
                           "must not be a route of traffic.routes ('" + r
                             + "'): its outage would fail their calls too");
  // bursts
  check_count(bursts.size, 0, 100000, "demo.bursts.size");
  check_range(bursts.interval, 0.0, 86400.0, "demo.bursts.interval");
  check_positive(bursts.interval, "demo.bursts.interval");
  // oracle
  check_range(oracle.calls_per_second, 0.0, 1000000.0,
              "demo.oracle.calls_per_second");
  check_count(oracle.callers, 1, 256, "demo.oracle.callers");
  check_count(oracle.count, 1, 262144, "demo.oracle.count");
  check_range(oracle.timeout, 0.0, 86400.0, "demo.oracle.timeout");
  check_positive(oracle.timeout, "demo.oracle.timeout");
  // hedging: hedge_config names its fields `hedge.*`; say where they are in
  // the demo's file instead.
  try {
    hedging.validate();
  } catch (const config_error& e) {
    auto f = e.field();
    if (f.rfind("hedge.", 0) == 0)
      f = "demo.hedging." + f.substr(6);
    std::string why = e.what();
    auto colon = why.find(": ");
    throw config_error(f, colon == std::string::npos ? why
                                                     : why.substr(colon + 2));
  }
}

std::string demo_endpoint_name(const std::string& route) {
  auto path = route.substr(0, route.find('?'));
  std::string name;
  for (std::size_t i = 1; i < path.size(); ++i)
    name += path[i] == '/' ? '_' : path[i];
  return name.empty() ? "root" : name;
}

demo_config parse_demo_config(std::string_view json_text) {
  json_limits limits;
  limits.reject_duplicate_keys = true;
  auto parsed = parse_json(json_text, limits);
  if (parsed.error == json_parse_error::duplicate_key)
    throw config_error("demo." + parsed.field, "key appears more than once");
  if ((parsed.error == json_parse_error::number_out_of_range
       || parsed.error == json_parse_error::inexact_integer)
      && !parsed.field.empty()) {
    auto why = parsed.detail.substr(0, parsed.detail.rfind(" at "));
    throw config_error("demo." + parsed.field, why);
  }
  if (!parsed)
    throw config_error("demo", "not valid JSON: " + parsed.detail);
  auto& v = parsed.value;
  demo_config c;
  auto& t = c.traffic;
  auto& o = c.oracle;
  read_object(
    v, "demo",
    {{"feeds", integer(c.feeds, 0, 100000)},
     {"duration", dbl(c.duration)},
     {"rate", dbl(c.rate)},
     {"subject_groups", integer(c.subject_groups, 1, 100000)},
     {"metrics_port", integer(c.metrics_port, 0, 65535)},
     {"status_interval", dbl(c.status_interval)},
     {"hub",
      [&c](const boost::json::value& x, const std::string& f) {
        c.hub = as_string(x, f);
      }},
     {"oracle_endpoints",
      [&c](const boost::json::value& x, const std::string& f) {
        c.oracle_endpoints = as_strings(x, f);
      }},
     {"cluster_size", integer(c.cluster_size, 1, 16)},
     {"max_labelled_feeds", integer(c.max_labelled_feeds, 0, int_max)},
     {"hub_retention",
      integer(c.hub_retention, 1000, std::numeric_limits<int64_t>::max())},
     {"traffic",
      [&t](const boost::json::value& x, const std::string& f) {
        read_object(x, f,
                    {{"requests_per_second", dbl(t.requests_per_second)},
                     {"concurrency", integer(t.concurrency, 1, 256)},
                     {"routes",
                      [&t](const boost::json::value& y, const std::string& g) {
                        t.routes = as_strings(y, g);
                      }},
                     {"timeout", dbl(t.timeout)},
                     {"deadline", dbl(t.deadline)},
                     {"endpoints",
                      [&t](const boost::json::value& y, const std::string& g) {
                        t.endpoints.clear();
                        for (const auto& kv : as_object(y, g)) {
                          auto name = std::string{kv.key()};
                          endpoint_config ep;
                          read_endpoint(kv.value(), g + "." + name, ep);
                          t.endpoints[name] = ep;
                        }
                      }},
                     {"compare_unhedged",
                      [&t](const boost::json::value& y, const std::string& g) {
                        if (!y.is_bool())
                          throw config_error(g, "must be true or false");
                        t.compare_unhedged = y.get_bool();
                      }}});
      }},
     {"hub_restart_at", dbl(c.hub_restart_at)},
     {"outage",
      [&c](const boost::json::value& x, const std::string& f) {
        auto& u = c.outage;
        read_object(x, f,
                    {{"calls_per_second", dbl(u.calls_per_second)},
                     {"start", dbl(u.start)},
                     {"seconds", dbl(u.seconds)},
                     {"route",
                      [&u](const boost::json::value& y, const std::string& g) {
                        u.route = as_string(y, g);
                      }},
                     {"max_attempts", integer(u.max_attempts, 2, 10)}});
      }},
     {"bursts",
      [&c](const boost::json::value& x, const std::string& f) {
        auto& b = c.bursts;
        read_object(x, f,
                    {{"size", integer(b.size, 0, 100000)},
                     {"interval", dbl(b.interval)}});
      }},
     {"oracle",
      [&o](const boost::json::value& x, const std::string& f) {
        read_object(x, f,
                    {{"calls_per_second", dbl(o.calls_per_second)},
                     {"callers", integer(o.callers, 1, 256)},
                     {"count", integer(o.count, 1, 262144)},
                     {"timeout", dbl(o.timeout)}});
      }},
     {"hedging", [&c](const boost::json::value& x, const std::string& f) {
        read_hedging(x, f, c.hedging);
      }}});
  // The default overrides follow the default routes: a file that names
  // its own routes and no overrides keeps those of its routes only.
  auto* traffic = v.as_object().if_contains("traffic");
  if (!traffic || !traffic->is_object()
      || !traffic->get_object().contains("endpoints"))
    for (auto it = t.endpoints.begin(); it != t.endpoints.end();)
      it = std::any_of(t.routes.begin(), t.routes.end(),
                       [&](const std::string& r) {
                         return demo_endpoint_name(r) == it->first;
                       })
             ? std::next(it)
             : t.endpoints.erase(it);
  c.validate();
  return c;
}

demo_config load_demo_config(const std::string& path) {
  // A directory opens as a stream on Linux and fails only on reading.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw config_error("demo", "cannot read " + path + ": is a directory");
  errno = 0;
  std::ifstream in{path, std::ios::binary};
  if (!in)
    throw config_error("demo",
                       "cannot read " + path + ": "
                         + (errno != 0 ? std::strerror(errno) : "cannot open"));
  std::ostringstream os;
  os << in.rdbuf();
  if (in.bad())
    throw config_error("demo", "cannot read " + path);
  try {
    return parse_demo_config(os.str());
  } catch (const config_error& e) {
    throw config_file_error(path, e); // "<path>: demo.<field>: <why>"
  }
}

} // namespace config
} // namespace outbound
