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
//   io thread:  frame ─► plain_wake_cursor == gate hint? ─yes─► dropped
//                                    │ no / not sure            (counted)
//                                    ▼
//   actor:      parse_message ─► ledger_drain::on_wake ─► refresh the gate
//                                       coalesced_wake_hint(drain)

#include "actors/feed/ledger_drain.hpp"

#include <cstdint>
#include <optional>
#include <string_view>

namespace outbound {

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

/// The wake hint that `drain` would coalesce right now: its target, when
/// the target is at or above the cursor and a wake announcing exactly it
/// would start nothing. Decided by replaying such a wake on a copy of
/// `drain` (its own wakes_coalesced count goes up by one), so the answer
/// follows ledger_drain's rules whatever they are; dropping such a wake
/// unseen changes nothing but that count. nullopt otherwise (no target, a
/// drain that would start, queue, or re-arm for it).
std::optional<int64_t> coalesced_wake_hint(const ledger_drain& drain);

} // namespace outbound
