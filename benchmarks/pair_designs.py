"""How the design of Pref-LaMP's pairs decides what RM and policy accuracy can show.

Every design of the suite side by side, on the first ``--users`` authors after ``--offset`` in
the data's ``authors.json`` (offset 0: the README main job's authors; a larger offset: authors
the main job and the findings never read, a stand-in for data the designs were not tuned on):

- RM accuracy of the five Bradley-Terry-style reward methods on the test pairs (macro), and
  the ceiling share: the largest share of users at RM accuracy 1.0 over the methods;
- the personal gap: each user's RM accuracy under the best personal method minus under
  ``global_bt`` (which knows nobody), its mean over users with a 95% interval (users resampled);
- base policy accuracy (the default sum of token log-likelihoods, and the mean), its interval:
  a design in which it is far from 0.5 is decided by the base model, not by any reward;
- how many pairs' sides differ in length beyond the design's slack, and the time to build the
  pairs (from an empty cache, as the first run pays it).

    python benchmarks/pair_designs.py [--users 8] [--offset 0] [--data ../shared/data]

``--comparisons`` measures instead how much a user tells: the style design's pairings of the
writer's titles (one pair per test paper, or every length-matched pair of its candidates, at
3 or 6 samples per prompt, or every paper a test item once by cross-fitting over 2 folds, a run
per fold, pooled per user), each run through the real plugin (``pytest --prefalign``, every
default method at its working point, one cache shared by the pairings), and for every pair of
methods the per-user standard error of their paired difference in RM accuracy and in policy
accuracy (the standard deviation over users of the per-user difference, over the square root of
the users), against the one-pair design's; with the writer's cost of each (its prompts and
titles, and the seconds of the data phase where it wrote).

    python benchmarks/pair_designs.py --comparisons [--users 8] [--offset 100] [--scoring-only]

``--decompose RUN...`` splits, in kept run files, the spread over users of the methods'
per-user differences into the noise of each user's own pairs and the real spread between users
(which no design of more pairs per user narrows):

    python benchmarks/pair_designs.py --decompose benchmarks/findings-runs/pref_lamp-135m.json.gz

``--scoring-only`` runs the guidance at its fixed constants and writes one token per output: RM
and policy accuracy are teacher-forced on the pairs, so they are those of a full run at those
constants, at a fraction of its cost (ROUGE and the win rates are not read).

Real models (the embedded SmolLM2-135M-Instruct evaluates and trains the reward methods; the
writer designs need Gemma-3-270M installed), real data; the figures go into docs/suites.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402

DESIGNS = {  # label -> suite options
    "generated (the 135M's own title)": {"negatives": "generated"},
    "other_author (another abstract's title)": {"negatives": "other_author"},
    "written (real title vs the writer's)": {"negatives": "written"},
    "style (the writer's, own vs others' examples)": {"negatives": "style"},
}
PAIRINGS = {  # label -> suite options (the style design)
    "nearest": {"writer_pairs": "nearest"},
    "matched": {"writer_pairs": "matched"},
    "matched, 6 samples": {"writer_pairs": "matched", "writer_samples": "6"},
    # every paper a test item once: a run per fold, the folds' pairs pooled per user
    "nearest, 2 folds": {"writer_pairs": "nearest", "folds": "2"},
    # each test paper against 6 people's titles, in one run (the time split; the rows of its
    # first 1 to 5 rivals come with it)
    "nearest, 6 rivals": {"writer_pairs": "nearest", "writer_rivals": "6"},
    # and each test paper against 3 people's titles (its first rivals' rows come with it)
    "nearest, 2 folds, 3 rivals": {"writer_pairs": "nearest", "folds": "2", "writer_rivals": "3"},
}
PERSONAL = ("per_user_bt", "lore", "vpl", "pal")
METHODS = ("global_bt", *PERSONAL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument("--offset", type=int, default=0, help="authors skipped first")
    parser.add_argument(
        "--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data")
    )
    parser.add_argument("--designs", nargs="*", default=list(DESIGNS), choices=list(DESIGNS))
    parser.add_argument("--cache", help="a cache folder kept between runs (default: a new one)")
    parser.add_argument("--json", help="write the figures to this file as well")
    parser.add_argument(
        "--comparisons",
        nargs="*",
        choices=list(PAIRINGS),
        help="measure the pairings' standard errors instead (default: all of them)",
    )
    parser.add_argument(
        "--scoring-only",
        action="store_true",
        help="with --comparisons: the guidance at its fixed constants and one new token per "
        "output (the pairs' figures without the generations' cost)",
    )
    parser.add_argument(
        "--decompose",
        nargs="+",
        metavar="RUN",
        help="split the spread over users of the methods' per-user differences in kept run "
        "files (.json or .json.gz) into the per-user noise and the spread between users",
    )
    parser.add_argument(
        "--tables",
        nargs="+",
        metavar="JSON",
        help="print the tables of kept --comparisons --json files (.json or .json.gz) again "
        "(with --data and --offset as they were run, for the writer's prompts where a file "
        "lacks them)",
    )
    args = parser.parse_args()
    if args.tables:
        from pair_pairings import tables  # this folder is the script's own

        tables(args.tables, PAIRINGS, args)
        return
    if args.decompose:
        from pair_pairings import decompose_runs  # this folder is the script's own

        decompose_runs(args.decompose)
        return
    if args.comparisons is not None:
        from pair_pairings import measure_pairings  # this folder is the script's own

        measure_pairings(args, {k: PAIRINGS[k] for k in args.comparisons or PAIRINGS})
        return
    from tabulate import tabulate

    from pytest_prefalign import cache

    with tempfile.TemporaryDirectory() as tmp:
        data_dir = authors_slice(Path(args.data), Path(tmp), args.offset, args.users)
        folder = Path(args.cache) if args.cache else Path(tmp) / "cache"
        with cache.using(cache.Disk(folder)):
            rows = [measure(label, DESIGNS[label], data_dir, folder) for label in args.designs]
    print(
        f"authors {args.offset + 1}-{args.offset + args.users} of {args.data}/acl-anthology"
        f"/authors.json"
    )
    print(tabulate([table_row(r) for r in rows], headers=HEADERS, disable_numparse=True))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")


HEADERS = [
    "design",
    "users",
    "train / test pairs",
    "RM acc (" + " ".join(METHODS) + ")",
    "ceiling share",
    "personal gap [95%]",
    "base policy acc, sum [95%]",
    "(mean)",
    "length unmatched",
    "build s",
]


def authors_slice(data: Path, tmp: Path, offset: int, users: int) -> Path:
    """A data folder whose ``authors.json`` lists authors ``offset`` to ``offset + users`` of
    ``data``'s (the papers are the same files)."""
    source = data / "acl-anthology"
    target = tmp / "data" / "acl-anthology"
    target.mkdir(parents=True)
    authors = json.loads((source / "authors.json").read_text(encoding="utf-8"))
    chosen = authors[offset : offset + users]
    if len(chosen) < users:
        sys.exit(f"{source}/authors.json has {len(authors)} authors, fewer than asked")
    (target / "authors.json").write_text(json.dumps(chosen), encoding="utf-8")
    for path in source.glob("papers-*.jsonl"):
        shutil.copyfile(path, target / path.name)
    return target.parent


def measure(label: str, options: dict[str, str], data_dir: Path, folder: Path) -> dict[str, Any]:
    from prefalign_suites.pref_lamp.suite import PrefLamp
    from pytest_prefalign.runtime.models import ModelSpec, load_lm

    lm = load_lm(ModelSpec("135m", "embedded:smollm2-135m"), device="cpu")
    suite = PrefLamp()
    start = time.perf_counter()
    data = suite.load(data_dir, limit=None, options=options)
    if not data.train_pairs:
        source = suite.writer(data)
        model = load_lm(ModelSpec("writer", source), device="cpu") if source else lm
        suite.build_pairs(data, model, folder / "pairs")
    build_s = time.perf_counter() - start
    print(f"{label}: pairs built in {build_s:.0f} s", file=sys.stderr, flush=True)
    figures = {
        "design": label,
        "options": options,
        "users": len({p.user for p in data.test_pairs}),
        "train_pairs": len(data.train_pairs),
        "test_pairs": len(data.test_pairs),
        "build_s": round(build_s, 1),
        "length_unmatched": unmatched(data),
        "writer": data.provenance.get("writer"),
    }
    figures.update(rm_figures(lm, data, folder / label.split()[0]))
    figures.update(base_figures(lm, data))
    return figures


def rm_figures(lm: Any, data: Any, folder: Path) -> dict[str, Any]:
    """Each reward method's RM accuracy, the ceiling share and the personal gap."""
    from prefalign_methods.rewards import global_bt, lore, pal, per_user_bt, vpl
    from pytest_prefalign.analysis.metrics import accuracy, pair_outcomes
    from pytest_prefalign.analysis.stats import paired_bootstrap
    from pytest_prefalign.api import Batch

    classes = {
        "global_bt": global_bt.GlobalBT,
        "per_user_bt": per_user_bt.PerUserBT,
        "lore": lore.LoRe,
        "vpl": vpl.VPL,
        "pal": pal.PAL,
    }
    test = data.test_pairs
    users = [p.user for p in test]
    per_user: dict[str, dict[str, float]] = {}
    macro: dict[str, float] = {}
    for name in METHODS:
        method = classes[name]()
        method.fit(lm, data.train_pairs, folder / name)
        both = Batch.of_pairs(test, "chosen") + Batch.of_pairs(test, "rejected")
        scores = method.score(lm, both)
        acc = accuracy(pair_outcomes(scores[: len(test)], scores[len(test) :]), users)
        per_user[name], macro[name] = acc.per_user, acc.macro
    best = max(PERSONAL, key=lambda m: macro[m])
    gap, interval, _ = paired_bootstrap(per_user["global_bt"], per_user[best])
    ceiling = max(np.mean([v == 1.0 for v in per_user[m].values()]) for m in METHODS)
    return {
        "rm_acc": macro,
        "ceiling_share": float(ceiling),
        "best_personal": best,
        "personal_gap": gap,
        "personal_gap_ci": list(interval),
    }


def base_figures(lm: Any, data: Any) -> dict[str, Any]:
    """Base policy accuracy by the sum (the default) and the mean of token log-likelihoods."""
    from prefalign_methods.decoders.base import reduce_logprobs
    from pytest_prefalign.analysis.metrics import accuracy, bootstrap_ci, pair_outcomes

    test = data.test_pairs
    users = [p.user for p in test]
    prompts = [p.prompt for p in test]
    chosen = lm.response_logprobs(prompts, [p.chosen for p in test])
    rejected = lm.response_logprobs(prompts, [p.rejected for p in test])
    found: dict[str, Any] = {}
    for how in ("sum", "mean"):
        outcomes = pair_outcomes(reduce_logprobs(chosen, how), reduce_logprobs(rejected, how))
        found[f"base_{how}"] = accuracy(outcomes, users).macro
        found[f"base_{how}_ci"] = list(bootstrap_ci(outcomes, users))
    return found


def unmatched(data: Any) -> str:
    """Pairs whose sides differ in length beyond the design's slack, of all pairs."""
    pairs = [*data.train_pairs, *data.test_pairs]
    counted = data.provenance.get("length_unmatched")
    if counted is None:
        slack = data.provenance.get("length_slack")
        if not isinstance(slack, int):
            return "no rule"
        counted = sum(abs(len(p.chosen.split()) - len(p.rejected.split())) > slack for p in pairs)
    return f"{counted} / {len(pairs)}"


def table_row(r: dict[str, Any]) -> list[str]:
    def ci(pair: list[float]) -> str:
        return f"[{pair[0]:.2f}, {pair[1]:.2f}]"

    return [
        r["design"],
        str(r["users"]),
        f"{r['train_pairs']} / {r['test_pairs']}",
        " ".join(f"{r['rm_acc'][m]:.2f}" for m in METHODS),
        f"{r['ceiling_share']:.2f}",
        f"{r['personal_gap']:+.2f} {ci(r['personal_gap_ci'])} ({r['best_personal']})",
        f"{r['base_sum']:.2f} {ci(r['base_sum_ci'])}",
        f"{r['base_mean']:.2f}",
        r["length_unmatched"],
        f"{r['build_s']:.0f}",
    ]


if __name__ == "__main__":
    main()
