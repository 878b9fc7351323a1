// The hub's whole state: publish with dedupe and seq, the wake
// script, the fault knobs and their admin patch, connection plans,
// subscribe answers per tier, restart. Pure: explicit time and rng.

#include "hub/hub_state.hpp"

#include "config/config_error.hpp"
#include "hub/hub.hpp"

#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <gtest/gtest.h>

#include <random>
#include <string>

using namespace outbound;

namespace {

const std::string epoch_a = "aaaaaaaaaaaaaaaa";

publish_input input(std::string subject, std::string key = "") {
  publish_input in;
  in.subject = std::move(subject);
  in.kind = "k";
  in.dedupe_key = std::move(key);
  return in;
}

boost::json::object obj(const char* text) {
  return boost::json::parse(text).as_object();
}

} // namespace

TEST(HubState, PublishGivesLedgerIdRingSeqAndTheEventFrame) {
  hub_state st{{}, {}, epoch_a};
  auto a = st.publish(input("a/1"), 10.0);
  auto b = st.publish(input("a/2"), 11.0);
  EXPECT_EQ(a.event->id, 1);
  EXPECT_EQ(a.seq, 1);
  EXPECT_EQ(b.event->id, 2);
  EXPECT_EQ(b.seq, 2);
  ASSERT_TRUE(b.frame);
  EXPECT_EQ(*b.frame, R"({"type":"event","subject":"a/2","kind":"k","seq":2,)"
                      R"("metadata":{},"id":2,"ts":1.1E1})");
  EXPECT_EQ(st.counters().publishes, 2u);
}

TEST(HubState, DuplicatePublishReturnsTheEarlierEventAndNoFrame) {
  hub_state st{{}, {}, epoch_a};
  auto a = st.publish(input("a/1", "k1"), 1.0);
  auto dup = st.publish(input("a/1", "k1"), 2.0);
  EXPECT_TRUE(dup.duplicate);
  EXPECT_EQ(dup.event, a.event);
  EXPECT_EQ(dup.seq, 1);
  EXPECT_FALSE(dup.frame);
  EXPECT_EQ(st.ring().head(), 1) << "a duplicate takes no seq";
  EXPECT_EQ(st.counters().duplicates, 1u);
}

TEST(HubState, RestartKeepsTheLedgerButStartsANewSeqSpace) {
  hub_state st{{}, {}, epoch_a};
  st.publish(input("s"), 1.0);
  st.publish(input("s"), 1.0);
  st.restart("bbbbbbbbbbbbbbbb");
  auto c = st.publish(input("s"), 1.0);
  EXPECT_EQ(c.event->id, 3);
  EXPECT_EQ(c.seq, 1);
  EXPECT_EQ(st.ring().epoch(), "bbbbbbbbbbbbbbbb");
  EXPECT_EQ(st.counters().restarts, 1u);
}

TEST(HubState, LedgerHelloCarriesTheVisibleCeilingAndNoEpoch) {
  hub_faults f;
  f.visibility_lag_polls = 1;
  hub_state st{{}, f, epoch_a};
  st.publish(input("s"), 1.0);
  auto out = st.subscribe(hub_tier::ledger, {});
  ASSERT_TRUE(out.hello);
  EXPECT_EQ(*out.hello, R"({"type":"hello","mode":"ledger","seq":1,)"
                        R"("cursor":0,"resync":false,"epoch":null})");
  EXPECT_TRUE(out.replay.empty());
}

TEST(HubState, CatchupSubscribeResyncsFirstThenResumesWithTheMissedFrames) {
  hub_state st{{}, {}, epoch_a};
  st.publish(input("a/1"), 1.0);
  subscribe_request req;
  req.client_id = "c1";
  auto first = st.subscribe(hub_tier::catchup, req);
  EXPECT_EQ(first.decision, resume_decision::resync_no_last_seq);
  EXPECT_EQ(*first.hello, R"({"type":"hello","mode":"catchup","seq":1,)"
                          R"("cursor":1,"resync":true,)"
                          R"("epoch":"aaaaaaaaaaaaaaaa"})");
  EXPECT_EQ(first.boundary, 1);
  st.publish(input("a/2"), 1.0);
  st.publish(input("b/3"), 1.0);
  req.last_seq = 1;
  req.epoch = epoch_a;
  req.prefixes = {"a/"};
  auto again = st.subscribe(hub_tier::catchup, req);
  EXPECT_EQ(again.decision, resume_decision::resume);
  EXPECT_EQ(again.boundary, 3);
  ASSERT_EQ(again.replay.size(), 1u);
  EXPECT_NE(again.replay[0]->find("\"seq\":2"), std::string::npos);
  EXPECT_EQ(st.counters().resumes, 1u);
  EXPECT_EQ(st.counters().resyncs, 1u);
}

TEST(HubState, EphemeralHelloIsAlwaysAResync) {
  hub_state st{{}, {}, epoch_a};
  subscribe_request req;
  req.client_id = "c";
  req.last_seq = 0;
  req.epoch = epoch_a;
  auto out = st.subscribe(hub_tier::ephemeral, req);
  EXPECT_EQ(*out.hello, R"({"type":"hello","mode":"ephemeral","seq":0,)"
                        R"("cursor":0,"resync":true,)"
                        R"("epoch":"aaaaaaaaaaaaaaaa"})");
  EXPECT_FALSE(st.subscribe(hub_tier::ephemeral, req, true).hello);
}

TEST(HubState, AWakeScriptHoldsNaturalWakesUntilTheHeadReachesItsMaximum) {
  hub_state st{{}, {}, epoch_a};
  for (int i = 0; i < 5; ++i)
    EXPECT_FALSE(st.publish(input("s"), 1.0).wake_held);
  ASSERT_FALSE(st.apply_admin(obj(R"({"wake_script":[9,6,10,6,8,7,9]})")));
  EXPECT_TRUE(st.take_due_script().empty());
  for (int i = 6; i <= 9; ++i) {
    auto out = st.publish(input("s"), 1.0);
    EXPECT_TRUE(out.wake_held);
    EXPECT_TRUE(out.fired_script.empty()) << "id " << i;
  }
  auto tenth = st.publish(input("s"), 1.0);
  EXPECT_EQ(tenth.fired_script, (std::vector<int64_t>{9, 6, 10, 6, 8, 7, 9}));
  EXPECT_TRUE(st.faults().wake_script.empty());
  EXPECT_FALSE(st.publish(input("s"), 1.0).wake_held);
  EXPECT_EQ(st.counters().scripts_fired, 1u);
}

TEST(HubState, AWakeScriptAlreadyReachedIsDueAtOnce) {
  hub_state st{{}, {}, epoch_a};
  st.publish(input("s"), 1.0);
  st.publish(input("s"), 1.0);
  ASSERT_FALSE(st.apply_admin(obj(R"({"wake_script":[2,1]})")));
  EXPECT_EQ(st.take_due_script(), (std::vector<int64_t>{2, 1}));
  EXPECT_TRUE(st.take_due_script().empty());
}

TEST(HubState, DropWakesAllOrWithASeededProbability) {
  hub_state st{{}, {}, epoch_a};
  std::mt19937_64 rng{1};
  EXPECT_FALSE(st.drop_wake(rng));
  ASSERT_FALSE(st.apply_admin(obj(R"({"drop_wakes":true})")));
  EXPECT_TRUE(st.drop_wake(rng));
  ASSERT_FALSE(st.apply_admin(
    obj(R"({"drop_wakes":false,"drop_wake_probability":0.25})")));
  auto count = [&](uint64_t seed) {
    std::mt19937_64 r{seed};
    int dropped = 0;
    for (int i = 0; i < 4000; ++i)
      dropped += st.drop_wake(r) ? 1 : 0;
    return dropped;
  };
  auto a = count(77);
  EXPECT_EQ(count(77), a) << "the same seed drops the same wakes";
  EXPECT_GT(a, 850);
  EXPECT_LT(a, 1150);
}

TEST(HubState, AdminPatchValidatesEveryKeyBeforeChangingAnything) {
  hub_state st{{}, {}, epoch_a};
  auto err = st.apply_admin(obj(R"({"go_silent":1,"bogus":true})"));
  ASSERT_TRUE(err);
  EXPECT_EQ(*err, "unknown knob 'bogus'");
  EXPECT_EQ(st.faults().go_silent, 0);
  EXPECT_EQ(*st.apply_admin(obj(R"({"go_silent":-2})")),
            "'go_silent' must be an integer >= -1");
  EXPECT_EQ(*st.apply_admin(obj(R"({"drop_wake_probability":1.5})")),
            "'drop_wake_probability' must be a number in [0, 1]");
  EXPECT_EQ(*st.apply_admin(obj(R"({"wake_script":[1,-1]})")),
            "'wake_script' must be an array of cursors >= 0");
  EXPECT_EQ(*st.apply_admin(obj(R"({"fragment_bytes":0})")),
            "'fragment_bytes' must be an integer >= 1");
  EXPECT_EQ(*st.apply_admin(obj(R"({"retention":-1})")),
            "'retention' must be an integer >= 0");
  EXPECT_EQ(*st.apply_admin(obj(R"({"drop_wakes":1})")),
            "'drop_wakes' must be a boolean");
  EXPECT_FALSE(st.apply_admin(obj(R"({"seed":5})"), {"seed"}));
}

TEST(HubState, AdminRetentionAndFloorTrimTheLedger) {
  hub_state st{{}, {}, epoch_a};
  for (int i = 0; i < 200; ++i)
    st.publish(input("s"), 1.0);
  ASSERT_FALSE(st.apply_admin(obj(R"({"floor":149})")));
  EXPECT_EQ(st.ledger().floor(), 149);
  replay_query q;
  q.after = 100;
  q.limit = 5;
  auto r = st.replay(q);
  EXPECT_TRUE(r.page.reset);
  EXPECT_EQ(r.page.events.front()->id, 150);
  ASSERT_FALSE(st.apply_admin(obj(R"({"retention":10})")));
  EXPECT_EQ(st.ledger().floor(), 190);
  EXPECT_EQ(st.counters().replay_resets, 1u);
}

TEST(HubState, AdminVisibilityLagAppliesToLaterEvents) {
  hub_state st{{}, {}, epoch_a};
  st.publish(input("s"), 1.0);
  ASSERT_FALSE(st.apply_admin(obj(R"({"visibility_lag_polls":1})")));
  st.publish(input("s"), 1.0);
  EXPECT_EQ(st.cursor(), 1);
  EXPECT_EQ(st.replay({}).page.cursor, 1);
  EXPECT_EQ(st.replay({}).page.cursor, 2);
}

TEST(HubState, NonObjectPagesCountDown) {
  hub_faults f;
  f.non_object_pages = 2;
  hub_state st{{}, f, epoch_a};
  EXPECT_TRUE(st.replay({}).bare_array);
  EXPECT_TRUE(st.replay({}).bare_array);
  EXPECT_FALSE(st.replay({}).bare_array);
  EXPECT_EQ(st.counters().non_object_pages, 2u);
}

TEST(HubState, ConnectionPlansConsumeCountsAndMinusOneMeansEvery) {
  hub_faults f;
  f.accept_then_close = 1;
  f.go_silent = -1;
  f.fragment_frames = 2;
  f.fragment_bytes = 4;
  f.empty_continuations = 3;
  f.pad_frames_to = 100;
  hub_state st{{}, f, epoch_a};
  auto p1 = st.take_connection_plan();
  EXPECT_TRUE(p1.accept_then_close);
  EXPECT_TRUE(p1.go_silent);
  EXPECT_EQ(p1.fragment_bytes, 4u);
  EXPECT_EQ(p1.empty_continuations, 3);
  EXPECT_EQ(p1.pad_to, 100u);
  EXPECT_EQ(p1.oversized_frame_bytes, 0u);
  auto p2 = st.take_connection_plan();
  EXPECT_FALSE(p2.accept_then_close);
  EXPECT_TRUE(p2.go_silent);
  EXPECT_EQ(p2.fragment_bytes, 4u);
  auto p3 = st.take_connection_plan();
  EXPECT_TRUE(p3.go_silent);
  EXPECT_EQ(p3.fragment_bytes, 0u);
  EXPECT_EQ(p3.empty_continuations, 0);
  EXPECT_EQ(st.faults().accept_then_close, 0);
  EXPECT_EQ(st.faults().go_silent, -1);
  EXPECT_EQ(st.faults().fragment_frames, 0);
}

TEST(HubState, OversizedPlanCarriesTheAnnouncedLength) {
  hub_state st{{}, {}, epoch_a};
  ASSERT_FALSE(st.apply_admin(obj(
    R"({"oversized_frame":1,"oversized_frame_bytes":9223372036854775807})")));
  EXPECT_EQ(st.take_connection_plan().oversized_frame_bytes,
            9223372036854775807ull);
  EXPECT_EQ(st.take_connection_plan().oversized_frame_bytes, 0u);
}

TEST(HubState, StateJsonShowsFaultsCountersLedgerAndRing) {
  hub_state st{{}, {}, epoch_a};
  st.publish(input("s"), 1.0);
  auto o = st.state_json();
  EXPECT_EQ(o.at("epoch").as_string(), epoch_a);
  EXPECT_EQ(o.at("seq").as_int64(), 1);
  EXPECT_EQ(o.at("ledger").at("head").as_int64(), 1);
  EXPECT_EQ(o.at("ring").at("capacity").as_uint64(), 1024u);
  EXPECT_EQ(o.at("faults").at("go_silent").as_int64(), 0);
  EXPECT_EQ(o.at("counters").at("publishes").as_uint64(), 1u);
}

TEST(HubConfig, ValidateNamesTheBadField) {
  auto field_of = [](hub_config c) -> std::string {
    try {
      c.validate();
    } catch (const config_error& e) {
      return e.field();
    }
    return "";
  };
  EXPECT_EQ(field_of({}), "");
  hub_config c;
  c.host = "localhost";
  EXPECT_EQ(field_of(c), "host");
  c = {};
  c.replay_limit = 0;
  EXPECT_EQ(field_of(c), "replay_limit");
  c = {};
  c.threads = 0;
  EXPECT_EQ(field_of(c), "threads");
  c = {};
  c.queue_max = 0;
  EXPECT_EQ(field_of(c), "queue_max");
  c = {};
  c.faults.drop_wake_probability = 2.0;
  EXPECT_EQ(field_of(c), "faults.drop_wake_probability");
  c = {};
  c.faults.fragment_bytes = 0;
  EXPECT_EQ(field_of(c), "faults.fragment_bytes");
  EXPECT_THROW(hub{c}, config_error);
}

TEST(HubState, IdempotencyKeysReplayTheFirstAnswerRefuseAnotherBodyAndAgeOut) {
  hub_state_config c;
  c.dedupe_capacity = 2;
  hub_state st{c, {}, epoch_a};
  EXPECT_EQ(st.find_idempotent("k1", "b1").answer, nullptr);
  st.remember_idempotent("k1", "b1", "answer-1");
  auto again = st.find_idempotent("k1", "b1");
  ASSERT_NE(again.answer, nullptr);
  EXPECT_EQ(*again.answer, "answer-1");
  EXPECT_TRUE(st.find_idempotent("k1", "other body").conflict);
  st.remember_idempotent("k2", "b2", "answer-2");
  st.remember_idempotent("k3", "b3", "answer-3"); // k1, the oldest, goes
  EXPECT_EQ(st.find_idempotent("k1", "b1").answer, nullptr);
  EXPECT_NE(st.find_idempotent("k3", "b3").answer, nullptr);
  EXPECT_EQ(st.counters().idempotent_replays, 2u);
  EXPECT_EQ(st.counters().idempotency_conflicts, 1u);
}

TEST(HubState, LosePublishAnswersCountsDown) {
  hub_state st{{}, {}, epoch_a};
  EXPECT_FALSE(st.take_lost_publish_answer());
  ASSERT_FALSE(st.apply_admin(
    boost::json::parse(R"({"lose_publish_answers":2})").as_object()));
  EXPECT_TRUE(st.take_lost_publish_answer());
  EXPECT_TRUE(st.take_lost_publish_answer());
  EXPECT_FALSE(st.take_lost_publish_answer());
  EXPECT_EQ(st.counters().lost_publish_answers, 2u);
}
