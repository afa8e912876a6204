"""What evaluating a case needs of the run, and nothing more: the case itself, and the run's
registry, models, disk cache, method options and the few of its settings (``plumbing/options.py``'s
``Settings``, the one record of a run's options) that an evaluation reads."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_prefalign.registry import MethodName

if TYPE_CHECKING:  # pragma: no cover
    from pytest_prefalign.cache import Disk
    from pytest_prefalign.method_options import Resolved
    from pytest_prefalign.registry import Registry
    from pytest_prefalign.runtime.pool import ModelPool


@dataclass(frozen=True)
class Case:
    """What one test evaluates."""

    suite: str
    options: tuple[tuple[str, str], ...]  # the suite's options, sorted
    method: MethodName
    size: str

    @property
    def group(self) -> tuple[str, tuple[tuple[str, str], ...], str]:
        """The (suite, options, size) whose tests share data, pairs, fitted rewards, memos."""
        return (self.suite, self.options, self.size)


@dataclass(frozen=True)
class RunContext:
    """The run as the evaluation sees it."""

    registry: Registry
    models: ModelPool
    disk: Disk
    method_options: Resolved
    # the run's settings an evaluation reads
    limit: int  # users per suite
    seed: int
    reduce: str  # policy score: sum or mean of token log-likelihoods
    guidance: str  # guidance strengths chosen on validation items, or fixed by the options
    data: str | None  # the data folder the run found (--prefalign-data, resolved)
    data_ini: str | None  # the ini value prefalign_data
    rootdir: Path
