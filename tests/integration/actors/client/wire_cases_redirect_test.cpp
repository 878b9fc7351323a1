// Wire case 5 (redirects and credentials, psf/requests #4716) and the
// loopback case "302 to another host": a redirect is never followed, the
// credential goes only to the configured origin.

#include "tests/support/test_certs.hpp"
#include "tests/support/wire_cases_fixture.hpp"

#include <gtest/gtest.h>

#include <ostream>
#include <thread>

using namespace std::chrono_literals;

namespace outbound::testing {
namespace {

std::string redirect_response(int status, const std::string& location) {
  return "HTTP/1.1 " + std::to_string(status) + " "
         + scripted_server::reason(status) + "\r\nLocation: " + location
         + "\r\nContent-Length: 0\r\n\r\n";
}

/// Which Location server A answers with.
enum class target { listener_b, other_host };

struct redirect_case {
  int status;
  const char* method;
  target where;
};

// Readable test parameters in gtest's output.
void PrintTo(const redirect_case& c, std::ostream* os) {
  *os << c.method << " answered by " << c.status << " to "
      << (c.where == target::listener_b ? "listener B" : "other.example");
}

std::string case_name(const ::testing::TestParamInfo<redirect_case>& info) {
  return std::string{info.param.method} + "_"
         + std::to_string(info.param.status)
         + (info.param.where == target::listener_b ? "_to_listener_b"
                                                   : "_to_other_host");
}

/// Case 5: TLS server A (CA-A-signed certificate for 127.0.0.1) and a plain
/// listener B that records connections.
class RedirectCase : public wire_test,
                     public ::testing::WithParamInterface<redirect_case> {
protected:
  static void SetUpTestSuite() {
    try {
      dir_ = std::make_unique<temp_dir>("outbound-wire-");
      pki_ = std::make_unique<test_pki>(test_pki::generate(dir_->path()));
    } catch (const std::exception& e) {
      setup_error_ = e.what();
    }
  }

  static void TearDownTestSuite() {
    pki_.reset();
    dir_.reset();
  }

  void SetUp() override {
    ASSERT_TRUE(setup_error_.empty()) << setup_error_;
  }

  static server_tls tls_a() {
    return {pki_->server.cert, pki_->server.key, {}};
  }

  /// Listener B (answers 200 {}), and A (TLS) answering the request with
  /// `p.status` and a Location naming B or another host.
  struct redirect_pair {
    std::unique_ptr<scripted_server> a;
    std::unique_ptr<scripted_server> b;
    std::string location;
  };
  redirect_pair redirect_servers(const redirect_case& p) {
    redirect_pair r;
    r.b = server({}, {step::read_request(), step::send(ok_empty_object)});
    r.location
      = p.where == target::listener_b
          ? "http://127.0.0.1:" + std::to_string(r.b->port()) + "/v1/data"
          : "http://other.example:8080/";
    r.a = server(
      {{step::read_request(),
        step::send(redirect_response(p.status, r.location)), step::hold()}},
      {step::close()}, tls_a());
    return r;
  }

  /// The case's request body: the JSON quantity for a POST, none for a GET.
  static std::optional<boost::json::value> body_of(const redirect_case& p) {
    if (std::string{p.method} == "POST")
      return json(qty_body);
    return std::nullopt;
  }

  client_config config_a(const scripted_server& a) const {
    auto cfg = defaults(a.base_url());
    cfg.tls.ca_file = pki_->ca_a.cert;
    return cfg;
  }

  static inline std::unique_ptr<temp_dir> dir_;
  static inline std::unique_ptr<test_pki> pki_;
  static inline std::string setup_error_;
};

// A GET (or a POST with a body) to A answered by a 3xx: a typed
// request_error exposing the Location, 1 attempt; B sees no connection; the
// token and the body went only to A.
TEST_P(RedirectCase, Case5RedirectIsNotFollowedAndCredentialStaysWithOrigin) {
  const auto& p = GetParam();
  auto [a, b, location] = redirect_servers(p);
  auto c = client(config_a(*a));
  auto body = body_of(p);
  auto err = expect_throw<request_error>(
    [&] { return c->request(p.method, "/v1/data", body); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->kind, error_kind::request_error);
  EXPECT_EQ(err->status, p.status);
  EXPECT_EQ(err->location, location);
  EXPECT_NE(err->detail.find("redirect"), std::string::npos) << err->detail;
  EXPECT_EQ(err->attempts, 1);
  EXPECT_FALSE(err->nothing_sent);
  expect_no_token(*err);

  // Nothing follows the answer: B stays untouched.
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(b->connections(), 0u);
  EXPECT_EQ(b->requests().size(), 0u);
  EXPECT_EQ(a->connections(), 1u);
  auto rs = a->requests();
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0].method, p.method);
  EXPECT_EQ(rs[0].target, "/v1/data");
  EXPECT_EQ(header_or_absent(rs[0], "Authorization"), "Bearer " + wire_token);
  if (body)
    EXPECT_EQ(rs[0].body, qty_body);
}

INSTANTIATE_TEST_SUITE_P(
  WireCases, RedirectCase,
  ::testing::Values(redirect_case{301, "GET", target::listener_b},
                    redirect_case{302, "GET", target::listener_b},
                    redirect_case{303, "GET", target::listener_b},
                    redirect_case{307, "GET", target::listener_b},
                    redirect_case{308, "GET", target::listener_b},
                    redirect_case{301, "GET", target::other_host},
                    redirect_case{302, "GET", target::other_host},
                    redirect_case{303, "GET", target::other_host},
                    redirect_case{307, "GET", target::other_host},
                    redirect_case{308, "GET", target::other_host},
                    redirect_case{307, "POST", target::listener_b},
                    redirect_case{307, "POST", target::other_host}),
  case_name);

// request_raw returns the 3xx as a status with its Location header (the
// "HTTP 3xx result" form of case 5), still without following it.
class RedirectRawCase : public RedirectCase {};

TEST_P(RedirectRawCase, Case5RawRequestReturnsTheRedirectWithItsLocation) {
  const auto& p = GetParam();
  auto [a, b, location] = redirect_servers(p);
  auto c = client(config_a(*a));
  auto body = body_of(p);
  auto r = c->request_raw(p.method, "/v1/data", body);
  EXPECT_EQ(r.status, p.status);
  EXPECT_EQ(r.attempts, 1);
  auto loc = find_header(r.headers, "Location");
  ASSERT_NE(loc, nullptr);
  EXPECT_EQ(*loc, location);
  EXPECT_TRUE(r.body.is_null());
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(b->connections(), 0u);
  EXPECT_EQ(a->requests().size(), 1u);
}

INSTANTIATE_TEST_SUITE_P(
  WireCases, RedirectRawCase,
  ::testing::Values(redirect_case{302, "GET", target::listener_b},
                    redirect_case{307, "POST", target::other_host}),
  case_name);

// The rule: a 302 from a plain origin to another host is a request_error;
// the origin saw one request, the credential was sent once, the other host
// saw nothing.
using WireIssueCases = wire_test;

TEST_F(WireIssueCases,
       Issue302ToAnotherHostIsRequestErrorAndOtherHostSeesNothing) {
  auto other = server({}, {step::read_request(), step::send(ok_empty_object)});
  auto location
    = "http://127.0.0.1:" + std::to_string(other->port()) + "/v1/item";
  auto origin
    = server({{step::read_request(),
               step::send(redirect_response(302, location)), step::hold()}});
  auto c = client(defaults(origin->base_url()));
  auto err = expect_throw<request_error>(
    [&] { return c->request("GET", "/v1/item"); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->status, 302);
  EXPECT_EQ(err->location, location);
  EXPECT_EQ(err->attempts, 1);
  expect_no_token(*err);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(origin->connections(), 1u);
  auto rs = origin->requests();
  ASSERT_EQ(rs.size(), 1u);
  std::size_t credentials = 0;
  for (const auto& r : rs)
    for (const auto& [k, v] : r.headers)
      if (v.find(wire_token) != std::string::npos)
        ++credentials;
  EXPECT_EQ(credentials, 1u);
  EXPECT_EQ(header_or_absent(rs[0], "Authorization"), "Bearer " + wire_token);
  EXPECT_EQ(other->connections(), 0u);
  EXPECT_EQ(other->requests().size(), 0u);
}

} // namespace
} // namespace outbound::testing
