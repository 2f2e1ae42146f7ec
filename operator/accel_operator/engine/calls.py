"""The threads the scheduler's blocking API calls run in: one pool per kind of call.

The kubernetes client blocks, so every call runs in a thread. With one shared pool, a burst of
admission writes queued the leader lease's renewal behind it (a leader that cannot renew in time
steps down by itself, mid-burst), and Events, which are information, took threads from the writes
that are state. So each kind gets its own pool:

- ``lease``: one thread, for the lease tick only; it never waits behind a write;
- ``writes``: status patches, workload creates and deletes, taints and annotations (state);
- ``events``: Kubernetes Events. A burst's events queue here behind each other only; none is
  dropped, and a decision's writes never wait for its events.

A decision's state writes (its status, then its workload) run under one :class:`Slots` slot, held
from the first write to the last: a job whose writes started finishes them, instead of queueing
each call behind the whole burst again (with 1,300 decisions in flight, an admission's workload
was created a minute after its status). Slots are handed out by priority: decisions that change
what runs (admit, start, release, fail) before those that only say a job still waits, so a new
job's admission does not queue behind a backlog's "waiting for capacity" conditions, nor behind
the cost ledger's writes (every running job's ``status.cost``, in one burst per accrual).

Every write is fenced by the Lease (:func:`fenced`): whether this replica still leads is asked in
the write's thread, just before the call goes out, so a write queued before the Lease was lost (a
leader paused past its Lease, a burst still draining) is dropped instead of landing after the new
leader's writes.

A checkpoint lookup (S3, with a deadline of its own) runs in a thread of its own
(:func:`in_own_thread`), awaited until that thread has ended: a pooled thread that outlived its
caller's timeout would be invisible, and a hung call would hold a pool's thread for good.

``EVENT_THREADS + 1`` connections beyond the writes' are what the API client's pool needs
(``app.build_context``): a thread without a pooled connection opens and discards one per call.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")

# Events are small and many; 4 threads kept up with 20 admissions/s on the local control plane.
EVENT_THREADS = 4


@dataclass
class CallPools:
    write_threads: int = 16
    lease: ThreadPoolExecutor = field(init=False)
    writes: ThreadPoolExecutor = field(init=False)
    events: ThreadPoolExecutor = field(init=False)

    def __post_init__(self) -> None:
        # Threads start on the first call: a pool never used (a test, a follower) costs nothing.
        self.lease = ThreadPoolExecutor(1, thread_name_prefix="accel-lease")
        self.writes = ThreadPoolExecutor(self.write_threads, thread_name_prefix="accel-write")
        self.events = ThreadPoolExecutor(EVENT_THREADS, thread_name_prefix="accel-event")

    def shutdown(self) -> None:
        for pool in (self.lease, self.writes, self.events):
            pool.shutdown(wait=False, cancel_futures=True)


async def run_in(pool: ThreadPoolExecutor, fn: Callable[..., T], *args: object) -> T:
    """``fn(*args)`` in one of ``pool``'s threads."""
    return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)


class NotLeading(RuntimeError):
    """This replica no longer holds the Lease: the write was dropped (the new leader decides again
    from the cluster)."""


def fenced(leading: Callable[[], bool], fn: Callable[..., T]) -> Callable[..., T]:
    """``fn``, called only while ``leading()`` (asked at the call, in its thread); else NotLeading."""

    def call(*args: object) -> T:
        if not leading():
            raise NotLeading(getattr(fn, "__name__", "write"))
        return fn(*args)

    return call


# How long the awaiting task waits for a thread whose call has returned to end (it has only to
# return from its wrapper): the answer is not handed on while the thread still runs.
JOIN_SECONDS = 1.0


async def in_own_thread(
    fn: Callable[..., T], *args: object, name: str, started: Callable[[threading.Thread], None] | None = None
) -> T:
    """``fn(*args)`` in a new daemon thread named ``name``; returns (or raises) once the call has
    returned and its thread has ended. ``started`` is told the thread, so a caller that stops
    waiting (a timeout cancels this) can still see whether it ends."""
    outcome: Future[T] = Future()

    def run() -> None:
        if not outcome.set_running_or_notify_cancel():
            return  # the caller stopped waiting before the thread began: nothing to do
        try:
            outcome.set_result(fn(*args))
        except Exception as exc:  # noqa: BLE001 - handed to the awaiting task, which decides
            outcome.set_exception(exc)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    if started is not None:
        started(thread)
    try:
        return await asyncio.wrap_future(outcome)
    finally:
        if outcome.done():  # answered or raised: its thread is ending. Else the caller stopped waiting, and watches it
            thread.join(JOIN_SECONDS)


# Slot priorities: lower goes first.
URGENT = 0  # the decision changes what runs or what is reserved
WAITING = 1  # the decision only records that the job waits (or why)
BACKGROUND = 2  # bookkeeping that decides nothing: the cost ledger's status writes


class Slots:
    """At most ``n`` holders at once; waiters get a slot by priority, then in arrival order."""

    def __init__(self, n: int) -> None:
        self._free = n
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    @property
    def waiting(self) -> int:
        return sum(1 for _p, _s, fut in self._waiters if not fut.done())

    async def acquire(self, priority: int) -> None:
        if self._free > 0:  # then no one waits: release() hands a slot to a waiter before freeing it
            self._free -= 1
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (priority, next(self._seq), fut))
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # handed a slot as it was cancelled: pass it on
            else:
                fut.cancel()  # release() skips it
            raise

    def release(self) -> None:
        while self._waiters:
            _p, _s, fut = heapq.heappop(self._waiters)
            if not fut.done():
                fut.set_result(None)
                return
        self._free += 1

    @contextlib.asynccontextmanager
    async def slot(self, priority: int) -> AsyncIterator[None]:
        await self.acquire(priority)
        try:
            yield
        finally:
            self.release()
