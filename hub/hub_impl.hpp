#pragma once

// Private to hub/*.cpp: the hub's server state shared by the listener and
// HTTP sessions (hub_http.cpp), the WebSocket sessions (hub_ws.cpp) and the
// routing / fan-out logic (hub.cpp). Pulls in Asio, so no public header may
// include it. Beast's HTTP and WebSocket types stay in their own TUs: this
// header only declares the two session entry points.
//
// Threading: every socket lives on its own strand of `ioc`; `mu` guards the
// pure state, the rng and the session registries. A publish fans out while
// holding `mu`, so every subscriber sees frames in seq order and a subscribe
// (hello + catch-up replay + registration) is atomic with respect to
// publishes: subscribe-before-snapshot without a gap or a duplicate.

#include "hub/hub.hpp"
#include "hub/hub_state.hpp"
#include "hub/latency_profile.hpp"
#include "hub/ledger_file.hpp"
#include "hub/subject.hpp"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

namespace outbound {

/// A WebSocket connection as the hub's fan-out sees it (hub_ws.cpp). The
/// push_* functions are called with `hub::impl::mu` held, from any thread;
/// they only queue and post to the session's strand.
class hub_ws_session {
public:
  virtual ~hub_ws_session() = default;

  /// Queues the answer to the subscribe (hello, catch-up replay) ahead of
  /// any live frame, and applies the plan's post-hello faults.
  virtual void push_hello(const subscribe_outcome& out) = 0;

  /// Queues an event frame (catchup/ephemeral). Frames with
  /// seq <= the session's boundary or a non-matching subject are skipped by
  /// the caller; overflow of the queue closes the session with 1013.
  virtual void push_event(const std::shared_ptr<const std::string>& frame) = 0;

  /// Raises the pending coalesced wake to at least `cursor` (ledger).
  virtual void push_wake(int64_t cursor) = 0;

  /// Queues explicit, uncoalesced wake frames (a wake script).
  virtual void push_wakes(const std::vector<int64_t>& cursors) = 0;

  /// Closes with a close frame carrying `code` (restart 1012), or at once
  /// without a handshake when `code` is 0 (hub stop, drop): the socket is
  /// closed even while a write is in flight.
  virtual void shutdown(uint16_t code) = 0;

  /// Stops feeding and reading at once; TCP stays open (admin silence).
  virtual void go_silent() = 0;

  /// Set at subscribe (under `mu`): tier, prefixes, boundary.
  hub_tier tier = hub_tier::ledger;
  std::vector<std::string> prefixes;
  int64_t boundary = 0;
};

/// The subscribed sessions of one tier: they own the sessions and index them
/// by their prefixes for the fan-out (prefix_index, hub/subject.hpp).
class tier_subscribers {
public:
  using set_type = std::unordered_set<std::shared_ptr<hub_ws_session>>;

  /// Adds `s` under its current `prefixes` (re-indexes it when present).
  void insert(const std::shared_ptr<hub_ws_session>& s) {
    set_.insert(s);
    index_.insert(s.get(), s->prefixes);
  }

  /// Removes `s`; 1 when it was there, else 0.
  std::size_t erase(const std::shared_ptr<hub_ws_session>& s) {
    index_.erase(s.get());
    return set_.erase(s);
  }

  /// Removes the session at `s`; 1 when it was there, else 0.
  std::size_t erase(const hub_ws_session* s) {
    // A non-owning key (the aliasing constructor over an empty owner):
    // the set hashes and compares shared_ptrs by get().
    return erase(std::shared_ptr<hub_ws_session>{
      std::shared_ptr<void>{}, const_cast<hub_ws_session*>(s)});
  }

  void clear() {
    index_.clear();
    set_.clear();
  }

  std::size_t size() const {
    return set_.size();
  }

  set_type::const_iterator begin() const {
    return set_.begin();
  }

  set_type::const_iterator end() const {
    return set_.end();
  }

  /// Calls `f(hub_ws_session*)` for each session following `subject`.
  template <class F>
  void for_each_match(std::string_view subject, F&& f) const {
    index_.for_each_match(subject, std::forward<F>(f));
  }

private:
  set_type set_;
  prefix_index<hub_ws_session> index_;
};

/// An HTTP connection, for closing at stop (hub_http.cpp).
class hub_http_session {
public:
  virtual ~hub_http_session() = default;
  /// Closes the socket on the session's strand.
  virtual void shutdown() = 0;
};

/// Counters of the server side (shown in `GET /admin/state`).
struct hub_server_counters {
  std::atomic<uint64_t> http_requests{0};
  std::atomic<uint64_t> ws_upgrades{0};
  std::atomic<uint64_t> accept_then_close{0};
  std::atomic<uint64_t> silenced{0};
  std::atomic<uint64_t> oversized_sent{0};
  std::atomic<uint64_t> overflow_closes{0};
  std::atomic<uint64_t> wakes_sent{0};
  std::atomic<uint64_t> events_sent{0};
  std::atomic<uint64_t> frames_sent{0};
  /// Connections hard-closed by a drop (`POST /admin/drop`, `drop_now`,
  /// `drop_every`).
  std::atomic<uint64_t> dropped{0};
  /// Drops performed (each closes zero or more connections).
  std::atomic<uint64_t> drops{0};
  /// Requests of the latency-profile routes (/fast, /slow, /flaky,
  /// /lognormal, /steady): a benchmark's backend-side request count.
  std::atomic<uint64_t> profile_requests{0};
};

struct hub::impl {
  using work_guard_type
    = boost::asio::executor_work_guard<boost::asio::io_context::executor_type>;

  explicit impl(hub_config c);
  ~impl();

  // -- lifecycle (hub.cpp) ---------------------------------------------------

  void start();
  void stop();

  // -- requests (hub.cpp; called from session strands) ------------------------

  /// An HTTP answer: status and JSON body.
  struct http_answer {
    int status = 200;
    std::string body;
    /// Send the answer this long after the request was read (the latency
    /// profiles); 0: at once.
    std::chrono::nanoseconds delay{0};
    /// Value of a `leader-hint` header (oracle 421), empty for none.
    std::string leader_hint = {};
    /// Close the connection without answering, after `delay` (an oracle
    /// node in mode stall or commit_no_reply); a client that closes first
    /// ends the wait.
    bool close_without_answer = false;
  };

  /// Routes one plain HTTP request that arrived on the port of oracle node
  /// `node` (0 for the hub's own port), through the route table of hub.cpp:
  /// a known path with a method it does not answer is a 405.
  http_answer handle_http(const std::string& method, const std::string& target,
                          const std::string& body, std::size_t node,
                          const std::string& idempotency_key = {});

  /// One routed HTTP request, as a route's handler sees it.
  struct http_call {
    const std::string& method;
    const hub_target& target;
    const std::string& body;
    std::size_t node;
    /// The request's Idempotency-Key header (empty: none).
    const std::string& idempotency_key;
  };

  // The route handlers (hub.cpp's route table names each one's path and
  // methods).
  http_answer http_events(const http_call& c);
  http_answer http_cursor(const http_call& c);
  http_answer http_faults(const http_call& c);
  http_answer http_restart(const http_call& c);
  http_answer http_wakes(const http_call& c);
  http_answer http_drop(const http_call& c);
  http_answer http_state(const http_call& c);
  http_answer http_healthz(const http_call& c);
  http_answer http_oracle_op(const http_call& c);
  http_answer http_oracle_admin(const http_call& c);
  /// Any method: a test can show that a slow POST is never hedged.
  http_answer http_latency_profile(latency_profile_kind kind,
                                   const http_call& c);

  /// Answers `POST /v1/ts` and `POST /v1/seq` at `node`.
  http_answer oracle_request(std::size_t node, oracle_op op,
                             const std::string& body);

  /// The tier served on a WebSocket path, or nullopt (404).
  std::optional<hub_tier> ws_tier(const std::string& path) const;

  /// A new upgraded connection: its fault plan; registers it for stop().
  connection_plan on_ws_open(const std::shared_ptr<hub_ws_session>& s);

  /// Answers a subscribe: registers `s` in its tier (or apart, when its plan
  /// goes silent or breaks the framing), fills tier/prefixes/boundary and
  /// queues hello + catch-up replay with s->push_hello() while holding `mu`.
  /// Called on the session's strand.
  void on_subscribe(const std::shared_ptr<hub_ws_session>& s,
                                 hub_tier tier, const subscribe_request& req,
                                 const connection_plan& plan);

  /// Forgets `s` (closed, silent or errored).
  void on_ws_close(const hub_ws_session* s);

  /// Moves `s` out of the fan-out (it went silent or broke its framing); it
  /// stays registered for stop().
  void on_ws_detach(const std::shared_ptr<hub_ws_session>& s);

  /// Registers an HTTP session for stop().
  void on_http_open(const std::shared_ptr<hub_http_session>& s);

  /// Publish with fan-out (HTTP handler and hub::publish).
  publish_outcome publish(const publish_input& in);
  /// publish() with `mu` held by the caller.
  publish_outcome publish_locked(const publish_input& in, double ts);

  /// Restart with fan-out of the closes; returns the new epoch.
  std::string restart();

  /// Applies an admin patch (knobs, retention, floor, seed, silence_now).
  std::optional<std::string> apply_faults(const std::string& body);

  /// The `GET /admin/state` body.
  std::string state_json();

  /// Sends wakes now to every ledger connection (`POST /admin/wakes`).
  void emit_wakes(const std::vector<int64_t>& cursors);

  /// Hard-closes (TCP closed, no close frame) every subscribed WebSocket
  /// connection of `tier`, or when nullopt every WebSocket connection of the
  /// hub (silent, detached and not yet subscribed ones included); returns
  /// how many (`POST /admin/drop`, the `drop_now` patch key).
  std::size_t drop_connections(std::optional<hub_tier> tier);

  // -- state -------------------------------------------------------------------

  hub_config cfg;
  std::mutex mu; // guards everything down to `stopping`
  hub_state state;
  /// The ledger's file (hub_config::ledger_file), if any.
  std::unique_ptr<ledger_file> lfile;
  bool lfile_failed = false;
  std::mt19937_64 rng;
  tier_subscribers subscribers[3];
  /// Upgraded, not subscribed yet; silent; or detached (oversized frame).
  std::unordered_set<std::shared_ptr<hub_ws_session>> others;
  std::vector<std::weak_ptr<hub_http_session>> http_sessions;
  bool stopping = false;
  bool started = false;

  hub_server_counters counters;
  uint16_t bound_port = 0;
  /// Latency profiles: the default seed and the per-key arrival counts
  /// (guarded by `mu`).
  uint64_t profile_seed = 0;
  arrival_counter profile_arrivals;
  /// Profile requests per `tag` parameter (guarded by `mu`); at most
  /// max_profile_tags tags, the requests of later ones counted in
  /// profile_tags_other (shown as "(other)": not a tag a request can
  /// carry).
  std::map<std::string, uint64_t> profile_tags;
  uint64_t profile_tags_other = 0;
  static constexpr std::size_t max_profile_tags = 64;

  /// Counts one profile request of `tag` (`mu` held).
  void count_profile_tag_locked(const std::string& tag) {
    auto it = profile_tags.find(tag);
    if (it != profile_tags.end())
      ++it->second;
    else if (profile_tags.size() < max_profile_tags)
      profile_tags.emplace(tag, 1);
    else
      ++profile_tags_other;
  }

  /// The oracle cluster, guarded by `oracle_mu` (not `mu`).
  mutable std::mutex oracle_mu;
  oracle_state oracle;
  /// Ports of oracle nodes 1 .. cluster_size-1 (node 0 is `bound_port`).
  std::vector<uint16_t> node_ports;

  // Asio objects last-but-one; `ioc` is reset explicitly in ~impl before
  // any other member goes, so handlers destroyed with it find the rest.
  std::optional<boost::asio::io_context> ioc;
  std::optional<work_guard_type> guard;
  std::optional<boost::asio::ip::tcp::acceptor> acceptor;
  /// Listeners of oracle nodes 1 .. cluster_size-1.
  std::vector<std::unique_ptr<boost::asio::ip::tcp::acceptor>> node_acceptors;
  std::optional<boost::asio::steady_timer> restart_timer;
  std::optional<boost::asio::steady_timer> drop_timer;
  std::vector<std::thread> threads;
  std::mutex exit_mu;
  std::condition_variable exit_cv;
  int running_threads = 0;

private:
  void fan_out_locked(const publish_outcome& out);
  void emit_wakes_locked(const std::vector<int64_t>& cursors);
  std::string restart_locked();
  std::size_t drop_locked(std::optional<hub_tier> tier);
  void arm_restart_timer();
  void arm_drop_timer();
  uint64_t restart_generation_ = 0;
  uint64_t drop_generation_ = 0;
  std::size_t http_prune_at_ = 64;
};

/// Starts accepting on `h.acceptor` (hub_http.cpp).
void hub_start_accepting(hub::impl& h);

/// Starts accepting on the listener of oracle node `node` (hub_http.cpp).
void hub_start_accepting_node(hub::impl& h,
                              boost::asio::ip::tcp::acceptor& a,
                              std::size_t node);

/// Runs the HTTP session of an accepted socket of oracle node `node`
/// (hub_http.cpp).
void hub_start_http_session(hub::impl& h,
                            boost::asio::ip::tcp::socket socket,
                            std::size_t node = 0);

} // namespace outbound
