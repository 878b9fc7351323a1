#pragma once

#include <stdexcept>
#include <string>

namespace outbound {
inline namespace config {

/// Thrown at construction when a configuration value is invalid.
///
/// `field()` names the offending field exactly as it is spelled in the config
/// struct (e.g. `retry.base_backoff`, `tls.client_cert_file`, `base_url`), so
/// a bad JSON file or environment variable can be traced to its source.
class config_error : public std::invalid_argument {
public:
  config_error(std::string field, const std::string& why)
    : std::invalid_argument(field + ": " + why), field_(std::move(field)) {
  }

  /// The name of the invalid field.
  const std::string& field() const noexcept {
    return field_;
  }

private:
  std::string field_;
};

} // namespace config
} // namespace outbound
