// The facts a lease store on etcd relies on, pinned against a real etcd 3.4
// (Debian 12's etcd-server 3.4.23) through its JSON gRPC gateway (/v3/...),
// called with outbound's own service client (blocking_client over the
// service_client actor), as the store will call it. docs/etcd-gateway.md
// lists each fact with the test that pins it and its source.
//
// One etcd per suite, started with its defaults (heartbeat 100 ms, election
// timeout 1000 ms, --max-txn-ops 128); every test works under its own key
// prefix. Without an etcd binary the tests FAIL (CI installs etcd-server).
//
// Sources: etcd 3.4 API reference and gRPC gateway docs
// (https://etcd.io/docs/v3.4/learning/api/,
// https://etcd.io/docs/v3.4/dev-guide/api_grpc_gateway/), and the etcd
// v3.4.23 sources named per test. The gateway is grpc-gateway's runtime:
// Debian builds etcd-server 3.4.23 with grpc-gateway 1.6.4 (the package's
// Built-Using), upstream's 3.4.23 binaries with v1.9.5 (its go.mod). Both
// use the default marshaler JSONPb{OrigName: true}
// (runtime/marshaler_registry.go): proto field names, int64 and uint64 as
// JSON strings, bytes as base64, and fields at
// their zero value left out (the proto3 JSON mapping,
// https://protobuf.dev/programming-guides/proto3/#json).
//
// Timing tests take their margins from the lessor's checks (every 500 ms)
// plus a raft round trip, and accept every outcome the timing allows; they
// compare against times taken around the calls, never against a single
// guess.

#include "tests/support/etcd_fixture.hpp"
#include "tests/support/nginx_fixture.hpp" // raw_http_exchange

#include "actors/client/blocking_client.hpp"
#include "config/client_config.hpp"
#include "core/call_types.hpp"
#include "protocol/http_types.hpp"

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

using namespace outbound;
using namespace outbound::testing;
namespace json = boost::json;
using namespace std::chrono_literals;

namespace {

using steady = std::chrono::steady_clock;

std::string b64(const std::string& s) {
  return base64_encode(s);
}

/// The int64 in a JSON string ("123"); fails the test (and returns -1) when
/// `v` is not a string of an integer.
int64_t i64(const json::value* v) {
  if (v == nullptr || !v->is_string()) {
    ADD_FAILURE() << "expected an int64 as a JSON string, got "
                  << (v ? json::serialize(*v) : std::string{"nothing"});
    return -1;
  }
  try {
    std::size_t used = 0;
    auto s = std::string{v->as_string()};
    auto n = std::stoll(s, &used);
    if (used == s.size())
      return n;
  } catch (const std::exception&) {
  }
  ADD_FAILURE() << "not an int64 string: " << json::serialize(*v);
  return -1;
}

/// The value at `path` below `cur` (keys of objects, indexes of arrays as
/// decimal strings) or nullptr.
const json::value* walk(const json::value* cur, const char* const* first,
                        const char* const* last) {
  for (; first != last; ++first) {
    auto* p = *first;
    if (cur == nullptr)
      return nullptr;
    if (cur->is_object()) {
      cur = cur->as_object().if_contains(p);
    } else if (cur->is_array()) {
      auto i = static_cast<std::size_t>(std::stoul(p));
      auto& a = cur->as_array();
      cur = i < a.size() ? &a[i] : nullptr;
    } else {
      return nullptr;
    }
  }
  return cur;
}

const json::value* walk(const json::value* cur,
                        std::initializer_list<const char*> path) {
  return walk(cur, path.begin(), path.end());
}

const json::value* at(const json::value& v,
                      std::initializer_list<const char*> path) {
  return walk(&v, path);
}

/// As above from an object (pointers into `o` itself, no copy).
const json::value* at(const json::object& o,
                      std::initializer_list<const char*> path) {
  if (path.size() == 0)
    return nullptr;
  auto* first = o.if_contains(*path.begin());
  return walk(first, path.begin() + 1, path.end());
}

/// The length of the array at `v` (0 when it is not one).
std::size_t size_of(const json::value* v) {
  return v && v->is_array() ? v->as_array().size() : 0;
}

/// True when `txn` (a txn answer) says "succeeded": true; the field is
/// left out when false.
bool succeeded(const json::value* txn) {
  auto* s = walk(txn, {"succeeded"});
  return s && s->is_bool() && s->as_bool();
}

bool succeeded(const json::object& txn) {
  auto* s = txn.if_contains("succeeded");
  return s && s->is_bool() && s->as_bool();
}

/// The uint64 in a JSON string (cluster_id and member_id are uint64 and
/// often above INT64_MAX); fails the test (and returns 0) otherwise.
uint64_t u64(const json::value* v) {
  if (v != nullptr && v->is_string()) {
    auto s = std::string{v->as_string()};
    if (!s.empty() && s.find_first_not_of("0123456789") == std::string::npos
        && s.size() <= 20) {
      try {
        return std::stoull(s);
      } catch (const std::exception&) {
      }
    }
  }
  ADD_FAILURE() << "expected a uint64 as a JSON string, got "
                << (v ? json::serialize(*v) : std::string{"nothing"});
  return 0;
}

std::string str(const json::value* v) {
  return v && v->is_string() ? std::string{v->as_string()}
                             : std::string{"<absent>"};
}

json::object compare_create(const std::string& key, int64_t revision) {
  return json::object{{"target", "CREATE"},
                      {"key", b64(key)},
                      {"create_revision", std::to_string(revision)},
                      {"result", "EQUAL"}};
}

json::object op_put(const std::string& key, const std::string& value,
                    const std::string& lease = "") {
  json::object put{{"key", b64(key)}, {"value", b64(value)}};
  if (!lease.empty())
    put["lease"] = lease;
  return json::object{{"request_put", std::move(put)}};
}

json::object op_range(const std::string& key) {
  return json::object{{"request_range", json::object{{"key", b64(key)}}}};
}

/// The claim of one feed as the lease store will make it: if `owner` is
/// absent (create_revision 0), put it with `lease` and read `cursor`;
/// otherwise read `owner` (who holds it).
json::object claim_txn(const std::string& owner, const std::string& cursor,
                       const std::string& member, const std::string& lease) {
  return json::object{
    {"compare", json::array{compare_create(owner, 0)}},
    {"success", json::array{op_put(owner, member, lease), op_range(cursor)}},
    {"failure", json::array{op_range(owner)}}};
}

/// A cursor commit fenced by `token`: if `owner`'s create_revision is still
/// `token`, put `cursor`; otherwise read `owner`.
json::object commit_txn(const std::string& owner, int64_t token,
                        const std::string& cursor, const std::string& value) {
  return json::object{{"compare", json::array{compare_create(owner, token)}},
                      {"success", json::array{op_put(cursor, value)}},
                      {"failure", json::array{op_range(owner)}}};
}

class EtcdGateway : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    etcd_ = start_suite_etcd(setup_error_);
  }

  static void TearDownTestSuite() {
    etcd_.reset();
  }

  void SetUp() override {
    ASSERT_TRUE(setup_error_.empty()) << setup_error_;
    cfg_ = std::make_unique<caf::actor_system_config>();
    cfg_->add_message_types<caf::id_block::outbound>();
    sys_ = std::make_unique<caf::actor_system>(*cfg_);
    client_config c;
    c.base_url = etcd_->base_url();
    c.timeout = 5.0;
    c.deadline = 10.0;
    // One attempt: the POSTs here are not idempotent anyway, and a test
    // must see exactly what one request got.
    c.retry.max_attempts = 1;
    client_ = std::make_unique<blocking_client>(*sys_, c);
    prefix_ = std::string{"/outbound-test/"}
              + ::testing::UnitTest::GetInstance()->current_test_info()->name()
              + "/";
  }

  void TearDown() override {
    client_.reset();
    sys_.reset();
    cfg_.reset();
  }

  /// POSTs `body` verbatim (Content-Type application/json) and returns the
  /// outcome with any HTTP status (raw mode).
  call_outcome post_text(const std::string& path, std::string body) {
    call_request r;
    r.method = "POST";
    r.path = path;
    r.body = std::move(body);
    r.has_body = true;
    r.raw = true;
    return client_->call(std::move(r));
  }

  call_outcome post(const std::string& path, const json::value& body) {
    return post_text(path, json::serialize(body));
  }

  /// POSTs `body` and expects 200 with a JSON object; returns it (an empty
  /// object after a failure was recorded).
  json::object ok(const std::string& path, const json::value& body) {
    auto out = post(path, body);
    if (!out.ok()) {
      ADD_FAILURE() << path << ": " << out.error->message();
      return {};
    }
    if (out.status != 200 || !out.body.is_object()) {
      ADD_FAILURE() << path << " " << json::serialize(body) << ": status "
                    << out.status << " " << json::serialize(out.body)
                    << out.unreadable_body;
      return {};
    }
    return out.body.as_object();
  }

  /// Grants a lease of `ttl` seconds; its ID (a decimal string).
  std::string grant(int64_t ttl) {
    auto g = ok("/v3/lease/grant", json::object{{"TTL", ttl}});
    return str(g.if_contains("ID"));
  }

  json::object put(const std::string& key, const std::string& value,
                   const std::string& lease = "") {
    return ok("/v3/kv/put", op_put(key, value, lease).at("request_put"));
  }

  json::object range(const std::string& key) {
    return ok("/v3/kv/range", json::object{{"key", b64(key)}});
  }

  bool present(const std::string& key) {
    return range(key).contains("kvs");
  }

  json::object keepalive(const std::string& id) {
    return ok("/v3/lease/keepalive", json::object{{"ID", id}});
  }

  /// The error body the gateway gives for a gRPC status (grpc-gateway
  /// runtime.DefaultHTTPError, 1.6.4 and 1.9.5 alike): the message twice
  /// and the gRPC code.
  static json::value grpc_error(const std::string& message, int code) {
    return json::object{
      {"error", message}, {"message", message}, {"code", code}};
  }

  /// A response header: exactly cluster_id and member_id (uint64),
  /// revision (int64) and raft_term (uint64), each as a decimal string.
  static void expect_full_header(const json::value* h) {
    ASSERT_NE(h, nullptr);
    ASSERT_TRUE(h->is_object()) << json::serialize(*h);
    auto& o = h->as_object();
    EXPECT_EQ(o.size(), 4u) << json::serialize(*h);
    EXPECT_GT(u64(o.if_contains("cluster_id")), 0u);
    EXPECT_GT(u64(o.if_contains("member_id")), 0u);
    EXPECT_GT(i64(o.if_contains("revision")), 0);
    EXPECT_GT(u64(o.if_contains("raft_term")), 0u);
  }

  static inline std::string setup_error_;
  static inline std::unique_ptr<etcd_instance> etcd_;

  std::unique_ptr<caf::actor_system_config> cfg_;
  std::unique_ptr<caf::actor_system> sys_;
  std::unique_ptr<blocking_client> client_;
  std::string prefix_;
};

// -- leases: grant ------------------------------------------------------------

TEST_F(EtcdGateway, GrantAnswersHeaderIdAndTtlWithInt64sAsStrings) {
  auto out = post("/v3/lease/grant", json::object{{"TTL", 5}});
  ASSERT_TRUE(out.ok()) << out.error->message();
  EXPECT_EQ(out.status, 200);
  ASSERT_NE(find_header(out.headers, "Content-Type"), nullptr);
  EXPECT_EQ(*find_header(out.headers, "Content-Type"), "application/json");
  ASSERT_TRUE(out.body.is_object()) << json::serialize(out.body);
  auto& g = out.body.as_object();
  EXPECT_EQ(g.size(), 3u) << json::serialize(g);
  expect_full_header(g.if_contains("header"));
  EXPECT_GT(i64(g.if_contains("ID")), 0);
  EXPECT_EQ(str(g.if_contains("TTL")), "5");
  // Input int64s may be strings or numbers (proto3 JSON accepts both).
  auto g2 = ok("/v3/lease/grant", json::object{{"TTL", "7"}});
  EXPECT_EQ(str(g2.if_contains("TTL")), "7");
  // lease/timetolive reports the granted TTL as "grantedTTL" (the proto's
  // own field name) and the remaining seconds as "TTL".
  auto id = str(g.if_contains("ID"));
  auto t = ok("/v3/lease/timetolive", json::object{{"ID", id}});
  EXPECT_EQ(str(t.if_contains("ID")), id);
  EXPECT_EQ(str(t.if_contains("grantedTTL")), "5");
  auto left = i64(t.if_contains("TTL"));
  EXPECT_GE(left, 3);
  EXPECT_LE(left, 5);
}

// etcdserver/server.go (v3.4.23): minTTL = (3 * ElectionTicks / 2) *
// heartbeat, passed as MinLeaseTTL = ceil(minTTL in seconds); with the
// defaults (100 ms heartbeat, 1000 ms election timeout = 10 ticks) that is
// ceil(1.5 s) = 2 s. lease/lessor.go Grant: `if l.ttl < le.minLeaseTTL {
// l.ttl = le.minLeaseTTL }`, and the answer carries the raised TTL.
TEST_F(EtcdGateway, GrantRaisesTtlsBelowTwoSecondsToTwo) {
  for (int64_t asked : {1, 0, -5, 2}) {
    auto g = ok("/v3/lease/grant", json::object{{"TTL", asked}});
    EXPECT_EQ(str(g.if_contains("TTL")), "2") << "asked for " << asked;
    auto t = ok("/v3/lease/timetolive",
                json::object{{"ID", str(g.if_contains("ID"))}});
    EXPECT_EQ(str(t.if_contains("grantedTTL")), "2") << "asked for " << asked;
  }
  // Omitting TTL is asking for 0.
  auto g = ok("/v3/lease/grant", json::object{});
  EXPECT_EQ(str(g.if_contains("TTL")), "2");
  auto g3 = ok("/v3/lease/grant", json::object{{"TTL", 3}});
  EXPECT_EQ(str(g3.if_contains("TTL")), "3");
}

// A client may choose the lease ID (LeaseGrantRequest.ID, "ID is the
// requested ID for the lease. If ID is set to 0, the lessor chooses an
// ID."); granting an existing ID fails with FailedPrecondition, which
// Debian's grpc-gateway 1.6.4 maps to 412 (runtime.HTTPStatusFromCode;
// v1.9.5, in upstream's binaries, maps it to 400: the store must read the
// body's "code", not the status). So a grant whose answer was lost can be
// retried with the same ID without leaking a second lease.
TEST_F(EtcdGateway,
       GrantWithAChosenIdSucceedsOnceThenAnswersFailedPrecondition) {
  auto id
    = std::to_string(0x0123456789abLL
                     + std::chrono::duration_cast<std::chrono::microseconds>(
                         steady::now().time_since_epoch())
                           .count()
                         % 1000000);
  auto first = ok("/v3/lease/grant", json::object{{"ID", id}, {"TTL", 5}});
  EXPECT_EQ(str(first.if_contains("ID")), id);
  EXPECT_EQ(str(first.if_contains("TTL")), "5");
  auto again = post("/v3/lease/grant", json::object{{"ID", id}, {"TTL", 5}});
  ASSERT_TRUE(again.ok()) << again.error->message();
  EXPECT_TRUE(again.status == 412 || again.status == 400) << again.status;
  if (again.status != 412)
    std::cout << "[ note ] FailedPrecondition answered " << again.status
              << ": this etcd's gateway is not Debian's grpc-gateway 1.6.4\n";
  EXPECT_EQ(again.body, grpc_error("etcdserver: lease already exists", 9));
  // lease/lessor.go: MaxLeaseTTL = 9000000000 (OutOfRange, 400).
  auto huge = post("/v3/lease/grant", json::object{{"TTL", "9000000001"}});
  ASSERT_TRUE(huge.ok()) << huge.error->message();
  EXPECT_EQ(huge.status, 400);
  EXPECT_EQ(huge.body, grpc_error("etcdserver: too large lease TTL", 11));
  // A fractional TTL is a JSON decoding error (InvalidArgument, 400).
  auto frac = post_text("/v3/lease/grant", R"({"TTL":2.5})");
  ASSERT_TRUE(frac.ok()) << frac.error->message();
  EXPECT_EQ(frac.status, 400);
  EXPECT_EQ(frac.body,
            grpc_error("json: cannot unmarshal number 2.5 into Go value of "
                       "type int64",
                       3));
}

// -- leases: keepalive --------------------------------------------------------

// LeaseKeepAlive is a bidirectional stream. The gateway
// (etcdserverpb/gw/rpc.pb.gw.go, request_Lease_LeaseKeepAlive_0) decodes
// the request body as a sequence of JSON objects, sends each on the stream
// and closes its sending side at the end of the body; the server
// (etcdserver/api/v3rpc/lease.go, leaseKeepAlive) answers each request,
// then returns at io.EOF. So one object in = one renewal and one chunked
// answer {"result":{...}} that ends at once: a plain request/response for
// service_client, no streaming.
TEST_F(EtcdGateway, KeepaliveWithOneBodyRenewsOnceAndAnswersOneResult) {
  auto id = grant(5);
  auto t0 = steady::now();
  auto out = post("/v3/lease/keepalive", json::object{{"ID", id}});
  auto took = steady::now() - t0;
  ASSERT_TRUE(out.ok()) << out.error->message();
  EXPECT_EQ(out.status, 200);
  ASSERT_NE(find_header(out.headers, "Transfer-Encoding"), nullptr);
  EXPECT_EQ(*find_header(out.headers, "Transfer-Encoding"), "chunked");
  EXPECT_EQ(find_header(out.headers, "Content-Length"), nullptr);
  ASSERT_TRUE(out.body.is_object()) << out.unreadable_body;
  auto& body = out.body.as_object();
  EXPECT_EQ(body.size(), 1u) << json::serialize(body);
  auto* r = body.if_contains("result");
  ASSERT_NE(r, nullptr) << json::serialize(body);
  ASSERT_TRUE(r->is_object());
  EXPECT_EQ(r->as_object().size(), 3u) << json::serialize(*r);
  expect_full_header(r->as_object().if_contains("header"));
  EXPECT_EQ(str(r->as_object().if_contains("ID")), id);
  EXPECT_EQ(str(r->as_object().if_contains("TTL")), "5");
  // The answer ends with the stream: no waiting for a stream timeout.
  EXPECT_LT(took, 2s);
  // The ID may also be a JSON number; and the same client renews again.
  auto n = std::stoll(id);
  auto again = post("/v3/lease/keepalive", json::object{{"ID", n}});
  ASSERT_TRUE(again.ok()) << again.error->message();
  EXPECT_EQ(str(at(again.body, {"result", "TTL"})), "5");
  EXPECT_EQ(again.attempts, 1);
}

// After a keepalive's answer the HTTP connection stays open for the next
// request (Go's server keeps it alive): two keepalives pipelined on one
// socket, the second asking to close, both answered on it at once.
TEST_F(EtcdGateway, KeepaliveAnswerLeavesTheConnectionOpenForTheNextRequest) {
  auto id = grant(5);
  auto body = R"({"ID":")" + id + R"("})";
  auto request = [&body](const char* connection) {
    return std::string{"POST /v3/lease/keepalive HTTP/1.1\r\n"
                       "Host: 127.0.0.1\r\n"
                       "Content-Type: application/json\r\n"
                       "Connection: "}
           + connection + "\r\nContent-Length: " + std::to_string(body.size())
           + "\r\n\r\n" + body;
  };
  auto t0 = steady::now();
  auto wire = raw_http_exchange(etcd_->client_port(),
                                request("keep-alive") + request("close"));
  auto took = steady::now() - t0;
  auto count = [&wire](const std::string& what) {
    std::size_t n = 0;
    for (auto i = wire.find(what); i != std::string::npos;
         i = wire.find(what, i + 1))
      ++n;
    return n;
  };
  EXPECT_EQ(count("HTTP/1.1 200 OK\r\n"), 2u) << wire;
  EXPECT_EQ(count("{\"result\":{"), 2u) << wire;
  EXPECT_EQ(count("Transfer-Encoding: chunked\r\n"), 2u) << wire;
  // raw_http_exchange reads until the server closes (or 5 s): it closed
  // after the second answer, not at a timeout.
  EXPECT_LT(took, 2s);
}

// Two objects in one body are two renewals and two answer lines: the body
// is newline-delimited JSON, not one JSON value, so service_client cannot
// parse it. The store must send exactly one object per call.
TEST_F(EtcdGateway, KeepaliveWithTwoBodiesAnswersTwoLinesThatAreNotOneValue) {
  auto id = grant(5);
  auto one = R"({"ID":")" + id + R"("})";
  auto out = post_text("/v3/lease/keepalive", one + one);
  ASSERT_TRUE(out.ok()) << out.error->message();
  EXPECT_EQ(out.status, 200);
  EXPECT_TRUE(out.body.is_null());
  EXPECT_FALSE(out.raw_body_error.empty());
  auto text = out.unreadable_body;
  auto nl = text.find('\n');
  ASSERT_NE(nl, std::string::npos) << text;
  auto first = json::parse(text.substr(0, nl));
  auto second = json::parse(text.substr(nl + 1));
  EXPECT_EQ(str(at(first, {"result", "TTL"})), "5");
  EXPECT_EQ(str(at(second, {"result", "ID"})), id);
}

// etcdserver/api/v3rpc/lease.go: a renewal of a lease the lessor does not
// know (never granted, revoked, or expired and revoked) is not an error:
// `if err == lease.ErrLeaseNotFound { err = nil; ttl = 0 }`, so the answer
// is 200 with TTL 0, which the JSON leaves out. lease/lessor.go Renew: an
// expired lease not yet revoked waits for its revocation, then answers
// not found the same way.
TEST_F(EtcdGateway, KeepaliveOfAnUnknownOrRevokedLeaseAnswersWithoutTtl) {
  auto unknown = keepalive("12345");
  auto* ur = unknown.if_contains("result");
  ASSERT_TRUE(ur && ur->is_object()) << json::serialize(unknown);
  auto& u = ur->as_object();
  EXPECT_EQ(u.size(), 2u) << json::serialize(u);
  expect_full_header(u.if_contains("header"));
  EXPECT_EQ(str(u.if_contains("ID")), "12345");
  EXPECT_EQ(u.if_contains("TTL"), nullptr);

  auto id = grant(30);
  auto rv = ok("/v3/lease/revoke", json::object{{"ID", id}});
  EXPECT_EQ(rv.size(), 1u) << json::serialize(rv);
  auto revoked = keepalive(id);
  EXPECT_EQ(str(at(revoked, {"result", "ID"})), id);
  EXPECT_EQ(at(revoked, {"result", "TTL"}), nullptr);
  // timetolive of a revoked lease: TTL -1, no grantedTTL.
  auto t = ok("/v3/lease/timetolive", json::object{{"ID", id}});
  EXPECT_EQ(str(t.if_contains("TTL")), "-1");
  EXPECT_EQ(t.if_contains("grantedTTL"), nullptr);

  // An empty body sends nothing on the stream: 200 and an empty body.
  auto empty = post_text("/v3/lease/keepalive", "");
  ASSERT_TRUE(empty.ok()) << empty.error->message();
  EXPECT_EQ(empty.status, 200);
  EXPECT_TRUE(empty.body.is_null());
  EXPECT_TRUE(empty.raw_body_error.empty());
  // A body that is not JSON fails the stream before it starts: the decoding
  // error is not a gRPC status, so it is code 2 (Unknown) and HTTP 500 (a
  // unary call answers the same text with code 3 and 400, see below).
  auto bad = post_text("/v3/lease/keepalive", "garbage");
  ASSERT_TRUE(bad.ok()) << bad.error->message();
  EXPECT_EQ(bad.status, 500);
  EXPECT_EQ(
    bad.body,
    grpc_error("invalid character 'g' looking for beginning of value", 2));
}

// lease/lessor.go Renew: `l.refresh(0)` sets the expiry to now + the full
// TTL, and the answer carries that TTL: a renewal sent at s keeps the lease
// at least until s + TTL.
TEST_F(EtcdGateway, KeepaliveMovesTheExpiryToAFullTtlAfterTheRenewal) {
  constexpr auto ttl = 3s;
  auto key = prefix_ + "k";
  auto t0 = steady::now();
  auto id = grant(3);
  put(key, "v", id);
  std::this_thread::sleep_until(t0 + 1500ms);
  auto ka_sent = steady::now();
  auto ka = keepalive(id);
  auto ka_received = steady::now();
  EXPECT_EQ(str(at(ka, {"result", "TTL"})), "3");
  // From half a second past the first expiry (t0 + 3 s; an unrenewed key
  // goes within about 0.5 s after it) until the key is gone: present
  // whenever the answer came before the renewed expiry (>= ka_sent + 3 s),
  // gone once asked 1.5 s after it.
  auto ms = [&ka_sent](steady::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(t - ka_sent)
      .count();
  };
  std::this_thread::sleep_until(ka_sent + 2s);
  auto gone_by = ka_received + ttl + 1500ms;
  int conclusive = 0;
  for (;;) {
    auto sent = steady::now();
    auto here = present(key);
    auto received = steady::now();
    if (received < ka_sent + ttl) {
      ++conclusive;
      EXPECT_TRUE(here) << "gone " << ms(received)
                        << " ms after the renewal, before its expiry";
    }
    if (sent > gone_by)
      EXPECT_FALSE(here) << "still there " << ms(sent)
                         << " ms after the renewal";
    if (!here) {
      std::cout << "[ note ] renewed lease of 3 s: key gone between "
                << ms(sent) << " and " << ms(received)
                << " ms after the renewal was sent\n";
      break;
    }
    if (sent > gone_by)
      break;
    std::this_thread::sleep_for(100ms);
  }
  if (conclusive == 0)
    std::cout << "[ note ] no check answered between the first and the "
                 "renewed expiry (a stalled machine): nothing to tell\n";
}

// -- leases: revoke and expiry ------------------------------------------------

TEST_F(EtcdGateway, RevokeDeletesEveryKeyAttachedToTheLease) {
  auto id = grant(30);
  put(prefix_ + "a", "1", id);
  put(prefix_ + "b", "2", id);
  put(prefix_ + "c", "3");
  auto rv = post("/v3/lease/revoke", json::object{{"ID", id}});
  ASSERT_TRUE(rv.ok()) << rv.error->message();
  EXPECT_EQ(rv.status, 200);
  ASSERT_TRUE(rv.body.is_object());
  EXPECT_EQ(rv.body.as_object().size(), 1u) << json::serialize(rv.body);
  expect_full_header(rv.body.as_object().if_contains("header"));
  EXPECT_FALSE(present(prefix_ + "a"));
  EXPECT_FALSE(present(prefix_ + "b"));
  EXPECT_TRUE(present(prefix_ + "c"));
  // Revoking again, or putting with the revoked lease: NotFound, 404.
  auto again = post("/v3/lease/revoke", json::object{{"ID", id}});
  ASSERT_TRUE(again.ok()) << again.error->message();
  EXPECT_EQ(again.status, 404);
  EXPECT_EQ(again.body, grpc_error("etcdserver: requested lease not found", 5));
  auto late
    = post("/v3/kv/put", op_put(prefix_ + "d", "4", id).at("request_put"));
  ASSERT_TRUE(late.ok()) << late.error->message();
  EXPECT_EQ(late.status, 404);
  EXPECT_EQ(late.body, grpc_error("etcdserver: requested lease not found", 5));
  EXPECT_FALSE(present(prefix_ + "d"));
}

// lease/lessor.go: Grant sets expiry = now + TTL when it applies the grant
// (between our send and our receipt of the answer); runLoop looks for
// expired leases every 500 ms and hands them to the server, which revokes
// them through raft. So the key stays at least TTL after the grant was sent
// and goes at most about TTL + 0.5 s + a raft round after it was answered;
// the test allows TTL + 1.5 s for a loaded machine.
TEST_F(EtcdGateway, KeyOfAnUnrenewedLeaseGoesBetweenTtlAndTtlPlusOneAndAHalf) {
  struct probe {
    steady::time_point sent;
    steady::time_point received;
    bool present;
  };
  constexpr auto ttl = 3s;
  auto key = prefix_ + "k";
  auto grant_sent = steady::now();
  auto id = grant(3);
  auto grant_received = steady::now();
  put(key, "v", id);
  std::vector<probe> probes;
  auto gone_by = grant_received + ttl + 1500ms;
  auto give_up = grant_received + ttl + 10s;
  for (;;) {
    probe p;
    p.sent = steady::now();
    p.present = present(key);
    p.received = steady::now();
    probes.push_back(p);
    if (p.sent > gone_by || p.sent > give_up)
      break;
    std::this_thread::sleep_for(50ms);
  }
  auto ms = [&grant_sent](steady::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(t - grant_sent)
      .count();
  };
  bool gone = false;
  for (auto& p : probes) {
    if (p.received < grant_sent + ttl)
      EXPECT_TRUE(p.present) << "gone at " << ms(p.received) << " ms";
    if (p.sent > gone_by)
      EXPECT_FALSE(p.present) << "present at " << ms(p.sent) << " ms";
    if (gone)
      EXPECT_FALSE(p.present) << "back at " << ms(p.sent) << " ms";
    if (!p.present && !gone) {
      gone = true;
      std::cout << "[ note ] lease of 3 s: key gone between " << ms(p.sent)
                << " and " << ms(p.received) << " ms after the grant\n";
      ::testing::Test::RecordProperty("gone_after_ms",
                                      static_cast<int>(ms(p.received)));
    }
  }
  EXPECT_TRUE(gone);
  // The lease is gone with its key: a renewal now answers without TTL.
  auto ka = keepalive(id);
  EXPECT_EQ(str(at(ka, {"result", "ID"})), id);
  EXPECT_EQ(at(ka, {"result", "TTL"}), nullptr);
}

// -- transactions: claim, fencing token, commit -------------------------------

// etcd API (https://etcd.io/docs/v3.4/learning/api/): a missing key has
// create_revision 0, so `create_revision == 0` compares "absent"; every txn
// that writes gets one new store revision, which the header carries and
// the written key takes as create_revision (its first version). A txn
// whose compare fails leaves `succeeded` out (false) and runs `failure`.
TEST_F(EtcdGateway, ClaimTxnTakesAnAbsentKeyAndItsCreateRevisionIsTheToken) {
  auto owner = prefix_ + "owners/f1";
  auto cursor = prefix_ + "cursors/f1";
  put(cursor, R"({"cursor":7})");
  auto la = grant(30);
  auto lb = grant(30);

  auto won = ok("/v3/kv/txn", claim_txn(owner, cursor, "member-a", la));
  expect_full_header(won.if_contains("header"));
  auto token = i64(at(won, {"header", "revision"}));
  EXPECT_TRUE(succeeded(won)) << json::serialize(won);
  ASSERT_EQ(size_of(at(won, {"responses"})), 2u) << json::serialize(won);
  EXPECT_EQ(
    i64(at(won, {"responses", "0", "response_put", "header", "revision"})),
    token);
  EXPECT_EQ(
    str(at(won, {"responses", "1", "response_range", "kvs", "0", "value"})),
    b64(R"({"cursor":7})"));

  // The claimed key: create_revision == mod_revision == the claim's header
  // revision, version 1, bound to the lease.
  auto r = range(owner);
  EXPECT_EQ(str(at(r, {"count"})), "1");
  EXPECT_EQ(i64(at(r, {"kvs", "0", "create_revision"})), token);
  EXPECT_EQ(i64(at(r, {"kvs", "0", "mod_revision"})), token);
  EXPECT_EQ(str(at(r, {"kvs", "0", "version"})), "1");
  EXPECT_EQ(str(at(r, {"kvs", "0", "lease"})), la);
  EXPECT_EQ(str(at(r, {"kvs", "0", "value"})), b64("member-a"));

  // A second claim fails, writes nothing (same header revision) and shows
  // the holder in its failure branch.
  auto lost = ok("/v3/kv/txn", claim_txn(owner, cursor, "member-b", lb));
  EXPECT_EQ(lost.if_contains("succeeded"), nullptr) << json::serialize(lost);
  EXPECT_EQ(i64(at(lost, {"header", "revision"})), token);
  ASSERT_EQ(size_of(at(lost, {"responses"})), 1u) << json::serialize(lost);
  auto* holder = at(lost, {"responses", "0", "response_range", "kvs", "0"});
  ASSERT_NE(holder, nullptr) << json::serialize(lost);
  EXPECT_EQ(str(at(*holder, {"value"})), b64("member-a"));
  EXPECT_EQ(str(at(*holder, {"lease"})), la);
  EXPECT_EQ(i64(at(*holder, {"create_revision"})), token);
  EXPECT_EQ(str(at(range(owner), {"kvs", "0", "value"})), b64("member-a"));
}

// create_revision changes when a key is deleted and created again (a new
// holder's claim), and revisions only grow: a commit compared on the old
// token fails, on the new one succeeds.
TEST_F(EtcdGateway, CommitOnTheTokenFailsOnceTheKeyWasCreatedAgain) {
  auto owner = prefix_ + "owners/f1";
  auto cursor = prefix_ + "cursors/f1";
  auto la = grant(30);
  auto first = ok("/v3/kv/txn", claim_txn(owner, cursor, "member-a", la));
  auto token_a = i64(at(first, {"header", "revision"}));

  auto c1 = ok("/v3/kv/txn", commit_txn(owner, token_a, cursor, "10"));
  EXPECT_TRUE(succeeded(c1)) << json::serialize(c1);

  auto del = ok("/v3/kv/deleterange", json::object{{"key", b64(owner)}});
  EXPECT_EQ(str(del.if_contains("deleted")), "1");
  auto lb = grant(30);
  auto second = ok("/v3/kv/txn", claim_txn(owner, cursor, "member-b", lb));
  EXPECT_TRUE(succeeded(second)) << json::serialize(second);
  auto token_b = i64(at(second, {"header", "revision"}));
  EXPECT_GT(token_b, token_a);
  // The cursor the new holder read is the last committed one.
  EXPECT_EQ(
    str(at(second, {"responses", "1", "response_range", "kvs", "0", "value"})),
    b64("10"));

  auto stale = ok("/v3/kv/txn", commit_txn(owner, token_a, cursor, "11"));
  EXPECT_EQ(stale.if_contains("succeeded"), nullptr);
  EXPECT_EQ(i64(at(stale, {"responses", "0", "response_range", "kvs", "0",
                           "create_revision"})),
            token_b);
  EXPECT_EQ(str(at(range(cursor), {"kvs", "0", "value"})), b64("10"));

  auto fresh = ok("/v3/kv/txn", commit_txn(owner, token_b, cursor, "12"));
  EXPECT_TRUE(succeeded(fresh)) << json::serialize(fresh);
  EXPECT_EQ(str(at(range(cursor), {"kvs", "0", "value"})), b64("12"));
}

// Nested txns (RequestOp.request_txn, etcd >= 3.3): a batch without a
// compare whose success ops are one claim txn per feed. Each inner txn
// decides on its own; the batch is one revision, so every feed claimed in
// it gets the same token. Inner answers carry an empty header ({}).
TEST_F(EtcdGateway, NestedTxnClaimsEachFeedOnItsOwnInOneRevision) {
  auto owner = [this](int f) {
    return prefix_ + "owners/f" + std::to_string(f);
  };
  auto cursor = [this](int f) {
    return prefix_ + "cursors/f" + std::to_string(f);
  };
  auto other = grant(30);
  auto held = ok("/v3/kv/txn", claim_txn(owner(2), cursor(2), "other", other));
  ASSERT_TRUE(succeeded(held)) << json::serialize(held);

  auto mine = grant(30);
  json::array claims;
  for (int f : {1, 2, 3})
    claims.push_back(json::object{
      {"request_txn", claim_txn(owner(f), cursor(f), "me", mine)}});
  auto batch = ok("/v3/kv/txn", json::object{{"success", claims}});
  EXPECT_TRUE(succeeded(batch)) << json::serialize(batch);
  auto rev = i64(at(batch, {"header", "revision"}));
  ASSERT_EQ(size_of(at(batch, {"responses"})), 3u) << json::serialize(batch);
  for (const char* i : {"0", "1", "2"}) {
    auto* t = at(batch, {"responses", i, "response_txn"});
    ASSERT_NE(t, nullptr) << json::serialize(batch);
    EXPECT_EQ(*at(*t, {"header"}), json::value(json::object{}))
      << json::serialize(*t);
  }
  EXPECT_TRUE(succeeded(at(batch, {"responses", "0", "response_txn"})));
  // No cursor yet: the range answers only its header.
  auto* no_cursor = at(batch, {"responses", "0", "response_txn", "responses",
                               "1", "response_range"});
  ASSERT_NE(no_cursor, nullptr) << json::serialize(batch);
  EXPECT_EQ(at(*no_cursor, {"kvs"}), nullptr);
  EXPECT_EQ(at(*no_cursor, {"count"}), nullptr);
  EXPECT_EQ(str(at(*no_cursor, {"header", "revision"})),
            str(at(batch, {"header", "revision"})));
  EXPECT_EQ(at(batch, {"responses", "1", "response_txn", "succeeded"}),
            nullptr);
  EXPECT_EQ(str(at(batch, {"responses", "1", "response_txn", "responses", "0",
                           "response_range", "kvs", "0", "lease"})),
            other);
  EXPECT_TRUE(succeeded(at(batch, {"responses", "2", "response_txn"})));
  EXPECT_EQ(i64(at(batch, {"responses", "2", "response_txn", "responses", "0",
                           "response_put", "header", "revision"})),
            rev);
  EXPECT_EQ(i64(at(range(owner(1)), {"kvs", "0", "create_revision"})), rev);
  EXPECT_EQ(i64(at(range(owner(3)), {"kvs", "0", "create_revision"})), rev);
  EXPECT_EQ(str(at(range(owner(2)), {"kvs", "0", "lease"})), other);

  // One feed twice in a batch: both branches put the same key, which
  // etcdserver/api/v3rpc/key.go checkIntervals rejects before anything runs.
  json::array twice;
  for (int i = 0; i < 2; ++i)
    twice.push_back(json::object{
      {"request_txn", claim_txn(owner(4), cursor(4), "me", mine)}});
  auto dup = post("/v3/kv/txn", json::object{{"success", twice}});
  ASSERT_TRUE(dup.ok()) << dup.error->message();
  EXPECT_EQ(dup.status, 400);
  EXPECT_EQ(dup.body,
            grpc_error("etcdserver: duplicate key given in txn request", 3));
  EXPECT_FALSE(present(owner(4)));
}

// etcdserver/api/v3rpc/key.go checkTxnRequest (v3.4.23): a txn may have at
// most max(len(compare), len(success), len(failure)) = maxTxnOps (128 by
// default, embed/config.go DefaultMaxTxnOps); a nested txn is checked
// against maxTxnOps minus its parent's count. So a batch of n claims, each
// with up to k ops per branch, passes when n <= 128 and k <= 128 - n: 126
// claims of 2 ops, 127 single-op txns. Too many: InvalidArgument, 400.
TEST_F(EtcdGateway, TxnOpsAreLimitedTo128PerLevelMinusTheParentsCount) {
  auto too_many
    = grpc_error("etcdserver: too many operations in txn request", 3);
  auto flat = [this](const std::string& tag, int n) {
    json::array ops;
    for (int i = 0; i < n; ++i)
      ops.push_back(op_put(prefix_ + tag + "/" + std::to_string(i), "v"));
    return json::object{{"success", std::move(ops)}};
  };
  auto ok128 = post("/v3/kv/txn", flat("flat128", 128));
  ASSERT_TRUE(ok128.ok()) << ok128.error->message();
  EXPECT_EQ(ok128.status, 200);
  auto no129 = post("/v3/kv/txn", flat("flat129", 129));
  ASSERT_TRUE(no129.ok()) << no129.error->message();
  EXPECT_EQ(no129.status, 400);
  EXPECT_EQ(no129.body, too_many);

  auto lease = grant(30);
  auto claims = [this, &lease](const std::string& tag, int n) {
    json::array ops;
    for (int i = 0; i < n; ++i) {
      auto f = prefix_ + tag + "/" + std::to_string(i);
      ops.push_back(json::object{
        {"request_txn", claim_txn(f + "/owner", f + "/cursor", "me", lease)}});
    }
    return json::object{{"success", std::move(ops)}};
  };
  auto ok126 = post("/v3/kv/txn", claims("claims126", 126));
  ASSERT_TRUE(ok126.ok()) << ok126.error->message();
  EXPECT_EQ(ok126.status, 200) << json::serialize(ok126.body);
  auto count = ok(
    "/v3/kv/range",
    json::object{{"key", b64(prefix_ + "claims126/")},
                 {"range_end", b64(prefix_range_end(prefix_ + "claims126/"))},
                 {"count_only", true}});
  EXPECT_EQ(str(count.if_contains("count")), "126");
  auto no127 = post("/v3/kv/txn", claims("claims127", 127));
  ASSERT_TRUE(no127.ok()) << no127.error->message();
  EXPECT_EQ(no127.status, 400);
  EXPECT_EQ(no127.body, too_many);

  auto singles = [this](const std::string& tag, int n) {
    json::array ops;
    for (int i = 0; i < n; ++i)
      ops.push_back(json::object{
        {"request_txn",
         json::object{
           {"success", json::array{op_put(
                         prefix_ + tag + "/" + std::to_string(i), "v")}}}}});
    return json::object{{"success", std::move(ops)}};
  };
  auto ok127 = post("/v3/kv/txn", singles("singles127", 127));
  ASSERT_TRUE(ok127.ok()) << ok127.error->message();
  EXPECT_EQ(ok127.status, 200) << json::serialize(ok127.body);
  auto no128 = post("/v3/kv/txn", singles("singles128", 128));
  ASSERT_TRUE(no128.ok()) << no128.error->message();
  EXPECT_EQ(no128.status, 400);
  EXPECT_EQ(no128.body, too_many);
}

// -- range
// ----------------------------------------------------------------------

// etcd API: range_end = the prefix with its last byte + 1 selects the
// prefix; kvs come sorted by key; `count` is the number of keys in the
// range whatever the limit, `more` says the limit cut it. Keys and values
// are base64; empty and zero fields (kvs, count, more, an empty value) are
// left out.
TEST_F(EtcdGateway, PrefixRangeAnswersSortedBase64KeysWithCount) {
  auto p = prefix_ + "members/";
  put(p + "b", std::string("\x00\xff\x10", 3));
  put(p + "a", "1");
  put(p + "c", "");
  put(prefix_range_end(p), "outside"); // ".../members0"
  put(prefix_ + "members", "outside");
  json::object req{{"key", b64(p)}, {"range_end", b64(prefix_range_end(p))}};
  auto all = ok("/v3/kv/range", req);
  expect_full_header(all.if_contains("header"));
  EXPECT_EQ(str(all.if_contains("count")), "3");
  EXPECT_EQ(all.if_contains("more"), nullptr);
  ASSERT_EQ(size_of(at(all, {"kvs"})), 3u) << json::serialize(all);
  auto& kvs = all.at("kvs").as_array();
  EXPECT_EQ(base64_decode(str(at(kvs[0], {"key"}))), p + "a");
  EXPECT_EQ(base64_decode(str(at(kvs[1], {"key"}))), p + "b");
  EXPECT_EQ(base64_decode(str(at(kvs[2], {"key"}))), p + "c");
  EXPECT_EQ(base64_decode(str(at(kvs[0], {"value"}))), "1");
  EXPECT_EQ(base64_decode(str(at(kvs[1], {"value"}))),
            std::string("\x00\xff\x10", 3));
  EXPECT_EQ(at(kvs[2], {"value"}), nullptr) << json::serialize(kvs[2]);
  // No lease: the field is left out (lease 0).
  EXPECT_EQ(at(kvs[0], {"lease"}), nullptr);

  auto limited = req;
  limited["limit"] = 2;
  auto two = ok("/v3/kv/range", limited);
  EXPECT_EQ(size_of(at(two, {"kvs"})), 2u);
  EXPECT_EQ(str(two.if_contains("count")), "3");
  ASSERT_NE(two.if_contains("more"), nullptr) << json::serialize(two);
  EXPECT_EQ(two.at("more"), json::value(true));

  auto counted = req;
  counted["count_only"] = true;
  auto c = ok("/v3/kv/range", counted);
  EXPECT_EQ(c.if_contains("kvs"), nullptr);
  EXPECT_EQ(str(c.if_contains("count")), "3");

  auto keys = req;
  keys["keys_only"] = true;
  auto k = ok("/v3/kv/range", keys);
  EXPECT_EQ(at(k, {"kvs", "0", "value"}), nullptr);
  EXPECT_EQ(base64_decode(str(at(k, {"kvs", "0", "key"}))), p + "a");

  auto q = prefix_ + "nobody/";
  auto none
    = ok("/v3/kv/range", json::object{{"key", b64(q)},
                                      {"range_end", b64(prefix_range_end(q))}});
  EXPECT_EQ(none.size(), 1u) << json::serialize(none);
  expect_full_header(none.if_contains("header"));
}

// -- gateway errors
// -------------------------------------------------------------

// grpc-gateway runtime.DefaultHTTPError: a failed unary call answers
// {"error":M,"message":M,"code":C} with C the gRPC code and the status
// from runtime.HTTPStatusFromCode (InvalidArgument 400, NotFound 404,
// OutOfRange 400, Unknown 500; FailedPrecondition 412 in Debian's 1.6.4,
// 400 from v1.9 on). Paths outside the
// gateway's routes get Go's plain-text 404.
TEST_F(EtcdGateway, GatewayErrorsAreJsonWithTheGrpcCodeAndItsHttpStatus) {
  auto bad = post_text("/v3/kv/range", "garbage");
  ASSERT_TRUE(bad.ok()) << bad.error->message();
  EXPECT_EQ(bad.status, 400);
  ASSERT_NE(find_header(bad.headers, "Content-Type"), nullptr);
  EXPECT_EQ(*find_header(bad.headers, "Content-Type"), "application/json");
  EXPECT_EQ(
    bad.body,
    grpc_error("invalid character 'g' looking for beginning of value", 3));

  auto no_key = post("/v3/kv/range", json::object{});
  ASSERT_TRUE(no_key.ok()) << no_key.error->message();
  EXPECT_EQ(no_key.status, 400);
  EXPECT_EQ(no_key.body, grpc_error("etcdserver: key is not provided", 3));

  auto not_b64 = post("/v3/kv/put", json::object{{"key", "not base64!"}});
  ASSERT_TRUE(not_b64.ok()) << not_b64.error->message();
  EXPECT_EQ(not_b64.status, 400);
  EXPECT_EQ(not_b64.body, grpc_error("illegal base64 data at input byte 3", 3));

  auto unknown_lease = post("/v3/lease/revoke", json::object{{"ID", "12345"}});
  ASSERT_TRUE(unknown_lease.ok()) << unknown_lease.error->message();
  EXPECT_EQ(unknown_lease.status, 404);
  EXPECT_EQ(unknown_lease.body,
            grpc_error("etcdserver: requested lease not found", 5));

  auto no_route = post("/v3/nope", json::object{});
  ASSERT_TRUE(no_route.ok()) << no_route.error->message();
  EXPECT_EQ(no_route.status, 404);
  EXPECT_TRUE(no_route.body.is_null());
  EXPECT_EQ(no_route.unreadable_body, "Not Found\n");

  // Unknown fields are ignored, not refused (grpc-gateway
  // runtime/marshal_jsonpb.go: AllowUnknownFields): a misspelt "lease" puts
  // a key without a lease. The store must build its bodies from fixed names.
  auto typo = post("/v3/kv/put", json::object{{"key", b64(prefix_ + "t")},
                                              {"value", b64("v")},
                                              {"leas", "12345"}});
  ASSERT_TRUE(typo.ok()) << typo.error->message();
  EXPECT_EQ(typo.status, 200) << json::serialize(typo.body);
  EXPECT_EQ(at(range(prefix_ + "t"), {"kvs", "0", "lease"}), nullptr);
}

} // namespace
