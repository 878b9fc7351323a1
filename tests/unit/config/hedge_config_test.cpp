#include "config/hedge_config.hpp"
#include "config/config_error.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

using namespace outbound;

namespace {

template <class F>
std::string field_of(F&& f) {
  try {
    f();
  } catch (const config_error& e) {
    return e.field();
  }
  return "<valid>";
}

std::string hedge_field(const std::function<void(hedge_config&)>& edit) {
  hedge_config cfg;
  edit(cfg);
  return field_of([&] { cfg.validate(); });
}

std::string endpoint_field(const std::function<void(endpoint_config&)>& edit) {
  endpoint_config ep;
  edit(ep);
  return field_of([&] { ep.validate(); });
}

constexpr double nan_v = std::numeric_limits<double>::quiet_NaN();
constexpr double inf_v = std::numeric_limits<double>::infinity();

} // namespace

TEST(HedgeConfig, DefaultsAreTheReferenceDefaults) {
  hedge_config c;
  EXPECT_EQ(c.percentile, 0.95);
  EXPECT_EQ(c.budget_percent, 10.0);
  EXPECT_FALSE(c.estimated_rps);
  EXPECT_EQ(c.rps_window, 10.0);
  EXPECT_EQ(c.min_delay, 0.001);
  EXPECT_FALSE(c.delay_search);
  EXPECT_EQ(c.warmup_requests, 20);
  EXPECT_EQ(c.warmup_delay, 0.01);
  EXPECT_EQ(c.window_duration, 30.0);
  EXPECT_EQ(c.max_keys, 10000u);
  EXPECT_EQ(c.breaker.error_rate_threshold, 0.5);
  EXPECT_EQ(c.breaker.min_samples, 20);
  EXPECT_EQ(c.breaker.window, 30.0);
  EXPECT_EQ(c.breaker.cooldown, 30.0);
  EXPECT_EQ(c.breaker.half_open_max_trial, 5);
  EXPECT_TRUE(c.breaker.treat_5xx_as_failure);
  EXPECT_EQ(field_of([&] { c.validate(); }), "<valid>");
  EXPECT_EQ(field_of([] { endpoint_config{}.validate(); }), "<valid>");
  EXPECT_EQ(field_of([] { breaker_config{}.validate(); }), "<valid>");
}

TEST(HedgeConfig, EveryBadTransportFieldIsRejectedByName) {
  for (double bad : {0.0, 1.0, -0.1, 1.5, nan_v})
    EXPECT_EQ(hedge_field([&](auto& c) { c.percentile = bad; }),
              "hedge.percentile")
      << bad;
  for (double bad : {-1.0, nan_v, inf_v})
    EXPECT_EQ(hedge_field([&](auto& c) { c.budget_percent = bad; }),
              "hedge.budget_percent");
  for (double bad : {0.0, -5.0, nan_v, inf_v})
    EXPECT_EQ(hedge_field([&](auto& c) { c.estimated_rps = bad; }),
              "hedge.estimated_rps");
  for (double bad : {0.0, -1.0, nan_v})
    EXPECT_EQ(hedge_field([&](auto& c) { c.rps_window = bad; }),
              "hedge.rps_window");
  for (double bad : {-0.001, nan_v, inf_v})
    EXPECT_EQ(hedge_field([&](auto& c) { c.min_delay = bad; }),
              "hedge.min_delay");
  EXPECT_EQ(hedge_field([](auto& c) { c.warmup_requests = -1; }),
            "hedge.warmup_requests");
  for (double bad : {-0.01, nan_v})
    EXPECT_EQ(hedge_field([&](auto& c) { c.warmup_delay = bad; }),
              "hedge.warmup_delay");
  for (double bad : {0.0, -30.0, nan_v, inf_v})
    EXPECT_EQ(hedge_field([&](auto& c) { c.window_duration = bad; }),
              "hedge.window_duration");
  EXPECT_EQ(hedge_field([](auto& c) { c.max_keys = 0; }), "hedge.max_keys");
  // Edges that are valid.
  EXPECT_EQ(hedge_field([](auto& c) {
              c.budget_percent = 0.0;
              c.min_delay = 0.0;
              c.warmup_requests = 0;
              c.warmup_delay = 0.0;
              c.percentile = 0.999;
            }),
            "<valid>");
}

TEST(HedgeConfig, EveryBadBreakerFieldIsRejectedByName) {
  // 0 is refused too: the breaker would open on successes.
  for (double bad : {-0.01, 0.0, 1.01, nan_v})
    EXPECT_EQ(
      hedge_field([&](auto& c) { c.breaker.error_rate_threshold = bad; }),
      "hedge.breaker.error_rate_threshold");
  EXPECT_EQ(hedge_field([](auto& c) { c.breaker.min_samples = 0; }),
            "hedge.breaker.min_samples");
  for (double bad : {0.0, -1.0, nan_v})
    EXPECT_EQ(hedge_field([&](auto& c) { c.breaker.window = bad; }),
              "hedge.breaker.window");
  for (double bad : {-1.0, nan_v})
    EXPECT_EQ(hedge_field([&](auto& c) { c.breaker.cooldown = bad; }),
              "hedge.breaker.cooldown");
  EXPECT_EQ(hedge_field([](auto& c) { c.breaker.half_open_max_trial = 0; }),
            "hedge.breaker.half_open_max_trial");
  EXPECT_EQ(hedge_field([](auto& c) {
              c.breaker.error_rate_threshold = 1.0;
              c.breaker.cooldown = 0.0;
            }),
            "<valid>");
  EXPECT_EQ(hedge_field([](auto& c) { c.breaker.error_rate_threshold = 1e-9; }),
            "<valid>");
  breaker_config b;
  b.min_samples = 0;
  EXPECT_EQ(field_of([&] { b.validate(); }), "breaker.min_samples");
}

TEST(HedgeConfig, EveryBadEndpointFieldIsRejectedByName) {
  EXPECT_EQ(endpoint_field([](auto& e) { e.percentile = 1.0; }),
            "endpoint.percentile");
  EXPECT_EQ(endpoint_field([](auto& e) { e.budget_percent = -1.0; }),
            "endpoint.budget_percent");
  EXPECT_EQ(endpoint_field([](auto& e) { e.estimated_rps = 0.0; }),
            "endpoint.estimated_rps");
  EXPECT_EQ(endpoint_field([](auto& e) { e.rps_window = 0.0; }),
            "endpoint.rps_window");
  EXPECT_EQ(endpoint_field([](auto& e) { e.min_delay = -1.0; }),
            "endpoint.min_delay");
  EXPECT_EQ(endpoint_field([](auto& e) { e.warmup_requests = -3; }),
            "endpoint.warmup_requests");
  EXPECT_EQ(endpoint_field([](auto& e) { e.warmup_delay = nan_v; }),
            "endpoint.warmup_delay");
  EXPECT_EQ(endpoint_field([](auto& e) { e.window_duration = 0.0; }),
            "endpoint.window_duration");
  EXPECT_EQ(endpoint_field([](auto& e) { e.hedge_delay = -0.001; }),
            "endpoint.hedge_delay");
  EXPECT_EQ(endpoint_field([](auto& e) {
              breaker_config b;
              b.cooldown = -1.0;
              e.breaker = b;
            }),
            "endpoint.breaker.cooldown");
  EXPECT_EQ(endpoint_field([](auto& e) { e.hedge_delay = 0.0; }), "<valid>");
}

TEST(HedgeConfig, ResolveInheritsUnsetFieldsAndReplacesTheWholeBreaker) {
  hedge_config base;
  base.percentile = 0.95;
  base.breaker.min_samples = 7;
  base.breaker.cooldown = 12.0;
  endpoint_config ep;
  auto r = resolve(base, ep);
  EXPECT_EQ(r.percentile, 0.95);
  EXPECT_EQ(r.breaker.min_samples, 7);
  EXPECT_FALSE(r.hedge_delay);

  ep.percentile = 0.5;
  ep.estimated_rps = 7.5;
  ep.hedge_delay = 0.05;
  breaker_config b;
  b.min_samples = 3;
  ep.breaker = b;
  r = resolve(base, ep);
  EXPECT_EQ(r.percentile, 0.5);
  EXPECT_EQ(r.estimated_rps, 7.5);
  EXPECT_EQ(r.hedge_delay, 0.05);
  EXPECT_EQ(r.breaker.min_samples, 3);
  // No field merge: the override's cooldown is its own default, not 12.
  EXPECT_EQ(r.breaker.cooldown, 30.0);
  EXPECT_EQ(r.budget_percent, 10.0);
}

TEST(HedgeConfig, ResolveValidatesBothSides) {
  hedge_config base;
  base.percentile = 2.0;
  EXPECT_EQ(field_of([&] { resolve(base, endpoint_config{}); }),
            "hedge.percentile");
  endpoint_config ep;
  ep.warmup_delay = -1.0;
  EXPECT_EQ(field_of([&] { resolve(hedge_config{}, ep); }),
            "endpoint.warmup_delay");
}

TEST(HedgeConfig, AnEndpointCanTurnTheDelaySearchOnOrOff) {
  endpoint_config ep;
  EXPECT_FALSE(resolve(hedge_config{}, ep).delay_search);
  ep.delay_search = true;
  EXPECT_TRUE(resolve(hedge_config{}, ep).delay_search);
  hedge_config on;
  on.delay_search = true;
  EXPECT_TRUE(resolve(on, endpoint_config{}).delay_search);
  ep.delay_search = false;
  EXPECT_FALSE(resolve(on, ep).delay_search);
}
