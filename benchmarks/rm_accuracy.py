"""RM accuracy of reward methods on a suite's preference pairs, without generating anything:
each method fitted on the suite's training pairs (after the users' profiles, where it declares
``needs_profiles``) and its rewards compared on the test pairs,
the figure the leaderboard's ``RM acc`` column shows (macro: the mean over users of each
user's share of pairs ranked right, a tie counting one half) with its 95% interval (users
resampled), each method's paired difference from the first one named, and the seconds each
fit took.

    python benchmarks/rm_accuracy.py [--suite pref_lamp] [--limit 40] [--size 135m]
        [--methods global_bt,per_user_bt,...] [--json FILE]

A run of the suite computes the same figure with every row's generation around it; this script
is for the reward methods alone, at more users than a generating run can afford on a CPU. The
suite's options are its ``suite.toml``'s, the data the workspace's (``prefalign_data``), the
model the embedded size named; features and trained parameters go to the user cache, so a
second run only scores.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import tomllib
from pathlib import Path

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


def suite_options(suite: str) -> dict[str, str]:
    """The ``[options]`` of ``suites/SUITE/suite.toml``, as the run reads them (strings)."""
    table = tomllib.loads((ROOT / "suites" / suite / "suite.toml").read_text())
    return {k: str(v) for k, v in table.get("options", {}).items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="pref_lamp")
    parser.add_argument("--limit", type=int, default=40, help="users (the run's --prefalign-limit)")
    parser.add_argument("--size", default="135m")
    parser.add_argument("--methods", default=DEFAULT_METHODS)
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args(argv)

    import torch

    from pytest_prefalign.runtime.models import load_lm

    registry = Registry()
    add_builtins(registry)
    names = [m.strip() for m in args.methods.split(",") if m.strip()]
    suite = registry.suites[args.suite].obj
    data = suite.load(DATA, limit=args.limit, options=suite_options(args.suite))
    lm = load_lm(ModelSpec(args.size, DEFAULT_MODELS[args.size]), device="cpu")
    test = data.test_pairs
    users = [p.user for p in test]
    both_sides = [p.chosen for p in test] + [p.rejected for p in test]
    batch = Batch(users * 2, [p.prompt for p in test] * 2, both_sides)
    print(
        f"{args.suite} · {args.size}: {len(set(users))} users, {len(data.train_pairs)} training "
        f"pairs, {len(test)} test pairs; torch threads {torch.get_num_threads()}",
        flush=True,
    )
    cache_dir = storage.cache_dir("rm_accuracy")
    outcomes, rows = {}, []
    for name in names:
        method = registry.rewards[name].obj()
        start = time.perf_counter()
        if declared(method, "needs_profiles"):  # as the evaluation hands them (prepare.py)
            method.use_profiles(data.profiles)
        method.fit(lm, data.train_pairs, cache_dir)
        fit_s = time.perf_counter() - start
        scores = method.score(lm, batch)
        outcome = metrics.pair_outcomes(scores[: len(test)], scores[len(test) :])
        outcomes[name] = outcome
        acc = metrics.accuracy(outcome, users)
        low, high = metrics.bootstrap_ci(outcome, users, "macro")
        row = {
            "method": name,
            "rm_acc": acc.macro,
            "ci": [low, high],
            "rm_acc_micro": acc.micro,
            "fit_s": round(fit_s, 1),
            "trained": declared(method, "trained") is not False,
        }
        if name != names[0]:
            diff = outcome - outcomes[names[0]]
            per_user = metrics.per_user_mean(diff, users)
            row["minus_first"] = sum(per_user.values()) / len(per_user)
            row["minus_first_ci"] = list(metrics.bootstrap_ci(diff, users, "macro"))
        rows.append(row)
        print(format_row(row, names[0]), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"suite": args.suite, "limit": args.limit, "rows": rows}))
    return 0


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
