#include "config/config_error.hpp"

#include "core/text.hpp"

#include <boost/json/value.hpp>

#include <cstdio>

namespace outbound {
inline namespace config {

config_file_error::config_file_error(std::string file, const config_error& e)
  : config_error(e), file_(std::move(file)) {
  what_ = file_ + ": " + config_error::what();
}

std::string quote_for_error(std::string_view s, std::size_t max) {
  static const char hex[] = "0123456789abcdef";
  std::string out = "\"";
  auto escape = [&](unsigned char c) {
    out += "\\x";
    out += hex[c >> 4];
    out += hex[c & 0xF];
  };
  std::size_t i = 0;
  while (i < s.size() && i < max) {
    auto c = static_cast<unsigned char>(s[i]);
    auto n = utf8_sequence_length(s, i);
    if (n == 0 || c < 0x20 || c == 0x7F) {
      escape(c);
      ++i;
    } else if (is_c1_control(s, i)) {
      escape(c);
      escape(static_cast<unsigned char>(s[i + 1]));
      i += 2;
    } else if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  out += '"';
  if (i < s.size())
    out += "... (" + std::to_string(s.size()) + " bytes)";
  return out;
}

std::string json_value_for_error(const boost::json::value& v) {
  char buf[32];
  switch (v.kind()) {
    case boost::json::kind::int64: return std::to_string(v.get_int64());
    case boost::json::kind::uint64: return std::to_string(v.get_uint64());
    case boost::json::kind::double_:
      std::snprintf(buf, sizeof(buf), "%.15g", v.get_double());
      return buf;
    case boost::json::kind::string: return quote_for_error(v.get_string());
    case boost::json::kind::bool_: return v.get_bool() ? "true" : "false";
    case boost::json::kind::null: return "null";
    case boost::json::kind::array: return "an array";
    case boost::json::kind::object: return "an object";
  }
  return "?";
}

} // namespace config
} // namespace outbound
