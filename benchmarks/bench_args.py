"""How much faster is our ARGS than the two usual ways of computing it, for the same tokens?

Times ARGS generation (k = 10 candidates, 20 new tokens, greedy, fp32) with the embedded
SmolLM2-135M-Instruct as the policy and as the reward model's backbone, on real Pref-LaMP prompts
(an ACL Anthology abstract in the suite's instruction), plain and ICL-length (three other papers
of the same author shown before the instruction, as ``icl`` builds them). Three strategies:

- ``args`` (ours): prompts batched, each prefilled once; per step one forward pass over the k
  candidates of every prompt serves their rewards and the next logits;
- ``per-candidate cache`` (the original ARGS code's strategy, ``args_reference``): one prompt
  at a time, the prompt prefilled once per candidate, a copy of the cache per candidate;
- ``full recompute`` (``args_reference``): every candidate's reward from a pass over the whole
  sequence, no cache (very slow, so it runs on 2 prompts and their first 10 new tokens).

The reward model is ``global_bt`` trained on a handful of (own title, other paper's title) pairs
when that method is installed, else a fixed random linear head on the hidden states; the output
says which. Figures are generated tokens per second of wall time, from this run only; the load
average is printed beside them, since other processes on the same cores slow every strategy.

Run: ``python benchmarks/bench_args.py [--data DIR] [--threads 2] [--prompts 8]
[--per-candidate-prompts 2] [--full-recompute-prompts 2] [--full-recompute-tokens 10]
[--no-icl]``. Its last line is
``args speedup vs full-recompute: <R>x, vs per-candidate-cache: <S>x (same tokens: yes|no)``
(plain prompts, tokens/s ratios; same tokens: every reference output equals ours).
"""

from __future__ import annotations

import os

# A thread that waits for a busy core should sleep, not spin: on a shared machine spinning
# OpenMP threads slow small passes many times over (read before torch starts its thread pool).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from pytest_prefalign.api import Batch  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = 3  # profile papers shown in an ICL prompt, the ``icl`` decoder's default k


@dataclass(frozen=True)
class Paper:
    user: str
    abstract: str
    title: str


@dataclass
class Run:
    """One strategy on one set of prompts."""

    strategy: str
    prompts: int
    tokens: list[list[int]]
    seconds: float

    @property
    def generated(self) -> int:
        return sum(len(t) for t in self.tokens)

    @property
    def rate(self) -> float:
        return self.generated / self.seconds


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    from prefalign_methods.decoders.args_decode import args_generate

    # the references are test code, not part of the installed package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from reference.args_reference import (
        full_recompute_generate,
        per_candidate_cache_generate,
    )

    from pytest_prefalign.runtime.models import ModelSpec, load_lm

    lm = load_lm(ModelSpec("135m", "embedded:smollm2-135m"), device="cpu")
    authors = read_authors(find_data(args.data), args.prompts)
    reward, reward_kind = build_reward(lm, authors)
    users = [papers[0].user for papers in authors]
    sets = {"plain": [plain_prompt(papers[0]) for papers in authors]}
    if args.icl:
        sets["ICL"] = [icl_prompt(papers) for papers in authors]
    gen = {"k": args.k, "w": args.w, "max_new_tokens": args.tokens}
    print(
        f"model: SmolLM2-135M-Instruct, fp32, {args.threads} threads "
        f"(OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}); reward: {reward_kind}; "
        f"k = {args.k}, w = {args.w}, {args.tokens} new tokens, greedy",
        flush=True,
    )

    runs: dict[str, list[Run]] = {}
    for name, prompts in sets.items():
        lengths = [len(lm.prompt_ids(p)) for p in prompts]
        print(f"\n{name} prompts: {len(prompts)}, {min(lengths)}-{max(lengths)} tokens", flush=True)
        plan: list[tuple[str, int, Callable[..., list[list[int]]], dict[str, Any]]] = [
            ("args (ours, batched)", len(prompts), args_generate, {"batch_size": len(prompts)}),
            ("per-candidate cache", args.per_candidate_prompts, per_candidate_cache_generate, {}),
        ]
        if name == "plain":
            plan.append(
                (
                    "full recompute",
                    args.full_recompute_prompts,
                    full_recompute_generate,
                    {"max_new_tokens": args.full_recompute_tokens or args.tokens},
                )
            )
        runs[name] = [
            timed(label, n, fn, lm, reward, users[:n], prompts[:n], **{**gen, **extra})
            for label, n, fn, extra in plan
            if n > 0
        ]
    report(runs, lm)


def timed(label: str, n: int, fn: Callable[..., list[list[int]]], *args: Any, **kwargs: Any) -> Run:
    args[0].prefills.clear()  # each strategy starts cold: no prompt prefill kept from before
    start = time.perf_counter()
    tokens = fn(*args, **kwargs)
    run = Run(label, n, tokens, time.perf_counter() - start)
    print(
        f"  {label}: {run.generated} tokens in {run.seconds:.1f} s = {run.rate:.2f} tok/s "
        f"(load average {os.getloadavg()[0]:.1f})",
        flush=True,
    )
    return run


def report(runs: dict[str, list[Run]], lm: Any) -> None:
    """The table, the same-tokens check, and the speedups on plain prompts (last line)."""
    from tabulate import tabulate

    rows, same = [], True
    for name, group in runs.items():
        ours = group[0]
        for run in group:
            # a run with fewer new tokens must give the start of ours (greedy: a prefix)
            agrees = all(t == o[: len(t)] for t, o in zip(run.tokens, ours.tokens, strict=False))
            same = same and agrees
            rows.append(
                [
                    name,
                    run.strategy,
                    run.prompts,
                    run.generated,
                    f"{run.seconds:.1f}",
                    f"{run.rate:.2f}",
                    f"{ours.rate / run.rate:.1f}x",
                    "yes" if agrees else "no",
                ]
            )
    print()
    print(
        tabulate(
            rows,
            headers=[
                "prompts",
                "strategy",
                "n",
                "tokens",
                "seconds",
                "tok/s",
                "ours is",
                "same tokens",
            ],
        )
    )
    print(f"\nexample output: {lm.tokenizer.decode(runs['plain'][0].tokens[0])!r}")
    plain = {run.strategy: run.rate for run in runs["plain"]}
    fast = plain["args (ours, batched)"]
    full = ratio(fast, plain.get("full recompute"))
    cand = ratio(fast, plain.get("per-candidate cache"))
    print(
        f"args speedup vs full-recompute: {full}x, vs per-candidate-cache: {cand}x "
        f"(same tokens: {'yes' if same else 'no'})"
    )


def ratio(ours: float, other: float | None) -> str:
    return "n/a" if other is None else f"{ours / other:.1f}"


# -------------------------------------------------------------------------------------------
# Prompts and the reward model
# -------------------------------------------------------------------------------------------


def find_data(given: str | None) -> Path:
    for candidate in [given, os.environ.get("PREFALIGN_DATA"), REPO.parent / "shared" / "data"]:
        if candidate and (Path(candidate) / "acl-anthology" / "authors.json").is_file():
            return Path(candidate) / "acl-anthology"
    raise SystemExit("no acl-anthology data: pass --data DIR (the folder holding acl-anthology/)")


def read_authors(folder: Path, n: int) -> list[list[Paper]]:
    """The first ``n`` authors' papers, newest first: the newest is the prompt, the next
    ``EXAMPLES`` the ICL examples, the rest training pairs for the reward model."""
    papers: dict[str, dict[str, Any]] = {}
    for path in sorted(folder.glob("papers-*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            papers[rec["anthology_id"]] = rec
    authors = json.loads((folder / "authors.json").read_text(encoding="utf-8"))
    chosen = []
    for author in authors[:n]:
        own = [papers[i] for i in reversed(author["paper_ids"]) if i in papers]
        chosen.append(
            [
                Paper(
                    author["user_id"], " ".join(p["abstract"].split()), " ".join(p["title"].split())
                )
                for p in own
            ]
        )
    return chosen


def plain_prompt(paper: Paper) -> str:
    from prefalign_suites.pref_lamp.suite import PrefLamp

    return PrefLamp().instruction(paper.abstract)


def icl_prompt(papers: Sequence[Paper]) -> Any:
    """The ``icl`` decoder's prompt for the first paper, the others as earlier turns (a
    ``runtime.chat.Dialogue``, which the LM renders)."""
    from prefalign_methods.decoders.icl import icl_prompt as build
    from prefalign_suites.pref_lamp.suite import PrefLamp
    from pytest_prefalign.api import ProfileEntry

    examples = [
        ProfileEntry(f"ex{i}", p.abstract, p.title) for i, p in enumerate(papers[1 : 1 + EXAMPLES])
    ]
    return build(PrefLamp(), examples, plain_prompt(papers[0]))


def build_reward(lm: Any, authors: list[list[Paper]]) -> tuple[Any, str]:
    """``global_bt`` trained on each author's older papers (own title over another author's
    title for the same abstract), else a fixed random head."""
    try:
        from prefalign_methods.rewards.global_bt import GlobalBT
    except ImportError:
        return RandomHead(lm.model.config.hidden_size), "fixed random linear head (no global_bt)"
    from pytest_prefalign.api import Pair

    pairs = []
    for a, papers in enumerate(authors):
        others = authors[(a + 1) % len(authors)]
        for j, paper in enumerate(papers[1 + EXAMPLES : 3 + EXAMPLES]):
            pairs.append(
                Pair(
                    f"{a}-{j}",
                    paper.user,
                    plain_prompt(paper),
                    paper.title,
                    others[(j + 1) % len(others)].title,
                )
            )
    reward = GlobalBT()
    with tempfile.TemporaryDirectory() as cache:
        reward.fit(lm, pairs, Path(cache))
    return reward, f"global_bt trained on {len(pairs)} pairs"


class RandomHead:
    """A fixed random linear head on the final hidden states (``reward_from_hidden``)."""

    name = "random_head"
    capabilities = frozenset({"prefix", "hidden"})

    def __init__(self, hidden_size: int) -> None:
        gen = torch.Generator().manual_seed(0)
        self.w = torch.randn(hidden_size, generator=gen) / hidden_size**0.5

    def reward_from_hidden(self, users: Sequence[str], hidden: torch.Tensor) -> torch.Tensor:
        return hidden @ self.w.to(hidden.dtype)

    def prefix_rewards(self, lm: Any, batch: Batch) -> list[np.ndarray]:
        hidden = lm.response_hidden(batch.prompts, batch.responses)
        return [(h @ self.w).double().numpy() for h in hidden]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--data", help="the folder holding acl-anthology/ (default: ../shared/data)"
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=8, help="prompts of each kind (ours)")
    parser.add_argument("--per-candidate-prompts", type=int, default=2)
    parser.add_argument("--full-recompute-prompts", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=20, help="new tokens per prompt")
    parser.add_argument(
        "--full-recompute-tokens",
        type=int,
        default=10,
        help="new tokens per prompt for full recompute, whose output must be "
        "the start of ours (0: --tokens)",
    )
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--w", type=float, default=1.0)
    parser.add_argument(
        "--no-icl", dest="icl", action="store_false", help="skip the ICL-length prompts"
    )
    return parser.parse_args()


if __name__ == "__main__":
    main()
