#include "actors/system/system_setup.hpp"

#include "actors/messages.hpp"
#include "actors/system/detail/io_loop_policy.hpp"
#include "config/config_error.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <caf/policy/work_sharing.hpp>
#include <caf/policy/work_stealing.hpp>
#include <caf/scheduler/abstract_coordinator.hpp>
#include <caf/scheduler/coordinator.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/settings.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <thread>

namespace outbound {
inline namespace system {

namespace {

// The recommendation (see the field docs in system_setup.hpp).
constexpr const char* recommended_policy = "io_loop";
constexpr std::size_t recommended_max_throughput = 100;
constexpr std::chrono::microseconds recommended_moderate_sleep{0};

// CAF 0.17.6 config keys (src/actor_system_config.cpp, option groups
// "scheduler" and "work-stealing").
// caf::string_view has no const char* constructor under clang (only under
// GCC), so the keys are string_views built from the literals.
const caf::string_view key_max_threads{"scheduler.max-threads"};
const caf::string_view key_policy{"scheduler.policy"};
const caf::string_view key_max_throughput{"scheduler.max-throughput"};
const caf::string_view key_moderate_sleep{
  "work-stealing.moderate-sleep-duration"};
const caf::string_view key_aggressive_polls{
  "work-stealing.aggressive-poll-attempts"};

std::size_t effective_cores(const system_options& opts) {
  if (opts.cores > 0)
    return opts.cores;
  auto hw = std::thread::hardware_concurrency();
  return hw > 0 ? hw : 1;
}

using io_loop_coordinator = caf::scheduler::coordinator<detail::io_loop_policy>;

bool has_key(const caf::actor_system_config& cfg, caf::string_view key) {
  return caf::get_if(&cfg.content, key) != nullptr;
}

} // namespace

void system_options::validate() const {
  if (max_threads && *max_threads < 1)
    throw config_error("system.max_threads", "must be >= 1");
  if (policy && *policy != "sharing" && *policy != "stealing"
      && *policy != "io_loop")
    throw config_error("system.policy",
                       "must be \"sharing\", \"stealing\" or \"io_loop\", "
                       "got \"" + *policy + "\"");
  if (max_throughput && *max_throughput < 1)
    throw config_error("system.max_throughput", "must be >= 1");
  if (moderate_sleep && moderate_sleep->count() < 0)
    throw config_error("system.moderate_sleep", "must be >= 0us");
  if (aggressive_polls && *aggressive_polls < 1)
    throw config_error("system.aggressive_polls", "must be >= 1");
}

scheduler_plan plan_scheduler(const system_options& opts) {
  opts.validate();
  scheduler_plan p;
  if (opts.preset == scheduler_preset::recommended) {
    auto cores = effective_cores(opts);
    p.max_threads = cores > opts.io_threads ? cores - opts.io_threads : 1;
    p.policy = recommended_policy;
    p.max_throughput = recommended_max_throughput;
  }
  if (opts.max_threads)
    p.max_threads = opts.max_threads;
  if (opts.policy)
    p.policy = opts.policy;
  if (opts.max_throughput)
    p.max_throughput = opts.max_throughput;
  // CAF's default policy is stealing: an unset policy means stealing.
  bool stealing = !p.policy || *p.policy == "stealing";
  if (opts.moderate_sleep) {
    if (!stealing)
      throw config_error("system.moderate_sleep",
                         "applies to policy \"stealing\" only (CAF ignores "
                         "it with \"" + *p.policy + "\")");
    p.moderate_sleep = opts.moderate_sleep;
  } else if (stealing && opts.preset == scheduler_preset::recommended) {
    p.moderate_sleep = recommended_moderate_sleep;
  }
  if (opts.aggressive_polls) {
    if (!stealing)
      throw config_error("system.aggressive_polls",
                         "applies to policy \"stealing\" only (CAF ignores "
                         "it with \"" + *p.policy + "\")");
    p.aggressive_polls = opts.aggressive_polls;
  }
  return p;
}

void configure(caf::actor_system_config& cfg, const system_options& opts) {
  auto p = plan_scheduler(opts); // throws before cfg is touched
  cfg.add_message_types<caf::id_block::outbound>();
  // An explicit option always wins; a recommended value only fills a key
  // the config does not hold yet (cfg.parse() runs before configure()).
  auto keep = [&](caf::string_view key, bool explicit_option) {
    return !explicit_option && has_key(cfg, key);
  };
  if (p.max_threads && !keep(key_max_threads, opts.max_threads.has_value()))
    cfg.set(key_max_threads, *p.max_threads);
  if (p.policy && !keep(key_policy, opts.policy.has_value()))
    cfg.set(key_policy, caf::atom_from_string(*p.policy));
  if (p.max_throughput
      && !keep(key_max_throughput, opts.max_throughput.has_value()))
    cfg.set(key_max_throughput, *p.max_throughput);
  if (p.moderate_sleep
      && !keep(key_moderate_sleep, opts.moderate_sleep.has_value()))
    cfg.set(key_moderate_sleep,
            caf::timespan{std::chrono::duration_cast<caf::timespan>(
              *p.moderate_sleep)});
  if (p.aggressive_polls
      && !keep(key_aggressive_polls, opts.aggressive_polls.has_value()))
    cfg.set(key_aggressive_polls, *p.aggressive_polls);
  // io_loop is not one of CAF's policies: CAF 0.17.6 creates its own
  // scheduler only when none was loaded (actor_system.cpp), so loading this
  // coordinator makes it the system's scheduler. The key may also come from
  // the command line (cfg.parse()).
  auto policy = caf::get_or(cfg, key_policy, caf::atom("stealing"));
  if (policy == caf::atom("io_loop"))
    cfg.load<io_loop_coordinator>();
}

scheduler_settings scheduler_in_effect(caf::actor_system& sys) {
  using stealing_coordinator
    = caf::scheduler::coordinator<caf::policy::work_stealing>;
  using sharing_coordinator
    = caf::scheduler::coordinator<caf::policy::work_sharing>;
  auto& sched = sys.scheduler();
  scheduler_settings x;
  x.workers = sched.num_workers();
  x.max_throughput = sched.max_throughput();
  if (auto* st = dynamic_cast<stealing_coordinator*>(&sched)) {
    x.policy = "stealing";
    // The poll strategies are written once when the workers are built
    // (policy::work_stealing::worker_data) and only read afterwards.
    if (x.workers > 0) {
      const auto& strategies = st->worker_by_id(0)->data().strategies;
      x.aggressive_polls = strategies[0].attempts;
      x.moderate_sleep = strategies[1].sleep_duration;
    }
  } else if (dynamic_cast<sharing_coordinator*>(&sched) != nullptr) {
    x.policy = "sharing";
  } else if (dynamic_cast<io_loop_coordinator*>(&sched) != nullptr) {
    x.policy = "io_loop";
  } else if (dynamic_cast<caf::scheduler::test_coordinator*>(&sched)
             != nullptr) {
    x.policy = "testing";
  } else {
    x.policy = "other";
  }
  return x;
}

std::string to_string(const scheduler_settings& x) {
  std::string s = std::to_string(x.workers);
  s += x.workers == 1 ? " worker" : " workers";
  s += ", policy ";
  s += x.policy;
  s += ", max-throughput ";
  s += x.max_throughput == std::numeric_limits<std::size_t>::max()
         ? std::string{"unbounded"}
         : std::to_string(x.max_throughput);
  if (x.aggressive_polls) {
    s += ", aggressive-poll-attempts ";
    s += std::to_string(*x.aggressive_polls);
  }
  if (x.moderate_sleep) {
    s += ", moderate-sleep-duration ";
    s += std::to_string(
      std::chrono::duration_cast<std::chrono::microseconds>(*x.moderate_sleep)
        .count());
    s += "us";
  }
  return s;
}

std::shared_ptr<io_runner> io_runner_for(caf::actor_system& sys) {
  if (auto* c = dynamic_cast<io_loop_coordinator*>(&sys.scheduler()))
    return c->data().runner;
  return io_runner::shared();
}

std::string describe_scheduler(caf::actor_system& sys) {
  return to_string(scheduler_in_effect(sys));
}

} // namespace system
} // namespace outbound
