"""Fuzz accelctl with hostile YAML: 10,000+ documents through validate, plan and plan -o json.

The documents are the hostile corpus and random mutations of the examples from
``tests/support/hostile.py`` (the same generators and the same judge as the unit fuzz tests).
They are written to a scratch folder, then run in batches, each batch in a fresh worker
subprocess that calls the CLI's ``main`` in process for every document and command. Per
document: a 5 s alarm (a document that does not finish is a hang; a worker that stops answering
is killed and its unanswered documents count as hangs) and the worker's peak resident memory
after it (``resource.getrusage``; a worker that passes 256 MB names the document that pushed it
there and is restarted, so one document's memory does not mask the next).

Prints one line per broken rule (the first few examples of each) and the figures:
tracebacks, hangs > 5 s, runs > 256 MB, outputs > 20× input, non-finite JSON outputs,
rejections without a field path.

Run: ``PYTHONPATH=operator:. python bench/fuzz_cli.py [--count 10000] [--seed 1] [--workers 2]``
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "operator"), str(ROOT)]

from tests.support import hostile  # noqa: E402

DOC_TIMEOUT_S = 5
MEMORY_LIMIT_MB = 256
BATCH = 200

CATEGORIES = (
    ("traceback", "tracebacks"),
    ("hang", "hangs > 5 s"),
    ("memory", f"runs > {MEMORY_LIMIT_MB} MB"),
    ("output", f"outputs > {hostile.OUTPUT_FACTOR}x input"),
    ("non-finite", "non-finite outputs"),
    ("field", "rejections without a field"),
    ("other", "other broken rules"),
)


def _category(problem: str) -> str:
    if problem.startswith(("traceback", "exit status")):
        return "traceback"
    if problem.startswith("output "):
        return "output"
    if "non-finite" in problem or "not strict JSON" in problem:
        return "non-finite"
    if "field path" in problem or "without 'error: '" in problem:
        return "field"
    return "other"


class _Hang(BaseException):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Hang


def worker(files: list[str]) -> None:
    """Run every file through the CLI; one JSON line per file on stdout."""
    from accel_operator.cli.main import main

    signal.signal(signal.SIGALRM, _alarm)
    report = sys.stdout
    for path in files:
        text = Path(path).read_text(encoding="utf-8")
        size = len(text.encode())
        started = time.monotonic()
        problems: list[str] = []
        statuses: list[int | None] = []
        signal.alarm(DOC_TIMEOUT_S)
        try:
            for command, argv in hostile.commands(path):
                result = hostile.judge(hostile.run_cli(main, argv, command, (_Hang,)), size, path)
                statuses.append(result.status)
                problems.extend(f"{command}: {p}" for p in result.problems)
        except _Hang:
            problems.append(f"hang: more than {DOC_TIMEOUT_S}s")
        finally:
            signal.alarm(0)
        rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        record = {
            "file": path,
            "size": size,
            "seconds": round(time.monotonic() - started, 3),
            "rss_mb": round(rss_mb, 1),
            "statuses": statuses,
            "problems": problems,
        }
        report.write(json.dumps(record) + "\n")
        report.flush()
        if rss_mb > MEMORY_LIMIT_MB:
            return  # the parent restarts a fresh worker for the rest of the batch


def _run_batch(files: list[str]) -> list[dict[str, Any]]:
    """Records for ``files``, restarting the worker after a memory spike or a stall."""
    out: list[dict[str, Any]] = []
    pending = list(files)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "operator"), str(ROOT)])}
    while pending:
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as listing:
            json.dump(pending, listing)
        proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", listing.name],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        assert proc.stdout is not None
        got: list[dict[str, Any]] = []
        deadline = time.monotonic() + DOC_TIMEOUT_S * 4 + 30
        # A worker whose alarm fails to fire (stuck in C code) stops answering: the parent's own
        # timer kills it and the document it was on counts as a hang.
        timer = _Killer(proc, deadline)
        for line in proc.stdout:
            got.append(json.loads(line))
            timer.deadline = time.monotonic() + DOC_TIMEOUT_S * 4 + 30
        proc.wait()
        timer.cancel()
        Path(listing.name).unlink(missing_ok=True)
        out.extend(got)
        done = {r["file"] for r in got}
        pending = [f for f in pending if f not in done]
        if not pending:
            break
        if got and got[-1]["rss_mb"] > MEMORY_LIMIT_MB:
            got[-1]["problems"].append(f"memory: worker reached {got[-1]['rss_mb']} MB")
            continue
        # The worker died or stalled on pending[0].
        stuck = pending.pop(0)
        why = "hang: worker stopped answering" if timer.fired else f"traceback: worker exited {proc.returncode}"
        out.append({"file": stuck, "size": 0, "seconds": None, "rss_mb": None, "statuses": [], "problems": [why]})
    return out


class _Killer:
    def __init__(self, proc: subprocess.Popen[str], deadline: float) -> None:
        import threading

        self.proc, self.deadline, self.fired = proc, deadline, False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(0.5):
            if time.monotonic() > self.deadline and self.proc.poll() is None:
                self.fired = True
                self.proc.kill()
                return

    def cancel(self) -> None:
        self._stop.set()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000, help="documents to generate (default 10000)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2, help="batches run side by side (default 2)")
    parser.add_argument("--worker", metavar="LISTING", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(json.loads(Path(args.worker).read_text()))
        return 0

    from concurrent.futures import ThreadPoolExecutor

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="accel-fuzz-") as scratch:
        files: list[str] = []
        names: dict[str, str] = {}
        for i, (name, text) in enumerate(hostile.random_documents(random.Random(args.seed), args.count)):
            path = Path(scratch) / f"doc-{i:05d}.yaml"
            path.write_text(text, encoding="utf-8")
            files.append(str(path))
            names[str(path)] = name
        generated = time.monotonic() - started
        batches = [files[i : i + BATCH] for i in range(0, len(files), BATCH)]
        records: list[dict[str, Any]] = []
        with ThreadPoolExecutor(max_workers=args.workers) as pool:
            for got in pool.map(_run_batch, batches):
                records.extend(got)
        elapsed = time.monotonic() - started

    by_category: dict[str, list[str]] = collections.defaultdict(list)
    for r in records:
        seen = set()
        for p in r["problems"]:
            cat = (
                "hang"
                if p.startswith("hang")
                else "memory"
                if p.startswith("memory")
                else _category(p.split(": ", 1)[-1])
            )
            if cat not in seen:
                seen.add(cat)
                by_category[cat].append(f"{names.get(r['file'], r['file'])}: {p[:300]}")
    statuses = collections.Counter(s for r in records for s in r["statuses"])
    timed = [r for r in records if r["seconds"] is not None]
    slowest = max(timed, key=lambda r: r["seconds"], default=None)
    rss = [r["rss_mb"] for r in records if r["rss_mb"] is not None]

    for cat, label in CATEGORIES:
        for example in by_category.get(cat, [])[:5]:
            print(f"[{label}] {example}")
    print()
    print(f"documents: {len(records)} (generated in {generated:.0f}s; {len(hostile.CORPUS)} from the fixed corpus)")
    print(f"CLI runs: {sum(statuses.values())} (validate, plan, plan -o json each); exit statuses {dict(statuses)}")
    if slowest is not None:
        print(f"slowest document: {names[slowest['file']]} ({slowest['size']} bytes), {slowest['seconds']:.2f}s")
    print(f"wall time: {elapsed:.0f}s; worker peak RSS {max(rss, default=0):.0f} MB")
    for cat, label in CATEGORIES:
        print(f"{label}: {len(by_category.get(cat, []))}")
    return 1 if any(by_category.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
