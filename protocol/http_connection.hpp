#pragma once

// One keep-alive HTTP/1.1 connection (plain TCP or TLS) to one origin, the
// Beast way: one session object on its own strand, `shared_from_this`,
// `on_<step>` handlers, exactly one report per exchange. Beast,
// Asio and OpenSSL stay in protocol/http_connection*.cpp.
//
//            async_exchange                 done(result, reusable=true)
//   [idle] ───────────────► [exchanging] ──────────────────────────► [idle]
//     │ ▲                        │
//     │ └── (first use dials:    │ done(result, reusable=false), close(),
//     │      resolve, connect,   │ timeout, error
//     │      TLS handshake)      ▼
//     └──────── close() ──────► [closed]  (never reused)

#include "config/client_config.hpp"
#include "protocol/http_types.hpp"

#include <memory>

namespace outbound {
inline namespace protocol {

class io_runner;
class tls_context;

/// What receives an exchange's one report (http_connection::async_exchange).
/// An interface rather than a std::function so that an owner that keeps a
/// shared object per exchange anyway (the connection pool's reply slot) is
/// the completion itself: one allocation per exchange instead of two.
class exchange_handler {
public:
  virtual ~exchange_handler();

  /// Called exactly once per exchange, on an io thread. `reusable` is true
  /// only after a complete response on a connection that may carry another
  /// request (HTTP/1.1 keep-alive, no `Connection: close`, no unread bytes,
  /// no error, body not over the cap). Must not block.
  virtual void on_exchange_done(exchange_result result, bool reusable) = 0;
};

/// A completion that calls `f(exchange_result, bool reusable)`.
template <class F>
std::shared_ptr<exchange_handler> make_completion(F f) {
  struct fn final : exchange_handler {
    explicit fn(F&& g) : f(std::move(g)) {
    }
    void on_exchange_done(exchange_result result, bool reusable) override {
      f(std::move(result), reusable);
    }
    F f;
  };
  return std::make_shared<fn>(std::move(f));
}

/// One HTTP/1.1 connection to one origin, dialled lazily by the first
/// exchange and reused by later ones while it stays reusable.
///
/// Threading: `async_exchange` is called by the single owner (the pool
/// actor) while the connection is idle; `close` from any thread.
/// Everything else runs on the connection's strand on an io thread.
class http_connection {
public:
  /// The exchange's completion (see exchange_handler, make_completion).
  using completion = std::shared_ptr<exchange_handler>;

  /// A new, not yet connected connection to `origin` (scheme, host, port;
  /// the path is ignored). `tls` must be set for an https origin; if it is
  /// null there, a default context (system trust store) is built, which may
  /// throw config_error. `io` must outlive the connection's operations.
  static std::shared_ptr<http_connection>
  make(io_runner& io, const url_parts& origin,
       std::shared_ptr<tls_context> tls = nullptr);

  virtual ~http_connection();

  /// Runs one exchange: connect first if not connected yet (resolve unless
  /// the host is an IP literal, connect, TLS handshake with SNI and
  /// host-name / IP verification), write `req`, read the whole response.
  ///
  /// One absolute deadline, start + `req.timeout_ns`, bounds every step;
  /// arriving bytes do not extend it. Errors are values in `result.error`:
  /// `connect`, `local_resource` (EADDRNOTAVAIL / EADDRINUSE), `tls`,
  /// `not_sent` (a reused connection failed before any request byte was
  /// written, or was found unusable before the write: the server closed it
  /// or left bytes on it while it was idle — checked on the strand with a
  /// non-blocking `recv(MSG_PEEK)`; the completion is not reusable), `interrupted` (EOF, reset or malformed/truncated response),
  /// `too_large` (a 2xx body over `req.max_body_bytes`; not read; the
  /// 2xx stays in `response.status`),
  /// `timeout`, `config` (a header containing CR or LF). A non-2xx response
  /// whose body exceeds the cap is a success with `body_over_cap` set and an
  /// empty body. Redirects are returned, never followed. The `Host` and
  /// `Content-Length` headers are generated (copies in `req.headers` are
  /// dropped); all other headers are sent verbatim, in order.
  ///
  /// Precondition: the connection is idle (no exchange in flight, not
  /// closed). `done` runs on an io thread; it must not block.
  virtual void async_exchange(http_request req, completion done) = 0;

  /// Closes the socket at once (posted to the strand; thread-safe,
  /// idempotent). An exchange in flight completes with `timeout`
  /// ("cancelled"); the connection is never reused.
  virtual void close() = 0;

  /// True once connected (TLS handshake done) and until closed or broken.
  virtual bool connected() const = 0;

protected:
  http_connection() = default;
};

} // namespace protocol
} // namespace outbound
