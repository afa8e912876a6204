"""pytest-xdist: workers run tests; only the controller summarises and writes files. A
prefalign run distributes by (suite, size) group and, on a machine with GPUs, starts one worker
per GPU under ``-n auto``."""

from __future__ import annotations

import os
from typing import Any

import pytest


def is_worker(config: pytest.Config) -> bool:
    """Whether this process is an xdist worker (xdist gives workers a ``workerinput``)."""
    return hasattr(config, "workerinput")


def process_count(config: pytest.Config) -> int:
    """The processes that run the tests: xdist's workers (``-n``, a number once xdist has read
    ``auto``), else this one."""
    count = getattr(config.option, "numprocesses", None)
    return count if isinstance(count, int) and count > 0 else 1


def share_cores(config: pytest.Config) -> None:
    """Under ``-n N`` (N > 1), each worker's OpenMP threads (torch's intra-op threads on the
    CPU) set to its share of this process's cores, ``cores // N`` (at least 1), through
    ``OMP_NUM_THREADS``, which the workers inherit when xdist starts them; torch otherwise
    gives every worker all the cores, and N workers of all the cores wait on each other (the
    main job under ``-n 2 --dist load``: 707 s so, 688 s with one thread a worker). Left
    alone where ``OMP_NUM_THREADS`` is set; restored when the run ends (a run inside another
    process)."""
    if is_worker(config) or "OMP_NUM_THREADS" in os.environ:
        return
    count = process_count(config)
    if count < 2:
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    os.environ["OMP_NUM_THREADS"] = str(max(1, (cores or 1) // count))
    config.add_cleanup(_unset_threads)


def _unset_threads() -> None:
    """``OMP_NUM_THREADS`` removed, as before ``share_cores`` set it."""
    os.environ.pop("OMP_NUM_THREADS", None)


def prefer_loadgroup(config: pytest.Config) -> None:
    """``--dist loadgroup`` for a prefalign run under ``-n`` where ``--dist`` was not given
    (xdist would choose ``load``, which spreads a group's tests over every worker)."""
    option = config.option
    if not getattr(option, "prefalign", False) or not getattr(option, "numprocesses", None):
        return
    if getattr(option, "dist", None) == "no" and not getattr(option, "distload", False):
        option.dist = "loadgroup"


def make_scheduler(config: pytest.Config, log: Any, sizes: list[str]) -> Any:
    """Under ``--dist loadgroup`` (the default of a prefalign run under ``-n``), a scheduler
    that sends all the tests of a (suite, size) to one worker, each group whole
    (``scheduler.py``): xdist's own ``loadgroup`` groups by renaming test ids, which pytest 9
    no longer allows. Other tests go one by one, as ``--dist load`` sends them."""
    from pytest_prefalign.plumbing.scheduler import PrefalignGroupScheduling

    by_length = sorted(sizes, key=len, reverse=True)  # "tiny2" before "tiny"
    return PrefalignGroupScheduling(config, log, lambda nodeid: group_scope(nodeid, by_length))


def group_scope(nodeid: str, sizes: list[str]) -> str:
    """``path/suite.toml::size`` for an evaluation test ``path/suite.toml::suite[method-size]``
    (its suite file names the suite and its options), else the test's own id."""
    path, _, name = nodeid.partition("::")
    if path.endswith("suite.toml"):
        for size in sizes:
            if name.endswith(f"-{size}]"):
                return f"{path}::{size}"
    return nodeid


def gpu_workers(config: pytest.Config) -> int | None:
    """The number of GPUs, for ``-n auto`` with ``--prefalign``; ``None`` (xdist counts CPUs)
    without ``--prefalign`` or without a GPU. Only here is torch imported by the controller."""
    if not config.getoption("prefalign", False):
        return None
    from pytest_prefalign.runtime.devices import gpu_count

    return gpu_count() or None
