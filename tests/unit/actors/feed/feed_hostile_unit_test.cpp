// Hostile-server attacks on the feed watcher's pure state machines (found in
// review): replay pages out of order, duplicated, over the limit, with
// absurd cursors and ids; catchup hellos whose seq goes backward; frames
// with absurd seqs. The rule: a hostile peer gets a counted drain error or a
// typed reset, never a lost, duplicated or reordered event, never a silently
// skipped gap, never undefined behaviour (run under UBSan by test.sh).

#include "actors/call/call_result.hpp"
#include "actors/feed/feed_config.hpp"
#include "actors/feed/feed_frames.hpp"
#include "actors/feed/ledger_drain.hpp"
#include "actors/feed/mode_negotiator.hpp"
#include "config/client_config.hpp"
#include "config/config_error.hpp"

#include <boost/json/monotonic_resource.hpp>
#include <boost/json/parse.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <limits>
#include <thread>

using namespace outbound;
using namespace std::chrono_literals;

namespace {

constexpr int64_t i64max = std::numeric_limits<int64_t>::max();
constexpr int64_t i64min = std::numeric_limits<int64_t>::min();

page_summary page(std::vector<std::optional<int64_t>> ids,
                  std::optional<int64_t> cursor, bool reset = false) {
  page_summary p;
  p.is_object = true;
  p.ids = std::move(ids);
  p.cursor = cursor;
  p.reset = reset;
  return p;
}

struct page_result {
  page_plan plan;
  drain_next next;
  std::vector<int64_t> got;
};

page_result run_page(ledger_drain& d, const page_summary& p) {
  page_result r;
  r.plan = d.on_page(p);
  for (auto i : r.plan.deliver) {
    d.on_event_delivered(p.ids[i]);
    r.got.push_back(p.ids[i] ? *p.ids[i] : -1);
  }
  r.next = d.on_page_done();
  return r;
}

} // namespace

// -- replay pages
// -----------------------------------------------------------------

TEST(FeedHostileDrain, IdsGoingBackwardAboveTheCursorAreABadPage) {
  ledger_drain d{0, 10, 30s};
  d.request(drain_trigger::start);
  // Delivering 3 then skipping 1 and 2 would lose them silently;
  // delivering 3, 1, 2 would reorder: the page is refused.
  auto r = run_page(d, page({3, 1, 2}, 3));
  EXPECT_EQ(r.plan.verdict, page_verdict::bad_page);
  EXPECT_TRUE(r.got.empty());
  EXPECT_EQ(r.next.what, drain_next::kind::idle);
  EXPECT_EQ(d.cursor(), 0) << "the cursor is untouched";
  EXPECT_EQ(d.drain_errors(), 1u);
  EXPECT_EQ(d.resets(), 0u);
  // The next tick gets a sound page and delivers everything.
  d.request(drain_trigger::poll);
  r = run_page(d, page({1, 2, 3}, 3));
  EXPECT_EQ(r.got, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(d.cursor(), 3);
  EXPECT_EQ(d.drain_errors(), 1u);
}

TEST(FeedHostileDrain, BackwardIdsInAResetPageFireNoReset) {
  ledger_drain d{0, 10, 30s};
  d.request(drain_trigger::start);
  auto r = run_page(d, page({9, 8}, 9, true));
  EXPECT_EQ(r.plan.verdict, page_verdict::bad_page);
  EXPECT_FALSE(r.plan.reset);
  EXPECT_EQ(d.resets(), 0u);
  EXPECT_EQ(d.drain_errors(), 1u);
}

TEST(FeedHostileDrain, OldIdsBelowTheCursorAreSkippedWithoutAnError) {
  // A server that answers after= inclusively, or repeats old events: they
  // were delivered before, so skipping them loses nothing.
  ledger_drain d{5, 10, 30s};
  d.request(drain_trigger::start);
  auto r = run_page(d, page({3, 5, 6, 4, 7}, 7));
  EXPECT_EQ(r.plan.verdict, page_verdict::deliver);
  EXPECT_EQ(r.got, (std::vector<int64_t>{6, 7}));
  EXPECT_EQ(d.cursor(), 7);
  EXPECT_EQ(d.drain_errors(), 0u);
}

TEST(FeedHostileDrain, RepeatedIdIsDeliveredOnceAndCounted) {
  ledger_drain d{0, 10, 30s};
  d.request(drain_trigger::start);
  auto r = run_page(d, page({1, 2, 2, 2, 3}, 3));
  EXPECT_EQ(r.plan.verdict, page_verdict::deliver);
  EXPECT_TRUE(r.plan.anomaly);
  EXPECT_EQ(r.got, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(d.cursor(), 3);
  EXPECT_EQ(d.drain_errors(), 1u) << "one per page, not per duplicate";
}

TEST(FeedHostileDrain, PageOverTheLimitIsCutAndItsCursorIgnored) {
  // The actor keeps only `limit` events (parse_page) and flags the page.
  ledger_drain d{0, 3, 30s};
  d.request(drain_trigger::start);
  auto p = page({1, 2, 3}, 1000);
  p.over_limit = true;
  auto r = run_page(d, p);
  EXPECT_TRUE(r.plan.anomaly);
  EXPECT_EQ(r.got, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(d.cursor(), 3) << "the page cursor covers events never seen";
  EXPECT_EQ(r.next.what, drain_next::kind::fetch) << "served as a full page";
  EXPECT_EQ(d.drain_errors(), 1u);
  r = run_page(d, page({4, 5}, 5));
  EXPECT_EQ(r.got, (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(r.next.what, drain_next::kind::idle);
  EXPECT_EQ(d.drain_errors(), 1u);
}

TEST(FeedHostileDrain, ParsePageKeepsOnlyTheLimit) {
  std::string body = R"({"events":[)";
  for (int i = 1; i <= 1000; ++i)
    body += (i > 1 ? "," : "") + std::string{R"({"id":)"} + std::to_string(i)
            + "}";
  body += R"(],"cursor":5000})";
  auto p = parse_page(boost::json::parse(body), feed_fields{}, 10);
  EXPECT_TRUE(p.summary.over_limit);
  ASSERT_EQ(p.events.size(), 10u);
  ASSERT_EQ(p.summary.ids.size(), 10u);
  EXPECT_EQ(p.summary.ids.back(), 10);
  auto q = parse_page(boost::json::parse(body), feed_fields{}, 1000);
  EXPECT_FALSE(q.summary.over_limit);
  EXPECT_EQ(q.events.size(), 1000u);
}

TEST(FeedHostileDrain, AbsurdIdsAndCursorsAreNeverUndefinedBehaviour) {
  // INT64_MIN as the first id of a reset page: `id - 1` must not overflow.
  ledger_drain d{0, 10, 30s};
  d.request(drain_trigger::start);
  auto r = run_page(d, page({i64min, 1}, i64min, true));
  EXPECT_TRUE(r.plan.reset);
  EXPECT_EQ(r.plan.reset_from, 0);
  EXPECT_EQ(r.plan.reset_to, std::nullopt);
  EXPECT_EQ(r.got, (std::vector<int64_t>{1}));
  EXPECT_EQ(d.cursor(), 1);
  // A negative page cursor never moves the cursor backward.
  d.request(drain_trigger::poll);
  r = run_page(d, page({}, -5));
  EXPECT_EQ(d.cursor(), 1);
  // INT64_MAX as an id is delivered once; the cursor saturates there.
  d.request(drain_trigger::poll);
  r = run_page(d, page({2, i64max}, i64max, true));
  EXPECT_EQ(r.got, (std::vector<int64_t>{2, i64max}));
  EXPECT_EQ(r.plan.reset_to, std::nullopt)
    << "the first id says nothing was lost (not the page cursor's range)";
  EXPECT_EQ(d.cursor(), i64max);
  d.request(drain_trigger::poll);
  r = run_page(d, page({i64max, i64max}, i64max));
  EXPECT_TRUE(r.got.empty()) << "never twice";
}

TEST(FeedHostileDrain, ResetOnEveryPageFiresOncePerPosition) {
  ledger_drain d{0, 2, 30s};
  d.request(drain_trigger::start);
  std::vector<int64_t> got;
  for (int i = 0; i < 3; ++i) {
    auto r = run_page(d, page({2 * i + 1, 2 * i + 2}, 2 * i + 2, true));
    EXPECT_TRUE(r.plan.reset) << i;
    got.insert(got.end(), r.got.begin(), r.got.end());
  }
  EXPECT_EQ(got, (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(d.resets(), 3u);
  // The same position again (a short page): not fired a second time.
  auto r = run_page(d, page({}, 6, true));
  EXPECT_TRUE(r.plan.reset);
  d.request(drain_trigger::poll);
  r = run_page(d, page({}, 6, true));
  EXPECT_FALSE(r.plan.reset);
  EXPECT_EQ(d.resets(), 4u);
}

TEST(FeedHostileDrain, UnreachableWakeTargetDecaysToTheCap) {
  // A wake cursor of 2^63-1 can never be reached: the re-drain backs off
  // to max(3 s, poll_interval) instead of pinning the loop at the floor.
  ledger_drain d{0, 10, 1s};
  d.on_wake(i64max);
  auto r = run_page(d, page({1}, 1));
  std::vector<feed_duration> delays;
  for (int i = 0; i < 10; ++i) {
    ASSERT_EQ(r.next.what, drain_next::kind::redrain);
    delays.push_back(r.next.delay);
    ASSERT_EQ(d.on_redrain_timer(r.next.redrain_id), drain_action::fetch);
    r = run_page(d, page({}, 1));
  }
  std::vector<feed_duration> want{50ms,   100ms,  200ms,  400ms,  800ms,
                                  1600ms, 3000ms, 3000ms, 3000ms, 3000ms};
  EXPECT_EQ(delays, want);
  // The same absurd target again restores nothing.
  d.on_wake(i64max);
  r = run_page(d, page({}, 1));
  EXPECT_EQ(r.next.delay, 3000ms);
  // A negative target is below the cursor: no re-drain at all.
  ledger_drain e{0, 10, 1s};
  e.on_wake(-1);
  EXPECT_EQ(run_page(e, page({}, 0)).next.what, drain_next::kind::idle);
}

TEST(FeedHostileDrain, NonIntegerCursorsAndIdsReadAsAbsent) {
  auto body = boost::json::parse(
    R"({"events":[{"id":1.5},{"id":"2"},{"id":18446744073709551615},
                  {"id":null},{"id":[3]},7,{"id":4}],
        "cursor":"9","reset":"true"})");
  auto p = parse_page(body, feed_fields{});
  ASSERT_EQ(p.summary.ids.size(), 7u);
  for (std::size_t i = 0; i < 6; ++i)
    EXPECT_EQ(p.summary.ids[i], std::nullopt) << i;
  EXPECT_EQ(p.summary.ids[6], 4);
  EXPECT_EQ(p.summary.cursor, std::nullopt);
  EXPECT_FALSE(p.summary.reset) << "only the JSON true is a reset";
  auto big = parse_page(boost::json::parse(R"({"cursor":9223372036854775808})"),
                        feed_fields{});
  EXPECT_EQ(big.summary.cursor, std::nullopt) << "beyond int64";
  auto neg = parse_page(
    boost::json::parse(R"({"cursor":-9223372036854775808})"), feed_fields{});
  EXPECT_EQ(neg.summary.cursor, i64min);
  auto wrong
    = parse_page(boost::json::parse(R"({"events":{"id":1}})"), feed_fields{});
  EXPECT_TRUE(wrong.summary.is_object);
  EXPECT_TRUE(wrong.summary.ids.empty()) << "events not an array: none";
}

TEST(FeedHostileDrain, ARepliedPageIsParsedOnceIntoItsArenaAndItsEventsMoved) {
  // The replay call asks for an arena; the client's outcome keeps it; the
  // watcher's take_page moves the events out of it, never copying: each
  // event still lives in the page's arena, and the body's array is left
  // holding what a move leaves.
  auto call = replay_request(feed_config{}, 0, 2);
  EXPECT_TRUE(call.json_arena);
  client_config cfg;
  http_response resp;
  resp.status = 200;
  resp.body = R"({"events":[{"id":1,"subject":"a-long-subject-name-1"},)"
              R"({"id":2,"subject":"a-long-subject-name-2"}],"cursor":2})";
  auto o = response_outcome(cfg, call, "rid", 1, resp);
  ASSERT_FALSE(o.error);
  auto arena = o.body.storage();
  EXPECT_NE(arena.get(), boost::json::storage_ptr{}.get())
    << "parsed into its own arena, not the default resource";
  EXPECT_TRUE(arena.is_deallocate_trivial()) << "a json_arena";
  auto p = take_page(o.body, feed_fields{}, 2);
  ASSERT_EQ(p.events.size(), 2u);
  EXPECT_EQ(p.events.storage().get(), arena.get());
  EXPECT_EQ(p.events[1].storage().get(), arena.get());
  EXPECT_EQ(p.events[1].at("subject"), "a-long-subject-name-2");
  // What a move leaves behind (Boost.JSON leaves an empty object).
  auto& left = o.body.at("events").at(0);
  EXPECT_TRUE(left.is_null() || (left.is_object() && left.as_object().empty()))
    << "moved, not copied";
  EXPECT_EQ(p.summary.ids, (std::vector<std::optional<int64_t>>{1, 2}));
  // move_into keeps the source's resource where an assignment copies.
  boost::json::value dst;
  protocol::move_into(dst, std::move(p.events[0]));
  EXPECT_EQ(dst.storage().get(), arena.get());
  EXPECT_EQ(dst.at("id"), 1);
  // parse_page (the copying reader) never puts its copies in the body's
  // resource, which may die first.
  auto copied = parse_page(o.body, feed_fields{}, 2);
  EXPECT_EQ(copied.events.storage().get(), boost::json::storage_ptr{}.get());
  // Without the flag: the default resource, as before.
  call.json_arena = false;
  resp.body = R"({"events":[],"cursor":0})";
  auto plain = response_outcome(cfg, call, "rid", 1, resp);
  EXPECT_EQ(plain.body.storage().get(), boost::json::storage_ptr{}.get());
}

TEST(FeedHostileDrain, CopiesOfOneArenaEventOnTwoThreadsAreSafe) {
  // A copy keeps the source's resource: two threads copying events of one
  // page allocate from one arena at once, which the arena serialises once
  // the client shared it. Every copy must come out whole.
  auto call = replay_request(feed_config{}, 0, 1);
  client_config cfg;
  http_response resp;
  resp.status = 200;
  resp.body = R"({"events":[{"id":1,"subject":"a-subject-long-enough-to-)"
              R"(allocate","tags":["x-long-tag-one","x-long-tag-two"]}]})";
  auto o = response_outcome(cfg, call, "rid", 1, resp);
  ASSERT_FALSE(o.error);
  const auto& ev = o.body.at("events").at(0);
  std::atomic<int> bad{0};
  auto copy_many = [&] {
    for (int i = 0; i < 2000; ++i) {
      boost::json::value v = ev; // allocates from the page's arena
      if (v != ev)
        ++bad;
    }
  };
  std::thread a{copy_many};
  std::thread b{copy_many};
  a.join();
  b.join();
  EXPECT_EQ(bad.load(), 0);
}

// -- frames and hellos
// --------------------------------------------------------------

TEST(FeedHostileFrames, DeepOrMalformedMessagesAreNotJsonNeverACrash) {
  std::string deep(100000, '[');
  EXPECT_EQ(parse_message(deep, "cursor").frame.type, frame_type::not_json);
  std::string deep_obj;
  for (int i = 0; i < 10000; ++i)
    deep_obj += R"({"a":)";
  EXPECT_EQ(parse_message(deep_obj, "cursor").frame.type, frame_type::not_json);
  EXPECT_EQ(parse_message("\xff\xfe", "cursor").frame.type,
            frame_type::not_json);
  EXPECT_EQ(parse_message("", "cursor").frame.type, frame_type::not_json);
  auto m = parse_message(R"({"type":"wake","cursor":1e300})", "cursor");
  EXPECT_EQ(m.frame.type, frame_type::wake);
  EXPECT_EQ(m.frame.wake_cursor, std::nullopt);
  auto h = parse_message(R"({"type":"hello","mode":7,"seq":"3","epoch":5})",
                         "cursor");
  ASSERT_TRUE(h.is_hello);
  EXPECT_EQ(h.hello.mode, "");
  EXPECT_EQ(h.hello.seq, std::nullopt);
  EXPECT_EQ(h.hello.epoch, std::nullopt);
}

TEST(FeedHostileFrames, FrameParsesAreBoundedInMemoryByTheCapRule) {
  // The bound of an HTTP body under the same cap (json_memory_bound).
  feed_config c;
  EXPECT_EQ(frame_json_limits(c).max_bytes, 128u * 1024u * 1024u);
  EXPECT_EQ(frame_json_limits(c).max_depth, default_json_max_depth);
  c.ws_max_frame_bytes = 64 * 1024;
  auto small = frame_json_limits(c);
  EXPECT_EQ(small.max_bytes, 1024u * 1024u);
  client_config cc;
  cc.max_response_bytes = 64 * 1024;
  EXPECT_EQ(cc.response_json_limits().max_bytes, small.max_bytes);

  // An event frame of 64 KiB whose `[0,0,...]` metadata takes about 24
  // bytes of parsed form per byte of text: over 1 MiB.
  std::string arr = "[0";
  while (arr.size() < 64 * 1024 - 64)
    arr += ",0";
  arr += "]";
  auto frame = R"({"type":"event","seq":2,"m":)" + arr + "}";
  auto m = parse_message(frame, "cursor", small);
  EXPECT_EQ(m.frame.type, frame_type::not_json);
  EXPECT_NE(m.error.find("memory bound (1048576 bytes)"), std::string::npos)
    << m.error;
  EXPECT_EQ(m.frame.seq, 2) << "the seq the text shows";
  // Under the default 8 MiB cap the same frame is an ordinary event.
  auto ok = parse_message(frame, "cursor");
  EXPECT_EQ(ok.frame.type, frame_type::event);
  EXPECT_EQ(ok.frame.seq, 2);
}

TEST(FeedHostileFrames, TheFrameDepthLimitIsTheConfiguredOne) {
  auto nest = [](int n) {
    return R"({"type":"event","seq":4,"m":)" + std::string(n - 1, '[')
           + std::string(n - 1, ']') + "}";
  };
  feed_config c;
  // 100 levels: over the default 64, within 128.
  EXPECT_EQ(parse_message(nest(100), "cursor", frame_json_limits(c)).frame.type,
            frame_type::not_json);
  c.json_max_depth = 128;
  auto m = parse_message(nest(100), "cursor", frame_json_limits(c));
  EXPECT_EQ(m.frame.type, frame_type::event) << m.error;
  EXPECT_EQ(m.frame.seq, 4);
  EXPECT_EQ(parse_message(nest(129), "cursor", frame_json_limits(c)).frame.type,
            frame_type::not_json);
  EXPECT_EQ(parse_message(nest(128), "cursor", frame_json_limits(c)).frame.type,
            frame_type::event);
}

TEST(FeedHostileFrames, AnUnreadableMessageSaysWhyAsALabel) {
  feed_config c;
  c.ws_max_frame_bytes = 1024; // memory bound 16 KiB
  auto l = frame_json_limits(c);
  std::string zeros = "[0";
  while (zeros.size() < 1000)
    zeros += ",0";
  zeros += "]";
  struct row {
    std::string text;
    frame_error_reason why;
  };
  for (auto& r : std::vector<row>{
         {"not json", frame_error_reason::unparseable},
         {"", frame_error_reason::unparseable},
         {std::string(100, '[') + std::string(100, ']'),
          frame_error_reason::too_deep},
         {zeros, frame_error_reason::memory_bound},
         {R"({"type":"event","n":1e400})", frame_error_reason::bad_number},
         {R"({"type":"event","n":123456789012345678901234567890})",
          frame_error_reason::bad_number},
         {"[1,2]", frame_error_reason::not_an_object},
       }) {
    auto m = parse_message(r.text, "cursor", l);
    EXPECT_EQ(m.frame.type, frame_type::not_json) << r.text.substr(0, 40);
    EXPECT_STREQ(to_string(m.unreadable), to_string(r.why))
      << r.text.substr(0, 40) << ": " << m.error;
  }
}

TEST(FeedHostileFrames, AFrameJustUnderTheDefaultCapCannotTakeGigabytes) {
  // 8.2 MB of `[0,0,...]` is under the 8 MiB frame cap; unbounded, its
  // parse took about 200 MB (a hub sending a few of them took a watcher to
  // 921 MB). The default bound stops it at 128 MiB.
  std::string arr;
  arr.reserve(8200 * 1000);
  arr += "[0";
  while (arr.size() < 8200 * 1000 - 2)
    arr += ",0";
  arr += "]";
  ASSERT_LT(arr.size(), feed_config{}.ws_max_frame_bytes);
  auto m = parse_message(arr, "cursor");
  EXPECT_EQ(m.frame.type, frame_type::not_json);
  EXPECT_NE(m.error.find("memory bound"), std::string::npos) << m.error;
}

TEST(FeedHostileFrames, CatchupResumeHelloWithSeqGoingBackwardIsAReset) {
  mode_negotiator n{false};
  n.on_open();
  hello_info h;
  h.mode = "catchup";
  h.resync = true;
  h.seq = 0;
  h.epoch = "e1";
  n.on_hello(h);
  frame_info f;
  f.type = frame_type::event;
  for (int64_t s = 1; s <= 10; ++s) {
    f.seq = s;
    ASSERT_EQ(n.on_frame(f).decision, frame_decision::deliver);
  }
  // Same epoch, "resume", but the head is 4: the hub's seq went backward.
  // Resuming would drop its next events 5..10 as duplicates (a silent gap).
  n.on_open();
  h.resync = false;
  h.seq = 4;
  auto r = n.on_hello(h);
  EXPECT_EQ(r.decision, hello_decision::catchup_reset);
  ASSERT_TRUE(r.reset);
  EXPECT_EQ(r.reset->cause, reset_cause::resync);
  EXPECT_EQ(r.reset->last_seq, 10);
  EXPECT_EQ(r.reset->new_seq, 4);
  EXPECT_EQ(n.last_seq(), 4);
  f.seq = 5;
  EXPECT_EQ(n.on_frame(f).decision, frame_decision::deliver);
  // A resume at exactly last_seq is a resume.
  n.on_open();
  h.seq = 5;
  EXPECT_EQ(n.on_hello(h).decision, hello_decision::catchup_resume);
}

TEST(FeedHostileFrames, EpochChangingOnEveryHelloIsAResetEachTime) {
  mode_negotiator n{false};
  int resets = 0;
  for (int i = 0; i < 5; ++i) {
    n.on_open();
    hello_info h;
    h.mode = "catchup";
    h.seq = 3;
    h.epoch = "e" + std::to_string(i);
    h.resync = false;
    auto r = n.on_hello(h);
    if (r.decision == hello_decision::catchup_reset)
      ++resets;
  }
  // The first hello has nothing to compare with (and the hub says resume
  // with last_seq unknown: nothing was received, nothing can be lost).
  EXPECT_EQ(resets, 4);
}

TEST(FeedHostileFrames, CatchupSeqZeroNegativeAndDuplicates) {
  mode_negotiator n{false};
  n.on_open();
  hello_info h;
  h.mode = "catchup";
  h.resync = true;
  h.epoch = "e";
  n.on_hello(h); // no seq in the hello: last_seq stays unknown
  EXPECT_EQ(n.last_seq(), std::nullopt);
  frame_info f;
  f.type = frame_type::event;
  std::vector<frame_decision> got;
  for (int64_t s :
       std::vector<int64_t>{0, -1, 0, 2, 2, 1, i64max, i64min, i64max}) {
    f.seq = s;
    got.push_back(n.on_frame(f).decision);
  }
  using fd = frame_decision;
  EXPECT_EQ(got, (std::vector<fd>{fd::deliver, fd::duplicate, fd::duplicate,
                                  fd::deliver, fd::duplicate, fd::duplicate,
                                  fd::deliver, fd::duplicate, fd::duplicate}));
  EXPECT_EQ(n.last_seq(), i64max);
}

TEST(FeedHostileDrain, EventsWithoutIdsThatCannotMoveTheCursorAreABadPage) {
  ledger_drain d{4, 10, 30s};
  d.request(drain_trigger::start);
  // No id, no cursor: delivering them would repeat them on every tick.
  auto r = run_page(d, page({std::nullopt, std::nullopt}, std::nullopt));
  EXPECT_EQ(r.plan.verdict, page_verdict::bad_page);
  EXPECT_TRUE(r.got.empty());
  EXPECT_EQ(d.drain_errors(), 1u);
  // Only old ids and a stale cursor: the same.
  d.request(drain_trigger::poll);
  r = run_page(d, page({3, std::nullopt}, 4));
  EXPECT_EQ(r.plan.verdict, page_verdict::bad_page);
  EXPECT_EQ(d.drain_errors(), 2u);
  // A page cursor past the start positions them (a cursor-only service).
  d.request(drain_trigger::poll);
  r = run_page(d, page({std::nullopt, std::nullopt}, 6));
  EXPECT_EQ(r.plan.verdict, page_verdict::deliver);
  EXPECT_EQ(r.got, (std::vector<int64_t>{-1, -1}));
  EXPECT_EQ(d.cursor(), 6);
  // So does an id after them.
  d.request(drain_trigger::poll);
  r = run_page(d, page({std::nullopt, 7}, std::nullopt));
  EXPECT_EQ(r.got, (std::vector<int64_t>{-1, 7}));
  EXPECT_EQ(d.cursor(), 7);
  EXPECT_EQ(d.drain_errors(), 2u);
}

TEST(FeedHostileFrames, CatchupSeqJumpOnAFeedOfEverySubjectIsAGapReset) {
  for (bool every : {true, false}) {
    mode_negotiator n{false, every};
    n.on_open();
    hello_info h;
    h.mode = "catchup";
    h.resync = true;
    h.seq = 0;
    h.epoch = "e";
    n.on_hello(h);
    frame_info f;
    f.type = frame_type::event;
    std::vector<frame_decision> got;
    std::optional<frame_reset_info> gap;
    for (int64_t s : {1, 2, 5, 6, 6}) {
      f.seq = s;
      auto r = n.on_frame(f);
      got.push_back(r.decision);
      if (r.reset)
        gap = r.reset;
    }
    using fd = frame_decision;
    if (every) {
      // The lost range (2, 4] is reported, then 5 is delivered.
      EXPECT_EQ(
        got, (std::vector<fd>{fd::deliver, fd::deliver, fd::reset_then_deliver,
                              fd::deliver, fd::duplicate}));
      ASSERT_TRUE(gap);
      EXPECT_EQ(gap->cause, reset_cause::gap);
      EXPECT_EQ(gap->last_seq, 2);
      EXPECT_EQ(gap->new_seq, 4);
      EXPECT_EQ(gap->old_epoch, "e");
    } else {
      // Prefixes filter the seq space: jumps are expected.
      EXPECT_EQ(got, (std::vector<fd>{fd::deliver, fd::deliver, fd::deliver,
                                      fd::deliver, fd::duplicate}));
      EXPECT_FALSE(gap);
    }
    EXPECT_EQ(n.last_seq(), 6);
  }
  // Extremes never overflow.
  mode_negotiator n{false, true};
  n.on_open();
  hello_info h;
  h.mode = "catchup";
  h.resync = true;
  h.seq = i64min;
  n.on_hello(h);
  frame_info f;
  f.type = frame_type::event;
  f.seq = i64max;
  EXPECT_EQ(n.on_frame(f).decision, frame_decision::reset_then_deliver);
  f.seq = i64max;
  EXPECT_EQ(n.on_frame(f).decision, frame_decision::duplicate);
  EXPECT_STREQ(to_string(reset_cause::gap), "gap");
}

TEST(FeedHostileConfig, ClientIdLongerThanTheHubRemembersIsAConfigError) {
  feed_config c;
  c.ws_path = "/ws/catchup";
  c.client_id = std::string(256, 'a');
  EXPECT_NO_THROW(c.validate());
  c.client_id = std::string(257, 'a');
  try {
    c.validate();
    ADD_FAILURE() << "no config_error";
  } catch (const config_error& e) {
    EXPECT_EQ(e.field(), "client_id");
  }
}
