// Fuzz target: the reference hub's request parsing (hub/hub_wire.hpp,
// hub/latency_profile.hpp, hub/oracle_state.hpp), routed as
// hub::impl::handle_http routes it, against a fresh hub state (three
// events published) and a fresh 3-node oracle per input, so that every
// finding reproduces from its input alone. Input: the request target, a
// NUL, then the body. Promises: the replay range is validated, and an
// accepted publish's metadata parses back to the text stored for it.

#include "fuzz/fuzz_input.hpp"
#include "hub/hub_state.hpp"
#include "hub/hub_wire.hpp"
#include "hub/latency_profile.hpp"
#include "hub/oracle_state.hpp"
#include "protocol/json_parse.hpp"

#include <boost/json/serialize.hpp>

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace outbound;
  fuzz::input in{data, size};
  auto target = in.until('\0');
  auto body = in.rest();
  auto t = parse_hub_target(target);
  if (t.path == "/v1/events") {
    hub_state state{hub_state_config{}, hub_faults{}, "1"};
    for (const char* subject : {"orders.eu", "users.us", "orders.us"}) {
      publish_input in;
      in.subject = subject;
      state.publish(in, 1.0);
    }
    auto p = parse_publish(body);
    if (p.input) {
      // What publish accepts, replay serves to a default client: the
      // stored metadata parses back (no inexact integer, no infinity) to
      // the same text.
      auto md = parse_json(p.input->metadata_json);
      if (!md || boost::json::serialize(md.value) != p.input->metadata_json)
        std::abort();
      (void)state.publish(*p.input, 2.0);
    }
    auto q = parse_replay_query(t.query);
    if (q.query) {
      if (q.query->after < 0 || q.query->after > max_replay_after)
        std::abort(); // validated range
      auto r = state.replay(*q.query);
      (void)render_page(r.page, r.bare_array);
    }
  } else if (t.path == "/v1/ts" || t.path == "/v1/seq") {
    (void)parse_ts_request(body);
    (void)parse_seq_request(body, 128, 65536);
    oracle_config cfg;
    cfg.nodes = 3;
    oracle_state oracle{cfg};
    oracle.set_addresses({"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"});
    auto op = t.path == "/v1/ts" ? oracle_op::ts : oracle_op::seq;
    for (std::size_t node = 0; node < 3; ++node)
      (void)oracle.handle(node, op, body, 1767225600000);
  } else if (auto kind = latency_profile_at(t.path)) {
    auto p = parse_latency_profile(*kind, t.query);
    if (p.profile) {
      double d = latency_profile_delay(*p.profile, 1, p.profile->key, 7);
      if (!(d >= 0.0))
        std::abort(); // a delay is a non-negative number
    }
  } else {
    // Every other path: both parsers still see the bytes.
    (void)parse_publish(target);
    (void)parse_replay_query(t.query);
  }
  return 0;
}
