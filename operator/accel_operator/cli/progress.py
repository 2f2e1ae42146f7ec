"""Progress of work that takes more than a couple of seconds (a report over thousands of jobs): a
bar redrawn in place on a terminal, plain lines otherwise (CI logs, pipes), always on stderr so
that ``-o json``/``csv``/``focus`` on stdout stay exactly the document.

Nothing is shown for work that ends within ``DELAY_SECONDS``: a quick command prints no noise.
Without a terminal, a line is printed per step and per tenth of a long step, never more often
than every ``LINE_SECONDS``.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import TextIO

DELAY_SECONDS = 2.0
LINE_SECONDS = 1.0
BAR_WIDTH = 30


class Progress:
    """``with Progress("cost report") as p: p.step("reading jobs", total=n); p.advance()``."""

    def __init__(self, label: str, stream: TextIO | None = None) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        self.tty = bool(isatty and isatty())
        self.started = time.monotonic()
        self.what = ""
        self.done = 0
        self.total = 0
        self.printed_at = 0.0
        self.printed_tenth = -1
        self.drawn = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def step(self, what: str, total: int = 0) -> None:
        """A new step of ``total`` items (0: one item, no count)."""
        self.what, self.done, self.total, self.printed_tenth = what, 0, max(0, total), -1
        self._show(force=True)

    def advance(self, n: int = 1) -> None:
        self.done = min(self.total, self.done + n) if self.total else self.done + n
        self._show(force=False)

    def close(self) -> None:
        if self.drawn and self.tty:
            self.stream.write("\n")
            self.stream.flush()
        self.drawn = False

    def _show(self, *, force: bool) -> None:
        now = time.monotonic()
        if now - self.started < DELAY_SECONDS:
            return
        count = f" {self.done:,}/{self.total:,}" if self.total else ""
        if self.tty:
            if not force and now - self.printed_at < 0.1 and self.done != self.total:
                return
            filled = BAR_WIDTH * self.done // self.total if self.total else 0
            bar = f" [{'#' * filled}{'.' * (BAR_WIDTH - filled)}]" if self.total else ""
            self.stream.write(f"\r\033[K{self.label}: {self.what}{bar}{count}")
        else:
            tenth = 10 * self.done // self.total if self.total else 0
            if not force and (tenth == self.printed_tenth or now - self.printed_at < LINE_SECONDS):
                return
            self.printed_tenth = tenth
            self.stream.write(f"{self.label}: {self.what}{count}\n")
        self.printed_at = now
        self.drawn = True
        self.stream.flush()
