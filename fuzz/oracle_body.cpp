// Fuzz target: the coalescing driver's readers of the oracle's 2xx bodies
// (actors/coalesce/oracle_body.hpp): GetTs, GetSeq and a refusal's epoch.
// Input: the body. Differential as well: read_ts_body / read_seq_body scan
// a plain answer without a DOM (scan_ts_body) and must give exactly what
// the DOM readers give; a difference aborts.

#include "actors/coalesce/oracle_body.hpp"

#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace outbound;
  std::string body{reinterpret_cast<const char*>(data), size};
  for (std::size_t depth : {std::size_t{1}, std::size_t{64}}) {
    auto ts = parse_ts_body(body, depth);
    auto seq = parse_seq_body(body, depth);
    auto epoch = parse_body_epoch(body, depth);
    auto rts = read_ts_body(body, depth);
    auto rseq = read_seq_body(body, depth);
    if (rts.response.physical_ms != ts.physical_ms
        || rts.response.logical_start != ts.logical_start
        || rts.response.count != ts.count || rts.response.epoch != ts.epoch
        || rts.response.unreadable != ts.unreadable || rts.epoch != epoch)
      std::abort();
    if (rseq.response.start != seq.start || rseq.response.count != seq.count
        || rseq.response.epoch != seq.epoch
        || rseq.response.unreadable != seq.unreadable || rseq.epoch != epoch)
      std::abort();
  }
  return 0;
}
