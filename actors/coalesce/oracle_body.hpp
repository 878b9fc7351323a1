#pragma once

// Readers of the oracle's 2xx response bodies (`POST /v1/ts`, `POST
// /v1/seq`): pure functions over the body text, no CAF, no Asio, so the
// fuzz harnesses (fuzz/) can call them directly. The coalescing driver
// (coalescing_driver.cpp) hands their results to the batcher. The driver's
// readers (read_ts_body, read_seq_body) first scan a plain answer straight
// off the text (scan_ts_body); any other body, and every body the parse_*
// readers get, parses into a 1 KiB arena on the stack (heap blocks beyond
// it, freed when it returns), whose object's members are read in one pass.

#include "actors/coalesce/batcher.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace outbound {
inline namespace coalesce {

/// Parses a GetTs 2xx body `{"physical_ms":P,"logical_start":L,"count":N,
/// "epoch":"E"}`. A body that does not parse, is not a JSON object, repeats
/// a top-level key (ambiguous: Boost.JSON keeps the last one, another reader
/// the first) or has a field out of range gives a default ts_response
/// (count 0): the batcher reports the violation. `epoch` is kept only when it
/// is a decimal leader epoch (parse_leader_epoch), else empty. A body nested
/// deeper than `max_depth` (coalesce_config::json_max_depth) does not parse.
/// Never throws.
ts_response parse_ts_body(const std::string& body,
                          std::size_t max_depth = 64);

/// Parses a GetSeq 2xx body `{"start":S,"count":N,"epoch":"E"}` under the
/// rules of parse_ts_body (a missing epoch leaves `epoch` empty, which the
/// batcher treats as an uncertain outcome, as tsoracle's seq_attempt.rs
/// does). Never throws.
seq_response parse_seq_body(const std::string& body,
                            std::size_t max_depth = 64);

/// The decimal `"epoch"` string of a JSON object body, if any (a follower's
/// refusal may carry it); nullopt otherwise (also for a body nested deeper
/// than `max_depth`). Never throws.
std::optional<uint64_t> parse_body_epoch(const std::string& body,
                                         std::size_t max_depth = 64);

/// A GetTs 2xx body read once: what the batcher takes (parse_ts_body's
/// rules) and the epoch the leader discovery takes (parse_body_epoch's
/// rules, which also read a body whose other fields are unusable).
struct read_ts_result {
  ts_response response;
  std::optional<uint64_t> epoch;
};

/// parse_ts_body and parse_body_epoch over one parse of `body`: first
/// scan_ts_body, then, when the scan does not take the body, one DOM parse.
read_ts_result read_ts_body(const std::string& body,
                            std::size_t max_depth = 64);

/// As read_ts_result, for a GetSeq body.
struct read_seq_result {
  seq_response response;
  std::optional<uint64_t> epoch;
};

/// parse_seq_body and parse_body_epoch over one parse of `body`, as
/// read_ts_body (scan_seq_body first).
read_seq_result read_seq_body(const std::string& body,
                              std::size_t max_depth = 64);

/// The scan behind read_ts_body: reads a flat GetTs answer straight off the
/// text, without a DOM, and gives exactly what parse_ts_body and
/// parse_body_epoch give. It takes only a strict subset of JSON (one object
/// of the fields parse_ts_body reads, each once, with plain keys, numbers
/// of 1..19 digits without a leading zero, an epoch string of printable
/// ASCII without escapes, every needed field in range; whitespace anywhere
/// JSON allows it) and gives nullopt for any other body, which the DOM
/// reader then reads. The reference hub's answers are in that subset.
/// Never throws.
std::optional<read_ts_result> scan_ts_body(std::string_view body,
                                           std::size_t max_depth = 64);

/// As scan_ts_body, for a GetSeq answer (`start`, `count`, `epoch`).
std::optional<read_seq_result> scan_seq_body(std::string_view body,
                                             std::size_t max_depth = 64);

} // namespace coalesce
} // namespace outbound
