#pragma once

// Recommended setup of the caf::actor_system that hosts outbound's actors.
//
// outbound cannot change an actor_system that already exists, and CAF 0.17's
// scheduler defaults are tuned for machines with many idle cores. This header
// is the documented way to start a system the way outbound's CLI, demo and
// benchmarks do:
//
//   caf::actor_system_config cfg;
//   cfg.parse(argc, argv);            // optional: CAF's own options
//   outbound::configure(cfg);         // type ids + scheduler settings
//   caf::actor_system sys{cfg};
//   std::cout << outbound::describe_scheduler(sys) << '\n';
//
// What CAF 0.17.6 does without it (sources at tag 0.17.6, installed under
// /usr/include/caf and libcaf_core):
// - `scheduler.max-threads` defaults to max(hardware_concurrency(), 4)
//   (src/defaults.cpp; read by abstract_coordinator::init in
//   src/scheduler/abstract_coordinator.cpp): 4 workers on a 2-core machine,
//   competing with outbound's io threads.
// - `scheduler.policy` defaults to `stealing`. An idle work-stealing worker
//   (caf/policy/work_stealing.hpp, `dequeue`) polls 100 times, then 500 times
//   with `work-stealing.moderate-sleep-duration` (50 us) of nanosleep between
//   polls, and only then blocks on a condition variable. A message from one
//   of outbound's io threads usually lands on a worker asleep in that
//   nanosleep and waits for its next poll; the idle workers' wake-ups are
//   most of the process's CPU at low load.
// - `scheduler.max-throughput` defaults to SIZE_MAX: an actor with a full
//   mailbox keeps its worker until the mailbox is empty, and work stealing
//   runs the newest job first (`internal_enqueue` prepends), so older jobs
//   wait behind a busy actor.

#include <caf/fwd.hpp>
#include <caf/timespan.hpp>

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>

namespace outbound {
inline namespace protocol {
class io_runner;
} // namespace protocol
inline namespace system {

/// Where the scheduler settings of configure() start from.
enum class scheduler_preset {
  /// outbound's recommendation (the values documented in system_options).
  recommended,
  /// CAF's own defaults: configure() sets only what system_options sets
  /// explicitly.
  caf_defaults,
};

/// Options of configure(). Every explicitly set field overrides the preset.
/// `validate()` throws config_error naming the first bad field
/// (`system.max_threads`, `system.policy`, ...).
struct system_options {
  /// Base of the scheduler settings. [recommended]
  scheduler_preset preset = scheduler_preset::recommended;

  /// Cores the process may use. 0: std::thread::hardware_concurrency()
  /// (1 if unknown). [0]
  std::size_t cores = 0;

  /// Threads of the process that are not CAF workers but are busy when the
  /// actors are: an in-process server's threads, the host's own threads,
  /// and, with a policy other than io_loop, outbound's io_runner threads (1
  /// per io_runner by default; with io_loop the workers run the sockets).
  /// The recommended worker count leaves them their cores. [1]
  std::size_t io_threads = 1;

  /// `scheduler.max-threads`: CAF worker threads (>= 1). Recommended:
  /// max(1, cores - io_threads), so workers and io threads do not take turns
  /// on the same cores. CAF's default: max(cores, 4). [unset]
  std::optional<std::size_t> max_threads;

  /// `scheduler.policy`: "io_loop", "sharing" or "stealing".
  /// - sharing (caf/policy/work_sharing.hpp): one FIFO queue, a mutex and a
  ///   condition variable; an idle worker blocks at once and an enqueue wakes
  ///   it with notify_one.
  /// - stealing (caf/policy/work_stealing.hpp): a queue per worker, LIFO for
  ///   messages sent by actors, idle workers poll (see moderate_sleep).
  /// - io_loop (outbound's own, actors/system/detail/io_loop_policy.hpp):
  ///   work sharing whose idle workers block in epoll running the
  ///   asio::io_context of outbound's sockets instead of on a condition
  ///   variable. Pools spawned without an explicit io_runner then use that
  ///   context (io_runner_for()), so the caller, the client, the pool and
  ///   the socket share one thread: a call costs no cross-thread wake-up.
  ///   An actor that blocks its worker also stalls the sockets that worker
  ///   would serve (with sharing it stalls the replies instead). The
  ///   extension point is CAF's own: actor_system_config::load of a
  ///   scheduler coordinator (docs/ARCHITECTURE.md shows the call's hops).
  /// Recommended: io_loop (bench/README.md, "The io_loop policy", has the
  /// comparison with sharing and raw Beast). CAF's default: stealing.
  /// [unset]
  std::optional<std::string> policy;

  /// `scheduler.max-throughput`: messages an actor may handle before it
  /// yields its worker to the next job (>= 1). Bounds how long one busy actor
  /// (a coalescing batcher, a feed watcher draining a ledger page) keeps the
  /// others waiting. Recommended: 100 (re-scheduling costs one queue
  /// operation per 100 messages). CAF's default: SIZE_MAX (unbounded).
  /// [unset]
  std::optional<std::size_t> max_throughput;

  /// `work-stealing.moderate-sleep-duration`, policy stealing only (>= 0):
  /// the nanosleep between an idle worker's 500 moderate polls (with the
  /// kernel's timer slack each 50 us sleep takes 50–100 us). 0 makes them
  /// plain polls (tens of microseconds in all), after which the worker
  /// blocks on its condition variable, which an enqueue from outside
  /// signals.
  /// Recommended with stealing: 0us. CAF's default: 50us. Setting it with
  /// policy sharing or io_loop is an error (CAF would ignore it). [unset]
  std::optional<std::chrono::microseconds> moderate_sleep;

  /// `work-stealing.aggressive-poll-attempts`, policy stealing only (>= 1):
  /// how many times an idle worker polls its queue without sleeping before
  /// the moderate polls. A message from an io thread then finds a worker
  /// still spinning instead of one to wake: the lowest latency per call,
  /// paid with idle CPU (each idle worker spins that long after its last
  /// job). bench/README.md ("request_throughput") measures 10000 against
  /// the recommendation: concurrency-1 p50 about 1.4x raw Beast instead of
  /// about 2.3x. Not part of the recommendation. CAF's default: 100.
  /// Setting it with policy sharing or io_loop is an error. [unset]
  std::optional<std::size_t> aggressive_polls;

  /// Throws config_error naming the first invalid field.
  void validate() const;
};

/// The scheduler values configure() puts into a config for `opts`: the
/// preset with the overrides applied. A field is unset where configure()
/// leaves CAF's default (preset caf_defaults, no override).
struct scheduler_plan {
  std::optional<std::size_t> max_threads;
  std::optional<std::string> policy;
  std::optional<std::size_t> max_throughput;
  std::optional<std::chrono::microseconds> moderate_sleep;
  std::optional<std::size_t> aggressive_polls;
};

/// Validates `opts` and resolves the preset (throws config_error).
scheduler_plan plan_scheduler(const system_options& opts = {});

/// Prepares `cfg` for outbound's actors, before `caf::actor_system sys{cfg}`:
/// - registers outbound's type-id block (`caf::id_block::outbound`, see
///   actors/messages.hpp), which every program did by hand before;
/// - writes the scheduler settings of plan_scheduler(opts) into `cfg`.
///   A value that `cfg` already holds (from cfg.parse(): the command line or
///   caf-application.ini, or an earlier cfg.set) is kept, unless the same
///   field is set explicitly in `opts`.
/// Throws config_error (and leaves `cfg` unchanged) when `opts` is invalid.
void configure(caf::actor_system_config& cfg, const system_options& opts = {});

/// The scheduler settings in effect in a running system, read from the
/// system itself (not from the requested configuration).
struct scheduler_settings {
  /// sys.scheduler().num_workers().
  std::size_t workers = 0;
  /// "stealing", "sharing", "io_loop", "testing" (CAF's deterministic test
  /// scheduler), or "other".
  std::string policy;
  /// sys.scheduler().max_throughput(); SIZE_MAX means unbounded.
  std::size_t max_throughput = 0;
  /// The first worker's moderate-poll sleep (policy stealing only).
  std::optional<caf::timespan> moderate_sleep;
  /// The first worker's aggressive poll attempts (policy stealing only).
  std::optional<std::size_t> aggressive_polls;
};

/// Reads the scheduler settings of `sys`.
scheduler_settings scheduler_in_effect(caf::actor_system& sys);

/// One line, e.g. "1 worker, policy io_loop, max-throughput 100" or
/// "4 workers, policy stealing, max-throughput unbounded,
/// aggressive-poll-attempts 100, moderate-sleep-duration 50us".
std::string to_string(const scheduler_settings& x);

/// The io_runner outbound's pools use in `sys` when none is given: the one
/// the workers of the io_loop policy run, else io_runner::shared().
std::shared_ptr<io_runner> io_runner_for(caf::actor_system& sys);

/// to_string(scheduler_in_effect(sys)).
std::string describe_scheduler(caf::actor_system& sys);

} // namespace system
} // namespace outbound
