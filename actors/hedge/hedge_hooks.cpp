#include "actors/hedge/hedge_hooks.hpp"

#include <caf/typed_event_based_actor.hpp>

namespace outbound {
inline namespace hedge {

namespace {

hedge_hook_actor::behavior_type hooks_impl(hedge_hook_actor::pointer,
                                           hedge_hook_callbacks cbs) {
  return {
    [cbs](const hedge_fired& e) {
      if (cbs.on_hedge_fired) {
        try {
          cbs.on_hedge_fired(e.key);
        } catch (...) {
          // A hook never fails a call.
        }
      }
    },
    [cbs](const circuit_opened& e) {
      if (cbs.on_circuit_open) {
        try {
          cbs.on_circuit_open(to_string(e.scope), e.key);
        } catch (...) {
          // A hook never fails a call.
        }
      }
    },
  };
}

} // namespace

hedge_hook_actor spawn_hedge_hook_callbacks(caf::actor_system& sys,
                                            hedge_hook_callbacks cbs) {
  if (cbs.detached)
    return sys.spawn<caf::detached>(hooks_impl, std::move(cbs));
  return sys.spawn(hooks_impl, std::move(cbs));
}

} // namespace hedge
} // namespace outbound
