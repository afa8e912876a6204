"""The plugin as a new user meets it, faults injected: ids that ``--lf`` finds again, clear
usage errors, numeric junitxml properties. A small project with the toy suite of
``test_plugin.py`` and the tiny model, run inside pytest (pytester)."""

from __future__ import annotations

import json
import re
import textwrap
import xml.etree.ElementTree as ET

import pytest
from test_plugin import RECORDS, TOY_SUITE

from pytest_prefalign.analysis import catalogue


@pytest.fixture(scope="module", autouse=True)
def heavy_modules_imported_once():
    """pytester restores sys.modules after an in-process run; torch cannot be imported twice in
    one process, so everything heavy is imported here, before the first snapshot."""
    import bm25s  # noqa: F401
    import rouge_score.rouge_scorer  # noqa: F401

    import prefalign_methods.decoders.icl  # noqa: F401
    import pytest_prefalign.evaluation.case  # noqa: F401
    from pytest_prefalign.runtime.tiny import build_tiny_lm

    build_tiny_lm(0)


INI = """
[pytest]
prefalign_models = tiny = tiny
prefalign_sizes = tiny
prefalign_methods = base,icl,icl_rag
prefalign_data = data
"""

# fails the tests whose name holds FAIL_IN (an environment variable), as a floor would
FAILING = """
import os


def pytest_prefalign_check(item, result):
    wanted = os.environ.get("FAIL_IN")
    if wanted and wanted in item.name:
        return ["failed on purpose"]
"""

REWARD = """
import numpy as np
from pytest_prefalign.api import RewardMethod


class Length(RewardMethod):
    name = "length"

    def fingerprint(self):
        return self.name

    def fit(self, lm, pairs, cache_dir):
        pass

    def score(self, lm, batch):
        return np.array([len(r) for r in batch.responses], dtype=float)


def pytest_prefalign_register(registry):
    registry.add_reward("length", Length)
"""


@pytest.fixture
def toy(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    pytester.makeconftest(TOY_SUITE + FAILING)
    pytester.makeini(textwrap.dedent(INI))
    data = pytester.mkdir("data").joinpath("toy")
    data.mkdir()
    data.joinpath("records.json").write_text(json.dumps(RECORDS))
    pytester.mkdir("toy").joinpath("suite.toml").write_text('[suite]\nname = "toy"\n')
    pytester.syspathinsert()
    pytester.makepyfile(lengthrm=REWARD)
    monkeypatch.setenv("PREFALIGN_CACHE", str(pytester.path / "cache"))
    return pytester


def run(pytester: pytest.Pytester, *args: str, cache: bool = False) -> pytest.RunResult:
    """In-process (torch is imported once); pytest's cache plugin only where a test needs it.
    A Ctrl-C inside stays inside (``no_reraise_ctrlc``)."""
    extra = () if cache else ("-p", "no:cacheprovider")
    return pytester.runpytest_inprocess(
        "--prefalign", "toy", "-p", "lengthrm", *args, *extra, no_reraise_ctrlc=True
    )


# --------------------------------------------------------------------------------------------
# Ids
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("failing", ["icl_rag", "bon[length]"])
def test_lf_reruns_only_the_failed_test(toy, monkeypatch, failing):
    """pytest 9 compares ids as structured NodeIds: a test's id read back from the cache must
    equal the one collected again, nested brackets included."""
    methods = ("--prefalign-methods", "base,icl_rag,bon[length]")
    monkeypatch.setenv("FAIL_IN", failing)
    first = run(toy, *methods, cache=True)
    first.assert_outcomes(passed=2, failed=1)
    again = run(toy, *methods, "--lf", cache=True)
    again.stdout.fnmatch_lines(["run-last-failure: rerun previous 1 failure*"])
    again.assert_outcomes(failed=1)  # the others are not collected
    monkeypatch.delenv("FAIL_IN")
    fixed = run(toy, *methods, "--lf", cache=True)
    fixed.assert_outcomes(passed=1)
    first_failed = run(toy, *methods, "--ff", cache=True)
    first_failed.stdout.fnmatch_lines(["run-last-failure: no previously failed tests*"])
    first_failed.assert_outcomes(passed=3)


def test_ids_select_by_node_id_and_keyword(toy):
    methods = ("--prefalign-methods", "base,bon[length]")
    result = run(toy, *methods, "--collect-only", "-q")
    assert result.stdout.lines[:2] == [
        "toy/suite.toml::toy[base-tiny]",
        "toy/suite.toml::toy[bon[length]-tiny]",
    ]
    by_id = toy.runpytest_inprocess(
        "--prefalign", "toy/suite.toml::toy[bon[length]-tiny]", "-p", "lengthrm", *methods,
        "-p", "no:cacheprovider",
    )  # fmt: skip
    by_id.assert_outcomes(passed=1)
    run(toy, *methods, "-k", "length").assert_outcomes(passed=1, deselected=1)
    run(toy, *methods, "-k", "bon").assert_outcomes(passed=1, deselected=1)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--prefalign-methods", "base,icl,base"], "*--prefalign-methods*base given twice*"),
        (["--prefalign-sizes", "tiny,tiny"], "*--prefalign-sizes*tiny given twice*"),
    ],
)
def test_a_method_or_size_given_twice_is_a_usage_error(toy, args, message):
    result = run(toy, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def junit_properties(path) -> dict[str, dict[str, str]]:
    root = ET.parse(path).getroot()
    return {
        case.get("name", ""): {p.get("name", ""): p.get("value", "") for p in case.iter("property")}
        for case in root.iter("testcase")
    }


# --------------------------------------------------------------------------------------------
# junitxml
# --------------------------------------------------------------------------------------------


def test_junitxml_has_one_number_per_figure(toy):
    result = run(toy, "--prefalign-methods", "base,bon[length]", "--junitxml", "junit.xml")
    result.assert_outcomes(passed=2)
    props = junit_properties(toy.path / "junit.xml")
    base, bon = props["toy[base-tiny]"], props["toy[bon[length]-tiny]"]
    run_file = json.loads(next((toy.path / ".prefalign" / "runs").glob("0001_*.json")).read_text())
    row = next(r for r in run_file["results"] if r["method"] == "bon[length]")
    assert float(bon["prefalign.rm_acc"]) == pytest.approx(row["metrics"]["rm_acc"], abs=1e-6)
    low, high = row["ci"]["rm_acc"]
    assert float(bon["prefalign.rm_acc.ci_low"]) == pytest.approx(low, abs=1e-6)
    assert float(bon["prefalign.rm_acc.ci_high"]) == pytest.approx(high, abs=1e-6)
    assert (base["prefalign.n_users"], base["prefalign.n_items"], base["prefalign.n_pairs"]) == (
        "2",
        "3",
        "3",
    )
    for name, value in (*base.items(), *bon.items()):  # numbers only, no result dict
        assert name.startswith("prefalign."), name
        float(value)


def test_junitxml_under_xdist_keeps_the_results_out(toy):
    result = toy.runpytest_subprocess(
        "--prefalign", "toy", "-n", "2", "--junitxml", "junit.xml", "--prefalign-json",
        "out.json", "-p", "no:cacheprovider",
    )  # fmt: skip
    result.assert_outcomes(passed=3)
    rows = json.loads((toy.path / "out.json").read_text())["results"]
    assert sorted(r["method"] for r in rows) == ["base", "icl", "icl_rag"]
    props = junit_properties(toy.path / "junit.xml")
    assert len(props) == 3
    # a figure and its interval per metric, and the three counts: no result dict
    most = 3 * len(catalogue.METRICS) + 3
    assert all("prefalign.policy_acc" in p and len(p) <= most for p in props.values())


# --------------------------------------------------------------------------------------------
# Faults in the cache
# --------------------------------------------------------------------------------------------


def test_truncated_results_and_generation_are_named_once_and_computed_again(toy):
    run(toy, "--prefalign-methods", "base").assert_outcomes(passed=1)
    paths = [
        *(toy.path / "cache" / "results").glob("*.json"),
        *(toy.path / "cache" / "generations").glob("*.json"),
    ]
    assert len(paths) == 2
    for path in paths:
        path.write_text(path.read_text()[:10])
    result = run(toy, "--prefalign-methods", "base", "-rw")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines_random(
        [
            f"  {path}:0: CacheWarning: unreadable cache entry {path} (JSONDecodeError*"
            for path in paths
        ]
    )
    assert "Traceback" not in result.stdout.str()
    again = run(toy, "--prefalign-methods", "base")
    again.assert_outcomes(passed=1)
    again.stdout.fnmatch_lines(["cache: 1 of 1 values reused*"])  # the results, whole


def test_leftovers_of_a_killed_write_are_removed_at_the_next_run(toy):
    models = toy.path / "cache" / "models"
    killed = models / ".0123abcd.k1ll.tmp"
    killed.mkdir(parents=True)
    (killed / "model.safetensors").write_bytes(b"half a model")
    (models / "0123abcd.lock").touch()  # its writer's lock, free: nobody is converting
    result = run(toy, "--prefalign-methods", "base")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["prefalign: removed 1 leftover temporary file(s) *"])
    assert not killed.exists()


def test_the_header_says_how_the_threads_wait(toy, monkeypatch):
    # the tests' own setting (conftest) taken away: the run chooses, here by PREFALIGN_WAIT
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.setenv("PREFALIGN_WAIT", "passive")
    result = run(toy, "--prefalign-methods", "base")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "prefalign: OpenMP threads sleep between ops (OMP_WAIT_POLICY=PASSIVE): "
            "PREFALIGN_WAIT=passive"
        ]
    )
    monkeypatch.delenv("OMP_WAIT_POLICY")  # the run set it in this process
    monkeypatch.setenv("PREFALIGN_WAIT", "never")
    result = run(toy, "--prefalign-methods", "base")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*PREFALIGN_WAIT='never': expected spin or passive*"])


# --------------------------------------------------------------------------------------------
# Paths
# --------------------------------------------------------------------------------------------


def test_an_explicit_data_dir_that_does_not_exist_is_a_usage_error(toy):
    result = run(toy, "--prefalign-data", "/no/such/dir")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--prefalign-data /no/such/dir: no such directory*"])


def test_an_explicit_data_dir_without_the_suites_data_is_a_usage_error(toy):
    toy.mkdir("elsewhere")  # exists, but holds no toy/; the ini's data must not stand in
    result = run(toy, "--prefalign-data", "elsewhere")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"*--prefalign-data {toy.path / 'elsewhere'}: holds no toy/ (suite toy)*"]
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--prefalign-json", "afile/out.json"], "*--prefalign-json */out.json: *not a folder"),
        (["--prefalign-json", "."], "*--prefalign-json *: is a folder; give a file*"),
        (["--prefalign-report", "afile"], "*--prefalign-report */afile: exists and is not a*"),
    ],
)  # fmt: skip
def test_output_paths_are_checked_before_any_work(toy, args, message):
    toy.path.joinpath("afile").write_text("a file, not a folder")
    result = run(toy, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert not (toy.path / "cache").exists()  # nothing ran


def test_a_failed_write_at_the_end_is_one_line_after_the_leaderboard(toy, monkeypatch):
    from pytest_prefalign.runs import records

    real = records.write

    def full_disk(run, path):
        if path.name == "out.json":
            raise OSError(28, "No space left on device", str(path))
        real(run, path)

    monkeypatch.setattr(records, "write", full_disk)
    result = run(toy, "--prefalign-methods", "base", "--prefalign-json", "out.json")
    result.stdout.fnmatch_lines(
        [
            "*prefalign leaderboard*",
            "*base*",
            "run file: *0001_*.json",
            f"prefalign: could not write --prefalign-json {toy.path / 'out.json'}: "
            "No space left on device",
        ]
    )
    assert "Traceback" not in result.stdout.str() and "INTERNALERROR" not in result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # the test passed, the file is missing


# --------------------------------------------------------------------------------------------
# Missing data
# --------------------------------------------------------------------------------------------


def test_missing_data_fails_in_full_once_per_suite_with_the_fetch_command(toy):
    # a suite that names a builder, as pref_lamp and polis do
    toy.makeconftest(
        TOY_SUITE.replace('    source = "toy"', '    source = "toy"\n    fetcher = "x"')
    )
    (toy.path / "data" / "toy" / "records.json").unlink()
    (toy.path / "data" / "toy").rmdir()
    result = run(toy)
    result.assert_outcomes(failed=3)
    # counted in the failures section: the short summary repeats each message, in full on CI
    # (where pytest does not cut it to the terminal's width)
    out = result.stdout.str().split("short test summary info")[0]
    assert out.count("data folder toy/ not found; looked in:") == 1
    result.stdout.fnmatch_lines(
        [
            "*suite 'toy': data folder toy/ not found; looked in:",
            "*Fetch its data with: prefalign data fetch toy",
            "*suite 'toy' could not load: see the failure of toy[[]base-tiny[]] above; fetch its "
            "data with: prefalign data fetch toy",
        ]
    )
    assert out.count("could not load: see the failure of toy[base-tiny] above") == 2
    assert len(result.stdout.lines) < 60


# --------------------------------------------------------------------------------------------
# Complete and partial runs
# --------------------------------------------------------------------------------------------

CTRL_C = """
def pytest_runtest_logfinish(nodeid, location):
    raise KeyboardInterrupt  # Ctrl-C once the first test is over
"""


def run_files(pytester: pytest.Pytester) -> list[tuple[str, dict]]:
    folder = pytester.path / ".prefalign" / "runs"
    return [(p.name, json.loads(p.read_text())) for p in sorted(folder.glob("*.json"))]


def test_a_run_without_a_result_leaves_no_earlier_file_at_its_json_path(toy):
    # a CI step reading --prefalign-json must not take an earlier run's file for this one's
    out = toy.path / "out.json"
    args = ("--prefalign-methods", "base", "--prefalign-json", str(out))
    assert run(toy, *args).ret == 0 and out.is_file()
    run(toy, *args, "--collect-only")  # not a run: the file stays
    assert out.is_file()
    result = run(toy, *args, "-k", "no_such_test")  # every test deselected: no result
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED and not out.exists()
    result.stdout.fnmatch_lines(
        [
            f"prefalign: --prefalign-json: no test left a result, so nothing was written to "
            f"{out} (the earlier file there was removed)"
        ]
    )


# xdist runs a crashed worker's test again on a new worker, whose report may come after the
# first one's: here base's call report is handed to the hooks again after icl's
REPORTED_AGAIN = """

_reports = {}


def pytest_configure(config):
    _reports["config"] = config


def pytest_runtest_logreport(report):
    if report.when != "call":
        return
    if "[base-" in report.nodeid and "base" not in _reports:
        _reports["base"] = report
    elif "[icl-" in report.nodeid and "base" in _reports:
        _reports["config"].hook.pytest_runtest_logreport(report=_reports.pop("base"))
"""


def test_a_test_reported_twice_counts_once_in_a_single_runs_order(toy):
    conftest = toy.path / "conftest.py"
    conftest.write_text(conftest.read_text() + REPORTED_AGAIN)
    out = toy.path / "out.json"
    result = run(toy, "--prefalign-methods", "base,icl", "--prefalign-json", str(out))
    assert result.ret == 0
    run_file = json.loads(out.read_text())  # one result per test: the file reads back
    assert [r["method"] for r in run_file["results"]] == ["base", "icl"]
    from pytest_prefalign.runs import records

    assert records.read(out).results[0].method == "base"


def test_an_interrupted_run_writes_a_run_file_marked_partial(toy):
    toy.makepyfile(ctrlc=CTRL_C)
    result = run(toy, "--prefalign-methods", "base,icl", "-p", "ctrlc")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        ["*this run is partial (interrupted (KeyboardInterrupt); 1 test(s) not run)*"]
    )
    ((name, data),) = run_files(toy)
    assert name.startswith("0001_") and name.endswith(".partial.json")
    assert data["complete"] is False and [r["method"] for r in data["results"]] == ["base"]
    outcomes = data["outcomes"]
    assert outcomes["interrupted"] == "KeyboardInterrupt"
    assert outcomes["passed"] == ["toy/suite.toml::toy[base-tiny]"]
    assert outcomes["not_run"] == ["toy/suite.toml::toy[icl-tiny]"]


def test_deselected_tests_make_a_run_partial_and_a_floor_does_not(toy):
    run(toy, "-k", "icl_rag").assert_outcomes(passed=1, deselected=2)
    floor = run(toy, "--prefalign-methods", "base", "--prefalign-fail-under", "rouge1=0.99")
    floor.assert_outcomes(failed=1)
    (_, deselected), (name, floored) = run_files(toy)
    assert deselected["complete"] is False
    assert deselected["outcomes"]["deselected"] == [
        "toy/suite.toml::toy[base-tiny]",
        "toy/suite.toml::toy[icl-tiny]",
    ]
    assert deselected["outcomes"]["incomplete"] == ["2 test(s) deselected"]
    # a test failed by its floor has its figures: the run is complete
    assert floored["complete"] is True and not name.endswith(".partial.json")
    assert floored["outcomes"]["failed"] == ["toy/suite.toml::toy[base-tiny]"]


def test_a_test_failed_in_its_method_leaves_the_run_partial(toy, monkeypatch):
    toy.makepyfile(
        broken="""
def pytest_prefalign_register(registry):
    class Broken:
        name = "broken"
        def fingerprint(self):
            return "broken"
        def fit(self, lm, pairs, cache_dir):
            raise ValueError("no")
    registry.add_reward("broken", Broken)
"""
    )
    run(toy, "--prefalign-methods", "base,bon[broken]", "-p", "broken").assert_outcomes(
        passed=1, failed=1
    )
    ((_, data),) = run_files(toy)
    assert data["complete"] is False
    assert data["outcomes"]["incomplete"] == ["1 test(s) without a result (1 failed)"]


def test_the_gate_refuses_a_partial_baseline_unless_allowed(toy):
    toy.makepyfile(ctrlc=CTRL_C)
    run(toy, "--prefalign-methods", "base,icl", "-p", "ctrlc", "--prefalign-save", "main")
    refused = run(toy, "--prefalign-methods", "base,icl", "--prefalign-compare", "main")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(
        [
            "*--prefalign-compare: the baseline */main.json is a partial run (interrupted "
            "(KeyboardInterrupt); 1 test(s) not run); compare with a complete run, or pass "
            "--prefalign-allow-partial*"
        ]
    )
    allowed = run(
        toy, "--prefalign-methods", "base,icl", "--prefalign-compare", "main",
        "--prefalign-allow-partial",
    )  # fmt: skip
    allowed.assert_outcomes(passed=2)
    allowed.stdout.fnmatch_lines(["*new, not in the baseline: icl on toy (tiny)*"])


def test_prefalign_compare_notes_a_partial_run(toy, capsys, monkeypatch):
    from pytest_prefalign import cli

    toy.makepyfile(ctrlc=CTRL_C)
    run(toy, "--prefalign-methods", "base,icl", "-p", "ctrlc")
    run(toy, "--prefalign-methods", "base,icl")
    partial, complete = sorted((toy.path / ".prefalign" / "runs").glob("*.json"))
    capsys.readouterr()
    monkeypatch.chdir(toy.path)
    assert cli.main(["compare", str(partial), str(complete)]) == 0
    out = capsys.readouterr().out
    assert "note: the baseline is a partial run (interrupted (KeyboardInterrupt); 1 test(s) " in out
    assert "new, not in the baseline: icl on toy (tiny)" in out


def test_xdist_workers_hand_their_deselected_tests_to_the_controller(toy):
    result = toy.runpytest_subprocess(
        "--prefalign", "toy", "-n", "2", "-k", "icl_rag", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=1)
    ((name, data),) = run_files(toy)
    assert name.endswith(".partial.json") and data["complete"] is False
    assert len(data["outcomes"]["deselected"]) == 2


# --------------------------------------------------------------------------------------------
# Live progress
# --------------------------------------------------------------------------------------------

SLOW_DECODER = """
import time

from prefalign_methods.decoders.base import BaseDecoder
from pytest_prefalign import events


class Slow(BaseDecoder):
    name = "slow"

    def generate(self, ctx, items):
        with events.step("thinking", total=3, unit="rounds") as progress:
            for _ in range(3):
                time.sleep(0.4)
                progress.advance()
        return super().generate(ctx, items)


def pytest_prefalign_register(registry):
    registry.add_decoder("slow", Slow)
"""

ON_A_TERMINAL = """
import pytest


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    config.pluginmanager.getplugin("terminalreporter").isatty = lambda: True
"""


@pytest.fixture
def slow(toy, monkeypatch):
    """A decoder that takes 1.2 s, and progress shown after 0.1 s instead of 2 s."""
    from pytest_prefalign.plumbing import progress

    monkeypatch.setattr(progress, "DELAY", 0.1)
    monkeypatch.setattr(progress, "TICK", 0.05)
    toy.makepyfile(slowdecoder=SLOW_DECODER, onterminal=ON_A_TERMINAL)
    return toy


def test_progress_in_a_log_is_a_line_per_long_step(slow):
    result = run(slow, "--prefalign-methods", "slow,base", "-p", "slowdecoder")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "toy/suite.toml ",
            "  toy[[]slow-tiny[]] · generating slow (3 items) › thinking ?/3 rounds",
            "toy/suite.toml .*",  # pytest's line goes on below
        ]
    )
    assert result.stdout.str().count("toy[slow-tiny] · generating slow") == 1


def test_progress_on_a_terminal_is_one_status_line_rewritten(slow):
    result = run(slow, "--prefalign-methods", "slow", "-p", "slowdecoder", "-p", "onterminal")
    result.assert_outcomes(passed=1)
    out = result.stdout.str()  # its lines split at "\r" too: one per rewrite
    statuses = [line.strip() for line in result.stdout.lines if "toy[slow-tiny] ·" in line]
    assert any("generating slow (3 items) › thinking" in s for s in statuses)
    # at the end, where the test's time went; then pytest's own line again
    assert re.search(r"toy\[slow-tiny\] · \d+s \(generating slow \(3 items\) \d+s\)", out)
    result.stdout.fnmatch_lines(["toy/suite.toml .*"])


@pytest.mark.parametrize("isatty", [True, False])
def test_a_terminal_is_told_by_the_reporters_boolean_or_method(isatty):
    """pytest's terminal reporter has ``isatty`` a boolean before 8.4.1, a method after."""
    from types import SimpleNamespace

    from pytest_prefalign.plumbing.progress import on_a_terminal

    assert on_a_terminal(SimpleNamespace(isatty=isatty)) is isatty
    assert on_a_terminal(SimpleNamespace(isatty=lambda: isatty)) is isatty


def test_progress_is_quiet_under_q_and_goes_to_the_log_with_log_cli(slow):
    quiet = run(slow, "--prefalign-methods", "slow", "-p", "slowdecoder", "-q")
    quiet.assert_outcomes(passed=1)
    assert "toy[slow-tiny] ·" not in quiet.stdout.str()
    logged = run(
        slow, "--prefalign-methods", "slow", "-p", "slowdecoder", "--log-cli-level=INFO",
        "--prefalign-no-cache",
    )  # fmt: skip
    logged.assert_outcomes(passed=1)
    logged.stdout.fnmatch_lines(
        [
            "*live log call*",
            "INFO     prefalign:* generating slow (3 items)",
            "INFO     prefalign:* scoring 3 pairs",
        ]
    )
    assert "toy[slow-tiny] ·" not in logged.stdout.str()  # the log lines say it already


# --------------------------------------------------------------------------------------------
# The prefalign command
# --------------------------------------------------------------------------------------------


def test_the_command_has_a_version_and_plain_help(capsys):
    from importlib.metadata import version

    from pytest_prefalign import cli

    assert cli.main(["--version"]) == 0
    assert (
        capsys.readouterr().out == f"prefalign (pytest-prefalign) {version('pytest-prefalign')}\n"
    )
    assert cli.main(["-V"]) == 0
    capsys.readouterr()
    assert cli.main(["--help"]) == 0
    helps = [capsys.readouterr().out]
    for argv in (["data", "--help"], ["data", "fetch", "--help"], ["compare", "--help"],
                 ["report", "--help"]):  # fmt: skip
        try:
            cli.main(argv)
        except SystemExit:  # argparse exits after --help
            pass
        helps.append(capsys.readouterr().out)
    assert helps[0].startswith("usage: prefalign COMMAND") and "--version" in helps[0]
    for text in helps:
        assert text.strip() and "`" not in text, text


def test_the_report_carries_each_suites_licence_and_attribution(toy):
    pytest.importorskip("matplotlib")
    attributed = '    licence = "CC0"\n    attribution = "Toy data by Ann and Bob"'
    toy.makeconftest(TOY_SUITE.replace('    licence = "CC0"', attributed))
    result = run(toy, "--prefalign-methods", "base", "--prefalign-report", "rep")
    result.assert_outcomes(passed=1)
    page = (toy.path / "rep" / "report.html").read_text()
    assert "licence: CC0" in page and "attribution: Toy data by Ann and Bob" in page
    ((_, data),) = run_files(toy)
    provenance = data["results"][0]["data"]["provenance"]
    assert (provenance["licence"], provenance["attribution"]) == ("CC0", "Toy data by Ann and Bob")
