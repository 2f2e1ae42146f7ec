"""A seed of the hostile-input generator gives the same documents in every process: a failure
that ``bench/fuzz_cli.py --seed N`` found can be drawn again elsewhere."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

# Prints a digest of the documents seed 7 draws (past the corpus: the mutations).
_DRAW = (
    "import hashlib, random\n"
    "from tests.support import hostile\n"
    "n = len(hostile.CORPUS) + 300\n"
    "h = hashlib.sha256()\n"
    "for name, text in hostile.random_documents(random.Random(7), n):\n"
    "    h.update(name.encode()); h.update(text.encode('utf-8', 'surrogatepass'))\n"
    "print(h.hexdigest())\n"
)


def _draw_in_subprocess(hash_seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _DRAW], cwd=ROOT, env=env, capture_output=True, text=True, check=True, timeout=300
    )
    return done.stdout.strip()


def test_the_same_seed_draws_the_same_documents_in_two_processes() -> None:
    # Two different string-hash salts: what Python's hash() of a str gives differs between them.
    first, second = _draw_in_subprocess("1"), _draw_in_subprocess("2")
    assert len(first) == 64
    assert first == second
