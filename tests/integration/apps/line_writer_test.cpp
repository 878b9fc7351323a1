// apps/line_writer.hpp: texts come out whole and in the order they were
// posted (per producer thread), `written` runs only once its text is in the
// stream, post() never waits for a stream that blocks, and close() gives up
// on such a stream within its bound, answering every text it dropped. A
// thread and real waits (bounded): an integration test.

#include "apps/line_writer.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <sstream>
#include <streambuf>
#include <string>
#include <thread>
#include <vector>

using namespace outbound::apps;
using namespace std::chrono_literals;

namespace {

/// A stream buffer that keeps what is written, and blocks every write
/// while `blocked` (a pipe nobody reads).
class gate_buf : public std::streambuf {
public:
  void block() {
    std::lock_guard<std::mutex> lock{mu_};
    blocked_ = true;
  }

  void release() {
    std::lock_guard<std::mutex> lock{mu_};
    blocked_ = false;
    cv_.notify_all();
  }

  std::string text() const {
    std::lock_guard<std::mutex> lock{mu_};
    return text_;
  }

  /// Writes that are waiting for release().
  int waiting() const {
    std::lock_guard<std::mutex> lock{mu_};
    return waiting_;
  }

protected:
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    std::unique_lock<std::mutex> lock{mu_};
    ++waiting_;
    cv_.wait(lock, [&] { return !blocked_; });
    --waiting_;
    text_.append(s, static_cast<std::size_t>(n));
    return n;
  }

  int_type overflow(int_type c) override {
    if (c != traits_type::eof()) {
      char ch = traits_type::to_char_type(c);
      xsputn(&ch, 1);
    }
    return traits_type::not_eof(c);
  }

private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool blocked_ = false;
  int waiting_ = 0;
  std::string text_;
};

template <class Pred>
bool eventually(Pred p, std::chrono::milliseconds bound = 5s) {
  auto until = std::chrono::steady_clock::now() + bound;
  while (!p()) {
    if (std::chrono::steady_clock::now() >= until)
      return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

} // namespace

TEST(LineWriter, LinesComeOutWholeAndInOrderPerProducer) {
  std::ostringstream out;
  line_writer w{out};
  constexpr int producers = 4, lines = 2000;
  std::vector<std::thread> ts;
  for (int p = 0; p < producers; ++p)
    ts.emplace_back([&w, p] {
      for (int i = 0; i < lines; ++i)
        w.post(std::to_string(p) + " " + std::to_string(i) + "\n");
    });
  for (auto& t : ts)
    t.join();
  ASSERT_TRUE(w.drain(10s));
  EXPECT_EQ(w.queued(), 0u);
  std::istringstream in{out.str()};
  std::map<int, int> next;
  int p = 0, i = 0, count = 0;
  while (in >> p >> i) {
    EXPECT_EQ(i, next[p]) << "producer " << p;
    next[p] = i + 1;
    ++count;
  }
  EXPECT_EQ(count, producers * lines);
}

TEST(LineWriter, WrittenRunsOnceTheTextIsInTheStream) {
  gate_buf buf;
  std::ostream out{&buf};
  line_writer w{out};
  std::atomic<int> seen{0};
  std::atomic<bool> in_stream{true};
  for (int i = 0; i < 100; ++i) {
    auto line = "line " + std::to_string(i) + "\n";
    w.post(line, [&, line] {
      if (buf.text().find(line) == std::string::npos)
        in_stream = false;
      ++seen;
    });
  }
  ASSERT_TRUE(eventually([&] { return seen == 100; }));
  EXPECT_TRUE(in_stream);
}

TEST(LineWriter, AStreamThatBlocksNeverHoldsUpAProducer) {
  gate_buf buf;
  std::ostream out{&buf};
  line_writer w{out};
  buf.block();
  w.post("first\n");
  ASSERT_TRUE(eventually([&] { return buf.waiting() == 1; }));
  // The writer is stuck in a write: posts return at once and queue up.
  std::atomic<int> written{0};
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 1000; ++i)
    w.post("more\n", [&] { ++written; });
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  EXPECT_GE(w.queued(), 5000u);
  EXPECT_FALSE(w.drain(50ms));
  EXPECT_EQ(written, 0) << "nothing is answered before it is written";
  buf.release();
  ASSERT_TRUE(w.drain(5s));
  EXPECT_EQ(written, 1000);
  EXPECT_EQ(buf.text().rfind("first\nmore\n", 0), 0u);
}

TEST(LineWriter, CloseGivesUpOnAStuckStreamWithinItsBound) {
  // Static: the thread close() leaves behind writes to it until released.
  static gate_buf buf;
  static std::ostream out{&buf};
  auto w = std::make_unique<line_writer>(out);
  buf.block();
  w->post("stuck\n");
  ASSERT_TRUE(eventually([&] { return buf.waiting() == 1; }));
  std::atomic<int> answered{0};
  w->post("dropped\n", [&] { ++answered; });
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(w->close(100ms));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  EXPECT_EQ(answered, 1) << "a dropped text is answered";
  w->post("after close\n", [&] { ++answered; });
  EXPECT_EQ(answered, 2) << "after close: dropped and answered at once";
  w.reset(); // a closed writer's destructor does not wait again
  buf.release();
  ASSERT_TRUE(eventually([&] { return buf.text() == "stuck\n"; }));
}

TEST(LineWriter, AFileDescriptorGetsEveryTextInOrder) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  std::string got;
  std::thread reader([&] {
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fds[0], buf, sizeof(buf))) > 0)
      got.append(buf, static_cast<std::size_t>(n));
  });
  std::string want;
  {
    line_writer w{fds[1]};
    for (int i = 0; i < 5000; ++i) {
      auto line = std::to_string(i) + " " + std::string(40, 'x') + "\n";
      want += line;
      w.post(line);
    }
    EXPECT_TRUE(w.close(10s));
  }
  ::close(fds[1]);
  reader.join();
  ::close(fds[0]);
  EXPECT_EQ(got, want);
}
