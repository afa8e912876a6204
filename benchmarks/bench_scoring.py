"""How fast is policy-accuracy scoring, next to what this machine's matrix multiply allows?

Policy accuracy needs the teacher-forced log-likelihood of every test pair's two responses
(``LM.response_logprobs``). This script times exactly that on real Pref-LaMP-like pairs (an ACL
Anthology abstract as the prompt, its real title and another paper's title as the responses)
with the embedded SmolLM2-135M-Instruct, batch 16, fp32, and prints:

- tokens/s: real tokens the model read (each distinct prompt once, as ``LM`` prefills it once,
  plus every response token, eos included) per second of wall time;
- the fp32 matrix-multiply rate of this machine (a square ``torch.matmul``) at the same thread
  count: the ceiling for a model whose work is matrix multiplies;
- the model's FLOPs per token, as ``2 x parameters`` (the usual estimate) and counted: the
  decoder layers' linear maps, attention scores and weighted sums at each token's position, and
  the output head where logits are computed (every response position, each prompt's last);
- the achieved FLOP rate and its fraction of the matmul ceiling.

Run: ``python benchmarks/bench_scoring.py [--data DIR] [--pairs 64] [--threads 2]``.
Figures come from this run only; the machine's load average is printed beside them, since
other processes on the same cores lower every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch

PROMPT = "Generate a title for the following abstract of a paper: {abstract}"
REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Workload:
    prompts: list[str]  # one per response (a pair's two responses share their prompt)
    responses: list[str]


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    ceiling = matmul_rate(args.matmul_size, args.threads)
    from pytest_prefalign.runtime.models import ModelSpec, load_lm

    lm = load_lm(ModelSpec("135m", "embedded:smollm2-135m"), device="cpu")
    work = workload(find_data(args.data), args.pairs)
    # every repeat starts cold (no prompt kept from the one before) and with no prefix shared
    # between prompts, so that every token counted below is a token the model ran
    lm.prefills.min_shared = 10**9

    def score() -> None:
        lm.prefills.clear()
        lm.response_logprobs(work.prompts, work.responses, batch_size=args.batch_size)

    lm.response_logprobs(work.prompts[:4], work.responses[:4], batch_size=args.batch_size)  # warm
    seconds = best_time(score, args.repeats)
    # measured again after scoring: other processes on the same cores move both figures,
    # and the better of the two is the nearer to what the machine can do
    after = matmul_rate(args.matmul_size, args.threads)
    report(lm, work, seconds, (ceiling, after), args)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--data",
        type=Path,
        default=None,
        help="the prepared data folder (default: $PREFALIGN_DATA, else "
        "../shared/data beside the repository)",
    )
    parser.add_argument("--pairs", type=int, default=64, help="pairs scored (2 responses each)")
    parser.add_argument("--batch-size", type=int, default=16, help="sequences per forward pass")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--repeats", type=int, default=2, help="timed runs; the best is kept")
    parser.add_argument("--matmul-size", type=int, default=2048, help="n of the n x n matmul")
    args = parser.parse_args()
    for name in ("pairs", "batch_size", "threads", "repeats", "matmul_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


def find_data(option: Path | None) -> Path:
    folder = option or Path(os.environ.get("PREFALIGN_DATA") or REPO.parent / "shared" / "data")
    papers = folder / "acl-anthology"
    if not papers.is_dir():
        raise SystemExit(
            f"no acl-anthology/ folder in {folder}: pass --data DIR or set PREFALIGN_DATA"
        )
    return papers


def workload(papers_dir: Path, n_pairs: int) -> Workload:
    """The first ``n_pairs`` papers with an abstract and a title: prompt = the Pref-LaMP
    instruction, chosen = the real title, rejected = the next paper's title."""
    papers = []
    for path in sorted(papers_dir.glob("papers-*.jsonl")):
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                rec = json.loads(line)
                title, abstract = " ".join(rec["title"].split()), " ".join(rec["abstract"].split())
                if title and abstract:
                    papers.append((abstract, title))
                if len(papers) > n_pairs:
                    break
        if len(papers) > n_pairs:
            break
    if len(papers) <= n_pairs:
        raise SystemExit(f"only {len(papers)} usable papers in {papers_dir}, need {n_pairs + 1}")
    prompts, responses = [], []
    for k in range(n_pairs):
        prompt = PROMPT.format(abstract=papers[k][0])
        prompts += [prompt, prompt]
        responses += [papers[k][1], papers[k + 1][1]]
    return Workload(prompts, responses)


WARM_UP_S = 1.0  # seconds of matmuls before a rate is timed


def matmul_rate(n: int, threads: int, dtype: torch.dtype = torch.float32) -> float:
    """FLOP/s of an ``n x n`` matmul in ``dtype`` at ``threads`` threads: the best of several
    runs after ``WARM_UP_S`` of them. Timed at once after the main job's runs, the rate came out
    at 90 GFLOP/s where the same process measured 129 seconds later (a virtual machine's cores;
    the cause not found), so a rate is timed only on cores that have been at it a while."""
    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(0)
    a, b = (torch.randn(n, n, generator=gen).to(dtype) for _ in range(2))
    seconds = warmed_best_time(lambda: torch.matmul(a, b), 10)
    return 2 * n**3 / seconds


def memory_rate(threads: int, gib: float = 1.0) -> float:
    """Bytes/s this machine reads from memory: the sum of a ``gib`` GiB float32 tensor, far
    larger than the CPU's caches, at ``threads`` threads (best of several runs)."""
    torch.set_num_threads(threads)
    data = torch.ones(int(gib * 2**30) // 4)
    data.sum()  # warm up: the pages touched, the kernel loaded
    seconds = best_time(lambda: data.sum(), 5)
    return data.numel() * data.element_size() / seconds


def warmed_best_time(run, repeats: int) -> float:
    """``best_time`` after ``WARM_UP_S`` seconds of ``run`` (the kernels loaded, the cores
    awake): what a rate measured beside another is timed with."""
    started = time.perf_counter()
    while time.perf_counter() - started < WARM_UP_S:
        run()
    return best_time(run, repeats)


def best_time(run, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def flops(lm, work: Workload) -> tuple[int, float, float]:
    """(tokens read, FLOPs by 2 x parameters, FLOPs counted) for scoring ``work``."""
    config = lm.model.config
    layers = lm.model.base_model.layers
    linear = sum(m.weight.numel() for m in layers.modules() if isinstance(m, torch.nn.Linear))
    head = lm.model.get_output_embeddings().weight.numel()
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    width = config.num_attention_heads * head_dim  # query width: the attention products' size
    params = sum(p.numel() for p in lm.model.parameters())
    tokens, counted = 0, 0.0
    prompt_len = {p: len(lm.prompt_ids(p)) for p in dict.fromkeys(work.prompts)}
    for length in prompt_len.values():  # each distinct prompt is prefilled once
        tokens += length
        counted += 2 * linear * length + attention(length, 0, width, len(layers)) + 2 * head
    for prompt, response in zip(work.prompts, work.responses, strict=True):
        n = len(lm.response_ids(response))
        tokens += n
        counted += (2 * linear + 2 * head) * n + attention(
            n, prompt_len[prompt], width, len(layers)
        )
    return tokens, 2.0 * params * tokens, counted


def attention(n: int, start: int, width: int, n_layers: int) -> float:
    """Scores and weighted sums of ``n`` tokens at positions ``start..start+n-1``: a token at
    position i attends to i + 1 keys, 2 x width FLOPs per key for each of the two products."""
    keys = n * start + n * (n + 1) / 2
    return 4.0 * width * keys * n_layers


def report(
    lm, work: Workload, seconds: float, rates: tuple[float, float], args: argparse.Namespace
) -> None:
    tokens, by_params, counted = flops(lm, work)
    ceiling = max(rates)
    params = sum(p.numel() for p in lm.model.parameters())
    load = os.getloadavg()
    rows = [
        ("model", f"{lm.name} ({params / 1e6:.1f}M parameters, fp32, {args.threads} threads)"),
        (
            "workload",
            f"{args.pairs} pairs, {len(work.responses)} responses, "
            f"{len(set(work.prompts))} prompts, batch {args.batch_size}",
        ),
        ("tokens read", f"{tokens}"),
        ("scoring time", f"{seconds:.2f} s (best of {args.repeats})"),
        ("throughput", f"{tokens / seconds:.0f} tokens/s"),
        (
            "matmul ceiling",
            f"{ceiling / 1e9:.1f} GFLOP/s (fp32 {args.matmul_size}^2 matmul; "
            f"{rates[0] / 1e9:.1f} before scoring, {rates[1] / 1e9:.1f} after)",
        ),
        ("FLOPs/token, 2 x params", f"{by_params / tokens / 1e6:.0f} M"),
        ("FLOPs/token, counted", f"{counted / tokens / 1e6:.0f} M"),
        (
            "achieved, 2 x params",
            f"{by_params / seconds / 1e9:.1f} GFLOP/s = "
            f"{by_params / seconds / ceiling:.0%} of the ceiling",
        ),
        (
            "achieved, counted",
            f"{counted / seconds / 1e9:.1f} GFLOP/s = "
            f"{counted / seconds / ceiling:.0%} of the ceiling",
        ),
        ("load average (1, 5, 15 min)", " ".join(f"{x:.2f}" for x in load)),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")


if __name__ == "__main__":
    main()
