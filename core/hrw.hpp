#pragma once

// Rendezvous (highest random weight) assignment of feeds to members
// (Thaler & Ravishankar, "Using Name-Based Mappings to Increase Hit
// Rates", IEEE/ACM Transactions on Networking 6(1), 1998). Each member m
// scores a feed f with a hash of the pair (f, m); the highest score wins.
// No ring, no shared state: every process that sees the same member list
// computes the same owner, and when a member leaves only its own feeds
// move (each to its runner-up), when one joins only the feeds it now wins
// move (about F / (N + 1)).
//
// The hash must agree across processes, builds and platforms, so it is
// written out here (never std::hash): FNV-1a 64 (Fowler, Noll, Vo;
// http://www.isthe.com/chongo/tech/comp/fnv/) over the feed's length as 8
// little-endian bytes, the feed's bytes and the member's bytes, then
// MurmurHash3's 64-bit finalizer (fmix64, Appleby) to spread FNV's weak
// low bits. Ties (astronomically rare) go to the greater member name, so
// the result never depends on the order of the list. Pure: no CAF, no
// Asio.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace outbound {
inline namespace core {

/// The score of member `member` for feed `feed`: a stable 64-bit hash of
/// the pair (the same value on every build and platform; the tests pin
/// some values). Distinct pairs give independent-looking scores.
uint64_t hrw_score(std::string_view feed, std::string_view member) noexcept;

/// "No winner": hrw_winner's answer for an empty member list.
inline constexpr std::size_t hrw_none = static_cast<std::size_t>(-1);

/// The index in `members` of the member that wins `feed` (the highest
/// hrw_score; on a tie, the greater name), or hrw_none if `members` is
/// empty. Duplicate names score alike; the first of them is answered.
/// O(members.size()).
std::size_t hrw_winner(std::string_view feed,
                       const std::vector<std::string>& members) noexcept;

} // namespace core
} // namespace outbound
