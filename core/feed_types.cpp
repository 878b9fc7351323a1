#include "core/feed_types.hpp"

#include "core/time.hpp"

namespace outbound {
inline namespace core {

feed_duration feed_seconds(double seconds) {
  // Saturates at duration::max() beyond ~285 years.
  return core::from_seconds(seconds);
}

const char* to_string(feed_mode m) {
  switch (m) {
    case feed_mode::none: return "none";
    case feed_mode::ledger: return "ledger";
    case feed_mode::catchup: return "catchup";
    case feed_mode::ephemeral: return "ephemeral";
  }
  return "unknown";
}

const char* to_string(reset_cause c) {
  switch (c) {
    case reset_cause::retention: return "retention";
    case reset_cause::resync: return "resync";
    case reset_cause::epoch_changed: return "epoch_changed";
    case reset_cause::rewind: return "rewind";
    case reset_cause::reconnect: return "reconnect";
    case reset_cause::inferred: return "inferred";
    case reset_cause::wake: return "wake";
    case reset_cause::gap: return "gap";
    case reset_cause::undeliverable: return "undeliverable";
    case reset_cause::takeover: return "takeover";
  }
  return "unknown";
}

const char* to_string(drain_error_reason r) {
  switch (r) {
    case drain_error_reason::unparseable: return "unparseable";
    case drain_error_reason::over_cap: return "over_cap";
    case drain_error_reason::bad_page: return "bad_page";
    case drain_error_reason::bad_event: return "bad_event";
    case drain_error_reason::anomaly: return "anomaly";
    case drain_error_reason::stalled: return "stalled";
  }
  return "unknown";
}

const char* to_string(frame_error_reason r) {
  switch (r) {
    case frame_error_reason::unparseable: return "unparseable";
    case frame_error_reason::too_deep: return "too_deep";
    case frame_error_reason::memory_bound: return "memory_bound";
    case frame_error_reason::bad_number: return "bad_number";
    case frame_error_reason::not_an_object: return "not_an_object";
    case frame_error_reason::over_cap: return "over_cap";
  }
  return "unknown";
}

} // namespace core
} // namespace outbound
