"""What every adapter raises when the world outside could not answer now, and the one way to try
again.

``Unavailable`` is the base of each adapter's own error (``ClusterUnavailable`` for the API
server, ``CloudUnavailable`` for AWS, ``TpuUnavailable`` for the TPU API): a network error, a 5xx,
throttling. Nothing was decided, so the same call may succeed soon. A definite answer (a refusal,
a conflict, "not found") is never an ``Unavailable``: trying it again would not help.

:func:`retrying` is the retry: a bounded number of attempts with a growing pause between them, on
``Unavailable`` only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

T = TypeVar("T")

ATTEMPTS: Final = 5
FIRST_DELAY_SECONDS: Final = 0.2
MAX_DELAY_SECONDS: Final = 5.0


class Unavailable(RuntimeError):
    """An outside system could not answer now (network, 5xx, throttling): worth retrying soon."""


def _nothing(_: Unavailable) -> None:
    return None


async def retrying(
    call: Callable[[], Awaitable[T]],
    *,
    attempts: int = ATTEMPTS,
    delay: float = FIRST_DELAY_SECONDS,
    max_delay: float = MAX_DELAY_SECONDS,
    on_retry: Callable[[Unavailable], None] = _nothing,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> T:
    """``await call()``, made again while it raises :class:`Unavailable`, at most ``attempts``
    times in all, the pause doubling from ``delay`` up to ``max_delay``; ``on_retry`` sees each
    error that is retried (a metric, a log line). The last attempt's ``Unavailable`` is raised;
    any other error is raised at once."""
    if attempts < 1:
        raise ValueError(f"attempts must be >= 1 (got {attempts})")
    for _ in range(attempts - 1):
        try:
            return await call()
        except Unavailable as exc:
            on_retry(exc)
            await sleep(delay)
            delay = min(delay * 2, max_delay)
    return await call()
