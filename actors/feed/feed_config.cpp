#include "actors/feed/feed_config.hpp"

#include "config/config_error.hpp"
#include "core/backoff.hpp"
#include "core/request_builder.hpp"
#include "core/text.hpp"
#include "core/time.hpp"

#include <algorithm>
#include <cmath>

namespace outbound {
inline namespace feed {

namespace {

// Durations run in whole nanoseconds (feed_seconds rounds): a positive
// value under half a nanosecond would become 0 -- an instant deadline, or
// "off" for a field where 0 means off. core::validate_seconds rejects it.
void require_seconds(double x, const char* field, bool allow_zero) {
  core::validate_seconds(x, field, allow_zero);
}

void require_path(const std::string& path, const char* field) {
  if (path.empty())
    return;
  if (path.front() != '/')
    throw config_error(field, "must start with '/'");
  if (core::has_ctl(path))
    throw config_error(field, "contains a control character");
}

void require_name(const std::string& name, const char* field) {
  if (name.empty())
    throw config_error(field, "must not be empty");
  if (core::has_ctl(name))
    throw config_error(field, "contains a control character");
}

} // namespace

void feed_config::validate() const {
  if (replay_path.empty() && ws_path.empty())
    throw config_error("replay_path",
                       "a feed needs a replay_path or a ws_path");
  require_path(replay_path, "replay_path");
  require_path(ws_path, "ws_path");
  for (auto& p : prefixes)
    if (core::has_ctl(p))
      throw config_error("prefixes", "contains a control character");
  if (cursor < 0)
    throw config_error("cursor", "must be >= 0, got " + std::to_string(cursor));
  if (limit < 1)
    throw config_error("limit", "must be >= 1, got " + std::to_string(limit));
  require_seconds(poll_interval, "poll_interval", false);
  require_seconds(stable_period, "stable_period", true);
  require_seconds(reconnect_base_backoff, "reconnect_base_backoff", true);
  require_seconds(reconnect_max_backoff, "reconnect_max_backoff", true);
  core::validate_backoff_seconds(reconnect_base_backoff, reconnect_max_backoff,
                                 "reconnect_base_backoff",
                                 "reconnect_max_backoff", true);
  require_seconds(ws_ping_interval, "ws_ping_interval", true);
  require_seconds(ws_pong_timeout, "ws_pong_timeout", true);
  if (ws_max_frame_bytes == 0)
    throw config_error("ws_max_frame_bytes", "must be > 0");
  if (json_max_depth < 1 || json_max_depth > 1024)
    throw config_error("json_max_depth", "must be 1..1024, got "
                                           + std::to_string(json_max_depth));
  if (ws_max_discard_bytes != 0 && ws_max_discard_bytes < ws_max_frame_bytes)
    throw config_error("ws_max_discard_bytes",
                       "must be 0 (automatic) or >= ws_max_frame_bytes ("
                         + std::to_string(ws_max_frame_bytes) + "), got "
                         + std::to_string(ws_max_discard_bytes));
  require_seconds(ws_discard_timeout, "ws_discard_timeout", false);
  require_seconds(ws_handshake_timeout, "ws_handshake_timeout", false);
  if (core::has_ctl(client_id))
    throw config_error("client_id", "contains a control character");
  // The reference hub forgets longer ids (every connect would resync).
  if (client_id.size() > 256)
    throw config_error("client_id", "must be at most 256 bytes, got "
                                      + std::to_string(client_id.size()));
  if (resume_ledger_epoch && !has_replay())
    throw config_error("resume_ledger_epoch", "needs a replay_path");
  if (resume_ledger_epoch && core::has_ctl(*resume_ledger_epoch))
    throw config_error("resume_ledger_epoch", "contains a control character");
  if (resume_last_seq && *resume_last_seq < 0)
    throw config_error("resume_last_seq",
                       "must be >= 0, got " + std::to_string(*resume_last_seq));
  if (resume_epoch && !resume_last_seq)
    throw config_error("resume_epoch", "needs resume_last_seq");
  if (resume_epoch && core::has_ctl(*resume_epoch))
    throw config_error("resume_epoch", "contains a control character");
  // A generated id is new to the hub, which would resync anyway.
  if (resume_last_seq && client_id.empty())
    throw config_error("client_id",
                       "resume_last_seq needs the client_id the checkpoint "
                       "was read with");
  if (max_pending_frames == 0)
    throw config_error("max_pending_frames", "must be >= 1");
  if (max_pending_frame_bytes == 0)
    throw config_error("max_pending_frame_bytes", "must be >= 1");
  require_name(fields.events, "fields.events");
  require_name(fields.cursor, "fields.cursor");
  require_name(fields.reset, "fields.reset");
  require_name(fields.epoch, "fields.epoch");
  require_name(fields.event_id, "fields.event_id");
  require_name(fields.wake_cursor, "fields.wake_cursor");
  require_name(fields.after_param, "fields.after_param");
  require_name(fields.limit_param, "fields.limit_param");
  require_name(fields.prefix_param, "fields.prefix_param");
  for (auto& [k, v] : fields.extra_params) {
    require_name(k, "fields.extra_params");
    if (core::has_ctl(v))
      throw config_error("fields.extra_params",
                         "value of '" + k + "' contains a control character");
  }
}

std::string generate_client_id(core::rng& rng) {
  return generate_request_id(rng);
}

} // namespace feed
} // namespace outbound
