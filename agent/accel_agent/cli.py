"""``python -m accel_agent``: the command line over :class:`~accel_agent.settings.AgentSettings`.

Three modes:

- daemon (default): sample every interval, write the node's report to the API when it changed or
  a heartbeat is due, serve ``/metrics``, ``/healthz``, ``/readyz``; stops on SIGTERM/SIGINT.
- ``--once``: one pass, the report's JSON to ``--output`` (or stdout); no API unless asked.
- ``--loop-seconds N``: passes every interval for N seconds, the last report to ``--output``
  and timing statistics to ``--stats-output`` (default: next to the report); no API unless asked.

Exit status: 0 when a report was produced (an unhealthy node is a valid report), 2 for bad
settings, 3 with ``--fail-unhealthy`` when the report says the node is unhealthy.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from pydantic import ValidationError

from accel_agent import app, kube, logtext, report, server
from accel_agent.loop import Agent, run_local
from accel_agent.settings import AgentSettings, BackendChoice

log = logging.getLogger("accel_agent")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m accel_agent", description=__doc__.split("\n\n")[0])
    p.add_argument("--once", action="store_true", default=None, help="one sampling pass, then exit")
    p.add_argument("--loop-seconds", type=float, help="sample for this many seconds, then exit with statistics")
    p.add_argument("--backend", choices=[b.value for b in BackendChoice])
    p.add_argument("--node-name")
    p.add_argument("--output", type=Path, help="where --once/--loop-seconds write the report JSON")
    p.add_argument("--stats-output", type=Path, help="where --loop-seconds writes its statistics JSON")
    p.add_argument("--interval", dest="interval_seconds", type=float, help="seconds between samples")
    p.add_argument("--heartbeat", dest="heartbeat_seconds", type=float, help="write at least this often (seconds)")
    p.add_argument("--port", type=int, help="metrics/health port (daemon mode)")
    p.add_argument("--bind-address", help="address the metrics/health port listens on (daemon mode)")
    p.add_argument("--kubeconfig", type=Path)
    p.add_argument(
        "--kubernetes", action=argparse.BooleanOptionalAction, default=None, help="use the API in local runs too"
    )
    p.add_argument(
        "--pod-list",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="list the pods on this node to name processes' pods (needs RBAC list on pods; the simulated backend)",
    )
    p.add_argument("--proc-root", type=Path, help="the host's /proc (mounted read-only in the pod)")
    p.add_argument("--fail-unhealthy", action="store_true", help="exit 3 when the report says unhealthy")
    p.add_argument("--log-level")
    return p


def load_settings(argv: Sequence[str] | None = None) -> tuple[AgentSettings, argparse.Namespace]:
    args = parser().parse_args(argv)
    given = {k: v for k, v in vars(args).items() if v is not None and k != "fail_unhealthy"}
    return AgentSettings(**given), args


def _write_json(path: Path | None, data: dict[str, Any]) -> None:
    text = json.dumps(data, indent=2, sort_keys=False) + "\n"
    if path is None:
        sys.stdout.write(text)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _local(settings: AgentSettings, agent: Agent, fail_unhealthy: bool) -> int:
    if settings.loop_seconds is not None:
        last, stats = run_local(agent, seconds=settings.loop_seconds)
        stats_path = settings.stats_output or (
            settings.output.with_name(settings.output.stem + "-stats.json") if settings.output else None
        )
        if stats_path is None:
            sys.stderr.write(json.dumps(stats, indent=2) + "\n")
        else:
            _write_json(stats_path, stats)
    else:
        last = agent.run_once()
    final = report.stamp_heartbeat(last.report, agent.clock.now())
    _write_json(settings.output, final.to_wire())
    status = final.status
    healthy = bool(status and status.healthy)
    log.info(
        "node %s: %s, %d devices%s",
        agent.node_name,
        "healthy" if healthy else "UNHEALTHY",
        len(status.devices) if status else 0,
        "" if healthy or status is None else " — " + logtext.shorten("; ".join(status.problems), 500),
    )
    return 3 if fail_unhealthy and not healthy else 0


def _daemon(settings: AgentSettings, agent: Agent) -> int:
    http = server.serve(
        agent.metrics.registry,
        agent.loop_health,
        host=settings.bind_address,
        port=settings.port,
        limits=server.Limits(
            workers=settings.http_workers,
            max_connections=settings.http_max_connections,
            idle_timeout_seconds=settings.http_idle_timeout_seconds,
        ),
    )
    log.info(
        "agent for node %s: backend %s, every %.0fs (heartbeat %.0fs), metrics on %s:%d",
        agent.node_name,
        agent.backend.kind.value,
        settings.interval_seconds,
        settings.heartbeat_seconds,
        settings.bind_address,
        http.port,
    )
    stop = threading.Event()

    def _stop(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %d: stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        agent.run_forever(stop)
    finally:
        http.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        settings, args = load_settings(argv)
    except ValidationError as exc:
        sys.stderr.write(f"accel-agent: invalid settings:\n{exc}\n")
        return 2
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    try:
        agent = app.build_agent(settings)
    except (ValueError, kube.KubeError) as exc:
        sys.stderr.write(f"accel-agent: {exc}\n")
        return 2
    try:
        if settings.local_run:
            return _local(settings, agent, args.fail_unhealthy)
        return _daemon(settings, agent)
    finally:
        agent.close()
