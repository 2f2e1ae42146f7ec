"""The operator's log format: plain text for people, or one JSON object per line for log pipelines.

Every line carries time, level, logger and message; a decision's line also names its ``job``
(namespace/name). Messages are clipped in both formats (tenant text is bounded already; this
bounds the rest): at most ``MESSAGE_LIMIT`` characters, and in text one line per record, control
characters escaped, so a value with a newline cannot forge a log line.
"""

from __future__ import annotations

import json
import logging
from typing import Any

MESSAGE_LIMIT = 2000
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


def one_line(message: str, limit: int = MESSAGE_LIMIT) -> str:
    """``message`` cut to ``limit`` characters (saying how many were cut), control characters
    escaped (a newline becomes ``\\n``)."""
    cut = len(message) - limit
    head = message[:limit] if cut > 0 else message
    if not head.isprintable():
        head = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in head)
    return f"{head}…(+{cut} chars)" if cut > 0 else head


class TextFormatter(logging.Formatter):
    """``time LEVEL logger message`` on one line; a traceback follows on its own lines, its last
    ``MESSAGE_LIMIT`` characters."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 (logging's name)
        record.message = one_line(record.message)
        return super().formatMessage(record)

    def formatException(self, ei: Any) -> str:  # noqa: N802 (logging's name)
        return super().formatException(ei)[-MESSAGE_LIMIT:]


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        out: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname,
            "logger": record.name,
            "message": message[:MESSAGE_LIMIT],
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value if isinstance(value, int | float | bool) or value is None else str(value)[:256]
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)[-MESSAGE_LIMIT:]
        return json.dumps(out, ensure_ascii=False)


def configure(fmt: str, level: int = logging.INFO) -> None:
    handler = logging.StreamHandler()
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # kopf logs a line per handler call per object event ("Handler ... succeeded"): thousands a
    # minute on a busy cluster, and a tenth of the operator's CPU in the scale benchmark. Its
    # warnings and errors (a handler that failed, a watch that broke) still come through.
    logging.getLogger("kopf.objects").setLevel(max(level, logging.WARNING))
