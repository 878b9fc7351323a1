#include "actors/client/blocking_client.hpp"

#include "actors/hedge/endpoint_stats.hpp"

#include <boost/json/serialize.hpp>
#include <caf/scoped_actor.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>

namespace outbound {
inline namespace client {

namespace {

call_request make_call(const std::string& method, const std::string& path,
                       std::optional<boost::json::value> json_body,
                       param_list params, std::optional<bool> idempotent,
                       bool raw) {
  call_request req;
  req.method = method;
  req.path = path;
  if (json_body) {
    req.body = boost::json::serialize(*json_body);
    req.has_body = true;
  }
  req.params = std::move(params);
  req.idempotent = idempotent;
  req.raw = raw;
  return req;
}

} // namespace

blocking_client::blocking_client(caf::actor_system& sys, client_config cfg,
                                 client_options opts)
  : sys_(&sys), deadline_(cfg.deadline) {
  actor_ = make_service_client(sys, std::move(cfg), std::move(opts));
}

blocking_client blocking_client::from_env(caf::actor_system& sys,
                                          const std::string& prefix,
                                          client_config explicit_cfg,
                                          client_options opts) {
  return blocking_client{sys, outbound::from_env(prefix, std::move(explicit_cfg)),
                         std::move(opts)};
}

std::optional<hedge_stats_snapshot> blocking_client::hedge_stats() {
  std::optional<hedge_stats_snapshot> out;
  caf::scoped_actor self{*sys_};
  self->request(actor_, std::chrono::seconds{5}, hedging_handles_request{})
    .receive(
      [&](hedging_handles& h) {
        if (!h.stats)
          return;
        self->request(h.stats, std::chrono::seconds{5},
                      hedge_global_stats_request{})
          .receive([&](hedge_stats_snapshot& s) { out = s; },
                   [](caf::error&) {});
      },
      [](caf::error&) {});
  return out;
}

call_outcome blocking_client::call(call_request req) {
  // The call actor always answers within the deadline; the margin only
  // covers scheduling, so a lost client actor cannot block a thread forever.
  // The deadline is clamped like the call's own (retry_state.cpp, about 31
  // years) before it becomes an integer: a huge but valid deadline (1e10 s,
  // 1e300 s) overflowed the conversion (undefined behaviour; in practice a
  // negative wait, so the facade gave up at once while the call ran on).
  constexpr double max_wait_seconds = 1e9;
  auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(
                std::chrono::duration<double>(
                  std::min(deadline_, max_wait_seconds)))
              + std::chrono::seconds{5};
  call_outcome result;
  bool answered = false;
  auto request_id = req.request_id;
  caf::scoped_actor self{*sys_};
  self->request(actor_, wait, std::move(req))
    .receive(
      [&](call_outcome& o) {
        result = std::move(o);
        answered = true;
      },
      [&](caf::error& err) {
        auto& e = result.error.emplace();
        e.kind = error_kind::service_unavailable;
        e.detail = "no answer from the service client: " + sys_->render(err);
        e.nothing_sent = false;
      });
  if (!answered) {
    // The error handler always runs when no outcome came; still, never
    // hand back a default outcome (a success) for a call without answer.
    if (!result.error) {
      auto& e = result.error.emplace();
      e.kind = error_kind::service_unavailable;
      e.detail = "no answer from the service client";
    }
    result.request_id = request_id;
    result.error->request_id = request_id;
  }
  return result;
}

boost::json::value
blocking_client::request(const std::string& method, const std::string& path,
                         std::optional<boost::json::value> json_body,
                         param_list params, std::optional<bool> idempotent) {
  auto o = call(make_call(method, path, std::move(json_body), std::move(params),
                          idempotent, false));
  if (o.error)
    throw_error(std::move(*o.error));
  return std::move(o.body);
}

raw_response
blocking_client::request_raw(const std::string& method, const std::string& path,
                             std::optional<boost::json::value> json_body,
                             param_list params, std::optional<bool> idempotent) {
  auto o = call(make_call(method, path, std::move(json_body), std::move(params),
                          idempotent, true));
  if (o.error)
    throw_error(std::move(*o.error));
  raw_response r;
  r.status = o.status;
  r.headers = std::move(o.headers);
  r.body = std::move(o.body);
  r.attempts = o.attempts;
  r.request_id = std::move(o.request_id);
  return r;
}

} // namespace client
} // namespace outbound
