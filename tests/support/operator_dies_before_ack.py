"""``python -m tests.support.operator_dies_before_ack``: the operator (``python -m accel_operator``),
killed with SIGKILL at the moment it would delete its first interruption notice from SQS, i.e.
after it acted on the notice and before the delete: the crash the queue's at-least-once
delivery has to survive."""

from __future__ import annotations

import os
import signal

from accel_operator import app
from accel_operator.adapters.aws import interruptions


def _die(self: interruptions.SqsInterruptionQueue, interruption: interruptions.Interruption) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    interruptions.SqsInterruptionQueue.ack = _die  # type: ignore[method-assign]
    raise SystemExit(app.main())
