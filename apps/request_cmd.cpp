#include "apps/request_cmd.hpp"

#include "actors/client/blocking_client.hpp"
#include "actors/messages.hpp"
#include "actors/observer.hpp"
#include "config/config_error.hpp"
#include "core/text.hpp"
#include "protocol/errors.hpp"
#include "protocol/json_parse.hpp"

#include <CLI/CLI.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <openssl/evp.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <limits>
#include <ostream>
#include <stdexcept>
#include <thread>

namespace outbound::apps {

namespace {

int hex_value(char c) {
  if (core::is_digit(c))
    return c - '0';
  c = core::ascii_lower(c);
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  return -1;
}

/// Decodes a query component of a URL given on the command line ('+' is a
/// space, %XX a byte); the client re-encodes the parameters when it sends.
std::string percent_decode(const std::string& s) {
  std::string r;
  r.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      r += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() && hex_value(s[i + 1]) >= 0
               && hex_value(s[i + 2]) >= 0) {
      r += static_cast<char>(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
      i += 2;
    } else {
      r += s[i];
    }
  }
  return r;
}

/// `s` in standard base64 (RFC 4648 section 4), with OpenSSL.
std::string base64(const std::string& s) {
  std::string out(4 * ((s.size() + 2) / 3) + 1, '\0');
  auto n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                           reinterpret_cast<const unsigned char*>(s.data()),
                           static_cast<int>(s.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

/// `k=v` → (k, v); `k` → (k, "").
std::pair<std::string, std::string> split_param(const std::string& kv) {
  auto eq = kv.find('=');
  if (eq == std::string::npos)
    return {kv, {}};
  return {kv.substr(0, eq), kv.substr(eq + 1)};
}

/// A path with an optional query: the path (at least "/") and the decoded
/// query parameters in order. A fragment is dropped.
struct path_and_query {
  std::string path;
  param_list params;
};

path_and_query split_path(std::string target) {
  path_and_query r;
  if (auto hash = target.find('#'); hash != std::string::npos)
    target.resize(hash);
  auto q = target.find('?');
  r.path = target.substr(0, q);
  if (r.path.empty() || r.path.front() != '/')
    r.path.insert(r.path.begin(), '/');
  if (q != std::string::npos) {
    auto query = target.substr(q + 1);
    std::size_t pos = 0;
    while (pos <= query.size()) {
      auto amp = query.find('&', pos);
      auto piece = query.substr(
        pos, amp == std::string::npos ? std::string::npos : amp - pos);
      if (!piece.empty()) {
        auto [k, v] = split_param(piece);
        r.params.emplace_back(percent_decode(k), percent_decode(v));
      }
      if (amp == std::string::npos)
        break;
      pos = amp + 1;
    }
  }
  return r;
}

/// Splits an absolute URL into the base URL (`scheme://authority`) and the
/// path with its query. Throws config_error("base_url") for anything that
/// is not `scheme://...` (the scheme itself is checked by validate()).
std::pair<std::string, path_and_query> split_url(const std::string& url) {
  auto sep = url.find("://");
  if (sep == std::string::npos || sep == 0)
    throw config_error("base_url",
                       "not an absolute http(s) URL: "
                         + (url.find('@') == std::string::npos
                              ? "'" + url + "'"
                              : std::string{"(not shown: it may carry user "
                                            "info)"})
                         + (url.empty() || url[0] == '/'
                              ? " (use --env PREFIX to give only a path)"
                              : " (begin it with http:// or https://, or use "
                                "--env PREFIX to give only a path)"));
  // User info is refused before the authority is cut at '?' or '#': in
  // "http://u:pw?x@host/" the text up to the first '/' is what the user meant
  // as the authority, and its password must not end up as a "port" in an
  // error text.
  auto authority = url.substr(sep + 3, url.find('/', sep + 3) - (sep + 3));
  if (authority.find('@') != std::string::npos)
    throw config_error("base_url", "user info in the URL is not allowed (use "
                                   "--token)");
  auto end = url.find_first_of("/?#", sep + 3);
  auto base = url.substr(0, end);
  auto rest = end == std::string::npos ? std::string{"/"} : url.substr(end);
  return {base, split_path(rest)};
}

/// Whether `url` starts with a scheme (`http://`, `ftp://`, ...; RFC 3986
/// section 3.1: a letter, then letters, digits, '+', '-', '.').
bool has_scheme(const std::string& url) {
  auto sep = url.find("://");
  if (sep == std::string::npos || sep == 0
      || !core::is_alpha(url[0]))
    return false;
  return std::all_of(url.begin(), url.begin() + sep, [](char c) {
    return core::is_alnum(c) || c == '+' || c == '-' || c == '.';
  });
}

/// `Name: value` → (Name, value). The value is never echoed in an error: it
/// may carry a credential.
std::pair<std::string, std::string> split_header(const std::string& h) {
  auto kv = core::split_field_line(h);
  if (!kv)
    throw usage_error("--header " + header_argument_problem(h));
  return std::move(*kv);
}

boost::json::value nullable_status(int status) {
  if (status == 0)
    return nullptr;
  return status;
}

std::string error_json(const call_error& e) {
  boost::json::object o;
  o["error"] = to_string(e.kind);
  o["status"] = nullable_status(e.status);
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

/// Header names lower-cased; a repeated field is joined with ", " (RFC 9110
/// section 5.3).
boost::json::object headers_json(const header_list& hs) {
  boost::json::object o;
  for (auto& [k, v] : hs) {
    auto name = valid_utf8(core::ascii_lower(k));
    auto value = valid_utf8(v);
    if (auto* prev = o.if_contains(name))
      *prev = std::string{prev->as_string()} + ", " + value;
    else
      o[name] = value;
  }
  return o;
}

/// One observer event as a JSON object with the fields its kind carries
/// (core/call_types.hpp): every event its kind, request_id, method, path and
/// attempt; retrying, redialing and failed their cause; retrying and hedging
/// delay_ns; retrying, answered and failed the status (null: none seen);
/// answered and failed attempts, outcome and latency_ns, and reason when the
/// retry loop gave up early.
std::string event_json(const client_event& ev) {
  boost::json::object o;
  o["event"] = to_string(ev.kind);
  o["request_id"] = ev.request_id;
  o["method"] = ev.method;
  o["path"] = valid_utf8(ev.path);
  o["attempt"] = ev.attempt;
  const bool ended
    = ev.kind == event_kind::answered || ev.kind == event_kind::failed;
  if (ev.kind == event_kind::retrying || ev.kind == event_kind::redialing
      || ev.kind == event_kind::failed)
    o["cause"] = ev.cause;
  if (ev.kind == event_kind::retrying || ev.kind == event_kind::hedging)
    o["delay_ns"] = ev.delay_ns;
  if (ev.kind == event_kind::retrying || ended)
    o["status"] = nullable_status(ev.status);
  if (ended) {
    o["attempts"] = ev.attempts;
    o["outcome"] = outcome_label(ev);
    if (ev.reason != give_up_reason::none)
      o["reason"] = to_string(ev.reason);
    o["latency_ns"] = ev.latency_ns;
  }
  return boost::json::serialize(o);
}

// -- the --verbose observer ---------------------------------------------------

/// An observer that prints each client_event as one JSON line; `done_atom`
/// answers once every event sent before it has been printed (the call actor
/// sends its last event before it answers the call, so asking after the
/// answer drains them all).
using verbose_observer_actor
  = caf::typed_actor<caf::reacts_to<client_event>,
                     caf::replies_to<done_atom>::with<bool>>;

struct verbose_sink {
  std::ostream* err;
  std::vector<std::string> secrets;
};

verbose_observer_actor::behavior_type
verbose_observer(verbose_observer_actor::pointer, verbose_sink sink) {
  return {
    [sink](const client_event& ev) {
      *sink.err << redact(event_json(ev), sink.secrets) << '\n' << std::flush;
    },
    [](done_atom) { return true; },
  };
}

void drain(caf::actor_system& sys, const verbose_observer_actor& obs) {
  caf::scoped_actor self{sys};
  self->request(obs, std::chrono::seconds{5}, done_atom_v)
    .receive([](bool) {}, [](const caf::error&) {});
}

/// Builds the call from the options; validates what the client does not.
/// The `--json` body is checked under the client's json_max_depth.
call_request make_request(const request_options& opts, path_and_query target,
                          const client_config& cfg) {
  call_request req;
  // As curl's --json: a body without -X is a POST, not a GET with a body.
  bool json_without_method = opts.json_opt && opts.json_opt->count() > 0
                             && opts.method_opt
                             && opts.method_opt->count() == 0;
  req.method = json_without_method ? std::string{"POST"}
                                   : core::ascii_upper(opts.method);
  if (req.method.empty()
      || !std::all_of(req.method.begin(), req.method.end(),
                      [](char c) { return core::is_alpha(c); }))
    throw usage_error("-X/--method must be a word of letters, got '"
                      + opts.method + "'");
  req.path = std::move(target.path);
  req.params = std::move(target.params);
  for (auto& p : opts.params)
    req.params.push_back(split_param(p));
  if (opts.json_opt && opts.json_opt->count() > 0) {
    // Checked, then sent byte for byte: re-serialising would rewrite the
    // user's numbers (1.0 -> 1E0) and whitespace. A 30-digit integer is
    // fine here: its digits go out as typed, never through a double.
    json_limits check;
    check.allow_inexact_integers = true;
    check.max_depth = cfg.json_max_depth;
    auto parsed = parse_json(opts.json_body, check);
    // Nesting beyond the limit or a number beyond binary64 is valid JSON
    // (RFC 8259 section 9 lets a parser limit both): only a syntax error
    // is "not valid JSON".
    if (parsed.error == json_parse_error::syntax)
      throw usage_error("--json is not valid JSON: " + parsed.detail);
    if (!parsed)
      throw usage_error("--json cannot be sent: " + parsed.detail);
    req.body = opts.json_body;
    req.has_body = true;
  }
  if (opts.idempotency_key == "auto")
    req.idempotency_mode = idempotency_key_mode::auto_key;
  else if (!opts.idempotency_key.empty())
    req.idempotency_key = opts.idempotency_key;
  if (opts.idempotent)
    req.idempotent = true;
  else if (opts.not_idempotent)
    req.idempotent = false;
  req.raw = opts.raw;
  return req;
}

int print_outcome(const request_options& opts, const call_outcome& res,
                  std::ostream& out, std::ostream& err,
                  const std::vector<std::string>& secrets) {
  if (res.error) {
    err << redact(error_json(*res.error), secrets) << '\n' << std::flush;
    return exit_code(res.error->kind);
  }
  if (opts.raw) {
    boost::json::object o;
    o["status"] = res.status;
    o["headers"] = headers_json(res.headers);
    o["body"] = res.body;
    if (!res.raw_body_error.empty()) {
      // Not JSON, or JSON the parsed form cannot hold (1e400, a 30-digit
      // integer): the text as received, and why.
      // JSON output must be UTF-8 (RFC 8259 section 8.1): a body that is
      // not goes out as base64 (RFC 4648), byte for byte.
      if (valid_utf8(res.unreadable_body) == res.unreadable_body)
        o["body_text"] = res.unreadable_body;
      else
        o["body_base64"] = base64(res.unreadable_body);
      o["body_error"] = res.raw_body_error;
    }
    out << boost::json::serialize(o) << '\n' << std::flush;
  } else {
    out << boost::json::serialize(res.body) << '\n' << std::flush;
  }
  return 0;
}

} // namespace

CLI::Validator whole_number(const std::string& unit, const std::string& name) {
  static_assert(sizeof(std::size_t) == sizeof(unsigned long long));
  return CLI::Validator(
    [unit](std::string& v) -> std::string {
      errno = 0;
      char* end = nullptr;
      std::strtoull(v.c_str(), &end, 10);
      if (v.empty()
          || !std::all_of(v.begin(), v.end(),
                          [](char c) { return core::is_digit(c); })
          || errno == ERANGE || *end != '\0')
        return "must be a whole number of " + unit + ", got '" + v + "'";
      return {};
    },
    name);
}

std::string header_argument_problem(const std::string& h) {
  return "expects 'Name: value' (got an argument "
         + std::string{h.find(':') == std::string::npos
                         ? "without a ':'"
                         : "without a name before ':'"}
         + ")";
}

std::string usage_error_json(const std::string& type,
                             const std::string& detail) {
  boost::json::object o;
  o["error"] = type;
  o["status"] = nullptr;
  o["detail"] = detail;
  o["attempts"] = 0;
  o["request_id"] = "";
  o["nothing_sent"] = true;
  o["nothing_billed"] = true;
  o["reason"] = nullptr;
  return boost::json::serialize(o);
}

void end_actors(caf::actor_system& sys, std::vector<caf::actor> actors) {
  for (auto& a : actors)
    if (a)
      caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  actors.clear();
  auto until
    = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  while (sys.registry().running() > 0
         && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (sys.registry().running() > 0)
    sys.await_actors_before_shutdown(false);
}

std::string valid_utf8(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    if (auto len = core::utf8_sequence_length(s, i)) {
      out.append(s, i, len);
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

namespace {

void replace_all(std::string& text, const std::string& what) {
  if (what.empty())
    return;
  for (auto pos = text.find(what); pos != std::string::npos;
       pos = text.find(what, pos + 3))
    text.replace(pos, what.size(), "***");
}

/// Each secret as written and as JSON escapes it (json_escaped_forms): a
/// JSON text quoted in a string value (a server's non-string error
/// `detail`, serialized into the error's `detail`) holds it escaped once,
/// and the serialized line once more.
std::vector<std::string> secret_forms(const std::vector<std::string>& secrets) {
  std::vector<std::string> forms;
  for (auto& s : secrets)
    for (auto& form : json_escaped_forms(s, 3))
      if (std::find(forms.begin(), forms.end(), form) == forms.end())
        forms.push_back(form);
  return forms;
}

/// Every string value in `v`, however deep; member names are left alone:
/// they are this program's field names ("request_id"), never a secret.
void redact_values(boost::json::value& v,
                   const std::vector<std::string>& forms) {
  if (auto* str = v.if_string()) {
    std::string s{*str};
    for (auto& form : forms)
      replace_all(s, form);
    if (s != *str)
      *str = s;
  } else if (auto* arr = v.if_array()) {
    for (auto& x : *arr)
      redact_values(x, forms);
  } else if (auto* obj = v.if_object()) {
    for (auto& member : *obj)
      redact_values(member.value(), forms);
  }
}

} // namespace

std::string redact(std::string text, const std::vector<std::string>& secrets) {
  auto forms = secret_forms(secrets);
  if (forms.empty())
    return text;
  // A JSON line is redacted in its parsed values: a secret that JSON escapes
  // (a quote, a backslash, a control character) is found as the value it
  // is, and a secret that happens to spell part of a field name ("request")
  // leaves the name whole. The line is serialized again: parse_json rounds
  // every number exactly (protocol/json_parse.hpp), so whatever is not a
  // secret comes back byte for byte.
  if (auto parsed = parse_json(text)) {
    redact_values(parsed.value, forms);
    return boost::json::serialize(parsed.value);
  }
  // Not JSON (invalid UTF-8 quoted from a peer, plain text): every form
  // in the text as it stands.
  for (auto& form : forms)
    replace_all(text, form);
  return text;
}

std::vector<std::string> token_values(int argc, const char* const* argv) {
  std::vector<std::string> r;
  const std::string flag = "--token";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == flag && i + 1 < argc)
      r.emplace_back(argv[i + 1]);
    else if (a.rfind(flag + "=", 0) == 0)
      r.push_back(a.substr(flag.size() + 1));
  }
  return r;
}

void add_token_tls_options(CLI::App& cmd, client_config& cfg) {
  cmd.add_option("--token", cfg.token,
                  "Credential sent on every request (never printed)");
  cmd
    .add_option("--token-header", cfg.token_header,
                 "Header that carries the credential")
    ->capture_default_str();
  cmd
    .add_option("--token-scheme", cfg.token_scheme,
                 "Scheme before the token; '' sends the raw token")
    ->capture_default_str();
  cmd.add_option("--ca-file", cfg.tls.ca_file,
                  "PEM CA file that verifies the server (default: system "
                  "trust store)");
  cmd.add_option("--cert", cfg.tls.client_cert_file,
                  "PEM client certificate for mTLS (with --key)");
  cmd.add_option("--key", cfg.tls.client_key_file,
                  "PEM private key of --cert");
}

// Over 80 lines on purpose: the command's option table, one CLI11
// statement per option, read top to bottom like its --help.
CLI::App* add_request_command(CLI::App& app, request_options& opts) {
  auto* cmd = app.add_subcommand(
    "request", "Send one HTTP request through a service client and print the "
               "JSON answer");
  cmd->footer(
    "Output: the response body as compact JSON on stdout (null when empty).\n"
    "Failure: one JSON line on stderr {\"error\",\"status\",\"detail\","
    "\"attempts\",\"request_id\",\"nothing_sent\",\"nothing_billed\","
    "\"reason\"}\n"
    "(reason: why the retries stopped short of the policy, else null).\n"
    "Exit codes: 0 ok, 2 usage/config_error, 3 auth_error, 4 request_error,\n"
    "5 server_error, 6 response_error, 7 service_unavailable or "
    "deadline_exceeded.");
  auto& cfg = opts.cfg;
  cmd
    ->add_option("url", opts.url,
                 "Absolute http(s) URL (with --env: a path below PREFIX_URL)")
    ->required();
  opts.method_opt
    = cmd
        ->add_option("-X,--method", opts.method,
                     "HTTP method (POST when --json is given without it, as "
                     "curl's --json)")
        ->capture_default_str();
  opts.json_opt = cmd->add_option(
    "--json", opts.json_body,
    "JSON request body (sent with Content-Type: application/json; the "
    "method is POST unless -X says otherwise)");
  cmd
    ->add_option("--param", opts.params,
                 "Query parameter k=v, appended after the URL's query "
                 "(repeatable)")
    ->take_all();
  cmd
    ->add_option("--header", opts.headers,
                 "Extra request header 'Name: value' (repeatable)")
    ->take_all();
  auto* idem = cmd->add_flag("--idempotent", opts.idempotent,
                             "Retry this call on transport failures even if "
                             "the method is not GET/HEAD/OPTIONS");
  auto* not_idem = cmd->add_flag("--not-idempotent", opts.not_idempotent,
                                 "Never retry this call");
  idem->excludes(not_idem);
  not_idem->excludes(idem);
  cmd
    ->add_option("--idempotency-key", opts.idempotency_key,
                 "Send an Idempotency-Key on every attempt (IETF "
                 "draft-ietf-httpapi-idempotency-key-header): 'auto' "
                 "generates one; any other value is sent as is. The call "
                 "is then retried like an idempotent one")
    ->check([](const std::string& v) -> std::string {
      if (v.find_first_not_of(" \t") == std::string::npos)
        return "must not be empty or blank";
      for (unsigned char c : v)
        if (c < 0x20 || c == 0x7f)
          return "must not contain control characters";
      return {};
    });
  add_token_tls_options(*cmd, cfg);
  cmd->add_option("--timeout", cfg.timeout, "Per-attempt timeout, seconds")
    ->capture_default_str();
  cmd
    ->add_option("--deadline", cfg.deadline,
                 "Overall deadline of the call, seconds")
    ->capture_default_str();
  cmd
    ->add_option("--max-attempts", cfg.retry.max_attempts,
                 "Attempts including the first")
    ->capture_default_str();
  cmd
    ->add_option("--base-backoff", cfg.retry.base_backoff,
                 "Base backoff, seconds")
    ->capture_default_str();
  cmd
    ->add_option("--max-backoff", cfg.retry.max_backoff,
                 "Cap of the exponential backoff, seconds")
    ->capture_default_str();
  cmd
    ->add_option("--retry-status", cfg.retry.retry_statuses,
                 "Comma-separated HTTP statuses to retry, e.g. 429,503")
    ->delimiter(',')
    ->type_name("STATUS[,STATUS...]");
  cmd
    ->add_option("--json-max-depth", cfg.json_max_depth,
                 "Maximum nesting depth of the --json body and of the "
                 "response body, 1..1024")
    ->capture_default_str();
  cmd
    ->add_option("--max-response-bytes", cfg.max_response_bytes,
                 "Cap on the response body, bytes")
    ->capture_default_str()
    // CLI11 turns "-1" and out-of-range numbers into a huge size_t (no cap
    // at all): accept only a decimal number that fits.
    ->check(whole_number("bytes", "BYTES"));
  cmd->add_flag("--raw", opts.raw,
                "Print {\"status\",\"headers\",\"body\"} and exit 0 for any "
                "HTTP status (the response as received: a server that echoes "
                "--token shows it)");
  opts.env_opt = cmd->add_option(
    "--env", opts.env_prefix,
    "Read PREFIX_URL, PREFIX_TOKEN, PREFIX_CA_FILE, PREFIX_CLIENT_CERT, "
    "PREFIX_CLIENT_KEY (options given here win); URL is then a path");
  cmd->add_flag("--verbose", opts.verbose,
                "Observer events as JSON lines on stderr (with --hedge, also "
                "the hedging counters at the end)");
  cmd->add_flag("--hedge", opts.hedge,
                "Hedge an idempotent call (GET/HEAD/OPTIONS, or any method "
                "with --idempotency-key): one backup request after the "
                "hedge delay (the warmup delay, 10 ms, unless --hedge-delay)");
  cmd->add_option("--percentile", opts.percentile,
                  "Latency quantile that triggers the hedge, in (0, 1)")
    ->capture_default_str();
  cmd->add_option("--budget-percent", opts.budget_percent,
                  "Hedges allowed as a percentage of the traffic (>= 0)")
    ->capture_default_str();
  opts.hedge_delay_opt = cmd->add_option(
    "--hedge-delay", opts.hedge_delay,
    "Hardcoded hedge delay in seconds (>= 0) instead of the learned one");
  return cmd;
}

// {"hedging":{...}}: the client's global hedging counters, for --verbose;
// {"hedging":null} when they did not arrive (blocking_client::hedge_stats),
// rather than an object without its fields.
std::string hedge_counters_json(blocking_client& client) {
  boost::json::object line;
  auto s = client.hedge_stats();
  if (!s) {
    line["hedging"] = nullptr;
    return boost::json::serialize(line);
  }
  boost::json::object o;
  o["total_requests"] = s->total_requests;
  o["hedged_requests"] = s->hedged_requests;
  o["hedge_wins"] = s->hedge_wins;
  o["primary_wins"] = s->primary_wins;
  o["budget_exhausted"] = s->budget_exhausted;
  o["warmup_requests"] = s->warmup_requests;
  o["circuit_blocked"] = s->circuit_blocked;
  o["errors"] = s->errors;
  line["hedging"] = std::move(o);
  return boost::json::serialize(line);
}

// Where the call goes: sets `cfg`'s base URL (from URL, or with --env from
// PREFIX_URL and the other PREFIX_ variables) and returns the path and query
// to call below it.
path_and_query resolve_target(const request_options& opts, client_config& cfg) {
  if (!opts.env_opt || opts.env_opt->count() == 0) {
    auto [base, rest] = split_url(opts.url);
    cfg.base_url = std::move(base);
    return std::move(rest);
  }
  if (opts.env_prefix.empty())
    throw usage_error("--env needs a non-empty PREFIX");
  // Taken as a path, "http://host/p" would be sent to PREFIX_URL as
  // "/http://host/p" and come back a 404. The URL is not echoed: it may
  // carry user info.
  if (has_scheme(opts.url))
    throw usage_error("an absolute URL and --env do not mix: with --env "
                      + opts.env_prefix + ", URL is a path below "
                      + opts.env_prefix
                      + "_URL (e.g. /v1/items); without --env, give the "
                        "absolute URL");
  auto target = split_path(opts.url);
  cfg = from_env(opts.env_prefix, std::move(cfg));
  return target;
}

// --hedge: one backup request after the learned delay, or after
// --hedge-delay through an endpoint that `req` names.
hedging_options hedging_for(const request_options& opts, call_request& req) {
  hedging_options h;
  h.config.percentile = opts.percentile;
  h.config.budget_percent = opts.budget_percent;
  if (opts.hedge_delay_opt && opts.hedge_delay_opt->count() > 0) {
    // One endpoint with the hardcoded delay, named explicitly by the call
    // (an explicit name bypasses route matching).
    endpoint_config ep;
    ep.hedge_delay = opts.hedge_delay;
    h.routes.register_route("*", "/", ep, "cli");
    req.hedge_endpoint = "cli";
  }
  return h;
}

int run_request(caf::actor_system& sys, const request_options& opts,
                std::ostream& out, std::ostream& err) {
  std::vector<std::string> secrets{opts.cfg.token};
  try {
    auto cfg = opts.cfg;
    // --header goes to the client's default headers (one call: the same
    // thing), where validate() rejects control characters without echoing
    // the value; an explicit x-request-id becomes the call's id instead.
    std::string request_id;
    for (auto& h : opts.headers) {
      auto kv = split_header(h);
      if (core::iequals(kv.first, "x-request-id"))
        request_id = kv.second;
      else
        cfg.default_headers.push_back(std::move(kv));
    }
    auto target = resolve_target(opts, cfg);
    secrets.push_back(cfg.token);
    // json_max_depth bounds the --json check: a bad value is a config_error
    // naming it, not a --json failure.
    cfg.validate();
    auto req = make_request(opts, std::move(target), cfg);
    req.request_id = std::move(request_id);
    client_options copts;
    if (opts.hedge)
      copts.hedging = hedging_for(opts, req);
    verbose_observer_actor obs;
    if (opts.verbose) {
      obs = sys.spawn(verbose_observer, verbose_sink{&err, secrets});
      copts.observer = obs;
    }
    int rc = 0;
    {
      blocking_client client{sys, std::move(cfg), std::move(copts)};
      auto res = client.call(std::move(req));
      if (obs)
        drain(sys, obs);
      if (opts.verbose && opts.hedge)
        err << hedge_counters_json(client) << '\n';
      rc = print_outcome(opts, res, out, err, secrets);
    }
    return rc;
  } catch (const config_error& e) {
    err << redact(usage_error_json("config_error", e.what()), secrets) << '\n';
    return exit_code(error_kind::config_error);
  } catch (const usage_error& e) {
    err << redact(usage_error_json("usage_error", e.what()), secrets) << '\n';
    return usage_exit_code;
  } catch (const service_error& e) {
    err << redact(error_json(e.error()), secrets) << '\n';
    return exit_code(e.kind());
  } catch (const std::exception& e) {
    err << redact(usage_error_json("internal_error", e.what()), secrets)
        << '\n';
    return internal_exit_code;
  }
}

} // namespace outbound::apps
