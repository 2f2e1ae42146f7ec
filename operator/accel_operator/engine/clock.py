"""The engine's clock port: every read of wall or monotonic time in the scheduling loop, its pass
and its writes goes through a :class:`Clock`, so that tests and a simulator can run the engine on a
time they move themselves (:class:`ManualClock`) instead of the machine's (:class:`SystemClock`).

Waits (``asyncio.sleep``, timeouts, ``call_later``) stay on the event loop's own time: they are
how long the engine waits, not what time it believes it is.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> dt.datetime:
        """The wall time, timezone-aware (UTC)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (differences only)."""
        ...


class SystemClock:
    def now(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC)

    def monotonic(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock that moves only when told (:meth:`advance`, :meth:`set`): for tests and
    reproducible runs. Its monotonic time starts above zero, as a real one does, so that a
    "never" of 0.0 stays in the past."""

    def __init__(self, start: dt.datetime | None = None, *, monotonic: float = 1000.0) -> None:
        wall = start or dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
        if wall.tzinfo is None:
            raise ValueError("ManualClock needs a timezone-aware start")
        self.wall = wall
        self.mono = monotonic

    def now(self) -> dt.datetime:
        return self.wall

    def monotonic(self) -> float:
        return self.mono

    def advance(self, seconds: float) -> None:
        """Move both clocks ``seconds`` forward (never back)."""
        if seconds < 0:
            raise ValueError("a clock does not go back")
        self.mono += seconds
        self.wall += dt.timedelta(seconds=seconds)

    def set(self, at: dt.datetime) -> None:
        """Move the wall clock to ``at`` (not earlier than now); the monotonic clock follows."""
        self.advance((at - self.wall).total_seconds())


_: Clock = SystemClock()
__: Clock = ManualClock()
