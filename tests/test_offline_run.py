"""A run offline, with no data folder for its suite: one usage error line (exit status 4) that
names the fetch command and the places searched, before any test runs, with and without
pytest-xdist; online, the first test still fetches the folder. The real pref_lamp suite and
the tiny model, run in a pytester project with an empty user cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_prefalign import fetch
from pytest_prefalign.datadir import unreachable_data

SUITE_TOML = Path(__file__).parents[1] / "suites" / "pref_lamp" / "suite.toml"
INI = """[pytest]
prefalign_models = tiny = tiny
prefalign_sizes = tiny
prefalign_methods = base,icl
"""


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """suites/pref_lamp/suite.toml as shipped, no data anywhere, offline."""
    pytester.makeini(INI)
    folder = pytester.mkdir("suites").joinpath("pref_lamp")
    folder.mkdir()
    folder.joinpath("suite.toml").write_text(SUITE_TOML.read_text())
    monkeypatch.setenv("PREFALIGN_CACHE", str(pytester.path / "cache"))
    monkeypatch.delenv("PREFALIGN_DATA", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("PREFALIGN_OFFLINE", "1")
    return pytester


def assert_one_line_usage_error(result: pytest.RunResult, cache: Path) -> None:
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.strip()]
    assert len(errors) == 1, result.stderr.lines
    line = errors[0]
    assert line.startswith("ERROR: suite 'pref_lamp': data folder acl-anthology/ not found")
    assert "offline (PREFALIGN_OFFLINE=1)" in line
    assert "`prefalign data fetch pref_lamp`" in line
    assert "looked in --prefalign-data: not set; ini prefalign_data: not set;" in line
    assert f"user cache: {cache / 'data'}" in line
    out = result.stdout.str()
    assert "FAILED" not in out and "failed" not in out  # no test ran


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["alone", "xdist"])
def test_offline_without_data_is_one_usage_error_line(project, workers):
    result = project.runpytest_subprocess(
        "--prefalign", "suites/pref_lamp", "-p", "no:cacheprovider", *workers
    )
    assert_one_line_usage_error(result, project.path / "cache")


def test_the_check_reads_the_selected_tests_only(project):
    """Tests deselected need no data; listing the tests (``--collect-only``) needs none."""
    args = ("--prefalign", "suites/pref_lamp", "-p", "no:cacheprovider")
    result = project.runpytest_subprocess(*args, "-k", "no_such_test")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    listed = project.runpytest_subprocess(*args, "--collect-only", "-q")
    assert listed.ret == pytest.ExitCode.OK
    listed.stdout.fnmatch_lines(["suites/pref_lamp/suite.toml::pref_lamp[[]base-tiny[]]"])


def test_online_a_missing_folder_is_left_to_the_first_test_to_fetch(tmp_path, monkeypatch):
    monkeypatch.setenv("PREFALIGN_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("PREFALIGN_DATA", raising=False)
    assert "prefalign data fetch pref_lamp" in (unreachable_data("acl-anthology") or "")
    monkeypatch.setattr(fetch, "offline_reason", lambda hosts: None)  # the network is there
    assert unreachable_data("acl-anthology") is None
    (tmp_path / "cache" / "data" / "acl-anthology").mkdir(parents=True)  # a place holds it
    monkeypatch.setattr(fetch, "offline_reason", lambda hosts: "offline")
    assert unreachable_data("acl-anthology") is None
