"""No path of the machine that made it in what is committed or stored: the tracked files
(the kept run files decompressed) name none, and a run file names paths from its roots
(``pytest_prefalign/portable.py``). A run made in a temporary folder is checked in
tests/test_plugin.py (``test_end_to_end_leaderboard_and_run_file``)."""

from __future__ import annotations

import gzip
import json
import subprocess
from pathlib import Path

import machine_paths
import pytest

from pytest_prefalign import portable

ROOT = Path(__file__).resolve().parents[1]


def tracked() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    return [ROOT / name for name in out.split("\0") if name and (ROOT / name).is_file()]


def text_of(path: Path) -> str | None:
    """A tracked file's text (a ``.gz`` decompressed); None for other binary files."""
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    if b"\0" in data:
        return None
    return data.decode("utf-8", errors="replace")


def test_no_tracked_file_names_a_machine_path() -> None:
    """Docs, code, the kept run files and their index: none carries a path of a machine."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    flagged = {
        str(path.relative_to(ROOT)): lines
        for path in tracked()
        if (text := text_of(path)) is not None and (lines := machine_paths.found(text))
    }
    assert flagged == {}


@pytest.mark.parametrize(
    "line, flagged",
    [
        ("  data: " + "/work" + "/shared/data/polis · 40 users", True),
        ('"file": "' + "/root" + '/.cache/prefalign/pairs/x.json"', True),
        ("--out=" + "/tmp" + "/findings.md", True),
        ("(from " + "/home" + "/ann/project/setup.cfg)", True),
        (r"C:" + "\\Users" + r"\ann\data", True),
        ("https://github.com/home/work/tmp/", False),
        ("file://" + "/tmp" + "/x", False),
        ("python ... > /dev/null; see /etc/xdg and /usr/bin/env", False),
        ("--prefalign-data /path/to/data, ~/.cache/prefalign", False),
        ("{data}/polis/football-concussions/comments.csv: record 285", False),
    ],
)
def test_what_counts_as_a_machine_path(line: str, flagged: bool) -> None:
    assert bool(machine_paths.found(line)) is flagged


def test_paths_are_written_from_the_most_specific_root(tmp_path: Path) -> None:
    home = tmp_path / "home" / "ann"
    cache = home / ".cache" / "prefalign"
    data = cache / "data"
    roots = {"data": data, "cache": cache, "~": home}
    value = {
        "source": str(data / "polis"),
        "faults": [{"file": str(data / "polis" / "votes.csv"), "line": 3}],
        "provenance": {
            "written_cache": str(cache / "pairs" / "w.json"),
            "data_errors": [f"{data / 'polis' / 'votes.csv'}: record 3: field 'vote': empty"],
            "elsewhere": str(home / "lamp5"),
            "root itself": str(data),
            "a neighbour": str(home) + "-old/x",
        },
        "n": 3,
    }
    assert portable.relative(value, roots) == {
        "source": "{data}/polis",
        "faults": [{"file": "{data}/polis/votes.csv", "line": 3}],
        "provenance": {
            "written_cache": "{cache}/pairs/w.json",
            "data_errors": ["{data}/polis/votes.csv: record 3: field 'vote': empty"],
            "elsewhere": "~/lamp5",
            "root itself": "{data}",
            "a neighbour": str(home) + "-old/x",  # not under the home folder: kept
        },
        "n": 3,
    }
    assert portable.local("{data}/polis/votes.csv", roots) == str(data / "polis" / "votes.csv")
    assert portable.local("{rootdir}/x", roots) == "{rootdir}/x"  # a root this side lacks


def test_the_machines_roots_cover_the_cache_and_the_temporary_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PREFALIGN_CACHE", str(tmp_path / "cache"))
    roots = portable.machine_roots(data=tmp_path / "data", rootdir=tmp_path / "project")
    assert set(roots) == set(portable.NAMES)
    args = ["--prefalign-json", str(tmp_path / "project" / "out.json"), str(tmp_path / "x")]
    text = json.dumps(portable.relative(args, roots))
    assert machine_paths.found(text) == []
    assert '"{rootdir}/out.json"' in text and '"{tmp}/' in text
