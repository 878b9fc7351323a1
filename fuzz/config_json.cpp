// Fuzz target: the configuration readers: `outbound demo --config FILE`
// (config/demo_config.hpp, which embeds the hedging and oracle settings), a
// client's base URL (config/client_config.hpp url_parts) and the coalescing
// driver's configured endpoints (config/coalesce_config.hpp). Every bad
// input must end in config_error naming the field; any other exception is
// a finding. Input: selector byte, then the text.

#include "config/client_config.hpp"
#include "config/coalesce_config.hpp"
#include "config/config_error.hpp"
#include "config/demo_config.hpp"
#include "fuzz/fuzz_input.hpp"

#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace outbound;
  fuzz::input in{data, size};
  auto which = in.byte() % 3;
  std::string text{in.rest()};
  try {
    switch (which) {
      case 0: {
        auto cfg = parse_demo_config(text);
        cfg.validate();
        break;
      }
      case 1: {
        auto u = url_parts::parse(text);
        (void)u.authority();
        client_config c;
        c.base_url = text;
        c.validate();
        break;
      }
      default: {
        coalesce_config c;
        std::string_view rest{text};
        while (!rest.empty()) {
          auto i = rest.find(',');
          c.endpoints.emplace_back(rest.substr(0, i));
          rest = i == std::string_view::npos ? std::string_view{}
                                             : rest.substr(i + 1);
        }
        c.tls = text.size() % 2 == 1;
        c.validate();
        (void)c.parsed_endpoints();
        break;
      }
    }
  } catch (const config_error&) {
    // the documented answer to a bad value
  }
  return 0;
}
