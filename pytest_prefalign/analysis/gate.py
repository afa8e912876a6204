"""Regression gates: compare a run with a stored baseline on the same pairs and fail on a drop.

A drop counts only when it is both larger than its tolerance and significant under a paired test
(SPEC section 8): McNemar's exact test on the shared pairs for accuracies, a paired bootstrap over
users on per-item scores for ROUGE. Runs made on other pairs or items are refused, not compared.

Also the standalone command ``prefalign compare A.json B.json --fail policy_acc:2pp``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pytest_prefalign.analysis.metrics import per_user_mean
from pytest_prefalign.analysis.stats import mcnemar_exact, paired_bootstrap
from pytest_prefalign.storage import atomic_write_json

Key = tuple[str, str, str]  # (suite, method, size)

GATEABLE = ("policy_acc", "rm_acc", "rouge1", "rougeL")
# every metric a comparison shows, in display order, and the per-pair field behind accuracies
DISPLAYED = ("policy_acc", "policy_acc_micro", "rm_acc", "rm_acc_micro", "rouge1", "rougeL")
PAIR_FIELD = {
    "policy_acc": "policy_correct",
    "policy_acc_micro": "policy_correct",
    "rm_acc": "rm_correct",
    "rm_acc_micro": "rm_correct",
}
# metrics that are means over pairs or items (a user weighs by their count), not over users
POOLED = frozenset({"policy_acc_micro", "rm_acc_micro", "rouge1", "rougeL"})

BASELINE_DIR = Path(".prefalign") / "baselines"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_THRESHOLD = re.compile(r"(?P<metric>[A-Za-z0-9_]+):(?P<number>\d+(?:\.\d*)?|\.\d+)(?P<unit>\S*)")
_FORM = "METRIC:Npp, e.g. policy_acc:2pp (METRIC one of " + ", ".join(GATEABLE) + ")"
# a drop equal to the tolerance is not larger than it, whatever float subtraction says
_EPS = 1e-9


class RunMismatch(ValueError):
    """The two runs cannot be compared: other pairs or items, or a gate's records are missing."""


class BaselineNotFound(FileNotFoundError):
    """No baseline where one was looked for; the message names the place."""


# --------------------------------------------------------------------------------------------
# Thresholds
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Threshold:
    """A gate: ``metric`` may drop by at most ``points`` percentage points (metrics are 0..1)."""

    metric: str
    points: float

    @property
    def tolerance(self) -> float:
        """The tolerance on the 0..1 scale the run file uses."""
        return self.points / 100.0

    def __str__(self) -> str:
        return f"{self.metric}:{self.points:g}pp"


def parse_threshold(text: str) -> Threshold:
    """``policy_acc:2pp`` -> ``Threshold("policy_acc", 2.0)``; an ``argparse`` type.

    The unit is required: a bare ``2`` could mean 2 points or 0.02 and a typo would move the gate
    a hundredfold; ``%`` is refused because it reads as a relative change.
    """
    match = _THRESHOLD.fullmatch(text.strip().replace(" ", ""))
    if not match:
        raise argparse.ArgumentTypeError(f"invalid threshold {text!r}: expected {_FORM}")
    metric, unit = match["metric"], match["unit"]
    if metric not in GATEABLE:
        raise argparse.ArgumentTypeError(f"unknown metric {metric!r} in {text!r}: expected {_FORM}")
    if unit != "pp":
        got = f"unit {unit!r}" if unit else "no unit"
        raise argparse.ArgumentTypeError(
            f"invalid threshold {text!r} ({got}): give the tolerance in percentage points, "
            f"{metric}:{match['number']}pp"
        )
    return Threshold(metric, float(match["number"]))


def parse_thresholds(text: str) -> list[Threshold]:
    """A comma-separated list, ``policy_acc:2pp,rouge1:1pp``; each metric at most once."""
    parts = text.split(",")
    if any(not part.strip() for part in parts):
        raise argparse.ArgumentTypeError(f"empty threshold in {text!r}: expected {_FORM}[,...]")
    thresholds = [parse_threshold(part) for part in parts]
    _check_unique(thresholds)
    return thresholds


def parse_alpha(text: str) -> float:
    """A significance level strictly between 0 and 1; an ``argparse`` type."""
    try:
        alpha = float(text)
    except ValueError:
        alpha = math.nan
    if not 0.0 < alpha < 1.0:
        raise argparse.ArgumentTypeError(f"alpha must be a number between 0 and 1, got {text!r}")
    return alpha


def _check_unique(thresholds: Sequence[Threshold]) -> None:
    seen: set[str] = set()
    for threshold in thresholds:
        if threshold.metric in seen:
            raise argparse.ArgumentTypeError(f"{threshold.metric} is given two thresholds")
        seen.add(threshold.metric)


# --------------------------------------------------------------------------------------------
# Comparing runs
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    """One metric of one (suite, method, size) in the baseline and the current run.

    ``diff`` is ``new - old`` and ``ci`` its interval at level ``1 - alpha``; ``n`` counts the
    shared pairs (accuracies) or items (ROUGE) the test ran on.
    """

    suite: str
    method: str
    size: str
    metric: str
    old: float
    new: float
    diff: float
    ci: tuple[float, float]
    p_value: float
    test: str  # "mcnemar" or "bootstrap"
    n: int
    n_users: int
    gated: bool
    tolerance: float  # 0..1 scale; nan where not gated
    alpha: float
    regressed: bool
    note: str = ""

    @property
    def status(self) -> str:
        """``REGRESSED``, ``ok``, ``not significant`` (a drop beyond tolerance) or ``""``."""
        if not self.gated:
            return self.note
        if self.regressed:
            return "REGRESSED"
        return "not significant" if self.old - self.new > self.tolerance + _EPS else "ok"

    def message(self) -> str:
        """What happened, with old, new, the difference, its interval and the p-value."""
        head = "regressed" if self.regressed else "compared"
        level = f"{1 - self.alpha:.0%}"
        test = "McNemar exact" if self.test == "mcnemar" else "paired bootstrap over users"
        unit = "pairs" if self.test == "mcnemar" else "items"
        text = (
            f"{self.metric} of {self.method} on {self.suite} ({self.size}) {head}: "
            f"{_pct(self.old)} -> {_pct(self.new)} ({_pp(self.diff)} pp, {level} CI "
            f"[{_pp(self.ci[0])}, {_pp(self.ci[1])}] pp); {test} p = {_p(self.p_value)} "
            f"over {self.n} {unit} of {self.n_users} users"
        )
        if self.gated:
            text += f"; tolerance {self.tolerance * 100:g} pp, alpha {self.alpha:g}"
        return text + (f" ({self.note})" if self.note else "")

    def as_dict(self) -> dict[str, Any]:
        """Plain data (the interval a list) for a test report's ``user_properties``, which
        pytest-xdist sends from the worker to the controller."""
        data = asdict(self)
        data["ci"] = list(self.ci)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Comparison:
        """The inverse of ``as_dict``."""
        fields = dict(data)
        fields["ci"] = tuple(fields["ci"])
        return cls(**fields)


def compare_runs(
    baseline: Mapping[str, Any],
    current: Mapping[str, Any],
    thresholds: Sequence[Threshold],
    *,
    alpha: float = 0.05,
    overrides: Mapping[Key, Sequence[Threshold]] | None = None,
    n_boot: int = 2000,
    seed: int = 0,
) -> list[Comparison]:
    """Compare every metric of every (suite, method, size) found in both runs.

    Metrics in ``thresholds`` are gated; ``overrides`` replaces thresholds for one key (e.g. a
    test's ``prefalign_tolerance`` marker). ``regressed = gated and old - new > tolerance and
    p < alpha``. Raises ``RunMismatch`` when the runs share no key, when a shared key was run on
    other pair or item ids, or when a gated metric cannot be tested.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be between 0 and 1, got {alpha!r}")
    _check_unique(thresholds)
    old, new = _RunIndex(baseline, "baseline"), _RunIndex(current, "current run")
    keys = sorted(old.results.keys() & new.results.keys())
    if not keys:
        raise RunMismatch("the baseline and the current run share no (suite, method, size)")
    comparisons = []
    for key in keys:
        _check_same_ids(key, "pair", old.pairs.get(key, {}), new.pairs.get(key, {}))
        _check_same_ids(key, "item", old.items.get(key, {}), new.items.get(key, {}))
        gates = {t.metric: t for t in thresholds}
        gates.update({t.metric: t for t in (overrides or {}).get(key, ())})
        for metric, values in _shared_metrics(key, old.results[key], new.results[key], gates):
            gate = gates.get(metric)
            comparisons.append(_compare(key, metric, values, old, new, gate, alpha, n_boot, seed))
    return comparisons


def unmatched(
    baseline: Mapping[str, Any], current: Mapping[str, Any]
) -> tuple[list[Key], list[Key]]:
    """The (suite, method, size) keys only in the baseline, and those only in the current run."""
    old, new = _RunIndex(baseline, "baseline").results, _RunIndex(current, "current run").results
    return sorted(old.keys() - new.keys()), sorted(new.keys() - old.keys())


def _shared_metrics(
    key: Key, old: Mapping[str, Any], new: Mapping[str, Any], gates: Mapping[str, Threshold]
) -> list[tuple[str, tuple[float, float]]]:
    """Metrics with a value in both runs, with both values; a gated one in only one run is an
    error (the gate could not be checked)."""
    shared = []
    for metric in DISPLAYED:
        before, after = _metric(old, metric), _metric(new, metric)
        if before is not None and after is not None:
            shared.append((metric, (before, after)))
        elif metric in gates and (before is None) != (after is None):
            side = "current run" if before is not None else "baseline"
            raise RunMismatch(f"{_key_text(key)}: the {side} has no {metric} to gate on")
    return shared


def _compare(
    key: Key,
    metric: str,
    values: tuple[float, float],
    old: _RunIndex,
    new: _RunIndex,
    threshold: Threshold | None,
    alpha: float,
    n_boot: int,
    seed: int,
) -> Comparison:
    """One Comparison: figures from the results, interval and p-value from the paired records."""
    old_value, new_value = values
    rouge = metric not in PAIR_FIELD
    records = (old.items, new.items) if rouge else (old.pairs, new.pairs)
    field = metric if rouge else PAIR_FIELD[metric]
    users, before, after = _paired_values(records[0].get(key, {}), records[1].get(key, {}), field)
    ci, p_value, note = (math.nan, math.nan), math.nan, ""
    if users:
        weights = _counts(users) if metric in POOLED else None
        _, ci, p_boot = paired_bootstrap(
            per_user_mean(before, users), per_user_mean(after, users), n_boot, seed,
            weights=weights, level=1.0 - alpha,
        )  # fmt: skip
        p_value = p_boot if rouge else mcnemar_exact(before, after)
    elif threshold is not None:
        raise RunMismatch(
            f"{_key_text(key)}: no {'per-item' if rouge else 'per-pair'} {field!r} records "
            f"shared by both runs, so {metric} cannot be tested; save runs with their records"
        )
    else:
        note = "no records"
    regressed = (
        threshold is not None
        and old_value - new_value > threshold.tolerance + _EPS
        and p_value < alpha
    )
    return Comparison(
        suite=key[0], method=key[1], size=key[2], metric=metric, old=old_value, new=new_value,
        diff=new_value - old_value, ci=ci, p_value=p_value,
        test="bootstrap" if rouge else "mcnemar", n=len(users), n_users=len(set(users)),
        gated=threshold is not None, tolerance=threshold.tolerance if threshold else math.nan,
        alpha=alpha, regressed=regressed, note=note,
    )  # fmt: skip


def _paired_values(
    old: Mapping[str, Mapping[str, Any]], new: Mapping[str, Mapping[str, Any]], field: str
) -> tuple[list[str], list[float], list[float]]:
    """Users and both runs' values of ``field`` on the shared ids where neither value is null."""
    users, before, after = [], [], []
    for record_id in sorted(old.keys() & new.keys()):
        a, b = old[record_id].get(field), new[record_id].get(field)
        if a is not None and b is not None:
            users.append(str(old[record_id]["user"]))
            before.append(float(a))
            after.append(float(b))
    return users, before, after


def _counts(users: Sequence[str]) -> dict[str, float]:
    counts: dict[str, float] = {}
    for user in users:
        counts[user] = counts.get(user, 0.0) + 1.0
    return counts


def _check_same_ids(key: Key, kind: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
    """Refuse to compare a key whose runs were made on different pair (or item) ids."""
    only_old, only_new = sorted(old.keys() - new.keys()), sorted(new.keys() - old.keys())
    if only_old or only_new:
        raise RunMismatch(
            f"{_key_text(key)}: the runs were made on different {kind}s: "
            f"{len(only_old)} of the baseline's {len(old)} {kind} ids are not in the current run"
            f"{_examples(only_old)} and {len(only_new)} of the current run's {len(new)} are not "
            f"in the baseline{_examples(only_new)} (other data or another --prefalign-limit?)"
        )


class _RunIndex:
    """A run file's results, pairs and items, indexed by (suite, method, size) and id."""

    def __init__(self, run: Mapping[str, Any], label: str) -> None:
        if not isinstance(run, Mapping) or run.get("version") != 1:
            version = run.get("version") if isinstance(run, Mapping) else type(run).__name__
            raise ValueError(f"the {label} is not a version 1 run file (version: {version!r})")
        self.results: dict[Key, Mapping[str, Any]] = {}
        for i, row in enumerate(_rows(run, "results", label)):
            key = _key(row, f"the {label}'s results[{i}]")
            if key in self.results:
                raise ValueError(f"the {label} has two results for {_key_text(key)}")
            self.results[key] = row
        self.pairs = _index_records(run, "pairs", "pair_id", label)
        self.items = _index_records(run, "items", "item_id", label)


def _index_records(
    run: Mapping[str, Any], section: str, id_field: str, label: str
) -> dict[Key, dict[str, Mapping[str, Any]]]:
    index: dict[Key, dict[str, Mapping[str, Any]]] = {}
    for i, row in enumerate(_rows(run, section, label)):
        where = f"the {label}'s {section}[{i}]"
        for field in (id_field, "user"):
            if row.get(field) is None:
                raise ValueError(f"{where} has no {field!r}")
        records = index.setdefault(_key(row, where), {})
        record_id = str(row[id_field])
        if record_id in records:
            raise ValueError(f"{where}: {id_field} {record_id!r} appears twice")
        records[record_id] = row
    return index


def _rows(run: Mapping[str, Any], section: str, label: str) -> list[Mapping[str, Any]]:
    rows = run.get(section) or []
    if not isinstance(rows, list) or not all(isinstance(r, Mapping) for r in rows):
        raise ValueError(f"the {label}'s {section!r} must be a list of objects")
    return rows


def _key(row: Mapping[str, Any], where: str) -> Key:
    missing = [f for f in ("suite", "method", "size") if row.get(f) is None]
    if missing:
        raise ValueError(f"{where} has no {', '.join(map(repr, missing))}")
    return (str(row["suite"]), str(row["method"]), str(row["size"]))


def _metric(row: Mapping[str, Any], metric: str) -> float | None:
    value = (row.get("metrics") or {}).get(metric)
    return None if value is None or not math.isfinite(float(value)) else float(value)


# --------------------------------------------------------------------------------------------
# Baselines on disk
# --------------------------------------------------------------------------------------------


def check_baseline_name(name: str) -> str:
    """A baseline name (see ``_valid_name``) for an option's ``type=``: errors are usage errors."""
    try:
        return _valid_name(name)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _valid_name(name: str) -> str:
    """Letters, digits, ``.``, ``_``, ``-``, starting with a letter or digit: a file name that
    cannot climb out of the baselines folder."""
    if not _NAME.fullmatch(name) or name.endswith(".json"):
        raise ValueError(
            f"invalid baseline name {name!r}: use 1-100 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit, without '.json' (e.g. main or v1.2)"
        )
    return name


def save_baseline(run: Mapping[str, Any], name: str, root: Path) -> Path:
    """Write ``run`` atomically to ``root/.prefalign/baselines/NAME.json`` and return the path."""
    _valid_name(name)
    _RunIndex(run, "run to save")  # refuse to store what compare_runs could not read
    path = Path(root) / BASELINE_DIR / f"{name}.json"
    atomic_write_json(path, run)
    return path


def load_baseline(name_or_path: str | None, root: Path) -> dict[str, Any]:
    """A run file: the latest saved baseline (``None``), a saved one by name, or a path.

    A value with a path separator or ending in ``.json`` is a path (relative to the current
    directory); anything else is a name under ``root/.prefalign/baselines``.
    """
    return _read_run(baseline_path(name_or_path, root))


def baseline_path(name_or_path: str | None, root: Path) -> Path:
    """Where ``load_baseline`` reads from; raises ``BaselineNotFound`` naming the place looked."""
    folder = Path(root) / BASELINE_DIR
    if name_or_path is None:
        saved = _saved(folder)
        if not saved:
            raise BaselineNotFound(
                f"no baseline saved in {folder}: save one first with --prefalign-save NAME"
            )
        path = max(saved, key=lambda p: (p.stat().st_mtime, p.name))
    elif is_path(name_or_path):
        path = Path(name_or_path).expanduser()
        if not path.is_file():
            raise BaselineNotFound(f"no run file at {path}")
    else:
        path = folder / f"{_valid_name(name_or_path)}.json"
        if not path.is_file():
            names = ", ".join(p.stem for p in _saved(folder)) or "none"
            raise BaselineNotFound(f"no baseline named {name_or_path!r} at {path} (saved: {names})")
    return path


def is_path(name_or_path: str) -> bool:
    """A baseline argument with a path separator or ending in ``.json`` is a file, not a name."""
    return os.sep in name_or_path or "/" in name_or_path or name_or_path.endswith(".json")


def _saved(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.json")) if folder.is_dir() else []


def _read_run(path: Path) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            run = json.load(fh)
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot read the run file: {exc}") from None
    try:
        _RunIndex(run, "run file")
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    return run


# --------------------------------------------------------------------------------------------
# Display and the standalone command
# --------------------------------------------------------------------------------------------


def format_table(comparisons: Sequence[Comparison]) -> str:
    """All comparisons as a text table; figures in points (x 100), p-values as they are."""
    from tabulate import tabulate

    rows = [
        [c.suite, c.method, c.size, c.metric, _pct(c.old), _pct(c.new), _pp(c.diff),
         f"[{_pp(c.ci[0])}, {_pp(c.ci[1])}]", _p(c.p_value), c.n,
         f"{c.tolerance * 100:g}pp" if c.gated else "", c.status]
        for c in comparisons
    ]  # fmt: skip
    headers = ["suite", "method", "size", "metric", "old", "new", "diff", "CI", "p", "n",
               "tolerance", "status"]  # fmt: skip
    return tabulate(rows, headers=headers, disable_numparse=True)


def compare_main(argv: Sequence[str] | None = None) -> int:
    """``prefalign compare BASELINE CURRENT [--fail EXPR] [--alpha A]`` (argv without ``compare``).

    Returns 1 when a gated metric regressed, 2 on a usage error or runs that cannot be
    compared, 0 otherwise.
    """
    parser = _compare_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits on errors and --help; a caller wants a code
        return exc.code if isinstance(exc.code, int) else 2
    thresholds = [t for group in args.fail for t in group]
    try:
        _check_unique(thresholds)
        root = Path.cwd()
        baseline, current = load_baseline(args.baseline, root), load_baseline(args.current, root)
        comparisons = compare_runs(baseline, current, thresholds, alpha=args.alpha)
    except (argparse.ArgumentTypeError, ValueError, FileNotFoundError) as exc:
        print(f"prefalign compare: error: {exc}", file=sys.stderr)
        return 2
    print(format_table(comparisons))
    for side, keys in zip(("baseline", "current run"), unmatched(baseline, current), strict=True):
        for key in keys:
            print(f"only in the {side}, not compared: {_key_text(key)}")
    failed = [c for c in comparisons if c.regressed]
    for comparison in failed:
        print(f"FAILED {comparison.message()}")
    gates = ", ".join(map(str, thresholds)) or "none (display only)"
    print(f"{len(failed)} regression(s); gates: {gates}; alpha {args.alpha:g}")
    return 1 if failed else 0


def _compare_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="prefalign compare",
        description="Compare two prefalign run files on the same pairs and fail on regressions.",
    )
    parser.add_argument("baseline", help="run file (path) or saved baseline name")
    parser.add_argument("current", help="run file (path) or saved baseline name")
    parser.add_argument(
        "--fail", action="append", type=parse_thresholds, default=[], metavar="EXPR",
        help=f"gate, {_FORM}; comma-separated or repeated",
    )  # fmt: skip
    parser.add_argument("--alpha", type=parse_alpha, default=0.05, help="significance level")
    return parser


def _key_text(key: Key) -> str:
    return f"{key[1]} on {key[0]} ({key[2]})"


def _examples(ids: Sequence[str]) -> str:
    return f" (e.g. {', '.join(map(repr, ids[:3]))})" if ids else ""


def _pct(value: float) -> str:
    return f"{value * 100:.2f}"


def _pp(value: float) -> str:
    return "nan" if math.isnan(value) else f"{value * 100:+.2f}"


def _p(value: float) -> str:
    return "nan" if math.isnan(value) else f"{value:.3g}"
