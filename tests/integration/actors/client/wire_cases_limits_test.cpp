// Wire cases 6 (byte trickle versus deadlines, seanmonstar/reqwest #243) and 7
// (body cap accounting, boostorg/beast #1897), end to end, blocking client.

#include "tests/support/wire_cases_fixture.hpp"

#include <gtest/gtest.h>

using namespace std::chrono_literals;

namespace outbound::testing {
namespace {

class WireLimits : public wire_test {
protected:
  void check_trickle_bounds(blocking_client& c, scripted_server& srv);
};

// -- case 6: byte trickle versus deadlines
// -------------------------------------

const std::string head_1000
  = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
    "Content-Length: 1000\r\n\r\n";

/// Runs a GET against a server that answers every connection with `s`,
/// under per-attempt timeout 1 s and overall deadline 3 s, and checks the
/// bounds of case 6: each attempt aborted about 1 s after it starts although
/// bytes keep arriving, backoff between attempts, the call ends at
/// 3.0 s ± 0.15 s with deadline_exceeded after at most 3 attempts, and no
/// attempt outlives the deadline. Timers never fire early, so every lower
/// bound is exact; the upper bounds carry load_slack_ms (the case file's
/// 0.15 s holds on a quiet machine, not on a loaded one under ASan) and stay
/// far below the trickles' end (8 s and more).
void WireLimits::check_trickle_bounds(blocking_client& c,
                                      scripted_server& srv) {
  auto t0 = wire_clock::now();
  auto err = expect_throw<deadline_exceeded>(
    [&] { return c.request("GET", "/v1/slow"); });
  auto took = wire_clock::now() - t0;
  ASSERT_TRUE(err);
  EXPECT_EQ(err->kind, error_kind::deadline_exceeded);
  EXPECT_GE(ms(took), 3000);
  EXPECT_LE(ms(took), 3000 + load_slack_ms);
  EXPECT_GE(err->attempts, 2);
  EXPECT_LE(err->attempts, 3);
  EXPECT_EQ(err->status, 0);
  EXPECT_NE(err->detail.find("deadline"), std::string::npos) << err->detail;
  expect_no_token(*err);

  auto evs = events_of(err->request_id);
  auto sending = event_log::only(evs, event_kind::sending);
  auto retrying = event_log::only(evs, event_kind::retrying);
  auto failed = event_log::only(evs, event_kind::failed);
  std::string timeline;
  for (const auto& e : evs)
    timeline += std::string{to_string(e.ev.kind)} + "@"
                + std::to_string(ms(e.at - t0)) + "ms ";
  SCOPED_TRACE("events after the call started: " + timeline);
  ASSERT_EQ(sending.size(), static_cast<std::size_t>(err->attempts));
  ASSERT_EQ(retrying.size(), sending.size() - 1);
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_STREQ(outcome_label(failed[0].ev), "deadline_exceeded");
  // Event times are arrival times at the observer: never early, sometimes
  // late (by more than a second on a loaded machine under ASan). So lower
  // bounds are taken from the earliest schedule (attempt 1 starts with the
  // call, each attempt lasts its full 1 s, each retry waits its announced
  // backoff), and upper bounds from the source schedule (attempt n+1 starts
  // when the backoff announced by the n-th `retrying` event has run out).
  auto start = t0;
  int64_t earliest = 0; // ms after t0
  for (std::size_t i = 0; i + 1 < sending.size(); ++i) {
    // Aborted by its own 1 s budget while bytes were still arriving.
    auto attempt = retrying[i].at - start;
    earliest += 1000;
    EXPECT_GE(ms(retrying[i].at - t0), earliest) << "attempt " << i + 1;
    EXPECT_LE(ms(attempt), 1000 + load_slack_ms) << "attempt " << i + 1;
    EXPECT_EQ(retrying[i].ev.cause, "timeout");
    // The retry waits its backoff: min(0.1 s * 2^i, 1 s) + U[0, 0.1 s).
    auto delay = std::chrono::nanoseconds{retrying[i].ev.delay_ns};
    auto delay_ms = retrying[i].ev.delay_ns / 1'000'000;
    EXPECT_GE(delay_ms, 100 << i);
    EXPECT_LT(delay_ms, (100 << i) + 100);
    start = retrying[i].at + delay;
    earliest += delay_ms;
    EXPECT_GE(ms(sending[i + 1].at - t0), earliest) << "backoff " << i + 1;
    auto waited = sending[i + 1].at - retrying[i].at;
    EXPECT_LE(ms(waited), delay_ms + load_slack_ms) << "backoff " << i + 1;
  }
  // The last attempt runs under min(timeout, deadline left) and ends with the
  // deadline; none outlives it.
  EXPECT_LE(ms(failed[0].at - start), 1000 + load_slack_ms);
  EXPECT_GE(ms(failed[0].at - t0), 3000);
  EXPECT_LE(ms(failed[0].at - t0), 3000 + load_slack_ms);

  // Every attempt's connection was closed by the client: none outlives the
  // call (the server's trickle fails on the closed socket).
  EXPECT_EQ(srv.connections(), static_cast<std::size_t>(err->attempts));
  for (std::size_t i = 0; i < srv.connections(); ++i)
    EXPECT_TRUE(srv.wait_for_finished(i, 1500ms)) << "connection " << i;
}

// (a) A 200 with Content-Length 1000 whose body arrives one space every
// 400 ms.
TEST_F(WireLimits, Case6aTrickledBodyIsBoundedByAttemptTimeoutAndDeadline) {
  auto srv = server({}, {step::read_request(), step::send(head_1000),
                         step::trickle(std::string(20, ' '), 400ms)});
  auto cfg = defaults(srv->base_url());
  cfg.timeout = 1.0;
  cfg.deadline = 3.0;
  auto c = client(cfg);
  check_trickle_bounds(*c, *srv);
}

// (b) The status line itself arrives one byte every 400 ms.
TEST_F(WireLimits,
       Case6bTrickledStatusLineIsBoundedByAttemptTimeoutAndDeadline) {
  auto srv
    = server({}, {step::read_request(),
                  step::trickle(head_1000 + std::string(1000, ' '), 400ms)});
  auto cfg = defaults(srv->base_url());
  cfg.timeout = 1.0;
  cfg.deadline = 3.0;
  auto c = client(cfg);
  check_trickle_bounds(*c, *srv);
}

// -- case 7: response body cap accounting
// ---------------------------------------

/// A JSON string of exactly `n` bytes ("aaa...").
std::string json_string_of(std::size_t n) {
  return "\"" + std::string(n - 2, 'a') + "\"";
}

/// The chunked head, then `body` in chunks of 8 bytes, each its own write
/// 5 ms apart.
script chunked_in_8_byte_writes(const std::string& body) {
  script s{step::read_request(), step::send(scripted_server::chunked_head())};
  for (std::size_t i = 0; i < body.size(); i += 8) {
    s.push_back(step::sleep(5ms));
    s.push_back(step::send(scripted_server::chunk(body.substr(i, 8))));
  }
  return s;
}

/// The defaults with a 1024-byte cap and a 10 s attempt timeout (deadline
/// 20 s): the 129 writes 5 ms apart take 0.65 s on a quiet machine and more
/// than the default 1 s on a loaded one, so a 1 s timeout would race them.
client_config cap_1024(const std::string& base_url) {
  auto cfg = wire_test::defaults(base_url);
  cfg.max_response_bytes = 1024;
  cfg.timeout = 10;
  cfg.deadline = 20;
  return cfg;
}

// (a) 1024 bytes in 128 chunks of 8 under a 1024-byte cap: a success; the
// cap counts body bytes, not buffered chunk data.
TEST_F(WireLimits, Case7aChunkedBodyExactlyAtCapSucceeds) {
  auto body = json_string_of(1024);
  auto s = chunked_in_8_byte_writes(body);
  ASSERT_EQ(s.size(), 2u + 2u * 128u);
  s.push_back(step::send("0\r\n\r\n"));
  s.push_back(step::read_request());
  s.push_back(step::send(ok_empty_object));
  auto srv = server({s});
  auto c = client(cap_1024(srv->base_url()));
  auto o = c->call(get("/v1/blob"));
  ASSERT_TRUE(o.ok()) << o.error->message();
  EXPECT_EQ(o.attempts, 1);
  ASSERT_TRUE(o.body.is_string());
  EXPECT_EQ(boost::json::serialize(o.body).size(), 1024u);
  EXPECT_EQ(boost::json::serialize(o.body), body);
  // A complete response leaves the connection reusable.
  auto o2 = c->call(get("/v1/item"));
  ASSERT_TRUE(o2.ok()) << o2.error->message();
  EXPECT_EQ(srv->connections(), 1u);
}

// (b) 1025 bytes: a typed body-too-large error as soon as the cap is crossed
// (not at the attempt's timeout), 1 attempt, the connection closed.
TEST_F(WireLimits, Case7bChunkedBodyOneByteOverCapIsTooLargeAndNotRetried) {
  auto s = chunked_in_8_byte_writes(json_string_of(1025));
  ASSERT_EQ(s.size(), 2u + 2u * 129u);
  s.push_back(step::hold()); // no last-chunk: only the cap can end the call
  auto srv = server({s});
  auto c = client(cap_1024(srv->base_url()));
  auto t0 = wire_clock::now();
  auto err = expect_throw<response_error>(
    [&] { return c->request("GET", "/v1/blob"); });
  auto took = wire_clock::now() - t0;
  ASSERT_TRUE(err);
  EXPECT_EQ(err->kind, error_kind::response_error);
  EXPECT_EQ(err->cause, transport_error_kind::too_large);
  EXPECT_EQ(err->attempts, 1);
  EXPECT_FALSE(err->nothing_sent);
  EXPECT_LT(ms(took), 5000); // ended by the cap, not by the 10 s timeout
  EXPECT_EQ(srv->connections(), 1u);
  EXPECT_TRUE(srv->wait_for_peer_close(0, 2s)); // never reused
  auto evs = events_of(err->request_id);
  EXPECT_EQ(event_log::only(evs, event_kind::retrying).size(), 0u);
}

// (b) The client stops reading within one chunk of the cap: 60 more chunks
// follow the 1025th byte, and the server cannot deliver them all because
// the client has closed the connection.
TEST_F(WireLimits, Case7bClientStopsReadingWithinOneChunkOfTheCap) {
  auto s
    = chunked_in_8_byte_writes(json_string_of(1025) + std::string(60 * 8, ' '));
  s.push_back(step::send("0\r\n\r\n"));
  s.push_back(step::hold());
  auto srv = server({s});
  auto c = client(cap_1024(srv->base_url()));
  auto err = expect_throw<response_error>(
    [&] { return c->request("GET", "/v1/blob"); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->cause, transport_error_kind::too_large);
  EXPECT_EQ(err->attempts, 1);
  ASSERT_TRUE(srv->wait_for_finished(0, 3s));
  EXPECT_EQ(srv->connection(0).error, "send failed");
}

// (c) Content-Length 10485760 over a 1024-byte cap: too large right after
// the header, without reading (or waiting for) the body.
TEST_F(WireLimits, Case7cContentLengthOverCapFailsRightAfterHeader) {
  auto srv = server({
    {step::read_request(),
     step::send("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                "Content-Length: 10485760\r\n\r\n"),
     step::hold()},
  });
  auto c = client(cap_1024(srv->base_url()));
  auto t0 = wire_clock::now();
  auto err = expect_throw<response_error>(
    [&] { return c->request("GET", "/v1/blob"); });
  auto took = wire_clock::now() - t0;
  ASSERT_TRUE(err);
  EXPECT_EQ(err->kind, error_kind::response_error);
  EXPECT_EQ(err->cause, transport_error_kind::too_large);
  EXPECT_NE(err->detail.find("10485760"), std::string::npos) << err->detail;
  EXPECT_EQ(err->attempts, 1);
  EXPECT_LT(ms(took), 3000); // no body byte was awaited (the hold ends at 10 s)
  EXPECT_TRUE(srv->wait_for_peer_close(0, 2s));
}

// (d) outbound never asks for gzip and never decodes it: a gzip-encoded 200
// is not JSON to the client (response_error), and no request asks for gzip.
TEST_F(WireLimits, Case7dGzipEncodedSuccessIsNotDecodedAndNotAskedFor) {
  auto gz = gzip(R"({"ok":true})");
  auto srv = server({
    {step::read_request(), step::send(scripted_server::json_response(
                             200, gz, "Content-Encoding: gzip\r\n"))},
  });
  auto c = client(cap_1024(srv->base_url()));
  auto err = expect_throw<response_error>(
    [&] { return c->request("GET", "/v1/blob"); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->status, 200);
  EXPECT_EQ(err->cause, transport_error_kind::none);
  EXPECT_NE(err->detail.find("not JSON"), std::string::npos) << err->detail;
  EXPECT_EQ(err->attempts, 1);
  auto rs = srv->requests();
  ASSERT_EQ(rs.size(), 1u);
  auto ae = header_or_absent(rs[0], "Accept-Encoding");
  EXPECT_EQ(ae.find("gzip"), std::string::npos) << ae;
}

// (d) A gzip bomb (about 10 KiB on the wire, 10 MiB inflated) under the
// 1024-byte cap: body-too-large on the wire bytes; nothing is inflated.
TEST_F(WireLimits, Case7dGzipBombIsTooLargeWithoutInflating) {
  auto bomb = gzip(std::string(10 * 1024 * 1024, '\0'));
  ASSERT_GT(bomb.size(), 1024u);
  ASSERT_LT(bomb.size(), 64u * 1024u);
  auto srv = server({
    {step::read_request(),
     step::send(
       scripted_server::json_response(200, bomb, "Content-Encoding: gzip\r\n")),
     step::hold()},
  });
  auto c = client(cap_1024(srv->base_url()));
  auto err = expect_throw<response_error>(
    [&] { return c->request("GET", "/v1/blob"); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->cause, transport_error_kind::too_large);
  EXPECT_EQ(err->attempts, 1);
  auto rs = srv->requests();
  ASSERT_EQ(rs.size(), 1u);
  auto ae = header_or_absent(rs[0], "Accept-Encoding");
  EXPECT_EQ(ae.find("gzip"), std::string::npos) << ae;
}

} // namespace
} // namespace outbound::testing
