#include "actors/feed/ledger_drain.hpp"

#include <algorithm>

namespace outbound {

ledger_drain::ledger_drain(int64_t cursor, int limit,
                           feed_duration poll_interval)
  : cursor_(cursor),
    limit_(std::max(limit, 1)),
    redrain_cap_(std::max<feed_duration>(std::chrono::seconds{3},
                                         poll_interval)) {
}

drain_action ledger_drain::start() {
  state_ = state::fetching;
  pending_ = false;
  // Any outstanding re-drain timer is superseded by this drain.
  ++redrain_gen_;
  page_start_ = cursor_;
  return drain_action::fetch;
}

drain_action ledger_drain::request(drain_trigger) {
  if (state_ != state::idle) {
    pending_ = true;
    return drain_action::queued;
  }
  return start();
}

void ledger_drain::note_target(std::optional<int64_t> target) {
  if (target && (!target_ || *target > *target_)) {
    target_ = target;
    redrain_delay_ = redrain_floor;
  }
}

drain_action ledger_drain::on_wake(std::optional<int64_t> target) {
  note_target(target);
  return request(drain_trigger::wake);
}

void ledger_drain::quiesce() {
  state_ = state::idle;
  pending_ = false;
  ++redrain_gen_;
}

drain_action ledger_drain::on_redrain_timer(uint64_t id) {
  if (id != redrain_gen_ || state_ != state::idle)
    return drain_action::none;
  return request(drain_trigger::redrain);
}

page_plan ledger_drain::on_page(const page_summary& page) {
  page_plan plan;
  state_ = state::delivering;
  ++pages_;
  page_count_ = page.ids.size();
  page_cursor_ = page.cursor;
  page_bad_ = !page.is_object;
  page_over_limit_ = page.over_limit;
  // Ids above the cursor must not go backward: a page that does has lost
  // the ledger's order, and neither delivering it (a reorder) nor skipping
  // the lower ids (a silent loss) is sound. Equal ids are one event.
  // Events without an id can only be passed by the page cursor: when
  // neither an id nor the cursor moves past the start, delivering them
  // would deliver them again on every tick.
  bool repeated = false;
  if (!page_bad_) {
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
    if (unpositioned && !progress)
      page_bad_ = true;
  }
  if (page_bad_) {
    ++drain_errors_;
    plan.verdict = page_verdict::bad_page;
    return plan;
  }
  if (repeated || page.over_limit) {
    ++drain_errors_;
    plan.anomaly = true;
  }
  if (page.reset && last_reset_cursor_ != page_start_) {
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
  if (id && *id > cursor_)
    cursor_ = *id;
}

drain_next ledger_drain::on_page_done() {
  if (page_bad_)
    return finish();
  // The cursor of a page cut at the limit covers events not delivered.
  if (!page_over_limit_ && page_cursor_ && *page_cursor_ > cursor_)
    cursor_ = *page_cursor_;
  if (!page_over_limit_ && page_count_ < static_cast<std::size_t>(limit_))
    return finish();
  if (cursor_ == page_start_) {
    // A full page that did not move the cursor would loop hot.
    ++drain_errors_;
    return finish();
  }
  drain_next next;
  next.what = drain_next::kind::fetch;
  start();
  return next;
}

drain_next ledger_drain::on_fetch_failed() {
  return finish();
}

drain_next ledger_drain::finish() {
  state_ = state::idle;
  drain_next next;
  if (pending_) {
    start();
    next.what = drain_next::kind::fetch;
    return next;
  }
  if (target_ && cursor_ < *target_) {
    next.what = drain_next::kind::redrain;
    next.delay = redrain_delay_;
    next.redrain_id = ++redrain_gen_;
    redrain_delay_ = std::min(redrain_delay_ * 2, redrain_cap_);
    return next;
  }
  return next;
}

} // namespace outbound
