#include "hub/catchup_ring.hpp"

#include "hub/subject.hpp"

namespace outbound {

const char* to_string(resume_decision d) {
  switch (d) {
    case resume_decision::resume: return "resume";
    case resume_decision::resync_ring_disabled: return "ring_disabled";
    case resume_decision::resync_no_last_seq: return "no_last_seq";
    case resume_decision::resync_foreign_epoch: return "foreign_epoch";
    case resume_decision::resync_unknown_client: return "unknown_client";
    case resume_decision::resync_below_floor: return "below_floor";
    case resume_decision::resync_above_head: return "above_head";
  }
  return "unknown";
}

std::string make_hub_epoch(std::mt19937_64& rng) {
  static constexpr char digits[] = "0123456789abcdef";
  auto bits = rng();
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i) {
    out[static_cast<std::size_t>(i)] = digits[bits & 0xF];
    bits >>= 4;
  }
  return out;
}

catchup_ring::catchup_ring(std::size_t capacity, std::string epoch,
                           std::size_t max_clients)
  : capacity_(capacity), epoch_(std::move(epoch)), max_clients_(max_clients) {
}

int64_t catchup_ring::publish(std::string subject,
                              std::shared_ptr<const std::string> frame) {
  ++head_;
  if (capacity_ == 0)
    return head_;
  if (entries_.size() == capacity_)
    entries_.pop_front();
  entries_.push_back({head_, std::move(subject), std::move(frame)});
  return head_;
}

bool catchup_ring::known_client(const std::string& client_id) const {
  return clients_.count(client_id) > 0;
}

void catchup_ring::register_client(const std::string& client_id) {
  if (client_id.empty() || max_clients_ == 0)
    return;
  auto i = clients_.find(client_id);
  if (i != clients_.end()) {
    lru_.splice(lru_.begin(), lru_, i->second);
    return;
  }
  lru_.push_front(client_id);
  clients_.emplace(client_id, lru_.begin());
  while (clients_.size() > max_clients_) {
    clients_.erase(lru_.back());
    lru_.pop_back();
  }
}

resume_result catchup_ring::resume(const std::string& client_id,
                                   std::optional<int64_t> last_seq,
                                   const std::optional<std::string>& epoch,
                                   const std::vector<std::string>& prefixes) {
  resume_result r;
  r.head = head_;
  bool known = known_client(client_id);
  register_client(client_id);
  if (capacity_ == 0)
    r.decision = resume_decision::resync_ring_disabled;
  else if (!last_seq)
    r.decision = resume_decision::resync_no_last_seq;
  else if (epoch && !epoch->empty() && *epoch != epoch_)
    r.decision = resume_decision::resync_foreign_epoch;
  else if (!known)
    r.decision = resume_decision::resync_unknown_client;
  else if (*last_seq < floor())
    r.decision = resume_decision::resync_below_floor;
  else if (*last_seq > head_)
    r.decision = resume_decision::resync_above_head;
  else
    r.decision = resume_decision::resume;
  if (r.decision != resume_decision::resume)
    return r;
  auto first = static_cast<std::size_t>(*last_seq - floor());
  for (auto i = first; i < entries_.size(); ++i)
    if (hub_subject_matches(entries_[i].subject, prefixes))
      r.replay.push_back(entries_[i]);
  return r;
}

void catchup_ring::restart(std::string epoch) {
  epoch_ = std::move(epoch);
  entries_.clear();
  head_ = 0;
  lru_.clear();
  clients_.clear();
}

} // namespace outbound
