#include "actors/group/etcd_lease_store.hpp"

#include "actors/handler_guard.hpp"
#include "config/config_error.hpp"
#include "core/call_types.hpp"

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <caf/error.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/sec.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace outbound {
inline namespace group {

namespace {

namespace json = boost::json;

// -- base64 (RFC 4648 section 4, padded: the gateway's encoding of bytes) ---

constexpr char b64_alphabet[]
  = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string b64(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  std::size_t i = 0;
  auto byte = [&in](std::size_t k) {
    return static_cast<uint32_t>(static_cast<unsigned char>(in[k]));
  };
  for (; i + 3 <= in.size(); i += 3) {
    auto n = (byte(i) << 16) | (byte(i + 1) << 8) | byte(i + 2);
    out += b64_alphabet[(n >> 18) & 63];
    out += b64_alphabet[(n >> 12) & 63];
    out += b64_alphabet[(n >> 6) & 63];
    out += b64_alphabet[n & 63];
  }
  if (auto rest = in.size() - i; rest > 0) {
    auto n = byte(i) << 16;
    if (rest == 2)
      n |= byte(i + 1) << 8;
    out += b64_alphabet[(n >> 18) & 63];
    out += b64_alphabet[(n >> 12) & 63];
    out += rest == 2 ? b64_alphabet[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

int b64_digit(char c) {
  if (c >= 'A' && c <= 'Z')
    return c - 'A';
  if (c >= 'a' && c <= 'z')
    return c - 'a' + 26;
  if (c >= '0' && c <= '9')
    return c - '0' + 52;
  if (c == '+')
    return 62;
  if (c == '/')
    return 63;
  return -1;
}

/// The bytes of padded base64 `in`, or nullopt when it is not that.
std::optional<std::string> unb64(std::string_view in) {
  if (in.size() % 4 != 0)
    return std::nullopt;
  std::string out;
  out.reserve(in.size() / 4 * 3);
  for (std::size_t i = 0; i < in.size(); i += 4) {
    int d[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      auto c = in[i + k];
      if (c == '=' && i + 4 == in.size() && k >= 2) {
        d[k] = 0;
        ++pad;
        continue;
      }
      if (pad > 0) // a digit after '='
        return std::nullopt;
      d[k] = b64_digit(c);
      if (d[k] < 0)
        return std::nullopt;
    }
    auto n = (static_cast<uint32_t>(d[0]) << 18)
             | (static_cast<uint32_t>(d[1]) << 12)
             | (static_cast<uint32_t>(d[2]) << 6) | static_cast<uint32_t>(d[3]);
    out += static_cast<char>((n >> 16) & 0xff);
    if (pad < 2)
      out += static_cast<char>((n >> 8) & 0xff);
    if (pad < 1)
      out += static_cast<char>(n & 0xff);
  }
  return out;
}

/// clientv3's getPrefix (clientv3/op.go): the range end selecting every key
/// that starts with `prefix` (non-empty here, and not all 0xff bytes: the
/// store's prefixes end with '/').
std::string prefix_end(std::string prefix) {
  while (!prefix.empty()) {
    auto& c = reinterpret_cast<unsigned char&>(prefix.back());
    if (c < 0xff) {
      ++c;
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');
}

// -- reading answers: never throws, nullptr / nullopt for "not there" -------

const json::value* field(const json::value* v, std::string_view name) {
  if (v == nullptr)
    return nullptr;
  auto* o = v->if_object();
  return o ? o->if_contains(name) : nullptr;
}

const json::value* element(const json::value* v, std::size_t i) {
  if (v == nullptr)
    return nullptr;
  auto* a = v->if_array();
  return a && i < a->size() ? &(*a)[i] : nullptr;
}

std::size_t array_size(const json::value* v) {
  auto* a = v ? v->if_array() : nullptr;
  return a ? a->size() : 0;
}

/// An int64 as the gateway writes it (a decimal string), or a JSON integer.
std::optional<int64_t> int64_of(const json::value* v) {
  if (v == nullptr)
    return std::nullopt;
  if (auto* s = v->if_string()) {
    int64_t n = 0;
    auto* first = s->data();
    auto* last = first + s->size();
    auto [end, ec] = std::from_chars(first, last, n);
    if (ec != std::errc{} || end != last || first == last)
      return std::nullopt;
    return n;
  }
  if (auto* i = v->if_int64())
    return *i;
  if (auto* u = v->if_uint64(); u && *u <= uint64_t(INT64_MAX))
    return static_cast<int64_t>(*u);
  return std::nullopt;
}

/// A field that is left out at its zero value: absent = 0.
std::optional<int64_t> int64_or_zero(const json::value* v) {
  return v == nullptr ? std::optional<int64_t>{0} : int64_of(v);
}

bool succeeded(const json::value* txn) {
  auto* s = field(txn, "succeeded");
  return s && s->is_bool() && s->as_bool();
}

std::string string_or_empty(const json::value* v) {
  auto* s = v ? v->if_string() : nullptr;
  return s ? std::string{*s} : std::string{};
}

/// One key-value of a range answer (mvccpb.KeyValue).
struct kv_entry {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t lease = 0;
};

std::optional<kv_entry> parse_kv(const json::value* v) {
  if (v == nullptr || !v->is_object())
    return std::nullopt;
  kv_entry kv;
  auto* key = field(v, "key");
  if (key == nullptr || !key->is_string())
    return std::nullopt;
  auto k = unb64(key->as_string());
  if (!k || k->empty())
    return std::nullopt;
  kv.key = std::move(*k);
  if (auto* val = field(v, "value")) {
    if (!val->is_string())
      return std::nullopt;
    auto decoded = unb64(val->as_string());
    if (!decoded)
      return std::nullopt;
    kv.value = std::move(*decoded);
  }
  auto cr = int64_of(field(v, "create_revision"));
  auto mr = int64_of(field(v, "mod_revision"));
  auto lease = int64_or_zero(field(v, "lease"));
  if (!cr || !mr || !lease || *cr <= 0 || *mr < *cr)
    return std::nullopt;
  kv.create_revision = *cr;
  kv.mod_revision = *mr;
  kv.lease = *lease;
  return kv;
}

/// The kvs of a RangeResponse object (none: no "kvs"); nullopt when it is
/// not one.
std::optional<std::vector<kv_entry>> parse_range(const json::value* r) {
  if (r == nullptr || !r->is_object())
    return std::nullopt;
  std::vector<kv_entry> out;
  auto* kvs = field(r, "kvs");
  if (kvs == nullptr)
    return out;
  if (!kvs->is_array())
    return std::nullopt;
  for (auto& v : kvs->as_array()) {
    auto kv = parse_kv(&v);
    if (!kv)
      return std::nullopt;
    out.push_back(std::move(*kv));
  }
  return out;
}

/// The range answer of op `i` of a txn answer's responses (`ops` the
/// "responses" array); nullopt when it is not a range answer.
std::optional<std::vector<kv_entry>> range_op(const json::value* ops,
                                              std::size_t i) {
  return parse_range(field(element(ops, i), "response_range"));
}

/// At most one kv (the ranges here name one key); nullopt when garbled.
std::optional<std::optional<kv_entry>>
single_kv(const std::optional<std::vector<kv_entry>>& kvs,
          const std::string& key) {
  if (!kvs || kvs->size() > 1)
    return std::nullopt;
  if (kvs->empty())
    return std::optional<kv_entry>{};
  if (kvs->front().key != key)
    return std::nullopt;
  return std::optional<kv_entry>{kvs->front()};
}

// -- values -----------------------------------------------------------------

std::string cursor_value(const group_position& p) {
  json::object o;
  o["v"] = 1;
  o["era"] = p.era;
  o["offset"] = p.offset;
  o["epoch"] = p.epoch;
  return json::serialize(o);
}

std::optional<group_position> parse_cursor(const std::string& text) {
  json::error_code ec;
  auto v = json::parse(text, ec);
  if (ec || !v.is_object())
    return std::nullopt;
  auto version = int64_of(field(&v, "v"));
  if (!version || *version != 1 || field(&v, "v")->is_string())
    return std::nullopt;
  group_position p;
  auto* era = field(&v, "era");
  if (era == nullptr)
    return std::nullopt;
  if (auto* u = era->if_uint64())
    p.era = *u;
  else if (auto* i = era->if_int64(); i && *i >= 0)
    p.era = static_cast<uint64_t>(*i);
  else
    return std::nullopt;
  auto* offset = field(&v, "offset");
  if (offset == nullptr || offset->is_string())
    return std::nullopt;
  auto off = int64_of(offset);
  if (!off)
    return std::nullopt;
  p.offset = *off;
  if (auto* epoch = field(&v, "epoch")) {
    if (!epoch->is_string())
      return std::nullopt;
    p.epoch = std::string{epoch->as_string()};
  }
  return p;
}

std::string member_value(const member_record& r) {
  json::object o;
  o["v"] = 1;
  o["name"] = r.name;
  o["incarnation"] = r.incarnation;
  o["peer"] = r.peer;
  o["feeds"] = r.feed_digest;
  return json::serialize(o);
}

/// The record stored under members/<name>: the name is the key's; the
/// other fields are read from the value where they are strings (a value
/// that does not parse leaves them empty: a listing is not failed by one
/// foreign key).
member_record parse_member(std::string name, const std::string& text) {
  member_record r;
  r.name = std::move(name);
  json::error_code ec;
  auto v = json::parse(text, ec);
  if (ec || !v.is_object())
    return r;
  r.incarnation = string_or_empty(field(&v, "incarnation"));
  r.peer = string_or_empty(field(&v, "peer"));
  r.feed_digest = string_or_empty(field(&v, "feeds"));
  return r;
}

std::string owner_value(const member_record* r) {
  json::object o;
  o["member"] = r ? r->name : std::string{};
  o["incarnation"] = r ? r->incarnation : std::string{};
  return json::serialize(o);
}

// -- txn building blocks (field names as the proto spells them: the gateway
// ignores unknown fields, so a typo would silently drop a lease) -----------

json::object compare_create(const std::string& key, int64_t revision) {
  return json::object{{"target", "CREATE"},
                      {"key", b64(key)},
                      {"create_revision", std::to_string(revision)},
                      {"result", "EQUAL"}};
}

json::object compare_mod(const std::string& key, int64_t revision) {
  return json::object{{"target", "MOD"},
                      {"key", b64(key)},
                      {"mod_revision", std::to_string(revision)},
                      {"result", "EQUAL"}};
}

json::object compare_lease(const std::string& key, uint64_t lease) {
  return json::object{{"target", "LEASE"},
                      {"key", b64(key)},
                      {"lease", std::to_string(lease)},
                      {"result", "EQUAL"}};
}

json::object op_put(const std::string& key, const std::string& value,
                    uint64_t lease = 0) {
  json::object put{{"key", b64(key)}, {"value", b64(value)}};
  if (lease != 0)
    put["lease"] = std::to_string(lease);
  return json::object{{"request_put", std::move(put)}};
}

json::object op_range(const std::string& key) {
  return json::object{{"request_range", json::object{{"key", b64(key)}}}};
}

json::object op_delete(const std::string& key) {
  return json::object{
    {"request_delete_range", json::object{{"key", b64(key)}}}};
}

// -- errors -------------------------------------------------------------------

std::string clip(std::string s, std::size_t n = 200) {
  if (s.size() > n) {
    s.resize(n);
    s += "...";
  }
  return s;
}

caf::error runtime(const std::string& op, const std::string& what) {
  return caf::make_error(caf::sec::runtime_error, "etcd " + op + ": " + what);
}

caf::error timeout(const std::string& op, const std::string& what) {
  return caf::make_error(caf::sec::request_timeout, "etcd " + op + ": " + what);
}

/// The gRPC code of a gateway error body ({"error","message","code"}).
std::optional<int64_t> grpc_code(const json::value& body) {
  auto* c = field(&body, "code");
  if (c == nullptr || c->is_string())
    return std::nullopt;
  return int64_of(c);
}

/// The error for an answer that is not 200.
caf::error status_error(const std::string& op, int status,
                        const json::value& body) {
  auto code = grpc_code(body);
  if (!code)
    return runtime(op, "HTTP " + std::to_string(status)
                         + " without a gateway error body");
  auto msg = string_or_empty(field(&body, "message"));
  auto what = "HTTP " + std::to_string(status) + ", gRPC code "
              + std::to_string(*code) + ": " + clip(msg);
  // 4 = DEADLINE_EXCEEDED (etcd's own "request timed out" is 14,
  // Unavailable: nothing known either way, a runtime_error).
  return *code == 4 ? timeout(op, what) : runtime(op, what);
}

caf::error unexpected(const std::string& op, const json::value& body) {
  return runtime(op, "unexpected answer " + clip(json::serialize(body)));
}

/// What one gateway call gave: an error (no usable answer: transport,
/// time-out, a non-200 status other than `accept_code`, a body that is not
/// a JSON object), or the 200 body. `accepted` is set when the status was
/// not 200 but the body's gRPC code was the one the caller accepts.
struct gw_reply {
  caf::error error;
  json::value body;
  bool accepted = false;
};

// -- the actor
// ------------------------------------------------------------------

/// What this store knows of a feed it claimed: its token, and the
/// mod_revision at which it last saw cursors/<feed> written (0: absent).
struct tenure {
  uint64_t token = 0;
  int64_t cursor_mod = 0;
};

struct etcd_store_state {
  static inline const char* name = "etcd_lease_store";
  service_client_actor client;
  std::string base;
  /// The records joined through this store, by lease (owner values).
  std::map<uint64_t, member_record> joined;
  std::unordered_map<std::string, tenure> tenures;

  std::string member_key(const std::string& name) const {
    return base + "members/" + name;
  }
  std::string owner_key(const std::string& feed) const {
    return base + "owners/" + feed;
  }
  std::string cursor_key(const std::string& feed) const {
    return base + "cursors/" + feed;
  }
};

using self_ptr = lease_store_actor::stateful_pointer<etcd_store_state>;

/// POSTs `body` to `path` and hands the reply to `k` (a callable taking
/// gw_reply&), in this actor. `accept_code`: a gRPC code (e.g. 5 for an
/// unknown lease on revoke) answered as `accepted` instead of an error.
template <class K>
void post(self_ptr self, std::string op, const char* path,
          const json::value& body, bool idempotent, K k,
          int64_t accept_code = -1) {
  call_request r;
  r.method = "POST";
  r.path = path;
  r.body = json::serialize(body);
  r.has_body = true;
  r.raw = true;
  r.idempotent = idempotent;
  r.idempotency_mode = idempotency_key_mode::off;
  // No CAF timeout: the client answers by its deadline (see the header).
  self->request(self->state.client, caf::infinite, std::move(r))
    .then(
      [op, k, accept_code](call_outcome& o) mutable {
        gw_reply rep;
        if (!o.ok()) {
          auto& e = *o.error;
          auto msg = clip(e.message(), 300);
          rep.error = e.kind == error_kind::deadline_exceeded
                          || e.cause == transport_error_kind::timeout
                        ? timeout(op, msg)
                        : runtime(op, msg);
        } else if (o.status != 200) {
          auto code = grpc_code(o.body);
          if (code && *code == accept_code)
            rep.accepted = true;
          else
            rep.error = status_error(op, o.status, o.body);
        } else if (!o.body.is_object()) {
          rep.error
            = o.body.is_null()
                ? runtime(op, "answer is not JSON: " + clip(o.raw_body_error)
                                + " " + clip(o.unreadable_body, 100))
                : unexpected(op, o.body);
        } else {
          rep.body = std::move(o.body);
        }
        k(rep);
      },
      [op, k](caf::error& err) mutable {
        gw_reply rep;
        rep.error = err == caf::sec::request_timeout
                      ? timeout(op, caf::to_string(err))
                      : runtime(op, "client failed: " + caf::to_string(err));
        k(rep);
      });
}

/// Runs `f`; an exception becomes `fail(error)` (never out of the actor).
template <class F, class Fail>
void guard(const std::string& op, F&& f, Fail&& fail) {
  try {
    f();
  } catch (...) {
    auto e = error_of_exception(std::current_exception(), "etcd " + op);
    fail(caf::make_error(caf::sec::runtime_error, std::move(e.detail)));
  }
}

/// Splits [0, n) into ceil(n / etcd_feeds_per_txn) ranges of equal size
/// (the first ones one larger).
std::vector<std::pair<std::size_t, std::size_t>> chunks(std::size_t n) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  if (n == 0)
    return out;
  auto k = (n + etcd_feeds_per_txn - 1) / etcd_feeds_per_txn;
  auto size = n / k;
  auto extra = n % k;
  std::size_t first = 0;
  for (std::size_t i = 0; i < k; ++i) {
    auto len = size + (i < extra ? 1 : 0);
    out.emplace_back(first, first + len);
    first += len;
  }
  return out;
}

/// A request answered by several chunk calls: replies of the feeds decided
/// locally plus those of each chunk; fails only when every chunk failed.
template <class Reply>
struct batch {
  caf::typed_response_promise<std::vector<Reply>> rp;
  std::vector<Reply> replies;
  std::size_t pending = 0;
  std::size_t chunks = 0;
  std::size_t failed = 0;
  caf::error first_error;

  void chunk_failed(caf::error err, std::vector<Reply> errors) {
    ++failed;
    if (!first_error)
      first_error = std::move(err);
    for (auto& r : errors)
      replies.push_back(std::move(r));
    done();
  }

  void chunk_ok(std::vector<Reply> rs) {
    for (auto& r : rs)
      replies.push_back(std::move(r));
    done();
  }

  void done() {
    if (--pending > 0)
      return;
    if (chunks > 0 && failed == chunks)
      rp.deliver(std::move(first_error));
    else
      rp.deliver(std::move(replies));
  }

  /// Delivers at once when nothing went out.
  void start_if_empty() {
    if (chunks == 0)
      rp.deliver(std::move(replies));
  }
};

/// The outer answer of a batch txn: its header revision and its responses
/// array of `n` response_txn objects; nullopt when it is not that.
std::optional<std::pair<int64_t, const json::value*>>
batch_answer(const json::value& body, std::size_t n) {
  auto rev = int64_of(field(field(&body, "header"), "revision"));
  auto* ops = field(&body, "responses");
  if (!rev || *rev <= 0 || !succeeded(&body) || array_size(ops) != n)
    return std::nullopt;
  for (std::size_t i = 0; i < n; ++i) {
    auto* t = field(element(ops, i), "response_txn");
    if (t == nullptr || !t->is_object())
      return std::nullopt;
    auto* inner = field(t, "responses");
    if (inner != nullptr && !inner->is_array())
      return std::nullopt;
  }
  return std::make_pair(*rev, ops);
}

// -- join -------------------------------------------------------------------

void fail_join(self_ptr self, caf::typed_response_promise<uint64_t, double> rp,
               uint64_t lease, caf::error err) {
  // The txn may have applied (a time-out): revoking deletes what it wrote.
  // The answer waits for the revocation, so a retried join does not find
  // this lease's key.
  post(
    self, "revoke", "/v3/lease/revoke",
    json::object{{"ID", std::to_string(lease)}}, true,
    [rp, err](gw_reply&) mutable { rp.deliver(std::move(err)); }, 5);
}

void on_granted(self_ptr self, caf::typed_response_promise<uint64_t, double> rp,
                member_record rec, gw_reply& rep) {
  if (rep.error) {
    rp.deliver(std::move(rep.error));
    return;
  }
  auto id = int64_of(field(&rep.body, "ID"));
  auto ttl = int64_of(field(&rep.body, "TTL"));
  if (!id || *id <= 0 || !ttl || *ttl <= 0) {
    rp.deliver(unexpected("grant", rep.body));
    return;
  }
  auto lease = static_cast<uint64_t>(*id);
  auto granted = static_cast<double>(*ttl);
  auto& st = self->state;
  auto key = st.member_key(rec.name);
  json::object txn{
    {"compare", json::array{compare_create(key, 0)}},
    {"success", json::array{op_put(key, member_value(rec), lease)}},
    {"failure", json::array{op_range(key)}}};
  post(self, "join", "/v3/kv/txn", txn, false,
       [self, rp, rec, lease, granted, key](gw_reply& r) mutable {
         guard(
           "join",
           [&] {
             if (r.error) {
               fail_join(self, rp, lease, std::move(r.error));
               return;
             }
             if (succeeded(&r.body)) {
               self->state.joined[lease] = rec;
               rp.deliver(lease, granted);
               return;
             }
             auto holder
               = single_kv(range_op(field(&r.body, "responses"), 0), key);
             if (!holder || !*holder) {
               fail_join(self, rp, lease, unexpected("join", r.body));
               return;
             }
             fail_join(self, rp, lease,
                       runtime("join", "member name '" + clip(rec.name)
                                         + "' is held by lease "
                                         + std::to_string((*holder)->lease)));
           },
           [&](caf::error e) { fail_join(self, rp, lease, std::move(e)); });
       });
}

void join(self_ptr self, caf::typed_response_promise<uint64_t, double> rp,
          const member_record& rec, double ttl) {
  if (rec.name.empty()) {
    rp.deliver(runtime("join", "empty member name"));
    return;
  }
  if (!std::isfinite(ttl)) {
    rp.deliver(runtime("join", "TTL is not finite"));
    return;
  }
  // etcd takes whole seconds; rounding up never shortens the lease, and
  // etcd raises anything below its minimum (2 s by default) itself.
  auto secs = std::clamp(std::ceil(ttl), 1.0, 9e9);
  post(self, "grant", "/v3/lease/grant",
       json::object{{"TTL", static_cast<int64_t>(secs)}}, false,
       [self, rp, rec](gw_reply& r) mutable {
         guard(
           "grant", [&] { on_granted(self, rp, rec, r); },
           [&](caf::error e) { rp.deliver(std::move(e)); });
       });
}

// -- renew, revoke, members -------------------------------------------------

void renew(self_ptr self, caf::typed_response_promise<double> rp,
           uint64_t lease) {
  // One JSON object per call: one renewal, one answer line (more objects
  // would answer several lines, which are not one JSON value).
  post(self, "keepalive", "/v3/lease/keepalive",
       json::object{{"ID", std::to_string(lease)}}, true,
       [rp](gw_reply& r) mutable {
         if (r.error) {
           rp.deliver(std::move(r.error));
           return;
         }
         auto* result = field(&r.body, "result");
         if (result == nullptr || !result->is_object()) {
           rp.deliver(unexpected("keepalive", r.body));
           return;
         }
         // No TTL (0): the lease is unknown, revoked or expired.
         auto ttl = int64_or_zero(field(result, "TTL"));
         if (!ttl) {
           rp.deliver(unexpected("keepalive", r.body));
           return;
         }
         rp.deliver(static_cast<double>(*ttl));
       });
}

void revoke(self_ptr self, caf::typed_response_promise<ack_atom> rp,
            uint64_t lease) {
  post(
    self, "revoke", "/v3/lease/revoke",
    json::object{{"ID", std::to_string(lease)}}, true,
    [self, rp, lease](gw_reply& r) mutable {
      if (r.error) {
        rp.deliver(std::move(r.error));
        return;
      }
      self->state.joined.erase(lease);
      rp.deliver(ack_atom_v);
    },
    5); // NotFound: unknown or already revoked
}

void withdraw(self_ptr self, caf::typed_response_promise<ack_atom> rp,
              uint64_t lease) {
  auto j = self->state.joined.find(lease);
  if (j == self->state.joined.end()) {
    rp.deliver(runtime("withdraw", "lease " + std::to_string(lease)
                                     + " was not joined through this store"));
    return;
  }
  // Deleted only while this lease binds it: a later registration of the
  // same name (a restart) is not touched. Either way the answer is ack.
  auto key = self->state.member_key(j->second.name);
  json::object txn{{"compare", json::array{compare_lease(key, lease)}},
                   {"success", json::array{op_delete(key)}}};
  post(self, "withdraw", "/v3/kv/txn", txn, true, [rp](gw_reply& r) mutable {
    if (r.error) {
      rp.deliver(std::move(r.error));
      return;
    }
    rp.deliver(ack_atom_v);
  });
}

void members(self_ptr self,
             caf::typed_response_promise<std::vector<member_record>> rp) {
  auto prefix = self->state.base + "members/";
  json::object req{{"key", b64(prefix)},
                   {"range_end", b64(prefix_end(prefix))}};
  post(self, "members", "/v3/kv/range", req, true,
       [rp, prefix](gw_reply& r) mutable {
         if (r.error) {
           rp.deliver(std::move(r.error));
           return;
         }
         auto kvs = parse_range(&r.body);
         if (!kvs) {
           rp.deliver(unexpected("members", r.body));
           return;
         }
         std::vector<member_record> out;
         for (auto& kv : *kvs) {
           if (kv.key.size() <= prefix.size()
               || kv.key.compare(0, prefix.size(), prefix) != 0) {
             rp.deliver(
               runtime("members", "key outside the range: " + clip(kv.key)));
             return;
           }
           out.push_back(parse_member(kv.key.substr(prefix.size()), kv.value));
         }
         rp.deliver(std::move(out));
       });
}

// -- claim ------------------------------------------------------------------

/// The answer for one feed of a claim batch (inner txn answer `t`).
claim_reply claim_outcome_of(etcd_store_state& st, const std::string& feed,
                             uint64_t lease, int64_t revision,
                             const json::value* t) {
  claim_reply out;
  out.feed = feed;
  out.outcome = claim_outcome::error;
  auto* ops = field(t, "responses");
  if (array_size(ops) != 2)
    return out;
  auto cursor = single_kv(range_op(ops, 1), st.cursor_key(feed));
  if (!cursor)
    return out;
  uint64_t token = 0;
  if (succeeded(t)) {
    token = static_cast<uint64_t>(revision);
  } else {
    auto owner = single_kv(range_op(ops, 0), st.owner_key(feed));
    if (!owner || !*owner) // the compare saw the key: it must be there
      return out;
    if ((*owner)->lease != static_cast<int64_t>(lease)) {
      out.outcome = claim_outcome::held;
      return out;
    }
    // Held by this very lease: a claim whose answer was lost.
    token = static_cast<uint64_t>((*owner)->create_revision);
  }
  int64_t cursor_mod = 0;
  if (*cursor) {
    auto pos = parse_cursor((*cursor)->value);
    if (!pos) // owner key taken, cursor unreadable: not known, retried
      return out;
    out.cursor = std::move(*pos);
    cursor_mod = (*cursor)->mod_revision;
  }
  out.outcome = claim_outcome::won;
  out.token = token;
  st.tenures[feed] = tenure{token, cursor_mod};
  return out;
}

void claim(self_ptr self,
           caf::typed_response_promise<std::vector<claim_reply>> rp,
           uint64_t lease, const std::vector<std::string>& asked) {
  auto b = std::make_shared<batch<claim_reply>>();
  b->rp = rp;
  if (lease == 0 || lease > uint64_t(INT64_MAX)) {
    rp.deliver(runtime("claim", "not a lease id: " + std::to_string(lease)));
    return;
  }
  std::vector<std::string> feeds;
  std::unordered_set<std::string> seen;
  for (auto& f : asked) {
    if (!seen.insert(f).second)
      continue; // one answer per feed
    if (f.empty())
      b->replies.push_back(claim_reply{f, claim_outcome::error, 0, {}});
    else
      feeds.push_back(f);
  }
  auto& st = self->state;
  auto j = st.joined.find(lease);
  auto owner_text = owner_value(j == st.joined.end() ? nullptr : &j->second);
  auto parts = chunks(feeds.size());
  b->chunks = parts.size();
  b->pending = parts.size();
  for (auto [first, last] : parts) {
    std::vector<std::string> mine(feeds.begin() + first, feeds.begin() + last);
    json::array txns;
    for (auto& f : mine) {
      auto owner = st.owner_key(f);
      auto cursor = st.cursor_key(f);
      txns.push_back(json::object{
        {"request_txn",
         json::object{
           {"compare", json::array{compare_create(owner, 0)}},
           {"success",
            json::array{op_put(owner, owner_text, lease), op_range(cursor)}},
           {"failure", json::array{op_range(owner), op_range(cursor)}}}}});
    }
    json::object req{{"success", std::move(txns)}};
    post(self, "claim", "/v3/kv/txn", req, false,
         [self, b, mine, lease](gw_reply& r) {
           auto errors = [&mine] {
             std::vector<claim_reply> out;
             for (auto& f : mine)
               out.push_back(claim_reply{f, claim_outcome::error, 0, {}});
             return out;
           };
           guard(
             "claim",
             [&] {
               if (r.error) {
                 b->chunk_failed(std::move(r.error), errors());
                 return;
               }
               auto ans = batch_answer(r.body, mine.size());
               if (!ans) {
                 b->chunk_failed(unexpected("claim", r.body), errors());
                 return;
               }
               std::vector<claim_reply> out;
               for (std::size_t i = 0; i < mine.size(); ++i)
                 out.push_back(claim_outcome_of(
                   self->state, mine[i], lease, ans->first,
                   field(element(ans->second, i), "response_txn")));
               b->chunk_ok(std::move(out));
             },
             [&](caf::error e) { b->chunk_failed(std::move(e), errors()); });
         });
  }
  b->start_if_empty();
}

// -- commit and release -----------------------------------------------------

/// True for a token no claim can have produced (compare create_revision
/// == 0 would match an absent owner key; above INT64_MAX etcd refuses it).
bool impossible_token(uint64_t token) {
  return token == 0 || token > uint64_t(INT64_MAX);
}

commit_reply commit_outcome_of(etcd_store_state& st, const commit_item& item,
                               int64_t revision, const json::value* t) {
  commit_reply out{item.feed, commit_outcome::error};
  if (succeeded(t)) {
    out.outcome = commit_outcome::ok;
    st.tenures[item.feed] = tenure{item.token, revision};
    return out;
  }
  auto* ops = field(t, "responses");
  if (array_size(ops) != 2)
    return out;
  auto owner = single_kv(range_op(ops, 0), st.owner_key(item.feed));
  auto cursor = single_kv(range_op(ops, 1), st.cursor_key(item.feed));
  if (!owner || !cursor)
    return out;
  if (!*owner
      || (*owner)->create_revision != static_cast<int64_t>(item.token)) {
    out.outcome = commit_outcome::fenced;
    auto t_it = st.tenures.find(item.feed);
    if (t_it != st.tenures.end() && t_it->second.token == item.token)
      st.tenures.erase(t_it);
    return out;
  }
  // Still ours, but the cursor moved since this store last saw it: an
  // earlier commit of ours that timed out landed after all. Adopt its
  // revision; the core commits again at its next checkpoint.
  st.tenures[item.feed]
    = tenure{item.token, *cursor ? (*cursor)->mod_revision : 0};
  return out;
}

/// Shared by commit and release: dedupe, local answers, chunks, one nested
/// txn per item built by `build`, answers by `decide`.
template <class Item, class Build, class Decide>
void write_batch(self_ptr self,
                 caf::typed_response_promise<std::vector<commit_reply>> rp,
                 const std::string& op, const std::vector<Item>& items,
                 Build build, Decide decide) {
  auto b = std::make_shared<batch<commit_reply>>();
  b->rp = rp;
  std::vector<Item> send;
  std::unordered_set<std::string> seen;
  for (auto& it : items) {
    if (it.feed.empty() || !seen.insert(it.feed).second)
      b->replies.push_back(commit_reply{it.feed, commit_outcome::error});
    else if (impossible_token(it.token))
      b->replies.push_back(commit_reply{it.feed, commit_outcome::fenced});
    else
      send.push_back(it);
  }
  auto parts = chunks(send.size());
  b->chunks = parts.size();
  b->pending = parts.size();
  for (auto [first, last] : parts) {
    std::vector<Item> mine(send.begin() + first, send.begin() + last);
    json::array txns;
    for (auto& it : mine)
      txns.push_back(json::object{{"request_txn", build(it)}});
    json::object req{{"success", std::move(txns)}};
    post(self, op, "/v3/kv/txn", req, false,
         [self, b, mine, op, decide](gw_reply& r) {
           auto errors = [&mine] {
             std::vector<commit_reply> out;
             for (auto& it : mine)
               out.push_back(commit_reply{it.feed, commit_outcome::error});
             return out;
           };
           guard(
             op,
             [&] {
               if (r.error) {
                 b->chunk_failed(std::move(r.error), errors());
                 return;
               }
               auto ans = batch_answer(r.body, mine.size());
               if (!ans) {
                 b->chunk_failed(unexpected(op, r.body), errors());
                 return;
               }
               std::vector<commit_reply> out;
               for (std::size_t i = 0; i < mine.size(); ++i)
                 out.push_back(
                   decide(self->state, mine[i], ans->first,
                          field(element(ans->second, i), "response_txn")));
               b->chunk_ok(std::move(out));
             },
             [&](caf::error e) { b->chunk_failed(std::move(e), errors()); });
         });
  }
  b->start_if_empty();
}

void commit(self_ptr self,
            caf::typed_response_promise<std::vector<commit_reply>> rp,
            const std::vector<commit_item>& items) {
  auto& st = self->state;
  auto build = [&st](const commit_item& it) {
    auto owner = st.owner_key(it.feed);
    auto cursor = st.cursor_key(it.feed);
    auto t = st.tenures.find(it.feed);
    int64_t seen_mod = t != st.tenures.end() && t->second.token == it.token
                         ? t->second.cursor_mod
                         : 0;
    return json::object{
      {"compare",
       json::array{compare_create(owner, static_cast<int64_t>(it.token)),
                   compare_mod(cursor, seen_mod)}},
      {"success", json::array{op_put(cursor, cursor_value(it.cursor))}},
      {"failure", json::array{op_range(owner), op_range(cursor)}}};
  };
  write_batch(self, std::move(rp), "commit", items, build, commit_outcome_of);
}

commit_reply release_outcome_of(etcd_store_state& st, const release_item& item,
                                int64_t, const json::value* t) {
  commit_reply out{item.feed,
                   succeeded(t) ? commit_outcome::ok : commit_outcome::fenced};
  auto it = st.tenures.find(item.feed);
  if (it != st.tenures.end() && it->second.token == item.token)
    st.tenures.erase(it);
  return out;
}

void release(self_ptr self,
             caf::typed_response_promise<std::vector<commit_reply>> rp,
             const std::vector<release_item>& items) {
  auto& st = self->state;
  auto build = [&st](const release_item& it) {
    auto owner = st.owner_key(it.feed);
    json::array ops;
    if (it.cursor)
      ops.push_back(op_put(st.cursor_key(it.feed), cursor_value(*it.cursor)));
    ops.push_back(op_delete(owner));
    return json::object{{"compare", json::array{compare_create(
                                      owner, static_cast<int64_t>(it.token))}},
                        {"success", std::move(ops)}};
  };
  write_batch(self, std::move(rp), "release", items, build, release_outcome_of);
}

lease_store_actor::behavior_type
etcd_store_impl(self_ptr self, service_client_actor client, std::string base) {
  self->state.client = std::move(client);
  self->state.base = std::move(base);
  auto fail = [](auto& rp) {
    return [&rp](caf::error e) {
      rp.deliver(std::move(e));
    };
  };
  return {
    [self, fail](grp_join_atom, const member_record& rec,
                 double ttl) -> caf::typed_response_promise<uint64_t, double> {
      auto rp = self->make_response_promise<uint64_t, double>();
      guard(
        "join", [&] { join(self, rp, rec, ttl); }, fail(rp));
      return rp;
    },
    [self, fail](grp_renew_atom,
                 uint64_t lease) -> caf::typed_response_promise<double> {
      auto rp = self->make_response_promise<double>();
      guard(
        "keepalive", [&] { renew(self, rp, lease); }, fail(rp));
      return rp;
    },
    [self, fail](grp_revoke_atom,
                 uint64_t lease) -> caf::typed_response_promise<ack_atom> {
      auto rp = self->make_response_promise<ack_atom>();
      guard(
        "revoke", [&] { revoke(self, rp, lease); }, fail(rp));
      return rp;
    },
    [self, fail](grp_withdraw_atom,
                 uint64_t lease) -> caf::typed_response_promise<ack_atom> {
      auto rp = self->make_response_promise<ack_atom>();
      guard(
        "withdraw", [&] { withdraw(self, rp, lease); }, fail(rp));
      return rp;
    },
    [self, fail](grp_members_atom)
      -> caf::typed_response_promise<std::vector<member_record>> {
      auto rp = self->make_response_promise<std::vector<member_record>>();
      guard(
        "members", [&] { members(self, rp); }, fail(rp));
      return rp;
    },
    [self, fail](grp_claim_atom, uint64_t lease,
                 const std::vector<std::string>& feeds)
      -> caf::typed_response_promise<std::vector<claim_reply>> {
      auto rp = self->make_response_promise<std::vector<claim_reply>>();
      guard(
        "claim", [&] { claim(self, rp, lease, feeds); }, fail(rp));
      return rp;
    },
    [self, fail](grp_commit_atom, const std::vector<commit_item>& items)
      -> caf::typed_response_promise<std::vector<commit_reply>> {
      auto rp = self->make_response_promise<std::vector<commit_reply>>();
      guard(
        "commit", [&] { commit(self, rp, items); }, fail(rp));
      return rp;
    },
    [self, fail](grp_release_atom, const std::vector<release_item>& items)
      -> caf::typed_response_promise<std::vector<commit_reply>> {
      auto rp = self->make_response_promise<std::vector<commit_reply>>();
      guard(
        "release", [&] { release(self, rp, items); }, fail(rp));
      return rp;
    },
  };
}

} // namespace

lease_store_actor spawn_etcd_lease_store(caf::actor_system& sys,
                                         etcd_store_options opts) {
  if (opts.group.empty())
    throw config_error("group", "required (the group's name)");
  if (opts.group.find('/') != std::string::npos)
    throw config_error("group", "must not contain '/'");
  if (opts.prefix.empty() || opts.prefix.back() != '/')
    throw config_error("prefix", "must be non-empty and end with '/'");
  auto client = opts.client;
  if (!client)
    client = make_service_client(sys, opts.client_cfg);
  return sys.spawn(etcd_store_impl, std::move(client),
                   opts.prefix + opts.group + "/");
}

} // namespace group
} // namespace outbound
