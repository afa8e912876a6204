"""The ``prefalign`` command: work on run files and data outside a pytest run (``HELP``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

HELP = """\
usage: prefalign COMMAND [ARGS...]

Work on pytest-prefalign run files and data outside a pytest run.

commands:
  report RUN.json --out DIR                  an HTML page with leaderboards, tau and the plot
  compare A.json B.json --fail policy_acc:2pp
                                             exit 1 on a significant regression
  data [--data DIR]                          each suite, its source, licence and availability
  data fetch [SUITE...] [--to DIR]           build the suites' data from their public sources

options:
  -h, --help     show this help and exit
  -V, --version  show the version and exit

prefalign COMMAND --help shows a command's options. The evaluation itself runs in pytest:
pytest --prefalign suites/pref_lamp (see pytest --help, group prefalign)."""

COMMANDS: dict[str, tuple[str, str]] = {  # name -> (module, function), imported on use
    "report": ("pytest_prefalign.analysis.report", "report_main"),
    "compare": ("pytest_prefalign.cli", "compare_main"),
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
    """``prefalign compare BASELINE CURRENT [--fail EXPR] [--alpha A]`` (argv without ``compare``).

    Returns 1 when a gated metric regressed, 2 on a usage error or runs that cannot be
    compared, 0 otherwise.
    """
    from pytest_prefalign.analysis import compare, table
    from pytest_prefalign.runs import baselines

    parser = _compare_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits on errors and --help; a caller wants a code
        return exc.code if isinstance(exc.code, int) else 2
    thresholds = [t for group in args.fail for t in group]
    try:
        compare.check_unique(thresholds)
        root = Path.cwd()
        baseline = baselines.load(args.baseline, root)
        current = baselines.load(args.current, root)
        comparisons = compare.compare_runs(baseline, current, thresholds, alpha=args.alpha)
    except (argparse.ArgumentTypeError, ValueError, FileNotFoundError) as exc:
        print(f"prefalign compare: error: {exc}", file=sys.stderr)
        return 2
    print(table.comparison_table(comparisons))
    for side, run in (("baseline", baseline), ("current run", current)):
        if not run.complete:
            why = "; ".join(run.outcomes.get("incomplete") or []) or "no record of why"
            print(f"note: the {side} is a partial run ({why}): tests it lacks are not compared")
    unmatched = compare.unmatched(baseline, current)
    for side, keys in zip(("baseline", "current run"), unmatched, strict=True):
        for key in keys:
            print(f"only in the {side}, not compared: {compare.key_text(key)}")
    failed = [c for c in comparisons if c.regressed]
    for comparison in failed:
        print(f"FAILED {comparison.message()}")
    gates = ", ".join(map(str, thresholds)) or "none (display only)"
    print(f"{len(failed)} regression(s); gates: {gates}; alpha {args.alpha:g}")
    return 1 if failed else 0


def _compare_parser() -> argparse.ArgumentParser:
    from pytest_prefalign.analysis import compare

    parser = argparse.ArgumentParser(
        prog="prefalign compare",
        description="Compare two prefalign run files on the same pairs and fail on regressions.",
    )
    parser.add_argument("baseline", help="run file (path) or saved baseline name")
    parser.add_argument("current", help="run file (path) or saved baseline name")
    parser.add_argument(
        "--fail", action="append", type=compare.parse_thresholds, default=[], metavar="EXPR",
        help=f"gate, {compare.form()}; comma-separated or repeated",
    )  # fmt: skip
    parser.add_argument(
        "--alpha", type=compare.parse_alpha, default=0.05, help="significance level"
    )
    return parser


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
