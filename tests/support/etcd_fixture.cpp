#include "tests/support/etcd_fixture.hpp"

#include "tests/support/child_process.hpp"
#include "tests/support/nginx_fixture.hpp" // raw_http_exchange
#include "tests/support/ports.hpp"

#include <openssl/evp.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

extern char** environ;

namespace outbound::testing {

namespace {

using namespace std::chrono_literals;

std::string tail_of(const std::string& text, std::size_t n) {
  return text.size() <= n ? text : "..." + text.substr(text.size() - n);
}

bool executable(const std::string& path) {
  return !path.empty() && ::access(path.c_str(), X_OK) == 0;
}

} // namespace

std::string find_etcd() {
  if (const char* env = std::getenv("OUTBOUND_ETCD"); env && *env)
    return executable(env) ? std::string{env} : std::string{};
  return find_program("etcd", "OUTBOUND_ETCD", {"/usr/bin/etcd"});
}

etcd_instance::etcd_instance(const std::string& etcd_binary)
  : dir_{"outbound-etcd-"} {
  std::string why;
  for (int i = 0; i < 3; ++i)
    if (try_start(etcd_binary, why))
      return;
  throw std::runtime_error("etcd did not start: " + why);
}

etcd_instance::~etcd_instance() {
  stop();
}

std::string etcd_instance::base_url() const {
  return "http://127.0.0.1:" + std::to_string(client_);
}

std::string etcd_instance::data_dir() const {
  return dir_.file("data");
}

std::string etcd_instance::log() const {
  return slurp(dir_.file("etcd.log"));
}

bool etcd_instance::healthy() const {
  try {
    auto r = raw_http_exchange(client_, "GET /health HTTP/1.1\r\n"
                                        "Host: 127.0.0.1\r\n"
                                        "Connection: close\r\n\r\n");
    return r.rfind("HTTP/1.1 200", 0) == 0
           && r.find("{\"health\":\"true\"}") != std::string::npos;
  } catch (const std::exception&) {
    return false; // not listening yet
  }
}

bool etcd_instance::try_start(const std::string& etcd_binary,
                              std::string& why) {
  auto ports = closed_ports(2);
  client_ = ports[0];
  peer_ = ports[1];
  // A fresh data directory per attempt: a failed start may leave a member
  // directory bound to the old peer URL behind.
  std::error_code ec;
  std::filesystem::remove_all(data_dir(), ec);
  auto client_url = base_url();
  auto peer_url = "http://127.0.0.1:" + std::to_string(peer_);
  std::vector<std::string> argv{etcd_binary,
                                "--name",
                                "outbound-test",
                                "--data-dir",
                                data_dir(),
                                "--listen-client-urls",
                                client_url,
                                "--advertise-client-urls",
                                client_url,
                                "--listen-peer-urls",
                                peer_url,
                                "--initial-advertise-peer-urls",
                                peer_url,
                                "--initial-cluster",
                                "outbound-test=" + peer_url,
                                "--initial-cluster-state",
                                "new",
                                "--logger",
                                "zap",
                                "--log-outputs",
                                "stderr"};
  // etcd also reads ETCD_* variables and refuses to start when one shadows
  // a flag: the child gets this environment without them.
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "ETCD_", 5) != 0)
      env.emplace_back(*e);
  auto log_path = dir_.file("etcd.log");
  // Tied to this process (spawn_tied_child, as the nginx fixture): if the
  // test process dies without tearing down, etcd dies with it instead of
  // staying on its ports.
  auto pid = spawn_tied_child(argv, log_path, env);
  pid_ = pid;
  auto deadline = std::chrono::steady_clock::now() + 20s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (auto code = wait_child(pid_, 0ms)) {
      pid_ = -1;
      why = "etcd exited early (code " + std::to_string(*code) + "):\n"
            + tail_of(log(), 4000);
      return false;
    }
    if (healthy())
      return true;
    std::this_thread::sleep_for(20ms);
  }
  stop();
  throw std::runtime_error("etcd did not answer /health within 20 s:\n"
                           + tail_of(log(), 4000));
}

void etcd_instance::stop() {
  if (pid_ <= 0)
    return;
  ::kill(pid_, SIGTERM);
  if (!wait_child(pid_, 5s)) {
    ::kill(pid_, SIGKILL);
    wait_child(pid_, 30s);
  }
  pid_ = -1;
}

std::string base64_encode(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  auto n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                           reinterpret_cast<const unsigned char*>(bytes.data()),
                           static_cast<int>(bytes.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

std::string base64_decode(std::string_view text) {
  if (text.size() % 4 != 0)
    throw std::invalid_argument("base64: length is not a multiple of 4");
  std::string out(3 * (text.size() / 4) + 1, '\0');
  auto n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                           reinterpret_cast<const unsigned char*>(text.data()),
                           static_cast<int>(text.size()));
  if (n < 0)
    throw std::invalid_argument("base64: not standard base64");
  // EVP_DecodeBlock counts the padding as zero bytes.
  std::size_t pad = 0;
  if (!text.empty() && text.back() == '=')
    ++pad;
  if (text.size() > 1 && text[text.size() - 2] == '=')
    ++pad;
  out.resize(static_cast<std::size_t>(n) - pad);
  return out;
}

std::string prefix_range_end(std::string prefix) {
  for (auto i = prefix.size(); i-- > 0;) {
    auto c = static_cast<unsigned char>(prefix[i]);
    if (c < 0xff) {
      prefix[i] = static_cast<char>(c + 1);
      prefix.resize(i + 1);
      return prefix;
    }
  }
  return std::string(1, '\0');
}

std::unique_ptr<etcd_instance> start_suite_etcd(std::string& error) {
  error.clear();
  auto bin = find_etcd();
  if (bin.empty()) {
    error = "etcd binary not found: install etcd-server "
            "(scripts/install-deps.sh) or set OUTBOUND_ETCD to the path of "
            "an etcd 3.4 binary";
    return nullptr;
  }
  try {
    return std::make_unique<etcd_instance>(bin);
  } catch (const std::exception& e) {
    error = e.what();
    return nullptr;
  }
}

} // namespace outbound::testing
