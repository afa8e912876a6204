"""benchmarks/findings_cache.py: a findings run's finished values carried to a fresh cache."""

from __future__ import annotations

import io
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import benchmark_scripts
import pytest


@pytest.fixture
def carry() -> Iterator[ModuleType]:
    yield benchmark_scripts.load("findings_cache")
    sys.modules.pop("findings_cache", None)


def a_cache(root: Path) -> None:
    """A results cache as a run leaves it part way: values, locks, a write in progress, a
    converted model, hidden states and a reward method's folder."""
    (root / "results").mkdir(parents=True)
    (root / "results" / "aa.json").write_text(
        '{"items": [{"method": "icl"}], "pairs": [{"method": "icl"}, {"method": "icl"}]}\n'
    )
    (root / "results" / "aa.json.lock").write_text("")
    (root / "results" / ".bb.json.x1.tmp").write_text('{"half')
    (root / "generations").mkdir()
    (root / "generations" / "cc.json").write_text("[2]\n")
    (root / "models" / "m1").mkdir(parents=True)
    (root / "models" / "m1" / "model.safetensors").write_bytes(b"w" * 10)
    (root / "models" / "sha256.json").write_text("{}")
    (root / "features").mkdir()
    (root / "features" / "ff.safetensors").write_bytes(b"hidden states")
    (root / "rewards" / "vpl" / "dd").mkdir(parents=True)
    (root / "rewards" / "vpl" / "dd" / "params.pt").write_bytes(b"half-fitted")
    (root / "rewards" / "ee.json").write_text('{"scale": 1}\n')


def saved(carry: ModuleType, root: Path) -> tuple[Path, Path, Path]:
    """``(source, packed, fresh)``: a part-way cache under ``root``, packed by ``save``, and
    the path of a cache still to be filled."""
    source, packed, fresh = root / "a", root / "cache.tar.gz", root / "b"
    a_cache(source)
    carry.main(["save", "--cache", str(source), "--packed", str(packed)])
    return source, packed, fresh


def test_save_carries_whole_values_only_and_restore_fills_a_fresh_cache(
    carry: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, packed, fresh = saved(carry, tmp_path)
    out = capsys.readouterr().out
    assert "packed 3 values" in out
    assert "row icl: 1 items, 2 pairs" in out
    carry.main(["restore", "--cache", str(fresh), "--packed", str(packed)])
    assert "restored 3 values" in capsys.readouterr().out
    found = sorted(p.relative_to(fresh).as_posix() for p in fresh.rglob("*") if p.is_file())
    assert found == ["generations/cc.json", "results/aa.json", "rewards/ee.json"]
    assert (fresh / "results" / "aa.json").read_bytes() == (source / "results/aa.json").read_bytes()
    carry.main(["list", "--packed", str(packed)])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith(": 3 values")
    assert lines[1:5] == [
        "  generations: 1",
        "  results: 1",
        "  rewards: 1",
        "  row icl: 1 items, 2 pairs",
    ]
    assert lines[5].startswith("  code: this checkout's ")
    assert lines[5].endswith("they are reused")


def test_the_packed_file_names_the_code_that_computed_its_rows(
    carry: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``code`` passes on the checkout that saved the rows; where a module a row's key hashes
    differs, ``code`` names it and fails, and ``restore`` says every carried row is computed
    again, naming it too."""
    here = carry.code_digests()
    assert "pytest_prefalign.evaluation.case" in here
    assert "pytest_prefalign.runtime.lm" in here
    assert "prefalign_methods.decoders.args" in here
    assert "pytest_prefalign.runs.records" in here  # imported by the evaluation: followed
    _, packed, fresh = saved(carry, tmp_path)
    carry.main(["code", "--packed", str(packed)])
    assert "are the packed rows'" in capsys.readouterr().out
    # a module new here alone (a method added since) leaves every carried row's key
    carry.code_digests = lambda: {**here, "prefalign_methods.extra": "1" * 16}
    carry.main(["code", "--packed", str(packed)])
    out = capsys.readouterr().out
    assert "are the packed rows'" in out and "prefalign_methods.extra (new here): no carried" in out
    edited = {**here, "pytest_prefalign.evaluation.case": "0" * 16}
    edited.pop("prefalign_methods.decoders.args")
    edited["prefalign_methods.extra"] = "1" * 16
    carry.code_digests = lambda: edited
    with pytest.raises(SystemExit) as failed:
        carry.main(["code", "--packed", str(packed)])
    assert failed.value.code == 1
    out = capsys.readouterr().out
    assert "2 of the modules a row's key hashes differ" in out
    assert "pytest_prefalign.evaluation.case (changed)" in out
    assert "prefalign_methods.extra (new here)" in out
    assert "prefalign_methods.decoders.args (not here)" in out
    carry.main(["restore", "--cache", str(fresh), "--packed", str(packed)])
    out = capsys.readouterr().out
    assert "computed again here" in out and "restored 3 values" in out
    assert not (fresh / carry.CODE).exists()


def test_a_packed_file_without_its_code_says_so(
    carry: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    packed = tmp_path / "old.tar.gz"
    with tarfile.open(packed, "w:gz") as tar:
        data = b'{"items": [], "pairs": []}'
        info = tarfile.TarInfo("results/aa.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    with pytest.raises(SystemExit):
        carry.main(["code", "--packed", str(packed)])
    assert "does not say which code computed its rows" in capsys.readouterr().out


def test_restore_leaves_a_value_the_cache_already_has(
    carry: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, packed, fresh = saved(carry, tmp_path)
    (fresh / "results").mkdir(parents=True)
    (fresh / "results" / "aa.json").write_text('{"items": [9], "pairs": []}\n')
    capsys.readouterr()
    carry.main(["restore", "--cache", str(fresh), "--packed", str(packed)])
    assert "restored 2 values" in capsys.readouterr().out
    assert (fresh / "results" / "aa.json").read_text() == '{"items": [9], "pairs": []}\n'


def test_the_same_values_pack_to_the_same_bytes(carry: ModuleType, tmp_path: Path) -> None:
    """No time or machine in the packed file: packing again changes nothing for git."""
    a_cache(tmp_path / "a")
    carry.save(tmp_path / "a", tmp_path / "1.tar.gz")
    (tmp_path / "a" / "results" / "aa.json").touch()  # a newer time, the same value
    carry.save(tmp_path / "a", tmp_path / "2.tar.gz")
    assert (tmp_path / "1.tar.gz").read_bytes() == (tmp_path / "2.tar.gz").read_bytes()


def test_an_empty_cache_is_an_error_naming_it(carry: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit, match="empty holds no values"):
        carry.main(["save", "--cache", str(tmp_path / "empty"), "--packed", str(tmp_path / "p")])


def test_a_missing_cache_and_a_name_outside_the_cache_are_errors_naming_them(
    carry: ModuleType, tmp_path: Path
) -> None:
    with pytest.raises(SystemExit, match="no cache at .*nowhere"):
        carry.main(["save", "--cache", str(tmp_path / "nowhere"), "--packed", str(tmp_path / "p")])
    bad = tmp_path / "bad.tar.gz"
    with tarfile.open(bad, "w:gz") as tar:
        info = tarfile.TarInfo("../escaped.json")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"{}"))
    with pytest.raises(SystemExit, match="'../escaped.json', outside a cache"):
        carry.main(["restore", "--cache", str(tmp_path / "c"), "--packed", str(bad)])
    assert not (tmp_path / "escaped.json").exists()
