"""Events coalesced per (object, type, reason), as client-go's event recorder does.

A decision posts an Event when its job's phase or reason changes. A job whose reason flaps (a
queued job alternating between QueuedBehind and WaitingForCapacity as the queue's head moves, a
warning a timer repeats) would post one Event per flap, each a create the API server stores and
sends to every watcher. As ``k8s.io/client-go/tools/events`` does, the first occurrence within
``window`` creates the Event; the second patches it into a series (``series.count`` 2 and its
``lastObservedTime``: one small patch, the Event's note stays the first one's); later ones are
counted here and written at most once every ``refresh`` seconds, on the next occurrence after it.
A series ends after ``window`` seconds without a recurrence, and the next occurrence creates a new
Event. The table is bounded (``limit`` series, the least recently seen dropped first).

The log line of every occurrence stays (``Applier._record``): coalescing saves API writes, not
what an operator's log says.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from dataclasses import dataclass

WINDOW_SECONDS = 600.0  # a series ends after this long without a recurrence
REFRESH_SECONDS = 60.0  # a running series' count is written at most this often
LIMIT = 10_000  # series kept

SeriesKey = tuple[str, str, str, str, str]  # (namespace, name, uid, type, reason)


class Write(enum.Enum):
    CREATE = "create"  # a new Event
    SERIES = "series"  # a patch of the Event's series (count, lastObservedTime)
    SUPPRESS = "suppress"  # counted here only


@dataclass
class _Series:
    last: float  # when it last occurred (monotonic seconds)
    count: int  # occurrences within the series
    written: int  # the count the API server holds (1: the Event as created, no series yet)
    written_at: float


class EventSeries:
    def __init__(self, window: float = WINDOW_SECONDS, refresh: float = REFRESH_SECONDS, limit: int = LIMIT) -> None:
        self.window, self.refresh, self.limit = window, refresh, limit
        self._series: OrderedDict[SeriesKey, _Series] = OrderedDict()

    def __len__(self) -> int:
        return len(self._series)

    def record(self, key: SeriesKey, now: float) -> tuple[Write, int]:
        """One occurrence of ``key`` at ``now``: what to write, and the series' count."""
        s = self._series.get(key)
        if s is None or now - s.last > self.window:
            self._series[key] = _Series(last=now, count=1, written=1, written_at=now)
            self._series.move_to_end(key)
            while len(self._series) > self.limit:
                self._series.popitem(last=False)
            return Write.CREATE, 1
        s.count += 1
        s.last = now
        self._series.move_to_end(key)
        if s.written == 1 or now - s.written_at >= self.refresh:
            s.written, s.written_at = s.count, now
            return Write.SERIES, s.count
        return Write.SUPPRESS, s.count

    def forget(self, key: SeriesKey) -> None:
        """The write for ``key`` failed: its next occurrence starts over (creates an Event)."""
        self._series.pop(key, None)
