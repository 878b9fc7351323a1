// Fuzz target: how a call reads and maps an HTTP/1.1 response. The bytes go
// through Beast's response parser exactly as protocol/detail/http_session.hpp
// drives it (64 KiB header limit, interim 1xx answers skipped, a status
// below 100 or a 101 refused, Content-Length checked against the body cap
// after the header, then the cap as body_limit), and the response is mapped
// as the call actor maps it (protocol/errors.hpp classify_status and
// extract_detail, the JSON body, the Location of a 3xx) and judged by the
// retry loop (actors/call/retry_state.hpp, Retry-After and retry-after-ms
// included). Input: one flag byte (method, idempotency, body cap), then the
// server's bytes.

#include "actors/call/retry_state.hpp"
#include "config/client_config.hpp"
#include "protocol/errors.hpp"
#include "protocol/http_types.hpp"
#include "protocol/http_wire.hpp"
#include "protocol/json_parse.hpp"

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>

namespace {

namespace http = boost::beast::http;
using parser_t = http::response_parser<http::string_body>;

/// The end of the input is the peer's EOF, handled as Beast's read does
/// (http/impl/read.hpp): end_of_stream before any byte, else put_eof.
void eof(parser_t& p, boost::system::error_code& ec) {
  if (!p.got_some())
    ec = http::error::end_of_stream;
  else
    p.put_eof(ec);
}

/// Feeds bytes [off, size) to `p` until `done(p)` or an error; returns the
/// new offset. At the end of the input the parser sees EOF.
template <class Done>
std::size_t feed(parser_t& p, const uint8_t* data, std::size_t size,
                 std::size_t off, boost::system::error_code& ec, Done done) {
  while (!done(p)) {
    if (off == size) {
      eof(p, ec);
      return off;
    }
    auto n = p.put(boost::asio::buffer(data + off, size - off), ec);
    off += n;
    if (ec == http::error::need_more) {
      // Beast was given every byte left and wants more: the peer closed.
      ec = {};
      eof(p, ec);
      return off;
    }
    if (ec || n == 0)
      return off;
  }
  return off;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace outbound;
  if (size == 0)
    return 0;
  uint8_t flags = data[0];
  ++data;
  --size;
  bool head = flags & 1;
  bool idempotent = flags & 2;
  static constexpr uint64_t caps[] = {0, 16, 4096, 64 * 1024};
  uint64_t cap = caps[(flags >> 2) & 3];

  exchange_result res;
  res.request_sent = true;
  std::size_t off = 0;
  std::optional<parser_t> p;
  boost::system::error_code ec;
  for (int interim = 0;; ++interim) {
    p.emplace();
    p->header_limit(detail::max_header_bytes);
    p->body_limit(boost::none);
    if (head)
      p->skip(true);
    off = feed(*p, data, size, off, ec,
               [](parser_t& q) { return q.is_header_done(); });
    if (ec || !p->is_header_done())
      return 0; // interrupted: nothing to map
    int status = p->get().result_int();
    if (status < 100 || status == 101)
      return 0;
    if (status >= 200)
      break;
    if (interim > 1000)
      std::abort(); // interim answers are consumed, never looped on
  }
  int status = p->get().result_int();
  auto fill_head = [&] {
    res.response.status = status;
    for (const auto& field : p->get())
      res.response.headers.emplace_back(std::string{field.name_string()},
                                        std::string{field.value()});
  };
  bool over_cap = false;
  if (!p->is_done()) {
    auto cl = p->content_length();
    if (cl && *cl > cap) {
      over_cap = true;
    } else {
      p->body_limit(cap);
      off = feed(*p, data, size, off, ec,
                 [](parser_t& q) { return q.is_done(); });
      if (ec == http::error::body_limit)
        over_cap = true;
      else if (ec || !p->is_done())
        return 0;
    }
  }
  if (over_cap) {
    if (status >= 200 && status < 300)
      return 0; // too_large
    fill_head();
    res.response.body_over_cap = true;
  } else {
    fill_head();
    res.response.body = p->get().body();
    if (res.response.body.size() > cap)
      std::abort(); // the cap holds
  }

  // The call actor's mapping (actors/call/call_actor.cpp finish_response).
  const auto& r = res.response;
  if (r.status >= 200 && r.status < 300) {
    json_limits limits;
    // client_config's defaults: min(json_memory_factor * cap,
    // json_memory_max_bytes).
    limits.max_bytes = std::min<std::size_t>(16 * cap, 192u << 20);
    auto parsed = parse_json(r.body, limits);
    if (parsed && !parsed.value.is_null())
      (void)boost::json::serialize(parsed.value);
  } else {
    auto e = classify_status(r.status, extract_detail(r.body));
    (void)e.message();
    (void)find_header(r.headers, "location");
  }

  // The retry loop's verdict, Retry-After included.
  client_config cfg;
  retry_time start{};
  wall_time wall{std::chrono::seconds{1767225600}};
  retry_state rs{cfg, idempotent, start};
  (void)rs.begin_attempt(start);
  call_rng rng{7};
  auto step = rs.on_result(res, start, wall, rng);
  if (step.delay.count() < 0)
    std::abort(); // a wait is never negative
  return 0;
}
