"""The kubectl habits of ``accelctl`` and ``kubectl accel`` (one implementation): ``--version``,
``--kubeconfig``/``--context``, ``-n`` defaulting to the context's namespace and ``-A``,
``-o yaml|wide``, shell completion, colour only on a TTY and never with ``NO_COLOR``, the
documented exit codes (0 ok, 1 runtime, 2 usage), and ``why``/``resume``/``stop``/``plan NAME``
on a job read through the kube adapter (faked here; tests/cluster/test_kubectl_accel.py runs
them through a real kubectl)."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from accel_api import vocabulary as v
from accel_operator.adapters.kube import costs
from accel_operator.cli.main import build_parser, main
from tests.unit.test_versions import changelog_version

ROOT = Path(__file__).resolve().parents[3]


def _kubeconfig(tmp_path: Path) -> Path:
    """Three contexts on a server nothing listens on: a (namespace team-a, current), b (team-b), c (none)."""
    contexts = [("a", "team-a"), ("b", "team-b"), ("c", None)]
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "nowhere", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [
            {"name": n, "context": {"cluster": "nowhere", "user": "u", **({"namespace": ns} if ns else {})}}
            for n, ns in contexts
        ],
        "current-context": "a",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture
def outside_a_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("NO_COLOR", raising=False)


# --- --version --------------------------------------------------------------------------------


@pytest.mark.parametrize("prog", ["accelctl", "kubectl accel"])
def test_version_is_the_release_the_images_are_tagged_with(prog: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"], prog=prog)
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"{prog} {changelog_version()}"


def test_kubectl_accel_is_an_entry_point_of_the_same_implementation() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["kubectl-accel"] == "accel_operator.cli.main:kubectl_main"
    assert scripts["accelctl"] == "accel_operator.cli.main:main"


# --- --kubeconfig, --context, -n, -A ------------------------------------------------------------


def _namespaces_read(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> list[str | None]:
    seen: list[str | None] = []

    def list_jobs(api: Any, namespace: str | None) -> list[dict[str, Any]]:
        seen.append(namespace)
        return []

    monkeypatch.setattr(costs, "list_jobs", list_jobs)
    monkeypatch.setattr(costs, "list_policies", lambda api: [])
    monkeypatch.setattr(costs, "list_pools", lambda api: [])
    assert main(["cost", "report", "--rollup", "", *argv]) == 0
    return seen


@pytest.mark.usefixtures("outside_a_pod")
@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ([], "team-a"),  # the current context's namespace, as kubectl
        (["--context", "b"], "team-b"),
        (["--context", "c"], "default"),  # a context naming none: default
        (["-n", "other"], "other"),
        (["-A"], None),  # every namespace
    ],
)
def test_cost_report_reads_the_namespace_kubectl_would(
    flags: list[str], expected: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = str(_kubeconfig(tmp_path))
    assert _namespaces_read(monkeypatch, ["--kubeconfig", config, *flags]) == [expected]


@pytest.mark.usefixtures("outside_a_pod")
def test_kubeconfig_from_the_environment_names_the_namespace_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path)))
    assert _namespaces_read(monkeypatch, []) == ["team-a"]


@pytest.mark.usefixtures("outside_a_pod")
def test_a_context_or_kubeconfig_that_does_not_exist_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = str(_kubeconfig(tmp_path))
    assert main(["cost", "report", "--kubeconfig", config, "--context", "nope"]) == 2
    assert capsys.readouterr().err.strip() == "error: --context: no context nope in the kubeconfig"
    assert main(["why", "job", "--kubeconfig", str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err.strip() == f"error: --kubeconfig: {tmp_path / 'missing'}: no such file"
    assert main(["cost", "report", "--kubeconfig", config, "-n", "x", "-A"]) == 2
    assert "exclude each other" in capsys.readouterr().err


# --- exit codes ---------------------------------------------------------------------------------


@pytest.mark.usefixtures("outside_a_pod")
@pytest.mark.parametrize(
    "argv", [["cost", "report"], ["why", "job"], ["resume", "job"], ["plan", "job"], ["top"], ["top", "-A"]]
)
def test_an_unreachable_cluster_is_exit_1_in_one_line(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*argv, "--kubeconfig", str(_kubeconfig(tmp_path))]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: cannot reach the cluster: "), err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_exit_codes_are_documented_in_help_and_usage_errors_are_2(capsys: pytest.CaptureFixture[str]) -> None:
    parser, _ = build_parser()
    shown = " ".join(parser.format_help().split())
    assert "Exit status: 0 done, 1 runtime error (e.g. the cluster unreachable), 2 usage or invalid input." in shown
    with pytest.raises(SystemExit) as done:
        main(["why"])  # JOB missing
    assert done.value.code == 2
    assert main(["why", "Not_A_Name"]) == 2
    assert "is not an object name" in capsys.readouterr().err


# --- -o yaml and wide ---------------------------------------------------------------------------


def test_output_yaml_holds_what_json_holds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = str(ROOT / "examples" / "01-finetune-single-gpu.yaml")
    assert main(["plan", job, "-o", "json"]) == 0
    as_json = json.loads(capsys.readouterr().out)
    assert main(["plan", job, "-o", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == as_json
    empty = tmp_path / "empty.yaml"
    empty.write_text("apiVersion: v1\nkind: List\nitems: []\n")
    assert main(["cost", "report", "--from-file", str(empty), "-o", "yaml"]) == 0
    report = yaml.safe_load(capsys.readouterr().out)
    assert report["rows"] == [] and report["namespace"] is None


def test_output_wide_plans_every_pool_and_device_count(capsys: pytest.CaptureFixture[str]) -> None:
    job = str(ROOT / "examples" / "01-finetune-single-gpu.yaml")
    assert main(["plan", job, "--all"]) == 0
    every = capsys.readouterr().out
    assert main(["plan", job]) == 0
    best = capsys.readouterr().out
    assert main(["plan", job, "-o", "wide"]) == 0
    assert capsys.readouterr().out == every != best


# --- completion ---------------------------------------------------------------------------------


def test_bash_completion_completes_commands_and_their_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", "bash"]) == 0
    script = capsys.readouterr().out
    probe = (
        f"{script}\n"
        'COMP_WORDS=(accelctl c); COMP_CWORD=1; _accelctl_complete; echo "${COMPREPLY[*]}"\n'
        'COMP_WORDS=(accelctl cost report --k); COMP_CWORD=3; _accelctl_complete; echo "${COMPREPLY[*]}"\n'
    )
    bash = shutil.which("bash")
    assert bash is not None
    out = subprocess.run([bash, "--norc", "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["crds cost completion", "--kubeconfig"]


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_completion_name_every_command_and_cluster_flag(
    shell: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["completion", shell, "--prog", "kubectl-accel"]) == 0
    script = capsys.readouterr().out
    parser, runners = build_parser()
    for command in runners:
        assert command in script
    assert "kubeconfig" in script and "all-namespaces" in script and "kubectl-accel" in script
    binary = shutil.which(shell)
    if binary is not None and shell == "zsh":  # a syntax check where the shell is installed
        subprocess.run([binary, "-n", "-c", script], check=True)
    from accel_operator.cli import completion

    assert completion.tree(parser)["cost"][0] == "report"


# --- colour -------------------------------------------------------------------------------------


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.usefixtures("outside_a_pod")
@pytest.mark.parametrize(
    ("tty", "no_color", "coloured"), [(True, None, True), (True, "1", False), (False, None, False)]
)
def test_colour_only_on_a_tty_and_never_with_no_color(
    tty: bool, no_color: str | None, coloured: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if no_color:
        monkeypatch.setenv("NO_COLOR", no_color)
    err = _Tty() if tty else io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    assert main(["cost", "report", "--from-file", str(tmp_path / "nope.yaml")]) == 2
    assert ("\033[" in err.getvalue()) is coloured, repr(err.getvalue())
    assert "no such file" in err.getvalue()


# --- why, resume, stop, plan NAME on a job in the cluster ---------------------------------------

WAITING: dict[str, Any] = {
    "metadata": {"name": "llm", "namespace": "team-a"},
    "status": {
        "phase": "Pending",
        "attempt": 0,
        "conditions": [
            {"type": "SpecValid", "status": "True", "reason": "SpecValid"},
            {"type": "Planned", "status": "True", "reason": "Planned"},
            {
                "type": "Admitted",
                "status": "False",
                "reason": "WaitingForCapacity",
                "message": "pool h100-spot: 3 of 8 devices free, 8 needed",
            },
        ],
        "plan": {
            "pool": "h100-spot",
            "accelerator": "h100-80gb",
            "devices": 8,
            "nodes": 1,
            "spot": True,
            "costUsd": 41.5,
            "durationSeconds": 7200,
            "reason": "cheapest placement that fits in memory",
            "alternatives": [
                {"pool": "l4-od", "accelerator": "l4", "devices": 8, "reason": "does not fit: 31 GiB > 24 GiB"}
            ],
        },
        "cost": {
            "spentUsd": 12.25,
            "forecastUsd": 41.5,
            "overBudget": {
                "policy": "caps",
                "period": "month",
                "spentUsd": 510.0,
                "limitUsd": 500.0,
                "since": "2026-11-01T00:00:00Z",
            },
        },
    },
}
POOL = {"metadata": {"name": "h100-spot"}, "status": {"freeDevices": 3, "totalDevices": 8, "nodes": 1, "readyNodes": 1}}


@pytest.fixture
def cluster_of(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, outside_a_pod: None) -> Any:
    """A fake kube adapter holding ``job``; returns the annotations patched onto it."""
    from accel_operator.adapters.kube import jobaccess

    def install(job: dict[str, Any]) -> list[dict[str, str]]:
        patched: list[dict[str, str]] = []

        def get_job(api: Any, ns: str, name: str) -> dict[str, Any]:
            if (ns, name) != (job["metadata"]["namespace"], job["metadata"]["name"]):
                raise jobaccess.NotFound("NotFound")
            return job

        monkeypatch.setattr(jobaccess, "get_job", get_job)
        monkeypatch.setattr(jobaccess, "get_pool", lambda api, name: POOL)
        monkeypatch.setattr(jobaccess, "job_nodes", lambda api, ns, name: ["node-1"])
        monkeypatch.setattr(jobaccess, "annotate_job", lambda api, ns, name, a: patched.append(a))
        monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path)))
        return patched

    return install


def test_why_says_what_blocks_a_job_with_the_numbers(
    cluster_of: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from accel_operator.adapters.kube import jobaccess

    cluster_of(WAITING)
    assert main(["why", "llm"]) == 0  # the context's namespace: team-a
    out = capsys.readouterr().out
    for sentence in (
        "team-a/llm is Pending (attempt 0).",
        "Admitted: no (WaitingForCapacity): pool h100-spot: 3 of 8 devices free, 8 needed.",
        "Planned on pool h100-spot: 8 × h100-80gb on 1 node(s), spot, about $41.50 over 2.0h.",
        "Not l4-od (8 × l4): does not fit: 31 GiB > 24 GiB.",
        "Pool h100-spot has 3 of 8 devices free, 0 whole node(s) free, 1 of 1 node(s) ready.",
        "Over budget: policy caps allows $500.00 per month, and $510.00 is spent (since 2026-11-01T00:00:00Z).",
        "Spent so far: $12.25 (the plan's forecast for the whole job: $41.50).",
    ):
        assert sentence in out.splitlines(), (sentence, out)
    assert "\033[" not in out  # not a TTY
    assert main(["why", "llm", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["phase"] == "Pending"
    monkeypatch.setattr(jobaccess, "get_pool", lambda api, name: {"metadata": {"name": "h100-spot"}})
    assert main(["why", "llm"]) == 0
    assert "Pool h100-spot" not in capsys.readouterr().out  # no status written: no sentence of zeros
    assert main(["why", "other"]) == 1
    assert capsys.readouterr().err.strip() == "error: acceleratorjob other in namespace team-a not found"


def test_plan_name_shows_the_plan_in_the_jobs_status(cluster_of: Any, capsys: pytest.CaptureFixture[str]) -> None:
    cluster_of(WAITING)
    assert main(["plan", "llm"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("Planned on pool h100-spot") and out[-1].startswith("Not l4-od")
    assert main(["plan", "llm", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["plan"]["alternatives"][0]["pool"] == "l4-od"


def test_why_and_plan_name_count_the_pools_the_placement_left_out(
    cluster_of: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    left = {
        "count": 100,
        "byReason": [
            {"reason": "not in placement.pools (h3)", "count": 60, "pools": ["a", "b", "c", "d", "e"]},
            {"reason": "tpu pool; placement.acceleratorKinds is gpu", "count": 2, "pools": ["t0", "t1"]},
        ],
    }
    cluster_of({**WAITING, "status": {**WAITING["status"], "plan": {**WAITING["status"]["plan"], "leftOut": left}}})
    assert main(["why", "llm"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for sentence in (
        "Left out by the placement: 60 pool(s) (a, b, c, d, e and 55 more): not in placement.pools (h3).",
        "Left out by the placement: 2 pool(s) (t0, t1): tpu pool; placement.acceleratorKinds is gpu.",
        "Left out by the placement: 38 more pool(s) for other reasons.",
    ):
        assert sentence in lines, (sentence, lines)
    assert main(["plan", "llm"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "Left out by the placement: 38 more pool(s) for other reasons."


def test_resume_sets_the_annotation_only_on_a_stopped_job(cluster_of: Any, capsys: pytest.CaptureFixture[str]) -> None:
    patched = cluster_of(WAITING)
    assert main(["resume", "llm"]) == 1
    assert "is Pending, not Stopped: nothing to resume" in capsys.readouterr().err and patched == []
    stopped = {**WAITING, "status": {**WAITING["status"], "phase": "Stopped"}}
    patched = cluster_of(stopped)
    assert main(["resume", "llm"]) == 0
    assert len(patched) == 1 and list(patched[0]) == [v.ANNOTATION_RESUME] and patched[0][v.ANNOTATION_RESUME]


def test_stop_sets_the_annotation_only_on_a_job_that_can_stop(
    cluster_of: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    patched = cluster_of(WAITING)
    assert main(["stop", "llm"]) == 0
    assert len(patched) == 1 and list(patched[0]) == [v.ANNOTATION_STOP] and patched[0][v.ANNOTATION_STOP]
    assert "stop requested" in capsys.readouterr().out
    stopped = {**WAITING, "status": {**WAITING["status"], "phase": "Stopped"}}
    patched = cluster_of(stopped)
    assert main(["stop", "llm"]) == 1
    assert "is Stopped: nothing to stop" in capsys.readouterr().err and patched == []
