// Fuzz target: the coalescing driver's readers of the oracle's 2xx bodies
// (actors/coalesce/oracle_body.hpp): GetTs, GetSeq and a refusal's epoch.
// Input: the body.

#include "actors/coalesce/oracle_body.hpp"

#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace outbound;
  std::string body{reinterpret_cast<const char*>(data), size};
  (void)parse_ts_body(body);
  (void)parse_seq_body(body);
  (void)parse_body_epoch(body);
  return 0;
}
