#pragma once

// The connection_pool actor (docs/ARCHITECTURE.md): one per client; owns its
// keep-alive HTTP/1.1 connections (plain and TLS) per endpoint and runs each
// exchange on the io runner. It is the real implementation of the transport
// port (actors/transport.hpp).

#include "actors/transport.hpp"
#include "config/client_config.hpp"

#include <caf/actor_system.hpp>

#include <memory>

namespace outbound {
inline namespace protocol {
class io_runner;
} // namespace protocol
inline namespace pool {

/// Spawns the connection pool for `cfg` (its base URL's origin, its TLS
/// identity, its idle limit). Builds the TLS context eagerly: throws
/// config_error (`tls.ca_file`, `tls.client_cert_file`,
/// `tls.client_key_file`) when a file cannot be loaded by OpenSSL.
/// `io` defaults to io_runner::shared(). End the pool with an exit message
/// (every connection closes, every exchange is answered): a pool whose
/// handles are all dropped lives on until its pending timers (a queued
/// exchange's expiry, the sweep of surplus idle connections,
/// `client_config::surplus_idle_time`) have fired, because CAF 0.17's
/// delayed messages hold their receiver.
transport_actor spawn_connection_pool(caf::actor_system& sys,
                                      const client_config& cfg,
                                      std::shared_ptr<io_runner> io = nullptr);

} // namespace pool
} // namespace outbound
