// The client's own loopback cases: every connection dropped,
// a 500 with a JSON detail, a non-JSON 200, an over-cap error body; and the
// request id / retry count headers on every attempt.

#include "tests/support/wire_cases_fixture.hpp"

#include <gtest/gtest.h>

#include <cctype>
#include <set>

using namespace std::chrono_literals;

namespace outbound::testing {
namespace {

using WireIssueCases = wire_test;

/// Reads the whole request, then closes without a byte of response.
const script dropped{step::read_request(), step::close()};

// Every connection dropped, GET: 3 attempts, then service_unavailable. Every
// attempt carries the same x-request-id; retries carry x-retry-count 1, 2.
TEST_F(WireIssueCases, EveryConnectionDroppedGetMakesThreeAttempts) {
  auto srv = server({}, dropped);
  auto c = client(defaults(srv->base_url()));
  auto before = retries("interrupted");
  auto err = expect_throw<service_unavailable>(
    [&] { return c->request("GET", "/v1/item"); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->kind, error_kind::service_unavailable);
  EXPECT_EQ(err->cause, transport_error_kind::interrupted);
  EXPECT_EQ(err->attempts, 3);
  EXPECT_EQ(err->status, 0);
  EXPECT_FALSE(err->nothing_sent);
  EXPECT_NE(err->detail.find("gave up after 3 attempts"), std::string::npos)
    << err->detail;
  expect_no_token(*err);

  EXPECT_EQ(srv->connections(), 3u);
  auto rs = srv->requests();
  ASSERT_EQ(rs.size(), 3u);
  ASSERT_EQ(err->request_id.size(), 32u);
  for (char ch : err->request_id)
    EXPECT_TRUE(std::isxdigit(static_cast<unsigned char>(ch))) << ch;
  const char* retry_counts[] = {"<absent>", "1", "2"};
  for (std::size_t i = 0; i < rs.size(); ++i) {
    EXPECT_EQ(rs[i].connection, i);
    EXPECT_EQ(header_or_absent(rs[i], "x-request-id"), err->request_id);
    EXPECT_EQ(header_or_absent(rs[i], "x-retry-count"), retry_counts[i]);
    EXPECT_EQ(header_or_absent(rs[i], "Authorization"), "Bearer " + wire_token);
  }
  auto evs = events_of(err->request_id);
  EXPECT_EQ(event_log::only(evs, event_kind::sending).size(), 3u);
  EXPECT_EQ(event_log::only(evs, event_kind::retrying).size(), 2u);
  auto failed = event_log::only(evs, event_kind::failed);
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_STREQ(outcome_label(failed[0].ev), "service_unavailable");
  EXPECT_EQ(failed[0].ev.attempts, 3);
  EXPECT_EQ(retries("interrupted"), before + 2);
}

// Every connection dropped, POST: 1 attempt.
TEST_F(WireIssueCases, EveryConnectionDroppedPostMakesOneAttempt) {
  auto srv = server({}, dropped);
  auto c = client(defaults(srv->base_url()));
  auto err = expect_throw<service_unavailable>(
    [&] { return c->request("POST", "/v1/orders", json(qty_body)); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->attempts, 1);
  EXPECT_FALSE(err->nothing_sent);
  EXPECT_NE(err->detail.find("may have been processed"), std::string::npos)
    << err->detail;
  expect_no_token(*err);
  EXPECT_EQ(srv->connections(), 1u);
  auto rs = srv->requests();
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0].body, qty_body);
}

// Every connection dropped, POST with idempotent=true: 3 attempts, each with
// the byte-identical body.
TEST_F(WireIssueCases, EveryConnectionDroppedIdempotentPostMakesThreeAttempts) {
  auto srv = server({}, dropped);
  auto c = client(defaults(srv->base_url()));
  auto err = expect_throw<service_unavailable>(
    [&] { return c->request("POST", "/v1/orders", json(qty_body), {}, true); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->attempts, 3);
  EXPECT_FALSE(err->nothing_sent);
  expect_no_token(*err);
  EXPECT_EQ(srv->connections(), 3u);
  auto rs = srv->requests();
  ASSERT_EQ(rs.size(), 3u);
  const char* retry_counts[] = {"<absent>", "1", "2"};
  for (std::size_t i = 0; i < rs.size(); ++i) {
    EXPECT_EQ(rs[i].method, "POST");
    EXPECT_EQ(rs[i].body, qty_body);
    EXPECT_EQ(header_or_absent(rs[i], "Content-Length"), "9");
    EXPECT_EQ(header_or_absent(rs[i], "x-request-id"), err->request_id);
    EXPECT_EQ(header_or_absent(rs[i], "x-retry-count"), retry_counts[i]);
  }
}

// A caller-given request id is the one every attempt carries.
TEST_F(WireIssueCases, CallerRequestIdIsSentOnEveryAttempt) {
  auto srv = server({dropped, dropped},
                    {step::read_request(), step::send(ok_empty_object)});
  auto c = client(defaults(srv->base_url()));
  auto req = get("/v1/item");
  req.request_id = "caller-id-7";
  auto o = c->call(req);
  ASSERT_TRUE(o.ok()) << o.error->message();
  EXPECT_EQ(o.attempts, 3);
  EXPECT_EQ(o.request_id, "caller-id-7");
  auto rs = srv->requests();
  ASSERT_EQ(rs.size(), 3u);
  std::set<std::string> ids;
  for (const auto& r : rs)
    ids.insert(header_or_absent(r, "x-request-id"));
  EXPECT_EQ(ids, std::set<std::string>{"caller-id-7"});
  EXPECT_EQ(header_or_absent(rs[2], "x-retry-count"), "2");
}

// 500 with {"detail":"boom"}: server_error, 1 attempt, detail "boom".
TEST_F(WireIssueCases, ServerErrorWithJsonDetailIsNotRetried) {
  auto srv = server({
    {step::read_request(),
     step::send(scripted_server::json_response(500, R"({"detail":"boom"})"))},
  });
  auto c = client(defaults(srv->base_url()));
  auto err
    = expect_throw<server_error>([&] { return c->request("GET", "/v1/item"); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->kind, error_kind::server_error);
  EXPECT_EQ(err->status, 500);
  EXPECT_EQ(err->detail, "boom");
  EXPECT_EQ(err->attempts, 1);
  EXPECT_FALSE(err->nothing_sent);
  EXPECT_EQ(err->cause, transport_error_kind::none);
  expect_no_token(*err);
  EXPECT_EQ(srv->connections(), 1u);
  auto rs = srv->requests();
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(header_or_absent(rs[0], "x-request-id"), err->request_id);
}

// A 200 whose body is not JSON: response_error.
TEST_F(WireIssueCases, NonJsonSuccessIsResponseError) {
  auto srv = server({
    {step::read_request(),
     step::send("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n"
                "Content-Length: 14\r\n\r\n<html>hi</html")},
  });
  auto c = client(defaults(srv->base_url()));
  auto err = expect_throw<response_error>(
    [&] { return c->request("GET", "/v1/item"); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->kind, error_kind::response_error);
  EXPECT_EQ(err->status, 200);
  EXPECT_EQ(err->attempts, 1);
  EXPECT_FALSE(err->nothing_sent);
  expect_no_token(*err);
  EXPECT_EQ(srv->requests().size(), 1u);
}

// A 500 with a 100 KB body under a 256-byte cap: still server_error, with an
// empty detail (the body was dropped at the cap).
TEST_F(WireIssueCases, OverCapErrorBodyIsStillServerError) {
  std::string body = R"({"detail":")" + std::string(100 * 1000, 'x') + R"("})";
  auto srv = server({
    {step::read_request(),
     step::send(scripted_server::json_response(500, body)), step::hold()},
  });
  auto cfg = defaults(srv->base_url());
  cfg.max_response_bytes = 256;
  auto c = client(cfg);
  auto err
    = expect_throw<server_error>([&] { return c->request("GET", "/v1/item"); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->kind, error_kind::server_error);
  EXPECT_EQ(err->status, 500);
  EXPECT_EQ(err->detail, "");
  EXPECT_EQ(err->attempts, 1);
  EXPECT_EQ(srv->connections(), 1u);
  // The unread body makes the connection unusable: the client closed it
  // (the script ends in `hold`, which only a client close ends; or the
  // server's write of the body fails on the closed connection).
  EXPECT_TRUE(srv->wait_for_finished(0, 2s));
}

} // namespace
} // namespace outbound::testing
