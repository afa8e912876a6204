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


def test_watch_sums_the_process_tree_while_it_runs():
    """``peak_memory.watch``: a child holding 0.2 GB whose own child holds 0.3 GB at the same
    time is seen at their sum (at least), and the largest process at the grandchild's size."""
    peak_memory = benchmark_scripts.load("peak_memory")
    grandchild = "b = b'x' * 300_000_000; import time; time.sleep(1.5)"
    child = (
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen([sys.executable, '-c', {grandchild!r}])\n"
        "b = b'y' * 200_000_000\n"
        "time.sleep(1.5)\n"
        "raise SystemExit(p.wait() + 4)\n"
    )
    try:
        watched = peak_memory.watch(subprocess.Popen([sys.executable, "-c", child]), every=0.05)
        assert watched.returncode == 4 and watched.samples > 5
        assert watched.tree_peak_gb >= 0.5
        assert 0.3 <= watched.process_peak_gb < watched.tree_peak_gb
        assert 0 < watched.least_available_gb
    finally:
        del sys.modules["peak_memory"]


def test_watch_does_not_count_the_process_it_was_started_from():
    """A small child started from a process that holds more (a pytest worker with a model, as
    in CI) is seen at its own size: the child's ``wait4`` reading, which counts the forked
    copy of its parent, is not taken as the largest process."""
    held = b"z" * 600_000_000  # resident in this process while the child is started
    peak_memory = benchmark_scripts.load("peak_memory")
    try:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
        watched = peak_memory.watch(child, every=0.05)
        assert watched.returncode == 0 and watched.samples > 2
        assert watched.process_peak_gb < 0.3 and watched.tree_peak_gb < 0.3
    finally:
        del sys.modules["peak_memory"]
        del held


def test_watch_counts_pages_forked_workers_share_once_in_the_proportional_sum():
    """A child holding 0.3 GB forks a copy of itself (as pytest-xdist's workers share what was
    loaded before): their resident sets sum to about 0.6 GB, their proportional sets to 0.3."""
    child = (
        "import os, time\n"
        "b = b'x' * 300_000_000\n"
        "pid = os.fork()\n"
        "time.sleep(1.0)\n"
        "if pid == 0:\n"
        "    os._exit(0)\n"
        "os.waitpid(pid, 0)\n"
        "raise SystemExit(5)\n"
    )
    peak_memory = benchmark_scripts.load("peak_memory")
    try:
        watched = peak_memory.watch(subprocess.Popen([sys.executable, "-c", child]), every=0.05)
        assert watched.returncode == 5
        assert watched.tree_peak_gb >= 0.58
        assert 0.28 <= watched.tree_proportional_peak_gb < 0.45
    finally:
        del sys.modules["peak_memory"]
