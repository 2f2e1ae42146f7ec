"""A dict that the engine's cache changes in place and that hands out frozen views in O(1).

The cache (:mod:`~accel_operator.engine.cache`) keeps every job, workload, pod and node the
cluster holds, and each pass reads them through a frozen
:class:`~accel_operator.reconcile.common.snapshot.Snapshot`: later refreshes must not change
what an earlier snapshot shows (a pass decides on one picture; the accountant reads its snapshot
in a thread while the next pass refreshes). Copying each map per snapshot made every pass cost
time in proportion to everything the cluster ever held (100,000 jobs, most of them at rest),
even when a handful of entries changed.

:class:`Versioned` keeps the current entries in one dict, changed in place, and an *undo log*:
for each key changed while some view is alive, the value it had before each change, tagged with
the version then current. :meth:`Versioned.frozen` returns a :class:`View` at the current version
(O(1)); a view answers a key from the log when the key changed since the view was made, else
from the current dict. So a snapshot costs O(1), a change O(1), and the log holds only what
changed during the life of the oldest view alive (it is cut when views die: weak references).

A view iterates in the current dict's order (then the keys deleted since), at dict speed (one
copy of the current items, then the few keys changed since the view from the log): a key deleted
and added again since the view was made comes where the dict has it now, not where a copy would
have kept it. Nothing reads a meaning into that order (a pass sorts what it decides).

Reads from another thread are safe while the owner changes (the GIL makes each dict and list
operation atomic): a change records the old value before it writes the new one, and a read looks
at the current dict before the log, so whichever it sees, the answer is the view's.
"""

from __future__ import annotations

import weakref
from collections.abc import ItemsView, Iterable, Iterator, KeysView, Mapping, MutableMapping, ValuesView
from typing import Any, Generic, TypeVar, cast

K = TypeVar("K")
V = TypeVar("V")


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<missing>"


MISSING: Any = _Missing()  # "the key was not there" in the undo log


class Versioned(MutableMapping[K, V], Generic[K, V]):
    """The current entries (a plain dict, read at dict speed through :attr:`live`) plus what
    the live views need to see them as they were when each was made."""

    __slots__ = ("_trim_at", "_undo", "_version", "_views", "live")

    def __init__(self, data: Mapping[K, V] | Iterable[tuple[K, V]] = ()) -> None:
        self.live: dict[K, V] = dict(data)
        # key -> [(version, the value before the first change made at that version)], oldest first.
        self._undo: dict[K, list[tuple[int, Any]]] = {}
        self._version = 0
        self._views: weakref.WeakValueDictionary[int, View[K, V]] = weakref.WeakValueDictionary()  # by version
        self._trim_at = 1024

    # --- views --------------------------------------------------------------------------------

    def frozen(self) -> View[K, V]:
        """A read-only view of the entries as they are now, which later changes do not reach."""
        if not self._views:
            if self._undo:
                self._undo = {}  # no view alive: nobody can ask for the past
        elif len(self._undo) > self._trim_at:
            self._trim()
        view = View(self, self._version, len(self.live))
        self._version += 1
        self._views[view.version] = view
        return view

    def _trim(self) -> None:
        """Drop what no live view can ask for (changes made before the oldest view). A new dict
        of new lists: a reader in another thread that holds the old ones still answers right."""
        oldest = min(list(self._views.keys()), default=self._version)
        undo: dict[K, list[tuple[int, Any]]] = {}
        for key, hist in list(self._undo.items()):
            kept = [r for r in hist if r[0] > oldest]
            if kept:
                undo[key] = kept
        self._undo = undo
        self._trim_at = max(1024, 2 * len(undo))

    def _record(self, key: K) -> None:
        """Before ``key`` changes: its value now, for the views made before this version."""
        if not self._views:
            return
        hist = self._undo.get(key)
        if hist is None:
            self._undo[key] = [(self._version, self.live.get(key, MISSING))]
        elif hist[-1][0] != self._version:
            hist.append((self._version, self.live.get(key, MISSING)))

    # --- the mapping (the owner's side) ---------------------------------------------------------

    def __getitem__(self, key: K) -> V:
        return self.live[key]

    def get(self, key: K, default: Any = None) -> Any:
        return self.live.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self.live

    def __iter__(self) -> Iterator[K]:
        return iter(self.live)

    def __len__(self) -> int:
        return len(self.live)

    def items(self) -> ItemsView[K, V]:
        return self.live.items()  # at dict speed: the owner reads what is current

    def values(self) -> ValuesView[V]:
        return self.live.values()

    def keys(self) -> KeysView[K]:
        return self.live.keys()

    def __setitem__(self, key: K, value: V) -> None:
        if self.live.get(key, MISSING) is value:
            return  # the same object: nothing changes (a refresh often writes back what it read)
        self._record(key)
        self.live[key] = value

    def __delitem__(self, key: K) -> None:
        if key not in self.live:
            raise KeyError(key)
        self._record(key)
        del self.live[key]

    def pop(self, key: K, default: Any = MISSING) -> Any:
        if key in self.live:
            self._record(key)
            return self.live.pop(key)
        if default is MISSING:
            raise KeyError(key)
        return default

    def __repr__(self) -> str:
        return f"Versioned({self.live!r})"


class View(Mapping[K, V], Generic[K, V]):
    """What a :class:`Versioned` held when :meth:`Versioned.frozen` made this view."""

    __slots__ = ("__weakref__", "_len", "_owner", "version")

    def __init__(self, owner: Versioned[K, V], version: int, length: int) -> None:
        self._owner = owner
        self.version = version
        self._len = length

    def _then(self, key: object, now: Any) -> Any:
        """``key``'s value for this view, given ``now`` (its current value, read first)."""
        hist = self._owner._undo.get(key)  # type: ignore[arg-type]
        if hist:
            for version, old in hist:
                if version > self.version:  # the first change since this view: what it replaced
                    return old
        return now

    def __getitem__(self, key: K) -> V:
        value = self._then(key, self._owner.live.get(key, MISSING))
        if value is MISSING:
            raise KeyError(key)
        return cast(V, value)

    def get(self, key: K, default: Any = None) -> Any:
        value = self._then(key, self._owner.live.get(key, MISSING))
        return default if value is MISSING else value

    def __contains__(self, key: object) -> bool:
        return self._then(key, self._owner.live.get(key, MISSING)) is not MISSING  # type: ignore[arg-type]

    def _items(self) -> list[tuple[K, V]]:
        """Every entry as this view has it, read at dict speed: a copy of the current items, then
        the keys changed since the view (the log, read after the copy, names every change made
        before the copy or during it) answered from the log, in place, and those deleted since
        after the rest."""
        owner = self._owner
        items = list(owner.live.items())  # one C call: atomic against a change in another thread
        changed = [k for k, hist in list(owner._undo.items()) if hist[-1][0] > self.version]
        if not changed:
            return items
        since = set(changed)
        out: list[tuple[K, V]] = []
        for key, value in items:
            if key not in since:
                out.append((key, value))
            elif (old := self._then(key, MISSING)) is not MISSING:
                out.append((key, old))
        current = dict(items)
        out.extend((k, old) for k in changed if k not in current and (old := self._then(k, MISSING)) is not MISSING)
        return out

    def __iter__(self) -> Iterator[K]:
        return iter([k for k, _v in self._items()])

    def items(self) -> ItemsView[K, V]:
        return _Items(self)

    def values(self) -> ValuesView[V]:
        return _Values(self)

    def __len__(self) -> int:
        return self._len

    def __repr__(self) -> str:
        return f"View({dict(self.items())!r})"


class _Items(ItemsView[K, V]):
    _mapping: View[K, V]

    def __iter__(self) -> Iterator[tuple[K, V]]:
        return iter(self._mapping._items())


class _Values(ValuesView[V]):
    _mapping: View[Any, V]

    def __iter__(self) -> Iterator[V]:
        return iter([v for _k, v in self._mapping._items()])


class Plus(Mapping[K, V], Generic[K, V]):
    """``base`` and, for the keys it lacks, ``extra`` (both frozen: ``extra`` is copied)."""

    __slots__ = ("_base", "_extra", "_len")

    def __init__(self, base: Mapping[K, V], extra: Mapping[K, V]) -> None:
        self._base = base
        self._extra = {k: v for k, v in extra.items() if k not in base}
        self._len = len(base) + len(self._extra)

    def __getitem__(self, key: K) -> V:
        if key in self._base:
            return self._base[key]
        return self._extra[key]

    def __iter__(self) -> Iterator[K]:
        yield from self._base
        yield from self._extra

    def __len__(self) -> int:
        return self._len
