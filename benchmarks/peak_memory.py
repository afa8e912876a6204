"""The peak resident memory of a child process, read when it ends: the benchmarks that run
pytest in a subprocess (``bench_main_job.py``, ``findings.py``) report it beside its time.

``os.wait4`` gives the ended child's own resource usage, whose ``ru_maxrss`` is the largest
resident set of the child and of the processes it waited for (pytest-xdist's workers): the
peak of one process, not their sum. ``resource.getrusage(RUSAGE_CHILDREN)`` would give the
largest over every child this script has had, so a second run would report the first's peak.
A child is forked from this script before it runs pytest, and Linux counts the forked copy's
resident set too: the reading is at least this script's own size at that moment (tens of MB
for these scripts), against the GB a run holds.
"""

from __future__ import annotations

import os
import subprocess
import sys

GB = 10**9


def wait(process: subprocess.Popen) -> tuple[int, float]:
    """Wait for ``process`` to end; its exit status (as ``Popen.returncode`` gives it) and its
    peak resident memory in GB (``ru_maxrss`` is in KiB on Linux, in bytes on macOS)."""
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    unit = 1 if sys.platform == "darwin" else 1024
    return process.returncode, usage.ru_maxrss * unit / GB
