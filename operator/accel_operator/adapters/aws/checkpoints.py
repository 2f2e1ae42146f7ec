"""The latest complete checkpoint under an ``s3://`` checkpoint URI, read with boto3.

The convention (docs/concepts.md, "The checkpoint contract"; pure choices in ``reconcile.common.checkpoints``):
checkpoint N is the prefix ``<uri>/step-<N>/``; the job writes its data objects there first and
the empty marker ``<uri>/step-<N>/COMPLETE`` last. S3 has no rename, so the marker is what makes
a checkpoint atomic: a writer killed mid-checkpoint leaves objects without a marker, and that
step is never chosen. The store lists the step prefixes (``Prefix="<prefix>/step-"`` with
``Delimiter="/"``: one ``ListObjectsV2`` page per 1000 steps, shards and other names never listed,
and a sibling such as ``<prefix>-other/`` never reached: the prefix always ends in ``/``) and asks
for markers from the highest step down, stopping at the first step that has one (usually one or
two ``HeadObject`` calls). A step above ``bounds.GENERATION_MAX`` is not plausible and never chosen.

The URI is the tenant's (within the prefixes a policy grants its team, ``planning.policy``) and
the credentials are the operator's, so one lookup is bounded (:class:`Limits`): at most
``max_requests`` S3 requests (list pages and marker checks together), and a deadline checked
before each; every request has the client's own connect and read timeouts (a quarter of the
deadline each, no retries inside a lookup: the job's next decision asks again), so a lookup ends
in its own thread within 1.5 times its deadline even against a server that never answers. Past
a bound it raises :class:`LookupTooLong` or :class:`LookupTooLarge`, each a :class:`CloudUnavailable`:
the job waits with the reason, other jobs go on.

A PVC checkpoint URI is a path on the job's volume, which the operator does not mount: there the
operator trusts what the job reports (``reconcile.checkpoints.reported``), and the reference
trainer, given no ``ACCEL_RESUME_FROM``, finds the latest complete step on its volume itself.

``CheckpointStore`` is the port; ``S3CheckpointStore`` reads S3, ``FakeCheckpointStore`` answers
from a table, records calls and can be told to fail next.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from accel_api import vocabulary as v
from accel_operator.adapters.aws.errors import CloudUnavailable
from accel_operator.reconcile.common.checkpoints import Checkpoint, by_step_descending, newest, step_of

SCHEME: Final = "s3://"


class NotS3(ValueError):
    """The checkpoint URI is not ``s3://bucket[/prefix]``."""


def split_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/a/b/`` -> ``("bucket", "a/b/")``: the prefix ends in ``/`` unless empty."""
    if not uri.startswith(SCHEME):
        raise NotS3(uri)
    bucket, _, prefix = uri[len(SCHEME) :].partition("/")
    if not bucket:
        raise NotS3(uri)
    prefix = prefix.strip("/")
    return bucket, f"{prefix}/" if prefix else ""


class CheckpointStore(Protocol):
    def latest_complete(self, uri: str) -> Checkpoint | None: ...


class LookupTooLong(CloudUnavailable):
    """The lookup reached its deadline before it had an answer."""


class LookupTooLarge(CloudUnavailable):
    """The lookup would need more S3 requests than it may make."""


@dataclass(frozen=True)
class Limits:
    """What one lookup may spend (the settings ``checkpoint_lookup_timeout_seconds`` and
    ``checkpoint_lookup_max_requests``)."""

    seconds: float = 10.0
    max_requests: int = 64

    @property
    def call_seconds(self) -> float:
        """Each request's connect timeout, and its read timeout: a quarter of the deadline, so a
        request started just before the deadline ends by 1.5 times it."""
        return max(0.05, self.seconds / 4)


class _Budget:
    def __init__(self, uri: str, limits: Limits, clock: Callable[[], float]) -> None:
        self.uri, self.limits, self.clock = uri, limits, clock
        self.deadline = clock() + limits.seconds
        self.left = limits.max_requests

    def spend(self) -> None:
        """Called before each request: one more, if the deadline and the count allow it."""
        if self.clock() >= self.deadline:
            raise LookupTooLong(f"checkpoints under {self.uri}: no answer within {self.limits.seconds:g}s")
        if self.left <= 0:
            raise LookupTooLarge(
                f"checkpoints under {self.uri}: more than {self.limits.max_requests} S3 requests needed "
                "(list pages of 1000 steps and marker checks); remove old steps, or raise "
                "ACCEL_OPERATOR_CHECKPOINT_LOOKUP_MAX_REQUESTS"
            )
        self.left -= 1


def _code(exc: Any) -> str:  # a botocore ClientError
    return str(exc.response.get("Error", {}).get("Code", ""))


class S3CheckpointStore:
    """boto3 (about 20 MB of imports and service models) is imported, and the client made, at the
    first lookup: an operator whose jobs name no ``s3://`` checkpoints never loads it."""

    def __init__(
        self,
        s3: Any = None,
        *,
        make: Callable[[], Any] | None = None,
        limits: Limits | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client: Any = s3  # a boto3 S3 client, or None until ``make`` makes it
        self._make = make
        self._lock = threading.Lock()
        self.limits = limits or Limits()
        self._clock = clock

    @property
    def _s3(self) -> Any:
        if self._client is None:
            with self._lock:
                if self._client is None and self._make is not None:
                    self._client = self._make()
        return self._client

    @classmethod
    def connect(cls, *, region: str | None, endpoint_url: str | None, limits: Limits) -> S3CheckpointStore:
        """A client whose every request ends within the limits' ``call_seconds`` per connect and
        read, with no retries (the job's next decision asks again); credentials come from boto3's
        usual chain."""

        def make() -> Any:
            import boto3  # on first use only
            from botocore.config import Config

            config = Config(
                connect_timeout=limits.call_seconds,
                read_timeout=limits.call_seconds,
                retries={"total_max_attempts": 1, "mode": "standard"},
            )
            return boto3.client("s3", region_name=region, endpoint_url=endpoint_url or None, config=config)

        return cls(make=make, limits=limits)

    def latest_complete(self, uri: str) -> Checkpoint | None:
        from botocore.exceptions import BotoCoreError, ClientError  # see the class

        bucket, prefix = split_uri(uri)
        budget = _Budget(uri, self.limits, self._clock)
        try:
            for group in by_step_descending(self._step_names(bucket, prefix, budget)):
                found = (self._marker(bucket, prefix, name, budget) for name in group)
                complete = [c for c in found if c is not None]
                if complete:
                    return newest(complete)
        except ClientError as exc:
            if _code(exc) == "NoSuchBucket":
                return None
            raise CloudUnavailable(f"checkpoints under {uri}: {exc}") from exc
        except BotoCoreError as exc:
            raise CloudUnavailable(f"checkpoints under {uri}: {exc}") from exc
        return None

    def _step_names(self, bucket: str, prefix: str, budget: _Budget) -> list[str]:
        """The step directories right under ``prefix`` (``step-N``), a page at a time within the budget."""
        names: list[str] = []
        steps = f"{prefix}{v.CHECKPOINT_STEP_PREFIX}"
        ask: dict[str, Any] = {"Bucket": bucket, "Prefix": steps, "Delimiter": "/"}
        while True:
            budget.spend()
            page = self._s3.list_objects_v2(**ask)
            for common in page.get("CommonPrefixes", []):
                name = str(common["Prefix"])
                if name.startswith(steps):  # S3 answers only these; a server that does not is not believed
                    names.append(name[len(prefix) :].rstrip("/"))
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return names
            ask["ContinuationToken"] = token

    def _marker(self, bucket: str, prefix: str, name: str, budget: _Budget) -> Checkpoint | None:
        from botocore.exceptions import ClientError  # see the class

        step = step_of(name)
        if step is None:
            return None
        budget.spend()
        try:
            head = self._s3.head_object(Bucket=bucket, Key=f"{prefix}{name}/{v.CHECKPOINT_MARKER}")
        except ClientError as exc:
            if _code(exc) in ("404", "NoSuchKey", "NotFound"):
                return None
            raise
        modified = head.get("LastModified")
        when = modified if isinstance(modified, dt.datetime) else dt.datetime.fromtimestamp(0, dt.UTC)
        return Checkpoint(uri=f"{SCHEME}{bucket}/{prefix}{name}", step=step, time=when)


@dataclass
class FakeCheckpointStore:
    latest: dict[str, Checkpoint | None] = field(default_factory=dict)  # uri -> the answer
    calls: list[str] = field(default_factory=list)
    fail_next: Exception | None = None

    def latest_complete(self, uri: str) -> Checkpoint | None:
        self.calls.append(uri)
        if self.fail_next is not None:
            exc, self.fail_next = self.fail_next, None
            raise exc
        return self.latest.get(uri)


_: CheckpointStore = FakeCheckpointStore()
