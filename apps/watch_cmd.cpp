#include "apps/watch_cmd.hpp"

#include "apps/failure_throttle.hpp"
#include "apps/request_cmd.hpp"

#include "actors/client/service_client.hpp"
#include "actors/feed/feed_messages.hpp"
#include "actors/feed/feed_watcher.hpp"
#include "actors/messages.hpp"
#include "actors/system/system_setup.hpp"
#include "config/config_error.hpp"
#include "core/text.hpp"
#include "protocol/io_runner.hpp"
#include "protocol/tls_context.hpp"
#include "protocol/ws_session.hpp"

#include <CLI/CLI.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <array>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

namespace outbound::apps {

namespace {

volatile std::sig_atomic_t stop_signal = 0;

extern "C" void on_stop_signal(int) {
  stop_signal = 1;
}

template <class T>
boost::json::value opt_json(const std::optional<T>& v) {
  if (v)
    return boost::json::value(*v);
  return nullptr;
}

std::string reset_line(const feed_reset& r) {
  boost::json::object o;
  o["type"] = "reset";
  o["mode"] = to_string(r.mode);
  o["cause"] = to_string(r.cause);
  o["from_cursor"] = opt_json(r.from_cursor);
  o["to_cursor"] = opt_json(r.to_cursor);
  o["last_seq"] = opt_json(r.last_seq);
  o["new_seq"] = opt_json(r.new_seq);
  o["old_epoch"] = opt_json(r.old_epoch);
  o["new_epoch"] = opt_json(r.new_epoch);
  o["lost_from"] = opt_json(r.lost_from);
  o["lost_to"] = opt_json(r.lost_to);
  if (r.cause == reset_cause::undeliverable) {
    o["event_id"] = opt_json(r.event_id);
    o["reason"] = r.reason;
  }
  return boost::json::serialize(o);
}

std::string failure_line(const feed_failure& f, uint64_t suppressed = 0) {
  boost::json::object o;
  o["type"] = "failure";
  o["source"] = f.source;
  o["kind"] = f.kind;
  o["status"] = f.status ? boost::json::value(f.status)
                         : boost::json::value(nullptr);
  o["detail"] = f.detail;
  o["request_id"] = f.request_id;
  if (!f.reason.empty())
    o["reason"] = f.reason;
  if (f.after)
    o["after"] = *f.after;
  if (f.limit)
    o["limit"] = *f.limit;
  if (suppressed > 0)
    o["repeats_suppressed"] = suppressed;
  return boost::json::serialize(o);
}

/// How long a repeated failure cause stays quiet after its line.
constexpr auto failure_repeat_after = std::chrono::seconds(60);

/// The cause of a failure, as failure_throttle compares them: everything
/// but the per-call request id and query.
std::string failure_key(const feed_failure& f) {
  return f.source + '\n' + f.kind + '\n' + std::to_string(f.status) + '\n'
         + f.reason + '\n' + f.detail;
}

/// What the callbacks share with the waiting main thread.
struct watch_sink {
  std::mutex mu;
  std::condition_variable cv;
  std::ostream* out = nullptr;
  uint64_t limit = 0;
  uint64_t events = 0;
  uint64_t resets = 0;
  /// Failures reported (one stderr line each), and the last one's kind.
  std::ostream* err = nullptr;
  std::vector<std::string> secrets;
  uint64_t failures = 0;
  /// The last failure with an error kind of one side of the feed.
  struct side {
    std::optional<error_kind> error;
    int status = 0;
    std::string text;
  };
  /// Replay calls and pages: the source of the events (a read page is
  /// what `reached` means when a replay path is set).
  side replay;
  /// WebSocket sessions.
  side websocket;
  /// The last failure's line, whatever its source, for the give-up reason
  /// when no failure had an error kind.
  std::string last_failure;
  failure_throttle throttle{failure_repeat_after};
  /// Set on exit: nothing more is printed.
  bool closed = false;
  /// A callback holds a delivery it did not print (park) until the
  /// watcher is stopped: returning would acknowledge it, and the cursor
  /// would pass an event never printed (a resume from the summary's cursor
  /// would skip it).
  bool parked = false;
  bool released = false;
  /// The paths the replay calls and the WebSocket ask for (BASE_URL's path
  /// and --replay-path / --ws-path), named when the server answers 404.
  std::string replay_target;
  std::string ws_target;

  /// The failure that decides the exit code and the give-up line: the last
  /// replay failure when there was one (replay is the source of the
  /// events), else the last WebSocket failure; nullptr when none had an
  /// error kind. Whichever came last in time does not matter.
  const side* deciding() const {
    if (replay.error)
      return &replay;
    if (websocket.error)
      return &websocket;
    return nullptr;
  }

  bool done() const {
    return closed || (limit > 0 && events >= limit);
  }

  /// Holds the calling callback (under `lock`) until release().
  void park(std::unique_lock<std::mutex>& lock) {
    parked = true;
    cv.notify_all();
    cv.wait(lock, [this] { return released; });
  }

  /// The watcher is stopped (or the command ends): parked callbacks return.
  void release() {
    std::lock_guard<std::mutex> lock{mu};
    released = true;
    cv.notify_all();
  }
};

} // namespace

watch_options::watch_options() {
  feed.replay_path = "/v1/events";
  feed.ws_path = "/ws/feed";
}

// Over 80 lines on purpose: the command's option table, one CLI11
// statement per option, read top to bottom like its --help.
CLI::App* add_watch_command(CLI::App& app, watch_options& opts) {
  auto* cmd = app.add_subcommand(
    "watch", "Follow a change feed: one JSON line per event or reset on "
             "stdout, a summary line on stderr on exit");
  cmd->footer(
    "Output: {\"type\":\"event\",\"mode\":...,\"id\"|\"seq\":...,"
    "\"event\":{...}} or {\"type\":\"reset\",\"mode\",\"cause\",...} per "
    "line. A reset says what can no longer be delivered: the events after "
    "lost_from up to and including lost_to (lost_from null: from the "
    "feed's start; lost_to null: the end is unknown; equal: an empty "
    "range, nothing missed); its cause is in the README's reset table. A "
    "rewind's old_epoch and new_epoch name the old and the new ledger "
    "(old_epoch null: unknown, e.g. a cursor resumed without "
    "--ledger-epoch).\n"
    "Ends after --count events (resets are not counted), after --duration "
    "seconds, or on "
    "SIGINT/SIGTERM: the watcher stops, the summary goes to stderr. To "
    "resume, pass its cursor and ledger_epoch as --cursor and "
    "--ledger-epoch (ledger), or its client_id, last_seq and epoch as "
    "--client-id, --last-seq and --epoch (catch-up; its mode says which). "
    "After --count they are the last printed event; after --duration or a "
    "signal, a batch cut short is not acknowledged and a resume prints it "
    "again (never a gap).\n"
    "Failures (replay errors, unreadable pages, WebSocket failures) are "
    "JSON lines on stderr as they happen, one per distinct cause (a "
    "repeat again after 60 s).\nNot reached within --fail-after seconds "
    "(default 30): a \"fail_after\" failure line with the reason, the "
    "summary, exit non-zero.\nExit codes: 0 the feed was reached; never "
    "reached (or --fail-after gave up): 3 auth_error, 4 request_error, 5 "
    "server_error, 6 response_error, 7 service_unavailable (the kind of "
    "the last replay failure, else of the last WebSocket failure; 7 when "
    "nothing answered); 2 usage/config_error, 1 "
    "internal_error.");
  auto& f = opts.feed;
  cmd->add_option("base_url", opts.base_url, "The hub's base URL")->required();
  cmd
    ->add_option("--replay-path", f.replay_path,
                 "Replay endpoint ('' : no ledger)")
    ->capture_default_str();
  cmd->add_option("--ws-path", f.ws_path, "Feed WebSocket path ('': poll only)")
    ->capture_default_str();
  cmd->add_option("--prefix", f.prefixes,
                  "Subject prefix to follow (repeatable; none: all)");
  cmd->add_option("--cursor", f.cursor, "Ledger cursor to start after")
    ->capture_default_str();
  cmd
    ->add_option("--ledger-epoch", opts.ledger_epoch,
                 "Ledger epoch --cursor was read in (a summary's "
                 "ledger_epoch): a hub in another epoch is a rewind reset "
                 "from the new ledger's start, not a cursor that skips "
                 "its first events")
    ->each([&opts](const std::string&) { opts.ledger_epoch_given = true; });
  cmd->add_option("--limit", f.limit, "Replay page size")
    ->capture_default_str();
  cmd
    ->add_option("--poll-interval", f.poll_interval,
                 "Ledger poll tick, seconds")
    ->capture_default_str();
  cmd->add_option("--client-id", f.client_id,
                  "Stable catch-up client id (default: generated; the "
                  "summary's client_id): the hub keeps a replay window per "
                  "client id");
  cmd
    ->add_option("--last-seq", opts.last_seq,
                 "Catch-up resume: a summary's last_seq, with its "
                 "--client-id and --epoch (unless the summary's epoch is "
                 "null): the hub replays what follows it instead of a "
                 "resync")
    ->each([&opts](const std::string&) { opts.last_seq_given = true; });
  cmd
    ->add_option("--epoch", opts.epoch,
                 "Hub epoch --last-seq was read in (a summary's epoch): a hub "
                 "in another epoch answers with an epoch_changed reset")
    ->each([&opts](const std::string&) { opts.epoch_given = true; });
  cmd
    ->add_option("--ping-interval", f.ws_ping_interval,
                 "WebSocket keepalive ping period, seconds (0: off)")
    ->capture_default_str();
  auto& n = f.fields;
  cmd->add_option("--events-field", n.events, "Replay page events field")
    ->capture_default_str();
  cmd->add_option("--cursor-field", n.cursor, "Replay page cursor field")
    ->capture_default_str();
  cmd->add_option("--reset-field", n.reset, "Replay page reset field")
    ->capture_default_str();
  cmd
    ->add_option("--epoch-field", n.epoch,
                 "Replay page (and ledger hello) incarnation id field")
    ->capture_default_str();
  cmd->add_option("--id-field", n.event_id, "Event id field")
    ->capture_default_str();
  cmd
    ->add_option("--wake-cursor-field", n.wake_cursor,
                 "Wake frame cursor field")
    ->capture_default_str();
  cmd->add_option("--after-param", n.after_param, "Replay 'after' parameter")
    ->capture_default_str();
  cmd->add_option("--limit-param", n.limit_param, "Replay 'limit' parameter")
    ->capture_default_str();
  cmd->add_option("--prefix-param", n.prefix_param, "Replay prefix parameter")
    ->capture_default_str();
  cmd->add_option("--param", opts.params,
                  "Extra replay query parameter k=v (repeatable)");
  add_token_tls_options(*cmd, opts.cfg);
  // Not listed: a user who knows the hub's --mode tries it here first.
  cmd->add_option("--mode", opts.mode)
    ->group("")
    ->each([&opts](const std::string&) { opts.mode_given = true; });
  cmd->add_option("--count", opts.count, "Exit after N events (0: never)")
    ->check(whole_number("events", "N"))
    ->capture_default_str();
  cmd
    ->add_option("--duration", opts.duration, "Exit after S seconds (0: never)")
    ->capture_default_str();
  cmd
    ->add_option("--fail-after", opts.fail_after,
                 "Give up (exit non-zero, the reason on stderr) when the "
                 "feed was not reached within S seconds of the start; once "
                 "reached, later outages are ridden out (0: never give up)")
    ->capture_default_str();
  cmd
    ->add_option("--json-max-depth", opts.json_max_depth,
                 "Nesting limit of replay pages and WebSocket messages "
                 "(1..1024); an event nested deeper is an undeliverable "
                 "reset")
    ->capture_default_str();
  cmd
    ->add_option("--max-response-bytes", f.replay_max_response_bytes,
                 "Cap on one replay response, bytes (0: the client's, 32 "
                 "MiB); a page over it is narrowed, not lost")
    ->capture_default_str();
  return cmd;
}

namespace {

/// The client and feed settings of the command line, checked: throws
/// usage_error for a bad --duration, --fail-after or --param, config_error
/// for a bad feed setting.
std::pair<client_config, feed_config> resolve_watch(const watch_options& opts) {
  if (opts.mode_given)
    throw usage_error(
      "watch has no --mode (the hub's option): the watcher follows the "
      "model the hub's hello names; to follow one tier alone, give its "
      "path: --ws-path /ws/catchup --replay-path '' (catch-up), --ws-path "
      "/ws/ephemeral --replay-path '' (ephemeral); the defaults follow the "
      "ledger");
  if (opts.duration < 0)
    throw usage_error("--duration must be >= 0");
  if (!(opts.fail_after >= 0))
    throw usage_error("--fail-after must be >= 0");
  auto fc = opts.feed;
  if (opts.ledger_epoch_given) {
    if (!fc.has_replay())
      throw usage_error("--ledger-epoch needs the replay path (--replay-path "
                        "is empty: there is no ledger cursor to resume)");
    if (opts.ledger_epoch.empty() || core::has_ctl(opts.ledger_epoch))
      throw usage_error("--ledger-epoch must be a summary's ledger_epoch: "
                        "not empty, no control characters");
    fc.resume_ledger_epoch = opts.ledger_epoch;
  }
  if (opts.last_seq_given) {
    if (opts.last_seq < 0)
      throw usage_error("--last-seq must be >= 0, got "
                        + std::to_string(opts.last_seq));
    if (fc.client_id.empty())
      throw usage_error("--last-seq needs --client-id, the summary's "
                        "client_id: the hub keeps its replay window per "
                        "client id");
    fc.resume_last_seq = opts.last_seq;
  }
  if (opts.epoch_given) {
    if (!opts.last_seq_given)
      throw usage_error("--epoch needs --last-seq (the seq it was read in)");
    if (opts.epoch.empty() || core::has_ctl(opts.epoch))
      throw usage_error("--epoch must be a summary's epoch: not empty, no "
                        "control characters");
    fc.resume_epoch = opts.epoch;
  }
  for (auto& p : opts.params) {
    auto eq = p.find('=');
    if (eq == std::string::npos || eq == 0)
      throw usage_error("--param must be k=v: '" + p + "'");
    fc.fields.extra_params.emplace_back(p.substr(0, eq), p.substr(eq + 1));
  }
  auto cfg = opts.cfg;
  cfg.base_url = opts.base_url;
  // One limit for both readers: an event reads the same in a frame as in a
  // replay page.
  cfg.json_max_depth = opts.json_max_depth;
  fc.json_max_depth = opts.json_max_depth;
  fc.validate();
  return {std::move(cfg), std::move(fc)};
}

/// The watcher's callbacks: each event and reset a line on the sink's
/// stdout, each failure a throttled line on its stderr.
void print_to(const std::shared_ptr<watch_sink>& sink,
              feed_watcher_options& wo) {
  wo.callbacks.on_event = [sink](const feed_event& e) {
    std::unique_lock<std::mutex> lock{sink->mu};
    if (sink->done())
      return sink->park(lock);
    // One shape in every tier: the model that delivered it and its
    // position (ledger: the event's id; in-frame: the frame's seq), then the
    // event as the hub sent it (a replay page's element, or the whole event
    // frame: feed_event::event).
    boost::json::object o;
    o["type"] = "event";
    o["mode"] = to_string(e.mode);
    if (e.mode == feed_mode::ledger)
      o["id"] = opt_json(e.id);
    else
      o["seq"] = opt_json(e.seq);
    o["event"] = e.event;
    *sink->out << boost::json::serialize(o) << '\n' << std::flush;
    ++sink->events;
    sink->cv.notify_all();
  };
  wo.callbacks.on_reset = [sink](const feed_reset& r) {
    std::unique_lock<std::mutex> lock{sink->mu};
    if (sink->done())
      return sink->park(lock);
    *sink->out << reset_line(r) << '\n' << std::flush;
    ++sink->resets;
  };
  // Runs on the watcher's thread: a quick, locked write.
  wo.on_failure = [sink](feed_failure f) {
    std::lock_guard<std::mutex> lock{sink->mu};
    // A 404 is most often a BASE_URL given with the feed's path in it.
    if (f.status == 404) {
      auto& target
        = f.source == "websocket" ? sink->ws_target : sink->replay_target;
      if (!target.empty())
        f.detail += " (asked " + target + ": BASE_URL's path followed by --"
                    + (f.source == "websocket" ? "ws" : "replay")
                    + "-path; BASE_URL is the hub's root)";
    }
    ++sink->failures;
    sink->last_failure = f.source + ": " + f.kind
                         + (f.status ? " " + std::to_string(f.status) : "")
                         + (f.detail.empty() ? "" : ": " + f.detail);
    if (f.error) {
      auto& side = f.source == "websocket" ? sink->websocket : sink->replay;
      side.error = f.error;
      side.status = f.status;
      side.text = sink->last_failure;
    }
    if (sink->closed)
      return;
    uint64_t suppressed = 0;
    if (!sink->throttle.admit(failure_key(f), std::chrono::steady_clock::now(),
                              suppressed))
      return;
    *sink->err << redact(failure_line(f, suppressed), sink->secrets) << '\n'
               << std::flush;
  };
}

/// Waits until --count events, --duration, a stop signal, or --fail-after
/// with the feed never reached; true in the last case (the run gave up).
bool wait_for_the_end(caf::actor_system& sys, const feed_watcher_actor& w,
                      watch_sink& sink, const watch_options& opts) {
  auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock{sink.mu};
  bool reach_checked = opts.fail_after <= 0;
  for (;;) {
    if (sink.done() || stop_signal)
      return false;
    auto elapsed = std::chrono::steady_clock::now() - t0;
    if (opts.duration > 0
        && elapsed >= std::chrono::duration<double>(opts.duration))
      return false;
    if (!reach_checked
        && elapsed >= std::chrono::duration<double>(opts.fail_after)) {
      // Not under the lock: the watcher's failure reports take it.
      lock.unlock();
      bool reached = false;
      caf::scoped_actor self{sys};
      self->request(w, std::chrono::seconds(5), stats_atom_v)
        .receive([&](const feed_stats& s) { reached = s.reached; },
                 [&](const caf::error&) {});
      lock.lock();
      reach_checked = true;
      if (!reached)
        return true;
    }
    sink.cv.wait_for(lock, std::chrono::milliseconds(50));
  }
}

/// Closes the sink and stops the watcher, answering its final stats. A
/// delivery after the last printed event is held unacknowledged by its
/// callback (watch_sink::park) and dropped with the watcher, so the
/// summary's cursor never passes an event not printed. The last printed
/// delivery is acknowledged just after its callback returns: the watcher
/// gets a moment (bounded) for it. With --count every event is a delivery
/// of its own, so the cursor is the last printed event; otherwise a page
/// cut short by the end is not acknowledged, and a resume repeats its
/// printed part (at least once, never a gap).
feed_stats stop_printing(caf::actor_system& sys, const feed_watcher_actor& w,
                         watch_sink& sink) {
  feed_stats st;
  caf::scoped_actor self{sys};
  uint64_t printed = 0;
  {
    std::lock_guard<std::mutex> lock{sink.mu};
    sink.closed = true;
    printed = sink.events;
  }
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  int parked_polls = 0;
  while (std::chrono::steady_clock::now() < until) {
    feed_stats cur;
    self->request(w, std::chrono::seconds(1), stats_atom_v)
      .receive([&](const feed_stats& s) { cur = s; },
               [&](const caf::error&) {});
    if (cur.events_delivered >= printed)
      break;
    {
      // A parked callback: nothing more is acknowledged than what is in
      // flight now (a batch whose rest parked never is).
      std::lock_guard<std::mutex> lock{sink.mu};
      if (sink.parked && ++parked_polls > 4)
        break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  self->request(w, std::chrono::seconds(5), stop_atom_v)
    .receive([&](const feed_stats& s) { st = s; }, [&](const caf::error&) {});
  sink.release(); // the watcher is gone: nothing it held is acknowledged
  return st;
}

/// Counts by reason, the reasons named (those with a count only).
template <class Reason, std::size_t N>
boost::json::object by_reason(const std::array<uint64_t, N>& counts) {
  boost::json::object o;
  for (std::size_t r = 0; r < N; ++r)
    if (counts[r] > 0)
      o[to_string(static_cast<Reason>(r))] = counts[r];
  return o;
}

/// The summary line's object, but for the failures and the outcome.
boost::json::object summary_of(const feed_stats& st, uint64_t events,
                               uint64_t resets, bool has_replay) {
  boost::json::object sum;
  // The acknowledged (printed) ledger position and the incarnation it
  // belongs to: resume with both (--cursor, --ledger-epoch), or a replaced
  // ledger whose head passed the cursor would be followed from there, its
  // first events skipped. While a rewind's reset is unprinted, still the
  // old ledger's. Without a replay path there is no ledger cursor (null, as
  // last_seq is without in-frame events).
  if (has_replay)
    sum["cursor"] = opt_json(st.acked_cursor);
  else
    sum["cursor"] = nullptr;
  sum["ledger_epoch"] = opt_json(st.acked_ledger_epoch);
  // In-frame: the last printed (acknowledged) seq, its hub epoch and the
  // client id, catchup's resume key (--client-id, --last-seq, --epoch).
  sum["last_seq"] = opt_json(st.acked_seq);
  sum["epoch"] = opt_json(st.acked_epoch);
  sum["client_id"] = st.client_id;
  // The tier the watch ended in: which resume key applies.
  sum["mode"] = to_string(st.mode);
  sum["events"] = events;
  sum["resets"] = resets;
  sum["drain_errors"] = st.drain_errors;
  sum["reconnects"] = st.reconnects;
  sum["peer_timeouts"] = st.peer_timeouts;
  sum["replay_errors"] = st.replay_errors;
  sum["drain_errors_by_reason"]
    = by_reason<drain_error_reason>(st.drain_errors_by_reason);
  sum["unreadable_frames"] = st.unreadable_frames;
  sum["unreadable_frames_by_reason"]
    = by_reason<frame_error_reason>(st.unreadable_frames_by_reason);
  sum["undeliverable"]
    = st.resets_by_cause[static_cast<std::size_t>(reset_cause::undeliverable)];
  sum["wakes_coalesced"] = st.wakes_coalesced;
  return sum;
}

/// The one-line reason of a run that gave up, also when nothing failed: a
/// server that accepts and never answers leaves a replay call and a
/// handshake waiting, and no failure has been reported when the time is up.
feed_failure gave_up_failure(const watch_options& opts, error_kind kind,
                             int last_status, const std::string& last_failure) {
  feed_failure f;
  f.source = "fail_after";
  f.kind = to_string(kind);
  f.status = last_status;
  std::ostringstream d;
  d << "gave up: the feed at " << opts.base_url
    << " was not reached within --fail-after " << opts.fail_after << " s; "
    << (last_failure.empty()
          ? "no answer from the server (nothing failed and nothing "
            "arrived: a connection, replay call or WebSocket handshake "
            "is still waiting)"
          : "last failure: " + last_failure);
  f.detail = d.str();
  return f;
}

/// Writes the summary (and the give-up reason) to `err`; the exit code.
int report(const watch_options& opts, const feed_stats& st, watch_sink& sink,
           bool gave_up, bool has_replay, std::ostream& err) {
  std::optional<error_kind> last_error;
  int last_status = 0;
  std::string last_failure;
  boost::json::object sum;
  {
    std::lock_guard<std::mutex> lock{sink.mu};
    sink.closed = true;
    sum = summary_of(st, sink.events, sink.resets, has_replay);
    sum["failures"] = sink.failures;
    sum["failures_suppressed"] = sink.throttle.suppressed();
    last_failure = sink.last_failure;
    if (auto* d = sink.deciding()) {
      last_error = d->error;
      last_status = d->status;
      last_failure = d->text;
    }
  }
  sum["reached"] = st.reached;
  if (gave_up)
    sum["gave_up"] = true;
  auto kind = last_error.value_or(error_kind::service_unavailable);
  if (gave_up && !st.reached)
    err << redact(
      failure_line(gave_up_failure(opts, kind, last_status, last_failure)),
      sink.secrets)
        << '\n';
  err << redact(boost::json::serialize(sum), sink.secrets) << '\n';
  // Never reached the feed: a broken feed is not a quiet one.
  return st.reached ? 0 : exit_code(kind);
}

} // namespace

int run_watch(caf::actor_system& sys, const watch_options& opts,
              std::ostream& out, std::ostream& err) {
  std::vector<std::string> secrets{opts.cfg.token};
  try {
    auto [cfg, fc] = resolve_watch(opts);
    // The io_loop policy's workers run the sockets (else the shared runner).
    auto io = io_runner_for(sys);
    client_options copts;
    copts.io = io;
    auto client = make_service_client(sys, cfg, copts);
    auto sink = std::make_shared<watch_sink>();
    sink->out = &out;
    sink->err = &err;
    sink->secrets = secrets;
    sink->limit = opts.count;
    // BASE_URL's path (the client accepted the URL), then each side's own.
    auto base_path = url_parts::parse(cfg.base_url).path;
    if (fc.has_replay())
      sink->replay_target = base_path + fc.replay_path;
    if (fc.has_ws())
      sink->ws_target = base_path + fc.ws_path;
    feed_watcher_options wo;
    wo.client = client;
    if (fc.has_ws()) {
      wo.ws = feed_ws_endpoint::from(cfg);
      std::shared_ptr<tls_context> tls;
      if (wo.ws.origin.scheme == "https")
        tls = tls_context::make(cfg.tls);
      wo.connector = make_ws_connector(io, std::move(tls));
    }
    print_to(sink, wo);
    // A page's events go to the callbacks as one batch, acknowledged whole;
    // with --count each goes alone, so that the last printed one is
    // acknowledged and the next one is not (it parks): the summary's cursor
    // is then exactly the last printed event. Ended otherwise (--duration,
    // a signal), a batch cut short is not acknowledged at all.
    if (opts.count > 0)
      wo.max_delivery_batch = 1;
    // However the command ends, a callback parked on a delivery it did not
    // print returns (after stop_printing's stop, or on an exception).
    auto release_parked = [](watch_sink* s) {
      s->release();
    };
    std::unique_ptr<watch_sink, decltype(release_parked)> releaser{
      sink.get(), release_parked};
    stop_signal = 0;
    auto old_int = std::signal(SIGINT, on_stop_signal);
    auto old_term = std::signal(SIGTERM, on_stop_signal);
    auto w = spawn_feed_watcher(sys, fc, std::move(wo));
    bool gave_up = false;
    feed_stats st;
    try {
      gave_up = wait_for_the_end(sys, w, *sink, opts);
      st = stop_printing(sys, w, *sink);
    } catch (...) {
      // Left running, the watcher and the client would keep the actor
      // system (and so the process) alive for ever.
      caf::anon_send_exit(w, caf::exit_reason::user_shutdown);
      std::signal(SIGINT, old_int);
      std::signal(SIGTERM, old_term);
      w = nullptr;
      end_actors(sys, {caf::actor_cast<caf::actor>(client)});
      throw;
    }
    std::signal(SIGINT, old_int);
    std::signal(SIGTERM, old_term);
    // The watcher is gone; the client may still have a replay call in
    // flight (a server that accepted and never answers keeps it until the
    // client's deadline, 30 s by default). End the client (and with it the
    // pool it spawned, which holds the call's response promise and so the
    // client: a reference cycle until the exchange ends), give the actors a
    // moment to finish, and then let the process end without waiting for
    // them: the summary is all that is left to do.
    w = nullptr;
    wo = {};
    end_actors(sys, {caf::actor_cast<caf::actor>(client)});
    return report(opts, st, *sink, gave_up, fc.has_replay(), err);
  } catch (const config_error& e) {
    err << redact(usage_error_json("config_error", e.what()), secrets) << '\n';
    return usage_exit_code;
  } catch (const usage_error& e) {
    err << redact(usage_error_json("usage_error", e.what()), secrets) << '\n';
    return usage_exit_code;
  } catch (const std::exception& e) {
    err << redact(usage_error_json("internal_error", e.what()), secrets)
        << '\n';
    return internal_exit_code;
  }
}

} // namespace outbound::apps
