#pragma once

// `outbound request [options] URL`: one call through a service client, the
// answer as JSON on stdout, a failure as one JSON line on stderr and an exit
// code per error type (protocol/errors.hpp exit_code()).

#include "config/client_config.hpp"

#include <caf/fwd.hpp>

#include <iosfwd>
#include <stdexcept>
#include <string>
#include <vector>

namespace CLI {
class App;
class Option;
class Validator;
} // namespace CLI

namespace outbound::apps {

/// Exit code of a command-line usage error (bad option, bad --json, ...);
/// the same code as a config_error.
constexpr int usage_exit_code = 2;

/// Exit code of an unexpected internal failure (a bug, not a call outcome).
constexpr int internal_exit_code = 1;

/// The options of `outbound request`, as parsed by CLI11. Client settings
/// are bound directly to `cfg`, so its defaults are the CLI's defaults.
struct request_options {
  /// Absolute URL (`scheme://authority/path?query`), or a path when `env`
  /// is set.
  std::string url;
  /// HTTP method, upper-cased before use. ["GET"]
  std::string method = "GET";
  /// `--json BODY`: request body, must parse as JSON.
  std::string json_body;
  /// `--param k=v`, in order (appended after the URL's own query).
  std::vector<std::string> params;
  /// `--header 'K: V'`, in order.
  std::vector<std::string> headers;
  /// `--idempotent` / `--not-idempotent`; neither: the method decides.
  bool idempotent = false;
  bool not_idempotent = false;
  /// `--idempotency-key auto|VALUE`: an Idempotency-Key on this call (auto:
  /// generated); empty: none.
  std::string idempotency_key;
  /// `--env PREFIX`: build the client from `PREFIX_*` variables.
  std::string env_prefix;
  /// `--raw`: print `{"status","headers","body"}` for any HTTP status.
  bool raw = false;
  /// `--verbose`: observer events as JSON lines on stderr.
  bool verbose = false;
  /// Client settings (`--token`, `--timeout`, ...).
  client_config cfg;
  /// `--hedge`: hedge the call (GET/HEAD/OPTIONS) after the learned
  /// percentile, the warmup delay, or `--hedge-delay`.
  bool hedge = false;
  /// `--percentile`, `--budget-percent`: hedge_config fields. [0.95, 10]
  double percentile = 0.95;
  double budget_percent = 10.0;
  /// `--hedge-delay S`: a hardcoded hedge delay in seconds (>= 0).
  double hedge_delay = 0.0;
  CLI::Option* hedge_delay_opt = nullptr;

  /// Set by add_request_command: tells whether --json / --env were given.
  CLI::Option* json_opt = nullptr;
  /// Set by add_request_command: whether -X was given (else a `--json`
  /// call is a POST, as curl's --json).
  CLI::Option* method_opt = nullptr;
  CLI::Option* env_opt = nullptr;
};

/// Registers the credential and TLS options of `outbound request`
/// (`--token`, `--token-header`, `--token-scheme`, `--ca-file`, `--cert`,
/// `--key`) on `cmd`, bound to `cfg` (which must outlive the parse). Shared
/// by every subcommand that builds a client.
void add_token_tls_options(CLI::App& cmd, client_config& cfg);

/// Registers the `request` subcommand on `app`, binding its options to
/// `opts` (which must outlive the parse). Returns the subcommand.
CLI::App* add_request_command(CLI::App& app, request_options& opts);

/// Runs a parsed `request` command in `sys`; writes the answer to `out`,
/// errors and `--verbose` events to `err`. Returns the process exit code:
/// 0 success, 2 usage/config, 3 auth_error, 4 request_error, 5 server_error,
/// 6 response_error, 7 service_unavailable / deadline_exceeded, 1 internal.
int run_request(caf::actor_system& sys, const request_options& opts,
                std::ostream& out, std::ostream& err);

/// A usage error of a command line (exit 2, error type "usage_error"),
/// thrown by the commands' option checks.
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// One failure line `{"error":...,"status":null,"detail":...,"attempts":0,
/// "request_id":"","nothing_sent":true}` for errors raised before any call
/// (usage, configuration), without a trailing newline.
std::string usage_error_json(const std::string& type,
                             const std::string& detail);

/// `s` as valid UTF-8: every byte that does not start a well-formed
/// sequence (RFC 3629: no overlongs, no surrogates, at most U+10FFFF)
/// becomes U+FFFD. JSON text is UTF-8 (RFC 8259 section 8.1), and a
/// server's header bytes, an error text quoting a server's body, or a path
/// typed on the command line need not be.
std::string valid_utf8(const std::string& s);

/// Ends a command's actors: an exit message to each of `actors`, then up
/// to 500 ms for every actor of `sys` to finish; any still running are not
/// waited for at shutdown. A pool with an exchange in flight holds its
/// requester's response promise, and so the client that owns the pool: a
/// reference cycle until the exchange ends, which the exit breaks. Without
/// it a process that ends with a call in flight (a server that never
/// answers, a retry to a closed port) leaves the cycle behind, which
/// LeakSanitizer reports.
void end_actors(caf::actor_system& sys, std::vector<caf::actor> actors);

/// Why `h` is not a `--header` argument (core::split_field_line refused
/// it): "expects 'Name: value' (got an argument without a ':')" or "...
/// without a name before ':')". The value is never quoted: it may carry a
/// credential.
std::string header_argument_problem(const std::string& h);

/// A CLI11 check that accepts only a decimal whole number that fits in 64
/// bits ("must be a whole number of <unit>, got '-1'"): CLI11 reads "-1"
/// and out-of-range numbers into an unsigned option as a huge value.
/// `name` is the validator's name in --help.
CLI::Validator whole_number(const std::string& unit, const std::string& name);

/// Replaces every occurrence of each non-empty secret in `text` with "***".
/// A JSON `text` (every line this program prints to stderr) is redacted in
/// its string values, each secret as written and as JSON escapes it (a
/// server's JSON quoted in a `detail`); member names are left whole. Any
/// other text is redacted in the same forms as it stands.
std::string redact(std::string text, const std::vector<std::string>& secrets);

/// The values given to `--token` on a command line (`--token X`,
/// `--token=X`), so that even a parse error never echoes them.
std::vector<std::string> token_values(int argc, const char* const* argv);

} // namespace outbound::apps
