"""How much faster do the model's passes run on packed oneDNN linears than on PyTorch's dense one?

``runtime/packed.py`` runs a float32 CPU model's linear layers with oneDNN on weights packed
once. This script loads the embedded SmolLM2-135M-Instruct as the runs do (packed where this
machine allows), and times, on the same model in the same run, with its linears packed and
with them dense (``F.linear``, MKL), alternating the two so that other load on the machine
falls on both:

- decoding steps: one token per row on a cache of ``--kv`` positions, the output head on each
  row's last hidden state (the pass every decoder runs), at 16 and 64 rows;
- a prefill: 16 prompts of ``--kv`` tokens through the body (prompts, teacher forcing).

Each figure is the best of ``--repeats`` rounds; printed with the two kernels' largest
difference on the outputs (float rounding) and the ratio dense / packed. The 2048 matmul rate is
printed beside, for the share of it each pass reaches.

Run: ``python benchmarks/bench_linear.py [--threads 2] [--kv 300] [--repeats 5]``.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

import torch
from bench_scoring import matmul_rate


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from pytest_prefalign.runtime import packed
    from pytest_prefalign.runtime.decoding import KV
    from pytest_prefalign.runtime.models import ModelSpec, load_lm

    lm = load_lm(ModelSpec("135m", "embedded:smollm2-135m"), device="cpu")
    if lm.linear_kernel != packed.ONEDNN:
        raise SystemExit(f"the model's linears run {lm.linear_kernel!r} here: nothing to compare")
    layers = packed.layers(lm.model)
    gen = torch.Generator().manual_seed(0)
    vocab = lm.model.config.vocab_size

    def prompts(rows: int) -> list[list[int]]:
        return [torch.randint(100, vocab, (args.kv,), generator=gen).tolist() for _ in range(rows)]

    def steps(rows: int) -> Callable[[], tuple[float, torch.Tensor]]:
        seqs, tokens = prompts(rows), torch.randint(100, vocab, (rows,), generator=gen)

        def run() -> tuple[float, torch.Tensor]:
            kv = KV.start(lm, seqs, then=args.steps)  # the same cache each round, not timed
            start = time.perf_counter()
            for _ in range(args.steps):
                out = lm.logits_from_hidden(kv.step(tokens))
            return time.perf_counter() - start, out

        return run

    def prefill() -> Callable[[], tuple[float, torch.Tensor]]:
        ids = torch.tensor(prompts(16))

        def run() -> tuple[float, torch.Tensor]:
            start = time.perf_counter()
            out = lm.model.base_model(input_ids=ids, use_cache=False).last_hidden_state
            return time.perf_counter() - start, out

        return run

    def dense(on: bool) -> None:
        for layer in layers:
            if on:
                del layer.forward  # the class's own forward: F.linear
            else:
                layer.forward = packed.packed_forward.__get__(layer)

    # the linear layers' FLOPs of each case: body (and output head) per position run
    body, head = lm.meter.per_token, 2 * lm.model.get_output_embeddings().weight.numel()
    cases = {
        f"decode step, 16 rows, KV {args.kv}": (steps(16), (body + head) * 16 * args.steps),
        f"decode step, 64 rows, KV {args.kv}": (steps(64), (body + head) * 64 * args.steps),
        f"prefill, 16 x {args.kv} tokens": (prefill(), body * 16 * args.kv),
    }
    rate = matmul_rate(2048, args.threads)
    print(f"threads {args.threads}, 2048 matmul {rate / 1e9:.0f} GFLOP/s")
    with torch.inference_mode():
        for name, (run, flops) in cases.items():
            times = {"packed": [], "dense": []}
            outs = {}
            for _ in range(args.repeats):
                for kind in ("packed", "dense"):
                    dense(kind == "dense")
                    seconds, outs[kind] = run()
                    times[kind].append(seconds)
            dense(False)
            best = {kind: min(ts) for kind, ts in times.items()}
            diff = (outs["packed"] - outs["dense"]).abs().max().item()
            shares = {kind: flops / seconds / rate for kind, seconds in best.items()}
            print(
                f"{name}: packed {best['packed'] * 1e3:.0f} ms ({shares['packed']:.0%} of the "
                f"matmul rate), dense {best['dense'] * 1e3:.0f} ms ({shares['dense']:.0%}); "
                f"dense / packed {best['dense'] / best['packed']:.2f}x; "
                f"largest difference {diff:.1e}"
            )
    print(f"load average {os.getloadavg()[0]:.2f}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--kv", type=int, default=300, help="prompt tokens per row")
    parser.add_argument("--steps", type=int, default=4, help="decoding steps per timed round")
    parser.add_argument("--repeats", type=int, default=5, help="rounds; the best is kept")
    return parser.parse_args()


if __name__ == "__main__":
    main()
