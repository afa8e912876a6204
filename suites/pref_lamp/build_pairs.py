"""``prefalign data build-pairs pref_lamp``: write the released pairs (``release.py``) again.

The authors are positions in ``authors.json`` (1-based, file order; default ``1-40,101-108``:
the main job's 8, the findings runs' 40, and the 8 that ``benchmarks/pair_designs.py`` holds
out). The data is read with a run's rules over every author, the suite's default options (or
``--option KEY=VALUE``), and the writer writes every brief of those authors, ``CHUNK`` prompts at
a time, into the same cache a run uses: an interrupted build resumes, and titles a run already
wrote are not written again. Briefs the packaged release already holds with the same texts are
taken from it, so a data change rewrites only the briefs it changed (``--again`` writes every
brief). Progress goes to the standard error.

    prefalign data build-pairs pref_lamp [--authors 1-40,101-108] [--data DIR] [--out FILE]
        [--again]
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prefalign_suites.pref_lamp import release, writer
from prefalign_suites.pref_lamp.briefs import Brief
from prefalign_suites.pref_lamp.suite import (
    PrefLamp,
    PrefLampOptions,
    read_authors,
    writer_briefs,
    writer_options,
)
from prefalign_suites.raw_records import Problems
from pytest_prefalign import cache, suite_options

AUTHORS = "1-40,101-108"


def build_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="prefalign data build-pairs pref_lamp", description=__doc__.split("\n\n")[1]
    )
    parser.add_argument("--authors", default=AUTHORS, help=f"positions (default: {AUTHORS})")
    parser.add_argument("--data", metavar="DIR", help="as --prefalign-data in a pytest run")
    parser.add_argument(
        "--out", type=Path, help="the release file (default: the package's, for the pairing)"
    )
    parser.add_argument("--version", help="the release's version (default: today, UTC)")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument(
        "--again",
        action="store_true",
        help="write every brief, not only those the packaged release lacks or holds changed",
    )
    args = parser.parse_args(argv)
    from pytest_prefalign.datadir import holding, places_searched

    places, _ = places_searched(args.data)
    found = holding(places, PrefLamp.source)
    if found is None:
        print("prefalign: no data directory holds acl-anthology/", file=sys.stderr)
        return 1
    options = suite_options.parse(PrefLampOptions, dict(kv.split("=", 1) for kv in args.option))
    if options.negatives not in writer.DESIGNS or options.source != "anthology":
        print("prefalign: only the writer's designs on the anthology are released", file=sys.stderr)
        return 2
    train, test = briefs(found, options, positions(args.authors))
    writing = writer_options(options)
    every = [*train, *test]
    # cross-fitting: every brief is a test brief in its own fold's run
    tested = every if writing.folds > 1 else test
    out = args.out or release.packaged(writing.pairing, writing.folds, writing.rivals)
    kept = None if args.again else release.matching(writing)
    try:
        made, who = write_missing(every, tested, writing, kept)
    except WriterChanged as exc:
        print(f"prefalign: {exc}", file=sys.stderr)
        return 2
    version = args.version or datetime.now(UTC).strftime("%Y.%m.%d")
    written = release.write(out, version, who, writing, every, made)
    pairs = sum(len(m.pairs) for m in made.values())
    print(
        f"{out}: version {written.version}, {len(every)} briefs, {pairs} pairs, "
        f"sha256 {written.checksum}"
    )
    return 0


class WriterChanged(Exception):
    """The packaged release was written by another writer than the one loaded now."""


def write_missing(
    every: list[Brief], tested: list[Brief], writing: writer.Options, kept: release.Release | None
) -> tuple[dict[str, writer.Made], writer.Written]:
    """Each brief's pairs: those the packaged release ``kept`` holds with the same texts taken
    from it, the others written (a changed paper's briefs, a new author's); the writer loaded
    only where some are missing, and only with the release's weights (the writer's
    ``fingerprint`` also versions the code, which may have changed since)."""
    taken = kept.taken(every) if kept is not None else {}
    todo = [b for b in every if b.source.pair_id not in taken]
    print(f"{len(taken)} of {len(every)} briefs from the packaged release", file=sys.stderr)
    if not todo:
        assert kept is not None
        return taken, kept.writer
    lm = load_writer(writing.writer)
    folder, _ = cache.active().folder(cache.make_key("pairs", suite=PrefLamp.name))
    tests = {b.source for b in tested}
    found, who = writer.sides(todo, lm, folder, writing, tests=tests, progress=Progress())
    if kept is None or not taken:
        return found, who
    if (who.source, who.weights) != (kept.writer.source, kept.writer.weights):
        raise WriterChanged(
            f"the packaged release was written by {kept.writer.source} (weights "
            f"{kept.writer.weights}), the writer loaded is {who.source} (weights {who.weights}): "
            "use --again to write every brief"
        )
    # the same weights: the release keeps naming the writer it was first written with
    return {**taken, **found}, kept.writer


def positions(text: str) -> list[int]:
    """``1-40,101-108`` as 0-based positions, in order, each once."""
    found: list[int] = []
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        for n in range(int(first), int(last or first) + 1):
            if n < 1:
                raise SystemExit(f"prefalign: author positions start at 1, not {n}")
            if n - 1 not in found:
                found.append(n - 1)
    return found


def briefs(
    data_dir: Path, options: PrefLampOptions, chosen: list[int]
) -> tuple[list[Brief], list[Brief]]:
    """The briefs of the authors at ``chosen`` positions that the rules keep (a run's briefs of
    the same authors: the rules and the pool see every author)."""
    problems = Problems()
    read, users, pool, held_out = read_authors(data_dir, options, problems)
    order = list(read)
    wanted = {order[n] for n in chosen if n < len(order)}
    kept = {user: papers for user, papers in users.items() if user in wanted}
    return writer_briefs(kept, pool, held_out, options)


def load_writer(source: str) -> Any:
    from pytest_prefalign.runtime.models import ModelSpec, load_lm

    return load_lm(ModelSpec("writer", source), device="cpu")


class Progress:
    """Prompts written so far, the rate and the time left, on the standard error."""

    def __init__(self) -> None:
        self.started = time.perf_counter()

    def __call__(self, done: int, total: int) -> None:
        if not done:
            self.started = time.perf_counter()
            line = f"writing {total} prompts' titles"
        else:
            spent = time.perf_counter() - self.started
            left = spent / done * (total - done)
            line = (
                f"written {done}/{total} prompts, {spent / done:.1f} s each, "
                f"about {left / 60:.0f} min left"
            )
        print(line, file=sys.stderr, flush=True)
