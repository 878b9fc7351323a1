#include "actors/coalesce/batcher.hpp"

#include "actors/coalesce/detail/batcher_impl.hpp"

#include "core/text.hpp"
#include "core/time.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>

namespace outbound {
inline namespace coalesce {

coalesce_duration coalesce_seconds(double s) {
  // Capped at 1e9 s, far beyond any sane setting, instead of overflowing
  // int64 once added to a time point.
  return core::from_seconds(s, core::from_seconds(1e9));
}

std::vector<uint64_t> ts_range::expand() const {
  std::vector<uint64_t> r;
  r.reserve(count);
  for (uint32_t i = 0; i < count; ++i)
    r.push_back(ts_pack(physical_ms, logical_start + i));
  return r;
}

const char* to_string(waiter_kind k) {
  return k == waiter_kind::ts ? "ts" : "seq";
}

const char* to_string(join_decision d) {
  switch (d) {
    case join_decision::queued: return "queued";
    case join_decision::rejected_backpressure: return "rejected_backpressure";
    case join_decision::rejected_invalid_count: return "rejected_invalid_count";
    case join_decision::rejected_invalid_key: return "rejected_invalid_key";
  }
  return "?";
}

const char* to_string(waiter_outcome o) {
  switch (o) {
    case waiter_outcome::served: return "served";
    case waiter_outcome::protocol_violation: return "protocol_violation";
    case waiter_outcome::rpc_failed: return "rpc_failed";
    case waiter_outcome::uncertain: return "uncertain";
    case waiter_outcome::not_attempted: return "not_attempted";
  }
  return "?";
}

const char* to_string(cancel_result r) {
  switch (r) {
    case cancel_result::not_found: return "not_found";
    case cancel_result::removed: return "removed";
    case cancel_result::abandoned_in_flight: return "abandoned_in_flight";
    case cancel_result::rpc_cancelled: return "rpc_cancelled";
  }
  return "?";
}

std::string check_ts_response(const ts_response& r, uint32_t requested) {
  if (!r.unreadable.empty())
    return "protocol violation: " + r.unreadable;
  if (r.count != requested)
    return "protocol violation: count " + std::to_string(r.count)
           + " != requested " + std::to_string(requested);
  if (r.count < 1 || r.count > ts_max_per_rpc)
    return "protocol violation: count " + std::to_string(r.count)
           + " outside 1..262144";
  if (r.physical_ms > ts_physical_max)
    return "protocol violation: physical_ms over 46 bits";
  // 64-bit sum: logical_start and count are 32-bit, no overflow here.
  if (uint64_t{r.logical_start} + r.count - 1 > ts_logical_max)
    return "protocol violation: logical range " + std::to_string(r.logical_start)
           + "+" + std::to_string(r.count) + " overflows 18 bits";
  return {};
}

std::string check_seq_response(const seq_response& r, uint32_t requested) {
  if (!r.unreadable.empty())
    return r.unreadable;
  if (r.count != requested)
    return "count " + std::to_string(r.count) + " != requested "
           + std::to_string(requested);
  if (r.count < 1)
    return "count 0";
  if (r.start > std::numeric_limits<uint64_t>::max() - (r.count - 1))
    return "block start + count overflows 64 bits";
  if (r.epoch.empty())
    return "no epoch";
  return {};
}

bool valid_seq_key(const std::string& key, std::size_t max_bytes) {
  if (key.empty() || key.size() > max_bytes)
    return false;
  for (std::size_t i = 0; i < key.size();) {
    auto n = utf8_sequence_length(key, i);
    if (n == 0)
      return false;
    i += n;
  }
  return true;
}

template class basic_batcher<no_payload>;

} // namespace coalesce
} // namespace outbound
