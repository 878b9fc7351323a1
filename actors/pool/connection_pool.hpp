#pragma once

// The connection_pool actor (DESIGN.md): one per client; owns the client's
// keep-alive HTTP/1.1 connections (plain and TLS) per endpoint and runs each
// exchange on the io runner. It is the real implementation of the transport
// port (actors/transport.hpp).
//
// The answer of an exchange does not hop through the pool: the io completion
// sends it straight to the requester (one scheduler wake-up fewer, and the
// pool's mailbox carries half the traffic), after sending the pool a release
// message for the connection — so a request that the answer causes always
// reaches the pool after the release. A per-exchange atomic flag decides who
// answers when a cancel (or the pool's termination) races the completion:
// exactly one answer either way; a cancelled connection is never reused.

#include "actors/transport.hpp"
#include "config/client_config.hpp"

#include <caf/actor_system.hpp>

#include <memory>

namespace outbound {

class io_runner;

/// Spawns the connection pool for `cfg` (its base URL's origin, its TLS
/// identity, its idle limit). Builds the TLS context eagerly: throws
/// config_error (`tls.ca_file`, `tls.client_cert_file`,
/// `tls.client_key_file`) when a file cannot be loaded by OpenSSL.
/// `io` defaults to io_runner::shared().
transport_actor spawn_connection_pool(caf::actor_system& sys,
                                      const client_config& cfg,
                                      std::shared_ptr<io_runner> io = nullptr);

} // namespace outbound
