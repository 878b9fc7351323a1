#pragma once

// The reference hub's ledger kept in a file, so that a restarted hub serves
// the same ledger: the same ids and the same ledger epoch (the same
// incarnation: its watchers go on without a reset). One JSON object per
// line, appended and flushed after each stored event:
//
//   {"ledger_epoch":"8c1f..."}                        first line
//   {"dedupe_key":"k","event":{"id":1,"seq":1,...}}   one per event
//
// A torn last line (the process was killed inside a write) is dropped and
// cut from the file on load; any other bad line is a config_error. The
// retention floor and the catch-up ring are not kept.

#include "hub/ledger_log.hpp"

#include <fstream>
#include <string>

namespace outbound {

class ledger_file {
public:
  /// Opens `path` (created when missing) and appends its events to `log`
  /// (which must be empty) in order. A new file starts with `fresh_epoch`.
  /// Throws config_error naming `ledger_file`: unreadable or unwritable
  /// file, a bad line other than the last, ids out of order.
  ledger_file(const std::string& path, ledger_log& log,
              const std::string& fresh_epoch);

  /// The ledger's epoch: the file's, or `fresh_epoch` for a new file.
  const std::string& epoch() const {
    return epoch_;
  }

  /// Events loaded from the file.
  std::size_t loaded() const {
    return loaded_;
  }

  /// Appends one stored event and flushes it to the OS (call under the
  /// hub's lock, in ledger order).
  void append(const ledger_event& ev);

private:
  std::ofstream out_;
  std::string epoch_;
  std::size_t loaded_ = 0;
};

} // namespace outbound
