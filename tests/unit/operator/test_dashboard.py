"""The Grafana dashboard in manifests/monitoring: valid JSON, and every query names only metrics
the operator and the node agent really export (names read from their registries, not a list)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from prometheus_client import CollectorRegistry

from accel_agent.metrics import AgentMetrics
from accel_operator.metrics import OperatorMetrics

ROOT = Path(__file__).resolve().parents[3]
DASHBOARD = ROOT / "manifests" / "monitoring" / "grafana-dashboard.json"
METRIC = re.compile(r"\b(accel_[a-z0-9_]+|DCGM_FI_[A-Z0-9_]+)\b")


def _exported() -> set[str]:
    names: set[str] = set()
    registries = [OperatorMetrics().registry, AgentMetrics(CollectorRegistry(), hostname="n").registry]
    for registry in registries:
        for family in registry.collect():
            if family.type == "counter":
                names.add(f"{family.name}_total")
            elif family.type == "histogram":
                names.update(f"{family.name}_{s}" for s in ("bucket", "sum", "count"))
            else:
                names.add(family.name)
    return names


def _exprs() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    out: list[str] = []
    for panel in doc["panels"]:
        for inner in [panel, *panel.get("panels", [])]:
            out.extend(t["expr"] for t in inner.get("targets", []))
    return out


def test_every_query_names_a_metric_that_exists() -> None:
    exported = _exported()
    exprs = _exprs()
    assert len(exprs) >= 15
    used = set()
    for expr in exprs:
        names = METRIC.findall(expr)
        assert names, f"no metric in {expr!r}"
        for name in names:
            assert name in exported, f"{expr!r} names {name}, which neither the operator nor the agent exports"
        used.update(names)
    # The figures are all on it.
    for name in (
        "accel_cost_usd_total",
        "accel_cost_lost_to_preemption_usd_total",
        "accel_cost_idle_usd_total",
        "accel_cost_budget_used_ratio",
        "accel_agent_gpu_utilization_percent",
    ):
        assert name in used
    # The agent's own names only: the DCGM exporter's are exported by an opt-in alone.
    assert not [name for name in used if name.startswith("DCGM_")]


def test_a_made_up_metric_would_be_caught() -> None:
    assert "accel_cost_dollars_total" not in _exported()
    assert "accel_cost_usd_total" in _exported()


def test_panels_do_not_overlap_and_the_configmap_ships_the_file() -> None:
    doc = json.loads(DASHBOARD.read_text())
    cells = set()
    for panel in doc["panels"]:
        g = panel["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"panel {panel['title']!r} overlaps another"
                cells.add((x, y))
    kustomization = yaml.safe_load((DASHBOARD.parent / "kustomization.yaml").read_text())
    assert kustomization["configMapGenerator"][0]["files"] == [DASHBOARD.name]
