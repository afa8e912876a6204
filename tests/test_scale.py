"""Beyond one CPU, on the CPU: ``--prefalign-shard K/N`` and ``prefalign merge`` (two shards
merged give a single run's figures, figure by figure), pytest-xdist distributing by (suite,
size) group so that what a group shares is done once, and the parts of the GPU path that can be
checked without a GPU (the device of each xdist worker, halving the batch on out-of-memory,
``device_map=auto`` in the ini lines). The toy project is tests/test_plugin.py's."""

from __future__ import annotations

import json
import re
import shutil
import textwrap
from pathlib import Path

import machine_paths
import pytest
import test_plugin as toy_project

from pytest_prefalign import cli

# the toy project's fixtures (tests/test_plugin.py)
heavy_modules_imported_once = toy_project.heavy_modules_imported_once

# a reward method that writes a line for each fit: the work a (suite, size) shares, counted
COUNTING = """
import os

import numpy as np
from pytest_prefalign.api import RewardMethod


class Counting(RewardMethod):
    name = "counting"
    capabilities = frozenset({"prefix"})

    def fingerprint(self):
        return "counting-v1"

    def fit(self, lm, pairs, cache_dir):
        with open(os.environ["PREFALIGN_FIT_LOG"], "a") as log:
            log.write(f"{lm.label} {os.getpid()}\\n")

    def score(self, lm, batch):
        return np.array([-float(len(r)) for r in batch.responses])

    def prefix_rewards(self, lm, batch):
        return [-np.arange(1.0, len(lm.response_ids(r)) + 1) for r in batch.responses]
"""


def write_ini(pytester: pytest.Pytester, methods: str) -> None:
    """Two sizes of the tiny model (two groups), these methods, the toy data."""
    pytester.makeini(
        textwrap.dedent(f"""
        [pytest]
        prefalign_models =
            tiny = tiny
            tiny2 = tiny
        prefalign_sizes = tiny,tiny2
        prefalign_methods = {methods}
        prefalign_data = data
        """)
    )


@pytest.fixture
def toy(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """The toy project with two sizes (two groups) and a reward method that counts its fits."""
    suite = toy_project.TOY_SUITE.replace(
        "registry.add_suite(Toy())",
        "registry.add_suite(Toy())\n    registry.add_reward('counting', Counting)",
    )
    assert suite != toy_project.TOY_SUITE
    pytester.makeconftest(suite + COUNTING)
    data = pytester.mkdir("data").joinpath("toy")
    data.mkdir()
    data.joinpath("records.json").write_text(json.dumps(toy_project.RECORDS))
    pytester.mkdir("toy").joinpath("suite.toml").write_text('[suite]\nname = "toy"\n')
    monkeypatch.setenv("PREFALIGN_CACHE", str(pytester.path / "cache"))
    write_ini(pytester, "base,icl,bon[counting]")
    monkeypatch.setenv("PREFALIGN_FIT_LOG", str(pytester.path / "fits.log"))
    return pytester


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_inprocess("--prefalign", "toy", *args, "-p", "no:cacheprovider")


def figures(path: Path) -> dict:
    """Everything a run file's reader shows: the leaderboards, the summary (tau, inversions,
    regret, circular flags), the analysis and each test's figures and records."""
    from pytest_prefalign.analysis import summary, table
    from pytest_prefalign.runs import records

    run_file = records.read(path)
    return {
        # the time column is how long a test took, not a figure
        "leaderboards": [
            re.sub(r"\s+[0-9.]+s$", "", line) for line in table.leaderboards(run_file.results)
        ],
        "summary": summary.summary_lines(run_file),
        "tau": run_file.tau,
        "crisis": run_file.crisis,
        "complete": run_file.complete,
        "results": {
            r.key: (r.metrics, r.ci, r.per_user, r.pairs, r.items) for r in run_file.results
        },
    }


def test_two_shards_merged_equal_one_run_figure_by_figure(toy):
    run(toy, "--prefalign-json", "single.json").assert_outcomes(passed=6)
    first = run(toy, "--prefalign-shard", "1/2", "--prefalign-json", "s1.json", "-v")
    second = run(toy, "--prefalign-shard", "2/2", "--prefalign-json", "s2.json")
    # whole groups: one size per shard, the other's tests deselected through pytest's hook
    first.assert_outcomes(passed=3, deselected=3)
    second.assert_outcomes(passed=3, deselected=3)
    shard_one = json.loads((toy.path / "s1.json").read_text())
    assert {r["size"] for r in shard_one["results"]} == {"tiny"}
    assert shard_one["complete"] is True and shard_one["config"]["shard"] == "1/2"
    assert len(shard_one["outcomes"]["shard"]["other_shards"]) == 3
    assert shard_one["outcomes"]["deselected"] == []

    code = cli.main(["merge", str(toy.path / "s2.json"), str(toy.path / "s1.json"),
                     "--out", str(toy.path / "merged.json")])  # fmt: skip
    assert code == 0
    # the shards named from the project, as every path of a run file (portable.py)
    text = (toy.path / "merged.json").read_text()
    assert machine_paths.found(text) == [] and str(toy.path) not in text
    shards = [m["file"] for m in json.loads(text)["config"]["merged"]]
    assert shards == ["{rootdir}/s2.json", "{rootdir}/s1.json"]
    merged, single = figures(toy.path / "merged.json"), figures(toy.path / "single.json")
    assert merged["tau"] and merged["leaderboards"]  # something to compare
    for name in single:
        assert merged[name] == single[name], name
    # the gates of a single run: judged against one baseline, the merged run and the single
    # run give the same comparisons and verdict
    from pytest_prefalign.analysis import compare
    from pytest_prefalign.runs import records

    gates = compare.parse_thresholds("policy_acc:2pp,rouge1:5pp")
    single_run = records.read(toy.path / "single.json")
    verdicts = [
        compare.judge(single_run, records.read(toy.path / name), gates)
        for name in ("single.json", "merged.json")
    ]
    # (two users are too few to test a drop: each gate says so, the same way for both)
    assert verdicts[0].errors and verdicts[0].errors == verdicts[1].errors
    assert verdicts[0].notes == verdicts[1].notes
    assert [c.message() for c in verdicts[0].comparisons] == [
        c.message() for c in verdicts[1].comparisons
    ]
    assert len(verdicts[0].regressions) == len(verdicts[1].regressions)


def test_a_gated_shard_answers_for_its_own_tests_only(toy):
    run(toy, "--prefalign-save", "main").assert_outcomes(passed=6)
    gate = ("--prefalign-compare", "main", "--prefalign-compare-fail", "policy_acc:2pp")
    shard = run(toy, "--prefalign-shard", "1/2", *gate)
    # the other shard's tests are in the baseline and not in this run: not a failure here
    assert "not compared in this run" not in shard.stdout.str()
    assert shard.ret == 0
    # a test of its own that did not run still fails it
    shard = run(toy, "--prefalign-shard", "1/2", *gate, "-k", "not icl")
    assert shard.ret == 1 and "in the baseline, not compared in this run" in shard.stdout.str()


def test_merge_refuses_overlaps_missing_shards_and_other_runs(toy, capsys):
    run(toy, "--prefalign-shard", "1/2", "--prefalign-json", "s1.json")
    run(toy, "--prefalign-shard", "2/2", "--prefalign-json", "s2.json")
    run(toy, "--prefalign-shard", "2/2", "--prefalign-json", "seed1.json", "--prefalign-seed", "1")
    s1 = str(toy.path / "s1.json")

    def refused(*paths: str) -> str:
        assert cli.main(["merge", *paths, "--out", str(toy.path / "m.json")]) == 2
        return capsys.readouterr().err

    assert "shard 1/2 is given twice" in refused(s1, s1)
    assert "shard 2/2 missing: give the run files of all 2 shards" in refused(s1)
    third = json.loads((toy.path / "s2.json").read_text())
    third["config"]["shard"] = "2/3"  # as if another split (a run has 2 groups here)
    (toy.path / "third.json").write_text(json.dumps(third))
    assert "split the run differently" in refused(s1, str(toy.path / "third.json"))
    assert "seed is 0 in" in refused(s1, str(toy.path / "seed1.json"))
    # one commit, an edit between the shards: the code versions its results were keyed by
    edited = json.loads((toy.path / "s2.json").read_text())
    for row in edited["results"]:
        for use in row["cache"]:
            if use["artifact"] == "results":
                use["inputs"]["evaluation"] = "0123456789abcdef"
    (toy.path / "edited.json").write_text(json.dumps(edited))
    assert "the shards ran other code: the evaluation code" in refused(
        s1, str(toy.path / "edited.json")
    )
    # a shard given other test paths: a group would be lost between the two
    shutil.copytree(toy.path / "toy", toy.path / "elsewhere")
    toy.runpytest_inprocess(
        "--prefalign", "elsewhere", "--prefalign-shard", "2/2", "--prefalign-json", "p.json",
        "-p", "no:cacheprovider",
    )  # fmt: skip
    assert "collected other tests" in refused(s1, str(toy.path / "p.json"))
    # a test in two shards: the second shard's file made to hold a test of the first
    doc = json.loads((toy.path / "s2.json").read_text())
    doc["results"].append(json.loads((toy.path / "s1.json").read_text())["results"][0])
    (toy.path / "overlap.json").write_text(json.dumps(doc))
    assert "is in two shards" in refused(s1, str(toy.path / "overlap.json"))
    # another environment, other data: not shards of one run
    for name, change, message in (
        ("env.json", lambda row: row["environment"].update(torch="0.0"), "another environment"),
        ("data.json", lambda row: row["data"].update(fingerprint={"all": "x"}), "data"),
    ):
        doc = json.loads((toy.path / "s2.json").read_text())
        for row in doc["results"]:
            change(row)
        (toy.path / name).write_text(json.dumps(doc))
        assert message in refused(s1, str(toy.path / name))
    assert not (toy.path / "m.json").exists()


def test_shard_option_is_checked(toy):
    result = run(toy, "--prefalign-shard", "3/2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--prefalign-shard*1 <= K <= N*"])
    # two groups (one per size): a third shard would run nothing and leave no file to merge
    result = run(toy, "--prefalign-shard", "1/3")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--prefalign-shard 1/3: this run has 2 group(s) of tests (suite, size) to share*"]
    )


def test_xdist_runs_each_group_on_one_worker_and_fits_once(toy):
    write_ini(toy, "bon[counting],args[counting]")
    result = toy.runpytest_subprocess(
        "--prefalign", "toy", "-n", "2", "-v", "-p", "no:cacheprovider",
        "--prefalign-option", "max_new_tokens=4", "--prefalign-no-cache",
    )  # fmt: skip
    result.assert_outcomes(passed=4)
    # by group is the default: the plugin's scheduler sends each (suite, size) to one worker
    result.stdout.fnmatch_lines(["scheduling tests via PrefalignGroupScheduling"])
    workers: dict[str, set[str]] = {}
    for line in result.stdout.lines:
        if line.startswith("[gw") and "PASSED" in line:
            size = line.rstrip().rsplit("-", 1)[1].rstrip("]")
            workers.setdefault(size, set()).add(line.split("]")[0].lstrip("["))
    assert set(workers) == {"tiny", "tiny2"}
    assert all(len(w) == 1 for w in workers.values()), workers
    # the reward method was fitted once per (suite, size), by one process each
    fits = (toy.path / "fits.log").read_text().split()
    assert sorted(fits[0::2]) == ["tiny", "tiny2"], fits
    assert len(set(fits[1::2])) == 2  # by the two workers, one group each
