#pragma once

// Shared fixture of the wire-case tests (wire_cases_*_test.cpp): every case
// of HTTP-client bug reports and the client's own loopback cases, end to end
// through the real client (blocking_client → service_client → call actor →
// connection_pool → http_connection) against the scripted loopback server.
//
// The fixture owns a real actor system, its own io_runner, a Prometheus
// registry with the client's metrics, and an observer that records every
// client_event with the steady-clock time it arrived (for timing
// assertions). Real time: integration tests only.

#include "actors/client/blocking_client.hpp"
#include "actors/messages.hpp"
#include "actors/observer.hpp"
#include "metrics/client_metrics.hpp"
#include "protocol/errors.hpp"
#include "protocol/io_runner.hpp"
#include "tests/support/scripted_server.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <prometheus/registry.h>

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace outbound::testing {

using wire_clock = std::chrono::steady_clock;

/// The credential every wire-case client sends; it must never show up in an
/// error text or an event.
inline const std::string wire_token = "TOKEN123";

/// `HTTP/1.1 200 OK` with `{}` (the response of case 1).
inline const std::string ok_empty_object
  = scripted_server::json_response(200, "{}");

/// `{"qty":1}`: the 9-byte POST body of case 1.
inline const std::string qty_body = R"({"qty":1})";

/// One observer event and when (steady clock) the recorder received it.
struct timed_event {
  wire_clock::time_point at;
  client_event ev;
};

/// Thread-safe list of every client_event the fixture's observer received.
class event_log {
public:
  void push(client_event ev);

  /// The events of one call (by request id), in arrival order.
  std::vector<timed_event> of(const std::string& request_id) const;

  /// Every event so far.
  std::vector<timed_event> all() const;

  /// Waits until the call `request_id` reported `answered` or `failed`
  /// (the metrics observer has applied every event of the call by then).
  bool wait_final(const std::string& request_id,
                  std::chrono::milliseconds timeout);

  /// Events of `kind` in `evs`.
  static std::vector<timed_event> only(const std::vector<timed_event>& evs,
                                       event_kind kind);

private:
  mutable std::mutex mtx_;
  std::condition_variable cv_;
  std::vector<timed_event> events_;
};

/// Milliseconds of a steady-clock duration (for readable EXPECTs).
inline int64_t ms(wire_clock::duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

/// The detail of an attempt that timed out. The call actor's attempt timer
/// and the connection's own timer are armed for the same instant, and either
/// may fire first: the call actor writes "no answer within the attempt's time
/// budget", the connection "timed out after <N> ms while <phase>". Succeeds
/// when `detail` holds one of them, the second with a phase in `phases` (the
/// phases the exchange can legally be in when the timer fires, e.g. "writing
/// the request").
inline ::testing::AssertionResult
is_attempt_timeout(const std::string& detail,
                   const std::vector<std::string>& phases) {
  if (detail.find("no answer within the attempt's time budget")
      != std::string::npos)
    return ::testing::AssertionSuccess();
  const std::string head = "timed out after ";
  for (auto at = detail.find(head); at != std::string::npos;
       at = detail.find(head, at + 1)) {
    auto i = at + head.size();
    auto digits = i;
    while (i < detail.size() && detail[i] >= '0' && detail[i] <= '9')
      ++i;
    if (i == digits)
      continue;
    for (const auto& p : phases) {
      const std::string tail = " ms while " + p;
      if (detail.compare(i, tail.size(), tail) == 0)
        return ::testing::AssertionSuccess();
    }
  }
  return ::testing::AssertionFailure()
         << "not an attempt timeout in an allowed phase: " << detail;
}

/// The base of every wire-case test.
class wire_test : public ::testing::Test {
protected:
  wire_test();
  ~wire_test() override;

public:
  /// The case file's defaults for `base_url`: max attempts 3, backoff base
  /// 100 ms, cap 1 s, per-attempt timeout 1 s, overall deadline 5 s, body
  /// cap 1 MiB; credential `Bearer TOKEN123`.
  static client_config defaults(const std::string& base_url);

  /// A client on the fixture's actor system, io runner and observer (which
  /// feeds the metrics and the event log). Fixed seed: reproducible jitter.
  std::unique_ptr<blocking_client> client(client_config cfg);

  /// A scripted server whose every read step gives up after 3 s, so no test
  /// can hang on a client that never sends.
  static std::unique_ptr<scripted_server>
  server(std::vector<script> scripts, script fallback = {step::close()},
         server_tls tls = {});

protected:
  /// outbound_client_retries_total{reason=<reason>} (the case file's
  /// `retries_total{reason="transport"}` is labelled with the transport
  /// error kind, e.g. "interrupted" or "timeout").
  double retries(const std::string& reason) const;

  /// Sum of outbound_client_retries_total over every reason.
  double retries_all() const;

  /// outbound_client_redials_total.
  double redials() const;

  /// Waits for the final event of `request_id` (fails the test otherwise)
  /// and returns the call's events.
  std::vector<timed_event> events_of(const std::string& request_id);

  /// Asserts that the credential appears in no text of `e` (message,
  /// detail, location) nor in any event cause recorded so far.
  void expect_no_token(const call_error& e) const;

  static call_request get(const std::string& path);
  static call_request post(const std::string& path, const std::string& body);

  static boost::json::value json(const std::string& text) {
    return boost::json::parse(text);
  }

  /// Calls `fn`, expects it to throw exactly `E` (or a subclass), and
  /// returns the error; records a failure and returns nothing otherwise.
  template <class E, class Fn>
  static std::optional<call_error> expect_throw(Fn&& fn) {
    try {
      auto v = fn();
      ADD_FAILURE() << "expected an exception, got a value: "
                    << describe_value(v);
    } catch (const E& e) {
      EXPECT_EQ(std::string{e.what()}.find(wire_token), std::string::npos)
        << e.what();
      return e.error();
    } catch (const service_error& e) {
      ADD_FAILURE() << "wrong exception type (kind " << to_string(e.kind())
                    << "): " << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "unexpected exception: " << e.what();
    }
    return std::nullopt;
  }

  static std::string describe_value(const boost::json::value& v) {
    return boost::json::serialize(v);
  }
  static std::string describe_value(const raw_response& r) {
    return "HTTP " + std::to_string(r.status) + " "
           + boost::json::serialize(r.body);
  }

  /// Declared first: destroyed after the actor system that uses them.
  prometheus::Registry registry_;
  std::shared_ptr<client_metrics> metrics_;
  std::shared_ptr<event_log> log_;
  std::shared_ptr<io_runner> io_;
  caf::actor_system_config cfg_;
  std::unique_ptr<caf::actor_system> sys_;
  observer_actor observer_;
};

/// Value of header `name` of a recorded request, or "<absent>".
std::string header_or_absent(const recorded_request& r,
                             const std::string& name);

/// Requests in `rs` whose method is `method`.
std::size_t count_method(const std::vector<recorded_request>& rs,
                         const std::string& method);

/// gzip (RFC 1952) of `data`, deflated with Beast's zlib port.
std::string gzip(const std::string& data);

} // namespace outbound::testing
