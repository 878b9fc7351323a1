#pragma once

// Backend latency profiles of the reference hub: routes
// that answer after a delay drawn from a named distribution, so hedging can
// be tested and benchmarked against a real server on loopback.
//
//   GET /fast       uniform 5–15 ms                     (httpx-hedged
//   GET /slow       800 ms                               examples/app.py,
//   GET /flaky      10 % → 900 ms, else uniform 5–15 ms  of 0.5.0)
//   GET /steady     uniform 1–3 ms                       (background traffic
//                                                         and outage drills)
//   GET /lognormal  lognormal(mean, sd) with stragglers  (hedge-python's
//                                                         README benchmark)
//
// Query parameters (all optional):
//   key=K        the draw's identity (see below)       [none: arrival order]
//   seed=S       overrides the hub's profile seed      [hub seed]
//   tag=T        a label the hub counts requests by   [none]
//                (GET /admin/state "profile_tags"; 1–64 bytes of
//                [A-Za-z0-9._-]): a benchmark's or demo's backend-side
//                count of what each client sent
//   scope=S      where arrivals of `key` are counted  [none: one count
//                (1–64 bytes of [A-Za-z0-9._-]): the    per key]
//                same key under another scope starts
//                again at arrival 0 and sees the same
//                draws (see below)
//   status=N     the answer's HTTP status, 200..599    [200]
//                (a 503 after the drawn delay: a backend that fails
//                slowly, for the deadline and retry benchmarks)
//   lognormal only:
//   mean_ms=M    mean of the lognormal body, ms, > 0   [5]
//   sd_ms=D      its standard deviation, ms, >= 0      [2]
//   straggler=F  fraction of stragglers, in [0, 1]     [0.05]
//   mult=X       straggler latency = body × X, >= 1     [10]
//   straggler_ms=T  straggler latency = T ms instead of body × mult
//
// Reproducible draws. A benchmark compares configurations "with the same
// seed", but a hedge is a second request for the same call and must get an
// independent draw (otherwise hedging could never help). So a draw is a
// pure function of (seed, key, n) where n counts the arrivals of `key`
// (0 for the first request with that key, 1 for its hedge, ...). With
// key = the call's index and one scope per configuration, call i's
// primary sees the same latency in every configuration, and its hedge the
// next draw of the same stream, the same in every configuration too (the
// configurations are paired; without a scope the arrivals of one
// configuration's calls would carry over into the next one's, and no two
// configurations would see the same draws). The scope only names the
// count: it is not part of the draw.
// Requests without a key draw from (seed, "", n) where n counts the keyless
// arrivals of their scope, or all keyless arrivals without a scope.
// The per-key arrival counts are LRU-bounded, so hostile keys cannot grow
// the hub's memory.

#include <cstddef>
#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace outbound {

/// The named profiles.
enum class latency_profile_kind { fast, slow, flaky, lognormal, steady };

/// "fast", "slow", "flaky", "lognormal" or "steady".
const char* to_string(latency_profile_kind k);

/// One parsed profile request.
struct latency_profile {
  latency_profile_kind kind = latency_profile_kind::fast;
  /// lognormal: mean and standard deviation of the body, seconds.
  double mean_s = 0.005;
  double sd_s = 0.002;
  /// lognormal: fraction of requests that straggle, in [0, 1].
  double straggler_fraction = 0.05;
  /// lognormal: a straggler takes body × multiplier ...
  double straggler_multiplier = 10.0;
  /// ... or exactly this many seconds when set.
  std::optional<double> straggler_s;
  /// The draw's key (the `key` parameter); empty: none.
  std::string key;
  /// The `seed` parameter, when given.
  std::optional<uint64_t> seed;
  /// The `tag` parameter; empty: none.
  std::string tag;
  /// The `scope` parameter; empty: none.
  std::string scope;
  /// The answer's status (the `status` parameter, 200..599). [200]
  int status = 200;
};

/// Either a profile or the 400 detail.
struct latency_profile_parse {
  std::optional<latency_profile> profile;
  std::string error;
};

/// The profile served at `path`, if any ("/fast", "/slow", "/flaky",
/// "/lognormal", "/steady").
std::optional<latency_profile_kind> latency_profile_at(std::string_view path);

/// Validates the query of a profile request (parameters above; unknown
/// parameters are ignored; a bad value names the parameter).
latency_profile_parse
parse_latency_profile(latency_profile_kind kind,
                      const std::vector<std::pair<std::string, std::string>>& query);

/// The delay in seconds of draw `n` of `key` under `seed`: a pure function.
double latency_profile_delay(const latency_profile& p, uint64_t seed,
                             std::string_view key, uint64_t n);

/// Counts arrivals per (scope, key); keeps at most `max_keys` such pairs
/// (least recently used evicted: a pair seen again after eviction starts
/// over at 0).
class arrival_counter {
public:
  /// `max_keys` >= 1. [65536]
  explicit arrival_counter(std::size_t max_keys = 65536);

  /// The arrival number of this request of `key` in `scope` (0, 1, 2,
  /// ...); for the empty key, the count of keyless arrivals in `scope`
  /// (without a scope: the global count, never evicted).
  uint64_t next(const std::string& key, const std::string& scope = {});

  /// Keys remembered now.
  std::size_t size() const {
    return map_.size();
  }

private:
  using lru_list = std::list<std::pair<std::string, uint64_t>>;
  std::size_t max_keys_;
  uint64_t keyless_ = 0;
  lru_list lru_;
  std::unordered_map<std::string, lru_list::iterator> map_;
};

} // namespace outbound
