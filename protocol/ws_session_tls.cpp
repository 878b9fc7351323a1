// The TLS instantiation of the WebSocket client session (its own TU so that
// it and the plain one compile in parallel).

#include "protocol/detail/ws_session_impl.hpp"

namespace outbound::detail {

std::shared_ptr<ws_session>
make_tls_ws_session(io_runner& io, uint64_t id, const ws_options& opts,
                    ws_session::handler h, std::shared_ptr<tls_context> tls) {
  auto s = std::make_shared<ws_session_impl<tls_stream>>(io, id, opts,
                                                         std::move(h),
                                                         std::move(tls));
  s->start();
  return s;
}

} // namespace outbound::detail
