// `outbound watch` as a child process (apps/watch_cmd.hpp): it ends
// by itself after --duration S, cleanly on SIGINT and SIGTERM (exit 0, the
// summary line on stderr — apps/watch_cmd.cpp, README "Exit codes: 0 ok, 2
// usage/config_error"), and follows a hub behind a TLS reverse proxy (a real
// nginx with the test CA, WebSocket upgrade proxied). The hub runs
// in-process on 127.0.0.1; stdout and stderr go to files the test reads
// while the child runs.

#include "tests/support/nginx_fixture.hpp"
#include "tests/support/scripted_server.hpp"
#include "tests/support/test_certs.hpp"

#include "hub/hub.hpp"
#include "protocol/json_parse.hpp"
#include "tests/support/child_process.hpp"

#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

using namespace outbound;
using namespace outbound::testing;
using namespace std::chrono_literals;

namespace json = boost::json;

namespace {

/// The CLI as a running child (tests/support/child_process.hpp).
struct cli_child : running_child {
  explicit cli_child(std::vector<std::string> args)
    : running_child{outbound_argv(std::move(args))} {
  }
};

/// The single summary line of stderr as an object (fails the test if
/// stderr is not exactly one JSON object line).
json::object summary_of(const std::string& err) {
  // Failure lines (one per failure, as they happen) come first; the
  // summary is the last line.
  auto lines = lines_of(err);
  EXPECT_GE(lines.size(), 1u) << err;
  if (lines.empty())
    return {};
  boost::system::error_code ec;
  auto v = json::parse(lines.back(), ec);
  EXPECT_FALSE(ec) << lines.back();
  if (ec || !v.is_object())
    return {};
  auto o = v.as_object();
  for (auto key :
       {"cursor", "ledger_epoch", "last_seq", "epoch", "client_id", "mode",
        "events", "resets", "drain_errors", "reconnects", "peer_timeouts"})
    EXPECT_TRUE(o.contains(key)) << "summary without '" << key << "': " << err;
  return o;
}

/// Event ids of the stdout lines, in order (fails on a non-event line).
std::vector<int64_t> event_ids(const std::string& out) {
  std::vector<int64_t> ids;
  for (auto& l : lines_of(out)) {
    auto v = json::parse(l).as_object();
    EXPECT_EQ(v.at("type").as_string(), "event") << l;
    // A ledger line says its model and carries the event's id beside it.
    EXPECT_EQ(v.at("mode").as_string(), "ledger") << l;
    EXPECT_EQ(v.at("id"), v.at("event").at("id")) << l;
    ids.push_back(v.at("event").at("id").as_int64());
  }
  return ids;
}

/// A TCP listener on 127.0.0.1 that never accepts: connections complete in
/// the backlog and then nothing is ever read or written (close-on-exec, so
/// the child does not hold it).
class blackhole_listener {
public:
  blackhole_listener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0
        || ::listen(fd_, 64) != 0
        || ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw std::runtime_error("blackhole_listener: cannot listen");
    port_ = ntohs(a.sin_port);
  }

  ~blackhole_listener() {
    if (fd_ >= 0)
      ::close(fd_);
  }

  blackhole_listener(const blackhole_listener&) = delete;
  blackhole_listener& operator=(const blackhole_listener&) = delete;

  uint16_t port() const {
    return port_;
  }

private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

class WatchCli : public ::testing::Test {
protected:
  void SetUp() override {
    hub_config c;
    c.seed = 42;
    hub_ = std::make_unique<hub>(c);
    hub_->start();
  }

  void TearDown() override {
    hub_.reset();
  }

  void publish(int n) {
    for (int i = 0; i < n; ++i)
      hub_->publish("orders/" + std::to_string(i), "created");
  }

  /// A new hub process on the same port: its ledger (in memory) is gone,
  /// so it is a new incarnation, with a new ledger epoch even for the same
  /// seed.
  void restart_without_the_ledger(hub_faults faults = {}) {
    auto port = hub_->port();
    hub_.reset();
    hub_config c;
    c.seed = 42;
    c.port = port;
    c.faults = std::move(faults);
    hub_ = std::make_unique<hub>(c);
    hub_->start();
  }

  /// A checkpoint: the summary's cursor and ledger epoch after a watch of
  /// the first `n` events of `n` published ones.
  struct checkpoint {
    int64_t cursor = 0;
    std::string ledger_epoch;
  };

  checkpoint checkpoint_after(int n) {
    publish(n);
    cli_child w{{"watch", "--count", std::to_string(n), "--duration", "20",
                 hub_->base_url()}};
    auto code = w.wait_exit(30s);
    checkpoint c;
    EXPECT_TRUE(code && *code == 0) << w.err();
    if (!code || *code != 0)
      return c;
    auto sum = summary_of(w.err());
    EXPECT_EQ(sum.at("cursor").as_int64(), n) << w.err();
    EXPECT_TRUE(sum.at("ledger_epoch").is_string()) << w.err();
    if (sum.at("ledger_epoch").is_string())
      c.ledger_epoch = std::string{sum.at("ledger_epoch").as_string()};
    c.cursor = sum.at("cursor").as_int64();
    return c;
  }

  /// A resumed watch run to its end (`--count` = `events`): the rewind
  /// reset it must print first, the ids of the events after it, and its
  /// stderr (the summary).
  struct rewound_run {
    json::object reset;
    std::vector<int64_t> ids;
    std::string err;
  };

  rewound_run run_rewound(std::vector<std::string> args, std::size_t events) {
    cli_child r{std::move(args)};
    auto code = r.wait_exit(30s);
    rewound_run out;
    out.err = r.err();
    EXPECT_TRUE(code && *code == 0) << r.err();
    auto lines = lines_of(r.out());
    EXPECT_EQ(lines.size(), events + 1) << r.out();
    if (lines.empty())
      return out;
    out.reset = json::parse(lines[0]).as_object();
    EXPECT_EQ(out.reset.at("type").as_string(), "reset") << lines[0];
    EXPECT_EQ(out.reset.at("cause").as_string(), "rewind") << lines[0];
    std::string rest;
    for (std::size_t i = 1; i < lines.size(); ++i)
      rest += lines[i] + "\n";
    out.ids = event_ids(rest);
    return out;
  }

  std::unique_ptr<hub> hub_;
};

} // namespace

TEST_F(WatchCli, DurationEndsItByItselfWithTheSummary) {
  publish(2);
  cli_child w{
    {"watch", "--poll-interval", "0.5", "--duration", "4", hub_->base_url()}};
  ASSERT_TRUE(w.wait_out_lines(2, 10s)) << w.err();
  publish(1);
  // The 4 s start no earlier than the spawn. Published with at least 1.5 s
  // left, event 3 must be delivered live (a wake) before the time is up;
  // published later (a slow start on a loaded machine), the time may run
  // out first, and both outcomes are legal.
  bool time_left = std::chrono::steady_clock::now() - w.started() < 4s - 1500ms;
  w.wait_out_lines(3, 10s);
  auto code = w.wait_exit(15s);
  ASSERT_TRUE(code) << "still running long after --duration";
  EXPECT_EQ(*code, 0) << w.err();
  EXPECT_GE(w.lifetime(), 4000ms);
  EXPECT_LT(w.lifetime(), 15s);
  const std::vector<int64_t> all{1, 2, 3}, first_two{1, 2};
  auto ids = event_ids(w.out());
  if (time_left)
    EXPECT_EQ(ids, all);
  else
    EXPECT_TRUE(ids == all || ids == first_two) << w.out();
  ASSERT_FALSE(ids.empty());
  auto sum = summary_of(w.err());
  EXPECT_EQ(sum.at("events").as_int64(), static_cast<int64_t>(ids.size()));
  EXPECT_EQ(sum.at("cursor").as_int64(), ids.back());
  EXPECT_EQ(sum.at("resets").as_int64(), 0);
  EXPECT_EQ(sum.at("reconnects").as_int64(), 0);
}

// --count ends the run inside a replay page: the events of the page after
// the last printed one are never acknowledged, so the summary's cursor is
// where a resume picks up the first event not printed (a new user found
// the cursor at 11 after one printed event: a resume skipped 2..11).
TEST_F(WatchCli, CountEndsItWithTheCursorAtTheLastPrintedEvent) {
  publish(11);
  cli_child w{{"watch", "--count", "1", "--duration", "20", hub_->base_url()}};
  auto code = w.wait_exit(30s);
  ASSERT_TRUE(code) << w.err();
  EXPECT_EQ(*code, 0) << w.err();
  EXPECT_EQ(event_ids(w.out()), (std::vector<int64_t>{1}));
  auto sum = summary_of(w.err());
  EXPECT_EQ(sum.at("events").as_int64(), 1);
  EXPECT_EQ(sum.at("cursor").as_int64(), 1) << w.err();
  // Resumed there, the rest come, none skipped.
  cli_child r{{"watch", "--cursor", "1", "--count", "10", "--duration", "20",
               hub_->base_url()}};
  code = r.wait_exit(30s);
  ASSERT_TRUE(code) << r.err();
  EXPECT_EQ(*code, 0) << r.err();
  EXPECT_EQ(event_ids(r.out()),
            (std::vector<int64_t>{2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(summary_of(r.err()).at("cursor").as_int64(), 11);
}

// A new user passed the replay endpoint as BASE_URL and got two 404s that
// did not say which path was asked.
TEST_F(WatchCli, A404SaysWhichPathWasAskedAndThatBaseUrlIsTheRoot) {
  cli_child w{{"watch", "--fail-after", "1", "--duration", "20",
               hub_->base_url() + "/v1/events"}};
  auto code = w.wait_exit(30s);
  ASSERT_TRUE(code) << w.err();
  EXPECT_EQ(*code, 4) << w.err();
  EXPECT_NE(w.err().find("(asked /v1/events/v1/events: BASE_URL's path "
                         "followed by --replay-path; BASE_URL is the hub's "
                         "root)"),
            std::string::npos)
    << w.err();
  EXPECT_NE(w.err().find("(asked /v1/events/ws/feed: BASE_URL's path "
                         "followed by --ws-path"),
            std::string::npos)
    << w.err();
}

TEST_F(WatchCli, ModeIsTheHubsOptionAndTheErrorSaysHowToPickATier) {
  for (std::string mode : {"catchup", ""}) {
    cli_child w{{"watch", "--mode", mode, hub_->base_url()}};
    auto code = w.wait_exit(15s);
    ASSERT_TRUE(code);
    EXPECT_EQ(*code, 2) << w.err();
    EXPECT_NE(w.err().find("--ws-path /ws/catchup --replay-path ''"),
              std::string::npos)
      << w.err();
    EXPECT_TRUE(w.out().empty()) << w.out();
  }
}

TEST_F(WatchCli, ACountThatIsNotAWholeNumberIsAUsageError) {
  // CLI11 reads "-1" and numbers past 64 bits into the unsigned count as
  // 2^64 - 1: the run never ended.
  for (std::string bad : {"-1", "18446744073709551616", "+3", "1e3"}) {
    cli_child w{{"watch", "--count", bad, hub_->base_url()}};
    auto code = w.wait_exit(15s);
    ASSERT_TRUE(code) << "--count " << bad << " ran on";
    EXPECT_EQ(*code, 2) << bad << ": " << w.err();
    EXPECT_NE(w.err().find("--count: must be a whole number of events, got '"
                           + bad + "'"),
              std::string::npos)
      << w.err();
  }
}

TEST_F(WatchCli, DurationEndsItEvenWhenNothingArrives) {
  cli_child w{{"watch", "--duration", "0.5", hub_->base_url()}};
  auto code = w.wait_exit(15s);
  ASSERT_TRUE(code);
  EXPECT_EQ(*code, 0) << w.err();
  EXPECT_GE(w.lifetime(), 500ms);
  EXPECT_TRUE(w.out().empty()) << w.out();
  auto sum = summary_of(w.err());
  EXPECT_EQ(sum.at("events").as_int64(), 0);
  EXPECT_EQ(sum.at("cursor").as_int64(), 0);
}

/// Runs `outbound watch` until two events are printed, then sends `sig`:
/// it exits 0 within a few seconds with the summary line.
void expect_clean_exit_on(int sig, hub& h) {
  h.publish("orders/1", "created");
  h.publish("orders/2", "created");
  cli_child w{{"watch", "--poll-interval", "0.5", h.base_url()}};
  ASSERT_TRUE(w.wait_out_lines(2, 10s)) << w.err();
  auto t0 = std::chrono::steady_clock::now();
  w.signal(sig);
  auto code = w.wait_exit(20s);
  ASSERT_TRUE(code) << "still running 20 s after signal " << sig;
  // Generous for a loaded machine under ASan; a watcher that ignored the
  // signal would run forever.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  EXPECT_EQ(*code, 0) << w.err();
  EXPECT_EQ(event_ids(w.out()), (std::vector<int64_t>{1, 2}));
  auto sum = summary_of(w.err());
  EXPECT_EQ(sum.at("events").as_int64(), 2);
  EXPECT_EQ(sum.at("cursor").as_int64(), 2);
}

TEST_F(WatchCli, SigintEndsItCleanlyWithTheSummary) {
  expect_clean_exit_on(SIGINT, *hub_);
}

TEST_F(WatchCli, SigtermEndsItCleanlyWithTheSummary) {
  expect_clean_exit_on(SIGTERM, *hub_);
}

TEST_F(WatchCli, SigtermWhileTheHubIsGoneEndsItCleanly) {
  // The watcher is between reconnect attempts and failing replays.
  auto url = hub_->base_url();
  publish(1);
  cli_child w{{"watch", "--poll-interval", "0.2", url}};
  ASSERT_TRUE(w.wait_out_lines(1, 10s)) << w.err();
  hub_->stop();
  std::this_thread::sleep_for(700ms);
  auto t0 = std::chrono::steady_clock::now();
  w.signal(SIGTERM);
  auto code = w.wait_exit(20s);
  ASSERT_TRUE(code) << "still running 20 s after SIGTERM";
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s); // loaded machine
  EXPECT_EQ(*code, 0) << w.err();
  auto sum = summary_of(w.err());
  EXPECT_EQ(sum.at("events").as_int64(), 1);
  EXPECT_EQ(sum.at("cursor").as_int64(), 1);
}

TEST_F(WatchCli, SigtermWhileTheServerNeverAnswersEndsItPromptly) {
  // A listener that accepts (backlog) and never answers: the start drain's
  // replay call and the WebSocket handshake hang. The exit must not wait
  // for the client's 30 s deadline.
  blackhole_listener blackhole;
  cli_child w{
    {"watch", "http://127.0.0.1:" + std::to_string(blackhole.port())}};
  std::this_thread::sleep_for(1s); // connected (backlog), waiting for bytes
  std::this_thread::sleep_for(200ms);
  auto t0 = std::chrono::steady_clock::now();
  w.signal(SIGTERM);
  auto code = w.wait_exit(20s);
  ASSERT_TRUE(code) << "still running 20 s after SIGTERM: " << w.err();
  // Far below the 30 s deadline it must not wait for, with the slack of a
  // loaded machine under ASan.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  // It never reached the feed: not a quiet feed, exit 7.
  EXPECT_EQ(*code, 7) << w.err();
  auto sum = summary_of(w.err());
  EXPECT_EQ(sum.at("events").as_int64(), 0);
  EXPECT_FALSE(sum.at("reached").as_bool());
}

TEST_F(WatchCli, ReconnectsThroughADroppedConnectionWithoutLosingAnEvent) {
  auto server = [this](const char* key) {
    return json::parse(hub_->state_json())
      .at("server")
      .at(key)
      .to_number<int64_t>();
  };
  auto ledger_connections = [this] {
    return json::parse(hub_->state_json())
      .at("connections")
      .at("ledger")
      .to_number<int64_t>();
  };
  auto wait_for = [](const std::function<bool()>& pred) {
    auto until = std::chrono::steady_clock::now() + 10s;
    while (!pred() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(10ms);
    return pred();
  };
  publish(2);
  cli_child w{
    {"watch", "--poll-interval", "30", "--count", "6", hub_->base_url()}};
  ASSERT_TRUE(w.wait_out_lines(2, 10s)) << w.err();
  ASSERT_TRUE(wait_for([&] { return ledger_connections() == 1; }));
  EXPECT_EQ(hub_->drop_connections("ledger"), 1u);
  publish(2); // while it is away (or its last drain is still running)
  // Back on a second WebSocket; the next events come through its wakes.
  ASSERT_TRUE(wait_for(
    [&] { return server("ws_upgrades") == 2 && ledger_connections() == 1; }))
    << w.err();
  publish(2);
  auto code = w.wait_exit(15s);
  ASSERT_TRUE(code) << "6 events never came: " << w.out();
  EXPECT_EQ(*code, 0) << w.err();
  EXPECT_EQ(event_ids(w.out()), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  auto sum = summary_of(w.err());
  EXPECT_EQ(sum.at("events").as_int64(), 6);
  EXPECT_EQ(sum.at("cursor").as_int64(), 6);
  EXPECT_EQ(sum.at("reconnects").as_int64(), 1);
  EXPECT_EQ(sum.at("resets").as_int64(), 0);
}

// -- over TLS, through nginx
// ---------------------------------------------------

class WatchCliTls : public WatchCli {
protected:
  void SetUp() override {
    WatchCli::SetUp();
    auto bin = find_program("nginx", "OUTBOUND_NGINX",
                            {"/usr/sbin/nginx", "/usr/local/sbin/nginx",
                             "/usr/local/nginx/sbin/nginx"});
    if (bin.empty())
      GTEST_SKIP() << "nginx binary not found (apt-get install nginx, or set "
                      "OUTBOUND_NGINX)";
    dir_ = std::make_unique<temp_dir>("outbound-watch-tls-");
    pki_ = std::make_unique<test_pki>(test_pki::generate(dir_->path()));
    sink_ = std::make_unique<connection_sink>();
    auto prefix = dir_->file("nginx");
    std::filesystem::create_directories(prefix);
    nginx_ = std::make_unique<nginx_instance>(bin, prefix, *pki_, sink_->port(),
                                              hub_->port());
  }

  void TearDown() override {
    nginx_.reset();
    sink_.reset();
    pki_.reset();
    dir_.reset();
    WatchCli::TearDown();
  }

  std::unique_ptr<temp_dir> dir_;
  std::unique_ptr<test_pki> pki_;
  std::unique_ptr<connection_sink> sink_;
  std::unique_ptr<nginx_instance> nginx_;
};

TEST_F(WatchCliTls, ThreeEventsOverHttpsAndWssThroughAProxy) {
  publish(1);
  auto url = nginx_->base_url(nginx_listener::tls);
  ASSERT_EQ(url.rfind("https://127.0.0.1:", 0), 0u);
  // A long poll tick: the last two events can only come through a wake
  // over the proxied wss:// connection.
  cli_child w{{"watch", "--ca-file", pki_->ca_a.cert, "--poll-interval", "300",
               "--count", "3", url}};
  ASSERT_TRUE(w.wait_out_lines(1, 10s)) << w.err() << nginx_->error_log();
  auto until = std::chrono::steady_clock::now() + 10s;
  while (json::parse(hub_->state_json())
             .at("connections")
             .at("ledger")
             .to_number<int64_t>()
           < 1
         && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(10ms);
  ASSERT_EQ(json::parse(hub_->state_json())
              .at("connections")
              .at("ledger")
              .to_number<int64_t>(),
            1)
    << "no WebSocket through the proxy: " << w.err() << nginx_->error_log();
  hub_->publish("orders/2", "created");
  hub_->publish("orders/3", "created");
  auto code = w.wait_exit(15s);
  ASSERT_TRUE(code) << "3 events never came: " << w.out() << w.err();
  EXPECT_EQ(*code, 0) << w.err();
  EXPECT_EQ(event_ids(w.out()), (std::vector<int64_t>{1, 2, 3}));
  auto sum = summary_of(w.err());
  EXPECT_EQ(sum.at("events").as_int64(), 3);
  EXPECT_EQ(sum.at("cursor").as_int64(), 3);
  EXPECT_EQ(sum.at("reconnects").as_int64(), 0);
  // nginx saw the replay and the upgrade (101) over TLS; a WebSocket is
  // logged when it ends, which the exit has just caused.
  auto seen = [&](const std::string& prefix, int status) {
    for (auto& e : nginx_->access_log())
      if (e.uri.rfind(prefix, 0) == 0 && e.status == status)
        return true;
    return false;
  };
  EXPECT_TRUE(seen("/v1/events", 200));
  auto log_until = std::chrono::steady_clock::now() + 5s;
  while (!seen("/ws/", 101) && std::chrono::steady_clock::now() < log_until)
    std::this_thread::sleep_for(20ms);
  EXPECT_TRUE(seen("/ws/", 101));
}

TEST_F(WatchCliTls, AnUnknownCaIsRefused) {
  auto url = nginx_->base_url(nginx_listener::tls);
  // Trusting CA B only: the server certificate does not verify, no event.
  cli_child w{{"watch", "--ca-file", pki_->ca_b.cert, "--duration", "1", url}};
  publish(1);
  auto code = w.wait_exit(15s);
  ASSERT_TRUE(code);
  // The TLS failure is said on stderr and in the exit code (7: the
  // replay never answered), not a quiet exit 0.
  EXPECT_EQ(*code, 7) << w.err();
  EXPECT_TRUE(w.out().empty()) << w.out();
  auto sum = summary_of(w.err());
  EXPECT_EQ(sum.at("events").as_int64(), 0);
  EXPECT_EQ(sum.at("cursor").as_int64(), 0);
  EXPECT_FALSE(sum.at("reached").as_bool());
  EXPECT_GE(sum.at("failures").as_int64(), 1);
  EXPECT_NE(w.err().find(R"("source":"replay","kind":"service_unavailable")"),
            std::string::npos)
    << w.err();
}

// -- ledger incarnations
// ---------------------------------------------------------

// The hub restarts on the same port with a fresh, shorter ledger (its
// ledger lives in memory) under a running `outbound watch`. Before ledger
// incarnations the watcher kept asking for ids after 8 and printed nothing
// more: silent loss. Now it prints one rewind reset that names what was
// lost, then the new ledger's events from its start.
TEST_F(WatchCli, AHubRestartedWithAShorterLedgerIsOneRewindThenItsEvents) {
  publish(8);
  cli_child w{
    {"watch", "--poll-interval", "30", "--count", "11", hub_->base_url()}};
  ASSERT_TRUE(w.wait_out_lines(8, 10s)) << w.err();
  restart_without_the_ledger();
  publish(3);
  auto code = w.wait_exit(20s);
  ASSERT_TRUE(code) << "the new ledger's events never came: " << w.out()
                    << w.err();
  EXPECT_EQ(*code, 0) << w.err();
  auto lines = lines_of(w.out());
  ASSERT_EQ(lines.size(), 12u) << w.out();
  std::vector<int64_t> ids;
  int resets = 0;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    auto v = json::parse(lines[i]).as_object();
    if (v.at("type").as_string() == "reset") {
      ++resets;
      EXPECT_EQ(i, 8u) << "the reset comes between the two ledgers";
      EXPECT_EQ(v.at("cause").as_string(), "rewind") << lines[i];
      EXPECT_EQ(v.at("mode").as_string(), "ledger");
      EXPECT_EQ(v.at("lost_from").as_int64(), 8);
      EXPECT_TRUE(v.at("lost_to").is_null()) << "the old end is unknown";
      EXPECT_TRUE(v.at("new_epoch").is_string());
      EXPECT_NE(v.at("old_epoch"), v.at("new_epoch"));
      continue;
    }
    ids.push_back(v.at("event").at("id").as_int64());
  }
  EXPECT_EQ(resets, 1);
  EXPECT_EQ(ids, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3}));
  auto sum = summary_of(w.err());
  EXPECT_EQ(sum.at("events").as_int64(), 11);
  EXPECT_EQ(sum.at("resets").as_int64(), 1);
  EXPECT_EQ(sum.at("cursor").as_int64(), 3);
}

// A checkpoint is a cursor and the ledger epoch it was read in. Resumed
// with both against a hub whose ledger was replaced since (and whose head
// is already past the cursor), the watch starts with a rewind reset and
// delivers the new ledger from its start: with the cursor alone it would
// have taken up the new ledger after id 2, its first two events unseen.
TEST_F(WatchCli, AResumeWithTheSummarysLedgerEpochSeesAReplacedLedger) {
  auto cp = checkpoint_after(2);
  ASSERT_FALSE(HasFailure());
  const auto& epoch = cp.ledger_epoch;
  restart_without_the_ledger();
  publish(5);
  auto r = run_rewound({"watch", "--cursor", "2", "--ledger-epoch", epoch,
                        "--count", "5", "--duration", "20", hub_->base_url()},
                       5);
  EXPECT_EQ(r.reset.at("old_epoch").as_string(), epoch);
  EXPECT_EQ(r.reset.at("lost_from").as_int64(), 2);
  EXPECT_EQ(r.ids, (std::vector<int64_t>{1, 2, 3, 4, 5}));
  auto after = summary_of(r.err);
  EXPECT_EQ(after.at("mode").as_string(), "ledger");
  EXPECT_EQ(after.at("cursor").as_int64(), 5);
  EXPECT_TRUE(after.at("ledger_epoch").is_string());
  EXPECT_NE(after.at("ledger_epoch").as_string(), epoch);
}

// A watch that ends while a rewind waits for its reset (the new ledger's
// first page unreadable) has not told its reader about the new ledger: its
// summary is still the old ledger's position, so that a resume from it
// delivers the rewind reset from there (not from cursor 0 of either
// ledger, which would hide the reset or misstate its range).
TEST_F(WatchCli, ASummaryDuringAPendingRewindIsStillTheOldLedgersPosition) {
  auto cp = checkpoint_after(3);
  ASSERT_FALSE(HasFailure());
  const auto& epoch = cp.ledger_epoch;
  hub_faults unreadable;
  unreadable.non_object_pages = -1; // no page of the new ledger is readable
  restart_without_the_ledger(unreadable);
  publish(5);
  cli_child r{{"watch", "--cursor", "3", "--ledger-epoch", epoch, "--duration",
               "2", hub_->base_url()}};
  auto code = r.wait_exit(30s);
  ASSERT_TRUE(code) << r.err();
  EXPECT_TRUE(r.out().empty())
    << "nothing readable, nothing printed: " << r.out();
  auto pending = summary_of(r.err());
  EXPECT_EQ(pending.at("cursor").as_int64(), 3) << r.err();
  EXPECT_EQ(pending.at("ledger_epoch").as_string(), epoch) << r.err();
  // Resumed from it once the pages are readable: the rewind from 3.
  hub_->set_faults(R"({"non_object_pages":0})");
  auto again
    = run_rewound({"watch", "--cursor", "3", "--ledger-epoch", epoch, "--count",
                   "5", "--duration", "20", hub_->base_url()},
                  5);
  EXPECT_EQ(again.reset.at("lost_from").as_int64(), 3);
  EXPECT_EQ(again.ids, (std::vector<int64_t>{1, 2, 3, 4, 5}));
}

// Resumed with the cursor alone against a replaced ledger shorter than the
// cursor: the rewind is seen (the head is below the cursor), but which
// ledger the cursor came from is not known, so the reset says so
// (old_epoch null) instead of naming the new ledger's epoch twice.
TEST_F(WatchCli,
       ARewindOfACursorResumedWithoutItsEpochLeavesTheOldEpochUnknown) {
  checkpoint_after(5);
  ASSERT_FALSE(HasFailure());
  restart_without_the_ledger();
  publish(2);
  auto r = run_rewound({"watch", "--cursor", "5", "--count", "2", "--duration",
                        "20", hub_->base_url()},
                       2);
  EXPECT_EQ(r.reset.at("lost_from").as_int64(), 5);
  EXPECT_TRUE(r.reset.at("old_epoch").is_null());
  EXPECT_TRUE(r.reset.at("new_epoch").is_string());
  EXPECT_EQ(r.ids, (std::vector<int64_t>{1, 2}));
}

// Catch-up's resume key is the summary's client_id, last_seq and epoch.
// The first run ends by --count after seq 4 with seq 5 already on its way
// (received, not printed): the summary says 4, and a resume from it prints
// 5 from the hub's ring, without a resync reset.
TEST_F(WatchCli, ACatchupResumeFromTheSummaryPrintsWhatFollowsWithoutAReset) {
  publish(3);
  cli_child w{{"watch", "--ws-path", "/ws/catchup", "--replay-path", "",
               "--count", "1", "--duration", "20", hub_->base_url()}};
  // A new client id: a resync reset at the head (3), then live events.
  ASSERT_TRUE(w.wait_out_lines(1, 10s)) << w.err();
  publish(2);
  auto code = w.wait_exit(30s);
  ASSERT_TRUE(code) << w.err();
  ASSERT_EQ(*code, 0) << w.err();
  auto lines = lines_of(w.out());
  ASSERT_EQ(lines.size(), 2u) << w.out();
  EXPECT_EQ(json::parse(lines[0]).at("cause").as_string(), "resync");
  EXPECT_EQ(json::parse(lines[1]).at("seq").as_int64(), 4) << lines[1];
  auto sum = summary_of(w.err());
  ASSERT_EQ(sum.at("last_seq").as_int64(), 4) << w.err();
  ASSERT_TRUE(sum.at("epoch").is_string()) << w.err();
  ASSERT_TRUE(sum.at("client_id").is_string()) << w.err();
  std::string id{sum.at("client_id").as_string()};
  std::string epoch{sum.at("epoch").as_string()};
  cli_child r{{"watch", "--ws-path", "/ws/catchup", "--replay-path", "",
               "--client-id", id, "--last-seq", "4", "--epoch", epoch,
               "--count", "1", "--duration", "20", hub_->base_url()}};
  code = r.wait_exit(30s);
  ASSERT_TRUE(code) << r.err();
  EXPECT_EQ(*code, 0) << r.err();
  lines = lines_of(r.out());
  ASSERT_EQ(lines.size(), 1u) << r.out();
  auto ev = json::parse(lines[0]).as_object();
  EXPECT_EQ(ev.at("type").as_string(), "event") << lines[0];
  EXPECT_EQ(ev.at("seq").as_int64(), 5) << lines[0];
  auto after = summary_of(r.err());
  EXPECT_EQ(after.at("mode").as_string(), "catchup");
  EXPECT_EQ(after.at("last_seq").as_int64(), 5);
  EXPECT_EQ(after.at("resets").as_int64(), 0);
  EXPECT_EQ(after.at("client_id").as_string(), id);
}

TEST_F(WatchCli, AResumeKeyThatCannotBeOneIsAUsageErrorNamingTheFlag) {
  struct bad {
    std::vector<std::string> args;
    std::string says;
  };
  for (const auto& b : std::vector<bad>{
         {{"--ledger-epoch", "e1", "--replay-path", ""},
          "--ledger-epoch needs the replay path"},
         {{"--ledger-epoch", ""}, "--ledger-epoch must be"},
         {{"--ledger-epoch", "e\x01"}, "--ledger-epoch must be"},
         {{"--last-seq", "4"}, "--last-seq needs --client-id"},
         {{"--last-seq", "-1", "--client-id", "c"}, "--last-seq must be"},
         {{"--epoch", "e", "--client-id", "c"}, "--epoch needs --last-seq"},
         {{"--epoch", "", "--last-seq", "4", "--client-id", "c"},
          "--epoch must be"}}) {
    auto args = std::vector<std::string>{"watch", "--duration", "5"};
    args.insert(args.end(), b.args.begin(), b.args.end());
    args.push_back(hub_->base_url());
    cli_child w{args};
    auto code = w.wait_exit(20s);
    ASSERT_TRUE(code) << w.err();
    EXPECT_EQ(*code, 2) << w.err();
    EXPECT_NE(w.err().find(b.says), std::string::npos) << w.err();
    EXPECT_TRUE(w.out().empty()) << w.out();
  }
}

// The same restart with the ledger kept in a file: the same incarnation
// (same ids, same ledger epoch), so the watcher goes on without a reset.
TEST_F(WatchCli, AHubRestartedWithItsLedgerFileGoesOnWithoutAReset) {
  temp_dir dir{"outbound-ledger-"};
  auto file = dir.file("ledger.jsonl");
  hub_config c;
  c.seed = 42;
  c.ledger_file = file;
  hub_ = std::make_unique<hub>(c); // replaces the fixture's hub
  hub_->start();
  publish(4);
  cli_child w{
    {"watch", "--poll-interval", "30", "--count", "7", hub_->base_url()}};
  ASSERT_TRUE(w.wait_out_lines(4, 10s)) << w.err();
  c.port = hub_->port();
  hub_.reset();
  hub_ = std::make_unique<hub>(c);
  hub_->start();
  publish(3);
  auto code = w.wait_exit(20s);
  ASSERT_TRUE(code) << w.out() << w.err();
  EXPECT_EQ(*code, 0) << w.err();
  EXPECT_EQ(event_ids(w.out()), (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7}));
  auto sum = summary_of(w.err());
  EXPECT_EQ(sum.at("resets").as_int64(), 0);
  EXPECT_EQ(sum.at("cursor").as_int64(), 7);
}

// -- failures a user can see
// ------------------------------------------------------

namespace {

/// The failure lines of a watch's stderr (every line but the summary).
std::vector<json::object> failure_lines(const std::string& err) {
  std::vector<json::object> r;
  for (auto& l : lines_of(err)) {
    boost::system::error_code ec;
    auto v = json::parse(l, ec);
    if (!ec && v.is_object() && v.as_object().contains("type")
        && v.as_object().at("type") == "failure")
      r.push_back(v.as_object());
  }
  return r;
}

/// A port on 127.0.0.1 that refuses connections (bound, then closed).
uint16_t refused_port() {
  blackhole_listener l;
  return l.port();
}

} // namespace

TEST_F(WatchCli, ConnectionRefusedIsReportedAndGivesUpNonZero) {
  auto url = "http://127.0.0.1:" + std::to_string(refused_port());
  cli_child w{{"watch", "--fail-after", "1", "--token", "s3cr3t-tok", url}};
  auto code = w.wait_exit(20s);
  ASSERT_TRUE(code) << "--fail-after 1 did not end it: " << w.err();
  EXPECT_EQ(*code, 7) << w.err();
  auto fails = failure_lines(w.err());
  ASSERT_FALSE(fails.empty()) << w.err();
  bool replay = false;
  for (auto& f : fails) {
    EXPECT_TRUE(f.contains("kind") && f.contains("status")
                && f.contains("detail") && f.contains("request_id"))
      << f.size();
    if (f.at("source") == "replay") {
      replay = true;
      EXPECT_EQ(f.at("kind"), "service_unavailable");
      EXPECT_FALSE(f.at("request_id").as_string().empty());
    }
  }
  EXPECT_TRUE(replay) << w.err();
  EXPECT_EQ(w.err().find("s3cr3t-tok"), std::string::npos) << w.err();
  auto sum = summary_of(w.err());
  EXPECT_FALSE(sum.at("reached").as_bool());
  EXPECT_TRUE(sum.at("gave_up").as_bool());
  EXPECT_GE(sum.at("failures").as_int64(), 1);
  EXPECT_GE(sum.at("replay_errors").as_int64(), 1);
  // The last failure line says why it gave up.
  ASSERT_FALSE(fails.empty());
  EXPECT_EQ(fails.back().at("source"), "fail_after") << w.err();
  EXPECT_EQ(fails.back().at("kind"), "service_unavailable");
  EXPECT_NE(
    std::string{fails.back().at("detail").as_string()}.find("last failure: "),
    std::string::npos)
    << w.err();
}

/// A failure line's cause, as the CLI compares them (not the request id).
std::string cause_of(const json::object& f) {
  return json::serialize(f.at("source")) + json::serialize(f.at("kind"))
         + json::serialize(f.at("status")) + json::serialize(f.at("detail"))
         + (f.contains("reason") ? json::serialize(f.at("reason")) : "");
}

TEST_F(WatchCli, ADeadPortIsOneLinePerCauseNotAFlood) {
  // Every replay poll (0.1 s) and every reconnect fails the same way; the
  // user is told once per cause, and the summary counts the rest.
  auto url = "http://127.0.0.1:" + std::to_string(refused_port());
  cli_child w{{"watch", "--poll-interval", "0.1", "--fail-after", "2", url}};
  auto code = w.wait_exit(20s);
  ASSERT_TRUE(code) << w.err();
  EXPECT_EQ(*code, 7) << w.err();
  auto fails = failure_lines(w.err());
  ASSERT_GE(fails.size(), 2u) << w.err(); // a cause, then the give-up line
  std::vector<std::string> causes;
  for (auto& f : fails) {
    auto c = cause_of(f);
    EXPECT_EQ(std::count(causes.begin(), causes.end(), c), 0)
      << "printed twice: " << c << "\n"
      << w.err();
    causes.push_back(c);
  }
  auto sum = summary_of(w.err());
  EXPECT_GE(sum.at("failures_suppressed").as_int64(), 1) << w.err();
  // (A failure during the stop is counted, not printed.)
  EXPECT_GE(sum.at("failures").as_int64(),
            static_cast<int64_t>(fails.size() - 1)
              + sum.at("failures_suppressed").as_int64())
    << w.err();
}

TEST_F(WatchCli, ASilentServerGivesUpWithTheReason) {
  // Accepts (backlog) and never answers: no call has failed when the time
  // is up, and the give-up line still says what happened.
  blackhole_listener blackhole;
  cli_child w{{"watch", "--fail-after", "1",
               "http://127.0.0.1:" + std::to_string(blackhole.port())}};
  auto code = w.wait_exit(20s);
  ASSERT_TRUE(code) << w.err();
  EXPECT_EQ(*code, 7) << w.err();
  auto fails = failure_lines(w.err());
  ASSERT_FALSE(fails.empty()) << w.err();
  auto& f = fails.back();
  EXPECT_EQ(f.at("source"), "fail_after") << w.err();
  EXPECT_EQ(f.at("kind"), "service_unavailable");
  EXPECT_NE(std::string{f.at("detail").as_string()}.find("no answer from "
                                                         "the server"),
            std::string::npos)
    << w.err();
  EXPECT_TRUE(summary_of(w.err()).at("gave_up").as_bool());
}

TEST_F(WatchCli, FailAfterHasAFiniteDefault) {
  cli_child w{{"watch", "--help"}};
  auto code = w.wait_exit(20s);
  ASSERT_TRUE(code);
  EXPECT_EQ(*code, 0);
  auto out = w.out();
  auto at = out.find("--fail-after");
  ASSERT_NE(at, std::string::npos) << out;
  auto line = out.substr(at, out.find('\n', at) - at);
  EXPECT_NE(line.find("FLOAT=30 "), std::string::npos)
    << line; // CLI11's default
}

TEST_F(WatchCli, AReachedFeedOutlivesFailAfterThroughAnOutage) {
  // Self-healing: once reached, a hub that goes away before --fail-after
  // is up does not end it when the time comes.
  auto url = hub_->base_url();
  publish(1);
  cli_child w{{"watch", "--poll-interval", "0.2", "--fail-after", "3", url}};
  ASSERT_TRUE(w.wait_out_lines(1, 10s)) << w.err();
  hub_->stop();
  auto past = std::chrono::duration_cast<std::chrono::milliseconds>(
    w.started() + 4s - std::chrono::steady_clock::now());
  EXPECT_FALSE(w.wait_exit(std::max(past, 500ms)))
    << "gave up after reaching: " << w.err();
  w.signal(SIGTERM);
  auto code = w.wait_exit(20s);
  ASSERT_TRUE(code) << w.err();
  EXPECT_EQ(*code, 0) << w.err();
  auto sum = summary_of(w.err());
  EXPECT_TRUE(sum.at("reached").as_bool());
  EXPECT_FALSE(sum.contains("gave_up")) << w.err();
}

TEST_F(WatchCli, A404OnReplayIsARequestErrorNotAQuietFeed) {
  cli_child w{{"watch", "--replay-path", "/v1/no-such-feed", "--fail-after",
               "1", hub_->base_url()}};
  auto code = w.wait_exit(20s);
  ASSERT_TRUE(code) << w.err();
  EXPECT_EQ(*code, 4) << w.err(); // request_error
  auto fails = failure_lines(w.err());
  ASSERT_FALSE(fails.empty()) << w.err();
  EXPECT_EQ(fails[0].at("source"), "replay");
  EXPECT_EQ(fails[0].at("kind"), "request_error");
  EXPECT_EQ(fails[0].at("status").as_int64(), 404);
  EXPECT_FALSE(fails[0].at("request_id").as_string().empty());
  auto sum = summary_of(w.err());
  EXPECT_GE(sum.at("replay_errors").as_int64(), 1);
}

TEST_F(WatchCli, ARefusedWebSocketUpgradeIsReportedWithItsStatus) {
  cli_child w{{"watch", "--replay-path", "", "--ws-path", "/ws/no-such-feed",
               "--fail-after", "1", hub_->base_url()}};
  auto code = w.wait_exit(20s);
  ASSERT_TRUE(code) << w.err();
  EXPECT_EQ(*code, 4) << w.err();
  auto fails = failure_lines(w.err());
  ASSERT_FALSE(fails.empty()) << w.err();
  EXPECT_EQ(fails[0].at("source"), "websocket");
  EXPECT_EQ(fails[0].at("reason"), "handshake");
  EXPECT_EQ(fails[0].at("status").as_int64(), 404);
  EXPECT_EQ(fails[0].at("kind"), "request_error");
}

TEST_F(WatchCli, AnEventOverTheReplayCapIsOneUndeliverableResetInOrder) {
  // Before: a page over the cap was retried forever and nothing printed.
  hub_->publish("orders/1", "created");
  hub_->publish("orders/2", "created",
                R"({"blob":")" + std::string(3500, 'x') + R"("})");
  hub_->publish("orders/3", "created");
  cli_child w{{"watch", "--ws-path", "", "--poll-interval", "0.2",
               "--max-response-bytes", "3000", "--count", "2",
               hub_->base_url()}};
  auto code = w.wait_exit(20s);
  ASSERT_TRUE(code) << "stalled: " << w.out() << w.err();
  EXPECT_EQ(*code, 0) << w.err();
  auto lines = lines_of(w.out());
  ASSERT_EQ(lines.size(), 3u) << w.out();
  auto l0 = json::parse(lines[0]).as_object();
  auto l1 = json::parse(lines[1]).as_object();
  auto l2 = json::parse(lines[2]).as_object();
  EXPECT_EQ(l0.at("event").at("id").as_int64(), 1);
  EXPECT_EQ(l1.at("type"), "reset");
  EXPECT_EQ(l1.at("cause"), "undeliverable");
  EXPECT_EQ(l1.at("event_id").as_int64(), 2);
  EXPECT_EQ(l1.at("lost_from").as_int64(), 1);
  EXPECT_EQ(l1.at("lost_to").as_int64(), 2);
  EXPECT_EQ(l1.at("reason").as_string().subview().substr(0, 9), "over_cap:");
  EXPECT_EQ(l2.at("event").at("id").as_int64(), 3);
  auto sum = summary_of(w.err());
  EXPECT_GE(sum.at("drain_errors").as_int64(), 1);
  EXPECT_GE(sum.at("drain_errors_by_reason").at("over_cap").as_int64(), 1);
  EXPECT_EQ(sum.at("undeliverable").as_int64(), 1);
  // Each unreadable page was said on stderr as it happened.
  auto fails = failure_lines(w.err());
  ASSERT_FALSE(fails.empty()) << w.err();
  EXPECT_EQ(fails[0].at("source"), "page");
  EXPECT_EQ(fails[0].at("kind"), "over_cap");
}

// -- what a user sees of a scripted server
// ------------------------------------------

namespace {

/// An HTTP server on 127.0.0.1 that answers each request with what
/// `answer` returns for its head (request line and header fields), then
/// closes the connection; one connection at a time. Records the heads.
class path_server {
public:
  using handler = std::function<std::string(const std::string& head)>;

  explicit path_server(handler h) : answer_(std::move(h)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0
        || ::listen(fd_, 64) != 0
        || ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw std::runtime_error("path_server: cannot listen");
    port_ = ntohs(a.sin_port);
    thread_ = std::thread{[this] {
      loop();
    }};
  }

  ~path_server() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }

  path_server(const path_server&) = delete;
  path_server& operator=(const path_server&) = delete;

  std::string base_url() const {
    return "http://127.0.0.1:" + std::to_string(port_);
  }

  std::vector<std::string> heads() const {
    std::lock_guard<std::mutex> lock{mu_};
    return heads_;
  }

  /// The value of header `name` (lower-case) in `head`, "" if absent.
  static std::string header(const std::string& head, const std::string& name) {
    std::istringstream in{head};
    for (std::string l; std::getline(in, l);) {
      auto colon = l.find(':');
      if (colon == std::string::npos)
        continue;
      auto k = l.substr(0, colon);
      std::transform(k.begin(), k.end(), k.begin(),
                     [](unsigned char c) { return std::tolower(c); });
      if (k != name)
        continue;
      auto v = l.substr(colon + 1);
      while (!v.empty() && (v.front() == ' ' || v.front() == '\t'))
        v.erase(v.begin());
      while (!v.empty() && (v.back() == '\r' || v.back() == ' '))
        v.pop_back();
      return v;
    }
    return {};
  }

private:
  void loop() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0)
        continue;
      int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0)
        continue;
      timeval tv{2, 0};
      ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      std::string head;
      char buf[4096];
      while (head.find("\r\n\r\n") == std::string::npos) {
        auto n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0)
          break;
        head.append(buf, static_cast<std::size_t>(n));
      }
      if (head.find("\r\n\r\n") != std::string::npos) {
        {
          std::lock_guard<std::mutex> lock{mu_};
          heads_.push_back(head);
        }
        auto r = answer_(head);
        ::send(c, r.data(), r.size(), MSG_NOSIGNAL);
      }
      ::shutdown(c, SHUT_WR);
      ::close(c);
    }
  }

  handler answer_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::vector<std::string> heads_;
  std::thread thread_;
};

std::string http_answer(int status, const std::string& reason,
                        const std::string& body,
                        const std::string& extra_headers = "") {
  return "HTTP/1.1 " + std::to_string(status) + " " + reason
         + "\r\nContent-Type: application/json\r\nContent-Length: "
         + std::to_string(body.size()) + "\r\n" + extra_headers
         + "Connection: close\r\n\r\n" + body;
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0;
}

/// An in-frame event line has a ledger event's shape: the model, the
/// position beside the event (`seq`, no `id`), then the frame itself.
void expect_catchup_line(const std::string& line, int64_t seq) {
  auto e = json::parse(line).as_object();
  EXPECT_EQ(e.at("type").as_string(), "event") << line;
  EXPECT_EQ(e.at("mode").as_string(), "catchup") << line;
  EXPECT_EQ(e.at("seq").as_int64(), seq) << line;
  EXPECT_FALSE(e.contains("id")) << line;
  EXPECT_EQ(e.at("event").at("seq").as_int64(), seq) << line;
}

/// A catchup hub that sends event 1 nested `depth` deep, then event 2.
std::vector<script> deep_catchup(int depth) {
  auto frames
    = ws_text(
        R"({"type":"hello","mode":"catchup","seq":0,"cursor":0,"resync":false,"epoch":"e1"})")
      + ws_text(
        R"({"type":"event","subject":"a","kind":"k","seq":1,"metadata":)"
        + std::string(depth - 1, '[') + std::string(depth - 1, ']') + "}")
      + ws_text(R"({"type":"event","subject":"a","kind":"k","seq":2})");
  return {{step::read_request(), step::ws_accept("", frames), step::hold()}};
}

} // namespace

TEST(WatchCliFrames, AFrameTooDeepIsAResetCountedByReasonInTheSummary) {
  scripted_server ws{deep_catchup(100)};
  cli_child w{{"watch", "--replay-path", "", "--ws-path", "/ws/feed",
               "--ping-interval", "0", "--count", "1", "--fail-after", "0",
               "--duration", "20", ws.base_url()}};
  auto code = w.wait_exit(30s);
  ASSERT_TRUE(code) << w.out() << w.err();
  EXPECT_EQ(*code, 0) << w.err();
  auto lines = lines_of(w.out());
  ASSERT_EQ(lines.size(), 2u) << w.out();
  auto r = json::parse(lines[0]).as_object();
  EXPECT_EQ(r.at("cause"), "undeliverable") << lines[0];
  EXPECT_EQ(r.at("event_id").as_int64(), 1);
  expect_catchup_line(lines[1], 2);
  auto sum = summary_of(w.err());
  // No replay path: no ledger cursor (null, not a cursor of 0).
  EXPECT_TRUE(sum.at("cursor").is_null()) << w.err();
  EXPECT_EQ(sum.at("unreadable_frames").as_int64(), 1) << w.err();
  EXPECT_EQ(sum.at("unreadable_frames_by_reason"),
            json::parse(R"({"too_deep":1})"))
    << w.err();
  EXPECT_EQ(sum.at("undeliverable").as_int64(), 1);
}

TEST(WatchCliFrames, JsonMaxDepthLetsADeeperFrameThrough) {
  scripted_server ws{deep_catchup(100)};
  cli_child w{{"watch", "--replay-path", "", "--ws-path", "/ws/feed",
               "--ping-interval", "0", "--count", "2", "--fail-after", "0",
               "--duration", "20", "--json-max-depth", "128", ws.base_url()}};
  auto code = w.wait_exit(30s);
  ASSERT_TRUE(code) << w.out() << w.err();
  EXPECT_EQ(*code, 0) << w.err();
  auto lines = lines_of(w.out());
  ASSERT_EQ(lines.size(), 2u) << w.out();
  json::parse_options deep_ok;
  deep_ok.max_depth = 256; // Boost.JSON's default is 32
  EXPECT_EQ(json::parse(lines[0], {}, deep_ok).at("event").at("seq").as_int64(),
            1);
  expect_catchup_line(lines[1], 2);
  auto sum = summary_of(w.err());
  // No replay path: no ledger cursor (null, not a cursor of 0).
  EXPECT_TRUE(sum.at("cursor").is_null()) << w.err();
  EXPECT_EQ(sum.at("unreadable_frames").as_int64(), 0) << w.err();
  EXPECT_TRUE(sum.at("unreadable_frames_by_reason").as_object().empty());
}

TEST(WatchCliFrames, JsonMaxDepthOutOfRangeIsAConfigError) {
  cli_child w{{"watch", "--json-max-depth", "0", "http://127.0.0.1:1"}};
  auto code = w.wait_exit(20s);
  ASSERT_TRUE(code);
  EXPECT_EQ(*code, 2) << w.err();
  EXPECT_NE(w.err().find("json_max_depth"), std::string::npos) << w.err();
}

TEST(WatchCliFailures, AWebSocketFailureCarriesItsUpgradesRequestId) {
  path_server srv{[](const std::string&) {
    return http_answer(401, "Unauthorized", "");
  }};
  cli_child w{{"watch", "--replay-path", "", "--ws-path", "/ws/feed",
               "--fail-after", "1", srv.base_url()}};
  auto code = w.wait_exit(20s);
  ASSERT_TRUE(code) << w.err();
  EXPECT_EQ(*code, 3) << w.err(); // auth_error
  auto fails = failure_lines(w.err());
  ASSERT_GE(fails.size(), 2u) << w.err();
  auto heads = srv.heads();
  ASSERT_FALSE(heads.empty());
  auto sent = path_server::header(heads[0], "x-request-id");
  EXPECT_EQ(sent.size(), 32u) << heads[0];
  EXPECT_EQ(fails[0].at("source"), "websocket") << w.err();
  EXPECT_EQ(fails[0].at("status").as_int64(), 401);
  EXPECT_EQ(fails[0].at("request_id").as_string(), sent) << w.err();
  // The give-up line carries the status of the failure it names.
  EXPECT_EQ(fails.back().at("source"), "fail_after") << w.err();
  EXPECT_EQ(fails.back().at("kind"), "auth_error");
  EXPECT_EQ(fails.back().at("status").as_int64(), 401) << w.err();
}

TEST(WatchCliFailures, TheReplayFailureDecidesTheExitCodeOverTheWebSockets) {
  // Replay 403 (auth_error, exit 3) once; the WebSocket then fails with a
  // 404 (request_error, exit 4) on every redial until the give-up: the
  // replay failure decides, whichever came last.
  path_server srv{[](const std::string& head) {
    if (starts_with(head, "GET /v1/events"))
      return http_answer(403, "Forbidden", "");
    return http_answer(404, "Not Found", "");
  }};
  cli_child w{{"watch", "--fail-after", "1.5", srv.base_url()}};
  auto code = w.wait_exit(20s);
  ASSERT_TRUE(code) << w.err();
  EXPECT_EQ(*code, 3) << w.err();
  auto fails = failure_lines(w.err());
  ASSERT_FALSE(fails.empty()) << w.err();
  EXPECT_EQ(fails.back().at("source"), "fail_after") << w.err();
  EXPECT_EQ(fails.back().at("kind"), "auth_error");
  EXPECT_EQ(fails.back().at("status").as_int64(), 403) << w.err();
  bool ws404 = false;
  for (auto& f : fails)
    ws404 = ws404 || (f.at("source") == "websocket" && f.at("status") == 404);
  EXPECT_TRUE(ws404) << w.err();
}

TEST(WatchCliFailures, ATokenEchoedByTheServerIsNeverPrinted) {
  // Every answer is a 401 with the token in its body's `detail` (which
  // the client puts into the failure's detail) and in two headers.
  const std::string token = "s3cr3t-tok-4711";
  path_server srv{[token](const std::string&) {
    return http_answer(
      401, "Unauthorized", R"({"detail":"token was )" + token + R"("})",
      "X-Echo: " + token + "\r\nWWW-Authenticate: Bearer " + token + "\r\n");
  }};
  cli_child w{{"watch", "--token", token, "--fail-after", "1", srv.base_url()}};
  auto code = w.wait_exit(20s);
  ASSERT_TRUE(code) << w.err();
  EXPECT_EQ(*code, 3) << w.err();
  ASSERT_FALSE(failure_lines(w.err()).empty()) << w.err();
  EXPECT_EQ(w.err().find(token), std::string::npos) << w.err();
  EXPECT_EQ(w.out().find(token), std::string::npos) << w.out();
  EXPECT_NE(w.err().find("token was [redacted]"), std::string::npos) << w.err();
  // The server did receive it (the test is about printing, not sending).
  auto heads = srv.heads();
  ASSERT_FALSE(heads.empty());
  EXPECT_NE(heads[0].find(token), std::string::npos);
}

// -- numbers, end to end through a real `outbound hub`
// -------------------------

namespace {

/// Numbers that are easy to corrupt on the way through a double: the
/// nearest double to 0.1, the smallest subnormal, the largest double, an
/// integer just past 2^53, the uint64 and int64 extremes, 10^21 (where
/// printf-style formatting switches to an exponent), and a short mantissa
/// with an exponent.
const std::vector<std::pair<std::string, std::string>> tricky_numbers = {
  {"tenth", "0.1"},
  {"subnormal", "5e-324"},
  {"max", "1.7976931348623157e308"},
  {"past_2_53", "9007199254740993"},
  {"u64_max", "18446744073709551615"},
  {"i64_min", "-9223372036854775808"},
  {"e21", "1e21"},
  {"small", "123.456e-7"},
};

std::string tricky_metadata() {
  std::string md = "{";
  for (const auto& [k, v] : tricky_numbers)
    md += (md.size() > 1 ? "," : "") + ("\"" + k + "\":" + v);
  return md + "}";
}

/// Checks that every tricky number came back in `metadata` (as printed on
/// `line`) as the same value: integers with the same digits, the others as
/// the same binary64 as std::from_chars makes of the text that was sent.
void expect_tricky_numbers(const std::string& line) {
  // The library's parser: exact doubles, integers kept integers.
  auto parsed = parse_json(line);
  ASSERT_TRUE(parsed) << parsed.detail << ": " << line;
  const auto& md = parsed.value.at("event").at("metadata").as_object();
  for (const auto& [k, v] : tricky_numbers) {
    auto* got = md.if_contains(k);
    ASSERT_TRUE(got) << k << " missing: " << line;
    if (v.find_first_of(".eE") == std::string::npos) {
      // Same digits, printed as such.
      EXPECT_TRUE(got->is_int64() || got->is_uint64()) << k << ": " << line;
      EXPECT_NE(line.find("\"" + k + "\":" + v), std::string::npos)
        << k << ": " << line;
      continue;
    }
    double want = 0;
    std::from_chars(v.data(), v.data() + v.size(), want);
    ASSERT_TRUE(got->is_double()) << k << ": " << line;
    EXPECT_EQ(got->as_double(), want) << k << " sent as " << v << ": " << line;
    // And an independent parse of the printed text agrees (strtod is
    // correctly rounded in glibc).
    auto at = line.find("\"" + k + "\":");
    ASSERT_NE(at, std::string::npos);
    auto text = line.substr(at + k.size() + 3);
    EXPECT_EQ(std::strtod(text.c_str(), nullptr), want) << k << ": " << line;
  }
}

class WatchCliNumbers : public ::testing::Test {
protected:
  void SetUp() override {
    hub_.emplace(std::vector<std::string>{"hub", "--port", "0"});
    ASSERT_TRUE(hub_->wait_out_lines(1, 30s)) << hub_->err();
    auto first = lines_of(hub_->out()).at(0);
    base_url_
      = "http://" + std::string{json::parse(first).at("listening").as_string()};
  }

  /// `outbound request -X POST --json body BASE/v1/events`, to its end.
  std::pair<int, std::string> publish(const std::string& body) {
    cli_child r{
      {"request", "-X", "POST", "--json", body, base_url_ + "/v1/events"}};
    auto code = r.wait_exit(30s);
    return {code.value_or(-1), r.out() + r.err()};
  }

  std::optional<cli_child> hub_;
  std::string base_url_;
};

} // namespace

TEST_F(WatchCliNumbers, TrickyNumbersComeOutOfTheLedgerAsTheyWentIn) {
  auto [code, output]
    = publish(R"({"subject":"n/1","kind":"numbers","metadata":)"
              + tricky_metadata() + "}");
  ASSERT_EQ(code, 0) << output;
  cli_child w{{"watch", "--count", "1", base_url_}};
  auto exit = w.wait_exit(30s);
  ASSERT_TRUE(exit) << w.err();
  EXPECT_EQ(*exit, 0) << w.err();
  auto lines = lines_of(w.out());
  ASSERT_EQ(lines.size(), 1u) << w.out();
  expect_tricky_numbers(lines[0]);
}

TEST_F(WatchCliNumbers, TrickyNumbersComeOutOfTheCatchupTierAsTheyWentIn) {
  // A first catch-up subscribe is a resync (one reset line); what is
  // published after it arrives as a frame.
  cli_child w{{"watch", "--ws-path", "/ws/catchup", "--replay-path", "",
               "--count", "1", base_url_}};
  ASSERT_TRUE(w.wait_out_lines(1, 30s)) << w.err();
  ASSERT_NE(w.out().find("\"type\":\"reset\""), std::string::npos) << w.out();
  auto [code, output]
    = publish(R"({"subject":"n/1","kind":"numbers","metadata":)"
              + tricky_metadata() + "}");
  ASSERT_EQ(code, 0) << output;
  auto exit = w.wait_exit(30s);
  ASSERT_TRUE(exit) << w.out() << w.err();
  EXPECT_EQ(*exit, 0) << w.err();
  auto lines = lines_of(w.out());
  ASSERT_EQ(lines.size(), 2u) << w.out();
  expect_tricky_numbers(lines[1]);
}

TEST_F(WatchCliNumbers, APublishWithA30DigitIntegerIsRefusedNamingTheField) {
  auto [code, output] = publish(
    R"({"subject":"n/1","metadata":{"order_id":123456789012345678901234567890}})");
  EXPECT_NE(code, 0) << output;
  EXPECT_NE(output.find("\"status\":400"), std::string::npos) << output;
  EXPECT_NE(output.find("metadata.order_id: integer not exact in IEEE 754 "
                        "binary64"),
            std::string::npos)
    << output;
  // Nothing was stored: the ledger is empty.
  cli_child w{{"watch", "--duration", "1", base_url_}};
  ASSERT_TRUE(w.wait_exit(30s));
  EXPECT_TRUE(w.out().empty()) << w.out();
}
