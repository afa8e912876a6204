"""How the design of Pref-LaMP's rejected side decides what RM and policy accuracy can show.

For each design (the reference LM's own greedy title; the title of a similar paper by somebody
else, of any length; the same, matched in length), on the first N authors of the data: the RM
accuracy of the five Bradley-Terry-style reward methods (its spread is what tau can rank), the
base model's policy accuracy by the mean and by the sum of token log-likelihoods (a design in
which base is below chance by construction measures distance from the base model), and the
lengths of the two sides (median words, and how often the shorter side is the chosen one).

    python benchmarks/pair_designs.py [--users 8] [--data ../shared/data]

Real model (the embedded SmolLM2-135M-Instruct), real data; the figures go into docs/suites.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402

DESIGNS = {  # label -> suite options
    "generated (reference LM's title)": {"negatives": "generated"},
    "other author, any length": {"negatives": "other_author", "length_slack": "any"},
    "other author, length matched (default)": {"negatives": "other_author"},
}
METHODS = ("global_bt", "per_user_bt", "lore", "vpl", "pal")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument(
        "--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data")
    )
    args = parser.parse_args()
    from tabulate import tabulate

    from prefalign_methods.decoders.base import reduce_logprobs
    from prefalign_methods.rewards import global_bt, lore, pal, per_user_bt, vpl
    from prefalign_suites.pref_lamp.suite import PrefLamp
    from pytest_prefalign import cache
    from pytest_prefalign.analysis.metrics import accuracy, pair_outcomes
    from pytest_prefalign.runtime.models import ModelSpec, load_lm

    lm = load_lm(ModelSpec("135m", "embedded:smollm2-135m"), device="cpu")
    classes = {
        "global_bt": global_bt.GlobalBT,
        "per_user_bt": per_user_bt.PerUserBT,
        "lore": lore.LoRe,
        "vpl": vpl.VPL,
        "pal": pal.PAL,
    }
    rows = []
    with tempfile.TemporaryDirectory() as tmp, cache.using(cache.Disk(Path(tmp))):
        for label, options in DESIGNS.items():
            data = PrefLamp().load(Path(args.data), limit=args.users, options=options)
            if not data.train_pairs:
                PrefLamp().build_pairs(data, lm, Path(tmp) / "pairs")
            test = data.test_pairs
            users = [p.user for p in test]
            rm = {}
            for name in METHODS:
                method = classes[name]()
                method.fit(lm, data.train_pairs, Path(tmp) / name)
                scores = method.score(
                    lm,
                    users * 2,
                    [p.prompt for p in test] * 2,
                    [p.chosen for p in test] + [p.rejected for p in test],
                )
                rm[name] = accuracy(
                    pair_outcomes(scores[: len(test)], scores[len(test) :]), users
                ).macro
            prompts = [p.prompt for p in test]
            chosen = lm.response_logprobs(prompts, [p.chosen for p in test])
            rejected = lm.response_logprobs(prompts, [p.rejected for p in test])
            base = {
                how: accuracy(
                    pair_outcomes(reduce_logprobs(chosen, how), reduce_logprobs(rejected, how)),
                    users,
                ).macro
                for how in ("mean", "sum")
            }
            words_c = [len(p.chosen.split()) for p in test + data.train_pairs]
            words_r = [len(p.rejected.split()) for p in test + data.train_pairs]
            shorter = np.mean(
                [c < r for c, r in zip(words_c, words_r, strict=True) if c != r] or [np.nan]
            )
            rows.append(
                [
                    label,
                    len({p.user for p in test}),
                    len(data.train_pairs),
                    len(test),
                    " ".join(f"{rm[m]:.2f}" for m in METHODS),
                    f"{max(rm.values()) - min(rm.values()):.2f}",
                    f"{base['mean']:.2f}",
                    f"{base['sum']:.2f}",
                    f"{statistics.median(words_c)} / {statistics.median(words_r)}",
                    f"{shorter:.2f}",
                ]
            )
            print(f"{label}: done", file=sys.stderr, flush=True)
    print(
        tabulate(
            rows,
            headers=[
                "design",
                "users",
                "train pairs",
                "test pairs",
                "RM acc (" + " ".join(METHODS) + ")",
                "spread",
                "base policy acc (mean)",
                "(sum)",
                "median words chosen / rejected",
                "chosen is the shorter",
            ],
            disable_numparse=True,
        )
    )


if __name__ == "__main__":
    main()
