#pragma once

// The checker of the feed-group fault tests: reads the delivery lines of
// `outbound group-member` processes (one JSON object per line,
// {"type":"event","t":<CLOCK_MONOTONIC ns>,"feed","token","id","subject"})
// and the list of published (feed, id) pairs, and counts what the group's
// invariants forbid (README.md, "Spreading feeds over processes: feed
// groups"):
//
//   lost        published pairs nobody delivered (must be 0);
//   reordered   deliveries whose id does not exceed the previous one of the
//               same (process, feed, token): one tenure (must be 0);
//   duplicates  deliveries minus distinct (feed, id);
//   overlap     per feed, deliveries under token T timestamped after the
//               first delivery under any newer token T' > T (tokens are the
//               owner key's create_revision, increasing per feed): two
//               owners live at once. 0, except one in-flight delivery per
//               feed when the old owner was paused;
//   regressions per feed, tenures (by increasing token) whose first id is
//               below the previous tenure's first id: a committed cursor
//               went back (must be 0);
//   takeover    per feed, the first delivery under a token newer than every
//               token delivered before a fault time, minus the fault time.
//
// All processes of one machine share CLOCK_MONOTONIC (std::chrono::
// steady_clock in libstdc++), so `t` of several members and the test's own
// fault times compare exactly. Half lines (a SIGKILLed member) and other
// line types are skipped. Header-only.

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace outbound::testing {

/// One delivery line of one member process.
struct delivery_line {
  /// The process that printed it (a member name plus its restart number,
  /// chosen by the test: "m1", "m1#2").
  std::string process;
  /// CLOCK_MONOTONIC nanoseconds when the callback ran.
  int64_t t = 0;
  std::string feed;
  uint64_t token = 0;
  int64_t id = 0;
};

/// A published event: its feed id and hub id.
struct published_event {
  std::string feed;
  int64_t id = 0;
};

/// The delivery lines of `out` (a member's standard output), in order.
inline std::vector<delivery_line> parse_deliveries(const std::string& out,
                                                   const std::string& process) {
  std::vector<delivery_line> ds;
  std::istringstream in{out};
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty())
      continue;
    boost::system::error_code ec;
    auto v = boost::json::parse(line, ec);
    if (ec || !v.is_object())
      continue;
    const auto& o = v.as_object();
    auto* type = o.if_contains("type");
    if (!type || !type->is_string() || type->as_string() != "event")
      continue;
    auto* id = o.if_contains("id");
    if (!id || !id->is_int64())
      continue;
    ds.push_back({process, o.at("t").as_int64(),
                  std::string{o.at("feed").as_string()},
                  static_cast<uint64_t>(o.at("token").to_number<int64_t>()),
                  id->as_int64()});
  }
  return ds;
}

/// CLOCK_MONOTONIC now, in the unit of `delivery_line::t`.
inline int64_t mono_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
           std::chrono::steady_clock::now().time_since_epoch())
    .count();
}

/// What `check_deliveries` found.
struct delivery_report {
  std::size_t delivered = 0;
  std::size_t lost = 0;
  std::size_t reordered = 0;
  std::size_t duplicates = 0;
  std::size_t overlap = 0;
  std::size_t regressions = 0;
  /// Overlapping deliveries per feed (feeds with none are absent).
  std::map<std::string, std::size_t> overlap_by_feed;
  /// Per duplicated (feed, id): the processes that delivered it.
  std::map<std::pair<std::string, int64_t>, std::multiset<std::string>>
    duplicated;
  /// Per feed: takeover time in ns after `fault_t` (feeds that moved only).
  std::map<std::string, int64_t> takeover_ns;
  /// Human-readable findings (the first few of each kind).
  std::vector<std::string> details;

  std::string summary() const {
    std::ostringstream s;
    s << "delivered=" << delivered << " lost=" << lost
      << " reordered=" << reordered << " duplicates=" << duplicates
      << " overlap=" << overlap << " regressions=" << regressions
      << " moved=" << takeover_ns.size();
    if (!takeover_ns.empty()) {
      std::vector<int64_t> v;
      for (const auto& kv : takeover_ns)
        v.push_back(kv.second);
      std::sort(v.begin(), v.end());
      s << " takeover_ms p50=" << v[v.size() / 2] / 1000000
        << " max=" << v.back() / 1000000;
    }
    for (const auto& d : details)
      s << "\n  " << d;
    return s.str();
  }

  /// The largest overlap of one feed.
  std::size_t max_overlap_per_feed() const {
    std::size_t m = 0;
    for (const auto& kv : overlap_by_feed)
      m = std::max(m, kv.second);
    return m;
  }
};

/// Checks `ds` (every member's lines, each process's in its print order)
/// against `published`. `fault_t` (CLOCK_MONOTONIC ns) enables takeover
/// times.
inline delivery_report
check_deliveries(const std::vector<delivery_line>& ds,
                 const std::vector<published_event>& published,
                 std::optional<int64_t> fault_t = std::nullopt) {
  delivery_report r;
  r.delivered = ds.size();
  auto note = [&r](std::size_t count, const std::string& what) {
    if (count <= 5)
      r.details.push_back(what);
  };

  // lost and duplicates
  std::map<std::pair<std::string, int64_t>, std::multiset<std::string>> by;
  for (const auto& d : ds)
    by[{d.feed, d.id}].insert(d.process);
  r.duplicates = ds.size() - by.size();
  for (const auto& [key, procs] : by)
    if (procs.size() > 1)
      r.duplicated[key] = procs;
  for (const auto& p : published)
    if (!by.count({p.feed, p.id})) {
      ++r.lost;
      note(r.lost, "lost " + p.feed + " id " + std::to_string(p.id));
    }

  // reordered within (process, feed, token)
  std::map<std::tuple<std::string, std::string, uint64_t>, int64_t> last;
  for (const auto& d : ds) {
    auto key = std::make_tuple(d.process, d.feed, d.token);
    auto it = last.find(key);
    if (it != last.end() && d.id <= it->second) {
      ++r.reordered;
      note(r.reordered, "reordered " + d.process + " " + d.feed + " token "
                          + std::to_string(d.token) + ": id "
                          + std::to_string(d.id) + " after "
                          + std::to_string(it->second));
    }
    last[key] = d.id;
  }

  // Per feed and token: first time, first id.
  struct tenure {
    int64_t first_t = std::numeric_limits<int64_t>::max();
    int64_t first_id = std::numeric_limits<int64_t>::max();
  };
  std::map<std::string, std::map<uint64_t, tenure>> tenures;
  // Each feed's lines (in `ds` order): the checks below walk one feed's
  // lines, not all of them per feed (900 feeds x 10^5 lines otherwise).
  std::map<std::string, std::vector<const delivery_line*>> of_feed;
  for (const auto& d : ds) {
    of_feed[d.feed].push_back(&d);
    auto& te = tenures[d.feed][d.token];
    if (d.t < te.first_t) {
      te.first_t = d.t;
      te.first_id = d.id;
    }
  }

  // overlap: per feed, the earliest first delivery of any newer token.
  for (const auto& [feed, ts] : tenures) {
    std::map<uint64_t, int64_t> newer_first; // token -> min first_t above it
    int64_t m = std::numeric_limits<int64_t>::max();
    for (auto it = ts.rbegin(); it != ts.rend(); ++it) {
      newer_first[it->first] = m;
      m = std::min(m, it->second.first_t);
    }
    for (const auto* dp : of_feed[feed]) {
      const auto& d = *dp;
      if (d.t <= newer_first[d.token])
        continue;
      ++r.overlap;
      ++r.overlap_by_feed[feed];
      note(r.overlap, "overlap " + d.process + " " + feed + " token "
                        + std::to_string(d.token) + " id "
                        + std::to_string(d.id) + " "
                        + std::to_string((d.t - newer_first[d.token]) / 1000000)
                        + " ms after a newer token's first delivery");
    }
    // regressions: tenures by increasing token start no earlier.
    int64_t prev = std::numeric_limits<int64_t>::min();
    for (const auto& [token, te] : ts) {
      if (te.first_id < prev) {
        ++r.regressions;
        note(r.regressions, "regression " + feed + " token "
                              + std::to_string(token) + " starts at id "
                              + std::to_string(te.first_id) + " below "
                              + std::to_string(prev));
      }
      prev = std::max(prev, te.first_id);
    }
  }

  // takeover: the first delivery after fault_t under a token newer than
  // every token delivered up to fault_t.
  if (fault_t) {
    for (const auto& [feed, ts] : tenures) {
      uint64_t before = 0;
      for (const auto* d : of_feed[feed])
        if (d->t <= *fault_t)
          before = std::max(before, d->token);
      if (before == 0)
        continue;
      int64_t first = std::numeric_limits<int64_t>::max();
      for (const auto& [token, te] : ts)
        if (token > before)
          first = std::min(first, te.first_t);
      if (first != std::numeric_limits<int64_t>::max())
        r.takeover_ns[feed] = first - *fault_t;
    }
  }
  return r;
}

} // namespace outbound::testing
