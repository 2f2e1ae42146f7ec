"""The operator process: settings read once, handlers registered into one registry, kopf run.

``main`` is ``python -m accel_operator``; tests run the same ``run`` in a thread with a stop flag,
so they exercise exactly what the Deployment runs.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import kopf

from accel_api import catalog as catalog_mod
from accel_operator import handlers, logs, metrics_server, readiness
from accel_operator.adapters.aws.checkpoints import Limits, S3CheckpointStore
from accel_operator.adapters.aws.interruptions import SqsInterruptionQueue
from accel_operator.adapters.gcp.tpu import GoogleTpuNodes
from accel_operator.adapters.kube.client import api_client
from accel_operator.adapters.kube.costs import KubeCostWriter
from accel_operator.adapters.kube.jobs import KubeJobWriter
from accel_operator.adapters.kube.lease import AlwaysLeader, Elector, LeaseElector
from accel_operator.adapters.kube.nodes import KubeNodeWriter
from accel_operator.adapters.kube.workloads import KubeWorkloadClient
from accel_operator.adapters.pricebook import PriceBook
from accel_operator.context import OperatorContext
from accel_operator.engine import calls, collector
from accel_operator.metrics import OperatorMetrics
from accel_operator.settings import OperatorSettings

log = logging.getLogger("accel_operator")


def _kopf_watch_closed_at_shutdown(context: dict[str, object]) -> bool:
    """kopf leaves its watch-streams (the ``infinite_watch`` async generators) to the event loop's
    final ``shutdown_asyncgens``; closing one there can raise "generator didn't stop after athrow()"
    from kopf's ``streaming_block``, because its cleanup awaits a pause-waiter task the loop has
    already cancelled. The operator has stopped by then and nothing is lost: it is a shutdown race
    inside kopf, not an error of ours."""
    generator = context.get("asyncgen")
    error = context.get("exception")
    return (
        getattr(generator, "__qualname__", "") == "infinite_watch"
        and isinstance(error, RuntimeError)
        and "didn't stop after athrow" in str(error)
    )


def _install_shutdown_filter(loop: asyncio.AbstractEventLoop) -> None:
    """Log kopf's watch-stream shutdown race at DEBUG; every other loop error as asyncio would."""
    previous = loop.get_exception_handler()

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, object]) -> None:
        if _kopf_watch_closed_at_shutdown(context):
            log.debug("kopf watch-stream closed at shutdown: %s", context.get("exception"))
        elif previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handle)


def build_context(settings: OperatorSettings) -> OperatorContext:
    # A pooled connection for every thread that calls: the scheduler's writes, events and lease
    # (engine/calls.py) and the default executor's (costs, early warnings). A thread without
    # one opens a TLS connection per call and discards it.
    api = api_client(connections=2 * settings.api_threads + calls.EVENT_THREADS + 1)
    elector: Elector = AlwaysLeader()
    if settings.lease:
        identity = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        elector = LeaseElector(api, settings.lease_namespace, settings.lease, identity, settings.lease_seconds)
    return OperatorContext(
        settings=settings,
        catalog=catalog_mod.load(settings.catalog),
        metrics=OperatorMetrics(),
        writer=KubeJobWriter(api),
        workloads=KubeWorkloadClient(api),
        elector=elector,
        nodes=KubeNodeWriter(api),
        interruptions=SqsInterruptionQueue.from_environment(
            settings.sqs_queue_url, settings.sqs_region, settings.aws_endpoint_url
        )
        if settings.sqs_queue_url
        else None,
        tpu=(GoogleTpuNodes.at(settings.tpu_endpoint) if settings.tpu_endpoint else GoogleTpuNodes.from_environment())
        if settings.tpu_pools
        else None,
        costs=KubeCostWriter(api),
        prices=price_book(settings),
        watch_api=lambda: api_client(connections=4),  # one long watch per informer thread
        checkpoints=S3CheckpointStore.connect(
            region=settings.s3_region,
            endpoint_url=settings.s3_endpoint_url,
            limits=Limits(settings.checkpoint_lookup_timeout_seconds, settings.checkpoint_lookup_max_requests),
        ),
    )


def price_book(settings: OperatorSettings) -> PriceBook:
    """Live price sources where the settings name them; the cloud SDKs are imported only then."""
    book = PriceBook(gcp_project=settings.gcp_project)
    if settings.aws_region:
        from accel_operator.adapters.aws.prices import CachedSpotPrices, Ec2SpotPrices

        book.spot = CachedSpotPrices(Ec2SpotPrices.in_region(settings.aws_region), settings.price_ttl_seconds)
    if settings.gcp_project:
        from accel_operator.adapters.gcp.tpu import GoogleTpuNodes

        book.tpu = (
            GoogleTpuNodes.at(settings.tpu_endpoint) if settings.tpu_endpoint else GoogleTpuNodes.from_environment()
        )
    return book


async def run(
    settings: OperatorSettings,
    *,
    context: OperatorContext | None = None,
    stop_flag: asyncio.Event | threading.Event | None = None,
    ready_flag: asyncio.Event | threading.Event | None = None,
) -> None:
    """Run the operator until ``stop_flag`` is set (or forever)."""
    _install_shutdown_filter(asyncio.get_running_loop())
    # Blocking API calls outside the scheduler (costs, early warnings) run in threads; the
    # scheduler's own calls have their pools (engine/calls.py).
    asyncio.get_running_loop().set_default_executor(
        ThreadPoolExecutor(settings.api_threads, thread_name_prefix="accel-api")
    )
    ctx = context if context is not None else await asyncio.to_thread(build_context, settings)
    registry = kopf.OperatorRegistry()
    sched = handlers.register(registry, ctx)
    # /readyz beside /metrics: ready once every watch has listed and the webhook answers (leading
    # or not); liveness stays kopf's own endpoint (its event loop answers).
    ready = readiness.for_operator(settings, sched.can_act)
    metrics_http = metrics_server.serve(settings, ctx.metrics.registry, readiness=ready)  # bounded threads
    liveness = f"http://0.0.0.0:{settings.liveness_port}/healthz" if settings.liveness_port else None
    try:
        await kopf.operator(
            registry=registry,
            clusterwide=not settings.namespaces,
            namespaces=settings.namespaces,
            liveness_endpoint=liveness,
            standalone=True,
            stop_flag=stop_flag,
            ready_flag=ready_flag,
        )
    finally:
        if metrics_http is not None:
            metrics_http.stop()


def main() -> int:
    settings = OperatorSettings()
    logs.configure(settings.log_format)
    collector.tune()  # the engine's heap: fewer, larger young collections (engine/collector.py)
    asyncio.run(run(settings))
    return 0
