#include "actors/feed/timer_slots.hpp"

#include <algorithm>

namespace outbound {
inline namespace feed {

void timer_slots::set(timer_slot s, feed_time at) {
  due_[index(s)] = at;
}

void timer_slots::clear(timer_slot s) {
  due_[index(s)].reset();
}

std::optional<feed_time> timer_slots::arm() {
  std::optional<feed_time> earliest;
  for (const auto& d : due_)
    if (d && (!earliest || *d < *earliest))
      earliest = d;
  if (!earliest)
    return std::nullopt;
  for (auto p : pending_)
    if (p <= *earliest)
      return std::nullopt; // it fires first and arms again
  pending_.push_back(*earliest);
  return earliest;
}

due_slots timer_slots::due(feed_time fired_at, feed_time now) {
  auto i = std::find(pending_.begin(), pending_.end(), fired_at);
  if (i != pending_.end())
    pending_.erase(i);
  due_slots out;
  for (std::size_t k = 0; k < timer_slot_count; ++k)
    if (due_[k] && *due_[k] <= now)
      out.slots[out.count++] = static_cast<timer_slot>(k);
  std::sort(out.slots.begin(), out.slots.begin() + out.count,
            [this](timer_slot a, timer_slot b) {
              auto da = *due_[index(a)];
              auto db = *due_[index(b)];
              return da != db ? da < db : index(a) < index(b);
            });
  for (auto s : out)
    clear(s);
  return out;
}

} // namespace feed
} // namespace outbound
