#include "tests/support/nginx_fixture.hpp"

#include "tests/support/child_process.hpp"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

namespace outbound::testing {

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::string read_all(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out{path, std::ios::binary | std::ios::trunc};
  out << text;
  if (!out)
    throw std::runtime_error("cannot write " + path);
}

sockaddr_in loopback(uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

// Binds `n` sockets to 127.0.0.1:0 at once (so the ports differ), reads
// their ports and closes them. nginx binds them a moment later; should
// another process grab one in between, nginx fails to start and the caller
// picks again.
std::vector<uint16_t> free_ports(std::size_t n) {
  std::vector<int> fds;
  std::vector<uint16_t> ports;
  for (std::size_t i = 0; i < n; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    auto a = loopback(0);
    socklen_t len = sizeof(a);
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0
        || ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      auto err = std::string{std::strerror(errno)};
      if (fd >= 0)
        ::close(fd);
      for (int f : fds)
        ::close(f);
      throw std::runtime_error("cannot pick a free port: " + err);
    }
    fds.push_back(fd);
    ports.push_back(ntohs(a.sin_port));
  }
  for (int f : fds)
    ::close(f);
  return ports;
}

bool port_accepts(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    return false;
  auto a = loopback(port);
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  ::close(fd);
  return ok;
}

std::string json_rows(std::size_t rows) {
  std::string s = "{\"rows\":[";
  for (std::size_t i = 0; i < rows; ++i) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%s{\"i\":%zu,\"v\":\"row-%05zu\"}",
                  i ? "," : "", i, i);
    s += buf;
  }
  s += "],\"count\":" + std::to_string(rows) + "}";
  return s;
}

// nginx configuration shared by every server block. `@@MARKER@@` never
// occurs in a body: the sub_filter only exists to make nginx drop the
// Content-Length of a static file, so that HTTP/1.1 responses go out with
// Transfer-Encoding: chunked (stock Debian modules, no echo module needed);
// output_buffers 1k makes the file go out in 1 KiB chunks.
// With an upstream (a feed hub), its replay, cursor, admin and WebSocket
// paths are proxied to it over HTTP/1.1, WebSocket upgrades included.
std::string hub_proxy_conf(uint16_t upstream_port) {
  if (upstream_port == 0)
    return "";
  auto up = "http://127.0.0.1:" + std::to_string(upstream_port);
  std::string plain = "    proxy_http_version 1.1;\n"
                      "    proxy_set_header Connection \"\";\n";
  return "location /v1/events {\n    proxy_pass " + up + ";\n" + plain
         + "}\n"
           "location = /v1/cursor {\n    proxy_pass "
         + up + ";\n" + plain
         + "}\n"
           "location /admin/ {\n    proxy_pass "
         + up + ";\n" + plain
         + "}\n"
           "location /ws/ {\n    proxy_pass "
         + up
         + ";\n"
           "    proxy_http_version 1.1;\n"
           "    proxy_set_header Upgrade $http_upgrade;\n"
           "    proxy_set_header Connection \"upgrade\";\n"
           "    proxy_read_timeout 1h;\n"
           "    proxy_send_timeout 1h;\n"
           "}\n";
}

std::string routes_conf(const std::string& html, uint16_t redirect_port,
                        uint16_t upstream_port) {
  std::string chunked = "    chunked_transfer_encoding on;\n"
                        "    sub_filter_types application/json;\n"
                        "    sub_filter '@@MARKER@@' '';\n"
                        "    sub_filter_once off;\n"
                        "    output_buffers 4 1k;\n";
  return "root " + html
         + ";\n"
           "location = /v1/items.json { }\n"
           "location = /v1/empty { return 204; }\n"
           "location = /v1/text { default_type text/plain; "
           "return 200 'hello, not json'; }\n"
           "location = /v1/query { return 200 '{\"query\":\"$args\"}'; }\n"
           "location = /v1/nope { return 404 '{\"detail\":\"nope\"}'; }\n"
           "location = /v1/unauthorized { "
           "return 401 '{\"detail\":\"bad token\"}'; }\n"
           "location = /v1/forbidden { return 403 '{\"detail\":\"no grant\"}'; "
           "}\n"
           "location = /v1/boom { return 500 '{\"detail\":\"boom\"}'; }\n"
           "location = /v1/unavailable { "
           "return 503 '{\"detail\":\"maintenance\"}'; }\n"
           "location = /v1/redirect { return 302 http://127.0.0.1:"
         + std::to_string(redirect_port)
         + "/v1/items.json; }\n"
           "location = /v1/chunked.json {\n"
         + chunked
         + "}\n"
           "location = /v1/big.json { }\n"
           "location = /v1/big-chunked.json {\n"
           "    alias "
         + html + "/v1/big.json;\n" + chunked
         + "}\n"
           "location = /v1/big-error { error_page 500 /v1/big.json; "
           "return 500; }\n"
           // Connection life cycle: nginx closes an idle keep-alive
           // connection 100 ms after this answer; keepalive_timeout 0 answers
           // with Connection: close; limit_rate trickles 64 KiB at 256 B/s.
           "location = /v1/short-idle.json { alias "
         + html
         + "/v1/items.json; keepalive_timeout 100ms; }\n"
           "location = /v1/close.json { alias "
         + html
         + "/v1/items.json; keepalive_timeout 0; }\n"
           "location = /v1/slow.json { alias "
         + html
         + "/v1/big.json; limit_rate 256; }\n"
           "location / { return 404 '{\"detail\":\"no route\"}'; }\n"
         + hub_proxy_conf(upstream_port);
}

std::string nginx_conf(const std::string& prefix, const test_pki& pki,
                       uint16_t http, uint16_t tls, uint16_t mtls,
                       uint16_t tls_dns) {
  auto routes = "include " + prefix + "/routes.conf;\n";
  auto tls_server = [&](uint16_t port, const cert_files& id,
                        const std::string& extra) {
    return "server {\n  listen 127.0.0.1:" + std::to_string(port)
           + " ssl;\n  ssl_certificate " + id.cert + ";\n  ssl_certificate_key "
           + id.key + ";\n" + extra + routes + "}\n";
  };
  std::string tmp = prefix + "/tmp";
  return "daemon off;\n"
         "master_process off;\n"
         "pid "
         + prefix
         + "/nginx.pid;\n"
           "error_log "
         + prefix
         + "/logs/error.log info;\n"
           "events { worker_connections 512; }\n"
           "http {\n"
           "  log_format outbound '$server_port|$request_method|$request_uri|"
           "$status|$http_x_request_id|$http_x_retry_count|"
           "$http_authorization|$ssl_client_verify|$connection|"
           "$connection_requests';\n"
           "  access_log "
         + prefix
         + "/logs/access.log outbound;\n"
           "  client_body_temp_path "
         + tmp
         + "/body;\n"
           "  proxy_temp_path "
         + tmp
         + "/proxy;\n"
           "  fastcgi_temp_path "
         + tmp
         + "/fastcgi;\n"
           "  uwsgi_temp_path "
         + tmp
         + "/uwsgi;\n"
           "  scgi_temp_path "
         + tmp
         + "/scgi;\n"
           "  types { application/json json; }\n"
           "  default_type application/json;\n"
           "  gzip off;\n"
           "  server {\n  listen 127.0.0.1:"
         + std::to_string(http) + ";\n" + routes + "}\n"
         + tls_server(tls, pki.server, "")
         + tls_server(mtls, pki.server,
                      "  ssl_verify_client on;\n  ssl_client_certificate "
                        + pki.ca_a.cert + ";\n  ssl_verify_depth 2;\n")
         + tls_server(tls_dns, pki.server_dns, "") + "}\n";
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

} // namespace

// -- connection_sink ----------------------------------------------------------

connection_sink::connection_sink() {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  auto a = loopback(0);
  socklen_t len = sizeof(a);
  if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0
      || ::listen(fd_, 64) != 0
      || ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    auto err = std::string{std::strerror(errno)};
    if (fd_ >= 0)
      ::close(fd_);
    throw std::runtime_error("connection_sink: cannot listen: " + err);
  }
  port_ = ntohs(a.sin_port);
}

connection_sink::~connection_sink() {
  if (fd_ >= 0)
    ::close(fd_);
}

std::size_t connection_sink::connections() {
  for (;;) {
    int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0)
      break;
    ::close(c);
    ++seen_;
  }
  return seen_;
}

// -- nginx_instance -----------------------------------------------------------

const std::string nginx_instance::items_body
  = R"({"items":[{"id":1,"name":"alpha"},{"id":2,"name":"beta"}],"total":2})";

std::string nginx_instance::chunked_body() {
  return json_rows(800);
}

std::string nginx_instance::big_body() {
  std::string head = "{\"pad\":\"";
  std::string tail = "\"}";
  return head + std::string(65536 - head.size() - tail.size(), 'x') + tail;
}

nginx_instance::nginx_instance(const std::string& nginx_binary,
                               const std::string& prefix_dir,
                               const test_pki& pki, uint16_t redirect_port,
                               uint16_t upstream_port)
  : prefix_(prefix_dir) {
  for (auto d : {"/logs", "/tmp", "/html", "/html/v1"})
    fs::create_directories(prefix_ + d);
  auto html = prefix_ + "/html";
  write_file(html + "/v1/items.json", items_body);
  write_file(html + "/v1/chunked.json", chunked_body());
  write_file(html + "/v1/big.json", big_body());
  write_file(prefix_ + "/routes.conf",
             routes_conf(html, redirect_port, upstream_port));
  std::string why;
  for (int i = 0; i < 3; ++i)
    if (try_start(nginx_binary, pki, redirect_port, why))
      return;
  throw std::runtime_error("nginx did not start: " + why);
}

bool nginx_instance::try_start(const std::string& nginx_binary,
                               const test_pki& pki, uint16_t,
                               std::string& why) {
  auto ports = free_ports(4);
  http_ = ports[0];
  tls_ = ports[1];
  mtls_ = ports[2];
  tls_dns_ = ports[3];
  auto conf = prefix_ + "/nginx.conf";
  write_file(conf, nginx_conf(prefix_, pki, http_, tls_, mtls_, tls_dns_));
  auto out = prefix_ + "/logs/stderr.log";
  // -e: the startup error log, before the config is read (default
  // /var/log/nginx/error.log).
  std::vector<std::string> argv{nginx_binary,
                                "-p",
                                prefix_ + "/",
                                "-c",
                                conf,
                                "-e",
                                prefix_ + "/logs/error.log"};
  // Tied to this process (spawn_tied_child): if the test process dies
  // without tearing down (a crash, a ctest timeout), nginx is killed with
  // it instead of staying behind on its ports.
  auto pid = spawn_tied_child(argv, out);
  pid_ = pid;
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      why = "nginx exited early:\n" + read_all(out) + error_log();
      return false;
    }
    if (port_accepts(http_) && port_accepts(tls_) && port_accepts(mtls_)
        && port_accepts(tls_dns_))
      return true;
    std::this_thread::sleep_for(20ms);
  }
  stop();
  throw std::runtime_error("nginx did not accept within 10 s:\n" + read_all(out)
                           + error_log());
}

nginx_instance::~nginx_instance() {
  stop();
}

void nginx_instance::stop() {
  if (pid_ <= 0)
    return;
  ::kill(pid_, SIGQUIT);
  auto deadline = std::chrono::steady_clock::now() + 5s;
  for (;;) {
    int status = 0;
    auto r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_ || (r < 0 && errno != EINTR))
      break;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(10ms);
  }
  pid_ = -1;
}

uint16_t nginx_instance::port(nginx_listener l) const {
  switch (l) {
    case nginx_listener::http: return http_;
    case nginx_listener::tls: return tls_;
    case nginx_listener::mtls: return mtls_;
    case nginx_listener::tls_dns: return tls_dns_;
  }
  return 0;
}

std::string nginx_instance::base_url(nginx_listener l) const {
  return std::string{l == nginx_listener::http ? "http" : "https"}
         + "://127.0.0.1:" + std::to_string(port(l));
}

std::vector<access_entry> nginx_instance::access_log() const {
  std::vector<access_entry> out;
  std::istringstream in{read_all(prefix_ + "/logs/access.log")};
  std::string line;
  while (std::getline(in, line)) {
    auto f = split(line, '|');
    if (f.size() != 10)
      continue;
    access_entry e;
    e.server_port = static_cast<uint16_t>(std::stoi(f[0]));
    e.method = f[1];
    e.uri = f[2];
    e.status = std::stoi(f[3]);
    e.request_id = f[4];
    e.retry_count = f[5];
    e.authorization = f[6];
    e.client_verify = f[7];
    e.connection = std::stoull(f[8]);
    e.connection_requests = std::stoull(f[9]);
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<access_entry>
nginx_instance::requests_with_id(const std::string& id, std::size_t at_least,
                                 std::chrono::milliseconds wait) const {
  auto select = [&] {
    std::vector<access_entry> out;
    for (auto& e : access_log())
      if (e.request_id == id)
        out.push_back(e);
    return out;
  };
  auto deadline = std::chrono::steady_clock::now() + wait;
  while (select().size() < at_least
         && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  std::this_thread::sleep_for(50ms);
  return select();
}

std::string nginx_instance::error_log() const {
  return read_all(prefix_ + "/logs/error.log");
}

std::string raw_http_exchange(uint16_t port, const std::string& request) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    throw std::runtime_error("socket() failed");
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  auto a = loopback(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    throw std::runtime_error("connect to port " + std::to_string(port)
                             + " failed");
  }
  std::size_t off = 0;
  while (off < request.size()) {
    auto n
      = ::send(fd, request.data() + off, request.size() - off, MSG_NOSIGNAL);
    if (n <= 0)
      break;
    off += static_cast<std::size_t>(n);
  }
  std::string out;
  char buf[16384];
  for (;;) {
    auto n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0)
      break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

} // namespace outbound::testing
