// Protocol tests of the real transport: the connection_pool actor on a real
// actor system and a real io_runner, against the scripted loopback server
// (exact bytes, exact timing). Cases: public HTTP-client bug reports (below).

#include "actors/pool/connection_pool.hpp"
#include "config/config_error.hpp"
#include "protocol/http_wire.hpp"
#include "protocol/io_runner.hpp"
#include "tests/support/scripted_server.hpp"
#include "tests/support/test_certs.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>

using namespace std::chrono_literals;
using outbound::testing::script;
using outbound::testing::scripted_server;
using outbound::testing::step;

namespace outbound {
namespace {

using clock_type = std::chrono::steady_clock;

const std::string ok_body = R"({"ok":true})";

struct system_config : caf::actor_system_config {
  system_config() {
    add_message_types<caf::id_block::outbound>();
  }
};

class TransportTest : public ::testing::Test {
protected:
  TransportTest() : sys_(cfg_), io_(std::make_shared<io_runner>(2)) {
  }

  ~TransportTest() override {
    for (auto& p : pools_)
      caf::anon_send_exit(p, caf::exit_reason::user_shutdown);
  }

  transport_actor make_pool(const std::string& base_url,
                            std::size_t max_idle = 64, tls_config tls = {}) {
    client_config cfg;
    cfg.base_url = base_url;
    cfg.max_idle_per_endpoint = max_idle;
    cfg.tls = std::move(tls);
    return make_pool(cfg);
  }

  transport_actor make_pool(const client_config& cfg) {
    auto p = spawn_connection_pool(sys_, cfg, io_);
    pools_.push_back(p);
    return p;
  }

  /// A pool for `base_url` with the given connection and queue limits.
  transport_actor make_limited_pool(const std::string& base_url,
                                    std::size_t max_connections,
                                    std::size_t max_pending) {
    client_config cfg;
    cfg.base_url = base_url;
    cfg.max_connections_per_endpoint = max_connections;
    cfg.max_pending_requests = max_pending;
    return make_pool(cfg);
  }

  using held_handle = decltype(std::declval<caf::scoped_actor&>()->request(
    std::declval<const transport_actor&>(), std::chrono::seconds{15},
    std::declval<http_request>()));

  /// A pool at its limit (one connection, up to 8 queued) whose connection
  /// is held: the server reads `held` and never answers it (the server's
  /// first script must read a request and hold). `held` has a 10 s timeout
  /// and its own sender, so the test's queued exchanges come after it.
  struct full_pool {
    transport_actor pool;
    http_request held;
    std::unique_ptr<caf::scoped_actor> sender;
    std::optional<held_handle> handle;
  };

  full_pool make_full_pool(scripted_server& srv) {
    full_pool f;
    f.pool = make_limited_pool(srv.base_url(), 1, 8);
    f.held = request();
    f.held.timeout_ns = 10'000'000'000;
    f.sender = std::make_unique<caf::scoped_actor>(sys_);
    f.handle.emplace(
      (*f.sender)->request(f.pool, std::chrono::seconds{15}, f.held));
    EXPECT_TRUE(srv.wait_for_requests(1, 2s));
    return f;
  }

  /// Cancels the held exchange and returns its answer.
  exchange_result release(full_pool& f) {
    caf::anon_send(f.pool, cancel_atom::value, f.held.exchange_id);
    exchange_result out;
    f.handle->receive([&](exchange_result& r) { out = std::move(r); },
                      [&](caf::error& err) {
                        ADD_FAILURE() << "no answer: " << sys_.render(err);
                      });
    return out;
  }

  http_request request(const std::string& method = "GET",
                       const std::string& target = "/v1/item") {
    http_request r;
    r.exchange_id = ++next_id_;
    r.method = method;
    r.target = target;
    r.headers = {{"Accept", "application/json"}};
    r.timeout_ns = 2'000'000'000;
    r.max_body_bytes = 1024 * 1024;
    return r;
  }

  /// Runs one exchange and waits for its answer (bounded).
  exchange_result exchange(const transport_actor& pool, http_request req) {
    caf::scoped_actor self{sys_};
    exchange_result out;
    auto id = req.exchange_id;
    self->request(pool, std::chrono::seconds{15}, std::move(req))
      .receive([&](exchange_result& res) { out = std::move(res); },
               [&](caf::error& err) {
                 ADD_FAILURE() << "no answer: " << sys_.render(err);
               });
    EXPECT_EQ(out.exchange_id, id);
    return out;
  }

  pool_stats stats(const transport_actor& pool) {
    caf::scoped_actor self{sys_};
    pool_stats out;
    self
      ->request(caf::actor_cast<caf::actor>(pool), std::chrono::seconds{5},
                stats_atom::value)
      .receive([&](pool_stats& s) { out = s; },
               [&](caf::error& err) {
                 ADD_FAILURE() << "no stats: " << sys_.render(err);
               });
    return out;
  }

  static std::string describe(const exchange_result& r) {
    return std::string{to_string(r.error)} + ": " + r.detail;
  }

  system_config cfg_;
  caf::actor_system sys_;
  std::shared_ptr<io_runner> io_;
  std::vector<transport_actor> pools_;
  uint64_t next_id_ = 0;
};

int64_t elapsed_ms(clock_type::time_point since) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now()
                                                               - since)
    .count();
}

// -- keep-alive and stale connections (case 1) --------------------------------

TEST_F(TransportTest, KeepAliveReusesOneConnectionForTwoRequests) {
  scripted_server srv{
    {{step::read_request(),
      step::send(scripted_server::json_response(200, "{}")),
      step::read_request(),
      step::send(scripted_server::json_response(200, ok_body)), step::hold()}}};
  auto pool = make_pool(srv.base_url());
  auto r1 = exchange(pool, request());
  ASSERT_TRUE(r1.ok()) << describe(r1);
  EXPECT_EQ(r1.response.status, 200);
  EXPECT_EQ(r1.response.body, "{}");
  EXPECT_TRUE(r1.new_connection);
  EXPECT_TRUE(r1.request_sent);
  auto r2 = exchange(pool, request());
  ASSERT_TRUE(r2.ok()) << describe(r2);
  EXPECT_EQ(r2.response.body, ok_body);
  EXPECT_FALSE(r2.new_connection);
  EXPECT_EQ(srv.connections(), 1u);
  auto reqs = srv.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[1].connection, 0u);
  // Exact bytes: Host with the non-default port, headers verbatim, no body.
  EXPECT_EQ(reqs[0].raw, "GET /v1/item HTTP/1.1\r\nHost: 127.0.0.1:"
                           + std::to_string(srv.port())
                           + "\r\nAccept: application/json\r\n\r\n");
  auto s = stats(pool);
  EXPECT_EQ(s.dialled, 1u);
  EXPECT_EQ(s.reused, 1u);
  EXPECT_EQ(s.idle, 1u);
}

// The deadline timer of a connection is not re-armed per exchange (a wait
// pending from an earlier exchange stays when it expires no later than the
// new deadline); each exchange still ends at its own deadline.

TEST_F(TransportTest, ReusedConnectionTimesOutAtItsOwnShorterDeadline) {
  scripted_server srv{{{step::read_request(),
                        step::send(scripted_server::json_response(200, "{}")),
                        step::read_request(), step::hold()}}};
  auto pool = make_pool(srv.base_url());
  auto first = request();
  first.timeout_ns = 10'000'000'000; // its wait stays pending after it
  auto r1 = exchange(pool, std::move(first));
  ASSERT_TRUE(r1.ok()) << describe(r1);
  auto second = request();
  second.timeout_ns = 300'000'000;
  auto t0 = clock_type::now();
  auto r2 = exchange(pool, std::move(second));
  auto ms = elapsed_ms(t0);
  ASSERT_FALSE(r2.ok());
  EXPECT_EQ(r2.error, transport_error_kind::timeout) << describe(r2);
  EXPECT_NE(r2.detail.find("reading the response header"), std::string::npos)
    << r2.detail;
  EXPECT_TRUE(r2.request_sent);
  EXPECT_FALSE(r2.new_connection);
  // Its own 300 ms, not the first exchange's 10 s.
  EXPECT_GE(ms, 250);
  EXPECT_LT(ms, 5000);
}

TEST_F(TransportTest, ReusedConnectionOutlivesAnEarlierExchangesDeadline) {
  scripted_server srv{
    {{step::read_request(),
      step::send(scripted_server::json_response(200, "{}")),
      step::read_request(), step::sleep(std::chrono::milliseconds{700}),
      step::send(scripted_server::json_response(200, ok_body)), step::hold()}}};
  auto pool = make_pool(srv.base_url());
  auto first = request();
  first.timeout_ns = 200'000'000; // armed for this one, fires during the next
  auto r1 = exchange(pool, std::move(first));
  ASSERT_TRUE(r1.ok()) << describe(r1);
  auto second = request();
  second.timeout_ns = 5'000'000'000;
  auto t0 = clock_type::now();
  auto r2 = exchange(pool, std::move(second));
  ASSERT_TRUE(r2.ok()) << describe(r2);
  EXPECT_EQ(r2.response.body, ok_body);
  EXPECT_FALSE(r2.new_connection);
  EXPECT_GE(elapsed_ms(t0), 600);
  EXPECT_EQ(srv.connections(), 1u);
}

TEST_F(TransportTest, PostCarriesContentLengthAndByteIdenticalBody) {
  scripted_server srv{
    {{step::read_request(),
      step::send(scripted_server::json_response(201, "{}")),
      step::read_request(),
      step::send(scripted_server::json_response(200, "{}")), step::hold()}}};
  auto pool = make_pool(srv.base_url());
  auto req = request("POST", "/v1/orders?x=1%202");
  req.body = R"({"qty":1})";
  req.headers.emplace_back("Content-Type", "application/json");
  auto r = exchange(pool, req);
  ASSERT_TRUE(r.ok()) << describe(r);
  EXPECT_EQ(r.response.status, 201);
  auto empty_post = request("POST", "/v1/ping");
  auto r2 = exchange(pool, empty_post);
  ASSERT_TRUE(r2.ok()) << describe(r2);
  auto reqs = srv.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].raw,
            "POST /v1/orders?x=1%202 HTTP/1.1\r\nHost: 127.0.0.1:"
              + std::to_string(srv.port())
              + "\r\nAccept: application/json\r\nContent-Type: "
                "application/json\r\nContent-Length: 9\r\n\r\n{\"qty\":1}");
  EXPECT_EQ(reqs[0].body, R"({"qty":1})");
  // A POST without a body still says Content-Length: 0.
  EXPECT_NE(reqs[1].raw.find("\r\nContent-Length: 0\r\n"), std::string::npos);
}

TEST_F(TransportTest, IdleCloseAnswersNotSentAndFreshConnectionWorks) {
  scripted_server srv{{
    {step::read_request(),
     step::send(scripted_server::json_response(200, "{}")), step::sleep(100ms),
     step::close()},
    {step::read_request(),
     step::send(scripted_server::json_response(200, "{}")), step::hold()},
  }};
  auto pool = make_pool(srv.base_url());
  ASSERT_TRUE(exchange(pool, request()).ok());
  ASSERT_TRUE(srv.wait_for_finished(0, 2s));
  std::this_thread::sleep_for(50ms); // let the FIN reach the client
  auto r2 = exchange(pool, request());
  EXPECT_EQ(r2.error, transport_error_kind::not_sent) << describe(r2);
  EXPECT_FALSE(r2.request_sent);
  auto fresh = request();
  fresh.fresh_connection = true;
  auto r3 = exchange(pool, fresh);
  ASSERT_TRUE(r3.ok()) << describe(r3);
  EXPECT_TRUE(r3.new_connection);
  EXPECT_EQ(srv.connections(), 2u);
  EXPECT_EQ(srv.requests().size(), 2u); // nothing went out on the dead socket
  auto s = stats(pool);
  EXPECT_EQ(s.stale_discarded, 1u);
  EXPECT_EQ(s.dialled, 2u);
}

TEST_F(TransportTest, EarlyResponseOnAReusedConnectionIsReadAfterTheWrite) {
  // The response to a request on a pooled connection arrives while the
  // request body (16 MiB, more than the loopback socket buffers hold) is
  // still being written: the server answers after the request head and
  // reads the body afterwards. The answer must be that response, complete,
  // once the write is done — and the connection stays reusable.
  const std::size_t body_size = 16u * 1024u * 1024u;
  scripted_server srv{{
    {step::read_request(),
     step::send(scripted_server::json_response(200, "{}")), step::read_head(),
     step::send(scripted_server::json_response(200, ok_body)),
     step::read_bytes(body_size), step::read_request(),
     step::send(scripted_server::json_response(200, R"({"n":3})")),
     step::hold()},
  }};
  auto pool = make_pool(srv.base_url());
  ASSERT_TRUE(exchange(pool, request()).ok());
  auto big = request("POST", "/v1/upload");
  big.body.assign(body_size, 'x');
  big.headers.emplace_back("Content-Type", "application/octet-stream");
  big.timeout_ns = 10'000'000'000;
  auto r2 = exchange(pool, std::move(big));
  ASSERT_TRUE(r2.ok()) << describe(r2);
  EXPECT_EQ(r2.response.status, 200);
  EXPECT_EQ(r2.response.body, ok_body);
  EXPECT_FALSE(r2.new_connection);
  ASSERT_TRUE(srv.wait_for_steps(0, 5, 10s)); // the whole body was read
  auto r3 = exchange(pool, request());
  ASSERT_TRUE(r3.ok()) << describe(r3);
  EXPECT_EQ(r3.response.body, R"({"n":3})");
  EXPECT_FALSE(r3.new_connection);
  EXPECT_EQ(srv.connections(), 1u);
}

TEST_F(TransportTest, FreshConnectionFlagNeverTakesAnIdleConnection) {
  scripted_server srv{{
    {step::read_request(),
     step::send(scripted_server::json_response(200, "{}")), step::hold()},
    {step::read_request(),
     step::send(scripted_server::json_response(200, "{}")), step::hold()},
  }};
  auto pool = make_pool(srv.base_url());
  ASSERT_TRUE(exchange(pool, request()).ok());
  auto fresh = request();
  fresh.fresh_connection = true;
  auto r = exchange(pool, fresh);
  ASSERT_TRUE(r.ok()) << describe(r);
  EXPECT_TRUE(r.new_connection);
  EXPECT_EQ(srv.connections(), 2u);
  EXPECT_EQ(stats(pool).idle, 2u);
}

TEST_F(TransportTest, CloseAfterReadingReusedRequestIsInterruptedAndSent) {
  // Case 1(b): the server reads request 2 completely and closes silently.
  scripted_server srv{{{step::read_request(),
                        step::send(scripted_server::json_response(200, "{}")),
                        step::read_request(), step::close()}}};
  auto pool = make_pool(srv.base_url());
  ASSERT_TRUE(exchange(pool, request()).ok());
  auto r = exchange(pool, request());
  EXPECT_EQ(r.error, transport_error_kind::interrupted) << describe(r);
  EXPECT_EQ(r.detail, "connection closed before the response");
  EXPECT_TRUE(r.request_sent);
  EXPECT_FALSE(r.new_connection);
  EXPECT_EQ(stats(pool).idle, 0u);
}

TEST_F(TransportTest, ResetInsideRequestBodyIsInterruptedAndSent) {
  // Case 1(d): headers and 4 of 9 body bytes read, then RST.
  scripted_server srv{
    {{step::read_head(), step::read_bytes(4), step::reset()}}};
  auto pool = make_pool(srv.base_url());
  auto req = request("POST", "/v1/orders");
  req.body = R"({"qty":1})";
  auto r = exchange(pool, req);
  EXPECT_EQ(r.error, transport_error_kind::interrupted) << describe(r);
  EXPECT_TRUE(r.request_sent);
  ASSERT_EQ(srv.requests().size(), 1u);
  EXPECT_EQ(srv.requests()[0].body, R"({"qt)");
}

// -- Content-Length mismatch (case 2) -----------------------------------------

TEST_F(TransportTest, ContentLengthTooShortIsTruncatedBody) {
  scripted_server srv{{{step::read_request(),
                        step::send("HTTP/1.1 200 OK\r\nContent-Type: "
                                   "application/json\r\nContent-Length: "
                                   "100\r\n\r\n"
                                   + ok_body),
                        step::close()}}};
  auto pool = make_pool(srv.base_url());
  auto r = exchange(pool, request());
  EXPECT_EQ(r.error, transport_error_kind::interrupted) << describe(r);
  EXPECT_EQ(r.detail, "truncated body: expected 100 bytes, got 11");
  EXPECT_TRUE(r.response.body.empty());
  EXPECT_EQ(stats(pool).idle, 0u);
}

TEST_F(TransportTest, OverlongBodyInOneSegmentPoisonsTheConnection) {
  // Case 2(c): Content-Length 5 followed by 11 bytes in the same write.
  scripted_server srv{{
    {step::read_request(),
     step::send("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                "Content-Length: 5\r\n\r\n"
                + ok_body),
     step::hold()},
    {step::read_request(),
     step::send(scripted_server::json_response(200, R"({"n":2})")),
     step::hold()},
  }};
  auto pool = make_pool(srv.base_url());
  auto r1 = exchange(pool, request());
  ASSERT_TRUE(r1.ok()) << describe(r1);
  EXPECT_EQ(r1.response.body, R"({"ok")");
  EXPECT_EQ(stats(pool).idle, 0u); // leftover bytes: not reusable
  auto r2 = exchange(pool, request());
  ASSERT_TRUE(r2.ok()) << describe(r2);
  EXPECT_EQ(r2.response.body, R"({"n":2})");
  EXPECT_TRUE(r2.new_connection);
  EXPECT_EQ(srv.connections(), 2u);
  EXPECT_TRUE(srv.wait_for_peer_close(0, 2s));
}

TEST_F(TransportTest, OverlongBodyArrivingLaterMakesTheIdleConnectionStale) {
  // Case 2(c), the leftover arrives after the response was complete.
  scripted_server srv{{
    {step::read_request(),
     step::send("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                "Content-Length: 5\r\n\r\n{\"ok\""),
     step::sleep(50ms), step::send(":true}"), step::hold()},
    {step::read_request(),
     step::send(scripted_server::json_response(200, R"({"n":2})")),
     step::hold()},
  }};
  auto pool = make_pool(srv.base_url());
  auto r1 = exchange(pool, request());
  ASSERT_TRUE(r1.ok()) << describe(r1);
  // The leftover has arrived once step 4 (its send) is done; a fixed sleep
  // would race a late server thread.
  ASSERT_TRUE(srv.wait_for_steps(0, 4, 3s));
  auto r2 = exchange(pool, request());
  EXPECT_EQ(r2.error, transport_error_kind::not_sent) << describe(r2);
  auto fresh = request();
  fresh.fresh_connection = true;
  auto r3 = exchange(pool, fresh);
  ASSERT_TRUE(r3.ok()) << describe(r3);
  EXPECT_EQ(r3.response.body, R"({"n":2})");
  EXPECT_EQ(srv.requests().size(), 2u);
  EXPECT_EQ(srv.requests()[1].connection, 1u);
}

// -- truncated chunked bodies (case 3) ----------------------------------------

class ChunkedTruncation : public TransportTest,
                          public ::testing::WithParamInterface<const char*> {};

TEST_P(ChunkedTruncation, IsInterruptedNeverASuccess) {
  scripted_server srv{
    {{step::read_request(),
      step::send(scripted_server::chunked_head() + GetParam()),
      step::close()}}};
  auto pool = make_pool(srv.base_url());
  auto r = exchange(pool, request());
  EXPECT_EQ(r.error, transport_error_kind::interrupted) << describe(r);
  EXPECT_EQ(r.detail, "truncated chunked body");
  EXPECT_TRUE(r.request_sent);
  EXPECT_EQ(stats(pool).idle, 0u);
}

INSTANTIATE_TEST_SUITE_P(
  Case3, ChunkedTruncation,
  ::testing::Values("b\r\n{\"ok\":true}\r\n", "b\r\n{\"ok\":true}\r\n0\r\n",
                    "b\r\n{\"ok\":true}\r\n0\r\nX-T: 1\r\n"));

TEST_F(TransportTest, CompleteChunkedBodySucceedsAndTheConnectionIsReused) {
  auto d = scripted_server::chunked_head() + "b\r\n{\"ok\":true}\r\n0\r\n\r\n";
  scripted_server srv{{{step::read_request(), step::send(d),
                        step::read_request(), step::send(d), step::hold()}}};
  auto pool = make_pool(srv.base_url());
  auto r1 = exchange(pool, request());
  ASSERT_TRUE(r1.ok()) << describe(r1);
  EXPECT_EQ(r1.response.body, ok_body);
  auto r2 = exchange(pool, request());
  ASSERT_TRUE(r2.ok()) << describe(r2);
  EXPECT_FALSE(r2.new_connection);
  EXPECT_EQ(srv.connections(), 1u);
}

// -- redirects, malformed responses ------------------------------------------

TEST_F(TransportTest, RedirectIsReturnedNotFollowed) {
  scripted_server other{{}, {step::close()}};
  scripted_server srv{
    {{step::read_request(),
      step::send("HTTP/1.1 302 Found\r\nLocation: " + other.base_url()
                 + "/v1/data\r\nContent-Length: 0\r\n\r\n"),
      step::hold()}}};
  auto pool = make_pool(srv.base_url());
  auto req = request("GET", "/v1/data");
  req.headers.emplace_back("Authorization", "Bearer TOKEN123");
  auto r = exchange(pool, req);
  ASSERT_TRUE(r.ok()) << describe(r);
  EXPECT_EQ(r.response.status, 302);
  auto loc = find_header(r.response.headers, "location");
  ASSERT_NE(loc, nullptr);
  EXPECT_EQ(*loc, other.base_url() + "/v1/data");
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(other.connections(), 0u);
  EXPECT_EQ(srv.requests().size(), 1u);
}

TEST_F(TransportTest, MalformedStatusLineIsInterrupted) {
  scripted_server srv{
    {{step::read_request(),
      step::send("HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n"),
      step::hold()}}};
  auto pool = make_pool(srv.base_url());
  auto r = exchange(pool, request());
  EXPECT_EQ(r.error, transport_error_kind::interrupted) << describe(r);
  EXPECT_EQ(r.detail.rfind("malformed status line", 0), 0u) << r.detail;
}

TEST_F(TransportTest, HeadResponseHasNoBodyAndStaysReusable) {
  scripted_server srv{
    {{step::read_request(),
      step::send("HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n"),
      step::read_request(),
      step::send(scripted_server::json_response(200, "{}")), step::hold()}}};
  auto pool = make_pool(srv.base_url());
  auto r = exchange(pool, request("HEAD"));
  ASSERT_TRUE(r.ok()) << describe(r);
  EXPECT_TRUE(r.response.body.empty());
  auto r2 = exchange(pool, request());
  ASSERT_TRUE(r2.ok()) << describe(r2);
  EXPECT_FALSE(r2.new_connection);
}

TEST_F(TransportTest, ConnectionCloseResponseIsNotReused) {
  scripted_server srv{{{step::read_request(),
                        step::send(scripted_server::json_response(
                          200, "{}", "Connection: close\r\n")),
                        step::hold()}}};
  auto pool = make_pool(srv.base_url());
  auto r = exchange(pool, request());
  ASSERT_TRUE(r.ok()) << describe(r);
  EXPECT_EQ(stats(pool).idle, 0u);
  EXPECT_TRUE(srv.wait_for_peer_close(0, 2s));
}

// -- body cap (case 7, issue behaviour 4) -------------------------------------

TEST_F(TransportTest, ContentLengthOverCapOn2xxFailsRightAfterTheHeader) {
  scripted_server srv{{{step::read_request(),
                        step::send("HTTP/1.1 200 OK\r\nContent-Type: "
                                   "application/json\r\nContent-Length: "
                                   "10485760\r\n\r\n"),
                        step::hold()}}};
  auto pool = make_pool(srv.base_url());
  auto req = request();
  req.max_body_bytes = 1024;
  req.timeout_ns = 10'000'000'000; // far from the bound below
  auto start = clock_type::now();
  auto r = exchange(pool, req);
  EXPECT_EQ(r.error, transport_error_kind::too_large) << describe(r);
  EXPECT_NE(r.detail.find("10485760"), std::string::npos) << r.detail;
  EXPECT_LT(elapsed_ms(start), 3000); // no body byte awaited
  EXPECT_TRUE(srv.wait_for_peer_close(0, 2s));
}

TEST_F(TransportTest, ErrorStatusWithBodyOverCapKeepsStatusAndDropsBody) {
  std::string big(100 * 1000, 'x');
  scripted_server srv{
    {{step::read_request(),
      step::send(scripted_server::json_response(500, big)), step::hold()}}};
  auto pool = make_pool(srv.base_url());
  auto req = request();
  req.max_body_bytes = 256;
  auto r = exchange(pool, req);
  ASSERT_TRUE(r.ok()) << describe(r);
  EXPECT_EQ(r.response.status, 500);
  EXPECT_TRUE(r.response.body_over_cap);
  EXPECT_TRUE(r.response.body.empty());
  EXPECT_EQ(stats(pool).idle, 0u);
}

TEST_F(TransportTest, ChunkedErrorBodyOverCapKeepsStatus) {
  std::string body = scripted_server::chunked_head(503);
  for (int i = 0; i < 10; ++i)
    body += scripted_server::chunk(std::string(100, 'e'));
  body += "0\r\n\r\n";
  scripted_server srv{{{step::read_request(), step::send(body), step::hold()}}};
  auto pool = make_pool(srv.base_url());
  auto req = request();
  req.max_body_bytes = 256;
  auto r = exchange(pool, req);
  ASSERT_TRUE(r.ok()) << describe(r);
  EXPECT_EQ(r.response.status, 503);
  EXPECT_TRUE(r.response.body_over_cap);
  EXPECT_TRUE(r.response.body.empty());
}

script chunked_script(std::size_t chunks, bool extra_byte) {
  script s{step::read_request(), step::send(scripted_server::chunked_head())};
  for (std::size_t i = 0; i < chunks; ++i) {
    s.push_back(
      step::send(scripted_server::chunk(std::string(8, 'a' + i % 26))));
    s.push_back(step::sleep(5ms));
  }
  if (extra_byte) {
    s.push_back(step::send(scripted_server::chunk("z")));
    // The client must not wait for this; 10 s keeps the wrong outcome far
    // from the bound of the test, however slow the 5 ms writes run.
    s.push_back(step::sleep(10s));
  }
  s.push_back(step::send("0\r\n\r\n"));
  s.push_back(step::hold());
  return s;
}

TEST_F(TransportTest, ChunkedBodyExactlyAtCapSucceeds) {
  // Case 7(a): 128 chunks of 8 bytes, 5 ms apart, cap 1024.
  scripted_server srv{{chunked_script(128, false)}};
  auto pool = make_pool(srv.base_url());
  auto req = request();
  req.max_body_bytes = 1024;
  req.timeout_ns = 10'000'000'000;
  auto r = exchange(pool, req);
  ASSERT_TRUE(r.ok()) << describe(r);
  EXPECT_EQ(r.response.body.size(), 1024u);
  EXPECT_EQ(r.response.body.substr(0, 16), "aaaaaaaabbbbbbbb");
  EXPECT_EQ(stats(pool).idle, 1u);
}

TEST_F(TransportTest, ChunkedBodyOneByteOverCapIsTooLargeWithinOneChunk) {
  // Case 7(b): 1025 bytes; the failure comes at the chunk that crosses the
  // cap, not at the end of the stream 10 s later.
  scripted_server srv{{chunked_script(128, true)}};
  auto pool = make_pool(srv.base_url());
  auto req = request();
  req.max_body_bytes = 1024;
  req.timeout_ns = 20'000'000'000;
  auto start = clock_type::now();
  auto r = exchange(pool, req);
  EXPECT_EQ(r.error, transport_error_kind::too_large) << describe(r);
  EXPECT_LT(elapsed_ms(start), 5000);
  EXPECT_EQ(stats(pool).idle, 0u);
}

// -- deadlines (case 6) -------------------------------------------------------

TEST_F(TransportTest, BodyTrickleTimesOutAtTheDeadline) {
  scripted_server srv{{{step::read_request(),
                        step::send("HTTP/1.1 200 OK\r\nContent-Type: "
                                   "application/json\r\nContent-Length: "
                                   "1000\r\n\r\n"),
                        step::trickle(std::string(20, ' '), 400ms)}}};
  auto pool = make_pool(srv.base_url());
  auto req = request();
  req.timeout_ns = 1'000'000'000;
  auto start = clock_type::now();
  auto r = exchange(pool, req);
  auto ms = elapsed_ms(start);
  EXPECT_EQ(r.error, transport_error_kind::timeout) << describe(r);
  EXPECT_GE(ms, 995);
  EXPECT_LE(ms, 1000 + testing::load_slack_ms); // the trickle lasts 8 s
  EXPECT_TRUE(r.request_sent);
  EXPECT_EQ(stats(pool).idle, 0u);
  EXPECT_TRUE(srv.wait_for_finished(0, 3s)); // the trickle hit a closed socket
}

TEST_F(TransportTest, StatusLineTrickleTimesOutAtTheDeadline) {
  scripted_server srv{
    {{step::read_request(),
      step::trickle("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", 400ms)}}};
  auto pool = make_pool(srv.base_url());
  auto req = request();
  req.timeout_ns = 1'000'000'000;
  auto start = clock_type::now();
  auto r = exchange(pool, req);
  auto ms = elapsed_ms(start);
  EXPECT_EQ(r.error, transport_error_kind::timeout) << describe(r);
  EXPECT_GE(ms, 995);
  EXPECT_LE(ms, 1000 + testing::load_slack_ms); // the trickle lasts 16 s
}

TEST_F(TransportTest, SilentServerTimesOutAndTheConnectionIsClosed) {
  scripted_server srv{{{step::read_request(), step::hold()}}};
  auto pool = make_pool(srv.base_url());
  auto req = request();
  req.timeout_ns = 300'000'000;
  auto r = exchange(pool, req);
  EXPECT_EQ(r.error, transport_error_kind::timeout) << describe(r);
  EXPECT_TRUE(srv.wait_for_peer_close(0, 2s));
  EXPECT_EQ(stats(pool).idle, 0u);
}

// -- connect failures, cancel -------------------------------------------------

TEST_F(TransportTest, ConnectRefusedIsConnectAndNothingSent) {
  // A port that was just free: bind, read it, close.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  auto port = ntohs(addr.sin_port);
  ::close(fd);
  auto pool = make_pool("http://127.0.0.1:" + std::to_string(port));
  auto r = exchange(pool, request());
  EXPECT_EQ(r.error, transport_error_kind::connect) << describe(r);
  EXPECT_FALSE(r.request_sent);
  EXPECT_TRUE(r.new_connection);
}

TEST_F(TransportTest, CancelClosesTheConnectionAndAnswersOnce) {
  scripted_server srv{{{step::read_request(), step::hold()}}};
  auto pool = make_pool(srv.base_url());
  caf::scoped_actor self{sys_};
  auto req = request();
  req.timeout_ns = 10'000'000'000;
  auto id = req.exchange_id;
  auto start = clock_type::now();
  auto handle = self->request(pool, std::chrono::seconds{15}, req);
  ASSERT_TRUE(srv.wait_for_requests(1, 2s));
  caf::anon_send(pool, cancel_atom::value, id);
  exchange_result out;
  handle.receive([&](exchange_result& res) { out = std::move(res); },
                 [&](caf::error& err) { ADD_FAILURE() << sys_.render(err); });
  EXPECT_EQ(out.error, transport_error_kind::timeout);
  EXPECT_EQ(out.detail, "cancelled");
  EXPECT_LT(elapsed_ms(start), 5000); // not the 10 s timeout
  EXPECT_TRUE(srv.wait_for_peer_close(0, 2s));
  auto s = stats(pool);
  EXPECT_EQ(s.cancelled, 1u);
  EXPECT_EQ(s.idle, 0u);
  EXPECT_EQ(s.in_flight, 0u);
}

TEST_F(TransportTest, HeaderWithLineBreakIsRejectedBeforeSending) {
  scripted_server srv{{}, {step::hold()}};
  auto pool = make_pool(srv.base_url());
  auto req = request();
  req.headers.emplace_back("X-Evil", "a\r\nInjected: 1");
  auto r = exchange(pool, req);
  EXPECT_EQ(r.error, transport_error_kind::config) << describe(r);
  EXPECT_FALSE(r.request_sent);
  EXPECT_EQ(srv.requests().size(), 0u);
}

namespace {

/// Two exchanges at once on a pool that keeps one idle connection
/// (`surplus_idle_time` for the second): both dial, both succeed.
void two_concurrent_exchanges(caf::actor_system& sys, transport_actor pool,
                              scripted_server& srv, http_request r1,
                              http_request r2) {
  caf::scoped_actor self{sys};
  auto h1 = self->request(pool, std::chrono::seconds{15}, std::move(r1));
  auto h2 = self->request(pool, std::chrono::seconds{15}, std::move(r2));
  int ok = 0;
  for (auto* h : {&h1, &h2})
    h->receive([&](exchange_result& r) { ok += r.ok() ? 1 : 0; },
               [&](caf::error& err) { ADD_FAILURE() << sys.render(err); });
  EXPECT_EQ(ok, 2);
  EXPECT_EQ(srv.connections(), 2u);
}

std::vector<script> two_slow_answers() {
  auto resp = scripted_server::json_response(200, "{}");
  return {
    {step::read_request(), step::sleep(200ms), step::send(resp), step::hold()},
    {step::read_request(), step::sleep(200ms), step::send(resp), step::hold()}};
}

/// A pool of `srv` that keeps one connection idle with no time limit and
/// more for `surplus_idle_time` seconds.
client_config keeping_one_idle(const scripted_server& srv,
                               double surplus_idle_time) {
  client_config cfg;
  cfg.base_url = srv.base_url();
  cfg.max_idle_per_endpoint = 1;
  cfg.surplus_idle_time = surplus_idle_time;
  return cfg;
}

} // namespace

TEST_F(TransportTest,
       ConcurrentExchangesDialSeparateConnectionsAndIdleIsCapped) {
  scripted_server srv{two_slow_answers()};
  // Beyond the idle limit: closed at once.
  auto pool = make_pool(keeping_one_idle(srv, 0));
  two_concurrent_exchanges(sys_, pool, srv, request(), request());
  auto s = stats(pool);
  EXPECT_EQ(s.dialled, 2u);
  EXPECT_EQ(s.idle, 1u); // max_idle_per_endpoint = 1: the second was closed
  EXPECT_TRUE(srv.wait_for_peer_close(0, 2s) || srv.wait_for_peer_close(1, 2s));
}

// Beyond the idle limit a connection stays open for surplus_idle_time
// (reusable meanwhile), then the pool closes it (the least recently used)
// by itself: no later message to the pool is needed, and not before its
// idle time is out.
TEST_F(TransportTest,
       AConnectionBeyondTheIdleLimitClosesAfterTheSurplusIdleTime) {
  scripted_server srv{two_slow_answers()};
  auto pool = make_pool(keeping_one_idle(srv, 0.3));
  two_concurrent_exchanges(sys_, pool, srv, request(), request());
  auto answered = clock_type::now();
  // Nothing is sent to the pool until the server sees a close.
  bool closed = false;
  while (!closed && clock_type::now() - answered < 5s)
    closed
      = srv.wait_for_peer_close(0, 20ms) || srv.wait_for_peer_close(1, 20ms);
  ASSERT_TRUE(closed) << "the connection beyond the idle limit stayed open";
  EXPECT_GE(clock_type::now() - answered, 250ms)
    << "closed before its idle time";
  auto s = stats(pool);
  EXPECT_EQ(s.idle_expired, 1u);
  EXPECT_EQ(s.idle, 1u);
  EXPECT_EQ(s.dialled, 2u);
}

TEST_F(TransportTest, DuplicateExchangeIdIsRejected) {
  scripted_server srv{{{step::read_request(), step::hold()}}};
  auto pool = make_pool(srv.base_url());
  caf::scoped_actor self{sys_};
  auto req = request();
  req.timeout_ns = 500'000'000;
  auto h1 = self->request(pool, std::chrono::seconds{15}, req);
  ASSERT_TRUE(srv.wait_for_requests(1, 2s));
  auto r2 = exchange(pool, req);
  EXPECT_EQ(r2.error, transport_error_kind::config) << describe(r2);
  h1.receive(
    [&](exchange_result& r) {
      EXPECT_EQ(r.error, transport_error_kind::timeout);
    },
    [&](caf::error& err) { ADD_FAILURE() << sys_.render(err); });
}

TEST_F(TransportTest, TerminatingThePoolClosesEveryConnection) {
  auto resp = scripted_server::json_response(200, "{}");
  scripted_server srv{{{step::read_request(), step::send(resp), step::hold()},
                       {step::read_request(), step::hold()}}};
  auto pool = make_pool(srv.base_url());
  ASSERT_TRUE(exchange(pool, request()).ok()); // connection 0 now idle
  caf::scoped_actor self{sys_};
  auto fresh = request();
  fresh.fresh_connection = true;
  fresh.timeout_ns = 10'000'000'000;
  auto h = self->request(pool, std::chrono::seconds{15}, fresh);
  ASSERT_TRUE(srv.wait_for_requests(2, 2s)); // connection 1 in flight
  caf::anon_send_exit(pool, caf::exit_reason::user_shutdown);
  EXPECT_TRUE(srv.wait_for_peer_close(0, 2s));
  EXPECT_TRUE(srv.wait_for_peer_close(1, 2s));
  bool answered = false;
  h.receive(
    [&](exchange_result& r) {
      answered = true;
      EXPECT_FALSE(r.ok());
    },
    [&](caf::error&) { answered = true; });
  EXPECT_TRUE(answered);
}

// A requester that sends with a plain send (the service client does) finds
// its call by the answer's exchange id: the answers the pool makes when it
// stops name their exchange too.
TEST_F(TransportTest, TerminatingThePoolAnswersAPlainSendWithItsExchangeId) {
  scripted_server srv{{{step::read_request(), step::hold()}}};
  auto pool = make_pool(srv.base_url());
  caf::scoped_actor self{sys_};
  auto req = request();
  req.timeout_ns = 10'000'000'000;
  auto id = req.exchange_id;
  self->send(pool, std::move(req));
  ASSERT_TRUE(srv.wait_for_requests(1, 2s)); // in flight
  caf::anon_send_exit(pool, caf::exit_reason::user_shutdown);
  bool answered = false;
  self->receive(
    [&](exchange_result& r) {
      answered = true;
      EXPECT_EQ(r.exchange_id, id);
      EXPECT_EQ(r.error, transport_error_kind::interrupted) << describe(r);
      EXPECT_NE(r.detail.find("connection pool stopped"), std::string::npos)
        << describe(r);
    },
    caf::after(std::chrono::seconds{5}) >> [] {});
  EXPECT_TRUE(answered) << "no answer to the plain send";
}

// -- the per-endpoint connection limit and its queue
// ---------------------------

TEST_F(TransportTest, PoolLimitRunsFiveExchangesOnTwoConnections) {
  auto resp = scripted_server::json_response(200, "{}");
  script serve_five;
  for (int i = 0; i < 5; ++i) {
    serve_five.push_back(step::read_request());
    serve_five.push_back(step::sleep(100ms));
    serve_five.push_back(step::send(resp));
  }
  // A third connection (the limit broken) would still be served.
  scripted_server srv{{serve_five, serve_five},
                      {step::read_request(), step::send(resp)}};
  auto pool = make_limited_pool(srv.base_url(), 2, 16);
  caf::scoped_actor self{sys_};
  std::vector<decltype(self->request(pool, std::chrono::seconds{15},
                                     request()))>
    handles;
  for (int i = 0; i < 5; ++i) {
    auto req = request();
    req.timeout_ns = 10'000'000'000;
    handles.push_back(self->request(pool, std::chrono::seconds{15}, req));
  }
  int ok = 0;
  for (auto& h : handles)
    h.receive(
      [&](exchange_result& r) {
        EXPECT_TRUE(r.ok()) << describe(r);
        ok += r.ok() ? 1 : 0;
      },
      [&](caf::error& err) { ADD_FAILURE() << sys_.render(err); });
  EXPECT_EQ(ok, 5);
  EXPECT_EQ(srv.requests().size(), 5u);
  auto s = stats(pool);
  // Usually the five arrive before any answer (100 ms): two dial, three wait
  // and are handed over. A test thread descheduled for 100 ms lets an
  // exchange find an idle connection instead: then fewer dial or wait, but
  // never more than two connections, and every exchange dialled or reused.
  EXPECT_GE(s.dialled, 1u);
  EXPECT_LE(s.dialled, 2u);
  EXPECT_EQ(srv.connections(), s.dialled);
  EXPECT_EQ(s.dialled + s.reused, 5u);
  EXPECT_LE(s.waited, 3u);
  EXPECT_LE(s.waited, s.reused); // each waiter was handed a connection
  EXPECT_EQ(s.pending, 0u);
  EXPECT_EQ(s.overflowed, 0u);
  EXPECT_EQ(s.in_flight, 0u);
  EXPECT_EQ(s.idle, s.dialled);
}

TEST_F(TransportTest, PoolQueueFullRefusesTheExchangeAtOnce) {
  auto resp = scripted_server::json_response(200, "{}");
  scripted_server srv{
    {{step::read_request(), step::sleep(800ms), step::send(resp),
      step::read_request(), step::send(resp)}},
    {step::read_request(), step::send(resp)}};
  auto pool = make_limited_pool(srv.base_url(), 1, 1);
  caf::scoped_actor self{sys_};
  // One sender: the pool sees the three in this order.
  auto h1 = self->request(pool, std::chrono::seconds{15}, request());
  auto h2 = self->request(pool, std::chrono::seconds{15}, request());
  auto start = clock_type::now();
  auto h3 = self->request(pool, std::chrono::seconds{15}, request());
  exchange_result r3;
  h3.receive([&](exchange_result& r) { r3 = std::move(r); },
             [&](caf::error& err) { ADD_FAILURE() << sys_.render(err); });
  EXPECT_LT(elapsed_ms(start), 800); // before the first answer
  EXPECT_EQ(r3.error, transport_error_kind::pool_overflow) << describe(r3);
  EXPECT_FALSE(r3.request_sent);
  EXPECT_EQ(r3.detail, "connection pool queue full (1 waiting, 1 connections)");
  for (auto* h : {&h1, &h2})
    h->receive([&](exchange_result& r) { EXPECT_TRUE(r.ok()) << describe(r); },
               [&](caf::error& err) { ADD_FAILURE() << sys_.render(err); });
  EXPECT_EQ(srv.connections(), 1u);
  EXPECT_EQ(srv.requests().size(), 2u);
  auto s = stats(pool);
  EXPECT_EQ(s.overflowed, 1u);
  EXPECT_EQ(s.waited, 1u);
  EXPECT_EQ(s.dialled, 1u);
  EXPECT_EQ(s.reused, 1u);
}

TEST_F(TransportTest, PoolCancelOfAQueuedExchangeAnswersItNothingSent) {
  scripted_server srv{{{step::read_request(), step::hold()}},
                      {step::read_request(), step::hold()}};
  auto full = make_full_pool(srv);
  auto& pool = full.pool;
  caf::scoped_actor self{sys_};
  auto queued = request();
  queued.timeout_ns = 10'000'000'000;
  auto start = clock_type::now();
  auto h2 = self->request(pool, std::chrono::seconds{15}, queued);
  caf::anon_send(pool, cancel_atom::value, queued.exchange_id);
  exchange_result r2;
  h2.receive([&](exchange_result& r) { r2 = std::move(r); },
             [&](caf::error& err) { ADD_FAILURE() << sys_.render(err); });
  EXPECT_LT(elapsed_ms(start), 5000); // not its 10 s timeout
  EXPECT_EQ(r2.error, transport_error_kind::timeout) << describe(r2);
  EXPECT_FALSE(r2.request_sent);
  EXPECT_EQ(r2.detail, "cancelled while queued for a connection");
  auto s = stats(pool);
  EXPECT_EQ(s.pending, 0u);
  EXPECT_EQ(s.cancelled, 1u);
  EXPECT_EQ(s.in_flight, 1u); // the first still runs, untouched
  EXPECT_EQ(srv.connections(), 1u);
  EXPECT_FALSE(release(full).ok());
}

TEST_F(TransportTest, PoolQueuedExchangeIsAnsweredWithinItsOwnTimeout) {
  scripted_server srv{{{step::read_request(), step::hold()}},
                      {step::read_request(), step::hold()}};
  auto full = make_full_pool(srv);
  auto& pool = full.pool;
  auto queued = request();
  queued.timeout_ns = 300'000'000;
  auto start = clock_type::now();
  auto r2 = exchange(pool, queued);
  auto took = elapsed_ms(start);
  // Answered the dispatch floor (5 ms) before its timeout runs out.
  EXPECT_GE(took, 295);
  EXPECT_LT(took, 300 + testing::load_slack_ms);
  EXPECT_EQ(r2.error, transport_error_kind::timeout) << describe(r2);
  EXPECT_FALSE(r2.request_sent);
  EXPECT_NE(r2.detail.find("no connection free"), std::string::npos)
    << r2.detail;
  EXPECT_EQ(stats(pool).pending, 0u);
  EXPECT_EQ(srv.connections(), 1u);
  release(full);
}

// A hedge (may_queue false) at the limit is refused at once, nothing sent,
// and takes no queue slot: it is worth sending only on a free connection.
TEST_F(TransportTest, PoolRefusesAHedgeAtItsLimitInsteadOfQueueingIt) {
  scripted_server srv{{{step::read_request(), step::hold()}},
                      {step::read_request(), step::hold()}};
  auto full = make_full_pool(srv);
  auto& pool = full.pool;
  auto hedge = request();
  hedge.timeout_ns = 10'000'000'000;
  hedge.may_queue = false;
  auto start = clock_type::now();
  auto r2 = exchange(pool, hedge);
  EXPECT_LT(elapsed_ms(start), 5000); // at once, not its 10 s timeout
  EXPECT_EQ(r2.error, transport_error_kind::pool_overflow) << describe(r2);
  EXPECT_FALSE(r2.request_sent);
  EXPECT_NE(r2.detail.find("no connection free for a hedge"), std::string::npos)
    << r2.detail;
  auto s = stats(pool);
  EXPECT_EQ(s.pending, 0u);
  EXPECT_EQ(s.waited, 0u);
  EXPECT_EQ(s.busy_refused, 1u);
  EXPECT_EQ(s.overflowed, 0u);
  EXPECT_EQ(srv.connections(), 1u);
  release(full);
}

TEST_F(TransportTest, PoolStoppingAnswersQueuedExchanges) {
  scripted_server srv{{{step::read_request(), step::hold()}},
                      {step::read_request(), step::hold()}};
  auto full = make_full_pool(srv);
  auto& pool = full.pool;
  caf::scoped_actor self{sys_};
  auto queued = request();
  queued.timeout_ns = 10'000'000'000;
  auto h2 = self->request(pool, std::chrono::seconds{15}, queued);
  ASSERT_EQ(stats(pool).pending, 1u); // same sender: queued before this
  auto start = clock_type::now();
  caf::anon_send_exit(pool, caf::exit_reason::user_shutdown);
  for (auto* h : {&*full.handle, &h2}) {
    bool answered = false;
    h->receive(
      [&](exchange_result& r) {
        answered = true;
        EXPECT_FALSE(r.ok());
      },
      [&](caf::error&) { answered = true; });
    EXPECT_TRUE(answered);
  }
  EXPECT_LT(elapsed_ms(start), 5000);
  EXPECT_EQ(srv.connections(), 1u);
}

// -- stream-independent helpers -----------------------------------------------

TEST(TransportWire, HostHeaderOmitsTheDefaultPortAndBracketsIpv6) {
  http_request req;
  req.method = "GET";
  req.target = "/x";
  std::string out, why;
  ASSERT_TRUE(detail::serialize_request(
    req, url_parts::parse("http://example.com"), out, why));
  EXPECT_EQ(out, "GET /x HTTP/1.1\r\nHost: example.com\r\n\r\n");
  out.clear();
  ASSERT_TRUE(detail::serialize_request(
    req, url_parts::parse("https://[::1]:8443"), out, why));
  EXPECT_EQ(out, "GET /x HTTP/1.1\r\nHost: [::1]:8443\r\n\r\n");
  out.clear();
  ASSERT_TRUE(detail::serialize_request(
    req, url_parts::parse("https://a.example:443"), out, why));
  EXPECT_EQ(out, "GET /x HTTP/1.1\r\nHost: a.example\r\n\r\n");
}

TEST(TransportWire, CallerHostAndFramingHeadersAreReplaced) {
  http_request req;
  req.method = "PUT";
  req.target = "/x";
  req.body = "abc";
  req.headers = {{"host", "evil"},
                 {"Content-Length", "99"},
                 {"Transfer-Encoding", "chunked"},
                 {"X-A", "1"}};
  std::string out, why;
  ASSERT_TRUE(
    detail::serialize_request(req, url_parts::parse("http://h:81"), out, why));
  EXPECT_EQ(out, "PUT /x HTTP/1.1\r\nHost: h:81\r\nX-A: 1\r\nContent-Length: "
                 "3\r\n\r\nabc");
}

TEST(TransportWire, LocalPortExhaustionIsLocalResource) {
  using boost::system::errc::make_error_code;
  namespace errc = boost::system::errc;
  EXPECT_EQ(detail::classify_connect_error(
              make_error_code(errc::address_not_available)),
            transport_error_kind::local_resource);
  EXPECT_EQ(
    detail::classify_connect_error(make_error_code(errc::address_in_use)),
    transport_error_kind::local_resource);
  EXPECT_EQ(
    detail::classify_connect_error(make_error_code(errc::connection_refused)),
    transport_error_kind::connect);
  EXPECT_EQ(
    detail::classify_connect_error(make_error_code(errc::network_unreachable)),
    transport_error_kind::connect);
}

// -- TLS ----------------------------------------------------------------------

class TransportTlsTest : public TransportTest {
protected:
  void SetUp() override {
    pki_ = testing::test_pki::generate(dir_.path());
  }

  testing::temp_dir dir_;
  testing::test_pki pki_;
};

TEST_F(TransportTlsTest, VerifiedConnectionToIpAndNameIsReused) {
  auto resp = scripted_server::json_response(200, ok_body);
  testing::server_tls tls{pki_.server.cert, pki_.server.key, {}};
  scripted_server srv{{{step::read_request(), step::send(resp),
                        step::read_request(), step::send(resp), step::hold()},
                       {step::read_request(), step::send(resp), step::hold()}},
                      {step::close()},
                      tls};
  tls_config client_tls;
  client_tls.ca_file = pki_.ca_a.cert;
  auto pool = make_pool(srv.base_url(), 64, client_tls);
  auto r1 = exchange(pool, request());
  ASSERT_TRUE(r1.ok()) << describe(r1);
  EXPECT_EQ(r1.response.body, ok_body);
  auto r2 = exchange(pool, request());
  ASSERT_TRUE(r2.ok()) << describe(r2);
  EXPECT_FALSE(r2.new_connection);
  // By name: SNI + DNS SAN.
  auto by_name = make_pool("https://localhost:" + std::to_string(srv.port()),
                           64, client_tls);
  auto r3 = exchange(by_name, request());
  ASSERT_TRUE(r3.ok()) << describe(r3);
  auto reqs = srv.requests();
  ASSERT_EQ(reqs.size(), 3u);
  auto host = find_header(reqs[2].headers, "Host");
  ASSERT_NE(host, nullptr);
  EXPECT_EQ(*host, "localhost:" + std::to_string(srv.port()));
}

TEST_F(TransportTlsTest, IdleCloseNotifyMakesTheConnectionStale) {
  auto resp = scripted_server::json_response(200, ok_body);
  testing::server_tls tls{pki_.server.cert, pki_.server.key, {}};
  scripted_server srv{{{step::read_request(), step::send(resp),
                        step::sleep(50ms), step::close()}},
                      {step::read_request(), step::send(resp), step::hold()},
                      tls};
  tls_config client_tls;
  client_tls.ca_file = pki_.ca_a.cert;
  auto pool = make_pool(srv.base_url(), 64, client_tls);
  ASSERT_TRUE(exchange(pool, request()).ok());
  ASSERT_TRUE(srv.wait_for_finished(0, 2s));
  std::this_thread::sleep_for(50ms);
  auto r = exchange(pool, request());
  EXPECT_EQ(r.error, transport_error_kind::not_sent) << describe(r);
  auto fresh = request();
  fresh.fresh_connection = true;
  auto r2 = exchange(pool, fresh);
  ASSERT_TRUE(r2.ok()) << describe(r2);
  EXPECT_EQ(srv.requests().size(), 2u);
}

TEST_F(TransportTlsTest, CertificateWithoutIpSanFailsVerificationForIp) {
  testing::server_tls tls{pki_.server_dns.cert, pki_.server_dns.key, {}};
  scripted_server srv{{}, {step::read_request(), step::hold()}, tls};
  tls_config client_tls;
  client_tls.ca_file = pki_.ca_a.cert;
  auto pool = make_pool(srv.base_url(), 64, client_tls);
  auto r = exchange(pool, request());
  EXPECT_EQ(r.error, transport_error_kind::tls) << describe(r);
  EXPECT_NE(r.detail.find("mismatch"), std::string::npos) << r.detail;
  EXPECT_FALSE(r.request_sent);
  EXPECT_EQ(srv.requests().size(), 0u);
}

TEST_F(TransportTlsTest, UnknownCaFailsVerificationWithTheSystemTrustStore) {
  testing::server_tls tls{pki_.server.cert, pki_.server.key, {}};
  scripted_server srv{{}, {step::read_request(), step::hold()}, tls};
  auto pool = make_pool(srv.base_url());
  auto r = exchange(pool, request());
  EXPECT_EQ(r.error, transport_error_kind::tls) << describe(r);
  EXPECT_NE(r.detail.find("certificate verify failed"), std::string::npos)
    << r.detail;
}

TEST_F(TransportTlsTest, ClientCertificateIsPresentedForMutualTls) {
  testing::server_tls tls{pki_.server.cert, pki_.server.key, pki_.ca_a.cert};
  auto resp = scripted_server::json_response(200, ok_body);
  scripted_server srv{
    {}, {step::read_request(), step::send(resp), step::hold()}, tls};
  tls_config with_identity;
  with_identity.ca_file = pki_.ca_a.cert;
  with_identity.client_cert_file = pki_.client.cert;
  with_identity.client_key_file = pki_.client.key;
  auto good = make_pool(srv.base_url(), 64, with_identity);
  auto r = exchange(good, request());
  ASSERT_TRUE(r.ok()) << describe(r);
  tls_config without;
  without.ca_file = pki_.ca_a.cert;
  auto bad = make_pool(srv.base_url(), 64, without);
  auto r2 = exchange(bad, request());
  // TLS 1.3: the server's refusal arrives after the client's handshake
  // finished, as an alert in place of the response ("certificate required")
  // or, when it races the request, as a reset of the first write.
  EXPECT_EQ(r2.error, transport_error_kind::tls) << describe(r2);
  EXPECT_TRUE(r2.detail.find("certificate required") != std::string::npos
              || r2.detail.find("refused by the server") != std::string::npos)
    << r2.detail;
  // A certificate from a foreign CA is refused the same way.
  tls_config foreign;
  foreign.ca_file = pki_.ca_a.cert;
  foreign.client_cert_file = pki_.foreign_client.cert;
  foreign.client_key_file = pki_.foreign_client.key;
  auto other = make_pool(srv.base_url(), 64, foreign);
  auto r3 = exchange(other, request());
  EXPECT_EQ(r3.error, transport_error_kind::tls) << describe(r3);
}

TEST_F(TransportTlsTest, MismatchedClientKeyIsAConfigErrorNamingTheField) {
  client_config cfg;
  cfg.base_url = "https://127.0.0.1:1";
  cfg.tls.ca_file = pki_.ca_a.cert;
  cfg.tls.client_cert_file = pki_.client.cert;
  cfg.tls.client_key_file = pki_.server.key;
  try {
    spawn_connection_pool(sys_, cfg, io_);
    FAIL() << "expected config_error";
  } catch (const config_error& e) {
    EXPECT_EQ(e.field(), "tls.client_key_file") << e.what();
  }
}

} // namespace
} // namespace outbound
