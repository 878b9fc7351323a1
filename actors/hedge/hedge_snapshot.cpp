#include "actors/hedge/hedge_snapshot.hpp"

#include "config/config_error.hpp"

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include <unistd.h>

namespace outbound {
inline namespace hedge {

namespace json = boost::json;

namespace {

std::string num(double x) {
  std::ostringstream os;
  os.precision(17);
  os << x;
  return os.str();
}

// -- shape checks (parse)
// ------------------------------------------------------

const json::value& member(const json::object& o, const char* name,
                          const std::string& field) {
  auto* v = o.if_contains(name);
  if (!v)
    throw config_error(field + name, "missing");
  return *v;
}

const json::object& as_object(const json::value& v, const std::string& field) {
  if (!v.is_object())
    throw config_error(field, "must be an object");
  return v.get_object();
}

const json::array& as_array(const json::value& v, const std::string& field) {
  if (!v.is_array())
    throw config_error(field, "must be an array");
  return v.get_array();
}

uint64_t as_count(const json::value& v, const std::string& field) {
  if (v.is_uint64())
    return v.get_uint64();
  if (v.is_int64() && v.get_int64() >= 0)
    return static_cast<uint64_t>(v.get_int64());
  throw config_error(field, "must be an integer >= 0");
}

int64_t as_index(const json::value& v, const std::string& field) {
  if (v.is_int64())
    return v.get_int64();
  if (v.is_uint64() && v.get_uint64() <= static_cast<uint64_t>(INT64_MAX))
    return static_cast<int64_t>(v.get_uint64());
  throw config_error(field, "must be an integer");
}

double as_double(const json::value& v, const std::string& field) {
  if (!v.is_number())
    throw config_error(field, "must be a number");
  return v.to_number<double>();
}

hedge_sketch_data parse_sketch(const json::object& o, const std::string& f) {
  hedge_sketch_data d;
  d.alpha = as_double(member(o, "alpha", f), f + "alpha");
  d.min_indexable
    = as_double(member(o, "min_indexable", f), f + "min_indexable");
  d.count = as_count(member(o, "count", f), f + "count");
  d.zero_count = as_count(member(o, "zero_count", f), f + "zero_count");
  d.min = as_double(member(o, "min", f), f + "min");
  d.max = as_double(member(o, "max", f), f + "max");
  const auto& bins = as_array(member(o, "bins", f), f + "bins");
  d.bins.reserve(bins.size());
  for (std::size_t i = 0; i < bins.size(); ++i) {
    auto bf = f + "bins[" + std::to_string(i) + "]";
    const auto& pair = as_array(bins[i], bf);
    if (pair.size() != 2)
      throw config_error(bf, "must be [index, count]");
    d.bins.emplace_back(as_index(pair[0], bf + "[0]"),
                        as_count(pair[1], bf + "[1]"));
  }
  return d;
}

} // namespace

hedge_sketch_data to_sketch_data(const ddsketch& s) {
  hedge_sketch_data d;
  d.alpha = s.alpha();
  d.min_indexable = s.min_indexable();
  d.count = s.count();
  d.zero_count = s.zero_count();
  d.min = s.min().value_or(0.0);
  d.max = s.max().value_or(0.0);
  for (auto& [i, c] : s.nonzero_bins())
    d.bins.emplace_back(i, c);
  return d;
}

ddsketch to_ddsketch(const hedge_sketch_data& d, const ddsketch& like,
                     const std::string& field) {
  const auto f = field + ".";
  // Exact equality: a different mapping would put every sample in the
  // wrong bin (JSON doubles round-trip exactly, so an export of the same
  // build always matches).
  if (d.alpha != like.alpha())
    throw config_error(f + "alpha", num(d.alpha)
                                      + " differs from this "
                                        "client's sketch accuracy "
                                      + num(like.alpha()));
  if (d.min_indexable != like.min_indexable())
    throw config_error(f + "min_indexable", num(d.min_indexable)
                                              + " differs from this client's "
                                              + num(like.min_indexable()));
  if (d.bins.size() > like.bin_limit())
    throw config_error(f + "bins", std::to_string(d.bins.size())
                                     + " bins, more than the limit "
                                     + std::to_string(like.bin_limit()));
  const int64_t lo = like.index_of(like.min_indexable());
  const int64_t hi = like.index_of(hedge_snapshot_max_seconds);
  std::vector<std::pair<int, uint64_t>> bins;
  bins.reserve(d.bins.size());
  uint64_t sum = d.zero_count;
  if (d.zero_count > hedge_snapshot_max_count)
    throw config_error(f + "zero_count",
                       "larger than "
                         + std::to_string(hedge_snapshot_max_count));
  for (std::size_t i = 0; i < d.bins.size(); ++i) {
    const auto bf = f + "bins[" + std::to_string(i) + "]";
    auto [index, n] = d.bins[i];
    if (index < lo || index > hi)
      throw config_error(bf, "index " + std::to_string(index) + " outside ["
                               + std::to_string(lo) + ", " + std::to_string(hi)
                               + "] (1 ns to 1e6 s at this accuracy)");
    if (i > 0 && index <= d.bins[i - 1].first)
      throw config_error(bf, "indexes must be strictly ascending");
    if (n == 0 || n > hedge_snapshot_max_count)
      throw config_error(bf, "count must be in [1, "
                               + std::to_string(hedge_snapshot_max_count)
                               + "]");
    sum += n;
    if (sum > hedge_snapshot_max_count)
      throw config_error(f + "count",
                         "the bins hold more than "
                           + std::to_string(hedge_snapshot_max_count));
    bins.emplace_back(static_cast<int>(index), n);
  }
  if (d.count == 0)
    throw config_error(f + "count", "must be >= 1 (an empty sketch)");
  if (d.count != sum)
    throw config_error(f + "count", std::to_string(d.count)
                                      + " is not zero_count plus the bins' "
                                        "counts ("
                                      + std::to_string(sum) + ")");
  if (!std::isfinite(d.min) || d.min < 0.0
      || d.min > hedge_snapshot_max_seconds)
    throw config_error(f + "min", "must be in [0, 1e6] seconds");
  if (!std::isfinite(d.max) || d.max < d.min
      || d.max > hedge_snapshot_max_seconds)
    throw config_error(f + "max", "must be in [min, 1e6] seconds");
  // min and max must lie in the lowest and highest non-empty bucket (one
  // bin of slack for rounding at a bin's edge): every quantile is clamped
  // into [min, max], so a hostile pair would move every delay.
  auto in_bucket = [&](double x, bool zero, int64_t index) {
    if (zero)
      return x < like.min_indexable();
    return x >= like.min_indexable()
           && std::abs(static_cast<int64_t>(like.index_of(x)) - index) <= 1;
  };
  const bool low_zero = d.zero_count > 0;
  const bool high_zero = d.bins.empty();
  if (!in_bucket(d.min, low_zero, low_zero ? 0 : d.bins.front().first))
    throw config_error(f + "min", num(d.min)
                                    + " is not in the lowest non-empty "
                                      "bucket");
  if (!in_bucket(d.max, high_zero, high_zero ? 0 : d.bins.back().first))
    throw config_error(f + "max", num(d.max)
                                    + " is not in the highest non-empty "
                                      "bucket");
  ddsketch out = like;
  out.assign(d.zero_count, d.min, d.max, bins);
  return out;
}

std::string to_json(const hedge_snapshot& s) {
  json::array keys;
  keys.reserve(s.keys.size());
  for (const auto& e : s.keys) {
    json::array bins;
    bins.reserve(e.sketch.bins.size());
    for (auto [i, n] : e.sketch.bins)
      bins.push_back(json::array{i, n});
    json::object sk;
    sk["alpha"] = e.sketch.alpha;
    sk["min_indexable"] = e.sketch.min_indexable;
    sk["count"] = e.sketch.count;
    sk["zero_count"] = e.sketch.zero_count;
    sk["min"] = e.sketch.min;
    sk["max"] = e.sketch.max;
    sk["bins"] = std::move(bins);
    json::object k;
    k["key"] = e.key;
    k["sketch"] = std::move(sk);
    keys.push_back(std::move(k));
  }
  json::object root;
  root["version"] = s.version;
  root["keys"] = std::move(keys);
  return json::serialize(root);
}

hedge_snapshot parse_hedge_snapshot(std::string_view text) {
  boost::system::error_code ec;
  auto v = json::parse(json::string_view{text.data(), text.size()}, ec);
  if (ec)
    throw config_error("snapshot", "not JSON: " + ec.message());
  const auto& root = as_object(v, "snapshot");
  hedge_snapshot s;
  const auto& ver = member(root, "version", "");
  if (!ver.is_int64() && !ver.is_uint64())
    throw config_error("version", "must be an integer");
  s.version = ver.is_int64() ? ver.get_int64() : INT64_MAX;
  const auto& keys = as_array(member(root, "keys", ""), "keys");
  s.keys.reserve(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    auto kf = "keys[" + std::to_string(i) + "]";
    const auto& o = as_object(keys[i], kf);
    const auto& key = member(o, "key", kf + ".");
    if (!key.is_string())
      throw config_error(kf + ".key", "must be a string");
    hedge_snapshot_entry e;
    e.key = std::string{key.get_string()};
    e.sketch
      = parse_sketch(as_object(member(o, "sketch", kf + "."), kf + ".sketch"),
                     kf + ".sketch.");
    s.keys.push_back(std::move(e));
  }
  return s;
}

std::optional<hedge_snapshot>
read_hedge_snapshot_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT)
      return std::nullopt;
    throw config_error("hedging.snapshot_file",
                       path + ": cannot open: " + std::strerror(errno));
  }
  std::string text;
  char buf[65536];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    text.append(buf, static_cast<std::size_t>(in.gcount()));
    if (text.size() > hedge_snapshot_max_file_bytes)
      throw config_error("hedging.snapshot_file",
                         path + ": larger than "
                           + std::to_string(hedge_snapshot_max_file_bytes)
                           + " bytes");
  }
  if (in.bad())
    throw config_error("hedging.snapshot_file", path + ": read failed");
  try {
    return parse_hedge_snapshot(text);
  } catch (const config_error& e) {
    throw config_error("hedging.snapshot_file", path + ": " + e.what());
  }
}

void write_hedge_snapshot_file(const hedge_snapshot& s,
                               const std::string& path) {
  const auto text = to_json(s);
  // A temporary file of this writer's own (mkstemp, in the same directory
  // so that rename replaces atomically): two clients saving to one path
  // at the same stop each rename a whole file, and the last one wins. A
  // shared "<path>.tmp" interleaved their bytes.
  std::string tmp = path + ".tmp.XXXXXX";
  int fd = ::mkstemp(tmp.data());
  if (fd < 0)
    throw config_error("hedging.snapshot_file",
                       tmp + ": cannot create: " + std::strerror(errno));
  auto fail = [&](const std::string& what, int err) {
    ::close(fd);
    std::remove(tmp.c_str());
    throw config_error("hedging.snapshot_file",
                       tmp + ": " + what + ": " + std::strerror(err));
  };
  const char* p = text.data();
  std::size_t left = text.size();
  while (left > 0) {
    auto n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      fail("write failed", n < 0 ? errno : EIO);
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  // On disk before the rename, so a crash leaves the old file or the new.
  if (::fsync(fd) != 0)
    fail("write failed", errno);
  if (::close(fd) != 0) {
    auto err = errno;
    std::remove(tmp.c_str());
    throw config_error("hedging.snapshot_file",
                       tmp + ": write failed: " + std::strerror(err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    auto err = errno;
    std::remove(tmp.c_str());
    throw config_error("hedging.snapshot_file",
                       path + ": cannot replace: " + std::strerror(err));
  }
}

} // namespace hedge
} // namespace outbound
