"""``benchmarks/peak_memory.py``: the peak resident memory of one child process, as the
benchmarks that run pytest in a subprocess report it."""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest

from tests import benchmark_scripts

GB = 10**9


def test_the_benchmarks_read_one_child_s_peak_memory():
    """``benchmarks/peak_memory.py``: a child that holds more than this process ever did
    reports at least that, and a small one after it reports less (its own peak, not the
    first's; Linux counts the forked copy of this process, which bounds it below)."""
    here = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GB
    if here > 2:
        pytest.skip(f"this process has held {here:.1f} GB; the child would hold more")
    size = here + 0.3  # GB
    peak_memory = benchmark_scripts.load("peak_memory")
    try:
        held = f"b = b'x' * {int(size * GB)}; raise SystemExit(3)"  # written: resident
        big = subprocess.Popen([sys.executable, "-c", held])
        status, peak = peak_memory.wait(big)
        assert status == 3 and big.returncode == 3
        assert peak >= size
        small = subprocess.Popen([sys.executable, "-c", "pass"])
        status, peak = peak_memory.wait(small)
        assert status == 0 and peak < size
    finally:
        del sys.modules["peak_memory"]
