// The plain-TCP instantiation of the http_connection session (its own TU so
// that it and the TLS one compile in parallel).

#include "protocol/detail/http_session.hpp"

namespace outbound::detail {

std::shared_ptr<http_connection>
make_plain_connection(io_runner& io, const url_parts& origin) {
  if (io.get().one_thread())
    return std::make_shared<http_session<http_io_executor, false>>(io, origin,
                                                                   nullptr);
  return std::make_shared<http_session<strand_type, false>>(io, origin,
                                                            nullptr);
}

} // namespace outbound::detail
