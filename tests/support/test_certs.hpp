#pragma once

// Certificates for TLS / mTLS tests, made at test time with the `openssl`
// command line tool into a temporary directory (Debian 12's openssl 3.0).
// Reusable by every integration test that needs a CA, a server
// identity or a client identity; nothing here touches /etc or the system
// trust store.

#include <string>
#include <vector>

namespace outbound::testing {

/// A fresh directory under $TMPDIR (or /tmp), removed with its contents on
/// destruction. Throws std::runtime_error if it cannot be created.
class temp_dir {
public:
  /// Creates `<tmp>/<prefix>XXXXXX`.
  explicit temp_dir(const std::string& prefix = "outbound-test-");
  ~temp_dir();

  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;

  /// Absolute path without a trailing '/'.
  const std::string& path() const {
    return path_;
  }

  /// `path() + "/" + name`.
  std::string file(const std::string& name) const {
    return path_ + "/" + name;
  }

private:
  std::string path_;
};

/// A PEM certificate and its PEM private key on disk.
struct cert_files {
  std::string cert; ///< path of the PEM certificate
  std::string key;  ///< path of the PEM private key (unencrypted)
};

/// What a leaf certificate is for (its extendedKeyUsage).
enum class cert_usage {
  server, ///< serverAuth
  client, ///< clientAuth
};

/// Runs `openssl` to make a self-signed CA (P-256 key, SHA-256, valid two
/// days, basicConstraints CA:TRUE) named `<name>.pem` / `<name>.key` in
/// `dir`, with subject CN `common_name`. Throws std::runtime_error carrying
/// openssl's output when a command fails.
cert_files make_ca(const std::string& dir, const std::string& name,
                   const std::string& common_name);

/// Runs `openssl` to make a leaf certificate signed by `ca`, named
/// `<name>.pem` / `<name>.key` in `dir`, with subject CN `common_name` and the
/// subjectAltName entries in `sans` (e.g. {"DNS:localhost", "IP:127.0.0.1"};
/// empty: no SAN extension). Throws std::runtime_error like make_ca.
cert_files make_leaf(const std::string& dir, const std::string& name,
                     const cert_files& ca, const std::string& common_name,
                     const std::vector<std::string>& sans, cert_usage usage);

/// The standard set of identities for TLS tests:
///
///   CA A ─┬─ server        CN localhost, SAN DNS:localhost, IP:127.0.0.1
///         ├─ server_dns    CN localhost, SAN DNS:localhost only (so a
///         │                connection to 127.0.0.1 fails host-name checks)
///         └─ client        CN outbound-test-client (clientAuth)
///   CA B ─── foreign_client CN foreign-client (clientAuth), unknown to A
struct test_pki {
  cert_files ca_a;
  cert_files server;
  cert_files server_dns;
  cert_files client;
  cert_files ca_b;
  cert_files foreign_client;

  /// Generates every file in `dir` (about 0.1 s with EC keys). Throws
  /// std::runtime_error if `openssl` is missing or fails.
  static test_pki generate(const std::string& dir);
};

/// Returns the first executable among `$<env_var>` (if set), each directory
/// of $PATH followed by `name`, and `fallbacks`; empty if none exists.
std::string find_program(const std::string& name, const std::string& env_var,
                         const std::vector<std::string>& fallbacks = {});

} // namespace outbound::testing
