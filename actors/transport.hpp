#pragma once

// The transport port (docs/ARCHITECTURE.md, "Ports"): "send one HTTP request,
// answer with the whole response or a transport error whose kind says what
// happened". The connection_pool actor is the real one; tests script a fake.

#include "actors/messages.hpp"

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

namespace outbound {

/// Typed interface of a transport.
///
/// - `http_request -> exchange_result`: run one exchange. The result's
///   `exchange_id` echoes the request's. A transport always answers (errors
///   are values), within the request's `timeout_ns` plus scheduling slack.
/// - `(cancel_atom, exchange_id)`: the caller gave up on the exchange (it
///   timed out, or a hedge lost): close its connection at once, never reuse
///   it. An answer may still arrive and is dropped by the caller. A
///   cancelled exchange is still answered (the pool answers it at once with
///   a `timeout`): the service client sends without a CAF request timeout
///   and waits for that answer.
///
/// The service client sends its own attempts with a plain `send`, not a CAF
/// `request`: a handler's returned `exchange_result` (or a response promise
/// delivered later) then reaches it as an ordinary message, found by its
/// exchange id. A transport must therefore answer every exchange with an
/// `exchange_result` whose `exchange_id` echoes the request's, never with a
/// `caf::error` (also not one passed on from an actor it forwards to): an
/// error names no exchange, and the send it was meant for ends only at its
/// attempt timeout.
using transport_actor = caf::typed_actor<
  caf::replies_to<http_request>::with<exchange_result>,
  caf::reacts_to<cancel_atom, uint64_t>>;

} // namespace outbound
