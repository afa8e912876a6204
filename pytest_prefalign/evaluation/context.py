"""What evaluating a case needs of the run, and nothing more: the case itself, and the run's
registry, models, disk cache, method options and the few of its settings (``plumbing/options.py``'s
``Settings``, the one record of a run's options) that an evaluation reads."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_prefalign.registry import MethodName
from pytest_prefalign.runs.parts import at_strength

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
    # (option, value): a test of the strength sweep, the decoder at that strength (None: at
    # its working point, or a method without guidance)
    sweep: tuple[str, float] | None = None

    @property
    def row(self) -> str:
        """The result's method: the method's name, with a swept test's strength
        (``args[pref]@w=0.25``)."""
        return row_name(self.method, self.sweep)

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
    guidance: str  # guidance strengths chosen on validation items (also under ``sweep``), or fixed
    data: str | None  # the data folder the run found (--prefalign-data, resolved)
    data_ini: str | None  # the ini value prefalign_data
    rootdir: Path


def row_name(method: MethodName, sweep: tuple[str, float] | None) -> str:
    """A test's method as its id and its result name it: the method, and a swept test's
    strength (``args[pref]@w=0.25``)."""
    return str(method) if sweep is None else at_strength(str(method), *sweep)
