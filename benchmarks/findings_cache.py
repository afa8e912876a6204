"""Carry a findings run's finished rows from one machine to the next.

The folded Pref-LaMP findings run (``findings.py``, issue 38) needs more hours than one working
session on the 2-core machine, and each session's machine is a fresh one: its results cache
does not outlive it. Every finished row is a value of that cache under a key that hashes all it
depends on (cache.py: the data, options, seed, the model and the code), so a row carried to
another machine is reused there exactly when nothing it depends on changed, and computed again
otherwise. This script packs the cache's values into one compressed file that can be committed,
and unpacks it into the cache of the next machine:

    python benchmarks/findings_cache.py save    --cache "$PREFALIGN_CACHE"
    python benchmarks/findings_cache.py restore --cache "$PREFALIGN_CACHE"
    python benchmarks/findings_cache.py list                  # what the packed file holds
    python benchmarks/findings_cache.py code                  # whether this checkout can reuse it

What is carried: the values each written whole in one file (``<kind>/<digest>.json``: a row's
records, its generations, the guidance strength chosen, a reward's scale). What is left out:
``models/`` (the converted weights, remade from the installed model packages in seconds) and
``features/`` (the hidden states the reward methods are fitted on, remade in minutes); the
folders some values keep their files in (a fitted reward method's, ``rewards/<name>/<digest>/``),
which may be half-filled while a run goes on: a row whose records are carried does not fit its
method again, and one that is not computes it anyway; the locks beside the values, and the
temporaries of writes in progress (a value being written when ``save`` runs is not packed yet).
Nothing here changes a value: ``restore`` writes a file only where the cache has none of that
name.

The packed file also holds ``code.json``: the digest of the syntax tree of every module a row's
key hashes (the evaluation's modules, the methods' and suites', the language model's, and every
first-party module they import), as the checkout that saved it had them. ``code``, ``list`` and
``restore`` compare it with this checkout's and name the modules that differ: a carried row is
reused only where none does, so a session that means to go on with a carried run reads this
before it edits any of them.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import sys
import tarfile
from collections import Counter
from pathlib import Path

from pytest_prefalign import storage

ROOT = Path(__file__).resolve().parents[1]
PACKED = ROOT / "benchmarks" / "findings-folds" / "cache.tar.gz"
# kinds not carried: the converted weights (remade from the installed model packages) and the
# models' hidden states (8 MB of poorly compressing floats by the second ARGS row, remade in
# a few minutes)
LEFT_OUT = ("models", "features")
NEW_HERE = " (new here)"  # a module this checkout has and the packed rows' did not
CODE = "code.json"  # the packed file's member that names the code its rows were computed by
# the packages whose modules a row's key hashes (with what they import), by where they lie
KEYED = {
    "pytest_prefalign.evaluation": ROOT / "pytest_prefalign" / "evaluation",
    "prefalign_methods": ROOT / "methods",
    "prefalign_suites": ROOT / "suites",
}
LM = "pytest_prefalign.runtime.lm"  # the language model's code, in every model's fingerprint


def keyed_modules() -> list[str]:
    """The modules of ``KEYED``'s packages, and the language model's."""
    names = [LM]
    for package, folder in KEYED.items():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            names.append(".".join((package, *parts)))
    return names


def code_digests() -> dict[str, str]:
    """This checkout's digest of each module a row's key hashes (``versions.module_trees``)."""
    from pytest_prefalign import versions

    return versions.module_trees(*keyed_modules())


def code_changes(packed: dict[str, str], here: dict[str, str]) -> list[str]:
    """The modules whose code differs between the packed rows' checkout and this one: changed,
    new here, or gone here."""
    changed = [
        f"{m} (changed)" for m in sorted(packed.keys() & here.keys()) if packed[m] != here[m]
    ]
    new = [f"{m}{NEW_HERE}" for m in sorted(here.keys() - packed.keys())]
    gone = [f"{m} (not here)" for m in sorted(packed.keys() - here.keys())]
    return changed + new + gone


def report_code(values: dict[Path, bytes]) -> bool:
    """Print whether this checkout computes the packed rows' keys as their checkout did; True
    when it does. A module new here (a method added since) changes no carried row's key: only
    the rows that use it are new."""
    raw = values.get(Path(CODE))
    if raw is None:
        print("  code: the packed file does not say which code computed its rows")
        return False
    packed = json.loads(raw)
    changes = code_changes(packed["modules"], code_digests())
    saved_at = packed.get("commit") or "an unknown commit"
    breaking = [c for c in changes if not c.endswith(NEW_HERE)]
    if not breaking:
        print(
            f"  code: this checkout's {len(packed['modules'])} keyed modules are the packed "
            f"rows' (saved at {saved_at}): they are reused"
        )
        for change in changes:
            print(f"    {change}: no carried row hashes it; the rows that use it are new")
        return True
    print(
        f"  code: {len(breaking)} of the modules a row's key hashes differ from the packed "
        f"rows' (saved at {saved_at}), so every carried row is computed again here:"
    )
    for change in changes:
        print(f"    {change}")
    return False


def carried(cache: Path) -> list[Path]:
    """The cache's values written whole (``<kind>/<digest>.<suffix>``, each replaced atomically
    when written), relative to it, in a stable order."""
    found = []
    for kind in sorted(p for p in cache.iterdir() if p.is_dir()):
        if kind.name in LEFT_OUT or kind.name.startswith("."):
            continue
        for path in sorted(p for p in kind.iterdir() if p.is_file()):
            if path.name.startswith(".") or path.name.endswith(".lock"):
                continue  # a write in progress, or the lock beside a value
            found.append(path.relative_to(cache))
    return found


def save(cache: Path, packed: Path) -> None:
    if not cache.is_dir():
        sys.exit(f"findings_cache: no cache at {cache}")
    values = {rel: (cache / rel).read_bytes() for rel in carried(cache)}
    if not values:
        sys.exit(f"findings_cache: {cache} holds no values to carry")
    from pytest_prefalign.plumbing.run_file import git_commit

    code = {"commit": git_commit(ROOT), "modules": code_digests()}
    values[Path(CODE)] = (json.dumps(code, indent=1, sort_keys=True) + "\n").encode()
    # no time and nothing of this machine in it: the same values pack to the same bytes
    buffer = io.BytesIO()
    with (
        gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0) as zipped,
        tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for rel, data in values.items():
            info = tarfile.TarInfo(rel.as_posix())
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    storage.atomic_write_bytes(packed, buffer.getvalue())
    count = len(values) - 1  # the code's member is no value
    print(f"packed {count} values into {packed} ({packed.stat().st_size / 1e6:.1f} MB)")
    describe(values)


def restore(cache: Path, packed: Path) -> None:
    if not packed.exists():
        sys.exit(f"findings_cache: no packed cache at {packed}")
    written = kept = 0
    with tarfile.open(packed, "r:gz") as tar:
        for member in tar.getmembers():
            if not member.isfile():
                continue
            name = Path(member.name)
            if name == Path(CODE):
                report_code({name: member_bytes(tar, member)})
                continue
            if name.is_absolute() or ".." in name.parts:
                sys.exit(f"findings_cache: {packed} names {member.name!r}, outside a cache")
            target = cache / name
            if target.exists():
                kept += 1
                continue
            storage.atomic_write_bytes(target, member_bytes(tar, member))
            written += 1
    print(f"restored {written} values into {cache} ({kept} were there already)")


def member_bytes(tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    source = tar.extractfile(member)
    assert source is not None  # a regular file has its bytes
    return source.read()


def listing(packed: Path) -> None:
    with tarfile.open(packed, "r:gz") as tar:
        values = {Path(m.name): member_bytes(tar, m) for m in tar.getmembers() if m.isfile()}
    print(f"{packed}: {len(values) - (Path(CODE) in values)} values")
    describe(values)
    report_code(values)


def check_code(packed: Path) -> None:
    """Whether this checkout would reuse the packed rows: exit status 1 where it would not."""
    with tarfile.open(packed, "r:gz") as tar:
        values = {Path(m.name): member_bytes(tar, m) for m in tar.getmembers() if m.name == CODE}
    if not report_code(values):
        sys.exit(1)


def describe(values: dict[Path, bytes]) -> None:
    """How many values of each kind, and the rows whose records are among them (a row's
    method, with its counts of items and pairs: the folds of one method differ in them)."""
    kinds = Counter(rel.parts[0] for rel in values if rel != Path(CODE))
    for kind, count in sorted(kinds.items()):
        print(f"  {kind}: {count}")
    rows = sorted(row(raw) for rel, raw in values.items() if rel.parts[0] == "results")
    for method, items, pairs in rows:
        print(f"  row {method}: {items} items, {pairs} pairs")


def row(raw: bytes) -> tuple[str, int, int]:
    """A case's records: its method, and its numbers of items and pairs."""
    value = json.loads(raw)
    records = value.get("items") or value.get("pairs") or [{}]
    return str(records[0].get("method", "?")), len(value["items"]), len(value["pairs"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("save", "restore", "list", "code"))
    parser.add_argument(
        "--cache", type=Path, default=None, help="the results cache (default: $PREFALIGN_CACHE)"
    )
    parser.add_argument(
        "--packed",
        type=Path,
        default=PACKED,
        help=f"the packed file (default: {PACKED.relative_to(ROOT)})",
    )
    args = parser.parse_args(argv)
    if args.command == "list":
        listing(args.packed)
        return
    if args.command == "code":
        check_code(args.packed)
        return
    from_env = os.environ.get(storage.CACHE_ENV)
    cache = args.cache or (Path(from_env) if from_env else None)
    if cache is None:
        sys.exit("findings_cache: name the cache (--cache DIR or $PREFALIGN_CACHE)")
    if args.command == "save":
        save(cache, args.packed)
    else:
        restore(cache, args.packed)


if __name__ == "__main__":
    main()
