#pragma once

// One writer thread per output stream of a long-running command (`outbound
// group-member`'s delivery lines on stdout, its status and failure lines on
// stderr). A write to a pipe blocks while the reader does not read; done on
// a CAF worker, it holds up every actor that worker would run next: at
// 3 x 2000 feeds a member lost its lease because its renewals waited behind
// a blocked stdout write. Producers hand text to post(), which never waits;
// the writer thread writes what is queued, in the order it was posted, and
// flushes after each run of texts (one write(2) per run on a file
// descriptor), so a line reaches the OS as soon as the thread gets to it:
// within microseconds while the reader keeps up. A producer that must not
// run ahead of the stream (a delivery that may be acknowledged only once
// written, so that a crash loses no acknowledged line) passes a `written`
// function, which the thread runs after the text was flushed, and holds
// back further texts while queued() is over its budget (back-pressure: the
// producer waits, the line is never dropped).
//
//   post(text, written) ──► queue (FIFO) ──► thread: out << texts; flush
//                                                     ──► written() each

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>
#include <utility>

#include <unistd.h>

namespace outbound::apps {

/// Writes texts to one stream on a thread of its own, in order. Thread-safe.
class line_writer {
public:
  /// Writes to `out` (not owned; it must outlive the thread, which close()
  /// may leave behind blocked in a write: give a stream that lives until
  /// the process ends, or one that does not block).
  explicit line_writer(std::ostream& out) : s_(std::make_shared<state>()) {
    s_->out = &out;
    thread_ = std::thread([s = s_] { run(*s); });
  }

  /// Writes to the file descriptor `fd` (not owned) with write(2), past
  /// any stdio buffer: use it for the process's stdout and stderr
  /// (STDOUT_FILENO, STDERR_FILENO; write nothing to std::cout or stdout
  /// meanwhile). A thread blocked in write(2) holds no stdio lock, so the
  /// process still exits (its final flush of stdout has nothing to wait
  /// for) when close() gave up on a pipe nobody reads. A failed write
  /// (EPIPE, EBADF) drops the rest of that run.
  explicit line_writer(int fd) : s_(std::make_shared<state>()) {
    s_->fd = fd;
    thread_ = std::thread([s = s_] { run(*s); });
  }

  /// close(5 s).
  ~line_writer() {
    close(std::chrono::seconds(5));
  }

  line_writer(const line_writer&) = delete;
  line_writer& operator=(const line_writer&) = delete;

  /// Queues `text` (whole lines, each ending in '\n'); never waits.
  /// `written`, if set, runs on the writer thread once the text was written
  /// and flushed (whether the stream failed or not), or at close() for a
  /// text the thread never got to (it must not block, and must not call
  /// back into this writer). After close() a text is dropped and `written`
  /// runs at once.
  void post(std::string text, std::function<void()> written = {}) {
    {
      std::lock_guard<std::mutex> lock{s_->mu};
      if (!s_->closed) {
        s_->queued += text.size();
        s_->queue.push_back(chunk{std::move(text), std::move(written)});
        s_->wake.notify_one();
        return;
      }
    }
    if (written)
      written();
  }

  /// Bytes posted and not yet written.
  std::size_t queued() const {
    std::lock_guard<std::mutex> lock{s_->mu};
    return s_->queued + s_->writing;
  }

  /// Waits until everything posted so far was written, at most `bound`.
  /// False: still writing (the stream blocks).
  bool drain(std::chrono::milliseconds bound) {
    std::unique_lock<std::mutex> lock{s_->mu};
    return s_->idle.wait_for(
      lock, bound, [&] { return s_->queue.empty() && s_->writing == 0; });
  }

  /// Writes what is queued and ends the thread, waiting at most `bound`
  /// for it. Past the bound (a stream nobody reads) the thread is left to
  /// finish its current write on its own and the texts it did not get to
  /// are dropped (their `written` functions run here). Returns whether
  /// everything was written. Idempotent.
  bool close(std::chrono::milliseconds bound) {
    if (!thread_.joinable())
      return true;
    bool all = drain(bound);
    std::deque<chunk> dropped;
    {
      std::lock_guard<std::mutex> lock{s_->mu};
      s_->closed = true;
      dropped.swap(s_->queue);
      s_->queued = 0;
      s_->wake.notify_one();
    }
    for (auto& c : dropped)
      if (c.written)
        c.written();
    if (all)
      thread_.join();
    else
      thread_.detach(); // it holds the state; the stream outlives it
    return all && dropped.empty();
  }

private:
  struct chunk {
    std::string text;
    std::function<void()> written;
  };

  struct state {
    mutable std::mutex mu;
    std::condition_variable wake, idle;
    std::deque<chunk> queue;
    /// Bytes in `queue`, and in the run being written.
    std::size_t queued = 0, writing = 0;
    bool closed = false;
    std::ostream* out = nullptr;
    int fd = -1;
  };

  /// Writes all of `text` to `fd`: false on an error.
  static bool write_all(int fd, const std::string& text) {
    const char* p = text.data();
    std::size_t left = text.size();
    while (left > 0) {
      auto n = ::write(fd, p, left);
      if (n < 0) {
        if (errno == EINTR)
          continue;
        return false;
      }
      p += n;
      left -= static_cast<std::size_t>(n);
    }
    return true;
  }

  static void run(state& s) {
    std::unique_lock<std::mutex> lock{s.mu};
    for (;;) {
      s.wake.wait(lock, [&] { return s.closed || !s.queue.empty(); });
      if (s.queue.empty())
        return; // closed
      std::deque<chunk> run;
      run.swap(s.queue);
      s.writing = s.queued;
      s.queued = 0;
      lock.unlock();
      // One flush per run: several texts become one write(2).
      if (s.out) {
        for (const auto& c : run)
          s.out->write(c.text.data(),
                       static_cast<std::streamsize>(c.text.size()));
        s.out->flush();
      } else if (run.size() == 1) {
        write_all(s.fd, run.front().text);
      } else {
        std::string all;
        all.reserve(s.writing);
        for (const auto& c : run)
          all += c.text;
        write_all(s.fd, all);
      }
      for (auto& c : run)
        if (c.written)
          c.written();
      lock.lock();
      s.writing = 0;
      if (s.queue.empty())
        s.idle.notify_all();
    }
  }

  std::shared_ptr<state> s_;
  std::thread thread_;
};

} // namespace outbound::apps
