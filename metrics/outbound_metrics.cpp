#include "metrics/outbound_metrics.hpp"

#include "metrics/client_metrics.hpp"

#include <prometheus/text_serializer.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <sstream>
#include <utility>

namespace outbound {
inline namespace metrics {

namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using label_list = std::vector<ClientMetric::Label>;

/// Families by name, rendered in name order; empty ones are left out.
class family_set {
public:
  void counter(const std::string& name, const std::string& help,
               label_list labels, double value) {
    auto& m = add(name, help, MetricType::Counter, std::move(labels));
    m.counter.value = value;
  }

  void gauge(const std::string& name, const std::string& help,
             label_list labels, double value) {
    auto& m = add(name, help, MetricType::Gauge, std::move(labels));
    m.gauge.value = value;
  }

  /// A histogram from per-bucket (non-cumulative) counts; `counts` has one
  /// entry more than `bounds` (the +Inf bucket).
  template <class Bounds, class Counts>
  void histogram(const std::string& name, const std::string& help,
                 label_list labels, const Bounds& bounds,
                 const Counts& counts, double sum) {
    auto& m = add(name, help, MetricType::Histogram, std::move(labels));
    uint64_t cumulative = 0;
    for (std::size_t i = 0; i < bounds.size(); ++i) {
      cumulative += counts[i];
      m.histogram.bucket.push_back(
        {cumulative, static_cast<double>(bounds[i])});
    }
    cumulative += counts[bounds.size()];
    m.histogram.bucket.push_back(
      {cumulative, std::numeric_limits<double>::infinity()});
    m.histogram.sample_count = cumulative;
    m.histogram.sample_sum = sum;
  }

  std::vector<MetricFamily> take() {
    std::vector<MetricFamily> out;
    out.reserve(families_.size());
    for (auto& [name, f] : families_)
      out.push_back(std::move(f));
    return out;
  }

private:
  ClientMetric& add(const std::string& name, const std::string& help,
                    MetricType type, label_list labels) {
    auto& f = families_[name];
    if (f.name.empty()) {
      f.name = name;
      f.help = help;
      f.type = type;
    }
    f.metric.emplace_back();
    f.metric.back().label = std::move(labels);
    return f.metric.back();
  }

  std::map<std::string, MetricFamily> families_;
};

double as_double(uint64_t x) {
  return static_cast<double>(x);
}

double breaker_state_value(breaker_phase p) {
  switch (p) {
    case breaker_phase::closed: return 0;
    case breaker_phase::open: return 1;
    case breaker_phase::half_open: return 2;
  }
  return 0;
}

/// Adds the counters of `s` into `sum` (the "_other" aggregate).
void add_feed_counters(feed_stats& sum, const feed_stats& s) {
  sum.events_delivered += s.events_delivered;
  sum.resets += s.resets;
  for (std::size_t c = 0; c < reset_cause_count; ++c)
    sum.resets_by_cause[c] += s.resets_by_cause[c];
  sum.reconnects += s.reconnects;
  sum.peer_timeouts += s.peer_timeouts;
  sum.drain_errors += s.drain_errors;
  for (std::size_t r = 0; r < drain_error_reason_count; ++r)
    sum.drain_errors_by_reason[r] += s.drain_errors_by_reason[r];
  sum.unreadable_frames += s.unreadable_frames;
  for (std::size_t r = 0; r < frame_error_reason_count; ++r)
    sum.unreadable_frames_by_reason[r] += s.unreadable_frames_by_reason[r];
  sum.replay_errors += s.replay_errors;
  sum.overflows += s.overflows;
  sum.oversized_frames += s.oversized_frames;
  sum.event_callback_errors += s.event_callback_errors;
  sum.reset_callback_errors += s.reset_callback_errors;
}

/// True if a feed of `mode` can reset with `cause` (its series is exported
/// from the start, at 0; other causes appear once they happen).
bool expected_cause(const std::string& mode, reset_cause cause) {
  switch (cause) {
    case reset_cause::retention:
    case reset_cause::rewind: return mode == "ledger";
    case reset_cause::resync:
    case reset_cause::epoch_changed:
    case reset_cause::gap: return mode == "catchup";
    case reset_cause::reconnect:
    case reset_cause::inferred:
    case reset_cause::wake: return mode == "ephemeral";
    case reset_cause::undeliverable: return false; // any mode, once seen
    // Ephemeral, but only a feed group's takeover starts one: once seen,
    // so a feed that never runs in a group shows no series for it.
    case reset_cause::takeover: return false;
  }
  return false;
}

/// Ledger lag in events: max(head - cursor, 0) once the hub announced a
/// head; nullopt otherwise (catchup/ephemeral feeds, or no hello yet).
std::optional<int64_t> feed_lag(const feed_stats& s) {
  if (!s.head || s.mode != feed_mode::ledger)
    return std::nullopt;
  return std::max<int64_t>(*s.head - s.cursor, 0);
}

/// `l` is {feed, mode} (in that order).
void render_feed(family_set& out, const label_list& l, const feed_stats& s) {
  out.counter("outbound_feed_events_total",
              "Feed events acknowledged by the subscriber", l,
              as_double(s.events_delivered));
  for (std::size_t c = 0; c < reset_cause_count; ++c) {
    auto cause = static_cast<reset_cause>(c);
    if (s.resets_by_cause[c] == 0 && !expected_cause(l[1].value, cause))
      continue;
    out.counter("outbound_feed_resets_total",
                "Feed resets delivered (ranges the application must "
                "resync), by cause",
                {{"cause", to_string(cause)}, l[0], l[1]},
                as_double(s.resets_by_cause[c]));
  }
  out.counter("outbound_feed_reconnects_total",
              "WebSocket sessions dialled after the first one", l,
              as_double(s.reconnects));
  out.counter("outbound_feed_peer_timeouts_total",
              "WebSocket sessions closed as a dead peer (keepalive)", l,
              as_double(s.peer_timeouts));
  for (std::size_t r = 0; r < drain_error_reason_count; ++r) {
    // A ledger feed exports every reason from 0; others once seen.
    if (s.drain_errors_by_reason[r] == 0 && l[1].value != "ledger")
      continue;
    out.counter("outbound_feed_drain_errors_total",
                "Replay pages the watcher could not read or use, by reason "
                "(unparseable, over_cap, bad_page, bad_event, anomaly, "
                "stalled)",
                {{"reason", to_string(static_cast<drain_error_reason>(r))},
                 l[0], l[1]},
                as_double(s.drain_errors_by_reason[r]));
  }
  for (std::size_t r = 0; r < frame_error_reason_count; ++r) {
    // An in-frame feed exports every reason from 0; others once seen.
    if (s.unreadable_frames_by_reason[r] == 0 && l[1].value != "catchup"
        && l[1].value != "ephemeral")
      continue;
    out.counter("outbound_feed_unreadable_frames_total",
                "In-frame events (catchup, ephemeral) the watcher could not "
                "read, each delivered as an undeliverable reset, by reason "
                "(unparseable, too_deep, memory_bound, bad_number, "
                "not_an_object, over_cap)",
                {{"reason", to_string(static_cast<frame_error_reason>(r))},
                 l[0], l[1]},
                as_double(s.unreadable_frames_by_reason[r]));
  }
  out.counter("outbound_feed_replay_errors_total",
              "Replay calls that failed (retried on the next tick)", l,
              as_double(s.replay_errors));
  out.counter("outbound_feed_overflows_total",
              "Sessions closed because undelivered in-frame events piled up",
              l, as_double(s.overflows));
  out.counter("outbound_feed_oversized_frames_total",
              "WebSocket messages over ws_max_frame_bytes, discarded", l,
              as_double(s.oversized_frames));
  out.counter("outbound_feed_callback_errors_total",
              "Deliveries (events and resets) the subscriber failed", l,
              as_double(s.event_callback_errors + s.reset_callback_errors));
}

} // namespace

// -- snapshot_collector -------------------------------------------------------

snapshot_collector::snapshot_collector(metrics_limits limits)
  : limits_(limits) {
}

void snapshot_collector::set_hedge_keys(const std::string& service,
                                        std::vector<hedge_key_metrics> keys) {
  std::lock_guard<std::mutex> guard{mtx_};
  hedge_keys_[service] = std::move(keys);
}

void snapshot_collector::set_breakers(
  const std::string& service, std::vector<breaker_key_snapshot> breakers) {
  std::lock_guard<std::mutex> guard{mtx_};
  breakers_[service] = std::move(breakers);
}

void snapshot_collector::set_coalescer(const std::string& service,
                                       const coalesce_stats& s) {
  std::lock_guard<std::mutex> guard{mtx_};
  coalescers_[service] = s;
}

void snapshot_collector::set_feed(const std::string& feed,
                                  const std::string& mode,
                                  const feed_stats& s) {
  std::lock_guard<std::mutex> guard{mtx_};
  auto i = feeds_.find(feed);
  if (i == feeds_.end()) {
    feed_entry e;
    e.labelled = labelled_feeds_ < limits_.max_labelled_feeds;
    if (e.labelled)
      ++labelled_feeds_;
    i = feeds_.emplace(feed, std::move(e)).first;
  }
  i->second.mode = mode;
  i->second.stats = s;
}

void snapshot_collector::set_pool(const std::string& service,
                                  const pool_stats& s) {
  std::lock_guard<std::mutex> guard{mtx_};
  pools_[service] = s;
}

void snapshot_collector::set_retry_budget(const std::string& service,
                                          const retry_budget_stats& s) {
  std::lock_guard<std::mutex> guard{mtx_};
  budgets_[service] = s;
}

void snapshot_collector::remove_retry_budget(const std::string& service) {
  std::lock_guard<std::mutex> guard{mtx_};
  budgets_.erase(service);
  snapshot_seconds_.erase({"client", service});
}

void snapshot_collector::remove_hedging(const std::string& service) {
  std::lock_guard<std::mutex> guard{mtx_};
  hedge_keys_.erase(service);
  breakers_.erase(service);
  snapshot_seconds_.erase({"hedging", service});
}

void snapshot_collector::remove_coalescer(const std::string& service) {
  std::lock_guard<std::mutex> guard{mtx_};
  coalescers_.erase(service);
  snapshot_seconds_.erase({"coalescer", service});
}

void snapshot_collector::remove_feed(const std::string& feed) {
  std::lock_guard<std::mutex> guard{mtx_};
  auto i = feeds_.find(feed);
  if (i == feeds_.end())
    return;
  // A labelled feed's slot stays taken: a later feed never inherits a
  // label that dashboards already show for another one, and the number of
  // label values stays bounded by max_labelled_feeds over the process's
  // life. Aggregated counters are kept so "_other" never decreases.
  if (!i->second.labelled)
    add_feed_counters(retired_other_[i->second.mode], i->second.stats);
  feeds_.erase(i);
  snapshot_seconds_.erase({"feed", feed});
}

void snapshot_collector::remove_pool(const std::string& service) {
  std::lock_guard<std::mutex> guard{mtx_};
  pools_.erase(service);
  snapshot_seconds_.erase({"pool", service});
}

void snapshot_collector::set_sources(const std::string& kind, std::size_t n) {
  std::lock_guard<std::mutex> guard{mtx_};
  sources_[kind] = n;
}

void snapshot_collector::count_poll_error(const std::string& kind) {
  std::lock_guard<std::mutex> guard{mtx_};
  ++poll_errors_[kind];
}

void snapshot_collector::set_snapshot_seconds(const std::string& kind,
                                              const std::string& source,
                                              double seconds) {
  std::lock_guard<std::mutex> guard{mtx_};
  // Feeds past the cap are not labelled one by one here either.
  if (kind == "feed") {
    auto i = feeds_.find(source);
    if (i == feeds_.end() || !i->second.labelled)
      return;
  }
  snapshot_seconds_[{kind, source}] = seconds;
}

namespace {

// -- the family tables -----------------------------------------------------
//
// What each component exports per source, one row per sample: kind, family
// name, help, an optional extra label and how to read the value from the
// component's snapshot. Collect() renders a table once per source with the
// source's labels; the families come out in name order (family_set).

enum class family_kind { counter, gauge };

template <class S>
struct family_row {
  family_kind kind;
  const char* name;
  const char* help;
  double (*value)(const S&);
  /// An extra label of this row, e.g. {"reason", "budget"}; null: none.
  const char* label = nullptr;
  const char* label_value = nullptr;
};

/// `base` with {name, value} inserted in name order (every label list here
/// is kept sorted by name).
label_list with_label(label_list base, const char* name, const char* value) {
  auto at = std::find_if(base.begin(), base.end(),
                         [&](const auto& l) { return l.name > name; });
  base.insert(at, {name, value});
  return base;
}

template <class S, std::size_t N>
void render_rows(family_set& out, const family_row<S> (&rows)[N],
                 const label_list& base, const S& s) {
  for (const auto& r : rows) {
    auto labels = r.label ? with_label(base, r.label, r.label_value) : base;
    if (r.kind == family_kind::counter)
      out.counter(r.name, r.help, std::move(labels), r.value(s));
    else
      out.gauge(r.name, r.help, std::move(labels), r.value(s));
  }
}

constexpr auto counter = family_kind::counter;
constexpr auto gauge = family_kind::gauge;

/// Per hedging key; labels {key, service}.
const family_row<hedge_key_metrics> hedge_key_rows[] = {
  {counter, "outbound_hedge_requests_total",
   "Requests planned by the hedging policy",
   [](const hedge_key_metrics& k) {
     return as_double(k.stats.total_requests);
   }},
  {counter, "outbound_hedge_fired_total",
   "Hedges sent (breakers and budget allowed them)",
   [](const hedge_key_metrics& k) {
     return as_double(k.stats.hedged_requests);
   }},
  {counter, "outbound_hedge_won_total", "Hedged races won by the hedge",
   [](const hedge_key_metrics& k) {
     return as_double(k.stats.hedge_wins);
   }},
  {counter, "outbound_hedge_cancelled_total",
   "Hedged races won by the primary (the hedge was cancelled)",
   [](const hedge_key_metrics& k) {
     return as_double(k.stats.primary_wins);
   }},
  {counter, "outbound_hedge_suppressed_total",
   "Hedges not sent, by reason (budget, breaker)",
   [](const hedge_key_metrics& k) {
     return as_double(k.stats.budget_exhausted);
   },
   "reason", "budget"},
  {counter, "outbound_hedge_suppressed_total",
   "Hedges not sent, by reason (budget, breaker)",
   [](const hedge_key_metrics& k) {
     return as_double(k.stats.circuit_blocked);
   },
   "reason", "breaker"},
  {counter, "outbound_hedge_warmup_requests_total",
   "Requests planned with the warmup delay",
   [](const hedge_key_metrics& k) {
     return as_double(k.stats.warmup_requests);
   }},
  {counter, "outbound_hedge_errors_total", "Finished calls whose winner failed",
   [](const hedge_key_metrics& k) {
     return as_double(k.stats.errors);
   }},
  {gauge, "outbound_hedge_budget_tokens",
   "Hedge tokens in the key's budget bucket",
   [](const hedge_key_metrics& k) {
     return k.tokens;
   }},
  {gauge, "outbound_hedge_delay_seconds",
   "Delay the next request waits before hedging",
   [](const hedge_key_metrics& k) {
     return k.delay;
   }},
};

/// Per breaker; labels {key, scope, service}.
const family_row<breaker_snapshot> breaker_rows[] = {
  {gauge, "outbound_breaker_state",
   "Hedge breaker phase: 0 closed, 1 open, 2 half-open",
   [](const breaker_snapshot& b) {
     return breaker_state_value(b.phase);
   }},
  {counter, "outbound_breaker_opens_total", "Hedge breaker transitions to open",
   [](const breaker_snapshot& b) {
     return as_double(b.opens);
   }},
  {counter, "outbound_breaker_transitions_total",
   "Hedge breaker transitions, by the phase entered",
   [](const breaker_snapshot& b) { return as_double(b.opens); }, "to", "open"},
  {counter, "outbound_breaker_transitions_total",
   "Hedge breaker transitions, by the phase entered",
   [](const breaker_snapshot& b) { return as_double(b.half_opens); }, "to",
   "half_open"},
  {counter, "outbound_breaker_transitions_total",
   "Hedge breaker transitions, by the phase entered",
   [](const breaker_snapshot& b) { return as_double(b.closes); }, "to",
   "closed"},
  {gauge, "outbound_breaker_window_samples",
   "Calls in the breaker's error-rate window",
   [](const breaker_snapshot& b) {
     return as_double(b.samples);
   }},
  {gauge, "outbound_breaker_window_failures",
   "Failed calls in the breaker's error-rate window",
   [](const breaker_snapshot& b) {
     return as_double(b.failures);
   }},
};

/// Per coalescing driver; labels {service} (and its batch-size histogram).
const family_row<coalesce_stats> coalescer_rows[] = {
  {counter, "outbound_coalesce_calls_total",
   "Coalesced calls answered, by outcome",
   [](const coalesce_stats& s) {
     return as_double(s.calls >= s.calls_failed ? s.calls - s.calls_failed : 0);
   },
   "outcome", "ok"},
  {counter, "outbound_coalesce_calls_total",
   "Coalesced calls answered, by outcome",
   [](const coalesce_stats& s) { return as_double(s.calls_failed); }, "outcome",
   "error"},
  {counter, "outbound_coalesce_waiters_total", "Callers that joined a batch",
   [](const coalesce_stats& s) {
     return as_double(s.batches.joined);
   }},
  {counter, "outbound_coalesce_rpcs_total", "Batched RPCs started",
   [](const coalesce_stats& s) {
     return as_double(s.batches.rpcs);
   }},
  {counter, "outbound_coalesce_attempts_total",
   "Exchanges sent to the oracle (each discovery attempt)",
   [](const coalesce_stats& s) {
     return as_double(s.attempts);
   }},
  {counter, "outbound_coalesce_rejected_total",
   "Callers refused at entry, by reason",
   [](const coalesce_stats& s) {
     return as_double(s.batches.rejected_backpressure);
   },
   "reason", "backpressure"},
  {counter, "outbound_coalesce_rejected_total",
   "Callers refused at entry, by reason",
   [](const coalesce_stats& s) {
     return as_double(s.batches.rejected_invalid);
   },
   "reason", "invalid"},
  {counter, "outbound_coalesce_cold_starts_total",
   "Waiters that found their group idle, by what the adaptive cold start "
   "decided: sent at once, or after the flush window",
   [](const coalesce_stats& s) {
     return as_double(s.batches.cold_starts_at_once);
   },
   "decision", "at_once"},
  {counter, "outbound_coalesce_cold_starts_total",
   "Waiters that found their group idle, by what the adaptive cold start "
   "decided: sent at once, or after the flush window",
   [](const coalesce_stats& s) {
     return as_double(s.batches.cold_starts_window);
   },
   "decision", "window"},
  {counter, "outbound_coalesce_pipelined_batches_total",
   "Batches sent while other RPCs of their group were in flight "
   "(coalesce.max_rpcs_in_flight, coalesce.fill_free_slots)",
   [](const coalesce_stats& s) {
     return as_double(s.batches.pipelined);
   }},
  {counter, "outbound_coalesce_cancelled_total",
   "Waiters that left before their answer (own timeout)",
   [](const coalesce_stats& s) {
     return as_double(s.batches.cancelled);
   }},
  {counter, "outbound_coalesce_redirects_total",
   "421 answers followed to a hinted leader",
   [](const coalesce_stats& s) {
     return as_double(s.redirects);
   }},
  {counter, "outbound_coalesce_leader_changes_total",
   "Times the cached leader changed endpoint",
   [](const coalesce_stats& s) {
     return as_double(s.leader_changes);
   }},
  {counter, "outbound_coalesce_errors_total", "RPCs ended by a discovery error",
   [](const coalesce_stats& s) {
     return as_double(s.rpc_errors);
   }},
  {counter, "outbound_coalesce_protocol_violations_total",
   "Oracle answers that failed validation",
   [](const coalesce_stats& s) {
     return as_double(s.batches.protocol_violations);
   }},
  {counter, "outbound_coalesce_uncertain_total",
   "Sequence RPCs whose outcome is uncertain",
   [](const coalesce_stats& s) {
     return as_double(s.uncertain);
   }},
  {gauge, "outbound_coalesce_waiters_held", "Waiters held now",
   [](const coalesce_stats& s) {
     return as_double(s.held);
   }},
  {gauge, "outbound_coalesce_rpcs_in_flight", "RPCs in flight now",
   [](const coalesce_stats& s) {
     return as_double(s.in_flight);
   }},
  {gauge, "outbound_coalesce_leader_known", "1 when a fresh leader is cached",
   [](const coalesce_stats& s) {
     return s.leader_endpoint.empty() ? 0.0 : 1.0;
   }},
  {gauge, "outbound_coalesce_transports",
   "Per-endpoint connection pools held now",
   [](const coalesce_stats& s) {
     return as_double(s.transports);
   }},
};

/// Per connection pool; labels {service}.
const family_row<pool_stats> pool_rows[] = {
  {counter, "outbound_pool_dialled_total", "Connections dialled",
   [](const pool_stats& s) {
     return as_double(s.dialled);
   }},
  {counter, "outbound_pool_reused_total",
   "Exchanges run on a pooled idle connection",
   [](const pool_stats& s) {
     return as_double(s.reused);
   }},
  {counter, "outbound_pool_stale_discarded_total",
   "Idle connections found stale and discarded",
   [](const pool_stats& s) {
     return as_double(s.stale_discarded);
   }},
  {counter, "outbound_pool_cancelled_total",
   "Exchanges cancelled by their caller",
   [](const pool_stats& s) {
     return as_double(s.cancelled);
   }},
  {counter, "outbound_pool_idle_expired_total",
   "Idle connections beyond max_idle_per_endpoint closed after "
   "surplus_idle_time unused",
   [](const pool_stats& s) {
     return as_double(s.idle_expired);
   }},
  {gauge, "outbound_pool_idle_connections", "Idle connections now",
   [](const pool_stats& s) {
     return as_double(s.idle);
   }},
  {gauge, "outbound_pool_in_flight", "Exchanges in flight now",
   [](const pool_stats& s) {
     return as_double(s.in_flight);
   }},
  {gauge, "outbound_pool_pending",
   "Exchanges queued now, waiting for a connection (endpoint at "
   "max_connections_per_endpoint)",
   [](const pool_stats& s) {
     return as_double(s.pending);
   }},
  {counter, "outbound_pool_waited_total",
   "Exchanges that waited for a connection",
   [](const pool_stats& s) {
     return as_double(s.waited);
   }},
  {counter, "outbound_pool_overflowed_total",
   "Exchanges refused because the queue held max_pending_requests",
   [](const pool_stats& s) {
     return as_double(s.overflowed);
   }},
};

/// The feeds: labelled ones one by one ({feed, mode}), the rest summed per
/// mode under the "_other" label, starting from `other` (the counters of
/// retired unlabelled feeds). `Entries` maps a feed name to its entry
/// (mode, stats, labelled).
template <class Entries>
void render_feeds(family_set& out, const Entries& feeds,
                  std::map<std::string, feed_stats> other) {
  std::map<std::string, uint64_t> other_connected;
  std::map<std::string, int64_t> other_lag;
  std::map<std::pair<std::string, bool>, uint64_t> watchers;
  for (auto& [name, e] : feeds) {
    ++watchers[{e.mode, e.stats.connected}];
    if (!e.labelled) {
      add_feed_counters(other[e.mode], e.stats);
      other_connected[e.mode] += e.stats.connected ? 1 : 0;
      if (auto lag = feed_lag(e.stats)) {
        auto& worst = other_lag.emplace(e.mode, 0).first->second;
        worst = std::max(worst, *lag);
      }
      continue;
    }
    label_list l{{"feed", name}, {"mode", e.mode}};
    render_feed(out, l, e.stats);
    out.gauge("outbound_feed_connected",
              "1 when the feed's session is open (for _other: how many)", l,
              e.stats.connected ? 1.0 : 0.0);
    auto position = e.stats.mode == feed_mode::ledger || !e.stats.last_seq
                      ? e.stats.cursor
                      : *e.stats.last_seq;
    out.gauge("outbound_feed_position",
              "Ledger cursor, else the last in-frame seq received", l,
              static_cast<double>(position));
    if (auto lag = feed_lag(e.stats))
      out.gauge("outbound_feed_lag_events",
                "Ledger events the hub announced that are not delivered yet "
                "(for _other: the worst feed)",
                l, static_cast<double>(*lag));
  }
  for (auto& [mode, s] : other) {
    label_list l{{"feed", other_feeds_label}, {"mode", mode}};
    render_feed(out, l, s);
    out.gauge("outbound_feed_connected",
              "1 when the feed's session is open (for _other: how many)", l,
              as_double(other_connected[mode]));
    if (auto i = other_lag.find(mode); i != other_lag.end())
      out.gauge("outbound_feed_lag_events",
                "Ledger events the hub announced that are not delivered yet "
                "(for _other: the worst feed)",
                l, static_cast<double>(i->second));
  }
  for (auto& [key, n] : watchers)
    out.gauge("outbound_feeds", "Feed watchers, by mode and session state",
              {{"mode", key.first},
               {"state", key.second ? "connected" : "disconnected"}},
              as_double(n));
}

} // namespace

std::vector<prometheus::MetricFamily> snapshot_collector::Collect() const {
  std::lock_guard<std::mutex> guard{mtx_};
  family_set out;
  for (auto& [service, keys] : hedge_keys_)
    for (auto& k : keys)
      render_rows(out, hedge_key_rows, {{"key", k.key}, {"service", service}},
                  k);
  for (auto& [service, list] : breakers_)
    for (auto& b : list)
      render_rows(
        out, breaker_rows,
        {{"key", b.key}, {"scope", to_string(b.scope)}, {"service", service}},
        b.snapshot);
  for (auto& [service, s] : coalescers_) {
    label_list l{{"service", service}};
    render_rows(out, coalescer_rows, l, s);
    out.histogram("outbound_coalesce_batch_size",
                  "Waiters per batched RPC sent", l, coalesce_batch_bounds,
                  s.batch_sizes, as_double(s.batch_size_sum));
  }
  render_feeds(out, feeds_, retired_other_);
  for (auto& [service, s] : pools_)
    render_rows(out, pool_rows, {{"service", service}}, s);
  for (auto& [service, s] : budgets_) {
    label_list l{{"service", service}};
    out.counter("outbound_retry_budget_deposits_total",
                "Primary requests paid into the retry budget (one per call)", l,
                as_double(s.deposits));
    for (auto k : {extra_kind::retry, extra_kind::hedge}) {
      label_list lk{{"kind", to_string(k)}, {"service", service}};
      auto i = static_cast<std::size_t>(k);
      out.counter("outbound_retry_budget_withdrawals_total",
                  "Retries and hedges the retry budget paid for", lk,
                  as_double(s.withdrawals[i]));
      out.counter("outbound_retry_budget_refusals_total",
                  "Retries and hedges the retry budget refused (not made)", lk,
                  as_double(s.refusals[i]));
      out.counter("outbound_retry_budget_returned_total",
                  "Withdrawals given back: retries and hedges that never "
                  "left (the pool refused them, or they were not sent)",
                  lk, as_double(s.returned[i]));
    }
    out.gauge("outbound_retry_budget_balance",
              "Extra attempts the retry budget would grant now", l,
              as_double(s.balance));
    out.gauge("outbound_retry_budget_enabled",
              "1 when the retry budget refuses retries and hedges", l,
              s.enabled ? 1.0 : 0.0);
  }
  // The poller.
  for (auto& [kind, n] : sources_)
    out.gauge("outbound_metrics_sources",
              "Metrics sources registered and alive, by kind",
              {{"kind", kind}}, as_double(n));
  for (auto& [kind, n] : poll_errors_)
    out.counter("outbound_metrics_poll_errors_total",
                "Snapshot requests that failed or timed out, by kind",
                {{"kind", kind}}, as_double(n));
  for (auto& [key, secs] : snapshot_seconds_)
    out.gauge("outbound_metrics_snapshot_seconds",
              "Round trip of the source's last snapshot (mailbox wait "
              "included)",
              {{"kind", key.first}, {"source", key.second}}, secs);
  return out.take();
}

// -- metrics_registry ---------------------------------------------------------

metrics_registry::metrics_registry(metrics_limits limits)
  : registry_(std::make_shared<prometheus::Registry>()),
    collector_(std::make_shared<snapshot_collector>(limits)) {
}

std::shared_ptr<client_metrics>
metrics_registry::client(const std::string& service,
                         prometheus::Histogram::BucketBoundaries buckets) {
  std::lock_guard<std::mutex> guard{mtx_};
  auto& slot = clients_[service];
  if (!slot) {
    // The client metrics hold references into the registry's families: the
    // handle keeps the registry alive (members destroyed in reverse order).
    struct holder {
      holder(std::shared_ptr<prometheus::Registry> r, const std::string& svc,
             prometheus::Histogram::BucketBoundaries b)
        : registry(std::move(r)), metrics(*registry, svc, std::move(b)) {
      }
      std::shared_ptr<prometheus::Registry> registry;
      client_metrics metrics;
    };
    auto h = std::make_shared<holder>(registry_, service, std::move(buckets));
    slot = std::shared_ptr<client_metrics>(h, &h->metrics);
  }
  return slot;
}

std::vector<std::weak_ptr<prometheus::Collectable>>
metrics_registry::collectables() const {
  return {registry_, collector_};
}

std::string metrics_registry::serialize() const {
  std::vector<prometheus::MetricFamily> all;
  for (auto& weak : collectables())
    if (auto c = weak.lock())
      for (auto& f : c->Collect())
        all.push_back(std::move(f));
  prometheus::TextSerializer s;
  std::ostringstream os;
  s.Serialize(os, all);
  return os.str();
}

} // namespace metrics
} // namespace outbound
