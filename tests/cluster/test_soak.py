"""The soak bench at its CI size (``bench/soak.py --quick``), on the local control plane: 48 short
jobs of 1 to 16 devices on an on-demand and a spot pool while the operator's leader is SIGKILLed
8 times (sometimes with a standby running), SIGSTOPped past its Lease once, the API server is
restarted once and spot nodes are taken away. Its floors: no job lost or stuck, one batch Job
per attempt, every job's ledger within 1 device-second per attempt of its pods' own timestamps,
each team's spending equal to the sum of its jobs to the cent."""

from __future__ import annotations

from bench import soak

from accel_localcluster import Cluster


def test_the_quick_soak_holds_its_floors(cluster: Cluster, crds: list[str]) -> None:
    args = soak.parse(["--quick"])
    out = soak.run(args)
    f = out["figures"]
    done = out["faults_done"]
    # The chaos happened as planned (a spot disruption needs a spot node running pods: most do).
    assert (done.get("kills"), done.get("stops"), done.get("apiserver_restarts")) == (8, 1, 1), out["chaos_log"]
    assert done.get("spot", 0) >= 1, out["chaos_log"]
    assert f["not_created"] == 0, out.get("create_failures")
    assert f["lost"] == 0 and f["stuck"] == 0, f["stuck_jobs"]
    assert f["ended"] == f["jobs"] == args.jobs
    assert f["extra_batch_jobs"] == 0, f
    assert f["pods_started_not_ended"] == 0, f
    # Every attempt ran (a batch Job each), and the failures planned were retried.
    assert f["attempts"] == f["attempts_with_batch_jobs"] >= args.jobs
    assert f["retries"] >= 1
    assert f["jobs_over_1_device_s_per_attempt"] == 0, f["over_examples"]
    assert f["teams_exact"], f["teams"]
