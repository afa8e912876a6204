"""What one sampled decoding step costs outside the model: the nucleus cut and the Gumbel draw,
ours against the code before, for the same tokens.

Best-of-N draws each token from the nucleus (``top_p``) of the tempered distribution with each
row's own generator (``runtime/decoding.py``: ``nucleus``, ``gumbel_choice``). Per step and
row the draw needs a whole vocabulary of uniforms (the generator's stream), but:

- the Gumbel noise ``-log(-log u)`` and the scaled logits are needed only at the tokens the
  nucleus keeps (a cut token's score is ``-inf`` whatever its noise); before, both were
  computed over the whole vocabulary;
- the nucleus's largest probabilities are ranked on the float32 logits (softmax keeps their
  order) and read from the float64 probabilities at those tokens; before, the float64
  probabilities were ranked.

The reference, "before", is that code, kept here. The logits are the embedded
SmolLM2-135M-Instruct's next-token logits (49,152 tokens) at the positions of real ACL
Anthology abstracts (``--data``), ``--rows`` rows a step (64: best-of-N's batch), at
temperature 0.7 and top_p 0.9 (best-of-N's defaults); each strategy ``--repeats`` times in
alternation over ``--steps`` steps. Prints milliseconds per step, the nucleus's mean size,
and whether every drawn token equals the reference's, and last

    sampling step: ours <R>x faster than before (<A> ms -> <B> ms at <N> rows; same tokens: yes|no)

Run: ``python benchmarks/bench_sampling.py [--data DIR] [--rows 64] [--steps 20] [--repeats 3]
[--threads 2]``. The load average is printed beside the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from pytest_prefalign.runtime.decoding import NUCLEUS_FIRST, gumbel_choice, nucleus  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def nucleus_before(logits: torch.Tensor, top_p: float, temperature: float) -> torch.Tensor:
    """The nucleus as it was: the float64 probabilities ranked by ``topk``."""
    probs = torch.softmax(logits.double() / temperature, dim=-1)
    vocab = probs.shape[-1]
    k = min(vocab, NUCLEUS_FIRST)
    while True:
        top = probs.topk(k, dim=-1).values
        mass = top.cumsum(-1)
        if k == vocab or bool((mass[..., -1] >= top_p).all()):
            break
        k = min(vocab, k * 8)
    reached = mass >= top_p
    size = torch.where(reached.any(-1), reached.int().argmax(-1) + 1, k)
    edge = top.gather(-1, (size - 1)[..., None])
    keep = probs >= edge
    if bool((keep.sum(-1) > size).any()):
        above, ties = probs > edge, probs == edge
        room = size[..., None] - above.sum(-1, keepdim=True)
        keep = above | (ties & (ties.cumsum(-1) <= room))
    return logits.masked_fill(~keep, float("-inf"))


def gumbel_before(
    logits: torch.Tensor, temperature: float, gens: list[torch.Generator]
) -> list[int]:
    """The draw as it was: the noise and the scaled logits over the whole vocabulary."""
    scores = torch.empty((len(gens), logits.shape[-1]), dtype=torch.float64)
    for row, g in zip(scores, gens, strict=True):
        torch.rand(logits.shape[-1], generator=g, dtype=torch.float64, out=row)
    scores.clamp_(min=1e-300).log_().neg_().log_().neg_()
    scores.add_(logits.double() / temperature)
    return scores.argmax(-1).tolist()


def run(strategy: str, steps: list[torch.Tensor], seed: int) -> tuple[float, list[list[int]]]:
    gens = [torch.Generator().manual_seed(seed + r) for r in range(steps[0].shape[0])]
    drawn = []
    start = time.perf_counter()
    for logits in steps:
        if strategy == "ours":
            drawn.append(gumbel_choice(nucleus(logits, 0.9, 0.7), 0.7, gens))
        else:
            drawn.append(gumbel_before(nucleus_before(logits, 0.9, 0.7), 0.7, gens))
    return time.perf_counter() - start, drawn


def model_logits(data: Path, n: int) -> torch.Tensor:
    """``(n, V)`` next-token logits of the embedded model at the positions of abstracts."""
    from pytest_prefalign.runtime.model_lines import parse_models
    from pytest_prefalign.runtime.models import load_lm

    folder = data / "acl-anthology"
    if not folder.is_dir():
        raise SystemExit(f"no acl-anthology data in {data}: pass --data DIR")
    lm = load_lm(parse_models(["135m = embedded:smollm2-135m"])["135m"])
    found: list[torch.Tensor] = []
    with (folder / "papers-00.jsonl").open(encoding="utf-8") as lines:
        for line in lines:
            ids = lm.tokenizer(json.loads(line)["abstract"], return_tensors="pt").input_ids
            with torch.no_grad():
                found.append(lm.model(ids[:, :256]).logits[0, 8:].float())
            if sum(len(f) for f in found) >= n:
                return torch.cat(found)[:n]
    raise SystemExit(f"fewer than {n} positions in {folder / 'papers-00.jsonl'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = model_logits(args.data, args.rows * args.steps)
    steps = list(rows.split(args.rows))
    size = float(torch.isfinite(nucleus(rows, 0.9, 0.7)).sum(-1).double().mean())
    print(f"{len(steps)} steps of {args.rows} rows, {rows.shape[-1]} tokens; nucleus {size:.1f}")
    best: dict[str, float] = {}
    tokens: dict[str, list[list[int]]] = {}
    for repeat in range(args.repeats):
        for strategy in ("before", "ours"):
            seconds, drawn = run(strategy, steps, seed=repeat)
            best[strategy] = min(best.get(strategy, float("inf")), seconds)
            if repeat == 0:
                tokens[strategy] = drawn
    same = tokens["ours"] == tokens["before"]
    per_step = {k: 1000 * v / args.steps for k, v in best.items()}
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    for strategy in ("before", "ours"):
        print(f"{strategy:7s} {per_step[strategy]:7.1f} ms a step (best of {args.repeats})")
    print(f"load average {load:.2f}, {args.threads} threads")
    print(
        f"sampling step: ours {per_step['before'] / per_step['ours']:.2f}x faster than before "
        f"({per_step['before']:.1f} ms -> {per_step['ours']:.1f} ms at {args.rows} rows; "
        f"same tokens: {'yes' if same else 'no'})"
    )


if __name__ == "__main__":
    main()
