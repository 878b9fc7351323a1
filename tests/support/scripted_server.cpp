#include "tests/support/scripted_server.hpp"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <openssl/ssl.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <strings.h>

namespace outbound::testing {

namespace {

using clock_type = std::chrono::steady_clock;
constexpr auto poll_slice = std::chrono::milliseconds{10};

void set_nonblocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

std::string openssl_error_text() {
  unsigned long e = ERR_get_error();
  if (e == 0)
    return "unknown OpenSSL error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  ERR_clear_error();
  return buf;
}

} // namespace

/// One accepted connection: its socket, its TLS object, its read buffer.
struct scripted_server::conn_state {
  int fd = -1;
  SSL* ssl = nullptr;
  std::string buf;        // received, not yet consumed by a step
  long last_request = -1; // index into requests_ of this connection's last
  bool eof = false;

  ~conn_state() {
    if (ssl)
      SSL_free(ssl);
    if (fd >= 0)
      ::close(fd);
  }
};

scripted_server::scripted_server(std::vector<script> scripts, script fallback,
                                 server_tls tls)
  : scripts_(std::move(scripts)), fallback_(std::move(fallback)) {
  if (!tls.cert_file.empty() || !tls.key_file.empty()) {
    auto* ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx)
      throw std::runtime_error("scripted_server: SSL_CTX_new failed");
    ssl_ctx_ = ctx;
    if (SSL_CTX_use_certificate_chain_file(ctx, tls.cert_file.c_str()) != 1
        || SSL_CTX_use_PrivateKey_file(ctx, tls.key_file.c_str(),
                                       SSL_FILETYPE_PEM)
             != 1) {
      auto why = openssl_error_text();
      SSL_CTX_free(ctx);
      ssl_ctx_ = nullptr;
      throw std::runtime_error("scripted_server: cannot load TLS identity: "
                               + why);
    }
    if (!tls.client_ca_file.empty()) {
      if (SSL_CTX_load_verify_locations(ctx, tls.client_ca_file.c_str(),
                                        nullptr)
          != 1) {
        auto why = openssl_error_text();
        SSL_CTX_free(ctx);
        ssl_ctx_ = nullptr;
        throw std::runtime_error("scripted_server: cannot load client CA: "
                                 + why);
      }
      SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
                         nullptr);
    }
  }
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0)
    throw std::runtime_error("scripted_server: socket() failed");
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0
      || ::listen(listen_fd_, 64) != 0) {
    auto why = std::string{std::strerror(errno)};
    ::close(listen_fd_);
    if (ssl_ctx_)
      SSL_CTX_free(static_cast<SSL_CTX*>(ssl_ctx_));
    throw std::runtime_error("scripted_server: cannot listen: " + why);
  }
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  set_nonblocking(listen_fd_);
  acceptor_ = std::thread([this] { accept_loop(); });
}

scripted_server::~scripted_server() {
  stop();
  if (ssl_ctx_)
    SSL_CTX_free(static_cast<SSL_CTX*>(ssl_ctx_));
}

void scripted_server::stop() {
  stopping_.store(true);
  if (acceptor_.joinable())
    acceptor_.join();
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    threads.swap(conn_threads_);
  }
  for (auto& t : threads)
    if (t.joinable())
      t.join();
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
    listen_fd_ = -1;
  }
  cv_.notify_all();
}

std::string scripted_server::base_url() const {
  return std::string{ssl_ctx_ ? "https" : "http"}
         + "://127.0.0.1:" + std::to_string(port_);
}

std::size_t scripted_server::connections() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return records_.size();
}

std::vector<recorded_request> scripted_server::requests() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return requests_;
}

connection_record scripted_server::connection(std::size_t i) const {
  std::lock_guard<std::mutex> guard{mtx_};
  return i < records_.size() ? records_[i] : connection_record{};
}

bool scripted_server::wait(const std::function<bool()>& pred,
                           std::chrono::milliseconds t) {
  std::unique_lock<std::mutex> guard{mtx_};
  return cv_.wait_for(guard, t, pred);
}

bool scripted_server::wait_for_connections(std::size_t n,
                                           std::chrono::milliseconds t) {
  return wait([&] { return records_.size() >= n; }, t);
}

bool scripted_server::wait_for_requests(std::size_t n,
                                        std::chrono::milliseconds t) {
  return wait([&] { return requests_.size() >= n; }, t);
}

bool scripted_server::wait_for_peer_close(std::size_t i,
                                          std::chrono::milliseconds t) {
  return wait([&] { return i < records_.size() && records_[i].peer_closed; },
              t);
}

bool scripted_server::wait_for_steps(std::size_t i, std::size_t n,
                                     std::chrono::milliseconds t) {
  return wait(
    [&] { return i < records_.size() && records_[i].steps_done >= n; }, t);
}

bool scripted_server::wait_for_finished(std::size_t i,
                                        std::chrono::milliseconds t) {
  return wait([&] { return i < records_.size() && records_[i].finished; }, t);
}

void scripted_server::accept_loop() {
  while (!stopping_.load()) {
    pollfd p{listen_fd_, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(poll_slice.count()));
    if (r <= 0)
      continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0)
      continue;
    set_nonblocking(fd);
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    std::lock_guard<std::mutex> guard{mtx_};
    auto index = records_.size();
    records_.emplace_back();
    conn_threads_.emplace_back(
      [this, index, fd] { run_connection(index, fd); });
    cv_.notify_all();
  }
}

namespace {

/// Result of waiting for a socket.
enum class ready { yes, timeout, stopping };

ready wait_fd(int fd, short events, clock_type::time_point deadline,
              const std::atomic<bool>& stopping) {
  for (;;) {
    if (stopping.load())
      return ready::stopping;
    auto now = clock_type::now();
    if (now >= deadline)
      return ready::timeout;
    auto left
      = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    auto slice = std::min<std::chrono::milliseconds>(
      left + std::chrono::milliseconds{1}, poll_slice);
    pollfd p{fd, events, 0};
    int r = ::poll(&p, 1, static_cast<int>(slice.count()));
    if (r > 0)
      return ready::yes;
  }
}

/// Sleeps up to `d`, in slices, returning early (false) when stopping.
bool sleep_for(std::chrono::milliseconds d, const std::atomic<bool>& stopping) {
  auto deadline = clock_type::now() + d;
  while (!stopping.load()) {
    auto now = clock_type::now();
    if (now >= deadline)
      return true;
    std::this_thread::sleep_for(
      std::min<clock_type::duration>(deadline - now, poll_slice));
  }
  return false;
}

/// Outcome of one low-level read.
enum class read_status { data, eof, timeout, stopping, error };

} // namespace

void scripted_server::run_connection(std::size_t index, int fd) {
  conn_state c;
  c.fd = fd;
  std::string failure;
  // Recorded at once, so that wait_for_peer_close sees it while the script
  // is still running.
  auto note_peer_closed = [&] {
    std::lock_guard<std::mutex> guard{mtx_};
    records_[index].peer_closed = true;
    cv_.notify_all();
  };
  auto step_deadline = [this] {
    return clock_type::now()
           + std::chrono::milliseconds{step_timeout_ms_.load()};
  };

  // Reads what is available (waiting until `deadline`) into c.buf.
  auto read_some = [&](clock_type::time_point deadline) -> read_status {
    char tmp[16 * 1024];
    for (;;) {
      if (c.ssl && SSL_pending(c.ssl) > 0) {
        int n = SSL_read(c.ssl, tmp, sizeof(tmp));
        if (n > 0) {
          c.buf.append(tmp, static_cast<std::size_t>(n));
          return read_status::data;
        }
      }
      switch (wait_fd(c.fd, POLLIN, deadline, stopping_)) {
        case ready::timeout: return read_status::timeout;
        case ready::stopping: return read_status::stopping;
        case ready::yes: break;
      }
      if (c.ssl) {
        ERR_clear_error();
        int n = SSL_read(c.ssl, tmp, sizeof(tmp));
        if (n > 0) {
          c.buf.append(tmp, static_cast<std::size_t>(n));
          return read_status::data;
        }
        int err = SSL_get_error(c.ssl, n);
        if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE)
          continue;
        c.eof = true;
        return err == SSL_ERROR_ZERO_RETURN ? read_status::eof
                                            : read_status::error;
      }
      auto n = ::recv(c.fd, tmp, sizeof(tmp), 0);
      if (n > 0) {
        c.buf.append(tmp, static_cast<std::size_t>(n));
        return read_status::data;
      }
      if (n == 0) {
        c.eof = true;
        return read_status::eof;
      }
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
        continue;
      c.eof = true;
      return read_status::error;
    }
  };

  // Writes all of `data`; false on error or stop.
  auto write_all = [&](const char* data, std::size_t size) -> bool {
    std::size_t off = 0;
    auto deadline = step_deadline();
    while (off < size) {
      if (c.ssl) {
        ERR_clear_error();
        int n = SSL_write(c.ssl, data + off, static_cast<int>(size - off));
        if (n > 0) {
          off += static_cast<std::size_t>(n);
          continue;
        }
        int err = SSL_get_error(c.ssl, n);
        short ev = err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
        if (err != SSL_ERROR_WANT_READ && err != SSL_ERROR_WANT_WRITE)
          return false;
        if (wait_fd(c.fd, ev, deadline, stopping_) != ready::yes)
          return false;
        continue;
      }
      auto n = ::send(c.fd, data + off, size - off, MSG_NOSIGNAL);
      if (n > 0) {
        off += static_cast<std::size_t>(n);
        continue;
      }
      if (n < 0
          && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        if (wait_fd(c.fd, POLLOUT, deadline, stopping_) != ready::yes)
          return false;
        continue;
      }
      return false;
    }
    return true;
  };

  auto status_text = [](read_status s) {
    switch (s) {
      case read_status::eof: return "peer closed";
      case read_status::timeout: return "timed out";
      case read_status::stopping: return "server stopping";
      case read_status::error: return "read error";
      default: return "data";
    }
  };

  // Appends a request record for this connection; returns its index.
  auto new_request = [&]() -> std::size_t {
    std::lock_guard<std::mutex> guard{mtx_};
    recorded_request r;
    r.connection = index;
    requests_.push_back(std::move(r));
    c.last_request = static_cast<long>(requests_.size() - 1);
    cv_.notify_all();
    return requests_.size() - 1;
  };

  // Reads one request header (and its Content-Length body if `with_body`).
  auto read_request = [&](bool with_body) -> bool {
    auto deadline = step_deadline();
    std::size_t head_end;
    while ((head_end = c.buf.find("\r\n\r\n")) == std::string::npos) {
      auto s = read_some(deadline);
      if (s != read_status::data) {
        if (!c.buf.empty()) {
          auto i = new_request();
          std::lock_guard<std::mutex> guard{mtx_};
          requests_[i].raw = c.buf;
          c.buf.clear();
        }
        if (s == read_status::eof || s == read_status::error)
          note_peer_closed();
        failure = std::string{"read_request: "} + status_text(s);
        return false;
      }
    }
    recorded_request r;
    r.connection = index;
    std::string head = c.buf.substr(0, head_end + 4);
    c.buf.erase(0, head_end + 4);
    r.raw = head;
    auto line_end = head.find("\r\n");
    auto line = head.substr(0, line_end);
    auto sp1 = line.find(' ');
    auto sp2 = line.find(' ', sp1 == std::string::npos ? 0 : sp1 + 1);
    if (sp1 != std::string::npos && sp2 != std::string::npos) {
      r.method = line.substr(0, sp1);
      r.target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    }
    std::size_t pos = line_end + 2;
    std::size_t content_length = 0;
    while (pos < head_end + 2) {
      auto eol = head.find("\r\n", pos);
      auto field = head.substr(pos, eol - pos);
      pos = eol + 2;
      auto colon = field.find(':');
      if (colon == std::string::npos)
        continue;
      auto name = field.substr(0, colon);
      auto value = field.substr(colon + 1);
      auto first = value.find_first_not_of(" \t");
      value = first == std::string::npos ? std::string{} : value.substr(first);
      while (!value.empty() && (value.back() == ' ' || value.back() == '\t'))
        value.pop_back();
      if (::strcasecmp(name.c_str(), "Content-Length") == 0)
        content_length = std::strtoull(value.c_str(), nullptr, 10);
      r.headers.emplace_back(std::move(name), std::move(value));
    }
    r.complete = true;
    bool ok = true;
    if (with_body) {
      while (c.buf.size() < content_length) {
        auto s = read_some(deadline);
        if (s != read_status::data) {
          if (s == read_status::eof || s == read_status::error)
            note_peer_closed();
          failure = std::string{"read_request body: "} + status_text(s);
          ok = false;
          r.complete = false;
          break;
        }
      }
      auto n = std::min(content_length, c.buf.size());
      r.body = c.buf.substr(0, n);
      r.raw += r.body;
      c.buf.erase(0, n);
    }
    std::lock_guard<std::mutex> guard{mtx_};
    requests_.push_back(std::move(r));
    c.last_request = static_cast<long>(requests_.size() - 1);
    cv_.notify_all();
    return ok;
  };

  auto read_bytes = [&](std::size_t n) -> bool {
    auto deadline = step_deadline();
    bool ok = true;
    while (c.buf.size() < n) {
      auto s = read_some(deadline);
      if (s != read_status::data) {
        if (s == read_status::eof || s == read_status::error)
          note_peer_closed();
        failure = std::string{"read_bytes: "} + status_text(s);
        ok = false;
        break;
      }
    }
    auto take = std::min(n, c.buf.size());
    if (c.last_request < 0)
      new_request();
    std::lock_guard<std::mutex> guard{mtx_};
    auto& r = requests_[static_cast<std::size_t>(c.last_request)];
    r.body += c.buf.substr(0, take);
    r.raw += c.buf.substr(0, take);
    c.buf.erase(0, take);
    cv_.notify_all();
    return ok;
  };

  auto abort_connection = [&] {
    linger l{1, 0};
    ::setsockopt(c.fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    ::close(c.fd);
    c.fd = -1;
  };

  auto close_connection = [&] {
    if (c.ssl)
      SSL_shutdown(c.ssl); // close_notify, best effort (non-blocking)
    ::close(c.fd);
    c.fd = -1;
  };

  // TLS handshake first, bounded by the step timeout.
  bool ok = true;
  if (ssl_ctx_) {
    c.ssl = SSL_new(static_cast<SSL_CTX*>(ssl_ctx_));
    SSL_set_fd(c.ssl, c.fd);
    auto deadline = step_deadline();
    for (;;) {
      ERR_clear_error();
      int r = SSL_accept(c.ssl);
      if (r == 1)
        break;
      int err = SSL_get_error(c.ssl, r);
      if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
        short ev = err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
        if (wait_fd(c.fd, ev, deadline, stopping_) == ready::yes)
          continue;
        failure = "TLS handshake timed out";
      } else {
        failure = "TLS handshake failed: " + openssl_error_text();
      }
      ok = false;
      break;
    }
  }

  const script& steps = index < scripts_.size() ? scripts_[index] : fallback_;
  bool ended = false; // socket closed or reset by a step
  for (std::size_t i = 0; ok && i < steps.size() && !stopping_.load(); ++i) {
    const auto& s = steps[i];
    switch (s.what) {
      case step::kind::read_request: ok = read_request(true); break;
      case step::kind::read_head: ok = read_request(false); break;
      case step::kind::read_bytes: ok = read_bytes(s.count); break;
      case step::kind::send:
        ok = write_all(s.bytes.data(), s.bytes.size());
        if (!ok)
          failure = "send failed";
        break;
      case step::kind::trickle:
        for (std::size_t k = 0; ok && k < s.bytes.size(); ++k) {
          if (k > 0 && !sleep_for(s.delay, stopping_)) {
            ok = false;
            failure = "trickle: server stopping";
            break;
          }
          ok = write_all(s.bytes.data() + k, 1);
          if (!ok)
            failure
              = "trickle: send failed after " + std::to_string(k) + " bytes";
        }
        break;
      case step::kind::sleep: ok = sleep_for(s.delay, stopping_); break;
      case step::kind::close:
        close_connection();
        ended = true;
        break;
      case step::kind::reset:
        abort_connection();
        ended = true;
        break;
      case step::kind::ws_accept: {
        std::string key;
        {
          std::lock_guard<std::mutex> guard{mtx_};
          if (c.last_request >= 0)
            for (const auto& [name, value] :
                 requests_[static_cast<std::size_t>(c.last_request)].headers)
              if (::strcasecmp(name.c_str(), "Sec-WebSocket-Key") == 0)
                key = value;
        }
        auto out = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                   "Connection: Upgrade\r\nSec-WebSocket-Accept: "
                   + ws_accept_value(key) + "\r\n" + s.bytes + "\r\n" + s.tail;
        ok = write_all(out.data(), out.size());
        if (!ok)
          failure = "ws_accept: send failed";
        break;
      }
      case step::kind::hold:
        for (;;) {
          auto st = read_some(clock_type::now() + std::chrono::hours{1});
          if (st == read_status::data)
            continue; // unexpected bytes are kept in the buffer, unanswered
          if (st == read_status::eof || st == read_status::error)
            note_peer_closed();
          break;
        }
        break;
    }
    if (ok) {
      std::lock_guard<std::mutex> guard{mtx_};
      records_[index].steps_done = i + 1;
      cv_.notify_all();
    }
    if (ended)
      break;
  }
  if (!ended && c.fd >= 0)
    close_connection();
  std::lock_guard<std::mutex> guard{mtx_};
  auto& rec = records_[index];
  rec.finished = true;
  rec.error = failure;
  cv_.notify_all();
}

std::string scripted_server::json_response(int status, const std::string& body,
                                           const std::string& extra_headers) {
  return "HTTP/1.1 " + std::to_string(status) + " " + reason(status)
         + "\r\nContent-Type: application/json\r\nContent-Length: "
         + std::to_string(body.size()) + "\r\n" + extra_headers + "\r\n" + body;
}

std::string scripted_server::chunked_head(int status) {
  return "HTTP/1.1 " + std::to_string(status) + " " + reason(status)
         + "\r\nContent-Type: application/json\r\nTransfer-Encoding: "
           "chunked\r\n\r\n";
}

std::string scripted_server::chunk(const std::string& data) {
  char hex[32];
  std::snprintf(hex, sizeof(hex), "%zx", data.size());
  return std::string{hex} + "\r\n" + data + "\r\n";
}

std::string scripted_server::ws_accept_value(const std::string& key) {
  auto in = key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
  unsigned char digest[SHA_DIGEST_LENGTH];
  SHA1(reinterpret_cast<const unsigned char*>(in.data()), in.size(), digest);
  unsigned char out[4 * ((SHA_DIGEST_LENGTH + 2) / 3) + 1];
  auto n = EVP_EncodeBlock(out, digest, SHA_DIGEST_LENGTH);
  return std::string{reinterpret_cast<const char*>(out),
                     static_cast<std::size_t>(n)};
}

const char* scripted_server::reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 201: return "Created";
    case 204: return "No Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 303: return "See Other";
    case 307: return "Temporary Redirect";
    case 308: return "Permanent Redirect";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "Status";
  }
}

std::string ws_frame_header(unsigned char b0, uint64_t len) {
  std::string out;
  out += static_cast<char>(b0);
  if (len < 126) {
    out += static_cast<char>(len);
  } else if (len <= 0xFFFF) {
    out += static_cast<char>(126);
    out += static_cast<char>((len >> 8) & 0xFF);
    out += static_cast<char>(len & 0xFF);
  } else {
    out += static_cast<char>(127);
    for (int i = 7; i >= 0; --i)
      out += static_cast<char>((len >> (8 * i)) & 0xFF);
  }
  return out;
}

std::string ws_frame(unsigned char b0, const std::string& payload) {
  return ws_frame_header(b0, payload.size()) + payload;
}

std::string ws_text(const std::string& payload) {
  return ws_frame(0x81, payload);
}

} // namespace outbound::testing
