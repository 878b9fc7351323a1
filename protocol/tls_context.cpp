#include "protocol/tls_context.hpp"

#include "config/config_error.hpp"
#include "protocol/detail/tls_context_impl.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>

namespace outbound {
inline namespace protocol {

namespace {

/// The newest queued OpenSSL error as text, else `fallback` (the Asio error
/// message); clears the queue so the next check starts clean.
std::string openssl_reason(const std::string& fallback) {
  unsigned long last = 0;
  while (auto e = ERR_get_error())
    last = e;
  if (last == 0)
    return fallback;
  char buf[256];
  ERR_error_string_n(last, buf, sizeof(buf));
  return buf;
}

} // namespace

tls_context::tls_context(std::unique_ptr<impl> ptr, std::string identity)
  : impl_(std::move(ptr)), identity_(std::move(identity)) {
}

tls_context::~tls_context() = default;

std::shared_ptr<tls_context> tls_context::make(const tls_config& cfg) {
  namespace ssl = boost::asio::ssl;
  auto ptr = std::make_unique<impl>();
  auto& ctx = ptr->ctx;
  auto* native = ctx.native_handle();
  ERR_clear_error();
  // TLS 1.2+ only; no compression, no renegotiation (client side).
  SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION);
  ctx.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2
                  | ssl::context::no_sslv3 | ssl::context::no_tlsv1
                  | ssl::context::no_tlsv1_1 | ssl::context::no_compression);
  SSL_CTX_set_options(native, SSL_OP_NO_RENEGOTIATION);
  ctx.set_verify_mode(ssl::verify_peer);
  boost::system::error_code ec;
  if (!cfg.ca_file.empty()) {
    ctx.load_verify_file(cfg.ca_file, ec);
    if (ec)
      throw config_error("tls.ca_file", "cannot load CA file '" + cfg.ca_file
                                          + "': " + openssl_reason(ec.message()));
  } else {
    ctx.set_default_verify_paths(ec);
    if (ec)
      throw config_error("tls.ca_file",
                         "no CA file set and the system trust store cannot be "
                         "loaded: "
                           + openssl_reason(ec.message()));
  }
  bool has_cert = !cfg.client_cert_file.empty();
  bool has_key = !cfg.client_key_file.empty();
  if (has_cert != has_key)
    throw config_error(has_cert ? "tls.client_key_file" : "tls.client_cert_file",
                       "client certificate and key must be set together");
  if (has_cert) {
    ctx.use_certificate_chain_file(cfg.client_cert_file, ec);
    if (ec)
      throw config_error("tls.client_cert_file",
                         "cannot load client certificate '"
                           + cfg.client_cert_file
                           + "': " + openssl_reason(ec.message()));
    ctx.use_private_key_file(cfg.client_key_file, ssl::context::pem, ec);
    if (ec)
      throw config_error("tls.client_key_file",
                         "cannot load client key '" + cfg.client_key_file
                           + "': " + openssl_reason(ec.message()));
    if (SSL_CTX_check_private_key(native) != 1)
      throw config_error("tls.client_key_file",
                         "client key '" + cfg.client_key_file
                           + "' does not match the client certificate: "
                           + openssl_reason("key mismatch"));
  }
  std::string identity = "ca=" + (cfg.ca_file.empty() ? std::string{"system"}
                                                      : cfg.ca_file);
  identity += ";cert=" + cfg.client_cert_file + ";key=" + cfg.client_key_file;
  return std::shared_ptr<tls_context>(
    new tls_context(std::move(ptr), std::move(identity)));
}

} // namespace protocol
} // namespace outbound
