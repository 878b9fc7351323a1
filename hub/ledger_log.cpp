#include "hub/ledger_log.hpp"

#include "hub/subject.hpp"
#include "protocol/json_parse.hpp"

#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <cassert>

namespace outbound {

ledger_log::ledger_log(ledger_config cfg) : cfg_(cfg) {
  if (cfg_.replay_limit <= 0)
    cfg_.replay_limit = 500;
  if (cfg_.visibility_lag_polls < 0)
    cfg_.visibility_lag_polls = 0;
}

ledger_event_ptr ledger_log::find_duplicate(const std::string& dedupe_key) {
  if (dedupe_key.empty())
    return nullptr;
  auto i = keys_.find(dedupe_key);
  if (i == keys_.end())
    return nullptr;
  lru_.splice(lru_.begin(), lru_, i->second.second);
  return i->second.first;
}

void ledger_log::remember_key(const ledger_event_ptr& ev) {
  if (ev->dedupe_key.empty() || cfg_.dedupe_capacity == 0)
    return;
  lru_.push_front(ev->dedupe_key);
  keys_.emplace(ev->dedupe_key, std::make_pair(ev, lru_.begin()));
  while (keys_.size() > cfg_.dedupe_capacity) {
    keys_.erase(lru_.back());
    lru_.pop_back();
  }
}

ledger_append_result
ledger_log::append(const std::string& subject, const std::string& kind,
                   const std::string& metadata_json,
                   const std::string& dedupe_key, int64_t seq, double ts) {
  if (auto dup = find_duplicate(dedupe_key))
    return {std::move(dup), true};
  auto ev = std::make_shared<ledger_event>();
  ev->id = head_ + 1;
  ev->seq = seq;
  ev->subject = subject;
  ev->kind = kind;
  ev->dedupe_key = dedupe_key;
  boost::json::object obj;
  obj["id"] = ev->id;
  obj["seq"] = seq;
  obj["subject"] = subject;
  obj["kind"] = kind;
  // metadata_json is serialize() of a parsed object (parse_publish), so
  // it parses; a failure would keep the event with empty metadata rather
  // than throw out of the request handler.
  auto md = parse_json(metadata_json.empty() ? "{}" : metadata_json);
  if (md)
    obj["metadata"] = std::move(md.value);
  else
    obj["metadata"] = boost::json::object{};
  obj["ts"] = ts;
  ev->json = boost::json::serialize(obj);
  ledger_event_ptr stored = std::move(ev);
  by_subject_[stored->subject].ids.push_back(stored->id);
  entries_.push_back(
    {stored, polls_ + static_cast<uint64_t>(cfg_.visibility_lag_polls)});
  head_ = stored->id;
  remember_key(stored);
  if (cfg_.retention > 0
      && entries_.size() > static_cast<std::size_t>(cfg_.retention))
    trim_through(head_ - static_cast<int64_t>(cfg_.retention));
  advance_visible();
  return {std::move(stored), false};
}

void ledger_log::advance_visible() {
  // Visibility is a gapless prefix: an event shows only when every retained
  // event before it shows (hypermanager's "gapless ceiling").
  if (visible_ < floor_)
    visible_ = floor_;
  while (visible_ < head_) {
    const auto& e = entries_[static_cast<std::size_t>(visible_ - floor_)];
    if (e.visible_at > polls_)
      break;
    ++visible_;
  }
}

int ledger_log::effective_limit(int limit) const {
  if (limit <= 0 || limit > cfg_.replay_limit)
    return cfg_.replay_limit;
  return limit;
}

bool ledger_log::indexed_lists(const std::vector<std::string>& prefixes,
                               std::vector<const id_list*>& out) const {
  if (prefixes.empty())
    return false;
  for (const auto& p : prefixes) {
    if (p.empty())
      return false;
    for (auto i = by_subject_.lower_bound(p);
         i != by_subject_.end() && i->first.compare(0, p.size(), p) == 0; ++i) {
      out.push_back(&i->second);
      if (out.size() > max_indexed_subjects)
        return false;
    }
  }
  // Overlapping prefixes ("a/" and "a/b") name a subject twice.
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return true;
}

ledger_page ledger_log::page(int64_t after, int limit,
                             const std::vector<std::string>& prefixes) {
  advance_visible();
  auto lim = static_cast<std::size_t>(effective_limit(limit));
  ledger_page p;
  p.reset = after < floor_;
  auto first = std::max(after, floor_) + 1;
  std::vector<const id_list*> lists;
  if (indexed_lists(prefixes, lists)) {
    // Merge the subjects' id lists from `first` up to the visible ceiling.
    std::vector<std::pair<std::vector<int64_t>::const_iterator,
                          std::vector<int64_t>::const_iterator>>
      heads;
    for (const auto* l : lists) {
      auto i = std::lower_bound(l->begin(), l->end(), first);
      if (i != l->end() && *i <= visible_)
        heads.emplace_back(i, l->end());
    }
    while (p.events.size() < lim && !heads.empty()) {
      std::size_t min = 0;
      for (std::size_t k = 1; k < heads.size(); ++k)
        if (*heads[k].first < *heads[min].first)
          min = k;
      auto id = *heads[min].first;
      p.events.push_back(
        entries_[static_cast<std::size_t>(id - floor_ - 1)].event);
      if (++heads[min].first == heads[min].second
          || *heads[min].first > visible_)
        heads.erase(heads.begin() + static_cast<std::ptrdiff_t>(min));
    }
  } else {
    for (auto id = first; id <= visible_ && p.events.size() < lim; ++id) {
      const auto& ev
        = entries_[static_cast<std::size_t>(id - floor_ - 1)].event;
      if (hub_subject_matches(ev->subject, prefixes))
        p.events.push_back(ev);
    }
  }
  p.cursor = p.events.size() == lim ? p.events.back()->id : visible_;
  // The poll is counted after the page: an event appended with lag K is
  // missed by exactly K polls.
  ++polls_;
  return p;
}

std::size_t ledger_log::indexed_ids() const {
  std::size_t n = 0;
  for (const auto& kv : by_subject_)
    n += kv.second.size();
  return n;
}

ledger_event_ptr ledger_log::get(int64_t id) const {
  if (id <= floor_ || id > head_)
    return nullptr;
  return entries_[static_cast<std::size_t>(id - floor_ - 1)].event;
}

void ledger_log::set_retention(uint64_t retention) {
  cfg_.retention = retention;
  if (retention > 0 && entries_.size() > static_cast<std::size_t>(retention))
    trim_through(head_ - static_cast<int64_t>(retention));
}

void ledger_log::trim_through(int64_t id) {
  id = std::min(id, head_);
  while (floor_ < id) {
    // The oldest retained id is the front of its subject's list.
    auto i = by_subject_.find(entries_.front().event->subject);
    assert(i != by_subject_.end() && *i->second.begin() == floor_ + 1);
    if (i != by_subject_.end()) {
      i->second.pop_front();
      if (i->second.empty())
        by_subject_.erase(i);
    }
    entries_.pop_front();
    ++floor_;
  }
  advance_visible();
}

void ledger_log::set_visibility_lag(int polls) {
  cfg_.visibility_lag_polls = std::max(0, polls);
}

} // namespace outbound
