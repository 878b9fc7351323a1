#pragma once

// Loopback ports for tests.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace outbound::testing {

/// A port on 127.0.0.1 where nothing listens: bound by the kernel's choice,
/// read, closed. A connect to it is refused (unless another process takes
/// it meanwhile, which the kernel's port rotation makes unlikely). Throws
/// std::runtime_error when no socket can be bound.
uint16_t closed_port();

/// `n` distinct such ports: all bound at once (so they differ), read, then
/// closed. For a server that takes its ports on the command line; should
/// another process grab one first, the server fails to bind and the caller
/// picks again. Throws std::runtime_error when no socket can be bound.
std::vector<uint16_t> closed_ports(std::size_t n);

} // namespace outbound::testing
