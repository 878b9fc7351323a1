#pragma once

// Mode negotiation and in-frame delivery of one watcher as a pure state
// machine (hyperdjango serviceclient.py's mode negotiation; its docs,
// "Delivery models"). The watcher's configuration proposes a model (a replay
// path means ledger, a ws-only feed means in-frame delivery); the hub's hello
// decides. No CAF, no Asio, no clock reads.
//
//   on_open ──has replay──► [ledger] (pre-entered: a hub may send no hello)
//      │                        │ hello catchup / ephemeral
//      └──ws-only──► [none] ────┼──────────────────────────► [catchup]
//                      │        │                               │ resync or
//                      │ hello  │ hello ledger, no replay        │ epoch changed
//                      │        ▼                                ▼ → one reset
//                      │    [ephemeral] ◄── every hello: one reset
//                      └── data frame before any hello: inferred
//                          ephemeral + one reset
//
//   [ledger]     any complete message is a wake (its cursor a target)
//   [catchup]    event frames: deliver if seq > last_seq, last_seq = seq;
//                with no prefixes, a jump past last_seq + 1 is a gap reset
//   [ephemeral]  event frames: deliver, last_seq = max; a ws-only watcher
//                treats a wake frame as a reset

#include "core/feed_types.hpp"

#include <cstdint>
#include <optional>
#include <string>

namespace outbound {
inline namespace feed {

/// The fields of a hello frame that negotiation reads.
struct hello_info {
  /// The advertised mode as sent ("ledger", "catchup", "ephemeral", other).
  std::string mode;
  std::optional<int64_t> seq;
  std::optional<int64_t> cursor;
  bool resync = false;
  /// Absent or null: nullopt.
  std::optional<std::string> epoch;
};

/// What a non-hello data message is.
enum class frame_type : uint8_t {
  /// `{"type":"event",...}`
  event,
  /// `{"type":"wake",...}`
  wake,
  /// Another JSON object (pong, error, unknown type).
  other,
  /// Not a JSON object (non-JSON text, binary, a JSON array, ...).
  not_json,
};

/// The fields of a data message that delivery reads.
struct frame_info {
  frame_type type = frame_type::other;
  /// event: the integer `seq`, if any.
  std::optional<int64_t> seq;
  /// Any JSON object: the integer wake cursor field, if any.
  std::optional<int64_t> wake_cursor;
};

/// What the watcher does when a session opens.
enum class open_decision : uint8_t {
  /// Replay path configured: run the ledger at once (connected, nudge the
  /// drain); a hello may still switch the model.
  enter_ledger,
  /// ws-only: wait for the hello (or infer ephemeral from the first frame).
  await_hello,
};

/// What the watcher does with a hello.
enum class hello_decision : uint8_t {
  /// Ledger: keep draining; `hello.cursor` is a wake target.
  ledger,
  /// catchup, same epoch, hub says resume: no reset.
  catchup_resume,
  /// catchup resync (hub says so, the epoch changed, or a resume hello's
  /// seq is below last_seq): one reset.
  catchup_reset,
  /// ephemeral: one reset (every hello).
  ephemeral_reset,
};

/// The lost range of an in-frame reset.
struct frame_reset_info {
  reset_cause cause = reset_cause::reconnect;
  /// last_seq before the reset (nullopt: nothing received yet).
  std::optional<int64_t> last_seq;
  /// The hub's seq after the reset (hello.seq), where delivery resumes.
  std::optional<int64_t> new_seq;
  std::optional<std::string> old_epoch;
  std::optional<std::string> new_epoch;
  /// The seqs lost: (lost_from, lost_to]; lost_to nullopt when unknown
  /// (see feed_reset::lost_from).
  std::optional<int64_t> lost_from;
  std::optional<int64_t> lost_to;
};

struct hello_result {
  hello_decision decision = hello_decision::ledger;
  /// The mode now in force.
  feed_mode mode = feed_mode::ledger;
  /// Set for catchup_reset / ephemeral_reset.
  std::optional<frame_reset_info> reset;
};

/// What the watcher does with a data message (not a hello).
enum class frame_decision : uint8_t {
  /// ledger: nudge the drain; `wake_cursor` (if any) is the target.
  wake,
  /// in-frame event: deliver it.
  deliver,
  /// in-frame event with seq <= last_seq: already delivered, dropped.
  duplicate,
  /// ws-only, no hello yet: ephemeral inferred; or catchup of every
  /// subject after a seq jump (cause gap): deliver `reset`, then this
  /// event.
  reset_then_deliver,
  /// ephemeral: deliver `reset` (inferred from a first frame, or a wake
  /// frame to a ws-only watcher).
  reset,
  /// Nothing to do (a pong, an unknown frame in an in-frame mode).
  ignore,
};

struct frame_result {
  frame_decision decision = frame_decision::ignore;
  std::optional<frame_reset_info> reset;
};

/// Negotiation and in-frame sequence state of one watcher, across sessions.
class mode_negotiator {
public:
  /// `has_replay`: a replay path is configured (the watcher can run ledger).
  /// `every_subject`: no prefixes, so every catchup seq is sent to this
  /// watcher and a jump in seq is a loss (reset_cause::gap). [false]
  explicit mode_negotiator(bool has_replay, bool every_subject = false);

  /// The watcher starts as the feed's new owner after a takeover (a feed
  /// group): the first ephemeral reset -- of the first hello, or inferred
  /// from a first data frame -- has cause `takeover` instead of
  /// `reconnect` / `inferred`. A first hello of another model (catchup,
  /// ledger) drops it: those resume from their checkpoint. Call before
  /// the first session.
  void expect_takeover() {
    takeover_pending_ = true;
  }

  /// Catchup resume from a checkpoint another watcher (maybe another
  /// process, with the same client id) committed: `last_seq` is the last
  /// seq acknowledged there, `epoch` the hub's epoch it was read in
  /// (nullopt: the hub sent none). The first subscribe carries them; a
  /// hello in another epoch is an `epoch_changed` reset, a resync hello a
  /// `resync` reset, as for a watcher that received them itself. Call
  /// before the first session.
  void resume_at(int64_t last_seq, std::optional<std::string> epoch) {
    last_seq_ = last_seq;
    epoch_ = std::move(epoch);
  }

  /// A session opened (the subscribe frame has been sent).
  open_decision on_open();

  /// The session's hello arrived.
  hello_result on_hello(const hello_info& h);

  /// A data message other than a hello arrived.
  frame_result on_frame(const frame_info& f);

  /// An in-frame event that cannot be read whole, with the seq its text
  /// still shows (nullopt: none): the undeliverable reset to deliver in its
  /// place, lost (last_seq, seq] (or (last_seq, unknown] without a seq).
  /// A known seq becomes last_seq, so the next event is no gap; without
  /// one, the next jump in seq is covered by this reset (its end is
  /// unknown) and not reported again. nullopt: catchup, and the seq was
  /// already delivered (nothing lost).
  std::optional<frame_reset_info> on_unreadable_event(
    std::optional<int64_t> seq);

  /// The mode in force.
  feed_mode mode() const {
    return mode_;
  }

  /// Highest in-frame seq received (catchup's resume key, ephemeral's
  /// high-water mark); nullopt before the first.
  std::optional<int64_t> last_seq() const {
    return last_seq_;
  }

  /// The hub's epoch from the last hello (echoed in the next subscribe).
  const std::optional<std::string>& epoch() const {
    return epoch_;
  }

  /// True once the current session saw a hello.
  bool hello_seen() const {
    return hello_seen_;
  }

private:
  frame_reset_info make_reset(reset_cause cause,
                              std::optional<int64_t> new_seq,
                              std::optional<std::string> new_epoch) const;

  bool has_replay_;
  bool every_subject_;
  feed_mode mode_;
  bool hello_seen_ = false;
  std::optional<int64_t> last_seq_;
  std::optional<std::string> epoch_;
  /// An unreadable event of unknown seq was reset: the next seq jump is
  /// part of that loss, not a second one.
  bool gap_covered_ = false;
  /// expect_takeover() was called and no hello or inferred reset came yet.
  bool takeover_pending_ = false;
};

} // namespace feed
} // namespace outbound
