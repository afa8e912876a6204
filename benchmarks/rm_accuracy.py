"""RM accuracy of reward methods that do not read the base LM, on a suite's test pairs, without
generating anything: each method fitted as a run fits it (its profiles first, where it declares
``needs_profiles``; then ``fit`` on the training pairs) and asked for ``score`` on both sides of
every test pair; macro accuracy over users with its 95% bootstrap interval (users resampled,
``analysis.metrics``), and the same on the training pairs. The ``profile_*`` methods and the
``*_minilm`` heads read texts only, so a run over 40 users costs seconds to minutes, where the
same rows under ARGS cost the generation of every item.

    python benchmarks/rm_accuracy.py [--suite pref_lamp] [--limit 40] [--data ../shared/data]
        [--methods profile_bm25,profile_overlap,profile_minilm,global_bt_minilm,per_user_bt_minilm]
        [--config profile_bm25.k=3]

A method that reads the base LM (``global_bt``, ...) fails here (the model passed has only a
fingerprint): measure it with ``pytest --prefalign``. The suite's default options are used; its
pairs must come with the data (Pref-LaMP's released pairs do).
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path

from pytest_prefalign import registry
from pytest_prefalign.analysis.metrics import accuracy, bootstrap_ci, pair_outcomes
from pytest_prefalign.api import Batch, needs_profiles

METHODS = "profile_bm25,profile_overlap,profile_minilm,global_bt_minilm,per_user_bt_minilm"
ROOT = Path(__file__).resolve().parents[1]


class NoModel:
    """What the methods measured here are given as the base LM: a fingerprint, nothing else."""

    fingerprint = "no model"


def rm_accuracy(method, pairs) -> tuple[float, float, float]:
    """Macro RM accuracy of ``method`` on ``pairs`` and its 95% interval over users."""
    model = NoModel()
    outcomes = pair_outcomes(
        method.score(model, Batch.of_pairs(pairs, "chosen")),
        method.score(model, Batch.of_pairs(pairs, "rejected")),
    )
    users = [p.user for p in pairs]
    low, high = bootstrap_ci(outcomes, users)
    return accuracy(outcomes, users).macro, low, high


def configured(factory, name: str, settings: list[str]):
    """The method made with its ``Config`` defaults, the ``NAME.FIELD=VALUE`` settings of
    ``name`` applied (each value of its default's type)."""
    config = factory.Config()
    for setting in settings:
        target, _, value = setting.partition("=")
        method, _, field = target.partition(".")
        if method == name:
            kind = type(getattr(config, field))
            config = dataclasses.replace(config, **{field: kind(value)})
    return factory(config)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", default="pref_lamp")
    parser.add_argument("--limit", type=int, default=8, help="users (default 8, the main job's)")
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--methods", default=METHODS)
    parser.add_argument("--config", action="append", default=[], metavar="NAME.FIELD=VALUE")
    args = parser.parse_args()
    found = registry.Registry()
    registry.add_builtins(found)
    suite = found.suite(args.suite)
    data = suite.load(args.data / suite.source, limit=args.limit, options={})
    print(
        f"{args.suite}: {len(data.profiles)} users, {len(data.train_pairs)} training pairs, "
        f"{len(data.test_pairs)} test pairs"
    )
    for name in args.methods.split(","):
        method = configured(found.reward(name).obj, name, args.config)
        started = time.perf_counter()
        if needs_profiles(method):
            method.use_profiles(data.profiles)
        method.fit(NoModel(), data.train_pairs, Path(tempfile.mkdtemp(prefix="rm-accuracy-")))
        test, low, high = rm_accuracy(method, data.test_pairs)
        train, _, _ = rm_accuracy(method, data.train_pairs)
        print(
            f"{name:20s} test {test:.3f} [{low:.2f}, {high:.2f}]  training pairs {train:.3f}  "
            f"({time.perf_counter() - started:.0f} s)",
            flush=True,
        )


if __name__ == "__main__":
    main()
