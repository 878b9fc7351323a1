#include "actors/feed/ledger_drain.hpp"

#include <algorithm>
#include <limits>
#include <numeric>

namespace outbound {
inline namespace feed {

ledger_drain::ledger_drain(int64_t cursor, int limit,
                           feed_duration poll_interval,
                           std::optional<std::string> epoch)
  : cursor_(cursor), limit_(std::max(limit, 1)),
    epoch_is_cursors_(epoch.has_value() || cursor <= 0),
    redrain_backoff_(
      core::jitter::none, redrain_floor,
      std::max<feed_duration>(std::chrono::seconds{3}, poll_interval)),
    hello_epoch_(epoch), page_epoch_(std::move(epoch)), fetch_limit_(limit_) {
}

bool ledger_drain::absorbs_raises() const {
  if (rewind_pending_)
    return false;
  if (state_ != state::idle)
    return pending_ && pending_news_;
  return armed_ && !raise_rearms();
}

bool ledger_drain::raise_rearms() const {
  // Not the timer of a start-over: the event at the cursor is what it
  // waits for, and a wake says nothing about it.
  return armed_delay_ > redrain_floor && !armed_start_over_;
}

uint64_t ledger_drain::drain_errors() const {
  return std::accumulate(drain_errors_.begin(), drain_errors_.end(),
                         uint64_t{0});
}

void ledger_drain::count(drain_error_reason why) {
  ++drain_errors_[static_cast<std::size_t>(why)];
}

int64_t ledger_drain::fetch_after() const {
  return isolate_ == isolate_phase::probing ? probe_x_ : cursor_;
}

void ledger_drain::stop_isolating() {
  isolate_ = isolate_phase::none;
  fetch_limit_ = limit_;
  probe_steps_ = 0;
  strike_after_.reset();
  skip_to_.reset();
  probe_unreadable_ = false;
  confirm_x_.reset();
  confirm_step_ = 0;
}

void ledger_drain::advance_to(int64_t id) {
  if (id <= cursor_)
    return;
  cursor_ = id;
  epoch_is_cursors_ = true; // read in the epoch in force
  // Real progress: the next isolation attempt that ends without any starts
  // from the floor again.
  start_over_attempt_ = 0;
  moved_ = true;
  news_retried_ = false;
}

drain_action ledger_drain::start() {
  state_ = state::fetching;
  pending_ = false;
  pending_request_ = false;
  pending_connect_only_ = false;
  settle_head_.reset();
  pending_news_ = false;
  armed_ = false;
  armed_start_over_ = false;
  if (rewind_pending_) {
    stop_isolating(); // the old ledger's poison is not the new one's
    probe_resume_.reset();
    checked_low_.reset();
    // The page in delivery (the old incarnation's) is done: forget the old
    // position and read the new ledger from its start.
    rewind_pending_ = false;
    rewind_armed_ = rewind_info{cursor_, std::move(pending_old_epoch_)};
    pending_old_epoch_.reset();
    last_rewind_.emplace(cursor_, std::move(pending_key_));
    cursor_ = 0;
    epoch_is_cursors_ = true; // the new ledger's start: its epoch is adopted
    moved_ = true; // a rewind is progress: the new ledger is read at once
    news_retried_ = false;
    target_ = low_head_;
    low_head_.reset();
    last_reset_cursor_.reset();
    redrain_attempt_ = 0;
    start_over_attempt_ = 0;
  }
  // Any outstanding re-drain timer is superseded by this drain.
  ++redrain_gen_;
  page_start_ = cursor_;
  return drain_action::fetch;
}

drain_action ledger_drain::request(drain_trigger why) {
  if (state_ != state::idle) {
    pending_connect_only_ = why == drain_trigger::connect
                            && (!pending_request_ || pending_connect_only_);
    settle_head_.reset(); // its own hello may settle it
    pending_ = true;
    pending_request_ = true;
    return drain_action::queued;
  }
  if (why == drain_trigger::poll && armed_ && armed_start_over_) {
    // The start-over timer runs the next attempt: a poll tick says nothing
    // about the event at the cursor it waits for, and with a poll interval
    // below the start-over cap it would restart the cycle before the wait
    // ends, so the backoff would never reach its cap. Coalesced, like a
    // wake (on_wake).
    ++wakes_coalesced_;
    return drain_action::none;
  }
  return start();
}

void ledger_drain::note_target(std::optional<int64_t> target) {
  if (target && (!target_ || *target > *target_)) {
    target_ = target;
    redrain_attempt_ = 0;
  }
}

drain_action ledger_drain::on_wake(std::optional<int64_t> target) {
  bool raised = false;
  if (target && (*target < 0 || (checked_low_ && *target == *checked_low_))) {
    // A negative head is garbage, and a low hint a page has already
    // disproved says nothing new: neither is worth a replay call.
    ++wakes_coalesced_;
    return drain_action::none;
  }
  if (target && *target < cursor_) {
    low_head_ = target; // maybe a stale hint: the next page decides
  } else if (target) {
    raised = !target_ || *target > *target_;
    note_target(target);
  }
  if (state_ != state::idle) {
    // One drain in flight, at most one pending: whatever the wake rate.
    if (pending_)
      ++wakes_coalesced_;
    pending_ = true;
    // News the page in flight may not show: no hint at all, a raised
    // target above the cursor, or a low hint (a page must judge it). A hint
    // in [cursor, target] repeats what the drain already pursues.
    if (!target || *target < cursor_ || (raised && *target > cursor_))
      pending_news_ = true;
    return drain_action::queued;
  }
  if (armed_) {
    // A re-drain or retry timer runs the next drain: a wake must not undo
    // its backoff (hyperdjango's ChangeFeedWatcher: an unreachable target
    // decays to the poll cadence however many wakes repeat it). A raised target brings the
    // timer forward to the floor, once.
    // Not the timer of a start-over: the event at the cursor is what it
    // waits for, and a wake says nothing about it.
    if (raised && raise_rearms()) {
      armed_delay_ = redrain_floor;
      ++redrain_gen_;
      return drain_action::rearm;
    }
    ++wakes_coalesced_;
    return drain_action::none;
  }
  if (!armed_ && target && *target == cursor_
      && (!target_ || cursor_ >= *target_)) {
    // The hub announces exactly what has been delivered: nothing to read.
    ++wakes_coalesced_;
    return drain_action::none;
  }
  return start();
}

std::optional<std::string>* ledger_drain::slot(epoch_source src) {
  switch (src) {
    case epoch_source::hello: return &hello_epoch_;
    case epoch_source::page: return &page_epoch_;
    case epoch_source::head: break;
  }
  return nullptr;
}

bool ledger_drain::decide_rewind(epoch_source src,
                                 const std::optional<std::string>& new_epoch) {
  auto* slot = this->slot(src);
  if (rewind_pending_ || rewind_armed_) {
    // Already rewinding (the cursor is, or will be, at the new start): a
    // newer epoch only replaces the one the rewind goes to.
    if (slot && new_epoch)
      *slot = new_epoch;
    return true;
  }
  if (new_epoch && last_rewind_ && last_rewind_->second == new_epoch) {
    // The other source catching up with the incarnation the watcher has
    // already rewound to (the page saw it before the hello, or the other
    // way round): nothing new.
    if (slot)
      *slot = new_epoch;
    return false;
  }
  // The old incarnation's epoch is reported only where it is known to be
  // the cursor's: a cursor resumed without its epoch took the first epoch
  // the hub named, which may be the new ledger's own.
  auto old = epoch_is_cursors_ ? epoch() : std::nullopt;
  auto key = new_epoch ? new_epoch : epoch();
  if (last_rewind_ && last_rewind_->first == cursor_
      && last_rewind_->second == key) {
    // The same evidence as the last rewind, after its replay: a server
    // anomaly, not a new incarnation. Counted, never a reset loop.
    count(drain_error_reason::stalled);
    return false;
  }
  rewind_pending_ = true;
  pending_old_epoch_ = std::move(old);
  pending_source_ = src;
  pending_key_ = key;
  pending_source_old_ = slot ? *slot : std::nullopt;
  if (slot && new_epoch)
    *slot = new_epoch;
  return true;
}

bool ledger_drain::shows_rewind(const page_summary& page) const {
  // A negative head is garbage, not a ledger (never a rewind).
  if (!page.is_object || page.over_limit || !page.cursor || page_start_ <= 0
      || *page.cursor < 0 || *page.cursor >= page_start_)
    return false;
  for (auto& id : page.ids)
    if (id && *id > page_start_)
      return false;
  return true;
}

drain_action ledger_drain::on_hello(const std::optional<std::string>& epoch,
                                    std::optional<int64_t> head) {
  // A hello is the hub's own word on its ledger, newer than any page: a
  // low hint a page disproved before it may be true now (a hub restarted
  // on a shorter log), so it is checked again.
  checked_low_.reset();
  bool rewound = false;
  if (epoch) {
    if (rewind_pending_ && pending_source_ == epoch_source::hello
        && pending_source_old_ == epoch) {
      // Back to the incarnation the pending rewind left (a failover back
      // before the rewind applied): nothing to rewind.
      rewind_pending_ = false;
      hello_epoch_ = epoch;
      pending_old_epoch_.reset();
    } else if (hello_epoch_ && *epoch != *hello_epoch_) {
      rewound = decide_rewind(epoch_source::hello, epoch);
    } else {
      hello_epoch_ = epoch;
    }
  }
  if (rewound) {
    low_head_ = head; // the new ledger's head: the target after the rewind
    return request(drain_trigger::wake);
  }
  if (!head)
    return drain_action::none;
  if (*head < cursor_) {
    low_head_ = head;
    return request(drain_trigger::wake);
  }
  note_target(head);
  if (*head > cursor_ && state_ == state::idle)
    return request(drain_trigger::wake);
  // Where the ledger stood when the session subscribed: once the page in
  // flight has brought the cursor there, the session's own drain is owed
  // no more (see the declaration), so a connect while the first page of a
  // start is in flight costs one replay call, not two.
  if (pending_connect_only_)
    settle_head_ = head;
  return drain_action::none;
}

void ledger_drain::quiesce() {
  moved_ = false;
  // In-frame delivery takes over: what a page disproved before says nothing
  // about the hints of the ledger the drain comes back to.
  checked_low_.reset();
  state_ = state::idle;
  pending_ = false;
  pending_request_ = false;
  pending_connect_only_ = false;
  settle_head_.reset();
  pending_news_ = false;
  armed_ = false;
  armed_start_over_ = false;
  page_probe_ = false;
  start_over_ = false;
  stop_isolating();
  ++redrain_gen_;
}

drain_action ledger_drain::on_redrain_timer(uint64_t id) {
  if (id != redrain_gen_ || state_ != state::idle)
    return drain_action::none;
  return request(drain_trigger::redrain);
}

bool ledger_drain::page_is_stale(const page_summary& page) {
  // Incarnation first: a page of another ledger than the one it was asked
  // of says nothing about this cursor. It is dropped unread, and
  // on_page_done fetches from the new ledger's start.
  // A page asked for before a decided rewind applies is stale whatever it
  // says (its epoch may even be the old one).
  bool stale = rewind_pending_;
  if (!stale && page.is_object && page.epoch) {
    if (rewind_armed_ || !page_epoch_)
      page_epoch_ = page.epoch; // the new start, whatever it says: adopt
    else if (*page.epoch != *page_epoch_)
      stale = decide_rewind(epoch_source::page, page.epoch);
  }
  if (!stale && shows_rewind(page))
    stale = decide_rewind(epoch_source::head, std::nullopt);
  else if (!stale && page.cursor && *page.cursor >= page_start_) {
    if (low_head_)
      checked_low_ = low_head_; // the low hint was stale: remember it
    low_head_.reset();
  }
  return stale;
}

void ledger_drain::on_probe_page(const page_summary& page) {
  // A probe: only "readable or not" matters; nothing is delivered from
  // it (the events after the poison come with the next page, in order).
  page_probe_ = true;
  bool readable = page.is_object && (page.ids.empty() || page.ids.front());
  if (!readable) {
    auto why = page.is_object ? drain_error_reason::bad_event
                              : drain_error_reason::bad_page;
    count(why);
    probe_unreadable_ = true;
    probe_why_ = why;
    return;
  }
  retry_attempt_ = 0;
  if (confirm_x_) {
    // A fresh look below x answers: the failures were transient (an
    // outage that ended mid-walk). Start over from the cursor, after the
    // start-over backoff (on_page_done).
    probe_resume_.reset();
    stop_isolating();
    start_over_ = true;
    return;
  }
  // after = x - 1 failed twice, after = x answers: the first event after
  // x - 1 is x, and it is the one that cannot be read -- once a fresh
  // look at after = x - 1 and after = cursor says so too.
  confirm_x_ = probe_x_;
  confirm_step_ = 1;
  probe_x_ = *confirm_x_ - 1;
}

bool ledger_drain::check_page_order(const page_summary& page) {
  // Ids above the cursor must not go backward: a page that does has lost
  // the ledger's order, and neither delivering it (a reorder) nor skipping
  // the lower ids (a silent loss) is sound. Equal ids are one event.
  // Events without an id can only be passed by the page cursor: when
  // neither an id nor the cursor moves past the start, delivering them
  // would deliver them again on every tick.
  bool repeated = false;
  if (page_bad_)
    return repeated;
  auto high = page_start_;
  bool unpositioned = false;
  for (auto& id : page.ids) {
    if (!id) {
      unpositioned = true;
      continue;
    }
    if (*id <= page_start_)
      continue;
    if (*id < high) {
      page_bad_ = true;
      break;
    }
    repeated = repeated || *id == high;
    high = *id;
  }
  bool progress = high > page_start_
                  || (!page.over_limit && page.cursor
                      && *page.cursor > page_start_);
  if (unpositioned && !progress && !page_bad_) {
    // Events that can be neither delivered nor passed: narrow the page
    // to isolate them (on_page_done).
    page_bad_ = true;
    page_bad_event_ = true;
  }
  return repeated;
}

void ledger_drain::plan_reset(const page_summary& page, page_plan& plan) {
  if (rewind_armed_) {
    // The first page of the new incarnation: one rewind reset before its
    // events (it stands for a retention reset of this page too: the
    // application rebuilds from the new start either way).
    plan.reset = true;
    plan.cause = reset_cause::rewind;
    plan.reset_from = rewind_armed_->from;
    plan.old_epoch = std::move(rewind_armed_->old_epoch);
    plan.new_epoch = epoch();
    if (page.reset) {
      // The new ledger was trimmed before it was read: its floor.
      for (auto& id : page.ids)
        if (id) {
          if (*id > 1)
            plan.reset_to = *id - 1;
          break;
        }
    }
    rewind_armed_.reset();
    last_reset_cursor_ = page_start_;
    ++rewinds_;
  } else if (page.reset && last_reset_cursor_ != page_start_) {
    last_reset_cursor_ = page_start_;
    ++resets_;
    plan.reset = true;
    plan.reset_from = page_start_;
    // The first id says where the kept range starts (nothing lost when it
    // is start + 1); without ids, the page cursor.
    bool has_id = false;
    for (auto& id : page.ids) {
      if (id) {
        has_id = true;
        // (id > start first: id - 1 cannot overflow then.)
        if (*id > page_start_ && *id - 1 > page_start_)
          plan.reset_to = *id - 1;
        break;
      }
    }
    if (!has_id && page.cursor && *page.cursor > page_start_
        && !page.over_limit)
      plan.reset_to = page.cursor;
  }
}

page_plan ledger_drain::on_page(const page_summary& page) {
  page_plan plan;
  state_ = state::delivering;
  ++pages_;
  page_stale_ = page_is_stale(page);
  if (page_stale_)
    return plan;
  if (isolate_ == isolate_phase::probing) {
    on_probe_page(page);
    return plan;
  }
  if (strike_after_ && *strike_after_ == page_start_)
    strike_after_.reset(); // the failure did not repeat: it was transient
  if (page.is_object)
    retry_attempt_ = 0; // the replay answers again
  page_count_ = page.ids.size();
  page_cursor_ = page.cursor;
  page_bad_ = !page.is_object;
  page_bad_event_ = false;
  page_over_limit_ = page.over_limit;
  bool repeated = check_page_order(page);
  if (page_bad_) {
    count(page_bad_event_ ? drain_error_reason::bad_event
                          : drain_error_reason::bad_page);
    plan.verdict = page_verdict::bad_page;
    return plan;
  }
  if (repeated || page.over_limit) {
    count(drain_error_reason::anomaly);
    plan.anomaly = true;
  }
  plan_reset(page, plan);
  auto high = page_start_;
  for (std::size_t i = 0; i < page.ids.size(); ++i) {
    auto& id = page.ids[i];
    if (id) {
      if (*id <= high)
        continue; // already delivered: never twice
      high = *id;
    }
    plan.deliver.push_back(i);
  }
  return plan;
}

void ledger_drain::on_event_delivered(std::optional<int64_t> id) {
  if (id)
    advance_to(*id);
}

drain_next ledger_drain::on_page_done() {
  drain_next next;
  next.what = drain_next::kind::fetch;
  if (page_stale_) {
    page_stale_ = false;
    start();
    return next;
  }
  if (page_probe_) {
    page_probe_ = false;
    if (start_over_) {
      start_over_ = false;
      return start_over();
    }
    if (probe_unreadable_) {
      probe_unreadable_ = false;
      return unreadable(probe_why_, "the probe's page cannot be read",
                        std::nullopt);
    }
    if (skip_to_) {
      // The undeliverable reset is acknowledged: move past the poison,
      // back to full pages.
      advance_to(*skip_to_);
      probe_resume_.reset();
      stop_isolating();
    }
    start();
    return next;
  }
  if (page_bad_) {
    if (page_bad_event_) {
      page_bad_event_ = false;
      return unreadable(drain_error_reason::bad_event,
                        "events without an id do not move the cursor",
                        std::nullopt);
    }
    return finish();
  }
  // The cursor of a page cut at the limit covers events not delivered.
  if (!page_over_limit_ && page_cursor_)
    advance_to(*page_cursor_);
  if (!page_over_limit_
      && page_count_ < static_cast<std::size_t>(fetch_limit_))
    return finish();
  if (cursor_ == page_start_) {
    // A full page that did not move the cursor would loop hot.
    count(drain_error_reason::stalled);
    return finish();
  }
  start();
  return next;
}

drain_next ledger_drain::on_fetch_failed() {
  // Keep what the probe learnt: every answer up to probe_x_ - 1 was
  // unreadable twice.
  if (isolate_ == isolate_phase::probing && !confirm_x_
      && probe_x_ - 1 > cursor_)
    probe_resume_.emplace(cursor_, probe_x_ - 1);
  // An isolation cut short by an outage starts over: on the start-over
  // backoff, which a flapping server cannot reset.
  if (isolating())
    return start_over();
  stop_isolating();
  return finish(true);
}

drain_next ledger_drain::on_unreadable(drain_error_reason why,
                                       const std::string& detail,
                                       std::optional<int64_t> first_id) {
  count(why);
  return unreadable(why, detail, first_id);
}

drain_next ledger_drain::narrow(drain_error_reason why,
                                const std::string& detail) {
  isolate_reason_ = why;
  isolate_detail_ = detail;
  drain_next next;
  next.what = drain_next::kind::fetch;
  // Halve: the readable events before the bad one still come through.
  isolate_ = isolate_phase::narrowing;
  fetch_limit_ /= 2;
  start();
  return next;
}

drain_next ledger_drain::unreadable(drain_error_reason why,
                                    const std::string& detail,
                                    std::optional<int64_t> first_id) {
  if (fetch_limit_ > 1)
    return narrow(why, detail);
  isolate_reason_ = why;
  isolate_detail_ = detail;
  drain_next next;
  next.what = drain_next::kind::fetch;
  if (confirm_x_) {
    // The fresh look is unreadable too: on to the next one, or declare.
    if (confirm_step_ == 1 && *confirm_x_ - 1 > cursor_) {
      confirm_step_ = 2;
      probe_x_ = cursor_;
      start();
      return next;
    }
    auto x = *confirm_x_;
    confirm_x_.reset();
    confirm_step_ = 0;
    strike_after_.reset();
    state_ = state::delivering;
    page_probe_ = true;
    next.what = drain_next::kind::reset;
    next.plan = declare(x);
    return next;
  }
  auto at = fetch_after();
  if (!strike_after_ || *strike_after_ != at) {
    // One bad answer proves nothing (a truncated or corrupted response):
    // ask the same question again before anything is declared lost.
    strike_after_ = at;
    if (isolate_ == isolate_phase::none)
      isolate_ = isolate_phase::narrowing;
    start();
    return next;
  }
  // The same failure twice: the first event after `at` cannot be read, and
  // (the probe's invariant) neither can any event in (cursor, at].
  strike_after_.reset();
  if (first_id && *first_id > at) {
    // Its id could still be read from the body: no search needed.
    state_ = state::delivering;
    page_probe_ = true;
    next.what = drain_next::kind::reset;
    next.plan = declare(*first_id);
    return next;
  }
  if (isolate_ != isolate_phase::probing) {
    isolate_ = isolate_phase::probing;
    probe_steps_ = 0;
    // An earlier attempt found every answer up to there unreadable too.
    if (probe_resume_ && probe_resume_->first == cursor_
        && probe_resume_->second > at)
      at = probe_resume_->second;
  }
  if (at == std::numeric_limits<int64_t>::max()
      || ++probe_steps_ > linear_probe_steps) {
    // Out of steps for this attempt: back off, skipping nothing, and go
    // on from here next time if the cursor has not moved.
    probe_resume_.emplace(cursor_, at);
    return start_over();
  }
  probe_x_ = at + 1;
  start();
  return next;
}

page_plan ledger_drain::declare(int64_t event_id) {
  skip_to_ = event_id;
  ++undeliverable_;
  page_plan plan;
  plan.reset = true;
  plan.cause = reset_cause::undeliverable;
  plan.reset_from = cursor_;
  plan.reset_to = event_id;
  plan.event_id = event_id;
  plan.reason = std::string{to_string(isolate_reason_)} + ": "
                + isolate_detail_;
  return plan;
}

drain_next ledger_drain::arm_redrain(int& attempt) {
  drain_next next;
  pending_ = false;
  pending_request_ = false;
  pending_connect_only_ = false;
  settle_head_.reset();
  pending_news_ = false;
  armed_ = true;
  armed_delay_ = redrain_backoff_.step(attempt);
  next.what = drain_next::kind::redrain;
  next.delay = armed_delay_;
  next.redrain_id = ++redrain_gen_;
  // The step saturates at the cap long before 64: stop counting there.
  attempt = std::min(attempt + 1, 64);
  return next;
}

drain_next ledger_drain::start_over() {
  state_ = state::idle;
  moved_ = false;
  stop_isolating();
  if (rewind_pending_) {
    drain_next next;
    next.what = drain_next::kind::fetch;
    start();
    return next;
  }
  auto next = arm_redrain(start_over_attempt_);
  armed_start_over_ = true;
  return next;
}

drain_next ledger_drain::finish(bool failed) {
  state_ = state::idle;
  drain_next next;
  stop_isolating();
  if (rewind_pending_) {
    start();
    next.what = drain_next::kind::fetch;
    return next;
  }
  bool moved = moved_;
  moved_ = false;
  // The replay did not answer usefully: retry after a backoff, and let
  // wakes meanwhile wait for it rather than hammer a failing endpoint.
  if (failed)
    return arm_redrain(retry_attempt_);
  bool below = target_ && cursor_ < *target_;
  // A new session's drain is dropped when the cursor has reached the head
  // its hello gave (on_hello) and every target known (an earlier session's
  // hello, a wake's hint: a hub replica that answers lower does not hide
  // them), unless a wake brought news meanwhile: then it runs at once, as
  // it did before the hello, and serves the news too.
  if (settle_head_ && pending_connect_only_ && !pending_news_ && !below
      && cursor_ >= *settle_head_) {
    pending_ = false;
    pending_request_ = false;
    pending_connect_only_ = false;
  }
  settle_head_.reset();
  // A drain was requested meanwhile (a new session, a hello, a poll tick:
  // at most one per connection or poll interval), or a wake brought news
  // after a drain that moved the cursor (events are flowing): read again
  // now. News after a drain that read nothing new reads again at once the
  // first time since the cursor last moved; after that -- the event a
  // wake announced is not visible to replay yet, or the hint is bogus --
  // it waits one floor, as a raised target restores the floor: a flood of
  // rising (or hint-less) wakes costs one replay call per floor, never one
  // per round trip.
  if (pending_ && pending_news_ && !moved && !news_retried_) {
    // The page may have been read just before the event announced became
    // visible (the usual end of a burst): once per progress, read again
    // at once.
    news_retried_ = true;
    pending_request_ = true;
    pending_connect_only_ = false;
    settle_head_.reset();
  }
  if (pending_ && (pending_request_ || (pending_news_ && moved))) {
    start();
    next.what = drain_next::kind::fetch;
    return next;
  }
  if (pending_ && pending_news_) {
    int floor_step = 0;
    return arm_redrain(floor_step);
  }
  pending_ = false;
  pending_request_ = false;
  pending_connect_only_ = false;
  settle_head_.reset();
  pending_news_ = false;
  if (below)
    return arm_redrain(redrain_attempt_);
  return next;
}

} // namespace feed
} // namespace outbound
