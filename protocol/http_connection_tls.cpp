// The TLS instantiation of the http_connection session (its own TU so that it
// and the plain one compile in parallel).

#include "protocol/detail/http_session.hpp"

namespace outbound::detail {

std::shared_ptr<http_connection>
make_tls_connection(io_runner& io, const url_parts& origin,
                    std::shared_ptr<tls_context> tls) {
  if (io.get().one_thread())
    return std::make_shared<http_session<http_io_executor, true>>(
      io, origin, std::move(tls));
  return std::make_shared<http_session<strand_type, true>>(io, origin,
                                                           std::move(tls));
}

} // namespace outbound::detail
