"""The reference trainer (examples/trainer/reference_trainer.py) as a real process, against a
local directory (a PVC mount) and against moto's S3 in server mode: checkpoints, resume, a final
checkpoint on SIGTERM and on request, and a SIGKILL in the middle of a write."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pytest

from accel_api import vocabulary as v
from accel_operator.adapters.aws.checkpoints import S3CheckpointStore
from tests.support.moto_server import MotoServer, moto_server

ROOT = Path(__file__).resolve().parents[3]
TRAINER = ROOT / "examples" / "trainer" / "reference_trainer.py"


class Backend(Protocol):
    uri: str
    env: dict[str, str]

    def complete(self) -> set[int]: ...  # steps with a marker

    def written(self) -> set[int]: ...  # steps with data

    def state(self, step: int) -> dict[str, Any]: ...


class Local:
    def __init__(self, root: Path) -> None:
        self.uri = str(root / "ckpt")
        self.env: dict[str, str] = {}
        self._root = root / "ckpt"

    def _steps(self, name: str) -> set[int]:
        if not self._root.is_dir():
            return set()
        return {int(p.name.removeprefix("step-")) for p in self._root.iterdir() if (p / name).is_file()}

    def complete(self) -> set[int]:
        return self._steps(v.CHECKPOINT_MARKER)

    def written(self) -> set[int]:
        return self._steps("state.json")

    def state(self, step: int) -> dict[str, Any]:
        return dict(json.loads((self._root / f"step-{step}" / "state.json").read_text()))


class S3:
    def __init__(self, moto: MotoServer, bucket: str) -> None:
        self.s3 = moto.client("s3")
        self.s3.create_bucket(Bucket=bucket)
        self.bucket = bucket
        self.uri = f"s3://{bucket}/team/run"
        self.env = moto.env()

    def _steps(self, name: str) -> set[int]:
        keys = [o["Key"] for o in self.s3.list_objects_v2(Bucket=self.bucket, Prefix="team/run/").get("Contents", [])]
        return {int(k.split("/")[2].removeprefix("step-")) for k in keys if k.endswith(f"/{name}")}

    def complete(self) -> set[int]:
        return self._steps(v.CHECKPOINT_MARKER)

    def written(self) -> set[int]:
        return self._steps("state.json")

    def state(self, step: int) -> dict[str, Any]:
        body = self.s3.get_object(Bucket=self.bucket, Key=f"team/run/step-{step}/state.json")["Body"].read()
        return dict(json.loads(body))


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    with moto_server() as server:
        yield server


@pytest.fixture(params=["local", "s3"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "local":
        return Local(tmp_path)
    moto: MotoServer = request.getfixturevalue("moto")
    return S3(moto, f"ckpt-{abs(hash(str(tmp_path))) % 10**9}")


@dataclass
class Run:
    proc: subprocess.Popen[str]
    first: str  # the first line of output, read to know the process is up


def start(backend: Backend, *args: str, resume: str = "", attempt: int = 0, **env: str) -> Run:
    clean = {k: val for k, val in os.environ.items() if not k.startswith(("ACCEL_", "AWS_"))}
    full = {
        **clean,
        **backend.env,
        v.ENV_CHECKPOINT_URI: backend.uri,
        v.ENV_RESUME_FROM: resume,
        v.ENV_ATTEMPT: str(attempt),
        **env,
    }
    proc = subprocess.Popen(
        [sys.executable, str(TRAINER), "--step-seconds", "0.01", *args],
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()  # the handler for SIGTERM is installed before this line
    assert "attempt=" in first, first
    return Run(proc, first)


def finish(run: Run | subprocess.Popen[str], timeout: float = 60) -> tuple[int, str]:
    proc, first = (run.proc, run.first) if isinstance(run, Run) else (run, "")
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, first + out


def wait_for(condition: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_checkpoints_and_resume(backend: Backend) -> None:
    rc, out = finish(start(backend, "--steps", "30", "--every-steps", "10"))
    assert rc == 0, out
    assert backend.complete() == {10, 20, 30}
    assert backend.state(30) == {"step": 30}
    # Resume from the point it is given (not the newest):
    rc, out = finish(start(backend, "--steps", "25", "--every-steps", "10", resume=f"{backend.uri}/step-20", attempt=1))
    assert rc == 0, out
    assert "resumed" in out
    assert "step=20" in out
    assert backend.state(25) == {"step": 25}
    # Given nothing, it finds the newest complete checkpoint under its URI itself (a PVC):
    rc, out = finish(start(backend, "--steps", "35", "--every-steps", "10", attempt=2))
    assert rc == 0, out
    assert f"resumed from={backend.uri}/step-30 step=30" in out


def test_sigterm_writes_a_final_checkpoint(backend: Backend) -> None:
    proc = start(backend, "--steps", "100000", "--every-steps", "100000")
    time.sleep(0.5)
    proc.proc.send_signal(signal.SIGTERM)
    rc, out = finish(proc)
    assert rc == 143, out
    [step] = backend.complete()
    assert step > 0
    assert backend.state(step) == {"step": step}
    assert f"terminated at step={step}" in out


def test_checkpoint_now_request(backend: Backend, tmp_path: Path) -> None:
    annotations = tmp_path / "annotations"
    annotations.write_text('other="x"\n')
    proc = start(backend, "--steps", "100000", "--every-steps", "100000", "--annotations-file", str(annotations))
    time.sleep(0.3)
    assert backend.complete() == set()
    annotations.write_text(f'other="x"\n{v.ANNOTATION_CHECKPOINT_NOW}="2026-11-26T09:00:00Z"\n')
    wait_for(lambda: len(backend.complete()) == 1)
    time.sleep(0.3)
    assert len(backend.complete()) == 1  # once per request, not once per step
    proc.proc.send_signal(signal.SIGTERM)
    rc, out = finish(proc)
    assert rc == 143, out
    assert "reason=requested" in out
    assert len(backend.complete()) == 2


def test_sigkill_mid_write_resumes_from_the_previous_complete(backend: Backend, moto_if_s3: MotoServer | None) -> None:
    proc = start(backend, "--steps", "100000", "--every-steps", "5", ACCEL_TRAINER_WRITE_DELAY="2")
    wait_for(lambda: 5 in backend.complete())
    wait_for(lambda: 10 in backend.written())  # the next checkpoint's data is there, its marker not yet
    proc.proc.kill()
    finish(proc)
    assert backend.complete() == {5}
    assert 10 in backend.written()
    if moto_if_s3 is not None:  # the operator's choice, through the S3 adapter
        latest = S3CheckpointStore(moto_if_s3.client("s3")).latest_complete(backend.uri)
        assert latest is not None
        assert (latest.uri, latest.step) == (f"{backend.uri}/step-5", 5)
    rc, out = finish(start(backend, "--steps", "7", "--every-steps", "5", attempt=1))
    assert rc == 0, out
    assert f"resumed from={backend.uri}/step-5 step=5" in out
    assert backend.state(7) == {"step": 7}


def test_refuses_an_incomplete_resume_point(backend: Backend) -> None:
    proc = start(backend, "--steps", "100000", "--every-steps", "5", ACCEL_TRAINER_WRITE_DELAY="2")
    wait_for(lambda: 5 in backend.written())
    proc.proc.kill()
    finish(proc)
    resume = subprocess.Popen(
        [sys.executable, str(TRAINER), "--steps", "1"],
        env={
            **os.environ,
            **backend.env,
            v.ENV_CHECKPOINT_URI: backend.uri,
            v.ENV_RESUME_FROM: f"{backend.uri}/step-5",
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    rc, out = finish(resume)
    assert rc == 2, out
    assert "not a complete checkpoint" in out
    assert "Traceback" not in out


@pytest.fixture
def moto_if_s3(backend: Backend, request: pytest.FixtureRequest) -> MotoServer | None:
    return request.getfixturevalue("moto") if isinstance(backend, S3) else None


def test_interval_seconds_sets_the_cadence(tmp_path: Path) -> None:
    backend = Local(tmp_path)
    run = start(backend, "--steps", "100000", "--every-steps", "100000", ACCEL_CHECKPOINT_INTERVAL_SECONDS="0.2")
    wait_for(lambda: len(backend.complete()) >= 2)
    run.proc.send_signal(signal.SIGTERM)
    rc, out = finish(run)
    assert rc == 143, out
    assert "reason=interval" in out


def test_only_rank_zero_writes(tmp_path: Path) -> None:
    backend = Local(tmp_path)
    rc, out = finish(start(backend, "--steps", "20", "--every-steps", "5", ACCEL_NODE_RANK="1"))
    assert rc == 0, out
    assert backend.written() == set()
    rc, out = finish(start(backend, "--steps", "10", "--every-steps", "5", ACCEL_NODE_RANK="0"))
    assert rc == 0, out
    assert backend.complete() == {5, 10}


def test_speaks_the_vocabulary() -> None:
    """The trainer is standalone (it imports nothing of ours): its copies of the names must agree."""
    text = TRAINER.read_text()
    for name in (
        v.CHECKPOINT_STEP_PREFIX,
        v.CHECKPOINT_MARKER,
        v.ANNOTATION_CHECKPOINT_NOW,
        v.POD_ANNOTATIONS_FILE,
        v.ENV_CHECKPOINT_URI,
        v.ENV_RESUME_FROM,
        v.ENV_ATTEMPT,
        v.ENV_CHECKPOINT_INTERVAL_SECONDS,
        v.ENV_NODE_RANK,
    ):
        assert f'"{name}"' in text, name
