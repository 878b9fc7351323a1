// Feed group settings (config/group_config.hpp): defaults, validate() naming
// every bad field, JSON parsing (unknown fields, wrong types), files (errors
// name the file), the store client's TLS, feed ids, and the
// OUTBOUND_GROUP_* environment variables.

#include "config/group_config.hpp"

#include "config/config_error.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <fstream>
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

/// The message a parse fails with, or "(valid)".
std::string failing_text(const std::string& json) {
  try {
    parse_group_config(json);
  } catch (const config_error& e) {
    return e.what();
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
  "OUTBOUND_GROUP_MAX_INFLIGHT_BATCHES",
  "OUTBOUND_GROUP_COORDINATOR",
  "OUTBOUND_GROUP_ENDPOINT",
  "OUTBOUND_GROUP_PREFIX",
  "OUTBOUND_GROUP_CA_FILE",
  "OUTBOUND_GROUP_CLIENT_CERT",
  "OUTBOUND_GROUP_CLIENT_KEY",
};

/// A file with `text`, removed when the object goes.
class temp_file {
public:
  explicit temp_file(const std::string& text) {
    char name[] = "/tmp/outbound-group-config-XXXXXX";
    int fd = ::mkstemp(name);
    if (fd >= 0)
      ::close(fd);
    path_ = name;
    std::ofstream{path_} << text;
  }

  ~temp_file() {
    ::unlink(path_.c_str());
  }

  temp_file(const temp_file&) = delete;
  temp_file& operator=(const temp_file&) = delete;

  const std::string& path() const {
    return path_;
  }

private:
  std::string path_;
};

/// The field validate_group_feed_ids fails on and its message, or
/// "(valid)".
std::pair<std::string, std::string>
feed_id_failure(const std::vector<std::string>& ids) {
  try {
    validate_group_feed_ids(ids);
  } catch (const config_error& e) {
    return {e.field(), e.what()};
  }
  return {"(valid)", ""};
}

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

  /// The message group_config_from_env(base) fails with, or "(valid)".
  static std::string env_failure_text(group_config base = {}) {
    try {
      group_config_from_env(std::move(base));
    } catch (const config_error& e) {
      return e.what();
    }
    return "(valid)";
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
    "max_inflight_batches": 2,
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
  EXPECT_EQ(c.timing.max_inflight_batches, 2u);
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
  // Of the store client only tls has a JSON form.
  EXPECT_EQ(failing_field(with(R"("coordinator": {"client": {"timeout": 1}})")),
            "group.coordinator.client.timeout");
  EXPECT_EQ(failing_field(
              with(R"("coordinator": {"client": {"tls": {"cafile": "x"}}})")),
            "group.coordinator.client.tls.cafile");
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

TEST(GroupConfigJson, CountErrorsStateTheIntegerRangeAndTheValue) {
  EXPECT_EQ(failing_text(with(R"("max_inflight_batches": 4.5)")),
            "group.max_inflight_batches: must be an integer in 1..1024, got "
            "4.5");
  const char* const bad[]
    = {"4.5",   "-1",   "0",    "1e30", "1e400", "99999999999999999999999",
       "\"2\"", "true", "null", "[1]"};
  const std::pair<const char*, const char*> fields[] = {
    {"batch", "must be an integer in 1..128"},
    {"min_members", "must be an integer >= 1 (at most 2^64 - 1)"},
    {"max_starts_per_second", "must be an integer >= 1 (at most 2^64 - 1)"},
    {"max_feeds", "must be an integer >= 1 (at most 2^64 - 1)"},
    {"max_inflight_batches", "must be an integer in 1..1024"},
  };
  for (const auto& [field, range] : fields)
    for (auto value : bad) {
      auto text = failing_text(
        with("\"" + std::string{field} + "\": " + std::string{value}));
      EXPECT_EQ(text.rfind("group." + std::string{field} + ": " + range, 0), 0u)
        << field << " = " << value << ": " << text;
    }
  EXPECT_EQ(failing_text(with(R"("batch": 129)")),
            "group.batch: must be an integer in 1..128, got 129");
  EXPECT_EQ(failing_text(with(R"("max_inflight_batches": "4")")),
            "group.max_inflight_batches: must be an integer in 1..1024, got "
            "\"4\"");
  EXPECT_EQ(failing_text(with(R"("max_feeds": -1)")),
            "group.max_feeds: must be an integer >= 1 (at most 2^64 - 1), got "
            "-1");
}

TEST(GroupConfigJson, CountRangesAreValidatesOwn) {
  // The readers' ranges and validate()'s agree at both ends.
  EXPECT_EQ(parse_group_config(with(R"("batch": 1)")).timing.batch, 1u);
  EXPECT_EQ(parse_group_config(with(R"("batch": 128)")).timing.batch, 128u);
  EXPECT_EQ(invalid_field([](group_config& c) { c.timing.batch = 129; }),
            "group.batch");
  EXPECT_EQ(parse_group_config(with(R"("max_inflight_batches": 1024.0)"))
              .timing.max_inflight_batches,
            1024u);
  EXPECT_EQ(invalid_field(
              [](group_config& c) { c.timing.max_inflight_batches = 1025; }),
            "group.max_inflight_batches");
  EXPECT_EQ(parse_group_config(with(R"("max_feeds": 18446744073709551615)"))
              .timing.max_feeds,
            18446744073709551615u);
  for (auto f : {&group_state_config::batch, &group_state_config::min_members,
                 &group_state_config::max_starts_per_second,
                 &group_state_config::max_feeds,
                 &group_state_config::max_inflight_batches})
    EXPECT_NE(invalid_field([f](group_config& c) { c.timing.*f = 0; }),
              "(valid)");
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
  set("OUTBOUND_GROUP_MAX_INFLIGHT_BATCHES", "3");
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
  EXPECT_EQ(c.timing.max_inflight_batches, 3u);
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

TEST_F(GroupConfigEnv, OutOfRangeValuesNameTheVariableAndShowTheValue) {
  // Every variable: an error on the field it set names the variable (not
  // the JSON field), whichever check finds it.
  const std::pair<const char*, const char*> cases[] = {
    {"OUTBOUND_GROUP_NAME", ""},
    {"OUTBOUND_GROUP_MEMBER_NAME", "a b"},
    {"OUTBOUND_GROUP_LEASE_TTL", "1"},
    {"OUTBOUND_GROUP_RENEW_INTERVAL", "2"},
    {"OUTBOUND_GROUP_FENCE_MARGIN", "4"},
    {"OUTBOUND_GROUP_POLL_INTERVAL", "0"},
    {"OUTBOUND_GROUP_RECONCILE_INTERVAL", "-1"},
    {"OUTBOUND_GROUP_CHECKPOINT_INTERVAL", "90000"},
    {"OUTBOUND_GROUP_BATCH", "0"},
    {"OUTBOUND_GROUP_BATCH", "129"},
    {"OUTBOUND_GROUP_INITIAL_SETTLE", "-0.5"},
    {"OUTBOUND_GROUP_MIN_MEMBERS", "0"},
    {"OUTBOUND_GROUP_REBALANCE_DELAY", "1e6"},
    {"OUTBOUND_GROUP_MAX_STARTS_PER_SECOND", "0"},
    {"OUTBOUND_GROUP_MAX_FEEDS", "0"},
    {"OUTBOUND_GROUP_MAX_INFLIGHT_BATCHES", "0"},
    {"OUTBOUND_GROUP_MAX_INFLIGHT_BATCHES", "1025"},
    {"OUTBOUND_GROUP_ENDPOINT", "http://127.0.0.1:2379/v3"},
    {"OUTBOUND_GROUP_PREFIX", "outbound"},
    {"OUTBOUND_GROUP_CA_FILE", "/nonexistent/ca.pem"},
  };
  for (const auto& [name, value] : cases) {
    set(name, value);
    auto base = valid();
    if (std::string{name} == "OUTBOUND_GROUP_CA_FILE")
      base.coordinator.endpoint = "https://127.0.0.1:2379";
    auto text = env_failure_text(base);
    EXPECT_EQ(text.rfind(std::string{name} + ": ", 0), 0u)
      << name << "=" << value << ": " << text;
    EXPECT_EQ(text.find("group."), std::string::npos) << text;
    ::unsetenv(name);
  }
  EXPECT_EQ(env_failure(valid()), "(valid)");
}

TEST_F(GroupConfigEnv, RangeErrorsStateTheRangeAndTheValueGiven) {
  set("OUTBOUND_GROUP_MAX_INFLIGHT_BATCHES", "0");
  EXPECT_EQ(env_failure_text(valid()),
            "OUTBOUND_GROUP_MAX_INFLIGHT_BATCHES: must be an integer in "
            "1..1024, got 0");
  set("OUTBOUND_GROUP_MAX_INFLIGHT_BATCHES", "4.5");
  EXPECT_EQ(env_failure_text(valid()),
            "OUTBOUND_GROUP_MAX_INFLIGHT_BATCHES: must be an integer in "
            "1..1024, got 4.5");
  ::unsetenv("OUTBOUND_GROUP_MAX_INFLIGHT_BATCHES");
  set("OUTBOUND_GROUP_BATCH", "x");
  EXPECT_EQ(env_failure_text(valid()),
            "OUTBOUND_GROUP_BATCH: must be an integer in 1..128, got \"x\"");
  ::unsetenv("OUTBOUND_GROUP_BATCH");
  set("OUTBOUND_GROUP_LEASE_TTL", "1");
  EXPECT_EQ(env_failure_text(valid()),
            "OUTBOUND_GROUP_LEASE_TTL: must be >= 2 seconds (etcd's minimum "
            "TTL), got 1");
  ::unsetenv("OUTBOUND_GROUP_LEASE_TTL");
  // A bad value the variables did not set keeps its field's name.
  auto base = valid();
  base.timing.batch = 0;
  set("OUTBOUND_GROUP_LEASE_TTL", "6");
  EXPECT_EQ(env_failure(base), "group.batch");
}

TEST_F(GroupConfigEnv, ASourceOverTheVariablesIsValidatedAfterThem) {
  // read_group_env, then a source that overrides (a flag), then validate.
  set("OUTBOUND_GROUP_LEASE_TTL", "1");
  auto e = read_group_env(valid());
  EXPECT_DOUBLE_EQ(e.config.timing.lease_ttl, 1);
  try {
    e.validate(e.config);
    ADD_FAILURE() << "no error";
  } catch (const config_error& x) {
    EXPECT_EQ(x.field(), "OUTBOUND_GROUP_LEASE_TTL");
  }
  auto c = e.config;
  c.timing.lease_ttl = 6; // a flag's value replaces the variable's
  EXPECT_NO_THROW(e.validate(c));
  c.timing.lease_ttl = 1.5; // a bad flag: named by its field once erased
  e.fields.erase("group.lease_ttl");
  try {
    e.validate(c);
    ADD_FAILURE() << "no error";
  } catch (const config_error& x) {
    EXPECT_EQ(x.field(), "group.lease_ttl");
  }
  // A malformed variable fails as it is read.
  set("OUTBOUND_GROUP_BATCH", "many");
  EXPECT_THROW(read_group_env(valid()), config_error);
}

TEST_F(GroupConfigEnv,
       AnOutOfRangeCountVariableIsCheckedAfterTheSourcesOverIt) {
  // OUTBOUND_GROUP_MIN_MEMBERS=0 is read; --min-members may replace it
  // before validation, which then names the variable only if it stayed.
  set("OUTBOUND_GROUP_MIN_MEMBERS", "0");
  auto e = read_group_env(valid());
  EXPECT_EQ(e.config.timing.min_members, 0u);
  try {
    e.validate(e.config);
    ADD_FAILURE() << "no error";
  } catch (const config_error& x) {
    EXPECT_EQ(x.field(), "OUTBOUND_GROUP_MIN_MEMBERS");
    EXPECT_NE(std::string{x.what()}.find(
                "must be an integer >= 1 (at most 2^64 - 1), got 0"),
              std::string::npos)
      << x.what();
  }
  auto c = e.config;
  c.timing.min_members = 2; // the flag's value
  EXPECT_NO_THROW(e.validate(c));
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

// -- the store client's TLS ---------------------------------------------------

TEST(GroupConfigJson, TheStoreClientsTlsFilesAreRead) {
  temp_file ca{"ca"}, cert{"cert"}, key{"key"};
  auto c = parse_group_config(with(
    R"("coordinator": {"endpoint": "https://etcd-1:2379", "client": {"tls": {"ca_file": ")"
    + ca.path() + R"(", "client_cert_file": ")" + cert.path()
    + R"(", "client_key_file": ")" + key.path() + R"("}}})"));
  EXPECT_EQ(c.coordinator.client.tls.ca_file, ca.path());
  EXPECT_EQ(c.coordinator.client.tls.client_cert_file, cert.path());
  EXPECT_EQ(c.coordinator.client.tls.client_key_file, key.path());
  // ... and reach the store's client.
  EXPECT_EQ(store_client_config(c).tls.ca_file, ca.path());
  EXPECT_EQ(store_client_config(c).base_url, "https://etcd-1:2379");
}

TEST(GroupConfigJson, TheStoreClientsTlsIsValidatedNamingTheField) {
  temp_file ca{"ca"}, cert{"cert"};
  auto tls = [](const std::string& endpoint, const std::string& fields) {
    return with(R"("coordinator": {"endpoint": ")" + endpoint
                + R"(", "client": {"tls": {)" + fields + "}}}");
  };
  EXPECT_EQ(
    failing_field(tls("https://e:2379", R"("ca_file": "/nonexistent/ca.pem")")),
    "group.coordinator.client.tls.ca_file");
  EXPECT_EQ(failing_field(tls("https://e:2379",
                              R"("client_cert_file": ")" + cert.path() + "\"")),
            "group.coordinator.client.tls.client_key_file")
    << "a certificate needs its key";
  EXPECT_EQ(
    failing_field(tls("http://e:2379", R"("ca_file": ")" + ca.path() + "\"")),
    "group.coordinator.endpoint")
    << "TLS files with an http endpoint would be ignored";
  EXPECT_EQ(failing_field(tls("https://e:2379", R"("ca_file": 7)")),
            "group.coordinator.client.tls.ca_file");
  EXPECT_EQ(failing_field(with(R"("coordinator": {"client": {"tls": []}})")),
            "group.coordinator.client.tls");
}

TEST_F(GroupConfigEnv, TlsVariablesSetTheStoreClientsFiles) {
  temp_file ca{"ca"}, cert{"cert"}, key{"key"};
  auto base = valid();
  base.coordinator.endpoint = "https://etcd-1:2379";
  set("OUTBOUND_GROUP_CA_FILE", ca.path().c_str());
  set("OUTBOUND_GROUP_CLIENT_CERT", cert.path().c_str());
  set("OUTBOUND_GROUP_CLIENT_KEY", key.path().c_str());
  auto c = group_config_from_env(base);
  EXPECT_EQ(c.coordinator.client.tls.ca_file, ca.path());
  EXPECT_EQ(c.coordinator.client.tls.client_cert_file, cert.path());
  EXPECT_EQ(c.coordinator.client.tls.client_key_file, key.path());
  ::unsetenv("OUTBOUND_GROUP_CLIENT_KEY");
  EXPECT_EQ(env_failure(base), "group.coordinator.client.tls.client_key_file");
  ::unsetenv("OUTBOUND_GROUP_CLIENT_CERT");
  set("OUTBOUND_GROUP_CA_FILE", "/nonexistent/ca.pem");
  EXPECT_EQ(env_failure(base), "OUTBOUND_GROUP_CA_FILE");
  set("OUTBOUND_GROUP_CA_FILE", ca.path().c_str());
  base.coordinator.endpoint = "http://etcd-1:2379";
  EXPECT_EQ(env_failure(base), "group.coordinator.endpoint");
}

// -- files --------------------------------------------------------------------

TEST(GroupConfigFile, ErrorsNameTheFileAndTheField) {
  temp_file f{with(R"("lease_ttl": 1)")};
  try {
    load_group_config(f.path());
    FAIL() << "no error";
  } catch (const config_file_error& e) {
    EXPECT_EQ(e.field(), "group.lease_ttl");
    EXPECT_EQ(e.file(), f.path());
    EXPECT_EQ(std::string{e.what()}.rfind(f.path()
                                            + ": group.lease_ttl: must "
                                              "be >= 2",
                                          0),
              0u)
      << e.what();
  }
  // Malformed text, an unknown field: the same.
  temp_file bad{"{\"name\": "};
  try {
    load_group_config(bad.path());
    FAIL() << "no error";
  } catch (const config_error& e) {
    EXPECT_EQ(e.field(), "group");
    EXPECT_EQ(
      std::string{e.what()}.rfind(bad.path() + ": group: not valid JSON", 0),
      0u)
      << e.what();
  }
}

TEST(GroupConfigFile, AnUnreadableFileSaysWhy) {
  try {
    load_group_config("/nonexistent/group.json");
    FAIL() << "no error";
  } catch (const config_file_error& e) {
    EXPECT_EQ(e.field(), "group");
    EXPECT_EQ(std::string{e.what()},
              "/nonexistent/group.json: group: cannot read: No such file or "
              "directory");
  }
}

TEST(GroupConfigFile, ADirectoryIsNamedAsOne) {
  char dir[] = "/tmp/outbound-group-config-dir-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  try {
    load_group_config(dir);
    ADD_FAILURE() << "no error";
  } catch (const config_file_error& e) {
    EXPECT_EQ(e.file(), dir);
    EXPECT_EQ(std::string{e.what()},
              std::string{dir} + ": group: is a directory");
  }
  ::rmdir(dir);
}

TEST(GroupConfigFile, ASharedFileMayLeaveTheNamesToAnotherSource) {
  temp_file f{R"({"lease_ttl": 6, "coordinator": {"prefix": "/og/"}})"};
  EXPECT_THROW(load_group_config(f.path()), config_file_error)
    << "names required by default";
  auto c = load_group_config(f.path(), group_names::optional);
  EXPECT_TRUE(c.name.empty());
  EXPECT_TRUE(c.member_name.empty());
  EXPECT_DOUBLE_EQ(c.timing.lease_ttl, 6);
  EXPECT_EQ(c.coordinator.prefix, "/og/");
  // A name that is there is still checked, and so is everything else.
  EXPECT_THROW(
    parse_group_config(R"({"name": "Bad Name"})", group_names::optional),
    config_error);
  EXPECT_THROW(parse_group_config(R"({"lease_ttl": 1})", group_names::optional),
               config_error);
}

// -- feed ids -----------------------------------------------------------------

TEST(GroupFeedIds, PrintableUtf8IdsUpTo200BytesPass) {
  EXPECT_EQ(feed_id_failure({"a", "feed-1", "orders/eu", "caf\xC3\xA9",
                             "\xE6\x97\xA5\xE6\x9C\xAC", "\xF0\x9F\x93\xA6",
                             std::string(200, 'x')})
              .first,
            "(valid)");
  EXPECT_EQ(feed_id_failure({}).first, "(valid)");
}

TEST(GroupFeedIds, BadIdsNameTheFieldAndShowTheIdEscaped) {
  auto f = feed_id_failure({"ok", ""});
  EXPECT_EQ(f.first, "feeds[1].id");
  EXPECT_NE(f.second.find("must not be empty"), std::string::npos);

  f = feed_id_failure({std::string(201, 'x')});
  EXPECT_EQ(f.first, "feeds[0].id");
  EXPECT_NE(f.second.find("at most 200 bytes"), std::string::npos) << f.second;
  EXPECT_NE(f.second.find("... (201 bytes)"), std::string::npos) << f.second;

  f = feed_id_failure({"a", "line\nbreak"});
  EXPECT_EQ(f.first, "feeds[1].id");
  EXPECT_NE(f.second.find(R"("line\x0abreak")"), std::string::npos) << f.second;
  EXPECT_EQ(f.second.find('\n'), std::string::npos) << "escaped";

  for (std::string bad : {std::string("tab\there"), std::string("nul\0x", 5),
                          std::string("del\x7f"), std::string("c1\xC2\x85"),
                          std::string("esc\x1b[31m")}) {
    f = feed_id_failure({bad});
    EXPECT_EQ(f.first, "feeds[0].id") << bad;
    EXPECT_NE(f.second.find("control characters"), std::string::npos)
      << f.second;
  }

  for (std::string bad :
       {std::string("\xFF"), std::string("cut\xC3"), std::string("\xC0\xAF"),
        std::string("\xED\xA0\x80"), std::string("\xF4\x90\x80\x80")}) {
    f = feed_id_failure({bad});
    EXPECT_EQ(f.first, "feeds[0].id");
    EXPECT_NE(f.second.find("must be UTF-8"), std::string::npos) << f.second;
  }
  f = feed_id_failure({"\xFF"});
  EXPECT_NE(f.second.find(R"("\xff")"), std::string::npos) << f.second;

  f = feed_id_failure({"a", "b", "a"});
  EXPECT_EQ(f.first, "feeds[2].id");
  EXPECT_NE(f.second.find(R"(duplicate feed id "a")"), std::string::npos)
    << f.second;
}

TEST(GroupFeedIds, QuotingEscapesQuotesAndCutsLongText) {
  EXPECT_EQ(quote_for_error("a\"b\\c"), R"("a\"b\\c")");
  EXPECT_EQ(quote_for_error(std::string(50, 'y'), 4), "\"yyyy\"... (50 bytes)");
  EXPECT_EQ(quote_for_error("caf\xC3\xA9"), "\"caf\xC3\xA9\"");
}
