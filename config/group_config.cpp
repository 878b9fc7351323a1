#include "config/group_config.hpp"

#include "config/config_error.hpp"
#include "core/text.hpp"
#include "protocol/json_parse.hpp"

#include <algorithm>
#include <boost/json/value.hpp>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

namespace outbound {
inline namespace config {

namespace {

// -- names --------------------------------------------------------------------

bool is_lower_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.'
         || c == '_' || c == '-';
}

bool is_member_name_char(char c) {
  return is_lower_name_char(c) || (c >= 'A' && c <= 'Z') || c == ':';
}

/// `s` has 1..max characters, each accepted by `ok`.
template <class Pred>
bool all_of_len(const std::string& s, std::size_t max, Pred ok) {
  if (s.empty() || s.size() > max)
    return false;
  for (char c : s)
    if (!ok(c))
      return false;
  return true;
}

// -- JSON reading (the shapes of config/demo_config.cpp) ----------------------

double as_double(const boost::json::value& v, const std::string& field) {
  if (v.is_double())
    return v.get_double();
  if (v.is_int64())
    return static_cast<double>(v.get_int64());
  if (v.is_uint64())
    return static_cast<double>(v.get_uint64());
  throw config_error(field, "must be a number");
}

/// A count of group_state_config with the range validate() (its
/// group_config_error) accepts: the JSON reader and the environment check
/// it themselves, so that the error states the range and the value given.
struct count_field {
  /// The JSON key, validate()'s field name ("group.<key>") and the
  /// environment variable.
  const char* key;
  const char* field;
  const char* variable;
  std::size_t group_state_config::*member;
  std::size_t lo, hi;
};

constexpr std::size_t no_max = std::numeric_limits<std::size_t>::max();

constexpr count_field count_fields[] = {
  {"batch", "group.batch", "OUTBOUND_GROUP_BATCH", &group_state_config::batch,
   1, 128},
  {"min_members", "group.min_members", "OUTBOUND_GROUP_MIN_MEMBERS",
   &group_state_config::min_members, 1, no_max},
  {"max_starts_per_second", "group.max_starts_per_second",
   "OUTBOUND_GROUP_MAX_STARTS_PER_SECOND",
   &group_state_config::max_starts_per_second, 1, no_max},
  {"max_feeds", "group.max_feeds", "OUTBOUND_GROUP_MAX_FEEDS",
   &group_state_config::max_feeds, 1, no_max},
  {"max_inflight_batches", "group.max_inflight_batches",
   "OUTBOUND_GROUP_MAX_INFLIGHT_BATCHES",
   &group_state_config::max_inflight_batches, 1, 1024},
};

/// "must be an integer in 1..1024", or without a bound of its own
/// "must be an integer >= 1 (at most 2^64 - 1)".
std::string count_range(const count_field& f) {
  if (f.hi == no_max)
    return "must be an integer >= " + std::to_string(f.lo)
           + " (at most 2^64 - 1)";
  return "must be an integer in " + std::to_string(f.lo) + ".."
         + std::to_string(f.hi);
}

/// A JSON value as an error text shows it: numbers as written in short
/// form (4.5, 1e+30), strings quoted, other kinds by name.

/// The count `v` of field `f` (a double with an integral value is
/// accepted): an integer in [f.lo, f.hi], else a config_error naming
/// `field` with the range and the value.
std::size_t as_count(const boost::json::value& v, const count_field& f,
                     const std::string& field) {
  auto in = [&](auto x) {
    return x >= f.lo && x <= f.hi;
  };
  if (v.is_int64() && v.get_int64() >= 0
      && in(static_cast<uint64_t>(v.get_int64())))
    return static_cast<std::size_t>(v.get_int64());
  if (v.is_uint64() && in(v.get_uint64()))
    return static_cast<std::size_t>(v.get_uint64());
  if (v.is_double()) {
    auto d = v.get_double();
    // 2^64 and beyond do not fit (no_max converts to 2^64 as a double).
    if (std::isfinite(d) && d == std::floor(d) && d >= static_cast<double>(f.lo)
        && d < 0x1p64 && d <= static_cast<double>(f.hi))
      return static_cast<std::size_t>(d);
  }
  throw config_error(field,
                     count_range(f) + ", got " + json_value_for_error(v));
}

std::string as_string(const boost::json::value& v, const std::string& field) {
  if (!v.is_string())
    throw config_error(field, "must be a string");
  return std::string{v.get_string()};
}

using reader
  = std::function<void(const boost::json::value&, const std::string& field)>;

void read_object(const boost::json::value& v, const std::string& prefix,
                 const std::map<std::string, reader>& readers) {
  if (!v.is_object())
    throw config_error(prefix, "must be a JSON object");
  for (const auto& kv : v.get_object()) {
    std::string key{kv.key()};
    auto field = prefix + "." + key;
    auto it = readers.find(key);
    if (it == readers.end())
      throw config_error(field, "unknown field");
    it->second(kv.value(), field);
  }
}

reader dbl(double& x) {
  return [&x](const boost::json::value& v, const std::string& f) {
    x = as_double(v, f);
  };
}

reader count(group_state_config& t, const count_field& c) {
  return [&t, &c](const boost::json::value& v, const std::string& f) {
    t.*c.member = as_count(v, c, f);
  };
}

reader str(std::string& x) {
  return [&x](const boost::json::value& v, const std::string& f) {
    x = as_string(v, f);
  };
}

reader tls_reader(tls_config& t) {
  return [&t](const boost::json::value& v, const std::string& f) {
    read_object(v, f,
                {{"ca_file", str(t.ca_file)},
                 {"client_cert_file", str(t.client_cert_file)},
                 {"client_key_file", str(t.client_key_file)}});
  };
}

coordinator_kind kind_of(const std::string& s, const std::string& field) {
  if (s == "etcd")
    return coordinator_kind::etcd;
  if (s == "memory")
    return coordinator_kind::memory;
  throw config_error(field, "must be \"etcd\" or \"memory\"");
}

// -- environment --------------------------------------------------------------

const char* env(const char* name) {
  return std::getenv(name);
}

double env_seconds(const char* name, const char* text) {
  std::string_view s{text};
  double x = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
  if (s.empty() || ec != std::errc{} || end != s.data() + s.size()
      || !std::isfinite(x))
    throw config_error(name, "must be a number of seconds, got \""
                               + std::string{s} + "\"");
  return x;
}

/// The value of a variable as an error text shows it: a number as it is,
/// anything else quoted.
std::string shown_env(std::string_view s) {
  double x = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
  if (!s.empty() && ec == std::errc{} && end == s.data() + s.size())
    return std::string{s};
  return quote_for_error(s);
}

/// The count in variable `f.variable` (`text`): a decimal integer, else a
/// config_error naming the variable. Its range [f.lo, f.hi] is checked
/// with the rest of the configuration (group_env::validate), once a flag
/// had the chance to replace it.
std::size_t env_count(const count_field& f, const char* text) {
  std::string_view s{text};
  std::size_t x = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
  if (s.empty() || ec != std::errc{} || end != s.data() + s.size())
    throw config_error(f.variable, count_range(f) + ", got " + shown_env(s));
  return x;
}

} // namespace

void group_config::validate() const {
  if (name.empty())
    throw config_error("group.name", "is required");
  if (!all_of_len(name, 64, is_lower_name_char))
    throw config_error("group.name",
                       "must be 1 to 64 characters of [a-z0-9._-]");
  if (member_name.empty())
    throw config_error("group.member_name", "is required");
  if (!all_of_len(member_name, 128, is_member_name_char))
    throw config_error("group.member_name",
                       "must be 1 to 128 characters of [A-Za-z0-9._:-]");
  // The decision core names its fields group.* already.
  if (auto e = group_config_error(timing))
    throw *e;
  const auto& c = coordinator;
  if (c.kind != coordinator_kind::etcd && c.kind != coordinator_kind::memory)
    throw config_error("group.coordinator.kind", "must be etcd or memory");
  if (c.prefix.empty() || c.prefix.front() != '/' || c.prefix.back() != '/')
    throw config_error("group.coordinator.prefix",
                       "must start and end with '/'");
  for (char ch : c.prefix)
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f)
      throw config_error("group.coordinator.prefix",
                         "must not contain control characters");
  if (c.kind != coordinator_kind::etcd)
    return;
  // etcd's JSON gateway lives at /v3/* of the endpoint: a path would be
  // silently dropped or doubled, so refuse it.
  if (c.endpoint.empty())
    throw config_error("group.coordinator.endpoint", "must not be empty");
  auto url = url_parts::parse(c.endpoint, "group.coordinator.endpoint");
  if (!url.path.empty())
    throw config_error("group.coordinator.endpoint",
                       "must have no path (the gateway is at /v3/*)");
  // The store's client talks to the endpoint: check its other settings
  // against it, naming them where they are in this config.
  auto client = c.client;
  client.base_url = c.endpoint;
  try {
    client.validate();
  } catch (const config_error& e) {
    std::string why = e.what();
    auto colon = why.find(": ");
    if (colon != std::string::npos)
      why = why.substr(colon + 2);
    throw config_error(e.field() == "base_url"
                         ? std::string{"group.coordinator.endpoint"}
                         : "group.coordinator.client." + e.field(),
                       why);
  }
}

group_config parse_group_config(std::string_view json_text, group_names names) {
  json_limits limits;
  limits.reject_duplicate_keys = true;
  auto parsed = parse_json(json_text, limits);
  if (parsed.error == json_parse_error::duplicate_key)
    throw config_error("group." + parsed.field, "key appears more than once");
  if ((parsed.error == json_parse_error::number_out_of_range
       || parsed.error == json_parse_error::inexact_integer)
      && !parsed.field.empty()) {
    auto why = parsed.detail.substr(0, parsed.detail.rfind(" at "));
    for (const auto& f : count_fields)
      if (parsed.field == f.key)
        throw config_error("group." + parsed.field,
                           count_range(f) + " (" + why + ")");
    throw config_error("group." + parsed.field, why);
  }
  if (!parsed)
    throw config_error("group", "not valid JSON: " + parsed.detail);
  group_config c;
  auto& t = c.timing;
  auto& k = c.coordinator;
  read_object(
    parsed.value, "group",
    {{"name", str(c.name)},
     {"member_name", str(c.member_name)},
     {"lease_ttl", dbl(t.lease_ttl)},
     {"renew_interval", dbl(t.renew_interval)},
     {"fence_margin", dbl(t.fence_margin)},
     {"poll_interval", dbl(t.poll_interval)},
     {"reconcile_interval", dbl(t.reconcile_interval)},
     {"checkpoint_interval", dbl(t.checkpoint_interval)},
     {"batch", count(t, count_fields[0])},
     {"initial_settle", dbl(t.initial_settle)},
     {"min_members", count(t, count_fields[1])},
     {"rebalance_delay", dbl(t.rebalance_delay)},
     {"max_starts_per_second", count(t, count_fields[2])},
     {"max_feeds", count(t, count_fields[3])},
     {"max_inflight_batches", count(t, count_fields[4])},
     {"coordinator", [&k](const boost::json::value& x, const std::string& f) {
        read_object(
          x, f,
          {{"kind",
            [&k](const boost::json::value& y, const std::string& g) {
              k.kind = kind_of(as_string(y, g), g);
            }},
           {"endpoint", str(k.endpoint)},
           {"prefix", str(k.prefix)},
           {"client", [&k](const boost::json::value& y, const std::string& g) {
              read_object(y, g, {{"tls", tls_reader(k.client.tls)}});
            }}});
      }}});
  if (names == group_names::required) {
    c.validate();
    return c;
  }
  // Absent names are another source's to give: check the rest with
  // stand-ins (present names are checked as they are).
  auto check = c;
  if (check.name.empty())
    check.name = "absent";
  if (check.member_name.empty())
    check.member_name = "absent";
  check.validate();
  return c;
}

group_config load_group_config(const std::string& path, group_names names) {
  // A directory opens as a stream on Linux and fails only on reading,
  // with a text that does not say why.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw config_file_error(path, config_error("group", "is a directory"));
  errno = 0;
  std::ifstream in{path, std::ios::binary};
  if (!in) {
    auto why = errno != 0 ? std::string{std::strerror(errno)} : "cannot open";
    throw config_file_error(path, config_error("group", "cannot read: " + why));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad())
    throw config_file_error(path, config_error("group", "cannot read"));
  try {
    return parse_group_config(text.str(), names);
  } catch (const config_error& e) {
    throw config_file_error(path, e);
  }
}

void validate_group_feed_ids(const std::vector<std::string>& ids) {
  std::set<std::string_view> seen;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const auto& id = ids[i];
    auto field = "feeds[" + std::to_string(i) + "].id";
    if (id.empty())
      throw config_error(field, "must not be empty");
    if (id.size() > max_feed_id_bytes)
      throw config_error(field, "must be at most "
                                  + std::to_string(max_feed_id_bytes)
                                  + " bytes, got " + quote_for_error(id));
    for (std::size_t k = 0; k < id.size();) {
      auto c = static_cast<unsigned char>(id[k]);
      auto n = utf8_sequence_length(id, k);
      if (n == 0)
        throw config_error(field, "must be UTF-8, got " + quote_for_error(id));
      if (c < 0x20 || c == 0x7F || is_c1_control(id, k))
        throw config_error(field, "must not contain control characters, got "
                                    + quote_for_error(id));
      k += n;
    }
    if (!seen.insert(id).second)
      throw config_error(field, "duplicate feed id " + quote_for_error(id));
  }
}

group_env read_group_env(group_config base) {
  group_env out;
  auto& t = base.timing;
  auto& k = base.coordinator;
  // The fields set here, by their validate() names: an error on one of
  // them names its variable and shows the value, wherever the check is.
  auto& from_env = out.fields;
  auto text = [&](const char* name, const char* field) -> const char* {
    auto v = env(name);
    if (v)
      from_env[field] = {name, v};
    return v;
  };
  const std::tuple<const char*, const char*, std::string*> names[] = {
    {"OUTBOUND_GROUP_NAME", "group.name", &base.name},
    {"OUTBOUND_GROUP_MEMBER_NAME", "group.member_name", &base.member_name},
  };
  for (const auto& [name, field, x] : names)
    if (auto v = text(name, field))
      *x = v;
  const std::tuple<const char*, const char*, double*> seconds[] = {
    {"OUTBOUND_GROUP_LEASE_TTL", "group.lease_ttl", &t.lease_ttl},
    {"OUTBOUND_GROUP_RENEW_INTERVAL", "group.renew_interval",
     &t.renew_interval},
    {"OUTBOUND_GROUP_FENCE_MARGIN", "group.fence_margin", &t.fence_margin},
    {"OUTBOUND_GROUP_POLL_INTERVAL", "group.poll_interval", &t.poll_interval},
    {"OUTBOUND_GROUP_RECONCILE_INTERVAL", "group.reconcile_interval",
     &t.reconcile_interval},
    {"OUTBOUND_GROUP_CHECKPOINT_INTERVAL", "group.checkpoint_interval",
     &t.checkpoint_interval},
    {"OUTBOUND_GROUP_INITIAL_SETTLE", "group.initial_settle",
     &t.initial_settle},
    {"OUTBOUND_GROUP_REBALANCE_DELAY", "group.rebalance_delay",
     &t.rebalance_delay},
  };
  for (const auto& [name, field, x] : seconds)
    if (auto v = text(name, field))
      *x = env_seconds(name, v);
  for (const auto& f : count_fields)
    if (auto v = text(f.variable, f.field))
      t.*f.member = env_count(f, v);
  if (auto v = text("OUTBOUND_GROUP_COORDINATOR", "group.coordinator.kind"))
    k.kind = kind_of(v, "OUTBOUND_GROUP_COORDINATOR");
  const std::tuple<const char*, const char*, std::string*> store[] = {
    {"OUTBOUND_GROUP_ENDPOINT", "group.coordinator.endpoint", &k.endpoint},
    {"OUTBOUND_GROUP_PREFIX", "group.coordinator.prefix", &k.prefix},
    {"OUTBOUND_GROUP_CA_FILE", "group.coordinator.client.tls.ca_file",
     &k.client.tls.ca_file},
    {"OUTBOUND_GROUP_CLIENT_CERT",
     "group.coordinator.client.tls.client_cert_file",
     &k.client.tls.client_cert_file},
    {"OUTBOUND_GROUP_CLIENT_KEY",
     "group.coordinator.client.tls.client_key_file",
     &k.client.tls.client_key_file},
  };
  for (const auto& [name, field, x] : store)
    if (auto v = text(name, field))
      *x = v;
  out.config = std::move(base);
  return out;
}

void group_env::validate(const group_config& c) const {
  try {
    c.validate();
  } catch (const config_error& e) {
    auto i = fields.find(e.field());
    if (i == fields.end())
      throw;
    std::string why = e.what();
    why = why.substr(std::min(why.size(), e.field().size() + 2));
    // A count states its range as the JSON reader does.
    for (const auto& f : count_fields)
      if (e.field() == f.field)
        why = count_range(f);
    throw config_error(i->second.first,
                       why + ", got " + shown_env(i->second.second));
  }
}

group_config group_config_from_env(group_config base) {
  auto e = read_group_env(std::move(base));
  e.validate(e.config);
  return std::move(e.config);
}

client_config store_client_config(const group_config& g) {
  client_config c = g.coordinator.client;
  c.base_url = g.coordinator.endpoint;
  const client_config defaults;
  if (c.timeout == defaults.timeout)
    c.timeout = std::min(1.0, g.timing.renew_interval);
  if (c.deadline == defaults.deadline)
    c.deadline = g.timing.renew_interval;
  return c;
}

} // namespace config
} // namespace outbound
