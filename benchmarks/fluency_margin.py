"""Fluency and not-an-answer shares of the stored runs' rows: what the degenerate margin is set
from (docs/metrics.md, "Fluency and answers").

For each run file given (``benchmarks/findings-runs/*.json.gz`` by default), each (suite, size)
and each generating row: the base model's mean negative log-likelihood per token of the row's
outputs given the items' plain prompts (``evaluation/fluency.py``, the mean over items as the
catalogue pools it, and its gap to base's row), the share of outputs that are not an answer
(``analysis/answers.py``) with its rules, and the rows the one-sided test over users would
find above base. The items' prompts and inputs are the suite's own, loaded again with the
options the run stored.

    python benchmarks/fluency_margin.py [RUN.json.gz ...] [--data ../shared/data] [--json OUT]

Real models (the size's embedded model on the CPU), real data.
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

HERE = Path(__file__).resolve().parent
SUITES = {"pref_lamp": "prefalign_suites.pref_lamp.suite:PrefLamp"}
SUITES["polis"] = "prefalign_suites.polis.suite:Polis"
REFERENCE = "(the users' own text)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    stored = sorted(map(str, HERE.glob("findings-runs/*.gz")))
    parser.add_argument("runs", nargs="*", default=stored)
    parser.add_argument("--data", default=str(HERE.parents[1] / "shared" / "data"))
    parser.add_argument("--json", help="write the figures to this file as well")
    parser.add_argument("--methods", help="only these rows (comma-separated; base always)")
    parser.add_argument("--figures", help="read the figures from this --json file, no model")
    args = parser.parse_args()
    only = set(args.methods.split(",")) | {"base"} if args.methods else None
    from tabulate import tabulate

    if args.figures:
        rows = json.loads(Path(args.figures).read_text())
    else:
        rows = []
        for path in args.runs:
            rows += measure(Path(path), Path(args.data), only)
    print(tabulate([table_row(r) for r in rows], headers=HEADERS, disable_numparse=True))
    print()
    found = [e for path in args.runs for e in verdicts(Path(path), rows)]
    print(tabulate([verdict_row(e) for e in found], headers=VERDICTS, disable_numparse=True))
    if args.json and not args.figures:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")


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


def suite_items(name: str, data_dir: Path, limit: int | None, options: dict[str, str]) -> dict:
    import importlib

    module, cls = SUITES[name].split(":")
    suite = getattr(importlib.import_module(module), cls)()
    data = suite.load(data_dir, limit=limit, options=options)
    return {it.item_id: it for it in data.items}


def measure(path: Path, data_dir: Path, only: set[str] | None = None) -> list[dict[str, Any]]:
    from pytest_prefalign.analysis.answers import not_an_answer
    from pytest_prefalign.evaluation.fluency import fluency
    from pytest_prefalign.runtime.models import ModelSpec, load_lm
    from pytest_prefalign.runtime.sources import DEFAULT_MODELS

    run = read_run(path)
    results = {(r["suite"], r["size"], r["method"]): r for r in run["results"]}
    outputs: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for item in run["items"]:
        outputs[(item["suite"], item["size"], item["method"])].append(item)
    rows = []
    for suite, size in sorted({(s, z) for s, z, _ in outputs}):
        if suite not in SUITES:
            continue
        first = next(r for (s, z, _), r in results.items() if (s, z) == (suite, size))
        options = (first["data"].get("provenance") or {}).get("options") or {}
        items = suite_items(suite, data_dir, run["config"].get("limit"), options)
        lm = load_lm(ModelSpec(size, DEFAULT_MODELS[size]), device="cpu")
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
