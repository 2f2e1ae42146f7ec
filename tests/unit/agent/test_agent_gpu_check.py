"""The real-GPU check scripts stay in step with the agent (they run where nothing can be fixed)."""

import importlib.util
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

from accel_agent.backends.nvml import NvmlApi

GPU_CHECK = Path(__file__).resolve().parents[3] / "agent" / "gpu_check"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"gpu_check_{name}", GPU_CHECK / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_probe_calls_every_nvml_function_the_agent_uses() -> None:
    probe = load("nvml_probe")
    used = {n for n in dir(NvmlApi) if n.startswith("nvml")}
    assert used == set(probe.AGENT_FUNCTIONS)
    source = (GPU_CHECK / "nvml_probe.py").read_text()
    for name in used:
        assert f'"{name}"' in source.split("AGENT_FUNCTIONS")[-1], f"{name} is listed but never probed"


def test_the_probe_without_pynvml_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    probe = load("nvml_probe")
    monkeypatch.setitem(sys.modules, "pynvml", None)
    out = tmp_path / "probe.json"
    assert probe.main(["--output", str(out)]) == 1
    assert "pynvml not importable" in out.read_text()


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash not installed")
def test_run_sh_parses() -> None:
    subprocess.run(["bash", "-n", str(GPU_CHECK / "run.sh")], check=True)


def test_run_sh_and_readme_give_the_same_download_command() -> None:
    def command(text: str) -> list[str]:
        return [
            w for w in text.replace("#", " ").replace("\\\n", " ").split() if w.startswith("'") or w.startswith("-")
        ]

    run_sh = (GPU_CHECK / "run.sh").read_text()
    readme = (GPU_CHECK / "README.md").read_text()
    start = run_sh.index("python3 -m pip download")
    end = run_sh.index("done", start)
    words = command(run_sh[start:end])
    assert "'pydantic>=2.7,<3'" in words and "--only-binary=:all:" in words
    for word in words:
        assert word in readme, f"{word} missing from agent/gpu_check/README.md"


@pytest.mark.parametrize(
    ("py", "abi", "plat", "ok"),
    [
        ("py3", "none", "any", True),
        (
            f"cp{sys.version_info[0]}{sys.version_info[1]}",
            f"cp{sys.version_info[0]}{sys.version_info[1]}",
            "manylinux2014_x86_64.manylinux_2_17_x86_64",
            True,
        ),
        ("cp38", "cp38", "manylinux2014_x86_64", False),
        ("cp39", "abi3", "manylinux_2_17_x86_64", True),
        ("py3", "none", "macosx_11_0_arm64", False),
        ("cp311", "cp311", "manylinux2014_aarch64", False),
    ],
)
def test_wheel_compatibility(py: str, abi: str, plat: str, ok: bool) -> None:
    assert load("install_wheels").compatible(py, abi, plat) is ok


def test_install_wheels_picks_the_newest_compatible(tmp_path: Path) -> None:
    tool = load("install_wheels")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for version in ("1.0.0", "1.10.0", "1.9.0"):
        with zipfile.ZipFile(wheels / f"demo_pkg-{version}-py3-none-any.whl", "w") as zf:
            zf.writestr("demo_pkg/__init__.py", f"VERSION = {version!r}\n")
    with zipfile.ZipFile(wheels / "demo_pkg-9.0.0-py3-none-macosx_11_0_arm64.whl", "w") as zf:
        zf.writestr("demo_pkg/__init__.py", "VERSION = 'wrong'\n")
    target = tmp_path / "site"
    assert tool.main([str(wheels), str(target), "demo-pkg"]) == 0
    assert "1.10.0" in (target / "demo_pkg" / "__init__.py").read_text()
    assert tool.main([str(wheels), str(target), "absent"]) == 1
