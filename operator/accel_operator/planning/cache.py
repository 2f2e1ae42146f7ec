"""The planner's memory between calls: one :class:`PlanCache`, owned by whoever plans and passed in.

Planning is pure: the same values in give the same figures out. What is worth remembering
between calls (the step-level estimates of a job's shape, a pool's skeleton for a job, the
pieces the memory and speed models build from a shape, a plan's ranking and its status form)
is kept in one ``PlanCache`` that the caller creates and passes down as ``cache=``: the
scheduler holds one for the process, ``accelctl plan`` and the benches make their own, and
``cache=None`` computes everything afresh. Nothing is kept in module state.

Every memo is keyed on values (frozen dataclasses, tuples of the inputs), never on an object's
identity, so equal inputs share an entry and a new object at a freed address cannot be served
another's figures. Each memo is bounded: past its limit the oldest entry goes first.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, TypeVar, cast

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
P = ParamSpec("P")


@dataclass(frozen=True)
class Kind(Generic[K, V]):
    """One kind of memo: its name (the module and what it holds) and how many entries it keeps.
    A constant of the module that fills it; the entries live in a :class:`PlanCache`."""

    name: str
    limit: int


class Memo(Generic[K, V]):
    """A bounded mapping from a value key to what was computed for it; the oldest entry goes
    first when full (insertion order: a lookup costs one dict access, the planner's hot path
    looks up every pool of every plan)."""

    __slots__ = ("_items", "limit")

    def __init__(self, limit: int) -> None:
        self._items: dict[K, V] = {}
        self.limit = limit

    def get(self, key: K) -> V | None:
        return self._items.get(key)

    def put(self, key: K, value: V) -> V:
        items = self._items
        if key not in items and len(items) >= self.limit:
            del items[next(iter(items))]
        items[key] = value
        return value

    def __len__(self) -> int:
        return len(self._items)

    def values(self) -> list[V]:
        return list(self._items.values())


class PlanCache:
    """Every memo of the planner and of the plan's status form, one :class:`Memo` per
    :class:`Kind`, made when first used. Not thread-safe: one owner (the scheduler's loop)."""

    __slots__ = ("_memos",)

    def __init__(self) -> None:
        self._memos: dict[str, Memo[Any, Any]] = {}

    def memo(self, kind: Kind[K, V]) -> Memo[K, V]:
        found = self._memos.get(kind.name)
        if found is None:
            found = self._memos[kind.name] = Memo(kind.limit)
        return cast("Memo[K, V]", found)

    def sizes(self) -> dict[str, int]:
        """Entries per kind (for tests and metrics)."""
        return {name: len(m) for name, m in self._memos.items()}

    def clear(self) -> None:
        self._memos.clear()


def memoised(limit: int) -> Callable[[Callable[P, V]], Callable[P, V]]:
    """A pure function whose results are kept in the ``cache`` it is passed (a keyword argument
    of the function, ``PlanCache | None``; None computes without memo), keyed on its other
    arguments, which must be hashable values. The result must not be None."""

    def wrap(fn: Callable[P, V]) -> Callable[P, V]:
        kind: Kind[Hashable, V] = Kind(f"{fn.__module__}.{fn.__qualname__}", limit)

        @functools.wraps(fn)
        def call(*args: P.args, **kwargs: P.kwargs) -> V:
            cache = kwargs.get("cache")
            if cache is None:
                return fn(*args, **kwargs)
            assert isinstance(cache, PlanCache)
            key: Hashable = args
            if len(kwargs) > 1:
                key = (args, tuple(sorted((k, v) for k, v in kwargs.items() if k != "cache")))
            memo = cache.memo(kind)
            hit = memo.get(key)
            if hit is None:
                hit = memo.put(key, fn(*args, **kwargs))
            return hit

        return call

    return wrap
