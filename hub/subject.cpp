#include "hub/subject.hpp"

namespace outbound {

bool hub_subject_matches(std::string_view subject,
                         const std::vector<std::string>& prefixes) {
  if (prefixes.empty())
    return true;
  for (const auto& p : prefixes)
    if (subject.substr(0, p.size()) == p)
      return true;
  return false;
}

} // namespace outbound
