"""The informer's store and index (adapters/kube/informer.py): what a change, a deletion and a
re-listing do to them, and which changes are reported. The watch itself runs against the local
API server in tests/cluster/test_informer.py."""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterator
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from accel_operator.adapters.kube import informer
from accel_operator.adapters.kube.informer import Informer, ObjKey


def _informer(seen: list[tuple[ObjKey, Any, Any]]) -> Informer[tuple[str, int]]:
    def keys(key: ObjKey, view: tuple[str, int]) -> list[Hashable]:
        return [view[0], key[0]]  # by "node" and by namespace, as pods are by node and by job

    return Informer(
        "test",
        None,  # never called: apply() is the loop-side half
        "v1",
        "pods",
        view=lambda obj: None,
        keys=keys,
        on_change=lambda k, b, a: seen.append((k, b, a)),
    )


def test_a_change_moves_the_object_between_index_entries_and_is_reported_once() -> None:
    seen: list[tuple[ObjKey, Any, Any]] = []
    inf = _informer(seen)
    inf.apply([(("ns", "p"), ("n1", 1))])
    assert list(inf.index.get("n1", ())) == [("n1", 1)]
    inf.apply([(("ns", "p"), ("n2", 1))])
    assert "n1" not in inf.index and list(inf.index["n2"]) == [("n2", 1)]
    inf.apply([(("ns", "p"), ("n2", 1))])  # the same view again (a heartbeat): nothing to report
    assert seen == [(("ns", "p"), None, ("n1", 1)), (("ns", "p"), ("n1", 1), ("n2", 1))]
    inf.apply([(("ns", "p"), None)])
    assert inf.store == {} and dict(inf.index) == {}
    assert seen[-1] == (("ns", "p"), ("n2", 1), None)
    inf.apply([(("ns", "gone"), None)])  # deleting what was never kept reports nothing
    assert len(seen) == 3


def test_a_listing_deletes_what_it_does_not_hold() -> None:
    """An object deleted while the watch was down (no DELETED event ever comes) goes when the
    re-listing does not hold it; the first listing is what makes the informer 'listed'."""
    seen: list[tuple[ObjKey, Any, Any]] = []
    inf = _informer(seen)
    inf.apply([(("a", "1"), ("n1", 1)), (("a", "2"), ("n1", 2))], listing={("a", "1"), ("a", "2")})
    assert inf.listed and len(inf.store) == 2
    inf.apply([(("a", "1"), ("n1", 1))], listing={("a", "1")})
    assert set(inf.store) == {("a", "1")}
    assert seen[-1] == (("a", "2"), ("n1", 2), None)
    assert [k for k, _v in dict(inf.index).items()] == ["n1", "a"]


views = st.tuples(st.sampled_from(["n1", "n2", "n3"]), st.integers(0, 3))
ops = st.lists(
    st.tuples(st.sampled_from([("a", "x"), ("a", "y"), ("b", "x")]), st.none() | views),
    max_size=30,
)


@given(ops)
def test_the_index_always_equals_one_built_from_the_store(changes: list[tuple[ObjKey, Any]]) -> None:
    seen: list[tuple[ObjKey, Any, Any]] = []
    inf = _informer(seen)
    for change in changes:
        inf.apply([change])
    expected: dict[Hashable, dict[ObjKey, Any]] = {}
    for key, view in inf.store.items():
        for k in (view[0], key[0]):
            expected.setdefault(k, {})[key] = view
    assert {k: sorted(v) for k, v in inf.index.items()} == {k: sorted(v.values()) for k, v in expected.items()}
    # Every reported change, replayed, gives the store.
    replay: dict[ObjKey, Any] = {}
    for key, before, after in seen:
        assert replay.get(key) == before
        if after is None:
            replay.pop(key, None)
        else:
            replay[key] = after
    assert replay == inf.store


def test_the_operators_namespaces_choose_the_watches_as_kopf_would() -> None:
    from accel_operator.handlers.informers import for_namespaces

    def make(patterns: list[str]) -> list[Informer[Any]]:
        return for_namespaces(
            "pods",
            None,
            "v1",
            "pods",
            patterns,
            view=lambda o: o["metadata"]["name"],
            keys=lambda k, v: [k],
            on_change=print,
        )

    (every,) = make([])
    assert every.path == "/api/v1/pods"
    a, b = make(["team-b", "team-a"])
    assert [a.path, b.path] == ["/api/v1/namespaces/team-a/pods", "/api/v1/namespaces/team-b/pods"]
    assert a.store is b.store and a.index is b.index
    # A listing of team-a stands for team-a only: team-b's objects stay.
    a.apply([(("team-a", "x"), "x")], listing={("team-a", "x")})
    b.apply([(("team-b", "y"), "y")], listing={("team-b", "y")})
    a.apply([], listing=set())
    assert a.store == {("team-b", "y"): "y"}
    (pattern,) = make(["team-*,!team-secret"])  # one pattern: a glob less an exclusion
    assert pattern.path == "/api/v1/pods"
    assert pattern.view({"metadata": {"name": "p", "namespace": "team-x"}}) == "p"
    assert pattern.view({"metadata": {"name": "p", "namespace": "team-secret"}}) is None
    assert pattern.view({"metadata": {"name": "p", "namespace": "other"}}) is None
    (workloads,) = for_namespaces(
        "w",
        None,
        "batch/v1",
        "jobs",
        [],
        view=lambda o: None,
        keys=lambda k, v: [k],
        on_change=print,
    )
    assert workloads.path == "/apis/batch/v1/jobs"


def test_the_metrics_sum_the_informers_of_one_kind_and_say_listed_only_when_all_are() -> None:
    from prometheus_client import generate_latest

    from accel_operator.metrics import OperatorMetrics

    def make(name: str, kind: str | None) -> Informer[None]:
        return Informer(
            name, None, "v1", "pods", view=lambda o: None, keys=lambda k, v: [], on_change=lambda *_: None, kind=kind
        )

    a, b, other = make("pods-a", "pods"), make("pods-b", "pods"), make("jobs", None)
    a.events, a.relists, b.events, other.events = 5, 1, 7, 2
    a.apply([], listing=set())  # a listing: only a of the two pods informers holds one
    other.apply([], listing=set())
    metrics = OperatorMetrics()
    metrics.watches.source = lambda: informer.stats([a, b, other])
    text = generate_latest(metrics.registry).decode()
    assert 'accel_operator_watch_events_total{resource="pods"} 12.0' in text
    assert 'accel_operator_watch_relists_total{resource="pods"} 1.0' in text
    assert 'accel_operator_watch_listed{resource="pods"} 0.0' in text
    assert 'accel_operator_watch_events_total{resource="jobs"} 2.0' in text
    assert 'accel_operator_watch_listed{resource="jobs"} 1.0' in text
    b.apply([], listing=set())
    assert 'accel_operator_watch_listed{resource="pods"} 1.0' in generate_latest(metrics.registry).decode()


def _node(name: str, *, ready: bool = True, beat: str = "2026-01-01T00:00:00Z", rv: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "resourceVersion": str(rv), "labels": {"pool": "a"}},
        "status": {
            "allocatable": {"nvidia.com/gpu": "8"},
            "conditions": [
                {"type": "Ready", "status": "True" if ready else "False", "lastHeartbeatTime": beat},
            ],
        },
    }


class _Stream:
    """A watch response as ``Informer._watch`` reads it: urllib3's ``stream`` and ``release_conn``."""

    def __init__(self, events: list[tuple[str, dict[str, Any]]]) -> None:
        self.lines = [json.dumps({"type": t, "object": o}).encode() + b"\n" for t, o in events]

    @property
    def response(self) -> _Stream:
        return self

    def stream(self, _size: int, decode_content: bool = True) -> Any:
        yield from self.lines  # one read per event: each would be its own batch

    def release_conn(self) -> None:
        pass


class _Page:
    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.data = json.dumps({"items": items, "metadata": {"resourceVersion": "1"}}).encode()

    def read(self) -> None:
        pass


def test_heartbeats_are_dropped_in_the_watch_thread_and_never_reach_the_loop() -> None:
    """A node's heartbeat (its conditions' lastHeartbeatTime) makes an equal view: the watch
    thread counts it and hands nothing over, so the loop, the store and the scheduler never see
    it; a change of readiness and a deletion are handed over, each once."""
    from accel_operator.adapters.kube import views as kube_views
    from accel_operator.handlers import nodes

    inf = Informer(
        "nodes",
        None,
        "v1",
        "nodes",
        view=kube_views.node_view,
        keys=nodes.keys,
        on_change=lambda *_: None,
        drop_unchanged=True,
    )
    handed: list[list[tuple[ObjKey, Any]]] = []
    inf._hand = lambda changes, listing=None: handed.append(list(changes))  # type: ignore[method-assign]
    responses: Iterator[_Stream] = iter(
        [
            _Stream(
                [
                    ("MODIFIED", _node("n1", beat="2026-01-01T00:00:10Z", rv=2)),  # a heartbeat after the listing
                    ("ADDED", _node("n2", rv=3)),
                    ("MODIFIED", _node("n2", beat="2026-01-01T00:00:10Z", rv=4)),
                    ("MODIFIED", _node("n2", beat="2026-01-01T00:00:20Z", rv=5)),
                    ("MODIFIED", _node("n2", ready=False, beat="2026-01-01T00:00:30Z", rv=6)),
                    ("MODIFIED", _node("n2", ready=False, beat="2026-01-01T00:00:40Z", rv=7)),
                    ("DELETED", _node("n2", ready=False, rv=8)),
                    ("DELETED", _node("n2", ready=False, rv=8)),  # a second deletion: nothing held
                    ("ADDED", {"metadata": {"name": "cpu", "resourceVersion": "9"}}),  # not an accelerator node
                    ("MODIFIED", {"metadata": {"name": "cpu", "resourceVersion": "10"}}),
                ]
            )
        ]
    )

    def get(query: dict[str, Any], *, stream: bool) -> Any:
        return next(responses) if stream else _Page([_node("n1")])

    inf._get = get  # type: ignore[method-assign]
    version = inf._list()
    assert [[k for k, _ in batch] for batch in handed] == [[("", "n1")]]
    handed.clear()
    assert inf._watch(version) == "10"
    assert [[(k, v.ready if v else None) for k, v in batch] for batch in handed] == [
        [(("", "n2"), True)],
        [(("", "n2"), False)],
        [(("", "n2"), None)],
    ]
    assert inf.events == 10 and inf.unchanged == 7


def test_without_drop_unchanged_every_event_is_handed_over() -> None:
    """The AcceleratorJobs' informer keeps every event (each carries a new resourceVersion that
    its view holds): comparing in the thread would only cost."""
    inf = Informer("jobs", None, "v1", "nodes", view=lambda o: o["metadata"]["name"], keys=by_key, on_change=print)
    handed: list[list[tuple[ObjKey, Any]]] = []
    inf._hand = lambda changes, listing=None: handed.append(list(changes))  # type: ignore[method-assign]
    twice = _Stream([("MODIFIED", _node("n1")), ("MODIFIED", _node("n1"))])
    inf._get = lambda query, stream: twice  # type: ignore[method-assign,misc]
    inf._watch("1")
    assert len(handed) == 2 and inf.unchanged == 0


def by_key(key: ObjKey, _view: object) -> list[Hashable]:
    return [key]
