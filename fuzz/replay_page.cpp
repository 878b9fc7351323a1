// Fuzz target: the replay page reader (actors/feed/feed_frames.hpp
// parse_page) with custom field names, as a feed configured for another
// hub's schema would use. Input: one flag byte (max_events), four field
// names each ended by NUL (events, cursor, reset, event id), then the body.

#include "actors/feed/feed_frames.hpp"
#include "fuzz/fuzz_input.hpp"
#include "protocol/json_parse.hpp"


#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace outbound;
  fuzz::input in{data, size};
  std::size_t max_events = in.byte();
  feed_fields fields;
  auto name = [&](std::string& field) {
    auto v = in.until('\0');
    if (!v.empty())
      field = std::string{v};
  };
  name(fields.events);
  name(fields.cursor);
  name(fields.reset);
  name(fields.event_id);
  auto body = in.rest();
  // As the call actor parses a page (protocol/json_parse.hpp).
  auto parsed = outbound::parse_json(body);
  if (!parsed)
    return 0;
  auto& v = parsed.value;
  auto page = parse_page(v, fields, max_events);
  if (page.events.size() > max_events)
    std::abort(); // a hostile page must not queue more than asked for
  (void)parse_page(v, feed_fields{});
  return 0;
}
