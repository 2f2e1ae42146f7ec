"""One version per release: the newest entry of CHANGELOG.md is the chart's version and appVersion,
every Python distribution's version, the agent's report version and the manifests' image tags;
and the release tag ``v<version>`` gives the images that same tag (hack/images.sh), which is the
chart's default image tag. So none can drift from the others."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from accel_agent import report

ROOT = Path(__file__).resolve().parents[2]
# A released entry: "## [1.2.3] - 2026-11-27" (Keep a Changelog).
RELEASE = re.compile(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$", re.MULTILINE)
DISTRIBUTIONS = (
    "pyproject.toml",
    "operator/accel_api/pyproject.toml",
    "agent/pyproject.toml",
    "operator/accel_localcluster/pyproject.toml",
)
IMAGES = ("ghcr.io/accel-dev/accel-operator", "ghcr.io/accel-dev/accel-agent")


def changelog_version() -> str:
    text = (ROOT / "CHANGELOG.md").read_text()
    headings = re.findall(r"^## .*$", text, re.MULTILINE)
    assert headings and headings[0] == "## [Unreleased]", "CHANGELOG.md starts with '## [Unreleased]'"
    found = RELEASE.search(text)
    assert found is not None, "CHANGELOG.md has no released entry '## [X.Y.Z] - YYYY-MM-DD'"
    version = found.group(1)
    assert f"\n[{version}]: " in text, f"CHANGELOG.md links [{version}] to its release"
    return version


def test_the_changelogs_newest_version_is_the_charts() -> None:
    chart = yaml.safe_load((ROOT / "charts" / "accel-operator" / "Chart.yaml").read_text())
    version = changelog_version()
    assert chart["version"] == version
    assert chart["appVersion"] == version


@pytest.mark.parametrize("path", DISTRIBUTIONS)
def test_every_distribution_has_the_changelogs_version(path: str) -> None:
    project = tomllib.loads((ROOT / path).read_text())["project"]
    assert project["version"] == changelog_version(), f"{path}: project.version"


def test_the_agent_reports_the_changelogs_version() -> None:
    assert changelog_version() == report.AGENT_VERSION


def test_the_manifests_name_the_changelogs_image_tags() -> None:
    version = changelog_version()
    for path in ("manifests/operator/deployment.yaml", "manifests/agent/daemonset.yaml"):
        docs = [d for d in yaml.safe_load_all((ROOT / path).read_text()) if d]
        images = [c["image"] for d in docs for c in d["spec"]["template"]["spec"]["containers"]]
        assert images and all(i.rsplit(":", 1)[1] == version for i in images), (path, images)
    prod = yaml.safe_load((ROOT / "manifests" / "overlays" / "prod" / "kustomization.yaml").read_text())
    tags = {i["name"]: i.get("newTag") for i in prod["images"] if i["name"] in IMAGES}
    assert tags == dict.fromkeys(IMAGES, version)


@pytest.mark.skipif(shutil.which("git") is None, reason="no git")
def test_the_release_tag_gives_the_images_the_charts_tag(tmp_path: Path) -> None:
    """hack/images.sh's image_tag in a repository whose HEAD carries the tag v<version>."""
    version = changelog_version()
    script = (ROOT / "hack" / "images.sh").read_text()
    (function,) = re.findall(r"^image_tag\(\) \{.*\}$", script, re.MULTILINE)

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True, timeout=30)

    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "--allow-empty", "-m", "release")
    git("tag", f"v{version}")
    done = subprocess.run(
        ["bash", "-c", f"{function}\nimage_tag"], cwd=tmp_path, capture_output=True, text=True, timeout=30, check=True
    )
    assert done.stdout.strip() == version
