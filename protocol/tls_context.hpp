#pragma once

// A client TLS context built once per client from its tls_config
// (docs/ARCHITECTURE.md, "TLS done properly"). No OpenSSL, Asio here; protocol/
// .cpp files reach the asio::ssl::context through detail/tls_context_impl.hpp.

#include "config/client_config.hpp"

#include <memory>
#include <string>

namespace outbound {
inline namespace protocol {

/// An immutable OpenSSL client context: TLS 1.2 or newer, peer verification
/// always on, the server verified by `ca_file` if set, else by the system
/// trust store; the client identity (`client_cert_file` + `client_key_file`)
/// presented when set, with or without a CA file.
///
/// Per-connection settings (SNI for host names, host-name or IP-SAN
/// verification) are applied by http_connection on each new connection.
/// Thread-safe after construction (OpenSSL contexts are shared read-only).
class tls_context {
public:
  /// Loads every file of `cfg` now. Throws config_error naming
  /// `tls.ca_file`, `tls.client_cert_file` or `tls.client_key_file` with
  /// OpenSSL's reason when a file cannot be loaded, when only one of cert and
  /// key is set, or when the key does not match the certificate.
  static std::shared_ptr<tls_context> make(const tls_config& cfg);

  ~tls_context();

  tls_context(const tls_context&) = delete;
  tls_context& operator=(const tls_context&) = delete;

  /// A string that differs between contexts with different trust anchors or
  /// client identities (the file paths, "system" for the default trust
  /// store); the connection pool keys idle connections by it so that
  /// connections of different identities are never shared.
  const std::string& identity() const {
    return identity_;
  }

  struct impl;
  /// Access for protocol/ .cpp files (the asio::ssl::context lives in impl).
  impl& get() {
    return *impl_;
  }

private:
  tls_context(std::unique_ptr<impl> ptr, std::string identity);

  std::unique_ptr<impl> impl_;
  std::string identity_;
};

} // namespace protocol
} // namespace outbound
