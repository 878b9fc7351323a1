#pragma once

#include <boost/json/fwd.hpp>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

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

/// A config_error raised by a config file: field() is the field as its
/// parser names it (config/group_config.hpp's "group.lease_ttl",
/// config/demo_config.hpp's "demo.feeds"), file() the path, and what() is
/// "<path>: <field>: <why>", so the message says where to look.
class config_file_error : public config_error {
public:
  config_file_error(std::string file, const config_error& e);

  /// The path of the file, as given.
  const std::string& file() const noexcept {
    return file_;
  }

  const char* what() const noexcept override {
    return what_.c_str();
  }

private:
  std::string file_, what_;
};

/// `s` quoted for an error text: '"', '\\', control characters and bytes
/// that are not UTF-8 escaped as \xNN, cut after `max` bytes ("...").
std::string quote_for_error(std::string_view s, std::size_t max = 40);

/// A JSON value as an error text shows it after "got ": a number or
/// boolean or null as written, a string through quote_for_error, "an
/// array" or "an object".
std::string json_value_for_error(const boost::json::value& v);

} // namespace config
} // namespace outbound
