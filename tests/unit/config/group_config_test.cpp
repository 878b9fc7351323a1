// Feed group settings (config/group_config.hpp): defaults, validate() naming
// every bad field, JSON parsing (unknown fields, wrong types) and the
// OUTBOUND_GROUP_* environment variables.

#include "config/group_config.hpp"

#include "config/config_error.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <vector>

using namespace outbound;

namespace {

group_config valid() {
  group_config c;
  c.name = "billing";
  c.member_name = "host-1:9000";
  return c;
}

/// The field validate() fails on after `edit`, or "(valid)".
std::string invalid_field(const std::function<void(group_config&)>& edit) {
  auto c = valid();
  edit(c);
  try {
    c.validate();
  } catch (const config_error& e) {
    return e.field();
  }
  return "(valid)";
}

/// The field a parse fails on, or "(valid)".
std::string failing_field(const std::string& json) {
  try {
    parse_group_config(json);
  } catch (const config_error& e) {
    return e.field();
  }
  return "(valid)";
}

/// `{"name": "billing", "member_name": "m1", <extra>}`.
std::string with(const std::string& extra) {
  return R"({"name": "billing", "member_name": "m1")"
         + (extra.empty() ? std::string{} : ", " + extra) + "}";
}

const char* const all_variables[] = {
  "OUTBOUND_GROUP_NAME",
  "OUTBOUND_GROUP_MEMBER_NAME",
  "OUTBOUND_GROUP_LEASE_TTL",
  "OUTBOUND_GROUP_RENEW_INTERVAL",
  "OUTBOUND_GROUP_FENCE_MARGIN",
  "OUTBOUND_GROUP_POLL_INTERVAL",
  "OUTBOUND_GROUP_RECONCILE_INTERVAL",
  "OUTBOUND_GROUP_CHECKPOINT_INTERVAL",
  "OUTBOUND_GROUP_BATCH",
  "OUTBOUND_GROUP_INITIAL_SETTLE",
  "OUTBOUND_GROUP_MIN_MEMBERS",
  "OUTBOUND_GROUP_REBALANCE_DELAY",
  "OUTBOUND_GROUP_MAX_STARTS_PER_SECOND",
  "OUTBOUND_GROUP_MAX_FEEDS",
  "OUTBOUND_GROUP_COORDINATOR",
  "OUTBOUND_GROUP_ENDPOINT",
  "OUTBOUND_GROUP_PREFIX",
};

/// Saves every OUTBOUND_GROUP_* variable, unsets them for the test and puts
/// the saved values back afterwards, whatever the test did.
class GroupConfigEnv : public ::testing::Test {
protected:
  void SetUp() override {
    for (auto name : all_variables) {
      auto v = std::getenv(name);
      saved_.emplace_back(name,
                          v ? std::optional<std::string>{v} : std::nullopt);
      ::unsetenv(name);
    }
  }

  void TearDown() override {
    for (auto& [name, v] : saved_) {
      if (v)
        ::setenv(name, v->c_str(), 1);
      else
        ::unsetenv(name);
    }
  }

  static void set(const char* name, const char* value) {
    ::setenv(name, value, 1);
  }

  /// The field or variable group_config_from_env(base) fails on, or
  /// "(valid)".
  static std::string env_failure(group_config base = {}) {
    try {
      group_config_from_env(std::move(base));
    } catch (const config_error& e) {
      return e.field();
    }
    return "(valid)";
  }

private:
  std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
};

} // namespace

// -- validate -----------------------------------------------------------------

TEST(GroupConfig, DefaultsAreTheDesignsAndNeedANameAndAMember) {
  group_config c;
  EXPECT_TRUE(c.name.empty());
  EXPECT_TRUE(c.member_name.empty());
  EXPECT_DOUBLE_EQ(c.timing.lease_ttl, 5.0);
  EXPECT_DOUBLE_EQ(c.timing.renew_interval, 1.5);
  EXPECT_EQ(c.timing.batch, 64u);
  EXPECT_EQ(c.coordinator.kind, coordinator_kind::etcd);
  EXPECT_EQ(c.coordinator.endpoint, "http://127.0.0.1:2379");
  EXPECT_EQ(c.coordinator.prefix, "/outbound/groups/");
  EXPECT_EQ(invalid_field([](group_config&) {}), "(valid)");
  EXPECT_EQ(invalid_field([](group_config& g) { g.name.clear(); }),
            "group.name");
  EXPECT_EQ(invalid_field([](group_config& g) { g.member_name.clear(); }),
            "group.member_name");
}

TEST(GroupConfig, NameIsLowerCaseDigitsDotsDashesAndUnderscoresUpTo64) {
  for (std::string ok : {std::string{"a"}, std::string{"billing-feeds"},
                         std::string{"b.2_x"}, std::string(64, 'z')})
    EXPECT_EQ(invalid_field([&](group_config& g) { g.name = ok; }), "(valid)")
      << ok;
  for (auto bad : {"Billing", "a b", "a/b", "a:b", "é", "a\n"})
    EXPECT_EQ(invalid_field([&](group_config& g) { g.name = bad; }),
              "group.name")
      << bad;
  EXPECT_EQ(
    invalid_field([](group_config& g) { g.name = std::string(65, 'a'); }),
    "group.name");
}

TEST(GroupConfig, MemberNameAllowsUpperCaseAndColonsUpTo128) {
  for (std::string ok : {std::string{"host-1:9000"}, std::string{"Host.A_b"},
                         std::string{"10.0.0.1:80"}, std::string(128, 'M')})
    EXPECT_EQ(invalid_field([&](group_config& g) { g.member_name = ok; }),
              "(valid)")
      << ok;
  for (auto bad : {"a b", "a/b", "[::1]:80", "host@1", "a\t"})
    EXPECT_EQ(invalid_field([&](group_config& g) { g.member_name = bad; }),
              "group.member_name")
      << bad;
  EXPECT_EQ(invalid_field(
              [](group_config& g) { g.member_name = std::string(129, 'a'); }),
            "group.member_name");
}

TEST(GroupConfig, TimingErrorsNameTheGroupField) {
  using edit = std::function<void(group_state_config&)>;
  const std::pair<edit, const char*> cases[] = {
    {[](group_state_config& t) { t.lease_ttl = 1.5; }, "group.lease_ttl"},
    {[](group_state_config& t) { t.lease_ttl = 1e6; }, "group.lease_ttl"},
    {[](group_state_config& t) { t.renew_interval = 2; },
     "group.renew_interval"},
    {[](group_state_config& t) { t.fence_margin = 0; }, "group.fence_margin"},
    {[](group_state_config& t) { t.fence_margin = 3.5; }, "group.fence_margin"},
    {[](group_state_config& t) { t.poll_interval = 0; }, "group.poll_interval"},
    {[](group_state_config& t) { t.reconcile_interval = -1; },
     "group.reconcile_interval"},
    {[](group_state_config& t) { t.checkpoint_interval = 0; },
     "group.checkpoint_interval"},
    {[](group_state_config& t) { t.batch = 0; }, "group.batch"},
    {[](group_state_config& t) { t.batch = 129; }, "group.batch"},
    {[](group_state_config& t) { t.initial_settle = -1; },
     "group.initial_settle"},
    {[](group_state_config& t) { t.min_members = 0; }, "group.min_members"},
    {[](group_state_config& t) { t.rebalance_delay = -0.5; },
     "group.rebalance_delay"},
    {[](group_state_config& t) { t.max_starts_per_second = 0; },
     "group.max_starts_per_second"},
    {[](group_state_config& t) { t.max_feeds = 0; }, "group.max_feeds"},
  };
  // Not a structured binding: clang 14 cannot capture one in a lambda.
  for (const auto& c : cases) {
    const auto& breaks = c.first;
    EXPECT_EQ(invalid_field([&](group_config& g) { breaks(g.timing); }),
              c.second);
  }
}

TEST(GroupConfig, EtcdEndpointIsAnHttpUrlWithoutPath) {
  auto endpoint = [](const char* url) {
    return invalid_field(
      [&](group_config& g) { g.coordinator.endpoint = url; });
  };
  EXPECT_EQ(endpoint("http://127.0.0.1:2379"), "(valid)");
  EXPECT_EQ(endpoint("https://etcd.example:2379/"), "(valid)");
  EXPECT_EQ(endpoint("http://[::1]:2379"), "(valid)");
  EXPECT_EQ(endpoint(""), "group.coordinator.endpoint");
  EXPECT_EQ(endpoint("127.0.0.1:2379"), "group.coordinator.endpoint");
  EXPECT_EQ(endpoint("grpc://127.0.0.1:2379"), "group.coordinator.endpoint");
  EXPECT_EQ(endpoint("http://127.0.0.1:2379/v3"), "group.coordinator.endpoint");
  EXPECT_EQ(endpoint("http://127.0.0.1:2379?x=1"),
            "group.coordinator.endpoint");
  EXPECT_EQ(endpoint("http://user@127.0.0.1:2379"),
            "group.coordinator.endpoint");
}

TEST(GroupConfig, MemoryStoreNeedsNoEndpoint) {
  EXPECT_EQ(invalid_field([](group_config& g) {
              g.coordinator.kind = coordinator_kind::memory;
              g.coordinator.endpoint = "not a url";
            }),
            "(valid)");
  EXPECT_EQ(invalid_field([](group_config& g) {
              g.coordinator.kind = static_cast<coordinator_kind>(7);
            }),
            "group.coordinator.kind");
}

TEST(GroupConfig, PrefixStartsAndEndsWithASlash) {
  auto prefix = [](const char* p) {
    return invalid_field([&](group_config& g) { g.coordinator.prefix = p; });
  };
  EXPECT_EQ(prefix("/"), "(valid)");
  EXPECT_EQ(prefix("/a/b/"), "(valid)");
  EXPECT_EQ(prefix(""), "group.coordinator.prefix");
  EXPECT_EQ(prefix("a/"), "group.coordinator.prefix");
  EXPECT_EQ(prefix("/a"), "group.coordinator.prefix");
  EXPECT_EQ(prefix("/a\n/"), "group.coordinator.prefix");
}

TEST(GroupConfig, StoreClientSettingsAreNamedUnderCoordinatorClient) {
  EXPECT_EQ(
    invalid_field([](group_config& g) { g.coordinator.client.timeout = 0; }),
    "group.coordinator.client.timeout");
  EXPECT_EQ(invalid_field([](group_config& g) {
              g.coordinator.endpoint = "https://127.0.0.1:2379";
              g.coordinator.client.tls.ca_file = "/nonexistent/ca.pem";
            }),
            "group.coordinator.client.tls.ca_file");
}

TEST(GroupConfig, ErrorTextSaysWhy) {
  auto c = valid();
  c.timing.lease_ttl = 1;
  try {
    c.validate();
    FAIL() << "no error";
  } catch (const config_error& e) {
    EXPECT_NE(std::string{e.what()}.find("group.lease_ttl: must be >= 2"),
              std::string::npos)
      << e.what();
  }
}

// -- JSON ---------------------------------------------------------------------

TEST(GroupConfigJson, EveryFieldIsRead) {
  auto c = parse_group_config(R"({
    "name": "billing", "member_name": "host-1:9000",
    "lease_ttl": 6, "renew_interval": 1.25, "fence_margin": 1.5,
    "poll_interval": 0.25, "reconcile_interval": 4,
    "checkpoint_interval": 2, "batch": 32, "initial_settle": 0,
    "min_members": 2, "rebalance_delay": 7,
    "max_starts_per_second": 50, "max_feeds": 300,
    "coordinator": {"kind": "memory", "endpoint": "http://10.0.0.1:2379",
                    "prefix": "/x/"}})");
  EXPECT_EQ(c.name, "billing");
  EXPECT_EQ(c.member_name, "host-1:9000");
  EXPECT_DOUBLE_EQ(c.timing.lease_ttl, 6);
  EXPECT_DOUBLE_EQ(c.timing.renew_interval, 1.25);
  EXPECT_DOUBLE_EQ(c.timing.fence_margin, 1.5);
  EXPECT_DOUBLE_EQ(c.timing.poll_interval, 0.25);
  EXPECT_DOUBLE_EQ(c.timing.reconcile_interval, 4);
  EXPECT_DOUBLE_EQ(c.timing.checkpoint_interval, 2);
  EXPECT_EQ(c.timing.batch, 32u);
  EXPECT_DOUBLE_EQ(c.timing.initial_settle, 0);
  EXPECT_EQ(c.timing.min_members, 2u);
  EXPECT_DOUBLE_EQ(c.timing.rebalance_delay, 7);
  EXPECT_EQ(c.timing.max_starts_per_second, 50u);
  EXPECT_EQ(c.timing.max_feeds, 300u);
  EXPECT_EQ(c.coordinator.kind, coordinator_kind::memory);
  EXPECT_EQ(c.coordinator.endpoint, "http://10.0.0.1:2379");
  EXPECT_EQ(c.coordinator.prefix, "/x/");
}

TEST(GroupConfigJson, OnlyNameAndMemberAreRequired) {
  auto c = parse_group_config(with(""));
  group_config d;
  EXPECT_DOUBLE_EQ(c.timing.lease_ttl, d.timing.lease_ttl);
  EXPECT_EQ(c.timing.max_feeds, d.timing.max_feeds);
  EXPECT_EQ(c.coordinator.endpoint, d.coordinator.endpoint);
  EXPECT_EQ(failing_field("{}"), "group.name");
  EXPECT_EQ(failing_field(R"({"name": "billing"})"), "group.member_name");
}

TEST(GroupConfigJson, UnknownFieldsAreErrorsNamingThem) {
  EXPECT_EQ(failing_field(with(R"("lease_tll": 5)")), "group.lease_tll");
  EXPECT_EQ(failing_field(with(R"("coordinator": {"endpoints": []})")),
            "group.coordinator.endpoints");
  EXPECT_EQ(failing_field(with(R"("coordinator": {"client": {}})")),
            "group.coordinator.client");
}

TEST(GroupConfigJson, WrongTypesAreErrorsNamingTheField) {
  const std::pair<const char*, const char*> cases[] = {
    {R"("lease_ttl": "5")", "group.lease_ttl"},
    {R"("renew_interval": true)", "group.renew_interval"},
    {R"("fence_margin": null)", "group.fence_margin"},
    {R"("poll_interval": [1])", "group.poll_interval"},
    {R"("reconcile_interval": {})", "group.reconcile_interval"},
    {R"("checkpoint_interval": "1")", "group.checkpoint_interval"},
    {R"("batch": 1.5)", "group.batch"},
    {R"("batch": -1)", "group.batch"},
    {R"("initial_settle": "0")", "group.initial_settle"},
    {R"("min_members": "2")", "group.min_members"},
    {R"("rebalance_delay": false)", "group.rebalance_delay"},
    {R"("max_starts_per_second": -5)", "group.max_starts_per_second"},
    {R"("max_feeds": 1e30)", "group.max_feeds"},
    {R"("coordinator": "etcd")", "group.coordinator"},
    {R"("coordinator": {"kind": "zookeeper"})", "group.coordinator.kind"},
    {R"("coordinator": {"kind": 1})", "group.coordinator.kind"},
    {R"("coordinator": {"endpoint": 2379})", "group.coordinator.endpoint"},
    {R"("coordinator": {"prefix": null})", "group.coordinator.prefix"},
  };
  for (const auto& [extra, field] : cases)
    EXPECT_EQ(failing_field(with(extra)), field) << extra;
  EXPECT_EQ(failing_field(R"({"name": 5, "member_name": "m1"})"), "group.name");
  EXPECT_EQ(failing_field(R"({"name": "b", "member_name": ["m1"]})"),
            "group.member_name");
}

TEST(GroupConfigJson, ValuesAreValidated) {
  EXPECT_EQ(failing_field(with(R"("lease_ttl": 1)")), "group.lease_ttl");
  EXPECT_EQ(failing_field(with(R"("batch": 200)")), "group.batch");
  EXPECT_EQ(failing_field(R"({"name": "Billing", "member_name": "m1"})"),
            "group.name");
  EXPECT_EQ(failing_field(with(R"("coordinator": {"prefix": "x"})")),
            "group.coordinator.prefix");
  EXPECT_EQ(failing_field(with(R"("coordinator": {"endpoint": "http://h/p"})")),
            "group.coordinator.endpoint");
  // An integral double is a count.
  EXPECT_EQ(parse_group_config(with(R"("batch": 16.0)")).timing.batch, 16u);
}

TEST(GroupConfigJson, MalformedTextAndDuplicatesAreNamed) {
  EXPECT_EQ(failing_field("{"), "group");
  EXPECT_EQ(failing_field("[]"), "group");
  EXPECT_EQ(failing_field(R"({"name": "a", "name": "b", "member_name": "m"})"),
            "group.name");
  EXPECT_EQ(failing_field(with(R"("lease_ttl": 1e400)")), "group.lease_ttl");
}

// -- environment --------------------------------------------------------------

TEST_F(GroupConfigEnv, EveryVariableReplacesItsField) {
  set("OUTBOUND_GROUP_NAME", "orders");
  set("OUTBOUND_GROUP_MEMBER_NAME", "host-2:9000");
  set("OUTBOUND_GROUP_LEASE_TTL", "6");
  set("OUTBOUND_GROUP_RENEW_INTERVAL", "1.25");
  set("OUTBOUND_GROUP_FENCE_MARGIN", "1.5");
  set("OUTBOUND_GROUP_POLL_INTERVAL", "0.25");
  set("OUTBOUND_GROUP_RECONCILE_INTERVAL", "4");
  set("OUTBOUND_GROUP_CHECKPOINT_INTERVAL", "2");
  set("OUTBOUND_GROUP_BATCH", "32");
  set("OUTBOUND_GROUP_INITIAL_SETTLE", "0");
  set("OUTBOUND_GROUP_MIN_MEMBERS", "2");
  set("OUTBOUND_GROUP_REBALANCE_DELAY", "7");
  set("OUTBOUND_GROUP_MAX_STARTS_PER_SECOND", "50");
  set("OUTBOUND_GROUP_MAX_FEEDS", "300");
  set("OUTBOUND_GROUP_COORDINATOR", "memory");
  set("OUTBOUND_GROUP_ENDPOINT", "https://etcd.example:2379");
  set("OUTBOUND_GROUP_PREFIX", "/og/");
  auto c = group_config_from_env();
  EXPECT_EQ(c.name, "orders");
  EXPECT_EQ(c.member_name, "host-2:9000");
  EXPECT_DOUBLE_EQ(c.timing.lease_ttl, 6);
  EXPECT_DOUBLE_EQ(c.timing.renew_interval, 1.25);
  EXPECT_DOUBLE_EQ(c.timing.fence_margin, 1.5);
  EXPECT_DOUBLE_EQ(c.timing.poll_interval, 0.25);
  EXPECT_DOUBLE_EQ(c.timing.reconcile_interval, 4);
  EXPECT_DOUBLE_EQ(c.timing.checkpoint_interval, 2);
  EXPECT_EQ(c.timing.batch, 32u);
  EXPECT_DOUBLE_EQ(c.timing.initial_settle, 0);
  EXPECT_EQ(c.timing.min_members, 2u);
  EXPECT_DOUBLE_EQ(c.timing.rebalance_delay, 7);
  EXPECT_EQ(c.timing.max_starts_per_second, 50u);
  EXPECT_EQ(c.timing.max_feeds, 300u);
  EXPECT_EQ(c.coordinator.kind, coordinator_kind::memory);
  EXPECT_EQ(c.coordinator.endpoint, "https://etcd.example:2379");
  EXPECT_EQ(c.coordinator.prefix, "/og/");
}

TEST_F(GroupConfigEnv, UnsetVariablesKeepTheBase) {
  auto base = valid();
  base.timing.lease_ttl = 9;
  base.coordinator.prefix = "/base/";
  auto c = group_config_from_env(base);
  EXPECT_EQ(c.name, "billing");
  EXPECT_DOUBLE_EQ(c.timing.lease_ttl, 9);
  EXPECT_EQ(c.coordinator.prefix, "/base/");
  set("OUTBOUND_GROUP_LEASE_TTL", "7");
  EXPECT_DOUBLE_EQ(group_config_from_env(base).timing.lease_ttl, 7);
  // Without a name anywhere, the field is named.
  EXPECT_EQ(env_failure(), "group.name");
}

TEST_F(GroupConfigEnv, MalformedNumbersNameTheVariable) {
  const std::pair<const char*, const char*> cases[] = {
    {"OUTBOUND_GROUP_LEASE_TTL", "5s"},
    {"OUTBOUND_GROUP_RENEW_INTERVAL", ""},
    {"OUTBOUND_GROUP_FENCE_MARGIN", "one"},
    {"OUTBOUND_GROUP_POLL_INTERVAL", " 0.5"},
    {"OUTBOUND_GROUP_RECONCILE_INTERVAL", "nan"},
    {"OUTBOUND_GROUP_CHECKPOINT_INTERVAL", "inf"},
    {"OUTBOUND_GROUP_BATCH", "-1"},
    {"OUTBOUND_GROUP_INITIAL_SETTLE", "3,0"},
    {"OUTBOUND_GROUP_MIN_MEMBERS", "1.5"},
    {"OUTBOUND_GROUP_REBALANCE_DELAY", "x"},
    {"OUTBOUND_GROUP_MAX_STARTS_PER_SECOND", "1e3"},
    {"OUTBOUND_GROUP_MAX_FEEDS", "99999999999999999999999"},
    {"OUTBOUND_GROUP_COORDINATOR", "zookeeper"},
  };
  for (const auto& [name, value] : cases) {
    set(name, value);
    EXPECT_EQ(env_failure(valid()), name) << value;
    ::unsetenv(name);
  }
}

TEST_F(GroupConfigEnv, WellFormedBadValuesNameTheField) {
  set("OUTBOUND_GROUP_LEASE_TTL", "1");
  EXPECT_EQ(env_failure(valid()), "group.lease_ttl");
  ::unsetenv("OUTBOUND_GROUP_LEASE_TTL");
  set("OUTBOUND_GROUP_NAME", "");
  EXPECT_EQ(env_failure(valid()), "group.name");
  ::unsetenv("OUTBOUND_GROUP_NAME");
  set("OUTBOUND_GROUP_MEMBER_NAME", "a b");
  EXPECT_EQ(env_failure(valid()), "group.member_name");
  ::unsetenv("OUTBOUND_GROUP_MEMBER_NAME");
  set("OUTBOUND_GROUP_ENDPOINT", "http://127.0.0.1:2379/v3");
  EXPECT_EQ(env_failure(valid()), "group.coordinator.endpoint");
  ::unsetenv("OUTBOUND_GROUP_ENDPOINT");
  set("OUTBOUND_GROUP_PREFIX", "outbound");
  EXPECT_EQ(env_failure(valid()), "group.coordinator.prefix");
  ::unsetenv("OUTBOUND_GROUP_PREFIX");
  set("OUTBOUND_GROUP_BATCH", "0");
  EXPECT_EQ(env_failure(valid()), "group.batch");
  ::unsetenv("OUTBOUND_GROUP_BATCH");
  EXPECT_EQ(env_failure(valid()), "(valid)");
}

TEST(GroupConfig, TheStoreClientDefaultsToARenewIntervalDeadline) {
  group_config g;
  g.name = "billing";
  g.member_name = "m1";
  g.coordinator.endpoint = "http://127.0.0.1:2379";
  auto c = store_client_config(g);
  EXPECT_EQ(c.base_url, "http://127.0.0.1:2379");
  EXPECT_EQ(c.timeout, 1.0);
  EXPECT_EQ(c.deadline, g.timing.renew_interval);
  g.coordinator.client.timeout = 0.3;
  g.coordinator.client.deadline = 0.9;
  c = store_client_config(g);
  EXPECT_EQ(c.timeout, 0.3) << "set explicitly: kept";
  EXPECT_EQ(c.deadline, 0.9);
}
