"""``down`` stops strays of its own state folder only: another cluster may share the binaries."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from accel_localcluster.control_plane import _running


@pytest.fixture
def two_clusters(tmp_path: Path) -> Iterator[tuple[Path, Path, Path, subprocess.Popen[bytes], subprocess.Popen[bytes]]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sleeper = bin_dir / "etcd"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", sleeper)
    mine, theirs = tmp_path / "mine" / "state", tmp_path / "theirs" / "state"
    # sleep reads its one argument as seconds; the state folder goes in argv[0], as a path would.
    a = subprocess.Popen([f"--data-dir={mine}/etcd", "60"], executable=sleeper)
    b = subprocess.Popen([f"--data-dir={theirs}/etcd", "60"], executable=sleeper)
    try:
        yield sleeper, mine, theirs, a, b
    finally:
        for p in (a, b):
            p.kill()
            p.wait()


def test_strays_are_found_by_binary_and_state_folder(
    two_clusters: tuple[Path, Path, Path, subprocess.Popen[bytes], subprocess.Popen[bytes]],
) -> None:
    sleeper, mine, theirs, a, b = two_clusters
    assert _running(sleeper, mine) == {a.pid}
    assert _running(sleeper, theirs) == {b.pid}
    # A folder whose name is a prefix of another's is not the same folder.
    assert _running(sleeper, mine.parent / "sta") == set()
