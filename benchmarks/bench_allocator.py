"""A cold prefalign run with the allocator a run sets up (``plumbing/allocator.py``: freed
buffers kept for the next pass) against the same run with the C library's default
(``PREFALIGN_MALLOC=system``), each in a fresh process on an empty cache, in alternating order.

    python benchmarks/bench_allocator.py                       # 4 users, 3 methods, twice each
    python benchmarks/bench_allocator.py --limit 2 --repeats 1

Prints per run the wall time, the minor page faults and the peak resident memory of the pytest
process (``os.wait4``), then the median ratio of the default's wall time to the kept buffers'.
The outputs of both are the same run's (the allocator does not change a number).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cold_run(args: argparse.Namespace, mode: str) -> tuple[float, int, float]:
    """One cold run: (wall seconds, minor page faults, peak resident GB)."""
    with tempfile.TemporaryDirectory(prefix="prefalign-alloc-") as folder:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
        env.update(PREFALIGN_CACHE=folder, PREFALIGN_MALLOC=mode, HF_HUB_OFFLINE="1")
        command = [sys.executable, "-m", "pytest", "--prefalign", args.suite, "-q"]
        command += ["-p", "no:cacheprovider", "--prefalign-limit", str(args.limit)]
        command += ["--prefalign-methods", args.methods]
        started = time.perf_counter()
        process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
        if os.waitstatus_to_exitcode(status) != 0:
            sys.exit(f"{' '.join(command)} failed (PREFALIGN_MALLOC={mode})")
    return wall, usage.ru_minflt, usage.ru_maxrss / 1024**2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", default="suites/pref_lamp")
    parser.add_argument("--limit", type=int, default=4)
    parser.add_argument("--methods", default="base,icl_rag,bon[per_user_bt]")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    walls: dict[str, list[float]] = {"system": [], "keep": []}
    for i in range(args.repeats):
        for mode in ("system", "keep") if i % 2 == 0 else ("keep", "system"):
            wall, faults, peak = cold_run(args, mode)
            walls[mode].append(wall)
            print(f"{mode:6}  {wall:7.1f} s  {faults:>10,} minor faults  peak {peak:.2f} GB")
    ratio = statistics.median(walls["system"]) / statistics.median(walls["keep"])
    print(f"default / kept buffers: {ratio:.3f}x (median wall over {args.repeats} runs each)")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
