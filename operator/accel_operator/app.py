"""The operator process: settings read once, handlers registered into one registry, kopf run.

``main`` is ``python -m accel_operator``; tests run the same ``run`` in a thread with a stop flag,
so they exercise exactly what the Deployment runs.
"""

from __future__ import annotations

import asyncio
import threading

import kopf

from accel_api import catalog as catalog_mod
from accel_operator.adapters.kube.pools import KubePoolSource, PoolSource
from accel_operator.context import OperatorContext
from accel_operator.handlers import jobs
from accel_operator.settings import OperatorSettings


def build_context(settings: OperatorSettings, *, pools: PoolSource | None = None) -> OperatorContext:
    return OperatorContext(
        settings=settings, catalog=catalog_mod.load(settings.catalog), pools=pools or KubePoolSource()
    )


def build_registry(settings: OperatorSettings) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()
    jobs.register(registry, settings)
    return registry


async def run(
    settings: OperatorSettings,
    *,
    context: OperatorContext | None = None,
    stop_flag: asyncio.Event | threading.Event | None = None,
    ready_flag: asyncio.Event | threading.Event | None = None,
) -> None:
    """Run the operator until ``stop_flag`` is set (or forever)."""
    ctx = context or await asyncio.to_thread(build_context, settings)
    liveness = f"http://0.0.0.0:{settings.liveness_port}/healthz" if settings.liveness_port else None
    await kopf.operator(
        registry=build_registry(settings),
        memo=kopf.Memo(ctx=ctx),
        clusterwide=not settings.namespaces,
        namespaces=settings.namespaces,
        liveness_endpoint=liveness,
        standalone=True,
        stop_flag=stop_flag,
        ready_flag=ready_flag,
    )


def main() -> int:
    asyncio.run(run(OperatorSettings()))
    return 0
