"""The cost accrual step, wired: every ``cost_interval_seconds`` (leader only) it reads the
scheduler's snapshot as it stands (jobs, pods, workloads, pools, and the policies and node
reports the scheduler's own indexes hold: no second copy of them; ``Scheduler.current`` reads
what changed since the last pass, with no full rebuild), prices each pool
(``adapters.pricebook``), calls the pure ``reconcile.accrual`` for every job (``accrual.step``:
a running job whose inputs did not change since the last step has its open interval extended,
any other is recomputed in full) and
``reconcile.teamspend`` for every policy, and writes what changed: each job's ``status.cost``,
each policy's ``status.spend`` and ``status.ledger`` (team totals that outlive the jobs), a pool's
``PriceLive`` condition, an ``OverBudget`` event on a running job whose team is at its limit (it
is never stopped), and the cost metrics, derived from the ledgers so a restart counts nothing twice.

The durable cost rollup (``reconcile.rollup``, a ConfigMap): every attempt that has ended is folded
into it and then marked ``rolledUp`` in its job's ledger; a job seen deleted has its remaining
attempts folded, the running one closed at the deletion. The rollup is written before the marks,
and each fold is keyed by (job uid, attempt) in the same write, so an operator killed between
the two folds nothing twice and loses nothing. The cost counters are the rollup plus the live
jobs' unfolded attempts: they never go down when a job is deleted or the operator restarts.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from accel_api.costrollup import ROLLUP_OPEN_SHARDS, CostRollup, OpenShard
from accel_api.durations import parse_time_strict, stamp_exact
from accel_api.enums import CapacityType
from accel_api.job import CostStatus, OverBudget
from accel_api.policy import SpendLedger, TeamSpend
from accel_operator.accounting import accrual, ledger, rollup, teamspend
from accel_operator.adapters.kube.client import ClusterUnavailable
from accel_operator.adapters.kube.costs import CostWriter, RollupConflict, open_shard_name
from accel_operator.adapters.kube.jobs import JobGone, JobRef, JobWriter
from accel_operator.adapters.kube.workloads import WorkloadRejected, label_value
from accel_operator.adapters.pricebook import PriceBook, Quote
from accel_operator.engine import calls
from accel_operator.engine.scheduler import Scheduler
from accel_operator.metrics import CostKey, OperatorMetrics
from accel_operator.reconcile.common import actions
from accel_operator.reconcile.common.snapshot import HOLDING, TERMINAL, JobKey, JobView, Snapshot
from accel_operator.settings import OperatorSettings

log = logging.getLogger("accel_operator.cost")

T = TypeVar("T")
ByPool = dict[tuple[str, CapacityType], ledger.Figures]  # a ledger's live figures by (pool, capacity type)


def _left_running(snap: Snapshot, key: JobKey, uid: str) -> bool:
    """Whether a deleted job left a workload running: one the garbage collector orphaned (its
    owner reference to the job removed, as ``--cascade=orphan`` does) and not finished. A workload
    still owned by the job is being collected with it (a plain deletion: charged up to the
    deletion, as before); a job of the same name that exists again owns what is there."""
    if key in snap.jobs:
        return False
    return any(w.job == key and w.running and w.owner_uid != uid for w in snap.workloads.values())


def _wire(cost: CostStatus) -> dict[str, Any]:
    """The merge patch of ``status.cost``: optional keys the ledger dropped are nulled."""
    out: dict[str, Any] = cost.model_dump(by_alias=True, mode="json", exclude_none=True)
    for key in ("forecastUsd", "folded", "rolledUpFolded", "overBudget"):
        out.setdefault(key, None)
    return out


def _settled(job: JobView) -> bool:
    """A finished job whose ledger has closed every attempt, its last one included: nothing more
    will accrue. (A ledger written while the attempt's pods had not started yet holds no entry
    for it: the attempt is still to be charged, from its pods' timestamps.)"""
    cost = job.status.cost
    return (
        job.phase in TERMINAL
        and cost is not None
        and any(a.attempt == job.status.attempt for a in cost.attempts)
        and all(a.end is not None for a in cost.attempts)
    )


def _final(job: JobView, cost: CostStatus, rollup_on: bool) -> bool:
    """Whether a settled job's ledger, as its status shows it, is one no step changes: no budget
    entry to clear (a finished job has none) and, with the rollup on, every attempt folded and
    marked (nothing left to fold, mark or keep open beside the rollup)."""
    return cost.over_budget is None and (not rollup_on or all(a.rolled_up for a in cost.attempts))


def _shape(cost: CostStatus | None) -> tuple[object, ...]:
    """What must reach status at once: an attempt that ended (or was folded into the rollup), a
    budget crossed. A new running attempt is not urgent: it is recomputed from its admission at
    every tick, and writing it at once cost one more status patch per admission in a burst."""
    if cost is None:
        return (None,)  # as an empty ledger: a job's first ledger is not urgent by itself
    policy = cost.over_budget.policy if cost.over_budget is not None else None
    # An ended attempt's pods' times too: its pods are released (their finalizer removed) once the
    # status holds them.
    return (
        policy,
        *(
            (a.attempt, a.end, a.preempted, a.rolled_up, a.pods_start, a.pods_end)
            for a in cost.attempts
            if a.end is not None or a.rolled_up or a.pods_end is not None
        ),
    )


def _figure(cost: CostStatus | None) -> float:
    """The spend a ledger shows (``spentUsd``, the job's cost column), to the cent."""
    return round(cost.spent_usd, 2) if cost is not None else 0.0


URGENT, DUE = "urgent", "due"
# Seconds after its write within which a ledger the watch does not show yet is not written again:
# far above a healthy watch's delay (well under a second), short enough that a ledger another
# write replaced is restored within a few ticks.
RESHOW_SECONDS = 5.0
# Pods released (their ledger finalizer removed) per step at most: a burst of ended attempts
# waits a few ticks rather than holding the step.
RELEASES_PER_STEP = 200


def _same(a: CostStatus | None, b: CostStatus) -> bool:
    """Whether two ledgers are equal but for when they were computed (compared as models: no
    dump of either, four comparisons a job a step)."""
    if a is None:
        return False
    if a is b:
        return True
    # As ``a.model_copy(update={"updated": b.updated}) == b`` compares them (same type, extra
    # fields and fields), without the copy: every running job's ledger was copied twice a step.
    return (
        type(a) is type(b)
        and (a.__pydantic_extra__ or {}) == (b.__pydantic_extra__ or {})
        and {**a.__dict__, "updated": b.updated} == b.__dict__
    )


@dataclass
class Accountant:
    # The scheduler it reads the jobs through: its settings (cost_interval_seconds, cost_write_seconds,
    # cost_writes_per_second, the rollup's names), metrics, catalog and clock are this accountant's too.
    scheduler: Scheduler
    writer: JobWriter
    costs: CostWriter
    prices: PriceBook
    _every: float = 0.0  # this step's interval
    _now: dt.datetime = field(init=False)  # this step's time
    known: dict[str, CostStatus] = field(default_factory=dict)  # job uid -> what this process wrote
    written_at: dict[str, float] = field(default_factory=dict)  # job uid -> monotonic time of that write
    live: dict[str, bool] = field(default_factory=dict)  # pool -> PriceLive as last written
    # policy name -> (its uid, the status.ledger and status.spend this process wrote last): the
    # base of the next step until the watch shows a newer revision (never an older copy).
    policy_known: dict[str, tuple[str, SpendLedger, list[TeamSpend]]] = field(default_factory=dict)
    released: dict[tuple[str, str], float] = field(default_factory=dict)  # pod -> monotonic time of its release
    # uid -> a finished job's period figures and what a policy carries of it, kept while its ledger
    # is the same object (a settled job costs a lookup a step); memory only, cleared with the lease.
    spend_memo: teamspend.Memo = field(default_factory=dict)
    final_spend: dict[str, teamspend.LiveJob] = field(default_factory=dict)  # seen deleted this step
    # The durable rollup (ConfigMap ``rollup_name`` in ``rollup_namespace``; empty name: off), as
    # last read or written, and the resourceVersion it is at.
    stored: CostRollup | None = None
    rollup_version: str | None = None
    # uid -> (who, its ledger as the last step computed it): a job missing from the next snapshot
    # was deleted, and is folded from this.
    previous: dict[str, tuple[rollup.JobId, CostStatus]] = field(default_factory=dict)
    # uid -> (who, its ledger closed at the deletion, when): deleted jobs not folded yet.
    gone: dict[str, tuple[rollup.JobId, CostStatus, dt.datetime]] = field(default_factory=dict)
    deleted_at: dict[str, dt.datetime] = field(default_factory=dict)  # uid -> when the DELETED event came
    # uid -> (who, its ledger as last computed, the last step that saw it run): deleted jobs whose
    # workload or pods run on (an orphaning deletion), charged until they stop (the sweep deletes them).
    orphaned: dict[str, tuple[rollup.JobId, CostStatus, dt.datetime]] = field(default_factory=dict)
    # The open attempts (not folded yet) as last read or written, per shard ConfigMap
    # ``<rollup_name>-open-<i>``, and the resourceVersion each is at: None until read.
    open_shards: list[OpenShard] | None = None
    open_versions: list[str | None] = field(default_factory=list)
    # uid -> (a ledger, the attempts the rollup holds of it, its live figures by pool) as the last
    # step's counters summed them: a settled job's ledger is the same object step after step, and
    # its figures are not walked again (a walk of every interval of every job was most of a step).
    by_pool: dict[str, tuple[CostStatus, tuple[int, ...], ByPool]] = field(default_factory=dict)
    # uid -> the running job's last accrual (``accrual.step``): its open interval is extended
    # while nothing but the time moved. Memory only, and only a shortcut: a ledger that is not
    # one this process computed or wrote (a restart, another writer) is recomputed in full.
    accrued: dict[str, accrual.Memo] = field(default_factory=dict)
    _memo_keys: dict[str, JobKey] = field(default_factory=dict)  # uid -> its job, for the step's end
    # uid -> the view of a job whose ledger is final and shown (``_settled``, ``_final``), as the step found
    # it: while the job's view is that same object, its ledger needs no accrual, no write and no
    # mark, and its figures are in ``carry``. Memory only, and only a shortcut: a new view of
    # the job (any event), its deletion, or a restart puts it through the full check again.
    stable: dict[str, JobView] = field(default_factory=dict)
    _stable_keys: set[JobKey] = field(default_factory=set)  # this step's stable jobs, by key
    _unchanged: set[JobKey] = field(default_factory=set)  # of them, those of the same view as the last step
    _fresh: list[str] = field(default_factory=list)  # of them, those found stable by the full check
    # uid -> (team, a stable job's ledger, its figures by pool): the counters' share of the
    # stable jobs, summed once into ``carry_sum`` ((team, pool, capacity) -> [spent, lost,
    # idle]) instead of at every step. Rebuilt from the ledgers when any job leaves it, so a
    # restart (empty) or a change counts nothing twice.
    carry: dict[str, tuple[str, CostStatus, ByPool]] = field(default_factory=dict)
    carry_sum: dict[CostKey, list[float]] = field(default_factory=dict)
    _jobs: dict[JobKey, JobView] = field(default_factory=dict)  # this step's snapshot's jobs, as a plain dict
    _uids: frozenset[str] = frozenset()  # and their uids

    def __post_init__(self) -> None:
        self._now = self.scheduler.clock.now()

    @property
    def settings(self) -> OperatorSettings:
        return self.scheduler.settings

    @property
    def metrics(self) -> OperatorMetrics:
        return self.scheduler.metrics

    def job_deleted(self, job: JobView) -> None:
        """An AcceleratorJob was deleted (the jobs informer saw it go): its open attempt is
        charged up to now. With no finalizer a deletion is immediate, so the event comes within
        the watch's delay of it."""
        if job.uid and len(self.deleted_at) < 100_000:
            self.deleted_at[job.uid] = self.scheduler.clock.now()

    async def run(self, stop: asyncio.Event | None = None) -> None:
        pause = self.settings.cost_interval_seconds
        while stop is None or not stop.is_set():
            await asyncio.sleep(pause)
            sched = self.scheduler
            if not sched.can_act() or not sched.elector.leading():
                # What a later leadership would find gone is not known from here: a job seen
                # last long ago may have ended since (its old ledger must not be closed at its
                # deletion). Deletions while not leading are those of an operator that was down.
                self.previous.clear()
                self.deleted_at.clear()
                self.orphaned.clear()
                self.accrued.clear()  # another leader's ledgers: recomputed in full when leading again
                self.spend_memo.clear()
                self.stable.clear()
                continue
            t0 = self.scheduler.clock.monotonic()
            try:
                await self.step(self.scheduler.clock.now())
            except calls.NotLeading:
                # The Lease was lost during the step: its remaining writes were dropped, and what
                # this process held in memory is the new leader's to rebuild from the cluster.
                self.metrics.fenced_writes.inc()
                log.info("cost step stopped: this replica no longer holds the lease; its writes were dropped")
                self.forget()
            except Exception:  # one bad step must not stop accounting for good
                self.metrics.reconcile_errors.labels("cost").inc()
                log.exception("cost accrual step failed; retrying on the next tick")
            # Accounting never takes more than a fifth of the process's time from scheduling.
            pause = max(self.settings.cost_interval_seconds, 4 * (self.scheduler.clock.monotonic() - t0))

    def forget(self) -> None:
        """Drop what this process knows beyond the cluster (a lost Lease): read again when leading."""
        self.accrued.clear()
        self.spend_memo.clear()
        self.stable.clear()
        self.previous.clear()
        self.deleted_at.clear()
        self.gone.clear()
        self.stored, self.rollup_version = None, None
        self.open_shards, self.open_versions = None, []

    def _fenced(self, fn: Callable[..., T]) -> Callable[..., T]:
        """``fn``, called only while this replica holds the Lease (``calls.fenced``)."""
        return calls.fenced(self.scheduler.elector.leading, fn)

    def _quote(self, snap: Snapshot, pool_name: str, quotes: dict[str, Quote | None]) -> Quote | None:
        if pool_name not in quotes:
            pool = snap.pools.get(pool_name)
            accel = self.scheduler.catalog.get(pool.spec.accelerator) if pool is not None else None
            quotes[pool_name] = self.prices.quote(pool.spec, accel) if pool is not None and accel is not None else None
        return quotes[pool_name]

    def _shown(self, job: JobView) -> bool:
        """Whether the job's status holds what this process wrote last of it (or it wrote none).
        Once the two are found equal, the status's copy stands for what was written, so the next
        step finds them the same object instead of comparing every interval of the two again (a
        settled job's ledger was compared whole at every step)."""
        known = self.known.get(job.uid)
        stored = job.status.cost
        if known is None or known is stored:
            return True
        if known != stored:
            return False
        self.known[job.uid] = stored  # equal to a ledger: not None
        return True

    def _compute(
        self, snap: Snapshot, now: dt.datetime
    ) -> tuple[
        dict[JobKey, CostStatus],
        dict[str, teamspend.Step],
        list[tuple[JobKey, CostStatus, OverBudget | None]],
        dict[str, Quote | None],
    ]:
        """The CPU (and live price) part of a step, run in a thread so the event loop stays free."""
        stale_after = self.scheduler.settings.report_stale_seconds
        self._now = now
        running = sum(1 for job in self._jobs.values() if job.phase in HOLDING)
        self._every = max(self.settings.cost_write_seconds, running / self.settings.cost_writes_per_second)
        quotes: dict[str, Quote | None] = {}
        ledgers: dict[JobKey, CostStatus] = {}
        by_label = {label_value(name): name for name in snap.pools}

        def pool_of(label: str) -> accrual.PoolPrice | None:
            """The pool a pod's accel.dev/pool label names, its capacity type and price now."""
            name = by_label.get(label)
            quote = self._quote(snap, name, quotes) if name is not None else None
            if name is None or quote is None:
                return None
            price = accrual.Price(quote.usd_per_device_hour, quote.on_demand_usd_per_device_hour)
            return accrual.PoolPrice(name, snap.pools[name].spec.capacity_type, price)

        memos: dict[str, tuple[JobKey, accrual.Memo]] = {}
        stable: dict[str, JobView] = {}
        stable_keys: set[JobKey] = set()
        unchanged: set[JobKey] = set()
        fresh: list[str] = []
        rollup_on = bool(self.settings.cost_rollup)
        for key, job in self._jobs.items():
            st = job.status
            if st.cost is None and st.admitted_time is None:
                continue
            pods = snap.pods_by_job.get(key, ())
            holding = any(p.held for p in pods)  # their times may still have to reach the ledger
            if not holding and self.stable.get(job.uid) is job:
                # The same view as when it was found final: the same ledger, nothing to do.
                ledgers[key] = st.cost  # type: ignore[assignment]  # stable: not None
                stable[job.uid] = job
                stable_keys.add(key)
                unchanged.add(key)
                continue
            if _settled(job) and not holding and self._shown(job):
                ledgers[key] = st.cost  # type: ignore[assignment]  # _settled: not None
                if _final(job, st.cost, rollup_on):  # type: ignore[arg-type]
                    stable[job.uid] = job
                    stable_keys.add(key)
                    fresh.append(job.uid)
                continue
            plan = st.plan
            quote = self._quote(snap, plan.pool, quotes) if plan is not None and plan.pool else None
            price = accrual.Price(quote.usd_per_device_hour, quote.on_demand_usd_per_device_hour) if quote else None
            idle = (
                accrual.idle_fraction(job, pods, snap.reports, plan.devices or 0, now=now, stale_after=stale_after)
                if plan is not None
                else 0.0
            )
            failure = st.last_failure
            held = failure.held if failure is not None else None
            failed = self._quote(snap, held.pool, quotes) if held is not None else None
            held_prices: dict[str, accrual.Price] = {}
            for earlier in st.earlier_failures:
                q = self._quote(snap, earlier.held.pool, quotes) if earlier.held is not None else None
                if q is not None and earlier.held is not None:
                    held_prices[earlier.held.pool] = accrual.Price(
                        q.usd_per_device_hour, q.on_demand_usd_per_device_hour
                    )
            tick = accrual.Tick(
                price,
                idle,
                now,
                workload=snap.workloads.get(
                    (job.namespace, st.workload or actions.workload_name(job.name, st.attempt))
                ),
                failed_price=accrual.Price(failed.usd_per_device_hour, failed.on_demand_usd_per_device_hour)
                if failed
                else None,
                held_prices=held_prices,
                pods=pods,
                pool_of=pool_of,
            )
            ledgers[key], memo = accrual.step(self.accrued.get(job.uid), job, self.known.get(job.uid), tick)
            if memo is not None:
                memos[job.uid] = (key, memo)
        self.stable, self._stable_keys, self._unchanged, self._fresh = stable, stable_keys, unchanged, fresh
        self.accrued = {uid: memo for uid, (_, memo) in memos.items()}
        self._memo_keys = {uid: key for uid, (key, _) in memos.items()}
        # Team spending per policy: the deleted jobs' settled figures and every live job's ledger;
        # what the policy carries for a job is its ledger as its status holds it after this step.
        chosen, kinds = self._choose(snap, ledgers)
        written = {key: ledgers[key] for key in chosen}
        live = self._live(snap, ledgers, written)
        steps = self._teams(snap, live, now)
        spends = {name: s.spend for name, s in steps.items()}
        writes: list[tuple[JobKey, CostStatus, OverBudget | None]] = []
        for key, accrued in list(ledgers.items()):
            if key in stable_keys:
                continue  # finished, no budget entry, shown: nothing to set or write
            job = self._jobs[key]
            before = job.status.cost.over_budget if job.status.cost is not None else None
            over = accrual.over_budget(job.team, spends, before, now) if job.phase in HOLDING else None
            cost = accrued if accrued.over_budget == over else accrued.model_copy(update={"over_budget": over})
            ledgers[key] = cost
            # Decided once a step (``_choose``) unless the budget entry changed the ledger since.
            kind = kinds.get(key) if cost is accrued else self._due(job, cost)
            if kind is URGENT or (kind is DUE and key in chosen):
                writes.append((key, cost, before))
        return ledgers, steps, writes, quotes

    def _due(self, job: JobView, cost: CostStatus) -> str | None:
        """Whether the job's ledger is written this step: ``URGENT`` when its shape (an end, a
        mark, a budget crossed) changed; ``DUE`` when it changed and was not written for this
        step's interval (or never); else None."""
        known = self.known.get(job.uid)
        if _same(job.status.cost, cost):
            return None
        if _same(known, cost):
            # This process wrote it and the watch does not show it: not yet (a lagging watch), or
            # no longer (a later write replaced it: a deposed replica's delayed patch). Written
            # again once the watch has had its time to show it.
            if self._age(job) < RESHOW_SECONDS:
                return None
            return URGENT
        if _shape(job.status.cost) != _shape(cost) or _shape(known) != _shape(cost):
            return URGENT
        if _figure(job.status.cost) == _figure(cost):
            # Nothing shown moved (a new attempt's forecast only, its pods not started or started
            # a few seconds ago): the ledger is recomputed from the pods' times after a restart,
            # so waiting for the spend to move loses nothing and saves a write per admission.
            return None
        return DUE if self._age(job) >= self._every else None

    def _age(self, job: JobView) -> float:
        """Seconds since the job's ledger was last written: by this process, else by whoever
        wrote the one its status holds (a restarted operator's backlog of jobs whose ledger is
        already stored does not go before a job that has none); never written: infinite."""
        last = self.written_at.get(job.uid)
        if last is not None:
            return self.scheduler.clock.monotonic() - last
        stored = job.status.cost
        if stored is not None and stored.updated is not None:
            return max(0.0, (self._now - parse_time_strict(stored.updated)).total_seconds())
        return math.inf

    def _choose(self, snap: Snapshot, ledgers: Mapping[JobKey, CostStatus]) -> tuple[set[JobKey], dict[JobKey, str]]:
        """The ledgers written this step: every urgent one, and of those due at most
        ``write_rate`` x the tick's interval, the longest unwritten first (a burst of new jobs
        is written over several ticks instead of one status patch per admission at once); and
        what ``_due`` found of each ledger that is urgent or due (the step's writes read it
        instead of deciding it again)."""
        kinds: dict[JobKey, str] = {}
        urgent: set[JobKey] = set()
        due: list[tuple[float, JobKey]] = []
        stable = self._stable_keys
        for key, cost in ledgers.items():
            if key in stable:
                continue  # its status holds this very ledger: never due
            job = self._jobs[key]
            kind = self._due(job, cost)
            if kind is None:
                continue
            kinds[key] = kind
            if kind is URGENT:
                urgent.add(key)
            elif kind is DUE:
                due.append((self._age(job), key))
        room = max(1, int(self.settings.cost_writes_per_second * self.settings.cost_interval_seconds))
        due.sort(key=lambda item: -item[0])  # the oldest (never written: infinite) first
        return urgent | {key for _, key in due[:room]}, kinds

    def _live(
        self, snap: Snapshot, ledgers: Mapping[JobKey, CostStatus], written: Mapping[JobKey, CostStatus]
    ) -> list[teamspend.LiveJob]:
        out = []
        for key, cost in ledgers.items():
            job = self._jobs[key]
            shown = written.get(key) or self.known.get(job.uid) or job.status.cost or CostStatus()
            out.append(teamspend.LiveJob(job.uid, job.team, cost, written=shown))
        for uid, (who, cost) in self._orphans().items():  # carried until its close is folded
            out.append(teamspend.LiveJob(uid, who.team, cost, written=cost))
        return out

    def _orphans(self) -> dict[str, tuple[rollup.JobId, CostStatus]]:
        """The deleted jobs whose orphaned workload runs on, each ledger charged up to the last
        step that saw it run (what it is known to have spent so far)."""
        return {uid: (who, accrual.at_deletion(cost, seen)) for uid, (who, cost, seen) in self.orphaned.items()}

    def _teams(self, snap: Snapshot, live: list[teamspend.LiveJob], now: dt.datetime) -> dict[str, teamspend.Step]:
        existing = self._uids | set(self.orphaned)
        steps: dict[str, teamspend.Step] = {}
        for pol in snap.policy.policies:
            name, uid = pol.metadata.name or "", pol.metadata.uid or ""
            watched = pol.status.ledger if pol.status is not None else None
            mine = self.policy_known.get(name)
            base = teamspend.newest(mine[1] if mine is not None and mine[0] == uid else None, watched)
            steps[name] = teamspend.step(
                pol.spec, base, live, existing, now, memo=self.spend_memo, final=self.final_spend
            )
        for uid in set(self.spend_memo) - existing:
            del self.spend_memo[uid]
        return steps

    async def step(self, now: dt.datetime) -> None:
        t0 = self.scheduler.clock.monotonic()
        snap = self.scheduler.current(now)
        # The snapshot's jobs read once into a plain dict: a lookup in its view walks the view's
        # change log, and the step looked every job up five or six times.
        self._jobs = dict(snap.jobs.items())
        self._uids = frozenset(job.uid for job in self._jobs.values())
        self._note_gone(snap, now)
        ledgers, steps, writes, quotes = await asyncio.to_thread(self._compute, snap, now)
        ledgers, writes = await self._fold(snap, ledgers, writes, now)
        for uid, memo in self.accrued.items():
            memo.final = ledgers.get(self._memo_keys[uid])  # what is written: the next step's base
        await asyncio.gather(*(self._write_job(snap, key, cost, before) for key, cost, before in writes))
        if any(self.known.get(self._jobs[key].uid) is not cost for key, cost, _ in writes):
            # A job's write failed: the policies carry its ledger as its status still holds it.
            live = self._live(snap, ledgers, {})
            steps = await asyncio.to_thread(self._teams, snap, live, now)
        await self._write_policies(snap, steps)
        await self._release_pods(snap, now)
        self.final_spend.clear()
        await self._pool_conditions(snap, quotes, now)
        self._counters(snap, ledgers)
        self.metrics.accrual_seconds.observe(self.scheduler.clock.monotonic() - t0)

    # --- the durable rollup -------------------------------------------------------------------------

    def _note_gone(self, snap: Snapshot, now: dt.datetime) -> None:
        """Jobs the last step computed that the snapshot no longer holds were deleted: each is
        closed at its deletion (the DELETED event's time, else now) and queued for the rollup
        and the policies' settled totals."""
        uids = self._uids
        candidates = {uid: (who, cost) for uid, (who, cost, _) in self.orphaned.items()}
        candidates.update(self.previous)
        for uid, (who, cost) in candidates.items():
            if uid in uids or uid in self.gone:
                self.orphaned.pop(uid, None)
                continue
            if _left_running(snap, (who.namespace, who.name), uid):
                if uid not in self.orphaned:
                    log.info(
                        "job %s/%s deleted but its workload runs on: charged until it stops", who.namespace, who.name
                    )
                self.orphaned[uid] = (who, cost, now)
                continue
            end = self.deleted_at.get(uid, now)
            how = "its DELETED event" if uid in self.deleted_at else "when it was seen gone"
            orphan = self.orphaned.pop(uid, None)
            if orphan is not None:
                # Its orphaned workload ran past the deletion: charged until the sweep deleted it
                # or, later, the last step that saw it run (its pods' termination grace).
                swept = self.scheduler.applier.swept_gone.get((who.namespace, who.name), end)
                end = max(end, swept, orphan[2])
                how = "its orphaned workload stopped"
            end = min(end, now)
            log.info("job %s/%s deleted: its open attempt is charged up to %s (%s)", who.namespace, who.name, end, how)
            closed = accrual.at_deletion(cost, end)
            self.gone[uid] = (who, closed, end)
            self.final_spend[uid] = teamspend.LiveJob(uid, who.team, closed)
        for uid in [u for u in self.deleted_at if (u not in self.previous and u not in self.orphaned) or u in uids]:
            if now - self.deleted_at[uid] > dt.timedelta(hours=1):
                del self.deleted_at[uid]

    async def _load_rollup(self) -> bool:
        if not self.settings.cost_rollup:
            return False
        if self.stored is not None:
            return True
        try:
            self.stored, self.rollup_version = await asyncio.to_thread(
                self.costs.read_rollup, self.settings.cost_rollup_namespace, self.settings.cost_rollup
            )
        except ClusterUnavailable as exc:
            where = f"{self.settings.cost_rollup_namespace}/{self.settings.cost_rollup}"
            log.warning("cost rollup %s not read: %s", where, exc)
            return False
        return True

    async def _fold(
        self,
        snap: Snapshot,
        ledgers: dict[JobKey, CostStatus],
        writes: list[tuple[JobKey, CostStatus, OverBudget | None]],
        now: dt.datetime,
    ) -> tuple[dict[JobKey, CostStatus], list[tuple[JobKey, CostStatus, OverBudget | None]]]:
        """Fold the ended attempts and the deleted jobs into the rollup, write it, then mark the
        folded attempts in the jobs' ledgers (they are written with the mark this step)."""
        last, self.previous = self.previous, {}
        unchanged = self._unchanged
        for key, cost in ledgers.items():
            job = self._jobs[key]
            seen = last.get(job.uid) if key in unchanged else None
            if seen is not None and seen[1] is cost:
                self.previous[job.uid] = seen  # a stable job: the same ledger, the same entry
                continue
            who = rollup.JobId(job.uid, job.namespace, job.name, job.team, cost.forecast_usd)
            self.previous[job.uid] = (who, cost)
        if not await self._load_rollup():
            if not self.settings.cost_rollup:
                self.gone.clear()
            return ledgers, writes
        assert self.stored is not None
        value = self.stored
        pending = rollup.pending_of(value)
        items: list[rollup.FoldItem] = []
        for key, cost in ledgers.items():
            job = self._jobs[key]
            ended = rollup.foldable(cost, pending.get(job.uid, ()))
            if ended and job.uid in self.previous:
                items.append(rollup.item(self.previous[job.uid][0], ended))
        for uid, (who, cost, end) in sorted(self.gone.items()):
            items.append(rollup.item(who, rollup.unfolded(cost, pending.get(uid, ())), gone=end, summary=cost))
        vanished: list[rollup.FoldItem] = []
        if await self._load_open():
            assert self.open_shards is not None
            entries = [e for shard in self.open_shards for e in shard.attempts]
            vanished = rollup.vanished(entries, self._uids, skip={*self.gone, *self.orphaned})
            items.extend(vanished)
        value = rollup.fold_many(value, items)
        marked = {
            job.uid: [a.attempt for a in job.status.cost.attempts if a.rolled_up]
            for job in self._jobs.values()
            if job.status.cost is not None
        }
        # The jobs the open attempts as stored still hold keep their keys (folded from there again
        # otherwise, by the next leader).
        in_open = {e.uid for shard in self.open_shards or () for e in shard.attempts}
        existing = set(self._uids)
        value = rollup.prune(value, marked, existing, now, held=in_open, gone_max=self.settings.cost_rollup_gone)
        value = rollup.bound(value, now)
        if value is not self.stored:
            try:
                self.rollup_version = await asyncio.to_thread(
                    self._fenced(self.costs.write_rollup),
                    self.settings.cost_rollup_namespace,
                    self.settings.cost_rollup,
                    value,
                    self.rollup_version,
                )
            except RollupConflict as exc:
                log.info("cost rollup not written: %s; reading it again", exc)
                self.stored = None
                await self._load_rollup()  # folded next step, on what is there now
                return ledgers, writes
            except ClusterUnavailable as exc:
                # Until a write succeeds, the deleted jobs' money is in this process's memory only.
                self.metrics.rollup_write_failures.inc()
                log.warning(
                    "cost rollup %s/%s not written (%d bytes, %d deleted job(s) held in memory only): %s",
                    self.settings.cost_rollup_namespace,
                    self.settings.cost_rollup,
                    rollup.size(value),
                    len(self.gone),
                    exc,
                )
                return ledgers, writes
            self.stored = value
            if self.gone:
                log.info("%d deleted job(s) folded into the cost rollup", len(self.gone))
            for lost in vanished:
                log.info(
                    "job %s/%s was deleted while no operator saw it: its open attempt(s) folded as accrued through %s",
                    lost.job.namespace,
                    lost.job.name,
                    lost.gone,
                )
            self.gone.clear()
        # Every attempt the rollup holds is marked in its job's ledger (written this step; a mark
        # whose write failed is made again next step, as the key stays pending until then).
        pending = rollup.pending_of(self.stored)
        out = {k: (c, b) for k, c, b in writes}
        for key, cost in list(ledgers.items()):
            job = self._jobs[key]
            held = pending.get(job.uid, frozenset())
            todo = [a.attempt for a in cost.attempts if a.attempt in held and not a.rolled_up]
            if not todo:
                continue
            marked_cost = ledger.mark_rolled_up(cost, todo)
            ledgers[key] = marked_cost
            before = out[key][1] if key in out else (job.status.cost.over_budget if job.status.cost else None)
            out[key] = (marked_cost, before)
            if job.uid in self.previous:
                self.previous[job.uid] = (self.previous[job.uid][0], marked_cost)
        await self._write_open(snap, ledgers, pending, now)
        return ledgers, [(k, c, b) for k, (c, b) in out.items()]

    async def _load_open(self) -> bool:
        """Read the open attempts' shards once (a new leader's first step)."""
        if self.open_shards is not None:
            return True
        names = [open_shard_name(self.settings.cost_rollup, i) for i in range(ROLLUP_OPEN_SHARDS)]
        namespace = self.settings.cost_rollup_namespace
        try:
            read = [await asyncio.to_thread(self.costs.read_open, namespace, n) for n in names]
        except ClusterUnavailable as exc:
            log.warning("open attempts of the cost rollup not read: %s", exc)
            return False
        self.open_shards = [shard for shard, _ in read]
        self.open_versions = [version for _, version in read]
        return True

    async def _write_open(
        self,
        snap: Snapshot,
        ledgers: Mapping[JobKey, CostStatus],
        pending: rollup.Folds,
        now: dt.datetime,
    ) -> None:
        """Keep every live job's attempts not in the rollup, as accrued now, beside the rollup (one
        write per shard that changed): a job deleted while no operator runs is folded from there."""
        if self.open_shards is None:
            return
        entries = []
        for key, cost in ledgers.items():
            job = self._jobs[key]
            who = rollup.JobId(job.uid, job.namespace, job.name, job.team, cost.forecast_usd)
            entries.extend(rollup.open_attempts(who, cost, pending.get(job.uid, ()), now))
        for uid, (who, cost) in self._orphans().items():  # deleted, still running: still open
            entries.extend(rollup.open_attempts(who, cost, pending.get(uid, ()), now))
        shards, dropped = await asyncio.to_thread(rollup.pack, entries)
        if dropped:
            log.warning("%d open attempt(s) do not fit beside the cost rollup: the smallest are not kept", dropped)
        for i, shard in enumerate(shards):
            if shard == self.open_shards[i] and (self.open_versions[i] is not None or not shard.attempts):
                continue  # unchanged (an empty shard that does not exist is not made)
            name = open_shard_name(self.settings.cost_rollup, i)
            try:
                self.open_versions[i] = await asyncio.to_thread(
                    self._fenced(self.costs.write_open),
                    self.settings.cost_rollup_namespace,
                    name,
                    shard,
                    self.open_versions[i],
                )
                self.open_shards[i] = shard
            except RollupConflict as exc:
                log.info("open attempts %s not written: %s; reading them again", name, exc)
                self.open_shards = None
                return
            except ClusterUnavailable as exc:
                log.info("open attempts %s not written: %s", name, exc)
                return

    async def _write_policies(self, snap: Snapshot, steps: Mapping[str, teamspend.Step]) -> None:
        """Each policy's spending and ledger in one status write (so a job is folded into the
        settled totals and dropped from the carried ones together), when they changed."""
        uids = {p.metadata.name or "": p.metadata.uid or "" for p in snap.policy.policies}
        for name, done in steps.items():
            for s in done.spend:
                self.metrics.budget_used.labels(name, s.team, s.period.value).set(s.used_fraction or 0.0)
            mine = self.policy_known.get(name)
            pol = next(p for p in snap.policy.policies if (p.metadata.name or "") == name)
            shown = pol.status is not None and (pol.status.ledger, pol.status.spend) == (done.ledger, done.spend)
            if shown or (mine is not None and (mine[1], mine[2]) == (done.ledger, done.spend)):
                continue
            wire = {
                "spend": [s.model_dump(by_alias=True, mode="json", exclude_none=True) for s in done.spend],
                "ledger": done.ledger.model_dump(by_alias=True, mode="json", exclude_none=True),
            }
            try:
                await asyncio.to_thread(self._fenced(self.costs.patch_policy_status), name, wire)
            except ClusterUnavailable as exc:
                log.info("spend of policy %s not written: %s", name, exc)
                continue
            self.policy_known[name] = (uids[name], done.ledger, done.spend)
            if done.folded:
                log.info("policy %s: %d deleted job(s) folded into the settled team totals", name, len(done.folded))
        for name in set(self.policy_known) - set(uids):
            del self.policy_known[name]

    async def _write_job(self, snap: Snapshot, key: JobKey, cost: CostStatus, before: OverBudget | None) -> None:
        job = self._jobs[key]
        ref = JobRef(job.namespace, job.name, job.uid, job.resource_version or None)
        try:
            # Behind every admission's writes: the ledger is bookkeeping, a burst of it waits. Not
            # while a decision of the job is being written (the next step writes it), and at the
            # version this process last wrote: the two never conflict.
            if not await self.scheduler.background_status(
                self.writer.patch_status, job, {"cost": _wire(cost)}, {"cost": cost}
            ):
                return
            self.known[job.uid] = cost
            self.written_at[job.uid] = self.scheduler.clock.monotonic()
            over = cost.over_budget
            if over is not None and (before is None or before.policy != over.policy):
                message = (
                    f"team {job.team or '?'} is over its {over.period.value} budget in policy "
                    f"{over.policy}: ${over.spent_usd:,.2f} of ${over.limit_usd:,.2f}; the job keeps running"
                )
                await asyncio.to_thread(self._fenced(self.writer.event), ref, "Warning", "OverBudget", message)
        except JobGone:
            self.known.pop(job.uid, None)
            self.written_at.pop(job.uid, None)
        except ClusterUnavailable as exc:
            log.info("cost of %s/%s not written: %s", job.namespace, job.name, exc)
        if len(self.known) > 4 * max(1, len(snap.jobs)) + 1000:
            uids = {j.uid for j in snap.jobs.values()}
            self.known = {u: c for u, c in self.known.items() if u in uids}
            self.written_at = {u: t for u, t in self.written_at.items() if u in uids}

    async def _release_pods(self, snap: Snapshot, now: dt.datetime) -> None:
        """Remove ``vocabulary.FINALIZER_LEDGER`` from the pods whose times the ledger holds, as
        the status shows it (``accrual.releasable``): at most ``RELEASES_PER_STEP`` a step, a pod
        patched once per ``RESHOW_SECONDS`` while the watch has not shown the change."""
        clock = self.scheduler.clock.monotonic()
        self.released = {k: t for k, t in self.released.items() if clock - t < RESHOW_SECONDS}
        todo: list[tuple[str, str]] = []
        for key, pods in snap.pods_by_job.items():
            if not any(p.held for p in pods):
                continue
            job = self._jobs.get(key)
            cost = job.status.cost if job is not None else None
            for pod in accrual.releasable(cost, pods, now, job_gone=job is None):
                if (pod.namespace, pod.name) not in self.released:
                    todo.append((pod.namespace, pod.name))
        todo = todo[:RELEASES_PER_STEP]
        release = self._fenced(self.scheduler.applier.workloads.release_pod)

        async def one(namespace: str, name: str) -> None:
            try:
                await asyncio.to_thread(release, namespace, name)
                self.released[(namespace, name)] = clock
            except (ClusterUnavailable, WorkloadRejected) as exc:
                log.info("pod %s/%s not released: %s", namespace, name, exc)

        await asyncio.gather(*(one(ns, name) for ns, name in todo))

    async def _pool_conditions(self, snap: Snapshot, quotes: Mapping[str, Quote | None], now: dt.datetime) -> None:
        for name, quote in sorted(quotes.items()):
            pool = snap.pools.get(name)
            if quote is None or pool is None or pool.spec.price.source.value != "live":
                continue
            live = quote.fallback is None
            self.metrics.price_live.labels(name).set(1 if live else 0)
            if not live:
                self.metrics.price_fallbacks.labels(name).inc()
            if self.live.get(name) == live:
                continue
            condition = {
                "type": "PriceLive",
                "status": "True" if live else "False",
                "reason": "LivePrice" if live else "FellBackToStaticPrice",
                "message": (quote.fallback or f"priced from the {quote.source} source")[:1000],
                "lastTransitionTime": stamp_exact(now.replace(microsecond=0)),
            }
            try:
                await asyncio.to_thread(self._fenced(self.costs.patch_pool_status), name, {"conditions": [condition]})
                self.live[name] = live
            except ClusterUnavailable as exc:
                log.info("price condition of pool %s not written: %s", name, exc)

    def _counters(self, snap: Snapshot, ledgers: Mapping[JobKey, CostStatus]) -> None:
        """The cost counters: the rollup (everything folded) plus each live job's unfolded
        attempts. With the rollup on but unread, the counters keep their last values (a counter
        that dropped the folded money would go down)."""
        self._carry()
        if self.settings.cost_rollup and self.stored is None:
            return
        spent: dict[CostKey, float] = {}
        lost: dict[CostKey, float] = {}
        idle: dict[CostKey, float] = {}
        for (team, pool, capacity), t in rollup.counters(self.stored).items():
            k = (team, pool, capacity.value)
            spent[k] = spent.get(k, 0.0) + t.spent_usd
            lost[k] = lost.get(k, 0.0) + t.lost_to_preemption_usd
            idle[k] = idle.get(k, 0.0) + t.idle_usd
        pending = rollup.pending_of(self.stored)
        live: list[tuple[str, str, CostStatus]] = [
            (uid, who.team, cost)
            for uid, (who, cost, _) in self.gone.items()  # deleted, not folded yet
        ]
        live += [(uid, who.team, cost) for uid, (who, cost) in self._orphans().items()]
        for key, cost in ledgers.items():
            if key in self._stable_keys:
                continue  # in the carry
            job = self._jobs[key]
            live.append((job.uid, job.team, cost))
        for k, (s, lo, i) in self.carry_sum.items():
            spent[k] = spent.get(k, 0.0) + s
            lost[k] = lost.get(k, 0.0) + lo
            idle[k] = idle.get(k, 0.0) + i
        memo: dict[str, tuple[CostStatus, tuple[int, ...], ByPool]] = {}
        for uid, team, cost in live:
            folds = pending.get(uid, ())
            marks = tuple(a.attempt for a in cost.attempts if a.attempt in folds)  # all that live_by_pool reads of them
            seen = self.by_pool.get(uid)
            if seen is not None and seen[0] is cost and seen[1] == marks:
                by_pool = seen[2]  # the same ledger object with the same folds: the same figures
            else:
                by_pool = rollup.live_by_pool(cost, folds)
            memo[uid] = (cost, marks, by_pool)
            for (pool, capacity), t in by_pool.items():
                k = (team, pool, capacity.value)
                spent[k] = spent.get(k, 0.0) + t.spent_usd
                lost[k] = lost.get(k, 0.0) + t.lost_to_preemption_usd
                idle[k] = idle.get(k, 0.0) + t.idle_usd
        self.by_pool = memo
        self.metrics.cost.set(spent, lost, idle)

    def _carry(self) -> None:
        """Bring ``carry`` to this step's stable jobs: each one found stable by the full check is
        added once (its figures walked once), unless the carry holds an equal ledger of it; when
        one left (a new view that is not final, a deletion) or came back with another ledger, the
        sums are made again from what the carry holds (never subtracted: no drift, and what a
        restart's first step sums from the ledgers)."""
        left = self.carry.keys() - self.stable.keys()
        rebuild = bool(left)
        for uid in left:
            del self.carry[uid]
        added: list[tuple[str, ByPool]] = []
        fresh = [uid for uid in self._fresh if uid in self.stable]
        if len(self.carry.keys() | fresh) != len(self.stable):
            fresh = list(self.stable)  # a step that stopped before its counters: every one checked
        for uid in fresh:
            job = self.stable[uid]
            cost = job.status.cost
            assert cost is not None  # stable: a shown ledger
            kept = self.carry.get(uid)
            if kept is not None and kept[0] == job.team and (kept[1] is cost or kept[1] == cost):
                continue
            # Every attempt ended and none is in the rollup's pending keys (rollup off) or every
            # one is folded (on): its unfolded figures do not depend on the rollup.
            by_pool = rollup.live_by_pool(cost, rollup.NONE_FOLDED)
            rebuild = rebuild or kept is not None
            self.carry[uid] = (job.team, cost, by_pool)
            added.append((job.team, by_pool))
        if rebuild:
            self.carry_sum = {}
            added = [(team, by_pool) for team, _, by_pool in self.carry.values()]
        for team, by_pool in added:
            for (pool, capacity), t in by_pool.items():
                acc = self.carry_sum.setdefault((team, pool, capacity.value), [0.0, 0.0, 0.0])
                acc[0] += t.spent_usd
                acc[1] += t.lost_to_preemption_usd
                acc[2] += t.idle_usd
