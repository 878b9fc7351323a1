// Fuzz target: the feed session's reading of the server's answer to the
// WebSocket upgrade (protocol/detail/ws_session_impl.hpp: Beast's response
// parser with the session's 64 KiB header limit, then ws_wire.hpp
// check_upgrade_response, RFC 6455 4.1). Input: the server's bytes.

#include "protocol/http_types.hpp"
#include "protocol/ws_wire.hpp"

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>

#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace http = boost::beast::http;
  using namespace outbound;
  // A fixed key (RFC 6455 4.1's example), so that a valid accept value can
  // be in the corpus.
  static const std::string key = "dGhlIHNhbXBsZSBub25jZQ==";
  http::response_parser<http::empty_body> parser;
  parser.header_limit(64 * 1024);
  parser.eager(false);
  boost::system::error_code ec;
  std::size_t off = 0;
  while (off < size && !parser.is_header_done()) {
    auto n = parser.put(boost::asio::buffer(data + off, size - off), ec);
    if (ec || n == 0)
      break;
    off += n;
  }
  if (ec || !parser.is_header_done())
    return 0;
  const auto& res = parser.get();
  header_list headers;
  for (const auto& field : res)
    headers.emplace_back(std::string{field.name_string()},
                         std::string{field.value()});
  (void)detail::check_upgrade_response(res.version(), res.result_int(), headers,
                                       key);
  return 0;
}
