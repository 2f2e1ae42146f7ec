"""The pure core keeps no state between calls in its modules: no module-level dict, list or set
(a memo, a registry) and no ``functools.lru_cache`` in ``planning/`` or ``reconcile/``. What is
worth remembering between plans lives in a ``planning.cache.PlanCache`` that the caller owns and
passes in; constant tables are read-only (``types.MappingProxyType``, tuples, frozensets)."""

from __future__ import annotations

import collections
import functools
import importlib
import pkgutil
import types

import pytest

from accel_operator import planning, reconcile

MUTABLE = (dict, list, set, bytearray, collections.OrderedDict, collections.defaultdict, collections.deque)


def _modules() -> list[types.ModuleType]:
    out = []
    for package in (planning, reconcile):
        out.append(package)
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            out.append(importlib.import_module(info.name))
    return out


def held_state(module: types.ModuleType) -> list[str]:
    """The names of ``module``'s globals that can keep state between calls."""
    found = []
    for name, value in vars(module).items():
        if name.startswith("__") and name.endswith("__"):
            continue
        if isinstance(value, MUTABLE):
            found.append(f"{name} ({type(value).__name__})")
        elif callable(value) and getattr(value, "__module__", None) == module.__name__:
            memo = value
            while memo is not None:
                if isinstance(memo, functools._lru_cache_wrapper) or hasattr(memo, "cache_info"):
                    found.append(f"{name} (lru_cache)")
                    break
                memo = getattr(memo, "__wrapped__", None)
    return found


@pytest.mark.parametrize("module", _modules(), ids=lambda m: m.__name__)
def test_no_module_level_memo_in_the_pure_core(module: types.ModuleType) -> None:
    assert held_state(module) == [], f"{module.__name__} keeps state in module globals"


def test_the_scan_finds_a_memo_and_a_cache() -> None:
    fake = types.ModuleType("accel_operator.planning.fake")

    @functools.lru_cache(maxsize=8)
    def cached(x: int) -> int:
        return x

    cached.__module__ = fake.__name__
    fake.__dict__.update(_SEEN={}, cached=cached, TABLE=types.MappingProxyType({"a": 1}), NAMES=("a",))
    assert held_state(fake) == ["_SEEN (dict)", "cached (lru_cache)"]
