#include "actors/coalesce/leader_state.hpp"

#include "core/backoff.hpp"
#include "core/classify.hpp"
#include "core/text.hpp"
#include "protocol/json_parse.hpp"

#include <boost/json/value.hpp>

#include <algorithm>
#include <cctype>
#include <iterator>
#include <random>

namespace outbound {
inline namespace coalesce {

namespace {

std::optional<uint64_t> parse_u64(std::string_view s) {
  if (s.empty() || s.size() > 20)
    return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9')
      return std::nullopt;
    uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10)
      return std::nullopt;
    v = v * 10 + d;
  }
  return v;
}

} // namespace

std::optional<uint64_t> parse_leader_epoch(std::string_view s) {
  return parse_u64(s);
}

std::optional<leader_hint> parse_leader_hint(std::string_view value) {
  if (value.size() > 512)
    return std::nullopt;
  for (char ch : value) {
    auto c = static_cast<unsigned char>(ch);
    if ((c < 0x20 && c != '\t') || c >= 0x7f)
      return std::nullopt;
  }
  leader_hint h;
  std::size_t params = 0;
  bool first = true;
  std::string_view rest = value;
  while (true) {
    auto semi = rest.find(';');
    auto part = core::trim_ows(rest.substr(0, semi));
    if (first) {
      if (part.empty()
          || !parse_oracle_endpoint(part, false, endpoint_origin::configured))
        return std::nullopt;
      h.endpoint.assign(part.begin(), part.end());
      first = false;
    } else {
      if (part.empty() || ++params > 8)
        return std::nullopt;
      auto eq = part.find('=');
      if (eq == std::string_view::npos)
        return std::nullopt;
      auto name = core::trim_ows(part.substr(0, eq));
      auto val = core::trim_ows(part.substr(eq + 1));
      if (name.empty())
        return std::nullopt;
      if (core::iequals(name, "epoch")) {
        if (h.epoch)
          return std::nullopt; // duplicate: ambiguous
        auto e = parse_u64(val);
        if (!e)
          return std::nullopt;
        h.epoch = e;
      }
    }
    if (semi == std::string_view::npos)
      break;
    rest.remove_prefix(semi + 1);
  }
  return h;
}

const char* to_string(attempt_class c) {
  switch (c) {
    case attempt_class::success: return "success";
    case attempt_class::not_leader: return "not_leader";
    case attempt_class::refused: return "refused";
    case attempt_class::busy: return "busy";
    case attempt_class::lost: return "lost";
    case attempt_class::server_error: return "server_error";
    case attempt_class::unexpected_status: return "unexpected_status";
    case attempt_class::rejected: return "rejected";
    case attempt_class::not_supported: return "not_supported";
    case attempt_class::handshake_failed: return "handshake_failed";
    case attempt_class::fatal: return "fatal";
    case attempt_class::fatal_after_send: return "fatal_after_send";
  }
  return "?";
}

attempt_class classify_attempt(transport_error_kind error, bool request_sent,
                               int status, bool marked) {
  // The shared classes first (core/classify.hpp; no status is retried for
  // its own sake here), then the oracle's rules on top: 421, 501, 503 / 429
  // and the pre-commit marker. What is safe for seq after each class is
  // proves_nothing_committed's call.
  exchange_view v;
  v.error = error;
  v.request_sent = request_sent;
  v.status = status;
  auto verdict = classify_exchange(v, {});
  switch (verdict.cls) {
    case outcome_class::success:
      return attempt_class::success;
    case outcome_class::final_status:
    case outcome_class::retryable_status:
      if (status == 421)
        return attempt_class::not_leader;
      if (status == 501)
        return attempt_class::not_supported;
      if (status >= 500 && status <= 999)
        return marked ? attempt_class::refused
               : status == 503 ? attempt_class::busy
                               : attempt_class::server_error;
      if (status == 429)
        return marked ? attempt_class::refused : attempt_class::busy;
      if (status >= 400 && status <= 499 && marked)
        return attempt_class::rejected;
      return attempt_class::unexpected_status;
    case outcome_class::nothing_sent:
      // not_sent, connect, local_resource, pool_overflow (the local queue
      // was full), or a failure before any byte was written.
      return attempt_class::refused;
    case outcome_class::transport_failure:
      return attempt_class::lost;
    case outcome_class::fatal:
      if (verdict.kind == transport_error_kind::config)
        return attempt_class::fatal;
      return verdict.nothing_sent ? attempt_class::handshake_failed
                                  : attempt_class::fatal_after_send;
  }
  return attempt_class::fatal;
}

bool marks_nothing_committed(std::string_view body, std::size_t max_depth) {
  if (body.empty() || body.size() > 64 * 1024)
    return false;
  json_limits l;
  l.max_depth = max_depth;
  // A repeated key is ambiguous ({"committed":true,"committed":false}:
  // Boost.JSON keeps the last, another reader the first): it proves
  // nothing, as the oracle body readers refuse it too.
  l.reject_duplicate_keys = true;
  auto r = parse_json(body, l);
  auto& v = r.value;
  if (!r || !v.is_object())
    return false;
  auto* m = v.get_object().if_contains("committed");
  return m && m->is_bool() && !m->get_bool();
}

bool proves_nothing_committed(attempt_class c) {
  switch (c) {
    case attempt_class::not_leader:
    case attempt_class::refused:
    case attempt_class::rejected:
    case attempt_class::not_supported:
    case attempt_class::handshake_failed:
    case attempt_class::fatal: return true;
    default: return false;
  }
}

bool is_transport_class(attempt_class c) {
  return c == attempt_class::refused || c == attempt_class::busy
         || c == attempt_class::lost;
}

coalesce_duration full_jitter_backoff(coalesce_duration base,
                                      coalesce_duration cap, int n,
                                      coalesce_rng& rng) {
  if (base.count() <= 0 || cap.count() <= 0)
    return coalesce_duration{0};
  // tsoracle's client stops doubling at attempt 20 (budget.rs); kept so a
  // tiny base never grows past base * 2^20.
  const core::backoff b{core::jitter::full, base, cap};
  return b.delay(std::clamp(n, 0, 20), rng);
}

const char* to_string(seat_decision d) {
  switch (d) {
    case seat_decision::seated: return "seated";
    case seat_decision::refreshed: return "refreshed";
    case seat_decision::replaced: return "replaced";
    case seat_decision::rejected_stale_epoch: return "rejected_stale_epoch";
    case seat_decision::rejected_no_epoch: return "rejected_no_epoch";
  }
  return "?";
}

const char* to_string(hint_verdict v) {
  switch (v) {
    case hint_verdict::usable: return "usable";
    case hint_verdict::absent: return "absent";
    case hint_verdict::malformed: return "malformed";
    case hint_verdict::rejected_downgrade: return "rejected_downgrade";
    case hint_verdict::stale_epoch: return "stale_epoch";
    case hint_verdict::rejected_no_epoch: return "rejected_no_epoch";
    case hint_verdict::self_reference: return "self_reference";
  }
  return "?";
}

leader_state::leader_state(const coalesce_config& cfg, coalesce_rng& rng)
  : cfg_(cfg) {
  cfg_.validate();
  ttl_ = coalesce_seconds(cfg_.leader_ttl);
  durations_ = {coalesce_seconds(cfg_.retry.overall),
                coalesce_seconds(cfg_.retry.per_attempt),
                coalesce_seconds(cfg_.retry.base_backoff),
                coalesce_seconds(cfg_.retry.max_backoff)};
  for (auto& ep : cfg_.parsed_endpoints())
    endpoints_.push_back(ep.key());
  // The first worklist is the configured order: an operator puts the
  // most-likely leader first (tsoracle client docs, "Configuration").
  (void) rng;
  offset_ = 0;
}

const cached_leader* leader_state::leader(coalesce_time now) const {
  if (cache_ && now - cache_->refreshed < ttl_)
    return &*cache_;
  return nullptr;
}

bool leader_state::forget(const std::string& endpoint) {
  if (!cache_ || cache_->endpoint != endpoint)
    return false;
  cache_.reset();
  return true;
}

bool leader_state::configured(const std::string& endpoint) const {
  return std::find(endpoints_.begin(), endpoints_.end(), endpoint)
         != endpoints_.end();
}

seat_decision leader_state::seat(const std::string& endpoint,
                                 std::optional<uint64_t> epoch,
                                 seat_source src, coalesce_time now) {
  const auto* cur = leader(now); // read before any replace below
  auto replace = [&](seat_decision d) {
    cache_ = cached_leader{endpoint, epoch, now};
    ++stats_.seats;
    return d;
  };
  if (!cur)
    return replace(seat_decision::seated);
  if (cur->endpoint == endpoint) {
    cache_->refreshed = now;
    // The leader's own answer is its word on its epoch, lower too (its
    // cluster restarted: epochs begin again); a hint naming it only
    // raises it. Never cleared. Kept high, a stale epoch would make the
    // next real leader's answers read as a deposed leader's.
    if (epoch
        && (!cache_->epoch || *epoch > *cache_->epoch
            || src == seat_source::success))
      cache_->epoch = epoch;
    return seat_decision::refreshed;
  }
  if (cur->epoch && epoch)
    return *epoch >= *cur->epoch ? replace(seat_decision::replaced)
                                 : seat_decision::rejected_stale_epoch;
  if (cur->epoch && !epoch)
    return src == seat_source::hint && configured(endpoint)
             ? replace(seat_decision::replaced)
             : seat_decision::rejected_no_epoch;
  return replace(seat_decision::replaced);
}

hint_check leader_state::check_hint(const std::string* header,
                                    const std::string& from,
                                    coalesce_time now) {
  hint_check r;
  if (!header) {
    r.verdict = hint_verdict::absent;
    return r;
  }
  auto h = parse_leader_hint(*header);
  if (!h) {
    ++stats_.malformed_hints;
    r.verdict = hint_verdict::malformed;
    return r;
  }
  endpoint_parse_error why = endpoint_parse_error::none;
  auto ep = parse_oracle_endpoint(h->endpoint, cfg_.tls, endpoint_origin::wire,
                                  &why);
  if (!ep) {
    if (why == endpoint_parse_error::downgrade) {
      ++stats_.downgrade_hints;
      r.verdict = hint_verdict::rejected_downgrade;
    } else {
      ++stats_.malformed_hints;
      r.verdict = hint_verdict::malformed;
    }
    return r;
  }
  r.endpoint = ep->key();
  // A bare hint that names a configured node is dialled as the operator
  // configured that node (an explicit http:// one stays plain in a mixed
  // list): the peer names the node, the operator chose its scheme, so this
  // is no downgrade by the peer. Any other bare hint takes the configured
  // scheme (tsoracle's leader-hint table).
  if (h->endpoint.find("://") == std::string::npos)
    for (auto& e : endpoints_)
      if (auto s = e.find("://"); s != std::string::npos
          && e.compare(s + 3, std::string::npos, ep->authority()) == 0)
        r.endpoint = e;
  r.epoch = h->epoch;
  if (r.endpoint == from) {
    r.verdict = hint_verdict::self_reference;
    return r;
  }
  if (auto cur = leader(now); cur && cur->epoch) {
    if (h->epoch && *h->epoch < *cur->epoch) {
      // A delayed NOT_LEADER from an old epoch must not flap the cache
      // backward (tsoracle retry.rs).
      ++stats_.stale_hints;
      r.verdict = hint_verdict::stale_epoch;
      return r;
    }
    if (!h->epoch && r.endpoint != cur->endpoint && !configured(r.endpoint)) {
      r.verdict = hint_verdict::rejected_no_epoch;
      return r;
    }
  }
  r.verdict = hint_verdict::usable;
  return r;
}

std::vector<std::string> leader_state::begin_pass(coalesce_time now) {
  auto p = start_pass(now);
  std::vector<std::string> w;
  w.reserve(p.size);
  if (p.leader)
    w.push_back(p.leader->endpoint);
  rest_of_pass(p, w);
  return w;
}

leader_state::pass_start leader_state::start_pass(coalesce_time now) {
  pass_start p;
  p.leader = leader(now);
  p.offset = offset_;
  const auto n = endpoints_.size();
  p.size = n;
  if (p.leader) {
    auto i
      = std::find(endpoints_.begin(), endpoints_.end(), p.leader->endpoint);
    if (i != endpoints_.end())
      p.leader_index = static_cast<std::size_t>(i - endpoints_.begin());
    else
      ++p.size; // a hinted leader comes on top of the configured ones
  }
  offset_ = (offset_ + 1) % n;
  return p;
}

void leader_state::rest_of_pass(const pass_start& p,
                                std::vector<std::string>& out) const {
  const auto n = endpoints_.size();
  for (std::size_t i = 0; i < n; ++i) {
    auto k = (p.offset + i) % n;
    if (k != p.leader_index)
      out.push_back(endpoints_[k]);
  }
}

std::optional<std::string>
leader_state::note_hinted(const std::string& endpoint) {
  if (configured(endpoint))
    return std::nullopt;
  auto it = std::find(hinted_.begin(), hinted_.end(), endpoint);
  if (it != hinted_.end()) {
    hinted_.splice(hinted_.begin(), hinted_, it);
    return std::nullopt;
  }
  if (cfg_.max_hinted_endpoints == 0)
    return std::nullopt;
  hinted_.push_front(endpoint);
  if (hinted_.size() > cfg_.max_hinted_endpoints) {
    auto evicted = hinted_.back();
    hinted_.pop_back();
    ++stats_.hinted_evictions;
    return evicted;
  }
  return std::nullopt;
}

// -- discovery_call -----------------------------------------------------------

const char* to_string(discovery_error e) {
  switch (e) {
    case discovery_error::none: return "none";
    case discovery_error::no_endpoints: return "no_endpoints";
    case discovery_error::unreachable: return "unreachable";
    case discovery_error::no_leader: return "no_leader";
    case discovery_error::deadline_exceeded: return "deadline_exceeded";
    case discovery_error::redirect_cap: return "redirect_cap";
    case discovery_error::server_error: return "server_error";
    case discovery_error::rejected: return "rejected";
    case discovery_error::fatal: return "fatal";
    case discovery_error::uncertain_outcome: return "uncertain_outcome";
    case discovery_error::not_supported: return "not_supported";
  }
  return "?";
}

const char* to_string(discovery_step s) {
  switch (s) {
    case discovery_step::send: return "send";
    case discovery_step::wait: return "wait";
    case discovery_step::succeeded: return "succeeded";
    case discovery_step::failed: return "failed";
  }
  return "?";
}

discovery_call::discovery_call(const leader_state& ls, bool non_idempotent,
                               coalesce_time start)
  : non_idempotent_(non_idempotent) {
  const auto& cfg = ls.config();
  const auto& d = ls.durations();
  deadline_ = start + d.overall;
  per_attempt_ = d.per_attempt;
  base_backoff_ = d.base_backoff;
  max_backoff_ = d.max_backoff;
  max_attempts_ = cfg.retry.max_attempts;
  max_redirects_pass_ = cfg.max_redirects_per_pass;
  max_redirects_call_ = cfg.max_redirects_per_call;
}

void discovery_call::begin_pass(leader_state& ls, coalesce_time now) {
  // Kept in reverse: the next endpoint is the back (pop_back, and a hint
  // pushed back goes first). With a fresh leader only the leader is listed
  // now; the rest goes under it when the worklist is needed beyond the
  // leader's success (materialize), so the common pass copies one
  // endpoint, not every configured one.
  rest_ = ls.start_pass(now);
  worklist_.clear();
  if (rest_.leader) {
    worklist_.push_back(rest_.leader->endpoint);
    rest_.leader = nullptr; // not kept: the cache may change meanwhile
    rest_pending_ = true;
  } else {
    rest_pending_ = true;
    materialize(ls);
  }
  visited_.clear();
  failed_in_pass_ = 0;
  redirects_pass_ = 0;
  election_in_pass_ = false;
  // max_attempts is floored at the initial worklist: a cold sweep dials
  // every endpoint once (tsoracle retry.rs).
  pass_limit_ = std::max<int>(max_attempts_, static_cast<int>(rest_.size));
}

void discovery_call::materialize(const leader_state& ls) {
  if (!rest_pending_)
    return;
  rest_pending_ = false;
  std::vector<std::string> rest;
  rest.reserve(rest_.size + worklist_.size());
  ls.rest_of_pass(rest_, rest);
  // Under what is listed already (the back goes next).
  std::reverse(rest.begin(), rest.end());
  for (auto& e : worklist_)
    rest.push_back(std::move(e));
  worklist_.assign(std::make_move_iterator(rest.begin()),
                   std::make_move_iterator(rest.end()));
}

discovery_action discovery_call::start(leader_state& ls, coalesce_time now,
                                       coalesce_rng& rng) {
  pass_ = 0;
  begin_pass(ls, now);
  return next(ls, now, rng);
}

discovery_action discovery_call::resume(leader_state& ls, coalesce_time now,
                                        coalesce_rng& rng) {
  if (new_pass_on_resume_) {
    new_pass_on_resume_ = false;
    if (now >= deadline_)
      return surfaced(true);
    ++pass_;
    begin_pass(ls, now);
  }
  return next(ls, now, rng);
}

bool discovery_call::can_send_more() const {
  // (Called on a failure path, after on_result materialized the pass.)
  if (failed_in_pass_ >= pass_limit_)
    return false;
  return std::any_of(worklist_.begin(), worklist_.end(),
                     [this](const std::string& e) { return !visited(e); });
}

discovery_action discovery_call::next(leader_state& ls, coalesce_time now,
                                      coalesce_rng& rng) {
  if (now >= deadline_)
    return surfaced(true);
  // Non-idempotent: once an attempt went out, never send one whose budget
  // the deadline squeezed below a full per-attempt window — a short attempt
  // that times out would turn a clean failure into an uncertain one
  // (tsoracle retry.rs issue_seq_rpc).
  if (non_idempotent_ && attempts_ > 0 && deadline_ - now < per_attempt_)
    return surfaced(true);
  for (;;) {
    while (!worklist_.empty() && visited(worklist_.back()))
      worklist_.pop_back();
    if (!worklist_.empty() || !rest_pending_)
      break;
    materialize(ls);
  }
  if (worklist_.empty() || failed_in_pass_ >= pass_limit_)
    return end_pass(ls, now, rng);
  current_ = std::move(worklist_.back());
  worklist_.pop_back();
  visited_.push_back(current_);
  ++attempts_;
  discovery_action a;
  a.step = discovery_step::send;
  a.endpoint = current_;
  a.budget = std::min(per_attempt_, deadline_ - now);
  a.attempts = attempts_;
  return a;
}

discovery_action discovery_call::end_pass(leader_state&, coalesce_time now,
                                          coalesce_rng& rng) {
  if (election_in_pass_ && now < deadline_) {
    // Ride out the election: re-poll after a jittered pause.
    discovery_action a;
    a.step = discovery_step::wait;
    a.delay = std::min(full_jitter_backoff(base_backoff_, max_backoff_, pass_,
                                           rng),
                       deadline_ - now);
    a.attempts = attempts_;
    new_pass_on_resume_ = true;
    return a;
  }
  return surfaced(false);
}

discovery_action discovery_call::fail(discovery_error e, std::string detail,
                                      transport_error_kind cause) {
  discovery_action a;
  a.step = discovery_step::failed;
  a.error = e;
  a.detail = std::move(detail);
  a.cause = cause;
  a.nothing_committed = nothing_committed_;
  a.attempts = attempts_;
  return a;
}

discovery_action discovery_call::surfaced(bool deadline) {
  // Precedence (tsoracle retry.rs): non-transport last error > sticky
  // election signal > transport last error > nothing tried.
  if (last_non_transport_) {
    auto e = *last_non_transport_ == attempt_class::server_error
               ? discovery_error::server_error
             : *last_non_transport_ == attempt_class::unexpected_status
               ? discovery_error::rejected
               : discovery_error::fatal;
    return fail(e, last_non_transport_detail_, last_non_transport_cause_);
  }
  if (election_sticky_)
    return fail(discovery_error::no_leader,
                "no leader elected within the deadline"
                  + (last_detail_.empty() ? std::string() : ": " + last_detail_));
  if (deadline)
    return fail(discovery_error::deadline_exceeded,
                "overall deadline exceeded"
                  + (last_detail_.empty() ? std::string() : ": " + last_detail_),
                last_cause_);
  if (last_ && *last_ == attempt_class::not_leader)
    return fail(discovery_error::no_leader,
                "no usable leader hint: " + last_detail_);
  if (last_)
    return fail(discovery_error::unreachable, last_detail_, last_cause_);
  return fail(discovery_error::no_endpoints, "no endpoint could be tried");
}

discovery_action discovery_call::on_attempt_timeout(leader_state& ls,
                                                    coalesce_time now,
                                                    coalesce_rng& rng) {
  attempt_report r;
  r.cls = attempt_class::lost;
  r.detail = "attempt timed out";
  r.cause = transport_error_kind::timeout;
  return on_result(ls, r, now, rng);
}

discovery_action discovery_call::after_failure(leader_state& ls,
                                               attempt_class cls,
                                               coalesce_time now,
                                               coalesce_rng& rng) {
  ++failed_in_pass_;
  if (is_transport_class(cls)) {
    ++transport_failures_;
    if (can_send_more() && now < deadline_) {
      auto delay = std::min(full_jitter_backoff(base_backoff_, max_backoff_,
                                                transport_failures_ - 1, rng),
                            deadline_ - now);
      if (delay.count() > 0) {
        discovery_action a;
        a.step = discovery_step::wait;
        a.delay = delay;
        a.attempts = attempts_;
        return a;
      }
    }
  }
  return next(ls, now, rng);
}

discovery_action discovery_call::on_not_leader(leader_state& ls,
                                               const attempt_report& r,
                                               const std::string& from,
                                               coalesce_time now,
                                               coalesce_rng& rng) {
  if (const auto* cur = ls.leader(now); cur && cur->endpoint == from)
    leader_denied_ = true;
  auto hc = ls.check_hint(r.hint ? &*r.hint : nullptr, from, now);
  if (hc.verdict == hint_verdict::usable && visited(hc.endpoint)) {
    // Points back at a node this pass already tried: leadership is
    // moving. Not followed in this pass.
    election_in_pass_ = election_sticky_ = true;
    last_ = attempt_class::not_leader;
    last_detail_ = from + ": not leader, hint points back";
    last_cause_ = r.cause;
    return after_failure(ls, r.cls, now, rng);
  }
  if (hc.verdict == hint_verdict::usable) {
    ++redirects_total_;
    if (redirects_total_ > max_redirects_call_)
      return fail(discovery_error::redirect_cap,
                  "absolute leader-hint redirect cap ("
                    + std::to_string(max_redirects_call_) + ") reached");
    if (++redirects_pass_ > max_redirects_pass_) {
      // Too many redirects in one pass: an election signal; ride out.
      election_in_pass_ = election_sticky_ = true;
      last_ = attempt_class::not_leader;
      last_detail_ = "leader-hint redirect cap per pass reached";
      last_cause_ = r.cause;
      return end_pass(ls, now, rng);
    }
    ls.seat(hc.endpoint, hc.epoch, seat_source::hint, now);
    ls.note_hinted(hc.endpoint);
    worklist_.erase(
      std::remove(worklist_.begin(), worklist_.end(), hc.endpoint),
      worklist_.end());
    worklist_.push_back(hc.endpoint); // the back goes next
    return next(ls, now, rng); // a redirect: no backoff, not charged
  }
  // Unactionable NOT_LEADER: move on, leave the cache alone.
  if (hc.verdict == hint_verdict::absent
      || hc.verdict == hint_verdict::stale_epoch)
    election_in_pass_ = election_sticky_ = true;
  last_ = attempt_class::not_leader;
  last_detail_ = from + ": not leader (hint " + to_string(hc.verdict) + ")";
  last_cause_ = r.cause;
  return after_failure(ls, r.cls, now, rng);
}

discovery_action
discovery_call::on_deposed_answer(leader_state& ls, const std::string& from,
                                  uint64_t epoch, uint64_t leader_epoch,
                                  transport_error_kind cause, coalesce_time now,
                                  coalesce_rng& rng) {
  // A 2xx from another node at an epoch below the fresh leader's: a deposed
  // leader still serving. Its values may repeat the leader's (it has not
  // seen the leader's allocations), so they are not handed out. It did
  // process the request: for seq the outcome is uncertain; ts moves on to
  // the next endpoint.
  materialize(ls);
  nothing_committed_ = false;
  auto detail = from + ": answered at epoch " + std::to_string(epoch)
                + ", below the leader's " + std::to_string(leader_epoch)
                + " (a deposed leader); its answer is not used";
  if (non_idempotent_)
    return fail(discovery_error::uncertain_outcome,
                "uncertain outcome: " + detail, cause);
  last_ = last_non_transport_ = attempt_class::server_error;
  last_detail_ = last_non_transport_detail_ = detail;
  last_cause_ = last_non_transport_cause_ = cause;
  return after_failure(ls, attempt_class::server_error, now, rng);
}

discovery_action discovery_call::on_result(leader_state& ls,
                                           const attempt_report& r,
                                           coalesce_time now,
                                           coalesce_rng& rng) {
  std::string from = std::move(current_);
  current_.clear();
  if (r.cls == attempt_class::success) {
    auto succeeded = [&] {
      discovery_action a;
      a.step = discovery_step::succeeded;
      a.endpoint = std::move(from);
      a.attempts = attempts_;
      return a;
    };
    if (r.unusable) {
      // The RPC ends with it (the batcher fails its callers), but an
      // answer the client cannot use seats no leader, and a cached leader
      // that sends one is dropped: otherwise every later RPC would ask it
      // first, and a 2xx is never retried.
      ls.forget(from);
      return succeeded();
    }
    const auto* cur = ls.leader(now);
    // Both known when the seat is refused for a stale epoch.
    auto leader_epoch = cur && cur->epoch ? *cur->epoch : 0;
    // Below the cached leader's epoch: a deposed leader's answer, unless
    // the cached leader itself said in this call that it no longer leads
    // (a cluster restarted with epochs from 1 again: its epoch is no
    // evidence then; the answer is served, the cache left alone).
    if (ls.seat(from, r.epoch, seat_source::success, now)
          == seat_decision::rejected_stale_epoch
        && !leader_denied_)
      return on_deposed_answer(ls, from, r.epoch.value_or(0), leader_epoch,
                               r.cause, now, rng);
    ls.note_hinted(from);
    return succeeded();
  }
  // Anything but the leader's success may need the rest of the pass.
  materialize(ls);
  const std::string detail
    = from + ": "
      + (r.detail.empty() ? std::string(to_string(r.cls)) : r.detail);
  if (!proves_nothing_committed(r.cls))
    nothing_committed_ = false;
  // seq: a failure after the request may have committed, and not marked
  // pre-commit by the oracle, is uncertain: exactly one server call, never
  // retried (tsoracle client docs, "Non-idempotency and SeqUncertain").
  if (non_idempotent_ && !proves_nothing_committed(r.cls))
    return fail(discovery_error::uncertain_outcome,
                "uncertain outcome: " + detail, r.cause);
  switch (r.cls) {
    case attempt_class::success: // answered above
      break;
    case attempt_class::not_leader: return on_not_leader(ls, r, from, now, rng);
    case attempt_class::refused:
    case attempt_class::busy:
    case attempt_class::lost:
      if (r.unreachable)
        ls.forget(from);
      last_ = r.cls;
      last_detail_ = detail;
      last_cause_ = r.cause;
      return after_failure(ls, r.cls, now, rng);
    case attempt_class::server_error:
    case attempt_class::unexpected_status:
    case attempt_class::handshake_failed:
    case attempt_class::fatal_after_send:
      // Any other error: try the next endpoint; the call fails only when
      // the worklist is exhausted (tsoracle client docs, "Leader discovery
      // and retries").
      last_ = r.cls;
      last_detail_ = detail;
      last_cause_ = r.cause;
      last_non_transport_ = r.cls;
      last_non_transport_detail_ = detail;
      last_non_transport_cause_ = r.cause;
      return after_failure(ls, r.cls, now, rng);
    case attempt_class::rejected:
      return fail(discovery_error::rejected, detail, r.cause);
    case attempt_class::not_supported:
      return fail(discovery_error::not_supported, "not supported: " + detail,
                  r.cause);
    case attempt_class::fatal:
      return fail(discovery_error::fatal, detail, r.cause);
  }
  return fail(discovery_error::fatal, detail);
}

} // namespace coalesce
} // namespace outbound
