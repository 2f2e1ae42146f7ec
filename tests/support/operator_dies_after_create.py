"""``python -m tests.support.operator_dies_after_create``: the operator (``python -m accel_operator``),
killed with SIGKILL as soon as its first batch Job is created, i.e. after the Job that records an
admission exists and before the job's status says so: the crash the batch Job as the admission
record has to survive (docs/scale.md)."""

from __future__ import annotations

import os
import signal
from typing import Any

from accel_operator import app
from accel_operator.adapters.kube import workloads

_create = workloads.KubeWorkloadClient.create


def _create_then_die(self: workloads.KubeWorkloadClient, job: dict[str, Any], service: dict[str, Any] | None) -> bool:
    _create(self, job, service)
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable: SIGKILL")


if __name__ == "__main__":
    workloads.KubeWorkloadClient.create = _create_then_die  # type: ignore[method-assign]
    raise SystemExit(app.main())
