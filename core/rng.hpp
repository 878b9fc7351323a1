#pragma once

// The one random generator of the library (retry and reconnect jitter,
// request ids, client ids, WebSocket keys when OpenSSL has no entropy):
// xoshiro256**
// (Blackman & Vigna, "Scrambled linear pseudorandom number generators", 2018,
// https://prng.di.unimi.it/xoshiro256starstar.c) seeded through splitmix64
// (Steele, Lea & Flood 2014, as the xoshiro authors recommend). Every call
// actor is seeded once per call, so seeding must be cheap: four splitmix64
// steps instead of std::mt19937_64's 312-word state (whose seeding and first
// refill were ~5% of all CPU samples of bench/request_throughput at
// concurrency 64). Not cryptographic: nothing in the library that needs
// unpredictability against an attacker draws from it.

#include <cstdint>
#include <limits>
#include <random>

namespace outbound {
inline namespace core {

/// One step of splitmix64: advances `state` and returns the next output.
constexpr uint64_t splitmix64_next(uint64_t& state) noexcept {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// xoshiro256** with a 64-bit seed; satisfies UniformRandomBitGenerator
/// (usable with std::uniform_*_distribution). Equal seeds give equal
/// sequences (the seeded tests rely on it); the all-zero state cannot occur
/// (splitmix64 never yields four zero words in a row).
class rng {
public:
  using result_type = uint64_t;

  /// Seeded with 0 (a fixed sequence, like a default std::mt19937_64).
  constexpr rng() noexcept {
    seed(0);
  }

  constexpr explicit rng(uint64_t s) noexcept {
    seed(s);
  }

  /// Re-seeds: the state is four splitmix64 outputs of `s`.
  constexpr void seed(uint64_t s) noexcept {
    for (auto& w : s_)
      w = splitmix64_next(s);
  }

  static constexpr result_type min() noexcept {
    return 0;
  }

  static constexpr result_type max() noexcept {
    return std::numeric_limits<result_type>::max();
  }

  /// The next 64 random bits.
  constexpr result_type operator()() noexcept {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  friend constexpr bool operator==(const rng& a, const rng& b) noexcept {
    return a.s_[0] == b.s_[0] && a.s_[1] == b.s_[1] && a.s_[2] == b.s_[2]
           && a.s_[3] == b.s_[3];
  }

private:
  static constexpr uint64_t rotl(uint64_t x, int k) noexcept {
    return (x << k) | (x >> (64 - k));
  }

  uint64_t s_[4] = {0, 0, 0, 0};
};

/// 64 bits from std::random_device: the seed of a generator whose caller
/// gave none (a seed of 0 in the options means "from entropy").
inline uint64_t entropy_seed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

} // namespace core
} // namespace outbound
