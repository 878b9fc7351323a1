// outbound against a real nginx on 127.0.0.1 (README "Tests": JSON files,
// status codes, a redirect, chunked responses, TLS, and mTLS that nginx
// verifies). Certificates are made at test time with the openssl CLI; nginx
// runs as a child process in a temporary prefix, once per suite. Skipped only
// when no nginx binary exists.
//
// Every assertion is exact: the parsed body, the status, the error kind and
// detail, the attempts, and what nginx's access log says it saw for the
// call's request id.

#include "tests/support/nginx_fixture.hpp"
#include "tests/support/test_certs.hpp"

#include "actors/client/blocking_client.hpp"
#include "config/client_config.hpp"
#include "protocol/errors.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace outbound;
using namespace outbound::testing;

namespace {

const std::string token = "TOKEN123";

class NginxTest : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    skip_.clear();
    setup_error_.clear();
    auto bin = find_program("nginx", "OUTBOUND_NGINX",
                            {"/usr/sbin/nginx", "/usr/local/sbin/nginx",
                             "/usr/local/nginx/sbin/nginx"});
    if (bin.empty()) {
      skip_ = "nginx binary not found (apt-get install nginx, or set "
              "OUTBOUND_NGINX): skipping the nginx integration tests";
      return;
    }
    try {
      dir_ = std::make_unique<temp_dir>("outbound-nginx-");
      pki_ = std::make_unique<test_pki>(test_pki::generate(dir_->path()));
      sink_ = std::make_unique<connection_sink>();
      auto prefix = dir_->file("nginx");
      std::filesystem::create_directories(prefix);
      nginx_
        = std::make_unique<nginx_instance>(bin, prefix, *pki_, sink_->port());
    } catch (const std::exception& e) {
      setup_error_ = e.what();
    }
  }

  static void TearDownTestSuite() {
    nginx_.reset();
    sink_.reset();
    pki_.reset();
    dir_.reset();
  }

  void SetUp() override {
    if (!skip_.empty())
      GTEST_SKIP() << skip_;
    ASSERT_TRUE(setup_error_.empty()) << setup_error_;
    // The actor system keeps a reference to its config: both live as long
    // as the test.
    cfg_ = std::make_unique<caf::actor_system_config>();
    cfg_->add_message_types<caf::id_block::outbound>();
    sys_ = std::make_unique<caf::actor_system>(*cfg_);
  }

  void TearDown() override {
    sys_.reset();
    cfg_.reset();
  }

  /// A config for `l` with short backoffs, the test token, and TLS files
  /// left empty.
  static client_config config(nginx_listener l) {
    client_config c;
    c.base_url = nginx_->base_url(l);
    c.token = token;
    c.timeout = 5.0;
    c.deadline = 15.0;
    c.retry.base_backoff = 0.01;
    c.retry.max_backoff = 0.05;
    return c;
  }

  /// A config for `l` that trusts CA A.
  static client_config tls_config_a(nginx_listener l) {
    auto c = config(l);
    c.tls.ca_file = pki_->ca_a.cert;
    return c;
  }

  blocking_client client(client_config c) {
    return blocking_client{*sys_, std::move(c)};
  }

  static boost::json::value json(const std::string& text) {
    return boost::json::parse(text);
  }

  /// Calls `fn`, expects it to throw `E`, and returns the error.
  template <class E, class Fn>
  static std::optional<call_error> expect_throw(Fn&& fn) {
    try {
      auto v = fn();
      ADD_FAILURE() << "expected an exception, got "
                    << boost::json::serialize(v);
    } catch (const E& e) {
      return e.error();
    } catch (const service_error& e) {
      ADD_FAILURE() << "wrong exception type: " << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "unexpected exception: " << e.what();
    }
    return std::nullopt;
  }

  static inline std::string skip_;
  static inline std::string setup_error_;
  static inline std::unique_ptr<temp_dir> dir_;
  static inline std::unique_ptr<test_pki> pki_;
  static inline std::unique_ptr<connection_sink> sink_;
  static inline std::unique_ptr<nginx_instance> nginx_;

  std::unique_ptr<caf::actor_system_config> cfg_;
  std::unique_ptr<caf::actor_system> sys_;
};

// -- plain HTTP: bodies -------------------------------------------------------

TEST_F(NginxTest, JsonGetReturnsTheExactParsedBody) {
  auto c = client(config(nginx_listener::http));
  auto v = c.request("GET", "/v1/items.json");
  EXPECT_EQ(v, json(nginx_instance::items_body));
  EXPECT_EQ(v.at("items").at(1).at("name").as_string(), "beta");
}

TEST_F(NginxTest, RawGetCarriesRequestIdTokenAndHeaders) {
  auto c = client(config(nginx_listener::http));
  auto r = c.request_raw("GET", "/v1/items.json");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(r.body, json(nginx_instance::items_body));
  ASSERT_NE(find_header(r.headers, "content-type"), nullptr);
  EXPECT_EQ(*find_header(r.headers, "content-type"), "application/json");
  ASSERT_NE(find_header(r.headers, "Content-Length"), nullptr);
  EXPECT_EQ(*find_header(r.headers, "Content-Length"),
            std::to_string(nginx_instance::items_body.size()));
  ASSERT_FALSE(r.request_id.empty());
  auto seen = nginx_->requests_with_id(r.request_id);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].server_port, nginx_->port(nginx_listener::http));
  EXPECT_EQ(seen[0].method, "GET");
  EXPECT_EQ(seen[0].uri, "/v1/items.json");
  EXPECT_EQ(seen[0].status, 200);
  EXPECT_EQ(seen[0].authorization, "Bearer " + token);
}

TEST_F(NginxTest, GivenRequestIdIsSentVerbatim) {
  auto c = client(config(nginx_listener::http));
  call_request req;
  req.method = "GET";
  req.path = "/v1/items.json";
  req.request_id = "nginx-test-given-id-1";
  auto out = c.call(req);
  ASSERT_TRUE(out.ok()) << out.error->message();
  EXPECT_EQ(out.status, 200);
  EXPECT_EQ(out.request_id, "nginx-test-given-id-1");
  EXPECT_EQ(out.body, json(nginx_instance::items_body));
  EXPECT_EQ(nginx_->requests_with_id("nginx-test-given-id-1").size(), 1u);
}

TEST_F(NginxTest, SequentialCallsReuseOneKeepAliveConnection) {
  auto c = client(config(nginx_listener::http));
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    auto r = c.request_raw("GET", "/v1/items.json");
    ASSERT_EQ(r.status, 200);
    ids.push_back(r.request_id);
  }
  std::set<uint64_t> conns;
  std::vector<uint64_t> numbers;
  for (auto& id : ids) {
    auto seen = nginx_->requests_with_id(id);
    ASSERT_EQ(seen.size(), 1u) << id;
    conns.insert(seen[0].connection);
    numbers.push_back(seen[0].connection_requests);
  }
  EXPECT_EQ(conns.size(), 1u) << "keep-alive connection was not reused";
  EXPECT_EQ(numbers, (std::vector<uint64_t>{1, 2, 3, 4, 5}));
}

TEST_F(NginxTest, EmptyBodyIsNull) {
  auto c = client(config(nginx_listener::http));
  EXPECT_TRUE(c.request("GET", "/v1/empty").is_null());
  auto r = c.request_raw("GET", "/v1/empty");
  EXPECT_EQ(r.status, 204);
  EXPECT_TRUE(r.body.is_null());
}

TEST_F(NginxTest, QueryParametersArriveInOrder) {
  auto c = client(config(nginx_listener::http));
  auto v = c.request("GET", "/v1/query", {}, {{"a", "1"}, {"b", "two"}});
  EXPECT_EQ(v, json(R"({"query":"a=1&b=two"})"));
}

TEST_F(NginxTest, NonJsonSuccessIsResponseError) {
  auto c = client(config(nginx_listener::http));
  auto e = expect_throw<response_error>(
    [&] { return c.request("GET", "/v1/text"); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->kind, error_kind::response_error);
  EXPECT_EQ(e->status, 200);
  EXPECT_EQ(e->attempts, 1);
  EXPECT_FALSE(e->nothing_sent);
}

TEST_F(NginxTest, ChunkedResponseIsReallyChunkedOnTheWire) {
  // The fixture's claim, checked on raw bytes: nginx answers /v1/chunked.json
  // with Transfer-Encoding: chunked, no Content-Length, several chunks.
  auto raw = raw_http_exchange(nginx_->port(nginx_listener::http),
                               "GET /v1/chunked.json HTTP/1.1\r\n"
                               "Host: 127.0.0.1\r\nConnection: close\r\n\r\n");
  auto end = raw.find("\r\n\r\n");
  ASSERT_NE(end, std::string::npos) << raw;
  auto head = raw.substr(0, end + 2);
  EXPECT_NE(head.find("HTTP/1.1 200 OK\r\n"), std::string::npos) << head;
  EXPECT_NE(head.find("\r\nTransfer-Encoding: chunked\r\n"), std::string::npos)
    << head;
  EXPECT_EQ(head.find("Content-Length"), std::string::npos) << head;
  // De-chunk by hand: sizes must add up to the file, ending in a 0 chunk.
  std::string body;
  std::size_t pos = end + 4, chunks = 0;
  for (;;) {
    auto crlf = raw.find("\r\n", pos);
    ASSERT_NE(crlf, std::string::npos);
    auto n = std::stoul(raw.substr(pos, crlf - pos), nullptr, 16);
    if (n == 0)
      break;
    body += raw.substr(crlf + 2, n);
    pos = crlf + 2 + n + 2;
    ++chunks;
  }
  EXPECT_EQ(body, nginx_instance::chunked_body());
  EXPECT_GE(chunks, 10u);
}

TEST_F(NginxTest, ChunkedResponseIsParsed) {
  auto c = client(config(nginx_listener::http));
  auto v = c.request("GET", "/v1/chunked.json");
  EXPECT_EQ(v, json(nginx_instance::chunked_body()));
  EXPECT_EQ(v.at("count").as_int64(), 800);
  // And the connection stays usable after a chunked body.
  EXPECT_EQ(c.request("GET", "/v1/items.json"),
            json(nginx_instance::items_body));
}

TEST_F(NginxTest, BodyOverTheCapIsResponseError) {
  auto cfg = config(nginx_listener::http);
  cfg.max_response_bytes = 4096;
  auto c = client(cfg);
  for (auto path : {"/v1/big.json", "/v1/big-chunked.json"}) {
    SCOPED_TRACE(path);
    auto e
      = expect_throw<response_error>([&] { return c.request("GET", path); });
    ASSERT_TRUE(e);
    EXPECT_EQ(e->kind, error_kind::response_error);
    EXPECT_EQ(e->cause, transport_error_kind::too_large);
    EXPECT_EQ(e->attempts, 1);
  }
  // request_raw raises the same: an over-cap body is not a definitive status.
  auto e = expect_throw<response_error>([&] {
    return boost::json::value(c.request_raw("GET", "/v1/big.json").status);
  });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->cause, transport_error_kind::too_large);
  // The client still works after dropping those connections.
  EXPECT_EQ(c.request("GET", "/v1/items.json"),
            json(nginx_instance::items_body));
}

TEST_F(NginxTest, BodyExactlyAtTheCapIsAccepted) {
  auto cfg = config(nginx_listener::http);
  cfg.max_response_bytes = 65536; // big_body() is exactly 65536 bytes
  auto c = client(cfg);
  EXPECT_EQ(c.request("GET", "/v1/big.json"), json(nginx_instance::big_body()));
  EXPECT_EQ(c.request("GET", "/v1/big-chunked.json"),
            json(nginx_instance::big_body()));
}

TEST_F(NginxTest, OverCapErrorBodyStillMapsToItsStatus) {
  // The rule: "An over-cap error body degrades to an empty detail and the
  // status still maps to its type."
  auto cfg = config(nginx_listener::http);
  cfg.max_response_bytes = 4096;
  auto c = client(cfg);
  auto e = expect_throw<server_error>(
    [&] { return c.request("GET", "/v1/big-error"); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->kind, error_kind::server_error);
  EXPECT_EQ(e->status, 500);
  EXPECT_EQ(e->detail, "");
  EXPECT_EQ(e->attempts, 1);
}

// -- plain HTTP: statuses -----------------------------------------------------

TEST_F(NginxTest, NotFoundIsRequestErrorWithTheServersDetail) {
  auto c = client(config(nginx_listener::http));
  auto e
    = expect_throw<request_error>([&] { return c.request("GET", "/v1/nope"); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->kind, error_kind::request_error);
  EXPECT_EQ(e->status, 404);
  EXPECT_EQ(e->detail, "nope");
  EXPECT_EQ(e->attempts, 1);
  EXPECT_FALSE(e->nothing_sent);
  EXPECT_EQ(e->cause, transport_error_kind::none);
  ASSERT_FALSE(e->request_id.empty());
  EXPECT_EQ(nginx_->requests_with_id(e->request_id).size(), 1u);
}

TEST_F(NginxTest, RawNotFoundIsReturnedNotRaised) {
  auto c = client(config(nginx_listener::http));
  auto r = c.request_raw("GET", "/v1/nope");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.body, json(R"({"detail":"nope"})"));
  EXPECT_EQ(r.attempts, 1);
}

TEST_F(NginxTest, ServerErrorIsRaisedAfterOneAttempt) {
  auto c = client(config(nginx_listener::http));
  auto e
    = expect_throw<server_error>([&] { return c.request("GET", "/v1/boom"); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->kind, error_kind::server_error);
  EXPECT_EQ(e->status, 500);
  EXPECT_EQ(e->detail, "boom");
  EXPECT_EQ(e->attempts, 1);
  EXPECT_FALSE(e->nothing_sent);
  // Statuses are definitive by default: nginx saw exactly one request.
  EXPECT_EQ(nginx_->requests_with_id(e->request_id, 1).size(), 1u);
}

TEST_F(NginxTest, UnauthorizedAndForbiddenAreAuthErrors) {
  auto c = client(config(nginx_listener::http));
  auto e401 = expect_throw<auth_error>(
    [&] { return c.request("GET", "/v1/unauthorized"); });
  ASSERT_TRUE(e401);
  EXPECT_EQ(e401->kind, error_kind::auth_error);
  EXPECT_EQ(e401->status, 401);
  EXPECT_EQ(e401->detail, "bad token");
  EXPECT_EQ(e401->attempts, 1);
  // The credential never appears in an error text.
  EXPECT_EQ(e401->message().find(token), std::string::npos);
  auto e403 = expect_throw<auth_error>(
    [&] { return c.request("GET", "/v1/forbidden"); });
  ASSERT_TRUE(e403);
  EXPECT_EQ(e403->status, 403);
  EXPECT_EQ(e403->detail, "no grant");
}

TEST_F(NginxTest, ServiceUnavailableStatusIsDefinitiveByDefault) {
  auto c = client(config(nginx_listener::http));
  auto e = expect_throw<server_error>(
    [&] { return c.request("GET", "/v1/unavailable"); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 503);
  EXPECT_EQ(e->detail, "maintenance");
  EXPECT_EQ(e->attempts, 1);
  EXPECT_EQ(nginx_->requests_with_id(e->request_id, 1).size(), 1u);
}

TEST_F(NginxTest, RetryableStatusIsRetriedWithRetryCountHeader) {
  auto cfg = config(nginx_listener::http);
  cfg.retry.retry_statuses = {503};
  auto c = client(cfg);
  auto e = expect_throw<server_error>(
    [&] { return c.request("GET", "/v1/unavailable"); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 503);
  EXPECT_EQ(e->detail, "maintenance");
  EXPECT_EQ(e->attempts, 3);
  auto seen = nginx_->requests_with_id(e->request_id, 3);
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[1].retry_count, "1");
  EXPECT_EQ(seen[2].retry_count, "2");
  for (auto& s : seen)
    EXPECT_EQ(s.authorization, "Bearer " + token);
}

TEST_F(NginxTest, PostIsNeverRetriedOnRetryableStatus) {
  auto cfg = config(nginx_listener::http);
  cfg.retry.retry_statuses = {503};
  auto c = client(cfg);
  auto e = expect_throw<server_error>(
    [&] { return c.request("POST", "/v1/unavailable", json(R"({"qty":1})")); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 503);
  EXPECT_EQ(e->attempts, 1);
  auto seen = nginx_->requests_with_id(e->request_id, 1);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].method, "POST");
}

TEST_F(NginxTest, PostToAStaticFileIsRequestError405) {
  auto c = client(config(nginx_listener::http));
  auto e = expect_throw<request_error>(
    [&] { return c.request("POST", "/v1/items.json", json(R"({"qty":1})")); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 405);
  EXPECT_EQ(e->detail, classify_status(405).detail);
  EXPECT_EQ(e->attempts, 1);
}

TEST_F(NginxTest, RedirectIsNotFollowed) {
  auto c = client(config(nginx_listener::http));
  auto before = sink_->connections();
  auto e = expect_throw<request_error>(
    [&] { return c.request("GET", "/v1/redirect"); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->kind, error_kind::request_error);
  EXPECT_EQ(e->status, 302);
  EXPECT_EQ(e->attempts, 1);
  EXPECT_EQ(e->location, "http://127.0.0.1:" + std::to_string(sink_->port())
                           + "/v1/items.json");
  EXPECT_EQ(e->detail, classify_status(302).detail);
  // The origin saw one request, with the credential once; the redirect
  // target saw nothing at all.
  auto seen = nginx_->requests_with_id(e->request_id, 1);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].authorization, "Bearer " + token);
  EXPECT_EQ(sink_->connections(), before);
}

TEST_F(NginxTest, RawRedirectReturns302WithLocation) {
  auto c = client(config(nginx_listener::http));
  auto before = sink_->connections();
  auto r = c.request_raw("GET", "/v1/redirect");
  EXPECT_EQ(r.status, 302);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_TRUE(r.body.is_null()); // nginx's HTML page is not JSON
  ASSERT_NE(find_header(r.headers, "Location"), nullptr);
  EXPECT_EQ(*find_header(r.headers, "Location"),
            "http://127.0.0.1:" + std::to_string(sink_->port())
              + "/v1/items.json");
  EXPECT_EQ(nginx_->requests_with_id(r.request_id, 1).size(), 1u);
  EXPECT_EQ(sink_->connections(), before);
}

TEST_F(NginxTest, ConcurrentCallersAllGetTheirAnswers) {
  auto c = client(config(nginx_listener::http));
  constexpr int threads = 8, per_thread = 20;
  std::atomic<int> ok{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < per_thread; ++i)
        if (c.request("GET", "/v1/items.json")
            == json(nginx_instance::items_body))
          ++ok;
    });
  for (auto& t : ts)
    t.join();
  EXPECT_EQ(ok.load(), threads * per_thread);
}

// -- connection life cycle and time budgets ----------------------------------

TEST_F(NginxTest, HeadResponseWithContentLengthHasNoBody) {
  // nginx answers HEAD with the GET's Content-Length (68) and no body: a
  // client that waits for 68 bytes hangs until its timeout.
  auto cfg = config(nginx_listener::http);
  cfg.timeout = 10.0; // far from the bound below, even on a loaded machine
  auto c = client(cfg);
  auto t0 = std::chrono::steady_clock::now();
  auto r = c.request_raw("HEAD", "/v1/items.json");
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_TRUE(r.body.is_null());
  ASSERT_NE(find_header(r.headers, "Content-Length"), nullptr);
  EXPECT_EQ(*find_header(r.headers, "Content-Length"),
            std::to_string(nginx_instance::items_body.size()));
  EXPECT_LT(took, std::chrono::milliseconds{3000});
  // The connection is still in step: the next GET gets its own body.
  auto r2 = c.request_raw("GET", "/v1/items.json");
  EXPECT_EQ(r2.body, json(nginx_instance::items_body));
  auto a = nginx_->requests_with_id(r.request_id, 1);
  auto b = nginx_->requests_with_id(r2.request_id, 1);
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(a[0].method, "HEAD");
  EXPECT_EQ(b[0].connection, a[0].connection);
}

TEST_F(NginxTest, ConnectionClosedByServerWhileIdleIsRedialedWithoutAnAttempt) {
  auto c = client(config(nginx_listener::http));
  auto first = c.request_raw("GET", "/v1/short-idle.json");
  ASSERT_EQ(first.status, 200);
  // nginx closes the pooled connection 100 ms after that answer; the wait
  // leaves a loaded nginx worker well over a second to do it (if it had not,
  // the next GET would legally reuse the connection).
  std::this_thread::sleep_for(std::chrono::milliseconds{1500});
  auto second = c.request_raw("GET", "/v1/items.json");
  EXPECT_EQ(second.status, 200);
  EXPECT_EQ(second.body, json(nginx_instance::items_body));
  EXPECT_EQ(second.attempts, 1);
  auto a = nginx_->requests_with_id(first.request_id, 1);
  auto b = nginx_->requests_with_id(second.request_id, 1);
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u) << "the request must reach nginx exactly once";
  EXPECT_NE(b[0].connection, a[0].connection);
  EXPECT_EQ(b[0].connection_requests, 1u);
  EXPECT_EQ(b[0].retry_count, "-");
}

TEST_F(NginxTest, ConnectionCloseAnswerIsNotReused) {
  auto c = client(config(nginx_listener::http));
  auto first = c.request_raw("GET", "/v1/close.json");
  ASSERT_EQ(first.status, 200);
  EXPECT_EQ(first.body, json(nginx_instance::items_body));
  auto second = c.request_raw("GET", "/v1/items.json");
  EXPECT_EQ(second.status, 200);
  EXPECT_EQ(second.attempts, 1);
  auto a = nginx_->requests_with_id(first.request_id, 1);
  auto b = nginx_->requests_with_id(second.request_id, 1);
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_NE(b[0].connection, a[0].connection);
  EXPECT_EQ(b[0].retry_count, "-");
}

TEST_F(NginxTest, ByteTrickleCannotOutliveThePerAttemptTimeout) {
  // nginx sends the headers and then 256 bytes/s of a 64 KiB body: bytes
  // keep arriving, yet each attempt ends at its 300 ms timeout.
  auto cfg = config(nginx_listener::http);
  cfg.timeout = 0.3;
  cfg.retry.max_attempts = 2;
  auto c = client(cfg);
  auto t0 = std::chrono::steady_clock::now();
  auto e = expect_throw<service_unavailable>(
    [&] { return c.request("GET", "/v1/slow.json"); });
  auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(e);
  EXPECT_EQ(e->kind, error_kind::service_unavailable);
  EXPECT_EQ(e->cause, transport_error_kind::timeout);
  EXPECT_EQ(e->attempts, 2);
  EXPECT_FALSE(e->nothing_sent);
  EXPECT_GE(took, std::chrono::milliseconds{600});
  // Two 300 ms attempts and a backoff under 200 ms, plus the slack of a
  // loaded machine under ASan; the trickle itself would last 256 s.
  EXPECT_LT(took, std::chrono::milliseconds{800 + 1500});
  // nginx logs an aborted request when the client closes its connection.
  auto seen = nginx_->requests_with_id(e->request_id, 2);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_NE(seen[0].connection, seen[1].connection)
    << "a timed-out connection must never be reused";
  EXPECT_EQ(seen[1].retry_count, "1");
}

TEST_F(NginxTest, ByteTrickleEndsAtTheOverallDeadline) {
  auto cfg = config(nginx_listener::http);
  cfg.timeout = 5.0;
  cfg.deadline = 0.5;
  auto c = client(cfg);
  auto t0 = std::chrono::steady_clock::now();
  auto e = expect_throw<deadline_exceeded>(
    [&] { return c.request("GET", "/v1/slow.json"); });
  auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(e);
  EXPECT_EQ(e->kind, error_kind::deadline_exceeded);
  EXPECT_EQ(e->attempts, 1);
  EXPECT_GE(took, std::chrono::milliseconds{450});
  // The 0.5 s deadline plus the slack of a loaded machine under ASan; the
  // attempt's own timeout is 5 s.
  EXPECT_LT(took, std::chrono::milliseconds{500 + 1500});
}

// -- TLS ----------------------------------------------------------------------

TEST_F(NginxTest, TlsWithCaFileSucceeds) {
  auto c = client(tls_config_a(nginx_listener::tls));
  EXPECT_EQ(c.request("GET", "/v1/items.json"),
            json(nginx_instance::items_body));
  auto r = c.request_raw("GET", "/v1/chunked.json");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, json(nginx_instance::chunked_body()));
  auto seen = nginx_->requests_with_id(r.request_id, 1);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].server_port, nginx_->port(nginx_listener::tls));
  // Second request on the same TLS connection.
  EXPECT_EQ(seen[0].connection_requests, 2u);
}

TEST_F(NginxTest, TlsWithoutCaFileFailsAgainstTheSystemStore) {
  // The system trust store does not know CA A.
  auto c = client(config(nginx_listener::tls));
  auto e = expect_throw<service_unavailable>(
    [&] { return c.request("GET", "/v1/items.json"); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->kind, error_kind::service_unavailable);
  EXPECT_EQ(e->cause, transport_error_kind::tls);
  EXPECT_EQ(e->status, 0);
  EXPECT_EQ(e->attempts, 1);
  EXPECT_TRUE(e->nothing_sent);
}

TEST_F(NginxTest, TlsHostNameMismatchFails) {
  // Certificate signed by the trusted CA A, but its only SAN is
  // DNS:localhost: a connection to 127.0.0.1 must fail host-name checks.
  auto c = client(tls_config_a(nginx_listener::tls_dns));
  auto e = expect_throw<service_unavailable>(
    [&] { return c.request("GET", "/v1/items.json"); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->cause, transport_error_kind::tls);
  EXPECT_EQ(e->attempts, 1);
  EXPECT_TRUE(e->nothing_sent);
}

TEST_F(NginxTest, TlsHostNameMatchesWhenDialledByName) {
  // The same server reached as https://localhost:<port> verifies.
  auto cfg = tls_config_a(nginx_listener::tls_dns);
  cfg.base_url = "https://localhost:"
                 + std::to_string(nginx_->port(nginx_listener::tls_dns));
  auto c = client(cfg);
  EXPECT_EQ(c.request("GET", "/v1/items.json"),
            json(nginx_instance::items_body));
}

TEST_F(NginxTest, TlsStatusErrorsMapLikePlainOnes) {
  auto c = client(tls_config_a(nginx_listener::tls));
  auto e
    = expect_throw<request_error>([&] { return c.request("GET", "/v1/nope"); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 404);
  EXPECT_EQ(e->detail, "nope");
}

// -- mTLS (nginx verifies the client with CA A)
// --------------------------------

TEST_F(NginxTest, MtlsWithTheGoodClientCertificateSucceeds) {
  auto cfg = tls_config_a(nginx_listener::mtls);
  cfg.tls.client_cert_file = pki_->client.cert;
  cfg.tls.client_key_file = pki_->client.key;
  auto c = client(cfg);
  auto r = c.request_raw("GET", "/v1/items.json");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, json(nginx_instance::items_body));
  auto seen = nginx_->requests_with_id(r.request_id, 1);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].client_verify, "SUCCESS");
  EXPECT_EQ(c.request("GET", "/v1/items.json"),
            json(nginx_instance::items_body));
}

TEST_F(NginxTest, MtlsWithoutClientCertificateIsRequestError400) {
  // nginx completes the handshake and answers 400 "No required SSL
  // certificate was sent" (an HTML body, so the detail is the default).
  auto c = client(tls_config_a(nginx_listener::mtls));
  auto e = expect_throw<request_error>(
    [&] { return c.request("GET", "/v1/items.json"); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->kind, error_kind::request_error);
  EXPECT_EQ(e->status, 400);
  EXPECT_EQ(e->detail, classify_status(400).detail);
  EXPECT_EQ(e->attempts, 1);
  EXPECT_FALSE(e->nothing_sent);
  auto seen = nginx_->requests_with_id(e->request_id, 1);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].status, 400);
  EXPECT_EQ(seen[0].client_verify, "NONE");
}

TEST_F(NginxTest, MtlsWithForeignClientCertificateIsRequestError400) {
  auto cfg = tls_config_a(nginx_listener::mtls);
  cfg.tls.client_cert_file = pki_->foreign_client.cert;
  cfg.tls.client_key_file = pki_->foreign_client.key;
  auto c = client(cfg);
  auto e = expect_throw<request_error>(
    [&] { return c.request("GET", "/v1/items.json"); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 400);
  EXPECT_EQ(e->detail, classify_status(400).detail);
  EXPECT_EQ(e->attempts, 1);
  auto seen = nginx_->requests_with_id(e->request_id, 1);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].status, 400);
  EXPECT_EQ(seen[0].client_verify.rfind("FAILED:", 0), 0u)
    << seen[0].client_verify;
  // request_raw returns the 400 instead.
  auto r = c.request_raw("GET", "/v1/items.json");
  EXPECT_EQ(r.status, 400);
  EXPECT_TRUE(r.body.is_null());
}

TEST_F(NginxTest, MtlsClientCertificateWithoutCaFileStillVerifiesServer) {
  // A client identity without a CA file: the system store verifies the
  // server, and it does not know CA A.
  auto cfg = config(nginx_listener::mtls);
  cfg.tls.client_cert_file = pki_->client.cert;
  cfg.tls.client_key_file = pki_->client.key;
  auto c = client(cfg);
  auto e = expect_throw<service_unavailable>(
    [&] { return c.request("GET", "/v1/items.json"); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->cause, transport_error_kind::tls);
  EXPECT_EQ(e->attempts, 1);
  EXPECT_TRUE(e->nothing_sent);
}

} // namespace
