#pragma once

// The hub's ledger tier as a pure state machine (hyperdjango's hypermanager
// hub): an append-only log with ids 1..N, a retention floor, replay pages,
// dedupe by key and an injectable visibility lag. No clock, no I/O: the
// server passes the publish time in.
//
//   ids:   1 ... floor | floor+1 ..... visible | visible+1 ... head
//          trimmed     | retained, replayable  | appended, not visible yet
//
//   page(after):  after <  floor  -> reset:true, page from floor+1
//                 after >= floor  -> page from after+1
//                 both stop at `visible` (the gapless ceiling) or at `limit`
//
// Visibility lag (fault knob): an event appended while the lag is K is missed
// by the next K replay polls and shown by the one after, so a wake can
// announce a cursor that replay does not show yet (hyperdjango docs, "Wake
// targets and re-drain": the replay ceiling lagged the wake). Lag 0: at once.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace outbound {

/// One stored event. Immutable once appended; shared by pages and the
/// dedupe index.
struct ledger_event {
  /// Ledger id, 1..N without gaps.
  int64_t id = 0;
  /// Catch-up seq given at publish (incarnation-local, see catchup_ring).
  int64_t seq = 0;
  std::string subject;
  std::string kind;
  /// Empty when the event was published without a dedupe key.
  std::string dedupe_key;
  /// The event as replay pages and the publish answer carry it:
  /// `{"id":N,"seq":S,"subject":...,"kind":...,"metadata":{...},"ts":T}`.
  std::string json;
};

/// Shared, immutable event.
using ledger_event_ptr = std::shared_ptr<const ledger_event>;

/// Settings of the ledger (hypermanager's hub defaults).
struct ledger_config {
  /// Keep the last `retention` events; 0 keeps all. [0]
  uint64_t retention = 0;
  /// Default and maximum page size (`limit <= 0` means this). [500]
  int replay_limit = 500;
  /// Dedupe keys remembered, least recently used evicted first. [4096]
  std::size_t dedupe_capacity = 4096;
  /// Replay polls that miss a freshly appended event (fault knob). [0]
  int visibility_lag_polls = 0;
};

/// One replay page, the answer of `GET /v1/events`.
struct ledger_page {
  /// Matching events in id order, at most the effective limit.
  std::vector<ledger_event_ptr> events;
  /// The id the scan reached: the last event's id for a full page, else the
  /// visible ceiling (so a reader filtering by prefix moves past
  /// non-matching events).
  int64_t cursor = 0;
  /// True when `after` was below the retention floor: events were lost.
  bool reset = false;
};

/// What `append` did.
struct ledger_append_result {
  /// The stored event (the earlier one for a repeated dedupe key).
  ledger_event_ptr event;
  /// True when the dedupe key was seen before and nothing was appended.
  bool duplicate = false;
};

/// The append-only log.
class ledger_log {
public:
  explicit ledger_log(ledger_config cfg = {});

  /// The earlier event stored under `dedupe_key` (refreshing its LRU slot),
  /// or null. An empty key never matches.
  ledger_event_ptr find_duplicate(const std::string& dedupe_key);

  /// Appends an event with id head()+1. `metadata_json` must be a
  /// serialized JSON object (the server validated it); `ts` is seconds since
  /// the Unix epoch. A repeated non-empty dedupe key appends nothing and
  /// returns the earlier event with `duplicate = true`.
  ledger_append_result append(const std::string& subject,
                              const std::string& kind,
                              const std::string& metadata_json,
                              const std::string& dedupe_key, int64_t seq,
                              double ts);

  /// One replay page after `after` (see the diagram): `limit <= 0` or above
  /// replay_limit means replay_limit; `prefixes` filter by subject (empty:
  /// all). Counts one poll for the visibility lag. When the prefixes match
  /// at most `max_indexed_subjects` subjects the page is read from
  /// the per-subject index (O(page) for a feed following its own subtree,
  /// however long the ledger behind its cursor), else by a scan from the
  /// cursor; both give the same page.
  ledger_page page(int64_t after, int limit,
                   const std::vector<std::string>& prefixes);

  /// Last appended id (0 when empty).
  int64_t head() const {
    return head_;
  }

  /// Highest id such that every retained id up to it is visible to replay.
  int64_t visible() const {
    return visible_;
  }

  /// Last trimmed id: ids <= floor() are gone (0 when nothing was trimmed).
  int64_t floor() const {
    return floor_;
  }

  /// Retained events.
  std::size_t size() const {
    return entries_.size();
  }

  /// Replay polls served so far.
  uint64_t polls() const {
    return polls_;
  }

  /// The retained event `id`, or null.
  ledger_event_ptr get(int64_t id) const;

  /// Keeps the last `retention` events from now on (0 keeps all) and trims
  /// at once. The floor never moves back.
  void set_retention(uint64_t retention);

  /// Trims every event with id <= `id` (clamped to head()). The floor never
  /// moves back.
  void trim_through(int64_t id);

  /// Sets the lag for events appended from now on.
  void set_visibility_lag(int polls);

  /// The effective page size for a requested `limit`.
  int effective_limit(int limit) const;

  const ledger_config& config() const {
    return cfg_;
  }

  /// Pages whose prefixes match more subjects than this (counted over the
  /// prefixes, so a subject two prefixes match counts twice) scan the
  /// ledger instead of merging per-subject lists.
  static constexpr std::size_t max_indexed_subjects = 64;

  /// Ids held by the per-subject index (diagnostics and tests: it equals
  /// size(), every retained event indexed once).
  std::size_t indexed_ids() const;

private:
  struct entry {
    ledger_event_ptr event;
    /// Visible to a poll once polls_ >= visible_at.
    uint64_t visible_at = 0;
  };

  /// One subject's retained ids, ascending: a vector read from `first`
  /// (trimming moves `first`; the dead front is dropped once it is half the
  /// vector), so a subject with one event costs one small allocation.
  struct id_list {
    std::vector<int64_t> ids;
    std::size_t first = 0;

    bool empty() const {
      return first == ids.size();
    }
    std::size_t size() const {
      return ids.size() - first;
    }
    std::vector<int64_t>::const_iterator begin() const {
      return ids.begin() + static_cast<std::ptrdiff_t>(first);
    }
    std::vector<int64_t>::const_iterator end() const {
      return ids.end();
    }
    void pop_front() {
      if (++first == ids.size()) {
        ids.clear();
        first = 0;
      } else if (first >= 16 && 2 * first >= ids.size()) {
        ids.erase(ids.begin(),
                  ids.begin() + static_cast<std::ptrdiff_t>(first));
        first = 0;
      }
    }
  };

  void advance_visible();
  void remember_key(const ledger_event_ptr& ev);
  /// The id lists of the subjects `prefixes` match, or false when the page
  /// should scan (no prefix, an empty prefix, or more subjects than
  /// max_indexed_subjects).
  bool indexed_lists(const std::vector<std::string>& prefixes,
                     std::vector<const id_list*>& out) const;

  ledger_config cfg_;
  std::deque<entry> entries_; // ids floor_+1 .. head_
  /// Retained ids of each subject, ascending (trimmed with entries_).
  std::map<std::string, id_list, std::less<>> by_subject_;
  int64_t head_ = 0;
  int64_t floor_ = 0;
  int64_t visible_ = 0;
  uint64_t polls_ = 0;
  std::list<std::string> lru_; // most recent first
  std::unordered_map<std::string,
                     std::pair<ledger_event_ptr, std::list<std::string>::iterator>>
    keys_;
};

} // namespace outbound
