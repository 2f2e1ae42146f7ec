"""One clip for the condition and event messages the reconcilers build by hand."""

from __future__ import annotations

from typing import Final

MESSAGE_LIMIT: Final = 1000


def clip(text: str) -> str:
    """``text`` cut to ``MESSAGE_LIMIT`` characters, with a trailing "…" when cut."""
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 1] + "…"
