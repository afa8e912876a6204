"""How far ``--prefalign-dtype bfloat16`` moves a run's figures from float32's.

Reads two run files of the same job, one made in fp32 and one in bf16 (or the folders that
``bench_main_job.py --keep`` leaves, whose cold run is read), and prints for every row both runs
have:

- RM accuracy, policy accuracy and ROUGE-1 in bf16 beside the fp32 value and its 95% interval
  (users resampled, as the leaderboard prints it), and whether the bf16 value lies inside it;
- how many of the row's outputs are the same text in both runs (items matched by id);
- the guidance strength each run chose (its working point), for the rows that have one.

The last line sums it up::

    bf16 against fp32: F of N figures inside fp32's 95% interval (R rows); outputs identical:
    A of B (S%); working points the same in C of D guided rows

The exit status is 1 when a figure lies outside its fp32 interval, 2 when the files cannot be
compared (not the same rows, or not one run in each dtype)::

    python benchmarks/dtype_figures.py FP32_DIR BF16_DIR [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tabulate import tabulate

from pytest_prefalign.runs import records
from pytest_prefalign.runs.records import CaseResult, RunFile

FIGURES = (("rm_acc", "RM acc"), ("policy_acc", "policy acc"), ("rouge1", "ROUGE-1"))
TOLERANCE = 1e-9  # a bound equal to the value, up to the run file's rounding, is inside


@dataclass(frozen=True)
class Figure:
    """One figure of one row: fp32's value and 95% interval, bf16's value."""

    name: str
    fp32: float
    low: float
    high: float
    bf16: float

    @property
    def inside(self) -> bool:
        """False where bf16's run lacks the figure (NaN) as where it lies outside."""
        return self.low - TOLERANCE <= self.bf16 <= self.high + TOLERANCE


@dataclass(frozen=True)
class Row:
    """One (suite, method, size) in both runs."""

    suite: str
    method: str
    size: str
    figures: tuple[Figure, ...]
    identical: int  # outputs that are the same text in both runs
    outputs: int  # items both runs generated for
    unmatched: int  # items one run generated for and the other did not
    w_fp32: float | None
    w_bf16: float | None

    @property
    def guided(self) -> bool:
        return self.w_fp32 is not None or self.w_bf16 is not None


def read(path: Path) -> RunFile:
    """The run file at ``path``, or the cold run of a ``bench_main_job.py --keep`` folder."""
    return records.read(path / "cold.json" if path.is_dir() else path)


def dtype(run: RunFile, where: Path) -> str:
    """The one dtype every result of ``run`` was made in (``ValueError`` otherwise)."""
    found = {r.environment.dtype for r in run.results}
    if len(found) != 1:
        raise ValueError(f"{where}: results made in {sorted(map(str, found))}, not one dtype")
    return str(found.pop())


def strength(result: CaseResult) -> float | None:
    guidance = result.guidance
    if guidance is None or guidance.strength is None:
        return None
    return guidance.strength.value


def figures(fp32: CaseResult, bf16: CaseResult) -> tuple[Figure, ...]:
    """The figures fp32's result has with an interval (RM accuracy only where the row has a
    reward); one that bf16's result lacks is NaN there, and counts as outside."""
    out = []
    for name, _ in FIGURES:
        value, other = fp32.metrics.get(name), bf16.metrics.get(name)
        interval = fp32.ci.get(name)
        if value is None or not interval:
            continue
        out.append(
            Figure(name, value, interval[0], interval[1], math.nan if other is None else other)
        )
    return tuple(out)


def compare(fp32: RunFile, bf16: RunFile) -> list[Row]:
    """Every row of ``fp32`` with its ``bf16`` counterpart (``ValueError`` when the two runs
    do not have the same rows)."""
    keys32 = [r.key for r in fp32.results]
    keys16 = {r.key for r in bf16.results}
    if set(keys32) != keys16:
        only = sorted(map(str, set(keys32) ^ keys16))
        raise ValueError(f"the runs do not have the same rows: {', '.join(only)} in one only")
    rows = []
    for result in fp32.results:
        other = bf16.result(result.key)
        assert other is not None
        outputs16 = {i.item_id: i.output for i in other.items}
        shared = [i for i in result.items if i.item_id in outputs16]
        unmatched = len(result.items) + len(outputs16) - 2 * len(shared)
        rows.append(
            Row(
                result.suite,
                result.method,
                result.size,
                figures(result, other),
                sum(i.output == outputs16[i.item_id] for i in shared),
                len(shared),
                unmatched,
                strength(result),
                strength(other),
            )
        )
    return rows


def cell(figure: Figure | None) -> str:
    if figure is None:
        return "-"
    if math.isnan(figure.bf16):
        return f"{figure.fp32:.3f} [{figure.low:.3f}, {figure.high:.3f}] -> missing"
    mark = "" if figure.inside else "  OUTSIDE"
    return f"{figure.fp32:.3f} [{figure.low:.3f}, {figure.high:.3f}] -> {figure.bf16:.3f}{mark}"


def table(rows: Sequence[Row]) -> str:
    body = []
    for row in rows:
        by_name = {f.name: f for f in row.figures}
        w = "-" if not row.guided else f"{_strength(row.w_fp32)} -> {_strength(row.w_bf16)}"
        body.append(
            [
                f"{row.suite} · {row.size}",
                row.method,
                *(cell(by_name.get(name)) for name, _ in FIGURES),
                f"{row.identical}/{row.outputs}" if row.outputs else "-",
                w,
            ]
        )
    heads = ["suite · size", "method", *(f"{label}: fp32 [95%] -> bf16" for _, label in FIGURES)]
    return tabulate(body, headers=[*heads, "same outputs", "w: fp32 -> bf16"])


def _strength(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def summary(rows: Sequence[Row]) -> str:
    every = [f for row in rows for f in row.figures]
    inside = sum(f.inside for f in every)
    same = sum(r.identical for r in rows)
    outputs = sum(r.outputs for r in rows)
    guided = [r for r in rows if r.guided]
    points = sum(r.w_fp32 == r.w_bf16 for r in guided)
    share = f"{same / outputs:.0%}" if outputs else "-"
    unmatched = sum(r.unmatched for r in rows)
    return (
        f"bf16 against fp32: {inside} of {len(every)} figures inside fp32's 95% interval "
        f"({len(rows)} rows); outputs identical: {same} of {outputs} ({share}); working points "
        f"the same in {points} of {len(guided)} guided rows"
        + (f"; {unmatched} items in one run only" if unmatched else "")
    )


def as_json(rows: Sequence[Row]) -> list[dict[str, Any]]:
    return [
        {
            "suite": r.suite,
            "method": r.method,
            "size": r.size,
            "figures": [
                {**vars(f), "bf16": None if math.isnan(f.bf16) else f.bf16, "inside": f.inside}
                for f in r.figures
            ],
            "identical": r.identical,
            "outputs": r.outputs,
            "unmatched": r.unmatched,
            "w": {"float32": r.w_fp32, "bfloat16": r.w_bf16},
        }
        for r in rows
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("fp32", type=Path, help="the fp32 run file (or bench --keep folder)")
    parser.add_argument("bf16", type=Path, help="the bf16 run file (or bench --keep folder)")
    parser.add_argument("--json", type=Path, help="write the rows here too")
    args = parser.parse_args(argv)
    try:
        fp32, bf16 = read(args.fp32), read(args.bf16)
        dtypes = (dtype(fp32, args.fp32), dtype(bf16, args.bf16))
        if dtypes != ("float32", "bfloat16"):
            raise ValueError(f"expected a float32 run then a bfloat16 run, got {dtypes}")
        rows = compare(fp32, bf16)
    except (records.RunFileError, ValueError) as exc:
        print(f"dtype_figures: {exc}", file=sys.stderr)
        return 2
    print(table(rows))
    print()
    print(summary(rows))
    if args.json is not None:
        args.json.write_text(json.dumps(as_json(rows), indent=1) + "\n")
    return 0 if all(f.inside for r in rows for f in r.figures) else 1


if __name__ == "__main__":
    sys.exit(main())
