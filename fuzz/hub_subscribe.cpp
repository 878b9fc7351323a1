// Fuzz target: the hub's reading of a client's WebSocket text frames
// (hub/hub_wire.hpp parse_subscribe, is_json_ping) and the subscribe
// answer of each tier (hub/hub_state.hpp) over a fresh hub state with a
// small ledger and ring per input. Input: the frame text.

#include "hub/hub_state.hpp"
#include "hub/hub_wire.hpp"

#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace outbound;
  std::string_view text{reinterpret_cast<const char*>(data), size};
  (void)is_json_ping(text);
  auto sub = parse_subscribe(text);
  if (!sub)
    return 0;
  if (sub->client_id.size() > max_client_id_bytes)
    std::abort(); // the documented bound
  hub_state_config cfg;
  cfg.ring_size = 8;
  cfg.max_clients = 4;
  hub_state state{cfg, hub_faults{}, "1"};
  for (int i = 0; i < 12; ++i) {
    publish_input in;
    in.subject = i % 2 ? "orders.eu" : "users.us";
    in.kind = "created";
    state.publish(in, 1.0 + i);
  }
  for (auto tier : {hub_tier::ledger, hub_tier::catchup, hub_tier::ephemeral}) {
    (void)state.subscribe(tier, *sub);
    (void)state.subscribe(tier, *sub, true); // a reconnect, without hello
  }
  return 0;
}
