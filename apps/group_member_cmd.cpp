#include "apps/group_member_cmd.hpp"

#include "apps/failure_throttle.hpp"
#include "apps/line_writer.hpp"
#include "apps/request_cmd.hpp"

#include "actors/client/service_client.hpp"
#include "actors/feed/feed_frames.hpp"
#include "actors/feed/feed_messages.hpp"
#include "actors/feed/feed_watcher.hpp"
#include "actors/group/etcd_lease_store.hpp"
#include "actors/group/feed_group.hpp"
#include "actors/group/memory_lease_store.hpp"
#include "actors/messages.hpp"
#include "actors/system/system_setup.hpp"
#include "config/config_error.hpp"
#include "metrics/group_metrics.hpp"
#include "metrics/metrics_exposer.hpp"
#include "metrics/outbound_metrics.hpp"
#include "protocol/errors.hpp"
#include "protocol/io_runner.hpp"
#include "protocol/tls_context.hpp"
#include "protocol/ws_session.hpp"

#include <CLI/CLI.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>
#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <atomic>
#include <cctype>
#include <chrono>
#include <csignal>
#include <deque>
#include <iostream>
#include <map>
#include <mutex>
#include <ostream>
#include <set>
#include <thread>
#include <unistd.h>
#include <vector>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace outbound::apps {

namespace {

volatile std::sig_atomic_t member_stop_signal = 0;

extern "C" void on_member_stop_signal(int) {
  member_stop_signal = 1;
}

/// CLOCK_MONOTONIC in nanoseconds (std::chrono::steady_clock on Linux):
/// the same clock in every process of a machine, so delivery lines of
/// several members can be ordered against each other and against faults.
int64_t mono_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
           std::chrono::steady_clock::now().time_since_epoch())
    .count();
}

/// What the delivery actor counts, read by the exit line.
struct delivery_counts {
  std::atomic<uint64_t> events{0}, resets{0};
  /// No more lines (the exit line is out, or --quiet).
  std::atomic<bool> quiet{false};
};

/// Bytes of delivery lines handed to the stdout writer and not yet written
/// above which the delivery actor holds further batches back (their
/// watchers wait for the acknowledgement).
constexpr std::size_t max_unwritten_delivery_bytes = 256 * 1024;

/// How long the exit waits for stdout to take the last delivery lines.
constexpr auto stdout_drain_bound = std::chrono::seconds(5);

/// How long a repeated failure cause stays quiet after its line (as
/// `outbound watch`).
constexpr auto failure_repeat_after = std::chrono::seconds(60);

/// How often the member's status is read for new store failures.
constexpr auto store_check_every = std::chrono::seconds(1);

/// How often the member hands freed heap back to the kernel.
constexpr auto heap_trim_every = std::chrono::seconds(10);

/// Returns free heap pages to the kernel (glibc's malloc_trim, which also
/// releases free pages inside the heap, not only at its top). A member's
/// bursts (a claim of thousands of feeds, their catch-up pages, checkpoint
/// bodies for every owned feed) free memory between the watchers' long-lived
/// allocations, which glibc otherwise keeps resident: at 1,000 feeds per
/// member, tens of MiB (bench/scaleout's member_rss). A no-op elsewhere.
void release_free_heap() {
#if defined(__GLIBC__)
  ::malloc_trim(0);
#endif
}

/// Every line of stderr once the member runs (status, failure and exit
/// lines), written one at a time under one lock: the watchers report
/// failures from their own threads.
struct stderr_lines {
  std::mutex mu;
  /// The stderr writer: a blocked stderr holds up no thread that prints.
  std::shared_ptr<line_writer> err;
  std::vector<std::string> secrets;
  failure_throttle throttle{failure_repeat_after};
  /// Failures the watchers reported (hub_failures) and the newest one.
  uint64_t hub_failures = 0;
  std::string last_hub_failure;
  /// group_status::store_errors when the store was last checked.
  uint64_t store_errors_seen = 0;
  /// The exit line is out: nothing more is printed.
  bool closed = false;

  /// Prints `o` (the caller holds `mu`). Valid UTF-8 whatever its texts
  /// quote (a store or hub answer's bytes, an error text clipped inside a
  /// character): JSON text is UTF-8 (RFC 8259 section 8.1).
  void print(const boost::json::object& o) {
    err->post(valid_utf8(redact(boost::json::serialize(o), secrets)) + '\n');
  }
};

/// `text` without the values of "request id <hex>" (each call has its
/// own): the cause of a failure, as the throttle compares them.
std::string cause_key(std::string text) {
  static const std::string tag = "request id ";
  for (auto pos = text.find(tag); pos != std::string::npos;
       pos = text.find(tag, pos + tag.size())) {
    auto end = pos + tag.size();
    while (end < text.size()
           && std::isxdigit(static_cast<unsigned char>(text[end])))
      ++end;
    text.erase(pos + tag.size(), end - pos - tag.size());
  }
  return text;
}

/// A watcher's failure (hub side), printed unless its cause (everything
/// but the feed and the request id) was printed within
/// failure_repeat_after: a hub that is down fails every feed the same way.
void report_hub_failure(stderr_lines& l, const std::string& feed,
                        const feed_failure& f) {
  std::lock_guard<std::mutex> lock{l.mu};
  ++l.hub_failures;
  l.last_hub_failure = feed + ": " + f.source + ": " + f.kind
                       + (f.status ? " " + std::to_string(f.status) : "")
                       + (f.detail.empty() ? "" : ": " + f.detail);
  uint64_t suppressed = 0;
  auto key = "hub\n" + f.source + '\n' + f.kind + '\n'
             + std::to_string(f.status) + '\n' + f.reason + '\n' + f.detail;
  if (l.closed
      || !l.throttle.admit(cause_key(key), std::chrono::steady_clock::now(),
                           suppressed))
    return;
  boost::json::object o;
  o["type"] = "failure";
  o["source"] = f.source;
  o["feed"] = feed;
  o["kind"] = f.kind;
  o["status"]
    = f.status ? boost::json::value(f.status) : boost::json::value(nullptr);
  o["detail"] = f.detail;
  o["request_id"] = f.request_id;
  if (!f.reason.empty())
    o["reason"] = f.reason;
  if (suppressed > 0)
    o["repeats_suppressed"] = suppressed;
  l.print(o);
}

/// New store failures in `s` (its store_errors grew since the last
/// check): one line with the newest one's text, under the same throttle.
void report_store_errors(stderr_lines& l, const group_status& s) {
  std::lock_guard<std::mutex> lock{l.mu};
  if (s.store_errors <= l.store_errors_seen || s.last_store_error.empty())
    return;
  l.store_errors_seen = s.store_errors;
  uint64_t suppressed = 0;
  if (l.closed
      || !l.throttle.admit(cause_key("store\n" + s.last_store_error),
                           std::chrono::steady_clock::now(), suppressed))
    return;
  auto colon = s.last_store_error.find(": ");
  boost::json::object o;
  o["type"] = "failure";
  o["source"] = "store";
  o["request"] = s.last_store_error.substr(0, colon);
  o["detail"] = colon == std::string::npos
                  ? std::string{}
                  : s.last_store_error.substr(colon + 2);
  o["store_errors"] = s.store_errors;
  if (suppressed > 0)
    o["repeats_suppressed"] = suppressed;
  l.print(o);
}

std::string default_member_name() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0')
    std::snprintf(host, sizeof(host), "localhost");
  return std::string{host} + ":" + std::to_string(getpid());
}

/// The flags of `o` over `g` (those given).
void apply_flags(const group_member_options& o, group_config& g) {
  if (!o.group_name.empty())
    g.name = o.group_name;
  if (!o.member_name.empty())
    g.member_name = o.member_name;
  if (g.member_name.empty())
    g.member_name = default_member_name();
  if (!o.coordinator.empty()) {
    if (o.coordinator == "etcd")
      g.coordinator.kind = coordinator_kind::etcd;
    else if (o.coordinator == "memory")
      g.coordinator.kind = coordinator_kind::memory;
    else
      throw usage_error("--coordinator must be etcd or memory, got '"
                        + o.coordinator + "'");
  }
  if (!o.endpoint.empty())
    g.coordinator.endpoint = o.endpoint;
  if (!o.key_prefix.empty())
    g.coordinator.prefix = o.key_prefix;
  auto& tls = g.coordinator.client.tls;
  if (!o.etcd_tls.ca_file.empty())
    tls.ca_file = o.etcd_tls.ca_file;
  if (!o.etcd_tls.client_cert_file.empty())
    tls.client_cert_file = o.etcd_tls.client_cert_file;
  if (!o.etcd_tls.client_key_file.empty())
    tls.client_key_file = o.etcd_tls.client_key_file;
  auto set = [](double flag, double& field) {
    if (flag != group_member_options::unset)
      field = flag;
  };
  set(o.lease_ttl, g.timing.lease_ttl);
  set(o.renew_interval, g.timing.renew_interval);
  set(o.fence_margin, g.timing.fence_margin);
  set(o.poll_interval, g.timing.poll_interval);
  set(o.checkpoint_interval, g.timing.checkpoint_interval);
  set(o.initial_settle, g.timing.initial_settle);
  set(o.rebalance_delay, g.timing.rebalance_delay);
  if (o.min_members) {
    if (*o.min_members < 1)
      throw usage_error("--min-members must be >= 1");
    g.timing.min_members = static_cast<std::size_t>(*o.min_members);
  }
  if (o.max_starts_per_second) {
    if (*o.max_starts_per_second < 1)
      throw usage_error("--max-starts-per-second must be >= 1");
    g.timing.max_starts_per_second
      = static_cast<std::size_t>(*o.max_starts_per_second);
  }
}

/// The fields (validate()'s names) the flags of `o` set.
std::vector<std::string> flag_fields(const group_member_options& o) {
  std::vector<std::string> out;
  auto add = [&](bool given, const char* field) {
    if (given)
      out.emplace_back(field);
  };
  add(!o.group_name.empty(), "group.name");
  add(!o.member_name.empty(), "group.member_name");
  add(!o.coordinator.empty(), "group.coordinator.kind");
  add(!o.endpoint.empty(), "group.coordinator.endpoint");
  add(!o.key_prefix.empty(), "group.coordinator.prefix");
  add(!o.etcd_tls.ca_file.empty(), "group.coordinator.client.tls.ca_file");
  add(!o.etcd_tls.client_cert_file.empty(),
      "group.coordinator.client.tls.client_cert_file");
  add(!o.etcd_tls.client_key_file.empty(),
      "group.coordinator.client.tls.client_key_file");
  const auto unset = group_member_options::unset;
  add(o.lease_ttl != unset, "group.lease_ttl");
  add(o.renew_interval != unset, "group.renew_interval");
  add(o.fence_margin != unset, "group.fence_margin");
  add(o.poll_interval != unset, "group.poll_interval");
  add(o.checkpoint_interval != unset, "group.checkpoint_interval");
  add(o.initial_settle != unset, "group.initial_settle");
  add(o.rebalance_delay != unset, "group.rebalance_delay");
  add(o.min_members.has_value(), "group.min_members");
  add(o.max_starts_per_second.has_value(), "group.max_starts_per_second");
  return out;
}

/// The group config: file, then environment, then flags; validated once
/// all three are in, so that a flag overrides a bad variable. The file is
/// checked on its own (its errors name it), but may leave the names to
/// the flags or the environment (one file for every member). An error on a
/// field a variable set (and no flag replaced) names the variable.
group_config resolve_group(const group_member_options& o) {
  group_config g;
  if (!o.config_file.empty())
    g = load_group_config(o.config_file, group_names::optional);
  auto env = read_group_env(std::move(g));
  g = env.config;
  apply_flags(o, g);
  for (const auto& f : flag_fields(o))
    env.fields.erase(f);
  env.validate(g);
  return g;
}

/// The static feed set: --feed ID=PREFIX and --feed-count N.
std::vector<group_feed> resolve_feeds(const group_member_options& o) {
  std::vector<group_feed> out;
  auto add = [&](std::string id, std::string prefix) {
    group_feed f;
    f.id = std::move(id);
    f.cfg.replay_path = o.replay_path;
    f.cfg.ws_path = o.ws_path;
    f.cfg.prefixes = {std::move(prefix)};
    out.push_back(std::move(f));
  };
  for (const auto& spec : o.feeds) {
    auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
      throw usage_error("--feed must be ID=PREFIX: '" + spec + "'");
    add(spec.substr(0, eq), spec.substr(eq + 1));
  }
  // Beyond group_state_config::max_feeds' default a member could not own
  // them all anyway; the bound also keeps a typo from building a huge set.
  constexpr int64_t max_feed_count = 100000;
  if (o.feed_count < 0 || o.feed_count > max_feed_count)
    throw usage_error("--feed-count must be in [0, "
                      + std::to_string(max_feed_count) + "], got "
                      + std::to_string(o.feed_count));
  for (int64_t i = 0; i < o.feed_count; ++i) {
    auto id = o.subject_prefix + std::to_string(i);
    add(id, id + "/");
  }
  if (out.empty())
    throw usage_error("no feeds: give --feed ID=PREFIX or --feed-count N");
  // Ids become etcd keys and fields of every line: checked here too, so
  // that a bad one is named before anything starts.
  std::vector<std::string> ids;
  for (const auto& f : out)
    ids.push_back(f.id);
  validate_group_feed_ids(ids);
  return out;
}

boost::json::object status_json(const group_status& s) {
  boost::json::object o;
  o["type"] = "status";
  o["group"] = s.group;
  o["member"] = s.member;
  o["incarnation"] = s.incarnation;
  o["phase"] = to_string(s.phase);
  o["leased"] = s.leased;
  o["holding"] = s.holding;
  o["fence_in"] = s.fence_in;
  o["members"] = s.members;
  o["feeds"] = s.feeds_total;
  o["desired"] = s.desired;
  o["owned"] = s.owned;
  o["running"] = s.running;
  const auto& c = s.counters;
  o["claims_won"] = c.claims_won;
  o["claims_held"] = c.claims_held;
  o["claim_errors"] = c.claim_errors;
  o["commits_ok"] = c.commits_ok;
  o["commits_fenced"] = c.commits_fenced;
  o["commit_errors"] = c.commit_errors;
  o["renewals_ok"] = c.renewals_ok;
  o["renewals_error"] = c.renewals_error;
  o["renewals_lost"] = c.renewals_lost;
  o["holds"] = c.holds;
  o["rejoins"] = c.rejoins;
  o["join_errors"] = c.join_errors;
  o["hold_timeouts"] = c.hold_timeouts;
  o["spawns"] = c.spawns;
  o["moved_in"] = s.moved_in;
  o["moved_out"] = s.moved_out;
  o["joined"] = s.joined;
  o["store_errors"] = s.store_errors;
  o["last_store_error"] = s.last_store_error;
  o["unreleased"] = s.unreleased;
  o["revoke_failed"] = s.revoke_failed;
  return o;
}

/// status_json with the watchers' failures (the caller holds `l.mu`).
boost::json::object status_json(const group_status& s, const stderr_lines& l) {
  auto o = status_json(s);
  o["hub_failures"] = l.hub_failures;
  o["last_hub_failure"] = l.last_hub_failure;
  return o;
}

/// The hub probe: one replay GET of `fc` (limit 1) through the watchers'
/// client, with its retries and deadline. nullopt: answered (2xx, JSON).
std::optional<call_error> probe_hub(caf::actor_system& sys,
                                    const service_client_actor& client,
                                    const feed_config& fc, double deadline) {
  std::optional<call_error> out;
  caf::scoped_actor self{sys};
  auto t = std::chrono::milliseconds(static_cast<int64_t>(deadline * 1000))
           + std::chrono::seconds(5);
  self->request(client, t, replay_request(fc, fc.cursor, 1))
    .receive(
      [&](const call_outcome& o) {
        if (o.error)
          out = *o.error;
      },
      [&](const caf::error& e) {
        call_error ce;
        ce.kind = error_kind::service_unavailable;
        ce.detail = "the client did not answer: " + caf::to_string(e);
        out = ce;
      });
  return out;
}

std::string event_line(const feed_event& e) {
  boost::json::object o;
  o["type"] = "event";
  o["t"] = mono_ns();
  o["feed"] = e.feed_id;
  o["token"] = e.owner_token;
  o["id"] = e.id ? boost::json::value(*e.id) : boost::json::value(nullptr);
  if (auto* ev = e.event.if_object())
    if (auto* sub = ev->if_contains("subject"))
      o["subject"] = *sub;
  return boost::json::serialize(o) + '\n';
}

std::string reset_line(const feed_reset& r) {
  boost::json::object o;
  o["type"] = "reset";
  o["t"] = mono_ns();
  o["feed"] = r.feed_id;
  o["token"] = r.owner_token;
  o["cause"] = to_string(r.cause);
  auto opt = [](const std::optional<int64_t>& v) {
    return v ? boost::json::value(*v) : boost::json::value(nullptr);
  };
  o["lost_from"] = opt(r.lost_from);
  o["lost_to"] = opt(r.lost_to);
  return boost::json::serialize(o) + '\n';
}

/// The delivery target of every watcher of the member: a batch subscriber
/// whose lines go to the stdout writer (never written on an actor's
/// thread), with the private message `(ack_atom, n)`: the writer wrote
/// the n-th text.
using delivery_actor
  = feed_batch_subscriber_actor::extend<caf::reacts_to<ack_atom, uint64_t>>;

struct delivery_state {
  std::shared_ptr<line_writer> out;
  std::shared_ptr<delivery_counts> counts;
  /// A delivery not yet handed to the writer (the writer has
  /// max_unwritten_delivery_bytes already), in arrival order.
  struct delivery {
    /// Its lines, formatted as it arrived ("t": when the watcher handed it
    /// over, as a callback's would be).
    std::string text;
    caf::typed_response_promise<feed_batch_ack> batch_rp;
    caf::typed_response_promise<ack_atom> reset_rp;
  };
  std::deque<delivery> waiting;
  /// Texts handed to the writer, by number: answered once written.
  std::map<uint64_t, delivery> posted;
  uint64_t last = 0;

  static inline const char* name = "outbound.group_member.delivery";
};

/// Hands waiting deliveries to the writer, oldest first, while it has room.
void pump(delivery_actor::stateful_pointer<delivery_state> self) {
  auto& st = self->state;
  while (!st.waiting.empty()
         && st.out->queued() < max_unwritten_delivery_bytes) {
    auto w = std::move(st.waiting.front());
    st.waiting.pop_front();
    auto text = std::move(w.text);
    auto n = ++st.last;
    st.posted.emplace(n, std::move(w));
    auto me = caf::actor_cast<caf::weak_actor_ptr>(self);
    st.out->post(std::move(text), [me, n] {
      if (auto p = me.lock())
        caf::anon_send(caf::actor_cast<delivery_actor>(p), ack_atom_v, n);
    });
  }
}

delivery_actor::behavior_type
delivery_impl(delivery_actor::stateful_pointer<delivery_state> self,
              std::shared_ptr<line_writer> out,
              std::shared_ptr<delivery_counts> counts) {
  self->state.out = std::move(out);
  self->state.counts = std::move(counts);
  return {
    [self](feed_event_batch& b) -> caf::result<feed_batch_ack> {
      auto& st = self->state;
      st.counts->events += b.events.size();
      if (st.counts->quiet)
        return feed_batch_ack{};
      delivery_state::delivery w;
      for (const auto& e : b.events)
        w.text += event_line(e);
      w.batch_rp = self->make_response_promise<feed_batch_ack>();
      auto rp = w.batch_rp;
      st.waiting.push_back(std::move(w));
      pump(self);
      return rp;
    },
    [self](feed_reset& r) -> caf::result<ack_atom> {
      auto& st = self->state;
      ++st.counts->resets;
      if (st.counts->quiet)
        return ack_atom_v;
      delivery_state::delivery w;
      w.text = reset_line(r);
      w.reset_rp = self->make_response_promise<ack_atom>();
      auto rp = w.reset_rp;
      st.waiting.push_back(std::move(w));
      pump(self);
      return rp;
    },
    [self](ack_atom, uint64_t n) {
      auto& st = self->state;
      auto i = st.posted.find(n);
      if (i == st.posted.end())
        return;
      if (i->second.batch_rp.pending())
        i->second.batch_rp.deliver(feed_batch_ack{});
      if (i->second.reset_rp.pending())
        i->second.reset_rp.deliver(ack_atom_v);
      st.posted.erase(i);
      pump(self);
    },
  };
}

std::optional<group_status> ask(caf::actor_system& sys,
                                const feed_group_actor& g, double timeout_s,
                                bool leave) {
  std::optional<group_status> out;
  caf::scoped_actor self{sys};
  auto t = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  auto on_ok = [&](const group_status& s) {
    out = s;
  };
  auto on_err = [](const caf::error&) {
  };
  if (leave)
    self->request(g, t, leave_atom_v).receive(on_ok, on_err);
  else
    self->request(g, t, stats_atom_v).receive(on_ok, on_err);
  return out;
}

} // namespace

// Over 80 lines on purpose: the command's option table, one CLI11
// statement per option, read top to bottom like its --help.
CLI::App* add_group_member_command(CLI::App& app, group_member_options& o) {
  auto* cmd = app.add_subcommand(
    "group-member",
    "Run one member of a feed group: own a share of a feed set through "
    "leases in etcd and follow each owned feed, one JSON line per delivery");
  cmd->footer(
    "Output: {\"type\":\"event\",\"t\",\"feed\",\"token\",\"id\",\"subject\"} "
    "or "
    "{\"type\":\"reset\",\"feed\",\"token\",\"cause\",...} per line on "
    "stdout, written by a writer thread as delivered (a feed's next "
    "delivery waits until its lines are written: a stdout that is not read "
    "holds deliveries back, never the lease renewals); a "
    "{\"type\":\"status\",...} line on "
    "stderr every --status-interval seconds and on exit.\nSIGTERM/SIGINT "
    "(or --duration): graceful leave (final checkpoints, releases, lease "
    "revoked).\nBefore joining, one replay GET probes the hub; if it fails, "
    "a {\"type\":\"failure\",\"source\":\"hub_probe\",...} line and exit "
    "3-7. Later hub and store failures: a {\"type\":\"failure\",...} line "
    "per distinct cause (a repeat after 60 s); the member rides them out.\n"
    "Group settings: --config FILE, then OUTBOUND_GROUP_* variables, then "
    "these flags.\nExit codes: 0 joined and left cleanly; 2 "
    "usage/config_error; 3 auth_error, 4 request_error, 5 server_error, 6 "
    "response_error, 7 service_unavailable: the hub probe failed; 9 never "
    "joined (the store unreachable); 10 left, but feeds not released or "
    "the lease not revoked (they move at lease expiry); 1 internal error "
    "or a leave that did not answer.");
  cmd->add_option("base_url", o.base_url, "The hub's base URL")->required();
  cmd->add_option("--group", o.group_name, "The group's name");
  cmd->add_option("--member", o.member_name,
                  "This member's name, stable across restarts (default: "
                  "hostname:pid)");
  cmd->add_option("--feed", o.feeds,
                  "A feed ID=PREFIX: its id and the subject prefix it "
                  "follows (repeatable)");
  cmd
    ->add_option("--feed-count", o.feed_count,
                 "Feeds <subject-prefix><i> for i < N, each following "
                 "'<subject-prefix><i>/'")
    ->capture_default_str();
  cmd->add_option("--subject-prefix", o.subject_prefix, "See --feed-count")
    ->capture_default_str();
  cmd->add_option("--config", o.config_file, "A group config JSON file");
  cmd->add_option("--coordinator", o.coordinator,
                  "The group's store: etcd or memory (one process only)");
  cmd->add_option("--etcd", o.endpoint,
                  "etcd's client URL (default http://127.0.0.1:2379)");
  cmd->add_option("--key-prefix", o.key_prefix,
                  "Key prefix of every group (default /outbound/groups/)");
  cmd->add_option("--etcd-ca-file", o.etcd_tls.ca_file,
                  "PEM CA file that verifies etcd (https --etcd)");
  cmd->add_option("--etcd-cert", o.etcd_tls.client_cert_file,
                  "PEM client certificate for etcd's mTLS (with --etcd-key)");
  cmd->add_option("--etcd-key", o.etcd_tls.client_key_file,
                  "PEM private key of --etcd-cert");
  cmd->add_option("--lease-ttl", o.lease_ttl, "Lease TTL, seconds (>= 2)");
  cmd->add_option("--renew-interval", o.renew_interval,
                  "Keepalive period, seconds (<= TTL/3)");
  cmd->add_option("--fence-margin", o.fence_margin,
                  "Stop delivering this long before the lease could expire");
  cmd->add_option("--poll-interval", o.poll_interval,
                  "Member list poll period, seconds");
  cmd->add_option("--checkpoint-interval", o.checkpoint_interval,
                  "Cursor commit period, seconds");
  cmd->add_option("--initial-settle", o.initial_settle,
                  "Seconds the member list must be stable before claims");
  cmd->add_option("--rebalance-delay", o.rebalance_delay,
                  "Seconds a new member must be listed before feeds move");
  cmd->add_option("--min-members", o.min_members,
                  "Members listed before the first claims");
  cmd->add_option("--max-starts-per-second", o.max_starts_per_second,
                  "Watcher starts a second (one second's burst); also the "
                  "pace of a rebalance's and a graceful leave's hand-over "
                  "[1000]");
  cmd->add_option("--replay-path", o.replay_path, "Replay endpoint")
    ->capture_default_str();
  cmd->add_option("--ws-path", o.ws_path, "Feed WebSocket path ('': none)")
    ->capture_default_str();
  cmd->add_option("--duration", o.duration, "Leave after S seconds (0: never)")
    ->capture_default_str();
  cmd
    ->add_option("--status-interval", o.status_interval,
                 "Status line period on stderr, seconds (0: only on exit)")
    ->capture_default_str();
  cmd->add_flag("--quiet", o.quiet, "No delivery lines");
  cmd->add_flag("--no-hub-probe", o.no_hub_probe,
                "Join without probing the hub first (a hub that starts "
                "after its members)");
  cmd
    ->add_option("--metrics-port", o.metrics_port,
                 "Serve GET /metrics on 127.0.0.1:P (0: a free port, "
                 "printed on stderr; -1: none)")
    ->capture_default_str();
  add_token_tls_options(*cmd, o.cfg);
  return cmd;
}

int run_group_member(caf::actor_system& sys, const group_member_options& opts,
                     std::ostream& out, std::ostream& err) {
  std::vector<std::string> secrets{opts.cfg.token};
  // Every line goes through a writer thread per stream: no actor's thread
  // ever waits for a pipe (line_writer.hpp). std::cerr is tied to
  // std::cout (every write to it flushes std::cout first): untied, or the
  // stderr writer would wait for a stdout nobody reads.
  struct untie {
    std::ostream& s;
    std::ostream* was;
    ~untie() {
      s.tie(was);
    }
  } untied{err, err.tie(nullptr)};
  // The process's own streams are written with write(2) (nothing else
  // writes to them meanwhile): a writer blocked on a pipe then holds no
  // stdio lock that the exit's flush of std::cout would wait for.
  auto writer_for = [](std::ostream& s, std::ostream& standard, int fd) {
    if (&s != &standard)
      return std::make_shared<line_writer>(s);
    s.flush();
    return std::make_shared<line_writer>(fd);
  };
  auto err_writer = writer_for(err, std::cerr, STDERR_FILENO);
  auto out_writer = writer_for(out, std::cout, STDOUT_FILENO);
  try {
    if (!(opts.duration >= 0))
      throw usage_error("--duration must be >= 0");
    if (!(opts.status_interval >= 0))
      throw usage_error("--status-interval must be >= 0");
    auto g = resolve_group(opts);
    auto feeds = resolve_feeds(opts);
    auto cfg = opts.cfg;
    cfg.base_url = opts.base_url;
    cfg.validate();
    if (opts.metrics_port < -1 || opts.metrics_port > 65535)
      throw usage_error("--metrics-port must be -1 (none) or 0..65535");
    auto io = io_runner_for(sys);
    client_options copts;
    copts.io = io;
    feed_group_options fo;
    fo.feed_client = make_service_client(sys, cfg, copts);
    if (!opts.ws_path.empty()) {
      fo.ws = feed_ws_endpoint::from(cfg);
      std::shared_ptr<tls_context> tls;
      if (fo.ws.origin.scheme == "https")
        tls = tls_context::make(cfg.tls);
      fo.connector = make_ws_connector(io, std::move(tls));
    }
    auto lines = std::make_shared<stderr_lines>();
    lines->err = err_writer;
    lines->secrets = secrets;
    // A member that cannot reach the hub would take its share of the
    // feeds from members that can, and deliver nothing: probe before
    // joining. (A ws-only feed set has no replay call to probe with.)
    if (!opts.no_hub_probe && !opts.replay_path.empty()) {
      if (auto e
          = probe_hub(sys, fo.feed_client, feeds.front().cfg, cfg.deadline)) {
        boost::json::object o;
        o["type"] = "failure";
        o["source"] = "hub_probe";
        o["kind"] = to_string(e->kind);
        o["status"] = e->status ? boost::json::value(e->status)
                                : boost::json::value(nullptr);
        o["detail"] = "GET " + opts.base_url + opts.replay_path + ": "
                      + (e->detail.empty() ? to_string(e->kind) : e->detail)
                      + "; not joining the group (--no-hub-probe joins "
                        "without the probe)";
        o["request_id"] = e->request_id;
        {
          std::lock_guard<std::mutex> lock{lines->mu};
          lines->print(o);
        }
        end_actors(sys, {caf::actor_cast<caf::actor>(fo.feed_client)});
        auto code = exit_code(e->kind);
        return code > 2 ? code : internal_exit_code;
      }
    }
    if (g.coordinator.kind == coordinator_kind::memory) {
      fo.store = spawn_memory_lease_store(sys);
    } else {
      etcd_store_options so;
      so.client_cfg = store_client_config(g);
      so.prefix = g.coordinator.prefix;
      so.group = g.name;
      fo.store = spawn_etcd_lease_store(sys, std::move(so));
    }
    // Prometheus: the registry lives as long as the group_metrics that
    // writes to it (the member's actor holds that until it ends).
    std::unique_ptr<metrics_exposer> exposer;
    if (opts.metrics_port >= 0) {
      auto reg = std::make_shared<metrics_registry>();
      fo.metrics
        = std::shared_ptr<group_metrics>(new group_metrics(*reg->registry()),
                                         [reg](group_metrics* m) { delete m; });
      exposer = std::make_unique<metrics_exposer>(
        reg, static_cast<uint16_t>(opts.metrics_port));
      boost::json::object m;
      m["type"] = "metrics";
      m["url"] = exposer->url();
      std::lock_guard<std::mutex> lock{lines->mu};
      lines->print(m);
    }
    // One delivery actor for every watcher: it answers a batch once its
    // lines are written, so a watcher's cursor (and so its checkpoints)
    // never runs ahead of stdout, and a crash loses no acknowledged line.
    auto counts = std::make_shared<delivery_counts>();
    counts->quiet = opts.quiet;
    auto delivery = sys.spawn(delivery_impl, out_writer, counts);
    fo.batch_subscriber = delivery;
    // Each watcher reports its failures (the hub's side) to the stderr
    // lines. The hook takes over spawn_feed_group's checks of the watcher
    // ports, which are all set above.
    fo.spawn_watcher
      = [lines](caf::actor_system& s, feed_config fc, feed_watcher_options wo) {
          auto feed = wo.feed_id;
          wo.on_failure = [lines, feed](const feed_failure& f) {
            report_hub_failure(*lines, feed, f);
          };
          return spawn_feed_watcher(s, std::move(fc), std::move(wo));
        };
    member_stop_signal = 0;
    auto old_int = std::signal(SIGINT, on_member_stop_signal);
    auto old_term = std::signal(SIGTERM, on_member_stop_signal);
    // Kept to end them at the exit (the member holds them too).
    auto feed_client = fo.feed_client;
    auto store = fo.store;
    // A graceful leave hands the feeds over at the start rate (rule G9 of
    // core/group_state.hpp) and gives up at lease_ttl + held / rate; the
    // feed set (at most max_feeds of it) bounds what it can hold.
    auto leave_pacing
      = static_cast<double>(std::min(feeds.size(), g.timing.max_feeds))
        / static_cast<double>(g.timing.max_starts_per_second);
    auto member = spawn_feed_group(sys, g, std::move(feeds), std::move(fo));
    auto t0 = std::chrono::steady_clock::now();
    auto after = [](std::chrono::steady_clock::time_point t, double s) {
      return t
             + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
               std::chrono::duration<double>(s));
    };
    auto next_status = after(t0, opts.status_interval);
    auto next_check = t0 + store_check_every;
    auto next_trim = t0 + heap_trim_every;
    while (!member_stop_signal) {
      auto now = std::chrono::steady_clock::now();
      if (opts.duration > 0
          && now - t0 >= std::chrono::duration<double>(opts.duration))
        break;
      bool status_due = opts.status_interval > 0 && now >= next_status;
      if (status_due || now >= next_check) {
        if (auto s = ask(sys, member, 5.0, false)) {
          report_store_errors(*lines, *s);
          if (status_due) {
            std::lock_guard<std::mutex> lock{lines->mu};
            lines->print(status_json(*s, *lines));
          }
        }
        next_check = now + store_check_every;
        if (status_due)
          next_status = after(now, opts.status_interval);
      }
      if (now >= next_trim) {
        release_free_heap();
        next_trim = now + heap_trim_every;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    // Graceful leave: the feeds handed over at the start rate, the lease
    // revoked. The leave ends by lease_ttl + held / rate (G9), and its
    // revoke answers within the store time-out (lease_ttl). The handlers
    // stay: a second SIGTERM during the leave changes nothing.
    auto final
      = ask(sys, member, 2 * g.timing.lease_ttl + leave_pacing + 10.0, true);
    std::signal(SIGINT, old_int);
    std::signal(SIGTERM, old_term);
    if (final)
      report_store_errors(*lines, *final);
    // What the exit line and code say, most telling first: no answer, never
    // joined, a leave that left feeds or the lease behind, a clean leave.
    const char* outcome = "left";
    int code = 0;
    if (!final || final->phase != group_phase::left) {
      outcome = "no_answer";
      code = internal_exit_code;
    } else if (!final->joined) {
      outcome = "never_joined";
      code = never_joined_exit_code;
    } else if (final->unreleased > 0 || final->revoke_failed) {
      outcome = "left_unclean";
      code = unclean_leave_exit_code;
    }
    // The delivery lines before the exit line: stdout takes what was
    // handed to it, within a bound (a stdout nobody reads does not keep
    // the process; a line not written was not acknowledged, so the feed's
    // next owner delivers it again).
    counts->quiet = true;
    bool stdout_complete = out_writer->close(stdout_drain_bound);
    {
      std::lock_guard<std::mutex> lock{lines->mu};
      auto st = final ? status_json(*final, *lines) : boost::json::object{};
      st["type"] = "exit";
      st["events"] = counts->events.load();
      st["resets"] = counts->resets.load();
      st["stdout_complete"] = stdout_complete;
      st["left"] = final && final->phase == group_phase::left;
      st["outcome"] = outcome;
      st["failures_suppressed"] = lines->throttle.suppressed();
      lines->print(st);
      lines->closed = true;
    }
    end_actors(sys, {caf::actor_cast<caf::actor>(member),
                     caf::actor_cast<caf::actor>(feed_client),
                     caf::actor_cast<caf::actor>(store),
                     caf::actor_cast<caf::actor>(delivery)});
    err_writer->close(stdout_drain_bound);
    return code;
  } catch (const config_error& e) {
    err_writer->post(redact(usage_error_json("config_error", e.what()), secrets)
                     + '\n');
    err_writer->close(stdout_drain_bound);
    return usage_exit_code;
  } catch (const usage_error& e) {
    err_writer->post(redact(usage_error_json("usage_error", e.what()), secrets)
                     + '\n');
    err_writer->close(stdout_drain_bound);
    return usage_exit_code;
  } catch (const std::exception& e) {
    err_writer->post(
      redact(usage_error_json("internal_error", e.what()), secrets) + '\n');
    err_writer->close(stdout_drain_bound);
    return internal_exit_code;
  }
}

} // namespace outbound::apps
