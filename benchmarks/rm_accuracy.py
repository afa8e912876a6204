"""RM accuracy of reward methods on a suite's preference pairs, without generating anything:
each method fitted on the suite's training pairs (after the users' profiles, where it declares
``needs_profiles``) and its rewards compared on the test pairs,
the figure the leaderboard's ``RM acc`` column shows (macro: the mean over users of each
user's share of pairs ranked right, a tie counting one half) with its 95% interval (users
resampled), each method's paired difference from the first one named, and the seconds each
fit took.

    python benchmarks/rm_accuracy.py [--suite pref_lamp] [--limit 40] [--size 135m]
        [--methods global_bt,per_user_bt,...] [--json FILE]
    python benchmarks/rm_accuracy.py --folders benchmarks/findings-folds/pref_lamp_fold0 \
        benchmarks/findings-folds/pref_lamp_fold1     # the folds' test pairs pooled

A run of the suite computes the same figure with every row's generation around it; this script
is for the reward methods alone, at more users than a generating run can afford on a CPU. The
suite's options are its ``suite.toml``'s (or those of each folder ``--folders`` names: the
folds of a cross-fitted design, each fitted on its own training pairs, their test pairs pooled
by user as ``prefalign pool`` pools them), the data the workspace's (``prefalign_data``), the
model the embedded size named; features and trained parameters go to the user cache, so a
second run only scores.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_prefalign import storage  # noqa: E402
from pytest_prefalign.analysis import metrics  # noqa: E402
from pytest_prefalign.api import Batch, declared  # noqa: E402
from pytest_prefalign.registry import Registry, add_builtins  # noqa: E402
from pytest_prefalign.runtime.sources import DEFAULT_MODELS, ModelSpec  # noqa: E402

DATA = ROOT.parent / "shared" / "data"  # the ini value prefalign_data, from the root
DEFAULT_METHODS = (
    "global_bt,per_user_bt,lore,vpl,pal,pref,hier_bt,history_bt,"
    "profile_bm25,profile_overlap,profile_minilm,global_bt_minilm,per_user_bt_minilm"
)


def suite_options(folder: Path) -> dict[str, str]:
    """The ``[options]`` of a suite folder's ``suite.toml``, as the run reads them (strings)."""
    table = tomllib.loads((folder / "suite.toml").read_text())
    return {k: str(v) for k, v in table.get("options", {}).items()}


@dataclass
class Fold:
    """One suite folder's test pairs scored by every method: the pairs' users, each method's
    pair outcomes (1 right, 0 wrong, 0.5 a tie) and its fit's seconds."""

    users: list[str]
    outcomes: dict[str, np.ndarray] = field(default_factory=dict)
    fit_s: dict[str, float] = field(default_factory=dict)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="pref_lamp")
    parser.add_argument(
        "--folders",
        nargs="+",
        type=Path,
        help="suite folders (their suite.toml's options) whose test pairs are pooled, e.g. the "
        "folds of a cross-fitted design (default: suites/SUITE)",
    )
    parser.add_argument("--limit", type=int, default=40, help="users (the run's --prefalign-limit)")
    parser.add_argument("--size", default="135m")
    parser.add_argument("--methods", default=DEFAULT_METHODS)
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args(argv)

    from pytest_prefalign.runtime.models import load_lm

    registry = Registry()
    add_builtins(registry)
    names = [m.strip() for m in args.methods.split(",") if m.strip()]
    lm = load_lm(ModelSpec(args.size, DEFAULT_MODELS[args.size]), device="cpu")
    folders = args.folders or [ROOT / "suites" / args.suite]
    folds = [score_fold(registry, lm, args, folder, names) for folder in folders]
    users = [u for fold in folds for u in fold.users]
    outcomes = {name: np.concatenate([fold.outcomes[name] for fold in folds]) for name in names}
    rows = []
    for name in names:
        row = figures(name, names[0], outcomes, users)
        row["fit_s"] = round(sum(fold.fit_s[name] for fold in folds), 1)
        row["trained"] = declared(registry.rewards[name].obj(), "trained") is not False
        rows.append(row)
        print(format_row(row, names[0]), flush=True)
    print(extremes(rows, outcomes, users), flush=True)
    if args.json:
        doc = {
            "suite": args.suite,
            "folders": [str(f) for f in folders],
            "limit": args.limit,
            "rows": rows,
        }
        args.json.write_text(json.dumps(doc))
    return 0


def extremes(rows: list[dict[str, Any]], outcomes: dict[str, np.ndarray], users: list[str]) -> str:
    """The range of RM accuracy over the methods, and its extremes' paired difference (the
    mean over users of each user's difference) with its 95% interval (users resampled)."""
    best = max(rows, key=lambda r: r["rm_acc"])
    worst = min(rows, key=lambda r: r["rm_acc"])
    high, low = best["method"], worst["method"]
    diff = outcomes[high] - outcomes[low]
    per_user = metrics.per_user_mean(diff, users)
    mean = sum(per_user.values()) / len(per_user)
    d_low, d_high = metrics.bootstrap_ci(diff, users, "macro")
    return (
        f"range over the methods {best['rm_acc'] - worst['rm_acc']:.3f}: {high} minus {low} "
        f"{mean:+.3f} "
        f"[{d_low:+.3f}, {d_high:+.3f}]"
    )


def score_fold(
    registry: Registry, lm: Any, args: argparse.Namespace, folder: Path, names: list[str]
) -> Fold:
    """Every method fitted on one suite folder's training pairs and scoring its test pairs."""
    import torch

    suite = registry.suites[args.suite].obj
    data = suite.load(DATA, limit=args.limit, options=suite_options(folder))
    test = data.test_pairs
    fold = Fold(users=[p.user for p in test])
    both_sides = [p.chosen for p in test] + [p.rejected for p in test]
    batch = Batch(fold.users * 2, [p.prompt for p in test] * 2, both_sides)
    print(
        f"{args.suite} ({folder.name}) · {args.size}: {len(set(fold.users))} users, "
        f"{len(data.train_pairs)} training pairs, {len(test)} test pairs; torch threads "
        f"{torch.get_num_threads()}",
        flush=True,
    )
    cache_dir = storage.cache_dir("rm_accuracy")
    for name in names:
        method = registry.rewards[name].obj()
        start = time.perf_counter()
        if declared(method, "needs_profiles"):  # as the evaluation hands them (prepare.py)
            method.use_profiles(data.profiles)
        method.fit(lm, data.train_pairs, cache_dir)
        fold.fit_s[name] = time.perf_counter() - start
        scores = method.score(lm, batch)
        fold.outcomes[name] = metrics.pair_outcomes(scores[: len(test)], scores[len(test) :])
    return fold


def figures(
    name: str, first: str, outcomes: dict[str, np.ndarray], users: list[str]
) -> dict[str, Any]:
    """A method's RM accuracy (macro, users resampled for its interval), micro, and its paired
    difference from the first method named."""
    outcome = outcomes[name]
    acc = metrics.accuracy(outcome, users)
    low, high = metrics.bootstrap_ci(outcome, users, "macro")
    row: dict[str, Any] = {
        "method": name,
        "rm_acc": acc.macro,
        "ci": [low, high],
        "rm_acc_micro": acc.micro,
    }
    if name != first:
        diff = outcome - outcomes[first]
        per_user = metrics.per_user_mean(diff, users)
        row["minus_first"] = sum(per_user.values()) / len(per_user)
        row["minus_first_ci"] = list(metrics.bootstrap_ci(diff, users, "macro"))
    return row


def format_row(row: dict, first: str) -> str:
    low, high = row["ci"]
    text = (
        f"{row['method']:<12} RM acc {row['rm_acc']:.3f} [{low:.3f}, {high:.3f}]  "
        f"micro {row['rm_acc_micro']:.3f}  fit {row['fit_s']:.1f} s"
        f"{'' if row['trained'] else ' (loaded)'}"
    )
    if "minus_first" in row:
        d_low, d_high = row["minus_first_ci"]
        text += f"  minus {first} {row['minus_first']:+.3f} [{d_low:+.3f}, {d_high:+.3f}]"
    return text


if __name__ == "__main__":
    sys.exit(main())
