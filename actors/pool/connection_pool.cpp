#include "actors/pool/connection_pool.hpp"

#include "actors/pool/pool_state.hpp"
#include "protocol/http_connection.hpp"
#include "protocol/io_runner.hpp"
#include "protocol/tls_context.hpp"

#include <caf/actor_cast.hpp>
#include <caf/mailbox_element.hpp>
#include <caf/response_promise.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/weak_intrusive_ptr.hpp>

#include <atomic>
#include <exception>
#include <utility>

namespace outbound {

namespace {

/// The io completion of an exchange gave its connection back (sent to the
/// pool before the answer goes to the requester, so that a request the
/// answer causes reaches the pool after it). Tagged with the exchange id:
/// the release of a cancelled exchange finds nothing.
struct exchange_released {
  uint64_t exchange_id = 0;
  bool reusable = false;
};

} // namespace

} // namespace outbound

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(outbound::exchange_released)

namespace outbound {

namespace {

/// The pool's own interface: the transport port plus the release message
/// and a stats query (reachable through an untyped handle in tests).
using pool_actor = transport_actor::extend<
  caf::reacts_to<exchange_released>,
  caf::replies_to<stats_atom>::with<pool_stats>>;

using connection_ptr = std::shared_ptr<http_connection>;

/// Who answers one exchange: the io completion (directly to the requester,
/// from the io thread) or the pool (cancel, termination). Whoever flips
/// `answered` first answers; the other one stays silent, so the requester
/// gets exactly one answer. Holds what a caf::response_promise holds except
/// the pool itself (a promise keeps its actor alive: an idle pool must die
/// when its last handle goes, whatever exchanges it still tracks).
struct exchange_ticket {
  std::atomic<bool> answered{false};
  /// Read and consumed by the winner of `claim` only.
  caf::strong_actor_ptr source;
  caf::mailbox_element::forwarding_stack stages;
  caf::message_id mid;

  /// Takes over the addressing of `rp` (the request being handled).
  explicit exchange_ticket(const caf::response_promise& rp)
    : source(rp.source()), stages(rp.stages()), mid(rp.id()) {
  }

  /// True for exactly one caller.
  bool claim() {
    return !answered.exchange(true, std::memory_order_acq_rel);
  }

  /// Sends `res` as the answer, as caf::response_promise::deliver does, from
  /// any thread: `eu` is the caller's execution unit, or null on a non-actor
  /// thread (the scheduler then picks a worker and wakes it, as for an
  /// anonymous send). `sender` is the pool. Only after winning `claim`.
  void answer(caf::strong_actor_ptr sender, exchange_result res,
              caf::execution_unit* eu) {
    if (!stages.empty()) {
      auto next = std::move(stages.back());
      stages.pop_back();
      next->enqueue(caf::make_mailbox_element(std::move(source), mid,
                                              std::move(stages),
                                              std::move(res)),
                    eu);
      return;
    }
    if (auto src = std::move(source))
      src->enqueue(caf::make_mailbox_element(std::move(sender),
                                             mid.response_id(), {},
                                             std::move(res)),
                   eu);
  }
};

using ticket_ptr = std::shared_ptr<exchange_ticket>;

struct pool_actor_state {
  /// Declared first: destroyed last, after every connection using it.
  std::shared_ptr<io_runner> io;
  std::shared_ptr<tls_context> tls;
  url_parts origin;
  pool_key key;
  basic_pool_state<connection_ptr, ticket_ptr> pool{0};

  /// The io completion of `id` ran (its answer is out, or was dropped
  /// because a cancel answered first): keep its connection idle (MRU) if
  /// reusable and there is room, close it otherwise.
  void release(uint64_t id, bool reusable) {
    auto flight = pool.complete(id);
    if (!flight)
      return; // cancelled earlier: its connection is closed already
    auto decision = pool.release(flight->key, flight->conn, reusable);
    if (decision != release_decision::keep_idle)
      flight->conn->close();
  }

  /// Runs when the actor terminates: every connection is closed, every
  /// exchange still in flight is answered.
  ~pool_actor_state() {
    auto [idle, flights] = pool.drain();
    for (auto& c : idle)
      c->close();
    for (auto& f : flights) {
      f.conn->close();
      if (!f.pending->claim())
        continue; // its io completion answered already
      exchange_result res;
      res.error = transport_error_kind::interrupted;
      res.detail = "connection pool stopped";
      res.request_sent = true; // unknown: assume it may have left
      f.pending->answer(nullptr, std::move(res), nullptr);
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
  st.pool = basic_pool_state<connection_ptr, ticket_ptr>{max_idle};
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
      auto ticket = std::make_shared<exchange_ticket>(
        self->make_response_promise());
      st.pool.start(id, st.key, conn, ticket, reused);
      caf::weak_actor_ptr weak{self->ctrl()};
      conn->async_exchange(
        std::move(req), [weak, id, ticket = std::move(ticket)](
                          exchange_result res, bool reusable) {
          // On an io thread. Claim the answer first: from now on a cancel
          // closes the connection but stays silent.
          bool mine = ticket->claim();
          auto pool = weak.lock();
          // The connection goes back first: a request that the answer
          // causes then reaches the pool after the release.
          if (pool)
            caf::anon_send(caf::actor_cast<pool_actor>(pool),
                           exchange_released{id, reusable});
          if (mine) {
            res.exchange_id = id;
            ticket->answer(std::move(pool), std::move(res), nullptr);
          }
        });
      return caf::delegated<exchange_result>{};
    },
    [self](exchange_released& rel) {
      self->state.release(rel.exchange_id, rel.reusable);
    },
    [self](cancel_atom, uint64_t id) {
      auto& st = self->state;
      auto flight = st.pool.cancel(id);
      if (!flight)
        return; // completed already, or unknown
      // Never reused, whoever answers: the connection may be stuck
      // mid-response.
      flight->conn->close();
      if (!flight->pending->claim())
        return; // the io completion answered first
      flight->pending->answer(
        self->ctrl(),
        error_result(id, transport_error_kind::timeout, "cancelled", true),
        self->context());
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
