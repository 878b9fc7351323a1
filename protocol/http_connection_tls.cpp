// The TLS instantiation of the http_connection session (its own TU so that it
// and the plain one compile in parallel).

#include "protocol/detail/http_session.hpp"

namespace outbound::detail {

std::shared_ptr<http_connection>
make_tls_connection(io_runner& io, const url_parts& origin,
                    std::shared_ptr<tls_context> tls) {
  return std::make_shared<http_session<tls_stream>>(io, origin, std::move(tls));
}

} // namespace outbound::detail
