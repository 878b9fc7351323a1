#include "tests/support/fault_proxy.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include <array>
#include <atomic>
#include <future>
#include <list>
#include <stdexcept>
#include <thread>
#include <vector>

namespace outbound::testing {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;

namespace {

enum class link_mode { pass, cut, blackhole, delay };

struct link_state;

// One accepted connection: the client side, the upstream side and one pump
// per direction. Lives in shared_ptrs held by its pending operations.
struct connection : std::enable_shared_from_this<connection> {
  struct pump {
    tcp::socket* from = nullptr;
    tcp::socket* to = nullptr;
    std::array<char, 16384> buf{};
    std::size_t n = 0;
    bool parked = false;
  };

  connection(asio::io_context& io, link_state& l)
    : client(io), upstream(io), timer_up(io), timer_down(io), link(&l) {
    up.from = &client;
    up.to = &upstream;
    down.from = &upstream;
    down.to = &client;
  }

  void start();
  void read(pump& p, asio::steady_timer& t);
  void deliver(pump& p, asio::steady_timer& t);
  void write(pump& p, asio::steady_timer& t);
  void unpark();
  void close(bool reset);

  tcp::socket client;
  tcp::socket upstream;
  asio::steady_timer timer_up;
  asio::steady_timer timer_down;
  pump up;
  pump down;
  link_state* link;
  bool closed = false;
};

struct link_state {
  link_state(asio::io_context& io) : acceptor(io) {
  }

  tcp::acceptor acceptor;
  tcp::endpoint upstream;
  uint16_t port = 0;
  link_mode mode = link_mode::pass;
  std::chrono::milliseconds delay{0};
  std::list<std::weak_ptr<connection>> conns;
  std::atomic<std::size_t> accepted{0};
  std::atomic<std::size_t> bytes{0};
};

void connection::start() {
  auto self = shared_from_this();
  upstream.async_connect(link->upstream, [self](const error_code& ec) {
    if (ec || self->closed) {
      self->close(true);
      return;
    }
    self->upstream.set_option(tcp::no_delay(true));
    self->read(self->up, self->timer_up);
    self->read(self->down, self->timer_down);
  });
}

void connection::read(pump& p, asio::steady_timer& t) {
  auto self = shared_from_this();
  p.from->async_read_some(asio::buffer(p.buf),
                          [self, &p, &t](const error_code& ec, std::size_t n) {
                            if (ec || self->closed) {
                              self->close(false);
                              return;
                            }
                            p.n = n;
                            self->deliver(p, t);
                          });
}

void connection::deliver(pump& p, asio::steady_timer& t) {
  if (closed)
    return;
  switch (link->mode) {
    case link_mode::blackhole:
    case link_mode::cut: p.parked = true; return;
    case link_mode::delay: {
      auto self = shared_from_this();
      t.expires_after(link->delay);
      t.async_wait([self, &p, &t](const error_code& ec) {
        if (ec || self->closed)
          return;
        // The mode may have turned to blackhole meanwhile.
        if (self->link->mode == link_mode::blackhole) {
          p.parked = true;
          return;
        }
        self->write(p, t);
      });
      return;
    }
    case link_mode::pass: write(p, t); return;
  }
}

void connection::write(pump& p, asio::steady_timer& t) {
  auto self = shared_from_this();
  asio::async_write(*p.to, asio::buffer(p.buf.data(), p.n),
                    [self, &p, &t](const error_code& ec, std::size_t n) {
                      if (ec || self->closed) {
                        self->close(false);
                        return;
                      }
                      self->link->bytes += n;
                      self->read(p, t);
                    });
}

void connection::unpark() {
  if (closed)
    return;
  if (up.parked) {
    up.parked = false;
    deliver(up, timer_up);
  }
  if (down.parked) {
    down.parked = false;
    deliver(down, timer_down);
  }
}

void connection::close(bool reset) {
  if (closed)
    return;
  closed = true;
  error_code ignored;
  for (auto* s : {&client, &upstream}) {
    if (!s->is_open())
      continue;
    if (reset)
      s->set_option(asio::socket_base::linger(true, 0), ignored);
    s->close(ignored);
  }
  timer_up.cancel();
  timer_down.cancel();
}

} // namespace

struct fault_proxy::impl {
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> guard{
    io.get_executor()};
  std::vector<std::unique_ptr<link_state>> links;
  std::thread thread;

  // Runs `f` on the io thread and waits for it; rethrows its exception.
  template <class F>
  auto run(F f) -> decltype(f()) {
    std::packaged_task<decltype(f())()> task{std::move(f)};
    auto fut = task.get_future();
    asio::post(io, [&task] { task(); });
    return fut.get();
  }

  void listen(link_state& l, uint16_t port) {
    tcp::endpoint ep{asio::ip::make_address("127.0.0.1"), port};
    l.acceptor.open(ep.protocol());
    l.acceptor.set_option(tcp::acceptor::reuse_address(true));
    error_code ec;
    l.acceptor.bind(ep, ec);
    if (ec) {
      error_code ignored;
      l.acceptor.close(ignored);
      throw std::runtime_error("fault_proxy: cannot bind 127.0.0.1:"
                               + std::to_string(port) + ": " + ec.message());
    }
    l.acceptor.listen();
    l.port = l.acceptor.local_endpoint().port();
    accept(l);
  }

  void accept(link_state& l) {
    l.acceptor.async_accept([this, &l](const error_code& ec, tcp::socket s) {
      if (ec)
        return; // closed by cut or by the destructor
      ++l.accepted;
      error_code ignored;
      if (l.mode == link_mode::cut) {
        // Refused: reset at once (see the header on why the listener stays).
        s.set_option(asio::socket_base::linger(true, 0), ignored);
        s.close(ignored);
        accept(l);
        return;
      }
      s.set_option(tcp::no_delay(true), ignored);
      auto c = std::make_shared<connection>(io, l);
      c->client = std::move(s);
      l.conns.remove_if([](const auto& w) { return w.expired(); });
      l.conns.push_back(c);
      c->start();
      accept(l);
    });
  }

  void set_mode(std::size_t i, link_mode m, std::chrono::milliseconds d) {
    run([this, i, m, d] {
      auto& l = *links.at(i);
      l.mode = m;
      l.delay = d;
      if (m == link_mode::cut) {
        for (auto& w : l.conns)
          if (auto c = w.lock())
            c->close(true);
        l.conns.clear();
        return;
      }
      if (m != link_mode::blackhole)
        for (auto& w : l.conns)
          if (auto c = w.lock())
            c->unpark();
    });
  }
};

fault_proxy::fault_proxy() : impl_(std::make_unique<impl>()) {
  impl_->thread = std::thread{[this] {
    impl_->io.run();
  }};
}

fault_proxy::~fault_proxy() {
  impl_->run([this] {
    for (auto& l : impl_->links) {
      error_code ignored;
      l->acceptor.close(ignored);
      for (auto& w : l->conns)
        if (auto c = w.lock())
          c->close(false);
      l->conns.clear();
    }
  });
  impl_->guard.reset();
  impl_->io.stop();
  impl_->thread.join();
}

std::size_t fault_proxy::add_link(const std::string& upstream_host,
                                  uint16_t upstream_port) {
  return impl_->run([&] {
    auto l = std::make_unique<link_state>(impl_->io);
    tcp::resolver r{impl_->io};
    auto results = r.resolve(upstream_host, std::to_string(upstream_port));
    if (results.empty())
      throw std::runtime_error("fault_proxy: cannot resolve " + upstream_host);
    l->upstream = results.begin()->endpoint();
    impl_->listen(*l, 0);
    impl_->links.push_back(std::move(l));
    return impl_->links.size() - 1;
  });
}

uint16_t fault_proxy::port(std::size_t link) const {
  return impl_->run([&] { return impl_->links.at(link)->port; });
}

void fault_proxy::pass(std::size_t link) {
  impl_->set_mode(link, link_mode::pass, {});
}

void fault_proxy::cut(std::size_t link) {
  impl_->set_mode(link, link_mode::cut, {});
}

void fault_proxy::blackhole(std::size_t link) {
  impl_->set_mode(link, link_mode::blackhole, {});
}

void fault_proxy::delay(std::size_t link, std::chrono::milliseconds ms) {
  impl_->set_mode(link, link_mode::delay, ms);
}

void fault_proxy::heal(std::size_t link) {
  pass(link);
}

std::size_t fault_proxy::accepted(std::size_t link) const {
  return impl_->run([&] { return impl_->links.at(link)->accepted.load(); });
}

std::size_t fault_proxy::forwarded_bytes(std::size_t link) const {
  return impl_->run([&] { return impl_->links.at(link)->bytes.load(); });
}

} // namespace outbound::testing
