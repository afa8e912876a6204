"""The ``prefalign`` command: work on run files and data outside a pytest run.

    prefalign report RUN.json --out DIR      an HTML page with leaderboards, tau and the plot
    prefalign compare A.json B.json --fail policy_acc:2pp   exit 1 on a significant regression
    prefalign data                            each suite, its source, licence and availability
    prefalign data fetch [SUITE...] [--to DIR]   build the suites' data from their public sources
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

COMMANDS: dict[str, tuple[str, str]] = {  # name -> (module, function), imported on use
    "report": ("pytest_prefalign.analysis.report", "report_main"),
    "compare": ("pytest_prefalign.analysis.gate", "compare_main"),
    "data": ("pytest_prefalign.datadir", "data_main"),
}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(f"prefalign: unknown command {name!r}; commands: {', '.join(COMMANDS)}",
              file=sys.stderr)
        return 2
    return command(name)(rest)


def command(name: str) -> Callable[[list[str]], int]:
    from importlib import import_module

    module, function = COMMANDS[name]
    return getattr(import_module(module), function)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
