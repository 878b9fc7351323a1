#include "actors/call/call_actor.hpp"

#include "actors/call/request_builder.hpp"
#include "actors/call/retry_state.hpp"

#include <boost/json/parse.hpp>
#include <caf/actor_cast.hpp>
#include <caf/sec.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <algorithm>
#include <cctype>
#include <optional>
#include <string>

namespace outbound {

const char* to_string(event_kind k) {
  switch (k) {
    case event_kind::sending: return "sending";
    case event_kind::retrying: return "retrying";
    case event_kind::redialing: return "redialing";
    case event_kind::answered: return "answered";
    case event_kind::failed: return "failed";
  }
  return "unknown";
}

namespace {

struct call_state {
  std::shared_ptr<const call_context> ctx;
  call_rng rng;
  caf::typed_response_promise<call_outcome> rp;
  bool started = false;
  bool done = false;
  call_request call;
  /// The request as built once; each send copies it and adds the per-send
  /// fields, so every attempt carries the same request id and body.
  http_request base;
  std::string request_id;
  std::optional<retry_state> retry;
  retry_time start;
  /// Number of the current send (attempts, redials and local retries); the
  /// stale-id of timers and transport answers.
  uint64_t send_id = 0;
  uint64_t exchange_id = 0;
  bool in_flight = false;
  int attempt = 0;

  static inline const char* name = "outbound.call";
};

using self_ptr = call_actor::stateful_pointer<call_state>;

// Replaces the value of `name` (case-insensitive) or appends the header.
void set_header(header_list& hs, const std::string& name, std::string value) {
  for (auto& [k, v] : hs) {
    if (k.size() == name.size()
        && std::equal(k.begin(), k.end(), name.begin(), [](char a, char b) {
             return std::tolower(static_cast<unsigned char>(a))
                    == std::tolower(static_cast<unsigned char>(b));
           })) {
      v = std::move(value);
      return;
    }
  }
  hs.emplace_back(name, std::move(value));
}

std::string path_without_query(const std::string& path) {
  return path.substr(0, path.find('?'));
}

void replace_all(std::string& s, const std::string& what,
                 const std::string& with) {
  if (what.empty())
    return;
  for (auto pos = s.find(what); pos != std::string::npos;
       pos = s.find(what, pos + with.size()))
    s.replace(pos, what.size(), with);
}

// Belt and braces: whatever a server or a transport echoes, the credential
// never leaves the call actor inside a text.
void redact(const client_config& cfg, std::string& s) {
  if (cfg.token.empty())
    return;
  replace_all(s, credential_value(cfg), "[redacted]");
  replace_all(s, cfg.token, "[redacted]");
}

client_event make_event(self_ptr self, event_kind kind) {
  auto& st = self->state;
  client_event ev;
  ev.kind = kind;
  ev.request_id = st.request_id;
  ev.method = st.base.method.empty() ? st.call.method : st.base.method;
  ev.path = path_without_query(st.call.path);
  ev.attempt = st.attempt;
  return ev;
}

void emit(self_ptr self, client_event ev) {
  auto& st = self->state;
  if (!st.ctx->observer)
    return;
  redact(st.ctx->cfg, ev.cause);
  self->send(st.ctx->observer, std::move(ev));
}

int64_t latency_ns(self_ptr self) {
  auto& st = self->state;
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
           self->clock().now() - st.start)
    .count();
}

void deliver(self_ptr self, call_outcome o) {
  auto& st = self->state;
  if (st.done)
    return;
  st.done = true;
  redact(st.ctx->cfg, o.error.detail);
  redact(st.ctx->cfg, o.error.location);
  st.rp.deliver(std::move(o));
  self->quit();
}

void finish_error(self_ptr self, call_error e) {
  auto& st = self->state;
  e.request_id = st.request_id;
  if (st.retry)
    e.attempts = st.retry->attempts();
  auto ev = make_event(self, event_kind::failed);
  ev.cause = e.cause == transport_error_kind::none ? to_string(e.kind)
                                                   : to_string(e.cause);
  ev.attempts = e.attempts;
  ev.status = e.status;
  ev.outcome = to_string(e.kind);
  ev.latency_ns = latency_ns(self);
  emit(self, std::move(ev));
  call_outcome o;
  o.ok = false;
  o.status = e.status;
  o.attempts = e.attempts;
  o.request_id = st.request_id;
  o.error = std::move(e);
  deliver(self, std::move(o));
}

// Empty → null; not JSON → std::nullopt.
std::optional<boost::json::value> parse_body(const std::string& body) {
  if (body.empty())
    return boost::json::value{};
  boost::system::error_code ec;
  auto v = boost::json::parse(body, ec);
  if (ec)
    return std::nullopt;
  return v;
}

void finish_response(self_ptr self, http_response resp) {
  auto& st = self->state;
  auto& cfg = st.ctx->cfg;
  call_outcome o;
  o.status = resp.status;
  o.attempts = st.retry->attempts();
  o.request_id = st.request_id;
  auto over_cap = [&] {
    call_error e;
    e.kind = error_kind::response_error;
    e.detail = "response body over max_response_bytes ("
               + std::to_string(cfg.max_response_bytes) + " bytes)";
    return e;
  };
  std::optional<call_error> err;
  bool success = resp.status >= 200 && resp.status < 300;
  if (st.call.raw) {
    if (resp.body_over_cap) {
      err = over_cap();
    } else {
      o.ok = true;
      o.body = parse_body(resp.body).value_or(boost::json::value{});
    }
  } else if (success) {
    if (resp.body_over_cap) {
      err = over_cap();
    } else if (auto v = parse_body(resp.body)) {
      o.ok = true;
      o.body = std::move(*v);
    } else {
      call_error e;
      e.kind = error_kind::response_error;
      e.detail = "response body is not JSON (HTTP " + std::to_string(resp.status)
                 + ")";
      err = std::move(e);
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
    err = classify_status(resp.status, extract_detail(resp.body));
  }
  if (err) {
    err->status = resp.status;
    err->request_id = st.request_id;
    err->attempts = o.attempts;
    err->nothing_sent = false; // a response was seen
    err->cause = transport_error_kind::none;
    o.ok = false;
    o.error = std::move(*err);
  }
  auto ev = make_event(self, event_kind::answered);
  ev.status = resp.status;
  ev.attempts = o.attempts;
  ev.outcome = o.ok ? "ok" : to_string(o.error.kind);
  ev.latency_ns = latency_ns(self);
  emit(self, std::move(ev));
  o.headers = std::move(resp.headers);
  deliver(self, std::move(o));
}

void send_attempt(self_ptr self);

void act(self_ptr self, const retry_step& step, http_response* resp) {
  auto& st = self->state;
  switch (step.decision) {
    case retry_decision::answer:
      finish_response(self, std::move(*resp));
      return;
    case retry_decision::retry_after:
    case retry_decision::retry_local: {
      auto ev = make_event(self, event_kind::retrying);
      ev.cause = step.cause;
      ev.delay_ns = step.delay.count();
      emit(self, std::move(ev));
      auto me = caf::actor_cast<call_actor>(self);
      if (step.delay.count() == 0)
        self->send(me, retry_atom_v, st.send_id);
      else
        self->delayed_send(me, step.delay, retry_atom_v, st.send_id);
      return;
    }
    case retry_decision::redial: {
      auto ev = make_event(self, event_kind::redialing);
      ev.cause = step.cause;
      emit(self, std::move(ev));
      send_attempt(self);
      return;
    }
    case retry_decision::give_up_attempts:
    case retry_decision::give_up_deadline:
    case retry_decision::not_retryable:
      if (step.answer_with_response && resp)
        finish_response(self, std::move(*resp));
      else
        finish_error(self, step.error);
      return;
  }
}

void on_result(self_ptr self, uint64_t send_id, exchange_result& r) {
  auto& st = self->state;
  if (st.done || !st.in_flight || send_id != st.send_id)
    return; // stale: a later send is current
  st.in_flight = false;
  auto step = st.retry->on_result(r, self->clock().now(),
                                  st.ctx->wall_clock(), st.rng);
  act(self, step, &r.response);
}

void on_failure(self_ptr self, uint64_t send_id, const caf::error& err) {
  auto& st = self->state;
  if (st.done || !st.in_flight || send_id != st.send_id)
    return;
  st.in_flight = false;
  retry_step step;
  if (err == caf::sec::request_timeout) {
    // A timed-out connection may be stuck mid-response: the transport must
    // close it, never pool it again. A late answer is dropped by CAF.
    self->send(st.ctx->transport, cancel_atom_v, st.exchange_id);
    step = st.retry->on_attempt_timeout(self->clock().now(), st.rng);
  } else {
    // The transport actor is gone or refused the message: a broken exchange
    // whose request may have left.
    exchange_result r;
    r.exchange_id = st.exchange_id;
    r.error = transport_error_kind::interrupted;
    r.request_sent = true;
    r.detail = "transport unavailable: " + self->system().render(err);
    step = st.retry->on_result(r, self->clock().now(), st.ctx->wall_clock(),
                               st.rng);
  }
  act(self, step, nullptr);
}

void send_attempt(self_ptr self) {
  auto& st = self->state;
  auto plan = st.retry->begin_attempt(self->clock().now());
  if (!plan.send) {
    finish_error(self, plan.error);
    return;
  }
  auto send_id = ++st.send_id;
  st.exchange_id = (static_cast<uint64_t>(self->id()) << 20)
                   | (send_id & 0xFFFFF);
  st.attempt = plan.attempt;
  http_request req = st.base;
  req.exchange_id = st.exchange_id;
  req.timeout_ns = plan.budget.count();
  req.max_body_bytes = st.ctx->cfg.max_response_bytes;
  req.fresh_connection = plan.fresh_connection;
  if (plan.retry_count > 0) {
    auto n = std::to_string(plan.retry_count);
    set_header(req.headers, "x-retry-count", n);
  }
  emit(self, make_event(self, event_kind::sending));
  st.in_flight = true;
  self->request(st.ctx->transport, plan.budget, std::move(req))
    .then([self, send_id](exchange_result& r) { on_result(self, send_id, r); },
          [self, send_id](caf::error& err) {
            on_failure(self, send_id, err);
          });
}

void start(self_ptr self, call_request call) {
  auto& st = self->state;
  st.started = true;
  st.start = self->clock().now();
  st.call = std::move(call);
  auto built = build_request(st.ctx->cfg, st.ctx->url, st.call, st.rng);
  st.request_id = built.request_id;
  if (!built.ok) {
    finish_error(self, built.error);
    return;
  }
  st.base = std::move(built.request);
  bool idempotent = st.call.idempotent.value_or(
    method_is_idempotent(st.base.method));
  st.retry.emplace(st.ctx->cfg, idempotent, st.start);
  send_attempt(self);
}

call_actor::behavior_type call_impl(self_ptr self,
                                    std::shared_ptr<const call_context> ctx,
                                    uint64_t seed) {
  self->state.ctx = std::move(ctx);
  self->state.rng.seed(seed);
  return {
    [self](call_request& req) -> caf::typed_response_promise<call_outcome> {
      auto& st = self->state;
      auto rp = self->make_response_promise<call_outcome>();
      if (st.started) {
        // One call per actor: a second request is a programming error.
        call_outcome o;
        o.error.kind = error_kind::config_error;
        o.error.detail = "a call actor runs exactly one call";
        o.error.nothing_sent = true;
        rp.deliver(std::move(o));
        return rp;
      }
      st.rp = rp;
      start(self, std::move(req));
      return rp;
    },
    [self](retry_atom, uint64_t send_id) {
      auto& st = self->state;
      if (st.done || st.in_flight || send_id != st.send_id)
        return;
      send_attempt(self);
    },
  };
}

} // namespace

call_actor spawn_call_actor(caf::actor_system& sys,
                            std::shared_ptr<const call_context> ctx,
                            uint64_t seed) {
  return sys.spawn(call_impl, std::move(ctx), seed);
}

} // namespace outbound
