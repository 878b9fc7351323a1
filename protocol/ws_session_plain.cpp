// The plain-TCP instantiation of the WebSocket client session (its own TU so
// that it and the TLS one compile in parallel).

#include "protocol/detail/ws_session_impl.hpp"

namespace outbound::detail {

std::shared_ptr<ws_session> make_plain_ws_session(io_runner& io, uint64_t id,
                                                  const ws_options& opts,
                                                  ws_session::handler h) {
  auto s = std::make_shared<ws_session_impl<plain_stream>>(io, id, opts,
                                                           std::move(h), nullptr);
  s->start();
  return s;
}

} // namespace outbound::detail
