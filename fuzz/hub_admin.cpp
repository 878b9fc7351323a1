// Fuzz target: the hub's admin bodies: `POST /admin/faults` (parsed as
// hub::impl::apply_faults does, then hub_state::apply_admin with the keys
// the impl handles itself) and `POST /admin/oracle`
// (oracle_state::apply_admin). Both are all or nothing: a refused patch
// must change nothing. Input: selector byte, then the body.

#include "fuzz/fuzz_input.hpp"
#include "hub/hub_state.hpp"
#include "hub/oracle_state.hpp"
#include "protocol/json_parse.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace outbound;
  fuzz::input in{data, size};
  auto which = in.byte() % 2;
  auto body = in.rest();
  if (which == 0) {
    hub_state st{hub_state_config{}, hub_faults{}, "1"};
    for (int i = 0; i < 4; ++i) {
      publish_input p;
      p.subject = "a.b";
      st.publish(p, 1.0);
    }
    auto parsed = outbound::parse_json(body);
    auto& v = parsed.value;
    if (!parsed || !v.is_object())
      return 0;
    auto before = boost::json::serialize(to_json(st.faults()));
    auto err
      = st.apply_admin(v.get_object(), {"seed", "silence_now", "drop_now"});
    if (err && boost::json::serialize(to_json(st.faults())) != before)
      std::abort(); // a refused patch changed a knob
    (void)st.take_due_script();
    (void)st.take_connection_plan();
    (void)st.state_json();
  } else {
    oracle_config cfg;
    cfg.nodes = 3;
    oracle_state o{cfg};
    o.set_addresses({"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"});
    auto before = boost::json::serialize(o.state_json());
    auto err = o.apply_admin(body);
    if (err && boost::json::serialize(o.state_json()) != before)
      std::abort(); // all or nothing
    (void)o.handle(0, oracle_op::ts, "{\"count\":1}", 1767225600000);
  }
  return 0;
}
