#pragma once

// Loopback ports for tests.

#include <cstdint>

namespace outbound::testing {

/// A port on 127.0.0.1 where nothing listens: bound by the kernel's choice,
/// read, closed. A connect to it is refused (unless another process takes
/// it meanwhile, which the kernel's port rotation makes unlikely). Throws
/// std::runtime_error when no socket can be bound.
uint16_t closed_port();

} // namespace outbound::testing
