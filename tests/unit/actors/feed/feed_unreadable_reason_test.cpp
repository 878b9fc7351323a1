// unreadable_reason (actors/feed/feed_frames.hpp): which failed replay
// answers the ledger drain treats as an unreadable page (narrowed) and
// which as a replay error (retried as it is).

#include "actors/feed/feed_frames.hpp"

#include <gtest/gtest.h>

using namespace outbound;

namespace {

/// A response_error as the client reports it.
call_error failed_answer(int status, transport_error_kind cause,
                         std::string detail = {}) {
  call_error e;
  e.kind = error_kind::response_error;
  e.status = status;
  e.cause = cause;
  e.detail = std::move(detail);
  return e;
}

} // namespace

TEST(UnreadableReason, A503WhoseErrorPageIsOverTheCapIsAStatusFailure) {
  // The transport's too_large keeps the status it read: a large error page
  // of a 503 is still a 503, retried, not a page over the cap.
  auto e = failed_answer(503, transport_error_kind::too_large,
                         "response body over the size cap");
  EXPECT_EQ(unreadable_reason(e), std::nullopt);
  EXPECT_EQ(
    unreadable_reason(failed_answer(404, transport_error_kind::too_large)),
    std::nullopt);
  EXPECT_EQ(
    unreadable_reason(failed_answer(302, transport_error_kind::too_large)),
    std::nullopt);
}

TEST(UnreadableReason, A2xxOverTheCapIsOverCapWithOrWithoutItsStatus) {
  EXPECT_EQ(
    unreadable_reason(failed_answer(200, transport_error_kind::too_large)),
    drain_error_reason::over_cap);
  EXPECT_EQ(
    unreadable_reason(failed_answer(0, transport_error_kind::too_large)),
    drain_error_reason::over_cap);
  EXPECT_EQ(unreadable_reason(failed_answer(
              200, transport_error_kind::none,
              "response body over max_response_bytes (10 bytes)")),
            drain_error_reason::over_cap);
}

TEST(UnreadableReason, A2xxThatIsNotJsonIsUnparseable) {
  EXPECT_EQ(unreadable_reason(
              failed_answer(200, transport_error_kind::none, "not JSON")),
            drain_error_reason::unparseable);
}

TEST(UnreadableReason, OtherKindsAndStatusesAreReplayErrors) {
  call_error e;
  e.kind = error_kind::server_error;
  e.status = 503;
  EXPECT_EQ(unreadable_reason(e), std::nullopt);
  e.kind = error_kind::service_unavailable;
  e.status = 0;
  e.cause = transport_error_kind::too_large;
  EXPECT_EQ(unreadable_reason(e), std::nullopt);
  EXPECT_EQ(unreadable_reason(failed_answer(
              500, transport_error_kind::none,
              "response body over max_response_bytes (10 bytes)")),
            std::nullopt);
}
