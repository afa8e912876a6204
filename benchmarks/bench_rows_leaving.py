"""What a decoding batch's rows cost the KV cache as they come and go: ours against the code
before, for the same tokens.

Two copies of the cache that are not compute (``runtime/roomy.py: select_rows``):

- rows leaving: when a row's response is finished it leaves the batch and the cache drops its
  row in place. Kept in order, every row after the first to leave moves up (for prompts of a
  thousand tokens a row is 46 MB of SmolLM2-135M's cache); ``decoding.compacted`` fills each
  freed slot with a row from the end of the batch instead, one row moved per row that leaves
  (a row's numbers do not depend on its slot);
- samples: best-of-N's batch made a batch of its prompts from the kept prefills and then
  repeated each prompt's row for its samples (two copies, the second with the room after the
  columns in use); the samples' rows are now copied from the kept prefills directly
  (``LM._generate_batch``).

The reference, "before", patches both back (the kept rows in order, ``prefills.holds`` false
for the samples' start). Runs the embedded SmolLM2-135M-Instruct (fp32) on real Pref-LaMP
prompts of ICL length (three other papers of the same author before the abstract, as ``icl``
builds them), each strategy ``--repeats`` times in alternation: greedy (``--tokens`` new
tokens, 48 rows a batch) and sampled (``--samples`` per prompt at temperature 0.7, each row
with its own seed, 64 rows a batch, as best-of-N draws them). The prompts' prefills are made
once before the timed runs and kept (the prefill store), so the strategies differ only in
their decoding. Prints, per strategy and mode, the wall time, the seconds the cache's copies
took (``select_rows``, and ``prefill.assemble``: kept prefills into a batch), the rows that
rows leaving moved (once per selection, not per layer), whether every output is the same token
for token as the reference's, and last

    rows and samples: ours <R>x before's cache-copy time, <W>x its wall time (same tokens: yes|no)

Run: ``python benchmarks/bench_rows_leaving.py [--data DIR] [--prompts 24] [--tokens 24]
[--samples 8] [--repeats 2] [--threads 2]``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402
from bench_args import find_data, icl_prompt, read_authors  # this folder is the script's own
from tabulate import tabulate  # noqa: E402

from pytest_prefalign.runtime import decoding, prefill, roomy  # noqa: E402
from pytest_prefalign.runtime.models import ModelSpec, load_lm  # noqa: E402


class Selections:
    """Wraps the cache's copies, ``roomy.select_rows`` (every layer's keys and values) and
    ``prefill.assemble`` (kept prefills into a batch), for the seconds spent in them, and a
    strategy, for the rows its orders move (once per selection of the batch)."""

    def __init__(self, order: Callable[[list[int]], list[int]]) -> None:
        self.seconds, self.rows, self.order = 0.0, 0, order
        self.original = roomy.select_rows, prefill.assemble

    def select_rows(self, buffer: torch.Tensor, indices: torch.Tensor, length: int) -> torch.Tensor:
        started = time.perf_counter()
        out = self.original[0](buffer, indices, length)
        self.seconds += time.perf_counter() - started
        return out

    def assemble(self, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        out = self.original[1](*args, **kwargs)
        self.seconds += time.perf_counter() - started
        return out

    def patch(self) -> None:
        decoding.compacted = self.compacted  # type: ignore[assignment]
        roomy.select_rows = self.select_rows  # type: ignore[assignment]
        prefill.assemble = self.assemble  # type: ignore[assignment]

    def restore(self) -> None:
        decoding.compacted = OURS
        roomy.select_rows, prefill.assemble = self.original  # type: ignore[assignment]

    def compacted(self, keep: list[int]) -> list[int]:
        order = self.order(keep)
        self.rows += sum(i != j for j, i in enumerate(order))
        return order


def in_order(keep: list[int]) -> list[int]:
    """The reference: the kept rows move up in their order."""
    return list(keep)


def run(
    before: bool, lm: Any, work: Callable[[], list[list[str]]]
) -> tuple[list[list[str]], float, float, int]:
    chosen = Selections(in_order if before else OURS)
    chosen.patch()
    if before:
        lm.prefills.holds = lambda seqs, then=0: False  # the samples' start as it was
    try:
        started = time.perf_counter()
        texts = work()
        wall = time.perf_counter() - started
    finally:
        chosen.restore()
        vars(lm.prefills).pop("holds", None)
    return texts, wall, chosen.seconds, chosen.rows


OURS = decoding.compacted


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    lm = load_lm(ModelSpec("135m", "embedded:smollm2-135m"), device="cpu")
    authors = read_authors(find_data(args.data), args.prompts)
    prompts = [icl_prompt(papers) for papers in authors]
    lengths = [len(lm.prompt_ids(p)) for p in prompts]
    modes: dict[str, Callable[[], list[list[str]]]] = {
        "greedy": lambda: lm.generate(prompts, max_new_tokens=args.tokens, batch_size=48),
        f"sampled x{args.samples}": lambda: lm.generate(
            prompts,
            max_new_tokens=args.tokens,
            batch_size=64,
            sample=True,
            num_samples=args.samples,
            temperature=0.7,
            seed=0,
        ),
    }
    print(
        f"model: SmolLM2-135M-Instruct, fp32, {args.threads} threads; {len(prompts)} ICL "
        f"prompts of {min(lengths)}-{max(lengths)} tokens, {args.tokens} new tokens",
        flush=True,
    )
    lm.generate(prompts, max_new_tokens=1)  # the prefills, kept for every timed run
    rows, same, totals = [], True, {"ours": [0.0, 0.0], "before": [0.0, 0.0]}
    for mode, work in modes.items():
        texts: dict[str, list[list[str]]] = {}
        for strategy in ["before", "ours"] * args.repeats:
            out, wall, select_s, moved = run(strategy == "before", lm, work)
            if texts.setdefault(strategy, out) != out or texts.setdefault("before", out) != out:
                same = False
            totals[strategy][0] += wall
            totals[strategy][1] += select_s
            rows.append([mode, strategy, f"{wall:.1f}", f"{select_s:.2f}", moved])
            print(tabulate([rows[-1]], tablefmt="plain"), flush=True)
    print()
    print(tabulate(rows, ["mode", "strategy", "wall s", "copies s", "rows moved"]))
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\nload average: {load}")
    ours, ref = totals["ours"], totals["before"]
    print(
        f"rows and samples: ours {ours[1] / ref[1]:.2f}x before's cache-copy time, "
        f"{ours[0] / ref[0]:.2f}x its wall time (same tokens: {'yes' if same else 'no'})"
    )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="the folder holding acl-anthology/")
    parser.add_argument("--prompts", type=int, default=24, help="ICL prompts (one per author)")
    parser.add_argument("--tokens", type=int, default=24, help="new tokens at most")
    parser.add_argument("--samples", type=int, default=8, help="samples per prompt when sampled")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each strategy per mode")
    parser.add_argument("--threads", type=int, default=2)
    return parser.parse_args()


if __name__ == "__main__":
    main()
