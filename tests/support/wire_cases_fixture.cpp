#include "tests/support/wire_cases_fixture.hpp"

#include "actors/metrics/metrics_observer.hpp"
#include "actors/system/system_setup.hpp"

#include <boost/beast/zlib/deflate_stream.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <prometheus/metric_family.h>

#include <array>
#include <cstdint>
#include <cstdlib>

namespace outbound::testing {

// -- event_log ----------------------------------------------------------------

void event_log::push(client_event ev) {
  std::lock_guard<std::mutex> guard{mtx_};
  events_.push_back({wire_clock::now(), std::move(ev)});
  cv_.notify_all();
}

std::vector<timed_event> event_log::of(const std::string& request_id) const {
  std::lock_guard<std::mutex> guard{mtx_};
  std::vector<timed_event> out;
  for (const auto& e : events_)
    if (e.ev.request_id == request_id)
      out.push_back(e);
  return out;
}

std::vector<timed_event> event_log::all() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return events_;
}

bool event_log::wait_final(const std::string& request_id,
                           std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> guard{mtx_};
  return cv_.wait_for(guard, timeout, [&] {
    for (const auto& e : events_)
      if (e.ev.request_id == request_id
          && (e.ev.kind == event_kind::answered
              || e.ev.kind == event_kind::failed))
        return true;
    return false;
  });
}

std::vector<timed_event> event_log::only(const std::vector<timed_event>& evs,
                                         event_kind kind) {
  std::vector<timed_event> out;
  for (const auto& e : evs)
    if (e.ev.kind == kind)
      out.push_back(e);
  return out;
}

// -- wire_test ----------------------------------------------------------------

namespace {

observer_actor spawn_recorder(caf::actor_system& sys,
                              std::shared_ptr<event_log> log) {
  return sys.spawn(
    [log](observer_actor::pointer) -> observer_actor::behavior_type {
      return {
        [log](const client_event& ev) { log->push(ev); },
      };
    });
}

double counter_value(const prometheus::Registry& registry,
                     const std::string& name, const std::string& label,
                     const std::string& value) {
  double sum = 0;
  for (const auto& family : registry.Collect()) {
    if (family.name != name)
      continue;
    for (const auto& m : family.metric) {
      bool match = label.empty();
      for (const auto& l : m.label)
        if (l.name == label && l.value == value)
          match = true;
      if (match)
        sum += m.counter.value;
    }
  }
  return sum;
}

} // namespace

wire_test::wire_test()
  : metrics_(std::make_shared<client_metrics>(registry_, "wire")),
    log_(std::make_shared<event_log>()), io_(std::make_shared<io_runner>(1)) {
  // ctest runs these cases twice: as they are, and with the environment
  // variable OUTBOUND_TEST_SCHEDULER=io_loop (tests/CMakeLists.txt), where
  // one CAF worker runs the clients' actors and their sockets
  // (system_options::policy "io_loop").
  const char* sched = std::getenv("OUTBOUND_TEST_SCHEDULER");
  if (sched != nullptr && std::string{sched} == "io_loop") {
    system_options o;
    o.policy = "io_loop";
    o.max_threads = 1;
    configure(cfg_, o);
    sys_ = std::make_unique<caf::actor_system>(cfg_);
    io_ = io_runner_for(*sys_);
  } else {
    cfg_.add_message_types<caf::id_block::outbound>();
    sys_ = std::make_unique<caf::actor_system>(cfg_);
  }
  observer_
    = spawn_metrics_observer(*sys_, metrics_, spawn_recorder(*sys_, log_));
}

wire_test::~wire_test() {
  observer_ = nullptr;
  sys_.reset(); // waits for every actor: pools close their connections
  io_.reset();
}

client_config wire_test::defaults(const std::string& base_url) {
  client_config c;
  c.base_url = base_url;
  c.token = wire_token;
  c.retry.max_attempts = 3;
  c.retry.base_backoff = 0.1;
  c.retry.max_backoff = 1.0;
  c.timeout = 1.0;
  c.deadline = 5.0;
  c.max_response_bytes = 1024 * 1024;
  return c;
}

std::unique_ptr<blocking_client> wire_test::client(client_config cfg) {
  client_options opts;
  opts.observer = observer_;
  opts.io = io_;
  opts.seed = 42;
  return std::make_unique<blocking_client>(*sys_, std::move(cfg),
                                           std::move(opts));
}

std::unique_ptr<scripted_server> wire_test::server(std::vector<script> scripts,
                                                   script fallback,
                                                   server_tls tls) {
  auto s = std::make_unique<scripted_server>(
    std::move(scripts), std::move(fallback), std::move(tls));
  s->set_step_timeout(std::chrono::seconds{3});
  return s;
}

double wire_test::retries(const std::string& reason) const {
  return counter_value(registry_, "outbound_client_retries_total", "reason",
                       reason);
}

double wire_test::retries_all() const {
  return counter_value(registry_, "outbound_client_retries_total", "", "");
}

double wire_test::redials() const {
  return counter_value(registry_, "outbound_client_redials_total", "", "");
}

std::vector<timed_event> wire_test::events_of(const std::string& request_id) {
  EXPECT_TRUE(log_->wait_final(request_id, std::chrono::seconds{2}))
    << "no answered/failed event for request " << request_id;
  return log_->of(request_id);
}

void wire_test::expect_no_token(const call_error& e) const {
  auto none = std::string::npos;
  EXPECT_EQ(e.message().find(wire_token), none) << e.message();
  EXPECT_EQ(e.detail.find(wire_token), none) << e.detail;
  EXPECT_EQ(e.location.find(wire_token), none) << e.location;
  for (const auto& t : log_->all())
    EXPECT_EQ(t.ev.cause.find(wire_token), none) << t.ev.cause;
}

call_request wire_test::get(const std::string& path) {
  call_request r;
  r.method = "GET";
  r.path = path;
  return r;
}

call_request wire_test::post(const std::string& path, const std::string& body) {
  call_request r;
  r.method = "POST";
  r.path = path;
  r.body = body;
  r.has_body = true;
  return r;
}

// -- helpers ------------------------------------------------------------------

std::string header_or_absent(const recorded_request& r,
                             const std::string& name) {
  if (auto v = find_header(r.headers, name))
    return *v;
  return "<absent>";
}

std::size_t count_method(const std::vector<recorded_request>& rs,
                         const std::string& method) {
  std::size_t n = 0;
  for (const auto& r : rs)
    if (r.method == method)
      ++n;
  return n;
}

namespace {

uint32_t crc32(const std::string& data) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k)
        c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : data)
    c = table[(c ^ b) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

void put_le32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    out += static_cast<char>((v >> (8 * i)) & 0xFF);
}

} // namespace

std::string gzip(const std::string& data) {
  namespace zlib = boost::beast::zlib;
  zlib::deflate_stream ds;
  ds.reset(9, 15, 8, zlib::Strategy::normal);
  std::string deflated(ds.upper_bound(data.size()) + 64, '\0');
  zlib::z_params zs;
  zs.next_in = data.data();
  zs.avail_in = data.size();
  zs.next_out = &deflated[0];
  zs.avail_out = deflated.size();
  boost::system::error_code ec;
  ds.write(zs, zlib::Flush::finish, ec);
  deflated.resize(zs.total_out);
  // RFC 1952 member: magic, CM=deflate, no flags, no mtime, XFL, OS=unix.
  std::string out{"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\x03", 10};
  out += deflated;
  put_le32(out, crc32(data));
  put_le32(out, static_cast<uint32_t>(data.size()));
  return out;
}

} // namespace outbound::testing
