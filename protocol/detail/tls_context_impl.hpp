#pragma once

// Private to protocol/ .cpp files: the definition of tls_context::impl.

#include "protocol/tls_context.hpp"

#include <boost/asio/ssl/context.hpp>

namespace outbound {
inline namespace protocol {

struct tls_context::impl {
  impl() : ctx(boost::asio::ssl::context::tls_client) {
  }

  boost::asio::ssl::context ctx;
};

} // namespace protocol
} // namespace outbound
