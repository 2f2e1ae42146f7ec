"""Run only the admission webhook (kopf, TLS, its managed configuration) as a process of its own,
so a test can stop it for certain (SIGKILL) before the next test: ``python -m
tests.support.webhook_main PORT``."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import kopf

from accel_operator.handlers import admission, policies
from accel_operator.settings import OperatorSettings


def main(port: int) -> None:
    reg = kopf.OperatorRegistry()
    policies.register(reg, None)
    admission.register(reg, OperatorSettings(webhook_port=port, webhook_host=admission.DEFAULT_HOST))

    @kopf.on.login(registry=reg)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        return kopf.login_with_kubeconfig(**kwargs)

    asyncio.run(kopf.operator(registry=reg, clusterwide=True))


if __name__ == "__main__":
    main(int(sys.argv[1]))
