"""How much the OpenMP threads' way of waiting between ops costs the 135M model's decoding.

Each measurement is a fresh process (libgomp reads its environment once, when torch loads it)
that loads the embedded SmolLM2-135M-Instruct and times, best of ``--reps``, greedy decoding
of 16 prompts (24 new tokens, one batch) and best-of-N's sampling (16 samples of each of 4
prompts, one batch of 64), under each setting in turn, alternating, ``--rounds`` times:

- ``passive``: ``OMP_WAIT_POLICY=PASSIVE`` (a thread sleeps as soon as its share is done);
- ``spin``: ``GOMP_SPINCOUNT=20000`` (it spins about 0.2 ms first: what a prefalign run sets
  where its cores were idle at the start, ``plumbing/waiting.py``).

The last line is ``passive / spin: greedy <G>x, sampling <S>x`` (medians over the rounds). Run it
on an idle machine for the figure a run on idle cores gets, and beside other work (say the same
script at once in another shell) for what spinning costs there.

    python benchmarks/bench_waiting.py [--rounds 2] [--reps 4] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

SETTINGS = {"passive": {"OMP_WAIT_POLICY": "PASSIVE"}, "spin": {"GOMP_SPINCOUNT": "20000"}}

CHILD = """
import json, os, sys, time
import torch
from pytest_prefalign.runtime.models import ModelSpec, load_lm
torch.set_num_threads(int(sys.argv[1]))
lm = load_lm(ModelSpec("135m", "embedded:smollm2-135m"), device="cpu")
words = ("we study the alignment of language models with the preferences of individual users "
         "across tasks").split()
prompts = [" ".join(words[i % 7:] + words[: i % 7]) * (3 + i % 5) for i in range(16)]
best = {}
for _ in range(int(sys.argv[2])):
    for kind in ("greedy", "sampling"):
        lm.prefills.clear()  # every repeat prefills its prompts again
        start = time.perf_counter()
        if kind == "greedy":
            lm.generate(prompts, max_new_tokens=24, batch_size=16)
        else:
            lm.generate(prompts[:4], max_new_tokens=24, batch_size=64, sample=True,
                        temperature=0.7, top_p=0.9, num_samples=16, seed=0)
        best[kind] = min(best.get(kind, float("inf")), time.perf_counter() - start)
print(json.dumps(best))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--reps", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    times: dict[str, list[dict[str, float]]] = {name: [] for name in SETTINGS}
    for _ in range(args.rounds):
        for name, setting in SETTINGS.items():
            env = {
                k: v
                for k, v in os.environ.items()
                if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
            }
            env.setdefault("HF_HUB_OFFLINE", "1")
            out = subprocess.run(
                [sys.executable, "-c", CHILD, str(args.threads), str(args.reps)],
                env={**env, **setting},
                capture_output=True,
                text=True,
                check=True,
            )
            best = json.loads(out.stdout.strip().splitlines()[-1])
            times[name].append(best)
            print(
                f"{name:8} greedy {best['greedy']:.2f} s, sampling {best['sampling']:.2f} s",
                flush=True,
            )
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    ratios = {
        kind: statistics.median(t[kind] for t in times["passive"])
        / statistics.median(t[kind] for t in times["spin"])
        for kind in ("greedy", "sampling")
    }
    print(f"passive / spin: greedy {ratios['greedy']:.2f}x, sampling {ratios['sampling']:.2f}x")


if __name__ == "__main__":
    main()
