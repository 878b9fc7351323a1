#include "core/hedge_stats.hpp"

namespace outbound {
inline namespace core {

const char* to_string(breaker_phase p) {
  switch (p) {
    case breaker_phase::closed: return "closed";
    case breaker_phase::open: return "open";
    case breaker_phase::half_open: return "half_open";
  }
  return "?";
}

} // namespace core
} // namespace outbound
