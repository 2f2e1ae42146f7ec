"""The cache's copy-on-write maps (engine/versioned.py): a frozen view shows, for as long as it
lives, what its map held when it was made, whatever changes and views come after; a map keeps
history only while some view can ask for it."""

from __future__ import annotations

import gc
import random

import pytest

from accel_operator.engine.versioned import Plus, Versioned, View


def _check(view: View[int, int], then: dict[int, int]) -> None:
    assert dict(view) == then
    assert dict(view.items()) == then
    assert sorted(view.values()) == sorted(then.values())
    assert list(view.items()) == list(zip(view, view.values(), strict=True))
    assert len(view) == len(then)
    assert list(view) == list(dict.fromkeys(view))  # each key once
    for key in range(-1, 40):
        assert (key in view) == (key in then)
        assert view.get(key, "absent") == then.get(key, "absent")
        if key in then:
            assert view[key] == then[key]
        else:
            with pytest.raises(KeyError):
                view[key]


@pytest.mark.parametrize("seed", range(20))
def test_views_keep_what_their_map_held(seed: int) -> None:
    rng = random.Random(seed)
    m: Versioned[int, int] = Versioned({k: k for k in range(10)})
    views: list[tuple[View[int, int], dict[int, int]]] = []
    for _ in range(300):
        what = rng.random()
        key = rng.randrange(30)
        if what < 0.45:
            m[key] = rng.randrange(1000)
        elif what < 0.6:
            m.pop(key, None)
        elif what < 0.65 and key in m:
            del m[key]
        elif what < 0.8:
            views.append((m.frozen(), dict(m.live)))
        elif views:
            views.pop(rng.randrange(len(views)))
        assert dict(m) == m.live
    for view, then in views:
        _check(view, then)


def test_history_goes_with_the_last_view() -> None:
    m: Versioned[int, int] = Versioned({1: 1})
    m[2] = 2  # no view: nothing kept
    assert not m._undo
    view = m.frozen()
    m[1] = 10
    m[3] = 3
    assert dict(view) == {1: 1, 2: 2}
    assert set(m._undo) == {1, 3}
    del view
    gc.collect()
    m.frozen()  # the next view starts with no history
    assert not m._undo


def test_a_view_iterated_while_its_map_changes_shows_its_own_keys() -> None:
    m: Versioned[int, int] = Versioned({k: k for k in range(6)})
    view = m.frozen()
    seen = []
    for key in view:
        seen.append(key)
        m.pop(key + 1, None)  # the map changes under the iteration: the view does not
        m[100 + key] = key
    assert sorted(seen) == list(range(6))


def test_plus_adds_only_the_keys_its_base_lacks() -> None:
    m: Versioned[str, int] = Versioned({"a": 1})
    both = Plus(m.frozen(), {"a": 9, "b": 2})
    m["c"] = 3
    assert dict(both) == {"a": 1, "b": 2}
    assert len(both) == 2
