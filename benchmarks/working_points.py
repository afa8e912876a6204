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

**The degenerate margin** (``--margin``): what it is set from (docs/metrics.md, "Fluency and
answers"). For each run file given (``benchmarks/findings-runs/*.json.gz`` by default), each
(suite, size) and each generating row: the same fluency (the mean over items as the catalogue
pools it) and its gap to base's row, the share of outputs that are not an answer with its
rules and its gap to base's, and the users' own text read by the same scorer (what fluent text
of the task costs); then the run's analysis computed again with the two figures in its family,
each row's ``crisis.degenerate`` entry (the one-sided test over users, its p-values, whether it
is flagged)::

    python benchmarks/working_points.py --margin [RUN.json.gz ...] [--data ../shared/data] \\
        [--methods base,...] [--json OUT] [--figures OUT]
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import os
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_prefalign.runs.entries import DegenerateEntry

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
from tabulate import tabulate  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
KEPT = ROOT / "benchmarks" / "findings-runs"
MARGIN_SUITES = ("pref_lamp", "polis")  # the suites --margin reads
REFERENCE = "(the users' own text)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "runs", nargs="*", type=Path, help="run files (JSON; with --margin, default the kept ones)"
    )
    parser.add_argument("--items", type=int, default=5, help="items whose outputs are shown")
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--json", type=Path, help="write the figures (and outputs) here")
    parser.add_argument(
        "--margin", action="store_true", help="the degenerate margin's tables (gaps to base)"
    )
    parser.add_argument("--methods", help="with --margin: only these rows (comma-separated)")
    parser.add_argument("--figures", type=Path, help="with --margin: read this --json, no model")
    args = parser.parse_args()
    if args.margin:
        margin(args.runs or sorted(KEPT.glob("*.gz")), args)
        return
    if not args.runs:
        parser.error("give run files (or --margin, which reads the kept findings runs)")
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
    limit = (run.config.limit if run.config else None) or None
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

    options = rows[0].data.provenance.options or {}
    items = {it.item_id: it for it in load_items(suite, options, data_dir, limit)}
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


def load_items(suite: str, options: dict[str, str], data_dir: Path, limit: int | None) -> list[Any]:
    """The suite's items, read again with the run's suite ``options`` and user count."""
    import pytest

    from pytest_prefalign import hookspec, registry

    manager = pytest.PytestPluginManager()
    manager.add_hookspecs(hookspec)
    found = registry.load(manager).suite(suite)
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


# --------------------------------------------------------------------------------------------
# The degenerate margin (--margin)
# --------------------------------------------------------------------------------------------


def margin(runs: list[Path], args: argparse.Namespace) -> None:
    """The margin's two tables for ``runs``: each row's figures and gaps to base, and the
    degenerate entries of each run's analysis computed again with them."""
    only = set(args.methods.split(",")) | {"base"} if args.methods else None
    if args.figures:
        rows = json.loads(args.figures.read_text())
    else:
        rows = []
        for path in runs:
            rows += measure(Path(path), args.data, only)
    print(tabulate([table_row(r) for r in rows], headers=HEADERS, disable_numparse=True))
    print()
    found = [e for path in runs for e in verdicts(Path(path), rows)]
    print(tabulate([verdict_row(e) for e in found], headers=VERDICTS, disable_numparse=True))
    if args.json and not args.figures:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


VERDICTS = ["run", "method", "NLL gap", "not ans gap", "users", "p", "p_holm", "flagged"]


def verdict_row(e: DegenerateEntry) -> list[Any]:
    def num(value: float | None) -> str:
        return "-" if value is None else f"{value:.3g}"

    return [
        f"{e.suite}·{e.size}",
        e.method,
        f"{e.fluency_gap:+.2f}",
        f"{e.not_answer_gap:+.2f}",
        e.n_users,
        num(e.p_value),
        num(e.p_holm),
        "DEGENERATE" if e.flagged else "",
    ]


def verdicts(path: Path, rows: list[dict[str, Any]]) -> tuple[DegenerateEntry, ...]:
    """The run's analysis computed again with each row's fluency and not-an-answer share
    pooled as the evaluation pools them (``analysis/figures.py``): the ``degenerate`` entries, with
    their p-values adjusted in the run's whole family."""
    from pytest_prefalign.analysis import crisis
    from pytest_prefalign.analysis.figures import figures
    from pytest_prefalign.runs.records import RunFile

    run = RunFile.from_json(read_run(path))
    measured = {(r["suite"], r["size"], r["method"]): r for r in rows if r["run"] == path.name}
    results = []
    for result in run.results:
        row = measured.get((result.suite, result.size, result.method))
        if row is not None:
            measured_items = {
                "fluency": row["fluency_items"],
                "not_answer": [float(rule is not None) for rule in row["not_answer_items"]],
            }
            items = [
                record.with_value("fluency", f).with_value("not_answer", answer)
                for record, f, answer in zip(result.items, *measured_items.values(), strict=True)
            ]
            values, ci, per_user = figures({"item": items})
            result.metrics.update(values)
            result.ci.update(ci)
            result.per_user.update(per_user)
            if [r.user for r in result.items] != row["users"]:
                sys.exit(f"{path.name} {result.method}: the figures are not of the run's items")
            result = dataclasses.replace(result, items=items)
        results.append(result)
    _, found = crisis.analyse(results)
    return found.degenerate


HEADERS = ["run", "method", "items", "NLL/tok", "gap", "not ans", "gap", "rules", "ROUGE-1"]


def table_row(r: dict[str, Any]) -> list[Any]:
    rules = ", ".join(f"{k} {v}" for k, v in sorted(r["rules"].items()))
    return [
        f"{r['suite']}·{r['size']}",
        r["method"],
        r["items"],
        f"{r['fluency']:.2f}",
        f"{r['fluency_gap']:+.2f}",
        f"{r['not_answer']:.2f}",
        f"{r['not_answer_gap']:+.2f}",
        rules,
        "-" if r["rouge1"] is None else f"{r['rouge1']:.3f}",
    ]


def read_run(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def measure(path: Path, data_dir: Path, only: set[str] | None = None) -> list[dict[str, Any]]:
    """Per (suite, size) and generating row of the run file ``path`` (``only``: those rows and
    base): its fluency, not-an-answer share and their gaps to base's, per item and pooled."""
    from pytest_prefalign.analysis.answers import not_an_answer
    from pytest_prefalign.evaluation.fluency import fluency

    run = read_run(path)
    results = {(r["suite"], r["size"], r["method"]): r for r in run["results"]}
    outputs: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for item in run["items"]:
        outputs[(item["suite"], item["size"], item["method"])].append(item)
    rows = []
    for suite, size in sorted({(s, z) for s, z, _ in outputs}):
        if suite not in MARGIN_SUITES:
            continue
        first = next(r for (s, z, _), r in results.items() if (s, z) == (suite, size))
        options = (first["data"].get("provenance") or {}).get("options") or {}
        loaded = load_items(suite, options, data_dir, run["config"].get("limit"))
        items = {it.item_id: it for it in loaded}
        lm = load_model(size)
        by_method = {}
        methods = [m for s, z, m in outputs if (s, z) == (suite, size)]
        for method in [m for m in methods if only is None or m in only]:
            records = outputs[(suite, size, method)]
            known = [(items[r["item_id"]], r) for r in records if r["item_id"] in items]
            start = time.perf_counter()
            nll = fluency(lm, [it.prompt for it, _ in known], [r["output"] for _, r in known], 16)
            rules = [
                not_an_answer(r["output"], input=it.input, prompt=it.prompt) for it, r in known
            ]
            by_method[method] = (known, nll, rules)
            print(
                f"{path.name} {suite}·{size} {method}: {len(known)} items, "
                f"{time.perf_counter() - start:.0f} s",
                file=sys.stderr,
                flush=True,
            )
        # the users' own text, read by the same scorer: what fluent text of the task costs
        own = [(it, {"output": it.reference}) for it in items.values() if it.reference]
        if own:
            known = [
                (it, r)
                for it, r in own
                if it.item_id in {k.item_id for k, _ in by_method["base"][0]}
            ]
            nll = fluency(lm, [it.prompt for it, _ in known], [r["output"] for _, r in known], 16)
            rules = [
                not_an_answer(r["output"], input=it.input, prompt=it.prompt) for it, r in known
            ]
            by_method[REFERENCE] = (known, nll, rules)
        base_nll = float(np.mean(by_method["base"][1]))
        base_share = float(np.mean([r is not None for r in by_method["base"][2]]))
        for method, (known, nll, rules) in by_method.items():
            share = float(np.mean([r is not None for r in rules]))
            rouge = results.get((suite, size, method), {}).get("metrics", {}).get("rouge1")
            per_user: dict[str, list[float]] = defaultdict(list)
            for (it, _), value in zip(known, nll, strict=True):
                per_user[it.user].append(float(value))
            rows.append(
                {
                    "run": path.name,
                    "suite": suite,
                    "size": size,
                    "method": method,
                    "items": len(known),
                    "fluency": float(np.mean(nll)),
                    "fluency_gap": float(np.mean(nll)) - base_nll,
                    "not_answer": share,
                    "not_answer_gap": share - base_share,
                    "rules": dict(Counter(r for r in rules if r is not None)),
                    "rouge1": rouge,
                    "outputs": [r["output"] for _, r in known[:5]],
                    "fluency_items": [round(float(v), 4) for v in nll],
                    "users": [it.user for it, _ in known],
                    "not_answer_items": [r for r in rules],
                }
            )
    return rows


if __name__ == "__main__":
    main()
