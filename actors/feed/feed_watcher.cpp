#include "actors/feed/feed_watcher.hpp"

#include "actors/feed/feed_frames.hpp"
#include "actors/feed/fence_gate.hpp"
#include "actors/feed/keepalive.hpp"
#include "actors/feed/ledger_drain.hpp"
#include "actors/feed/mode_negotiator.hpp"
#include "actors/feed/reconnect_backoff.hpp"
#include "actors/feed/timer_slots.hpp"
#include "actors/feed/wake_intake.hpp"
#include "config/config_error.hpp"
#include "core/request_builder.hpp"
#include "core/time.hpp"
#include "protocol/json_parse.hpp"

#include <boost/json/object.hpp>
#include <caf/actor_cast.hpp>
#include <caf/actor_control_block.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <deque>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace outbound {
inline namespace feed {
namespace {

/// The watcher's own wake-up: the page fetched ahead is the answer to its
/// fetch number `fetch_token` and has arrived (see prefetch below).
struct ahead_ready {
  uint64_t fetch_token = 0;
};

} // namespace
} // namespace feed
} // namespace outbound

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::feed::ahead_ready)

namespace outbound {
inline namespace feed {

feed_ws_endpoint feed_ws_endpoint::from(const client_config& cfg) {
  feed_ws_endpoint e;
  auto url = cfg.base_url;
  while (!url.empty() && url.back() == '/')
    url.pop_back();
  e.origin = url_parts::parse(url);
  // The request builder's headers of every outbound request (User-Agent,
  // the credential, the default headers); the dial adds its x-request-id.
  if (auto p = append_identity_headers(cfg, e.headers); !p.why.empty())
    throw config_error(p.field, p.why);
  return e;
}

namespace {

// -- callback subscriber ----------------------------------------------------------

/// Runs `f(x)` if set: what it threw, if it did.
template <class F, class T>
std::optional<std::string> invoke_callback(const F& f, const T& x) {
  try {
    if (f)
      f(x);
  } catch (const std::exception& e) {
    return std::string{e.what()};
  } catch (...) {
    return std::string{"callback threw"};
  }
  return std::nullopt;
}

template <class F, class T>
caf::result<ack_atom> run_callback(const F& f, const T& x) {
  if (auto why = invoke_callback(f, x))
    return caf::make_error(caf::sec::runtime_error, std::move(*why));
  return ack_atom_v;
}

/// The callbacks' helper takes both protocols: the watcher it serves sends
/// it batches; a handle to it given out as a feed_subscriber_actor
/// (spawn_callback_subscriber) is sent single events.
using callback_subscriber_actor = feed_subscriber_actor::extend<
  caf::replies_to<feed_event_batch>::with<feed_batch_ack>>;

/// The callbacks' helper of one watcher: the actor, and a flag the
/// watcher sets when it terminates.
struct callback_runner {
  caf::actor actor;
  std::shared_ptr<std::atomic<bool>> stopped;
};

/// `stopped` set: the watcher is gone, so the rest of a batch is not run
/// (its events are not acknowledged and come again after a restart, as an
/// event never sent): after a stop at most the callback already running
/// finishes, as with one event per delivery.
callback_subscriber_actor::behavior_type
callback_subscriber_impl(callback_subscriber_actor::pointer, feed_callbacks cbs,
                         std::shared_ptr<std::atomic<bool>> stopped) {
  return {
    [cbs](const feed_event& ev) { return run_callback(cbs.on_event, ev); },
    [cbs, stopped](const feed_event_batch& b) {
      // Each event runs its own callback, in order; a throw is that
      // event's failure, and the batch goes on.
      feed_batch_ack ack;
      for (const auto& ev : b.events) {
        if (stopped->load(std::memory_order_acquire))
          break;
        if (invoke_callback(cbs.on_event, ev))
          ++ack.failed;
      }
      return ack;
    },
    [cbs](const feed_reset& rs) { return run_callback(cbs.on_reset, rs); },
  };
}

callback_subscriber_actor
spawn_callback_helper(caf::actor_system& sys, feed_callbacks cbs,
                      std::shared_ptr<std::atomic<bool>> stopped
                      = std::make_shared<std::atomic<bool>>(false)) {
  if (cbs.detached)
    return sys.spawn<caf::detached>(callback_subscriber_impl, std::move(cbs),
                                    std::move(stopped));
  return sys.spawn(callback_subscriber_impl, std::move(cbs),
                   std::move(stopped));
}

// -- watcher ------------------------------------------------------------------------

/// One queued delivery. Ledger deliveries belong to a page (`page`); frame
/// deliveries count toward the in-frame backlog.
struct queued_delivery {
  bool ledger = false;
  bool is_reset = false;
  uint64_t page = 0;
  /// A reset whose acknowledgement completes the connect of this session
  /// ("connected flips true only after the resync was delivered").
  uint64_t connect_session = 0;
  /// In-frame event: the payload size counted in frames_bytes.
  std::size_t bytes = 0;
  feed_event ev;
  /// Set exactly for a reset (kept out of line: an event's entry stays
  /// small, and a page's thousand entries pack into few deque blocks).
  std::unique_ptr<feed_reset> rs;
  /// In-frame: its acknowledgement moves the acknowledged seq to
  /// `commit_seq` (an event: its seq; a reset: where delivery continues),
  /// in `epoch`.
  bool moves_seq = false;
  std::optional<int64_t> commit_seq;
  /// The hub epoch in force when it was queued, shared by every delivery
  /// of that epoch (a copy per event would allocate: an epoch of 16 hex
  /// digits is past std::string's inline capacity).
  std::shared_ptr<const std::optional<std::string>> epoch;
};

/// The acknowledged position a progress report carries (feed_progress).
struct acked_position {
  feed_mode mode = feed_mode::none;
  std::optional<int64_t> cursor;
  std::optional<std::string> ledger_epoch;
  std::optional<int64_t> last_seq;
  std::optional<std::string> epoch;
};

enum class ws_phase : uint8_t { off, connecting, open, backoff, stopped };

/// A replay page asked for ahead (see prefetch below).
struct ahead_page {
  /// Its number: answers of a page ahead since dropped are ignored.
  uint64_t id = 0;
  int64_t after = 0;
  int limit = 0;
  /// Its answer, once it arrived and before the drain asked for it.
  std::optional<call_outcome> answer;
  /// The answer holds `limit` events or more.
  bool full = false;
  /// A wake, poll, hello or timer reached the drain after it was asked.
  bool news = false;
  /// The drain asked for exactly this page as its fetch number
  /// `adopted` (0: not yet): its answer is that fetch's.
  uint64_t adopted = 0;
};

struct watcher_state {
  feed_config cfg;
  /// Limits of every message parse (frame_json_limits of cfg).
  json_limits frame_limits;
  /// The x-request-id of the current (last dialled) session's upgrade,
  /// carried by the failures that session reports.
  std::string ws_request_id;
  feed_watcher_options opts;
  /// The delivery target: one event per message ...
  feed_subscriber_actor target;
  /// ... or, when set, runs of events per message (and resets one by one).
  feed_batch_subscriber_actor batch_target;
  /// The callbacks' helper's stop flag (callback_runner), when it runs one.
  std::shared_ptr<std::atomic<bool>> runner_stopped;
  core::rng rng;
  /// The x-request-id generator of the upgrade requests: its own stream, so
  /// the jitter drawn from `rng` does not depend on how often it dialled.
  core::rng id_rng;
  std::string client_id;
  std::optional<mode_negotiator> neg;
  std::optional<ledger_drain> drain;
  std::optional<reconnect_backoff> backoff;
  std::optional<keepalive_state> ka;

  // The open session; shared with the cleanup functor, which closes it
  // whatever ends the actor.
  std::shared_ptr<std::shared_ptr<ws_session>> session
    = std::make_shared<std::shared_ptr<ws_session>>();
  ws_phase phase = ws_phase::off;
  uint64_t session_id = 0;
  /// The current session's wake gate (wake_intake.hpp): shared with the
  /// session's intake filter on the io thread; a session gets a fresh gate,
  /// closed until the watcher opens it.
  std::shared_ptr<wake_gate> gate = std::make_shared<wake_gate>();
  /// Folds of absorbed wakes the drain counted as coalesced: those wakes
  /// are already counted at wakes_dropped.
  uint64_t folds_coalesced = 0;
  /// Wake frames the drain saw, and those dropped at intake.
  uint64_t wakes_seen = 0;
  uint64_t wakes_dropped = 0;
  bool opened = false;
  caf::actor_clock::time_point opened_at;
  uint64_t messages = 0;
  bool connected = false;
  /// The keepalive check (the handshake guard while connecting) and the
  /// poll tick, served by one clock timer (timer_slots.hpp).
  timer_slots timers;
  uint64_t reconnect_token = 0;
  bool dialled_before = false;

  uint64_t fetch_token = 0;
  /// The replay page asked for ahead (see prefetch), at most one.
  std::optional<ahead_page> ahead;
  uint64_t ahead_id = 0;
  uint64_t page_token = 0;
  bool page_active = false;
  std::size_t page_outstanding = 0;

  std::deque<queued_delivery> queue;
  /// How many deliveries at the front of `queue` are sent and not yet
  /// acknowledged (a batch is several, anything else one).
  std::size_t in_flight = 0;
  std::size_t frames_queued = 0;
  std::size_t frames_bytes = 0;
  uint64_t frame_resets = 0;
  std::array<uint64_t, reset_cause_count> frame_resets_by_cause{};
  /// The feed was reached (feed_stats::reached).
  bool reached = false;
  feed_stats counters;
  /// Catchup sessions the session itself ended over one refused message
  /// (over ws_max_discard_bytes or past ws_discard_timeout) in a row with
  /// last_seq at `overcap_at`: the hub resends that message after every
  /// redial, and when its prefix shows no seq nothing moves last_seq past
  /// it (see feed_overcap_resync_after).
  int overcap_strikes = 0;
  std::optional<int64_t> overcap_at;
  /// Set: the next subscribe omits last_seq (the hub resyncs past the
  /// refused message); the reason its resync reset will carry. Cleared
  /// only when the hello of a session subscribed that way arrives: a
  /// session lost before its hello retries the resync.
  std::optional<std::string> overcap_resubscribe;
  /// The reason of the resync reset the current session's hello owes
  /// (copied from overcap_resubscribe when the subscribe went out).
  std::optional<std::string> overcap_resync_reason;
  /// The current session's refused message showed its seq and got its
  /// undeliverable reset: its close is no strike (last_seq moved past it).
  bool overcap_seq_reset = false;
  /// The mode of the last hello received, kept across sessions: a session
  /// refused before its hello was parsed (a catchup hub sends the hello
  /// and the resent refused message back to back, and one failed read may
  /// hold both) still counts its strike as the feed's mode says.
  feed_mode last_hello_mode = feed_mode::none;
  /// The fence gate (`fence_atom`): no delivery starts past its deadline.
  fence_gate fence;
  /// The acknowledged position (the stats' acked_*, and the progress
  /// reports of opts.progress_to), whether it moved since the last report,
  /// when that was sent, and the report timer (armed, its token).
  acked_position acked;
  /// The hub epoch the in-frame deliveries queued now are tagged with
  /// (epoch_in_force).
  std::shared_ptr<const std::optional<std::string>> epoch_tag;
  bool progress_dirty = false;
  std::optional<caf::actor_clock::time_point> progress_sent_at;
  bool progress_armed = false;
  uint64_t progress_token = 0;
  bool final_progress_sent = false;
  /// `leave_atom` (a draining stop): no delivery starts; the watcher ends
  /// once the one in flight is answered, then answers these.
  bool draining = false;
  std::vector<caf::typed_response_promise<feed_stats>> drained;

  static inline const char* name = "outbound.feed_watcher";
};

/// The watcher's own interface: the public one plus `ws_event` (a report of
/// its WebSocket session, sent by the session's handler; events of an old
/// session are dropped) and its timers: `(tick_atom, fire time)` for the
/// keepalive check and the poll tick (timer_slots), `(redrain_atom |
/// reconnect_atom | progress_atom, token)` (stale tokens are dropped).
/// Spawned with this one, handed out as feed_watcher_actor.
using watcher_impl_actor = feed_watcher_actor::extend<
  caf::reacts_to<ws_event>, caf::reacts_to<ahead_ready>,
  caf::reacts_to<tick_atom, uint64_t>, caf::reacts_to<redrain_atom, uint64_t>,
  caf::reacts_to<reconnect_atom, uint64_t>,
  caf::reacts_to<progress_atom, uint64_t>>;

using self_ptr = watcher_impl_actor::stateful_pointer<watcher_state>;

void pump(self_ptr self);
void enqueue_ledger_reset(self_ptr self, page_plan& plan,
                          const boost::json::value& body, uint64_t token);
void do_fetch(self_ptr self);
void maybe_prefetch(self_ptr self, const page_summary& page,
                    const page_plan& plan);
void dial(self_ptr self);
void note_overcap_close(self_ptr self, const std::string& detail);

feed_stats make_stats(self_ptr self) {
  auto& st = self->state;
  auto s = st.counters;
  s.cursor = st.drain ? st.drain->cursor() : st.cfg.cursor;
  s.last_seq = st.neg->last_seq();
  s.head = st.drain ? st.drain->target() : std::nullopt;
  s.connected = st.connected;
  s.mode = st.neg->mode();
  s.client_id = st.client_id;
  s.epoch = st.neg->epoch();
  if (st.drain && s.mode == feed_mode::ledger)
    s.epoch = st.drain->epoch();
  s.acked_cursor = st.acked.cursor;
  s.acked_ledger_epoch = st.acked.ledger_epoch;
  s.acked_seq = st.acked.last_seq;
  s.acked_epoch = st.acked.epoch;
  s.resets = st.frame_resets;
  s.resets_by_cause = st.frame_resets_by_cause;
  if (st.drain) {
    s.resets += st.drain->resets() + st.drain->rewinds();
    s.resets_by_cause[static_cast<std::size_t>(reset_cause::retention)]
      += st.drain->resets();
    s.resets_by_cause[static_cast<std::size_t>(reset_cause::rewind)]
      += st.drain->rewinds();
    s.resets += st.drain->undeliverable();
    s.resets_by_cause[static_cast<std::size_t>(reset_cause::undeliverable)]
      += st.drain->undeliverable();
    for (std::size_t r = 0; r < drain_error_reason_count; ++r)
      s.drain_errors_by_reason[r]
        = st.drain->drain_errors(static_cast<drain_error_reason>(r));
    s.wakes_coalesced = st.drain->wakes_coalesced() - st.folds_coalesced
                        + st.wakes_dropped;
  }
  s.wakes = st.wakes_seen + st.wakes_dropped;
  s.reached = st.reached;
  s.drain_errors = st.drain ? st.drain->drain_errors() : 0;
  s.pages = st.drain ? st.drain->pages() : 0;
  s.fence_deadline = st.fence.deadline();
  s.fence_holding = st.fence.holding();
  s.fence_held_deliveries = st.fence.held_deliveries();
  s.fence_held_time = st.fence.held_time(self->clock().now());
  return s;
}

// -- progress reports
// --------------------------------------------------------------

void send_progress(self_ptr self, bool final) {
  auto& st = self->state;
  feed_progress p;
  p.feed_id = st.opts.feed_id;
  p.owner_token = st.opts.owner_token;
  p.mode = st.acked.mode;
  p.cursor = st.acked.cursor;
  p.ledger_epoch = st.acked.ledger_epoch;
  p.last_seq = st.acked.last_seq;
  p.epoch = st.acked.epoch;
  p.client_id = st.client_id;
  p.final = final;
  // From the watcher itself: a progress_to that also asked for the stop
  // gets the final report before the stop's answer (CAF keeps the order
  // of messages between two actors).
  self->send(st.opts.progress_to, std::move(p));
  st.progress_dirty = false;
  st.progress_sent_at = self->clock().now();
}

/// Reports the acknowledged position if it moved: now, or when the
/// interval since the last report is over (one timer at a time; the report
/// then carries the latest position).
void maybe_report(self_ptr self) {
  auto& st = self->state;
  if (!st.opts.progress_to || !st.progress_dirty
      || st.phase == ws_phase::stopped)
    return;
  auto now = self->clock().now();
  auto interval = feed_seconds(st.opts.progress_interval);
  if (!st.progress_sent_at || now - *st.progress_sent_at >= interval) {
    send_progress(self, false);
    return;
  }
  if (st.progress_armed)
    return;
  st.progress_armed = true;
  self->delayed_send(self, *st.progress_sent_at + interval - now,
                     progress_atom_v, ++st.progress_token);
}

/// The last report, once, whatever stops the watcher.
void final_progress(self_ptr self) {
  auto& st = self->state;
  if (!st.opts.progress_to || st.final_progress_sent)
    return;
  st.final_progress_sent = true;
  send_progress(self, true);
}

/// The ledger cursor after an acknowledged ledger delivery (or a page that
/// moved it without one). Not while a rewind waits for its reset: the
/// cursor is then already the new ledger's, and the application has not
/// been told yet. Kept with or without progress reports: the stats'
/// acked_cursor is the resume key too.
void note_ledger_progress(self_ptr self) {
  auto& st = self->state;
  if (!st.drain || st.drain->rewinding())
    return;
  auto c = st.drain->cursor();
  const auto& e = st.drain->epoch();
  if (st.acked.cursor == c && st.acked.mode == feed_mode::ledger
      && (!e || st.acked.ledger_epoch == e))
    return;
  st.acked.cursor = c;
  if (e && st.acked.ledger_epoch != e)
    st.acked.ledger_epoch = e;
  st.acked.mode = feed_mode::ledger;
  st.progress_dirty = true;
}

void shutdown(self_ptr self) {
  auto& st = self->state;
  if (st.phase == ws_phase::stopped)
    return;
  final_progress(self);
  // A draining stop answers after the final report, as stop_atom does.
  if (!st.drained.empty()) {
    auto s = make_stats(self);
    for (auto& rp : st.drained)
      rp.deliver(s);
    st.drained.clear();
  }
  st.phase = ws_phase::stopped;
  st.connected = false;
  // Set here, not only in the cleanup functor: CAF runs a monitor attached
  // later first, so a monitor's down message can beat the functor.
  if (st.runner_stopped)
    st.runner_stopped->store(true, std::memory_order_release);
  st.gate->close();
  if (*st.session) {
    (*st.session)->close();
    st.session->reset();
  }
  self->quit();
}

void report(self_ptr self, feed_failure f) {
  auto& fn = self->state.opts.on_failure;
  if (!fn)
    return;
  try {
    fn(f);
  } catch (...) {
    // An observer must not take the watcher down.
  }
}

void report_replay(self_ptr self, const call_error& e, const char* source,
                   std::string kind) {
  auto& st = self->state;
  feed_failure f;
  f.source = source;
  f.kind = std::move(kind);
  f.error = e.kind;
  f.status = e.status;
  f.detail = e.detail;
  f.request_id = e.request_id;
  f.after = st.drain->fetch_after();
  f.limit = st.drain->fetch_limit();
  report(self, std::move(f));
}

bool can_drain(self_ptr self) {
  auto& st = self->state;
  return st.drain && st.neg->mode() == feed_mode::ledger
         && st.phase != ws_phase::stopped;
}

/// Opens the session's wake gate at what the drain would coalesce or
/// absorb now, or closes it. Called after every step that can change the
/// drain.
void refresh_gate(self_ptr self) {
  auto& st = self->state;
  if (can_drain(self) && st.phase == ws_phase::open)
    st.gate->set(st.drain->cursor(), coalesced_wake_hint(*st.drain),
                 st.drain->absorbs_raises());
  else
    st.gate->close();
}

void act(self_ptr self, drain_action a);

/// Applies the wakes the io thread absorbed since the last drain step, as
/// one wake with the highest cursor. Called before every step that can
/// change the drain (its page, its failure, a timer, a frame).
void fold_wakes(self_ptr self) {
  auto& st = self->state;
  auto x = st.gate->fold();
  if (!x || !can_drain(self))
    return;
  auto before = st.drain->wakes_coalesced();
  act(self, st.drain->on_wake(*x));
  st.folds_coalesced += st.drain->wakes_coalesced() - before;
}

// -- ledger ------------------------------------------------------------------------

void quiesce_drain(self_ptr self) {
  auto& st = self->state;
  if (!st.drain)
    return;
  st.drain->quiesce();
  ++st.fetch_token; // an answer in flight is dropped
  st.ahead.reset(); // and so is a page asked for ahead
  ++st.page_token;  // queued deliveries of the page no longer finish it
  st.page_active = false;
  // Ledger deliveries not yet sent are dropped: the cursor has not moved
  // past them, so a later drain reads them again (and an in-frame model
  // starts with its own reset). Those in flight, if any, stay.
  auto first
    = st.queue.begin()
      + static_cast<std::ptrdiff_t>(std::min(st.in_flight, st.queue.size()));
  st.queue.erase(
    std::remove_if(first, st.queue.end(),
                   [](const queued_delivery& d) { return d.ledger; }),
    st.queue.end());
}

void act(self_ptr self, drain_action a) {
  // Every input of the drain (a wake, a poll, a hello, a timer) comes
  // through here: a short page asked ahead before it is no longer usable.
  if (auto& ahead = self->state.ahead; ahead && ahead->adopted == 0)
    ahead->news = true;
  if (a == drain_action::fetch)
    do_fetch(self);
  else if (a == drain_action::rearm)
    self->delayed_send(self, self->state.drain->rearm_delay(), redrain_atom_v,
                       self->state.drain->rearm_id());
}

void request_drain(self_ptr self, drain_trigger why) {
  if (!can_drain(self))
    return;
  act(self, self->state.drain->request(why));
}

void after_drain(self_ptr self, drain_next next) {
  switch (next.what) {
    case drain_next::kind::fetch:
      if (can_drain(self))
        do_fetch(self);
      else
        quiesce_drain(self);
      break;
    case drain_next::kind::redrain:
      self->delayed_send(self, next.delay, redrain_atom_v, next.redrain_id);
      break;
    case drain_next::kind::idle:
      break;
    case drain_next::kind::reset: {
      // An unreadable event named from its own body: its reset is a page
      // of its own.
      auto& st = self->state;
      st.page_active = true;
      st.page_outstanding = 0;
      auto token = ++st.page_token;
      enqueue_ledger_reset(self, next.plan, boost::json::value{}, token);
      pump(self);
      break;
    }
  }
}

void page_done(self_ptr self) {
  auto& st = self->state;
  st.page_active = false;
  after_drain(self, st.drain->on_page_done());
}

void on_fetch_error(self_ptr self, const call_error& e,
                    std::string_view body = {}) {
  auto& st = self->state;
  if (auto why = unreadable_reason(e)) {
    // The replay answered, but the page cannot be read: a drain error,
    // narrowed to the event that causes it (ledger_drain), whose id the
    // body may still show.
    report_replay(self, e, "page", to_string(*why));
    after_drain(self, st.drain->on_unreadable(
                        *why, e.detail, first_event_id(body, st.cfg.fields)));
    return;
  }
  ++st.counters.replay_errors;
  report_replay(self, e, "replay", to_string(e.kind));
  after_drain(self, st.drain->on_fetch_failed());
}

/// The reset of a page plan, queued as the page's first delivery.
void enqueue_ledger_reset(self_ptr self, page_plan& plan,
                          const boost::json::value& body, uint64_t token) {
  auto& st = self->state;
  queued_delivery d;
  d.ledger = true;
  d.is_reset = true;
  d.page = token;
  d.rs = std::make_unique<feed_reset>();
  d.rs->mode = feed_mode::ledger;
  d.rs->cause = plan.cause;
  d.rs->from_cursor = plan.reset_from;
  d.rs->to_cursor = plan.reset_to;
  d.rs->lost_from = plan.reset_from;
  d.rs->lost_to = plan.reset_to;
  d.rs->old_epoch = std::move(plan.old_epoch);
  d.rs->new_epoch = std::move(plan.new_epoch);
  d.rs->event_id = plan.event_id;
  d.rs->reason = std::move(plan.reason);
  // The page without its events, in the page's own key order.
  boost::json::object detail;
  if (body.is_object())
    for (auto& kv : body.get_object())
      if (kv.key() != st.cfg.fields.events)
        detail.emplace(kv.key(), kv.value());
  d.rs->detail = std::move(detail);
  st.queue.push_back(std::move(d));
  ++st.page_outstanding;
}

void on_page(self_ptr self, call_outcome& o) {
  auto& st = self->state;
  if (o.error) {
    on_fetch_error(self, *o.error, o.unreadable_body);
    return;
  }
  st.reached = true;
  // The page's events are moved out of the body the client parsed (the
  // reset's detail below leaves the events array out anyway).
  auto page = take_page(o.body, st.cfg.fields,
                        static_cast<std::size_t>(st.drain->fetch_limit()));
  auto plan = st.drain->on_page(page.summary);
  maybe_prefetch(self, page.summary, plan);
  st.page_active = true;
  st.page_outstanding = 0;
  auto token = ++st.page_token;
  if (plan.reset)
    enqueue_ledger_reset(self, plan, o.body, token);
  for (auto i : plan.deliver) {
    queued_delivery d;
    d.ledger = true;
    d.page = token;
    d.ev.mode = feed_mode::ledger;
    move_into(d.ev.event, std::move(page.events[i])); // keeps the page arena
    d.ev.id = page.summary.ids[i];
    st.queue.push_back(std::move(d));
    ++st.page_outstanding;
  }
  if (st.page_outstanding == 0) {
    page_done(self);
    note_ledger_progress(self); // a page of other subjects' ids only
    maybe_report(self);
  } else {
    pump(self);
  }
}

// The answer of fetch `token` (a page asked for now or ahead).
void on_fetch_answer(self_ptr self, uint64_t token, call_outcome& o) {
  if (token != self->state.fetch_token)
    return;
  fold_wakes(self);
  on_page(self, o);
  refresh_gate(self);
}

// -- one page ahead
// ------------------------------------------------------------
//
// A full page is usually followed by a fetch of the next one, asked after
// its last event once every event of the page is acknowledged. That fetch
// is sent as soon as the page arrives instead, so the hub renders the next
// page while this one is delivered (Kafka's consumer fetches ahead of the
// application in the same way, bounded by its fetch buffers). At most one
// page is ahead. The drain still decides every fetch: when it asks for
// exactly the page ahead (same after and limit) that answer is its
// answer, as if the fetch had been sent then; any other request (a
// rewind, a narrowing, a page cursor past the last id) drops the page
// ahead unread, and so does a switch to in-frame delivery. A full page
// ahead is always usable: events are appended to a ledger and never
// change, so the `limit` events after a position read a little earlier
// are the same events (a retention floor that passed the cursor
// meanwhile is seen by the next page). A short page describes the
// ledger's head when it was asked: it is used only if no wake, poll or
// hello reached the drain since (the drain's fetch consumes them, and
// they may announce more). An error or an unreadable answer is never
// used: the page is asked afresh when the drain wants it, so the drain
// neither backs off nor narrows on an old answer.

void send_fetch(self_ptr self, uint64_t token);

// A page of at least `limit` events.
bool full_page(const call_outcome& o, const feed_fields& fields, int limit) {
  if (!o.body.is_object())
    return false;
  const auto& obj = o.body.get_object();
  auto ev = obj.find(fields.events);
  return ev != obj.end() && ev->value().is_array()
         && ev->value().get_array().size() >= static_cast<std::size_t>(limit);
}

void on_ahead_answer(self_ptr self, uint64_t id, call_outcome o) {
  auto& st = self->state;
  if (!st.ahead || st.ahead->id != id)
    return; // dropped meanwhile
  bool ok = !o.error;
  bool full = ok && full_page(o, st.cfg.fields, st.ahead->limit);
  auto token = st.ahead->adopted;
  if (token == 0) {
    if (ok) {
      st.ahead->answer = std::move(o);
      st.ahead->full = full;
    } else {
      st.ahead.reset(); // the drain will ask afresh
    }
    return;
  }
  bool usable = ok && (full || !st.ahead->news);
  st.ahead.reset();
  if (usable)
    on_fetch_answer(self, token, o);
  else if (token == st.fetch_token)
    send_fetch(self, token); // the drain's fetch, asked now
}

void maybe_prefetch(self_ptr self, const page_summary& page,
                    const page_plan& plan) {
  auto& st = self->state;
  auto& d = *st.drain;
  auto limit = d.fetch_limit();
  if (!st.opts.prefetch || st.draining || st.ahead
      || plan.verdict != page_verdict::deliver || plan.reset || page.over_limit
      || d.isolating() || d.rewinding()
      || page.ids.size() != static_cast<std::size_t>(limit) || !page.ids.back()
      || plan.deliver.empty() || plan.deliver.back() != page.ids.size() - 1)
    return;
  auto after = *page.ids.back();
  auto id = ++st.ahead_id;
  st.ahead.emplace();
  st.ahead->id = id;
  st.ahead->after = after;
  st.ahead->limit = limit;
  self
    ->request(st.opts.client, caf::infinite,
              replay_request(st.cfg, after, limit))
    .then(
      [self, id](call_outcome& o) { on_ahead_answer(self, id, std::move(o)); },
      [self, id](caf::error& err) {
        call_outcome o;
        auto& e = o.error.emplace();
        e.kind = error_kind::service_unavailable;
        e.detail = "replay call failed: " + caf::to_string(err);
        on_ahead_answer(self, id, std::move(o));
      });
}

// The drain asks for fetch `token`: true if the page ahead is that page
// (taken now if it arrived, else when it does); any other page drops it.
bool take_ahead(self_ptr self, uint64_t token) {
  auto& st = self->state;
  if (!st.ahead)
    return false;
  if (st.ahead->after != st.drain->fetch_after()
      || st.ahead->limit != st.drain->fetch_limit()
      || (st.ahead->answer && !st.ahead->full && st.ahead->news)) {
    st.ahead.reset();
    return false;
  }
  st.ahead->adopted = token;
  if (st.ahead->answer) // handled as a message of its own, never nested
    self->send(self, ahead_ready{token});
  return true;
}

void do_fetch(self_ptr self) {
  // A draining stop fetches nothing more: the watcher ends once the
  // delivery in flight is answered (settling a page's last event would
  // otherwise ask for the next page, whose answer is dropped).
  if (self->state.draining)
    return;
  auto token = ++self->state.fetch_token;
  if (!take_ahead(self, token))
    send_fetch(self, token);
}

// Sends fetch `token`: the replay page the drain asks for now.
void send_fetch(self_ptr self, uint64_t token) {
  auto& st = self->state;
  self
    ->request(
      st.opts.client, caf::infinite,
      replay_request(st.cfg, st.drain->fetch_after(), st.drain->fetch_limit()))
    .then([self, token](call_outcome& o) { on_fetch_answer(self, token, o); },
          [self, token](caf::error& err) {
            auto& st = self->state;
            if (token != st.fetch_token)
              return;
            fold_wakes(self);
            call_error e;
            e.kind = error_kind::service_unavailable;
            e.detail = "replay call failed: " + caf::to_string(err);
            on_fetch_error(self, e);
            refresh_gate(self);
          });
}

// Arms the one clock timer of timer_slots when no pending one fires by the
// earliest deadline; the message carries its fire time (nanoseconds of the
// actor clock), so that the firing is known for the one it is.
void arm_timer(self_ptr self) {
  auto& st = self->state;
  auto at = st.timers.arm();
  if (!at)
    return;
  auto now = self->clock().now();
  auto delay = *at > now ? *at - now : caf::actor_clock::duration_type{0};
  self->delayed_send(self, delay, tick_atom_v,
                     static_cast<uint64_t>(at->time_since_epoch().count()));
}

void schedule_poll(self_ptr self) {
  auto& st = self->state;
  st.timers.set(timer_slot::poll,
                self->clock().now() + feed_seconds(st.cfg.poll_interval));
  arm_timer(self);
}

// The poll tick: a replay read in case a wake was lost.
void on_poll(self_ptr self) {
  auto& st = self->state;
  if (st.phase == ws_phase::stopped || st.draining)
    return; // and no further tick
  schedule_poll(self);
  fold_wakes(self);
  request_drain(self, drain_trigger::poll);
  refresh_gate(self);
}

// -- delivery ----------------------------------------------------------------------

// Settles the delivery at the front of the queue, acknowledged (`ok`) or
// answered with an error.
void settle(self_ptr self, bool ok) {
  auto& st = self->state;
  auto d = std::move(st.queue.front());
  st.queue.pop_front();
  --st.in_flight;
  if (!d.ledger) {
    --st.frames_queued;
    st.frames_bytes -= d.bytes;
  }
  if (d.moves_seq) {
    st.acked.mode = d.is_reset ? d.rs->mode : d.ev.mode;
    st.acked.last_seq = d.commit_seq;
    if (d.epoch && *d.epoch != st.acked.epoch)
      st.acked.epoch = *d.epoch;
    st.progress_dirty = true;
  }
  if (d.is_reset) {
    if (!ok)
      ++st.counters.reset_callback_errors;
    if (d.connect_session != 0 && d.connect_session == st.session_id
        && st.phase == ws_phase::open)
      st.connected = true;
  } else if (ok) {
    ++st.counters.events_delivered;
  } else {
    ++st.counters.event_callback_errors;
  }
  if (d.ledger) {
    // The cursor moves past a delivered event even when its callback
    // failed: the failure is counted, the feed goes on.
    // Only the page in force moves the cursor: a delivery of a page the
    // drain has since given up (a mode switch) must not move a cursor a
    // rewind has set back.
    if (!d.is_reset && d.page == st.page_token)
      st.drain->on_event_delivered(d.ev.id);
    if (st.page_active && d.page == st.page_token
        && --st.page_outstanding == 0) {
      fold_wakes(self); // before the drain's step, as every handler does
      page_done(self);
      refresh_gate(self);
    } else {
      // A wake below the cursor is now a low hint, which the drain must
      // see (no probe per event on this path).
      st.gate->raise_low(st.drain->cursor());
    }
    note_ledger_progress(self);
  }
}

// The deliveries in flight are answered: the first `failed` of them with
// an error (the order does not matter: only counters tell them apart),
// the others acknowledged. Settling the last event of a page may end the
// page and start the next fetch; nothing new is sent before all of them
// are settled.
void on_delivered(self_ptr self, std::size_t failed) {
  auto& st = self->state;
  auto n = st.in_flight;
  for (std::size_t i = 0; i < n && !st.queue.empty() && st.in_flight > 0; ++i)
    settle(self, i >= failed);
  if (st.draining && st.in_flight == 0) {
    // The delivery in flight at a draining stop is answered: its position
    // goes into the final report.
    shutdown(self);
    return;
  }
  maybe_report(self);
  pump(self);
}

auto delivery_failed(self_ptr self) {
  return [self](caf::error& err) {
    if (err == caf::sec::request_receiver_down) {
      shutdown(self);
      return;
    }
    on_delivered(self, self->state.in_flight);
  };
}

template <class Handle, class T>
void send_delivery(self_ptr self, const Handle& target, T&& msg) {
  self->request(target, caf::infinite, std::forward<T>(msg))
    .then([self](ack_atom) { on_delivered(self, 0); }, delivery_failed(self));
}

// The event of queued delivery `d`, moved out (the rest of `d` stays for
// its settling), stamped with the feed's id and owner token.
feed_event take_event(const watcher_state& st, queued_delivery& d) {
  feed_event ev;
  ev.mode = d.ev.mode;
  move_into(ev.event, std::move(d.ev.event));
  ev.id = d.ev.id;
  ev.seq = d.ev.seq;
  ev.feed_id = st.opts.feed_id;
  ev.owner_token = st.opts.owner_token;
  return ev;
}

// Sends the events at the front of the queue as one batch: consecutive
// events of the same page (ledger) or in-frame events, up to
// max_delivery_batch.
void send_batch(self_ptr self) {
  auto& st = self->state;
  const auto& first = st.queue.front();
  bool ledger = first.ledger;
  auto page = first.page;
  feed_event_batch b;
  auto cap = std::min(st.opts.max_delivery_batch, st.queue.size());
  b.events.reserve(cap);
  for (auto& d : st.queue) {
    if (b.events.size() == cap || d.is_reset || d.ledger != ledger
        || (ledger && d.page != page))
      break;
    b.events.push_back(take_event(st, d));
  }
  st.in_flight = b.events.size();
  self->request(st.batch_target, caf::infinite, std::move(b))
    .then(
      [self](const feed_batch_ack& ack) {
        on_delivered(self, static_cast<std::size_t>(std::min<uint64_t>(
                             ack.failed, self->state.in_flight)));
      },
      delivery_failed(self));
}

void pump(self_ptr self) {
  auto& st = self->state;
  if (st.in_flight > 0 || st.queue.empty() || st.phase == ws_phase::stopped
      || st.draining)
    return;
  // Past the fence deadline nothing starts; a later fence resumes.
  if (st.fence.armed() && !st.fence.may_start(self->clock().now()))
    return;
  auto& d = st.queue.front();
  if (st.batch_target && !d.is_reset) {
    send_batch(self);
    return;
  }
  st.in_flight = 1;
  if (d.is_reset) {
    d.rs->feed_id = st.opts.feed_id;
    d.rs->owner_token = st.opts.owner_token;
    if (st.batch_target)
      send_delivery(self, st.batch_target, *d.rs);
    else
      send_delivery(self, st.target, *d.rs);
  } else {
    send_delivery(self, st.target, take_event(st, d));
  }
}

/// The negotiator's epoch as a tag shared by the deliveries queued in it:
/// a new one only when the epoch changed.
std::shared_ptr<const std::optional<std::string>>
epoch_in_force(watcher_state& st) {
  const auto& e = st.neg->epoch();
  if (!st.epoch_tag || *st.epoch_tag != e)
    st.epoch_tag = std::make_shared<const std::optional<std::string>>(e);
  return st.epoch_tag;
}

void enqueue_frame_reset(self_ptr self, const frame_reset_info& info,
                         boost::json::value detail, bool completes_connect) {
  auto& st = self->state;
  queued_delivery d;
  d.is_reset = true;
  d.connect_session = completes_connect ? st.session_id : 0;
  d.rs = std::make_unique<feed_reset>();
  d.rs->mode = st.neg->mode();
  d.rs->cause = info.cause;
  d.rs->last_seq = info.last_seq;
  d.rs->new_seq = info.new_seq;
  d.rs->old_epoch = info.old_epoch;
  d.rs->new_epoch = info.new_epoch;
  d.rs->lost_from = info.lost_from;
  d.rs->lost_to = info.lost_to;
  d.rs->detail = std::move(detail);
  // Where the negotiator's last_seq went with this reset: its
  // acknowledgement commits that (delivery continues after it). Kept
  // with or without progress reports: the stats' acked_seq is the resume
  // key too.
  switch (info.cause) {
    case reset_cause::resync:
    case reset_cause::epoch_changed:
    case reset_cause::reconnect:
    case reset_cause::takeover:
    case reset_cause::gap:
      d.moves_seq = true;
      d.commit_seq = info.new_seq;
      break;
    case reset_cause::undeliverable:
      d.moves_seq = info.lost_to.has_value();
      d.commit_seq = info.lost_to;
      break;
    case reset_cause::retention:
    case reset_cause::rewind:
    case reset_cause::inferred:
    case reset_cause::wake: break; // ledger, or no position known
  }
  d.epoch = epoch_in_force(st);
  st.queue.push_back(std::move(d));
  ++st.frames_queued;
  ++st.frame_resets;
  ++st.frame_resets_by_cause.at(static_cast<std::size_t>(info.cause));
}

void enqueue_frame_event(self_ptr self, parsed_message& m,
                         std::size_t bytes) {
  auto& st = self->state;
  queued_delivery d;
  d.bytes = bytes;
  st.frames_bytes += bytes;
  d.ev.mode = st.neg->mode();
  d.ev.seq = m.frame.seq;
  d.ev.event = std::move(m.json);
  if (d.ev.seq) {
    d.moves_seq = true;
    d.commit_seq = d.ev.seq;
    d.epoch = epoch_in_force(st);
  }
  st.queue.push_back(std::move(d));
  ++st.frames_queued;
}

// -- WebSocket ---------------------------------------------------------------------

void arm_keepalive(self_ptr self, caf::actor_clock::time_point at) {
  self->state.timers.set(timer_slot::keepalive, at);
  arm_timer(self);
}

void schedule_reconnect(self_ptr self) {
  auto& st = self->state;
  st.phase = ws_phase::backoff;
  auto delay = st.backoff->next_delay(st.rng);
  self->delayed_send(self, delay, reconnect_atom_v, ++st.reconnect_token);
}

/// The current session is over (closed by the peer, failed, dead, or
/// closed by us): count it, back off, dial again later.
void end_session(self_ptr self, bool close_it) {
  auto& st = self->state;
  st.gate->close();
  if (close_it && *st.session)
    (*st.session)->close();
  st.session->reset();
  st.timers.clear(timer_slot::keepalive); // the keepalive / handshake guard
  if (st.opened)
    ++st.counters.disconnects;
  st.connected = false;
  auto now = self->clock().now();
  st.backoff->on_session_end(
    classify_session(st.opened, st.messages,
                     st.opened ? now - st.opened_at : feed_duration{0},
                     feed_seconds(st.cfg.stable_period)));
  schedule_reconnect(self);
}

void on_hello(self_ptr self, parsed_message& m) {
  auto& st = self->state;
  auto r = st.neg->on_hello(m.hello);
  st.last_hello_mode = r.mode;
  // The resync asked for (if any) arrived: it is not to be retried.
  if (st.overcap_resync_reason)
    st.overcap_resubscribe.reset();
  if (r.mode != feed_mode::ledger)
    quiesce_drain(self);
  switch (r.decision) {
    case hello_decision::ledger:
      st.connected = true;
      if (can_drain(self))
        act(self, st.drain->on_hello(m.hello.epoch, m.hello.cursor));
      break;
    case hello_decision::catchup_resume:
      st.connected = true;
      break;
    case hello_decision::catchup_reset:
    case hello_decision::ephemeral_reset:
      enqueue_frame_reset(self, *r.reset, std::move(m.json), true);
      if (st.overcap_resync_reason)
        st.queue.back().rs->reason = std::move(*st.overcap_resync_reason);
      pump(self);
      break;
  }
  st.overcap_resync_reason.reset();
}

/// A backlog of in-frame deliveries over either bound. One message alone
/// is never a backlog (it is within the frame cap and the parse bound):
/// refusing it would only make catchup resend it forever.
bool frames_over(const watcher_state& st, std::size_t frames,
                 std::size_t bytes) {
  return st.frames_queued > frames
         || (st.frames_queued > 1 && st.frames_bytes > bytes);
}

/// An in-frame event that cannot be read (m.unreadable says why): one
/// undeliverable reset in its place (with its seq when the text shows it),
/// never silence. Its reason and the failure's kind keep the vocabulary of
/// replay pages (unparseable, or over_cap for a message over
/// ws_max_frame_bytes); the counters tell the finer reason.
void enqueue_unreadable_frame(self_ptr self, const parsed_message& m) {
  auto& st = self->state;
  ++st.counters.unreadable_frames;
  ++st.counters
      .unreadable_frames_by_reason[static_cast<std::size_t>(m.unreadable)];
  auto why = m.unreadable == frame_error_reason::over_cap
               ? drain_error_reason::over_cap
               : drain_error_reason::unparseable;
  auto reason = std::string{to_string(why)} + ": " + m.error;
  feed_failure f;
  f.source = "frame";
  f.kind = to_string(why);
  f.detail = reason;
  report(self, std::move(f));
  auto info = st.neg->on_unreadable_event(m.frame.seq);
  if (!info)
    return;
  enqueue_frame_reset(self, *info, nullptr, false);
  st.queue.back().rs->reason = std::move(reason);
  if (info->lost_to)
    st.queue.back().rs->event_id = info->lost_to;
}

/// An in-frame reset that stands for the hello a ws-only hub did not send
/// (inferred, or a takeover inferred from a first data frame): its
/// acknowledgement completes the connect.
bool completes_connect(reset_cause c) {
  return c == reset_cause::inferred || c == reset_cause::takeover;
}

void on_frame(self_ptr self, parsed_message& m, std::size_t bytes) {
  auto& st = self->state;
  auto before = st.neg->mode();
  auto r = st.neg->on_frame(m.frame);
  switch (r.decision) {
    case frame_decision::wake:
      ++st.wakes_seen;
      if (can_drain(self))
        act(self, st.drain->on_wake(m.frame.wake_cursor));
      break;
    case frame_decision::deliver:
      enqueue_frame_event(self, m, bytes);
      break;
    case frame_decision::duplicate:
    case frame_decision::ignore:
      break;
    case frame_decision::reset_then_deliver:
      enqueue_frame_reset(self, *r.reset, nullptr,
                          completes_connect(r.reset->cause));
      enqueue_frame_event(self, m, bytes);
      break;
    case frame_decision::reset:
      enqueue_frame_reset(self, *r.reset, nullptr,
                          completes_connect(r.reset->cause));
      break;
  }
  // Catchup and ephemeral deliver events from frames: a frame that cannot
  // be read may be an event (the ledger takes any message for a wake; a
  // frame before any hello only makes the watcher infer ephemeral).
  if (m.frame.type == frame_type::not_json
      && (before == feed_mode::catchup || before == feed_mode::ephemeral))
    enqueue_unreadable_frame(self, m);
  pump(self);
  if (frames_over(st, st.cfg.max_pending_frames,
                  st.cfg.max_pending_frame_bytes)
      && st.phase == ws_phase::open) {
    // Backpressure: stop reading; catchup resumes from last_seq (every
    // queued event is still delivered), ephemeral resets.
    ++st.counters.overflows;
    end_session(self, true);
  }
}

// The session is open: subscribe (from the drain's cursor and the last seq)
// and start the keepalive.
void on_ws_opened(self_ptr self, caf::actor_clock::time_point now) {
  auto& st = self->state;
  if (st.phase != ws_phase::connecting)
    return;
  st.phase = ws_phase::open;
  st.opened = true;
  st.opened_at = now;
  ++st.counters.connects;
  if (!st.drain)
    st.reached = true; // ws-only: the session is the feed
  std::optional<int64_t> cursor;
  if (st.drain)
    cursor = st.drain->cursor();
  auto last_seq = st.neg->last_seq();
  st.overcap_resync_reason.reset();
  if (st.overcap_resubscribe) {
    // Escalation (see the closed case): a subscribe without last_seq
    // is a first connect to the hub, which answers with a resync hello
    // at its head and replays nothing; the hello's reset covers every
    // seq skipped, (last_seq, head], the refused message's included.
    last_seq.reset();
    st.overcap_resync_reason = st.overcap_resubscribe;
  }
  (*st.session)
    ->send_text(subscribe_frame(st.cfg.prefixes, st.client_id, last_seq, cursor,
                                st.neg->epoch()));
  if (auto first = st.ka->on_open(now))
    arm_keepalive(self, *first);
  else
    st.timers.clear(timer_slot::keepalive); // no keepalive: no guard either
  if (st.neg->on_open() == open_decision::enter_ledger) {
    st.connected = true;
    request_drain(self, drain_trigger::connect);
  }
}

// One message of the open session: a hello or a frame.
void on_ws_message(self_ptr self, const ws_event& ev,
                   caf::actor_clock::time_point now) {
  auto& st = self->state;
  if (st.phase != ws_phase::open)
    return;
  ++st.messages;
  st.ka->on_activity(now);
  auto m
    = parse_message(ev.payload, st.cfg.fields.wake_cursor, st.frame_limits);
  if (m.is_hello)
    on_hello(self, m);
  else
    // A queued event costs its parsed form (up to the parse bound, 16x
    // the text for tiny arrays), not its text.
    on_frame(self, m, std::max(ev.payload.size(), m.parsed_bytes));
}

// A message over ws_max_frame_bytes, already discarded by the
// session (only its first bytes came): a frame that cannot be read,
// like one that does not parse. In-frame tiers get one undeliverable
// reset (over_cap, with the seq the prefix shows); the ledger takes
// it for a wake without a hint (its drain still runs on its timer).
// The session stays open: the same frame again is the same reset,
// never a reconnect loop.
//
// `closing`: the session refused the message (over
// ws_max_discard_bytes, or past ws_discard_timeout) and ends right
// after this report; the `closed` case counts and reports it. The
// seq its prefix shows still gets its reset here, so that last_seq
// moves past it and the hub, which resends from last_seq after the
// redial, does not send it again. Without a seq a catchup watcher
// has nothing to reset yet: the closed case counts the refusal and
// escalates (feed_overcap_resync_after).
void on_ws_too_large(self_ptr self, const ws_event& ev,
                     caf::actor_clock::time_point now) {
  auto& st = self->state;
  if (st.phase != ws_phase::open)
    return;
  // A refusal is no sign of a healthy session (classify_session): the
  // redial backs off as after any failure.
  if (!ev.closing)
    ++st.messages;
  if (!ev.closing)
    ++st.counters.oversized_frames;
  st.ka->on_activity(now);
  parsed_message m;
  m.frame.type = frame_type::not_json;
  m.unreadable = frame_error_reason::over_cap;
  m.frame.seq = frame_seq(ev.payload);
  m.error = ev.closing ? "message announcing " + std::to_string(ev.size)
                           + " bytes over ws_max_frame_bytes ("
                           + std::to_string(st.cfg.ws_max_frame_bytes)
                           + "), refused by the session"
                       : "message of " + std::to_string(ev.size)
                           + " bytes over ws_max_frame_bytes ("
                           + std::to_string(st.cfg.ws_max_frame_bytes) + ")";
  auto mode = st.neg->mode();
  if (ev.closing && mode == feed_mode::catchup && !m.frame.seq)
    return;
  if (ev.closing && mode == feed_mode::catchup) {
    // Its reset moves last_seq past it: the close is no strike.
    st.overcap_strikes = 0;
    st.overcap_seq_reset = true;
  }
  if (ev.closing && mode != feed_mode::catchup && mode != feed_mode::ephemeral)
    return; // a ledger wakes on its redial; the closed case reports it
  if (mode != feed_mode::catchup && mode != feed_mode::ephemeral) {
    feed_failure f;
    f.source = "frame";
    f.kind = to_string(drain_error_reason::over_cap);
    f.detail = m.error;
    report(self, std::move(f));
  }
  on_frame(self, m, 0);
}

// The session ended: report why (unless we or the peer closed it cleanly)
// and end it.
void on_ws_closed(self_ptr self, const ws_event& ev) {
  auto& st = self->state;
  if (ev.reason != ws_close_reason::local
      && ev.reason != ws_close_reason::peer_closed) {
    feed_failure f;
    f.source = "websocket";
    f.request_id = st.ws_request_id;
    f.reason = to_string(ev.reason);
    f.detail = ev.detail;
    f.kind = "service_unavailable";
    f.error = error_kind::service_unavailable;
    if (ev.reason == ws_close_reason::too_large && ev.size > 0) {
      // A message over ws_max_discard_bytes, or an over-cap message
      // that did not end within ws_discard_timeout: the session was
      // failed (1009) rather than held forever; reconnect, counted.
      ++st.counters.oversized_frames;
      f.kind = to_string(drain_error_reason::over_cap);
      note_overcap_close(self, ev.detail);
    }
    // "upgrade refused: HTTP 401 ..." (protocol/ws_session.cpp).
    auto at = ev.detail.find("HTTP ");
    if (ev.reason == ws_close_reason::handshake && at != std::string::npos) {
      auto status = std::atoi(ev.detail.c_str() + at + 5);
      if (status >= 100 && status <= 999 && status != 101) {
        f.status = status;
        auto e = classify_status(status);
        f.error = e.kind;
        f.kind = to_string(e.kind);
      }
    }
    report(self, std::move(f));
  }
  end_session(self, false);
}

void on_ws_event(self_ptr self, ws_event& ev) {
  auto& st = self->state;
  // Wakes dropped at intake were received, whichever session read them:
  // count them even when the report comes from a session already ended.
  st.wakes_dropped += ev.dropped;
  if (ev.session_id != st.session_id
      || (st.phase != ws_phase::connecting && st.phase != ws_phase::open))
    return; // a stale session's report
  auto now = self->clock().now();
  // Messages the drain would have coalesced (their proof of life came as
  // an activity report).
  st.messages += ev.dropped;
  switch (ev.what) {
    case ws_event::kind::opened: on_ws_opened(self, now); break;
    case ws_event::kind::message: on_ws_message(self, ev, now); break;
    case ws_event::kind::too_large: on_ws_too_large(self, ev, now); break;
    case ws_event::kind::activity:
      if (st.phase == ws_phase::open)
        st.ka->on_activity(now);
      break;
    case ws_event::kind::closed: on_ws_closed(self, ev); break;
  }
}

/// A catchup session ended over a refused message: the hub resends it from
/// last_seq after the redial. A refusal whose prefix showed its seq moved
/// last_seq past it (its undeliverable reset), so the next one counts
/// afresh; feed_overcap_resync_after refusals at the same last_seq mean
/// the seq is not to be had, and the next subscribe omits last_seq.
void note_overcap_close(self_ptr self, const std::string& detail) {
  auto& st = self->state;
  if (std::exchange(st.overcap_seq_reset, false))
    return; // its seq showed: reset, last_seq moved past it
  // By the last hello's mode, not the session's: this session may have
  // been refused before its hello was parsed (see last_hello_mode).
  if (st.last_hello_mode != feed_mode::catchup)
    return; // ephemeral resets on every connect and is never resent to
  auto at = st.neg->last_seq();
  if (st.overcap_strikes > 0 && st.overcap_at == at)
    ++st.overcap_strikes;
  else
    st.overcap_strikes = 1;
  st.overcap_at = at;
  if (st.overcap_strikes < feed_overcap_resync_after)
    return;
  st.overcap_strikes = 0;
  st.overcap_resubscribe
    = std::string{to_string(drain_error_reason::over_cap)} + ": "
      + std::to_string(feed_overcap_resync_after)
      + " sessions in a row refused the message after seq "
      + (at ? std::to_string(*at) : std::string{"(none)"})
      + " and its seq is unknown; resubscribed without last_seq (" + detail
      + ")";
}

void dial(self_ptr self) {
  auto& st = self->state;
  auto id = ++st.session_id;
  st.phase = ws_phase::connecting;
  st.overcap_seq_reset = false;
  st.opened = false;
  st.messages = 0;
  st.connected = false;
  if (st.dialled_before)
    ++st.counters.reconnects;
  st.dialled_before = true;
  ws_options o;
  o.origin = st.opts.ws.origin;
  o.path = st.opts.ws.origin.path + st.cfg.ws_path;
  o.headers = st.opts.ws.headers;
  // One request id per dial, as every outbound request carries one (a
  // configured x-request-id default header is replaced, as build_request
  // does), so a hub's logs can tell the sessions of one watcher apart.
  erase_header(o.headers, "x-request-id");
  st.ws_request_id = generate_request_id(st.id_rng);
  o.headers.emplace_back("x-request-id", st.ws_request_id);
  o.max_frame_bytes = st.cfg.ws_max_frame_bytes;
  o.max_discard_bytes = st.cfg.ws_max_discard_bytes;
  o.discard_timeout_ns = feed_seconds(st.cfg.ws_discard_timeout).count();
  o.handshake_timeout_ns = feed_seconds(st.cfg.ws_handshake_timeout).count();
  if (st.drain) {
    // Wake intake (wake_intake.hpp): a plain wake the drain would coalesce
    // is dropped on the io thread, one that only raises its target while it
    // absorbs raises is kept for fold_wakes; everything else, and every
    // frame while the gate is closed, goes to the actor as before.
    st.gate = std::make_shared<wake_gate>();
    o.drop_text = [gate = st.gate, field = st.cfg.fields.wake_cursor](
                    std::string_view text) {
      auto cursor = plain_wake_cursor(text, field);
      return cursor && gate->take(*cursor);
    };
    // Dropped wakes are proof of life only for the silence rule (three
    // whole ping intervals; pongs keep their own 100 ms path for the pong
    // timeout): a quarter interval is fine enough, and each report is an
    // actor message that wakes a scheduler worker.
    auto quarter = feed_seconds(st.cfg.ws_ping_interval).count() / 4;
    if (quarter > 0)
      o.drop_activity_interval_ns = std::max<int64_t>(quarter, 100'000'000);
  }
  caf::weak_actor_ptr weak{self->ctrl()};
  auto handler = [weak](ws_event ev) {
    if (auto strong = weak.lock())
      caf::anon_send(caf::actor_cast<watcher_impl_actor>(strong),
                     std::move(ev));
  };
  *st.session = st.opts.connector->connect(id, o, std::move(handler));
  // Guard: a session that never reports within the handshake bound (plus
  // slack for the session's own timer) is given up.
  arm_keepalive(self, self->clock().now()
                        + feed_seconds(st.cfg.ws_handshake_timeout)
                        + std::chrono::seconds{1});
}

void on_keepalive(self_ptr self) {
  auto& st = self->state;
  if (st.phase == ws_phase::connecting) {
    end_session(self, true);
    return;
  }
  if (st.phase != ws_phase::open)
    return;
  auto step = st.ka->on_check(self->clock().now());
  switch (step.action) {
    case keepalive_action::ping:
      ++st.counters.keepalives;
      (*st.session)->ping();
      break;
    case keepalive_action::dead:
      ++st.counters.peer_timeouts;
      end_session(self, true);
      return;
    case keepalive_action::none:
      break;
  }
  if (step.next_check)
    arm_keepalive(self, *step.next_check);
}

// Over 80 lines on purpose: the actor's behavior, one short handler per
// message of its interface; the work is in the functions above.
watcher_impl_actor::behavior_type
watcher_impl(self_ptr self, feed_config cfg, feed_watcher_options opts,
             feed_subscriber_actor target,
             feed_batch_subscriber_actor batch_target, callback_runner runner) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  st.frame_limits = frame_json_limits(st.cfg);
  st.opts = std::move(opts);
  st.target = std::move(target);
  st.batch_target = std::move(batch_target);
  st.runner_stopped = runner.stopped;
  auto seed = st.opts.seed != 0 ? st.opts.seed : core::entropy_seed();
  st.rng.seed(seed);
  st.id_rng.seed(seed ^ 0x9e3779b97f4a7c15ULL);
  st.client_id = st.cfg.client_id.empty() ? generate_client_id(st.rng)
                                          : st.cfg.client_id;
  // No prefix (or an empty one) follows every subject: catchup seqs then
  // arrive without gaps, and a jump is a loss.
  bool every_subject
    = st.cfg.prefixes.empty()
      || std::any_of(st.cfg.prefixes.begin(), st.cfg.prefixes.end(),
                     [](const std::string& p) { return p.empty(); });
  st.neg.emplace(st.cfg.has_replay(), every_subject);
  if (st.opts.fence_deadline)
    st.fence.on_fence(*st.opts.fence_deadline, self->clock().now());
  if (st.opts.takeover)
    st.neg->expect_takeover();
  if (st.cfg.resume_last_seq)
    st.neg->resume_at(*st.cfg.resume_last_seq, st.cfg.resume_epoch);
  // Before any acknowledgement, the position the watcher starts from.
  if (st.cfg.has_replay()) {
    st.acked.mode = feed_mode::ledger;
    st.acked.cursor = st.cfg.cursor;
    st.acked.ledger_epoch = st.cfg.resume_ledger_epoch;
  } else if (st.cfg.resume_last_seq) {
    st.acked.mode = feed_mode::catchup;
  }
  st.acked.last_seq = st.cfg.resume_last_seq;
  st.acked.epoch = st.cfg.resume_epoch;
  if (st.cfg.has_replay())
    st.drain.emplace(st.cfg.cursor, st.cfg.limit,
                     feed_seconds(st.cfg.poll_interval),
                     st.cfg.resume_ledger_epoch);
  st.backoff.emplace(feed_seconds(st.cfg.reconnect_base_backoff),
                     feed_seconds(st.cfg.reconnect_max_backoff));
  st.ka.emplace(feed_seconds(st.cfg.ws_ping_interval),
                feed_seconds(st.cfg.ws_pong_timeout));
  // Whatever ends the watcher (stop, exit message, error) closes the
  // session and lets the callback runner go.
  self->attach_functor([slot = st.session, runner = std::move(runner)] {
    if (*slot)
      (*slot)->close();
    if (runner.stopped)
      runner.stopped->store(true, std::memory_order_release);
    if (runner.actor)
      caf::anon_send_exit(runner.actor, caf::exit_reason::user_shutdown);
  });
  auto subscriber = st.batch_target
                      ? caf::actor_cast<caf::actor_addr>(st.batch_target)
                      : caf::actor_cast<caf::actor_addr>(st.target);
  if (st.opts.progress_to)
    // An exit message ends the watcher as before, after its final report.
    self->set_exit_handler([self](caf::exit_msg& x) {
      if (x.reason)
        final_progress(self);
      caf::scheduled_actor::default_exit_handler(self, x);
    });
  self->monitor(subscriber);
  self->set_down_handler([self, subscriber](caf::down_msg& dm) {
    if (dm.source == subscriber)
      shutdown(self);
  });
  if (st.drain) {
    request_drain(self, drain_trigger::start);
    // The first poll tick: one timer is armed below, or by the dial for
    // whichever of the tick and the handshake guard comes first.
    st.timers.set(timer_slot::poll,
                  self->clock().now() + feed_seconds(st.cfg.poll_interval));
  }
  if (st.cfg.has_ws())
    dial(self);
  arm_timer(self);
  return {
    [self](stats_atom) { return make_stats(self); },
    [self](stop_atom) {
      auto s = make_stats(self);
      shutdown(self);
      return s;
    },
    [self](leave_atom) {
      auto& st = self->state;
      auto rp = self->make_response_promise<feed_stats>();
      st.drained.push_back(rp);
      st.draining = true;
      if (st.in_flight == 0)
        shutdown(self); // answers rp after the final report
      return rp;
    },
    [self](ws_event& ev) {
      fold_wakes(self);
      on_ws_event(self, ev);
      refresh_gate(self);
    },
    [self](ahead_ready& r) {
      auto& st = self->state;
      if (!st.ahead || st.ahead->adopted != r.fetch_token || !st.ahead->answer)
        return; // dropped meanwhile
      auto o = std::move(*st.ahead->answer);
      st.ahead.reset();
      on_fetch_answer(self, r.fetch_token, o);
    },
    [self](tick_atom, uint64_t fired_at) {
      auto& st = self->state;
      auto at = caf::actor_clock::time_point{
        caf::actor_clock::duration_type{static_cast<int64_t>(fired_at)}};
      // Only what was due when the timer fired: a deadline passed while
      // this message waited in the mailbox comes with a timer of its own,
      // behind what arrived before it (an open, a pong), as when each
      // deadline had its own timer.
      auto cutoff = std::min(at, self->clock().now());
      for (auto slot : st.timers.due(at, cutoff)) {
        if (slot == timer_slot::keepalive)
          on_keepalive(self);
        else
          on_poll(self);
      }
      arm_timer(self);
    },
    [self](redrain_atom, uint64_t id) {
      fold_wakes(self);
      if (can_drain(self))
        act(self, self->state.drain->on_redrain_timer(id));
      refresh_gate(self);
    },
    [self](progress_atom, uint64_t token) {
      auto& st = self->state;
      if (token != st.progress_token)
        return;
      st.progress_armed = false;
      maybe_report(self);
    },
    [self](fence_atom, feed_time deadline) {
      auto& st = self->state;
      if (st.phase == ws_phase::stopped)
        return;
      st.fence.on_fence(deadline, self->clock().now());
      pump(self);
    },
    [self](reconnect_atom, uint64_t token) {
      auto& st = self->state;
      if (token != st.reconnect_token || st.phase != ws_phase::backoff
          || st.draining)
        return; // a draining stop opens no new session
      if (frames_over(st, st.cfg.max_pending_frames / 2,
                      st.cfg.max_pending_frame_bytes / 2)) {
        schedule_reconnect(self); // still draining the backlog
        return;
      }
      dial(self);
    },
  };
}

} // namespace

feed_subscriber_actor spawn_callback_subscriber(caf::actor_system& sys,
                                                feed_callbacks cbs) {
  return spawn_callback_helper(sys, std::move(cbs));
}

feed_watcher_actor spawn_feed_watcher(caf::actor_system& sys, feed_config cfg,
                                      feed_watcher_options opts) {
  cfg.validate();
  if (cfg.has_replay() && !opts.client)
    throw config_error("client", "a replay_path needs a service client");
  if (cfg.has_ws() && !opts.connector)
    throw config_error("connector", "a ws_path needs a ws_connector");
  if (cfg.has_ws() && opts.ws.origin.host.empty())
    throw config_error("ws.origin", "a ws_path needs the hub's origin");
  if (opts.subscriber && opts.batch_subscriber)
    throw config_error("batch_subscriber",
                       "set subscriber or batch_subscriber, not both");
  if (opts.max_delivery_batch == 0)
    throw config_error("max_delivery_batch", "must be at least 1");
  core::validate_seconds(opts.progress_interval, "progress_interval", true);
  // Added to time points: past ~9e9 s int64 nanoseconds overflow.
  if (opts.progress_interval > 86400.0)
    throw config_error("progress_interval", "must be <= 86400 seconds");
  feed_subscriber_actor target = opts.subscriber;
  feed_batch_subscriber_actor batch_target = opts.batch_subscriber;
  callback_runner runner;
  if (!target && !batch_target) {
    if (!opts.callbacks.on_event)
      throw config_error("subscriber",
                         "needs a subscriber actor or callbacks.on_event");
    runner.stopped = std::make_shared<std::atomic<bool>>(false);
    auto helper = spawn_callback_helper(sys, opts.callbacks, runner.stopped);
    batch_target = helper;
    runner.actor = caf::actor_cast<caf::actor>(helper);
  }
  auto watcher
    = sys.spawn(watcher_impl, std::move(cfg), std::move(opts),
                std::move(target), std::move(batch_target), std::move(runner));
  return watcher; // the public interface (checked: a subset of the private)
}

} // namespace feed
} // namespace outbound
