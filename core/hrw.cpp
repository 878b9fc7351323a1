#include "core/hrw.hpp"

namespace outbound {
inline namespace core {

namespace {

constexpr uint64_t fnv_offset = 0xcbf29ce484222325ULL;
constexpr uint64_t fnv_prime = 0x100000001b3ULL;

uint64_t fnv_byte(uint64_t h, unsigned char b) noexcept {
  return (h ^ b) * fnv_prime;
}

uint64_t fnv_bytes(uint64_t h, std::string_view s) noexcept {
  for (char c : s)
    h = fnv_byte(h, static_cast<unsigned char>(c));
  return h;
}

// MurmurHash3's fmix64.
uint64_t fmix64(uint64_t k) noexcept {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ULL;
  k ^= k >> 33;
  return k;
}

} // namespace

uint64_t hrw_score(std::string_view feed, std::string_view member) noexcept {
  uint64_t h = fnv_offset;
  // The length prefix keeps ("ab", "c") and ("a", "bc") apart.
  auto n = static_cast<uint64_t>(feed.size());
  for (int i = 0; i < 8; ++i)
    h = fnv_byte(h, static_cast<unsigned char>((n >> (8 * i)) & 0xff));
  h = fnv_bytes(h, feed);
  h = fnv_bytes(h, member);
  return fmix64(h);
}

std::size_t hrw_winner(std::string_view feed,
                       const std::vector<std::string>& members) noexcept {
  std::size_t best = hrw_none;
  uint64_t best_score = 0;
  for (std::size_t i = 0; i < members.size(); ++i) {
    auto s = hrw_score(feed, members[i]);
    if (best == hrw_none || s > best_score
        || (s == best_score && members[i] > members[best])) {
      best = i;
      best_score = s;
    }
  }
  return best;
}

} // namespace core
} // namespace outbound
