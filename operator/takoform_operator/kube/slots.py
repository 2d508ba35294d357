"""Reconcile slots handed out fairly across namespaces, with a cap on the slots one host holds.

The reconcile loops (kube.loops) bound the reconciles running at once. A single FIFO queue
would let one namespace's churn (a thousand busy CRs) or one slow host delay every other
namespace's CRs, which would wait behind all of them. Here every namespace has its own queue and
the queues are served round robin, one slot per turn, the way fq_codel serves flows:

- a namespace whose queue was empty (a quiet tenant's CR) joins the *new* namespaces, which are
  served before the others: its CR takes the next free slot, whatever the busy namespaces hold
  queued;
- once served it goes to the end of the *old* namespaces; it leaves them only when its turn
  comes with nothing queued, so a namespace cannot gain the new ones' priority again by
  emptying its queue between two requests;
- within a namespace and host, a CR going on with work in progress (a status write held, an
  operation to see settle, a back-off) is served before the first looks and polls queued: in
  a backlog each CR then goes on to Ready and lets go of what it holds meanwhile, rather than
  every CR holding it until every first look is done;
- within a namespace the hosts of its CRs are served round robin too, and a host holding
  `per_host` slots is passed over until one of them is released: a host that answers slowly
  cannot take every slot, the CRs of other hosts keep theirs. The cap binds only while
  `shared()` says there is more than one host to share the slots with: with a single host it
  would keep slots free for nobody.

A request waits as an entry in its queue, not as a task: `request` takes a function called
when its turn comes (thousands of CRs due at once cost an entry each), `slot` is the same for a
coroutine that awaits its turn.

A slot is a turn of one reconcile, nothing more: a host that asks to be called back later
(Retry-After) is answered by the CR's back-off, outside any slot. With `fair=False` every
request goes to one queue in arrival order with no host cap: the FIFO order of a plain
semaphore (for comparison, `TAKOFORM_RECONCILE_SCHEDULING=fifo`).

Pure asyncio: no kopf, no I/O. Handing out a slot costs a walk over the namespaces waiting
(hosts of each passed over only while capped).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Callable

#: A request for a slot, called when its turn comes with the slot held for it until released;
#: False when nobody takes it any more (its CR was stopped meanwhile): the slot goes on.
Grant = Callable[[], bool]


class _Queue:
    """One host's requests within a namespace: those going on first, each part in order."""

    __slots__ = ("going_on", "others")

    def __init__(self) -> None:
        self.going_on: deque[Grant] = deque()
        self.others: deque[Grant] = deque()

    def __len__(self) -> int:
        return len(self.going_on) + len(self.others)

    def append(self, grant: Grant, going_on: bool) -> None:
        (self.going_on if going_on else self.others).append(grant)

    def popleft(self) -> Grant:
        return self.going_on.popleft() if self.going_on else self.others.popleft()

    def remove(self, grant: Grant) -> None:
        with contextlib.suppress(ValueError):
            self.going_on.remove(grant)
            return
        with contextlib.suppress(ValueError):
            self.others.remove(grant)


class FairSlots:
    """`capacity` slots, served round robin across namespaces, at most `per_host` per host."""

    def __init__(
        self,
        capacity: int,
        *,
        per_host: int | None = None,
        fair: bool = True,
        shared: Callable[[], bool] = lambda: True,
    ) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self.fair = fair
        capped = fair and per_host is not None
        self.per_host = max(1, min(per_host, capacity)) if capped and per_host else capacity
        self._shared = shared
        self._free = capacity
        self._held: dict[str, int] = {}
        #: namespace -> host -> requests; a namespace in a ring may have none.
        self._queues: dict[str, dict[str, _Queue]] = {}
        #: Namespaces that had nothing queued, served first, in the order they came.
        self._new: dict[str, None] = {}
        #: Namespaces served since they came, in the order of their next turn.
        self._old: dict[str, None] = {}

    @property
    def free(self) -> int:
        return self._free

    def held(self, host: str) -> int:
        """Slots the CRs of `host` hold now."""
        return self._held.get(self._host(host), 0)

    def waiting(self) -> int:
        return sum(len(q) for hosts in self._queues.values() for q in hosts.values())

    def request(self, namespace: str, host: str, grant: Grant, *, going_on: bool = False) -> None:
        """Queue a request for one slot for a CR of `namespace` on `host`: `grant` is called
        when its turn comes (at once when a slot is free), and the slot is held from then until
        `release(host)`. `going_on`: the CR goes on with work in progress, served before the
        requests of its namespace and host that do not."""
        namespace, host = self._keys(namespace, host)
        self._enqueue(namespace, host, grant, going_on and self.fair)
        self._dispatch()

    def release(self, host: str) -> None:
        """Give back a slot that a request's grant took."""
        self._release(self._host(host))

    @contextlib.asynccontextmanager
    async def slot(self, namespace: str, host: str) -> AsyncIterator[None]:
        """Hold one slot for a reconcile of a CR of `namespace` on `host`."""
        namespace, host = self._keys(namespace, host)
        await self._acquire(namespace, host)
        try:
            yield
        finally:
            self._release(host)

    def _keys(self, namespace: str, host: str) -> tuple[str, str]:
        return (namespace, host) if self.fair else ("", "")

    def _host(self, host: str) -> str:
        return host if self.fair else ""

    def _enqueue(self, namespace: str, host: str, grant: Grant, going_on: bool) -> None:
        hosts = self._queues.get(namespace)
        if hosts is None:
            hosts = self._queues[namespace] = {}
        if namespace not in self._new and namespace not in self._old:
            self._new[namespace] = None
        queue = hosts.get(host)
        if queue is None:
            queue = hosts[host] = _Queue()
        queue.append(grant, going_on)

    async def _acquire(self, namespace: str, host: str) -> None:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def grant() -> bool:
            if waiter.done():  # cancelled while queued, its task not run yet
                return False
            waiter.set_result(None)
            return True

        self.request(namespace, host, grant)  # keys already mapped: mapped again to themselves
        try:
            await waiter  # a waiter granted at once is done: no suspension
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._release(host)  # granted, but its task was cancelled before it ran
            else:
                self._forget(namespace, host, grant)
            raise

    def _release(self, host: str) -> None:
        self._free += 1
        left = self._held[host] - 1
        if left:
            self._held[host] = left
        else:
            del self._held[host]
        self._dispatch()

    def _forget(self, namespace: str, host: str, grant: Grant) -> None:
        """A request cancelled before its turn leaves its queue (its namespace keeps its place)."""
        queue = (self._queues.get(namespace) or {}).get(host)
        if queue is None:
            return
        queue.remove(grant)
        if not queue:
            del self._queues[namespace][host]

    def _dispatch(self) -> None:
        while self._free > 0 and self._grant_one():
            pass

    def _grant_one(self) -> bool:
        """Serve the first namespace, new ones first, that waits on a host below its cap.
        False when none does (every request's host is at its cap, or nobody waits)."""
        cap = self.per_host if self.per_host < self.capacity and self._shared() else self.capacity
        for ring in (self._new, self._old):
            for namespace in list(ring):
                hosts = self._queues[namespace]
                if not hosts:  # its waiters were cancelled
                    del ring[namespace]
                    if ring is self._old:  # its turn came with nothing queued: it leaves
                        del self._queues[namespace]
                    else:
                        self._old[namespace] = None
                    continue
                host = next((h for h in hosts if self._held.get(h, 0) < cap), None)
                if host is None:
                    continue
                queue = hosts.pop(host)
                grant = queue.popleft()
                if queue:
                    hosts[host] = queue  # this host's next turn comes after the others'
                del ring[namespace]
                self._old[namespace] = None
                if grant():  # it only schedules its reconcile: nothing has run yet
                    self._free -= 1
                    self._held[host] = self._held.get(host, 0) + 1
                return True
        return False
