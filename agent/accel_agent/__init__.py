"""accel_agent: the node agent that reports what each node's GPUs or TPUs are really doing.

Runs as a DaemonSet on accelerator nodes (``python -m accel_agent``), samples the devices through
NVML (or a TPU/simulated backend), and writes one ``AcceleratorNodeReport`` per node. It imports
``accel_api`` and third-party libraries only, never the operator. Entry points:

- :func:`main` — the command line;
- :func:`build_agent` — an agent assembled from :class:`AgentSettings` (what ``main`` runs);
- :func:`run_cluster_pass` — one pass against a cluster with a given ``ApiClient`` (cluster tests).
"""

from accel_agent.app import build_agent, run_cluster_pass
from accel_agent.cli import main
from accel_agent.settings import AgentSettings, BackendChoice

__all__ = ["AgentSettings", "BackendChoice", "build_agent", "main", "run_cluster_pass"]
