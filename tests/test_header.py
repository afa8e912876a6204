"""The typed parts of a run file beside its results (``runs/header.py``): the kept run files'
configuration and outcomes read with every value they hold and written back as they were; a
run that recorded neither writes ``{}``; a key no field names is kept; a value of the wrong
type is refused naming the key."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_prefalign.analysis import comparable
from pytest_prefalign.analysis.merge import MergeError, merge
from pytest_prefalign.plumbing.outcomes import describe
from pytest_prefalign.runs import records
from pytest_prefalign.runs.header import (
    FoldFile,
    RunConfig,
    RunOutcomes,
    ShardFile,
    ShardTests,
)
from pytest_prefalign.runs.records import CaseResult, RunFile, RunFileError

ROOT = Path(__file__).resolve().parents[1]
KEPT = sorted((ROOT / "benchmarks" / "findings-runs").glob("*.json.gz"))


def stored(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


@pytest.mark.parametrize("path", KEPT, ids=[p.name for p in KEPT])
def test_a_kept_run_files_config_and_outcomes_read_typed_and_write_back(
    path: Path, tmp_path: Path
) -> None:
    data = stored(path)
    run = RunFile.from_json(data, path.name)
    assert isinstance(run.config, RunConfig) and isinstance(run.outcomes, RunOutcomes)
    assert run.config.methods == tuple(data["config"]["methods"])
    assert run.config.limit == data["config"]["limit"] and run.config.details == {}
    assert run.outcomes.selected == data["outcomes"]["selected"] and run.outcomes.details == {}
    records.write(run, tmp_path / "again.json")
    again = json.loads((tmp_path / "again.json").read_text())
    # every key and value as kept, the configuration's keys in the kept order
    assert again["config"] == data["config"] and list(again["config"]) == list(data["config"])
    assert again["outcomes"] == data["outcomes"]


def test_the_pooled_kept_run_names_its_folds_and_has_no_command_line_of_its_own() -> None:
    (path,) = [p for p in KEPT if p.name == "pref_lamp-135m.json.gz"]
    config = RunFile.from_json(stored(path), path.name).config
    assert config is not None and config.args is None and config.merged is None
    assert [f.fold for f in config.pooled_folds or ()] == [0, 1]
    assert all(isinstance(f, FoldFile) and f.args for f in config.pooled_folds or ())
    assert "args" not in config.to_json() and "merged" not in config.to_json()


def test_a_run_that_recorded_neither_writes_an_empty_object_and_reads_it_as_none() -> None:
    run = RunFile([])
    assert run.config is None and run.outcomes is None
    written = run.to_json()
    assert written["config"] == {} and written["outcomes"] == {}
    again = RunFile.from_json(written)
    assert again.config is None and again.outcomes is None
    assert describe(again.outcomes) == "no record of its tests' outcomes"


def test_given_as_json_objects_they_are_read_as_their_parts() -> None:
    run = RunFile(
        [],
        config={"methods": ["a"], "sizes": ["135m"], "shard": "1/2", "later": 3},
        outcomes={"selected": 1, "failed": ["t"], "shard": {"shard": "1/2"}},
    )
    assert run.config == RunConfig(methods=("a",), sizes=("135m",), shard="1/2",
                                   details={"later": 3})  # fmt: skip
    assert run.outcomes == RunOutcomes(selected=1, failed=("t",), shard=ShardTests("1/2"))
    # a key no field names is written back after the others
    assert list(run.to_json()["config"])[-1] == "later"
    assert run.outcomes.of("failed") == ("t",) and run.outcomes.of("passed") == ()


def test_a_value_of_the_wrong_type_is_refused_naming_the_key() -> None:
    data = RunFile([], config=RunConfig(methods=("a",))).to_json()
    with pytest.raises(RunFileError, match="field 'config': field 'methods'"):
        RunFile.from_json({**data, "config": {"methods": "a"}})
    with pytest.raises(RunFileError, match="field 'outcomes': field 'selected'"):
        RunFile.from_json({**data, "outcomes": {"selected": "2"}})


def test_shards_outcomes_join_each_shard_s_tests() -> None:
    one = RunFile([], outcomes=RunOutcomes(selected=2, passed=("b", "a"), incomplete=("x",)))
    two = RunFile([], outcomes=RunOutcomes(selected=1, failed=("c",), interrupted="stop"))
    joined = comparable.joined_outcomes([(Path("1.json"), one), (Path("2.json"), two)], every=False)
    assert (joined.selected, joined.passed, joined.failed) == (3, ("a", "b"), ("c",))
    assert (joined.interrupted, joined.incomplete) == ("stop", ("1.json: x",))


def shard_run(k: int, method: str, other: str) -> RunFile:
    """Shard ``k`` of 2: one test of ``method``, the other shard's test ``other``."""
    model = {"name": "m", "fingerprint": "f", "weights": "w"}
    row = CaseResult("s", method, "135m", decoder="bon", reward=method, n_users=1, model=model)
    config = RunConfig(methods=("a", "b"), sizes=("135m",), limit=8, reduce="mean", seed=0,
                       args=("--prefalign-shard", f"{k}/2"), shard=f"{k}/2",
                       roots={"rootdir": "the project"})  # fmt: skip
    outcomes = RunOutcomes(selected=1, passed=(method,), shard=ShardTests(f"{k}/2", (other,)))
    return RunFile([row], commit="c1", config=config, outcomes=outcomes)


def test_a_merged_run_names_its_shards_and_has_no_shard_or_command_line_of_its_own(
    tmp_path: Path,
) -> None:
    merged = merge([(Path("s1.json"), shard_run(1, "a", "b")),
                    (Path("s2.json"), shard_run(2, "b", "a"))])  # fmt: skip
    config = merged.config
    assert config is not None and (config.shard, config.args) == (None, None)
    assert config.merged == (
        ShardFile("s1.json", "1/2", ("--prefalign-shard", "1/2")),
        ShardFile("s2.json", "2/2", ("--prefalign-shard", "2/2")),
    )
    assert (config.methods, config.limit, config.roots) == (
        ("a", "b"),
        8,
        {"rootdir": "the project"},
    )
    assert merged.outcomes == RunOutcomes(selected=2, passed=("a", "b"))
    # written: no command line, the shard null, and it reads back as written
    records.write(merged, tmp_path / "merged.json")
    written = json.loads((tmp_path / "merged.json").read_text())["config"]
    assert "args" not in written and written["shard"] is None
    assert written["merged"][0] == {"file": "s1.json", "shard": "1/2",
                                    "args": ["--prefalign-shard", "1/2"]}  # fmt: skip
    assert records.read(tmp_path / "merged.json").config == config


def test_shards_that_collected_other_tests_are_refused() -> None:
    with pytest.raises(MergeError, match="collected other tests"):
        merge([(Path("s1.json"), shard_run(1, "a", "b")),
               (Path("s2.json"), shard_run(2, "b", "c"))])  # fmt: skip
