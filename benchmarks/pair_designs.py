"""How the design of Pref-LaMP's pairs decides what RM and policy accuracy can show.

Every design of the suite side by side, on the first ``--users`` authors after ``--offset`` in
the data's ``authors.json`` (offset 0: the README main job's authors; a larger offset: authors
the main job and the findings never read, a stand-in for data the designs were not tuned on):

- RM accuracy of the five Bradley-Terry-style reward methods on the test pairs (macro), and
  the ceiling share: the largest share of users at RM accuracy 1.0 over the methods;
- the personal gap: each user's RM accuracy under the best personal method minus under
  ``global_bt`` (which knows nobody), its mean over users with a 95% interval (users resampled);
- base policy accuracy (the default sum of token log-likelihoods, and the mean), its interval:
  a design in which it is far from 0.5 is decided by the base model, not by any reward;
- how many pairs' sides differ in length beyond the design's slack, and the time to build the
  pairs (from an empty cache, as the first run pays it).

    python benchmarks/pair_designs.py [--users 8] [--offset 0] [--data ../shared/data]

``--comparisons`` measures instead how much a user tells: the style design's pairings of the
writer's titles (one pair per test paper, or every length-matched pair of its candidates, at
3 or 6 samples per prompt, or every paper a test item once by cross-fitting over 2 folds, a run
per fold, pooled per user), each run through the real plugin (``pytest --prefalign``, every
default method at its working point, one cache shared by the pairings), and for every pair of
methods the per-user standard error of their paired difference in RM accuracy and in policy
accuracy (the standard deviation over users of the per-user difference, over the square root of
the users), against the one-pair design's; with the writer's cost of each (its prompts and
titles, and the seconds of the data phase where it wrote).

    python benchmarks/pair_designs.py --comparisons [--users 8] [--offset 100] [--scoring-only]

The standard errors of a paired method difference, two of them:

- **over users**: the standard deviation over users of the per-user difference, over the
  square root of the users. It holds two parts: the noise of each user's own few pairs, and
  the real spread of the difference from one person to the next, which only more users
  narrow;
- **per user**: the noise of a user's own difference alone, the root of its variance
  averaged over users, each user's variance the clustered one of a mean (the pairs of one
  paper, its rivals or matched candidates, a cluster: they share the abstract and the chosen
  side); it is what more comparisons per user can narrow.

A pairing with k rivals also gives the rows of its first 1 to k - 1 rivals alone: the pairs of
the same design with fewer rivals, scored by the same fitted methods, so the rows differ in
nothing but the further rivals' pairs. ``--tables JSON...`` prints the tables of kept
``--comparisons --json`` files again.

``--decompose RUN...`` splits, in kept run files, the spread over users of the methods'
per-user differences into the noise of each user's own pairs and the real spread between users
(which no design of more pairs per user narrows):

    python benchmarks/pair_designs.py --decompose benchmarks/findings-runs/pref_lamp-135m.json.gz

``--scoring-only`` runs the guidance at its fixed constants and writes one token per output: RM
and policy accuracy are teacher-forced on the pairs, so they are those of a full run at those
constants, at a fraction of its cost (ROUGE and the win rates are not read).

Real models (the embedded SmolLM2-135M-Instruct evaluates and trains the reward methods; the
writer designs need Gemma-3-270M installed), real data; the figures go into docs/suites.md.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402

DESIGNS = {  # label -> suite options
    "generated (the 135M's own title)": {"negatives": "generated"},
    "other_author (another abstract's title)": {"negatives": "other_author"},
    "written (real title vs the writer's)": {"negatives": "written"},
    "style (the writer's, own vs others' examples)": {"negatives": "style"},
}
PAIRINGS = {  # label -> suite options (the style design)
    "nearest": {"writer_pairs": "nearest"},
    "matched": {"writer_pairs": "matched"},
    "matched, 6 samples": {"writer_pairs": "matched", "writer_samples": "6"},
    # every paper a test item once: a run per fold, the folds' pairs pooled per user
    "nearest, 2 folds": {"writer_pairs": "nearest", "folds": "2"},
    # each test paper against 6 people's titles, in one run (the time split; the rows of its
    # first 1 to 5 rivals come with it)
    "nearest, 6 rivals": {"writer_pairs": "nearest", "writer_rivals": "6"},
    # and each test paper against 3 people's titles (its first rivals' rows come with it)
    "nearest, 2 folds, 3 rivals": {"writer_pairs": "nearest", "folds": "2", "writer_rivals": "3"},
}
PERSONAL = ("per_user_bt", "lore", "vpl", "pal")
METHODS = ("global_bt", *PERSONAL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument("--offset", type=int, default=0, help="authors skipped first")
    parser.add_argument(
        "--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data")
    )
    parser.add_argument("--designs", nargs="*", default=list(DESIGNS), choices=list(DESIGNS))
    parser.add_argument("--cache", help="a cache folder kept between runs (default: a new one)")
    parser.add_argument("--json", help="write the figures to this file as well")
    parser.add_argument(
        "--comparisons",
        nargs="*",
        choices=list(PAIRINGS),
        help="measure the pairings' standard errors instead (default: all of them)",
    )
    parser.add_argument(
        "--scoring-only",
        action="store_true",
        help="with --comparisons: the guidance at its fixed constants and one new token per "
        "output (the pairs' figures without the generations' cost)",
    )
    parser.add_argument(
        "--decompose",
        nargs="+",
        metavar="RUN",
        help="split the spread over users of the methods' per-user differences in kept run "
        "files (.json or .json.gz) into the per-user noise and the spread between users",
    )
    parser.add_argument(
        "--tables",
        nargs="+",
        metavar="JSON",
        help="print the tables of kept --comparisons --json files (.json or .json.gz) again "
        "(with --data and --offset as they were run, for the writer's prompts where a file "
        "lacks them)",
    )
    args = parser.parse_args()
    if args.tables:
        tables(args.tables, PAIRINGS, args)
        return
    if args.decompose:
        decompose_runs(args.decompose)
        return
    if args.comparisons is not None:
        measure_pairings(args, {k: PAIRINGS[k] for k in args.comparisons or PAIRINGS})
        return
    from tabulate import tabulate

    from pytest_prefalign import cache

    with tempfile.TemporaryDirectory() as tmp:
        data_dir = authors_slice(Path(args.data), Path(tmp), args.offset, args.users)
        folder = Path(args.cache) if args.cache else Path(tmp) / "cache"
        with cache.using(cache.Disk(folder)):
            rows = [measure(label, DESIGNS[label], data_dir, folder) for label in args.designs]
    print(
        f"authors {args.offset + 1}-{args.offset + args.users} of {args.data}/acl-anthology"
        f"/authors.json"
    )
    print(tabulate([table_row(r) for r in rows], headers=HEADERS, disable_numparse=True))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")


HEADERS = [
    "design",
    "users",
    "train / test pairs",
    "RM acc (" + " ".join(METHODS) + ")",
    "ceiling share",
    "personal gap [95%]",
    "base policy acc, sum [95%]",
    "(mean)",
    "length unmatched",
    "build s",
]


def authors_slice(data: Path, tmp: Path, offset: int, users: int) -> Path:
    """A data folder whose ``authors.json`` lists authors ``offset`` to ``offset + users`` of
    ``data``'s (the papers are the same files)."""
    source = data / "acl-anthology"
    target = tmp / "data" / "acl-anthology"
    target.mkdir(parents=True)
    authors = json.loads((source / "authors.json").read_text(encoding="utf-8"))
    chosen = authors[offset : offset + users]
    if len(chosen) < users:
        sys.exit(f"{source}/authors.json has {len(authors)} authors, fewer than asked")
    (target / "authors.json").write_text(json.dumps(chosen), encoding="utf-8")
    for path in source.glob("papers-*.jsonl"):
        shutil.copyfile(path, target / path.name)
    return target.parent


def measure(label: str, options: dict[str, str], data_dir: Path, folder: Path) -> dict[str, Any]:
    from prefalign_suites.pref_lamp.suite import PrefLamp
    from pytest_prefalign.runtime.models import ModelSpec, load_lm

    lm = load_lm(ModelSpec("135m", "embedded:smollm2-135m"), device="cpu")
    suite = PrefLamp()
    start = time.perf_counter()
    data = suite.load(data_dir, limit=None, options=options)
    if not data.train_pairs:
        source = suite.writer(data)
        model = load_lm(ModelSpec("writer", source), device="cpu") if source else lm
        suite.build_pairs(data, model, folder / "pairs")
    build_s = time.perf_counter() - start
    print(f"{label}: pairs built in {build_s:.0f} s", file=sys.stderr, flush=True)
    figures = {
        "design": label,
        "options": options,
        "users": len({p.user for p in data.test_pairs}),
        "train_pairs": len(data.train_pairs),
        "test_pairs": len(data.test_pairs),
        "build_s": round(build_s, 1),
        "length_unmatched": unmatched(data),
        "writer": data.provenance.get("writer"),
    }
    figures.update(rm_figures(lm, data, folder / label.split()[0]))
    figures.update(base_figures(lm, data))
    return figures


def rm_figures(lm: Any, data: Any, folder: Path) -> dict[str, Any]:
    """Each reward method's RM accuracy, the ceiling share and the personal gap."""
    from prefalign_methods.rewards import global_bt, lore, pal, per_user_bt, vpl
    from pytest_prefalign.analysis.metrics import accuracy, pair_outcomes
    from pytest_prefalign.analysis.stats import paired_bootstrap
    from pytest_prefalign.api import Batch

    classes = {
        "global_bt": global_bt.GlobalBT,
        "per_user_bt": per_user_bt.PerUserBT,
        "lore": lore.LoRe,
        "vpl": vpl.VPL,
        "pal": pal.PAL,
    }
    test = data.test_pairs
    users = [p.user for p in test]
    per_user: dict[str, dict[str, float]] = {}
    macro: dict[str, float] = {}
    for name in METHODS:
        method = classes[name]()
        method.fit(lm, data.train_pairs, folder / name)
        both = Batch.of_pairs(test, "chosen") + Batch.of_pairs(test, "rejected")
        scores = method.score(lm, both)
        acc = accuracy(pair_outcomes(scores[: len(test)], scores[len(test) :]), users)
        per_user[name], macro[name] = acc.per_user, acc.macro
    best = max(PERSONAL, key=lambda m: macro[m])
    gap, interval, _ = paired_bootstrap(per_user["global_bt"], per_user[best])
    ceiling = max(np.mean([v == 1.0 for v in per_user[m].values()]) for m in METHODS)
    return {
        "rm_acc": macro,
        "ceiling_share": float(ceiling),
        "best_personal": best,
        "personal_gap": gap,
        "personal_gap_ci": list(interval),
    }


def base_figures(lm: Any, data: Any) -> dict[str, Any]:
    """Base policy accuracy by the sum (the default) and the mean of token log-likelihoods."""
    from prefalign_methods.decoders.base import reduce_logprobs
    from pytest_prefalign.analysis.metrics import accuracy, bootstrap_ci, pair_outcomes

    test = data.test_pairs
    users = [p.user for p in test]
    prompts = [p.prompt for p in test]
    chosen = lm.response_logprobs(prompts, [p.chosen for p in test])
    rejected = lm.response_logprobs(prompts, [p.rejected for p in test])
    found: dict[str, Any] = {}
    for how in ("sum", "mean"):
        outcomes = pair_outcomes(reduce_logprobs(chosen, how), reduce_logprobs(rejected, how))
        found[f"base_{how}"] = accuracy(outcomes, users).macro
        found[f"base_{how}_ci"] = list(bootstrap_ci(outcomes, users))
    return found


def unmatched(data: Any) -> str:
    """Pairs whose sides differ in length beyond the design's slack, of all pairs."""
    pairs = [*data.train_pairs, *data.test_pairs]
    counted = data.provenance.get("length_unmatched")
    if counted is None:
        slack = data.provenance.get("length_slack")
        if not isinstance(slack, int):
            return "no rule"
        counted = sum(abs(len(p.chosen.split()) - len(p.rejected.split())) > slack for p in pairs)
    return f"{counted} / {len(pairs)}"


def table_row(r: dict[str, Any]) -> list[str]:
    def ci(pair: list[float]) -> str:
        return f"[{pair[0]:.2f}, {pair[1]:.2f}]"

    return [
        r["design"],
        str(r["users"]),
        f"{r['train_pairs']} / {r['test_pairs']}",
        " ".join(f"{r['rm_acc'][m]:.2f}" for m in METHODS),
        f"{r['ceiling_share']:.2f}",
        f"{r['personal_gap']:+.2f} {ci(r['personal_gap_ci'])} ({r['best_personal']})",
        f"{r['base_sum']:.2f} {ci(r['base_sum_ci'])}",
        f"{r['base_mean']:.2f}",
        r["length_unmatched"],
        f"{r['build_s']:.0f}",
    ]


# -------------------------------------------------------------------------------------------
# --comparisons, --tables, --decompose: the pairings' standard errors
# -------------------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
METRICS = {"rm_acc": "rm_correct", "policy_acc": "policy_correct"}
SUFFIX = re.compile(r"(~\d+|#\d+-\d+)$")  # a rival's or a matched pair's, after the paper


def measure_pairings(args: argparse.Namespace, pairings: dict[str, dict[str, str]]) -> None:
    keep = Path(args.cache) if args.cache else Path(tempfile.mkdtemp(prefix="prefalign-pairs-"))
    keep.mkdir(parents=True, exist_ok=True)
    data_dir = rotated(Path(args.data), keep / "data", args.offset)
    runs = {}
    for label, options in pairings.items():
        runs[label] = run(
            label, options, data_dir, keep, args.users, scoring_only=args.scoring_only
        )
        print(f"{label}: {runs[label]['wall_s']:.0f} s", file=sys.stderr, flush=True)
        runs[label]["writer_prompts"] = writer_prompts(data_dir, options, args.users)
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1) + "\n")
    print(
        f"authors from position {args.offset + 1} of {args.data}/acl-anthology/authors.json, "
        f"the first {args.users} the suite's rules keep"
    )
    print_table(runs, pairings, data_dir, args.users)


def print_table(
    runs: dict[str, Any], pairings: dict[str, dict[str, str]], data_dir: Path, users: int
) -> None:
    """The table of the runs, with the rows of a rivals run's first rivals, against the first
    run's errors."""
    from tabulate import tabulate

    runs = dict(runs)
    for label in list(runs):
        for m in range(1, int(pairings.get(label, {}).get("writer_rivals", 1))):
            fewer = first_rivals(runs[label], m)
            options = {**pairings[label], "writer_rivals": str(m)}
            fewer["writer_prompts"] = writer_prompts(data_dir, options, users)
            runs[f"{label.rsplit(', ', 1)[0]}, its first {m} rival(s)"] = fewer
    first = next(iter(runs))
    rows = [pairing_row(label, runs[label], runs[first]) for label in runs]
    print(tabulate(rows, headers=PAIRING_HEADERS, disable_numparse=True))


def tables(paths: list[str], pairings: dict[str, dict[str, str]], args: argparse.Namespace) -> None:
    """``pair_designs.py --tables``: the tables of kept ``--json`` files again (the rows a
    rivals run derives are made anew, by this code); a file without the writer's prompts gets
    them counted on ``args.data`` from ``args.offset`` (as it was run)."""
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = rotated(Path(args.data), Path(tmp), args.offset)
        for path in paths:
            runs = read_json(path)
            kept = {label: r for label, r in runs.items() if label in pairings}
            for label, r in kept.items():
                if r.get("writer_prompts") is None:
                    r["writer_prompts"] = writer_prompts(data_dir, pairings[label], args.users)
            print(path)
            print_table(kept, pairings, data_dir, args.users)


def read_json(path: str) -> Any:
    """A kept JSON file, gzipped (``.gz``) or not."""
    import gzip

    raw = Path(path).read_bytes()
    return json.loads(gzip.decompress(raw) if path.endswith(".gz") else raw)


def writer_prompts(data_dir: Path, options: dict[str, str], users: int) -> int:
    """The prompts the writer answers for a pairing's pairs when none is released: every
    fold's briefs, each prompt once (``writer._prompts``: rivals on test briefs only)."""
    from unittest import mock

    from prefalign_suites import pref_lamp
    from prefalign_suites.pref_lamp import release, writer

    folds = int(options.get("folds", 1))
    asked: set[str] = set()
    with mock.patch.object(release, "matching", return_value=None):  # count what is released too
        for k in range(folds):
            chosen = {**options, **({"fold": str(k)} if folds > 1 else {})}
            suite = pref_lamp.PrefLamp()
            data = suite.load(data_dir, limit=users, options=chosen)
            writing, (train, test), _ = suite._briefs[id(data)]
            tested = {b.source for b in test}
            for brief in (*train, *test):
                asked.update(writer._prompts(brief, writing, brief.source in tested))
    return len(asked)


PAIRING_HEADERS = [
    "pairing",
    "users",
    "test pairs / user",
    "writer prompts",
    "writer titles / prompt",
    "writer s",
    "RM acc SE over users, median [range] over method pairs",
    "x nearest",
    "per user",
    "x nearest",
    "policy acc SE over users",
    "x nearest",
    "per user",
    "x nearest",
    "base policy acc [95%]",
    "global_bt RM acc [95%]",
    "length unmatched",
]


def rotated(data: Path, target: Path, offset: int) -> Path:
    """A data folder whose ``authors.json`` starts at author ``offset`` and holds every author
    (the ones before it last): the suite's rules see every author, as in any run, and the run's
    users are the first kept from ``offset`` on."""
    source = data / "acl-anthology"
    folder = target / "acl-anthology"
    folder.mkdir(parents=True, exist_ok=True)
    authors = json.loads((source / "authors.json").read_text(encoding="utf-8"))
    (folder / "authors.json").write_text(
        json.dumps(authors[offset:] + authors[:offset]), encoding="utf-8"
    )
    for path in source.glob("papers-*.jsonl"):
        if not (folder / path.name).exists():
            (folder / path.name).symlink_to(path.resolve())
    return target


# The pairs' figures without the generations: guidance at its fixed constants (no strength
# chosen on generated validation outputs) and one new token per output. RM and policy accuracy
# are teacher-forced on the pairs, so they are what a full run computes at those constants; ROUGE
# and the win rates of such a run mean nothing and are not read.
SCORING_ONLY = ["--prefalign-guidance", "fixed", "--prefalign-option", "max_new_tokens=1"]


def run(
    label: str,
    options: dict[str, str],
    data_dir: Path,
    keep: Path,
    users: int,
    *,
    scoring_only: bool = False,
) -> dict[str, Any]:
    """One pairing through ``pytest --prefalign``: its per-user figures and costs. A
    cross-fitting pairing (``folds`` > 1) runs once per fold, and its figures pool the folds'
    pairs per user (every paper a test item once)."""
    folds = int(options.get("folds", 1))
    started = time.perf_counter()
    files = []
    for k in range(folds):
        name, chosen = label, options
        if folds > 1:
            name, chosen = f"{label}, fold {k}", options | {"fold": str(k)}
        files.append(one_run(name, chosen, data_dir, keep, users, scoring_only=scoring_only))
    pooled = {
        "pairs": [record for f in files for record in f["pairs"]],
        "results": [row for f in files for row in f["results"]],
        "length_unmatched": sum(row_unmatched(f["results"][0]) for f in files),  # every fold's
    }
    return figures(pooled, time.perf_counter() - started)


def one_run(
    label: str,
    options: dict[str, str],
    data_dir: Path,
    keep: Path,
    users: int,
    *,
    scoring_only: bool,
) -> dict[str, Any]:
    """The run file of one ``pytest --prefalign`` run of the suite with ``options``."""
    slug = label.replace(", ", "-").replace(" ", "_")
    suite = keep / "suites" / slug
    suite.mkdir(parents=True, exist_ok=True)
    lines = [f'{key} = "{value}"' for key, value in options.items()]
    (suite / "suite.toml").write_text(
        '[suite]\nname = "pref_lamp"\n\n[options]\n' + "\n".join(lines) + "\n"
    )
    out = keep / f"{slug}.json"
    env = {**os.environ, "PREFALIGN_CACHE": str(keep / "cache"), "HF_HUB_OFFLINE": "1"}
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    command = [sys.executable, "-m", "pytest", "--prefalign", str(suite), "-p", "no:cacheprovider"]
    command += ["-q", "--prefalign-data", str(data_dir), "--prefalign-json", str(out)]
    command += ["--prefalign-limit", str(users)]
    if scoring_only:
        command += SCORING_ONLY
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} exited {done.returncode}:\n{done.stdout[-4000:]}")
    return json.loads(out.read_text())


Outcomes = dict[str, dict[str, list[Any]]]  # metric -> method -> [[pair id, user, value]]


def figures(run_file: dict[str, Any], wall: float) -> dict[str, Any]:
    """Per metric, every method's pair outcomes and per-user value, and the pairs' design."""
    outcomes: Outcomes = {metric: {} for metric in METRICS}
    for metric, field in METRICS.items():
        for record in run_file["pairs"]:
            if record[field] is not None:
                found = outcomes[metric].setdefault(record["method"], [])
                found.append([record["pair_id"], record["user"], float(record[field])])
    row = run_file["results"][0]
    provenance = row["data"].get("provenance", row["data"])
    pairs = {r["pair_id"] for r in run_file["pairs"]}
    users = {r["user"] for r in run_file["pairs"]}
    options = provenance.get("writer_options", {})
    return {
        "outcomes": distinct(outcomes),
        "per_user": per_user_values(outcomes),
        "users": len(users),
        "pairs": len(pairs),
        "writer_titles": options.get("samples"),
        # the pairs' writer: its own phase (pairs_s), or within data_s in runs made before it
        "data_s": max(
            r["timings"].get("pairs_s", r["timings"].get("data_s", 0.0))
            for r in run_file["results"]
        ),
        "length_unmatched": run_file.get("length_unmatched", row_unmatched(row)),
        "wall_s": wall,
    }


def distinct(outcomes: Outcomes) -> Outcomes:
    """Each metric's outcomes of the methods that are methods of their own for it: RM accuracy
    once per reward method (a reward method ranks the pairs the same under every decoder, so
    ``args[pal]`` and ``bon[pal]`` are one method there), policy accuracy every method's (two
    decoders may agree on every pair and are still two methods: dropping one because its
    outcomes happen to equal another's would make the set of method pairs behind a median
    depend on the run)."""
    found: Outcomes = {}
    for metric, by_method in outcomes.items():
        if metric != "rm_acc":
            found[metric] = dict(by_method)
            continue
        kept: dict[str, list[Any]] = {}
        rewards: set[str] = set()
        for method, records in by_method.items():
            reward = reward_of(method)
            if reward not in rewards:
                rewards.add(reward)
                kept[method] = records
        found[metric] = kept
    return found


def reward_of(method: str) -> str:
    """The reward method of ``decoder[reward]`` (the method itself where it names none)."""
    from pytest_prefalign.registry import MethodName

    return MethodName.parse(method).reward or method


def per_user_values(outcomes: Outcomes) -> dict[str, dict[str, dict[str, float]]]:
    """metric -> method -> user -> the user's mean outcome."""
    found: dict[str, dict[str, dict[str, float]]] = {}
    for metric, by_method in distinct(outcomes).items():
        found[metric] = {}
        for method, records in by_method.items():
            by_user: dict[str, list[float]] = {}
            for _, user, value in records:
                by_user.setdefault(user, []).append(value)
            found[metric][method] = {u: float(np.mean(v)) for u, v in by_user.items()}
    return found


def first_rivals(r: dict[str, Any], m: int) -> dict[str, Any]:
    """A rivals run's figures on its first ``m`` rivals' pairs alone (pair ids without ``~``
    or with ``~1`` to ``~{m - 1}``): a run with ``m`` rivals makes the same pairs (the rivals
    are picked in order, and a prompt's titles do not depend on the others written)."""

    def kept(pair_id: str) -> bool:
        _, rival, r = pair_id.rpartition("~")
        return not rival or int(r) < m

    outcomes = {
        metric: {k: [o for o in records if kept(o[0])] for k, records in by_method.items()}
        for metric, by_method in r["outcomes"].items()
    }
    pairs = {o[0] for by_method in outcomes.values() for rs in by_method.values() for o in rs}
    return {
        **r,
        "outcomes": outcomes,
        "per_user": per_user_values(outcomes),
        "pairs": len(pairs),
        # written and counted in the rivals run, not apart
        "data_s": None,
        "length_unmatched": "(in its run)",
    }


def paper_of(pair_id: str) -> str:
    """The paper a Pref-LaMP pair is of: its id without a rival's ``~r`` or a matched pair's
    ``#i-j`` at its end (another suite's id is its own)."""
    return SUFFIX.sub("", pair_id)


def user_differences(by_method: dict[str, list[Any]], a: str, b: str) -> list[list[list[float]]]:
    """Each user's differences ``a - b`` on the pairs both methods have, grouped by paper;
    the users with at least two papers (one paper gives no estimate of the noise)."""
    theirs = {pid: value for pid, _, value in by_method[b]}
    users: dict[str, dict[str, list[float]]] = {}
    for pid, user, value in by_method[a]:
        if pid in theirs:
            papers = users.setdefault(user, {})
            papers.setdefault(paper_of(pid), []).append(value - theirs[pid])
    return [list(papers.values()) for papers in users.values() if len(papers) > 1]


def within_errors(by_method: dict[str, list[Any]]) -> dict[str, float]:
    """For every pair of methods, the per-user standard error of their paired difference: the
    root of the mean over users of the clustered variance of the user's mean difference (the
    pairs of one paper a cluster; a user with one paper has no estimate and is left out)."""
    found = {}
    for a, b in itertools.combinations(sorted(by_method), 2):
        variances = [clustered_variance(c) for c in user_differences(by_method, a, b)]
        if variances:
            found[f"{a} - {b}"] = float(np.sqrt(np.mean(variances)))
    return found


def clustered_variance(clusters: list[list[float]]) -> float:
    """The variance of the mean of all values, clusters independent (the cluster-robust
    sandwich with its small-sample factor C / (C - 1))."""
    values = np.concatenate([np.asarray(c, dtype=float) for c in clusters])
    mean, n, c = values.mean(), len(values), len(clusters)
    sums = np.array([np.sum(np.asarray(k, dtype=float) - mean) for k in clusters])
    return float(c / (c - 1) * np.sum(sums**2) / n**2)


def decompose(r: dict[str, Any], metric: str) -> dict[str, float]:
    """The spread over users of the methods' per-user differences in two parts, the median
    over method pairs of each, on the same users and pairs (both methods', users of two papers
    or more): ``over_users`` (the standard deviation over users), ``per_user`` (the root mean
    clustered variance of a user's own difference: the noise of their few pairs) and
    ``between`` (the root of what is left, the difference's real spread from one person to
    the next; 0 where the noise explains it all)."""
    outcomes = r["outcomes"][metric]
    over, within, between = [], [], []
    for a, b in itertools.combinations(sorted(outcomes), 2):
        users = user_differences(outcomes, a, b)
        if len(users) < 2:
            continue
        means = [float(np.mean(np.concatenate(clusters))) for clusters in users]
        total = float(np.var(means, ddof=1))
        noise = float(np.mean([clustered_variance(clusters) for clusters in users]))
        over.append(total)
        within.append(noise)
        between.append(total - noise)
    if not over:
        return {"over_users": math.nan, "per_user": math.nan, "between": math.nan}
    return {
        "over_users": math.sqrt(float(np.median(over))),
        "per_user": math.sqrt(float(np.median(within))),
        "between": math.sqrt(max(0.0, float(np.median(between)))),
    }


def decompose_runs(paths: list[str]) -> None:
    """``pair_designs.py --decompose``: the parts of the spread in kept run files."""
    from tabulate import tabulate

    rows = []
    for path in paths:
        run_file = read_json(path)
        r = figures(run_file, 0.0)
        cells = [Path(path).name, str(r["users"]), f"{r['pairs'] / r['users']:.1f}"]
        for metric in METRICS:
            parts = decompose(r, metric)
            cells += [f"{parts[k]:.3f}" for k in ("over_users", "per_user", "between")]
        rows.append(cells)
    headers = ["run", "users", "test pairs / user"]
    for metric in METRICS:
        headers += [f"{metric} SD over users", "per-user noise", "between users"]
    print(tabulate(rows, headers=headers, disable_numparse=True))


def row_unmatched(row: dict[str, Any]) -> int:
    """The pairs of a run whose sides' lengths differ beyond the slack (its provenance)."""
    data = row["data"]
    return int(data.get("provenance", data).get("length_unmatched") or 0)


def standard_errors(per_user: dict[str, dict[str, float]]) -> dict[str, float]:
    """For every pair of methods, the standard error of the mean over users of their per-user
    difference (users both have)."""
    found = {}
    for a, b in itertools.combinations(sorted(per_user), 2):
        shared = sorted(set(per_user[a]) & set(per_user[b]))
        if len(shared) < 2:
            continue
        d = np.array([per_user[a][u] - per_user[b][u] for u in shared])
        found[f"{a} - {b}"] = float(np.std(d, ddof=1) / np.sqrt(len(d)))
    return found


def pairing_row(label: str, r: dict[str, Any], first: dict[str, Any]) -> list[str]:
    cells = [label, str(r["users"]), f"{r['pairs'] / r['users']:.1f}"]
    prompts, reference = r.get("writer_prompts"), first.get("writer_prompts")
    cells.append(f"{prompts} ({prompts / reference:.2f}x)" if prompts and reference else "")
    writer_s = "(in its run)" if r["data_s"] is None else f"{r['data_s']:.0f}"
    cells += [str(r["writer_titles"]), writer_s]
    for metric in METRICS:
        cells += se_cells(
            standard_errors(r["per_user"][metric]), standard_errors(first["per_user"][metric])
        )
        cells += se_cells(
            within_errors(r["outcomes"][metric]), within_errors(first["outcomes"][metric])
        )
    cells += [design_rule(r, "policy_acc", "base"), design_rule(r, "rm_acc", "args[global_bt]")]
    cells.append(str(r["length_unmatched"]))
    return cells


def design_rule(r: dict[str, Any], metric: str, method: str) -> str:
    """What the design rule reads: a method that knows nobody (base policy accuracy,
    ``global_bt``'s RM accuracy) at chance, its macro value with a 95% interval, users
    resampled."""
    from pytest_prefalign.analysis.metrics import bootstrap_ci

    records = r["outcomes"][metric].get(method)
    if not records:
        return ""
    values, users = [v for _, _, v in records], [u for _, u, _ in records]
    low, high = bootstrap_ci(values, users)
    return f"{np.mean(list(r['per_user'][metric][method].values())):.2f} [{low:.2f}, {high:.2f}]"


def se_cells(se: dict[str, float], reference: dict[str, float]) -> list[str]:
    """The median [range] of the method pairs' errors, and their median ratio to the
    reference's."""
    if not se:
        return ["", ""]
    values = np.array(list(se.values()))
    ratios = [se[k] / reference[k] for k in se if reference.get(k)]
    return [
        f"{np.median(values):.3f} [{values.min():.3f}, {values.max():.3f}]",
        f"{np.median(ratios):.2f}" if ratios else "",
    ]


if __name__ == "__main__":
    main()
