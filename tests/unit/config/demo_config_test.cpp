// `outbound demo` settings: defaults, JSON parsing, and every bad
// field named as `demo.<path>`.

#include "config/demo_config.hpp"
#include "config/config_error.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include <unistd.h>

using namespace outbound;

namespace {

/// The field a parse fails on, or "(valid)".
std::string failing_field(const std::string& json) {
  try {
    parse_demo_config(json);
  } catch (const config_error& e) {
    return e.field();
  }
  return "(valid)";
}

} // namespace

TEST(DemoConfig, DefaultsAreTheIssuesDefaults) {
  demo_config c;
  EXPECT_EQ(c.feeds, 1000u);
  EXPECT_DOUBLE_EQ(c.duration, 60.0);
  EXPECT_DOUBLE_EQ(c.rate, 200.0);
  EXPECT_EQ(c.metrics_port, 9464);
  EXPECT_EQ(c.cluster_size, 3u);
  EXPECT_TRUE(c.hub.empty());
  EXPECT_EQ(c.traffic.routes.size(), 3u);
  EXPECT_EQ(c.traffic.routes[0], "/fast");
  EXPECT_DOUBLE_EQ(c.hedging.percentile, 0.95);
  EXPECT_NO_THROW(c.validate());
}

TEST(DemoConfig, EmptyObjectKeepsEveryDefault) {
  auto c = parse_demo_config("{}");
  EXPECT_EQ(c.feeds, 1000u);
  EXPECT_DOUBLE_EQ(c.traffic.requests_per_second, 100.0);
  EXPECT_EQ(c.oracle.callers, 8u);
}

TEST(DemoConfig, EveryFieldIsRead) {
  auto c = parse_demo_config(R"({
    "feeds": 50, "duration": 5.5, "rate": 10, "subject_groups": 7,
    "metrics_port": 0, "status_interval": 0.5,
    "hub": "http://127.0.0.1:8080", "oracle_endpoints": ["127.0.0.1:9001"],
    "cluster_size": 2, "max_labelled_feeds": 3, "hub_retention": 5000,
    "traffic": {"requests_per_second": 20, "concurrency": 2,
                "routes": ["/fast"], "timeout": 1, "deadline": 3},
    "oracle": {"calls_per_second": 30, "callers": 3, "count": 4,
               "timeout": 0.25},
    "hedging": {"percentile": 0.9, "budget_percent": 5,
                "estimated_rps": 40, "warmup_requests": 3,
                "breaker": {"min_samples": 4, "cooldown": 2,
                            "treat_5xx_as_failure": false}}})");
  EXPECT_EQ(c.feeds, 50u);
  EXPECT_DOUBLE_EQ(c.duration, 5.5);
  EXPECT_DOUBLE_EQ(c.rate, 10.0);
  EXPECT_EQ(c.subject_groups, 7u);
  EXPECT_EQ(c.metrics_port, 0);
  EXPECT_DOUBLE_EQ(c.status_interval, 0.5);
  EXPECT_EQ(c.hub, "http://127.0.0.1:8080");
  ASSERT_EQ(c.oracle_endpoints.size(), 1u);
  EXPECT_EQ(c.oracle_endpoints[0], "127.0.0.1:9001");
  EXPECT_EQ(c.cluster_size, 2u);
  EXPECT_EQ(c.max_labelled_feeds, 3u);
  EXPECT_EQ(c.hub_retention, 5000u);
  EXPECT_DOUBLE_EQ(c.traffic.requests_per_second, 20.0);
  EXPECT_EQ(c.traffic.concurrency, 2u);
  ASSERT_EQ(c.traffic.routes.size(), 1u);
  EXPECT_DOUBLE_EQ(c.traffic.timeout, 1.0);
  EXPECT_DOUBLE_EQ(c.traffic.deadline, 3.0);
  EXPECT_DOUBLE_EQ(c.oracle.calls_per_second, 30.0);
  EXPECT_EQ(c.oracle.callers, 3u);
  EXPECT_EQ(c.oracle.count, 4u);
  EXPECT_DOUBLE_EQ(c.oracle.timeout, 0.25);
  EXPECT_DOUBLE_EQ(c.hedging.percentile, 0.9);
  EXPECT_DOUBLE_EQ(c.hedging.budget_percent, 5.0);
  ASSERT_TRUE(c.hedging.estimated_rps.has_value());
  EXPECT_DOUBLE_EQ(*c.hedging.estimated_rps, 40.0);
  EXPECT_EQ(c.hedging.warmup_requests, 3);
  EXPECT_EQ(c.hedging.breaker.min_samples, 4);
  EXPECT_DOUBLE_EQ(c.hedging.breaker.cooldown, 2.0);
  EXPECT_FALSE(c.hedging.breaker.treat_5xx_as_failure);
}

TEST(DemoConfig, NotAnObjectNamesDemo) {
  EXPECT_EQ(failing_field("[1,2]"), "demo");
  EXPECT_EQ(failing_field("{\"feeds\": "), "demo");
  EXPECT_EQ(failing_field(""), "demo");
}

TEST(DemoConfig, NumbersNoDoubleCanHoldAreNamedWithTheirPath) {
  EXPECT_EQ(failing_field(R"({"duration": 1e400})"), "demo.duration");
  EXPECT_EQ(
    failing_field(R"({"hedging": {"max_keys": 123456789012345678901}})"),
    "demo.hedging.max_keys");
  try {
    parse_demo_config(R"({"rate": 123456789012345678901})");
    ADD_FAILURE() << "accepted";
  } catch (const config_error& e) {
    EXPECT_STREQ(e.what(), "demo.rate: integer of 21 digits not exact in "
                           "IEEE 754 binary64");
  }
}

TEST(DemoConfig, UnknownKeysAreNamedWithTheirPath) {
  EXPECT_EQ(failing_field(R"({"feed": 10})"), "demo.feed");
  EXPECT_EQ(failing_field(R"({"traffic": {"rps": 1}})"), "demo.traffic.rps");
  EXPECT_EQ(failing_field(R"({"hedging": {"percentil": 0.9}})"),
            "demo.hedging.percentil");
  EXPECT_EQ(failing_field(R"({"hedging": {"breaker": {"x": 1}}})"),
            "demo.hedging.breaker.x");
}

TEST(DemoConfig, WrongTypesAreNamed) {
  EXPECT_EQ(failing_field(R"({"feeds": "many"})"), "demo.feeds");
  EXPECT_EQ(failing_field(R"({"feeds": 1.5})"), "demo.feeds");
  EXPECT_EQ(failing_field(R"({"duration": null})"), "demo.duration");
  EXPECT_EQ(failing_field(R"({"hub": 8080})"), "demo.hub");
  EXPECT_EQ(failing_field(R"({"traffic": []})"), "demo.traffic");
  EXPECT_EQ(failing_field(R"({"traffic": {"routes": ["/a", 2]}})"),
            "demo.traffic.routes[1]");
  EXPECT_EQ(
    failing_field(R"({"hedging": {"breaker": {"treat_5xx_as_failure": 1}}})"),
    "demo.hedging.breaker.treat_5xx_as_failure");
}

TEST(DemoConfig, TheDelaySearchIsABooleanAtBothLevels) {
  EXPECT_TRUE(parse_demo_config(R"({"hedging": {"delay_search": true}})")
                .hedging.delay_search);
  EXPECT_EQ(failing_field(R"({"hedging": {"delay_search": 0}})"),
            "demo.hedging.delay_search");
  auto c = parse_demo_config(
    R"({"traffic": {"endpoints": {"flaky": {"delay_search": false}}}})");
  ASSERT_TRUE(c.traffic.endpoints.count("flaky"));
  EXPECT_EQ(c.traffic.endpoints.at("flaky").delay_search, false);
  EXPECT_EQ(
    failing_field(
      R"({"traffic": {"endpoints": {"flaky": {"delay_search": "no"}}}})"),
    "demo.traffic.endpoints.flaky.delay_search");
}

TEST(DemoConfig, OutOfRangeValuesAreNamed) {
  EXPECT_EQ(failing_field(R"({"feeds": -1})"), "demo.feeds");
  EXPECT_EQ(failing_field(R"({"feeds": 100001})"), "demo.feeds");
  EXPECT_EQ(failing_field(R"({"duration": 0})"), "demo.duration");
  EXPECT_EQ(failing_field(R"({"duration": 86401})"), "demo.duration");
  EXPECT_EQ(failing_field(R"({"rate": -5})"), "demo.rate");
  EXPECT_EQ(failing_field(R"({"metrics_port": 65536})"), "demo.metrics_port");
  EXPECT_EQ(failing_field(R"({"subject_groups": 0})"), "demo.subject_groups");
  EXPECT_EQ(failing_field(R"({"status_interval": 0})"), "demo.status_interval");
  EXPECT_EQ(failing_field(R"({"hub": "ftp://x"})"), "demo.hub");
  EXPECT_EQ(failing_field(R"({"oracle_endpoints": [""]})"),
            "demo.oracle_endpoints[0]");
  EXPECT_EQ(failing_field(R"({"cluster_size": 17})"), "demo.cluster_size");
  EXPECT_EQ(failing_field(R"({"hub_retention": 10})"), "demo.hub_retention");
  EXPECT_EQ(failing_field(R"({"traffic": {"concurrency": 0}})"),
            "demo.traffic.concurrency");
  EXPECT_EQ(failing_field(R"({"traffic": {"routes": []}})"),
            "demo.traffic.routes");
  EXPECT_EQ(failing_field(R"({"traffic": {"routes": ["/fast", "slow"]}})"),
            "demo.traffic.routes[1]");
  EXPECT_EQ(failing_field(R"({"traffic": {"routes": ["/a b"]}})"),
            "demo.traffic.routes[0]");
  EXPECT_EQ(failing_field(R"({"traffic": {"timeout": 3, "deadline": 2}})"),
            "demo.traffic.deadline");
  EXPECT_EQ(failing_field(R"({"oracle": {"callers": 300}})"),
            "demo.oracle.callers");
  EXPECT_EQ(failing_field(R"({"oracle": {"count": 0}})"), "demo.oracle.count");
  EXPECT_EQ(failing_field(R"({"oracle": {"timeout": -1}})"),
            "demo.oracle.timeout");
}

TEST(DemoConfig, HedgingErrorsAreNamedInTheDemosFile) {
  EXPECT_EQ(failing_field(R"({"hedging": {"percentile": 1.0}})"),
            "demo.hedging.percentile");
  EXPECT_EQ(failing_field(R"({"hedging": {"budget_percent": -1}})"),
            "demo.hedging.budget_percent");
  EXPECT_EQ(failing_field(R"({"hedging": {"breaker": {"window": 0}}})"),
            "demo.hedging.breaker.window");
  try {
    parse_demo_config(R"({"hedging": {"percentile": 2}})");
    FAIL() << "no error";
  } catch (const config_error& e) {
    EXPECT_EQ(
      std::string{e.what()},
      "demo.hedging.percentile: must be strictly between 0 and 1, got 2");
  }
}

TEST(DemoConfig, ValidateCatchesValuesSetInCode) {
  demo_config c;
  c.rate = std::numeric_limits<double>::quiet_NaN();
  try {
    c.validate();
    FAIL() << "no error";
  } catch (const config_error& e) {
    EXPECT_EQ(e.field(), "demo.rate");
  }
}

TEST(DemoConfig, AWrongValueIsShownAfterItsField) {
  try {
    parse_demo_config(R"({"feeds": -3})");
    FAIL() << "no error";
  } catch (const config_error& e) {
    EXPECT_STREQ(e.what(),
                 "demo.feeds: must be an integer between 0 and 100000, got -3");
  }
  try {
    parse_demo_config(R"({"hub": 8080})");
    FAIL() << "no error";
  } catch (const config_error& e) {
    EXPECT_STREQ(e.what(), "demo.hub: must be a string, got 8080");
  }
  try {
    parse_demo_config(R"({"duration": "long\u0001"})");
    FAIL() << "no error";
  } catch (const config_error& e) {
    EXPECT_STREQ(e.what(),
                 "demo.duration: must be a number, got \"long\\x01\"");
  }
}

TEST(DemoConfig, AnErrorInAFileNamesTheFile) {
  auto path
    = std::filesystem::temp_directory_path()
      / ("outbound-demo-config-" + std::to_string(::getpid()) + ".json");
  {
    std::ofstream f{path};
    f << R"({"feeds": -3})";
  }
  try {
    load_demo_config(path.string());
    ADD_FAILURE() << "no error";
  } catch (const config_error& e) {
    EXPECT_EQ(e.field(), "demo.feeds");
    EXPECT_EQ(std::string{e.what()},
              path.string()
                + ": demo.feeds: must be an integer between 0 and 100000, "
                  "got -3");
  }
  std::filesystem::remove(path);
}

TEST(DemoConfig, MissingFileNamesDemo) {
  try {
    load_demo_config("/nonexistent/demo.json");
    FAIL() << "no error";
  } catch (const config_error& e) {
    EXPECT_EQ(e.field(), "demo");
    // The path and why it could not be read.
    EXPECT_EQ(std::string{e.what()},
              "demo: cannot read /nonexistent/demo.json: No such file or "
              "directory");
  }
}

TEST(DemoConfig, DuplicateKeysAreAConfigErrorNamingTheKey) {
  try {
    parse_demo_config(R"({"feeds":2,"traffic":{"timeout":1,"timeout":2}})");
    FAIL() << "no error";
  } catch (const config_error& e) {
    EXPECT_EQ(e.field(), "demo.traffic.timeout");
  }
  try {
    parse_demo_config(R"({"feeds":2,"feeds":3})");
    FAIL() << "no error";
  } catch (const config_error& e) {
    EXPECT_EQ(e.field(), "demo.feeds");
  }
}

TEST(DemoConfig, AHubUrlWithoutAHostIsNamedDemoHub) {
  try {
    parse_demo_config(R"({"hub":"http://"})");
    FAIL() << "no error";
  } catch (const config_error& e) {
    EXPECT_EQ(e.field(), "demo.hub");
  }
}

// -- the comparisons of the report: outage drill, bursts, restart ----------

TEST(DemoConfig, TheComparisonSettingsHaveTheirDefaults) {
  demo_config c;
  EXPECT_TRUE(c.traffic.compare_unhedged);
  ASSERT_EQ(c.traffic.endpoints.count("flaky"), 1u);
  EXPECT_EQ(c.traffic.endpoints.at("flaky").percentile, 0.85);
  EXPECT_EQ(c.traffic.endpoints.at("flaky").budget_percent, 20.0);
  EXPECT_EQ(c.traffic.endpoints.at("flaky").warmup_delay, 0.02);
  EXPECT_DOUBLE_EQ(c.outage.calls_per_second, 50.0);
  EXPECT_DOUBLE_EQ(c.outage.start, 20.0);
  EXPECT_DOUBLE_EQ(c.outage.seconds, 7.0);
  EXPECT_EQ(c.outage.route, "/steady");
  EXPECT_EQ(c.outage.max_attempts, 4);
  EXPECT_EQ(c.bursts.size, 1000u);
  EXPECT_DOUBLE_EQ(c.bursts.interval, 5.0);
  EXPECT_DOUBLE_EQ(c.hub_restart_at, 40.0);
  EXPECT_NO_THROW(c.validate());
}

TEST(DemoConfig, TheComparisonSettingsAreRead) {
  auto c = parse_demo_config(R"({
    "traffic": {"compare_unhedged": false,
                "endpoints": {"lognormal": {"percentile": 0.9,
                                            "hedge_delay": 0.02}}},
    "outage": {"calls_per_second": 10, "start": 3, "seconds": 4,
               "route": "/slow", "max_attempts": 3},
    "bursts": {"size": 0, "interval": 2},
    "hub_restart_at": 0})");
  EXPECT_FALSE(c.traffic.compare_unhedged);
  ASSERT_EQ(c.traffic.endpoints.size(), 1u); // replaces the defaults
  EXPECT_EQ(c.traffic.endpoints.at("lognormal").percentile, 0.9);
  EXPECT_EQ(c.traffic.endpoints.at("lognormal").hedge_delay, 0.02);
  EXPECT_DOUBLE_EQ(c.outage.calls_per_second, 10.0);
  EXPECT_DOUBLE_EQ(c.outage.start, 3.0);
  EXPECT_DOUBLE_EQ(c.outage.seconds, 4.0);
  EXPECT_EQ(c.outage.route, "/slow");
  EXPECT_EQ(c.outage.max_attempts, 3);
  EXPECT_EQ(c.bursts.size, 0u);
  EXPECT_DOUBLE_EQ(c.bursts.interval, 2.0);
  EXPECT_DOUBLE_EQ(c.hub_restart_at, 0.0);
}

TEST(DemoConfig, BadComparisonSettingsAreNamed) {
  EXPECT_EQ(failing_field(R"({"outage": {"seconds": 7.5}})"),
            "demo.outage.seconds");
  EXPECT_EQ(failing_field(R"({"outage": {"seconds": 0}})"),
            "demo.outage.seconds");
  EXPECT_EQ(failing_field(R"({"outage": {"route": "/v1/events"}})"),
            "demo.outage.route");
  EXPECT_EQ(failing_field(R"({"outage": {"max_attempts": 1}})"),
            "demo.outage.max_attempts");
  EXPECT_EQ(failing_field(R"({"outage": {"start": -1}})"), "demo.outage.start");
  EXPECT_EQ(failing_field(R"({"outage": {"calls_per_second": -1}})"),
            "demo.outage.calls_per_second");
  EXPECT_EQ(failing_field(R"({"outage": {"calls_per_second": 101}})"),
            "demo.outage.calls_per_second");
  EXPECT_EQ(failing_field(R"({"outage": {"x": 1}})"), "demo.outage.x");
  EXPECT_EQ(failing_field(R"({"bursts": {"size": 100001}})"),
            "demo.bursts.size");
  EXPECT_EQ(failing_field(R"({"bursts": {"interval": 0}})"),
            "demo.bursts.interval");
  EXPECT_EQ(failing_field(R"({"hub_restart_at": -1})"), "demo.hub_restart_at");
  EXPECT_EQ(failing_field(R"({"traffic": {"compare_unhedged": 1}})"),
            "demo.traffic.compare_unhedged");
  // An override of an endpoint no route has is a typo, not a no-op.
  EXPECT_EQ(failing_field(R"({"traffic": {"endpoints": {"flakey": {}}}})"),
            "demo.traffic.endpoints.flakey");
  EXPECT_EQ(failing_field(
              R"({"traffic": {"endpoints": {"flaky": {"percentile": 2}}}})"),
            "demo.traffic.endpoints.flaky.percentile");
  EXPECT_EQ(
    failing_field(R"({"traffic": {"endpoints": {"flaky": {"nope": 2}}}})"),
    "demo.traffic.endpoints.flaky.nope");
  // The drill's route may not be a traffic route: its outage would fail
  // the compared clients' calls too. Without either side it may.
  EXPECT_EQ(failing_field(R"({"outage": {"route": "/fast"}})"),
            "demo.outage.route");
  EXPECT_EQ(failing_field(R"({"outage": {"route": "/lognormal"}})"),
            "demo.outage.route");
  EXPECT_EQ(failing_field(R"({"outage": {"route": "/fast",
                                          "calls_per_second": 0}})"),
            "(valid)");
  EXPECT_EQ(failing_field(R"({"outage": {"route": "/fast"},
                              "traffic": {"requests_per_second": 0}})"),
            "(valid)");
  // Times the demo adds to clock times: at most a day (1e12 s overflowed
  // and every call failed at once).
  EXPECT_EQ(
    failing_field(R"({"traffic": {"timeout": 1e12, "deadline": 1e12}})"),
    "demo.traffic.timeout");
  EXPECT_EQ(failing_field(R"({"traffic": {"deadline": 86401}})"),
            "demo.traffic.deadline");
  EXPECT_EQ(failing_field(R"({"oracle": {"timeout": 1e12}})"),
            "demo.oracle.timeout");
  EXPECT_EQ(failing_field(R"({"traffic": {"timeout": 86400,
                                           "deadline": 86400}})"),
            "(valid)");
}

TEST(DemoConfig, EndpointNamesFollowTheRoutePath) {
  EXPECT_EQ(demo_endpoint_name("/lognormal?mean_ms=5"), "lognormal");
  EXPECT_EQ(demo_endpoint_name("/a/b"), "a_b");
  EXPECT_EQ(demo_endpoint_name("/"), "root");
}

// A range error ends with the value given, in a form that reads back as
// that value: one just past the bound never prints as the bound.
TEST(DemoConfig, ARangeErrorShowsTheValueGiven) {
  auto what = [](const char* json) -> std::string {
    try {
      parse_demo_config(json);
    } catch (const config_error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_EQ(what(R"({"duration":86400.01})"),
            "demo.duration: must be between 0 and 86400, got 86400.01");
  EXPECT_EQ(what(R"({"feeds":200000})"),
            "demo.feeds: must be an integer between 0 and 100000, got 200000");
  // The same rule, in the same words, on a config built in code (the CLI's
  // --feeds).
  demo_config c;
  c.feeds = 200000;
  try {
    c.validate();
    ADD_FAILURE() << "no error";
  } catch (const config_error& e) {
    EXPECT_EQ(std::string{e.what()},
              "demo.feeds: must be an integer between 0 and 100000, got "
              "200000");
  }
  EXPECT_EQ(what(R"({"oracle":{"callers":0}})"),
            "demo.oracle.callers: must be an integer between 1 and 256, got 0");
}
