"""One active replica: leader election on a coordination.k8s.io/v1 Lease.

Every replica watches and indexes; only the holder of the Lease decides and writes. The holder
renews every ``duration / 3``; another replica takes the Lease over only once it has not been
renewed for ``duration`` (a stopped or partitioned leader), using the Lease's resourceVersion so
two candidates can never both win. A leader that cannot renew in time steps down by itself
before the others may take over.

(kopf's own peering was not used: replicas of the same priority all freeze, and its pause does
not reach the operator's scheduling loop, which runs beside kopf's handlers.)
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field
from typing import Protocol

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException


class Elector(Protocol):
    def leading(self) -> bool: ...

    def tick(self) -> bool: ...  # try to acquire or renew; whether this replica leads now


@dataclass
class AlwaysLeader:
    """A single replica (or a test): it always leads."""

    def leading(self) -> bool:
        return True

    def tick(self) -> bool:
        return True


def _micro(t: dt.datetime) -> dt.datetime:
    return t.replace(microsecond=(t.microsecond // 1000) * 1000)


@dataclass
class LeaseElector:
    api: client.ApiClient
    namespace: str
    name: str
    identity: str
    duration: float = 15.0
    _valid_until: float = 0.0  # monotonic time until which this replica may act
    _coordination: client.CoordinationV1Api = field(init=False)

    def __post_init__(self) -> None:
        self._coordination = client.CoordinationV1Api(self.api)

    def leading(self) -> bool:
        return time.monotonic() < self._valid_until

    def _spec(self, now: dt.datetime, acquired: dt.datetime | None, transitions: int) -> client.V1LeaseSpec:
        return client.V1LeaseSpec(
            holder_identity=self.identity,
            lease_duration_seconds=int(self.duration),
            acquire_time=_micro(acquired or now),
            renew_time=_micro(now),
            lease_transitions=transitions,
        )

    def tick(self) -> bool:
        started = time.monotonic()
        now = dt.datetime.now(dt.UTC)
        try:
            lease = self._coordination.read_namespaced_lease(self.name, self.namespace, _request_timeout=5)
        except ApiException as exc:
            if exc.status != 404:
                return self.leading()
            body = client.V1Lease(
                metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace),
                spec=self._spec(now, None, 0),
            )
            try:
                self._coordination.create_namespaced_lease(self.namespace, body, _request_timeout=5)
            except (ApiException, urllib3.exceptions.HTTPError):
                return self.leading()
            self._valid_until = started + self.duration * 2 / 3
            return True
        except urllib3.exceptions.HTTPError:
            return self.leading()
        spec = lease.spec or client.V1LeaseSpec()
        mine = spec.holder_identity == self.identity
        renewed = spec.renew_time or spec.acquire_time
        held_for = float(spec.lease_duration_seconds or self.duration)
        expired = renewed is None or (now - renewed).total_seconds() > held_for
        if not mine and not expired:
            self._valid_until = 0.0
            return False
        transitions = (spec.lease_transitions or 0) + (0 if mine else 1)
        lease.spec = self._spec(now, spec.acquire_time if mine else None, transitions)
        try:
            # The resourceVersion read above makes this a compare-and-swap.
            self._coordination.replace_namespaced_lease(self.name, self.namespace, lease, _request_timeout=5)
        except (ApiException, urllib3.exceptions.HTTPError):
            return self.leading()
        # Act only until a third of the duration before anyone else may take over.
        self._valid_until = started + self.duration * 2 / 3
        return True
