#include "config/client_config.hpp"
#include "config/config_error.hpp"
#include "protocol/errors.hpp"
#include "actors/messages.hpp"

#include <gtest/gtest.h>

using namespace outbound;

TEST(Config, NegativeBackoffIsRejectedNamingTheField) {
  client_config cfg;
  cfg.base_url = "http://127.0.0.1:8080";
  cfg.retry.base_backoff = -1;
  try {
    cfg.validate();
    FAIL() << "no exception";
  } catch (const config_error& e) {
    EXPECT_EQ(e.field(), "retry.base_backoff");
  }
}
