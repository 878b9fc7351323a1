// protocol/json_number.hpp: whole numbers print plainly, the rest exactly.

#include "protocol/json_number.hpp"

#include <boost/json/serialize.hpp>

#include <gtest/gtest.h>

#include <limits>

using namespace outbound;

TEST(JsonNumber, WholeNumbersPrintWithoutAnExponent) {
  EXPECT_EQ(boost::json::serialize(boost::json::value(60.0)), "6E1");
  EXPECT_EQ(boost::json::serialize(json_number(60.0)), "60");
  EXPECT_EQ(boost::json::serialize(json_number(200.0)), "200");
  EXPECT_EQ(boost::json::serialize(json_number(0.0)), "0");
  EXPECT_EQ(boost::json::serialize(json_number(-3.0)), "-3");
  EXPECT_EQ(boost::json::serialize(json_number(9007199254740992.0)),
            "9007199254740992");
}

TEST(JsonNumber, OtherNumbersStayExactDoubles) {
  EXPECT_EQ(boost::json::serialize(json_number(0.5)), "5E-1");
  EXPECT_EQ(boost::json::serialize(json_number(1e21)), "1E21");
  EXPECT_TRUE(json_number(0.1).is_double());
  EXPECT_EQ(json_number(0.1).as_double(), 0.1);
  EXPECT_TRUE(
    json_number(std::numeric_limits<double>::quiet_NaN()).is_double());
}
