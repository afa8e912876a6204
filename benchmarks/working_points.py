"""What each row of a run writes: fluency, answers, ROUGE-1 and win over base, and the outputs
themselves for the same few items, from run files (one or more: before and after a change).

For every generating row of every (suite, size) of each run file, computed here the same way
for every run (older run files included, which do not carry the figures themselves):

- fluency: the base model's mean negative log-likelihood per token of the row's outputs given
  the plain task prompt (``evaluation/fluency.py``), base's row the reference;
- not an answer: the share of outputs that break a rule of ``analysis/answers.py``, and which;
- ROUGE-1 and the independent judge's win rate over base, as the run file has them;
- the guidance strength the row ran at (the run file's ``guidance``), where it has one.

Then the same ``--items`` items (the first item of each user in turn) with their reference and
every row's output, so that a reader sees what a figure stands for::

    python benchmarks/working_points.py .prefalign/runs/run-0001.json [more runs] \\
        [--items 5] [--data ../shared/data] [--json out.json]

The suite's items (their prompts and inputs, which run files do not keep) are read again from
the data with the run's own suite options and user count; the model is the size's, loaded as a
run loads it (``prefalign_models`` of the project's ini is not read: the embedded sizes).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run files (JSON)")
    parser.add_argument("--items", type=int, default=5, help="items whose outputs are shown")
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--json", type=Path, help="write the figures and outputs here")
    args = parser.parse_args()
    found = [examine(path, args.data, args.items) for path in args.runs]
    for report in found:
        print(render(report))
    if args.json:
        args.json.write_text(json.dumps(found, indent=1, ensure_ascii=False) + "\n")


def examine(path: Path, data_dir: Path, shown: int) -> dict[str, Any]:
    """The figures and the shown outputs of each (suite, size) of one run file."""
    from pytest_prefalign.runs.records import read

    run = read(path)
    groups: dict[tuple[str, str], list[Any]] = {}
    for result in run.results:
        if result.items:
            groups.setdefault((result.suite, result.size), []).append(result)
    limit = int(run.config.get("limit") or 0) or None
    return {
        "run": str(path),
        "commit": run.commit,
        "groups": [
            examine_group(suite, size, rows, data_dir, limit, shown)
            for (suite, size), rows in sorted(groups.items())
        ],
    }


def examine_group(
    suite: str, size: str, rows: list[Any], data_dir: Path, limit: int | None, shown: int
) -> dict[str, Any]:
    from pytest_prefalign.analysis.answers import not_an_answer
    from pytest_prefalign.evaluation.fluency import fluency

    items = {it.item_id: it for it in load_items(suite, rows[0], data_dir, limit)}
    lm = load_model(size)
    figures = []
    for row in sorted(rows, key=lambda r: r.method):
        records = [r for r in row.items if r.item_id in items]
        if len(records) < len(row.items):
            missing = len(row.items) - len(records)
            print(f"{row.method}: {missing} items not in the data read again", file=sys.stderr)
        prompts = [items[r.item_id].prompt for r in records]
        outputs = [r.output for r in records]
        nll = fluency(lm, prompts, outputs, 16)
        rules = [
            not_an_answer(r.output, input=items[r.item_id].input, prompt=p)
            for r, p in zip(records, prompts, strict=True)
        ]
        broken = Counter(rule for rule in rules if rule is not None)
        strength = row.guidance.strength if row.guidance else None
        figures.append(
            {
                "method": row.method,
                "n": len(records),
                "fluency": float(sum(nll) / len(nll)),
                "not_answer": sum(broken.values()) / len(records),
                "rules": dict(sorted(broken.items())),
                "rouge1": row.metrics.get("rouge1"),
                "win_independent": row.metrics.get("win_independent"),
                "strength": (
                    f"{strength.option}={strength.value:g} ({strength.how}"
                    f"{', none passed' if strength.fallback else ''})"
                    if strength
                    else ""
                ),
                "outputs": {r.item_id: r.output for r in records},
            }
        )
    first = sorted({r.item_id: r.user for r in rows[0].items}.items(), key=lambda kv: kv[0])
    picked: list[str] = []
    for user in sorted({u for _, u in first}):
        own = [i for i, u in first if u == user]
        if own and len(picked) < shown:
            picked.append(own[0])
    return {
        "suite": suite,
        "size": size,
        "rows": figures,
        "shown": [
            {
                "item_id": i,
                "reference": items[i].reference,
                "outputs": {f["method"]: f["outputs"].get(i) for f in figures},
            }
            for i in picked
        ],
    }


def load_items(suite: str, row: Any, data_dir: Path, limit: int | None) -> list[Any]:
    """The suite's items, read again with the run's suite options and user count."""
    import pytest

    from pytest_prefalign import hookspec, registry

    manager = pytest.PytestPluginManager()
    manager.add_hookspecs(hookspec)
    found = registry.load(manager).suite(suite)
    options = row.data.provenance.options or {}
    data = found.load(data_dir / found.source, limit=limit, options=dict(options))
    return list(data.items)


def load_model(size: str) -> Any:
    from pytest_prefalign.runtime.models import load_lm
    from pytest_prefalign.runtime.sources import DEFAULT_MODELS, ModelSpec

    return load_lm(ModelSpec(size, DEFAULT_MODELS[size]), device="cpu")


def render(report: dict[str, Any]) -> str:
    lines = [f"\n{report['run']} (commit {report['commit']})"]
    for group in report["groups"]:
        lines.append(f"\n{group['suite']} · {group['size']}")
        table = [
            [
                f["method"],
                f["strength"],
                f"{f['fluency']:.2f}",
                f"{f['not_answer']:.2f}",
                ", ".join(f"{k} {v}" for k, v in f["rules"].items()),
                "-" if f["rouge1"] is None else f"{f['rouge1']:.3f}",
                "-" if f["win_independent"] is None else f"{f['win_independent']:.2f}",
            ]
            for f in group["rows"]
        ]
        headers = ["method", "strength", "NLL/tok", "not ans", "rules", "ROUGE-1", "win"]
        lines.append(tabulate(table, headers=headers))
        for shown in group["shown"]:
            lines.append(f"\n  {shown['item_id']}: reference: {shown['reference']}")
            for method, output in shown["outputs"].items():
                lines.append(f"    {method:>22}: {output}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
