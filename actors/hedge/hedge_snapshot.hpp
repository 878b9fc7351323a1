#pragma once

// Snapshots of the learned hedge delays: the per-key latency sketches of an
// endpoint_stats_state as a versioned JSON document, so that a restarted
// process hedges with learned delays from its first request instead of
// spending each key's warm-up requests on the fixed warmup_delay.
//
// The format (version 1), one object:
//
//     {"version": 1,
//      "keys": [
//        {"key": "endpoint:users",
//         "sketch": {"alpha": 0.01, "min_indexable": 1e-9,
//                    "count": 1000, "zero_count": 0,
//                    "min": 0.03, "max": 0.3,
//                    "bins": [[-175, 950], [-60, 50]]}}]}
//
// A sketch is a DDSketch (Masson, Rim, Lee, PVLDB 12(12), 2019) in its
// sparse form, as DataDog's sketches-java/sketches-go serialise theirs:
// the relative accuracy `alpha` and the smallest indexable value
// `min_indexable` fix the mapping (bin i holds the values x with
// γ^(i−1) < x <= γ^i, γ = (1+α)/(1−α)); `bins` lists the non-empty bins as
// [index, count] in ascending index order; `zero_count` counts the values
// below min_indexable; `count` is zero_count plus every bin's count; `min`
// and `max` are the exact extremes. Values are seconds.
//
// Pure: no CAF, no clock. Parsing checks the shape (types, signs) and
// throws config_error naming the field ("keys[2].sketch.bins[5][1]");
// endpoint_stats_state::import_snapshot checks the content against the
// importing state (version, alpha, index bounds, bin and key limits).

#include "actors/hedge/ddsketch.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace outbound {
inline namespace hedge {

/// The only snapshot version this build reads and writes.
constexpr int64_t hedge_snapshot_version = 1;

/// Largest latency a snapshot bin may stand for, in seconds (about 11.6
/// days; an index above the bin of this value is rejected as absurd).
constexpr double hedge_snapshot_max_seconds = 1e6;

/// Largest sample count of one snapshot sketch (a sum that cannot overflow;
/// far above what two 30 s windows hold). [1e15]
constexpr uint64_t hedge_snapshot_max_count = 1'000'000'000'000'000ULL;

/// Longest key in a snapshot, in bytes. [1024]
constexpr std::size_t hedge_snapshot_max_key_bytes = 1024;

/// Largest snapshot file read_hedge_snapshot_file accepts, in bytes. [64 MiB]
constexpr std::size_t hedge_snapshot_max_file_bytes = 64u << 20;

/// One key's latency sketch (see the format above).
struct hedge_sketch_data {
  /// Relative accuracy; must equal the importing sketch's. [0.01]
  double alpha = ddsketch::default_alpha;
  /// Smallest indexable value in seconds; must equal the importer's. [1e-9]
  double min_indexable = ddsketch::default_min_indexable;
  /// Samples in all: zero_count plus every bin's count (>= 1 to import).
  uint64_t count = 0;
  /// Samples below min_indexable.
  uint64_t zero_count = 0;
  /// Exact smallest and largest sample, seconds (0 <= min <= max).
  double min = 0.0;
  double max = 0.0;
  /// Non-empty bins as (index, count), strictly ascending index, count >= 1.
  std::vector<std::pair<int64_t, uint64_t>> bins;
};

/// One key of a snapshot: "endpoint:<name>" or "host:<host>:<port>".
struct hedge_snapshot_entry {
  std::string key;
  hedge_sketch_data sketch;
};

/// A snapshot of every key's latency sketch (the reply to
/// hedge_snapshot_export_request, the content of hedge_snapshot_import).
struct hedge_snapshot {
  int64_t version = hedge_snapshot_version;
  std::vector<hedge_snapshot_entry> keys;
};

/// The sparse form of `s`.
hedge_sketch_data to_sketch_data(const ddsketch& s);

/// A sketch like `like` (its alpha, bin limit, min_indexable) holding the
/// samples of `d`, after checking `d` against it. Throws config_error
/// naming `<field>.alpha`, `<field>.min_indexable`, `<field>.count`,
/// `<field>.min`/`max` (also outside the lowest/highest bucket), `.bins`
/// (too many) or `.bins[i]` (index out of bounds, not ascending, count 0).
ddsketch to_ddsketch(const hedge_sketch_data& d, const ddsketch& like,
                     const std::string& field);

/// `s` as JSON text (the format above; doubles round-trip exactly).
std::string to_json(const hedge_snapshot& s);

/// Parses the JSON text of a snapshot. Checks its shape only (an object,
/// `version` an integer, `keys` an array of objects with a string `key` and
/// a `sketch` object of the right types, counts and indexes integers,
/// counts >= 0); throws config_error naming the field (`snapshot` when the
/// text is not JSON at all, else e.g. `keys[0].sketch.bins[3][1]`).
hedge_snapshot parse_hedge_snapshot(std::string_view text);

/// Reads and parses the snapshot file `path`: nullopt when it does not
/// exist. Throws config_error with field `hedging.snapshot_file` and a
/// message naming the file and the bad field when it cannot be read, is
/// larger than hedge_snapshot_max_file_bytes or does not parse.
std::optional<hedge_snapshot> read_hedge_snapshot_file(const std::string& path);

/// Writes `s` to `path` atomically (a sibling temporary file of this
/// call's own, flushed to disk, then renamed): a reader sees the old file
/// or the new one, never half of it, also when several writers save to
/// one path at once (the last rename wins).
/// Throws config_error with field `hedging.snapshot_file` naming the file
/// when it cannot be written.
void write_hedge_snapshot_file(const hedge_snapshot& s,
                               const std::string& path);

} // namespace hedge
} // namespace outbound
