// The exchange classifier (core/classify.hpp), table-driven: every row of
// the table is an HTTP status or a transport error kind, whether a byte of
// the request was written, and the methods it applies to, with the class,
// nothing_sent and health the request path must see. The retry loop, the
// hedge race, the coalescing driver and the feed read these classes, so a
// wrong row here is a wrong retry somewhere.

#include "core/classify.hpp"

#include "actors/call/retry_state.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <tuple>
#include <vector>

using namespace outbound;

namespace {

using k = transport_error_kind;
using oc = outcome_class;
using ch = call_health;

/// A method as the client sees it: its name, and whether the caller set
/// `idempotent = true` explicitly ("POST!").
struct method {
  const char* name;
  bool explicit_idempotent;
};

const std::vector<method> idempotent_methods
  = {{"GET", false}, {"HEAD", false}, {"OPTIONS", false}, {"POST!", true}};
const std::vector<method> other_methods
  = {{"POST", false}, {"PUT", false}, {"DELETE", false}, {"PATCH", false}};

enum class methods { idem, non, all };

/// The statuses the policy under test retries (a typical retry_policy).
const std::vector<int> retry_statuses = {429, 503};

struct row {
  int status; // meaningful when kind == none
  k kind;
  bool sent;       // request_sent
  methods applies; // which methods the row covers
  oc cls;
  bool nothing_sent;
  ch health;
};

// clang-format off
const row table[] = {
  // status answers (request_sent is true: a response was read)
  {100, k::none, true, methods::all,  oc::final_status,     false, ch::success},
  {200, k::none, true, methods::all,  oc::success,          false, ch::success},
  {204, k::none, true, methods::all,  oc::success,          false, ch::success},
  {301, k::none, true, methods::all,  oc::final_status,     false, ch::success},
  {400, k::none, true, methods::all,  oc::final_status,     false, ch::success},
  {404, k::none, true, methods::all,  oc::final_status,     false, ch::success},
  {421, k::none, true, methods::all,  oc::final_status,     false, ch::success},
  {429, k::none, true, methods::idem, oc::retryable_status, false, ch::success},
  {429, k::none, true, methods::non,  oc::final_status,     false, ch::success},
  {500, k::none, true, methods::all,  oc::final_status,     false, ch::server_error},
  {501, k::none, true, methods::all,  oc::final_status,     false, ch::server_error},
  {503, k::none, true, methods::idem, oc::retryable_status, false, ch::server_error},
  {503, k::none, true, methods::non,  oc::final_status,     false, ch::server_error},
  {599, k::none, true, methods::all,  oc::final_status,     false, ch::server_error},
  // transport errors, before and after a byte of the request was written
  {0, k::not_sent,       false, methods::all, oc::nothing_sent,      true,  ch::failure},
  {0, k::not_sent,       true,  methods::all, oc::nothing_sent,      true,  ch::failure},
  {0, k::connect,        false, methods::all, oc::nothing_sent,      true,  ch::failure},
  {0, k::connect,        true,  methods::all, oc::nothing_sent,      true,  ch::failure},
  {0, k::local_resource, false, methods::all, oc::nothing_sent,      true,  ch::failure},
  {0, k::local_resource, true,  methods::all, oc::nothing_sent,      true,  ch::failure},
  {0, k::pool_overflow,  false, methods::all, oc::nothing_sent,      true,  ch::failure},
  {0, k::pool_overflow,  true,  methods::all, oc::nothing_sent,      true,  ch::failure},
  {0, k::interrupted,    false, methods::all, oc::nothing_sent,      true,  ch::failure},
  {0, k::interrupted,    true,  methods::all, oc::transport_failure, false, ch::failure},
  {0, k::timeout,        false, methods::all, oc::nothing_sent,      true,  ch::failure},
  {0, k::timeout,        true,  methods::all, oc::transport_failure, false, ch::failure},
  {0, k::tls,            false, methods::all, oc::fatal,             true,  ch::failure},
  {0, k::tls,            true,  methods::all, oc::fatal,             false, ch::failure},
  {0, k::config,         false, methods::all, oc::fatal,             true,  ch::failure},
  {0, k::config,         true,  methods::all, oc::fatal,             false, ch::failure},
  {0, k::too_large,      false, methods::all, oc::fatal,             false, ch::failure},
  {0, k::too_large,      true,  methods::all, oc::fatal,             false, ch::failure},
};
// clang-format on

struct classify_case {
  row r;
  method m;
};

std::vector<classify_case> expand() {
  std::vector<classify_case> out;
  for (const auto& r : table) {
    if (r.applies != methods::non)
      for (auto m : idempotent_methods)
        out.push_back({r, m});
    if (r.applies != methods::idem)
      for (auto m : other_methods)
        out.push_back({r, m});
  }
  return out;
}

std::string case_name(const testing::TestParamInfo<classify_case>& info) {
  const auto& c = info.param;
  std::string s = c.r.kind == k::none ? "status" + std::to_string(c.r.status)
                                      : std::string{to_string(c.r.kind)};
  s += c.r.sent ? "_sent_" : "_unsent_";
  for (const char* p = c.m.name; *p; ++p)
    s += *p == '!' ? std::string{"Idempotent"} : std::string(1, *p);
  return s;
}

class ClassifyTable : public testing::TestWithParam<classify_case> {};

} // namespace

TEST_P(ClassifyTable, GivesTheExpectedClassNothingSentAndHealth) {
  const auto& c = GetParam();
  std::string name = c.m.name;
  if (name.back() == '!')
    name.pop_back();
  exchange_view v;
  v.status = c.r.status;
  v.error = c.r.kind;
  v.request_sent = c.r.sent;
  v.idempotent = method_is_idempotent(name) || c.m.explicit_idempotent;
  auto got = classify_exchange(v, retry_statuses);
  EXPECT_EQ(to_string(got.cls), std::string{to_string(c.r.cls)});
  EXPECT_EQ(got.nothing_sent, c.r.nothing_sent);
  EXPECT_EQ(to_string(got.health), std::string{to_string(c.r.health)});
  EXPECT_EQ(got.kind, c.r.kind);
  EXPECT_EQ(got.answered(), c.r.kind == k::none);
  EXPECT_EQ(got.definitive(),
            c.r.cls == oc::success || c.r.cls == oc::final_status);
}

INSTANTIATE_TEST_SUITE_P(StatusesMethodsKinds, ClassifyTable,
                         testing::ValuesIn(expand()), case_name);

// The table is complete: every transport error kind appears with and
// without a byte sent, and no (status | kind, sent, method) is listed twice.
TEST(ClassifyTableShape, CoversEveryKindBothWaysAndNoCaseTwice) {
  std::set<std::tuple<int, int, bool, std::string>> seen;
  for (const auto& c : expand())
    EXPECT_TRUE(
      seen.emplace(c.r.status, static_cast<int>(c.r.kind), c.r.sent, c.m.name)
        .second)
      << case_name({c, 0});
  for (int kind = static_cast<int>(k::not_sent);
       kind <= static_cast<int>(k::pool_overflow); ++kind)
    for (bool sent : {false, true})
      for (const auto& ms : {idempotent_methods, other_methods})
        for (auto m : ms)
          EXPECT_EQ(seen.count({0, kind, sent, m.name}), 1u)
            << to_string(static_cast<k>(kind)) << " sent=" << sent << " "
            << m.name;
}

TEST(Classify, WithoutRetryStatusesEveryAnswerIsFinalOrSuccess) {
  exchange_view v;
  v.idempotent = true;
  v.request_sent = true;
  for (int status : {100, 200, 299, 300, 429, 500, 503}) {
    v.status = status;
    auto got = classify_exchange(v, {});
    EXPECT_TRUE(got.definitive()) << status;
    EXPECT_EQ(got.cls,
              status >= 200 && status <= 299 ? oc::success : oc::final_status)
      << status;
  }
}

// retry_policy::retry_statuses accepts any status 100..599: a listed 2xx
// is retried for an idempotent request, as the retry loop always did.
TEST(Classify, AListedSuccessStatusIsRetryableForIdempotentRequestsOnly) {
  exchange_view v;
  v.status = 202;
  v.request_sent = true;
  v.idempotent = true;
  EXPECT_EQ(classify_exchange(v, {202}).cls, oc::retryable_status);
  v.idempotent = false;
  EXPECT_EQ(classify_exchange(v, {202}).cls, oc::success);
}

TEST(Classify, ViewOfAnExchangeResultCopiesItsFields) {
  exchange_result r;
  r.error = k::timeout;
  r.request_sent = true;
  r.response.status = 0;
  auto v = exchange_view::of(r, true);
  EXPECT_EQ(v.error, k::timeout);
  EXPECT_TRUE(v.request_sent);
  EXPECT_TRUE(v.idempotent);
  r = exchange_result{};
  r.response.status = 503;
  v = exchange_view::of(r, false);
  EXPECT_EQ(v.status, 503);
  EXPECT_EQ(v.error, k::none);
  EXPECT_FALSE(v.idempotent);
}
