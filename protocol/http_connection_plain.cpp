// The plain-TCP instantiation of the http_connection session (its own TU so
// that it and the TLS one compile in parallel).

#include "protocol/detail/http_session.hpp"

namespace outbound::detail {

std::shared_ptr<http_connection>
make_plain_connection(io_runner& io, const url_parts& origin) {
  return std::make_shared<http_session<plain_stream>>(io, origin, nullptr);
}

} // namespace outbound::detail
