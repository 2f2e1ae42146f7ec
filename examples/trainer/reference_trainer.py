#!/usr/bin/env python3
"""A reference training program for the accel-operator checkpoint contract (docs/concepts.md,
"The checkpoint contract"): a model for job authors and the demo's container command.

Its "model state" is the step counter. It

- resumes from ``ACCEL_RESUME_FROM`` (a checkpoint directory or ``s3://`` prefix); when that is
  empty it looks under ``ACCEL_CHECKPOINT_URI`` for the newest complete checkpoint itself (how a
  job on a PVC, which the operator does not mount, resumes);
- writes checkpoint N as ``<uri>/step-<N>/state.json`` and then the empty marker
  ``<uri>/step-<N>/COMPLETE``, every ``--every-steps`` steps or every
  ``ACCEL_CHECKPOINT_INTERVAL_SECONDS``, whichever comes first; a step without its marker is
  never resumed from, so a write killed halfway costs progress, never correctness;
- writes a final checkpoint on SIGTERM (exit 143: the work is not finished) and when the pod
  annotation ``accel.dev/checkpoint-now`` takes a new value (read from the downward-API file
  ``/etc/accel/annotations``);
- exits 0 after ``--steps`` steps, with a final checkpoint;
- in a gang, writes from rank 0 only (``ACCEL_NODE_RANK``); every rank resumes from the same point.

Standard library only, plus boto3 for ``s3://`` URIs (the endpoint comes from boto3's own
configuration, e.g. ``AWS_ENDPOINT_URL_S3``). ``ACCEL_TRAINER_WRITE_DELAY`` (seconds) slows each
checkpoint between its data and its marker, for tests that kill a writer mid-write.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any

STEP_PREFIX = "step-"  # accel_api.vocabulary.CHECKPOINT_STEP_PREFIX
MARKER = "COMPLETE"  # accel_api.vocabulary.CHECKPOINT_MARKER
STATE = "state.json"
ANNOTATION_CHECKPOINT_NOW = "accel.dev/checkpoint-now"
ANNOTATIONS_FILE = "/etc/accel/annotations"
EXIT_TERMINATED = 143  # 128 + SIGTERM: stopped before the work was done


class _Stop:
    requested = False  # set by SIGTERM: finish the step, write a final checkpoint, exit 143


def _on_sigterm(signum: int, frame: object) -> None:
    _Stop.requested = True


def log(message: str) -> None:
    print(f"{dt.datetime.now(dt.UTC):%Y-%m-%dT%H:%M:%SZ} {message}", flush=True)


def step_of(name: str) -> int | None:
    digits = name.rstrip("/").removeprefix(STEP_PREFIX)
    if digits == name.rstrip("/") or not digits.isascii() or not digits.isdigit():
        return None
    return int(digits)


class LocalStore:
    """A directory (a PVC mount or any local path)."""

    def __init__(self, root: str) -> None:
        self.root = Path(root)

    def location(self, step: int) -> str:
        return str(self.root / f"{STEP_PREFIX}{step}")

    def write(self, step: int, state: bytes, delay: float) -> str:
        d = self.root / f"{STEP_PREFIX}{step}"
        d.mkdir(parents=True, exist_ok=True)
        _write_file(d / STATE, state)
        if delay:
            time.sleep(delay)
        _write_file(d / MARKER, b"")
        _fsync_dir(d)
        return str(d)

    def latest_complete(self) -> str | None:
        if not self.root.is_dir():
            return None
        steps = [(s, p) for p in self.root.iterdir() if (s := step_of(p.name)) is not None and (p / MARKER).is_file()]
        return str(max(steps)[1]) if steps else None

    @staticmethod
    def read(location: str) -> bytes:
        d = Path(location)
        if not (d / MARKER).is_file():
            raise ValueError(f"{location} is not a complete checkpoint (no {MARKER})")
        return (d / STATE).read_bytes()


def _write_file(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)


def _fsync_dir(d: Path) -> None:
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class S3Store:
    def __init__(self, uri: str) -> None:
        import boto3  # only for s3:// URIs

        bucket, _, prefix = uri.removeprefix("s3://").partition("/")
        self.bucket = bucket
        self.prefix = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
        self.s3: Any = boto3.client("s3")

    def write(self, step: int, state: bytes, delay: float) -> str:
        key = f"{self.prefix}{STEP_PREFIX}{step}"
        self.s3.put_object(Bucket=self.bucket, Key=f"{key}/{STATE}", Body=state)
        if delay:
            time.sleep(delay)
        self.s3.put_object(Bucket=self.bucket, Key=f"{key}/{MARKER}", Body=b"")
        return f"s3://{self.bucket}/{key}"

    def latest_complete(self) -> str | None:
        steps: list[tuple[int, str]] = []
        for page in self.s3.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self.prefix, Delimiter="/"
        ):
            for common in page.get("CommonPrefixes", []):
                name = common["Prefix"][len(self.prefix) :].rstrip("/")
                if (s := step_of(name)) is not None:
                    steps.append((s, name))
        for _, name in sorted(steps, reverse=True):
            if self._exists(f"{self.prefix}{name}/{MARKER}"):
                return f"s3://{self.bucket}/{self.prefix}{name}"
        return None

    def _exists(self, key: str) -> bool:
        try:
            self.s3.head_object(Bucket=self.bucket, Key=key)
        except Exception as exc:
            if getattr(exc, "response", {}).get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise
        return True

    def read(self, location: str) -> bytes:
        bucket, _, key = location.removeprefix("s3://").partition("/")
        if not self._exists(f"{key}/{MARKER}"):
            raise ValueError(f"{location} is not a complete checkpoint (no {MARKER})")
        body: bytes = self.s3.get_object(Bucket=bucket, Key=f"{key}/{STATE}")["Body"].read()
        return body


def open_store(uri: str) -> LocalStore | S3Store:
    return S3Store(uri) if uri.startswith("s3://") else LocalStore(uri.removeprefix("file://"))


_ANNOTATION_LINE = re.compile(r'^([^=]+)="(.*)"$')


def checkpoint_now_token(path: Path) -> str:
    """The annotation's value in the downward-API file (lines ``key="escaped value"``), or ""."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return ""
    for line in text.splitlines():
        m = _ANNOTATION_LINE.match(line.strip())
        if m and m.group(1) == ANNOTATION_CHECKPOINT_NOW:
            try:
                return str(json.loads(f'"{m.group(2)}"'))
            except ValueError:
                return m.group(2)
    return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=1000, help="steps until done (exit 0)")
    parser.add_argument("--every-steps", type=int, default=100, help="checkpoint every N steps")
    parser.add_argument("--step-seconds", type=float, default=0.05, help="time one step takes")
    parser.add_argument("--annotations-file", default=ANNOTATIONS_FILE)
    args = parser.parse_args(argv)

    uri = os.environ.get("ACCEL_CHECKPOINT_URI", "")
    resume_from = os.environ.get("ACCEL_RESUME_FROM", "")
    attempt = os.environ.get("ACCEL_ATTEMPT", "0")
    interval = float(os.environ.get("ACCEL_CHECKPOINT_INTERVAL_SECONDS", "0") or 0)
    delay = float(os.environ.get("ACCEL_TRAINER_WRITE_DELAY", "0") or 0)
    annotations = Path(args.annotations_file)
    signal.signal(signal.SIGTERM, _on_sigterm)

    # In a gang every rank holds the same state; rank 0 alone writes (ACCEL_NODE_RANK), all read.
    writer = os.environ.get("ACCEL_NODE_RANK", "0") in ("", "0")
    store = open_store(uri) if uri else None
    if store is not None and not resume_from:
        resume_from = store.latest_complete() or ""
    step = 0
    if resume_from:
        if store is None:
            store = open_store(resume_from)
        try:
            step = int(json.loads(store.read(resume_from))["step"])
        except (OSError, ValueError, KeyError) as exc:  # never start over silently from a bad point
            log(f"cannot resume from={resume_from}: {exc}")
            return 2
        log(f"attempt={attempt} resumed from={resume_from} step={step}")
    else:
        log(f"attempt={attempt} starting at step=0")

    saved = step
    last_save = time.monotonic()
    acted_token = ""

    def save(reason: str) -> None:
        nonlocal saved, last_save
        last_save = time.monotonic()
        if store is None or step == saved or not writer:
            return
        where = store.write(step, json.dumps({"step": step}).encode(), delay)
        saved = step
        log(f"checkpoint step={step} at={where} reason={reason}")

    while step < args.steps and not _Stop.requested:
        time.sleep(args.step_seconds)
        step += 1
        if step % max(1, args.every_steps // 10) == 0:
            log(f"step={step}")
        token = checkpoint_now_token(annotations)
        if token and token != acted_token:
            acted_token = token
            save("requested")
        elif step % max(1, args.every_steps) == 0:
            save("every-steps")
        elif interval and time.monotonic() - last_save >= interval:
            save("interval")
    save("sigterm" if _Stop.requested else "done")
    if _Stop.requested:
        log(f"terminated at step={step}")
        return EXIT_TERMINATED
    log(f"done at step={step}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
