"""The operator under tracemalloc, for ``bench/scale.py --tracemalloc FILE``: where its memory goes.

Every 5 s it takes the traced size; whenever that is the largest so far, it writes the top
allocation sites (by file, then by line) to FILE. Tracing slows
the operator several times: use it for the counts, never for the timings.
"""

from __future__ import annotations

import sys
import threading
import time
import tracemalloc
from pathlib import Path

from accel_operator import app


def write(out: Path, snap: tracemalloc.Snapshot, size: int) -> None:
    _current, peak = tracemalloc.get_traced_memory()
    lines = [f"traced: largest sample {size / 1e6:.1f} MB, peak so far {peak / 1e6:.1f} MB"]
    lines += ["", "by file:"] + [str(s) for s in snap.statistics("filename")[:25]]
    lines += ["", "by line:"] + [str(s) for s in snap.statistics("lineno")[:40]]
    out.write_text("\n".join(lines) + "\n")


def main() -> int:
    out = Path(sys.argv[1])
    tracemalloc.start(1)  # after the imports: only what the running operator allocates
    size = [0]

    def sample() -> None:
        while True:
            time.sleep(5)
            current, _peak = tracemalloc.get_traced_memory()
            if current > size[0] * 1.05:  # written as it grows: the file is there however the run ends
                size[0] = current
                write(out, tracemalloc.take_snapshot(), current)

    threading.Thread(target=sample, daemon=True).start()
    return app.main()


if __name__ == "__main__":
    sys.exit(main())
