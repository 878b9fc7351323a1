#include "actors/feed/mode_negotiator.hpp"

#include "core/time.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

namespace outbound {
inline namespace feed {

mode_negotiator::mode_negotiator(bool has_replay, bool every_subject)
  : has_replay_(has_replay),
    every_subject_(every_subject),
    mode_(has_replay ? feed_mode::ledger : feed_mode::none) {
}

open_decision mode_negotiator::on_open() {
  hello_seen_ = false;
  if (has_replay_) {
    mode_ = feed_mode::ledger;
    return open_decision::enter_ledger;
  }
  mode_ = feed_mode::none;
  return open_decision::await_hello;
}

frame_reset_info
mode_negotiator::make_reset(reset_cause cause, std::optional<int64_t> new_seq,
                            std::optional<std::string> new_epoch) const {
  frame_reset_info r;
  r.cause = cause;
  r.last_seq = last_seq_;
  r.new_seq = new_seq;
  r.old_epoch = epoch_;
  r.new_epoch = std::move(new_epoch);
  // The lost range is known only inside one incarnation (same epoch, or a
  // hub that sends none) and when the hub's seq did not go backward; an
  // inferred or wake reset says nothing about what was missed.
  r.lost_from = last_seq_;
  bool same_incarnation = !(r.new_epoch && r.old_epoch
                            && *r.new_epoch != *r.old_epoch);
  bool forward = new_seq && (!last_seq_ || *new_seq >= *last_seq_);
  switch (cause) {
    case reset_cause::resync:
    case reset_cause::reconnect:
    case reset_cause::takeover:
    case reset_cause::gap:
      if (same_incarnation && forward)
        r.lost_to = new_seq;
      break;
    default:
      break;
  }
  return r;
}

hello_result mode_negotiator::on_hello(const hello_info& h) {
  hello_seen_ = true;
  gap_covered_ = false;
  bool takeover = std::exchange(takeover_pending_, false);
  feed_mode wanted;
  if (h.mode == "ledger")
    wanted = has_replay_ ? feed_mode::ledger : feed_mode::ephemeral;
  else if (h.mode == "catchup")
    wanted = feed_mode::catchup;
  else if (h.mode == "ephemeral")
    wanted = feed_mode::ephemeral;
  else
    wanted = has_replay_ ? feed_mode::ledger : feed_mode::ephemeral;
  mode_ = wanted;
  hello_result res;
  res.mode = wanted;
  switch (wanted) {
    case feed_mode::ledger:
    case feed_mode::none:
      res.decision = hello_decision::ledger;
      return res;
    case feed_mode::catchup: {
      bool epoch_changed = h.epoch && epoch_ && *h.epoch != *epoch_;
      // A hub that says resume with a head below what it already sent
      // contradicts itself (its seq went backward in one epoch): resuming
      // would drop its next events as duplicates. Reset instead.
      bool went_back = h.seq && last_seq_ && *h.seq < *last_seq_;
      if (h.resync || epoch_changed || went_back) {
        res.decision = hello_decision::catchup_reset;
        res.reset = make_reset(epoch_changed ? reset_cause::epoch_changed
                                             : reset_cause::resync,
                               h.seq, h.epoch);
        last_seq_ = h.seq;
      } else {
        res.decision = hello_decision::catchup_resume;
      }
      if (h.epoch)
        epoch_ = h.epoch;
      return res;
    }
    case feed_mode::ephemeral:
      res.decision = hello_decision::ephemeral_reset;
      res.reset
        = make_reset(takeover ? reset_cause::takeover : reset_cause::reconnect,
                     h.seq, h.epoch);
      last_seq_ = h.seq;
      epoch_ = h.epoch;
      return res;
  }
  return res;
}

frame_result mode_negotiator::on_frame(const frame_info& f) {
  frame_result res;
  switch (mode_) {
    case feed_mode::ledger:
      res.decision = frame_decision::wake;
      return res;
    case feed_mode::none: {
      // A ws-only hub that sends data without a hello: serve it as
      // ephemeral, with the reset that model owes on every connect.
      mode_ = feed_mode::ephemeral;
      res.reset = make_reset(std::exchange(takeover_pending_, false)
                               ? reset_cause::takeover
                               : reset_cause::inferred,
                             std::nullopt, std::nullopt);
      if (f.type == frame_type::event) {
        res.decision = frame_decision::reset_then_deliver;
        if (f.seq)
          last_seq_ = last_seq_ ? std::max(*last_seq_, *f.seq) : *f.seq;
      } else {
        res.decision = frame_decision::reset;
      }
      return res;
    }
    case feed_mode::catchup:
      if (f.type != frame_type::event)
        return res;
      if (f.seq && last_seq_ && *f.seq <= *last_seq_) {
        res.decision = frame_decision::duplicate;
        return res;
      }
      res.decision = frame_decision::deliver;
      // The catch-up seq is gap-free; a feed of every subject sees all of
      // it, so a jump is a loss that must not pass silently.
      if (every_subject_ && f.seq && last_seq_ && !gap_covered_
          && *last_seq_ < std::numeric_limits<int64_t>::max()
          && *f.seq > *last_seq_ + 1) {
        res.decision = frame_decision::reset_then_deliver;
        res.reset = make_reset(reset_cause::gap, *f.seq - 1, epoch_);
      }
      if (f.seq) {
        last_seq_ = f.seq;
        gap_covered_ = false;
      }
      return res;
    case feed_mode::ephemeral:
      if (f.type == frame_type::event) {
        if (f.seq)
          last_seq_ = last_seq_ ? std::max(*last_seq_, *f.seq) : *f.seq;
        res.decision = frame_decision::deliver;
      } else if (f.type == frame_type::wake && !has_replay_) {
        res.decision = frame_decision::reset;
        res.reset = make_reset(reset_cause::wake, last_seq_, epoch_);
      }
      return res;
  }
  return res;
}

std::optional<frame_reset_info>
mode_negotiator::on_unreadable_event(std::optional<int64_t> seq) {
  if (mode_ == feed_mode::catchup && seq && last_seq_ && *seq <= *last_seq_)
    return std::nullopt; // a repeat of what was delivered: nothing lost
  frame_reset_info r;
  r.cause = reset_cause::undeliverable;
  r.last_seq = last_seq_;
  r.lost_from = last_seq_;
  r.old_epoch = epoch_;
  r.new_epoch = epoch_;
  if (seq && (!last_seq_ || *seq > *last_seq_)) {
    r.lost_to = seq;
    last_seq_ = seq;
    gap_covered_ = false;
  } else if (!seq) {
    gap_covered_ = true;
  }
  return r;
}

} // namespace feed
} // namespace outbound
