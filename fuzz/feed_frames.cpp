// Fuzz target: the feed watcher's classifier of inbound WebSocket messages
// (hello / wake / event / ping / not JSON, actors/feed/feed_frames.hpp).
// Input: the wake-cursor field name, a NUL, then the message payload.

#include "actors/feed/feed_frames.hpp"
#include "fuzz/fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace outbound;
  fuzz::input in{data, size};
  std::string wake_field{in.until('\0')};
  auto payload = in.rest();
  (void)parse_message(payload, wake_field);
  (void)parse_message(payload, "cursor");
  return 0;
}
