"""How much memory one process's passes take, with their bounds sized from the memory a run may
use (``runtime/memory.py``, ``pass_bounds``), against the fixed bounds they replace.

Each setting runs in a fresh process that loads the main job's model (SmolLM2-135M-Instruct),
with the prefill store off (``PREFALIGN_PREFILL_MB=0``, so that what is measured is the passes,
not what the store keeps), and does what the evaluation does with long prompts: it reads
two responses after each of ``--prompts`` prompts of about ``--tokens`` tokens (teacher
forcing, as the policy and fluency scores do) and writes a few tokens after each (generation,
as every decoder does). The settings:

- ``fixed``: the former bounds, ``window.PASS_TOKENS`` positions and ``LOGIT_POSITIONS``
  logits whatever the memory (the reference);
- ``machine``: sized from the memory this machine has available (the default);
- ``<N> GB``: sized from a run total of N GB shared by ``--workers`` processes, as
  ``--prefalign-memory N`` with ``-n workers`` sizes each xdist worker.

For each it prints the bounds, the peak resident memory of the process (``peak_memory.wait``),
the seconds of the work, and both as ratios to ``fixed``; and whether its log-probabilities and
texts equal the reference's (log-probabilities within 1e-4 nats, since batches of other sizes
sum in another order)::

    python benchmarks/pass_memory.py [--totals 24 8] [--workers 2] [--prompts 48] [--tokens 900]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from peak_memory import wait  # this folder is the script's own
from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
WORDS = (
    "we study how people write the titles of their papers and which words they choose when "
    "an abstract could be named in many ways by a model trained on their own earlier work"
).split()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--totals", type=float, nargs="*", default=[24.0, 8.0])
    parser.add_argument("--workers", type=int, default=2, help="processes sharing a total")
    parser.add_argument("--prompts", type=int, default=48)
    parser.add_argument("--tokens", type=int, default=900, help="about this many per prompt")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # a setting, run in this process
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    settings = [("fixed", {}), ("machine", {})]
    settings += [
        (f"{total:g} GB / {args.workers}", {"PREFALIGN_MEMORY_GB": f"{total:g}"})
        for total in args.totals
    ]
    rows, reference = [], None
    with tempfile.TemporaryDirectory() as folder:
        for name, env in settings:
            found = measure(args, name, env, Path(folder) / "out.json")
            if reference is None:
                reference = found
            same = equal(found, reference)
            rows.append(
                [
                    name,
                    found["positions"],
                    found["logits"],
                    f"{found['peak_gb']:.2f}",
                    f"{found['peak_gb'] / reference['peak_gb']:.2f}",
                    f"{found['seconds']:.1f}",
                    f"{found['seconds'] / reference['seconds']:.2f}",
                    "yes" if same else "NO",
                ]
            )
    print(
        f"SmolLM2-135M, {args.prompts} prompts of about {args.tokens} tokens, two responses "
        "read after each and 8 tokens written; the prefill store off"
    )
    heads = ["bounds", "positions", "logits", "peak GB", "x fixed", "seconds", "x fixed", "same"]
    print(tabulate(rows, heads))


def measure(args: argparse.Namespace, name: str, env: dict[str, str], out: Path) -> dict:
    """One setting in a fresh process: what it wrote, with its peak resident memory."""
    command = [sys.executable, __file__, "--child", name, "--prompts", str(args.prompts)]
    command += ["--tokens", str(args.tokens)]
    environ = {**os.environ, **env, "PREFALIGN_PREFILL_MB": "0", "PASS_MEMORY_OUT": str(out)}
    environ.pop("PYTEST_XDIST_WORKER_COUNT", None)
    if "PREFALIGN_MEMORY_GB" in env:
        environ["PYTEST_XDIST_WORKER_COUNT"] = str(args.workers)
    else:
        environ.pop("PREFALIGN_MEMORY_GB", None)
    process = subprocess.Popen(command, env=environ, cwd=ROOT)
    code, peak = wait(process)
    if code:
        raise SystemExit(f"{name}: the measuring process exited with {code}")
    found = json.loads(out.read_text())
    found["peak_gb"] = peak
    return found


def child(args: argparse.Namespace) -> None:
    import time

    import torch

    from pytest_prefalign.runtime import window
    from pytest_prefalign.runtime.models import load_lm
    from pytest_prefalign.runtime.sources import ModelSpec

    lm = load_lm(ModelSpec("135m", "embedded:smollm2-135m"))
    if args.child == "fixed":
        lm.bounds = lm.prefills.bounds = window.DEFAULT_BOUNDS
    words = args.tokens * 3 // 4  # about four tokens for three of these words
    prompts = [
        f"Paper {n}: " + " ".join(WORDS[(n * 7 + k) % len(WORDS)] for k in range(words))
        for n in range(args.prompts)
    ]
    responses = [f"Titles {n}: a short study of word choice" for n in range(len(prompts))]
    start = time.perf_counter()
    with torch.inference_mode():
        logprobs = lm.response_logprobs(
            prompts * 2, responses + responses[::-1], batch_size=len(prompts)
        )
        texts = lm.generate(prompts, max_new_tokens=8, batch_size=len(prompts))
    seconds = time.perf_counter() - start
    Path(os.environ["PASS_MEMORY_OUT"]).write_text(
        json.dumps(
            {
                "positions": lm.bounds.positions,
                "logits": lm.bounds.logits,
                "seconds": seconds,
                "logprobs": [lp.tolist() for lp in logprobs],
                "texts": texts,
            }
        )
    )


def equal(a: dict, b: dict) -> bool:
    """The same texts, and log-probabilities within 1e-4 nats of each other."""
    if a["texts"] != b["texts"] or len(a["logprobs"]) != len(b["logprobs"]):
        return False
    return all(
        len(x) == len(y) and all(abs(p - q) <= 1e-4 for p, q in zip(x, y, strict=True))
        for x, y in zip(a["logprobs"], b["logprobs"], strict=True)
    )


if __name__ == "__main__":
    main()
