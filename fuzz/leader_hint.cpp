// Fuzz target: the `leader-hint` header of an oracle follower's 421 and the
// endpoint syntax behind it (actors/coalesce/leader_state.hpp,
// config/coalesce_config.hpp), plus the whole hint check of a leader_state
// under TLS (scheme rule, epoch guard). Input: the header value.

#include "actors/coalesce/leader_state.hpp"
#include "config/coalesce_config.hpp"

#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace outbound;
  std::string value{reinterpret_cast<const char*>(data), size};
  if (auto h = parse_leader_hint(value)) {
    if (!parse_oracle_endpoint(h->endpoint, false, endpoint_origin::wire))
      std::abort(); // the hint parser promises a parseable endpoint
  }
  (void)parse_leader_epoch(value);
  for (bool tls : {false, true})
    for (auto origin : {endpoint_origin::configured, endpoint_origin::wire}) {
      endpoint_parse_error why = endpoint_parse_error::none;
      if (auto ep = parse_oracle_endpoint(value, tls, origin, &why)) {
        (void)ep->key();
        (void)ep->authority();
      }
    }
  coalesce_rng rng{1};
  coalesce_config cfg;
  cfg.endpoints = {"a.test:7000", "https://b.test:7001", "[::1]:7002"};
  cfg.tls = true;
  leader_state ls{cfg, rng};
  coalesce_time now{};
  (void)ls.seat("https://b.test:7001", 5, seat_source::success, now);
  (void)ls.check_hint(&value, "https://a.test:7000", now);
  return 0;
}
