"""``pair_designs.py --comparisons``: the style design's pairings run through the real plugin,
and the per-user standard error of every paired method difference under each (see
``pair_designs.py``)."""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
METRICS = {"rm_acc": "rm_correct", "policy_acc": "policy_correct"}


def measure_pairings(args: argparse.Namespace, pairings: dict[str, dict[str, str]]) -> None:
    from tabulate import tabulate

    keep = Path(args.cache) if args.cache else Path(tempfile.mkdtemp(prefix="prefalign-pairs-"))
    keep.mkdir(parents=True, exist_ok=True)
    data_dir = rotated(Path(args.data), keep / "data", args.offset)
    runs = {}
    for label, options in pairings.items():
        runs[label] = run(
            label, options, data_dir, keep, args.users, scoring_only=args.scoring_only
        )
        print(f"{label}: {runs[label]['wall_s']:.0f} s", file=sys.stderr, flush=True)
    first = next(iter(runs))
    rows = [table_row(label, runs[label], runs[first]) for label in runs]
    print(
        f"authors from position {args.offset + 1} of {args.data}/acl-anthology/authors.json, "
        f"the first {args.users} the suite's rules keep"
    )
    print(tabulate(rows, headers=HEADERS, disable_numparse=True))
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1) + "\n")


HEADERS = [
    "pairing",
    "users",
    "test pairs / user",
    "writer titles / prompt",
    "writer s",
    "RM acc SE, median [range] over method pairs",
    "x nearest",
    "policy acc SE",
    "x nearest",
    "base policy acc",
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
        "length_unmatched": sum(unmatched(f["results"][0]) for f in files),  # every fold's
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


def figures(run_file: dict[str, Any], wall: float) -> dict[str, Any]:
    """Per metric, the per-user value of every method, and the pairs' design."""
    per_user: dict[str, dict[str, dict[str, float]]] = {metric: {} for metric in METRICS}
    for metric, field in METRICS.items():
        outcomes: dict[str, dict[str, list[float]]] = {}
        for record in run_file["pairs"]:
            if record[field] is not None:
                by_user = outcomes.setdefault(record["method"], {})
                by_user.setdefault(record["user"], []).append(record[field])
        found: dict[str, dict[str, float]] = {}
        for method, by_user in outcomes.items():
            values = {user: float(np.mean(v)) for user, v in by_user.items()}
            if values not in found.values():  # one reward method's RM accuracy under two decoders
                found[method] = values
        per_user[metric] = found
    row = run_file["results"][0]
    provenance = row["data"].get("provenance", row["data"])
    pairs = {r["pair_id"] for r in run_file["pairs"]}
    users = {r["user"] for r in run_file["pairs"]}
    options = provenance.get("writer_options", {})
    return {
        "per_user": per_user,
        "users": len(users),
        "pairs": len(pairs),
        "writer_titles": options.get("samples"),
        # the pairs' writer: its own phase (pairs_s), or within data_s in runs made before it
        "data_s": max(
            r["timings"].get("pairs_s", r["timings"].get("data_s", 0.0))
            for r in run_file["results"]
        ),
        "length_unmatched": run_file.get("length_unmatched", unmatched(row)),
        "wall_s": wall,
    }


def unmatched(row: dict[str, Any]) -> int:
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


def table_row(label: str, r: dict[str, Any], first: dict[str, Any]) -> list[str]:
    cells = [label, str(r["users"]), f"{r['pairs'] / r['users']:.1f}"]
    cells += [str(r["writer_titles"]), f"{r['data_s']:.0f}"]
    for metric in METRICS:
        se, reference = (
            standard_errors(r["per_user"][metric]),
            standard_errors(first["per_user"][metric]),
        )
        if not se:
            cells += ["", ""]
            continue
        values = np.array(list(se.values()))
        ratios = [se[k] / reference[k] for k in se if reference.get(k)]
        cells.append(f"{np.median(values):.3f} [{values.min():.3f}, {values.max():.3f}]")
        cells.append(f"{np.median(ratios):.2f}" if ratios else "")
    base = r["per_user"]["policy_acc"].get("base", {})
    cells.append(f"{np.mean(list(base.values())):.2f}" if base else "")
    cells.append(str(r["length_unmatched"]))
    return cells
