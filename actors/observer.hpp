#pragma once

#include "actors/messages.hpp"

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

namespace outbound {

/// Typed interface of an observer of a service client: it receives every
/// client_event of every call, in order per call.
using observer_actor = caf::typed_actor<caf::reacts_to<client_event>>;

} // namespace outbound
