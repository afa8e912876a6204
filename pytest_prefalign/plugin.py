"""pytest-prefalign, the module pytest loads through the ``pytest11`` entry point.

pytest imports it on every run, with or without ``--prefalign``: it declares options and hooks
and nothing else until ``--prefalign`` is given. No torch or transformers import here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pytest_prefalign.plumbing import (
    allocator,
    gating,
    metric_plugins,
    options,
    waiting,
    workers,
)

if TYPE_CHECKING:  # pragma: no cover
    from pytest_prefalign.plumbing.session import PrefalignSession
    from pytest_prefalign.runtime.pool import ModelPool

# the run's session, registered only with --prefalign
session_key: pytest.StashKey[PrefalignSession] = pytest.StashKey()


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from pytest_prefalign import hookspec

    pluginmanager.add_hookspecs(hookspec)


def pytest_addoption(parser: pytest.Parser) -> None:
    options.addoption(parser)
    gating.addoption(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """Under pytest-xdist (``-n``) a prefalign run distributes by group (``--dist loadgroup``)
    unless ``--dist`` says otherwise: the tests of a (suite, size) share a model, pairs,
    prefills and fitted reward methods, and one worker does that work, not each."""
    workers.prefer_loadgroup(config)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` with ``--prefalign`` on a machine with GPUs: one worker per GPU (each
    pinned to its own, ``runtime/devices.py``); without GPUs xdist's own count."""
    return workers.gpu_workers(config)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadgroup`` in a prefalign run: each (suite, size) to one worker, whole."""
    session = config.stash.get(session_key, None)
    if session is None or config.getoption("dist", None) != "loadgroup":
        return None
    return workers.make_scheduler(config, log, session.sizes)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "prefalign: a pytest-prefalign evaluation test")
    config.addinivalue_line(
        "markers",
        "prefalign_tolerance(**metrics): per-test regression tolerance, "
        "e.g. prefalign_tolerance(policy_acc='3pp')",
    )
    if not config.getoption("prefalign", False):
        if gating.active(config):
            raise pytest.UsageError("--prefalign-save and --prefalign-compare need --prefalign")
        return
    # how torch's OpenMP threads wait between ops: spinning where the cores were idle at the
    # start, sleeping at once where other work runs (plumbing/waiting.py); set before torch
    # starts its thread pool, and only where the user did not choose
    try:
        config.stash[waiting.KEY] = waiting.choose()
    except ValueError as exc:
        raise pytest.UsageError(f"prefalign: {exc}") from None
    allocator.keep_freed_memory()  # the passes' large buffers reused, not paged in each time
    workers.share_cores(config)  # under -n, each worker's threads its share of the cores
    from pytest_prefalign.plumbing.session import PrefalignSession

    session = PrefalignSession(config)  # loads the plugins' registrations
    metric_plugins.register(config)
    config.stash[session_key] = session
    config.pluginmanager.register(session, "prefalign-session")


@pytest.fixture(scope="session")
def prefalign_models(pytestconfig: pytest.Config) -> ModelPool:
    """The session's model pool: ``prefalign_models.get("135m")`` gives the cached LM of a size
    label (loaded once per worker, converted once per machine)."""
    from pytest_prefalign.runtime.pool import ModelPool

    session = pytestconfig.stash.get(session_key, None)
    if session is None:
        return ModelPool.from_config(pytestconfig)
    return session.models
