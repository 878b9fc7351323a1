#pragma once

// Private to hub/*.cpp: the entry point of a WebSocket session (hub_ws.cpp),
// called by the HTTP session (hub_http.cpp) when a request asks to upgrade.

#include "hub/hub_impl.hpp"

#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

namespace outbound {

/// Accepts the upgrade `req` on `stream` and serves `tier` until the peer,
/// a fault or the hub ends it.
void hub_start_ws_session(
  hub::impl& h, boost::beast::tcp_stream stream,
  boost::beast::http::request<boost::beast::http::string_body> req,
  hub_tier tier);

} // namespace outbound
