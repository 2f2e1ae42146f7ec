"""What every handler of one operator process shares: its settings, catalog and adapters.

Built once at start (``app.build_context``) and handed to kopf as the operator's memo, so no
handler reads the environment or builds a client of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from accel_api.catalog import Catalog
from accel_operator.adapters.kube.pools import PoolSource
from accel_operator.settings import OperatorSettings


@dataclass(frozen=True)
class OperatorContext:
    settings: OperatorSettings
    catalog: Catalog
    pools: PoolSource
