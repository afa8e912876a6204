"""The run's analysis and the summary's power curves kept in the results cache, under a key of
what they are computed from: every row as the run file writes it (figures, per-user figures,
records, guidance, options) without its ``timings`` and ``cache`` uses, which are all that
differ between a cold run and a warm rerun of the same figures, and the code of the analysis
(``crisis`` or ``power`` and every first-party module it imports). A rerun whose figures are
the last run's reads both back instead of computing them again (a third of a warm rerun's
time); any changed figure, record or line of the analysis's code is a new key. The values are
the analysis's own JSON forms (``Crisis.to_json``, ``Curve.to_json``), read back by their
readers, which tests check round-trip exactly (``tests/test_memo.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pytest_prefalign import cache, storage, versions
from pytest_prefalign.runs import entries

if TYPE_CHECKING:  # pragma: no cover
    from pytest_prefalign.analysis.claims import Where
    from pytest_prefalign.analysis.power import Curve
    from pytest_prefalign.runs.entries import Crisis, TauEntry
    from pytest_prefalign.runs.records import CaseResult, RunFile

CRISIS = "pytest_prefalign.analysis.crisis"
POWER = "pytest_prefalign.analysis.power"
# a row's fields that say how it was computed this time, not what it is
HOW_COMPUTED = ("timings", "cache")


def rows_key(results: Sequence[CaseResult]) -> str:
    """A hash of every row in order, records included, without ``HOW_COMPUTED``."""
    rows = []
    for result in results:
        row = result.to_json()
        for name in HOW_COMPUTED:
            row.pop(name, None)
        rows.append(row)
    return storage.content_key(rows)


def analysed(
    results: Sequence[CaseResult], disk: cache.Disk
) -> tuple[tuple[TauEntry, ...], Crisis]:
    """``crisis.analyse(results)``, or the analysis of the same rows kept in ``disk``."""
    key = cache.make_key("analysis", rows=rows_key(results), code=versions.module_version(CRISIS))

    def compute() -> dict[str, Any]:
        from pytest_prefalign.analysis import crisis

        tau, found = crisis.analyse(list(results))
        return {"tau": [entry.to_json() for entry in tau], "crisis": found.to_json()}

    value = disk.json(key, compute, valid=_readable_analysis)
    return entries.tau_from_json(value["tau"]), entries.crisis_from_json(value["crisis"])


def summary_curves(run: RunFile, disk: cache.Disk) -> dict[tuple[Where, str], Curve]:
    """``power.summary_curves(run)``, or the curves of the same rows and family kept in
    ``disk`` (the simulations are seeded: the same rows give the same curves)."""
    from pytest_prefalign.analysis.power import Curve

    family = run.crisis.family.by_kind if run.crisis.family else None
    key = cache.make_key(
        "power-curves",
        rows=rows_key(run.results),
        family=dict(family) if family is not None else None,
        code=versions.module_version(POWER),
    )

    def compute() -> list[dict[str, Any]]:
        from pytest_prefalign.analysis import power

        curves = power.summary_curves(run)
        return [
            {"where": list(where), "claim": claim, "curve": curve.to_json()}
            for (where, claim), curve in curves.items()
        ]

    value = disk.json(key, compute, valid=_readable_curves)
    return {
        (_where(entry["where"]), entry["claim"]): Curve.from_json(entry["curve"]) for entry in value
    }


def _where(value: list[str]) -> Where:
    suite, size, decoder = value
    return (suite, size, decoder)


def _readable_analysis(value: Any) -> bool:
    try:
        entries.tau_from_json(value["tau"])
        entries.crisis_from_json(value["crisis"])
    except (entries.EntryError, KeyError, TypeError):
        return False
    return True


def _readable_curves(value: Any) -> bool:
    from pytest_prefalign.analysis.power import Curve

    try:
        for entry in value:
            _where(entry["where"])
            Curve.from_json(entry["curve"])
            if not isinstance(entry["claim"], str):
                return False
    except (KeyError, TypeError, ValueError):
        return False
    return True
