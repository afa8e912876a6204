"""The optional extras (setup.cfg, ``[options.extras_require]``): without one, what needs it
fails with one line naming ``pip install pytest-prefalign[NAME]``, never an ImportError
traceback. Each test hides the package (``sys.modules[name] = None``: importing it raises
ImportError), as on a machine where the extra was not installed. The report's plot
(``[report]``, matplotlib) is checked in tests/test_report.py
(``test_page_without_matplotlib_says_how_to_get_the_plot``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from prefalign_suites import hf_fetch, hf_source
from pytest_prefalign import fetch
from pytest_prefalign.api import DataNotFound
from pytest_prefalign.datadir import find_data_dir
from pytest_prefalign.errors import missing_extra
from pytest_prefalign.fetch import FetchError, Progress, fetch_main

ANTHOLOGY = (
    "fetching Pref-LaMP's data from the ACL Anthology needs acl-anthology, which is not "
    "installed: pip install pytest-prefalign[anthology]"
)
POLIS = (
    "downloading Polis's data needs pooch, which is not installed: "
    "pip install pytest-prefalign[polis]"
)
DATASETS = (
    "the Hugging Face dataset openai/summarize_from_feedback needs datasets, which is not "
    "installed: pip install pytest-prefalign[hf]"
)


@pytest.fixture(autouse=True)
def caches(tmp_path, monkeypatch):
    """An empty user cache, no data directory from the environment, offline (no test may
    reach a network)."""
    monkeypatch.setenv("PREFALIGN_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("PREFALIGN_DATA", raising=False)
    monkeypatch.setenv("PREFALIGN_OFFLINE", "1")


def hide(monkeypatch: pytest.MonkeyPatch, package: str) -> None:
    """``import package`` (and its submodules) raises ImportError from now on."""
    for name in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, package, None)


def test_the_message_names_the_extra():
    assert missing_extra("pooch", "polis", "downloading Polis's data") == POLIS


def test_fetch_pref_lamp_without_acl_anthology_is_one_line(tmp_path, monkeypatch, capsys):
    hide(monkeypatch, "acl_anthology")
    status = fetch_main(["pref_lamp", "--anthology-data", str(tmp_path), "--to", str(tmp_path)])
    err = capsys.readouterr().err
    assert status == 1
    assert err.splitlines() == [f"prefalign data fetch: pref_lamp: error: {ANTHOLOGY}"]
    assert not (tmp_path / "acl-anthology").exists()


def test_a_run_that_fetches_pref_lamp_without_acl_anthology_fails_in_one_line(
    tmp_path, monkeypatch
):
    """The main job's own fetch (no data folder anywhere, online): the suite's tests meet a
    DataNotFound of one line."""
    hide(monkeypatch, "acl_anthology")
    monkeypatch.delenv("PREFALIGN_OFFLINE")
    local = argparse.Namespace(
        anthology_data=str(tmp_path),
        anthology_revision="x",
        anthology_repository="file:///nowhere",
        anthology_authors=200,
        anthology_seed=5,
    )
    monkeypatch.setattr(fetch, "default_options", lambda suite: local)
    with pytest.raises(DataNotFound) as err:
        find_data_dir("acl-anthology")
    message = str(err.value)
    assert "\n" not in message and ANTHOLOGY in message
    assert err.value.__cause__ is None and err.value.__suppress_context__


def test_fetch_polis_without_pooch_is_one_line(tmp_path, monkeypatch, capsys):
    hide(monkeypatch, "pooch")
    status = fetch_main(["polis", "--polis-url", str(tmp_path), "--to", str(tmp_path)])
    err = capsys.readouterr().err
    assert status == 1
    assert err.splitlines() == [f"prefalign data fetch: polis: error: {POLIS}"]


def test_fetch_of_a_hub_dataset_without_datasets_is_one_line(tmp_path, monkeypatch):
    hide(monkeypatch, "datasets")
    ds = hf_source.HubDataset("openai/summarize_from_feedback", "comparisons")
    with pytest.raises(FetchError) as err:
        hf_fetch.build(ds, tmp_path, Progress("tldr"), licence="x", attribution="y")
    assert str(err.value) == DATASETS and err.value.__cause__ is None


def test_a_hub_suite_without_datasets_fails_in_one_line(monkeypatch):
    """A run of TL;DR or PRISM that would load from the hub: its tests meet this DataNotFound."""
    hide(monkeypatch, "datasets")
    monkeypatch.setattr(hf_source, "_offline_reason", lambda: None)  # as if online
    ds = hf_source.HubDataset("openai/summarize_from_feedback", "comparisons")
    with pytest.raises(DataNotFound) as err:
        hf_source._hub(ds, Path("nowhere"))
    message = str(err.value)
    assert "\n" not in message and message.startswith(DATASETS + "; or give a local copy")
