#pragma once

// Fakes for the feed watcher's actor tests (tests/unit/actors/feed/):
// - a ledger served through the transport port (behind a real
//   service_client): `GET /v1/events?after=N&limit=M` answered from an
//   in-memory log with a retention floor, a visibility ceiling and a
//   non-object-page knob;
// - a ws_connector whose sessions record what the watcher sends and let
//   the test push ws_events (optionally answering pings);
// - a subscriber that records deliveries with their virtual times and can
//   hold its acknowledgements.

#include "actors/feed/feed_messages.hpp"
#include "actors/messages.hpp"
#include "actors/transport.hpp"
#include "protocol/ws_session.hpp"

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>
#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/response_promise.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace outbound::testing {

using vtime = caf::actor_clock::time_point;

/// The stats of `watcher`, asked from a helper actor; `run` runs the test
/// coordinator's ready jobs (the answer arrives within them). A watcher
/// that does not answer fails the test and gives default stats.
template <class Watcher, class Run>
feed_stats ask_stats(caf::actor_system& sys, const Watcher& watcher,
                     Run&& run) {
  auto out = std::make_shared<std::optional<feed_stats>>();
  auto target = caf::actor_cast<caf::actor>(watcher);
  sys.spawn([out, target](caf::event_based_actor* self) {
    self->request(target, caf::infinite, stats_atom_v)
      .then([out](feed_stats s) { *out = s; });
  });
  run();
  EXPECT_TRUE(out->has_value());
  return out->value_or(feed_stats{});
}

// -- ledger behind the transport port
// ------------------------------------------------

struct fake_ledger {
  struct request_rec {
    int64_t after = -1;
    int limit = 0;
    std::string target;
    vtime at;
  };
  /// Ids in the log (appended in order).
  std::vector<int64_t> ids;
  /// Replay shows ids <= visible only; -1: everything.
  int64_t visible = -1;
  /// Retention: ids <= floor are gone.
  int64_t floor = 0;
  /// Answer a bare JSON array instead of an object.
  bool non_object = false;
  /// Answer this many next requests with 503.
  int fail_next = 0;
  /// Answer the requests of these numbers (0: the first) with 503.
  std::set<std::size_t> fail_requests;
  /// The ledger's incarnation id sent in every page ("epoch"); empty sends
  /// none.
  std::string epoch;
  /// A short page's cursor is the ledger's head (as the reference hub
  /// answers), not the `after` it was asked.
  bool cursor_is_head = false;
  std::vector<request_rec> requests;
  /// Events served as this exact text instead of the generated object
  /// (too deep to parse, over a cap, malformed): a page holding one
  /// carries it verbatim.
  std::map<int64_t, std::string> raw_events;

  void append_to(int64_t last) {
    int64_t next = ids.empty() ? 1 : ids.back() + 1;
    for (; next <= last; ++next)
      ids.push_back(next);
  }

  std::vector<int64_t> afters() const {
    std::vector<int64_t> r;
    for (auto& q : requests)
      r.push_back(q.after);
    return r;
  }

  std::string page(int64_t after, int limit) const {
    boost::json::array evs;
    int64_t last = after;
    for (auto id : ids) {
      if (id <= after || id <= floor)
        continue;
      if (visible >= 0 && id > visible)
        break;
      if (static_cast<int>(evs.size()) >= limit)
        break;
      evs.push_back(
        boost::json::object{{"id", id},
                            {"subject", "orders/" + std::to_string(id)},
                            {"kind", "k"}});
      last = id;
    }
    if (non_object)
      return boost::json::serialize(evs);
    bool reset = after < floor;
    if (reset && evs.empty())
      last = floor;
    if (cursor_is_head && static_cast<int>(evs.size()) < limit) {
      last = ids.empty() ? 0 : ids.back();
      if (visible >= 0)
        last = std::min(last, visible);
    }
    boost::json::object o{
      {"events", std::move(evs)}, {"cursor", last}, {"reset", reset}};
    if (!epoch.empty())
      o["epoch"] = epoch;
    auto text = boost::json::serialize(o);
    for (auto& [id, raw] : raw_events) {
      auto plain = boost::json::serialize(
        boost::json::object{{"id", id},
                            {"subject", "orders/" + std::to_string(id)},
                            {"kind", "k"}});
      auto at = text.find(plain);
      if (at != std::string::npos)
        text.replace(at, plain.size(), raw);
    }
    return text;
  }
};

inline std::string query_value(const std::string& target,
                               const std::string& key) {
  auto q = target.find('?');
  if (q == std::string::npos)
    return {};
  auto rest = target.substr(q + 1);
  size_t pos = 0;
  while (pos <= rest.size()) {
    auto amp = rest.find('&', pos);
    auto kv = rest.substr(pos, amp == std::string::npos ? std::string::npos
                                                        : amp - pos);
    auto eq = kv.find('=');
    if (eq != std::string::npos && kv.substr(0, eq) == key)
      return kv.substr(eq + 1);
    if (amp == std::string::npos)
      break;
    pos = amp + 1;
  }
  return {};
}

inline transport_actor spawn_ledger_transport(caf::actor_system& sys,
                                              std::shared_ptr<fake_ledger> lg) {
  auto a = sys.spawn([lg](caf::event_based_actor* self) -> caf::behavior {
    return {
      [self, lg](const http_request& req) -> exchange_result {
        exchange_result res;
        res.exchange_id = req.exchange_id;
        res.request_sent = true;
        fake_ledger::request_rec rec;
        rec.target = req.target;
        rec.at = self->clock().now();
        auto after = query_value(req.target, "after");
        auto limit = query_value(req.target, "limit");
        rec.after = after.empty() ? -1 : std::stoll(after);
        rec.limit = limit.empty() ? 0 : std::stoi(limit);
        lg->requests.push_back(rec);
        if (lg->fail_requests.count(lg->requests.size() - 1) > 0
            || lg->fail_next > 0) {
          if (lg->fail_next > 0)
            --lg->fail_next;
          res.response.status = 503;
          return res;
        }
        res.response.status = 200;
        res.response.headers = {{"Content-Type", "application/json"}};
        res.response.body = lg->page(rec.after, rec.limit);
        if (res.response.body.size() > req.max_body_bytes) {
          // As the real session does: a 2xx body over the cap is not read.
          res.response.body.clear();
          res.error = transport_error_kind::too_large;
          res.detail = "response body exceeds the cap of "
                       + std::to_string(req.max_body_bytes) + " bytes";
        }
        return res;
      },
      [](cancel_atom, uint64_t) {},
    };
  });
  return caf::actor_cast<transport_actor>(a);
}

// -- WebSocket
// ------------------------------------------------------------------------

struct fake_ws_record {
  uint64_t id = 0;
  ws_options opts;
  ws_session::handler handler;
  std::vector<std::string> sent;
  int pings = 0;
  bool closed = false;
  /// Push an `activity` event for every ping (a live peer's pong).
  bool answers_pings = false;
  vtime dialled_at;
  vtime closed_at;
  std::function<vtime()> clock;

  void push(ws_event ev) {
    ev.session_id = id;
    handler(std::move(ev));
  }
  void open() {
    ws_event ev;
    ev.what = ws_event::kind::opened;
    push(ev);
  }
  void message(std::string payload, bool fragmented = false) {
    ws_event ev;
    ev.what = ws_event::kind::message;
    ev.payload = std::move(payload);
    ev.fragmented = fragmented;
    push(ev);
  }
  /// A text message read off the wire as a real session handles it: the
  /// owner's `drop_text` filter (ws_options) runs first, as on the io
  /// thread; a dropped message is only counted, in the next event's
  /// `dropped`. Returns true when the message reached the owner.
  bool wire_message(std::string payload) {
    if (opts.drop_text && opts.drop_text(payload)) {
      ++dropped;
      return false;
    }
    ws_event ev;
    ev.what = ws_event::kind::message;
    ev.payload = std::move(payload);
    ev.dropped = dropped;
    dropped = 0;
    push(ev);
    return true;
  }
  /// Messages wire_message dropped and not reported yet.
  uint64_t dropped = 0;

  /// A message over max_frame_bytes as the session reports it: its first
  /// bytes and its full size.
  void too_large(std::string prefix, uint64_t size) {
    ws_event ev;
    ev.what = ws_event::kind::too_large;
    ev.payload = std::move(prefix);
    ev.size = size;
    push(ev);
  }
  void activity() {
    ws_event ev;
    ev.what = ws_event::kind::activity;
    ev.dropped = dropped; // as a real session reports what it dropped
    dropped = 0;
    push(ev);
  }
  void peer_close() {
    ws_event ev;
    ev.what = ws_event::kind::closed;
    ev.reason = ws_close_reason::peer_closed;
    push(ev);
  }
  /// The session refused a message (over max_discard_bytes, or over the
  /// cap past the discard deadline) as a real one reports it: a
  /// `too_large` event with `closing` set holding what arrived of it
  /// (maybe nothing), then `closed` with reason too_large.
  void refuse(std::string prefix, uint64_t announced, std::string detail) {
    ws_event ev;
    ev.what = ws_event::kind::too_large;
    ev.closing = true;
    ev.payload = std::move(prefix);
    ev.size = announced;
    push(ev);
    refuse_too_large(announced, std::move(detail));
  }
  /// The session failed itself (close 1009) over a message announcing
  /// `size` bytes over the ceiling, or not ending within the deadline.
  void refuse_too_large(uint64_t size, std::string detail) {
    ws_event ev;
    ev.what = ws_event::kind::closed;
    ev.reason = ws_close_reason::too_large;
    ev.size = size;
    ev.detail = std::move(detail);
    push(ev);
  }
};

class fake_ws_session : public ws_session {
public:
  explicit fake_ws_session(std::shared_ptr<fake_ws_record> r)
    : r_(std::move(r)) {
  }
  void send_text(std::string text) override {
    r_->sent.push_back(std::move(text));
  }
  void ping() override {
    ++r_->pings;
    if (r_->answers_pings && !r_->closed)
      r_->activity();
  }
  void close() override {
    if (r_->closed)
      return;
    r_->closed = true;
    r_->closed_at = r_->clock();
    ws_event ev;
    ev.what = ws_event::kind::closed;
    ev.reason = ws_close_reason::local;
    r_->push(ev);
  }

private:
  std::shared_ptr<fake_ws_record> r_;
};

struct fake_ws_log {
  std::vector<std::shared_ptr<fake_ws_record>> sessions;
  /// New sessions answer pings.
  bool answers_pings = false;

  fake_ws_record& last() {
    return *sessions.back();
  }
};

class fake_ws_connector : public ws_connector {
public:
  fake_ws_connector(std::shared_ptr<fake_ws_log> log,
                    std::function<vtime()> clock)
    : log_(std::move(log)), clock_(std::move(clock)) {
  }

  std::shared_ptr<ws_session> connect(uint64_t session_id,
                                      const ws_options& opts,
                                      ws_session::handler on_event) override {
    auto r = std::make_shared<fake_ws_record>();
    r->id = session_id;
    r->opts = opts;
    r->handler = std::move(on_event);
    r->answers_pings = log_->answers_pings;
    r->clock = clock_;
    r->dialled_at = clock_();
    log_->sessions.push_back(r);
    return std::make_shared<fake_ws_session>(r);
  }

private:
  std::shared_ptr<fake_ws_log> log_;
  std::function<vtime()> clock_;
};

// -- subscriber
// -----------------------------------------------------------------------

struct sub_log {
  struct entry {
    bool is_reset = false;
    feed_event ev;
    feed_reset rs;
    vtime at;
    /// Number of the delivery message that carried it (1, 2, ...): events
    /// of one batch share it.
    std::size_t delivery = 0;
  };
  std::vector<entry> got;
  /// Delivery messages received so far.
  std::size_t deliveries = 0;
  /// Sizes of the batches received, in order (batch subscriber only).
  std::vector<std::size_t> batch_sizes;
  /// Hold acknowledgements until released.
  bool manual = false;
  std::deque<caf::response_promise> held;
  /// Batch subscriber: answer each batch with this many failed events.
  uint64_t fail_per_batch = 0;
  /// Batch subscriber: answer each batch with an error instead.
  bool error_batches = false;
  /// Batch subscriber: what each held promise answers (true: a batch).
  std::deque<bool> held_batch;

  std::vector<int64_t> ids() const {
    std::vector<int64_t> r;
    for (auto& e : got)
      if (!e.is_reset && e.ev.id)
        r.push_back(*e.ev.id);
    return r;
  }
  std::vector<int64_t> seqs() const {
    std::vector<int64_t> r;
    for (auto& e : got)
      if (!e.is_reset && e.ev.seq)
        r.push_back(*e.ev.seq);
    return r;
  }
  std::vector<const feed_reset*> resets() const {
    std::vector<const feed_reset*> r;
    for (auto& e : got)
      if (e.is_reset)
        r.push_back(&e.rs);
    return r;
  }
};

inline feed_subscriber_actor
spawn_recording_subscriber(caf::actor_system& sys,
                           std::shared_ptr<sub_log> log) {
  auto a = sys.spawn([log](caf::event_based_actor* self) -> caf::behavior {
    auto record = [self, log](sub_log::entry e) -> caf::result<ack_atom> {
      e.at = self->clock().now();
      e.delivery = ++log->deliveries;
      log->got.push_back(std::move(e));
      if (!log->manual)
        return ack_atom_v;
      log->held.push_back(self->make_response_promise());
      return caf::delegated<ack_atom>{};
    };
    return {
      [record](const feed_event& ev) {
        sub_log::entry e;
        e.ev = ev;
        return record(std::move(e));
      },
      [record](const feed_reset& rs) {
        sub_log::entry e;
        e.is_reset = true;
        e.rs = rs;
        return record(std::move(e));
      },
      [log](caf::ok_atom) {
        if (!log->held.empty()) {
          log->held.front().deliver(ack_atom_v);
          log->held.pop_front();
        }
      },
    };
  });
  return caf::actor_cast<feed_subscriber_actor>(a);
}

/// A subscriber that takes batches (feed_batch_subscriber_actor) and
/// records each event as an entry of `log`; holds its acknowledgements
/// while `log->manual` (released one by one by an `ok_atom`), answers
/// `fail_per_batch` failures or, with `error_batches`, an error.
inline feed_batch_subscriber_actor
spawn_recording_batch_subscriber(caf::actor_system& sys,
                                 std::shared_ptr<sub_log> log) {
  auto a = sys.spawn([log](caf::event_based_actor* self) -> caf::behavior {
    return {
      [self, log](const feed_event_batch& b) -> caf::result<feed_batch_ack> {
        auto n = ++log->deliveries;
        log->batch_sizes.push_back(b.events.size());
        for (auto& ev : b.events) {
          sub_log::entry e;
          e.ev = ev;
          e.at = self->clock().now();
          e.delivery = n;
          log->got.push_back(std::move(e));
        }
        if (log->error_batches)
          return caf::make_error(caf::sec::runtime_error, "batch refused");
        if (!log->manual)
          return feed_batch_ack{log->fail_per_batch};
        log->held.push_back(self->make_response_promise());
        log->held_batch.push_back(true);
        return caf::delegated<feed_batch_ack>{};
      },
      [self, log](const feed_reset& rs) -> caf::result<ack_atom> {
        sub_log::entry e;
        e.is_reset = true;
        e.rs = rs;
        e.at = self->clock().now();
        e.delivery = ++log->deliveries;
        log->got.push_back(std::move(e));
        if (!log->manual)
          return ack_atom_v;
        log->held.push_back(self->make_response_promise());
        log->held_batch.push_back(false);
        return caf::delegated<ack_atom>{};
      },
      [log](caf::ok_atom) {
        if (log->held.empty())
          return;
        if (log->held_batch.front())
          log->held.front().deliver(feed_batch_ack{log->fail_per_batch});
        else
          log->held.front().deliver(ack_atom_v);
        log->held.pop_front();
        log->held_batch.pop_front();
      },
    };
  });
  return caf::actor_cast<feed_batch_subscriber_actor>(a);
}

} // namespace outbound::testing
