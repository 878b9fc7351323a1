#include "hub/ledger_file.hpp"

#include "config/config_error.hpp"
#include "protocol/json_parse.hpp"

#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include <filesystem>
#include <string_view>
#include <vector>

namespace outbound {

namespace json = boost::json;

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw config_error("ledger_file", path + ": " + what);
}

/// The complete lines of a ledger file (without their newlines), the byte
/// offset after each, and whether a last line was torn (no newline yet:
/// killed inside a write). A file that does not even start as a ledger
/// file is someone else's: that fails (it is never cut).
struct file_lines {
  std::vector<std::string> lines;
  std::vector<std::uintmax_t> ends;
  bool torn_tail = false;
};

file_lines read_lines(const std::string& path) {
  file_lines f;
  std::ifstream in{path, std::ios::binary};
  if (!in)
    return f;
  std::string all{std::istreambuf_iterator<char>{in}, {}};
  std::size_t pos = 0;
  while (pos < all.size()) {
    auto nl = all.find('\n', pos);
    if (nl == std::string::npos) {
      std::string_view hdr = "{\"ledger_epoch\":";
      std::string_view tail{all.data() + pos, all.size() - pos};
      bool header_like = tail.size() < hdr.size()
                           ? hdr.substr(0, tail.size()) == tail
                           : tail.substr(0, hdr.size()) == hdr;
      if (f.lines.empty() && !header_like)
        fail(path, "is not a ledger file (no {\"ledger_epoch\":...} "
                   "first line)");
      f.torn_tail = true;
      break;
    }
    f.lines.push_back(all.substr(pos, nl - pos));
    f.ends.push_back(nl + 1);
    pos = nl + 1;
  }
  return f;
}

/// Appends the stored event of line `line` (1-based; `o` is the line's
/// object) to `log`, checked: its fields, the publish limits in force now,
/// and its id (the next one). Fails naming the line.
void load_event(const std::string& path, std::size_t line,
                const json::object& o, ledger_log& log,
                const publish_limits& limits) {
  auto at = "line " + std::to_string(line);
  auto* ev = o.if_contains("event");
  auto* dk = o.if_contains("dedupe_key");
  const json::object* e = ev ? ev->if_object() : nullptr;
  auto str = [&](const char* k) -> const json::string* {
    auto* x = e ? e->if_contains(k) : nullptr;
    return x ? x->if_string() : nullptr;
  };
  auto* id = e ? e->if_contains("id") : nullptr;
  auto* seq = e ? e->if_contains("seq") : nullptr;
  auto* ts = e ? e->if_contains("ts") : nullptr;
  auto* md = e ? e->if_contains("metadata") : nullptr;
  if (!e || !str("subject") || !str("kind") || !id || !id->is_int64() || !seq
      || !seq->is_int64() || !ts || !ts->is_number() || !md || !md->is_object()
      || (dk && !dk->is_string()))
    fail(path, at + " is not a stored event");
  // The limits in force now hold for stored events too: the same check
  // as a publish of the event.
  json::object as_publish;
  as_publish["subject"] = *str("subject");
  as_publish["kind"] = *str("kind");
  as_publish["metadata"] = *md;
  auto check = parse_publish(json::serialize(as_publish), limits);
  if (!check.input)
    fail(path, at
                 + " holds an event the hub "
                   "would refuse now ("
                 + check.error
                 + "); start it with "
                   "the limits it was written under");
  // Every stored line is an event, whatever the dedupe index says now:
  // its LRU order at run time (refreshed by duplicate publishes, which
  // are not written) need not be replayed by appends, so a key the index
  // still holds is stored without it.
  auto key = dk ? std::string{dk->get_string()} : std::string{};
  if (!key.empty() && log.find_duplicate(key))
    key.clear();
  auto expected = log.head() + 1;
  auto r = log.append(std::string{*str("subject")}, std::string{*str("kind")},
                      json::serialize(*md), key, seq->get_int64(),
                      ts->to_number<double>());
  if (r.duplicate || r.event->id != id->get_int64())
    fail(path, at + " has id " + std::to_string(id->get_int64()) + ", expected "
                 + std::to_string(expected));
}

} // namespace

ledger_file::ledger_file(const std::string& path, ledger_log& log,
                         const std::string& fresh_epoch,
                         const publish_limits& limits) {
  auto file = read_lines(path);
  const auto& lines = file.lines;
  const auto& ends = file.ends;
  std::uintmax_t good_end = 0;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    auto parsed = parse_json(lines[i]);
    auto& v = parsed.value;
    // A line that ended with its newline was written whole: it must read.
    if (!parsed)
      fail(path, "line " + std::to_string(i + 1) + " is not a JSON object ("
                   + parsed.detail + ")");
    if (!v.is_object())
      fail(path, "line " + std::to_string(i + 1) + " is not a JSON object");
    auto& o = v.get_object();
    if (i == 0) {
      auto* e = o.if_contains("ledger_epoch");
      if (!e || !e->is_string() || e->get_string().empty())
        fail(path, "line 1 must be {\"ledger_epoch\":\"...\"}");
      epoch_ = std::string{e->get_string()};
      good_end = ends[i];
      continue;
    }
    load_event(path, i + 1, o, log, limits);
    ++loaded_;
    good_end = ends[i];
  }
  std::error_code fec;
  if (epoch_.empty()) {
    // A new (or empty, or torn-at-the-first-line) file.
    epoch_ = fresh_epoch;
    std::filesystem::resize_file(path, 0, fec);
    out_.open(path, std::ios::binary | std::ios::trunc);
    if (!out_)
      fail(path, "cannot be written");
    out_ << "{\"ledger_epoch\":" << json::serialize(json::string{epoch_})
         << "}\n";
    out_.flush();
    path_ = path;
    return;
  }
  if (file.torn_tail)
    std::filesystem::resize_file(path, good_end, fec);
  if (fec)
    fail(path, "cannot cut its torn last line: " + fec.message());
  out_.open(path, std::ios::binary | std::ios::app);
  if (!out_)
    fail(path, "cannot be written");
  path_ = path;
}

bool ledger_file::append(const ledger_event& ev) {
  if (broken_)
    return false;
  out_ << "{\"dedupe_key\":" << json::serialize(json::string{ev.dedupe_key})
       << ",\"event\":" << ev.json << "}\n";
  out_.flush();
  if (out_)
    return true;
  // A write failed (disk full, I/O error): the file no longer holds this
  // ledger. Empty it, so that a restart is a new incarnation (a new epoch:
  // watchers rewind) instead of the same epoch with fewer ids, whose next
  // events would reuse ids the watchers already have.
  broken_ = true;
  out_.close();
  std::error_code ec;
  std::filesystem::resize_file(path_, 0, ec);
  return false;
}

} // namespace outbound
