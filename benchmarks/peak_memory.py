"""The peak resident memory of a child process, read when it ends: the benchmarks that run
pytest in a subprocess (``bench_main_job.py``, ``findings.py``) report it beside its time.

``os.wait4`` gives the ended child's own resource usage, whose ``ru_maxrss`` is the largest
resident set of the child and of the processes it waited for (pytest-xdist's workers): the
peak of one process, not their sum. ``resource.getrusage(RUSAGE_CHILDREN)`` would give the
largest over every child this script has had, so a second run would report the first's peak.
A child is forked from this script before it runs pytest, and Linux counts the forked copy's
resident set too: the reading is at least this script's own size at that moment (tens of MB
for these scripts), against the GB a run holds.

Under ``-n`` the workers' peaks need not coincide, and what a machine must hold is their sum at
one moment: ``watch`` samples the resident memory of the whole process tree (``/proc``, Linux)
while the child runs, and gives the largest sum seen (of resident sets, and of proportional
sets, which count a page the forked workers share once), the largest single process and the
least memory the machine had available. Run as a script it runs a command so:

    python benchmarks/peak_memory.py -- pytest --prefalign suites/pref_lamp -n 2
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass

from pytest_prefalign.runtime.memory import available_bytes  # no torch: light to import

GB = 10**9


def wait(process: subprocess.Popen) -> tuple[int, float]:
    """Wait for ``process`` to end; its exit status (as ``Popen.returncode`` gives it) and its
    peak resident memory in GB (``ru_maxrss`` is in KiB on Linux, in bytes on macOS)."""
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return process.returncode, _peak_bytes(usage) / GB


def _peak_bytes(usage: resource.struct_rusage) -> int:
    """``ru_maxrss`` in bytes (it is in KiB on Linux, in bytes on macOS)."""
    return usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)


@dataclass(frozen=True)
class Watched:
    """What ``watch`` saw of a process tree while it ran (GB)."""

    returncode: int
    tree_peak_gb: float  # the largest sum of the tree's resident sets at one sample
    # the largest sum of their proportional sets (a page shared by n processes counts 1/n:
    # what the tree holds, the pages xdist's forked workers share counted once); nan: unread
    tree_proportional_peak_gb: float
    process_peak_gb: float  # the largest resident set of one process of the tree
    least_available_gb: float  # the least MemAvailable at a sample (inf: never read)
    samples: int
    seconds: float


def watch(process: subprocess.Popen, every: float = 1.0) -> Watched:
    """Sample ``process``'s tree (it and its descendants) every ``every`` seconds until it
    ends. A peak shorter than the interval can be missed: the sums are a lower bound of the
    true peak. The child's own ``wait4`` reading is not taken: it counts the resident set of
    the process it was forked from (a pytest worker holding a model, say), not only the tree's."""
    started = time.perf_counter()
    tree_peak = process_peak = 0
    proportional_peak: float = 0
    least_available = float("inf")
    samples = 0
    while True:
        # wait4 without waiting: (0, 0, _) while the child runs
        pid, status, _ = os.wait4(process.pid, os.WNOHANG)
        if pid:
            break
        members = _tree(process.pid)
        sizes = [_resident(member) for member in members]
        tree_peak = max(tree_peak, sum(sizes))
        shares = [_proportional(member) for member in members]
        held = sum(shares)  # nan where the machine does not say: kept nan (max skips a nan)
        proportional_peak = held if math.isnan(held) else max(proportional_peak, held)
        process_peak = max([process_peak, *sizes])
        available = available_bytes()
        if available is not None:  # None: the machine does not say
            least_available = min(least_available, available)
        samples += 1
        time.sleep(every)
    process.returncode = os.waitstatus_to_exitcode(status)
    return Watched(
        returncode=int(process.returncode),
        tree_peak_gb=tree_peak / GB,
        tree_proportional_peak_gb=proportional_peak / GB if samples else math.nan,
        process_peak_gb=process_peak / GB,
        least_available_gb=least_available / GB,  # inf: never read
        samples=samples,
        seconds=time.perf_counter() - started,
    )


def _tree(root: int) -> list[int]:
    """``root`` and its descendants, from each process's parent id in ``/proc``."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            parent = _parent(int(entry))
            if parent is not None:
                children.setdefault(parent, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            # the command name (field 2) is in parentheses and may hold spaces
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None  # ended meanwhile


def _resident(pid: int) -> int:
    """Resident bytes of a process (0 where it ended meanwhile)."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


def _proportional(pid: int) -> float:
    """Proportional set size of a process in bytes (``/proc/<pid>/smaps_rollup``, Linux 4.14
    on); 0 where it ended meanwhile, nan where the machine does not say."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024  # kB
    except FileNotFoundError:
        return 0 if os.path.exists("/proc/self/smaps_rollup") else math.nan
    except (OSError, IndexError, ValueError):
        return 0
    return math.nan


def main() -> None:
    parser = argparse.ArgumentParser(description="run a command; print its tree's peak memory")
    parser.add_argument("--every", type=float, default=1.0, help="seconds between samples")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the command")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    watched = watch(subprocess.Popen(command), args.every)
    print(
        f"peak resident memory: {watched.tree_peak_gb:.2f} GB summed over the process tree "
        f"({watched.tree_proportional_peak_gb:.2f} GB its proportional sets: shared pages "
        f"counted once), {watched.process_peak_gb:.2f} GB the largest process; the machine's "
        "available "
        f"memory at its lowest {watched.least_available_gb:.2f} GB; "
        f"{watched.seconds:.0f} s, {watched.samples} samples, exit status {watched.returncode}"
    )
    sys.exit(watched.returncode)


if __name__ == "__main__":
    main()
