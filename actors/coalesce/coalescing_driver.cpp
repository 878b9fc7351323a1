#include "actors/coalesce/coalescing_driver.hpp"

#include "actors/coalesce/detail/batcher_impl.hpp"
#include "actors/coalesce/oracle_body.hpp"
#include "actors/coalesce/oracle_request.hpp"
#include "actors/handler_guard.hpp"
#include "actors/pool/connection_pool.hpp"
#include "core/classify.hpp"
#include "protocol/tls_context.hpp"

#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <unordered_map>
#include <variant>
#include <vector>

namespace outbound {
inline namespace coalesce {

namespace {

/// Slack on top of an attempt's budget before the driver's own timer gives
/// up on a transport that did not answer (the transport's own timeout, a
/// `timeout` error, normally comes first and is classified better).
constexpr std::chrono::milliseconds attempt_slack{50};

/// An entry of the driver's deadline table: a caller's own timeout
/// (`token` 0, `id` the waiter) or an attempt's time limit (`id` the RPC,
/// `token` its attempt's token, never 0).
struct due_entry {
  uint64_t id = 0;
  uint64_t token = 0;
};

/// Callers' deadlines and attempts' time limits by due time. One timer
/// serves them all (the earliest due time is armed, and a later entry arms
/// nothing while it is pending), instead of one clock-thread event per
/// caller and per attempt that fired, stale, for every one answered in
/// time (the transport answers within the attempt's budget: the limit is a
/// backstop).
using deadline_table = std::multimap<coalesce_time, due_entry>;

/// What the driver keeps of a caller, in the batcher's waiter table (its
/// payload): one table per caller, a slab named by the batcher's ids.
struct waiter_slot {
  caf::typed_response_promise<coalesce_reply> rp;
  /// Its entry in driver_state::deadlines, if it has a timeout.
  std::optional<deadline_table::iterator> due;
};

/// Answers `w`'s caller with service_unavailable and `detail` if nothing
/// answered it yet. Never throws: it runs while a throw unwinds (see
/// unanswered_guard) and when the driver terminates.
void answer_if_pending(waiter_slot& w, const char* detail) noexcept {
  try {
    if (!w.rp.pending())
      return;
    coalesce_reply r;
    r.error.emplace();
    r.error->kind = error_kind::service_unavailable;
    r.error->detail = detail;
    w.rp.deliver(std::move(r));
  } catch (...) {
    // Out of memory while answering: nothing more can be done for it.
  }
}

using driver_batcher = basic_batcher<waiter_slot>;
using driver_delivery = driver_batcher::delivery_type;

/// An endpoint's transport and the endpoint itself, parsed once.
struct endpoint_link {
  transport_actor transport;
  oracle_endpoint ep;
};

/// One batched RPC on its way through leader discovery.
struct rpc_run {
  rpc_plan plan;
  std::optional<discovery_call> dc;
  /// The x-request-id of every attempt of this RPC (see start_rpc).
  std::string request_id;
  /// Current attempt / backoff; stale answers and timers carry old tokens.
  uint64_t token = 0;
  uint64_t exchange_id = 0;
  transport_actor transport;
  bool in_exchange = false;
  /// The attempt's time limit in driver_state::deadlines while in exchange.
  std::optional<deadline_table::iterator> limit;
  /// The transport error of the last answered attempt (none: an HTTP
  /// answer), to tell a TLS failure from a configuration one.
  transport_error_kind last_error = transport_error_kind::none;
  /// Some attempt may have reached a server (bytes written or an answer):
  /// a failed RPC's waiters get nothing_sent = !maybe_sent.
  bool maybe_sent = false;
  /// The caller's error kind when the attempt could not even be made (no
  /// transport): config_error, or service_unavailable for an internal
  /// failure.
  std::optional<error_kind> fatal_kind;
};

struct driver_state {
  std::optional<driver_batcher> batches;
  std::optional<leader_state> leaders;
  coalesce_rng rng;
  /// Request ids only (its own generator: the worklist offsets and the
  /// jitter drawn from `rng` stay what they were for a given seed).
  core::rng id_rng;
  coalesce_config cfg;
  /// cfg's credential and default headers as the request builder takes
  /// them (oracle_request_config).
  client_config request_cfg;
  coalesce_options opts;
  deadline_table deadlines;
  /// Due time of the deadline timer pending, if any (a later one is not
  /// armed while an earlier one is pending).
  std::optional<coalesce_time> deadline_armed;
  std::unordered_map<uint64_t, rpc_run> rpcs;
  /// pump's list of RPCs to start, kept for its memory (pump lends it out
  /// while it runs: starting an RPC may pump again).
  std::vector<rpc_plan> ready;
  /// The transport of each endpoint in use, with the endpoint parsed once
  /// (an attempt builds its request from it).
  std::unordered_map<std::string, endpoint_link> transports;
  uint64_t next_token = 1;
  uint64_t next_exchange = 1;
  /// The cold-start flush armed, if any (a later one is not re-armed).
  std::optional<coalesce_time> flush_armed;
  uint64_t flush_token = 0;
  /// A `(poll_atom, 0)` to itself is queued: it pumps after the messages
  /// already in the mailbox (deferred_pump).
  bool pump_queued = false;
  coalesce_stats stats;

  /// Runs when the driver terminates (any exit reason): every caller still
  /// waiting is answered at once instead of waiting for its own timeout,
  /// and the pools the driver spawned itself end with it (on a CAF worker,
  /// while the system is alive; a transport from `opts.transports` is the
  /// user's).
  ~driver_state() {
    if (!opts.transports)
      for (auto& [key, link] : transports)
        caf::anon_send_exit(link.transport, caf::exit_reason::user_shutdown);
    if (!batches)
      return;
    batches->for_each_payload([](uint64_t, waiter_slot& w) {
      answer_if_pending(w, "coalescing driver stopped");
    });
  }

  static inline const char* name = "outbound.coalescing_driver";
};

/// The driver's own interface: the public one plus its timers (spawned with
/// this one, handed out as coalescing_driver_actor): `(timeout_atom, due)`
/// the deadline timer (callers' timeouts and attempts' time limits) armed
/// for `due` (nanoseconds on the actor clock), `(retry_atom, rpc_id,
/// token)` a backoff's end, `(poll_atom, token)` the cold-start flush
/// (token 0: a deferred pump, see deferred_pump).
using driver_impl_actor = coalescing_driver_actor::extend<
  caf::reacts_to<timeout_atom, uint64_t>,
  caf::reacts_to<retry_atom, uint64_t, uint64_t>,
  caf::reacts_to<poll_atom, uint64_t>>;

using self_ptr = driver_impl_actor::stateful_pointer<driver_state>;

coalesce_time now_of(self_ptr self) {
  return self->clock().now();
}

call_error make_error(error_kind k, std::string detail, bool nothing_sent,
                      int attempts = 0) {
  call_error e;
  e.kind = k;
  e.detail = std::move(detail);
  e.nothing_sent = nothing_sent;
  e.nothing_billed = nothing_sent;
  e.attempts = attempts;
  return e;
}

/// Takes `run`'s attempt limit out of the deadline table (it was answered,
/// given up, or the RPC ends).
void drop_limit(driver_state& st, rpc_run& run) {
  if (run.limit) {
    st.deadlines.erase(*run.limit);
    run.limit.reset();
  }
}

/// A waiter's promise leaves the batcher's table with its delivery (or,
/// on a timeout, just before the cancel), so fail_everything no longer
/// sees it: if a throw unwinds before it is answered, this guard answers
/// it (every caller is answered exactly once, throw or not).
class unanswered_guard {
public:
  explicit unanswered_guard(std::vector<driver_delivery>& ds) : ds_(&ds) {
  }
  explicit unanswered_guard(waiter_slot& w) : one_(&w) {
  }
  unanswered_guard(const unanswered_guard&) = delete;
  unanswered_guard& operator=(const unanswered_guard&) = delete;
  ~unanswered_guard() {
    const char* why = "coalescing driver failed while answering";
    if (one_)
      answer_if_pending(*one_, why);
    if (ds_)
      for (auto& d : *ds_)
        answer_if_pending(d.payload, why);
  }

private:
  std::vector<driver_delivery>* ds_ = nullptr;
  waiter_slot* one_ = nullptr;
};

/// Answers the caller of `w`, a waiter the batcher has just let go
/// (delivered or cancelled), and drops its deadline.
void answer(self_ptr self, waiter_slot& w, coalesce_reply r) {
  auto& st = self->state;
  ++st.stats.calls;
  if (r.error)
    ++st.stats.calls_failed;
  if (w.due)
    st.deadlines.erase(*w.due);
  w.rp.deliver(std::move(r));
}

coalesce_reply reply_of(const driver_delivery& d,
                        const std::shared_ptr<const coalesce_rpc_info>& info,
                        uint32_t batch_waiters, int attempts) {
  coalesce_reply r;
  r.rpc = info;
  r.batch_waiters = batch_waiters;
  switch (d.outcome) {
    case waiter_outcome::served:
      r.ts = d.ts;
      r.seq = d.seq;
      break;
    case waiter_outcome::protocol_violation:
      r.error = make_error(error_kind::response_error, d.detail, false,
                           attempts);
      break;
    case waiter_outcome::rpc_failed:
      // The kind was decided by discovery (see fail_rpc); the batcher only
      // says "failed". fail_rpc overwrites it.
      r.error = make_error(error_kind::service_unavailable, d.detail, false,
                           attempts);
      break;
    case waiter_outcome::uncertain:
      r.error = make_error(error_kind::uncertain_outcome, d.detail, false,
                           attempts);
      break;
    case waiter_outcome::not_attempted:
      r.error = make_error(error_kind::service_unavailable, d.detail, true,
                           0);
      break;
  }
  if (r.error)
    r.error->request_id = info->request_id;
  return r;
}

void fail_everything(self_ptr self, const call_error& e);
void arm_deadlines(self_ptr self, coalesce_time now);

/// Runs a timer, answer or down handler's `body`; a throw fails every
/// caller held (fail_everything) instead of killing the driver.
template <class Body>
void guarded_step(self_ptr self, Body&& body) {
  guarded("coalescing driver", std::forward<Body>(body),
          [self](const call_error& e) { fail_everything(self, e); });
}

/// Sends what the batcher has ready at `now` (read from the clock when
/// absent) and arms the cold-start flush.
void pump(self_ptr self, std::optional<coalesce_time> at = std::nullopt);
void act(self_ptr self, uint64_t rpc_id, discovery_action a);

/// Drops the transports of endpoints neither configured, nor remembered
/// from a hint, nor in use by an RPC in flight (hint LRU evictions).
void sweep_transports(self_ptr self) {
  auto& st = self->state;
  if (st.transports.size() <= st.leaders->endpoints().size())
    return;
  for (auto it = st.transports.begin(); it != st.transports.end();) {
    const auto& key = it->first;
    bool keep = st.leaders->configured(key);
    for (auto& h : st.leaders->hinted())
      keep = keep || h == key;
    for (auto& [id, run] : st.rpcs)
      keep = keep || (run.in_exchange && run.dc && run.dc->current() == key);
    if (keep) {
      ++it;
      continue;
    }
    if (!st.opts.transports) // ours: stop the pool
      self->send_exit(it->second.transport, caf::exit_reason::user_shutdown);
    it = st.transports.erase(it);
  }
}

/// The transport of endpoint `key` and the endpoint parsed, made on first
/// use; nullptr with `error` set when it cannot be made (the key does not
/// parse, the factory or the pool's own checks threw). Valid until the
/// next change of driver_state::transports.
const endpoint_link* transport_for(self_ptr self, const std::string& key,
                                   call_error& error) {
  auto& st = self->state;
  if (auto it = st.transports.find(key); it != st.transports.end())
    return &it->second;
  // Drop the transports of endpoints the hint LRU evicted before adding
  // one: a chain of redirects within one RPC never holds more than the
  // configured + max_hinted_endpoints (+ those in use) transports.
  sweep_transports(self);
  // Keys come from leader_state: always "scheme://host:port".
  auto ep = parse_oracle_endpoint(key, st.cfg.tls, endpoint_origin::configured);
  if (!ep) {
    error.kind = error_kind::config_error;
    error.detail = "endpoint does not parse: " + key;
    return nullptr;
  }
  // Both can throw (a user factory; a TLS file removed since construction):
  // the attempt fails with the cause, the driver lives on.
  auto t = guarded(
    "coalescing driver (transport of " + key + ")",
    [&] {
      if (st.opts.transports)
        return st.opts.transports(*ep);
      return spawn_connection_pool(self->system(),
                                   coalesce_pool_config(st.opts.tls_template,
                                                        *ep),
                                   st.opts.io);
    },
    [&](call_error e) {
      error = std::move(e);
      return transport_actor{};
    });
  if (!t) {
    if (error.detail.empty())
      error.detail = "no transport for " + key;
    return nullptr;
  }
  // A transport that dies fails its attempt at once (on_transport_down).
  self->monitor(t);
  return &st.transports.emplace(key, endpoint_link{t, std::move(*ep)})
            .first->second;
}

/// Hands each delivery of one RPC to its waiter. The epoch goes to the
/// served callers only (an unusable 2xx is an error without one).
void deliver_all(self_ptr self, std::vector<driver_delivery>& ds,
                 std::string endpoint, int attempts, std::string request_id,
                 std::string epoch = {},
                 std::optional<error_kind> failed_kind = std::nullopt,
                 bool nothing_sent = false, bool nothing_billed = false,
                 int status = 0) {
  if (ds.empty())
    return;
  auto n = static_cast<uint32_t>(ds.size());
  // One info per RPC, shared by every reply (no strings per caller).
  auto info = std::make_shared<coalesce_rpc_info>();
  info->endpoint = std::move(endpoint);
  info->request_id = std::move(request_id);
  if (std::any_of(ds.begin(), ds.end(), [](const driver_delivery& d) {
        return d.outcome == waiter_outcome::served;
      }))
    info->epoch = std::move(epoch);
  std::shared_ptr<const coalesce_rpc_info> shared = std::move(info);
  for (auto& d : ds) {
    auto r = reply_of(d, shared, n, attempts);
    if (failed_kind && d.outcome == waiter_outcome::rpc_failed && r.error) {
      r.error->kind = *failed_kind;
      r.error->nothing_sent = nothing_sent;
      r.error->nothing_billed = nothing_sent || nothing_billed;
    }
    // A 2xx whose body was unusable (not JSON, a count mismatch, ...): the
    // error carries the status that was seen, as `outbound request` does.
    if (r.error && status != 0)
      r.error->status = status;
    answer(self, d.payload, std::move(r));
  }
}

void finish_rpc(self_ptr self, uint64_t rpc_id) {
  auto& st = self->state;
  if (auto it = st.rpcs.find(rpc_id); it != st.rpcs.end()) {
    drop_limit(st, it->second);
    st.batches->recycle(std::move(it->second.plan));
    st.rpcs.erase(it);
  }
  sweep_transports(self);
  pump(self);
}

/// A successful RPC's body, parsed once in on_exchange: the leader
/// discovery takes its epoch, the batcher the response.
using success_body = std::variant<read_ts_result, read_seq_result>;

success_body read_success_body(const rpc_run& run, const exchange_result& r,
                               std::size_t max_depth) {
  if (run.plan.kind == waiter_kind::ts)
    return read_ts_body(r.response.body, max_depth);
  return read_seq_body(r.response.body, max_depth);
}

void on_success(self_ptr self, uint64_t rpc_id, rpc_run& run,
                success_body& body, const exchange_result& r,
                std::string endpoint) {
  auto& st = self->state;
  auto now = now_of(self);
  auto attempts = run.dc->attempts();
  std::vector<driver_delivery> ds;
  unanswered_guard guard{ds};
  std::string epoch;
  if (auto* ts = std::get_if<read_ts_result>(&body)) {
    ds = st.batches->on_ts_response(rpc_id, ts->response, now);
    epoch = std::move(ts->response.epoch);
  } else {
    auto& seq = std::get<read_seq_result>(body).response;
    ds = st.batches->on_seq_response(rpc_id, seq, now);
    epoch = std::move(seq.epoch);
  }
  // The RPC ends here (finish_rpc): its strings move into the answers.
  deliver_all(self, ds, std::move(endpoint), attempts,
              std::move(run.request_id), std::move(epoch), std::nullopt, false,
              false, r.response.status);
  st.batches->recycle(std::move(ds)); // every one answered
  finish_rpc(self, rpc_id);
}

void fail_rpc(self_ptr self, uint64_t rpc_id, const discovery_action& a) {
  auto& st = self->state;
  auto now = now_of(self);
  ++st.stats.rpc_errors;
  ++st.stats.rpc_errors_by_cause[to_string(a.error)];
  bool uncertain = a.error == discovery_error::uncertain_outcome;
  if (uncertain)
    ++st.stats.uncertain;
  auto ds = st.batches->on_rpc_failed(
    rpc_id, uncertain ? rpc_failure::uncertain : rpc_failure::failed,
    a.detail, now);
  unanswered_guard guard{ds};
  auto kind = coalesce_error_kind(a.error);
  // A TLS failure is a transport failure, not retried: service_unavailable
  // as in `outbound request` (README "Errors"), not config_error.
  if (a.error == discovery_error::fatal
      && a.cause == transport_error_kind::tls)
    kind = error_kind::service_unavailable;
  // A 2xx body over the cap is the server's fault: response_error (exit 6),
  // as in `outbound request` (protocol/errors.hpp), not config_error.
  if (a.error == discovery_error::fatal
      && a.cause == transport_error_kind::too_large)
    kind = error_kind::response_error;
  auto it = st.rpcs.find(rpc_id);
  if (it != st.rpcs.end() && a.error == discovery_error::fatal
      && it->second.fatal_kind)
    kind = *it->second.fatal_kind;
  bool nothing_sent = it != st.rpcs.end() && !it->second.maybe_sent;
  std::string request_id;
  if (it != st.rpcs.end())
    request_id = std::move(it->second.request_id); // the RPC ends here
  // Nothing billed: every attempt provably committed nothing (the oracle's
  // pre-commit marker, or nothing left the client).
  deliver_all(self, ds, {}, a.attempts, std::move(request_id), {}, kind,
              nothing_sent, a.nothing_committed);
  finish_rpc(self, rpc_id);
}

void on_exchange(self_ptr self, uint64_t rpc_id, uint64_t token,
                 exchange_result& r) {
  auto& st = self->state;
  auto it = st.rpcs.find(rpc_id);
  if (it == st.rpcs.end() || it->second.token != token)
    return; // cancelled, or the attempt's own timer already gave up
  auto& run = it->second;
  run.in_exchange = false;
  drop_limit(st, run);
  run.last_error = r.error;
  run.maybe_sent = run.maybe_sent || r.request_sent
                   || r.error == transport_error_kind::none;
  attempt_report rep;
  bool answered_error = r.ok() && !is_success_status(r.response.status);
  rep.cls = classify_attempt(
    r.error, r.request_sent, r.response.status,
    answered_error
      && marks_nothing_committed(r.response.body, st.cfg.json_max_depth));
  rep.cause = r.error;
  rep.unreachable = r.error == transport_error_kind::connect;
  // A success's body is parsed once, here: its epoch seats the leader, its
  // fields go to the batcher (on_success; only a success ends there).
  std::optional<success_body> body;
  if (rep.cls == attempt_class::not_leader) {
    if (auto* h = find_header(r.response.headers, leader_hint_header))
      rep.hint = *h;
  } else if (rep.cls == attempt_class::success) {
    body = read_success_body(run, r, st.cfg.json_max_depth);
    rep.epoch = std::visit([](auto& b) { return b.epoch; }, *body);
    // The batcher's own check (on_success): a body it refuses seats no
    // leader (attempt_report::unusable).
    if (auto* ts = std::get_if<read_ts_result>(&*body))
      rep.unusable = !check_ts_response(ts->response, run.plan.count).empty();
    else
      rep.unusable
        = !check_seq_response(std::get<read_seq_result>(*body).response,
                              run.plan.count)
             .empty();
  }
  if (r.error != transport_error_kind::none)
    rep.detail = std::string{to_string(r.error)}
                 + (r.detail.empty() ? "" : ": " + r.detail);
  else if (rep.cls != attempt_class::success)
    rep.detail = "status " + std::to_string(r.response.status);
  auto now = now_of(self);
  // The leader changed iff this answer seated a new entry (a different
  // endpoint, or one where none was fresh): leader_state counts seats.
  auto seats = st.leaders->stats().seats;
  auto redirects = run.dc->redirects();
  auto a = run.dc->on_result(*st.leaders, rep, now, st.rng);
  // A followed hint: the discovery counted a redirect and sends next (the
  // one over the cap is counted by discovery but never followed).
  if (run.dc->redirects() > redirects && a.step == discovery_step::send)
    ++st.stats.redirects;
  if (st.leaders->stats().seats != seats && st.leaders->leader(now))
    ++st.stats.leader_changes;
  if (a.step == discovery_step::succeeded) {
    if (!body) // not reached: only a success class succeeds
      body = read_success_body(run, r, st.cfg.json_max_depth);
    // a.endpoint: the endpoint that answered (discovery's current).
    return on_success(self, rpc_id, run, *body, r, std::move(a.endpoint));
  }
  act(self, rpc_id, std::move(a));
}

void act(self_ptr self, uint64_t rpc_id, discovery_action a) {
  auto& st = self->state;
  auto it = st.rpcs.find(rpc_id);
  if (it == st.rpcs.end())
    return;
  auto& run = it->second;
  auto me = caf::actor_cast<driver_impl_actor>(self);
  switch (a.step) {
    case discovery_step::send: {
      // No attempt can be made (nothing is sent): the RPC fails with
      // `why`, as discovery decides for a fatal attempt.
      auto cannot_send = [&](const call_error& why) {
        attempt_report rep;
        rep.cls = attempt_class::fatal;
        rep.detail = why.detail;
        run.fatal_kind = why.kind;
        return act(self, rpc_id,
                   run.dc->on_result(*st.leaders, rep, now_of(self), st.rng));
      };
      // The request of this attempt, for its endpoint, through the shared
      // builder; the RPC's request id on every attempt (start_rpc).
      // The transport first: it holds the endpoint parsed once. (A request
      // the builder refuses is caught at construction, check_oracle_requests;
      // a transport is then made, harmlessly, before the refusal.)
      call_error why;
      auto* link = transport_for(self, a.endpoint, why);
      if (!link)
        return cannot_send(why);
      auto t = link->transport;
      // a.attempts counts this attempt: the ones before it are retries
      // (x-retry-count, as the service client sends it).
      // The RPC's id goes in and comes back (one copy: the header's). The
      // builder answers without the id only when it has control
      // characters, which generate_request_id's hex never has (start_rpc).
      auto built = build_oracle_request(st.request_cfg, link->ep, run.plan,
                                        std::move(run.request_id), st.id_rng,
                                        a.attempts - 1);
      run.request_id = std::move(built.request_id);
      if (built.error)
        return cannot_send(*built.error);
      auto req = std::move(built.request);
      req.exchange_id = st.next_exchange++;
      req.timeout_ns = a.budget.count();
      run.exchange_id = req.exchange_id;
      run.transport = t;
      run.in_exchange = true;
      auto token = run.token = st.next_token++;
      ++st.stats.attempts;
      self->request(t, caf::infinite, std::move(req))
        .then(
          [self, rpc_id, token](exchange_result& r) {
            guarded_step(self, [&] { on_exchange(self, rpc_id, token, r); });
          },
          [self, rpc_id, token](caf::error& err) {
            exchange_result r;
            r.error = transport_error_kind::interrupted;
            r.request_sent = true; // unknown: assume it may have left
            r.detail = "transport failed: " + self->system().render(err);
            guarded_step(self, [&] { on_exchange(self, rpc_id, token, r); });
          });
      // The transport answers within the budget; the driver's one timer
      // backs it up (on_attempt_limit).
      auto now = now_of(self);
      run.limit = st.deadlines.emplace(now + a.budget + attempt_slack,
                                       due_entry{rpc_id, token});
      arm_deadlines(self, now);
      return;
    }
    case discovery_step::wait: {
      auto token = run.token = st.next_token++;
      self->delayed_send(me, a.delay, retry_atom_v, rpc_id, token);
      return;
    }
    case discovery_step::succeeded:
      // Only on_exchange produces it (it holds the body).
      return;
    case discovery_step::failed:
      return fail_rpc(self, rpc_id, a);
  }
}

void start_rpc(self_ptr self, rpc_plan plan) {
  auto& st = self->state;
  auto now = now_of(self);
  auto id = plan.rpc_id;
  auto n = plan.parts.size();
  auto b = std::lower_bound(coalesce_batch_bounds.begin(),
                            coalesce_batch_bounds.end(), n)
           - coalesce_batch_bounds.begin();
  ++st.stats.batch_sizes[static_cast<std::size_t>(b)];
  st.stats.batch_size_sum += n;
  auto& run = st.rpcs[id];
  run.plan = std::move(plan);
  // One request id per RPC, on every attempt, redirect and endpoint of it,
  // as the service client keeps one per call across its retries
  // (call_actor.cpp): the oracle's logs tie the attempts of one RPC
  // together (for seq, the one uncertain attempt to the caller's error),
  // and every waiter that rode it gets it in coalesce_reply::request_id.
  run.request_id = generate_request_id(st.id_rng);
  run.dc.emplace(*st.leaders, run.plan.kind == waiter_kind::seq, now);
  act(self, id, run.dc->start(*st.leaders, now, st.rng));
}

/// The most RPCs whose list pump keeps for the next call.
constexpr std::size_t max_kept_ready = 64;

void pump(self_ptr self, std::optional<coalesce_time> at) {
  auto& st = self->state;
  auto now = at ? *at : now_of(self);
  // Lent out while the RPCs start: one that fails at once finishes and
  // pumps again, which then takes a list of its own.
  auto ready = std::move(st.ready);
  st.batches->take_ready(now, ready);
  for (auto& p : ready)
    start_rpc(self, std::move(p));
  ready.clear();
  // Kept up to a steady state's few RPCs: a burst's long list is freed.
  if (ready.capacity() <= max_kept_ready
      && ready.capacity() > st.ready.capacity())
    st.ready = std::move(ready);
  auto due = st.batches->next_wakeup();
  if (!due || (st.flush_armed && *st.flush_armed <= *due))
    return;
  st.flush_armed = *due;
  auto token = ++st.flush_token;
  auto delay = *due > now ? *due - now : coalesce_duration{0};
  self->delayed_send(caf::actor_cast<driver_impl_actor>(self), delay,
                     poll_atom_v, token);
}

/// A transport the driver monitors terminated: forget it (the next attempt
/// to its endpoint makes a new one) and fail the attempts in flight on it
/// now, as a reset connection (it may have sent the request), instead of at
/// the end of their budget.
void on_transport_down(self_ptr self, const caf::down_msg& dm) {
  auto& st = self->state;
  std::string key;
  for (auto it = st.transports.begin(); it != st.transports.end();) {
    if (it->second.transport.address() == dm.source) {
      key = it->first;
      it = st.transports.erase(it);
    } else {
      ++it;
    }
  }
  std::vector<std::pair<uint64_t, uint64_t>> hit; // rpc id, token
  for (auto& [id, run] : st.rpcs)
    if (run.in_exchange && run.transport
        && run.transport.address() == dm.source)
      hit.emplace_back(id, run.token);
  for (auto& [id, token] : hit) {
    exchange_result r;
    r.error = transport_error_kind::interrupted;
    r.request_sent = true; // unknown: assume it may have left
    r.detail = "transport" + (key.empty() ? std::string{} : " of " + key)
               + " terminated: " + self->system().render(dm.reason);
    on_exchange(self, id, token, r);
  }
}

/// A handler threw (see actors/handler_guard.hpp): the batcher and the RPC
/// table may be half-updated, so every caller held gets `e` now and the
/// driver starts clean (the leader cache and the transports are kept). The
/// driver stays alive for the next call.
void fail_everything(self_ptr self, const call_error& e) {
  auto& st = self->state;
  std::vector<waiter_slot> waiters;
  waiters.reserve(st.batches->held());
  st.batches->for_each_payload(
    [&](uint64_t, waiter_slot& w) { waiters.push_back(std::move(w)); });
  st.deadlines.clear(); // a pending timer finds nothing due and re-arms none
  for (auto& w : waiters) {
    coalesce_reply r;
    r.error = e;
    ++st.stats.calls;
    ++st.stats.calls_failed;
    if (w.rp.pending())
      w.rp.deliver(std::move(r));
  }
  for (auto& [id, run] : st.rpcs)
    if (run.in_exchange && run.transport)
      self->send(run.transport, cancel_atom_v, run.exchange_id);
  st.rpcs.clear();
  auto counted = st.batches->stats(); // exported counters stay monotonic
  st.batches.emplace(st.cfg);
  st.batches->carry_stats(counted);
  st.flush_armed.reset();
}

/// Arms the deadline timer for the earliest caller deadline unless a timer
/// at or before it is pending.
void arm_deadlines(self_ptr self, coalesce_time now) {
  auto& st = self->state;
  if (st.deadlines.empty())
    return;
  auto first = st.deadlines.begin()->first;
  if (st.deadline_armed && *st.deadline_armed <= first)
    return;
  st.deadline_armed = first;
  auto due = static_cast<uint64_t>(first.time_since_epoch().count());
  auto me = caf::actor_cast<driver_impl_actor>(self);
  if (first <= now)
    self->send(me, timeout_atom_v, due);
  else
    self->delayed_send(me, first - now, timeout_atom_v, due);
}

void on_waiter_timeout(self_ptr self, uint64_t waiter_id);

/// Pumps once the messages now in the mailbox are handled (a message to
/// itself; token 0 is never a flush timer's).
void deferred_pump(self_ptr self) {
  auto& st = self->state;
  if (st.pump_queued)
    return;
  st.pump_queued = true;
  self->send(caf::actor_cast<driver_impl_actor>(self), poll_atom_v,
             uint64_t{0});
}

void on_attempt_limit(self_ptr self, uint64_t rpc_id, uint64_t token);

/// The deadline timer armed for `due` fired: every caller whose deadline
/// passed gets deadline_exceeded, every attempt past its limit is given up;
/// the timer is armed for the next entry.
void on_deadline_timer(self_ptr self, uint64_t due) {
  auto& st = self->state;
  if (st.deadline_armed
      && static_cast<uint64_t>(st.deadline_armed->time_since_epoch().count())
           == due)
    st.deadline_armed.reset();
  auto now = now_of(self);
  while (!st.deadlines.empty() && st.deadlines.begin()->first <= now) {
    auto e = st.deadlines.begin()->second;
    st.deadlines.erase(st.deadlines.begin());
    if (e.token != 0) {
      if (auto it = st.rpcs.find(e.id);
          it != st.rpcs.end() && it->second.token == e.token)
        it->second.limit.reset();
      on_attempt_limit(self, e.id, e.token);
      continue;
    }
    if (auto* w = st.batches->payload(e.id))
      w->due.reset();
    on_waiter_timeout(self, e.id);
  }
  arm_deadlines(self, now);
}

caf::result<coalesce_reply> join_call(self_ptr self, waiter_request w,
                                      double timeout) {
  auto& st = self->state;
  auto now = now_of(self);
  w.entered = now;
  auto joined = st.batches->join(w, now);
  coalesce_reply r;
  switch (joined.decision) {
    case join_decision::queued: break;
    case join_decision::rejected_backpressure:
      ++st.stats.calls;
      ++st.stats.calls_failed;
      r.error = make_error(error_kind::service_unavailable,
                           "coalescing driver overloaded: "
                             + std::to_string(st.cfg.max_waiters)
                             + " waiters held (coalesce.max_waiters)",
                           true);
      return r;
    case join_decision::rejected_invalid_count:
      ++st.stats.calls;
      ++st.stats.calls_failed;
      r.error = make_error(
        error_kind::request_error,
        "invalid count " + std::to_string(w.count) + " (1.."
          + std::to_string(st.batches->cap(w.kind)) + ")",
        true);
      return r;
    case join_decision::rejected_invalid_key:
      ++st.stats.calls;
      ++st.stats.calls_failed;
      r.error = make_error(error_kind::request_error,
                           "invalid sequence key (1.."
                             + std::to_string(st.cfg.max_seq_key_bytes)
                             + " bytes of UTF-8)",
                           true);
      return r;
  }
  // The promise is returned from a copy: pump below may already answer
  // the caller (and free its slot).
  auto rp = self->make_response_promise<coalesce_reply>();
  auto& slot = *st.batches->payload(joined.id);
  slot.rp = rp;
  // NaN, +-inf and <= 0: no timeout of its own (coalesce_seconds would turn
  // +inf into 0, an immediate deadline_exceeded).
  if (std::isfinite(timeout) && timeout > 0) {
    slot.due = st.deadlines.emplace(now + coalesce_seconds(timeout),
                                    due_entry{joined.id, 0});
    arm_deadlines(self, now);
  }
  // A caller of an idle group is sent at once (a lone caller pays no extra
  // hop), and so is one with nothing else in the mailbox; with RPCs of its
  // group in flight and messages waiting, the callers among them join
  // first, so those that arrived together form one queue, spread over the
  // free slots (batcher.hpp).
  if (st.batches->in_flight(w.kind, w.key) == 0 || self->mailbox().empty())
    pump(self, now);
  else
    deferred_pump(self);
  return rp;
}

coalesce_stats driver_stats(self_ptr self) {
  auto& st = self->state;
  auto s = st.stats;
  s.batches = st.batches->stats();
  s.leader = st.leaders->stats();
  s.held = st.batches->held();
  s.in_flight = st.batches->in_flight();
  if (auto l = st.leaders->leader(now_of(self))) {
    s.leader_endpoint = l->endpoint;
    s.leader_epoch = l->epoch;
  }
  s.transports = st.transports.size();
  return s;
}

/// A caller's own timeout passed.
void on_waiter_timeout(self_ptr self, uint64_t waiter_id) {
  auto& st = self->state;
  auto* held = st.batches->payload(waiter_id);
  if (!held)
    return;
  auto slot = std::move(*held);
  unanswered_guard guard{slot};
  auto c = st.batches->cancel(waiter_id, now_of(self));
  // Nothing sent for it only if it never rode an RPC, or the RPC it
  // rode (cancelled now) never reached a server and is not on the wire.
  bool nothing_sent = c.result == cancel_result::removed
                      || c.result == cancel_result::not_found;
  if (c.result == cancel_result::rpc_cancelled)
    if (auto it = st.rpcs.find(c.rpc_to_cancel); it != st.rpcs.end())
      nothing_sent = !it->second.maybe_sent && !it->second.in_exchange;
  coalesce_reply r;
  r.error = make_error(error_kind::deadline_exceeded,
                       "the call's timeout passed", nothing_sent);
  answer(self, slot, std::move(r));
  if (c.result == cancel_result::rpc_cancelled) {
    auto it = st.rpcs.find(c.rpc_to_cancel);
    if (it != st.rpcs.end()) {
      if (it->second.in_exchange && it->second.transport)
        self->send(it->second.transport, cancel_atom_v,
                   it->second.exchange_id);
      drop_limit(st, it->second);
      st.rpcs.erase(it);
    }
  }
  pump(self);
}

/// The attempt's own time limit: the transport did not answer.
void on_attempt_limit(self_ptr self, uint64_t rpc_id, uint64_t token) {
  auto& st = self->state;
  auto it = st.rpcs.find(rpc_id);
  if (it == st.rpcs.end() || it->second.token != token
      || !it->second.in_exchange)
    return;
  auto& run = it->second;
  run.in_exchange = false;
  drop_limit(st, run);
  run.maybe_sent = true; // it may be on the wire
  run.token = st.next_token++; // a late answer is stale now
  self->send(run.transport, cancel_atom_v, run.exchange_id);
  act(self, rpc_id,
      run.dc->on_attempt_timeout(*st.leaders, now_of(self), st.rng));
}

driver_impl_actor::behavior_type
driver_impl(self_ptr self, coalesce_config cfg, coalesce_options opts,
            uint64_t seed) {
  auto& st = self->state;
  st.rng.seed(seed);
  st.id_rng.seed(seed ^ 0x6f7261636c652d69ULL); // "oracle-i"
  st.cfg = cfg;
  st.request_cfg = oracle_request_config(cfg);
  st.opts = std::move(opts);
  st.batches.emplace(cfg);
  st.leaders.emplace(cfg, st.rng);
  self->set_down_handler([self](caf::down_msg& dm) {
    guarded_step(self, [&] { on_transport_down(self, dm); });
  });
  // A call whose handling throws is answered with the error (so is every
  // other caller held, see fail_everything).
  auto call_failed = [self](const call_error& e) {
    fail_everything(self, e);
    coalesce_reply r;
    r.error = e;
    return caf::result<coalesce_reply>{std::move(r)};
  };
  return {
    [self, call_failed](ts_call& c) -> caf::result<coalesce_reply> {
      return guarded(
        "coalescing driver",
        [&] {
          waiter_request w;
          w.kind = waiter_kind::ts;
          w.count = c.count;
          return join_call(self, std::move(w), c.timeout);
        },
        call_failed);
    },
    [self, call_failed](seq_call& c) -> caf::result<coalesce_reply> {
      return guarded(
        "coalescing driver",
        [&] {
          waiter_request w;
          w.kind = waiter_kind::seq;
          w.key = std::move(c.key);
          w.count = c.count;
          return join_call(self, std::move(w), c.timeout);
        },
        call_failed);
    },
    [self](stats_atom) -> coalesce_stats {
      return guarded(
        "coalescing driver", [&] { return driver_stats(self); },
        [](const call_error&) { return coalesce_stats{}; });
    },
    [self](timeout_atom, uint64_t due) {
      guarded_step(self, [&] { on_deadline_timer(self, due); });
    },
    [self](retry_atom, uint64_t rpc_id, uint64_t token) {
      guarded_step(self, [&] {
        auto& st = self->state;
        auto it = st.rpcs.find(rpc_id);
        if (it == st.rpcs.end() || it->second.token != token)
          return;
        act(self, rpc_id,
            it->second.dc->resume(*st.leaders, now_of(self), st.rng));
      });
    },
    [self](poll_atom, uint64_t token) {
      guarded_step(self, [&] {
        auto& st = self->state;
        if (token == 0)
          st.pump_queued = false;
        else if (token == st.flush_token)
          st.flush_armed.reset();
        pump(self);
      });
    },
  };
}

} // namespace

error_kind coalesce_error_kind(discovery_error e) {
  switch (e) {
    case discovery_error::none:
    case discovery_error::no_endpoints:
    case discovery_error::unreachable:
    case discovery_error::no_leader: return error_kind::service_unavailable;
    case discovery_error::deadline_exceeded:
      return error_kind::deadline_exceeded;
    case discovery_error::redirect_cap:
    case discovery_error::rejected: return error_kind::request_error;
    case discovery_error::server_error: return error_kind::server_error;
    case discovery_error::fatal: return error_kind::config_error;
    case discovery_error::uncertain_outcome:
      return error_kind::uncertain_outcome;
    case discovery_error::not_supported: return error_kind::server_error;
  }
  return error_kind::service_unavailable;
}

client_config coalesce_pool_config(const client_config& tmpl,
                                   const oracle_endpoint& ep) {
  client_config c = tmpl;
  c.base_url = ep.key();
  if (!ep.tls())
    c.tls = tls_config{}; // explicit http:// beats configured TLS
  return c;
}

coalescing_driver_actor make_coalescing_driver(caf::actor_system& sys,
                                               coalesce_config cfg,
                                               coalesce_options opts) {
  cfg.validate();
  // Whatever the request builder would refuse at send time (a default
  // header it does not take), refused now, naming the field.
  check_oracle_requests(cfg);
  // Everything the default pools check on spawn, checked now, for every
  // configured endpoint (hinted ones differ only in host and port): a
  // mixed plain/TLS list must not fail inside the driver on first use.
  if (!opts.transports)
    for (auto& ep : cfg.parsed_endpoints())
      coalesce_pool_config(opts.tls_template, ep).validate();
  // The default pools build their TLS context on first use, inside the
  // actor, where a throw would kill the driver: a file that does not load
  // fails here instead, naming its field (tls.ca_file, ...).
  if (!opts.transports && opts.tls_template.tls.any())
    tls_context::make(opts.tls_template.tls);
  uint64_t seed = opts.seed != 0 ? opts.seed : core::entropy_seed();
  auto driver = sys.spawn(driver_impl, std::move(cfg), std::move(opts), seed);
  return driver; // the public interface (checked: a subset of the private)
}

} // namespace coalesce
} // namespace outbound
