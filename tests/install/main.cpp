// Consumer of the installed outbound package: builds a config, validates it,
// hosts a service client in a CAF actor system and calls a port where
// nothing listens. Exits 0 iff the outcome is service_unavailable after
// exactly one attempt with nothing sent.

#include "actors/client/service_client.hpp"
#include "actors/messages.hpp"
#include "actors/feed/reconnect_backoff.hpp" // includes core/backoff.hpp
#include "actors/system/system_setup.hpp"
#include "config/client_config.hpp"
#include "protocol/errors.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include <chrono>
#include <iostream>

int main() {
  outbound::client_config cfg;
  cfg.base_url = "http://127.0.0.1:1"; // nothing listens on port 1
  cfg.retry.max_attempts = 1;
  cfg.timeout = 2.0;
  cfg.deadline = 5.0;
  cfg.validate();

  caf::actor_system_config sys_cfg;
  outbound::configure(sys_cfg);
  caf::actor_system sys{sys_cfg};
  std::cout << "consumer: scheduler " << outbound::describe_scheduler(sys)
            << '\n';
  auto client = outbound::make_service_client(sys, cfg);

  outbound::call_request req;
  req.path = "/v1/ping";
  int rc = 1;
  caf::scoped_actor self{sys};
  self->request(client, std::chrono::seconds{10}, req)
    .receive(
      [&](const outbound::call_outcome& out) {
        if (out.ok()) {
          std::cerr << "consumer: unexpected success, status " << out.status
                    << '\n';
          return;
        }
        std::cout << "consumer: " << out.error->message() << '\n';
        if (out.error->kind == outbound::error_kind::service_unavailable
            && out.error->status == 0 && out.error->attempts == 1
            && out.error->nothing_sent)
          rc = 0;
        else
          std::cerr << "consumer: expected service_unavailable after 1 "
                       "attempt with nothing sent\n";
      },
      [&](const caf::error& err) {
        std::cerr << "consumer: request failed: " << sys.render(err) << '\n';
      });
  return rc;
}
