#pragma once

// Cheap intake of wake frames for the ledger model: the two pure pieces the
// watcher needs to drop, on the io thread and before any actor message, a
// wake its drain would coalesce anyway. No CAF, Asio or clock here.
//
// Why: a wake that repeats the target the drain already pursues starts
// nothing (ledger_drain's coalescing), but delivering it to the actor costs
// a CAF message per frame, and each one wakes a scheduler worker that then
// polls for new work before it sleeps again (CAF 0.17's work-stealing
// policy). At 10,000 wakes/s the workers never get back to sleep: that,
// not the JSON parse, was most of the watcher's CPU (bench/wake_flood,
// `perf record -g`).
//
// The gate drops a plain wake whose cursor the drain would coalesce (in
// [cursor, target]: it repeats or trails the target pursued), and absorbs
// one that raises the target while the drain is where a raise changes
// nothing but the target (ledger_drain::absorbs_raises: a drain in flight
// with a raised wake pending, or the re-drain timer armed at the floor):
// the gate keeps the highest such cursor and the watcher folds it into one
// on_wake before the drain's next step. So a flood of rising hints costs
// no actor message either, only what the drain's floor allows.
//
//   io thread:  frame ─► plain_wake_cursor in [lo, hint]? ─yes─► dropped
//                          │ above, absorbing? ─yes─► kept (max) │ (counted)
//                          ▼ no / not sure
//   actor:      parse_message ─► ledger_drain::on_wake ─► refresh the gate
//               (each drain step: fold the kept max first)

#include "actors/feed/ledger_drain.hpp"

#include <atomic>
#include <cstdint>
#include <optional>
#include <string_view>

namespace outbound {
inline namespace feed {

/// The cursor hint of `payload` when it is certainly a plain wake frame: a
/// flat JSON object (RFC 8259; members are strings without escapes or
/// non-ASCII bytes, integers of at most 18 digits, true, false or null --
/// nothing nested) with exactly one `"type":"wake"` member and exactly one
/// member named `cursor_field` holding a non-negative integer. Anything
/// else -- an event or hello frame, a nested or escaped member, a repeated
/// key, a fraction, a payload over 4 KiB, text that is not JSON -- is
/// nullopt: "not sure", so the caller hands the frame to the full parser
/// (parse_message), which stays the only authority on what a frame means.
std::optional<int64_t> plain_wake_cursor(std::string_view payload,
                                         std::string_view cursor_field);

/// What the watcher shares with its session's io thread (one per session):
/// which plain wakes the io thread may drop or absorb. Lock-free; the
/// watcher writes it with set() after every step that can change its drain
/// and calls fold() before every such step; the io thread calls take().
/// A new gate is closed (every frame goes to the watcher).
class wake_gate {
public:
  /// io thread: true when the plain wake announcing `cursor` needs no actor
  /// message: dropped (in [lo, hint]) or absorbed (above both, while
  /// absorbing; kept for fold()). False: hand the frame to the watcher.
  bool take(int64_t cursor);

  /// Watcher: closes absorbing and returns the highest cursor absorbed
  /// since the last fold, if any; the caller applies it as one wake
  /// (ledger_drain::on_wake) before its next drain step. A wake the io
  /// thread absorbed while the gate closed may also reach the watcher as a
  /// frame: applying a hint twice is harmless.
  std::optional<int64_t> fold();

  /// Watcher: drop plain wakes in [lo, hint] (no hint: none), and absorb
  /// those above when `absorb`.
  void set(int64_t lo, std::optional<int64_t> hint, bool absorb);

  /// Watcher: the cursor moved to `lo` (a delivery): a wake below it is a
  /// low hint the drain must see; closes the drop range if it passed hint.
  void raise_low(int64_t lo);

  /// Closes the gate (every frame goes to the watcher).
  void close() {
    set(0, std::nullopt, false);
  }

private:
  void store_range(int64_t lo, int64_t hint);

  /// Seqlock version of (lo_, hint_): odd while the watcher writes them.
  std::atomic<uint64_t> version_{0};
  std::atomic<int64_t> lo_{0};
  std::atomic<int64_t> hint_{-1};
  std::atomic<bool> absorb_{false};
  std::atomic<int64_t> absorbed_{-1};
};

/// The wake hint that `drain` would coalesce right now: its target, when
/// the target is at or above the cursor and a wake announcing exactly it
/// would start nothing. Decided by replaying such a wake on a copy of
/// `drain` (its own wakes_coalesced count goes up by one), so the answer
/// follows ledger_drain's rules whatever they are; dropping such a wake
/// unseen changes nothing but that count. nullopt otherwise (no target, a
/// drain that would start, queue, or re-arm for it).
std::optional<int64_t> coalesced_wake_hint(const ledger_drain& drain);

} // namespace feed
} // namespace outbound
