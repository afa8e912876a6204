"""What a run's tests will need, checked once their suites are known and before any test runs:
each suite's options, its data, and the memory its models need. A suite option that its suite
refuses, or a data folder that no place holds and that the run cannot get, is a usage error of
the run (one message, exit status 4), not one failure per test; a run likely to exceed its
memory (``runtime/memory.py``) is a warning, before the first test.

The options are checked as the suite declares them (its ``options`` dataclass,
``suite_options``), even when only listing the tests (``--collect-only``). For the data, two
cases are known that early:

- ``--prefalign-data DIR`` holds no folder of a collected suite that reads one (that directory
  is never replaced by another place);
- offline (``PREFALIGN_OFFLINE``, ``HF_HUB_OFFLINE``, or the source's host does not resolve),
  a suite's folder is found in no place and only a fetch could build it: one line naming the
  fetch command and the places searched.

Online, a missing folder is left to the first test, which fetches it (``fetch.fetch_missing``).
The suites are read from the collected items, or under pytest-xdist (where the workers collect)
from the test ids a worker reports to the controller.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_prefalign.plumbing import paths
from pytest_prefalign.plumbing.collect import CaseItem, read_suite_toml

if TYPE_CHECKING:  # pragma: no cover
    import pytest

    from pytest_prefalign.plumbing.options import Settings
    from pytest_prefalign.registry import Registry
    from pytest_prefalign.runtime.pool import ModelPool

# suite name -> (its suite.toml, as the test ids name it; its options, as written)
Found = dict[str, tuple[str, dict[str, str]]]
Needed = dict[str, tuple[Any, dict[str, str]]]  # suite name -> (the suite, its options)


def suites_of_items(items: Iterable[pytest.Item]) -> Found:
    """The suites of the collected evaluation tests."""
    found: Found = {}
    for item in items:
        if isinstance(item, CaseItem):
            file = item.nodeid.partition("::")[0]
            found.setdefault(item.suite, (file, dict(item.suite_options)))
    return found


def suites_of_ids(rootpath: Path, ids: Iterable[str]) -> Found:
    """As ``suites_of_items``, from test ids (``suites/NAME/suite.toml::NAME[method-size]``):
    each suite and its options read again from the ``suite.toml`` the id names."""
    files = {nodeid.partition("::")[0] for nodeid in ids if "::" in nodeid}
    found: Found = {}
    for file in sorted(files):
        path = rootpath / file
        if path.name == "suite.toml" and path.is_file():
            name, options = read_suite_toml(path)
            found.setdefault(name, (file, options))
    return found


def bad_options(registry: Registry, found: Found) -> str | None:
    """What is wrong with the options of the suites ``found``, one line per suite whose
    ``suite.toml`` sets an option it does not have or a value it refuses; None when nothing."""
    from pytest_prefalign import suite_options
    from pytest_prefalign.api import DataError

    lines = []
    for name, (file, options) in sorted(found.items()):
        suite = _registered(registry, name)
        if suite is None:
            continue
        try:
            suite_options.for_suite(suite, options)
        except DataError as exc:
            lines.append(f"{file}: [options] field {exc.field!r}: {exc.problem}")
    return "\n".join(lines) or None


def needing_data(registry: Registry, found: Found) -> Needed:
    """The suites ``found`` that need a data folder."""
    from pytest_prefalign.api import requires_data_dir

    needed = {}
    for name, (_, options) in found.items():
        suite = _registered(registry, name)
        if suite is not None and requires_data_dir(suite, options):
            needed[name] = (suite, options)
    return needed


def run_models(registry: Registry, found: Found, pool: ModelPool, sizes: list[str]) -> list[Any]:
    """The models the run's processes may load (``ModelSpec``): each size's, the suites'
    reference generator, and the model source a suite's ``writer`` option names (its pairs'
    writer)."""
    from pytest_prefalign import suite_options
    from pytest_prefalign.api import DataError
    from pytest_prefalign.runtime.pool import REFERENCE_LABEL
    from pytest_prefalign.runtime.sources import ModelSpec

    labels = [*sizes, REFERENCE_LABEL] if found else list(sizes)
    models = [pool.specs[label] for label in labels if label in pool.specs]
    for name, (_, options) in sorted(found.items()):
        suite = _registered(registry, name)
        try:
            typed = suite_options.for_suite(suite, options) if suite is not None else None
        except DataError:
            continue
        writer = getattr(typed, "writer", None)
        if isinstance(writer, str) and writer:
            models.append(ModelSpec("writer", writer))
    return models


def memory_warning(
    registry: Registry, found: Found, pool: ModelPool, sizes: list[str], processes: int
) -> str | None:
    """The warning of a run likely to exceed its memory (``memory.shortfall``): the run's
    models loaded in each of its ``processes``, with their stores; None when it fits."""
    from pytest_prefalign.runtime import memory

    if not found:  # no evaluation test: no model will load
        return None
    return memory.shortfall(run_models(registry, found, pool, sizes), processes)


def _registered(registry: Registry, name: str) -> Any:
    from pytest_prefalign.registry import UnknownName

    try:
        return registry.suite(name)
    except UnknownName:  # a collection error of its own
        return None


def problem(needed: Needed, settings: Settings, data_dir: Path | None, rootdir: Path) -> str | None:
    """Why the run cannot have the data of the ``needed`` suites, or None: ``--prefalign-data``
    without a suite's folder, or, offline, a folder found nowhere that only a fetch builds."""
    if data_dir is not None:
        return paths.missing_suite_data(data_dir, {name: s for name, (s, _) in needed.items()})
    from pytest_prefalign.datadir import unreachable_data

    for name, (suite, _) in sorted(needed.items()):
        reason = unreachable_data(suite.source, ini=settings.data_ini, rootdir=rootdir)
        if reason:
            return f"suite {name!r}: {reason}"
    return None


def check(
    registry: Registry,
    found: Found,
    settings: Settings,
    data_dir: Path | None,
    rootdir: Path,
    *,
    listing: bool,
) -> None:
    """The collected suites' options, then their data (not when only ``listing`` the tests
    without a data folder given, which needs none): the first problem is a usage error."""
    import pytest

    reason = bad_options(registry, found)
    if reason:
        raise pytest.UsageError(reason)
    if listing and data_dir is None:
        return
    reason = problem(needing_data(registry, found), settings, data_dir, rootdir)
    if reason:
        raise pytest.UsageError(reason)
