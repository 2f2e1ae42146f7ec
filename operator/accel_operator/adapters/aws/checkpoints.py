"""The latest complete checkpoint under an ``s3://`` checkpoint URI, read with boto3.

The convention (docs/concepts.md, "The checkpoint contract"; pure choices in ``reconcile.common.checkpoints``):
checkpoint N is the prefix ``<uri>/step-<N>/``; the job writes its data objects there first and
the empty marker ``<uri>/step-<N>/COMPLETE`` last. S3 has no rename, so the marker is what makes
a checkpoint atomic: a writer killed mid-checkpoint leaves objects without a marker, and that
step is never chosen. The store lists the step prefixes (one ``ListObjectsV2`` page per 1000
steps, with ``Delimiter="/"``, so shards are never listed) and asks for markers from the highest
step down, stopping at the first step that has one (usually one or two ``HeadObject`` calls).

A PVC checkpoint URI is a path on the job's volume, which the operator does not mount: there the
operator trusts what the job reports (``reconcile.checkpoints.reported``), and the reference
trainer, given no ``ACCEL_RESUME_FROM``, finds the latest complete step on its volume itself.

``CheckpointStore`` is the port; ``S3CheckpointStore`` reads S3, ``FakeCheckpointStore`` answers
from a table, records calls and can be told to fail next.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from accel_api import vocabulary as v
from accel_operator.adapters.aws.errors import CloudUnavailable
from accel_operator.reconcile.common.checkpoints import Checkpoint, by_step_descending, newest

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


def _code(exc: Any) -> str:  # a botocore ClientError
    return str(exc.response.get("Error", {}).get("Code", ""))


class S3CheckpointStore:
    """boto3 (about 20 MB of imports and service models) is imported, and the client made, at the
    first lookup: an operator whose jobs name no ``s3://`` checkpoints never loads it."""

    def __init__(self, s3: Any = None, *, make: Callable[[], Any] | None = None) -> None:
        self._client: Any = s3  # a boto3 S3 client, or None until ``make`` makes it
        self._make = make
        self._lock = threading.Lock()

    @property
    def _s3(self) -> Any:
        if self._client is None:
            with self._lock:
                if self._client is None and self._make is not None:
                    self._client = self._make()
        return self._client

    @classmethod
    def from_environment(cls, region: str | None = None) -> S3CheckpointStore:
        def make() -> Any:
            import boto3  # on first use only

            return boto3.client("s3", region_name=region)

        return cls(make=make)

    @classmethod
    def connect(cls, *, region: str | None, endpoint_url: str | None, timeout: float) -> S3CheckpointStore:
        """A client whose every call ends within about ``timeout`` (connect, read, two retries), so a
        lookup never holds the scheduler's threads; credentials come from boto3's usual chain."""

        def make() -> Any:
            import boto3  # on first use only
            from botocore.config import Config

            config = Config(
                connect_timeout=max(1.0, timeout / 3),
                read_timeout=max(1.0, timeout / 3),
                retries={"max_attempts": 2, "mode": "standard"},
            )
            return boto3.client("s3", region_name=region, endpoint_url=endpoint_url or None, config=config)

        return cls(make=make)

    def latest_complete(self, uri: str) -> Checkpoint | None:
        from botocore.exceptions import BotoCoreError, ClientError  # see the class

        bucket, prefix = split_uri(uri)
        try:
            for group in by_step_descending(self._step_names(bucket, prefix)):
                complete = [c for c in (self._marker(bucket, prefix, name) for name in group) if c is not None]
                if complete:
                    return newest(complete)
        except ClientError as exc:
            if _code(exc) == "NoSuchBucket":
                return None
            raise CloudUnavailable(f"checkpoints under {uri}: {exc}") from exc
        except BotoCoreError as exc:
            raise CloudUnavailable(f"checkpoints under {uri}: {exc}") from exc
        return None

    def _step_names(self, bucket: str, prefix: str) -> list[str]:
        names: list[str] = []
        pages = self._s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix, Delimiter="/")
        for page in pages:
            for common in page.get("CommonPrefixes", []):
                names.append(str(common["Prefix"])[len(prefix) :].rstrip("/"))
        return names

    def _marker(self, bucket: str, prefix: str, name: str) -> Checkpoint | None:
        from botocore.exceptions import ClientError  # see the class

        try:
            head = self._s3.head_object(Bucket=bucket, Key=f"{prefix}{name}/{v.CHECKPOINT_MARKER}")
        except ClientError as exc:
            if _code(exc) in ("404", "NoSuchKey", "NotFound"):
                return None
            raise
        modified = head.get("LastModified")
        time = modified if isinstance(modified, dt.datetime) else dt.datetime.fromtimestamp(0, dt.UTC)
        step = int(name.removeprefix(v.CHECKPOINT_STEP_PREFIX))
        return Checkpoint(uri=f"{SCHEME}{bucket}/{prefix}{name}", step=step, time=time)


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
