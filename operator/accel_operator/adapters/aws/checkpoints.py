"""The latest complete checkpoint under an ``s3://`` checkpoint URI, read with boto3.

The convention (README, "The checkpoint contract"; pure choices in ``reconcile.checkpoints``):
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
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from accel_api import vocabulary as v
from accel_operator.adapters.aws.errors import CloudUnavailable
from accel_operator.reconcile.checkpoints import Checkpoint, by_step_descending, newest

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


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


class S3CheckpointStore:
    def __init__(self, s3: Any) -> None:
        self._s3 = s3  # a boto3 S3 client

    @classmethod
    def from_environment(cls, region: str | None = None) -> S3CheckpointStore:
        return cls(boto3.client("s3", region_name=region))

    @classmethod
    def connect(cls, *, region: str | None, endpoint_url: str | None, timeout: float) -> S3CheckpointStore:
        """A client whose every call ends within about ``timeout`` (connect, read, two retries), so a
        lookup never holds the scheduler's threads; credentials come from boto3's usual chain."""
        config = Config(
            connect_timeout=max(1.0, timeout / 3),
            read_timeout=max(1.0, timeout / 3),
            retries={"max_attempts": 2, "mode": "standard"},
        )
        return cls(boto3.client("s3", region_name=region, endpoint_url=endpoint_url or None, config=config))

    def latest_complete(self, uri: str) -> Checkpoint | None:
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
