#include "apps/oracle_cmd.hpp"

#include "apps/request_cmd.hpp"

#include "actors/coalesce/batcher.hpp"
#include "actors/coalesce/coalescing_driver.hpp"
#include "actors/coalesce/oracle_request.hpp"
#include "actors/messages.hpp"
#include "config/coalesce_config.hpp"
#include "config/config_error.hpp"
#include "core/text.hpp"
#include "protocol/errors.hpp"
#include "protocol/tls_context.hpp"

#include <CLI/CLI.hpp>
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace outbound::apps {

namespace {

/// The failure line of `outbound request` (apps/request_cmd.cpp), so
/// scripts parse both commands' errors alike.
std::string error_json(const call_error& e) {
  boost::json::object o;
  o["error"] = to_string(e.kind);
  if (e.status == 0)
    o["status"] = nullptr;
  else
    o["status"] = e.status;
  o["detail"] = e.detail;
  o["attempts"] = e.attempts;
  o["request_id"] = e.request_id;
  o["nothing_sent"] = e.nothing_sent;
  o["nothing_billed"] = e.nothing_billed;
  // Why the retry loop stopped short of its policy; null when it did not.
  if (e.reason == give_up_reason::none)
    o["reason"] = nullptr;
  else
    o["reason"] = to_string(e.reason);
  return boost::json::serialize(o);
}

bool starts_with_https(const std::string& s) {
  return core::starts_with_ci(s, "https://");
}

/// `Name: value` → (Name, value), as `outbound request --header`. The
/// value is never echoed in an error: it may carry a credential.
std::pair<std::string, std::string> split_header(const std::string& h) {
  auto kv = core::split_field_line(h);
  if (!kv)
    throw config_error("--header", header_argument_problem(h));
  if (core::iequals(kv->first, "x-request-id"))
    throw config_error("--header", "x-request-id is set by the coalescing "
                                   "driver, one per RPC");
  return std::move(*kv);
}

/// The driver's configuration from the options; throws config_error naming
/// the option or the coalesce_config field.
coalesce_config make_config(const oracle_options& o) {
  if (!(o.timeout > 0) || !std::isfinite(o.timeout))
    throw config_error("--timeout", "must be a number of seconds > 0");
  coalesce_config c;
  c.endpoints = o.endpoints;
  c.token = o.cfg.token;
  c.token_header = o.cfg.token_header;
  c.token_scheme = o.cfg.token_scheme;
  for (auto& h : o.headers)
    c.default_headers.push_back(split_header(h));
  c.tls = o.tls || o.cfg.tls.any()
          || std::any_of(o.endpoints.begin(), o.endpoints.end(),
                         starts_with_https);
  c.retry.overall = o.timeout;
  c.retry.per_attempt = std::min(c.retry.per_attempt, o.timeout);
  c.json_max_depth = o.json_max_depth;
  c.validate();
  check_oracle_requests(c);
  if (c.tls) {
    // The pools build their TLS context inside the driver; a file that
    // does not load must fail here, naming its option, not in an actor.
    o.cfg.tls.validate();
    tls_context::make(o.cfg.tls);
  }
  return c;
}

/// One call through a fresh driver: its reply, or nullopt when the driver
/// did not answer (a bug; the detail goes to `caf_error`).
template <class Call>
std::optional<coalesce_reply>
call_once(caf::actor_system& sys, const oracle_options& o,
          const coalesce_config& c, Call call, std::ostream& err,
          std::string& caf_error) {
  coalesce_options copts;
  copts.tls_template = o.cfg;
  auto driver = make_coalescing_driver(sys, c, copts);
  caf::scoped_actor self{sys};
  // The driver answers within its overall budget; the slack only guards
  // against a driver that never answers.
  auto bound = std::chrono::milliseconds(
                 static_cast<int64_t>(std::ceil(o.timeout * 1000)))
               + std::chrono::seconds{5};
  std::optional<coalesce_reply> reply;
  self->request(driver, bound, std::move(call))
    .receive([&](coalesce_reply& r) { reply = std::move(r); },
             [&](caf::error& e) { caf_error = sys.render(e); });
  if (o.verbose) {
    self->request(driver, std::chrono::seconds{5}, stats_atom_v)
      .receive(
        [&](coalesce_stats& s) {
          boost::json::object st;
          st["calls"] = s.calls;
          st["calls_failed"] = s.calls_failed;
          st["rpcs"] = s.batches.rpcs;
          st["batches"] = s.batches.batches;
          st["attempts"] = s.attempts;
          st["redirects"] = s.redirects;
          st["leader_changes"] = s.leader_changes;
          st["rpc_errors"] = s.rpc_errors;
          st["uncertain"] = s.uncertain;
          st["leader_endpoint"] = s.leader_endpoint;
          if (s.leader_epoch)
            st["leader_epoch"] = *s.leader_epoch;
          else
            st["leader_epoch"] = nullptr;
          st["transports"] = s.transports;
          boost::json::object line;
          line["coalesce"] = std::move(st);
          err << boost::json::serialize(line) << '\n';
        },
        [](caf::error&) {});
  }
  self->send_exit(driver, caf::exit_reason::user_shutdown);
  return reply;
}

void add_common_options(CLI::App& cmd, oracle_options& o,
                        const char* key_option) {
  cmd
    .add_option("--endpoints", o.endpoints,
                "Oracle nodes, comma-separated: host:port or "
                "http(s)://host:port (any order; the leader is found through "
                "leader hints)")
    ->required()
    ->delimiter(',')
    ->type_name("ENDPOINT[,ENDPOINT...]");
  cmd
    .add_option("--timeout", o.timeout,
                "Overall budget of the call in seconds (attempts, redirects, "
                "backoffs and election ride-out together)")
    ->capture_default_str();
  cmd
    .add_option("--json-max-depth", o.json_max_depth,
                "Maximum nesting depth of the oracle's response bodies, "
                "1..1024")
    ->capture_default_str();
  cmd.add_flag("--tls", o.tls,
               "Bare host:port endpoints are https; http:// leader hints are "
               "dropped (implied by the TLS options and https:// endpoints)");
  cmd.add_option("--ca-file", o.cfg.tls.ca_file,
                 "PEM CA file that verifies the nodes (default: system trust "
                 "store)");
  cmd.add_option("--cert", o.cfg.tls.client_cert_file,
                 "PEM client certificate for mTLS (with the key option)");
  cmd.add_option(key_option, o.cfg.tls.client_key_file,
                 "PEM private key of --cert");
  cmd.add_option("--token", o.cfg.token,
                 "Credential sent on every oracle request (never printed)");
  cmd
    .add_option("--token-header", o.cfg.token_header,
                "Header that carries the credential")
    ->capture_default_str();
  cmd
    .add_option("--token-scheme", o.cfg.token_scheme,
                "Scheme before the token; '' sends the raw token")
    ->capture_default_str();
  cmd
    .add_option("--header", o.headers,
                "Extra request header 'K: V' on every oracle request, "
                "repeatable (not x-request-id: one per RPC)")
    ->take_all();
  cmd.add_flag("--verbose", o.verbose,
               "The driver's counters as one JSON line on stderr");
  cmd.footer(
    "Failure: one JSON line on stderr {\"error\",\"status\",\"detail\","
    "\"attempts\",\"request_id\",\"nothing_sent\",\"nothing_billed\"}.\n"
    "Exit codes: 0 ok, 2 usage/config_error, 4 request_error, 5 "
    "server_error,\n6 response_error, 7 service_unavailable or "
    "deadline_exceeded, 8 uncertain_outcome\n(seq: the block may have been "
    "spent; it was not retried).");
}

/// Runs `body` and turns what it throws into the error line and exit code,
/// the credential redacted as every line of the request command is.
template <class F>
int guarded(std::ostream& err, const oracle_options& o, F body) {
  const std::vector<std::string> secrets{o.cfg.token};
  try {
    return body();
  } catch (const config_error& e) {
    err << redact(usage_error_json("config_error", e.what()), secrets) << '\n';
    return exit_code(error_kind::config_error);
  } catch (const std::exception& e) {
    err << redact(usage_error_json("internal_error", e.what()), secrets)
        << '\n';
    return internal_exit_code;
  }
}

int print_failure(const std::optional<coalesce_reply>& r,
                  const std::string& caf_error, const oracle_options& o,
                  std::ostream& err) {
  const std::vector<std::string> secrets{o.cfg.token};
  if (!r) {
    err << redact(
      usage_error_json("internal_error",
                       "the coalescing driver did not answer: " + caf_error),
      secrets)
        << '\n';
    return internal_exit_code;
  }
  err << redact(error_json(*r->error), secrets) << '\n';
  return exit_code(r->error->kind);
}

} // namespace

CLI::App* add_ts_command(CLI::App& app, oracle_options& opts) {
  auto* cmd = app.add_subcommand(
    "ts", "Get timestamps from an oracle cluster through the coalescing "
          "driver and print them as JSON");
  cmd
    ->add_option("--count", opts.count,
                 "Timestamps, 1..262144 (one physical millisecond, "
                 "contiguous logical parts)")
    ->capture_default_str();
  add_common_options(*cmd, opts, "--key,--cert-key");
  return cmd;
}

CLI::App* add_seq_command(CLI::App& app, oracle_options& opts) {
  auto* cmd = app.add_subcommand(
    "seq", "Get a block of a gapless per-key sequence from an oracle "
           "cluster through the coalescing driver and print it as JSON");
  cmd->add_option("--key", opts.key, "Sequence key, 1..128 bytes of UTF-8")
    ->required();
  cmd->add_option("--count", opts.count, "Ordinals in the block, 1..65536")
    ->required();
  add_common_options(*cmd, opts, "--cert-key");
  return cmd;
}

int run_ts(caf::actor_system& sys, const oracle_options& opts,
           std::ostream& out, std::ostream& err) {
  return guarded(err, opts, [&] {
    auto c = make_config(opts);
    if (opts.count < 1 || opts.count > c.max_ts_per_rpc)
      throw config_error("--count", "must be 1.."
                                      + std::to_string(c.max_ts_per_rpc)
                                      + " timestamps, got "
                                      + std::to_string(opts.count));
    std::string caf_error;
    ts_call call;
    call.count = opts.count;
    auto r = call_once(sys, opts, c, call, err, caf_error);
    if (!r || r->error)
      return print_failure(r, caf_error, opts, err);
    boost::json::object o;
    o["physical_ms"] = r->ts.physical_ms;
    o["logical_start"] = r->ts.logical_start;
    o["count"] = r->ts.count;
    if (r->ts.count <= 16) {
      boost::json::array a;
      for (auto t : r->ts.expand())
        a.emplace_back(t);
      o["timestamps"] = std::move(a);
    }
    o["epoch"] = r->epoch();
    o["endpoint"] = r->endpoint();
    out << boost::json::serialize(o) << '\n' << std::flush;
    return 0;
  });
}

int run_seq(caf::actor_system& sys, const oracle_options& opts,
            std::ostream& out, std::ostream& err) {
  return guarded(err, opts, [&] {
    auto c = make_config(opts);
    if (!valid_seq_key(opts.key, c.max_seq_key_bytes))
      throw config_error("--key", "must be 1.."
                                    + std::to_string(c.max_seq_key_bytes)
                                    + " bytes of UTF-8");
    if (opts.count < 1 || opts.count > c.max_seq_per_rpc)
      throw config_error("--count", "must be 1.."
                                      + std::to_string(c.max_seq_per_rpc)
                                      + " ordinals, got "
                                      + std::to_string(opts.count));
    std::string caf_error;
    seq_call call;
    call.key = opts.key;
    call.count = opts.count;
    auto r = call_once(sys, opts, c, call, err, caf_error);
    if (!r || r->error)
      return print_failure(r, caf_error, opts, err);
    boost::json::object o;
    o["key"] = opts.key;
    o["start"] = r->seq.start;
    o["count"] = r->seq.count;
    o["epoch"] = r->epoch();
    o["endpoint"] = r->endpoint();
    out << boost::json::serialize(o) << '\n' << std::flush;
    return 0;
  });
}

} // namespace outbound::apps
