"""Each collected test's case handed to the evaluation, and the checks that fail it: the items'
``Host`` (``collect.py``). The ``Evaluator`` is built when the first test runs, so that numpy
and torch load then, not when the run is configured or only lists its tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_prefalign import cache, method_options
from pytest_prefalign.api import declared
from pytest_prefalign.errors import PrefalignError, SuiteUnavailable
from pytest_prefalign.plumbing import options
from pytest_prefalign.plumbing.collect import CaseItem
from pytest_prefalign.plumbing.options import Settings
from pytest_prefalign.registry import MethodName, Registry
from pytest_prefalign.runtime.pool import ModelPool

if TYPE_CHECKING:  # pragma: no cover
    import pytest

    from pytest_prefalign.evaluation.case import Evaluator
    from pytest_prefalign.runs.records import CaseResult


@dataclass
class Dispatch:
    """What the run's tests are evaluated with; its ``evaluate`` and ``problems`` are what an
    item asks of its host."""

    config: pytest.Config
    settings: Settings
    registry: Registry
    methods: list[MethodName]
    method_options: method_options.Resolved
    models: ModelPool
    disk: cache.Disk
    data_dir: Path | None
    # (suite, its options) -> the first test that reported the suite could not load
    unavailable: dict[tuple[str, tuple[tuple[str, str], ...]], str] = field(default_factory=dict)
    _evaluator: Evaluator | None = None

    @property
    def sizes(self) -> list[str]:
        return self.settings.sizes

    def sweep(self, method: MethodName) -> list[tuple[str, float]]:
        """Under ``--prefalign-guidance sweep``, a reward-guided method whose decoder declares a
        strength (``Decoder.strength``: ``args.w``, ``genarm.alpha``) has one test per common
        strength of ``options.SWEEP`` beside its own: (option, value) each; else none."""
        if self.settings.guidance != "sweep" or method.reward is None:
            return []
        option = declared(self.registry.decoder(method.decoder).obj, "strength")
        return [(option, value) for value in options.SWEEP] if option else []

    @property
    def evaluator(self) -> Evaluator:
        if self._evaluator is None:
            from pytest_prefalign.evaluation.case import Evaluator
            from pytest_prefalign.evaluation.context import RunContext

            self._evaluator = Evaluator(
                RunContext(
                    self.registry,
                    self.models,
                    self.disk,
                    self.method_options,
                    limit=self.settings.limit,
                    seed=self.settings.seed,
                    reduce=self.settings.reduce,
                    guidance=self.settings.guidance,
                    data=str(self.data_dir) if self.data_dir is not None else None,
                    data_ini=self.settings.data_ini,
                    rootdir=Path(self.config.rootpath),
                )
            )
        return self._evaluator

    def evaluate(self, item: CaseItem) -> CaseResult:
        from pytest_prefalign.evaluation.context import Case

        try:
            case = Case(item.suite, item.suite_options, item.method, item.size, item.sweep)
            return self.evaluator.run(case)
        except SuiteUnavailable as exc:
            # in full once per suite; its other tests point there in one line
            first = self.unavailable.setdefault((item.suite, item.suite_options), item.name)
            if first == item.name:
                raise
            fetch = f"; fetch its data with: {exc.fetch}" if exc.fetch else ""
            raise PrefalignError(
                f"suite {exc.suite!r} could not load: see the failure of {first} above{fetch}"
            ) from None

    def problems(self, item: CaseItem, result: CaseResult) -> list[str]:
        """What fails the test besides its method: the floors, and the plugins' checks."""
        from pytest_prefalign.evaluation.case import check

        floors = [(floor.metric, floor.value) for floor in self.settings.floors]
        problems = check(result, floors)
        for extra in self.config.hook.pytest_prefalign_check(item=item, result=result):
            problems += extra or []
        return problems
