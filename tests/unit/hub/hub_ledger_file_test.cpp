// The hub's ledger file (hub/ledger_file.hpp): a restarted hub reloads the
// same ids and ledger epoch; a torn last line is cut, any other bad line
// is a config_error naming ledger_file.

#include "hub/ledger_file.hpp"

#include "config/config_error.hpp"
#include "hub/ledger_log.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>

using namespace outbound;

namespace {

class LedgerFile : public ::testing::Test {
protected:
  void SetUp() override {
    path_
      = (std::filesystem::temp_directory_path()
         / ("outbound-ledger-file-" + std::to_string(::getpid()) + "-"
            + ::testing::UnitTest::GetInstance()->current_test_info()->name()))
          .string();
    std::remove(path_.c_str());
  }

  void TearDown() override {
    std::remove(path_.c_str());
  }

  std::string slurp() const {
    std::ifstream in{path_, std::ios::binary};
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }

  void write(const std::string& text) const {
    std::ofstream out{path_, std::ios::binary | std::ios::trunc};
    out << text;
  }

  std::string field_of_error(const std::string& fresh = "f") {
    try {
      ledger_log log;
      ledger_file f{path_, log, fresh};
    } catch (const config_error& e) {
      return e.field();
    }
    return "<no error>";
  }

  std::string path_;
};

void store(ledger_log& log, ledger_file& f, const std::string& subject,
           const std::string& key = "") {
  auto r = log.append(subject, "k", R"({"n":1})", key, log.head() + 1, 1.5);
  if (!r.duplicate)
    f.append(*r.event);
}

} // namespace

TEST_F(LedgerFile, ARestartReloadsTheSameIdsAndEpoch) {
  {
    ledger_log log;
    ledger_file f{path_, log, "aaaa"};
    EXPECT_EQ(f.epoch(), "aaaa");
    store(log, f, "orders/1", "k1");
    store(log, f, "orders/2");
    store(log, f, "orders/3");
  }
  ledger_log again;
  ledger_file f{path_, again, "bbbb"};
  EXPECT_EQ(f.epoch(), "aaaa") << "the same incarnation";
  EXPECT_EQ(f.loaded(), 3u);
  EXPECT_EQ(again.head(), 3);
  ASSERT_TRUE(again.get(2));
  EXPECT_EQ(again.get(2)->subject, "orders/2");
  EXPECT_TRUE(again.find_duplicate("k1")) << "dedupe keys come back too";
  store(again, f, "orders/4");
  ledger_log third;
  ledger_file g{path_, third, "cccc"};
  EXPECT_EQ(third.head(), 4);
  EXPECT_EQ(third.get(4)->subject, "orders/4");
}

TEST_F(LedgerFile, ATornLastLineIsCutAndTheFileGoesOn) {
  {
    ledger_log log;
    ledger_file f{path_, log, "aaaa"};
    store(log, f, "orders/1");
    store(log, f, "orders/2");
  }
  auto good = slurp();
  write(good + R"({"dedupe_key":"","event":{"id":3,"se)"); // killed mid-write
  {
    ledger_log log;
    ledger_file f{path_, log, "bbbb"};
    EXPECT_EQ(log.head(), 2);
    EXPECT_EQ(slurp(), good) << "the torn bytes are cut";
    store(log, f, "orders/3");
  }
  ledger_log log;
  ledger_file f{path_, log, "cccc"};
  EXPECT_EQ(log.head(), 3);
  EXPECT_EQ(f.epoch(), "aaaa");
}

TEST_F(LedgerFile, ABadLineInTheMiddleIsAConfigError) {
  write("{\"ledger_epoch\":\"aaaa\"}\nnot json\n{\"ledger_epoch\":\"x\"}\n");
  EXPECT_EQ(field_of_error(), "ledger_file");
  write("[1,2]\n{}\n");
  EXPECT_EQ(field_of_error(), "ledger_file");
  // Someone else's file (a typo in --ledger-file) is refused, never cut.
  write("#!/bin/sh\necho hi\n");
  EXPECT_EQ(field_of_error(), "ledger_file");
  write("no newline at all");
  EXPECT_EQ(field_of_error(), "ledger_file");
  EXPECT_EQ(slurp(), "no newline at all");
  // Ids out of order (a hand-edited file).
  write(
    "{\"ledger_epoch\":\"aaaa\"}\n"
    R"({"dedupe_key":"","event":{"id":5,"seq":1,"subject":"s","kind":"k","metadata":{},"ts":1}})"
    "\n"
    R"({"dedupe_key":"","event":{"id":6,"seq":1,"subject":"s","kind":"k","metadata":{},"ts":1}})"
    "\n");
  EXPECT_EQ(field_of_error(), "ledger_file");
}

TEST_F(LedgerFile, AnEmptyOrMissingFileStartsANewLedger) {
  write("");
  {
    ledger_log log;
    ledger_file f{path_, log, "fresh"};
    EXPECT_EQ(f.epoch(), "fresh");
    EXPECT_EQ(log.head(), 0);
  }
  EXPECT_EQ(slurp(), "{\"ledger_epoch\":\"fresh\"}\n");
  std::remove(path_.c_str());
  ledger_log log;
  ledger_file f{path_, log, "other"};
  EXPECT_EQ(f.epoch(), "other");
}

TEST_F(LedgerFile, AnUnwritablePathIsAConfigError) {
  path_ = "/nonexistent-dir/outbound/ledger";
  EXPECT_EQ(field_of_error(), "ledger_file");
}

TEST_F(LedgerFile, ALedgerWhoseDedupeIndexWasRefreshedReloads) {
  // Capacity 2: A, B, a duplicate publish of A (refreshes it, not
  // written), C (evicts B), B again (a new event). Replaying the appends
  // alone would evict A instead and see B as a duplicate.
  ledger_config lc;
  lc.dedupe_capacity = 2;
  {
    ledger_log log{lc};
    ledger_file f{path_, log, "aaaa"};
    store(log, f, "a", "A");
    store(log, f, "b", "B");
    EXPECT_TRUE(log.find_duplicate("A"));
    store(log, f, "c", "C");
    store(log, f, "b2", "B");
    EXPECT_EQ(log.head(), 4);
  }
  ledger_log log{lc};
  ledger_file f{path_, log, "bbbb"};
  EXPECT_EQ(log.head(), 4);
  EXPECT_EQ(log.get(4)->subject, "b2");
}

TEST_F(LedgerFile, AnEventOverTheLimitsInForceIsAConfigErrorNamingTheLine) {
  // A file written by a hub with larger limits (a 900 KB subject): served
  // as it is, 40 such events make a replay page no default client can read.
  publish_limits large;
  large.subject_max_bytes = 1'000'000;
  large.event_max_bytes = 1'000'000;
  {
    ledger_log log;
    ledger_file f{path_, log, "aaaa", large};
    store(log, f, "orders/1");
    store(log, f, std::string(900'000, 's'));
  }
  {
    // The limits it was written under: it loads.
    ledger_log log;
    ledger_file f{path_, log, "bbbb", large};
    EXPECT_EQ(log.head(), 2);
  }
  try {
    ledger_log log;
    ledger_file f{path_, log, "cccc"}; // the hub's defaults
    FAIL() << "loaded an event over the default limits";
  } catch (const config_error& e) {
    EXPECT_EQ(e.field(), "ledger_file");
    std::string what = e.what();
    EXPECT_NE(what.find("line 3"), std::string::npos) << what;
    EXPECT_NE(what.find("subject exceeds 1024 bytes"), std::string::npos)
      << what;
  }
  // Depth: metadata nested 5 levels, loaded under a limit of 4.
  write(
    "{\"ledger_epoch\":\"aaaa\"}\n"
    R"({"dedupe_key":"","event":{"id":1,"seq":1,"subject":"s","kind":"k","metadata":{"a":{"b":{"c":{"d":{}}}}},"ts":1}})"
    "\n");
  publish_limits shallow;
  shallow.metadata_max_depth = 4;
  try {
    ledger_log log;
    ledger_file f{path_, log, "dddd", shallow};
    FAIL() << "loaded metadata deeper than the limit";
  } catch (const config_error& e) {
    EXPECT_NE(std::string{e.what()}.find("deeper than 4"), std::string::npos)
      << e.what();
  }
}
