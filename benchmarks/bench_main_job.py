"""The main job, cold and warm, with the time of each phase.

Runs ``pytest --prefalign suites/pref_lamp`` twice in fresh processes sharing one new, empty
cache folder: *cold* (nothing cached: the model is converted, the pairs built, every reward
method trained, every output generated, every pair scored) and *warm* (the same run again: each
test's results come from the cache). Prints, per phase, the seconds summed over the tests and,
where the phase processes tokens, tokens per second; the last line is

    main job: cold <C> s, warm <W> s, users <U>, pairs <P>, peak memory cold <M> GB, warm <N> GB

with the wall time of each pytest process (start-up and the summary included) and its peak
resident memory (``peak_memory.py``: of one process, the largest xdist worker under ``-n``).
The phases are the run file's per-test ``timings``: model (load, and convert once), data (the
suite's data), pairs (the pairs' writer loaded and its titles written, where the suite's pairs
need one), fit (reward training), guidance (the guidance strength chosen on validation items,
the fitting left out), generate (per decoder), rouge, judge (win rates over base, the
independent judge's training included), rm (reward scores of the test pairs) and policy (the
guided policy's log-likelihoods of the test pairs); "other" is the rest of each process
(start-up, collection, the analysis, the summary and the run file). A line on the model
follows: the token positions the cold run ran through its body (``forward_*`` in the timings,
the writer's passes included, and named apart: ``pairs_tokens``, ``pairs_flops``) and the least
time their FLOPs (body weights, attention, output head: ``runtime/meter.py``) take at this
machine's matmul rate, measured before the runs, after them and beside the layers' own shapes
at the same thread count, the best of the three (the floor): how far the cold time is from what
the work itself costs, and the share of it outside the passes. Then the same floor with the
body's linear layers at the rate this machine gives their own shapes (``shapes_rate``).

    python benchmarks/bench_main_job.py                 # the default user count
    python benchmarks/bench_main_job.py --limit 4 --methods base,icl,args[global_bt]
    python benchmarks/bench_main_job.py --dtype bfloat16  # --prefalign-dtype bfloat16

With ``--dtype bfloat16`` both runs pass ``--prefalign-dtype bfloat16`` (refused on a CPU
without native bf16) and the floor is at the bf16 matmul rate measured in the same run.

Run it on a machine doing nothing else if the figures are to be compared: it prints the load
average beside them, and how each run's OpenMP threads waited between ops (chosen before each
run as the run chooses it: spinning where the cores were idle, ``plumbing/waiting.py``; set
``PREFALIGN_WAIT`` or ``OMP_WAIT_POLICY`` to fix it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from tabulate import tabulate

from pytest_prefalign.runtime.meter import KINDS

ROOT = Path(__file__).resolve().parents[1]
PHASES = ("model", "data", "pairs", "fit", "guidance", "generate", "rouge", "judge", "rm", "policy")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, help="users (default: the plugin's default)")
    parser.add_argument("--methods", help="--prefalign-methods (default: the default methods)")
    parser.add_argument("--suite", default="suites/pref_lamp", help="the suite to run")
    parser.add_argument(
        "--dtype",
        choices=("float32", "bfloat16"),
        help="--prefalign-dtype of both runs, and the matmul rate of the floor (default: the "
        "ini's, fp32 on the CPU)",
    )
    parser.add_argument("--keep", type=Path, help="keep the cache and run files in this folder")
    args = parser.parse_args()

    if args.dtype == "bfloat16":  # refused by the runs: say so before timing anything
        from pytest_prefalign.runtime.devices import bf16_refusal

        refusal = bf16_refusal()
        if refusal is not None:
            sys.exit(refusal)
    folder = args.keep or Path(tempfile.mkdtemp(prefix="prefalign-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PREFALIGN_CACHE": str(folder / "cache")}
    env.setdefault("HF_HUB_OFFLINE", "1")
    if list((folder / "cache").glob("*")):
        sys.exit(f"{folder / 'cache'} is not empty: a cold run needs an empty cache")

    # the machine's matmul and memory rates before the runs too: on a shared machine they move
    # from minute to minute (136 to 191 GFLOP/s within the hour here), and the better of the
    # two measurements is the nearer to what the machine can do: the stricter floor
    before = machine_rate(args.dtype or "float32")
    runs = {}
    for phase in ("cold", "warm"):
        runs[phase] = timed_run(args, folder / f"{phase}.json", env)
        print(
            f"{phase}: {runs[phase]['wall']:.1f} s, peak resident memory "
            f"{runs[phase]['peak_gb']:.2f} GB; {runs[phase]['waiting']}",
            flush=True,
        )

    print(f"\nload average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    cold, warm = runs["cold"], runs["warm"]
    rows = []
    for phase in (*PHASES, "other"):
        c, w = cold["phases"].get(phase, 0.0), warm["phases"].get(phase, 0.0)
        tokens = cold["tokens"].get(phase)
        rate = f"{tokens / c:.0f}" if tokens and c > 0 else ""
        rows.append([phase, f"{c:.1f}", f"{w:.1f}", f"{tokens:.0f}" if tokens else "", rate])
    rows.append(["total (wall)", f"{cold['wall']:.1f}", f"{warm['wall']:.1f}", "", ""])
    print(tabulate(rows, ["phase", "cold s", "warm s", "tokens (cold)", "tok/s (cold)"]))
    print("\ngeneration per decoder (cold):")
    gen = [
        [d, f"{s:.1f}", f"{t:.0f}", f"{t / s:.0f}" if s else ""]
        for d, (s, t) in sorted(cold["decoders"].items())
    ]
    print(tabulate(gen, ["decoder", "seconds", "tokens", "tok/s"]))
    dtype = args.dtype or "float32"
    after = machine_rate(dtype)
    shapes = shapes_rate_of(cold, folder / "cache", dtype)  # the layers' own, then the square's
    beside = machine_rate(dtype)
    print_floor(cold, dtype, before, after, beside)
    if shapes:
        print_shapes(cold, shapes, beside[0])
    same = same_figures(cold["file"], warm["file"])
    print(f"\nwarm figures equal cold figures: {'yes' if same else 'NO'}")
    print(
        f"main job: cold {cold['wall']:.0f} s, warm {warm['wall']:.0f} s, "
        f"users {cold['users']}, pairs {cold['pairs']}, "
        f"peak memory cold {cold['peak_gb']:.1f} GB, warm {warm['peak_gb']:.1f} GB"
    )


def machine_rate(dtype: str) -> tuple[float, float]:
    """FLOP/s of this machine's 2048 matmul in ``dtype``, and the bytes/s it reads from
    memory, at the runs' thread count."""
    import torch

    threads = torch.get_num_threads()
    return matmul_rate(2048, threads, getattr(torch, dtype)), memory_rate(threads)


WARM_UP_S = 1.0  # seconds of matmuls before a rate is timed


def matmul_rate(n: int, threads: int, dtype: Any = None) -> float:
    """FLOP/s of an ``n x n`` matmul in ``dtype`` (float32 by default) at ``threads``
    threads: the best of several runs after ``WARM_UP_S`` of them. Timed at once after the
    main job's runs, the rate can come out at 90 GFLOP/s where the same process measures 129
    seconds later (a virtual machine's cores), so a rate is timed only on cores that have been
    at it a while."""
    import torch

    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(0)
    a, b = (torch.randn(n, n, generator=gen).to(dtype or torch.float32) for _ in range(2))
    seconds = warmed_best_time(lambda: torch.matmul(a, b), 10)
    return 2 * n**3 / seconds


def memory_rate(threads: int, gib: float = 1.0) -> float:
    """Bytes/s this machine reads from memory: the sum of a ``gib`` GiB float32 tensor, far
    larger than the CPU's caches, at ``threads`` threads (best of several runs)."""
    import torch

    torch.set_num_threads(threads)
    data = torch.ones(int(gib * 2**30) // 4)
    data.sum()  # warm up: the pages touched, the kernel loaded
    seconds = best_time(lambda: data.sum(), 5)
    return data.numel() * data.element_size() / seconds


def warmed_best_time(run: Any, repeats: int) -> float:
    """``best_time`` after ``WARM_UP_S`` seconds of ``run`` (the kernels loaded, the cores
    awake): what a rate measured beside another is timed with."""
    started = time.perf_counter()
    while time.perf_counter() - started < WARM_UP_S:
        run()
    return best_time(run, repeats)


def best_time(run: Any, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def print_floor(
    cold: dict[str, Any],
    dtype: str,
    before: tuple[float, float],
    after: tuple[float, float],
    beside: tuple[float, float],
) -> None:
    """The cold run's forward passes against this machine's matmul rate (the best of the
    measurements ``before`` the runs, ``after`` them and ``beside`` the layers' own shapes,
    after those: a low measurement cannot make the floor look nearer): their FLOPs (body
    weights, attention, output head) at that rate are the least time the same work can take,
    whatever the code around them. Then the same by kind of pass, with the least each kind must
    read from memory at the machine's read rate (measured beside it): a pass of few rows reads
    its weights for little arithmetic, so there the bytes bound its time more than the FLOPs."""
    forward = cold["forward"]
    if not forward["tokens"]:
        return
    rate = max(before[0], after[0], beside[0])
    bandwidth = max(before[1], after[1], beside[1])
    floor = forward["flops"] / rate
    print(
        f"\nmodel (cold): {forward['tokens']:.0f} token positions through the body in "
        f"{forward['s']:.1f} s ({forward['tokens'] / forward['s']:.0f} tok/s); their FLOPs at "
        f"this machine's {dtype} matmul rate ({rate / 1e9:.0f} GFLOP/s, the best of "
        f"{before[0] / 1e9:.0f} before the runs, {after[0] / 1e9:.0f} after and "
        f"{beside[0] / 1e9:.0f} beside the layers' shapes) take at least "
        f"{floor:.0f} s (the floor; body weights {forward['body_flops'] / rate:.0f} s, attention "
        f"{forward['attention_flops'] / rate:.0f} s, output head "
        f"{forward['head_flops'] / rate:.0f} s), {forward['flops'] / forward['s'] / rate:.0%} "
        f"of that rate achieved inside the passes; cold wall time "
        f"{cold['wall'] / floor:.2f}x the floor, {1 - forward['s'] / cold['wall']:.0%} of it "
        f"outside the model's passes"
    )
    if forward["pairs_tokens"]:
        print(
            f"  of which the pairs' writer: {forward['pairs_tokens']:.0f} token positions, "
            f"at least {forward['pairs_flops'] / rate:.0f} s at that rate"
        )
    print_kinds(cold, rate, bandwidth, (before[1], after[1], beside[1]))


SHAPE_ROWS = 2048  # rows of the shapes' measurement: a large block, their best case


def layer_shapes(config: dict[str, Any]) -> list[tuple[int, int]]:
    """``(in, out)`` of each linear layer of one decoder layer of a Llama-style model (query,
    key, value, output; gate, up, down), from its ``config.json``."""
    hidden, inner = config["hidden_size"], config["intermediate_size"]
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    kv = config.get("num_key_value_heads") or heads
    attention = [(hidden, heads * head_dim), (hidden, kv * head_dim), (hidden, kv * head_dim)]
    return [
        *attention,
        (heads * head_dim, hidden),
        (hidden, inner),
        (hidden, inner),
        (inner, hidden),
    ]


def shapes_rate(shapes: list[tuple[int, int]], dtype: str, rows: int = SHAPE_ROWS) -> float:
    """FLOP/s of one decoder layer's linear layers at ``rows`` rows, run as a run runs them
    (``runtime/packed.py``: oneDNN on packed weights where available, else ``F.linear``), at the
    runs' thread count (best of several, after a warm-up as the matmul's)."""
    import torch

    from pytest_prefalign.runtime import packed

    gen = torch.Generator().manual_seed(0)
    layer = torch.nn.Sequential(*(torch.nn.Linear(i, o, bias=False) for i, o in shapes))
    layer = layer.to(getattr(torch, dtype))
    packed.pack(layer)
    inputs = {i: torch.randn(rows, i, generator=gen).to(getattr(torch, dtype)) for i, _ in shapes}

    def run() -> None:
        for linear, (i, _) in zip(layer, shapes, strict=True):
            linear(inputs[i])

    with torch.inference_mode():  # the first run packs the weights; timed as the matmul is
        seconds = warmed_best_time(run, 5)
    return sum(2 * rows * i * o for i, o in shapes) / seconds


def shapes_rate_of(cold: dict[str, Any], cache: Path, dtype: str) -> float | None:
    """``shapes_rate`` of the cold run's 135m model (its ``config.json`` in the run's cache),
    or None where the run ran no pass or its model is not there."""
    weights = cold["file"].get("models", {}).get("135m", {}).get("weights")
    config = cache / "models" / str(weights) / "config.json"
    if not cold["forward"]["tokens"] or not config.is_file():
        return None
    return shapes_rate(layer_shapes(json.loads(config.read_text())), dtype)


def print_shapes(cold: dict[str, Any], rate: float, square: float) -> None:
    """The body's linear layers at ``rate``, the one this machine gives their own shapes (a
    large block of ``SHAPE_ROWS`` rows, packed as a run packs them), beside ``square``, the 2048
    matmul's measured after it: a model whose layers are narrow may run them below the square
    matmul's rate however they are batched, so this floor, body weights at that rate and
    attention and head at the matmul's, is the one the passes could reach."""
    forward = cold["forward"]
    floor = (
        forward["body_flops"] / rate + (forward["attention_flops"] + forward["head_flops"]) / square
    )
    print(
        f"\nthe body's linear layers at their own shapes ({SHAPE_ROWS} rows, packed as a run "
        f"packs them): {rate / 1e9:.0f} GFLOP/s, {rate / square:.0%} of the 2048 matmul "
        f"measured after them ({square / 1e9:.0f} GFLOP/s); at that rate the body weights take "
        f"{forward['body_flops'] / rate:.0f} s, and with attention and head at the matmul's the "
        f"floor is {floor:.0f} s: cold wall time {cold['wall'] / floor:.2f}x it, the passes "
        f"{forward['s'] / floor:.2f}x it"
    )
    if forward["linear_s"]:
        print(
            f"inside the passes the body's linear layers took {forward['linear_s']:.1f} s (their "
            f"FLOPs take {forward['body_flops'] / rate:.0f} s at that rate: "
            f"{forward['body_flops'] / rate / forward['linear_s']:.0%} of it achieved), the rest "
            f"of the passes (attention, norms, activations, the output head) "
            f"{forward['s'] - forward['linear_s']:.1f} s"
        )


def print_kinds(
    cold: dict[str, Any], rate: float, bandwidth: float, reads: tuple[float, float, float]
) -> None:
    """The passes by kind (``runtime/meter.py``): seconds against the FLOP floor and against
    the bytes each kind must read at ``bandwidth``; the larger of the two per kind, summed, is
    a floor that counts memory as well."""
    forward = cold["forward"]
    rows, both = [], 0.0
    for kind in KINDS:
        seconds = forward[f"{kind}_s"]
        if not forward[f"{kind}_passes"]:
            continue
        by_flops = forward[f"{kind}_flops"] / rate
        by_bytes = forward[f"{kind}_bytes"] / bandwidth
        both += max(by_flops, by_bytes)
        rows.append(
            [
                kind,
                f"{forward[f'{kind}_passes']:.0f}",
                f"{forward[f'{kind}_tokens']:.0f}",
                f"{seconds:.1f}",
                f"{forward[f'{kind}_linear_s']:.1f}",
                f"{by_flops:.1f}",
                f"{by_bytes:.1f}",
                f"{max(by_flops, by_bytes) / seconds:.0%}" if seconds else "",
            ]
        )
    if not rows:
        return
    print(
        f"\npasses by kind (cold; memory read at {bandwidth / 1e9:.1f} GB/s, the best of "
        f"{', '.join(f'{r / 1e9:.1f}' for r in reads)} before the runs, after and beside):"
    )
    header = [
        "kind",
        "passes",
        "positions",
        "seconds",
        "linears s",
        "FLOPs s",
        "bytes s",
        "of the larger",
    ]
    print(tabulate(rows, header))
    print(
        f"floor counting memory too: {both:.0f} s (per kind the larger); cold wall time "
        f"{cold['wall'] / both:.2f}x it"
    )


def timed_run(args: argparse.Namespace, out: Path, env: dict[str, str]) -> dict[str, Any]:
    command = [sys.executable, "-m", "pytest", "--prefalign", args.suite, "-p", "no:cacheprovider"]
    command += ["-q", "--prefalign-json", str(out)]
    if args.limit:
        command += ["--prefalign-limit", str(args.limit)]
    if args.methods:
        command += ["--prefalign-methods", args.methods]
    if args.dtype:
        command += ["--prefalign-dtype", args.dtype]
    from peak_memory import wait  # this folder is the script's own

    from pytest_prefalign.plumbing import waiting as waits

    # how its OpenMP threads wait, chosen here as the run would choose it (the run's header,
    # which says it, is not printed under -q)
    env = dict(env)
    waiting = waits.choose(env).header().removeprefix("prefalign: ")
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as output:
        process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT, text=True
        )
        returncode, peak = wait(process)
        wall = time.perf_counter() - started
        output.seek(0)
        text = output.read()
    if returncode != 0:
        sys.exit(f"{' '.join(command)} exited {returncode}:\n{text[-4000:]}")
    run_file = json.loads(out.read_text())
    phases: dict[str, float] = defaultdict(float)
    tokens: dict[str, float] = defaultdict(float)
    decoders: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    forward: dict[str, float] = defaultdict(float)
    users = pairs = 0
    for row in run_file["results"]:
        timings = row["timings"]
        for name in ("tokens", "flops", "body_flops", "attention_flops", "head_flops", "s"):
            forward[name] += timings.get(f"forward_{name}", 0.0)
        forward["linear_s"] += timings.get("forward_linear_s", 0.0)
        for kind in KINDS:
            for name in ("passes", "tokens", "flops", "bytes", "s", "linear_s"):
                forward[f"{kind}_{name}"] += timings.get(f"forward_{kind}_{name}", 0.0)
        for name in ("tokens", "flops"):
            forward[f"pairs_{name}"] += timings.get(f"pairs_{name}", 0.0)
        for phase in PHASES:
            phases[phase] += timings.get(f"{phase}_s", 0.0)
            tokens[phase] += timings.get(f"{phase}_tokens", 0.0)
        if "generate_tokens" in timings:
            decoders[row["method"]][0] += timings["generate_s"]
            decoders[row["method"]][1] += timings["generate_tokens"]
        users, pairs = max(users, row["n_users"]), max(pairs, row["n_pairs"])
    phases["other"] = wall - sum(phases[p] for p in PHASES)
    return {
        "wall": wall,
        "peak_gb": peak,
        "waiting": waiting,
        "phases": phases,
        "tokens": tokens,
        "decoders": decoders,
        "forward": forward,
        "users": users,
        "pairs": pairs,
        "file": run_file,
    }


def same_figures(a: dict[str, Any], b: dict[str, Any]) -> bool:
    def figures(run_file: dict[str, Any]) -> dict[str, Any]:
        return {(r["method"], r["size"]): (r["metrics"], r["ci"]) for r in run_file["results"]}

    return figures(a) == figures(b)


if __name__ == "__main__":
    main()
