#pragma once

// Subject matching of the reference hub: subscribers and replay
// readers name the subjects they want by prefix. Plain string prefixes, as
// hypermanager does it: "orders/" matches "orders/1" and "orders/eu/2";
// "orders" also matches "orders-archive" (end a prefix with the separator to
// stay inside one subtree).

#include <string>
#include <string_view>
#include <vector>

namespace outbound {

/// True when `subject` starts with one of `prefixes`. An empty list, or a
/// list holding the empty string, matches every subject.
bool hub_subject_matches(std::string_view subject,
                         const std::vector<std::string>& prefixes);

} // namespace outbound
