#include "actors/hedge/detail/hedge_actors.hpp"

#include "actors/handler_guard.hpp"
#include "config/config_error.hpp"

#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <algorithm>
#include <optional>
#include <unordered_map>
#include <vector>

namespace outbound {
inline namespace hedge {

namespace {

struct endpoint_stats_actor_state {
  std::optional<endpoint_stats_state> stats;
  /// Where the snapshot goes when the actor stops (empty: nowhere).
  std::string save_file;
  /// The time of the last plan or observation: the snapshot at the stop is
  /// taken as of then.
  hedge_time last_now{};

  endpoint_stats_actor_state() = default;
  endpoint_stats_actor_state(const endpoint_stats_actor_state&) = delete;
  endpoint_stats_actor_state& operator=(const endpoint_stats_actor_state&)
    = delete;

  // CAF 0.17 destroys a stateful actor's state when the actor stops
  // (stateful_actor::on_exit), on the thread that stops it: the last
  // chance to save what the sketches learned.
  ~endpoint_stats_actor_state() {
    if (save_file.empty() || !stats)
      return;
    try {
      write_hedge_snapshot_file(stats->export_snapshot(last_now), save_file);
    } catch (...) {
      // Nothing to report to: the next start is cold.
    }
  }

  std::vector<hedge_hook_actor> subscribers;
  /// Granted, unsettled tokens per owner (hedge_token_request::owner): the
  /// keys, one entry per token. An owner is gone from the map once it has
  /// nothing on lease.
  std::unordered_map<uint64_t, std::vector<std::string>> leases;

  /// Takes one token of `key` off `owner`'s lease; false if none was there.
  bool settle_lease(uint64_t owner, const std::string& key) {
    auto i = leases.find(owner);
    if (i == leases.end())
      return false;
    auto& keys = i->second;
    auto k = std::find(keys.begin(), keys.end(), key);
    if (k == keys.end())
      return false;
    keys.erase(k);
    if (keys.empty())
      leases.erase(i);
    return true;
  }
};

using self_ptr
  = endpoint_stats_impl_actor::stateful_pointer<endpoint_stats_actor_state>;

// Over 80 lines on purpose: the actor's behavior, one short handler per
// message of its interface; the work is in the functions above.
endpoint_stats_impl_actor::behavior_type
endpoint_stats_impl(self_ptr self, hedge_config cfg,
                    endpoint_stats_persistence persistence) {
  self->state.stats.emplace(cfg);
  self->state.last_now = self->clock().now();
  if (persistence.initial) {
    // Checked before the spawn (check_hedge_snapshot): cannot throw here
    // but for an allocation, and then the actor starts cold.
    guarded_void([&] {
      self->state.stats->import_snapshot(*persistence.initial,
                                         self->state.last_now);
    });
  }
  self->state.save_file = std::move(persistence.save_file);
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& subs = self->state.subscribers;
    subs.erase(std::remove_if(subs.begin(), subs.end(),
                              [&](const hedge_hook_actor& s) {
                                return s.address() == dm.source;
                              }),
               subs.end());
  });
  // Every handler is guarded (actors/handler_guard.hpp): a key's state can
  // throw on a configuration it cannot hold (e.g. a zero sketch window in a
  // per-call config) or on allocation; the requester gets an error, the
  // statistics of every other key stay, and the actor serves the next call.
  static const std::string where = "endpoint stats";
  return {
    [self](hedge_plan_request& r) {
      return guarded_result(where, [&] {
        self->state.last_now = self->clock().now();
        return self->state.stats->plan(r.key, r.config, self->state.last_now);
      });
    },
    [self](hedge_token_request& r) {
      return guarded_result(where, [&] {
        // Room on the lease first: nothing may throw between taking the
        // token and recording it.
        std::vector<std::string>* lease = nullptr;
        if (r.owner != 0) {
          lease = &self->state.leases[r.owner];
          lease->reserve(lease->size() + 1);
        }
        auto granted
          = self->state.stats->try_take_token(r.key, self->clock().now());
        if (lease) {
          if (granted)
            lease->push_back(std::move(r.key)); // no throw: reserved
          else if (lease->empty())
            self->state.leases.erase(r.owner);
        }
        return granted;
      });
    },
    [self](hedge_token_outcome& o) {
      guarded_void([&] {
        if (o.owner != 0)
          self->state.settle_lease(o.owner, o.key);
        if (!o.sent) {
          self->state.stats->return_token(o.key);
          return;
        }
        self->state.stats->hedge_sent(o.key);
        for (auto& s : self->state.subscribers)
          self->send(s, hedge_fired{o.key});
      });
    },
    [self](hedge_token_abandon& a) {
      guarded_void([&] {
        auto i = self->state.leases.find(a.owner);
        if (i == self->state.leases.end())
          return;
        auto& keys = i->second;
        while (!keys.empty()) {
          self->state.stats->return_token(keys.back());
          keys.pop_back();
        }
        self->state.leases.erase(i);
      });
    },
    [self](hedge_observation& o) {
      guarded_void([&] {
        self->state.last_now = self->clock().now();
        self->state.stats->observe(o.key, o.latency, o.health,
                                   self->state.last_now);
      });
    },
    [self](hedge_race_result& r) {
      guarded_void([&] {
        self->state.stats->record_race(r.key, r.hedged, r.hedge_won);
      });
    },
    [self](hedge_circuit_blocked& b) {
      guarded_void([&] { self->state.stats->count_circuit_blocked(b.key); });
    },
    [self](latency_quantile_request& r) {
      return guarded_result(where, [&] {
        return latency_quantile_reply{self->state.stats->latency_quantile(
          r.key, r.q, self->clock().now())};
      });
    },
    [self](hedge_stats_request& r) {
      return guarded_result(where, [&] {
        return hedge_stats_reply{self->state.stats->snapshot(r.key)};
      });
    },
    [self](hedge_global_stats_request&) {
      return guarded_result(where,
                            [&] { return self->state.stats->global_snapshot(); });
    },
    [self](hedge_all_stats_request&) {
      return guarded_result(where, [&] {
        return hedge_all_stats_reply{self->state.stats->all_snapshots()};
      });
    },
    [self](hedge_metrics_request&) {
      return guarded_result(where, [&] {
        return hedge_metrics_reply{
          self->state.stats->all_metrics(self->clock().now())};
      });
    },
    [self](hedge_snapshot_export_request&) {
      return guarded_result(where, [&] {
        return self->state.stats->export_snapshot(self->clock().now());
      });
    },
    [self](hedge_snapshot_import& m) {
      hedge_snapshot_import_result r;
      try {
        r.keys
          = self->state.stats->import_snapshot(m.snapshot, self->clock().now());
      } catch (const config_error& e) {
        r.error_field = e.field();
        r.error = e.what();
      } catch (const std::exception& e) {
        r.error_field = "snapshot";
        r.error = std::string{"snapshot: "} + e.what();
      } catch (...) {
        r.error_field = "snapshot";
        r.error = "snapshot: unknown exception";
      }
      return r;
    },
    [self](hedge_subscribe& s) {
      guarded_void([&] {
        if (!s.subscriber)
          return;
        self->monitor(s.subscriber);
        self->state.subscribers.push_back(std::move(s.subscriber));
      });
    },
  };
}

} // namespace

endpoint_stats_impl_actor
spawn_endpoint_stats(caf::actor_system& sys, const hedge_config& cfg,
                     endpoint_stats_persistence persistence) {
  cfg.validate();
  return sys.spawn(endpoint_stats_impl, cfg, std::move(persistence));
}

void check_hedge_snapshot(const hedge_config& cfg, const hedge_snapshot& s) {
  endpoint_stats_state scratch{cfg};
  scratch.import_snapshot(s, hedge_time{});
}

} // namespace hedge
} // namespace outbound
