#pragma once

// A scripted fake of the transport port (actors/transport.hpp): it records
// every http_request with the virtual time it arrived, and answers each one
// per a script step: a response, a transport error, or a stall (never
// answer). After the script runs out the last step repeats.

#include "actors/call/hedging.hpp"
#include "actors/messages.hpp"
#include "actors/transport.hpp"
#include "config/client_config.hpp"

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/response_promise.hpp>
#include <caf/stateful_actor.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace outbound::testing {

/// One scripted answer.
struct fake_step {
  enum class kind { respond, fail, stall } what = kind::respond;
  http_response response;
  transport_error_kind error = transport_error_kind::none;
  bool request_sent = false;
  std::string detail;
  /// Answer this long after the request arrived (virtual time); 0 = at once.
  std::chrono::nanoseconds after{0};

  static fake_step status(int code, std::string body = {},
                          header_list headers = {}) {
    fake_step s;
    s.response.status = code;
    s.response.body = std::move(body);
    s.response.headers = std::move(headers);
    return s;
  }
  static fake_step over_cap(int code) {
    auto s = status(code);
    s.response.body_over_cap = true;
    return s;
  }
  static fake_step fail(transport_error_kind k, bool request_sent,
                        std::string detail = "scripted failure") {
    fake_step s;
    s.what = kind::fail;
    s.error = k;
    s.request_sent = request_sent;
    s.detail = std::move(detail);
    return s;
  }
  static fake_step stall() {
    fake_step s;
    s.what = kind::stall;
    return s;
  }
  fake_step& delayed(std::chrono::nanoseconds d) {
    after = d;
    return *this;
  }
};

/// What the fake saw; shared with the test (all on the test thread).
struct fake_log {
  struct entry {
    http_request request;
    caf::actor_clock::time_point at;
  };
  std::vector<entry> requests;
  std::vector<uint64_t> cancels;
  std::vector<caf::actor_clock::time_point> cancel_times;
  std::vector<fake_step> script;
  /// When set, the fake plays a pool at its connection limit: a request
  /// that may not queue (a hedge) is refused with pool_overflow, nothing
  /// sent, after this delay (0: at once, as the real pool does), and is
  /// logged in `refused` instead of `requests`, using no script step.
  std::optional<std::chrono::nanoseconds> refuse_hedges;
  std::vector<http_request> refused;
};

namespace detail {

struct fake_state {
  std::shared_ptr<fake_log> log;
  /// Promises of stalled requests with their exchange ids: never answered
  /// by the script; a cancel answers them with a "cancelled" timeout, as the
  /// real pool does (and so releases the caller the promise refers to).
  std::vector<std::pair<uint64_t, caf::response_promise>> stalled;
  /// Answers scheduled for later (fake_step::after).
  std::vector<std::pair<caf::response_promise, exchange_result>> delayed;
};

inline caf::behavior fake_transport_impl(caf::stateful_actor<fake_state>* self,
                                         std::shared_ptr<fake_log> log) {
  self->state.log = std::move(log);
  return {
    [self](const http_request& req) -> caf::result<exchange_result> {
      auto& st = self->state;
      auto& lg = *st.log;
      if (lg.refuse_hedges && !req.may_queue) {
        lg.refused.push_back(req);
        exchange_result res;
        res.exchange_id = req.exchange_id;
        res.error = transport_error_kind::pool_overflow;
        res.request_sent = false;
        res.detail = "no connection free for a hedge";
        if (lg.refuse_hedges->count() == 0)
          return res;
        st.delayed.emplace_back(self->make_response_promise(), std::move(res));
        self->delayed_send(self, *lg.refuse_hedges, done_atom_v,
                           static_cast<uint64_t>(st.delayed.size() - 1));
        return caf::delegated<exchange_result>{};
      }
      auto index = lg.requests.size();
      lg.requests.push_back({req, self->clock().now()});
      if (lg.script.empty())
        return caf::sec::unexpected_message;
      auto step = lg.script[std::min(index, lg.script.size() - 1)];
      exchange_result res;
      res.exchange_id = req.exchange_id;
      switch (step.what) {
        case fake_step::kind::stall:
          st.stalled.emplace_back(req.exchange_id,
                                  self->make_response_promise());
          return caf::delegated<exchange_result>{};
        case fake_step::kind::fail:
          res.error = step.error;
          res.request_sent = step.request_sent;
          res.detail = step.detail;
          break;
        case fake_step::kind::respond:
          res.request_sent = true;
          res.response = step.response;
          break;
      }
      if (step.after.count() == 0)
        return res;
      st.delayed.emplace_back(self->make_response_promise(), std::move(res));
      self->delayed_send(self, step.after, done_atom_v,
                         static_cast<uint64_t>(st.delayed.size() - 1));
      return caf::delegated<exchange_result>{};
    },
    [self](cancel_atom, uint64_t id) {
      auto& st = self->state;
      st.log->cancels.push_back(id);
      st.log->cancel_times.push_back(self->clock().now());
      for (auto i = st.stalled.begin(); i != st.stalled.end(); ++i) {
        if (i->first == id) {
          exchange_result res;
          res.exchange_id = id;
          res.error = transport_error_kind::timeout;
          res.request_sent = true;
          res.detail = "cancelled";
          i->second.deliver(std::move(res));
          st.stalled.erase(i);
          break;
        }
      }
    },
    [self](done_atom, uint64_t index) {
      auto& [rp, res] = self->state.delayed.at(index);
      rp.deliver(res);
    },
  };
}

} // namespace detail

/// The settings of the hedged-call tests behind the fake transport
/// (tests/unit/actors/call/): 1 s attempts, a 5 s deadline, 3 attempts
/// backing off 0.1 s to 1 s, 429/502/503/504 retried; a hedge after the
/// 10 ms warmup delay, and a budget that is not the subject (1000 rps
/// estimated: 100 tokens/s, burst 200; an auto-estimated rate would follow
/// the tests' few requests and starve the hedges, as httpx-hedged warns).
inline void hedged_call_defaults(client_config& cfg, hedging_options& h) {
  cfg.base_url = "http://127.0.0.1:8080";
  cfg.timeout = 1.0;
  cfg.deadline = 5.0;
  cfg.retry.max_attempts = 3;
  cfg.retry.base_backoff = 0.1;
  cfg.retry.max_backoff = 1.0;
  cfg.retry.retry_statuses = {429, 502, 503, 504};
  h.config.warmup_delay = 0.010;
  h.config.estimated_rps = 1000.0;
}

/// Spawns a fake transport that follows `log->script`.
inline transport_actor spawn_fake_transport(caf::actor_system& sys,
                                            std::shared_ptr<fake_log> log) {
  return caf::actor_cast<transport_actor>(
    sys.spawn(detail::fake_transport_impl, std::move(log)));
}

} // namespace outbound::testing
