"""The informers of one kind for the namespaces the operator watches, as kopf would watch them:
every namespace (one cluster-wide watch), named namespaces (one watch each, one shared store and
index), or kopf's namespace patterns (globs, ``!`` exclusions: one cluster-wide watch, filtered
with kopf's own matcher)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from kopf._cogs.structs import references  # kopf's namespace-pattern grammar (no public name)
from kubernetes import client

from accel_operator.adapters.kube.informer import Index, Informer, ObjKey

V = TypeVar("V")


def for_namespaces(
    name: str,
    api: client.ApiClient,
    group_version: str,
    plural: str,
    patterns: Sequence[str],
    *,
    view: Callable[[Mapping[str, Any]], V | None],
    keys: Callable[[ObjKey, V], Iterable[Hashable]],
    on_change: Callable[[ObjKey, V | None, V | None], None],
    server_filter: str | None = None,
    drop_unchanged: bool = False,
) -> list[Informer[V]]:
    common: dict[str, Any] = {"keys": keys, "on_change": on_change, "server_filter": server_filter, "kind": name}
    common["drop_unchanged"] = drop_unchanged
    if not patterns:
        return [Informer(name, api, group_version, plural, view=view, **common)]
    plain = references.select_specific_namespaces(patterns)
    if set(plain) == set(patterns):
        shared: tuple[dict[ObjKey, V], Index[V]] = ({}, Index())
        return [
            Informer(f"{name}-{ns}", api, group_version, plural, view=view, namespace=ns, shared=shared, **common)
            for ns in sorted(plain)
        ]

    def scoped(obj: Mapping[str, Any]) -> V | None:
        ns = references.NamespaceName(str((obj.get("metadata") or {}).get("namespace") or ""))
        return view(obj) if any(references.match_namespace(ns, p) for p in patterns) else None

    return [Informer(name, api, group_version, plural, view=scoped, **common)]
