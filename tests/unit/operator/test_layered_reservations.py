"""The reservations a pass adds onto a snapshot (snapshot._Layered): each view is the mapping a
plain dict copy would be, whether admissions chain, branch from an older view or re-add a key;
and a pool's reservations read by the holders index match a scan of every one."""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Mapping

from accel_operator.reconcile.common.snapshot import JobKey, Reservation, Snapshot, _Layered


def _r(name: str, nodes: int) -> Reservation:
    return Reservation(("ns", name), "pool", nodes, 8)


def _same(view: Mapping[JobKey, Reservation], want: dict[JobKey, Reservation]) -> None:
    assert dict(view) == want
    assert len(view) == len(want)
    assert list(view) == list(view.keys())
    assert set(view) == set(want)
    for k, v in want.items():
        assert k in view and view[k] == v
    assert ("ns", "absent") not in view


def test_a_chain_of_admissions_shares_one_log_and_each_view_keeps_what_it_saw() -> None:
    base = {("ns", "a"): _r("a", 1)}
    views: list[Mapping[JobKey, Reservation]] = [base]
    wants = [dict(base)]
    for i in range(50):
        key, r = ("ns", f"j{i}"), _r(f"j{i}", i + 1)
        views.append(_Layered.on(views[-1], key, r))
        wants.append({**wants[-1], key: r})
    for view, want in zip(views, wants, strict=True):
        _same(view, want)
    last = views[-1]
    assert isinstance(last, _Layered) and len(last._log) == 50  # one log, not a copy per admission


def test_a_branch_from_an_older_view_does_not_leak_into_it_or_its_sibling() -> None:
    v0 = _Layered.on({}, ("ns", "a"), _r("a", 1))
    v1 = _Layered.on(v0, ("ns", "b"), _r("b", 2))
    v2 = _Layered.on(v0, ("ns", "c"), _r("c", 3))  # branches: v0 is no longer the log's newest
    _same(v0, {("ns", "a"): _r("a", 1)})
    _same(v1, {("ns", "a"): _r("a", 1), ("ns", "b"): _r("b", 2)})
    _same(v2, {("ns", "a"): _r("a", 1), ("ns", "c"): _r("c", 3)})


def test_re_adding_a_key_replaces_it_in_the_new_view_only() -> None:
    base = {("ns", "a"): _r("a", 1)}
    v1 = _Layered.on(base, ("ns", "b"), _r("b", 2))
    v2 = _Layered.on(v1, ("ns", "b"), _r("b", 4))
    v3 = _Layered.on(v2, ("ns", "a"), _r("a", 5))  # overrides a key of the base
    _same(v1, {("ns", "a"): _r("a", 1), ("ns", "b"): _r("b", 2)})
    _same(v2, {("ns", "a"): _r("a", 1), ("ns", "b"): _r("b", 4)})
    _same(v3, {("ns", "a"): _r("a", 5), ("ns", "b"): _r("b", 4)})


def test_random_chains_and_branches_match_dict_copies() -> None:
    rnd = random.Random(9)
    views: list[Mapping[JobKey, Reservation]] = [{("ns", "x"): _r("x", 1)}]
    wants = [dict(views[0])]
    for i in range(400):
        at = len(views) - 1 if rnd.random() < 0.7 else rnd.randrange(len(views))
        name = f"k{rnd.randrange(40)}"
        key, r = ("ns", name), _r(name, i + 1)
        views.append(_Layered.on(views[at], key, r))
        wants.append({**wants[at], key: r})
    for view, want in zip(views, wants, strict=True):
        assert dict(view) == want and len(view) == len(want)


def test_a_pools_reservations_by_the_holders_index_match_a_scan() -> None:
    """``Snapshot.reservations_in`` (what ``decide.blocked_for`` reads per waiting head) answers
    from the holders index and the pass's log what a scan of every reservation answers, through
    chains, branches and keys re-added in another pool."""
    rnd = random.Random(4)
    pools = ("p", "q", "r")
    base = {("ns", f"b{i}"): Reservation(("ns", f"b{i}"), rnd.choice(pools), 1, 8) for i in range(12)}
    holders = {p: frozenset(k for k, r in base.items() if r.pool == p) for p in pools}
    views: list[Mapping[JobKey, Reservation]] = [base]
    for i in range(120):
        under = rnd.choice(views[-3:])
        key = rnd.choice([*base, *(("ns", f"j{j}") for j in range(i))] or [("ns", "j0")])
        views.append(_Layered.on(under, key, Reservation(key, rnd.choice(pools), 1, 8)))
    for view in views:
        snap = Snapshot(dt.datetime(2026, 1, 1), {}, {}, {}, {}, {}, view, holders=holders)
        scan = Snapshot(dt.datetime(2026, 1, 1), {}, {}, {}, {}, {}, view)
        for pool in pools:
            assert sorted(map(repr, snap.reservations_in(pool))) == sorted(map(repr, scan.reservations_in(pool)))
            assert sorted(map(repr, scan.reservations_in(pool))) == sorted(
                repr(r) for r in view.values() if r.pool == pool
            )
