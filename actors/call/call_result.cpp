#include "actors/call/call_result.hpp"

#include "core/request_builder.hpp"
#include "protocol/errors.hpp"
#include "protocol/json_parse.hpp"

#include <optional>
#include <string>
#include <utility>

namespace outbound {
inline namespace call {

namespace {

void replace_all(std::string& s, const std::string& what,
                 const std::string& with) {
  if (what.empty())
    return;
  for (auto pos = s.find(what); pos != std::string::npos;
       pos = s.find(what, pos + with.size()))
    s.replace(pos, what.size(), with);
}

// Empty → null; otherwise the parse under the client's JSON limits, into
// an arena of its own when the call asks for one.
json_parse_result parse_body(const std::string& body, const json_limits& l,
                             bool arena = false) {
  if (body.empty())
    return {};
  if (!arena)
    return parse_json(body, l);
  // `sp` keeps the arena alive until shared: a parse that fails holds no
  // value, and with it no reference to the arena.
  auto [sp, a] = make_json_arena();
  auto r = parse_json(body, l, sp);
  a->share(); // the outcome may reach any thread from here
  return r;
}

// The response_error of a body that did not parse, naming the limit that
// stopped it so the user knows which setting to raise.
call_error unreadable_body(const json_parse_result& r, int status,
                           const client_config& cfg) {
  call_error e;
  e.kind = error_kind::response_error;
  switch (r.error) {
    case json_parse_error::too_deep:
      e.detail = "response body nests deeper than json_max_depth ("
                 + std::to_string(cfg.json_max_depth) + " levels)";
      break;
    case json_parse_error::too_large:
      e.detail = "response body's parsed form exceeds the JSON memory "
                 "bound ("
                 + std::to_string(cfg.response_json_limits().max_bytes)
                 + " bytes)";
      break;
    case json_parse_error::number_out_of_range:
      e.detail = "response body has a " + r.detail;
      break;
    case json_parse_error::inexact_integer:
      e.detail = "response body has an " + r.detail;
      break;
    default:
      e.detail = "response body is not JSON";
      break;
  }
  e.detail += " (HTTP " + std::to_string(status) + ")";
  return e;
}

} // namespace

std::string path_without_query(const std::string& path) {
  return path.substr(0, path.find('?'));
}

void redact(const client_config& cfg, std::string& s) {
  if (cfg.token.empty() || s.empty())
    return;
  // As written and as JSON escapes it: a server's non-string `detail`
  // reaches the error serialized (extract_detail, protocol/errors.cpp), a
  // token with a quote or a backslash in it escaped.
  for (auto& secret : {credential_value(cfg), cfg.token})
    for (auto& form : json_escaped_forms(secret))
      replace_all(s, form, "[redacted]");
}

call_outcome response_outcome(const client_config& cfg,
                              const call_request& call, std::string request_id,
                              int attempts, http_response& resp) {
  call_outcome o;
  o.status = resp.status;
  o.attempts = attempts;
  o.request_id = std::move(request_id);
  auto over_cap = [&] {
    call_error e;
    e.kind = error_kind::response_error;
    e.detail = "response body over max_response_bytes ("
               + std::to_string(
                 call.max_response_bytes.value_or(cfg.max_response_bytes))
               + " bytes)";
    return e;
  };
  std::optional<call_error> err;
  bool success = resp.status >= 200 && resp.status < 300;
  if (call.raw) {
    if (resp.body_over_cap) {
      err = over_cap();
    } else {
      // Raw mode hands over a body it cannot read as null (it promises
      // status and headers), but never one that blew the memory bound.
      // The text of such a body goes along, whole (it is within the cap),
      // with the reason: a `{"a":1e400}` must not vanish silently.
      auto r = parse_body(resp.body, cfg.response_json_limits());
      if (r.error != json_parse_error::too_large) {
        o.body = std::move(r.value);
        if (!r) {
          o.raw_body_error = r.detail;
          o.unreadable_body = std::move(resp.body);
        }
      } else {
        err = unreadable_body(r, resp.status, cfg);
      }
    }
  } else if (success) {
    if (resp.body_over_cap) {
      err = over_cap();
    } else if (auto r = parse_body(resp.body, cfg.response_json_limits(),
                                   call.json_arena)) {
      move_into(o.body, std::move(r.value)); // keeps the arena
    } else {
      err = unreadable_body(r, resp.status, cfg);
      if (call.keep_unreadable_body > 0)
        o.unreadable_body = resp.body.substr(0, call.keep_unreadable_body);
    }
  } else if (resp.status >= 300 && resp.status < 400) {
    auto e = classify_status(resp.status);
    if (auto loc = find_header(resp.headers, "location"))
      e.location = *loc;
    err = std::move(e);
  } else if (resp.body_over_cap) {
    // The error body was dropped at the cap: no detail, the status still
    // maps to its type.
    auto e = classify_status(resp.status);
    e.detail.clear();
    err = std::move(e);
  } else {
    err = classify_status(resp.status,
                          extract_detail(resp.body,
                                         cfg.response_json_limits()));
  }
  if (err) {
    err->status = resp.status;
    err->request_id = o.request_id;
    err->attempts = attempts;
    err->nothing_sent = false; // a response was seen
    err->cause = transport_error_kind::none;
    o.error = std::move(err);
  }
  o.headers = std::move(resp.headers);
  return o;
}

call_outcome error_outcome(call_error e, const std::string& request_id,
                           int attempts) {
  e.request_id = request_id;
  e.attempts = attempts;
  call_outcome o;
  o.status = e.status;
  o.attempts = attempts;
  o.request_id = request_id;
  o.error = std::move(e);
  return o;
}

void finalize_outcome(const client_config& cfg, call_outcome& o) {
  if (!o.error)
    return;
  settle_nothing_billed(*o.error);
  redact(cfg, o.error->detail);
  redact(cfg, o.error->location);
}

client_event call_event(event_kind kind, const std::string& request_id,
                        const std::string& method, const std::string& path,
                        int attempt) {
  client_event ev;
  ev.kind = kind;
  ev.request_id = request_id;
  ev.method = method;
  ev.path = path_without_query(path);
  ev.attempt = attempt;
  return ev;
}

void fill_answered(client_event& ev, const call_outcome& o,
                   int64_t latency_ns, uint64_t response_bytes) {
  ev.status = o.status;
  ev.attempts = o.attempts;
  if (o.error) {
    ev.error = o.error->kind;
    ev.reason = o.error->reason;
  }
  ev.latency_ns = latency_ns;
  ev.response_bytes = response_bytes;
}

void fill_retrying(client_event& ev, const retry_step& step,
                   const http_response* resp) {
  ev.cause = step.cause;
  ev.cause_kind = step.cause_kind;
  ev.delay_ns = step.delay.count();
  if (resp)
    ev.status = resp->status; // a retried status ("status 503") was a response
}

void fill_failed(client_event& ev, const call_error& e, int64_t latency_ns) {
  ev.cause = e.cause == transport_error_kind::none ? to_string(e.kind)
                                                   : to_string(e.cause);
  ev.attempts = e.attempts;
  ev.status = e.status;
  ev.cause_kind = e.cause;
  ev.error = e.kind;
  ev.reason = e.reason;
  ev.latency_ns = latency_ns;
}

} // namespace call
} // namespace outbound
