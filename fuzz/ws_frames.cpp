// Fuzz target: the WebSocket frame-header tracker that watches every
// inbound byte of a feed session (protocol/ws_wire.hpp ws_frame_tracker:
// fragments per message, proof of life; RFC 6455 5.2). The input is the
// server's byte stream after the handshake; the first byte picks the
// fragment cap, the following bytes are fed in batches whose sizes come
// from the input too (a header split across reads must parse the same).

#include "fuzz/fuzz_input.hpp"
#include "protocol/ws_wire.hpp"

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace outbound;
  if (size == 0)
    return 0;
  uint32_t cap = data[0] % 70;
  ++data;
  --size;
  detail::ws_frame_tracker whole{cap};
  detail::ws_frame_tracker split{cap};
  auto r1 = whole.feed(data, size);
  // Split: batch sizes 1, 2, 3, ... cycled (deterministic, no extra bytes).
  detail::ws_frame_tracker::result r2;
  std::size_t off = 0;
  for (std::size_t n = 1; off < size; n = n % 7 + 1) {
    auto k = std::min(n, size - off);
    auto r = split.feed(data + off, k);
    r2.too_many_fragments = r2.too_many_fragments || r.too_many_fragments;
    r2.bad_length = r2.bad_length || r.bad_length;
    off += k;
  }
  if (r1.too_many_fragments != r2.too_many_fragments
      || r1.bad_length != r2.bad_length
      || whole.pending_messages() != split.pending_messages())
    std::abort(); // the batch boundaries changed what was seen
  while (whole.pending_messages() > 0)
    if (whole.pop_fragmented() != split.pop_fragmented())
      std::abort();
  return 0;
}
