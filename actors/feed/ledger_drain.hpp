#pragma once

// The ledger drain of one watcher as a pure state machine (hyperdjango's
// serviceclient docs, github.com/mattsta/hyperdjango docs/serviceclient.md:
// "The ordering principle", "Wake targets and re-drain", "Reset", the ledger
// drain rules). Replay pages are the only
// source of truth: the cursor moves only when an event of a page has been
// delivered (and acknowledged), never from a wake, never backward. No CAF,
// no Asio, no clock reads.
//
//            request (start / wake / poll / redrain)
//   [idle] ─────────────────────────────► [fetching] ◄──────────────┐
//     ▲  ▲   (busy: remember one pending)     │ on_page             │ full page,
//     │  │                                    ▼                     │ cursor moved
//     │  │ on_fetch_failed          [delivering] ──on_page_done─────┘
//     │  └────────────────────────────────────┤ short page / bad page /
//     │                                       │ full page that did not
//     │      pending? → fetch again at once   │ move the cursor
//     │      cursor < wake target? → re-drain ▼
//     └──── after 0.05 s, 0.1 s, … ≤ max(3 s, poll_interval)
//
// A reset page fires one reset per cursor position: a degenerate reset that
// never moves the cursor is reported (and counted) once.
//
// Wakes are coalesced: one drain in flight and at most one pending,
// whatever the wake rate. A drain that ends below the wake target re-drains
// on the backoff above, and while that timer (or the retry timer of a
// failed fetch: same floor and cap) is armed, a wake that does not raise
// the target starts nothing -- a hint repeated 10,000 times a second costs
// what one costs. A wake that raises the target restores the floor
// (hyperdjango's serviceclient docs, ChangeFeedWatcher, "Wake targets and
// re-drain": "the floor is restored only when a fresh wake raises the
// target"): the timer is re-armed at
// 0.05 s if it was longer. A drain that ends with a wake
// pending drains again at once only if that wake brought news (no hint, a
// target raised above the cursor, a low hint) and the drain moved the
// cursor; a wake without news (a hint in [cursor, target]) starts nothing.
// News after a drain that read nothing new reads again at once the first
// time since the cursor last moved (the page was likely read just before
// the event became visible: the usual end of a burst); after that -- the
// event announced is not visible to replay yet, or the hint is bogus -- it
// waits one floor, as a raise restores the floor. So a flood of rising
// bogus hints costs one replay call per floor (20 a second), and the
// wake intake (wake_intake.hpp) keeps the wakes themselves off the actor.
// Decaying past the floor would be cheaper, but it is the case the floor
// exists for: while an unrelated long transaction holds replay's
// visibility back, every new event raises the target, and the event must
// be delivered within a floor of becoming visible.
//
// Poison pills. A page the watcher cannot read -- a 2xx body that does not
// parse (or nests deeper than the parser allows), a body over the response
// cap, events without an id that do not move the cursor -- must not stall
// the feed silently, nor be skipped whole. The drain narrows: it asks the
// same cursor again with half the limit (down to 1), delivering whatever
// readable pages come before the bad event. At limit 1 one bad answer
// proves nothing (a truncated or corrupted response): the drain asks the
// same `after` again, and only the same failure twice means that the first
// event after it cannot be read. Its id is then read from the unreadable
// body itself where possible (the watcher's id-only scan, feed_frames.hpp
// first_event_id): one `undeliverable` reset (lost range (c, id], event_id
// id), delivered in order, and the feed moves on past it -- the
// dead-letter practice of Kafka consumers (a record that cannot be
// deserialised is reported and skipped, not retried forever).
//
// When not even the id can be read (a body over the cap is not kept), it
// is found from the replay contract alone: after=x answers the first event
// with an id above x. The drain probes after = c+1, c+2, ... (limit 1,
// each failure confirmed twice as above): if after=y is unreadable for
// every y in [c, x) and after=x is readable, every event in (c, x] is
// unreadable (an event r there would make after=r-1 readable) and x is
// one (after=x-1 answered it). So the first readable probe x ends the
// search exactly, and a run of adjacent bad events is one reset. The probe
// is linear on purpose: an unreadable answer for after=x says nothing
// about the events in (c, x), so a gallop or a bisection could pass over
// a readable event between two bad ones. An attempt stops after
// `linear_probe_steps` positions and retries on the backoff, skipping
// nothing, going on from where it stopped while the cursor stays (a proxy
// answering HTML to everything isolates nothing and costs the backoff).
// Before x is declared, after=x-1 and after=c are asked once more: an
// outage that ended in the middle of the walk (a proxy's error page served
// with 200) made every answer unreadable for a while, and a readable answer
// now starts the drain over from c instead of skipping readable events.
// Two unreadable answers confirm each other whatever their reasons (a
// balancer alternating between two broken backends must not loop hot).
// The narrowed limit holds until the drain goes idle.
//
// Each attempt is bounded, but attempts must not repeat hot either: a
// server that flaps between readable and unreadable in step with the probe
// would make narrow -> probe -> start over cycle forever. So an attempt
// that ends without moving the cursor -- a fresh look that starts over, a
// fetch that fails mid-isolation, a probe out of steps -- waits before the
// next one on the re-drain backoff (0.05 s doubling up to max(3 s,
// poll_interval)), and consecutive ones double it. Only real progress (the
// cursor moving: an event delivered, a poison event passed, a rewind)
// brings it back to the floor; a readable answer in the middle of a cycle
// does not, and neither a wake nor a poll tick brings a start-over forward
// (both are coalesced into the armed timer). A new session (connect) or a
// ledger hello still starts a drain: they come at most once per
// connection, which the reconnect backoff paces, and a hello may announce
// a new incarnation that makes the wait moot.
//
//   narrow ─► strike ─► probe ─► fresh look ─readable─► start over
//     ▲                                                    │ wait d;
//     └────────────────────────────────────────────────────┘ d = min(2d, cap)
//   (cursor moves: d = floor)
//
// Incarnations. A ledger that is replaced under a running watcher (the hub
// restarted without its old log, or was restored from a backup) makes the
// cursor meaningless: asking for ids after it returns nothing, forever. The
// drain detects a new incarnation from
//   - the ledger's epoch (a hello's or a replay page's) differing from the
//     one it saw, or
//   - a replay page that has no id past the cursor and whose own cursor (the
//     hub's head) is below it.
// A hello cursor or a wake hint below the cursor only asks for a drain: a
// hint may be stale (sharded fan-out), so the page decides. Then, once the
// page in delivery (if any) is done, the drain rewinds: it forgets the old
// position, fetches from the new ledger's start (after = 0) and delivers one
// rewind reset before that page's events; a page fetched before the rewind
// is dropped unread. A rewind fires once per (cursor, epoch): a server whose
// head stays below the same cursor in the same epoch after a rewind has
// been replayed is counted at drain_errors, never rewound again (no reset
// loop). Compare etcd's "required revision has been compacted" and the
// Kubernetes watch cache after an etcd restore (kubernetes/kubernetes#107457),
// where a resource version that moved backward was followed silently.

#include "core/backoff.hpp"
#include "core/feed_types.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace outbound {
inline namespace feed {

/// Why a drain is requested.
enum class drain_trigger : uint8_t { start, wake, poll, redrain, connect };

/// What the actor does after a request.
enum class drain_action : uint8_t {
  /// Send replay(after = cursor(), limit = limit()).
  fetch,
  /// A drain is running: one more is remembered and runs when it ends.
  queued,
  /// Nothing (a stale re-drain timer, a coalesced wake).
  none,
  /// A wake raised the target while a longer re-drain backoff was armed:
  /// send (redrain, rearm_id()) to yourself after rearm_delay() (the
  /// floor); the older timer is stale.
  rearm,
};

/// The parts of a replay response the drain reads (the actor keeps the
/// event objects themselves).
struct page_summary {
  /// The page is a JSON object (a bare array or scalar is a bad page).
  bool is_object = false;
  /// One entry per element of the events array: its integer id, if any.
  std::vector<std::optional<int64_t>> ids;
  /// The page's integer cursor, if any.
  std::optional<int64_t> cursor;
  /// The below-retention flag.
  bool reset = false;
  /// The events array held more entries than the limit asked for; `ids`
  /// (and the actor's events) keep only the first `limit` of them.
  bool over_limit = false;
  /// The ledger's incarnation id, when the page carries one.
  std::optional<std::string> epoch;
};

/// What a page means.
enum class page_verdict : uint8_t {
  /// Deliver `reset` (if set), then the events at `deliver`, in order.
  deliver,
  /// Not an object; or ids above the cursor that go backward (the order
  /// of the ledger is broken: delivering would reorder or lose events); or
  /// events without an id on a page that moves the cursor neither by an id
  /// nor by its cursor (they would come again on every tick): drain_errors
  /// + 1, nothing delivered, cursor untouched.
  bad_page,
};

/// The delivery plan of one page.
struct page_plan {
  page_verdict verdict = page_verdict::deliver;
  /// Deliver a reset before the events.
  bool reset = false;
  /// reset: retention (the page was below the hub's floor) or rewind (a new
  /// ledger incarnation: the events are the new ledger's first).
  reset_cause cause = reset_cause::retention;
  /// reset: the cursor the watcher had (events after it were lost).
  int64_t reset_from = 0;
  /// reset: the new floor; events in (reset_from, reset_to] are gone. For a
  /// rewind: the new ledger's retention floor when its first page was
  /// below it (its ids up to here were trimmed before they were read),
  /// else nullopt (the old incarnation's end is unknown). From
  /// the first event's id - 1 (nullopt when that is not above reset_from),
  /// else (no event has an id) the page cursor; nullopt if neither says.
  std::optional<int64_t> reset_to;
  /// rewind: the epochs of the old and the new incarnation, where known.
  /// old_epoch is nullopt when the cursor was resumed without its epoch
  /// (feed_config::resume_ledger_epoch) and rewound before it moved: the
  /// first epoch the hub named may have been the new ledger's own.
  std::optional<std::string> old_epoch;
  std::optional<std::string> new_epoch;
  /// Indices into the page's events array, in delivery order (events whose
  /// id is not above the cursor are skipped: never delivered twice).
  std::vector<std::size_t> deliver;
  /// The page repeated an id above the cursor, or held more events than
  /// the limit: delivered (once each, the first `limit`), and drain_errors
  /// + 1 so that the server's fault is seen.
  bool anomaly = false;
  /// undeliverable: the id of the event that could not be read.
  std::optional<int64_t> event_id;
  /// undeliverable: "<drain_error_reason>: <detail>".
  std::string reason;
};

/// What the actor does when a page has been handled or a fetch failed.
struct drain_next {
  enum class kind : uint8_t {
    /// Fetch the next page now.
    fetch,
    /// The drain is over; wait for a wake or the poll tick.
    idle,
    /// The drain is over below the wake target: send
    /// (redrain, `redrain_id`) to yourself after `delay`.
    redrain,
    /// An unreadable event was isolated without a readable page: deliver
    /// `plan` (one undeliverable reset, no events), then call
    /// on_page_done().
    reset,
  };
  kind what = kind::idle;
  feed_duration delay{0};
  uint64_t redrain_id = 0;
  /// reset: the reset to deliver.
  page_plan plan;
};

/// One watcher's ledger position and drain loop.
class ledger_drain {
public:
  /// Re-drain backoff floor. [0.05 s]
  static constexpr feed_duration redrain_floor = std::chrono::milliseconds{50};

  /// Positions a poison-pill probe asks (after = c+1, c+2, ..., each
  /// unreadable answer confirmed once) per drain attempt before it backs
  /// off; the next attempt at the same cursor goes on from there. [32]
  static constexpr int linear_probe_steps = 32;

  /// `cursor`: start after this id; `limit`: page size (>= 1);
  /// `poll_interval`: caps the re-drain backoff at max(3 s, poll_interval);
  /// `epoch`: the ledger epoch `cursor` belongs to (a resumed checkpoint's),
  /// so that a hello or page in another epoch is a rewind; nullopt: the
  /// first epoch seen is the cursor's.
  ledger_drain(int64_t cursor, int limit, feed_duration poll_interval,
               std::optional<std::string> epoch = std::nullopt);

  /// Asks for a drain: starts one (fetch) or remembers one (queued). A
  /// `poll` while a start-over timer is armed is coalesced into it (none,
  /// counted at wakes_coalesced); every other trigger starts a drain when
  /// idle.
  drain_action request(drain_trigger why);

  /// A wake with an optional cursor hint: raises the target (and restores
  /// the re-drain floor when it does), then asks for a drain unless the
  /// wake is coalesced (see the header comment): none when it is.
  drain_action on_wake(std::optional<int64_t> target);

  /// Raises the wake target (restoring the re-drain floor when it does)
  /// without requesting a drain.
  void note_target(std::optional<int64_t> target);

  /// A ledger hello: `epoch` (null: the hub has none) and `head` (its
  /// cursor). A new epoch decides a rewind; a head below the cursor asks
  /// the replay to confirm one; a head above it is a wake target. A drain
  /// that only a new session queued behind the page in flight is settled
  /// when that page ends with the cursor at or past the hello's head (and
  /// every target known: an earlier hello's, a wake's hint): the
  /// page read all that existed when the session subscribed, and the
  /// session's wakes announce what comes after (a hello without a head
  /// settles nothing; news from a wake meanwhile keeps the drain).
  /// The one case it reads later: an event appended before the session
  /// subscribed, announced to other sessions then, and still invisible to
  /// replay when that page ran (a replay ceiling that lags the wakes,
  /// hub_faults::visibility_lag_polls) comes with the next wake or poll
  /// tick; the second read it saves would have found it had it become
  /// visible in the meantime.
  /// Returns fetch when a drain should start now (a rewind, a head off the
  /// cursor), queued when one is remembered, none otherwise.
  drain_action on_hello(const std::optional<std::string>& epoch,
                        std::optional<int64_t> head);

  /// The hub took the feed over with in-frame delivery: the drain stops
  /// where it is (idle, nothing pending, re-drain timers stale). The cursor
  /// stays.
  void quiesce();

  /// A re-drain timer fired; stale ids (a drain started since) give none.
  drain_action on_redrain_timer(uint64_t id);

  /// The fetched page arrived. Call on_event_delivered for each delivered
  /// event, then on_page_done. A page from another incarnation than the
  /// one it was asked of is dropped (no deliveries; on_page_done fetches
  /// again from the new start). A page over the limit (`over_limit`) is
  /// served as a full page of its first `limit` events: its cursor is
  /// ignored and the next page starts after the last delivered id, so no
  /// event past the cut is skipped.
  page_plan on_page(const page_summary& page);

  /// One event of the current page was delivered: the cursor moves to its
  /// id (never backward).
  void on_event_delivered(std::optional<int64_t> id);

  /// Every delivery of the page is acknowledged.
  drain_next on_page_done();

  /// The replay call failed (unreachable, HTTP error): the cursor is
  /// untouched; the drain retries after a backoff (0.05 s doubling up to
  /// max(3 s, poll_interval), reset by a page read), and wakes meanwhile
  /// are coalesced into that retry.
  drain_next on_fetch_failed();

  /// The page asked for (fetch_after(), fetch_limit()) came back but could
  /// not be read (`why`: unparseable or over_cap; `detail`: the client's
  /// description; `first_id`: the id of the page's first event if the
  /// body still showed it, see feed_frames.hpp first_event_id). Counted at
  /// drain_errors; narrows the page, asks again, declares the event
  /// undeliverable (kind::reset), probes for its id, or gives up (see the
  /// header comment).
  drain_next on_unreadable(drain_error_reason why, const std::string& detail,
                           std::optional<int64_t> first_id = std::nullopt);

  /// The `after` of the next (or current) replay request: the cursor, or
  /// a probe's position while isolating an unreadable event.
  int64_t fetch_after() const;

  /// The `limit` of the next (or current) replay request: the configured
  /// limit, or less while a page is narrowed.
  int fetch_limit() const {
    return fetch_limit_;
  }

  /// Current cursor: the id of the last delivered event (or the page
  /// cursor past it).
  int64_t cursor() const {
    return cursor_;
  }

  /// The configured page size.
  int limit() const {
    return limit_;
  }

  /// Highest wake cursor hint seen; nullopt before the first.
  std::optional<int64_t> target() const {
    return target_;
  }

  /// True while a fetch or a page delivery is in progress.
  bool busy() const {
    return state_ != state::idle;
  }

  /// Pages counted at drain_errors (sum over the reasons).
  uint64_t drain_errors() const;

  /// Pages counted at drain_errors for `why`.
  uint64_t drain_errors(drain_error_reason why) const {
    return drain_errors_[static_cast<std::size_t>(why)];
  }

  /// Undeliverable resets planned (poison events isolated and skipped).
  uint64_t undeliverable() const {
    return undeliverable_;
  }

  /// True when a wake that raises the target would change nothing but
  /// the target (and the re-drain step a raise restores): a drain is in
  /// flight with a wake with news already pending, or the re-drain timer is
  /// armed at the floor. Until the drain's next step (its page, its
  /// failure, its timer) such wakes may be folded into one on_wake with
  /// the highest of their targets, in any order relative to that step --
  /// what the watcher's io-thread intake does with a flood of rising
  /// hints (wake_intake.hpp).
  bool absorbs_raises() const;

  /// Wakes that started no drain (coalesced).
  uint64_t wakes_coalesced() const {
    return wakes_coalesced_;
  }

  /// rearm: the id and the delay of the new re-drain timer.
  uint64_t rearm_id() const {
    return redrain_gen_;
  }
  feed_duration rearm_delay() const {
    return armed_delay_;
  }

  /// True while an unreadable page is being narrowed or probed.
  bool isolating() const {
    return isolate_ != isolate_phase::none;
  }

  /// Retention resets fired.
  uint64_t resets() const {
    return resets_;
  }

  /// Rewind resets fired (planned into a page).
  uint64_t rewinds() const {
    return rewinds_;
  }

  /// The ledger epoch in force (the replay pages', else the hellos');
  /// nullopt when the hub sends none.
  const std::optional<std::string>& epoch() const {
    return page_epoch_ ? page_epoch_ : hello_epoch_;
  }

  /// True while a rewind is decided but its reset not yet planned.
  bool rewinding() const {
    return rewind_pending_ || rewind_armed_.has_value();
  }

  /// Pages fetched (answers received, good or bad).
  uint64_t pages() const {
    return pages_;
  }

  /// The delay the next re-drain would wait.
  feed_duration redrain_delay() const {
    return redrain_backoff_.step(redrain_attempt_);
  }

  /// The delay the next isolation attempt that ends without progress
  /// (a start-over) waits before the drain tries again (see the header
  /// comment): the re-drain floor, doubled per consecutive start-over up
  /// to the re-drain cap, back to the floor when the cursor moves.
  feed_duration start_over_delay() const {
    return redrain_backoff_.step(start_over_attempt_);
  }

private:
  enum class state : uint8_t { idle, fetching, delivering };
  enum class isolate_phase : uint8_t { none, narrowing, probing };

  drain_action start();
  /// `failed`: a fetch failed: back off.
  drain_next finish(bool failed = false);
  /// An isolation attempt ended without progress: back off on the
  /// start-over backoff (start_over_attempt_), then double it.
  drain_next start_over();
  /// Moves the cursor forward to `id` (never backward); progress resets
  /// the start-over backoff.
  void advance_to(int64_t id);
  void count(drain_error_reason why);
  /// Ends a narrowing / probe; the page size is the configured one again.
  void stop_isolating();
  /// Halves the page (limit > 1).
  drain_next narrow(drain_error_reason why, const std::string& detail);
  /// An unreadable answer for (fetch_after(), fetch_limit()), counted:
  /// narrows, asks again, declares, probes on, or gives up.
  drain_next unreadable(drain_error_reason why, const std::string& detail,
                        std::optional<int64_t> first_id);
  /// The undeliverable reset of `event_id` (the cursor moves to it when the
  /// page is done).
  page_plan declare(int64_t event_id);
  /// Arms a re-drain (or retry) timer after the re-drain backoff's step
  /// `attempt`, then counts the attempt (the next step doubles, up to the
  /// cap).
  drain_next arm_redrain(int& attempt);
  /// What showed a new incarnation.
  enum class epoch_source : uint8_t { hello, page, head };
  std::optional<std::string>* slot(epoch_source src);
  /// Decides a rewind; the source's epoch takes `new_epoch` (head: the
  /// head said so, no epoch). False when it would repeat the last one
  /// (same cursor and epoch).
  bool decide_rewind(epoch_source src,
                     const std::optional<std::string>& new_epoch);
  /// A page that shows the ledger head below a non-zero start.
  bool shows_rewind(const page_summary& page) const;

  // The steps of on_page, in order.
  /// True if `page` belongs to another incarnation than the one it was
  /// asked of (or came before a decided rewind): it is dropped unread.
  bool page_is_stale(const page_summary& page);
  /// A probe page while isolating a poison event: only "readable or not"
  /// matters, nothing is delivered.
  void on_probe_page(const page_summary& page);
  /// Checks the page's ids against its start (no id goes backward; events
  /// without an id must be passed by the cursor); sets page_bad_ /
  /// page_bad_event_. Returns true when an id repeats.
  bool check_page_order(const page_summary& page);
  /// The reset the page starts with, if any: the rewind armed for a new
  /// incarnation, or a retention reset the page reports.
  void plan_reset(const page_summary& page, page_plan& plan);

  struct rewind_info {
    int64_t from = 0;
    std::optional<std::string> old_epoch;
  };

  int64_t cursor_;
  int limit_;
  /// The epoch in force is the incarnation cursor_ was read in: given at
  /// construction (a resume with its epoch), or cursor_ was 0, moved, or
  /// rewound since. False for a cursor resumed without its epoch until it
  /// moves: a rewind then reports old_epoch unknown.
  bool epoch_is_cursors_;
  /// The re-drain backoff: redrain_floor doubling up to max(3 s,
  /// poll_interval), no jitter (hyperdjango's serviceclient "Wake targets
  /// and re-drain"). Each backoff below counts its own attempts into it;
  /// 0 is the floor.
  core::backoff redrain_backoff_;
  int redrain_attempt_ = 0;
  state state_ = state::idle;
  bool pending_ = false;
  std::optional<int64_t> target_;
  uint64_t redrain_gen_ = 0;
  /// Cursor when the current page was requested.
  int64_t page_start_ = 0;
  /// Raw size and cursor of the current page; whether it was bad.
  std::size_t page_count_ = 0;
  std::optional<int64_t> page_cursor_;
  bool page_bad_ = false;
  bool page_over_limit_ = false;
  /// Cursor at which the last reset fired.
  std::optional<int64_t> last_reset_cursor_;
  /// The current page is dropped unread (another incarnation's).
  bool page_stale_ = false;
  /// The ledger's epoch as the hellos and as the replay pages say it: each
  /// is compared only with itself (a server may name them differently).
  std::optional<std::string> hello_epoch_;
  std::optional<std::string> page_epoch_;
  /// What decided the pending rewind, and that source's epoch before it.
  epoch_source pending_source_ = epoch_source::head;
  std::optional<std::string> pending_source_old_;
  /// The epoch the pending rewind goes to (its once-only key).
  std::optional<std::string> pending_key_;
  /// A rewind decided, applied at the next start().
  bool rewind_pending_ = false;
  std::optional<std::string> pending_old_epoch_;
  /// A rewind applied (cursor at the new start), its reset not yet planned.
  std::optional<rewind_info> rewind_armed_;
  /// (cursor, epoch) of the last rewind applied.
  std::optional<std::pair<int64_t, std::optional<std::string>>> last_rewind_;
  /// The latest head hint below the cursor (the new ledger's head if a
  /// rewind follows).
  std::optional<int64_t> low_head_;
  /// The last low hint a page disproved (repeats of it are coalesced).
  std::optional<int64_t> checked_low_;
  uint64_t rewinds_ = 0;
  std::array<uint64_t, drain_error_reason_count> drain_errors_{};
  /// Poison-pill isolation.
  int fetch_limit_;
  isolate_phase isolate_ = isolate_phase::none;
  drain_error_reason isolate_reason_ = drain_error_reason::unparseable;
  std::string isolate_detail_;
  /// The probe's position (after = probe_x_, limit 1).
  int64_t probe_x_ = 0;
  /// Positions probed in this attempt.
  int probe_steps_ = 0;
  /// (cursor, position) where the last attempt's probe stopped.
  std::optional<std::pair<int64_t, int64_t>> probe_resume_;
  /// A readable probe answer at after = x waits for a fresh look at
  /// after = x - 1 (step 1) and after = cursor (step 2) before x is
  /// declared: a readable answer there means the failures were transient.
  std::optional<int64_t> confirm_x_;
  int confirm_step_ = 0;
  /// The `after` of the first unreadable answer at limit 1 not yet
  /// repeated.
  std::optional<int64_t> strike_after_;
  /// The current page is a probe (its events are not delivered).
  bool page_probe_ = false;
  /// The current probe page was unreadable, for this reason.
  bool probe_unreadable_ = false;
  drain_error_reason probe_why_ = drain_error_reason::bad_page;
  /// The current page has events that can be neither delivered nor passed.
  bool page_bad_event_ = false;
  /// The poison event found: the cursor moves to it when the page is done.
  std::optional<int64_t> skip_to_;
  uint64_t undeliverable_ = 0;
  /// Coalescing: a re-drain or retry timer is armed; the retry backoff of
  /// failed fetches.
  bool armed_ = false;
  /// The cursor moved (an event delivered or passed, a rewind) since the
  /// drain last went idle.
  bool moved_ = false;
  /// The pending drain was asked by request() (not only by wakes).
  bool pending_request_ = false;
  /// ... and only by new sessions (drain_trigger::connect): a hello of the
  /// session whose head the cursor already covers settles it (on_hello).
  bool pending_connect_only_ = false;
  /// ... and the head the session's hello gave: the drain is dropped when
  /// the page in flight ends with the cursor there or past it, unless news
  /// came.
  std::optional<int64_t> settle_head_;
  /// A pending wake brought news (no hint, a raised target above the
  /// cursor, a low hint).
  bool pending_news_ = false;
  /// News after a drain that read nothing new was read again at once once
  /// since the cursor last moved.
  bool news_retried_ = false;

  /// A raised target would bring the armed timer forward to the floor.
  bool raise_rearms() const;
  feed_duration armed_delay_{0};
  int retry_attempt_ = 0;
  /// The start-over backoff; the armed timer is a start-over's.
  int start_over_attempt_ = 0;
  bool armed_start_over_ = false;
  /// The current probe page was a readable fresh look: start over when it
  /// is done.
  bool start_over_ = false;
  uint64_t wakes_coalesced_ = 0;
  uint64_t resets_ = 0;
  uint64_t pages_ = 0;
};

} // namespace feed
} // namespace outbound
