"""Deterministic names of what the operator creates, so a retried reconcile never makes a second one.

The decision records the workload's name in the job's status before the workload exists, and
the workload builder names the objects it builds with the same function.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

# An Indexed Job's pods get hostnames <name>-<index>, which must be DNS labels (≤ 63): leave
# room for the largest gang the API allows (bounds.NODES: index 65535).
INDEX_SUFFIX: Final = len("-65535")
MAX_NAME_LENGTH: Final = 63 - INDEX_SUFFIX
HASH: Final = 8
DNS_1035: Final = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:HASH]


def workload_name(job_name: str, attempt: int) -> str:
    """The Job's and the Service's name for one attempt: ``<job>-a<attempt>`` when that is a
    DNS-1035 label of at most ``MAX_NAME_LENGTH`` characters, else a stable shortening
    ``<prefix>-<hash of the job name>-a<attempt>`` (dots become dashes; a leading digit gets a
    ``j``), so pods' hostnames ``<name>-<index>`` are labels too."""
    if attempt < 0:
        raise ValueError(f"attempt must be >= 0 (got {attempt})")
    tail = f"-a{attempt}"
    plain = f"{job_name}{tail}"
    if len(plain) <= MAX_NAME_LENGTH and DNS_1035.match(plain):
        return plain
    stem = re.sub(r"[^a-z0-9-]", "-", job_name.lower())
    if not stem[:1].isalpha():
        stem = "j" + stem
    room = MAX_NAME_LENGTH - len(tail) - HASH - 1
    stem = stem[: room - 1].rstrip("-")  # -1: the dash before the hash
    return f"{stem}-{digest(job_name)}{tail}"
