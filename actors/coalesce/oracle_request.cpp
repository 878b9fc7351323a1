#include "actors/coalesce/oracle_request.hpp"

#include "config/config_error.hpp"

#include <boost/json/serialize.hpp>

namespace outbound {
inline namespace coalesce {

namespace json = boost::json;

client_config oracle_request_config(const coalesce_config& cfg) {
  client_config rc;
  rc.token = cfg.token;
  rc.token_header = cfg.token_header;
  rc.token_scheme = cfg.token_scheme;
  rc.default_headers = cfg.default_headers;
  rc.max_response_bytes = max_oracle_body;
  return rc;
}

url_parts oracle_base_url(const oracle_endpoint& ep) {
  url_parts u;
  u.scheme = ep.scheme;
  u.host = ep.host;
  u.port = ep.port;
  return u;
}

call_request oracle_call(const rpc_plan& plan, std::string request_id) {
  call_request c;
  c.method = "POST";
  // {"count":N} or {"count":N,"key":"..."}: written directly (no JSON tree
  // per RPC); the key is escaped by Boost.JSON's serializer.
  c.body = "{\"count\":";
  c.body += std::to_string(plan.count);
  if (plan.kind == waiter_kind::ts) {
    c.path = "/v1/ts";
  } else {
    c.path = "/v1/seq";
    c.body += ",\"key\":";
    c.body += json::serialize(json::string_view{plan.key});
  }
  c.body += '}';
  c.has_body = true;
  c.idempotent = plan.kind == waiter_kind::ts;
  c.request_id = std::move(request_id);
  c.max_response_bytes = max_oracle_body;
  return c;
}

built_request build_oracle_request(const client_config& rc,
                                   const oracle_endpoint& ep,
                                   const rpc_plan& plan, std::string request_id,
                                   core::rng& rng, int retry_count) {
  auto b = build_request(rc, oracle_base_url(ep),
                         oracle_call(plan, std::move(request_id)), rng);
  if (b.ok()) {
    b.request.max_body_bytes = max_oracle_body;
    set_retry_count(b.request.headers, retry_count);
  }
  return b;
}

void check_oracle_requests(const coalesce_config& cfg) {
  auto eps = cfg.parsed_endpoints();
  if (eps.empty())
    return; // validate() names the endpoints
  core::rng rng{1};
  rpc_plan ts;
  ts.kind = waiter_kind::ts;
  ts.count = 1;
  rpc_plan seq;
  seq.kind = waiter_kind::seq;
  seq.key = "k";
  seq.count = 1;
  // The credential alone, then with the default headers: the first refusal
  // names its field.
  auto rc = oracle_request_config(cfg);
  auto headers = std::move(rc.default_headers);
  rc.default_headers.clear();
  for (const char* field : {"coalesce.token_header", "coalesce.default_headers"}) {
    for (auto* p : {&ts, &seq}) {
      auto b = build_oracle_request(rc, eps.front(), *p, {}, rng);
      if (b.error)
        throw config_error(field, b.error->detail);
    }
    rc.default_headers = headers;
  }
}

} // namespace coalesce
} // namespace outbound
