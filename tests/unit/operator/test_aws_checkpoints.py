"""The S3 checkpoint store against moto's S3 in server mode: the newest step with a marker."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from accel_operator.adapters.aws.checkpoints import FakeCheckpointStore, NotS3, S3CheckpointStore, split_uri
from accel_operator.adapters.aws.errors import CloudUnavailable
from tests.support.moto_server import MotoServer, moto_server


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
    store = S3CheckpointStore.connect(region="us-east-1", endpoint_url=moto.endpoint, timeout=5)
    got = store.latest_complete("s3://connected/r")
    assert got is not None and got.uri == "s3://connected/r/step-3"
