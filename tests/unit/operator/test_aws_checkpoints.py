"""The S3 checkpoint store against moto's S3 in server mode: the newest step with a marker, only
under the job's own prefix, with a plausible step, within a request budget and a deadline."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import pytest

from accel_api import bounds
from accel_operator.adapters.aws.checkpoints import (
    FakeCheckpointStore,
    Limits,
    LookupTooLarge,
    LookupTooLong,
    NotS3,
    S3CheckpointStore,
    split_uri,
)
from accel_operator.adapters.aws.errors import CloudUnavailable
from tests.support.moto_server import CREDENTIALS, MotoServer, moto_server


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    with moto_server() as server:
        yield server


def test_split_uri() -> None:
    assert split_uri("s3://b") == ("b", "")
    assert split_uri("s3://b/a/b/") == ("b", "a/b/")
    for bad in ("/mnt/ckpt", "s3://", "gs://b/p"):
        with pytest.raises(NotS3):
            split_uri(bad)


def test_newest_complete_step(moto: MotoServer) -> None:
    s3 = moto.client("s3")
    s3.create_bucket(Bucket="ckpt")
    for step in (5, 10, 20):
        s3.put_object(Bucket="ckpt", Key=f"team/run/step-{step}/shard-0", Body=b"x")
        s3.put_object(Bucket="ckpt", Key=f"team/run/step-{step}/shard-1", Body=b"x")
    s3.put_object(Bucket="ckpt", Key="team/run/step-5/COMPLETE", Body=b"")
    s3.put_object(Bucket="ckpt", Key="team/run/step-10/COMPLETE", Body=b"")
    s3.put_object(Bucket="ckpt", Key="team/run/notes/COMPLETE", Body=b"")  # not a step
    s3.put_object(Bucket="ckpt", Key="team/run-other/step-99/COMPLETE", Body=b"")  # a sibling prefix
    store = S3CheckpointStore(s3)
    got = store.latest_complete("s3://ckpt/team/run")
    assert got is not None
    assert (got.uri, got.step) == ("s3://ckpt/team/run/step-10", 10)  # step-20 has no marker
    assert store.latest_complete("s3://ckpt/team/run/") == got
    s3.put_object(Bucket="ckpt", Key="team/run/step-20/COMPLETE", Body=b"")
    again = store.latest_complete("s3://ckpt/team/run")
    assert again is not None
    assert again.step == 20
    assert store.latest_complete("s3://ckpt/team/empty") is None
    assert store.latest_complete("s3://no-such-bucket/x") is None


def test_many_steps_page_through(moto: MotoServer) -> None:
    s3 = moto.client("s3")
    s3.create_bucket(Bucket="many")
    with ThreadPoolExecutor(16) as pool:  # more than one ListObjectsV2 page of prefixes
        list(pool.map(lambda step: s3.put_object(Bucket="many", Key=f"r/step-{step}/state", Body=b""), range(1, 1006)))
    s3.put_object(Bucket="many", Key="r/step-1004/COMPLETE", Body=b"")
    got = S3CheckpointStore(s3).latest_complete("s3://many/r")
    assert got is not None
    assert got.step == 1004


def test_unreachable_is_unavailable() -> None:
    import boto3
    from botocore.config import Config

    s3 = boto3.client(
        "s3",
        region_name="us-east-1",
        endpoint_url="http://127.0.0.1:9",
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=Config(retries={"total_max_attempts": 1}, connect_timeout=1),
    )
    with pytest.raises(CloudUnavailable):
        S3CheckpointStore(s3).latest_complete("s3://b/p")


def test_fake_store() -> None:
    fake = FakeCheckpointStore()
    assert fake.latest_complete("s3://b/p") is None
    fake.fail_next = CloudUnavailable("down")
    with pytest.raises(CloudUnavailable):
        fake.latest_complete("s3://b/p")
    assert fake.calls == ["s3://b/p", "s3://b/p"]


def test_connect_reads_the_endpoint_from_settings(moto: MotoServer, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        monkeypatch.setenv(key, value)
    s3 = moto.client("s3")
    s3.create_bucket(Bucket="connected")
    s3.put_object(Bucket="connected", Key="r/step-3/COMPLETE", Body=b"")
    store = S3CheckpointStore.connect(region="us-east-1", endpoint_url=moto.endpoint, limits=Limits(5))
    got = store.latest_complete("s3://connected/r")
    assert got is not None and got.uri == "s3://connected/r/step-3"


class _Counting:
    """A boto3 S3 client that counts the requests made through it."""

    def __init__(self, s3: Any) -> None:
        self.s3, self.requests = s3, 0

    def list_objects_v2(self, **kw: Any) -> Any:
        self.requests += 1
        return self.s3.list_objects_v2(**kw)

    def head_object(self, **kw: Any) -> Any:
        self.requests += 1
        return self.s3.head_object(**kw)


def test_only_the_jobs_own_prefix_is_read(moto: MotoServer) -> None:
    """``s3://b/a`` never reaches ``s3://b/ab/`` nor ``s3://b/a-old/``: the listing's prefix ends in ``/``."""
    s3 = moto.client("s3")
    s3.create_bucket(Bucket="shared")
    s3.put_object(Bucket="shared", Key="a/step-1/COMPLETE", Body=b"")
    for planted in ("ab/step-99/COMPLETE", "a-old/step-98/COMPLETE", "a/x/step-97/COMPLETE", "a/step-96"):
        s3.put_object(Bucket="shared", Key=planted, Body=b"")
    got = S3CheckpointStore(s3).latest_complete("s3://shared/a")
    assert got is not None and (got.uri, got.step) == ("s3://shared/a/step-1", 1)
    assert S3CheckpointStore(s3).latest_complete("s3://shared/ab") is not None  # its own, when it is the job's


def test_a_step_beyond_what_status_can_hold_is_never_chosen(moto: MotoServer) -> None:
    """A large step under the job's own prefix is still the job's (whoever can write there is its
    team); one above 2^53 could not be written to ``status.lastCheckpoint`` and is skipped."""
    s3 = moto.client("s3")
    s3.create_bucket(Bucket="steps")
    s3.put_object(Bucket="steps", Key="r/step-7/COMPLETE", Body=b"")
    s3.put_object(Bucket="steps", Key=f"r/step-{bounds.GENERATION_MAX + 1}/COMPLETE", Body=b"")
    s3.put_object(Bucket="steps", Key="r/step-999999999999999999/COMPLETE", Body=b"")
    got = S3CheckpointStore(s3).latest_complete("s3://steps/r")
    assert got is not None and got.step == 7
    s3.put_object(Bucket="steps", Key="r/step-99999999999/COMPLETE", Body=b"")
    big = S3CheckpointStore(s3).latest_complete("s3://steps/r")
    assert big is not None and big.step == 99_999_999_999


def test_a_lookup_makes_at_most_its_requests(moto: MotoServer) -> None:
    s3 = moto.client("s3")
    s3.create_bucket(Bucket="budget")
    for step in range(1, 11):  # ten steps, none complete: one list page and ten marker checks
        s3.put_object(Bucket="budget", Key=f"r/step-{step}/shard", Body=b"")
    counting = _Counting(s3)
    with pytest.raises(LookupTooLarge, match="more than 5 S3 requests needed"):
        S3CheckpointStore(counting, limits=Limits(max_requests=5)).latest_complete("s3://budget/r")
    assert counting.requests == 5
    counting.requests = 0
    assert S3CheckpointStore(counting, limits=Limits(max_requests=11)).latest_complete("s3://budget/r") is None
    assert counting.requests == 11


def test_list_pages_count_against_the_budget(moto: MotoServer) -> None:
    s3 = moto.client("s3")
    s3.create_bucket(Bucket="pages")
    with ThreadPoolExecutor(16) as pool:  # two ListObjectsV2 pages of step prefixes
        list(pool.map(lambda step: s3.put_object(Bucket="pages", Key=f"r/step-{step}/COMPLETE", Body=b""), range(1005)))
    counting = _Counting(s3)
    with pytest.raises(LookupTooLarge):
        S3CheckpointStore(counting, limits=Limits(max_requests=1)).latest_complete("s3://pages/r")
    assert counting.requests == 1
    got = S3CheckpointStore(counting, limits=Limits(max_requests=3)).latest_complete("s3://pages/r")
    assert got is not None and got.step == 1004


def test_no_request_starts_after_the_deadline(moto: MotoServer) -> None:
    s3 = moto.client("s3")
    s3.create_bucket(Bucket="slow")
    s3.put_object(Bucket="slow", Key="r/step-1/shard", Body=b"")
    now = [0.0]

    class Slow(_Counting):
        def list_objects_v2(self, **kw: Any) -> Any:
            now[0] += 11.0  # this page took longer than the lookup's deadline
            return super().list_objects_v2(**kw)

    slow = Slow(s3)
    with pytest.raises(LookupTooLong, match="no answer within 10s"):
        S3CheckpointStore(slow, limits=Limits(seconds=10), clock=lambda: now[0]).latest_complete("s3://slow/r")
    assert slow.requests == 1  # the marker check never went out


@contextmanager
def silent_endpoint() -> Iterator[str]:
    """An endpoint that accepts connections (the kernel's backlog) and never answers: a hung S3."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_a_server_that_never_answers_ends_the_lookup_by_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    with silent_endpoint() as endpoint:
        store = S3CheckpointStore.connect(region="us-east-1", endpoint_url=endpoint, limits=Limits(0.4))
        with pytest.raises(CloudUnavailable, match=r"(?i)timeout"):
            store.latest_complete("s3://b/r")  # the first makes the client (imports, service model)
        started = time.monotonic()
        with pytest.raises(CloudUnavailable, match=r"(?i)timeout"):
            store.latest_complete("s3://b/r")
        elapsed = time.monotonic() - started
    assert elapsed < 0.4 * 1.5 + 0.2, elapsed  # one read timeout of a quarter of the deadline, no retries
