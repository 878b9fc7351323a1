#include "hub/oracle_state.hpp"

#include "config/config_error.hpp"
#include "hub/hub_wire.hpp"
#include "protocol/json_parse.hpp"

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace outbound {

namespace json = boost::json;

namespace {

// An error body with the pre-commit marker (see the header comment): the
// oracle proves this request committed nothing.
std::string precommit_error_body(std::string_view detail) {
  json::object o;
  o["detail"] = detail;
  o["committed"] = false;
  return json::serialize(o);
}

} // namespace

// -- config ------------------------------------------------------------------------

void oracle_config::validate() const {
  if (nodes < 1 || nodes > 16)
    throw config_error("oracle.nodes", "must be in [1, 16]");
  if (max_seq_keys < 1)
    throw config_error("oracle.max_seq_keys", "must be >= 1");
  if (max_seq_key_bytes < 1 || max_seq_key_bytes > 4096)
    throw config_error("oracle.max_seq_key_bytes", "must be in [1, 4096]");
  if (max_seq_count < 1)
    throw config_error("oracle.max_seq_count", "must be >= 1");
  if (!(stall_seconds > 0.0) || !std::isfinite(stall_seconds))
    throw config_error("oracle.stall_seconds", "must be > 0");
}

const char* to_string(oracle_node_mode m) {
  switch (m) {
    case oracle_node_mode::normal:
      return "normal";
    case oracle_node_mode::refuse:
      return "refuse";
    case oracle_node_mode::stall:
      return "stall";
    case oracle_node_mode::commit_no_reply:
      return "commit_no_reply";
  }
  return "normal";
}

std::optional<oracle_node_mode> parse_oracle_node_mode(std::string_view name) {
  for (auto m : {oracle_node_mode::normal, oracle_node_mode::refuse,
                 oracle_node_mode::stall, oracle_node_mode::commit_no_reply})
    if (name == to_string(m))
      return m;
  return std::nullopt;
}

// -- allocators --------------------------------------------------------------------

std::optional<ts_grant> timestamp_allocator::allocate(uint32_t count,
                                                      uint64_t now_ms) {
  count = std::clamp<uint32_t>(count, 1, oracle_max_ts_count);
  // Never behind the last grant, whatever the wall clock says.
  uint64_t physical = std::max(now_ms, physical_);
  uint64_t logical = physical == physical_ ? next_logical_ : 0;
  if (logical + count > oracle_max_ts_count) {
    // The rest of this millisecond cannot hold the batch: the next one.
    physical = physical_ + 1;
    logical = 0;
  }
  if (physical > oracle_physical_max)
    return std::nullopt;
  physical_ = physical;
  next_logical_ = static_cast<uint32_t>(logical + count);
  return ts_grant{physical, static_cast<uint32_t>(logical), count};
}

sequence_allocator::result sequence_allocator::allocate(const std::string& key,
                                                        uint32_t count) {
  auto i = next_.find(key);
  if (i == next_.end()) {
    if (next_.size() >= max_keys_)
      return {std::nullopt, seq_error::too_many_keys};
    i = next_.emplace(key, 0).first;
  }
  auto start = i->second;
  if (start > std::numeric_limits<uint64_t>::max() - count)
    return {std::nullopt, seq_error::exhausted};
  i->second = start + count;
  return {start, seq_error::none};
}

uint64_t sequence_allocator::peek(const std::string& key) const {
  auto i = next_.find(key);
  return i == next_.end() ? 0 : i->second;
}

// -- codecs ------------------------------------------------------------------------

namespace {

/// An integer in [lo, hi] from a JSON value (no fractions, no strings).
std::optional<uint64_t> integer_in(const json::value& v, uint64_t lo,
                                   uint64_t hi) {
  uint64_t n;
  if (v.is_uint64())
    n = v.get_uint64();
  else if (v.is_int64() && v.get_int64() >= 0)
    n = static_cast<uint64_t>(v.get_int64());
  else
    return std::nullopt;
  if (n < lo || n > hi)
    return std::nullopt;
  return n;
}

} // namespace

ts_request_parse parse_ts_request(std::string_view body) {
  ts_request_parse out;
  auto parsed = parse_json(body);
  auto& v = parsed.value;
  if (!parsed || !v.is_object()) {
    out.error = "body must be a JSON object {\"count\":N}";
    return out;
  }
  auto* c = v.get_object().if_contains("count");
  auto n = c ? integer_in(*c, 1, oracle_max_ts_count) : std::nullopt;
  if (!n) {
    out.error = "'count' must be an integer in [1, "
                + std::to_string(oracle_max_ts_count) + "]";
    return out;
  }
  out.count = static_cast<uint32_t>(*n);
  return out;
}

seq_request_parse parse_seq_request(std::string_view body,
                                    std::size_t max_key_bytes,
                                    uint32_t max_count) {
  seq_request_parse out;
  auto parsed = parse_json(body);
  auto& v = parsed.value;
  if (!parsed || !v.is_object()) {
    out.error = "body must be a JSON object {\"key\":\"...\",\"count\":N}";
    return out;
  }
  const auto& o = v.get_object();
  auto* k = o.if_contains("key");
  if (!k || !k->is_string() || k->get_string().empty()
      || k->get_string().size() > max_key_bytes) {
    out.error = "'key' must be a string of 1 to "
                + std::to_string(max_key_bytes) + " bytes";
    return out;
  }
  auto* c = o.if_contains("count");
  auto n = c ? integer_in(*c, 1, max_count) : std::nullopt;
  if (!n) {
    out.error = "'count' must be an integer in [1, "
                + std::to_string(max_count) + "]";
    return out;
  }
  out.req = seq_request_parse::request{std::string{k->get_string()},
                                       static_cast<uint32_t>(*n)};
  return out;
}

std::string format_leader_hint(const std::string& host_port, uint64_t epoch) {
  return host_port + "; epoch=" + std::to_string(epoch);
}

// -- oracle_state ------------------------------------------------------------------

oracle_state::oracle_state(oracle_config cfg)
  : cfg_(std::move(cfg)), seq_(cfg_.max_seq_keys) {
  cfg_.validate();
  addresses_.resize(cfg_.nodes);
  modes_.assign(cfg_.nodes, oracle_node_mode::normal);
  counters_.resize(cfg_.nodes);
}

void oracle_state::check_node(std::size_t node) const {
  if (node >= cfg_.nodes)
    throw std::out_of_range("oracle: node " + std::to_string(node)
                            + " of a cluster of "
                            + std::to_string(cfg_.nodes));
}

void oracle_state::set_addresses(std::vector<std::string> host_ports) {
  if (host_ports.size() != cfg_.nodes)
    throw std::invalid_argument("oracle: one address per node");
  addresses_ = std::move(host_ports);
}

uint64_t oracle_state::set_leader(std::optional<std::size_t> node) {
  if (node)
    check_node(*node);
  leader_ = node;
  return ++epoch_;
}

void oracle_state::set_mode(std::size_t node, oracle_node_mode m) {
  check_node(node);
  modes_[node] = m;
}

oracle_node_mode oracle_state::mode(std::size_t node) const {
  check_node(node);
  return modes_[node];
}

const oracle_node_counters& oracle_state::counters(std::size_t node) const {
  check_node(node);
  return counters_[node];
}

std::string oracle_state::leader_hint() const {
  if (!leader_ || addresses_[*leader_].empty())
    return {};
  return format_leader_hint(addresses_[*leader_], epoch_);
}

oracle_reply oracle_state::misdirected_reply() const {
  oracle_reply r;
  r.status = 421;
  json::object o;
  o["detail"] = "not the leader";
  if (leader_ && !addresses_[*leader_].empty())
    o["leader"] = addresses_[*leader_];
  else
    o["leader"] = nullptr;
  o["epoch"] = std::to_string(epoch_);
  o["committed"] = false;
  r.body = json::serialize(o);
  r.leader_hint = leader_hint();
  return r;
}

oracle_reply oracle_state::handle(std::size_t node, oracle_op op,
                                  std::string_view body, uint64_t now_ms) {
  check_node(node);
  auto& c = counters_[node];
  ++c.requests;
  oracle_reply r;
  switch (modes_[node]) {
    case oracle_node_mode::refuse:
      ++c.refused;
      r.status = 503;
      r.body = precommit_error_body("node refuses (admin mode refuse)");
      return r;
    case oracle_node_mode::stall:
      ++c.stalled;
      r.delivery = oracle_delivery::hold;
      r.hold_seconds = cfg_.stall_seconds;
      return r;
    default:
      break;
  }
  if (leader_ != node) {
    ++c.misdirected;
    return misdirected_reply();
  }
  auto bad = [&](std::string detail) {
    ++c.bad_requests;
    r.status = 400;
    r.body = precommit_error_body(detail);
    return r;
  };
  json::object o;
  if (op == oracle_op::ts) {
    auto p = parse_ts_request(body);
    if (!p.count)
      return bad(p.error);
    auto g = ts_.allocate(*p.count, now_ms);
    if (!g) {
      r.status = 503;
      r.body = precommit_error_body("timestamp space exhausted");
      return r;
    }
    timestamps_issued_ += g->count;
    o["physical_ms"] = g->physical_ms;
    o["logical_start"] = g->logical_start;
    o["count"] = g->count;
  } else {
    if (!cfg_.seq_supported) {
      ++c.unsupported;
      r.status = 501;
      r.body = precommit_error_body(
        "dense sequences are not supported by this oracle");
      return r;
    }
    auto p = parse_seq_request(body, cfg_.max_seq_key_bytes,
                               cfg_.max_seq_count);
    if (!p.req)
      return bad(p.error);
    auto a = seq_.allocate(p.req->key, p.req->count);
    if (a.error == seq_error::too_many_keys)
      return bad("'key' is new and the oracle holds its maximum of "
                 + std::to_string(cfg_.max_seq_keys) + " keys");
    if (a.error == seq_error::exhausted)
      return bad("'count' would pass the end of the sequence of this key");
    seq_issued_ += p.req->count;
    o["start"] = *a.start;
    o["count"] = p.req->count;
  }
  o["epoch"] = std::to_string(epoch_);
  ++c.commits;
  r.committed = true;
  if (modes_[node] == oracle_node_mode::commit_no_reply) {
    ++c.unanswered_commits;
    r.delivery = oracle_delivery::close_silently;
    return r;
  }
  ++c.answered;
  r.body = json::serialize(o);
  return r;
}

std::optional<std::string> oracle_state::apply_admin(std::string_view body) {
  auto parsed = parse_json(body);
  auto& v = parsed.value;
  if (!parsed || !v.is_object())
    return std::string{"body must be a JSON object"};
  const auto& o = v.get_object();
  auto node_range = "an integer in [0, " + std::to_string(cfg_.nodes - 1)
                    + "]";
  for (const auto& kv : o)
    if (kv.key() != "leader" && kv.key() != "node" && kv.key() != "mode"
        && kv.key() != "stall_seconds")
      return "unknown key '" + std::string{kv.key()} + "'";
  // Validate everything first: a bad body changes nothing.
  bool move = false;
  std::optional<std::size_t> leader;
  if (auto* l = o.if_contains("leader")) {
    move = true;
    if (!l->is_null()) {
      auto n = integer_in(*l, 0, cfg_.nodes - 1);
      if (!n)
        return "'leader' must be null or " + node_range;
      leader = static_cast<std::size_t>(*n);
    }
  }
  std::optional<std::size_t> node;
  if (auto* n = o.if_contains("node")) {
    auto i = integer_in(*n, 0, cfg_.nodes - 1);
    if (!i)
      return "'node' must be " + node_range;
    node = static_cast<std::size_t>(*i);
  }
  std::optional<oracle_node_mode> mode;
  if (auto* m = o.if_contains("mode")) {
    if (m->is_string())
      mode = parse_oracle_node_mode(m->get_string());
    if (!mode)
      return std::string{"'mode' must be \"normal\", \"refuse\", \"stall\" "
                         "or \"commit_no_reply\""};
  }
  if (node && !mode)
    return std::string{"'node' needs a 'mode'"};
  std::optional<double> stall;
  if (auto* s = o.if_contains("stall_seconds")) {
    if (s->is_number()) {
      auto d = s->to_number<double>();
      if (d > 0.0 && std::isfinite(d))
        stall = d;
    }
    if (!stall)
      return std::string{"'stall_seconds' must be a number > 0"};
  }
  if (move)
    set_leader(leader);
  if (mode) {
    if (node)
      modes_[*node] = *mode;
    else
      std::fill(modes_.begin(), modes_.end(), *mode);
  }
  if (stall)
    cfg_.stall_seconds = *stall;
  return std::nullopt;
}

json::object oracle_state::state_json() const {
  json::object o;
  if (leader_) {
    o["leader"] = *leader_;
    o["leader_address"] = addresses_[*leader_];
  } else {
    o["leader"] = nullptr;
    o["leader_address"] = nullptr;
  }
  o["epoch"] = std::to_string(epoch_);
  o["stall_seconds"] = cfg_.stall_seconds;
  o["timestamps_issued"] = timestamps_issued_;
  o["last_physical_ms"] = ts_.last_physical_ms();
  o["seq_keys"] = seq_.keys();
  o["seq_issued"] = seq_issued_;
  uint64_t commits = 0;
  uint64_t misdirected = 0;
  json::array nodes;
  for (std::size_t i = 0; i < cfg_.nodes; ++i) {
    const auto& c = counters_[i];
    commits += c.commits;
    misdirected += c.misdirected;
    json::object n;
    n["address"] = addresses_[i];
    n["mode"] = to_string(modes_[i]);
    n["role"] = leader_ == i ? "leader" : "follower";
    n["requests"] = c.requests;
    n["answered"] = c.answered;
    n["misdirected"] = c.misdirected;
    n["refused"] = c.refused;
    n["stalled"] = c.stalled;
    n["unanswered_commits"] = c.unanswered_commits;
    n["bad_requests"] = c.bad_requests;
    n["unsupported"] = c.unsupported;
    n["commits"] = c.commits;
    nodes.push_back(std::move(n));
  }
  o["commits"] = commits;
  o["misdirected"] = misdirected;
  o["nodes"] = std::move(nodes);
  return o;
}

} // namespace outbound
