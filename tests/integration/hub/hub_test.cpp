// The reference hub end to end (hub/hub.hpp): a hub started in-process, port
// 0, published to and replayed through outbound's own blocking client, and
// subscribed to over real WebSockets — a Beast client for the protocol and a
// raw-socket client that sees exact frame bytes (fragments, oversized
// headers, silence). Every fault knob has at least one test showing it does
// what it says. Once, `outbound hub --port 0` runs as a child process.
//
// Real time on 127.0.0.1: every wait is bounded, "nothing arrives" checks
// wait a fixed short window.

#include "hub/hub.hpp"

#include "actors/client/blocking_client.hpp"
#include "actors/messages.hpp"
#include "config/client_config.hpp"
#include "config/config_error.hpp"
#include "protocol/errors.hpp"
#include "protocol/json_parse.hpp"
#include "tests/support/child_process.hpp"
#include "tests/support/outcome_checks.hpp"
#include "tests/support/raw_ws.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <csignal>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

using namespace outbound;
using outbound::testing::failure_of;
using outbound::testing::outbound_argv;
using outbound::testing::raw_ws;
using outbound::testing::run_child;
using outbound::testing::running_child;
using namespace std::chrono_literals;

namespace net = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
namespace json = boost::json;

namespace {

// -- a Beast WebSocket client with a background reader ------------------------

/// Connects and handshakes synchronously, then reads every message on its
/// own thread; `next()` waits for one with a timeout.
class ws_client {
public:
  ws_client(uint16_t port, const std::string& path,
            std::size_t max_message = 8u * 1024u * 1024u)
    : ws_(ioc_) {
    auto& tcp = beast::get_lowest_layer(ws_);
    tcp.expires_after(5s);
    tcp.connect(
      net::ip::tcp::endpoint{net::ip::make_address("127.0.0.1"), port});
    tcp.expires_never();
    ws_.read_message_max(max_message);
    ws_.handshake("127.0.0.1:" + std::to_string(port), path);
    guard_.emplace(net::make_work_guard(ioc_));
    do_read();
    thread_ = std::thread{[this] {
      ioc_.run();
    }};
  }

  ~ws_client() {
    net::post(ioc_, [this] {
      beast::error_code ec;
      beast::get_lowest_layer(ws_).socket().close(ec);
    });
    guard_.reset();
    ioc_.stop();
    thread_.join();
  }

  void send(std::string text) {
    net::post(ioc_, [this, t = std::move(text)]() mutable {
      out_.push_back(std::move(t));
      if (out_.size() == 1)
        do_write();
    });
  }

  void subscribe(const json::object& extra = {}) {
    json::object o;
    o["type"] = "subscribe";
    o["prefixes"] = json::array{};
    o["client_id"] = nullptr;
    o["last_seq"] = nullptr;
    o["cursor"] = nullptr;
    o["epoch"] = nullptr;
    for (const auto& kv : extra)
      o[kv.key()] = kv.value();
    send(json::serialize(o));
  }

  /// The next message, or nullopt after `timeout` or once closed.
  std::optional<std::string> next(std::chrono::milliseconds timeout = 3s) {
    std::unique_lock<std::mutex> lock{mu_};
    cv_.wait_for(lock, timeout, [this] { return !in_.empty() || closed_; });
    if (in_.empty())
      return std::nullopt;
    auto m = std::move(in_.front());
    in_.pop_front();
    return m;
  }

  /// The next message parsed as a JSON object (fails the test otherwise).
  json::object next_json(std::chrono::milliseconds timeout = 3s) {
    auto m = next(timeout);
    if (!m) {
      ADD_FAILURE() << "no message within " << timeout.count() << " ms"
                    << (closed() ? " (closed: " + error().message() + ")"
                                 : std::string{});
      return {};
    }
    boost::system::error_code ec;
    auto v = json::parse(*m, ec);
    if (ec || !v.is_object()) {
      ADD_FAILURE() << "not a JSON object: " << *m;
      return {};
    }
    return v.as_object();
  }

  /// Waits until the connection ended; true if it did within `timeout`.
  bool wait_closed(std::chrono::milliseconds timeout = 3s) {
    std::unique_lock<std::mutex> lock{mu_};
    return cv_.wait_for(lock, timeout, [this] { return closed_; });
  }

  bool closed() {
    std::lock_guard<std::mutex> lock{mu_};
    return closed_;
  }

  beast::error_code error() {
    std::lock_guard<std::mutex> lock{mu_};
    return error_;
  }

  /// The close frame's code (0: none received).
  uint16_t close_code() {
    std::lock_guard<std::mutex> lock{mu_};
    return close_code_;
  }

private:
  void do_read() {
    ws_.async_read(buf_, [this](beast::error_code ec, std::size_t) {
      std::lock_guard<std::mutex> lock{mu_};
      if (ec) {
        closed_ = true;
        error_ = ec;
        close_code_ = ws_.reason().code;
        cv_.notify_all();
        return;
      }
      in_.push_back(beast::buffers_to_string(buf_.data()));
      buf_.consume(buf_.size());
      cv_.notify_all();
      do_read();
    });
  }

  void do_write() {
    ws_.async_write(net::buffer(out_.front()),
                    [this](beast::error_code ec, std::size_t) {
                      out_.pop_front();
                      if (!ec && !out_.empty())
                        do_write();
                    });
  }

  net::io_context ioc_;
  websocket::stream<beast::tcp_stream> ws_;
  std::optional<net::executor_work_guard<net::io_context::executor_type>>
    guard_;
  std::thread thread_;
  beast::flat_buffer buf_;
  std::deque<std::string> out_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> in_;
  bool closed_ = false;
  beast::error_code error_;
  uint16_t close_code_ = 0;
};

std::string hex(const std::string& bytes) {
  static const char* digits = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : bytes) {
    if (!out.empty())
      out += ' ';
    out += digits[c >> 4];
    out += digits[c & 0xF];
  }
  return out;
}

// -- the fixture
// -----------------------------------------------------------------

class HubTest : public ::testing::Test {
protected:
  void SetUp() override {
    cfg_ = std::make_unique<caf::actor_system_config>();
    cfg_->add_message_types<caf::id_block::outbound>();
    sys_ = std::make_unique<caf::actor_system>(*cfg_);
  }

  void TearDown() override {
    client_.reset();
    hub_.reset();
    sys_.reset();
    cfg_.reset();
  }

  /// Starts the hub under test with `c` (port 0) and a client for it.
  void start(hub_config c = {}) {
    c.seed = c.seed.value_or(1234);
    hub_ = std::make_unique<hub>(c);
    hub_->start();
    client_config cc;
    cc.base_url = hub_->base_url();
    cc.timeout = 5.0;
    cc.deadline = 10.0;
    cc.retry.max_attempts = 1;
    client_ = std::make_unique<blocking_client>(*sys_, cc);
  }

  blocking_client& http() {
    return *client_;
  }

  json::value publish(const std::string& subject, const std::string& key = "",
                      json::object metadata = {}) {
    json::object body;
    body["subject"] = subject;
    body["kind"] = "changed";
    body["metadata"] = std::move(metadata);
    if (!key.empty())
      body["dedupe_key"] = key;
    return http().request("POST", "/v1/events", json::value(std::move(body)));
  }

  json::value replay(int64_t after, int limit = 0,
                     const std::string& prefix = "") {
    param_list p{{"after", std::to_string(after)}};
    if (limit != 0)
      p.emplace_back("limit", std::to_string(limit));
    if (!prefix.empty())
      p.emplace_back("prefix", prefix);
    return http().request("GET", "/v1/events", std::nullopt, p);
  }

  void faults(const std::string& patch) {
    auto r = http().request_raw("POST", "/admin/faults", json::parse(patch));
    ASSERT_EQ(r.status, 200) << json::serialize(r.body);
  }

  json::object state() {
    return http().request("GET", "/admin/state").as_object();
  }

  static std::vector<int64_t> ids(const json::value& page) {
    std::vector<int64_t> out;
    for (const auto& e : page.at("events").as_array())
      out.push_back(e.at("id").as_int64());
    return out;
  }

  /// Reads wakes until one announces `cursor`; returns every cursor read.
  static std::vector<int64_t> wakes_until(ws_client& ws, int64_t cursor) {
    std::vector<int64_t> seen;
    for (;;) {
      auto m = ws.next_json();
      if (m.empty())
        return seen;
      EXPECT_EQ(m.at("type").as_string(), "wake");
      seen.push_back(m.at("cursor").as_int64());
      if (seen.back() >= cursor)
        return seen;
    }
  }

  uint16_t port() const {
    return hub_->port();
  }

  std::unique_ptr<caf::actor_system_config> cfg_;
  std::unique_ptr<caf::actor_system> sys_;
  std::unique_ptr<hub> hub_;
  std::unique_ptr<blocking_client> client_;
};

} // namespace

// -- HTTP: publish, replay, cursor
// ------------------------------------------------

TEST_F(HubTest, PublishAnswersTheStoredEvent) {
  start();
  json::object md;
  md["n"] = 7;
  auto ev = publish("a/b/c", "", md);
  EXPECT_EQ(ev.at("id").as_int64(), 1);
  EXPECT_EQ(ev.at("seq").as_int64(), 1);
  EXPECT_EQ(ev.at("subject").as_string(), "a/b/c");
  EXPECT_EQ(ev.at("kind").as_string(), "changed");
  EXPECT_EQ(ev.at("metadata").at("n").as_int64(), 7);
  EXPECT_TRUE(ev.at("ts").is_double());
  EXPECT_EQ(publish("a/b/d").at("id").as_int64(), 2);
}

TEST_F(HubTest, PublishRejectsInvalidBodiesWith400AndADetail) {
  start();
  auto bad = [&](json::value body) {
    return http().request_raw("POST", "/v1/events", std::move(body));
  };
  auto r1 = bad(json::parse(R"({"kind":"x"})"));
  EXPECT_EQ(r1.status, 400);
  EXPECT_EQ(r1.body.at("detail").as_string(),
            "subject must be a non-empty string");
  auto r2 = bad(json::parse(R"({"subject":"s","metadata":[1]})"));
  EXPECT_EQ(r2.status, 400);
  EXPECT_EQ(r2.body.at("detail").as_string(), "metadata must be an object");
  json::object big;
  big["subject"] = "s";
  big["metadata"] = json::object{{"k", std::string(4089, 'x')}};
  auto r3 = bad(big);
  EXPECT_EQ(r3.status, 400);
  EXPECT_EQ(r3.body.at("detail").as_string(), "metadata exceeds 4096 bytes");
  big["metadata"] = json::object{{"k", std::string(4088, 'x')}};
  EXPECT_EQ(bad(big).status, 200);
  auto r4 = bad(json::value("just a string"));
  EXPECT_EQ(r4.status, 400);
  EXPECT_EQ(r4.body.at("detail").as_string(), "body must be a JSON object");
}

TEST_F(HubTest, IdsOneToFiveWithLimitThreeComeAsTwoPagesInOrder) {
  start();
  for (int i = 1; i <= 5; ++i)
    publish("s/" + std::to_string(i));
  auto p1 = replay(0, 3);
  EXPECT_EQ(ids(p1), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(p1.at("cursor").as_int64(), 3);
  EXPECT_FALSE(p1.at("reset").as_bool());
  auto p2 = replay(3, 3);
  EXPECT_EQ(ids(p2), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(p2.at("cursor").as_int64(), 5);
  auto p3 = replay(5, 3);
  EXPECT_TRUE(p3.at("events").as_array().empty());
  EXPECT_EQ(p3.at("cursor").as_int64(), 5);
  EXPECT_EQ(http().request("GET", "/v1/cursor").at("cursor").as_int64(), 5);
}

TEST_F(HubTest, ReplayLimitDefaultsAndClampsToReplayLimit) {
  hub_config c;
  c.replay_limit = 4;
  start(c);
  for (int i = 0; i < 10; ++i)
    publish("s");
  EXPECT_EQ(ids(replay(0)).size(), 4u);
  EXPECT_EQ(ids(replay(0, -1)).size(), 4u);
  EXPECT_EQ(ids(replay(0, 100)).size(), 4u);
  EXPECT_EQ(ids(replay(0, 2)), (std::vector<int64_t>{1, 2}));
}

TEST_F(HubTest, ReplayFiltersByPrefix) {
  start();
  publish("orders/1");
  publish("users/1");
  publish("orders/2");
  auto p = replay(0, 10, "orders/");
  EXPECT_EQ(ids(p), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(p.at("cursor").as_int64(), 3);
}

TEST_F(HubTest, ReplayRejectsBadAfterAndLimit) {
  start();
  auto get = [&](param_list p) {
    return http().request_raw("GET", "/v1/events", std::nullopt, p);
  };
  auto r1 = get({{"after", "2147483648"}});
  EXPECT_EQ(r1.status, 400);
  EXPECT_EQ(r1.body.at("detail").as_string(), "after exceeds 2147483647");
  auto r2 = get({{"after", "1234567890123456789"}});
  EXPECT_EQ(r2.status, 400);
  EXPECT_EQ(r2.body.at("detail").as_string(), "after has more than 18 digits");
  EXPECT_EQ(get({{"after", "2147483647"}}).status, 200);
  auto r3 = get({{"limit", "ten"}});
  EXPECT_EQ(r3.status, 400);
  EXPECT_EQ(r3.body.at("detail").as_string(), "limit must be an integer");
}

TEST_F(HubTest, ARepeatedDedupeKeyReturnsTheExistingEvent) {
  start();
  auto a = publish("s", "key-1");
  auto b = publish("s", "key-1");
  EXPECT_EQ(a, b);
  EXPECT_EQ(http().request("GET", "/v1/cursor").at("cursor").as_int64(), 1);
  EXPECT_EQ(publish("s", "key-2").at("id").as_int64(), 2);
  EXPECT_EQ(state().at("counters").at("duplicates").to_number<int64_t>(), 1);
}

// -- Idempotency-Key (draft-ietf-httpapi-idempotency-key-header) ----------

namespace {

call_request keyed_publish(const std::string& subject, const std::string& key) {
  call_request c;
  c.method = "POST";
  c.path = "/v1/events";
  c.body = R"({"subject":")" + subject + R"(","kind":"changed"})";
  c.has_body = true;
  c.idempotency_key = key;
  return c;
}

} // namespace

TEST_F(HubTest,
       ARepeatedIdempotencyKeyAnswersTheFirstEventAndAnotherBodyIs422) {
  start();
  auto a = http().call(keyed_publish("s", "k1"));
  ASSERT_TRUE(a.ok()) << a.error->message();
  auto b = http().call(keyed_publish("s", "k1"));
  ASSERT_TRUE(b.ok()) << b.error->message();
  EXPECT_EQ(a.body, b.body);
  EXPECT_EQ(http().request("GET", "/v1/cursor").at("cursor").as_int64(), 1);
  auto c = http().call(keyed_publish("other", "k1"));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error->status, 422);
  EXPECT_EQ(http().request("GET", "/v1/cursor").at("cursor").as_int64(), 1);
  auto counters = state().at("counters");
  EXPECT_EQ(counters.at("idempotent_replays").to_number<int64_t>(), 1);
  EXPECT_EQ(counters.at("idempotency_conflicts").to_number<int64_t>(), 1);
}

// The end-to-end case the header exists for: the hub publishes a POST and
// the connection drops before its answer (the fault lose_publish_answers).
// With a key the client retries the POST and the hub answers the first
// event: exactly one event. Without one the POST is not retried (it may
// have been processed); forced idempotent without a key it publishes twice.
class HubIdempotency : public HubTest {
protected:
  call_outcome call_retrying(call_request c) {
    client_config cc;
    cc.base_url = hub_->base_url();
    cc.timeout = 5.0;
    cc.deadline = 10.0;
    cc.retry.max_attempts = 3;
    cc.retry.base_backoff = 0.01;
    blocking_client retrying{*sys_, cc};
    return retrying.call(c);
  }
  int64_t cursor() {
    return http().request("GET", "/v1/cursor").at("cursor").as_int64();
  }
};

TEST_F(HubIdempotency, APostWithAKeyRetriedThroughALostAnswerPublishesOnce) {
  start();
  faults(R"({"lose_publish_answers":1})");
  auto c = keyed_publish("orders/1", "");
  c.idempotency_mode = idempotency_key_mode::auto_key;
  auto o = call_retrying(c);
  ASSERT_TRUE(o.ok()) << o.error->message();
  EXPECT_EQ(o.attempts, 2);
  EXPECT_EQ(o.body.at("id").as_int64(), 1);
  EXPECT_EQ(cursor(), 1);
  auto counters = state().at("counters");
  EXPECT_EQ(counters.at("lost_publish_answers").to_number<int64_t>(), 1);
  EXPECT_EQ(counters.at("idempotent_replays").to_number<int64_t>(), 1);
}

TEST_F(HubIdempotency, WithoutAKeyTheLostAnswerIsAnErrorOrADuplicate) {
  start();
  faults(R"({"lose_publish_answers":1})");
  auto o = call_retrying(keyed_publish("orders/1", ""));
  ASSERT_FALSE(o.ok());
  EXPECT_FALSE(o.error->nothing_sent);
  EXPECT_EQ(o.attempts, 1);
  EXPECT_EQ(cursor(), 1); // published, but the caller cannot know
  faults(R"({"lose_publish_answers":1})");
  auto forced = keyed_publish("orders/2", "");
  forced.idempotent = true;
  auto f = call_retrying(forced);
  ASSERT_TRUE(f.ok()) << f.error->message();
  EXPECT_EQ(cursor(), 3); // the retry published orders/2 a second time
}

// -- latency routes: tags and outages ----------------------------------------

TEST_F(HubTest, AnOutageAnswersItsRouteWithItsStatusAndTagsAreCounted) {
  start();
  auto get = [&](const std::string& path, const std::string& tag) {
    call_request c;
    c.path = path;
    c.params = {{"tag", tag}};
    return http().call(c);
  };
  EXPECT_TRUE(get("/steady", "a").ok());
  faults(R"({"outage_path":"/steady","outage_status":502})");
  auto o = get("/steady", "a");
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.error->status, 502);
  EXPECT_TRUE(get("/fast", "b").ok()); // another route is not affected
  faults(R"({"outage_path":""})");
  EXPECT_TRUE(get("/steady", "a").ok());
  EXPECT_EQ(hub_->profile_requests("a"), 3u);
  EXPECT_EQ(hub_->profile_requests("b"), 1u);
  EXPECT_EQ(hub_->profile_requests("c"), 0u);
  auto tags = state().at("server").at("profile_tags");
  EXPECT_EQ(tags.at("a").to_number<int64_t>(), 3);
  EXPECT_EQ(tags.at("b").to_number<int64_t>(), 1);
}

// The draws of bench/hedging's configurations are paired: the same key in
// another scope starts again at arrival 0 and draws the same latency.
TEST_F(HubTest, AScopeCountsArrivalsOfItsOwnAndKeepsTheDraws) {
  start();
  auto get = [&](const std::string& scope) {
    call_request c;
    c.path = "/lognormal";
    c.params = {{"seed", "7"}, {"key", "call-1"}};
    if (!scope.empty())
      c.params.emplace_back("scope", scope);
    auto o = http().call(c);
    EXPECT_TRUE(o.ok()) << (o.error ? o.error->detail : "");
    return o.ok() ? o.body : boost::json::value{};
  };
  auto a0 = get("cfg-a"), a1 = get("cfg-a");
  auto b0 = get("cfg-b"), b1 = get("cfg-b");
  auto n0 = get(""), n1 = get("");
  for (auto* v : {&a0, &b0, &n0})
    EXPECT_EQ(v->at("arrival").as_int64(), 0) << *v;
  for (auto* v : {&a1, &b1, &n1})
    EXPECT_EQ(v->at("arrival").as_int64(), 1) << *v;
  for (auto* v : {&b0, &n0})
    EXPECT_EQ(v->at("delay_ms"), a0.at("delay_ms")) << *v;
  for (auto* v : {&b1, &n1})
    EXPECT_EQ(v->at("delay_ms"), a1.at("delay_ms")) << *v;
  EXPECT_NE(a0.at("delay_ms"), a1.at("delay_ms"));
  call_request bad;
  bad.path = "/lognormal";
  bad.params = {{"scope", "a b"}};
  auto o = http().call(bad);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.error->status, 400);
}

TEST_F(HubTest, ABadOutageKnobIsNamedAndChangesNothing) {
  start();
  call_request c;
  c.method = "POST";
  c.path = "/admin/faults";
  c.body = R"({"outage_path":"/v1/events"})";
  c.has_body = true;
  auto o = http().call(c);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.error->status, 400);
  c.body = R"({"outage_status":200})";
  o = http().call(c);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.error->status, 400);
  auto f = state().at("faults");
  EXPECT_EQ(f.at("outage_path").as_string(), "");
  EXPECT_EQ(f.at("outage_status").to_number<int64_t>(), 503);
}

TEST_F(HubTest, RetentionFloorFromAdminGivesOneResetThenThePageFromTheFloor) {
  // feeds.md case 16: cursor 100, retention now starts at 150.
  start();
  for (int i = 0; i < 200; ++i)
    hub_->publish("x", "changed");
  faults(R"({"floor":149})");
  auto p = replay(100, 10);
  EXPECT_TRUE(p.at("reset").as_bool());
  EXPECT_EQ(ids(p).front(), 150);
  EXPECT_EQ(p.at("cursor").as_int64(), 159);
  auto next = replay(159, 10);
  EXPECT_FALSE(next.at("reset").as_bool());
  EXPECT_EQ(ids(next).front(), 160);
  faults(R"({"retention":5})");
  auto r = replay(160, 10);
  EXPECT_TRUE(r.at("reset").as_bool());
  EXPECT_EQ(ids(r), (std::vector<int64_t>{196, 197, 198, 199, 200}));
}

TEST_F(HubTest, RetentionFromTheConfigKeepsTheLastREvents) {
  hub_config c;
  c.retention = 3;
  start(c);
  for (int i = 0; i < 6; ++i)
    publish("s");
  auto p = replay(0);
  EXPECT_TRUE(p.at("reset").as_bool());
  EXPECT_EQ(ids(p), (std::vector<int64_t>{4, 5, 6}));
}

TEST_F(HubTest, AdminAndRoutingErrors) {
  start();
  auto r1 = http().request_raw("POST", "/admin/faults",
                               json::parse(R"({"bogus":1})"));
  EXPECT_EQ(r1.status, 400);
  EXPECT_EQ(r1.body.at("detail").as_string(), "unknown knob 'bogus'");
  auto r2 = http().request_raw("GET", "/nowhere");
  EXPECT_EQ(r2.status, 404);
  auto r3 = http().request_raw("DELETE", "/v1/events");
  EXPECT_EQ(r3.status, 405);
  auto r4 = http().request_raw("GET", "/ws/feed");
  EXPECT_EQ(r4.status, 426);
  auto s = state();
  EXPECT_EQ(s.at("mode").as_string(), "ledger");
  EXPECT_EQ(s.at("port").as_int64(), port());
  EXPECT_EQ(s.at("epoch").as_string(), hub_->epoch());
}

TEST_F(HubTest, TheSameSeedGivesTheSameEpoch) {
  hub_config c;
  c.seed = 99;
  hub a{c};
  hub b{c};
  EXPECT_EQ(a.epoch(), b.epoch());
  EXPECT_EQ(a.epoch().size(), 16u);
  c.seed = 100;
  hub d{c};
  EXPECT_NE(d.epoch(), a.epoch());
}

// -- WebSocket tiers
// -----------------------------------------------------------------

TEST_F(HubTest, LedgerHelloThenWakesOnly) {
  start();
  publish("s");
  ws_client ws{port(), "/ws/ledger"};
  ws.subscribe();
  auto hello = ws.next_json();
  EXPECT_EQ(hello.at("type").as_string(), "hello");
  EXPECT_EQ(hello.at("mode").as_string(), "ledger");
  EXPECT_EQ(hello.at("seq").as_int64(), 1);
  EXPECT_EQ(hello.at("cursor").as_int64(), 1);
  EXPECT_FALSE(hello.at("resync").as_bool());
  // The ledger's incarnation id: per process, not the catch-up epoch.
  ASSERT_TRUE(hello.at("epoch").is_string());
  EXPECT_EQ(hello.at("epoch").as_string().size(), 16u);
  EXPECT_NE(hello.at("epoch").as_string(), hub_->epoch());
  publish("s");
  auto wake = ws.next_json();
  EXPECT_EQ(json::serialize(wake), R"({"type":"wake","cursor":2})");
}

TEST_F(HubTest, LedgerWakesCoalesceAndOnlyRise) {
  start();
  ws_client ws{port(), "/ws/feed"};
  ws.subscribe();
  ASSERT_EQ(ws.next_json().at("mode").as_string(), "ledger");
  for (int i = 0; i < 1000; ++i)
    hub_->publish("s", "k");
  auto seen = wakes_until(ws, 1000);
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back(), 1000);
  EXPECT_LT(seen.size(), 1000u) << "wakes were not coalesced";
  for (std::size_t i = 1; i < seen.size(); ++i)
    EXPECT_LT(seen[i - 1], seen[i]);
  EXPECT_FALSE(ws.next(200ms)) << "one wake per pending flag";
}

TEST_F(HubTest, LedgerWakesFollowTheSubscribedPrefixes) {
  start();
  ws_client ws{port(), "/ws/ledger"};
  json::object extra;
  extra["prefixes"] = json::array{"a/"};
  ws.subscribe(extra);
  ws.next_json();
  publish("b/1");
  publish("a/2");
  EXPECT_EQ(ws.next_json().at("cursor").as_int64(), 2);
}

TEST_F(HubTest, JsonPingIsAnsweredWithPongOnEveryTier) {
  start();
  for (auto* path : {"/ws/ledger", "/ws/catchup", "/ws/ephemeral"}) {
    ws_client ws{port(), path};
    ws.subscribe();
    ws.next_json();
    ws.send(R"({"type":"ping"})");
    EXPECT_EQ(json::serialize(ws.next_json()), R"({"type":"pong"})") << path;
  }
}

TEST_F(HubTest, FeedPathServesTheConfiguredMode) {
  hub_config c;
  c.mode = hub_tier::catchup;
  start(c);
  ws_client ws{port(), "/ws/feed"};
  ws.subscribe();
  EXPECT_EQ(ws.next_json().at("mode").as_string(), "catchup");
}

TEST_F(HubTest, CatchupResumesAfterADisconnectWithoutGapOrDuplicate) {
  start();
  json::object sub;
  sub["client_id"] = "c1";
  std::string epoch;
  {
    ws_client ws{port(), "/ws/catchup"};
    ws.subscribe(sub);
    auto hello = ws.next_json();
    EXPECT_EQ(hello.at("mode").as_string(), "catchup");
    EXPECT_TRUE(hello.at("resync").as_bool());
    EXPECT_EQ(hello.at("seq").as_int64(), 0);
    epoch = std::string{hello.at("epoch").as_string()};
    EXPECT_EQ(epoch, hub_->epoch());
    publish("a/1");
    publish("a/2");
    auto e1 = ws.next_json();
    EXPECT_EQ(e1.at("type").as_string(), "event");
    EXPECT_EQ(e1.at("seq").as_int64(), 1);
    EXPECT_EQ(e1.at("subject").as_string(), "a/1");
    EXPECT_EQ(e1.at("kind").as_string(), "changed");
    EXPECT_TRUE(e1.at("metadata").is_object());
    EXPECT_EQ(ws.next_json().at("seq").as_int64(), 2);
  }
  publish("a/3");
  publish("a/4");
  publish("a/5");
  ws_client ws{port(), "/ws/catchup"};
  sub["last_seq"] = 2;
  sub["epoch"] = epoch;
  ws.subscribe(sub);
  auto hello = ws.next_json();
  EXPECT_FALSE(hello.at("resync").as_bool());
  EXPECT_EQ(hello.at("seq").as_int64(), 5);
  EXPECT_EQ(hello.at("epoch").as_string(), epoch);
  publish("a/6");
  std::vector<int64_t> seqs;
  for (int i = 0; i < 4; ++i)
    seqs.push_back(ws.next_json().at("seq").as_int64());
  EXPECT_EQ(seqs, (std::vector<int64_t>{3, 4, 5, 6}));
  EXPECT_FALSE(ws.next(200ms));
}

TEST_F(HubTest, CatchupRestartClosesWith1012AndTheOldEpochResyncs) {
  start();
  json::object sub;
  sub["client_id"] = "c1";
  ws_client ws{port(), "/ws/catchup"};
  ws.subscribe(sub);
  auto old_epoch = std::string{ws.next_json().at("epoch").as_string()};
  publish("a");
  publish("a");
  ws.next_json();
  ws.next_json();
  auto r = http().request("POST", "/admin/restart");
  auto new_epoch = std::string{r.at("epoch").as_string()};
  EXPECT_NE(new_epoch, old_epoch);
  ASSERT_TRUE(ws.wait_closed());
  EXPECT_EQ(ws.close_code(), 1012);
  publish("b");
  ws_client again{port(), "/ws/catchup"};
  sub["last_seq"] = 2;
  sub["epoch"] = old_epoch;
  again.subscribe(sub);
  auto hello = again.next_json();
  EXPECT_TRUE(hello.at("resync").as_bool());
  EXPECT_EQ(hello.at("epoch").as_string(), new_epoch);
  EXPECT_EQ(hello.at("seq").as_int64(), 1) << "the new seq space";
  publish("c");
  EXPECT_EQ(again.next_json().at("seq").as_int64(), 2);
  EXPECT_EQ(state().at("counters").at("restarts").to_number<int64_t>(), 1);
}

TEST_F(HubTest, CatchupBelowTheRingFloorResyncs) {
  hub_config c;
  c.ring_size = 4;
  start(c);
  json::object sub;
  sub["client_id"] = "c1";
  std::string epoch;
  {
    ws_client ws{port(), "/ws/catchup"};
    ws.subscribe(sub);
    epoch = std::string{ws.next_json().at("epoch").as_string()};
  }
  for (int i = 0; i < 10; ++i)
    publish("a");
  ws_client ws{port(), "/ws/catchup"};
  sub["last_seq"] = 1;
  sub["epoch"] = epoch;
  ws.subscribe(sub);
  auto hello = ws.next_json();
  EXPECT_TRUE(hello.at("resync").as_bool());
  EXPECT_EQ(hello.at("seq").as_int64(), 10);
  EXPECT_FALSE(ws.next(200ms)) << "a resync replays nothing";
}

TEST_F(HubTest, CatchupWithRingSizeZeroAlwaysResyncs) {
  hub_config c;
  c.ring_size = 0;
  start(c);
  json::object sub;
  sub["client_id"] = "c1";
  std::string epoch;
  {
    ws_client ws{port(), "/ws/catchup"};
    ws.subscribe(sub);
    epoch = std::string{ws.next_json().at("epoch").as_string()};
  }
  publish("a");
  ws_client ws{port(), "/ws/catchup"};
  sub["last_seq"] = 0;
  sub["epoch"] = epoch;
  ws.subscribe(sub);
  EXPECT_TRUE(ws.next_json().at("resync").as_bool());
}

TEST_F(HubTest, EphemeralCarriesEventsAndResyncsOnEveryConnect) {
  start();
  json::object sub;
  sub["client_id"] = "c1";
  {
    ws_client ws{port(), "/ws/ephemeral"};
    ws.subscribe(sub);
    auto hello = ws.next_json();
    EXPECT_EQ(hello.at("mode").as_string(), "ephemeral");
    EXPECT_TRUE(hello.at("resync").as_bool());
    publish("e/1");
    auto ev = ws.next_json();
    EXPECT_EQ(ev.at("type").as_string(), "event");
    EXPECT_EQ(ev.at("seq").as_int64(), 1);
    EXPECT_EQ(ev.at("subject").as_string(), "e/1");
  }
  publish("e/2");
  ws_client ws{port(), "/ws/ephemeral"};
  sub["last_seq"] = 1;
  sub["epoch"] = hub_->epoch();
  ws.subscribe(sub);
  auto hello = ws.next_json();
  EXPECT_TRUE(hello.at("resync").as_bool());
  EXPECT_EQ(hello.at("seq").as_int64(), 2);
  EXPECT_FALSE(ws.next(200ms)) << "no ring: nothing replayed";
}

TEST_F(HubTest, InFrameTiersFilterByPrefix) {
  start();
  ws_client ws{port(), "/ws/catchup"};
  json::object sub;
  sub["client_id"] = "c1";
  sub["prefixes"] = json::array{"keep/"};
  ws.subscribe(sub);
  ws.next_json();
  publish("drop/1");
  publish("keep/2");
  auto ev = ws.next_json();
  EXPECT_EQ(ev.at("subject").as_string(), "keep/2");
  EXPECT_EQ(ev.at("seq").as_int64(), 2);
}

TEST_F(HubTest, SubscribersJoiningMidStreamSeeNoGapAndNoDuplicate) {
  // Two io threads, a publisher racing the subscribes: each subscriber gets
  // the seqs after its hello's boundary exactly once, in order (subscribe-
  // before-snapshot, boundary suppression); ledger wakes only rise.
  hub_config c;
  c.threads = 2;
  // The clients read only after the publisher is done, so up to `total`
  // live frames may sit in a session's queue (CI under ASan overflowed the
  // default 2048 and saw a 1013 close). Backpressure has its own tests.
  c.queue_max = 1 << 16;
  start(c);
  constexpr int64_t total = 3000;
  std::thread publisher{[&] {
    for (int64_t i = 0; i < total; ++i)
      hub_->publish("s/" + std::to_string(i % 7), "k");
  }};
  const char* paths[] = {"/ws/catchup", "/ws/ephemeral", "/ws/ledger"};
  std::vector<std::unique_ptr<ws_client>> clients;
  for (int i = 0; i < 9; ++i) {
    clients.push_back(std::make_unique<ws_client>(port(), paths[i % 3]));
    json::object sub;
    sub["client_id"] = "c" + std::to_string(i);
    clients.back()->subscribe(sub);
    std::this_thread::sleep_for(2ms);
  }
  publisher.join();
  for (int i = 0; i < 9; ++i) {
    auto& ws = *clients[static_cast<std::size_t>(i)];
    auto hello = ws.next_json();
    ASSERT_EQ(hello.at("type").as_string(), "hello") << i;
    if (i % 3 == 2) {
      // A client that subscribed after the last publish sees it in the hello.
      int64_t last = hello.at("cursor").as_int64();
      while (last < total) {
        auto w = ws.next_json();
        ASSERT_FALSE(w.empty()) << "ledger client " << i << " after " << last;
        auto cur = w.at("cursor").as_int64();
        EXPECT_GT(cur, last);
        last = cur;
      }
      EXPECT_EQ(last, total);
      continue;
    }
    auto expected = hello.at("seq").as_int64() + 1;
    for (; expected <= total; ++expected) {
      auto ev = ws.next_json();
      ASSERT_FALSE(ev.empty()) << "client " << i << " waiting for " << expected;
      ASSERT_EQ(ev.at("seq").as_int64(), expected) << "client " << i;
    }
    EXPECT_FALSE(ws.next(50ms)) << "client " << i;
  }
}

TEST_F(HubTest, CatchupResumeMidStreamContinuesExactly) {
  hub_config c;
  c.threads = 2;
  c.ring_size = 100000;
  c.queue_max = 1 << 16; // the client reads after the publisher is done
  start(c);
  constexpr int64_t total = 3000;
  json::object sub;
  sub["client_id"] = "resumer";
  int64_t last = 0;
  std::string epoch;
  std::thread publisher;
  {
    ws_client ws{port(), "/ws/catchup"};
    ws.subscribe(sub);
    auto hello = ws.next_json();
    epoch = std::string{hello.at("epoch").as_string()};
    last = hello.at("seq").as_int64();
    publisher = std::thread{[&] {
      for (int64_t i = 0; i < total; ++i)
        hub_->publish("s", "k");
    }};
    while (last < 500) {
      auto ev = ws.next_json();
      ASSERT_FALSE(ev.empty());
      ASSERT_EQ(ev.at("seq").as_int64(), last + 1);
      last = ev.at("seq").as_int64();
    }
  }
  ws_client ws{port(), "/ws/catchup"};
  sub["last_seq"] = last;
  sub["epoch"] = epoch;
  ws.subscribe(sub);
  auto hello = ws.next_json();
  EXPECT_FALSE(hello.at("resync").as_bool());
  publisher.join();
  for (auto expected = last + 1; expected <= total; ++expected) {
    auto ev = ws.next_json();
    ASSERT_FALSE(ev.empty()) << "waiting for " << expected;
    ASSERT_EQ(ev.at("seq").as_int64(), expected);
  }
  EXPECT_FALSE(ws.next(50ms));
}

// A resuming subscriber is owed its whole catch-up replay even when it is
// longer than queue_max; only live frames queued behind it may overflow.
// (CI regression: the replay used to count against queue_max, so the first
// live event after a long resume closed the connection with 1013.)
TEST_F(HubTest, ALongCatchupReplayDoesNotCountAgainstTheSendQueue) {
  hub_config c;
  c.queue_max = 4;
  c.ring_size = 1000;
  c.faults.pad_frames_to = 65536;
  start(c);
  json::object sub;
  sub["client_id"] = "backlog";
  std::string epoch;
  {
    ws_client ws{port(), "/ws/catchup"};
    ws.subscribe(sub);
    epoch = std::string{ws.next_json().at("epoch").as_string()};
  }
  // The first connection must be gone before the backlog is published, or
  // it (still in the fan-out, never reading again) overflows its own queue.
  auto until = std::chrono::steady_clock::now() + 3s;
  while (state().at("connections").at("catchup").to_number<int64_t>() != 0
         && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(5ms);
  ASSERT_EQ(state().at("connections").at("catchup").to_number<int64_t>(), 0);
  // 400 frames of 64 KiB: far more than socket buffers hold.
  constexpr int64_t backlog = 400;
  for (int64_t i = 0; i < backlog; ++i)
    hub_->publish("s", "k");
  ws_client ws{port(), "/ws/catchup"};
  sub["last_seq"] = 0;
  sub["epoch"] = epoch;
  ws.subscribe(sub);
  auto hello = ws.next_json();
  EXPECT_FALSE(hello.at("resync").as_bool());
  // Live events while the replay is still queued: within queue_max.
  for (int i = 0; i < 3; ++i)
    hub_->publish("s", "k");
  for (int64_t expected = 1; expected <= backlog + 3; ++expected) {
    auto ev = ws.next_json();
    ASSERT_FALSE(ev.empty()) << "waiting for " << expected;
    ASSERT_EQ(ev.at("seq").as_int64(), expected);
  }
  EXPECT_EQ(state().at("server").at("overflow_closes").to_number<int64_t>(), 0);
}

// -- fault knobs
// ------------------------------------------------------------------------

TEST_F(HubTest, DropWakesDropsEveryWakeUntilTurnedOff) {
  start();
  ws_client ws{port(), "/ws/ledger"};
  ws.subscribe();
  ws.next_json();
  faults(R"({"drop_wakes":true})");
  publish("s");
  EXPECT_FALSE(ws.next(300ms));
  faults(R"({"drop_wakes":false})");
  publish("s");
  EXPECT_EQ(ws.next_json().at("cursor").as_int64(), 2);
  EXPECT_EQ(state().at("counters").at("wakes_dropped").to_number<int64_t>(), 1);
}

TEST_F(HubTest, DropWakeProbabilityIsSeeded) {
  auto dropped = [&](uint64_t seed) {
    hub_config c;
    c.faults.drop_wake_probability = 0.5;
    c.seed = seed;
    hub h{c};
    h.start();
    ws_client ws{h.port(), "/ws/ledger"};
    ws.subscribe();
    ws.next_json();
    for (int i = 0; i < 200; ++i)
      h.publish("s", "k");
    auto s = json::parse(h.state_json());
    return s.at("counters").at("wakes_dropped").to_number<int64_t>();
  };
  auto a = dropped(5);
  EXPECT_EQ(dropped(5), a);
  EXPECT_GT(a, 60u);
  EXPECT_LT(a, 140u);
}

TEST_F(HubTest, WakeScriptSendsExactlyTheScriptedCursors) {
  start();
  ws_client ws{port(), "/ws/ledger"};
  ws.subscribe();
  ws.next_json();
  for (int i = 1; i <= 5; ++i)
    publish("s");
  wakes_until(ws, 5);
  faults(R"({"wake_script":[9,6,10,6,8,7,9]})");
  for (int i = 6; i <= 10; ++i)
    publish("s");
  std::vector<int64_t> got;
  for (int i = 0; i < 7; ++i)
    got.push_back(ws.next_json().at("cursor").as_int64());
  EXPECT_EQ(got, (std::vector<int64_t>{9, 6, 10, 6, 8, 7, 9}));
  EXPECT_FALSE(ws.next(200ms));
  publish("s");
  EXPECT_EQ(ws.next_json().at("cursor").as_int64(), 11) << "disarmed";
}

TEST_F(HubTest, AdminWakesAreSentAsIs) {
  start();
  ws_client ws{port(), "/ws/ledger"};
  ws.subscribe();
  ws.next_json();
  auto r = http().request("POST", "/admin/wakes",
                          json::parse(R"({"cursors":[3,1,3]})"));
  EXPECT_EQ(r.at("connections").as_int64(), 1);
  EXPECT_EQ(ws.next_json().at("cursor").as_int64(), 3);
  EXPECT_EQ(ws.next_json().at("cursor").as_int64(), 1);
  EXPECT_EQ(ws.next_json().at("cursor").as_int64(), 3);
}

TEST_F(HubTest, VisibilityLagAnnouncesACursorReplayDoesNotShowYet) {
  start();
  ws_client ws{port(), "/ws/ledger"};
  ws.subscribe();
  ws.next_json();
  faults(R"({"visibility_lag_polls":2})");
  publish("s");
  EXPECT_EQ(ws.next_json().at("cursor").as_int64(), 1);
  auto p1 = replay(0);
  EXPECT_TRUE(p1.at("events").as_array().empty());
  EXPECT_EQ(p1.at("cursor").as_int64(), 0);
  EXPECT_EQ(http().request("GET", "/v1/cursor").at("cursor").as_int64(), 0);
  EXPECT_TRUE(replay(0).at("events").as_array().empty());
  EXPECT_EQ(ids(replay(0)), (std::vector<int64_t>{1}));
}

TEST_F(HubTest, NonObjectPagesAnswerABareArray) {
  start();
  publish("s");
  faults(R"({"non_object_pages":1})");
  auto bare = replay(0);
  ASSERT_TRUE(bare.is_array());
  EXPECT_EQ(bare.as_array().size(), 1u);
  EXPECT_EQ(bare.as_array()[0].at("id").as_int64(), 1);
  EXPECT_TRUE(replay(0).is_object());
}

TEST_F(HubTest, AcceptThenCloseAcceptsTheUpgradeAndClosesAtOnce) {
  start();
  faults(R"({"accept_then_close":1})");
  {
    ws_client ws{port(), "/ws/ledger"};
    ASSERT_TRUE(ws.wait_closed());
    EXPECT_EQ(ws.close_code(), 1001);
  }
  ws_client ok{port(), "/ws/ledger"};
  ok.subscribe();
  EXPECT_EQ(ok.next_json().at("type").as_string(), "hello");
  EXPECT_EQ(state().at("server").at("accept_then_close").to_number<int64_t>(),
            1);
}

TEST_F(HubTest, GoSilentStopsReadingNeverAnswersPingsAndKeepsTcpOpen) {
  // feeds.md case 19: handshake, one message (the hello), then a blackhole.
  start();
  faults(R"({"go_silent":1})");
  raw_ws silent{port(), "/ws/ledger"};
  EXPECT_NE(silent.status_line().find(" 101 "), std::string::npos);
  ASSERT_TRUE(silent.subscribe());
  auto hello = silent.read_message();
  ASSERT_TRUE(hello);
  EXPECT_NE(hello->find("\"hello\""), std::string::npos);
  ASSERT_TRUE(silent.send_frame(0x9, "are you there"));
  publish("s");
  EXPECT_FALSE(silent.read_frame(700ms)) << "no pong, no wake";
  EXPECT_FALSE(silent.eof()) << "TCP stays open";
  // The next connection is healthy again: Beast answers the ping.
  raw_ws healthy{port(), "/ws/ledger"};
  ASSERT_TRUE(healthy.subscribe());
  ASSERT_TRUE(healthy.read_message());
  ASSERT_TRUE(healthy.send_frame(0x9, "ping!"));
  auto pong = healthy.read_frame();
  ASSERT_TRUE(pong);
  EXPECT_EQ(pong->opcode, 0xA);
  EXPECT_EQ(pong->payload, "ping!");
  auto s = state();
  EXPECT_EQ(s.at("server").at("silenced").to_number<int64_t>(), 1);
  EXPECT_EQ(s.at("connections").at("ledger").to_number<int64_t>(), 1);
  EXPECT_EQ(s.at("connections").at("other").to_number<int64_t>(), 1);
}

TEST_F(HubTest, SilenceNowSilencesOpenConnections) {
  start();
  raw_ws ws{port(), "/ws/catchup"};
  ASSERT_TRUE(ws.subscribe());
  ASSERT_TRUE(ws.read_message());
  faults(R"({"silence_now":true})");
  ASSERT_TRUE(ws.send_frame(0x9, "x"));
  publish("s");
  EXPECT_FALSE(ws.read_frame(500ms));
  EXPECT_FALSE(ws.eof());
}

TEST_F(HubTest, HubStopClosesSilentConnections) {
  start();
  faults(R"({"go_silent":-1})");
  raw_ws ws{port(), "/ws/ledger"};
  ASSERT_TRUE(ws.subscribe());
  ASSERT_TRUE(ws.read_message());
  auto t0 = std::chrono::steady_clock::now();
  hub_->stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s); // loaded ASan machine
  EXPECT_FALSE(ws.read_frame(1s));
  EXPECT_TRUE(ws.eof());
}

TEST_F(HubTest, OversizedFrameAnnouncesMoreThanTheCapAndSendsNoPayload) {
  start();
  faults(R"({"oversized_frame":1})");
  raw_ws raw{port(), "/ws/ledger"};
  ASSERT_TRUE(raw.subscribe());
  ASSERT_TRUE(raw.read_message());
  auto header = raw.read_exact(10, 2s);
  ASSERT_TRUE(header);
  // 8 MiB + 1 = 0x800001.
  EXPECT_EQ(hex(*header), "82 7F 00 00 00 00 00 80 00 01");
  publish("s");
  EXPECT_FALSE(raw.read_exact(1, 300ms)) << "nothing after the header";
  EXPECT_EQ(state().at("server").at("oversized_sent").to_number<int64_t>(), 1);
}

TEST_F(HubTest, OversizedFrameIsRefusedByABeastClientBeforeThePayload) {
  start();
  faults(R"({"oversized_frame":1})");
  ws_client ws{port(), "/ws/ledger", 8u * 1024u * 1024u};
  ws.subscribe();
  EXPECT_EQ(ws.next_json().at("type").as_string(), "hello");
  ASSERT_TRUE(ws.wait_closed());
  EXPECT_EQ(ws.error(), websocket::error::message_too_big);
}

TEST_F(HubTest, Case21cDeclaresAnEightExabyteFrame) {
  start();
  faults(
    R"({"oversized_frame":1,"oversized_frame_bytes":9223372036854775807})");
  raw_ws raw{port(), "/ws/ledger"};
  ASSERT_TRUE(raw.subscribe());
  ASSERT_TRUE(raw.read_message());
  auto header = raw.read_exact(10, 2s);
  ASSERT_TRUE(header);
  EXPECT_EQ(hex(*header), "82 7F 7F FF FF FF FF FF FF FF");
}

TEST_F(HubTest, FragmentFramesSplitsEveryMessageIntoContinuations) {
  start();
  faults(R"({"fragment_frames":1,"fragment_bytes":16})");
  raw_ws raw{port(), "/ws/ledger"};
  ASSERT_TRUE(raw.subscribe());
  std::string hello;
  std::vector<outbound::testing::server_frame> frames;
  for (;;) {
    auto f = raw.read_frame();
    ASSERT_TRUE(f);
    frames.push_back(*f);
    hello += f->payload;
    if (f->fin)
      break;
  }
  ASSERT_GE(frames.size(), 3u);
  EXPECT_EQ(frames[0].opcode, 0x1);
  EXPECT_FALSE(frames[0].fin);
  for (std::size_t i = 1; i < frames.size(); ++i)
    EXPECT_EQ(frames[i].opcode, 0x0) << i;
  for (std::size_t i = 0; i + 1 < frames.size(); ++i)
    EXPECT_EQ(frames[i].length, 16u) << i;
  EXPECT_EQ(json::parse(hello).at("type").as_string(), "hello");
  // A Beast client reassembles them into the same messages.
  faults(R"({"fragment_frames":1,"fragment_bytes":5})");
  ws_client ws{port(), "/ws/ledger"};
  ws.subscribe();
  EXPECT_EQ(ws.next_json().at("type").as_string(), "hello");
  publish("s");
  EXPECT_EQ(json::serialize(ws.next_json()), R"({"type":"wake","cursor":1})");
}

TEST_F(HubTest, Case21aAnEightyKiBMessageInSixteenKiBFragments) {
  start();
  faults(R"({"fragment_frames":1,"fragment_bytes":16384,)"
         R"("pad_frames_to":81920})");
  raw_ws raw{port(), "/ws/ledger"};
  ASSERT_TRUE(raw.subscribe());
  ASSERT_TRUE(raw.read_message()); // the hello: one frame, not padded
  publish("s");
  std::vector<std::string> headers;
  std::string msg;
  for (int i = 0; i < 5; ++i) {
    auto f = raw.read_frame();
    ASSERT_TRUE(f);
    std::string h;
    h += static_cast<char>((f->fin ? 0x80 : 0) | f->opcode);
    headers.push_back(hex(h) + " " + std::to_string(f->length));
    msg += f->payload;
  }
  EXPECT_EQ(headers,
            (std::vector<std::string>{"01 16384", "00 16384", "00 16384",
                                      "00 16384", "80 16384"}));
  EXPECT_EQ(msg.size(), 81920u);
  auto wake = json::parse(msg);
  EXPECT_EQ(wake.at("type").as_string(), "wake");
  EXPECT_EQ(wake.at("cursor").as_int64(), 1);
}

TEST_F(HubTest, Case21bEmptyContinuationsAfterTheFirstFragment) {
  start();
  faults(R"({"fragment_frames":1,"fragment_bytes":1,)"
         R"("empty_continuations":100000})");
  raw_ws raw{port(), "/ws/ledger"};
  ASSERT_TRUE(raw.subscribe());
  auto first = raw.read_frame();
  ASSERT_TRUE(first);
  EXPECT_EQ(first->opcode, 0x1);
  EXPECT_FALSE(first->fin);
  EXPECT_EQ(first->payload, "{");
  int empties = 0;
  for (;;) {
    auto f = raw.read_frame(5s);
    ASSERT_TRUE(f);
    if (f->length != 0) {
      EXPECT_EQ(f->opcode, 0x0);
      EXPECT_EQ(f->payload, "\"");
      break;
    }
    EXPECT_EQ(f->opcode, 0x0);
    EXPECT_FALSE(f->fin);
    ++empties;
  }
  EXPECT_EQ(empties, 100000);
}

TEST_F(HubTest, NonJsonFramesReplaceWakesAndPrecedeEvents) {
  start();
  faults(R"({"non_json_frames":2})");
  ws_client ledger{port(), "/ws/ledger"};
  ledger.subscribe();
  EXPECT_EQ(ledger.next_json().at("type").as_string(), "hello");
  ws_client catchup{port(), "/ws/catchup"};
  catchup.subscribe();
  EXPECT_EQ(catchup.next_json().at("type").as_string(), "hello");
  publish("s");
  EXPECT_EQ(ledger.next(), std::optional<std::string>{"wake 1"});
  EXPECT_EQ(catchup.next(), std::optional<std::string>{"not json"});
  EXPECT_EQ(catchup.next_json().at("seq").as_int64(), 1);
}

TEST_F(HubTest, NoHelloSkipsTheHelloOnly) {
  start();
  faults(R"({"no_hello":1})");
  ws_client ws{port(), "/ws/ledger"};
  ws.subscribe();
  EXPECT_FALSE(ws.next(200ms));
  publish("s");
  EXPECT_EQ(json::serialize(ws.next_json()), R"({"type":"wake","cursor":1})");
}

TEST_F(HubTest, PadFramesToPadsWakesAndEvents) {
  start();
  faults(R"({"pad_frames_to":300})");
  ws_client ledger{port(), "/ws/ledger"};
  ledger.subscribe();
  ledger.next();
  ws_client eph{port(), "/ws/ephemeral"};
  eph.subscribe();
  eph.next();
  publish("s");
  auto w = ledger.next();
  ASSERT_TRUE(w);
  EXPECT_EQ(w->size(), 300u);
  EXPECT_EQ(json::parse(*w).at("cursor").as_int64(), 1);
  auto e = eph.next();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->size(), 300u);
  EXPECT_EQ(json::parse(*e).at("seq").as_int64(), 1);
}

TEST_F(HubTest, AFullSendQueueClosesWith1013) {
  hub_config c;
  c.queue_max = 8;
  c.faults.pad_frames_to = 65536;
  start(c);
  raw_ws raw{port(), "/ws/ephemeral"};
  ASSERT_TRUE(raw.subscribe());
  ASSERT_TRUE(raw.read_message());
  // The client reads nothing: socket buffers fill, then the queue.
  for (int i = 0; i < 2000; ++i)
    hub_->publish("s", "k");
  int events = 0;
  std::optional<outbound::testing::server_frame> close;
  for (;;) {
    auto f = raw.read_frame(5s);
    ASSERT_TRUE(f) << "after " << events << " events";
    if (f->opcode == 0x8) {
      close = f;
      break;
    }
    ++events;
  }
  ASSERT_TRUE(close);
  ASSERT_GE(close->payload.size(), 2u);
  auto code = (static_cast<unsigned char>(close->payload[0]) << 8)
              | static_cast<unsigned char>(close->payload[1]);
  EXPECT_EQ(code, 1013);
  EXPECT_LT(events, 2000);
  EXPECT_EQ(state().at("server").at("overflow_closes").to_number<int64_t>(), 1);
}

TEST_F(HubTest, RestartEveryRestartsTheCatchupTierOnATimer) {
  hub_config c;
  c.faults.restart_every = 0.1;
  start(c);
  auto first = hub_->epoch();
  auto deadline = std::chrono::steady_clock::now() + 3s;
  while (hub_->epoch() == first && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  EXPECT_NE(hub_->epoch(), first);
  faults(R"({"restart_every":0})");
  auto restarts = state().at("counters").at("restarts").to_number<int64_t>();
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(state().at("counters").at("restarts").to_number<int64_t>(),
            restarts);
}

// -- dropped connections (POST /admin/drop, drop_now, drop_every)
// ------------------

/// Waits (bounded) until /admin/state's connections.`key` equals `n`.
static bool wait_connections(const std::function<json::object()>& state,
                             const std::string& key, int64_t n,
                             std::chrono::milliseconds timeout = 3s) {
  auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto s = state();
    if (s.at("connections").at(key).to_number<int64_t>() == n)
      return true;
    if (std::chrono::steady_clock::now() > until)
      return false;
    std::this_thread::sleep_for(10ms);
  }
}

TEST_F(HubTest, DropClosesEveryConnectionOfATierWithoutACloseFrame) {
  start();
  raw_ws c1{port(), "/ws/catchup"};
  raw_ws c2{port(), "/ws/catchup"};
  raw_ws l1{port(), "/ws/ledger"};
  for (auto* ws : {&c1, &c2, &l1}) {
    ASSERT_TRUE(ws->subscribe());
    ASSERT_TRUE(ws->read_message());
  }
  auto r = http().request_raw("POST", "/admin/drop",
                              json::parse(R"({"tier":"catchup"})"));
  ASSERT_EQ(r.status, 200) << json::serialize(r.body);
  EXPECT_EQ(r.body.at("dropped").as_int64(), 2);
  for (auto* ws : {&c1, &c2}) {
    // TCP ends with no frame at all: no close frame, no event.
    EXPECT_FALSE(ws->read_frame(3s));
    EXPECT_TRUE(ws->eof());
  }
  // The other tier is untouched and still fed.
  publish("s");
  auto wake = l1.read_message();
  ASSERT_TRUE(wake);
  EXPECT_EQ(json::parse(*wake).at("cursor").as_int64(), 1);
  auto s = state();
  EXPECT_EQ(s.at("server").at("drops").to_number<int64_t>(), 1);
  EXPECT_EQ(s.at("server").at("dropped").to_number<int64_t>(), 2);
  EXPECT_EQ(s.at("connections").at("catchup").to_number<int64_t>(), 0);
  EXPECT_EQ(s.at("connections").at("ledger").to_number<int64_t>(), 1);
  EXPECT_TRUE(wait_connections([this] { return state(); }, "other", 0));
}

TEST_F(HubTest, DropAllAlsoDropsSilentAndUnsubscribedConnections) {
  start();
  faults(R"({"go_silent":1})");
  raw_ws silent{port(), "/ws/ledger"};
  ASSERT_TRUE(silent.subscribe());
  ASSERT_TRUE(silent.read_message());
  raw_ws ledger{port(), "/ws/ledger"};
  ASSERT_TRUE(ledger.subscribe());
  ASSERT_TRUE(ledger.read_message());
  raw_ws fresh{port(), "/ws/ephemeral"}; // upgraded, never subscribes
  ASSERT_TRUE(wait_connections([this] { return state(); }, "other", 2));
  faults(R"({"drop_now":"all"})");
  for (auto* ws : {&silent, &ledger, &fresh}) {
    EXPECT_FALSE(ws->read_frame(3s));
    EXPECT_TRUE(ws->eof());
  }
  EXPECT_EQ(state().at("server").at("dropped").to_number<int64_t>(), 3);
  EXPECT_TRUE(wait_connections([this] { return state(); }, "other", 0));
  // The knob is an action, not a setting: new connections stay up.
  raw_ws next{port(), "/ws/ledger"};
  ASSERT_TRUE(next.subscribe());
  ASSERT_TRUE(next.read_message());
  EXPECT_FALSE(next.read_frame(300ms));
  EXPECT_FALSE(next.eof());
  // An empty body drops every connection too; the in-process call as well.
  auto r = http().request_raw("POST", "/admin/drop");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.body.at("dropped").as_int64(), 1);
  EXPECT_FALSE(next.read_frame(3s));
  EXPECT_TRUE(next.eof());
  EXPECT_EQ(hub_->drop_connections("ephemeral"), 0u);
  EXPECT_EQ(state().at("server").at("drops").to_number<int64_t>(), 3);
}

TEST_F(HubTest, CatchupResumesWithoutResyncAfterADrop) {
  start();
  json::object sub;
  sub["client_id"] = "dropped-1";
  auto epoch = hub_->epoch();
  {
    ws_client ws{port(), "/ws/catchup"};
    ws.subscribe(sub);
    EXPECT_TRUE(ws.next_json().at("resync").as_bool());
    publish("a/1");
    publish("a/2");
    EXPECT_EQ(ws.next_json().at("seq").as_int64(), 1);
    EXPECT_EQ(ws.next_json().at("seq").as_int64(), 2);
    EXPECT_EQ(hub_->drop_connections("catchup"), 1u);
    ASSERT_TRUE(ws.wait_closed());
    EXPECT_EQ(ws.close_code(), 0) << "no close frame";
    EXPECT_FALSE(ws.next(100ms));
  }
  publish("a/3");
  publish("a/4");
  EXPECT_EQ(hub_->epoch(), epoch) << "a drop is not a restart";
  ws_client ws{port(), "/ws/catchup"};
  sub["last_seq"] = 2;
  sub["epoch"] = epoch;
  ws.subscribe(sub);
  auto hello = ws.next_json();
  EXPECT_FALSE(hello.at("resync").as_bool());
  EXPECT_EQ(hello.at("epoch").as_string(), epoch);
  EXPECT_EQ(ws.next_json().at("seq").as_int64(), 3);
  EXPECT_EQ(ws.next_json().at("seq").as_int64(), 4);
  EXPECT_FALSE(ws.next(200ms));
}

TEST_F(HubTest, ADropDoesNotWaitForAWriteTheClientNeverReads) {
  hub_config c;
  c.faults.pad_frames_to = 65536;
  start(c);
  raw_ws raw{port(), "/ws/ephemeral"};
  ASSERT_TRUE(raw.subscribe());
  ASSERT_TRUE(raw.read_message());
  // The client reads nothing: the socket buffers fill and a write stays in
  // flight on the hub's side.
  for (int i = 0; i < 400; ++i)
    hub_->publish("s", "k");
  ASSERT_TRUE(wait_connections([this] { return state(); }, "ephemeral", 1));
  EXPECT_EQ(hub_->drop_connections("ephemeral"), 1u);
  // The session is gone at once, not after the client drained the write.
  EXPECT_TRUE(wait_connections([this] { return state(); }, "other", 0));
  EXPECT_EQ(state().at("server").at("overflow_closes").to_number<int64_t>(), 0);
  // What was in the socket buffers arrives, then EOF without a close frame.
  int frames = 0;
  for (;;) {
    auto f = raw.read_frame(3s);
    if (!f)
      break;
    EXPECT_NE(f->opcode, 0x8) << "a close frame after " << frames;
    ++frames;
  }
  EXPECT_TRUE(raw.eof());
  EXPECT_LT(frames, 400);
}

TEST_F(HubTest, DropEveryDropsOnATimerUntilTurnedOff) {
  start();
  faults(R"({"drop_every":0.1,"drop_tier":"ledger"})");
  raw_ws ledger{port(), "/ws/ledger"};
  ASSERT_TRUE(ledger.subscribe());
  ASSERT_TRUE(ledger.read_message());
  raw_ws catchup{port(), "/ws/catchup"};
  ASSERT_TRUE(catchup.subscribe());
  ASSERT_TRUE(catchup.read_message());
  EXPECT_FALSE(ledger.read_frame(3s));
  EXPECT_TRUE(ledger.eof());
  EXPECT_FALSE(catchup.read_frame(200ms));
  EXPECT_FALSE(catchup.eof()) << "only the ledger tier drops";
  faults(R"({"drop_every":0})");
  auto drops = state().at("server").at("drops").to_number<int64_t>();
  EXPECT_GE(drops, 1);
  raw_ws again{port(), "/ws/ledger"};
  ASSERT_TRUE(again.subscribe());
  ASSERT_TRUE(again.read_message());
  EXPECT_FALSE(again.read_frame(400ms));
  EXPECT_FALSE(again.eof());
  EXPECT_EQ(state().at("server").at("drops").to_number<int64_t>(), drops);
}

TEST_F(HubTest, DropsRacingSubscribesLeaveNoDeadSessionInTheFanOut) {
  // A subscribe read that completes just before a drop tears the session
  // down must not register it afterwards.
  hub_config c;
  c.threads = 2;
  start(c);
  for (int i = 0; i < 300; ++i) {
    raw_ws ws{port(), i % 2 ? "/ws/catchup" : "/ws/ledger"};
    ASSERT_TRUE(ws.subscribe());
    if (i % 3 == 0)
      std::this_thread::sleep_for(std::chrono::microseconds{50 * (i % 7)});
    hub_->drop_connections("all");
  }
  for (auto tier : {"ledger", "catchup", "other"})
    EXPECT_TRUE(wait_connections([this] { return state(); }, tier, 0))
      << tier << ": " << json::serialize(state().at("connections"));
}

TEST_F(HubTest, DropKnobsRejectBadValues) {
  start();
  auto bad = [&](const std::string& path, const std::string& body) {
    auto r = http().request_raw("POST", path, json::parse(body));
    EXPECT_EQ(r.status, 400) << path << " " << body;
    return std::string{r.body.at("detail").as_string()};
  };
  EXPECT_NE(bad("/admin/drop", R"({"tier":"nope"})").find("tier"),
            std::string::npos);
  bad("/admin/drop", R"({"tier":1})");
  bad("/admin/drop", R"([1])");
  EXPECT_EQ(bad("/admin/faults", R"({"drop_now":"feed"})"),
            R"('drop_now' must be "ledger", "catchup", "ephemeral" or "all")");
  EXPECT_EQ(bad("/admin/faults", R"({"drop_tier":"x"})"),
            R"('drop_tier' must be "ledger", "catchup", "ephemeral" or "all")");
  EXPECT_EQ(bad("/admin/faults", R"({"drop_every":-1})"),
            "'drop_every' must be a number of seconds >= 0");
  EXPECT_EQ(http().request_raw("GET", "/admin/drop").status, 405);
  EXPECT_THROW(hub_->drop_connections("feed"), std::invalid_argument);
  auto f = json::parse(hub_->state_json());
  EXPECT_EQ(f.at("server").at("drops").to_number<int64_t>(), 0);
  hub_config c;
  c.faults.drop_tier = "everything";
  try {
    hub h{c};
    ADD_FAILURE() << "no config_error";
  } catch (const config_error& e) {
    EXPECT_NE(std::string{e.what()}.find("faults.drop_tier"), std::string::npos)
      << e.what();
  }
  c.faults.drop_tier = "all";
  c.faults.drop_every = -0.5;
  EXPECT_THROW(hub{c}, config_error);
}

TEST_F(HubTest, ItsSocketsAreCloseOnExec) {
  // A process that runs a hub and spawns a child (the CLI tests do) must
  // not leak the listener into it: the child would keep the port accepting
  // after stop(), and clients would hang instead of being refused.
  start();
  raw_ws ws{port(), "/ws/ledger"}; // an accepted connection exists too
  ASSERT_TRUE(ws.subscribe());
  ASSERT_TRUE(ws.read_message());
  int hub_sockets = 0;
  for (int fd = 0; fd < 4096; ++fd) {
    sockaddr_in a{};
    socklen_t len = sizeof a;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0
        || a.sin_family != AF_INET || ntohs(a.sin_port) != port())
      continue;
    ++hub_sockets;
    EXPECT_TRUE(::fcntl(fd, F_GETFD) & FD_CLOEXEC) << "fd " << fd;
  }
  EXPECT_GE(hub_sockets, 2) << "the listener and the accepted connection";
}

TEST_F(HubTest, InProcessApiMatchesTheEndpoints) {
  start();
  auto a = hub_->publish("s", "k", R"({"x":1})", "dk");
  auto b = hub_->publish("s", "k", "{}", "dk");
  EXPECT_EQ(a.id, 1);
  EXPECT_FALSE(a.duplicate);
  EXPECT_TRUE(b.duplicate);
  EXPECT_EQ(b.json, a.json);
  EXPECT_THROW(hub_->publish("", "k"), std::invalid_argument);
  EXPECT_THROW(hub_->set_faults(R"({"nope":1})"), std::invalid_argument);
  auto before = hub_->epoch();
  EXPECT_NE(hub_->restart(), before);
  EXPECT_EQ(json::parse(hub_->state_json()).at("ledger").at("head").as_int64(),
            1);
}

// -- `outbound hub` as a child process
// ------------------------------------------------

TEST(HubCli, PrintsTheListeningLineFirstAndExitsZeroOnSigterm) {
  // Whatever fails below, the child does not outlive the test.
  running_child hub{outbound_argv({"hub", "--port", "0", "--seed", "7"})};
  auto line = hub.first_line(30s);
  ASSERT_FALSE(line.empty()) << hub.err();
  auto v = json::parse(line);
  auto listening = std::string{v.at("listening").as_string()};
  EXPECT_EQ(listening.rfind("127.0.0.1:", 0), 0u) << line;
  {
    caf::actor_system_config cfg;
    cfg.add_message_types<caf::id_block::outbound>();
    caf::actor_system sys{cfg};
    client_config cc;
    cc.base_url = "http://" + listening;
    cc.retry.max_attempts = 1;
    blocking_client client{sys, cc};
    json::object body;
    body["subject"] = "cli/1";
    EXPECT_EQ(client.request("POST", "/v1/events", json::value(body))
                .at("id")
                .as_int64(),
              1);
    EXPECT_EQ(client.request("GET", "/v1/cursor").at("cursor").as_int64(), 1);
  }
  hub.signal(SIGTERM);
  EXPECT_EQ(hub.wait_exit(30s), std::optional<int>{0}) << hub.err();
}

TEST(HubCli, DropFlagsSetTheDropKnobs) {
  // Whatever fails below, the child does not outlive the test.
  running_child hub{outbound_argv(
    {"hub", "--port", "0", "--drop-every", "0.25", "--drop-tier", "catchup"})};
  auto line = hub.first_line(30s);
  ASSERT_FALSE(line.empty()) << hub.err();
  auto listening = std::string{json::parse(line).at("listening").as_string()};
  {
    caf::actor_system_config cfg;
    cfg.add_message_types<caf::id_block::outbound>();
    caf::actor_system sys{cfg};
    client_config cc;
    cc.base_url = "http://" + listening;
    cc.retry.max_attempts = 1;
    blocking_client client{sys, cc};
    auto f = client.request("GET", "/admin/state").at("faults");
    EXPECT_EQ(f.at("drop_every").to_number<double>(), 0.25);
    EXPECT_EQ(f.at("drop_tier").as_string(), "catchup");
  }
  hub.signal(SIGTERM);
  EXPECT_EQ(hub.wait_exit(30s), std::optional<int>{0}) << hub.err();
}

TEST(HubCli, ABadHostIsAConfigErrorWithExitTwo) {
  auto r = run_child(outbound_argv({"hub", "--host", "localhost"}), 30s);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 2);
  const auto& text = r.err;
  auto v = json::parse(text);
  EXPECT_EQ(v.at("error").as_string(), "config_error");
  EXPECT_NE(std::string{v.at("detail").as_string()}.find("host"),
            std::string::npos)
    << text;
}

// -- publish limits: anything stored can be replayed to a default client
// --------

namespace {

call_request raw_publish(std::string body) {
  call_request c;
  c.method = "POST";
  c.path = "/v1/events";
  c.body = std::move(body);
  c.has_body = true;
  c.headers.emplace_back("content-type", "application/json");
  return c;
}

std::string nested_metadata(int depth) {
  std::string md;
  for (int i = 1; i < depth; ++i)
    md += R"({"n":)";
  md += "{}";
  md += std::string(static_cast<std::size_t>(depth - 1), '}');
  return md;
}

} // namespace

TEST_F(HubTest, APublishWithAnOutOfRangeNumberIsAnswered400NamingTheField) {
  start();
  for (const std::string& number :
       {std::string{"1e400"}, std::string(5000, '9')}) {
    auto o = http().call(
      raw_publish(R"({"subject":"s","metadata":{"x":[1,)" + number + "]}}"));
    EXPECT_EQ(o.status, 400) << failure_of(o).message();
    EXPECT_EQ(failure_of(o).detail,
              "metadata.x[1]: number out of range (IEEE 754 binary64)");
  }
  // A nonzero number that underflows would be stored, and replayed, as 0.
  for (const std::string& number :
       {std::string{"1e-400"}, std::string{"-2e-324"}}) {
    auto o = http().call(
      raw_publish(R"({"subject":"s","metadata":{"x":)" + number + "}}"));
    EXPECT_EQ(o.status, 400) << failure_of(o).message();
    EXPECT_EQ(failure_of(o).detail,
              "metadata.x: number out of range (underflows "
              "IEEE 754 binary64 to zero)");
  }
  // Subnormals binary64 holds and literal zeros are stored as sent.
  auto ok = http().call(
    raw_publish(R"({"subject":"s","metadata":{"x":[5e-324,0e-400]}})"));
  EXPECT_EQ(ok.status / 100, 2) << failure_of(ok).message();
  // Only the last publish was stored; the hub still answers.
  auto events = replay(0).at("events").as_array();
  ASSERT_EQ(events.size(), 1u);
  auto x = events[0].at("metadata").at("x").as_array();
  EXPECT_EQ(x[0].as_double(), 0x0.0000000000001p-1022);
  EXPECT_EQ(x[1].as_double(), 0.0);
}

TEST_F(HubTest, APublishWithAnInexactIntegerIsAnswered400NamingTheField) {
  // Its replay would carry 1.2345678901234568E29, which a default client
  // cannot tell from the ID that was sent.
  start();
  auto o = http().call(raw_publish(
    R"({"subject":"s","metadata":{"ids":[1,123456789012345678901234567890]}})"));
  EXPECT_EQ(o.status, 400) << failure_of(o).message();
  EXPECT_EQ(failure_of(o).detail,
            "metadata.ids[1]: integer not exact in IEEE 754 "
            "binary64 (send it as a string)");
  EXPECT_EQ(replay(0).at("events").as_array().size(), 0u);
}

TEST_F(HubTest, PublishRejectsWhatReplayCouldNotServeWith400AndAReason) {
  hub_config c;
  c.subject_max_bytes = 16;
  start(c);
  auto deep = http().call(
    raw_publish(R"({"subject":"s","metadata":)" + nested_metadata(33) + "}"));
  EXPECT_EQ(deep.status, 400);
  EXPECT_EQ(failure_of(deep).detail, "metadata nests deeper than 32 levels");
  auto long_subject = http().call(
    raw_publish("{\"subject\":\"" + std::string(17, 's') + "\"}"));
  EXPECT_EQ(long_subject.status, 400);
  EXPECT_EQ(failure_of(long_subject).detail, "subject exceeds 16 bytes");
  auto big = http().call(raw_publish("{\"subject\":\"s\",\"kind\":\""
                                     + std::string(6000, 'k') + "\"}"));
  EXPECT_EQ(big.status, 400);
  EXPECT_EQ(failure_of(big).detail, "event exceeds 5120 bytes");
}

TEST_F(HubTest, TheDeepestAcceptedMetadataReplaysToADefaultClient) {
  start();
  auto ok = http().call(
    raw_publish(R"({"subject":"s","metadata":)" + nested_metadata(32) + "}"));
  ASSERT_TRUE(ok.ok()) << failure_of(ok).message();
  publish("after");
  auto page = replay(0); // a default client: depth 64
  ASSERT_EQ(ids(page), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(json_depth(page), 35u); // page, events, event + 32
}

TEST_F(HubTest, PublishedDoublesReplayExactly) {
  start();
  auto o = http().call(
    raw_publish(R"({"subject":"s","metadata":{"t":1.7961554897535605E9}})"));
  ASSERT_TRUE(o.ok()) << failure_of(o).message();
  auto page = replay(0);
  EXPECT_EQ(json::serialize(page.at("events").at(0).at("metadata")),
            R"({"t":1.7961554897535605E9})");
}

TEST(HubConfigLimits, LimitsThatReplayCouldNotServeAreConfigErrors) {
  auto field = [](hub_config c) {
    try {
      c.validate();
    } catch (const config_error& e) {
      return e.field();
    }
    return std::string{"<valid>"};
  };
  EXPECT_EQ(field({}), "<valid>");
  hub_config deep;
  deep.metadata_max_depth = 62; // + 3 > 64
  EXPECT_EQ(field(deep), "metadata_max_depth");
  hub_config subject;
  subject.subject_max_bytes = 0;
  EXPECT_EQ(field(subject), "subject_max_bytes");
  hub_config page;
  page.replay_limit = 2000; // 2000 * 5 KiB > 5 MiB
  EXPECT_EQ(field(page), "event_max_bytes");
}
