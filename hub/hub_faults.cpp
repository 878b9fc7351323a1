#include "hub/hub_faults.hpp"

#include "hub/latency_profile.hpp"

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>
#include <utility>

namespace outbound {

namespace json = boost::json;

bool is_drop_tier(std::string_view name) {
  return name == "all" || name == "ledger" || name == "catchup"
         || name == "ephemeral";
}

bool is_outage_path(std::string_view path) {
  return path.empty() || latency_profile_at(path).has_value();
}

bool take_count(int& n) {
  if (n < 0)
    return true;
  if (n == 0)
    return false;
  --n;
  return true;
}

connection_plan take_connection_plan(hub_faults& f) {
  connection_plan p;
  p.accept_then_close = take_count(f.accept_then_close);
  p.go_silent = take_count(f.go_silent);
  p.no_hello = take_count(f.no_hello);
  if (take_count(f.oversized_frame))
    p.oversized_frame_bytes = f.oversized_frame_bytes;
  if (take_count(f.fragment_frames)) {
    p.fragment_bytes = std::max<std::size_t>(1, f.fragment_bytes);
    p.empty_continuations = f.empty_continuations;
  }
  p.non_json = take_count(f.non_json_frames);
  p.pad_to = f.pad_frames_to;
  return p;
}

json::object to_json(const hub_faults& f) {
  json::object o;
  o["drop_wakes"] = f.drop_wakes;
  o["drop_wake_probability"] = f.drop_wake_probability;
  json::array script;
  for (auto c : f.wake_script)
    script.push_back(c);
  o["wake_script"] = std::move(script);
  o["visibility_lag_polls"] = f.visibility_lag_polls;
  o["non_object_pages"] = f.non_object_pages;
  o["lose_publish_answers"] = f.lose_publish_answers;
  o["accept_then_close"] = f.accept_then_close;
  o["go_silent"] = f.go_silent;
  o["no_hello"] = f.no_hello;
  o["oversized_frame"] = f.oversized_frame;
  o["oversized_frame_bytes"] = f.oversized_frame_bytes;
  o["fragment_frames"] = f.fragment_frames;
  o["fragment_bytes"] = f.fragment_bytes;
  o["empty_continuations"] = f.empty_continuations;
  o["non_json_frames"] = f.non_json_frames;
  o["pad_frames_to"] = f.pad_frames_to;
  o["restart_every"] = f.restart_every;
  o["drop_every"] = f.drop_every;
  o["drop_tier"] = f.drop_tier;
  o["outage_path"] = f.outage_path;
  o["outage_status"] = f.outage_status;
  return o;
}

namespace {

std::optional<int64_t> as_int(const json::value& v) {
  if (v.is_int64())
    return v.get_int64();
  if (v.is_uint64() && v.get_uint64() <= static_cast<uint64_t>(
                         std::numeric_limits<int64_t>::max()))
    return static_cast<int64_t>(v.get_uint64());
  if (v.is_double()) {
    auto d = v.get_double();
    if (std::isfinite(d) && d == std::floor(d) && std::abs(d) < 9e15)
      return static_cast<int64_t>(d);
  }
  return std::nullopt;
}

std::optional<double> as_number(const json::value& v) {
  if (v.is_double())
    return v.get_double();
  if (v.is_int64())
    return static_cast<double>(v.get_int64());
  if (v.is_uint64())
    return static_cast<double>(v.get_uint64());
  return std::nullopt;
}

std::string bad(const std::string& key, const char* what) {
  return "'" + key + "' must be " + what;
}

// A count knob: integer >= -1.
std::optional<std::string> set_count(int& out, const std::string& key,
                                     const json::value& v) {
  auto n = as_int(v);
  if (!n || *n < -1 || *n > std::numeric_limits<int>::max())
    return bad(key, "an integer >= -1");
  out = static_cast<int>(*n);
  return std::nullopt;
}

template <class T>
std::optional<std::string> set_size(T& out, const std::string& key,
                                    const json::value& v, int64_t min) {
  auto n = as_int(v);
  if (!n || *n < min)
    return bad(key, min == 0 ? "an integer >= 0" : "an integer >= 1");
  out = static_cast<T>(*n);
  return std::nullopt;
}

// A period knob: a finite number of seconds >= 0.
std::optional<std::string> set_seconds(double& out, const std::string& key,
                                       const json::value& v) {
  auto d = as_number(v);
  if (!d || !(*d >= 0.0) || !std::isfinite(*d))
    return bad(key, "a number of seconds >= 0");
  out = *d;
  return std::nullopt;
}

// The count knobs (set_count): how many pages, connections or frames the
// fault hits, -1 for all.
constexpr std::pair<const char*, int hub_faults::*> count_knobs[] = {
  {"non_object_pages", &hub_faults::non_object_pages},
  {"lose_publish_answers", &hub_faults::lose_publish_answers},
  {"accept_then_close", &hub_faults::accept_then_close},
  {"go_silent", &hub_faults::go_silent},
  {"no_hello", &hub_faults::no_hello},
  {"oversized_frame", &hub_faults::oversized_frame},
  {"fragment_frames", &hub_faults::fragment_frames},
  {"non_json_frames", &hub_faults::non_json_frames},
};

std::optional<std::string> set_knob(hub_faults& f, const std::string& key,
                                    const json::value& v) {
  for (const auto& [name, member] : count_knobs)
    if (key == name)
      return set_count(f.*member, key, v);
  if (key == "drop_wakes") {
    if (!v.is_bool())
      return bad(key, "a boolean");
    f.drop_wakes = v.get_bool();
    return std::nullopt;
  }
  if (key == "drop_wake_probability") {
    auto d = as_number(v);
    if (!d || !(*d >= 0.0 && *d <= 1.0))
      return bad(key, "a number in [0, 1]");
    f.drop_wake_probability = *d;
    return std::nullopt;
  }
  if (key == "wake_script") {
    if (!v.is_array())
      return bad(key, "an array of cursors >= 0");
    std::vector<int64_t> script;
    for (const auto& c : v.get_array()) {
      auto n = as_int(c);
      if (!n || *n < 0)
        return bad(key, "an array of cursors >= 0");
      script.push_back(*n);
    }
    f.wake_script = std::move(script);
    return std::nullopt;
  }
  if (key == "visibility_lag_polls")
    return set_size(f.visibility_lag_polls, key, v, 0);
  if (key == "oversized_frame_bytes") {
    // Up to 2^63-1, the largest length a frame header can announce.
    return set_size(f.oversized_frame_bytes, key, v, 1);
  }
  if (key == "fragment_bytes")
    return set_size(f.fragment_bytes, key, v, 1);
  if (key == "empty_continuations")
    return set_size(f.empty_continuations, key, v, 0);
  if (key == "pad_frames_to") {
    // Padding builds the whole frame: a size beyond any test's need would
    // throw out of an io thread on the next frame (64 MiB is 8x the
    // watcher's default frame cap).
    constexpr int64_t max_pad = int64_t{64} * 1024 * 1024;
    if (auto n = as_int(v); n && *n > max_pad)
      return bad(key, "an integer in [0, 67108864]");
    return set_size(f.pad_frames_to, key, v, 0);
  }
  if (key == "restart_every")
    return set_seconds(f.restart_every, key, v);
  if (key == "drop_every")
    return set_seconds(f.drop_every, key, v);
  if (key == "drop_tier") {
    if (!v.is_string() || !is_drop_tier(v.get_string()))
      return bad(key, "\"ledger\", \"catchup\", \"ephemeral\" or \"all\"");
    f.drop_tier = std::string{v.get_string()};
    return std::nullopt;
  }
  if (key == "outage_path") {
    if (!v.is_string() || !is_outage_path(v.get_string()))
      return bad(key, "\"\" or a latency route (\"/fast\", \"/slow\", "
                      "\"/flaky\", \"/lognormal\", \"/steady\")");
    f.outage_path = std::string{v.get_string()};
    return std::nullopt;
  }
  if (key == "outage_status") {
    auto n = as_int(v);
    if (!n || *n < 500 || *n > 599)
      return bad(key, "an integer in [500, 599]");
    f.outage_status = static_cast<int>(*n);
    return std::nullopt;
  }
  return "unknown knob '" + key + "'";
}

} // namespace

std::optional<std::string>
apply_fault_patch(hub_faults& f, const json::object& patch,
                  const std::vector<std::string>& extra_keys) {
  auto tmp = f;
  for (const auto& kv : patch) {
    std::string key{kv.key()};
    if (std::find(extra_keys.begin(), extra_keys.end(), key)
        != extra_keys.end())
      continue;
    if (auto err = set_knob(tmp, key, kv.value()))
      return err;
  }
  f = std::move(tmp);
  return std::nullopt;
}

} // namespace outbound
