"""``python -m accel_operator``: run the operator (kopf) against the cluster in KUBECONFIG or
in-cluster credentials, with the handlers in :mod:`accel_operator.handlers.jobs`."""

import asyncio
import sys

import kopf

from accel_operator.handlers import jobs  # noqa: F401 - importing registers the handlers
from accel_operator.settings import OperatorSettings


def main() -> int:
    settings = OperatorSettings()
    liveness = f"http://0.0.0.0:{settings.liveness_port}/healthz" if settings.liveness_port else None
    asyncio.run(
        kopf.operator(
            clusterwide=not settings.namespaces,
            namespaces=settings.namespaces,
            liveness_endpoint=liveness,
            standalone=True,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
