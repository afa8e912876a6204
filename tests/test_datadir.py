"""The data-directory lookup: four places in a fixed order, and an error that lists them."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_prefalign import datadir, fetch
from pytest_prefalign.api import DataNotFound
from pytest_prefalign.datadir import data_places, find_data_dir, ini_data_value, suite_folder

READS_TOML = pytest.version_tuple >= (9,)  # pytest reads a pytest.toml from 9.0 on


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """Four directories, one per place, none holding any data yet; the env and cache point at
    theirs."""
    dirs = {name: tmp_path / name for name in ("option", "ini", "env", "cache")}
    for path in dirs.values():
        path.mkdir()
    monkeypatch.setenv("PREFALIGN_DATA", str(dirs["env"]))
    monkeypatch.setenv("PREFALIGN_CACHE", str(dirs["cache"]))
    (dirs["cache"] / "data").mkdir()
    return dirs


def give(place: Path, subdir: str = "acl-anthology") -> None:
    (place / subdir).mkdir(parents=True)


def look(places: dict[str, Path], subdir: str = "acl-anthology", option: bool = True) -> Path:
    return find_data_dir(
        subdir,
        option=str(places["option"]) if option else None,
        ini="ini",
        rootdir=places["ini"].parent,
    )


def test_option_comes_first(places):
    for name in ("option", "ini", "env"):
        give(places[name])
    give(places["cache"] / "data")
    assert look(places) == places["option"]


def test_ini_then_env_then_cache(places):
    give(places["cache"] / "data")
    assert look(places, option=False) == places["cache"] / "data"
    give(places["env"])
    assert look(places, option=False) == places["env"]
    give(places["ini"])
    assert look(places, option=False) == places["ini"]


def test_a_place_without_the_subdir_is_skipped(places):
    give(places["ini"], "polis")  # another suite's data only
    give(places["env"])
    assert look(places, option=False) == places["env"]
    assert look(places, "polis", option=False) == places["ini"]


def test_an_option_without_the_subdir_is_never_replaced_by_another_place(places):
    give(places["option"], "polis")  # another suite's data only
    give(places["env"])
    with pytest.raises(DataNotFound) as err:
        look(places)
    assert str(err.value) == (
        f"--prefalign-data {places['option']}: holds no acl-anthology/ "
        "(give the directory that holds it)"
    )
    assert look(places, "polis") == places["option"]


def test_relative_ini_value_is_taken_from_the_rootdir(tmp_path, monkeypatch):
    monkeypatch.delenv("PREFALIGN_DATA", raising=False)
    monkeypatch.setenv("PREFALIGN_CACHE", str(tmp_path / "cache"))
    give(tmp_path / "project" / "shared")
    monkeypatch.chdir(tmp_path)  # not the rootdir: the relative path must not resolve here
    found = find_data_dir("acl-anthology", option=None, ini="shared", rootdir=tmp_path / "project")
    assert found == tmp_path / "project" / "shared"


def test_unset_places_are_none_and_order_is_fixed(tmp_path, monkeypatch):
    monkeypatch.delenv("PREFALIGN_DATA", raising=False)
    monkeypatch.setenv("PREFALIGN_CACHE", str(tmp_path / "c"))
    listed = data_places(option=None, ini=None, rootdir=None)
    assert [p.label for p in listed] == [
        "--prefalign-data",
        "ini prefalign_data",
        "$PREFALIGN_DATA",
        "user cache",
    ]
    assert [p.path for p in listed] == [None, None, None, tmp_path / "c" / "data"]


def test_not_found_names_the_subdir_every_place_and_the_remedy(places):
    missing_ini = places["ini"].parent / "nowhere"
    with pytest.raises(DataNotFound) as err:
        find_data_dir(
            "acl-anthology", option=None, ini="nowhere", rootdir=places["ini"].parent, fetch=False
        )
    lines = str(err.value).splitlines()
    assert "acl-anthology/" in lines[0]
    assert lines[1] == "  1. --prefalign-data: not set"
    assert lines[2] == f"  2. ini prefalign_data: {missing_ini} (no such directory)"
    assert lines[3] == f"  3. $PREFALIGN_DATA: {places['env']} (no acl-anthology/ in it)"
    assert lines[4] == f"  4. user cache: {places['cache'] / 'data'} (no acl-anthology/ in it)"
    assert "--prefalign-data DIR" in lines[5] and "PREFALIGN_DATA=DIR" in lines[5]


def test_not_found_says_which_places_are_not_set(tmp_path, monkeypatch):
    monkeypatch.delenv("PREFALIGN_DATA", raising=False)
    monkeypatch.setenv("PREFALIGN_CACHE", str(tmp_path))
    with pytest.raises(
        DataNotFound,
        match=r"(?s)--prefalign-data: not set.*"
        r"ini prefalign_data: not set.*"
        r"\$PREFALIGN_DATA: not set",
    ):
        find_data_dir("polis", fetch=False)


def test_suite_folder_is_the_subdir_or_the_directory_itself(tmp_path):
    (tmp_path / "acl-anthology").mkdir()
    (tmp_path / "acl-anthology" / "authors.json").write_text("[]")
    assert suite_folder(tmp_path, "acl-anthology", "authors.json") == tmp_path / "acl-anthology"
    inner = tmp_path / "acl-anthology"
    assert suite_folder(inner, "acl-anthology", "authors.json") == inner  # given the folder
    with pytest.raises(DataNotFound, match=r"polis holds no \*/votes.csv"):
        suite_folder(tmp_path, "polis", "*/votes.csv")
    with pytest.raises(DataNotFound, match="no data directory holds polis/"):
        suite_folder(None, "polis", "*/votes.csv")


def test_ini_value_comes_from_the_first_pytest_config_file_upwards(tmp_path):
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    (tmp_path / "setup.cfg").write_text("[tool:pytest]\nprefalign_data = ../shared\n")
    assert ini_data_value(deep) == ("../shared", tmp_path / "setup.cfg")
    (tmp_path / "a" / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\nprefalign_data = "here"\n'
    )
    assert ini_data_value(deep) == ("here", tmp_path / "a" / "pyproject.toml")
    (deep / "pytest.ini").write_text("[pytest]\n")  # a config file without the value wins
    assert ini_data_value(deep) == (None, deep / "pytest.ini")
    (deep / "tox.ini").write_text("[tox]\n")  # no pytest section: not a pytest config file
    assert ini_data_value(deep) == (None, deep / "pytest.ini")


@pytest.mark.skipif(pytest.version_tuple < (9,), reason="pytest reads pytest.toml from 9.0 on")
def test_ini_value_from_a_pytest_toml_as_pytest_finds_it(tmp_path):
    """pytest 9's own file, found first, with native TOML values; as pytest, a pytest.toml wins
    over a pytest.ini in the same folder. Before pytest 9 it is not a configuration file, for
    pytest nor for the lookup."""
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    (tmp_path / "setup.cfg").write_text("[tool:pytest]\nprefalign_data = ../shared\n")
    (tmp_path / "a" / "pytest.toml").write_text('[pytest]\nprefalign_data = "toml-data"\n')
    toml = ("toml-data", tmp_path / "a" / "pytest.toml")
    assert ini_data_value(deep) == (toml if READS_TOML else ("../shared", tmp_path / "setup.cfg"))
    (tmp_path / "a" / "pytest.ini").write_text("[pytest]\nprefalign_data = ini-data\n")
    assert ini_data_value(deep) == (
        toml if READS_TOML else ("ini-data", tmp_path / "a" / "pytest.ini")
    )


@pytest.mark.skipif(pytest.version_tuple < (9,), reason="pytest reads pytest.toml from 9.0 on")
def test_the_data_command_and_a_pytest_run_read_the_same_file(pytester, monkeypatch, capsys):
    """What ``prefalign data`` reports is what ``pytest --prefalign`` reads."""
    monkeypatch.delenv("PREFALIGN_DATA", raising=False)
    if READS_TOML:
        pytester.makefile(".toml", pytest='[pytest]\nprefalign_data = "from-file"\n')
    else:
        pytester.makefile(".ini", pytest="[pytest]\nprefalign_data = from-file\n")
    config = pytester.parseconfig()
    assert config.getini("prefalign_data") == "from-file"
    name = "pytest.toml" if READS_TOML else "pytest.ini"
    assert ini_data_value(pytester.path) == ("from-file", pytester.path / name)


# file layouts: {path under the test's folder: text}; pytest runs from "run/here"
LAYOUTS = {
    "setup.cfg above": {"setup.cfg": "[tool:pytest]\nprefalign_data = up\n"},
    "setup.cfg without its section": {
        "run/setup.cfg": "[metadata]\nname = x\n",
        "tox.ini": "[pytest]\nprefalign_data = tox\n",
    },
    "a pyproject's ini_options below a setup.cfg": {
        "setup.cfg": "[tool:pytest]\nprefalign_data = up\n",
        "run/pyproject.toml": '[tool.pytest.ini_options]\nprefalign_data = "pyproject"\n',
    },
    "an empty pytest.ini wins over a tox.ini": {
        "run/here/pytest.ini": "",
        "run/here/tox.ini": "[pytest]\nprefalign_data = tox\n",
    },
    "a tox.ini without [pytest] is no configuration file": {
        "run/here/tox.ini": "[tox]\nenvlist = py\n",
        "run/.pytest.ini": "[pytest]\nprefalign_data = hidden\n",
    },
    "pytest.toml before pytest.ini": {
        "run/pytest.toml": '[pytest]\nprefalign_data = "toml"\n',
        "run/pytest.ini": "[pytest]\nprefalign_data = ini\n",
    },
    "a pyproject's native table": {"run/pyproject.toml": '[tool.pytest]\nprefalign_data = "n"\n'},
    "a pyproject without pytest tables, alone": {"run/pyproject.toml": "[project]\nname = 'x'\n"},
    "a pyproject without pytest tables, a setup.cfg above": {
        "run/here/pyproject.toml": "[project]\nname = 'x'\n",
        "setup.cfg": "[tool:pytest]\nprefalign_data = up\n",
    },
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_the_configuration_file_found_is_the_one_pytest_reads(pytester, monkeypatch, layout):
    """``inifile.locate`` against the installed pytest: the file it reads (``inipath``) and
    the value (``getini``), for each layout (pytest.toml and the native table only count from
    pytest 9 on, the lone pyproject.toml from 8.1 on: both sides follow the same version)."""
    monkeypatch.delenv("PREFALIGN_DATA", raising=False)
    for name, text in LAYOUTS[layout].items():
        path = pytester.path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    here = pytester.path / "run" / "here"
    here.mkdir(parents=True, exist_ok=True)
    monkeypatch.chdir(here)
    config = pytester.parseconfig(here)
    expected = config.getini("prefalign_data") or None
    assert ini_data_value(here) == (expected, config.inipath)


class Suite:
    def __init__(self, name, source, requires_data_dir=True):
        self.name, self.source, self.requires_data_dir = name, source, requires_data_dir
        self.description, self.licence = f"{name} suite", "CC BY 4.0"


def test_data_command_lists_suites_and_places(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("PREFALIGN_DATA", raising=False)
    monkeypatch.setenv("PREFALIGN_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "setup.cfg").write_text("[tool:pytest]\nprefalign_data = data\n")
    give(tmp_path / "data")
    suites = [Suite("pref_lamp", "acl-anthology"), Suite("tldr", "openai/x", False)]
    monkeypatch.setattr(fetch, "registered_suites", lambda: suites)
    assert datadir.data_main([]) == 0
    out = capsys.readouterr().out
    assert f"  data: {tmp_path / 'data' / 'acl-anthology'}" in out
    assert "  data: no local copy: read through the datasets library" in out
    assert f"  2. ini prefalign_data: {tmp_path / 'data'} (from {tmp_path / 'setup.cfg'})" in out
    suites.append(Suite("polis", "polis"))
    assert datadir.data_main(["--data", str(tmp_path / "elsewhere")]) == 1
    out = capsys.readouterr().out
    assert "polis: polis suite\n  source: polis\n  licence: CC BY 4.0\n  data: NOT FOUND" in out
    assert f"  1. --prefalign-data: {tmp_path / 'elsewhere'}" in out
    # as in a run, the DIR given is the only place: the ini's data is not used instead
    lamp = "pref_lamp: pref_lamp suite\n  source: acl-anthology\n  licence: CC BY 4.0\n"
    assert lamp + "  data: NOT FOUND" in out


def test_data_command_reads_the_real_registry(capsys):
    datadir.data_main([])
    assert "pref_lamp: Pref-LaMP" in capsys.readouterr().out  # registered by entry point
