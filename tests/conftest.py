"""Shared fixtures: the tiny random model (built once per session, or once per xdist worker)."""

from __future__ import annotations

import os

# passive OpenMP waits, set before torch starts: spinning threads are many times slower on a
# shared machine (the plugin does the same for --prefalign runs)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# no test fetches data from a network: a run that finds no data fails at once instead
os.environ.setdefault("PREFALIGN_OFFLINE", "1")
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # pragma: no cover
    from pytest_prefalign.runtime.lm import LM


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "slow: loads a real model (SmolLM2-135M); deselect with -m 'not slow'"
    )
    import torch

    # One thread per test process: toy-sized matmuls gain nothing from a second thread, and on a
    # shared 2-core machine (or under pytest-xdist) two threads per process wait on each other,
    # measured 10x slower for the tiny model. PREFALIGN_TEST_THREADS overrides.
    torch.set_num_threads(int(os.environ.get("PREFALIGN_TEST_THREADS", "1")))


@pytest.fixture(scope="session")
def tiny_lm() -> LM:
    """The tiny random chat model of seed 0, on the CPU. Shared: do not modify its weights."""
    from pytest_prefalign.runtime.tiny import build_tiny_lm

    return build_tiny_lm(0)
