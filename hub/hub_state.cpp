#include "hub/hub_state.hpp"

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <algorithm>
#include <functional>
#include <limits>
#include <utility>

namespace outbound {

namespace json = boost::json;

namespace {

ledger_config make_ledger_config(const hub_state_config& cfg,
                                 const hub_faults& f) {
  ledger_config lc;
  lc.retention = cfg.retention;
  lc.replay_limit = cfg.replay_limit;
  lc.dedupe_capacity = cfg.dedupe_capacity;
  lc.visibility_lag_polls = f.visibility_lag_polls;
  return lc;
}

std::optional<int64_t> non_negative_int(const json::value& v) {
  if (v.is_int64() && v.get_int64() >= 0)
    return v.get_int64();
  if (v.is_uint64()
      && v.get_uint64()
           <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return static_cast<int64_t>(v.get_uint64());
  return std::nullopt;
}

} // namespace

hub_state::hub_state(hub_state_config cfg, hub_faults faults,
                     std::string epoch)
  : cfg_(cfg),
    faults_(std::move(faults)),
    ledger_(make_ledger_config(cfg, faults_)),
    ring_(cfg.ring_size, std::move(epoch), cfg.max_clients) {
}

bool hub_state::script_due() const {
  if (faults_.wake_script.empty())
    return false;
  auto target = *std::max_element(faults_.wake_script.begin(),
                                   faults_.wake_script.end());
  return ledger_.head() >= target;
}

publish_outcome hub_state::publish(const publish_input& in, double ts) {
  publish_outcome out;
  if (auto dup = ledger_.find_duplicate(in.dedupe_key)) {
    ++counters_.duplicates;
    out.event = std::move(dup);
    out.duplicate = true;
    out.seq = out.event->seq;
    return out;
  }
  auto seq = ring_.head() + 1;
  auto appended = ledger_.append(in.subject, in.kind, in.metadata_json,
                                 in.dedupe_key, seq, ts);
  out.event = appended.event;
  out.frame = std::make_shared<const std::string>(event_frame(
    in.subject, in.kind, seq, in.metadata_json, out.event->id, ts));
  out.seq = ring_.publish(in.subject, out.frame);
  ++counters_.publishes;
  if (!faults_.wake_script.empty()) {
    out.wake_held = true;
    ++counters_.wakes_held;
    out.fired_script = take_due_script();
  }
  return out;
}

std::vector<int64_t> hub_state::take_due_script() {
  if (!script_due())
    return {};
  ++counters_.scripts_fired;
  return std::exchange(faults_.wake_script, {});
}

replay_outcome hub_state::replay(const replay_query& q) {
  replay_outcome out;
  out.page = ledger_.page(q.after, q.limit, q.prefixes);
  out.bare_array = take_count(faults_.non_object_pages);
  ++counters_.replays;
  if (out.page.reset)
    ++counters_.replay_resets;
  if (out.bare_array)
    ++counters_.non_object_pages;
  return out;
}

bool hub_state::take_lost_publish_answer() {
  if (!take_count(faults_.lose_publish_answers))
    return false;
  ++counters_.lost_publish_answers;
  return true;
}

hub_state::idempotent_lookup
hub_state::find_idempotent(const std::string& key, const std::string& body) {
  idempotent_lookup out;
  auto i = idempotent_.find(key);
  if (i == idempotent_.end())
    return out;
  if (i->second.body_size != body.size()
      || i->second.body_hash != std::hash<std::string>{}(body)) {
    ++counters_.idempotency_conflicts;
    out.conflict = true;
    return out;
  }
  ++counters_.idempotent_replays;
  out.answer = &i->second.answer;
  return out;
}

void hub_state::remember_idempotent(const std::string& key,
                                    const std::string& body,
                                    std::string answer) {
  if (cfg_.dedupe_capacity == 0)
    return;
  auto [i, fresh] = idempotent_.try_emplace(key);
  i->second = idempotent_entry{body.size(), std::hash<std::string>{}(body),
                               std::move(answer)};
  if (!fresh)
    return;
  idempotent_order_.push_back(key);
  while (idempotent_order_.size() > cfg_.dedupe_capacity) {
    idempotent_.erase(idempotent_order_.front());
    idempotent_order_.pop_front();
  }
}

subscribe_outcome hub_state::subscribe(hub_tier tier,
                                       const subscribe_request& req,
                                       bool no_hello) {
  subscribe_outcome out;
  ++counters_.subscribes;
  out.boundary = ring_.head();
  switch (tier) {
    case hub_tier::ledger:
      out.decision = resume_decision::resume;
      out.hello = hello_frame(tier, ring_.head(), ledger_.visible(), false,
                              ledger_epoch_);
      break;
    case hub_tier::catchup: {
      auto r = ring_.resume(req.client_id, req.last_seq, req.epoch,
                            req.prefixes);
      out.decision = r.decision;
      out.boundary = r.head;
      if (r.resync())
        ++counters_.resyncs;
      else
        ++counters_.resumes;
      out.hello = hello_frame(tier, r.head, ledger_.visible(), r.resync(),
                              ring_.epoch());
      for (auto& e : r.replay)
        out.replay.push_back(std::move(e.frame));
      break;
    }
    case hub_tier::ephemeral:
      out.decision = resume_decision::resync_no_last_seq;
      out.hello = hello_frame(tier, ring_.head(), ledger_.visible(), true,
                              ring_.epoch());
      break;
  }
  if (no_hello)
    out.hello.reset();
  return out;
}

bool hub_state::drop_wake(std::mt19937_64& rng) {
  bool drop = faults_.drop_wakes;
  if (!drop && faults_.drop_wake_probability > 0.0) {
    std::uniform_real_distribution<double> u{0.0, 1.0};
    drop = u(rng) < faults_.drop_wake_probability;
  }
  if (drop)
    ++counters_.wakes_dropped;
  return drop;
}

std::optional<std::string>
hub_state::apply_admin(const json::object& patch,
                       const std::vector<std::string>& extra_keys) {
  std::optional<int64_t> retention;
  std::optional<int64_t> floor;
  if (auto* v = patch.if_contains("retention")) {
    retention = non_negative_int(*v);
    if (!retention)
      return std::string{"'retention' must be an integer >= 0"};
  }
  if (auto* v = patch.if_contains("floor")) {
    floor = non_negative_int(*v);
    if (!floor)
      return std::string{"'floor' must be an integer >= 0"};
  }
  auto skip = extra_keys;
  skip.push_back("retention");
  skip.push_back("floor");
  auto before = faults_.visibility_lag_polls;
  if (auto err = apply_fault_patch(faults_, patch, skip))
    return err;
  if (faults_.visibility_lag_polls != before)
    ledger_.set_visibility_lag(faults_.visibility_lag_polls);
  if (retention) {
    cfg_.retention = static_cast<uint64_t>(*retention);
    ledger_.set_retention(cfg_.retention);
  }
  if (floor)
    ledger_.trim_through(*floor);
  return std::nullopt;
}

void hub_state::restart(std::string epoch) {
  ring_.restart(std::move(epoch));
  ++counters_.restarts;
}

connection_plan hub_state::take_connection_plan() {
  return outbound::take_connection_plan(faults_);
}

json::object hub_state::state_json() const {
  json::object o;
  o["epoch"] = ring_.epoch();
  o["seq"] = ring_.head();
  json::object ring;
  ring["capacity"] = ring_.capacity();
  ring["size"] = ring_.size();
  ring["floor"] = ring_.floor();
  ring["head"] = ring_.head();
  ring["clients"] = ring_.clients();
  o["ring"] = std::move(ring);
  json::object ledger;
  ledger["epoch"] = ledger_epoch_;
  ledger["head"] = ledger_.head();
  ledger["visible"] = ledger_.visible();
  ledger["floor"] = ledger_.floor();
  ledger["size"] = ledger_.size();
  ledger["polls"] = ledger_.polls();
  ledger["retention"] = cfg_.retention;
  ledger["replay_limit"] = ledger_.config().replay_limit;
  o["ledger"] = std::move(ledger);
  o["faults"] = to_json(faults_);
  json::object c;
  c["publishes"] = counters_.publishes;
  c["duplicates"] = counters_.duplicates;
  c["replays"] = counters_.replays;
  c["replay_resets"] = counters_.replay_resets;
  c["non_object_pages"] = counters_.non_object_pages;
  c["lost_publish_answers"] = counters_.lost_publish_answers;
  c["idempotent_replays"] = counters_.idempotent_replays;
  c["idempotency_conflicts"] = counters_.idempotency_conflicts;
  c["wakes_dropped"] = counters_.wakes_dropped;
  c["wakes_held"] = counters_.wakes_held;
  c["scripts_fired"] = counters_.scripts_fired;
  c["subscribes"] = counters_.subscribes;
  c["resumes"] = counters_.resumes;
  c["resyncs"] = counters_.resyncs;
  c["restarts"] = counters_.restarts;
  o["counters"] = std::move(c);
  return o;
}

} // namespace outbound
