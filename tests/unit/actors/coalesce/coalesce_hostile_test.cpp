// Hostile inputs against the coalescing driver, on CAF's test
// coordinator in virtual time: scripted oracle nodes (one fake transport per
// endpoint, as in coalescing_driver_test) that answer with hostile 2xx
// bodies, hostile leader-hint headers, odd statuses, and hostile callers
// (bad counts and keys, a crowd beyond max_waiters, odd timeouts). Every
// case ends in a typed error or an exact value: never a crash, a hang, an
// unbounded allocation, or a wrong value handed to a caller.

#include "actors/coalesce/coalescing_driver.hpp"

#include "tests/support/coalesce_fixture.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/response_promise.hpp>
#include <caf/stateful_actor.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <map>

using namespace std::chrono_literals;
namespace json = boost::json;

namespace outbound::testing {
namespace {

/// A scripted answer: nullopt holds the exchange until a cancel.
using node_script
  = std::function<std::optional<exchange_result>(const http_request&)>;

/// One scripted node; requests are recorded with their virtual arrival.
struct hostile_node {
  node_script script;
  std::vector<http_request> seen;
  std::vector<caf::actor_clock::time_point> seen_at;
  std::vector<uint64_t> cancels;
};

struct hostile_net {
  std::map<std::string, std::shared_ptr<hostile_node>> nodes;
  /// Nodes for endpoints not in `nodes`; null: a node that refuses.
  std::function<node_script(const std::string&)> make_unknown;
  int transports_made = 0;
};

struct hnode_state {
  std::shared_ptr<hostile_node> node;
  std::vector<std::pair<uint64_t, caf::response_promise>> held;
};

caf::behavior hostile_node_impl(caf::stateful_actor<hnode_state>* self,
                                std::shared_ptr<hostile_node> node) {
  self->state.node = std::move(node);
  return {
    [self](const http_request& req) -> caf::result<exchange_result> {
      auto& n = *self->state.node;
      n.seen.push_back(req);
      n.seen_at.push_back(self->clock().now());
      auto r = n.script(req);
      if (!r) {
        self->state.held.emplace_back(req.exchange_id,
                                      self->make_response_promise());
        return caf::delegated<exchange_result>{};
      }
      r->exchange_id = req.exchange_id;
      return std::move(*r);
    },
    [self](cancel_atom, uint64_t id) {
      auto& st = self->state;
      st.node->cancels.push_back(id);
      for (auto i = st.held.begin(); i != st.held.end(); ++i)
        if (i->first == id) {
          exchange_result r;
          r.exchange_id = id;
          r.error = transport_error_kind::timeout;
          r.request_sent = true;
          i->second.deliver(std::move(r));
          st.held.erase(i);
          return;
        }
    },
  };
}

exchange_result answer(int status, std::string body, header_list headers = {}) {
  exchange_result r;
  r.request_sent = true;
  r.response.status = status;
  r.response.body = std::move(body);
  r.response.headers = std::move(headers);
  return r;
}

exchange_result refused() {
  exchange_result r;
  r.error = transport_error_kind::connect;
  r.detail = "connection refused";
  return r;
}

node_script always(exchange_result r) {
  return [r](const http_request&) {
    return std::optional{r};
  };
}

node_script follower(std::string hint) {
  header_list h;
  if (!hint.empty())
    h.emplace_back("leader-hint", std::move(hint));
  return always(answer(421, R"({"detail":"not the leader"})", h));
}

uint64_t count_of(const http_request& req) {
  return json::parse(req.body).as_object().at("count").to_number<uint64_t>();
}

/// A correct leader: one physical millisecond per RPC, gapless sequences.
node_script good_leader(uint64_t epoch = 1) {
  auto phys = std::make_shared<uint64_t>(1000);
  auto seqs = std::make_shared<std::map<std::string, uint64_t>>();
  return [=](const http_request& req) {
    auto o = json::parse(req.body).as_object();
    auto count = o.at("count").to_number<uint64_t>();
    json::object a;
    if (req.target == "/v1/ts") {
      a["physical_ms"] = ++*phys;
      a["logical_start"] = 0;
    } else {
      auto& s = (*seqs)[std::string{o.at("key").as_string()}];
      a["start"] = s + 1;
      s += count;
    }
    a["count"] = count;
    a["epoch"] = std::to_string(epoch);
    return std::optional{answer(200, json::serialize(a))};
  };
}

class CoalesceHostile : public coalesce_fixture {
protected:
  CoalesceHostile() {
    net_ = std::make_shared<hostile_net>();
    for (auto& k : {A, B, C}) {
      net_->nodes[k] = std::make_shared<hostile_node>();
      net_->nodes[k]->script = always(refused());
    }
  }

  /// `n` ts calls of count 1, one a second, each run to its answer;
  /// returns those answered with an error (their kinds in `kinds`).
  int failed_calls_over(int n, std::vector<error_kind>* kinds = nullptr) {
    int failed_calls = 0;
    for (int i = 0; i < n; ++i) {
      auto b = ts(1);
      EXPECT_TRUE(run_to_quiescence());
      EXPECT_TRUE(b->reply);
      if (b->reply && b->reply->error) {
        ++failed_calls;
        if (kinds)
          kinds->push_back(b->reply->error->kind);
      }
      advance_by(std::chrono::seconds{1});
    }
    return failed_calls;
  }

  /// A leads at epoch 5 (B and C hint at it); one call caches it, then a
  /// second passes.
  void cache_a_at_epoch_5() {
    node(A).script = good_leader(5);
    node(B).script = follower("10.0.0.1:7000; epoch=5");
    node(C).script = follower("10.0.0.1:7000; epoch=5");
    auto first = ts(1);
    EXPECT_TRUE(run_to_quiescence());
    EXPECT_TRUE(first->reply && first->reply->ok());
    EXPECT_EQ(stats().leader_endpoint, A);
    advance_by(std::chrono::seconds{1});
  }

  hostile_node& node(const std::string& key) {
    auto& n = net_->nodes[key];
    if (!n) {
      n = std::make_shared<hostile_node>();
      n->script = always(refused());
    }
    return *n;
  }

  /// Every configured node answers `s`.
  void all(node_script s) {
    for (auto& k : {A, B, C})
      node(k).script = s;
  }

  coalesce_options options() override {
    coalesce_options opts;
    opts.seed = 7;
    auto net = net_;
    auto* sys_ptr = &sys();
    opts.transports = [net, sys_ptr](const oracle_endpoint& ep) {
      ++net->transports_made;
      auto& n = net->nodes[ep.key()];
      if (!n) {
        n = std::make_shared<hostile_node>();
        n->script
          = net->make_unknown ? net->make_unknown(ep.key()) : always(refused());
      }
      return caf::actor_cast<transport_actor>(
        sys_ptr->spawn(hostile_node_impl, n));
    };
    return opts;
  }

  std::size_t total_requests() {
    std::size_t n = 0;
    for (auto& [k, nd] : net_->nodes)
      if (nd)
        n += nd->seen.size();
    return n;
  }

  std::shared_ptr<hostile_net> net_;
};

// -- hostile 2xx bodies -------------------------------------------------------

TEST_F(CoalesceHostile, HostileTsBodiesFailOnlyWithResponseError) {
  const std::string two46 = std::to_string(uint64_t{1} << 46);
  const std::vector<std::string> bodies = {
    "not json",
    "",
    "[1,2,3]",
    "42",
    R"("a string")",
    R"({"physical_ms":)" + two46 + R"(,"logical_start":0,"count":1})",
    R"({"physical_ms":1,"logical_start":262143,"count":2})",
    R"({"physical_ms":1,"logical_start":4294967296,"count":1})",
    R"({"physical_ms":1,"logical_start":0,"count":0})",
    R"({"physical_ms":1,"logical_start":0,"count":-1})",
    R"({"physical_ms":1,"logical_start":0,"count":1.5})",
    R"({"physical_ms":1,"logical_start":0,"count":1e0})",
    R"({"physical_ms":1,"logical_start":0,"count":"1"})",
    R"({"physical_ms":-1,"logical_start":0,"count":1})",
    R"({"physical_ms":1,"logical_start":-1,"count":1})",
    R"({"physical_ms":1.0,"logical_start":0,"count":1})",
    R"({"logical_start":0,"count":1})",
    R"({"physical_ms":1,"count":1})",
    R"({"physical_ms":1,"logical_start":0})",
    R"({"physical_ms":18446744073709551616,"logical_start":0,"count":1})",
    R"({"physical_ms":1,"logical_start":0,"count":4294967297})",
    R"({"physical_ms":1,"logical_start":0,"count":1)", // truncated
  };
  for (auto& body : bodies) {
    SCOPED_TRACE(body);
    all(always(answer(200, body)));
    auto b = ts(1);
    ASSERT_TRUE(run_to_quiescence());
    EXPECT_EQ(failed(b), error_kind::response_error);
    if (b->reply && b->reply->error)
      EXPECT_EQ(b->reply->error->status, 200) << "the 2xx that was seen";
  }
  auto s = stats();
  EXPECT_EQ(s.batches.served, 0u);
  EXPECT_EQ(s.batches.protocol_violations, bodies.size());
  EXPECT_EQ(total_requests(), bodies.size()) << "a 2xx is never retried";
}

TEST_F(CoalesceHostile, TsBodyAtTheLimitsIsServedExactly) {
  const uint64_t pmax = (uint64_t{1} << 46) - 1;
  all(always(answer(200, R"({"physical_ms":)" + std::to_string(pmax)
                           + R"(,"logical_start":262142,"count":2,)"
                           + R"("epoch":"18446744073709551615"})")));
  auto b = ts(2);
  ASSERT_TRUE(run_to_quiescence());
  auto& r = ok(b);
  EXPECT_EQ(r.ts.physical_ms, pmax);
  EXPECT_EQ(r.ts.logical_start, 262142u);
  EXPECT_EQ(r.ts.count, 2u);
  EXPECT_EQ(r.ts.last(), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(r.epoch(), "18446744073709551615");
}

TEST_F(CoalesceHostile, TsCountMismatchFailsOnlyThatChunk) {
  // Two waiters of 3 and 4 in one RPC of 7; the server answers 6.
  all(always(answer(200, R"({"physical_ms":5,"logical_start":0,"count":6,)"
                         R"("epoch":"1"})")));
  auto a = ts(3);
  auto b = ts(4);
  ASSERT_TRUE(run_to_quiescence());
  EXPECT_EQ(failed(a), error_kind::response_error);
  EXPECT_EQ(failed(b), error_kind::response_error);
  EXPECT_EQ(total_requests(), 1u);
}

TEST_F(CoalesceHostile, DuplicateKeysInTsBodyNeverHandAnAmbiguousValue) {
  // Boost.JSON keeps the last of duplicate keys: a body whose two counts
  // disagree may not be served with either value.
  all(always(answer(200,
                    R"({"physical_ms":5,"logical_start":0,"count":1,"count":1,)"
                    R"("physical_ms":6,"epoch":"1"})")));
  auto b = ts(1);
  ASSERT_TRUE(run_to_quiescence());
  EXPECT_EQ(failed(b), error_kind::response_error);
}

TEST_F(CoalesceHostile, HostileSeqBodiesAreUncertainAfterExactlyOneCall) {
  const std::vector<std::string> bodies = {
    "not json",
    "[]",
    R"({"start":1,"count":1})", // missing epoch
    R"({"start":1,"count":1,"epoch":""})",
    R"({"start":1,"count":1,"epoch":7})", // not a string
    R"({"start":1,"count":1,"epoch":"abc"})",
    R"({"start":1,"count":1,"epoch":"-1"})",
    R"({"start":1,"count":1,"epoch":"123456789012345678901"})",
    R"({"start":1,"count":2,"epoch":"1"})",
    R"({"start":1,"count":0,"epoch":"1"})",
    R"({"start":-1,"count":1,"epoch":"1"})",
    R"({"start":1.5,"count":1,"epoch":"1"})",
    R"({"start":"1","count":1,"epoch":"1"})",
    R"({"count":1,"epoch":"1"})",
    R"({"start":18446744073709551615,"count":2,"epoch":"1"})",
    R"({"start":1,"count":1,"epoch":"1","start":2})",
  };
  for (auto& body : bodies) {
    SCOPED_TRACE(body);
    auto before = total_requests();
    all(always(answer(200, body)));
    auto b = seq("k", 1);
    ASSERT_TRUE(run_to_quiescence());
    EXPECT_EQ(failed(b), error_kind::uncertain_outcome);
    if (b->reply && b->reply->error)
      EXPECT_EQ(b->reply->error->status, 200) << "the 2xx that was seen";
    EXPECT_EQ(total_requests() - before, 1u) << "never retried";
  }
  EXPECT_EQ(stats().batches.served, 0u);
}

TEST_F(CoalesceHostile, SeqBlockEndingExactlyAt2To64Minus1IsServed) {
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  all(always(answer(200, R"({"start":)" + std::to_string(max - 2)
                           + R"(,"count":3,"epoch":"4"})")));
  auto a = seq("k", 1);
  auto b = seq("k", 2);
  ASSERT_TRUE(run_to_quiescence());
  EXPECT_EQ(ok(a).seq.start, max - 2);
  EXPECT_EQ(ok(a).seq.count, 1u);
  EXPECT_EQ(ok(b).seq.start, max - 1);
  EXPECT_EQ(ok(b).seq.count, 2u);
  EXPECT_EQ(total_requests(), 1u);
}

TEST_F(CoalesceHostile, AHugeEpochStringIsNotCopiedToEveryWaiter) {
  // A 60 KB epoch (under the 64 KiB body cap) riding a batch of 1000
  // waiters would be 60 MB of copies: only a decimal epoch is kept.
  std::string big(60000, '7');
  all(always(answer(200, R"({"physical_ms":5,"logical_start":0,"count":1000,)"
                         R"("epoch":")"
                           + big + R"("})")));
  std::vector<std::shared_ptr<reply_box>> boxes;
  for (int i = 0; i < 1000; ++i)
    boxes.push_back(ts(1));
  ASSERT_TRUE(run_to_quiescence());
  for (auto& b : boxes) {
    auto& r = ok(b);
    EXPECT_EQ(r.ts.count, 1u);
    EXPECT_LE(r.epoch().size(), 20u);
  }
}

TEST_F(CoalesceHostile, BodyOverTheCapIsAResponseErrorForTsAndUncertainForSeq) {
  exchange_result big;
  big.error = transport_error_kind::too_large;
  big.request_sent = true;
  big.detail = "body over 65536 bytes";
  all(always(big));
  auto t = ts(1);
  ASSERT_TRUE(run_to_quiescence());
  EXPECT_EQ(failed(t), error_kind::response_error)
    << "a hostile body is not a configuration error";
  // Any other error moves on to the next endpoint: each node once, then the
  // last error (still a response_error).
  ASSERT_EQ(total_requests(), 3u);
  for (auto& [k, n] : net_->nodes)
    for (auto& req : n->seen)
      EXPECT_EQ(req.max_body_bytes, 64u * 1024u);
  auto s = seq("k", 1);
  ASSERT_TRUE(run_to_quiescence());
  EXPECT_EQ(failed(s), error_kind::uncertain_outcome);
  EXPECT_EQ(total_requests(), 4u) << "seq: one call, never retried";
}

// -- hostile leader hints -----------------------------------------------------

TEST_F(CoalesceHostile, GarbageHintsAreIgnoredAndTheLeaderIsStillFound) {
  const std::vector<std::string> hints = {
    "garbage",
    std::string(10 * 1024, 'a'),
    "10.0.0.2:7000; epoch=1" + std::string(10 * 1024, ' '),
    std::string("10.0.0.2:7000\r\nx: y"),
    std::string("10.0.0.2:7000\0; epoch=1", 23),
    std::string("10.0.0.2:7000; epoch=\x01"),
    std::string("10.0.0.2:7000; epoch=1\x7f"),
    std::string("10.0.0.2:7000; epoch=1\xc3\xa9"),
    "10.0.0.2:7000; epoch=abc",
    "10.0.0.2:7000; epoch=-1",
    "10.0.0.2:7000; epoch=123456789012345678901",
    "10.0.0.2:7000; epoch=18446744073709551616",
    "10.0.0.2:7000; epoch=1; epoch=2",
    "10.0.0.2:7000;;epoch=1",
    "10.0.0.2:7000; a=1; b=2; c=3; d=4; e=5; f=6; g=7; h=8; i=9",
    "10.0.0.2:0",
    "10.0.0.2:65536",
    "10.0.0.2",
    ":7000",
    "ftp://10.0.0.2:7000",
    "user@10.0.0.2:7000",
    "SELF", // each follower names itself
  };
  for (auto& h : hints) {
    SCOPED_TRACE(h.substr(0, 60));
    // A fresh driver (no cached leader): the followers are asked in
    // rotation; C is the real leader, B would be a wrong one.
    driver_.reset();
    node(A).script = follower(h == "SELF" ? "10.0.0.1:7000; epoch=9" : h);
    node(B).script = follower(h == "SELF" ? "10.0.0.2:7000; epoch=9" : h);
    node(C).script = good_leader(1);
    std::vector<std::shared_ptr<reply_box>> boxes;
    for (int i = 0; i < 3; ++i) { // three RPCs: three rotation offsets
      boxes.push_back(ts(1));
      ASSERT_TRUE(run_to_quiescence());
      EXPECT_EQ(ok(boxes.back()).endpoint(), C);
    }
    auto s = stats();
    EXPECT_EQ(s.leader_endpoint, C);
    EXPECT_EQ(s.redirects, 0u) << "no hostile hint was followed";
    EXPECT_EQ(s.transports, 3u);
  }
  EXPECT_EQ(net_->nodes.size(), 3u) << "no transport for a hostile hint";
  EXPECT_GE(node(A).seen.size(), hints.size());
}

TEST_F(CoalesceHostile,
       AHintLoopThroughAnUnconfiguredNodeEndsWithinTheDeadline) {
  // Every configured node points at D; D (unconfigured) points back at A.
  const std::string D = "http://10.0.0.9:7000";
  all(follower("10.0.0.9:7000; epoch=3"));
  node(D).script = follower("10.0.0.1:7000; epoch=3");
  auto b = ts(1);
  ASSERT_TRUE(run_to_quiescence());
  auto k = failed(b);
  EXPECT_TRUE(k == error_kind::service_unavailable
              || k == error_kind::request_error)
    << to_string(k);
  EXPECT_LE(b->at - t0_, 10s + 1ms) << "within the overall deadline";
  EXPECT_LE(stats().redirects, 64u);
  EXPECT_LE(total_requests(), 200u);
}

TEST_F(CoalesceHostile, HttpHintUnderTlsIsDropped) {
  cfg.tls = true;
  const std::string SA = "https://10.0.0.1:7000";
  const std::string SB = "https://10.0.0.2:7000";
  const std::string SC = "https://10.0.0.3:7000";
  for (auto& k : {SA, SB, SC})
    node(k).script = follower("http://10.0.0.9:7000; epoch=5");
  auto b = ts(1);
  ASSERT_TRUE(run_to_quiescence());
  EXPECT_EQ(failed(b), error_kind::service_unavailable);
  EXPECT_EQ(net_->nodes.count("http://10.0.0.9:7000"), 0u)
    << "no transport for the downgraded hint";
  auto s = stats();
  EXPECT_EQ(s.leader.downgrade_hints, 3u);
  EXPECT_EQ(s.redirects, 0u);
}

TEST_F(CoalesceHostile, AStaleEpochHintNeverMovesTheCachedLeader) {
  node(B).script = good_leader(5);
  node(A).script = follower("10.0.0.2:7000; epoch=5");
  node(C).script = follower("10.0.0.2:7000; epoch=5");
  auto first = ts(1);
  ASSERT_TRUE(run_to_quiescence());
  EXPECT_EQ(ok(first).endpoint(), B);
  // B now says "not leader, C is, epoch 3" (backwards); C would serve.
  node(B).script = follower("10.0.0.3:7000; epoch=3");
  node(C).script = good_leader(3);
  auto b = ts(1);
  ASSERT_TRUE(run_to_quiescence());
  EXPECT_EQ(stats().leader_endpoint, B) << "epoch guard";
  EXPECT_EQ(stats().leader_epoch, std::optional<uint64_t>{5});
  EXPECT_GE(stats().leader.stale_hints, 1u);
  // B's own 421 refutes the cache for this call: C's epoch-3 answer is
  // served (reached by rotation, not the hint), never read as deposed.
  ASSERT_TRUE(b->reply);
  EXPECT_EQ(ok(b).endpoint(), C);
}

TEST_F(CoalesceHostile, HintsToManyDistinctEndpointsKeepTheTransportsBounded) {
  // A chain of unconfigured followers, each hinting at the next with a
  // rising epoch; the 30th stalls. Mid-RPC and after it, at most 3
  // configured + 8 hinted transports may live.
  cfg.max_redirects_per_pass = 64;
  cfg.max_redirects_per_call = 64;
  auto ep = [](int i) {
    return "10.1.0." + std::to_string(i) + ":7000";
  };
  all(follower(ep(1) + "; epoch=1"));
  net_->make_unknown = [&](const std::string& key) -> node_script {
    int i = std::stoi(key.substr(std::string("http://10.1.0.").size()));
    if (i >= 30)
      return [](const http_request&) {
        return std::optional<exchange_result>{};
      };
    return follower(ep(i + 1) + "; epoch=" + std::to_string(i + 1));
  };
  auto b = ts(1);
  run();
  advance(1ms); // the cold-start flush
  EXPECT_EQ(node("http://10.1.0.30:7000").seen.size(), 1u);
  auto s = stats();
  EXPECT_EQ(s.redirects, 30u);
  EXPECT_LE(s.transports, 3u + 8u) << "mid-RPC";
  ASSERT_TRUE(run_to_quiescence());
  s = stats();
  EXPECT_LE(s.transports, 3u + 8u) << "after the RPC";
  EXPECT_EQ(failed(b), error_kind::service_unavailable);
}

TEST_F(CoalesceHostile, AHintToARefusingPortMovesOn) {
  node(A).script = follower("127.0.0.1:1; epoch=2");
  node(B).script = follower("127.0.0.1:1; epoch=2");
  node(C).script = good_leader(2);
  auto b = ts(1);
  ASSERT_TRUE(run_to_quiescence());
  EXPECT_EQ(ok(b).endpoint(), C);
  EXPECT_LE(node("http://127.0.0.1:1").seen.size(), 1u)
    << "followed at most once per pass";
}

TEST_F(CoalesceHostile, AnEndlessChainOfFreshHintsEndsAtTheRedirectCap) {
  // Every node hints at a new endpoint with a rising epoch, forever.
  auto next = std::make_shared<int>(1);
  auto hop = [next](const http_request&) {
    int i = (*next)++;
    return std::optional{
      answer(421, "",
             {{"leader-hint", "10.2." + std::to_string(i / 250) + "."
                                + std::to_string(i % 250 + 1)
                                + ":7000; epoch=" + std::to_string(i)}})};
  };
  all(hop);
  net_->make_unknown = [hop](const std::string&) -> node_script {
    return hop;
  };
  auto b = ts(1);
  ASSERT_TRUE(run_to_quiescence());
  EXPECT_EQ(failed(b), error_kind::request_error) << "redirect_cap";
  auto s = stats();
  EXPECT_EQ(s.rpc_errors_by_cause["redirect_cap"], 1u);
  // 64 hints counted; the 17th of each of the first three passes ends its
  // pass (per-pass cap, an election signal) instead of being followed.
  EXPECT_EQ(s.redirects, 61u);
  EXPECT_LE(s.transports, 3u + 8u);
  EXPECT_LE(b->at - t0_, 10s);
}

TEST_F(CoalesceHostile, AHintWithTheLargestEpochToADeadPortDoesNotStopService) {
  // A hostile follower seats a dead endpoint at epoch 2^64-1. The first
  // refused connect to it drops it from the cache (it is not a leader), so
  // the real leader's success seats it again: no call fails, and once B is
  // cached the calls go straight to it.
  node(A).script = follower("127.0.0.1:1; epoch=18446744073709551615");
  node(B).script = good_leader(3);
  node(C).script = follower("10.0.0.2:7000; epoch=3");
  for (int i = 0; i < 6; ++i) {
    auto b = ts(1);
    ASSERT_TRUE(run_to_quiescence());
    EXPECT_EQ(ok(b).endpoint(), B) << i;
    EXPECT_EQ(stats().leader_endpoint, B) << i;
  }
  // After the TTL (30 s) without a success at the dead endpoint, B is the
  // leader again.
  advance(31s);
  node(A).script = follower("10.0.0.2:7000; epoch=3");
  auto b = ts(1);
  ASSERT_TRUE(run_to_quiescence());
  EXPECT_EQ(ok(b).endpoint(), B);
  EXPECT_EQ(stats().leader_endpoint, B);
}

TEST_F(CoalesceHostile, ThrottledSeqIsRetriedNotUncertain) {
  // A 429 / 503 the oracle marks pre-commit ("committed": false) provably
  // committed nothing: a seq RPC may be retried.
  node(A).script = always(answer(503, R"({"detail":"x","committed":false})"));
  node(B).script = always(answer(429, R"({"committed":false})"));
  node(C).script = good_leader(1);
  auto s = seq("k", 2);
  ASSERT_TRUE(run_to_quiescence());
  EXPECT_EQ(ok(s).seq.start, 1u);
  EXPECT_EQ(ok(s).seq.count, 2u);
  EXPECT_EQ(node(C).seen.size(), 1u);
}

// -- other statuses -----------------------------------------------------------

TEST_F(CoalesceHostile, RedirectsAreNeverFollowed) {
  for (int status : {301, 302, 303, 307, 308}) {
    SCOPED_TRACE(status);
    auto before = total_requests();
    all(
      always(answer(status, "", {{"location", "http://10.0.0.2:7000/v1/ts"}})));
    auto t = ts(1);
    ASSERT_TRUE(run_to_quiescence());
    // An unexpected status: ts tries each configured endpoint once (never
    // the Location), then fails with the last error.
    EXPECT_EQ(failed(t), error_kind::request_error);
    EXPECT_EQ(total_requests() - before, 3u) << "each endpoint once";
    EXPECT_EQ(net_->nodes.size(), 3u) << "the Location was never dialled";
    // seq: an unmarked answer after sending is uncertain, one call.
    before = total_requests();
    auto s = seq("k", 1);
    ASSERT_TRUE(run_to_quiescence());
    EXPECT_EQ(failed(s), error_kind::uncertain_outcome);
    EXPECT_EQ(total_requests() - before, 1u);
  }
}

TEST_F(CoalesceHostile, AMarked4xxIsDefinitiveAndNotRetried) {
  for (int status : {400, 404, 409, 418}) {
    SCOPED_TRACE(status);
    auto before = total_requests();
    all(always(answer(status, R"({"detail":"no","committed":false})")));
    auto t = ts(1);
    auto s = seq("k", 1);
    ASSERT_TRUE(run_to_quiescence());
    EXPECT_EQ(failed(t), error_kind::request_error);
    EXPECT_EQ(failed(s), error_kind::request_error);
    EXPECT_EQ(total_requests() - before, 2u) << "one call each";
    // The oracle proved nothing was committed: nothing billed, though the
    // request was sent.
    EXPECT_FALSE(s->reply->error->nothing_sent);
    EXPECT_TRUE(s->reply->error->nothing_billed);
  }
}

TEST_F(CoalesceHostile, AnUnmarked4xxMovesOnToTheNextEndpoint) {
  for (int status : {400, 401, 403, 404}) {
    SCOPED_TRACE(status);
    auto before = total_requests();
    all(always(answer(status, R"({"detail":"no"})")));
    auto t = ts(1);
    ASSERT_TRUE(run_to_quiescence());
    EXPECT_EQ(failed(t), error_kind::request_error);
    EXPECT_EQ(total_requests() - before, 3u) << "each endpoint once";
    EXPECT_FALSE(t->reply->error->nothing_billed);
  }
}

TEST_F(CoalesceHostile, NotSupportedIsFinalAtTheFirstCall) {
  all(always(answer(501, R"({"detail":"dense sequences are not supported",)"
                         R"("committed":false})")));
  auto before = total_requests();
  auto s = seq("k", 2);
  ASSERT_TRUE(run_to_quiescence());
  EXPECT_EQ(failed(s), error_kind::server_error) << "not uncertain";
  EXPECT_NE(s->reply->error->detail.find("not supported"), std::string::npos)
    << s->reply->error->detail;
  EXPECT_TRUE(s->reply->error->nothing_billed);
  EXPECT_EQ(total_requests() - before, 1u) << "never retried";
  EXPECT_EQ(stats().uncertain, 0u);
  // The same without the marker (a proxy's 501): still final, one call.
  all(always(answer(501, "")));
  before = total_requests();
  auto t = ts(1);
  ASSERT_TRUE(run_to_quiescence());
  EXPECT_EQ(failed(t), error_kind::server_error);
  EXPECT_EQ(total_requests() - before, 1u);
}

TEST_F(CoalesceHostile, UnmarkedProxyRefusalsOfSeqAreUncertain) {
  // A proxy's 502/503/504 or 429 cannot prove the oracle behind it did not
  // commit: retrying would risk a double-spend.
  for (int status : {429, 502, 503, 504}) {
    SCOPED_TRACE(status);
    auto before = total_requests();
    all(always(answer(status, "<html>bad gateway</html>")));
    auto s = seq("k", 3);
    ASSERT_TRUE(run_to_quiescence());
    EXPECT_EQ(failed(s), error_kind::uncertain_outcome);
    EXPECT_FALSE(s->reply->error->nothing_sent);
    EXPECT_FALSE(s->reply->error->nothing_billed);
    EXPECT_EQ(total_requests() - before, 1u);
  }
}

TEST_F(CoalesceHostile, AHandshakeFailureOrResetMovesOnToTheNextEndpoint) {
  exchange_result tls;
  tls.error = transport_error_kind::tls;
  tls.detail = "certificate verify failed";
  exchange_result reset;
  reset.error = transport_error_kind::interrupted;
  reset.request_sent = true;
  reset.detail = "connection reset";
  node(A).script = always(tls);
  node(B).script = always(reset);
  node(C).script = good_leader(1);
  auto t = ts(1);
  ASSERT_TRUE(run_to_quiescence());
  EXPECT_EQ(ok(t).endpoint(), C);
  // The configured order is the first worklist's order.
  EXPECT_EQ(node(A).seen.size(), 1u);
  EXPECT_EQ(node(B).seen.size(), 1u);
  ASSERT_EQ(node(C).seen.size(), 1u);
  EXPECT_LT(node(A).seen_at[0], node(C).seen_at[0]);
  // Only TLS failures: the call fails with the last one, as a transport
  // failure (service_unavailable), after every endpoint was tried.
  all(always(tls));
  auto before = total_requests();
  auto u = ts(1);
  ASSERT_TRUE(run_to_quiescence());
  EXPECT_EQ(failed(u), error_kind::service_unavailable);
  EXPECT_EQ(total_requests() - before, 3u);
}

TEST_F(CoalesceHostile, TheFirstWorklistIsTheConfiguredOrder) {
  node(A).script = good_leader(1);
  node(B).script = good_leader(1);
  node(C).script = good_leader(1);
  auto t = ts(1);
  ASSERT_TRUE(run_to_quiescence());
  EXPECT_EQ(ok(t).endpoint(), A) << "the most-likely leader is put first";
  EXPECT_EQ(total_requests(), 1u);
}

TEST_F(CoalesceHostile, ThrottlingBacksOffWithinJitterBoundsAndTheDeadline) {
  for (int status : {429, 503}) {
    SCOPED_TRACE(status);
    for (auto& k : {A, B, C}) {
      node(k).seen.clear();
      node(k).seen_at.clear();
    }
    all(always(answer(status, "")));
    auto start = now();
    auto t = ts(1);
    ASSERT_TRUE(run_to_quiescence());
    auto k = failed(t);
    EXPECT_TRUE(k == error_kind::service_unavailable
                || k == error_kind::deadline_exceeded)
      << to_string(k);
    EXPECT_LE(t->at - start, 10s + 1ms) << "overall deadline";
    EXPECT_TRUE(t->reply->error->nothing_sent == false);
    // Arrival times in order: each gap after the n-th transport failure is
    // at most min(50 ms * 2^n, 5 s).
    std::vector<caf::actor_clock::time_point> at;
    for (auto& kk : {A, B, C})
      for (auto& x : node(kk).seen_at)
        at.push_back(x);
    std::sort(at.begin(), at.end());
    ASSERT_GE(at.size(), 3u);
    EXPECT_LE(at.size(), 5u) << "max_attempts 5 per pass, no election";
    for (std::size_t i = 1; i < at.size(); ++i) {
      auto cap = std::min<std::chrono::nanoseconds>(50ms * (1 << (i - 1)), 5s);
      EXPECT_LE(at[i] - at[i - 1], cap) << "gap " << i;
    }
  }
}

TEST_F(CoalesceHostile, AThrottledClusterWithABigBudgetStillEndsAtTheDeadline) {
  cfg.retry.max_attempts = 1000;
  cfg.retry.overall = 3;
  cfg.retry.base_backoff = 1;
  all(always(answer(503, "")));
  auto t = ts(1);
  ASSERT_TRUE(run_to_quiescence());
  auto k = failed(t);
  EXPECT_TRUE(k == error_kind::service_unavailable
              || k == error_kind::deadline_exceeded);
  EXPECT_LE(t->at - t0_, 3s + 1ms);
}

TEST_F(CoalesceHostile, Seq500IsUncertainAfterExactlyOneCall) {
  for (int status : {500, 502, 504, 599}) {
    SCOPED_TRACE(status);
    auto before = total_requests();
    all(always(answer(status, "")));
    auto s = seq("k", 3);
    ASSERT_TRUE(run_to_quiescence());
    EXPECT_EQ(failed(s), error_kind::uncertain_outcome);
    EXPECT_FALSE(s->reply->error->nothing_sent);
    EXPECT_EQ(total_requests() - before, 1u);
  }
}

// -- hostile callers ----------------------------------------------------------

TEST_F(CoalesceHostile, InvalidCountsAndKeysAreRejectedBeforeAnyRpc) {
  all(good_leader());
  std::vector<std::shared_ptr<reply_box>> bad;
  for (uint32_t n : {0u, ts_max_per_rpc + 1, UINT32_MAX})
    bad.push_back(ts(n));
  for (uint32_t n : {0u, 65537u, UINT32_MAX})
    bad.push_back(seq("k", n));
  for (auto key : {std::string{}, std::string(129, 'k'), std::string("\xff"),
                   std::string("\xc0\x80"), std::string("\xed\xa0\x80"),
                   std::string("a\xe2\x82"), std::string("\xf4\x90\x80\x80")})
    bad.push_back(seq(key, 1));
  auto good_ts = ts(ts_max_per_rpc);
  auto good_seq = seq(std::string(128, 'k'), 65536);
  ASSERT_TRUE(run_to_quiescence());
  for (auto& b : bad) {
    EXPECT_EQ(failed(b), error_kind::request_error);
    EXPECT_TRUE(b->reply->error->nothing_sent);
  }
  EXPECT_EQ(ok(good_ts).ts.count, ts_max_per_rpc);
  EXPECT_EQ(ok(good_seq).seq.count, 65536u);
  EXPECT_EQ(total_requests(), 2u);
}

TEST_F(CoalesceHostile, AKeyWithNulBytesIsSentIntact) {
  all(good_leader());
  std::string key("a\0b", 3);
  auto s = seq(key, 2);
  auto other = seq("a", 1);
  ASSERT_TRUE(run_to_quiescence());
  EXPECT_EQ(ok(s).seq.start, 1u);
  EXPECT_EQ(ok(other).seq.start, 1u) << "a distinct sequence";
  bool found = false;
  for (auto& [k, n] : net_->nodes)
    for (auto& req : n->seen)
      if (req.target == "/v1/seq") {
        auto o = json::parse(req.body).as_object();
        if (o.at("key").as_string() == json::string_view(key))
          found = true;
      }
  EXPECT_TRUE(found);
}

TEST_F(CoalesceHostile, TenThousandCallersBeyondMaxWaitersArePushedBackAtOnce) {
  all(good_leader());
  std::vector<std::shared_ptr<reply_box>> boxes;
  for (int i = 0; i < 10000; ++i)
    boxes.push_back(ts(1));
  run(); // no time passes: the flush has not fired
  std::size_t rejected = 0;
  for (auto& b : boxes)
    if (b->reply) {
      ASSERT_TRUE(b->reply->error);
      EXPECT_EQ(b->reply->error->kind, error_kind::service_unavailable);
      EXPECT_TRUE(b->reply->error->nothing_sent);
      ++rejected;
    }
  EXPECT_EQ(rejected, 10000u - 4096u);
  EXPECT_EQ(stats().held, 4096u);
  ASSERT_TRUE(run_to_quiescence());
  std::size_t served = 0;
  for (auto& b : boxes)
    if (b->reply && !b->reply->error)
      ++served;
  EXPECT_EQ(served, 4096u);
  EXPECT_EQ(total_requests(), 1u);
  EXPECT_EQ(stats().held, 0u);
}

TEST_F(CoalesceHostile, OddTimeoutsNeitherCrashNorHang) {
  EXPECT_EQ(coalesce_seconds(std::nan("")), coalesce_duration{0});
  EXPECT_EQ(coalesce_seconds(-1), coalesce_duration{0});
  EXPECT_EQ(coalesce_seconds(-0.0), coalesce_duration{0});
  EXPECT_EQ(coalesce_seconds(std::numeric_limits<double>::infinity()),
            coalesce_duration{0});
  EXPECT_EQ(coalesce_seconds(1e300),
            coalesce_duration{1'000'000'000'000'000'000});
  EXPECT_EQ(coalesce_seconds(std::numeric_limits<double>::denorm_min()),
            coalesce_duration{0});
  all(good_leader());
  std::vector<std::shared_ptr<reply_box>> boxes;
  for (double t : {0.0, -1.0, std::nan(""), 1e300, -1e300,
                   std::numeric_limits<double>::infinity(),
                   -std::numeric_limits<double>::infinity(),
                   std::numeric_limits<double>::max()})
    boxes.push_back(ts(1, t));
  ASSERT_TRUE(run_to_quiescence(1000));
  for (auto& b : boxes)
    EXPECT_EQ(ok(b).ts.count, 1u);
  EXPECT_EQ(total_requests(), 1u);
  // A timeout too small for a nanosecond fires at once: deadline_exceeded,
  // nothing sent, and nothing is sent for it afterwards.
  auto tiny = ts(1, 1e-12);
  ASSERT_TRUE(run_to_quiescence(1000));
  EXPECT_EQ(failed(tiny), error_kind::deadline_exceeded);
  EXPECT_TRUE(tiny->reply->error->nothing_sent);
  EXPECT_EQ(total_requests(), 1u);
}

TEST_F(CoalesceHostile, CallersThatAllTimeOutDuringABackoffEndTheRpc) {
  all(always(refused()));
  cfg.retry.base_backoff = 1; // long waits between refused attempts
  std::vector<std::shared_ptr<reply_box>> boxes;
  for (int i = 0; i < 5; ++i)
    boxes.push_back(ts(1, 0.2));
  run();
  advance(1ms); // the cold-start flush
  ASSERT_EQ(total_requests(), 1u) << "first attempt refused, now waiting";
  ASSERT_TRUE(run_to_quiescence());
  for (auto& b : boxes) {
    EXPECT_EQ(failed(b), error_kind::deadline_exceeded);
    EXPECT_EQ(b->at - t0_, 200ms);
  }
  auto s = stats();
  EXPECT_EQ(s.in_flight, 0u);
  EXPECT_EQ(s.held, 0u);
  EXPECT_LE(total_requests(), 2u) << "no attempt after every caller left";
}

TEST_F(CoalesceHostile,
       SeqCallersThatAllTimeOutInFlightAreNotToldNothingWasSent) {
  // The request is on the wire (the leader stalls); every caller times out:
  // the RPC is cancelled, but the block may be spent.
  all([](const http_request&) { return std::optional<exchange_result>{}; });
  auto a = seq("k", 1, 0.1);
  auto b = seq("k", 1, 0.1);
  ASSERT_TRUE(run_to_quiescence());
  EXPECT_EQ(failed(a), error_kind::deadline_exceeded);
  EXPECT_EQ(failed(b), error_kind::deadline_exceeded);
  EXPECT_FALSE(a->reply->error->nothing_sent);
  EXPECT_FALSE(b->reply->error->nothing_sent);
  EXPECT_EQ(total_requests(), 1u);
}

// -- answers that must not be trusted ---------------------------------------

// A 500 whose body repeats "committed" (true, then false) is ambiguous:
// Boost.JSON keeps the last, another reader the first. It proves nothing,
// so a seq that may have committed is not sent again.
TEST_F(CoalesceHostile, ARepeatedPreCommitMarkerProvesNothing) {
  const std::string twice = R"({"committed":true,"committed":false})";
  EXPECT_FALSE(marks_nothing_committed(twice));
  EXPECT_TRUE(marks_nothing_committed(R"({"committed":false})"));
  node(A).script = always(answer(500, twice));
  node(B).script = good_leader(1);
  node(C).script = good_leader(1);
  auto s = seq("k", 3);
  ASSERT_TRUE(run_to_quiescence());
  ASSERT_TRUE(s->reply);
  EXPECT_EQ(total_requests(), 1u) << "a seq that may have committed went again";
  EXPECT_EQ(failed(s), error_kind::uncertain_outcome);
}

// A node whose 2xx the client cannot use (a proxy's 200 page) was seated as
// the leader by that very answer, and each of its answers refreshed the
// TTL: every later call failed although B is a healthy leader. Now the
// answer seats nothing, and the next call starts elsewhere.
TEST_F(CoalesceHostile, AnUnusable2xxSeatsNoLeader) {
  node(A).script = always(answer(200, "<html>ok</html>"));
  node(B).script = good_leader(1);
  node(C).script = follower("10.0.0.2:7000; epoch=1");
  std::vector<error_kind> kinds;
  EXPECT_EQ(failed_calls_over(30, &kinds), 1) << "only the first call asks A";
  EXPECT_EQ(kinds, std::vector<error_kind>{error_kind::response_error});
  EXPECT_EQ(node(A).seen.size(), 1u);
  EXPECT_EQ(stats().leader_endpoint, B);
}

// The same through one 503 of the cached leader: the broken node's
// unusable 2xx carries a higher epoch, and took the cache for good.
TEST_F(CoalesceHostile, AnUnusable2xxWithAHigherEpochDoesNotTakeTheCache) {
  auto leader = good_leader(1);
  auto n = std::make_shared<int>(0);
  node(B).script = [leader, n](const http_request& r) {
    if (++*n == 2)
      return std::optional{answer(503, "busy")};
    return leader(r);
  };
  node(C).script = always(answer(200, R"({"epoch":"2"})"));
  node(A).script = follower("10.0.0.2:7000; epoch=1");
  EXPECT_LE(failed_calls_over(30), 1) << "the blip's call at most";
  EXPECT_EQ(stats().leader_endpoint, B);
  EXPECT_LE(node(C).seen.size(), 1u);
}

// A deposed leader (epoch 1) answers while the fresh leader's epoch is 5:
// its range may be one the leader handed out already, so it is not served;
// the ts call goes on to the next endpoint (here: through A's hint to B).
TEST_F(CoalesceHostile, ADeposedLeadersAnswerIsNotServed) {
  auto n = std::make_shared<int>(0);
  node(B).script = [n](const http_request&) {
    if (++*n == 2)
      return std::optional{answer(503, "busy")};
    return std::optional{answer(200, R"({"physical_ms":5000,"logical_start":)"
                                       + std::to_string(*n)
                                       + R"(,"count":1,"epoch":"5"})")};
  };
  node(A).script = follower("10.0.0.2:7000; epoch=5");
  node(C).script = always(answer(
    200, R"({"physical_ms":5000,"logical_start":1,"count":1,"epoch":"1"})"));
  auto first = ts(1);
  ASSERT_TRUE(run_to_quiescence());
  ASSERT_TRUE(first->reply && first->reply->ok());
  auto second = ts(1);
  ASSERT_TRUE(run_to_quiescence());
  ASSERT_TRUE(second->reply);
  EXPECT_EQ(node(C).seen.size(), 1u) << "C was asked (after B's 503)";
  if (second->reply->ok()) {
    EXPECT_NE(second->reply->endpoint(), C);
    EXPECT_EQ(second->reply->epoch(), "5");
    EXPECT_NE(second->reply->ts.first(), first->reply->ts.first());
  } else {
    EXPECT_EQ(failed(second), error_kind::server_error);
  }
  EXPECT_EQ(stats().leader_endpoint, B);
}

// A seq a deposed leader answered may have taken a block there: its values
// are not used and the outcome is uncertain, never a second send.
TEST_F(CoalesceHostile, ADeposedLeadersSeqAnswerIsUncertain) {
  auto n = std::make_shared<int>(0);
  auto leader = good_leader(5);
  node(B).script = [n, leader](const http_request& r) {
    if (++*n == 2) // refused before committing: safe to go on
      return std::optional{answer(503, R"({"committed":false})")};
    return leader(r);
  };
  node(A).script = follower("10.0.0.2:7000; epoch=5");
  node(C).script = always(answer(200, R"({"start":1,"count":1,"epoch":"1"})"));
  auto first = ts(1);
  ASSERT_TRUE(run_to_quiescence());
  ASSERT_TRUE(first->reply && first->reply->ok());
  ASSERT_EQ(stats().leader_endpoint, B);
  auto before = total_requests();
  auto s = seq("k", 1);
  ASSERT_TRUE(run_to_quiescence());
  ASSERT_TRUE(s->reply);
  EXPECT_EQ(failed(s), error_kind::uncertain_outcome);
  EXPECT_EQ(node(C).seen.size(), 1u);
  EXPECT_EQ(total_requests(), before + 2) << "B's refusal, then C once";
}

// The oracle cluster restarts (epochs begin again at 1) while A is cached
// at epoch 5; A leads again at 1, then leadership moves to B at 2. B's
// answers are the real leader's and are served: the cached epoch followed
// A's own answer down to 1 (kept at 5, B read as a deposed leader).
TEST_F(CoalesceHostile, AFailoverAfterAClusterRestartIsServed) {
  cache_a_at_epoch_5();
  ASSERT_FALSE(HasFailure());
  node(A).script = good_leader(1);
  auto second = ts(1);
  ASSERT_TRUE(run_to_quiescence());
  ASSERT_TRUE(second->reply && second->reply->ok());
  EXPECT_EQ(stats().leader_epoch, 1u);
  advance_by(std::chrono::seconds{1});
  node(A).script = follower("10.0.0.2:7000; epoch=2");
  node(B).script = good_leader(2);
  node(C).script = follower("10.0.0.2:7000; epoch=2");
  EXPECT_EQ(failed_calls_over(10), 0) << "B's answers read as deposed";
  EXPECT_EQ(stats().leader_endpoint, B);
}

// The cluster restarts (epochs from 1 again) and leadership moves before
// the cached leader answers again: A, cached at epoch 5, now says "not
// leader, B is, epoch 1" (a stale hint by the guard), and B serves at
// epoch 1. A's own 421 refutes the cache, so B's answer is no deposed
// leader's: it is served (the cache, by the guard, is left alone).
TEST_F(CoalesceHostile,
       AfterTheCachedLeaderSaysItNoLongerLeadsALowerEpochIsServed) {
  cache_a_at_epoch_5();
  ASSERT_FALSE(HasFailure());
  node(A).script = follower("10.0.0.2:7000; epoch=1");
  node(B).script = good_leader(1);
  node(C).script = follower("10.0.0.2:7000; epoch=1");
  EXPECT_EQ(failed_calls_over(5), 0);
}

} // namespace
} // namespace outbound::testing
