"""Reading resources from files or stdin for the CLI, with errors that name the file."""

import sys
from pathlib import Path

from accel_api import InvalidResource, load_documents, loader, parse_resource
from accel_api.base import ApiModel


def read_text(path: str) -> str:
    from accel_operator.cli.errors import UsageError

    # One character past the loader's limit is enough for it to refuse the file by size: a
    # huge file is never read whole.
    limit = loader.MAX_TEXT_CHARS + 1
    if path == "-":
        return sys.stdin.read(limit)
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"{path}: no such file")
    try:
        with p.open(encoding="utf-8") as f:
            return f.read(limit)
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read ({exc})") from None


def read_resources(path: str) -> list[ApiModel]:
    """Every accel.dev resource in ``path`` (multi-document YAML), validated with the API server's
    strict types."""
    text = read_text(path)
    docs = load_documents(text, source=path)
    out: list[ApiModel] = []
    problems: list[str] = []
    for i, doc in enumerate(docs):
        try:
            out.append(parse_resource(doc, source=None, strict=True))
        except InvalidResource as exc:
            label = f"document {i + 1}" if len(docs) > 1 else ""
            problems.extend(f"{label + ': ' if label else ''}{p}" for p in exc.problems)
    if problems:
        raise InvalidResource(problems, path)
    if not out:
        raise InvalidResource(["(document): the file holds no resource"], path)
    return out
