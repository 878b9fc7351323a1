#pragma once

// The ledger drain of one watcher as a pure state machine (shared/seeds/000
// "The ordering principle", "Wake targets and re-drain", "Reset";
// shared/REFERENCE.md A.1 "Ledger drain rules"). Replay pages are the only
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

#include "actors/feed/feed_types.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace outbound {

/// Why a drain is requested.
enum class drain_trigger : uint8_t { start, wake, poll, redrain, connect };

/// What the actor does after a request.
enum class drain_action : uint8_t {
  /// Send replay(after = cursor(), limit = limit()).
  fetch,
  /// A drain is running: one more is remembered and runs when it ends.
  queued,
  /// Nothing (a stale re-drain timer).
  none,
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
  /// Deliver a retention reset before the events.
  bool reset = false;
  /// reset: the cursor the watcher had (events after it were lost).
  int64_t reset_from = 0;
  /// reset: the new floor; events in (reset_from, reset_to] are gone. From
  /// the first event's id - 1 (nullopt when that is not above reset_from),
  /// else (no event has an id) the page cursor; nullopt if neither says.
  std::optional<int64_t> reset_to;
  /// Indices into the page's events array, in delivery order (events whose
  /// id is not above the cursor are skipped: never delivered twice).
  std::vector<std::size_t> deliver;
  /// The page repeated an id above the cursor, or held more events than
  /// the limit: delivered (once each, the first `limit`), and drain_errors
  /// + 1 so that the server's fault is seen.
  bool anomaly = false;
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
  };
  kind what = kind::idle;
  feed_duration delay{0};
  uint64_t redrain_id = 0;
};

/// One watcher's ledger position and drain loop.
class ledger_drain {
public:
  /// Re-drain backoff floor. [0.05 s]
  static constexpr feed_duration redrain_floor = std::chrono::milliseconds{50};

  /// `cursor`: start after this id; `limit`: page size (>= 1);
  /// `poll_interval`: caps the re-drain backoff at max(3 s, poll_interval).
  ledger_drain(int64_t cursor, int limit, feed_duration poll_interval);

  /// Asks for a drain: starts one (fetch) or remembers one (queued).
  drain_action request(drain_trigger why);

  /// A wake with an optional cursor hint: raises the target (and restores
  /// the re-drain floor when it does), then requests a drain.
  drain_action on_wake(std::optional<int64_t> target);

  /// Raises the wake target (restoring the re-drain floor when it does)
  /// without requesting a drain (a ledger hello's cursor).
  void note_target(std::optional<int64_t> target);

  /// The hub took the feed over with in-frame delivery: the drain stops
  /// where it is (idle, nothing pending, re-drain timers stale). The cursor
  /// stays.
  void quiesce();

  /// A re-drain timer fired; stale ids (a drain started since) give none.
  drain_action on_redrain_timer(uint64_t id);

  /// The fetched page arrived. Call on_event_delivered for each delivered
  /// event, then on_page_done. A page over the limit (`over_limit`) is
  /// served as a full page of its first `limit` events: its cursor is
  /// ignored and the next page starts after the last delivered id, so no
  /// event past the cut is skipped.
  page_plan on_page(const page_summary& page);

  /// One event of the current page was delivered: the cursor moves to its
  /// id (never backward).
  void on_event_delivered(std::optional<int64_t> id);

  /// Every delivery of the page is acknowledged.
  drain_next on_page_done();

  /// The replay call failed (unreachable, non-JSON, over-cap, HTTP error):
  /// the cursor is untouched; the next tick (or re-drain) tries again.
  drain_next on_fetch_failed();

  /// Current cursor: the id of the last delivered event (or the page
  /// cursor past it).
  int64_t cursor() const {
    return cursor_;
  }

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

  /// Bad pages and full pages that did not move the cursor.
  uint64_t drain_errors() const {
    return drain_errors_;
  }

  /// Retention resets fired.
  uint64_t resets() const {
    return resets_;
  }

  /// Pages fetched (answers received, good or bad).
  uint64_t pages() const {
    return pages_;
  }

  /// The delay the next re-drain would wait.
  feed_duration redrain_delay() const {
    return redrain_delay_;
  }

private:
  enum class state : uint8_t { idle, fetching, delivering };

  drain_action start();
  drain_next finish();

  int64_t cursor_;
  int limit_;
  feed_duration redrain_cap_;
  feed_duration redrain_delay_ = redrain_floor;
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
  uint64_t drain_errors_ = 0;
  uint64_t resets_ = 0;
  uint64_t pages_ = 0;
};

} // namespace outbound
