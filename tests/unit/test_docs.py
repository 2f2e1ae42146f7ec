"""The README stays a short page, and its relative links lead somewhere.

The long documentation lives under ``docs/`` and is built by mkdocs with ``--strict`` (which checks
the links between those pages); the README is not part of that site, so its links are checked here.
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_README_LINES = 300

# [text](target) in Markdown; code spans are stripped first so an example in backticks is no link.
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE = re.compile(r"`[^`]*`")


def relative_links(text: str) -> list[str]:
    """The relative link targets of ``text``, without their #anchor (web and mail links skipped)."""
    out = []
    for line in text.splitlines():
        for target in LINK.findall(CODE.sub("", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue
            out.append(target.split("#", 1)[0])
    return out


def test_the_readme_stays_under_300_lines() -> None:
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines < MAX_README_LINES, f"README.md has {lines} lines; move detail into docs/ (at most {MAX_README_LINES})"


def test_every_relative_link_in_the_readme_points_to_a_file_that_exists() -> None:
    targets = relative_links(README.read_text(encoding="utf-8"))
    assert targets, "the README links to the docs pages"
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"


def test_the_link_reader_finds_links_and_skips_code_and_web_addresses() -> None:
    text = "see [a](docs/a.md#x) and [b](https://example.org) and `[c](not/a/link.md)` and [d](#top)"
    assert relative_links(text) == ["docs/a.md"]
