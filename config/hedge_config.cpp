#include "config/hedge_config.hpp"

#include "config/config_error.hpp"
#include "core/validate.hpp"

#include <cmath>

namespace outbound {
inline namespace config {

namespace {

using core::check_fraction_open;
using core::check_non_negative;
using core::check_positive;
using core::got_value;

struct fields {
  std::optional<double> percentile;
  std::optional<double> budget_percent;
  std::optional<double> estimated_rps;
  std::optional<double> rps_window;
  std::optional<double> min_delay;
  std::optional<int> warmup_requests;
  std::optional<double> warmup_delay;
  std::optional<double> window_duration;
};

/// The checks shared by hedge_config and endpoint_config.
void check(const fields& f, const std::string& p) {
  if (f.percentile)
    check_fraction_open(*f.percentile, p + ".percentile");
  if (f.budget_percent)
    check_non_negative(*f.budget_percent, p + ".budget_percent");
  if (f.estimated_rps)
    check_positive(*f.estimated_rps, p + ".estimated_rps");
  if (f.rps_window)
    check_positive(*f.rps_window, p + ".rps_window");
  if (f.min_delay)
    check_non_negative(*f.min_delay, p + ".min_delay");
  if (f.warmup_requests && *f.warmup_requests < 0)
    throw config_error(p + ".warmup_requests", "must be >= 0");
  if (f.warmup_delay)
    check_non_negative(*f.warmup_delay, p + ".warmup_delay");
  if (f.window_duration)
    check_positive(*f.window_duration, p + ".window_duration");
}

} // namespace

void breaker_config::validate(const std::string& prefix) const {
  // 0 would trip on any window of min_samples calls, all successes
  // included, and reopen at every trial: hedging off for good.
  if (!(error_rate_threshold > 0.0 && error_rate_threshold <= 1.0))
    throw config_error(prefix + ".error_rate_threshold",
                       "must be greater than 0 and at most 1"
                         + got_value(error_rate_threshold));
  if (min_samples < 1)
    throw config_error(prefix + ".min_samples", "must be >= 1");
  check_positive(window, prefix + ".window");
  check_non_negative(cooldown, prefix + ".cooldown");
  if (half_open_max_trial < 1)
    throw config_error(prefix + ".half_open_max_trial", "must be >= 1");
}

void hedge_config::validate() const {
  check(fields{percentile, budget_percent, estimated_rps, rps_window,
               min_delay, warmup_requests, warmup_delay, window_duration},
        "hedge");
  if (max_keys < 1)
    throw config_error("hedge.max_keys", "must be >= 1");
  breaker.validate("hedge.breaker");
}

void endpoint_config::validate(const std::string& prefix) const {
  check(fields{percentile, budget_percent, estimated_rps, rps_window,
               min_delay, warmup_requests, warmup_delay, window_duration},
        prefix);
  if (breaker)
    breaker->validate(prefix + ".breaker");
  if (hedge_delay)
    check_non_negative(*hedge_delay, prefix + ".hedge_delay");
}

effective_hedge_config resolve(const hedge_config& base) {
  base.validate();
  effective_hedge_config r;
  static_cast<hedge_config&>(r) = base;
  return r;
}

effective_hedge_config resolve(const hedge_config& base,
                               const endpoint_config& ep) {
  ep.validate();
  auto r = resolve(base);
  if (ep.percentile)
    r.percentile = *ep.percentile;
  if (ep.budget_percent)
    r.budget_percent = *ep.budget_percent;
  if (ep.estimated_rps)
    r.estimated_rps = ep.estimated_rps;
  if (ep.rps_window)
    r.rps_window = *ep.rps_window;
  if (ep.delay_search)
    r.delay_search = *ep.delay_search;
  if (ep.min_delay)
    r.min_delay = *ep.min_delay;
  if (ep.warmup_requests)
    r.warmup_requests = *ep.warmup_requests;
  if (ep.warmup_delay)
    r.warmup_delay = *ep.warmup_delay;
  if (ep.window_duration)
    r.window_duration = *ep.window_duration;
  if (ep.breaker)
    r.breaker = *ep.breaker;
  r.hedge_delay = ep.hedge_delay;
  return r;
}

} // namespace config
} // namespace outbound
