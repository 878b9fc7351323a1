#include "actors/pool/connection_pool.hpp"

#include "protocol/io_runner.hpp"

#include <caf/event_based_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

namespace outbound {

// Minimal placeholder so that dependants link; the real pool replaces it.
transport_actor spawn_connection_pool(caf::actor_system& sys,
                                      const client_config& cfg,
                                      std::shared_ptr<io_runner> io) {
  cfg.validate();
  if (!io)
    io = io_runner::shared();
  return sys.spawn([io](transport_actor::pointer) -> transport_actor::behavior_type {
    return {
      [](const http_request& req) {
        exchange_result res;
        res.exchange_id = req.exchange_id;
        res.error = transport_error_kind::config;
        res.detail = "connection pool not implemented yet";
        return res;
      },
      [](cancel_atom, uint64_t) {},
    };
  });
}

} // namespace outbound
