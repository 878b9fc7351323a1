// bench/wake_flood: the CPU one ledger feed watcher spends on a flood of
// wake frames that announce a cursor its replay endpoint never reaches.
//
//   parent (measured)                       child: `wake_flood --peer`
//   ─────────────────                       ──────────────────────────
//   one real watcher (spawn_feed_watcher,   Beast WebSocket + HTTP on
//   callbacks, its own io_runner, like      127.0.0.1: a ledger hello, then
//   `outbound watch`)          ◄── ws ───── wakes at --rate for --seconds
//                              ── GET ────► {"events":[],"cursor":C,...}
//
// The peer runs in a separate process (this binary re-executed with
// --peer), so its CPU is not counted. Per round the parent measures its own
// process CPU (getrusage user+sys over the wake stream, every thread: io,
// CAF workers, the callback thread) and then, against a fresh peer sending
// the same stream, the CPU of a raw Beast WebSocket client that reads and
// discards every frame on one io thread (the physical floor of the same
// process shape; the CAF system stays up and idle meanwhile).
//
// Every figure is printed per round and as a min–max range over rounds.
// Every wait is bounded; traffic only on 127.0.0.1.

#include "bench/caf_setup.hpp"

#include "actors/client/service_client.hpp"
#include "actors/feed/feed_config.hpp"
#include "actors/feed/feed_messages.hpp"
#include "actors/feed/feed_watcher.hpp"
#include "actors/messages.hpp"
#include "config/client_config.hpp"
#include "protocol/io_runner.hpp"
#include "protocol/ws_session.hpp"

#include <CLI/CLI.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/beast/websocket/rfc6455.hpp>
#include <boost/beast/websocket/stream.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scheduler/abstract_coordinator.hpp>
#include <caf/scoped_actor.hpp>

#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

using namespace outbound;
using namespace std::chrono_literals;
using clk = std::chrono::steady_clock;

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace websocket = boost::beast::websocket;
using tcp = asio::ip::tcp;

namespace {

struct settings {
  double rate = 10000;
  double seconds = 10;
  int rounds = 3;
  int64_t tick_us = 1000;
  int64_t target = 1'000'000;
  int64_t replay_cursor = 0;
  /// What the wakes announce: "same" (every wake --target), "rising"
  /// (--target, --target + 1, ...: a new target each wake), "alternating"
  /// (--target and --target - 1 in turn).
  std::string targets = "same";
  bool skip_baseline = false;
};

// -- the peer (child process) ----------------------------------------------------

struct peer_counters {
  std::atomic<uint64_t> wakes{0};
  std::atomic<uint64_t> gets{0};
  std::atomic<bool> ws_done{false};
};

void serve_http(tcp::socket sock, beast::flat_buffer buf,
                http::request<http::string_body> req, const settings& s,
                peer_counters& c) {
  beast::error_code ec;
  for (;;) {
    http::response<http::string_body> res{http::status::ok, req.version()};
    res.set(http::field::content_type, "application/json");
    // An empty page at the replay cursor: the wake target is never reached.
    res.body() = "{\"events\":[],\"cursor\":" + std::to_string(s.replay_cursor)
                 + ",\"reset\":false}";
    res.keep_alive(req.keep_alive());
    res.prepare_payload();
    c.gets.fetch_add(1);
    http::write(sock, res, ec);
    if (ec || !req.keep_alive())
      return;
    req = {};
    http::read(sock, buf, req, ec);
    if (ec)
      return;
  }
}

void serve_ws(tcp::socket sock, http::request<http::string_body> req,
              const settings& s, peer_counters& c) {
  beast::error_code ec;
  websocket::stream<tcp::socket> ws{std::move(sock)};
  ws.accept(req, ec);
  if (ec) {
    c.ws_done = true;
    return;
  }
  ws.text(true);
  std::string hello = "{\"type\":\"hello\",\"mode\":\"ledger\",\"seq\":0,"
                      "\"cursor\":"
                      + std::to_string(s.replay_cursor)
                      + ",\"resync\":false,\"epoch\":null}";
  ws.write(asio::buffer(hello), ec);
  auto wake_for = [&s](uint64_t n) {
    auto cursor = s.target;
    if (s.targets == "rising")
      cursor += static_cast<int64_t>(n);
    else if (s.targets == "alternating")
      cursor -= static_cast<int64_t>(n % 2);
    return "{\"type\":\"wake\",\"cursor\":" + std::to_string(cursor) + "}";
  };
  std::string wake = wake_for(0);
  auto t0 = clk::now();
  auto tick = std::chrono::microseconds{std::max<int64_t>(s.tick_us, 1)};
  auto end = t0 + std::chrono::duration_cast<clk::duration>(
                    std::chrono::duration<double>(s.seconds));
  uint64_t sent = 0;
  for (auto next = t0; !ec;) {
    auto now = clk::now();
    if (now >= end)
      break;
    // Catch up to rate × elapsed, one WebSocket frame per wake.
    auto due = static_cast<uint64_t>(
      s.rate * std::chrono::duration<double>(now - t0).count());
    while (sent < due && !ec) {
      if (s.targets != "same")
        wake = wake_for(sent);
      ws.write(asio::buffer(wake), ec);
      ++sent;
      c.wakes.store(sent);
    }
    next += tick;
    std::this_thread::sleep_until(next);
  }
  ws.close(websocket::close_code::normal, ec);
  c.ws_done = true;
}

int run_peer(const settings& s) {
  ::signal(SIGPIPE, SIG_IGN);
  asio::io_context ioc;
  tcp::acceptor acc{ioc, tcp::endpoint{asio::ip::make_address("127.0.0.1"), 0}};
  std::printf("port %u\n", static_cast<unsigned>(acc.local_endpoint().port()));
  std::fflush(stdout);
  peer_counters c;
  std::thread accepter{[&] {
    for (;;) {
      beast::error_code ec;
      tcp::socket sock{ioc};
      acc.accept(sock, ec);
      if (ec)
        return;
      sock.set_option(tcp::no_delay{true}, ec);
      std::thread{[&s, &c, sock = std::move(sock)]() mutable {
        beast::error_code ec;
        beast::flat_buffer buf;
        http::request<http::string_body> req;
        http::read(sock, buf, req, ec);
        if (ec)
          return;
        if (websocket::is_upgrade(req))
          serve_ws(std::move(sock), std::move(req), s, c);
        else
          serve_http(std::move(sock), std::move(buf), std::move(req), s, c);
      }}.detach();
    }
  }};
  accepter.detach();
  // Bounded: the stream ends by itself; a client that never connects is
  // given up after the same time plus 10 s.
  auto give_up = clk::now() + std::chrono::duration_cast<clk::duration>(
                                std::chrono::duration<double>(s.seconds + 10));
  while (!c.ws_done && clk::now() < give_up)
    std::this_thread::sleep_for(5ms);
  std::printf("done %" PRIu64 " %" PRIu64 "\n", c.wakes.load(), c.gets.load());
  std::fflush(stdout);
  // Keep serving until the parent closes our stdin (it has stopped its
  // client by then), so no connection error lands in its measured window.
  char b;
  while (::read(0, &b, 1) > 0) {
  }
  std::_Exit(0);
}

/// A peer child: started with this binary's --peer, talks over two pipes.
class peer_process {
public:
  explicit peer_process(const settings& s) {
    int out[2], in[2];
    if (::pipe(out) != 0 || ::pipe(in) != 0)
      throw std::runtime_error("pipe failed");
    auto rate = std::to_string(s.rate), secs = std::to_string(s.seconds),
         tick = std::to_string(s.tick_us), target = std::to_string(s.target),
         rc = std::to_string(s.replay_cursor);
    pid_ = ::fork();
    if (pid_ < 0)
      throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      ::dup2(out[1], 1);
      ::dup2(in[0], 0);
      ::close(out[0]);
      ::close(in[1]);
      ::execl("/proc/self/exe", "wake_flood", "--peer", "--rate", rate.c_str(),
              "--seconds", secs.c_str(), "--tick-us", tick.c_str(), "--target",
              target.c_str(), "--replay-cursor", rc.c_str(), "--targets",
              s.targets.c_str(), nullptr);
      std::_Exit(127);
    }
    ::close(out[1]);
    ::close(in[0]);
    out_ = out[0];
    in_ = in[1];
    auto line = read_line(10s);
    if (!line || std::sscanf(line->c_str(), "port %u", &port_) != 1)
      throw std::runtime_error("the peer did not start");
  }

  ~peer_process() {
    if (in_ >= 0)
      ::close(in_);
    if (out_ >= 0)
      ::close(out_);
    if (pid_ > 0) {
      int status = 0;
      for (int i = 0; i < 200; ++i) {
        if (::waitpid(pid_, &status, WNOHANG) == pid_)
          return;
        std::this_thread::sleep_for(10ms);
      }
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
    }
  }

  unsigned port() const {
    return port_;
  }

  /// Waits for the end of the wake stream: (wakes sent, replay GETs).
  std::optional<std::pair<uint64_t, uint64_t>> wait_done(double seconds) {
    auto line = read_line(std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::duration<double>(seconds + 15)));
    uint64_t w = 0, g = 0;
    if (!line || std::sscanf(line->c_str(), "done %" SCNu64 " %" SCNu64, &w, &g) != 2)
      return std::nullopt;
    return std::make_pair(w, g);
  }

private:
  std::optional<std::string> read_line(std::chrono::milliseconds timeout) {
    auto end = clk::now() + timeout;
    std::string line;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        end - clk::now());
      if (left.count() <= 0)
        return std::nullopt;
      pollfd p{out_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0)
        continue;
      char ch;
      if (::read(out_, &ch, 1) != 1)
        return std::nullopt;
      if (ch == '\n')
        return line;
      line.push_back(ch);
    }
  }

  pid_t pid_ = -1;
  int out_ = -1;
  int in_ = -1;
  unsigned port_ = 0;
};

// -- measuring ------------------------------------------------------------------------

double cpu_seconds() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  auto tv = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return tv(ru.ru_utime) + tv(ru.ru_stime);
}

struct round_result {
  bool ok = false;
  uint64_t sent = 0;
  uint64_t received = 0; // baseline: messages read; watcher: see `stats`
  uint64_t gets = 0;
  double cpu_pct = 0;
  double wall = 0;
  feed_stats stats;
};

/// Time and CPU from `t0`/`c0` to now as a percentage of one core.
double pct(clk::time_point t0, double c0, double& wall) {
  wall = std::chrono::duration<double>(clk::now() - t0).count();
  return wall > 0 ? 100.0 * (cpu_seconds() - c0) / wall : 0;
}

round_result run_watcher(caf::actor_system& sys, const settings& s) {
  round_result r;
  peer_process peer{s};
  auto io = outbound::bench::client_io(sys, 1);
  client_config cc;
  cc.base_url = "http://127.0.0.1:" + std::to_string(peer.port());
  client_options co;
  co.io = io;
  auto client = make_service_client(sys, cc, co);
  feed_config fc;
  fc.replay_path = "/v1/events";
  fc.ws_path = "/ws/feed";
  fc.cursor = s.replay_cursor;
  feed_watcher_options wo;
  wo.client = client;
  wo.ws = feed_ws_endpoint::from(cc);
  wo.connector = make_ws_connector(io);
  wo.callbacks.on_event = [](const feed_event&) {};
  auto t0 = clk::now();
  auto c0 = cpu_seconds();
  auto w = spawn_feed_watcher(sys, fc, std::move(wo));
  auto done = peer.wait_done(s.seconds);
  r.cpu_pct = pct(t0, c0, r.wall);
  caf::scoped_actor self{sys};
  self->request(w, 5s, stop_atom_v)
    .receive([&](feed_stats& st) { r.stats = std::move(st); },
             [&](caf::error&) {});
  if (done) {
    r.ok = true;
    r.sent = done->first;
    r.gets = done->second;
  }
  self->send_exit(caf::actor_cast<caf::actor>(client),
                  caf::exit_reason::user_shutdown);
  // A driven runner (the io_loop policy) is the system's own: stop() leaves
  // it running for the next round.
  io->stop();
  return r;
}

/// The floor: a raw Beast client that reads and discards every frame.
round_result run_baseline(const settings& s) {
  round_result r;
  peer_process peer{s};
  asio::io_context ioc{1};
  websocket::stream<tcp::socket> ws{ioc};
  beast::flat_buffer buf;
  std::atomic<uint64_t> received{0};
  auto t0 = clk::now();
  auto c0 = cpu_seconds();
  std::thread io_thread{[&] {
    beast::error_code ec;
    ws.next_layer().connect(
      tcp::endpoint{asio::ip::make_address("127.0.0.1"),
                    static_cast<unsigned short>(peer.port())},
      ec);
    if (ec)
      return;
    ws.next_layer().set_option(tcp::no_delay{true}, ec);
    ws.handshake("127.0.0.1", "/ws/feed", ec);
    if (ec)
      return;
    std::function<void(beast::error_code, std::size_t)> on_read;
    on_read = [&](beast::error_code ec, std::size_t) {
      if (ec)
        return;
      received.fetch_add(1, std::memory_order_relaxed);
      buf.consume(buf.size());
      ws.async_read(buf, on_read);
    };
    ws.async_read(buf, on_read);
    ioc.run();
  }};
  auto done = peer.wait_done(s.seconds);
  r.cpu_pct = pct(t0, c0, r.wall);
  ioc.stop();
  io_thread.join();
  r.received = received.load();
  if (done) {
    r.ok = true;
    r.sent = done->first;
    r.gets = done->second;
  }
  return r;
}

struct range {
  double lo = 0, hi = 0;
  bool any = false;
  void add(double x) {
    lo = any ? std::min(lo, x) : x;
    hi = any ? std::max(hi, x) : x;
    any = true;
  }
};

std::string fmt_range(const range& r, const char* f) {
  if (!r.any)
    return "n/a";
  char a[64], b[64];
  std::snprintf(a, sizeof(a), f, r.lo);
  std::snprintf(b, sizeof(b), f, r.hi);
  return std::string{a} + "–" + b;
}

} // namespace

int main(int argc, char** argv) {
  settings s;
  bool peer = false;
  CLI::App app{"bench/wake_flood: CPU of one ledger watcher under a wake "
               "flood, against a raw Beast client reading the same frames"};
  app.add_flag("--peer", peer, "Run as the scripted peer (internal)");
  app.add_option("--rate", s.rate, "Wake frames per second")
    ->capture_default_str();
  app.add_option("--seconds", s.seconds, "Length of each wake stream")
    ->capture_default_str();
  app.add_option("--rounds", s.rounds, "Rounds (watcher + baseline each)")
    ->capture_default_str();
  app.add_option("--tick-us", s.tick_us,
                 "Peer pacing tick in microseconds (wakes due are written "
                 "back to back each tick, one frame per wake)")
    ->capture_default_str();
  app.add_option("--target", s.target, "Cursor the wakes announce")
    ->capture_default_str();
  app.add_option("--targets", s.targets,
                 "What the wakes announce: same (--target each time), rising "
                 "(a higher target each wake), alternating (--target and "
                 "--target - 1)")
    ->check(CLI::IsMember({"same", "rising", "alternating"}))
    ->capture_default_str();
  app.add_option("--replay-cursor", s.replay_cursor,
                 "Cursor of the (empty) replay pages and the hello")
    ->capture_default_str();
  outbound::bench::caf_flags caf_opts; // the watcher's io_runner: 1 io thread
  caf_opts.add_to(app);
  app.add_flag("--no-baseline", s.skip_baseline, "Skip the raw Beast rounds");
  CLI11_PARSE(app, argc, argv);
  if (peer)
    return run_peer(s);
  if (s.rate <= 0 || s.seconds <= 0 || s.rounds < 1) {
    std::fprintf(stderr, "wake_flood: --rate, --seconds, --rounds must be > 0\n");
    return 2;
  }
  ::signal(SIGPIPE, SIG_IGN);

  caf::actor_system_config cfg;
  if (!caf_opts.apply(cfg))
    return 2;
  caf::actor_system sys{cfg};
  auto caf_in_effect = outbound::scheduler_in_effect(sys);
  std::printf("bench wake_flood: rate=%.0f/s seconds=%.1f rounds=%d "
              "tick=%" PRId64 "us target=%" PRId64 " targets=%s "
              "replay_cursor=%" PRId64 "\n",
              s.rate, s.seconds, s.rounds, s.tick_us, s.target,
              s.targets.c_str(), s.replay_cursor);
  std::printf("%s; cores %u; load average %s\n", caf_opts.report(sys).c_str(),
              std::thread::hardware_concurrency(),
              outbound::bench::load_average().c_str());
  std::printf("\n%-5s %-9s %10s %10s %10s %8s %9s %7s\n", "round", "client",
              "sent", "received", "coalesced", "replays", "cpu%", "wall_s");
  range w_cpu, b_cpu, w_sent, w_recv, w_coal, w_gets, b_recv;
  bool failed = false;
  for (int i = 1; i <= s.rounds; ++i) {
    auto w = run_watcher(sys, s);
    failed |= !w.ok;
    std::printf("%-5d %-9s %10" PRIu64 " %10s %10" PRIu64 " %8" PRIu64
                " %9.1f %7.2f%s\n",
                i, "watcher", w.sent, std::to_string(w.stats.wakes).c_str(),
                w.stats.wakes_coalesced, w.gets,
                w.cpu_pct, w.wall, w.ok ? "" : "  (peer did not finish)");
    w_cpu.add(w.cpu_pct);
    w_sent.add(static_cast<double>(w.sent));
    w_coal.add(static_cast<double>(w.stats.wakes_coalesced));
    w_recv.add(static_cast<double>(w.stats.wakes));
    w_gets.add(static_cast<double>(w.gets));
    if (s.skip_baseline)
      continue;
    auto b = run_baseline(s);
    failed |= !b.ok;
    std::printf("%-5d %-9s %10" PRIu64 " %10" PRIu64 " %10s %8s %9.1f %7.2f%s\n",
                i, "raw-beast", b.sent, b.received, "-", "-", b.cpu_pct, b.wall,
                b.ok ? "" : "  (peer did not finish)");
    b_cpu.add(b.cpu_pct);
    b_recv.add(static_cast<double>(b.received));
  }
  std::printf("\nranges over %d rounds (min–max):\n", s.rounds);
  std::printf("  watcher:   cpu %s %% of one core, wakes sent %s, received "
              "%s, coalesced %s, replay GETs %s\n",
              fmt_range(w_cpu, "%.1f").c_str(), fmt_range(w_sent, "%.0f").c_str(),
              fmt_range(w_recv, "%.0f").c_str(),
              fmt_range(w_coal, "%.0f").c_str(),
              fmt_range(w_gets, "%.0f").c_str());
  if (!s.skip_baseline)
    std::printf("  raw beast: cpu %s %% of one core, frames read %s\n",
                fmt_range(b_cpu, "%.1f").c_str(),
                fmt_range(b_recv, "%.0f").c_str());
  std::printf("json: {\"bench\":\"wake_flood\",\"rate\":%.0f,\"seconds\":%.1f,"
              "\"rounds\":%d,\"caf_workers\":%zu,\"caf_policy\":\"%s\","
              "\"watcher_cpu_pct\":[%.1f,%.1f],\"baseline_cpu_pct\":[%.1f,%.1f],"
              "\"replay_gets\":[%.0f,%.0f]}\n",
              s.rate, s.seconds, s.rounds, caf_in_effect.workers,
              caf_in_effect.policy.c_str(), w_cpu.lo, w_cpu.hi, b_cpu.lo, b_cpu.hi,
              w_gets.lo, w_gets.hi);
  std::fflush(stdout);
  return failed ? 1 : 0;
}
