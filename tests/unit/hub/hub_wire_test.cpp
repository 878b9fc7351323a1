// The hub's request validation and frames (as hyperdjango's hypermanager
// app.py): exact bytes and exact 400 details.

#include "hub/hub_wire.hpp"

#include <gtest/gtest.h>

#include <climits>
#include <string>

using namespace outbound;

TEST(HubWire, PublishAcceptsTheFullShape) {
  auto p = parse_publish(R"({"subject":"a/b/c","kind":"created",)"
                         R"("metadata":{"x":[1,2]},"dedupe_key":"d1"})");
  ASSERT_TRUE(p.input) << p.error;
  EXPECT_EQ(p.input->subject, "a/b/c");
  EXPECT_EQ(p.input->kind, "created");
  EXPECT_EQ(p.input->metadata_json, "{\"x\":[1,2]}");
  EXPECT_EQ(p.input->dedupe_key, "d1");
}

TEST(HubWire, PublishDefaultsKindMetadataAndDedupeKey) {
  auto p
    = parse_publish(R"({"subject":"s","metadata":null,"dedupe_key":null})");
  ASSERT_TRUE(p.input) << p.error;
  EXPECT_EQ(p.input->kind, "");
  EXPECT_EQ(p.input->metadata_json, "{}");
  EXPECT_EQ(p.input->dedupe_key, "");
}

TEST(HubWire, PublishRejectsBadBodiesWithADetail) {
  EXPECT_EQ(parse_publish("nope").error, "body is not JSON");
  EXPECT_EQ(parse_publish("[1]").error, "body must be a JSON object");
  EXPECT_EQ(parse_publish("{}").error, "subject must be a non-empty string");
  EXPECT_EQ(parse_publish(R"({"subject":""})").error,
            "subject must be a non-empty string");
  EXPECT_EQ(parse_publish(R"({"subject":5})").error,
            "subject must be a non-empty string");
  EXPECT_EQ(parse_publish(R"({"subject":"s","kind":1})").error,
            "kind must be a string");
  EXPECT_EQ(parse_publish(R"({"subject":"s","metadata":[1]})").error,
            "metadata must be an object");
  EXPECT_EQ(parse_publish(R"({"subject":"s","metadata":"x"})").error,
            "metadata must be an object");
  EXPECT_EQ(parse_publish(R"({"subject":"s","dedupe_key":3})").error,
            "dedupe_key must be a string");
}

TEST(HubWire, MetadataOfExactly4096BytesPassesAnd4097Fails) {
  // {"k":"xxx..."} serializes to n + 8 bytes.
  auto body = [](std::size_t n) {
    return R"({"subject":"s","metadata":{"k":")" + std::string(n, 'x') + "\"}}";
  };
  EXPECT_TRUE(parse_publish(body(4088)).input);
  EXPECT_EQ(parse_publish(body(4089)).error, "metadata exceeds 4096 bytes");
  EXPECT_EQ(parse_publish(body(10), 17).error, "metadata exceeds 17 bytes");
}

TEST(HubWire, TargetSplitsAndDecodesTheQuery) {
  auto t = parse_hub_target("/v1/events?after=3&prefix=a%2Fb&prefix=c+d&x");
  EXPECT_EQ(t.path, "/v1/events");
  ASSERT_EQ(t.query.size(), 4u);
  EXPECT_EQ(t.query[0], (std::pair<std::string, std::string>{"after", "3"}));
  EXPECT_EQ(t.query[1].second, "a/b");
  EXPECT_EQ(t.query[2].second, "c d");
  EXPECT_EQ(t.query[3], (std::pair<std::string, std::string>{"x", ""}));
  EXPECT_EQ(parse_hub_target("/v1/cursor").path, "/v1/cursor");
  EXPECT_EQ(parse_hub_target("/p?bad=%4").query[0].second, "%4");
}

TEST(HubWire, ReplayQueryValidatesAfterLikeTheReferenceHub) {
  auto q = [](std::string after) {
    return parse_replay_query({{"after", std::move(after)}});
  };
  EXPECT_EQ(q("0").query->after, 0);
  EXPECT_EQ(q("2147483647").query->after, 2147483647);
  EXPECT_EQ(q("2147483648").error, "after exceeds 2147483647");
  EXPECT_EQ(q("0000000000000000001").error, "after has more than 18 digits");
  EXPECT_EQ(q("000000000000000001").query->after, 1);
  EXPECT_EQ(q("-1").error, "after must be a non-negative integer");
  EXPECT_EQ(q("abc").error, "after must be a non-negative integer");
  EXPECT_EQ(q("").error, "after must be a non-negative integer");
  auto none = parse_replay_query({});
  ASSERT_TRUE(none.query);
  EXPECT_EQ(none.query->after, 0);
  EXPECT_EQ(none.query->limit, 0);
  EXPECT_TRUE(none.query->prefixes.empty());
}

TEST(HubWire, ReplayQueryLimitAndPrefixes) {
  auto q = parse_replay_query(
    {{"limit", "3"}, {"prefix", "a/"}, {"prefix", "b/"}, {"other", "x"}});
  ASSERT_TRUE(q.query);
  EXPECT_EQ(q.query->limit, 3);
  EXPECT_EQ(q.query->prefixes, (std::vector<std::string>{"a/", "b/"}));
  EXPECT_EQ(parse_replay_query({{"limit", "-5"}}).query->limit, 0);
  EXPECT_EQ(parse_replay_query({{"limit", "99999999999999"}}).query->limit,
            INT_MAX);
  EXPECT_EQ(parse_replay_query({{"limit", "x"}}).error,
            "limit must be an integer");
}

TEST(HubWire, SubscribeParsesEveryFieldAndToleratesNulls) {
  auto s = parse_subscribe(
    R"({"type":"subscribe","prefixes":["a/",3,"b/"],"client_id":"c1",)"
    R"("last_seq":12,"cursor":40,"epoch":"0123456789abcdef"})");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->prefixes, (std::vector<std::string>{"a/", "b/"}));
  EXPECT_EQ(s->client_id, "c1");
  EXPECT_EQ(s->last_seq, 12);
  EXPECT_EQ(s->cursor, 40);
  EXPECT_EQ(s->epoch, std::optional<std::string>{"0123456789abcdef"});
  auto nulls = parse_subscribe(
    R"({"type":"subscribe","prefixes":[],"client_id":null,"last_seq":null,)"
    R"("cursor":null,"epoch":null})");
  ASSERT_TRUE(nulls);
  EXPECT_EQ(nulls->client_id, "");
  EXPECT_FALSE(nulls->last_seq);
  EXPECT_FALSE(nulls->epoch);
  EXPECT_FALSE(parse_subscribe(R"({"type":"ping"})"));
  EXPECT_FALSE(parse_subscribe("subscribe"));
}

TEST(HubWire, JsonPingIsRecognised) {
  EXPECT_TRUE(is_json_ping(R"({"type":"ping"})"));
  EXPECT_FALSE(is_json_ping(R"({"type":"pong"})"));
  EXPECT_FALSE(is_json_ping("ping"));
}

TEST(HubWire, FramesAreExactlyTheProtocolsBytes) {
  EXPECT_EQ(hello_frame(hub_tier::catchup, 7, 3, true, "00000000000000ff"),
            R"({"type":"hello","mode":"catchup","seq":7,"cursor":3,)"
            R"("resync":true,"epoch":"00000000000000ff"})");
  EXPECT_EQ(hello_frame(hub_tier::ledger, 0, 5, false, ""),
            R"({"type":"hello","mode":"ledger","seq":0,"cursor":5,)"
            R"("resync":false,"epoch":null})");
  EXPECT_EQ(wake_frame(42), R"({"type":"wake","cursor":42})");
  EXPECT_EQ(non_json_wake(42), "wake 42");
  EXPECT_EQ(pong_frame(), R"({"type":"pong"})");
  EXPECT_EQ(event_frame("a/b", "k", 4, "{\"x\":1}", 9, 0.5),
            R"({"type":"event","subject":"a/b","kind":"k","seq":4,)"
            R"("metadata":{"x":1},"id":9,"ts":5E-1})");
  EXPECT_EQ(error_body("bad \"x\""), R"({"detail":"bad \"x\""})");
}

TEST(HubWire, PagesRenderAsObjectsOrAsABareArray) {
  ledger_page p;
  auto e1 = std::make_shared<ledger_event>();
  e1->json = R"({"id":1})";
  auto e2 = std::make_shared<ledger_event>();
  e2->json = R"({"id":2})";
  p.events = {e1, e2};
  p.cursor = 2;
  p.reset = true;
  EXPECT_EQ(render_page(p),
            R"({"events":[{"id":1},{"id":2}],"cursor":2,"reset":true})");
  EXPECT_EQ(render_page(p, true), R"([{"id":1},{"id":2}])");
  EXPECT_EQ(render_page(ledger_page{}),
            R"({"events":[],"cursor":0,"reset":false})");
}

TEST(HubWire, PadFrameReachesExactlyTheRequestedSize) {
  auto w = wake_frame(1);
  for (std::size_t size : {w.size() + 9, w.size() + 10, std::size_t{81920}}) {
    auto padded = pad_frame(w, size);
    EXPECT_EQ(padded.size(), size);
    EXPECT_EQ(padded.substr(0, w.size() - 1), w.substr(0, w.size() - 1));
    EXPECT_EQ(padded.back(), '}');
  }
  EXPECT_EQ(pad_frame(w, w.size() + 8), w) << "too small to fit a pad field";
  EXPECT_EQ(pad_frame(w, 3), w);
  EXPECT_EQ(pad_frame("{}", 10), R"({"pad":""})");
  EXPECT_EQ(pad_frame("wake 1", 100), "wake 1");
}

TEST(HubWire, TierNames) {
  EXPECT_EQ(parse_hub_tier("catchup"), hub_tier::catchup);
  EXPECT_EQ(parse_hub_tier("ledger"), hub_tier::ledger);
  EXPECT_EQ(parse_hub_tier("ephemeral"), hub_tier::ephemeral);
  EXPECT_FALSE(parse_hub_tier("durable"));
  EXPECT_STREQ(to_string(hub_tier::ephemeral), "ephemeral");
}

// -- publish limits: what replay can serve to a default client ----------------

TEST(HubWire, PublishRejectsMetadataDeeperThanTheLimitWithAReason) {
  std::string md32, md33;
  for (int i = 0; i < 31; ++i)
    md32 += R"({"n":)";
  md32 += "{}" + std::string(31, '}');
  md33 = R"({"n":)" + md32 + "}";
  auto ok = parse_publish(R"({"subject":"s","metadata":)" + md32 + "}");
  EXPECT_TRUE(ok.input) << ok.error;
  auto deep = parse_publish(R"({"subject":"s","metadata":)" + md33 + "}");
  EXPECT_FALSE(deep.input);
  EXPECT_EQ(deep.error, "metadata nests deeper than 32 levels");
  // Far deeper than any parser default: still the same 400 detail.
  std::string md80 = std::string(80, '[') + std::string(80, ']');
  auto deeper
    = parse_publish(R"({"subject":"s","metadata":{"a":)" + md80 + "}}");
  EXPECT_EQ(deeper.error, "metadata nests deeper than 32 levels");
}

TEST(HubWire, PublishRejectsALongSubject) {
  publish_limits l;
  l.subject_max_bytes = 8;
  EXPECT_TRUE(parse_publish(R"({"subject":"12345678"})", l).input);
  EXPECT_EQ(parse_publish(R"({"subject":"123456789"})", l).error,
            "subject exceeds 8 bytes");
  // The default bound: 1024.
  EXPECT_EQ(
    parse_publish("{\"subject\":\"" + std::string(1025, 's') + "\"}").error,
    "subject exceeds 1024 bytes");
}

TEST(HubWire, PublishRejectsAnEventOverTheEventSize) {
  // Within the subject and metadata limits, over the event size: the kind
  // has no limit of its own.
  auto p = parse_publish("{\"subject\":\"s\",\"kind\":\""
                         + std::string(6000, 'k') + "\"}");
  EXPECT_EQ(p.error, "event exceeds 5120 bytes");
}

TEST(HubWire, PublishRejectsOverflowingNumbersNamingTheField) {
  auto p = parse_publish(R"({"subject":"s","metadata":{"x":[0,1e400]}})");
  EXPECT_FALSE(p.input);
  EXPECT_EQ(p.error, "metadata.x[1]: number out of range (IEEE 754 binary64)");
  auto q = parse_publish("{\"subject\":\"s\",\"metadata\":{\"big\":"
                         + std::string(5000, '9') + "}}");
  EXPECT_EQ(q.error, "metadata.big: number out of range (IEEE 754 binary64)");
}

TEST(HubWire, PublishRejectsAnInexactIntegerNamingTheField) {
  // Stored as a double it would replay as 1.2345678901234568E29.
  auto p = parse_publish(
    R"({"subject":"s","metadata":{"id":123456789012345678901234567890}})");
  EXPECT_FALSE(p.input);
  EXPECT_EQ(p.error, "metadata.id: integer not exact in IEEE 754 binary64 "
                     "(send it as a string)");
  // An integer that binary64 holds exactly is kept (as that double).
  auto q = parse_publish(
    R"({"subject":"s","metadata":{"n":100000000000000000000}})");
  ASSERT_TRUE(q.input) << q.error;
  EXPECT_EQ(q.input->metadata_json, R"({"n":1E20})");
}

TEST(HubWire, PublishKeepsDoublesExactly) {
  auto p
    = parse_publish(R"({"subject":"s","metadata":{"t":1.7961554897535605E9}})");
  ASSERT_TRUE(p.input) << p.error;
  EXPECT_EQ(p.input->metadata_json, R"({"t":1.7961554897535605E9})");
}
