"""Each pytest-xdist worker of a prefalign run gets its share of the cores
(``plumbing/workers.py: share_cores``)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from types import SimpleNamespace

import pytest

from pytest_prefalign.plumbing import workers


class Config(SimpleNamespace):
    def __init__(self, numprocesses: object, worker: bool = False) -> None:
        super().__init__(option=SimpleNamespace(numprocesses=numprocesses), cleanups=[])
        if worker:
            self.workerinput = {}

    def add_cleanup(self, func: Callable[[], object]) -> None:
        self.cleanups.append(func)


@pytest.fixture
def cores(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[int], None]]:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)

    def set_cores(n: int) -> None:
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(n)), raising=False)

    yield set_cores


@pytest.mark.parametrize(
    ("n_cores", "workers_", "threads"), [(2, 2, "1"), (16, 4, "4"), (3, 2, "1"), (2, 4, "1")]
)
def test_each_worker_gets_its_share(
    cores: Callable[[int], None], n_cores: int, workers_: int, threads: str
) -> None:
    cores(n_cores)
    config = Config(workers_)
    workers.share_cores(config)  # type: ignore[arg-type]
    assert os.environ["OMP_NUM_THREADS"] == threads
    for cleanup in config.cleanups:  # the run's end restores the environment
        cleanup()
    assert "OMP_NUM_THREADS" not in os.environ


@pytest.mark.parametrize("config", [Config(None), Config(1), Config(2, worker=True)])
def test_one_process_or_a_worker_is_left_alone(
    cores: Callable[[int], None], config: Config
) -> None:
    cores(8)
    workers.share_cores(config)  # type: ignore[arg-type]
    assert "OMP_NUM_THREADS" not in os.environ and config.cleanups == []


def test_the_users_thread_count_is_kept(
    cores: Callable[[int], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    cores(8)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    workers.share_cores(Config(2))  # type: ignore[arg-type]
    assert os.environ["OMP_NUM_THREADS"] == "3"
