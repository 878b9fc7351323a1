#include "actors/group/memory_lease_store.hpp"

#include "actors/handler_guard.hpp"
#include "config/config_error.hpp"
#include "core/time.hpp"

#include <caf/event_based_actor.hpp>
#include <caf/sec.hpp>
#include <caf/typed_event_based_actor.hpp>

#include <algorithm>
#include <cmath>
#include <utility>

namespace outbound {
inline namespace group {

namespace {

/// etcd's --max-txn-ops default: the port's bound per request.
constexpr std::size_t max_ops = 128;

using vtime = caf::actor_clock::time_point;

/// The port plus the expiry timer `(timeout_atom, generation)`.
using store_impl_actor
  = lease_store_actor::extend<caf::reacts_to<timeout_atom, uint64_t>>;

struct store_state {
  memory_store_options opts;
  std::shared_ptr<memory_store_data> data;
  std::shared_ptr<memory_store_faults> faults;
  /// The pending expiry timer: its due time (max: none) and generation.
  vtime armed = vtime::max();
  uint64_t timer_gen = 0;

  static inline const char* name = "outbound.memory_lease_store";
};

using self_ptr = store_impl_actor::stateful_pointer<store_state>;

bool alive(const memory_store_data& d, uint64_t lease) {
  return d.leases.count(lease) != 0;
}

/// Deletes every key bound to `lease` and the lease, in one revision when
/// a key was deleted (etcd's LeaseRevoke).
void drop_lease(memory_store_data& d, uint64_t lease) {
  if (d.leases.erase(lease) == 0)
    return;
  bool wrote = false;
  for (auto i = d.members.begin(); i != d.members.end();) {
    if (i->second.lease == lease) {
      i = d.members.erase(i);
      wrote = true;
    } else {
      ++i;
    }
  }
  for (auto i = d.owners.begin(); i != d.owners.end();) {
    if (i->second.lease == lease) {
      i = d.owners.erase(i);
      wrote = true;
    } else {
      ++i;
    }
  }
  if (wrote)
    ++d.revision;
}

void arm(self_ptr self) {
  auto& st = self->state;
  auto next = vtime::max();
  for (const auto& kv : st.data->leases)
    next = std::min(next, kv.second.expires);
  if (next == st.armed)
    return;
  st.armed = next;
  ++st.timer_gen;
  if (next == vtime::max())
    return;
  auto now = self->clock().now();
  self->delayed_send(self, next > now ? next - now : vtime::duration{0},
                     timeout_atom_v, st.timer_gen);
}

/// Expires every lease due at `now` (lazily, at each request and timer).
void expire(self_ptr self) {
  auto& d = *self->state.data;
  auto now = self->clock().now();
  std::vector<uint64_t> due;
  for (const auto& kv : d.leases)
    if (kv.second.expires <= now)
      due.push_back(kv.first);
  for (auto l : due)
    drop_lease(d, l);
}

/// The fault for `op` (counted), after expiring what is due.
store_fault begin(self_ptr self, store_op op) {
  expire(self);
  auto& st = self->state;
  ++st.data->requests[static_cast<std::size_t>(op)];
  if (!st.faults)
    return store_fault::none;
  if (st.faults->unreachable)
    return store_fault::fail;
  return (*st.faults)[op];
}

caf::error failed(const char* what) {
  return caf::make_error(caf::sec::runtime_error, std::string{what});
}

caf::error unreachable_or_failed(self_ptr self) {
  if (self->state.faults && self->state.faults->unreachable)
    return failed("memory store: unreachable");
  return failed("memory store: injected failure");
}

caf::error lost() {
  return caf::make_error(caf::sec::request_timeout,
                         std::string{"memory store: answer lost"});
}

/// Writes `cursor` unless the stored one is ahead (a late write never
/// lowers it). True if something was written.
bool write_cursor(memory_store_data& d, const std::string& feed,
                  const group_position& cursor) {
  auto i = d.cursors.find(feed);
  if (i != d.cursors.end() && cursor < i->second)
    return false;
  d.cursors[feed] = cursor;
  return true;
}

/// Runs a handler's body; an exception becomes an error answer and the
/// store stays alive (actors/handler_guard.hpp's rule).
template <class R, class F>
R safe(F&& f) {
  try {
    return f();
  } catch (...) {
    auto e = error_of_exception(std::current_exception(), "memory store");
    return caf::make_error(caf::sec::runtime_error, std::move(e.detail));
  }
}

caf::result<uint64_t, double> on_join(self_ptr self, member_record& rec,
                                      double ttl) {
  auto fault = begin(self, store_op::join);
  if (fault == store_fault::fail)
    return unreachable_or_failed(self);
  auto& d = *self->state.data;
  if (!(ttl > 0) || !std::isfinite(ttl))
    return failed("memory store: bad ttl");
  ttl = std::max(ttl, self->state.opts.min_ttl);
  if (d.members.count(rec.name) != 0) {
    // The name is bound to a live lease (expired ones are gone): the
    // lease etcd would have granted first is revoked again.
    ++d.last_lease;
    return failed("memory store: member name held by another lease");
  }
  auto id = ++d.last_lease;
  d.leases[id]
    = memory_store_data::lease{ttl, self->clock().now() + from_seconds(ttl)};
  auto name = rec.name;
  d.members[name]
    = memory_store_data::member_key{std::move(rec), id, ++d.revision};
  arm(self);
  if (fault == store_fault::lose)
    return lost();
  return caf::result<uint64_t, double>{id, ttl};
}

caf::result<double> on_renew(self_ptr self, uint64_t lease) {
  auto fault = begin(self, store_op::renew);
  if (fault == store_fault::fail)
    return unreachable_or_failed(self);
  auto& d = *self->state.data;
  double ttl = 0;
  auto i = d.leases.find(lease);
  if (i != d.leases.end()) {
    i->second.expires = self->clock().now() + from_seconds(i->second.ttl);
    ttl = i->second.ttl;
  }
  arm(self);
  if (fault == store_fault::lose)
    return lost();
  return ttl;
}

caf::result<ack_atom> on_revoke(self_ptr self, uint64_t lease) {
  auto fault = begin(self, store_op::revoke);
  if (fault == store_fault::fail)
    return unreachable_or_failed(self);
  drop_lease(*self->state.data, lease);
  arm(self);
  if (fault == store_fault::lose)
    return lost();
  return ack_atom_v;
}

caf::result<ack_atom> on_withdraw(self_ptr self, uint64_t lease) {
  auto fault = begin(self, store_op::withdraw);
  if (fault == store_fault::fail)
    return unreachable_or_failed(self);
  auto& d = *self->state.data;
  // etcd: a txn comparing the key's lease, deleting it on success.
  for (auto i = d.members.begin(); i != d.members.end(); ++i)
    if (i->second.lease == lease) {
      d.members.erase(i);
      ++d.revision;
      break;
    }
  arm(self);
  if (fault == store_fault::lose)
    return lost();
  return ack_atom_v;
}

caf::result<std::vector<member_record>> on_members(self_ptr self) {
  auto fault = begin(self, store_op::members);
  if (fault == store_fault::fail)
    return unreachable_or_failed(self);
  std::vector<member_record> out;
  for (const auto& kv : self->state.data->members)
    out.push_back(kv.second.record);
  arm(self);
  if (fault == store_fault::lose)
    return lost();
  return out;
}

caf::result<std::vector<claim_reply>>
on_claim(self_ptr self, uint64_t lease, std::vector<std::string>& feeds) {
  auto fault = begin(self, store_op::claim);
  if (fault == store_fault::fail)
    return unreachable_or_failed(self);
  auto& d = *self->state.data;
  if (feeds.size() > max_ops)
    return failed("memory store: too many operations in one request");
  if (!alive(d, lease))
    // etcd fails the whole transaction: "requested lease not found".
    return failed("memory store: lease not found");
  std::string member, incarnation;
  for (const auto& kv : d.members)
    if (kv.second.lease == lease) {
      member = kv.second.record.name;
      incarnation = kv.second.record.incarnation;
    }
  std::vector<claim_reply> out;
  bool wrote = false;
  auto rev = d.revision + 1; // the transaction's revision
  for (auto& f : feeds) {
    claim_reply r;
    r.feed = f;
    auto o = d.owners.find(f);
    if (o == d.owners.end()) {
      d.owners[f]
        = memory_store_data::owner_key{member, incarnation, lease, rev};
      wrote = true;
      r.outcome = claim_outcome::won;
      r.token = rev;
    } else if (o->second.lease == lease) {
      r.outcome = claim_outcome::won; // a retry after a lost answer
      r.token = o->second.create_revision;
    } else {
      r.outcome = claim_outcome::held;
    }
    if (r.outcome == claim_outcome::won) {
      auto c = d.cursors.find(f);
      if (c != d.cursors.end())
        r.cursor = c->second;
    }
    out.push_back(std::move(r));
  }
  if (wrote)
    d.revision = rev;
  arm(self);
  if (fault == store_fault::lose)
    return lost();
  return out;
}

/// A commit or a release: per item, `apply` (which says whether it wrote)
/// if owners/<feed> still has create_revision == token, else `fenced`.
/// One revision for the whole request, as one etcd transaction.
template <class Item, class Apply>
caf::result<std::vector<commit_reply>>
compare_token_and(self_ptr self, store_op op, std::vector<Item>& items,
                  Apply apply) {
  auto fault = begin(self, op);
  if (fault == store_fault::fail)
    return unreachable_or_failed(self);
  auto& d = *self->state.data;
  if (items.size() > max_ops)
    return failed("memory store: too many operations in one request");
  std::vector<commit_reply> out;
  bool wrote = false;
  for (const auto& it : items) {
    commit_reply r;
    r.feed = it.feed;
    auto o = d.owners.find(it.feed);
    if (o == d.owners.end() || o->second.create_revision != it.token) {
      r.outcome = commit_outcome::fenced;
    } else {
      wrote = apply(d, it, o) || wrote;
      r.outcome = commit_outcome::ok;
    }
    out.push_back(std::move(r));
  }
  if (wrote)
    ++d.revision;
  arm(self);
  if (fault == store_fault::lose)
    return lost();
  return out;
}

caf::result<std::vector<commit_reply>>
on_commit(self_ptr self, std::vector<commit_item>& items) {
  return compare_token_and(
    self, store_op::commit, items,
    [](memory_store_data& d, const commit_item& it, auto) {
      return write_cursor(d, it.feed, it.cursor);
    });
}

caf::result<std::vector<commit_reply>>
on_release(self_ptr self, std::vector<release_item>& items) {
  return compare_token_and(
    self, store_op::release, items,
    [](memory_store_data& d, const release_item& it, auto owner) {
      if (it.cursor)
        write_cursor(d, it.feed, *it.cursor);
      d.owners.erase(owner);
      return true;
    });
}

store_impl_actor::behavior_type store_impl(self_ptr self,
                                           memory_store_options opts) {
  auto& st = self->state;
  st.data = opts.data ? opts.data : std::make_shared<memory_store_data>();
  st.faults = opts.faults;
  st.opts = std::move(opts);
  return {
    [self](grp_join_atom, member_record& rec,
           double ttl) -> caf::result<uint64_t, double> {
      return safe<caf::result<uint64_t, double>>(
        [&] { return on_join(self, rec, ttl); });
    },
    [self](grp_renew_atom, uint64_t lease) -> caf::result<double> {
      return safe<caf::result<double>>([&] { return on_renew(self, lease); });
    },
    [self](grp_revoke_atom, uint64_t lease) -> caf::result<ack_atom> {
      return safe<caf::result<ack_atom>>(
        [&] { return on_revoke(self, lease); });
    },
    [self](grp_withdraw_atom, uint64_t lease) -> caf::result<ack_atom> {
      return safe<caf::result<ack_atom>>(
        [&] { return on_withdraw(self, lease); });
    },
    [self](grp_members_atom) -> caf::result<std::vector<member_record>> {
      return safe<caf::result<std::vector<member_record>>>(
        [&] { return on_members(self); });
    },
    [self](grp_claim_atom, uint64_t lease, std::vector<std::string>& feeds)
      -> caf::result<std::vector<claim_reply>> {
      return safe<caf::result<std::vector<claim_reply>>>(
        [&] { return on_claim(self, lease, feeds); });
    },
    [self](grp_commit_atom, std::vector<commit_item>& items)
      -> caf::result<std::vector<commit_reply>> {
      return safe<caf::result<std::vector<commit_reply>>>(
        [&] { return on_commit(self, items); });
    },
    [self](grp_release_atom, std::vector<release_item>& items)
      -> caf::result<std::vector<commit_reply>> {
      return safe<caf::result<std::vector<commit_reply>>>(
        [&] { return on_release(self, items); });
    },
    [self](timeout_atom, uint64_t gen) {
      auto& st = self->state;
      if (gen != st.timer_gen)
        return;
      st.armed = vtime::max();
      expire(self);
      arm(self);
    },
  };
}

} // namespace

lease_store_actor spawn_memory_lease_store(caf::actor_system& sys,
                                           memory_store_options opts) {
  if (!(opts.min_ttl > 0) || !(opts.min_ttl <= 86400.0))
    throw config_error("min_ttl", "must be > 0 and <= 86400 seconds");
  return sys.spawn(store_impl, std::move(opts));
}

} // namespace group
} // namespace outbound
