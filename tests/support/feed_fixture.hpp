#pragma once

// What the feed watcher's real-time tests share (tests/integration/actors/
// feed/): a collector of one watcher's deliveries that a test thread can wait
// on, the watcher probes (stats, polling the stats, stop) a test makes from
// outside the actor system, and a fixture owning the actor system, the io
// runner, the service client and the WebSocket connector of its watchers.

#include "actors/client/service_client.hpp"
#include "actors/feed/feed_messages.hpp"
#include "actors/feed/feed_watcher.hpp"
#include "actors/messages.hpp"
#include "protocol/io_runner.hpp"
#include "protocol/ws_session.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace outbound::testing {

/// Records every delivery of one watcher (its callbacks run on CAF threads;
/// the waits run on the test thread).
struct feed_collector {
  std::mutex mu;
  std::condition_variable cv;
  /// Ledger ids or in-frame seqs, in delivery order (-1: neither).
  std::vector<int64_t> keys;
  std::vector<feed_reset> resets;
  /// Both, in delivery order: an event is its key, a reset -1 - its index
  /// in `resets`.
  std::vector<int64_t> trail;

  feed_callbacks callbacks(bool detached = true) {
    feed_callbacks cbs;
    cbs.detached = detached;
    cbs.on_event = [this](const feed_event& e) {
      std::lock_guard<std::mutex> lock{mu};
      keys.push_back(e.id ? *e.id : (e.seq ? *e.seq : -1));
      trail.push_back(keys.back());
      cv.notify_all();
    };
    cbs.on_reset = [this](const feed_reset& r) {
      std::lock_guard<std::mutex> lock{mu};
      resets.push_back(r);
      trail.push_back(-1 - static_cast<int64_t>(resets.size() - 1));
      cv.notify_all();
    };
    return cbs;
  }

  /// Waits until event `key` was delivered; true if it was in time.
  bool wait_key(int64_t key,
                std::chrono::milliseconds t = std::chrono::seconds{5}) {
    std::unique_lock<std::mutex> lock{mu};
    return cv.wait_for(lock, t, [&] {
      return std::find(keys.begin(), keys.end(), key) != keys.end();
    });
  }

  /// Waits until at least `n` events arrived; true if they did in time.
  bool wait_events(std::size_t n,
                   std::chrono::milliseconds t = std::chrono::seconds{5}) {
    std::unique_lock<std::mutex> lock{mu};
    return cv.wait_for(lock, t, [&] { return keys.size() >= n; });
  }

  /// Waits until at least `n` resets arrived; true if they did in time.
  bool wait_resets(std::size_t n,
                   std::chrono::milliseconds t = std::chrono::seconds{5}) {
    std::unique_lock<std::mutex> lock{mu};
    return cv.wait_for(lock, t, [&] { return resets.size() >= n; });
  }

  std::vector<int64_t> snapshot() {
    std::lock_guard<std::mutex> lock{mu};
    return keys;
  }

  std::size_t reset_count() {
    std::lock_guard<std::mutex> lock{mu};
    return resets.size();
  }

  std::vector<reset_cause> causes() {
    std::lock_guard<std::mutex> lock{mu};
    std::vector<reset_cause> out;
    for (auto& r : resets)
      out.push_back(r.cause);
    return out;
  }
};

/// from, from + 1, ..., to.
inline std::vector<int64_t> key_range(int64_t from, int64_t to) {
  std::vector<int64_t> v;
  for (auto i = from; i <= to; ++i)
    v.push_back(i);
  return v;
}

/// The watcher's stats (a failure when it does not answer within 5 s).
inline feed_stats stats_of(caf::actor_system& sys,
                           const feed_watcher_actor& w) {
  caf::scoped_actor self{sys};
  feed_stats out;
  self->request(w, std::chrono::seconds{5}, stats_atom_v)
    .receive([&](const feed_stats& s) { out = s; },
             [&](const caf::error& e) {
               ADD_FAILURE() << "stats: " << caf::to_string(e);
             });
  return out;
}

/// Polls the watcher's stats every 20 ms until `pred` holds; true if it did
/// within `timeout`.
inline bool wait_stats(caf::actor_system& sys, const feed_watcher_actor& w,
                       const std::function<bool(const feed_stats&)>& pred,
                       std::chrono::milliseconds timeout) {
  auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    if (pred(stats_of(sys, w)))
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds{20});
  }
  return pred(stats_of(sys, w));
}

/// Stops the watcher (waits at most 5 s for its answer); how long the stop
/// took.
inline std::chrono::milliseconds stop_watcher(caf::actor_system& sys,
                                              const feed_watcher_actor& w) {
  caf::scoped_actor self{sys};
  auto t0 = std::chrono::steady_clock::now();
  self->request(w, std::chrono::seconds{5}, stop_atom_v)
    .receive([](const feed_stats&) {}, [](const caf::error&) {});
  return std::chrono::duration_cast<std::chrono::milliseconds>(
    std::chrono::steady_clock::now() - t0);
}

/// A real actor system (CAF's default scheduler) with one io thread; the
/// watchers a test spawns go into `watchers_` and are stopped, in order,
/// before the system ends.
class feed_fixture : public ::testing::Test {
protected:
  void SetUp() override {
    cfg_ = std::make_unique<caf::actor_system_config>();
    cfg_->add_message_types<caf::id_block::outbound>();
    sys_ = std::make_unique<caf::actor_system>(*cfg_);
    io_ = std::make_shared<io_runner>(1);
  }

  void TearDown() override {
    for (auto& w : watchers_)
      stop(w);
    watchers_.clear();
    client_ = nullptr;
    sys_->await_all_actors_done();
    after_actors_done();
    sys_.reset();
    cfg_.reset();
    connector_.reset();
    io_.reset();
  }

  /// Runs once every actor has ended, before the system goes (a test's
  /// servers stop here).
  virtual void after_actors_done() {
  }

  feed_stats stats(const feed_watcher_actor& w) {
    return stats_of(*sys_, w);
  }

  /// Polls the stats until `pred` holds; true if it did within `timeout`.
  bool wait_stats(const feed_watcher_actor& w,
                  const std::function<bool(const feed_stats&)>& pred,
                  std::chrono::milliseconds timeout = std::chrono::seconds{5}) {
    return testing::wait_stats(*sys_, w, pred, timeout);
  }

  /// Stops `w`; returns how long the stop took.
  std::chrono::milliseconds stop(const feed_watcher_actor& w) {
    return stop_watcher(*sys_, w);
  }

  std::unique_ptr<caf::actor_system_config> cfg_;
  std::unique_ptr<caf::actor_system> sys_;
  std::shared_ptr<io_runner> io_;
  service_client_actor client_;
  std::shared_ptr<ws_connector> connector_;
  std::vector<feed_watcher_actor> watchers_;
};

} // namespace outbound::testing
