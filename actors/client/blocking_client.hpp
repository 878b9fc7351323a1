#pragma once

// Blocking facade for non-actor callers (docs/ARCHITECTURE.md, "Errors"): the
// same calls as the service_client actor, answered synchronously; failures
// raise the typed exception hierarchy of protocol/errors.hpp.

#include "actors/client/service_client.hpp"
#include "actors/hedge/endpoint_stats_state.hpp"

#include <boost/json/value.hpp>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace outbound {
inline namespace client {

/// Query parameters in order.
using param_list = std::vector<std::pair<std::string, std::string>>;

/// The answer of request_raw: any definitive HTTP status is returned.
struct raw_response {
  int status = 0;
  header_list headers;
  /// Parsed JSON body; null when empty or not JSON.
  boost::json::value body;
  int attempts = 0;
  std::string request_id;
};

/// A service client used from ordinary threads. Thread-safe: each call uses
/// its own scoped actor. Must not be called from inside an actor (use the
/// service_client_actor there).
class blocking_client {
public:
  /// Validates `cfg` and spawns the client actor; throws config_error.
  blocking_client(caf::actor_system& sys, client_config cfg,
                  client_options opts = {});

  /// Builds the config from `{PREFIX}_*` (see env_settings); explicit fields
  /// of `explicit_cfg` win. Throws config_error.
  static blocking_client from_env(caf::actor_system& sys,
                                  const std::string& prefix,
                                  client_config explicit_cfg = {},
                                  client_options opts = {});

  /// Sends one request and returns the parsed JSON body (null for an empty
  /// body). Throws auth_error, request_error (also for a 3xx), server_error,
  /// response_error (non-JSON 2xx, body over the cap), service_unavailable
  /// (or deadline_exceeded) when the transport failed after the policy.
  boost::json::value request(const std::string& method, const std::string& path,
                             std::optional<boost::json::value> json_body = {},
                             param_list params = {},
                             std::optional<bool> idempotent = {});

  /// Like request(), but every definitive HTTP status is returned instead of
  /// raised. Transport failures and an over-cap body still throw.
  raw_response request_raw(const std::string& method, const std::string& path,
                           std::optional<boost::json::value> json_body = {},
                           param_list params = {},
                           std::optional<bool> idempotent = {});

  /// The general form: never throws for call failures, the outcome says.
  call_outcome call(call_request req);

  /// The client-wide hedging counters (the endpoint_stats actor's global
  /// snapshot: requests, hedges, wins, budget_exhausted, ...). nullopt when
  /// the client does not hedge or the actors did not answer within 5 s.
  std::optional<hedge_stats_snapshot> hedge_stats();

  /// The underlying actor, to share with actor code.
  const service_client_actor& actor() const {
    return actor_;
  }

private:
  caf::actor_system* sys_;
  service_client_actor actor_;
  /// cfg.deadline in seconds: bounds the wait for an answer (plus a margin).
  double deadline_ = 30.0;
};

} // namespace client
} // namespace outbound
