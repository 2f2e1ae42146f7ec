"""bench/sim_scale.py at its ``--quick`` size: the run goes through the real engine end to end
(jobs admitted through the fake writers, their pods bound, run and ended) and writes every figure
the docs quote. No timing is asserted here: the figures are read from the printed table."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from bench import sim_scale

from accel_operator.adapters.kube.jobs import FakeJobWriter, JobRef


def test_quick_run_admits_and_ends_jobs_and_writes_every_figure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "sim.json"
    assert sim_scale.main(["--quick", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["bench"] == "sim_scale"
    (row,) = doc["sizes"]
    assert (row["nodes"], row["jobs"]) == sim_scale.QUICK
    for key in ("steady_pass", "apply_per_pass", "new_job_into_full_queue", "accountant_step"):
        assert set(row[key]) >= {"p50_ms", "p99_ms", "max_ms", "n"}, key
        assert row[key]["n"] > 0, key
    assert row["new_job_into_full_queue"]["n"] == sim_scale.PROBES
    assert set(row["burst"]) >= {"jobs", "pass_ms", "admitted", "ms_per_1000_admitted"}
    # Jobs went all the way through: admitted by the engine, run, ended, and seen Succeeded.
    assert 0 < row["burst"]["admitted"] <= row["admitted"]
    assert row["ended"] > 0
    assert row["phases"].get("Succeeded", 0) > 0
    assert row["phases"].get("Running", 0) > 0
    # The queue was full when the single new jobs came: some waited behind capacity.
    assert row["new_job_into_full_queue"]["queued"] > 0
    assert row["admitted_per_cpu_s"] > 0 and row["peak_rss_mb"] > 0
    assert sum(row["phases"].values()) == row["jobs"]
    assert "adm/cpu-s" in capsys.readouterr().out


def test_a_malformed_size_is_refused_with_the_expected_form() -> None:
    with pytest.raises(SystemExit, match="NODESxJOBS"):
        sim_scale.main(["--sizes", "500by5000"])


def test_the_stored_statuses_show_what_the_fake_merges_whatever_the_looks() -> None:
    # The simulated API server keeps statuses serialized; what its watch shows after any sequence
    # of patches (fields set, changed, removed with None, set again) and looks in between must be
    # the whole status the fake writer's plain merge holds (a removal since the last look included).
    rng = random.Random(5)
    stored, plain = sim_scale.StoredStatuses(), FakeJobWriter()
    refs = [JobRef("ns", f"j{i}", f"uid-{i}") for i in range(3)]
    fields = ("phase", "plan", "conditions", "attempt")
    values = (None, "Pending", 3, {"pool": "p", "devices": 8}, [{"type": "Admitted", "status": "True"}])
    removals = 0
    for _ in range(400):
        ref = rng.choice(refs)
        patch = {f: rng.choice(values) for f in rng.sample(fields, rng.randint(1, 3))}
        removals += sum(v is None for v in patch.values())
        stored.patch_status(ref, patch)
        plain.patch_status(ref, patch)
        if rng.random() < 0.3:
            key = (ref.namespace, ref.name)
            assert stored.show(key) == plain.statuses[key]
    for ref in refs:
        key = (ref.namespace, ref.name)
        assert stored.show(key) == plain.statuses.get(key, {})
    assert removals > 0
    assert not stored.statuses  # nothing kept as live dicts once shown


def test_the_fingerprint_is_the_same_for_the_same_decisions_and_catches_a_wrong_plan_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # --fingerprint digests every write applied, in order: two runs of one trace in one process
    # (one hash seed) give one digest, and a plan key that leaves out the placement (jobs pinned
    # to other pools then share one plan) changes the writes, and the digest.
    import asyncio

    from accel_operator.planning import candidates

    def run() -> dict[str, object]:
        return asyncio.run(sim_scale.simulate(16, 160, ticks=3, seed=3, fingerprint=True))

    first, again = run(), run()
    assert first["writes_sha256"] == again["writes_sha256"] and first["admitted"] == again["admitted"]
    planned = {k: v for k, v in candidates.PLANNED_FIELDS.items() if k != "placement"}
    monkeypatch.setattr(candidates, "PLANNED_FIELDS", planned)
    assert run()["writes_sha256"] != first["writes_sha256"]
