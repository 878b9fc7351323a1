#include "actors/pool/connection_pool.hpp"

#include "actors/pool/pool_state.hpp"
#include "protocol/http_connection.hpp"
#include "protocol/io_runner.hpp"
#include "protocol/tls_context.hpp"

#include <caf/actor_cast.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>
#include <caf/weak_intrusive_ptr.hpp>

#include <exception>
#include <utility>

namespace outbound {

namespace {

/// An io-thread completion, forwarded to the pool actor (the one thing a
/// completion does, docs/ARCHITECTURE.md). Tagged with the exchange id so the
/// completion of a cancelled exchange is dropped.
struct exchange_done {
  uint64_t exchange_id = 0;
  exchange_result result;
  bool reusable = false;
};

} // namespace

} // namespace outbound

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::exchange_done)

namespace outbound {

namespace {

/// The pool's own interface: the transport port plus the completion message
/// and a stats query (reachable through an untyped handle in tests).
using pool_actor = transport_actor::extend<
  caf::reacts_to<exchange_done>, caf::replies_to<stats_atom>::with<pool_stats>>;

using connection_ptr = std::shared_ptr<http_connection>;
using promise_type = caf::typed_response_promise<exchange_result>;

struct pool_actor_state {
  /// Declared first: destroyed last, after every connection using it.
  std::shared_ptr<io_runner> io;
  std::shared_ptr<tls_context> tls;
  url_parts origin;
  pool_key key;
  basic_pool_state<connection_ptr, promise_type> pool{0};

  /// Runs when the actor terminates: every connection is closed, every
  /// exchange still in flight is answered.
  ~pool_actor_state() {
    auto [idle, flights] = pool.drain();
    for (auto& c : idle)
      c->close();
    for (auto& f : flights) {
      f.conn->close();
      exchange_result res;
      res.error = transport_error_kind::interrupted;
      res.detail = "connection pool stopped";
      res.request_sent = true; // unknown: assume it may have left
      f.pending.deliver(std::move(res));
    }
  }

  static inline const char* name = "outbound.connection_pool";
};

exchange_result error_result(uint64_t id, transport_error_kind kind,
                             std::string detail, bool sent = false) {
  exchange_result res;
  res.exchange_id = id;
  res.error = kind;
  res.detail = std::move(detail);
  res.request_sent = sent;
  return res;
}

pool_actor::behavior_type
pool_impl(pool_actor::stateful_pointer<pool_actor_state> self,
          std::shared_ptr<io_runner> io, std::shared_ptr<tls_context> tls,
          url_parts origin, std::size_t max_idle) {
  auto& st = self->state;
  st.io = std::move(io);
  st.tls = std::move(tls);
  st.origin = std::move(origin);
  st.key = pool_key{st.origin.scheme, st.origin.host, st.origin.port,
                    st.tls ? st.tls->identity() : std::string{}};
  st.pool = basic_pool_state<connection_ptr, promise_type>{max_idle};
  return {
    [self](http_request& req) -> caf::result<exchange_result> {
      auto& st = self->state;
      auto id = req.exchange_id;
      if (st.pool.is_in_flight(id))
        return error_result(id, transport_error_kind::config,
                            "duplicate exchange id " + std::to_string(id));
      connection_ptr conn;
      bool reused = false;
      if (auto idle = st.pool.checkout(st.key, req.fresh_connection)) {
        if ((*idle)->stale()) {
          // The server closed it (or left bytes on it) while it was idle:
          // nothing of this request left; the caller redials fresh.
          (*idle)->close();
          st.pool.discard_stale();
          return error_result(id, transport_error_kind::not_sent,
                              "pooled connection was closed by the server");
        }
        conn = std::move(*idle);
        reused = true;
      } else {
        try {
          conn = http_connection::make(*st.io, st.origin, st.tls);
        } catch (const std::exception& e) {
          return error_result(id, transport_error_kind::config, e.what());
        }
      }
      auto rp = self->make_response_promise<exchange_result>();
      st.pool.start(id, st.key, conn, rp, reused);
      caf::weak_actor_ptr weak{self->ctrl()};
      conn->async_exchange(std::move(req), [weak, id](exchange_result res,
                                                      bool reusable) {
        if (auto strong = weak.lock())
          caf::anon_send(caf::actor_cast<pool_actor>(strong),
                         exchange_done{id, std::move(res), reusable});
      });
      return rp;
    },
    [self](exchange_done& done) {
      auto& st = self->state;
      auto flight = st.pool.complete(done.exchange_id);
      if (!flight)
        return; // cancelled earlier: already answered
      auto decision = st.pool.release(flight->key, flight->conn, done.reusable);
      if (decision != release_decision::keep_idle)
        flight->conn->close();
      done.result.exchange_id = done.exchange_id;
      flight->pending.deliver(std::move(done.result));
    },
    [self](cancel_atom, uint64_t id) {
      auto& st = self->state;
      auto flight = st.pool.cancel(id);
      if (!flight)
        return; // completed already, or unknown
      flight->conn->close();
      flight->pending.deliver(
        error_result(id, transport_error_kind::timeout, "cancelled", true));
    },
    [self](stats_atom) {
      auto& st = self->state;
      const auto& c = st.pool.counters();
      pool_stats out;
      out.dialled = c.dialled;
      out.reused = c.reused;
      out.stale_discarded = c.stale_discarded;
      out.cancelled = c.cancelled;
      out.idle = st.pool.idle_count();
      out.in_flight = st.pool.in_flight_count();
      return out;
    },
  };
}

} // namespace

transport_actor spawn_connection_pool(caf::actor_system& sys,
                                      const client_config& cfg,
                                      std::shared_ptr<io_runner> io) {
  cfg.validate();
  auto origin = cfg.parsed_url();
  std::shared_ptr<tls_context> tls;
  if (origin.tls() || cfg.tls.any())
    tls = tls_context::make(cfg.tls); // throws config_error naming the field
  if (!origin.tls())
    tls.reset(); // files checked, but plain http carries no identity
  if (!io)
    io = io_runner::shared();
  return sys.spawn(pool_impl, std::move(io), std::move(tls), std::move(origin),
                   cfg.max_idle_per_endpoint);
}

} // namespace outbound
