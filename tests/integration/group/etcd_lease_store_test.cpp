// The etcd lease store (actors/group/etcd_lease_store.hpp) against a real
// etcd 3.4 (Debian 12's etcd-server 3.4.23, tests/support/etcd_fixture.hpp):
// the port's contract (actors/group/lease_store.hpp) request by request,
// races between two leases, fencing, the late-commit guard, batches above
// one txn's limit; and, against a scripted HTTP server, answers that are not
// what etcd sends. The gateway facts the store relies on are pinned by
// EtcdGateway.* (docs/etcd-gateway.md).
//
// One etcd per suite; every test works under its own group name. Without
// an etcd binary the tests FAIL (CI installs etcd-server).

#include "tests/support/etcd_fixture.hpp"
#include "tests/support/scripted_server.hpp"

#include "actors/client/blocking_client.hpp"
#include "actors/group/etcd_lease_store.hpp"
#include "config/client_config.hpp"
#include "config/config_error.hpp"
#include "core/call_types.hpp"

#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

using namespace outbound;
using namespace outbound::testing;
namespace json = boost::json;
using namespace std::chrono_literals;

namespace {

using steady = std::chrono::steady_clock;

/// A request's answer: the value, or the error it failed with.
template <class T>
struct answer {
  std::optional<T> value;
  caf::error error;

  bool ok() const {
    return value.has_value();
  }
};

std::string describe(const caf::error& e) {
  return e ? caf::to_string(e) : std::string{"no error"};
}

std::map<std::string, claim_reply> by_feed(const std::vector<claim_reply>& v) {
  std::map<std::string, claim_reply> out;
  for (auto& r : v)
    out[r.feed] = r;
  return out;
}

std::map<std::string, commit_outcome>
by_feed(const std::vector<commit_reply>& v) {
  std::map<std::string, commit_outcome> out;
  for (auto& r : v)
    out[r.feed] = r.outcome;
  return out;
}

member_record record(const std::string& name) {
  return member_record{name, name + "-inc-1", "127.0.0.1:9" + name.substr(1),
                       "digest-1"};
}

group_position pos(uint64_t era, int64_t offset, std::string epoch = "e1") {
  return group_position{era, offset, std::move(epoch)};
}

/// A caf system, a client and one store per test; requests are made from
/// a scoped actor and wait at most 10 s.
class store_harness {
public:
  store_harness() {
    cfg_.add_message_types<caf::id_block::outbound>();
    sys_ = std::make_unique<caf::actor_system>(cfg_);
  }

  ~store_harness() {
    stores_.clear();
    clients_.clear();
    sys_.reset();
  }

  caf::actor_system& sys() {
    return *sys_;
  }

  blocking_client& client(const std::string& base_url, double timeout = 5.0) {
    client_config c;
    c.base_url = base_url;
    c.timeout = timeout;
    c.deadline = 2 * timeout;
    c.retry.max_attempts = 1;
    clients_.push_back(std::make_unique<blocking_client>(*sys_, c));
    return *clients_.back();
  }

  lease_store_actor store(const service_client_actor& client,
                          const std::string& group,
                          const std::string& prefix = "/outbound-test/") {
    etcd_store_options o;
    o.client = client;
    o.group = group;
    o.prefix = prefix;
    stores_.push_back(spawn_etcd_lease_store(*sys_, o));
    return stores_.back();
  }

  answer<std::tuple<uint64_t, double>>
  join(const lease_store_actor& s, const member_record& r, double ttl) {
    answer<std::tuple<uint64_t, double>> out;
    caf::scoped_actor self{*sys_};
    self->request(s, 10s, grp_join_atom_v, r, ttl)
      .receive([&](uint64_t lease,
                   double granted) { out.value.emplace(lease, granted); },
               [&](caf::error& e) { out.error = e; });
    return out;
  }

  answer<double> renew(const lease_store_actor& s, uint64_t lease) {
    return ask<double>(s, grp_renew_atom_v, lease);
  }

  answer<ack_atom> revoke(const lease_store_actor& s, uint64_t lease) {
    return ask<ack_atom>(s, grp_revoke_atom_v, lease);
  }

  answer<ack_atom> withdraw(const lease_store_actor& s, uint64_t lease) {
    return ask<ack_atom>(s, grp_withdraw_atom_v, lease);
  }

  answer<std::vector<member_record>> members(const lease_store_actor& s) {
    return ask<std::vector<member_record>>(s, grp_members_atom_v);
  }

  answer<std::vector<claim_reply>> claim(const lease_store_actor& s,
                                         uint64_t lease,
                                         std::vector<std::string> feeds) {
    return ask<std::vector<claim_reply>>(s, grp_claim_atom_v, lease,
                                         std::move(feeds));
  }

  answer<std::vector<commit_reply>> commit(const lease_store_actor& s,
                                           std::vector<commit_item> items) {
    return ask<std::vector<commit_reply>>(s, grp_commit_atom_v,
                                          std::move(items));
  }

  answer<std::vector<commit_reply>> release(const lease_store_actor& s,
                                            std::vector<release_item> items) {
    return ask<std::vector<commit_reply>>(s, grp_release_atom_v,
                                          std::move(items));
  }

private:
  template <class R, class... Ts>
  answer<R> ask(const lease_store_actor& s, Ts&&... xs) {
    answer<R> out;
    caf::scoped_actor self{*sys_};
    self->request(s, 10s, std::forward<Ts>(xs)...)
      .receive([&](R& r) { out.value = std::move(r); },
               [&](caf::error& e) { out.error = e; });
    return out;
  }

  caf::actor_system_config cfg_;
  std::unique_ptr<caf::actor_system> sys_;
  std::vector<std::unique_ptr<blocking_client>> clients_;
  std::vector<lease_store_actor> stores_;
};

class EtcdLeaseStore : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    etcd_ = start_suite_etcd(setup_error_);
  }

  static void TearDownTestSuite() {
    etcd_.reset();
  }

  void SetUp() override {
    ASSERT_TRUE(setup_error_.empty()) << setup_error_;
    h_ = std::make_unique<store_harness>();
    raw_ = &h_->client(etcd_->base_url());
    group_ = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    base_ = "/outbound-test/" + group_ + "/";
    store_ = h_->store(raw_->actor(), group_);
  }

  void TearDown() override {
    store_ = nullptr; // the system waits for every actor a handle keeps
    h_.reset();
  }

  /// POSTs `body` to etcd and returns its 200 JSON object (empty after a
  /// recorded failure).
  json::object etcd(const std::string& path, const json::value& body) {
    call_request r;
    r.method = "POST";
    r.path = path;
    r.body = json::serialize(body);
    r.has_body = true;
    r.raw = true;
    auto out = raw_->call(std::move(r));
    if (!out.ok()) {
      ADD_FAILURE() << path << ": " << out.error->message();
      return {};
    }
    if (out.status != 200 || !out.body.is_object()) {
      ADD_FAILURE() << path << ": status " << out.status << " "
                    << json::serialize(out.body);
      return {};
    }
    return out.body.as_object();
  }

  /// The key's kv object, or nullopt when absent.
  std::optional<json::object> get(const std::string& key) {
    auto r = etcd("/v3/kv/range", json::object{{"key", base64_encode(key)}});
    auto* kvs = r.if_contains("kvs");
    if (kvs == nullptr || !kvs->is_array() || kvs->as_array().empty())
      return std::nullopt;
    return kvs->as_array()[0].as_object();
  }

  static std::string value_of(const json::object& kv) {
    auto* v = kv.if_contains("value");
    return v ? base64_decode(std::string{v->as_string()}) : std::string{};
  }

  static int64_t int_of(const json::object& kv, const char* name) {
    auto* v = kv.if_contains(name);
    return v && v->is_string() ? std::stoll(std::string{v->as_string()}) : 0;
  }

  void put(const std::string& key, const std::string& value) {
    etcd("/v3/kv/put", json::object{{"key", base64_encode(key)},
                                    {"value", base64_encode(value)}});
  }

  /// The number of keys under `prefix`.
  int64_t count(const std::string& prefix) {
    auto r = etcd(
      "/v3/kv/range",
      json::object{{"key", base64_encode(prefix)},
                   {"range_end", base64_encode(prefix_range_end(prefix))},
                   {"count_only", true}});
    auto* c = r.if_contains("count");
    return c ? std::stoll(std::string{c->as_string()}) : 0;
  }

  /// Leases known to etcd (lease/leases).
  std::set<std::string> leases() {
    auto r = etcd("/v3/lease/leases", json::object{});
    std::set<std::string> out;
    if (auto* ls = r.if_contains("leases"); ls && ls->is_array())
      for (auto& l : ls->as_array())
        out.insert(std::string{l.as_object().at("ID").as_string()});
    return out;
  }

  uint64_t join_ok(const lease_store_actor& s, const member_record& r,
                   double ttl = 30) {
    auto j = h_->join(s, r, ttl);
    EXPECT_TRUE(j.ok()) << describe(j.error);
    return j.ok() ? std::get<0>(*j.value) : 0;
  }

  /// The stored cursor of `feed`, parsed.
  std::optional<json::value> cursor(const std::string& feed) {
    auto kv = get(base_ + "cursors/" + feed);
    if (!kv)
      return std::nullopt;
    return json::parse(value_of(*kv));
  }

  static inline std::string setup_error_;
  static inline std::unique_ptr<etcd_instance> etcd_;
  std::unique_ptr<store_harness> h_;
  blocking_client* raw_ = nullptr;
  std::string group_;
  std::string base_;
  lease_store_actor store_;
};

std::vector<std::string> feed_names(const std::string& stem, int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i)
    out.push_back(stem + std::to_string(i));
  return out;
}

// -- join, members, renew, revoke -------------------------------------------

TEST_F(EtcdLeaseStore, JoinRegistersTheMemberBoundToItsLease) {
  auto j = h_->join(store_, record("m1"), 4.2);
  ASSERT_TRUE(j.ok()) << describe(j.error);
  auto [lease, ttl] = *j.value;
  EXPECT_GT(lease, 0u);
  EXPECT_EQ(ttl, 5.0); // whole seconds, rounded up
  auto kv = get(base_ + "members/m1");
  ASSERT_TRUE(kv.has_value());
  EXPECT_EQ(std::to_string(lease), std::string{kv->at("lease").as_string()});
  auto v = json::parse(value_of(*kv));
  EXPECT_EQ(v, json::parse(R"({"v":1,"name":"m1","incarnation":"m1-inc-1",)"
                           R"("peer":"127.0.0.1:91","feeds":"digest-1"})"));
  auto ms = h_->members(store_);
  ASSERT_TRUE(ms.ok()) << describe(ms.error);
  ASSERT_EQ(ms.value->size(), 1u);
  EXPECT_EQ(ms.value->at(0).name, "m1");
  EXPECT_EQ(ms.value->at(0).incarnation, "m1-inc-1");
  EXPECT_EQ(ms.value->at(0).peer, "127.0.0.1:91");
  EXPECT_EQ(ms.value->at(0).feed_digest, "digest-1");
}

TEST_F(EtcdLeaseStore, JoinBelowTheMinimumTtlIsRaisedByEtcd) {
  auto j = h_->join(store_, record("m1"), 0.5);
  ASSERT_TRUE(j.ok()) << describe(j.error);
  EXPECT_EQ(std::get<1>(*j.value), 2.0);
  auto bad = h_->join(store_, record("m2"), std::nan(""));
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.error, caf::sec::runtime_error) << describe(bad.error);
}

TEST_F(EtcdLeaseStore, JoinOfANameHeldByAnotherLeaseFailsAndRevokesItsLease) {
  auto first = join_ok(store_, record("m1"));
  auto before = leases();
  // A restart within the old lease's TTL: another store, the same name.
  auto other = h_->store(raw_->actor(), group_);
  auto again = h_->join(other, record("m1"), 30);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error, caf::sec::runtime_error);
  EXPECT_NE(
    describe(again.error).find("is held by lease " + std::to_string(first)),
    std::string::npos)
    << describe(again.error);
  // The lease granted for the failed join was revoked before the answer
  // (leases of earlier tests may have expired meanwhile).
  auto after = leases();
  EXPECT_TRUE(
    std::includes(before.begin(), before.end(), after.begin(), after.end()));
  auto kv = get(base_ + "members/m1");
  ASSERT_TRUE(kv.has_value());
  EXPECT_EQ(std::string{kv->at("lease").as_string()}, std::to_string(first));
  // Once the old lease is gone, the name is free.
  ASSERT_TRUE(h_->revoke(store_, first).ok());
  auto third = h_->join(other, record("m1"), 30);
  EXPECT_TRUE(third.ok()) << describe(third.error);
}

TEST_F(EtcdLeaseStore, RenewAnswersTheGrantedTtl) {
  auto lease = join_ok(store_, record("m1"), 7);
  auto r = h_->renew(store_, lease);
  ASSERT_TRUE(r.ok()) << describe(r.error);
  EXPECT_EQ(*r.value, 7.0);
}

TEST_F(EtcdLeaseStore,
       RevokeDeletesMemberAndOwnerKeysAndUnknownLeasesAreNoError) {
  auto lease = join_ok(store_, record("m1"));
  auto c = h_->claim(store_, lease, {"f1", "f2"});
  ASSERT_TRUE(c.ok()) << describe(c.error);
  EXPECT_EQ(count(base_ + "owners/"), 2);
  auto r = h_->revoke(store_, lease);
  ASSERT_TRUE(r.ok()) << describe(r.error);
  EXPECT_FALSE(get(base_ + "members/m1").has_value());
  EXPECT_EQ(count(base_ + "owners/"), 0);
  EXPECT_TRUE(h_->revoke(store_, lease).ok());
  EXPECT_TRUE(h_->revoke(store_, 987654321).ok());
  auto gone = h_->renew(store_, lease);
  ASSERT_TRUE(gone.ok()) << describe(gone.error);
  EXPECT_LE(*gone.value, 0.0);
}

// An unrenewed lease of 2 s (etcd's minimum) expires within about TTL + 0.5
// s plus a raft round (EtcdGateway.KeyOfAnUnrenewedLeaseGoes...): its member
// and owner keys go, the cursors stay, and a renewal answers 0 (lost).
TEST_F(EtcdLeaseStore, ExpiredLeaseLosesItsKeysAndRenewAnswersZero) {
  auto t0 = steady::now();
  auto lease = join_ok(store_, record("m1"), 2);
  auto c = h_->claim(store_, lease, {"f1"});
  ASSERT_TRUE(c.ok()) << describe(c.error);
  auto token = c.value->at(0).token;
  auto w = h_->commit(store_, {commit_item{"f1", token, pos(0, 3)}});
  ASSERT_TRUE(w.ok());
  bool gone = false;
  while (steady::now() < t0 + 6s) {
    if (!get(base_ + "members/m1")) {
      gone = true;
      break;
    }
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(gone) << "member key still there 6 s after a 2 s grant";
  EXPECT_GE(steady::now() - t0, 2s);
  EXPECT_FALSE(get(base_ + "owners/f1").has_value());
  EXPECT_TRUE(cursor("f1").has_value());
  auto r = h_->renew(store_, lease);
  ASSERT_TRUE(r.ok()) << describe(r.error);
  EXPECT_LE(*r.value, 0.0);
  // The old token is fenced now.
  auto late = h_->commit(store_, {commit_item{"f1", token, pos(0, 4)}});
  ASSERT_TRUE(late.ok());
  EXPECT_EQ(late.value->at(0).outcome, commit_outcome::fenced);
}

TEST_F(EtcdLeaseStore, MembersListsEveryMemberAndNamesAForeignValueByItsKey) {
  auto a = h_->store(raw_->actor(), group_);
  join_ok(store_, record("m1"));
  join_ok(a, record("m2"));
  put(base_ + "members/odd", "not json");
  // Another group's members are not listed.
  auto other = h_->store(raw_->actor(), group_ + "x");
  join_ok(other, record("m9"));
  auto ms = h_->members(store_);
  ASSERT_TRUE(ms.ok()) << describe(ms.error);
  std::map<std::string, member_record> got;
  for (auto& m : *ms.value)
    got[m.name] = m;
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got["m2"].incarnation, "m2-inc-1");
  EXPECT_EQ(got["odd"].incarnation, "");
  EXPECT_EQ(got.count("m9"), 0u);
}

// -- claims -----------------------------------------------------------------

TEST_F(EtcdLeaseStore, ClaimWinsAbsentFeedsWithTheCreateRevisionAsToken) {
  auto lease = join_ok(store_, record("m1"));
  put(base_ + "cursors/f2", R"({"v":1,"era":2,"offset":40,"epoch":"ep"})");
  auto c = h_->claim(store_, lease, {"f1", "f2", "f1"});
  ASSERT_TRUE(c.ok()) << describe(c.error);
  ASSERT_EQ(c.value->size(), 2u); // one answer per feed
  auto r = by_feed(*c.value);
  EXPECT_EQ(r["f1"].outcome, claim_outcome::won);
  EXPECT_EQ(r["f2"].outcome, claim_outcome::won);
  EXPECT_EQ(r["f1"].token, r["f2"].token); // one batch, one revision
  EXPECT_FALSE(r["f1"].cursor.has_value());
  ASSERT_TRUE(r["f2"].cursor.has_value());
  EXPECT_EQ(r["f2"].cursor->era, 2u);
  EXPECT_EQ(r["f2"].cursor->offset, 40);
  EXPECT_EQ(r["f2"].cursor->epoch, "ep");
  auto kv = get(base_ + "owners/f1");
  ASSERT_TRUE(kv.has_value());
  EXPECT_EQ(static_cast<uint64_t>(int_of(*kv, "create_revision")),
            r["f1"].token);
  EXPECT_EQ(int_of(*kv, "lease"), static_cast<int64_t>(lease));
  EXPECT_EQ(json::parse(value_of(*kv)),
            json::parse(R"({"member":"m1","incarnation":"m1-inc-1"})"));
}

TEST_F(EtcdLeaseStore, ClaimRaceBetweenTwoLeasesHasExactlyOneWinnerPerFeed) {
  auto sb = h_->store(raw_->actor(), group_);
  auto la = join_ok(store_, record("m1"));
  auto lb = join_ok(sb, record("m2"));
  auto feeds = feed_names("f", 40);
  answer<std::vector<claim_reply>> ra;
  answer<std::vector<claim_reply>> rb;
  // Both requests in flight at once, each in its own order.
  auto reversed = feeds;
  std::reverse(reversed.begin(), reversed.end());
  std::thread ta([&] { ra = h_->claim(store_, la, feeds); });
  std::thread tb([&] { rb = h_->claim(sb, lb, reversed); });
  ta.join();
  tb.join();
  ASSERT_TRUE(ra.ok()) << describe(ra.error);
  ASSERT_TRUE(rb.ok()) << describe(rb.error);
  auto a = by_feed(*ra.value);
  auto b = by_feed(*rb.value);
  ASSERT_EQ(a.size(), feeds.size());
  ASSERT_EQ(b.size(), feeds.size());
  for (auto& f : feeds) {
    auto wa = a[f].outcome == claim_outcome::won;
    auto wb = b[f].outcome == claim_outcome::won;
    EXPECT_NE(wa, wb) << f;
    EXPECT_EQ(wa ? b[f].outcome : a[f].outcome, claim_outcome::held) << f;
    auto kv = get(base_ + "owners/" + f);
    ASSERT_TRUE(kv.has_value()) << f;
    EXPECT_EQ(int_of(*kv, "lease"), static_cast<int64_t>(wa ? la : lb)) << f;
    EXPECT_EQ(static_cast<uint64_t>(int_of(*kv, "create_revision")),
              wa ? a[f].token : b[f].token)
      << f;
  }
}

TEST_F(EtcdLeaseStore, ReclaimBySameLeaseAnswersWonWithTheSameTokenAndCursor) {
  auto lease = join_ok(store_, record("m1"));
  auto first = h_->claim(store_, lease, {"f1"});
  ASSERT_TRUE(first.ok());
  auto token = first.value->at(0).token;
  auto w = h_->commit(store_, {commit_item{"f1", token, pos(1, 9)}});
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w.value->at(0).outcome, commit_outcome::ok);
  // A retry after a lost answer, also from a store that did not see the
  // first answer (the owner is recognised by its lease).
  auto other = h_->store(raw_->actor(), group_);
  for (auto* s : {&store_, &other}) {
    auto again = h_->claim(*s, lease, {"f1"});
    ASSERT_TRUE(again.ok()) << describe(again.error);
    auto& r = again.value->at(0);
    EXPECT_EQ(r.outcome, claim_outcome::won);
    EXPECT_EQ(r.token, token);
    ASSERT_TRUE(r.cursor.has_value());
    EXPECT_EQ(*r.cursor, pos(1, 9));
  }
  // And the other store can commit on that token at once.
  auto w2 = h_->commit(other, {commit_item{"f1", token, pos(1, 10)}});
  ASSERT_TRUE(w2.ok());
  EXPECT_EQ(w2.value->at(0).outcome, commit_outcome::ok);
}

TEST_F(EtcdLeaseStore, ClaimOfAFeedWithAnUnreadableCursorIsAnErrorForThatFeed) {
  auto lease = join_ok(store_, record("m1"));
  put(base_ + "cursors/bad", R"({"v":1,"era":"x","offset":1})");
  auto c = h_->claim(store_, lease, {"bad", "good"});
  ASSERT_TRUE(c.ok()) << describe(c.error);
  auto r = by_feed(*c.value);
  EXPECT_EQ(r["bad"].outcome, claim_outcome::error);
  EXPECT_EQ(r["good"].outcome, claim_outcome::won);
}

// A put with a lease etcd no longer knows fails the whole txn (NotFound,
// code 5), nested or not: a claim after the lease was lost writes nothing
// and fails as a request.
TEST_F(EtcdLeaseStore, ClaimWithALostLeaseFailsAndWritesNothing) {
  auto lease = join_ok(store_, record("m1"));
  ASSERT_TRUE(h_->revoke(store_, lease).ok());
  auto c = h_->claim(store_, lease, {"f1", "f2"});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error, caf::sec::runtime_error);
  EXPECT_NE(describe(c.error).find("gRPC code 5"), std::string::npos)
    << describe(c.error);
  EXPECT_EQ(count(base_ + "owners/"), 0);
}

// -- commits and releases -----------------------------------------------------

TEST_F(EtcdLeaseStore, CommitWithTheTokenWritesAndAStaleTokenIsFenced) {
  auto sb = h_->store(raw_->actor(), group_);
  auto la = join_ok(store_, record("m1"));
  auto lb = join_ok(sb, record("m2"));
  auto ca = h_->claim(store_, la, {"f1"});
  ASSERT_TRUE(ca.ok());
  auto ta = ca.value->at(0).token;
  auto w = h_->commit(store_, {commit_item{"f1", ta, pos(0, 5, "ep")}});
  ASSERT_TRUE(w.ok()) << describe(w.error);
  EXPECT_EQ(w.value->at(0).outcome, commit_outcome::ok);
  EXPECT_EQ(cursor("f1"),
            json::parse(R"({"v":1,"era":0,"offset":5,"epoch":"ep"})"));
  // Consecutive commits of one store follow its own writes.
  for (int64_t off : {6, 7, 8}) {
    auto more = h_->commit(store_, {commit_item{"f1", ta, pos(0, off)}});
    ASSERT_TRUE(more.ok());
    EXPECT_EQ(more.value->at(0).outcome, commit_outcome::ok) << off;
  }
  // a's lease goes; b takes the feed over and reads a's last cursor.
  ASSERT_TRUE(h_->revoke(store_, la).ok());
  auto cb = h_->claim(sb, lb, {"f1"});
  ASSERT_TRUE(cb.ok());
  EXPECT_EQ(cb.value->at(0).outcome, claim_outcome::won);
  EXPECT_GT(cb.value->at(0).token, ta);
  ASSERT_TRUE(cb.value->at(0).cursor.has_value());
  EXPECT_EQ(cb.value->at(0).cursor->offset, 8);
  auto stale = h_->commit(store_, {commit_item{"f1", ta, pos(0, 99)}});
  ASSERT_TRUE(stale.ok());
  EXPECT_EQ(stale.value->at(0).outcome, commit_outcome::fenced);
  EXPECT_EQ(cursor("f1")->at("offset"), json::value(8));
  // A token no claim can give, and a feed with no owner key: fenced.
  auto none = h_->commit(store_, {commit_item{"f1", 0, pos(0, 99)},
                                  commit_item{"nobody", ta, pos(0, 1)}});
  ASSERT_TRUE(none.ok());
  auto n = by_feed(*none.value);
  EXPECT_EQ(n["f1"], commit_outcome::fenced);
  EXPECT_EQ(n["nobody"], commit_outcome::fenced);
  EXPECT_FALSE(cursor("nobody").has_value());
}

// An HTTP call that timed out may reach etcd later. A second store holding
// the same token but no knowledge of the cursor's writes sends exactly
// what such a late call carries: a commit expecting a cursor revision
// that is no longer current. It must not lower the cursor; and when a late
// write lands first, the owner's next commit answers error (not known
// written), adopts the revision, and the one after succeeds.
TEST_F(EtcdLeaseStore, ALateCommitCannotLowerTheStoredCursor) {
  auto lease = join_ok(store_, record("m1"));
  auto c = h_->claim(store_, lease, {"f1", "f2"});
  ASSERT_TRUE(c.ok());
  auto r = by_feed(*c.value);
  auto t1 = r["f1"].token;
  auto t2 = r["f2"].token;
  auto late = h_->store(raw_->actor(), group_); // knows nothing: expects 0

  // f1: the newer commit lands first; the late one must not apply.
  auto w = h_->commit(store_, {commit_item{"f1", t1, pos(0, 10)}});
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w.value->at(0).outcome, commit_outcome::ok);
  auto lw = h_->commit(late, {commit_item{"f1", t1, pos(0, 5)}});
  ASSERT_TRUE(lw.ok());
  EXPECT_EQ(lw.value->at(0).outcome, commit_outcome::error);
  EXPECT_EQ(cursor("f1")->at("offset"), json::value(10));
  auto w2 = h_->commit(store_, {commit_item{"f1", t1, pos(0, 11)}});
  ASSERT_TRUE(w2.ok());
  EXPECT_EQ(w2.value->at(0).outcome, commit_outcome::ok);
  EXPECT_EQ(cursor("f1")->at("offset"), json::value(11));

  // f2: the late commit lands before the newer one.
  auto lw2 = h_->commit(late, {commit_item{"f2", t2, pos(0, 5)}});
  ASSERT_TRUE(lw2.ok());
  EXPECT_EQ(lw2.value->at(0).outcome, commit_outcome::ok);
  auto mod_before = int_of(*get(base_ + "cursors/f2"), "mod_revision");
  auto next = h_->commit(store_, {commit_item{"f2", t2, pos(0, 10)}});
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next.value->at(0).outcome, commit_outcome::error);
  EXPECT_EQ(int_of(*get(base_ + "cursors/f2"), "mod_revision"), mod_before);
  auto retry = h_->commit(store_, {commit_item{"f2", t2, pos(0, 10)}});
  ASSERT_TRUE(retry.ok());
  EXPECT_EQ(retry.value->at(0).outcome, commit_outcome::ok);
  EXPECT_EQ(cursor("f2")->at("offset"), json::value(10));
  // Now the late store's knowledge is stale again: its write cannot land.
  auto lw3 = h_->commit(late, {commit_item{"f2", t2, pos(0, 6)}});
  ASSERT_TRUE(lw3.ok());
  EXPECT_NE(lw3.value->at(0).outcome, commit_outcome::ok);
  EXPECT_EQ(cursor("f2")->at("offset"), json::value(10));
}

TEST_F(EtcdLeaseStore, ReleaseWritesTheCursorAndDeletesTheOwner) {
  auto sb = h_->store(raw_->actor(), group_);
  auto la = join_ok(store_, record("m1"));
  auto lb = join_ok(sb, record("m2"));
  auto c = h_->claim(store_, la, {"f1", "f2", "f3"});
  ASSERT_TRUE(c.ok());
  auto r = by_feed(*c.value);
  auto rel = h_->release(
    store_, {release_item{"f1", r["f1"].token, pos(3, 30, "x"), "m2"},
             release_item{"f2", r["f2"].token, std::nullopt, ""},
             release_item{"f3", r["f3"].token + 1, pos(0, 1), ""}});
  ASSERT_TRUE(rel.ok()) << describe(rel.error);
  auto o = by_feed(*rel.value);
  EXPECT_EQ(o["f1"], commit_outcome::ok);
  EXPECT_EQ(o["f2"], commit_outcome::ok);
  EXPECT_EQ(o["f3"], commit_outcome::fenced);
  EXPECT_FALSE(get(base_ + "owners/f1").has_value());
  EXPECT_FALSE(get(base_ + "owners/f2").has_value());
  EXPECT_TRUE(get(base_ + "owners/f3").has_value());
  EXPECT_EQ(cursor("f1"),
            json::parse(R"({"v":1,"era":3,"offset":30,"epoch":"x"})"));
  EXPECT_FALSE(cursor("f2").has_value());
  EXPECT_FALSE(cursor("f3").has_value());
  // The winner claims at once and resumes at the released cursor.
  auto cb = h_->claim(sb, lb, {"f1"});
  ASSERT_TRUE(cb.ok());
  EXPECT_EQ(cb.value->at(0).outcome, claim_outcome::won);
  EXPECT_EQ(cb.value->at(0).cursor, pos(3, 30));
  // A second release of the same token: the key is gone, fenced.
  auto again
    = h_->release(store_, {release_item{"f1", r["f1"].token, pos(3, 31), ""}});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again.value->at(0).outcome, commit_outcome::fenced);
  EXPECT_EQ(cursor("f1")->at("offset"), json::value(30));
}

// A graceful leave's first step: the member key goes (compared on its
// lease), the lease and the owner keys stay until the releases.
TEST_F(EtcdLeaseStore, WithdrawDeletesTheMemberKeyOnlyWhileItsLeaseBindsIt) {
  auto sb = h_->store(raw_->actor(), group_);
  auto la = join_ok(store_, record("m1"));
  auto lb = join_ok(sb, record("m2"));
  auto c = h_->claim(store_, la, {"f1"});
  ASSERT_TRUE(c.ok()) << describe(c.error);
  auto w = h_->withdraw(store_, la);
  ASSERT_TRUE(w.ok()) << describe(w.error);
  EXPECT_FALSE(get(base_ + "members/m1").has_value());
  EXPECT_TRUE(get(base_ + "members/m2").has_value());
  EXPECT_TRUE(get(base_ + "owners/f1").has_value());
  auto ms = h_->members(sb);
  ASSERT_TRUE(ms.ok()) << describe(ms.error);
  ASSERT_EQ(ms.value->size(), 1u);
  EXPECT_EQ(ms.value->at(0).name, "m2");
  auto r = h_->renew(store_, la);
  ASSERT_TRUE(r.ok()) << describe(r.error);
  EXPECT_GT(*r.value, 0.0) << "the lease is kept";
  auto held = h_->claim(sb, lb, {"f1"});
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(held.value->at(0).outcome, claim_outcome::held);
  // The name is free: a restart joins under it; withdrawing the old lease
  // again must not delete the new registration.
  auto lc = join_ok(sb, record("m1"));
  auto again = h_->withdraw(store_, la);
  ASSERT_TRUE(again.ok()) << describe(again.error);
  auto kv = get(base_ + "members/m1");
  ASSERT_TRUE(kv.has_value());
  EXPECT_EQ(std::string{kv->at("lease").as_string()}, std::to_string(lc));
  // A lease this store never joined: an error, nothing deleted.
  auto unknown = h_->withdraw(store_, lb);
  EXPECT_FALSE(unknown.ok());
  EXPECT_TRUE(get(base_ + "members/m2").has_value());
}

// 128 feeds exceed one txn (126 nested claims of 2 ops each): the store
// splits them into two calls of 64, each its own revision.
TEST_F(EtcdLeaseStore, BatchesOf128FeedsAreSplitIntoTwoTxns) {
  auto lease = join_ok(store_, record("m1"));
  auto feeds = feed_names("feed-", 128);
  auto c = h_->claim(store_, lease, feeds);
  ASSERT_TRUE(c.ok()) << describe(c.error);
  ASSERT_EQ(c.value->size(), 128u);
  std::map<uint64_t, int> per_token;
  std::vector<commit_item> commits;
  std::vector<release_item> releases;
  for (auto& r : *c.value) {
    EXPECT_EQ(r.outcome, claim_outcome::won) << r.feed;
    ++per_token[r.token];
    commits.push_back(commit_item{r.feed, r.token, pos(0, 1)});
    releases.push_back(release_item{r.feed, r.token, pos(0, 2), ""});
  }
  ASSERT_EQ(per_token.size(), 2u);
  for (auto& [token, n] : per_token)
    EXPECT_EQ(n, 64) << token;
  EXPECT_EQ(count(base_ + "owners/"), 128);
  auto w = h_->commit(store_, commits);
  ASSERT_TRUE(w.ok()) << describe(w.error);
  ASSERT_EQ(w.value->size(), 128u);
  for (auto& r : *w.value)
    EXPECT_EQ(r.outcome, commit_outcome::ok) << r.feed;
  EXPECT_EQ(count(base_ + "cursors/"), 128);
  auto rel = h_->release(store_, releases);
  ASSERT_TRUE(rel.ok()) << describe(rel.error);
  for (auto& r : *rel.value)
    EXPECT_EQ(r.outcome, commit_outcome::ok) << r.feed;
  EXPECT_EQ(count(base_ + "owners/"), 0);
  EXPECT_EQ(cursor("feed-127")->at("offset"), json::value(2));
  // 300 feeds: three calls of 100.
  auto big = h_->claim(store_, lease, feed_names("big-", 300));
  ASSERT_TRUE(big.ok()) << describe(big.error);
  std::set<uint64_t> tokens;
  for (auto& r : *big.value) {
    EXPECT_EQ(r.outcome, claim_outcome::won);
    tokens.insert(r.token);
  }
  EXPECT_EQ(big.value->size(), 300u);
  EXPECT_EQ(tokens.size(), 3u);
}

// Chunks succeed or fail on their own: a feed name etcd refuses fails its
// chunk, whose feeds answer error, while the other chunk's feeds are won.
// A 400 KiB name is in five ops of its claim (owner and cursor keys), about
// 2 MB, over etcd's --max-request-bytes (1.5 MiB): 400, gRPC code 3,
// "etcdserver: request is too large". (Beyond the gRPC message limit,
// 1.5 MiB + 512 KiB, the gateway answers 429, code 8, "grpc: received
// message larger than max": seen with a 2 MiB name.)
TEST_F(EtcdLeaseStore, AFailedChunkAnswersErrorForItsFeedsOnly) {
  auto lease = join_ok(store_, record("m1"));
  auto feeds = feed_names("f", 127); // chunks [0, 64) and [64, 127)
  feeds[100] = std::string(400 << 10, 'x');
  auto c = h_->claim(store_, lease, feeds);
  ASSERT_TRUE(c.ok()) << describe(c.error);
  auto r = by_feed(*c.value);
  ASSERT_EQ(r.size(), 127u);
  for (std::size_t i = 0; i < feeds.size(); ++i)
    EXPECT_EQ(r[feeds[i]].outcome,
              i < 64 ? claim_outcome::won : claim_outcome::error)
      << i;
  EXPECT_EQ(count(base_ + "owners/"), 64);
  // Alone, the refused feed fails the request.
  auto alone = h_->claim(store_, lease, {feeds[100]});
  ASSERT_FALSE(alone.ok());
  EXPECT_EQ(alone.error, caf::sec::runtime_error);
  EXPECT_NE(describe(alone.error).find("request is too large"),
            std::string::npos)
    << describe(alone.error);
}

TEST_F(EtcdLeaseStore, DuplicateItemsInACommitAreErrorsAndTheFirstIsWritten) {
  auto lease = join_ok(store_, record("m1"));
  auto c = h_->claim(store_, lease, {"f1"});
  ASSERT_TRUE(c.ok());
  auto t = c.value->at(0).token;
  auto w = h_->commit(
    store_, {commit_item{"f1", t, pos(0, 1)}, commit_item{"f1", t, pos(0, 2)}});
  ASSERT_TRUE(w.ok()) << describe(w.error);
  ASSERT_EQ(w.value->size(), 2u);
  int ok = 0;
  int err = 0;
  for (auto& r : *w.value)
    (r.outcome == commit_outcome::ok ? ok : err)++;
  EXPECT_EQ(ok, 1);
  EXPECT_EQ(err, 1);
  EXPECT_EQ(cursor("f1")->at("offset"), json::value(1));
}

TEST_F(EtcdLeaseStore, BadOptionsFailAtConstructionNamingTheField) {
  etcd_store_options o;
  o.client = raw_->actor();
  EXPECT_THROW(
    {
      try {
        spawn_etcd_lease_store(h_->sys(), o);
      } catch (const config_error& e) {
        EXPECT_EQ(e.field(), "group");
        throw;
      }
    },
    config_error);
  o.group = "g";
  o.prefix = "/no-slash";
  try {
    spawn_etcd_lease_store(h_->sys(), o);
    ADD_FAILURE() << "no config_error";
  } catch (const config_error& e) {
    EXPECT_EQ(e.field(), "prefix");
  }
  o.prefix = "/p/";
  o.group = "a/b";
  try {
    spawn_etcd_lease_store(h_->sys(), o);
    ADD_FAILURE() << "no config_error";
  } catch (const config_error& e) {
    EXPECT_EQ(e.field(), "group");
  }
  // Without a client actor, one is made from client_cfg.
  etcd_store_options own;
  own.group = group_;
  own.prefix = "/outbound-test/";
  own.client_cfg.base_url = etcd_->base_url();
  auto s = spawn_etcd_lease_store(h_->sys(), own);
  auto j = h_->join(s, record("m1"), 3);
  EXPECT_TRUE(j.ok()) << describe(j.error);
}

// -- answers that are not etcd's
// ------------------------------------------------

// Every request answered by a scripted server with something etcd never
// sends: each fails with a runtime_error (or a per-feed error), and the
// store answers the next request (it did not die).
TEST(EtcdLeaseStoreGarbled, HostileAnswersAreErrorsNeverCrashes) {
  auto resp = [](int status, const std::string& body) {
    return script{step::read_request(),
                  step::send(scripted_server::json_response(
                    status, body, "Connection: close\r\n")),
                  step::close()};
  };
  const std::string rev = R"("header":{"revision":"7"})";
  std::vector<script> scripts{
    // 0 renew: not JSON
    resp(200, "this is not json"),
    // 1 renew: no result
    resp(200, R"({"foo":1})"),
    // 2 renew: TTL not a number
    resp(200, R"({"result":{"TTL":"five"}})"),
    // 3 members: kvs not an array
    resp(200, "{" + rev + R"(,"kvs":{"a":1}})"),
    // 4 members: a key that is not base64
    resp(200, "{" + rev
                + R"(,"kvs":[{"key":"%%%","create_revision":"1",)"
                  R"("mod_revision":"1"}]})"),
    // 5 claim: too few responses
    resp(200, "{" + rev + R"(,"succeeded":true,"responses":[]})"),
    // 6 claim: inner responses of the wrong type
    resp(200, "{" + rev
                + R"(,"succeeded":true,"responses":[{"response_txn":)"
                  R"({"succeeded":true,"responses":"x"}},)"
                  R"({"response_txn":{"responses":[1,2]}}]})"),
    // 7 commit: a gateway error body
    resp(400, R"({"error":"boom","message":"boom","code":3})"),
    // 8 commit: 404 plain text (not the gateway)
    script{step::read_request(),
           step::send("HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\n"
                      "Content-Length: 10\r\nConnection: close\r\n\r\n"
                      "Not Found\n"),
           step::close()},
    // 9 join: grant with a negative ID
    resp(200, "{" + rev + R"(,"ID":"-5","TTL":"5"})"),
    // 10 revoke: deeply nested garbage
    resp(500, std::string(200, '[') + std::string(200, ']')),
    // 11 renew: a valid answer (the store still serves)
    resp(200, R"({"result":{"ID":"1","TTL":"4"}})"),
  };
  scripted_server srv{scripts};
  store_harness h;
  auto& client = h.client(srv.base_url(), 2.0);
  auto s = h.store(client.actor(), "g");
  auto is_runtime = [](const caf::error& e) {
    return e == caf::sec::runtime_error;
  };
  for (int i = 0; i < 3; ++i) {
    auto r = h.renew(s, 1);
    EXPECT_FALSE(r.ok()) << i;
    EXPECT_TRUE(is_runtime(r.error)) << i << " " << describe(r.error);
  }
  for (int i = 0; i < 2; ++i) {
    auto m = h.members(s);
    EXPECT_FALSE(m.ok()) << i;
    EXPECT_TRUE(is_runtime(m.error)) << describe(m.error);
  }
  auto c1 = h.claim(s, 1, {"a"});
  EXPECT_FALSE(c1.ok());
  EXPECT_TRUE(is_runtime(c1.error)) << describe(c1.error);
  auto c2 = h.claim(s, 1, {"a", "b"});
  // The outer answer's shape is wrong for "a": the whole chunk is garbled.
  EXPECT_FALSE(c2.ok());
  EXPECT_TRUE(is_runtime(c2.error)) << describe(c2.error);
  for (int i = 0; i < 2; ++i) {
    auto w = h.commit(s, {commit_item{"a", 5, pos(0, 1)}});
    EXPECT_FALSE(w.ok());
    EXPECT_TRUE(is_runtime(w.error)) << describe(w.error);
  }
  auto j = h.join(s, record("m1"), 5);
  EXPECT_FALSE(j.ok());
  EXPECT_TRUE(is_runtime(j.error)) << describe(j.error);
  auto rv = h.revoke(s, 1);
  EXPECT_FALSE(rv.ok());
  EXPECT_TRUE(is_runtime(rv.error)) << describe(rv.error);
  auto fine = h.renew(s, 1);
  ASSERT_TRUE(fine.ok()) << describe(fine.error);
  EXPECT_EQ(*fine.value, 4.0);
}

// A gateway that never answers: the client's attempt timeout ends the call
// and the store answers request_timeout.
TEST(EtcdLeaseStoreGarbled, SilentGatewayAnswersRequestTimeout) {
  scripted_server srv{{script{step::read_request(), step::hold()}}};
  store_harness h;
  auto& client = h.client(srv.base_url(), 0.3);
  auto s = h.store(client.actor(), "g");
  auto t0 = steady::now();
  auto r = h.renew(s, 1);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.error, caf::sec::request_timeout) << describe(r.error);
  EXPECT_LT(steady::now() - t0, 3s);
}

} // namespace
