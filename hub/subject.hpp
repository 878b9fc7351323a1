#pragma once

// Subject matching of the reference hub: subscribers and replay
// readers name the subjects they want by prefix. Plain string prefixes, as
// hypermanager does it: "orders/" matches "orders/1" and "orders/eu/2";
// "orders" also matches "orders-archive" (end a prefix with the separator to
// stay inside one subtree).

#include <algorithm>
#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace outbound {

/// True when `subject` starts with one of `prefixes`. An empty list, or a
/// list holding the empty string, matches every subject.
bool hub_subject_matches(std::string_view subject,
                         const std::vector<std::string>& prefixes);

/// Members (subscribers) by the subject prefixes they follow, so that a
/// publish finds the members its subject matches without testing each one
/// (`hub_subject_matches` per member is O(members) per event: 9,000 feeds at
/// 900 events/s are 8 million tests a second). A subject's matches are the
/// members registered under one of its own prefixes, so a lookup probes the
/// subject cut at each prefix length in use: O(distinct lengths × log
/// prefixes), independent of the number of members.
///
/// Not thread-safe (the hub calls it under its mutex). `T` is the member's
/// type; the index holds plain pointers and never dereferences them.
template <class T>
class prefix_index {
public:
  /// Registers `member` under `prefixes` (an empty list, or one holding "",
  /// matches every subject); a member already present is re-registered.
  void insert(T* member, const std::vector<std::string>& prefixes) {
    erase(member);
    std::vector<std::string> own = prefixes;
    if (own.empty())
      own.emplace_back();
    std::sort(own.begin(), own.end());
    own.erase(std::unique(own.begin(), own.end()), own.end());
    for (const auto& p : own) {
      auto i = by_prefix_.find(p);
      if (i == by_prefix_.end())
        i = by_prefix_.emplace(p, std::unordered_set<T*>{}).first;
      i->second.insert(member);
      ++lengths_[p.size()];
    }
    if (own.size() > 1)
      ++multi_;
    members_.emplace(member, std::move(own));
  }

  /// Removes `member`; false when it was not registered.
  bool erase(T* member) {
    auto m = members_.find(member);
    if (m == members_.end())
      return false;
    for (const auto& p : m->second) {
      auto i = by_prefix_.find(p);
      i->second.erase(member);
      if (i->second.empty())
        by_prefix_.erase(i);
      auto l = lengths_.find(p.size());
      if (--l->second == 0)
        lengths_.erase(l);
    }
    if (m->second.size() > 1)
      --multi_;
    members_.erase(m);
    return true;
  }

  void clear() {
    members_.clear();
    by_prefix_.clear();
    lengths_.clear();
    multi_ = 0;
  }

  std::size_t size() const {
    return members_.size();
  }

  /// Calls `f(T*)` once for each member one of whose prefixes `subject`
  /// starts with, in no particular order. `f` must not modify the index.
  template <class F>
  void for_each_match(std::string_view subject, F&& f) const {
    if (multi_ == 0) {
      // Each member sits under one prefix: no member can match twice.
      visit(subject, f);
      return;
    }
    scratch_.clear();
    visit(subject, [this](T* m) { scratch_.push_back(m); });
    std::sort(scratch_.begin(), scratch_.end());
    scratch_.erase(std::unique(scratch_.begin(), scratch_.end()),
                   scratch_.end());
    for (auto* m : scratch_)
      f(m);
  }

private:
  template <class F>
  void visit(std::string_view subject, F&& f) const {
    for (const auto& [len, count] : lengths_) {
      if (len > subject.size())
        break;
      auto i = by_prefix_.find(subject.substr(0, len));
      if (i != by_prefix_.end())
        for (auto* m : i->second)
          f(m);
    }
  }

  /// Each member's distinct prefixes ("" for every subject), sorted.
  std::unordered_map<T*, std::vector<std::string>> members_;
  /// Members by prefix (std::less<> finds a string_view without a copy).
  std::map<std::string, std::unordered_set<T*>, std::less<>> by_prefix_;
  /// Prefix lengths in use, ascending, with how many prefixes have each.
  std::map<std::size_t, std::size_t> lengths_;
  /// Members with more than one prefix (then a subject may match one twice).
  std::size_t multi_ = 0;
  mutable std::vector<T*> scratch_;
};

} // namespace outbound
