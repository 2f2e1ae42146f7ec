"""EC2 interruption notices from the SQS queue that EventBridge fills (the queue the AWS node
termination handler reads in queue mode), read with boto3.

EventBridge rules put the events unchanged on the queue, one JSON event per message body:
``EC2 Spot Instance Interruption Warning`` (two minutes before the instance is reclaimed),
``EC2 Instance Rebalance Recommendation`` (elevated risk; no deadline) and
``EC2 Instance State-change Notification`` (acted on for ``stopping``, ``stopped``,
``shutting-down`` and ``terminated`` only). ``detail.instance-id`` names the instance; a Node
names its instance in ``spec.providerID`` (``aws:///<zone>/<instance-id>``).

Delivery is at least once: ``receive`` hands out notices, and the caller ``ack``s each one only
after acting on it (tainting the node, asking for a checkpoint). A crash in between leaves the
message on the queue, SQS delivers it again after its visibility timeout, and acting twice is
harmless. Messages that are not one of these events (other event types, states we ignore,
malformed JSON) are deleted on receipt so they do not come back forever.

``InterruptionQueue`` is the port; ``SqsInterruptionQueue`` reads SQS, ``FakeInterruptionQueue``
records calls and can be told to fail next.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final, Protocol

from accel_api import durations
from accel_operator.adapters.aws.errors import CloudUnavailable


class InterruptionKind(StrEnum):
    SPOT_INTERRUPTION = "spot-interruption"  # reclaimed in two minutes
    REBALANCE = "rebalance-recommendation"  # elevated risk, no deadline
    STATE_CHANGE = "state-change"  # stopping, stopped, shutting-down, terminated


DETAIL_TYPES: Final = {
    "EC2 Spot Instance Interruption Warning": InterruptionKind.SPOT_INTERRUPTION,
    "EC2 Instance Rebalance Recommendation": InterruptionKind.REBALANCE,
    "EC2 Instance State-change Notification": InterruptionKind.STATE_CHANGE,
}
ACTED_ON_STATES: Final = frozenset({"stopping", "stopped", "shutting-down", "terminated"})
MAX_BATCH: Final = 10  # SQS's limit per ReceiveMessage
MAX_WAIT_SECONDS: Final = 20  # SQS's long-poll limit
_MAX_BODY: Final = 256 * 1024  # SQS's message size limit


@dataclass(frozen=True)
class Interruption:
    kind: InterruptionKind
    instance_id: str
    time: dt.datetime  # the event's time (UTC)
    receipt: str = ""  # the SQS receipt handle: what ack deletes


def parse_event(body: str | bytes, receipt: str = "") -> Interruption | None:
    """One queue message's body as an interruption, or None: not JSON, not an event we act on,
    or missing the instance id or a valid time."""
    if len(body) > _MAX_BODY:
        return None
    try:
        event: Any = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(event, dict) or event.get("source") != "aws.ec2":
        return None
    kind = DETAIL_TYPES.get(str(event.get("detail-type")))
    detail = event.get("detail")
    if kind is None or not isinstance(detail, dict):
        return None
    instance_id = detail.get("instance-id")
    if not isinstance(instance_id, str) or not instance_id.startswith("i-") or len(instance_id) > 64:
        return None
    if kind is InterruptionKind.STATE_CHANGE and detail.get("state") not in ACTED_ON_STATES:
        return None
    time = durations.parse_utc(event.get("time"))
    if time is None:
        return None
    return Interruption(kind=kind, instance_id=instance_id, time=time, receipt=receipt)


def instance_id_from_provider_id(provider_id: str) -> str | None:
    """``aws:///us-east-1a/i-0abc`` -> ``i-0abc``; None for a node that is not an EC2 instance."""
    if not provider_id.startswith("aws://"):
        return None
    last = provider_id.rstrip("/").rsplit("/", 1)[-1]
    return last if last.startswith("i-") and len(last) > 2 else None


def nodes_by_instance(provider_ids: Iterable[tuple[str, str]]) -> dict[str, str]:
    """``(node name, spec.providerID)`` pairs -> ``{instance id: node name}`` for EC2 nodes."""
    out: dict[str, str] = {}
    for node, provider_id in provider_ids:
        instance = instance_id_from_provider_id(provider_id or "")
        if instance is not None:
            out[instance] = node
    return out


class InterruptionQueue(Protocol):
    def receive(self, max_messages: int = MAX_BATCH, wait_seconds: int = MAX_WAIT_SECONDS) -> list[Interruption]: ...

    def ack(self, interruption: Interruption) -> None: ...


def _unavailable(what: str, exc: Exception) -> CloudUnavailable:
    return CloudUnavailable(f"{what}: {exc}")


class SqsInterruptionQueue:
    def __init__(self, sqs: Any, queue_url: str) -> None:
        self._sqs = sqs  # a boto3 SQS client
        self._url = queue_url

    @classmethod
    def from_environment(
        cls, queue_url: str, region: str | None = None, endpoint_url: str | None = None
    ) -> SqsInterruptionQueue:
        """A client from the default credential chain (IRSA / Pod Identity in a cluster);
        ``endpoint_url``: another endpoint than AWS's (moto in tests)."""
        import boto3  # the SDK only where a queue is configured

        return cls(boto3.client("sqs", region_name=region or None, endpoint_url=endpoint_url or None), queue_url)

    def receive(self, max_messages: int = MAX_BATCH, wait_seconds: int = MAX_WAIT_SECONDS) -> list[Interruption]:
        from botocore.exceptions import BotoCoreError, ClientError  # the SDK only when used

        try:
            reply = self._sqs.receive_message(
                QueueUrl=self._url,
                MaxNumberOfMessages=min(MAX_BATCH, max(1, max_messages)),
                WaitTimeSeconds=min(MAX_WAIT_SECONDS, max(0, wait_seconds)),
            )
        except (ClientError, BotoCoreError) as exc:
            raise _unavailable(f"receive from {self._url}", exc) from exc
        out: list[Interruption] = []
        for message in reply.get("Messages", []):
            receipt = str(message.get("ReceiptHandle", ""))
            parsed = parse_event(str(message.get("Body", "")), receipt)
            if parsed is None:
                self._delete(receipt)  # not ours: never let it come back
            else:
                out.append(parsed)
        return out

    def ack(self, interruption: Interruption) -> None:
        self._delete(interruption.receipt)

    def _delete(self, receipt: str) -> None:
        if not receipt:
            return
        from botocore.exceptions import BotoCoreError, ClientError  # the SDK only when used

        try:
            self._sqs.delete_message(QueueUrl=self._url, ReceiptHandle=receipt)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if "ReceiptHandleIsInvalid" in code:
                return  # already redelivered to someone: they will act and ack; acting twice is harmless
            raise _unavailable(f"delete from {self._url}", exc) from exc
        except BotoCoreError as exc:
            raise _unavailable(f"delete from {self._url}", exc) from exc


@dataclass
class FakeInterruptionQueue:
    """An in-memory queue with SQS's semantics: received messages are invisible until ``ack``
    deletes them or ``expire_visibility`` (the visibility timeout passing) makes them due again."""

    queued: list[tuple[str, str]] = field(default_factory=list)  # (receipt, body) due for delivery
    in_flight: dict[str, str] = field(default_factory=dict)  # receipt -> body
    acked: list[Interruption] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)  # bodies deleted on receipt as not ours
    calls: list[tuple[str, Any]] = field(default_factory=list)
    fail_next: Exception | None = None
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    def _maybe_fail(self) -> None:
        if self.fail_next is not None:
            exc, self.fail_next = self.fail_next, None
            raise exc

    def send(self, event: dict[str, Any] | str) -> None:
        body = event if isinstance(event, str) else json.dumps(event)
        self.queued.append((f"receipt-{next(self._ids)}", body))

    def expire_visibility(self) -> None:
        self.queued.extend(self.in_flight.items())
        self.in_flight.clear()

    def receive(self, max_messages: int = MAX_BATCH, wait_seconds: int = MAX_WAIT_SECONDS) -> list[Interruption]:
        self.calls.append(("receive", (max_messages, wait_seconds)))
        self._maybe_fail()
        n = min(MAX_BATCH, max(1, max_messages))
        batch, self.queued = self.queued[:n], self.queued[n:]
        out: list[Interruption] = []
        for receipt, body in batch:
            parsed = parse_event(body, receipt)
            if parsed is None:
                self.dropped.append(body)
            else:
                self.in_flight[receipt] = body
                out.append(parsed)
        return out

    def ack(self, interruption: Interruption) -> None:
        self.calls.append(("ack", interruption.receipt))
        self._maybe_fail()
        if self.in_flight.pop(interruption.receipt, None) is not None:
            self.acked.append(interruption)


_: InterruptionQueue = FakeInterruptionQueue()
