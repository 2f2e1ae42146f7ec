"""The operator's readiness (``/readyz`` on the metrics port): what a Service may send traffic to.

A replica is ready once (1) every watch holds its first listing (kopf's indexes of pools,
policies, namespaces and node reports; the lean informers of AcceleratorJobs, pods, batch Jobs
and nodes: ``Scheduler.can_act``), since until then the webhook judges jobs against policies it has not read
and a pass would decide on a half-filled picture; and (2) the admission webhook, where one is
served, answers on its TLS port (a request to itself: kopf starts it only after its resource
scan, and a certificate that cannot load leaves it closed). Leading is no condition: a follower
serves the webhook, and its filled cache is what lets it take over at once.

Liveness stays kopf's ``/healthz`` on its own port (its event loop answers), so a replica that is
slow to list is kept out of the Service, not restarted.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from accel_operator.settings import OperatorSettings

Probe = Callable[[], str | None]  # None: fine; else why not, in one line

WEBHOOK_TIMEOUT_SECONDS = 2.0  # below the probe's timeoutSeconds (3 in the Deployment)
# Where a wildcard bind address is asked from inside the pod.
LOOPBACK = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}


@dataclass(frozen=True)
class Check:
    name: str
    probe: Probe


@dataclass(frozen=True)
class Readiness:
    checks: Sequence[Check]

    def evaluate(self) -> tuple[bool, list[str]]:
        """Every check's verdict: ready when none says why not; the reasons name their check."""
        reasons = [f"{c.name}: {why}" for c in self.checks if (why := c.probe()) is not None]
        return not reasons, reasons


def listed(can_act: Callable[[], bool]) -> Check:
    """The engine's watches have all listed (``can_act``: the scheduler's)."""
    return Check("watches", lambda: None if can_act() else "not every watched kind has been listed yet")


def webhook_answers(host: str, port: int, *, timeout: float = WEBHOOK_TIMEOUT_SECONDS) -> Check:
    """The webhook server at ``host:port`` accepts a connection and completes a TLS handshake with
    its certificate loaded. No HTTP request: kopf's server would log each probe's at INFO."""

    def probe() -> str | None:
        # It asks whether the server answers, not who it is: the certificate names the Service
        # (or the host the API server calls), which is not this loopback address, and the API
        # server verifies it against the caBundle.
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        try:
            with (
                socket.create_connection((host, port), timeout=timeout) as raw,
                context.wrap_socket(raw, server_hostname=host),
            ):
                pass
        except OSError as exc:  # refused, timed out, or a failed handshake (ssl.SSLError)
            return f"no TLS answer on {host}:{port} ({type(exc).__name__})"
        return None

    return Check("webhook", probe)


def for_operator(settings: OperatorSettings, can_act: Callable[[], bool]) -> Readiness:
    """The checks of an operator with ``settings``: the watches, and the webhook where it serves one."""
    checks = [listed(can_act)]
    if settings.webhook_port:
        host = LOOPBACK.get(settings.webhook_address, settings.webhook_address)
        checks.append(webhook_answers(host, settings.webhook_port))
    return Readiness(checks)
