#include "core/call_types.hpp"

namespace outbound {
inline namespace core {

const char* to_string(event_kind k) {
  switch (k) {
    case event_kind::sending: return "sending";
    case event_kind::retrying: return "retrying";
    case event_kind::redialing: return "redialing";
    case event_kind::answered: return "answered";
    case event_kind::failed: return "failed";
    case event_kind::hedging: return "hedging";
  }
  return "unknown";
}

} // namespace core
} // namespace outbound
