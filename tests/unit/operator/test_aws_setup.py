"""The AWS set-up shipped as JSON (manifests/aws/) works with what the operator reads, against
moto's EventBridge, SQS and IAM (in server mode, real HTTP): the rules deliver each event the
operator acts on to the queue under the queue policy, the operator's reader parses what arrives,
events it ignores are not delivered, and the IAM policy grants every call the AWS adapters make."""

from __future__ import annotations

import ast
import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from accel_localcluster.preempt import spot_interruption_event
from accel_operator.adapters.aws.interruptions import InterruptionKind, parse_event
from tests.support.moto_server import MotoServer, moto_server

ROOT = Path(__file__).resolve().parents[3]
AWS = ROOT / "manifests" / "aws"
ADAPTERS = ROOT / "operator" / "accel_operator" / "adapters" / "aws"
ACCOUNT, REGION = "123456789012", "us-east-1"
CLIENTS = ("_sqs", "_s3", "_client")  # the adapters' attributes holding boto3 clients
# boto3 client method -> the IAM action it needs.
ACTIONS = {
    "receive_message": "sqs:ReceiveMessage",
    "delete_message": "sqs:DeleteMessage",
    "describe_spot_price_history": "ec2:DescribeSpotPriceHistory",
    "list_objects_v2": "s3:ListBucket",
    "head_object": "s3:GetObject",
}


def _filled(text: str) -> str:
    return text.replace("REGION", REGION).replace("ACCOUNT_ID", ACCOUNT)


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    with moto_server() as server:
        yield server


def _event(detail_type: str, **detail: Any) -> dict[str, Any]:
    event = spot_interruption_event("aws:///us-east-1a/i-0abc", region=REGION)
    return {**event, "detail-type": detail_type, "detail": {"instance-id": "i-0abc", **detail}}


def test_the_rules_deliver_what_the_operator_acts_on_to_its_queue(moto: MotoServer) -> None:
    sqs, events = moto.client("sqs"), moto.client("events")
    url = sqs.create_queue(QueueName="accel-operator-interruptions")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"Policy": _filled((AWS / "sqs-queue-policy.json").read_text())})
    for rule in json.loads((AWS / "eventbridge-rules.json").read_text())["rules"]:
        events.put_rule(Name=rule["Name"], EventPattern=json.dumps(rule["EventPattern"]), State="ENABLED")
        events.put_targets(Rule=rule["Name"], Targets=[{"Id": "queue", "Arn": arn}])
    sent = [
        _event("EC2 Spot Instance Interruption Warning", **{"instance-action": "terminate"}),
        _event("EC2 Instance Rebalance Recommendation"),
        _event("EC2 Instance State-change Notification", state="shutting-down"),
        _event("EC2 Instance State-change Notification", state="running"),  # not acted on: not delivered
        {**_event("EC2 Spot Instance Interruption Warning"), "source": "aws.other"},  # another source
    ]
    for event in sent:
        entry = {
            "Source": event["source"],
            "DetailType": event["detail-type"],
            "Detail": json.dumps(event["detail"]),
            "Time": dt.datetime.now(dt.UTC),
            "Resources": event["resources"],
        }
        assert events.put_events(Entries=[entry])["FailedEntryCount"] == 0
    bodies: list[str] = []
    for _ in range(5):
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0).get("Messages", [])
        bodies += [m["Body"] for m in got]
    assert len(bodies) == 3, bodies  # the ignored state and the other source were never delivered
    parsed = [parse_event(b) for b in bodies]
    assert sorted(i.kind for i in parsed if i is not None) == sorted(
        [InterruptionKind.SPOT_INTERRUPTION, InterruptionKind.REBALANCE, InterruptionKind.STATE_CHANGE]
    )
    assert {i.instance_id for i in parsed if i is not None} == {"i-0abc"}


def _calls() -> set[str]:
    """The boto3 methods the AWS adapters call (attribute calls on their clients)."""
    found: set[str] = set()
    for path in ADAPTERS.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            func = node.func if isinstance(node, ast.Call) else None
            owner = func.value if isinstance(func, ast.Attribute) else None
            if isinstance(func, ast.Attribute) and isinstance(owner, ast.Attribute) and owner.attr in CLIENTS:
                found.add(func.attr)
    return found


def test_the_iam_policy_grants_every_call_the_adapters_make_and_is_accepted(moto: MotoServer) -> None:
    calls = _calls()
    assert calls <= set(ACTIONS), f"map these calls to IAM actions in ACTIONS: {calls - set(ACTIONS)}"
    policy = json.loads(_filled((AWS / "iam-policy.json").read_text()))
    granted = {a for s in policy["Statement"] if s["Effect"] == "Allow" for a in s["Action"]}
    assert {ACTIONS[c] for c in calls} <= granted
    assert not any(a.endswith("*") for a in granted), "grant actions by name"
    made = moto.client("iam").create_policy(PolicyName="accel-operator", PolicyDocument=json.dumps(policy))
    assert made["Policy"]["Arn"].endswith(":policy/accel-operator")
