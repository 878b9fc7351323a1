#include "hub/latency_profile.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace outbound {

namespace {

// splitmix64 (Steele, Lea, Flood, "Fast splittable pseudorandom number
// generators", OOPSLA 2014): a strong 64-bit mixer, so consecutive draws of
// one key and nearby keys are independent enough for latency sampling.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// FNV-1a, to turn the key into 64 bits before mixing.
uint64_t hash_key(std::string_view key) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : key) {
    h ^= c;
    h *= 0x100000001B3ull;
  }
  return h;
}

// The i-th uniform in [0, 1) of the stream (seed, key, n).
double uniform(uint64_t base, int i) {
  auto x = mix(base + static_cast<uint64_t>(i) * 0xD1B54A32D192ED03ull);
  return static_cast<double>(x >> 11) * 0x1.0p-53;
}

std::optional<double> parse_double(const std::string& s) {
  if (s.empty())
    return std::nullopt;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || end != s.c_str() + s.size() || !std::isfinite(v))
    return std::nullopt;
  return v;
}

std::optional<uint64_t> parse_u64(const std::string& s) {
  if (s.empty() || s.size() > 20)
    return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9')
      return std::nullopt;
    auto d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10)
      return std::nullopt;
    v = v * 10 + d;
  }
  return v;
}

} // namespace

const char* to_string(latency_profile_kind k) {
  switch (k) {
    case latency_profile_kind::fast: return "fast";
    case latency_profile_kind::slow: return "slow";
    case latency_profile_kind::flaky: return "flaky";
    case latency_profile_kind::lognormal: return "lognormal";
    case latency_profile_kind::steady: return "steady";
  }
  return "unknown";
}

std::optional<latency_profile_kind> latency_profile_at(std::string_view path) {
  if (path == "/fast")
    return latency_profile_kind::fast;
  if (path == "/slow")
    return latency_profile_kind::slow;
  if (path == "/flaky")
    return latency_profile_kind::flaky;
  if (path == "/lognormal")
    return latency_profile_kind::lognormal;
  if (path == "/steady")
    return latency_profile_kind::steady;
  return std::nullopt;
}

latency_profile_parse parse_latency_profile(
  latency_profile_kind kind,
  const std::vector<std::pair<std::string, std::string>>& query) {
  latency_profile_parse out;
  latency_profile p;
  p.kind = kind;
  auto fail = [&](const std::string& name, const char* rule) {
    out.error = "'" + name + "' must be " + rule;
    return out;
  };
  for (const auto& [name, value] : query) {
    if (name == "key") {
      if (value.size() > 256)
        return fail(name, "at most 256 bytes");
      p.key = value;
    } else if (name == "seed") {
      auto v = parse_u64(value);
      if (!v)
        return fail(name, "an unsigned 64-bit integer");
      p.seed = *v;
    } else if (name == "tag" || name == "scope") {
      auto ok = !value.empty() && value.size() <= 64
                && std::all_of(value.begin(), value.end(), [](char ch) {
                     return std::isalnum(static_cast<unsigned char>(ch))
                            || ch == '.' || ch == '_' || ch == '-';
                   });
      if (!ok)
        return fail(name, "1 to 64 bytes of [A-Za-z0-9._-]");
      (name == "tag" ? p.tag : p.scope) = value;
    } else if (name == "status") {
      auto v = parse_u64(value);
      if (!v || *v < 200 || *v > 599)
        return fail(name, "an HTTP status in [200, 599]");
      p.status = static_cast<int>(*v);
    } else if (kind != latency_profile_kind::lognormal) {
      continue;
    } else if (name == "mean_ms") {
      auto v = parse_double(value);
      if (!v || *v <= 0 || *v > 600'000)
        return fail(name, "a number in (0, 600000]");
      p.mean_s = *v / 1000.0;
    } else if (name == "sd_ms") {
      auto v = parse_double(value);
      if (!v || *v < 0 || *v > 600'000)
        return fail(name, "a number in [0, 600000]");
      p.sd_s = *v / 1000.0;
    } else if (name == "straggler") {
      auto v = parse_double(value);
      if (!v || *v < 0 || *v > 1)
        return fail(name, "a number in [0, 1]");
      p.straggler_fraction = *v;
    } else if (name == "mult") {
      auto v = parse_double(value);
      if (!v || *v < 1 || *v > 1000)
        return fail(name, "a number in [1, 1000]");
      p.straggler_multiplier = *v;
    } else if (name == "straggler_ms") {
      auto v = parse_double(value);
      if (!v || *v < 0 || *v > 600'000)
        return fail(name, "a number in [0, 600000]");
      p.straggler_s = *v / 1000.0;
    }
  }
  out.profile = std::move(p);
  return out;
}

double latency_profile_delay(const latency_profile& p, uint64_t seed,
                             std::string_view key, uint64_t n) {
  auto base = mix(mix(seed) ^ hash_key(key)) ^ mix(n + 0x632BE59BD9B4E019ull);
  auto fast = [&] { return 0.005 + 0.010 * uniform(base, 0); };
  switch (p.kind) {
    case latency_profile_kind::fast:
      return fast();
    case latency_profile_kind::slow:
      return 0.8;
    case latency_profile_kind::steady: return 0.001 + 0.002 * uniform(base, 5);
    case latency_profile_kind::flaky:
      return uniform(base, 1) < 0.10 ? 0.9 : fast();
    case latency_profile_kind::lognormal: {
      // Lognormal with the given mean m and sd s of the latency itself:
      // sigma^2 = ln(1 + s^2/m^2), mu = ln(m) - sigma^2/2. Box–Muller for
      // the standard normal (1 - u keeps the log argument in (0, 1]).
      double m = p.mean_s;
      double s = p.sd_s;
      double sigma2 = std::log1p((s * s) / (m * m));
      double mu = std::log(m) - sigma2 / 2;
      double u1 = 1.0 - uniform(base, 2);
      double u2 = uniform(base, 3);
      double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
      double body = std::exp(mu + std::sqrt(sigma2) * z);
      if (uniform(base, 4) < p.straggler_fraction)
        return p.straggler_s ? *p.straggler_s : body * p.straggler_multiplier;
      return body;
    }
  }
  return 0.0;
}

arrival_counter::arrival_counter(std::size_t max_keys)
  : max_keys_(max_keys < 1 ? 1 : max_keys) {
}

uint64_t arrival_counter::next(const std::string& key,
                               const std::string& scope) {
  if (key.empty() && scope.empty())
    return keyless_++;
  // One name per (scope, key): the scope's length, ':', the scope, the key
  // (unambiguous for any bytes). A scope's keyless count is its pair with
  // the empty key, evicted like any other.
  auto name = std::to_string(scope.size());
  name.reserve(name.size() + 1 + scope.size() + key.size());
  name.append(1, ':').append(scope).append(key);
  auto i = map_.find(name);
  if (i != map_.end()) {
    lru_.splice(lru_.begin(), lru_, i->second);
    return i->second->second++;
  }
  if (map_.size() >= max_keys_) {
    map_.erase(lru_.back().first);
    lru_.pop_back();
  }
  lru_.emplace_front(name, 1);
  map_.emplace(std::move(name), lru_.begin());
  return 0;
}

} // namespace outbound
