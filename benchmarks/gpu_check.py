"""The GPU check: is the CUDA path correct, and how fast is it? No downloaded weights.

Random weights of a 1B-shaped and a 7B-shaped Llama, built from a ``LlamaConfig`` in bf16 on
the GPU, fed random token ids (no tokenizer files), run through the project's own code: the LM
wrapper and its prefill store (``runtime/lm.py``, ``runtime/prefill.py``), the one decode loop
(``runtime/decoding.py``) with ARGS's rule (``methods/decoders/args.py``: k candidates as
queries on the row's cache, their rewards from a reward head on the same backbone) and GenARM's
(``methods/decoders/genarm.py``: base logits plus alpha times an ARM's log-probabilities from
the same hidden states), best-of-N (seeded samples, then each scored by the reward head over a
teacher-forced pass) and policy-accuracy scoring (teacher-forced log-likelihoods of a chosen
and a rejected response per prompt).

For each it prints tokens/s (new tokens for the decoders, scored response tokens for the
scorers), the fraction of the GPU's bf16 peak reached (FLOPs estimated as 2 x parameters x
tokens run through the model, counted at the model's input; the peak measured in this run by
a large bf16 matrix product, the nominal printed beside it) and the peak memory
(``torch.cuda.max_memory_allocated``). Then the tiny model's CPU-against-CUDA check: the same
tokens for greedy generation and ARGS, log-likelihoods within ``TOLERANCE`` (both fp32), and
how far bf16 moves them.

Run: ``PYTHONPATH=. python benchmarks/gpu_check.py`` (about 2-4 minutes on one H200; under 8),
``--quick`` (smaller workloads), ``--sizes 1b`` (one shape), ``--json out.json``. Without CUDA:
``--cpu-smoke`` runs the same code on toy shapes on the CPU in fp32, to check the script.
Needs torch, transformers, tokenizers, safetensors and numpy (no pytest).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
# the built-in methods live in methods/, installed as prefalign_methods
sys.modules.setdefault("prefalign_methods", importlib.import_module("methods"))

from prefalign_methods.decoders.args_decode import HiddenRule  # noqa: E402
from prefalign_methods.decoders.bon import BoNOptions  # noqa: E402
from prefalign_methods.decoders.genarm_guided import GuidedRule  # noqa: E402
from pytest_prefalign.api import RewardMethod  # noqa: E402
from pytest_prefalign.runtime.decoding import KV, decode  # noqa: E402
from pytest_prefalign.runtime.lm import LM  # noqa: E402
from pytest_prefalign.runtime.tiny import build_tiny_lm, build_tokenizer  # noqa: E402

TOLERANCE = 1e-3  # CPU against CUDA, fp32: largest difference of a token log-likelihood
NOMINAL_BF16_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0}  # dense

SHAPES: dict[str, dict[str, Any]] = {
    # Llama-3.2-1B's layout
    "1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
               num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
               tie_word_embeddings=True),
    # Llama-2-7B's layout
    "7b": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
               num_attention_heads=32, num_key_value_heads=32, vocab_size=32000,
               tie_word_embeddings=False),
    # --cpu-smoke
    "toy": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, vocab_size=512,
                tie_word_embeddings=True),
}  # fmt: skip


@dataclass
class Work:
    """How much each measurement runs."""

    prompts: int  # rows of a batch
    prompt_tokens: int
    new_tokens: int
    k: int = 10  # ARGS candidates
    samples: int = 8  # best-of-N
    response_tokens: int = 32  # scored responses (best-of-N scoring, policy accuracy)


WORK = {
    "full": Work(prompts=32, prompt_tokens=256, new_tokens=64),
    "quick": Work(prompts=16, prompt_tokens=128, new_tokens=24, samples=4),
    "smoke": Work(prompts=4, prompt_tokens=16, new_tokens=4, k=3, samples=2, response_tokens=4),
}


@dataclass
class Row:
    shape: str
    what: str
    tokens: int  # new tokens (decoders) or scored response tokens (scorers)
    seconds: float
    model_tokens: int  # tokens run through the model (prefill, steps, candidates, responses)
    tflops: float
    peak_fraction: float
    peak_memory_gib: float

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds


class HeadReward(RewardMethod):
    """A reward head on the backbone's final hidden states (the ``hidden`` capability ARGS's
    fast path reads), random and fixed: what it costs, not what it prefers."""

    name = "random-head"
    capabilities = frozenset({"hidden", "score"})

    def __init__(self, hidden: int, device: torch.device, dtype: torch.dtype) -> None:
        gen = torch.Generator().manual_seed(1)
        self.w = (torch.randn(hidden, generator=gen) / hidden**0.5).to(device, dtype)

    def reward_from_hidden(self, users: list[str], hidden: torch.Tensor) -> torch.Tensor:
        return hidden @ self.w.to(hidden.dtype)


def arm_step(lm: LM, rank: int = 8) -> Callable[..., torch.Tensor]:
    """An ARM's log-probabilities from the base hidden states, as ``arm`` computes them: a
    low-rank user shift of the state, then the base output head, then log-softmax."""
    hidden = lm.model.config.hidden_size
    gen = torch.Generator().manual_seed(2)
    a = (torch.randn(hidden, rank, generator=gen) / hidden**0.5).to(lm.device)
    b = (torch.randn(rank, hidden, generator=gen) / rank**0.5).to(lm.device)

    def step(users, prompts, tokens, h: torch.Tensor) -> torch.Tensor:
        shifted = h.float() + (h.float() @ a) @ b
        return torch.log_softmax(lm.logits_from_hidden(shifted), dim=-1)

    return step


def build_lm(shape: str, device: str) -> LM:
    from transformers import LlamaConfig, LlamaForCausalLM

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    config = LlamaConfig(**SHAPES[shape], max_position_embeddings=4096, pad_token_id=3,
                         eos_token_id=2, bos_token_id=None)  # fmt: skip
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(config).to(dtype)
    return LM(model, build_tokenizer(), label=shape, name=f"random {shape}-shaped Llama",
              source="random", fingerprint=f"random-{shape}", device=device)  # fmt: skip


def never(tokens: list[int]) -> bool:  # every row decodes all its new tokens
    return False


class Counter:
    """Tokens run through the model (its input ids), counted at the base model's input."""

    def __init__(self, lm: LM) -> None:
        self.n = 0
        lm.model.base_model.register_forward_pre_hook(self._count, with_kwargs=True)

    def _count(self, module, args, kwargs) -> None:
        ids = kwargs.get("input_ids") if "input_ids" in kwargs else args[0]
        self.n += int(ids.numel())


def measure(lm: LM, counter: Counter, run: Callable[[], int], peak: float, what: str) -> Row:
    run()  # warm-up: kernels chosen, caches allocated
    synchronize(lm)
    if lm.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(lm.device)
    lm.prefills.clear()  # the timed run prefills its prompts again
    counter.n = 0
    start = time.perf_counter()
    tokens = run()
    synchronize(lm)
    seconds = time.perf_counter() - start
    params = sum(p.numel() for p in lm.model.parameters())
    tflops = 2 * params * counter.n / seconds / 1e12
    memory = torch.cuda.max_memory_allocated(lm.device) / 2**30 if lm.device.type == "cuda" else 0
    return Row(lm.label, what, tokens, seconds, counter.n, tflops, tflops / peak, memory)


def synchronize(lm: LM) -> None:
    if lm.device.type == "cuda":
        torch.cuda.synchronize(lm.device)


def benchmarks(lm: LM, work: Work, peak: float) -> list[Row]:
    rng = np.random.default_rng(0)
    vocab = lm.model.config.vocab_size
    prompts = [rng.integers(4, vocab, work.prompt_tokens).tolist() for _ in range(work.prompts)]
    users = [f"user{n % 4}" for n in range(work.prompts)]
    reward = HeadReward(lm.model.config.hidden_size, lm.device, next(lm.model.parameters()).dtype)
    counter = Counter(lm)

    def args_run() -> int:
        rule = HiddenRule(lm, reward, users, work.k, 1.0)
        out = decode(KV.start(lm, prompts), rule, work.new_tokens, never)
        return sum(map(len, out))

    def genarm_run() -> int:
        keys = [(u, str(n)) for n, u in enumerate(users)]
        rule = GuidedRule(lm, arm_step(lm), keys, 1.0, None, [0] * len(keys))
        return sum(map(len, decode(KV.start(lm, prompts), rule, work.new_tokens, never)))

    def bon_run() -> int:
        # N seeded samples per prompt (LM's own sampled rule), then each sample's reward
        # from a teacher-forced pass over it on its prompt's cache
        seeds = [[n * 1000 + j for j in range(work.samples)] for n in range(len(prompts))]
        rows = len(prompts) * work.samples
        # best-of-N's sampling at its defaults (temperature 0.7, nucleus 0.9)
        bon = BoNOptions()
        out = lm._generate_batch(
            prompts, work.samples, work.new_tokens, bon.temperature, bon.top_p, seeds
        )
        samples = [s[: work.new_tokens] for per_prompt in out for s in per_prompt]
        kv = KV.start(lm, prompts)
        kv.select(torch.arange(len(prompts)).repeat_interleave(work.samples))
        states = lm._continue(kv, samples, hidden=True)
        last = torch.stack([s[-1] for s in states]).to(lm.device)
        rewards = reward.reward_from_hidden(["u"] * rows, last)
        assert rewards.shape == (rows,)
        return sum(map(len, samples))

    def policy_run() -> int:
        # a chosen and a rejected response per prompt: log-likelihoods of both
        responses = [
            rng.integers(4, vocab, work.response_tokens).tolist() for _ in range(2 * len(prompts))
        ]
        kv = KV.start(lm, prompts)
        kv.select(torch.arange(len(prompts)).repeat_interleave(2))
        logps = lm._continue(kv, responses, hidden=False)
        chosen, rejected = logps[0::2], logps[1::2]
        assert all(
            bool(torch.isfinite(c.sum() - r.sum())) for c, r in zip(chosen, rejected, strict=True)
        )
        return sum(map(len, responses))

    rows = []
    with torch.inference_mode():
        for what, run in (("ARGS", args_run), ("GenARM", genarm_run),
                          ("best-of-N", bon_run), ("policy accuracy", policy_run)):  # fmt: skip
            rows.append(measure(lm, counter, run, peak, what))
            print(line(rows[-1]), flush=True)
    return rows


def measured_peak(device: str) -> float:
    """TFLOP/s of a large bf16 matrix product (fp32 on the CPU), mean of timed repeats."""
    n, dtype, repeats = (8192, torch.bfloat16, 10) if device == "cuda" else (512, torch.float32, 3)
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    if device == "cuda":
        torch.cuda.synchronize()
    return 2 * n**3 * repeats / (time.perf_counter() - start) / 1e12


def equivalence(device: str) -> dict[str, Any]:
    """The tiny model on the CPU and on ``device`` (fp32 both): greedy and ARGS tokens, and
    teacher-forced log-likelihoods; then bf16 on ``device`` against fp32 on the CPU. (With
    ``--cpu-smoke`` ``device`` is the CPU: the code path only.)"""
    prompts = [f"Write a title for: paper about cats and dogs {n}" for n in range(8)]
    responses = [f"Cats and dogs, part {n}" for n in range(8)]
    cpu, gpu = build_tiny_lm(0), build_tiny_lm(0, device=device)
    low = build_tiny_lm(0, device=device, dtype=torch.bfloat16)
    greedy_same = cpu.generate(prompts, max_new_tokens=16) == gpu.generate(
        prompts, max_new_tokens=16
    )

    def args_tokens(lm: LM) -> list[list[int]]:
        reward = HeadReward(lm.model.config.hidden_size, lm.device, torch.float32)
        rule = HiddenRule(lm, reward, ["u"] * len(prompts), 5, 1.0)
        seqs = [lm.prompt_ids(p) for p in prompts]
        with torch.inference_mode():
            return decode(KV.start(lm, seqs), rule, 16, lm.finished)

    args_same = args_tokens(cpu) == args_tokens(gpu)
    base = cpu.response_logprobs(prompts, responses)

    def largest_difference(lm: LM) -> float:
        other = lm.response_logprobs(prompts, responses)
        return max(float(np.abs(a - b).max()) for a, b in zip(base, other, strict=True))

    fp32, bf16 = largest_difference(gpu), largest_difference(low)
    ok = greedy_same and args_same and fp32 <= TOLERANCE
    return {"device": device, "greedy_tokens_same": greedy_same, "args_tokens_same": args_same,
            "max_logprob_diff_fp32": fp32, "tolerance": TOLERANCE,
            "max_logprob_diff_bf16": bf16, "ok": ok}  # fmt: skip


def line(row: Row) -> str:
    return (f"{row.shape:<4} {row.what:<16} {row.rate:>10.1f} tok/s  {row.seconds:7.2f} s  "
            f"{row.tflops:8.2f} TFLOP/s  {100 * row.peak_fraction:5.1f}% of peak  "
            f"peak memory {row.peak_memory_gib:6.2f} GiB")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1b,7b", help="shapes to run: 1b, 7b (default both)")
    parser.add_argument("--quick", action="store_true", help="smaller workloads")
    parser.add_argument("--cpu-smoke", action="store_true", help="toy shapes on the CPU")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    if args.cpu_smoke:
        device, sizes, work = "cpu", ["toy"], WORK["smoke"]
    elif not torch.cuda.is_available():
        print("gpu_check: no CUDA device; run with --cpu-smoke to check the script on the CPU")
        return 2
    else:
        device, work = "cuda", WORK["quick" if args.quick else "full"]
        sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
        unknown = [s for s in sizes if s not in ("1b", "7b")]
        if unknown:
            parser.error(f"--sizes: unknown shape {', '.join(unknown)}; known: 1b, 7b")
    name = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    nominal = next((v for k, v in NOMINAL_BF16_TFLOPS.items() if k in name), None)
    peak = measured_peak(device)
    print(f"device: {name}; torch {torch.__version__}; "
          f"measured {'bf16' if device == 'cuda' else 'fp32'} matmul peak {peak:.1f} TFLOP/s"
          + (f"; nominal dense bf16 {nominal:.0f} TFLOP/s" if nominal else ""))  # fmt: skip
    print(f"workload: {asdict(work)}")
    rows: list[Row] = []
    for shape in sizes:
        lm = build_lm(shape, device)
        params = sum(p.numel() for p in lm.model.parameters()) / 1e9
        print(f"\n{shape}: {params:.2f}B parameters, {next(lm.model.parameters()).dtype}")
        rows += benchmarks(lm, work, peak)
        del lm
        if device == "cuda":
            torch.cuda.empty_cache()
    check = equivalence(device)
    against = "CUDA" if device == "cuda" else "CPU (smoke: the code path only)"
    print(f"\ntiny model, CPU against {against}: {json.dumps(check)}")
    print(f"total {time.perf_counter() - started:.0f} s")
    if args.json:
        args.json.write_text(json.dumps({
            "device": name, "torch": torch.__version__, "measured_peak_tflops": peak,
            "nominal_peak_tflops": nominal, "work": asdict(work),
            "rows": [{**asdict(r), "tokens_per_s": r.rate} for r in rows], "equivalence": check,
        }, indent=1))  # fmt: skip
    return 0 if check.get("ok", True) else 1


if __name__ == "__main__":
    sys.exit(main())
