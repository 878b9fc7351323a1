#pragma once

// The reference hub's ledger kept in a file, so that a restarted hub serves
// the same ledger: the same ids and the same ledger epoch (the same
// incarnation: its watchers go on without a reset). One JSON object per
// line, appended and flushed after each stored event:
//
//   {"ledger_epoch":"8c1f..."}                        first line
//   {"dedupe_key":"k","event":{"id":1,"seq":1,...}}   one per event
//
// A torn last line (no newline: the process was killed inside a write) is
// dropped and cut from the file on load; a whole line that does not read,
// or a file that does not start as a ledger file, is a config_error (the
// file is never cut then). The retention floor and the catch-up ring are
// not kept; writes are flushed to the OS, not fsynced (a power loss can
// lose the last events: that ledger comes back shorter under the same
// epoch).

#include "hub/hub_wire.hpp"
#include "hub/ledger_log.hpp"

#include <fstream>
#include <string>

namespace outbound {

class ledger_file {
public:
  /// Opens `path` (created when missing) and appends its events to `log`
  /// (which must be empty) in order. A new file starts with `fresh_epoch`.
  /// Throws config_error naming `ledger_file`: unreadable or unwritable
  /// file, a bad line other than the last, ids out of order, or a stored
  /// event that the hub's publish would refuse under `limits` (subject,
  /// metadata depth or size, event size): a file written under larger
  /// limits would otherwise serve replay pages a default client cannot
  /// read; the message names the line and the limit to raise.
  ledger_file(const std::string& path, ledger_log& log,
              const std::string& fresh_epoch,
              const publish_limits& limits = {});

  /// The ledger's epoch: the file's, or `fresh_epoch` for a new file.
  const std::string& epoch() const {
    return epoch_;
  }

  /// Events loaded from the file.
  std::size_t loaded() const {
    return loaded_;
  }

  /// Appends one stored event and flushes it to the OS (call under the
  /// hub's lock, in ledger order). False once a write has failed: the file
  /// is then emptied and written no more, so a restart starts a new
  /// incarnation rather than the same epoch with fewer ids.
  bool append(const ledger_event& ev);

private:
  std::ofstream out_;
  std::string path_;
  bool broken_ = false;
  std::string epoch_;
  std::size_t loaded_ = 0;
};

} // namespace outbound
