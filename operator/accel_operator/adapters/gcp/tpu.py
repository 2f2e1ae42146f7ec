"""TPU VM node states through google-cloud-tpu (the TPU v2 API), for TPU pools outside GKE: a
spot or preemptible TPU VM that was reclaimed reports ``PREEMPTED`` (GKE pools are seen through
the ``cloud.google.com/impending-node-termination`` taint instead).

``TpuNodes`` is the port; ``GoogleTpuNodes`` asks the API (REST transport), ``FakeTpuNodes``
answers from a table, records calls and can be told to fail next.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from accel_operator.adapters.errors import Unavailable

PREEMPTED: Final = "PREEMPTED"
TERMINATED: Final = "TERMINATED"
GONE_STATES: Final = frozenset({PREEMPTED, TERMINATED})  # the node's workload is lost


class TpuUnavailable(Unavailable):
    """The TPU API did not answer (network, quota, 5xx, permissions): try again later."""


class TpuNodes(Protocol):
    def states(self, project: str, zone: str) -> dict[str, str]: ...  # node name -> state name


class TpuTypes(Protocol):
    """The accelerator types a zone offers (``v5litepod-8``, ``v5p-16``, ...): where a TPU pool
    can get capacity at all. Prices come from the catalog (the TPU API carries none)."""

    def accelerator_types(self, project: str, zone: str) -> frozenset[str]: ...


class GoogleTpuNodes:
    def __init__(self, client: Any) -> None:
        self._client = client  # a tpu_v2.TpuClient

    @classmethod
    def from_environment(cls) -> GoogleTpuNodes:
        """Application default credentials (Workload Identity in a cluster)."""
        from google.cloud import tpu_v2  # the SDK (and grpc) only where TPUs are configured

        return cls(tpu_v2.TpuClient(transport="rest"))

    @classmethod
    def at(cls, endpoint: str) -> GoogleTpuNodes:
        """An explicit endpoint without credentials (a local stand-in, or a private endpoint
        behind a proxy that authenticates)."""
        from google.auth.credentials import AnonymousCredentials  # as from_environment
        from google.cloud import tpu_v2

        return cls(
            tpu_v2.TpuClient(
                transport="rest",
                credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
                client_options={"api_endpoint": endpoint},
            )
        )

    def states(self, project: str, zone: str) -> dict[str, str]:
        from google.api_core import exceptions as api_exceptions  # as from_environment
        from google.cloud import tpu_v2

        parent = f"projects/{project}/locations/{zone}"
        try:
            return {
                str(node.name).rsplit("/", 1)[-1]: tpu_v2.Node.State(node.state).name
                for node in self._client.list_nodes(parent=parent)
            }
        except api_exceptions.GoogleAPIError as exc:
            raise TpuUnavailable(f"TPU nodes in {parent}: {exc}") from exc

    def accelerator_types(self, project: str, zone: str) -> frozenset[str]:
        from google.api_core import exceptions as api_exceptions  # as from_environment

        parent = f"projects/{project}/locations/{zone}"
        try:
            return frozenset(
                str(t.type_ or str(t.name).rsplit("/", 1)[-1])[:64]
                for t in self._client.list_accelerator_types(parent=parent)
            )
        except api_exceptions.GoogleAPIError as exc:
            raise TpuUnavailable(f"TPU accelerator types in {parent}: {exc}") from exc


@dataclass
class FakeTpuNodes:
    nodes: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    types: dict[tuple[str, str], frozenset[str]] = field(default_factory=dict)
    calls: list[tuple[str, str]] = field(default_factory=list)
    fail_next: Exception | None = None

    def states(self, project: str, zone: str) -> dict[str, str]:
        self.calls.append((project, zone))
        if self.fail_next is not None:
            exc, self.fail_next = self.fail_next, None
            raise exc
        return dict(self.nodes.get((project, zone), {}))

    def accelerator_types(self, project: str, zone: str) -> frozenset[str]:
        self.calls.append((project, zone))
        if self.fail_next is not None:
            exc, self.fail_next = self.fail_next, None
            raise exc
        return self.types.get((project, zone), frozenset())


_: TpuNodes = FakeTpuNodes()
_types: TpuTypes = FakeTpuNodes()
