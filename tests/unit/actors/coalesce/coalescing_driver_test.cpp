// The coalescing_driver actor on CAF's test coordinator, in
// virtual time, against scripted oracle nodes: one fake transport per
// endpoint that plays leader (answers from a shared oracle), follower (421,
// with or without a leader-hint), refuses, stalls or commits without
// replying. The pure parts (batch arithmetic, hint parsing, the discovery
// loop) have their own tests (coalesce_batcher_test, leader_*_test); these
// check that the actor wires them together: one RPC for a crowd, the next
// batch right after the answer, chunk-by-chunk delivery, caller timeouts
// that leave their siblings alone (authzed/spicedb #925),
// leader discovery and caching, the hint LRU's transports, and the
// uncertain outcome of seq.

#include "actors/coalesce/coalescing_driver.hpp"

#include "config/config_error.hpp"
#include "tests/support/coalesce_fixture.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/response_promise.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>

#include <gtest/gtest.h>

#include <map>
#include <set>

using namespace std::chrono_literals;
namespace json = boost::json;

namespace outbound::testing {
namespace {

enum class node_role {
  leader,
  follower,
  refuse,
  stall,
  commit_no_reply,
  /// A hostile leader: answers count + 1.
  wrong_count,
};

/// One scripted oracle node (shared with the test; all on the test thread).
struct fake_node {
  node_role role = node_role::follower;
  /// A follower's leader-hint header value ("" = no header).
  std::string hint;
  /// A leader answers this long after the request arrives.
  std::chrono::nanoseconds delay{0};
  /// Requests received, with the virtual time of arrival.
  std::vector<std::pair<json::object, caf::actor_clock::time_point>> seen;
  /// The same requests as the transport got them (headers, target).
  std::vector<http_request> requests;
  std::vector<uint64_t> cancels;
  /// Answers left stalled (answered only by a cancel).
  int stalled = 0;
  /// >= 0: after this many requests, stall every later one.
  int stall_after = -1;
};

/// The oracle behind the leaders: strictly increasing timestamps (one
/// physical millisecond per RPC), gapless sequences.
struct fake_oracle {
  std::map<std::string, std::shared_ptr<fake_node>> nodes;
  uint64_t physical_ms = 1000;
  uint64_t epoch = 1;
  std::map<std::string, uint64_t> seqs;
  int transports_made = 0;
  /// Raw JSON of an extra member `"x"` in every answer ("" = none).
  std::string extra;
  /// Nodes for endpoints not in `nodes` (hinted ones); null: refuse.
  std::function<std::shared_ptr<fake_node>(const std::string&)> make_unknown;

  std::string answer(const json::object& req, const std::string& target) {
    auto count = req.at("count").to_number<uint64_t>();
    json::object o;
    if (target == "/v1/ts") {
      o["physical_ms"] = ++physical_ms;
      o["logical_start"] = 0;
      o["count"] = count;
    } else {
      auto& s = seqs[std::string{req.at("key").as_string()}];
      o["start"] = s + 1;
      o["count"] = count;
      s += count;
    }
    o["epoch"] = std::to_string(epoch);
    auto text = json::serialize(o);
    if (!extra.empty())
      text.insert(text.size() - 1, ",\"x\":" + extra);
    return text;
  }
};

struct node_state {
  std::shared_ptr<fake_oracle> oracle;
  std::shared_ptr<fake_node> node;
  std::vector<std::pair<uint64_t, caf::response_promise>> held;
  std::vector<std::pair<caf::response_promise, exchange_result>> later;
};

caf::behavior fake_node_impl(caf::stateful_actor<node_state>* self,
                             std::shared_ptr<fake_oracle> oracle,
                             std::shared_ptr<fake_node> node) {
  self->state.oracle = std::move(oracle);
  self->state.node = std::move(node);
  return {
    [self](const http_request& req) -> caf::result<exchange_result> {
      auto& st = self->state;
      auto& n = *st.node;
      auto body = json::parse(req.body).as_object();
      n.seen.emplace_back(body, self->clock().now());
      n.requests.push_back(req);
      exchange_result r;
      r.exchange_id = req.exchange_id;
      auto role = n.role;
      if (n.stall_after >= 0 && n.seen.size() > std::size_t(n.stall_after))
        role = node_role::stall;
      switch (role) {
        case node_role::refuse:
          r.error = transport_error_kind::connect;
          r.detail = "connection refused";
          return r;
        case node_role::stall:
          ++n.stalled;
          st.held.emplace_back(req.exchange_id, self->make_response_promise());
          return caf::delegated<exchange_result>{};
        case node_role::commit_no_reply:
          st.oracle->answer(body, req.target); // committed, never told
          r.error = transport_error_kind::interrupted;
          r.request_sent = true;
          r.detail = "connection reset";
          return r;
        case node_role::follower:
          r.request_sent = true;
          r.response.status = 421;
          r.response.body = R"({"detail":"not the leader"})";
          if (!n.hint.empty())
            r.response.headers.emplace_back("leader-hint", n.hint);
          return r;
        case node_role::leader:
        case node_role::wrong_count: break;
      }
      r.request_sent = true;
      r.response.status = 200;
      if (n.role == node_role::wrong_count)
        body["count"] = body.at("count").to_number<uint64_t>() + 1;
      r.response.body = st.oracle->answer(body, req.target);
      if (n.delay.count() == 0)
        return r;
      // Held like a slow server: a cancel cuts it (as the real pool does).
      st.held.emplace_back(req.exchange_id, self->make_response_promise());
      st.later.emplace_back(st.held.back().second, std::move(r));
      self->delayed_send(self, n.delay, done_atom_v,
                         static_cast<uint64_t>(st.later.size() - 1));
      return caf::delegated<exchange_result>{};
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
          r.detail = "cancelled";
          i->second.deliver(std::move(r));
          st.held.erase(i);
          return;
        }
    },
    [self](done_atom, uint64_t index) {
      auto& st = self->state;
      auto& [rp, r] = st.later.at(index);
      if (rp.pending())
        rp.deliver(r);
      // Answered: drop both copies of the promise (a promise refers to its
      // own actor; kept, it is a cycle LSan reports at exit).
      for (auto i = st.held.begin(); i != st.held.end(); ++i)
        if (i->first == r.exchange_id) {
          st.held.erase(i);
          break;
        }
      rp = caf::response_promise{};
    },
  };
}

/// Milliseconds, for readable failures.
int64_t ms(std::chrono::nanoseconds d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

class CoalescingDriver : public coalesce_fixture {
protected:
  CoalescingDriver() {
    oracle_ = std::make_shared<fake_oracle>();
    for (auto& k : {A, B, C})
      oracle_->nodes[k] = std::make_shared<fake_node>();
  }

  fake_node& node(const std::string& key) {
    return *oracle_->nodes.at(key);
  }

  /// A's one caller's RPC leaves at 1 ms and answers at 11 ms; at 5 ms
  /// three callers arrive together. Returns the first caller's box (front)
  /// and the three others'.
  std::vector<std::shared_ptr<reply_box>> three_callers_beside_one_rpc() {
    elect(A, 1);
    node(A).delay = 10ms;
    std::vector<std::shared_ptr<reply_box>> boxes{ts()};
    advance_stepwise(5ms);
    EXPECT_EQ(node(A).seen.size(), 1u);
    for (int i = 0; i < 3; ++i)
      boxes.push_back(ts());
    run();
    return boxes;
  }

  /// Makes `key` the leader at `epoch`; the others hint at it.
  void elect(const std::string& key, uint64_t epoch) {
    oracle_->epoch = epoch;
    auto authority = key.substr(key.find("//") + 2);
    for (auto& [k, n] : oracle_->nodes) {
      n->role = k == key ? node_role::leader : node_role::follower;
      n->hint = authority + "; epoch=" + std::to_string(epoch);
    }
  }

  coalesce_options options() override {
    coalesce_options opts;
    opts.seed = 42;
    auto oracle = oracle_;
    auto* sys_ptr = &sys();
    opts.transports = [oracle, sys_ptr](const oracle_endpoint& ep) {
      ++oracle->transports_made;
      auto it = oracle->nodes.find(ep.key());
      std::shared_ptr<fake_node> n;
      if (it != oracle->nodes.end())
        n = it->second;
      else if (oracle->make_unknown)
        n = oracle->nodes[ep.key()] = oracle->make_unknown(ep.key());
      else {
        n = oracle->nodes[ep.key()] = std::make_shared<fake_node>();
        n->role = node_role::refuse;
      }
      return caf::actor_cast<transport_actor>(
        sys_ptr->spawn(fake_node_impl, oracle, n));
    };
    return opts;
  }

  std::size_t total_requests() {
    std::size_t n = 0;
    for (auto& [k, nd] : oracle_->nodes)
      n += nd->seen.size();
    return n;
  }

  std::shared_ptr<fake_oracle> oracle_;
};

TEST_F(CoalescingDriver, ACrowdArrivingTogetherRidesOneRpcAfterTheFlush) {
  elect(A, 1);
  std::vector<std::shared_ptr<reply_box>> boxes;
  for (int i = 0; i < 100; ++i)
    boxes.push_back(ts());
  run();
  EXPECT_EQ(total_requests(), 0u) << "cold start waits batch_flush_interval";
  ASSERT_TRUE(run_to_quiescence());
  std::set<uint64_t> seen;
  for (auto& b : boxes) {
    auto& r = ok(b);
    EXPECT_EQ(r.ts.count, 1u);
    EXPECT_EQ(r.batch_waiters, 100u);
    EXPECT_EQ(r.endpoint(), A);
    seen.insert(r.ts.first());
  }
  EXPECT_EQ(seen.size(), 100u) << "every caller gets its own timestamp";
  EXPECT_EQ(total_requests(), 1u);
  ASSERT_EQ(node(A).seen.size(), 1u);
  EXPECT_EQ(node(A).seen[0].first.at("count").as_int64(), 100);
  EXPECT_EQ(ms(node(A).seen[0].second - t0_), 1);
  auto st = stats();
  EXPECT_EQ(st.batch_sizes[7], 1u) << "one RPC in the (64, 128] bucket";
  EXPECT_EQ(st.batch_size_sum, 100u);
}

TEST_F(CoalescingDriver, WaitersArrivingDuringAnRpcGoInTheNextBatchAtOnce) {
  // tsoracle's rule: one batch in flight (pipelining is the next test).
  cfg.max_rpcs_in_flight = 1;
  elect(A, 1);
  node(A).delay = 10ms;
  auto first = ts();
  advance_stepwise(5ms); // the first RPC left at 1 ms, answers at 11 ms
  std::vector<std::shared_ptr<reply_box>> late;
  for (int i = 0; i < 3; ++i)
    late.push_back(ts());
  advance_stepwise(5ms);
  EXPECT_EQ(node(A).seen.size(), 1u) << "at most one batch in flight";
  ASSERT_TRUE(run_to_quiescence());
  ok(first);
  ASSERT_EQ(node(A).seen.size(), 2u);
  EXPECT_EQ(node(A).seen[1].first.at("count").as_int64(), 3);
  EXPECT_EQ(ms(node(A).seen[1].second - t0_), 11)
    << "the next batch leaves as the first returns: no flush while warm";
  for (auto& b : late) {
    EXPECT_EQ(ok(b).batch_waiters, 3u);
    EXPECT_GT(ok(b).ts.first(), ok(first).ts.first());
  }
}

// Pipelining with fill_free_slots off (max_rpcs_in_flight 4): the first
// RPC carries one waiter, so callers that arrive during it do not wait for
// it; those that arrive together share one RPC, sent at once.
TEST_F(CoalescingDriver,
       WaitersArrivingTogetherDuringASingleWaiterRpcShareOneAtOnce) {
  cfg.fill_free_slots = false; // the earlier rule
  auto late = three_callers_beside_one_rpc();
  auto first = late.front();
  late.erase(late.begin());
  ASSERT_EQ(node(A).seen.size(), 2u) << "sent at once, beside the first";
  EXPECT_EQ(node(A).seen[1].first.at("count").as_int64(), 3);
  EXPECT_EQ(ms(node(A).seen[1].second - t0_), 5);
  ASSERT_TRUE(run_to_quiescence());
  EXPECT_EQ(ok(first).batch_waiters, 1u);
  std::set<uint64_t> seen{ok(first).ts.first()};
  for (auto& b : late) {
    EXPECT_EQ(ok(b).batch_waiters, 3u);
    seen.insert(ok(b).ts.first());
  }
  EXPECT_EQ(seen.size(), 4u) << "every caller gets its own timestamp";
  // (The second RPC left before the first found the leader, so it may
  // have asked a follower first: only the leader's count is exact.)
  EXPECT_EQ(node(A).seen.size(), 2u);
  // Both RPCs are back.
  auto st = stats();
  EXPECT_EQ(st.in_flight, 0u);
}

// The default (fill_free_slots): callers that arrive together while one
// RPC is in flight are spread over the three free slots at once, so a few
// callers in a closed loop never queue behind one another's RPC.
TEST_F(CoalescingDriver, CallersArrivingBesideAnRpcSpreadOverTheFreeSlots) {
  ASSERT_TRUE(cfg.fill_free_slots);
  auto late = three_callers_beside_one_rpc();
  auto first = late.front();
  late.erase(late.begin());
  ASSERT_EQ(node(A).seen.size(), 4u) << "one RPC each, at once";
  for (std::size_t i = 1; i < 4; ++i) {
    EXPECT_EQ(node(A).seen[i].first.at("count").as_int64(), 1);
    EXPECT_EQ(ms(node(A).seen[i].second - t0_), 5);
  }
  auto extra = ts(); // every slot busy: it waits for a free one
  run();
  EXPECT_EQ(node(A).seen.size(), 4u);
  ASSERT_TRUE(run_to_quiescence());
  std::set<uint64_t> seen{ok(first).ts.first(), ok(extra).ts.first()};
  for (auto& b : late) {
    EXPECT_EQ(ok(b).batch_waiters, 1u);
    seen.insert(ok(b).ts.first());
  }
  EXPECT_EQ(seen.size(), 5u) << "every caller gets its own timestamp";
  EXPECT_EQ(ms(node(A).seen[4].second - t0_), 11)
    << "the fifth leaves when the first RPC returns";
  EXPECT_EQ(stats().in_flight, 0u);
}

TEST_F(CoalescingDriver, FourWaitersOf100kAreServedInRpcsUnderTheCap) {
  elect(A, 1);
  std::vector<std::shared_ptr<reply_box>> boxes;
  for (int i = 0; i < 4; ++i)
    boxes.push_back(ts(100000));
  auto bad = ts(262145);
  auto zero = ts(0);
  run();
  // Rejected inline, before any RPC.
  EXPECT_EQ(failed(bad), error_kind::request_error);
  EXPECT_TRUE(bad->reply->error->nothing_sent);
  EXPECT_EQ(failed(zero), error_kind::request_error);
  ASSERT_TRUE(run_to_quiescence());
  for (auto& b : boxes)
    EXPECT_EQ(ok(b).ts.count, 100000u);
  ASSERT_EQ(node(A).seen.size(), 2u);
  for (auto& [body, at] : node(A).seen)
    EXPECT_LE(body.at("count").as_int64(), 262144);
  EXPECT_EQ(node(A).seen[0].first.at("count").as_int64(), 200000);
}

TEST_F(CoalescingDriver, AChunkIsDeliveredWhileTheNextChunkStalls) {
  elect(A, 1);
  std::vector<std::shared_ptr<reply_box>> boxes;
  for (int i = 0; i < 4; ++i)
    boxes.push_back(ts(100000));
  node(A).stall_after = 1; // chunk 1 (2 waiters) answered, chunk 2 stalls
  advance_stepwise(2ms);
  EXPECT_EQ(ok(boxes[0]).ts.count, 100000u);
  EXPECT_EQ(ok(boxes[1]).ts.count, 100000u);
  EXPECT_FALSE(boxes[2]->reply) << "chunk 2 is still in flight";
  EXPECT_EQ(node(A).stalled, 1);
}

TEST_F(CoalescingDriver, BackpressureBeyondMaxWaitersAnswersAtOnce) {
  elect(A, 1);
  node(A).role = node_role::stall;
  cfg.max_waiters = 64;
  std::vector<std::shared_ptr<reply_box>> boxes;
  for (int i = 0; i < 64; ++i)
    boxes.push_back(ts());
  auto extra = ts();
  run();
  EXPECT_EQ(failed(extra), error_kind::service_unavailable);
  EXPECT_TRUE(extra->reply->error->nothing_sent);
  EXPECT_NE(extra->reply->error->detail.find("max_waiters"), std::string::npos);
  for (auto& b : boxes)
    EXPECT_FALSE(b->reply);
  EXPECT_EQ(stats().held, 64u);
}

// One caller's cancellation (authzed/spicedb #925). The backend holds 200 ms.
// A (t=0, 50 ms deadline) and B (t=10 ms) share one batch; A's timeout
// cancels only A. C arrives at 100 ms, after the batch left: it rides the
// NEXT RPC (deviation from the case's "C gets the value at ~200 ms",
// deliberate: a timestamp handed to C must not predate C's entry into the
// driver, so C cannot take a share of an RPC sent before it arrived).
TEST_F(CoalescingDriver, CaseThirteenOneCallersTimeoutDoesNotPoisonTheBatch) {
  cfg.fill_free_slots = false; // c waits for the next batch (the earlier rule)
  cfg.batch_flush_interval = 0.020;
  elect(A, 1);
  node(A).delay = 200ms;
  auto a = ts(1, 0.050);
  advance_stepwise(10ms);
  auto b = ts(1, 2.0);
  advance_stepwise(40ms);
  EXPECT_EQ(failed(a), error_kind::deadline_exceeded);
  EXPECT_EQ(ms(a->at - t0_), 50);
  advance_stepwise(50ms);
  auto c = ts(1, 2.0);
  ASSERT_TRUE(run_to_quiescence());
  EXPECT_EQ(ok(b).ts.count, 1u);
  EXPECT_EQ(ms(b->at - t0_), 220);
  EXPECT_EQ(ok(c).ts.count, 1u);
  EXPECT_EQ(ms(c->at - t0_), 420);
  EXPECT_GT(ok(c).ts.first(), ok(b).ts.first());
  ASSERT_EQ(node(A).seen.size(), 2u);
  EXPECT_EQ(node(A).seen[0].first.at("count").as_int64(), 2);
  EXPECT_TRUE(node(A).cancels.empty()) << "no RPC was cancelled";
}

// Callers' timeouts share one driver timer: a crowd of callers with
// timeouts adds one clock event, not one per caller, and a caller whose
// deadline is earlier than every pending one still fails exactly on time.
TEST_F(CoalescingDriver, CallersTimeoutsShareOneTimer) {
  elect(A, 1);
  node(A).delay = 200ms;
  auto first = ts(1, 5.0);
  run();
  auto events_before = sched_->clock().schedule().size();
  std::vector<std::shared_ptr<reply_box>> crowd;
  for (int i = 0; i < 100; ++i)
    crowd.push_back(ts(1, 5.0 + i * 0.001));
  run();
  EXPECT_EQ(sched_->clock().schedule().size(), events_before)
    << "later deadlines arm no timer of their own";
  auto early = ts(1, 0.030);
  advance_stepwise(30ms);
  EXPECT_EQ(failed(early), error_kind::deadline_exceeded);
  EXPECT_EQ(ms(early->at - t0_), 30);
  ASSERT_TRUE(run_to_quiescence());
  EXPECT_EQ(ok(first).ts.count, 1u);
  for (auto& c : crowd)
    EXPECT_EQ(ok(c).ts.count, 1u);
  EXPECT_EQ(stats().held, 0u);
}

TEST_F(CoalescingDriver, CaseThirteenVariantEveryWaiterGoneCancelsTheRpc) {
  elect(A, 1);
  node(A).delay = 200ms;
  auto a = ts(1, 0.050);
  auto b = ts(1, 0.080);
  ASSERT_TRUE(run_to_quiescence());
  EXPECT_EQ(failed(a), error_kind::deadline_exceeded);
  EXPECT_EQ(failed(b), error_kind::deadline_exceeded);
  EXPECT_EQ(ms(b->at - t0_), 80);
  ASSERT_EQ(node(A).seen.size(), 1u);
  EXPECT_EQ(node(A).cancels.size(), 1u) << "the server sees the abort";
  auto s = stats();
  EXPECT_EQ(s.held, 0u);
  EXPECT_EQ(s.in_flight, 0u);
}

TEST_F(CoalescingDriver, FollowersHintTheLeaderWhichIsThenCached) {
  elect(C, 5);
  auto first = ts();
  ASSERT_TRUE(run_to_quiescence());
  EXPECT_EQ(ok(first).endpoint(), C);
  EXPECT_EQ(ok(first).epoch(), "5");
  auto s = stats();
  EXPECT_EQ(s.leader_endpoint, C);
  EXPECT_EQ(s.leader_epoch, std::optional<uint64_t>{5});
  EXPECT_LE(total_requests(), 2u) << "at most one follower, then the hint";
  auto before = total_requests();
  auto second = ts();
  ASSERT_TRUE(run_to_quiescence());
  EXPECT_EQ(ok(second).endpoint(), C);
  EXPECT_EQ(total_requests(), before + 1) << "the cached leader goes first";
}

TEST_F(CoalescingDriver, ALeaderMoveIsFollowedWithoutAFailedCall) {
  elect(C, 5);
  {
    auto w = ts();
    ASSERT_TRUE(run_to_quiescence());
    ok(w);
  }
  elect(A, 6);
  auto r = ts();
  ASSERT_TRUE(run_to_quiescence());
  EXPECT_EQ(ok(r).endpoint(), A);
  auto s = stats();
  EXPECT_EQ(s.leader_endpoint, A);
  EXPECT_EQ(s.leader_epoch, std::optional<uint64_t>{6});
  EXPECT_EQ(s.calls_failed, 0u);
  EXPECT_GE(s.leader_changes, 2u);
}

TEST_F(CoalescingDriver, AStaleHintNeverReplacesTheCachedLeader) {
  elect(A, 7);
  {
    auto w = ts();
    ASSERT_TRUE(run_to_quiescence());
    ok(w);
  }
  // A now claims B leads at an older epoch, and B really answers: the
  // epoch guard keeps A cached, so the next call still starts at A.
  node(A).role = node_role::follower;
  node(A).hint = "10.0.0.2:7000; epoch=3";
  node(B).role = node_role::leader;
  auto r = ts();
  ASSERT_TRUE(run_to_quiescence());
  ok(r);
  auto s = stats();
  EXPECT_EQ(s.leader.stale_hints, 1u);
  // B served (found by the worklist, not by the stale hint) and its body
  // carries epoch 7 (the oracle's), so B is seated at epoch 7.
  EXPECT_EQ(ok(r).endpoint(), B);
  EXPECT_EQ(s.leader_epoch, std::optional<uint64_t>{7});
}

TEST_F(CoalescingDriver, TheLeaderCacheExpiresAfterItsTtl) {
  cfg.leader_ttl = 30;
  elect(B, 2);
  auto w = ts();
  ASSERT_TRUE(run_to_quiescence()); // also fires the stale attempt timer
  ok(w);
  auto seated = w->at;
  advance_stepwise(seated + 30s - 1ms - now());
  EXPECT_EQ(stats().leader_endpoint, B);
  advance_stepwise(1ms);
  EXPECT_EQ(stats().leader_endpoint, "") << "30 s without a success";
  // The next call starts from the configured rotation again and re-seats.
  auto again = ts();
  ASSERT_TRUE(run_to_quiescence());
  EXPECT_EQ(ok(again).endpoint(), B);
  EXPECT_EQ(stats().leader_endpoint, B);
}

TEST_F(CoalescingDriver, AnHttpHintUnderTlsIsDropped) {
  cfg.tls = true;
  auto a = std::string{"https://10.0.0.1:7000"};
  auto b = std::string{"https://10.0.0.2:7000"};
  auto c = std::string{"https://10.0.0.3:7000"};
  oracle_->nodes.clear();
  for (auto& k : {a, b, c}) {
    oracle_->nodes[k] = std::make_shared<fake_node>();
    oracle_->nodes[k]->hint = "http://10.0.0.9:7000; epoch=9";
  }
  oracle_->nodes[c]->role = node_role::leader;
  auto r = ts();
  ASSERT_TRUE(run_to_quiescence());
  EXPECT_EQ(ok(r).endpoint(), c);
  EXPECT_EQ(oracle_->nodes.count("http://10.0.0.9:7000"), 0u)
    << "the downgraded endpoint was never contacted";
  EXPECT_GE(stats().leader.downgrade_hints, 1u);
}

TEST_F(CoalescingDriver, SeqAfterAPossibleCommitIsUncertainAfterOneCall) {
  elect(A, 1);
  {
    auto w = seq("orders");
    ASSERT_TRUE(run_to_quiescence());
    ok(w);
  }
  node(A).role = node_role::commit_no_reply;
  auto before = total_requests();
  auto r = seq("orders", 10);
  ASSERT_TRUE(run_to_quiescence());
  EXPECT_EQ(failed(r), error_kind::uncertain_outcome);
  EXPECT_EQ(total_requests(), before + 1) << "never a silent retry";
  EXPECT_EQ(oracle_->seqs["orders"], 11u) << "the server did commit";
  EXPECT_EQ(stats().uncertain, 1u);
}

TEST_F(CoalescingDriver, SeqIsRetriedWhenNothingCanHaveCommitted) {
  elect(B, 1);
  {
    auto w = seq("k");
    ASSERT_TRUE(run_to_quiescence());
    ok(w);
  }
  // B is down (connect refused: nothing sent); A becomes leader.
  node(B).role = node_role::refuse;
  node(A).role = node_role::leader;
  node(C).role = node_role::follower;
  node(C).hint = "10.0.0.1:7000; epoch=2";
  oracle_->epoch = 2;
  auto r = seq("k", 3);
  ASSERT_TRUE(run_to_quiescence());
  EXPECT_EQ(ok(r).seq.start, 2u);
  EXPECT_EQ(ok(r).seq.count, 3u);
  EXPECT_EQ(ok(r).endpoint(), A);
}

TEST_F(CoalescingDriver, TsAfterALostReplyIsRetriedElsewhere) {
  elect(A, 1);
  {
    auto w = ts();
    ASSERT_TRUE(run_to_quiescence());
    ok(w);
  }
  node(A).role = node_role::commit_no_reply;
  node(B).role = node_role::leader; // B answers; C hints B
  node(C).hint = "10.0.0.2:7000; epoch=2";
  auto r = ts();
  ASSERT_TRUE(run_to_quiescence());
  EXPECT_EQ(ok(r).endpoint(), B) << "ts is idempotent: a lost reply is retried";
}

TEST_F(CoalescingDriver, AStalledLeaderCostsOneAttemptBudgetThenMovesOn) {
  cfg.retry.per_attempt = 1.0;
  elect(A, 1);
  {
    auto w = ts();
    ASSERT_TRUE(run_to_quiescence());
    ok(w);
  }
  node(A).role = node_role::stall;
  node(B).role = node_role::leader;
  node(C).hint = "10.0.0.2:7000; epoch=2";
  auto start = now();
  auto r = ts();
  ASSERT_TRUE(run_to_quiescence());
  EXPECT_EQ(ok(r).endpoint(), B);
  EXPECT_EQ(node(A).cancels.size(), 1u) << "the stalled exchange is cut";
  EXPECT_GE(r->at - start, 1s);
  EXPECT_LT(r->at - start, 3s);
}

TEST_F(CoalescingDriver,
       AnEndlessHintChainEndsAtTheRedirectCapAndHoldsFewPools) {
  // Every node names a new one at a higher epoch: 64 redirects per call at
  // most, then a typed error. Transports of hint-only endpoints are capped
  // by the hint LRU (8) plus the configured three.
  cfg.max_redirects_per_pass = 100;
  for (auto& k : {A, B, C}) {
    node(k).hint = "10.1.0.1:1; epoch=2";
  }
  int next_port = 2;
  uint64_t next_epoch = 3;
  oracle_->make_unknown = [&](const std::string&) {
    auto n = std::make_shared<fake_node>();
    n->hint = "10.1.0.1:" + std::to_string(next_port++)
              + "; epoch=" + std::to_string(next_epoch++);
    return n;
  };
  auto r = ts();
  ASSERT_TRUE(run_to_quiescence());
  EXPECT_EQ(failed(r), error_kind::request_error);
  EXPECT_NE(r->reply->error->detail.find("redirect cap"), std::string::npos)
    << r->reply->error->detail;
  auto s = stats();
  EXPECT_LE(s.transports, 3u + 8u);
  EXPECT_EQ(s.redirects, 64u);
}

TEST_F(CoalescingDriver, NoLeaderAnywhereIsRiddenOutThenServiceUnavailable) {
  cfg.retry.overall = 2.0;
  for (auto& k : {A, B, C})
    node(k).role = node_role::follower; // no hint: an election
  auto r = ts();
  ASSERT_TRUE(run_to_quiescence());
  EXPECT_EQ(failed(r), error_kind::service_unavailable);
  EXPECT_LE(r->at - t0_, 2s + 60ms);
  EXPECT_GT(total_requests(), 3u) << "more than one pass";
}

TEST_F(CoalescingDriver, EveryNodeRefusingFailsWithNothingSent) {
  cfg.retry.overall = 1.0;
  for (auto& k : {A, B, C})
    node(k).role = node_role::refuse;
  auto r = ts();
  ASSERT_TRUE(run_to_quiescence());
  EXPECT_EQ(failed(r), error_kind::service_unavailable);
  EXPECT_TRUE(r->reply->error->nothing_sent) << "only refused connects";
  // A follower's 421 is an answer: then something was sent.
  node(B).role = node_role::follower;
  auto r2 = ts();
  ASSERT_TRUE(run_to_quiescence());
  EXPECT_EQ(failed(r2), error_kind::service_unavailable);
  EXPECT_FALSE(r2->reply->error->nothing_sent);
}

TEST_F(CoalescingDriver, AnElectionEndingWithinTheDeadlineIsRiddenOut) {
  for (auto& k : {A, B, C})
    node(k).role = node_role::follower;
  auto r = ts();
  advance_stepwise(300ms);
  EXPECT_FALSE(r->reply);
  elect(B, 4);
  ASSERT_TRUE(run_to_quiescence());
  EXPECT_EQ(ok(r).endpoint(), B);
}

TEST_F(CoalescingDriver, AWrongCountFromTheServerFailsOnlyThatChunk) {
  elect(A, 1);
  node(A).role = node_role::wrong_count; // answers count + 1
  std::vector<std::shared_ptr<reply_box>> boxes;
  for (int i = 0; i < 3; ++i)
    boxes.push_back(ts());
  auto other_key = seq("k", 2); // another group: unharmed
  ASSERT_TRUE(run_to_quiescence());
  for (auto& b : boxes)
    EXPECT_EQ(failed(b), error_kind::response_error);
  EXPECT_EQ(failed(other_key), error_kind::uncertain_outcome)
    << "a seq block of the wrong size may have been spent";
  node(A).role = node_role::leader;
  auto later = ts();
  auto bad_key = seq("");
  run();
  EXPECT_EQ(failed(bad_key), error_kind::request_error);
  EXPECT_TRUE(bad_key->reply->error->nothing_sent);
  ASSERT_TRUE(run_to_quiescence());
  EXPECT_EQ(ok(later).ts.count, 1u);
}

TEST_F(CoalescingDriver, AnswersAreReadUnderTheConfiguredJsonDepth) {
  // 65 levels: the answer object and 64 nested arrays in "x".
  oracle_->extra = std::string(64, '[') + std::string(64, ']');
  elect(A, 1);
  auto deep = ts();
  ASSERT_TRUE(run_to_quiescence());
  EXPECT_EQ(failed(deep), error_kind::response_error)
    << "the default limit, 64, refuses the answer";
}

TEST_F(CoalescingDriver, ARaisedJsonDepthReadsADeeperAnswer) {
  oracle_->extra = std::string(64, '[') + std::string(64, ']');
  cfg.json_max_depth = 65;
  elect(A, 1);
  auto t = ts();
  auto s = seq("k", 2);
  ASSERT_TRUE(run_to_quiescence());
  EXPECT_EQ(ok(t).ts.count, 1u);
  EXPECT_EQ(ok(s).seq.count, 2u);
}

TEST_F(CoalescingDriver, ConstructionValidatesTheConfigNamingTheField) {
  coalesce_config bad;
  bad.endpoints = {"10.0.0.1:7000", "nope"};
  try {
    make_coalescing_driver(sys(), bad);
    FAIL() << "no config_error";
  } catch (const config_error& e) {
    EXPECT_NE(std::string{e.what()}.find("coalesce.endpoints[1]"),
              std::string::npos)
      << e.what();
  }
}

TEST_F(CoalescingDriver,
       EveryAttemptOfAnRpcCarriesTheCredentialAndItsOneRequestId) {
  // The oracle requests come out of the shared request builder: the
  // credential, the default headers and a request id, the same on every
  // attempt of one RPC (here: the follower A, then the hinted leader C),
  // a new one for the next RPC; each caller learns its RPC's id.
  cfg.token = "s3cret";
  cfg.default_headers = {{"X-Team", "billing"}};
  elect(C, 5);
  auto first = ts();
  ASSERT_TRUE(run_to_quiescence());
  ASSERT_EQ(ok(first).endpoint(), C);
  ASSERT_EQ(node(A).requests.size(), 1u) << "the first RPC starts at A";
  ASSERT_EQ(node(C).requests.size(), 1u);
  const auto& id = ok(first).request_id();
  ASSERT_EQ(id.size(), 32u) << id;
  for (auto* n : {&node(A), &node(C)}) {
    const auto& req = n->requests.front();
    EXPECT_EQ(req.target, "/v1/ts");
    EXPECT_EQ(req.max_body_bytes, 64u * 1024u);
    ASSERT_TRUE(find_header(req.headers, "x-request-id"));
    EXPECT_EQ(*find_header(req.headers, "x-request-id"), id);
    ASSERT_TRUE(find_header(req.headers, "authorization"));
    EXPECT_EQ(*find_header(req.headers, "authorization"), "Bearer s3cret");
    ASSERT_TRUE(find_header(req.headers, "x-team"));
    EXPECT_EQ(*find_header(req.headers, "x-team"), "billing");
    ASSERT_TRUE(find_header(req.headers, "user-agent"));
    EXPECT_EQ(find_header(req.headers, "user-agent")->rfind("outbound/", 0),
              0u);
  }
  auto second = seq("orders", 2);
  ASSERT_TRUE(run_to_quiescence());
  ASSERT_EQ(node(C).requests.size(), 2u) << "the cached leader goes first";
  const auto& req = node(C).requests.back();
  EXPECT_EQ(req.target, "/v1/seq");
  EXPECT_EQ(req.body, R"({"count":2,"key":"orders"})");
  ASSERT_TRUE(find_header(req.headers, "x-request-id"));
  EXPECT_EQ(*find_header(req.headers, "x-request-id"), ok(second).request_id());
  EXPECT_NE(ok(second).request_id(), id) << "one id per RPC";
}

TEST_F(CoalescingDriver, AFailedRpcNamesItsRequestIdInTheError) {
  for (auto& k : {A, B, C})
    node(k).role = node_role::refuse;
  auto r = ts();
  ASSERT_TRUE(run_to_quiescence());
  EXPECT_EQ(failed(r), error_kind::service_unavailable);
  EXPECT_EQ(r->reply->error->request_id.size(), 32u);
  EXPECT_EQ(r->reply->error->request_id, r->reply->request_id());
}

TEST_F(CoalescingDriver, ABadDefaultHeaderFailsConstructionNamingTheField) {
  for (auto bad : std::vector<header_list>{
         {{"X-Bad", "v\r\nInjected: 1"}}, {{"Host", "evil"}}, {{"X Y", "v"}}}) {
    coalesce_config c = cfg;
    c.default_headers = bad;
    try {
      make_coalescing_driver(sys(), c);
      ADD_FAILURE() << "no config_error for " << bad.front().first;
    } catch (const config_error& e) {
      EXPECT_EQ(e.field(), "coalesce.default_headers") << e.what();
      EXPECT_EQ(std::string{e.what()}.find("Injected"), std::string::npos)
        << "the value is never shown: " << e.what();
    }
  }
  coalesce_config c = cfg;
  c.token = "t";
  c.token_header = "Bad Header";
  try {
    make_coalescing_driver(sys(), c);
    ADD_FAILURE() << "no config_error";
  } catch (const config_error& e) {
    EXPECT_EQ(e.field(), "coalesce.token_header") << e.what();
  }
}

} // namespace
} // namespace outbound::testing
