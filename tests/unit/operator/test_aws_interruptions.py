"""EC2 interruption notices: parsing, provider ids, the fake queue, and the SQS adapter against
moto's SQS in server mode (real HTTP)."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from accel_localcluster.preempt import spot_interruption_event
from accel_operator.adapters.aws.errors import CloudUnavailable
from accel_operator.adapters.aws.interruptions import (
    FakeInterruptionQueue,
    Interruption,
    InterruptionKind,
    SqsInterruptionQueue,
    instance_id_from_provider_id,
    nodes_by_instance,
    parse_event,
)
from tests.support.moto_server import MotoServer, moto_server

PROVIDER_ID = "aws:///us-east-1a/i-0abc123"


def _event(detail_type: str, detail: dict[str, Any], when: str = "2026-11-26T08:00:00Z") -> str:
    return json.dumps({"source": "aws.ec2", "detail-type": detail_type, "time": when, "detail": detail})


def test_parses_the_three_events() -> None:
    spot = parse_event(json.dumps(spot_interruption_event(PROVIDER_ID)), "r1")
    assert spot is not None
    assert (spot.kind, spot.instance_id, spot.receipt) == (InterruptionKind.SPOT_INTERRUPTION, "i-0abc123", "r1")
    assert spot.time.tzinfo is not None
    rebalance = parse_event(_event("EC2 Instance Rebalance Recommendation", {"instance-id": "i-1"}))
    assert rebalance == Interruption(InterruptionKind.REBALANCE, "i-1", dt.datetime(2026, 11, 26, 8, tzinfo=dt.UTC), "")
    for state in ("stopping", "stopped", "shutting-down", "terminated"):
        got = parse_event(_event("EC2 Instance State-change Notification", {"instance-id": "i-2", "state": state}))
        assert got is not None
        assert got.kind is InterruptionKind.STATE_CHANGE


@pytest.mark.parametrize(
    "body",
    [
        "not json",
        "{",
        "[]",
        "null",
        json.dumps({"source": "aws.ec2", "detail-type": "EC2 Spot Instance Request Fulfillment", "detail": {}}),
        _event("EC2 Instance State-change Notification", {"instance-id": "i-2", "state": "running"}),
        _event("EC2 Instance Rebalance Recommendation", {"instance-id": "node-1"}),
        _event("EC2 Instance Rebalance Recommendation", {}),
        _event("EC2 Instance Rebalance Recommendation", {"instance-id": "i-1"}, when="yesterday"),
        json.dumps({"source": "aws.health", "detail-type": "EC2 Instance Rebalance Recommendation", "detail": {}}),
        "[" * 100_000,
    ],
)
def test_anything_else_is_none(body: str) -> None:
    assert parse_event(body) is None


def test_instance_from_provider_id() -> None:
    assert instance_id_from_provider_id("aws:///us-east-1a/i-0abc") == "i-0abc"
    assert instance_id_from_provider_id("aws:///us-east-1a/i-0abc/") == "i-0abc"
    assert instance_id_from_provider_id("gce://proj/zone/node") is None
    assert instance_id_from_provider_id("kwok://node-1") is None
    assert instance_id_from_provider_id("") is None
    assert nodes_by_instance([("n1", PROVIDER_ID), ("n2", "kwok://n2"), ("n3", "")]) == {"i-0abc123": "n1"}


def test_fake_queue_redelivers_until_acked() -> None:
    q = FakeInterruptionQueue()
    q.send(spot_interruption_event(PROVIDER_ID))
    q.send("garbage")
    [got] = q.receive()
    assert q.dropped == ["garbage"]
    assert q.receive() == []  # in flight: invisible
    q.expire_visibility()
    [again] = q.receive()
    assert again.instance_id == got.instance_id
    q.ack(again)
    q.expire_visibility()
    assert q.receive() == []
    assert q.acked == [again]
    q.fail_next = CloudUnavailable("down")
    with pytest.raises(CloudUnavailable):
        q.receive()


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    with moto_server() as server:
        yield server


def _queue(moto: MotoServer, name: str) -> tuple[Any, str]:
    sqs = moto.client("sqs")
    url = sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "1"})["QueueUrl"]
    return sqs, str(url)


def test_sqs_receive_parse_ack(moto: MotoServer) -> None:
    sqs, url = _queue(moto, "interruptions-ack")
    for n in range(3):
        sqs.send_message(QueueUrl=url, MessageBody=json.dumps(spot_interruption_event(f"aws:///us-east-1a/i-{n}")))
    sqs.send_message(QueueUrl=url, MessageBody="not an event")
    q = SqsInterruptionQueue(sqs, url)
    got: list[Interruption] = []
    for _ in range(5):
        got += q.receive(wait_seconds=0)
    assert sorted(i.instance_id for i in got) == ["i-0", "i-1", "i-2"]
    assert all(i.kind is InterruptionKind.SPOT_INTERRUPTION and i.receipt for i in got)
    for i in got:
        q.ack(i)
    q.ack(got[0])  # twice: harmless
    time.sleep(1.5)  # past the visibility timeout: nothing comes back, not even the garbage
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert (attrs["ApproximateNumberOfMessages"], attrs["ApproximateNumberOfMessagesNotVisible"]) == ("0", "0")


def test_sqs_redelivers_what_was_not_acked(moto: MotoServer) -> None:
    sqs, url = _queue(moto, "interruptions-crash")
    sqs.send_message(QueueUrl=url, MessageBody=json.dumps(spot_interruption_event(PROVIDER_ID)))
    q = SqsInterruptionQueue(sqs, url)
    [first] = q.receive(wait_seconds=0)
    assert q.receive(wait_seconds=0) == []  # invisible while "being acted on"
    time.sleep(1.5)  # the operator crashed before ack: the visibility timeout passes
    [again] = q.receive(wait_seconds=1)
    assert again.instance_id == first.instance_id == "i-0abc123"
    q.ack(again)
    time.sleep(1.5)
    assert q.receive(wait_seconds=0) == []


def test_sqs_errors_are_unavailable(moto: MotoServer) -> None:
    q = SqsInterruptionQueue(moto.client("sqs"), f"{moto.endpoint}/123456789012/no-such-queue")
    with pytest.raises(CloudUnavailable):
        q.receive(wait_seconds=0)
