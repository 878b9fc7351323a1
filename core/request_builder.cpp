#include "core/request_builder.hpp"

#include "core/text.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace outbound {
inline namespace core {

namespace {

const char hex_digits[] = "0123456789ABCDEF";
constexpr char hex_lower[] = "0123456789abcdef";

bool unreserved(char c) {
  return core::is_alnum(c) || c == '-' || c == '.' || c == '_' || c == '~';
}

// RFC 3986 pchar minus pct-encoded, plus '/' and '?' (the path may carry its
// own query). '%' is kept as the caller's escape. A table: every byte of
// every call's path is looked up.
struct path_char_table {
  bool flag[256] = {};
  constexpr path_char_table() {
    for (int c = 0; c < 256; ++c)
      flag[c] = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z')
                || (c >= 'A' && c <= 'Z') || c == '-' || c == '.' || c == '_'
                || c == '~';
    for (char c : std::string_view{"!$&'()*+,;=:@/?%"})
      flag[static_cast<unsigned char>(c)] = true;
  }
};
constexpr path_char_table path_chars{};

bool path_char(unsigned char c) {
  return path_chars.flag[c];
}

built_request fail(std::string detail, std::string request_id = {}) {
  built_request r;
  auto& e = r.error.emplace();
  e.kind = error_kind::config_error;
  e.detail = std::move(detail);
  e.nothing_sent = true;
  e.cause = transport_error_kind::config;
  e.request_id = request_id;
  r.request_id = std::move(request_id);
  return r;
}

// Checks one header; returns an error text (naming the header, never showing
// its value) or an empty string.
std::string check_header(const std::string& name, const std::string& value,
                         const char* where) {
  if (!core::is_token(name))
    return std::string{"invalid header name in "} + where
           + (core::has_ctl(name) ? " (control characters)"
                                  : " '" + name + "'");
  if (core::has_ctl(value, true))
    return "header '" + name + "' in " + where
           + " has a control character in its value (value not shown)";
  if (core::iequals(name, "host") || core::iequals(name, "content-length")
      || core::iequals(name, "transfer-encoding"))
    return "header '" + name + "' in " + where
           + " is set by the transport and may not be given";
  return {};
}

} // namespace

std::string percent_encode(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (unreserved(c)) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex_digits[c >> 4];
      out += hex_digits[c & 0xF];
    }
  }
  return out;
}

std::string encode_query(
  const std::vector<std::pair<std::string, std::string>>& params) {
  std::string out;
  for (auto& [k, v] : params) {
    if (!out.empty())
      out += '&';
    out += percent_encode(k);
    out += '=';
    out += percent_encode(v);
  }
  return out;
}

std::string generate_request_id(core::rng& rng) {
  // 32 lower-case hex digits from two 64-bit outputs (the high one first),
  // written two digits per byte from a table: this runs once per call.
  static constexpr auto pairs = [] {
    std::array<char, 512> t{};
    for (int b = 0; b < 256; ++b) {
      t[2 * b] = hex_lower[b >> 4];
      t[2 * b + 1] = hex_lower[b & 0xF];
    }
    return t;
  }();
  std::string out(32, '0');
  auto put = [&out](std::size_t at, std::uint64_t v) {
    for (std::size_t i = 0; i < 8; ++i) {
      auto b = static_cast<std::size_t>((v >> (8 * (7 - i))) & 0xFF);
      out[at + 2 * i] = pairs[2 * b];
      out[at + 2 * i + 1] = pairs[2 * b + 1];
    }
  };
  put(0, static_cast<std::uint64_t>(rng()));
  put(16, static_cast<std::uint64_t>(rng()));
  return out;
}

std::string credential_value(const client_config& cfg) {
  if (cfg.token.empty())
    return {};
  if (cfg.token_scheme.empty())
    return cfg.token;
  return cfg.token_scheme + " " + cfg.token;
}

std::string user_agent() {
  static const std::string value = std::string{"outbound/"} + outbound_version;
  return value;
}

void set_retry_count(header_list& headers, int n) {
  if (n > 0)
    set_header(headers, "x-retry-count", std::to_string(n));
  else
    erase_header(headers, "x-retry-count");
}

identity_problem append_identity_headers(const client_config& cfg,
                                         header_list& hs) {
  hs.emplace_back("User-Agent", user_agent());
  if (!cfg.token.empty()) {
    // config validation checks these too; re-checked because a config can be
    // built without validate(). The token is never quoted.
    if (!core::is_token(cfg.token_header))
      return {"token_header", "token_header is not a valid header name"};
    if (core::has_ctl(cfg.token) || core::has_ctl(cfg.token_scheme))
      return {"token",
              "the credential contains control characters (not shown)"};
    hs.emplace_back(cfg.token_header, credential_value(cfg));
  }
  for (auto& [k, v] : cfg.default_headers) {
    if (auto err = check_header(k, v, "default_headers"); !err.empty())
      return {"default_headers", err};
    set_header(hs, k, v);
  }
  return {};
}

namespace {

/// The call's own key: its idempotency_key, else the value of a header it
/// set under the client's key header name (nullptr: none).
const std::string* own_idempotency_key(const client_config& cfg,
                                       const call_request& call) {
  if (!call.idempotency_key.empty())
    return &call.idempotency_key;
  return find_header(call.headers, cfg.idempotency_key_header);
}

/// 32 lower-case hex digits of 128 bits from the system's entropy source
/// (std::random_device), never from the call's seeded generator: two
/// clients given the same seed must not send the same keys, or a server
/// would answer one's POST with the other's result.
std::string fresh_idempotency_key() {
  std::string out;
  out.reserve(32);
  for (int half = 0; half < 2; ++half) {
    auto x = core::entropy_seed();
    for (int i = 60; i >= 0; i -= 4)
      out += static_cast<char>(hex_digits[(x >> i) & 0xF] | 0x20); // lower
  }
  return out;
}

} // namespace

bool carries_idempotency_key(const client_config& cfg,
                             const call_request& call) {
  if (own_idempotency_key(cfg, call))
    return true;
  if (call.idempotency_mode)
    return *call.idempotency_mode == idempotency_key_mode::auto_key;
  std::string_view path = call.path;
  path = path.substr(0, path.find('?'));
  for (const auto& r : cfg.idempotency_routes) {
    if (!core::iequals(r.method, call.method))
      continue;
    bool prefix = r.path.back() == '/'; // "/" covers every path
    if (path == r.path || (prefix && path.substr(0, r.path.size()) == r.path))
      return r.mode == idempotency_key_mode::auto_key;
  }
  if (cfg.idempotency_keys != idempotency_key_mode::auto_key)
    return false;
  auto m = core::ascii_upper(call.method);
  return m == "POST" || m == "PATCH";
}

void assign_idempotency_key(const client_config& cfg, call_request& call) {
  if (!call.idempotency_key.empty())
    return;
  // A key the caller put in a header is the call's key (it keeps its
  // value; the header is sent once, from the key).
  if (auto h = find_header(call.headers, cfg.idempotency_key_header)) {
    if (core::trim_ows(*h).empty())
      return; // no key: build_request refuses the blank header
    call.idempotency_key = *h;
    erase_header(call.headers, cfg.idempotency_key_header);
    return;
  }
  if (carries_idempotency_key(cfg, call))
    call.idempotency_key = fresh_idempotency_key();
}

bool call_is_idempotent(const client_config& cfg, const call_request& call,
                        const std::string& method) {
  if (call.idempotent)
    return *call.idempotent;
  return method == "GET" || method == "HEAD" || method == "OPTIONS"
         || carries_idempotency_key(cfg, call);
}

namespace {

// Both build_request overloads: `Call` is const call_request& (copies) or
// call_request (moves the id, the headers and the body out of it; nothing
// reads them from `call` afterwards).
template <class Call>
built_request build_request_impl(const client_config& cfg,
                                 const url_parts& base, Call&& call,
                                 core::rng& rng) {
  // The request id first, so that even a refused request names it.
  std::string request_id = std::forward<Call>(call).request_id;
  header_list call_headers = std::forward<Call>(call).headers;
  if (request_id.empty()) {
    auto i = std::find_if(
      call_headers.begin(), call_headers.end(),
      [](const auto& kv) { return core::iequals(kv.first, "x-request-id"); });
    if (i != call_headers.end()) {
      request_id = i->second;
      call_headers.erase(i);
    }
  }
  if (request_id.empty())
    request_id = generate_request_id(rng); // hex digits: nothing to check
  else if (core::has_ctl(request_id))
    return fail("request id contains control characters");

  std::string method = core::ascii_upper(call.method);
  if (!core::is_token(method))
    return fail(core::has_ctl(method) ? "method contains control characters"
                                      : "method is not an HTTP token",
                request_id);

  if (call.path.empty() || call.path.front() != '/')
    return fail("path must start with '/'", request_id);
  if (core::has_ctl(call.path))
    return fail("path contains control characters", request_id);

  built_request r;
  auto& req = r.request;
  req.method = method;
  req.target.reserve(base.path.size() + call.path.size());
  req.target = base.path;
  // Runs of bytes that need no escape are copied at once.
  std::string_view path = call.path;
  while (!path.empty()) {
    std::size_t n = 0;
    while (n < path.size() && path_char(static_cast<unsigned char>(path[n])))
      ++n;
    req.target.append(path.data(), n);
    if (n == path.size())
      break;
    auto c = static_cast<unsigned char>(path[n]);
    char escaped[3] = {'%', hex_digits[c >> 4], hex_digits[c & 0xF]};
    req.target.append(escaped, 3);
    path.remove_prefix(n + 1);
  }
  if (!call.params.empty()) {
    req.target += call.path.find('?') == std::string::npos ? '?' : '&';
    req.target += encode_query(call.params);
  }

  auto& hs = req.headers;
  // Accept, Content-Type, User-Agent, credential, key, x-request-id: one
  // allocation of the list instead of one per doubling.
  hs.reserve(6 + cfg.default_headers.size() + call_headers.size());
  hs.emplace_back("Accept", "application/json");
  if (call.has_body)
    hs.emplace_back("Content-Type", "application/json");
  if (auto p = append_identity_headers(cfg, hs); !p.why.empty())
    return fail(p.why, request_id);
  for (auto& [k, v] : call_headers) {
    if (auto err = check_header(k, v, "the call's headers"); !err.empty())
      return fail(err, request_id);
    // A blank key would make the call retryable (it carries a key) while
    // the server sees none: a retried POST applied twice.
    if (core::trim_ows(v).empty()
        && core::iequals(k, cfg.idempotency_key_header))
      return fail("the call's " + cfg.idempotency_key_header
                    + " header is blank (an idempotency key must not be)",
                  request_id);
    set_header(hs, k, v);
  }
  if (!call.idempotency_key.empty()) {
    if (core::has_ctl(call.idempotency_key))
      return fail("idempotency key contains control characters", request_id);
    if (core::trim_ows(call.idempotency_key).empty())
      return fail("idempotency key is blank", request_id);
    set_header(hs, cfg.idempotency_key_header, call.idempotency_key);
  }
  set_header(hs, "x-request-id", request_id);

  if (call.has_body)
    req.body = std::forward<Call>(call).body;
  req.max_body_bytes = call.max_response_bytes.value_or(cfg.max_response_bytes);
  r.request_id = std::move(request_id);
  return r;
}

} // namespace

built_request build_request(const client_config& cfg, const url_parts& base,
                            const call_request& call, core::rng& rng) {
  return build_request_impl(cfg, base, call, rng);
}

built_request build_request(const client_config& cfg, const url_parts& base,
                            call_request&& call, core::rng& rng) {
  return build_request_impl(cfg, base, std::move(call), rng);
}

built_request rebuild_request(const client_config& cfg, const url_parts& base,
                              call_request& call, const std::string& request_id,
                              core::rng& rng) {
  if (call.request_id.empty()) {
    erase_header(call.headers, "x-request-id");
    call.request_id = request_id;
  }
  return build_request(cfg, base, call, rng);
}

bool build_upgrade_request(const std::string& path, const std::string& key,
                           const header_list& headers, http_request& out,
                           std::string& why) {
  using core::hex_byte;
  http_request req;
  req.method = "GET";
  req.target = path.empty() ? std::string{"/"} : path;
  if (auto i = core::find_ctl(req.target)) {
    why = "WebSocket path contains control byte "
          + hex_byte(static_cast<unsigned char>(req.target[*i])) + " at index "
          + std::to_string(*i);
    return false;
  }
  req.headers = {{"Upgrade", "websocket"},
                 {"Connection", "Upgrade"},
                 {"Sec-WebSocket-Key", key},
                 {"Sec-WebSocket-Version", "13"}};
  for (const auto& [name, value] : headers) {
    if (auto i = core::find_ctl(name)) {
      why = "header name contains control byte "
            + hex_byte(static_cast<unsigned char>(name[*i])) + " at index "
            + std::to_string(*i);
      return false;
    }
    if (auto i = core::find_ctl(value, true)) {
      // Never echo the value: it may be a credential.
      why = "value of header '" + name + "' contains control byte "
            + hex_byte(static_cast<unsigned char>(value[*i])) + " at index "
            + std::to_string(*i);
      return false;
    }
    if (core::iequals(name, "Upgrade") || core::iequals(name, "Connection")
        || core::iequals(name, "Sec-WebSocket-Key")
        || core::iequals(name, "Sec-WebSocket-Version")
        || core::iequals(name, "Sec-WebSocket-Extensions"))
      continue; // generated here (and no extension is offered)
    req.headers.emplace_back(name, value);
  }
  out = std::move(req);
  return true;
}

} // namespace core
} // namespace outbound
