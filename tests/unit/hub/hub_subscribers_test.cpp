// The hub's subscribers of one tier (hub/hub_impl.hpp, tier_subscribers):
// the owning set and its prefix index stay in step through inserts,
// re-inserts with other prefixes, erases by shared_ptr and by address, and
// clear; the fan-out finds exactly the sessions hub_subject_matches finds.

#include "hub/hub_impl.hpp"
#include "hub/subject.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

using namespace outbound;

namespace {

/// A session that records nothing: the fan-out only needs its identity and
/// prefixes.
class stub_session : public hub_ws_session {
public:
  void push_hello(const subscribe_outcome&) override {
  }
  void push_event(const std::shared_ptr<const std::string>&) override {
  }
  void push_wake(int64_t) override {
  }
  void push_wakes(const std::vector<int64_t>&) override {
  }
  void shutdown(uint16_t) override {
  }
  void go_silent() override {
  }
};

std::vector<hub_ws_session*> matches(const tier_subscribers& t,
                                     const std::string& subject) {
  std::vector<hub_ws_session*> out;
  t.for_each_match(subject, [&](hub_ws_session* s) { out.push_back(s); });
  std::sort(out.begin(), out.end());
  return out;
}

} // namespace

TEST(HubSubscribers, SetAndIndexStayInStep) {
  std::mt19937_64 rng{11};
  const std::vector<std::vector<std::string>> choices{
    {}, {""}, {"a/"}, {"a/", "a/b"}, {"b"}, {"a/b/c", "b/"}, {"a/", "a/"}};
  const std::vector<std::string> subjects{"a/b/c", "a/x", "b", "bz/1", "c", ""};
  std::vector<std::shared_ptr<stub_session>> sessions;
  for (int i = 0; i < 40; ++i)
    sessions.push_back(std::make_shared<stub_session>());
  std::vector<bool> in(sessions.size(), false);
  tier_subscribers t;
  std::uniform_int_distribution<std::size_t> pick{0, sessions.size() - 1};
  std::uniform_int_distribution<std::size_t> pick_prefixes{0,
                                                           choices.size() - 1};
  std::uniform_int_distribution<int> op{0, 9};
  for (int step = 0; step < 5000; ++step) {
    auto k = pick(rng);
    auto& s = sessions[k];
    switch (op(rng)) {
      case 0:
      case 1:
      case 2: // subscribe, or re-subscribe with other prefixes
        s->prefixes = choices[pick_prefixes(rng)];
        t.insert(s);
        in[k] = true;
        break;
      case 3:
        EXPECT_EQ(t.erase(s), in[k] ? 1u : 0u);
        in[k] = false;
        break;
      case 4: // on_ws_close: by address
        EXPECT_EQ(t.erase(static_cast<const hub_ws_session*>(s.get())),
                  in[k] ? 1u : 0u);
        in[k] = false;
        break;
      default:
        for (const auto& subject : subjects) {
          std::vector<hub_ws_session*> want;
          for (std::size_t i = 0; i < sessions.size(); ++i)
            if (in[i] && hub_subject_matches(subject, sessions[i]->prefixes))
              want.push_back(sessions[i].get());
          std::sort(want.begin(), want.end());
          ASSERT_EQ(matches(t, subject), want)
            << "step " << step << " subject '" << subject << "'";
        }
    }
    ASSERT_EQ(t.size(),
              static_cast<std::size_t>(std::count(in.begin(), in.end(), true)));
  }
  t.clear();
  EXPECT_EQ(t.size(), 0u);
  EXPECT_TRUE(matches(t, "a/b/c").empty());
  // A cleared set still takes sessions (restart, drop and silence clear it).
  t.insert(sessions[0]);
  EXPECT_EQ(t.size(), 1u);
}
