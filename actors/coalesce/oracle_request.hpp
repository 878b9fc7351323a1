#pragma once

// The coalescing driver's oracle requests (`POST /v1/ts {"count":N}`,
// `POST /v1/seq {"count":N,"key":K}`), built by the service client's
// request builder (core/request_builder.hpp), so an oracle request
// carries what every outbound request carries: Accept / Content-Type,
// `User-Agent: outbound/<version>`, the credential in `token_header`, the
// default headers and an `x-request-id` (the request shape of hyperdjango's
// ServiceClient, serviceclient.md). Pure: no CAF actor, no clock; the driver
// (coalescing_driver.cpp) calls it once per attempt, for the endpoint of
// that attempt.

#include "actors/coalesce/batcher.hpp"
#include "config/client_config.hpp"
#include "config/coalesce_config.hpp"
#include "core/request_builder.hpp"

#include <cstdint>
#include <string>

namespace outbound {
inline namespace coalesce {

/// Cap of an oracle response body in bytes (64 KiB): the oracle's bodies
/// are tiny, anything larger is hostile (a too_large transport error).
inline constexpr std::size_t max_oracle_body = 64 * 1024;

/// The request settings of `cfg` as the builder takes them: a client_config
/// with `cfg`'s token, token_header, token_scheme and default_headers,
/// max_response_bytes = max_oracle_body, everything else default (its
/// base_url is unused: the base is the attempt's endpoint). Never throws.
client_config oracle_request_config(const coalesce_config& cfg);

/// The base URL of endpoint `ep` as the builder takes it: its scheme, host
/// and port, an empty base path.
url_parts oracle_base_url(const oracle_endpoint& ep);

/// The call of RPC `plan`: `POST /v1/ts` with `{"count":N}`, or `POST
/// /v1/seq` with `{"count":N,"key":K}` (JSON, in this key order), not
/// idempotent for seq, with `request_id` (empty: the builder generates one)
/// and max_response_bytes = max_oracle_body.
call_request oracle_call(const rpc_plan& plan, std::string request_id);

/// Builds the request of `plan` for endpoint `ep` with build_request:
/// headers in the builder's order (Accept, Content-Type, User-Agent, the
/// credential, `cfg.default_headers`, x-request-id = `request_id`, or a
/// fresh one from `rng` when empty), `max_body_bytes` = max_oracle_body.
/// `rc` is oracle_request_config(cfg). `retry_count`: attempts of this RPC
/// before this one (every earlier attempt, on any endpoint, counts); > 0
/// adds `x-retry-count: N` as the service client's retries carry it.
/// !ok: a config_error (nothing may be sent), e.g. a default header the
/// builder refuses. The id is taken by value and comes back in the
/// result's request_id (an owner that keeps it moves it in and back),
/// except an id with control characters, which the builder refuses and
/// leaves out of its answer.
built_request build_oracle_request(const client_config& rc,
                                   const oracle_endpoint& ep,
                                   const rpc_plan& plan, std::string request_id,
                                   core::rng& rng, int retry_count = 0);

/// Builds a ts and a seq request for the first configured endpoint of
/// `cfg` (validate() first) and throws config_error naming the field when
/// the builder refuses one: `coalesce.token_header` (the credential alone
/// refused) or `coalesce.default_headers`. So whatever the builder would
/// refuse at send time fails at construction instead. Sends nothing.
void check_oracle_requests(const coalesce_config& cfg);

} // namespace coalesce
} // namespace outbound
